/*
 * client.c -- libhps's public API (include/hps/client.h): open and close a
 * client, describe its models and tables, and the lookup entry points,
 * which check their arguments, bring keys and rows between the caller's
 * memory spaces and the paths, and try the GPU caches before the fetch
 * path (fetch.c).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hps/log.h"
#include "internal.h"

/* ---- errors ---------------------------------------------------------------- */

static __thread char last_error[512];
/* hps_client_last_version(): set by lookup_checked (this thread only) */
static __thread uint32_t last_version;

hps_err_t hps__client_fail(hps_err_t rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
    return rc;
}

const char *hps_client_last_error(void)
{
    return last_error;
}

uint32_t hps_client_last_version(void)
{
    return last_version;
}

/* ---- fork --------------------------------------------------------------------- */

/* Set in every child forked after a client was opened (pthread_atfork),
 * never cleared: lookups then compare pids, since a client belongs to the
 * process that opened it.  A forked child is in no row of the segment's
 * process table, so the coordinator's reaper frees its miss-queue slots
 * as those of a dead process and its misses got their defaults without a
 * word (about one call a second in an audit). */
static atomic_bool g_forked;
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void)
{
    atomic_store_explicit(&g_forked, true, memory_order_relaxed);
}

static void atfork_init(void)
{
    pthread_atfork(NULL, NULL, on_fork_child);
}

/* HPS_EINVAL, with the message, when the calling process is a child forked
 * from the process that opened cl; else 0.  One relaxed load unless this
 * process was forked. */
static hps_err_t check_process(const hps_client_t *cl)
{
    if (!atomic_load_explicit(&g_forked, memory_order_relaxed) || cl->pid == getpid())
        return 0;
    return hps__client_fail(HPS_EINVAL,
                            "this client was opened by process %d, of which this one is a "
                            "forked child: a child must open a client of its own (its misses "
                            "would get default values: the coordinator answers the processes "
                            "of the segment's table only)",
                            (int)cl->pid);
}

/* ---- open, close ------------------------------------------------------------ */

/* Entry i of the models, from configuration section c (not yet visible). */
static int model_init(hps_client_t *cl, size_t i, const hps_conf_model_t *c)
{
    client_model_t *m = &cl->models[i];
    m->conf = c;
    m->dims = calloc(c->num_tables, sizeof(uint32_t));
    m->defaults = calloc(c->num_tables, sizeof(float));
    m->vdb_ids = calloc(c->num_tables, sizeof(uint32_t));
    m->tpath = calloc(c->num_tables, sizeof(client_pathsel_t));
    if (!m->dims || !m->defaults || !m->vdb_ids || !m->tpath)
        return -ENOMEM;
    for (size_t t = 0; t < c->num_tables; t++) {
        m->dims[t] = (uint32_t)c->embedding_vecsize_per_table[t];
        m->defaults[t] = (float)c->default_value_for_each_table[t];
    }
    return 0;
}

static int init_models(hps_client_t *cl)
{
    pthread_mutex_init(&cl->models_lock, NULL);
    cl->models = calloc(HPS_CONF_MAX_MODELS, sizeof(client_model_t));
    if (!cl->models)
        return -ENOMEM;
    if (!cl->conf->source || stat(cl->conf->source, &cl->conf_stat) != 0)
        memset(&cl->conf_stat, 0, sizeof(cl->conf_stat)); /* a string: nothing to read again */
    size_t n =
        cl->conf->num_models < HPS_CONF_MAX_MODELS ? cl->conf->num_models : HPS_CONF_MAX_MODELS;
    for (size_t i = 0; i < n; i++) {
        int rc = model_init(cl, i, &cl->conf->models[i]);
        atomic_store_explicit(&cl->num_models, i + 1, memory_order_release); /* freed by close */
        if (rc < 0)
            return rc;
    }
    return 0;
}

static void free_models(hps_client_t *cl)
{
    for (size_t i = 0; cl->models && i < cl->num_models; i++) {
        free(cl->models[i].dims);
        free(cl->models[i].defaults);
        free(cl->models[i].vdb_ids);
        free(cl->models[i].tpath);
    }
    free(cl->models);
    for (size_t i = 0; i < cl->num_learned; i++)
        hps_conf_free(cl->learned[i]);
    free(cl->learned);
    if (cl->models)
        pthread_mutex_destroy(&cl->models_lock);
}

/* Whether the client has an entry of section c's name. */
static bool known_model(const hps_client_t *cl, const char *name)
{
    for (size_t i = 0; i < cl->num_models; i++)
        if (strcmp(cl->models[i].conf->name, name) == 0)
            return true;
    return false;
}

hps_err_t hps__client_append_model(hps_client_t *cl, const hps_conf_model_t *c)
{
    size_t n = cl->num_models;
    if (n >= HPS_CONF_MAX_MODELS) {
        HPS_ERROR("model %s: this process has %d model entries (models, and new shapes of "
                  "them that reloads brought) already, the most it can: it is not served "
                  "until the process starts again",
                  c->name, HPS_CONF_MAX_MODELS);
        return HPS_EFULL;
    }
    if (model_init(cl, n, c) < 0)
        return -ENOMEM;
    atomic_store_explicit(&cl->num_models, n + 1, memory_order_release);
    hps__client_gpu_learned(cl, n);
    return 0;
}

/* Append conf's models the client does not know (under models_lock);
 * true when conf is to be kept (a model of it was appended).  A known
 * model keeps its entries: a new shape of it is taken from the segment
 * (shape.c), as the coordinator built it. */
