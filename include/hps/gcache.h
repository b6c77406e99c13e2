/*
 * gcache.h -- the GPU embedding cache (kernels/): one per (model, table, device).
 *
 * Layout.  capacity_rows is rounded up to whole sets of HPS_GCACHE_WAYS (32)
 * slots: one warp probes one set, lane w looking at way w.  Device memory:
 *   rec    uint64  [num_sets][32][2]  per slot its key (HPS_GCACHE_EMPTY_KEY
 *                                    marks a free slot) and its stamp (LRU:
 *                                    clock at last use, to the resolution of
 *                                    hps_gcache_set_lru_resolution; LFU: use
 *                                    count), side
 *                                    by side: one sector serves the key check
 *                                    and the stamp
 *   tags   uint8   [num_sets][32]   one-byte key fingerprints, 0 = free way
 *   vals   [num_sets * 32] slot rows, one per slot: the row in the cache's
 *          storage type (below), hps_gcache_row_bytes() apart
 *   ver    uint32  [num_sets]       per-set seqlock word (even = stable)
 *   clock, counters                  a few uint64 words
 * set(key) = (splitmix64(key) * num_sets) >> 64 (128-bit product).  A key
 * lives in at most one slot.
 *
 * Storage type (issue 22; include/hps/dtype.h).  A cache stores its rows as
 * fp32, fp16, bf16 or int8 ([model.<name>] storage_type, the volatile DB's
 * type).  A slot row is the stored row of hps_dtype_encode's layout: fp32
 * exactly dim floats (the layout of before storage types); the compact
 * types' row (2 * dim bytes, or a 4-byte scale and dim int8) followed by
 * zero padding up to a multiple of 16 bytes (int8 at dim 128: 132 bytes
 * stored in 144), so that the kernels load whole aligned chunks.  Writers
 * (insert, update) take rows already encoded by the caller and copy bytes,
 * never converting: a slot holds the bytes the volatile DB holds, because
 * the encoding is idempotent (dtype.h: a decoded row encodes back to the
 * same bytes).  hps_gcache_lookup decodes while it copies (exact widening
 * for fp16 / bf16, the one fp32 multiply of hps_dtype_decode for int8), so
 * its fp32 output equals the host decoding bit for bit;
 * hps_gcache_lookup_stored copies the stored rows unconverted (half the
 * bytes of fp32 for fp16 / bf16, about a quarter for int8).
 *
 * Concurrency.
 *  - Lookups take no lock.  A reader reads the set's version (waiting while
 *    odd), probes, copies the row, then re-reads the version; on a change it
 *    probes and copies again.  A returned row is therefore always one
 *    complete inserted version of that key, never a mix of two.  The loads
 *    are ordered by address dependencies (FUSED, GLOBAL) or by a barrier
 *    after completed loads (BLOCK); hps_gcache_set_strict() switches to
 *    fence.acq_rel, the PTX memory model's formal recipe.  The slow path
 *    (after a change) always uses fences.
 *  - Writer epoch: every block of an insert, update or repair kernel counts
 *    itself in two device counters, begun before its first write and ended
 *    after its last.  A BLOCK lookup loads ended when a chunk starts and
 *    begun after the chunk's copies; equal means that no writer ran in
 *    between (ended <= begun, both only grow), so nothing read can have
 *    changed.  Above 64K keys, a chunk that starts with no writer in flight
 *    therefore reads no set version at all, and if a writer did run, it
 *    reads each of its hits again with the seqlock read; other chunks
 *    validate per set as above.
 *  - insert / update lock a set by atomicCAS of its version from even v to
 *    v + 1 and release it by storing v + 2.  The lock lives in device memory,
 *    so it works across streams, threads and (later) processes sharing the
 *    memory.  Writers spin with nanosleep backoff; readers never wait on a
 *    lock other than for the few instructions of one row write.
 *  - Every call is asynchronous on the caller's stream; calls on different
 *    streams may run concurrently against one cache.  The host-side handle is
 *    read-only after create, so any host thread may call at any time, except
 *    hps_gcache_destroy(), which must be the last call, after every stream
 *    that used the cache has been synchronized.
 *
 * Lookup paths (hps_gcache_lookup; hps_gcache_set_lookup_path forces one).
 *  - FUSED, for n <= HPS_GCACHE_FUSED_MAX: one kernel, a warp per input key
 *    (probe + copy + validate), no de-duplication.
 *  - BLOCK, the default above that (dim % 4 == 0, dim <= 128, 16-byte
 *    aligned d_out): one kernel; each block de-duplicates a chunk of up to
 *    1024 keys in shared memory, probes each unique key once, copies the rows
 *    per occurrence, then validates each unique key's set version once
 *    (above 64K keys, only if the writer epoch moved, and it reads no
 *    versions at all while no writer is in flight).
 *  - GLOBAL, the default for other shapes: (1) hash-based unique of the keys
 *    in the workspace's table, the first occurrence of each key probing the
 *    cache and recording (set version, slot) for its entry; (2) a warp per
 *    input key copies the row of its entry straight into d_out, validates the
 *    recorded version and clears the entry for the next call.
 *  FUSED (vectorized) and BLOCK overlap consecutive calls on a stream on
 *  sm_90 and later: one call's probes run while the previous call copies
 *  (hps_gcache_set_overlap, which states what this asks of d_keys).
 *  No path materializes unique rows: the bytes moved are those of an ideal
 *  gather plus the probes (BLOCK, GLOBAL: the set's 32 tag bytes and the
 *  matching slot's record; FUSED: the set's 512 bytes of records) and index
 *  words.
 *
 * Memory.  A cache is one device allocation holding every array above
 * (256-byte aligned, in that order, offsets derived from num_sets, dim and
 * the storage type).
 * hps_gcache_create takes it from cudaMalloc (private to the process);
 * hps_gcache_create_shared from the CUDA virtual memory management API with
 * a POSIX file-descriptor handle, which other processes of the same host
 * map with hps_gcache_import after receiving the descriptor (SCM_RIGHTS).
 * Every mapping and every open descriptor holds a reference: the memory
 * lives until the last process that mapped it has destroyed its handle or
 * exited, whichever process created it (worker/libhps/gshare.c).
 * The seqlock words work across processes as they do across streams.  A
 * process killed while writing can leave a set locked: readers wait at most
 * ~2^14 short sleeps and then answer miss, writers give up after ~2^16
 * (counted in lock_timeouts), and hps_gcache_repair empties and unlocks
 * such sets.
 *
 * Errors: every function returns 0 or a negative code (hps/hps.h):
 * HPS_EINVAL for bad arguments, -ENOMEM when device memory runs out,
 * HPS_EIO for any other CUDA error (the CUDA error is cleared).  Out-params
 * are written only on success.  Only available in builds with CUDA
 * (HPS_HAVE_CUDA in hps_build_config.h).
 */
