/*
 * dtype.c -- storage types of embedding rows and their conversions
 * (include/hps/dtype.h, which states every rounding rule and error bound).
 *
 * How the conversions stay exact and fast.  fp16 and bf16 are computed on
 * the bit patterns with integer operations only, written as branch-free
 * selects so that gcc can vectorize the loops over a whole buffer (rows are
 * packed, so n rows of dim elements are one flat array of n * dim).  The one
 * floating-point operation on that side is the int -> float conversion of a
 * binary16 subnormal's 10-bit significand, which is exact in every rounding
 * mode.  int8 follows its definition in fp32 arithmetic, but rounds the
 * quotient to an integer by truncating and comparing the remaining fraction
 * with 0.5, which is exact and does not depend on the rounding mode; every
 * float -> int conversion sees a value already clamped to [-127, 127] (or
 * replaced by 0 for NaN), so none is undefined.  Its scale is m / 127, or
 * one ulp from it where that is needed for a re-encoding of the decoded row
 * to compute the same scale again (int8_scale), so that every type is
 * idempotent.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "hps/dtype.h"

/* ------------------------------------------------------------------------ */
/* Bit casts                                                                 */
/* ------------------------------------------------------------------------ */

static inline uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    return u;
}

static inline float f32_from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

/* ------------------------------------------------------------------------ */
/* fp16                                                                      */
/* ------------------------------------------------------------------------ */

/*
 * binary32 -> binary16, round to nearest even.  a = |x| as bits; the ranges
 * of a, largest first:
 *   > 0x7f800000   NaN: quiet NaN (0x7e00), the top 9 payload bits kept;
 *   >= 0x477ff000  |x| >= 65520 or inf: inf (65520 is the tie between 65504
 *                  and 2^16, and 65504's significand is odd, so it rounds up);
 *   >= 0x38800000  |x| >= 2^-14, normal: rebias the exponent (127 - 15 =
 *                  112) and round the 13 dropped bits: adding 0xfff plus the
 *                  lowest kept bit carries exactly when the dropped part is
 *                  above half, or is half and the kept part is odd; a carry
 *                  out of the significand correctly bumps the exponent;
 *   > 0x33000000   2^-25 < |x| < 2^-14, subnormal result m * 2^-24: the
 *                  24-bit significand (implicit 1 included) shifted right
 *                  by 126 - e (14 ... 24 bits), rounded the same way; m may
 *                  round up to 0x400, the smallest normal, which is right;
 *   else           |x| <= 2^-25 (the tie with 2^-24 goes to the even 0): 0.
 * Each branch is computed with a clamped shift so that no operation is
 * undefined for the inputs it does not serve.
 */
static inline uint16_t fp16_from_float(float x)
{
    uint32_t u = f32_bits(x);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;

    uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
    uint32_t nrm = (a + 0xfffu + ((a >> 13) & 1u) - (112u << 23)) >> 13;

    uint32_t e = a >> 23;
    uint32_t ec = e < 102u ? 102u : (e > 112u ? 112u : e);
    uint32_t sh = 126u - ec; /* 14 ... 24 */
    uint32_t full = (a & 0x7fffffu) | 0x800000u;
    uint32_t q = full >> sh;
    uint32_t rem = full & ((1u << sh) - 1u);
    /* Round up iff rem + (q & 1) > half of 1 << sh; the sum below is under
     * 2 << sh, so the shift yields exactly that 0 or 1, without a branch. */
    uint32_t sub = q + ((rem + (q & 1u) + (1u << (sh - 1u)) - 1u) >> sh);

    uint32_t r = a > 0x7f800000u    ? nan
                 : a >= 0x477ff000u ? 0x7c00u
                 : a >= 0x38800000u ? nrm
                 : a > 0x33000000u  ? sub
                                    : 0u;
    return (uint16_t)(sign | r);
}

/*
 * binary16 -> binary32, exact.  em = the bits without the sign:
 *   >= 0x7c00  inf or NaN: exponent all ones, the significand moved up 13
 *              bits (so payload and quiet bit are kept);
 *   >= 0x0400  normal: the exponent rebiased by +112;
 *   >= 1       subnormal m * 2^-24: (float)m is exact (m < 2^10), and
 *              subtracting 24 from its exponent field divides by 2^24 exactly
 *              (the result, >= 2^-24, is a normal binary32);
 *   0          zero.
 */
