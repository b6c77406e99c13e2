/*
 * cmd-info.c -- hps-shm info NAME: header, tables with per-partition fill,
 * attached processes, GPU caches (cmd-info-gcache.c).
 *
 * Everything is a snapshot taken without locks, so counters of a busy
 * segment may be a little apart from each other (rows vs. inserts...).
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "hps-shm.h"

/** Partitions listed per line in the text output. */
#define PARTS_PER_LINE 8

/** One table's snapshot plus the per-partition figures derived from it. */
typedef struct table_snap {
    hps_table_info_t info;
    hps_partition_info_t parts[HPS_SHMDB_MAX_PARTITIONS];
    double fill_min, fill_max, fill_mean; /* rows / capacity of a partition */
    uint64_t repairs;                     /* sum of partition repairs */
    uint32_t parts_evicting;              /* partitions with evictions > 0 */
} table_snap_t;

/* The coordinator's published state (hps_shmdb_set_coord_state). */
static const char *coord_state_name(hps_coord_state_t st)
{
    switch (st) {
    case HPS_COORD_LOADING:
        return "loading";
    case HPS_COORD_SERVING:
        return "serving";
    case HPS_COORD_RELOADING:
        return "reloading";
    case HPS_COORD_RELOADING_SERVED:
        return "reloading (misses answered)";
    default:
        return "stopped";
    }
}

static double part_fill(const hps_partition_info_t *p)
{
    return p->capacity ? (double)p->rows / (double)p->capacity : 0.0;
}

static void snap_stats(table_snap_t *s)
{
    double sum = 0.0;

    s->fill_min = 1e300;
    s->fill_max = 0.0;
    for (uint32_t i = 0; i < s->info.num_partitions; i++) {
        double f = part_fill(&s->parts[i]);
        sum += f;
        s->fill_min = f < s->fill_min ? f : s->fill_min;
        s->fill_max = f > s->fill_max ? f : s->fill_max;
        s->repairs += s->parts[i].repairs;
        s->parts_evicting += s->parts[i].evictions > 0;
    }
    if (s->info.num_partitions == 0)
        s->fill_min = 0.0;
    else
        s->fill_mean = sum / s->info.num_partitions;
}

/* Snapshot of a sound table; an error (a descriptor that changed under us)
 * is returned, for the caller to list the table as unreadable. */
static hps_err_t table_snap(hps_shmdb_t *db, uint32_t id, table_snap_t *s)
{
    hps_err_t err = hps_shmdb_table_info(db, id, &s->info);

    if (err == 0 && s->info.num_partitions > HPS_SHMDB_MAX_PARTITIONS)
        err = HPS_ECORRUPT;
    if (err == 0)
        err = hps_shmdb_partition_info(db, id, s->parts);
    if (err == 0)
        snap_stats(s);
    return err;
}

/* Rows per partition at which eviction stops, or 0 when unbounded. */
static uint64_t target_rows(const hps_table_info_t *ti)
{
    if (ti->overflow_margin == UINT64_MAX)
        return 0;
    return (uint64_t)((double)ti->overflow_margin * ti->overflow_resolution_target);
}

/* Bytes past the allocator's bump pointer (used + free list): never handed
 * out yet.  With the free list, what the segment can still allocate. */
static uint64_t unused_bytes(const hps_segment_info_t *s)
{
    uint64_t bump = s->used_bytes + s->free_bytes;

    return s->size_bytes > bump ? s->size_bytes - bump : 0;
}

/* ---- JSON ---------------------------------------------------------------- */

