/*
 * internal.h -- shared internals of the configuration module (not installed).
 *
 * Files:
 *   schema.c  the const tables generated from hps_conf.def (keys, sections,
 *             enums) and lookups in them
 *   scan.c    INI text -> raw strings per (section, key), with line numbers
 *             (inih does the tokenizing; see the essay there)
 *   value.c   one value: parse + range check, format, describe, free
 *   conf.c    raw strings -> hps_conf_t (defaults, values, cross-key rules),
 *             hps_conf_get(), hps_conf_free()
 *   show.c    hps_conf_show(), hps_conf_doc()
 *   edit.c    hps_conf_edit_many(), hps_conf_remove_section() and their
 *             file versions (hps_conf_edit_file(), ...): edits in place
 *   buf.c     a growable string buffer and message helpers
 *   import.c  hps_conf_import(): values checked and stored, config.pbtxt
 *             applied, the INI written and validated
 *   import_json.c  the ps.json's keys (json-c) for import.c: its values,
 *             models and root; import_json_keys.c its key tables,
 *             import_json_db.c its database and update source objects
 *             (shared through the private import_json.h)
 *   pbtxt.c   a reader of protobuf text format (Triton's config.pbtxt)
 *   triton.c  what a Triton config.pbtxt of the hps backend says (for import.c)
 */
#ifndef HPS_CONF_INTERNAL_H
#define HPS_CONF_INTERNAL_H

#include <locale.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf/tools.h"

/* ---- Schema ------------------------------------------------------------- */

/** Section ids: the global sections in order, then model. */
typedef enum hps__conf_sec {
#define HPS__CONF_SEC_ID(id, doc) HPS__CONF_SEC_##id,
    HPS_CONF_GLOBAL_SECTIONS(HPS__CONF_SEC_ID)
#undef HPS__CONF_SEC_ID
        HPS__CONF_SEC_model,
    HPS__CONF_SEC_COUNT
} hps__conf_sec_t;
#define HPS__CONF_NGLOBAL ((int)HPS__CONF_SEC_model)

/** Value types (the `type` column of hps_conf.def). */
typedef enum hps__conf_type {
    HPS__CONF_T_BOOL,
    HPS__CONF_T_INT,
    HPS__CONF_T_AUTO,
    HPS__CONF_T_SIZE,
    HPS__CONF_T_MARGIN,
    HPS__CONF_T_REAL,
    HPS__CONF_T_REAL_GT,
    HPS__CONF_T_MODE,
    HPS__CONF_T_ENUM,
    HPS__CONF_T_STR,
    HPS__CONF_T_REGEXES,
    HPS__CONF_T_INTS,
    HPS__CONF_T_TSTRS,
    HPS__CONF_T_TINTS,
    HPS__CONF_T_TREALS,
} hps__conf_type_t;

/** String checks (the `extra` column of STR and TSTRS rows). */
typedef enum hps__conf_check {
    HPS__CONF_CHECK__ = 0, /* no string */
    HPS__CONF_CHECK_any,
    HPS__CONF_CHECK_secret, /* any text; show masks it */
    HPS__CONF_CHECK_path,
    HPS__CONF_CHECK_host,
    HPS__CONF_CHECK_hostports,
    HPS__CONF_CHECK_shm_name,
    HPS__CONF_CHECK_name,
} hps__conf_check_t;

/** One accepted spelling of an enum value. */
struct hps__conf_enum_name {
    const char *name;
    int value;
    bool canonical; /* the name show/get print for value */
};

/** An enumeration: its names, canonical ones first in value order. */
struct hps__conf_enum {
    const struct hps__conf_enum_name *names;
    size_t count;
};

/** One CFG() row. */
struct hps__conf_key {
    hps__conf_sec_t sec;
    const char *name;
    hps__conf_type_t type;
    const struct hps__conf_enum *en; /* ENUM */
    hps__conf_check_t check;         /* STR, TSTRS */
    const char *dflt;                /* NULL: required */
    double lo, hi;
    const char *unit;
    const char *doc;
    size_t offset;     /* of the field in its section struct */
    size_t len_offset; /* of <key>_len for lists */
};

/** One section kind. */
struct hps__conf_section {
    const char *name; /* "hps", ..., "model" */
    const char *doc;
    size_t offset; /* of the section struct in hps_conf_t (globals only) */
};

#define HPS__CONF_COUNT1(...) +1
enum { HPS__CONF_NKEYS = 0 HPS_CONF_KEYS(HPS__CONF_COUNT1) };

extern const struct hps__conf_key hps__conf_keys[HPS__CONF_NKEYS];
extern const struct hps__conf_section hps__conf_sections[HPS__CONF_SEC_COUNT];

