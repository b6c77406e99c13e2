/*
 * hps-shm.h -- internals shared by the files of the hps-shm inspection tool.
 *
 * The tool is a thin client of shmdb.h: every subcommand attaches as
 * HPS_ROLE_TOOL, reads, prints (text, or JSON with --json) and detaches.
 * Each subcommand lives in its own hps__tool_cmd_<name>() and returns the
 * process exit status: HPS__TOOL_OK, HPS__TOOL_FAIL (an error or an
 * inconsistency was found) or HPS__TOOL_USAGE (bad command line).
 *
 * Errors go to stderr, always as text (also with --json), as
 * "hps-shm CMD: what failed: hps_strerror text (CODE)" plus a "hint:" line
 * saying what to do.
 */
#ifndef HPS_TOOLS_HPS_SHM_H
#define HPS_TOOLS_HPS_SHM_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "hps/shmdb.h"

/** Exit statuses of the tool. */
enum {
    HPS__TOOL_OK = 0,    /**< success */
    HPS__TOOL_FAIL = 1,  /**< error, or the segment is inconsistent */
    HPS__TOOL_USAGE = 2, /**< bad command line */
};

/** The parsed command line (options removed, positional arguments kept). */
typedef struct hps__tool {
    bool json;         /**< --json: machine-readable output on stdout */
    bool force;        /**< --force (rm only): remove even while processes are attached */
    const char *cmd;   /**< subcommand name ("info", ...) */
    int argc;          /**< positional arguments after the subcommand */
    char *const *argv; /**< (argc) the arguments */
} hps__tool_t;

/* ---- subcommands (each returns an exit status) --------------------------- */

/* Each takes the parsed command line; main.c has checked the number of
 * positional arguments (its command table) and that argv[0], where there
 * is one, is a valid segment NAME.  Each returns HPS__TOOL_OK, or
 * HPS__TOOL_FAIL after printing the error (stderr, text) as described at
 * the top of this file; output goes to stdout (text, or one JSON document
 * with t->json).  The segment is attached as HPS_ROLE_TOOL for the call
 * and detached before it returns.  Main thread only (the tool is single
 * threaded).  What each does is main.c's usage text: */
/** ls: list /dev/shm's segments and their status (no argument). */
int hps__tool_cmd_ls(const hps__tool_t *t);
/** info NAME: header, tables, processes and GPU caches of one segment. */
int hps__tool_cmd_info(const hps__tool_t *t);
/** get NAME MODEL TABLE KEY...: the vector of each key (counts as lookups). */
int hps__tool_cmd_get(const hps__tool_t *t);
/** dump NAME MODEL TABLE DIR: write DIR/key and DIR/emb_vector (HugeCTR's
 *  sparse model files; fp32, decoded from the storage type). */
int hps__tool_cmd_dump(const hps__tool_t *t);
/** check NAME: full consistency walk; HPS__TOOL_FAIL when a problem is found. */
int hps__tool_cmd_check(const hps__tool_t *t);
/** rm NAME: remove the segment; refused (HPS__TOOL_FAIL) while other
 *  processes are attached, unless t->force. */
int hps__tool_cmd_rm(const hps__tool_t *t);

/**
 * @brief The "gpu caches" part of info: every GPU-cache registry entry that
 *        is not FREE, printed as text (arr NULL) or added to arr (JSON).
 * @return HPS__TOOL_OK, or HPS__TOOL_FAIL after printing the error.
 */
int hps__tool_info_gcaches(const hps__tool_t *t, hps_shmdb_t *db, json_object *arr);

/* ---- errors -------------------------------------------------------------- */

/**
 * @brief Print "hps-shm CMD: <fmt...>[: strerror (NAME)]" and, if hint is not
 *        NULL, a "hint: ..." line, to stderr.
 * @param[in] err  0 (no library error to show) or an hps_err_t.
 * @return HPS__TOOL_FAIL, so callers can `return hps__tool_fail(...)`.
 */