static json_object *segment_json(hps_shmdb_t *db, const hps_segment_info_t *s)
{
    json_object *o = json_object_new_object();
    char buf[64];

    snprintf(buf, sizeof buf, "0x%08x", s->format);
    hps__tool_jset(o, "name", hps__tool_json_str(s->name));
    hps__tool_jset(o, "format", hps__tool_json_str(buf));
    hps__tool_jset(o, "size_bytes", hps__tool_json_u64(s->size_bytes));
    hps__tool_jset(o, "committed_bytes", hps__tool_json_u64(s->committed_bytes));
    hps__tool_jset(o, "used_bytes", hps__tool_json_u64(s->used_bytes));
    hps__tool_jset(o, "free_bytes", hps__tool_json_u64(s->free_bytes)); /* the free list */
    hps__tool_jset(o, "unused_bytes", hps__tool_json_u64(unused_bytes(s)));
    hps__tool_jset(o, "allocation_rate", hps__tool_json_u64(s->allocation_rate));
    hps__tool_jset(o, "creator_pid", json_object_new_int64(s->creator_pid));
    hps__tool_jset(o, "creator_alive", json_object_new_boolean(hps_shmdb_creator_attached(db)));
    hps__tool_jset(o, "created_ns", hps__tool_json_u64(s->created_ns));
    hps__tool_jset(o, "created",
                   hps__tool_json_str(hps__tool_fmt_time(s->created_ns, buf, sizeof buf)));
    hps__tool_jset(o, "coordinator_pid", json_object_new_int64(s->coord_pid));
    hps__tool_coord_t cv = hps__tool_coord(db, s);
    hps__tool_jset(o, "coordinator_alive", json_object_new_boolean(cv == HPS__TOOL_COORD_ALIVE));
    /* attached but silent past its worker_timeout_ms (stopped or hung) */
    hps__tool_jset(o, "coordinator_stalled",
                   json_object_new_boolean(cv == HPS__TOOL_COORD_STALLED));
    hps__tool_jset(o, "coordinator_timeout_ms",
                   s->coord_timeout_ms ? json_object_new_int64(s->coord_timeout_ms) : NULL);
    /* The state the coordinator recorded last: current only while
     * coordinator_alive (a killed coordinator leaves its last one). */
    hps__tool_jset(o, "coordinator_state", hps__tool_json_str(coord_state_name(s->coord_state)));
    hps__tool_jset(o, "coordinator_heartbeat_age_s",
                   s->coord_heartbeat_ns
                       ? hps__tool_json_double(hps__tool_age_s(s->coord_heartbeat_ns))
                       : NULL);
    hps__tool_jset(o, "repairs", hps__tool_json_u64(s->repairs));
    hps__tool_jset(o, "num_tables", json_object_new_int64(s->num_tables));
    return o;
}

static json_object *partition_json(const hps_partition_info_t *p)
{
    json_object *o = json_object_new_object();

    hps__tool_jset(o, "rows", hps__tool_json_u64(p->rows));
    hps__tool_jset(o, "capacity", hps__tool_json_u64(p->capacity));
    hps__tool_jset(o, "fill", hps__tool_json_double(part_fill(p)));
    hps__tool_jset(o, "bytes", hps__tool_json_u64(p->bytes));
    hps__tool_jset(o, "evictions", hps__tool_json_u64(p->evictions));
    hps__tool_jset(o, "repairs", hps__tool_json_u64(p->repairs));
    return o;
}

static void table_json_geometry(json_object *o, const hps_table_info_t *ti)
{
    bool bounded = ti->overflow_margin != UINT64_MAX;

    hps__tool_jset(o, "id", json_object_new_int64(ti->id));
    hps__tool_jset(o, "model", hps__tool_json_str(ti->model));
    hps__tool_jset(o, "table", hps__tool_json_str(ti->table));
    hps__tool_jset(o, "corrupt", json_object_new_boolean(false));
    hps__tool_jset(o, "model_version", json_object_new_int64(ti->model_version));
    hps__tool_jset(o, "dim", json_object_new_int64(ti->dim));
    hps__tool_jset(o, "key_bytes", json_object_new_int64(ti->key_bytes));
    hps__tool_jset(o, "storage_type", hps__tool_json_str(hps_dtype_name(ti->storage_type)));
    hps__tool_jset(o, "row_bytes", json_object_new_int64(ti->row_bytes));
    hps__tool_jset(o, "default_value", hps__tool_json_float(ti->default_value));
    hps__tool_jset(o, "num_partitions", json_object_new_int64(ti->num_partitions));
    hps__tool_jset(o, "overflow_margin", bounded ? hps__tool_json_u64(ti->overflow_margin) : NULL);
    hps__tool_jset(o, "overflow_policy",
                   hps__tool_json_str(hps_overflow_policy_name(ti->overflow_policy)));
    hps__tool_jset(o, "overflow_resolution_target",
                   hps__tool_json_double(ti->overflow_resolution_target));
    hps__tool_jset(o, "overflow_target_rows", bounded ? hps__tool_json_u64(target_rows(ti)) : NULL);
}

