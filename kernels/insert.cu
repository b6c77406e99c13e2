/*
 * insert.cu -- insert (replace) and update-existing-only of the GPU cache.
 *
 * A warp per key.  Lane 0 locks the key's set: atomicCAS of the version word
 * from an even v to v + 1 (odd = locked, and readers retry), with nanosleep
 * backoff while another writer holds it.  Inside the lock the warp probes
 * (lane w reads way w):
 *   - key present: overwrite its row (LRU: stamp = now; LFU: keep the count);
 *   - else, update-only: nothing;
 *   - else a free way (lowest): take it;
 *   - else evict the way with the smallest stamp (warp min-reduction, lowest
 *     way on ties): LRU = least recently used, LFU = least frequently used.
 * The row, key and stamp are written, a release fence orders them before the
 * unlock store of v + 2.  Readers that overlapped see the version change.
 * Duplicate keys in one call serialize on the set lock; the last wins.
 * Each block counts itself in the writer epoch (hps__gcache_writer_begin / end).
 * Rows arrive in the cache's storage type, encoded by the caller
 * (hps_dtype_encode's packed layout): the kernel copies bytes and never
 * converts, so a slot holds exactly the bytes the volatile DB holds.
 */
#include "gcache_internal.cuh"

#define INS_THREADS 256

/* Lock the set (lane 0 spins, the warp gets the result); false when the set
 * stayed locked for HPS_GC_WRITE_SPINS tries (a killed writer's lock). */
__device__ static bool ins_lock(const hps_table_ref_t &t, uint64_t set, int lane, uint32_t *ret_v)
{
    uint32_t v = 0;
    int ok = 0;
    if (lane == 0) {
        unsigned ns = 32;
        for (uint32_t i = 0; i < HPS_GC_WRITE_SPINS; i++) {
            v = hps__gcache_ld_ver(&t.ver[set]);
            /* why: even -> odd claims the set for this writer alone */
            if (!(v & 1u) && atomicCAS(&t.ver[set], v, v + 1) == v) {
                ok = 1;
                break;
            }
            __nanosleep(ns);
            if (ns < 1024)
                ns *= 2;
        }
    }
    *ret_v = __shfl_sync(0xffffffffu, v, 0);
    ok = __shfl_sync(0xffffffffu, ok, 0);
    hps__gcache_fence(); /* why: probe and writes happen after the lock is taken */
    return ok;
}

__device__ static void ins_unlock(const hps_table_ref_t &t, uint64_t set, uint32_t v, int lane)
{
    __syncwarp();
    hps__gcache_fence(); /* why: key, row and stamp are visible before the version is even again */
    if (lane == 0)
        atomicExch(&t.ver[set], v + 2);
}

/* Lane of the smallest stamp (ties: lowest lane), same result in all lanes. */
__device__ static int ins_victim(uint64_t stamp, int lane)
{
    int best = lane;
    for (int off = 16; off > 0; off >>= 1) {
        uint64_t s2 = __shfl_xor_sync(0xffffffffu, stamp, off);
        int b2 = __shfl_xor_sync(0xffffffffu, best, off);
        if (s2 < stamp || (s2 == stamp && b2 < best)) {
            stamp = s2;
            best = b2;
        }
    }
    return best;
}

/* Copy rb bytes from src to dst with the lanes of a warp, in units of
 * `unit` bytes (16, 4, 2 or 1: what both addresses and rb allow). */
__device__ static void ins_copy(char *dst, const char *src, uint32_t rb, uint32_t unit, int lane)
{
    switch (unit) {
    case 16:
        for (uint32_t c = lane; c < rb / 16; c += 32)
            ((float4 *)dst)[c] = __ldg((const float4 *)src + c);
        break;
    case 4:
        for (uint32_t c = lane; c < rb / 4; c += 32)
            ((uint32_t *)dst)[c] = __ldg((const uint32_t *)src + c);
        break;
    case 2:
        for (uint32_t c = lane; c < rb / 2; c += 32)
            ((uint16_t *)dst)[c] = __ldg((const unsigned short *)src + c);
        break;
    default:
        for (uint32_t c = lane; c < rb; c += 32)
            dst[c] = src[c];
    }
}

