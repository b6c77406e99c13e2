/*
 * test-gen-func.c -- the pure functions of include/hps/gen.h: vector values
 * (exact in float32, deterministic, frozen by golden values), keys (a
 * bijection, checked by inverting every step; range), the file-order
 * shuffle (a permutation), splitmix64, and the request header check.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hps/gen.h"

/* ---- vectors -------------------------------------------------------------- */

/* The documented formula, written out independently of the header. */
static float ref_value(uint32_t table, int64_t key, uint32_t d)
{
    uint64_t row = hps_rrxmrrxmsx_0((uint64_t)key ^ ((uint64_t)table + 1) * 0x9E3779B97F4A7C15ULL);
    uint64_t h = hps_rrxmrrxmsx_0(row + ((uint64_t)d + 1) * 0xD1B54A32D192ED03ULL);
    return (float)((double)(int64_t)(h >> 40) - 8388608.0) / 8388608.0f;
}

static void test_value_exact(void **state)
{
    (void)state;
    uint64_t st = 42;

    for (int i = 0; i < 200000; i++) {
        uint32_t t = (uint32_t)(hps_gen_splitmix64(&st) % 300);
        int64_t key = (int64_t)hps_gen_splitmix64(&st);
        uint32_t d = (uint32_t)(hps_gen_splitmix64(&st) % 70000);
        float v = hps_gen_value(t, key, d);
        double k = (double)v * 8388608.0; /* value * 2^23 */
        char buf[32];

        assert_true(v >= -1.0f && v < 1.0f);
        assert_true(k == (double)(int64_t)k); /* an integer: exact in float32 */
        assert_true(v == ref_value(t, key, d));
        snprintf(buf, sizeof buf, "%.9g", (double)v); /* round-trips as text */
        assert_true(strtof(buf, NULL) == v);
    }
}

static void test_value_golden(void **state)
{
    (void)state;
    /* Frozen: other tools and stored results rely on these exact values. */
    assert_int_equal((int)(hps_gen_value(0, 0, 0) * 8388608.0f), -7186218);
    assert_int_equal((int)(hps_gen_value(1, 12345, 7) * 8388608.0f), -5046076);
    assert_int_equal((int)(hps_gen_value(25, -1, 127) * 8388608.0f), -3243038);
    assert_int_equal((int)(hps_gen_value(3, 1LL << 40, 0) * 8388608.0f), 1123809);
}

static void test_vector_matches_value(void **state)
{
    (void)state;
    float a[300], b[300];

    for (int64_t key = -5; key < 500; key += 7) {
        hps_gen_vector(2, key, 300, a);
        hps_gen_vector(2, key, 17, b); /* a shorter vector is a prefix */
        for (uint32_t d = 0; d < 300; d++)
            assert_true(a[d] == hps_gen_value(2, key, d));
        assert_memory_equal(a, b, 17 * sizeof(float));
        hps_gen_vector(3, key, 17, b); /* another table differs */
        assert_true(memcmp(a, b, 17 * sizeof(float)) != 0);
    }
}

static void test_value_spread(void **state)
{
    (void)state;
    double sum = 0.0, sq = 0.0;
    int n = 1 << 20, neg = 0;

    for (int i = 0; i < n; i++) {
        float v = hps_gen_value(0, hps_gen_key(0, (uint64_t)i / 16), (uint32_t)(i % 16));
        sum += v;
        sq += (double)v * v;
        neg += v < 0;
    }
    /* Uniform on [-1, 1): mean 0, variance 1/3. */
    assert_true(sum / n > -0.005 && sum / n < 0.005);
    assert_true(sq / n > 0.33 && sq / n < 0.337);
    assert_true(neg > n / 2 - 5000 && neg < n / 2 + 5000);
}

/* ---- keys ----------------------------------------------------------------- */

static uint64_t inv_odd(uint64_t c) /* c^-1 mod 2^64 (Newton) */
{
    uint64_t x = c;
    for (int i = 0; i < 6; i++)
        x *= 2 - c * x;
    return x;
}

static uint64_t unxorshift(uint64_t y, unsigned s, uint64_t mask)
{
    uint64_t x = y;
    for (unsigned k = s; k < 64; k += s)
        x ^= y >> k;
    return x & mask;
}

