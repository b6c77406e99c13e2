/*
 * client.h -- libhps, the lookup library: embedding lookups from inside any
 * process on the host (a PyTorch or C++ inference process, hps-worker).
 *
 * A client attaches the shared-memory segment that hps-coordinator
 * maintains (/dev/shm/hps.<shared_memory_name> of the configuration), finds
 * the tables of the configured models there, and, on a CUDA device, maps
 * the GPU embedding caches that the other processes of that device already
 * share (or creates them).  It is a worker in every sense the segment
 * knows: it has an entry in the worker table (hps-shm info counts it), beats
 * a heartbeat, is reaped when it dies, and may become a cache's refresher
 * (the process that follows the table's update log for everyone).  Killing
 * a client disturbs no other process.
 *
 * Lookup path (docs/architecture.md traces it): GPU cache (models with
 * gpucache = true on a device client) -> volatile DB (shared memory) ->
 * the coordinator (distributed and persistent DB; the misses of all
 * tables of a call in one miss-queue round trip bounded by one
 * [worker] miss_timeout_ms) -> the table's default value.
 *
 *     hps_client_t *c;
 *     char err[512];
 *     if (hps_client_open("/models/hps.ini", 0, &c, err, sizeof(err)) < 0) ...
 *     size_t m;
 *     hps_client_model_find(c, "wdl", &m);
 *     hps_client_wait_ready(c, 10000);
 *     hps_client_lookup_table(c, m, 0, n, d_keys, HPS_KEY_INT64, 0, d_out, 0, stream);
 *
 * Memory spaces: every buffer argument comes with a location, HPS_HOST (-1)
 * for host memory (pageable or page-locked) or a CUDA device ordinal for
 * device memory of that device (which must be the client's device).
 * Device work is ordered after the work already enqueued on the caller's
 * stream; every lookup call returns when its output is complete (the rows
 * are readable by the host, or by any later work on any stream).
 *
 * Threads: every function may be called concurrently from any number of
 * threads, except hps_client_close(), which needs every other call on the
 * client to have returned.  Errors: every function that can fail returns an
 * hps_err_t (hps/hps.h); hps_client_last_error() gives the calling thread's
 * message of its last failed call.
 *
 * NULL: only these take a NULL client: hps_client_close and
 * hps_client_cancel_waits (no-op), hps_client_model_conf (NULL),
 * hps_client_model_loaded (false), and hps_client_refresh_models,
 * _model_state, _model_control, _model_version, _update_stats and
 * _ddb_stats (HPS_EINVAL).  Every other function dereferences it
 * (undefined behaviour); likewise a NULL output pointer, unless the
 * function's comment says it may be NULL or refuses it (HPS_EINVAL).
 */
#ifndef HPS_CLIENT_H
#define HPS_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hps/conf.h"
#include "hps/dtype.h"
#include "hps/hps.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A buffer in host memory (the location argument of lookups). */
#define HPS_HOST (-1)

/** Key dtype of a lookup's keys. */
typedef enum hps_key_type {
    HPS_KEY_INT64 = 0, /**< int64, the width of models with supportlonglong = true */
    /** int32: for a 32-bit model (supportlonglong = false) the bits of its
     *  uint32 keys (zero-extended, as HugeCTR's TensorRT plugin passes them);
     *  for a 64-bit model an int32 value (sign-extended). */
    HPS_KEY_INT32 = 1,
} hps_key_type_t;

typedef struct hps_client hps_client_t;

/** Options of hps_client_open_conf(); a zeroed struct is valid (defaults). */
typedef struct hps_client_options {
    /** CUDA device ordinal of the GPU caches and device buffers, or -1: a
     *  host-only client (volatile DB and below; no CUDA used). */
    int device;
    /** hps-worker's --instance; 0 for other processes (shown by hps-shm). */
    int instance;
    /** Lookups served at once on the device (one stream and buffer set
     *  each, made when first needed); more concurrent calls wait for one.
     *  0 = [worker] http_threads + lookup_threads (hps-worker's threads). */
    unsigned max_concurrent;
} hps_client_options_t;

