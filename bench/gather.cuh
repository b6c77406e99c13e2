/*
 * gather.cuh -- what the GPU benchmarks share: the CUDA error check, the
 * ideal gather (the floor every lookup is measured against) and the Zipf
 * row indices of issue 4's workload.  Rows are DIM_GATHER (128) fp32.
 */
#ifndef HPS_BENCH_GATHER_CUH
#define HPS_BENCH_GATHER_CUH

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

/* Exit with the call and CUDA's message on failure. */
#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define DIM_GATHER 128

/* Record e1 on s, wait for it, and return the milliseconds since e0. */
static inline float ms_since(cudaEvent_t e0, cudaEvent_t e1, cudaStream_t s)
{
    float ms;
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    CK(cudaEventElapsedTime(&ms, e0, e1));
    return ms;
}

/* The floor: out[i] = table[idx[i]], a warp per row, four rows per step,
 * streaming stores; rows of Q 16-byte words (Q 0: q, a run-time width of at
 * most 32).  Lanes past the row's width idle. */
template <uint32_t Q>
__device__ __forceinline__ void gather_rows(const float4 *__restrict__ table,
                                            const uint32_t *__restrict__ idx, uint64_t n,
                                            uint32_t q, float4 *__restrict__ out)
{
    int lane = threadIdx.x & 31;
    uint64_t warp = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    uint64_t nwarps = ((uint64_t)gridDim.x * blockDim.x) >> 5;
    uint32_t w = Q ? Q : q;
    bool mine = (uint32_t)lane < w;
    for (uint64_t base = warp * 4; base < n; base += nwarps * 4) {
        float4 v[4];
        uint32_t r[4];
#pragma unroll
        for (int u = 0; u < 4; u++)
            r[u] = base + u < n ? idx[base + u] : 0;
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (base + u < n && mine)
                v[u] = __ldcg(table + (uint64_t)r[u] * w + lane);
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (base + u < n && mine)
                __stcs(out + (base + u) * w + lane, v[u]); /* streaming */
    }
}

/* Rows of DIM_GATHER floats (dynamic shared memory, if any, only pads
 * occupancy). */
__global__ void __launch_bounds__(256)
    k_gather(const float *__restrict__ table, const uint32_t *__restrict__ idx, uint64_t n,
             float *__restrict__ out)
{
    gather_rows<DIM_GATHER / 4>((const float4 *)table, idx, n, 0, (float4 *)out);
}

/* Rows of q 16-byte words (q <= 32): the floor of a lookup whose rows are
 * not DIM_GATHER floats (bench-gpu-cache --dtype: stored compact rows). */
__global__ void __launch_bounds__(256)
    k_gather_q(const float4 *__restrict__ table, const uint32_t *__restrict__ idx, uint64_t n,
               uint32_t q, float4 *__restrict__ out)
{
    gather_rows<0>(table, idx, n, q, out);
}

/* n rows of nrows drawn by Zipf(1.05) rank (xorshift64, a fixed seed), each
 * rank mapped to a row by a fixed permutation so that hot rows are spread. */
static inline std::vector<uint32_t> zipf_rows(uint64_t nrows, uint64_t n)
{
    std::vector<double> cdf(nrows);
    double sum = 0;
    for (uint64_t r = 0; r < nrows; r++)
        cdf[r] = (sum += pow((double)(r + 1), -1.05));
    std::vector<uint32_t> rows(n);
    uint64_t s = 0x2545F4914F6CDD1Dull;
    for (uint64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        double u = (double)(s >> 11) / 9007199254740992.0 * sum;
        uint64_t r = std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
        if (r >= nrows)
            r = nrows - 1;
        uint64_t row = (r * 0x9E3779B97F4A7C15ull) % nrows;
        if ((nrows & (nrows - 1)) == 0)
            row = (r * 0x9E3779B97F4A7C15ull) & (nrows - 1); /* odd multiplier: a bijection */
        rows[i] = (uint32_t)row;
    }
    return rows;
}

#endif /* HPS_BENCH_GATHER_CUH */
