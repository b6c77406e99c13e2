/*
 * gcache_internal.cuh -- device view of a GPU embedding cache, shared by the
 * kernels of kernels/ (one <op>.cu per operation) and the host glue gcache.cu.
 */
#ifndef HPS_GCACHE_INTERNAL_CUH
#define HPS_GCACHE_INTERNAL_CUH

#include <errno.h>
#include <pthread.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "hps/dtype.h"
#include "hps/gcache.h"

/* Clear and map a CUDA error: out-of-memory to -ENOMEM, anything else HPS_EIO. */
static inline hps_err_t hps__gcache_cuda_err(cudaError_t e)
{
    if (e == cudaSuccess)
        return 0;
    (void)cudaGetLastError(); /* clear the sticky-free error state */
    return e == cudaErrorMemoryAllocation ? -ENOMEM : HPS_EIO;
}

/* Evaluate a CUDA call; on failure clear the error and return its hps_err_t. */
#define HPS_CUDA_TRY(call)                                                                         \
    do {                                                                                           \
        cudaError_t hps__gcache_e = (call);                                                        \
        if (hps__gcache_e != cudaSuccess)                                                          \
            return hps__gcache_cuda_err(hps__gcache_e);                                            \
    } while (0)

/* Device counters of one cache (uint64 words, atomically added). */
enum {
    HPS_GC_LOOKUPS,
    HPS_GC_HITS,
    HPS_GC_INSERTS,
    HPS_GC_EVICTIONS,
    HPS_GC_UPDATES,
    HPS_GC_LOCK_TIMEOUTS, /* writes skipped: a set stayed locked (a killed writer) */
    HPS_GC_WR_BEGUN,      /* writer blocks started (hps__gcache_writer_begin) */
    HPS_GC_WR_ENDED,      /* writer blocks finished (hps__gcache_writer_end) */
    HPS_GC_NCTR
};

/* Bounded waits for a locked (odd) set version.  A writer holds a set for
 * the few instructions of one row write; a set that stays odd this long was
 * left locked by a process killed mid-write (hps_gcache_repair unlocks it).
 * Readers then answer "miss" (the CPU path serves the key), writers skip. */
#define HPS_GC_READ_SPINS  (1u << 14)
#define HPS_GC_WRITE_SPINS (1u << 16)

/* Lookup kernels whose grids are sized by their occupancy (lk_blocks):
 * k_lookup_fused, k_lookup_fused_vec<false> and <true>, k_dedup_probe,
 * k_scatter_vec<false> and <true>, k_scatter_any. */
enum {
    HPS_LK_FUSED,
    HPS_LK_FVEC,
    HPS_LK_FVEC_STRICT,
    HPS_LK_DEDUP,
    HPS_LK_VEC,
    HPS_LK_VEC_STRICT,
    HPS_LK_ANY,
    HPS_LK_NOCC
};

/* What a kernel needs of a cache: passed by value. */
typedef struct hps_table_ref {
    uint64_t *rec; /* [num_sets * 32][2]: each slot's key and LRU/LFU stamp side by side,
                    * so the sector of the key check also brings the stamp (hps__gcache_key) */
    uint8_t *tags; /* [num_sets * 32] key fingerprints (hps__gcache_tag), 0 = free */
    float *vals;   /* [num_sets * 32][rwords]: each slot's stored row (hps__gcache_gc_row_words) */
    uint32_t *ver; /* [num_sets] seqlock words */
    uint64_t *clock; /* LRU clock, bumped once per lookup */
    uint64_t *ctr;   /* [HPS_GC_NCTR] */
    uint64_t num_sets;
    uint32_t dim;    /* elements per output row (a lookup's d_out stride); the stored
                      * lookup sets it to rwords (its output is the stored rows) */
    uint32_t rwords; /* 4-byte words per slot row (hps__gcache_gc_row_words of dtype, dim) */
    int dtype;       /* hps_dtype_t of the slot rows; the stored lookup launches as fp32 */
    int policy;
    uint64_t lru_window; /* LRU: ~(resolution - 1); a hit restamps a slot whose stamp
                          * precedes now & lru_window (hps_gcache_set_lru_resolution) */
    int num_sms;         /* host-side launch sizing */
    int strict;          /* lookups order their loads by fences, not address dependencies */
    int pdl;             /* host side: FUSED (vectorized) and BLOCK lookups launch as
                          * programmatic dependents (hps_gcache_set_overlap) */
    /* host side: resident blocks per SM of each kernel on the cache's device
     * (hps_k_lookup_setup), by the type the kernels decode (the ref's dtype):
     * HPS_DTYPE_FP32's (the fp32 and the stored lookups) and the cache's own */
    uint8_t occ[HPS_DTYPE_COUNT][HPS_LK_NOCC];
} hps_table_ref_t;

