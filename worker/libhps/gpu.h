/*
 * gpu.h -- libhps's GPU cache manager (gpu_*.c, built only with CUDA): one
 * GPU embedding cache (include/hps/gcache.h) per table of every model with
 * gpucache = true, on the client's device, shared with every other process
 * of that device through the segment's registry and CUDA VMM descriptors
 * (gpu_share.c, gshare.c).
 *
 * Start: a thread waits until the segment is attached, every table resolved
 * and the coordinator serving, then maps each table's shared cache, or
 * creates it, sized to ceil(gpucacheper * rows) rows (rows of the volatile
 * DB), and preloads it from the volatile DB (gpu_build.c).  The client is
 * not ready before that, so gpucacheper = 1.0 gives a 100% hit rate from the
 * first request.  The same thread then performs the background inserts and,
 * where this process is a cache's refresher, follows the table's update log
 * in the segment (Kafka updates applied by the coordinator) and the
 * periodic refresh (refresh_interval) (gpu_refresh.c).
 *
 * Lookup (gpu_lookup.c; docs/architecture.md, "Trace 1"): keys to the device
 * (none when they are there already), cache lookup, the misses back (one
 * synchronization per call, all tables together); the rows go straight
 * into the caller's buffer when it is device memory or page-locked host
 * memory, else through a pinned staging buffer.  With device output the
 * misses are split on the device (kernels/miss.h): the default-answered
 * tables' missed rows are filled there, and only the missed keys and their
 * positions come back.  Small host requests of a repeating shape replay a
 * captured CUDA graph of those steps.  The misses of all tables go through
 * the one fetch path (fetch.c: volatile DB, one miss-queue round trip,
 * default).  Per table and call, while the hit rate of that lookup is below
 * hit_rate_threshold the fetched rows are returned and inserted into the
 * cache, on a second stream of the lookup context that the call does not
 * wait for (the context's next insert, and its destruction, wait for it);
 * at or above it the misses get the table's default value and are fetched
 * and inserted by the background thread (HugeCTR's asynchronous insertion
 * semantics).
 * Rows not found in any layer are never inserted.  Each distinct missed key
 * is fetched and inserted once, and at most the cache's capacity of them per
 * table and call, the most requested first (keyset.h says why).
 *
 * Without CUDA every function below is an inline stand-in and the client
 * serves from the fetch path.
 */
#ifndef HPS_LIBHPS_GPU_H
#define HPS_LIBHPS_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hps/client.h"
#include "hps_build_config.h"

struct hps_client;

#if HPS_HAVE_CUDA
/** Whether CUDA device `device` (>= 0) exists and can be used. */
bool hps__client_gpu_exists(int device);

/** Start GPU mode (no-op without gpucache models or without the device).
 *  0, or HPS_EIO / -ENOMEM. */
int hps__client_gpu_start(struct hps_client *cl);

/** Stop the GPU thread and leave / free every cache (no lookup running). */
void hps__client_gpu_stop(struct hps_client *cl);

/**
 * Serve one call of model mi from its GPU caches.
 * @param keys    (N) int64 host keys, table-major; may be NULL when d_keys is set.
 * @param d_keys  (N) int64 keys in device memory of the client's device, or NULL.
 * @param out     host output (sum numkeys[t] * dim_t floats), or NULL when d_out is set.
 * @param d_out   device output on the client's device, or NULL.
 * @param stream  the caller's cudaStream_t: the work is ordered after it.
 * @param nowait  HPS_EAGAIN where misses would wait for the coordinator
 *                (decided before anything is counted or queued; the
 *                caches' own lookup counters are taken back).
 * @return 1 if the GPU does not serve this model (yet): use the fetch path;
 *         0 on success (output complete); a negative hps_err_t.  Called
 *         with cl->seg_lock held for reading.
 */
int hps__client_gpu_lookup(struct hps_client *cl, size_t mi, uint32_t num_tables,
                           const int32_t *numkeys, const int64_t *keys, const int64_t *d_keys,
                           float *out, float *d_out, void *stream, bool nowait);

/** A host lookup of model mi that the fetch path answered (pathsel.c): one
 *  call in NOTE_EVERY queues about NOTE_KEYS of its keys (table-major,
 *  numkeys per table; every step-th of each table) for a background insert
 *  into the GPU caches, so that they keep following the keys requested
 *  whichever path answers.  Any thread; never waits (dropped when the
 *  queue is full or memory is short). */
void hps__client_gpu_note(struct hps_client *cl, size_t mi, uint32_t num_tables,
                          const int32_t *numkeys, const int64_t *keys);

/** The client learned model mi from its INI (published in cl->num_models):
 *  it gets GPU caches like a model known at start, built when a coordinator
 *  has loaded it (now, if it has).  Any thread (takes the GPU state's
 *  lock briefly). */
void hps__client_gpu_learned(struct hps_client *cl, size_t mi);

/** hps_client_host_register / unregister. */
int hps__client_gpu_pin(struct hps_client *cl, void *buf, size_t bytes);
void hps__client_gpu_unpin(struct hps_client *cl, void *buf, size_t bytes);

/** False while the caches are being created and preloaded. */
bool hps__client_gpu_ready(struct hps_client *cl);

/** The client switched to a new segment (called with cl->seg_lock held for
 *  writing, so no lookup runs): every GPU-served model goes to the CPU path
 *  until the GPU thread has built its caches anew from that segment. */
void hps__client_gpu_switched(struct hps_client *cl);