static inline float fp16_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu;
    uint32_t special = (em << 13) | 0x7f800000u;
    uint32_t nrm = (em << 13) + (112u << 23);
    uint32_t sub = f32_bits((float)(int32_t)em) - (24u << 23);
    uint32_t r = em >= 0x7c00u ? special : em >= 0x400u ? nrm : em != 0 ? sub : 0u;
    return f32_from_bits(sign | r);
}

/* ------------------------------------------------------------------------ */
/* bf16                                                                      */
/* ------------------------------------------------------------------------ */

/*
 * binary32 -> bfloat16: NaN keeps its upper half with the quiet bit (0x40 of
 * the upper half) set; everything else rounds the lower 16 bits to nearest
 * even the same way as fp16's normal case.  The largest finite inputs carry
 * into the exponent and become inf, as round-to-nearest wants; no input that
 * is not NaN can wrap (at most 0xff800000 + 0x8000).
 */
static inline uint16_t bf16_from_float(float x)
{
    uint32_t u = f32_bits(x);
    uint32_t nan = (u >> 16) | 0x40u;
    uint32_t rne = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rne);
}

static inline float bf16_to_float(uint16_t h)
{
    return f32_from_bits((uint32_t)h << 16);
}

uint16_t hps_fp16_from_float(float x)
{
    return fp16_from_float(x);
}

float hps_fp16_to_float(uint16_t h)
{
    return fp16_to_float(h);
}

uint16_t hps_bf16_from_float(float x)
{
    return bf16_from_float(x);
}

float hps_bf16_to_float(uint16_t h)
{
    return bf16_to_float(h);
}

/* ------------------------------------------------------------------------ */
/* int8                                                                      */
/* ------------------------------------------------------------------------ */

/*
 * rne(clamp(x / div, -127, 127)), NaN -> 0: the q of one element.  The
 * quotient is rounded to an integer by truncating and comparing the
 * remaining fraction with 0.5, exact in every rounding mode; the float ->
 * int conversion sees a value already clamped (or 0 for NaN), so it is
 * never undefined.  Branch-free so that the row loop vectorizes.
 */
static inline int32_t int8_quant(float x, float div)
{
    float t = x / div;
    t = t > 127.0f ? 127.0f : t;
    t = t < -127.0f ? -127.0f : t;
    t = t == t ? t : 0.0f; /* NaN -> 0 */
    int32_t i = (int32_t)t;
    float f = t - (float)i; /* exact: |t| <= 127 */
    float af = fabsf(f);
    int32_t up = (af > 0.5f) | ((af == 0.5f) & (i & 1)); /* no branch */
    return i + up * ((f > 0.0f) - (f < 0.0f));
}

/*
 * Whether scale s survives re-encoding for a row whose largest finite |x|
 * is m: that element gets Q = |q| = int8_quant(m, s) (0 where s == 0) and
 * decodes to fl(Q * s); a re-encode of the decoded row finds that as its
 * largest element (every other |q| is at most Q, and +-inf decodes to
 * fl(127 * s), see below), so its first candidate is fl(fl(Q * s) / 127),
 * which must be s.  Where s is normal, m / s is within 2^-22 relative of
 * 127, so Q == 127 and this is g(s) = fl(fl(127 * s) / 127) == s, the fixed
 * point the header describes.  Where s is subnormal, Q may be below 127
 * (m / s is far from 127 when s has few significant bits), and g(s) == s
 * alone does not suffice: m = 445 * 2^-149 gets s0 = 4 * 2^-149, Q = 111,
 * and 444 * 2^-149 / 127 rounds to 3 * 2^-149.  Plain fp32 operations in
 * the default mode; gcc neither folds them (no -ffast-math) nor contracts
 * them (a multiply then a divide is no fma).
 */
static inline int int8_scale_ok(float m, float s)
{
    float qm = (float)int8_quant(m, s > 0.0f ? s : INFINITY);
    return (qm * s) / 127.0f == s;
}

