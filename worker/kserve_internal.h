/*
 * kserve_internal.h -- private declarations shared by the kserve_*.c files
 * of the worker's HTTP front end (include/hps/kserve.h is the public API).
 *
 * Files, one concern each:
 *   kserve_text.c     growable text buffer, JSON and number formatting
 *   kserve_route.c    URL -> endpoint, method rules
 *   kserve_infer.c    inference request parsing and validation
 *   kserve_response.c response bodies: errors, infer, metadata, config, stats
 *   kserve_metrics.c  per-model statistics and the Prometheus text
 *   kserve_shm.c      shared-memory regions, system and CUDA (register, status, use)
 *   kserve_cudashm.c  CUDA IPC memory of CUDA regions, base64 (CUDA builds)
 *   kserve_zlib.c     gzip / deflate: request bodies inflated, responses compressed
 *   kserve_server.c   lifecycle: options, the model registry, listeners, daemons
 *   kserve_http.c     one request: routing, upload accumulation, endpoint handlers
 *                     (its own header, kserve_http.h)
 *   kserve_send.c     queueing the answers on libmicrohttpd
 *   kserve_conn.c     connection admission: header deadline, room for new ones
 *   kserve_pool.c     the lookup pool (lookups off the event loops)
 *   kserve_outpool.c  reuse of large OUTPUT0 buffers
 *   kserve_repo.c     Triton's model repository extension
 *
 * The parser, router and formatters touch no network, so they are pure
 * functions the unit tests call directly.
 */
#ifndef HPS_WORKER_KSERVE_INTERNAL_H
#define HPS_WORKER_KSERVE_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hps/kserve.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the KServe binary-data extension is little-endian; big-endian hosts are not supported"
#endif

/* ------------------------------------------------------------------------ */
/* Text buffer (kserve_text.c)                                               */
/* ------------------------------------------------------------------------ */

/**
 * Growable byte buffer, always NUL-terminated when data != NULL.  Appends
 * are sticky on failure: after an allocation failure `oom` is set, further
 * appends are no-ops and the caller checks once at the end.
 */
struct hps_kserve_text {
    char *data;
    size_t len;
    size_t cap;
    bool oom;
};

typedef struct hps_kserve_text hps__kserve_text_t;

void hps__kserve_text_init(hps__kserve_text_t *t);
void hps__kserve_text_fini(hps__kserve_text_t *t);
/** Make room for `extra` more bytes (plus the NUL); false (and oom) on failure. */
bool hps__kserve_text_reserve(hps__kserve_text_t *t, size_t extra);
void hps__kserve_text_put(hps__kserve_text_t *t, const char *s, size_t n);
void hps__kserve_text_puts(hps__kserve_text_t *t, const char *s);
void hps__kserve_text_putc(hps__kserve_text_t *t, char c);
__attribute__((format(printf, 2, 3))) void hps__kserve_text_printf(hps__kserve_text_t *t,
                                                                   const char *fmt, ...);
void hps__kserve_text_vprintf(hps__kserve_text_t *t, const char *fmt, va_list ap);
/**
 * A JSON string literal of any bytes, valid JSON and valid UTF-8: quotes,
 * \\ and control characters (< 0x20, 0x7f) escaped, well-formed UTF-8
 * copied, each maximal ill-formed subpart (stray continuation, overlong,
 * surrogate, past U+10FFFF, truncated sequence) replaced by U+FFFD.
 */
void hps__kserve_text_json_str(hps__kserve_text_t *t, const char *s, size_t n);
/** Length of the well-formed UTF-8 sequence at s[0, n) (n >= 1): 1-4, or 0. */
size_t hps__kserve_utf8_seq(const unsigned char *s, size_t n);
/** n, or less so that s[0, n), a prefix of a longer string, does not end
 *  in a well-formed UTF-8 sequence cut short. */
size_t hps__kserve_utf8_cut(const char *s, size_t n);
void hps__kserve_text_u64(hps__kserve_text_t *t, uint64_t v);
void hps__kserve_text_i64(hps__kserve_text_t *t, int64_t v);
/** An fp32 value as JSON: "%.9g" (round-trips), NaN / Infinity / -Infinity. */
void hps__kserve_text_f32(hps__kserve_text_t *t, float v);
/** Escaped Prometheus label value (\\, \", \n), no quotes. */
void hps__kserve_text_label(hps__kserve_text_t *t, const char *s);
/** Hand the buffer over (caller frees with free()); t is reset to empty. */
char *hps__kserve_text_steal(hps__kserve_text_t *t, size_t *ret_len);

/* ------------------------------------------------------------------------ */
/* Errors with an HTTP status                                                */
/* ------------------------------------------------------------------------ */

#define HPS__KSERVE_KERR_MSG_MAX 512

/** An HTTP error answer in the making: status and message. */
typedef struct hps__kserve_kerr {
    unsigned status;
    char msg[HPS__KSERVE_KERR_MSG_MAX];
} hps__kserve_kerr_t;

