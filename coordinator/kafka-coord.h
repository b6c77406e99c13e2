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

/** @brief Stop and join the consumers (they apply and commit what they hold), log the final
 * counters, free.  NULL is a no-op. */
void coord_kafka_stop(coord_kafka_t *k);

#endif
