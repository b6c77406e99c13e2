/*
 * internal.h -- libhps's private state (include/hps/client.h is the public
 * face): the attached segment, the models a client serves, the fetch path
 * below the GPU cache, and their counters.  Internal functions of libhps
 * carry the prefix hps__client_.
 */
#ifndef HPS_LIBHPS_INTERNAL_H
#define HPS_LIBHPS_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "hps/client.h"
#include "hps/conf.h"
#include "hps/shmdb.h"

/* Per-model counters (hps_client_counters_t); relaxed atomics, any thread. */
typedef struct client_counters {
    _Atomic uint64_t lookup_keys;  /* keys looked up */
    _Atomic uint64_t vdb_hits;     /* found in the volatile DB (shared memory) */
    _Atomic uint64_t lower_hits;   /* found below it, through the coordinator */
    _Atomic uint64_t default_keys; /* answered with the table's default value */
    _Atomic uint64_t miss_busy;    /* miss-queue requests refused (queue full) */
    _Atomic uint64_t miss_timeout; /* miss-queue requests past miss_timeout_ms */
    _Atomic uint64_t lookup_ns;    /* time in the lookup path */
    _Atomic uint64_t lookup_calls; /* lookup calls */
    _Atomic uint64_t gpu_path;     /* host lookups the GPU path answered (pathsel.c) */
    _Atomic uint64_t cpu_path;     /* host lookups of a GPU model the fetch path answered */
} client_counters_t;

/* [worker] lookup_path = auto (pathsel.c): per bucket of call sizes
 * (floor(log2(keys))), each path's estimated time per call, ns[b][1] the
 * GPU path's and ns[b][0] the fetch path's (0: not measured yet), the
 * samples behind each, and the calls that chose in the bucket.  One per
 * model for calls over several tables, one per table for calls whose keys
 * are all of one table.  Relaxed atomics, any thread: a race only blurs an
 * estimate. */
#define CLIENT_PATH_BUCKETS 33
typedef struct client_pathsel {
    _Atomic uint64_t ns[CLIENT_PATH_BUCKETS][2];
    _Atomic uint32_t samples[CLIENT_PATH_BUCKETS][2];
    _Atomic uint32_t calls[CLIENT_PATH_BUCKETS];
} client_pathsel_t;

typedef struct client_model {
    const hps_conf_model_t *conf;
    uint32_t *dims;        /* (T), immutable after open */
    float *defaults;       /* (T), immutable after open */
    uint32_t *vdb_ids;     /* (T) table ids in the segment; written under seg_lock (write) */
    _Atomic bool resolved; /* every table found in the segment; written under seg_lock (write) */
    /* Resolved at least once (Triton lists never-loaded models by name):
     * set, never cleared, under seg_lock (write) by resolve(); read
     * lock-free by any thread. */
    _Atomic bool served;
    /* The segment holds the model with other dimensions or key width than
     * this client serves (its INI changed): lookups fail instead of answering
     * defaults.  Written under seg_lock (write), with resolved. */
    _Atomic bool misfit;
    bool dim_warned; /* the misfit was logged for this segment (maintenance thread) */
    client_counters_t ctr;
    /* The model version ctr counts (0: none yet, or unloaded since): a
     * segment that answers the model from another version resets ctr
     * (Triton's per-version statistics), and so does an unload
     * (forget_unloaded), so that the next load counts from 0.  Written under
     * seg_lock (write), by resolve() and forget_unloaded(). */
    uint32_t ctr_version;
    client_pathsel_t path;   /* calls with keys of several tables */
    client_pathsel_t *tpath; /* (T) calls with keys of table t only; immutable pointer */
} client_model_t;

/* Fields marked "immutable" are set by hps_client_open_conf before the
 * client is returned (and before its threads start) and only read after. */
