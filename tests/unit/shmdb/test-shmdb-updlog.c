/*
 * test-shmdb-updlog.c -- the segment's per-table update logs and update
 * statistics: keys come back in append order with their sequence numbers, a
 * reader older than the ring is told it was lapped, 4-byte keys keep their
 * width, a reader racing a writer in another process never sees a key under
 * a wrong sequence (torn), and update statistics and the distributed DB's
 * counters round-trip between processes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "testutil.h"

struct fixture {
    char name[T_NAME_LEN];
    hps_shmdb_t *db;
    uint32_t id;
};

/* The key appended with sequence s (a bijection, never 0 for s > 0). */
static uint64_t key_of(uint64_t s)
{
    return s * 0x9E3779B97F4A7C15ULL;
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    hps_shmdb_opts_t o = t_opts(64u << 20);
    t_segname(f->name, "updlog");
    HPS_ASSERT_OK(hps_shmdb_create(f->name, &o, NULL, &f->db));
    hps_table_spec_t s = t_spec("ul", "t", 8, 8, 4, UINT64_MAX, HPS_EVICT_RANDOM, 0.8);
    HPS_ASSERT_OK(hps_shmdb_table_create(f->db, &s, &f->id));
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    hps_shmdb_detach(f->db);
    hps_shmdb_unlink(f->name);
    free(f);
    return 0;
}

/* Append keys key_of(from) .. key_of(from + n - 1). */
static void append_seq(hps_shmdb_t *db, uint32_t id, uint64_t from, size_t n)
{
    uint64_t *k = malloc(n * sizeof(*k));
    for (size_t i = 0; i < n; i++)
        k[i] = key_of(from + i);
    HPS_ASSERT_OK(hps_shmdb_updlog_append(db, id, n, k));
    free(k);
}

static void test_errors(void **state)
{
    struct fixture *f = *state;
    uint64_t k = 1, next;
    size_t n;
    bool lapped;
    HPS_ASSERT_ERR(hps_shmdb_updlog_append(f->db, f->id, 1, &k), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_updlog_read(f->db, f->id, 0, &k, 1, &n, &next, &lapped),
                   HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_updlog_head(f->db, f->id, NULL, NULL), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_updlog_init(f->db, f->id, 100), HPS_EINVAL);
    HPS_ASSERT_ERR(hps_shmdb_updlog_init(f->db, f->id, 32), HPS_EINVAL);
    HPS_ASSERT_ERR(hps_shmdb_updlog_init(f->db, f->id + 1, 64), HPS_ENOTFOUND);
    HPS_ASSERT_OK(hps_shmdb_updlog_init(f->db, f->id, 64));
    HPS_ASSERT_OK(hps_shmdb_updlog_init(f->db, f->id, 1024)); /* idempotent: keeps 64 */
    uint64_t head = 9;
    uint32_t cap = 0;
    HPS_ASSERT_OK(hps_shmdb_updlog_head(f->db, f->id, &head, &cap));
    HPS_ASSERT_EQ(head, 0);
    HPS_ASSERT_EQ(cap, 64);
}

/* Read from since in chunks of `chunk` up to the head; check every key. */
static uint64_t read_all(struct fixture *f, uint64_t since, size_t chunk)
{
    uint64_t keys[64];
    for (;;) {
        size_t n;
        uint64_t next;
        bool lapped;
        HPS_ASSERT_OK(hps_shmdb_updlog_read(f->db, f->id, since, keys, chunk, &n, &next, &lapped));
        HPS_ASSERT_EQ(lapped, false);
        HPS_ASSERT_EQ(next, since + n);
        for (size_t i = 0; i < n; i++)
            HPS_ASSERT_EQ(keys[i], key_of(since + i));
        if (n == 0)
            return since;
        since = next;
    }
}

static void test_ordering(void **state)
{
    struct fixture *f = *state;
    HPS_ASSERT_OK(hps_shmdb_updlog_init(f->db, f->id, 256));
    uint64_t s = 0;
    for (size_t b = 1; b <= 12; b++) { /* 78 keys in batches of 1..12 */
        append_seq(f->db, f->id, s, b);
        s += b;
    }
    HPS_ASSERT_EQ(read_all(f, 0, 7), 78);
    HPS_ASSERT_EQ(read_all(f, 40, 64), 78);
    HPS_ASSERT_EQ(read_all(f, 78, 5), 78); /* at the head: nothing new */
}

static void expect_lapped(struct fixture *f, uint64_t since, uint64_t head)
{
    uint64_t keys[64], next;
    size_t n = 99;
    bool lapped = false;
    HPS_ASSERT_OK(hps_shmdb_updlog_read(f->db, f->id, since, keys, 64, &n, &next, &lapped));
    HPS_ASSERT_EQ(lapped, true);
    HPS_ASSERT_EQ(n, 0);
    HPS_ASSERT_EQ(next, head);
}

