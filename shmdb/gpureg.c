/*
 * gpureg.c -- the GPU-cache registry: which caches exist per (table,
 * device), which processes map them, who refreshes them, their counters.
 *
 * The registry only describes the caches; their memory is device memory
 * shared by file descriptors that the listed processes hand to each other
 * (worker/libhps/gshare.c).  A cache lives as long as one process maps it, so an
 * entry whose listed processes are all dead describes freed memory and is
 * claimed again by the next process that wants that cache.
 *
 * Changes happen under the directory lock (rare: start, stop, deaths);
 * readers (hps-shm, metrics) take lock-free snapshots.
 */
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

_Static_assert(sizeof(hps_gcache_counters_t) == HPS__SHMDB_GCACHE_NCTR * sizeof(uint64_t),
               "counters are stored word by word in struct shm_gcache");

static struct shm_gpureg *reg(hps_shmdb_t *db)
{
    return hps__shmdb_area(db, &db->hdr->gpureg_off, sizeof(struct shm_gpureg));
}

/* The registry (created on first use) with the directory lock held. */
static hps_err_t reg_lock(hps_shmdb_t *db, struct shm_gpureg **ret)
{
    struct shm_gpureg *r = reg(db);
    if (!r) {
        hps_err_t rc = hps__shmdb_area_create(db, &db->hdr->gpureg_off, sizeof(struct shm_gpureg));
        if (rc < 0)
            return rc;
        if (!(r = reg(db)))
            return HPS_ENOSPC;
    }
    int lr = hps__shmdb_lock(&db->hdr->dir_lock);
    if (lr < 0)
        return lr;
    if (lr == 1) /* every change below is a single store: nothing to repair */
        hps__shmdb_lock_consistent(db, &db->hdr->dir_lock);
    *ret = r;
    return 0;
}

static uint32_t live_pids(struct shm_gcache *e, pid_t *out)
{
    uint32_t n = 0;
    for (int i = 0; i < HPS_SHMDB_GCACHE_PROCS; i++) {
        pid_t p = LD(e->pids[i]);
        if (p > 0 && hps__shmdb_pid_alive(p)) {
            if (out)
                out[n] = p;
            n++;
        }
    }
    return n;
}

static void snapshot(struct shm_gcache *e, uint32_t index, hps_gcache_reg_t *r)
{
    memset(r, 0, sizeof(*r));
    r->index = index;
    r->state = (hps_gcache_state_t)atomic_load_explicit(&e->state, memory_order_acquire);
    r->table_id = e->table_id;
    r->device = e->device;
    r->dim = e->dim;
    r->policy = e->policy;
    r->capacity_rows = e->capacity_rows;
    r->bytes = e->bytes;
    r->generation = LD(e->generation);
    r->creator_pid = LD(e->creator_pid);
    r->refresher_pid = LD(e->refresher_pid);
    r->num_pids = live_pids(e, r->pids);
    uint64_t *c = (uint64_t *)&r->counters;
    for (size_t i = 0; i < HPS__SHMDB_GCACHE_NCTR; i++)
        c[i] = LD(e->ctr[i]);
    r->num_shards = e->num_shards;
    r->num_parts = e->num_parts;
    for (int i = 0; i < HPS_SHMDB_GCACHE_SHARDS; i++) {
        r->shard_dev[i] = e->shard_dev[i];
        r->shard_bytes[i] = e->shard_bytes[i];
    }
}

static bool same_shape(const struct shm_gcache *e, const hps_gcache_reg_t *w)
{
    if (e->dim != w->dim || e->policy != w->policy)
        return false;
    if (w->device != HPS_SHMDB_GCACHE_SHARDED)
        return true;
    if (e->num_shards != w->num_shards)
        return false;
    for (uint32_t i = 0; i < w->num_shards; i++)
        if (e->shard_dev[i] != w->shard_dev[i])
            return false;
    return true;
}

/* Add pid to the list (a free or dead slot) unless it is listed already;
 * false when the list is full. */
static bool list_add(struct shm_gcache *e, pid_t pid)
{
    for (int i = 0; i < HPS_SHMDB_GCACHE_PROCS; i++)
        if (LD(e->pids[i]) == pid)
            return true;
    for (int i = 0; i < HPS_SHMDB_GCACHE_PROCS; i++) {
        pid_t p = LD(e->pids[i]);
        if (p <= 0 || !hps__shmdb_pid_alive(p)) {
            ST(e->pids[i], pid);
            return true;
        }
    }
    return false;
}

