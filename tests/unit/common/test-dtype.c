/*
 * test-dtype.c -- storage types of embedding rows (include/hps/dtype.h):
 * names, row sizes, argument checks, and the fp16 / bf16 / int8 conversions
 * against references computed independently here in double arithmetic
 * (ldexp, a nearest-neighbour search over the sorted binary16 values), plus
 * the compiler's _Float16 where it has one.
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "hps/dtype.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    return u;
}

static float float_of(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

/* splitmix64: a small deterministic generator (seeded per test). */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1) times 2^e, e uniform in [lo, hi]: values over many binades. */
static float rng_float(uint64_t *s, int lo, int hi)
{
    uint64_t r = rng_next(s);
    double u = (double)(r >> 11) * 0x1p-53 * 2.0 - 1.0;
    int e = lo + (int)(rng_next(s) % (uint64_t)(hi - lo + 1));
    return (float)ldexp(u, e);
}

/* The value of a binary16 pattern, from its definition, in double. */
static double fp16_ref_value(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 0)
        v = ldexp(m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

/*
 * Reference binary32 -> binary16 for non-NaN x: the nearest binary16 by
 * binary search over the non-negative finite patterns 0 ... 0x7bff (sorted by
 * value), ties to the even pattern; 2^16 stands for the step past 65504.
 */
static uint16_t fp16_ref_encode(float x)
{
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double a = fabs((double)x);
    if (isinf(x))
        return sign | 0x7c00;
    uint32_t lo = 0, hi = 0x7bff; /* largest h with value(h) <= a */
    if (a >= fp16_ref_value(0x7bff)) {
        lo = 0x7bff;
    } else {
        while (lo < hi) {
            uint32_t mid = (lo + hi + 1) / 2;
            if (fp16_ref_value((uint16_t)mid) <= a)
                lo = mid;
            else
                hi = mid - 1;
        }
    }
    double below = fp16_ref_value((uint16_t)lo);
    double above = lo == 0x7bff ? 65536.0 : fp16_ref_value((uint16_t)(lo + 1));
    double dlo = a - below, dhi = above - a; /* exact in double */
    uint32_t r = dlo < dhi ? lo : dhi < dlo ? lo + 1 : (lo & 1) ? lo + 1 : lo;
    return (uint16_t)(sign | r); /* lo + 1 == 0x7c00 is inf */
}

/* gcc 12 on x86_64 has _Float16 (software conversions without F16C). */
#ifdef __FLT16_MANT_DIG__
#define HAVE_FLOAT16 1
#else
#define HAVE_FLOAT16 0
#endif

/* ------------------------------------------------------------------------ */
/* Names, sizes, arguments                                                   */
/* ------------------------------------------------------------------------ */

static void test_names_and_row_bytes(void **state)
{
    (void)state;
    const char *names[HPS_DTYPE_COUNT] = {"fp32", "fp16", "bf16", "int8"};
    for (int d = 0; d < HPS_DTYPE_COUNT; d++) {
        hps_dtype_t got = (hps_dtype_t)99;
        assert_string_equal(hps_dtype_name((hps_dtype_t)d), names[d]);
        assert_int_equal(hps_dtype_parse(names[d], &got), 0);
        assert_int_equal(got, d);
    }
    assert_string_equal(hps_dtype_name((hps_dtype_t)4), "unknown");
    const char *bad[] = {"FP16", "fp16 ", "", "float16", "int4", "fp"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        hps_dtype_t got = (hps_dtype_t)99;
        assert_int_equal(hps_dtype_parse(bad[i], &got), HPS_EINVAL);
        assert_int_equal(got, 99); /* untouched */
    }
    hps_dtype_t got;
    assert_int_equal(hps_dtype_parse(NULL, &got), HPS_EINVAL);

    assert_int_equal(hps_dtype_row_bytes(HPS_DTYPE_FP32, 128), 512);
    assert_int_equal(hps_dtype_row_bytes(HPS_DTYPE_FP16, 128), 256);
    assert_int_equal(hps_dtype_row_bytes(HPS_DTYPE_BF16, 128), 256);
    assert_int_equal(hps_dtype_row_bytes(HPS_DTYPE_INT8, 128), 132);
    assert_int_equal(hps_dtype_row_bytes(HPS_DTYPE_FP32, 1), 4);
    assert_int_equal(hps_dtype_row_bytes(HPS_DTYPE_FP16, 3), 6);
    assert_int_equal(hps_dtype_row_bytes(HPS_DTYPE_INT8, 1), 5);
    assert_int_equal(hps_dtype_row_bytes(HPS_DTYPE_INT8, 3), 7);
    assert_int_equal(hps_dtype_row_bytes(HPS_DTYPE_FP32, UINT32_MAX), (size_t)UINT32_MAX * 4);
    assert_int_equal(hps_dtype_row_bytes(HPS_DTYPE_INT8, UINT32_MAX), (size_t)UINT32_MAX + 4);
    for (int d = 0; d < HPS_DTYPE_COUNT; d++)
        assert_int_equal(hps_dtype_row_bytes((hps_dtype_t)d, 0), 0);
    assert_int_equal(hps_dtype_row_bytes((hps_dtype_t)4, 8), 0);
    assert_int_equal(hps_dtype_row_bytes((hps_dtype_t)-1, 8), 0);
}

static void test_arguments(void **state)
{
    (void)state;
    _Alignas(16) float src[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    _Alignas(16) unsigned char buf[64];
    _Alignas(16) float out[9];

    memset(buf, 0xa5, sizeof(buf));
    for (int d = 0; d < HPS_DTYPE_COUNT; d++) {
        hps_dtype_t t = (hps_dtype_t)d;
        /* n = 0 succeeds and touches nothing, even with NULL buffers. */
        assert_int_equal(hps_dtype_encode(t, 4, 0, NULL, NULL), 0);
        assert_int_equal(hps_dtype_decode(t, 4, 0, NULL, NULL), 0);
        assert_int_equal(hps_dtype_encode(t, 0, 1, src, buf), HPS_EINVAL);
        assert_int_equal(hps_dtype_decode(t, 0, 1, buf, out), HPS_EINVAL);
        assert_int_equal(hps_dtype_encode(t, 4, 1, NULL, buf), HPS_EINVAL);
        assert_int_equal(hps_dtype_encode(t, 4, 1, src, NULL), HPS_EINVAL);
        assert_int_equal(hps_dtype_decode(t, 4, 1, NULL, out), HPS_EINVAL);
        assert_int_equal(hps_dtype_decode(t, 4, 1, buf, NULL), HPS_EINVAL);
        /* A misaligned fp32 side. */
        assert_int_equal(hps_dtype_encode(t, 1, 1, (const float *)((char *)src + 2), buf),
                         HPS_EINVAL);
        assert_int_equal(hps_dtype_decode(t, 1, 1, buf, (float *)((char *)out + 1)), HPS_EINVAL);
        /* n * row_bytes beyond SIZE_MAX. */
        assert_int_equal(hps_dtype_encode(t, UINT32_MAX, SIZE_MAX / 2, src, buf), HPS_EINVAL);
    }
    assert_int_equal(hps_dtype_encode((hps_dtype_t)4, 4, 1, src, buf), HPS_EINVAL);
    assert_int_equal(hps_dtype_decode((hps_dtype_t)4, 4, 1, buf, out), HPS_EINVAL);
    /* Misaligned stored side: fp32 needs 4, fp16/bf16 2, int8 nothing. */
    assert_int_equal(hps_dtype_encode(HPS_DTYPE_FP32, 1, 1, src, buf + 2), HPS_EINVAL);
    assert_int_equal(hps_dtype_encode(HPS_DTYPE_FP16, 1, 1, src, buf + 1), HPS_EINVAL);
    assert_int_equal(hps_dtype_decode(HPS_DTYPE_BF16, 1, 1, buf + 1, out), HPS_EINVAL);
    for (size_t i = 0; i < sizeof(buf); i++)
        assert_int_equal(buf[i], 0xa5); /* no failing call wrote anything */
    assert_int_equal(hps_dtype_encode(HPS_DTYPE_INT8, 3, 2, src, buf + 1), 0);
    assert_int_equal(hps_dtype_decode(HPS_DTYPE_INT8, 3, 2, buf + 1, out), 0);

    /* fp32 is the identity, bit for bit (NaN payloads and -0 included). */
    uint32_t pat[8] = {0x7fc12345, 0xff800001, 0x80000000, 0x00000001,
                       0x7f7fffff, 0x3f800000, 0xbf800000, 0x7f800000};
    memcpy(src, pat, sizeof(pat));
    assert_int_equal(hps_dtype_encode(HPS_DTYPE_FP32, 4, 2, src, buf), 0);
    assert_memory_equal(buf, pat, sizeof(pat));
    memset(out, 0, sizeof(out));
    assert_int_equal(hps_dtype_decode(HPS_DTYPE_FP32, 2, 4, buf, out), 0);
    assert_memory_equal(out, pat, sizeof(pat));
}

/* ------------------------------------------------------------------------ */
/* fp16                                                                      */
/* ------------------------------------------------------------------------ */

/* Every binary16 pattern decodes to its value (ldexp); NaN keeps its payload
 * (a signalling NaN stays signalling).  The buffer takes the vector path
 * where the CPU has one (F16C, dtype.c); on x86-64 the whole check runs
 * again with MXCSR's flush-to-zero and denormals-are-zero set, as a caller
 * that flushes denormals (torch.set_flush_denormal) runs it. */
static void fp16_decode_exhaustive(void)
{
    static uint16_t h[65536];
    static float out[65536];
    for (uint32_t i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    assert_int_equal(hps_dtype_decode(HPS_DTYPE_FP16, 256, 256, h, out), 0);
    for (uint32_t i = 0; i < 65536; i++) {
        double ref = fp16_ref_value((uint16_t)i);
        uint32_t got = bits_of(out[i]);
        assert_int_equal(got, bits_of(hps_fp16_to_float((uint16_t)i)));
        if (isnan(ref)) {
            uint32_t want = ((i & 0x8000u) << 16) | 0x7f800000u | ((i & 0x3ffu) << 13);
            if (got != want)
                fail_msg("fp16 0x%04x: got 0x%08x, want NaN 0x%08x", i, got, want);
        } else if (got != bits_of((float)ref)) {
            fail_msg("fp16 0x%04x: got %a (0x%08x), want %a", i, (double)out[i], got, ref);
        }
    }
}

static void test_fp16_decode_exhaustive(void **state)
{
    (void)state;
    fp16_decode_exhaustive();
#if defined(__x86_64__)
    unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040); /* FTZ | DAZ */
    fp16_decode_exhaustive();
    _mm_setcsr(csr);
#endif
}

/* Encode of every binary16 value gives it back; NaN comes back quiet. */
static void test_fp16_roundtrip_all_patterns(void **state)
{
    (void)state;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        uint16_t want = ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) ? (uint16_t)(h | 0x200) : h;
        uint16_t got = hps_fp16_from_float(hps_fp16_to_float(h));
        if (got != want)
            fail_msg("fp16 0x%04x -> float -> 0x%04x, want 0x%04x", i, got, want);
    }
}

