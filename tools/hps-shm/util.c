/*
 * util.c -- errors, attaching, JSON and text formatting for hps-shm.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/printbuf.h>

#include "hps-shm.h"

static void vreport(const hps__tool_t *t, hps_err_t err, const char *fmt, va_list ap)
{
    if (t->cmd[0])
        fprintf(stderr, "hps-shm %s: ", t->cmd);
    else
        fputs("hps-shm: ", stderr);
    vfprintf(stderr, fmt, ap);
    if (err != 0)
        fprintf(stderr, ": %s (%s)", hps_strerror(err), hps_err_name(err));
    fputc('\n', stderr);
}

int hps__tool_fail(const hps__tool_t *t, hps_err_t err, const char *hint, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vreport(t, err, fmt, ap);
    va_end(ap);
    if (hint)
        fprintf(stderr, "hint: %s\n", hint);
    return HPS__TOOL_FAIL;
}

int hps__tool_usage(const hps__tool_t *t, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vreport(t, 0, fmt, ap);
    va_end(ap);
    fputs("hint: run 'hps-shm --help' for the usage\n", stderr);
    return HPS__TOOL_USAGE;
}

const char *hps__tool_attach_hint(hps_err_t err)
{
    switch (err) {
    case HPS_ENOTFOUND:
        return "run 'hps-shm ls' to list the segments in /dev/shm";
    case HPS_EINVAL:
        return "a segment name is 1..200 characters of [A-Za-z0-9_.-], without the 'hps.' "
               "prefix";
    case HPS_EBADMAGIC:
        return "the object is not an HPS segment; remove it with 'hps-shm rm NAME' if nothing "
               "uses it";
    case HPS_EVERSION:
        return "the segment was made by another HPS version; use that version's hps-shm, or "
               "stop its users and remove it with 'hps-shm rm NAME'";
    case HPS_ETRUNCATED:
    case HPS_ECORRUPT:
        return "the segment is damaged; stop its users, remove it with 'hps-shm rm NAME' and "
               "restart the coordinator (the volatile DB is a cache)";
    case HPS_EFULL:
        return "the process table is full of live processes; stop some workers or wait for "
               "them to detach";
    case -EACCES:
    case -EPERM:
        return "run as the user that owns the segment (see ls -l /dev/shm), or as root";
    default:
        return "see the error above; 'hps-shm ls' shows whether the segment attaches";
    }
}

const hps_shmdb_proc_opts_t hps__tool_popts = {
    .num_threads = 1, .role = HPS_ROLE_TOOL, .device = -1, .rowless_if_full = true};

int hps__tool_attach(const hps__tool_t *t, const char *name, hps_shmdb_t **ret)
{
    hps_shmdb_t *db = NULL;
    char detail[256] = "";
    hps_err_t err = hps_shmdb_attach(name, &hps__tool_popts, &db);

    if (err != 0) {
        /* probe says more than the code (which magic, which sizes differ...) */
        if (err != HPS_ENOTFOUND && hps_shmdb_probe(name, detail, sizeof detail) != 0 && detail[0])
            fprintf(stderr, "hps-shm %s: segment '%s': %s\n", t->cmd, name, detail);
        return hps__tool_fail(t, err, hps__tool_attach_hint(err), "cannot attach to segment '%s'",
                              name);
    }
    *ret = db;
    return HPS__TOOL_OK;
}

/* Append ", s" (or s first) to the list in buf[len]; ", ..." once it is full
 * (room for that is kept). */
static void list_add(char *buf, size_t len, const char *s)
{
    size_t used = strlen(buf);

    if (used >= 3 && strcmp(buf + used - 3, "...") == 0)
        return;
    if (used + 2 + strlen(s) + 5 < len)
        snprintf(buf + used, len - used, "%s%s", used ? ", " : "", s);
    else
        snprintf(buf + used, len - used, "%s...", used ? ", " : "");
}

/* s is an entry of the list in buf (names hold no ',' nor ' '). */
static bool list_has(const char *buf, const char *s)
{
    size_t len = strlen(s);

    for (const char *p = buf; (p = strstr(p, s)) != NULL; p += len) {
        if ((p == buf || p[-1] == ' ') && (p[len] == '\0' || p[len] == ','))
            return true;
    }
    return false;
}

