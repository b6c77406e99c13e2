/*
 * shmdb_gcache.h -- the GPU-cache registry of a shared-memory segment.
 *
 * One entry per GPU embedding cache (model, table, device), shared by the
 * workers of that device (docs/architecture.md): the creator claims an entry, builds
 * and preloads the cache, and marks it READY; every other worker of the
 * device imports it through a descriptor handed out by a listed process,
 * and one of them, the refresher, publishes its counters.  The entries live
 * in the segment of include/hps/shmdb.h, whose handle every call takes.
 */
#ifndef HPS_SHMDB_GCACHE_H
#define HPS_SHMDB_GCACHE_H

#include "hps/shmdb.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Registry entries in a segment (caches of all devices together). */
#define HPS_SHMDB_MAX_GCACHES 256
/** Processes recorded per cache (more may use it; they are not listed). */
#define HPS_SHMDB_GCACHE_PROCS 16
/** Most devices one sharded cache spans (HPS_GCACHE_MAX_SHARDS of gcache.h). */
#define HPS_SHMDB_GCACHE_SHARDS 8
/** The device of a registry entry whose cache is sharded over shard_dev. */
#define HPS_SHMDB_GCACHE_SHARDED (-1)

/** State of a registry entry. */
typedef enum hps_gcache_state {
    HPS_GCACHE_FREE = 0,     /**< unused */
    HPS_GCACHE_CREATING = 1, /**< the creator is allocating and preloading it */
    HPS_GCACHE_READY = 2,    /**< importable: every listed process can hand out its descriptor */
} hps_gcache_state_t;

/** Counters a process publishes for a cache (hps_shmdb_gcache_publish). */
typedef struct hps_gcache_counters {
    uint64_t occupied;       /**< slots holding a key */
    uint64_t lookups;        /**< keys looked up, all processes */
    uint64_t hits;           /**< of those, found */
    uint64_t inserts;        /**< rows written by insert */
    uint64_t evictions;      /**< rows displaced by insert */
    uint64_t refreshed;      /**< rows overwritten from the lower layers (updates, refresh) */
    uint64_t full_refreshes; /**< whole-cache refreshes (timer, lapped update log) */
    uint64_t lock_timeouts;  /**< writes skipped on a set left locked */
    uint64_t repaired_sets;  /**< sets emptied after a process died mid-write */
    uint64_t published_ns;   /**< CLOCK_REALTIME of the publication, ns */
    /** Sharded caches: occupied slots of the sets homed on shard_dev[j]. */
    uint64_t shard_occupied[HPS_SHMDB_GCACHE_SHARDS];
} hps_gcache_counters_t;

/** A registry entry (snapshot). */
typedef struct hps_gcache_reg {
    uint32_t index; /**< entry number, 0..HPS_SHMDB_MAX_GCACHES-1 */
    hps_gcache_state_t state;
    uint32_t table_id;      /**< segment table the cache holds rows of */
    int32_t device;         /**< CUDA device ordinal, or HPS_SHMDB_GCACHE_SHARDED */
    uint32_t dim;           /**< floats per row */
    uint32_t policy;        /**< hps_gcache_policy_t (gcache.h) */
    uint64_t capacity_rows; /**< as passed to hps_gcache_create_shared */
    uint64_t bytes;         /**< device bytes of the allocation */
    uint64_t generation;    /**< bumped each time the entry is (re)created */
    pid_t creator_pid;      /**< process that created this generation */
    pid_t refresher_pid;    /**< process that refreshes it (updates, timer); 0 = none */
    uint32_t num_pids;
    pid_t pids[HPS_SHMDB_GCACHE_PROCS]; /**< processes that map it (alive at the call) */
    hps_gcache_counters_t counters;
    /** Sharded caches (device == HPS_SHMDB_GCACHE_SHARDED; otherwise
     *  num_shards is 1 and shard_dev[0] the device): the devices the memory
     *  spans, in the order every process maps them (claim reads these). */
    uint32_t num_shards;
    int32_t shard_dev[HPS_SHMDB_GCACHE_SHARDS];
    /** Set by hps_shmdb_gcache_parts: the cache's VMM descriptors (1 unless
     *  sharded) and the device bytes of each shard. */
    uint32_t num_parts;
    uint64_t shard_bytes[HPS_SHMDB_GCACHE_SHARDS];
} hps_gcache_reg_t;

