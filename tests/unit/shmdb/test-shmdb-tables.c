/*
 * test-shmdb-tables.c -- tables in a segment: specs, ids, limits, space.
 *
 *  - bad table specs (dim 0 and > max, key width, partitions, target,
 *    names) and the limits themselves; a table of the largest dim;
 *  - table_create twice (same id) and with another geometry (EMISMATCH),
 *    the same table name in another model, bad table ids everywhere, and
 *    another process opening a table by its spec; HPS_SHMDB_MAX_TABLES;
 *  - a 2 MiB segment filled with far more rows than fit: upserts never fail,
 *    rows are evicted, the accounting adds up, check() finds nothing;
 *  - hps_shmdb_bytes_per_slot includes the value; memory per row for dim 1
 *    stays far below HugeCTR's 64 bytes;
 *  - a damaged directory (fields written into the object with pwrite, as a
 *    stray writer would): hps_shmdb_table_entry keeps every id on its entry
 *    and says what is wrong, the other calls refuse only the corrupt id,
 *    hps_shmdb_check names each fault (descriptor fields, names without a
 *    NUL, the table count, the header's area offsets out of bounds or
 *    misaligned) and the readers never follow such an offset.
 *
 * The segment itself (lifecycle, process table, validation) is tested by
 * test-shmdb-segment.c.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <fcntl.h>

#include "hps/shmdb_gcache.h"
#include "hps/shmdb_missq.h"
#include "hps/shmdb_stats.h"
#include "hps/shmdb_updlog.h"
#include "shmdb/layout.h"
#include "testutil.h"

#define SEG_SIZE (64ULL << 20)

static int setup(void **state)
{
    return t_seg_setup(state, "seg");
}

static int teardown(void **state)
{
    return t_seg_teardown(state);
}

/* ------------------------------------------------------------------------ */
/* Table specs, ids and limits                                               */
/* ------------------------------------------------------------------------ */

static void test_bad_table_specs(void **state)
{
    struct t_seg_fixture *f = *state;
    t_seg_create(f, SEG_SIZE);
    char name121[HPS_SHMDB_NAME_MAX + 2], name120[HPS_SHMDB_NAME_MAX + 1];
    memset(name121, 'a', sizeof(name121) - 1);
    name121[sizeof(name121) - 1] = '\0';
    memset(name120, 'b', sizeof(name120) - 1);
    name120[sizeof(name120) - 1] = '\0';
    uint32_t id = 12345;
    const hps_table_spec_t good = t_spec("m", "t", 16, 8, 4, UINT64_MAX, HPS_EVICT_RANDOM, 0.5);

#define BAD_SPEC(field, value)                                                                     \
    do {                                                                                           \
        hps_table_spec_t s_ = good;                                                                \
        s_.field = value;                                                                          \
        hps_err_t r_ = hps_shmdb_table_create(f->db, &s_, &id);                                    \
        if (r_ != HPS_EINVAL)                                                                      \
            T_FAIL("table_create with " #field " = " #value " returned %s (%d), expected "         \
                   "HPS_EINVAL",                                                                   \
                   hps_err_name(r_), r_);                                                          \
    } while (0)

    BAD_SPEC(dim, 0);
    BAD_SPEC(dim, HPS_SHMDB_MAX_DIM + 1);
    BAD_SPEC(dim, UINT32_MAX);
    BAD_SPEC(key_bytes, 0);
    BAD_SPEC(key_bytes, 2);
    BAD_SPEC(key_bytes, 16);
    BAD_SPEC(num_partitions, 0);
    BAD_SPEC(num_partitions, HPS_SHMDB_MAX_PARTITIONS + 1);
    BAD_SPEC(overflow_resolution_target, 0.0);
    BAD_SPEC(overflow_resolution_target, -0.5);
    BAD_SPEC(overflow_resolution_target, 1.5);
    BAD_SPEC(overflow_resolution_target, (double)NAN);
    BAD_SPEC(overflow_policy, (hps_overflow_policy_t)7);
    BAD_SPEC(model, "");
    BAD_SPEC(model, "a b");
    BAD_SPEC(model, "a.b");
    BAD_SPEC(model, name121);
    BAD_SPEC(table, "");
    BAD_SPEC(table, "x/y");
    BAD_SPEC(table, name121);
#undef BAD_SPEC
    HPS_ASSERT_EQ(id, 12345); /* written only on success */
    HPS_ASSERT_EQ(hps_shmdb_table_count(f->db), 0);

    /* Limits themselves are fine. */
    hps_table_spec_t s = good;
    s.model = name120;
    s.table = "T-1_z";
    s.num_partitions = HPS_SHMDB_MAX_PARTITIONS;
    s.overflow_resolution_target = 1.0;
    s.key_bytes = 4;
    HPS_ASSERT_OK(hps_shmdb_table_create(f->db, &s, &id));
    hps_table_info_t info;
    HPS_ASSERT_OK(hps_shmdb_table_info(f->db, id, &info));
    T_CHECK(strcmp(info.model, name120) == 0, "model name not kept");
    HPS_ASSERT_EQ(info.num_partitions, HPS_SHMDB_MAX_PARTITIONS);
    HPS_ASSERT_EQ(info.key_bytes, 4);
    s = good;
    s.table = "dim1";
    s.dim = 1;
    HPS_ASSERT_OK(hps_shmdb_table_create(f->db, &s, &id));
    HPS_ASSERT_EQ(t_check(f->db, "specs"), 0);
}