#ifndef HPS_GCACHE_H
#define HPS_GCACHE_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#include "hps/dtype.h"
#include "hps/hps.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hps_gcache hps_gcache_t;
typedef struct hps_gcache_ws hps_gcache_ws_t;
typedef struct hps_gcache_set hps_gcache_set_t;

/** Ways per set: one warp lane per way. */
#define HPS_GCACHE_WAYS 32
/** The one key that cannot be cached (marks free slots); always a miss. */
#define HPS_GCACHE_EMPTY_KEY INT64_MAX
/** Default LRU resolution in lookups (hps_gcache_set_lru_resolution): exact. */
#define HPS_GCACHE_LRU_RESOLUTION 1
/** Largest batch served by the fused (no de-duplication) lookup kernel. */
#define HPS_GCACHE_FUSED_MAX 1024
/** Largest dimension accepted. */
#define HPS_GCACHE_MAX_DIM HPS_MAX_DIM

/** Lookup path (hps_gcache_set_lookup_path). */
typedef enum hps_gcache_path {
    HPS_GCACHE_PATH_AUTO = 0,  /**< FUSED up to the fused maximum, then BLOCK or GLOBAL */
    HPS_GCACHE_PATH_FUSED = 1, /**< no de-duplication */
    HPS_GCACHE_PATH_BLOCK =
        2, /**< per-block shared-memory de-duplication (GLOBAL if the shape does not allow it) */
    HPS_GCACHE_PATH_GLOBAL = 3, /**< batch-wide de-duplication in the workspace, two kernels */
} hps_gcache_path_t;