static bool learn_from(hps_client_t *cl, hps_conf_t *conf, size_t *added, hps_err_t *rc)
{
    if ((conf->hps.supportlonglong ? 8u : 4u) != cl->key_bytes) {
        HPS_WARN("%s: supportlonglong changed since this process read it: its new models are "
                 "not served until the process starts again",
                 conf->source);
        return false;
    }
    for (size_t j = 0; j < conf->num_models; j++) {
        const hps_conf_model_t *c = &conf->models[j];
        if (known_model(cl, c->name))
            continue;
        hps_err_t e = hps__client_append_model(cl, c);
        if (e < 0) {
            *rc = e;
            break;
        }
        ++*added;
        HPS_INFO("model %s: added to %s since this process read it: served once a coordinator "
                 "loads it",
                 c->name, conf->source);
    }
    return *added > 0;
}

bool hps__client_keep_conf(hps_client_t *cl, hps_conf_t *conf)
{
    hps_conf_t **grown = realloc(cl->learned, (cl->num_learned + 1) * sizeof(*grown));
    if (!grown)
        return false;
    cl->learned = grown;
    cl->learned[cl->num_learned++] = conf;
    return true;
}

hps_err_t hps_client_refresh_models(hps_client_t *cl, size_t *ret_added)
{
    size_t added = 0;
    hps_err_t rc = 0;
    if (ret_added)
        *ret_added = 0;
    if (!cl)
        return hps__client_fail(HPS_EINVAL, "refresh models: NULL client");
    pthread_mutex_lock(&cl->models_lock);
    struct stat st;
    const struct stat *was = &cl->conf_stat;
    bool changed =
        was->st_ino && cl->conf->source && stat(cl->conf->source, &st) == 0 &&
        (st.st_ino != was->st_ino || st.st_dev != was->st_dev || st.st_size != was->st_size ||
         st.st_mtim.tv_sec != was->st_mtim.tv_sec || st.st_mtim.tv_nsec != was->st_mtim.tv_nsec);
    if (changed) {
        hps_conf_t *conf = NULL;
        char err[512];
        if (hps_conf_load(cl->conf->source, &conf, err, sizeof(err)) < 0) {
            HPS_WARN("reading %s again for added models: %s", cl->conf->source, err);
            /* read again at the next change */
            rc = hps__client_fail(HPS_ECONFIG, "reading %s again for added models: %s",
                                  cl->conf->source, err);
        } else if (!learn_from(cl, conf, &added, &rc)) {
            hps_conf_free(conf);
        } else if (!hps__client_keep_conf(cl, conf)) {
            rc = -ENOMEM; /* the entries point into conf: kept, leaked */
        }
        if (rc != -ENOMEM)
            cl->conf_stat = st; /* read: not again until it changes */
    }
    pthread_mutex_unlock(&cl->models_lock);
    if (ret_added)
        *ret_added = added;
    return rc;
}

const hps_conf_model_t *hps_client_model_conf(const hps_client_t *cl, size_t mi)
{
    return cl && mi < cl->num_models ? cl->models[mi].conf : NULL;
}

/* HugeCTR's shared_memory_auto_remove: the last one out removes the
 * segment (only when no coordinator serves it any more), counting the
 * other clients of this process too (their mapping would outlive the name,
 * but no process started later would find the segment).  Only while the
 * name is still that segment's: a client left on a segment a coordinator
 * has since replaced removed the serving one (every process started
 * later found no segment).  The maintenance thread has stopped: seg_dev
 * and seg_ino are still. */
static void release_segment(hps_client_t *cl)
{
    if (!cl->db)
        return;
    dev_t dev = 0;
    ino_t ino = 0;
    bool last = cl->conf->volatile_db.shared_memory_auto_remove &&
                hps_shmdb_other_rows(cl->db) == 0 && hps__client_object_id(cl, &dev, &ino) &&
                dev == cl->seg_dev && ino == cl->seg_ino;
    hps_shmdb_detach(cl->db);
    cl->db = NULL;
    if (last && hps_shmdb_unlink(cl->conf->volatile_db.shared_memory_name) == 0)
        HPS_INFO("removed /dev/shm/hps.%s: last one out (shared_memory_auto_remove)",
                 cl->conf->volatile_db.shared_memory_name);
}

hps_err_t hps_client_open_conf(const hps_conf_t *conf, const hps_client_options_t *o,
                               hps_client_t **ret)
{
    hps_client_options_t def = {0};
    if (!o)
        o = &def;
    if (!conf || !ret || o->device < -1)
        return hps__client_fail(HPS_EINVAL, "hps_client_open: %s",
                                !conf || !ret ? "NULL argument" : "device must be -1 or >= 0");
    hps_client_t *cl = calloc(1, sizeof(*cl));
    if (!cl)
        return hps__client_fail(-ENOMEM, "hps_client_open: out of memory");
    cl->conf = conf;
    /* the INI's level, unless the program chose one (hps-worker does) */
    hps_log_default_level(conf->hps.log_level);
    cl->device = o->device;
    cl->gpu_device = o->device >= 0 && hps__client_gpu_exists(o->device) ? o->device : -1;
    if (o->device >= 0 && cl->gpu_device < 0)
        HPS_WARN("device %d: %s: the client is host-only (device memory is refused; models "
                 "with gpucache = true are served from the CPU path)",
                 o->device,
                 HPS_HAVE_CUDA ? "no such CUDA device"
                               : "this build has no CUDA (meson "
                                 "-Dcuda=enabled)");
    cl->instance = o->instance;
    pthread_once(&g_atfork_once, atfork_init);
    cl->pid = getpid();
    cl->max_concurrent = o->max_concurrent
                             ? o->max_concurrent
                             : (unsigned)(conf->worker.http_threads + conf->worker.lookup_threads);
    cl->key_bytes = conf->hps.supportlonglong ? 8 : 4;
    /* Readers first (glibc's default, said here: nested read locks must not
     * wait for a waiting writer); writers get their turn from the lookups'
     * gate instead (hps__client_seg_lookup_lock). */
    pthread_rwlockattr_t rwa;
    pthread_rwlockattr_init(&rwa);
    pthread_rwlockattr_setkind_np(&rwa, PTHREAD_RWLOCK_PREFER_READER_NP);
    pthread_rwlock_init(&cl->seg_lock, &rwa);
    pthread_rwlockattr_destroy(&rwa);
    pthread_mutex_init(&cl->seg_wait_mu, NULL);
    pthread_condattr_t ca; /* timed waits on CLOCK_MONOTONIC (hps__client_now_ns) */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&cl->seg_wait_cv, &ca);
    pthread_condattr_destroy(&ca);
    int rc = init_models(cl);
    if (rc == 0)
        rc = hps__client_maint_start(cl);
    if (rc == 0 && cl->gpu_device >= 0)
        rc = hps__client_gpu_start(cl);
    if (rc < 0) {
        hps__client_fail(rc, "hps_client_open: %s", hps_strerror(rc));
        hps_client_close(cl);
        return rc;
    }
    *ret = cl;
    return 0;
}