/**
 * @brief Open a client on a configuration file and a device.
 *
 * Loads and validates the INI (the same file the coordinator runs with),
 * then as hps_client_open_conf().  Returns at once: the segment is attached
 * now if it exists, else by a background thread as soon as the coordinator
 * creates it; hps_client_wait_ready() waits for that.
 * @param[in]  config_file  INI path, host string.
 * @param[in]  device       CUDA device ordinal, or -1 for a host-only client.
 *                          With a device that does not exist, or in a build
 *                          without CUDA, the client is host-only (one
 *                          warning): it serves every model from the host
 *                          path and refuses device memory (HPS_EINVAL);
 *                          hps_client_gpu_device() says -1, and
 *                          hps_client_device() still says the ordinal
 *                          asked for (hps-worker reports it as DeviceID).
 * @param[out] ret          The client; close it with hps_client_close().
 * @param[out] err          Message of a failure (file:line: key ... for a bad
 *                          configuration), NUL-terminated; may be NULL if
 *                          err_len is 0.
 * @return 0; HPS_ECONFIG (bad configuration); HPS_EINVAL (NULL argument,
 *         device < -1); a negative errno (file unreadable); -ENOMEM.
 */
hps_err_t hps_client_open(const char *config_file, int device, hps_client_t **ret, char *err,
                          size_t err_len);

/**
 * @brief Open a client on a loaded configuration (hps-worker's way).
 * Sets the process's default log level to the INI's [hps] log_level
 * unless the program chose one (hps_log_default_level).
 * @param[in] conf  Loaded configuration; borrowed: must outlive the client
 *                  (the names of hps_client_model_info() and
 *                  hps_client_table_info() point into it).  Not modified.
 * @param[in] o     Options, read during the call only; NULL = a zeroed
 *                  struct (device 0, instance 0, max_concurrent default).
 * @param[out] ret  On success the client, owned by the caller until
 *                  hps_client_close(); on failure not written (the
 *                  partly opened client is closed before the return, and
 *                  hps_client_last_error() says why).
 * @return 0; HPS_EINVAL (conf or ret NULL, o->device < -1); -ENOMEM (also
 *         when the GPU state or its thread cannot be made); HPS_EIO (the
 *         maintenance thread could not start).  Thread-safe (no shared
 *         state but the log level).
 */
hps_err_t hps_client_open_conf(const hps_conf_t *conf, const hps_client_options_t *o,
                               hps_client_t **ret);

/**
 * @brief Close a client: stop its threads, leave the shared GPU caches (the
 * other processes keep them), leave the worker table, detach.  With
 * shared_memory_auto_remove and no other process left, removes the segment.
 * In a child after fork() (a client opened by its parent), only the child's
 * copy is unmapped and freed: the threads, rows and caches are the
 * parent's.  A child that looks up must open a client of its own: its
 * lookups through its parent's client fail with HPS_EINVAL (the child is
 * in no row of the segment's process table, so the coordinator would
 * drop its misses as a dead process's).
 * @param[in] c  A client, or NULL (no-op).  No call on c may be running.
 */
void hps_client_close(hps_client_t *c);

/**
 * @brief Whether the client is ready: segment attached, every table of
 * every model found, the coordinator serving, the GPU caches built.
 * Before that, a lookup of a model whose tables have not been found yet
 * fails with HPS_EBUSY (hps_client_lookup); one whose tables were found is
 * answered (from what is there, else the defaults).  Never blocks for
 * long (takes the client's segment read lock a moment).  c must not be
 * NULL.  Thread-safe.
 */
bool hps_client_ready(hps_client_t *c);

/**
 * @brief Wait until hps_client_ready() or timeout_ms passed (polls every
 * 5 ms).  c must not be NULL.  Thread-safe; blocks the calling thread only.
 * @return 0 ready (at once when it is, hps_client_cancel_waits() or not);
 *         HPS_ETIMEDOUT (also at once after hps_client_cancel_waits(),
 *         which ends the wait of a client that is not ready).
 */
hps_err_t hps_client_wait_ready(hps_client_t *c, uint32_t timeout_ms);

/**
 * @brief Make the waits in progress on c, and every later one, return at
 *        once: hps_client_wait_ready() gives HPS_ETIMEDOUT (0 when the
 *        client is ready: nothing to wait for), hps_client_model_control()
 *        HPS_ETIMEDOUT (the message says the wait was cancelled; a model
 *        control request may still complete).  For a caller that must
 *        close c while other threads wait on it (hps_client_close needs
 *        every call returned).  Lookups are not affected.  Thread-safe;
 *        not undone.
 */
void hps_client_cancel_waits(hps_client_t *c);

/** @brief Whether the coordinator's heartbeat is fresh (false: degraded):
 *  the client's maintenance thread's last look, an atomic read.  c must not
 *  be NULL.  Thread-safe, lock-free. */
