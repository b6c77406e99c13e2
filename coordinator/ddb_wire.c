/*
 * ddb_wire.c -- the distributed DB (Redis Cluster) in hps-coordinator:
 * opening it from [distributed_db], and the per-table handles.  Model loading
 * (load.c) writes initial_cache_rate of each table into it; the miss service
 * (serve.c) reads it before the persistent DB.  Its counters are published
 * in the segment for the workers' /metrics (coord_ddb_publish).
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "coord.h"
#include "hps/log.h"

/* hps_ddb_opts_t.warn: the library never prints; its rate-limited warnings
 * (values of the wrong length met by lookups) are logged here. */
static void ddb_lib_warn(void *ctx, const char *msg)
{
    (void)ctx;
    HPS_WARN("distributed DB: %s", msg);
}

int coord_ddb_open(coord_t *c)
{
    const hps_conf_distributed_db_t *d = &c->conf->distributed_db;
    if (c->ddb || c->ddb_degraded || d->type != HPS_CONF_DDB_REDIS_CLUSTER)
        return 0;
    hps_ddb_opts_t o;
    hps_ddb_opts_init(&o);
    o.address = d->address;
    o.user_name = d->user_name;
    o.password = d->password;
    o.num_partitions = (unsigned)d->num_partitions;
    o.num_node_connections = (unsigned)d->num_node_connections;
    o.max_batch_size = (size_t)d->max_batch_size;
    o.overflow_margin = d->overflow_margin;
    o.overflow_policy = d->overflow_policy;
    o.overflow_resolution_target = d->overflow_resolution_target;
    o.enable_tls = d->enable_tls;
    o.lookup_timeout_ms = (unsigned)d->lookup_timeout_ms;
    o.warn = ddb_lib_warn;
    if (d->lookup_timeout_ms >= c->conf->worker.miss_timeout_ms)
        HPS_WARN("[distributed_db] lookup_timeout_ms = %lld is not under [worker] "
                 "miss_timeout_ms = %lld: a hung Redis node makes workers answer default values "
                 "instead of the persistent DB's rows",
                 (long long)d->lookup_timeout_ms, (long long)c->conf->worker.miss_timeout_ms);
    char err[1024];
    hps_err_t rc = hps_ddb_open(&o, &c->ddb, err, sizeof(err));
    if (rc < 0 && c->adopt) {
        /* A failed reload's fallback: the workers serve the segment it
         * adopts; stopping would leave every miss unanswered (and a
         * supervisor's restart would stop here too while the cluster is
         * down).  Its misses are answered from the persistent DB alone. */
        HPS_ERROR("[distributed_db] redis_cluster at %s: %s (%s): the fallback serves the "
                  "segment without the distributed DB (keys outside shared memory come from the "
                  "persistent DB, or get their defaults); send SIGHUP once the cluster answers",
                  d->address, err, hps_err_name(rc));
        c->ddb = NULL;
        c->ddb_degraded = true;
        return 0;
    }
    if (rc < 0) {
        HPS_ERROR("[distributed_db] redis_cluster at %s: %s (%s); start the Redis Cluster, or "
                  "correct redis_cluster, or set [distributed_db] type = disabled to serve "
                  "without it",
                  d->address, err, hps_err_name(rc));
        return HPS_EXIT_DDB;
    }
    HPS_INFO("distributed DB: Redis Cluster at %s, %lld partitions per table, lookup deadline "
             "%lld ms",
             d->address, (long long)d->num_partitions, (long long)d->lookup_timeout_ms);
    return 0;
}

/* Partition hashes probed past num_partitions: HugeCTR's counts (min(16,
 * CPU cores)) and any other a deployment plausibly used. */
#define PROBE_PARTITIONS 256u

/* Refuse a table that Redis holds with more partitions than num_partitions:
 * its rows outside the first num_partitions hashes would never be found
 * (each key would get the default or the persistent DB's row, silently). */