/* Directory entries in the segment: the table count, or 0 when it is out of
 * range (corrupt; hps__tool_find_table says so). */
static uint32_t entry_count(hps_shmdb_t *db)
{
    uint32_t n = hps_shmdb_table_count(db);

    return n <= HPS_SHMDB_MAX_TABLES ? n : 0;
}

/*
 * The id of table number `index` (a decimal number: 0, 1, ...) among the
 * directory entries of `model`, in id order, as hps-shm info lists them:
 * corrupt entries count too (hps_shmdb_table_entry), so that an index
 * always names the same entry.  HPS_ENOTFOUND if `index` is not a number
 * or the model has fewer entries.
 */
static hps_err_t find_by_index(hps_shmdb_t *db, const char *model, const char *index,
                               uint32_t *ret_id)
{
    uint32_t n = entry_count(db), k = 0;
    hps_table_entry_t e;
    unsigned long want;
    char *end = NULL;

    if (!isdigit((unsigned char)index[0]))
        return HPS_ENOTFOUND;
    errno = 0;
    want = strtoul(index, &end, 10);
    if (*end != '\0' || errno == ERANGE)
        return HPS_ENOTFOUND;
    for (uint32_t id = 0; id < n; id++) {
        hps_err_t err = hps_shmdb_table_entry(db, id, &e);
        if ((err != 0 && err != HPS_ECORRUPT) || strcmp(e.model, model) != 0)
            continue;
        if (k++ == want) {
            *ret_id = id;
            return 0;
        }
    }
    return HPS_ENOTFOUND;
}

/* No table `table` of `model`: say whether the model exists, and list its
 * tables ("0 t64, 1 t32", a corrupt entry marked) or the segment's
 * models. */
static int table_not_found(const hps__tool_t *t, hps_shmdb_t *db, const char *model,
                           const char *table)
{
    uint32_t n = entry_count(db), k = 0;
    hps_table_entry_t e;
    char tables[512] = "", models[512] = "", item[200], name[128];

    for (uint32_t id = 0; id < n; id++) {
        hps_err_t err = hps_shmdb_table_entry(db, id, &e);
        if (err != 0 && err != HPS_ECORRUPT)
            continue;
        if (strcmp(e.model, model) == 0) {
            snprintf(item, sizeof item, "%u %s%s", k++,
                     hps__tool_printable(e.table, name, sizeof name), err ? " (corrupt)" : "");
            list_add(tables, sizeof tables, item);
        } else if (!list_has(models, hps__tool_printable(e.model, name, sizeof name))) {
            list_add(models, sizeof models, name);
        }
    }
    if (k == 0)
        return hps__tool_fail(t, HPS_ENOTFOUND,
                              "run 'hps-shm info NAME' to list the models and their tables",
                              "no model '%s' in segment '%s' (%s%s)", model, t->argv[0],
                              models[0] ? "its models: " : "it holds no tables", models);
    return hps__tool_fail(t, HPS_ENOTFOUND, "run 'hps-shm info NAME' to list the tables",
                          "no table '%s' of model '%s' (its tables by index: %s)", table, model,
                          tables);
}

int hps__tool_find_table(const hps__tool_t *t, hps_shmdb_t *db, const char *model,
                         const char *table, uint32_t *ret_id, hps_table_info_t *ret_info)
{
    uint32_t id = 0, n = hps_shmdb_table_count(db);
    hps_table_entry_t e;
    char mname[128], tname[128];
    hps_err_t err;

    if (n > HPS_SHMDB_MAX_TABLES)
        return hps__tool_fail(t, HPS_ECORRUPT, "run 'hps-shm check NAME'",
                              "segment '%s': table count %u out of range (at most %u): the "
                              "table directory cannot be read",
                              t->argv[0], n, HPS_SHMDB_MAX_TABLES);
    err = hps_shmdb_table_find(db, model, table, &id);
    if (err == HPS_ENOTFOUND)
        err = find_by_index(db, model, table, &id);
    if (err == HPS_ENOTFOUND)
        return table_not_found(t, db, model, table);
    if (err == 0)
        err = hps_shmdb_table_entry(db, id, &e);
    if (err == HPS_ECORRUPT)
        return hps__tool_fail(t, err, "run 'hps-shm check NAME'; the other tables still answer",
                              "table %u (%s/%s) of segment '%s' is corrupt: %s", id,
                              hps__tool_printable(e.model, mname, sizeof mname),
                              hps__tool_printable(e.table, tname, sizeof tname), t->argv[0],
                              e.problem);
    if (err == 0)
        err = hps_shmdb_table_info(db, id, ret_info);
    if (err != 0)
        return hps__tool_fail(t, err, NULL, "cannot read table %s/%s", model, table);
    *ret_id = id;
    return HPS__TOOL_OK;
}

