/*
 * test-shmdb-bulk.c -- large upserts into row-page tables, whose new rows
 * are written through the segment's file descriptor (shmdb/ops.c, BULK
 * ROWS): staged, written with pwrite() in cycles, then published.
 *
 *  - the last row of a key wins wherever its repeats fall against the
 *    cycles: a key written first, then after g new keys, then once more,
 *    for every g from 0 to 700 (past one cycle of every storage type at dim
 *    128), each type; rows erased after each round, so later rounds take
 *    their rows from the free-row list;
 *  - a batch of updates and new keys, repeated and shuffled, in 4
 *    partitions: inserted count, rows, every value, hps_shmdb_check clean;
 *  - a segment too small for the batch: the row pages run out in the
 *    middle of a cycle; every row left is the last one written for its key
 *    and the segment checks clean.
 *
 * Every value read back is compared bit for bit with decode(encode(row)).
 * Each case runs with the rows written through the descriptor and through
 * the mapping (HPS_SHMDB_ROW_WRITES=pwrite / mapping: otherwise a probe of
 * the machine chooses, and only one of the two paths would run here).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hps/dtype.h"
#include "testutil.h"

#define DIM 128

static const hps_dtype_t k_types[] = {HPS_DTYPE_FP32, HPS_DTYPE_FP16, HPS_DTYPE_BF16,
                                      HPS_DTYPE_INT8};
#define NTYPES (sizeof(k_types) / sizeof(k_types[0]))

/* *state is the row-write mode on entry (cmocka's initial state). */
static int setup(void **state)
{
    if (setenv("HPS_SHMDB_ROW_WRITES", *state, 1) != 0)
        return -1;
    return t_seg_setup(state, "bulk");
}

static int teardown(void **state)
{
    return t_seg_teardown(state);
}

/* Element j of the row written for key k at batch position pos. */
static float elem(uint64_t k, size_t pos, uint32_t j)
{
    uint64_t h = hps_rrxmrrxmsx_0(k * 1000003u + pos * 131u + j);
    return (float)((double)(h >> 40) / (double)(1u << 20) - 8.0);
}

static uint32_t make_table(hps_shmdb_t *db, const char *name, hps_dtype_t dt, uint32_t parts)
{
    hps_table_spec_t s = t_spec("m", name, DIM, 8, parts, UINT64_MAX, HPS_EVICT_RANDOM, 0.8);
    s.storage_type = dt;
    uint32_t id;
    HPS_ASSERT_OK(hps_shmdb_table_create(db, &s, &id));
    return id;
}

/* Upsert keys[0..n) with rows elem(key, position) and check each distinct
 * key present reads back as the reference of its last row; keys missing
 * from the table are allowed only where may_miss. */
static void upsert_check(hps_shmdb_t *db, uint32_t id, hps_dtype_t dt, const int64_t *keys,
                         size_t n, bool may_miss, size_t *ret_inserted)
{
    float *rows = malloc(n * DIM * sizeof(float)), *ref = malloc(DIM * sizeof(float));
    float *got = malloc(n * DIM * sizeof(float));
    uint8_t *enc = malloc(hps_dtype_row_bytes(dt, DIM));
    uint8_t *found = malloc(n);
    T_CHECK(rows && ref && got && enc && found, "out of memory");
    for (size_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < DIM; j++)
            rows[i * DIM + j] = elem((uint64_t)keys[i], i, j);
    HPS_ASSERT_OK(hps_shmdb_upsert(db, id, n, keys, rows, ret_inserted));
    HPS_ASSERT_OK(hps_shmdb_lookup(db, id, n, keys, got, found, NULL));
    for (size_t i = 0; i < n; i++) {
        size_t last = i;
        for (size_t i2 = i + 1; i2 < n; i2++)
            if (keys[i2] == keys[i])
                last = i2;
        if (!found[i]) {
            T_CHECK(may_miss, "%s: key %lld (position %zu of %zu) missing", hps_dtype_name(dt),
                    (long long)keys[i], i, n);
            continue;
        }
        HPS_ASSERT_OK(hps_dtype_encode(dt, DIM, 1, rows + last * DIM, enc));
        HPS_ASSERT_OK(hps_dtype_decode(dt, DIM, 1, enc, ref));
        if (memcmp(got + i * DIM, ref, DIM * sizeof(float)) != 0)
            T_FAIL("%s: key %lld (position %zu of %zu) is not its last row (position %zu)",
                   hps_dtype_name(dt), (long long)keys[i], i, n, last);
    }
    free(rows);
    free(ref);
    free(got);
    free(enc);
    free(found);
}

