/*
 * conf.h -- the HPS configuration: an INI file parsed and validated into
 * plain C structs.
 *
 * File.  INI (parsed with inih): sections [hps], [volatile_db],
 * [distributed_db], [persistent_db], [update_source], [worker] and one
 * [model.<name>] per model, with NVIDIA HugeCTR's parameter names, meanings
 * and defaults.  Every key, its type, default and range is one row of
 * conf/hps_conf.def; docs/configuration.md is the generated reference.
 *
 *     [volatile_db]
 *     shared_memory_size = 32GiB      ; sizes take B, KiB, MiB, GiB, TiB
 *     overflow_policy = evict_oldest
 *
 *     [model.wdl]
 *     sparse_files = /models/wdl/0_sparse, /models/wdl/1_sparse
 *     embedding_vecsize_per_table = 16, 32
 *     maxnum_catfeature_query_per_table_per_sample = 2, 26
 *
 * Values: booleans true/false, yes/no, on/off, 1/0 (any case); lists are
 * comma separated and may continue on indented lines; comments start a line
 * with ';' or '#', or follow a value after whitespace and ';'.  Unknown
 * sections, unknown keys, duplicate keys and duplicate sections are errors: a
 * typo never falls back to a default.
 *
 * Errors.  Every message names the place and what is allowed:
 *
 *     hps.ini:12: [volatile_db] overflow_resolution_target = 1.5: must be a number in (0, 1]
 *     hps.ini:20: [model.wdl] sparse_files: missing required key
 *
 * The library never prints; messages go to a caller buffer.
 *
 * Structs.  hps_conf_t has one member per section (conf->volatile_db, ...)
 * and an array of models.  Each key is a field of the same name, with the C
 * type of its schema type:
 *
 *     BOOL bool | INT, AUTO int64_t | SIZE, MARGIN uint64_t (bytes; MARGIN
 *     "max" = HPS_CONF_UNBOUNDED) | REAL double | MODE uint32_t | ENUM
 *     hps_conf_<enum>_t | STR const char * (never NULL; "" if empty)
 *     lists: pointer to the entries plus <key>_len (the count), e.g.
 *     models[i].embedding_vecsize_per_table[t], t < models[i].num_tables.
 *
 * AUTO keys (num_partitions, num_threads of [volatile_db]) hold the resolved
 * value: "auto" becomes min(online CPU cores, 16) at load time.
 *
 * Thread safety: a loaded hps_conf_t is immutable; any number of threads may
 * read it (fields, hps_conf_get, hps_conf_show) until hps_conf_free().  The
 * functions keep no global state; the loaders may run concurrently.
 *
 * This header is installed, and libhps.so exports what it declares.
 * Printing, documenting, editing and importing configurations (hps-conf's
 * and the coordinator's) are in conf/tools.h, which is not installed.
 */
#ifndef HPS_CONF_H
#define HPS_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "hps/dtype.h"
#include "hps/hps.h"
#include "conf/hps_conf.def"