static void test_wraparound(void **state)
{
    struct fixture *f = *state;
    HPS_ASSERT_OK(hps_shmdb_updlog_init(f->db, f->id, 64));
    append_seq(f->db, f->id, 0, 50);
    HPS_ASSERT_EQ(read_all(f, 0, 64), 50);
    append_seq(f->db, f->id, 50, 150); /* larger than the ring in one batch */
    expect_lapped(f, 0, 200);
    expect_lapped(f, 135, 200);
    HPS_ASSERT_EQ(read_all(f, 136, 64), 200); /* exactly the oldest kept */
    for (uint64_t s = 200; s < 1000; s += 10)
        append_seq(f->db, f->id, s, 10);
    HPS_ASSERT_EQ(read_all(f, 1000 - 64, 13), 1000);
    expect_lapped(f, 1000 - 65, 1000);
    expect_lapped(f, 2000, 1000); /* beyond the head: e.g. a recreated segment */
}

static void test_narrow_keys(void **state)
{
    struct fixture *f = *state;
    hps_table_spec_t s = t_spec("ul", "t32", 4, 4, 2, UINT64_MAX, HPS_EVICT_RANDOM, 0.8);
    uint32_t id;
    HPS_ASSERT_OK(hps_shmdb_table_create(f->db, &s, &id));
    HPS_ASSERT_OK(hps_shmdb_updlog_init(f->db, id, 64));
    uint32_t in[5] = {7, 0xffffffffu, 3, 0, 42}, out[8] = {0};
    HPS_ASSERT_OK(hps_shmdb_updlog_append(f->db, id, 5, in));
    size_t n;
    uint64_t next;
    bool lapped;
    HPS_ASSERT_OK(hps_shmdb_updlog_read(f->db, id, 1, out, 8, &n, &next, &lapped));
    HPS_ASSERT_EQ(n, 4);
    HPS_ASSERT_EQ(next, 5);
    HPS_ASSERT_EQ(out[0], 0xffffffffu);
    HPS_ASSERT_EQ(out[3], 42);
    HPS_ASSERT_EQ(out[4], 0); /* nothing written past n */
}

/* Child: attach and append `total` keys in batches of 1..300. */
static void writer_child(const char *name, uint32_t id, uint64_t total, int go)
{
    t_child_mode();
    hps_shmdb_t *db;
    char c;
    if (hps_shmdb_attach(name, NULL, &db) != 0 || read(go, &c, 1) != 1)
        _exit(T_CHILD_FAIL);
    uint64_t rng = 12345, s = 0, k[300];
    while (s < total) {
        size_t b = 1 + (size_t)t_rng_below(&rng, 300);
        for (size_t i = 0; i < b; i++)
            k[i] = key_of(s + i);
        if (hps_shmdb_updlog_append(db, id, b, k) != 0)
            _exit(T_CHILD_FAIL);
        s += b;
    }
    hps_shmdb_detach(db);
    _exit(0);
}

static void test_concurrent_reader(void **state)
{
    struct fixture *f = *state;
    const uint64_t total = 3000000;
    HPS_ASSERT_OK(hps_shmdb_updlog_init(f->db, f->id, 1024));
    int go[2];
    HPS_ASSERT_EQ(pipe(go), 0);
    pid_t pid = t_fork();
    if (pid == 0)
        writer_child(f->name, f->id, total, go[0]);
    /* Start the writer only now that the reader is running. */
    HPS_ASSERT_EQ(write(go[1], "g", 1), 1);
    close(go[0]);
    close(go[1]);
    uint64_t since = 0, got = 0, laps = 0, head = 0, keys[64];
    for (;;) {
        size_t n;
        uint64_t next;
        bool lapped;
        /* Head first: once it shows the writer done, this read and the next
         * ones drain the ring, so the reader sees keys even if the writer
         * finished before the reader was first scheduled. */
        HPS_ASSERT_OK(hps_shmdb_updlog_head(f->db, f->id, &head, NULL));
        HPS_ASSERT_OK(hps_shmdb_updlog_read(f->db, f->id, since, keys, 64, &n, &next, &lapped));
        uint64_t first = lapped ? next - n : since;
        for (size_t i = 0; i < n; i++)
            HPS_ASSERT_EQ(keys[i], key_of(first + i)); /* never torn, never misplaced */
        laps += lapped;
        got += n;
        since = next;
        if (head >= total && since >= head)
            break;
    }
    int st;
    HPS_ASSERT_EQ(t_wait_timeout(pid, 60000, &st), 1);
    HPS_ASSERT_EQ(WIFEXITED(st) && WEXITSTATUS(st) == 0, 1);
    /* The last ring's worth of keys is there, in order (the reader may have
     * been descheduled for the whole run on a loaded machine: laps only). */
    HPS_ASSERT_GT(got + laps, 0);
    size_t n;
    uint64_t next;
    bool lapped;
    HPS_ASSERT_OK(hps_shmdb_updlog_read(f->db, f->id, total - 64, keys, 64, &n, &next, &lapped));
    HPS_ASSERT_EQ(lapped, false);
    HPS_ASSERT_EQ(n, 64);
    HPS_ASSERT_EQ(next, total);
    for (size_t i = 0; i < n; i++)
        HPS_ASSERT_EQ(keys[i], key_of(total - 64 + i));
    print_message("# read %llu keys while writing, %llu laps\n", (unsigned long long)got,
                  (unsigned long long)laps);
}

