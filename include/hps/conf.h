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
#define HPS_CONF_MAX_TABLES 256
/** Longest model or table name ([A-Za-z0-9_-]{1,120}). */
#define HPS_CONF_NAME_MAX 120
/** Longest shared_memory_name ([A-Za-z0-9_.-]{1,200}). */
#define HPS_CONF_SHM_NAME_MAX 200
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
    size_t num_models;           /**< 0 .. HPS_CONF_MAX_MODELS */
    hps_conf_model_t *models;    /**< in file order */
    struct hps__conf_meta *meta; /**< private: where each value came from */
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
 *         @p len is 0.  Thread-safe.
 */
hps_err_t hps_conf_get(const hps_conf_t *conf, const char *key, char *buf, size_t len);

/**
 * @brief Whether a key was set in the file (false: it has its default).
 * @param[in] conf  A loaded configuration.
 * @param[in] key   As for hps_conf_get().
 * @param[out] ret_set  true if the file sets the key.  Untouched on failure.
 * @return 0; HPS_ENOTFOUND for an unknown key; HPS_EINVAL for NULL arguments.
 *         Thread-safe.
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

/* ---- Output ------------------------------------------------------------- */

/**
 * @brief Write the effective configuration as INI: every section (models in
 *        file order) and every key in schema order; keys the file does not
 *        set end with "; default"; the password is masked.  The output loads
 *        back to the same configuration (except a masked password).
 *
 * @param[in] conf  A loaded configuration.
 * @param[in] out   Stream to write to; not closed.
 * @return 0; -EIO if writing failed; HPS_EINVAL for NULL arguments.
 *         Thread-safe with respect to @p conf; callers serialize use of @p out.
 */
hps_err_t hps_conf_show(const hps_conf_t *conf, FILE *out);

/** A note of hps_conf_notes(): one line of text, valid during the call. */
typedef void (*hps_conf_note_fn)(void *ctx, const char *note);

/**
 * @brief Say what a loaded configuration asks that this HPS serves
 *        otherwise: HugeCTR keys accepted but with no such thing here
 *        ([volatile_db] type = disabled, embedding_cache_type other than
 *        dynamic, use_static_table).  hps-coordinator logs each as a warning
 *        at start; `hps-conf check` prints them.
 *
 * @param[in] conf  A loaded configuration (NULL: nothing).
 * @param[in] fn    Called once per note, in file order (NULL: nothing).
 * @param[in] ctx   Passed to fn.
 * Thread-safe with respect to conf.
 */
void hps_conf_notes(const hps_conf_t *conf, hps_conf_note_fn fn, void *ctx);

/**
 * @brief Write the reference of every section and key (markdown), as checked
 *        in at docs/configuration.md.
 * @param[in] out  Stream to write to; not closed.
 * @return 0; -EIO if writing failed; HPS_EINVAL if @p out is NULL.  Thread-safe.
 */
hps_err_t hps_conf_doc(FILE *out);

/**
 * @brief Write the same reference as the manual page hps.ini(5) (roff,
 *        man(7) macros): the intro and syntax rules of hps_conf_doc(), then
 *        each key's description, type and range, default and unit.  The
 *        build generates the installed page with it (`hps-conf doc --format
 *        man`), so the page cannot drift from conf/hps_conf.def.
 * @param[in] out  Stream to write to; not closed.
 * @return 0; -EIO if writing failed; -ENOMEM; HPS_EINVAL if @p out is NULL.
 *         Thread-safe.
 */
hps_err_t hps_conf_doc_man(FILE *out);

/* ---- Editing ------------------------------------------------------------ */

/**
 * @brief Set one key in INI text, keeping everything else byte for byte.
 *
 * The key's line keeps its indentation, spacing and inline comment; only the
 * value changes (continuation lines of the old value are dropped; a long list
 * is wrapped onto indented lines).  A key that is absent is added after the
 * last key of its section; a section that is absent is appended at the end.
 * The result is then validated as a whole (as hps_conf_load_string()); it is
 * returned only if valid.  The input must be structurally sound (known
 * sections and keys, no duplicates, no syntax error), but may hold invalid
 * values, so a bad value can be repaired.
 *
 * @param[in]  text      The current INI text, NUL-terminated.
 * @param[in]  name      Name for messages (NULL: "<string>").
 * @param[in]  key       "section.key" or "model.<name>.key".
 * @param[in]  value     The new value as it would be written in the file
 *                       (leading and trailing blanks are ignored); must not
 *                       contain a line break or " ;" (which starts a comment).
 * @param[out] ret_text  On success, the new text (malloc'd, NUL-terminated;
 *                       the caller frees it).  Untouched on failure.
 * @param[out] err       As for hps_conf_load().
 * @param[in]  err_len   Size of @p err.
 * @return 0; HPS_ENOTFOUND for an unknown section or key (or a model name
 *         that is not [A-Za-z0-9_-]{1,120}); HPS_ECONFIG if the value is not
 *         acceptable, the input is not structurally sound or the result is not
 *         valid; HPS_EINVAL for NULL arguments; -ENOMEM.  Thread-safe.
 */
