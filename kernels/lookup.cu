/*
 * lookup.cu -- the lookup operation of the GPU embedding cache.
 *
 * Small batches (n <= HPS_GCACHE_FUSED_MAX): hps_k_lookup_fused, one kernel,
 * a warp per input key: seqlock read of the key's set (probe with one lane
 * per way, copy the row straight into the output, validate the version).
 * Duplicates are simply probed again: at this size one launch costs more
 * than the probes.
 *
 * Large batches: k_lookup_block (BLOCK, described at the kernel) where the
 * output rows are vectorizable, else (GLOBAL) two kernels.
 *  1. hps_k_dedup_probe: a thread per key inserts the key into the
 *     workspace's open-addressing table (linear probing, capacity >= 2 n, so
 *     probes are short) and remembers the entry in inv[i].  The thread whose
 *     atomicCAS claimed the entry is the key's representative: the warp then
 *     probes the cache once per representative (ballot loop), touches the LRU
 *     / LFU stamp once per unique key, and stores (set version << 32 | slot)
 *     or MISS in the entry.  The version is read before the probe.
 *  2. hps_k_scatter: a warp per input key (four keys per step, loads issued
 *     before stores) reads its entry, copies the row from the cache into the
 *     output and re-reads the set version after a fence.  An unchanged even
 *     version proves that no writer touched the set between the probe in (1)
 *     and the copy, so the row is the key's and whole.  A changed version
 *     (a concurrent insert) falls back to the full seqlock read.  The warp
 *     also frees the table entry (keys only), leaving the table empty for
 *     the next call on the workspace.
 * No unique rows are materialized: the bytes moved are those of an ideal
 * gather plus about 20 bytes of index per key, mostly from L2.
 *
 * Misses: positions go to d_missing_index through an atomic counter in the
 * workspace; the last block to finish (ticket counter) publishes the count
 * and resets both words, so no memset is enqueued per call.
 */
#include "gcache_internal.cuh"

#define LK_THREADS 256
#define LK_UNROLL  4
/* 3 x 256 threads per SM: 24 warps, each with LK_UNROLL rows in flight. */
#define LK_MIN_BLOCKS 3

/* End of a lookup kernel: count hits, publish the miss count (last block).
 * One global atomic per block: its hits ride in the upper bits of the
 * ticket (blocks < 2^20), and the last block adds the total to the cache's
 * counter.  Same-address atomics serialize, and small batches launch
 * hundreds of blocks. */
#define LK_TICKET_BITS 20
__device__ static void lk_finish(const hps_table_ref_t &t, const hps_ws_ref_t &w, uint64_t hits,
                                 uint32_t *d_missing_count)
{
    uint64_t s_hits = hps__gcache_block_sum(hits);
    if (threadIdx.x != 0)
        return;
    __threadfence(); /* why: this block's miss-counter atomics precede its ticket */
    unsigned long long *tk = (unsigned long long *)&w.miss_ctr[2];
    unsigned long long old = atomicAdd(tk, (s_hits << LK_TICKET_BITS) | 1ull);
    if ((old & ((1ull << LK_TICKET_BITS) - 1)) == gridDim.x - 1) {
        uint32_t misses = atomicExch(&w.miss_ctr[0], 0u); /* why: read and reset in one step */
        if (d_missing_count)
            *d_missing_count = misses;
        uint64_t total = (old >> LK_TICKET_BITS) + s_hits;
        atomicExch(tk, 0ull);
        if (total)
            atomicAdd((unsigned long long *)&t.ctr[HPS_GC_HITS], (unsigned long long)total);
    }
}

/* Start of a lookup kernel: read the clock, count the lookups, bump the clock. */
__device__ static uint64_t lk_start(const hps_table_ref_t &t, uint64_t n)
{
    uint64_t now = *(volatile uint64_t *)t.clock;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        atomicAdd((unsigned long long *)t.clock, 1ull); /* why: other streams bump it too */
        atomicAdd((unsigned long long *)&t.ctr[HPS_GC_LOOKUPS], (unsigned long long)n);
    }
    return now + 1;
}

/* The slow path of the vectorized kernels (out of line costs more: the
 * call ABI spills the loop's registers). */
template <int DT>
__device__ __forceinline__ int64_t lk_slow_read(const hps_table_ref_t &t, int64_t key, float *dst,
                                                int lane)
{
    return hps__gcache_read_key<DT>(t, key, dst, lane, true);
}

/* Lane 0 records the outcome of input key i. */
__device__ __forceinline__ void lk_outcome(const hps_ws_ref_t &w, uint64_t i, bool hit,
                                           uint8_t *d_hit_mask, uint32_t *d_missing_index)
{
    if (d_hit_mask)
        d_hit_mask[i] = hit;
    if (!hit && d_missing_index)
        d_missing_index[atomicAdd(&w.miss_ctr[0], 1u)] = (uint32_t)i;
}

template <int DT>
__global__ void k_lookup_fused(hps_table_ref_t t, hps_ws_ref_t w, const int64_t *__restrict__ keys,
                               uint64_t n, float *out, uint8_t *d_hit_mask,
                               uint32_t *d_missing_index, uint32_t *d_missing_count, bool vec4)
{
    int lane = threadIdx.x & 31;
    uint64_t warp = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    uint64_t nwarps = ((uint64_t)gridDim.x * blockDim.x) >> 5;
    uint64_t now = lk_start(t, n);
    uint64_t hits = 0;
    for (uint64_t i = warp; i < n; i += nwarps) {
        int64_t key = keys[i];
        int64_t slot = -1;
        if (key != HPS_GCACHE_EMPTY_KEY)
            slot = hps__gcache_read_key<DT>(t, key, out + i * t.dim, lane, vec4);
        if (lane == 0) {
            if (slot >= 0) {
                hps__gcache_touch(t, (uint64_t)slot, now);
                hits++;
            }
            lk_outcome(w, i, slot >= 0, d_hit_mask, d_missing_index);
        }
    }
    lk_finish(t, w, hits, d_missing_count);
}

