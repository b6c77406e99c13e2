/*
 * dtype.h -- storage types of embedding rows (issue 22, compact embedding
 * storage) and the conversions between them and fp32.
 *
 * A model's rows may be stored in the volatile DB and in the GPU caches as
 * one of four types ([model.<name>] storage_type).  The persistent DB and
 * Kafka messages stay fp32; rows are encoded once when they are loaded or
 * applied, and every lookup decodes them back to fp32 (or, through
 * hps_client_lookup_typed, rounds the fp32 answer to fp16 / bf16).  This
 * header defines the type names, the size of a stored row and the host
 * conversions; all of them are pure functions of their inputs, bit-exact
 * and deterministic (the same bytes on every run, thread and machine), so a
 * row encoded by the coordinator and decoded by a worker, or by a GPU
 * kernel that follows the rules below (the caches' lookups do), agree.
 *
 * Stored row layouts (row i of a buffer starts at byte i * row_bytes, rows
 * are packed with no padding between them):
 *
 *   fp32  dim IEEE 754 binary32 values, 4 * dim bytes; the identity.
 *   fp16  dim IEEE 754 binary16 values (uint16_t bit patterns, host byte
 *         order), 2 * dim bytes.
 *   bf16  dim bfloat16 values (the upper 16 bits of a binary32; uint16_t bit
 *         patterns, host byte order), 2 * dim bytes.
 *   int8  [scale: binary32, 4 bytes][q: dim int8_t], dim + 4 bytes; element
 *         j decodes to q[j] * scale.  The scale comes first so that a reader
 *         touches one contiguous span per row.
 *
 * Alignment.  The conversion functions need each buffer aligned to its
 * element: fp32 rows (and the fp32 side of every call) to 4 bytes, fp16 and
 * bf16 rows to 2 bytes; int8 rows need none, the scale is read and written
 * with memcpy, because an int8 row of dim % 4 != 0 puts the next row's scale
 * at an address that is not a multiple of 4.  A later store that wants
 * aligned scales rounds its own slot size up; the conversions do not pad.
 *
 * Rounding rules and error bounds (x: the fp32 input, x': the decoded value):
 *
 *   fp32  x' == x bit for bit.
 *   fp16  Round to nearest, ties to even, in integer arithmetic only (no FP
 *         instruction, so the FP environment does not matter).  |x| >= 65520
 *         (the midpoint of 65504, the largest binary16, and 2^16) becomes
 *         +-inf; +-inf stays +-inf; NaN stays a quiet NaN with its sign and
 *         the top 9 bits of its payload kept (the quiet bit is set).
 *         Subnormal results (|x| < 2^-14) are rounded exactly, never flushed
 *         to zero: |x| <= 2^-25 becomes +-0 (2^-25 is a tie, rounded to the
 *         even 0).  Bound, for finite |x| < 65520:
 *           |x| >= 2^-14:  |x - x'| <= 2^-11 * |x|     (half an ulp, 11 bits)
 *           |x| <  2^-14:  |x - x'| <= 2^-25           (half the ulp 2^-24)
 *         Decoding is exact: every binary16 value (NaN payloads and the
 *         signalling bit included) widens to the binary32 of the same value.
 *         hps_dtype_decode uses x86-64's F16C instruction (vcvtph2ps) where
 *         the CPU has it, on groups of 8 values without a NaN and while
 *         MXCSR.DAZ is clear (the same bits; about 6x the integer path in
 *         bench-dtype), the integer path otherwise.
 *   bf16  Round to nearest, ties to even on the upper 16 bits (integer
 *         arithmetic only).  Finite values may round up to +-inf (|x| >=
 *         0x1.ffp127, the midpoint above the largest bfloat16); NaN stays a
 *         quiet NaN with its sign and the top 6 payload bits kept.  Bound, for
 *         finite results: |x - x'| <= 2^-8 * |x| for |x| >= 2^-126 and
 *         <= 2^-134 below (subnormals keep 7 fraction bits of an ulp of 2^-133).
 *         Decoding is exact (x' has the 16 bits followed by 16 zero bits).
 *   int8  Row-wise symmetric quantization, computed in fp32 in the default
 *         rounding mode (round to nearest; this code never changes it) and
 *         without flush-to-zero, whatever the calling thread set (on
 *         x86-64, MXCSR's FTZ and DAZ bits are cleared for the call and
 *         restored after: torch.set_flush_denormal(True) or -ffast-math
 *         code would otherwise decode rows of a subnormal scale as 0):
 *           m     = the largest |x[j]| over the FINITE elements of the row,
 *                   0 if there are none;
 *           s0    = m / 127.0f;
 *           ok(s) = ((float)Q * s) / 127.0f == s  (two fp32 roundings),
 *                   where Q = rne(min(m / s, 127)), the |q| that m gets
 *                   under scale s (Q = 0 for s == 0): whether a
 *                   re-encoding of the decoded row computes s again.
 *                   Where s is a normal float, Q = 127 and ok(s) is
 *                   g(s) == s with g(s) = (s * 127.0f) / 127.0f;
 *           scale = s0                 if ok(s0), else
 *                   s0's float above   if ok of it, else
 *                   s0's float below   if ok of it, else
 *                   s0                 (this last case does not occur for
 *                                      any m: measured exhaustively, see
 *                                      Idempotence);
 *           q[j]  = 0                       if x[j] is NaN,
 *                   0                       if scale == 0 (x[j] finite or
 *                                           +-inf),
 *                   +127 / -127             if x[j] is +inf / -inf,
 *                   rne(clamp(x[j] / scale, -127, 127)) otherwise, where
 *                   rne rounds to the nearest integer, ties to even,
 *                   computed exactly (truncate, compare the fraction with
 *                   0.5), independent of the rounding mode;
 *           x'[j] = (float)q[j] * scale  (one fp32 multiply).
 *         So a row of zeros stores scale 0 and q 0, -0.0 decodes to +0.0,
 *         NaN to 0, and +-inf to +-127 * scale (about +-m), or to 0 with
 *         q = 0 where the row has no finite nonzero element.  The scale is
 *         s0 or one ulp from it (it is s0 for every m but 1156, see
 *         Idempotence), so m / scale is within 2^-22 relative of 127 and
 *         the largest finite |x[j]| gets |q[j]| = 127 (or is clamped to it)
 *         whenever the scale is a normal float.  Bound, for
 *         finite x[j] in a row whose scale is a normal float (m >= 127 *
 *         2^-126, about 1.5e-36):
 *           |x[j] - x'[j]| <= (m / 254) * (1 + 2^-14)
 *         i.e. half a quantization step, widened by at most 2^-14 relative
 *         for the one-ulp choice of the scale and the three fp32 roundings
 *         (s0, the division and the decoding multiply); together these make
 *         less than 2^-15, so the bound did not change with the choice of
 *         the scale.  Below that, where the scale is subnormal or 0, the
 *         error is at most m (elements may decode to 0, and the largest
 *         may get |q| < 127).
 *
 * Idempotence.  For every storage type and every row x (any bit patterns,
 * NaN and inf included), encode(decode(encode(x))) == encode(x) byte for
 * byte, so decode(encode(x')) == x' bit for bit for every decoded row x'.
 * A row that a reader got decoded (from the volatile DB, say) re-encodes
 * to exactly the bytes stored.  fp32 is the identity; fp16 and bf16 decode
 * exactly and every stored value, NaNs with their kept payload and quiet
 * bit included, is its own rounding.  For int8 with a normal scale, the
 * decoded row's largest finite |x'| is fl(127 * scale) (the element with
 * |q| = 127, and +-inf, decode to it), whose s0 is g(scale) == scale, so
 * the scale is chosen again (and every |q| is at most 127, so no other
 * element is larger); each q is recomputed as rne(fl(fl(q * scale) /
 * scale)), two roundings that move the quotient by less than 127 * 2^-23,
 * far below the 0.5 that would change the integer.  Rows whose scale is
 * subnormal may give their largest element |q| < 127 (m / scale is far
 * from 127 when the scale has few significant bits); ok() then asks of
 * the scale what the re-encoding needs, that fl(Q * scale) / 127 rounds
 * back to it (g(scale) == scale is not enough there: m = 445 * 2^-149
 * gets s0 = 4 * 2^-149, Q = 111, and 444 * 2^-149 / 127 rounds to
 * 3 * 2^-149).  Rows of scale 0 have all q 0 and decode to zeros, which
 * re-encode to scale 0.  Measured exhaustively over every finite m (rows
 * [m] and [m, +-inf], encoded, decoded and re-encoded: all identical):
 * ok(s0) holds for all but 1156 of the 2139095040 values of |m|; for
 * those the float below is taken (never the float above): m = FLT_MAX,
 * where 127 * s0 overflows (so the old rule, scale = s0, decoded FLT_MAX
 * to inf), and 1155 values in [0x1.bdp-141, 0x1.f218p-136], whose scales
 * are subnormal.  Over all floats s in (0, FLT_MAX / 127], g(s) == s for
 * 2064380895 of the 2080440836, g of the float above holds for 16059940 of
 * the rest, and g of the float below for the last one, FLT_MAX / 127.
 *
 * Thread safety: every function here is a pure function of its arguments;
 * any number of threads may call them at once on disjoint output buffers.
 */
