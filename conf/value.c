/*
 * value.c -- one configuration value: parse and range-check, format, and
 * describe what is allowed.  Everything is driven by the key's row in
 * hps_conf.def (type, extra, lo, hi); error messages and the reference use
 * the same description, so they can never disagree.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "conf/internal.h"

#define FIELD(k, base)  ((void *)((char *)(base) + (k)->offset))
#define LENPTR(k, base) ((size_t *)((char *)(base) + (k)->len_offset))

/* ---- Number syntax -------------------------------------------------------- */

/* Decimal integer, optional sign, nothing else (no blanks, no 0x, no 1e3). */
static bool parse_i64(const char *s, int64_t *ret)
{
    const char *d = (*s == '+' || *s == '-') ? s + 1 : s;
    char *end;

    if (!isdigit((unsigned char)*d))
        return false;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end)
        return false;
    *ret = v;
    return true;
}

/* Unsigned decimal integer, no sign; *ret_end gets the first non-digit. */
static bool parse_u64_prefix(const char *s, uint64_t *ret, const char **ret_end)
{
    char *end;

    if (!isdigit((unsigned char)*s))
        return false;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return false;
    *ret = v;
    *ret_end = end;
    return true;
}

/* A finite number (strtod syntax); nan and inf are refused. */
static bool parse_real(const char *s, double *ret)
{
    char *end;

    if (!*s || isspace((unsigned char)*s))
        return false;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || !isfinite(v) || (errno == ERANGE && fabs(v) > 1.0))
        return false;
    *ret = v;
    return true;
}

static const struct {
    const char *name;
    unsigned shift;
} size_units[] = {
    {"", 0},     {"b", 0},  {"k", 10},   {"kib", 10}, {"m", 20},
    {"mib", 20}, {"g", 30}, {"gib", 30}, {"t", 40},   {"tib", 40},
};

/* "<digits>[blanks]<unit>", unit case-insensitive, binary multiples. */
static bool parse_size(const char *s, uint64_t *ret)
{
    uint64_t v;
    const char *u;

    if (!parse_u64_prefix(s, &v, &u))
        return false;
    while (*u == ' ' || *u == '\t')
        u++;
    for (size_t i = 0; i < sizeof(size_units) / sizeof(size_units[0]); i++) {
        if (strcasecmp(u, size_units[i].name) != 0)
            continue;
        unsigned sh = size_units[i].shift;
        if (sh && v > (UINT64_MAX >> sh))
            return false;
        *ret = v << sh;
        return true;
    }
    return false;
}

/* Octal digits only ("600" or "0600"), at most 07777. */
static bool parse_mode(const char *s, uint32_t *ret)
{
    size_t n = strlen(s);

    if (n == 0 || n > 5 || strspn(s, "01234567") != n)
        return false;
    unsigned long v = strtoul(s, NULL, 8);
    if (v > 07777)
        return false;
    *ret = (uint32_t)v;
    return true;
}

static bool parse_bool(const char *s, bool *ret)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};

    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *ret = true;
            return true;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *ret = false;
            return true;
        }
    }
    return false;
}

static bool in_range(const struct hps__conf_key *k, double v)
{
    if (k->type == HPS__CONF_T_REAL_GT ? v <= k->lo : v < k->lo)
        return false;
    return v <= k->hi;
}

int64_t hps__conf_auto_value(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);

    if (n < 1)
        return 1;
    return n < 16 ? n : 16;
}

/* ---- String checks -------------------------------------------------------- */

/* RFC 1123 host name: dot-separated labels of [A-Za-z0-9-], 1..63 bytes, not
 * starting or ending with '-'; the last label not all digits (that would be
 * a malformed IPv4 address).  '_' is accepted too: resolvers take it, and
 * container names such as kafka_1 have it. */
static bool is_hostname(const char *s, size_t n)
{
    size_t i = 0;
    bool digits_only = true;

    if (n == 0 || n > 253)
        return false;
    while (i <= n) {
        size_t l = 0;
        digits_only = true;
        while (i + l < n && s[i + l] != '.') {
            char c = s[i + l];
            if (!isalnum((unsigned char)c) && c != '-' && c != '_') /* "kafka_1" in Compose */
                return false;
            digits_only &= isdigit((unsigned char)c) != 0;
            l++;
        }
        if (l == 0 || l > 63 || s[i] == '-' || s[i + l - 1] == '-')
            return false;
        i += l + 1;
    }
    return !digits_only;
}

