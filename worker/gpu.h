/*
 * gpu.h -- hps-worker's GPU mode (worker/gpu.c, built only with CUDA): one
 * GPU embedding cache (include/hps/gcache.h) per table of every model with
 * gpucache = true, on the worker's --device, owned by this process (sharing
 * the caches between the workers of a device through CUDA IPC is a later
 * step, issue 4).
 *
 * Start: a thread waits until the segment is attached, every table resolved
 * and the coordinator serving, then sizes each cache to
 * ceil(gpucacheper * rows) (rows of the model files, else of the volatile
 * DB) and preloads it from the volatile DB.  The worker is not ready before
 * that, so gpucacheper = 1.0 gives a 100% hit rate from the first request.
 * The same thread then performs the background inserts and follows each
 * table's update log in the segment (Kafka updates applied by the
 * coordinator): every ~10 ms it reads the new keys, looks them up in the
 * volatile DB and replaces the rows already in the cache (hps_gcache_update:
 * keys not cached are not inserted); lapped by the log, or on a recreated
 * segment, it refreshes every cached row from the volatile DB.
 *
 * Lookup (DESIGN.md "The lookup path"): keys H2D, cache lookup, result and
 * miss positions D2H (one synchronization per request, all tables
 * together); the rows go straight into the caller's buffer when it is
 * page-locked (worker_gpu_pin), else through a pinned staging buffer and a
 * copy.  Small requests of a repeating shape replay a captured CUDA graph
 * of those steps.  The misses go through the CPU path (volatile DB, miss queue,
 * default).  Per table and request, while the hit rate of that lookup is
 * below hit_rate_threshold the fetched rows are returned and inserted into
 * the cache before the call returns; at or above it the misses get the
 * table's default value and are fetched and inserted by the background
 * thread (HugeCTR's asynchronous insertion semantics).  Rows not found in
 * any layer are never inserted.  Each distinct missed key is fetched and
 * inserted once, and at most the cache's capacity of them per table and
 * request, the most requested first (worker/keyset.h says why).
 *
 * OUTPUT0 into a CUDA shared-memory region on the worker's device
 * (worker_gpu_lookup_device) skips the host: the lookup kernel writes the
 * hits into the region and the misses are scattered there.
 *
 * Without CUDA every function below is an inline no-op and the worker
 * serves from the CPU path.
 */
#ifndef HPS_WORKER_GPU_H
#define HPS_WORKER_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hps/kserve.h"
#include "hps_build_config.h"

struct worker;

#if HPS_HAVE_CUDA
/** @brief Start GPU mode (no-op for a worker without gpucache models).  0 or an exit code. */
int worker_gpu_start(struct worker *w);

/** @brief Stop the GPU thread and free every cache; after the HTTP server stopped. */
void worker_gpu_stop(struct worker *w);

/**
 * @brief Serve one request of model mi from its GPU caches.
 * @return 1 if the GPU does not serve this model (yet): use the CPU path;
 *         0 on success; a negative hps_err_t on a CUDA or lookup error.
 *         Called with w->seg_lock held for reading.
 */
int worker_gpu_lookup(struct worker *w, size_t mi, uint32_t num_tables, const int32_t *numkeys,
                      const int64_t *keys, float *out);

/**
 * @brief Serve one request of model mi with OUTPUT0 going straight into
 * device memory (a CUDA shared-memory region opened in this process):
 * cache hits are written there by the lookup kernel, misses are found on
 * the host and scattered there; nothing is copied back to the host.
 * @param[in] device  the CUDA device of d_out.
 * @param[out] d_out  device, float, the request's rows in key order.
 * @return 0 (complete: the stream was synchronized); HPS_EUNSUPPORTED when
 *         the GPU does not serve this model or d_out is on another device
 *         (use the host path); a negative hps_err_t on a CUDA error.
 *         Called with w->seg_lock held for reading.
 */
int worker_gpu_lookup_device(struct worker *w, size_t mi, uint32_t num_tables,
                             const int32_t *numkeys, const int64_t *keys, int device, float *d_out);

/**
 * @brief Page-lock a host buffer the HTTP front end keeps for OUTPUT0
 * (hps_kserve_backend_t.pin_output): cudaHostRegister, portable, so that
 * worker_gpu_lookup() copies the rows from the device straight into it.
 * @param[in] buf    host memory, bytes long, not in use by a lookup.
 * @return 0; HPS_EUNSUPPORTED without GPU mode (nothing to pin for);
 *         HPS_EIO when CUDA refuses (e.g. out of lockable memory): the
 *         buffer stays pageable and lookups use the staging buffers.
 *         Thread-safe.
 */
int worker_gpu_pin(struct worker *w, void *buf, size_t bytes);

/** @brief Undo a successful worker_gpu_pin() of buf (bytes long); thread-safe. */
void worker_gpu_unpin(struct worker *w, void *buf, size_t bytes);

/** @brief False while the caches are being created and preloaded. */
bool worker_gpu_ready(struct worker *w);

/** @brief Append the nv_hps_embedding_cache_* metrics (per model, table, device). */
void worker_gpu_metrics(struct worker *w, hps_kserve_text_t *x);
#else
static inline int worker_gpu_start(struct worker *w)
{
    (void)w;
    return 0;
}
static inline void worker_gpu_stop(struct worker *w)
{
    (void)w;
}
static inline int worker_gpu_lookup(struct worker *w, size_t mi, uint32_t num_tables,
                                    const int32_t *numkeys, const int64_t *keys, float *out)
{
    (void)w, (void)mi, (void)num_tables, (void)numkeys, (void)keys, (void)out;
    return 1;
}
static inline int worker_gpu_lookup_device(struct worker *w, size_t mi, uint32_t num_tables,
                                           const int32_t *numkeys, const int64_t *keys, int device,
                                           float *d_out)
{
    (void)w, (void)mi, (void)num_tables, (void)numkeys, (void)keys, (void)device, (void)d_out;
    return HPS_EUNSUPPORTED;
}
static inline int worker_gpu_pin(struct worker *w, void *buf, size_t bytes)
{
    (void)w, (void)buf, (void)bytes;
    return HPS_EUNSUPPORTED;
}
static inline void worker_gpu_unpin(struct worker *w, void *buf, size_t bytes)
{
    (void)w, (void)buf, (void)bytes;
}
static inline bool worker_gpu_ready(struct worker *w)
{
    (void)w;
    return true;
}
static inline void worker_gpu_metrics(struct worker *w, hps_kserve_text_t *x)
{
    (void)w, (void)x;
}
#endif

#endif
