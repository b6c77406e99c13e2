/*
 * kafka.h -- online model updates through Kafka (HugeCTR's KafkaMessageSource
 * and KafkaMessageSink formats), over librdkafka.
 *
 * Wire format (reference/hugectr-hps.md §2.2), one message per send buffer,
 * no Kafka message key, host-native (little-endian) byte order:
 *
 *     u32 magic = 0x52544348 ("HCTR")
 *     u32 value_size                 bytes per vector (dim * 4)
 *     { key (key_bytes); u8 value[value_size] } * count     count implicit
 *
 * Topics are named hps_et.<model>.<table>.  The pure helpers below (parser,
 * topic regex, group naming, key groups) need no broker; the consumer runs
 * HugeCTR's loop: apply a batch, then commit its offsets (at-least-once).
 *
 * Library code: nothing here logs; errors are return codes, counters and an
 * optional event callback through which the executable logs.
 */
#ifndef HPS_KAFKA_H
#define HPS_KAFKA_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hps/hps.h"
#include "hps/update.h"

#define HPS_KAFKA_MAGIC       0x52544348u /**< "HCTR" read as a little-endian u32 */
#define HPS_KAFKA_HEADER_SIZE 8u          /**< magic + value_size */
#define HPS_KAFKA_TOPIC_MAX   256u        /**< buffer size enough for any topic name */

/* hps_kafka_verdict_t and hps_kafka_verdict_name() are in hps/update.h,
 * which the workers share (names of the skip counters in the segment). */

/** A parsed message: records stay in the message payload (not copied). */
typedef struct hps_kafka_msg {
    const uint8_t *records; /**< count * (key_bytes + value_size) bytes */
    size_t count;           /**< number of (key, value) records */
    uint32_t value_size;    /**< bytes per value */
    uint32_t record_size;   /**< key_bytes + value_size */
} hps_kafka_msg_t;

/**
 * @brief Check one message value against a table and locate its records.
 * @param[in]  payload     Message value (host memory; may be NULL when len is 0).
 * @param[in]  len         Bytes of payload.
 * @param[in]  key_len     Bytes of the Kafka message key (0 = none).
 * @param[in]  key_bytes   Wire key width ([update_source] key_bytes): 8 or 4.
 * @param[in]  value_size  The table's dim * 4.
 * @param[out] ret         Filled only for HPS_KAFKA_OK.
 * @return the verdict.  Pure function, thread-safe.
 */
hps_kafka_verdict_t hps_kafka_parse(const void *payload, size_t len, size_t key_len,
                                    uint32_t key_bytes, uint32_t value_size, hps_kafka_msg_t *ret);

/**
 * @brief Topic of a table: "hps_et.<model>.<table>".
 * @param[out] buf  Receives the NUL-terminated name.
 * @return 0; HPS_EINVAL when a name is not [a-zA-Z0-9_-]{1,120} or buf is too small.
 */
hps_err_t hps_kafka_topic_name(const char *model, const char *table, char *buf, size_t len);

/**
 * @brief Split a topic "hps_et.<model>.<table>" into its names.
 * @param[out] model, table  Buffers of HPS_KAFKA_TOPIC_MAX bytes.
 * @return 0; HPS_EINVAL for any other topic shape.
 */
hps_err_t hps_kafka_topic_split(const char *topic, char *model, char *table);

/**
 * @brief librdkafka subscription pattern of one model-name filter.
 *
 * The filter is a regular expression over the model name (the default ".+"
 * matches every model).  One leading '^' and one trailing unescaped '$' are
 * dropped, and the rest is wrapped: "^hps_et\.(" F ")\.[a-zA-Z0-9_-]+$"; the
 * leading '^' tells librdkafka that the entry is a regex.  (HugeCTR
 * concatenated the raw filter, so its default "^hps_.+$" never matched.)
 * @param[out] buf  NUL-terminated pattern.
 * @return 0; HPS_EINVAL when the filter is empty or buf too small.
 */
hps_err_t hps_kafka_topic_regex(const char *filter, char *buf, size_t len);

/**
 * @brief POSIX extended regex matching exactly the model names of a filter:
 * "^(" F ")$", with F stripped as in hps_kafka_topic_regex(), so that the
 * coordinator's own check agrees with the subscription.
 * @return 0; HPS_EINVAL when the filter is empty or buf too small.
 */
hps_err_t hps_kafka_model_regex(const char *filter, char *buf, size_t len);

