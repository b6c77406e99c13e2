/*
 * kafka-msg.c -- the broker-independent parts of kafka.h: message parsing,
 * topic names and subscription patterns, consumer-group names, key groups.
 * (The verdicts' names are in common/update.c, shared with the workers.)
 */
#include <stdio.h>
#include <string.h>

#include "hps/kafka.h"

static uint32_t load_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof(v)); /* host order, as HugeCTR */
    return v;
}

hps_kafka_verdict_t hps_kafka_parse(const void *payload, size_t len, size_t key_len,
                                    uint32_t key_bytes, uint32_t value_size, hps_kafka_msg_t *ret)
{
    const uint8_t *p = payload;
    if (key_len != 0)
        return HPS_KAFKA_SKIP_KEYED;
    if (!p || len == 0)
        return HPS_KAFKA_SKIP_EMPTY;
    if (len < HPS_KAFKA_HEADER_SIZE || load_u32(p) != HPS_KAFKA_MAGIC)
        return HPS_KAFKA_SKIP_MAGIC;
    if (len == HPS_KAFKA_HEADER_SIZE)
        return HPS_KAFKA_BEACON;
    if (load_u32(p + 4) != value_size)
        return HPS_KAFKA_SKIP_VALUE_SIZE;
    size_t rec = (size_t)key_bytes + value_size;
    if ((len - HPS_KAFKA_HEADER_SIZE) % rec != 0)
        return HPS_KAFKA_SKIP_TRUNCATED;
    *ret = (hps_kafka_msg_t){.records = p + HPS_KAFKA_HEADER_SIZE,
                             .count = (len - HPS_KAFKA_HEADER_SIZE) / rec,
                             .value_size = value_size,
                             .record_size = (uint32_t)rec};
    return HPS_KAFKA_OK;
}

/* HugeCTR's rule for model and table names: [a-zA-Z0-9_-]{1,120}. */
static bool valid_name(const char *s, size_t n)
{
    if (n == 0 || n > 120)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
        if (!ok)
            return false;
    }
    return true;
}

hps_err_t hps_kafka_topic_name(const char *model, const char *table, char *buf, size_t len)
{
    if (!model || !table || !valid_name(model, strlen(model)) || !valid_name(table, strlen(table)))
        return HPS_EINVAL;
    int n = snprintf(buf, len, "hps_et.%s.%s", model, table);
    return n < 0 || (size_t)n >= len ? HPS_EINVAL : 0;
}

hps_err_t hps_kafka_topic_split(const char *topic, char *model, char *table)
{
    static const char prefix[] = "hps_et.";
    if (!topic || strncmp(topic, prefix, sizeof(prefix) - 1) != 0)
        return HPS_EINVAL;
    const char *m = topic + sizeof(prefix) - 1;
    const char *dot = strchr(m, '.');
    if (!dot || !valid_name(m, (size_t)(dot - m)) || !valid_name(dot + 1, strlen(dot + 1)))
        return HPS_EINVAL;
    memcpy(model, m, (size_t)(dot - m));
    model[dot - m] = '\0';
    strcpy(table, dot + 1);
    return 0;
}

/* The filter without one leading '^' and one trailing unescaped '$'. */
static const char *strip_anchors(const char *filter, size_t *ret_n)
{
    size_t n = strlen(filter);
    if (n && filter[0] == '^') {
        filter++;
        n--;
    }
    if (n && filter[n - 1] == '$' && !(n >= 2 && filter[n - 2] == '\\'))
        n--;
    *ret_n = n;
    return filter;
}

/* prefix + "(" + filter without its anchors + ")" + suffix into buf. */
static hps_err_t wrap_filter(const char *filter, const char *prefix, const char *suffix, char *buf,
                             size_t len)
{
    size_t n;
    if (!filter || !buf)
        return HPS_EINVAL;
    filter = strip_anchors(filter, &n);
    if (n == 0)
        return HPS_EINVAL;
    int w = snprintf(buf, len, "%s(%.*s)%s", prefix, (int)n, filter, suffix);
    return w < 0 || (size_t)w >= len ? HPS_EINVAL : 0;
}

hps_err_t hps_kafka_topic_regex(const char *filter, char *buf, size_t len)
{
    return wrap_filter(filter, "^hps_et\\.", "\\.[a-zA-Z0-9_-]+$", buf, len);
}

hps_err_t hps_kafka_model_regex(const char *filter, char *buf, size_t len)
{
    return wrap_filter(filter, "^", "$", buf, len);
}

hps_err_t hps_kafka_group_name(const char *layer, bool shared, const char *host, char *buf,
                               size_t len)
{
    if (!layer || !buf || (!shared && !host))
        return HPS_EINVAL;
    int w =
        shared ? snprintf(buf, len, "hps.%s", layer) : snprintf(buf, len, "hps.%s.%s", layer, host);
    return w < 0 || (size_t)w >= len ? HPS_EINVAL : 0;
}

uint32_t hps_kafka_key_group(uint64_t key, uint32_t num_groups)
{
    return (uint32_t)(hps_rrxmrrxmsx_0(key) % (num_groups ? num_groups : 1));
}

int32_t hps_kafka_partition_of(uint32_t group, int32_t partition_count)
{
    return partition_count > 0 ? (int32_t)((group & 0x7fffffffu) % (uint32_t)partition_count) : 0;
}
