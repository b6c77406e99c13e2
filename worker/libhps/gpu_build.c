/*
 * gpu_build.c -- the GPU caches' life (gpu.h): start and stop, the GPU
 * thread, which maps each table's shared cache or creates and preloads it
 * from the volatile DB, then serves the background inserts and runs the
 * refresh (gpu_refresh.c) and registry upkeep (gpu_share.c).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpu_internal.h"
#include "hps/log.h"

/* ---- create and preload ------------------------------------------------ */
/** Rows of table t: of its model files, or of the volatile DB if more. */
static uint64_t table_rows(hps_client_t *cl, size_t mi, uint32_t t)
{
    hps_table_info_t ti;
    if (hps_shmdb_table_info(cl->db, cl->models[mi].vdb_ids[t], &ti) < 0)
        return 0;
    return ti.source_rows > ti.rows ? ti.source_rows : ti.rows;
}

/** Preload state: a pinned batch flushed into the cache. */
struct preload {
    gctx_t *c;
    hps_gcache_t *cache;
    uint32_t dim;
    uint64_t want, done;
    size_t k;
    int rc;
};

static int preload_flush(struct preload *p)
{
    if (p->rc == 0 && p->k)
        p->rc = hps__client_write_staged(p->c, p->cache, p->k, p->dim, false);
    if (p->rc == 0 && p->k)
        p->rc = hps__client_ck(cudaStreamSynchronize(p->c->stream), "preload");
    p->k = 0;
    return p->rc;
}

static int preload_row(void *ctx, uint64_t key, const float *value)
{
    struct preload *p = ctx;
    ((int64_t *)p->c->ikeys.h)[p->k] = (int64_t)key;
    memcpy((float *)p->c->ivals.h + p->k * p->dim, value, p->dim * sizeof(float));
    p->done++;
    if (++p->k == PRELOAD_BATCH && preload_flush(p) < 0)
        return p->rc;
    return p->done >= p->want ? 1 : 0;
}

/** A cache of slots rows: sharded or shareable (descriptors in gt->fds), or
 *  private (gt->num_fds 0). */
static int alloc_cache(struct client_gpu *g, gtable_t *gt, uint64_t slots, uint32_t dim,
                       bool shared, hps_gcache_t **ret)
{
    gt->num_fds = 0;
    if (shared && gt->sharded)
        return hps_gcache_create_sharded(slots, dim, gt->dtype, HPS_GCACHE_LRU, g->device,
                                         &gt->shards, ret, gt->fds, &gt->num_fds);
    if (shared) {
        int rc = hps_gcache_create_shared(slots, dim, gt->dtype, HPS_GCACHE_LRU, g->device, ret,
                                          gt->fds);
        gt->num_fds = rc == 0;
        if (rc != HPS_EIO)
            return rc;
        HPS_WARN("GPU cache: shareable device memory (CUDA VMM) unavailable; this cache is "
                 "private to the worker");
    }
    return hps_gcache_create(slots, dim, gt->dtype, HPS_GCACHE_LRU, g->device, ret);
}

/** Create gt's cache of slots rows and insert the first want rows of the VDB. */
static int build_cache(struct client_gpu *g, gctx_t *c, size_t mi, uint32_t t, gtable_t *gt,
                       uint64_t slots, uint64_t want, bool shared)
{
    hps_client_t *cl = g->cl;
    struct preload p = {.c = c, .dim = cl->models[mi].dims[t], .want = want};
    int rc = alloc_cache(g, gt, slots, p.dim, shared, &p.cache);
    if (rc < 0)
        return rc;
    rc = hps__client_pair_reserve(&c->ikeys, PRELOAD_BATCH * sizeof(int64_t));
    rc = rc ? rc
            : hps__client_pair_reserve(&c->ivals, (size_t)PRELOAD_BATCH * p.dim * sizeof(float));
    if (rc == 0 && want > 0) {
        rc = hps_shmdb_iterate(cl->db, cl->models[mi].vdb_ids[t], preload_row, &p);
        rc = rc == 1 ? 0 : rc;
        rc = rc ? rc : preload_flush(&p);
    }
    if (rc < 0) {
        hps_gcache_destroy(p.cache);
        hps__client_reg_close(gt);
        return rc;
    }
    gt->cache = p.cache;
    return 0;
}