/**
 * @brief HugeCTR's consumer-group name: "hps.<layer>" for a database shared
 * by every host, "hps.<layer>.<host>" for a host-local one.
 * @param[in] layer  "volatile" or "persistent" (any [a-z_]+ is accepted).
 * @param[in] shared Whether every host sees the same database.
 * @param[in] host   The local database's name (used only when !shared):
 *                   hps-coordinator passes "<hostname>.<shared_memory_name>",
 *                   one per coordinator of the host.
 * @return 0; HPS_EINVAL when buf is too small or an argument is NULL.
 */
hps_err_t hps_kafka_group_name(const char *layer, bool shared, const char *host, char *buf,
                               size_t len);

/**
 * @brief Producer key group of a key: hps_rrxmrrxmsx_0(key) % num_groups
 *        (include/hps/hps.h: HugeCTR's mixer, so groups match HugeCTR's
 *        producers).  32-bit keys zero-extended, int64 keys reinterpreted.
 * @param[in] num_groups  >= 1; 0 is taken as 1 (every key in group 0).
 * @return 0 .. num_groups-1.  Pure; thread-safe.
 */
uint32_t hps_kafka_key_group(uint64_t key, uint32_t num_groups);

/**
 * @brief HugeCTR's kafka_key_group_partitioner (HugeCTR v24.06,
 *        message_sink kafka): (group & 0x7fffffff) % partition_count.
 * @return 0 .. partition_count-1; 0 for partition_count <= 0 (not an
 *         error).  Pure; thread-safe.
 */
int32_t hps_kafka_partition_of(uint32_t group, int32_t partition_count);

/* ---- Consumer ------------------------------------------------------------ */

/**
 * Resolve a topic to a sink.  Return true and set *ret_sink (opaque, passed
 * back to apply), *ret_value_size (dim * 4) and *ret_refuse_nonfinite (true:
 * updates whose vector has a NaN or +-Inf element are dropped, the model's
 * `nonfinite_values = refuse`; false: they are applied as they are) for a
 * table to update; false for a topic that this consumer must skip
 * (HPS_KAFKA_SKIP_UNKNOWN).  Called on the consumer thread, once per topic.
 */
typedef bool (*hps_kafka_resolve_fn)(void *ctx, const char *topic, void **ret_sink,
                                     uint32_t *ret_value_size, bool *ret_refuse_nonfinite);

/**
 * Apply n updates: keys (n) of key_bytes each, values (n, value_size / 4)
 * float32, both host memory valid only during the call.  Return 0;
 * HPS_ECORRUPT when they can never be applied (the layer's copy of the
 * table is corrupt, e.g. a Redis hash replaced by another type): the batch
 * is dropped and its updates counted in errors; or another negative code:
 * the same batch is retried after failure_backoff_ms, doubled per failure
 * up to 64 times it, until it succeeds or the consumer is stopped (then
 * nothing is committed for it).
 */
typedef hps_err_t (*hps_kafka_apply_fn)(void *ctx, void *sink, size_t n, const void *keys,
                                        const float *values);

/** Events for the executable's log: level 0 error, 1 warning, 2 info. */
typedef void (*hps_kafka_event_fn)(void *ctx, int level, const char *msg);