static void table_json_counters(json_object *o, const hps_table_info_t *ti)
{
    hps__tool_jset(o, "rows", hps__tool_json_u64(ti->rows));
    hps__tool_jset(o, "capacity", hps__tool_json_u64(ti->capacity));
    hps__tool_jset(o, "bytes", hps__tool_json_u64(ti->bytes));
    hps__tool_jset(o, "bytes_per_row",
                   ti->rows ? hps__tool_json_double((double)ti->bytes / (double)ti->rows) : NULL);
    hps__tool_jset(o, "bytes_per_slot",
                   hps__tool_json_double(hps_shmdb_bytes_per_slot_of(ti->dim, ti->overflow_policy,
                                                                     ti->storage_type)));
    hps__tool_jset(o, "lookups", hps__tool_json_u64(ti->lookups));
    hps__tool_jset(o, "hits", hps__tool_json_u64(ti->hits));
    hps__tool_jset(o, "hit_rate",
                   ti->lookups ? hps__tool_json_double((double)ti->hits / (double)ti->lookups)
                               : NULL);
    hps__tool_jset(o, "inserts", hps__tool_json_u64(ti->inserts));
    hps__tool_jset(o, "updates", hps__tool_json_u64(ti->updates));
    hps__tool_jset(o, "evictions", hps__tool_json_u64(ti->evictions));
    hps__tool_jset(o, "erased", hps__tool_json_u64(ti->erased));
}

static json_object *table_json(const table_snap_t *s)
{
    json_object *o = json_object_new_object();
    json_object *fill = json_object_new_object();
    json_object *parts = json_object_new_array();

    table_json_geometry(o, &s->info);
    table_json_counters(o, &s->info);
    hps__tool_jset(fill, "min", hps__tool_json_double(s->fill_min));
    hps__tool_jset(fill, "mean", hps__tool_json_double(s->fill_mean));
    hps__tool_jset(fill, "max", hps__tool_json_double(s->fill_max));
    hps__tool_jset(o, "fill", fill);
    hps__tool_jset(o, "partition_repairs", hps__tool_json_u64(s->repairs));
    for (uint32_t i = 0; i < s->info.num_partitions; i++)
        json_object_array_add(parts, partition_json(&s->parts[i]));
    hps__tool_jset(o, "partitions", parts);
    return o;
}

/* An entry that cannot be read: its id, names as stored and what is wrong. */
static json_object *corrupt_table_json(uint32_t id, const hps_table_entry_t *e)
{
    json_object *o = json_object_new_object();

    hps__tool_jset(o, "id", json_object_new_int64(id));
    hps__tool_jset(o, "model", hps__tool_json_str(e->model));
    hps__tool_jset(o, "table", hps__tool_json_str(e->table));
    hps__tool_jset(o, "corrupt", json_object_new_boolean(true));
    hps__tool_jset(o, "problem", hps__tool_json_str(e->problem));
    return o;
}

