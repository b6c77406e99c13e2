/*
 * ddb.h -- the distributed database (DDB): embedding tables in a Redis
 * Cluster, in NVIDIA HugeCTR's layout (reference/hugectr-hps.md §3), so a
 * cluster written by HugeCTR's HPS is readable here and the reverse.
 *
 * Layout.  A table is num_partitions Redis hashes; key k goes to partition
 * p = hps_rrxmrrxmsx_0((uint64_t)k) % num_partitions (32-bit keys
 * zero-extended).  Partition p of table <table> of model <model>:
 *   values   hps_et{hps_et.<model>.<table>/p<p>}v   field = raw key bytes
 *            (key_bytes, little-endian), value = raw float32 vector (dim*4)
 *   metadata hps_et{hps_et.<model>.<table>/p<p>}t   field = raw key bytes,
 *            value = evict_least_used: decimal access counter (HINCRBY);
 *            evict_oldest: raw 8-byte time_t (seconds); evict_random: none.
 * The hash tag puts both hashes of a partition on one node.
 *
 * Commands.  A lookup sends one HMGET per partition batch of at most
 * max_batch_size keys, all partitions in one hps_rcluster_exec() (pipelined
 * per node, nodes in parallel).  Hits of LFU/LRU tables are then touched
 * (HINCRBY / HSET time) by a background thread of the handle, as HugeCTR's
 * worker did: a bounded queue (2^20 keys; when full, touches are dropped and
 * counted in touches_dropped) that hps_ddb_close() drains.  An insert sends
 * per batch the metadata write, HSET of the values and HLEN.
 *
 * Overflow.  A partition whose HLEN exceeds overflow_margin is shrunk to
 * (size_t)(overflow_margin * overflow_resolution_target + 0.5) rows at once:
 * evict_random picks victims uniformly among the value hash's fields (HKEYS
 * of ...}v: upstream read the never-written meta hash and never evicted);
 * evict_least_used the smallest counters, evict_oldest the oldest times;
 * a row without metadata counts as least used / oldest.  Victims are
 * deleted from both hashes (HDEL).  Every policy thus keeps each partition
 * at or under its margin after each insert call.
 *
 * Failures.  A lookup whose partitions could not all be read returns an
 * error but still fills values and found for the partitions that answered:
 * the caller treats the rest as misses and asks the layer below.  A lookup
 * never takes longer than lookup_timeout_ms (a hung node included); other
 * calls have timeout_ms.
 *
 * TLS: hiredis 0.14 has no TLS; enable_tls = true is refused by
 * hps_ddb_open() with HPS_EUNSUPPORTED and a message saying so.
 *
 * Thread safety.  Every function may be called from any number of threads
 * at once, except hps_ddb_close() (last call).  Memory: all buffers are host
 * memory owned by the caller; table handles are owned by the hps_ddb_t.
 *
 * Errors: hps_err_t; messages into err[0..err_len) when err is not NULL.
 * The library never prints.
 */
#ifndef HPS_DDB_H
#define HPS_DDB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hps/hps.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hps_ddb hps_ddb_t;
/** One table of an open DDB; owned by the hps_ddb_t. */
typedef struct hps_ddb_table hps_ddb_table_t;

/** Longest name of a partition hash (with the NUL). */
#define HPS_DDB_KEY_MAX 280