/** Replacement policy when a set is full. */
typedef enum hps_gcache_policy {
    HPS_GCACHE_LRU = 0, /**< evict the slot least recently read or written */
    HPS_GCACHE_LFU = 1, /**< evict the slot read fewest times since insertion */
} hps_gcache_policy_t;

/** Counters since create (hps_gcache_stats). */
typedef struct hps_gcache_stats {
    uint64_t capacity_rows; /**< slots: num_sets * 32 */
    uint64_t num_sets;
    uint64_t occupied;      /**< slots holding a key (counted by a kernel) */
    uint64_t lookups;       /**< keys looked up (input keys, duplicates included) */
    uint64_t hits;          /**< of those, found */
    uint64_t inserts;       /**< keys written by insert (new or overwritten) */
    uint64_t evictions;     /**< keys displaced by insert */
    uint64_t updates;       /**< keys overwritten by update */
    uint64_t lock_timeouts; /**< writes skipped because a set stayed locked */
    /** writer kernel blocks begun and not yet ended: 0 when no insert, update
     *  or repair runs.  Nonzero while none runs means a writer was killed
     *  mid-kernel; BLOCK lookups then validate every set they read (the
     *  writer epoch, see Concurrency), correct but slower, until
     *  hps_gcache_repair counts the dead blocks as ended. */
    uint64_t writer_blocks_open;
} hps_gcache_stats_t;

/**
 * @brief Create an empty cache on a device.
 * @param[in] capacity_rows  rows wanted (> 0); rounded up to whole sets.
 * @param[in] dim            elements per row, 1..HPS_GCACHE_MAX_DIM.
 * @param[in] dtype          storage type of the rows (HPS_DTYPE_*; the
 *                           table's storage_type).
 * @param[in] policy         HPS_GCACHE_LRU or HPS_GCACHE_LFU.
 * @param[in] device         CUDA device ordinal; becomes the current device
 *                           of the calling thread.
 * @param[out] ret_cache     the handle.
 * @return 0, HPS_EINVAL, -ENOMEM or HPS_EIO.  Synchronous (the memory is
 *         initialized before it returns).
 */
hps_err_t hps_gcache_create(uint64_t capacity_rows, uint32_t dim, hps_dtype_t dtype,
                            hps_gcache_policy_t policy, int device, hps_gcache_t **ret_cache);

/**
 * @brief Create an empty cache in shareable device memory (CUDA VMM, POSIX
 * file-descriptor handle), for hps_gcache_import in other processes.
 * @param[in] capacity_rows, dim, dtype, policy, device  as hps_gcache_create.
 * @param[out] ret_cache  the handle of this process.
 * @param[out] ret_fd     a descriptor of the allocation, owned by the caller:
 *                        pass it to other processes (SCM_RIGHTS), close it
 *                        when no process needs to import any more.  It keeps
 *                        the memory alive while open, like any mapping.
 * @return 0, HPS_EINVAL, -ENOMEM or HPS_EIO (also when the driver lacks VMM
 *         or POSIX-descriptor handles).  Synchronous.
 */
hps_err_t hps_gcache_create_shared(uint64_t capacity_rows, uint32_t dim, hps_dtype_t dtype,
                                   hps_gcache_policy_t policy, int device, hps_gcache_t **ret_cache,
                                   int *ret_fd);

/**
 * @brief Map a cache created by hps_gcache_create_shared in another process.
 * @param[in] fd  the creator's descriptor as received in this process (not
 *                taken over: the caller still closes it); the shape
 *                arguments must be the creator's, or the mapping is refused
 *                (size mismatch) or, worse, misread: they come from the
 *                registry entry that published the cache (shmdb), and
 *                dtype from the segment's table (its storage_type).
 * @param[out] ret_cache  the handle of this process; its contents are the
 *                live shared cache (not initialized).
 * @return 0, HPS_EINVAL, -ENOMEM or HPS_EIO.
 */
