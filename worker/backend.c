/*
 * backend.c -- hps-worker's KServe backend (hps_kserve_backend_t of
 * include/hps/kserve.h) over the lookup library (include/hps/client.h):
 * lookups, readiness, output-buffer pinning, and the nv_hps_* metrics
 * formatted from the client's counters.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hps/log.h"
#include "hps/shmdb.h"
#include "hps/update.h"
#include "worker.h"

static hps_err_t lookup_done(uint64_t t0, hps_err_t rc, hps_kserve_lookup_stats_t *stats)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    stats->compute_infer_ns = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec - t0;
    if (rc == 0) /* the version the rows came from, this thread's (worker_follow_models polls it) */
        stats->model_version = hps_client_last_version();
    if (rc < 0)
        snprintf(stats->message, sizeof(stats->message), "lookup failed: %s",
                 hps_client_last_error()[0] ? hps_client_last_error() : hps_strerror(rc));
    return rc;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static hps_err_t lookup(void *ctx, size_t model_index, uint32_t num_tables, const int32_t *numkeys,
                        const int64_t *keys, size_t num_keys, float *out, size_t out_len,
                        hps_kserve_lookup_stats_t *stats)
{
    worker_t *w = ctx;
    uint64_t t0 = now_ns();
    (void)num_keys, (void)out_len;
    hps_err_t rc = hps_client_lookup(w->client, model_index, num_tables, numkeys, keys,
                                     HPS_KEY_INT64, HPS_HOST, out, HPS_HOST, NULL);
    return lookup_done(t0, rc, stats);
}

/* On an event-loop thread: answers what shared memory holds, else
 * HPS_EAGAIN (the front end runs lookup() on its pool). */
static hps_err_t lookup_nowait(void *ctx, size_t model_index, uint32_t num_tables,
                               const int32_t *numkeys, const int64_t *keys, size_t num_keys,
                               int device, float *out, size_t out_len,
                               hps_kserve_lookup_stats_t *stats)
{
    worker_t *w = ctx;
    uint64_t t0 = now_ns();
    hps_client_model_info_t mi;
    (void)num_keys, (void)out_len;
    if (device >= 0 && (device != hps_client_device(w->client) ||
                        hps_client_model_info(w->client, model_index, &mi) < 0 || !mi.gpu_cache))
        return HPS_EUNSUPPORTED; /* the pool's lookup() and a copy into the region */
    hps_err_t rc = hps_client_lookup_ex(w->client, model_index, num_tables, numkeys, keys,
                                        HPS_KEY_INT64, HPS_HOST, out,
                                        device < 0 ? HPS_HOST : device, NULL, HPS_LOOKUP_NOWAIT);
    return rc == HPS_EAGAIN ? rc : lookup_done(t0, rc, stats);
}

/* OUTPUT0 into device memory: straight from the GPU caches when they serve
 * the model on that device; HPS_EUNSUPPORTED sends the front end to
 * lookup() and a copy. */
static hps_err_t lookup_device(void *ctx, size_t model_index, uint32_t num_tables,
                               const int32_t *numkeys, const int64_t *keys, size_t num_keys,
                               int device, float *d_out, size_t out_len,
                               hps_kserve_lookup_stats_t *stats)
{
    worker_t *w = ctx;
    uint64_t t0 = now_ns();
    hps_client_model_info_t mi;
    (void)num_keys, (void)out_len;
    if (device != hps_client_device(w->client) ||
        hps_client_model_info(w->client, model_index, &mi) < 0 || !mi.gpu_cache)
        return HPS_EUNSUPPORTED;
    hps_err_t rc = hps_client_lookup(w->client, model_index, num_tables, numkeys, keys,
                                     HPS_KEY_INT64, HPS_HOST, d_out, device, NULL);
    return lookup_done(t0, rc, stats);
}

static bool ready(void *ctx)
{
    worker_t *w = ctx;
    return hps_client_ready(w->client);
}

static bool model_loaded(void *ctx, size_t mi)
{
    worker_t *w = ctx;
    return hps_client_model_loaded(w->client, mi);
}

static hps_model_state_t model_state(void *ctx, size_t mi, bool *ret_served)
{
    worker_t *w = ctx;
    hps_model_state_t st = HPS_MODEL_UNAVAILABLE;
    hps_client_model_state(w->client, mi, &st, ret_served);
    return st;
}

/* A load or unload waits at most this long for the coordinator's answer
 * (a worker shutting down waits for a request in flight up to then). */
