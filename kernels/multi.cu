/*
 * multi.cu -- one lookup kernel over every table of a model
 * (hps_gcache_lookup_tables): a request of T tables costs one launch instead
 * of T, which is what small requests pay for (a launch and its stream
 * serialization cost more than their few probes).
 *
 * A warp per input key: the key's table is found by binary search over the
 * key offsets, then the seqlock read of hps__gcache_read_key copies the row into the
 * table's output region.  No de-duplication (a duplicate re-reads a row from
 * L2).  Per-table counters and LRU clocks are bumped by block 0.
 *
 * The same kernel with the miss split as its tail (hps_gcache_miss_lookup_tables,
 * kernels/miss.h): a missed row gets its table's default value from the warp
 * that missed it, and the last block to finish writes the per-table head and
 * the miss records.  libhps's device-output calls use it, so that a call
 * whose keys all hit pays no second launch (and no memset: the counts and
 * the ticket come zeroed with the request head).
 */
#include <stdlib.h>

#include "gcache_internal.cuh"
#include "miss.cuh"

#define MT_THREADS 256

struct hps_gcache_set {
    hps_table_ref_t *d_refs; /* [num_tables], device */
    uint32_t num_tables;
    int device;
    int num_sms;
};

extern "C" hps_err_t hps_gcache_set_create(hps_gcache_t *const *caches, uint32_t num_tables,
                                           hps_gcache_set_t **ret)
{
    if (!caches || !ret || num_tables == 0)
        return HPS_EINVAL;
    for (uint32_t t = 0; t < num_tables; t++)
        if (!caches[t] || caches[t]->device != caches[0]->device)
            return HPS_EINVAL;
    HPS_CUDA_TRY(cudaSetDevice(caches[0]->device));
    hps_gcache_set_t *s = (hps_gcache_set_t *)calloc(1, sizeof(*s));
    hps_table_ref_t *h = (hps_table_ref_t *)malloc(num_tables * sizeof(*h));
    if (!s || !h) {
        free(s);
        free(h);
        return -ENOMEM;
    }
    for (uint32_t t = 0; t < num_tables; t++)
        h[t] = caches[t]->ref;
    s->num_tables = num_tables;
    s->device = caches[0]->device;
    s->num_sms = caches[0]->ref.num_sms;
    cudaError_t e = cudaMalloc((void **)&s->d_refs, num_tables * sizeof(*h));
    if (e == cudaSuccess)
        e = cudaMemcpy(s->d_refs, h, num_tables * sizeof(*h), cudaMemcpyHostToDevice);
    free(h);
    if (e != cudaSuccess) {
        cudaFree(s->d_refs);
        free(s);
        return hps__gcache_cuda_err(e);
    }
    *ret = s;
    return 0;
}

extern "C" void hps_gcache_set_destroy(hps_gcache_set_t *s)
{
    if (!s)
        return;
    if (cudaSetDevice(s->device) == cudaSuccess)
        cudaDeviceSynchronize();
    cudaFree(s->d_refs);
    (void)cudaGetLastError();
    free(s);
}