static json_object *proc_json(const hps_proc_info_t *p)
{
    json_object *o = json_object_new_object();
    char buf[64];

    hps__tool_jset(o, "pid", json_object_new_int64(p->pid));
    hps__tool_jset(o, "role", hps__tool_json_str(hps__tool_role_name(p->role, buf, sizeof buf)));
    hps__tool_jset(o, "device", p->device >= 0 ? json_object_new_int64(p->device) : NULL);
    hps__tool_jset(o, "alive", json_object_new_boolean(p->alive));
    hps__tool_jset(o, "self", json_object_new_boolean(p->self));
    hps__tool_jset(o, "slot", json_object_new_int64(p->slot));
    hps__tool_jset(o, "attached_ns", hps__tool_json_u64(p->attached_ns));
    hps__tool_jset(o, "attached",
                   hps__tool_json_str(hps__tool_fmt_time(p->attached_ns, buf, sizeof buf)));
    hps__tool_jset(o, "heartbeat_age_s",
                   p->heartbeat_ns ? hps__tool_json_double(hps__tool_age_s(p->heartbeat_ns))
                                   : NULL);
    /* a worker of an earlier build records no capabilities: a reload that
     * changes a model's shape is refused while it is attached */
    hps__tool_jset(o, "follows_shapes",
                   p->role == HPS_ROLE_WORKER
                       ? json_object_new_boolean(p->caps & HPS_PROC_CAP_FOLLOWS_SHAPES)
                       : NULL);
    /* ... and one that takes tables by name: a reload that renames or
     * reorders a model's tables is refused while it is attached */
    hps__tool_jset(o, "follows_order",
                   p->role == HPS_ROLE_WORKER
                       ? json_object_new_boolean(p->caps & HPS_PROC_CAP_FOLLOWS_ORDER)
                       : NULL);
    return o;
}

/* ---- text ---------------------------------------------------------------- */

static void segment_text(hps_shmdb_t *db, const hps_segment_info_t *s)
{
    char b1[64], b2[64];

    printf("segment %s\n", s->name);
    printf("  format           0x%08x\n", s->format);
#define BYTES_LINE(label, v, note)                                                                 \
    printf("  %-16s %llu bytes (%s)%s\n", label, (unsigned long long)(v),                          \
           hps__tool_fmt_bytes(v, b1, sizeof b1), note)
    BYTES_LINE("size", s->size_bytes, "");
    BYTES_LINE("committed", s->committed_bytes, "");
    BYTES_LINE("used", s->used_bytes, "");
    BYTES_LINE("unused", unused_bytes(s), ", never allocated yet");
    BYTES_LINE("free list", s->free_bytes, ", freed blocks kept for reuse");
    BYTES_LINE("allocation_rate", s->allocation_rate, "");
#undef BYTES_LINE
    printf("  creator pid      %d (%s)\n", (int)s->creator_pid,
           hps_shmdb_creator_attached(db) ? "alive" : "gone");
    printf("  created          %s\n", hps__tool_fmt_time(s->created_ns, b1, sizeof b1));
    if (s->coord_pid) {
        hps__tool_coord_t cv = hps__tool_coord(db, s);
        bool alive = cv == HPS__TOOL_COORD_ALIVE;
        char tm[48] = "";
        if (s->coord_timeout_ms)
            snprintf(tm, sizeof tm, " (worker_timeout_ms %u)", s->coord_timeout_ms);
        /* A dead or stalled coordinator's state is only the last one it recorded. */
        printf("  coordinator      pid %d (%s), %s%s, heartbeat %s%s\n", (int)s->coord_pid,
               alive                           ? "alive"
               : cv == HPS__TOOL_COORD_STALLED ? "stalled: attached, but silent past its "
                                                 "worker_timeout_ms; the workers call it gone"
                                               : "gone",
               alive ? "" : "last state ", coord_state_name(s->coord_state),
               hps__tool_fmt_age(hps__tool_age_s(s->coord_heartbeat_ns), b2, sizeof b2), tm);
    } else {
        printf("  coordinator      none (no heartbeat yet)\n");
    }
    printf("  repairs          %llu\n", (unsigned long long)s->repairs);
    if (s->num_tables > HPS_SHMDB_MAX_TABLES)
        printf("  tables           %u (out of range: at most %u; the table directory is not "
               "read)\n",
               s->num_tables, HPS_SHMDB_MAX_TABLES);
    else
        printf("  tables           %u\n", s->num_tables);
}

