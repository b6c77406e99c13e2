/*
 * hps-gen.h -- internals shared by the files of hps-gen.
 *
 * Each subcommand is gen_cmd_<name>(argc, argv) with argv[0] = the
 * subcommand, and returns the process exit status.  Errors are printed to
 * stderr as "hps-gen: what failed: PATH: strerror" by gen_fail(); command-line
 * errors by gen_usage().  Nothing here is thread-safe unless stated: the only
 * threads are the table writers of write.c.
 */
#ifndef HPS_TOOLS_HPS_GEN_H
#define HPS_TOOLS_HPS_GEN_H

#include <stdbool.h>
#include <stddef.h>
#include <getopt.h>
#include <stdint.h>

#include "hps/gen.h"
#include "hps/hps.h"

/** Exit statuses. */
enum {
    GEN_OK = 0,    /**< success */
    GEN_FAIL = 1,  /**< an error (I/O, refused overwrite, bad model dir) */
    GEN_USAGE = 2, /**< bad command line */
};

/** Longest model or table name ([A-Za-z0-9_-]). */
#define GEN_NAME_MAX HPS_NAME_MAX
/** Longest segment name ([A-Za-z0-9_.-]). */
#define GEN_SEGMENT_MAX HPS_SEGMENT_NAME_MAX
/** Most tables of a model (a segment holds at most 256; two open files each). */
#define GEN_TABLES_MAX HPS_MAX_TABLES
/** Largest dimension. */
#define GEN_DIM_MAX HPS_MAX_DIM

/** One table of a model to write. */
typedef struct gen_table {
    char *name;           /**< table name */
    uint64_t rows;        /**< rows (keys) */
    uint32_t dim;         /**< floats per vector */
    uint32_t max_query;   /**< maxnum_catfeature_query_per_table_per_sample */
    double default_value; /**< default_value_for_each_table */
    char *dir;            /**< final directory, absolute: OUT/name */
    char *tmp;            /**< directory written first: OUT/.name.tmp-PID */
} gen_table_t;

/** The parsed `hps-gen model` command: what to write and how. */
typedef struct gen_model {
    char *out_dir; /**< absolute; created before anything is written */
    const char *name;
    char *ini_path;      /**< where the INI goes (default OUT/<name>.ini) */
    const char *segment; /**< shared_memory_name */
    size_t num_tables;
    gen_table_t *tables; /**< (num_tables) */
    unsigned key_bytes;  /**< 8 or 4 */
    uint64_t seed;       /**< file-order shuffle */
    uint32_t version;    /**< model version: [model] version and the vectors
                          *   (hps_gen_vector_v); 1 by default */
    unsigned threads;    /**< writer threads */
    bool force;          /**< replace existing tables and INI */
    bool quiet;          /**< no progress, no final line */
    bool gpucache;
    double gpucacheper;
    uint32_t max_batch; /**< [model] max_batch_size */
    int http_port, metrics_port;
    bool persistent_db; /**< [persistent_db] type = rocks_db */
    char *cmdline;      /**< the command line, quoted, for the INI comment */
    uint64_t bytes;     /**< set by gen_write_tables(): bytes written */
    double seconds;     /**< set by gen_write_tables(): time taken */
} gen_model_t;

/* ---- command-line options -------------------------------------------------- */

/*
 * Each command lists its options as X-macros, X("long-name", field), one
 * list for options with a value and one for flags; these generate the
 * argument struct (const char *field / bool field), the getopt_long ids and
 * table, and the switch that stores an option.
 */
#define GEN_OPT_ID(s, f)     GEN_OPT_##f,
#define GEN_OPT_VALUE(s, f)  {s, required_argument, NULL, GEN_OPT_##f},
#define GEN_OPT_FLAG(s, f)   {s, no_argument, NULL, GEN_OPT_##f},
#define GEN_ARG_FIELD(s, f)  const char *f;
#define GEN_FLAG_FIELD(s, f) bool f;
#define GEN_SET_VALUE(s, f)                                                                        \
    case GEN_OPT_##f:                                                                              \
        a->f = optarg;                                                                             \
        break;
#define GEN_SET_FLAG(s, f)                                                                         \
    case GEN_OPT_##f:                                                                              \
        a->f = true;                                                                               \
        break;

/**
 * Parse argv (argv[0] = the command) with getopt_long; `set` stores one
 * option (returns false for an unknown id).  Returns GEN_OK or GEN_USAGE
 * (unknown option, missing value, or a positional argument).
 */