/*
 * The stored scale of a row whose largest finite |x| has the bits mbits:
 * s0 = m / 127 if it survives re-encoding (int8_scale_ok), else the float
 * above s0, else the float below, whichever does first.  The neighbours are
 * the bit patterns sb + 1 and sb - 1: s0 is finite and non-negative (s0 ==
 * 0 always survives, so sb >= 1 when the one below is looked at; s0 <=
 * FLT_MAX / 127 < FLT_MAX, so sb + 1 is finite), and for non-negative
 * floats the next bit pattern is the next float.  The final fallback to s0
 * is never taken (an exhaustive run over every finite m found one of the
 * three candidates to survive; the header gives the counts); it only keeps
 * the result defined.
 */
static inline float int8_scale(uint32_t mbits)
{
    float m = f32_from_bits(mbits);
    float s0 = m / 127.0f;
    uint32_t sb = f32_bits(s0);
    float up = f32_from_bits(sb + 1u), down = f32_from_bits(sb - 1u);
    return int8_scale_ok(m, s0)     ? s0
           : int8_scale_ok(m, up)   ? up
           : int8_scale_ok(m, down) ? down
                                    : s0;
}

/*
 * One row: [scale][dim int8].  The largest finite |x| is found on the bit
 * patterns: for non-negative binary32 values the unsigned integer order is
 * the numeric order, and a < 0x7f800000 is exactly "finite", so NaN and inf
 * drop out without any floating-point comparison.
 *
 * Where scale == 0 (the row has no finite nonzero element, or m / 127
 * underflows), the divisor is +inf instead: every finite element divides to
 * +-0 and +-inf divides to NaN, so all of them store q = 0, as the header's
 * rule says, without a special case.  (A decoded row of that scale is all
 * zeros, which re-encodes to q = 0; q = +-127 for +-inf would not survive
 * the round trip.)  Where scale > 0, +-inf divides to +-inf and clamps to
 * +-127.
 */
static void int8_encode_row(const float *restrict x, uint32_t dim, uint8_t *restrict dst)
{
    uint32_t mbits = 0;
    for (uint32_t j = 0; j < dim; j++) {
        uint32_t a = f32_bits(x[j]) & 0x7fffffffu;
        a = a < 0x7f800000u ? a : 0u;
        mbits = a > mbits ? a : mbits;
    }
    float scale = int8_scale(mbits);
    float div = scale > 0.0f ? scale : INFINITY;
    int8_t *restrict q = (int8_t *)(dst + sizeof(float));

    for (uint32_t j = 0; j < dim; j++)
        q[j] = (int8_t)int8_quant(x[j], div);
    memcpy(dst, &scale, sizeof(scale));
}

static void int8_decode_row(const uint8_t *restrict src, uint32_t dim, float *restrict y)
{
    float scale;
    memcpy(&scale, src, sizeof(scale));
    const int8_t *restrict q = (const int8_t *)(src + sizeof(float));
    for (uint32_t j = 0; j < dim; j++)
        y[j] = (float)q[j] * scale;
}

/*
 * int8 rows are computed with fp32 divides and multiplies, whose results
 * depend on MXCSR's FTZ (bit 15: subnormal results flushed to 0) and DAZ
 * (bit 6: subnormal operands read as 0) where a scale or a product is
 * subnormal.  Callers may have set them (torch.set_flush_denormal, code
 * built with -ffast-math): the rule (include/hps/dtype.h) is IEEE's default
 * mode, so both are cleared for the call and restored after.  The empty asm
 * with a memory clobber keeps the rows' loads after the clear and their
 * stores before the restore.
 */
#if defined(__x86_64__) && defined(__GNUC__)
#include <xmmintrin.h>
#define MXCSR_FTZ_DAZ 0x8040u
static unsigned fp_default_begin(void)
{
    unsigned csr = _mm_getcsr();
    if (csr & MXCSR_FTZ_DAZ)
        _mm_setcsr(csr & ~MXCSR_FTZ_DAZ);
    __asm__ volatile("" ::: "memory");
    return csr;
}

static void fp_default_end(unsigned csr)
{
    __asm__ volatile("" ::: "memory");
    if (csr & MXCSR_FTZ_DAZ)
        _mm_setcsr(csr);
}
#else
static unsigned fp_default_begin(void)
{
    return 0;
}