static void test_max_dim(void **state)
{
    struct t_seg_fixture *f = *state;
    t_seg_create(f, 512ULL << 20);
    hps_table_spec_t s =
        t_spec("m", "big", HPS_SHMDB_MAX_DIM, 8, 1, UINT64_MAX, HPS_EVICT_RANDOM, 0.5);
    uint32_t id;
    hps_err_t r = hps_shmdb_table_create(f->db, &s, &id);
    if (r == HPS_ENOSPC) {
        t_note("dim %d: table_create says HPS_ENOSPC in a 512 MiB segment", HPS_SHMDB_MAX_DIM);
        return;
    }
    HPS_ASSERT_OK(r);
    float *v = malloc(HPS_SHMDB_MAX_DIM * sizeof(float));
    float *w = malloc(HPS_SHMDB_MAX_DIM * sizeof(float));
    T_CHECK(v && w, "out of memory");
    for (int64_t k = 0; k < 8; k++) {
        for (int d = 0; d < HPS_SHMDB_MAX_DIM; d++)
            v[d] = (float)(k * 65536 + d);
        HPS_ASSERT_OK(hps_shmdb_upsert(f->db, id, 1, &k, v, NULL));
    }
    for (int64_t k = 0; k < 8; k++) {
        for (int d = 0; d < HPS_SHMDB_MAX_DIM; d++)
            v[d] = (float)(k * 65536 + d);
        uint8_t found = 0;
        HPS_ASSERT_OK(hps_shmdb_lookup(f->db, id, 1, &k, w, &found, NULL));
        HPS_ASSERT_EQ(found, 1);
        T_CHECK(memcmp(v, w, HPS_SHMDB_MAX_DIM * sizeof(float)) == 0, "dim-65536 row %d", (int)k);
    }
    free(v);
    free(w);
    HPS_ASSERT_EQ(t_check(f->db, "maxdim"), 0);
}

/* A table's lookups / hits counters: hps_shmdb_lookup counts every key
 * and every hit; an uncounted lookup_ex leaves them, and count_lookups adds
 * exactly what it is given. */
static void test_lookup_counters(void **state)
{
    struct t_seg_fixture *f = *state;
    t_seg_create(f, 64ULL << 20);
    hps_table_spec_t s = t_spec("m", "c", 4, 8, 2, UINT64_MAX, HPS_EVICT_RANDOM, 0.5);
    uint32_t id;
    HPS_ASSERT_OK(hps_shmdb_table_create(f->db, &s, &id));
    int64_t keys[6] = {1, 2, 3, 100, 101, 102};
    float v[6 * 4], w[6 * 4];
    for (int i = 0; i < 6; i++)
        t_value_of((uint64_t)keys[i], 4, v + i * 4);
    HPS_ASSERT_OK(hps_shmdb_upsert(f->db, id, 3, keys, v, NULL)); /* 1, 2, 3 */
    hps_table_info_t ti;
    size_t hits = 0;
    HPS_ASSERT_OK(hps_shmdb_lookup(f->db, id, 6, keys, w, NULL, &hits));
    HPS_ASSERT_OK(hps_shmdb_table_info(f->db, id, &ti));
    HPS_ASSERT_EQ(hits, 3);
    HPS_ASSERT_EQ(ti.lookups, 6);
    HPS_ASSERT_EQ(ti.hits, 3);
    uint8_t found[6];
    HPS_ASSERT_ERR(hps_shmdb_lookup_ex(f->db, id, 6, keys, w, found, &hits, 1u << 7), HPS_EINVAL);
    HPS_ASSERT_OK(
        hps_shmdb_lookup_ex(f->db, id, 6, keys, w, found, &hits, HPS_SHMDB_LOOKUP_UNCOUNTED));
    HPS_ASSERT_EQ(hits, 3);
    HPS_ASSERT_EQ(found[2] + found[3], 1);
    T_CHECK(memcmp(w, v, 3 * 4 * sizeof(float)) == 0, "uncounted lookup returns the rows");
    HPS_ASSERT_OK(hps_shmdb_table_info(f->db, id, &ti));
    HPS_ASSERT_EQ(ti.lookups, 6);
    HPS_ASSERT_EQ(ti.hits, 3);
    HPS_ASSERT_OK(hps_shmdb_count_lookups(f->db, id, 6, 3));
    HPS_ASSERT_OK(hps_shmdb_table_info(f->db, id, &ti));
    HPS_ASSERT_EQ(ti.lookups, 12);
    HPS_ASSERT_EQ(ti.hits, 6);
    HPS_ASSERT_ERR(hps_shmdb_count_lookups(f->db, id + 1, 1, 1), HPS_ENOTFOUND);
}

