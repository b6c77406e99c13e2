/*
 * test-dtype.c -- storage types of embedding rows (include/hps/dtype.h):
 * names, row sizes, argument checks, the fp16 / bf16 conversions and the
 * idempotence of every type's (int8's own: test-dtype-int8.c), against
 * references computed independently here in double arithmetic
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

#include "dtype_test.h"
#include "hps/dtype.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

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
        cmocka_unit_test(test_idempotence_all_types),
    };
    return cmocka_run_group_tests_name("dtype", tests, NULL, NULL);
}