/*
 * Fused, vectorized (dim % 4 == 0, dim <= 128, aligned output): a warp takes
 * LK_UNROLL keys per step and keeps their version loads, probes and row
 * loads in flight together.  Validation per key as in hps__gcache_read_key, which
 * also serves as the slow path.  Ordering: STRICT uses fence.acq_rel between
 * the phases (the PTX memory model's formal seqlock); otherwise each later
 * load's address depends on the earlier loaded value (hps__gcache_dep), which
 * orders the loads without a fence waiting for this warp's earlier stores.
 * Lane u (< LK_UNROLL) owns key u's stamp and outcome.
 */
template <int DT, bool STRICT>
__global__ void __launch_bounds__(LK_THREADS, LK_MIN_BLOCKS)
    k_lookup_fused_vec(hps_table_ref_t t, hps_ws_ref_t w, const int64_t *__restrict__ keys,
                       uint64_t n, float *out, uint8_t *d_hit_mask, uint32_t *d_missing_index,
                       uint32_t *d_missing_count, uint32_t zero)
{
    int lane = threadIdx.x & 31;
    uint64_t warp = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    uint64_t nwarps = ((uint64_t)gridDim.x * blockDim.x) >> 5;
    bool mine = (uint32_t)lane < t.dim / 4;
    hps__gcache_pdl_trigger(); /* as in k_lookup_block */
    uint64_t now = lk_start(t, n);
    uint64_t hits = 0;
    int64_t next[LK_UNROLL]; /* keys of the warp's next step, loaded one step ahead */
#pragma unroll
    for (int u = 0; u < LK_UNROLL; u++)
        next[u] = warp * LK_UNROLL + u < n ? keys[warp * LK_UNROLL + u] : HPS_GCACHE_EMPTY_KEY;
    for (uint64_t base = warp * LK_UNROLL; base < n; base += nwarps * LK_UNROLL) {
        int64_t key[LK_UNROLL];
        uint64_t set[LK_UNROLL];
        uint32_t v1[LK_UNROLL];
        int way[LK_UNROLL];
        float4 v[LK_UNROLL];
        uint64_t nb = base + nwarps * LK_UNROLL;
#pragma unroll
        for (int u = 0; u < LK_UNROLL; u++) {
            key[u] = next[u];
            next[u] = nb + u < n ? keys[nb + u] : HPS_GCACHE_EMPTY_KEY;
        }
#pragma unroll
        for (int u = 0; u < LK_UNROLL; u++) {
            set[u] = hps__gcache_set_of(t, key[u]);
            v1[u] = key[u] != HPS_GCACHE_EMPTY_KEY ? hps__gcache_ld_ver(&t.ver[set[u]]) : 0;
        }
        if (STRICT)
            hps__gcache_fence(); /* why: probes and row loads must not pass the version loads */
#pragma unroll
        for (int u = 0; u < LK_UNROLL; u++) {
            int64_t k =
                key[u] != HPS_GCACHE_EMPTY_KEY
                    ? __ldcg(&hps__gcache_key(t, set[u] * HPS_GCACHE_WAYS + lane +
                                                     (STRICT ? 0 : hps__gcache_dep(v1[u], zero))))
                    : HPS_GCACHE_EMPTY_KEY;
            unsigned m = __ballot_sync(0xffffffffu, k == key[u] && k != HPS_GCACHE_EMPTY_KEY);
            way[u] = m ? __ffs(m) - 1 : -1;
        }
        uint64_t pre_slot = UINT64_MAX; /* lane u: slot of key u, its stamp prefetched */
        uint64_t pre_stamp = 0;
#pragma unroll
        for (int u = 0; u < LK_UNROLL; u++) {
            uint64_t slot = set[u] * HPS_GCACHE_WAYS + (uint64_t)way[u];
            if (way[u] >= 0 && mine)
                v[u] = hps__gcache_codec<DT>::chunk(hps__gcache_row(t, slot), lane, 0);
            if (lane == u && way[u] >= 0)
                pre_slot = slot;
        }
        if (pre_slot != UINT64_MAX && t.policy == HPS_GCACHE_LRU)
            pre_stamp = __ldcg(&hps__gcache_stamp(t, pre_slot));
        if (STRICT)
            hps__gcache_fence(); /* why: the row loads must complete before the versions are re-read
                                  */
        hps__gcache_pdl_wait();  /* why: outputs and workspace after the previous kernel on the
                                    stream */
        int my_hit = 0;
        uint64_t my_slot = 0;
#pragma unroll
        for (int u = 0; u < LK_UNROLL; u++) {
            uint64_t i = base + u;
            if (i >= n)
                break;
            int64_t slot = -1;
            if (key[u] != HPS_GCACHE_EMPTY_KEY) {
                uint32_t d = mine && !STRICT ? __float_as_uint(v[u].x) : 0u;
                uint32_t v2 = hps__gcache_ld_ver(&t.ver[set[u] + hps__gcache_dep(d, zero)]);
                bool same = __all_sync(0xffffffffu, v2 == v1[u]);
                if ((v1[u] & 1u) || !same) { /* a writer overlapped: full seqlock read */
                    slot = lk_slow_read<DT>(t, key[u], out + i * t.dim, lane);
                } else if (way[u] >= 0) {
                    slot = (int64_t)(set[u] * HPS_GCACHE_WAYS + way[u]);
                    if (mine)
                        __stcs((float4 *)(out + i * t.dim) + lane,
                               v[u]); /* streaming: keep L2 for hot rows */
                }
            }
            if (lane == u) {
                my_hit = slot >= 0;
                my_slot = (uint64_t)slot;
                lk_outcome(w, i, slot >= 0, d_hit_mask, d_missing_index);
            }
        }
        if (my_hit) { /* lanes 0..LK_UNROLL-1: one stamp each, loaded in parallel above */
            if (my_slot == pre_slot)
                hps__gcache_touch_seen(t, my_slot, now, pre_stamp);
            else
                hps__gcache_touch(t, my_slot, now);
            hits++;
        }
    }
    hps__gcache_pdl_wait(); /* why: warps without keys, before the workspace's ticket */
    lk_finish(t, w, hits, d_missing_count);
}