int hps__tool_flush(const hps__tool_t *t)
{
    if (fflush(stdout) != 0 || ferror(stdout))
        return hps__tool_fail(t, -errno, "check the output destination", "cannot write to stdout");
    return HPS__TOOL_OK;
}

int hps__tool_emit_json(const hps__tool_t *t, json_object *obj)
{
    const int flags =
        JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE;
    const char *s = json_object_to_json_string_ext(obj, flags);
    int rc;

    if (!s) {
        json_object_put(obj);
        return hps__tool_fail(t, -ENOMEM, NULL, "cannot format the JSON output");
    }
    fputs(s, stdout);
    fputc('\n', stdout);
    rc = hps__tool_flush(t);
    json_object_put(obj);
    return rc;
}

void hps__tool_jset(json_object *obj, const char *key, json_object *val)
{
    /* json-c takes ownership of val even when the add fails. */
    if (obj)
        json_object_object_add(obj, key, val);
    else
        json_object_put(val);
}

/* Bytes of the well-formed UTF-8 sequence at s[0..n) (RFC 3629: no
 * overlong forms, no surrogates, at most U+10FFFF), or 0 if s[0] starts
 * none. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len = c >= 0xc2 && c <= 0xdf   ? 2
                 : c >= 0xe0 && c <= 0xef ? 3
                 : c >= 0xf0 && c <= 0xf4 ? 4
                                          : 0;
    /* The second byte's range, narrower after E0, ED, F0 and F4. */
    unsigned char lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
    unsigned char hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;

    if (len == 0 || len > n || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++) {
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    }
    return len;
}

/*
 * Serializer of the strings of hps__tool_json_str(): always valid UTF-8
 * JSON (RFC 8259), whatever the bytes.  '"' and '\\' are escaped, the
 * control characters (U+0000..U+001F, DEL U+007F and the C1 controls
 * U+0080..U+009F) as \uXXXX (the short forms \b \f \n \r \t where they
 * exist), well-formed UTF-8 is copied, and each byte that is not part of
 * well-formed UTF-8 (a name corrupted to 0xff) becomes \u00XX of the byte
 * value, so the byte stays readable (as its Latin-1 character, never
 * U+FFFD, which would lose it).
 */
static int json_str_serialize(json_object *o, struct printbuf *pb, int level, int flags)
{
    const unsigned char *s = (const unsigned char *)json_object_get_string(o);
    size_t n = (size_t)json_object_get_string_len(o);
    char esc[8];

    (void)level;
    (void)flags;
    printbuf_memappend(pb, "\"", 1);
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t len = c < 0x80 ? 1 : utf8_seq(s + i, n - i);
        const char *short_esc = c == '"'    ? "\\\""
                                : c == '\\' ? "\\\\"
                                : c == '\b' ? "\\b"
                                : c == '\f' ? "\\f"
                                : c == '\n' ? "\\n"
                                : c == '\r' ? "\\r"
                                : c == '\t' ? "\\t"
                                            : NULL;
        if (short_esc) {
            printbuf_memappend(pb, short_esc, 2);
        } else if (c < 0x20 || c == 0x7f || len == 0) {
            snprintf(esc, sizeof esc, "\\u%04x", c); /* control, or a stray byte */
            printbuf_memappend(pb, esc, 6);
            len = 1;
        } else if (len == 2 && c == 0xc2 && s[i + 1] < 0xa0) {
            snprintf(esc, sizeof esc, "\\u%04x", s[i + 1]); /* C1 control */
            printbuf_memappend(pb, esc, 6);
        } else {
            printbuf_memappend(pb, (const char *)s + i, (int)len);
        }
        i += len;
    }
    printbuf_memappend(pb, "\"", 1);
    return 0;
}