struct hps_client {
    const hps_conf_t *conf; /* immutable (borrowed, or own_conf) */
    hps_conf_t *own_conf;   /* loaded by hps_client_open(), freed by close; else NULL; immutable */
    int device;             /* CUDA device asked for, or -1: host only; immutable */
    int gpu_device;         /* device if it exists in a CUDA build, else -1; immutable */
    int instance;           /* immutable */
    pid_t pid; /* the process that opened the client (a forked child is not it); immutable */
    unsigned max_concurrent; /* immutable */
    uint32_t key_bytes;      /* 8 (supportlonglong) or 4; immutable */
    /* The segment; swapped by the maintenance thread when a new coordinator
     * recreates it.  Lookups hold seg_lock for reading, the swap and table
     * resolution for writing. */
    pthread_rwlock_t seg_lock;
    /* glibc's rwlock lets readers in while a writer waits: with lookups
     * overlapping on more threads than cores, a switch to a new segment
     * waited forever (an in-process client kept answering from the old
     * version).  Writers count themselves here first (seg_write_lock); a
     * lookup entering waits on seg_wait_cv while any writer waits or
     * writes (seg_lookup_lock), at most 5 ms (a reader that holds seg_lock
     * long, a lookup whose misses a stalled coordinator leaves unanswered or
     * the GPU thread building caches, must not stop every lookup); an
     * HPS_LOOKUP_NOWAIT one does not wait (an event loop).  Nested read locks (already holding
     * seg_lock) do not wait, so no reader deadlocks on a waiting writer. seg_writers: atomic;
     * changed to 0 under seg_wait_mu. */
    _Atomic int seg_writers;
    pthread_mutex_t seg_wait_mu;
    pthread_cond_t seg_wait_cv;
    hps_shmdb_t *db; /* seg_lock */
    dev_t seg_dev;   /* maintenance thread only */
    ino_t seg_ino;   /* maintenance thread only */
    /* What the maintenance thread last logged: ready (or degraded), and
     * that no segment exists yet.  Maintenance thread only (and
     * hps__client_maint_start before it starts the thread). */
    bool logged_ready;
    bool logged_no_segment;
    /* A segment that exists but refused this process (e.g. HPS_EFULL: its
     * process table is full): the error last logged (attach_err: written
     * by the maintenance thread, read by any thread too: a lookup that
     * finds no segment attached says why), and when to try again
     * (CLOCK_MONOTONIC ns; the wait doubles up to 1 s), and when it was
     * logged (repeated each minute while it lasts); the object that refused
     * (another one, newly published, is tried at once).  Maintenance thread
     * only but attach_err. */
    _Atomic hps_err_t attach_err;
    dev_t attach_fail_dev;
    ino_t attach_fail_ino;
    uint64_t attach_logged_ns;
    uint64_t attach_retry_ns;
    uint64_t attach_backoff_ns;
    /* The coordinator's heartbeat is fresh: maintenance thread writes
     * (attach.c, each round), any thread reads. */
    _Atomic bool coord_alive;
    /* The coordinator answers the miss queue (SERVING or RELOADING_SERVED):
     * misses are asked for; maintenance thread writes, any thread reads; a
     * lookup that finds it false looks at the segment itself, at most once
     * a millisecond (served_checked_ns, CLOCK_MONOTONIC), and sets it when
     * a coordinator answers again (fetch.c: misses_served). */
    _Atomic bool misses_served;
    _Atomic uint64_t served_checked_ns;
    _Atomic bool resolved; /* every model's tables found */
    /* num_models when resolve() last ran: entries appended since are
     * resolved in the next maintenance round.  Maintenance thread only
     * (resolve() runs there, and in hps__client_maint_start before it). */
    size_t resolved_models;
    /* hps__client_follow_shapes ran on this segment (a misfit then looks
     * no more); cleared by a switch.  Maintenance thread only. */
    bool shapes_looked;
    /* The segment records no coordinator INI text (a coordinator of a build
     * before it): a misfit model's new shape cannot be taken from it, and
     * its errors say so.  Maintenance thread writes, any thread reads. */
    _Atomic bool no_conf_text;
    /* The segment was searched while its coordinator served: the models not
     * found in it are not loaded (explicit model control unloaded them, or
     * a SIGHUP reload removed them from the coordinator's INI, or they were
     * added to this process's INI and no coordinator loaded them); cleared
     * by a switch.  Maintenance thread writes, any thread reads. */
    _Atomic bool settled;
    /* The models: HPS_CONF_MAX_MODELS entries, never moved; [0, num_models)
     * in use.  An entry is written once, under models_lock, before
     * num_models (atomic, release) makes it visible; never removed. */
    client_model_t *models;
    _Atomic size_t num_models;
    pthread_mutex_t models_lock;
    /* hps_client_refresh_models: the INIs read again that hold learned
     * models' sections (freed by close), and the identity of the file last
     * read (inode, size, mtime).  models_lock. */
    hps_conf_t **learned;
    size_t num_learned;
    struct stat conf_stat;
    /* The maintenance thread: set by hps__client_maint_start (open), read
     * and cleared by hps__client_maint_stop (close, after stop is set). */
    pthread_t maint;
    bool maint_started;
    _Atomic bool stop;      /* set by hps_client_close() */
    _Atomic bool cancel;    /* set by hps_client_cancel_waits(): waits return at once */
    struct client_gpu *gpu; /* GPU mode (gpu.h); NULL for host-only work */
};

