/*
 * pipeline.c -- the worker's CPU lookup path (DESIGN.md "The lookup path"):
 * per table, the volatile DB in shared memory (lock-free, partition-
 * parallel), then one miss-queue request to the coordinator bounded by
 * miss_timeout_ms, then the table's default value.  Output rows are written
 * in input order, OUTPUT0 = sum_t n_t * D_t floats.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hps/log.h"
#include "worker.h"

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void fill(float *out, size_t n, uint32_t dim, float v)
{
    for (size_t i = 0; i < n * dim; i++)
        out[i] = v;
}

/* Scratch of one table lookup: found mask, missing keys and their rows. */
struct scratch {
    uint8_t *found;
    void *mkeys;
    size_t *midx;
    float *mvals;
    uint8_t *mfound;
};

static bool scratch_alloc(struct scratch *s, size_t n, uint32_t dim, uint32_t key_bytes)
{
    s->found = malloc(n);
    s->mkeys = malloc(n * key_bytes);
    s->midx = malloc(n * sizeof(size_t));
    s->mvals = malloc(n * dim * sizeof(float));
    s->mfound = malloc(n);
    return s->found && s->mkeys && s->midx && s->mvals && s->mfound;
}

static void scratch_free(struct scratch *s)
{
    free(s->found);
    free(s->mkeys);
    free(s->midx);
    free(s->mvals);
    free(s->mfound);
}

/* 32-bit-key models: keys outside [0, 2^32) cannot exist; they get the
 * default value.  Converted in place into a uint32 array. */
static const void *narrow_keys(const int64_t *keys, size_t n, uint32_t *tmp, uint8_t *valid)
{
    for (size_t i = 0; i < n; i++) {
        valid[i] = keys[i] >= 0 && keys[i] <= (int64_t)UINT32_MAX;
        tmp[i] = valid[i] ? (uint32_t)keys[i] : 0;
    }
    return tmp;
}

/* Ask the coordinator for the keys the volatile DB did not have. */
static size_t lower_layers(worker_t *w, worker_model_t *m, uint32_t id, uint32_t dim,
                           const void *keys, size_t n, float *out, struct scratch *s)
{
    size_t miss = 0;
    for (size_t i = 0; i < n; i++) {
        if (s->found[i])
            continue;
        memcpy((char *)s->mkeys + miss * w->key_bytes, (const char *)keys + i * w->key_bytes,
               w->key_bytes);
        s->midx[miss++] = i;
    }
    if (miss == 0 || !atomic_load_explicit(&w->coord_alive, memory_order_relaxed))
        return 0;
    size_t hits = 0;
    hps_err_t rc = hps_shmdb_miss_lookup(w->db, id, miss, s->mkeys, s->mvals, s->mfound,
                                         (uint32_t)w->conf->worker.miss_timeout_ms, &hits);
    if (rc == HPS_EBUSY)
        atomic_fetch_add_explicit(&m->ctr.miss_busy, 1, memory_order_relaxed);
    else if (rc == HPS_ETIMEDOUT)
        atomic_fetch_add_explicit(&m->ctr.miss_timeout, 1, memory_order_relaxed);
    if (rc < 0)
        return 0; /* those keys keep the default value */
    for (size_t j = 0; j < miss; j++)
        if (s->mfound[j])
            memcpy(out + s->midx[j] * dim, s->mvals + j * dim, dim * sizeof(float));
    atomic_fetch_add_explicit(&m->ctr.lower_hits, hits, memory_order_relaxed);
    return hits;
}

