/*
 * test-mproc-torn.c -- one writer and four readers, separate processes, on
 * the same tables for HPS_TEST_DURATION_S seconds (default 10).
 *
 * Two tables share the segment: dim 16 over 8 partitions and dim 128 over 4,
 * 4096 keys each, so the writer keeps rewriting the same buckets the readers
 * copy.  Every row is self-checking (rowcheck.h): element 0 is the row's
 * version and every other element a hash of (key, version, element).
 *
 * Writer: upsert batches of 1..64 random keys (duplicates within a batch
 *   too), each write with the key's next version; erase batches (15%), so
 *   keys are erased and reinserted all the time; now and then a batch of
 *   1024.  At the end it looks up every key and compares with what it wrote.
 * Readers: batch lookups of 1..256 random keys (duplicates too) and, every
 *   few hundred batches, a full iterate; every found row must verify, and
 *   the output row of every missing key must hold the table's default value
 *   (the buffer is filled with a sentinel before each call; shmdb_table.h: "Rows
 *   of missing keys are filled with the table's default value").  They
 *   also count "regressions" (a key seen at an older version than this
 *   reader saw before), which are reported but not failed on: the design
 *   promises untorn rows, not monotonic reads.
 * Every child attaches on its own after fork (the parent holds no handle
 * while forking) and reports through a shared anonymous mapping and its exit
 * status.  Required: torn = 0, no missing row overwritten, every reader had hits, the writer's
 * final view is exact, hps_shmdb_check finds nothing afterwards.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cmocka.h>

#include "rowcheck.h"
#include "testutil.h"

#define READERS 4
#define NKEYS   4096
#define NTABLES 2
#define SEG     (256ULL << 20)

static const uint32_t dims[NTABLES] = {16, 128};
static const uint32_t parts[NTABLES] = {8, 4};

struct child_stats {
    uint64_t batches;
    uint64_t lookups;
    uint64_t hits;
    uint64_t torn;
    uint64_t scribbled; /* missing rows whose output was overwritten */
    uint64_t iterations;
    uint64_t iter_rows;
    uint64_t regressions;
    uint64_t writes;
    uint64_t erases;
    char first_torn[600];
    char first_scribble[256];
};

struct shared {
    uint64_t deadline_ns;
    uint64_t seed;
    struct child_stats st[READERS + 1]; /* [READERS] = writer */
};

static char seg_name[T_NAME_LEN];

static uint64_t key_of(uint32_t t, uint32_t i)
{
    /* Distinct per table; spread over the 64-bit range, some negative. */
    return row_mix(((uint64_t)t << 32) | i) ^ 0x8000000000000000ULL;
}

/* ------------------------------------------------------------------------ */

static void writer_main(struct shared *sh)
{
    t_child_mode();
    struct child_stats *st = &sh->st[READERS];
    hps_shmdb_t *db = t_attach(seg_name, HPS_ROLE_WORKER);
    uint64_t rng = sh->seed ^ 0xA5A5A5A5ULL;
    static uint32_t ver[NTABLES][NKEYS];
    static uint8_t present[NTABLES][NKEYS];
    for (uint32_t t = 0; t < NTABLES; t++)
        for (uint32_t i = 0; i < NKEYS; i++) {
            ver[t][i] = 1; /* the parent's prefill */
            present[t][i] = 1;
        }
    enum { MAXB = 1024 };
    static int64_t keys[MAXB];
    static uint32_t idx[MAXB];
    static float vals[MAXB * 128];
    uint64_t ops = 0;
    while (t_now_ns() < sh->deadline_ns) {
        uint32_t t = (uint32_t)(ops++ & 1);
        uint32_t dim = dims[t];
        uint64_t r = t_rng_below(&rng, 1000);
        size_t n = r < 5 ? MAXB : 1 + t_rng_below(&rng, 64);
        for (size_t j = 0; j < n; j++) {
            idx[j] = j > 0 && t_rng_below(&rng, 8) == 0 ? idx[t_rng_below(&rng, j)]
                                                        : (uint32_t)t_rng_below(&rng, NKEYS);
            keys[j] = (int64_t)key_of(t, idx[j]);
        }
        if (r >= 850) {
            size_t erased = 0;
            HPS_ASSERT_OK(hps_shmdb_erase(db, t, n, keys, &erased));
            for (size_t j = 0; j < n; j++)
                present[t][idx[j]] = 0;
            st->erases += erased;
        } else {
            for (size_t j = 0; j < n; j++) {
                uint32_t v = ++ver[t][idx[j]];
                if (v >= ROW_VER_MAX)
                    T_FAIL("version counter of key %u overflowed", idx[j]);
                row_fill(&vals[j * dim], dim, (uint64_t)keys[j], v);
                present[t][idx[j]] = 1;
            }
            HPS_ASSERT_OK(hps_shmdb_upsert(db, t, n, keys, vals, NULL));
            st->writes += n;
        }
        st->batches++;
    }
    /* Final view: exactly what was written last. */
    static uint8_t found[NKEYS];
    static float all[NKEYS * 128];
    static int64_t allk[NKEYS];
    for (uint32_t t = 0; t < NTABLES; t++) {
        for (uint32_t i = 0; i < NKEYS; i++)
            allk[i] = (int64_t)key_of(t, i);
        HPS_ASSERT_OK(hps_shmdb_lookup(db, t, NKEYS, allk, all, found, NULL));
        uint64_t rows = 0;
        for (uint32_t i = 0; i < NKEYS; i++) {
            if (found[i] != present[t][i])
                T_FAIL("writer's final view: table %u key #%u found=%u, written present=%u", t, i,
                       found[i], present[t][i]);
            if (!found[i])
                continue;
            rows++;
            char msg[512];
            uint32_t v = 0;
            if (row_verify(&all[(size_t)i * dims[t]], dims[t], (uint64_t)allk[i], &v, msg,
                           sizeof(msg)))
                T_FAIL("writer's final view: %s", msg);
            if (v != ver[t][i])
                T_FAIL("writer's final view: table %u key #%u at version %u, last written %u", t, i,
                       v, ver[t][i]);
        }
        uint64_t size = 0;
        HPS_ASSERT_OK(hps_shmdb_size(db, t, &size));
        HPS_ASSERT_EQ(size, rows);
    }
    hps_shmdb_detach(db);
    _exit(0);
}