hps_err_t hps_client_open(const char *config_file, int device, hps_client_t **ret, char *err,
                          size_t err_len)
{
    char msg[1024] = "";
    hps_conf_t *conf = NULL;
    hps_err_t rc = HPS_EINVAL;
    if (!config_file || !ret)
        snprintf(msg, sizeof(msg), "hps_client_open: NULL argument");
    else if ((rc = hps_conf_load(config_file, &conf, msg, sizeof(msg))) == 0) {
        hps_client_options_t o = {.device = device};
        rc = hps_client_open_conf(conf, &o, ret);
        if (rc == 0)
            (*ret)->own_conf = conf;
        else {
            snprintf(msg, sizeof(msg), "%s", hps_client_last_error());
            hps_conf_free(conf);
        }
    } else if (!msg[0]) {
        snprintf(msg, sizeof(msg), "%s: %s", config_file, hps_strerror(rc));
    }
    if (rc < 0) {
        hps__client_fail(rc, "%s", msg);
        if (err && err_len)
            snprintf(err, err_len, "%s", msg);
    }
    return rc;
}

void hps_client_close(hps_client_t *cl)
{
    if (!cl)
        return;
    atomic_store(&cl->stop, true);
    if (cl->pid == getpid()) { /* a forked child has none of its parent's threads to join */
        hps__client_gpu_stop(cl);
        hps__client_maint_stop(cl);
    }
    release_segment(cl);
    free_models(cl);
    pthread_rwlock_destroy(&cl->seg_lock);
    pthread_cond_destroy(&cl->seg_wait_cv);
    pthread_mutex_destroy(&cl->seg_wait_mu);
    hps_conf_free(cl->own_conf);
    free(cl);
}

bool hps_client_coordinator_alive(hps_client_t *cl)
{
    return atomic_load(&cl->coord_alive);
}

bool hps_client_ready(hps_client_t *cl)
{
    return hps__client_attached(cl) && hps__client_models_known(cl) &&
           atomic_load(&cl->coord_alive) && hps__client_gpu_ready(cl);
}

hps_err_t hps_client_wait_ready(hps_client_t *cl, uint32_t timeout_ms)
{
    uint64_t end = hps__client_now_ns() + (uint64_t)timeout_ms * 1000000ULL;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 5000000L};
    while (!hps_client_ready(cl)) {
        if (atomic_load(&cl->cancel))
            return hps__client_fail(HPS_ETIMEDOUT, "wait for ready cancelled: the client closes");
        if (hps__client_now_ns() >= end)
            return hps__client_fail(HPS_ETIMEDOUT,
                                    "not ready after %u ms (segment %s, coordinator %s)",
                                    timeout_ms, hps__client_attached(cl) ? "attached" : "not found",
                                    atomic_load(&cl->coord_alive) ? "serving" : "not serving");
        nanosleep(&ts, NULL);
    }
    return 0;
}

void hps_client_cancel_waits(hps_client_t *cl)
{
    if (cl)
        atomic_store(&cl->cancel, true);
}

int hps_client_device(const hps_client_t *cl)
{
    return cl->device;
}

int hps_client_gpu_device(const hps_client_t *cl)
{
    return cl->gpu_device;
}

/* ---- models and tables ------------------------------------------------------ */

size_t hps_client_num_models(const hps_client_t *cl)
{
    return cl->num_models;
}

size_t hps__client_model_current(const hps_client_t *cl, size_t mi)
{
    if (atomic_load(&cl->models[mi].resolved))
        return mi; /* the request path: one entry per name is resolved */
    size_t cur = mi, n = cl->num_models;
    const char *name = cl->models[mi].conf->name;
    for (size_t i = 0; i < n; i++)
        if (strcmp(cl->models[i].conf->name, name) == 0) {
            if (atomic_load(&cl->models[i].resolved))
                return i;
            cur = i; /* the newest entry of the name */
        }
    return cur;
}

hps_err_t hps_client_model_find(const hps_client_t *cl, const char *name, size_t *ret)
{
    for (size_t i = 0; name && i < cl->num_models; i++)
        if (strcmp(cl->models[i].conf->name, name) == 0) {
            *ret = hps__client_model_current(cl, i);
            return 0;
        }
    char known[256] = "";
    for (size_t i = 0, o = 0; i < cl->num_models && o < sizeof(known); i++)
        if (hps__client_model_current(cl, i) == i)
            o += (size_t)snprintf(known + o, sizeof(known) - o, "%s%s", o ? ", " : "",
                                  cl->models[i].conf->name);
    return hps__client_fail(HPS_ENOTFOUND, "unknown model '%s' (models: %s)", name ? name : "",
                            known);
}

static hps_err_t check_model(const hps_client_t *cl, size_t model)
{
    if (model < cl->num_models)
        return 0;
    return hps__client_fail(HPS_EINVAL, "model index %zu out of range (%zu models)", model,
                            cl->num_models);
}

