/*
 * gpu_internal.h -- the GPU cache manager's private types, shared by its
 * files, one concern each:
 *   gpu_ctx.c      CUDA helpers and lookup contexts (stream, buffers, workspaces)
 *   gpu_lookup.c   the lookup path and the misses (sync insert or background)
 *   gpu_refresh.c  update logs (Kafka updates) and the periodic refresh
 *   gpu_build.c    creation, preload, the GPU thread, start and stop
 *   gpu_share.c    sharing through the segment's registry
 *   gpu_stats.c    statistics (hps_client_cache_stats)
 */
#ifndef HPS_LIBHPS_GPU_INTERNAL_H
#define HPS_LIBHPS_GPU_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "gshare.h"
#include "hps/gcache.h"
#include "hps/shmdb_gcache.h"
#include "internal.h"
#include "keyset.h"

#define PRELOAD_BATCH  16384        /* rows per preload insert */
#define QUEUE_SLOTS    256          /* background insert jobs */
#define WS_MIN_KEYS    4096         /* smallest workspace */
#define UPD_BATCH      4096         /* update-log keys per read / refresh batch */
#define UPD_POLL_NS    10000000L    /* update-log poll period */
#define UPD_MAX_READS  64           /* log batches per table per poll */
#define REG_PERIOD_NS  1000000000LL /* registry upkeep: deaths, refresher, counters */
#define REPAIR_WAIT_MS 50           /* a set locked this long belongs to a dead writer */
#define JOIN_FETCH_MS  2000         /* one descriptor request */
#define GRAPH_SLOTS    4            /* captured one-launch lookups per context */

/** A pinned host buffer and its device twin (sized apart). */
typedef struct pair {
    void *h;
    void *d;
    size_t hcap, dcap; /* bytes */
} pair_t;

/**
 * A one-launch lookup (H2D request, lookup kernel, D2H result) captured as a
 * CUDA graph, for one request shape and one set of buffers: replayed by one
 * cudaGraphLaunch instead of three API calls.
 */
typedef struct graph {
    cudaGraphExec_t exec; /* NULL: an empty slot, or (in want) a shape not captured yet */
    const void *set;      /* the model's hps_gcache_set_t */
    uint64_t gen;         /* the model's gen at capture (a rebuilt set may reuse the address) */
    size_t nkeys, nfloats;
    void *h, *d; /* c->keys at capture */
} graph_t;

/** One lookup context: owned by one request at a time. */
typedef struct gctx {
    cudaStream_t stream;
    hps_gcache_ws_t **ws; /* [nslots] */
    uint64_t *ws_cap;     /* [nslots] keys */
    size_t nslots;        /* ws, ws_cap, ks: grown under the client_gpu's mu (ctx_slots) */
    pair_t keys, out, midx, mcount, ikeys, ivals;
    pair_t ienc;        /* hps__client_write_staged: ivals' rows encoded (compact types) */
    pair_t srows, soff; /* misses of a device-output lookup: rows and destinations */
    pair_t hkeys;       /* host copy of device-memory keys, when misses need them */
    pair_t miss;        /* misses split on the device (kernels/miss.h): head, records */
    pair_t meta;        /* per-table lookups with device output: the tables' request head */
    size_t miss_spec;   /* records copied back with the head (0: MISS_SPEC_MIN) */
    int64_t *mkeys;     /* [mkeys_cap] host scratch: one table's missed keys */
    size_t mkeys_cap;
    cudaStream_t istream; /* synchronous inserts, off the answer path */
    bool ipending;        /* istream holds inserts not synchronized yet (ikeys, ivals busy) */
    cudaEvent_t ev;       /* marks the caller's stream: the context's work follows it */
    keyset_t *ks;         /* [nslots] distinct missed keys of each table of a call */
    uint32_t *pick;       /* [pick_cap] the distinct keys inserted */
    size_t pick_cap;
    graph_t graphs[GRAPH_SLOTS];
    graph_t want;        /* the last shape seen once: captured when it comes again */
    unsigned graph_next; /* the slot replaced next */
    bool graph_off;      /* a capture failed: this context launches the plain way */
    struct gctx *next;
} gctx_t;

_Static_assert(GSHARE_MAX_PARTS == HPS_GCACHE_MAX_PARTS, "a cache's descriptors fit an offer");
_Static_assert(HPS_SHMDB_GCACHE_SHARDS == HPS_GCACHE_MAX_SHARDS,
               "a registry entry lists every shard");

