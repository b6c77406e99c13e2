/*
 * test-dtype-int8.c -- the row-wise int8 storage type (include/hps/dtype.h):
 * rows, scales and error bounds against a reference computed independently
 * here in double arithmetic, denormal handling (FTZ/DAZ), and a sweep over
 * the scale bit patterns.
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
        cmocka_unit_test(test_int8_rows),        cmocka_unit_test(test_int8_random_rows_and_bound),
        cmocka_unit_test(test_int8_tiny_rows),   cmocka_unit_test(test_int8_ftz_daz),
        cmocka_unit_test(test_int8_scale_sweep),
    };
    return cmocka_run_group_tests_name("dtype-int8", tests, NULL, NULL);
}