/* (Re)initialize entry e for a new generation created by this process. */
static void entry_claim(struct shm_gcache *e, const hps_gcache_reg_t *w, pid_t me)
{
    e->table_id = w->table_id;
    e->device = w->device;
    e->dim = w->dim;
    e->policy = w->policy;
    e->capacity_rows = w->capacity_rows;
    e->bytes = w->bytes;
    for (int i = 0; i < HPS_SHMDB_GCACHE_PROCS; i++)
        ST(e->pids[i], i == 0 ? me : 0);
    for (size_t i = 0; i < HPS__SHMDB_GCACHE_NCTR; i++)
        ST(e->ctr[i], 0);
    bool sharded = w->device == HPS_SHMDB_GCACHE_SHARDED;
    e->num_shards = sharded ? w->num_shards : 1;
    e->num_parts = 1;
    for (int i = 0; i < HPS_SHMDB_GCACHE_SHARDS; i++) {
        e->shard_dev[i] = sharded ? w->shard_dev[i] : i == 0 ? w->device : -1;
        e->shard_bytes[i] = 0;
    }
    ST(e->creator_pid, me);
    ST(e->refresher_pid, me);
    atomic_fetch_add_explicit(&e->generation, 1, memory_order_relaxed);
    atomic_store_explicit(&e->state, HPS_GCACHE_CREATING, memory_order_release);
}

/* The entry for (table, device), else a free one (*found = false), else NULL. */
static struct shm_gcache *find(struct shm_gpureg *r, const hps_gcache_reg_t *w, bool *found,
                               uint32_t *ret_index)
{
    struct shm_gcache *free_e = NULL;
    uint32_t free_i = 0;
    for (uint32_t i = 0; i < HPS_SHMDB_MAX_GCACHES; i++) {
        struct shm_gcache *e = &r->e[i];
        uint32_t st = LD(e->state);
        if (st != HPS_GCACHE_FREE && e->table_id == w->table_id && e->device == w->device) {
            *found = true;
            *ret_index = i;
            return e;
        }
        if (st == HPS_GCACHE_FREE && !free_e) {
            free_e = e;
            free_i = i;
        }
    }
    *found = false;
    *ret_index = free_i;
    return free_e;
}

/* Decide for an existing entry; 0 with *creator set, or an error. */
static hps_err_t join(struct shm_gcache *e, const hps_gcache_reg_t *w, pid_t me, bool *creator)
{
    uint32_t st = LD(e->state);
    uint32_t alive = live_pids(e, NULL);
    if (alive == 0) { /* every mapping is gone, and with them the memory */
        entry_claim(e, w, me);
        *creator = true;
        return 0;
    }
    if (st == HPS_GCACHE_CREATING)
        return HPS_EBUSY;
    if (!same_shape(e, w))
        return HPS_EMISMATCH;
    if (!list_add(e, me))
        return HPS_EFULL;
    *creator = false;
    return 0;
}

hps_err_t hps_shmdb_gcache_claim(hps_shmdb_t *db, const hps_gcache_reg_t *want,
                                 hps_gcache_reg_t *ret, bool *ret_creator)
{
    if (!db || !want || !ret || !ret_creator || want->capacity_rows == 0 || want->dim == 0)
        return HPS_EINVAL;
    if (want->device == HPS_SHMDB_GCACHE_SHARDED &&
        (want->num_shards == 0 || want->num_shards > HPS_SHMDB_GCACHE_SHARDS))
        return HPS_EINVAL;
    struct shm_gpureg *r;
    hps_err_t rc = reg_lock(db, &r);
    if (rc < 0)
        return rc;
    pid_t me = getpid();
    bool found, creator = false;
    uint32_t index;
    struct shm_gcache *e = find(r, want, &found, &index);
    if (!e) {
        rc = HPS_EFULL;
    } else if (!found) {
        entry_claim(e, want, me);
        creator = true;
    } else {
        rc = join(e, want, me, &creator);
    }
    if (rc == 0) {
        snapshot(e, index, ret);
        *ret_creator = creator;
    }
    hps__shmdb_unlock(&db->hdr->dir_lock);
    return rc;
}

/* Entry `index` of generation gen with the lock held, or NULL (lock released). */
static struct shm_gcache *entry_locked(hps_shmdb_t *db, uint32_t index, uint64_t gen, hps_err_t *rc)
{
    struct shm_gpureg *r;
    *rc = db && index < HPS_SHMDB_MAX_GCACHES ? reg_lock(db, &r) : HPS_EINVAL;
    if (*rc < 0)
        return NULL;
    struct shm_gcache *e = &r->e[index];
    if (LD(e->generation) != gen || LD(e->state) == HPS_GCACHE_FREE) {
        hps__shmdb_unlock(&db->hdr->dir_lock);
        *rc = HPS_ENOTFOUND;
        return NULL;
    }
    return e;
}

