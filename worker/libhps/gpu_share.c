/*
 * gpu_share.c -- one GPU cache per (model, table, device) for every process
 * of the device: the segment's registry says who created each cache and who
 * maps it (shmdb/gpureg.c), gshare.c hands the CUDA VMM descriptor over a
 * Unix socket; the GPU thread's upkeep drops dead processes, repairs the
 * sets they left locked, moves the refresher role and publishes counters.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpu_internal.h"
#include "hps/log.h"

/* ---- registry upkeep ---------------------------------------------------- */

/** Counters of a shared cache for hps-shm and the other workers. */
static void reg_counters(gtable_t *gt, hps_gcache_counters_t *k)
{
    hps_gcache_stats_t st;
    memset(k, 0, sizeof(*k));
    if (hps_gcache_stats(gt->cache, &st) < 0)
        return;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    k->occupied = st.occupied;
    k->lookups = st.lookups;
    k->hits = st.hits;
    k->inserts = st.inserts;
    k->evictions = st.evictions;
    k->refreshed = st.updates;
    k->full_refreshes = atomic_load(&gt->full_refreshes);
    k->lock_timeouts = st.lock_timeouts;
    k->repaired_sets = gt->repaired;
    k->published_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
    for (uint32_t j = 0; gt->sharded && j < hps_gcache_num_shards(gt->cache); j++) {
        int dev;
        uint64_t bytes;
        hps_gcache_shard_stats(gt->cache, j, &dev, &bytes, &k->shard_occupied[j]);
    }
}

/**
 * One shared table: drop dead processes from the entry (a process killed
 * mid-insert may have left sets locked: repair them), take over refreshing
 * when the refresher died (a full refresh first: its log position is
 * unknown), and, as refresher, publish the counters.
 */
static void reg_upkeep_table(struct client_gpu *g, gtable_t *gt, const char *name)
{
    uint32_t dropped = 0;
    bool refresher = false;
    if (hps_shmdb_gcache_prune(g->cl->db, gt->reg, gt->gen, &dropped, &refresher) < 0)
        return;
    uint64_t repaired = 0;
    if (dropped && hps_gcache_repair(gt->cache, REPAIR_WAIT_MS, &repaired) == 0) {
        gt->repaired += repaired;
        HPS_WARN("GPU cache %s: %u process(es) sharing it died; %llu locked set(s) emptied", name,
                 dropped, (unsigned long long)repaired);
    }
    if (refresher && !gt->refresher) {
        HPS_INFO("GPU cache %s: this worker refreshes it now", name);
        gt->refresher = true;
        gt->refresh = true;
    }
    if (refresher) {
        hps_gcache_counters_t k;
        reg_counters(gt, &k);
        hps_shmdb_gcache_publish(g->cl->db, gt->reg, gt->gen, &k);
    }
}

/** Every REG_PERIOD_NS: upkeep of every shared table (GPU thread). */
void hps__client_reg_upkeep(struct client_gpu *g)
{
    if (!hps__client_due(&g->reg_last, REG_PERIOD_NS))
        return;
    hps_client_t *cl = g->cl;
    pthread_rwlock_rdlock(&cl->seg_lock);
    for (size_t mi = 0; cl->db && cl->db == g->upd_db && mi < g->num_models; mi++) {
        gmodel_t *gm = &g->models[mi];
        if (!atomic_load_explicit(&gm->active, memory_order_acquire))
            continue;
        for (uint32_t t = 0; t < gm->num_tables; t++)
            if (gm->tables[t].reg != UINT32_MAX)
                reg_upkeep_table(g, &gm->tables[t], cl->models[mi].conf->embedding_table_names[t]);
    }
    pthread_rwlock_unlock(&cl->seg_lock);
}

/* ---- sharing through the registry -------------------------------------- */

/**
 * Find the device's cache of table t (or the table's sharded cache, when
 * gt->sharded) in the registry or claim its creation; waits while another
 * worker creates it.  0 (*creator says which), or < 0:
 * not shared (no registry, other shape) and the caller builds a private one.
 */