/* Workspace of one lookup stream: the de-duplication table. */
typedef struct hps_ws_ref {
    uint64_t *dkeys;    /* [cap] transformed keys, all-ones = empty */
    uint64_t *dres;     /* [cap] (version << 32 | slot) of the entry, or HPS_RES_MISS */
    uint32_t *inv;      /* [max_keys] input position -> table entry */
    uint32_t *miss_ctr; /* [4]: misses so far; [2..3] one uint64: hits << 20 | blocks finished
                         * (both reset by the last block) */
    uint64_t cap_mask;  /* cap - 1 (cap a power of two) */
} hps_ws_ref_t;

struct hps_gcache {
    hps_table_ref_t ref;
    int device;
    char *base;     /* the one allocation holding every array of ref */
    uint64_t bytes; /* its size (rounded to the VMM granularity when shared) */
    int shared;     /* 1: CUDA VMM allocation (create_shared / import), 0: cudaMalloc */
    /* VMM pieces when shared (hps__gcache_vmm_plan): part p spans [part_off[p],
     * part_off[p + 1]) of base, backed by device shard_dev[part_shard[p]]
     * through part_handle[p] (CUmemGenericAllocationHandle; 0 = not mapped).
     * One part on `device` unless sharded. */
    uint32_t num_parts;
    uint64_t part_off[HPS_GCACHE_MAX_PARTS + 1];
    uint8_t part_shard[HPS_GCACHE_MAX_PARTS];
    uint64_t part_handle[HPS_GCACHE_MAX_PARTS];
    uint32_t num_shards;                           /* devices the memory spans (1 unless sharded) */
    int shard_dev[HPS_GCACHE_MAX_SHARDS];          /* their ordinals */
    uint64_t shard_set[HPS_GCACHE_MAX_SHARDS + 1]; /* sets homed on shard j: [shard_set[j],
                                                    * shard_set[j + 1]) */
    uint64_t fused_max; /* batches up to this size take the fused kernel */
    int lookup_path;    /* HPS_GCACHE_PATH_* */
    int pdl_ok;         /* the device supports programmatic dependent launch */
    /* hps_gcache_stats: its own stream and scratch word (no cudaMalloc /
     * cudaFree per call: those synchronize the whole device), one caller
     * at a time. */
    cudaStream_t stats_stream;
    unsigned long long *d_occ;
    pthread_mutex_t stats_mu;
};

struct hps_gcache_ws {
    hps_gcache_t *cache;
    hps_ws_ref_t ref;
    uint64_t max_keys;
};

#define HPS_RES_MISS UINT64_MAX
#define HPS_INV_NONE UINT32_MAX
/* De-duplication table keys are stored XOR this, so that the reserved key
 * INT64_MAX becomes all-ones, the empty marker that a 0xff memset writes. */
#define HPS_DKEY_XOR   0x8000000000000000ull
#define HPS_DKEY_EMPTY UINT64_MAX

#ifdef __CUDACC__

/* The key and the stamp of a slot (set * 32 + way). */
__device__ __forceinline__ int64_t &hps__gcache_key(const hps_table_ref_t &t, uint64_t slot)
{
    return *(int64_t *)&t.rec[2 * slot];
}

__device__ __forceinline__ uint64_t &hps__gcache_stamp(const hps_table_ref_t &t, uint64_t slot)
{
    return t.rec[2 * slot + 1];
}