hps_err_t hps_client_table_find(const hps_client_t *cl, size_t model, const char *name,
                                uint32_t *ret)
{
    hps_err_t rc = check_model(cl, model);
    if (rc < 0)
        return rc;
    const hps_conf_model_t *mc = cl->models[model].conf;
    for (size_t t = 0; name && t < mc->num_tables; t++)
        if (strcmp(mc->embedding_table_names[t], name) == 0) {
            *ret = (uint32_t)t;
            return 0;
        }
    return hps__client_fail(HPS_ENOTFOUND, "model %s has no table '%s'", mc->name,
                            name ? name : "");
}

hps_err_t hps_client_model_info(const hps_client_t *cl, size_t model, hps_client_model_info_t *ret)
{
    hps_err_t rc = check_model(cl, model);
    if (rc < 0)
        return rc;
    const hps_conf_model_t *mc = cl->models[model].conf;
    *ret = (hps_client_model_info_t){.name = mc->name,
                                     .num_tables = (uint32_t)mc->num_tables,
                                     .max_batch_size = (uint32_t)mc->max_batch_size,
                                     .key_bytes = cl->key_bytes,
                                     .gpu_cache = hps__client_gpu_serves(cl, model)};
    return 0;
}

static hps_err_t check_table(const hps_client_t *cl, size_t model, uint32_t table)
{
    hps_err_t rc = check_model(cl, model);
    if (rc == 0 && table >= cl->models[model].conf->num_tables)
        rc = hps__client_fail(HPS_EINVAL, "model %s: table index %u out of range (%zu tables)",
                              cl->models[model].conf->name, table,
                              cl->models[model].conf->num_tables);
    return rc;
}

hps_err_t hps_client_table_info(hps_client_t *cl, size_t model, uint32_t table,
                                hps_client_table_info_t *ret)
{
    hps_err_t rc = check_table(cl, model, table);
    if (rc < 0)
        return rc;
    client_model_t *m = &cl->models[model];
    *ret = (hps_client_table_info_t){
        .name = m->conf->embedding_table_names[table],
        .dim = m->dims[table],
        .key_bytes = cl->key_bytes,
        .max_keys_per_sample =
            (uint32_t)m->conf->maxnum_catfeature_query_per_table_per_sample[table],
        .default_value = m->defaults[table],
        .storage_type = m->conf->storage_type};
    /* Attached: the segment's type, which lookups decode and the GPU caches
     * store, also where this process's INI says another. */
    hps_table_info_t ti;
    pthread_rwlock_rdlock(&cl->seg_lock);
    if (cl->db && m->resolved && hps_shmdb_table_info(cl->db, m->vdb_ids[table], &ti) == 0) {
        ret->rows = ti.rows;
        ret->storage_type = ti.storage_type;
    }
    pthread_rwlock_unlock(&cl->seg_lock);
    return 0;
}

/* ---- lookups ------------------------------------------------------------------ */

/* A buffer location is the host or the client's own, usable device. */
static hps_err_t check_loc(const hps_client_t *cl, int loc, const char *what)
{
    if (loc == HPS_HOST)
        return 0;
    if (loc >= 0 && loc == cl->gpu_device)
        return 0;
    if (cl->gpu_device < 0)
        return hps__client_fail(HPS_EINVAL,
                                "%s in device memory (device %d), but the client is "
                                "host-only",
                                what, loc);
    return hps__client_fail(HPS_EINVAL, "%s on device %d, but the client is on device %d", what,
                            loc, cl->device);
}

/* The fetch path for every table of a call: host keys, host rows. */
static int fetch_all(hps_client_t *cl, client_model_t *m, uint32_t nt, const int32_t *numkeys,
                     const int64_t *keys, float *out, bool nowait)
{
    client_fetch_t stack[16], *f = nt <= 16 ? stack : calloc(nt, sizeof(*f));
    if (!f)
        return -ENOMEM;
    size_t nf = 0, ko = 0, fo = 0;
    for (uint32_t t = 0; t < nt; t++) {
        size_t n = (size_t)numkeys[t];
        if (n)
            f[nf++] = (client_fetch_t){.table = t, .n = n, .keys = keys + ko, .rows = out + fo};
        ko += n;
        fo += n * m->dims[t];
    }
    int rc = hps__client_fetch(cl, m, f, nf, true, nowait);
    if (f != stack)
        free(f);
    return rc;
}

/* Host-side buffers of a call whose keys or rows are elsewhere. */
struct staging {
    int64_t *keys; /* (N) host int64 keys */
    void *raw;     /* (N) keys copied from the device before widening */
    float *out;    /* host rows of a device output (fetch path) */
};

static void staging_free(struct staging *s)
{
    free(s->keys);
    free(s->raw);
    free(s->out);
}

/* Host int64 keys of the call: the caller's, widened, or copied back. */
static int host_keys(hps_client_t *cl, const void *keys, hps_key_type_t kt, int loc, size_t nk,
                     void *stream, struct staging *s, const int64_t **ret)
{
    if (kt == HPS_KEY_INT64 && loc == HPS_HOST) {
        *ret = keys;
        return 0;
    }
    size_t w = kt == HPS_KEY_INT64 ? 8 : 4;
    const void *src = keys;
    if (loc != HPS_HOST) {
        if (!(s->raw = malloc(nk * w + 1)))
            return -ENOMEM;
        int rc = hps__client_gpu_copy(cl, s->raw, keys, nk * w, false, stream);
        if (rc < 0)
            return rc;
        src = s->raw;
    }
    if (kt == HPS_KEY_INT64) {
        *ret = src;
        return 0;
    }
    if (!(s->keys = malloc(nk * sizeof(int64_t) + 1)))
        return -ENOMEM;
    /* A 32-bit model's keys are uint32 (HugeCTR's TensorRT plugin passes
     * them as INT32): zero-extended; a 64-bit model's are sign-extended. */
    for (size_t i = 0; i < nk; i++)
        s->keys[i] = cl->key_bytes == 4 ? (int64_t)(uint32_t)((const int32_t *)src)[i]
                                        : (int64_t)((const int32_t *)src)[i];
    *ret = s->keys;
    return 0;
}