/** Consumer options: [update_source] plus what the caller decides. */
typedef struct hps_kafka_consumer_opts {
    const char *brokers;              /**< metadata.broker.list, "host:port,host:port"; copied */
    const char *group;                /**< consumer group (hps_kafka_group_name()); copied */
    const char *const *filters;       /**< model-name regexes; none = subscribe to nothing.
                                       *   Read by create only (the caller may free them) */
    size_t num_filters;               /**< number of filters */
    uint32_t key_bytes;               /**< wire key width: 8 or 4 */
    uint32_t model_key_bytes;         /**< width apply() gets: 8 or 4; 0 = key_bytes.  8-byte
                                       *   wire keys of a 4-byte model that do not fit uint32
                                       *   are dropped and counted in errors */
    int metadata_refresh_interval_ms; /**< topic.metadata.refresh.interval.ms */
    int receive_buffer_size;          /**< message.max.bytes = this + 1024 */
    int poll_timeout_ms;              /**< idle time before apply + commit */
    int max_batch_size;               /**< pairs per apply */
    int failure_backoff_ms;           /**< retry pause after a failed apply or a fatal error */
    int max_commit_interval;          /**< messages between forced commits */
    hps_kafka_resolve_fn resolve;     /**< required */
    hps_kafka_apply_fn apply;         /**< required */
    hps_kafka_event_fn event;         /**< optional */
    void *ctx;                        /**< passed to the callbacks */
    int fetch_wait_max_ms;            /**< fetch.wait.max.ms; 0 = librdkafka's (500) */
    bool assign_all;                  /**< true: join no group; assign every partition of the
                                       *   topics the filters match (metadata read by run() at
                                       *   once and every metadata_refresh_interval_ms), each at
                                       *   the group's committed offset (auto.offset.reset
                                       *   where none).  Offsets are committed to the group as
                                       *   usual.  For a group with one member (the per-host
                                       *   layers): a consumer that starts again reads at once,
                                       *   where a rejoining group member may wait up to
                                       *   session.timeout.ms (6 s) for its partitions */
    /** assign_all only; NULL: none.  The group's name in an earlier version
     *  of hps-coordinator (hps.<layer>.<host>, before the segment's name was
     *  added).  At the first assignment, a partition that group has
     *  committed an offset for and this group has not starts at that
     *  offset, where auto.offset.reset would replay every retained update
     *  (older updates would then overwrite the rows of model files loaded
     *  since); hps_kafka_consumer_start_at() reads the offsets of its from
     *  likewise.  Read through a handle that joins no group and commits
     *  nothing.  Copied at create. */
    const char *legacy_group;
} hps_kafka_consumer_opts_t;

/** Counters of one consumer (monotonic since creation). */
typedef struct hps_kafka_stats {
    uint64_t messages;                        /**< messages received (not errors) */
    uint64_t received;                        /**< updates (pairs) in accepted messages */
    uint64_t nonfinite;                       /**< of those, with a NaN / Inf value (resolve) */
    uint64_t applied;                         /**< updates applied to the sink */
    uint64_t skipped[HPS_KAFKA_NUM_VERDICTS]; /**< messages skipped, by verdict */
    uint64_t beacons;                         /**< header-only messages */
    uint64_t apply_failures;                  /**< failed apply calls (retried) */
    uint64_t commits, commit_failures;        /**< offset commits answered (ok / failed) */
    uint64_t errors;               /**< consumer errors (broker down, ...) and updates dropped */
    int64_t lag;                   /**< sum over assigned partitions, -1 unknown */
    int64_t newest_applied_ms;     /**< wall clock (ms since epoch) of the last apply, 0 none */
    int64_t newest_applied_msg_ms; /**< producer timestamp of the newest applied message */
    /** Offset resets after an offset the broker no longer has (or never
     *  had): librdkafka's auto.offset.reset moved the read position, so
     *  messages between the two may never have been read (retention deleted
     *  them before they were consumed).  A partition without a committed
     *  offset (a new group) starts at the beginning without one. */
    uint64_t offset_resets;
    /** 1 while a batch whose apply failed is being retried (the layer is
     *  behind the stream: Redis refusing writes, say), 0 once one applies. */
    uint32_t retrying;
} hps_kafka_stats_t;

typedef struct hps_kafka_consumer hps_kafka_consumer_t;

struct rd_kafka_conf_s; /* rd_kafka_conf_t of <librdkafka/rdkafka.h> */

/**
 * @brief Apply hps_kafka_consumer_create()'s librdkafka settings to conf:
 * HugeCTR's KafkaMessageSource settings (reference/hugectr-hps.md 2.4,
 * "DO NOT CHANGE" ones included, but for session.timeout.ms, 6 s instead of
 * 30 s, and heartbeat.interval.ms, 2 s instead of 3 s: a group member that
 * is gone is replaced sooner, and a reload's new member of the shared
 * group gets its partitions sooner) with opts' brokers, group,
 * receive_buffer_size, metadata_refresh_interval_ms and fetch_wait_max_ms;
 * the other fields are not read.  For tools and benchmarks that need a plain
 * librdkafka consumer configured exactly like ours.
 * @param[in,out] conf  rd_kafka_conf_t, owned by the caller.
 * @return 0; HPS_ECONFIG (librdkafka refused a setting; err says which);
 *         HPS_EUNSUPPORTED in a build without librdkafka.
 */
hps_err_t hps_kafka_consumer_configure(const hps_kafka_consumer_opts_t *opts,
                                       struct rd_kafka_conf_s *conf, char *err, size_t err_len);

