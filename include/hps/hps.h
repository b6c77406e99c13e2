/*
 * hps.h -- errors, version and small shared definitions of the hierarchical
 * parameter server (HPS).
 *
 * Every library function of this project returns an hps_err_t: 0 on success,
 * a negative errno value for a system failure (e.g. -ENOMEM, -EACCES), or one
 * of the HPS_E* codes below, which sit in a reserved negative block
 * (-20001 ... -20099) far from any errno value.
 */
#ifndef HPS_HPS_H
#define HPS_HPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h> /* mode_t, also under strict ISO C (-std=c11) */

#ifdef __cplusplus
extern "C" {
#endif

/** Result of every library call: 0 = success, < 0 = error (see below). */
typedef int hps_err_t;

/**
 * The HPS-specific error codes: XX(name, value, message).  One table generates
 * the enum and hps_strerror(), so a code can never lack its message.
 */
#define HPS_ERRNO_MAP(XX)                                                                          \
    XX(HPS_ENOTFOUND, -20001, "not found")                                                         \
    XX(HPS_EEXIST, -20002, "already exists")                                                       \
    XX(HPS_EINVAL, -20003, "invalid argument")                                                     \
    XX(HPS_EVERSION, -20004, "incompatible format or version")                                     \
    XX(HPS_EBADMAGIC, -20005, "not an HPS segment (bad magic)")                                    \
    XX(HPS_ECORRUPT, -20006, "corrupt data")                                                       \
    XX(HPS_ENOSPC, -20007, "shared-memory segment is full")                                        \
    XX(HPS_EFULL, -20008, "table or directory is full")                                            \
    XX(HPS_ETIMEDOUT, -20009, "timed out")                                                         \
    XX(HPS_EBUSY, -20010, "busy")                                                                  \
    XX(HPS_ECONFIG, -20011, "invalid configuration")                                               \
    XX(HPS_EIO, -20012, "I/O error")                                                               \
    XX(HPS_ETRUNCATED, -20013, "truncated input")                                                  \
    XX(HPS_EMISMATCH, -20014, "existing object does not match the request")                        \
    XX(HPS_EUNSUPPORTED, -20015, "not supported in this build")                                    \
    XX(HPS_EAGAIN, -20016, "would wait (a non-blocking call)")

enum hps_errno {
#define HPS__ERR_ENUM(name, value, msg) name = value,
    HPS_ERRNO_MAP(HPS__ERR_ENUM)
#undef HPS__ERR_ENUM
};

/**
 * @brief Human-readable message for an error code.
 * @param[in] err  0, a negative errno value, or an HPS_E* code.
 * @return A static, NUL-terminated string; never NULL, valid for the life of
 *         the process.  Thread-safe (negative errno values are mapped through
 *         strerrordesc_np, which uses no shared buffer).
 */
const char *hps_strerror(hps_err_t err);

/**
 * @brief Symbolic name of an error code ("HPS_ENOTFOUND", "ENOMEM", ...).
 * @param[in] err  As for hps_strerror().
 * @return A static string; "UNKNOWN" for a value that is no known code.
 *         Thread-safe.
 */
const char *hps_err_name(hps_err_t err);

/**
 * @brief Parse a decimal integer of a command line or a protocol field.
 *
 * Accepts an optional '-' and decimal digits only: no sign when lo >= 0, no
 * leading blanks, no '+', no base prefix (so "010" is ten, not octal), no
 * trailing characters, nothing out of int64 range.
 * @param[in]  s    NUL-terminated text; NULL is refused.
 * @param[in]  lo   Smallest value accepted.
 * @param[in]  hi   Largest value accepted (>= lo).
 * @param[out] ret  The value, written only on success.
 * @return true if s is such an integer in [lo, hi].  Thread-safe (errno is
 *         used and restored).
 */
bool hps_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *ret);

/**
 * @brief What kind of file st_mode describes, for messages that refuse a
 * file that is not regular: "a FIFO", "a directory", "a device", "a
 * socket", "a regular file", else "not a regular file".  Static string;
 * thread-safe.
 */
const char *hps_file_kind(mode_t mode);

/** @brief The library version, e.g. "0.1.0" (static string). */
const char *hps_version(void);

/**
 * @brief HugeCTR's key-to-partition mixer, rrxmrrxmsx_0 by Pelle Evensen.
 *
 * Partition of a key = hps_rrxmrrxmsx_0((uint64_t)key) % num_partitions
 * (HugeCTR v24.06 HCTR_HPS_KEY_TO_PART_INDEX_, database_backend_detail.hpp),
 * so the volatile DB, Redis and Kafka key groups agree with HugeCTR
 * deployments.  32-bit keys are zero-extended, int64 keys reinterpreted.
 * Pure function; thread-safe.
 */