bool hps_client_coordinator_alive(hps_client_t *c);

/** @brief The CUDA device the client was opened with (-1: host-only asked
 *  for), even where that device does not exist (hps-worker reports it as
 *  its DeviceID); hps_client_gpu_device() says what it uses.  c must not be
 *  NULL.  Thread-safe (immutable after open). */
int hps_client_device(const hps_client_t *c);

/** @brief The CUDA device the client uses (its GPU caches, device memory
 *         accepted): hps_client_device(), or -1 for a host-only client,
 *         also one opened with a device that does not exist or in a build
 *         without CUDA. */
int hps_client_gpu_device(const hps_client_t *c);

/**
 * @brief Model @p model's state, as the repository index shows it.
 * READY: its tables are in the segment and the coordinator serves;
 * UNAVAILABLE: loaded, but no segment or coordinator now; LOADING /
 * UNLOADING: a model control request for it waits or runs; UNLOADED:
 * not in the segment its coordinator serves (unloaded by explicit model
 * control or by a SIGHUP reload without it, or never loaded).
 * @param[out] ret_state   The state.
 * @param[out] ret_served  Whether this client has seen the model loaded
 *                         since it opened (Triton lists models never
 *                         loaded by name only); may be NULL.
 * @return 0; HPS_EINVAL (model out of range, NULL).  Thread-safe, lock-free
 *         apart from the segment's read lock.
 */
hps_err_t hps_client_model_state(hps_client_t *c, size_t model, hps_model_state_t *ret_state,
                                 bool *ret_served);

/**
 * @brief Whether model @p model is loaded: false once the segment served
 *        by a coordinator was searched and the model's tables are not in it
 *        (lookups then fail with HPS_ENOTFOUND), whichever the model control
 *        mode; false too for an entry of an older shape of a model another
 *        entry serves (hps_client_model_find()), so that at most one entry
 *        per name is loaded.  Lock-free; false for a bad argument.
 */
bool hps_client_model_loaded(const hps_client_t *c, size_t model);

/**
 * @brief Load or unload a model of the INI while the others serve (Triton's
 * explicit model control: [hps] model_control_mode = explicit).  The
 * request goes to the coordinator through the segment; it re-reads the INI
 * (so a model added there since can be loaded), checks the model's files and
 * the room in /dev/shm, then builds a new segment beside the serving one and
 * publishes it in one step.  Returns when that is done and this client
 * serves from it, or when the request was refused or failed (the serving
 * models are then as they were).  Loading a loaded model reloads it (new
 * files or version).  Unloading frees the model's shared memory and drops
 * its RocksDB column families (a later load ingests its files again).
 * A model that this client was not opened with (added to the INI later) is
 * learned from the INI (hps_client_refresh_models) and served by this
 * client too.  An unload of a model this client never saw served (not in
 * the INI, or never loaded) is refused with HPS_EIO and msg "Model to be
 * unloaded has not been served" (Triton's answer; nothing asked).
 * @param[in]  op          HPS_MODEL_LOAD or HPS_MODEL_UNLOAD.
 * @param[in]  model       Model name, host string.
 * @param[in]  timeout_ms  How long to wait for the answer; 0 = no limit.
 * @param[out] msg         The coordinator's answer or the reason of a
 *                         failure, NUL-terminated, at most msg_len bytes;
 *                         may be NULL.
 * @return 0 (done); HPS_EUNSUPPORTED (model control mode none); HPS_EIO
 *         (refused or failed: msg says why); HPS_EBUSY (8 requests already
 *         wait); HPS_EAGAIN (no segment attached, or no coordinator serves
 *         it: its last heartbeat is worker_timeout_ms + 200 ms old);
 *         HPS_ETIMEDOUT (no answer in time, or the client closes);
 *         HPS_EINVAL.  A wait that ends unanswered takes the request back
 *         if no coordinator took it yet (msg says "withdrawn: nothing
 *         changed"), else msg says it may still complete.
 *         Thread-safe; blocks the calling thread only.
 */
hps_err_t hps_client_model_control(hps_client_t *c, hps_model_op_t op, const char *model,
                                   uint32_t timeout_ms, char *msg, size_t msg_len);