/** Set status and a printf message (truncated to fit); returns -1. */
__attribute__((format(printf, 3, 4))) int
hps__kserve_kerr_set(hps__kserve_kerr_t *e, unsigned status, const char *fmt, ...);

/* ------------------------------------------------------------------------ */
/* Models and statistics (kserve_metrics.c)                                  */
/* ------------------------------------------------------------------------ */

/** Reasons of nv_inference_request_failure, in Triton's label spelling. */
enum hps__kserve_fail_reason {
    HPS__KSERVE_FAIL_REJECTED,
    HPS__KSERVE_FAIL_CANCELED,
    HPS__KSERVE_FAIL_BACKEND,
    HPS__KSERVE_FAIL_OTHER,
    HPS__KSERVE_FAIL_NREASONS
};

/** A cumulative duration statistic: count and total nanoseconds. */
struct hps__kserve_kdur {
    _Atomic uint64_t count;
    _Atomic uint64_t ns;
};

/**
 * Per-model counters.  Every field is updated with relaxed atomics: each is
 * an independent monotone counter, readers only need each value to be
 * eventually correct, never a consistent snapshot across fields (Triton's
 * statistics have the same property).
 */
struct hps__kserve_kstats {
    struct hps__kserve_kdur success;
    struct hps__kserve_kdur fail;
    struct hps__kserve_kdur queue;
    struct hps__kserve_kdur compute_input;
    struct hps__kserve_kdur compute_infer;
    struct hps__kserve_kdur compute_output;
    _Atomic uint64_t inference_count;
    _Atomic uint64_t execution_count;
    _Atomic uint64_t last_inference_ms;
    _Atomic uint64_t fail_reason[HPS__KSERVE_FAIL_NREASONS];
    _Atomic int64_t pending;
};

/** Bytes of a load or unload answer's message (the coordinator's, at most
 *  HPS_SHMDB_CTL_MSG_MAX, with libhps's words around it), kept whole. */
#define HPS__KSERVE_LOAD_FAILURE_MAX 600

/** The server's own copy of an hps_kserve_model_t, plus its statistics. */

struct hps__kserve_kmodel {
    char *name;
    size_t name_len;
    _Atomic uint64_t version_num; /* the version served: set at create, then by
                                   * hps_kserve_set_model_version (any thread) */
    uint32_t num_tables;
    uint32_t *dims;                /* (T) */
    char **table_names;            /* (T) */
    uint32_t *max_keys_per_sample; /* (T) */
    uint64_t keys_per_sample;      /* sum of max_keys_per_sample */
    uint32_t max_dim;
    uint32_t max_batch_size;
    int32_t device_id;
    struct hps__kserve_kstats stats;
    /* Why this worker's last load of the model failed while it was not
     * loaded ("" when none): the repository index shows the model
     * UNAVAILABLE with it, as Triton does.  Set and cleared by
     * hps__kserve_load_failure_set (kserve_server.c) under the server's
     * fail_mu; read under fail_mu (hps__kserve_repo_index). */
    char load_failure[HPS__KSERVE_LOAD_FAILURE_MAX];
};

/** The version model m is answered from (it may change meanwhile: one
 *  atomic read). */
static inline uint64_t hps__kserve_kmodel_version(const struct hps__kserve_kmodel *m)
{
    return atomic_load_explicit((_Atomic uint64_t *)&m->version_num, memory_order_relaxed);
}

/** Version v as a JSON string ("7"), written without a formatting call
 *  (it is in every inference response). */
static inline void hps__kserve_text_version_num(hps__kserve_text_t *t, uint64_t v)
{
    hps__kserve_text_putc(t, '"');
    hps__kserve_text_u64(t, v);
    hps__kserve_text_putc(t, '"');
}

/** m's version as a JSON string. */
static inline void hps__kserve_text_version(hps__kserve_text_t *t,
                                            const struct hps__kserve_kmodel *m)
{
    hps__kserve_text_version_num(t, hps__kserve_kmodel_version(m));
}

/** Timings of one request, nanoseconds, for hps__kserve_stats_record(). */
struct hps__kserve_ktimes {
    uint64_t total_ns;
    uint64_t queue_ns;
    uint64_t input_ns;
    uint64_t infer_ns;
    uint64_t output_ns;
};

/** Count a successful request that produced num_samples inferences. */
void hps__kserve_stats_success(struct hps__kserve_kstats *s, const struct hps__kserve_ktimes *t,
                               uint64_t num_samples);
/** Count a failed request. */
void hps__kserve_stats_failure(struct hps__kserve_kstats *s, uint64_t total_ns,
                               enum hps__kserve_fail_reason reason);
/** Zero s's counters (not the pending gauge): the model is answered from
 *  another version now, or was unloaded, and its statistics start at 0
 *  (Triton's, per version and per load).  Counts of requests in flight
 *  meanwhile may land on either side. */
