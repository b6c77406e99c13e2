/*
 * gpu_refresh.c -- keeping cached rows current (gpu.h), on the GPU thread
 * of the process that is a cache's refresher: the table's update log in the
 * segment (keys the coordinator changed, from Kafka), a full refresh when
 * the log lapped us or the segment was recreated, and the periodic refresh
 * of refresh_interval / cache_refresh_percentage_per_iteration.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include "gpu_internal.h"
#include "hps/log.h"

/* ---- refresh: following the update logs -------------------------------- */

/**
 * Replace the cached rows of the n keys staged in c->ikeys.h with their rows
 * in the volatile DB, or with lower in every layer (keys found nowhere are
 * skipped, never replaced by the default; keys not in the cache are ignored
 * by hps_gcache_update).  GPU thread, seg_lock held.
 */
static int refresh_staged(struct client_gpu *g, gctx_t *c, size_t mi, uint32_t t, size_t n,
                          bool lower)
{
    hps_client_t *cl = g->cl;
    client_model_t *m = &cl->models[mi];
    uint32_t dim = m->dims[t];
    if (n == 0)
        return 0;
    int rc = hps__client_pair_reserve(&c->ivals, n * dim * sizeof(float));
    if (rc < 0)
        return rc;
    int64_t *ik = c->ikeys.h;
    float *iv = c->ivals.h;
    uint8_t *found = g->upd_found;
    const void *k = ik;
    if (cl->key_bytes == 4) {
        for (size_t i = 0; i < n; i++)
            g->upd_k32[i] = (uint32_t)ik[i];
        k = g->upd_k32;
    }
    size_t hits = 0;
    if (lower) /* every layer (timer refresh): volatile DB, then the coordinator */
        hps__client_fetch_one(cl, mi, t, ik, n, iv, found);
    else if ((rc = hps_shmdb_lookup(cl->db, m->vdb_ids[t], n, k, iv, found, &hits)) < 0)
        return rc;
    size_t j = hps__client_keep_found(ik, ik, iv, found, n, dim);
    if (j == 0)
        return 0;
    rc = hps__client_write_staged(c, g->models[mi].tables[t].cache, j, dim, true);
    if (rc == 0)
        rc = hps__client_ck(cudaStreamSynchronize(c->stream), "refresh");
    return rc;
}

/** Cached keys of sets [s0, s1) of table t replaced by their current rows. */
static int refresh_sets(struct client_gpu *g, gctx_t *c, size_t mi, uint32_t t, uint64_t s0,
                        uint64_t s1, bool lower)
{
    hps_gcache_t *cache = g->models[mi].tables[t].cache;
    uint64_t step = UPD_BATCH / HPS_GCACHE_WAYS;
    int rc = hps__client_pair_reserve(&c->mcount, sizeof(uint32_t));
    for (uint64_t s = s0; rc == 0 && s < s1 && !atomic_load(&g->stop); s += step) {
        uint64_t e = s + step < s1 ? s + step : s1;
        rc = hps_gcache_dump(cache, s, e, c->ikeys.d, c->mcount.d, c->stream);
        if (rc == 0)
            rc = hps__client_ck(cudaMemcpyAsync(c->mcount.h, c->mcount.d, sizeof(uint32_t),
                                                cudaMemcpyDeviceToHost, c->stream),
                                "D2H dump count");
        if (rc == 0)
            rc = hps__client_ck(cudaStreamSynchronize(c->stream), "dump");
        uint32_t n = rc == 0 ? *(uint32_t *)c->mcount.h : 0;
        if (rc == 0 && n)
            rc = hps__client_ck(
                cudaMemcpy(c->ikeys.h, c->ikeys.d, n * sizeof(int64_t), cudaMemcpyDeviceToHost),
                "D2H dump keys");
        if (rc == 0)
            rc = refresh_staged(g, c, mi, t, n, lower);
    }
    return rc;
}

/** Every cached key of table t replaced by its row in the volatile DB. */
static int refresh_full(struct client_gpu *g, gctx_t *c, size_t mi, uint32_t t)
{
    hps_gcache_t *cache = g->models[mi].tables[t].cache;
    int rc = refresh_sets(g, c, mi, t, 0, hps_gcache_num_sets(cache), false);
    if (rc == 0) {
        atomic_fetch_add(&g->models[mi].tables[t].full_refreshes, 1);
        HPS_INFO("GPU cache %s/%s: refreshed fully from the volatile DB",
                 g->cl->models[mi].conf->name, g->cl->models[mi].conf->embedding_table_names[t]);
    }
    return rc;
}

/* ---- refresh: the timer (refresh_delay, refresh_interval) -------------- */

/** Arm model mi's refresh timer: first refresh refresh_delay s from now. */
void hps__client_timer_arm(struct client_gpu *g, size_t mi)
{
    const hps_conf_model_t *mc = g->cl->models[mi].conf;
    g->models[mi].timer_next = mc->refresh_interval > 0
                                   ? hps__client_mono() + (long long)(mc->refresh_delay * 1e9)
                                   : LLONG_MAX;
}

/**
 * One step of table t's timer refresh: the next
 * cache_refresh_percentage_per_iteration of its sets (at least one batch of
 * UPD_BATCH / 32 sets), from every layer, so a long refresh never holds up
 * the update logs or the background inserts for long.
 */