static bool is_ip(const char *s, size_t n, int af)
{
    char tmp[64];
    unsigned char addr[16];

    if (n >= sizeof(tmp))
        return false;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    return inet_pton(af, tmp, addr) == 1;
}

static bool is_host(const char *s, size_t n)
{
    return is_ip(s, n, AF_INET) || is_ip(s, n, AF_INET6) || is_hostname(s, n);
}

/* host:port or [ipv6]:port, port 1..65535. */
static bool is_hostport(const char *s, size_t n)
{
    const char *colon = NULL;

    for (size_t i = 0; i < n; i++)
        if (s[i] == ':')
            colon = s + i;
    if (!colon || colon == s || (size_t)(colon - s) + 1 >= n || n - (size_t)(colon - s) > 6)
        return false;
    char port[8] = {0};
    memcpy(port, colon + 1, n - (size_t)(colon - s) - 1);
    if (strspn(port, "0123456789") != strlen(port) || atol(port) < 1 || atol(port) > 65535)
        return false;
    size_t hl = (size_t)(colon - s);
    if (s[0] == '[')
        return hl > 2 && s[hl - 1] == ']' && is_ip(s + 1, hl - 2, AF_INET6);
    return is_ip(s, hl, AF_INET) || is_hostname(s, hl);
}

/* A comma-separated list of host:port; like every list, it may end in a
 * comma (hostports_dup() drops it). */
static bool is_hostports(const char *s)
{
    for (bool first = true;; first = false) {
        while (*s == ' ' || *s == '\t')
            s++;
        if (!first && !*s)
            return true; /* a trailing comma */
        size_t n = strcspn(s, ",");
        size_t t = n;
        while (t > 0 && (s[t - 1] == ' ' || s[t - 1] == '\t'))
            t--;
        if (!is_hostport(s, t))
            return false;
        if (s[n] == '\0')
            return true;
        s += n + 1;
    }
}

/* A copy of a valid host:port list without its trailing comma, if any. */
static char *hostports_dup(const char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (n && s[n - 1] == ',') {
        n--;
        while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
            n--;
    }
    return hps__conf_strndup(s, n);
}

static bool check_string(hps__conf_check_t check, const char *s)
{
    size_t n = strlen(s);

    switch (check) {
    case HPS__CONF_CHECK_path:
        return n > 0;
    case HPS__CONF_CHECK_host:
        return is_host(s, n);
    case HPS__CONF_CHECK_hostports:
        return is_hostports(s);
    case HPS__CONF_CHECK_shm_name:
        return n >= 1 && n <= HPS_CONF_SHM_NAME_MAX &&
               strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") == n;
    case HPS__CONF_CHECK_name:
        return hps__conf_is_name(s, n);
    default:
        return true;
    }
}

/* ---- Formatting ----------------------------------------------------------- */

/* Shortest text that reads back as exactly v; integral values keep a ".0". */
static void fmt_real(double v, struct hps__conf_buf *out)
{
    char s[40];

    for (int prec = 1; prec <= 17; prec++) {
        snprintf(s, sizeof(s), "%.*g", prec, v);
        if (strtod(s, NULL) == v)
            break;
    }
    if (!strpbrk(s, ".eEn"))
        strcat(s, ".0");
    hps__conf_buf_puts(out, s);
}

/* Bytes with the largest unit that divides them exactly. */
static void fmt_size(uint64_t v, struct hps__conf_buf *out)
{
    static const char *const units[] = {"TiB", "GiB", "MiB", "KiB"};

    for (int i = 0; i < 4 && v; i++) {
        unsigned sh = 40 - 10 * (unsigned)i;
        if ((v & ((UINT64_C(1) << sh) - 1)) == 0) {
            hps__conf_buf_printf(out, "%" PRIu64 "%s", v >> sh, units[i]);
            return;
        }
    }
    hps__conf_buf_printf(out, "%" PRIu64, v);
}

static const char *enum_name(const struct hps__conf_enum *en, int v)
{
    for (size_t i = 0; i < en->count; i++)
        if (en->names[i].canonical && en->names[i].value == v)
            return en->names[i].name;
    return "?";
}