/** Options of hps_ddb_open(); fill with hps_ddb_opts_init() first. */
typedef struct hps_ddb_opts {
    const char *address;                   /**< "host:port[,...]" seeds */
    const char *user_name;                 /**< ACL user ("default": password only) */
    const char *password;                  /**< "" = no AUTH */
    unsigned num_partitions;               /**< hashes per table, 1..65535 */
    unsigned num_node_connections;         /**< connections per node, >= 1 */
    size_t max_batch_size;                 /**< most fields per command, >= 1 */
    uint64_t overflow_margin;              /**< most rows per partition (UINT64_MAX: none) */
    hps_overflow_policy_t overflow_policy; /**< [distributed_db] overflow_policy */
    double overflow_resolution_target;     /**< in (0, 1] */
    bool enable_tls;                       /**< refused: no TLS in hiredis 0.14 */
    unsigned timeout_ms;                   /**< deadline of one call, lookups excepted */
    /** Deadline of one hps_ddb_lookup() (all its HMGETs, every node at once,
     *  connects and slot-map refreshes included); 0: timeout_ms.  A node that
     *  lets it pass is skipped for a back-off period (see rcluster.h). */
    unsigned lookup_timeout_ms;
    /** Called with a one-line message (NUL-terminated, valid during the
     *  call) when hps_ddb_lookup() meets a stored value whose length is not
     *  dim * 4 bytes (answered as a miss, counted in bad_values): at most
     *  once per table per HPS_DDB_WARN_INTERVAL_S seconds, from the looking-up
     *  thread (so it must be thread-safe).  NULL: no call.  The library never
     *  prints; the caller logs. */
    void (*warn)(void *warn_ctx, const char *msg);
    void *warn_ctx; /**< passed to warn */
} hps_ddb_opts_t;

/** Least time between two hps_ddb_opts_t.warn calls for one table. */
#define HPS_DDB_WARN_INTERVAL_S 60

/** Counters since open (see hps_ddb_stats()). */
typedef struct hps_ddb_stats {
    uint64_t lookup_keys, lookup_hits, insert_rows, evicted_rows, errors;
    uint64_t touches_dropped; /**< hit keys not tracked: the touch queue was full */
    /** Stored values of another length than the table's dim * 4 bytes met
     *  by lookups (written for another dimension or by another writer):
     *  each is answered as a miss (see hps_ddb_opts_t.warn). */
    uint64_t bad_values;
} hps_ddb_stats_t;

/**
 * @brief HugeCTR's defaults: address 127.0.0.1:7000, user "default", no
 *        password, 8 partitions, 5 connections per node, batches of 65536,
 *        no margin, evict_random, target 0.8, no TLS, timeout 1000 ms,
 *        lookup_timeout_ms 0 (= timeout_ms).
 * @param[out] opts  Options to fill.  Thread-safe.
 */
void hps_ddb_opts_init(hps_ddb_opts_t *opts);

/**
 * @brief Name of partition part's value ('v') or metadata ('t') hash:
 *        "hps_et{hps_et.<model>.<table>/p<part>}v", or of the table's
 *        record ('r', part 0: hps_ddb_record_get()).
 * @param[out] buf      Output, NUL-terminated (HPS_DDB_KEY_MAX bytes fit).
 * @param[in]  buf_len  Size of buf.
 * @return The length written (without NUL), or HPS_EINVAL (kind not 'v'/'t'/'r',
 *         or buf too small).  Pure; thread-safe.
 */
hps_err_t hps_ddb_key_name(const char *model, const char *table, unsigned part, char kind,
                           char *buf, size_t buf_len);

/**
 * @brief Connect to the cluster (see hps_rcluster_create()).
 * @param[in]  opts     Options (strings copied).
 * @param[out] ret      The handle; release with hps_ddb_close().  Written
 *                      only on success.
 * @param[out] err      Message (may be NULL).
 * @param[in]  err_len  Size of err.
 * @return 0; HPS_EUNSUPPORTED (enable_tls: "TLS to Redis is not supported:
 *         hiredis 0.14 has no TLS ..."); HPS_EINVAL (bad option or address);
 *         -ECONNREFUSED / HPS_EIO / HPS_ETIMEDOUT (no node reachable);
 *         -EACCES (AUTH refused or required); HPS_ECONFIG (not a cluster);
 *         -ENOMEM.
 */
hps_err_t hps_ddb_open(const hps_ddb_opts_t *opts, hps_ddb_t **ret, char *err, size_t err_len);

/**
 * @brief Close the handle: stop the access-tracking thread after it has
 *        written the touches still queued (each a pipelined exec bounded by
 *        timeout_ms, so this may block that long per batch), free every
 *        table (each hps_ddb_table_t of db becomes invalid) and close the
 *        cluster connections.  No Redis data is changed beyond those
 *        touches.  NULL: no-op.
 * Not thread-safe: the last call on db; no other call on db or its tables
 * may be running or follow.
 */
