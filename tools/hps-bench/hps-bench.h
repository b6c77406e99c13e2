/*
 * hps-bench.h -- internal declarations of hps-bench, the end-to-end load
 * generator: KServe v2 HTTP (binary data extension) lookups against a
 * running hps-worker, beside the same lookups against a local redis-server
 * holding the model in HugeCTR's Redis layout.
 *
 * Modules:
 *   model.c   the model (from its INI), key sets, request files, exact checks
 *   http.c    a minimal HTTP/1.1 keep-alive client for POST .../infer
 *   redis.c   redis-server start/stop, loading HugeCTR's layout, lookups
 *   run.c     the measurement harness (threads, latencies, CPU time)
 *   main.c    options, orchestration and the report
 */
#ifndef HPS_BENCH_H
#define HPS_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "hps/conf.h"

#define HB_ERR_LEN 256
/** Versions tried, after the INI's, to find the one of a table's files. */
#define HB_VERSION_SCAN 1024

/* ---- Model --------------------------------------------------------------- */

/** Open-addressing set of the keys of one table (membership for checks). */
typedef struct hb_keyset {
    int64_t *slots; /* capacity a power of two; HB_EMPTY marks a free slot */
    uint64_t mask;
    bool has_empty; /* the key equal to HB_EMPTY itself is present */
    uint64_t count; /* distinct keys */
} hb_keyset_t;

typedef struct hb_table {
    const char *name;    /* embedding_table_names[t] */
    const char *dir;     /* sparse_files[t] */
    uint32_t dim;        /* embedding_vecsize_per_table[t] */
    float default_value; /* default_value_for_each_table[t] */
    uint64_t rows;       /* rows of the files */
    hb_keyset_t keys;    /* filled by hb_model_load_keys() */
    uint32_t version;    /* hps-gen version of the vectors (hps_gen_vector_v): the one row 0
                          * of the files matches, set by hb_model_load_keys(); else the INI's */
    bool version_found;  /* row 0 matched hps_gen_vector_v of `version` */
} hb_table_t;

typedef struct hb_model {
    hps_conf_t *conf;
    const char *name;
    uint32_t key_bytes; /* 8 (supportlonglong) or 4 */
    uint32_t version;   /* [model.<name>] version */
    uint32_t num_tables;
    hb_table_t *tables;
    uint64_t rows;      /* all tables */
    uint64_t dim_sum;   /* floats per sample (one key per table) */
    uint64_t raw_bytes; /* sum of rows * (8 + 4 * dim): the key + vector bytes */
} hb_model_t;

int hb_model_open(const char *ini, const char *model, hb_model_t *m, char *err, size_t n);
/**
 * Read every table's key file into its key set, and set the table's
 * version: the hps-gen model version whose vector row 0 of its files holds
 * (the INI's version tried first, then 1 .. HB_VERSION_SCAN), so that the
 * checks expect what the files hold even where the INI's `version` differs
 * from the --model-version the files were written with.
 */
int hb_model_load_keys(hb_model_t *m, char *err, size_t n);
bool hb_keyset_has(const hb_keyset_t *s, int64_t key);
void hb_keyset_add(hb_keyset_t *s, int64_t key);
int hb_keyset_init(hb_keyset_t *s, uint64_t expected);
void hb_model_close(hb_model_t *m);

/** A request file of `hps-gen requests`, mapped read-only. */
typedef struct hb_reqfile {
    const char *path;
    void *map;
    size_t map_len;
    uint32_t T, B;
    uint64_t C;
    const int64_t *keys; /* C x T x B, table-major per request */
} hb_reqfile_t;

int hb_reqfile_open(const char *path, hb_reqfile_t *rf, char *err, size_t n);
void hb_reqfile_close(hb_reqfile_t *rf);
static inline const int64_t *hb_req_keys(const hb_reqfile_t *rf, uint64_t i)
{
    return rf->keys + (i % rf->C) * (uint64_t)rf->T * rf->B;
}