static void test_table_reopen_and_ids(void **state)
{
    struct t_seg_fixture *f = *state;
    t_seg_create(f, SEG_SIZE);
    hps_table_spec_t s = t_spec("model_a", "t0", 16, 8, 4, 1000, HPS_EVICT_OLDEST, 0.8);
    uint32_t id0 = 77, id1 = 77, id;
    HPS_ASSERT_OK(hps_shmdb_table_create(f->db, &s, &id0));
    HPS_ASSERT_OK(hps_shmdb_table_create(f->db, &s, &id));
    HPS_ASSERT_EQ(id, id0);
    /* Another margin / policy / default is not another geometry. */
    hps_table_spec_t s2 = s;
    s2.overflow_margin = 5000;
    s2.overflow_policy = HPS_EVICT_RANDOM;
    s2.default_value = 1.5f;
    HPS_ASSERT_OK(hps_shmdb_table_create(f->db, &s2, &id));
    HPS_ASSERT_EQ(id, id0);

    id = 4242;
    s2 = s;
    s2.dim = 32;
    HPS_ASSERT_ERR(hps_shmdb_table_create(f->db, &s2, &id), HPS_EMISMATCH);
    s2 = s;
    s2.key_bytes = 4;
    HPS_ASSERT_ERR(hps_shmdb_table_create(f->db, &s2, &id), HPS_EMISMATCH);
    s2 = s;
    s2.num_partitions = 8;
    HPS_ASSERT_ERR(hps_shmdb_table_create(f->db, &s2, &id), HPS_EMISMATCH);
    HPS_ASSERT_EQ(id, 4242);
    HPS_ASSERT_EQ(hps_shmdb_table_count(f->db), 1);

    /* Same table name in another model is another table. */
    s2 = s;
    s2.model = "model_b";
    s2.dim = 3;
    HPS_ASSERT_OK(hps_shmdb_table_create(f->db, &s2, &id1));
    HPS_ASSERT_NE(id1, id0);
    HPS_ASSERT_EQ(hps_shmdb_table_count(f->db), 2);
    HPS_ASSERT_LT(id0, 2);
    HPS_ASSERT_LT(id1, 2);
    HPS_ASSERT_OK(hps_shmdb_table_find(f->db, "model_b", "t0", &id));
    HPS_ASSERT_EQ(id, id1);
    HPS_ASSERT_OK(hps_shmdb_table_find(f->db, "model_a", "t0", &id));
    HPS_ASSERT_EQ(id, id0);
    HPS_ASSERT_ERR(hps_shmdb_table_find(f->db, "model_a", "t1", &id), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_table_find(f->db, "model_c", "t0", &id), HPS_ENOTFOUND);

    hps_table_info_t info;
    HPS_ASSERT_OK(hps_shmdb_table_info(f->db, id0, &info));
    T_CHECK(strcmp(info.model, "model_a") == 0 && strcmp(info.table, "t0") == 0,
            "table_info names '%s' '%s'", info.model, info.table);
    HPS_ASSERT_EQ(info.id, id0);
    HPS_ASSERT_EQ(info.dim, 16);
    HPS_ASSERT_EQ(info.key_bytes, 8);
    HPS_ASSERT_EQ(info.num_partitions, 4);
    HPS_ASSERT_EQ(info.rows, 0);
    HPS_ASSERT_OK(hps_shmdb_table_info(f->db, id1, &info));
    HPS_ASSERT_EQ(info.dim, 3);

    /* Bad ids everywhere. */
    uint32_t bad = 2;
    int64_t k = 1;
    float v[16] = {0};
    uint8_t found;
    uint64_t rows;
    hps_partition_info_t pi[HPS_SHMDB_MAX_PARTITIONS];
    HPS_ASSERT_ERR(hps_shmdb_table_info(f->db, bad, &info), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_table_info(f->db, UINT32_MAX, &info), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_partition_info(f->db, bad, pi), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_lookup(f->db, bad, 1, &k, v, &found, NULL), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_upsert(f->db, bad, 1, &k, v, NULL), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_erase(f->db, bad, 1, &k, NULL), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_clear(f->db, bad), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_size(f->db, bad, &rows), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_size(f->db, UINT32_MAX, &rows), HPS_ENOTFOUND);

    /* Another process opens the same table by spec and sees the same id. */
    pid_t pid = t_fork();
    if (pid == 0) {
        t_child_mode();
        hps_shmdb_t *db;
        HPS_ASSERT_OK(hps_shmdb_attach(f->name, NULL, &db));
        uint32_t cid = 99;
        HPS_ASSERT_OK(hps_shmdb_table_create(db, &s, &cid));
        HPS_ASSERT_EQ(cid, id0);
        hps_shmdb_detach(db);
        _exit(0);
    }
    int st;
    char buf[64];
    T_CHECK(t_wait_timeout(pid, 20000, &st), "child hung");
    T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: %s", t_status_str(st, buf, sizeof(buf)));
    HPS_ASSERT_EQ(hps_shmdb_table_count(f->db), 2);
}