/* ---- background inserts ------------------------------------------------ */

/** Fetch one job's keys, every table in one pass of the fetch path, and
 *  insert the rows found (the GPU thread, context c). */
static void run_job(struct client_gpu *g, gctx_t *c, job_t *j)
{
    hps_client_t *cl = g->cl;
    client_model_t *m = &cl->models[j->mi];
    size_t nk = 0, nf = 0;
    if (!atomic_load_explicit(&g->models[j->mi].active, memory_order_acquire))
        return; /* the caches are another segment's, or being built anew */
    for (uint32_t i = 0; i < j->ntab; i++) {
        nk += j->n[i];
        nf += j->n[i] * m->dims[j->t[i]];
    }
    client_fetch_t *f = calloc(j->ntab ? j->ntab : 1, sizeof(*f));
    float *rows = malloc(nf * sizeof(float) + 1);
    uint8_t *found = malloc(nk + 1);
    if (!f || !rows || !found)
        goto out;
    for (uint32_t i = 0, ko = 0, fo = 0; i < j->ntab; i++) {
        f[i] = (client_fetch_t){.table = j->t[i],
                                .n = j->n[i],
                                .keys = j->keys + ko,
                                .rows = rows + fo,
                                .found = found + ko};
        ko += (uint32_t)j->n[i];
        fo += (uint32_t)(j->n[i] * m->dims[j->t[i]]);
    }
    pthread_rwlock_rdlock(&cl->seg_lock);
    hps__client_fetch(cl, m, f, j->ntab, false, false);
    pthread_rwlock_unlock(&cl->seg_lock);
    for (uint32_t i = 0; i < j->ntab; i++) {
        uint32_t dim = m->dims[f[i].table];
        if (hps__client_pair_reserve(&c->ikeys, f[i].n * sizeof(int64_t)) < 0 ||
            hps__client_pair_reserve(&c->ivals, f[i].n * dim * sizeof(float)) < 0)
            break;
        size_t k =
            hps__client_keep_found(c->ikeys.h, f[i].keys, f[i].rows, f[i].found, f[i].n, dim);
        memcpy(c->ivals.h, f[i].rows, k * dim * sizeof(float));
        if (hps__client_write_staged(c, g->models[j->mi].tables[f[i].table].cache, k, dim, false) ==
            0)
            hps__client_ck(cudaStreamSynchronize(c->stream), "background insert");
    }
out:
    free(f);
    free(rows);
    free(found);
}

static void rebuild_stale(struct client_gpu *g, gctx_t *c);

/** A model waits to be built anew after a segment switch. */
static bool any_stale(struct client_gpu *g)
{
    for (size_t mi = 0; mi < g->num_models; mi++)
        if (atomic_load(&g->models[mi].stale))
            return true;
    return false;
}

static void serve_queue(struct client_gpu *g, gctx_t *c)
{
    pthread_mutex_lock(&g->mu);
    while (!atomic_load(&g->stop)) {
        if (hps__client_due(&g->upd_last, UPD_POLL_NS) || any_stale(g)) {
            pthread_mutex_unlock(&g->mu);
            rebuild_stale(g, c);
            hps__client_reg_upkeep(g);
            hps__client_follow_logs(g, c);
            hps__client_timer_refresh(g, c);
            pthread_mutex_lock(&g->mu);
            continue;
        }
        if (g->q_len == 0) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += UPD_POLL_NS;
            ts.tv_sec += ts.tv_nsec / 1000000000L;
            ts.tv_nsec %= 1000000000L;
            pthread_cond_timedwait(&g->cv, &g->mu, &ts);
            continue;
        }
        job_t j = g->queue[g->q_head];
        g->q_head = (g->q_head + 1) % QUEUE_SLOTS;
        g->q_len--;
        pthread_mutex_unlock(&g->mu);
        run_job(g, c, &j);
        free(j.mem);
        pthread_mutex_lock(&g->mu);
    }
    pthread_mutex_unlock(&g->mu);
}