static void fmt_scalar(const struct hps__conf_key *k, const void *f, bool mask,
                       struct hps__conf_buf *out)
{
    switch (k->type) {
    case HPS__CONF_T_BOOL:
        hps__conf_buf_puts(out, *(const bool *)f ? "true" : "false");
        break;
    case HPS__CONF_T_INT:
    case HPS__CONF_T_AUTO:
        hps__conf_buf_printf(out, "%" PRId64, *(const int64_t *)f);
        break;
    case HPS__CONF_T_SIZE:
        fmt_size(*(const uint64_t *)f, out);
        break;
    case HPS__CONF_T_MARGIN:
        if (*(const uint64_t *)f == HPS_CONF_UNBOUNDED)
            hps__conf_buf_puts(out, "max");
        else
            hps__conf_buf_printf(out, "%" PRIu64, *(const uint64_t *)f);
        break;
    case HPS__CONF_T_REAL:
    case HPS__CONF_T_REAL_GT:
        fmt_real(*(const double *)f, out);
        break;
    case HPS__CONF_T_MODE:
        hps__conf_buf_printf(out, "%04" PRIo32, *(const uint32_t *)f);
        break;
    case HPS__CONF_T_ENUM:
        hps__conf_buf_puts(out, enum_name(k->en, *(const int *)f));
        break;
    default: { /* STR */
        const char *s = *(const char *const *)f;
        hps__conf_buf_puts(out, hps__conf_masked(mask && k->check == HPS__CONF_CHECK_secret, s));
    }
    }
}

void hps__conf_value_format_entry(const struct hps__conf_key *k, const void *base, size_t i,
                                  struct hps__conf_buf *out)
{
    const void *f = FIELD(k, base);

    if (k->type == HPS__CONF_T_TINTS || k->type == HPS__CONF_T_INTS)
        hps__conf_buf_printf(out, "%" PRId64, (*(int64_t *const *)f)[i]);
    else if (k->type == HPS__CONF_T_TREALS)
        fmt_real((*(double *const *)f)[i], out);
    else
        hps__conf_buf_puts(out, (*(const char *const *const *)f)[i]);
}

size_t hps__conf_value_count(const struct hps__conf_key *k, const void *base)
{
    return hps__conf_is_list(k->type) ? *LENPTR(k, base) : 1;
}

void hps__conf_value_format(const struct hps__conf_key *k, const void *base, bool mask,
                            struct hps__conf_buf *out)
{
    if (!hps__conf_is_list(k->type)) {
        fmt_scalar(k, FIELD(k, base), mask, out);
        return;
    }
    for (size_t i = 0; i < *LENPTR(k, base); i++) {
        if (i)
            hps__conf_buf_puts(out, ", ");
        hps__conf_value_format_entry(k, base, i, out);
    }
}

/* ---- Descriptions ----------------------------------------------------------- */

/* A bound of k as the user writes it. */
static void fmt_bound(const struct hps__conf_key *k, double v, struct hps__conf_buf *out)
{
    if (k->type == HPS__CONF_T_SIZE)
        fmt_size((uint64_t)v, out);
    else if (k->type == HPS__CONF_T_MODE)
        hps__conf_buf_printf(out, "%04o", (unsigned)v);
    else if (v != floor(v) || fabs(v) > 1e15)
        fmt_real(v, out); /* a fractional bound of a REAL */
    else if (k->type == HPS__CONF_T_REAL || k->type == HPS__CONF_T_REAL_GT ||
             k->type == HPS__CONF_T_TREALS)
        hps__conf_buf_printf(out, "%.0f", v); /* (0, 1], not (0.0, 1.0] */
    else
        hps__conf_buf_printf(out, "%" PRId64, (int64_t)v);
}

/* " in [lo, hi]", " in (lo, hi]", " >= lo" or "" (no bounds). */
static void range_phrase(const struct hps__conf_key *k, struct hps__conf_buf *out)
{
    if (isinf(k->lo) && isinf(k->hi))
        return;
    if (isinf(k->hi)) {
        hps__conf_buf_puts(out, k->type == HPS__CONF_T_SIZE ? " of at least " : " >= ");
        fmt_bound(k, k->lo, out);
        return;
    }
    hps__conf_buf_puts(out, k->type == HPS__CONF_T_REAL_GT ? " in (" : " in [");
    fmt_bound(k, k->lo, out);
    hps__conf_buf_puts(out, ", ");
    fmt_bound(k, k->hi, out);
    hps__conf_buf_puts(out, "]");
}