int hps__client_reg_join(struct client_gpu *g, size_t mi, uint32_t t, uint64_t slots,
                         hps_gcache_reg_t *e, bool *creator)
{
    hps_client_t *cl = g->cl;
    gtable_t *gt = &g->models[mi].tables[t];
    hps_gcache_reg_t want = {.table_id = cl->models[mi].vdb_ids[t],
                             .device = gt->sharded ? HPS_SHMDB_GCACHE_SHARDED : g->device,
                             .dim = cl->models[mi].dims[t],
                             .policy = HPS_GCACHE_LRU,
                             .capacity_rows = slots,
                             .num_shards = gt->shards.num_devices};
    memcpy(want.shard_dev, gt->shards.devices, sizeof(gt->shards.devices));
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 50000000L};
    int rc = g->share ? HPS_EBUSY : HPS_EUNSUPPORTED;
    while (g->share && !atomic_load(&g->stop)) {
        rc = hps_shmdb_gcache_claim(cl->db, &want, e, creator);
        if (rc != HPS_EBUSY)
            break;
        nanosleep(&ts, NULL); /* another worker is preloading it */
    }
    if (rc < 0 && rc != HPS_EUNSUPPORTED)
        HPS_WARN("GPU cache %s/%s: not shared with the other workers (%s)",
                 cl->models[mi].conf->name, cl->models[mi].conf->embedding_table_names[t],
                 hps_strerror(rc));
    return rc;
}

/** Ask process pid for every descriptor of entry e: 0 (fds[0..e->num_parts)
 *  open), or the first failure (none left open). */
static int fetch_parts(const char *seg, pid_t pid, const hps_gcache_reg_t *e, int *fds)
{
    int rc = e->num_parts >= 1 && e->num_parts <= GSHARE_MAX_PARTS ? 0 : HPS_ENOTFOUND;
    uint32_t got = 0;
    for (; rc == 0 && got < e->num_parts; got++)
        if ((rc = gshare_fetch(seg, pid, e->index, got, e->generation, JOIN_FETCH_MS, &fds[got])) <
            0)
            break;
    if (rc < 0)
        for (uint32_t p = 0; p < got; p++)
            close(fds[p]);
    return rc;
}

void hps__client_reg_close(gtable_t *gt)
{
    for (uint32_t p = 0; p < gt->num_fds; p++)
        close(gt->fds[p]);
    gt->num_fds = 0;
}

/** Map the cache of entry e, asking its processes for the descriptors. */
int hps__client_reg_import(struct client_gpu *g, const hps_gcache_reg_t *e, gtable_t *gt,
                           pid_t *ret_donor)
{
    const char *seg = g->cl->conf->volatile_db.shared_memory_name;
    for (uint32_t i = 0; i < e->num_pids; i++) {
        int fds[GSHARE_MAX_PARTS];
        if (e->pids[i] == getpid() || fetch_parts(seg, e->pids[i], e, fds) < 0)
            continue;
        hps_gcache_t *cache = NULL;
        hps_gcache_policy_t pol = (hps_gcache_policy_t)e->policy;
        int rc = gt->sharded
                     ? hps_gcache_import_sharded(fds, e->num_parts, e->capacity_rows, e->dim,
                                                 gt->dtype, pol, g->device, &gt->shards, &cache)
                     : hps_gcache_import(fds[0], e->capacity_rows, e->dim, gt->dtype, pol,
                                         g->device, &cache);
        if (rc == 0 && gshare_offer(g->share, e->index, e->generation, fds, e->num_parts) == 0) {
            gt->cache = cache;
            memcpy(gt->fds, fds, e->num_parts * sizeof(int));
            gt->num_fds = e->num_parts;
            *ret_donor = e->pids[i];
            return 0;
        }
        if (rc < 0)
            HPS_WARN("GPU cache of registry entry %u: mapping the descriptors of process %d "
                     "failed (%s)",
                     e->index, (int)e->pids[i], hps_strerror(rc));
        hps_gcache_destroy(cache);
        for (uint32_t p = 0; p < e->num_parts; p++)
            close(fds[p]);
    }
    return HPS_ENOTFOUND;
}

/** Publish a cache this worker created: offer its descriptors (and, when
 *  sharded, record its parts), then READY. */
void hps__client_reg_publish(struct client_gpu *g, const hps_gcache_reg_t *e, gtable_t *gt)
{
    hps_shmdb_t *db = g->cl->db;
    uint64_t shard_bytes[HPS_GCACHE_MAX_SHARDS] = {0};
    for (uint32_t j = 0; j < hps_gcache_num_shards(gt->cache); j++) {
        int dev;
        uint64_t occ;
        hps_gcache_shard_stats(gt->cache, j, &dev, &shard_bytes[j], &occ);
    }
    if (gt->num_fds == 0 ||
        gshare_offer(g->share, e->index, e->generation, gt->fds, gt->num_fds) < 0 ||
        hps_shmdb_gcache_parts(db, e->index, e->generation, gt->num_fds, shard_bytes) < 0 ||
        hps_shmdb_gcache_ready(db, e->index, e->generation, hps_gcache_capacity(gt->cache),
                               hps_gcache_bytes(gt->cache)) < 0) {
        hps_shmdb_gcache_leave(db, e->index, e->generation);
        return;
    }
    gt->reg = e->index;
    gt->gen = e->generation;
    gt->refresher = true;
}