/** Where gt's cache lives, for logs: " on device N" or " sharded over
 *  devices 0,1,..." (the model's list, as configured). */
static void where_text(const gmodel_t *gm, const gtable_t *gt, int device, char *buf, size_t len)
{
    if (!gt->sharded) {
        snprintf(buf, len, " on device %d", device);
        return;
    }
    size_t o = (size_t)snprintf(buf, len, " sharded over devices ");
    for (uint32_t j = 0; j < gm->shards.num_devices && o < len; j++)
        o += (size_t)snprintf(buf + o, len - o, "%s%d", j ? "," : "", gm->shards.devices[j]);
}

/**
 * gpu_cache_placement = shard: the devices of deployed_device_list (in its
 * order, repeats dropped) into gm->shards; false, with a warning, when this
 * worker cannot map memory of one of them (no such device, no peer access,
 * more than HPS_GCACHE_MAX_SHARDS): the model's caches are then replicated.
 */
static bool plan_shards(struct client_gpu *g, size_t mi, hps_gcache_shards_t *s)
{
    const hps_conf_model_t *mc = g->cl->models[mi].conf;
    int count = 0;
    memset(s, 0, sizeof(*s));
    if (mc->gpu_cache_placement != HPS_CONF_PLACEMENT_SHARD)
        return false;
    if (cudaGetDeviceCount(&count) != cudaSuccess)
        count = 0;
    const char *why = NULL;
    for (size_t i = 0; i < mc->deployed_device_list_len && !why; i++) {
        int d = (int)mc->deployed_device_list[i], can = 0;
        bool dup = false;
        for (uint32_t j = 0; j < s->num_devices; j++)
            dup |= s->devices[j] == d;
        if (dup)
            continue;
        if (d >= count)
            why = "a device of deployed_device_list does not exist";
        else if (s->num_devices == HPS_GCACHE_MAX_SHARDS)
            why = "more than 8 devices";
        else if (d != g->device &&
                 (cudaDeviceCanAccessPeer(&can, g->device, d) != cudaSuccess || !can))
            why = "no peer access between this worker's device and one of deployed_device_list";
        else
            s->devices[s->num_devices++] = d;
    }
    (void)cudaGetLastError();
    if (!why && s->num_devices > 0)
        return true;
    HPS_WARN("model %s: gpu_cache_placement = shard, but %s; its GPU caches are replicated on "
             "each device instead",
             mc->name, why ? why : "deployed_device_list is empty");
    memset(s, 0, sizeof(*s));
    return false;
}

/** gpu_cache_max_bytes: the slots that fit the limit on each device (the
 *  whole slots when no limit); 0 with a logged error when not even one set
 *  fits. */
static uint64_t max_slots(const hps_conf_model_t *mc, uint32_t t, uint32_t dim, hps_dtype_t dtype,
                          uint32_t devices)
{
    if (mc->gpu_cache_max_bytes == 0)
        return UINT64_MAX;
    uint64_t n = hps_gcache_rows_within(mc->gpu_cache_max_bytes, dim, dtype, devices);
    if (n == 0)
        HPS_ERROR("GPU cache %s/%s: gpu_cache_max_bytes = %llu holds no set of %u rows of %u "
                  "floats; no GPU cache for the model",
                  mc->name, mc->embedding_table_names[t],
                  (unsigned long long)mc->gpu_cache_max_bytes, HPS_GCACHE_WAYS, dim);
    return n;
}