/*
 * Every tie: the midpoint of each pair of adjacent binary16 values (exact in
 * binary32: 12 significant bits) rounds to the even pattern, and one binary32
 * ulp either side rounds to the nearer one.  Both signs; through the row API.
 */
static void test_fp16_ties_and_boundaries(void **state)
{
    (void)state;
    enum { N = 0x7c00 }; /* pairs (h, h+1) for h = 0 ... 0x7bff; h+1 = 0x7c00 is inf */
    static float x[3 * N];
    static uint16_t out[3 * N];
    for (int sgn = 0; sgn < 2; sgn++) {
        for (uint32_t h = 0; h < N; h++) {
            double lo = fp16_ref_value((uint16_t)h);
            double hi = h + 1 == 0x7c00 ? 65536.0 : fp16_ref_value((uint16_t)(h + 1));
            float mid = (float)((lo + hi) / 2);
            assert_true((double)mid == (lo + hi) / 2); /* the midpoint is exact */
            x[3 * h] = sgn ? -mid : mid;
            x[3 * h + 1] = sgn ? -nextafterf(mid, 0.0f) : nextafterf(mid, 0.0f);
            x[3 * h + 2] = sgn ? -nextafterf(mid, INFINITY) : nextafterf(mid, INFINITY);
        }
        assert_int_equal(hps_dtype_encode(HPS_DTYPE_FP16, 3, N, x, out), 0);
        uint16_t s = sgn ? 0x8000 : 0;
        for (uint32_t h = 0; h < N; h++) {
            uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
            if (out[3 * h] != (s | even) || out[3 * h + 1] != (s | h) ||
                out[3 * h + 2] != (s | (h + 1)))
                fail_msg("fp16 ties around 0x%04x (sign %d): got 0x%04x 0x%04x 0x%04x", h, sgn,
                         out[3 * h], out[3 * h + 1], out[3 * h + 2]);
        }
    }
    /* Named boundaries. */
    assert_int_equal(hps_fp16_from_float(65504.0f), 0x7bff);
    assert_int_equal(hps_fp16_from_float(65519.996f), 0x7bff);
    assert_int_equal(hps_fp16_from_float(65520.0f), 0x7c00);
    assert_int_equal(hps_fp16_from_float(-65520.0f), 0xfc00);
    assert_int_equal(hps_fp16_from_float(1e30f), 0x7c00);
    assert_int_equal(hps_fp16_from_float(INFINITY), 0x7c00);
    assert_int_equal(hps_fp16_from_float(-INFINITY), 0xfc00);
    assert_int_equal(hps_fp16_from_float(0x1p-25f), 0x0000); /* tie with 2^-24 -> even 0 */
    assert_int_equal(hps_fp16_from_float(nextafterf(0x1p-25f, 1.0f)), 0x0001);
    assert_int_equal(hps_fp16_from_float(-0x1p-24f), 0x8001);
    assert_int_equal(hps_fp16_from_float(0x1p-14f), 0x0400);
    assert_int_equal(hps_fp16_from_float(nextafterf(0x1p-14f, 0.0f)), 0x0400);
    assert_int_equal(hps_fp16_from_float(0x1.ff8p-15f), 0x03ff); /* 1023 * 2^-24 exactly */
    assert_int_equal(hps_fp16_from_float(0x1.ffcp-15f), 0x0400); /* tie 0x3ff|0x400 -> even */
    assert_int_equal(hps_fp16_from_float(0x1.ff4p-15f), 0x03fe); /* tie 0x3fe|0x3ff -> even */
    assert_int_equal(hps_fp16_from_float(0.0f), 0x0000);
    assert_int_equal(hps_fp16_from_float(-0.0f), 0x8000);
    assert_int_equal(hps_fp16_from_float(0x1p-149f), 0x0000); /* binary32 subnormals */
    assert_int_equal(hps_fp16_from_float(-0x1p-130f), 0x8000);
    assert_int_equal(hps_fp16_from_float(1.0f), 0x3c00);
    assert_int_equal(hps_fp16_from_float(-2.0f), 0xc000);
    assert_int_equal(hps_fp16_from_float(0.1f), 0x2e66);
    /* NaN: quiet, sign and the top payload bits kept. */
    assert_int_equal(hps_fp16_from_float(float_of(0x7fc00000)), 0x7e00);
    assert_int_equal(hps_fp16_from_float(float_of(0xffc00000)), 0xfe00);
    assert_int_equal(hps_fp16_from_float(float_of(0x7f800001)), 0x7e00); /* sNaN, low payload */
    assert_int_equal(hps_fp16_from_float(float_of(0x7fa02000)), 0x7f01); /* sNaN -> quiet */
    assert_int_equal(hps_fp16_from_float(float_of(0xff802000)), 0xfe01);
}