int gen_getopt(int argc, char **argv, const char *cmd, const struct option *opts,
               bool (*set)(void *args, int id), void *args);

/* ---- subcommands ---------------------------------------------------------- */

int gen_cmd_model(int argc, char **argv);
int gen_cmd_requests(int argc, char **argv);
int gen_cmd_alpha(int argc, char **argv);
int gen_cmd_row(int argc, char **argv);

/* ---- model writing (write.c, ini.c) --------------------------------------- */

/**
 * Write every table's key and emb_vector into its tmp directory with
 * m->threads threads, fsync, and move the directories into place (an old
 * directory is replaced only with m->force; gen_model_check_targets() has
 * refused otherwise).  Prints progress on a terminal; sets m->bytes and
 * m->seconds.  Returns an exit status; on failure the tmp directories are
 * removed and nothing in place has changed.
 */
int gen_write_tables(gen_model_t *m);

/** Write the INI (temp file + rename).  Returns an exit status. */
int gen_write_ini(const gen_model_t *m);

/** Bytes of the segment for a model: 1.5 x raw + 24 B/row + 64 MiB, in MiB. */
uint64_t gen_segment_bytes(const gen_model_t *m);

/* ---- model directories (requests.c) -------------------------------------- */

/** Tables of an existing model, as read back from its INI and key files. */
typedef struct gen_loaded {
    char *ini;          /**< the INI read */
    char *model;        /**< model name */
    unsigned key_bytes; /**< 8 or 4 ([hps] supportlonglong) */
    size_t num_tables;
    char **files;   /**< (num_tables) sparse_files, resolved */
    uint64_t *rows; /**< (num_tables) rows = size of `key` / 8 */
} gen_loaded_t;

/**
 * Load a model's tables: the INI is `config`, else DIR/<model>.ini, else
 * the only *.ini in `dir`; the model is `model`, else the INI's only one.
 * Prints the error and returns GEN_FAIL/GEN_USAGE, or GEN_OK.
 */
int gen_load_model(const char *dir, const char *model, const char *config, gen_loaded_t *ret);
void gen_loaded_free(gen_loaded_t *l);

/* ---- errors ---------------------------------------------------------------- */

/**
 * Print "hps-gen: <fmt...>[: strerror(err)]" to stderr (err 0: no suffix;
 * negative errno or HPS_E* code otherwise).  Returns GEN_FAIL.
 */
int gen_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** Print "hps-gen: <fmt...>" and "try 'hps-gen --help'"; returns GEN_USAGE. */
int gen_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- parsing (opts.c) ------------------------------------------------------ */

/** Unsigned decimal (or 0x hex) in [lo, hi]; false if not. */
bool gen_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *ret);
/** Finite number in [lo, hi]; false if not. */
bool gen_parse_double(const char *s, double lo, double hi, double *ret);
/**
 * Split a comma-separated list into malloc'd, trimmed strings (the array
 * and each string: free with gen_strv_free()).  Empty entries are an error.
 * Returns the count (>= 1) or 0 on error (*ret untouched).
 */
size_t gen_split(const char *s, char ***ret);
void gen_strv_free(char **v, size_t n);
/** [A-Za-z0-9_-]{1,max}, plus '.' if dot is true. */
bool gen_valid_name(const char *s, size_t max, bool dot);

/* ---- files and time (util.c) ----------------------------------------------- */

/** mkdir -p (mode 0755).  Returns 0 or -errno. */
int gen_mkdir_p(const char *path);
/** fsync a directory (or file) by path.  Returns 0 or -errno. */
int gen_fsync_path(const char *path);
/** Remove a tree (no symlinks followed).  Returns 0 or -errno. */
int gen_rm_rf(const char *path);
/** Does path exist, and is it a non-empty directory / anything but an empty one? */
int gen_path_state(const char *path, bool *ret_exists, bool *ret_nonempty);
/** malloc'd printf; aborts on ENOMEM (a tool, not a library). */
char *gen_strdupf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/** malloc that aborts on ENOMEM. */
void *gen_xmalloc(size_t n);
/** Monotonic seconds. */
double gen_now(void);
/** Write all of buf at off; returns 0 or -errno. */
int gen_pwrite_all(int fd, const void *buf, size_t len, uint64_t off);
/** Write a whole file safely: PATH.tmp-PID, fsync, rename.  0 or -errno. */
int gen_write_file_atomic(const char *path, const void *data, size_t len);
/** Online CPUs, capped at 16, at least 1. */
unsigned gen_default_threads(void);

#endif /* HPS_TOOLS_HPS_GEN_H */