static int build_table(struct client_gpu *g, gctx_t *c, size_t mi, uint32_t t)
{
    client_model_t *m = &g->cl->models[mi];
    gmodel_t *gm = &g->models[mi];
    gtable_t *gt = &gm->tables[t];
    uint64_t rows = table_rows(g->cl, mi, t);
    uint64_t want = (uint64_t)ceil(m->conf->gpucacheper * (double)rows);
    bool whole = want >= rows;
    uint64_t slots = want ? want : 1;
    slots = whole ? 2 * slots : slots;
    gt->sharded = gm->sharded;
    gt->shards = gm->shards;
    /* The segment's type, not this process's INI: the slot rows are the
     * volatile DB's bytes, and every process on the table's registry entry
     * then maps a cache of one layout. */
    hps_table_info_t ti;
    gt->dtype = hps_shmdb_table_info(g->cl->db, m->vdb_ids[t], &ti) == 0 ? ti.storage_type
                                                                         : m->conf->storage_type;
    /* A cache of a few VMM granules cannot be cut (it lies on the device of
     * its last piece): rotating each table's device list by its segment
     * table id spreads the small tables of a model over the devices.  Every
     * process derives the same order (the registry checks it). */
    for (uint32_t j = 0, n = gm->shards.num_devices; gt->sharded && j < n; j++)
        gt->shards.devices[j] = gm->shards.devices[(j + m->vdb_ids[t]) % n];
    uint64_t cap =
        max_slots(m->conf, t, m->dims[t], gt->dtype, gt->sharded ? gt->shards.num_devices : 1);
    if (cap == 0)
        return HPS_EINVAL;
    if (slots > cap) {
        HPS_WARN("GPU cache %s/%s: %llu rows wanted, %llu fit gpu_cache_max_bytes = %llu per "
                 "device; the cache holds fewer rows (hit rate below 1)",
                 m->conf->name, m->conf->embedding_table_names[t], (unsigned long long)slots,
                 (unsigned long long)cap, (unsigned long long)m->conf->gpu_cache_max_bytes);
        slots = cap;
        want = want < cap ? want : cap;
    }
    /* Follow the update log from its head before the preload reads the VDB:
     * an update racing the preload is applied again later, never lost. */
    uint64_t head = 0;
    bool has_log = hps_shmdb_updlog_head(g->cl->db, m->vdb_ids[t], &head, NULL) == 0;
    gt->num_fds = 0;
    gt->reg = UINT32_MAX;
    gt->dim = m->dims[t];
    gt->has_log = has_log;
    gt->seq = head;
    gt->refresh = false;
    gt->refresher = true;
    hps_gcache_reg_t e;
    bool creator = true;
    bool shared = hps__client_reg_join(g, mi, t, slots, &e, &creator) == 0;
    char where[96];
    where_text(gm, gt, g->device, where, sizeof(where));
    if (atomic_load(&g->stop)) { /* stopped while another worker was preloading */
        if (shared)
            hps_shmdb_gcache_leave(g->cl->db, e.index, e.generation);
        return HPS_ETIMEDOUT;
    }
    if (shared && !creator) {
        pid_t donor = 0;
        if (hps__client_reg_import(g, &e, gt, &donor) == 0) {
            gt->reg = e.index;
            gt->gen = e.generation;
            gt->refresher = false;
            HPS_INFO("GPU cache %s/%s%s: mapped the shared cache (created by process %d, handed "
                     "over by process %d; %llu slots, %u processes)",
                     m->conf->name, m->conf->embedding_table_names[t], where, (int)e.creator_pid,
                     (int)donor, (unsigned long long)e.capacity_rows, e.num_pids);
            return 0;
        }
        HPS_WARN("GPU cache %s/%s: no process handed out the shared cache; building a private one",
                 m->conf->name, m->conf->embedding_table_names[t]);
        hps_shmdb_gcache_leave(g->cl->db, e.index, e.generation);
        shared = false;
    }
    if (!shared && gt->sharded) { /* a private cache is this device's own */
        gt->sharded = false;
        where_text(gm, gt, g->device, where, sizeof(where));
    }
    for (int attempt = 0;; attempt++) {
        int rc = build_cache(g, c, mi, t, gt, slots, want, shared);
        if (rc < 0) {
            if (shared)
                hps_shmdb_gcache_leave(g->cl->db, e.index, e.generation);
            return rc;
        }
        hps_gcache_stats_t st = {0};
        rc = hps_gcache_stats(gt->cache, &st);
        if (rc == 0 && whole && st.evictions > 0 && attempt < 4 && slots < cap) {
            hps_gcache_destroy(gt->cache);
            gt->cache = NULL;
            hps__client_reg_close(gt);
            slots = 2 * slots < cap ? 2 * slots : cap;
            continue;
        }
        if (shared)
            hps__client_reg_publish(g, &e, gt);
        HPS_INFO("GPU cache %s/%s%s: %llu of %llu rows preloaded, %llu slots, %llu MiB%s",
                 m->conf->name, m->conf->embedding_table_names[t], where,
                 (unsigned long long)st.occupied, (unsigned long long)rows,
                 (unsigned long long)st.capacity_rows,
                 (unsigned long long)(hps_gcache_bytes(gt->cache) >> 20),
                 gt->reg != UINT32_MAX ? ", shared with the device's other workers" : "");
        return rc;
    }
}