json_object *hps__tool_json_str(const char *s)
{
    json_object *o = json_object_new_string(s ? s : "");

    if (o)
        json_object_set_serializer(o, json_str_serialize, NULL, NULL);
    return o;
}

const char *hps__tool_printable(const char *s, char *buf, size_t len)
{
    size_t k = 0;

    for (const unsigned char *p = (const unsigned char *)s; *p && k + 5 <= len; p++) {
        if (*p >= 0x20 && *p < 0x7f && *p != '\\') {
            buf[k++] = (char)*p;
        } else if (*p == '\\') {
            buf[k++] = '\\';
            buf[k++] = '\\';
        } else {
            k += (size_t)snprintf(buf + k, len - k, "\\x%02x", *p);
        }
    }
    if (len)
        buf[k < len ? k : len - 1] = '\0';
    return buf;
}

json_object *hps__tool_json_u64(uint64_t v)
{
    return json_object_new_uint64(v);
}

json_object *hps__tool_json_float(float v)
{
    char buf[32];

    if (isnan(v))
        return json_object_new_string("nan");
    if (isinf(v))
        return json_object_new_string(v > 0 ? "inf" : "-inf");
    snprintf(buf, sizeof buf, "%.9g", (double)v);
    return json_object_new_double_s((double)v, buf);
}

json_object *hps__tool_json_double(double v)
{
    char buf[32];

    if (!isfinite(v))
        return NULL; /* null */
    snprintf(buf, sizeof buf, "%.6g", v);
    return json_object_new_double_s(v, buf);
}

const char *hps__tool_fmt_bytes(uint64_t bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    size_t u = 0;

    while (v >= 1024.0 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, len, "%.1f %s", v, units[u]);
    return buf;
}

const char *hps__tool_fmt_time(uint64_t realtime_ns, char *buf, size_t len)
{
    time_t secs = (time_t)(realtime_ns / 1000000000u);
    struct tm tm;

    if (realtime_ns == 0 || !localtime_r(&secs, &tm) ||
        strftime(buf, len, "%Y-%m-%d %H:%M:%S %z", &tm) == 0)
        snprintf(buf, len, "-");
    return buf;
}

double hps__tool_age_clock_s(int clock, uint64_t stamp_ns)
{
    struct timespec ts;
    uint64_t now;

    if (stamp_ns == 0)
        return -1.0;
    clock_gettime(clock, &ts);
    now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    return now > stamp_ns ? (double)(now - stamp_ns) / 1e9 : 0.0;
}

double hps__tool_age_s(uint64_t monotonic_ns)
{
    return hps__tool_age_clock_s(CLOCK_MONOTONIC, monotonic_ns);
}

hps__tool_coord_t hps__tool_coord(hps_shmdb_t *db, const hps_segment_info_t *s)
{
    if (!s->coord_pid)
        return HPS__TOOL_COORD_NONE;
    if (!hps_shmdb_coordinator_attached(db))
        return HPS__TOOL_COORD_GONE;
    /* a coordinator of a build that did not say its timeout: attached is alive */
    if (s->coord_timeout_ms && !hps_shmdb_coordinator_alive(db, s->coord_timeout_ms, false))
        return HPS__TOOL_COORD_STALLED;
    return HPS__TOOL_COORD_ALIVE;
}

bool hps__tool_pid_alive(hps_shmdb_t *db, pid_t pid)
{
    return hps_shmdb_pid_alive(db, pid);
}

const char *hps__tool_fmt_age(double age_s, char *buf, size_t len)
{
    if (age_s < 0)
        snprintf(buf, len, "never");
    else
        snprintf(buf, len, "%.1f s ago", age_s);
    return buf;
}

const char *hps__tool_role_name(hps_proc_role_t role, char *buf, size_t len)
{
    switch (role) {
    case HPS_ROLE_TOOL:
        return "tool";
    case HPS_ROLE_COORDINATOR:
        return "coordinator";
    case HPS_ROLE_WORKER:
        return "worker";
    }
    snprintf(buf, len, "role %d", (int)role);
    return buf;
}