hps_err_t hps_conf_edit_string(const char *text, const char *name, const char *key,
                               const char *value, char **ret_text, char *err, size_t err_len);

/** One edit of hps_conf_edit_many(): set @p key to @p value, or remove it. */
typedef struct hps_conf_edit {
    const char *key;   /**< "section.key" or "model.<name>.key" */
    const char *value; /**< the new value (as for hps_conf_edit_string()), or
                            NULL to remove the key's line(s) from the file, so
                            that it takes its default */
} hps_conf_edit_t;

/**
 * @brief Set and remove several keys in INI text at once, keeping everything
 *        else byte for byte; validate only the final result.
 *
 * The edits are applied in order, each to the text the previous one made (a
 * key edited twice gets the last value).  A set is done as
 * hps_conf_edit_string() does it; a key that is absent is added after the
 * last key of its section, a section that is absent is appended at the end,
 * so assignments to model.<name>.KEY create a new [model.<name>] section with
 * its keys in the order given.  A remove (value NULL) deletes the key's line
 * and its continuation lines (with an inline comment on them); comment lines
 * around it and the section header stay.  Only the final text is validated
 * (as hps_conf_load_string()), so a new model can get its required keys one
 * by one; the text is returned only if valid.  The input must be
 * structurally sound, as for hps_conf_edit_string().
 *
 * @param[in]  text      The current INI text, NUL-terminated.
 * @param[in]  name      Name for messages (NULL: "<string>").
 * @param[in]  edits     n edits, applied in order; not kept after the call.
 * @param[in]  n         Number of edits; at least 1.
 * @param[out] ret_text  On success, the new text (malloc'd, NUL-terminated;
 *                       the caller frees it).  Untouched on failure.
 * @param[out] err       As for hps_conf_load(); a failure of the final
 *                       validation names the line of the new text.
 * @param[in]  err_len   Size of @p err.
 * @return 0; HPS_ENOTFOUND for an unknown section or key (or a model name
 *         that is not [A-Za-z0-9_-]{1,120}), or for a remove of a key the
 *         text does not set (message "name: [section] key is not set") or of
 *         a key of a section it lacks ("name: no section [model.x] (the
 *         models are a, b)"); HPS_ECONFIG if a value is not acceptable, the
 *         input is not structurally sound or the result is not valid (e.g.
 *         a required key removed, or a new model still missing one);
 *         HPS_EINVAL for NULL @p text, @p edits, @p ret_text or key, or
 *         @p n of 0; -ENOMEM.  The first failing edit stops the others.
 *         Thread-safe.
 */
hps_err_t hps_conf_edit_many(const char *text, const char *name, const hps_conf_edit_t *edits,
                             size_t n, char **ret_text, char *err, size_t err_len);

/**
 * @brief Remove a whole section from INI text, keeping everything else byte
 *        for byte.
 *
 * The section's lines go: its header, every line up to the next section
 * header, and the comment lines directly above its own header (no blank line
 * in between).  A comment block directly above the next section's header
 * stays: it belongs to that section.  If the section is the last one in the
 * text, the blank lines before it go too, so the text does not end in blank
 * lines.  The result is then validated (as hps_conf_load_string()) and
 * returned only if valid.  Removing the only model leaves a valid
 * configuration without models.
 *
 * @param[in]  text      The current INI text, NUL-terminated.
 * @param[in]  name      Name for messages (NULL: "<string>").
 * @param[in]  section   The section's name as in its header, e.g.
 *                       "model.wdl" (a model) or "worker".
 * @param[out] ret_text  On success, the new text (malloc'd, NUL-terminated;
 *                       the caller frees it).  Untouched on failure.
 * @param[out] err       As for hps_conf_load().
 * @param[in]  err_len   Size of @p err.
 * @return 0; HPS_ENOTFOUND if @p section is not a section name or the text
 *         has no such section (the message names it and, for a model, lists
 *         the models there are); HPS_ECONFIG if the input is not
 *         structurally sound or the result is not valid; HPS_EINVAL for NULL
 *         arguments; -ENOMEM.  Thread-safe.
 */