static void table_text_geometry(const hps_table_info_t *ti)
{
    char m[128], tb[128];

    printf("\ntable %s/%s (id %u), model version %u\n", hps__tool_printable(ti->model, m, sizeof m),
           hps__tool_printable(ti->table, tb, sizeof tb), ti->id, (unsigned)ti->model_version);
    printf("  dim %u, keys %s (%u bytes), default %.9g\n", ti->dim,
           ti->key_bytes == 4 ? "uint32" : "int64", ti->key_bytes, (double)ti->default_value);
    printf("  storage %s, %u bytes/row stored\n", hps_dtype_name(ti->storage_type), ti->row_bytes);
    printf("  partitions %u, overflow ", ti->num_partitions);
    if (ti->overflow_margin == UINT64_MAX)
        printf("margin unbounded");
    else
        printf("margin %llu rows/partition", (unsigned long long)ti->overflow_margin);
    printf(", policy %s, target %.6g", hps_overflow_policy_name(ti->overflow_policy),
           ti->overflow_resolution_target);
    if (ti->overflow_margin != UINT64_MAX)
        printf(" (evict down to %llu rows)", (unsigned long long)target_rows(ti));
    printf("\n");
}

static void table_text_counters(const hps_table_info_t *ti)
{
    char b[64];

    printf("  rows %llu, capacity %llu slots, %s", (unsigned long long)ti->rows,
           (unsigned long long)ti->capacity, hps__tool_fmt_bytes(ti->bytes, b, sizeof b));
    if (ti->rows)
        printf(" (%.1f bytes/row)", (double)ti->bytes / (double)ti->rows);
    printf(", %.1f bytes/slot\n",
           hps_shmdb_bytes_per_slot_of(ti->dim, ti->overflow_policy, ti->storage_type));
    printf("  lookups %llu, hits %llu", (unsigned long long)ti->lookups,
           (unsigned long long)ti->hits);
    if (ti->lookups)
        printf(" (hit rate %.1f%%)", 100.0 * (double)ti->hits / (double)ti->lookups);
    printf("\n  inserts %llu, updates %llu, erased %llu, evictions %llu\n",
           (unsigned long long)ti->inserts, (unsigned long long)ti->updates,
           (unsigned long long)ti->erased, (unsigned long long)ti->evictions);
}

static void table_text_parts(const table_snap_t *s)
{
    uint32_t np = s->info.num_partitions;

    printf("  fill min %.1f%% mean %.1f%% max %.1f%%; rows/capacity per partition:",
           100.0 * s->fill_min, 100.0 * s->fill_mean, 100.0 * s->fill_max);
    for (uint32_t i = 0; i < np; i++) {
        printf("%s p%u %llu/%llu", i % PARTS_PER_LINE ? " " : "\n   ", i,
               (unsigned long long)s->parts[i].rows, (unsigned long long)s->parts[i].capacity);
    }
    printf("\n  evictions per partition:");
    if (s->parts_evicting == 0)
        printf(" none");
    for (uint32_t i = 0, k = 0; i < np; i++) {
        if (s->parts[i].evictions == 0)
            continue;
        printf("%s p%u %llu", k++ % PARTS_PER_LINE ? " " : "\n   ", i,
               (unsigned long long)s->parts[i].evictions);
    }
    printf("\n");
    if (s->repairs)
        printf("  partition repairs %llu\n", (unsigned long long)s->repairs);
}

