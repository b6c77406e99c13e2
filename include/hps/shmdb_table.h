/*
 * shmdb_table.h -- the tables of a shared-memory segment
 * (include/hps/shmdb.h) and their rows: creation, lookup by name,
 * descriptions and counters, batch lookup, upsert, erase, iteration, the
 * consistency check, and the memory a row takes.
 */
#ifndef HPS_SHMDB_TABLE_H
#define HPS_SHMDB_TABLE_H

#include "hps/shmdb.h"

#ifdef __cplusplus
extern "C" {
#endif

/** What a table is; given to hps_shmdb_table_create. */
typedef struct hps_table_spec {
    const char *model;       /**< model name, 1..120 chars of [A-Za-z0-9_-] */
    const char *table;       /**< table name, same alphabet */
    uint32_t dim;            /**< embedding_vecsize: floats per vector, 1..65536 */
    uint32_t key_bytes;      /**< 8 (int64 keys, supportlonglong) or 4 (uint32) */
    float default_value;     /**< default_value_for_each_table: every element */
    uint32_t num_partitions; /**< 1..256; must never change once data exists */
    /** overflow_margin: max rows per partition; UINT64_MAX = unbounded. */
    uint64_t overflow_margin;
    hps_overflow_policy_t overflow_policy;
    /** overflow_resolution_target in (0, 1]: evict down to margin * target. */
    double overflow_resolution_target;
    /** Expected rows of the whole table (sizes the first allocation); 0 = small. */
    uint64_t expected_rows;
    /** Rows of the table's model files (0 = unknown): kept for the GPU
     *  caches, sized by gpucacheper of the whole table, not of what the
     *  volatile DB holds. */
    uint64_t source_rows;
    /** The model's version ([model.<name>] version), 0 = none: workers
     *  report the version the segment they serve from holds. */
    uint32_t model_version;
    /** How rows are stored ([model.<name>] storage_type); HPS_DTYPE_FP32
     *  (0, what a zero-initialized spec gives) keeps them bit for bit.  Part
     *  of the geometry: an existing table of another type is a mismatch. */
    hps_dtype_t storage_type;
    /** The table's 1-based position among its model's tables
     *  (embedding_table_names: the order of a request's KEYS and NUMKEYS);
     *  0 = not said.  A process that serves the model in another order
     *  does not take the table for its own (a reload that reorders or
     *  renames tables; worker/libhps/shape.c).  Not part of the geometry:
     *  an existing table is opened whatever it says. */
    uint32_t order;
} hps_table_spec_t;

/** Counters and geometry of one partition (a snapshot). */
typedef struct hps_partition_info {
    uint64_t rows;      /**< live rows */
    uint64_t capacity;  /**< slots allocated (rows fit up to 92% of this) */
    uint64_t bytes;     /**< bytes of the partition's block in the segment */
    uint64_t evictions; /**< rows evicted by overflow handling */
    uint64_t repairs;   /**< EOWNERDEAD repairs of this partition */
} hps_partition_info_t;

/** A table's description and counters (a snapshot). */
typedef struct hps_table_info {
    char model[HPS_SHMDB_NAME_MAX + 1];
    char table[HPS_SHMDB_NAME_MAX + 1];
    uint32_t id;
    uint32_t dim;
    uint32_t key_bytes;
    uint32_t num_partitions;
    float default_value;
    uint64_t overflow_margin;
    hps_overflow_policy_t overflow_policy;
    double overflow_resolution_target;
    uint64_t rows;            /**< sum over partitions */
    uint64_t source_rows;     /**< rows of the model files (hps_table_spec_t), 0 = unknown */
    uint32_t model_version;   /**< hps_table_spec_t.model_version */
    hps_dtype_t storage_type; /**< hps_table_spec_t.storage_type */
    uint32_t order;           /**< hps_table_spec_t.order; 0 = not recorded */
    uint32_t row_bytes;  /**< bytes of one stored row: hps_dtype_row_bytes(storage_type, dim) */
    uint32_t slot_bytes; /**< bytes a row takes in the segment: row_bytes rounded up to 4 */
    uint64_t capacity;   /**< slots, sum over partitions */
    uint64_t bytes;      /**< segment bytes held by the table's blocks */
    uint64_t lookups;    /**< keys looked up */
    uint64_t hits;       /**< keys found */
    uint64_t inserts;    /**< rows inserted (new keys) */
    uint64_t updates;    /**< rows overwritten (existing keys) */
    uint64_t evictions;  /**< rows evicted by overflow handling */
    uint64_t erased;     /**< rows erased on request */
} hps_table_info_t;

/* ------------------------------------------------------------------------ */
/* Tables                                                                    */
/* ------------------------------------------------------------------------ */

/**
 * @brief Create a table, or open it if it exists with the same dim,
 *        key_bytes, num_partitions and storage_type.
 * @param[in]  spec    The table (copied; its strings need not outlive the call).
 *                     spec->storage_type fixes how every row is stored for
 *                     the table's life (its descriptor in the segment).
 * @param[out] ret_id  Table id, stable for the segment's life.
 * @return 0; HPS_EINVAL for a bad name, dim 0 or > HPS_SHMDB_MAX_DIM, key
 *         width other than 4 or 8, partitions outside 1..256, target outside
 *         (0, 1], a storage_type that is no hps_dtype_t; HPS_EMISMATCH if the
 *         table exists with another geometry (storage type included);
 *         HPS_EFULL if the segment already has HPS_SHMDB_MAX_TABLES tables;
 *         HPS_ENOSPC if the first blocks do not fit the segment, -ENOSPC if
 *         /dev/shm has no room to commit them.
 * Process-safe (segment lock).
 */
hps_err_t hps_shmdb_table_create(hps_shmdb_t *db, const hps_table_spec_t *spec, uint32_t *ret_id);

/**
 * @brief Find a table by (model, table).  Lock-free.
 * @return 0; HPS_ENOTFOUND.
 */
hps_err_t hps_shmdb_table_find(hps_shmdb_t *db, const char *model, const char *table,
                               uint32_t *ret_id);

/** @brief Number of tables; ids are 0 .. n-1.  Lock-free. */
uint32_t hps_shmdb_table_count(hps_shmdb_t *db);

/**
 * @brief Description and counters of a table (a snapshot, not atomic as a
 *        whole).  @return 0; HPS_ENOTFOUND for a bad id.
 */
hps_err_t hps_shmdb_table_info(hps_shmdb_t *db, uint32_t id, hps_table_info_t *ret);

/**
 * @brief Record which distributed-DB (Redis) rows table id was built
 *        beside: ident is a nonzero hash of the table's record there
 *        (hps_ddb_record_get; the identity of the model files its rows came
 *        from), so that a later coordinator asks Redis for this segment's
 *        misses only while Redis still holds those rows.  Coordinator only.
 * @return 0; HPS_ENOTFOUND for a bad id.
 */
hps_err_t hps_shmdb_table_set_ddb_ident(hps_shmdb_t *db, uint32_t id, uint64_t ident);

/**
 * @brief The ident of hps_shmdb_table_set_ddb_ident(); 0 when none was
 *        recorded (no distributed DB, or a segment of an earlier build) or
 *        id is bad.  Lock-free.
 */
uint64_t hps_shmdb_table_ddb_ident(hps_shmdb_t *db, uint32_t id);

/**
 * @brief Record the identity of the model files table id was loaded from:
 *        ident is a nonzero hash of their paths, sizes, modification times
 *        and contents (the persistent DB's record of them), so that the
 *        next build beside this segment can tell a table whose files did not
 *        change and carry its rows over (the online updates applied to them
 *        included).  Coordinator only.
 * @return 0; HPS_ENOTFOUND for a bad id.
 */
hps_err_t hps_shmdb_table_set_files_ident(hps_shmdb_t *db, uint32_t id, uint64_t ident);

/**
 * @brief The ident of hps_shmdb_table_set_files_ident(); 0 when none was
 *        recorded (a segment of an earlier build) or id is bad.  Lock-free.
 */
uint64_t hps_shmdb_table_files_ident(hps_shmdb_t *db, uint32_t id);

/** A table directory entry as stored, for tools that list a damaged
 *  segment (hps_shmdb_table_entry). */
typedef struct hps_table_entry {
    /** The names as stored: at most HPS_SHMDB_NAME_MAX bytes of each field
     *  (cut there when no NUL ends it), bytes not checked. */
    char model[HPS_SHMDB_NAME_MAX + 1];
    char table[HPS_SHMDB_NAME_MAX + 1];
    /** What is wrong with the entry ("storage type 99 is no type (0..3)",
     *  "model name: no terminating NUL within its 128 bytes"), "" if none. */
    char problem[192];
} hps_table_entry_t;

/**
 * @brief Directory entry id as stored, and whether it is sound: each id
 *        names the same entry whatever its state, in the order of the
 *        directory (ids 0 .. hps_shmdb_table_count() - 1).
 * @param[out] ret  The entry (zeroed first, then the names, and the problem
 *                  for HPS_ECORRUPT).
 * @return 0: a sound entry (hps_shmdb_table_info() and the row calls use
 *         it); HPS_ECORRUPT: the descriptor is corrupt (a geometry field
 *         out of range, its partition array out of bounds or misaligned:
 *         the other calls answer HPS_ENOTFOUND for the id) or one of its
 *         names is (no NUL, empty, too long or a byte outside
 *         [A-Za-z0-9_-]: a name no table is created with; the other calls
 *         still use the entry); HPS_ENOTFOUND: id is not below the table
 *         count, or the count is above HPS_SHMDB_MAX_TABLES (corrupt).
 *         Lock-free; touches no counter.
 */
hps_err_t hps_shmdb_table_entry(hps_shmdb_t *db, uint32_t id, hps_table_entry_t *ret);

/**
 * @brief Per-partition counters.
 * @param[out] parts  Array of at least info.num_partitions entries (host).
 * @return 0; HPS_ENOTFOUND.
 */
hps_err_t hps_shmdb_partition_info(hps_shmdb_t *db, uint32_t id, hps_partition_info_t *parts);

/* ------------------------------------------------------------------------ */
/* Rows                                                                      */
/* ------------------------------------------------------------------------ */

/**
 * @brief Batch lookup, lock-free.
 * @param[in]  id      Table id.
 * @param[in]  n       Number of keys.
 * @param[in]  keys    (n) keys in host memory: int64 for key_bytes 8,
 *                     uint32 for key_bytes 4.  Duplicates allowed.
 * @param[out] values  (n, dim) float32, host memory, 4-byte aligned,
 *                     row-major, input order.  Rows of found keys are
 *                     decoded from the table's storage type (identity for
 *                     fp32).  Rows of missing keys are filled with the
 *                     table's default value (every element), so the output
 *                     is always fully written and never holds a torn row.
 * @param[out] found   (n) uint8, 1 = found, 0 = missing; may be NULL.
 * @param[out] ret_hits Number of keys found; may be NULL.
 * @return 0; HPS_ENOTFOUND for a bad table id.  Never blocks on a writer; a
 *         key whose bucket stays busy through the retry budget reports missing.
 * Thread- and process-safe.  Counts lookups and hits in the table.
 * Updates the access stamps used by evict_least_used / evict_oldest.
 */
hps_err_t hps_shmdb_lookup(hps_shmdb_t *db, uint32_t id, size_t n, const void *keys, float *values,
                           uint8_t *found, size_t *ret_hits);

/** Flags of hps_shmdb_lookup_ex(). */
typedef enum hps_shmdb_lookup_flags {
    /** Leave the table's lookups and hits counters alone: a caller that may
     *  look the same keys up again (libhps's lookup that cannot wait for
     *  misses on an HTTP loop, then does wait on a lookup thread) counts
     *  the one lookup that answers with hps_shmdb_count_lookups(). */
    HPS_SHMDB_LOOKUP_UNCOUNTED = 1u << 0,
} hps_shmdb_lookup_flags_t;

/**
 * @brief hps_shmdb_lookup() with flags (hps_shmdb_lookup_flags_t, or 0 for
 *        exactly hps_shmdb_lookup()).  Same parameters, returns and safety;
 *        also HPS_EINVAL for a flag bit that is not a
 *        hps_shmdb_lookup_flags_t (as hps_client_lookup_ex()).
 */
hps_err_t hps_shmdb_lookup_ex(hps_shmdb_t *db, uint32_t id, size_t n, const void *keys,
                              float *values, uint8_t *found, size_t *ret_hits, unsigned flags);

/**
 * @brief Add to table id's lookups and hits counters (hps_table_info_t,
 *        hps-shm info) what an uncounted lookup found.
 * @param[in] lookups  Keys looked up.
 * @param[in] hits     Of those, found (at most lookups).
 * @return 0; HPS_ENOTFOUND for a bad table id.  Lock-free (relaxed atomic
 *         adds); thread- and process-safe.
 */
hps_err_t hps_shmdb_count_lookups(hps_shmdb_t *db, uint32_t id, uint64_t lookups, uint64_t hits);

/**
 * @brief Batch insert-or-update (upsert).
 * @param[in] n       Number of rows.
 * @param[in] keys    (n) keys, host memory, width as in lookup.
 * @param[in] values  (n, dim) float32, host memory, 4-byte aligned,
 *                    row-major; each row is encoded into the table's
 *                    storage type (hps_dtype_encode()) before it is written.
 * @param[out] ret_inserted  New keys inserted (others were updated); may be NULL.
 * @return 0; HPS_ENOTFOUND for a bad table id; -ENOMEM if the encoding
 *         buffer of a non-fp32 table cannot be allocated (those partitions'
 *         rows are not written); -ENOSPC when /dev/shm itself is full (the
 *         machine's memory, not the segment's size: posix_fallocate
 *         failed): the rows that fit are written, the others are not, and
 *         no row is evicted for them (a caller retries: Kafka's consumer
 *         does, with back-off).  When a partition reaches its
 *         overflow_margin, or cannot grow because the segment is full
 *         (shared_memory_size), rows are evicted by the table's
 *         overflow_policy down to margin * overflow_resolution_target
 *         before inserting: the call never fails for the segment's own
 *         size once the table exists.
 * Thread- and process-safe (per-partition robust mutex).  Each row is written
 * fully before its key becomes visible.  Duplicate keys in one batch: the
 * last one wins.  Where the first user-space write to each page of shared
 * memory traps to a hypervisor (a probe, once per handle, finds the
 * mapping's first writes over twice as slow as pwrite()), a partition's
 * share of 64 or more keys in a table of row pages (stored rows over 64
 * bytes) writes its new rows with pwrite() on the handle's descriptor of
 * the segment before publishing the keys (shmdb/ops.c, BULK ROWS); the
 * environment variable HPS_SHMDB_ROW_WRITES=mapping or =pwrite, read at
 * that first large upsert, forces the choice.
 */
hps_err_t hps_shmdb_upsert(hps_shmdb_t *db, uint32_t id, size_t n, const void *keys,
                           const float *values, size_t *ret_inserted);

/**
 * @brief Erase keys.  @param[out] ret_erased rows removed; may be NULL.
 * @return 0; HPS_ENOTFOUND for a bad table id.  Thread- and process-safe.
 */
hps_err_t hps_shmdb_erase(hps_shmdb_t *db, uint32_t id, size_t n, const void *keys,
                          size_t *ret_erased);

/**
 * @brief Remove every row of a table (the table and its geometry remain).
 * @return 0; HPS_ENOTFOUND.  Thread- and process-safe.
 */
hps_err_t hps_shmdb_clear(hps_shmdb_t *db, uint32_t id);

/**
 * @brief Live rows of a table (sum of partition counters).  Lock-free.
 * @param[out] ret_rows  The count.
 * @return 0; HPS_ENOTFOUND for a bad table id.
 */
hps_err_t hps_shmdb_size(hps_shmdb_t *db, uint32_t id, uint64_t *ret_rows);

/**
 * Row visitor for hps_shmdb_iterate().  key is zero-extended for 32-bit
 * tables; value points to (dim) floats (decoded from the table's storage
 * type; host memory) valid only during the call.
 * Return 0 to go on, anything else to stop (returned by iterate).
 */
typedef int (*hps_shmdb_row_fn)(void *ctx, uint64_t key, const float *value);

/**
 * @brief Visit every row of a table, partition by partition.  Each partition
 * is walked under its writer lock (repairing it first if its last holder
 * died), so every row is seen exactly once and consistent; writers to that
 * partition wait meanwhile (keep fn short), readers never do.
 * @return 0; HPS_ENOTFOUND; -errno if a lock cannot be taken; -ENOMEM (no
 *         decoding buffer); or the visitor's non-zero return.
 */
hps_err_t hps_shmdb_iterate(hps_shmdb_t *db, uint32_t id, hps_shmdb_row_fn fn, void *ctx);

/**
 * @brief Read one row as it is stored (in the table's storage type, not
 *        decoded), lock-free, for tools that show the stored value.
 * @param[in]  id         Table id.
 * @param[in]  key        The key: an int64 key's bits, or a 32-bit key
 *                        zero-extended (above UINT32_MAX: not found).
 * @param[out] out        Host memory, any alignment, at least
 *                        hps_table_info_t.row_bytes bytes; receives the
 *                        stored row in the layout of include/hps/dtype.h
 *                        (row_bytes bytes) only when the key is found.
 * @param[in]  out_len    Bytes available at out.
 * @param[out] ret_found  true when the key is present (a key whose bucket
 *                        stays busy through the retry budget reads as
 *                        absent, as in hps_shmdb_lookup()).
 * @return 0; HPS_ENOTFOUND for a bad table id; HPS_EINVAL for out or
 *         ret_found NULL or out_len < row_bytes; -ENOMEM.  Thread- and
 *         process-safe; touches no counter and no access stamp.
 */
hps_err_t hps_shmdb_lookup_stored(hps_shmdb_t *db, uint32_t id, uint64_t key, void *out,
                                  size_t out_len, bool *ret_found);

/**
 * Problem reporter for hps_shmdb_check(): one call per inconsistency found.
 */
typedef void (*hps_shmdb_report_fn)(void *ctx, const char *msg);

/**
 * @brief Full consistency check of the segment: header, allocator, every
 *        table and partition (bounds, even versions, row counts, probe
 *        counters, no duplicate keys, every key in its partition and
 *        reachable from its home bucket).  Takes each partition's writer lock
 *        while checking it (repairing it first if its holder died).
 * @param[out] ret_problems  Number of problems found.
 * @return 0 when the walk finished (problems are counted, not errors);
 *         -errno on a lock failure.
 */
hps_err_t hps_shmdb_check(hps_shmdb_t *db, hps_shmdb_report_fn report, void *ctx,
                          uint64_t *ret_problems);

/**
 * @brief Bytes of segment memory an fp32 table with this geometry needs per
 *        slot (key, bucket header, value, access stamp), for sizing and
 *        reports: hps_shmdb_bytes_per_slot_of(dim, policy, HPS_DTYPE_FP32).
 */
double hps_shmdb_bytes_per_slot(uint32_t dim, hps_overflow_policy_t policy);

/**
 * @brief Bytes of segment memory per slot of a table of dim elements
 *        stored as dtype (key, bucket header, row id, stored value rounded
 *        up to 4 bytes, access stamp), counting a row in a row page for
 *        every slot; the layout is the one hps_shmdb_table_create() picks.
 * @param[in] dim     1 .. HPS_SHMDB_MAX_DIM.
 * @param[in] policy  The overflow policy (access stamps for LRU and LFU).
 * @param[in] dtype   The storage type.
 * @return The bytes (a fraction: bucket headers are shared by 7 slots);
 *         0.0 for dim 0 or a dtype that is no type.  Pure; thread-safe.
 */
double hps_shmdb_bytes_per_slot_of(uint32_t dim, hps_overflow_policy_t policy, hps_dtype_t dtype);

#ifdef __cplusplus
}
#endif
#endif /* HPS_SHMDB_TABLE_H */