/*
 * Encode against the nearest-value reference over binary32 patterns: a
 * stride through all of them (every exponent, both signs) and random ones,
 * and against _Float16 where the compiler has it.
 */
static void test_fp16_encode_vs_reference(void **state)
{
    (void)state;
    uint64_t seed = 0x16f16f16f16f16fULL;
    uint64_t checked = 0;
    /* 2^32 / 1021 strided patterns, then 2^22 random ones. */
    for (uint64_t k = 0; k < (1ULL << 32) + (1ULL << 22) * 1021; k += 1021) {
        uint32_t u = k < (1ULL << 32) ? (uint32_t)k : (uint32_t)rng_next(&seed);
        float x = float_of(u);
        uint16_t got = hps_fp16_from_float(x);
        if (isnan(x)) {
            uint16_t want = (uint16_t)(((u >> 16) & 0x8000) | 0x7e00 | ((u >> 13) & 0x3ff));
            if (got != want)
                fail_msg("fp16(NaN 0x%08x) = 0x%04x, want 0x%04x", u, got, want);
            continue;
        }
        uint16_t want = fp16_ref_encode(x);
        if (got != want)
            fail_msg("fp16(%a = 0x%08x) = 0x%04x, want 0x%04x", (double)x, u, got, want);
#if HAVE_FLOAT16
        _Float16 hf = (_Float16)x;
        uint16_t hb;
        memcpy(&hb, &hf, sizeof(hb));
        if (got != hb)
            fail_msg("fp16(%a) = 0x%04x, _Float16 gives 0x%04x", (double)x, got, hb);
#endif
        checked++;
    }
    assert_true(checked > 8000000); /* NaN patterns are counted apart */
    print_message("# fp16 encode: %llu values checked against the reference%s\n",
                  (unsigned long long)checked, HAVE_FLOAT16 ? " and _Float16" : "");
}

/* _Float16 widening agrees with the decoder on every non-NaN pattern. */
static void test_fp16_decode_vs_float16(void **state)
{
    (void)state;
#if HAVE_FLOAT16
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        _Float16 hf;
        memcpy(&hf, &h, sizeof(h));
        float want = (float)hf, got = hps_fp16_to_float(h);
        if (isnan(want))
            assert_true(isnan(got) && signbit(got) == signbit(want));
        else if (bits_of(got) != bits_of(want))
            fail_msg("fp16 0x%04x: %a, _Float16 gives %a", i, (double)got, (double)want);
    }
#else
    print_message("# this compiler has no _Float16 to compare with\n");
    skip();
#endif
}

