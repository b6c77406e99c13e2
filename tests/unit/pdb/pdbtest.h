/*
 * pdbtest.h -- fixture and checks shared by the pdb unit tests: a RocksDB
 * directory under a fresh /tmp directory (removed in teardown), and exact
 * comparison of looked-up rows against t_val().
 */
#ifndef HPS_TESTS_PDBTEST_H
#define HPS_TESTS_PDBTEST_H

#include <sys/wait.h>
#include <unistd.h>

#include "mftest.h"

#include "hps/pdb.h"

typedef struct pfx {
    char *root; /* mkdtemp directory, removed in teardown */
    char *path; /* <root>/db */
    hps_pdb_t *db;
} pfx_t;

static inline hps_pdb_t *p_open(const char *path, bool read_only, size_t max_batch)
{
    hps_pdb_opts_t o;
    hps_pdb_t *db = NULL;

    hps_pdb_opts_init(&o);
    o.num_threads = 4;
    o.read_only = read_only;
    if (max_batch > 0)
        o.max_batch_size = max_batch;
    T_OK(hps_pdb_open(path, &o, &db, t_msg, sizeof(t_msg)));
    return db;
}

static inline int p_setup(void **state)
{
    pfx_t *f = calloc(1, sizeof(*f));

    f->root = t_mkdtemp("pdb");
    f->path = t_join(f->root, "db");
    *state = f;
    return 0;
}

static inline int p_teardown(void **state)
{
    pfx_t *f = *state;

    T_OK(hps_pdb_close(f->db, t_msg, sizeof(t_msg)));
    t_rmrf(f->root);
    free(f->path);
    free(f);
    return 0;
}

/** Run this test binary again as "<name> <mode> <path>" in a child process
 *  (fork + exec: RocksDB's threads and locks must not cross a fork); its
 *  wait status. */
static inline int p_run_self(const char *name, const char *mode, const char *path)
{
    int status = 0;
    pid_t pid;

    fflush(NULL);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/proc/self/exe", name, mode, path, (char *)NULL);
        _exit(2);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

/** keys[i] as an int64 from a 4- or 8-byte key array. */
static inline int64_t p_key(const void *keys, size_t i, uint32_t kb)
{
    return kb == 8 ? ((const int64_t *)keys)[i] : (int64_t)((const uint32_t *)keys)[i];
}

/** Vectors (n, dim) of seed for a 4- or 8-byte key array (malloc'd). */
static inline float *p_vectors(uint32_t seed, const void *keys, size_t n, uint32_t kb, uint32_t dim)
{
    float *v = malloc(n * dim * sizeof(float) + 1);
    size_t i;
    uint32_t j;

    assert_non_null(v);
    for (i = 0; i < n; i++)
        for (j = 0; j < dim; j++)
            v[i * dim + j] = t_val(seed, p_key(keys, i, kb), j);
    return v;
}

/*
 * Look up n keys and check: found[i] == expect_found(i) and, for found
 * rows, exact values of seed; missing rows keep the sentinel 12345.0.
 */
static inline void p_check(hps_pdb_table_t *t, const void *keys, size_t n, uint32_t kb,
                           uint32_t dim, uint32_t seed, const bool *expect_found)
{
    float *got = malloc(n * dim * sizeof(float) + 1);
    bool *found = malloc(n + 1);
    size_t i, hits = 0, want_hits = 0;
    uint32_t j;

    for (i = 0; i < n * dim; i++)
        got[i] = 12345.0f;
    T_OK(hps_pdb_lookup(t, n, keys, kb, dim, got, found, &hits, t_msg, sizeof(t_msg)));
    for (i = 0; i < n; i++) {
        bool want = expect_found == NULL || expect_found[i];
        want_hits += want;
        if (found[i] != want)
            T_FAIL("key %" PRId64 " (row %zu): found %d, expected %d", p_key(keys, i, kb), i,
                   found[i], want);
        for (j = 0; j < dim; j++) {
            float w = want ? t_val(seed, p_key(keys, i, kb), j) : 12345.0f;
            if (got[i * dim + j] != w)
                T_FAIL("key %" PRId64 " [%u]: got %g, expected %g", p_key(keys, i, kb), j,
                       (double)got[i * dim + j], (double)w);
        }
    }
    assert_int_equal(hits, want_hits);
    free(got);
    free(found);
}

#endif /* HPS_TESTS_PDBTEST_H */
