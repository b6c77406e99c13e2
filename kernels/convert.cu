/*
 * convert.cu -- fp32 to fp16 / bf16 on the device (kernels/convert.h): one
 * grid-stride kernel per type, four values per thread and step where the
 * buffers allow (a float4 load, one 8-byte store), one value otherwise.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "convert.h"
#include "gcache_internal.cuh"

#define CV_THREADS 256
#define CV_BLOCKS  4096 /* at most; the grid strides */

/* The bits of x in the output type (round to nearest even). */
template <hps_dtype_t T> __device__ __forceinline__ uint32_t cv_bits(float x);
template <> __device__ __forceinline__ uint32_t cv_bits<HPS_DTYPE_FP16>(float x)
{
    return __half_as_ushort(__float2half_rn(x));
}
template <> __device__ __forceinline__ uint32_t cv_bits<HPS_DTYPE_BF16>(float x)
{
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

/* vec: n / 4 groups of four at src / dst are 16- and 8-byte aligned. */
template <hps_dtype_t T>
__global__ void __launch_bounds__(CV_THREADS)
    k_convert(const float *__restrict__ src, uint16_t *__restrict__ dst, size_t n, bool vec)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t step = (size_t)gridDim.x * blockDim.x;
    size_t done = 0;
    if (vec) {
        size_t n4 = n / 4;
        for (size_t g = i; g < n4; g += step) {
            float4 v = ((const float4 *)src)[g];
            ((uint2 *)dst)[g] = make_uint2(cv_bits<T>(v.x) | cv_bits<T>(v.y) << 16,
                                           cv_bits<T>(v.z) | cv_bits<T>(v.w) << 16);
        }
        done = n4 * 4;
    }
    for (size_t j = done + i; j < n; j += step)
        dst[j] = (uint16_t)cv_bits<T>(src[j]);
}

extern "C" hps_err_t hps_gcache_convert_f32(const float *d_src, void *d_dst, size_t n,
                                            hps_dtype_t dtype, cudaStream_t stream)
{
    if (!d_src || !d_dst || (dtype != HPS_DTYPE_FP16 && dtype != HPS_DTYPE_BF16))
        return HPS_EINVAL;
    if (n == 0)
        return 0;
    bool vec = ((uintptr_t)d_src & 15) == 0 && ((uintptr_t)d_dst & 7) == 0;
    size_t per = vec ? 4 : 1, blocks = (n / per + CV_THREADS - 1) / CV_THREADS;
    blocks = blocks < 1 ? 1 : blocks > CV_BLOCKS ? CV_BLOCKS : blocks;
    if (dtype == HPS_DTYPE_FP16)
        k_convert<HPS_DTYPE_FP16>
            <<<(unsigned)blocks, CV_THREADS, 0, stream>>>(d_src, (uint16_t *)d_dst, n, vec);
    else
        k_convert<HPS_DTYPE_BF16>
            <<<(unsigned)blocks, CV_THREADS, 0, stream>>>(d_src, (uint16_t *)d_dst, n, vec);
    HPS_CUDA_TRY(cudaGetLastError());
    return 0;
}