static void string_phrase(hps__conf_check_t check, bool plural, struct hps__conf_buf *out)
{
    switch (check) {
    case HPS__CONF_CHECK_path:
        hps__conf_buf_puts(out, plural ? "non-empty paths" : "a non-empty path");
        break;
    case HPS__CONF_CHECK_host:
        hps__conf_buf_puts(out, "a host name or an IP address");
        break;
    case HPS__CONF_CHECK_hostports:
        hps__conf_buf_puts(
            out, "a comma-separated list of host:port (port in [1, 65535]; IPv6 as [addr]:port)");
        break;
    case HPS__CONF_CHECK_shm_name:
        hps__conf_buf_puts(out, "a name matching [A-Za-z0-9_.-]{1,200}");
        break;
    case HPS__CONF_CHECK_name:
        hps__conf_buf_puts(out, plural ? "names" : "a name");
        hps__conf_buf_puts(out, " matching [A-Za-z0-9_-]{1,120}");
        break;
    default:
        hps__conf_buf_puts(out, "any text");
    }
}

static void enum_phrase(const struct hps__conf_enum *en, struct hps__conf_buf *out)
{
    bool first = true;

    hps__conf_buf_puts(out, "one of ");
    for (size_t i = 0; i < en->count; i++) {
        if (!en->names[i].canonical)
            continue;
        hps__conf_buf_printf(out, "%s%s", first ? "" : ", ", en->names[i].name);
        first = false;
    }
}

/* What one value (or one list entry) may be. */
static void elem_phrase(const struct hps__conf_key *k, bool plural, struct hps__conf_buf *out)
{
    switch (k->type) {
    case HPS__CONF_T_BOOL:
        hps__conf_buf_puts(out, "true or false (also yes/no, on/off, 1/0)");
        return;
    case HPS__CONF_T_AUTO:
        hps__conf_buf_puts(out, "auto or an integer");
        break;
    case HPS__CONF_T_INT:
        /* the one integer key with a gap in its range (conf.c refuses 5 to 7) */
        if (k->sec == HPS__CONF_SEC_update_source && strcmp(k->name, "key_bytes") == 0) {
            hps__conf_buf_puts(out, "4 or 8");
            return;
        }
        /* fall through */
    case HPS__CONF_T_INTS:
    case HPS__CONF_T_TINTS:
        hps__conf_buf_puts(out, plural ? "integers" : "an integer");
        break;
    case HPS__CONF_T_SIZE:
        hps__conf_buf_puts(out, "a size");
        range_phrase(k, out);
        hps__conf_buf_puts(out, " (units B, KiB, MiB, GiB, TiB)");
        return;
    case HPS__CONF_T_MARGIN:
        hps__conf_buf_puts(out, "max (unbounded) or an integer");
        break;
    case HPS__CONF_T_REAL:
    case HPS__CONF_T_REAL_GT:
    case HPS__CONF_T_TREALS:
        if (isinf(k->lo) && isinf(k->hi))
            hps__conf_buf_puts(out, plural ? "finite numbers" : "a finite number");
        else
            hps__conf_buf_puts(out, plural ? "numbers" : "a number");
        break;
    case HPS__CONF_T_MODE:
        hps__conf_buf_puts(out, "an octal mode");
        break;
    case HPS__CONF_T_ENUM:
        enum_phrase(k->en, out);
        return;
    case HPS__CONF_T_REGEXES:
        hps__conf_buf_puts(out, plural ? "POSIX extended regular expressions"
                                       : "a POSIX extended regular expression");
        return;
    default: /* STR, TSTRS */
        string_phrase(k->check, plural, out);
        return;
    }
    range_phrase(k, out);
}

void hps__conf_value_allowed(const struct hps__conf_key *k, struct hps__conf_buf *out)
{
    if (!hps__conf_is_list(k->type)) {
        elem_phrase(k, false, out);
        return;
    }
    hps__conf_buf_puts(out, "a comma-separated list of ");
    elem_phrase(k, true, out);
    if (hps__conf_is_tlist(k->type))
        hps__conf_buf_puts(out, ", one per table");
}

/* ---- Parsing: scalars ------------------------------------------------------ */

static bool parse_enum(const struct hps__conf_enum *en, const char *s, int *ret)
{
    for (size_t i = 0; i < en->count; i++) {
        if (strcmp(en->names[i].name, s) == 0) {
            *ret = en->names[i].value;
            return true;
        }
    }
    return false;
}

