/*
 * test-keyset.c -- distinct keys with counts (worker/libhps/keyset.c, compiled into
 * this test), checked against a quadratic reference: first-occurrence
 * order, counts, each position's distinct index, reuse across calls of
 * other sizes, and keyset_top's choice (largest counts, ties by first
 * occurrence, zero counts skipped, indices ascending).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "keyset.h"

/* Check s against keys[0..n) the slow way. */
static void check_distinct(const keyset_t *s, const int64_t *keys, size_t n)
{
    size_t d = 0;
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < i && keys[j] != keys[i])
            j++;
        if (j == i) { /* first occurrence: the next distinct key */
            assert_true(d < s->n);
            assert_int_equal(s->keys[d], keys[i]);
            uint32_t c = 0;
            for (size_t k = i; k < n; k++)
                c += keys[k] == keys[i];
            assert_int_equal(s->count[d], c);
            d++;
        }
        assert_true(s->where[i] < s->n);
        assert_int_equal(s->keys[s->where[i]], keys[i]);
    }
    assert_int_equal(s->n, d);
}

static void test_small(void **state)
{
    (void)state;
    keyset_t s = {0};
    const int64_t keys[] = {7, -1, 7, 0, INT64_MIN, 7, 0, INT64_MAX, -1, 7};
    size_t n = sizeof(keys) / sizeof(keys[0]);
    assert_int_equal(keyset_build(&s, keys, n), 0);
    assert_int_equal(s.n, 5);
    const int64_t want[] = {7, -1, 0, INT64_MIN, INT64_MAX};
    const uint32_t count[] = {4, 2, 2, 1, 1};
    const uint32_t where[] = {0, 1, 0, 2, 3, 0, 2, 4, 1, 0};
    assert_memory_equal(s.keys, want, sizeof(want));
    assert_memory_equal(s.count, count, sizeof(count));
    assert_memory_equal(s.where, where, sizeof(where));
    assert_int_equal(keyset_build(&s, keys, 0), 0);
    assert_int_equal(s.n, 0);
    keyset_free(&s);
    assert_null(s.keys);
}

/* Random batches of several sizes through one keyset, few or many repeats
 * (keys that collide in the hash's high bits included: multiples of 2^40). */
static void test_random_reuse(void **state)
{
    (void)state;
    keyset_t s = {0};
    srand(12345);
    const size_t sizes[] = {3000, 1, 17, 5000, 64, 2500};
    for (size_t r = 0; r < sizeof(sizes) / sizeof(sizes[0]); r++) {
        size_t n = sizes[r];
        int64_t *keys = malloc(n * sizeof(*keys));
        int range = r % 2 ? 50 : 100000;
        for (size_t i = 0; i < n; i++)
            keys[i] = (int64_t)(rand() % range) << (r == 3 ? 40 : 0);
        assert_int_equal(keyset_build(&s, keys, n), 0);
        check_distinct(&s, keys, n);
        free(keys);
    }
    keyset_free(&s);
}

static void test_top(void **state)
{
    (void)state;
    keyset_t s = {0};
    /* distinct: 10 (x1), 20 (x3), 30 (x2), 40 (x3), 50 (x1), 60 (x2) */
    const int64_t keys[] = {10, 20, 30, 20, 40, 50, 40, 60, 20, 30, 40, 60};
    assert_int_equal(keyset_build(&s, keys, sizeof(keys) / sizeof(keys[0])), 0);
    assert_int_equal(s.n, 6);
    uint32_t pick[6];
    /* limit at or above the candidates: all of them, ascending */
    assert_int_equal(keyset_top(&s, 6, pick), 6);
    for (uint32_t i = 0; i < 6; i++)
        assert_int_equal(pick[i], i);
    /* 3: counts 3, 3 (20, 40), then 2 for 30 before 60 (earlier) */
    assert_int_equal(keyset_top(&s, 3, pick), 3);
    const uint32_t want3[] = {1, 2, 3};
    assert_memory_equal(pick, want3, sizeof(want3));
    /* zero counts are not candidates: 20 dropped, so 40, 30, 60 */
    s.count[1] = 0;
    assert_int_equal(keyset_top(&s, 3, pick), 3);
    const uint32_t want3b[] = {2, 3, 5};
    assert_memory_equal(pick, want3b, sizeof(want3b));
    /* 5 candidates left, limit 5: all of them */
    assert_int_equal(keyset_top(&s, 5, pick), 5);
    const uint32_t want5[] = {0, 2, 3, 4, 5};
    assert_memory_equal(pick, want5, sizeof(want5));
    assert_int_equal(keyset_top(&s, 0, pick), 0);
    for (size_t i = 0; i < s.n; i++)
        s.count[i] = 0;
    assert_int_equal(keyset_top(&s, 3, pick), 0);
    keyset_free(&s);
}

static void test_too_large(void **state)
{
    (void)state;
    keyset_t s = {0};
    int64_t k = 1;
    assert_int_equal(keyset_build(&s, &k, (size_t)UINT32_MAX), -EINVAL);
    assert_int_equal(s.n, 0);
    keyset_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small),
        cmocka_unit_test(test_random_reuse),
        cmocka_unit_test(test_top),
        cmocka_unit_test(test_too_large),
    };
    return cmocka_run_group_tests_name("keyset", tests, NULL, NULL);
}
