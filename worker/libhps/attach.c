/*
 * attach.c -- a client's maintenance thread: attach the segment (and
 * re-attach when a new coordinator recreated it), resolve the tables of the
 * configured models, beat the client's heartbeat in the worker table and
 * watch the coordinator's.  A client without a live coordinator is
 * "degraded": it keeps answering from the volatile DB and defaults, and is
 * not ready.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hps/log.h"
#include "internal.h"

#define MAINT_PERIOD_MS 50

/* Identity of /dev/shm/hps.<name> now; false if it does not exist. */
bool hps__client_object_id(const hps_client_t *cl, dev_t *dev, ino_t *ino)
{
    char path[300];
    struct stat st;
    snprintf(path, sizeof(path), "/dev/shm/hps.%s", cl->conf->volatile_db.shared_memory_name);
    if (stat(path, &st) < 0)
        return false;
    *dev = st.st_dev;
    *ino = st.st_ino;
    return true;
}

/* A refused attach is logged again this often while it lasts. */
#define ATTACH_RELOG_NS (60ull * 1000000000ull)

/* Why /dev/shm/hps.<name>, which exists, refused this process. */
static void log_attach_error(const hps_client_t *cl, hps_err_t rc)
{
    const char *name = cl->conf->volatile_db.shared_memory_name;
    char path[300];
    struct stat st;

    if (rc == HPS_EFULL) {
        HPS_WARN("cannot attach /dev/shm/hps.%s: its process table is full (%d processes at "
                 "most, tools and the coordinator included); trying again",
                 name, HPS_SHMDB_MAX_PROCS);
        return;
    }
    snprintf(path, sizeof(path), "/dev/shm/hps.%s", name);
    if ((rc == -EACCES || rc == -EPERM) && stat(path, &st) == 0) {
        HPS_ERROR("cannot attach %s: permission denied: it is owned by uid %u gid %u with mode "
                  "%04o, and this process runs as uid %u gid %u (the coordinator's [volatile_db] "
                  "shared_memory_mode sets the mode; run both as one user or one group); trying "
                  "again",
                  path, (unsigned)st.st_uid, (unsigned)st.st_gid, (unsigned)(st.st_mode & 07777),
                  (unsigned)geteuid(), (unsigned)getegid());
        return;
    }
    HPS_WARN("cannot attach %s: %s; trying again", path, hps_strerror(rc));
}

/* The version model m is answered from in db (its first table's), or 0
 * when m is not resolved there.  Under seg_lock (write). */
static uint32_t version_in(hps_shmdb_t *db, const client_model_t *m)
{
    hps_table_info_t ti;
    if (!db || !atomic_load(&m->resolved) || hps_shmdb_table_info(db, m->vdb_ids[0], &ti) != 0)
        return 0;
    return ti.model_version ? ti.model_version : 1; /* 0: a segment of an older build */
}

static void counters_reset(client_counters_t *k)
{
    _Atomic uint64_t *f[] = {&k->lookup_keys, &k->vdb_hits,     &k->lower_hits, &k->default_keys,
                             &k->miss_busy,   &k->miss_timeout, &k->lookup_ns,  &k->lookup_calls,
                             &k->gpu_path,    &k->cpu_path};
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        atomic_store(f[i], 0);
}

/* Log once per segment why model m (the newest entry of its name, none of
 * which fits) is not served: its first table of another dimension or key
 * width. */
static void log_misfit(hps_client_t *cl, client_model_t *m)
{
    for (size_t t = 0; !m->dim_warned && t < m->conf->num_tables; t++) {
        uint32_t id;
        hps_table_info_t ti;
        if (hps_shmdb_table_find(cl->db, m->conf->name, m->conf->embedding_table_names[t], &id) !=
                0 ||
            hps_shmdb_table_info(cl->db, id, &ti) < 0 ||
            (ti.dim == m->dims[t] && ti.key_bytes == cl->key_bytes))
            continue;
        HPS_ERROR("model %s table %s: the segment holds dimension %u with %u-byte keys, this "
                  "process serves dimension %u with %u-byte keys %s",
                  m->conf->name, m->conf->embedding_table_names[t], ti.dim, ti.key_bytes,
                  m->dims[t], cl->key_bytes, hps__client_misfit_why(cl));
        m->dim_warned = true;
    }
}