static void test_max_tables(void **state)
{
    struct t_seg_fixture *f = *state;
    t_seg_create(f, 1ULL << 30);
    char tname[32];
    for (uint32_t i = 0; i < HPS_SHMDB_MAX_TABLES; i++) {
        snprintf(tname, sizeof(tname), "t%u", i);
        hps_table_spec_t s = t_spec("many", tname, 2, 8, 1, UINT64_MAX, HPS_EVICT_RANDOM, 0.5);
        uint32_t id = 0;
        hps_err_t r = hps_shmdb_table_create(f->db, &s, &id);
        if (r != 0)
            T_FAIL("table %u of %d: %s", i, HPS_SHMDB_MAX_TABLES, hps_err_name(r));
        HPS_ASSERT_EQ(id, i);
    }
    hps_table_spec_t s = t_spec("many", "one_more", 2, 8, 1, UINT64_MAX, HPS_EVICT_RANDOM, 0.5);
    uint32_t id;
    HPS_ASSERT_ERR(hps_shmdb_table_create(f->db, &s, &id), HPS_EFULL);
    HPS_ASSERT_EQ(hps_shmdb_table_count(f->db), HPS_SHMDB_MAX_TABLES);
    /* Reopening an existing one still works when full. */
    s.table = "t255";
    HPS_ASSERT_OK(hps_shmdb_table_create(f->db, &s, &id));
    HPS_ASSERT_EQ(id, 255);
    int64_t k = 5;
    float v[2] = {1, 2}, w[2];
    uint8_t found = 0;
    HPS_ASSERT_OK(hps_shmdb_upsert(f->db, 255, 1, &k, v, NULL));
    HPS_ASSERT_OK(hps_shmdb_lookup(f->db, 255, 1, &k, w, &found, NULL));
    HPS_ASSERT_EQ(found, 1);
    HPS_ASSERT_OK(hps_shmdb_lookup(f->db, 254, 1, &k, w, &found, NULL));
    HPS_ASSERT_EQ(found, 0);
    HPS_ASSERT_EQ(t_check(f->db, "max-tables"), 0);
}

/* ------------------------------------------------------------------------ */
/* A segment far too small for its rows                                      */
/* ------------------------------------------------------------------------ */

struct verify_ctx {
    uint32_t dim;
    uint64_t rows;
    uint64_t bad;
};

static int verify_fn(void *ctx, uint64_t key, const float *value)
{
    struct verify_ctx *c = ctx;
    float want[256];
    t_value_of(key, c->dim, want);
    c->rows++;
    if (memcmp(want, value, c->dim * sizeof(float)) != 0)
        c->bad++;
    return 0;
}