static void timer_step(struct client_gpu *g, gctx_t *c, size_t mi, uint32_t t)
{
    gtable_t *gt = &g->models[mi].tables[t];
    uint64_t sets = hps_gcache_num_sets(gt->cache);
    double pct = g->cl->models[mi].conf->cache_refresh_percentage_per_iteration;
    uint64_t stride = (uint64_t)floor(pct * (double)sets);
    if (stride < UPD_BATCH / HPS_GCACHE_WAYS)
        stride = UPD_BATCH / HPS_GCACHE_WAYS;
    uint64_t end = gt->timer_pos + stride < sets ? gt->timer_pos + stride : sets;
    if (refresh_sets(g, c, mi, t, gt->timer_pos, end, true) < 0)
        return; /* the same sets again at the next poll */
    gt->timer_pos = end;
    if (end < sets)
        return;
    gt->timer_active = false;
    atomic_fetch_add(&gt->full_refreshes, 1);
    HPS_DEBUG("GPU cache %s/%s: periodic refresh done", g->cl->models[mi].conf->name,
              g->cl->models[mi].conf->embedding_table_names[t]);
}

/** Start due timer refreshes and advance the running ones (GPU thread). */
void hps__client_timer_refresh(struct client_gpu *g, gctx_t *c)
{
    hps_client_t *cl = g->cl;
    long long now = hps__client_mono();
    pthread_rwlock_rdlock(&cl->seg_lock);
    for (size_t mi = 0; cl->db && mi < g->num_models && !atomic_load(&g->stop); mi++) {
        gmodel_t *gm = &g->models[mi];
        if (!atomic_load_explicit(&gm->active, memory_order_acquire) || !cl->models[mi].resolved)
            continue;
        if (now >= gm->timer_next) {
            long long iv = (long long)cl->models[mi].conf->refresh_interval * 1000000000LL;
            gm->timer_next = gm->timer_next + iv > now ? gm->timer_next + iv : now + iv;
            for (uint32_t t = 0; t < gm->num_tables; t++) {
                gm->tables[t].timer_active = gm->tables[t].refresher;
                gm->tables[t].timer_pos = 0;
            }
        }
        for (uint32_t t = 0; t < gm->num_tables; t++)
            if (gm->tables[t].timer_active)
                timer_step(g, c, mi, t);
    }
    pthread_rwlock_unlock(&cl->seg_lock);
}

/** Apply the new entries of table t's update log (seg_lock held). */
static void follow_table(struct client_gpu *g, gctx_t *c, size_t mi, uint32_t t)
{
    hps_client_t *cl = g->cl;
    client_model_t *m = &cl->models[mi];
    gtable_t *gt = &g->models[mi].tables[t];
    uint32_t id = m->vdb_ids[t];
    if (!gt->has_log && !gt->refresh) {
        /* A log created after the preload (coordinator restarted with an
         * update source): read it from its start. */
        if (hps_shmdb_updlog_head(cl->db, id, NULL, NULL) < 0)
            return;
        gt->has_log = true;
        gt->seq = 0;
    }
    for (int r = 0; r < UPD_MAX_READS && !atomic_load(&g->stop); r++) {
        if (gt->refresh) {
            uint64_t head = 0;
            bool has_log = hps_shmdb_updlog_head(cl->db, id, &head, NULL) == 0;
            if (refresh_full(g, c, mi, t) < 0)
                return; /* tried again at the next poll */
            gt->refresh = false;
            gt->has_log = has_log;
            gt->seq = head;
            if (!has_log)
                return;
            continue;
        }
        size_t n = 0;
        uint64_t next = gt->seq;
        bool lapped = false;
        if (hps_shmdb_updlog_read(cl->db, id, gt->seq, g->upd_raw, UPD_BATCH, &n, &next, &lapped) <
            0) {
            gt->has_log = false;
            return;
        }
        if (lapped) {
            gt->refresh = true;
            continue;
        }
        if (n == 0)
            return;
        int64_t *ik = c->ikeys.h;
        for (size_t i = 0; i < n; i++)
            ik[i] = cl->key_bytes == 4 ? (int64_t)((uint32_t *)g->upd_raw)[i]
                                       : ((int64_t *)g->upd_raw)[i];
        if (refresh_staged(g, c, mi, t, n, false) < 0)
            return; /* the same keys again at the next poll */
        gt->seq = next;
        if (n < UPD_BATCH)
            return;
    }
}

/** One poll of every cached table's update log (the GPU thread). */
void hps__client_follow_logs(struct client_gpu *g, gctx_t *c)
{
    hps_client_t *cl = g->cl;
    if (!g->upd_raw) {
        g->upd_raw = malloc(UPD_BATCH * sizeof(int64_t));
        g->upd_k32 = malloc(UPD_BATCH * sizeof(uint32_t));
        g->upd_found = malloc(UPD_BATCH);
        if (!g->upd_raw || !g->upd_k32 || !g->upd_found)
            return;
    }
    if (hps__client_pair_reserve(&c->ikeys, UPD_BATCH * sizeof(int64_t)) < 0)
        return;
    pthread_rwlock_rdlock(&cl->seg_lock);
    bool recreated = cl->db && cl->db != g->upd_db;
    for (size_t mi = 0; cl->db && mi < g->num_models && !atomic_load(&g->stop); mi++) {
        gmodel_t *gm = &g->models[mi];
        if (!atomic_load_explicit(&gm->active, memory_order_acquire))
            continue;
        for (uint32_t t = 0; t < gm->num_tables; t++) {
            gtable_t *gt = &gm->tables[t];
            if (recreated) { /* new segment: old sequences and entries mean nothing */
                gt->refresh = true;
                gt->reg = UINT32_MAX; /* keep the mapping, refresh it ourselves */
                gt->refresher = true;
            }
            if (cl->models[mi].resolved && gt->refresher)
                follow_table(g, c, mi, t);
        }
    }
    if (recreated)
        g->upd_db = cl->db;
    pthread_rwlock_unlock(&cl->seg_lock);
}