#ifdef __cplusplus
extern "C" {
#endif

/** Most [model.<name>] sections in one file. */
#define HPS_CONF_MAX_MODELS 64
/** Most tables of all models together: the volatile DB's table directory
 *  (HPS_SHMDB_MAX_TABLES, include/hps/shmdb.h). */
#define HPS_CONF_MAX_TABLES HPS_MAX_TABLES
/** Longest model or table name ([A-Za-z0-9_-]{1,120}). */
#define HPS_CONF_NAME_MAX HPS_NAME_MAX
/** Longest shared_memory_name ([A-Za-z0-9_.-]{1,200}). */
#define HPS_CONF_SHM_NAME_MAX HPS_SEGMENT_NAME_MAX
/** overflow_margin = max: no row limit. */
#define HPS_CONF_UNBOUNDED UINT64_MAX

/* ---- Generated from conf/hps_conf.def ---------------------------------- */

/** The enumerations of this module: hps_conf_vdb_type_t,
 *  hps_conf_ddb_type_t, hps_conf_pdb_type_t, hps_conf_update_source_type_t,
 *  hps_conf_cache_type_t, ... (HPS_CONF_OWN_ENUMS; constants and names in
 *  hps_conf.def; the first constant of each is 0).  log_level keys are
 *  hps_log_level_t and overflow_policy keys hps_overflow_policy_t
 *  (include/hps/hps.h), storage_type keys hps_dtype_t (include/hps/dtype.h),
 *  with the INI names in hps_conf.def. */
#define HPS__CONF_EV(e, c, n) c,
#define HPS__CONF_EA(e, c, n)
#define HPS__CONF_ENUM_TYPE(e)                                                                     \
    typedef enum hps_conf_##e{HPS_CONF_ENUM_##e(HPS__CONF_EV, HPS__CONF_EA)} hps_conf_##e##_t;
HPS_CONF_OWN_ENUMS(HPS__CONF_ENUM_TYPE)
#undef HPS__CONF_ENUM_TYPE
#undef HPS__CONF_EA
#undef HPS__CONF_EV

/* One struct field (or pointer + count) per CFG row, by schema type. */
#define HPS__CONF_F_BOOL(k, x)    bool k;
#define HPS__CONF_F_INT(k, x)     int64_t k;
#define HPS__CONF_F_AUTO(k, x)    int64_t k;
#define HPS__CONF_F_SIZE(k, x)    uint64_t k;
#define HPS__CONF_F_MARGIN(k, x)  uint64_t k;
#define HPS__CONF_F_REAL(k, x)    double k;
#define HPS__CONF_F_REAL_GT(k, x) double k;
#define HPS__CONF_F_MODE(k, x)    uint32_t k;
#define HPS__CONF_F_ENUM(k, x)    HPS_CONF_CTYPE_##x k;
#define HPS__CONF_F_STR(k, x)     const char *k;
#define HPS__CONF_F_REGEXES(k, x)                                                                  \
    const char **k;                                                                                \
    size_t k##_len;
#define HPS__CONF_F_INTS(k, x)                                                                     \
    int64_t *k;                                                                                    \
    size_t k##_len;
#define HPS__CONF_F_TSTRS(k, x)                                                                    \
    const char **k;                                                                                \
    size_t k##_len;
#define HPS__CONF_F_TINTS(k, x)                                                                    \
    int64_t *k;                                                                                    \
    size_t k##_len;
#define HPS__CONF_F_TREALS(k, x)                                                                   \
    double *k;                                                                                     \
    size_t k##_len;
#define HPS__CONF_FIELD(sec, key, type, extra, dflt, lo, hi, unit, doc)                            \
    HPS__CONF_F_##type(key, extra)

/** Section structs hps_conf_hps_t, hps_conf_volatile_db_t, ... */
#define HPS__CONF_SECTION_STRUCT(id, doc)                                                          \
    typedef struct hps_conf_##id {                                                                 \
        HPS_CONF_KEYS_##id(HPS__CONF_FIELD)                                                        \
    } hps_conf_##id##_t;
HPS_CONF_GLOBAL_SECTIONS(HPS__CONF_SECTION_STRUCT)
#undef HPS__CONF_SECTION_STRUCT

/** One [model.<name>] section. */
typedef struct hps_conf_model {
    const char *name;  /**< the <name> of [model.<name>] */
    size_t num_tables; /**< T = sparse_files_len; every per-table list has T entries */
    HPS_CONF_KEYS_model(HPS__CONF_FIELD)
} hps_conf_model_t;

/** A loaded configuration (read-only for callers; see the file comment). */
typedef struct hps_conf {
    const char *source; /**< file name, or the name given to hps_conf_load_string() */
#define HPS__CONF_MEMBER(id, doc) hps_conf_##id##_t id;
    HPS_CONF_GLOBAL_SECTIONS(HPS__CONF_MEMBER)
#undef HPS__CONF_MEMBER
    size_t num_models;          /**< 0 .. HPS_CONF_MAX_MODELS */
    hps_conf_model_t *models;   /**< in file order */
    struct hps_conf_meta *meta; /**< private (opaque): where each value came from */
} hps_conf_t;

/* ---- Loading ------------------------------------------------------------ */

/**
 * @brief Read, parse and validate a configuration file.
 *
 * Every key not in the file gets its default; every key in the file is
 * checked against its type and range; cross-key rules are checked last
 * (per-table list lengths, distributed_db.num_node_connections <=
 * num_partitions, allocation_rate <= shared_memory_size, distinct worker
 * ports, unique table names).  Only the first error is reported.
 *
 * @param[in]  path      File to read (host path, NUL-terminated).
 * @param[out] ret_conf  On success, the new configuration; free it with
 *                       hps_conf_free().  Untouched on failure.
 * @param[out] err       Buffer for the message of a failure ("file:line:
 *                       [section] key = value: what is allowed"); always
 *                       NUL-terminated when err_len > 0, truncated to fit.
 *                       May be NULL when err_len is 0.
 * @param[in]  err_len   Size of @p err in bytes.
 * @return 0; HPS_ECONFIG if the file is not a valid configuration;
 *         HPS_EINVAL if @p path or @p ret_conf is NULL; a negative errno
 *         value (-ENOENT, -EACCES, -EISDIR, -EIO, ...) if the file cannot be
 *         read; -ENODEV (a device), -EINVAL (a FIFO or a socket: only a
 *         regular file is read, and it is opened without blocking), -EFBIG
 *         (over 16 MiB); -ENOMEM.  Thread-safe.
 */
hps_err_t hps_conf_load(const char *path, hps_conf_t **ret_conf, char *err, size_t err_len);