#ifndef HPS_DTYPE_H
#define HPS_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "hps/hps.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Storage type of a model's embedding rows (issue 22), selected by
 * [model.<name>] storage_type (whose constants are these, in this order).
 * The values are stable: the shared-memory segment stores them in each
 * table's descriptor (hps_table_spec_t.storage_type).
 */
typedef enum hps_dtype {
    HPS_DTYPE_FP32 = 0, /**< "fp32": binary32, the default */
    HPS_DTYPE_FP16 = 1, /**< "fp16": IEEE 754 binary16 */
    HPS_DTYPE_BF16 = 2, /**< "bf16": bfloat16, the upper half of binary32 */
    HPS_DTYPE_INT8 = 3, /**< "int8": row-wise int8 with one fp32 scale per row */
} hps_dtype_t;

/** Number of storage types (one past the largest hps_dtype_t value). */
#define HPS_DTYPE_COUNT 4

/**
 * @brief Name of a storage type: "fp32", "fp16", "bf16" or "int8".
 * @param[in] dtype  A storage type.
 * @return A static string; "unknown" for a value that is no storage type.
 *         Thread-safe.
 */
const char *hps_dtype_name(hps_dtype_t dtype);

/**
 * @brief Storage type of a name, as written in the configuration.
 * @param[in]  name       NUL-terminated, exactly one of "fp32", "fp16",
 *                        "bf16", "int8" (lower case, no blanks); NULL is
 *                        refused.
 * @param[out] ret_dtype  The type, written only on success.
 * @return 0; HPS_EINVAL for NULL or any other name.  Thread-safe.
 */