/* Parse a scalar into *v (a union big enough for any scalar field). */
static bool parse_scalar(const struct hps__conf_key *k, const char *raw, void *v, bool *ret_auto)
{
    switch (k->type) {
    case HPS__CONF_T_BOOL:
        return parse_bool(raw, v);
    case HPS__CONF_T_AUTO:
        if (strcasecmp(raw, "auto") == 0) {
            int64_t a = hps__conf_auto_value();
            *(int64_t *)v = a < k->lo ? (int64_t)k->lo : a > k->hi ? (int64_t)k->hi : a;
            *ret_auto = true;
            return true;
        }
        /* fall through */
    case HPS__CONF_T_INT:
        return parse_i64(raw, v) && in_range(k, (double)*(int64_t *)v);
    case HPS__CONF_T_SIZE:
        return parse_size(raw, v) && in_range(k, (double)*(uint64_t *)v);
    case HPS__CONF_T_MARGIN: {
        const char *end;
        if (strcasecmp(raw, "max") == 0 || strcasecmp(raw, "unbounded") == 0) {
            *(uint64_t *)v = HPS_CONF_UNBOUNDED;
            return true;
        }
        return parse_u64_prefix(raw, v, &end) && !*end && in_range(k, (double)*(uint64_t *)v);
    }
    case HPS__CONF_T_REAL:
    case HPS__CONF_T_REAL_GT:
        return parse_real(raw, v) && in_range(k, *(double *)v);
    case HPS__CONF_T_MODE:
        return parse_mode(raw, v) && in_range(k, *(uint32_t *)v);
    case HPS__CONF_T_ENUM:
        return parse_enum(k->en, raw, v);
    default:
        return false;
    }
}

static size_t scalar_size(hps__conf_type_t t)
{
    switch (t) {
    case HPS__CONF_T_BOOL:
        return sizeof(bool);
    case HPS__CONF_T_MODE:
        return sizeof(uint32_t);
    case HPS__CONF_T_ENUM:
        return sizeof(int);
    default:
        return 8; /* int64_t, uint64_t, double */
    }
}

static hps_err_t must_be(const struct hps__conf_key *k, struct hps__conf_buf *msg)
{
    hps__conf_buf_puts(msg, "must be ");
    hps__conf_value_allowed(k, msg);
    return msg->oom ? -ENOMEM : HPS_ECONFIG;
}

/*
 * Why a SIZE or MARGIN value that looks like a number was refused, after
 * "must be ...": a unit that is not one of the units (SI units such as MB
 * are refused: sizes are binary, and M alone already means MiB), or a number
 * past the largest value accepted.  These two types have no upper bound of
 * their own, so the description states none; the bound is 2^64 - 1.
 */
static void why_refused(const struct hps__conf_key *k, const char *raw, struct hps__conf_buf *msg)
{
    const char *u = raw;

    if ((k->type != HPS__CONF_T_SIZE && k->type != HPS__CONF_T_MARGIN) ||
        !isdigit((unsigned char)*raw))
        return;
    while (isdigit((unsigned char)*u))
        u++;
    const char *digits_end = u;
    while (k->type == HPS__CONF_T_SIZE && (*u == ' ' || *u == '\t'))
        u++;
    unsigned shift = 0;
    bool unit = k->type == HPS__CONF_T_MARGIN && !*u;
    for (size_t i = 0;
         k->type == HPS__CONF_T_SIZE && i < sizeof(size_units) / sizeof(size_units[0]); i++) {
        if (strcasecmp(u, size_units[i].name) == 0) {
            unit = true;
            shift = size_units[i].shift;
        }
    }
    if (!unit) {
        for (const char *c = u; *c; c++)
            if (!isalpha((unsigned char)*c))
                return; /* not a unit: "1.5GiB", "64 KiB x" */
        if (k->type != HPS__CONF_T_SIZE)
            return;
        hps__conf_buf_printf(msg, "; \"%s\" is not one of the units", u);
        const char *si = strlen(u) == 2 && (u[1] == 'B' || u[1] == 'b')
                             ? strchr("kmgt", tolower((unsigned char)u[0]))
                             : NULL;
        if (si && *si) {
            unsigned n = (unsigned)(si - "kmgt") + 1; /* k: 1 ... t: 4 */
            int nd = (int)(digits_end - raw);
            hps__conf_buf_printf(
                msg,
                " (sizes are binary: %.*s%ciB is %.*s x 2^%u bytes; SI units such as "
                "%cB = 10^%u bytes are not accepted)",
                nd, raw, toupper((unsigned char)*si), nd, raw, 10 * n, toupper((unsigned char)*si),
                3 * n);
        }
        return;
    }
    uint64_t v;
    const char *end;
    if (parse_u64_prefix(raw, &v, &end) && (!shift || v <= (UINT64_MAX >> shift)))
        return; /* a number in range: refused by the lower bound, stated */
    if (!isinf(k->hi))
        return; /* the range states the largest value accepted */
    hps__conf_buf_printf(msg, "; %.*s is too large: the largest %s accepted is %" PRIu64 "%s", 40,
                         raw, k->type == HPS__CONF_T_SIZE ? "size" : "integer", UINT64_MAX,
                         k->type == HPS__CONF_T_SIZE
                             ? " bytes (2^64 - 1, a little under 16777216TiB)"
                             : " (2^64 - 1, the same as max)");
}