/**
 * @brief Find the cache of (table_id, device), or claim an entry to create it.
 *
 * Under the segment's directory lock:
 *  - a READY entry of the same dim and policy with a live process listed:
 *    this process is added to its list; *ret_creator = false: import it
 *    with the entry's capacity_rows (descriptor from a listed process);
 *  - an entry being created by a live process: HPS_EBUSY, retry later;
 *  - no entry, or one whose processes are all dead (the memory is gone
 *    with them): the entry is (re)claimed with generation + 1, state
 *    CREATING, this process as creator, refresher and only listed process;
 *    *ret_creator = true: create it, then call hps_shmdb_gcache_ready().
 * @param[in] want  table_id, device, dim, policy and capacity_rows (what a
 *                  creator would start with) are read, and for device
 *                  HPS_SHMDB_GCACHE_SHARDED num_shards (1..8) and
 *                  shard_dev; the rest is ignored.  A sharded cache is one
 *                  entry per table whatever the devices.
 * @param[out] ret  the entry after the call (index, generation ...).
 * @return 0; HPS_EBUSY (being created); HPS_EMISMATCH (live entry of another
 *         dim, policy or shard devices); HPS_EFULL
 *         (registry full, or the entry's process list is full); HPS_ENOSPC;
 *         HPS_EINVAL.  Process-safe.
 */
hps_err_t hps_shmdb_gcache_claim(hps_shmdb_t *db, const hps_gcache_reg_t *want,
                                 hps_gcache_reg_t *ret, bool *ret_creator);

/**
 * @brief The creator says the cache is preloaded and importable, with the
 * shape it finally has (it may have grown the capacity while preloading).
 * @return 0; HPS_ENOTFOUND (the entry was reclaimed: another generation,
 *         or FREE); HPS_EINVAL (NULL db, index out of range).
 */
hps_err_t hps_shmdb_gcache_ready(hps_shmdb_t *db, uint32_t index, uint64_t generation,
                                 uint64_t capacity_rows, uint64_t bytes);

/**
 * @brief The creator records how a sharded cache's memory is split, before
 * hps_shmdb_gcache_ready: importers need every descriptor (num_parts,
 * 1..64) and tools show shard_bytes (num_shards of the claim, bytes each).
 * @return 0; HPS_ENOTFOUND (entry reclaimed); HPS_EINVAL.
 */
hps_err_t hps_shmdb_gcache_parts(hps_shmdb_t *db, uint32_t index, uint64_t generation,
                                 uint32_t num_parts, const uint64_t *shard_bytes);

/**
 * @brief This process no longer maps the cache (or failed to create it): it
 * leaves the list; an entry with no live process left becomes FREE.
 * @return 0; HPS_ENOTFOUND (not listed or another generation); HPS_EINVAL.
 */
hps_err_t hps_shmdb_gcache_leave(hps_shmdb_t *db, uint32_t index, uint64_t generation);

/**
 * @brief Drop dead processes from the entry's list and elect a refresher.
 * If the refresher is dead (or none), the calling process becomes it.
 * @param[out] ret_dropped    dead processes removed by this call (a dead
 *                            process may have left a set locked:
 *                            hps_gcache_repair), or NULL.
 * @param[out] ret_refresher  true if the caller is the refresher, or NULL.
 * @return 0; HPS_ENOTFOUND (entry recycled: other generation, or FREE);
 *         HPS_EINVAL (NULL db, index out of range).
 */
hps_err_t hps_shmdb_gcache_prune(hps_shmdb_t *db, uint32_t index, uint64_t generation,
                                 uint32_t *ret_dropped, bool *ret_refresher);

/**
 * @brief Publish the cache's counters (by its refresher, for hps-shm and metrics).
 * @return 0; HPS_ENOTFOUND (no registry, another generation, or the entry
 *         is FREE); HPS_EINVAL (NULL db or c, index out of range).  Lock-free.
 */
hps_err_t hps_shmdb_gcache_publish(hps_shmdb_t *db, uint32_t index, uint64_t generation,
                                   const hps_gcache_counters_t *c);

/**
 * @brief Read entry `index` (any state); dead processes are left out of pids.
 * @return 0; HPS_ENOTFOUND when the segment has no registry yet; HPS_EINVAL.
 *         Lock-free snapshot (fields may be from two moments).
 */
hps_err_t hps_shmdb_gcache_get(hps_shmdb_t *db, uint32_t index, hps_gcache_reg_t *ret);

#ifdef __cplusplus
}
#endif
#endif /* HPS_SHMDB_GCACHE_H */