/** A table's cache. */
typedef struct gtable {
    hps_gcache_t *cache;
    uint32_t dim;
    hps_dtype_t dtype; /* storage type of its rows: the model's storage_type */
    /* Sharing (registry entry reg of generation gen): the cache's VMM
     * descriptors, fds[0..num_fds) (num_fds 0 when private); sharded: its
     * memory spans the devices of shards (gpu_cache_placement = shard). */
    int fds[GSHARE_MAX_PARTS];
    uint32_t num_fds;
    bool sharded;
    hps_gcache_shards_t shards;
    uint32_t reg;
    uint64_t gen;
    /* This process follows the update log for everyone.  Written by the
     * GPU thread (and before the table is published, by its builder); read
     * by any thread (hps_client_cache_stats): atomic. */
    _Atomic bool refresher;
    /* The rest: the GPU thread's only (refresh, sharing, publishing). */
    bool timer_active; /* a periodic refresh is under way, at set timer_pos */
    uint64_t timer_pos;
    uint64_t repaired;               /* sets unlocked after dead writers */
    bool has_log;                    /* following the table's update log */
    bool refresh;                    /* full refresh due (lapped, segment recreated) */
    uint64_t seq;                    /* next update-log sequence to read */
    _Atomic uint64_t full_refreshes; /* GPU thread adds; any thread reads */
} gtable_t;

typedef struct gmodel {
    gtable_t *tables;
    size_t num_tables;
    hps_gcache_set_t *set; /* every table's cache: one-launch lookups */
    bool sharded;          /* gpu_cache_placement = shard, usable here (gpu_build.c) */
    hps_gcache_shards_t shards;
    size_t ws_base;       /* first workspace slot of this model */
    long long timer_next; /* CLOCK_MONOTONIC ns of the next periodic refresh */
    _Atomic bool active;
    /* Set with active cleared, under seg_lock held for writing, when the
     * client switched to a new segment (a coordinator restart or reload: the
     * rows may be another version's): the GPU thread then builds the
     * model's caches anew from that segment (gpu_build.c: rebuild_stale)
     * while lookups take the CPU path, wholly from the new segment. */
    _Atomic bool stale;
    uint64_t gen; /* builds of the model's caches (GPU thread; read by lookups while active) */
} gmodel_t;

/** A background insert: the missed keys of one call, every table of it
 *  that answered with defaults, fetched together (one miss-queue round
 *  trip) and inserted.  One allocation: mem holds t, n and keys. */
typedef struct job {
    size_t mi;
    uint32_t ntab; /* tables */
    uint32_t *t;   /* (ntab) table indices */
    size_t *n;     /* (ntab) keys of each */
    int64_t *keys; /* (sum n) the keys, table after table */
    void *mem;     /* the allocation; NULL: an empty slot */
} job_t;

struct client_gpu {
    hps_client_t *cl;
    int device;
    /* mu guards free_ctx, num_ctx, ctxs and the queue (q_head, q_len,
     * queue); cv wakes context waiters and the GPU thread. */
    /* (HPS_CONF_MAX_MODELS) by model index; [0, num_models) are the
     * client's models: those it knew at start, then those it learned from
     * its INI (hps__client_gpu_learned fills the entry under mu, then
     * publishes the count; entries never move).  ws_slots: workspace slots
     * of every GPU-cached model's tables so far: written under mu
     * (model_slots), read under mu (hps__client_ctx_slots, and
     * hps__client_ctx_new from hps__client_ctx_get and from the GPU
     * thread's own first context, gpu_build.c gpu_thread). */
    gmodel_t *models;
    _Atomic size_t num_models;
    size_t ws_slots;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    gctx_t *free_ctx;
    gctx_t *all_ctx; /* unused: no code reads or writes it (contexts are in ctxs) */
    gctx_t **ctxs;
    size_t num_ctx, max_ctx;
    job_t queue[QUEUE_SLOTS];
    size_t q_head, q_len;
    _Atomic uint64_t q_dropped;
    _Atomic uint32_t notes;        /* hps__client_gpu_note calls, for its sampling */
    _Atomic uint64_t pinned_bytes; /* host buffers page-locked by hps_client_host_register */
    _Atomic bool ready;
    _Atomic bool stop;
    pthread_t thread;
    bool started; /* thread runs: set by hps__client_gpu_start (open), read by stop (close) */
    /* update-log follower (GPU thread only) */
    void *upd_raw;       /* UPD_BATCH keys of the table's width */
    uint32_t *upd_k32;   /* UPD_BATCH narrowed keys */
    uint8_t *upd_found;  /* UPD_BATCH */
    hps_shmdb_t *upd_db; /* segment the sequences belong to */
    long long upd_last;  /* mono_ns of the last update-log poll */
    /* sharing with the other processes of the device */
    gshare_t *share;
    long long reg_last; /* mono_ns of the last registry upkeep */
};

/* ---- gpu_ctx.c ------------------------------------------------------------ */

/** CLOCK_MONOTONIC in ns, signed (timer arithmetic). */
static inline long long hps__client_mono(void)
{
    return (long long)hps__client_now_ns();
}

