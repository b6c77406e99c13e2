/*
 * test-modelfile-contents.c -- the content check of sparse model tables
 * (hps_modelfile_scan(), hps_modelfile_check_table()): rows with NaN or
 * +-Inf values and keys given on more than one row are counted exactly, the
 * first of each is named, the winning (last) row of each duplicated key is
 * returned, and a refused table's message names the table, the file, the
 * count and the first bad row and key.
 */
#include <math.h>

#include "mftest.h"

#include "hps/modelfile.h"

typedef struct fx {
    char *root;
} fx_t;

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof(*f));

    f->root = t_mkdtemp("mfc");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;

    t_rmrf(f->root);
    free(f);
    return 0;
}

/* Write a table with explicit keys and vectors. */
static char *write_raw(const char *parent, const char *name, const int64_t *keys, size_t n,
                       const float *vecs, uint32_t dim)
{
    char *dir = t_join(parent, name), *kp, *vp;

    assert_int_equal(mkdir(dir, 0755), 0);
    kp = t_join(dir, "key");
    vp = t_join(dir, "emb_vector");
    t_write_file(kp, keys, n * 8);
    t_write_file(vp, vecs, n * dim * sizeof(float));
    free(kp);
    free(vp);
    return dir;
}

static void scan_dir(const char *dir, uint32_t dim, hps_modelfile_stats_t *st,
                     hps_modelfile_dup_t **dups, size_t *ndups)
{
    hps_modelfile_t *mf = NULL;

    T_OK(hps_modelfile_open(dir, dim, &mf, t_msg, sizeof(t_msg)));
    T_OK(hps_modelfile_scan(mf, st, dups, ndups, t_msg, sizeof(t_msg)));
    hps_modelfile_close(mf);
}

static void test_clean_table(void **state)
{
    fx_t *f = *state;
    int64_t keys[64];
    hps_modelfile_stats_t st;
    hps_modelfile_dup_t *dups = (void *)1;
    size_t nd = 99;

    for (size_t i = 0; i < 64; i++)
        keys[i] = (int64_t)i - 10; /* includes 0 and negatives */
    char *dir = t_write_table(f->root, "t", 3, keys, 64, 8);
    scan_dir(dir, 8, &st, &dups, &nd);
    assert_int_equal(st.rows, 64);
    assert_int_equal(st.nonfinite_rows, 0);
    assert_int_equal(st.dup_keys, 0);
    assert_int_equal(st.dup_rows, 0);
    assert_true(st.first_nonfinite_row == UINT64_MAX);
    assert_true(st.first_dup_row == UINT64_MAX);
    assert_null(dups);
    assert_int_equal(nd, 0);
    char buf[256];
    assert_false(hps_modelfile_stats_format(
        &st, dir, HPS_MODELFILE_NONFINITE | HPS_MODELFILE_DUPLICATES, buf, sizeof(buf)));
    assert_string_equal(buf, "");
    free(dir);
}