/*
 * Block-deduplicated lookup (dim % 4 == 0, dim <= 128, aligned output): the
 * default path for large batches.  Zipf-like batches repeat a few keys very
 * often; probing per occurrence (fused) sends every repeat to the same few
 * L2 lines (version word, key slab, stamp), and a global de-duplication
 * costs a second launch and global atomics.  Here each block (NT threads,
 * 256 or 512) takes one chunk of up to BK_CHUNK consecutive keys and:
 *   1. inserts them into a shared-memory hash table (atomicCAS on shared);
 *      the first inserter of a key appends its entry to the unique list;
 *   2. a thread per unique key probes by tag bytes (bk_probe) and records
 *      (version << 32 | slot).  It reads the set version first (waiting
 *      while odd), except in EPOCH chunks that started with no writer in
 *      flight.  EPOCH: it touches the LRU/LFU stamp, which arrives in the
 *      record of the key check;
 *   3. a warp per position copies the row (4 or 8 positions in flight per
 *      warp);
 *   4. after a barrier: EPOCH, if no writer block ran since the chunk
 *      started (the writer epoch, hps__gcache_writer_begin), every copy was whole
 *      and nothing is re-read; if one did and step 2 read no versions,
 *      every hit entry is marked RETRY.  Otherwise a thread per unique key
 *      re-reads the version: unchanged means every copy of that key's row
 *      in (3) was whole and the key's (seqlock), and (not EPOCH) it
 *      touches the stamp, where its load overlaps the version's; a changed
 *      version marks the entry RETRY, and
 *   5. the positions of RETRY entries are read again with the full
 *      seqlock read;
 *   6. outcomes (hit mask, miss list) are recorded.
 * Metadata traffic is then per unique key per chunk, row traffic per
 * occurrence, as in an ideal gather.
 *
 * Overlap (programmatic dependent launch, sm_90+, hps_gcache_set_overlap):
 * steps 1-2 read only the keys and the cache, and write only shared memory
 * and stamps, so they may run while the previous kernel on the stream is
 * still copying; the block waits for that kernel (hps__gcache_pdl_wait) before
 * step 3.  Every block triggers its dependents at its start, so the next
 * call's blocks fill the SMs as this call's blocks leave them.  Hence one
 * chunk per block and as many blocks as chunks (several waves above 4
 * chunks per SM): the blocks of the last wave and of the next call
 * interleave their probes with other blocks' copies.
 */
#define BK_CHUNK 1024
#define BK_TAB   2048
#define BK_NONE  0xffffu
#define BK_RETRY (UINT64_MAX - 1)
/* Up to this many keys per call the rows are loaded with an L2 evict-first
 * policy, so that the sets' tags, keys and versions, which the next calls
 * probe again, stay in L2, and the per-set re-read (not EPOCH) is kept.
 * H200, bench-gpu-cache: 16K keys 1,204 -> 1,306 M keys/s with evict-first
 * rows; at 256K and 1M it cost 4-5% (hot rows are re-read from L2 there),
 * and an explicit evict-normal policy was slower than a plain load. */
#define BK_SMALL_BATCH 65536
/* (rows_evict_first is a kernel argument although it always equals !EPOCH:
 * as a compile-time choice the small kernel took 56 registers instead of
 * 48 and measured 2,081-2,084 M keys/s at 16K against 2,134-2,139.) */
/* Rows in flight per warp in step 3 above BK_SMALL_BATCH keys (with the
 * slot held in 32 bits, 64 registers, no spills).  H200, bench-gpu-cache,
 * alternating: 256K 4,278-4,279 M keys/s against 4,228-4,229 with 4, 1M
 * 4,461-4,462 against 4,444-4,446; 6 rows measured as 4.  Small batches
 * keep 4 (16K: 2,128-2,134 against 2,037-2,038 with 8). */
#define BK_UNROLL_LARGE 8

/* Step 2 for one unique key: (set version << 32 | slot), or HPS_RES_MISS.
 * The tag bytes are only a hint, loaded at once; the key check (and later
 * the row) cannot pass what orders it, and a stale hint can only cause a
 * false miss, so a miss is confirmed by the ordered probe.
 * With ver (always unless EPOCH): the set version is read first (waiting
 * while odd; a stuck lock of a killed writer answers miss), its load
 * address-dependent on the chunk's writer epoch e0, and the key check
 * address-dependent on it.  EPOCH kernels read no version (0 in the
 * result) when no writer was in flight as the chunk started: the key check
 * depends on e0 itself, and step 4 validates the whole chunk by the epoch.
 * (With a writer in flight, such as a killed one that left a set locked,
 * they read versions: a locked set must answer miss before its row is
 * copied, since a miss leaves the output row untouched.)
 * EPOCH: the slot's LRU / LFU stamp is touched here: it arrives in the
 * record of the key check. */
template <bool EPOCH>
__device__ __forceinline__ uint64_t bk_probe(const hps_table_ref_t &t, int64_t key, uint64_t e0,
                                             bool ver, uint64_t now, uint32_t zero)
{
    uint64_t set = hps__gcache_set_of(t, key);
    uint32_t v = 0;
    const uint4 *tp = (const uint4 *)(t.tags + set * HPS_GCACHE_WAYS);
    uint4 ta = __ldcg(tp), tb = __ldcg(tp + 1);
    int way = -1;
    uint64_t seen = 0; /* the slot's stamp, from the record of the key check */
    if (!ver || hps__gcache_wait_even(&t.ver[set + hps__gcache_dep((uint32_t)e0, zero)], &v)) {
        uint64_t dep = hps__gcache_dep(ver ? v : (uint32_t)e0, zero);
        way = hps__gcache_match_rec(t, set, key, hps__gcache_tag_mask(key, ta, tb), dep, &seen);
        if (way < 0) {
            way = hps__gcache_probe_tagged(t, set, key, dep);
            seen = 0; /* rare (a stale hint): LRU stores the clock */
        }
    }
    if (way < 0)
        return HPS_RES_MISS;
    uint64_t slot = set * HPS_GCACHE_WAYS + (uint64_t)way;
    if (EPOCH) /* a slot that a writer then replaces is marked used: benign */
        hps__gcache_touch_seen(t, slot, now, seen);
    return (uint64_t)v << 32 | slot;
}