void hps__kserve_stats_reset(struct hps__kserve_kstats *s);

/** Append Triton's nv_inference_* families: a sample per model that b's
 *  model_loaded says is loaded (every model without that callback).  Sets
 *  t->oom on an allocation failure. */
void hps__kserve_metrics_render(hps__kserve_text_t *t, const struct hps__kserve_kmodel *models,
                                size_t num_models, const hps_kserve_backend_t *b);

/* ------------------------------------------------------------------------ */
/* Router (kserve_route.c)                                                   */
/* ------------------------------------------------------------------------ */

enum hps__kserve_route_kind {
    HPS__KSERVE_R_NOT_FOUND,
    HPS__KSERVE_R_LIVE,
    HPS__KSERVE_R_READY,
    HPS__KSERVE_R_SERVER_META,
    HPS__KSERVE_R_MODEL_META,
    HPS__KSERVE_R_MODEL_READY,
    HPS__KSERVE_R_MODEL_CONFIG,
    HPS__KSERVE_R_MODEL_STATS,
    HPS__KSERVE_R_ALL_STATS,
    HPS__KSERVE_R_INFER,
    HPS__KSERVE_R_SHM_STATUS,     /* GET  .../status */
    HPS__KSERVE_R_SHM_REGISTER,   /* POST .../register */
    HPS__KSERVE_R_SHM_UNREGISTER, /* POST .../unregister */
    HPS__KSERVE_R_REPO_INDEX,     /* POST /v2/repository/index */
    HPS__KSERVE_R_REPO_LOAD,      /* POST /v2/repository/models/{m}/load */
    HPS__KSERVE_R_REPO_UNLOAD,    /* POST /v2/repository/models/{m}/unload */
    HPS__KSERVE_R_REPO_NAMED      /* POST /v2/repository/{repo}/...: 501 */
};

/**
 * A matched URL; model, version and region point into the URL (not
 * terminated).
 */
struct hps__kserve_route {
    enum hps__kserve_route_kind kind;
    const char *model;
    size_t model_len;
    const char *version; /* NULL when the URL has no /versions/{v} */
    size_t version_len;
    bool cuda;          /* a /v2/cudasharedmemory route */
    const char *region; /* shm routes: /region/{name}, or NULL */
    size_t region_len;
};

/* ------------------------------------------------------------------------ */
/* Model repository extension (kserve_repo.c)                                */
/* ------------------------------------------------------------------------ */

/**
 * Answer POST /v2/repository/index: append to out the JSON array of the
 * models, each {"name","version","state"[,"reason"]} (b->model_state's
 * states, or READY when worker_ready, else UNAVAILABLE with the reason), or
 * {"name"} alone for a model never loaded; a model not loaded whose last
 * load through this worker failed is UNAVAILABLE with that failure as the
 * reason (load_failure, read under fail_mu; fail_mu NULL: none shown, as
 * the fuzz target calls it).  body (len bytes, not
 * terminated, may be empty) is empty or {"ready": bool}; ready true lists
 * only READY models.  Returns 0, or -1 with err set (400: not a JSON
 * object, "ready" not a boolean; 500: out of memory), out unchanged.
 */
int hps__kserve_repo_index(const struct hps__kserve_kmodel *models, size_t num_models,
                           const hps_kserve_backend_t *b, bool worker_ready, const char *body,
                           size_t len, pthread_mutex_t *fail_mu, hps__kserve_text_t *out,
                           hps__kserve_kerr_t *err);
/**
 * Check a load or unload request (r->kind HPS__KSERVE_R_REPO_LOAD/UNLOAD): 0 when
 * b->model_control should run it, with the model's name copied into name
 * (name_cap bytes); else -1 with err set: 503 and Triton's text in model
 * control mode `none` (no b->model_control); 400 for a body that is not
 * empty or an object, a "config" or "file:" load parameter, or an unload
 * of a model never loaded ("Model to be unloaded has not been served").
 */
int hps__kserve_repo_control(const struct hps__kserve_route *r,
                             const struct hps__kserve_kmodel *models, size_t num_models,
                             const hps_kserve_backend_t *b, const char *body, size_t len,
                             char *name, size_t name_cap, hps__kserve_kerr_t *err);

/** Match a URL path against the endpoints (Triton's regexes, full match). */
void hps__kserve_route_parse(const char *url, struct hps__kserve_route *ret);
/** The one method an endpoint accepts ("GET" or "POST"); NULL for NOT_FOUND. */
const char *hps__kserve_route_method(enum hps__kserve_route_kind kind);

/**
 * Find the model a route names: of the registry's entries of that name
 * (hps_kserve_replace_model adds one per shape of a model), the newest one
 * b->model_loaded says is loaded, else the newest (b NULL, or no
 * model_loaded: the newest).  Returns its index; -2 with err set to 400
 * "Request for unknown model: 'x' is not found" when no model has that
 * name; -1 with err set to 400 "... version v ..." for a version it does
 * not serve.
 */