/* dim 5 (odd: a row's last float is checked alone) and dim 1. */
static void test_nan_inf_rows(void **state)
{
    fx_t *f = *state;
    enum { N = 40 };
    const uint32_t dim = 5;
    int64_t keys[N];
    float v[N * 5];
    uint32_t snan = 0x7f800001u, negnan = 0xffc00000u;
    hps_modelfile_stats_t st;

    for (size_t i = 0; i < N; i++)
        keys[i] = 1000 + (int64_t)i;
    t_fill(9, keys, N, dim, v);
    v[7 * dim + 4] = NAN;       /* row 7: NaN as the last (odd) element */
    v[12 * dim + 0] = INFINITY; /* row 12: +Inf */
    v[13 * dim + 2] = -INFINITY;
    memcpy(&v[20 * dim + 1], &snan, 4);   /* a signalling NaN */
    memcpy(&v[20 * dim + 3], &negnan, 4); /* and a negative quiet NaN on the same row */
    memcpy(&v[33 * dim + 0], &negnan, 4);
    /* not counted: FLT_MAX, -FLT_MAX, the smallest denormal, -0.0 */
    v[2 * dim + 0] = 3.4028234663852886e+38f;
    v[2 * dim + 1] = -3.4028234663852886e+38f;
    v[3 * dim + 0] = 1e-45f;
    v[3 * dim + 1] = -0.0f;
    char *dir = write_raw(f->root, "t", keys, N, v, dim);
    scan_dir(dir, dim, &st, NULL, NULL);
    assert_int_equal(st.nonfinite_rows, 5); /* rows 7, 12, 13, 20, 33 */
    assert_int_equal(st.first_nonfinite_row, 7);
    assert_int_equal(st.first_nonfinite_key, 1007);
    assert_int_equal(st.dup_keys, 0);

    /* dim 1: every element is a row */
    float w[N];
    for (size_t i = 0; i < N; i++)
        w[i] = (float)i;
    w[39] = INFINITY;
    char *dir1 = write_raw(f->root, "t1", keys, N, w, 1);
    scan_dir(dir1, 1, &st, NULL, NULL);
    assert_int_equal(st.nonfinite_rows, 1);
    assert_int_equal(st.first_nonfinite_row, 39);
    assert_int_equal(st.first_nonfinite_key, 1039);
    free(dir);
    free(dir1);
}

static void test_duplicate_keys(void **state)
{
    fx_t *f = *state;
    /* key 5 on rows 1, 4, 9; key 0 on rows 2, 6; INT64_MIN on rows 3, 8;
     * -7 on rows 0, 10 (keys 0 and INT64_MIN exercise the hash set's
     * special cases) */
    int64_t keys[12] = {-7, 5, 0, INT64_MIN, 5, 11, 0, 12, INT64_MIN, 5, -7, 13};
    hps_modelfile_stats_t st;
    hps_modelfile_dup_t *d = NULL;
    size_t nd = 0;

    char *dir = t_write_table(f->root, "t", 1, keys, 12, 4);
    scan_dir(dir, 4, &st, &d, &nd);
    assert_int_equal(st.rows, 12);
    assert_int_equal(st.dup_keys, 4);
    assert_int_equal(st.dup_rows, 5); /* 12 rows, 7 distinct keys */
    assert_int_equal(st.first_dup_row, 4);
    assert_int_equal(st.first_dup_key, 5);
    assert_int_equal(st.nonfinite_rows, 0);
    assert_int_equal(nd, 4);
    assert_non_null(d);
    /* sorted by key, each with its last row */
    assert_true(d[0].key == INT64_MIN && d[0].last_row == 8);
    assert_true(d[1].key == -7 && d[1].last_row == 10);
    assert_true(d[2].key == 0 && d[2].last_row == 6);
    assert_true(d[3].key == 5 && d[3].last_row == 9);
    free(d);
    free(dir);
}

/* 300,000 rows of dim 16: several 4 MiB pieces; duplicates within and
 * across pieces, checked against a sort. */