template <int DT, int NT, bool EPOCH>
__global__ void __launch_bounds__(NT, 1024 / NT)
    k_lookup_block(hps_table_ref_t t, hps_ws_ref_t w, const int64_t *__restrict__ keys, uint64_t n,
                   uint32_t chunk, int rows_evict_first, float *out, uint8_t *d_hit_mask,
                   uint32_t *d_missing_index, uint32_t *d_missing_count, uint32_t zero)
{
    __shared__ int64_t skey[BK_TAB];
    __shared__ uint64_t sres[BK_TAB];
    __shared__ uint16_t spos[BK_CHUNK];
    __shared__ uint16_t uent[BK_CHUNK];
    __shared__ uint8_t shit[BK_CHUNK];
    __shared__ unsigned ucount, retry, quiet;
    __shared__ unsigned sver; /* step 2 reads set versions (see bk_probe) */
    __shared__ uint64_t se0;  /* ctr[HPS_GC_WR_ENDED] at the chunk's start */
    int tid = threadIdx.x, lane = tid & 31, wib = tid >> 5;
    uint64_t pol_first = hps__gcache_pol_evict_first();
    /* why so early: the next call's blocks start only where this call's
     * have left room on an SM, and wait (step 3) before they write */
    hps__gcache_pdl_trigger();
    uint64_t now = lk_start(t, n);
    uint64_t hits = 0;
    uint32_t tmask = BK_TAB - 1; /* a table of >= 2 chunk entries: less to initialize */
    while (tmask > 63 && (tmask + 1) / 2 >= 2 * chunk)
        tmask >>= 1;
    for (uint32_t e = tid; e <= tmask; e += NT)
        skey[e] = HPS_GCACHE_EMPTY_KEY;
    if (tid == 0)
        ucount = retry = 0;
    __syncthreads();
    uint64_t base = (uint64_t)blockIdx.x * chunk;
    uint32_t cnt = (uint32_t)(n - base < chunk ? n - base : chunk);
    /* 1. shared-memory de-duplication; keys loaded before any insert */
    int64_t k[BK_CHUNK / NT];
#pragma unroll
    for (int q = 0; q < BK_CHUNK / NT; q++) {
        uint32_t j = tid + q * NT;
        k[q] = j < cnt ? keys[base + j] : HPS_GCACHE_EMPTY_KEY;
    }
    /* the chunk's writer epoch (hps__gcache_writer_begin), loaded with the
     * keys: no round of its own; begun too, to see a writer in flight */
    uint64_t ep = EPOCH && tid == 0 ? hps__gcache_ld_u64(&t.ctr[HPS_GC_WR_ENDED]) : 0;
    uint64_t bg = EPOCH && tid == 0 ? hps__gcache_ld_u64(&t.ctr[HPS_GC_WR_BEGUN]) : 0;
#pragma unroll
    for (int q = 0; q < BK_CHUNK / NT; q++) {
        uint32_t j = tid + q * NT;
        if (j >= cnt)
            break;
        if (k[q] == HPS_GCACHE_EMPTY_KEY) {
            spos[j] = BK_NONE;
            continue;
        }
        uint32_t h = (uint32_t)hps__gcache_mix64((uint64_t)k[q]) & tmask;
        for (;;) {
            /* why: claims the entry for this key, or finds its claimant */
            unsigned long long prev =
                atomicCAS((unsigned long long *)&skey[h], (unsigned long long)HPS_GCACHE_EMPTY_KEY,
                          (unsigned long long)k[q]);
            if (prev == (unsigned long long)HPS_GCACHE_EMPTY_KEY) {
                uent[atomicAdd(&ucount, 1u)] = (uint16_t)h; /* why: unique-list slot */
                break;
            }
            if (prev == (unsigned long long)k[q])
                break;
            h = (h + 1) & tmask;
        }
        spos[j] = (uint16_t)h;
    }
    if (tid == 0) {
        /* in shared memory: held in a register across the chunk it
         * spills.  Step 2's first ordered load (the version, or without
         * versions the key check) depends on its value, so the probes and
         * the row loads follow it. */
        se0 = ep;
        sver = !EPOCH || bg != ep;
        if (t.strict)
            hps__gcache_fence(); /* why: the probes and row loads must not pass the epoch load */
    }
    __syncthreads();
    uint32_t nu = ucount;
    /* 2. probe each unique key once */
    for (uint32_t q = tid; q < nu; q += NT) {
        uint32_t e = uent[q];
        sres[e] = bk_probe<EPOCH>(t, skey[e], se0, sver, now, zero);
    }
    __syncthreads();
    /* The keys, the cache and shared memory are all that the steps
     * above touched.  Outputs and the workspace wait for the previous
     * kernel on the stream (it may be the last call, writing the same
     * output). */
    hps__gcache_pdl_wait();
    /* 3. a warp per position, BU positions in flight; rows of q < 32
     * 16-byte chunks go 32 / q to a warp, side by side (a stored int8 row
     * of dim 128 is 9 chunks: 3 rows per load instead of 1; fp32 at dim
     * 128 is 32 chunks, one row as before).  H200, bench-gpu-cache --dtype
     * int8, stored lookup at 1M keys: 8,830 -> 11,027 M keys/s; fp16 7,879
     * -> 8,367 (kernels/NOTES.md). */
    constexpr int BU = EPOCH ? BK_UNROLL_LARGE : LK_UNROLL;
    uint32_t q = t.dim / 4, rpw = 32 / q;
    uint32_t sub = (uint32_t)lane / q, c = (uint32_t)lane - sub * q;
    bool act = sub < rpw;
    for (uint32_t jb = wib * BU * rpw; jb < cnt; jb += (NT / 32) * BU * rpw) {
        uint32_t sl[BU]; /* the slot; all-ones (the low half of MISS) on a miss */
        float4 v[BU];
#pragma unroll
        for (int u = 0; u < BU; u++) {
            uint32_t j = jb + u * rpw + sub;
            uint32_t e = act && j < cnt ? spos[j] : BK_NONE;
            sl[u] = e != BK_NONE ? (uint32_t)sres[e] : UINT32_MAX;
            if (sl[u] != UINT32_MAX)
                v[u] = hps__gcache_codec<DT>::chunk(hps__gcache_row(t, sl[u]), c,
                                                    rows_evict_first ? pol_first : 0);
        }
#pragma unroll
        for (int u = 0; u < BU; u++) {
            uint32_t j = jb + u * rpw + sub;
            if (sl[u] != UINT32_MAX)
                __stcs((float4 *)(out + (base + j) * t.dim) + c, v[u]);
            if (act && c == 0 && j < cnt)
                shit[j] = sl[u] != UINT32_MAX;
        }
    }
    /* Each row load above completed before its store could issue, and the
     * barrier orders those stores before the re-reads; strict mode adds
     * the formal fence (which also waits for the stores). */
    if (t.strict)
        hps__gcache_fence(); /* why: this thread's row loads precede the re-reads below */
    __syncthreads();
    /* 4. EPOCH: nothing to do if no writer ran since e0.  Else re-read
     * each unique key's version, or without versions (step 2) read every
     * hit again.  One thread loads the epoch: a load by every warp of
     * every block, all at this moment and at one address, would queue at
     * one L2 slice. */
    if (EPOCH) {
        if (tid == 0)
            quiet = hps__gcache_ld_u64(&t.ctr[HPS_GC_WR_BEGUN]) == se0;
        __syncthreads();
    }
    if (!EPOCH || !quiet) {
        for (uint32_t q = tid; q < nu; q += NT) {
            uint32_t e = uent[q];
            uint64_t r = sres[e];
            if (r == HPS_RES_MISS)
                continue;
            /* no version was read: every hit is read again */
            if (!sver ||
                hps__gcache_ld_ver(&t.ver[(uint32_t)r / HPS_GCACHE_WAYS]) != (uint32_t)(r >> 32)) {
                sres[e] = BK_RETRY;
                retry = 1; /* why no atomic: every writer stores the same value */
            } else if (!EPOCH) {
                hps__gcache_touch(t, r & 0xffffffffu, now); /* its load overlaps the version's */
            }
        }
        __syncthreads();
    }
    /* 5. rare: a writer overlapped; read those positions again */
    if (retry) {
        for (uint32_t j = wib; j < cnt; j += NT / 32) {
            uint32_t e = spos[j];
            if (e != BK_NONE && sres[e] == BK_RETRY) {
                int64_t slot =
                    hps__gcache_read_key<DT>(t, skey[e], out + (base + j) * t.dim, lane, true);
                if (lane == 0)
                    shit[j] = slot >= 0;
            }
        }
        __syncthreads();
    }
    /* 6. outcomes */
    for (uint32_t j = tid; j < cnt; j += NT) {
        hits += shit[j];
        lk_outcome(w, base + j, shit[j], d_hit_mask, d_missing_index);
    }
    lk_finish(t, w, hits, d_missing_count);
}