void hps_ddb_close(hps_ddb_t *db);

/**
 * @brief Get the table (model, table), registering it on first use (no
 *        Redis command is sent: hashes exist once written).
 * @param[in]  db         An open DDB.
 * @param[in]  model      Model name, 1..120 chars.
 * @param[in]  table      Table name, 1..120 chars.
 * @param[in]  dim        Vector length (floats), >= 1.
 * @param[in]  key_bytes  4 (uint32 keys) or 8 (int64 keys).
 * @param[out] ret        The table, owned by db until hps_ddb_close().
 *                        Same names give the same handle (HPS_EMISMATCH if
 *                        dim or key_bytes differ).
 * Thread-safe.
 * @return 0; HPS_EINVAL; HPS_EMISMATCH; HPS_EFULL (over 4096 tables); -ENOMEM.
 */
hps_err_t hps_ddb_table(hps_ddb_t *db, const char *model, const char *table, uint32_t dim,
                        uint32_t key_bytes, hps_ddb_table_t **ret);

/**
 * @brief Look up n keys.
 * @param[in]  t         The table.
 * @param[in]  n         Number of keys.
 * @param[in]  keys      (n) keys of key_bytes each (int64 or uint32), host.
 * @param[out] values    (n, dim) float32, host: row i written when found[i].
 * @param[out] found     (n) bools, host.
 * @param[out] ret_hits  Number found (may be NULL).
 * @param[out] err       Message (may be NULL).
 * @param[in]  err_len   Size of err.
 * Thread-safe.  A stored value of the wrong size is a miss, counted in the
 * stats' bad_values and reported to opts.warn (rate-limited per table).
 * @return 0; or an hps_rcluster_exec() error when some partitions did not
 *         answer, or HPS_EIO with Redis's text in err when one answered
 *         with an error reply (e.g. WRONGTYPE: its hash replaced by another
 *         type); in both cases values/found/ret_hits stay valid for the
 *         partitions that did answer, and the error is counted in the
 *         stats' errors.  -ENOMEM.
 */
hps_err_t hps_ddb_lookup(hps_ddb_table_t *t, size_t n, const void *keys, float *values, bool *found,
                         size_t *ret_hits, char *err, size_t err_len);

/**
 * @brief Insert or overwrite n rows (metadata, values), then resolve the
 *        overflow of every partition over its margin.
 * @param[in] t       The table.
 * @param[in] n       Number of rows.
 * @param[in] keys    (n) keys, host.
 * @param[in] values  (n, dim) float32, host.
 * @param[out] err, err_len  Message.
 * Thread-safe (concurrent overflow resolution of one partition is
 * serialized per table).
 * @return 0; an hps_rcluster_exec() error; HPS_EIO (an error reply, e.g.
 *         WRONGTYPE or OOM); -ENOMEM.
 */
hps_err_t hps_ddb_insert(hps_ddb_table_t *t, size_t n, const void *keys, const float *values,
                         char *err, size_t err_len);

/**
 * @brief Insert the rows whose keys the table does not hold (one HSETNX
 *        each), leave the others as they are; metadata and overflow as
 *        hps_ddb_insert().
 *
 * For rows read from a lower layer after a miss (cache_missed_embeddings):
 * an online update of a key that reached Redis between the lower layer's
 * read and this insert is kept, where hps_ddb_insert() would overwrite it
 * with the older row.  Slower than hps_ddb_insert() (a command per row).
 * Parameters, thread safety and errors as hps_ddb_insert(); the stats'
 * insert_rows count the rows written.
 */
hps_err_t hps_ddb_insert_missing(hps_ddb_table_t *t, size_t n, const void *keys,
                                 const float *values, char *err, size_t err_len);

/**
 * @brief Delete n keys from the value and metadata hashes.
 * Parameters as hps_ddb_insert().  Thread-safe.
 * @return 0 or an error as hps_ddb_insert().
 */