/* The documented bound over random values in and below the normal range. */
static void test_fp16_error_bound(void **state)
{
    (void)state;
    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    uint16_t *h = malloc(N * sizeof(uint16_t));
    assert_non_null(x);
    assert_non_null(y);
    assert_non_null(h);
    uint64_t seed = 11;
    for (int i = 0; i < N; i++)
        x[i] = rng_float(&seed, -30, 16); /* |x| < 2^16; some round to inf */
    assert_int_equal(hps_dtype_encode(HPS_DTYPE_FP16, 64, N / 64, x, h), 0);
    assert_int_equal(hps_dtype_decode(HPS_DTYPE_FP16, 64, N / 64, h, y), 0);
    double worst_rel = 0, worst_abs = 0;
    for (int i = 0; i < N; i++) {
        double a = fabs((double)x[i]), err = fabs((double)x[i] - (double)y[i]);
        if (a >= 65520.0) {
            assert_true(isinf(y[i]) && signbit(y[i]) == signbit(x[i]));
        } else if (a >= 0x1p-14) {
            if (err > 0x1p-11 * a)
                fail_msg("fp16 %a -> %a: relative error %g > 2^-11", (double)x[i], (double)y[i],
                         err / a);
            worst_rel = fmax(worst_rel, err / a);
        } else {
            if (err > 0x1p-25)
                fail_msg("fp16 %a -> %a: absolute error %g > 2^-25", (double)x[i], (double)y[i],
                         err);
            worst_abs = fmax(worst_abs, err);
        }
    }
    print_message("# fp16 worst: relative %g (bound %g), absolute %g (bound %g)\n", worst_rel,
                  0x1p-11, worst_abs, 0x1p-25);
    free(x);
    free(y);
    free(h);
}

/* ------------------------------------------------------------------------ */
/* bf16                                                                      */
/* ------------------------------------------------------------------------ */

static void test_bf16_decode_exhaustive(void **state)
{
    (void)state;
    static uint16_t h[65536];
    static float out[65536];
    for (uint32_t i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    assert_int_equal(hps_dtype_decode(HPS_DTYPE_BF16, 65536, 1, h, out), 0);
    for (uint32_t i = 0; i < 65536; i++) {
        uint32_t got = bits_of(out[i]);
        if (got != i << 16)
            fail_msg("bf16 0x%04x: got 0x%08x", i, got);
        /* The same value from the definition (finite patterns). */
        int e = (i >> 7) & 0xff, m = i & 0x7f;
        if (e == 0xff)
            continue;
        double v = e ? ldexp(128 + m, e - 134) : ldexp(m, -133);
        if (i & 0x8000)
            v = -v;
        assert_true((double)out[i] == v);
    }
}

static void test_bf16_ties_nan_inf(void **state)
{
    (void)state;
    /* For every non-NaN upper half u: u.8000 is a tie (to even), u.7fff
     * rounds down, u.8001 up; the row API and the scalar agree. */
    static float x[3 * 65536];
    static uint16_t out[3 * 65536];
    uint32_t n = 0;
    for (uint32_t u = 0; u < 65536; u++) {
        if ((u & 0x7fff) >= 0x7f80)
            continue; /* inf and NaN upper halves: not a finite + fraction */
        x[n++] = float_of((u << 16) | 0x8000);
        x[n++] = float_of((u << 16) | 0x7fff);
        x[n++] = float_of((u << 16) | 0x8001);
    }
    assert_int_equal(hps_dtype_encode(HPS_DTYPE_BF16, 3, n / 3, x, out), 0);
    for (uint32_t i = 0; i < n; i += 3) {
        uint32_t u = bits_of(x[i]) >> 16;
        uint32_t even = (u & 1) ? u + 1 : u;
        if (out[i] != even || out[i + 1] != u || out[i + 2] != u + 1)
            fail_msg("bf16 ties around 0x%04x: got 0x%04x 0x%04x 0x%04x", u, out[i], out[i + 1],
                     out[i + 2]);
        assert_int_equal(hps_bf16_from_float(x[i]), out[i]);
    }
    /* The largest finite bf16 is 0x7f7f (odd): its tie and above go to inf. */
    assert_int_equal(hps_bf16_from_float(float_of(0x7f7f8000)), 0x7f80);
    assert_int_equal(hps_bf16_from_float(float_of(0x7f7fffff)), 0x7f80);
    assert_int_equal(hps_bf16_from_float(float_of(0xff7f8000)), 0xff80);
    assert_int_equal(hps_bf16_from_float(float_of(0x7f7f7fff)), 0x7f7f);
    assert_int_equal(hps_bf16_from_float(INFINITY), 0x7f80);
    assert_int_equal(hps_bf16_from_float(-INFINITY), 0xff80);
    assert_int_equal(hps_bf16_from_float(0.0f), 0x0000);
    assert_int_equal(hps_bf16_from_float(-0.0f), 0x8000);
    assert_int_equal(hps_bf16_from_float(1.0f), 0x3f80);
    assert_int_equal(hps_bf16_from_float(float_of(0x00008000)), 0x0000); /* subnormal tie */
    assert_int_equal(hps_bf16_from_float(float_of(0x00018000)), 0x0002);
    /* NaN: stays NaN, quiet, sign and top payload kept, even when the
     * payload lies only in the low 16 bits (no rounding into inf). */
    uint32_t nans[] = {0x7fc00000, 0xffc00000, 0x7f800001, 0xff80ffff, 0x7fffffff, 0x7f810000};
    uint16_t want[] = {0x7fc0, 0xffc0, 0x7fc0, 0xffc0, 0x7fff, 0x7fc1};
    for (size_t i = 0; i < sizeof(nans) / sizeof(nans[0]); i++) {
        uint16_t got = hps_bf16_from_float(float_of(nans[i]));
        if (got != want[i])
            fail_msg("bf16(NaN 0x%08x) = 0x%04x, want 0x%04x", nans[i], got, want[i]);
        assert_true(isnan(hps_bf16_to_float(got)));
    }
}

static void test_bf16_error_bound(void **state)
{
    (void)state;
    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    uint16_t *h = malloc(N * sizeof(uint16_t));
    assert_non_null(x);
    assert_non_null(y);
    assert_non_null(h);
    uint64_t seed = 12;
    for (int i = 0; i < N; i++)
        x[i] = rng_float(&seed, -140, 127);
    assert_int_equal(hps_dtype_encode(HPS_DTYPE_BF16, 128, N / 128, x, h), 0);
    assert_int_equal(hps_dtype_decode(HPS_DTYPE_BF16, 128, N / 128, h, y), 0);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        double a = fabs((double)x[i]), err = fabs((double)x[i] - (double)y[i]);
        double bound = a >= 0x1p-126 ? 0x1p-8 * a : 0x1p-134;
        if (err > bound)
            fail_msg("bf16 %a -> %a: error %g > %g", (double)x[i], (double)y[i], err, bound);
        if (a >= 0x1p-126)
            worst = fmax(worst, err / a);
    }
    print_message("# bf16 worst relative error %g (bound %g)\n", worst, 0x1p-8);
    free(x);
    free(y);
    free(h);
}

