/*
 * kserve.h -- the worker's HTTP front end: the KServe v2 / Triton REST
 * protocol for HPS models, independent of where the embeddings come from.
 *
 * A server (hps_kserve_t) is built from options, a registry of models and a
 * backend vtable, then started: it listens on an HTTP port (KServe v2 API)
 * and, unless disabled, on a separate metrics port (GET /metrics, Prometheus
 * text).  Every inference request is parsed, validated with Triton's status
 * codes and messages, and handed to the backend's lookup() as plain arrays;
 * the front end formats the answer (JSON or the binary-data extension) and
 * keeps Triton-style statistics and metrics per model.
 *
 * Endpoints (HTTP port):
 *
 *     GET  /v2/health/live                       200 while serving
 *     GET  /v2/health/ready                      200 if backend->ready(), else 400
 *     GET  /v2                                   server metadata
 *     GET  /v2/models/{m}[/versions/{v}]         model metadata
 *     GET  /v2/models/{m}[/versions/{v}]/ready   200 / 400
 *     GET  /v2/models/{m}[/versions/{v}]/config  model configuration (JSON)
 *     GET  /v2/models[/{m}[/versions/{v}]]/stats statistics extension
 *     POST /v2/models/{m}[/versions/{v}]/infer   inference (JSON or binary)
 *     GET  /v2/systemsharedmemory[/region/{r}]/status      regions (JSON array)
 *     POST /v2/systemsharedmemory/region/{r}/register      {"key","offset","byte_size"}
 *     POST /v2/systemsharedmemory[/region/{r}]/unregister  200, unknown r too
 *     GET  /v2/cudasharedmemory[/region/{r}]/status        regions (JSON array)
 *     POST /v2/cudasharedmemory/region/{r}/register        {"raw_handle":{"b64"},
 *                                                          "device_id","byte_size"}
 *     POST /v2/cudasharedmemory[/region/{r}]/unregister    200, unknown r too
 *     (the /v2/cudasharedmemory endpoints answer 501 unless
 *      opts.cuda_shared_memory in a build with CUDA)
 *     POST /v2/repository/index                  the models, version, state
 *     POST /v2/repository/models/{m}/(load|unload)  explicit model control (503 in mode none)
 *     POST /v2/repository/{repo}/...             501
 *
 * System shared memory (Triton's extension, advertised as
 * "system_shared_memory" unless opts.disable_client_shm): a client maps a
 * POSIX shared-memory object (shm_open key) under a region name; inference
 * inputs may then read KEYS / NUMKEYS from a region, and OUTPUT0 may be
 * written straight into one (parameters shared_memory_region,
 * shared_memory_byte_size, shared_memory_offset): the response then names
 * the region instead of carrying data.  Windows are checked against the
 * registered size; a region unregistered while requests use it is unmapped
 * when they finish.
 *
 * CUDA shared memory (advertised as "cuda_shared_memory" when enabled): a
 * client registers device memory by its cudaIpcMemHandle_t (base64); the
 * worker opens it (cudaIpcOpenMemHandle) on device_id and refuses a
 * byte_size past the allocation.  KEYS / NUMKEYS are copied from such a
 * region to host memory, OUTPUT0 is copied into it after the lookup (host
 * to device).  System and CUDA regions share one name space.
 *
 * Success is always 200; every error body is {"error": "<message>"} with
 * Content-Type application/json: 400 invalid request (also: unknown model,
 * body over max_body_bytes, more keys than max_keys_per_request), 404
 * unknown path (and, as in Triton, an unknown shared-memory region), 405
 * wrong method, 500 backend failure (also: output region too small), 501
 * unsupported (more samples than max_batch_size, as the HPS backend; CUDA
 * shared memory where not enabled; client shared memory disabled), 503
 * backend busy.  As in Triton, /v2/health/live and /v2/health/ready answer
 * with an empty body (200 / 400); a model's /ready that fails says why.
 *
 * Statistics and metrics, per model: success / fail / queue /
 * compute_input / compute_infer / compute_output counts and nanoseconds,
 * inference_count (sum of NumSample), execution_count, last_inference; the
 * metrics port serves them as Triton's nv_inference_request_success,
 * _request_failure{reason}, nv_inference_count, _exec_count,
 * _request_duration_us, _queue_duration_us, _compute_{input,infer,output}_
 * duration_us and nv_inference_pending_request_count (requests in
 * progress), labels model and version, followed by the backend's families.
 *
 * HPS model I/O (Triton's hps backend): inputs KEYS INT64 [1, N] (table 0's
 * keys for the whole batch, then table 1's, ...) and NUMKEYS INT32 [1, T]
 * (keys per table); output OUTPUT0 FP32 [sum_t NUMKEYS[t] * dim[t]], table
 * blocks in table order; response parameters NumSample and DeviceID.  A
 * model with max_batch_size 0 takes KEYS [N] and NUMKEYS [T] instead.
 *
 * Threads.  The HTTP listener runs `threads` event-loop threads (libmicro-
 * httpd, epoll); each request is parsed and answered on one of them.  An
 * inference lookup runs there only through backend->lookup_nowait(), which
 * answers at once or declines (HPS_EAGAIN); otherwise the connection is
 * suspended and backend->lookup() runs on one of `lookup_threads` pool
 * threads, which resumes the connection with the answer: a lookup that
 * waits (for the coordinator, a GPU) never holds up the other requests of
 * its event loop.  The metrics listener has one thread of its own.
 *
 * The library never prints and keeps no global state: several servers may
 * live in one process.  Hosts must be little-endian (binary tensors are
 * little-endian on the wire and are used in place).
 */