long hps__kserve_route_model(const struct hps__kserve_route *r,
                             const struct hps__kserve_kmodel *models, size_t num_models,
                             const hps_kserve_backend_t *b, hps__kserve_kerr_t *err);

/**
 * The entry that speaks for name (len bytes): of the registry's entries of
 * that name, the newest one b->model_loaded says is loaded, else the newest
 * (b NULL, or no model_loaded: the newest); -1 when none has it.
 */
/**
 * libmicrohttpd's unescaper (MHD_OPTION_UNESCAPE_CALLBACK) for the request
 * path and its arguments: decodes %HH in place, except %2F and %00, which
 * stay as they are: routing sees the path's own separators only (with the
 * default unescaper, /v2%2Frepository/index reached the repository and
 * /v2/models/m%00x model m), as Triton routes the path it was sent.
 * Returns the new length.  Any thread.
 */
struct MHD_Connection;
size_t hps__kserve_unescape(void *cls, struct MHD_Connection *c, char *s);

/**
 * The version a route names (its /versions/{v}): true with *ret set, false
 * when it names none or one that is no number (hps__kserve_route_model
 * refuses those).
 */
bool hps__kserve_route_version(const struct hps__kserve_route *r, uint64_t *ret);

long hps__kserve_model_pick(const struct hps__kserve_kmodel *models, size_t num_models,
                            const hps_kserve_backend_t *b, const char *name, size_t len);

/**
 * Whether entry i is the one that speaks for its name (the entry
 * hps__kserve_route_model picks for it), so that listings (the repository
 * index, all models' statistics) name each model once.  b as there.
 */
bool hps__kserve_model_current(const struct hps__kserve_kmodel *models, size_t num_models,
                               const hps_kserve_backend_t *b, size_t i);

/* ------------------------------------------------------------------------ */
/* Shared memory, system and CUDA (kserve_shm.c)                             */
/* ------------------------------------------------------------------------ */

/** A registered region (opaque outside kserve_shm.c). */
struct hps__kserve_shm_region;

/**
 * The region table of one server.  System and CUDA regions share one name
 * space, as in Triton; the endpoints of each kind see only their own.
 */
struct hps__kserve_shm {
    pthread_mutex_t mu;                  /* guards head and every region's users/registered */
    struct hps__kserve_shm_region *head; /* sorted by name */
    unsigned count; /* regions in the table (at most HPS__KSERVE_SHM_MAX_REGIONS) */
    bool enabled;   /* client registration allowed */
    bool cuda;      /* CUDA regions too (CUDA builds only) */
};

/** Bytes of a region lent to a request: hold until hps__kserve_shm_release(). */
struct hps__kserve_shm_ref {
    struct hps__kserve_shm_region *region;
    /* The requested window.  For a CUDA region a device pointer: never
     * dereference it, copy with hps__kserve_shm_read() / hps__kserve_shm_write(). */
    char *ptr;
    bool cuda;
};

/**
 * Empty table; enabled = whether clients may register regions; cuda =
 * whether CUDA regions may be registered too (forced false without
 * HPS_HAVE_CUDA or when !enabled).
 */
void hps__kserve_shm_init(struct hps__kserve_shm *s, bool enabled, bool cuda);
/** Unmap every region (no request may hold one) and free the table. */
void hps__kserve_shm_fini(struct hps__kserve_shm *s);

/**
 * Register system region `name` from a JSON body {"key","offset","byte_size"}.
 * The region keeps the object's descriptor (its size is checked per use).
 * @return 0, or -1 with err: 400 (bad body, missing field, invalid key:
 *         empty, with a NUL byte, of Triton's reserved prefix or of an HPS
 *         segment ("hps."), window outside the object, duplicate name,
 *         HPS__KSERVE_SHM_MAX_REGIONS registered), 500 (shm_open, mmap).
 */
int hps__kserve_shm_register(struct hps__kserve_shm *s, const char *name, const char *body,
                             size_t len, hps__kserve_kerr_t *err);

/**
 * Register CUDA region `name` from a JSON body {"raw_handle":{"b64"},
 * "device_id","byte_size"}: the base64 of a 64-byte cudaIpcMemHandle_t,
 * opened on device_id; byte_size may not exceed the allocation.
 * @return 0, or -1 with err: 400 (bad body, missing field, bad base64 or
 *         handle size, duplicate name, unknown device, handle that cannot be
 *         opened, byte_size 0 or past the allocation, HPS__KSERVE_SHM_MAX_REGIONS
 *         registered), 501 (s->cuda false).
 */
int hps__kserve_shm_register_cuda(struct hps__kserve_shm *s, const char *name, const char *body,
                                  size_t len, hps__kserve_kerr_t *err);

