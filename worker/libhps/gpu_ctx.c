/*
 * gpu_ctx.c -- the GPU cache manager's CUDA helpers and lookup contexts: a
 * context (stream, pinned host and device buffers, one gcache workspace per
 * table) is owned by one lookup or by the GPU thread at a time; lookups
 * take one from the pool and give it back (gpu_internal.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"
#include "hps/log.h"
#include "kernels/convert.h"

/** True (and *last restarted) when period_ns passed since *last. */
bool hps__client_due(long long *last, long long period_ns)
{
    long long now = hps__client_mono();
    if (now - *last < period_ns)
        return false;
    *last = now;
    return true;
}

/* ---- CUDA helpers ------------------------------------------------------ */

int hps__client_ck(cudaError_t e, const char *what)
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
    int rc = host ? hps__client_ck(cudaMallocHost(buf, want), "cudaMallocHost")
                  : hps__client_ck(cudaMalloc(buf, want), "cudaMalloc");
    if (rc == 0)
        *cap = want;
    return rc;
}

/** Make p hold at least dbytes on the device and hbytes on the host. */
int hps__client_pair_reserve_hd(pair_t *p, size_t dbytes, size_t hbytes)
{
    int rc = grow(&p->d, &p->dcap, dbytes, false);
    return rc ? rc : grow(&p->h, &p->hcap, hbytes, true);
}

int hps__client_pair_reserve(pair_t *p, size_t bytes)
{
    return hps__client_pair_reserve_hd(p, bytes, bytes);
}

/* ---- lookup contexts --------------------------------------------------- */

void hps__client_ctx_free(gctx_t *c)
{
    if (!c)
        return;
    hps__client_ctx_settle(c);
    for (size_t i = 0; c->ws && i < c->nslots; i++)
        hps_gcache_ws_destroy(c->ws[i]);
    free(c->ws);
    free(c->ws_cap);
    pair_t *ps[] = {&c->keys, &c->out,   &c->midx, &c->mcount, &c->ikeys, &c->ivals,
                    &c->ienc, &c->srows, &c->soff, &c->hkeys,  &c->miss,  &c->meta};
    for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++)
        pair_free(ps[i]);
    for (size_t i = 0; c->ks && i < c->nslots; i++)
        keyset_free(&c->ks[i]);
    free(c->ks);
    free(c->pick);
    free(c->mkeys);
    for (int i = 0; i < GRAPH_SLOTS; i++)
        if (c->graphs[i].exec)
            cudaGraphExecDestroy(c->graphs[i].exec);
    if (c->ev)
        cudaEventDestroy(c->ev);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    if (c->istream)
        cudaStreamDestroy(c->istream);
    free(c);
}

gctx_t *hps__client_ctx_new(struct client_gpu *g)
{
    gctx_t *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->nslots = g->ws_slots;
    c->ws = calloc(c->nslots + 1, sizeof(*c->ws));
    c->ws_cap = calloc(c->nslots + 1, sizeof(*c->ws_cap));
    c->ks = calloc(c->nslots + 1, sizeof(*c->ks));
    if (!c->ws || !c->ws_cap || !c->ks ||
        hps__client_ck(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "stream") <
            0 ||
        hps__client_ck(cudaStreamCreateWithFlags(&c->istream, cudaStreamNonBlocking),
                       "insert stream") < 0 ||
        hps__client_ck(cudaEventCreateWithFlags(&c->ev, cudaEventDisableTiming), "event") < 0) {
        hps__client_ctx_free(c);
        return NULL;
    }
    return c;
}

/**
 * Wait for the inserts a lookup left running on c->istream (gpu_lookup.c's
 * insert_fetched returns before they complete).  Host memory only changes
 * hands here: c->ikeys.h / c->ivals.h (pinned, read by the inserts' H2D
 * copies) and the device twins may be rewritten or freed once it returns.
 * @param c  a context owned by the caller (or being freed).
 * @return 0, or HPS_EIO / -ENOMEM (logged) when the inserts failed.
 */