#ifndef HPS_KSERVE_H
#define HPS_KSERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hps/hps.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A server: listeners, model registry, statistics.  Opaque. */
typedef struct hps_kserve hps_kserve_t;

/** A growable text buffer the backend appends metrics to.  Opaque. */
typedef struct hps_kserve_text hps_kserve_text_t;

/** Default HTTP port (Triton's). */
#define HPS_KSERVE_DEFAULT_HTTP_PORT 8000
/** Default metrics port (Triton's). */
#define HPS_KSERVE_DEFAULT_METRICS_PORT 8002
/** metrics_port value that disables the metrics listener. */
#define HPS_KSERVE_PORT_DISABLED (-1)
/** Default request body limit: 64 MiB, Triton's --http-max-input-size. */
#define HPS_KSERVE_DEFAULT_MAX_BODY_BYTES ((size_t)1 << 26)
/** Default limit on KEYS elements per request. */
#define HPS_KSERVE_DEFAULT_MAX_KEYS ((size_t)1 << 20)
/** Longest model or table name, and longest version string. */
#define HPS_KSERVE_NAME_MAX HPS_NAME_MAX
/** Most tables per model. */
#define HPS_KSERVE_MAX_TABLES HPS_MAX_TABLES
/** Largest embedding dimension (floats per vector). */
#define HPS_KSERVE_MAX_DIM ((uint32_t)HPS_MAX_DIM)
/** Largest accepted max_keys_per_request. */
#define HPS_KSERVE_MAX_KEYS_LIMIT ((size_t)1 << 32)
/** Size of hps_kserve_lookup_stats_t.message, NUL included. */
#define HPS_KSERVE_MESSAGE_MAX 256

/**
 * Server options.  Fill with hps_kserve_options_init(), then override.  A
 * zero in a numeric field (other than the ports) and NULL in a string field
 * select the documented default, so a zero-initialised struct is valid too
 * (its ports are then 0: pick free ports).
 */