hps_err_t hps_conf_remove_section(const char *text, const char *name, const char *section,
                                  char **ret_text, char *err, size_t err_len);

/**
 * @brief Give INI text @p dst the section @p section of INI text @p src:
 *        dst's own section of that name is cut out (as
 *        hps_conf_remove_section() cuts it) and src's lines of it appended
 *        after a blank line; with no such section in src, dst just loses
 *        its own.  Everything else of dst stays byte for byte.  The result
 *        is validated (as hps_conf_load_string()) and returned only if
 *        valid.
 *
 * hps-coordinator builds a model load this way: the configuration that
 * serves, with the requested model's section as the INI file has it now.
 *
 * @param[in]  dst       The INI text to change, NUL-terminated.
 * @param[in]  src       The INI text to take the section from.
 * @param[in]  name      Name for messages (NULL: "<string>").
 * @param[in]  section   The section's name as in its header ("model.wdl").
 * @param[out] ret_text  On success, the new text (malloc'd, NUL-terminated;
 *                       the caller frees it).  Untouched on failure.
 * @param[out] err       As for hps_conf_load().
 * @param[in]  err_len   Size of @p err.
 * @return 0; HPS_ENOTFOUND if @p section is not a section name;
 *         HPS_ECONFIG if either text is not structurally sound or the
 *         result is not valid; HPS_EINVAL for NULL arguments; -ENOMEM.
 *         Thread-safe.
 */
hps_err_t hps_conf_splice_section(const char *dst, const char *src, const char *name,
                                  const char *section, char **ret_text, char *err, size_t err_len);

/**
 * @brief Set and remove several keys of a configuration file, in place and
 *        atomically: hps_conf_edit_many() on the file's contents, written
 *        back as hps_conf_set_file() describes (only if the result is valid,
 *        and only if it differs).
 *
 * @param[in]  path     The configuration file; its name is used in messages.
 * @param[in]  edits    As for hps_conf_edit_many().
 * @param[in]  n        As for hps_conf_edit_many(); at least 1.
 * @param[out] err      As for hps_conf_load().
 * @param[in]  err_len  Size of @p err.
 * @return 0; the errors of hps_conf_edit_many(); the file errors of
 *         hps_conf_set_file().  On any failure the file is unchanged.  Not
 *         safe against concurrent edits of the same file.
 */
hps_err_t hps_conf_edit_file(const char *path, const hps_conf_edit_t *edits, size_t n, char *err,
                             size_t err_len);

/**
 * @brief Set one key in a configuration file, in place and atomically.
 *
 * As hps_conf_edit_string() on the file's contents; if the result is valid it
 * is written to a temporary file in the same directory, fsync'd, given the
 * original's permission bits (and owner, where permitted) and renamed over
 * the file (a symbolic link is followed: its target is replaced), then the
 * directory is fsync'd.  On any failure the file is unchanged, byte for byte.
 *
 * @param[in]  path     The configuration file.
 * @param[in]  key      As for hps_conf_edit_string().
 * @param[in]  value    As for hps_conf_edit_string().
 * @param[out] err      As for hps_conf_load().
 * @param[in]  err_len  Size of @p err.
 * @return 0; the errors of hps_conf_edit_string(); a negative errno value if
 *         the file cannot be read or the new one cannot be written (-ENOENT,
 *         -EACCES, -ENOSPC, ...).  Not safe against concurrent edits of the
 *         same file (the last rename wins); readers always see a whole file.
 */
hps_err_t hps_conf_set_file(const char *path, const char *key, const char *value, char *err,
                            size_t err_len);

/**
 * @brief Remove a whole section of a configuration file (e.g. a model:
 *        "model.<name>"), in place and atomically: hps_conf_remove_section()
 *        on the file's contents, written back as hps_conf_set_file()
 *        describes (only if the result is valid).
 *
 * @param[in]  path     The configuration file; its name is used in messages.
 * @param[in]  section  As for hps_conf_remove_section().
 * @param[out] err      As for hps_conf_load().
 * @param[in]  err_len  Size of @p err.
 * @return 0; the errors of hps_conf_remove_section(); the file errors of
 *         hps_conf_set_file().  On any failure the file is unchanged.  Not
 *         safe against concurrent edits of the same file.
 */