static hps_err_t set_scalar(const struct hps__conf_key *k, const char *raw, void *f, bool *ret_auto,
                            struct hps__conf_buf *msg)
{
    union {
        bool b;
        int64_t i;
        uint64_t u;
        double d;
        uint32_t m;
        int e;
    } v = {0};

    if (k->type == HPS__CONF_T_STR) {
        if (!check_string(k->check, raw))
            return must_be(k, msg);
        char *s = k->check == HPS__CONF_CHECK_hostports ? hostports_dup(raw) : strdup(raw);
        if (!s)
            return -ENOMEM;
        *(char **)f = s;
        return 0;
    }
    if (!parse_scalar(k, raw, &v, ret_auto)) {
        hps_err_t err = must_be(k, msg);
        /* HugeCTR's volatile_db could be a Redis Cluster: say where it went. */
        why_refused(k, raw, msg);
        if (k->sec == HPS__CONF_SEC_volatile_db && strcmp(k->name, "type") == 0 &&
            (strcasecmp(raw, "redis_cluster") == 0 || strcasecmp(raw, "redis") == 0))
            hps__conf_buf_puts(msg, "; a Redis Cluster is [distributed_db] type = redis_cluster "
                                    "here (HugeCTR configured it as its volatile_db)");
        return msg->oom ? -ENOMEM : err;
    }
    memcpy(f, &v, scalar_size(k->type));
    return 0;
}

/* ---- Parsing: lists --------------------------------------------------------- */

/* End of one list entry: the next top-level comma or the NUL.  Regex mode
 * skips commas in (), {} and bracket expressions, and escaped characters. */
static const char *entry_end(const char *s, bool regex)
{
    int depth = 0;
    bool bracket = false;

    for (; *s; s++) {
        if (!regex) {
            if (*s == ',')
                return s;
            continue;
        }
        if (*s == '\\' && s[1]) {
            s++;
        } else if (bracket) {
            bracket = *s != ']';
        } else if (*s == '[') {
            bracket = true;
            if (s[1] == '^')
                s++;
            if (s[1] == ']')
                s++; /* "[]...]": a leading ']' is a literal */
        } else if (*s == '(' || *s == '{') {
            depth++;
        } else if ((*s == ')' || *s == '}') && depth > 0) {
            depth--;
        } else if (*s == ',' && depth == 0) {
            return s;
        }
    }
    return s;
}

static char *trimmed_dup(const char *s, size_t n)
{
    while (n && isspace((unsigned char)*s)) {
        s++;
        n--;
    }
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
    return hps__conf_strndup(s, n);
}

/* See internal.h.  Also: a trailing comma ends the list ("a, b," is two
 * entries, as "a,\n    b," on continuation lines is); "," alone is one
 * empty entry, which the callers refuse. */
char **hps__conf_list_split(const char *raw, bool regex, size_t *ret_n, bool *ret_oom)
{
    char **v = NULL;
    size_t n = 0;

    *ret_n = 0;
    *ret_oom = false;
    while (isspace((unsigned char)*raw))
        raw++;
    if (!*raw)
        return NULL;
    for (const char *s = raw;;) {
        const char *e = entry_end(s, regex);
        char **nv = realloc(v, (n + 1) * sizeof(*v));
        char *item = nv ? trimmed_dup(s, (size_t)(e - s)) : NULL;
        if (nv)
            v = nv;
        if (!item) {
            hps__conf_list_free(v, n);
            *ret_oom = true;
            return NULL;
        }
        v[n++] = item;
        if (!*e)
            break;
        s = e + 1;
    }
    if (n > 1 && !v[n - 1][0]) /* a trailing comma ends the list */
        free(v[--n]);
    *ret_n = n;
    return v;
}