typedef struct hps_kserve_options {
    /** Numeric IPv4 or IPv6 address (or "localhost") of the HTTP listener;
     *  NULL = "127.0.0.1".  "0.0.0.0" or "::" listen on every interface. */
    const char *http_address;
    /** HTTP port, 0..65535; 0 = a free port chosen by the kernel
     *  (see hps_kserve_ports()).  options_init: 8000. */
    int http_port;
    /** Address of the metrics listener; NULL = http_address. */
    const char *metrics_address;
    /** Metrics port; 0 = a free port; HPS_KSERVE_PORT_DISABLED = no metrics
     *  listener.  options_init: 8002. */
    int metrics_port;
    /** HTTP event-loop threads, which also run backend->lookup_nowait();
     *  0 = 4; at most 1024. */
    unsigned threads;
    /** Lookup pool threads, which run backend->lookup() (see Threads);
     *  0 = 32; at most 1024. */
    unsigned lookup_threads;
    /** Largest accepted request body in bytes (JSON header plus binary
     *  tensors); 0 = 64 MiB.  Larger bodies get 400 without being buffered. */
    size_t max_body_bytes;
    /** Most bytes of request bodies buffered at once over all connections;
     *  0 = 16 x (max_body_bytes + 64 KiB, a gzip/deflate decoder's state;
     *  about 1 GiB by default).  A request whose body
     *  would pass it gets 503 (its body is read and dropped), so clients that
     *  declare large bodies and stall cannot exhaust the worker's memory. */
    size_t max_buffered_body_bytes;
    /** Largest KEYS element count per request, at most
     *  HPS_KSERVE_MAX_KEYS_LIMIT; 0 = 1 Mi keys.  Bounds the output buffer
     *  too: at most max_keys * max(dim) floats. */
    size_t max_keys_per_request;
    /** Most simultaneous HTTP connections; 0 = 1024. */
    unsigned max_connections;
    /** A connection idle this long is closed, in seconds; 0 = 60. */
    unsigned idle_timeout_s;
    /** Milliseconds a client has to send a request's whole header (from
     *  the request line, or from the accept for a connection's first
     *  request), however slowly it trickles; then the connection is
     *  closed.  0 = 10000.  Past seven eighths of max_connections, each new
     *  connection closes the oldest one that is sending a header or idle
     *  (or a body below min_body_rate).  The metrics port applies it too,
     *  with its own 64 connections. */
    unsigned header_timeout_ms;
    /** Bytes per second a request's body must average, from the end of its
     *  header, once header_timeout_ms has passed; a slower connection is
     *  closed (a body trickled a byte at a time held its connection for
     *  ever).  0 = 1024. */
    unsigned min_body_rate;
    /** hps_kserve_stop() waits at most this long for requests in progress,
     *  in milliseconds; 0 = 5000. */
    unsigned drain_timeout_ms;
    /** "name" of the server metadata; NULL = "hps". */
    const char *server_name;
    /** "version" of the server metadata; NULL = hps_version(). */
    const char *server_version;
    /** Refuse client shared memory: the /v2/systemsharedmemory endpoints
     *  answer 501, "system_shared_memory" is not advertised and inference
     *  requests naming a region get 404.  false (the default, unlike
     *  Triton's --allow-client-shm=false) lets any client that can reach
     *  the port map POSIX shared-memory objects the worker's user can open:
     *  set it when the HTTP port is reachable by untrusted clients. */
    bool disable_client_shm;
    /** Also accept CUDA shared-memory regions (the /v2/cudasharedmemory
     *  endpoints, "cuda_shared_memory" advertised).  Honoured only in
     *  builds with CUDA (HPS_HAVE_CUDA) and unless disable_client_shm;
     *  otherwise those endpoints answer 501.  options_init: false
     *  (hps-worker sets it).  Registration makes the calling HTTP thread
     *  create a CUDA context on the region's device. */
    bool cuda_shared_memory;
    /** Models the registry can hold, those added later by
     *  hps_kserve_add_model() included: 0 (options_init) = the number given
     *  to hps_kserve_create(), none can be added; at most 1024. */
    size_t model_capacity;
} hps_kserve_options_t;

/**
 * One servable model.  Copied by hps_kserve_create(): the caller's strings
 * and arrays need not outlive that call.
 */
