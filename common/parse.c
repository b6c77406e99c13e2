/* parse.c -- hps_parse_int(): decimal integers of command lines. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

#include "hps/hps.h"

bool hps_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *ret)
{
    if (!s || !(isdigit((unsigned char)s[0]) || (s[0] == '-' && isdigit((unsigned char)s[1]))))
        return false;
    int saved = errno;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    bool ok = errno == 0 && *end == '\0' && v >= lo && v <= hi;
    errno = saved;
    if (ok)
        *ret = (int64_t)v;
    return ok;
}
