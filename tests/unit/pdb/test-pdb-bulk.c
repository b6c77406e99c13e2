/*
 * test-pdb-bulk.c -- bulk loading through SST files and ingestion: unsorted
 * input with negative int64 keys and keys >= 256 (RocksDB's bytewise order
 * of little-endian bytes is not numeric order), duplicates (last wins),
 * ingestion over existing rows, no leftover temporary files, chunked
 * loading of sparse model files, and staged rows ingested later.
 */
#include <dirent.h>

#include "pdbtest.h"

/* Number of entries of dir whose name starts with prefix. */
static int count_entries(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;

    assert_non_null(d);
    while ((e = readdir(d)) != NULL)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

static void test_bytewise_order_int64(void **state)
{
    pfx_t *f = *state;
    hps_pdb_table_t *t = NULL;
    /* numeric order and bytewise-LE order differ for all of these */
    int64_t keys[] = {1,  256, 255, -1,  -256,    65536,        2,         INT64_MIN, INT64_MAX,
                      -2, 0,   257, 512, 1 << 20, -(1LL << 40), 1LL << 40, 3};
    size_t n = sizeof(keys) / sizeof(keys[0]);
    float *v = p_vectors(11, keys, n, 8, 16);
    hps_pdb_stats_t st;

    f->db = p_open(f->path, false, 0);
    T_OK(hps_pdb_table(f->db, "m", "t", true, &t, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_bulk_load(t, n, keys, 8, v, 16, t_msg, sizeof(t_msg)));
    p_check(t, keys, n, 8, 16, 11, NULL);
    int64_t miss[3] = {4, -3, 258};
    p_check(t, miss, 3, 8, 16, 11, (bool[]){false, false, false});
    hps_pdb_stats(f->db, &st);
    assert_int_equal(st.bulk_rows, n);
    assert_int_equal(st.sst_files, 1);
    assert_int_equal(count_entries(f->path, ".hps-ingest-"), 0);
    free(v);
}

static void test_bytewise_order_uint32(void **state)
{
    pfx_t *f = *state;
    hps_pdb_table_t *t = NULL;
    uint32_t keys[] = {1, 256, 255, 0xffffffffu, 0x01000000u, 0x00ff00ffu, 0, 65536, 2};
    size_t n = sizeof(keys) / sizeof(keys[0]);
    float *v = p_vectors(12, keys, n, 4, 1);

    f->db = p_open(f->path, false, 0);
    T_OK(hps_pdb_table(f->db, "m", "t32", true, &t, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_bulk_load(t, n, keys, 4, v, 1, t_msg, sizeof(t_msg)));
    p_check(t, keys, n, 4, 1, 12, NULL);
    free(v);
}

static void test_large_random_with_duplicates(void **state)
{
    pfx_t *f = *state;
    hps_pdb_table_t *t = NULL;
    enum { N = 60000, DIM = 8 };
    int64_t *keys = malloc(N * sizeof(*keys));
    float *v;
    size_t i;

    for (i = 0; i < N; i++)
        keys[i] = (int64_t)t_mix(i % 40000); /* 20000 duplicated keys */
    v = p_vectors(13, keys, N, 8, DIM);
    /* the later duplicate carries different values: it must win */
    for (i = 40000; i < N; i++)
        v[i * DIM] = -7.0f - (float)i;
    f->db = p_open(f->path, false, 0);
    T_OK(hps_pdb_table(f->db, "m", "t", true, &t, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_bulk_load(t, N, keys, 8, v, DIM, t_msg, sizeof(t_msg)));

    float *out = malloc(N * DIM * sizeof(float));
    size_t hits = 0;
    T_OK(hps_pdb_lookup(t, N, keys, 8, DIM, out, NULL, &hits, t_msg, sizeof(t_msg)));
    assert_int_equal(hits, N);
    for (i = 0; i < N; i++) {
        size_t src = i < 20000 ? i + 40000 : i; /* the key's last occurrence */
        assert_memory_equal(out + i * DIM, v + src * DIM, DIM * sizeof(float));
    }
    hps_pdb_stats_t st;
    hps_pdb_stats(f->db, &st);
    assert_int_equal(st.bulk_rows, 40000);
    free(out);
    free(keys);
    free(v);
}

static void test_bulk_over_existing_rows(void **state)
{
    pfx_t *f = *state;
    hps_pdb_table_t *t = NULL;
    int64_t a[4] = {1, 2, 300, -4}, b[3] = {300, 5, -4};
    float *va = p_vectors(1, a, 4, 8, 4), *vb = p_vectors(2, b, 3, 8, 4);

    f->db = p_open(f->path, false, 0);
    T_OK(hps_pdb_table(f->db, "m", "t", true, &t, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_insert(t, 4, a, 8, va, 4, t_msg, sizeof(t_msg)));    /* in the memtable */
    T_OK(hps_pdb_bulk_load(t, 3, b, 8, vb, 4, t_msg, sizeof(t_msg))); /* newer: wins */
    p_check(t, b, 3, 8, 4, 2, NULL);
    int64_t old[2] = {1, 2};
    p_check(t, old, 2, 8, 4, 1, NULL);
    /* and a second ingestion over the first */
    T_OK(hps_pdb_bulk_load(t, 4, a, 8, va, 4, t_msg, sizeof(t_msg)));
    p_check(t, a, 4, 8, 4, 1, NULL);
    int64_t five[1] = {5};
    p_check(t, five, 1, 8, 4, 2, NULL);
    T_OK(hps_pdb_bulk_load(t, 0, NULL, 8, NULL, 4, t_msg, sizeof(t_msg)));
    free(va);
    free(vb);
}

/*
 * A stage: the table keeps its rows while rows are staged (two files whose
 * keys overlap: the later one's rows win), until hps_pdb_stage_ingest()
 * into the table dropped and made anew; a stage closed without ingesting
 * leaves no file and changes nothing.
 */
static void test_stage(void **state)
{
    pfx_t *f = *state;
    hps_pdb_table_t *t = NULL;
    int64_t old[3] = {1, 2, 3}, a[3] = {2, 10, 11}, b[2] = {11, 12};
    float *vo = p_vectors(1, old, 3, 8, 4), *va = p_vectors(2, a, 3, 8, 4),
          *vb = p_vectors(3, b, 2, 8, 4);

    f->db = p_open(f->path, false, 0);
    T_OK(hps_pdb_table(f->db, "m", "t", true, &t, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_bulk_load(t, 3, old, 8, vo, 4, t_msg, sizeof(t_msg)));
    hps_pdb_stage_t *s = NULL;
    T_OK(hps_pdb_stage_open(f->db, "hps_et.m.t", &s, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_stage_rows(s, 3, a, 8, va, 4, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_stage_rows(s, 2, b, 8, vb, 4, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_stage_rows(s, 0, NULL, 8, NULL, 4, t_msg, sizeof(t_msg)));
    assert_int_equal(count_entries(f->path, ".hps-ingest-"), 1);
    p_check(t, old, 3, 8, 4, 1, NULL); /* staged rows are not the table's yet */
    bool none[2] = {false, false};
    p_check(t, b, 2, 8, 4, 3, none);
    T_OK(hps_pdb_drop(t, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_table(f->db, "m", "t", true, &t, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_stage_ingest(s, t, t_msg, sizeof(t_msg)));
    int64_t from_a[2] = {2, 10};
    p_check(t, from_a, 2, 8, 4, 2, NULL);
    p_check(t, b, 2, 8, 4, 3, NULL); /* 11: the later file's row */
    bool gone[2] = {false, false};
    int64_t dropped[2] = {1, 3};
    p_check(t, dropped, 2, 8, 4, 1, gone);
    hps_pdb_stage_close(s);
    assert_int_equal(count_entries(f->path, ".hps-ingest-"), 0);

    /* closed without ingesting: no file left, the table as it was */
    T_OK(hps_pdb_stage_open(f->db, "hps_et.m.t", &s, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_stage_rows(s, 3, old, 8, vo, 4, t_msg, sizeof(t_msg)));
    hps_pdb_stage_close(s);
    assert_int_equal(count_entries(f->path, ".hps-ingest-"), 0);
    p_check(t, from_a, 2, 8, 4, 2, NULL);
    hps_pdb_stage_close(NULL);
    free(vo);
    free(va);
    free(vb);
}

static void test_load_modelfile_chunks(void **state)
{
    pfx_t *f = *state;
    enum { N = 1000, DIM = 16 };
    int64_t *keys = malloc(N * sizeof(*keys));
    hps_modelfile_t *mf = NULL;
    hps_pdb_table_t *t = NULL, *t32 = NULL;
    hps_pdb_stats_t st;
    char *dir;
    size_t i;

    for (i = 0; i < N; i++)
        keys[i] = (int64_t)(t_mix(i) & 0x7fffffff) * (i % 3 == 1 ? -1 : 1) - 1; /* mixed signs */
    keys[N - 1] = keys[0]; /* a duplicate across chunks: the later row wins */
    dir = t_write_table(f->root, "sparse0.model", 21, keys, N, DIM);
    f->db = p_open(f->path, false, 0);
    T_OK(hps_modelfile_open(dir, DIM, &mf, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_table(f->db, "m", "t", true, &t, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_load_modelfile(t, mf, 8, 7, t_msg, sizeof(t_msg)));
    p_check(t, keys, N, 8, DIM, 21, NULL);
    hps_pdb_stats(f->db, &st);
    assert_int_equal(st.sst_files, (N + 6) / 7);

    /* the same file as a 32-bit-key table is refused: negative keys */
    T_OK(hps_pdb_table(f->db, "m", "t32", true, &t32, t_msg, sizeof(t_msg)));
    T_ERR(hps_pdb_load_modelfile(t32, mf, 4, 0, t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_MSG_HAS("does not fit a 32-bit-key table");
    hps_modelfile_close(mf);
    free(dir);

    /* a valid 32-bit-key table, default chunking (10 chunks) */
    for (i = 0; i < N; i++)
        keys[i] = (int64_t)(t_mix(i + 5) & 0xffffffffu);
    dir = t_write_table(f->root, "sparse1.model", 22, keys, N, 4);
    T_OK(hps_modelfile_open(dir, 4, &mf, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_load_modelfile(t32, mf, 4, 0, t_msg, sizeof(t_msg)));
    uint32_t *k32 = malloc(N * sizeof(*k32));
    for (i = 0; i < N; i++)
        k32[i] = (uint32_t)keys[i];
    p_check(t32, k32, N, 4, 4, 22, NULL);
    hps_pdb_stats(f->db, &st);
    assert_int_equal(st.sst_files, (N + 6) / 7 + 10);
    assert_int_equal(count_entries(f->path, ".hps-ingest-"), 0);
    hps_modelfile_close(mf);
    free(k32);
    free(dir);
    free(keys);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_bytewise_order_int64, p_setup, p_teardown),
        cmocka_unit_test_setup_teardown(test_bytewise_order_uint32, p_setup, p_teardown),
        cmocka_unit_test_setup_teardown(test_large_random_with_duplicates, p_setup, p_teardown),
        cmocka_unit_test_setup_teardown(test_bulk_over_existing_rows, p_setup, p_teardown),
        cmocka_unit_test_setup_teardown(test_stage, p_setup, p_teardown),
        cmocka_unit_test_setup_teardown(test_load_modelfile_chunks, p_setup, p_teardown),
    };

    return cmocka_run_group_tests_name("pdb-bulk", tests, NULL, NULL);
}