/* One table: n keys (int64 from the request) -> n rows of dim floats. */
static hps_err_t lookup_table(worker_t *w, worker_model_t *m, uint32_t t, const int64_t *keys,
                              size_t n, float *out)
{
    uint32_t dim = m->dims[t];
    struct scratch s = {0};
    uint32_t *narrow = NULL;
    hps_err_t rc = -ENOMEM;
    if (!scratch_alloc(&s, n, dim, w->key_bytes))
        goto out;
    const void *k = keys;
    if (w->key_bytes == 4) {
        if (!(narrow = malloc(n * sizeof(uint32_t))))
            goto out;
        k = narrow_keys(keys, n, narrow, s.mfound);
    }
    size_t hits = 0;
    rc = hps_shmdb_lookup(w->db, m->vdb_ids[t], n, k, out, s.found, &hits);
    if (rc < 0)
        goto out;
    for (size_t i = 0; narrow && i < n; i++) {
        if (s.mfound[i]) /* valid */
            continue;
        /* An out-of-range 32-bit key is in no layer: default, not key 0's row. */
        hits -= s.found[i];
        s.found[i] = 1;
        fill(out + i * dim, 1, dim, m->defaults[t]);
    }
    atomic_fetch_add_explicit(&m->ctr.vdb_hits, hits, memory_order_relaxed);
    size_t lower = lower_layers(w, m, m->vdb_ids[t], dim, k, n, out, &s);
    atomic_fetch_add_explicit(&m->ctr.default_keys, n - hits - lower, memory_order_relaxed);
out:
    free(narrow);
    scratch_free(&s);
    return rc;
}

/* Timings and counters of a finished lookup (started at t0); returns rc. */
static hps_err_t lookup_done(worker_model_t *m, uint64_t t0, size_t num_keys, hps_err_t rc,
                             hps_kserve_lookup_stats_t *stats)
{
    uint64_t dt = mono_ns() - t0;
    stats->compute_infer_ns = dt;
    atomic_fetch_add_explicit(&m->ctr.lookup_keys, num_keys, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->ctr.lookup_ns, dt, memory_order_relaxed);
    if (rc < 0)
        snprintf(stats->message, sizeof(stats->message), "lookup failed: %s", hps_strerror(rc));
    return rc;
}

static hps_err_t lookup(void *ctx, size_t model_index, uint32_t num_tables, const int32_t *numkeys,
                        const int64_t *keys, size_t num_keys, float *out, size_t out_len,
                        hps_kserve_lookup_stats_t *stats)
{
    worker_t *w = ctx;
    worker_model_t *m = &w->models[model_index];
    uint64_t t0 = mono_ns();
    hps_err_t rc = 0;
    (void)out_len;
    pthread_rwlock_rdlock(&w->seg_lock);
    int gpu = worker_gpu_lookup(w, model_index, num_tables, numkeys, keys, out); /* 1: CPU path */
    rc = gpu < 0 ? gpu : 0;
    for (uint32_t t = 0; gpu > 0 && t < num_tables && rc == 0; t++) {
        size_t n = (size_t)numkeys[t];
        if (n == 0)
            continue;
        if (w->db && m->resolved) {
            rc = lookup_table(w, m, t, keys, n, out);
        } else { /* not attached yet: every key gets the default */
            fill(out, n, m->dims[t], m->defaults[t]);
            atomic_fetch_add_explicit(&m->ctr.default_keys, n, memory_order_relaxed);
        }
        keys += n;
        out += n * m->dims[t];
    }
    pthread_rwlock_unlock(&w->seg_lock);
    return lookup_done(m, t0, num_keys, rc, stats);
}

/* OUTPUT0 into device memory: the GPU path only (gpu.h); HPS_EUNSUPPORTED
 * sends the front end to lookup() and a copy. */
static hps_err_t lookup_device(void *ctx, size_t model_index, uint32_t num_tables,
                               const int32_t *numkeys, const int64_t *keys, size_t num_keys,
                               int device, float *d_out, size_t out_len,
                               hps_kserve_lookup_stats_t *stats)
{
    worker_t *w = ctx;
    worker_model_t *m = &w->models[model_index];
    uint64_t t0 = mono_ns();
    (void)out_len;
    pthread_rwlock_rdlock(&w->seg_lock);
    int rc = worker_gpu_lookup_device(w, model_index, num_tables, numkeys, keys, device, d_out);
    pthread_rwlock_unlock(&w->seg_lock);
    if (rc == HPS_EUNSUPPORTED)
        return rc;
    return lookup_done(m, t0, num_keys, rc, stats);
}

