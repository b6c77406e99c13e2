/*
 * mftest.h -- helpers of the modelfile and pdb unit tests.  Header-only.
 *
 *  - T_OK(expr) / T_ERR(expr, code): run an hps_err_t call whose last two
 *    arguments are the message buffer t_msg, sizeof(t_msg); on a wrong
 *    result, fail printing the code's name and the message.
 *  - Temporary directories under /tmp (mkdtemp), removed recursively by
 *    t_rmrf() in teardown.
 *  - Writers of HugeCTR sparse model tables whose vectors are a
 *    deterministic function of (seed, key, column), so every row read back
 *    can be checked exactly (t_val).
 */
#ifndef HPS_TESTS_MFTEST_H
#define HPS_TESTS_MFTEST_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "hps/hps.h"

/** Message buffer every T_OK / T_ERR call passes to the library. */
__attribute__((unused)) static char t_msg[1024];

#define T_FAIL(...)                                                                                \
    do {                                                                                           \
        print_error(__VA_ARGS__);                                                                  \
        print_error("\n");                                                                         \
        fail();                                                                                    \
    } while (0)

/** expr must return 0. */
#define T_OK(expr)                                                                                 \
    do {                                                                                           \
        t_msg[0] = '\0';                                                                           \
        hps_err_t t__rc = (expr);                                                                  \
        if (t__rc != 0)                                                                            \
            T_FAIL("%s:%d: %s -> %s (%d): %s", __FILE__, __LINE__, #expr, hps_err_name(t__rc),     \
                   t__rc, t_msg);                                                                  \
    } while (0)

/** expr must return exactly code. */
#define T_ERR(expr, code)                                                                          \
    do {                                                                                           \
        t_msg[0] = '\0';                                                                           \
        hps_err_t t__rc = (expr);                                                                  \
        if (t__rc != (code))                                                                       \
            T_FAIL("%s:%d: %s -> %s (%d), expected %s: %s", __FILE__, __LINE__, #expr,             \
                   hps_err_name(t__rc), t__rc, hps_err_name(code), t_msg);                         \
    } while (0)

/** The last message must contain needle. */
#define T_MSG_HAS(needle)                                                                          \
    do {                                                                                           \
        if (strstr(t_msg, (needle)) == NULL)                                                       \
            T_FAIL("%s:%d: message lacks \"%s\": %s", __FILE__, __LINE__, (needle), t_msg);        \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Files and directories                                                     */
/* ------------------------------------------------------------------------ */

/** A new empty directory /tmp/hps-<tag>-XXXXXX (malloc'd path). */
static inline char *t_mkdtemp(const char *tag)
{
    char *p = NULL;

    assert_true(asprintf(&p, "/tmp/hps-%s-XXXXXX", tag) > 0);
    assert_non_null(mkdtemp(p));
    return p;
}

static inline int t__rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/** Remove a directory tree and free the path (NULL is a no-op). */
static inline void t_rmrf(char *path)
{
    if (path == NULL)
        return;
    nftw(path, t__rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(path);
}

/** "<a>/<b>" (malloc'd). */
static inline char *t_join(const char *a, const char *b)
{
    char *p = NULL;

    assert_true(asprintf(&p, "%s/%s", a, b) > 0);
    return p;
}

/** Write len bytes to path (created or truncated). */
static inline void t_write_file(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");

    assert_non_null(f);
    if (len > 0)
        assert_int_equal(fwrite(buf, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/** Size of a file, or -1 when it does not exist. */
static inline long long t_file_size(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* ------------------------------------------------------------------------ */
/* Deterministic values                                                      */
/* ------------------------------------------------------------------------ */

static inline uint64_t t_mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/** Element j of key's vector in a table seeded by seed (exact in float). */
static inline float t_val(uint32_t seed, int64_t key, uint32_t j)
{
    uint64_t h = t_mix(t_mix((uint64_t)key ^ ((uint64_t)seed << 32)) + j);

    return (float)(int32_t)(h >> 40) / 16777216.0f - 0.5f;
}

/** Fill (n, dim) vectors for keys (int64). */
static inline void t_fill(uint32_t seed, const int64_t *keys, size_t n, uint32_t dim, float *out)
{
    size_t i;
    uint32_t j;

    for (i = 0; i < n; i++)
        for (j = 0; j < dim; j++)
            out[i * dim + j] = t_val(seed, keys[i], j);
}

/** Create <parent>/<name>/ with key and emb_vector for keys; returns the dir. */
static inline char *t_write_table(const char *parent, const char *name, uint32_t seed,
                                  const int64_t *keys, size_t n, uint32_t dim)
{
    char *dir = t_join(parent, name), *kp, *vp;
    float *v = malloc(n * dim * sizeof(float) + 1);

    assert_non_null(v);
    assert_int_equal(mkdir(dir, 0755), 0);
    t_fill(seed, keys, n, dim, v);
    kp = t_join(dir, "key");
    vp = t_join(dir, "emb_vector");
    t_write_file(kp, keys, n * 8);
    t_write_file(vp, v, n * dim * sizeof(float));
    free(kp);
    free(vp);
    free(v);
    return dir;
}

/** Truncate or extend <dir>/<file> to len bytes. */
static inline void t_resize(const char *dir, const char *file, off_t len)
{
    char *p = t_join(dir, file);

    assert_int_equal(truncate(p, len), 0);
    free(p);
}

#endif /* HPS_TESTS_MFTEST_H */