static int check_partitions(coord_t *c, coord_table_t *ct)
{
    char err[512];
    long highest = -1;
    hps_err_t rc = hps_ddb_extra_partitions(ct->ddb, PROBE_PARTITIONS, &highest, err, sizeof(err));
    if (rc < 0) {
        HPS_WARN("model %s table %s: distributed DB: cannot check for partitions past "
                 "num_partitions: %s",
                 ct->model->name, ct->name, err);
        return 0;
    }
    if (highest < 0)
        return 0;
    char name[HPS_DDB_KEY_MAX];
    hps_ddb_key_name(ct->model->name, ct->name, (unsigned)highest, 'v', name, sizeof(name));
    HPS_ERROR("model %s table %s: Redis holds %s, partition %ld of the table, but [distributed_db] "
              "num_partitions = %lld: its rows were written with at least %ld partitions "
              "(HugeCTR used min(16, CPU cores)), and lookups would miss every row outside the "
              "first %lld; set num_partitions to the count they were written with",
              ct->model->name, ct->name, name, highest,
              (long long)c->conf->distributed_db.num_partitions, highest + 1,
              (long long)c->conf->distributed_db.num_partitions);
    return HPS_EXIT_DDB;
}

/* Warn about rows that Redis holds for ct in HugeCTR's layout before v4.2
 * ("hps_et.<model>.<table>/p<i>/v", placed by another key-to-partition
 * function): nothing reads them, so a user who migrated such data would
 * otherwise see misses without a word.  Not refused: the table is served
 * from its files and the persistent DB, and the hashes harm nothing. */
static void warn_legacy(coord_t *c, coord_table_t *ct)
{
    char err[512] = "";
    unsigned found = 0;
    hps_err_t rc = hps_ddb_legacy_partitions(ct->ddb, PROBE_PARTITIONS, &found, err, sizeof(err));
    if (rc < 0 || found == 0)
        return; /* a failing cluster is reported by the checks around this one */
    HPS_WARN("model %s table %s: Redis holds %u hash%s in HugeCTR's layout before v4.2 "
             "(" HPS_TABLE_TAG_PREFIX ".%s.%s/p<i>/v), whose rows were placed by another "
             "key-to-partition function: neither HugeCTR since v4.2 nor this version reads "
             "them, so those rows are not served from Redis (the table's rows come from its "
             "files, initial_cache_rate = %g, and the persistent DB); delete the hashes to free "
             "the memory",
             ct->model->name, ct->name, found, found == 1 ? "" : "es", ct->model->name, ct->name,
             c->conf->distributed_db.initial_cache_rate);
}

/* Fields sampled per partition hash by coord_ddb_check_rows(). */
#define SAMPLE_FIELDS 16u

bool coord_ddb_rows_fit(coord_t *c, coord_table_t *ct)
{
    (void)c;
    char err[512];
    hps_ddb_sample_t s;
    return hps_ddb_check_sample(ct->ddb, SAMPLE_FIELDS, &s, err, sizeof(err)) < 0 ||
           s.fault == HPS_DDB_SAMPLE_OK;
}

/* Refuse a table whose rows in Redis do not fit this configuration: a
 * sample of each partition hash (one HSCAN page) must hold keys of the
 * model's width, vectors of the table's dimension, and keys of that
 * partition under num_partitions.  Rows written with fewer partitions
 * (HugeCTR's min(16, CPU cores) on a small host), another dimension or
 * another key width would otherwise be lookup misses without a word. */