/* Find every configured table in the segment (the coordinator creates them
 * while loading, so this may take a few rounds).  Entries of one name (a
 * model whose tables a reload changed, client.c: learn_from) are tried
 * newest first: the first whose every table fits is resolved, the others
 * not; a name none fits but whose tables are there with another shape is a
 * misfit (its newest entry fails lookups with the reason).  True when every
 * name is resolved. */
static bool resolve(hps_client_t *cl)
{
    size_t n = cl->num_models;
    cl->resolved_models = n;
    uint8_t state[HPS_CONF_MAX_MODELS]; /* per entry: 0 fits, 1 missing, 2 other shape */
    for (size_t i = 0; i < n; i++) {
        client_model_t *m = &cl->models[i];
        /* the whole shape (a table added too), then each table's id */
        state[i] = (uint8_t)hps__client_shape_state(cl->db, m->conf, cl->key_bytes);
        for (size_t t = 0; state[i] == 0 && t < m->conf->num_tables; t++)
            if (hps_shmdb_table_find(cl->db, m->conf->name, m->conf->embedding_table_names[t],
                                     &m->vdb_ids[t]) != 0)
                state[i] = 1;
    }
    bool all = true;
    for (size_t i = n; i-- > 0;) {
        client_model_t *m = &cl->models[i];
        bool newest = true, taken = false; /* a later entry of the name; one that fits */
        for (size_t j = i + 1; j < n; j++)
            if (strcmp(cl->models[j].conf->name, m->conf->name) == 0) {
                newest = false;
                taken |= state[j] == 0;
            }
        bool ok = state[i] == 0 && !taken, any = ok || taken;
        for (size_t j = 0; j < i && !any; j++)
            any = state[j] == 0 && strcmp(cl->models[j].conf->name, m->conf->name) == 0;
        atomic_store(&m->misfit, newest && !any && state[i] == 2);
        if (atomic_load(&m->misfit))
            log_misfit(cl, m);
        atomic_store(&m->resolved, ok);
        if (!ok && any && m->ctr_version) {
            /* another shape serves: if this one comes back, its counters
             * start at 0 (as the front end's do) */
            counters_reset(&m->ctr);
            m->ctr_version = 0;
        }
        if (ok) {
            atomic_store(&m->served, true);
            uint32_t v = version_in(cl->db, m);
            if (m->ctr_version && v != m->ctr_version) /* from 0: the new version's counters */
                counters_reset(&m->ctr);
            m->ctr_version = v;
        }
        if (newest)
            all &= any;
    }
    return all;
}

/* The segment was searched while its coordinator served (settled): the
 * models not in it are unloaded, and their counters start again at 0 for
 * their next load (Triton's statistics go with an unloaded model).  Under
 * seg_lock (write), as resolve(). */
static void forget_unloaded(hps_client_t *cl)
{
    for (size_t i = 0; i < cl->num_models; i++) {
        client_model_t *m = &cl->models[i];
        if (!atomic_load(&m->resolved) && !atomic_load(&m->misfit) && m->ctr_version) {
            counters_reset(&m->ctr);
            m->ctr_version = 0;
        }
    }
}

/* The segment was searched while its coordinator served (settled): name
 * the models of this process that are not in it, once per segment, in
 * model control mode none (where its INI and the coordinator's differ, or
 * a SIGHUP is pending; in explicit mode, models not loaded are the rule). */
static void log_not_loaded(hps_client_t *cl)
{
    if (cl->conf->hps.model_control_mode == HPS_CONF_MODEL_CONTROL_EXPLICIT)
        return;
    for (size_t i = 0; i < cl->num_models; i++)
        if (!atomic_load(&cl->models[i].resolved) && !atomic_load(&cl->models[i].misfit) &&
            hps__client_model_current(cl, i) == i)
            HPS_INFO("model %s: not in /dev/shm/hps.%s, whose coordinator serves: not loaded "
                     "(requests for it are answered as for an unknown model)",
                     cl->models[i].conf->name, cl->conf->volatile_db.shared_memory_name);
}

