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

int hps__tool_attach(const hps__tool_t *t, const char *name, hps_shmdb_t **ret)
{
    const hps_shmdb_proc_opts_t popts = {.num_threads = 1, .role = HPS_ROLE_TOOL, .device = -1};
    hps_shmdb_t *db = NULL;
    char detail[256] = "";
    hps_err_t err = hps_shmdb_attach(name, &popts, &db);

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

/*
 * The id of table number `index` (a decimal number: 0, 1, ...) among the
 * tables of `model`, in id order, as hps-shm info lists them.  HPS_ENOTFOUND
 * if `index` is not a number or the model has fewer tables.
 */
static hps_err_t find_by_index(hps_shmdb_t *db, const char *model, const char *index,
                               uint32_t *ret_id)
{
    uint32_t n = hps_shmdb_table_count(db), k = 0;
    hps_table_info_t ti;
    unsigned long want;
    char *end = NULL;

    if (!isdigit((unsigned char)index[0]))
        return HPS_ENOTFOUND;
    errno = 0;
    want = strtoul(index, &end, 10);
    if (*end != '\0' || errno == ERANGE)
        return HPS_ENOTFOUND;
    for (uint32_t id = 0; id < n; id++) {
        if (hps_shmdb_table_info(db, id, &ti) != 0 || strcmp(ti.model, model) != 0)
            continue;
        if (k++ == want) {
            *ret_id = id;
            return 0;
        }
    }
    return HPS_ENOTFOUND;
}

/* No table `table` of `model`: say whether the model exists, and list its
 * tables ("0 t64, 1 t32") or the segment's models. */
static int table_not_found(const hps__tool_t *t, hps_shmdb_t *db, const char *model,
                           const char *table)
{
    uint32_t n = hps_shmdb_table_count(db), k = 0;
    hps_table_info_t ti;
    char tables[512] = "", models[512] = "", item[160];

    for (uint32_t id = 0; id < n; id++) {
        if (hps_shmdb_table_info(db, id, &ti) != 0)
            continue;
        if (strcmp(ti.model, model) == 0) {
            snprintf(item, sizeof item, "%u %s", k++, ti.table);
            list_add(tables, sizeof tables, item);
        } else if (!list_has(models, ti.model)) {
            list_add(models, sizeof models, ti.model);
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
    uint32_t id = 0;
    hps_err_t err = hps_shmdb_table_find(db, model, table, &id);

    if (err == HPS_ENOTFOUND)
        err = find_by_index(db, model, table, &id);
    if (err == 0)
        err = hps_shmdb_table_info(db, id, ret_info);
    if (err == HPS_ENOTFOUND)
        return table_not_found(t, db, model, table);
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