static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void test_large_against_sort(void **state)
{
    fx_t *f = *state;
    enum { N = 300000, DIM = 16 };
    int64_t *keys = malloc(N * sizeof(int64_t)), *sorted = malloc(N * sizeof(int64_t));
    hps_modelfile_stats_t st;
    hps_modelfile_dup_t *d = NULL;
    size_t nd = 0;
    uint64_t want_first = UINT64_MAX;

    for (size_t i = 0; i < N; i++)
        keys[i] = (int64_t)t_mix(i);
    for (size_t i = 0; i < 500; i++) /* row 250000 + i repeats row 7 * i */
        keys[250000 + i] = keys[7 * i];
    for (size_t i = 0; i < 100; i++) /* and row 290000 + i repeats row 250000 + i again */
        keys[290000 + i] = keys[250000 + i];
    want_first = 250000;
    memcpy(sorted, keys, N * sizeof(int64_t));
    qsort(sorted, N, sizeof(int64_t), cmp_i64);
    uint64_t distinct = 0, dup_keys = 0;
    for (size_t i = 0; i < N; i++) {
        distinct += i == 0 || sorted[i] != sorted[i - 1];
        dup_keys +=
            i > 0 && sorted[i] == sorted[i - 1] && (i < 2 || sorted[i - 1] != sorted[i - 2]);
    }
    assert_int_equal(dup_keys, 500);
    char *dir = t_write_table(f->root, "t", 2, keys, N, DIM);
    scan_dir(dir, DIM, &st, &d, &nd);
    assert_int_equal(st.rows, N);
    assert_int_equal(st.dup_keys, dup_keys);
    assert_int_equal(st.dup_rows, N - distinct);
    assert_int_equal(st.dup_rows, 600);
    assert_int_equal(st.first_dup_row, want_first);
    assert_true(st.first_dup_key == keys[0]);
    assert_int_equal(nd, 500);
    for (size_t j = 0; j < nd; j++) {
        if (j > 0)
            assert_true(d[j - 1].key < d[j].key);
        /* the last row of the key: 290000 + i for i < 100, else 250000 + i */
        uint64_t r = d[j].last_row;
        assert_true(keys[r] == d[j].key);
        for (uint64_t s = r + 1; s < N; s++)
            if (keys[s] == d[j].key)
                fail_msg("key %" PRId64 ": row %" PRIu64 " after the reported last row %" PRIu64,
                         d[j].key, s, r);
        assert_true(r >= 250000);
    }
    free(d);
    free(dir);
    free(keys);
    free(sorted);
}

/* refuse: HPS_EINVAL with a message naming table, file, count, first row
 * and key; warn (refuse = 0): success with the counts and duplicates. */
