/*
 * gpu.c -- hps-worker's GPU mode (see gpu.h): per-table GPU embedding
 * caches, their preload, the GPU lookup path with synchronous or background
 * insertion of the misses, and their metrics.  Built only with CUDA.
 *
 * Threads: HTTP threads call worker_gpu_lookup() concurrently; each takes a
 * lookup context (stream, pinned and device buffers, one gcache workspace
 * per table) from a pool and returns it.  One GPU thread creates and
 * preloads the caches, then serves the background-insert queue.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "gpu.h"
#include "gshare.h"
#include "keyset.h"
#include "hps/gcache.h"
#include "hps/log.h"
#include "hps/modelfile.h"
#include "worker.h"

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
    size_t nkeys, nfloats;
    void *h, *d; /* c->keys at capture */
} graph_t;

/** One lookup context: owned by one request at a time. */
typedef struct gctx {
    cudaStream_t stream;
    hps_gcache_ws_t **ws; /* [ws_slots] */
    uint64_t *ws_cap;     /* [ws_slots] keys */
    pair_t keys, out, midx, mcount, ikeys, ivals;
    pair_t srows, soff; /* misses of a device-output lookup: rows and destinations */
    keyset_t ks;        /* distinct missed keys of the table at hand */
    uint32_t *pick;     /* [ks.cap] the distinct keys inserted */
    size_t pick_cap;
    graph_t graphs[GRAPH_SLOTS];
    graph_t want;        /* the last shape seen once: captured when it comes again */
    unsigned graph_next; /* the slot replaced next */
    bool graph_off;      /* a capture failed: this context launches the plain way */
    struct gctx *next;
} gctx_t;

/** A table's cache. */
typedef struct gtable {
    hps_gcache_t *cache;
    uint32_t dim;
    /* Sharing (registry entry reg of generation gen); fd = -1 when private. */
    int fd;
    uint32_t reg;
    uint64_t gen;
    bool refresher;    /* this process follows the update log for everyone */
    bool timer_active; /* a periodic refresh is under way, at set timer_pos */
    uint64_t timer_pos;
    uint64_t repaired; /* sets unlocked after dead writers */
    bool has_log;      /* following the table's update log */
    bool refresh;      /* full refresh due (lapped, segment recreated) */
    uint64_t seq;      /* next update-log sequence to read */
    _Atomic uint64_t full_refreshes;
} gtable_t;

typedef struct gmodel {
    gtable_t *tables;
    size_t num_tables;
    hps_gcache_set_t *set; /* every table's cache: one-launch lookups */
    size_t ws_base;        /* first workspace slot of this model */
    long long timer_next;  /* CLOCK_MONOTONIC ns of the next periodic refresh */
    _Atomic bool active;
} gmodel_t;

/** A background insert: keys of one table to fetch and insert. */
typedef struct job {
    size_t mi;
    uint32_t t;
    size_t n;
    int64_t *keys;
} job_t;

struct worker_gpu {
    worker_t *w;
    int device;
    gmodel_t *models;
    size_t ws_slots;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    gctx_t *free_ctx;
    gctx_t *all_ctx; /* every context, for stop (linked by next while free) */
    gctx_t **ctxs;
    size_t num_ctx, max_ctx;
    job_t queue[QUEUE_SLOTS];
    size_t q_head, q_len;
    _Atomic uint64_t q_dropped;
    _Atomic uint64_t pinned_bytes; /* OUTPUT0 buffers page-locked for the front end */
    _Atomic bool ready;
    _Atomic bool stop;
    pthread_t thread;
    bool started;
    /* update-log follower (GPU thread only) */
    void *upd_raw;       /* UPD_BATCH keys of the table's width */
    uint32_t *upd_k32;   /* UPD_BATCH narrowed keys */
    uint8_t *upd_found;  /* UPD_BATCH */
    hps_shmdb_t *upd_db; /* segment the sequences belong to */
    long long upd_last;  /* mono_ns of the last update-log poll */
    /* sharing with the other workers of the device */
    gshare_t *share;
    long long reg_last; /* mono_ns of the last registry upkeep */
};

static long long mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/** True (and *last restarted) when period_ns passed since *last. */
static bool due(long long *last, long long period_ns)
{
    long long now = mono_ns();
    if (now - *last < period_ns)
        return false;
    *last = now;
    return true;
}

/* ---- CUDA helpers ------------------------------------------------------ */

static int ck(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    HPS_ERROR("GPU: %s: %s", what, cudaGetErrorString(e));
    (void)cudaGetLastError();
    return e == cudaErrorMemoryAllocation ? -ENOMEM : HPS_EIO;
}

static void pair_free(pair_t *p)
{
    cudaFreeHost(p->h);
    cudaFree(p->d);
    *p = (pair_t){0};
}

/** Make *buf (device, or pinned host memory when host) hold at least bytes
 *  (contents are not kept; it grows with half again of room). */
static int grow(void **buf, size_t *cap, size_t bytes, bool host)
{
    if (bytes <= *cap)
        return 0;
    if (host)
        cudaFreeHost(*buf);
    else
        cudaFree(*buf);
    *buf = NULL;
    *cap = 0;
    size_t want = bytes + bytes / 2 + 256;
    int rc = host ? ck(cudaMallocHost(buf, want), "cudaMallocHost")
                  : ck(cudaMalloc(buf, want), "cudaMalloc");
    if (rc == 0)
        *cap = want;
    return rc;
}

/** Make p hold at least dbytes on the device and hbytes on the host. */
static int pair_reserve_hd(pair_t *p, size_t dbytes, size_t hbytes)
{
    int rc = grow(&p->d, &p->dcap, dbytes, false);
    return rc ? rc : grow(&p->h, &p->hcap, hbytes, true);
}

static int pair_reserve(pair_t *p, size_t bytes)
{
    return pair_reserve_hd(p, bytes, bytes);
}

/* ---- CPU path for the misses ------------------------------------------ */

static void fill_row(float *row, uint32_t dim, float v)
{
    for (uint32_t i = 0; i < dim; i++)
        row[i] = v;
}

/** Narrow int64 keys for a 32-bit-key model; invalid ones are marked. */
static void narrow(const int64_t *keys, size_t n, uint32_t *tmp, uint8_t *valid)
{
    for (size_t i = 0; i < n; i++) {
        valid[i] = keys[i] >= 0 && keys[i] <= (int64_t)UINT32_MAX;
        tmp[i] = valid[i] ? (uint32_t)keys[i] : 0;
    }
}

/** Ask the coordinator for the keys not found yet; returns rows found. */
static size_t fetch_lower(worker_t *w, worker_model_t *m, uint32_t t, const void *k, size_t n,
                          float *rows, uint8_t *found, const uint8_t *valid)
{
    uint32_t dim = m->dims[t], kb = w->key_bytes;
    size_t miss = 0, hits = 0;
    char *mk = malloc(n * kb);
    size_t *mi = malloc(n * sizeof(size_t));
    float *mv = malloc(n * dim * sizeof(float));
    uint8_t *mf = malloc(n);
    for (size_t i = 0; mk && mi && mv && mf && i < n; i++) {
        if (found[i] || (valid && !valid[i]))
            continue;
        memcpy(mk + miss * kb, (const char *)k + i * kb, kb);
        mi[miss++] = i;
    }
    if (miss && atomic_load_explicit(&w->coord_alive, memory_order_relaxed)) {
        hps_err_t rc = hps_shmdb_miss_lookup(w->db, m->vdb_ids[t], miss, mk, mv, mf,
                                             (uint32_t)w->conf->worker.miss_timeout_ms, &hits);
        if (rc == HPS_EBUSY)
            atomic_fetch_add_explicit(&m->ctr.miss_busy, 1, memory_order_relaxed);
        else if (rc == HPS_ETIMEDOUT)
            atomic_fetch_add_explicit(&m->ctr.miss_timeout, 1, memory_order_relaxed);
        for (size_t j = 0; rc == 0 && j < miss; j++) {
            if (!mf[j])
                continue;
            memcpy(rows + mi[j] * dim, mv + j * dim, dim * sizeof(float));
            found[mi[j]] = 1;
        }
        if (rc < 0)
            hits = 0;
    }
    free(mk);
    free(mi);
    free(mv);
    free(mf);
    return hits;
}

/** Sum of count[i] over the keys with found[i] (every key when found is NULL). */
static uint64_t weighed(const uint8_t *found, const uint32_t *count, size_t n)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += found && !found[i] ? 0 : count[i];
    return sum;
}

/**
 * Rows of n keys of table t from the volatile DB, then the coordinator, else
 * the default; found[i] = 1 for rows found in a layer.  count: NULL, or how
 * many request positions each key stands for, added to the model's counters
 * per layer (request path; the background does not count).  Needs seg_lock.
 */
