/*
 * test-modelfile.c -- HugeCTR sparse model files: validation (every refusal
 * with its exact code and a message naming the file), chunked reads,
 * 32-bit keys, whole-model validation.
 */
#include "mftest.h"

#include "hps/modelfile.h"

typedef struct fx {
    char *root;
} fx_t;

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof(*f));

    f->root = t_mkdtemp("mf");
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

/* Keys 0..n-1 scrambled, with a negative key and one >= 2^32. */
static void some_keys(int64_t *k, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        k[i] = (int64_t)(t_mix(i) % 1000000);
    if (n > 2) {
        k[0] = -5;
        k[1] = (int64_t)1 << 40;
    }
}

static void test_open_and_read_chunks(void **state)
{
    fx_t *f = *state;
    int64_t keys[100], got_k[100];
    float want[100 * 16], got_v[100 * 16];
    hps_modelfile_t *mf = NULL;
    char *dir;
    uint64_t row, chunk;

    some_keys(keys, 100);
    dir = t_write_table(f->root, "t0", 7, keys, 100, 16);
    T_OK(hps_modelfile_open(dir, 16, &mf, t_msg, sizeof(t_msg)));
    assert_int_equal(hps_modelfile_rows(mf), 100);
    assert_int_equal(hps_modelfile_dim(mf), 16);
    assert_string_equal(hps_modelfile_dir(mf), dir);
    assert_int_equal(hps_modelfile_chunk_rows(mf, 0), 10); /* HugeCTR: 10 chunks */
    assert_int_equal(hps_modelfile_chunk_rows(mf, 7 * (8 + 64)), 7);
    assert_int_equal(hps_modelfile_chunk_rows(mf, 1), 1);
    assert_int_equal(hps_modelfile_chunk_rows(mf, UINT64_MAX), 100);
    t_fill(7, keys, 100, 16, want);
    chunk = 7;
    for (row = 0; row < 100; row += chunk) {
        size_t m = 100 - row < chunk ? 100 - row : chunk;
        T_OK(hps_modelfile_read(mf, row, m, got_k + row, got_v + row * 16, t_msg, sizeof(t_msg)));
    }
    assert_memory_equal(got_k, keys, sizeof(keys));
    assert_memory_equal(got_v, want, sizeof(want));
    /* keys only, vectors only, empty read */
    T_OK(hps_modelfile_read(mf, 99, 1, got_k, NULL, t_msg, sizeof(t_msg)));
    assert_int_equal(got_k[0], keys[99]);
    T_OK(hps_modelfile_read(mf, 3, 1, NULL, got_v, t_msg, sizeof(t_msg)));
    assert_memory_equal(got_v, want + 3 * 16, 16 * sizeof(float));
    T_OK(hps_modelfile_read(mf, 12345, 0, NULL, NULL, t_msg, sizeof(t_msg)));
    /* out of range */
    T_ERR(hps_modelfile_read(mf, 99, 2, got_k, NULL, t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_ERR(hps_modelfile_read(mf, 100, 1, got_k, NULL, t_msg, sizeof(t_msg)), HPS_EINVAL);
    hps_modelfile_close(mf);
    hps_modelfile_close(NULL);
    free(dir);
}

static void test_truncated_emb_vector(void **state)
{
    fx_t *f = *state;
    int64_t keys[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    hps_modelfile_t *mf = NULL;
    char *dir = t_write_table(f->root, "t", 1, keys, 10, 8);

    t_resize(dir, "emb_vector", 10 * 8 * 4 - 8 * 4); /* last row missing */
    T_ERR(hps_modelfile_open(dir, 8, &mf, t_msg, sizeof(t_msg)), HPS_ETRUNCATED);
    assert_null(mf);
    T_MSG_HAS("emb_vector");
    T_MSG_HAS("/key");
    T_MSG_HAS("288 bytes"); /* actual */
    T_MSG_HAS("320 bytes"); /* expected */
    T_MSG_HAS("N = 10");
    T_MSG_HAS("dim is 8");
    T_MSG_HAS("(80 bytes)");               /* key file size */
    assert_null(strstr(t_msg, "fit dim")); /* 288 / (10 x 4) is no whole dim */
    free(dir);
}

static void test_truncated_emb_vector_partial_float(void **state)
{
    fx_t *f = *state;
    int64_t keys[4] = {1, 2, 3, 4};
    hps_modelfile_t *mf = NULL;
    char *dir = t_write_table(f->root, "t", 1, keys, 4, 4);

    t_resize(dir, "emb_vector", 4 * 4 * 4 - 2);
    T_ERR(hps_modelfile_open(dir, 4, &mf, t_msg, sizeof(t_msg)), HPS_ETRUNCATED);
    T_MSG_HAS("emb_vector");
    T_MSG_HAS("not a multiple of 4");
    free(dir);
}

static void test_key_not_multiple_of_8(void **state)
{
    fx_t *f = *state;
    int64_t keys[4] = {1, 2, 3, 4};
    hps_modelfile_t *mf = NULL;
    char *dir = t_write_table(f->root, "t", 1, keys, 4, 4);

    t_resize(dir, "key", 4 * 8 - 3);
    T_ERR(hps_modelfile_open(dir, 4, &mf, t_msg, sizeof(t_msg)), HPS_ETRUNCATED);
    T_MSG_HAS("/key");
    T_MSG_HAS("29 bytes");
    T_MSG_HAS("not a multiple of 8");
    free(dir);
}

static void test_wrong_vector_size(void **state)
{
    fx_t *f = *state;
    int64_t keys[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    hps_modelfile_t *mf = NULL;
    char *dir = t_write_table(f->root, "t", 1, keys, 10, 16);

    /* configured dim too small: more bytes than N x dim x 4 */
    T_ERR(hps_modelfile_open(dir, 8, &mf, t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_MSG_HAS("emb_vector holds 640 bytes");
    T_MSG_HAS("/key (80 bytes)");
    T_MSG_HAS("N = 10");
    T_MSG_HAS("dim is 8");
    T_MSG_HAS("expected N x dim x 4 = 320 bytes");
    T_MSG_HAS("got 640");
    T_MSG_HAS("fit dim 16");
    /* configured dim too large: fewer bytes (also what a truncation looks like) */
    T_ERR(hps_modelfile_open(dir, 32, &mf, t_msg, sizeof(t_msg)), HPS_ETRUNCATED);
    T_MSG_HAS("expected N x dim x 4 = 1280 bytes");
    T_MSG_HAS("fit dim 16");
    /* the right dim opens */
    T_OK(hps_modelfile_open(dir, 16, &mf, t_msg, sizeof(t_msg)));
    hps_modelfile_close(mf);
    free(dir);
}

static void test_missing_files(void **state)
{
    fx_t *f = *state;
    int64_t keys[2] = {1, 2};
    hps_modelfile_t *mf = NULL;
    char *dir = t_write_table(f->root, "t", 1, keys, 2, 4), *p;

    p = t_join(dir, "emb_vector");
    assert_int_equal(unlink(p), 0);
    T_ERR(hps_modelfile_open(dir, 4, &mf, t_msg, sizeof(t_msg)), HPS_ENOTFOUND);
    T_MSG_HAS(p);
    free(p);
    p = t_join(dir, "key");
    assert_int_equal(unlink(p), 0);
    T_ERR(hps_modelfile_open(dir, 4, &mf, t_msg, sizeof(t_msg)), HPS_ENOTFOUND);
    T_MSG_HAS(p);
    free(p);
    p = t_join(f->root, "no-such-table");
    T_ERR(hps_modelfile_open(p, 4, &mf, t_msg, sizeof(t_msg)), HPS_ENOTFOUND);
    T_MSG_HAS(p);
    free(p);
    /* key is a directory */
    p = t_join(dir, "key");
    assert_int_equal(mkdir(p, 0755), 0);
    T_ERR(hps_modelfile_open(dir, 4, &mf, t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_MSG_HAS("key: not a regular file (a directory)");
    free(p);
    assert_null(mf);
    free(dir);
}

/* A FIFO as key or emb_vector: refused at once (open used to wait for a
 * writer forever), naming the file; the same through validate_model.
 * alarm() turns a regression into a failure instead of a hang. */
static void test_fifo_files(void **state)
{
    fx_t *f = *state;
    int64_t keys[2] = {1, 2};
    hps_modelfile_t *mf = NULL;
    const char *names[2] = {"key", "emb_vector"};

    alarm(10);
    for (int i = 0; i < 2; i++) {
        char tname[8];
        snprintf(tname, sizeof(tname), "t%d", i);
        char *dir = t_write_table(f->root, tname, 1, keys, 2, 4);
        char *p = t_join(dir, names[i]);
        assert_int_equal(unlink(p), 0);
        assert_int_equal(mkfifo(p, 0644), 0);
        char *want = NULL;
        assert_true(asprintf(&want, "%s: not a regular file (a FIFO)", p) > 0);
        T_ERR(hps_modelfile_open(dir, 4, &mf, t_msg, sizeof(t_msg)), HPS_EINVAL);
        T_MSG_HAS(want);
        assert_null(mf);
        hps_modelfile_spec_t spec[1] = {{"emb0", dir, 4, 8}};
        T_ERR(hps_modelfile_validate_model(spec, 1, NULL, t_msg, sizeof(t_msg)), HPS_EINVAL);
        T_MSG_HAS(want);
        free(want);
        free(p);
        free(dir);
    }
    alarm(0);
}

static void test_empty_files(void **state)
{
    fx_t *f = *state;
    int64_t keys[2] = {1, 2};
    hps_modelfile_t *mf = NULL;
    char *dir = t_write_table(f->root, "t", 1, keys, 2, 4);

    t_resize(dir, "key", 0);
    T_ERR(hps_modelfile_open(dir, 4, &mf, t_msg, sizeof(t_msg)), HPS_ETRUNCATED);
    T_MSG_HAS("/key: empty key file");
    t_resize(dir, "emb_vector", 0);
    T_ERR(hps_modelfile_open(dir, 4, &mf, t_msg, sizeof(t_msg)), HPS_ETRUNCATED);
    T_MSG_HAS("/key: empty key file");
    /* keys present, vectors empty */
    t_resize(dir, "key", 16);
    T_ERR(hps_modelfile_open(dir, 4, &mf, t_msg, sizeof(t_msg)), HPS_ETRUNCATED);
    T_MSG_HAS("emb_vector holds 0 bytes");
    assert_null(mf);
    free(dir);
}

static void test_bad_arguments(void **state)
{
    fx_t *f = *state;
    hps_modelfile_t *mf = NULL;

    T_ERR(hps_modelfile_open(f->root, 0, &mf, t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_ERR(hps_modelfile_open(f->root, HPS_MODELFILE_MAX_DIM + 1, &mf, t_msg, sizeof(t_msg)),
          HPS_EINVAL);
    T_ERR(hps_modelfile_open(NULL, 4, &mf, t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_ERR(hps_modelfile_open(f->root, 4, NULL, NULL, 0), HPS_EINVAL);
    T_ERR(hps_modelfile_read(NULL, 0, 1, NULL, NULL, t_msg, sizeof(t_msg)), HPS_EINVAL);
    assert_true(hps_modelfile_name_ok("sparse_embedding0"));
    assert_true(hps_modelfile_name_ok("a-B_9"));
    assert_false(hps_modelfile_name_ok(""));
    assert_false(hps_modelfile_name_ok(NULL));
    assert_false(hps_modelfile_name_ok("a.b"));
    assert_false(hps_modelfile_name_ok("a b"));
    char longname[122];
    memset(longname, 'x', 121);
    longname[121] = '\0';
    assert_false(hps_modelfile_name_ok(longname));
    longname[120] = '\0';
    assert_true(hps_modelfile_name_ok(longname));
}

static void test_read_u32(void **state)
{
    fx_t *f = *state;
    int64_t keys[9000];
    uint32_t k32[9000];
    float v[9000 * 2], want[9000 * 2];
    hps_modelfile_t *mf = NULL;
    size_t i, bad = 0;
    char *dir;

    for (i = 0; i < 9000; i++)
        keys[i] = (int64_t)(t_mix(i) & 0xffffffffu);
    keys[17] = UINT32_MAX;
    keys[18] = 0;
    dir = t_write_table(f->root, "u32", 3, keys, 9000, 2);
    T_OK(hps_modelfile_open(dir, 2, &mf, t_msg, sizeof(t_msg)));
    T_OK(hps_modelfile_read_u32(mf, 0, 9000, k32, v, t_msg, sizeof(t_msg)));
    t_fill(3, keys, 9000, 2, want);
    for (i = 0; i < 9000; i++)
        assert_int_equal(k32[i], (uint32_t)keys[i]);
    assert_memory_equal(v, want, sizeof(v));
    hps_modelfile_close(mf);
    free(dir);

    /* 2^32 at row 8500 (second read piece) and -1 at row 9 are refused */
    keys[8500] = (int64_t)1 << 32;
    dir = t_write_table(f->root, "u32bad", 3, keys, 9000, 2);
    T_OK(hps_modelfile_open(dir, 2, &mf, t_msg, sizeof(t_msg)));
    T_ERR(hps_modelfile_read_u32(mf, 0, 9000, k32, NULL, t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_MSG_HAS("row 8500");
    T_MSG_HAS("key 4294967296");
    T_MSG_HAS("/key");
    T_OK(hps_modelfile_read_u32(mf, 0, 8500, k32, NULL, t_msg, sizeof(t_msg)));
    T_OK(hps_modelfile_read_u32(mf, 0, 9000, NULL, v, t_msg, sizeof(t_msg)));
    hps_modelfile_close(mf);
    free(dir);

    /* in-place narrowing helper */
    int64_t w[4] = {0, 1, UINT32_MAX, -1};
    assert_int_equal(hps_modelfile_keys_to_u32(w, 3, (uint32_t *)w, &bad), 0);
    assert_int_equal(((uint32_t *)w)[0], 0);
    assert_int_equal(((uint32_t *)w)[1], 1);
    assert_int_equal(((uint32_t *)w)[2], UINT32_MAX);
    int64_t x[3] = {5, -1, 7};
    uint32_t y[3];
    assert_int_equal(hps_modelfile_keys_to_u32(x, 3, y, &bad), HPS_EINVAL);
    assert_int_equal(bad, 1);
    assert_int_equal(y[0], 5);
}

static void test_file_shrinks_after_open(void **state)
{
    fx_t *f = *state;
    int64_t keys[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, k[10];
    float v[10 * 4];
    hps_modelfile_t *mf = NULL;
    char *dir = t_write_table(f->root, "t", 1, keys, 10, 4);

    T_OK(hps_modelfile_open(dir, 4, &mf, t_msg, sizeof(t_msg)));
    t_resize(dir, "emb_vector", 5 * 16);
    T_ERR(hps_modelfile_read(mf, 0, 10, k, v, t_msg, sizeof(t_msg)), HPS_ETRUNCATED);
    T_MSG_HAS("emb_vector");
    hps_modelfile_close(mf);
    free(dir);
}

static void test_validate_model(void **state)
{
    fx_t *f = *state;
    int64_t keys[20];
    char *d0, *d1, *d2, *d3;
    uint64_t rows = 0;
    size_t i;

    for (i = 0; i < 20; i++)
        keys[i] = (int64_t)i * 1000;
    d0 = t_write_table(f->root, "t0", 1, keys, 20, 4);
    d1 = t_write_table(f->root, "t1", 2, keys, 10, 8);
    d2 = t_write_table(f->root, "t2", 3, keys, 5, 8);
    keys[3] = -1;
    d3 = t_write_table(f->root, "t3", 4, keys, 20, 4);

    hps_modelfile_spec_t good[2] = {{"emb0", d0, 4, 8}, {"emb1", d1, 8, 4}};
    T_OK(hps_modelfile_validate_model(good, 2, &rows, t_msg, sizeof(t_msg)));
    assert_int_equal(rows, 30);

    /* one table with a wrong dim */
    hps_modelfile_spec_t bad_dim[3] = {{"emb0", d0, 4, 8}, {"emb1", d1, 8, 8}, {"emb2", d2, 4, 8}};
    T_ERR(hps_modelfile_validate_model(bad_dim, 3, &rows, t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_MSG_HAS("table 'emb2': ");
    T_MSG_HAS("emb_vector");
    /* a 32-bit-key table with a negative key (the same table is fine as int64) */
    hps_modelfile_spec_t bad_key[2] = {{"emb0", d0, 4, 8}, {"emb3", d3, 4, 4}};
    T_ERR(hps_modelfile_validate_model(bad_key, 2, NULL, t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_MSG_HAS("table 'emb3': ");
    T_MSG_HAS("row 3");
    bad_key[1].key_bytes = 8;
    T_OK(hps_modelfile_validate_model(bad_key, 2, NULL, t_msg, sizeof(t_msg)));
    /* names and key widths */
    hps_modelfile_spec_t dup[2] = {{"emb0", d0, 4, 8}, {"emb0", d1, 8, 8}};
    T_ERR(hps_modelfile_validate_model(dup, 2, NULL, t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_MSG_HAS("given twice");
    hps_modelfile_spec_t badname[1] = {{"a.b", d0, 4, 8}};
    T_ERR(hps_modelfile_validate_model(badname, 1, NULL, t_msg, sizeof(t_msg)), HPS_EINVAL);
    hps_modelfile_spec_t badkb[1] = {{"emb0", d0, 4, 2}};
    T_ERR(hps_modelfile_validate_model(badkb, 1, NULL, t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_ERR(hps_modelfile_validate_model(good, 0, NULL, t_msg, sizeof(t_msg)), HPS_EINVAL);
    /* a missing directory */
    hps_modelfile_spec_t missing[1] = {{"emb0", "/nonexistent/hps/t", 4, 8}};
    T_ERR(hps_modelfile_validate_model(missing, 1, NULL, t_msg, sizeof(t_msg)), HPS_ENOTFOUND);
    T_MSG_HAS("/nonexistent/hps/t/key");
    free(d0);
    free(d1);
    free(d2);
    free(d3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_open_and_read_chunks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncated_emb_vector, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncated_emb_vector_partial_float, setup, teardown),
        cmocka_unit_test_setup_teardown(test_key_not_multiple_of_8, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_vector_size, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fifo_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_u32, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_shrinks_after_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_validate_model, setup, teardown),
    };

    return cmocka_run_group_tests_name("modelfile", tests, NULL, NULL);
}
