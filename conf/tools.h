/*
 * conf/tools.h -- the configuration library's functions for the tools
 * (hps-conf, hps-coordinator): printing a loaded configuration
 * (hps_conf_show), the notes it logs (hps_conf_notes), the key reference
 * (hps_conf_doc, hps_conf_doc_man), editing INI text and files
 * (hps_conf_edit_*, hps_conf_remove_section*, hps_conf_splice_section,
 * hps_conf_set_file) and importing HugeCTR's ps.json and Triton's
 * config.pbtxt (hps_conf_import).  Not installed, and not in libhps.so,
 * whose installed hps/conf.h loads and queries a configuration only.
 */
#ifndef HPS_CONF_TOOLS_H
#define HPS_CONF_TOOLS_H

#include "hps/conf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Output ------------------------------------------------------------- */

/**
 * @brief Write the effective configuration as INI: every section (models in
 *        file order) and every key in schema order; keys the file does not
 *        set end with "; default"; the password is masked.  The output loads
 *        back to the same configuration (except a masked password).
 *
 * @param[in] conf  A loaded configuration.
 * @param[in] out   Stream to write to; not closed.
 * @return 0; -EIO if writing failed; -ENOMEM; HPS_EINVAL for NULL arguments.
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
 * @return 0; -EIO if writing failed; -ENOMEM; HPS_EINVAL if @p out is NULL.
 *         Thread-safe.
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

/**
 * @brief INI text without its secrets: the lines (and continuation lines)
 *        of every key the schema marks secret ([distributed_db] password)
 *        removed, everything else byte for byte.
 *
 * For a copy that others may read, such as the INI text the coordinator
 * records in the shared-memory segment for the workers (whose mode may let
 * other users read it): the workers never use those keys.
 *
 * @param[in]  text      Valid INI text (as hps_conf_load_string() takes).
 * @param[in]  name      Name for messages (NULL: "<string>").
 * @param[out] ret_text  On success, the text without them (malloc'd; the
 *                       caller frees it; a copy when none is set).
 * @param[out] err, err_len  As for hps_conf_load().
 * @return 0; the errors of hps_conf_load_string() and hps_conf_edit_many();
 *         HPS_EINVAL for NULL arguments; -ENOMEM.  Thread-safe.
 */
hps_err_t hps_conf_strip_secrets(const char *text, const char *name, char **ret_text, char *err,
                                 size_t err_len);

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
#endif /* HPS_CONF_TOOLS_H */