__global__ void k_dedup_probe(hps_table_ref_t t, hps_ws_ref_t w, const int64_t *__restrict__ keys,
                              uint64_t n, uint32_t zero)
{
    int lane = threadIdx.x & 31;
    uint64_t warp = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    uint64_t nwarps = ((uint64_t)gridDim.x * blockDim.x) >> 5;
    uint64_t now = lk_start(t, n);
    for (uint64_t base = warp * 32; base < n; base += nwarps * 32) {
        uint64_t i = base + lane;
        int64_t key = i < n ? keys[i] : HPS_GCACHE_EMPTY_KEY;
        uint32_t p = HPS_INV_NONE;
        bool rep = false;
        if (key != HPS_GCACHE_EMPTY_KEY) {
            uint64_t dk = (uint64_t)key ^ HPS_DKEY_XOR;
            uint64_t h = hps__gcache_mix64((uint64_t)key ^ 0x9e3779b97f4a7c15ull) & w.cap_mask;
            for (;;) {
                /* a plain load first: duplicates of hot keys skip the atomic */
                uint64_t seen = __ldcg(&w.dkeys[h]);
                if (seen == dk)
                    break;
                if (seen != HPS_DKEY_EMPTY) {
                    h = (h + 1) & w.cap_mask;
                    continue;
                }
                /* why: claims the entry, or finds the thread that did */
                unsigned long long prev =
                    atomicCAS((unsigned long long *)&w.dkeys[h], (unsigned long long)HPS_DKEY_EMPTY,
                              (unsigned long long)dk);
                if (prev == HPS_DKEY_EMPTY || prev == dk) {
                    rep = prev == HPS_DKEY_EMPTY;
                    break;
                }
                h = (h + 1) & w.cap_mask;
            }
            p = (uint32_t)h;
        }
        if (i < n)
            w.inv[i] = p;
        if (rep) { /* one thread per unique key: tag bytes, then the matching key */
            uint64_t set = hps__gcache_set_of(t, key);
            uint32_t v = 0;
            /* why the dependency: the probe must not pass the version load;
             * a stuck lock (killed writer) answers miss */
            int way = hps__gcache_wait_even(&t.ver[set], &v)
                          ? hps__gcache_probe_tagged(t, set, key, hps__gcache_dep(v, zero))
                          : -1;
            uint64_t slot = set * HPS_GCACHE_WAYS + (uint64_t)way;
            w.dres[p] = way >= 0 ? ((uint64_t)v << 32 | slot) : HPS_RES_MISS;
            if (way >= 0)
                hps__gcache_touch(t, slot, now);
        }
    }
}

/* Vectorized scatter: dim % 4 == 0, dim <= 128, 16-byte aligned rows.
 * STRICT and the address-dependency ordering as in k_lookup_fused_vec. */