/**
 * @brief The version of model @p model that the client answers from: the
 * `version` the coordinator wrote into the segment's tables (a reload of
 * the coordinator, SIGHUP, publishes a new segment; the client switches to
 * it as a whole, so every lookup is answered from one version).
 * @param[out] ret  >= 1.
 * @return 0; HPS_ENOTFOUND (not attached, or the model's tables are not in
 *         the segment yet); HPS_EINVAL (model out of range, NULL).
 *         Thread-safe.
 */
hps_err_t hps_client_model_version(hps_client_t *c, size_t model, uint32_t *ret);

/* ---- Models and tables ------------------------------------------------- */

/**
 * @brief Number of model entries the client knows (indices 0 .. n-1): the
 * configuration's, in file order, then those added to its INI file later
 * (hps_client_refresh_models()), and a new entry for a model whose tables a
 * reload changed.  It only grows (at most HPS_CONF_MAX_MODELS); an index,
 * once valid, stays valid and names the same model with the same tables
 * and dimensions until hps_client_close().  Several entries may carry one
 * name: hps_client_model_find() gives the one that serves it now.
 * Thread-safe (an atomic read).
 */
size_t hps_client_num_models(const hps_client_t *c);

/**
 * @brief Learn the models added to the configuration's INI file since it was
 * read: when the file (hps_conf_t.source) changed (inode, size or
 * modification time), it is parsed and validated again, and each model
 * section whose name the client does not know yet is appended to its
 * models (its tables are then looked up in the segment like the others).
 * Models already known keep their entries: a reload that changes a model's
 * tables (their names, count or dimensions) is followed from the segment
 * instead, where the coordinator records the INI text it built from: at
 * its switch to that segment the client appends an entry of the new shape
 * and serves it from then on (whatever this process's INI says by then);
 * lookups by the old entry's index then fail with HPS_EMISMATCH (find the
 * model again).  The client calls this function itself when it switches
 * to a segment a coordinator published, and before a model control load
 * of a name it does not know.
 * Thread-safe (serialized by the client).
 * @param[out] ret_added  Models appended (may be NULL).
 * @return 0 (also when the file is unchanged, or the configuration came from
 *         a string); HPS_ECONFIG when the file no longer parses (logged;
 *         nothing changes); HPS_EFULL when HPS_CONF_MAX_MODELS would be
 *         passed (those that fit are added); -ENOMEM (the new configuration
 *         could not be kept: the models it added stay known, and the file
 *         is read again at the next call).
 */
hps_err_t hps_client_refresh_models(hps_client_t *c, size_t *ret_added);

/**
 * @brief The configuration section of model @p model (owned by the client,
 * valid until hps_client_close()).  NULL for an index out of range.
 * Thread-safe.
 */
const hps_conf_model_t *hps_client_model_conf(const hps_client_t *c, size_t model);

/**
 * @brief Index of the model named name: of its entries (a reload that
 * changed its tables adds one, hps_client_refresh_models()), the one that
 * serves it now, else the newest.  Call it again when a lookup fails with
 * HPS_EMISMATCH.  Thread-safe.
 * @return 0; HPS_ENOTFOUND (message names the model and the models known).
 */
hps_err_t hps_client_model_find(const hps_client_t *c, const char *name, size_t *ret_model);

/**
 * @brief Index of a table of a model by name (embedding_table_names).
 * @return 0; HPS_ENOTFOUND; HPS_EINVAL (model index out of range).
 */
hps_err_t hps_client_table_find(const hps_client_t *c, size_t model, const char *name,
                                uint32_t *ret_table);

/** A model as the client serves it.  name points into the configuration
 *  (the caller's of hps_client_open_conf, the client's own otherwise, or
 *  the INI read again by hps_client_refresh_models): valid until
 *  hps_client_close(), across SIGHUP reloads and model control (a client
 *  never replaces a model's configuration once it knows it); do not free. */
typedef struct hps_client_model_info {
    const char *name;
    uint32_t num_tables;
    uint32_t max_batch_size;
    uint32_t key_bytes; /**< 8 (supportlonglong = true) or 4 */
    bool gpu_cache;     /**< served from GPU caches on this client's device (once built) */
} hps_client_model_info_t;

/** @brief Describe model @p model.  c and ret must not be NULL.
 *  Thread-safe, lock-free (the model's entry is immutable once
 *  hps_client_num_models() counts it; gpu_cache is an atomic read).
 *  @return 0; HPS_EINVAL (index out of range; ret untouched). */
hps_err_t hps_client_model_info(const hps_client_t *c, size_t model, hps_client_model_info_t *ret);