static void fetch(worker_t *w, worker_model_t *m, uint32_t t, const int64_t *keys, size_t n,
                  float *rows, uint8_t *found, const uint32_t *count)
{
    uint32_t dim = m->dims[t];
    size_t hits = 0;
    uint64_t vdb = 0, any = 0;
    memset(found, 0, n);
    uint32_t *tmp = w->key_bytes == 4 ? malloc(n * sizeof(uint32_t)) : NULL;
    uint8_t *valid = tmp ? malloc(n) : NULL;
    const void *k = keys;
    if (tmp && valid) {
        narrow(keys, n, tmp, valid);
        k = tmp;
    }
    bool ok = w->db && m->resolved && (w->key_bytes == 8 || valid);
    if (ok && hps_shmdb_lookup(w->db, m->vdb_ids[t], n, k, rows, found, &hits) == 0) {
        for (size_t i = 0; valid && i < n; i++)
            found[i] &= valid[i];
        vdb = count ? weighed(found, count, n) : 0;
        fetch_lower(w, m, t, k, n, rows, found, valid);
        any = count ? weighed(found, count, n) : 0;
    }
    for (size_t i = 0; i < n; i++)
        if (!found[i])
            fill_row(rows + i * dim, dim, m->defaults[t]);
    if (count) {
        atomic_fetch_add_explicit(&m->ctr.vdb_hits, vdb, memory_order_relaxed);
        atomic_fetch_add_explicit(&m->ctr.lower_hits, any - vdb, memory_order_relaxed);
        atomic_fetch_add_explicit(&m->ctr.default_keys, weighed(NULL, count, n) - any,
                                  memory_order_relaxed);
    }
    free(tmp);
    free(valid);
}

/* ---- lookup contexts --------------------------------------------------- */

static void ctx_free(gctx_t *c, size_t slots)
{
    if (!c)
        return;
    for (size_t i = 0; c->ws && i < slots; i++)
        hps_gcache_ws_destroy(c->ws[i]);
    free(c->ws);
    free(c->ws_cap);
    pair_t *ps[] = {&c->keys,  &c->out,   &c->midx,  &c->mcount,
                    &c->ikeys, &c->ivals, &c->srows, &c->soff};
    for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++)
        pair_free(ps[i]);
    keyset_free(&c->ks);
    free(c->pick);
    for (int i = 0; i < GRAPH_SLOTS; i++)
        if (c->graphs[i].exec)
            cudaGraphExecDestroy(c->graphs[i].exec);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    free(c);
}

static gctx_t *ctx_new(struct worker_gpu *g)
{
    gctx_t *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->ws = calloc(g->ws_slots, sizeof(*c->ws));
    c->ws_cap = calloc(g->ws_slots, sizeof(*c->ws_cap));
    if (!c->ws || !c->ws_cap ||
        ck(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "stream") < 0) {
        ctx_free(c, g->ws_slots);
        return NULL;
    }
    return c;
}

/** Take a context: a free one, a new one below the pool size, or wait. */
static gctx_t *ctx_get(struct worker_gpu *g)
{
    pthread_mutex_lock(&g->mu);
    while (!g->free_ctx && g->num_ctx >= g->max_ctx)
        pthread_cond_wait(&g->cv, &g->mu);
    gctx_t *c = g->free_ctx;
    if (c) {
        g->free_ctx = c->next;
    } else if ((c = ctx_new(g))) {
        g->ctxs[g->num_ctx++] = c;
    }
    pthread_mutex_unlock(&g->mu);
    return c;
}

static void ctx_put(struct worker_gpu *g, gctx_t *c)
{
    pthread_mutex_lock(&g->mu);
    c->next = g->free_ctx;
    g->free_ctx = c;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/** The workspace of slot s for n keys (grown when too small). */
static int ctx_ws(gctx_t *c, size_t s, hps_gcache_t *cache, uint64_t n, hps_gcache_ws_t **ret)
{
    if (c->ws[s] && c->ws_cap[s] >= n) {
        *ret = c->ws[s];
        return 0;
    }
    hps_gcache_ws_destroy(c->ws[s]);
    c->ws[s] = NULL;
    uint64_t cap = n < WS_MIN_KEYS ? WS_MIN_KEYS : n + n / 2;
    hps_err_t rc = hps_gcache_ws_create(cache, cap, &c->ws[s]);
    if (rc < 0)
        return rc;
    c->ws_cap[s] = cap;
    *ret = c->ws[s];
    return 0;
}

/* ---- lookup ------------------------------------------------------------ */

/**
 * Write k rows staged in c->ikeys.h / c->ivals.h into the cache (on c's
 * stream): inserted, or with update set only replacing keys already cached.
 */
static int write_staged(gctx_t *c, hps_gcache_t *cache, size_t k, uint32_t dim, bool update)
{
    if (k == 0)
        return 0;
    int rc = ck(cudaMemcpyAsync(c->ikeys.d, c->ikeys.h, k * sizeof(int64_t), cudaMemcpyHostToDevice,
                                c->stream),
                "H2D keys");
    if (rc == 0)
        rc = ck(cudaMemcpyAsync(c->ivals.d, c->ivals.h, k * dim * sizeof(float),
                                cudaMemcpyHostToDevice, c->stream),
                "H2D rows");
    if (rc == 0)
        rc = update ? hps_gcache_update(cache, c->ikeys.d, c->ivals.d, k, c->stream)
                    : hps_gcache_insert(cache, c->ikeys.d, c->ivals.d, k, c->stream);
    return rc;
}

/**
 * Keep the found of n keys (src) and their rows (dim floats each, in place):
 * the kept keys go to dst (which may be src), in order.  Returns how many.
 */
static size_t keep_found(int64_t *dst, const int64_t *src, float *rows, const uint8_t *found,
                         size_t n, uint32_t dim)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!found[i])
            continue;
        dst[k] = src[i];
        if (k != i)
            memmove(rows + k * dim, rows + i * dim, dim * sizeof(float));
        k++;
    }
    return k;
}