/* Whether db's coordinator is alive and serving: its tables are complete. */
static bool coordinator_serves(const hps_client_t *cl, hps_shmdb_t *db)
{
    hps_segment_info_t si;
    return hps_shmdb_coordinator_alive(db, (uint32_t)cl->conf->hps.worker_timeout_ms, true) &&
           hps_shmdb_segment_info(db, &si) == 0 && si.coord_state == HPS_COORD_SERVING;
}

/* Whether a model name has no entry that fits the segment (attach.c:
 * resolve marks its newest entry). */
static bool any_misfit(const hps_client_t *cl)
{
    for (size_t i = 0; i < cl->num_models; i++)
        if (atomic_load(&cl->models[i].misfit))
            return true;
    return false;
}

/* Resolve again in the same segment: entries were appended since the last
 * resolve (a model's new shape, shape.c; or one an HTTP thread learnt from
 * the INI while resolve() ran). */
static void resolve_again(hps_client_t *cl)
{
    hps__client_seg_write_lock(cl);
    atomic_store(&cl->resolved, resolve(cl));
    hps__client_gpu_resolved(cl);
    hps__client_seg_write_unlock(cl);
}

/* Attach if not attached, or if the object was replaced; under the write lock. */
static void reattach(hps_client_t *cl)
{
    dev_t dev = 0;
    ino_t ino = 0;
    bool exists = hps__client_object_id(cl, &dev, &ino);
    if (cl->db && exists && dev == cl->seg_dev && ino == cl->seg_ino)
        return;
    if (!exists && !cl->db) {
        cl->attach_err = 0; /* gone: "no segment yet" is the news */
        return;
    }
    hps_shmdb_t *fresh = NULL;
    hps_shmdb_proc_opts_t po = {.num_threads = (unsigned)cl->conf->volatile_db.num_threads,
                                .role = HPS_ROLE_WORKER,
                                .device = cl->device,
                                .caps = HPS_PROC_CAP_FOLLOWS_SHAPES | HPS_PROC_CAP_FOLLOWS_ORDER};
    uint64_t now = hps__client_now_ns();
    if (now < cl->attach_retry_ns && dev == cl->attach_fail_dev && ino == cl->attach_fail_ino)
        return; /* the object that refused us: not before its back-off */
    hps_err_t rc =
        exists ? hps_shmdb_attach(cl->conf->volatile_db.shared_memory_name, &po, &fresh) : 0;
    if (rc < 0) {
        fresh = NULL;
        if (rc != cl->attach_err || now - cl->attach_logged_ns >= ATTACH_RELOG_NS) {
            log_attach_error(cl, rc);
            cl->attach_logged_ns = now;
        }
        cl->attach_err = rc;
        cl->attach_fail_dev = dev;
        cl->attach_fail_ino = ino;
        cl->attach_backoff_ns =
            cl->attach_backoff_ns ? cl->attach_backoff_ns * 2 : MAINT_PERIOD_MS * 1000000ull;
        if (cl->attach_backoff_ns > 1000000000ull)
            cl->attach_backoff_ns = 1000000000ull;
        cl->attach_retry_ns = now + cl->attach_backoff_ns;
    } else if (fresh) {
        cl->attach_err = 0;
        cl->attach_backoff_ns = cl->attach_retry_ns = 0;
    }
    if (!fresh && !cl->db)
        return;
    if (fresh && cl->db) /* a coordinator published it: models may have been added to the INI */
        hps_client_refresh_models(cl, NULL);
    bool looked = fresh && coordinator_serves(cl, fresh);
    if (looked) /* a reload may have changed a model's tables */
        hps__client_follow_shapes(cl, fresh);
    hps__client_seg_write_lock(cl);
    hps_shmdb_t *old = cl->db;
    if (fresh) {
        cl->db = fresh;
        cl->shapes_looked = looked;
        cl->seg_dev = dev;
        cl->seg_ino = ino;
        for (size_t i = 0; i < cl->num_models; i++)
            cl->models[i].dim_warned = false;
        /* Resolved in the same step: a published segment holds every
         * table, and a request between the switch and a later round would
         * find none (the table defaults for keys in shared memory). */
        atomic_store(&cl->resolved, resolve(cl));
        atomic_store(&cl->settled, hps_shmdb_coordinator_alive(
                                       fresh, (uint32_t)cl->conf->hps.worker_timeout_ms, true));
        if (atomic_load(&cl->settled) && !atomic_load(&cl->resolved)) {
            forget_unloaded(cl);
            log_not_loaded(cl);
        }
        if (old)
            hps__client_gpu_switched(cl); /* cached rows may be another version's */
    }
    hps__client_seg_write_unlock(cl);
    if (old && fresh) {
        HPS_INFO("a coordinator published a new segment (a start, a reload or a model "
                 "control request); re-attached");
        hps_shmdb_detach(old);
    } else if (fresh) {
        HPS_INFO("attached /dev/shm/hps.%s", cl->conf->volatile_db.shared_memory_name);
    }
}