__device__ __forceinline__ uint64_t hps__gcache_mix64(uint64_t x)
{
    /* splitmix64 finalizer: every key bit reaches every output bit. */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

__device__ __forceinline__ uint64_t hps__gcache_set_of(const hps_table_ref_t &t, int64_t key)
{
    /* Lemire's multiply-shift range reduction: no 64-bit division. */
    return __umul64hi(hps__gcache_mix64((uint64_t)key), t.num_sets);
}

/* Acquire-release fence at GPU scope: orders the loads of a seqlock read
 * against the version re-read, and a writer's stores against its release. */
__device__ __forceinline__ void hps__gcache_fence(void)
{
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

/* An opaque zero: v & zero where zero is a kernel argument that is always 0.
 * Adding it to an address makes the load wait for v (an address
 * dependency), which orders it after the load of v at no other cost. */
__device__ __forceinline__ uint64_t hps__gcache_dep(uint32_t v, uint32_t zero)
{
    return (uint64_t)(v & zero);
}

/* Relaxed load that bypasses L1: another SM may have written the word. */
__device__ __forceinline__ uint32_t hps__gcache_ld_ver(const uint32_t *p)
{
    return *(const volatile uint32_t *)p;
}

/* Relaxed 64-bit load that bypasses L1 (the writer epoch counters). */
__device__ __forceinline__ uint64_t hps__gcache_ld_u64(const uint64_t *p)
{
    return *(const volatile uint64_t *)p;
}

/*
 * Writer epoch.  Every block of a kernel that writes keys, tags or rows
 * (insert, update, repair) counts itself in ctr[HPS_GC_WR_BEGUN] before its
 * first write and in ctr[HPS_GC_WR_ENDED] after its last.  A lookup that
 * loaded ended = e0 before its first probe and, after its last row load,
 * loads begun == e0 knows that no writer block ran at any moment in between
 * (ended <= begun, and both only grow), so its copies need no re-read,
 * and if begun was e0 too when it started, its probes need no set version.
 * Otherwise it validates.  A writer killed mid-kernel leaves begun > ended
 * until hps_gcache_repair counts its open blocks as ended: lookups then
 * always validate per set, which is correct, only slower.
 * Both functions must be called by every thread of the block.
 */
__device__ __forceinline__ void hps__gcache_writer_begin(const hps_table_ref_t &t)
{
    if (threadIdx.x == 0) {
        atomicAdd((unsigned long long *)&t.ctr[HPS_GC_WR_BEGUN], 1ull);
        hps__gcache_fence(); /* why: the count is visible before any write of the block */
    }
    __syncthreads();
    hps__gcache_fence(); /* why: each thread's writes follow the count (cumulativity made explicit)
                          */
}

__device__ __forceinline__ void hps__gcache_writer_end(const hps_table_ref_t &t)
{
    hps__gcache_fence(); /* why: this thread's writes precede the count */
    __syncthreads();
    if (threadIdx.x == 0) {
        hps__gcache_fence();
        atomicAdd((unsigned long long *)&t.ctr[HPS_GC_WR_ENDED], 1ull);
    }
}

/* Programmatic dependent launch (sm_90+; no-ops before).  trigger: the
 * next kernel on the stream, if launched as a programmatic dependent, may
 * start once every block of this grid has triggered or exited.  wait:
 * returns once the kernels this one depends on have completed and their
 * memory is visible; a kernel launched without the attribute returns at
 * once. */
__device__ __forceinline__ void hps__gcache_pdl_trigger(void)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void hps__gcache_pdl_wait(void)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Wait until the set's version is even (unlocked); false after
 * HPS_GC_READ_SPINS tries (a stuck lock: the caller answers miss). */
__device__ __forceinline__ bool hps__gcache_wait_even(const uint32_t *p, uint32_t *ret_v)
{
    uint32_t v;
    for (uint32_t i = 0; ((v = hps__gcache_ld_ver(p)) & 1u); i++) {
        if (i == HPS_GC_READ_SPINS)
            return false;
        __nanosleep(32);
    }
    *ret_v = v;
    return true;
}

/* An L2 evict-first policy (createpolicy) and a 16-byte load that carries
 * it; .cg: not cached in L1 (other SMs write these lines).  sm_80 and
 * later; older GPUs take a plain ld.global.cg. */
__device__ __forceinline__ uint64_t hps__gcache_pol_evict_first(void)
{
    uint64_t p = 0;
#if __CUDA_ARCH__ >= 800
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
#endif
    return p;
}

__device__ __forceinline__ float4 hps__gcache_ld_f4_pol(const float4 *a, uint64_t pol)
{
#if __CUDA_ARCH__ >= 800
    float4 r;
    asm volatile("ld.global.cg.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w)
                 : "l"(a), "l"(pol));
    return r;
#else
    (void)pol;
    return __ldcg(a);
#endif
}

/* A slot's 16-byte (key, stamp) record, loaded .cg with an L2 evict-last
 * policy (sm_80 and later).  Records are probed per chunk-unique key, so a
 * hot key's record is loaded by every chunk of every call; evict-last keeps
 * such lines in L2 while the rows stream past.  H200, bench-gpu-cache,
 * exact LRU, same runs: 256K keys 4,425 M keys/s against 4,321, 1M
 * 4,595-4,599 against 4,525-4,526.  With hps_gcache_set_lru_resolution 64
 * (few stamp writes) it costs 0.5% instead: 256K 4,551-4,558 against
 * 4,575, 1M 4,732-4,734 against 4,759.  Stamps also stored evict-last: the
 * same (16K 2,131 against 2,134); tags also loaded evict-last: 256K 4,408,
 * 1M 4,604-4,606. */
__device__ __forceinline__ ulonglong2 hps__gcache_ld_rec(const uint64_t *rec)
{
#if __CUDA_ARCH__ >= 800
    uint64_t pol;
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    ulonglong2 r;
    asm volatile("ld.global.cg.L2::cache_hint.v2.u64 {%0, %1}, [%2], %3;"
                 : "=l"(r.x), "=l"(r.y)
                 : "l"(rec), "l"(pol));
    return r;
#else
    return __ldcg((const ulonglong2 *)rec);
#endif
}

/* One-byte fingerprint of a key (never 0, which marks a free way); bits of
 * the hash that the set index does not use. */
__device__ __forceinline__ uint8_t hps__gcache_tag(int64_t key)
{
    uint32_t x = (uint32_t)(hps__gcache_mix64((uint64_t)key) >> 8) & 0xffu;
    return x ? (uint8_t)x : (uint8_t)1;
}

/* The ways among the 32 tag bytes a, b (ways 0-15, 16-31) whose tag is
 * key's: bit w set for way w. */
__device__ __forceinline__ uint32_t hps__gcache_tag_mask(int64_t key, uint4 a, uint4 b)
{
    uint32_t rep = hps__gcache_tag(key) * 0x01010101u;
    uint32_t words[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    uint32_t mask = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        uint32_t m = __vcmpeq4(words[i], rep); /* 0xff in each matching byte */
        mask |= ((m & 1u) | ((m >> 7) & 2u) | ((m >> 14) & 4u) | ((m >> 21) & 8u)) << (4 * i);
    }
    return mask;
}

/* The way among the candidate ways of mask whose key is key (each slot's
 * 16-byte record loaded address-dependent on dep), or -1; *seen receives
 * the matching slot's stamp, which arrives in the same record. */
__device__ __forceinline__ int hps__gcache_match_rec(const hps_table_ref_t &t, uint64_t set,
                                                     int64_t key, uint32_t mask, uint64_t dep,
                                                     uint64_t *seen)
{
    while (mask) {
        int way = __ffs(mask) - 1;
        mask &= mask - 1;
        ulonglong2 rec = hps__gcache_ld_rec(&t.rec[2 * (set * HPS_GCACHE_WAYS + way + dep)]);
        if ((int64_t)rec.x == key) {
            *seen = rec.y;
            return way;
        }
    }
    return -1;
}

/* hps__gcache_match_rec without the stamp. */
__device__ __forceinline__ int hps__gcache_match_mask(const hps_table_ref_t &t, uint64_t set,
                                                      int64_t key, uint32_t mask, uint64_t dep)
{
    uint64_t seen;
    return hps__gcache_match_rec(t, set, key, mask, dep, &seen);
}

/* Single-thread probe of one set through its 32 tag bytes (two 16-byte
 * loads, address-dependent on dep), then the key of each way whose tag
 * matches (one on average, 1 + 31/255 with false positives).  Moves about
 * 64 bytes instead of the slab's 256.  Returns the way or -1. */
__device__ __forceinline__ int hps__gcache_probe_tagged(const hps_table_ref_t &t, uint64_t set,
                                                        int64_t key, uint64_t dep)
{
    const uint4 *tp = (const uint4 *)(t.tags + set * HPS_GCACHE_WAYS + dep);
    return hps__gcache_match_mask(t, set, key,
                                  hps__gcache_tag_mask(key, __ldcg(tp), __ldcg(tp + 1)), dep);
}

/* Warp-cooperative probe of one set: returns the way holding key, or -1.
 * All 32 lanes must call it with the same key and set. */
__device__ __forceinline__ int hps__gcache_probe(const hps_table_ref_t &t, uint64_t set,
                                                 int64_t key, int lane)
{
    int64_t k = __ldcg(&hps__gcache_key(t, set * HPS_GCACHE_WAYS + lane));
    unsigned m = __ballot_sync(0xffffffffu, k == key);
    return m ? __ffs(m) - 1 : -1;
}

/* Mark slot as used now, its LRU stamp already loaded (seen; ignored for
 * LFU).  LRU: store the clock unless the stamp is already in now's window
 * (exact resolution: unless it is now; hot rows are then read, not
 * rewritten); LFU: count one use. */
__device__ __forceinline__ void hps__gcache_touch_seen(const hps_table_ref_t &t, uint64_t slot,
                                                       uint64_t now, uint64_t seen)
{
    if (t.policy == HPS_GCACHE_LFU) {
        /* why atomic: concurrent readers count */
        atomicAdd((unsigned long long *)&hps__gcache_stamp(t, slot), 1ull);
    } else if (seen < (now & t.lru_window)) {
        hps__gcache_stamp(t, slot) = now; /* racing readers store equal-or-close clocks: benign */
    }
}

/* Mark slot as used now (hps__gcache_touch_seen, the stamp loaded here). */
__device__ __forceinline__ void hps__gcache_touch(const hps_table_ref_t &t, uint64_t slot,
                                                  uint64_t now)
{
    hps__gcache_touch_seen(t, slot, now,
                           t.policy == HPS_GCACHE_LFU ? 0 : __ldcg(&hps__gcache_stamp(t, slot)));
}

/*
 * Storage codecs: how a kernel reads a slot row of each storage type
 * (include/hps/dtype.h's layouts) as fp32.  chunk(row, c): output elements
 * 4c .. 4c + 3 as a float4, for dim % 4 == 0 (the vectorized kernels; the
 * row is 16-byte aligned for fp32, 8 for fp16/bf16, 4 for int8, by the
 * slot stride of hps__gcache_gc_row_words); one(row, j): element j, any dim.
 * Decoding is exact for fp16 and bf16 (widening), and for int8 is the one
 * fp32 multiply q * scale of hps_dtype_decode (__fmul_rn: never contracted),
 * so a row decodes here to the same bits as on the host.  pol: an L2
 * policy for the row's loads (hps__gcache_pol_evict_first), or 0 for a plain .cg
 * load.
 */
template <int DT> struct hps__gcache_codec;

template <> struct hps__gcache_codec<HPS_DTYPE_FP32> {
    static __device__ __forceinline__ float4 chunk(const float *row, uint32_t c, uint64_t pol)
    {
        const float4 *a = (const float4 *)row + c;
        return pol ? hps__gcache_ld_f4_pol(a, pol) : __ldcg(a);
    }
    static __device__ __forceinline__ float one(const float *row, uint32_t j)
    {
        return __ldcg(row + j);
    }
};

/* binary16 bits (the low 16 of h) to binary32, exactly as the host's
 * hps_fp16_to_float: integer steps, so NaN payloads and the signalling bit
 * cross unchanged (cvt.f32.f16 may canonicalize a NaN).  A subnormal
 * becomes the int conversion of its mantissa with 24 taken off the
 * exponent: exact, as em < 2^10. */
__device__ __forceinline__ float hps__gcache_h2f(uint32_t h)
{
    uint32_t sign = (h & 0x8000u) << 16, em = h & 0x7fffu;
    uint32_t r = em >= 0x7c00u  ? (em << 13) | 0x7f800000u
                 : em >= 0x400u ? (em << 13) + (112u << 23)
                 : em != 0      ? __float_as_uint((float)(int)em) - (24u << 23)
                                : 0u;
    return __uint_as_float(sign | r);
}

__device__ __forceinline__ uint2 hps__gcache_ld_u2(const uint2 *a, uint64_t pol)
{
#if __CUDA_ARCH__ >= 800
    if (pol) {
        uint2 r;
        asm volatile("ld.global.cg.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;"
                     : "=r"(r.x), "=r"(r.y)
                     : "l"(a), "l"(pol));
        return r;
    }
#endif
    (void)pol;
    return __ldcg(a);
}

__device__ __forceinline__ uint32_t hps__gcache_ld_u1(const uint32_t *a, uint64_t pol)
{
#if __CUDA_ARCH__ >= 800
    if (pol) {
        uint32_t r;
        asm volatile("ld.global.cg.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(r) : "l"(a), "l"(pol));
        return r;
    }
#endif
    (void)pol;
    return __ldcg(a);
}

template <> struct hps__gcache_codec<HPS_DTYPE_FP16> {
    static __device__ __forceinline__ float4 chunk(const float *row, uint32_t c, uint64_t pol)
    {
        uint2 u = hps__gcache_ld_u2((const uint2 *)row + c, pol);
        return make_float4(hps__gcache_h2f(u.x & 0xffffu), hps__gcache_h2f(u.x >> 16),
                           hps__gcache_h2f(u.y & 0xffffu), hps__gcache_h2f(u.y >> 16));
    }
    static __device__ __forceinline__ float one(const float *row, uint32_t j)
    {
        return hps__gcache_h2f(__ldcg((const unsigned short *)row + j));
    }
};

template <> struct hps__gcache_codec<HPS_DTYPE_BF16> {
    static __device__ __forceinline__ float4 chunk(const float *row, uint32_t c, uint64_t pol)
    {
        uint2 u = hps__gcache_ld_u2((const uint2 *)row + c, pol);
        return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                           __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
    }
    static __device__ __forceinline__ float one(const float *row, uint32_t j)
    {
        return __uint_as_float((uint32_t)__ldcg((const unsigned short *)row + j) << 16);
    }
};

/* int8: word 0 is the scale, the q bytes follow (element 4c's byte is the
 * low byte of word 1 + c: little-endian, as the host wrote it). */
template <> struct hps__gcache_codec<HPS_DTYPE_INT8> {
    static __device__ __forceinline__ float4 chunk(const float *row, uint32_t c, uint64_t pol)
    {
        float s = __ldcg(row);
        uint32_t w = hps__gcache_ld_u1((const uint32_t *)row + 1 + c, pol);
        return make_float4(__fmul_rn((float)(int8_t)(w & 0xffu), s),
                           __fmul_rn((float)(int8_t)((w >> 8) & 0xffu), s),
                           __fmul_rn((float)(int8_t)((w >> 16) & 0xffu), s),
                           __fmul_rn((float)(int8_t)(w >> 24), s));
    }
    static __device__ __forceinline__ float one(const float *row, uint32_t j)
    {
        return __fmul_rn((float)__ldcg((const signed char *)(row + 1) + j), __ldcg(row));
    }
};

/* Copy one slot row to dim fp32 outputs with the lanes of a warp. */
template <int DT>
__device__ __forceinline__ void hps__gcache_copy_row(float *dst, const float *src, uint32_t dim,
                                                     int lane, bool vec4)
{
    if (vec4) {
        float4 *d = (float4 *)dst;
        for (uint32_t c = lane; c < dim / 4; c += 32)
            d[c] = hps__gcache_codec<DT>::chunk(src, c, 0);
    } else {
        for (uint32_t c = lane; c < dim; c += 32)
            dst[c] = hps__gcache_codec<DT>::one(src, c);
    }
}

/* The slot row of slot. */
__device__ __forceinline__ const float *hps__gcache_row(const hps_table_ref_t &t, uint64_t slot)
{
    return t.vals + slot * t.rwords;
}

/*
 * Seqlock read of one key by a whole warp: wait for an even version, probe,
 * copy the row into dst, fence, re-read the version; repeat on a change.
 * Returns the slot or -1 (then dst is untouched).
 */
template <int DT>
__device__ __forceinline__ int64_t hps__gcache_read_key(const hps_table_ref_t &t, int64_t key,
                                                        float *dst, int lane, bool vec4)
{
    uint64_t set = hps__gcache_set_of(t, key);
    for (;;) {
        uint32_t v1 = 0;
        if (!__all_sync(0xffffffffu, hps__gcache_wait_even(&t.ver[set], &v1)))
            return -1;       /* why: stuck lock of a killed writer; the CPU path answers */
        hps__gcache_fence(); /* why: the probe and row loads must not pass the version load */
        int way = hps__gcache_probe(t, set, key, lane);
        uint64_t slot = set * HPS_GCACHE_WAYS + (uint64_t)way;
        if (way >= 0)
            hps__gcache_copy_row<DT>(dst, hps__gcache_row(t, slot), t.dim, lane, vec4);
        hps__gcache_fence(); /* why: the re-read must see any writer that overlapped the copy */
        uint32_t v2 = hps__gcache_ld_ver(&t.ver[set]);
        if (__all_sync(0xffffffffu, v1 == v2))
            return way >= 0 ? (int64_t)slot : -1;
    }
}

/* hps__gcache_read_key of the table's own storage type (chosen at run time: for
 * kernels that serve tables of several types, k_lookup_tables). */
__device__ __forceinline__ int64_t hps__gcache_read_key_any(const hps_table_ref_t &t, int64_t key,
                                                            float *dst, int lane, bool vec4)
{
    switch (t.dtype) {
    case HPS_DTYPE_FP16:
        return hps__gcache_read_key<HPS_DTYPE_FP16>(t, key, dst, lane, vec4);
    case HPS_DTYPE_BF16:
        return hps__gcache_read_key<HPS_DTYPE_BF16>(t, key, dst, lane, vec4);
    case HPS_DTYPE_INT8:
        return hps__gcache_read_key<HPS_DTYPE_INT8>(t, key, dst, lane, vec4);
    default:
        return hps__gcache_read_key<HPS_DTYPE_FP32>(t, key, dst, lane, vec4);
    }
}

/* Sum of v over the block, returned to every thread: a warp-shuffle sum
 * per warp, then the warps' sums from shared memory (no shared atomics:
 * 64-bit ones are compare-and-swap loops that serialize a whole block).
 * Every thread of the block must call it (it synchronizes the block);
 * blockDim.x a multiple of 32. */
__device__ __forceinline__ uint64_t hps__gcache_block_sum(uint64_t v)
{
    __shared__ unsigned long long part[32];
#pragma unroll
    for (int o = 16; o; o >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = v;
    __syncthreads();
    uint64_t tot = 0;
    for (unsigned i = 0; i < blockDim.x / 32; i++)
        tot += part[i];
    __syncthreads(); /* nobody rewrites part before every thread has read it */
    return tot;
}

/* Block-aggregated counter add: lane values summed per block, one atomic.
 * Every thread of the block must call it (it synchronizes the block). */
__device__ __forceinline__ void hps__gcache_block_add(uint64_t *ctr, uint64_t v)
{
    uint64_t tot = hps__gcache_block_sum(v);
    if (threadIdx.x == 0 && tot)
        atomicAdd((unsigned long long *)ctr, (unsigned long long)tot);
}

#endif /* __CUDACC__ */

#ifdef __cplusplus
extern "C" {
#endif
/* Launchers (kernels/<op>.cu). */
hps_err_t hps_k_init(const hps_table_ref_t *ref, cudaStream_t stream);
/* Per cache, on its device (current): the block kernels' shared-memory
 * carveouts (a per-device function attribute) and ref->occ. */
hps_err_t hps_k_lookup_setup(hps_table_ref_t *ref);
hps_err_t hps_k_lookup_fused(const hps_table_ref_t *ref, const hps_ws_ref_t *ws,
                             const int64_t *d_keys, uint64_t n, float *d_out, uint8_t *d_hit_mask,
                             uint32_t *d_missing_index, uint32_t *d_missing_count,
                             cudaStream_t stream);
hps_err_t hps_k_lookup_block(const hps_table_ref_t *ref, const hps_ws_ref_t *ws,
                             const int64_t *d_keys, uint64_t n, float *d_out, uint8_t *d_hit_mask,
                             uint32_t *d_missing_index, uint32_t *d_missing_count,
                             cudaStream_t stream);
hps_err_t hps_k_dedup_probe(const hps_table_ref_t *ref, const hps_ws_ref_t *ws,
                            const int64_t *d_keys, uint64_t n, cudaStream_t stream);
hps_err_t hps_k_scatter(const hps_table_ref_t *ref, const hps_ws_ref_t *ws, const int64_t *d_keys,
                        uint64_t n, float *d_out, uint8_t *d_hit_mask, uint32_t *d_missing_index,
                        uint32_t *d_missing_count, cudaStream_t stream);
/* d_values: (n, row bytes of ref's dtype and dim) packed, as hps_dtype_encode writes them. */
hps_err_t hps_k_insert(const hps_table_ref_t *ref, const int64_t *d_keys, const void *d_values,
                       uint64_t n, int update_only, cudaStream_t stream);
hps_err_t hps_k_dump(const hps_table_ref_t *ref, uint64_t start_set, uint64_t end_set,
                     int64_t *d_keys_out, uint32_t *d_count, cudaStream_t stream);
/* Occupied slots among [lo, hi) (slot numbers) added to *d_count. */
hps_err_t hps_k_occupancy(const hps_table_ref_t *ref, uint64_t lo, uint64_t hi,
                          unsigned long long *d_count, cudaStream_t stream);
hps_err_t hps_k_repair(const hps_table_ref_t *ref, const uint32_t *d_snapshot,
                       unsigned long long *d_count, uint64_t dead, cudaStream_t stream);
/* CUDA VMM (kernels/share.cu).  In: c->bytes, c->num_shards, c->shard_dev;
 * out: c->bytes rounded to the granularity, the parts, c->shard_set,
 * c->base.  create writes c->num_parts descriptors to ret_fds
 * (HPS_GCACHE_MAX_PARTS); import takes the creator's, num_fds of them. */
hps_err_t hps__gcache_vmm_create(hps_gcache_t *c, int *ret_fds);
hps_err_t hps__gcache_vmm_import(hps_gcache_t *c, const int *fds, uint32_t num_fds);
void hps__gcache_vmm_release(hps_gcache_t *c);
/* The most device bytes one shard takes (the plan of hps__gcache_vmm_create at
 * granularity g); the granularity of a device. */
uint64_t hps__gcache_vmm_max_shard_bytes(uint64_t num_sets, uint32_t rwords, uint32_t num_shards,
                                         uint64_t g);
uint64_t hps__gcache_vmm_granularity(int device);
/* 4-byte words of one slot row: fp32 exactly dim (the layout of before
 * storage types); the compact types' stored row (hps_dtype_row_bytes)
 * rounded up to 16 bytes, so that the stored lookup copies whole rows with
 * 16-byte loads where its row count allows (int8 at dim 128: 132 -> 144
 * bytes), and the decoding loads of every type stay aligned. */
static inline uint32_t hps__gcache_gc_row_words(int dtype, uint32_t dim)
{
    if (dtype == HPS_DTYPE_FP32)
        return dim;
    return (uint32_t)((hps_dtype_row_bytes((hps_dtype_t)dtype, dim) + 15) / 16 * 4);
}

/* The arrays of a cache of num_sets sets of rwords-word rows inside its one
 * allocation, in this order, each 256-byte aligned: (key, stamp) records,
 * tags, vals, ver, clock + counters.  off[i] is array i's offset, off[5] the
 * total.  Every process that maps a shared cache derives the same offsets. */
static inline void hps__gcache_gc_offsets(uint64_t num_sets, uint32_t rwords, uint64_t off[6])
{
    uint64_t slots = num_sets * HPS_GCACHE_WAYS;
    uint64_t sizes[5] = {slots * 2 * sizeof(uint64_t), slots, slots * rwords * sizeof(float),
                         num_sets * sizeof(uint32_t), (1 + HPS_GC_NCTR) * sizeof(uint64_t)};
    off[0] = 0;
    for (int i = 0; i < 5; i++)
        off[i + 1] = off[i] + ((sizes[i] + 255) & ~(uint64_t)255);
}
#ifdef __cplusplus
}
#endif

#endif /* HPS_GCACHE_INTERNAL_CUH */