static void fp_default_end(unsigned csr)
{
    (void)csr;
}
#endif

/* ------------------------------------------------------------------------ */
/* Public API                                                                */
/* ------------------------------------------------------------------------ */

const char *hps_dtype_name(hps_dtype_t dtype)
{
    switch (dtype) {
    case HPS_DTYPE_FP32:
        return "fp32";
    case HPS_DTYPE_FP16:
        return "fp16";
    case HPS_DTYPE_BF16:
        return "bf16";
    case HPS_DTYPE_INT8:
        return "int8";
    }
    return "unknown";
}

hps_err_t hps_dtype_parse(const char *name, hps_dtype_t *ret_dtype)
{
    if (!name || !ret_dtype)
        return HPS_EINVAL;
    for (int d = 0; d < HPS_DTYPE_COUNT; d++) {
        if (strcmp(name, hps_dtype_name((hps_dtype_t)d)) == 0) {
            *ret_dtype = (hps_dtype_t)d;
            return 0;
        }
    }
    return HPS_EINVAL;
}

size_t hps_dtype_row_bytes(hps_dtype_t dtype, uint32_t dim)
{
    if (dim == 0)
        return 0;
    switch (dtype) {
    case HPS_DTYPE_FP32:
        return (size_t)dim * 4;
    case HPS_DTYPE_FP16:
    case HPS_DTYPE_BF16:
        return (size_t)dim * 2;
    case HPS_DTYPE_INT8:
        return (size_t)dim + sizeof(float);
    }
    return 0;
}

/* Alignment the stored side of dtype needs (see the header). */
static size_t stored_align(hps_dtype_t dtype)
{
    return dtype == HPS_DTYPE_FP32 ? 4 : dtype == HPS_DTYPE_INT8 ? 1 : 2;
}

/* The checks common to encode and decode; 0 if the call may proceed. */
static hps_err_t check_args(hps_dtype_t dtype, uint32_t dim, size_t n, const void *fp32,
                            const void *stored)
{
    size_t rb = hps_dtype_row_bytes(dtype, dim), total;
    if (rb == 0)
        return HPS_EINVAL;
    if (n == 0)
        return 0;
    if (!fp32 || !stored)
        return HPS_EINVAL;
    if (((uintptr_t)fp32 & 3u) != 0 || ((uintptr_t)stored & (stored_align(dtype) - 1)) != 0)
        return HPS_EINVAL;
    /* Both sides must be addressable: n rows of rb bytes and of 4 * dim. */
    if (__builtin_mul_overflow(n, rb, &total) || __builtin_mul_overflow(n, (size_t)dim * 4, &total))
        return HPS_EINVAL;
    return 0;
}

hps_err_t hps_dtype_encode(hps_dtype_t dtype, uint32_t dim, size_t n, const float *src, void *dst)
{
    hps_err_t rc = check_args(dtype, dim, n, src, dst);
    if (rc != 0 || n == 0)
        return rc;
    size_t count = n * dim;
    switch (dtype) {
    case HPS_DTYPE_FP32:
        memcpy(dst, src, count * sizeof(float));
        break;
    case HPS_DTYPE_FP16: {
        uint16_t *restrict h = dst;
        for (size_t i = 0; i < count; i++)
            h[i] = fp16_from_float(src[i]);
        break;
    }
    case HPS_DTYPE_BF16: {
        uint16_t *restrict h = dst;
        for (size_t i = 0; i < count; i++)
            h[i] = bf16_from_float(src[i]);
        break;
    }
    case HPS_DTYPE_INT8: {
        size_t rb = hps_dtype_row_bytes(dtype, dim);
        unsigned csr = fp_default_begin();
        for (size_t r = 0; r < n; r++)
            int8_encode_row(src + r * dim, dim, (uint8_t *)dst + r * rb);
        fp_default_end(csr);
        break;
    }
    }
    return 0;
}