#define CONTROL_TIMEOUT_MS (10u * 60u * 1000u)

static hps_err_t model_control(void *ctx, hps_model_op_t op, const char *model, char *msg,
                               size_t len)
{
    worker_t *w = ctx;
    hps_err_t rc = hps_client_model_control(w->client, op, model, CONTROL_TIMEOUT_MS, msg, len);
    if (rc == 0) { /* the answer's reader sees the new version in metadata and the index */
        hps_client_refresh_models(w->client, NULL);
        worker_follow_models(w);
    }
    return rc;
}

/* One scrape's view of a model: its counters and the version it is answered
 * from, read once so that every family of the scrape shows the same one. */
typedef struct model_snap {
    bool have; /* loaded and its counters read (false: the model is skipped) */
    uint32_t version;
    hps_client_counters_t k;
} model_snap_t;

static void snap_models(worker_t *w, model_snap_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        /* an unloaded model has no samples, as kserve_metrics.c's families */
        s[i].have = hps_client_model_loaded(w->client, i) &&
                    hps_client_counters(w->client, i, &s[i].k) >= 0;
        /* not attached yet: the INI's version */
        if (hps_client_model_version(w->client, i, &s[i].version) != 0)
            s[i].version = (uint32_t)hps_client_model_conf(w->client, i)->version;
    }
}

/* One counter family, one sample per model of the snapshot, labelled with
 * the version the model is answered from (as nv_inference_count is:
 * kserve_metrics.c). */