/** A table of a model. */
typedef struct hps_client_table_info {
    /** embedding_table_names[t]: the lifetime of hps_client_model_info_t.name */
    const char *name;
    uint32_t dim;                 /**< embedding_vecsize_per_table[t]: floats per row */
    uint32_t key_bytes;           /**< 8 or 4 */
    uint32_t max_keys_per_sample; /**< maxnum_catfeature_query_per_table_per_sample[t] */
    float default_value;          /**< default_value_for_each_table[t] */
    uint64_t rows;                /**< rows in the volatile DB now; 0 before attach */
    /** How the volatile DB stores the rows: the segment's table once
     *  attached (the type lookups decode and GPU caches store, even where
     *  this process's INI says another), before that [model.<name>]
     *  storage_type (include/hps/dtype.h gives each type's error bound).
     *  Lookups return fp32 whatever it is. */
    hps_dtype_t storage_type;
} hps_client_table_info_t;

/** @brief Describe table @p table of model @p model.  c and ret must not be
 *  NULL.  Thread-safe (takes the client's segment read lock for rows and
 *  storage_type).  @return 0; HPS_EINVAL (model or table index out of
 *  range; ret untouched). */
hps_err_t hps_client_table_info(hps_client_t *c, size_t model, uint32_t table,
                                hps_client_table_info_t *ret);

/* ---- Lookups ----------------------------------------------------------- */

/**
 * @brief Embedding vectors of the keys of several tables of one model (the
 * Triton hps backend's KEYS / NUMKEYS form).
 *
 * @param[in] c           The client.
 * @param[in] model       Model index (hps_client_model_find).
 * @param[in] num_tables  T, at most the model's num_tables: tables 0 .. T-1.
 * @param[in] numkeys     (T) int32, host memory: keys of each table, >= 0.
 * @param[in] keys        (N = sum numkeys) keys of key_type, table-major
 *                        (table 0's keys first), contiguous, in keys_loc.
 * @param[in] key_type    HPS_KEY_INT64 or HPS_KEY_INT32.  Keys outside a
 *                        32-bit model's range get the default value.
 * @param[in] keys_loc    HPS_HOST or the client's device.
 * @param[out] out        (sum_t numkeys[t] * dim_t) float32, row-major, in
 *                        key order, in out_loc; fully written.
 * @param[in] out_loc     HPS_HOST or the client's device.
 * @param[in] stream      cudaStream_t of the caller (NULL: the legacy
 *                        default stream); unused for host-only work.
 * @return 0 (keys found nowhere have the table's default value: that is
 *         not an error; nor is it while no coordinator answers misses:
 *         keys outside shared memory then get the default, after
 *         miss_timeout_ms while the coordinator is stalled, at once while
 *         it is dead (hps_client_coordinator_alive() false) or while a
 *         SIGHUP reload or a model load builds the next segment without
 *         a persistent DB; with one, the reloading coordinator answers
 *         them from the serving version's rows);
 *         HPS_EINVAL (bad index, T, negative numkeys, a
 *         location that is not HPS_HOST or the client's device, device
 *         memory on a host-only client, a call from a child forked after
 *         the client was opened: see hps_client_close()); HPS_EBUSY (the
 *         model's tables have not been found in the segment since the
 *         client opened: no coordinator has served it yet, and every key
 *         would get the default; once found, a coordinator's death or
 *         restart no longer refuses lookups; also while the segment
 *         refuses this process for another reason than HPS_EFULL, named in
 *         the message); HPS_EFULL (the segment's process table is full:
 *         this client could not attach, and tries again each second);
 *         HPS_ENOTFOUND (the model is not in the
 *         segment its coordinator serves: unloaded, removed by a reload,
 *         or never loaded; or the segment holds it with other
 *         dimensions); HPS_EMISMATCH (a reload changed the model's
 *         tables: another index serves it now, hps_client_model_find());
 *         HPS_EIO (a CUDA error; message says which); -ENOMEM.
 *         Thread-safe.
 */
hps_err_t hps_client_lookup(hps_client_t *c, size_t model, uint32_t num_tables,
                            const int32_t *numkeys, const void *keys, hps_key_type_t key_type,
                            int keys_loc, float *out, int out_loc, void *stream);