/** Result of checking responses against hps_gen_vector_v / the default value. */
typedef struct hb_check {
    uint64_t responses;
    uint64_t rows;         /* rows compared */
    uint64_t rows_vector;  /* key in the model, row == hps_gen_vector_v: exact */
    uint64_t rows_default; /* key not in the model, row == default: exact */
    uint64_t rows_missed;  /* key in the model but the row is the default value */
    uint64_t rows_wrong;   /* anything else */
    char first_bad[HB_ERR_LEN];
} hb_check_t;

/**
 * Check one response: out holds B * dim_sum float32 (possibly unaligned),
 * table blocks in table order, rows in input order.
 */
void hb_check_response(const hb_model_t *m, const int64_t *keys, uint32_t B, const void *out,
                       float *scratch, hb_check_t *c);

/* ---- Clients (HTTP and Redis) ------------------------------------------- */

typedef struct hb_client {
    const char *name;
    /** Open the connection (a thread's private state) of thread tid; NULL with a message on
     * failure. */
    void *(*open)(void *ctx, unsigned tid, char *err, size_t n);
    void (*close)(void *conn);
    /**
     * One request: send keys (T*B, table-major), wait for the whole answer.
     * On success returns 0 and, if ret_out is not NULL, points it at the
     * B * dim_sum output floats (valid until the next call; maybe unaligned).
     * On failure returns -1 with a message; the connection stays usable
     * (it reconnects itself if needed).
     */
    int (*request)(void *conn, const int64_t *keys, const void **ret_out, char *err, size_t n);
    void *ctx;
} hb_client_t;

/* http.c */
typedef struct hb_http_target {
    char host[128];
    int port;
    const char *model;
    const hb_model_t *m;
    const hb_reqfile_t *rf; /* set per request file before open() */
} hb_http_target_t;

int hb_http_parse_url(const char *url, hb_http_target_t *t, char *err, size_t n);
extern const hb_client_t hb_http_client;
/** GET path; returns the HTTP status (or -1 when no answer). */
int hb_http_get_status(const hb_http_target_t *t, const char *path, char *body, size_t body_len);

/* redis.c */
typedef struct hb_redis {
    pid_t pid;
    int port;
    char version[32];
    unsigned partitions;
    const hb_model_t *m;
    const hb_reqfile_t *rf; /* set per request file before open() */
    /* filled by hb_redis_load */
    uint64_t rows_loaded;
    double load_s;
    uint64_t used_memory;
} hb_redis_t;

int hb_redis_start(hb_redis_t *r, char *err, size_t n);
void hb_redis_stop(hb_redis_t *r);
int hb_redis_load(hb_redis_t *r, char *err, size_t n);
extern const hb_client_t hb_redis_client;

/* ---- Measurement (run.c) ------------------------------------------------- */

typedef struct hb_run_opts {
    unsigned concurrency;
    double warmup_s;
    double duration_s; /* used when count == 0 */
    uint64_t count;    /* requests in total (all threads), or 0 */
    pid_t server_pid;  /* for server CPU time, or 0 */
} hb_run_opts_t;

typedef struct hb_result {
    bool done;
    uint64_t requests; /* successful, timed */
    uint64_t errors;   /* failed, timed */
    double wall_s;     /* timed window */
    double p50_ms, p90_ms, p99_ms, max_ms, mean_ms;
    double client_cpu_s; /* this process, during the window */
    double server_cpu_s; /* server process, during the window; < 0 if unknown */
    char first_error[HB_ERR_LEN];
} hb_result_t;

int hb_run(const hb_client_t *cl, const hb_reqfile_t *rf, const hb_run_opts_t *o, hb_result_t *r,
           char *err, size_t n);
/** Send N requests on one connection and check every response. */
int hb_verify(const hb_client_t *cl, const hb_model_t *m, const hb_reqfile_t *rf, uint64_t count,
              hb_check_t *c, char *err, size_t n);

double hb_now_s(void);
double hb_proc_cpu_s(pid_t pid); /* utime + stime of a process; < 0 if unknown */

#endif /* HPS_BENCH_H */