/**
 * @brief Read a configuration file's text as hps_conf_load() reads it
 *        (opened without blocking, refused unless a regular file, at most
 *        the size hps_conf_load() takes), for hps_conf_load_string() and
 *        the editing functions.
 *
 * @param[in]  path      The file.
 * @param[out] ret_text  The text, NUL-terminated (malloc'd; the caller
 *                       frees it).  Untouched on failure.
 * @param[out] err       As for hps_conf_load().
 * @param[in]  err_len   Size of @p err.
 * @return 0; the file errors of hps_conf_load(); HPS_EINVAL for NULL
 *         arguments.  Thread-safe.
 */
hps_err_t hps_conf_read_file(const char *path, char **ret_text, char *err, size_t err_len);

/**
 * @brief Parse and validate a configuration held in memory (as hps_conf_load()).
 *
 * @param[in]  text      INI text, NUL-terminated; not kept after the call.
 * @param[in]  name      Name used in messages and conf->source (e.g. a file
 *                       name); NULL means "<string>".
 * @param[out] ret_conf  As for hps_conf_load().
 * @param[out] err       As for hps_conf_load().
 * @param[in]  err_len   Size of @p err.
 * @return 0; HPS_ECONFIG; HPS_EINVAL (NULL @p text or @p ret_conf); -ENOMEM.
 *         Thread-safe.
 */
hps_err_t hps_conf_load_string(const char *text, const char *name, hps_conf_t **ret_conf, char *err,
                               size_t err_len);

/**
 * @brief Free a configuration and every string and list in it.
 * @param[in] conf  From a loader, or NULL (no-op).  Must not be in use by
 *                  another thread; pointers into it become invalid.
 */
void hps_conf_free(hps_conf_t *conf);

/**
 * @brief Drop the models whose keep[i] is false (hps-coordinator's loaded
 *        set in model control mode explicit): their fields are freed and
 *        the others move down, in file order; conf->num_models shrinks.
 * @param[in,out] conf  A loaded configuration; not in use by another thread.
 *                      Pointers to its models become invalid.
 * @param[in]     keep  (conf->num_models) bool, host memory.
 */
void hps_conf_keep_models(hps_conf_t *conf, const bool *keep);

/* ---- Access ------------------------------------------------------------- */

/**
 * @brief Find a model by name.
 * @param[in] conf  A loaded configuration.
 * @param[in] name  Model name (the <name> of [model.<name>]).
 * @return The model (owned by @p conf, valid until hps_conf_free()), or NULL
 *         if there is none of that name or an argument is NULL.  Thread-safe.
 */
const hps_conf_model_t *hps_conf_model_find(const hps_conf_t *conf, const char *name);

/**
 * @brief Effective value of one key, formatted as `hps-conf show` writes it
 *        (sizes with units, enums by canonical name, lists ", "-joined,
 *        overflow_margin "max"), but with the password in clear.
 *
 * @param[in]  conf  A loaded configuration.
 * @param[in]  key   "section.key", e.g. "volatile_db.shared_memory_size", or
 *                   "model.<name>.key" for a model's key.
 * @param[out] buf   Receives the NUL-terminated value.
 * @param[in]  len   Size of @p buf in bytes.
 * @return 0; HPS_ENOTFOUND if the section, model or key does not exist;
 *         -ERANGE if the value does not fit (buf then holds a truncated,
 *         NUL-terminated prefix); HPS_EINVAL if an argument is NULL or
 *         @p len is 0; -ENOMEM.  Thread-safe.
 */
hps_err_t hps_conf_get(const hps_conf_t *conf, const char *key, char *buf, size_t len);

/**
 * @brief Whether a key was set in the file (false: it has its default).
 * @param[in] conf  A loaded configuration.
 * @param[in] key   As for hps_conf_get().
 * @param[out] ret_set  true if the file sets the key.  Untouched on failure.
 * @return 0; HPS_ENOTFOUND for an unknown key; HPS_EINVAL for NULL arguments;
 *         -ENOMEM.  Thread-safe.
 */
hps_err_t hps_conf_is_set(const hps_conf_t *conf, const char *key, bool *ret_set);

/**
 * @brief Where a key is set, for messages about its value that only later
 *        checks find (a model file that cannot be read):
 *        "SOURCE:LINE: [section] key" (SOURCE: conf->source), or
 *        "[section] key" for a key at its default.
 * @param[in]  conf  A loaded configuration.
 * @param[in]  key   As for hps_conf_get().
 * @param[out] buf   The text, NUL-terminated, truncated to len bytes; ""
 *                   for an unknown key or a NULL conf or key.
 * @return buf.  Thread-safe.
 */
const char *hps_conf_key_where(const hps_conf_t *conf, const char *key, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* HPS_CONF_H */