__global__ void __launch_bounds__(INS_THREADS)
    k_insert(hps_table_ref_t t, const int64_t *__restrict__ keys, const char *__restrict__ vals,
             uint64_t n, int update_only, uint32_t rb, uint32_t unit)
{
    int lane = threadIdx.x & 31;
    uint64_t warp = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    uint64_t nwarps = ((uint64_t)gridDim.x * blockDim.x) >> 5;
    uint64_t now = *(volatile uint64_t *)t.clock; /* lookups stamp clock + 1 */
    uint64_t written = 0, evicted = 0, timeouts = 0;
    hps__gcache_writer_begin(t);
    for (uint64_t i = warp; i < n; i += nwarps) {
        int64_t key = keys[i];
        if (key == HPS_GCACHE_EMPTY_KEY)
            continue;
        uint64_t set = hps__gcache_set_of(t, key);
        uint32_t v;
        if (!ins_lock(t, set, lane, &v)) {
            timeouts += lane == 0;
            continue;
        }
        uint64_t base = set * HPS_GCACHE_WAYS;
        int64_t k = *(volatile int64_t *)&hps__gcache_key(t, base + lane);
        unsigned m = __ballot_sync(0xffffffffu, k == key);
        int way = -1;
        bool fresh = false, evict = false;
        if (m) {
            way = __ffs(m) - 1;
        } else if (!update_only) {
            unsigned e = __ballot_sync(0xffffffffu, k == HPS_GCACHE_EMPTY_KEY);
            fresh = true;
            if (e) {
                way = __ffs(e) - 1;
            } else {
                way = ins_victim(*(volatile uint64_t *)&hps__gcache_stamp(t, base + lane), lane);
                evict = true;
            }
        }
        if (way >= 0) {
            uint64_t slot = base + (uint64_t)way;
            ins_copy((char *)(t.vals + slot * t.rwords), vals + i * rb, rb, unit, lane);
            if (lane == 0) {
                hps__gcache_key(t, slot) = key;
                t.tags[slot] = hps__gcache_tag(key);
                if (t.policy == HPS_GCACHE_LRU)
                    hps__gcache_stamp(t, slot) = now;
                else if (fresh)
                    hps__gcache_stamp(t, slot) = 1;
                written++;
                evicted += evict;
            }
        }
        ins_unlock(t, set, v, lane);
    }
    hps__gcache_block_add(&t.ctr[update_only ? HPS_GC_UPDATES : HPS_GC_INSERTS], written);
    hps__gcache_block_add(&t.ctr[HPS_GC_EVICTIONS], evicted);
    hps__gcache_block_add(&t.ctr[HPS_GC_LOCK_TIMEOUTS], timeouts);
    hps__gcache_writer_end(t);
}

extern "C" hps_err_t hps_k_insert(const hps_table_ref_t *ref, const int64_t *d_keys,
                                  const void *d_values, uint64_t n, int update_only,
                                  cudaStream_t stream)
{
    uint32_t rb = (uint32_t)hps_dtype_row_bytes((hps_dtype_t)ref->dtype, ref->dim);
    uintptr_t a = (uintptr_t)d_values;
    /* slot rows are 16-byte aligned when rwords is a multiple of 4, else 4 */
    uint32_t unit = rb % 16 == 0 && a % 16 == 0 && ref->rwords % 4 == 0 ? 16
                    : rb % 4 == 0 && a % 4 == 0                         ? 4
                    : rb % 2 == 0 && a % 2 == 0                         ? 2
                                                                        : 1;
    uint64_t blocks = (n + INS_THREADS / 32 - 1) / (INS_THREADS / 32);
    uint64_t max = (uint64_t)ref->num_sms * (2048 / INS_THREADS);
    if (blocks > max)
        blocks = max;
    k_insert<<<(unsigned)blocks, INS_THREADS, 0, stream>>>(*ref, d_keys, (const char *)d_values, n,
                                                           update_only, rb, unit);
    HPS_CUDA_TRY(cudaGetLastError());
    return 0;
}