typedef struct hps_kserve_model {
    /** Model name, 1..HPS_KSERVE_NAME_MAX bytes of [A-Za-z0-9_.-]; unique. */
    const char *name;
    /** Version, 1..18 decimal digits; NULL = "1". */
    const char *version;
    /** Number of embedding tables T, 1..HPS_KSERVE_MAX_TABLES. */
    uint32_t num_tables;
    /** (T) embedding vector size of each table, 1..HPS_KSERVE_MAX_DIM. */
    const uint32_t *dims;
    /** (T) table names ([A-Za-z0-9_.-], 1..HPS_KSERVE_NAME_MAX bytes), or
     *  NULL: "table0", "table1", ...  Shown by the /config endpoint. */
    const char *const *table_names;
    /** (T) HugeCTR's maxnum_catfeature_query_per_table_per_sample (keys of
     *  one sample in each table, each >= 1), or NULL = 1 per table.
     *  NumSample = N / sum(max_keys_per_sample) (integer division). */
    const uint32_t *max_keys_per_sample;
    /** Largest NumSample per request (HPS: 501 above it); 0 = the model does
     *  not batch: no limit, and tensors have no leading batch dimension. */
    uint32_t max_batch_size;
    /** Reported as the DeviceID response parameter. */
    int32_t device_id;
} hps_kserve_model_t;

/**
 * Timings a lookup may report, in nanoseconds, and an optional error
 * message.  The front end zeroes the struct before each call.  If the
 * backend leaves all four durations 0, the whole call counts as
 * compute_infer.  Front-end parsing is added to compute_input and response
 * formatting to compute_output (statistics and nv_inference_* metrics).
 */
typedef struct hps_kserve_lookup_stats {
    uint64_t queue_ns;          /**< waiting for a device, a batch, a queue slot */
    uint64_t compute_input_ns;  /**< copying or de-duplicating keys */
    uint64_t compute_infer_ns;  /**< cache, databases, defaults */
    uint64_t compute_output_ns; /**< scatter and copy-out of the vectors */
    /** On success: the model version every row of the answer came from (it
     *  labels the response's model_version, and a request that names
     *  another version in its URL is refused); 0 = not said: the version
     *  set by hps_kserve_set_model_version().  A backend whose models change
     *  version while it serves sets it, since the registry's version is
     *  polled and may lag a switch by the backend's polling period. */
    uint64_t model_version;
    /** On failure: optional detail, NUL-terminated, shown to the client;
     *  "" = hps_strerror() of the returned code. */
    char message[HPS_KSERVE_MESSAGE_MAX];
} hps_kserve_lookup_stats_t;

/**
 * The embedding source.  Only lookup is required.  All callbacks may be
 * called concurrently from several threads (lookup from the HTTP threads,
 * ready from them too, metrics from the metrics thread) between
 * hps_kserve_start() and the return of hps_kserve_stop(); none is called
 * outside that window.
 */
