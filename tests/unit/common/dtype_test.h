/*
 * dtype_test.h -- helpers of the storage-type unit tests (test-dtype.c,
 * test-dtype-int8.c): float bit patterns and a seeded generator.
 */
#ifndef HPS_TEST_DTYPE_TEST_H
#define HPS_TEST_DTYPE_TEST_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    return u;
}

static inline float float_of(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

/* splitmix64: a small deterministic generator (seeded per test). */
static inline uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1) times 2^e, e uniform in [lo, hi]: values over many binades. */
static inline float rng_float(uint64_t *s, int lo, int hi)
{
    uint64_t r = rng_next(s);
    double u = (double)(r >> 11) * 0x1p-53 * 2.0 - 1.0;
    int e = lo + (int)(rng_next(s) % (uint64_t)(hi - lo + 1));
    return (float)ldexp(u, e);
}

#endif /* HPS_TEST_DTYPE_TEST_H */