/* Whether a coordinator in state st answers the miss queue (misses_served:
 * attach.c's maintenance round, fetch.c's look in between). */
static inline bool hps__client_state_answers(hps_coord_state_t st)
{
    return st == HPS_COORD_SERVING || st == HPS_COORD_RELOADING_SERVED;
}

/* ---- fetch.c: below the GPU cache ----------------------------------------- */

/** One table's part of a fetch (hps__client_fetch). */
typedef struct client_fetch {
    uint32_t table;         /* table index in the model */
    size_t n;               /* keys */
    const int64_t *keys;    /* (n) host */
    float *rows;            /* (n, dim) host: every row written (found or default) */
    uint8_t *found;         /* (n) host: 1 = found in a layer; NULL = not wanted */
    const uint32_t *weight; /* (n) request positions per key, for the counters; NULL = 1 each */
} client_fetch_t;

/**
 * Rows of the keys of several tables of model m: the volatile DB, then ONE
 * miss-queue round trip to the coordinator for every table's misses,
 * bounded by one [worker] miss_timeout_ms deadline, then the default value.
 * count: add the outcome to m's counters (request path); false for
 * background work.  Needs seg_lock held for reading.  0 or -ENOMEM (rows
 * then hold defaults).
 */
int hps__client_fetch(hps_client_t *cl, client_model_t *m, client_fetch_t *f, size_t nf, bool count,
                      bool nowait);

/** out[0 .. n*dim) = v. */
void hps__client_fill(float *out, size_t n, uint32_t dim, float v);

/**
 * The path estimates that decide a call of model m over tables 0 .. nt-1
 * with numkeys (T) keys each: table t's own (m->tpath[t]) when only t has
 * keys, else the model's (m->path).  Any thread.
 */
client_pathsel_t *hps__client_pathsel(client_model_t *m, uint32_t nt, const int32_t *numkeys);

/**
 * Whether a lookup of nk >= 1 keys whose keys and output are in host memory,
 * decided by estimates ps (hps__client_pathsel), takes the GPU path
 * ([worker] lookup_path: gpu, cpu, or auto: the path measured faster for
 * calls of its size, pathsel.c).  Any thread.
 */
bool hps__client_path_gpu(const hps_client_t *cl, client_pathsel_t *ps, size_t nk);

/** Such a lookup of nk keys of model m took ns on the path gpu says: added
 *  to ps's mean for its size and to m's path counters.  Any thread. */
void hps__client_path_record(client_model_t *m, client_pathsel_t *ps, size_t nk, bool gpu,
                             uint64_t ns);

/** CLOCK_MONOTONIC in ns. */
uint64_t hps__client_now_ns(void);