typedef struct hps_kserve_backend {
    /** Passed back as the first argument of every callback. */
    void *ctx;

    /**
     * @brief Fill out with the embedding vectors of keys.
     * @param[in]  ctx          backend->ctx.
     * @param[in]  model_index  index of the model in the registry given to
     *                          hps_kserve_create().
     * @param[in]  num_tables   T, the model's num_tables.
     * @param[in]  numkeys      (T) int32, host memory: keys per table, each
     *                          >= 0, summing to num_keys.
     * @param[in]  keys         (num_keys) int64, host memory, table-major:
     *                          numkeys[0] keys of table 0, then table 1...
     *                          8-byte aligned, valid only during the call.
     * @param[in]  num_keys     N, 1..max_keys_per_request (never called with
     *                          0 keys: such requests are answered directly).
     * @param[out] out          (out_len) fp32, host memory, 4-byte aligned:
     *                          sum_t numkeys[t] * dims[t] floats, row-major,
     *                          in key order.  Owned by the front end.
     * @param[in]  out_len      number of floats in out.
     * @param[out] stats        zeroed; fill the timings you measure, and
     *                          message on failure if useful.
     * @return 0, or an error: HPS_EBUSY answers 503 (nv_inference_request_
     *         failure reason REJECTED), and so does HPS_EMISMATCH (the
     *         model changed its tables since the request was routed to
     *         model_index: a retry goes to the new shape); anything else
     *         answers 500 (reason BACKEND).  Either way the message is stats->message or
     *         hps_strerror() of the code.
     */
    hps_err_t (*lookup)(void *ctx, size_t model_index, uint32_t num_tables, const int32_t *numkeys,
                        const int64_t *keys, size_t num_keys, float *out, size_t out_len,
                        hps_kserve_lookup_stats_t *stats);

    /**
     * @brief Optional (NULL = every lookup runs on the pool): as lookup, on
     *        an event-loop thread, but it must not wait for long: HPS_EAGAIN
     *        (out then undefined, nothing counted) sends the request to the
     *        lookup pool, where lookup() (or lookup_device()) answers it.
     * @param[in]  device  -1: out is host memory, as for lookup; else out is
     *                     device memory of that CUDA device (as d_out of
     *                     lookup_device), and HPS_EUNSUPPORTED also sends the
     *                     request to the pool.
     * Other arguments and results as lookup.
     */
    hps_err_t (*lookup_nowait)(void *ctx, size_t model_index, uint32_t num_tables,
                               const int32_t *numkeys, const int64_t *keys, size_t num_keys,
                               int device, float *out, size_t out_len,
                               hps_kserve_lookup_stats_t *stats);

    /**
     * @brief Optional (NULL = none): fill device memory with the vectors,
     *        for OUTPUT0 in a CUDA shared-memory region.
     * Same arguments as lookup, except d_out: (out_len) fp32, device memory
     * of CUDA device `device`, mapped in this process (the region opened by
     * cudaIpcOpenMemHandle, at the request's offset), valid only during the
     * call; written completely before the call returns.
     * @return as lookup, or HPS_EUNSUPPORTED: not served this way (e.g. no
     *         GPU cache for the model, another device); the front end then
     *         calls lookup into host memory and copies the result into the
     *         region.
     */
    hps_err_t (*lookup_device)(void *ctx, size_t model_index, uint32_t num_tables,
                               const int32_t *numkeys, const int64_t *keys, size_t num_keys,
                               int device, float *d_out, size_t out_len,
                               hps_kserve_lookup_stats_t *stats);

    /**
     * @brief Whether the server is ready (segment attached, coordinator
     *        alive).  NULL = always ready.
     * When false, /v2/health/ready and every model's /ready answer 400, but
     * inference is still served ("degraded": the backend answers from what
     * it has).  Must be cheap and never block.
     */
    bool (*ready)(void *ctx);

    /**
     * @brief Optional (NULL = every model is loaded): whether model mi is
     *        loaded (explicit model control and SIGHUP reloads unload models).  A model that
     *        is not gets Triton's answer for a model without versions (400
     *        "Request for unknown model: 'x' has no available versions") on
     *        inference, metadata, config and ready.  Must be cheap and never
     *        block (it runs for every request).
     */
    bool (*model_loaded)(void *ctx, size_t mi);

    /**
     * @brief Optional (NULL = READY while ready(), else UNAVAILABLE): model
     *        mi's state for the repository index, and for the model's
     *        /ready (200 only while ready() and this says READY).  *ret_served = whether it
     *        was ever loaded while this server ran (else Triton lists it by
     *        name only).  Must not block for long.
     */
    hps_model_state_t (*model_state)(void *ctx, size_t mi, bool *ret_served);

    /**
     * @brief Optional (NULL = model control mode none: load and unload get
     *        Triton's 503 refusal): load or unload a model, blocking until
     *        it serves or failed.  Runs on the lookup pool, never on an
     *        event-loop thread.
     * @param[in]  model  the model's name, host string (maybe one that is
     *                    not in the registry: added to the INI later).
     * @param[out] msg    why, on failure (NUL-terminated, len bytes).
     * @return 0 (answered 200); HPS_EIO (refused or failed: 400 with msg);
     *         HPS_EBUSY, HPS_EAGAIN, HPS_ETIMEDOUT (503 with msg).
     */
    hps_err_t (*model_control)(void *ctx, hps_model_op_t op, const char *model, char *msg,
                               size_t len);

    /**
     * @brief Optional (NULL = the registry is fixed): look for models added
     *        to the backend's configuration since, and add them to the
     *        server with hps_kserve_add_model().  Called when a request
     *        names a model not in the registry (then looked up once more)
     *        and before the repository index is listed; on an event-loop
     *        thread, so it must be cheap when nothing changed (a stat()).
     * @return the number of models added.
     */
    size_t (*refresh_models)(void *ctx);

    /**
     * @brief Append the backend's own metric families (nv_hps_*) in the
     *        Prometheus text format, with # HELP and # TYPE lines, to text.
     *        NULL = none.
     * @param[in] text  use hps_kserve_text_append()/_appendf(); valid only
     *                  during the call.
     * @return 0, or an error: the scrape then answers 500 with its message.
     */
    hps_err_t (*metrics)(void *ctx, hps_kserve_text_t *text);

    /**
     * @brief Optional (NULL = none): page-lock a host buffer that the front
     *        end keeps for the OUTPUT0 of large responses, so that lookup()
     *        can copy rows from device memory straight into it (e.g.
     *        cudaHostRegister) instead of through a staging buffer.
     * Called once per kept buffer: when a buffer of at least 1 MiB (binary
     * or JSON output, not a client shared-memory region) goes back to the
     * front end's pool of at most 8 buffers / 1 GiB after its first
     * response.  From then on lookup() gets that buffer (or a prefix of it)
     * as out; unpin_output is called before it is freed, at the latest by
     * hps_kserve_destroy().  Called on an HTTP thread, concurrently with
     * lookups of other requests, never twice at once for one buffer.
     * @param[in] buf    host memory, heap, bytes long; not page-aligned.
     * @param[in] bytes  its size, >= 1 MiB.
     * @return 0 when pinned; an error keeps the buffer as it is (lookups
     *         work either way); neither pin_output nor unpin_output is
     *         called again for that buffer.
     */
    hps_err_t (*pin_output)(void *ctx, void *buf, size_t bytes);

    /**
     * @brief Undo a successful pin_output (required when pin_output is
     *        set); buf is freed right after.  Same thread rules.
     * @param[in] buf, bytes  as passed to pin_output.
     */
    void (*unpin_output)(void *ctx, void *buf, size_t bytes);
} hps_kserve_backend_t;