/* Inverse of hps_gen_key for one table: proves the bijection on [0, 2^62). */
static uint64_t key_inverse(uint32_t table, int64_t key)
{
    const uint64_t m = (1ULL << 62) - 1;
    uint64_t x = (uint64_t)key;

    x = unxorshift(x, 32, m);
    x = (x * inv_odd(0x94D049BB133111EBULL)) & m;
    x = unxorshift(x, 29, m);
    x = (x * inv_odd(0xBF58476D1CE4E5B9ULL)) & m;
    x = unxorshift(x, 31, m);
    return (x - ((uint64_t)table + 1) * 0x9E3779B97F4A7C15ULL) & m;
}

static void test_key_bijection(void **state)
{
    (void)state;
    uint64_t st = 7;

    for (int i = 0; i < 1000000; i++) {
        uint32_t t = (uint32_t)(hps_gen_splitmix64(&st) % 1000);
        uint64_t idx = hps_gen_splitmix64(&st) >> 2; /* any index < 2^62 */
        int64_t key = hps_gen_key(t, idx);
        assert_true(key >= 0 && (uint64_t)key < HPS_GEN_KEY_LIMIT);
        assert_true(key_inverse(t, key) == idx);
    }
    assert_int_equal(hps_gen_key(0, 0), 616392976978218423LL);
    assert_int_equal(hps_gen_key(25, 123456789), 958581445783349769LL);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void check_distinct(int64_t (*fn)(uint32_t, uint64_t), uint32_t table, size_t n,
                           uint64_t limit)
{
    int64_t *k = malloc(n * sizeof *k);
    size_t seq = 0;

    assert_non_null(k);
    for (size_t i = 0; i < n; i++) {
        k[i] = fn(table, i);
        assert_true(k[i] >= 0 && (uint64_t)k[i] < limit);
        seq += i > 0 && k[i] == k[i - 1] + 1;
    }
    assert_true(seq < n / 1000); /* scattered, not sequential */
    qsort(k, n, sizeof *k, cmp_i64);
    for (size_t i = 1; i < n; i++)
        assert_true(k[i] != k[i - 1]);
    free(k);
}

static void test_key_distinct(void **state)
{
    (void)state;
    check_distinct(hps_gen_key, 0, 1 << 21, HPS_GEN_KEY_LIMIT);
    check_distinct(hps_gen_key, 17, 1 << 20, HPS_GEN_KEY_LIMIT);
    check_distinct(hps_gen_key32, 0, 1 << 21, HPS_GEN_KEY32_LIMIT);
    check_distinct(hps_gen_key32, 25, 1 << 20, HPS_GEN_KEY32_LIMIT);
}

/* lowbias32 inverse (odd multipliers inverted mod 2^32). */
static uint32_t perm32_inverse(uint32_t table, uint32_t y)
{
    uint32_t x = (uint32_t)unxorshift(y, 15, 0xFFFFFFFFu);
    x *= (uint32_t)inv_odd(0x735A2D97u);
    x = (uint32_t)unxorshift(x, 15, 0xFFFFFFFFu);
    x *= (uint32_t)inv_odd(0x21F0AAADu);
    x = (uint32_t)unxorshift(x, 16, 0xFFFFFFFFu);
    return x - (table + 1u) * 0x9E3779B9u;
}

static void test_key32_skips_max(void **state)
{
    (void)state;
    for (uint32_t t = 0; t < 64; t++) {
        /* The one index whose image is 0xFFFFFFFF walks one step further,
         * onto the image of 0xFFFFFFFF itself, which no index < 2^32-1 has. */
        uint32_t i = perm32_inverse(t, UINT32_MAX);
        assert_true(hps__gen_perm32(t, i) == UINT32_MAX);
        if (i != UINT32_MAX) {
            assert_true(hps_gen_key32(t, i) == hps__gen_perm32(t, UINT32_MAX));
            assert_true(hps_gen_key32(t, i) != (int64_t)UINT32_MAX);
        }
        for (uint32_t k = 0; k < 1000; k++) {
            uint32_t x = k * 0x9E3779B9u;
            assert_true(perm32_inverse(t, hps__gen_perm32(t, x)) == x);
        }
    }
    assert_int_equal(hps_gen_key32(0, 0), 1684164658);
    assert_int_equal(hps_gen_key_w(7, 99, 4), 964732600);
    assert_int_equal(hps_gen_key_w(7, 99, 8), hps_gen_key(7, 99));
}

/* ---- shuffle, PRNG, header ----------------------------------------------- */

static void check_permutation(uint64_t seed, uint32_t table, uint64_t rows)
{
    hps_gen_shuffle_t s;
    uint8_t *seen = calloc(rows, 1);
    uint64_t fixed = 0;

    assert_non_null(seen);
    hps_gen_shuffle_init(&s, seed, table, rows);
    for (uint64_t j = 0; j < rows; j++) {
        uint64_t i = hps_gen_shuffle_at(&s, j);
        assert_true(i < rows);
        assert_false(seen[i]);
        seen[i] = 1;
        fixed += i == j;
    }
    if (rows >= 100)
        assert_true(fixed < rows / 10); /* really shuffled */
    free(seen);
}

static void test_shuffle_permutation(void **state)
{
    (void)state;
    for (uint64_t rows = 1; rows <= 1100; rows++)
        check_permutation(rows % 3, (uint32_t)rows % 5, rows);
    check_permutation(7, 2, 1000000);
    check_permutation(0, 0, (1 << 20) + 1); /* just above a power of two */
}

static void test_shuffle_seed(void **state)
{
    (void)state;
    hps_gen_shuffle_t a, b;
    int same = 0;

    hps_gen_shuffle_init(&a, 1, 0, 5000);
    hps_gen_shuffle_init(&b, 2, 0, 5000);
    for (uint64_t j = 0; j < 5000; j++)
        same += hps_gen_shuffle_at(&a, j) == hps_gen_shuffle_at(&b, j);
    assert_true(same < 100);
    hps_gen_shuffle_init(&a, 7, 2, 1000);
    assert_int_equal(hps_gen_shuffle_at(&a, 0), 211);
    assert_int_equal(hps_gen_shuffle_at(&a, 999), 899);
}

static void test_splitmix(void **state)
{
    (void)state;
    uint64_t s = 0, t = 0;
    double u;

    /* The published first output of splitmix64 seeded with 0. */
    assert_true(hps_gen_splitmix64(&s) == 0xE220A8397B1DCDAFULL);
    for (int i = 0; i < 100000; i++) {
        u = hps_gen_uniform(&t);
        assert_true(u >= 0.0 && u < 1.0);
    }
}

static void test_req_check(void **state)
{
    (void)state;
    hps_gen_req_header_t h = {.num_tables = 26, .batch = 64, .count = 10};
    uint64_t size = 24 + 10ULL * 26 * 64 * 8;

    memcpy(h.magic, HPS_GEN_REQ_MAGIC, 8);
    assert_int_equal(hps_gen_req_check(&h, size), 0);
    assert_int_equal(hps_gen_req_check(&h, size - 1), HPS_ETRUNCATED);
    assert_int_equal(hps_gen_req_check(&h, size + 8), HPS_ECORRUPT);
    h.count = UINT64_MAX / 2;
    assert_int_equal(hps_gen_req_check(&h, size), HPS_ECORRUPT);
    h.count = 0;
    assert_int_equal(hps_gen_req_check(&h, 24), HPS_EINVAL);
    h.count = 10;
    h.magic[6] = '2';
    assert_int_equal(hps_gen_req_check(&h, size), HPS_EBADMAGIC);
    assert_int_equal(offsetof(hps_gen_req_header_t, num_tables), 8);
    assert_int_equal(offsetof(hps_gen_req_header_t, batch), 12);
    assert_int_equal(offsetof(hps_gen_req_header_t, count), 16);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_value_exact),
        cmocka_unit_test(test_value_golden),
        cmocka_unit_test(test_vector_matches_value),
        cmocka_unit_test(test_value_spread),
        cmocka_unit_test(test_key_bijection),
        cmocka_unit_test(test_key_distinct),
        cmocka_unit_test(test_key32_skips_max),
        cmocka_unit_test(test_shuffle_permutation),
        cmocka_unit_test(test_shuffle_seed),
        cmocka_unit_test(test_splitmix),
        cmocka_unit_test(test_req_check),
    };
    return cmocka_run_group_tests_name("gen-func", tests, NULL, NULL);
}
