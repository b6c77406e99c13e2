/*
 * convert.h -- fp32 rows to a 2-byte output type on the device: the
 * conversion of libhps's typed lookups (hps_client_lookup_typed) whose
 * output is in device memory (worker/libhps/gpu_ctx.c).
 *
 * Part of the gcache library's API for libhps (C linkage, hps_gcache_
 * prefix), but not of include/hps/gcache.h: it serves libhps's GPU path
 * only.  Only with CUDA.
 */
#ifndef HPS_KERNELS_CONVERT_H
#define HPS_KERNELS_CONVERT_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#include "hps/dtype.h"
#include "hps/hps.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Convert n fp32 values to fp16 or bf16, rounding to nearest even
 * (CUDA's __float2half_rn / __float2bfloat16_rn: for every value but NaN
 * the bits of include/hps/dtype.h's hps_dtype_encode; a NaN stays a NaN of
 * its sign, its payload not kept).
 * @param[in]  d_src  device, float32 (n), 4-byte aligned.
 * @param[out] d_dst  device, (n) uint16 bit patterns of dtype, 2-byte
 *                    aligned; may not overlap d_src.
 * @param[in]  n      values (0: nothing is launched).
 * @param[in]  dtype  HPS_DTYPE_FP16 or HPS_DTYPE_BF16.
 * @param stream      enqueued on it; nothing waits on the host.
 * @return 0, HPS_EINVAL (another dtype, a NULL pointer) or HPS_EIO.
 */
hps_err_t hps_gcache_convert_f32(const float *d_src, void *d_dst, size_t n, hps_dtype_t dtype,
                                 cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
