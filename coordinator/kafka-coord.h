/*
 * kafka-coord.h -- hps-coordinator's Kafka ingestion (coordinator/kafka.c):
 * one consumer thread per database layer, HugeCTR style.
 */
#ifndef HPS_KAFKA_COORD_H
#define HPS_KAFKA_COORD_H

#include "coord.h"

typedef struct coord_kafka coord_kafka_t;

/**
 * @brief Start ingestion when [update_source] type is kafka_message_queue:
 * a consumer for the volatile DB (group hps.volatile.<hostname>) and one
 * for the persistent DB when it is writable (hps.persistent.<hostname>).
 * Call after the tables are loaded.
 * @param[out] ret  The ingestion state (NULL when updates are off); stop it
 *                  with coord_kafka_stop().
 * @return 0, or an HPS_EXIT_* code after logging why (HPS_EXIT_USAGE for a
 *         build without Kafka or an unusable setting).
 */
int coord_kafka_start(coord_t *c, coord_kafka_t **ret);

/**
 * @brief Wait until every layer's consumer has caught up
 * (hps_kafka_consumer_caught_up(): every partition assigned read to its
 * end and applied), at most timeout_ms, and log how long it took and how
 * many updates were applied (a warning when the time ran out).  A consumer
 * that reaches no broker (hps_kafka_consumer_unreachable(); the distributed
 * DB's, when another layer's does not) is not waited for.  The distributed
 * DB's consumer, a new member of the group every host shares, is waited
 * for until the group has given it its partitions and it has applied what
 * they hold: the misses of the segment about to be published read Redis,
 * and a member that left the group while it was still joining (a reload
 * taken before its assignment came) held the group's rebalance up for
 * minutes (librdkafka's mock cluster: no update reached Redis for over a
 * minute after a chain of reloads).  NULL (updates off) is caught up.
 * @return true when caught up within timeout_ms.
 */
bool coord_kafka_catch_up(coord_kafka_t *k, int timeout_ms);

/**
 * @brief Whether the distributed DB's consumer (ddb) or the persistent DB's
 * (else) is behind the volatile DB's: its apply is failing and being
 * retried (Redis refusing writes, say), or its lag exceeds the volatile
 * one's.  Rows read from such a layer may be older than updates the
 * volatile DB's consumer has applied: the miss service answers with them
 * but does not put them into the volatile DB (cache_missed_embeddings),
 * where they would stay stale (kr audit: 39 of 5000 keys served their old
 * vector after every layer had applied the update).  False without Kafka
 * or such a layer.  Thread-safe (c->kafka_mu).
 */
bool coord_kafka_behind(coord_t *c, bool ddb);

/** @brief Stop and join the consumers (they apply and commit what they hold), log the final
 * counters, free.  NULL is a no-op. */
void coord_kafka_stop(coord_kafka_t *k);

#endif