/** Record the calling thread's error message (hps_client_last_error); returns rc. */
hps_err_t hps__client_fail(hps_err_t rc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/** The device and inode of /dev/shm/hps.<shared_memory_name> now; false
 *  when there is none. */
bool hps__client_object_id(const hps_client_t *cl, dev_t *dev, ino_t *ino);

/** Take seg_lock for writing, ahead of the lookups that arrive meanwhile
 *  (cl->seg_writers).  Release with hps__client_seg_write_unlock. */
void hps__client_seg_write_lock(hps_client_t *cl);
void hps__client_seg_write_unlock(hps_client_t *cl);
/** Take seg_lock for reading as a lookup entering the library does: after
 *  any writer that waits, for at most 5 ms (never while
 *  the caller holds seg_lock).  nowait: false at once, the lock not taken,
 *  while a writer waits (HPS_LOOKUP_NOWAIT answers HPS_EAGAIN). */
bool hps__client_seg_lookup_lock(hps_client_t *cl, bool nowait);

/** Whether a segment is attached (cl->db, read under seg_lock: the
 *  maintenance thread attaches and switches). */
static inline bool hps__client_attached(hps_client_t *cl)
{
    pthread_rwlock_rdlock(&cl->seg_lock);
    bool attached = cl->db != NULL;
    pthread_rwlock_unlock(&cl->seg_lock);
    return attached;
}

/** The models of the segment are known: every one found, or the segment
 *  searched while its coordinator served (in either model control mode: the
 *  coordinator's INI, not this process's, says which models serve). */
static inline bool hps__client_models_known(const hps_client_t *cl)
{
    return atomic_load(&((hps_client_t *)cl)->resolved) ||
           atomic_load(&((hps_client_t *)cl)->settled);
}

/**
 * The entry that serves model mi's name now: a reload that changed the
 * model's tables has the client append an entry of the new shape
 * (client.c: learn_from), and resolve() serves whichever entry of the name
 * fits the segment.  The resolved entry of the name, else its newest.
 * Any thread (lock-free reads; a switch may move it right after).
 */
size_t hps__client_model_current(const hps_client_t *cl, size_t mi);

/**
 * Append entry num_models for section c (borrowed: c's configuration must
 * outlive the client, hps__client_keep_conf) and publish it; its GPU
 * caches, if any, are built once a segment holds it.  Under models_lock.
 * 0; HPS_EFULL (HPS_CONF_MAX_MODELS entries: logged); -ENOMEM.
 */
hps_err_t hps__client_append_model(hps_client_t *cl, const hps_conf_model_t *c);

/** Keep conf (whose sections entries borrow) until close.  Under
 *  models_lock.  false: out of memory (conf is then the caller's). */
bool hps__client_keep_conf(hps_client_t *cl, hps_conf_t *conf);

/* ---- shape.c: a model whose tables a reload changed --------------------------- */

/**
 * How section c's tables are in db: 0 every one with c's dimension and
 * key_bytes (bytes per key) at its position, 1 one is missing, 2 one has
 * another dimension, key width or position (hps_table_info_t.order, where
 * recorded).  Any thread that may read db.
 */
int hps__client_shape_state(hps_shmdb_t *db, const hps_conf_model_t *c, uint32_t key_bytes);

/**
 * For each model name the client knows that db holds but no entry of
 * which fits db (a reload changed the model's tables): append the section
 * the coordinator recorded in db (hps_shmdb_conf_text) when it fits.
 * Returns the entries appended.  Call with a segment whose coordinator
 * serves (its tables complete), before resolving in it; maintenance
 * thread.  Takes models_lock.
 */
size_t hps__client_follow_shapes(hps_client_t *cl, hps_shmdb_t *db);

/**
 * Why a model whose tables the segment holds in another shape (a misfit)
 * is not served, for its messages: the segment's coordinator records no
 * INI text (an earlier build: restart the process), or this process's INI
 * disagrees with the coordinator's.  A static string; any thread.
 * (client.c)
 */
const char *hps__client_misfit_why(hps_client_t *cl);

/* ---- attach.c: the maintenance thread -------------------------------------- */

/** Attach now if the segment exists, then start the thread.  0 or HPS_EIO. */
int hps__client_maint_start(hps_client_t *cl);
/** Join the thread (cl->stop set first). */
void hps__client_maint_stop(hps_client_t *cl);

#include "gpu.h" /* GPU mode: hps__client_gpu_* (inline no-ops without CUDA) */

#endif
