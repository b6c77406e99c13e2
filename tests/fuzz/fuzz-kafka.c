/*
 * fuzz-kafka.c -- libFuzzer target: the Kafka update-message decoder
 * (coordinator/kafka-msg.c, include/hps/kafka.h): hps_kafka_parse on a
 * payload, then every record walked as the consumer does (keys widened or
 * narrowed to the model's width, values copied); the topic-name helpers
 * (split, name, subscription regexes, group names).
 *
 * Input:  byte 0  bit 0 wire keys of 4 bytes (else 8), bit 1 model keys of
 *                 4 bytes (else 8), bit 2 message has a Kafka key
 *         byte 1  the table's dim (value_size = 4 * dim, dim 0..255)
 *         byte 2  length L of the topic string
 *         L bytes topic (also used as a subscription filter)
 *         rest    the message payload
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hps/kafka.h"

/* The consumer's key_to_model (coordinator/kafka-consumer.c). */
static int key_to_model(uint8_t *dst, const uint8_t *w, uint32_t wb, uint32_t mb)
{
    if (wb == mb) {
        memcpy(dst, w, mb);
        return 1;
    }
    if (wb == 4) {
        uint32_t k32;
        memcpy(&k32, w, 4);
        int64_t k = (int64_t)k32;
        memcpy(dst, &k, 8);
        return 1;
    }
    int64_t k;
    memcpy(&k, w, 8);
    if (k < 0 || k > (int64_t)UINT32_MAX)
        return 0;
    uint32_t k32 = (uint32_t)k;
    memcpy(dst, &k32, 4);
    return 1;
}

static void topics(const char *topic)
{
    char model[HPS_KAFKA_TOPIC_MAX], table[HPS_KAFKA_TOPIC_MAX], buf[HPS_KAFKA_TOPIC_MAX * 2];
    if (hps_kafka_topic_split(topic, model, table) == 0) {
        char again[HPS_KAFKA_TOPIC_MAX];
        /* A topic that splits is rebuilt from its parts exactly. */
        if (hps_kafka_topic_name(model, table, again, sizeof(again)) != 0 ||
            strcmp(again, topic) != 0)
            abort();
    }
    (void)hps_kafka_topic_name(topic, "t", buf, sizeof(buf));
    /* Not compiled here: glibc's regcomp takes exponential time on some
     * patterns ("a+++...+"), and filters come from the configuration. */
    if (hps_kafka_topic_regex(topic, buf, sizeof(buf)) == 0 && strlen(buf) >= sizeof(buf))
        abort();
    if (hps_kafka_model_regex(topic, buf, sizeof(buf)) == 0 && strlen(buf) >= sizeof(buf))
        abort();
    (void)hps_kafka_group_name(topic, false, "host", buf, sizeof(buf));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    uint32_t wb = (data[0] & 1) ? 4 : 8, mb = (data[0] & 2) ? 4 : 8;
    size_t key_len = (data[0] & 4) ? 1 : 0;
    uint32_t value_size = data[1] * 4u;
    size_t tl = data[2];
    if (size - 3 < tl)
        tl = size - 3;
    char *topic = malloc(tl + 1);
    memcpy(topic, data + 3, tl);
    topic[tl] = '\0';
    topics(topic);
    free(topic);

    size_t len = size - 3 - tl;
    uint8_t *payload = len ? malloc(len) : NULL; /* exact size: over-reads are caught */
    if (payload)
        memcpy(payload, data + 3 + tl, len);
    hps_kafka_msg_t msg;
    hps_kafka_verdict_t v = hps_kafka_parse(payload, len, key_len, wb, value_size, &msg);
    if (!hps_kafka_verdict_name(v) || v >= HPS_KAFKA_NUM_VERDICTS)
        abort();
    if (v == HPS_KAFKA_OK) {
        if (msg.count == 0 || msg.record_size != wb + value_size ||
            HPS_KAFKA_HEADER_SIZE + msg.count * msg.record_size != len)
            abort();
        uint8_t *keys = malloc(msg.count * 8);
        float *values = malloc(msg.count * value_size + 1);
        size_t n = 0;
        const uint8_t *r = msg.records;
        for (size_t i = 0; i < msg.count; i++, r += msg.record_size) {
            if (!key_to_model(keys + n * mb, r, wb, mb))
                continue;
            memcpy((uint8_t *)values + n * value_size, r + wb, value_size);
            uint64_t k = 0;
            memcpy(&k, keys + n * mb, mb);
            (void)hps_kafka_key_group(k, 16);
            n++;
        }
        free(keys);
        free(values);
    } else if (v != HPS_KAFKA_BEACON) {
        (void)hps_update_reason_name((uint32_t)v);
    }
    (void)hps_kafka_partition_of((uint32_t)size, (int32_t)data[1] - 8);
    free(payload);
    return 0;
}