int hps__client_ctx_settle(gctx_t *c)
{
    if (!c->ipending)
        return 0;
    c->ipending = false;
    return hps__client_ck(cudaStreamSynchronize(c->istream), "synchronous inserts");
}

/** Take a context: a free one, a new one below the pool size, or wait. */
gctx_t *hps__client_ctx_get(struct client_gpu *g)
{
    pthread_mutex_lock(&g->mu);
    while (!g->free_ctx && g->num_ctx >= g->max_ctx)
        pthread_cond_wait(&g->cv, &g->mu);
    gctx_t *c = g->free_ctx;
    if (c) {
        g->free_ctx = c->next;
    } else if ((c = hps__client_ctx_new(g))) {
        g->ctxs[g->num_ctx++] = c;
    }
    pthread_mutex_unlock(&g->mu);
    return c;
}

void hps__client_ctx_put(struct client_gpu *g, gctx_t *c)
{
    pthread_mutex_lock(&g->mu);
    c->next = g->free_ctx;
    g->free_ctx = c;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

int hps__client_ctx_slots(struct client_gpu *g, gctx_t *c)
{
    int rc = 0;
    pthread_mutex_lock(&g->mu);
    size_t n = g->ws_slots;
    if (n > c->nslots) {
        hps_gcache_ws_t **ws = realloc(c->ws, (n + 1) * sizeof(*ws));
        uint64_t *cap = ws ? realloc(c->ws_cap, (n + 1) * sizeof(*cap)) : NULL;
        keyset_t *ks = cap ? realloc(c->ks, (n + 1) * sizeof(*ks)) : NULL;
        c->ws = ws ? ws : c->ws; /* why: a failed realloc left the old array */
        c->ws_cap = cap ? cap : c->ws_cap;
        c->ks = ks ? ks : c->ks;
        if (ks) {
            memset(ws + c->nslots, 0, (n - c->nslots) * sizeof(*ws));
            memset(cap + c->nslots, 0, (n - c->nslots) * sizeof(*cap));
            memset(ks + c->nslots, 0, (n - c->nslots) * sizeof(*ks));
            c->nslots = n;
        } else {
            rc = -ENOMEM;
        }
    }
    pthread_mutex_unlock(&g->mu);
    return rc;
}

/** The workspace of slot s for n keys (grown when too small). */
int hps__client_ctx_ws(gctx_t *c, size_t s, hps_gcache_t *cache, uint64_t n, hps_gcache_ws_t **ret)
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

/* ---- staging rows into a cache --------------------------------------------- */

/**
 * Write k rows staged in c->ikeys.h / c->ivals.h into the cache (on c's
 * stream): inserted, or with update set only replacing keys already cached.
 */
int hps__client_write_staged(gctx_t *c, hps_gcache_t *cache, size_t k, uint32_t dim, bool update)
{
    if (k == 0)
        return 0;
    hps_dtype_t dt = hps_gcache_storage_type(cache);
    pair_t *rows = &c->ivals;
    size_t bytes = k * dim * sizeof(float);
    int rc = 0;
    if (dt != HPS_DTYPE_FP32) { /* why a second buffer: an int8 row of dim 1 outgrows fp32 */
        bytes = k * hps_dtype_row_bytes(dt, dim);
        rc = hps__client_pair_reserve(&c->ienc, bytes);
        if (rc == 0)
            (void)hps_dtype_encode(dt, dim, k, c->ivals.h, c->ienc.h); /* checked arguments */
        rows = &c->ienc;
    }
    if (rc == 0)
        rc = hps__client_ck(cudaMemcpyAsync(c->ikeys.d, c->ikeys.h, k * sizeof(int64_t),
                                            cudaMemcpyHostToDevice, c->stream),
                            "H2D keys");
    if (rc == 0)
        rc = hps__client_ck(
            cudaMemcpyAsync(rows->d, rows->h, bytes, cudaMemcpyHostToDevice, c->stream),
            "H2D rows");
    if (rc == 0)
        rc = update ? hps_gcache_update(cache, c->ikeys.d, rows->d, k, c->stream)
                    : hps_gcache_insert(cache, c->ikeys.d, rows->d, k, c->stream);
    return rc;
}

size_t hps__client_row_bytes(const struct client_gpu *g, size_t mi, uint32_t t)
{
    return hps_dtype_row_bytes(hps_gcache_storage_type(g->models[mi].tables[t].cache),
                               g->cl->models[mi].dims[t]);
}

void hps__client_encode_row(const hps_gcache_t *cache, uint32_t dim, const float *src, void *dst)
{
    hps_dtype_t dt = hps_gcache_storage_type(cache);
    if (dt == HPS_DTYPE_FP32) /* why memcpy: dst may be unaligned after an int8 table's rows */
        memcpy(dst, src, dim * sizeof(float));
    else
        (void)hps_dtype_encode(dt, dim, 1, src, dst); /* fp16 / bf16: rows of 2 * dim bytes,
                                                       * so every row of a model is 2-aligned */
}

/**
 * Keep the found of n keys (src) and their rows (dim floats each, in place):
 * the kept keys go to dst (which may be src), in order.  Returns how many.
 */
size_t hps__client_keep_found(int64_t *dst, const int64_t *src, float *rows, const uint8_t *found,
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

int hps__client_fetch_one(hps_client_t *cl, size_t mi, uint32_t t, const int64_t *keys, size_t n,
                          float *rows, uint8_t *found)
{
    client_fetch_t f = {.table = t, .n = n, .keys = keys, .rows = rows, .found = found};
    return hps__client_fetch(cl, &cl->models[mi], &f, 1, false, false);
}

int hps__client_gpu_copy(hps_client_t *cl, void *dst, const void *src, size_t bytes, bool to_device,
                         void *stream)
{
    if (bytes == 0)
        return 0;
    int rc = hps__client_ck(cudaSetDevice(cl->device), "cudaSetDevice");
    if (rc == 0)
        rc = hps__client_ck(
            cudaMemcpyAsync(dst, src, bytes,
                            to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                            (cudaStream_t)stream),
            to_device ? "copy rows to the device" : "copy keys from the device");
    if (rc == 0)
        rc = hps__client_ck(cudaStreamSynchronize((cudaStream_t)stream), "synchronize a copy");
    if (rc < 0)
        hps__client_fail(rc,
                         "CUDA copy between host and device %d failed (is the buffer "
                         "device memory of that device?)",
                         cl->device);
    return rc;
}

int hps__client_gpu_scratch(hps_client_t *cl, size_t bytes, void *stream, void **ret)
{
    *ret = NULL;
    if (bytes == 0)
        return 0;
    int rc = hps__client_ck(cudaSetDevice(cl->device), "cudaSetDevice");
    return rc ? rc
              : hps__client_ck(cudaMallocAsync(ret, bytes, (cudaStream_t)stream),
                               "device scratch for a typed lookup");
}

void hps__client_gpu_scratch_free(hps_client_t *cl, void *p, void *stream)
{
    if (!p || cudaSetDevice(cl->device) != cudaSuccess ||
        cudaFreeAsync(p, (cudaStream_t)stream) != cudaSuccess)
        (void)cudaGetLastError(); /* what cannot be freed now goes with the pool */
}

int hps__client_gpu_convert(hps_client_t *cl, const float *d_src, void *d_dst, size_t n,
                            hps_dtype_t dtype, void *stream)
{
    int rc = hps__client_ck(cudaSetDevice(cl->device), "cudaSetDevice");
    if (rc == 0)
        rc = hps_gcache_convert_f32(d_src, d_dst, n, dtype, (cudaStream_t)stream);
    if (rc == 0)
        rc = hps__client_ck(cudaStreamSynchronize((cudaStream_t)stream), "convert the rows");
    return rc;
}
