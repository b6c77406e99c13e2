/*
 * gpu_stats.c -- what the GPU caches report (hps_client_cache_stats,
 * hps_client_gpu_stats): each cache's own counters, the processes that map
 * it (from the segment's registry) and this process's part.
 */
#include "gpu_internal.h"

bool hps__client_gpu_serves(const hps_client_t *cl, size_t mi)
{
    const struct client_gpu *g = cl->gpu;
    return g && g->models[mi].tables &&
           atomic_load_explicit(&g->models[mi].active, memory_order_acquire);
}

/* Under seg_lock held for reading: a segment switch (write lock) cannot
 * come between the active check and the use of the caches, and once it has
 * come the model is inactive until rebuilt (gpu_build.c: rebuild_stale). */
static int cache_stats_locked(hps_client_t *cl, size_t mi, uint32_t t,
                              hps_client_cache_stats_t *ret)
{
    struct client_gpu *g = cl->gpu;
    if (!hps__client_gpu_serves(cl, mi) || cudaSetDevice(g->device) != cudaSuccess)
        return HPS_ENOTFOUND;
    gtable_t *gt = &g->models[mi].tables[t];
    hps_gcache_stats_t st = {0};
    int rc = hps_gcache_stats(gt->cache, &st);
    if (rc < 0)
        return rc;
    *ret = (hps_client_cache_stats_t){.lookups = st.lookups,
                                      .hits = st.hits,
                                      .inserts = st.inserts,
                                      .evictions = st.evictions,
                                      .updates = st.updates,
                                      .occupied_rows = st.occupied,
                                      .capacity_rows = st.capacity_rows,
                                      .full_refreshes = atomic_load(&gt->full_refreshes),
                                      .lock_timeouts = st.lock_timeouts,
                                      .processes = 1,
                                      .refresher = gt->refresher,
                                      .num_shards = hps_gcache_num_shards(gt->cache)};
    for (uint32_t j = 0; j < ret->num_shards && j < 8 && rc == 0; j++)
        rc = hps_gcache_shard_stats(gt->cache, j, &ret->shard_device[j], &ret->shard_bytes[j],
                                    &ret->shard_occupied[j]);
    if (rc < 0)
        return rc;
    hps_gcache_reg_t e;
    if (gt->reg != UINT32_MAX && cl->db && cl->db == g->upd_db &&
        hps_shmdb_gcache_get(cl->db, gt->reg, &e) == 0 && e.generation == gt->gen)
        ret->processes = e.num_pids;
    return 0;
}

int hps__client_gpu_cache_stats(hps_client_t *cl, size_t mi, uint32_t t,
                                hps_client_cache_stats_t *ret)
{
    pthread_rwlock_rdlock(&cl->seg_lock);
    int rc = cache_stats_locked(cl, mi, t, ret);
    pthread_rwlock_unlock(&cl->seg_lock);
    return rc;
}

int hps__client_gpu_stats(const hps_client_t *cl, hps_client_gpu_stats_t *ret)
{
    const struct client_gpu *g = cl->gpu;
    if (!g)
        return HPS_ENOTFOUND;
    ret->dropped_inserts = atomic_load(&g->q_dropped);
    ret->pinned_bytes = atomic_load(&g->pinned_bytes);
    return 0;
}
