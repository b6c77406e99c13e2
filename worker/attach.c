/*
 * attach.c -- the worker's maintenance thread: attach the segment (and
 * re-attach when a new coordinator recreated it), resolve the tables of the
 * configured models, beat the worker's heartbeat and watch the
 * coordinator's.  A worker without a live coordinator is "degraded": it
 * keeps answering from the volatile DB and defaults, and is not ready.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hps/log.h"
#include "worker.h"

#define MAINT_PERIOD_MS 50

/* Identity of /dev/shm/hps.<name> now; false if it does not exist. */
static bool object_id(const worker_t *w, dev_t *dev, ino_t *ino)
{
    char path[300];
    struct stat st;
    snprintf(path, sizeof(path), "/dev/shm/hps.%s", w->conf->volatile_db.shared_memory_name);
    if (stat(path, &st) < 0)
        return false;
    *dev = st.st_dev;
    *ino = st.st_ino;
    return true;
}

/* Alive and serving: loaded its models and answering the miss queue. */
/* Find every configured table in the segment (the coordinator creates them
 * while loading, so this may take a few rounds). */
static bool resolve(worker_t *w)
{
    bool all = true;
    for (size_t i = 0; i < w->num_models; i++) {
        worker_model_t *m = &w->models[i];
        bool ok = true;
        for (size_t t = 0; t < m->conf->num_tables; t++)
            ok &= hps_shmdb_table_find(w->db, m->conf->name, m->conf->embedding_table_names[t],
                                       &m->vdb_ids[t]) == 0;
        m->resolved = ok;
        all &= ok;
    }
    return all;
}

/* Attach if not attached, or if the object was replaced; under the write lock. */
static void reattach(worker_t *w)
{
    dev_t dev;
    ino_t ino;
    bool exists = object_id(w, &dev, &ino);
    if (w->db && exists && dev == w->seg_dev && ino == w->seg_ino)
        return;
    if (!exists && !w->db)
        return;
    hps_shmdb_t *fresh = NULL;
    hps_shmdb_proc_opts_t po = {.num_threads = (unsigned)w->conf->volatile_db.num_threads,
                                .role = HPS_ROLE_WORKER,
                                .device = w->device};
    if (exists && hps_shmdb_attach(w->conf->volatile_db.shared_memory_name, &po, &fresh) < 0)
        fresh = NULL;
    if (!fresh && !w->db)
        return;
    pthread_rwlock_wrlock(&w->seg_lock);
    hps_shmdb_t *old = w->db;
    if (fresh) {
        w->db = fresh;
        w->seg_dev = dev;
        w->seg_ino = ino;
        for (size_t i = 0; i < w->num_models; i++)
            w->models[i].resolved = false;
        atomic_store(&w->resolved, false);
    }
    pthread_rwlock_unlock(&w->seg_lock);
    if (old && fresh) {
        HPS_INFO("the segment was recreated by a new coordinator; re-attached");
        hps_shmdb_detach(old);
    } else if (fresh) {
        HPS_INFO("attached /dev/shm/hps.%s", w->conf->volatile_db.shared_memory_name);
    }
}

static void maint_round(worker_t *w, bool *was_alive)
{
    reattach(w);
    if (!w->db)
        return;
    if (!atomic_load(&w->resolved)) {
        pthread_rwlock_wrlock(&w->seg_lock);
        bool all = resolve(w);
        pthread_rwlock_unlock(&w->seg_lock);
        if (all) {
            atomic_store(&w->resolved, true);
            HPS_INFO("all tables of %zu models found in the volatile DB", w->num_models);
        }
    }
    hps_shmdb_proc_heartbeat(w->db);
    bool alive = hps_shmdb_coordinator_alive(w->db, (uint32_t)w->conf->hps.worker_timeout_ms, true);
    atomic_store(&w->coord_alive, alive);
    bool ready = alive && atomic_load(&w->resolved);
    if (ready != *was_alive)
        hps_log(ready ? HPS_LOG_INFO : HPS_LOG_WARN, "%s",
                ready ? "coordinator serving and tables found: ready"
                      : "coordinator gone or loading: degraded (volatile DB and defaults "
                        "only), not ready");
    *was_alive = ready;
}

static void *maint_loop(void *arg)
{
    worker_t *w = arg;
    bool was_alive = atomic_load(&w->coord_alive) && atomic_load(&w->resolved);
    struct timespec ts = {.tv_sec = 0, .tv_nsec = MAINT_PERIOD_MS * 1000000L};
    while (!*w->stop) {
        maint_round(w, &was_alive);
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int worker_maint_start(worker_t *w)
{
    bool was_alive = false;
    maint_round(w, &was_alive); /* attach at once when the segment exists */
    if (pthread_create(&w->maint, NULL, maint_loop, w) != 0)
        return HPS_WEXIT_RUNTIME;
    return 0;
}

void worker_maint_stop(worker_t *w)
{
    pthread_join(w->maint, NULL);
}