/** hps_client_lookup_ex() flags. */
enum hps_lookup_flags {
    /** Return HPS_EAGAIN, with out undefined and nothing counted (the GPU
     *  caches' own counters take back what they counted), where the call
     *  would wait for the
     *  coordinator: keys missing in the volatile DB (and, for a model served
     *  by GPU caches, in the cache, below hit_rate_threshold) while it
     *  serves; and while the client switches to a new segment (a reload
     *  published it: the switch waits for the lookups under way).  An event
     *  loop answers what shared memory and the GPU caches hold inline and
     *  hands the rest to threads that may wait. */
    HPS_LOOKUP_NOWAIT = 1u << 0,
};

/**
 * @brief hps_client_lookup() with flags (enum hps_lookup_flags).
 * @return as hps_client_lookup(), and HPS_EAGAIN under HPS_LOOKUP_NOWAIT;
 *         HPS_EINVAL for flag bits that are not enum hps_lookup_flags.
 */
hps_err_t hps_client_lookup_ex(hps_client_t *c, size_t model, uint32_t num_tables,
                               const int32_t *numkeys, const void *keys, hps_key_type_t key_type,
                               int keys_loc, float *out, int out_loc, void *stream, unsigned flags);

/**
 * @brief hps_client_lookup_ex() with the output in fp16 or bf16: for a
 * model whose dense part runs in half precision (a torch.float16 or
 * torch.bfloat16 tensor), without a conversion pass of the caller's own.
 *
 * The values are the fp32 answer rounded to nearest, ties to even
 * (include/hps/dtype.h's hps_dtype_encode on the host; on the device
 * CUDA's __float2half_rn / __float2bfloat16_rn, the same bits for every
 * value but NaN, which stays a NaN), so for a table stored in the output's
 * type they are the stored values bit for bit.  The conversion follows the
 * fp32 lookup (host memory, or a stream-ordered device scratch buffer of
 * the fp32 rows): it saves the caller a pass, not memory traffic.
 *
 * @param[out] out       (sum_t numkeys[t] * dim_t) values of out_type
 *                       (uint16 bit patterns), row-major, in key order, in
 *                       out_loc, 2-byte aligned; fully written.
 * @param[in]  out_type  HPS_DTYPE_FP32 (then exactly hps_client_lookup_ex,
 *                       out holding floats), HPS_DTYPE_FP16 or
 *                       HPS_DTYPE_BF16.
 * One table: numkeys with zeros for the tables before it (num_tables =
 * table + 1), as hps_client_lookup_table does.  Other parameters as
 * hps_client_lookup_ex().
 * @return as hps_client_lookup_ex(); HPS_EINVAL also for any other
 *         out_type (HPS_DTYPE_INT8: a row-wise scaled type is no tensor
 *         type).  Thread-safe.
 */
hps_err_t hps_client_lookup_typed(hps_client_t *c, size_t model, uint32_t num_tables,
                                  const int32_t *numkeys, const void *keys, hps_key_type_t key_type,
                                  int keys_loc, void *out, hps_dtype_t out_type, int out_loc,
                                  void *stream, unsigned flags);

/**
 * @brief Embedding vectors of n keys of one table (HugeCTR's
 * lookup(keys, model_name, table_id)).
 * @param[in] table  Table index (HugeCTR's table_id).
 * @param[in] n      Number of keys (at most INT32_MAX).
 * @param[out] out   (n, dim) float32 row-major, in out_loc.
 * Other parameters and errors as hps_client_lookup().  Thread-safe.
 */
hps_err_t hps_client_lookup_table(hps_client_t *c, size_t model, uint32_t table, size_t n,
                                  const void *keys, hps_key_type_t key_type, int keys_loc,
                                  float *out, int out_loc, void *stream);

/**
 * @brief The calling thread's message for its last failed call on any
 * client ("" when none): thread-local storage, valid until the thread's
 * next failing call.
 */
const char *hps_client_last_error(void);

/**
 * @brief The model version that the calling thread's last successful
 * lookup call (hps_client_lookup, _ex, _typed or _table, on any client)
 * was answered from, as hps_client_model_version() would have said at that
 * moment: every row of the call comes from this version.  0 when the
 * thread's last lookup call failed or it made none.  Thread-local storage;
 * lock-free.  A caller that labels its answers with a version (hps-worker's
 * `model_version`) reads it right after the call: asking
 * hps_client_model_version() afterwards may already see the next version
 * of a reload that switched meanwhile.  0 too for a call of no keys, or
 * one answered while the client knew no segment holding the model.
 */
uint32_t hps_client_last_version(void);