/* The lookup under seg_lock; ps decides the path (hps__client_pathsel).
 * *ret_path: 1 or 0 when keys and output are
 * in host memory of a GPU-served model and the GPU path (1) or the fetch
 * path (0) answered, a choice of pathsel.c; -1 otherwise. */
static int lookup_locked(hps_client_t *cl, client_model_t *m, size_t mi, uint32_t nt,
                         const int32_t *numkeys, const void *keys, hps_key_type_t kt, int keys_loc,
                         float *out, int out_loc, void *stream, size_t nk, size_t nfloats,
                         bool nowait, client_pathsel_t *ps, int *ret_path)
{
    struct staging s = {0};
    const int64_t *hk = NULL;
    int rc = 0;
    /* int64 keys on the device go to the cache as they are; int32 ones are
     * widened on the host first. */
    const int64_t *dk = keys_loc != HPS_HOST && kt == HPS_KEY_INT64 ? keys : NULL;
    if (!dk)
        rc = host_keys(cl, keys, kt, keys_loc, nk, stream, &s, &hk);
    /* Host keys and output on a GPU-served model: either path may answer
     * (pathsel.c); the caller times the call for the choice of the next. */
    bool host = keys_loc == HPS_HOST && out_loc == HPS_HOST && hps__client_gpu_serves(cl, mi);
    bool gpu = cl->gpu && (!host || hps__client_path_gpu(cl, ps, nk));
    *ret_path = host ? gpu : -1;
    if (rc == 0 && gpu) {
        rc = hps__client_gpu_lookup(cl, mi, nt, numkeys, hk, dk, out_loc == HPS_HOST ? out : NULL,
                                    out_loc == HPS_HOST ? NULL : out, stream, nowait);
        if (rc <= 0)
            goto out;
        rc = 0;
        host = false; /* the GPU does not serve the model after all: not a path choice */
        *ret_path = -1;
    }
    /* The fetch path: host keys and host rows. */
    if (rc == 0 && !hk)
        rc = host_keys(cl, keys, kt, keys_loc, nk, stream, &s, &hk);
    float *ho = out;
    if (rc == 0 && out_loc != HPS_HOST)
        ho = s.out = malloc(nfloats * sizeof(float) + 1);
    if (rc == 0 && !ho)
        rc = -ENOMEM;
    if (rc == 0)
        rc = fetch_all(cl, m, nt, numkeys, hk, ho, nowait);
    if (rc == 0 && host)
        hps__client_gpu_note(cl, mi, nt, numkeys, hk);
    if (rc == 0 && out_loc != HPS_HOST)
        rc = hps__client_gpu_copy(cl, out, ho, nfloats * sizeof(float), true, stream);
out:
    staging_free(&s);
    return rc;
}

hps_err_t hps_client_lookup(hps_client_t *cl, size_t mi, uint32_t nt, const int32_t *numkeys,
                            const void *keys, hps_key_type_t kt, int keys_loc, float *out,
                            int out_loc, void *stream)
{
    return hps_client_lookup_ex(cl, mi, nt, numkeys, keys, kt, keys_loc, out, out_loc, stream, 0);
}

/*
 * The arguments of a lookup call, checked (each error with its message):
 * *ret_nk keys and *ret_nfloats output values.  keys and out are checked
 * only when the call has keys (a call of none may pass NULL).
 */
static hps_err_t check_call(hps_client_t *cl, size_t mi, uint32_t nt, const int32_t *numkeys,
                            const void *keys, hps_key_type_t kt, int keys_loc, const void *out,
                            int out_loc, size_t *ret_nk, size_t *ret_nfloats)
{
    hps_err_t rc = check_model(cl, mi);
    if (rc == 0)
        rc = check_process(cl);
    if (rc < 0)
        return rc;
    client_model_t *m = &cl->models[mi];
    if (nt == 0 || nt > m->conf->num_tables || !numkeys)
        return hps__client_fail(HPS_EINVAL, "model %s: %u tables given, it has %zu", m->conf->name,
                                nt, m->conf->num_tables);
    if (kt != HPS_KEY_INT64 && kt != HPS_KEY_INT32)
        return hps__client_fail(HPS_EINVAL, "key type %d: must be int64 or int32", (int)kt);
    size_t nk = 0, nfloats = 0;
    for (uint32_t t = 0; t < nt; t++) {
        if (numkeys[t] < 0)
            return hps__client_fail(HPS_EINVAL, "numkeys[%u] = %d: must be >= 0", t, numkeys[t]);
        nk += (size_t)numkeys[t];
        nfloats += (size_t)numkeys[t] * m->dims[t];
    }
    if (nk > UINT32_MAX - 1)
        return hps__client_fail(HPS_EINVAL, "%zu keys in one call: at most %u", nk, UINT32_MAX - 1);
    if ((rc = check_loc(cl, keys_loc, "keys")) < 0 || (rc = check_loc(cl, out_loc, "output")) < 0)
        return rc;
    if (nk && (!keys || !out))
        return hps__client_fail(HPS_EINVAL, "NULL %s", keys ? "output" : "keys");
    *ret_nk = nk;
    *ret_nfloats = nfloats;
    return 0;
}

const char *hps__client_misfit_why(hps_client_t *cl)
{
    return atomic_load(&cl->no_conf_text)
               ? "(its coordinator, of an earlier build, records no INI text to take the new "
                 "shape from): not served until this process starts again with an INI of the "
                 "new shape, or the coordinator is upgraded"
               : "(this process's INI has another shape of it than the coordinator's): not "
                 "served until the INIs agree";
}