/* ------------------------------------------------------------------------ */
/* int8                                                                      */
/* ------------------------------------------------------------------------ */

/* Encode one row of dim, decode it; return the scale, q and y. */
static float int8_row(const float *x, uint32_t dim, int8_t *q, float *y)
{
    unsigned char buf[4 + 256];
    float scale;
    assert_true(dim <= 256);
    assert_int_equal(hps_dtype_encode(HPS_DTYPE_INT8, dim, 1, x, buf), 0);
    assert_int_equal(hps_dtype_decode(HPS_DTYPE_INT8, dim, 1, buf, y), 0);
    memcpy(&scale, buf, 4);
    memcpy(q, buf + 4, dim);
    return scale;
}

/* g(s) = fl(fl(127 * s) / 127) of the header, in fp32 (volatile: no folding). */
static float int8_g(float s)
{
    volatile float a = s, p = a * 127.0f, r = p / 127.0f;
    return r;
}

/*
 * Whether scale s survives re-encoding for a row whose largest finite |x|
 * is m (the header's rule, computed independently): m gets |q| = Q (0 for
 * s == 0; rounded in double with nearbyint), decodes to fl(Q * s), and
 * fl(fl(Q * s) / 127) must be s again.  For a normal s, Q is 127 and this
 * is g(s) == s.
 */
static int int8_ref_scale_ok(float m, float s)
{
    double qm = 0.0;
    if (s > 0.0f) {
        volatile float t = m / s;
        qm = nearbyint(fmin((double)t, 127.0));
    }
    volatile float d = (float)qm * s, r = d / 127.0f;
    return r == s;
}

/* The header's scale for the largest finite |x| m: s0 = m / 127, else the
 * float above, else the float below (nextafterf), the first that survives. */
static float int8_ref_scale(float m)
{
    volatile float s0 = m / 127.0f;
    float up = nextafterf(s0, INFINITY), down = nextafterf(s0, 0.0f);
    return int8_ref_scale_ok(m, s0)     ? s0
           : int8_ref_scale_ok(m, up)   ? up
           : int8_ref_scale_ok(m, down) ? down
                                        : s0;
}

/*
 * The definition of the header, computed independently: m and the quotient
 * in fp32 (as specified), the scale with nextafterf, the rounding in double
 * with nearbyint (round to nearest even in the default mode).
 */
static void int8_ref_row(const float *x, uint32_t dim, float *ret_scale, int8_t *q)
{
    float m = 0.0f;
    for (uint32_t j = 0; j < dim; j++)
        if (isfinite(x[j]) && fabsf(x[j]) > m)
            m = fabsf(x[j]);
    volatile float scale = int8_ref_scale(m);
    for (uint32_t j = 0; j < dim; j++) {
        if (isnan(x[j]))
            q[j] = 0;
        else if (scale == 0.0f)
            q[j] = 0; /* finite or +-inf */
        else if (isinf(x[j]))
            q[j] = x[j] > 0 ? 127 : -127;
        else {
            volatile float t = x[j] / scale;
            double r = nearbyint(fmin(fmax((double)t, -127.0), 127.0));
            q[j] = (int8_t)r;
        }
    }
    *ret_scale = scale;
}

