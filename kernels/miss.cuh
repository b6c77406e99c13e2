/*
 * miss.cuh -- device helpers of the device-side miss split (kernels/miss.h),
 * shared by its two forms: the kernel of its own that runs after the
 * caches' lookups (miss.cu: hps_gcache_miss_gather, a block per table), and the
 * tail of the one-launch lookup over every table (multi.cu:
 * hps_gcache_miss_lookup_tables), where the last block to finish splits the
 * misses, so that a call pays no launch of its own for them.
 */
#ifndef HPS_KERNELS_MISS_CUH
#define HPS_KERNELS_MISS_CUH

#include <stdint.h>

#include "miss.h"

/* Misses of table t: 0 for a table without keys (its count is not written
 * by the per-table lookups).  Read through L2 (__ldcg): in the one-launch
 * form the counts were bumped by other blocks of the same grid. */
__device__ __forceinline__ uint32_t hps__gcache_gm_count(const uint32_t *key_off,
                                                         const uint32_t *mcount, uint32_t t)
{
    return key_off[t + 1] > key_off[t] ? __ldcg(&mcount[t]) : 0u;
}

/* Whether table t's m misses of n keys are fetched now: HugeCTR's rule,
 * the host's expression in IEEE double (no contraction possible). */
__device__ __forceinline__ bool hps__gcache_gm_sync(uint32_t m, uint32_t n, double threshold)
{
    return m && 1.0 - (double)m / (double)n < threshold;
}

/* The default value v into row d (dim floats): the lanes of one warp. */
__device__ __forceinline__ void hps__gcache_gm_fill_row(float *d, uint32_t dim, float v, int lane)
{
    if ((dim & 3u) == 0 && ((uintptr_t)d & 15u) == 0) {
        float4 v4 = make_float4(v, v, v, v);
        for (uint32_t c = lane; c < dim / 4; c += 32)
            ((float4 *)d)[c] = v4;
    } else {
        for (uint32_t c = lane; c < dim; c += 32)
            d[c] = v;
    }
}

/*
 * The records of table t's m misses (key and position, in midx's order) at
 * rec[base ..], and its head entries (count, flags): the threads of one
 * block.  midx is read through L2, for the same reason as the counts.
 */
__device__ __forceinline__ void hps__gcache_gm_records(uint32_t nt, uint32_t t, uint32_t k0,
                                                       uint32_t m, bool sync, uint32_t base,
                                                       const int64_t *__restrict__ keys,
                                                       const uint32_t *midx, uint32_t *head,
                                                       hps_gmiss_t *rec)
{
    if (threadIdx.x == 0) {
        head[t] = m;
        head[nt + t] = sync ? HPS_GMISS_SYNC : 0u;
    }
    for (uint32_t j = threadIdx.x; j < m; j += blockDim.x) {
        uint32_t p = __ldcg(&midx[k0 + j]);
        hps_gmiss_t r = {keys[k0 + p], p, 0u};
        rec[base + j] = r;
    }
}

/*
 * The tail of a one-launch lookup: every block calls it once, after its
 * last key, with every thread; the last block to arrive (by *ticket, which
 * must be 0 at the launch) writes the head and the records of every table.
 * The missed rows were already given the table's default value by the
 * lookup (a synchronous table's are overwritten by the fetched rows
 * afterwards), so nothing here depends on the size of a row.
 *
 * The tables are taken blockDim.x at a time, a thread per table: their
 * counts are read at once and their first records come from a block-wide
 * scan, so a call whose keys all hit costs a few dependent reads, not a
 * round of them per table.  Only tables with misses then take the block
 * for their records.
 *
 * Ordering: each thread's writes (midx, the counts' atomics) are fenced at
 * device scope before the block's barrier and the ticket; the last block
 * fences again before it reads them (the classic last-block pattern).
 * Needs blockDim.x a multiple of 32, at most 1024.
 */
__device__ __forceinline__ void
hps__gcache_gm_split_last(uint32_t nt, const uint32_t *key_off, const int64_t *__restrict__ keys,
                          const uint32_t *midx, const uint32_t *mcount, double threshold,
                          uint32_t *ticket, uint32_t *head, hps_gmiss_t *rec)
{
    __shared__ bool last;
    __shared__ uint32_t wsum[32], s_base[1024], s_m[1024];
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    uint32_t carry = 0;
    for (uint32_t c0 = 0; c0 < nt; c0 += blockDim.x) {
        uint32_t t = c0 + threadIdx.x, m = 0, n = 0;
        if (t < nt) {
            n = key_off[t + 1] - key_off[t];
            m = n ? __ldcg(&mcount[t]) : 0u;
        }
        uint32_t x = m; /* inclusive scan of m over the block */
        for (int o = 1; o < 32; o <<= 1) {
            uint32_t y = __shfl_up_sync(0xffffffffu, x, o);
            x += lane >= o ? y : 0u;
        }
        if (lane == 31)
            wsum[warp] = x;
        __syncthreads();
        uint32_t before = carry, total = carry;
        for (int w = 0; w < nw; w++) {
            before += w < warp ? wsum[w] : 0u;
            total += wsum[w];
        }
        s_base[threadIdx.x] = before + x - m;
        s_m[threadIdx.x] = m;
        if (t < nt) {
            head[t] = m;
            head[nt + t] = hps__gcache_gm_sync(m, n, threshold) ? HPS_GMISS_SYNC : 0u;
        }
        __syncthreads();
        for (uint32_t i = 0; i < blockDim.x && c0 + i < nt; i++) {
            uint32_t mi = s_m[i], k0;
            if (mi == 0)
                continue;
            k0 = key_off[c0 + i];
            for (uint32_t j = threadIdx.x; j < mi; j += blockDim.x) {
                uint32_t p = __ldcg(&midx[k0 + j]);
                hps_gmiss_t r = {keys[k0 + p], p, 0u};
                rec[s_base[i] + j] = r;
            }
        }
        carry = total;
        __syncthreads(); /* why: wsum, s_base and s_m are rewritten by the next round */
    }
}

#endif