hps_err_t hps_gcache_import(int fd, uint64_t capacity_rows, uint32_t dim, hps_dtype_t dtype,
                            hps_gcache_policy_t policy, int device, hps_gcache_t **ret_cache);

/** @brief Bytes of device memory the cache occupies (after rounding). */
uint64_t hps_gcache_bytes(const hps_gcache_t *cache);

/** Most devices one sharded cache spans. */
#define HPS_GCACHE_MAX_SHARDS 8
/** Most VMM allocations (descriptors) of one sharded cache: each of its
 *  four arrays split once per device, and the counters. */
#define HPS_GCACHE_MAX_PARTS (4 * HPS_GCACHE_MAX_SHARDS + 1)

/**
 * Sharding: one cache whose memory spans several devices of the host.
 *
 * The cache keeps the layout above in ONE virtual address range; each of its
 * arrays (records, tags, rows, set versions) is cut into num_devices
 * consecutive pieces at multiples of the VMM granularity (2 MiB), piece j
 * backed by device memory of devices[j].  A set, and so every key hashed to
 * it, is homed on the device that holds its rows (and, but within one
 * granule of a cut, its records, tags and version).  Every process maps
 * every piece with access for its own device, so the unchanged kernels read
 * local sets from HBM and remote ones over NVLink (peer access), writing the
 * rows straight into the caller's output; capacity grows with the device
 * count.  The clock and counters words lie in the last piece.  Each piece is
 * its own VMM allocation with its own POSIX descriptor (parts), all of which
 * an importing process needs; every mapping holds a reference to every
 * piece, so the cache lives while any process maps it.
 */
typedef struct hps_gcache_shards {
    uint32_t num_devices;               /**< 1..HPS_GCACHE_MAX_SHARDS */
    int devices[HPS_GCACHE_MAX_SHARDS]; /**< CUDA ordinals, distinct */
} hps_gcache_shards_t;

/**
 * @brief Create an empty cache sharded over shards->devices (see above).
 * @param[in] capacity_rows, dim, dtype, policy  as hps_gcache_create (the
 *                         whole cache: each device holds about 1/num_devices).
 * @param[in] device       the calling process's device (the kernels it
 *                         launches run there); need not be in the list, but
 *                         must have peer access to every device in it.
 * @param[in] shards       the devices, in the order every process uses.
 * @param[out] ret_cache   the handle of this process.
 * @param[out] ret_fds     (HPS_GCACHE_MAX_PARTS) descriptors of the pieces,
 *                         owned by the caller (as hps_gcache_create_shared's).
 * @param[out] ret_num_fds how many were written.
 * @return 0; HPS_EINVAL; HPS_EUNSUPPORTED (a device of the list cannot be
 *         reached from device by peer access, or no VMM); -ENOMEM; HPS_EIO.
 *         Synchronous.
 */
hps_err_t hps_gcache_create_sharded(uint64_t capacity_rows, uint32_t dim, hps_dtype_t dtype,
                                    hps_gcache_policy_t policy, int device,
                                    const hps_gcache_shards_t *shards, hps_gcache_t **ret_cache,
                                    int *ret_fds, uint32_t *ret_num_fds);

/**
 * @brief Map a sharded cache created by another process.
 * @param[in] fds      its num_fds descriptors in part order (not taken over).
 * @param[in] capacity_rows, dim, dtype, policy, shards  the creator's (from
 *                     the registry entry and the table); device: this
 *                     process's device.
 * @return 0; HPS_EINVAL (also num_fds not the creator's part count);
 *         HPS_EUNSUPPORTED (no peer access); -ENOMEM; HPS_EIO.
 */
hps_err_t hps_gcache_import_sharded(const int *fds, uint32_t num_fds, uint64_t capacity_rows,
                                    uint32_t dim, hps_dtype_t dtype, hps_gcache_policy_t policy,
                                    int device, const hps_gcache_shards_t *shards,
                                    hps_gcache_t **ret_cache);

/** @brief Devices the cache's memory lies on: 1 unless sharded. */
uint32_t hps_gcache_num_shards(const hps_gcache_t *cache);