/**
 * Append the status array of the regions of one kind (cuda or system):
 * region `name`, or all of them when name is NULL.
 * @return 0, or -1 with err 404 for an unknown name or a region of the other
 *         kind (t then holds "[]").
 */
int hps__kserve_shm_status(struct hps__kserve_shm *s, bool cuda, const char *name,
                           hps__kserve_text_t *t, hps__kserve_kerr_t *err);

/**
 * Unregister region `name` of one kind (NULL: all of that kind).  Unknown
 * names and regions of the other kind are a no-op.  A region in use is
 * unmapped (CUDA: its IPC handle closed) when its last request releases it.
 */
void hps__kserve_shm_unregister(struct hps__kserve_shm *s, bool cuda, const char *name);

/**
 * Lend [offset, offset + size) of region name[0, name_len) to a request,
 * checked against the registered size and, for a system region, against
 * its object's size now (fstat); write: the region must be writable.
 * @param s  the table, or NULL (no region exists: 404).
 * @return 0 and ret, or -1 with err: 404 unknown region, 400 out of bounds,
 *         read-only, or an object truncated below the registered window;
 *         500 fstat failed.
 */
int hps__kserve_shm_acquire(struct hps__kserve_shm *s, const char *name, size_t name_len,
                            uint64_t offset, uint64_t size, bool write,
                            struct hps__kserve_shm_ref *ret, hps__kserve_kerr_t *err);

/**
 * Copy n bytes of a lent window (from ref->ptr on) to host memory dst:
 * memcpy, or a device-to-host copy for a CUDA region.
 * @return 0, or -1 with err 500 (CUDA copy failed or timed out).
 */
int hps__kserve_shm_read(const struct hps__kserve_shm_ref *ref, void *dst, size_t n,
                         hps__kserve_kerr_t *err);

/**
 * Copy n bytes of host memory src to ptr, inside a window lent from region
 * r: memcpy, or a host-to-device copy for a CUDA region.
 * @return 0, or -1 with err 500 (CUDA copy failed or timed out).
 */
int hps__kserve_shm_write(struct hps__kserve_shm_region *r, char *ptr, const void *src, size_t n,
                          hps__kserve_kerr_t *err);

/* ------------------------------------------------------------------------ */
/* OUTPUT0 buffers (kserve_outpool.c)                                        */
/* ------------------------------------------------------------------------ */

#define HPS__KSERVE_OUTPOOL_SLOTS 8
#define HPS__KSERVE_OUTPOOL_MIN   ((size_t)1 << 20) /* smaller buffers come from the heap anyway */
#define HPS__KSERVE_OUTPOOL_MAX   ((size_t)1 << 30) /* bytes kept at most, all buffers together */

/** Large OUTPUT0 buffers kept for reuse (fresh pages cost more than lookups),
 *  page-locked by the backend's pin_output when it has one. */
struct hps__kserve_outpool {
    pthread_mutex_t mu;                    /* guards buf and bytes */
    float *buf[HPS__KSERVE_OUTPOOL_SLOTS]; /* kept buffers, NULL: an empty slot; mu */
    size_t bytes;                          /* capacity of the kept buffers, summed; mu */
    /* Set by hps__kserve_outpool_init, then read-only (called outside mu). */
    hps_err_t (*pin)(void *ctx, void *buf, size_t bytes); /* NULL: none */
    void (*unpin)(void *ctx, void *buf, size_t bytes);
    void *ctx;
};

/** An empty pool; pin, unpin and ctx from be (which may be NULL). */
void hps__kserve_outpool_init(struct hps__kserve_outpool *p, const hps_kserve_backend_t *be);
/** Free every kept buffer (none may be in use). */
void hps__kserve_outpool_fini(struct hps__kserve_outpool *p);
/** A buffer of at least n bytes (kept one or new); NULL when out of memory.
 *  Thread-safe.  Release with hps__kserve_outpool_put, never free(). */
float *hps__kserve_outpool_get(struct hps__kserve_outpool *p, size_t n);
/** Keep or free a buffer of hps__kserve_outpool_get; NULL is a no-op.  Thread-safe. */
void hps__kserve_outpool_put(struct hps__kserve_outpool *p, float *out);

/** The CUDA device of a CUDA region (its window is device memory there),
 *  -1 for a system region or NULL. */
int hps__kserve_shm_device(const struct hps__kserve_shm_region *r);

/** Give back a region from hps__kserve_shm_acquire(); r may be NULL. */
void hps__kserve_shm_release(struct hps__kserve_shm *s, struct hps__kserve_shm_region *r);

/* ------------------------------------------------------------------------ */
/* CUDA IPC memory (kserve_cudashm.c)                                        */
/* ------------------------------------------------------------------------ */

/** Bytes of a cudaIpcMemHandle_t. */
#define HPS__KSERVE_CUDA_IPC_HANDLE_BYTES 64

