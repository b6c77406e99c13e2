/*
 * test-gen-files.c -- the files hps-gen writes, read back and compared with
 * the functions of include/hps/gen.h: exact sizes; row j of every table holds
 * key hps_gen_key(t, shuffle(j)) and vector hps_gen_vector(t, key); keys are
 * distinct and are exactly the first N of the table; the criteo-1tb shape;
 * 32-bit keys; request files reproduced draw by draw.
 *
 * Usage: test-gen-files PATH-TO-hps-gen (meson passes it).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "hps/gen.h"

extern char **environ;

static const char *gen_exe;
static char work[4096];

/* Run hps-gen with the NULL-terminated arguments; returns its exit status. */
static int run_gen(const char *arg, ...)
{
    const char *argv[64] = {gen_exe, arg};
    posix_spawn_file_actions_t fa;
    va_list ap;
    int n = 2, status;
    pid_t pid;

    va_start(ap, arg);
    while (n < 63 && (argv[n] = va_arg(ap, const char *)) != NULL)
        n++;
    va_end(ap);
    argv[n] = NULL;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    assert_int_equal(posix_spawn(&pid, gen_exe, &fa, NULL, (char **)argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static void *read_file(const char *path, size_t *ret_len)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    void *p;

    assert_non_null(f);
    assert_int_equal(fstat(fileno(f), &st), 0);
    p = malloc((size_t)st.st_size + 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)st.st_size, f), (size_t)st.st_size);
    fclose(f);
    *ret_len = (size_t)st.st_size;
    return p;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Check table t of the model in dir: sizes, rows, keys, vectors. */
static void check_table(const char *dir, const char *name, uint32_t t, uint64_t rows, uint32_t dim,
                        uint64_t seed, unsigned key_bytes)
{
    char path[4200];
    size_t klen, vlen;
    hps_gen_shuffle_t s;
    float *want = malloc(dim * sizeof *want);

    snprintf(path, sizeof path, "%s/%s/key", dir, name);
    int64_t *keys = read_file(path, &klen);
    snprintf(path, sizeof path, "%s/%s/emb_vector", dir, name);
    float *vecs = read_file(path, &vlen);
    assert_int_equal(klen, rows * 8);
    assert_int_equal(vlen, rows * dim * 4);
    hps_gen_shuffle_init(&s, seed, t, rows);
    for (uint64_t j = 0; j < rows; j++) {
        assert_true(keys[j] == hps_gen_key_w(t, hps_gen_shuffle_at(&s, j), key_bytes));
        hps_gen_vector(t, keys[j], dim, want);
        assert_memory_equal(vecs + j * dim, want, dim * sizeof *want);
    }
    /* Sorted, the file's keys are exactly key(t, 0..rows-1), all distinct. */
    int64_t *gen = malloc(rows * sizeof *gen);
    for (uint64_t i = 0; i < rows; i++)
        gen[i] = hps_gen_key_w(t, i, key_bytes);
    qsort(keys, rows, 8, cmp_i64);
    qsort(gen, rows, 8, cmp_i64);
    assert_memory_equal(keys, gen, rows * 8);
    for (uint64_t i = 1; i < rows; i++)
        assert_true(keys[i] > keys[i - 1]);
    if (key_bytes == 4)
        assert_true(keys[rows - 1] < (int64_t)HPS_GEN_KEY32_LIMIT && keys[0] >= 0);
    free(gen);
    free(keys);
    free(vecs);
    free(want);
}

static void test_explicit_model(void **state)
{
    (void)state;
    char out[4200];
    const uint64_t rows[3] = {1000, 1, 70001};
    const uint32_t dims[3] = {3, 1, 130};

    snprintf(out, sizeof out, "%s/explicit", work);
    assert_int_equal(run_gen("model", "--out", out, "--model", "m1", "--rows", "1000,1,70001",
                             "--dim", "3,1,130", "--seed", "7", "--threads", "3", NULL),
                     0);
    for (uint32_t t = 0; t < 3; t++) {
        char name[32];
        snprintf(name, sizeof name, "sparse_embedding%u", t);
        check_table(out, name, t, rows[t], dims[t], 7, 8);
    }
}

static void test_names_and_key32(void **state)
{
    (void)state;
    char out[4200];

    snprintf(out, sizeof out, "%s/k32", work);
    assert_int_equal(run_gen("model", "--out", out, "--model", "m2", "--table-names", "users,items",
                             "--rows", "5000", "--dim", "8", "--key-bytes", "4", NULL),
                     0);
    check_table(out, "users", 0, 5000, 8, 0, 4);
    check_table(out, "items", 1, 5000, 8, 0, 4);
}

static void test_criteo_shape(void **state)
{
    (void)state;
    char out[4200], name[32];
    uint64_t rows[26];

    snprintf(out, sizeof out, "%s/criteo", work);
    assert_int_equal(run_gen("model", "--out", out, "--model", "criteo", "--shape", "criteo-1tb",
                             "--scale", "1e-4", "--dim", "16", "--seed", "5", NULL),
                     0);
    assert_int_equal(hps_gen_criteo_rows(1e-4, rows), 0);
    for (uint32_t t = 0; t < 26; t++) {
        snprintf(name, sizeof name, "sparse_embedding%u", t);
        check_table(out, name, t, rows[t], 16, 5, 8);
    }
    snprintf(name, sizeof name, "sparse_embedding26");
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", out, name);
    assert_int_equal(access(path, F_OK), -1); /* exactly 26 tables */
}

/* Re-draw the request stream of `hps-gen requests` and compare. */
static void check_requests(const char *file, const uint64_t *rows, size_t nt, uint64_t batch,
                           uint64_t count, double alpha, uint64_t seed)
{
    size_t len;
    uint8_t *buf = read_file(file, &len);
    hps_gen_req_header_t h;
    hps_gen_powerlaw_t pl[26];
    uint64_t st = seed;

    memcpy(&h, buf, sizeof h);
    assert_int_equal(hps_gen_req_check(&h, len), 0);
    assert_int_equal(h.num_tables, nt);
    assert_int_equal(h.batch, batch);
    assert_int_equal(h.count, count);
    for (size_t t = 0; t < nt; t++)
        hps_gen_powerlaw_init(&pl[t], rows[t], alpha);
    const int64_t *k = (const int64_t *)(buf + 24);
    for (uint64_t c = 0; c < count; c++) {
        for (size_t t = 0; t < nt; t++) {
            for (uint64_t s = 0; s < batch; s++, k++) {
                uint64_t r = hps_gen_powerlaw_rank(&pl[t], hps_gen_uniform(&st));
                assert_true(*k == hps_gen_key((uint32_t)t, r - 1));
            }
        }
    }
    free(buf);
}

static void test_requests(void **state)
{
    (void)state;
    char dir[4200], file[4300];
    uint64_t rows[26];
    double alpha;

    snprintf(dir, sizeof dir, "%s/criteo", work);
    snprintf(file, sizeof file, "%s/req-given.bin", work);
    assert_int_equal(run_gen("requests", "--model-dir", dir, "--model", "criteo", "--batch", "16",
                             "--count", "50", "--alpha", "1.2", "--seed", "3", "--out", file, NULL),
                     0);
    hps_gen_criteo_rows(1e-4, rows);
    check_requests(file, rows, 26, 16, 50, 1.2, 3);

    snprintf(file, sizeof file, "%s/req-auto.bin", work);
    assert_int_equal(run_gen("requests", "--model-dir", dir, "--batch", "7", "--count", "9",
                             "--out", file, NULL),
                     0);
    assert_int_equal(
        hps_gen_alpha_solve(26, rows, HPS_GEN_HOT_KEYS, HPS_GEN_HOT_SHARE, &alpha, NULL), 0);
    check_requests(file, rows, 26, 7, 9, alpha, 0);
    /* An existing file is kept without --force. */
    assert_int_equal(run_gen("requests", "--model-dir", dir, "--batch", "7", "--count", "1",
                             "--out", file, NULL),
                     1);
    check_requests(file, rows, 26, 7, 9, alpha, 0);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static int setup(void **state)
{
    (void)state;
    const char *tmp = getenv("TMPDIR");
    snprintf(work, sizeof work, "%s/hps-gen-test.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    return mkdtemp(work) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return nftw(work, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_explicit_model),
        cmocka_unit_test(test_names_and_key32),
        cmocka_unit_test(test_criteo_shape),
        cmocka_unit_test(test_requests),
    };

    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH-TO-hps-gen\n", argv[0]);
        return 2;
    }
    gen_exe = argv[1];
    return cmocka_run_group_tests_name("gen-files", tests, setup, teardown);
}