static void test_int8_rows(void **state)
{
    (void)state;
    int8_t q[8];
    float y[8];

    /* A row of zeros (and of -0): scale 0, q 0, decodes to +0. */
    float zeros[4] = {0.0f, -0.0f, 0.0f, -0.0f};
    assert_true(int8_row(zeros, 4, q, y) == 0.0f);
    for (int j = 0; j < 4; j++) {
        assert_int_equal(q[j], 0);
        assert_int_equal(bits_of(y[j]), 0);
    }

    /* Single element: q = +-127, scale = |x| / 127. */
    float one[1] = {-3.0f};
    float s = int8_row(one, 1, q, y);
    assert_true(s == 3.0f / 127.0f);
    assert_int_equal(q[0], -127);
    assert_true(y[0] == -127.0f * (3.0f / 127.0f));
    assert_true(fabsf(y[0] + 3.0f) <= 3.0f / 254.0f);

    /* The maximum at both signs: both ends map to +-127. */
    float both[3] = {-5.0f, 2.0f, 5.0f};
    s = int8_row(both, 3, q, y);
    assert_true(s == 5.0f / 127.0f);
    assert_int_equal(q[0], -127);
    assert_int_equal(q[2], 127);
    assert_int_equal(q[1], 51); /* 2 * 127 / 5 = 50.8 */

    /* Ties to even: with m = 127 the scale is exactly 1. */
    float ties[8] = {127.0f, 2.5f, 3.5f, -2.5f, -3.5f, 0.5f, -0.5f, 1.5f};
    int8_t want_ties[8] = {127, 2, 4, -2, -4, 0, 0, 2};
    assert_true(int8_row(ties, 8, q, y) == 1.0f);
    assert_memory_equal(q, want_ties, 8);
    assert_true(y[2] == 4.0f && y[6] == 0.0f && !signbit(y[6]));

    /* Non-finite: the scale from finite values only, NaN -> 0, inf -> +-127. */
    float nonfinite[5] = {NAN, INFINITY, -INFINITY, 127.0f, -63.5f};
    s = int8_row(nonfinite, 5, q, y);
    assert_true(s == 1.0f);
    int8_t want_nf[5] = {0, 127, -127, 127, -64}; /* -63.5 -> -64 (even) */
    assert_memory_equal(q, want_nf, 5);
    assert_true(y[0] == 0.0f && y[1] == 127.0f * s && y[2] == -127.0f * s);
    float negnan[2] = {-NAN, 1.0f};
    int8_row(negnan, 2, q, y);
    assert_int_equal(q[0], 0);
    assert_true(y[0] == 0.0f);

    /* No finite nonzero element: scale 0, q 0 for inf too (so that the
     * decoded zeros re-encode to the same bytes), everything decodes to 0. */
    float allinf[3] = {INFINITY, NAN, -INFINITY};
    assert_true(int8_row(allinf, 3, q, y) == 0.0f);
    int8_t want_ai[3] = {0, 0, 0};
    assert_memory_equal(q, want_ai, 3);
    for (int j = 0; j < 3; j++)
        assert_true(y[j] == 0.0f);
    /* m / 127 underflowing to 0 (m = 63 * 2^-149): the same. */
    float under[2] = {63 * 0x1p-149f, -INFINITY};
    assert_true(int8_row(under, 2, q, y) == 0.0f);
    assert_true(q[0] == 0 && q[1] == 0 && y[0] == 0.0f && y[1] == 0.0f);

    /* m = FLT_MAX: s0 = FLT_MAX / 127 is no fixed point of g (127 * s0
     * overflows to inf, so it used to decode to inf), nor is the float
     * above; the scale is the float below, and FLT_MAX still gets q = 127
     * (clamped) and decodes to a finite value. */
    float big[3] = {-FLT_MAX, INFINITY, 1e30f};
    volatile float big_s0 = FLT_MAX / 127.0f;
    assert_true(int8_g(big_s0) != big_s0);
    s = int8_row(big, 3, q, y);
    assert_int_equal(bits_of(s), bits_of(big_s0) - 1);
    assert_true(int8_g(s) == s);
    assert_true(q[0] == -127 && q[1] == 127 && q[2] == 0);
    assert_true(isfinite(y[0]) && y[0] == -127.0f * s && y[1] == -y[0]);

    /* A subnormal scale where s0 = 4 * 2^-149 would not survive a re-encode
     * (m = 445 * 2^-149 gets q = 111 and decodes to 444 * 2^-149, whose s0
     * is 3 * 2^-149), nor would the float above (89 * 5 = 445 again): the
     * scale is the float below, 3 * 2^-149, where m clamps to 127. */
    float sub[2] = {445 * 0x1p-149f, -100 * 0x1p-149f};
    s = int8_row(sub, 2, q, y);
    assert_true(s == 3 * 0x1p-149f);
    assert_true(q[0] == 127 && q[1] == -33);
    assert_true(y[0] == 381 * 0x1p-149f && y[1] == -99 * 0x1p-149f);

    /* Packed layout with dim 3: [scale][3 x int8] per row, 7 bytes, the
     * second scale at byte 7 (unaligned). */
    float two[6] = {127.0f, -63.5f, 31.75f, 0.0f, 10.0f, -10.0f};
    unsigned char buf[16];
    float out[6], s0, s1;
    memset(buf, 0xee, sizeof(buf));
    assert_int_equal(hps_dtype_encode(HPS_DTYPE_INT8, 3, 2, two, buf), 0);
    assert_int_equal(buf[14], 0xee); /* 14 bytes written, no more */
    memcpy(&s0, buf, 4);
    memcpy(&s1, buf + 7, 4);
    assert_true(s0 == 1.0f && s1 == 10.0f / 127.0f);
    assert_int_equal((int8_t)buf[4], 127);
    assert_int_equal((int8_t)buf[5], -64); /* -63.5 -> -64 */
    assert_int_equal((int8_t)buf[6], 32);  /* 31.75 -> 32 */
    assert_int_equal((int8_t)buf[11], 0);
    assert_int_equal((int8_t)buf[12], 127);
    assert_int_equal((int8_t)buf[13], -127);
    assert_int_equal(hps_dtype_decode(HPS_DTYPE_INT8, 3, 2, buf, out), 0);
    assert_true(out[0] == 127.0f * s0 && out[1] == -64.0f * s0 && out[5] == -127.0f * s1);
}

/*
 * Random rows over many magnitudes, with some NaN and inf: q and the scale
 * equal the reference bit for bit, and the error bound holds per element.
 */
static void test_int8_random_rows_and_bound(void **state)
{
    (void)state;
    enum { DIM = 100, ROWS = 20000 };
    float *x = malloc(sizeof(float) * DIM * ROWS), *y = malloc(sizeof(float) * DIM * ROWS);
    size_t rb = hps_dtype_row_bytes(HPS_DTYPE_INT8, DIM);
    unsigned char *buf = malloc(rb * ROWS);
    assert_non_null(x);
    assert_non_null(y);
    assert_non_null(buf);
    uint64_t seed = 13;
    for (int r = 0; r < ROWS; r++) {
        int e = -100 + (int)(rng_next(&seed) % 220); /* row magnitude 2^-100 ... 2^119 */
        for (int j = 0; j < DIM; j++) {
            float *v = &x[(size_t)r * DIM + j];
            *v = rng_float(&seed, e - 12, e);
            uint64_t k = rng_next(&seed) % 1000;
            if (r % 10 == 0 && k < 10)
                *v = k < 4 ? NAN : k < 7 ? INFINITY : -INFINITY;
            if (r % 7 == 0 && k >= 990)
                *v = (k & 1) ? (float)ldexp(1.0, e) : -(float)ldexp(1.0, e); /* ties */
        }
    }
    assert_int_equal(hps_dtype_encode(HPS_DTYPE_INT8, DIM, ROWS, x, buf), 0);
    assert_int_equal(hps_dtype_decode(HPS_DTYPE_INT8, DIM, ROWS, buf, y), 0);
    double worst = 0;
    for (int r = 0; r < ROWS; r++) {
        const float *xr = x + (size_t)r * DIM;
        float scale, ref_scale;
        int8_t ref_q[DIM];
        memcpy(&scale, buf + r * rb, 4);
        int8_ref_row(xr, DIM, &ref_scale, ref_q);
        assert_int_equal(bits_of(scale), bits_of(ref_scale));
        if (memcmp(buf + r * rb + 4, ref_q, DIM) != 0)
            fail_msg("int8 row %d: q differs from the reference", r);
        double m = 0;
        for (int j = 0; j < DIM; j++)
            if (isfinite(xr[j]))
                m = fmax(m, fabs((double)xr[j]));
        double bound = m / 254.0 * (1.0 + 0x1p-14);
        for (int j = 0; j < DIM; j++) {
            float yj = y[(size_t)r * DIM + j];
            assert_true(yj == (float)ref_q[j] * scale);
            if (!isfinite(xr[j]))
                continue;
            double err = fabs((double)xr[j] - (double)yj);
            if (err > bound)
                fail_msg("int8 row %d elem %d: %a -> %a, error %g > bound %g (m %g)", r, j,
                         (double)xr[j], (double)yj, err, bound, m);
            if (m > 0)
                worst = fmax(worst, err / (m / 254.0));
        }
    }
    print_message("# int8 worst error / (max|row| / 254) = %.9f (bound 1 + 2^-14 = %.9f)\n", worst,
                  1.0 + 0x1p-14);
    free(x);
    free(y);
    free(buf);
}