/** Every table of model mi; the model is served by the GPU once all exist. */
static void build_model(struct client_gpu *g, gctx_t *c, size_t mi)
{
    gmodel_t *gm = &g->models[mi];
    int rc = 0;
    gm->sharded = plan_shards(g, mi, &gm->shards);
    for (uint32_t t = 0; t < gm->num_tables && rc == 0 && !atomic_load(&g->stop); t++)
        rc = build_table(g, c, mi, t);
    if (rc < 0) {
        HPS_WARN("model %s: no GPU cache (%s); serving it from the CPU path",
                 g->cl->models[mi].conf->name, hps_strerror(rc));
        return;
    }
    hps_gcache_t **caches = malloc(gm->num_tables * sizeof(*caches));
    for (uint32_t t = 0; caches && t < gm->num_tables; t++)
        caches[t] = gm->tables[t].cache;
    if (!caches || hps_gcache_set_create(caches, (uint32_t)gm->num_tables, &gm->set) < 0)
        gm->set = NULL; /* per-table launches only */
    free(caches);
    hps__client_timer_arm(g, mi);
    atomic_store_explicit(&gm->active, !atomic_load(&g->stop), memory_order_release);
}

void hps__client_gpu_switched(hps_client_t *cl)
{
    struct client_gpu *g = cl->gpu;
    for (size_t mi = 0; g && mi < g->num_models; mi++) {
        gmodel_t *gm = &g->models[mi];
        if (!gm->tables)
            continue;
        if (atomic_load(&gm->active)) {
            atomic_store_explicit(&gm->active, false, memory_order_release);
            atomic_store(&gm->stale, true);
        } else if (atomic_load(&cl->models[mi].resolved)) {
            atomic_store(&gm->stale, true); /* loaded now (explicit model control): build it */
        }
    }
    if (g) {
        pthread_mutex_lock(&g->mu);
        pthread_cond_broadcast(&g->cv); /* the GPU thread rebuilds now */
        pthread_mutex_unlock(&g->mu);
    }
}

void hps__client_gpu_resolved(hps_client_t *cl)
{
    struct client_gpu *g = cl->gpu;
    for (size_t mi = 0; g && mi < g->num_models; mi++) {
        gmodel_t *gm = &g->models[mi];
        bool active = atomic_load(&gm->active), resolved = atomic_load(&cl->models[mi].resolved);
        if (!gm->tables || active == resolved)
            continue;
        atomic_store_explicit(&gm->active, false, memory_order_release);
        atomic_store(&gm->stale, true); /* freed, and built again if resolved */
    }
    if (g) {
        pthread_mutex_lock(&g->mu);
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
    }
}

/** Free context x's workspaces of model gm (x NULL: none). */
static void ws_drop(gctx_t *x, const gmodel_t *gm)
{
    for (size_t s = gm->ws_base; x && s < gm->ws_base + gm->num_tables && s < x->nslots; s++) {
        hps_gcache_ws_destroy(x->ws[s]);
        x->ws[s] = NULL;
        x->ws_cap[s] = 0;
    }
}

/** Free table t's cache: a new segment's registry knows nothing of it, so
 *  there is no entry to leave (the old segment's lists this process until
 *  its processes are all gone). */
static void table_drop(gtable_t *gt)
{
    hps_gcache_destroy(gt->cache); /* synchronizes the device: no insert is left on it */
    gt->cache = NULL;
    hps__client_reg_close(gt);
}

/**
 * Models marked stale by a segment switch: their caches are freed (the
 * memory stays with the processes still on the old segment) and built anew
 * from the new segment, through its registry (preloaded by the first
 * process, mapped by the others), then served again (build_model).
 * Lookups of such a model take the CPU path meanwhile; contexts' captured
 * graphs of it no longer match (gen).  GPU thread only.
 */