hps_err_t hps_ddb_erase(hps_ddb_table_t *t, size_t n, const void *keys, char *err, size_t err_len);

/**
 * @brief Find value hashes of t beyond its partition count: the sign that
 *        the table was written with a larger num_partitions (HugeCTR used
 *        min(16, CPU cores)), whose rows in those hashes a lookup would
 *        never find.
 *
 * Sends EXISTS for hps_et{hps_et.<model>.<table>/p<i>}v, i in
 * [num_partitions, probe_to), in one pipelined exec.
 *
 * @param[in]  t            The table.
 * @param[in]  probe_to     One past the last partition index probed.
 * @param[out] ret_highest  The highest index found, or -1 when none.
 * @param[out] err, err_len Message.
 * Thread-safe.
 * @return 0; an hps_rcluster_exec() error; HPS_EIO (an error reply);
 *         -ENOMEM.
 */
hps_err_t hps_ddb_extra_partitions(hps_ddb_table_t *t, unsigned probe_to, long *ret_highest,
                                   char *err, size_t err_len);

/**
 * @brief Count the value hashes of t that Redis holds in HugeCTR's layout
 *        before v4.2, "hps_et.<model>.<table>/p<i>/v" (no hash tag), for
 *        partitions i in [0, probe_to).  Those rows were also placed by
 *        another key-to-partition function (XXH3_64bits, v3.5-v4.1;
 *        reference/hugectr-hps.md section 3.2): HugeCTR v4.2 and this
 *        library neither read nor remove them, and v4.2's release notes
 *        asked users to reset such data.
 *
 * Sends EXISTS for each name, in one pipelined exec.
 *
 * @param[in]  t          The table.
 * @param[in]  probe_to   One past the last partition index probed (0: none).
 * @param[out] ret_count  How many of those hashes exist.
 * @param[out] err, err_len Message.
 * Thread-safe.
 * @return 0; an hps_rcluster_exec() error; HPS_EIO (an error reply);
 *         -ENOMEM.
 */
hps_err_t hps_ddb_legacy_partitions(hps_ddb_table_t *t, unsigned probe_to, unsigned *ret_count,
                                    char *err, size_t err_len);

/** What hps_ddb_check_sample() found wrong first (HPS_DDB_SAMPLE_OK: nothing). */
typedef enum hps_ddb_sample_fault {
    HPS_DDB_SAMPLE_OK = 0,
    HPS_DDB_SAMPLE_KEY_BYTES,   /**< a field is not key_bytes long */
    HPS_DDB_SAMPLE_VALUE_BYTES, /**< a value is not dim * 4 bytes long */
    HPS_DDB_SAMPLE_PARTITION,   /**< a key is in another partition's hash */
} hps_ddb_sample_fault_t;

/** Result of hps_ddb_check_sample(). */
typedef struct hps_ddb_sample {
    hps_ddb_sample_fault_t fault; /**< the first fault, by partition then field */
    unsigned part;                /**< the partition whose hash holds it */
    size_t found_bytes;           /**< KEY_BYTES: the field's length; VALUE_BYTES: the value's */
    size_t want_bytes;            /**< KEY_BYTES: key_bytes; VALUE_BYTES: dim * 4 */
    uint64_t key;                 /**< PARTITION: the key (uint32 keys zero-extended) */
    unsigned key_part;            /**< PARTITION: the key's partition under num_partitions */
    size_t bad;                   /**< sampled fields with this fault */
    size_t fields;                /**< sampled fields, all partitions */
    unsigned hashes;              /**< partitions whose value hash held fields */
    /** PARTITION: the smallest partition count in [2, 1024] that puts every
     *  sampled key (of the right width) in the hash that holds it, the count
     *  the rows were likely written with; 0 when none does. */
    unsigned likely_partitions;
} hps_ddb_sample_t;