/** True (and *last restarted) when period_ns passed since *last. */
bool hps__client_due(long long *last, long long period_ns);

/** 0, or a logged CUDA error as -ENOMEM / HPS_EIO (what names the step). */
int hps__client_ck(cudaError_t e, const char *what);

/** Make p hold at least dbytes on the device and hbytes of pinned host
 *  memory (contents not kept). */
int hps__client_pair_reserve_hd(pair_t *p, size_t dbytes, size_t hbytes);
int hps__client_pair_reserve(pair_t *p, size_t bytes);

gctx_t *hps__client_ctx_new(struct client_gpu *g);
/** Wait for c's inserts on c->istream (the staging buffers c->ikeys and
 *  c->ivals are free again when it returns).  0, or HPS_EIO (logged). */
int hps__client_ctx_settle(gctx_t *c);
void hps__client_ctx_free(gctx_t *c);
/** Grow c's workspace slots to g's current count (a model was learned
 *  since c was made): under g->mu, so that ws_drop on another thread never
 *  sees the arrays move.  0 or -ENOMEM. */
int hps__client_ctx_slots(struct client_gpu *g, gctx_t *c);
/** Take a context: a free one, a new one below the pool size, or wait. */
gctx_t *hps__client_ctx_get(struct client_gpu *g);
void hps__client_ctx_put(struct client_gpu *g, gctx_t *c);
/** The workspace of slot s for n keys (grown when too small). */
int hps__client_ctx_ws(gctx_t *c, size_t s, hps_gcache_t *cache, uint64_t n, hps_gcache_ws_t **ret);

/** Write k rows staged in c->ikeys.h / c->ivals.h ((k, dim) fp32) into the
 *  cache (on c's stream), encoded in its storage type first (c->ienc):
 *  inserted, or with update only replacing keys already cached. */
int hps__client_write_staged(gctx_t *c, hps_gcache_t *cache, size_t k, uint32_t dim, bool update);

/** Bytes of one row of table t of model mi as its GPU cache stores it
 *  (hps_dtype_row_bytes of the cache's storage type: what an insert takes). */
size_t hps__client_row_bytes(const struct client_gpu *g, size_t mi, uint32_t t);

/** Encode one fp32 row (dim floats, host) into dst (host, the cache's
 *  hps_dtype_row_bytes, any alignment) in the cache's storage type. */
void hps__client_encode_row(const hps_gcache_t *cache, uint32_t dim, const float *src, void *dst);

/** Keep the found of n keys (src) and their rows (dim floats each, in
 *  place): the kept keys go to dst (which may be src), in order.  Returns
 *  how many. */
size_t hps__client_keep_found(int64_t *dst, const int64_t *src, float *rows, const uint8_t *found,
                              size_t n, uint32_t dim);

/** Rows of n keys of table t of model mi through the fetch path (fetch.c),
 *  uncounted (background work); found (n) says which a layer had.
 *  seg_lock held for reading. */
int hps__client_fetch_one(hps_client_t *cl, size_t mi, uint32_t t, const int64_t *keys, size_t n,
                          float *rows, uint8_t *found);

/* ---- gpu_refresh.c (GPU thread) ------------------------------------------- */

/** Arm model mi's refresh timer: first refresh refresh_delay s from now. */
void hps__client_timer_arm(struct client_gpu *g, size_t mi);
/** Start due timer refreshes and advance the running ones. */
void hps__client_timer_refresh(struct client_gpu *g, gctx_t *c);
/** One poll of every cached table's update log. */
void hps__client_follow_logs(struct client_gpu *g, gctx_t *c);

/* ---- gpu_share.c (GPU thread) --------------------------------------------- */

/** Every REG_PERIOD_NS: upkeep of every shared table. */
void hps__client_reg_upkeep(struct client_gpu *g);
/** Find the device's cache of table t (its sharded cache when the
 *  table's gtable_t says sharded) in the registry or claim its creation;
 *  waits while another process creates it.  0 (*creator says
 *  which), or < 0: not shared, and the caller builds a private one. */
int hps__client_reg_join(struct client_gpu *g, size_t mi, uint32_t t, uint64_t slots,
                         hps_gcache_reg_t *e, bool *creator);
/** Map the cache of entry e (gt->sharded, gt->shards set), asking its
 *  processes for the descriptors. */
int hps__client_reg_import(struct client_gpu *g, const hps_gcache_reg_t *e, gtable_t *gt,
                           pid_t *ret_donor);
/** Close the descriptors of gt (none when private). */
void hps__client_reg_close(gtable_t *gt);
/** Publish a cache this process created: offer its descriptor, then READY. */
void hps__client_reg_publish(struct client_gpu *g, const hps_gcache_reg_t *e, gtable_t *gt);

#endif