/** Device memory of another process, opened from its IPC handle. */
struct hps__kserve_cuda_ipc {
    char *base;     /* device pointer (cudaIpcOpenMemHandle) */
    uint64_t avail; /* bytes from base to the end of its allocation */
    int device;
    void *stream; /* cudaStream_t, non-blocking, on device: the copies */
};

/**
 * Decode standard base64 (RFC 4648, '=' padding required) of src[0, n)
 * into dst[0, cap).  Returns the decoded length, or -1 when src is not
 * valid base64 or decodes to more than cap bytes.
 */
long hps__kserve_b64_decode(const char *src, size_t n, unsigned char *dst, size_t cap);

/** True in builds with CUDA (HPS_HAVE_CUDA). */
bool hps__kserve_cuda_ipc_supported(void);

/**
 * Open handle (HPS__KSERVE_CUDA_IPC_HANDLE_BYTES) on device_id and check that
 * byte_size bytes fit in its allocation (cuMemGetAddressRange).  The
 * calling thread's current device is restored.
 * @return 0, or -1 with err 400 "failed to register CUDA shared memory
 *         region '<name>': ..." (no such device, unopenable handle, byte_size
 *         past the allocation), 500 (stream), 501 (no CUDA in this build).
 */
int hps__kserve_cuda_ipc_open(const char *name, const unsigned char *handle, int64_t device_id,
                              uint64_t byte_size, struct hps__kserve_cuda_ipc *ret,
                              hps__kserve_kerr_t *err);

/** Close what hps__kserve_cuda_ipc_open() opened (no copy may be in flight). */
void hps__kserve_cuda_ipc_close(struct hps__kserve_cuda_ipc *m);

/**
 * Copy n bytes from m->base + off (device m->device) to host memory dst,
 * waiting at most HPS__KSERVE_CUDA_COPY_TIMEOUT_MS.  The caller checked the bounds.
 * @return 0, or -1 with err 500 (copy failed or timed out).
 */
int hps__kserve_cuda_ipc_read(const struct hps__kserve_cuda_ipc *m, uint64_t off, void *dst,
                              size_t n, hps__kserve_kerr_t *err);

/** The same, host memory src to m->base + off. */
int hps__kserve_cuda_ipc_write(const struct hps__kserve_cuda_ipc *m, uint64_t off, const void *src,
                               size_t n, hps__kserve_kerr_t *err);

/** Longest wait for one copy to or from a CUDA region. */
#define HPS__KSERVE_CUDA_COPY_TIMEOUT_MS 10000

/* ------------------------------------------------------------------------ */
/* Inference request (kserve_infer.c)                                        */
/* ------------------------------------------------------------------------ */

/** Limits and context that apply to every request. */
struct hps__kserve_klimits {
    size_t max_keys;
    unsigned json_depth;
    /** Regions inputs and outputs may name; NULL = none (404). */
    struct hps__kserve_shm *shm;
};

/** Slots of hps__kserve_infer_req.held. */
enum {
    HPS__KSERVE_HELD_KEYS,
    HPS__KSERVE_HELD_NUMKEYS,
    HPS__KSERVE_HELD_OUTPUT,
    HPS__KSERVE_HELD_N
};

/** A validated inference request. */
struct hps__kserve_infer_req {
    char *id; /* request "id" (copied), or NULL */
    size_t id_len;
    bool binary_output;
    const int64_t *keys; /* (num_keys) 8-byte aligned: into the body or keys_owned */
    int64_t *keys_owned;
    size_t num_keys;
    int32_t *numkeys; /* (T) owned */
    uint64_t out_len; /* floats: sum_t numkeys[t] * dims[t] */
    uint64_t num_samples;
    /* Shared memory: regions held until hps__kserve_infer_req_fini(). */
    struct hps__kserve_shm *shm;
    struct hps__kserve_shm_region *held[HPS__KSERVE_HELD_N];
    /* OUTPUT0 into a region: out_shm != NULL.  Then binary_output is false
     * and the response names the region instead of carrying data. */
    char *out_shm;    /* a device pointer when out_cuda: never dereference */
    bool out_cuda;    /* the region is CUDA memory */
    char *out_region; /* name (owned) */
    uint64_t out_shm_size;
    uint64_t out_shm_offset;
    /* The version the URL names (/versions/{v}), 0 = none: the answer must
     * come from it.  Set by the caller after parsing. */
    uint64_t version;
};

/**
 * Parse and validate an inference request body for model m.
 * @param body          the whole body; must outlive ret (keys may point in).
 * @param header_length value of Inference-Header-Content-Length, or NULL.
 * @return 0, or -1 with err set (status 400, 404, 500 or 501).
 */
int hps__kserve_infer_parse(const struct hps__kserve_klimits *lim,
                            const struct hps__kserve_kmodel *m, const char *body, size_t body_len,
                            const char *header_length, struct hps__kserve_infer_req *ret,
                            hps__kserve_kerr_t *err);