hps_err_t hps_dtype_parse(const char *name, hps_dtype_t *ret_dtype);

/**
 * @brief Bytes of one stored row of dim elements (see the layouts above):
 *        fp32 4 * dim, fp16 and bf16 2 * dim, int8 dim + 4.
 * @param[in] dtype  A storage type.
 * @param[in] dim    Elements per row, >= 1.
 * @return The size in bytes (never overflows: dim is 32-bit); 0 for dim 0
 *         or a value that is no storage type.  Thread-safe.
 */
size_t hps_dtype_row_bytes(hps_dtype_t dtype, uint32_t dim);

/**
 * @brief Encode n rows of fp32 values into the stored format.
 * @param[in]  dtype  Target storage type.
 * @param[in]  dim    Elements per row, >= 1.
 * @param[in]  n      Number of rows; 0 does nothing and succeeds.
 * @param[in]  src    (n, dim) float32, host memory, row-major, 4-byte
 *                    aligned; read only.
 * @param[out] dst    (n, row_bytes) bytes, host memory, aligned as the
 *                    header says (2 for fp16/bf16, 4 for fp32, none for
 *                    int8); owned by the caller, must not overlap src.
 *                    Fully written on success, untouched on failure.
 * @return 0; HPS_EINVAL for an unknown dtype, dim 0, NULL src or dst with
 *         n > 0, a misaligned buffer, or n * row_bytes beyond SIZE_MAX.
 *         Thread-safe; never allocates.
 */
hps_err_t hps_dtype_encode(hps_dtype_t dtype, uint32_t dim, size_t n, const float *src, void *dst);

/**
 * @brief Decode n stored rows back to fp32.
 * @param[in]  dtype  Storage type of src.
 * @param[in]  dim    Elements per row, >= 1.
 * @param[in]  n      Number of rows; 0 does nothing and succeeds.
 * @param[in]  src    (n, row_bytes) bytes in the layout of dtype, host
 *                    memory, aligned as for hps_dtype_encode(); any bit
 *                    pattern is accepted (an int8 row with a NaN or inf
 *                    scale decodes to NaN/inf products, nothing fails).
 * @param[out] dst    (n, dim) float32, host memory, 4-byte aligned; owned by
 *                    the caller, must not overlap src.  Fully written on
 *                    success, untouched on failure.
 * @return 0; HPS_EINVAL as for hps_dtype_encode().  Thread-safe; never
 *         allocates.
 */
hps_err_t hps_dtype_decode(hps_dtype_t dtype, uint32_t dim, size_t n, const void *src, float *dst);

/**
 * @brief One binary32 to binary16 bits (the fp16 rule above).  Pure.
 * @param[in] x  Any value.
 * @return The binary16 bit pattern.
 */
uint16_t hps_fp16_from_float(float x);

/** @brief binary16 bits to the binary32 of the same value (exact).  Pure. */
float hps_fp16_to_float(uint16_t h);

/**
 * @brief One binary32 to bfloat16 bits (the bf16 rule above).  Pure.
 * @param[in] x  Any value.
 * @return The bfloat16 bit pattern.
 */
uint16_t hps_bf16_from_float(float x);

/** @brief bfloat16 bits to binary32 (the bits shifted up 16; exact).  Pure. */
float hps_bf16_to_float(uint16_t h);

/**
 * @brief Whether any of n binary32 values is NaN or +-Inf (all exponent bits
 *        set).  Branch-free over the values; cheap enough to run on every
 *        row a model file or a Kafka message brings.  Pure.
 * @param[in] v  n binary32 values, host memory, any alignment (read with
 *               memcpy: Kafka records are not aligned).
 * @param[in] n  Number of values; 0 gives false.
 */
bool hps_f32_any_nonfinite(const void *v, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* HPS_DTYPE_H */