/** Key index of `name` in section kind `sec`, or -1. */
int hps__conf_key_find(hps__conf_sec_t sec, const char *name);
/** Section kind of a section name ("volatile_db", "model.x"), or -1.  For
 *  "model.<name>" also checks the name; *ret_bad_model is set when the
 *  prefix is right but the name is not [A-Za-z0-9_-]{1,120}. */
int hps__conf_sec_find(const char *name, bool *ret_bad_model);
/** Whether s is a model or table name: [A-Za-z0-9_-]{1,120}. */
bool hps__conf_is_name(const char *s, size_t len);
/** Nearest key of `sec` or section name to `s` (edit distance <= 2), or NULL. */
const char *hps__conf_suggest_key(hps__conf_sec_t sec, const char *s);
const char *hps__conf_suggest_section(const char *s);
/** What `hps-conf show` and every message print instead of a secret value. */
#define HPS__CONF_MASK "********"
/** Whether a key called name is a secret (HPS__CONF_CHECK_secret) in any section. */
bool hps__conf_secret_name(const char *name);
/** value, or HPS__CONF_MASK if secret and value is not empty: how messages
 *  ("key = value: ...") show the value of a secret key. */
const char *hps__conf_masked(bool secret, const char *value);
/** Whether the type is a list (pointer + _len). */
bool hps__conf_is_list(hps__conf_type_t t);
/** Whether the type is a per-table list (T entries). */
bool hps__conf_is_tlist(hps__conf_type_t t);

/* ---- Growable string buffer -------------------------------------------- */

struct hps__conf_buf {
    char *p;    /* NUL-terminated once anything was added; NULL before */
    size_t len; /* bytes, without the NUL */
    size_t cap;
    bool oom; /* an append failed; p holds what fit */
};