/* ------------------------------------------------------------------------ */

struct reader_iter {
    struct child_stats *st;
    uint32_t dim;
    uint64_t rows;
};

static int reader_iter_fn(void *ctx, uint64_t key, const float *value)
{
    struct reader_iter *c = ctx;
    char msg[512];
    uint32_t v;
    c->rows++;
    if (row_verify(value, c->dim, key, &v, msg, sizeof(msg))) {
        if (c->st->torn++ == 0)
            snprintf(c->st->first_torn, sizeof(c->st->first_torn), "iterate: %s", msg);
    }
    return 0;
}

static void reader_main(struct shared *sh, int r)
{
    t_child_mode();
    struct child_stats *st = &sh->st[r];
    hps_shmdb_t *db = t_attach(seg_name, HPS_ROLE_WORKER);
    uint64_t rng = sh->seed + 7919 * (uint64_t)(r + 1);
    static uint32_t last[NTABLES][NKEYS];
    enum { MAXB = 256 };
    static int64_t keys[MAXB];
    static uint32_t idx[MAXB];
    static float vals[MAXB * 128];
    static uint8_t found[MAXB];
    while (t_now_ns() < sh->deadline_ns) {
        uint32_t t = (uint32_t)t_rng_below(&rng, NTABLES);
        uint32_t dim = dims[t];
        size_t n = 1 + t_rng_below(&rng, MAXB);
        for (size_t j = 0; j < n; j++) {
            idx[j] = j > 0 && t_rng_below(&rng, 8) == 0 ? idx[t_rng_below(&rng, j)]
                                                        : (uint32_t)t_rng_below(&rng, NKEYS);
            keys[j] = (int64_t)key_of(t, idx[j]);
        }
        size_t hits = 0;
        row_poison(vals, n * dim);
        HPS_ASSERT_OK(hps_shmdb_lookup(db, t, n, keys, vals, found, &hits));
        size_t h2 = 0;
        for (size_t j = 0; j < n; j++) {
            if (found[j] > 1)
                T_FAIL("found[%zu] = %u", j, found[j]);
            if (!found[j]) {
                long d = row_is_default(&vals[j * dim], dim, T_DEFAULT_VALUE);
                if (d >= 0 && st->scribbled++ == 0)
                    snprintf(st->first_scribble, sizeof(st->first_scribble),
                             "key %" PRId64 " (dim %u) reported missing, but element %ld of its "
                             "output row is not the default value (= %a)",
                             keys[j], dim, d, (double)vals[j * dim + (size_t)d]);
                continue;
            }
            h2++;
            char msg[512];
            uint32_t v = 0;
            if (row_verify(&vals[j * dim], dim, (uint64_t)keys[j], &v, msg, sizeof(msg))) {
                if (st->torn++ == 0)
                    snprintf(st->first_torn, sizeof(st->first_torn), "lookup: %s", msg);
                continue;
            }
            if (v < last[t][idx[j]])
                st->regressions++;
            else
                last[t][idx[j]] = v;
        }
        HPS_ASSERT_EQ(hits, h2);
        st->lookups += n;
        st->hits += hits;
        st->batches++;
        if (st->batches % 500 == 0) {
            struct reader_iter c = {st, dim, 0};
            HPS_ASSERT_OK(hps_shmdb_iterate(db, t, reader_iter_fn, &c));
            st->iterations++;
            st->iter_rows += c.rows;
        }
    }
    hps_shmdb_detach(db);
    _exit(st->torn || st->scribbled ? 1 : 0);
}

/* ------------------------------------------------------------------------ */