void hps__conf_list_free(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

/* Largest product of the repetitions of a regex (see dup_cost). */
#define REGEX_MAX_COPIES 256.0

/*
 * An upper bound of the work glibc's regcomp does for a regex's repetitions:
 * it expands each '+' into one more copy and '{m,n}' into n copies, and a
 * repetition of something already repeated ("5*+", "(a*+)*+") multiplies the
 * states of its automaton, so nested or repeated ones multiply: 14 of them
 * in "x(5*++++++)*++++++" took over 20 s, "((a{1,999}){1,999})" minutes and
 * gigabytes (fuzz-conf's findings).  Counted over the whole text as if
 * every repetition were nested: '*', '+' and '?' count 2, '{m,n}' n + 1.
 * Up to 8 of the first, or one bounded repetition of up to 255, pass: model
 * names need far fewer.  Measured before the limit (hps-conf check, this
 * build without sanitizers): "x5*" and 10 '+' 0.56 s, 12 '+' 10.9 s.
 */
static double dup_cost(const char *s)
{
    double cost = 1;
    for (const char *p = s; *p && cost <= REGEX_MAX_COPIES; p++) {
        if (*p == '\\' && p[1]) {
            p++; /* an escaped character repeats nothing */
        } else if (*p == '+' || *p == '*' || *p == '?') {
            cost *= 2;
        } else if (*p == '{') {
            char *end;
            unsigned long lo = strtoul(p + 1, &end, 10), hi = lo;
            if (*end == ',')
                hi = end[1] == '}' ? lo + 1 : strtoul(end + 1, NULL, 10);
            cost *= (double)(hi > lo ? hi : lo) + 1;
        }
    }
    return cost;
}

/* "entry N (s) " (1-based, as the INI's messages count) before the reason
 * when named; nothing for hps__conf_value_check_entry(), whose caller names it. */
static void entry_name(const struct hps__conf_key *k, const char *s, size_t i, bool named,
                       struct hps__conf_buf *msg)
{
    if (named)
        hps__conf_buf_printf(msg, "entry %zu (%s) ", i + 1,
                             hps__conf_masked(k->check == HPS__CONF_CHECK_secret, s));
}

/* Check entry i (stored at out[i] for numbers); on failure append the
 * reason to msg, after "entry N (s) " if named. */
static bool check_entry(const struct hps__conf_key *k, const char *s, void *out, size_t i,
                        bool named, struct hps__conf_buf *msg)
{
    bool ok;

    if (k->type == HPS__CONF_T_REGEXES) {
        if (dup_cost(s) > REGEX_MAX_COPIES) {
            entry_name(k, s, i, named, msg);
            hps__conf_buf_printf(msg,
                                 "repeats too much: its '*', '+', '?' and '{m,n}' "
                                 "multiply to more than %.0f (each counts 2, {m,n} n + 1), which "
                                 "compiles slowly; simplify it",
                                 REGEX_MAX_COPIES);
            return false;
        }
        regex_t re;
        int rc = regcomp(&re, s, REG_EXTENDED | REG_NOSUB);
        if (rc == 0) {
            regfree(&re);
            return true;
        }
        char why[128];
        regerror(rc, &re, why, sizeof(why));
        entry_name(k, s, i, named, msg);
        hps__conf_buf_printf(msg, "is not a valid POSIX extended regular expression: %s", why);
        return false;
    }
    if (k->type == HPS__CONF_T_TSTRS)
        ok = check_string(k->check, s);
    else if (k->type == HPS__CONF_T_TREALS)
        ok = parse_real(s, (double *)out + i) && in_range(k, ((double *)out)[i]);
    else
        ok = parse_i64(s, (int64_t *)out + i) && in_range(k, (double)((int64_t *)out)[i]);
    if (!ok) {
        entry_name(k, s, i, named, msg);
        hps__conf_buf_puts(msg, "must be ");
        elem_phrase(k, false, msg);
    }
    return ok;
}

hps_err_t hps__conf_value_check_entry(const struct hps__conf_key *k, const char *s,
                                      struct hps__conf_buf *msg)
{
    union {
        int64_t i;
        double d;
    } scratch;

    if (!*s)
        hps__conf_buf_puts(msg, "must not be empty");
    else if (check_entry(k, s, &scratch, 0, false, msg))
        return 0;
    return msg->oom ? -ENOMEM : HPS_ECONFIG;
}

/* The first empty entry of a list (a comma at its start or after another
 * comma: hps__conf_list_split() drops a trailing one), reported into msg. */
static bool empty_entry(const struct hps__conf_key *k, char **items, size_t n,
                        struct hps__conf_buf *msg)
{
    for (size_t i = 0; i < n; i++) {
        if (items[i][0])
            continue;
        hps__conf_buf_printf(msg,
                             "entry %zu is empty (a comma may end the list, but not start it nor "
                             "follow another comma); must be ",
                             i + 1);
        hps__conf_value_allowed(k, msg);
        return true;
    }
    return false;
}

static hps_err_t parse_entries(const struct hps__conf_key *k, char **items, size_t n, void **ret,
                               struct hps__conf_buf *msg)
{
    bool strings = k->type == HPS__CONF_T_TSTRS || k->type == HPS__CONF_T_REGEXES;
    void *out = strings ? NULL : calloc(n, 8);

    if (!strings && !out)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (check_entry(k, items[i], out, i, true, msg))
            continue;
        free(out);
        return msg->oom ? -ENOMEM : HPS_ECONFIG;
    }
    *ret = strings ? (void *)items : out;
    return 0;
}