hps_err_t hps_shmdb_gcache_ready(hps_shmdb_t *db, uint32_t index, uint64_t generation,
                                 uint64_t capacity_rows, uint64_t bytes)
{
    hps_err_t rc;
    struct shm_gcache *e = entry_locked(db, index, generation, &rc);
    if (!e)
        return rc;
    e->capacity_rows = capacity_rows;
    e->bytes = bytes;
    atomic_store_explicit(&e->state, HPS_GCACHE_READY, memory_order_release);
    hps__shmdb_unlock(&db->hdr->dir_lock);
    return 0;
}

hps_err_t hps_shmdb_gcache_parts(hps_shmdb_t *db, uint32_t index, uint64_t generation,
                                 uint32_t num_parts, const uint64_t *shard_bytes)
{
    if (num_parts == 0 || num_parts > 64 || !shard_bytes)
        return HPS_EINVAL;
    hps_err_t rc;
    struct shm_gcache *e = entry_locked(db, index, generation, &rc);
    if (!e)
        return rc;
    e->num_parts = num_parts;
    for (uint32_t i = 0; i < e->num_shards && i < HPS_SHMDB_GCACHE_SHARDS; i++)
        e->shard_bytes[i] = shard_bytes[i];
    hps__shmdb_unlock(&db->hdr->dir_lock);
    return 0;
}

hps_err_t hps_shmdb_gcache_leave(hps_shmdb_t *db, uint32_t index, uint64_t generation)
{
    hps_err_t rc;
    struct shm_gcache *e = entry_locked(db, index, generation, &rc);
    if (!e)
        return rc;
    pid_t me = getpid();
    rc = HPS_ENOTFOUND;
    for (int i = 0; i < HPS_SHMDB_GCACHE_PROCS; i++)
        if (LD(e->pids[i]) == me) {
            ST(e->pids[i], 0);
            rc = 0;
        }
    if (LD(e->refresher_pid) == me)
        ST(e->refresher_pid, 0);
    if (live_pids(e, NULL) == 0)
        atomic_store_explicit(&e->state, HPS_GCACHE_FREE, memory_order_release);
    hps__shmdb_unlock(&db->hdr->dir_lock);
    return rc;
}

hps_err_t hps_shmdb_gcache_prune(hps_shmdb_t *db, uint32_t index, uint64_t generation,
                                 uint32_t *ret_dropped, bool *ret_refresher)
{
    hps_err_t rc;
    struct shm_gcache *e = entry_locked(db, index, generation, &rc);
    if (!e)
        return rc;
    uint32_t dropped = 0;
    for (int i = 0; i < HPS_SHMDB_GCACHE_PROCS; i++) {
        pid_t p = LD(e->pids[i]);
        if (p > 0 && !hps__shmdb_pid_alive(p)) {
            ST(e->pids[i], 0);
            dropped++;
        }
    }
    pid_t me = getpid(), ref = LD(e->refresher_pid);
    if (ref <= 0 || !hps__shmdb_pid_alive(ref))
        ST(e->refresher_pid, ref = me);
    hps__shmdb_unlock(&db->hdr->dir_lock);
    if (ret_dropped)
        *ret_dropped = dropped;
    if (ret_refresher)
        *ret_refresher = ref == me;
    return 0;
}

hps_err_t hps_shmdb_gcache_publish(hps_shmdb_t *db, uint32_t index, uint64_t generation,
                                   const hps_gcache_counters_t *c)
{
    if (!db || !c || index >= HPS_SHMDB_MAX_GCACHES)
        return HPS_EINVAL;
    struct shm_gpureg *r = reg(db);
    if (!r || LD(r->e[index].generation) != generation || LD(r->e[index].state) == HPS_GCACHE_FREE)
        return HPS_ENOTFOUND;
    const uint64_t *v = (const uint64_t *)c;
    for (size_t i = 0; i < HPS__SHMDB_GCACHE_NCTR; i++)
        ST(r->e[index].ctr[i], v[i]);
    return 0;
}

hps_err_t hps_shmdb_gcache_get(hps_shmdb_t *db, uint32_t index, hps_gcache_reg_t *ret)
{
    if (!db || !ret || index >= HPS_SHMDB_MAX_GCACHES)
        return HPS_EINVAL;
    struct shm_gpureg *r = reg(db);
    if (!r)
        return HPS_ENOTFOUND;
    snapshot(&r->e[index], index, ret);
    return 0;
}