/**
 * @brief One shard of a cache: its device, the device bytes it holds and the
 * occupied slots of the sets homed there (a kernel on the cache's device,
 * synchronous; one caller at a time per cache, as hps_gcache_stats).
 * An unsharded cache has one shard, the whole cache.
 * @return 0; HPS_EINVAL (shard >= hps_gcache_num_shards); HPS_EIO.
 */
hps_err_t hps_gcache_shard_stats(hps_gcache_t *cache, uint32_t shard, int *ret_device,
                                 uint64_t *ret_bytes, uint64_t *ret_occupied);

/**
 * @brief The largest capacity_rows (a multiple of HPS_GCACHE_WAYS, 0 when
 * none fits) whose cache of rows of dim elements stored as dtype takes at
 * most max_bytes of device memory on each of num_devices devices (num_devices 1: an unsharded
 * shareable cache), by the exact split of hps_gcache_create_sharded at the VMM granularity of
 * device 0 (2 MiB assumed when the driver cannot say).  Host only; a cudaMalloc cache
 * (hps_gcache_create) takes at most as much.
 */
uint64_t hps_gcache_rows_within(uint64_t max_bytes, uint32_t dim, hps_dtype_t dtype,
                                uint32_t num_devices);

/**
 * @brief Unlock the sets left locked by a process killed while writing.
 *
 * Snapshots every set version and the writer epoch's two counters, sleeps
 * wait_ms (a live writer holds a set for microseconds), then empties every
 * set still locked with the snapshot's version and unlocks it.  If no
 * writer block began or ended during the wait, the blocks still open (of a
 * killed writer) are then counted as ended, which gives large lookups back
 * their fast path (hps_gcache_stats_t.writer_blocks_open).  Run it when a
 * process attached to a shared cache died; concurrent lookups and inserts
 * are safe.  Synchronous; uses 4 bytes per set of temporary device memory.
 * @param[out] ret_repaired  sets emptied and unlocked.
 * @return 0, HPS_EINVAL (wait_ms 0), -ENOMEM or HPS_EIO.
 */
hps_err_t hps_gcache_repair(hps_gcache_t *cache, unsigned wait_ms, uint64_t *ret_repaired);

/** @brief Free the cache (NULL is a no-op).  Synchronizes the device first. */
void hps_gcache_destroy(hps_gcache_t *cache);

/** @brief Row width in elements (the fp32 output of a lookup has dim floats per row). */
uint32_t hps_gcache_dim(const hps_gcache_t *cache);

/** @brief Storage type of the rows (as created). */
hps_dtype_t hps_gcache_storage_type(const hps_gcache_t *cache);

/**
 * @brief Bytes of one slot row, the stride of hps_gcache_lookup_stored's
 * output: 4 * dim for fp32; for the compact types hps_dtype_row_bytes
 * rounded up to a multiple of 16 (the padding bytes are zero).
 */
uint32_t hps_gcache_row_bytes(const hps_gcache_t *cache);

/** @brief Slots (capacity in rows after rounding). */
uint64_t hps_gcache_capacity(const hps_gcache_t *cache);

/** @brief Number of sets. */
uint64_t hps_gcache_num_sets(const hps_gcache_t *cache);

/**
 * @brief Create a lookup workspace for batches of up to max_keys keys.
 *
 * A workspace holds the de-duplication table (about 24 bytes per key of
 * max_keys, rounded to a power of two) and the miss counter.  It belongs to
 * one stream at a time: two lookups in flight at once need two workspaces.
 * Device memory comes from the cache's device.
 * @return 0, HPS_EINVAL, -ENOMEM or HPS_EIO.
 */
hps_err_t hps_gcache_ws_create(hps_gcache_t *cache, uint64_t max_keys, hps_gcache_ws_t **ret_ws);

/**
 * @brief Free a workspace (NULL is a no-op).  Synchronizes the whole device
 * first (cudaDeviceSynchronize: every stream of this process), so lookups
 * enqueued with ws have completed.  Reads ws's cache: call it BEFORE
 * hps_gcache_destroy() of that cache.  No other call may be using ws
 * (enqueuing with it) at the same time.
 */