template <int DT, bool STRICT>
__global__ void __launch_bounds__(LK_THREADS, LK_MIN_BLOCKS)
    k_scatter_vec(hps_table_ref_t t, hps_ws_ref_t w, const int64_t *__restrict__ keys, uint64_t n,
                  float *out, uint8_t *d_hit_mask, uint32_t *d_missing_index,
                  uint32_t *d_missing_count, uint32_t zero)
{
    int lane = threadIdx.x & 31;
    uint64_t warp = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    uint64_t nwarps = ((uint64_t)gridDim.x * blockDim.x) >> 5;
    uint32_t nv = t.dim / 4;
    bool mine = (uint32_t)lane < nv;
    uint64_t hits = 0;
    uint32_t next[LK_UNROLL]; /* entries of the warp's next step, loaded one step ahead */
#pragma unroll
    for (int u = 0; u < LK_UNROLL; u++)
        next[u] = warp * LK_UNROLL + u < n ? w.inv[warp * LK_UNROLL + u] : HPS_INV_NONE;
    for (uint64_t base = warp * LK_UNROLL; base < n; base += nwarps * LK_UNROLL) {
        uint32_t p[LK_UNROLL];
        uint64_t r[LK_UNROLL];
        float4 v[LK_UNROLL];
        uint64_t nb = base + nwarps * LK_UNROLL;
#pragma unroll
        for (int u = 0; u < LK_UNROLL; u++) {
            p[u] = next[u];
            next[u] = nb + u < n ? w.inv[nb + u] : HPS_INV_NONE;
        }
#pragma unroll
        for (int u = 0; u < LK_UNROLL; u++)
            r[u] = p[u] != HPS_INV_NONE ? w.dres[p[u]] : HPS_RES_MISS;
#pragma unroll
        for (int u = 0; u < LK_UNROLL; u++)
            if (r[u] != HPS_RES_MISS && mine)
                v[u] =
                    hps__gcache_codec<DT>::chunk(hps__gcache_row(t, r[u] & 0xffffffffu), lane, 0);
        if (STRICT)
            hps__gcache_fence(); /* why: the row loads must complete before the versions are re-read
                                  */
#pragma unroll
        for (int u = 0; u < LK_UNROLL; u++) {
            uint64_t i = base + u;
            if (i >= n)
                break;
            bool hit = r[u] != HPS_RES_MISS;
            if (hit) {
                uint32_t slot = (uint32_t)r[u];
                uint32_t d = mine && !STRICT ? __float_as_uint(v[u].x) : 0u;
                uint32_t now_v =
                    hps__gcache_ld_ver(&t.ver[slot / HPS_GCACHE_WAYS + hps__gcache_dep(d, zero)]);
                if (__all_sync(0xffffffffu, now_v == (uint32_t)(r[u] >> 32))) {
                    if (mine)
                        __stcs((float4 *)(out + i * t.dim) + lane,
                               v[u]); /* streaming: keep L2 for hot rows */
                } else {              /* a writer touched the set since the probe: read again */
                    hit = lk_slow_read<DT>(t, keys[i], out + i * t.dim, lane) >= 0;
                }
            }
            if (lane == u) {
                if (p[u] != HPS_INV_NONE)
                    w.dkeys[p[u]] = HPS_DKEY_EMPTY; /* why: kernel 2 never reads dkeys */
                hits += hit;
                lk_outcome(w, i, hit, d_hit_mask, d_missing_index);
            }
        }
    }
    lk_finish(t, w, hits, d_missing_count);
}

/* Generic scatter: any dim and alignment, one key per warp step. */
template <int DT>
__global__ void k_scatter_any(hps_table_ref_t t, hps_ws_ref_t w, const int64_t *__restrict__ keys,
                              uint64_t n, float *out, uint8_t *d_hit_mask,
                              uint32_t *d_missing_index, uint32_t *d_missing_count, bool vec4)
{
    int lane = threadIdx.x & 31;
    uint64_t warp = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    uint64_t nwarps = ((uint64_t)gridDim.x * blockDim.x) >> 5;
    uint64_t hits = 0;
    for (uint64_t i = warp; i < n; i += nwarps) {
        uint32_t p = w.inv[i];
        uint64_t r = p != HPS_INV_NONE ? w.dres[p] : HPS_RES_MISS;
        bool hit = r != HPS_RES_MISS;
        if (hit) {
            uint32_t slot = (uint32_t)r;
            hps__gcache_copy_row<DT>(out + i * t.dim, hps__gcache_row(t, slot), t.dim, lane, vec4);
            hps__gcache_fence(); /* why: the copy must complete before the version is re-read */
            if (hps__gcache_ld_ver(&t.ver[slot / HPS_GCACHE_WAYS]) != (uint32_t)(r >> 32))
                hit = hps__gcache_read_key<DT>(t, keys[i], out + i * t.dim, lane, vec4) >= 0;
        }
        if (lane == 0) {
            if (p != HPS_INV_NONE)
                w.dkeys[p] = HPS_DKEY_EMPTY; /* why: kernel 2 never reads dkeys */
            hits += hit;
            lk_outcome(w, i, hit, d_hit_mask, d_missing_index);
        }
    }
    lk_finish(t, w, hits, d_missing_count);
}

/* Blocks for warps_needed warps, capped at one resident wave of the kernel
 * (per_sm blocks per SM: a persistent grid, no second wave whose tail would
 * idle the chip). */
static unsigned lk_blocks(const hps_table_ref_t *t, uint64_t warps_needed, int per_sm)
{
    uint64_t b = (warps_needed + LK_THREADS / 32 - 1) / (LK_THREADS / 32);
    uint64_t max = (uint64_t)t->num_sms * (uint64_t)(per_sm > 0 ? per_sm : 1);
    if (b > max)
        b = max;
    return b ? (unsigned)b : 1u;
}

static bool lk_vec4(const hps_table_ref_t *t, const float *out)
{
    return t->dim % 4 == 0 && ((uintptr_t)out & 15) == 0;
}

/* Resident blocks per SM of kernel k of the ref's launch (the kernels of its dtype). */
static int lk_occ(const hps_table_ref_t *t, int k)
{
    return t->occ[t->dtype][k];
}

/* Launch fn<<<grid, block, 0, stream>>>(args), with pdl as a programmatic
 * dependent of the previous kernel on the stream (hps__gcache_pdl_wait). */
template <typename... P, typename... A>
static cudaError_t lk_launch(void (*fn)(P...), unsigned grid, unsigned block, cudaStream_t stream,
                             int pdl, A... args)
{
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(block);
    cfg.stream = stream;
    cfg.attrs = &attr;
    cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, fn, args...);
}

/* Call f<DT>(args) for the storage type dt of a ref (its kernels decode
 * that type; a stored lookup's ref says fp32). */