static void test_update_stats(void **state)
{
    struct fixture *f = *state;
    hps_update_stats_t s = {.messages = 5,
                            .received = 40,
                            .applied = 39,
                            .beacons = 2,
                            .errors = 1,
                            .lag = -1,
                            .newest_applied_ms = 1700000000123LL,
                            .published_ms = 1700000000456LL};
    s.skipped[2] = 3;
    s.skipped[7] = 4;
    hps_update_stats_t r;
    HPS_ASSERT_ERR(hps_shmdb_update_stats_get(f->db, 1, &r), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_update_stats_set(f->db, HPS_SHMDB_UPDATE_LAYERS, &s), HPS_EINVAL);
    HPS_ASSERT_OK(hps_shmdb_update_stats_set(f->db, 1, &s));
    HPS_ASSERT_ERR(hps_shmdb_update_stats_get(f->db, 0, &r), HPS_ENOTFOUND);
    pid_t pid = t_fork();
    if (pid == 0) { /* another process reads the same counters */
        t_child_mode();
        hps_shmdb_t *db;
        if (hps_shmdb_attach(f->name, NULL, &db) != 0)
            _exit(T_CHILD_FAIL);
        HPS_ASSERT_OK(hps_shmdb_update_stats_get(db, 1, &r));
        HPS_ASSERT_EQ(memcmp(&r, &s, sizeof(r)), 0);
        hps_shmdb_detach(db);
        _exit(0);
    }
    int st;
    HPS_ASSERT_EQ(t_wait_timeout(pid, 10000, &st), 1);
    HPS_ASSERT_EQ(WIFEXITED(st) && WEXITSTATUS(st) == 0, 1);
    HPS_ASSERT_EQ(strcmp(hps_shmdb_update_layer_name(2), "distributed"), 0);
}

/* The distributed DB's counters: absent until published, then the same in
 * another process (every field, the published time included); a second
 * publication overwrites the first. */
static void test_ddb_stats(void **state)
{
    struct fixture *f = *state;
    hps_shmdb_ddb_stats_t s = {.lookup_keys = 218,
                               .lookup_hits = 120,
                               .insert_rows = 12590,
                               .evicted_rows = 7,
                               .errors = 3,
                               .touches_dropped = 11,
                               .bad_values = 40,
                               .published_ms = 1700000000789LL},
                          r;
    HPS_ASSERT_ERR(hps_shmdb_ddb_stats_get(f->db, &r), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_ddb_stats_get(f->db, NULL), HPS_EINVAL);
    HPS_ASSERT_ERR(hps_shmdb_ddb_stats_set(f->db, NULL), HPS_EINVAL);
    /* the update statistics are another area: publishing them adds no DDB stats */
    hps_update_stats_t u = {.messages = 1};
    HPS_ASSERT_OK(hps_shmdb_update_stats_set(f->db, 2, &u));
    HPS_ASSERT_ERR(hps_shmdb_ddb_stats_get(f->db, &r), HPS_ENOTFOUND);
    hps_shmdb_ddb_stats_t first = s;
    first.lookup_keys = 1;
    HPS_ASSERT_OK(hps_shmdb_ddb_stats_set(f->db, &first));
    HPS_ASSERT_OK(hps_shmdb_ddb_stats_set(f->db, &s)); /* the area exists: overwritten */
    HPS_ASSERT_OK(hps_shmdb_ddb_stats_get(f->db, &r));
    HPS_ASSERT_EQ(memcmp(&r, &s, sizeof(r)), 0);
    pid_t pid = t_fork();
    if (pid == 0) { /* a worker reads them through its own mapping */
        t_child_mode();
        hps_shmdb_t *db;
        if (hps_shmdb_attach(f->name, NULL, &db) != 0)
            _exit(T_CHILD_FAIL);
        memset(&r, 0, sizeof(r));
        HPS_ASSERT_OK(hps_shmdb_ddb_stats_get(db, &r));
        HPS_ASSERT_EQ(memcmp(&r, &s, sizeof(r)), 0);
        hps_update_stats_t ur;
        HPS_ASSERT_OK(hps_shmdb_update_stats_get(db, 2, &ur));
        HPS_ASSERT_EQ(ur.messages, 1);
        hps_shmdb_detach(db);
        _exit(0);
    }
    int st;
    HPS_ASSERT_EQ(t_wait_timeout(pid, 10000, &st), 1);
    HPS_ASSERT_EQ(WIFEXITED(st) && WEXITSTATUS(st) == 0, 1);
}

int main(void)
{
    t_install_cleanup();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ordering, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wraparound, setup, teardown),
        cmocka_unit_test_setup_teardown(test_narrow_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_reader, setup, teardown),
        cmocka_unit_test_setup_teardown(test_update_stats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ddb_stats, setup, teardown),
    };
    return cmocka_run_group_tests_name("shmdb-updlog", tests, NULL, NULL);
}