static void procs_text(const hps_proc_info_t *procs, size_t n)
{
    char role[32], age[64];

    printf("\nprocesses (%zu)\n", n);
    if (n == 0)
        return;
    printf("  %-8s  %-12s  %6s  %5s  %s\n", "PID", "ROLE", "DEVICE", "ALIVE", "HEARTBEAT");
    for (size_t i = 0; i < n; i++) {
        const hps_proc_info_t *p = &procs[i];
        char dev[16];
        if (p->device >= 0)
            snprintf(dev, sizeof dev, "%d", p->device);
        else
            snprintf(dev, sizeof dev, "-");
        bool fixed = p->role == HPS_ROLE_WORKER && !(p->caps & HPS_PROC_CAP_FOLLOWS_SHAPES);
        bool by_name = p->role == HPS_ROLE_WORKER && !(p->caps & HPS_PROC_CAP_FOLLOWS_ORDER);
        printf("  %-8d  %-12s  %6s  %5s  %s%s%s\n", (int)p->pid,
               hps__tool_role_name(p->role, role, sizeof role), dev, p->alive ? "yes" : "no",
               hps__tool_fmt_age(hps__tool_age_s(p->heartbeat_ns), age, sizeof age),
               p->self ? " (this hps-shm)" : "",
               fixed     ? " (an earlier build: cannot follow a model's new shape)"
               : by_name ? " (an earlier build: takes tables by name, not position)"
                         : "");
    }
}

/* ---- driver -------------------------------------------------------------- */

/* Problems info found (a corrupt table count or table): marked in the
 * listing, and in the document's "problems" (JSON); any makes info exit
 * HPS__TOOL_FAIL. */
typedef struct info_problems {
    json_object *arr; /* JSON, or NULL */
    unsigned n;
} info_problems_t;

__attribute__((format(printf, 2, 3))) static void info_problem(info_problems_t *p, const char *fmt,
                                                               ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    p->n++;
    if (p->arr) /* text: the listing marks it in place */
        json_object_array_add(p->arr, hps__tool_json_str(msg));
}

/* A directory entry that cannot be listed: marked in place (text, or an
 * entry of arr) and counted as a problem. */
static void info_corrupt_table(uint32_t id, const hps_table_entry_t *e, json_object *arr,
                               info_problems_t *p)
{
    char m[128], tb[128];

    hps__tool_printable(e->model, m, sizeof m);
    hps__tool_printable(e->table, tb, sizeof tb);
    if (arr)
        json_object_array_add(arr, corrupt_table_json(id, e));
    else
        printf("\ntable %s/%s (id %u): CORRUPT, not read: %s\n", m, tb, id, e->problem);
    info_problem(p, "table %u (%s/%s): %s", id, m, tb, e->problem);
}

/* Print every directory entry in id order (text) or add it to arr (JSON):
 * a sound table in full, a corrupt one marked (info_corrupt_table), so that
 * table ids and the per-model indexes of get and dump stay those listed. */
static int info_tables(const hps__tool_t *t, hps_shmdb_t *db, json_object *arr, info_problems_t *p)
{
    table_snap_t *s = malloc(sizeof *s);
    uint32_t n = hps_shmdb_table_count(db);
    hps_table_entry_t e;

    if (!s)
        return hps__tool_fail(t, -ENOMEM, NULL, "cannot read the tables");
    if (n > HPS_SHMDB_MAX_TABLES) {
        info_problem(p, "header: table count %u out of range (at most %u): tables not listed", n,
                     HPS_SHMDB_MAX_TABLES);
        n = 0;
    }
    for (uint32_t id = 0; id < n; id++) {
        hps_err_t err = hps_shmdb_table_entry(db, id, &e);
        *s = (table_snap_t){0};
        if (err == 0)
            err = table_snap(db, id, s);
        if (err != 0) {
            if (!e.problem[0])
                snprintf(e.problem, sizeof e.problem, "%s (%s)", hps_strerror(err),
                         hps_err_name(err));
            info_corrupt_table(id, &e, arr, p);
        } else if (arr) {
            json_object_array_add(arr, table_json(s));
        } else {
            table_text_geometry(&s->info);
            table_text_counters(&s->info);
            table_text_parts(s);
        }
    }
    free(s);
    return HPS__TOOL_OK;
}

