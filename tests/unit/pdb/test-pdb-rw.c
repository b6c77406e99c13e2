/*
 * test-pdb-rw.c -- point operations of the persistent DB: insert and lookup
 * of exact vectors (dims 1, 16, 128; 4- and 8-byte keys), missing keys,
 * batching, erase, drop, wrong value sizes, the table registry, counters and
 * concurrent lookups.
 */
#include <pthread.h>

#include "pdbtest.h"

/* Insert n keys (every other of 2n candidates) and check hits and misses. */
static void roundtrip(pfx_t *f, const char *name, uint32_t kb, uint32_t dim, size_t n)
{
    hps_pdb_table_t *t = NULL;
    void *all = malloc(2 * n * kb);
    bool *expect = malloc(2 * n);
    void *ins = malloc(n * kb);
    float *v;
    size_t i;

    for (i = 0; i < 2 * n; i++) {
        /* include 0, keys >= 256 and, for int64, negatives and > 2^32 */
        uint64_t k = t_mix(i * 7 + dim) >> (kb == 8 ? 0 : 32);
        if (i < 4)
            k = (uint64_t[]){0, 1, 256, 0xffffffffu}[i];
        if (kb == 8)
            ((int64_t *)all)[i] = (int64_t)k;
        else
            ((uint32_t *)all)[i] = (uint32_t)k;
        expect[i] = (i % 2) == 0;
        if (expect[i])
            memcpy((char *)ins + (i / 2) * kb, (char *)all + i * kb, kb);
    }
    v = p_vectors(dim, ins, n, kb, dim);
    T_OK(hps_pdb_table(f->db, "m", name, true, &t, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_insert(t, n, ins, kb, v, dim, t_msg, sizeof(t_msg)));
    p_check(t, all, 2 * n, kb, dim, dim, expect);
    free(all);
    free(expect);
    free(ins);
    free(v);
}

static void test_insert_lookup_dims_and_widths(void **state)
{
    pfx_t *f = *state;
    static const uint32_t dims[] = {1, 16, 128};
    char name[32];
    size_t d;

    f->db = p_open(f->path, false, 0);
    for (d = 0; d < 3; d++) {
        snprintf(name, sizeof(name), "k8_d%u", dims[d]);
        roundtrip(f, name, 8, dims[d], 500);
        snprintf(name, sizeof(name), "k4_d%u", dims[d]);
        roundtrip(f, name, 4, dims[d], 500);
    }
}

static void test_small_batches(void **state)
{
    pfx_t *f = *state;
    hps_pdb_stats_t st;

    /* max_batch_size 7: many WriteBatches and MultiGets per call */
    f->db = p_open(f->path, false, 7);
    roundtrip(f, "small", 8, 16, 100);
    hps_pdb_stats(f->db, &st);
    assert_int_equal(st.insert_rows, 100);
    assert_int_equal(st.write_batches, (100 + 6) / 7);
    assert_int_equal(st.lookup_keys, 200);
    assert_int_equal(st.lookup_hits, 100);
    assert_int_equal(st.multiget_calls, (200 + 6) / 7);
    assert_int_equal(st.errors, 0);
}

static void test_missing_and_duplicates(void **state)
{
    pfx_t *f = *state;
    hps_pdb_table_t *t = NULL;
    int64_t ins[3] = {10, 20, 30};
    int64_t q[7] = {20, 99, 20, 10, -10, 30, 30};
    bool expect[7] = {true, false, true, true, false, true, true};
    float *v = p_vectors(5, ins, 3, 8, 4);

    f->db = p_open(f->path, false, 0);
    T_OK(hps_pdb_table(f->db, "m", "t", true, &t, t_msg, sizeof(t_msg)));
    p_check(t, q, 7, 8, 4, 5, (bool[]){false, false, false, false, false, false, false});
    T_OK(hps_pdb_insert(t, 3, ins, 8, v, 4, t_msg, sizeof(t_msg)));
    p_check(t, q, 7, 8, 4, 5, expect);
    /* found may be NULL; n == 0 is a no-op */
    float out[7 * 4];
    size_t hits = 0;
    T_OK(hps_pdb_lookup(t, 7, q, 8, 4, out, NULL, &hits, t_msg, sizeof(t_msg)));
    assert_int_equal(hits, 5);
    T_OK(hps_pdb_lookup(t, 0, NULL, 8, 4, NULL, NULL, NULL, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_insert(t, 0, NULL, 8, NULL, 4, t_msg, sizeof(t_msg)));
    /* the last of duplicate keys in one insert wins */
    int64_t dup[2] = {77, 77};
    float dv[2 * 4] = {1, 1, 1, 1, 2, 2, 2, 2};
    T_OK(hps_pdb_insert(t, 2, dup, 8, dv, 4, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_lookup(t, 1, dup, 8, 4, out, NULL, &hits, t_msg, sizeof(t_msg)));
    assert_int_equal(hits, 1);
    assert_true(out[0] == 2.0f && out[3] == 2.0f);
    free(v);
}

static void test_overwrite_and_erase(void **state)
{
    pfx_t *f = *state;
    hps_pdb_table_t *t = NULL;
    int64_t keys[4] = {1, 2, 3, 4}, gone[2] = {2, 4}, none[1] = {999};
    float *v1 = p_vectors(1, keys, 4, 8, 8), *v2 = p_vectors(2, keys, 4, 8, 8);

    f->db = p_open(f->path, false, 0);
    T_OK(hps_pdb_table(f->db, "m", "t", true, &t, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_insert(t, 4, keys, 8, v1, 8, t_msg, sizeof(t_msg)));
    p_check(t, keys, 4, 8, 8, 1, NULL);
    T_OK(hps_pdb_insert(t, 4, keys, 8, v2, 8, t_msg, sizeof(t_msg)));
    p_check(t, keys, 4, 8, 8, 2, NULL);
    T_OK(hps_pdb_erase(t, 2, gone, 8, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_erase(t, 1, none, 8, t_msg, sizeof(t_msg))); /* missing: fine */
    p_check(t, keys, 4, 8, 8, 2, (bool[]){true, false, true, false});
    free(v1);
    free(v2);
}

static void test_wrong_value_size_is_corrupt(void **state)
{
    pfx_t *f = *state;
    hps_pdb_table_t *t = NULL;
    int64_t keys[3] = {1, 2, 3};
    float *v = p_vectors(1, keys, 3, 8, 4), out[3 * 8];

    f->db = p_open(f->path, false, 0);
    T_OK(hps_pdb_table(f->db, "m", "t", true, &t, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_insert(t, 3, keys, 8, v, 4, t_msg, sizeof(t_msg)));
    T_ERR(hps_pdb_lookup(t, 3, keys, 8, 8, out, NULL, NULL, t_msg, sizeof(t_msg)), HPS_ECORRUPT);
    T_MSG_HAS("16-byte value");
    T_MSG_HAS("dim 8");
    T_MSG_HAS("hps_et.m.t");
    /* a 4-byte key never matches an 8-byte one: just missing */
    uint32_t k4[1] = {1};
    bool found[1] = {true};
    T_OK(hps_pdb_lookup(t, 1, k4, 4, 4, out, found, NULL, t_msg, sizeof(t_msg)));
    assert_false(found[0]);
    hps_pdb_stats_t st;
    hps_pdb_stats(f->db, &st);
    assert_int_equal(st.errors, 1);
    free(v);
}

static void test_bad_arguments(void **state)
{
    pfx_t *f = *state;
    hps_pdb_table_t *t = NULL;
    int64_t k[1] = {1};
    float v[4] = {0};
    hps_pdb_opts_t o;
    hps_pdb_t *db = NULL;

    hps_pdb_opts_init(&o);
    assert_int_equal(o.num_threads, 16);
    assert_int_equal(o.max_batch_size, 65536);
    assert_int_equal(o.block_cache_mb, 8);
    assert_false(o.read_only);
    o.max_batch_size = 0;
    T_ERR(hps_pdb_open(f->path, &o, &db, t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_ERR(hps_pdb_open(NULL, NULL, &db, t_msg, sizeof(t_msg)), HPS_EINVAL);
    assert_null(db);
    f->db = p_open(f->path, false, 0);
    T_ERR(hps_pdb_table(f->db, "m.x", "t", true, &t, t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_ERR(hps_pdb_table(f->db, "m", "", true, &t, t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_ERR(hps_pdb_table(f->db, "m", "t", false, &t, t_msg, sizeof(t_msg)), HPS_ENOTFOUND);
    T_OK(hps_pdb_table(f->db, "m", "t", true, &t, t_msg, sizeof(t_msg)));
    T_ERR(hps_pdb_insert(t, 1, k, 2, v, 4, t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_ERR(hps_pdb_insert(t, 1, k, 8, v, 0, t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_ERR(hps_pdb_insert(t, 1, NULL, 8, v, 4, t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_ERR(hps_pdb_lookup(t, 1, k, 8, 4, NULL, NULL, NULL, t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_ERR(hps_pdb_lookup(NULL, 1, k, 8, 4, v, NULL, NULL, t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_ERR(hps_pdb_erase(t, 1, k, 3, t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_ERR(hps_pdb_drop(NULL, t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_ERR(hps_pdb_rows_estimate(NULL, NULL), HPS_EINVAL);
    T_OK(hps_pdb_close(NULL, t_msg, sizeof(t_msg)));
}

static int count_tables(const char *model, const char *table, void *ctx)
{
    char **names = ctx;
    size_t i;

    for (i = 0; names[i] != NULL; i++) {
        char buf[300];
        snprintf(buf, sizeof(buf), "%s.%s", model, table);
        if (strcmp(buf, names[i]) == 0) {
            names[i] = "seen";
            return 0;
        }
    }
    return 42; /* unexpected table */
}

static void test_tables_drop_and_estimate(void **state)
{
    pfx_t *f = *state;
    hps_pdb_table_t *a = NULL, *a2 = NULL, *b = NULL;
    int64_t keys[1000];
    uint64_t est = 99;
    float *v;
    size_t i;

    for (i = 0; i < 1000; i++)
        keys[i] = (int64_t)i - 500;
    v = p_vectors(9, keys, 1000, 8, 2);
    f->db = p_open(f->path, false, 0);
    T_OK(hps_pdb_table(f->db, "model-1", "emb_a", true, &a, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_table(f->db, "model-1", "emb_a", true, &a2, t_msg, sizeof(t_msg)));
    assert_ptr_equal(a, a2);
    assert_string_equal(hps_pdb_table_name(a), "hps_et.model-1.emb_a");
    T_OK(hps_pdb_table(f->db, "model-1", "emb_b", true, &b, t_msg, sizeof(t_msg)));
    /* an existing, empty table estimates 0 (HugeCTR's inverted check gave 0 for all) */
    T_OK(hps_pdb_rows_estimate(a, &est));
    assert_int_equal(est, 0);
    T_OK(hps_pdb_insert(a, 1000, keys, 8, v, 2, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_rows_estimate(a, &est));
    assert_int_equal(est, 1000); /* memtable only: exact here, an estimate in general */

    const char *names[] = {"model-1.emb_a", "model-1.emb_b", NULL};
    T_OK(hps_pdb_foreach_table(f->db, count_tables, (void *)names));
    assert_string_equal(names[0], "seen");
    assert_string_equal(names[1], "seen");

    T_OK(hps_pdb_drop(a, t_msg, sizeof(t_msg)));
    T_ERR(hps_pdb_table(f->db, "model-1", "emb_a", false, &a, t_msg, sizeof(t_msg)), HPS_ENOTFOUND);
    /* created anew, empty */
    T_OK(hps_pdb_table(f->db, "model-1", "emb_a", true, &a, t_msg, sizeof(t_msg)));
    p_check(a, keys, 3, 8, 2, 9, (bool[]){false, false, false});
    free(v);
}

/* A held table dropped and made anew (a reload re-ingesting a model while
 * its serving version answers misses): the held handle reads the rows it
 * had, flushed (SST) and in the memtable alike, the new table its own;
 * releases nest; close frees a table still held. */
static void test_held_table_outlives_drop(void **state)
{
    pfx_t *f = *state;
    hps_pdb_table_t *old = NULL, *neu = NULL, *again = NULL, *b = NULL;
    int64_t keys[64];
    size_t i;

    for (i = 0; i < 64; i++)
        keys[i] = (int64_t)i * 7 - 100;
    float *v1 = p_vectors(1, keys, 64, 8, 4), *v2 = p_vectors(2, keys, 32, 8, 4);
    f->db = p_open(f->path, false, 0);
    T_OK(hps_pdb_table(f->db, "m", "t", true, &old, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_bulk_load(old, 32, keys, 8, v1, 4, t_msg, sizeof(t_msg))); /* an SST */
    T_OK(hps_pdb_insert(old, 32, keys + 32, 8, v1 + 32 * 4, 4, t_msg, sizeof(t_msg)));
    hps_pdb_table_hold(old);
    hps_pdb_table_hold(old);
    T_OK(hps_pdb_drop(old, t_msg, sizeof(t_msg)));
    T_ERR(hps_pdb_table(f->db, "m", "t", false, &again, t_msg, sizeof(t_msg)), HPS_ENOTFOUND);
    T_OK(hps_pdb_table(f->db, "m", "t", true, &neu, t_msg, sizeof(t_msg)));
    assert_ptr_not_equal(neu, old);
    T_OK(hps_pdb_bulk_load(neu, 32, keys, 8, v2, 4, t_msg, sizeof(t_msg)));
    p_check(old, keys, 64, 8, 4, 1, NULL); /* every row it had, none of the new ones */
    bool first_half[64];
    for (i = 0; i < 64; i++)
        first_half[i] = i < 32;
    p_check(neu, keys, 64, 8, 4, 2, first_half);
    hps_pdb_table_release(old);
    p_check(old, keys, 64, 8, 4, 1, NULL); /* one hold left */
    hps_pdb_table_release(old);            /* freed: old is gone from here on */
    p_check(neu, keys, 64, 8, 4, 2, first_half);
    /* an unheld drop still frees at once; a table held at close is freed by it */
    T_OK(hps_pdb_table(f->db, "m", "b", true, &b, t_msg, sizeof(t_msg)));
    hps_pdb_table_hold(b);
    hps_pdb_table_release(b);
    T_OK(hps_pdb_drop(b, t_msg, sizeof(t_msg)));
    hps_pdb_table_hold(neu);
    T_OK(hps_pdb_drop(neu, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_close(f->db, t_msg, sizeof(t_msg))); /* ASan: nothing leaks */
    f->db = NULL;
    free(v1);
    free(v2);
}

typedef struct reader {
    hps_pdb_table_t *t;
    const int64_t *keys;
    size_t n;
    int bad;
} reader_t;

static void *reader_main(void *arg)
{
    reader_t *r = arg;
    float *out = malloc(r->n * 16 * sizeof(float));
    bool *found = malloc(r->n);
    char msg[256];
    size_t i, hits, it;

    for (it = 0; it < 20; it++) {
        if (hps_pdb_lookup(r->t, r->n, r->keys, 8, 16, out, found, &hits, msg, sizeof(msg)) != 0 ||
            hits != r->n)
            r->bad++;
        for (i = 0; i < r->n; i++)
            if (out[i * 16 + 15] != t_val(3, r->keys[i], 15))
                r->bad++;
    }
    free(out);
    free(found);
    return NULL;
}

static void test_concurrent_lookups(void **state)
{
    pfx_t *f = *state;
    hps_pdb_table_t *t = NULL;
    enum { N = 5000, THREADS = 4 };
    int64_t *keys = malloc(N * sizeof(*keys));
    pthread_t th[THREADS];
    reader_t r[THREADS];
    float *v;
    size_t i;

    for (i = 0; i < N; i++)
        keys[i] = (int64_t)t_mix(i);
    v = p_vectors(3, keys, N, 8, 16);
    f->db = p_open(f->path, false, 1000);
    T_OK(hps_pdb_table(f->db, "m", "t", true, &t, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_insert(t, N, keys, 8, v, 16, t_msg, sizeof(t_msg)));
    for (i = 0; i < THREADS; i++) {
        r[i] = (reader_t){t, keys + i * (N / THREADS), N / THREADS, 0};
        assert_int_equal(pthread_create(&th[i], NULL, reader_main, &r[i]), 0);
    }
    for (i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(r[i].bad, 0);
    }
    free(keys);
    free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_insert_lookup_dims_and_widths, p_setup, p_teardown),
        cmocka_unit_test_setup_teardown(test_small_batches, p_setup, p_teardown),
        cmocka_unit_test_setup_teardown(test_missing_and_duplicates, p_setup, p_teardown),
        cmocka_unit_test_setup_teardown(test_overwrite_and_erase, p_setup, p_teardown),
        cmocka_unit_test_setup_teardown(test_wrong_value_size_is_corrupt, p_setup, p_teardown),
        cmocka_unit_test_setup_teardown(test_bad_arguments, p_setup, p_teardown),
        cmocka_unit_test_setup_teardown(test_tables_drop_and_estimate, p_setup, p_teardown),
        cmocka_unit_test_setup_teardown(test_held_table_outlives_drop, p_setup, p_teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_lookups, p_setup, p_teardown),
    };

    return cmocka_run_group_tests_name("pdb-rw", tests, NULL, NULL);
}