static void counter(worker_t *w, const model_snap_t *s, size_t n, hps_kserve_text_t *x,
                    const char *name, const char *help, size_t off, uint64_t div)
{
    hps_kserve_text_appendf(x, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
    for (size_t i = 0; i < n; i++) {
        if (!s[i].have)
            continue;
        hps_kserve_text_appendf(x, "%s{model=\"", name);
        hps_kserve_text_append_label(x, hps_client_model_conf(w->client, i)->name);
        hps_kserve_text_appendf(
            x, "\",version=\"%u\"} %llu\n", s[i].version,
            (unsigned long long)(*(const uint64_t *)((const char *)&s[i].k + off) / div));
    }
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One family of the coordinator's update statistics (a field of
 * hps_client_update_stats_t at off), one sample per layer that published. */
static void update_family(hps_kserve_text_t *x, const hps_client_update_stats_t *st,
                          const bool *have, const char *name, const char *type, const char *help,
                          size_t off)
{
    hps_kserve_text_appendf(x, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    for (uint32_t l = 0; l < HPS_SHMDB_UPDATE_LAYERS; l++)
        if (have[l])
            hps_kserve_text_appendf(x, "%s{layer=\"%s\"} %llu\n", name,
                                    hps_shmdb_update_layer_name(l),
                                    *(const unsigned long long *)((const char *)&st[l] + off));
}

static void update_skipped(hps_kserve_text_t *x, const hps_client_update_stats_t *st,
                           const bool *have)
{
    hps_kserve_text_appendf(x, "# HELP nv_hps_updates_skipped Update messages skipped, by reason\n"
                               "# TYPE nv_hps_updates_skipped counter\n");
    for (uint32_t l = 0; l < HPS_SHMDB_UPDATE_LAYERS; l++)
        for (uint32_t r = 0; have[l] && r < HPS_SHMDB_UPDATE_REASONS; r++)
            if (hps_update_reason_name(r))
                hps_kserve_text_appendf(x,
                                        "nv_hps_updates_skipped{layer=\"%s\",reason=\"%s\"} %llu\n",
                                        hps_shmdb_update_layer_name(l), hps_update_reason_name(r),
                                        (unsigned long long)st[l].skipped[r]);
}

/* Gauges: consumer lag and the age of the newest applied update (layers
 * where they are known).  The lag is the coordinator's reading: absent
 * while no coordinator is alive (its last value would say 0 while updates
 * pile up unread); the age goes on growing from the newest update's
 * time. */
static void update_gauges(worker_t *w, hps_kserve_text_t *x, const hps_client_update_stats_t *st,
                          const bool *have)
{
    bool alive = hps_client_coordinator_alive(w->client);
    hps_kserve_text_appendf(x, "# HELP nv_hps_update_consumer_lag Kafka messages not yet consumed "
                               "(absent while no coordinator is alive)\n"
                               "# TYPE nv_hps_update_consumer_lag gauge\n");
    for (uint32_t l = 0; alive && l < HPS_SHMDB_UPDATE_LAYERS; l++)
        if (have[l] && st[l].lag >= 0)
            hps_kserve_text_appendf(x, "nv_hps_update_consumer_lag{layer=\"%s\"} %lld\n",
                                    hps_shmdb_update_layer_name(l), (long long)st[l].lag);
    hps_kserve_text_appendf(x, "# HELP nv_hps_update_newest_age_ms Milliseconds since the newest "
                               "update was applied\n# TYPE nv_hps_update_newest_age_ms gauge\n");
    int64_t now = wall_ms();
    for (uint32_t l = 0; l < HPS_SHMDB_UPDATE_LAYERS; l++)
        if (have[l] && st[l].newest_applied_ms > 0)
            hps_kserve_text_appendf(x, "nv_hps_update_newest_age_ms{layer=\"%s\"} %lld\n",
                                    hps_shmdb_update_layer_name(l),
                                    (long long)(now - st[l].newest_applied_ms));
}

/* The coordinator's online-update counters, from the segment; nothing when
 * no layer published (no Kafka ingestion). */
static void update_metrics(worker_t *w, hps_kserve_text_t *x)
{
    hps_client_update_stats_t st[HPS_SHMDB_UPDATE_LAYERS];
    bool have[HPS_SHMDB_UPDATE_LAYERS], any = false;
    for (uint32_t l = 0; l < HPS_SHMDB_UPDATE_LAYERS; l++)
        any |= have[l] = hps_client_update_stats(w->client, l, &st[l]) == 0;
    if (!any)
        return;
#define F(name, field, help)                                                                       \
    update_family(x, st, have, name, "counter", help, offsetof(hps_client_update_stats_t, field))
    F("nv_hps_updates_received", received, "Updates (key, vector) received from Kafka");
    F("nv_hps_updates_nonfinite", nonfinite,
      "Updates received whose vector has a NaN or Inf element (applied, or dropped and counted "
      "in nv_hps_update_errors where the model's nonfinite_values is refuse)");
    F("nv_hps_updates_applied", applied, "Updates applied to the layer");
    F("nv_hps_update_offset_resets", offset_resets,
      "Kafka offset resets after an offset the broker no longer had (retention): the messages "
      "between it and where reading went on may never have been applied");
    F("nv_hps_update_errors", errors,
      "Kafka consumer errors, and updates dropped (keys too wide for the model, or a layer's "
      "copy that cannot take them)");
#undef F
    update_skipped(x, st, have);
    update_gauges(w, x, st, have);
}

/* The coordinator's distributed-DB (Redis) counters, from the segment: one
 * unlabelled sample per family (totals of every table); nothing when no
 * distributed DB publishes.  Its hits are part of
 * nv_hps_persistent_db_hit_keys, which counts every layer below the
 * volatile DB. */
static void ddb_metrics(worker_t *w, hps_kserve_text_t *x)
{
    hps_client_ddb_stats_t s;
    if (hps_client_ddb_stats(w->client, &s) < 0)
        return;
    const struct {
        const char *name, *help;
        uint64_t v;
    } f[] = {
        {"nv_hps_distributed_db_lookup_keys",
         "Keys looked up in the distributed DB (Redis): volatile-DB misses of every worker",
         s.lookup_keys},
        {"nv_hps_distributed_db_hit_keys", "Keys found in the distributed DB (Redis)", s.hit_keys},
        {"nv_hps_distributed_db_insert_rows",
         "Rows written to the distributed DB (loading, cache_missed_embeddings, Kafka updates)",
         s.insert_rows},
        {"nv_hps_distributed_db_evicted_rows",
         "Rows evicted from the distributed DB (overflow_margin)", s.evicted_rows},
        {"nv_hps_distributed_db_errors",
         "Failed distributed-DB calls (lookups, inserts, access-tracking batches)", s.errors},
        {"nv_hps_distributed_db_touches_dropped",
         "Distributed-DB hits whose LFU/LRU access was not recorded (queue full)",
         s.touches_dropped},
        {"nv_hps_distributed_db_bad_values",
         "Distributed-DB values of the wrong length for their table, answered as misses",
         s.bad_values},
    };
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        hps_kserve_text_appendf(x, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", f[i].name,
                                f[i].help, f[i].name, f[i].name, (unsigned long long)f[i].v);
}

/* The GPU caches' families: one sample per (model, table) with a cache. */
static const struct {
    const char *name, *type, *help;
} cache_families[] = {
    {"nv_hps_embedding_cache_query_keys", "counter", "Keys looked up in the GPU embedding cache"},
    {"nv_hps_embedding_cache_hit_keys", "counter", "Keys found in the GPU embedding cache"},
    {"nv_hps_embedding_cache_insert_keys", "counter",
     "Rows inserted into the GPU embedding cache (preload included)"},
    {"nv_hps_embedding_cache_eviction_keys", "counter",
     "Rows evicted from the GPU embedding cache"},
    {"nv_hps_embedding_cache_occupancy_bytes", "gauge",
     "Bytes of embedding rows held by the GPU embedding cache"},
    {"nv_hps_embedding_cache_capacity_bytes", "gauge",
     "Bytes of embedding rows the GPU embedding cache can hold"},
    {"nv_hps_embedding_cache_refresh_keys", "counter",
     "Cached rows replaced by newer rows of the update log (or a full refresh)"},
    {"nv_hps_embedding_cache_full_refreshes", "counter",
     "Full refreshes of the GPU embedding cache (update log lapped, segment recreated)"},
    {"nv_hps_embedding_cache_processes", "gauge",
     "Processes that map this GPU embedding cache (shared through CUDA VMM)"},
    {"nv_hps_embedding_cache_lock_timeouts", "counter",
     "Cache writes skipped because a set stayed locked (a process killed mid-write)"},
};

static uint64_t cache_value(const hps_client_cache_stats_t *s, uint32_t dim, size_t f)
{
    uint64_t row = (uint64_t)dim * sizeof(float);
    uint64_t v[] = {s->lookups,
                    s->hits,
                    s->inserts,
                    s->evictions,
                    s->occupied_rows * row,
                    s->capacity_rows * row,
                    s->updates,
                    s->full_refreshes,
                    s->processes,
                    s->lock_timeouts};
    return v[f];
}

/* Sharded caches (gpu_cache_placement = shard): per shard, its device's
 * bytes and the occupied slots of the sets homed there. */
static void shard_metrics(worker_t *w, hps_kserve_text_t *x)
{
    static const char *const names[2] = {"nv_hps_embedding_cache_shard_bytes",
                                         "nv_hps_embedding_cache_shard_occupied_rows"};
    static const char *const helps[2] = {
        "Device bytes of the shard of a sharded GPU embedding cache held by device `shard`",
        "Occupied slots of the sets of a sharded GPU embedding cache homed on device `shard`"};
    for (int f = 0; f < 2; f++) {
        hps_kserve_text_appendf(x, "# HELP %s %s\n# TYPE %s gauge\n", names[f], helps[f], names[f]);
        for (size_t i = 0; i < hps_client_num_models(w->client); i++) {
            const hps_conf_model_t *mc = hps_client_model_conf(w->client, i);
            for (uint32_t t = 0; hps_client_model_loaded(w->client, i) && t < mc->num_tables; t++) {
                hps_client_cache_stats_t s;
                if (hps_client_cache_stats(w->client, i, t, &s) < 0 || s.num_shards < 2)
                    continue;
                for (uint32_t j = 0; j < s.num_shards && j < 8; j++) {
                    hps_kserve_text_appendf(x, "%s{model=\"", names[f]);
                    hps_kserve_text_append_label(x, mc->name);
                    hps_kserve_text_appendf(x, "\",table=\"");
                    hps_kserve_text_append_label(x, mc->embedding_table_names[t]);
                    hps_kserve_text_appendf(
                        x, "\",shard=\"%d\"} %llu\n", s.shard_device[j],
                        (unsigned long long)(f == 0 ? s.shard_bytes[j] : s.shard_occupied[j]));
                }
            }
        }
    }
}

static void gpu_metrics(worker_t *w, hps_kserve_text_t *x, const hps_client_gpu_stats_t *gs)
{
    size_t nf = sizeof(cache_families) / sizeof(cache_families[0]);
    for (size_t f = 0; f < nf; f++) {
        hps_kserve_text_appendf(x, "# HELP %s %s\n# TYPE %s %s\n", cache_families[f].name,
                                cache_families[f].help, cache_families[f].name,
                                cache_families[f].type);
        for (size_t i = 0; i < hps_client_num_models(w->client); i++) {
            const hps_conf_model_t *mc = hps_client_model_conf(w->client, i);
            for (uint32_t t = 0; hps_client_model_loaded(w->client, i) && t < mc->num_tables; t++) {
                hps_client_cache_stats_t s;
                if (hps_client_cache_stats(w->client, i, t, &s) < 0)
                    continue;
                hps_kserve_text_appendf(x, "%s{model=\"", cache_families[f].name);
                hps_kserve_text_append_label(x, mc->name);
                hps_kserve_text_appendf(x, "\",table=\"");
                hps_kserve_text_append_label(x, mc->embedding_table_names[t]);
                hps_kserve_text_appendf(x, "\",device=\"%d\"} %llu\n", hps_client_device(w->client),
                                        (unsigned long long)cache_value(
                                            &s, (uint32_t)mc->embedding_vecsize_per_table[t], f));
            }
        }
    }
    shard_metrics(w, x);
    hps_kserve_text_appendf(x,
                            "# HELP nv_hps_embedding_cache_dropped_inserts Background inserts "
                            "dropped (queue full)\n# TYPE nv_hps_embedding_cache_dropped_inserts "
                            "counter\nnv_hps_embedding_cache_dropped_inserts %llu\n",
                            (unsigned long long)gs->dropped_inserts);
    hps_kserve_text_appendf(x,
                            "# HELP nv_hps_pinned_output_bytes Bytes of OUTPUT0 buffers "
                            "page-locked for direct copies from the GPU\n# TYPE "
                            "nv_hps_pinned_output_bytes gauge\nnv_hps_pinned_output_bytes %llu\n",
                            (unsigned long long)gs->pinned_bytes);
}

static hps_err_t metrics(void *ctx, hps_kserve_text_t *x)
{
    worker_t *w = ctx;
    size_t n = hps_client_num_models(w->client);
    model_snap_t *s = calloc(n ? n : 1, sizeof *s);

    if (!s)
        return -ENOMEM;
    snap_models(w, s, n);
#define C(name, field, help)                                                                       \
    counter(w, s, n, x, name, help, offsetof(hps_client_counters_t, field), 1)
    C("nv_hps_lookup_keys", lookup_keys, "Number of keys looked up");
    C("nv_hps_volatile_db_hit_keys", vdb_hits, "Keys found in the volatile DB (shared memory)");
    C("nv_hps_persistent_db_hit_keys", lower_hits,
      "Keys found below the volatile DB, through the coordinator (distributed or persistent DB)");
    C("nv_hps_default_value_keys", default_keys, "Keys answered with the table's default value");
    C("nv_hps_miss_queue_busy", miss_busy,
      "Miss-queue requests whose misses got defaults: the queue stayed full until miss_timeout_ms");
    C("nv_hps_miss_queue_timeouts", miss_timeout, "Miss-queue requests past miss_timeout_ms");
    hps_client_gpu_stats_t gs;
    bool gpu = hps_client_gpu_stats(w->client, &gs) == 0; /* a worker with GPU caches */
    if (gpu) {
        C("nv_hps_gpu_path_requests", gpu_path_calls,
          "Host lookups of a GPU-cached model answered by the GPU cache ([worker] lookup_path)");
        C("nv_hps_cpu_path_requests", cpu_path_calls,
          "Host lookups of a GPU-cached model answered from the volatile DB ([worker] "
          "lookup_path)");
    }
#undef C
    counter(w, s, n, x, "nv_hps_lookup_duration_us",
            "Cumulative time in the embedding lookup path (us)",
            offsetof(hps_client_counters_t, lookup_ns), 1000);
    free(s);
    hps_kserve_text_appendf(x,
                            "# HELP nv_hps_coordinator_alive 1 if the coordinator's heartbeat "
                            "is fresh\n# TYPE nv_hps_coordinator_alive gauge\n"
                            "nv_hps_coordinator_alive %d\n"
                            "# HELP nv_hps_worker_ready 1 if the worker is ready\n"
                            "# TYPE nv_hps_worker_ready gauge\nnv_hps_worker_ready %d\n",
                            (int)hps_client_coordinator_alive(w->client),
                            (int)hps_client_ready(w->client));
    update_metrics(w, x);
    ddb_metrics(w, x);
    if (gpu)
        gpu_metrics(w, x, &gs);
    return 0;
}

static hps_err_t pin_output(void *ctx, void *buf, size_t bytes)
{
    worker_t *w = ctx;
    return hps_client_host_register(w->client, buf, bytes);
}

static void unpin_output(void *ctx, void *buf, size_t bytes)
{
    worker_t *w = ctx;
    hps_client_host_unregister(w->client, buf, bytes);
}

void worker_describe_model(const worker_t *w, const hps_conf_model_t *c, uint32_t *maxq,
                           uint32_t *dims, char *ver, hps_kserve_model_t *ret)
{
    for (size_t t = 0; t < c->num_tables; t++) {
        maxq[t] = (uint32_t)c->maxnum_catfeature_query_per_table_per_sample[t];
        dims[t] = (uint32_t)c->embedding_vecsize_per_table[t];
    }
    snprintf(ver, 24, "%lld", (long long)c->version);
    *ret = (hps_kserve_model_t){.name = c->name,
                                .version = ver,
                                .num_tables = (uint32_t)c->num_tables,
                                .dims = dims,
                                .table_names = (const char *const *)c->embedding_table_names,
                                .max_keys_per_sample = maxq,
                                .max_batch_size = (uint32_t)c->max_batch_size,
                                .device_id = hps_client_device(w->client)};
}

/* worker_sync_models with sync_mu held. */
static size_t sync_models_locked(worker_t *w)
{
    size_t added = 0;
    for (size_t i = w->srv ? hps_kserve_num_models(w->srv) : SIZE_MAX;
         i < hps_client_num_models(w->client); i++) {
        const hps_conf_model_t *c = hps_client_model_conf(w->client, i);
        uint32_t *maxq = calloc(c->num_tables, sizeof(uint32_t));
        uint32_t *dims = calloc(c->num_tables, sizeof(uint32_t));
        char ver[24];
        hps_kserve_model_t km;
        hps_err_t rc = -ENOMEM;
        bool shape = false; /* a new shape of a model served (hps_client_refresh_models) */
        for (size_t j = 0; j < i; j++)
            shape |= strcmp(hps_client_model_conf(w->client, j)->name, c->name) == 0;
        if (maxq && dims) {
            worker_describe_model(w, c, maxq, dims, ver, &km);
            rc = shape ? hps_kserve_replace_model(w->srv, &km) : hps_kserve_add_model(w->srv, &km);
        }
        free(maxq);
        free(dims);
        if (rc < 0) { /* the indices must stay the client's: stop here */
            HPS_ERROR("model %s: cannot be served over HTTP: %s", c->name, hps_strerror(rc));
            break;
        }
        added++;
    }
    return added;
}

size_t worker_sync_models(worker_t *w)
{
    pthread_mutex_lock(&w->sync_mu);
    size_t added = sync_models_locked(w);
    pthread_mutex_unlock(&w->sync_mu);
    return added;
}

void worker_follow_models(worker_t *w)
{
    pthread_mutex_lock(&w->sync_mu);
    hps_kserve_t *srv = w->srv;
    if (srv) {
        sync_models_locked(w);
        for (size_t i = 0; i < hps_kserve_num_models(srv); i++) {
            uint32_t v;
            if (hps_client_model_version(w->client, i, &v) == 0) {
                hps_kserve_set_model_version(srv, i, v);
                if (w->was_version[i] && w->was_version[i] != v)
                    HPS_INFO("model %s: answered from version %u now (was %u)",
                             hps_client_model_conf(w->client, i)->name, v, w->was_version[i]);
                w->was_version[i] = v;
            }
            bool loaded = hps_client_model_loaded(w->client, i);
            if (w->was_loaded[i] && !loaded)
                hps_kserve_model_unloaded(srv, i);
            w->was_loaded[i] = loaded;
        }
    }
    pthread_mutex_unlock(&w->sync_mu);
}

static size_t refresh_models(void *ctx)
{
    worker_t *w = ctx;
    hps_client_refresh_models(w->client, NULL);
    return worker_sync_models(w);
}

void worker_backend(worker_t *w, hps_kserve_backend_t *ret)
{
    memset(ret, 0, sizeof(*ret));
    ret->ctx = w;
    ret->lookup = lookup;
    ret->lookup_nowait = lookup_nowait;
    ret->lookup_device = lookup_device;
    ret->ready = ready;
    ret->model_loaded = model_loaded; /* in mode none too: SIGHUP adds and removes models */
    ret->model_state = model_state;
    if (w->conf->hps.model_control_mode == HPS_CONF_MODEL_CONTROL_EXPLICIT)
        ret->model_control = model_control;
    ret->refresh_models = refresh_models;
    ret->metrics = metrics;
    ret->pin_output = pin_output;
    ret->unpin_output = unpin_output;
}