/* ---- Counters (the nv_hps_* metrics of hps-worker) ---------------------- */

/** Per-model counters of one client since it opened, or since the model
 *  was last answered from another version (a reload) or unloaded: they
 *  restart at 0, as Triton's per-version statistics do. */
typedef struct hps_client_counters {
    uint64_t lookup_keys;  /**< keys looked up */
    uint64_t vdb_hits;     /**< found in the volatile DB (shared memory) */
    uint64_t lower_hits;   /**< found below it, through the coordinator */
    uint64_t default_keys; /**< answered with the table's default value */
    uint64_t miss_busy;    /**< miss-queue requests whose misses got defaults: the queue
                                stayed full of other requests until miss_timeout_ms */
    uint64_t miss_timeout; /**< miss-queue requests past miss_timeout_ms */
    uint64_t lookup_ns;    /**< time in lookup calls */
    uint64_t lookup_calls; /**< lookup calls */
    /** Lookups with keys and output in host memory of a model with GPU
     *  caches, by the path that answered ([worker] lookup_path). */
    uint64_t gpu_path_calls; /**< the GPU cache */
    uint64_t cpu_path_calls; /**< the volatile DB (the fetch path) */
} hps_client_counters_t;

/** @brief Counters of model @p model.  @return 0; HPS_EINVAL. */
hps_err_t hps_client_counters(const hps_client_t *c, size_t model, hps_client_counters_t *ret);

/** One GPU embedding cache as this client maps it. */
typedef struct hps_client_cache_stats {
    /** The cache's own counters: every process that maps it together. */
    uint64_t lookups, hits, inserts, evictions, updates;
    uint64_t occupied_rows, capacity_rows;
    uint64_t full_refreshes; /**< done by this process */
    uint64_t lock_timeouts;
    uint32_t processes; /**< processes mapping it (1 when private) */
    bool refresher;     /**< this process follows the table's update log */
    /** Devices the cache's memory spans: 1, or the devices of a sharded cache
     *  (gpu_cache_placement = shard), at most 8. */
    uint32_t num_shards;
    int shard_device[8];        /**< CUDA ordinal of each shard */
    uint64_t shard_bytes[8];    /**< device bytes each shard holds */
    uint64_t shard_occupied[8]; /**< occupied slots of the sets homed on each */
} hps_client_cache_stats_t;

/**
 * @brief Statistics of the GPU cache of table @p table of model @p model.
 * @return 0; HPS_ENOTFOUND (no cache: host-only client, gpucache = false,
 *         not built yet); HPS_EINVAL.
 */
hps_err_t hps_client_cache_stats(hps_client_t *c, size_t model, uint32_t table,
                                 hps_client_cache_stats_t *ret);

/** Client-wide GPU figures. */
typedef struct hps_client_gpu_stats {
    uint64_t dropped_inserts; /**< background inserts dropped (queue full) */
    uint64_t pinned_bytes;    /**< host bytes page-locked by hps_client_host_register */
} hps_client_gpu_stats_t;

/** @brief Client-wide GPU figures.  @return 0; HPS_ENOTFOUND (no GPU). */
hps_err_t hps_client_gpu_stats(const hps_client_t *c, hps_client_gpu_stats_t *ret);

/** Layers whose online-update counters hps_client_update_stats() reads:
 *  0 volatile DB, 1 persistent DB, 2 distributed DB (the segment's
 *  HPS_SHMDB_UPDATE_LAYERS, include/hps/shmdb_stats.h). */
#define HPS_CLIENT_UPDATE_LAYERS 3
/** Skipped-message counters of hps_client_update_stats_t, by reason index
 *  (the segment's HPS_SHMDB_UPDATE_REASONS); the update source names them
 *  (hps-worker's nv_hps_updates_skipped{reason=...}). */
#define HPS_CLIENT_UPDATE_REASONS 8

/** The coordinator's online-update (Kafka ingestion) counters of one
 *  layer, as it last published them (once per stats tick): totals since
 *  the coordinator started consuming (a coordinator that starts again
 *  counts from 0).  Monotonic unless noted. */