static void test_check_table_refuse(void **state)
{
    fx_t *f = *state;
    int64_t keys[10] = {10, 11, 12, 13, 11, 15, 16, 17, 13, 19};
    float v[10 * 3];
    hps_modelfile_stats_t st;
    hps_modelfile_dup_t *d = NULL;
    size_t nd = 0;

    t_fill(4, keys, 10, 3, v);
    v[5 * 3 + 1] = NAN;
    v[9 * 3 + 2] = -INFINITY;
    char *dir = write_raw(f->root, "tbl", keys, 10, v, 3);
    hps_modelfile_spec_t s = {.table = "emb_a", .dir = dir, .dim = 3, .key_bytes = 8};
    char want[1024];

    /* refuse NaN/Inf */
    memset(&st, 0xee, sizeof(st));
    T_ERR(
        hps_modelfile_check_table(&s, HPS_MODELFILE_NONFINITE, &st, &d, &nd, t_msg, sizeof(t_msg)),
        HPS_EINVAL);
    snprintf(want, sizeof(want),
             "table 'emb_a': %s/emb_vector: 2 rows with a NaN or Inf value (first: row 5, key "
             "15)",
             dir);
    assert_string_equal(t_msg, want);
    assert_int_equal(st.nonfinite_rows, 2); /* counts written on refusal too */
    assert_int_equal(st.dup_keys, 2);
    assert_null(d);

    /* refuse duplicates */
    T_ERR(
        hps_modelfile_check_table(&s, HPS_MODELFILE_DUPLICATES, &st, &d, &nd, t_msg, sizeof(t_msg)),
        HPS_EINVAL);
    snprintf(want, sizeof(want),
             "table 'emb_a': %s/key: 2 keys on more than one row, 2 rows overridden by a later "
             "row of the same key (first: row 4 repeats key 11)",
             dir);
    assert_string_equal(t_msg, want);
    assert_null(d);

    /* both */
    T_ERR(hps_modelfile_check_table(&s, HPS_MODELFILE_NONFINITE | HPS_MODELFILE_DUPLICATES, NULL,
                                    NULL, NULL, t_msg, sizeof(t_msg)),
          HPS_EINVAL);
    T_MSG_HAS("emb_vector: 2 rows with a NaN or Inf value (first: row 5, key 15); ");
    T_MSG_HAS("/key: 2 keys on more than one row");

    /* warn: loads, with the counts and the winning rows */
    T_OK(hps_modelfile_check_table(&s, 0, &st, &d, &nd, t_msg, sizeof(t_msg)));
    assert_int_equal(st.nonfinite_rows, 2);
    assert_int_equal(st.first_nonfinite_row, 5);
    assert_int_equal(st.first_nonfinite_key, 15);
    assert_int_equal(st.dup_keys, 2);
    assert_int_equal(st.dup_rows, 2);
    assert_int_equal(nd, 2);
    assert_true(d[0].key == 11 && d[0].last_row == 4);
    assert_true(d[1].key == 13 && d[1].last_row == 8);
    free(d);
    d = NULL;

    /* a clean table passes under refuse */
    int64_t ok_keys[4] = {1, 2, 3, 4};
    char *ok = t_write_table(f->root, "ok", 1, ok_keys, 4, 3);
    hps_modelfile_spec_t s2 = {.table = "emb_b", .dir = ok, .dim = 3, .key_bytes = 8};
    T_OK(hps_modelfile_check_table(&s2, HPS_MODELFILE_NONFINITE | HPS_MODELFILE_DUPLICATES, &st, &d,
                                   &nd, t_msg, sizeof(t_msg)));
    assert_int_equal(st.nonfinite_rows + st.dup_keys, 0);
    assert_null(d);

    /* a table with only duplicates passes when only NaN/Inf are refused */
    int64_t dk[3] = {8, 8, 9};
    char *dd = t_write_table(f->root, "dd", 1, dk, 3, 3);
    hps_modelfile_spec_t s3 = {.table = "emb_c", .dir = dd, .dim = 3, .key_bytes = 8};
    T_OK(hps_modelfile_check_table(&s3, HPS_MODELFILE_NONFINITE, &st, &d, &nd, t_msg,
                                   sizeof(t_msg)));
    assert_int_equal(nd, 1);
    assert_true(d[0].key == 8 && d[0].last_row == 1);
    free(d);

    /* open errors keep their code, prefixed with the table */
    t_resize(dd, "emb_vector", 8);
    T_ERR(hps_modelfile_check_table(&s3, 0, NULL, NULL, NULL, t_msg, sizeof(t_msg)),
          HPS_ETRUNCATED);
    T_MSG_HAS("table 'emb_c': ");
    free(dir);
    free(ok);
    free(dd);
}

static void test_one_row_singular_text(void **state)
{
    fx_t *f = *state;
    int64_t keys[3] = {-4, -4, 2};
    float v[3] = {1, INFINITY, 2};
    char *dir = write_raw(f->root, "t", keys, 3, v, 1);
    hps_modelfile_spec_t s = {.table = "x", .dir = dir, .dim = 1, .key_bytes = 8};
    char want[1024];

    T_ERR(hps_modelfile_check_table(&s, HPS_MODELFILE_NONFINITE | HPS_MODELFILE_DUPLICATES, NULL,
                                    NULL, NULL, t_msg, sizeof(t_msg)),
          HPS_EINVAL);
    snprintf(want, sizeof(want),
             "table 'x': %s/emb_vector: 1 row with a NaN or Inf value (first: row 1, key -4); "
             "%s/key: 1 key on more than one row, 1 row overridden by a later row of the same "
             "key (first: row 1 repeats key -4)",
             dir, dir);
    assert_string_equal(t_msg, want);
    free(dir);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    hps_modelfile_stats_t st;

    T_ERR(hps_modelfile_scan(NULL, &st, NULL, NULL, t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_ERR(hps_modelfile_check_table(NULL, 0, NULL, NULL, NULL, t_msg, sizeof(t_msg)), HPS_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_clean_table, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nan_inf_rows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_duplicate_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_against_sort, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_table_refuse, setup, teardown),
        cmocka_unit_test_setup_teardown(test_one_row_singular_text, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_arguments, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