/* Table of input position i: the last t with key_off[t] <= i. */
__device__ __forceinline__ uint32_t mt_table(const uint32_t *key_off, uint32_t nt, uint64_t i)
{
    uint32_t lo = 0, hi = nt; /* key_off[lo] <= i < key_off[hi] */
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if (__ldg(&key_off[mid]) <= i)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* The split tail's arguments (unused without it). */
struct mt_split {
    const float *def; /* (nt) each table's default value */
    double threshold;
    uint32_t *ticket, *head;
    hps_gmiss_t *rec;
};

template <bool SPLIT>
__global__ void __launch_bounds__(MT_THREADS)
    k_lookup_tables(const hps_table_ref_t *__restrict__ refs, uint32_t nt,
                    const int64_t *__restrict__ keys, uint64_t n, const uint32_t *key_off,
                    const uint64_t *out_off, float *out, uint32_t *d_missing_index,
                    uint32_t *d_missing_count, mt_split sp)
{
    int lane = threadIdx.x & 31;
    uint64_t warp = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    uint64_t nwarps = ((uint64_t)gridDim.x * blockDim.x) >> 5;
    if (blockIdx.x == 0)
        for (uint32_t t = threadIdx.x; t < nt; t += blockDim.x) {
            atomicAdd((unsigned long long *)refs[t].clock, 1ull); /* why: other streams bump it */
            atomicAdd((unsigned long long *)&refs[t].ctr[HPS_GC_LOOKUPS],
                      (unsigned long long)(key_off[t + 1] - key_off[t]));
        }
    for (uint64_t i = warp; i < n; i += nwarps) {
        uint32_t t = mt_table(key_off, nt, i);
        const hps_table_ref_t &r = refs[t];
        uint64_t j = i - key_off[t];
        float *dst = out + out_off[t] + j * r.dim;
        bool vec4 = r.dim % 4 == 0 && ((uintptr_t)dst & 15) == 0;
        int64_t key = keys[i];
        int64_t slot = -1;
        if (key != HPS_GCACHE_EMPTY_KEY)
            slot = hps__gcache_read_key_any(r, key, dst, lane, vec4);
        if (SPLIT && slot < 0)
            hps__gcache_gm_fill_row(dst, r.dim, __ldg(&sp.def[t]), lane);
        if (lane != 0)
            continue;
        if (slot >= 0) {
            hps__gcache_touch(r, (uint64_t)slot, *(volatile uint64_t *)r.clock + 1);
            atomicAdd((unsigned long long *)&r.ctr[HPS_GC_HITS], 1ull);
        } else {
            d_missing_index[key_off[t] + atomicAdd(&d_missing_count[t], 1u)] = (uint32_t)j;
        }
    }
    if (SPLIT)
        hps__gcache_gm_split_last(nt, key_off, keys, d_missing_index, d_missing_count, sp.threshold,
                                  sp.ticket, sp.head, sp.rec);
}

/* Blocks of a lookup of n keys: a warp per key, at most a full device. */
static unsigned mt_blocks(const hps_gcache_set_t *s, uint64_t n)
{
    uint64_t warps_per_block = MT_THREADS / 32;
    uint64_t blocks = (n + warps_per_block - 1) / warps_per_block;
    uint64_t max = (uint64_t)s->num_sms * (2048 / MT_THREADS);
    return (unsigned)(blocks < 1 ? 1 : blocks > max ? max : blocks);
}

extern "C" hps_err_t hps_gcache_lookup_tables(hps_gcache_set_t *s, const int64_t *d_keys,
                                              uint64_t n, const uint32_t *d_key_off,
                                              const uint64_t *d_out_off, float *d_out,
                                              uint32_t *d_missing_index, uint32_t *d_missing_count,
                                              cudaStream_t stream)
{
    if (!s || !d_key_off || !d_out_off || !d_missing_index || !d_missing_count ||
        (n && (!d_keys || !d_out)) || n > UINT32_MAX)
        return HPS_EINVAL;
    k_lookup_tables<false><<<mt_blocks(s, n), MT_THREADS, 0, stream>>>(
        s->d_refs, s->num_tables, d_keys, n, d_key_off, d_out_off, d_out, d_missing_index,
        d_missing_count, mt_split{});
    HPS_CUDA_TRY(cudaGetLastError());
    return 0;
}

extern "C" hps_err_t hps_gcache_miss_lookup_tables(hps_gcache_set_t *s, const int64_t *d_keys,
                                                   uint64_t n, const uint32_t *d_key_off,
                                                   const uint64_t *d_out_off, const float *d_def,
                                                   double threshold, float *d_out, uint32_t *d_midx,
                                                   uint32_t *d_mcount, uint32_t *d_ticket,
                                                   uint32_t *d_head, hps_gmiss_t *d_rec,
                                                   cudaStream_t stream)
{
    if (!s || !d_key_off || !d_out_off || !d_def || !d_midx || !d_mcount || !d_ticket || !d_head ||
        !d_rec || (n && (!d_keys || !d_out)) || n > UINT32_MAX)
        return HPS_EINVAL;
    mt_split sp = {d_def, threshold, d_ticket, d_head, d_rec};
    k_lookup_tables<true><<<mt_blocks(s, n), MT_THREADS, 0, stream>>>(
        s->d_refs, s->num_tables, d_keys, n, d_key_off, d_out_off, d_out, d_midx, d_mcount, sp);
    HPS_CUDA_TRY(cudaGetLastError());
    return 0;
}

/* Row i of src (dim floats) to out + dst[i]: a warp per row. */
__global__ void k_scatter_rows(const float *__restrict__ src, const uint64_t *__restrict__ dst,
                               uint64_t n, uint32_t dim, float *out)
{
    int lane = threadIdx.x & 31;
    uint64_t warp = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    uint64_t nwarps = ((uint64_t)gridDim.x * blockDim.x) >> 5;
    for (uint64_t i = warp; i < n; i += nwarps) {
        float *d = out + dst[i];
        const float *s = src + i * dim;
        for (uint32_t c = lane; c < dim; c += 32)
            d[c] = s[c];
    }
}

extern "C" hps_err_t hps_gcache_scatter_rows(const float *d_rows, const uint64_t *d_dst, uint64_t n,
                                             uint32_t dim, float *d_out, cudaStream_t stream)
{
    if (n == 0)
        return 0;
    if (!d_rows || !d_dst || !d_out || dim == 0)
        return HPS_EINVAL;
    uint64_t blocks = (n + MT_THREADS / 32 - 1) / (MT_THREADS / 32);
    blocks = blocks > 4096 ? 4096 : blocks;
    k_scatter_rows<<<(unsigned)blocks, MT_THREADS, 0, stream>>>(d_rows, d_dst, n, dim, d_out);
    HPS_CUDA_TRY(cudaGetLastError());
    return 0;
}