void hps_gcache_ws_destroy(hps_gcache_ws_t *ws);

/**
 * @brief Look up n keys; hits are written to d_out in input order.
 *
 * @param[in]  d_keys          device, int64[n]; duplicates allowed.
 * @param[in]  n               0..max_keys of the workspace.
 * @param[out] d_out           device, float[n][dim]; row i receives the row of
 *                             d_keys[i] decoded to fp32 on a hit and is left
 *                             untouched on a miss.
 * @param[out] d_hit_mask      device, uint8[n] (1 hit, 0 miss), or NULL.
 * @param[out] d_missing_index device, uint32[n]: the input positions of the
 *                             misses, in no particular order; or NULL.
 * @param[out] d_missing_count device, uint32: number of misses; written when
 *                             d_missing_index is given, NULL otherwise.
 * Duplicate keys are answered identically only if no insert races the call.
 * Stream: everything is enqueued on stream; nothing waits on the host.  The
 * call may start before the previous kernel on stream has completed (see
 * hps_gcache_set_overlap for when d_keys must be complete).
 * @return 0, HPS_EINVAL (n too large, NULL required pointer) or HPS_EIO.
 */
hps_err_t hps_gcache_lookup(hps_gcache_t *cache, hps_gcache_ws_t *ws, const int64_t *d_keys,
                            uint64_t n, float *d_out, uint8_t *d_hit_mask,
                            uint32_t *d_missing_index, uint32_t *d_missing_count,
                            cudaStream_t stream);

/**
 * @brief hps_gcache_lookup with the rows in the storage type, unconverted.
 *
 * Row i of d_out (device, n rows of hps_gcache_row_bytes(cache) bytes,
 * 4-byte aligned; 16-byte aligned for the vectorized paths) receives the
 * slot row of d_keys[i] on a hit: the stored row in dtype.h's layout
 * followed by the zero padding; a miss leaves it untouched.  The same paths,
 * semantics, counters and arguments as hps_gcache_lookup otherwise; for an
 * fp32 cache the two are the same call.  For in-process callers that want
 * fp16 / bf16 tensors, and the benchmark's bytes of a compact gather.
 * @return 0, HPS_EINVAL (also a misaligned d_out) or HPS_EIO.
 */
hps_err_t hps_gcache_lookup_stored(hps_gcache_t *cache, hps_gcache_ws_t *ws, const int64_t *d_keys,
                                   uint64_t n, void *d_out, uint8_t *d_hit_mask,
                                   uint32_t *d_missing_index, uint32_t *d_missing_count,
                                   cudaStream_t stream);

/**
 * @brief The caches of a model's tables, for hps_gcache_lookup_tables.
 *
 * Copies each cache's device view (pointers and geometry) into device
 * memory once.  The caches must outlive the set and be on one device.
 * @param[in] caches      host array of num_tables handles (table order).
 * @param[out] ret        the set; free with hps_gcache_set_destroy.
 * @return 0, HPS_EINVAL (NULL, 0 tables, caches on different devices),
 *         -ENOMEM or HPS_EIO.
 */
hps_err_t hps_gcache_set_create(hps_gcache_t *const *caches, uint32_t num_tables,
                                hps_gcache_set_t **ret);

/**
 * @brief Free a set (NULL is a no-op).  Synchronizes the whole device first
 * (cudaDeviceSynchronize), so lookups enqueued with set have completed.
 * It reads none of the caches, so it may come before or after their
 * hps_gcache_destroy(); but the set must not be used for a lookup once any
 * of its caches is destroyed (its device copy points into their memory).
 * No other call may be using set at the same time.
 */
void hps_gcache_set_destroy(hps_gcache_set_t *set);

