/* update.c -- names of the update source's verdicts (include/hps/update.h). */
#include <stddef.h>

#include "hps/update.h"

/* Indexed by hps_kafka_verdict_t.  The skip reasons' names are the reason
 * labels of the workers' metrics: renaming one changes the metrics. */
static const char *const verdict_names[HPS_KAFKA_NUM_VERDICTS] = {
    [HPS_KAFKA_OK] = "ok",
    [HPS_KAFKA_BEACON] = "beacon",
    [HPS_KAFKA_SKIP_MAGIC] = "magic",
    [HPS_KAFKA_SKIP_VALUE_SIZE] = "value_size",
    [HPS_KAFKA_SKIP_TRUNCATED] = "truncated",
    [HPS_KAFKA_SKIP_KEYED] = "keyed",
    [HPS_KAFKA_SKIP_EMPTY] = "empty",
    [HPS_KAFKA_SKIP_UNKNOWN] = "unknown_table",
};

const char *hps_kafka_verdict_name(hps_kafka_verdict_t v)
{
    return (unsigned)v < HPS_KAFKA_NUM_VERDICTS ? verdict_names[v] : "?";
}

const char *hps_update_reason_name(uint32_t reason)
{
    if (reason == HPS_KAFKA_OK || reason == HPS_KAFKA_BEACON || reason >= HPS_KAFKA_NUM_VERDICTS)
        return NULL;
    return verdict_names[reason];
}
