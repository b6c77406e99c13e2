/*
 * shmdb_stats.h -- statistics the coordinator publishes in a shared-memory
 * segment (include/hps/shmdb.h) for the workers: its update counters per
 * layer and its distributed DB's (Redis) counters.
 */
#ifndef HPS_SHMDB_STATS_H
#define HPS_SHMDB_STATS_H

#include "hps/shmdb.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Update statistics: the coordinator's update counters, for the workers    */
/* ------------------------------------------------------------------------ */

/** Layers that publish update statistics. */
#define HPS_SHMDB_UPDATE_LAYERS 3 /**< 0 volatile, 1 persistent, 2 distributed */
/** Skipped-message counters per layer, indexed 0 .. HPS_SHMDB_UPDATE_REASONS - 1.  The
 *  segment stores them anonymous: what an index means, and its name, belong
 *  to the update source (hps_update_reason_name(), include/hps/update.h). */
#define HPS_SHMDB_UPDATE_REASONS 8

/** Counters of one layer's update consumer (monotonic unless noted). */
typedef struct hps_update_stats {
    uint64_t messages;                          /**< messages received */
    uint64_t received;                          /**< updates in accepted messages */
    uint64_t nonfinite;                         /**< of those, with a NaN / Inf value */
    uint64_t applied;                           /**< updates applied to the layer */
    uint64_t skipped[HPS_SHMDB_UPDATE_REASONS]; /**< messages skipped, by reason index */
    uint64_t beacons;                           /**< header-only messages */
    uint64_t errors;                            /**< consumer errors and updates dropped */
    int64_t lag;                                /**< gauge: consumer lag (messages), -1 unknown */
    int64_t newest_applied_ms;                  /**< wall clock (ms) of the last apply, 0 none */
    int64_t published_ms;                       /**< wall clock (ms) of this snapshot */
    uint64_t offset_resets;                     /**< offset resets (hps_kafka_stats_t) */
} hps_update_stats_t;

/** @brief Name of a layer index ("volatile", "persistent", "distributed"), NULL if out of range. */
const char *hps_shmdb_update_layer_name(uint32_t layer);

/**
 * @brief Publish one layer's counters in the segment (the coordinator, once
 *        per stats tick).  The area is created on first use (dir_lock).
 *        Each field is stored with a relaxed atomic store: readers see every
 *        field whole, not necessarily one consistent snapshot.
 * @param[in] layer  0 .. HPS_SHMDB_UPDATE_LAYERS - 1.
 * @param[in] s      Host struct; s->published_ms is taken as given.
 * @return 0; HPS_EINVAL (bad layer); HPS_ENOSPC if the segment is full.
 * Process-safe for one writer per layer.
 */
hps_err_t hps_shmdb_update_stats_set(hps_shmdb_t *db, uint32_t layer, const hps_update_stats_t *s);

/**
 * @brief Read one layer's published counters (relaxed atomic loads).
 * @param[out] ret  Host struct.
 * @return 0; HPS_EINVAL (bad layer); HPS_ENOTFOUND when that layer never
 *         published (no update ingestion, or not this layer).
 * Lock-free; thread- and process-safe.
 */
hps_err_t hps_shmdb_update_stats_get(hps_shmdb_t *db, uint32_t layer, hps_update_stats_t *ret);

/* ------------------------------------------------------------------------ */
/* Distributed-DB statistics: the coordinator's Redis counters, for workers */
/* ------------------------------------------------------------------------ */

/** Counters of the coordinator's distributed DB (Redis Cluster) since it
 *  opened it: hps_ddb_stats_t of include/hps/ddb.h (monotonic unless noted). */
typedef struct hps_shmdb_ddb_stats {
    uint64_t lookup_keys;     /**< keys looked up (the misses of the volatile DB) */
    uint64_t lookup_hits;     /**< of those, found */
    uint64_t insert_rows;     /**< rows written (loading, cache_missed_embeddings) */
    uint64_t evicted_rows;    /**< rows removed by overflow handling */
    uint64_t errors;          /**< failed calls: lookups, inserts, access-tracking batches */
    uint64_t touches_dropped; /**< hits not tracked (LFU/LRU): the touch queue was full */
    uint64_t bad_values;      /**< stored values of another length than dim * 4: misses */
    int64_t published_ms;     /**< wall clock (ms) of this snapshot */
} hps_shmdb_ddb_stats_t;

/**
 * @brief Publish the distributed DB's counters in the segment (the
 *        coordinator, about once a second, when a distributed DB is
 *        configured).  The area is created on first use (dir_lock).  Each
 *        field is stored with a relaxed atomic store: readers see every
 *        field whole, not necessarily one consistent snapshot.
 * @param[in] s  Host struct; s->published_ms is taken as given.
 * @return 0; HPS_EINVAL (NULL); HPS_ENOSPC if the segment is full.
 * Process-safe for one writer.
 */
hps_err_t hps_shmdb_ddb_stats_set(hps_shmdb_t *db, const hps_shmdb_ddb_stats_t *s);

/**
 * @brief Read the distributed DB's published counters (relaxed atomic loads).
 * @param[out] ret  Host struct.
 * @return 0; HPS_EINVAL (NULL); HPS_ENOTFOUND when none was published (no
 *         distributed DB, or a coordinator of a build before it).
 * Lock-free; thread- and process-safe.
 */
hps_err_t hps_shmdb_ddb_stats_get(hps_shmdb_t *db, hps_shmdb_ddb_stats_t *ret);

#ifdef __cplusplus
}
#endif
#endif /* HPS_SHMDB_STATS_H */