static void fill_small_segment(struct t_seg_fixture *f, uint32_t dim, uint32_t parts,
                               hps_overflow_policy_t policy, uint64_t total)
{
    hps_shmdb_opts_t o = t_opts(2ULL << 20);
    o.allocation_rate = 64 << 10;
    HPS_ASSERT_OK(hps_shmdb_create(f->name, &o, NULL, &f->db));
    hps_table_spec_t s = t_spec("small", "t", dim, 8, parts, UINT64_MAX, policy, 0.5);
    uint32_t id;
    HPS_ASSERT_OK(hps_shmdb_table_create(f->db, &s, &id));
    enum { BATCH = 500 };
    int64_t *keys = malloc(BATCH * sizeof(int64_t));
    float *vals = malloc((size_t)BATCH * dim * sizeof(float));
    uint8_t *found = malloc(BATCH);
    T_CHECK(keys && vals && found, "out of memory");
    uint64_t inserted = 0;
    for (uint64_t base = 0; base < total; base += BATCH) {
        for (int i = 0; i < BATCH; i++) {
            keys[i] = (int64_t)(base + (uint64_t)i) * 2654435761LL;
            t_value_of((uint64_t)keys[i], dim, &vals[(size_t)i * dim]);
        }
        size_t ins = 0;
        hps_err_t r = hps_shmdb_upsert(f->db, id, BATCH, keys, vals, &ins);
        if (r != 0)
            T_FAIL("upsert of rows %" PRIu64 "..%" PRIu64 " into a 2 MiB segment failed: %s", base,
                   base + BATCH, hps_err_name(r));
        HPS_ASSERT_EQ(ins, BATCH);
        inserted += ins;
    }
    /* The last batch was inserted after any eviction it caused. */
    size_t hits = 0;
    HPS_ASSERT_OK(hps_shmdb_lookup(f->db, id, BATCH, keys, vals, found, &hits));
    for (int i = 0; i < BATCH; i++) {
        float want[256];
        t_value_of((uint64_t)keys[i], dim, want);
        if (found[i] && memcmp(want, &vals[(size_t)i * dim], dim * sizeof(float)) != 0)
            T_FAIL("row %" PRId64 " has a wrong value", keys[i]);
    }
    hps_table_info_t info;
    HPS_ASSERT_OK(hps_shmdb_table_info(f->db, id, &info));
    hps_segment_info_t si;
    HPS_ASSERT_OK(hps_shmdb_segment_info(f->db, &si));
    struct verify_ctx vc = {dim, 0, 0};
    HPS_ASSERT_OK(hps_shmdb_iterate(f->db, id, verify_fn, &vc));
    t_note("2 MiB segment, dim %u, %u partitions, %s: %" PRIu64 " rows upserted, %" PRIu64
           " kept, %" PRIu64 " evicted, last batch %zu/%d found, %" PRIu64 " bytes used",
           dim, parts, hps_overflow_policy_name(policy), inserted, info.rows, info.evictions, hits,
           BATCH, si.used_bytes);
    HPS_ASSERT_EQ(vc.bad, 0);
    HPS_ASSERT_EQ(vc.rows, info.rows);
    HPS_ASSERT_GT(info.rows, 0);
    HPS_ASSERT_GT(info.evictions, 0);
    HPS_ASSERT_EQ(info.rows + info.evictions, inserted);
    HPS_ASSERT_LE(si.used_bytes, si.size_bytes);
    HPS_ASSERT_LE(si.committed_bytes, si.size_bytes);
    HPS_ASSERT_LE(info.rows * dim * sizeof(float), si.size_bytes);
    /* Tolerance: at least half of the newest batch is present. */
    HPS_ASSERT_GE(hits, BATCH / 2);
    HPS_ASSERT_EQ(t_check(f->db, "small"), 0);
    free(keys);
    free(vals);
    free(found);
}

static void test_small_segment_dim16(void **state)
{
    fill_small_segment(*state, 16, 4, HPS_EVICT_OLDEST, 100000);
}

static void test_small_segment_dim128(void **state)
{
    fill_small_segment(*state, 128, 1, HPS_EVICT_RANDOM, 40000);
}

/*
 * hps_shmdb_bytes_per_slot: documented as "bytes per slot (key, bucket
 * header, value, access stamp), for sizing": the value is part of it.
 */