static void rebuild_stale(struct client_gpu *g, gctx_t *c)
{
    hps_client_t *cl = g->cl;
    if (!any_stale(g))
        return;
    pthread_rwlock_rdlock(&cl->seg_lock);
    for (size_t mi = 0; mi < g->num_models && !atomic_load(&g->stop); mi++) {
        gmodel_t *gm = &g->models[mi];
        if (!atomic_load(&gm->stale))
            continue;
        HPS_INFO("model %s: new segment; building its GPU caches anew (the CPU path serves it "
                 "meanwhile)",
                 cl->models[mi].conf->name);
        /* Every context's workspaces of the model belong to the old caches
         * (and are freed through them): drop them first.  No lookup of the
         * model runs (inactive), so no other thread touches these slots. */
        pthread_mutex_lock(&g->mu);
        for (size_t i = 0; i <= g->num_ctx; i++)
            ws_drop(i < g->num_ctx ? g->ctxs[i] : c, gm);
        pthread_mutex_unlock(&g->mu);
        hps_gcache_set_destroy(gm->set);
        gm->set = NULL;
        for (uint32_t t = 0; t < gm->num_tables; t++)
            table_drop(&gm->tables[t]);
        gm->gen++;
        atomic_store(&gm->stale, false);
        if (atomic_load(&cl->models[mi].resolved)) /* else unloaded: its memory is back */
            build_model(g, c, mi);
    }
    g->upd_db = cl->db; /* the new caches follow the new segment's logs from their build */
    pthread_rwlock_unlock(&cl->seg_lock);
}

static bool can_build(hps_client_t *cl)
{
    return hps__client_attached(cl) && hps__client_models_known(cl) &&
           atomic_load(&cl->coord_alive);
}

static void *gpu_thread(void *arg)
{
    struct client_gpu *g = arg;
    hps_client_t *cl = g->cl;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 20000000L};
    while (!atomic_load(&g->stop) && !can_build(cl))
        nanosleep(&ts, NULL);
    gctx_t *c = NULL;
    if (!atomic_load(&g->stop) && cudaSetDevice(g->device) == cudaSuccess) {
        pthread_mutex_lock(&g->mu); /* ws_slots: hps__client_gpu_learned may grow it */
        c = hps__client_ctx_new(g);
        pthread_mutex_unlock(&g->mu);
    }
    if (c) {
        pthread_rwlock_rdlock(&cl->seg_lock);
        for (size_t mi = 0; mi < g->num_models && !atomic_load(&g->stop); mi++)
            if (g->models[mi].tables && atomic_load(&cl->models[mi].resolved))
                build_model(g, c, mi); /* a model not loaded is built when it is */
        g->upd_db = cl->db;
        pthread_rwlock_unlock(&cl->seg_lock);
        g->upd_last = hps__client_mono();
    }
    atomic_store(&g->ready, true);
    if (c)
        serve_queue(g, c);
    hps__client_ctx_free(c);
    return NULL;
}

/* ---- start, stop, metrics ---------------------------------------------- */

bool hps__client_gpu_exists(int device)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || device >= n) {
        (void)cudaGetLastError();
        return false;
    }
    return true;
}

/* Give model mi GPU-cache tables if it has gpucache (entry still empty);
 * under g->mu, or before the GPU thread and any lookup exist. */
static int model_slots(struct client_gpu *g, size_t mi)
{
    gmodel_t *gm = &g->models[mi];
    const hps_conf_model_t *mc = g->cl->models[mi].conf;
    if (!mc->gpucache || gm->tables)
        return 0;
    if (!(gm->tables = calloc(mc->num_tables, sizeof(gtable_t))))
        return -ENOMEM;
    gm->num_tables = mc->num_tables;
    gm->ws_base = g->ws_slots;
    g->ws_slots += gm->num_tables;
    return 0;
}