void hps__kserve_infer_req_fini(struct hps__kserve_infer_req *r);

/**
 * Put the lookup's result into the output region, if the request names one
 * and out is not the region itself: memcpy, or a host-to-device copy into
 * a CUDA region.
 * @return 0, or -1 with err 500 (CUDA copy failed).
 */
int hps__kserve_infer_store_output(const struct hps__kserve_infer_req *r, const float *out,
                                   hps__kserve_kerr_t *err);

/* ------------------------------------------------------------------------ */
/* Response bodies (kserve_response.c)                                       */
/* ------------------------------------------------------------------------ */

/** {"error":"<msg>"} */
void hps__kserve_resp_error(hps__kserve_text_t *t, const char *msg);
/** Server metadata; extensions are the ones this front end implements,
 *  plus system_shared_memory when shm is true, cuda_shared_memory when
 *  cuda_shm is. */
void hps__kserve_resp_server_meta(hps__kserve_text_t *t, const char *name, const char *version,
                                  bool shm, bool cuda_shm);
void hps__kserve_resp_model_meta(hps__kserve_text_t *t, const struct hps__kserve_kmodel *m);
void hps__kserve_resp_model_config(hps__kserve_text_t *t, const struct hps__kserve_kmodel *m);
/** {"model_stats":[...]} of models[0 .. count), each name once
 *  (hps__kserve_model_current with b) and loaded ones only (b->model_loaded,
 *  when b has it; b NULL: every entry). */
void hps__kserve_resp_stats(hps__kserve_text_t *t, const struct hps__kserve_kmodel *models,
                            size_t count, const hps_kserve_backend_t *b);
/**
 * The inference response, labelled with model version `version` (the one
 * the lookup answered from).  With r->binary_output only the JSON header is
 * written (the caller sends out[] after it); else the whole JSON with data.
 */
void hps__kserve_resp_infer(hps__kserve_text_t *t, const struct hps__kserve_kmodel *m,
                            const struct hps__kserve_infer_req *r, const float *out,
                            uint64_t version);

/* ------------------------------------------------------------------------ */
/* Content codings: gzip and deflate bodies (kserve_zlib.c, zlib)            */
/* ------------------------------------------------------------------------ */

/** A request's Content-Encoding, or the coding chosen for a response. */
enum hps__kserve_zenc {
    HPS__KSERVE_ZENC_IDENTITY, /* no coding */
    HPS__KSERVE_ZENC_GZIP,     /* RFC 1952 */
    HPS__KSERVE_ZENC_DEFLATE,  /* HTTP's "deflate": the zlib format, RFC 1950 */
    HPS__KSERVE_ZENC_UNKNOWN   /* anything else (a request only) */
};

/**
 * The coding a Content-Encoding header value names.
 * @param value  the header value (NUL-terminated), or NULL when absent.
 * @return HPS__KSERVE_ZENC_IDENTITY for NULL, "" and "identity"; HPS__KSERVE_ZENC_GZIP
 *         for "gzip" and "x-gzip"; HPS__KSERVE_ZENC_DEFLATE for "deflate";
 *         HPS__KSERVE_ZENC_UNKNOWN for anything else, a list of several codings
 *         included.  Case-insensitive, surrounding blanks ignored.  Pure.
 */
enum hps__kserve_zenc hps__kserve_zenc_parse(const char *value);

/**
 * The coding of a response as Triton chooses it from an Accept-Encoding
 * header value: among "identity", "gzip" and "deflate" (case-insensitive;
 * other codings and "*" are ignored), the first listed of the highest
 * q-value above 0; an element whose q-value does not parse is skipped.
 * @param value  the header value, or NULL when absent.
 * @return HPS__KSERVE_ZENC_GZIP, HPS__KSERVE_ZENC_DEFLATE, or HPS__KSERVE_ZENC_IDENTITY (NULL,
 *         nothing acceptable listed, or identity preferred).  Pure.
 */
enum hps__kserve_zenc hps__kserve_zenc_accept(const char *value);

/** The token of a coding ("identity", "gzip", "deflate", "unknown"): static. */
const char *hps__kserve_zenc_name(enum hps__kserve_zenc enc);

/**
 * The most compressed bytes accepted for a body of at most n bytes once
 * inflated: n + n/8 + n/64 + 4 KiB, zlib's conservative deflateBound() for
 * any settings (incompressible data in stored blocks as small as memLevel 1
 * makes them) plus room for a gzip header that names a file.  No ordinary
 * compressor makes a longer body of n bytes; it bounds the CPU a client can
 * spend on empty blocks.  Pure.
 */
uint64_t hps__kserve_zbound(size_t n);

/**
 * Heap bytes one inflater holds (its struct, zlib's state and 32 KiB
 * window), rounded up: what a caller counts against a memory budget.
 */