/* Rows so small that the scale is subnormal or 0: error at most m + 2^-142. */
static void test_int8_tiny_rows(void **state)
{
    (void)state;
    uint64_t seed = 14;
    int8_t q[16];
    float y[16], x[16];
    for (int e = -149; e <= -118; e++) {
        for (int rep = 0; rep < 50; rep++) {
            for (int j = 0; j < 16; j++)
                x[j] = (float)ldexp((double)(rng_next(&seed) % 2001) / 1000.0 - 1.0, e);
            float scale = int8_row(x, 16, q, y), ref_scale;
            int8_t ref_q[16];
            int8_ref_row(x, 16, &ref_scale, ref_q);
            assert_int_equal(bits_of(scale), bits_of(ref_scale));
            assert_memory_equal(q, ref_q, 16);
            double m = 0;
            for (int j = 0; j < 16; j++)
                m = fmax(m, fabs((double)x[j]));
            for (int j = 0; j < 16; j++)
                assert_true(fabs((double)x[j] - (double)y[j]) <= m + 0x1p-142);
        }
    }
}

/*
 * The caller's MXCSR does not change int8 results: with FTZ and DAZ set (as
 * torch.set_flush_denormal(True) or -ffast-math code leaves them), rows of
 * subnormal scales and products encode and decode to the bits of the
 * default mode, and the caller's MXCSR is restored.  (An audit saw such
 * rows decode to all zeros in an in-process lookup before.)
 */
static void test_int8_ftz_daz(void **state)
{
    (void)state;
    uint64_t seed = 21;
    enum { DIM = 16, ROWS = 64 };
    float x[ROWS * DIM], y_ref[ROWS * DIM], y[ROWS * DIM];
    unsigned char enc_ref[ROWS * (4 + DIM)], enc[ROWS * (4 + DIM)];
    for (int r = 0; r < ROWS; r++) /* largest |x| from 2^-149 to 2^-87: subnormal scales */
        for (int j = 0; j < DIM; j++)
            x[r * DIM + j] =
                (float)ldexp((double)(rng_next(&seed) % 2001) / 1000.0 - 1.0, -149 + r);
    assert_int_equal(hps_dtype_encode(HPS_DTYPE_INT8, DIM, ROWS, x, enc_ref), 0);
    assert_int_equal(hps_dtype_decode(HPS_DTYPE_INT8, DIM, ROWS, enc_ref, y_ref), 0);
    unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u); /* FTZ | DAZ */
    assert_int_equal(hps_dtype_encode(HPS_DTYPE_INT8, DIM, ROWS, x, enc), 0);
    assert_int_equal(hps_dtype_decode(HPS_DTYPE_INT8, DIM, ROWS, enc_ref, y), 0);
    unsigned after = _mm_getcsr();
    _mm_setcsr(csr);
    assert_int_equal(after & 0x8040u, 0x8040u); /* the caller's mode, restored */
    assert_memory_equal(enc, enc_ref, sizeof(enc));
    int nonzero = 0;
    for (int i = 0; i < ROWS * DIM; i++) {
        assert_int_equal(bits_of(y[i]), bits_of(y_ref[i]));
        nonzero += y_ref[i] != 0.0f;
    }
    assert_true(nonzero > ROWS * DIM / 2); /* the rows are not zeros anyway */
}

/* ------------------------------------------------------------------------ */
/* Idempotence (all types)                                                   */
/* ------------------------------------------------------------------------ */

/*
 * Row r of a mix that covers the int8 scale cases and the special values
 * of every type: normal rows of any magnitude, fp32 subnormal rows (int8
 * scales subnormal or 0), rows near FLT_MAX, rows with inf and NaN (NaN
 * payloads and signs included), all-zero rows (+-0), rows of only +-inf,
 * and rows mixing every binade.
 */
static void idem_row(uint64_t *seed, uint32_t r, uint32_t dim, float *x)
{
    int e = -149 + (int)(rng_next(seed) % 278); /* 2^-149 ... 2^128 */
    for (uint32_t j = 0; j < dim; j++) {
        uint64_t k = rng_next(seed);
        float v;
        switch (r % 8) {
        case 0: /* one magnitude, 16 binades wide */
            v = rng_float(seed, e - 16 < -149 ? -149 : e - 16, e > 127 ? 127 : e);
            break;
        case 1: /* fp32 subnormals and the smallest normals */
            v = float_of((uint32_t)(k % 0x01000000u) | ((uint32_t)(k >> 63) << 31));
            break;
        case 2: /* the top binade, FLT_MAX included */
            v = float_of(j == 0 && (k & 4) ? 0x7f7fffffu : 0x7f000000u + (uint32_t)(k % 0x800000u));
            v = (k >> 62) & 1 ? -v : v;
            break;
        case 3: /* finite values with inf and NaN among them */
            v = rng_float(seed, -40, 40);
            if (k % 5 == 0)
                v = (k >> 8) % 2 ? INFINITY : -INFINITY;
            else if (k % 5 == 1)
                v = float_of((0x7f800001u + (uint32_t)((k >> 8) % 0x7fffffu)) |
                             ((uint32_t)(k >> 63) << 31)); /* any NaN */
            break;
        case 4: /* all zeros */
            v = (k & 1) ? -0.0f : 0.0f;
            break;
        case 5: /* only +-inf (with some NaN when dim > 1) */
            v = (k & 1) ? -INFINITY : INFINITY;
            if (dim > 1 && k % 7 == 0)
                v = NAN;
            break;
        case 6: /* any bit pattern */
            v = float_of((uint32_t)k);
            break;
        default: /* every binade at once */
            v = rng_float(seed, -149, 127);
            break;
        }
        x[j] = v;
    }
}

/* encode(decode(encode(x))) == encode(x) byte for byte, and decode of both
 * gives the same floats bit for bit, for every type (header, Idempotence). */