/**
 * @brief Look up the keys of every table of a request in one kernel launch.
 *
 * Keys of table t are d_keys[d_key_off[t] .. d_key_off[t+1]); each hit's row,
 * decoded to fp32 from its table's storage type,
 * goes to d_out + d_out_off[t] + (i - d_key_off[t]) * dim_t; a miss leaves its
 * row untouched and appends its table-relative position to
 * d_missing_index[d_key_off[t] + k] (k counted in d_missing_count[t], in no
 * particular order).  No de-duplication (meant for small requests, where the
 * launches of per-table lookups cost more than the probes).
 * @param[in] d_keys           device, int64[n], n = d_key_off[T] (< 2^32).
 * @param[in] d_key_off        device, uint32[T + 1], ascending, [0] = 0.
 * @param[in] d_out_off        device, uint64[T], offsets in floats.
 * @param[out] d_out           device, float: every table's rows.
 * @param[out] d_missing_index device, uint32[n].
 * @param[in,out] d_missing_count device, uint32[T]: must be zero on entry.
 * Concurrency and counters as hps_gcache_lookup.  Asynchronous on stream.
 * @return 0, HPS_EINVAL or HPS_EIO.
 */
hps_err_t hps_gcache_lookup_tables(hps_gcache_set_t *set, const int64_t *d_keys, uint64_t n,
                                   const uint32_t *d_key_off, const uint64_t *d_out_off,
                                   float *d_out, uint32_t *d_missing_index,
                                   uint32_t *d_missing_count, cudaStream_t stream);

/**
 * @brief Copy n rows of dim floats to scattered places: row i of d_rows to
 * d_out + d_dst[i] (offsets in floats).  For patching the misses of a lookup
 * whose output stays on the device.
 * @param[in] d_rows  device, float[n][dim].
 * @param[in] d_dst   device, uint64[n].
 * @return 0, HPS_EINVAL or HPS_EIO.  Asynchronous on stream.
 */
hps_err_t hps_gcache_scatter_rows(const float *d_rows, const uint64_t *d_dst, uint64_t n,
                                  uint32_t dim, float *d_out, cudaStream_t stream);

/**
 * @brief Tuning: under PATH_AUTO, batches of at most max_keys keys take the
 * fused kernel (no de-duplication), larger ones de-duplicate first.
 * Default HPS_GCACHE_FUSED_MAX.  Not synchronized with lookups running on other
 * host threads: set it before sharing the handle.
 */
void hps_gcache_set_fused_max(hps_gcache_t *cache, uint64_t max_keys);

/**
 * @brief Tuning and tests: force a lookup path (default HPS_GCACHE_PATH_AUTO).
 * Not synchronized with lookups on other host threads.
 */
void hps_gcache_set_lookup_path(hps_gcache_t *cache, hps_gcache_path_t path);

/**
 * @brief Tuning: order the loads of a lookup's seqlock validation by
 * fence.acq_rel (strict != 0, the PTX memory model's formal recipe) instead
 * of the default address dependencies (each later load's address depends on
 * the earlier loaded value, so it cannot be performed before it; no fence
 * has to wait for the warp's earlier stores).  Same results; for
 * verification and measurement.  Set before sharing the handle.
 */
void hps_gcache_set_strict(hps_gcache_t *cache, int strict);

/**
 * @brief Tuning: whether lookups overlap the previous kernel on their stream
 * (on != 0; the default on GPUs of compute capability 9.0 and later, where
 * CUDA's programmatic dependent launch exists; ignored before).  The FUSED
 * (dim % 4 == 0, dim <= 128, aligned d_out) and BLOCK kernels then let the
 * next kernel on the stream start as soon as each of their blocks has
 * started, and themselves load d_keys and probe the cache while the
 * previous kernel may still run; they write d_out, the hit mask, the miss
 * list and the workspace only after it has completed.  So back-to-back
 * lookups pipeline: one call's probes run beside the last one's copies.
 * The contract: d_keys must be complete when the previous kernel on the
 * stream starts, i.e. not written by a kernel that lets its dependents
 * start early (cudaTriggerProgrammaticLaunchCompletion), such as the
 * previous lookup (as its d_out, hit mask or miss list).  Memory copies,
 * memsets and kernels that do not use programmatic dependent launch
 * always complete first.  hps_gcache_lookup_tables does not overlap.  Set
 * before sharing the handle (not synchronized with lookups on other host
 * threads).
 */
void hps_gcache_set_overlap(hps_gcache_t *cache, int on);