static int info_procs(const hps__tool_t *t, hps_shmdb_t *db, json_object *arr)
{
    hps_proc_info_t *procs = calloc(HPS_SHMDB_MAX_PROCS, sizeof *procs);
    size_t n = 0;
    hps_err_t err;

    if (!procs)
        return hps__tool_fail(t, -ENOMEM, NULL, "cannot read the process table");
    err = hps_shmdb_procs(db, procs, &n, false);
    if (err != 0) {
        free(procs);
        return hps__tool_fail(t, err, NULL, "cannot read the process table");
    }
    if (n > HPS_SHMDB_MAX_PROCS)
        n = HPS_SHMDB_MAX_PROCS;
    for (size_t i = 0; arr && i < n; i++)
        json_object_array_add(arr, proc_json(&procs[i]));
    if (!arr)
        procs_text(procs, n);
    free(procs);
    return HPS__TOOL_OK;
}

/* The exit status once everything is listed: HPS__TOOL_FAIL (with a line
 * on stderr) when problems were found. */
static int info_verdict(const hps__tool_t *t, unsigned problems)
{
    if (problems == 0)
        return HPS__TOOL_OK;
    return hps__tool_fail(
        t, HPS_ECORRUPT, "run 'hps-shm check NAME'; the tables listed in full still answer",
        "segment '%s': %u problem(s), everything readable listed", t->argv[0], problems);
}

static int info_json(const hps__tool_t *t, hps_shmdb_t *db, const hps_segment_info_t *seg)
{
    json_object *root = json_object_new_object();
    json_object *tables = json_object_new_array();
    json_object *procs = json_object_new_array();
    json_object *gcaches = json_object_new_array();
    info_problems_t p = {.arr = json_object_new_array()};
    int rc;

    hps__tool_jset(root, "segment", segment_json(db, seg));
    hps__tool_jset(root, "tables", tables);
    hps__tool_jset(root, "processes", procs);
    hps__tool_jset(root, "gpu_caches", gcaches);
    hps__tool_jset(root, "problems", p.arr);
    rc = info_tables(t, db, tables, &p);
    if (rc == HPS__TOOL_OK)
        rc = info_procs(t, db, procs);
    if (rc == HPS__TOOL_OK)
        rc = hps__tool_info_gcaches(t, db, gcaches);
    if (rc != HPS__TOOL_OK) {
        json_object_put(root);
        return rc;
    }
    rc = hps__tool_emit_json(t, root);
    return rc == HPS__TOOL_OK ? info_verdict(t, p.n) : rc;
}

static int info_text(const hps__tool_t *t, hps_shmdb_t *db, const hps_segment_info_t *seg)
{
    info_problems_t p = {0};
    int rc;

    segment_text(db, seg);
    rc = info_tables(t, db, NULL, &p);
    if (rc == HPS__TOOL_OK)
        rc = info_procs(t, db, NULL);
    if (rc == HPS__TOOL_OK)
        rc = hps__tool_info_gcaches(t, db, NULL);
    if (rc == HPS__TOOL_OK)
        rc = hps__tool_flush(t);
    return rc == HPS__TOOL_OK ? info_verdict(t, p.n) : rc;
}

int hps__tool_cmd_info(const hps__tool_t *t)
{
    hps_shmdb_t *db = NULL;
    hps_segment_info_t seg;
    hps_err_t err;
    int rc = hps__tool_attach(t, t->argv[0], &db);

    if (rc != HPS__TOOL_OK)
        return rc;
    err = hps_shmdb_segment_info(db, &seg);
    if (err != 0)
        rc = hps__tool_fail(t, err, NULL, "cannot read the header of '%s'", t->argv[0]);
    else
        rc = t->json ? info_json(t, db, &seg) : info_text(t, db, &seg);
    hps_shmdb_detach(db);
    return rc;
}
