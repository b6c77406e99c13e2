/*
 * test-pdb-persist.c -- the persistent DB across opens: data kept after
 * close and reopen, read-only opens (work, refuse every write), a database
 * laid out by HugeCTR's HPS (built here with the raw RocksDB C API) read
 * through our API, the lock against a second opener, removal of a crashed
 * bulk load's leftovers, and no write (nor flush at close) after a failed
 * one.
 */
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <rocksdb/c.h>

#include "pdbtest.h"

/* Fill hps_et.m.<table> with keys 0..n-1 scaled, then close. */
static void fill_and_close(pfx_t *f, const char *table, uint32_t seed, int64_t *keys, size_t n,
                           uint32_t dim)
{
    hps_pdb_table_t *t = NULL;
    float *v;
    size_t i;

    for (i = 0; i < n; i++)
        keys[i] = (int64_t)(i * 2654435761u) - 1000;
    v = p_vectors(seed, keys, n, 8, dim);
    T_OK(hps_pdb_table(f->db, "m", table, true, &t, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_insert(t, n / 2, keys, 8, v, dim, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_bulk_load(t, n - n / 2, keys + n / 2, 8, v + (n / 2) * dim, dim, t_msg,
                           sizeof(t_msg)));
    T_OK(hps_pdb_close(f->db, t_msg, sizeof(t_msg)));
    f->db = NULL;
    free(v);
}

static void test_reopen_keeps_data(void **state)
{
    pfx_t *f = *state;
    int64_t keys[300];
    hps_pdb_table_t *t = NULL;
    uint64_t est = 0;

    f->db = p_open(f->path, false, 0);
    fill_and_close(f, "t", 4, keys, 300, 32);
    f->db = p_open(f->path, false, 0);
    T_OK(hps_pdb_table(f->db, "m", "t", false, &t, t_msg, sizeof(t_msg)));
    p_check(t, keys, 300, 8, 32, 4, NULL);
    T_OK(hps_pdb_rows_estimate(t, &est));
    assert_true(est > 0);
    T_OK(hps_pdb_close(f->db, t_msg, sizeof(t_msg)));
    f->db = NULL;
    /* and once more, after a close that had nothing to flush */
    f->db = p_open(f->path, false, 0);
    T_OK(hps_pdb_table(f->db, "m", "t", false, &t, t_msg, sizeof(t_msg)));
    p_check(t, keys, 300, 8, 32, 4, NULL);
}

static void test_read_only(void **state)
{
    pfx_t *f = *state;
    int64_t keys[100];
    hps_pdb_table_t *t = NULL, *u = NULL;
    float v[4] = {0};

    /* no database yet: a read-only open fails, creates nothing */
    hps_pdb_opts_t o;
    hps_pdb_opts_init(&o);
    o.read_only = true;
    hps_pdb_t *db = NULL;
    T_ERR(hps_pdb_open(f->path, &o, &db, t_msg, sizeof(t_msg)), HPS_ENOTFOUND);
    T_MSG_HAS(f->path);
    assert_null(db);
    assert_int_equal(t_file_size(f->path), -1);

    f->db = p_open(f->path, false, 0);
    fill_and_close(f, "t", 5, keys, 100, 4);
    f->db = p_open(f->path, true, 0);
    T_OK(hps_pdb_table(f->db, "m", "t", true, &t, t_msg, sizeof(t_msg)));
    p_check(t, keys, 100, 8, 4, 5, NULL);
    T_ERR(hps_pdb_insert(t, 1, keys, 8, v, 4, t_msg, sizeof(t_msg)), -EROFS);
    T_MSG_HAS("read-only");
    T_ERR(hps_pdb_bulk_load(t, 1, keys, 8, v, 4, t_msg, sizeof(t_msg)), -EROFS);
    T_ERR(hps_pdb_erase(t, 1, keys, 8, t_msg, sizeof(t_msg)), -EROFS);
    T_ERR(hps_pdb_drop(t, t_msg, sizeof(t_msg)), -EROFS);
    T_ERR(hps_pdb_table(f->db, "m", "new", true, &u, t_msg, sizeof(t_msg)), HPS_ENOTFOUND);
    T_MSG_HAS("read-only");
    hps_modelfile_spec_t spec[1] = {{"x", f->root, 4, 8}};
    T_ERR(hps_pdb_load_model(f->db, "m", spec, 1, 0, t_msg, sizeof(t_msg)), -EROFS);
    /* still intact */
    p_check(t, keys, 100, 8, 4, 5, NULL);
}

static void test_second_writer_is_refused(void **state)
{
    pfx_t *f = *state;
    hps_pdb_t *db2 = NULL;
    int status;

    f->db = p_open(f->path, false, 0);
    /* this process */
    T_ERR(hps_pdb_open(f->path, NULL, &db2, t_msg, sizeof(t_msg)), HPS_EBUSY);
    T_MSG_HAS("LOCK");
    assert_null(db2);
    /* another process: this binary re-executed in its --try-open mode */
    status = p_run_self("test-pdb-persist", "--try-open", f->path);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/*
 * Build a database the way HugeCTR's RocksDBBackend does: list and open every
 * column family, create hps_et.<model>.<table> on first insert, plain Puts of
 * raw sizeof(Key) key bytes and raw float values, FlushWAL, close.
 */
static void hugectr_write(const char *path, const char *cf_name, const void *keys, size_t kb,
                          size_t n, const float *v, size_t dim)
{
    rocksdb_options_t *o = rocksdb_options_create();
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    const char *dflt[1] = {"default"};
    const rocksdb_options_t *cfo[8] = {o, o, o, o, o, o, o, o};
    rocksdb_column_family_handle_t *h[8], *cf = NULL;
    size_t ncf = 0, i;
    char *e = NULL, **names;

    rocksdb_options_set_create_if_missing(o, 1);
    rocksdb_options_set_manual_wal_flush(o, 1);
    rocksdb_options_optimize_for_point_lookup(o, 8);
    rocksdb_options_optimize_level_style_compaction(o, 512u << 20);
    rocksdb_options_increase_parallelism(o, 16);
    names = rocksdb_list_column_families(o, path, &ncf, &e);
    if (e != NULL) { /* a new database */
        rocksdb_free(e);
        e = NULL;
        ncf = 0;
    }
    assert_true(ncf < 8);
    size_t nopen = ncf ? ncf : 1, created = 0;
    rocksdb_t *db = rocksdb_open_column_families(
        o, path, (int)nopen, ncf ? (const char *const *)names : dflt, cfo, h, &e);
    assert_null(e);
    for (i = 0; i < ncf; i++)
        if (strcmp(names[i], cf_name) == 0)
            cf = h[i];
    if (cf == NULL) {
        cf = rocksdb_create_column_family(db, o, cf_name, &e);
        assert_null(e);
        h[nopen] = cf;
        created = 1;
    }
    for (i = 0; i < n; i++) {
        rocksdb_put_cf(db, wo, cf, (const char *)keys + i * kb, kb, (const char *)(v + i * dim),
                       dim * 4, &e);
        assert_null(e);
    }
    rocksdb_flush_wal(db, 1, &e);
    assert_null(e);
    for (i = 0; i < nopen + created; i++)
        rocksdb_column_family_handle_destroy(h[i]);
    rocksdb_close(db);
    if (names != NULL)
        rocksdb_list_column_families_destroy(names, ncf);
    rocksdb_writeoptions_destroy(wo);
    rocksdb_options_destroy(o);
}

static void test_hugectr_layout_compat(void **state)
{
    pfx_t *f = *state;
    int64_t k8[6] = {0, 1, 256, -1, INT64_MIN, 123456789012345LL};
    uint32_t k4[4] = {0, 7, 256, 0xffffffffu};
    float *v8 = p_vectors(31, k8, 6, 8, 16), *v4 = p_vectors(32, k4, 4, 4, 3);
    hps_pdb_table_t *t = NULL, *t4 = NULL;

    hugectr_write(f->path, "hps_et.m.t", k8, 8, 6, v8, 16);
    hugectr_write(f->path, "hps_et.m32.sparse_embedding0", k4, 4, 4, v4, 3);
    /* read-only (as HugeCTR deployments on NFS) and read-write */
    f->db = p_open(f->path, true, 0);
    T_OK(hps_pdb_table(f->db, "m", "t", false, &t, t_msg, sizeof(t_msg)));
    p_check(t, k8, 6, 8, 16, 31, NULL);
    T_OK(hps_pdb_close(f->db, t_msg, sizeof(t_msg)));
    f->db = p_open(f->path, false, 0);
    T_OK(hps_pdb_table(f->db, "m", "t", false, &t, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_table(f->db, "m32", "sparse_embedding0", false, &t4, t_msg, sizeof(t_msg)));
    p_check(t, k8, 6, 8, 16, 31, NULL);
    p_check(t4, k4, 4, 4, 3, 32, NULL);
    int64_t miss[2] = {2, -2};
    p_check(t, miss, 2, 8, 16, 31, (bool[]){false, false});
    free(v8);
    free(v4);
}

/* What we write, HugeCTR reads: raw Get of the LE key bytes gives the floats. */
static void test_written_layout_is_hugectr(void **state)
{
    pfx_t *f = *state;
    int64_t keys[2] = {300, -300};
    float *v = p_vectors(41, keys, 2, 8, 5);
    hps_pdb_table_t *t = NULL;
    size_t i;

    f->db = p_open(f->path, false, 0);
    T_OK(hps_pdb_table(f->db, "wdl", "sparse_embedding1", true, &t, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_insert(t, 1, keys, 8, v, 5, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_bulk_load(t, 1, keys + 1, 8, v + 5, 5, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_close(f->db, t_msg, sizeof(t_msg)));
    f->db = NULL;

    rocksdb_options_t *o = rocksdb_options_create();
    size_t ncf = 0, vlen = 0;
    char *e = NULL;
    char **names = rocksdb_list_column_families(o, f->path, &ncf, &e);
    assert_null(e);
    assert_int_equal(ncf, 2);
    const rocksdb_options_t *cfo[2] = {o, o};
    rocksdb_column_family_handle_t *h[2];
    rocksdb_t *db = rocksdb_open_for_read_only_column_families(
        o, f->path, 2, (const char *const *)names, cfo, h, 0, &e);
    assert_null(e);
    for (i = 0; i < 2; i++) {
        if (strcmp(names[i], "hps_et.wdl.sparse_embedding1") != 0)
            continue;
        rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
        for (size_t r = 0; r < 2; r++) {
            char *val = rocksdb_get_cf(db, ro, h[i], (const char *)&keys[r], 8, &vlen, &e);
            assert_null(e);
            assert_non_null(val);
            assert_int_equal(vlen, 5 * 4);
            assert_memory_equal(val, v + r * 5, 20);
            rocksdb_free(val);
        }
        rocksdb_readoptions_destroy(ro);
    }
    for (i = 0; i < 2; i++)
        rocksdb_column_family_handle_destroy(h[i]);
    rocksdb_close(db);
    rocksdb_list_column_families_destroy(names, ncf);
    rocksdb_options_destroy(o);
    free(v);
}

static void test_leftover_ingest_dir_removed(void **state)
{
    pfx_t *f = *state;
    char *dir, *file;

    f->db = p_open(f->path, false, 0);
    T_OK(hps_pdb_close(f->db, t_msg, sizeof(t_msg)));
    f->db = NULL;
    dir = t_join(f->path, ".hps-ingest-crashd");
    file = t_join(dir, "load.sst");
    assert_int_equal(mkdir(dir, 0700), 0);
    t_write_file(file, "junk", 4);
    f->db = p_open(f->path, false, 0);
    assert_int_equal(t_file_size(dir), -1);
    free(file);
    free(dir);
}

/* Child mode of test_second_writer_is_refused: exit 0 iff the open is EBUSY. */
static int try_open(const char *path)
{
    hps_pdb_t *db = NULL;
    hps_err_t rc = hps_pdb_open(path, NULL, &db, NULL, 0);

    hps_pdb_close(db, NULL, 0);
    return rc == HPS_EBUSY && db == NULL ? 0 : 1;
}

/*
 * Child of test_failed_write_refuses_more: writes a few rows, then, with
 * files limited to 1 MiB (RLIMIT_FSIZE, SIGXFSZ ignored: each write past it
 * fails with EFBIG, as on a full disk), rows until a write fails; then
 * every write is refused with HPS_EIO without reaching RocksDB, and close
 * returns HPS_EIO without flushing (Debian's RocksDB aborts when its log
 * writer is used after a failed write).  Returns 0 as expected, else the
 * step that was not; the caller _exits with it (the handle is left open on
 * purpose: a leak checker at exit would report it).
 */
static int fail_writes(const char *path)
{
    hps_pdb_t *db = NULL;
    hps_pdb_table_t *t = NULL;
    char msg[512] = "";
    enum { DIM = 256, N = 1024 };
    int64_t *keys = calloc(N, sizeof(int64_t));
    float *v = calloc((size_t)N * DIM, sizeof(float));
    if (!keys || !v || hps_pdb_open(path, NULL, &db, msg, sizeof(msg)) != 0 ||
        hps_pdb_table(db, "m", "t", true, &t, msg, sizeof(msg)) != 0)
        return 10;
    for (int64_t i = 0; i < N; i++)
        keys[i] = i;
    if (hps_pdb_insert(t, 8, keys, 8, v, DIM, msg, sizeof(msg)) != 0)
        return 11;
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {1 << 20, 1 << 20};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
        return 12;
    hps_err_t rc = 0;
    for (int i = 0; i < 64 && rc == 0; i++)
        rc = hps_pdb_insert(t, N, keys, 8, v, DIM, msg, sizeof(msg));
    if (rc == 0)
        return 13; /* never failed */
    if (hps_pdb_insert(t, 1, keys, 8, v, DIM, msg, sizeof(msg)) != HPS_EIO ||
        !strstr(msg, "an earlier write"))
        return 14;
    if (hps_pdb_meta_put(db, "k", "v", msg, sizeof(msg)) != HPS_EIO)
        return 15;
    if (hps_pdb_close(db, msg, sizeof(msg)) != HPS_EIO || !strstr(msg, "not closed"))
        return 16;
    return 0;
}

/* After a failed write the database refuses further writes and is not
 * flushed at close (fail_writes, in a child process); opened again, it has
 * the rows written before. */
static void test_failed_write_refuses_more(void **state)
{
    pfx_t *f = *state;
    int status = p_run_self("test-pdb-persist", "--fail-writes", f->path);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    f->db = p_open(f->path, false, 0);
    hps_pdb_table_t *t = NULL;
    T_OK(hps_pdb_table(f->db, "m", "t", false, &t, t_msg, sizeof(t_msg)));
    int64_t k[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    float got[8 * 256];
    bool found[8];
    size_t hits = 0;
    T_OK(hps_pdb_lookup(t, 8, k, 8, 256, got, found, &hits, t_msg, sizeof(t_msg)));
    assert_int_equal(hits, 8);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--try-open") == 0)
        return try_open(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--fail-writes") == 0)
        _exit(fail_writes(argv[2])); /* no exit handlers: the database is left open */

    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_reopen_keeps_data, p_setup, p_teardown),
        cmocka_unit_test_setup_teardown(test_read_only, p_setup, p_teardown),
        cmocka_unit_test_setup_teardown(test_second_writer_is_refused, p_setup, p_teardown),
        cmocka_unit_test_setup_teardown(test_hugectr_layout_compat, p_setup, p_teardown),
        cmocka_unit_test_setup_teardown(test_written_layout_is_hugectr, p_setup, p_teardown),
        cmocka_unit_test_setup_teardown(test_leftover_ingest_dir_removed, p_setup, p_teardown),
        cmocka_unit_test_setup_teardown(test_failed_write_refuses_more, p_setup, p_teardown),
    };

    return cmocka_run_group_tests_name("pdb-persist", tests, NULL, NULL);
}