static void test_torn_rows(void **state)
{
    (void)state;
    struct shared *sh =
        mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    T_CHECK(sh != MAP_FAILED, "mmap");
    memset(sh, 0, sizeof(*sh));
    sh->seed = t_seed("torn");
    long secs = t_env_long("HPS_TEST_DURATION_S", 10);

    /* Set up the tables and prefill every key at version 1. */
    t_segname(seg_name, "torn");
    hps_shmdb_t *db = NULL;
    hps_shmdb_opts_t o = t_opts(SEG);
    HPS_ASSERT_OK(hps_shmdb_create(seg_name, &o, NULL, &db));
    static int64_t keys[NKEYS];
    static float vals[NKEYS * 128];
    for (uint32_t t = 0; t < NTABLES; t++) {
        char tn[16];
        snprintf(tn, sizeof(tn), "dim%u", dims[t]);
        hps_table_spec_t s =
            t_spec("torn", tn, dims[t], 8, parts[t], UINT64_MAX, HPS_EVICT_OLDEST, 0.8);
        s.expected_rows = t == 0 ? 0 : NKEYS; /* one table grows while in use */
        uint32_t id;
        HPS_ASSERT_OK(hps_shmdb_table_create(db, &s, &id));
        HPS_ASSERT_EQ(id, t);
        for (uint32_t i = 0; i < NKEYS; i++) {
            keys[i] = (int64_t)key_of(t, i);
            row_fill(&vals[(size_t)i * dims[t]], dims[t], (uint64_t)keys[i], 1);
        }
        HPS_ASSERT_OK(hps_shmdb_upsert(db, id, NKEYS, keys, vals, NULL));
    }
    hps_shmdb_detach(db);
    db = NULL;

    sh->deadline_ns = t_now_ns() + (uint64_t)secs * 1000000000ULL;
    pid_t pids[READERS + 1];
    for (int c = 0; c <= READERS; c++) {
        pids[c] = t_fork();
        if (pids[c] == 0) {
            if (c == READERS)
                writer_main(sh);
            else
                reader_main(sh, c);
        }
    }
    int failed = 0;
    for (int c = 0; c <= READERS; c++) {
        int status;
        char buf[64];
        if (!t_wait_timeout(pids[c], (uint64_t)secs * 1000 + 60000, &status)) {
            print_error("%s %d hung; killed\n", c == READERS ? "writer" : "reader", pids[c]);
            failed = 1;
            continue;
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            print_error("%s %d ended with %s\n", c == READERS ? "writer" : "reader", pids[c],
                        t_status_str(status, buf, sizeof(buf)));
            failed = 1;
        }
    }
    uint64_t lookups = 0, hits = 0, torn = 0, iter_rows = 0, regressions = 0, scribbled = 0;
    for (int c = 0; c < READERS; c++) {
        struct child_stats *st = &sh->st[c];
        t_note("reader %d: %" PRIu64 " batches, %" PRIu64 " keys, %" PRIu64 " hits, %" PRIu64
               " iterations (%" PRIu64 " rows), torn %" PRIu64 ", missing rows not default %" PRIu64
               ", regressions %" PRIu64,
               c, st->batches, st->lookups, st->hits, st->iterations, st->iter_rows, st->torn,
               st->scribbled, st->regressions);
        if (st->torn)
            print_error("reader %d first torn row: %s\n", c, st->first_torn);
        if (st->scribbled)
            print_error("reader %d: %" PRIu64 " missing rows not default; first: %s\n", c,
                        st->scribbled, st->first_scribble);
        if (st->hits == 0) {
            print_error("reader %d found nothing in %" PRIu64 " lookups\n", c, st->lookups);
            failed = 1;
        }
        lookups += st->lookups;
        hits += st->hits;
        torn += st->torn;
        scribbled += st->scribbled;
        iter_rows += st->iter_rows;
        regressions += st->regressions;
    }
    struct child_stats *w = &sh->st[READERS];
    t_note("writer: %" PRIu64 " batches, %" PRIu64 " rows written, %" PRIu64 " erased", w->batches,
           w->writes, w->erases);
    t_note("total: %" PRIu64 " keys looked up, %" PRIu64 " hits (%.1f%%), %" PRIu64
           " rows iterated, torn=%" PRIu64 ", missing rows not default=%" PRIu64
           ", regressions=%" PRIu64 " in %ld s",
           lookups, hits, lookups ? 100.0 * (double)hits / (double)lookups : 0.0, iter_rows, torn,
           scribbled, regressions, secs);

    HPS_ASSERT_OK(hps_shmdb_attach(seg_name, NULL, &db));
    uint64_t problems = t_check(db, "torn");
    hps_shmdb_detach(db);
    hps_shmdb_unlink(seg_name);
    uint64_t writes = w->writes;
    munmap(sh, sizeof(*sh));
    HPS_ASSERT_EQ(torn, 0);
    HPS_ASSERT_EQ(scribbled, 0);
    HPS_ASSERT_EQ(problems, 0);
    HPS_ASSERT_GT(writes, 0);
    T_CHECK(!failed, "a child process failed (see above)");
}

static int teardown(void **state)
{
    (void)state;
    t_unlink_all();
    return 0;
}

int main(void)
{
    t_install_cleanup();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_torn_rows, teardown),
    };
    return cmocka_run_group_tests_name("mproc-torn", tests, NULL, NULL);
}