/**
 * @brief Add a model to a server's registry, created or running: it is
 *        model_index hps_kserve_num_models() (before the call) of the
 *        backend's callbacks, and is served, listed and counted like the
 *        others from the moment the call returns.  Thread-safe (serialized;
 *        requests in flight are not disturbed).
 * @param[in] model  deep-copied; the same rules as hps_kserve_create()'s.
 * @return 0; HPS_EINVAL (malformed, or a name already registered);
 *         HPS_EFULL (options.model_capacity reached); -ENOMEM.
 */
hps_err_t hps_kserve_add_model(hps_kserve_t *server, const hps_kserve_model_t *model);

/**
 * @brief Add a new shape of a model the registry has (a reload changed its
 *        tables or dimensions): like hps_kserve_add_model(), it is
 *        model_index hps_kserve_num_models() (before the call), and the
 *        earlier entries of the name stay (their indices too).  Requests,
 *        the repository index and the statistics of the name go to the
 *        newest of its entries that the backend's model_loaded says is
 *        loaded (else the newest), so the server switches when the backend
 *        does; a request that finds its entry not loaded has the backend
 *        refresh_models and is routed once more.  Thread-safe (serialized
 *        with hps_kserve_add_model; requests in flight are not disturbed).
 * @param[in] model  deep-copied; the same rules as hps_kserve_create()'s.
 * @return 0; HPS_EINVAL (malformed, or no model of that name is
 *         registered); HPS_EFULL (options.model_capacity reached); -ENOMEM.
 */