int coord_ddb_check_rows(coord_t *c, coord_table_t *ct)
{
    const hps_conf_t *conf = c->conf;
    long long np = (long long)conf->distributed_db.num_partitions;
    char err[512] = "";
    hps_ddb_sample_t s;
    hps_err_t rc = hps_ddb_check_sample(ct->ddb, SAMPLE_FIELDS, &s, err, sizeof(err));
    if (rc < 0) {
        HPS_WARN("model %s table %s: distributed DB: cannot check a sample of its rows: %s",
                 ct->model->name, ct->name, err[0] ? err : hps_strerror(rc));
        return 0;
    }
    if (s.fault == HPS_DDB_SAMPLE_OK)
        return 0;
    char name[HPS_DDB_KEY_MAX];
    hps_ddb_key_name(ct->model->name, ct->name, s.part, 'v', name, sizeof(name));
    const char *m = ct->model->name, *t = ct->name;
    char clear[HPS_DDB_KEY_MAX + 160];
    snprintf(clear, sizeof(clear),
             "delete the table's hashes (hps_et{hps_et.%s.%s/p<i>}v and ...}t, every i) so that "
             "they are written again",
             m, t);
    switch (s.fault) {
    case HPS_DDB_SAMPLE_KEY_BYTES:
        HPS_ERROR("model %s table %s: Redis holds %s with keys of %zu bytes (%zu of %zu fields "
                  "sampled), but the model's keys are %zu bytes ([hps] supportlonglong = %s): "
                  "lookups would miss every row; set supportlonglong = %s if the rows are this "
                  "model's, or %s",
                  m, t, name, s.found_bytes, s.bad, s.fields, s.want_bytes,
                  conf->hps.supportlonglong ? "true" : "false",
                  s.found_bytes == 8   ? "true"
                  : s.found_bytes == 4 ? "false"
                                       : "(none fits)",
                  clear);
        break;
    case HPS_DDB_SAMPLE_VALUE_BYTES: {
        char fix[96] = "the rows are not float32 vectors";
        if (s.found_bytes % 4 == 0)
            snprintf(fix, sizeof(fix),
                     "set the table's embedding_vecsize_per_table to %zu if the rows are this "
                     "table's",
                     s.found_bytes / 4);
        HPS_ERROR("model %s table %s: Redis holds %s with vectors of %zu bytes (%zu of %zu "
                  "fields sampled), but [model.%s] embedding_vecsize_per_table gives the table "
                  "%u floats (%zu bytes): lookups would miss every such row; %s, or %s",
                  m, t, name, s.found_bytes, s.bad, s.fields, m, ct->dim, s.want_bytes, fix, clear);
        break;
    }
    default: {
        char fix[96] = "set num_partitions to the count they were written with";
        if (s.likely_partitions)
            snprintf(fix, sizeof(fix),
                     "set num_partitions = %u (the sample fits that count) if the rows are "
                     "this table's",
                     s.likely_partitions);
        HPS_ERROR("model %s table %s: Redis holds %s, partition %u of the table, but its key "
                  "%lld is in partition %u under [distributed_db] num_partitions = %lld (%zu of "
                  "%zu fields sampled in %u hashes are in another partition's hash): the rows "
                  "were written with another num_partitions (HugeCTR used min(16, CPU cores)), "
                  "and lookups would miss them; %s, or %s",
                  m, t, name, s.part,
                  c->key_bytes == 8 ? (long long)(int64_t)s.key : (long long)s.key, s.key_part, np,
                  s.bad, s.fields, s.hashes, fix, clear);
    }
    }
    return HPS_EXIT_DDB;
}

uint64_t coord_ident_hash(const char *ident)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325); /* FNV-1a, 64-bit */
    for (const unsigned char *p = (const unsigned char *)ident; *p; p++)
        h = (h ^ *p) * UINT64_C(0x100000001b3);
    return h ? h : 1;
}

int coord_ddb_table(coord_t *c, coord_table_t *ct)
{
    if (!c->ddb)
        return 0;
    hps_err_t rc =
        hps_ddb_table(c->ddb, ct->model->name, ct->name, ct->dim, c->key_bytes, &ct->ddb);
    if (rc < 0) {
        HPS_ERROR("model %s table %s: distributed DB: %s", ct->model->name, ct->name,
                  hps_strerror(rc));
        return HPS_EXIT_DDB;
    }
    warn_legacy(c, ct);
    return check_partitions(c, ct);
}

