/*
 * update.h -- the verdicts of the update source (HugeCTR's Kafka message
 * format, include/hps/kafka.h) on one message, and their names.
 *
 * Both sides of the segment need them: the coordinator parses messages and
 * counts the skipped ones per verdict; the workers read those counters from
 * the segment (hps_shmdb_update_stats_get(), an anonymous array indexed by
 * verdict) and export them with these names as metric labels.  So they live
 * here, below both, in hps_common: this header pulls in no librdkafka and
 * declares nothing of the consumer.
 */
#ifndef HPS_UPDATE_H
#define HPS_UPDATE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Verdict of hps_kafka_parse() on one message; the skip reasons are counted,
 * and the value is the index of the counter (hps_update_stats_t.skipped).
 * Values are stable: they index counters in the shared-memory segment.
 */
typedef enum hps_kafka_verdict {
    HPS_KAFKA_OK = 0,          /**< records to apply (count >= 1) */
    HPS_KAFKA_BEACON,          /**< header only (8 bytes): ignored, not counted as skipped */
    HPS_KAFKA_SKIP_MAGIC,      /**< magic is not "HCTR", or shorter than the header */
    HPS_KAFKA_SKIP_VALUE_SIZE, /**< value_size != the table's dim * 4 */
    HPS_KAFKA_SKIP_TRUNCATED,  /**< (len - 8) is not a multiple of key_bytes + value_size */
    HPS_KAFKA_SKIP_KEYED,      /**< the message has a Kafka key (HugeCTR drops those) */
    HPS_KAFKA_SKIP_EMPTY,      /**< null payload (tombstone) */
    HPS_KAFKA_SKIP_UNKNOWN,    /**< topic of no deployed table, or one the filters exclude */
    HPS_KAFKA_NUM_VERDICTS
} hps_kafka_verdict_t;

/**
 * @brief Short name of a verdict ("ok", "beacon", "magic", "value_size", ...).
 * @return A static string; "?" for a value that is no verdict.  Thread-safe.
 */
const char *hps_kafka_verdict_name(hps_kafka_verdict_t v);

/**
 * @brief Name of a skip reason, i.e. of the verdict whose value is `reason`
 *        ("magic", "value_size", "truncated", "keyed", "empty",
 *        "unknown_table"): the reason label of the nv_hps_updates_skipped
 *        metric.
 * @param[in] reason  Index of a skipped-message counter (a verdict value).
 * @return A static string; NULL for an index that is not a skip reason
 *         (HPS_KAFKA_OK, HPS_KAFKA_BEACON, >= HPS_KAFKA_NUM_VERDICTS).
 *         Thread-safe.
 */
const char *hps_update_reason_name(uint32_t reason);

#ifdef __cplusplus
}
#endif
#endif /* HPS_UPDATE_H */