hps_err_t hps_kserve_replace_model(hps_kserve_t *server, const hps_kserve_model_t *model);

/** @brief Models in the registry (it only grows).  Thread-safe. */
size_t hps_kserve_num_models(const hps_kserve_t *server);

/**
 * @brief Fill options with the defaults: 127.0.0.1, ports 8000 and 8002,
 *        4 threads, 64 MiB bodies, 1 Mi keys, 1024 connections, 60 s idle
 *        timeout, 5 s drain, name "hps", version hps_version(), client
 *        system shared memory enabled.
 * @param[out] opts  overwritten entirely.
 * Thread-safe; never fails.
 */
void hps_kserve_options_init(hps_kserve_options_t *opts);

/**
 * @brief Build a server (not yet listening).
 * @param[in]  opts        options; NULL = defaults of hps_kserve_options_init().
 *                         Strings are copied.
 * @param[in]  models      (num_models) the registry; deep-copied.  Model i
 *                         is model_index i of backend->lookup().
 * @param[in]  num_models  1..1024.
 * @param[in]  backend     copied (the vtable, not *ctx: ctx must stay valid
 *                         until hps_kserve_destroy()); lookup required,
 *                         unpin_output too when pin_output is set.
 * @param[out] ret         the server, written only on success; release it
 *                         with hps_kserve_destroy().
 * @return 0; HPS_EINVAL for a NULL or malformed argument (bad name, version,
 *         dims, duplicate model name, port out of range, threads > 1024,
 *         max_keys_per_request over HPS_KSERVE_MAX_KEYS_LIMIT, pin_output
 *         without unpin_output); -ENOMEM.
 * Thread-safe (no shared state).
 */
hps_err_t hps_kserve_create(const hps_kserve_options_t *opts, const hps_kserve_model_t *models,
                            size_t num_models, const hps_kserve_backend_t *backend,
                            hps_kserve_t **ret);

/**
 * @brief Bind the listeners and start serving.
 * On return the ports accept connections.  A server may be started again
 * after hps_kserve_stop(); statistics are kept across restarts.
 * @param[in,out] srv  a server from hps_kserve_create().
 * @return 0; HPS_EBUSY if already started; HPS_EINVAL if an address does not
 *         parse or resolve; -EADDRINUSE, -EACCES or another negative errno
 *         from socket/bind/listen; HPS_EIO if libmicrohttpd fails to start
 *         its threads; -ENOMEM.  On failure nothing is left listening.
 * Not thread-safe against start/stop/destroy of the same server.
 */
hps_err_t hps_kserve_start(hps_kserve_t *srv);

/**
 * @brief The bound ports (useful after asking for port 0).
 * @param[in]  srv               a started server.
 * @param[out] ret_http_port     HTTP port; may be NULL.
 * @param[out] ret_metrics_port  metrics port, or 0 when the metrics
 *                               listener is disabled; may be NULL.
 * @return 0; HPS_EINVAL if srv is NULL or not started (outputs untouched).
 * Thread-safe while the server runs.
 */
hps_err_t hps_kserve_ports(const hps_kserve_t *srv, uint16_t *ret_http_port,
                           uint16_t *ret_metrics_port);

/**
 * @brief Whether addr:port can be bound now, as hps_kserve_start() binds its
 * listeners (numeric address or "localhost", SO_REUSEADDR): a socket is
 * bound and closed at once, without listening.  Port 0 (any free port)
 * always can.  For a caller that names a busy port before it starts.
 * @return 0; HPS_EINVAL (NULL addr, port outside 0..65535, an address that
 *         does not parse); a negative errno (-EADDRINUSE, -EACCES, ...).
 * Thread-safe.
 */