/** The client resolved its models again in the same segment (called with
 *  cl->seg_lock held for writing): a GPU-served model that is no longer
 *  resolved (an older shape, shape.c) goes to the CPU path and its caches
 *  are freed; one resolved now and not served from the GPU is built. */
void hps__client_gpu_resolved(struct hps_client *cl);

/** hps_client_cache_stats / hps_client_gpu_stats. */
int hps__client_gpu_cache_stats(struct hps_client *cl, size_t mi, uint32_t t,
                                hps_client_cache_stats_t *ret);
int hps__client_gpu_stats(const struct hps_client *cl, hps_client_gpu_stats_t *ret);

/** Whether model mi is served by GPU caches (built and active). */
bool hps__client_gpu_serves(const struct hps_client *cl, size_t mi);

/** Copies between host and device memory of the client's device, ordered
 *  after the caller's stream, synchronized: the staging of fetch-path
 *  lookups with device buffers.  dir: true = to the device.  0 or HPS_EIO. */
int hps__client_gpu_copy(struct hps_client *cl, void *dst, const void *src, size_t bytes,
                         bool to_device, void *stream);

/** Scratch device memory of the client's device for the fp32 rows of a
 *  typed lookup with device output (hps_client_lookup_typed): bytes,
 *  stream-ordered (cudaMallocAsync on the caller's stream; usable by work
 *  enqueued on it); *ret NULL when bytes is 0.  Free it with
 *  hps__client_gpu_scratch_free on the same stream.  0, -ENOMEM or HPS_EIO. */
int hps__client_gpu_scratch(struct hps_client *cl, size_t bytes, void *stream, void **ret);
void hps__client_gpu_scratch_free(struct hps_client *cl, void *p, void *stream);

/** n fp32 values at d_src to dtype (HPS_DTYPE_FP16 / BF16) at d_dst, both
 *  device memory of the client's device (kernels/convert.h), ordered after
 *  the caller's stream, synchronized.  0, HPS_EINVAL or HPS_EIO. */
int hps__client_gpu_convert(struct hps_client *cl, const float *d_src, void *d_dst, size_t n,
                            hps_dtype_t dtype, void *stream);
#else
static inline bool hps__client_gpu_exists(int device)
{
    (void)device;
    return false;
}
static inline int hps__client_gpu_start(struct hps_client *cl)
{
    (void)cl;
    return 0;
}
static inline void hps__client_gpu_stop(struct hps_client *cl)
{
    (void)cl;
}
static inline int hps__client_gpu_lookup(struct hps_client *cl, size_t mi, uint32_t num_tables,
                                         const int32_t *numkeys, const int64_t *keys,
                                         const int64_t *d_keys, float *out, float *d_out,
                                         void *stream, bool nowait)
{
    (void)cl, (void)mi, (void)num_tables, (void)numkeys, (void)keys, (void)d_keys, (void)out,
        (void)d_out, (void)stream, (void)nowait;
    return 1;
}
static inline void hps__client_gpu_note(struct hps_client *cl, size_t mi, uint32_t num_tables,
                                        const int32_t *numkeys, const int64_t *keys)
{
    (void)cl, (void)mi, (void)num_tables, (void)numkeys, (void)keys;
}
static inline void hps__client_gpu_learned(struct hps_client *cl, size_t mi)
{
    (void)cl, (void)mi;
}
static inline int hps__client_gpu_pin(struct hps_client *cl, void *buf, size_t bytes)
{
    (void)cl, (void)buf, (void)bytes;
    return HPS_EUNSUPPORTED;
}
static inline void hps__client_gpu_unpin(struct hps_client *cl, void *buf, size_t bytes)
{
    (void)cl, (void)buf, (void)bytes;
}
static inline void hps__client_gpu_switched(struct hps_client *cl)
{
    (void)cl;
}
static inline void hps__client_gpu_resolved(struct hps_client *cl)
{
    (void)cl;
}

static inline bool hps__client_gpu_ready(struct hps_client *cl)
{
    (void)cl;
    return true;
}
static inline int hps__client_gpu_cache_stats(struct hps_client *cl, size_t mi, uint32_t t,
                                              hps_client_cache_stats_t *ret)
{
    (void)cl, (void)mi, (void)t, (void)ret;
    return HPS_ENOTFOUND;
}
static inline int hps__client_gpu_stats(const struct hps_client *cl, hps_client_gpu_stats_t *ret)
{
    (void)cl, (void)ret;
    return HPS_ENOTFOUND;
}
static inline bool hps__client_gpu_serves(const struct hps_client *cl, size_t mi)
{
    (void)cl, (void)mi;
    return false;
}
static inline int hps__client_gpu_copy(struct hps_client *cl, void *dst, const void *src,
                                       size_t bytes, bool to_device, void *stream)
{
    (void)cl, (void)dst, (void)src, (void)bytes, (void)to_device, (void)stream;
    return HPS_EUNSUPPORTED;
}
static inline int hps__client_gpu_scratch(struct hps_client *cl, size_t bytes, void *stream,
                                          void **ret)
{
    (void)cl, (void)bytes, (void)stream;
    *ret = NULL;
    return HPS_EUNSUPPORTED;
}
static inline void hps__client_gpu_scratch_free(struct hps_client *cl, void *p, void *stream)
{
    (void)cl, (void)p, (void)stream;
}
static inline int hps__client_gpu_convert(struct hps_client *cl, const float *d_src, void *d_dst,
                                          size_t n, hps_dtype_t dtype, void *stream)
{
    (void)cl, (void)d_src, (void)d_dst, (void)n, (void)dtype, (void)stream;
    return HPS_EUNSUPPORTED;
}
#endif

#endif