#define LK_DISPATCH(dt, f, ...)                                                                    \
    switch (dt) {                                                                                  \
    case HPS_DTYPE_FP16:                                                                           \
        return f<HPS_DTYPE_FP16>(__VA_ARGS__);                                                     \
    case HPS_DTYPE_BF16:                                                                           \
        return f<HPS_DTYPE_BF16>(__VA_ARGS__);                                                     \
    case HPS_DTYPE_INT8:                                                                           \
        return f<HPS_DTYPE_INT8>(__VA_ARGS__);                                                     \
    default:                                                                                       \
        return f<HPS_DTYPE_FP32>(__VA_ARGS__);                                                     \
    }

template <int DT>
static hps_err_t lk_fused(const hps_table_ref_t *ref, const hps_ws_ref_t *ws, const int64_t *d_keys,
                          uint64_t n, float *d_out, uint8_t *d_hit_mask, uint32_t *d_missing_index,
                          uint32_t *d_missing_count, cudaStream_t stream)
{
    if (lk_vec4(ref, d_out) && ref->dim <= 128) {
        auto fn = ref->strict ? k_lookup_fused_vec<DT, true> : k_lookup_fused_vec<DT, false>;
        HPS_CUDA_TRY(
            lk_launch(fn,
                      lk_blocks(ref, (n + LK_UNROLL - 1) / LK_UNROLL,
                                lk_occ(ref, ref->strict ? HPS_LK_FVEC_STRICT : HPS_LK_FVEC)),
                      LK_THREADS, stream, ref->pdl, *ref, *ws, d_keys, n, d_out, d_hit_mask,
                      d_missing_index, d_missing_count, 0u));
    } else
        k_lookup_fused<DT><<<lk_blocks(ref, n, lk_occ(ref, HPS_LK_FUSED)), LK_THREADS, 0, stream>>>(
            *ref, *ws, d_keys, n, d_out, d_hit_mask, d_missing_index, d_missing_count,
            lk_vec4(ref, d_out));
    HPS_CUDA_TRY(cudaGetLastError());
    return 0;
}

extern "C" hps_err_t hps_k_lookup_fused(const hps_table_ref_t *ref, const hps_ws_ref_t *ws,
                                        const int64_t *d_keys, uint64_t n, float *d_out,
                                        uint8_t *d_hit_mask, uint32_t *d_missing_index,
                                        uint32_t *d_missing_count, cudaStream_t stream)
{
    LK_DISPATCH(ref->dtype, lk_fused, ref, ws, d_keys, n, d_out, d_hit_mask, d_missing_index,
                d_missing_count, stream);
}

/*
 * Shared memory against L1 per SM (the carveout, one pool of 256 KB on
 * H100 / H200).  The driver picks the carveout for the occupancy that it
 * can reach: with 47 registers (before its 8-row copy) 5 blocks of
 * k_lookup_block<256, true> fit, and the driver took a large carveout,
 * leaving a small L1, which also stages the rows in flight.  H200,
 * bench-gpu-cache at 256K / 1M keys: 4,042 / 4,228 M keys/s so; with the
 * carveout of 4 blocks (164 KB: 92 KB of L1) 4,210 / 4,471; with the
 * largest (228 KB) 3,597 / 3,765.  Small batches take the largest: 16K
 * keys 2,131 against 2,002.  So each kernel gets the carveout of the
 * blocks per SM it is sized for, in percent of the largest shared memory
 * per SM: 68% for 4 blocks on H100 / H200, which measured as 71% did, so
 * the driver rounds it up to the 164 KB capacity.
 */
static hps_err_t bk_carveout_for(const void *fn, int blocks, int max_smem)
{
    cudaFuncAttributes a;
    HPS_CUDA_TRY(cudaFuncGetAttributes(&a, fn));
    uint64_t need = (uint64_t)blocks * (a.sharedSizeBytes + 1024); /* 1 KB per block reserved */
    uint64_t pct = blocks ? (need * 100 + (uint64_t)max_smem - 1) / (uint64_t)max_smem : 100;
    HPS_CUDA_TRY(cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout,
                                      pct > 100 ? 100 : (int)pct));
    return 0;
}

template <int DT> static hps_err_t bk_carveout(int max_smem)
{
    hps_err_t err = bk_carveout_for((const void *)k_lookup_block<DT, 256, true>, 4, max_smem);
    if (!err)
        err = bk_carveout_for((const void *)k_lookup_block<DT, 512, true>, 2, max_smem);
    if (!err)
        err = bk_carveout_for((const void *)k_lookup_block<DT, 256, false>, 0, max_smem);
    return err;
}

/* Resident blocks per SM of fn with LK_THREADS threads (1 if unknown). */
static uint8_t lk_occupancy(const void *fn)
{
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, LK_THREADS, 0) != cudaSuccess ||
        per_sm < 1) {
        (void)cudaGetLastError();
        per_sm = 1;
    }
    return (uint8_t)(per_sm > 255 ? 255 : per_sm);
}

/* The carveouts and occupancies of the kernels of one storage type. */
template <int DT> static hps_err_t lk_setup(uint8_t occ[HPS_LK_NOCC], int max_smem)
{
    hps_err_t err = max_smem > 0 ? bk_carveout<DT>(max_smem) : 0;
    if (err)
        return err;
    occ[HPS_LK_FUSED] = lk_occupancy((const void *)k_lookup_fused<DT>);
    occ[HPS_LK_FVEC] = lk_occupancy((const void *)k_lookup_fused_vec<DT, false>);
    occ[HPS_LK_FVEC_STRICT] = lk_occupancy((const void *)k_lookup_fused_vec<DT, true>);
    occ[HPS_LK_DEDUP] = lk_occupancy((const void *)k_dedup_probe);
    occ[HPS_LK_VEC] = lk_occupancy((const void *)k_scatter_vec<DT, false>);
    occ[HPS_LK_VEC_STRICT] = lk_occupancy((const void *)k_scatter_vec<DT, true>);
    occ[HPS_LK_ANY] = lk_occupancy((const void *)k_scatter_any<DT>);
    return 0;
}

/* Function attributes and occupancy belong to a device, so each cache sets
 * and measures them on its own (a process may drive caches on several):
 * for the fp32 kernels (its stored lookups run them too) and, for a compact
 * cache, those that decode its storage type. */