void hps__conf_buf_add(struct hps__conf_buf *b, const char *s, size_t n);
void hps__conf_buf_puts(struct hps__conf_buf *b, const char *s);
void hps__conf_buf_printf(struct hps__conf_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
const char *hps__conf_buf_str(const struct hps__conf_buf *b); /* "" if empty */
void hps__conf_buf_fini(struct hps__conf_buf *b);

/** Numbers are read and written in the C locale ('.' decimal point), even in
 *  a process that called setlocale(): every entry point that parses or
 *  formats numbers switches the calling thread to it (uselocale(), which is
 *  per thread) and back.  If the locale cannot be created, nothing changes. */
struct hps__conf_cloc {
    locale_t c, old;
};
void hps__conf_cloc_enter(struct hps__conf_cloc *l);
void hps__conf_cloc_leave(struct hps__conf_cloc *l);

/** snprintf into the caller's error buffer (NULL or 0 length: nothing). */
void hps__conf_msg(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/** Duplicate n bytes as a NUL-terminated string; NULL on ENOMEM. */
char *hps__conf_strndup(const char *s, size_t n);

/* ---- Values ------------------------------------------------------------- */

/** Where a value lives: the section struct (hps_conf_hps_t, ...). */
typedef void *hps__conf_base_t;

/**
 * Parse `raw` for key k into the section struct at base (which must hold
 * zero/NULL for that field).  ntables: T for per-table lists (entries must
 * number T), else ignored.  On HPS_ECONFIG, msg holds what follows
 * "key = value: " ("must be ...").  ret_auto: set when "auto" was given.
 * Returns 0, HPS_ECONFIG or -ENOMEM.
 */
hps_err_t hps__conf_value_parse(const struct hps__conf_key *k, const char *raw,
                                hps__conf_base_t base, size_t ntables, bool *ret_auto,
                                struct hps__conf_buf *msg);
/** Check one entry s of list key k (INI text), as hps__conf_value_parse() checks
 *  each; on HPS_ECONFIG msg holds the reason ("must be ...", without "entry N"),
 *  for callers that number entries their own way (import: from 0).  Returns 0,
 *  HPS_ECONFIG or -ENOMEM. */
hps_err_t hps__conf_value_check_entry(const struct hps__conf_key *k, const char *s,
                                      struct hps__conf_buf *msg);
/** Free what hps__conf_value_parse() allocated for k (NULL-safe). */
void hps__conf_value_free(const struct hps__conf_key *k, hps__conf_base_t base);
/** Append the value of k as show/get write it; mask hides a password. */
void hps__conf_value_format(const struct hps__conf_key *k, const void *base, bool mask,
                            struct hps__conf_buf *out);
/** Append entry i of list key k as show/get write it. */
void hps__conf_value_format_entry(const struct hps__conf_key *k, const void *base, size_t i,
                                  struct hps__conf_buf *out);
/** Number of entries of list key k. */
size_t hps__conf_value_count(const struct hps__conf_key *k, const void *base);
/** Append what k accepts, as a noun phrase ("an integer in [1, 256]"). */
void hps__conf_value_allowed(const struct hps__conf_key *k, struct hps__conf_buf *out);
/** The default text of k for T tables (T-lists repeat the entry); NULL for
 *  a required key. Caller frees. Sets *ret_oom on ENOMEM. */
char *hps__conf_value_default(const struct hps__conf_key *k, size_t ntables, bool *ret_oom);
/** Split a list value at top-level commas (regex lists: not inside (), [],
 *  {}, nor after a backslash); entries are trimmed.  *ret_n entries, each a
 *  malloc'd string in the malloc'd array; returns NULL with *ret_n = 0 for
 *  an empty value, NULL with *ret_oom on ENOMEM. */
char **hps__conf_list_split(const char *raw, bool regex, size_t *ret_n, bool *ret_oom);
void hps__conf_list_free(char **v, size_t n);
/** min(online CPU cores, 16), at least 1: the value of "auto". */
int64_t hps__conf_auto_value(void);

/* ---- Scan: INI text -> raw values -------------------------------------- */

/** A key as written: value (continuations joined) and lines. */
struct hps__conf_raw {
    char *value; /* NULL: not in the file */
    uint32_t first_line, last_line;
};

/** One [section] of the file. */
struct hps__conf_scan_sec {
    char *name; /* as written between the brackets */
    hps__conf_sec_t sec;
    uint32_t header_line;
    uint32_t last_line; /* of its last key line (header_line if none) */
    struct hps__conf_raw raw[HPS__CONF_NKEYS];
};

struct hps__conf_scan {
    struct hps__conf_scan_sec **secs; /* in file order */
    size_t nsecs;
    size_t nmodels;
};

/**
 * Split INI text into sections and raw values, checking structure only:
 * syntax, known sections and keys, no duplicates, at most 64 models,
 * continuation lines only for lists.  Returns 0, HPS_ECONFIG (message in
 * err) or -ENOMEM.  On failure *scan is empty.
 */
hps_err_t hps__conf_scan(const char *text, size_t len, const char *name,
                         struct hps__conf_scan *scan, char *err, size_t err_len);
void hps__conf_scan_fini(struct hps__conf_scan *scan);

/** Read a whole file (NUL-terminated, malloc'd); on failure a message
 *  "cannot read <path>: <reason>" and a negative errno value. */
hps_err_t hps__conf_read_file(const char *path, char **ret_text, size_t *ret_len, char *err,
                              size_t err_len);

/* ---- Private part of hps_conf_t ---------------------------------------- */

/** Where the values of one section instance came from. */
struct hps__conf_inst_meta {
    uint32_t header_line;           /* 0: section not in the file */
    uint32_t line[HPS__CONF_NKEYS]; /* line of the key; 0: default */
    bool is_auto[HPS__CONF_NKEYS];  /* AUTO key given or defaulted as "auto" */
};

struct hps_conf_meta {
    struct hps__conf_inst_meta global[HPS__CONF_NGLOBAL];
    struct hps__conf_inst_meta *model; /* num_models */
};

/** Section struct of a global section, or of model i (sec == model). */
void *hps__conf_base(const hps_conf_t *conf, hps__conf_sec_t sec, size_t model);
/** Split "section.key" / "model.<name>.key"; finds the section kind, the
 *  model index (for loaded confs) and the key index.  Returns 0 or
 *  HPS_ENOTFOUND. sec_name receives the section name (caller frees). */
hps_err_t hps__conf_dotted_split(const char *dotted, hps__conf_sec_t *ret_sec, char **ret_sec_name,
                                 int *ret_key);

/* ---- Protobuf text format (pbtxt.c) ------------------------------------ */

/** What a field holds. */
typedef enum hps__conf_pb_kind {
    HPS__CONF_PB_SCALAR,  /* a number or identifier, as written (text) */
    HPS__CONF_PB_STRING,  /* a string, decoded (text; adjacent literals joined) */
    HPS__CONF_PB_MESSAGE, /* a nested message (msg) */
} hps__conf_pb_kind_t;

/** One field of a message; a list `f: [a, b]` is read as two fields f. */
struct hps__conf_pb_field {
    char *name;
    uint32_t line;       /* of the field name */
    uint32_t value_line; /* of the value (scalars and strings) */
    hps__conf_pb_kind_t kind;
    char *text;                   /* SCALAR, STRING: NUL-terminated, never holds a NUL */
    struct hps__conf_pb_msg *msg; /* MESSAGE */
};

/** A message: its fields in file order. */
struct hps__conf_pb_msg {
    struct hps__conf_pb_field *fields;
    size_t n, cap;
};

/**
 * Parse protobuf text format (the subset of Triton's config.pbtxt; see the
 * grammar in pbtxt.c).  name is used in messages ("name:line: ...").
 * Returns 0 with *ret (free with hps__conf_pb_free()), HPS_ECONFIG with the
 * message in err, or -ENOMEM.
 */
hps_err_t hps__conf_pb_parse(const char *text, size_t len, const char *name,
                             struct hps__conf_pb_msg **ret, char *err, size_t err_len);
/** Free a parsed message (NULL-safe). */
void hps__conf_pb_free(struct hps__conf_pb_msg *m);
/** The first field called name in m, or NULL. */
const struct hps__conf_pb_field *hps__conf_pb_find(const struct hps__conf_pb_msg *m,
                                                   const char *name);

/* ---- Triton config.pbtxt (triton.c) ------------------------------------- */

/** A `parameters` entry that sets an INI key. */
struct hps__conf_triton_param {
    char *key, *value; /* as in the file (value: the string_value) */
    const char *ini;   /* the [model.<name>] key it sets, or "hps.supportlonglong" */
    uint32_t line;     /* of the value */
};

/** What a config.pbtxt says about HPS. */
struct hps__conf_triton {
    char *name; /* model name: the `name` field, else the directory's name */
    uint32_t name_line;
    char *backend; /* NULL if absent */
    uint32_t backend_line;
    char *max_batch_size; /* as written; NULL if absent */
    uint32_t max_batch_size_line;
    int64_t *gpus; /* instance_group gpus, each once, in file order */
    size_t ngpus;
    uint32_t gpus_line;
    struct hps__conf_triton_param *params;
    size_t nparams;
};

/**
 * Read a config.pbtxt: its name, backend (must be hps or hugectr),
 * max_batch_size, instance_group gpus and the parameters that set INI keys.
 * Every other setting, and parameters with no meaning here, are appended
 * to warn ("file:line: what: not imported: why" lines).  Returns 0 (free t
 * with hps__conf_triton_fini()), HPS_ECONFIG (message in err), a negative errno
 * value if the file cannot be read, or -ENOMEM; on failure t is empty.
 */
hps_err_t hps__conf_triton_read(const char *path, struct hps__conf_triton *t,
                                struct hps__conf_buf *warn, char *err, size_t err_len);
void hps__conf_triton_fini(struct hps__conf_triton *t);

/* ---- Import (import.c, import_json.c) ------------------------------------ */

/** One imported value: canonical INI text, and the input it came from. */
struct hps__conf_ival {
    char *text; /* NULL: not set (the INI default applies) */
    char *src;  /* "ps.json: models[0].gpucacheper", "config.pbtxt:12: parameters gpucacheper" */
};

/** The values of one section instance, by key index. */
struct hps__conf_isec {
    struct hps__conf_ival v[HPS__CONF_NKEYS];
};

/** One model of the ps.json. */
struct hps__conf_imodel {
    char *name;
    size_t ntables; /* entries of sparse_files */
    bool has_pbtxt; /* a config.pbtxt was applied */
    struct hps__conf_isec s;
};

/** An import in progress. */
struct hps__conf_imp {
    const char *jname; /* the ps.json's name */
    struct hps__conf_isec g[HPS__CONF_NGLOBAL];
    struct hps__conf_imodel *models;
    size_t nmodels;
    struct hps__conf_buf warn; /* warning lines */
    hps_err_t rc;              /* the first error; later steps are skipped */
    char *err;
    size_t err_len;
};

/** Record an input error (HPS_ECONFIG; the first only); returns im->rc. */
hps_err_t hps__conf_imp_fail(struct hps__conf_imp *im, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/** Record -ENOMEM; returns im->rc. */
hps_err_t hps__conf_imp_oom(struct hps__conf_imp *im);
/** Append one warning line (the '\n' is added). */
void hps__conf_imp_warn(struct hps__conf_imp *im, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/** The value slot of key of section sec (of model m when sec is model). */
struct hps__conf_ival *hps__conf_imp_val(struct hps__conf_imp *im, hps__conf_sec_t sec,
                                         struct hps__conf_imodel *m, const char *key);
/** Why s cannot be written as an INI value (list_entry: a list entry), or NULL. */
const char *hps__conf_ini_unsafe(const char *s, bool list_entry);
/**
 * Check raw (INI value text) for key of section sec (of model m) with the
 * INI's value parser and store its canonical form, replacing an earlier
 * value.  src names the input, shown is the value as the input wrote it
 * (for the message "src = shown: must be ...").  Returns im->rc.
 */
hps_err_t hps__conf_imp_put(struct hps__conf_imp *im, hps__conf_sec_t sec,
                            struct hps__conf_imodel *m, const char *key, const char *raw,
                            const char *src, const char *shown);
/** Read and map the ps.json at path (import_json.c); returns im->rc. */
hps_err_t hps__conf_import_json(struct hps__conf_imp *im, const char *path);
/** Warnings on HugeCTR defaults the INI does not repeat (after all inputs). */
void hps__conf_import_notes(struct hps__conf_imp *im);

#endif /* HPS_CONF_INTERNAL_H */