static void fp16_decode_scalar(const uint16_t *restrict h, float *restrict dst, size_t count)
{
    for (size_t i = 0; i < count; i++)
        dst[i] = fp16_to_float(h[i]);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>

/*
 * fp16 -> fp32 with the F16C instruction (vcvtph2ps, 8 values at a time),
 * where the CPU has it: exact for every value but NaN (a signalling NaN
 * comes out quiet), so a group of 8 holding a NaN is converted by
 * fp16_to_float instead.  With MXCSR.DAZ set (a caller's flush-denormal
 * mode) subnormal halves are not trusted to vcvtph2ps either, and the whole
 * buffer takes fp16_to_float.  bench-dtype measures both.
 */
__attribute__((target("avx,f16c"))) static void fp16_decode_f16c(const uint16_t *restrict h,
                                                                 float *restrict dst, size_t count)
{
    const __m128i mag = _mm_set1_epi16(0x7fff), inf = _mm_set1_epi16(0x7c00);
    size_t i = 0;
    for (; i + 8 <= count; i += 8) {
        __m128i v = _mm_loadu_si128((const __m128i *)(h + i));
        __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(v, mag), inf);
        if (_mm_movemask_epi8(nan))
            fp16_decode_scalar(h + i, dst + i, 8);
        else
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(v));
    }
    fp16_decode_scalar(h + i, dst + i, count - i);
}

/* CPUID: AVX and F16C, and the OS saves the YMM registers (XCR0 bits 1-2). */
static int cpu_has_f16c(void)
{
    unsigned a, b, c, d, lo, hi;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE) || !(c & bit_AVX) || !(c & bit_F16C))
        return 0;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6) == 6;
}

static void fp16_decode_all(const uint16_t *restrict h, float *restrict dst, size_t count)
{
    static int f16c = -1; /* a race only computes it twice */
    if (f16c < 0)
        f16c = cpu_has_f16c();
    if (f16c && !(_mm_getcsr() & 0x40)) /* 0x40: MXCSR.DAZ */
        fp16_decode_f16c(h, dst, count);
    else
        fp16_decode_scalar(h, dst, count);
}
#else
#define fp16_decode_all fp16_decode_scalar
#endif

hps_err_t hps_dtype_decode(hps_dtype_t dtype, uint32_t dim, size_t n, const void *src, float *dst)
{
    hps_err_t rc = check_args(dtype, dim, n, dst, src);
    if (rc != 0 || n == 0)
        return rc;
    size_t count = n * dim;
    switch (dtype) {
    case HPS_DTYPE_FP32:
        memcpy(dst, src, count * sizeof(float));
        break;
    case HPS_DTYPE_FP16:
        fp16_decode_all(src, dst, count);
        break;
    case HPS_DTYPE_BF16: {
        const uint16_t *restrict h = src;
        for (size_t i = 0; i < count; i++)
            dst[i] = bf16_to_float(h[i]);
        break;
    }
    case HPS_DTYPE_INT8: {
        size_t rb = hps_dtype_row_bytes(dtype, dim);
        unsigned csr = fp_default_begin();
        for (size_t r = 0; r < n; r++)
            int8_decode_row((const uint8_t *)src + r * rb, dim, dst + r * dim);
        fp_default_end(csr);
        break;
    }
    }
    return 0;
}

/*
 * Whether any of n floats is NaN or +-Inf (exponent bits all ones), two at a
 * time in 64-bit words: per 32-bit lane, (bits & 0x7fffffff) + 0x00800000
 * reaches bit 31 exactly when the magnitude bits are >= 0x7f800000, and a
 * lane's sum stays below 2^32, so no carry crosses into the next lane.
 */
bool hps_f32_any_nonfinite(const void *v, size_t n)
{
    const uint64_t mag = UINT64_C(0x7fffffff7fffffff), one_exp = UINT64_C(0x0080000000800000);
    uint64_t acc = 0;
    size_t i = 0;

    for (; i + 2 <= n; i += 2) {
        uint64_t x;
        memcpy(&x, (const char *)v + 4 * i, 8);
        acc |= (x & mag) + one_exp;
    }
    if (i < n) {
        uint32_t x;
        memcpy(&x, (const char *)v + 4 * i, 4);
        acc |= (uint64_t)((x & 0x7fffffffu) + 0x00800000u);
    }
    return (acc & UINT64_C(0x8000000080000000)) != 0;
}