void hps__client_seg_write_lock(hps_client_t *cl)
{
    atomic_fetch_add(&cl->seg_writers, 1); /* lookups arriving from now on wait */
    pthread_rwlock_wrlock(&cl->seg_lock);
}

void hps__client_seg_write_unlock(hps_client_t *cl)
{
    pthread_rwlock_unlock(&cl->seg_lock);
    pthread_mutex_lock(&cl->seg_wait_mu);
    if (atomic_fetch_sub(&cl->seg_writers, 1) == 1)
        pthread_cond_broadcast(&cl->seg_wait_cv);
    pthread_mutex_unlock(&cl->seg_wait_mu);
}

/* Longest a lookup waits for a writer that waits for seg_lock (below). */
#define SEG_GATE_MAX_NS 5000000ull

bool hps__client_seg_lookup_lock(hps_client_t *cl, bool nowait)
{
    if (atomic_load_explicit(&cl->seg_writers, memory_order_relaxed) > 0) {
        if (nowait)
            return false;
        /* The writer waits for the lookups that hold the lock: a few
         * microseconds each, or the time their misses take.  One held
         * longer (misses a stalled coordinator leaves unanswered until
         * miss_timeout_ms; the GPU thread building caches) must not stop
         * the lookups of keys in shared memory: past SEG_GATE_MAX_NS they
         * go on as before the gate, and the switch waits for it. */
        struct timespec dl;
        uint64_t ns = hps__client_now_ns() + SEG_GATE_MAX_NS;
        dl.tv_sec = (time_t)(ns / 1000000000u);
        dl.tv_nsec = (long)(ns % 1000000000u);
        pthread_mutex_lock(&cl->seg_wait_mu);
        while (atomic_load(&cl->seg_writers) > 0 &&
               pthread_cond_timedwait(&cl->seg_wait_cv, &cl->seg_wait_mu, &dl) != ETIMEDOUT)
            ;
        pthread_mutex_unlock(&cl->seg_wait_mu);
    }
    pthread_rwlock_rdlock(&cl->seg_lock);
    return true;
}

/* A lookup whose arguments check_call accepted (nk > 0 keys, nfloats
 * output values), timed from t0 and counted. */
static hps_err_t lookup_checked(hps_client_t *cl, size_t mi, uint32_t nt, const int32_t *numkeys,
                                const void *keys, hps_key_type_t kt, int keys_loc, float *out,
                                int out_loc, void *stream, unsigned flags, size_t nk,
                                size_t nfloats, uint64_t t0)
{
    hps_err_t rc;
    client_model_t *m = &cl->models[mi];
    if (!hps__client_seg_lookup_lock(cl, (flags & HPS_LOOKUP_NOWAIT) != 0))
        return HPS_EAGAIN; /* a segment switch waits for the lock: a thread that may wait */
    if (atomic_load(&m->misfit)) {
        pthread_rwlock_unlock(&cl->seg_lock);
        return hps__client_fail(HPS_ENOTFOUND,
                                "model %s: the segment holds it with other dimensions or key "
                                "width (%u-byte keys here: [hps] supportlonglong) than this "
                                "process serves %s",
                                m->conf->name, cl->key_bytes, hps__client_misfit_why(cl));
    }
    size_t cur = atomic_load(&m->resolved) ? mi : hps__client_model_current(cl, mi);
    if (cur != mi && atomic_load(&cl->models[cur].resolved)) {
        pthread_rwlock_unlock(&cl->seg_lock); /* a reload changed the model's tables */
        return hps__client_fail(HPS_EMISMATCH,
                                "model %s: a reload changed its tables, and index %zu no longer "
                                "serves it: index %zu does (find the model again with "
                                "hps_client_model_find, and size the output by its dimensions)",
                                m->conf->name, mi, cur);
    }
    if (!atomic_load(&m->resolved) && cl->db && hps__client_models_known(cl)) {
        pthread_rwlock_unlock(&cl->seg_lock); /* unloaded, or never loaded */
        return hps__client_fail(HPS_ENOTFOUND, "model %s is not loaded", m->conf->name);
    }
    if (!atomic_load(&m->served)) { /* defaults for every key would pass for an answer */
        hps_err_t refused =
            cl->db ? 0 : atomic_load_explicit(&cl->attach_err, memory_order_relaxed);
        pthread_rwlock_unlock(&cl->seg_lock);
        if (refused == HPS_EFULL)
            return hps__client_fail(HPS_EFULL,
                                    "model %s is not served here: /dev/shm/hps.%s refused this "
                                    "process, its process table is full (%d processes at most, "
                                    "every client, worker, tool and the coordinator included; "
                                    "close clients this process does not need: one per device "
                                    "serves every thread)",
                                    m->conf->name, cl->conf->volatile_db.shared_memory_name,
                                    HPS_SHMDB_MAX_PROCS);
        if (refused)
            return hps__client_fail(HPS_EBUSY,
                                    "model %s is not served here: /dev/shm/hps.%s refused this "
                                    "process: %s (hps-worker's log says more); trying again",
                                    m->conf->name, cl->conf->volatile_db.shared_memory_name,
                                    hps_strerror(refused));
        return hps__client_fail(HPS_EBUSY,
                                "model %s is not ready: its tables were not found in "
                                "/dev/shm/hps.%s yet (is an hps-coordinator serving it there?)",
                                m->conf->name, cl->conf->volatile_db.shared_memory_name);
    }
    int path = -1;
    /* only a client with GPU caches chooses a path (lookup_locked) */
    client_pathsel_t *ps = cl->gpu ? hps__client_pathsel(m, nt, numkeys) : NULL;
    rc = lookup_locked(cl, m, mi, nt, numkeys, keys, kt, keys_loc, out, out_loc, stream, nk,
                       nfloats, (flags & HPS_LOOKUP_NOWAIT) != 0, ps, &path);
    /* the segment the rows came from is still the one resolve() read it in */
    if (rc == 0 && atomic_load(&m->resolved))
        last_version = m->ctr_version;
    pthread_rwlock_unlock(&cl->seg_lock);
    uint64_t ns = hps__client_now_ns() - t0;
    if (rc == 0 && path >= 0)
        hps__client_path_record(m, ps, nk, path == 1, ns);
    if (rc == HPS_EAGAIN)
        return hps__client_fail(rc, "model %s: the lookup would wait", m->conf->name);
    if (rc < 0 && !strstr(last_error, hps_strerror(rc)))
        hps__client_fail(rc, "lookup in model %s failed: %s", m->conf->name, hps_strerror(rc));
    atomic_fetch_add_explicit(&m->ctr.lookup_keys, nk, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->ctr.lookup_calls, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->ctr.lookup_ns, ns, memory_order_relaxed);
    return rc;
}

