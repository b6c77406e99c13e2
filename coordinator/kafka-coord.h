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

/** @brief Stop and join the consumers (they apply and commit what they hold), log the final counters, free.  NULL is a no-op. */
void coord_kafka_stop(coord_kafka_t *k);

#endif
