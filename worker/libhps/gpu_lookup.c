/*
 * gpu_lookup.c -- the GPU lookup path (gpu.h): keys to the device, the
 * caches' lookup kernels, the miss positions back, then the misses of every
 * table through the one fetch path (fetch.c) and their synchronous or
 * background insertion.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"
#include "hps/log.h"
#include "kernels/miss.h"

#define MISS_SPEC_MIN 512 /* miss records copied back with the head at least */

/** One call as the GPU path sees it. */
typedef struct call {
    size_t mi;
    uint32_t nt;
    const int32_t *numkeys; /* (nt) host */
    const int64_t *keys;    /* (nkeys) host keys; NULL until needed when d_keys is set */
    const int64_t *d_keys;  /* (nkeys) device keys, or NULL (then keys) */
    float *out;             /* host rows, or NULL (then d_out) */
    float *d_out;           /* device rows, or NULL */
    float *direct;          /* out when page-locked: D2H straight into it */
    size_t nkeys, nfloats;
    bool nowait; /* HPS_EAGAIN rather than wait for the coordinator */
} call_t;

/*
 * One-launch lookup of every table (hps_gcache_lookup_tables; with device
 * output hps_gcache_miss_lookup_tables, which also splits the misses), for
 * requests of up to HPS_GCACHE_FUSED_MAX keys per table on average.  One
 * buffer holds the request and the result (c->keys, host and device alike):
 *   key_off u32[T+1] | out_off u64[T] | dim u32[T] | def f32[T] |
 *   keys i64[n] | mcount u32[T] | ticket u32 | midx u32[n] |
 *   out f32[floats] (16-byte aligned)
 * One H2D copies key_off .. ticket (mcount and ticket zeroed here), one D2H
 * mcount .. out.  Keys already on the device are read where they are (the
 * keys region is then empty).  T is always the model's table count here
 * (lookup_ctx gives the tables after a call's own no keys): the kernel
 * reads the offsets of every table of the set.  dim and def are read by the
 * device-side split of the misses (kernels/miss.h); the per-table path
 * uploads the same head (key_off .. def) when its output is on the device.
 */
struct mlayout {
    size_t key_off, out_off, dim, def, keys, mcount, ticket, midx, out, end;
};