hps_err_t hps_client_lookup_ex(hps_client_t *cl, size_t mi, uint32_t nt, const int32_t *numkeys,
                               const void *keys, hps_key_type_t kt, int keys_loc, float *out,
                               int out_loc, void *stream, unsigned flags)
{
    last_version = 0; /* until lookup_checked answers */
    uint64_t t0 = hps__client_now_ns();
    size_t nk = 0, nfloats = 0;
    if (flags & ~(unsigned)HPS_LOOKUP_NOWAIT)
        return hps__client_fail(HPS_EINVAL, "lookup flags 0x%x: unknown bits 0x%x", flags,
                                flags & ~(unsigned)HPS_LOOKUP_NOWAIT);
    hps_err_t rc = check_call(cl, mi, nt, numkeys, keys, kt, keys_loc, out, out_loc, &nk, &nfloats);
    if (rc < 0 || nk == 0)
        return rc;
    return lookup_checked(cl, mi, nt, numkeys, keys, kt, keys_loc, out, out_loc, stream, flags, nk,
                          nfloats, t0);
}

hps_err_t hps_client_lookup_typed(hps_client_t *cl, size_t mi, uint32_t nt, const int32_t *numkeys,
                                  const void *keys, hps_key_type_t kt, int keys_loc, void *out,
                                  hps_dtype_t out_type, int out_loc, void *stream, unsigned flags)
{
    last_version = 0; /* until lookup_checked answers */
    if (out_type == HPS_DTYPE_FP32)
        return hps_client_lookup_ex(cl, mi, nt, numkeys, keys, kt, keys_loc, out, out_loc, stream,
                                    flags);
    if (out_type != HPS_DTYPE_FP16 && out_type != HPS_DTYPE_BF16)
        return hps__client_fail(HPS_EINVAL, "output type %d: must be fp32, fp16 or bf16",
                                (int)out_type);
    size_t nk = 0, nfloats = 0;
    hps_err_t rc = check_call(cl, mi, nt, numkeys, keys, kt, keys_loc, out, out_loc, &nk, &nfloats);
    if (rc < 0 || nk == 0)
        return rc;
    /* the fp32 answer first, then converted: host rows row by row with
     * hps_dtype_encode, device rows by one kernel on the caller's stream */
    float *tmp = NULL;
    if (out_loc == HPS_HOST)
        rc = (tmp = malloc(nfloats * sizeof(float))) ? 0 : -ENOMEM;
    else
        rc = hps__client_gpu_scratch(cl, nfloats * sizeof(float), stream, (void **)&tmp);
    if (rc == 0)
        rc = lookup_checked(cl, mi, nt, numkeys, keys, kt, keys_loc, tmp, out_loc, stream, flags,
                            nk, nfloats, hps__client_now_ns());
    if (rc == 0 && out_loc != HPS_HOST)
        rc = hps__client_gpu_convert(cl, tmp, out, nfloats, out_type, stream);
    size_t fo = 0;
    for (uint32_t t = 0; rc == 0 && out_loc == HPS_HOST && t < nt; t++) {
        uint32_t dim = cl->models[mi].dims[t];
        rc = hps_dtype_encode(out_type, dim, (size_t)numkeys[t], tmp + fo, (uint16_t *)out + fo);
        fo += (size_t)numkeys[t] * dim;
    }
    if (out_loc == HPS_HOST)
        free(tmp);
    else
        hps__client_gpu_scratch_free(cl, tmp, stream);
    if (rc < 0)
        last_version = 0;
    if (rc < 0 && rc != HPS_EAGAIN && !strstr(last_error, hps_strerror(rc)))
        hps__client_fail(rc, "typed lookup in model %s failed: %s", cl->models[mi].conf->name,
                         hps_strerror(rc));
    return rc;
}

hps_err_t hps_client_lookup_table(hps_client_t *cl, size_t mi, uint32_t table, size_t n,
                                  const void *keys, hps_key_type_t kt, int keys_loc, float *out,
                                  int out_loc, void *stream)
{
    last_version = 0; /* until lookup_checked answers */
    hps_err_t rc = check_table(cl, mi, table);
    if (rc < 0)
        return rc;
    if (n > INT32_MAX)
        return hps__client_fail(HPS_EINVAL, "%zu keys in one call: at most %d", n, INT32_MAX);
    int32_t numkeys[HPS_CONF_MAX_TABLES] = {0};
    numkeys[table] = (int32_t)n;
    return hps_client_lookup(cl, mi, table + 1, numkeys, keys, kt, keys_loc, out, out_loc, stream);
}

/* ---- counters ------------------------------------------------------------------ */