/**
 * @brief Check a sample of the rows Redis already holds for t against its
 *        layout: each sampled field is key_bytes long, each value dim * 4
 *        bytes, and each key is in partition rrxmrrxmsx_0(key) %
 *        num_partitions.  Rows written with fewer partitions (HugeCTR used
 *        min(16, CPU cores)), another dimension or another key width would
 *        otherwise be lookup misses without a word.
 *
 * Sends one HSCAN <value hash> 0 COUNT per_partition per partition, in one
 * pipelined exec (one round trip per node), and checks at most per_partition
 * fields of each reply.  Absent or empty hashes are fine.
 *
 * @param[in]  t              The table.
 * @param[in]  per_partition  Fields sampled per partition, 1..1024.
 * @param[out] ret            What was found (fault HPS_DDB_SAMPLE_OK: nothing wrong).
 * @param[out] err, err_len   Message.
 * Thread-safe.
 * @return 0 (whatever the fault); HPS_EINVAL; an hps_rcluster_exec() error;
 *         HPS_EIO (an error reply, e.g. WRONGTYPE); -ENOMEM.
 */
hps_err_t hps_ddb_check_sample(hps_ddb_table_t *t, unsigned per_partition, hps_ddb_sample_t *ret,
                               char *err, size_t err_len);

/**
 * @brief The partition of key i of keys: rrxmrrxmsx_0(key) % num_partitions,
 *        HugeCTR's (reference/hugectr-hps.md), as every call here places it.
 * @param keys  (n) int64 or uint32 (the table's key width), host memory.
 * @return 0 .. num_partitions - 1.  Thread-safe; no I/O.
 */
unsigned hps_ddb_partition_of(const hps_ddb_table_t *t, const void *keys, size_t i);

/**
 * @brief Rows in partition part (HLEN of its value hash).
 * @param[out] ret_rows       The count.
 * @param[out] err, err_len   Message of a failure.
 * Thread-safe.
 * @return 0; HPS_EINVAL (part out of range); an hps_rcluster_exec() error;
 *         HPS_EIO (a reply that is no integer, e.g. WRONGTYPE); -ENOMEM.
 */
hps_err_t hps_ddb_partition_rows(hps_ddb_table_t *t, unsigned part, uint64_t *ret_rows, char *err,
                                 size_t err_len);

/**
 * @brief The table's record: the identity of the model files its rows were
 *        loaded from (hps-coordinator writes it after filling the table and
 *        compares it at the next start or reload).  A string key beside the
 *        hashes, in partition 0's hash slot: "hps_et{hps_et.<model>.<table>/
 *        p0}r" (not HugeCTR's: HugeCTR wrote none, and ignores it).
 * @param[out] buf  The record, NUL-terminated (len bytes).
 * @return 0; HPS_ENOTFOUND (no record); HPS_EIO (an error reply, or longer
 *         than len); an hps_rcluster_exec() error.  Thread-safe.
 */
hps_err_t hps_ddb_record_get(hps_ddb_table_t *t, char *buf, size_t len, char *err, size_t err_len);

/**
 * @brief Write the table's record (SET), or remove it (rec NULL: DEL).
 * @return 0; HPS_EIO (an error reply); an hps_rcluster_exec() error.
 *         Thread-safe.
 */
hps_err_t hps_ddb_record_set(hps_ddb_table_t *t, const char *rec, char *err, size_t err_len);

/**
 * @brief Remove every row of the table: each partition's value and
 *        metadata hash (UNLINK, one pipelined exec; the record stays).
 * @return 0; HPS_EIO (an error reply); an hps_rcluster_exec() error.
 *         Thread-safe, but a concurrent insert may leave rows behind.
 */
hps_err_t hps_ddb_drop(hps_ddb_table_t *t, char *err, size_t err_len);

/**
 * @brief Copy the counters since hps_ddb_open() into *ret (every field).
 * @param[in]  db   An open DDB (not NULL).
 * @param[out] ret  Host struct (not NULL).
 * Thread-safe, lock-free: relaxed atomic loads, each field whole, not one
 * snapshot of all (a lookup in flight may be counted in lookup_keys and not
 * yet in lookup_hits).
 */
void hps_ddb_stats(hps_ddb_t *db, hps_ddb_stats_t *ret);

#ifdef __cplusplus
}
#endif
#endif /* HPS_DDB_H */
