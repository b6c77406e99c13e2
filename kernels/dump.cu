/*
 * dump.cu -- copy the keys of a range of sets (refresh: dump, fetch the
 * rows from the lower layers, update).  A thread per slot; survivors are
 * compacted through a device counter, so the order is unspecified.  No lock
 * is taken: under concurrent inserts a moved key may be missed or repeated.
 */
#include "gcache_internal.cuh"

#define DUMP_THREADS 256

__global__ void k_dump(hps_table_ref_t t, uint64_t first, uint64_t last, int64_t *out,
                       uint32_t *count)
{
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t s = first + (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; s < last;
         s += stride) {
        int64_t k = __ldcg(&hps__gcache_key(t, s));
        if (k != HPS_GCACHE_EMPTY_KEY)
            out[atomicAdd(count, 1u)] = k; /* why: compaction across blocks */
    }
}

extern "C" hps_err_t hps_k_dump(const hps_table_ref_t *ref, uint64_t start_set, uint64_t end_set,
                                int64_t *d_keys_out, uint32_t *d_count, cudaStream_t stream)
{
    HPS_CUDA_TRY(cudaMemsetAsync(d_count, 0, sizeof(uint32_t), stream));
    uint64_t first = start_set * HPS_GCACHE_WAYS, last = end_set * HPS_GCACHE_WAYS;
    if (last == first)
        return 0;
    uint64_t blocks = (last - first + DUMP_THREADS - 1) / DUMP_THREADS;
    uint64_t max = (uint64_t)ref->num_sms * 8;
    k_dump<<<(unsigned)(blocks < max ? blocks : max), DUMP_THREADS, 0, stream>>>(
        *ref, first, last, d_keys_out, d_count);
    HPS_CUDA_TRY(cudaGetLastError());
    return 0;
}