/**
 * @brief Tuning: LRU resolution.  The lookup clock advances once per lookup
 * call, and time is cut into windows of `lookups` calls (a power of two;
 * default HPS_GCACHE_LRU_RESOLUTION = 1, exact: HugeCTR's gpu_cache
 * semantics).  A hit rewrites a row's stamp only if the stamp lies in an
 * earlier window than the lookup, so a row is restamped at most once per
 * window, by its first use there.
 *
 * What this keeps: a row used in a later window always ranks as more
 * recent than a row last used (or inserted) in an earlier one.  What it
 * gives up: within one window, rows rank by their first use or insert
 * there, not their last.  What it buys: a stamp rewrite is a random
 * 32-byte write to device memory per unique hit key: on an H200, a
 * resolution of 64 made lookups of 256K and 1M keys about 3% faster
 * (bench-gpu-cache --lru-resolution; kernels/NOTES.md).  The victim of a
 * full set is the way with the smallest stamp (the lowest way on ties).
 * LFU counts are not affected.  Set before sharing the handle or creating
 * a hps_gcache_set_t from it (not synchronized with lookups on other host
 * threads).
 * @return 0, or HPS_EINVAL for a NULL cache or `lookups` not a power of two.
 */
hps_err_t hps_gcache_set_lru_resolution(hps_gcache_t *cache, uint32_t lookups);

/**
 * @brief Insert or overwrite n rows; evicts by the policy when a set is full.
 *
 * @param[in] d_keys    device, int64[n]; HPS_GCACHE_EMPTY_KEY entries are
 *                      skipped; with duplicates, one of the rows wins.
 * @param[in] d_values  device, n rows encoded in the cache's storage type,
 *                      packed as hps_dtype_encode writes them
 *                      (hps_dtype_row_bytes apart; fp32: float[n][dim]);
 *                      copied as bytes, never converted.
 * New rows get stamp = clock (LRU) or 1 (LFU); overwritten rows keep their
 * LFU count.  Asynchronous on stream.
 * @return 0, HPS_EINVAL or HPS_EIO.
 */
hps_err_t hps_gcache_insert(hps_gcache_t *cache, const int64_t *d_keys, const void *d_values,
                            uint64_t n, cudaStream_t stream);

/**
 * @brief Overwrite the rows of keys already in the cache; others are ignored.
 * Same arguments and semantics as hps_gcache_insert, never evicts (refresh).
 */
hps_err_t hps_gcache_update(hps_gcache_t *cache, const int64_t *d_keys, const void *d_values,
                            uint64_t n, cudaStream_t stream);

/**
 * @brief Copy the keys of sets [start_set, end_set) to d_keys_out.
 *
 * @param[out] d_keys_out  device, int64 with room for (end-start)*32 keys.
 * @param[out] d_count     device, uint32: keys written (zeroed on stream first).
 * A snapshot under concurrent inserts may miss or repeat moved keys.
 * @return 0, HPS_EINVAL (bad range) or HPS_EIO.
 */
hps_err_t hps_gcache_dump(hps_gcache_t *cache, uint64_t start_set, uint64_t end_set,
                          int64_t *d_keys_out, uint32_t *d_count, cudaStream_t stream);

/**
 * @brief Take back from the lookup counters what a lookup counted whose
 * answer its caller discarded and will ask again (libhps: an event-loop
 * attempt that would have waited for the coordinator), so each request is
 * counted once.
 * @param[in] lookups, hits  as that lookup counted them: its keys, and its
 *                           keys minus its misses.
 * @return 0, HPS_EINVAL or HPS_EIO.  Asynchronous on stream.
 */
hps_err_t hps_gcache_uncount(hps_gcache_t *cache, uint64_t lookups, uint64_t hits,
                             cudaStream_t stream);

/**
 * @brief Read the counters (synchronous: an occupancy count and two copies
 * on the handle's own non-blocking stream, no allocation, so it never waits
 * for other streams' work).  Calls on one handle are serialized.
 * @return 0; HPS_EINVAL (NULL argument); HPS_EIO.
 */
hps_err_t hps_gcache_stats(hps_gcache_t *cache, hps_gcache_stats_t *ret_stats);

#ifdef __cplusplus
}
#endif

#endif /* HPS_GCACHE_H */