extern "C" hps_err_t hps_k_lookup_setup(hps_table_ref_t *ref)
{
    int dev, max_smem = 0;
    HPS_CUDA_TRY(cudaGetDevice(&dev));
    HPS_CUDA_TRY(
        cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    hps_err_t err = lk_setup<HPS_DTYPE_FP32>(ref->occ[HPS_DTYPE_FP32], max_smem);
    if (err || ref->dtype == HPS_DTYPE_FP32)
        return err;
    LK_DISPATCH(ref->dtype, lk_setup, ref->occ[ref->dtype], max_smem);
}

template <int DT>
static hps_err_t lk_block(const hps_table_ref_t *ref, const hps_ws_ref_t *ws, const int64_t *d_keys,
                          uint64_t n, float *d_out, uint8_t *d_hit_mask, uint32_t *d_missing_index,
                          uint32_t *d_missing_count, cudaStream_t stream)
{
    /* Chunks of at most BK_CHUNK keys, one per block, 4 blocks of 256 per
     * SM: small batches are latency-bound (more, smaller chunks probe more
     * keys in parallel), larger ones bound by bytes (larger chunks catch
     * more duplicates, so fewer probes).  Up to 2 full chunks per SM, two
     * blocks of 512 threads per SM instead (one wave, twice the L1 of each).
     * H200, bench-gpu-cache with overlap: 256K keys 4,207 M keys/s with 512
     * threads against 4,173 with 256; 1M keys 4,436 with 1,024 blocks of
     * 256 threads against 4,316 with 512 (and 4,206 with 3 blocks of 256
     * per SM, and 4,450 with one wave of 528 blocks taking 2 chunks each).
     * Without overlap this shape measures as the one-wave, several-chunk
     * grid of before: 256K / 1M 3,691 / 4,259 against 3,661 / 4,273.
     * The writer epoch (EPOCH) pays where a chunk's unique keys are many:
     * 256K 3,575 -> 3,631, 1M 4,077 -> 4,225.  At 16K keys (32-key chunks)
     * the re-read is one round either way, and EPOCH measured 1,391-1,397
     * against 1,465-1,487, so small batches keep the per-set re-read. */
    bool small = n <= BK_SMALL_BATCH;
    bool wide = !small && n <= (uint64_t)ref->num_sms * 2 * BK_CHUNK;
    uint64_t slots = (uint64_t)ref->num_sms * (wide ? 2 : 4);
    uint64_t chunk = (n + slots - 1) / slots;
    chunk = chunk < 32 ? 32 : chunk > BK_CHUNK ? BK_CHUNK : chunk;
    uint64_t chunks = (n + chunk - 1) / chunk;
    auto fn = small  ? k_lookup_block<DT, 256, false>
              : wide ? k_lookup_block<DT, 512, true>
                     : k_lookup_block<DT, 256, true>;
    HPS_CUDA_TRY(lk_launch(fn, (unsigned)chunks, wide ? 512 : 256, stream, ref->pdl, *ref, *ws,
                           d_keys, n, (uint32_t)chunk, (int)small, d_out, d_hit_mask,
                           d_missing_index, d_missing_count, 0u));
    return 0;
}

extern "C" hps_err_t hps_k_lookup_block(const hps_table_ref_t *ref, const hps_ws_ref_t *ws,
                                        const int64_t *d_keys, uint64_t n, float *d_out,
                                        uint8_t *d_hit_mask, uint32_t *d_missing_index,
                                        uint32_t *d_missing_count, cudaStream_t stream)
{
    if (!lk_vec4(ref, d_out) || ref->dim > 128) /* the block kernel is vectorized only */
        return HPS_EINVAL;
    LK_DISPATCH(ref->dtype, lk_block, ref, ws, d_keys, n, d_out, d_hit_mask, d_missing_index,
                d_missing_count, stream);
}

extern "C" hps_err_t hps_k_dedup_probe(const hps_table_ref_t *ref, const hps_ws_ref_t *ws,
                                       const int64_t *d_keys, uint64_t n, cudaStream_t stream)
{
    k_dedup_probe<<<lk_blocks(ref, (n + 31) / 32, lk_occ(ref, HPS_LK_DEDUP)), LK_THREADS, 0,
                    stream>>>(*ref, *ws, d_keys, n, 0u);
    HPS_CUDA_TRY(cudaGetLastError());
    return 0;
}

template <int DT>
static hps_err_t lk_scatter(const hps_table_ref_t *ref, const hps_ws_ref_t *ws,
                            const int64_t *d_keys, uint64_t n, float *d_out, uint8_t *d_hit_mask,
                            uint32_t *d_missing_index, uint32_t *d_missing_count,
                            cudaStream_t stream)
{
    if (lk_vec4(ref, d_out) && ref->dim <= 128) {
        auto fn = ref->strict ? k_scatter_vec<DT, true> : k_scatter_vec<DT, false>;
        fn<<<lk_blocks(ref, (n + LK_UNROLL - 1) / LK_UNROLL,
                       lk_occ(ref, ref->strict ? HPS_LK_VEC_STRICT : HPS_LK_VEC)),
             LK_THREADS, 0, stream>>>(*ref, *ws, d_keys, n, d_out, d_hit_mask, d_missing_index,
                                      d_missing_count, 0u);
    } else
        k_scatter_any<DT><<<lk_blocks(ref, n, lk_occ(ref, HPS_LK_ANY)), LK_THREADS, 0, stream>>>(
            *ref, *ws, d_keys, n, d_out, d_hit_mask, d_missing_index, d_missing_count,
            lk_vec4(ref, d_out));
    HPS_CUDA_TRY(cudaGetLastError());
    return 0;
}

extern "C" hps_err_t hps_k_scatter(const hps_table_ref_t *ref, const hps_ws_ref_t *ws,
                                   const int64_t *d_keys, uint64_t n, float *d_out,
                                   uint8_t *d_hit_mask, uint32_t *d_missing_index,
                                   uint32_t *d_missing_count, cudaStream_t stream)
{
    LK_DISPATCH(ref->dtype, lk_scatter, ref, ws, d_keys, n, d_out, d_hit_mask, d_missing_index,
                d_missing_count, stream);
}