static bool ready(void *ctx)
{
    worker_t *w = ctx;
    return w->db && atomic_load(&w->resolved) && atomic_load(&w->coord_alive) &&
           worker_gpu_ready(w);
}

static void counter(hps_kserve_text_t *x, const char *name, const char *help, size_t nm,
                    const worker_model_t *models, size_t off, uint64_t div)
{
    hps_kserve_text_appendf(x, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
    for (size_t i = 0; i < nm; i++) {
        const _Atomic uint64_t *v = (const _Atomic uint64_t *)((const char *)&models[i].ctr + off);
        hps_kserve_text_appendf(x, "%s{model=\"", name);
        hps_kserve_text_append_label(x, models[i].conf->name);
        hps_kserve_text_appendf(x, "\",version=\"1\"} %llu\n",
                                (unsigned long long)(atomic_load(v) / div));
    }
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One family of the coordinator's update statistics (a field of
 * hps_update_stats_t at off), one sample per layer that published. */
static void update_family(hps_kserve_text_t *x, const hps_update_stats_t *st, const bool *have,
                          const char *name, const char *type, const char *help, size_t off)
{
    hps_kserve_text_appendf(x, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    for (uint32_t l = 0; l < HPS_SHMDB_UPDATE_LAYERS; l++)
        if (have[l])
            hps_kserve_text_appendf(x, "%s{layer=\"%s\"} %llu\n", name,
                                    hps_shmdb_update_layer_name(l),
                                    *(const unsigned long long *)((const char *)&st[l] + off));
}

static void update_skipped(hps_kserve_text_t *x, const hps_update_stats_t *st, const bool *have)
{
    hps_kserve_text_appendf(x, "# HELP nv_hps_updates_skipped Update messages skipped, by reason\n"
                               "# TYPE nv_hps_updates_skipped counter\n");
    for (uint32_t l = 0; l < HPS_SHMDB_UPDATE_LAYERS; l++)
        for (uint32_t r = 0; have[l] && r < HPS_SHMDB_UPDATE_REASONS; r++)
            if (hps_shmdb_update_reason_name(r))
                hps_kserve_text_appendf(
                    x, "nv_hps_updates_skipped{layer=\"%s\",reason=\"%s\"} %llu\n",
                    hps_shmdb_update_layer_name(l), hps_shmdb_update_reason_name(r),
                    (unsigned long long)st[l].skipped[r]);
}

/* Gauges: consumer lag and the age of the newest applied update (layers
 * where they are known). */
static void update_gauges(hps_kserve_text_t *x, const hps_update_stats_t *st, const bool *have)
{
    hps_kserve_text_appendf(x, "# HELP nv_hps_update_consumer_lag Kafka messages not yet consumed\n"
                               "# TYPE nv_hps_update_consumer_lag gauge\n");
    for (uint32_t l = 0; l < HPS_SHMDB_UPDATE_LAYERS; l++)
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
    hps_update_stats_t st[HPS_SHMDB_UPDATE_LAYERS];
    bool have[HPS_SHMDB_UPDATE_LAYERS], any = false;
    for (uint32_t l = 0; l < HPS_SHMDB_UPDATE_LAYERS; l++)
        any |= have[l] = w->db && hps_shmdb_update_stats_get(w->db, l, &st[l]) == 0;
    if (!any)
        return;
#define F(name, field, help)                                                                       \
    update_family(x, st, have, name, "counter", help, offsetof(hps_update_stats_t, field))
    F("nv_hps_updates_received", received, "Updates (key, vector) received from Kafka");
    F("nv_hps_updates_applied", applied, "Updates applied to the layer");
    F("nv_hps_update_errors", errors,
      "Kafka consumer errors, and updates dropped (keys too wide for the model, or a layer's "
      "copy that cannot take them)");
#undef F
    update_skipped(x, st, have);
    update_gauges(x, st, have);
}

static hps_err_t metrics(void *ctx, hps_kserve_text_t *x)
{
    worker_t *w = ctx;
    const worker_model_t *ms = w->models;
    size_t n = w->num_models;
#define C(name, field, help) counter(x, name, help, n, ms, offsetof(worker_counters_t, field), 1)
    C("nv_hps_lookup_keys", lookup_keys, "Number of keys looked up");
    C("nv_hps_volatile_db_hit_keys", vdb_hits, "Keys found in the volatile DB (shared memory)");
    C("nv_hps_persistent_db_hit_keys", lower_hits,
      "Keys found below the volatile DB, through the coordinator (distributed or persistent DB)");
    C("nv_hps_default_value_keys", default_keys, "Keys answered with the table's default value");
    C("nv_hps_miss_queue_busy", miss_busy, "Miss-queue requests refused because it was full");
    C("nv_hps_miss_queue_timeouts", miss_timeout, "Miss-queue requests past miss_timeout_ms");
#undef C
    counter(x, "nv_hps_lookup_duration_us", "Cumulative time in the embedding lookup path (us)", n,
            ms, offsetof(worker_counters_t, lookup_ns), 1000);
    hps_kserve_text_appendf(x,
                            "# HELP nv_hps_coordinator_alive 1 if the coordinator's heartbeat "
                            "is fresh\n# TYPE nv_hps_coordinator_alive gauge\n"
                            "nv_hps_coordinator_alive %d\n"
                            "# HELP nv_hps_worker_ready 1 if the worker is ready\n"
                            "# TYPE nv_hps_worker_ready gauge\nnv_hps_worker_ready %d\n",
                            (int)atomic_load(&w->coord_alive), (int)ready(w));
    update_metrics(w, x);
    worker_gpu_metrics(w, x);
    return 0;
}

int worker_init_models(worker_t *w)
{
    w->num_models = w->conf->num_models;
    w->models = calloc(w->num_models ? w->num_models : 1, sizeof(worker_model_t));
    if (!w->models)
        return HPS_WEXIT_RUNTIME;
    for (size_t i = 0; i < w->num_models; i++) {
        worker_model_t *m = &w->models[i];
        const hps_conf_model_t *c = &w->conf->models[i];
        m->conf = c;
        m->dims = calloc(c->num_tables, sizeof(uint32_t));
        m->defaults = calloc(c->num_tables, sizeof(float));
        m->vdb_ids = calloc(c->num_tables, sizeof(uint32_t));
        if (!m->dims || !m->defaults || !m->vdb_ids)
            return HPS_WEXIT_RUNTIME;
        for (size_t t = 0; t < c->num_tables; t++) {
            m->dims[t] = (uint32_t)c->embedding_vecsize_per_table[t];
            m->defaults[t] = (float)c->default_value_for_each_table[t];
        }
    }
    return 0;
}

void worker_free_models(worker_t *w)
{
    for (size_t i = 0; w->models && i < w->num_models; i++) {
        free(w->models[i].dims);
        free(w->models[i].defaults);
        free(w->models[i].vdb_ids);
    }
    free(w->models);
}

static hps_err_t pin_output(void *ctx, void *buf, size_t bytes)
{
    return worker_gpu_pin(ctx, buf, bytes);
}

static void unpin_output(void *ctx, void *buf, size_t bytes)
{
    worker_gpu_unpin(ctx, buf, bytes);
}

void worker_backend(worker_t *w, hps_kserve_backend_t *ret)
{
    memset(ret, 0, sizeof(*ret));
    ret->ctx = w;
    ret->lookup = lookup;
    ret->lookup_device = lookup_device;
    ret->ready = ready;
    ret->metrics = metrics;
    ret->pin_output = pin_output;
    ret->unpin_output = unpin_output;
}