hps_err_t hps_client_counters(const hps_client_t *cl, size_t mi, hps_client_counters_t *ret)
{
    hps_err_t rc = check_model(cl, mi);
    if (rc < 0)
        return rc;
    const client_counters_t *k = &cl->models[mi].ctr;
    *ret = (hps_client_counters_t){.lookup_keys = atomic_load(&k->lookup_keys),
                                   .vdb_hits = atomic_load(&k->vdb_hits),
                                   .lower_hits = atomic_load(&k->lower_hits),
                                   .default_keys = atomic_load(&k->default_keys),
                                   .miss_busy = atomic_load(&k->miss_busy),
                                   .miss_timeout = atomic_load(&k->miss_timeout),
                                   .lookup_ns = atomic_load(&k->lookup_ns),
                                   .lookup_calls = atomic_load(&k->lookup_calls),
                                   .gpu_path_calls = atomic_load(&k->gpu_path),
                                   .cpu_path_calls = atomic_load(&k->cpu_path)};
    return 0;
}

hps_err_t hps_client_cache_stats(hps_client_t *cl, size_t mi, uint32_t t,
                                 hps_client_cache_stats_t *ret)
{
    hps_err_t rc = check_table(cl, mi, t);
    if (rc == 0 && (rc = hps__client_gpu_cache_stats(cl, mi, t, ret)) < 0)
        hps__client_fail(rc, "model %s table %u: no GPU cache in this process (%s)",
                         cl->models[mi].conf->name, t, hps_strerror(rc));
    return rc;
}

hps_err_t hps_client_model_version(hps_client_t *cl, size_t mi, uint32_t *ret)
{
    if (!cl || !ret || mi >= cl->num_models)
        return hps__client_fail(HPS_EINVAL, "model version: bad argument (model %zu)", mi);
    hps_table_info_t ti;
    pthread_rwlock_rdlock(&cl->seg_lock);
    hps_err_t rc = cl->db && cl->models[mi].resolved
                       ? hps_shmdb_table_info(cl->db, cl->models[mi].vdb_ids[0], &ti)
                       : HPS_ENOTFOUND;
    pthread_rwlock_unlock(&cl->seg_lock);
    if (rc < 0)
        return hps__client_fail(rc, "model version: model %s is not loaded",
                                cl->models[mi].conf->name);
    *ret = ti.model_version ? ti.model_version : 1; /* 0: a segment of an older build */
    return 0;
}

hps_err_t hps_client_gpu_stats(const hps_client_t *cl, hps_client_gpu_stats_t *ret)
{
    hps_err_t rc = hps__client_gpu_stats(cl, ret);
    if (rc < 0)
        hps__client_fail(rc, "no GPU caches in this process");
    return rc;
}

_Static_assert(HPS_CLIENT_UPDATE_LAYERS == HPS_SHMDB_UPDATE_LAYERS, "update layers differ");
_Static_assert(HPS_CLIENT_UPDATE_REASONS == HPS_SHMDB_UPDATE_REASONS, "update reasons differ");

hps_err_t hps_client_update_stats(hps_client_t *cl, uint32_t layer, hps_client_update_stats_t *ret)
{
    if (!cl || !ret || layer >= HPS_SHMDB_UPDATE_LAYERS)
        return hps__client_fail(HPS_EINVAL, "update statistics: bad argument (layer %u of %d)",
                                layer, HPS_SHMDB_UPDATE_LAYERS);
    hps_update_stats_t s;
    pthread_rwlock_rdlock(&cl->seg_lock);
    bool attached = cl->db != NULL;
    hps_err_t rc = attached ? hps_shmdb_update_stats_get(cl->db, layer, &s) : HPS_ENOTFOUND;
    pthread_rwlock_unlock(&cl->seg_lock);
    if (rc < 0)
        return hps__client_fail(rc, "update statistics of the %s layer: %s",
                                hps_shmdb_update_layer_name(layer),
                                attached ? "none published" : "not attached");
    /* Field by field: the segment's struct (include/hps/shmdb_stats.h, not
     * installed) may grow without changing the installed one. */
    *ret = (hps_client_update_stats_t){.messages = s.messages,
                                       .received = s.received,
                                       .nonfinite = s.nonfinite,
                                       .applied = s.applied,
                                       .beacons = s.beacons,
                                       .errors = s.errors,
                                       .lag = s.lag,
                                       .newest_applied_ms = s.newest_applied_ms,
                                       .published_ms = s.published_ms,
                                       .offset_resets = s.offset_resets};
    memcpy(ret->skipped, s.skipped, sizeof(ret->skipped));
    return 0;
}

hps_err_t hps_client_ddb_stats(hps_client_t *cl, hps_client_ddb_stats_t *ret)
{
    if (!cl || !ret)
        return hps__client_fail(HPS_EINVAL, "distributed DB statistics: bad argument");
    hps_shmdb_ddb_stats_t s;
    pthread_rwlock_rdlock(&cl->seg_lock);
    bool attached = cl->db != NULL;
    hps_err_t rc = attached ? hps_shmdb_ddb_stats_get(cl->db, &s) : HPS_ENOTFOUND;
    pthread_rwlock_unlock(&cl->seg_lock);
    if (rc < 0)
        return hps__client_fail(rc, "distributed DB statistics: %s",
                                attached ? "none published" : "not attached");
    *ret = (hps_client_ddb_stats_t){.lookup_keys = s.lookup_keys,
                                    .hit_keys = s.lookup_hits,
                                    .insert_rows = s.insert_rows,
                                    .evicted_rows = s.evicted_rows,
                                    .errors = s.errors,
                                    .touches_dropped = s.touches_dropped,
                                    .bad_values = s.bad_values,
                                    .published_ms = s.published_ms};
    return 0;
}

hps_err_t hps_client_host_register(hps_client_t *cl, void *buf, size_t bytes)
{
    hps_err_t rc = hps__client_gpu_pin(cl, buf, bytes);
    if (rc < 0)
        hps__client_fail(rc, "cannot page-lock %zu bytes: %s", bytes,
                         rc == HPS_EUNSUPPORTED ? "no GPU caches in this process"
                                                : "CUDA refused (cudaHostRegister)");
    return rc;
}

void hps_client_host_unregister(hps_client_t *cl, void *buf, size_t bytes)
{
    hps__client_gpu_unpin(cl, buf, bytes);
}