static inline uint64_t hps_rrxmrrxmsx_0(uint64_t x)
{
#define HPS__ROTR(v, n) (((v) >> (n)) | ((v) << (64 - (n))))
    x ^= HPS__ROTR(x, 25) ^ HPS__ROTR(x, 50);
    x *= 0xA24BAED4963EE407ULL;
    x ^= HPS__ROTR(x, 24) ^ HPS__ROTR(x, 49);
    x *= 0x9FB21C651E98DF25ULL;
#undef HPS__ROTR
    return x ^ (x >> 28);
}

/**
 * Log level of every program and of libhps ([hps] log_level, the
 * `--log-level` options; include/hps/log.h logs at it).  The one enum of
 * the concept, for the logger and conf alike.
 */
typedef enum hps_log_level {
    HPS_LOG_ERROR = 0, /**< error */
    HPS_LOG_WARN = 1,  /**< warn (also "warning") */
    HPS_LOG_INFO = 2,  /**< info */
    HPS_LOG_DEBUG = 3, /**< debug */
} hps_log_level_t;

/**
 * Overflow policy of a volatile-DB or distributed-DB table ([volatile_db] and
 * [distributed_db] overflow_policy): which rows go when a partition would
 * exceed overflow_margin.  The one enum of the concept, for shmdb, ddb and
 * conf alike.  Values and names are HugeCTR's (DatabaseOverflowPolicy_t and
 * its INI names); the value is also stored in the shared-memory segment, so
 * neither may change.
 */
typedef enum hps_overflow_policy {
    HPS_EVICT_RANDOM = 0,     /**< evict_random: uniformly random rows */
    HPS_EVICT_LEAST_USED = 1, /**< evict_least_used: LFU, fewest lookups first */
    HPS_EVICT_OLDEST = 2,     /**< evict_oldest: LRU, least recently read or written first */
} hps_overflow_policy_t;

/**
 * @brief INI name of an overflow policy: "evict_random", "evict_least_used"
 *        or "evict_oldest" (the canonical names that conf parses).
 * @return A static string; "unknown" for a value that is no policy.
 *         Thread-safe.
 */
const char *hps_overflow_policy_name(hps_overflow_policy_t p);

/**
 * A model control operation (Triton's explicit model control mode:
 * POST /v2/repository/models/{m}/load and /unload, hps_client_model_control).
 * The one enum of the concept, for the segment's control slots, libhps and
 * the KServe front end; the value is stored in the segment.
 */
typedef enum hps_model_op {
    HPS_MODEL_LOAD = 1,   /**< load the model of the INI (reload it if loaded) */
    HPS_MODEL_UNLOAD = 2, /**< unload it: its memory is freed */
} hps_model_op_t;

/**
 * A model's state as the repository index shows it (Triton's
 * ModelReadyState names: READY, UNAVAILABLE, LOADING, UNLOADING).
 */
typedef enum hps_model_state {
    HPS_MODEL_READY = 0,       /**< loaded and served */
    HPS_MODEL_UNAVAILABLE = 1, /**< loaded, but not served now (no segment or coordinator) */
    HPS_MODEL_LOADING = 2,     /**< a load is waiting or in progress */
    HPS_MODEL_UNLOADING = 3,   /**< an unload is waiting or in progress */
    HPS_MODEL_UNLOADED = 4,    /**< not in the serving segment: unloaded, or never loaded */
} hps_model_state_t;

/** Prefix of every table tag, topic and database name (HugeCTR v24.06). */
#define HPS_TABLE_TAG_PREFIX "hps_et"

/* Limits every layer shares (the configuration, the segment, model files,
 * the GPU cache, the HTTP front end, hps-gen); each library's own name for
 * one (HPS_SHMDB_MAX_DIM, ...) is this value. */

/** Longest model or table name (HugeCTR's [A-Za-z0-9_-]{1,120}). */
#define HPS_NAME_MAX 120
/** Longest shared_memory_name ([A-Za-z0-9_.-]{1,200}; the object is
 *  /dev/shm/hps.<name>). */
#define HPS_SEGMENT_NAME_MAX 200
/** Most tables of all models together: the segment's table directory,
 *  fixed by its format (so also the most tables of one model). */
#define HPS_MAX_TABLES 256
/** Largest embedding dimension (values per vector). */
#define HPS_MAX_DIM 65536

#ifdef __cplusplus
}
#endif
#endif /* HPS_HPS_H */