typedef struct hps_client_update_stats {
    uint64_t messages;                           /**< messages received */
    uint64_t received;                           /**< updates in accepted messages */
    uint64_t nonfinite;                          /**< of those, with a NaN / Inf value */
    uint64_t applied;                            /**< updates applied to the layer */
    uint64_t skipped[HPS_CLIENT_UPDATE_REASONS]; /**< messages skipped, by reason index */
    uint64_t beacons;                            /**< header-only messages */
    uint64_t errors;                             /**< consumer errors and updates dropped */
    int64_t lag;                                 /**< gauge: consumer lag (messages), -1 unknown */
    int64_t newest_applied_ms; /**< wall clock (ms, CLOCK_REALTIME) of the last apply, 0 none */
    int64_t published_ms;      /**< wall clock (ms, CLOCK_REALTIME) of the publication */
    uint64_t offset_resets;    /**< offsets reset after the broker dropped them (retention) */
} hps_client_update_stats_t;

/**
 * @brief The coordinator's online-update counters of one layer, read from
 * the segment (lock-free: each field whole, not necessarily one snapshot
 * of all).  Thread-safe (under the client's segment read lock).
 * @param[in]  layer  0 .. HPS_CLIENT_UPDATE_LAYERS-1.
 * @param[out] ret    Host struct; filled on success only.
 * @return 0; HPS_EINVAL (NULL, layer out of range); HPS_ENOTFOUND (not
 *         attached, or the layer never published: no update ingestion
 *         configured, or not for this layer).
 */
hps_err_t hps_client_update_stats(hps_client_t *c, uint32_t layer, hps_client_update_stats_t *ret);

/** The coordinator's distributed-DB (Redis Cluster) counters, as it last
 *  published them (about once a second): totals of every table since the
 *  coordinator opened the distributed DB (a coordinator that starts again
 *  counts from 0). */
typedef struct hps_client_ddb_stats {
    /** Keys looked up in Redis: the keys that missed the volatile DB, of
     *  every worker and client of the segment. */
    uint64_t lookup_keys;
    uint64_t hit_keys;        /**< of those, found in Redis */
    uint64_t insert_rows;     /**< rows written (loading, cache_missed_embeddings) */
    uint64_t evicted_rows;    /**< rows removed by overflow handling (overflow_margin) */
    uint64_t errors;          /**< failed calls: lookups, inserts, access-tracking batches */
    uint64_t touches_dropped; /**< hits whose LFU/LRU access was not recorded (queue full) */
    /** Stored values of another length than the table's dim * 4 bytes met
     *  by lookups: each was answered as a miss. */
    uint64_t bad_values;
    int64_t published_ms; /**< wall clock (ms, CLOCK_REALTIME) of the publication */
} hps_client_ddb_stats_t;

/**
 * @brief The coordinator's distributed-DB counters, read from the segment
 * (lock-free: each field whole, not necessarily one snapshot of all).
 * Thread-safe.
 * @param[out] ret  Filled on success only.
 * @return 0; HPS_EINVAL (NULL); HPS_ENOTFOUND (not attached, no
 *         [distributed_db] configured, or a coordinator that publishes
 *         none: not yet, or of a build before it).
 */
hps_err_t hps_client_ddb_stats(hps_client_t *c, hps_client_ddb_stats_t *ret);

/**
 * @brief Page-lock a host buffer the caller reuses for outputs
 * (cudaHostRegister, portable), so lookups copy rows from the device
 * straight into it.
 * @param[in] buf  Host memory, bytes long, not in use by a lookup; stays
 *                 the caller's: unregister it with
 *                 hps_client_host_unregister() before freeing it.
 * @return 0; HPS_EUNSUPPORTED (host-only client, no GPU cache); HPS_EIO
 *         (CUDA refused, e.g. already registered; the buffer stays
 *         usable, pageable).  Thread-safe.
 */
hps_err_t hps_client_host_register(hps_client_t *c, void *buf, size_t bytes);

/**
 * @brief Undo a successful hps_client_host_register() of buf (cudaHostUnregister).
 * @param[in] buf    The pointer passed to hps_client_host_register().
 * @param[in] bytes  The length registered: only subtracted from
 *                   hps_client_gpu_stats_t.pinned_bytes.
 * No lookup may be using buf as its output (CUDA's rule: unregistering
 * memory that a copy in flight targets is undefined); lookups that start
 * afterwards see it pageable and copy through a staging buffer.  A buf
 * that was not registered (or twice unregistered) makes CUDA refuse: that
 * is logged, and pinned_bytes is still reduced by bytes.  No-op on a
 * client without GPU caches.  Errors are not returned.  Thread-safe
 * (CUDA's registration is, and the counter is atomic).
 */
void hps_client_host_unregister(hps_client_t *c, void *buf, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