static void test_idempotence_all_types(void **state)
{
    (void)state;
    static const uint32_t dims[] = {1, 3, 8, 33, 128};
    enum { ROWS = 1600 };
    float *x = malloc(sizeof(float) * 128 * ROWS), *y = malloc(sizeof(float) * 128 * ROWS),
          *y2 = malloc(sizeof(float) * 128 * ROWS);
    unsigned char *e1 = malloc(4 * 128 * ROWS), *e2 = malloc(4 * 128 * ROWS); /* fp32 is largest */
    assert_true(x && y && y2 && e1 && e2);
    uint64_t seed = 27;
    for (size_t di = 0; di < sizeof(dims) / sizeof(dims[0]); di++) {
        uint32_t dim = dims[di];
        for (uint32_t r = 0; r < ROWS; r++)
            idem_row(&seed, r, dim, x + (size_t)r * dim);
        for (int t = 0; t < HPS_DTYPE_COUNT; t++) {
            size_t rb = hps_dtype_row_bytes((hps_dtype_t)t, dim);
            assert_int_equal(hps_dtype_encode((hps_dtype_t)t, dim, ROWS, x, e1), 0);
            assert_int_equal(hps_dtype_decode((hps_dtype_t)t, dim, ROWS, e1, y), 0);
            assert_int_equal(hps_dtype_encode((hps_dtype_t)t, dim, ROWS, y, e2), 0);
            assert_int_equal(hps_dtype_decode((hps_dtype_t)t, dim, ROWS, e2, y2), 0);
            for (uint32_t r = 0; r < ROWS; r++)
                if (memcmp(e1 + r * rb, e2 + r * rb, rb) != 0)
                    fail_msg("%s dim %u row %u (kind %u): re-encoding the decoded row changes "
                             "its bytes",
                             hps_dtype_name((hps_dtype_t)t), dim, r, r % 8);
            assert_memory_equal(y, y2, sizeof(float) * dim * ROWS);
        }
    }
    free(x);
    free(y);
    free(y2);
    free(e1);
    free(e2);
}

/*
 * A strided sweep over the scale bit patterns s (every 997th from 1 to the
 * bits of FLT_MAX / 127, and FLT_MAX / 127 itself, the one case that moves
 * down): for the rows [m] with m = fl(127 * s) and its two neighbouring
 * floats, the encoder's scale is a fixed point of g, at most one ulp from
 * m / 127 and the reference's; m gets |q| = 127 where the scale is normal;
 * and the row re-encodes to the same bytes.
 */
static void test_int8_scale_sweep(void **state)
{
    (void)state;
    enum { CHUNK = 3 * 4096 };
    volatile float top = FLT_MAX / 127.0f;
    const uint32_t last = bits_of(top);
    float *x = malloc(sizeof(float) * CHUNK), *y = malloc(sizeof(float) * CHUNK);
    unsigned char *e1 = malloc(5 * CHUNK), *e2 = malloc(5 * CHUNK);
    assert_true(x && y && e1 && e2);
    uint64_t rows = 0, moved = 0;
    uint32_t b = 1;
    int done = 0;
    while (!done) {
        size_t n = 0;
        while (n < CHUNK && !done) {
            volatile float sv = float_of(b), p = sv * 127.0f;
            uint32_t mb = bits_of(p) < 0x7f800000u ? bits_of(p) : 0x7f7fffffu; /* FLT_MAX */
            x[n++] = float_of(mb - 1);
            x[n++] = float_of(mb);
            x[n++] = float_of(mb + 1 < 0x7f800000u ? mb + 1 : mb);
            if (b == last)
                done = 1;
            b = last - b > 997 ? b + 997 : last;
        }
        assert_int_equal(hps_dtype_encode(HPS_DTYPE_INT8, 1, n, x, e1), 0);
        assert_int_equal(hps_dtype_decode(HPS_DTYPE_INT8, 1, n, e1, y), 0);
        assert_int_equal(hps_dtype_encode(HPS_DTYPE_INT8, 1, n, y, e2), 0);
        for (size_t i = 0; i < n; i++) {
            float sc;
            memcpy(&sc, e1 + 5 * i, 4);
            int8_t q = (int8_t)e1[5 * i + 4];
            volatile float m = x[i], s0 = m / 127.0f;
            uint32_t d =
                bits_of(sc) > bits_of(s0) ? bits_of(sc) - bits_of(s0) : bits_of(s0) - bits_of(sc);
            if (int8_g(sc) != sc || d > 1 || bits_of(sc) != bits_of(int8_ref_scale(m)) ||
                (sc >= 0x1p-126f && q != 127) || q < 0 || memcmp(e1 + 5 * i, e2 + 5 * i, 5) != 0)
                fail_msg("m %a: scale %a (s0 %a, g %a), q %d, re-encoded equal %d", (double)m,
                         (double)sc, (double)s0, (double)int8_g(sc), q,
                         memcmp(e1 + 5 * i, e2 + 5 * i, 5) == 0);
            moved += d != 0;
        }
        rows += n;
    }
    print_message("# int8 scale sweep: %llu rows, %llu scales moved off m / 127\n",
                  (unsigned long long)rows, (unsigned long long)moved);
    free(x);
    free(y);
    free(e1);
    free(e2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_row_bytes),
        cmocka_unit_test(test_arguments),
        cmocka_unit_test(test_fp16_decode_exhaustive),
        cmocka_unit_test(test_fp16_roundtrip_all_patterns),
        cmocka_unit_test(test_fp16_ties_and_boundaries),
        cmocka_unit_test(test_fp16_encode_vs_reference),
        cmocka_unit_test(test_fp16_decode_vs_float16),
        cmocka_unit_test(test_fp16_error_bound),
        cmocka_unit_test(test_bf16_decode_exhaustive),
        cmocka_unit_test(test_bf16_ties_nan_inf),
        cmocka_unit_test(test_bf16_error_bound),
        cmocka_unit_test(test_int8_rows),
        cmocka_unit_test(test_int8_random_rows_and_bound),
        cmocka_unit_test(test_int8_tiny_rows),
        cmocka_unit_test(test_int8_ftz_daz),
        cmocka_unit_test(test_idempotence_all_types),
        cmocka_unit_test(test_int8_scale_sweep),
    };
    return cmocka_run_group_tests_name("dtype", tests, NULL, NULL);
}
