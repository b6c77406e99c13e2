/* overflow.c -- hps_overflow_policy_name() (include/hps/hps.h). */
#include "hps/hps.h"

const char *hps_overflow_policy_name(hps_overflow_policy_t p)
{
    switch (p) {
    case HPS_EVICT_RANDOM:
        return "evict_random";
    case HPS_EVICT_LEAST_USED:
        return "evict_least_used";
    case HPS_EVICT_OLDEST:
        return "evict_oldest";
    }
    return "unknown";
}