static void test_last_row_wins_across_cycles(void **state)
{
    struct t_seg_fixture *f = *state;
    t_seg_create(f, 256ULL << 20);
    int64_t *keys = malloc(710 * sizeof(int64_t));
    T_CHECK(keys != NULL, "out of memory");
    for (size_t ti = 0; ti < NTYPES; ti++) {
        uint32_t id = make_table(f->db, hps_dtype_name(k_types[ti]), k_types[ti], 1);
        for (size_t g = 0; g <= 700; g++) {
            int64_t k = (int64_t)(g * 1000000 + 7);
            size_t n = 0, ins = 0;
            keys[n++] = k;
            for (size_t i = 0; i < g; i++)
                keys[n++] = k + 1 + (int64_t)i;
            keys[n++] = k;
            keys[n++] = k;
            upsert_check(f->db, id, k_types[ti], keys, n, false, &ins);
            HPS_ASSERT_EQ(ins, g + 1);
            HPS_ASSERT_OK(hps_shmdb_erase(f->db, id, n, keys, NULL));
        }
        uint64_t rows = 1;
        HPS_ASSERT_OK(hps_shmdb_size(f->db, id, &rows));
        HPS_ASSERT_EQ(rows, 0);
    }
    HPS_ASSERT_EQ(t_check(f->db, "cycles"), 0);
    free(keys);
}

static void test_updates_and_new_keys(void **state)
{
    struct t_seg_fixture *f = *state;
    uint64_t rng = t_seed("bulk-mixed");
    t_seg_create(f, 256ULL << 20);
    enum { OLD = 3000, N = 9000 };
    int64_t *keys = malloc(N * sizeof(int64_t));
    T_CHECK(keys != NULL, "out of memory");
    for (size_t ti = 0; ti < NTYPES; ti++) {
        uint32_t id = make_table(f->db, hps_dtype_name(k_types[ti]), k_types[ti], 4);
        size_t ins = 0;
        for (size_t i = 0; i < OLD; i++)
            keys[i] = -(int64_t)i; /* negative keys too */
        upsert_check(f->db, id, k_types[ti], keys, OLD, false, &ins);
        HPS_ASSERT_EQ(ins, OLD);
        /* 2 * OLD distinct keys (every other one known), then OLD repeats
         * of them, shuffled. */
        for (size_t i = 0; i < 2 * OLD; i++)
            keys[i] = i % 2 ? (int64_t)(10 * OLD + i) : -(int64_t)(i / 2);
        for (size_t i = 2 * OLD; i < N; i++)
            keys[i] = keys[t_rng_below(&rng, 2 * OLD)];
        for (size_t i = N - 1; i > 0; i--) {
            size_t r = (size_t)t_rng_below(&rng, i + 1);
            int64_t x = keys[i];
            keys[i] = keys[r];
            keys[r] = x;
        }
        upsert_check(f->db, id, k_types[ti], keys, N, false, &ins);
        HPS_ASSERT_EQ(ins, OLD);
        uint64_t rows = 0;
        HPS_ASSERT_OK(hps_shmdb_size(f->db, id, &rows));
        HPS_ASSERT_EQ(rows, 2 * OLD);
    }
    HPS_ASSERT_EQ(t_check(f->db, "mixed"), 0);
    free(keys);
}

static void test_segment_runs_out(void **state)
{
    struct t_seg_fixture *f = *state;
    t_seg_create(f, 4ULL << 20); /* about 7,000 rows of 512 bytes */
    uint32_t id = make_table(f->db, "t", HPS_DTYPE_FP32, 1);
    enum { N = 20000 };
    int64_t *keys = malloc(N * sizeof(int64_t));
    T_CHECK(keys != NULL, "out of memory");
    for (size_t i = 0; i < N; i++)
        keys[i] = (int64_t)(i % (N / 2)) + 11; /* each key twice, the repeat after N / 2 */
    size_t ins = 0;
    upsert_check(f->db, id, HPS_DTYPE_FP32, keys, N, true, &ins);
    uint64_t rows = 0;
    HPS_ASSERT_OK(hps_shmdb_size(f->db, id, &rows));
    HPS_ASSERT_GT(rows, 1000);
    HPS_ASSERT_LT(rows, N / 2);
    HPS_ASSERT_EQ(t_check(f->db, "full"), 0);
    free(keys);
}

int main(void)
{
    t_install_cleanup();
    static char by_fd[] = "pwrite", by_map[] = "mapping";
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate_setup_teardown(test_last_row_wins_across_cycles, setup, teardown,
                                                 by_fd),
        cmocka_unit_test_prestate_setup_teardown(test_updates_and_new_keys, setup, teardown, by_fd),
        cmocka_unit_test_prestate_setup_teardown(test_segment_runs_out, setup, teardown, by_fd),
        cmocka_unit_test_prestate_setup_teardown(test_last_row_wins_across_cycles, setup, teardown,
                                                 by_map),
        cmocka_unit_test_prestate_setup_teardown(test_updates_and_new_keys, setup, teardown,
                                                 by_map),
        cmocka_unit_test_prestate_setup_teardown(test_segment_runs_out, setup, teardown, by_map),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