static void maint_round(hps_client_t *cl)
{
    reattach(cl);
    if (!cl->db) {
        if (!cl->logged_no_segment && cl->attach_err == 0) /* else it exists: logged why */
            HPS_WARN("no segment /dev/shm/hps.%s yet: waiting for an hps-coordinator with "
                     "[volatile_db] shared_memory_name = %s; lookups are refused until it "
                     "serves",
                     cl->conf->volatile_db.shared_memory_name,
                     cl->conf->volatile_db.shared_memory_name);
        cl->logged_no_segment = true;
        return;
    }
    bool alive =
        hps_shmdb_coordinator_alive(cl->db, (uint32_t)cl->conf->hps.worker_timeout_ms, true);
    /* Tables appear while a coordinator loads into this segment; once it
     * serves, those still missing are not loaded (until the next switch). */
    if (!atomic_load(&cl->resolved) && !atomic_load(&cl->settled)) {
        hps__client_seg_write_lock(cl);
        bool all = resolve(cl);
        if (!all && alive)
            forget_unloaded(cl);
        hps__client_seg_write_unlock(cl);
        if (all) {
            atomic_store(&cl->resolved, true);
            HPS_INFO("all tables of %zu model%s found in the volatile DB", cl->num_models,
                     cl->num_models == 1 ? "" : "s");
        } else if (alive) {
            atomic_store(&cl->settled, true);
            log_not_loaded(cl);
        }
    }
    /* A misfit while the coordinator serves: the segment may hold a shape
     * this process can take from it (a client that attached while the
     * coordinator was still loading, or whose INI differs). */
    if (!cl->shapes_looked && any_misfit(cl) && coordinator_serves(cl, cl->db)) {
        hps__client_follow_shapes(cl, cl->db);
        cl->shapes_looked = true; /* once per segment: it parses the coordinator's INI */
    }
    if (cl->num_models != cl->resolved_models &&
        (atomic_load(&cl->resolved) || atomic_load(&cl->settled)))
        resolve_again(cl);
    hps_shmdb_proc_heartbeat(cl->db);
    hps_segment_info_t si;
    hps_shmdb_segment_info(cl->db, &si);
    atomic_store(&cl->misses_served, alive && hps__client_state_answers(si.coord_state));
    atomic_store(&cl->coord_alive, alive);
    bool ready = alive && hps__client_models_known(cl);
    if (ready != cl->logged_ready)
        hps_log(ready ? HPS_LOG_INFO : HPS_LOG_WARN, "%s",
                ready ? "coordinator serving and tables found: ready"
                      : "coordinator gone or loading: degraded (volatile DB and defaults "
                        "only), not ready; is an hps-coordinator of this INI's "
                        "shared_memory_name running? (hps-shm info names the last one)");
    cl->logged_ready = ready;
}

static void *maint_loop(void *arg)
{
    hps_client_t *cl = arg;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = MAINT_PERIOD_MS * 1000000L};
    while (!atomic_load(&cl->stop)) {
        maint_round(cl);
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int hps__client_maint_start(hps_client_t *cl)
{
    maint_round(cl); /* attach at once when the segment exists */
    if (pthread_create(&cl->maint, NULL, maint_loop, cl) != 0)
        return HPS_EIO;
    cl->maint_started = true;
    return 0;
}

void hps__client_maint_stop(hps_client_t *cl)
{
    if (cl->maint_started)
        pthread_join(cl->maint, NULL);
    cl->maint_started = false;
}