static hps_err_t set_list(const struct hps__conf_key *k, const char *raw, hps__conf_base_t base,
                          size_t ntables, struct hps__conf_buf *msg)
{
    size_t n;
    bool oom;
    void *v;
    char **items = hps__conf_list_split(raw, k->type == HPS__CONF_T_REGEXES, &n, &oom);

    if (oom)
        return -ENOMEM;
    if (n == 0)
        return must_be(k, msg);
    if (empty_entry(k, items, n, msg)) { /* before the count: "a,,b" is not 3 entries */
        hps__conf_list_free(items, n);
        return msg->oom ? -ENOMEM : HPS_ECONFIG;
    }
    if (hps__conf_is_tlist(k->type) && ntables && n != ntables) {
        hps__conf_buf_printf(msg, "has %zu %s, but sparse_files has %zu (one per table)", n,
                             n == 1 ? "entry" : "entries", ntables);
        hps__conf_list_free(items, n);
        return msg->oom ? -ENOMEM : HPS_ECONFIG;
    }
    hps_err_t rc = parse_entries(k, items, n, &v, msg);
    if (rc == 0) {
        *(void **)FIELD(k, base) = v;
        *LENPTR(k, base) = n;
    }
    if (rc || v != (void *)items)
        hps__conf_list_free(items, n);
    return rc;
}

hps_err_t hps__conf_value_parse(const struct hps__conf_key *k, const char *raw,
                                hps__conf_base_t base, size_t ntables, bool *ret_auto,
                                struct hps__conf_buf *msg)
{
    if (hps__conf_is_list(k->type))
        return set_list(k, raw, base, ntables, msg);
    return set_scalar(k, raw, FIELD(k, base), ret_auto, msg);
}

void hps__conf_value_free(const struct hps__conf_key *k, hps__conf_base_t base)
{
    void *f = FIELD(k, base);

    if (k->type == HPS__CONF_T_STR) {
        free(*(char **)f);
    } else if (k->type == HPS__CONF_T_TSTRS || k->type == HPS__CONF_T_REGEXES) {
        hps__conf_list_free(*(char ***)f, *LENPTR(k, base));
    } else if (hps__conf_is_list(k->type)) {
        free(*(void **)f);
    }
}

/* ---- Defaults ---------------------------------------------------------------- */

char *hps__conf_value_default(const struct hps__conf_key *k, size_t ntables, bool *ret_oom)
{
    struct hps__conf_buf b = {0};
    const char *t = k->dflt ? strstr(k->dflt, "{t}") : NULL;

    *ret_oom = false;
    if (!k->dflt)
        return NULL;
    hps__conf_buf_add(&b, "", 0);
    if (!hps__conf_is_tlist(k->type))
        hps__conf_buf_puts(&b, k->dflt);
    for (size_t i = 0; hps__conf_is_tlist(k->type) && i < ntables; i++) {
        hps__conf_buf_puts(&b, i ? ", " : "");
        if (!t) {
            hps__conf_buf_puts(&b, k->dflt);
            continue;
        }
        hps__conf_buf_add(&b, k->dflt, (size_t)(t - k->dflt));
        hps__conf_buf_printf(&b, "%zu%s", i, t + 3);
    }
    if (b.oom) {
        hps__conf_buf_fini(&b);
        *ret_oom = true;
        return NULL;
    }
    return b.p;
}
