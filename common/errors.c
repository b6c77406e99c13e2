/* errors.c -- hps_strerror(), hps_err_name() and hps_version(). */
#include <errno.h>
#include <string.h>

#include "hps/hps.h"
#include "hps_build_config.h"

const char *hps_strerror(hps_err_t err)
{
    if (err == 0)
        return "success";
    switch (err) {
#define HPS__ERR_MSG(name, value, msg)                                                             \
    case value:                                                                                    \
        return msg;
        HPS_ERRNO_MAP(HPS__ERR_MSG)
#undef HPS__ERR_MSG
    default:
        break;
    }
    if (err < 0 && err > -4096) {
        const char *s = strerrordesc_np(-err);
        if (s)
            return s;
    }
    return "unknown error";
}

const char *hps_err_name(hps_err_t err)
{
    if (err == 0)
        return "OK";
    switch (err) {
#define HPS__ERR_NAME(name, value, msg)                                                            \
    case value:                                                                                    \
        return #name;
        HPS_ERRNO_MAP(HPS__ERR_NAME)
#undef HPS__ERR_NAME
    default:
        break;
    }
    if (err < 0 && err > -4096) {
        const char *s = strerrorname_np(-err);
        if (s)
            return s;
    }
    return "UNKNOWN";
}

const char *hps_version(void)
{
    return HPS_VERSION;
}