hps_err_t hps_kserve_probe_port(const char *addr, int port);

/**
 * @brief Set the version model `model_index` reports (metadata `versions`,
 * the repository index, statistics, /versions/{v} routes, metric labels):
 * the one the backend now answers from (hps-worker: the segment's, after a
 * reload).  Requests in progress keep the version they read.  A version
 * other than the current one starts its statistics and nv_inference_*
 * counters at 0, as Triton's per-version ones do.
 * @param[in] version  >= 1.
 * @return 0; HPS_EINVAL (srv NULL, model_index out of range, version 0).
 * Thread-safe (an atomic exchange; the counters are zeroed with relaxed
 * stores, so requests finishing at that moment may count on either side).
 */
hps_err_t hps_kserve_set_model_version(hps_kserve_t *srv, size_t model_index, uint64_t version);

/**
 * @brief Tell the server that model `model_index` was unloaded: its
 * statistics and nv_inference_* counters start again at 0, so its next load
 * counts from 0, as Triton's do (they go with the unloaded model).  While
 * the backend's model_loaded says false, /metrics has no sample of the
 * model (Triton's metrics of an unloaded model disappear likewise).  A
 * failed load the repository index shows for the model is forgotten (it was
 * loaded since).
 * @return 0; HPS_EINVAL (srv NULL, model_index out of range).
 * Thread-safe (relaxed stores, as hps_kserve_set_model_version's; the load
 * failure under the server's mutex for it).
 */
hps_err_t hps_kserve_model_unloaded(hps_kserve_t *srv, size_t model_index);

/**
 * @brief Stop gracefully: stop accepting connections, wait up to
 *        drain_timeout_ms for requests in progress to be answered, then
 *        close every connection and join every thread.
 * After return no backend callback runs.  No-op on a server that is not
 * started or is NULL.  Must not be called from a backend callback.
 * Not thread-safe against start/stop/destroy of the same server.
 */
void hps_kserve_stop(hps_kserve_t *srv);

/**
 * @brief Stop (as hps_kserve_stop()) and free the server.
 * @param[in] srv  a server, or NULL (no-op).  Invalid afterwards.
 */
void hps_kserve_destroy(hps_kserve_t *srv);

/**
 * @brief Append n bytes to a metrics text buffer.
 * @param[in,out] text  the buffer passed to backend->metrics().
 * @param[in]     s     bytes (need not be NUL-terminated); NULL only if n = 0.
 * @return 0; HPS_EINVAL if text is NULL, or s is NULL with n > 0; -ENOMEM
 *         (the buffer keeps its previous contents).
 * Not thread-safe on one buffer; each scrape has its own.
 */
hps_err_t hps_kserve_text_append(hps_kserve_text_t *text, const char *s, size_t n);

/**
 * @brief printf-style append to a metrics text buffer.
 * @param[in,out] text  the buffer passed to backend->metrics().
 * @param[in]     fmt   printf format.
 * @return 0; HPS_EINVAL if text or fmt is NULL; -ENOMEM (also for an
 *         encoding error of vsnprintf).  On failure the buffer keeps its
 *         previous contents.
 * Not thread-safe on one buffer.
 */
__attribute__((format(printf, 2, 3))) hps_err_t hps_kserve_text_appendf(hps_kserve_text_t *text,
                                                                        const char *fmt, ...);

/**
 * @brief Append a Prometheus label value, escaped (backslash, double quote
 *        and newline), without the surrounding quotes.
 * @param[in,out] text  the buffer passed to backend->metrics().
 * @param[in]     s     NUL-terminated value.
 * @return 0; HPS_EINVAL if text or s is NULL; -ENOMEM (the buffer keeps
 *         its previous contents).
 */
hps_err_t hps_kserve_text_append_label(hps_kserve_text_t *text, const char *s);

#ifdef __cplusplus
}
#endif
#endif /* HPS_KSERVE_H */
