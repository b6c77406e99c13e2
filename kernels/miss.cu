/*
 * miss.cu -- the misses of a device-output lookup, split on the device
 * (kernels/miss.h): one launch after the caches' lookup kernels.
 *
 * A block per table (grid-stride over tables).  The block first sums the
 * miss counts of the tables before its own (a block reduction: T is small,
 * and every block doing it costs less than a second launch for a scan),
 * which gives the table's first record.  Then its threads copy each miss's
 * key and position into the records (one miss per thread), and, when the
 * table is answered with its default value, its warps write that value into
 * the missed rows of the output (one row per warp, float4 stores where the
 * row allows).  The host then copies back the per-table head and the
 * records only: a few kilobytes instead of every key and position.
 */
#include <stdint.h>

#include "gcache_internal.cuh"
#include "miss.cuh"

#define GM_THREADS 256
#define GM_WARPS   (GM_THREADS / 32)
#define GM_BLOCKS  1024 /* at most; one table per block is the usual shape */

/* Sum of v over the block (every thread gets it); part: GM_WARPS words of
 * shared memory, free again when this returns. */
__device__ __forceinline__ uint32_t gm_block_sum(uint32_t v, uint32_t *part)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = v;
    __syncthreads();
    uint32_t s = 0;
    for (int w = 0; w < GM_WARPS; w++)
        s += part[w];
    __syncthreads(); /* why: part is rewritten by the next call */
    return s;
}

__global__ void __launch_bounds__(GM_THREADS)
    k_gmiss_gather(uint32_t nt, const uint32_t *__restrict__ key_off,
                   const uint64_t *__restrict__ out_off, const uint32_t *__restrict__ dims,
                   const float *__restrict__ defs, double threshold,
                   const int64_t *__restrict__ keys, const uint32_t *__restrict__ midx,
                   const uint32_t *__restrict__ mcount, float *out, uint32_t *head,
                   hps_gmiss_t *rec)
{
    __shared__ uint32_t part[GM_WARPS];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (uint32_t t = blockIdx.x; t < nt; t += gridDim.x) {
        uint32_t s = 0;
        for (uint32_t u = threadIdx.x; u < t; u += GM_THREADS)
            s += hps__gcache_gm_count(key_off, mcount, u);
        uint32_t base = gm_block_sum(s, part);
        uint32_t k0 = key_off[t], n = key_off[t + 1] - k0;
        uint32_t mc = hps__gcache_gm_count(key_off, mcount, t);
        bool sync = hps__gcache_gm_sync(mc, n, threshold);
        hps__gcache_gm_records(nt, t, k0, mc, sync, base, keys, midx, head, rec);
        if (sync)
            continue;
        float v = defs[t];
        uint32_t dim = dims[t];
        float *o = out + out_off[t];
        for (uint32_t j = warp; j < mc; j += GM_WARPS)
            hps__gcache_gm_fill_row(o + (uint64_t)midx[k0 + j] * dim, dim, v, lane);
    }
}

extern "C" hps_err_t
hps_gcache_miss_gather(uint32_t nt, const uint32_t *d_key_off, const uint64_t *d_out_off,
                       const uint32_t *d_dim, const float *d_def, double threshold,
                       const int64_t *d_keys, const uint32_t *d_midx, const uint32_t *d_mcount,
                       float *d_out, uint32_t *d_head, hps_gmiss_t *d_rec, cudaStream_t stream)
{
    if (nt == 0 || !d_key_off || !d_out_off || !d_dim || !d_def || !d_keys || !d_midx ||
        !d_mcount || !d_out || !d_head || !d_rec)
        return HPS_EINVAL;
    unsigned blocks = nt < GM_BLOCKS ? nt : GM_BLOCKS;
    k_gmiss_gather<<<blocks, GM_THREADS, 0, stream>>>(nt, d_key_off, d_out_off, d_dim, d_def,
                                                      threshold, d_keys, d_midx, d_mcount, d_out,
                                                      d_head, d_rec);
    HPS_CUDA_TRY(cudaGetLastError());
    return 0;
}