/**
 * @brief Create a consumer (HugeCTR's librdkafka settings, enable.auto.commit
 * false) and subscribe it to one regex per filter (or, with assign_all,
 * compile them for run()'s own assignment).  Nothing is consumed until
 * hps_kafka_consumer_run().
 * @param[out] ret  New consumer; destroy with hps_kafka_consumer_destroy().
 * @param[out] err  Message on failure (NUL-terminated when err_len > 0).
 * @return 0; HPS_EINVAL (bad options), HPS_ECONFIG (librdkafka refused a
 *         setting or the subscription), -ENOMEM; HPS_EUNSUPPORTED in a
 *         build without librdkafka.
 */
hps_err_t hps_kafka_consumer_create(const hps_kafka_consumer_opts_t *opts,
                                    hps_kafka_consumer_t **ret, char *err, size_t err_len);

/**
 * @brief Run the consumer loop on the calling thread until *stop is set.
 *
 * Appends each message's records to its topic's batch; a full batch
 * (max_batch_size) is applied at once, and pending batches are applied as
 * soon as the local queue runs dry (freshness).  Offsets (offset + 1 of each
 * message whose records were applied) are committed only after those
 * records were applied: asynchronously after a poll timeout, at partition
 * EOF and after max_commit_interval messages (the loop keeps reading while
 * the broker answers; a failed commit only means messages are read again),
 * synchronously before partitions are revoked and on stop, after waiting up
 * to 5 s for the answers to the asynchronous ones.  Broker errors are
 * reported through the event callback and counted; the loop never exits on
 * them.  On return everything applied has been committed (best effort).
 * @return 0.
 */
hps_err_t hps_kafka_consumer_run(hps_kafka_consumer_t *c, const atomic_int *stop);

/**
 * @brief Whether the consumer has caught up: every partition assigned to it
 * has reached its end (partition EOF) at least once since it was assigned,
 * and every record read up to there has been applied.  False until the
 * first assignment, but true while a metadata read (at once, then every
 * metadata_refresh_interval_ms) finds no topic matching the filters (a
 * group gives a member whose subscription matches none no assignment at
 * all); false again while a newly assigned partition has not reached its
 * end.  For a caller that must not go on before the updates
 * produced so far are applied (a reloaded coordinator before it publishes).
 * Thread-safe (an atomic flag written by the consumer thread).
 */
bool hps_kafka_consumer_caught_up(hps_kafka_consumer_t *c);

/**
 * @brief With assign_all: start c's partitions at the offsets that `from`'s
 * group has committed AS OF THIS CALL (read now: metadata and committed
 * offsets, up to 5 s each), not at c's own group's.  For a layer that was
 * filled from another layer at this start (hps-coordinator's volatile DB,
 * built from the persistent DB): it must read again every update that layer
 * had not applied when it was read, even those its own group committed
 * (re-applying an update is harmless), and none of those from's consumer
 * applies later (reading from's offsets at c's first assignment, as this
 * did, skipped those).  A partition without such an offset (none
 * committed, a topic created since, or the read failed: logged) starts at
 * the beginning.  Offsets are still committed to c's own group.  Call
 * before either consumer runs (hps_kafka_consumer_run()).  Not thread-safe.
 */
void hps_kafka_consumer_start_at(hps_kafka_consumer_t *c, hps_kafka_consumer_t *from);

/**
 * @brief With assign_all: the last read of the cluster's metadata failed (no
 * broker answered within 5 s), so the consumer cannot catch up for now.
 * False before the first read, and always without assign_all.  Thread-safe
 * (an atomic flag written by the consumer thread).
 */
bool hps_kafka_consumer_unreachable(hps_kafka_consumer_t *c);

/**
 * @brief Copy the counters into *ret (every field; c and ret not NULL).
 * Thread-safe, lock-free: relaxed atomic loads, each field whole, not one
 * snapshot of all.  Without librdkafka: zeros, lag -1.
 */
void hps_kafka_consumer_stats(hps_kafka_consumer_t *c, hps_kafka_stats_t *ret);

/**
 * @brief Close and free: wait up to 5 s for the asynchronous commits in
 *        flight, leave the group (rd_kafka_consumer_close: a revocation
 *        commits what was applied), then free.  Blocks while librdkafka
 *        closes (bounded by its own timeouts).  Errors are not reported
 *        (a lost commit only means messages are read again).  NULL: no-op.
 * Not thread-safe: hps_kafka_consumer_run() must have returned, and no
 * other call on c may be running or follow; a consumer named as @p from of
 * hps_kafka_consumer_start_at() may be destroyed once that call returned.
 */
void hps_kafka_consumer_destroy(hps_kafka_consumer_t *c);

#endif
