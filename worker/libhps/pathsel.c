/*
 * pathsel.c -- which path answers a host lookup on a client with GPU caches
 * ([worker] lookup_path; issue 22).  A call whose keys and output are in
 * host memory can be answered by the GPU path (keys to the device, the GPU
 * cache, rows back) or straight from the volatile DB (the fetch path,
 * fetch.c), and which is sooner depends on the call's size and the machine:
 * one sample of 26 keys is a few microseconds from shared memory but pays
 * the GPU path's copies and launches; a thousand samples gather faster on
 * the GPU.  In auto mode each model keeps, per bucket of call sizes (keys,
 * in powers of two), the time per call of each path as it serves, takes
 * the faster, and measures the other again on one call in 32 of the bucket,
 * so a change in load or hit rate moves the choice.  A path not yet
 * measured in a bucket is tried first (the GPU path, then the fetch path).
 *
 * A call whose keys are all of one table (HugeCTR's lookup(keys, model,
 * table_id), hps_client_lookup_table) is decided by that table's own
 * estimates: tables differ in dimension, hit rate and size, and so in
 * which path is sooner.  A call over several tables is one choice for all
 * of them, by the model's estimates: the GPU path answers its tables in
 * one launch and one copy back, whose cost is the call's, not a table's, so
 * a per-table time cannot be measured, and splitting the tables of a call
 * between the paths would pay the GPU path's fixed cost for part of the
 * call and gather the rows of the other part into the same output.
 *
 * The estimate: the least of a path's first PATH_WARM calls in the bucket
 * (its first calls pay one-time costs: a CUDA graph captured for a new
 * shape, a workspace grown), then an exponentially weighted mean (weight
 * 1/8) of samples clipped to twice the estimate, so that one call stalled
 * by a page fault or a busy core moves it by at most 1/8.
 */
#include "internal.h"

#define PATH_EXPLORE 32 /* one call in this many of a bucket takes the other path */
#define PATH_WARM    8  /* samples of a path in a bucket whose least is its estimate */

/* Bucket of a call of nk >= 1 keys: floor(log2(nk)). */
static unsigned bucket(size_t nk)
{
    unsigned b = 0;
    while (nk >>= 1)
        b++;
    return b < CLIENT_PATH_BUCKETS ? b : CLIENT_PATH_BUCKETS - 1;
}

client_pathsel_t *hps__client_pathsel(client_model_t *m, uint32_t nt, const int32_t *numkeys)
{
    uint32_t only = UINT32_MAX;
    for (uint32_t t = 0; t < nt; t++) {
        if (numkeys[t] == 0)
            continue;
        if (only != UINT32_MAX)
            return &m->path;
        only = t;
    }
    return only == UINT32_MAX || !m->tpath ? &m->path : &m->tpath[only];
}

bool hps__client_path_gpu(const hps_client_t *cl, client_pathsel_t *ps, size_t nk)
{
    switch (cl->conf->worker.lookup_path) {
    case HPS_CONF_LOOKUP_PATH_GPU:
        return true;
    case HPS_CONF_LOOKUP_PATH_CPU:
        return false;
    default:
        break;
    }
    unsigned b = bucket(nk);
    uint64_t g = atomic_load_explicit(&ps->ns[b][1], memory_order_relaxed);
    uint64_t c = atomic_load_explicit(&ps->ns[b][0], memory_order_relaxed);
    if (g == 0 || c == 0)
        return g == 0;
    uint32_t n = atomic_fetch_add_explicit(&ps->calls[b], 1, memory_order_relaxed);
    bool gpu = g <= c;
    return n % PATH_EXPLORE == PATH_EXPLORE - 1 ? !gpu : gpu;
}

void hps__client_path_record(client_model_t *m, client_pathsel_t *ps, size_t nk, bool gpu,
                             uint64_t ns)
{
    unsigned b = bucket(nk);
    _Atomic uint64_t *p = &ps->ns[b][gpu];
    uint64_t old = atomic_load_explicit(p, memory_order_relaxed);
    uint32_t seen = atomic_fetch_add_explicit(&ps->samples[b][gpu], 1, memory_order_relaxed);
    ns = ns ? ns : 1; /* 0 means "not measured" */
    if (old && seen < PATH_WARM)
        ns = ns < old ? ns : old;
    else if (old)
        ns = old - old / 8 + (ns < 2 * old ? ns : 2 * old) / 8;
    /* a lost update between threads only loses one sample */
    atomic_store_explicit(p, ns, memory_order_relaxed);
    atomic_fetch_add_explicit(gpu ? &m->ctr.gpu_path : &m->ctr.cpu_path, 1, memory_order_relaxed);
}