#define HPS__KSERVE_INFLATE_STATE_BYTES ((size_t)64 << 10)

/**
 * Where an inflater puts its output: append data[0, n) (n > 0).
 * @return 0, or -1 to stop with err set (status and message of the answer:
 *         e.g. 503 for a spent budget, 500 out of memory).
 */
typedef int (*hps__kserve_zsink_t)(void *ctx, const char *data, size_t n, hps__kserve_kerr_t *err);

/** An incremental decoder of one gzip or deflate body (opaque). */
struct hps__kserve_inflate;

/**
 * Start decoding a body of coding enc, whose inflated size may not exceed
 * max_out bytes.  Either coding accepts either wrapper, as Triton does
 * (zlib's automatic header detection): a body starting with the gzip magic
 * is gzip, one with a valid zlib header is zlib; for "deflate" anything
 * else is taken as raw deflate (RFC 1951: what some clients send).  A gzip
 * body may hold several members (RFC 1952 2.2), inflated one after the
 * other.  Nothing is allocated beyond HPS__KSERVE_INFLATE_STATE_BYTES.
 * @param enc      HPS__KSERVE_ZENC_GZIP or HPS__KSERVE_ZENC_DEFLATE.
 * @param max_out  the inflated bytes allowed (the server's max body size);
 *                 compressed input is allowed up to hps__kserve_zbound(max_out).
 * @param sink     receives the inflated bytes in order, never more than
 *                 max_out in all; called from hps__kserve_inflate_feed() only.
 * @param ctx      passed to sink.
 * @param ret      the decoder, to free with hps__kserve_inflate_destroy().
 * @return 0, or -ENOMEM (*ret untouched).  Thread-compatible: one decoder
 *         is used by one thread at a time.
 */
int hps__kserve_inflate_create(enum hps__kserve_zenc enc, size_t max_out, hps__kserve_zsink_t sink,
                               void *ctx, struct hps__kserve_inflate **ret);

/**
 * Decode the next n compressed bytes (any split of the body is fine, n may
 * be 0), handing what inflates to the sink.  After the first error every
 * call does nothing and returns -1.
 * @return 0, or -1 with hps__kserve_inflate_error() set: 400 when the inflated
 *         body would pass max_out (the output stops at max_out: a zip bomb
 *         is never inflated further) or the compressed one hps__kserve_zbound();
 *         400 for data zlib rejects (bad header, block, checksum, trailing
 *         bytes after a zlib or raw stream); the sink's error; 500 when
 *         zlib runs out of memory.
 */
int hps__kserve_inflate_feed(struct hps__kserve_inflate *z, const void *in, size_t n);

/**
 * The body is complete: check that the compressed stream ended.
 * @return 0, or -1 with hps__kserve_inflate_error() set: an earlier error, or 400
 *         for an empty or truncated stream.
 */
int hps__kserve_inflate_end(struct hps__kserve_inflate *z);

/** The decoder's error (status and message), or NULL while there is none.
 *  Valid until hps__kserve_inflate_destroy(). */
const hps__kserve_kerr_t *hps__kserve_inflate_error(const struct hps__kserve_inflate *z);

/** Inflated bytes the sink has taken so far (a refused call not counted). */
uint64_t hps__kserve_inflate_total(const struct hps__kserve_inflate *z);

/** Free a decoder; NULL is a no-op. */
void hps__kserve_inflate_destroy(struct hps__kserve_inflate *z);

/** A byte range, one part of a body to compress. */
struct hps__kserve_zpart {
    const void *data;
    size_t len;
};

/**
 * Compress the concatenation of parts[0, nparts) as one gzip or zlib
 * ("deflate") stream, at zlib's level 1: fp32 rows barely compress, and
 * JSON at level 1 comes within a few percent of the default level's size
 * in a fraction of its time (a worker compresses on its event loop).
 * @param enc   HPS__KSERVE_ZENC_GZIP or HPS__KSERVE_ZENC_DEFLATE.
 * @param ret   the compressed bytes, malloc()ed: the caller frees them.
 * @param ret_len  their length.
 * @return 0, -ENOMEM, or -EINVAL (another enc, or zlib refused):
 *         *ret and *ret_len are written on success only.  Thread-safe.
 */
int hps__kserve_zcompress(enum hps__kserve_zenc enc, const struct hps__kserve_zpart *parts,
                          size_t nparts, char **ret, size_t *ret_len);

/* ------------------------------------------------------------------------ */
/* Clock                                                                     */
/* ------------------------------------------------------------------------ */

/** CLOCK_MONOTONIC in nanoseconds. */
uint64_t hps__kserve_now_ns(void);
/** CLOCK_REALTIME in milliseconds since the epoch. */
uint64_t hps__kserve_epoch_ms(void);

#endif /* HPS_WORKER_KSERVE_INTERNAL_H */