static void test_bytes_per_slot(void **state)
{
    (void)state;
    double b1 = hps_shmdb_bytes_per_slot(1, HPS_EVICT_RANDOM);
    double b1l = hps_shmdb_bytes_per_slot(1, HPS_EVICT_OLDEST);
    double b128 = hps_shmdb_bytes_per_slot(128, HPS_EVICT_RANDOM);
    t_note("bytes per slot: dim 1 %.1f (random) %.1f (lfu) %.1f (lru); dim 16 %.1f; dim 128 %.1f",
           b1, hps_shmdb_bytes_per_slot(1, HPS_EVICT_LEAST_USED), b1l,
           hps_shmdb_bytes_per_slot(16, HPS_EVICT_RANDOM), b128);
    T_CHECK(b1 >= 4.0 && b1 <= 24.0, "dim 1 costs %.1f bytes per slot (header: ~13)", b1);
    T_CHECK(b1l >= b1, "an access stamp cannot make a slot cheaper: %.1f < %.1f", b1l, b1);
    T_CHECK(b128 >= 512.0 && b128 <= 540.0,
            "dim 128: hps_shmdb_bytes_per_slot = %.1f, but a slot's value alone is 512 bytes and "
            "the header says the value is included (for sizing)",
            b128);
}

/* Segment bytes held per row after a real fill, against the raw size. */
static void memory_per_row(struct t_seg_fixture *f, uint32_t dim, uint32_t nrows,
                           double max_per_row)
{
    t_seg_create(f, 512ULL << 20);
    hps_table_spec_t s = t_spec("mem", "t", dim, 8, 4, UINT64_MAX, HPS_EVICT_RANDOM, 0.5);
    uint32_t id;
    HPS_ASSERT_OK(hps_shmdb_table_create(f->db, &s, &id));
    enum { BATCH = 1000 };
    int64_t *keys = malloc(BATCH * sizeof(int64_t));
    float *vals = calloc((size_t)BATCH * dim, sizeof(float));
    T_CHECK(keys && vals, "out of memory");
    for (uint32_t base = 0; base < nrows; base += BATCH) {
        for (int i = 0; i < BATCH; i++) {
            keys[i] = base + (uint32_t)i;
            vals[(size_t)i * dim] = (float)(base + (uint32_t)i);
        }
        HPS_ASSERT_OK(hps_shmdb_upsert(f->db, id, BATCH, keys, vals, NULL));
    }
    free(keys);
    free(vals);
    hps_table_info_t info;
    HPS_ASSERT_OK(hps_shmdb_table_info(f->db, id, &info));
    HPS_ASSERT_EQ(info.rows, nrows);
    double per_row = (double)info.bytes / (double)info.rows;
    t_note("dim %u: %" PRIu64 " rows in %" PRIu64 " bytes: %.1f bytes per row (raw %u; HugeCTR "
           "pads to a multiple of 64)",
           dim, info.rows, info.bytes, per_row, dim * 4);
    T_CHECK(per_row >= dim * 4.0, "dim %u: %.1f bytes per row is less than the raw value", dim,
            per_row);
    T_CHECK(per_row <= max_per_row, "dim %u costs %.1f bytes per row (limit %.0f)", dim, per_row,
            max_per_row);
}

/* dim 1: growth by doubling may leave half the slots empty: 2 x ~24 + slack. */
static void test_memory_per_row_dim1(void **state)
{
    memory_per_row(*state, 1, 400000, 56.0);
}

/* dim 128: 512 raw; allow 25% for index, stamps and partly filled pages. */
static void test_memory_per_row_dim128(void **state)
{
    memory_per_row(*state, 128, 100000, 640.0);
}

/* ------------------------------------------------------------------------ */
/* A damaged directory                                                       */
/* ------------------------------------------------------------------------ */

/* Write len bytes at off of the fixture's object (the mapping sees them). */
static void poke(struct t_seg_fixture *f, uint64_t off, const void *p, size_t len)
{
    int fd = open(f->path, O_RDWR);
    T_CHECK(fd >= 0, "open %s", f->path);
    T_CHECK(pwrite(fd, p, len, (off_t)off) == (ssize_t)len, "pwrite at %llu",
            (unsigned long long)off);
    close(fd);
}

static void poke_u32(struct t_seg_fixture *f, uint64_t off, uint32_t v)
{
    poke(f, off, &v, sizeof(v));
}

static void poke_u64(struct t_seg_fixture *f, uint64_t off, uint64_t v)
{
    poke(f, off, &v, sizeof(v));
}

/* Problems reported by hps_shmdb_check, joined by newlines. */
struct problems {
    char text[8192];
    uint64_t n;
};

static void collect(void *ctx, const char *msg)
{
    struct problems *p = ctx;
    size_t used = strlen(p->text);
    snprintf(p->text + used, sizeof(p->text) - used, "%s\n", msg);
}

static struct problems *check_problems(hps_shmdb_t *db)
{
    static struct problems p;
    memset(&p, 0, sizeof(p));
    HPS_ASSERT_OK(hps_shmdb_check(db, collect, &p, &p.n));
    return &p;
}