void hps__client_gpu_learned(hps_client_t *cl, size_t mi)
{
    struct client_gpu *g = cl->gpu;
    if (!g || mi >= HPS_CONF_MAX_MODELS)
        return;
    pthread_mutex_lock(&g->mu);
    if (model_slots(g, mi) < 0)
        HPS_WARN("model %s: no memory for its GPU caches; served from the volatile DB",
                 cl->models[mi].conf->name);
    if (mi >= g->num_models)
        atomic_store(&g->num_models, mi + 1); /* after the entry: the GPU thread reads it */
    if (g->models[mi].tables && atomic_load(&cl->models[mi].resolved))
        atomic_store(&g->models[mi].stale, true); /* loaded already: build it now */
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static int gpu_alloc(hps_client_t *cl, struct client_gpu *g)
{
    g->cl = cl;
    g->device = cl->device;
    g->models = calloc(HPS_CONF_MAX_MODELS, sizeof(gmodel_t));
    g->num_models = cl->num_models;
    g->max_ctx = cl->max_concurrent;
    g->ctxs = calloc(g->max_ctx, sizeof(gctx_t *));
    if (!g->models || !g->ctxs)
        return -ENOMEM;
    for (size_t i = 0; i < g->num_models; i++)
        if (model_slots(g, i) < 0)
            return -ENOMEM;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    return 0;
}

/** Free table t's cache; a shared one leaves the registry first. */
static void table_free(struct client_gpu *g, gtable_t *gt)
{
    hps_client_t *cl = g->cl;
    if (gt->reg != UINT32_MAX && gt->cache) {
        pthread_rwlock_rdlock(&cl->seg_lock);
        if (cl->db && cl->db == g->upd_db)
            hps_shmdb_gcache_leave(cl->db, gt->reg, gt->gen);
        pthread_rwlock_unlock(&cl->seg_lock);
    }
    hps_gcache_destroy(gt->cache);
    hps__client_reg_close(gt);
}

static void gpu_free(struct client_gpu *g)
{
    gshare_stop(g->share); /* nobody can ask for a descriptor being closed */
    for (size_t i = 0; g->ctxs && i < g->num_ctx; i++)
        hps__client_ctx_free(g->ctxs[i]);
    for (size_t i = 0; g->models && i < g->num_models; i++) {
        hps_gcache_set_destroy(g->models[i].set);
        for (size_t t = 0; g->models[i].tables && t < g->models[i].num_tables; t++)
            table_free(g, &g->models[i].tables[t]);
        free(g->models[i].tables);
    }
    for (size_t i = 0; i < g->q_len; i++)
        free(g->queue[(g->q_head + i) % QUEUE_SLOTS].mem);
    free(g->models);
    free(g->ctxs);
    free(g->upd_raw);
    free(g->upd_k32);
    free(g->upd_found);
    free(g);
}

int hps__client_gpu_start(hps_client_t *cl)
{
    bool any = false;
    for (size_t i = 0; i < cl->num_models; i++)
        any |= cl->models[i].conf->gpucache;
    if (!any)
        return 0;
    if (cl->gpu_device < 0)
        return 0; /* no such device: hps_client_open_conf() warned */
    struct client_gpu *g = calloc(1, sizeof(*g));
    if (!g)
        return -ENOMEM;
    int rc = gshare_start(cl->conf->volatile_db.shared_memory_name, &g->share);
    if (rc < 0)
        HPS_WARN("GPU caches will not be shared with other workers: descriptor socket: %s",
                 hps_strerror(rc));
    if (gpu_alloc(cl, g) != 0 || pthread_create(&g->thread, NULL, gpu_thread, g) != 0) {
        gpu_free(g);
        return -ENOMEM;
    }
    g->started = true;
    cl->gpu = g;
    return 0;
}

void hps__client_gpu_stop(hps_client_t *cl)
{
    struct client_gpu *g = cl->gpu;
    if (!g)
        return;
    atomic_store(&g->stop, true);
    pthread_mutex_lock(&g->mu);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (g->started)
        pthread_join(g->thread, NULL);
    cl->gpu = NULL;
    cudaSetDevice(g->device);
    gpu_free(g);
}

bool hps__client_gpu_ready(hps_client_t *cl)
{
    return !cl->gpu || atomic_load(&cl->gpu->ready);
}
