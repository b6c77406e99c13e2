/*
 * kafka-none.c -- the consumer API of kafka.h in a build without librdkafka
 * (meson -Dkafka=disabled): creation answers HPS_EUNSUPPORTED.
 */
#include <stdio.h>

#include "hps/kafka.h"

hps_err_t hps_kafka_consumer_create(const hps_kafka_consumer_opts_t *opts,
                                    hps_kafka_consumer_t **ret, char *err, size_t err_len)
{
    (void)opts;
    (void)ret;
    snprintf(err, err_len, "built without Kafka support (librdkafka; meson -Dkafka=enabled)");
    return HPS_EUNSUPPORTED;
}

hps_err_t hps_kafka_consumer_configure(const hps_kafka_consumer_opts_t *opts,
                                       struct rd_kafka_conf_s *conf, char *err, size_t err_len)
{
    (void)opts;
    (void)conf;
    snprintf(err, err_len, "built without Kafka support (librdkafka; meson -Dkafka=enabled)");
    return HPS_EUNSUPPORTED;
}

hps_err_t hps_kafka_consumer_run(hps_kafka_consumer_t *c, const atomic_int *stop)
{
    (void)c;
    (void)stop;
    return HPS_EUNSUPPORTED;
}

bool hps_kafka_consumer_caught_up(hps_kafka_consumer_t *c)
{
    (void)c;
    return false;
}

void hps_kafka_consumer_start_at(hps_kafka_consumer_t *c, hps_kafka_consumer_t *from)
{
    (void)c;
    (void)from;
}

bool hps_kafka_consumer_unreachable(hps_kafka_consumer_t *c)
{
    (void)c;
    return false;
}

void hps_kafka_consumer_stats(hps_kafka_consumer_t *c, hps_kafka_stats_t *ret)
{
    (void)c;
    *ret = (hps_kafka_stats_t){.lag = -1};
}

void hps_kafka_consumer_destroy(hps_kafka_consumer_t *c)
{
    (void)c;
}