int hps__tool_fail(const hps__tool_t *t, hps_err_t err, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/** @brief As hps__tool_fail() for a command-line error; returns HPS__TOOL_USAGE. */
int hps__tool_usage(const hps__tool_t *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/**
 * @brief What to do about a failed attach or probe (static text, never NULL).
 * @param[in] err  The error of hps_shmdb_attach() or hps_shmdb_probe().
 */
const char *hps__tool_attach_hint(hps_err_t err);

/* ---- segment access ------------------------------------------------------ */

/** How hps-shm attaches: a tool of 1 thread and no device, without a
 *  process-table row where every row is taken (rowless_if_full). */
extern const hps_shmdb_proc_opts_t hps__tool_popts;

/**
 * @brief Attach to segment `name` as a tool (hps__tool_popts).
 * @param[out] ret  The handle; release with hps_shmdb_detach().  Written only
 *                  on success.
 * @return HPS__TOOL_OK, or HPS__TOOL_FAIL after printing the error.
 */
int hps__tool_attach(const hps__tool_t *t, const char *name, hps_shmdb_t **ret);

/**
 * @brief Find table (model, table) and take its info snapshot.  table is a
 *        table's name or, where no table of the model has that name, its
 *        index among the model's tables (decimal; 0 = the model's first table
 *        in id order, as info lists them).
 * @return HPS__TOOL_OK, or HPS__TOOL_FAIL after printing the error (which
 *         says whether the model exists, and lists its tables or the
 *         segment's models).
 */
int hps__tool_find_table(const hps__tool_t *t, hps_shmdb_t *db, const char *model,
                         const char *table, uint32_t *ret_id, hps_table_info_t *ret_info);

/* ---- output helpers ------------------------------------------------------ */

/**
 * @brief Print `obj` pretty-printed on stdout and release it (json_object_put).
 * @return HPS__TOOL_OK, or HPS__TOOL_FAIL if stdout could not be written.
 */
int hps__tool_emit_json(const hps__tool_t *t, json_object *obj);

/** @brief Flush stdout; HPS__TOOL_FAIL (with a message) if that fails. */
int hps__tool_flush(const hps__tool_t *t);

/** @brief Add key -> val to a JSON object (val may be NULL for null). */
void hps__tool_jset(json_object *obj, const char *key, json_object *val);

/**
 * @brief JSON string of s (NULL: ""), serialized as valid UTF-8 JSON
 *        whatever its bytes: control characters (DEL and the C1 controls
 *        included) escaped, each byte that is not well-formed UTF-8 written
 *        as \u00XX of its value.  Every string of the tool's JSON output is
 *        made by it (names and messages come from a segment that may be
 *        corrupt, paths from the command line).
 */
json_object *hps__tool_json_str(const char *s);

/**
 * @brief s for a text line: bytes outside printable ASCII as "\xNN", '\'
 *        as "\\" (identity for the names a coordinator writes); cut to fit
 *        buf[len].
 * @return buf.
 */
const char *hps__tool_printable(const char *s, char *buf, size_t len);

/** @brief JSON unsigned 64-bit integer. */
json_object *hps__tool_json_u64(uint64_t v);

/**
 * @brief JSON number printed as "%.9g" (round-trips a float32); non-finite
 *        values become the strings "nan", "inf", "-inf".
 */
json_object *hps__tool_json_float(float v);

/** @brief JSON number printed with 6 significant digits (rates, seconds). */
json_object *hps__tool_json_double(double v);

/** @brief "12.3 MiB" for a byte count, into buf. */
const char *hps__tool_fmt_bytes(uint64_t bytes, char *buf, size_t len);

/** @brief "2024-05-01 12:00:00 +0000" for a CLOCK_REALTIME ns stamp; "-" for 0. */
const char *hps__tool_fmt_time(uint64_t realtime_ns, char *buf, size_t len);

/**
 * @brief Seconds since a ns stamp of clock (CLOCK_MONOTONIC for heartbeats,
 *        CLOCK_REALTIME for published counters); negative when the stamp is
 *        0 ("never").  A stamp in the future counts as age 0.
 */
double hps__tool_age_clock_s(int clock, uint64_t stamp_ns);

/** @brief hps__tool_age_clock_s(CLOCK_MONOTONIC, monotonic_ns). */
double hps__tool_age_s(uint64_t monotonic_ns);

/** @brief The coordinator that beat last on db, as the workers judge it. */
typedef enum hps__tool_coord {
    HPS__TOOL_COORD_NONE,    /**< none ever beat */
    HPS__TOOL_COORD_GONE,    /**< it left the segment (exited or was killed) */
    HPS__TOOL_COORD_STALLED, /**< attached, heartbeat older than its worker_timeout_ms */
    HPS__TOOL_COORD_ALIVE,   /**< attached and beating */
} hps__tool_coord_t;
/** @brief Judge s's coordinator (s: hps_shmdb_segment_info of db). */
hps__tool_coord_t hps__tool_coord(hps_shmdb_t *db, const hps_segment_info_t *s);

/**
 * @brief A live process of the segment's process table has this pid (its
 *        row's liveness lock is held: true across PID namespaces, where
 *        kill(pid, 0) is not; hps_shmdb_pid_alive()).
 */
bool hps__tool_pid_alive(hps_shmdb_t *db, pid_t pid);

/** @brief "12.3 s ago" or "never" for an age from hps__tool_age_s(). */
const char *hps__tool_fmt_age(double age_s, char *buf, size_t len);

/** @brief "tool", "coordinator", "worker" or "role <n>". */
const char *hps__tool_role_name(hps_proc_role_t role, char *buf, size_t len);

#endif /* HPS_TOOLS_HPS_SHM_H */