#define TABLE_OFF(id, field)                                                                       \
    (offsetof(struct shm_hdr, tables) + (id) * sizeof(struct shm_table) +                          \
     offsetof(struct shm_table, field))

static void test_damaged_directory(void **state)
{
    struct t_seg_fixture *f = *state;
    t_seg_create(f, SEG_SIZE);
    hps_table_spec_t s0 = t_spec("m", "t0", 8, 8, 2, UINT64_MAX, HPS_EVICT_RANDOM, 0.8);
    hps_table_spec_t s1 = t_spec("m", "t1", 4, 8, 2, UINT64_MAX, HPS_EVICT_RANDOM, 0.8);
    uint32_t id0, id1;
    HPS_ASSERT_OK(hps_shmdb_table_create(f->db, &s0, &id0));
    HPS_ASSERT_OK(hps_shmdb_table_create(f->db, &s1, &id1));
    HPS_ASSERT_EQ(t_check(f->db, "intact"), 0);
    hps_table_entry_t e;
    HPS_ASSERT_OK(hps_shmdb_table_entry(f->db, 0, &e));
    T_CHECK(strcmp(e.model, "m") == 0 && strcmp(e.table, "t0") == 0 && !e.problem[0], "%s/%s %s",
            e.model, e.table, e.problem);
    HPS_ASSERT_ERR(hps_shmdb_table_entry(f->db, 2, &e), HPS_ENOTFOUND);

    /* Each descriptor fault: the id keeps its entry, named and explained;
     * table 1 stays whole; check says the same. */
    static const struct {
        size_t off, bytes;
        uint64_t val;
        const char *why;
    } faults[] = {
        {TABLE_OFF(0, dtype), 4, 99, "storage type 99 is no type"},
        {TABLE_OFF(0, dim), 4, 0, "dim 0 out of range"},
        {TABLE_OFF(0, dim), 4, 0x7fffffff, "dim 2147483647 out of range"},
        {TABLE_OFF(0, num_partitions), 4, 0xffffffff, "partition count 4294967295 out of range"},
        {TABLE_OFF(0, parts), 8, 0xdeadbeef000, "partition array offset 15302363377664"},
        {TABLE_OFF(0, parts), 8, 64, "partition array offset 64 (0x40) out of bounds"},
        {TABLE_OFF(0, key_bytes), 4, 5, "key width 5 bytes"},
    };
    hps_table_info_t ti;
    for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++) {
        uint64_t orig = 0; /* the field's bytes, put back after */
        int fd = open(f->path, O_RDONLY);
        T_CHECK(fd >= 0 && pread(fd, &orig, faults[i].bytes, (off_t)faults[i].off) ==
                               (ssize_t)faults[i].bytes,
                "pread");
        close(fd);
        poke(f, faults[i].off, &faults[i].val, faults[i].bytes);
        HPS_ASSERT_ERR(hps_shmdb_table_entry(f->db, 0, &e), HPS_ECORRUPT);
        T_CHECK(strcmp(e.model, "m") == 0 && strcmp(e.table, "t0") == 0, "fault %zu: %s/%s", i,
                e.model, e.table);
        T_CHECK(strstr(e.problem, faults[i].why), "fault %zu: problem '%s', want '%s'", i,
                e.problem, faults[i].why);
        HPS_ASSERT_ERR(hps_shmdb_table_info(f->db, 0, &ti), HPS_ENOTFOUND);
        HPS_ASSERT_OK(hps_shmdb_table_entry(f->db, 1, &e));
        HPS_ASSERT_OK(hps_shmdb_table_info(f->db, 1, &ti));
        HPS_ASSERT_EQ(ti.dim, 4);
        struct problems *p = check_problems(f->db);
        T_CHECK(p->n == 1 && strstr(p->text, "table 0: corrupt descriptor: ") &&
                    strstr(p->text, faults[i].why),
                "fault %zu: check said (%llu) %s", i, (unsigned long long)p->n, p->text);
        poke(f, faults[i].off, &orig, faults[i].bytes);
        HPS_ASSERT_EQ(t_check(f->db, "restored"), 0);
    }

    /* Names: no NUL within the field, a byte outside the alphabet. */
    char field[sizeof(((struct shm_table *)0)->model)];
    memset(field, 'A', sizeof(field));
    poke(f, TABLE_OFF(1, model), field, sizeof(field));
    HPS_ASSERT_ERR(hps_shmdb_table_entry(f->db, 1, &e), HPS_ECORRUPT);
    HPS_ASSERT_EQ(strlen(e.model), HPS_SHMDB_NAME_MAX);
    T_CHECK(strstr(e.problem, "model name: no terminating NUL"), "%s", e.problem);
    struct problems *p = check_problems(f->db);
    T_CHECK(p->n == 1 && strstr(p->text, "table 1: model name: no terminating NUL within its 128"),
            "%s", p->text);
    poke(f, TABLE_OFF(1, model), "m\0", 2);
    poke(f, TABLE_OFF(1, table), "t\xff\0", 3);
    HPS_ASSERT_ERR(hps_shmdb_table_entry(f->db, 1, &e), HPS_ECORRUPT);
    T_CHECK(strstr(e.problem, "table name: byte 1 is 0xff"), "%s", e.problem);
    p = check_problems(f->db);
    T_CHECK(p->n == 1 && strstr(p->text, "table 1: table name: byte 1 is 0xff"), "%s", p->text);
    poke(f, TABLE_OFF(1, table), "t1\0", 3);
    HPS_ASSERT_EQ(t_check(f->db, "names restored"), 0);

    /* The table count out of range: said once, no table read. */
    poke_u32(f, offsetof(struct shm_hdr, num_tables), 9999);
    HPS_ASSERT_ERR(hps_shmdb_table_entry(f->db, 0, &e), HPS_ENOTFOUND);
    p = check_problems(f->db);
    T_CHECK(p->n == 1 && strstr(p->text, "header: num_tables 9999 out of range (at most 256)"),
            "%s", p->text);
    poke_u32(f, offsetof(struct shm_hdr, num_tables), 2);

    /* The header's area offsets: each one checked, none followed. */
    static const struct {
        size_t off;
        const char *field;
        uint64_t val;
    } areas[] = {
        {offsetof(struct shm_hdr, missq_off), "missq_off", 0xfffffffffff0},
        {offsetof(struct shm_hdr, ustats_off), "ustats_off", 0x7ffffffffff8},
        {offsetof(struct shm_hdr, ddbstats_off), "ddbstats_off", 0xffffffffffffffc0},
        {offsetof(struct shm_hdr, updlog_off), "updlog_off", 7},
        {offsetof(struct shm_hdr, gpureg_off), "gpureg_off", 0x10000001},
        {offsetof(struct shm_hdr, gpureg_off), "gpureg_off", 64}, /* inside the header */
    };
    for (size_t i = 0; i < sizeof(areas) / sizeof(areas[0]); i++) {
        char want[128];
        poke_u64(f, areas[i].off, areas[i].val);
        snprintf(want, sizeof(want), "header: %s %llu (0x%llx) out of bounds or misaligned",
                 areas[i].field, (unsigned long long)areas[i].val,
                 (unsigned long long)areas[i].val);
        p = check_problems(f->db);
        T_CHECK(p->n == 1 && strstr(p->text, want), "want '%s', check said %s", want, p->text);
        /* Readers take the area as absent, never follow the offset (under
         * ASan a read there would be reported; here it would fault). */
        hps_update_stats_t us;
        hps_shmdb_ddb_stats_t ds;
        hps_missq_info_t mi;
        hps_gcache_reg_t g;
        uint64_t head = 0;
        (void)hps_shmdb_update_stats_get(f->db, 0, &us);
        (void)hps_shmdb_ddb_stats_get(f->db, &ds);
        (void)hps_shmdb_miss_stats(f->db, &mi);
        (void)hps_shmdb_gcache_get(f->db, 0, &g);
        (void)hps_shmdb_updlog_head(f->db, 0, &head, NULL);
        HPS_ASSERT_OK(hps_shmdb_table_info(f->db, 0, &ti));
        poke_u64(f, areas[i].off, 0);
    }
    HPS_ASSERT_EQ(t_check(f->db, "areas restored"), 0);
}

int main(void)
{
    t_install_cleanup();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_bad_table_specs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_max_dim, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lookup_counters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_table_reopen_and_ids, setup, teardown),
        cmocka_unit_test_setup_teardown(test_max_tables, setup, teardown),
        cmocka_unit_test_setup_teardown(test_small_segment_dim16, setup, teardown),
        cmocka_unit_test_setup_teardown(test_small_segment_dim128, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bytes_per_slot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_memory_per_row_dim1, setup, teardown),
        cmocka_unit_test_setup_teardown(test_memory_per_row_dim128, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_directory, setup, teardown),
    };
    return cmocka_run_group_tests_name("shmdb-tables", tests, NULL, NULL);
}