void coord_ddb_publish(coord_t *c)
{
    static bool warned; /* one thread (see coord.h) */
    if (!c->ddb || !c->db)
        return;
    hps_ddb_stats_t d;
    hps_ddb_stats(c->ddb, &d);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    hps_shmdb_ddb_stats_t s = {
        .lookup_keys = d.lookup_keys,
        .lookup_hits = d.lookup_hits,
        .insert_rows = d.insert_rows,
        .evicted_rows = d.evicted_rows,
        .errors = d.errors,
        .touches_dropped = d.touches_dropped,
        .bad_values = d.bad_values,
        .published_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000,
    };
    hps_err_t rc = hps_shmdb_ddb_stats_set(c->db, &s);
    if (rc < 0 && !warned) {
        warned = true;
        HPS_WARN("distributed DB: cannot publish its statistics in the segment: %s",
                 hps_strerror(rc));
    }
}

/* Redis error replies that say the cluster cannot serve the slot for now,
 * as rcluster.c classifies them (hps__ddb_reply_errors passes a reply's
 * text on as HPS_EIO). */
static bool unavailable_reply(const char *err)
{
    static const char *const busy[] = {"CLUSTERDOWN", "TRYAGAIN", "LOADING", "MASTERDOWN"};
    for (size_t i = 0; i < sizeof(busy) / sizeof(busy[0]); i++)
        if (strncmp(err, busy[i], strlen(busy[i])) == 0)
            return true;
    return false;
}

/* A node's failure as rcluster.c words it: "host:port: why" (a lost or
 * reset connection, a refused connect). */
static bool node_failure(const char *err)
{
    const char *sp = strstr(err, ": "), *p = sp;
    while (p && p > err && p[-1] >= '0' && p[-1] <= '9')
        p--;
    return p && p < sp && p > err + 1 && p[-1] == ':';
}

/* Whether a failed call met an unavailable node or cluster: a refused
 * connect, a timeout, CLUSTERDOWN / TRYAGAIN (HPS_EBUSY), a node's lost
 * connection, or no node for the slot.  Not a Redis error reply about the
 * command (WRONGTYPE, OOM, ERR, NOPERM ...) nor a reply this side cannot
 * read, which trying again would only repeat. */
static bool unavailable(hps_err_t rc, const char *err)
{
    if (rc == -ECONNREFUSED || rc == HPS_EBUSY || rc == HPS_ETIMEDOUT)
        return true;
    return rc == HPS_EIO && (unavailable_reply(err) || node_failure(err) ||
                             strstr(err, "no node serves the slot") != NULL);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

bool coord_ddb_wait(coord_t *c, coord_ddb_wait_t *w, hps_err_t rc, const char *what,
                    const char *err)
{
    long long wait = c->conf->distributed_db.failover_wait_ms;
    if (rc >= 0 || !unavailable(rc, err ? err : "")) {
        if (w->told)
            HPS_INFO("distributed DB: %s: the cluster answers again", what);
        *w = (coord_ddb_wait_t){0}; /* a later failure waits anew */
        return false;
    }
    if (wait <= 0 || atomic_load(c->stop))
        return false;
    uint64_t now = now_ms();
    if (!w->until_ms)
        w->until_ms = now + (uint64_t)wait;
    if (now >= w->until_ms) {
        HPS_ERROR("distributed DB: %s: the cluster did not answer within [distributed_db] "
                  "failover_wait_ms = %lld",
                  what, wait);
        return false;
    }
    if (!w->told)
        HPS_WARN("distributed DB: %s failed (%s): waiting up to %lld ms for the cluster (a "
                 "failover?), trying again every 250 ms",
                 what, err && *err ? err : hps_strerror(rc), wait);
    w->told = true;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 250000000L};
    nanosleep(&ts, NULL);
    return true;
}

void coord_ddb_close(coord_t *c)
{
    hps_ddb_close(c->ddb);
    c->ddb = NULL;
    for (uint32_t i = 0; c->tables && i < c->num_tables; i++)
        c->tables[i].ddb = NULL;
}