static size_t align_up(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

/*
 * The layout of a call's buffer pair: the request head (key_off, out_off,
 * dim, def), the keys when they are not already on the device (kbuf of
 * them; 0 with device keys), the miss counts and the split's ticket (zero
 * on the host, so the copy of everything before midx zeroes them on the
 * device), the miss positions of nkeys keys, then the rows staged for the
 * host (nfloats).  The results copied back (mcount .. out or end) are one
 * range.
 */
static struct mlayout mlayout(uint32_t nt, size_t kbuf, size_t nkeys, size_t nfloats)
{
    struct mlayout L;
    L.key_off = 0;
    L.out_off = align_up((nt + 1) * sizeof(uint32_t), 8);
    L.dim = L.out_off + nt * sizeof(uint64_t);
    L.def = L.dim + nt * sizeof(uint32_t);
    L.keys = align_up(L.def + nt * sizeof(float), 8);
    L.mcount = L.keys + kbuf * sizeof(int64_t);
    L.ticket = L.mcount + nt * sizeof(uint32_t);
    L.midx = L.ticket + sizeof(uint32_t);
    L.out = align_up(L.midx + nkeys * sizeof(uint32_t), 16);
    L.end = L.out + nfloats * sizeof(float);
    return L;
}

/**
 * Write the request head of call k (key_off, out_off, dim, def at L's
 * offsets) into host buffer h.
 */
static void fill_head(const client_model_t *m, const call_t *k, char *h, const struct mlayout *L)
{
    uint32_t *ko = (uint32_t *)(h + L->key_off), *dim = (uint32_t *)(h + L->dim);
    uint64_t *fo = (uint64_t *)(h + L->out_off);
    float *def = (float *)(h + L->def);
    ko[0] = 0;
    for (uint32_t t = 0; t < k->nt; t++) {
        ko[t + 1] = ko[t] + (uint32_t)k->numkeys[t];
        fo[t] = t ? fo[t - 1] + (uint64_t)k->numkeys[t - 1] * m->dims[t - 1] : 0;
        dim[t] = m->dims[t];
        def[t] = m->defaults[t];
    }
}

/* ---- the misses -------------------------------------------------------------- */

/** The background part of a call: keys of the tables answered with
 *  defaults, gathered for one job. */
struct bgjob {
    uint32_t ntab;
    uint32_t *t;   /* (nt) */
    size_t *n;     /* (nt) */
    int64_t *keys; /* grown */
    size_t nkeys, cap;
};

static int bg_add(struct bgjob *b, uint32_t t, const keyset_t *s, const uint32_t *pick, size_t k)
{
    if (b->nkeys + k > b->cap) {
        size_t cap = (b->nkeys + k) * 2;
        int64_t *p = realloc(b->keys, cap * sizeof(int64_t));
        if (!p)
            return -ENOMEM;
        b->keys = p;
        b->cap = cap;
    }
    for (size_t j = 0; j < k; j++)
        b->keys[b->nkeys + j] = s->keys[pick[j]];
    b->nkeys += k;
    b->t[b->ntab] = t;
    b->n[b->ntab++] = k;
    return 0;
}

/** Queue the call's background part as one job (dropped, and counted, when
 *  the queue is full). */
static void enqueue(struct client_gpu *g, size_t mi, const struct bgjob *b)
{
    if (b->ntab == 0)
        return;
    size_t head = b->ntab * (sizeof(uint32_t) + sizeof(size_t));
    head = (head + 7) / 8 * 8;
    char *mem = malloc(head + b->nkeys * sizeof(int64_t) + 1);
    job_t j = {.mi = mi, .ntab = b->ntab, .mem = mem};
    if (mem) {
        j.n = (size_t *)mem;
        j.t = (uint32_t *)(mem + b->ntab * sizeof(size_t));
        j.keys = (int64_t *)(mem + head);
        memcpy(j.n, b->n, b->ntab * sizeof(size_t));
        memcpy(j.t, b->t, b->ntab * sizeof(uint32_t));
        memcpy(j.keys, b->keys, b->nkeys * sizeof(int64_t));
    }
    pthread_mutex_lock(&g->mu);
    if (mem && g->q_len < QUEUE_SLOTS) {
        g->queue[(g->q_head + g->q_len++) % QUEUE_SLOTS] = j;
        mem = NULL;
        pthread_cond_broadcast(&g->cv);
    } else {
        atomic_fetch_add_explicit(&g->q_dropped, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&g->mu);
    free(mem);
}

/**
 * The distinct keys of s worth inserting into cache: the found ones
 * (count > 0), at most its capacity, the most requested first (keyset.h
 * says why).  Their indices go to c->pick; returns how many, or -ENOMEM.
 */
static long pick_inserts(gctx_t *c, const keyset_t *s, const hps_gcache_t *cache)
{
    if (c->pick_cap < s->n) {
        uint32_t *p = realloc(c->pick, s->n * sizeof(*p));
        if (!p)
            return -ENOMEM;
        c->pick = p;
        c->pick_cap = s->n;
    }
    return keyset_top(s, (size_t)hps_gcache_capacity(cache), c->pick);
}

/** Per table of a call with misses: how they are answered. */
struct tmiss {
    uint32_t t;
    size_t ko, fo;          /* the table's first key and float in the call */
    size_t mc;              /* misses */
    const hps_gmiss_t *rec; /* (mc) each miss's key and table-relative position */
    keyset_t *ks;           /* distinct missed keys, in rec's order */
    bool sync;              /* fetched now (hit rate below hit_rate_threshold) */
    float *rows;            /* (ks->n, dim) fetched rows (sync) */
    uint8_t *found;         /* (ks->n) */
};

/**
 * Insert the found rows of every synchronously fetched table: staged
 * together (encoded in each cache's storage type, hps__client_encode_row),
 * two copies to the device and one insert launch per table, all
 * on c->istream, off the answer path: the rows are already in the output,
 * so nothing waits for them here.  The inserts of the context's previous
 * call are waited for first (hps__client_ctx_settle: the staging buffers
 * c->ikeys / c->ivals are reused), so a failure of those is reported by
 * this call; nothing else of a lookup context touches those buffers, and
 * freeing the context waits too.
 * @param xs  (nx) the call's tables with misses; the sync ones have rows,
 *            found and their keyset's counts (zeroed here for keys no
 *            layer had).
 * @return 0, -ENOMEM or HPS_EIO.
 */
static int insert_fetched(struct client_gpu *g, gctx_t *c, size_t mi, struct tmiss *xs, size_t nx)
{
    size_t keys = 0, bytes = 0;
    for (size_t i = 0; i < nx; i++)
        if (xs[i].sync) {
            keys += xs[i].ks->n;
            bytes += xs[i].ks->n * hps__client_row_bytes(g, mi, xs[i].t);
        }
    if (keys == 0)
        return 0;
    int rc = hps__client_ctx_settle(c);
    rc = rc ? rc : hps__client_pair_reserve(&c->ikeys, keys * sizeof(int64_t));
    rc = rc ? rc : hps__client_pair_reserve(&c->ivals, bytes);
    if (rc < 0)
        return rc;
    int64_t *ik = c->ikeys.h;
    char *iv = c->ivals.h;
    size_t *at = calloc(nx, sizeof(size_t)), ko = 0, fo = 0; /* each table's picks */
    if (!at)
        return -ENOMEM;
    for (size_t i = 0; i < nx && rc == 0; i++) {
        struct tmiss *x = &xs[i];
        uint32_t dim = g->cl->models[mi].dims[x->t];
        size_t rb = hps__client_row_bytes(g, mi, x->t);
        if (!x->sync)
            continue;
        keyset_t *s = x->ks;
        for (size_t j = 0; j < s->n; j++)
            s->count[j] = x->found[j] ? s->count[j] : 0;
        long k = pick_inserts(c, s, g->models[mi].tables[x->t].cache);
        if (k < 0) {
            rc = (int)k;
            break;
        }
        hps_gcache_t *cache = g->models[mi].tables[x->t].cache;
        for (long j = 0; j < k; j++) {
            ik[ko + (size_t)j] = s->keys[c->pick[j]];
            hps__client_encode_row(cache, dim, x->rows + (size_t)c->pick[j] * dim,
                                   iv + fo + (size_t)j * rb);
        }
        at[i] = (size_t)k;
        ko += (size_t)k;
        fo += (size_t)k * rb;
    }
    if (rc == 0 && ko)
        rc = hps__client_ck(cudaMemcpyAsync(c->ikeys.d, c->ikeys.h, ko * sizeof(int64_t),
                                            cudaMemcpyHostToDevice, c->istream),
                            "H2D keys");
    if (rc == 0 && ko)
        rc = hps__client_ck(
            cudaMemcpyAsync(c->ivals.d, c->ivals.h, fo, cudaMemcpyHostToDevice, c->istream),
            "H2D rows");
    c->ipending = ko > 0; /* why: the copies above may be in flight even if a launch failed */
    ko = fo = 0;
    for (size_t i = 0; i < nx && rc == 0; i++) {
        if (!at[i])
            continue;
        rc = hps_gcache_insert(g->models[mi].tables[xs[i].t].cache, (int64_t *)c->ikeys.d + ko,
                               (char *)c->ivals.d + fo, at[i], c->istream);
        ko += at[i];
        fo += at[i] * hps__client_row_bytes(g, mi, xs[i].t);
    }
    free(at);
    return rc;
}

/** Row j of table x's misses: its fetched row, or the default. */
static const float *miss_row(const struct tmiss *x, size_t j, uint32_t dim, const float *def)
{
    return x->sync ? x->rows + (size_t)x->ks->where[j] * dim : def;
}

/**
 * The fetched rows of the synchronous tables' misses into d_out (the
 * default-answered tables were filled on the device, kernels/miss.h):
 * staged on the host, two copies, one scatter launch per run of tables of
 * one dim, enqueued on c->stream and not waited for (the caller
 * synchronizes before the call returns; the staging buffers stay busy
 * until then).
 * @param xs         (nx) the call's tables with misses.
 * @param ret_queued set to whether anything was enqueued.
 * @return 0, -ENOMEM or HPS_EIO.
 */
static int scatter_device(struct client_gpu *g, gctx_t *c, const call_t *k, struct tmiss *xs,
                          size_t nx, bool *ret_queued)
{
    client_model_t *m = &g->cl->models[k->mi];
    size_t floats = 0, rows = 0;
    for (size_t i = 0; i < nx; i++)
        if (xs[i].sync) {
            floats += xs[i].mc * m->dims[xs[i].t];
            rows += xs[i].mc;
        }
    *ret_queued = false;
    if (rows == 0)
        return 0;
    int rc = hps__client_pair_reserve(&c->srows, floats * sizeof(float));
    rc = rc ? rc : hps__client_pair_reserve(&c->soff, rows * sizeof(uint64_t));
    if (rc < 0)
        return rc;
    float *sr = c->srows.h;
    uint64_t *so = c->soff.h;
    size_t r = 0, f = 0;
    for (size_t i = 0; i < nx; i++) {
        uint32_t dim = m->dims[xs[i].t];
        for (size_t j = 0; xs[i].sync && j < xs[i].mc; j++, r++, f += dim) {
            memcpy(sr + f, miss_row(&xs[i], j, dim, NULL), dim * sizeof(float));
            so[r] = xs[i].fo + (uint64_t)xs[i].rec[j].pos * dim;
        }
    }
    rc = hps__client_ck(cudaMemcpyAsync(c->srows.d, c->srows.h, floats * sizeof(float),
                                        cudaMemcpyHostToDevice, c->stream),
                        "H2D miss rows");
    if (rc == 0)
        rc = hps__client_ck(cudaMemcpyAsync(c->soff.d, c->soff.h, rows * sizeof(uint64_t),
                                            cudaMemcpyHostToDevice, c->stream),
                            "H2D miss places");
    *ret_queued = true; /* why: the copies may be in flight even if a launch fails */
    /* One launch per run of synchronous tables of one dim (the staging is
     * contiguous and the places absolute): one launch for a model of one dim. */
    r = f = 0;
    for (size_t i = 0; i < nx && rc == 0;) {
        if (!xs[i].sync) {
            i++;
            continue;
        }
        uint32_t dim = m->dims[xs[i].t];
        size_t rows_run = 0;
        for (; i < nx && (!xs[i].sync || m->dims[xs[i].t] == dim); i++)
            rows_run += xs[i].sync ? xs[i].mc : 0;
        rc = hps_gcache_scatter_rows((float *)c->srows.d + f, (uint64_t *)c->soff.d + r, rows_run,
                                     dim, k->d_out, c->stream);
        r += rows_run;
        f += rows_run * dim;
    }
    return rc;
}

/** The keys of the call on the host (device keys copied back once). */
static int need_host_keys(gctx_t *c, call_t *k)
{
    if (k->keys)
        return 0;
    int rc = hps__client_pair_reserve_hd(&c->hkeys, 0, k->nkeys * sizeof(int64_t));
    if (rc == 0)
        rc = hps__client_ck(cudaMemcpyAsync(c->hkeys.h, k->d_keys, k->nkeys * sizeof(int64_t),
                                            cudaMemcpyDeviceToHost, c->stream),
                            "D2H keys of the misses");
    if (rc == 0)
        rc = hps__client_ck(cudaStreamSynchronize(c->stream), "D2H keys");
    k->keys = c->hkeys.h;
    return rc;
}

/**
 * The call's missed keys as records (table after table, each table's
 * misses in midx's order) built on the host, for a lookup whose rows came
 * back to the host with its miss positions.
 * @param mcount  (nt) host: misses per table (ignored for empty tables).
 * @param midx    (nkeys) host: table t's positions at its first key.
 * @param ret     set to the records (in c->miss.h, valid until the
 *                context's next call).
 * @return 0, -ENOMEM or HPS_EIO (device keys copied back).
 */
static int host_records(gctx_t *c, call_t *k, const uint32_t *mcount, const uint32_t *midx,
                        hps_gmiss_t **ret)
{
    size_t total = 0;
    for (uint32_t t = 0; t < k->nt; t++)
        total += k->numkeys[t] ? mcount[t] : 0;
    int rc = total ? need_host_keys(c, k) : 0;
    rc = rc ? rc : hps__client_pair_reserve_hd(&c->miss, 0, total * sizeof(hps_gmiss_t) + 1);
    if (rc < 0)
        return rc;
    hps_gmiss_t *r = c->miss.h;
    size_t ko = 0;
    for (uint32_t t = 0; t < k->nt; t++) {
        size_t n = (size_t)k->numkeys[t], mc = n ? mcount[t] : 0;
        for (size_t j = 0; j < mc; j++, r++)
            *r = (hps_gmiss_t){.key = k->keys[ko + midx[ko + j]], .pos = midx[ko + j]};
        ko += n;
    }
    *ret = c->miss.h;
    return 0;
}

/**
 * The misses of every table: each distinct key once; the tables below
 * hit_rate_threshold fetched together, in one pass of the fetch path (one
 * miss-queue round trip), their rows placed and inserted (on c->istream,
 * not waited for); the others answered with defaults (already written on
 * the device when flags is set) and inserted in the background.
 * @param mcount  (nt) host: misses per table (ignored for empty tables).
 * @param flags   (nt) host: HPS_GMISS_SYNC per table as the device decided
 *                (device output, kernels/miss.h), or NULL: decided here.
 * @param recs    (sum mcount) host: the misses, table after table.
 * @return 0, HPS_EAGAIN (nowait, nothing counted or queued), -ENOMEM or
 *         HPS_EIO.  With device output the rows are complete on return.
 */
static int lookup_misses(struct client_gpu *g, gctx_t *c, call_t *k, const uint32_t *mcount,
                         const uint32_t *flags, const hps_gmiss_t *recs)
{
    client_model_t *m = &g->cl->models[k->mi];
    size_t ws_base = g->models[k->mi].ws_base, nx = 0, any = 0;
    for (uint32_t t = 0; t < k->nt; t++)
        any += k->numkeys[t] ? mcount[t] : 0;
    if (any == 0)
        return 0;
    int rc = 0;
    struct tmiss *xs = calloc(k->nt, sizeof(*xs));
    client_fetch_t *f = calloc(k->nt, sizeof(*f));
    struct bgjob bg = {.t = calloc(k->nt, sizeof(uint32_t)), .n = calloc(k->nt, sizeof(size_t))};
    size_t nf = 0, defaults = 0;
    if (!xs || !f || !bg.t || !bg.n)
        rc = -ENOMEM;
    /* 1: distinct keys per table, and how each table is answered */
    size_t ko = 0, fo = 0, ro = 0;
    for (uint32_t t = 0; rc == 0 && t < k->nt; t++) {
        size_t n = (size_t)k->numkeys[t], mc = n ? mcount[t] : 0;
        uint32_t dim = m->dims[t];
        struct tmiss *x = &xs[nx];
        *x = (struct tmiss){
            .t = t, .ko = ko, .fo = fo, .mc = mc, .rec = recs + ro, .ks = &c->ks[ws_base + t]};
        ko += n;
        fo += n * dim;
        ro += mc;
        if (mc == 0)
            continue;
        nx++;
        if (c->mkeys_cap < mc) {
            int64_t *p = realloc(c->mkeys, mc * sizeof(int64_t));
            if (!p) {
                rc = -ENOMEM;
                break;
            }
            c->mkeys = p;
            c->mkeys_cap = mc;
        }
        for (size_t j = 0; j < mc; j++)
            c->mkeys[j] = x->rec[j].key;
        if ((rc = keyset_build(x->ks, c->mkeys, mc)) < 0)
            break;
        x->sync = flags ? (flags[t] & HPS_GMISS_SYNC) != 0
                        : 1.0 - (double)mc / (double)n < m->conf->hit_rate_threshold;
        if (!x->sync) { /* defaults now, the rows in the background */
            defaults += mc;
            long p = pick_inserts(c, x->ks, g->models[k->mi].tables[t].cache);
            rc = p < 0 ? (int)p : p > 0 ? bg_add(&bg, t, x->ks, c->pick, (size_t)p) : 0;
            if (rc < 0)
                break;
            continue;
        }
        x->rows = malloc(x->ks->n * dim * sizeof(float) + 1);
        x->found = malloc(x->ks->n + 1);
        if (!x->rows || !x->found) {
            rc = -ENOMEM;
            break;
        }
        f[nf++] = (client_fetch_t){.table = t,
                                   .n = x->ks->n,
                                   .keys = x->ks->keys,
                                   .rows = x->rows,
                                   .found = x->found,
                                   .weight = x->ks->count};
    }
    /* 2: one pass of the fetch path for every synchronous table; under
     * nowait, HPS_EAGAIN before anything is counted or queued (and what the
     * caches' own counters counted of this call is taken back) */
    if (rc == 0 && nf)
        rc = hps__client_fetch(g->cl, m, f, nf, true, k->nowait);
    for (uint32_t t = 0; rc == HPS_EAGAIN && t < k->nt; t++) /* asked again: counted then */
        if (k->numkeys[t])
            hps_gcache_uncount(g->models[k->mi].tables[t].cache, (uint64_t)k->numkeys[t],
                               (uint64_t)k->numkeys[t] - mcount[t], c->stream);
    if (rc == 0) {
        atomic_fetch_add_explicit(&m->ctr.default_keys, defaults, memory_order_relaxed);
        enqueue(g, k->mi, &bg);
    }
    /* 3: rows to their places (device output: the fetched ones only, while
     * the host stages the inserts), then the inserts, off the answer path */
    bool queued = false;
    if (rc == 0 && k->d_out)
        rc = scatter_device(g, c, k, xs, nx, &queued);
    for (size_t i = 0; rc == 0 && !k->d_out && i < nx; i++) {
        uint32_t dim = m->dims[xs[i].t];
        for (size_t j = 0; j < xs[i].mc; j++) {
            float *dst = k->out + xs[i].fo + (size_t)xs[i].rec[j].pos * dim;
            if (xs[i].sync)
                memcpy(dst, miss_row(&xs[i], j, dim, NULL), dim * sizeof(float));
            else
                hps__client_fill(dst, 1, dim, m->defaults[xs[i].t]);
        }
    }
    if (rc == 0)
        rc = insert_fetched(g, c, k->mi, xs, nx);
    if (queued) { /* the output is complete when the call returns */
        int rs = hps__client_ck(cudaStreamSynchronize(c->stream), "scatter misses");
        rc = rc ? rc : rs;
    }
    for (size_t i = 0; xs && i < nx; i++) {
        free(xs[i].rows);
        free(xs[i].found);
    }
    free(xs);
    free(f);
    free(bg.t);
    free(bg.n);
    free(bg.keys);
    return rc;
}

/**
 * Bytes of the head of c->miss (kernels/miss.h's d_head: 2 * nt uint32),
 * rounded so that the records after it are 16-byte aligned.
 */
static size_t miss_head(uint32_t nt)
{
    return (2 * (size_t)nt * sizeof(uint32_t) + 15) / 16 * 16;
}

/** Room in c->miss for the split of call k: its head and a record per key.
 *  @return 0 or -ENOMEM. */
static int miss_reserve(gctx_t *c, const call_t *k)
{
    return hps__client_pair_reserve(&c->miss, miss_head(k->nt) + k->nkeys * sizeof(hps_gmiss_t));
}

/**
 * Enqueue the copy back of the split's head and of the first
 * max(c->miss_spec, MISS_SPEC_MIN) records (miss_rest copies any more);
 * with no keys, a zero head on the host instead.  c->miss is reserved.
 * @return 0 or HPS_EIO.
 */
static int miss_copy(gctx_t *c, const call_t *k)
{
    size_t hb = miss_head(k->nt),
           spec = c->miss_spec < MISS_SPEC_MIN ? MISS_SPEC_MIN : c->miss_spec;
    spec = spec < k->nkeys ? spec : k->nkeys;
    if (k->nkeys == 0) { /* no keys, no misses (and maybe no key pointer) */
        memset(c->miss.h, 0, hb);
        return 0;
    }
    return hps__client_ck(cudaMemcpyAsync(c->miss.h, c->miss.d, hb + spec * sizeof(hps_gmiss_t),
                                          cudaMemcpyDeviceToHost, c->stream),
                          "D2H misses");
}

/**
 * Enqueue the device-side split of a device-output call's misses after
 * per-table lookups (hps_gcache_miss_gather: defaults written into d_out,
 * misses compacted into c->miss.d) and miss_copy.  The one-launch lookup
 * splits them itself (enqueue_multi).
 * @param meta     device: the request head (mlayout's key_off, out_off,
 *                 dim, def at L's offsets).
 * @param dk       device, int64 (nkeys): the call's keys.
 * @param d_midx   device, uint32 (nkeys): miss positions of the lookup.
 * @param d_mcount device, uint32 (nt): miss counts of the lookup.
 * Stream: c->stream, after the lookup; the caller synchronizes.
 * @return 0, -ENOMEM or HPS_EIO.
 */
static int miss_enqueue(struct client_gpu *g, gctx_t *c, const call_t *k, const char *meta,
                        const struct mlayout *L, const int64_t *dk, const uint32_t *d_midx,
                        const uint32_t *d_mcount)
{
    int rc = miss_reserve(c, k);
    if (rc < 0 || k->nkeys == 0)
        return rc < 0 ? rc : miss_copy(c, k);
    rc = hps_gcache_miss_gather(
        k->nt, (const uint32_t *)(meta + L->key_off), (const uint64_t *)(meta + L->out_off),
        (const uint32_t *)(meta + L->dim), (const float *)(meta + L->def),
        g->cl->models[k->mi].conf->hit_rate_threshold, dk, d_midx, d_mcount, k->d_out,
        (uint32_t *)c->miss.d, (hps_gmiss_t *)((char *)c->miss.d + miss_head(k->nt)), c->stream);
    return rc ? rc : miss_copy(c, k);
}

/**
 * After miss_enqueue's copy has completed: the records beyond the ones it
 * copied, when there are more (one more copy and synchronization), and the
 * next call's guess (twice this call's misses).
 * @return 0 or HPS_EIO.
 */
static int miss_rest(gctx_t *c, const call_t *k)
{
    const uint32_t *head = c->miss.h;
    size_t hb = miss_head(k->nt), total = 0;
    size_t spec = c->miss_spec < MISS_SPEC_MIN ? MISS_SPEC_MIN : c->miss_spec;
    spec = spec < k->nkeys ? spec : k->nkeys;
    for (uint32_t t = 0; t < k->nt; t++)
        total += head[t];
    c->miss_spec = 2 * total;
    if (total <= spec)
        return 0;
    int rc = hps__client_ck(cudaMemcpyAsync((char *)c->miss.h + hb + spec * sizeof(hps_gmiss_t),
                                            (char *)c->miss.d + hb + spec * sizeof(hps_gmiss_t),
                                            (total - spec) * sizeof(hps_gmiss_t),
                                            cudaMemcpyDeviceToHost, c->stream),
                            "D2H more misses");
    return rc ? rc : hps__client_ck(cudaStreamSynchronize(c->stream), "D2H more misses");
}

/**
 * The misses of a device-output call after miss_enqueue's copy completed:
 * the rest of the records, then lookup_misses with the device's decisions.
 */
static int device_misses(struct client_gpu *g, gctx_t *c, call_t *k)
{
    int rc = miss_rest(c, k);
    const uint32_t *head = c->miss.h;
    return rc ? rc
              : lookup_misses(g, c, k, head, head + k->nt,
                              (const hps_gmiss_t *)((char *)c->miss.h + miss_head(k->nt)));
}

/* ---- the lookup kernels ---------------------------------------------------- */

/**
 * Whether host buffer out is page-locked (a buffer registered by
 * hps_client_host_register, or allocated pinned): the rows are then copied
 * from the device straight into it, not through a staging buffer and a
 * memcpy.
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
 * Per-table lookups, synchronized: keys H2D (unless on the device), every
 * table's lookup and the D2H of the results: the rows into d_out when set
 * (left on the device; the misses split there, miss_enqueue, with the
 * request head uploaded from c->meta), else to k->direct, else to c->out.h.
 */
static int launch(struct client_gpu *g, gctx_t *c, const call_t *k)
{
    float *dst = k->d_out ? k->d_out : (float *)c->out.d;
    gmodel_t *gm = &g->models[k->mi];
    const int64_t *dk = k->d_keys ? k->d_keys : c->keys.d;
    struct mlayout L = mlayout(k->nt, 0, 0, 0); /* the head only: key_off .. def */
    int rc = k->d_keys
                 ? 0
                 : hps__client_ck(cudaMemcpyAsync(c->keys.d, c->keys.h, k->nkeys * sizeof(int64_t),
                                                  cudaMemcpyHostToDevice, c->stream),
                                  "H2D keys");
    if (rc == 0 && k->d_out && (rc = hps__client_pair_reserve(&c->meta, L.keys)) == 0) {
        fill_head(&g->cl->models[k->mi], k, c->meta.h, &L);
        rc = hps__client_ck(
            cudaMemcpyAsync(c->meta.d, c->meta.h, L.keys, cudaMemcpyHostToDevice, c->stream),
            "H2D request head");
    }
    size_t ko = 0, fo = 0;
    for (uint32_t t = 0; t < k->nt && rc == 0; t++) {
        size_t n = (size_t)k->numkeys[t];
        hps_gcache_ws_t *ws = NULL;
        if (n == 0)
            continue;
        rc = hps__client_ctx_ws(c, gm->ws_base + t, gm->tables[t].cache, n, &ws);
        if (rc == 0)
            rc = hps_gcache_lookup(gm->tables[t].cache, ws, dk + ko, n, dst + fo, NULL,
                                   (uint32_t *)c->midx.d + ko, (uint32_t *)c->mcount.d + t,
                                   c->stream);
        ko += n;
        fo += n * gm->tables[t].dim;
    }
    if (rc == 0 && !k->d_out)
        rc = hps__client_ck(cudaMemcpyAsync(k->direct ? k->direct : c->out.h, c->out.d,
                                            k->nfloats * sizeof(float), cudaMemcpyDeviceToHost,
                                            c->stream),
                            "D2H rows");
    if (rc == 0 && !k->d_out)
        rc = hps__client_ck(cudaMemcpyAsync(c->midx.h, c->midx.d, k->nkeys * sizeof(uint32_t),
                                            cudaMemcpyDeviceToHost, c->stream),
                            "D2H miss index");
    if (rc == 0 && !k->d_out)
        rc = hps__client_ck(cudaMemcpyAsync(c->mcount.h, c->mcount.d, k->nt * sizeof(uint32_t),
                                            cudaMemcpyDeviceToHost, c->stream),
                            "D2H miss count");
    if (rc == 0 && k->d_out)
        rc = miss_enqueue(g, c, k, c->meta.d, &L, dk, c->midx.d, c->mcount.d);
    if (rc == 0)
        rc = hps__client_ck(cudaStreamSynchronize(c->stream), "lookup");
    return rc;
}

/*
 * Enqueue the one-launch lookup of a call prepared in c->keys (layout L).
 * With k->direct (pinned host memory) the rows are copied there by a D2H of
 * their own and the result's D2H stops before them.
 */
static int enqueue_multi(struct client_gpu *g, gctx_t *c, const call_t *k, const struct mlayout *L)
{
    char *h = c->keys.h, *d = c->keys.d;
    const int64_t *dk = k->d_keys ? k->d_keys : (const int64_t *)(d + L->keys);
    /* the head, the keys unless on the device, the zeroed counts and ticket */
    int rc = hps__client_ck(cudaMemcpyAsync(d, h, L->midx, cudaMemcpyHostToDevice, c->stream),
                            "H2D request");
    if (rc == 0 && k->d_out && k->nkeys) /* the misses split by the kernel's last block */
        rc = hps_gcache_miss_lookup_tables(
            g->models[k->mi].set, dk, k->nkeys, (uint32_t *)(d + L->key_off),
            (uint64_t *)(d + L->out_off), (const float *)(d + L->def),
            g->cl->models[k->mi].conf->hit_rate_threshold, k->d_out, (uint32_t *)(d + L->midx),
            (uint32_t *)(d + L->mcount), (uint32_t *)(d + L->ticket), (uint32_t *)c->miss.d,
            (hps_gmiss_t *)((char *)c->miss.d + miss_head(k->nt)), c->stream);
    else if (rc == 0 && !k->d_out)
        rc = hps_gcache_lookup_tables(g->models[k->mi].set, dk, k->nkeys,
                                      (uint32_t *)(d + L->key_off), (uint64_t *)(d + L->out_off),
                                      (float *)(d + L->out), (uint32_t *)(d + L->midx),
                                      (uint32_t *)(d + L->mcount), c->stream);
    /* end of the result D2H: with d_out none (the misses come back split:
     * miss_copy) */
    size_t to = k->d_out ? L->mcount : k->direct ? L->out : L->end;
    if (rc == 0 && k->direct)
        rc = hps__client_ck(cudaMemcpyAsync(k->direct, d + L->out, k->nfloats * sizeof(float),
                                            cudaMemcpyDeviceToHost, c->stream),
                            "D2H rows");
    if (rc == 0 && to > L->mcount)
        rc = hps__client_ck(cudaMemcpyAsync(h + L->mcount, d + L->mcount, to - L->mcount,
                                            cudaMemcpyDeviceToHost, c->stream),
                            "D2H result");
    return rc;
}

static bool graph_same(const graph_t *a, const graph_t *b)
{
    return a->set == b->set && a->gen == b->gen && a->nkeys == b->nkeys &&
           a->nfloats == b->nfloats && a->h == b->h && a->d == b->d;
}

/** Capture enqueue_multi for shape gk into a graph slot; NULL if CUDA
 *  refuses (nothing is then enqueued, and the caller launches the plain
 *  way). */
static cudaGraphExec_t graph_capture(struct client_gpu *g, gctx_t *c, const call_t *k,
                                     const struct mlayout *L, const graph_t *gk)
{
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    if (cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    int rc = enqueue_multi(g, c, k, L);
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
    *slot = *gk;
    slot->exec = exec;
    return exec;
}

/**
 * The captured graph for shape gk: one kept, or captured now when gk came
 * just before too (a shape that repeats; capturing costs more than the
 * launches it replaces), else NULL.
 */
static cudaGraphExec_t graph_for(struct client_gpu *g, gctx_t *c, const call_t *k,
                                 const struct mlayout *L, const graph_t *gk)
{
    for (int i = 0; i < GRAPH_SLOTS; i++)
        if (c->graphs[i].exec && graph_same(&c->graphs[i], gk))
            return c->graphs[i].exec;
    if (!graph_same(&c->want, gk)) {
        c->want = *gk;
        return NULL;
    }
    return graph_capture(g, c, k, L, gk);
}

/*
 * The one-launch lookup of a call, synchronized.  Rows to d_out (left on
 * the device, the misses split there: miss_enqueue), to k->direct (pinned
 * host memory), or into c->keys.  The last case with host keys (small host
 * responses) replays a CUDA graph of the three steps when the call's shape
 * repeats.
 */
static int launch_multi(struct client_gpu *g, gctx_t *c, const call_t *k, struct mlayout *ret)
{
    client_model_t *m = &g->cl->models[k->mi];
    /* with d_out the rows stay on the device; with direct the host needs no room for them */
    struct mlayout L =
        mlayout(k->nt, k->d_keys ? 0 : k->nkeys, k->nkeys, k->d_out ? 0 : k->nfloats);
    int rc = hps__client_pair_reserve_hd(&c->keys, L.end, k->direct ? L.out : L.end);
    rc = rc ? rc : k->d_out ? miss_reserve(c, k) : 0;
    if (rc < 0)
        return rc;
    char *h = c->keys.h;
    fill_head(m, k, h, &L);
    if (!k->d_keys)
        memcpy(h + L.keys, k->keys, k->nkeys * sizeof(int64_t));
    memset(h + L.mcount, 0, L.midx - L.mcount); /* the counts and the ticket */
    const gmodel_t *gm = &g->models[k->mi];
    graph_t gk = {.set = gm->set,
                  .gen = gm->gen,
                  .nkeys = k->nkeys,
                  .nfloats = k->nfloats,
                  .h = c->keys.h,
                  .d = c->keys.d};
    bool plain = k->direct || k->d_out || k->d_keys || c->graph_off;
    cudaGraphExec_t x = plain ? NULL : graph_for(g, c, k, &L, &gk);
    if (x)
        rc = hps__client_ck(cudaGraphLaunch(x, c->stream), "graph launch");
    else
        rc = enqueue_multi(g, c, k, &L);
    if (rc == 0 && k->d_out)
        rc = miss_copy(c, k);
    if (rc == 0)
        rc = hps__client_ck(cudaStreamSynchronize(c->stream), "lookup");
    *ret = L;
    return rc;
}

/** One call: hits from the caches, then the misses. */
static int lookup_ctx(struct client_gpu *g, gctx_t *c, call_t *k)
{
    const gmodel_t *gm = &g->models[k->mi];
    if (gm->set && k->nkeys <= (size_t)k->nt * HPS_GCACHE_FUSED_MAX) {
        /* The one-launch kernel reads the offsets of every table of the
         * set: a call of the first nt tables (hps_client_lookup_table of
         * table nt - 1) gives the others no keys. */
        int32_t all[HPS_CONF_MAX_TABLES];
        if (k->nt < gm->num_tables) {
            memcpy(all, k->numkeys, k->nt * sizeof(int32_t));
            memset(all + k->nt, 0, (gm->num_tables - k->nt) * sizeof(int32_t));
            k->numkeys = all;
            k->nt = (uint32_t)gm->num_tables;
        }
        struct mlayout L;
        int rc = launch_multi(g, c, k, &L);
        if (rc < 0)
            return rc;
        if (k->d_out)
            return device_misses(g, c, k);
        char *h = c->keys.h;
        hps_gmiss_t *r = NULL;
        if (k->out && !k->direct)
            memcpy(k->out, h + L.out, k->nfloats * sizeof(float));
        if ((rc = host_records(c, k, (uint32_t *)(h + L.mcount), (uint32_t *)(h + L.midx), &r)) < 0)
            return rc;
        return lookup_misses(g, c, k, (uint32_t *)(h + L.mcount), NULL, r);
    }
    int rc = k->d_keys ? 0 : hps__client_pair_reserve(&c->keys, k->nkeys * sizeof(int64_t));
    /* rows on the device unless d_out holds them; staged on the host only
     * when they cannot go straight to out */
    size_t rows = k->nfloats * sizeof(float);
    if (rc == 0 && !k->d_out)
        rc = hps__client_pair_reserve_hd(&c->out, rows, k->direct ? 0 : rows);
    rc = rc ? rc : hps__client_pair_reserve(&c->midx, k->nkeys * sizeof(uint32_t));
    rc = rc ? rc : hps__client_pair_reserve(&c->mcount, k->nt * sizeof(uint32_t));
    if (rc < 0)
        return rc;
    if (!k->d_keys)
        memcpy(c->keys.h, k->keys, k->nkeys * sizeof(int64_t));
    if ((rc = launch(g, c, k)) < 0)
        return rc;
    if (k->d_out)
        return device_misses(g, c, k);
    hps_gmiss_t *r = NULL;
    if (k->out && !k->direct)
        memcpy(k->out, c->out.h, k->nfloats * sizeof(float));
    if ((rc = host_records(c, k, c->mcount.h, c->midx.h, &r)) < 0)
        return rc;
    return lookup_misses(g, c, k, c->mcount.h, NULL, r);
}

int hps__client_gpu_lookup(hps_client_t *cl, size_t mi, uint32_t nt, const int32_t *numkeys,
                           const int64_t *keys, const int64_t *d_keys, float *out, float *d_out,
                           void *stream, bool nowait)
{
    struct client_gpu *g = cl->gpu;
    if (!g || !g->models[mi].tables ||
        !atomic_load_explicit(&g->models[mi].active, memory_order_acquire))
        return 1;
    if (cudaSetDevice(g->device) != cudaSuccess) {
        (void)cudaGetLastError();
        return 1;
    }
    call_t k = {.nowait = nowait,
                .mi = mi,
                .nt = nt,
                .numkeys = numkeys,
                .keys = keys,
                .d_keys = d_keys,
                .out = out,
                .d_out = d_out};
    for (uint32_t t = 0; t < nt; t++) {
        k.nkeys += (size_t)numkeys[t];
        k.nfloats += (size_t)numkeys[t] * cl->models[mi].dims[t];
    }
    k.direct = out && host_pinned(out) ? out : NULL;
    gctx_t *c = hps__client_ctx_get(g);
    if (!c)
        return 1;
    const gmodel_t *gm = &g->models[mi];
    if (gm->ws_base + gm->num_tables > c->nslots && hps__client_ctx_slots(g, c) < 0) {
        hps__client_ctx_put(g, c); /* a model learned since c was made; no memory: the CPU path */
        return 1;
    }
    int rc = 0;
    if (d_keys || d_out) /* device buffers: after the caller's work on its stream */
        rc = hps__client_ck(cudaEventRecord(c->ev, (cudaStream_t)stream), "record caller stream");
    if (rc == 0 && (d_keys || d_out))
        rc = hps__client_ck(cudaStreamWaitEvent(c->stream, c->ev, 0), "wait for caller stream");
    if (rc == 0)
        rc = lookup_ctx(g, c, &k);
    hps__client_ctx_put(g, c);
    if (rc < 0 && rc != HPS_EAGAIN)
        hps__client_fail(rc, "GPU lookup on device %d failed: %s", g->device, hps_strerror(rc));
    return rc;
}

#define NOTE_EVERY 16  /* fetch-path calls per background insert of their keys */
#define NOTE_KEYS  256 /* about the most keys one such insert takes from a call */

void hps__client_gpu_note(hps_client_t *cl, size_t mi, uint32_t nt, const int32_t *numkeys,
                          const int64_t *keys)
{
    struct client_gpu *g = cl->gpu;
    if (!g || !g->models[mi].tables ||
        !atomic_load_explicit(&g->models[mi].active, memory_order_acquire) ||
        atomic_fetch_add_explicit(&g->notes, 1, memory_order_relaxed) % NOTE_EVERY)
        return;
    size_t nk = 0;
    for (uint32_t i = 0; i < nt; i++)
        nk += (size_t)numkeys[i];
    if (nk == 0)
        return;
    /* every step-th key of each table: a large call costs the background
     * thread about NOTE_KEYS keys, not as much work as the call itself */
    size_t step = (nk + NOTE_KEYS - 1) / NOTE_KEYS;
    uint32_t *t = malloc(nt * sizeof(uint32_t) + 1);
    size_t *n = malloc(nt * sizeof(size_t) + 1);
    int64_t *k = malloc((nk / step + nt) * sizeof(int64_t) + 1);
    struct bgjob b = {.t = t, .n = n, .keys = k};
    for (uint32_t i = 0, ko = 0; t && n && k && i < nt; ko += (uint32_t)numkeys[i++]) {
        size_t c = 0;
        for (size_t j = 0; j < (size_t)numkeys[i]; j += step)
            k[b.nkeys + c++] = keys[ko + j];
        if (c == 0)
            continue;
        b.t[b.ntab] = i;
        b.n[b.ntab++] = c;
        b.nkeys += c;
    }
    if (t && n && k)
        enqueue(g, mi, &b); /* copies them */
    free(t);
    free(n);
    free(k);
}

int hps__client_gpu_pin(hps_client_t *cl, void *buf, size_t bytes)
{
    struct client_gpu *g = cl->gpu;
    if (!g)
        return HPS_EUNSUPPORTED;
    if (cudaSetDevice(g->device) != cudaSuccess ||
        hps__client_ck(cudaHostRegister(buf, bytes, cudaHostRegisterPortable),
                       "page-lock an output buffer") < 0)
        return HPS_EIO;
    atomic_fetch_add_explicit(&g->pinned_bytes, bytes, memory_order_relaxed);
    return 0;
}

void hps__client_gpu_unpin(hps_client_t *cl, void *buf, size_t bytes)
{
    struct client_gpu *g = cl->gpu;
    if (!g)
        return;
    cudaSetDevice(g->device);
    /* Counted out only when it was pinned: a buffer never registered (or
     * registered elsewhere) leaves pinned_bytes as it is. */
    if (hps__client_ck(cudaHostUnregister(buf), "unpin an output buffer") == 0)
        atomic_fetch_sub_explicit(&g->pinned_bytes, bytes, memory_order_relaxed);
}