hps_err_t hps_conf_remove_section_file(const char *path, const char *section, char *err,
                                       size_t err_len);

/* ---- Import from HugeCTR ------------------------------------------------ */

/**
 * @brief Convert a HugeCTR HPS configuration to HPS INI text: a ps.json
 *        (HugeCTR v24.06 keys and the older ones HugeCTR accepted) and any
 *        number of Triton config.pbtxt files of models served by the `hps`
 *        (or older `hugectr`) backend.
 *
 * ps.json keys map to the INI key of the same name: the top level to [hps],
 * `volatile_db` to [volatile_db] (hash-map types) or [distributed_db]
 * (`redis_cluster`, with [volatile_db] disabled, as HugeCTR had one volatile
 * DB), `persistent_db` and `update_source` to their sections, each entry of
 * `models` to [model.<model>].  Where HugeCTR's default differs from the
 * INI's, the INI gets HugeCTR's value (e.g. a `volatile_db` without `type`
 * is disabled).  The obsolete v3.3 sections `cpu_memory_db` and
 * `distributed_db` are mapped when `volatile_db` is absent.  A config.pbtxt
 * applies to the model of its `name` (else of its directory's name): its
 * `parameters` gpucache, gpucacheper, hit_rate_threshold, refresh_interval,
 * refresh_delay and des_feature_num override the ps.json's values,
 * embeddingkey_long_type must agree with supportlonglong, and the `gpus` of
 * its instance_groups become deployed_device_list (or must lie in it).
 *
 * Each value is checked with the INI parser's own rules as it is mapped,
 * and the whole INI text is then loaded as hps_conf_load_string() does, so
 * the result always passes `hps-conf check`.  Errors name the input file,
 * the JSON path or pbtxt line and key, the value and what is allowed, e.g.
 * "ps.json: models[0].gpucacheper = 1.5: must be a number in [0, 1]".
 *
 * Warnings (one line each, "file: key: reason") list every input key that
 * is not imported: keys with no meaning in HPS and why, obsolete keys,
 * unknown keys (with a suggestion where one is near), and keys of a type
 * that does not use them; also values changed on the way (a ';' separated
 * address list, a pbtxt parameter overriding the ps.json) and HugeCTR
 * behaviour that the INI does not repeat (update_filters defaults).
 *
 * JSON is read with json-c (strict mode); line comments (`//`) and block
 * comments are accepted, as the HugeCTR documentation's examples have them.
 * config.pbtxt is read by a strict reader of the protobuf text format
 * subset Triton uses (conf/pbtxt.c); its errors are "file:line: ...".
 *
 * @param[in]  json_path     The ps.json file (host path).
 * @param[in]  pbtxt_paths   num_pbtxt config.pbtxt paths; may be NULL when
 *                           num_pbtxt is 0.  At most one per model.
 * @param[in]  num_pbtxt     Number of entries of @p pbtxt_paths.
 * @param[out] ret_ini       On success, the INI text (malloc'd,
 *                           NUL-terminated; the caller frees it).  Untouched
 *                           on failure.
 * @param[out] ret_warnings  On success, the warnings, each line ending in
 *                           '\n', or NULL when there are none (malloc'd; the
 *                           caller frees it).  Untouched on failure.
 * @param[out] err           Buffer for the message of a failure; always
 *                           NUL-terminated when err_len > 0.
 * @param[in]  err_len       Size of @p err in bytes.
 * @return 0; HPS_ECONFIG if an input is not valid JSON or protobuf text, a
 *         required key is missing, a value has the wrong type or is out of
 *         range, or the result is not a valid configuration; HPS_EINVAL if
 *         @p json_path, @p ret_ini or @p ret_warnings is NULL, or
 *         @p pbtxt_paths is NULL while num_pbtxt > 0; a negative errno value if a file
 *         cannot be read (as hps_conf_load()); -ENOMEM.  Thread-safe: no
 *         global state (numbers are read in the C locale of the calling
 *         thread only).
 */
hps_err_t hps_conf_import(const char *json_path, const char *const *pbtxt_paths, size_t num_pbtxt,
                          char **ret_ini, char **ret_warnings, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif /* HPS_CONF_H */