/** Queue the missing keys for the background thread (dropped when full). */
static void enqueue(struct worker_gpu *g, size_t mi, uint32_t t, const int64_t *mkeys, size_t n)
{
    int64_t *copy = malloc(n * sizeof(int64_t));
    pthread_mutex_lock(&g->mu);
    if (copy && g->q_len < QUEUE_SLOTS) {
        memcpy(copy, mkeys, n * sizeof(int64_t));
        g->queue[(g->q_head + g->q_len++) % QUEUE_SLOTS] = (job_t){mi, t, n, copy};
        copy = NULL;
        pthread_cond_broadcast(&g->cv);
    } else {
        atomic_fetch_add_explicit(&g->q_dropped, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&g->mu);
    free(copy);
}

/**
 * The distinct keys of c->ks worth inserting into cache: the found ones
 * (count > 0), at most its capacity, the most requested first (keyset.h
 * says why).  Their indices go to c->pick; returns how many, or -ENOMEM.
 */
static long pick_inserts(gctx_t *c, const hps_gcache_t *cache)
{
    if (c->pick_cap < c->ks.n) {
        uint32_t *p = realloc(c->pick, c->ks.n * sizeof(*p));
        if (!p)
            return -ENOMEM;
        c->pick = p;
        c->pick_cap = c->ks.n;
    }
    return keyset_top(&c->ks, (size_t)hps_gcache_capacity(cache), c->pick);
}

/**
 * The mc misses of table t (positions midx into out), each distinct key
 * once: synchronously fetched and inserted, or defaults now and a
 * background insert (see gpu.h).  Returns 1 when an insert was enqueued on
 * c's stream.
 */
static int misses(struct worker_gpu *g, gctx_t *c, size_t mi, uint32_t t, const int64_t *keys,
                  size_t n, const uint32_t *midx, size_t mc, float *out)
{
    worker_model_t *m = &g->w->models[mi];
    hps_gcache_t *cache = g->models[mi].tables[t].cache;
    uint32_t dim = m->dims[t];
    keyset_t *s = &c->ks;
    int rc = pair_reserve(&c->ikeys, mc * sizeof(int64_t));
    if (rc < 0)
        return rc;
    int64_t *ik = c->ikeys.h;
    for (size_t j = 0; j < mc; j++)
        ik[j] = keys[midx[j]];
    if ((rc = keyset_build(s, ik, mc)) < 0)
        return rc;
    double hit_rate = 1.0 - (double)mc / (double)n;
    long k;
    if (hit_rate >= m->conf->hit_rate_threshold) {
        for (size_t j = 0; j < mc; j++)
            fill_row(out + (size_t)midx[j] * dim, dim, m->defaults[t]);
        atomic_fetch_add_explicit(&m->ctr.default_keys, mc, memory_order_relaxed);
        if ((k = pick_inserts(c, cache)) < 0)
            return (int)k;
        for (long j = 0; j < k; j++)
            ik[j] = s->keys[c->pick[j]];
        enqueue(g, mi, t, ik, (size_t)k);
        return 0;
    }
    uint8_t *found = malloc(s->n);
    rc = found ? pair_reserve(&c->ivals, s->n * dim * sizeof(float)) : -ENOMEM;
    if (rc < 0) {
        free(found);
        return rc;
    }
    float *iv = c->ivals.h;
    fetch(g->w, m, t, s->keys, s->n, iv, found, s->count);
    for (size_t j = 0; j < mc; j++)
        memcpy(out + (size_t)midx[j] * dim, iv + (size_t)s->where[j] * dim, dim * sizeof(float));
    for (size_t i = 0; i < s->n; i++)
        s->count[i] = found[i] ? s->count[i] : 0;
    free(found);
    if ((k = pick_inserts(c, cache)) < 0)
        return (int)k;
    for (long j = 0; j < k; j++) { /* pick ascends: in place */
        ik[j] = s->keys[c->pick[j]];
        memmove(iv + (size_t)j * dim, iv + (size_t)c->pick[j] * dim, dim * sizeof(float));
    }
    rc = write_staged(c, cache, (size_t)k, dim, false);
    return rc < 0 ? rc : k > 0;
}

/**
 * Whether host buffer out is page-locked (a front-end OUTPUT0 buffer pinned
 * by worker_gpu_pin): the rows are then copied from the device straight
 * into it, not through c->out's staging buffer and a memcpy.
 */
static bool host_pinned(const float *out)
{
    struct cudaPointerAttributes a;
    if (!out || cudaPointerGetAttributes(&a, out) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return a.type == cudaMemoryTypeHost;
}

/**
 * Enqueue H2D of the keys, every table's lookup and the D2H of the results:
 * the rows into d_out when set (left on the device), else to out when
 * pinned, else to c->out.h.
 */
static int launch(struct worker_gpu *g, gctx_t *c, size_t mi, uint32_t nt, const int32_t *numkeys,
                  size_t nkeys, size_t nfloats, float *out, float *d_out)
{
    float *dst = d_out ? d_out : (float *)c->out.d;
    gmodel_t *gm = &g->models[mi];
    int rc = ck(cudaMemcpyAsync(c->keys.d, c->keys.h, nkeys * sizeof(int64_t),
                                cudaMemcpyHostToDevice, c->stream),
                "H2D keys");
    size_t ko = 0, fo = 0;
    for (uint32_t t = 0; t < nt && rc == 0; t++) {
        size_t n = (size_t)numkeys[t];
        hps_gcache_ws_t *ws = NULL;
        if (n == 0)
            continue;
        rc = ctx_ws(c, gm->ws_base + t, gm->tables[t].cache, n, &ws);
        if (rc == 0)
            rc = hps_gcache_lookup(gm->tables[t].cache, ws, (int64_t *)c->keys.d + ko, n, dst + fo,
                                   NULL, (uint32_t *)c->midx.d + ko, (uint32_t *)c->mcount.d + t,
                                   c->stream);
        ko += n;
        fo += n * gm->tables[t].dim;
    }
    if (rc == 0 && !d_out)
        rc = ck(cudaMemcpyAsync(out ? out : c->out.h, c->out.d, nfloats * sizeof(float),
                                cudaMemcpyDeviceToHost, c->stream),
                "D2H rows");
    if (rc == 0)
        rc = ck(cudaMemcpyAsync(c->midx.h, c->midx.d, nkeys * sizeof(uint32_t),
                                cudaMemcpyDeviceToHost, c->stream),
                "D2H miss index");
    if (rc == 0)
        rc = ck(cudaMemcpyAsync(c->mcount.h, c->mcount.d, nt * sizeof(uint32_t),
                                cudaMemcpyDeviceToHost, c->stream),
                "D2H miss count");
    if (rc == 0)
        rc = ck(cudaStreamSynchronize(c->stream), "lookup");
    return rc;
}

/*
 * One-launch lookup of every table (hps_gcache_lookup_tables), for requests
 * of up to HPS_GCACHE_FUSED_MAX keys per table on average.  One buffer
 * holds the request and the result (c->keys, host and device alike):
 *   key_off u32[T+1] | out_off u64[T] | keys i64[n] | mcount u32[T] |
 *   midx u32[n] | out f32[floats] (16-byte aligned)
 * One H2D copies key_off .. mcount (mcount zeroed here), one D2H mcount .. out.
 */
struct mlayout {
    size_t key_off, out_off, keys, mcount, midx, out, end;
};

static size_t align_up(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

static struct mlayout mlayout(uint32_t nt, size_t nkeys, size_t nfloats)
{
    struct mlayout L;
    L.key_off = 0;
    L.out_off = align_up((nt + 1) * sizeof(uint32_t), 8);
    L.keys = L.out_off + nt * sizeof(uint64_t);
    L.mcount = L.keys + nkeys * sizeof(int64_t);
    L.midx = L.mcount + nt * sizeof(uint32_t);
    L.out = align_up(L.midx + nkeys * sizeof(uint32_t), 16);
    L.end = L.out + nfloats * sizeof(float);
    return L;
}

/*
 * Enqueue the one-launch lookup of a request prepared in c->keys (layout L).
 * With out set (pinned host memory) the rows are copied there by a D2H of
 * their own and the result's D2H stops before them.
 */
static int enqueue_multi(struct worker_gpu *g, gctx_t *c, size_t mi, const struct mlayout *L,
                         size_t nkeys, size_t nfloats, float *out, float *d_out)
{
    char *h = c->keys.h, *d = c->keys.d;
    int rc = ck(cudaMemcpyAsync(d, h, L->midx, cudaMemcpyHostToDevice, c->stream), "H2D request");
    if (rc == 0)
        rc = hps_gcache_lookup_tables(
            g->models[mi].set, (int64_t *)(d + L->keys), nkeys, (uint32_t *)(d + L->key_off),
            (uint64_t *)(d + L->out_off), d_out ? d_out : (float *)(d + L->out),
            (uint32_t *)(d + L->midx), (uint32_t *)(d + L->mcount), c->stream);
    size_t to = out ? L->out : L->end; /* end of the result D2H */
    if (rc == 0 && out)
        rc = ck(cudaMemcpyAsync(out, d + L->out, nfloats * sizeof(float), cudaMemcpyDeviceToHost,
                                c->stream),
                "D2H rows");
    if (rc == 0)
        rc = ck(cudaMemcpyAsync(h + L->mcount, d + L->mcount, to - L->mcount,
                                cudaMemcpyDeviceToHost, c->stream),
                "D2H result");
    return rc;
}

static bool graph_same(const graph_t *a, const graph_t *b)
{
    return a->set == b->set && a->nkeys == b->nkeys && a->nfloats == b->nfloats && a->h == b->h &&
           a->d == b->d;
}

/** Capture enqueue_multi for shape k into a graph slot; NULL if CUDA refuses
 *  (nothing is then enqueued, and the caller launches the plain way). */
static cudaGraphExec_t graph_capture(struct worker_gpu *g, gctx_t *c, size_t mi,
                                     const struct mlayout *L, const graph_t *k)
{
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    if (cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    int rc = enqueue_multi(g, c, mi, L, k->nkeys, k->nfloats, NULL, NULL);
    if (cudaStreamEndCapture(c->stream, &graph) != cudaSuccess || rc < 0 || !graph ||
        cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess)
        exec = NULL;
    if (graph)
        cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    if (!exec) {
        HPS_WARN("GPU: CUDA graph capture failed; lookup context stays on plain launches");
        c->graph_off = true;
        return NULL;
    }
    graph_t *slot = &c->graphs[c->graph_next++ % GRAPH_SLOTS];
    if (slot->exec)
        cudaGraphExecDestroy(slot->exec);
    *slot = *k;
    slot->exec = exec;
    return exec;
}

/**
 * The captured graph for shape k: one kept, or captured now when k came
 * just before too (a shape that repeats; capturing costs more than the
 * launches it replaces), else NULL.
 */
static cudaGraphExec_t graph_for(struct worker_gpu *g, gctx_t *c, size_t mi,
                                 const struct mlayout *L, const graph_t *k)
{
    for (int i = 0; i < GRAPH_SLOTS; i++)
        if (c->graphs[i].exec && graph_same(&c->graphs[i], k))
            return c->graphs[i].exec;
    if (!graph_same(&c->want, k)) {
        c->want = *k;
        return NULL;
    }
    return graph_capture(g, c, mi, L, k);
}

/*
 * The one-launch lookup of a request, synchronized.  Rows to d_out (left
 * on the device), to out (pinned host memory), or into c->keys.  The last
 * case (small responses) replays a CUDA graph of the three steps when the
 * request's shape repeats.
 */
static int launch_multi(struct worker_gpu *g, gctx_t *c, size_t mi, uint32_t nt,
                        const int32_t *numkeys, const int64_t *keys, size_t nkeys, size_t nfloats,
                        float *out, float *d_out, struct mlayout *ret)
{
    worker_model_t *m = &g->w->models[mi];
    /* with d_out the rows stay on the device; with out the host needs no room for them */
    struct mlayout L = mlayout(nt, nkeys, d_out ? 0 : nfloats);
    int rc = pair_reserve_hd(&c->keys, L.end, out ? L.out : L.end);
    if (rc < 0)
        return rc;
    char *h = c->keys.h;
    uint32_t *ko = (uint32_t *)(h + L.key_off);
    uint64_t *fo = (uint64_t *)(h + L.out_off);
    ko[0] = 0;
    for (uint32_t t = 0; t < nt; t++) {
        ko[t + 1] = ko[t] + (uint32_t)numkeys[t];
        fo[t] = t ? fo[t - 1] + (uint64_t)numkeys[t - 1] * m->dims[t - 1] : 0;
    }
    memcpy(h + L.keys, keys, nkeys * sizeof(int64_t));
    memset(h + L.mcount, 0, nt * sizeof(uint32_t));
    graph_t k = {NULL, g->models[mi].set, nkeys, nfloats, c->keys.h, c->keys.d};
    cudaGraphExec_t x = out || d_out || c->graph_off ? NULL : graph_for(g, c, mi, &L, &k);
    if (x)
        rc = ck(cudaGraphLaunch(x, c->stream), "graph launch");
    else
        rc = enqueue_multi(g, c, mi, &L, nkeys, nfloats, out, d_out);
    if (rc == 0)
        rc = ck(cudaStreamSynchronize(c->stream), "lookup");
    *ret = L;
    return rc;
}

/**
 * Table t's misses when its rows are on the device (d_out): their rows are
 * found (or defaulted) on the host as misses() does, then copied to their
 * places by one scatter kernel.
 */
static int misses_device(struct worker_gpu *g, gctx_t *c, size_t mi, uint32_t t,
                         const int64_t *keys, size_t n, const uint32_t *midx, size_t mc,
                         float *d_out)
{
    uint32_t dim = g->w->models[mi].dims[t];
    /* c->out is free in a device-output lookup: the table's rows on the host */
    int rc = pair_reserve(&c->out, n * dim * sizeof(float));
    if (rc < 0)
        return rc;
    float *tmp = c->out.h;
    rc = misses(g, c, mi, t, keys, n, midx, mc, tmp);
    if (rc > 0) /* the insert reads staging buffers: done before the next table */
        rc = ck(cudaStreamSynchronize(c->stream), "insert");
    rc = rc < 0 ? rc : pair_reserve(&c->srows, mc * dim * sizeof(float));
    rc = rc < 0 ? rc : pair_reserve(&c->soff, mc * sizeof(uint64_t));
    for (size_t j = 0; rc >= 0 && j < mc; j++) {
        memcpy((float *)c->srows.h + j * dim, tmp + (size_t)midx[j] * dim, dim * sizeof(float));
        ((uint64_t *)c->soff.h)[j] = (uint64_t)midx[j] * dim;
    }
    if (rc >= 0)
        rc = ck(cudaMemcpyAsync(c->srows.d, c->srows.h, mc * dim * sizeof(float),
                                cudaMemcpyHostToDevice, c->stream),
                "H2D miss rows");
    if (rc >= 0)
        rc = ck(cudaMemcpyAsync(c->soff.d, c->soff.h, mc * sizeof(uint64_t), cudaMemcpyHostToDevice,
                                c->stream),
                "H2D miss places");
    if (rc >= 0)
        rc = hps_gcache_scatter_rows(c->srows.d, c->soff.d, mc, dim, d_out, c->stream);
    if (rc >= 0) /* srows and soff are the next table's */
        rc = ck(cudaStreamSynchronize(c->stream), "scatter misses");
    return rc < 0 ? rc : 0;
}

/** The misses of every table, after either launch path; rows to out (host)
 * or, when d_out is set, to d_out (device). */
static int lookup_misses(struct worker_gpu *g, gctx_t *c, size_t mi, uint32_t nt,
                         const int32_t *numkeys, const int64_t *keys, const uint32_t *mcount,
                         const uint32_t *midx, float *out, float *d_out)
{
    worker_model_t *m = &g->w->models[mi];
    size_t ko = 0, fo = 0;
    int rc = 0;
    for (uint32_t t = 0; t < nt && rc >= 0; t++) {
        size_t n = (size_t)numkeys[t], mc = n ? mcount[t] : 0;
        if (mc && d_out)
            rc = misses_device(g, c, mi, t, keys + ko, n, midx + ko, mc, d_out + fo);
        else if (mc)
            rc = misses(g, c, mi, t, keys + ko, n, midx + ko, mc, out + fo);
        if (rc > 0) /* an insert reads the staging buffers the next table reuses */
            rc = ck(cudaStreamSynchronize(c->stream), "insert");
        ko += n;
        fo += n * m->dims[t];
    }
    return rc < 0 ? rc : 0;
}

/** Rows to out (host) or, with d_out, straight into device memory. */
static int lookup_ctx(struct worker_gpu *g, gctx_t *c, size_t mi, uint32_t nt,
                      const int32_t *numkeys, const int64_t *keys, float *out, float *d_out)
{
    worker_model_t *m = &g->w->models[mi];
    size_t nkeys = 0, nfloats = 0;
    for (uint32_t t = 0; t < nt; t++) {
        nkeys += (size_t)numkeys[t];
        nfloats += (size_t)numkeys[t] * m->dims[t];
    }
    float *direct = !d_out && host_pinned(out) ? out : NULL; /* D2H straight into out */
    if (g->models[mi].set && nkeys <= (size_t)nt * HPS_GCACHE_FUSED_MAX) {
        struct mlayout L;
        int rc = launch_multi(g, c, mi, nt, numkeys, keys, nkeys, nfloats, direct, d_out, &L);
        if (rc < 0)
            return rc;
        char *h = c->keys.h;
        if (!d_out && !direct)
            memcpy(out, h + L.out, nfloats * sizeof(float));
        return lookup_misses(g, c, mi, nt, numkeys, keys, (uint32_t *)(h + L.mcount),
                             (uint32_t *)(h + L.midx), out, d_out);
    }
    int rc = pair_reserve(&c->keys, nkeys * sizeof(int64_t));
    /* rows on the device unless d_out holds them; staged on the host only
     * when they cannot go straight to out */
    size_t rows = nfloats * sizeof(float);
    if (rc == 0 && !d_out)
        rc = pair_reserve_hd(&c->out, rows, direct ? 0 : rows);
    rc = rc ? rc : pair_reserve(&c->midx, nkeys * sizeof(uint32_t));
    rc = rc ? rc : pair_reserve(&c->mcount, nt * sizeof(uint32_t));
    if (rc < 0)
        return rc;
    memcpy(c->keys.h, keys, nkeys * sizeof(int64_t));
    if ((rc = launch(g, c, mi, nt, numkeys, nkeys, nfloats, direct, d_out)) < 0)
        return rc;
    if (!d_out && !direct)
        memcpy(out, c->out.h, nfloats * sizeof(float));
    return lookup_misses(g, c, mi, nt, numkeys, keys, c->mcount.h, c->midx.h, out, d_out);
}

int worker_gpu_lookup(worker_t *w, size_t mi, uint32_t num_tables, const int32_t *numkeys,
                      const int64_t *keys, float *out)
{
    struct worker_gpu *g = w->gpu;
    if (!g || !atomic_load_explicit(&g->models[mi].active, memory_order_acquire))
        return 1;
    if (cudaSetDevice(g->device) != cudaSuccess)
        return 1;
    gctx_t *c = ctx_get(g);
    if (!c)
        return 1;
    int rc = lookup_ctx(g, c, mi, num_tables, numkeys, keys, out, NULL);
    ctx_put(g, c);
    return rc;
}

int worker_gpu_lookup_device(worker_t *w, size_t mi, uint32_t num_tables, const int32_t *numkeys,
                             const int64_t *keys, int device, float *d_out)
{
    struct worker_gpu *g = w->gpu;
    if (!g || device != g->device ||
        !atomic_load_explicit(&g->models[mi].active, memory_order_acquire))
        return HPS_EUNSUPPORTED;
    if (cudaSetDevice(g->device) != cudaSuccess)
        return HPS_EUNSUPPORTED;
    gctx_t *c = ctx_get(g);
    if (!c)
        return HPS_EUNSUPPORTED;
    int rc = lookup_ctx(g, c, mi, num_tables, numkeys, keys, NULL, d_out);
    ctx_put(g, c);
    return rc;
}

int worker_gpu_pin(worker_t *w, void *buf, size_t bytes)
{
    struct worker_gpu *g = w->gpu;
    if (!g)
        return HPS_EUNSUPPORTED;
    if (cudaSetDevice(g->device) != cudaSuccess ||
        ck(cudaHostRegister(buf, bytes, cudaHostRegisterPortable), "pin an OUTPUT0 buffer") < 0)
        return HPS_EIO;
    atomic_fetch_add_explicit(&g->pinned_bytes, bytes, memory_order_relaxed);
    return 0;
}

void worker_gpu_unpin(worker_t *w, void *buf, size_t bytes)
{
    struct worker_gpu *g = w->gpu;
    if (!g)
        return;
    cudaSetDevice(g->device);
    ck(cudaHostUnregister(buf), "unpin an OUTPUT0 buffer");
    atomic_fetch_sub_explicit(&g->pinned_bytes, bytes, memory_order_relaxed);
}

/* ---- background inserts ------------------------------------------------ */

/** Fetch and insert one job's keys (the GPU thread, context c). */
static void run_job(struct worker_gpu *g, gctx_t *c, job_t *j)
{
    worker_t *w = g->w;
    worker_model_t *m = &w->models[j->mi];
    uint32_t dim = m->dims[j->t];
    uint8_t *found = malloc(j->n);
    if (!found || pair_reserve(&c->ikeys, j->n * sizeof(int64_t)) < 0 ||
        pair_reserve(&c->ivals, j->n * dim * sizeof(float)) < 0) {
        free(found);
        return;
    }
    int64_t *ik = c->ikeys.h;
    float *iv = c->ivals.h;
    pthread_rwlock_rdlock(&w->seg_lock);
    fetch(w, m, j->t, j->keys, j->n, iv, found, NULL);
    pthread_rwlock_unlock(&w->seg_lock);
    size_t k = keep_found(ik, j->keys, iv, found, j->n, dim);
    free(found);
    if (write_staged(c, g->models[j->mi].tables[j->t].cache, k, dim, false) == 0)
        ck(cudaStreamSynchronize(c->stream), "background insert");
}

static void follow_logs(struct worker_gpu *g, gctx_t *c);
static void reg_upkeep(struct worker_gpu *g);
static void timer_refresh(struct worker_gpu *g, gctx_t *c);

static void serve_queue(struct worker_gpu *g, gctx_t *c)
{
    pthread_mutex_lock(&g->mu);
    while (!atomic_load(&g->stop)) {
        if (due(&g->upd_last, UPD_POLL_NS)) {
            pthread_mutex_unlock(&g->mu);
            reg_upkeep(g);
            follow_logs(g, c);
            timer_refresh(g, c);
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
        free(j.keys);
        pthread_mutex_lock(&g->mu);
    }
    pthread_mutex_unlock(&g->mu);
}

/* ---- refresh: following the update logs -------------------------------- */

/**
 * Replace the cached rows of the n keys staged in c->ikeys.h with their rows
 * in the volatile DB, or with lower in every layer (keys found nowhere are
 * skipped, never replaced by the default; keys not in the cache are ignored
 * by hps_gcache_update).  GPU thread, seg_lock held.
 */
static int refresh_staged(struct worker_gpu *g, gctx_t *c, size_t mi, uint32_t t, size_t n,
                          bool lower)
{
    worker_t *w = g->w;
    worker_model_t *m = &w->models[mi];
    uint32_t dim = m->dims[t];
    if (n == 0)
        return 0;
    int rc = pair_reserve(&c->ivals, n * dim * sizeof(float));
    if (rc < 0)
        return rc;
    int64_t *ik = c->ikeys.h;
    float *iv = c->ivals.h;
    uint8_t *found = g->upd_found;
    const void *k = ik;
    if (w->key_bytes == 4) {
        for (size_t i = 0; i < n; i++)
            g->upd_k32[i] = (uint32_t)ik[i];
        k = g->upd_k32;
    }
    size_t hits = 0;
    if (lower) /* every layer (timer refresh): volatile DB, then the coordinator */
        fetch(w, m, t, ik, n, iv, found, NULL);
    else if ((rc = hps_shmdb_lookup(w->db, m->vdb_ids[t], n, k, iv, found, &hits)) < 0)
        return rc;
    size_t j = keep_found(ik, ik, iv, found, n, dim);
    if (j == 0)
        return 0;
    rc = write_staged(c, g->models[mi].tables[t].cache, j, dim, true);
    if (rc == 0)
        rc = ck(cudaStreamSynchronize(c->stream), "refresh");
    return rc;
}

/** Cached keys of sets [s0, s1) of table t replaced by their current rows. */
static int refresh_sets(struct worker_gpu *g, gctx_t *c, size_t mi, uint32_t t, uint64_t s0,
                        uint64_t s1, bool lower)
{
    hps_gcache_t *cache = g->models[mi].tables[t].cache;
    uint64_t step = UPD_BATCH / HPS_GCACHE_WAYS;
    int rc = pair_reserve(&c->mcount, sizeof(uint32_t));
    for (uint64_t s = s0; rc == 0 && s < s1 && !atomic_load(&g->stop); s += step) {
        uint64_t e = s + step < s1 ? s + step : s1;
        rc = hps_gcache_dump(cache, s, e, c->ikeys.d, c->mcount.d, c->stream);
        if (rc == 0)
            rc = ck(cudaMemcpyAsync(c->mcount.h, c->mcount.d, sizeof(uint32_t),
                                    cudaMemcpyDeviceToHost, c->stream),
                    "D2H dump count");
        if (rc == 0)
            rc = ck(cudaStreamSynchronize(c->stream), "dump");
        uint32_t n = rc == 0 ? *(uint32_t *)c->mcount.h : 0;
        if (rc == 0 && n)
            rc = ck(cudaMemcpy(c->ikeys.h, c->ikeys.d, n * sizeof(int64_t), cudaMemcpyDeviceToHost),
                    "D2H dump keys");
        if (rc == 0)
            rc = refresh_staged(g, c, mi, t, n, lower);
    }
    return rc;
}

/** Every cached key of table t replaced by its row in the volatile DB. */
static int refresh_full(struct worker_gpu *g, gctx_t *c, size_t mi, uint32_t t)
{
    hps_gcache_t *cache = g->models[mi].tables[t].cache;
    int rc = refresh_sets(g, c, mi, t, 0, hps_gcache_num_sets(cache), false);
    if (rc == 0) {
        atomic_fetch_add(&g->models[mi].tables[t].full_refreshes, 1);
        HPS_INFO("GPU cache %s/%s: refreshed fully from the volatile DB",
                 g->w->models[mi].conf->name, g->w->models[mi].conf->embedding_table_names[t]);
    }
    return rc;
}

/* ---- refresh: the timer (refresh_delay, refresh_interval) -------------- */

/** Arm model mi's refresh timer: first refresh refresh_delay s from now. */
static void timer_arm(struct worker_gpu *g, size_t mi)
{
    const hps_conf_model_t *mc = g->w->models[mi].conf;
    g->models[mi].timer_next =
        mc->refresh_interval > 0 ? mono_ns() + (long long)(mc->refresh_delay * 1e9) : LLONG_MAX;
}

/**
 * One step of table t's timer refresh: the next
 * cache_refresh_percentage_per_iteration of its sets (at least one batch of
 * UPD_BATCH / 32 sets), from every layer, so a long refresh never holds up
 * the update logs or the background inserts for long.
 */
static void timer_step(struct worker_gpu *g, gctx_t *c, size_t mi, uint32_t t)
{
    gtable_t *gt = &g->models[mi].tables[t];
    uint64_t sets = hps_gcache_num_sets(gt->cache);
    double pct = g->w->models[mi].conf->cache_refresh_percentage_per_iteration;
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
    HPS_DEBUG("GPU cache %s/%s: periodic refresh done", g->w->models[mi].conf->name,
              g->w->models[mi].conf->embedding_table_names[t]);
}

/** Start due timer refreshes and advance the running ones (GPU thread). */
static void timer_refresh(struct worker_gpu *g, gctx_t *c)
{
    worker_t *w = g->w;
    long long now = mono_ns();
    pthread_rwlock_rdlock(&w->seg_lock);
    for (size_t mi = 0; w->db && mi < w->num_models && !atomic_load(&g->stop); mi++) {
        gmodel_t *gm = &g->models[mi];
        if (!atomic_load_explicit(&gm->active, memory_order_acquire) || !w->models[mi].resolved)
            continue;
        if (now >= gm->timer_next) {
            long long iv = (long long)w->models[mi].conf->refresh_interval * 1000000000LL;
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
    pthread_rwlock_unlock(&w->seg_lock);
}

/** Apply the new entries of table t's update log (seg_lock held). */
static void follow_table(struct worker_gpu *g, gctx_t *c, size_t mi, uint32_t t)
{
    worker_t *w = g->w;
    worker_model_t *m = &w->models[mi];
    gtable_t *gt = &g->models[mi].tables[t];
    uint32_t id = m->vdb_ids[t];
    if (!gt->has_log && !gt->refresh) {
        /* A log created after the preload (coordinator restarted with an
         * update source): read it from its start. */
        if (hps_shmdb_updlog_head(w->db, id, NULL, NULL) < 0)
            return;
        gt->has_log = true;
        gt->seq = 0;
    }
    for (int r = 0; r < UPD_MAX_READS && !atomic_load(&g->stop); r++) {
        if (gt->refresh) {
            uint64_t head = 0;
            bool has_log = hps_shmdb_updlog_head(w->db, id, &head, NULL) == 0;
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
        if (hps_shmdb_updlog_read(w->db, id, gt->seq, g->upd_raw, UPD_BATCH, &n, &next, &lapped) <
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
            ik[i] = w->key_bytes == 4 ? (int64_t)((uint32_t *)g->upd_raw)[i]
                                      : ((int64_t *)g->upd_raw)[i];
        if (refresh_staged(g, c, mi, t, n, false) < 0)
            return; /* the same keys again at the next poll */
        gt->seq = next;
        if (n < UPD_BATCH)
            return;
    }
}

/** One poll of every cached table's update log (the GPU thread). */
static void follow_logs(struct worker_gpu *g, gctx_t *c)
{
    worker_t *w = g->w;
    if (!g->upd_raw) {
        g->upd_raw = malloc(UPD_BATCH * sizeof(int64_t));
        g->upd_k32 = malloc(UPD_BATCH * sizeof(uint32_t));
        g->upd_found = malloc(UPD_BATCH);
        if (!g->upd_raw || !g->upd_k32 || !g->upd_found)
            return;
    }
    if (pair_reserve(&c->ikeys, UPD_BATCH * sizeof(int64_t)) < 0)
        return;
    pthread_rwlock_rdlock(&w->seg_lock);
    bool recreated = w->db && w->db != g->upd_db;
    for (size_t mi = 0; w->db && mi < w->num_models && !atomic_load(&g->stop); mi++) {
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
            if (w->models[mi].resolved && gt->refresher)
                follow_table(g, c, mi, t);
        }
    }
    if (recreated)
        g->upd_db = w->db;
    pthread_rwlock_unlock(&w->seg_lock);
}

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
}

/**
 * One shared table: drop dead processes from the entry (a process killed
 * mid-insert may have left sets locked: repair them), take over refreshing
 * when the refresher died (a full refresh first: its log position is
 * unknown), and, as refresher, publish the counters.
 */
static void reg_upkeep_table(struct worker_gpu *g, gtable_t *gt, const char *name)
{
    uint32_t dropped = 0;
    bool refresher = false;
    if (hps_shmdb_gcache_prune(g->w->db, gt->reg, gt->gen, &dropped, &refresher) < 0)
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
        hps_shmdb_gcache_publish(g->w->db, gt->reg, gt->gen, &k);
    }
}

/** Every REG_PERIOD_NS: upkeep of every shared table (GPU thread). */
static void reg_upkeep(struct worker_gpu *g)
{
    if (!due(&g->reg_last, REG_PERIOD_NS))
        return;
    worker_t *w = g->w;
    pthread_rwlock_rdlock(&w->seg_lock);
    for (size_t mi = 0; w->db && w->db == g->upd_db && mi < w->num_models; mi++) {
        gmodel_t *gm = &g->models[mi];
        if (!atomic_load_explicit(&gm->active, memory_order_acquire))
            continue;
        for (uint32_t t = 0; t < gm->num_tables; t++)
            if (gm->tables[t].reg != UINT32_MAX)
                reg_upkeep_table(g, &gm->tables[t], w->models[mi].conf->embedding_table_names[t]);
    }
    pthread_rwlock_unlock(&w->seg_lock);
}

/* ---- create and preload ------------------------------------------------ */

/** Rows of table t: the model files, else the volatile DB. */
static uint64_t table_rows(worker_t *w, size_t mi, uint32_t t)
{
    const hps_conf_model_t *mc = w->models[mi].conf;
    hps_modelfile_t *mf = NULL;
    uint64_t rows = 0;
    char err[256];
    if (hps_modelfile_open(mc->sparse_files[t], w->models[mi].dims[t], &mf, err, sizeof(err)) ==
        0) {
        rows = hps_modelfile_rows(mf);
        hps_modelfile_close(mf);
    }
    uint64_t live = 0;
    if (hps_shmdb_size(w->db, w->models[mi].vdb_ids[t], &live) == 0 && live > rows)
        rows = live;
    return rows;
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
        p->rc = write_staged(p->c, p->cache, p->k, p->dim, false);
    if (p->rc == 0 && p->k)
        p->rc = ck(cudaStreamSynchronize(p->c->stream), "preload");
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

/** A cache of slots rows: shareable (descriptor in *ret_fd) or private (-1). */
static int alloc_cache(struct worker_gpu *g, uint64_t slots, uint32_t dim, bool shared,
                       hps_gcache_t **ret, int *ret_fd)
{
    *ret_fd = -1;
    if (shared) {
        int rc = hps_gcache_create_shared(slots, dim, HPS_GCACHE_LRU, g->device, ret, ret_fd);
        if (rc != HPS_EIO)
            return rc;
        HPS_WARN("GPU cache: shareable device memory (CUDA VMM) unavailable; this cache is "
                 "private to the worker");
    }
    return hps_gcache_create(slots, dim, HPS_GCACHE_LRU, g->device, ret);
}

/** Create a cache of slots rows and insert the first want rows of the VDB. */
static int build_cache(struct worker_gpu *g, gctx_t *c, size_t mi, uint32_t t, uint64_t slots,
                       uint64_t want, bool shared, hps_gcache_t **ret, int *ret_fd)
{
    worker_t *w = g->w;
    struct preload p = {.c = c, .dim = w->models[mi].dims[t], .want = want};
    int fd = -1;
    int rc = alloc_cache(g, slots, p.dim, shared, &p.cache, &fd);
    if (rc < 0)
        return rc;
    rc = pair_reserve(&c->ikeys, PRELOAD_BATCH * sizeof(int64_t));
    rc = rc ? rc : pair_reserve(&c->ivals, (size_t)PRELOAD_BATCH * p.dim * sizeof(float));
    if (rc == 0 && want > 0) {
        rc = hps_shmdb_iterate(w->db, w->models[mi].vdb_ids[t], preload_row, &p);
        rc = rc == 1 ? 0 : rc;
        rc = rc ? rc : preload_flush(&p);
    }
    if (rc < 0) {
        hps_gcache_destroy(p.cache);
        if (fd >= 0)
            close(fd);
        return rc;
    }
    *ret = p.cache;
    *ret_fd = fd;
    return 0;
}

/* ---- sharing through the registry -------------------------------------- */

/**
 * Find the device's cache of table t in the registry or claim its creation;
 * waits while another worker creates it.  0 (*creator says which), or < 0:
 * not shared (no registry, other shape) and the caller builds a private one.
 */
static int reg_join(struct worker_gpu *g, size_t mi, uint32_t t, uint64_t slots,
                    hps_gcache_reg_t *e, bool *creator)
{
    worker_t *w = g->w;
    hps_gcache_reg_t want = {.table_id = w->models[mi].vdb_ids[t],
                             .device = g->device,
                             .dim = w->models[mi].dims[t],
                             .policy = HPS_GCACHE_LRU,
                             .capacity_rows = slots};
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 50000000L};
    int rc = g->share ? HPS_EBUSY : HPS_EUNSUPPORTED;
    while (g->share && !atomic_load(&g->stop)) {
        rc = hps_shmdb_gcache_claim(w->db, &want, e, creator);
        if (rc != HPS_EBUSY)
            break;
        nanosleep(&ts, NULL); /* another worker is preloading it */
    }
    if (rc < 0 && rc != HPS_EUNSUPPORTED)
        HPS_WARN("GPU cache %s/%s: not shared with the other workers (%s)",
                 w->models[mi].conf->name, w->models[mi].conf->embedding_table_names[t],
                 hps_strerror(rc));
    return rc;
}

/** Map the cache of entry e, asking its processes for the descriptor. */
static int reg_import(struct worker_gpu *g, const hps_gcache_reg_t *e, gtable_t *gt,
                      pid_t *ret_donor)
{
    const char *seg = g->w->conf->volatile_db.shared_memory_name;
    for (uint32_t i = 0; i < e->num_pids; i++) {
        int fd = -1;
        if (e->pids[i] == getpid() ||
            gshare_fetch(seg, e->pids[i], e->index, e->generation, JOIN_FETCH_MS, &fd) < 0)
            continue;
        hps_gcache_t *cache = NULL;
        int rc = hps_gcache_import(fd, e->capacity_rows, e->dim, (hps_gcache_policy_t)e->policy,
                                   g->device, &cache);
        if (rc == 0 && gshare_offer(g->share, e->index, e->generation, fd) == 0) {
            gt->cache = cache;
            gt->fd = fd;
            *ret_donor = e->pids[i];
            return 0;
        }
        hps_gcache_destroy(cache);
        close(fd);
    }
    return HPS_ENOTFOUND;
}

/** Publish a cache this worker created: offer its descriptor, then READY. */
static void reg_publish(struct worker_gpu *g, const hps_gcache_reg_t *e, gtable_t *gt)
{
    hps_shmdb_t *db = g->w->db;
    if (gt->fd < 0 || gshare_offer(g->share, e->index, e->generation, gt->fd) < 0 ||
        hps_shmdb_gcache_ready(db, e->index, e->generation, hps_gcache_capacity(gt->cache),
                               hps_gcache_bytes(gt->cache)) < 0) {
        hps_shmdb_gcache_leave(db, e->index, e->generation);
        return;
    }
    gt->reg = e->index;
    gt->gen = e->generation;
    gt->refresher = true;
}

/**
 * One table: capacity ceil(gpucacheper * rows).  A cache meant to hold the
 * whole table gets twice the slots (sets are filled by hashing), doubled
 * again until the preload evicted nothing, so gpucacheper = 1.0 hits 100%.
 * The device's other workers then map the same cache (registry + gshare).
 */
static int build_table(struct worker_gpu *g, gctx_t *c, size_t mi, uint32_t t)
{
    worker_model_t *m = &g->w->models[mi];
    gtable_t *gt = &g->models[mi].tables[t];
    uint64_t rows = table_rows(g->w, mi, t);
    uint64_t want = (uint64_t)ceil(m->conf->gpucacheper * (double)rows);
    bool whole = want >= rows;
    uint64_t slots = want ? want : 1;
    slots = whole ? 2 * slots : slots;
    /* Follow the update log from its head before the preload reads the VDB:
     * an update racing the preload is applied again later, never lost. */
    uint64_t head = 0;
    bool has_log = hps_shmdb_updlog_head(g->w->db, m->vdb_ids[t], &head, NULL) == 0;
    gt->fd = -1;
    gt->reg = UINT32_MAX;
    gt->dim = m->dims[t];
    gt->has_log = has_log;
    gt->seq = head;
    gt->refresh = false;
    gt->refresher = true;
    hps_gcache_reg_t e;
    bool creator = true;
    bool shared = reg_join(g, mi, t, slots, &e, &creator) == 0;
    if (atomic_load(&g->stop)) { /* stopped while another worker was preloading */
        if (shared)
            hps_shmdb_gcache_leave(g->w->db, e.index, e.generation);
        return HPS_ETIMEDOUT;
    }
    if (shared && !creator) {
        pid_t donor = 0;
        if (reg_import(g, &e, gt, &donor) == 0) {
            gt->reg = e.index;
            gt->gen = e.generation;
            gt->refresher = false;
            HPS_INFO("GPU cache %s/%s on device %d: mapped the shared cache (created by process "
                     "%d, handed over by process %d; %llu slots, %u processes)",
                     m->conf->name, m->conf->embedding_table_names[t], g->device,
                     (int)e.creator_pid, (int)donor, (unsigned long long)e.capacity_rows,
                     e.num_pids);
            return 0;
        }
        HPS_WARN("GPU cache %s/%s: no process handed out the shared cache; building a private one",
                 m->conf->name, m->conf->embedding_table_names[t]);
        hps_shmdb_gcache_leave(g->w->db, e.index, e.generation);
        shared = false;
    }
    for (int attempt = 0;; attempt++) {
        hps_gcache_t *cache = NULL;
        int fd = -1;
        int rc = build_cache(g, c, mi, t, slots, want, shared, &cache, &fd);
        if (rc < 0) {
            if (shared)
                hps_shmdb_gcache_leave(g->w->db, e.index, e.generation);
            return rc;
        }
        hps_gcache_stats_t st = {0};
        rc = hps_gcache_stats(cache, &st);
        if (rc == 0 && whole && st.evictions > 0 && attempt < 4) {
            hps_gcache_destroy(cache);
            if (fd >= 0)
                close(fd);
            slots *= 2;
            continue;
        }
        gt->cache = cache;
        gt->fd = fd;
        if (shared)
            reg_publish(g, &e, gt);
        HPS_INFO("GPU cache %s/%s on device %d: %llu of %llu rows preloaded, %llu slots%s",
                 m->conf->name, m->conf->embedding_table_names[t], g->device,
                 (unsigned long long)st.occupied, (unsigned long long)rows,
                 (unsigned long long)st.capacity_rows,
                 gt->reg != UINT32_MAX ? ", shared with the device's other workers" : "");
        return rc;
    }
}

/** Every table of model mi; the model is served by the GPU once all exist. */
static void build_model(struct worker_gpu *g, gctx_t *c, size_t mi)
{
    gmodel_t *gm = &g->models[mi];
    int rc = 0;
    for (uint32_t t = 0; t < gm->num_tables && rc == 0 && !atomic_load(&g->stop); t++)
        rc = build_table(g, c, mi, t);
    if (rc < 0) {
        HPS_WARN("model %s: no GPU cache (%s); serving it from the CPU path",
                 g->w->models[mi].conf->name, hps_strerror(rc));
        return;
    }
    hps_gcache_t **caches = malloc(gm->num_tables * sizeof(*caches));
    for (uint32_t t = 0; caches && t < gm->num_tables; t++)
        caches[t] = gm->tables[t].cache;
    if (!caches || hps_gcache_set_create(caches, (uint32_t)gm->num_tables, &gm->set) < 0)
        gm->set = NULL; /* per-table launches only */
    free(caches);
    timer_arm(g, mi);
    atomic_store_explicit(&gm->active, !atomic_load(&g->stop), memory_order_release);
}

static bool can_build(worker_t *w)
{
    return w->db && atomic_load(&w->resolved) && atomic_load(&w->coord_alive);
}

static void *gpu_thread(void *arg)
{
    struct worker_gpu *g = arg;
    worker_t *w = g->w;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 20000000L};
    while (!atomic_load(&g->stop) && !can_build(w))
        nanosleep(&ts, NULL);
    gctx_t *c = NULL;
    if (!atomic_load(&g->stop) && cudaSetDevice(g->device) == cudaSuccess && (c = ctx_new(g))) {
        pthread_rwlock_rdlock(&w->seg_lock);
        for (size_t mi = 0; mi < w->num_models && !atomic_load(&g->stop); mi++)
            if (g->models[mi].tables)
                build_model(g, c, mi);
        g->upd_db = w->db;
        pthread_rwlock_unlock(&w->seg_lock);
        g->upd_last = mono_ns();
    }
    atomic_store(&g->ready, true);
    if (c)
        serve_queue(g, c);
    ctx_free(c, g->ws_slots);
    return NULL;
}

/* ---- start, stop, metrics ---------------------------------------------- */

/** The device exists: else the worker stays in CPU mode. */
static bool have_device(int device)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || device >= n) {
        (void)cudaGetLastError();
        return false;
    }
    return true;
}

static int gpu_alloc(worker_t *w, struct worker_gpu *g)
{
    g->w = w;
    g->device = w->device;
    g->models = calloc(w->num_models ? w->num_models : 1, sizeof(gmodel_t));
    g->max_ctx = (size_t)w->conf->worker.http_threads + 2;
    g->ctxs = calloc(g->max_ctx, sizeof(gctx_t *));
    if (!g->models || !g->ctxs)
        return HPS_WEXIT_RUNTIME;
    for (size_t i = 0; i < w->num_models; i++) {
        gmodel_t *gm = &g->models[i];
        if (!w->models[i].conf->gpucache)
            continue;
        gm->num_tables = w->models[i].conf->num_tables;
        gm->ws_base = g->ws_slots;
        g->ws_slots += gm->num_tables;
        if (!(gm->tables = calloc(gm->num_tables, sizeof(gtable_t))))
            return HPS_WEXIT_RUNTIME;
    }
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    return 0;
}

/** Free table t's cache; a shared one leaves the registry first. */
static void table_free(struct worker_gpu *g, gtable_t *gt)
{
    worker_t *w = g->w;
    if (gt->reg != UINT32_MAX && gt->cache) {
        pthread_rwlock_rdlock(&w->seg_lock);
        if (w->db && w->db == g->upd_db)
            hps_shmdb_gcache_leave(w->db, gt->reg, gt->gen);
        pthread_rwlock_unlock(&w->seg_lock);
    }
    hps_gcache_destroy(gt->cache);
    if (gt->cache && gt->fd >= 0)
        close(gt->fd);
}

static void gpu_free(struct worker_gpu *g)
{
    gshare_stop(g->share); /* nobody can ask for a descriptor being closed */
    for (size_t i = 0; g->ctxs && i < g->num_ctx; i++)
        ctx_free(g->ctxs[i], g->ws_slots);
    for (size_t i = 0; g->models && i < g->w->num_models; i++) {
        hps_gcache_set_destroy(g->models[i].set);
        for (size_t t = 0; g->models[i].tables && t < g->models[i].num_tables; t++)
            table_free(g, &g->models[i].tables[t]);
        free(g->models[i].tables);
    }
    for (size_t i = 0; i < g->q_len; i++)
        free(g->queue[(g->q_head + i) % QUEUE_SLOTS].keys);
    free(g->models);
    free(g->ctxs);
    free(g->upd_raw);
    free(g->upd_k32);
    free(g->upd_found);
    free(g);
}

int worker_gpu_start(worker_t *w)
{
    bool any = false;
    for (size_t i = 0; i < w->num_models; i++)
        any |= w->models[i].conf->gpucache;
    if (!any)
        return 0;
    if (!have_device(w->device)) {
        HPS_WARN("gpucache = true but no CUDA device %d: serving from the CPU path", w->device);
        return 0;
    }
    struct worker_gpu *g = calloc(1, sizeof(*g));
    if (!g)
        return HPS_WEXIT_RUNTIME;
    int rc = gshare_start(w->conf->volatile_db.shared_memory_name, &g->share);
    if (rc < 0)
        HPS_WARN("GPU caches will not be shared with other workers: descriptor socket: %s",
                 hps_strerror(rc));
    if (gpu_alloc(w, g) != 0 || pthread_create(&g->thread, NULL, gpu_thread, g) != 0) {
        gpu_free(g);
        return HPS_WEXIT_RUNTIME;
    }
    g->started = true;
    w->gpu = g;
    return 0;
}

void worker_gpu_stop(worker_t *w)
{
    struct worker_gpu *g = w->gpu;
    if (!g)
        return;
    atomic_store(&g->stop, true);
    pthread_mutex_lock(&g->mu);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (g->started)
        pthread_join(g->thread, NULL);
    w->gpu = NULL;
    cudaSetDevice(g->device);
    gpu_free(g);
}

bool worker_gpu_ready(worker_t *w)
{
    return !w->gpu || atomic_load(&w->gpu->ready);
}

/** One metric over every active cache; v picks the value from the stats. */
static void metric(struct worker_gpu *g, hps_kserve_text_t *x, const hps_gcache_stats_t *st,
                   const uint64_t *procs, const char *name, const char *type, const char *help,
                   int v)
{
    hps_kserve_text_appendf(x, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    size_t s = 0;
    for (size_t i = 0; i < g->w->num_models; i++) {
        gmodel_t *gm = &g->models[i];
        if (!atomic_load_explicit(&gm->active, memory_order_acquire))
            continue;
        for (size_t t = 0; t < gm->num_tables; t++, s++) {
            const hps_gcache_stats_t *a = &st[s];
            uint64_t row = (uint64_t)gm->tables[t].dim * sizeof(float);
            uint64_t vals[] = {a->lookups,        a->hits,
                               a->inserts,        a->evictions,
                               a->occupied * row, a->capacity_rows * row,
                               a->updates,        atomic_load(&gm->tables[t].full_refreshes),
                               procs[s],          a->lock_timeouts};
            hps_kserve_text_appendf(x, "%s{model=\"", name);
            hps_kserve_text_append_label(x, g->w->models[i].conf->name);
            hps_kserve_text_appendf(x, "\",table=\"");
            hps_kserve_text_append_label(x, g->w->models[i].conf->embedding_table_names[t]);
            hps_kserve_text_appendf(x, "\",device=\"%d\"} %llu\n", g->device,
                                    (unsigned long long)vals[v]);
        }
    }
}

void worker_gpu_metrics(worker_t *w, hps_kserve_text_t *x)
{
    struct worker_gpu *g = w->gpu;
    if (!g || cudaSetDevice(g->device) != cudaSuccess)
        return;
    hps_gcache_stats_t *st = calloc(g->ws_slots ? g->ws_slots : 1, sizeof(*st));
    uint64_t *procs = calloc(g->ws_slots ? g->ws_slots : 1, sizeof(*procs));
    size_t s = 0;
    pthread_rwlock_rdlock(&w->seg_lock);
    for (size_t i = 0; st && procs && i < w->num_models; i++) {
        gmodel_t *gm = &g->models[i];
        if (!atomic_load_explicit(&gm->active, memory_order_acquire))
            continue;
        for (size_t t = 0; t < gm->num_tables; t++, s++) {
            gtable_t *gt = &gm->tables[t];
            hps_gcache_reg_t e;
            hps_gcache_stats(gt->cache, &st[s]);
            procs[s] = 1;
            if (gt->reg != UINT32_MAX && w->db && w->db == g->upd_db &&
                hps_shmdb_gcache_get(w->db, gt->reg, &e) == 0 && e.generation == gt->gen)
                procs[s] = e.num_pids;
        }
    }
    pthread_rwlock_unlock(&w->seg_lock);
    if (st && procs) {
        metric(g, x, st, procs, "nv_hps_embedding_cache_query_keys", "counter",
               "Keys looked up in the GPU embedding cache", 0);
        metric(g, x, st, procs, "nv_hps_embedding_cache_hit_keys", "counter",
               "Keys found in the GPU embedding cache", 1);
        metric(g, x, st, procs, "nv_hps_embedding_cache_insert_keys", "counter",
               "Rows inserted into the GPU embedding cache (preload included)", 2);
        metric(g, x, st, procs, "nv_hps_embedding_cache_eviction_keys", "counter",
               "Rows evicted from the GPU embedding cache", 3);
        metric(g, x, st, procs, "nv_hps_embedding_cache_occupancy_bytes", "gauge",
               "Bytes of embedding rows held by the GPU embedding cache", 4);
        metric(g, x, st, procs, "nv_hps_embedding_cache_capacity_bytes", "gauge",
               "Bytes of embedding rows the GPU embedding cache can hold", 5);
        metric(g, x, st, procs, "nv_hps_embedding_cache_refresh_keys", "counter",
               "Cached rows replaced by newer rows of the update log (or a full refresh)", 6);
        metric(g, x, st, procs, "nv_hps_embedding_cache_full_refreshes", "counter",
               "Full refreshes of the GPU embedding cache (update log lapped, segment "
               "recreated)",
               7);
        metric(g, x, st, procs, "nv_hps_embedding_cache_processes", "gauge",
               "Worker processes that map this GPU embedding cache (shared through CUDA VMM)", 8);
        metric(g, x, st, procs, "nv_hps_embedding_cache_lock_timeouts", "counter",
               "Cache writes skipped because a set stayed locked (a process killed mid-write)", 9);
    }
    hps_kserve_text_appendf(x,
                            "# HELP nv_hps_embedding_cache_dropped_inserts Background inserts "
                            "dropped (queue full)\n# TYPE nv_hps_embedding_cache_dropped_inserts "
                            "counter\nnv_hps_embedding_cache_dropped_inserts %llu\n",
                            (unsigned long long)atomic_load(&g->q_dropped));
    hps_kserve_text_appendf(x,
                            "# HELP nv_hps_pinned_output_bytes Bytes of OUTPUT0 buffers "
                            "page-locked for direct copies from the GPU\n# TYPE "
                            "nv_hps_pinned_output_bytes gauge\nnv_hps_pinned_output_bytes %llu\n",
                            (unsigned long long)atomic_load(&g->pinned_bytes));
    free(st);
    free(procs);
}
