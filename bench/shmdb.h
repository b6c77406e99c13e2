/*
 * shmdb.h -- what the files of bench-shmdb share (bench/shmdb*.c; private
 * to this benchmark): the options and workload every file reads, the
 * measurement harness's types and calls, and what the reader process and
 * the Redis baseline hand to the report.
 *
 *   shmdb.c         options, workload, measuring loop, checks, floor, report, main
 *   shmdb_reader.c  the shmdb segments (written by this process) and the forked reader
 *   shmdb_redis.c   the Redis baseline: redis-server start/stop, load, batches
 *
 * Functions and globals shared between the files are named bshm_*; all else
 * stays static in its file.
 */
#ifndef HPS_BENCH_SHMDB_H
#define HPS_BENCH_SHMDB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "hps_build_config.h"
#include "hps/dtype.h"
#include "hps/shmdb.h"

#define MAX_DIMS    8
#define MAX_THREADS 8
#define MODEL_NAME  "bench"
#define LOAD_CHUNK  65536

/* ------------------------------------------------------------------------ */
/* Options and workload (shmdb.c)                                            */
/* ------------------------------------------------------------------------ */

typedef struct options {
    uint64_t rows;
    unsigned dims[MAX_DIMS];
    unsigned ndims;
    unsigned threads[MAX_THREADS];
    unsigned nthreads;
    double seconds;
    double warmup;
    unsigned reps;
    unsigned batch;
    unsigned nbatches;
    unsigned partitions;
    hps_dtype_t types[HPS_DTYPE_COUNT]; /* storage types measured per dim */
    unsigned ntypes;
    bool quick;
} options_t;

/** Keys and query stream, shared by every dim (vectors depend on the dim). */
typedef struct workload {
    uint64_t rows;
    int64_t *keys;  /* (rows) distinct loaded keys */
    unsigned batch; /* keys per batch */
    unsigned nb;    /* precomputed batches */
    int64_t *qkeys; /* (nb * batch) query keys */
    uint32_t *qidx; /* (nb * batch) row index of each query key */
} workload_t;

extern options_t bshm_opt; /* parse_args(), then read only */
extern workload_t bshm_wl; /* workload_init(), then read only */

/* Cleanup state, also used by the SIGINT/SIGTERM handler (cleanup() in shmdb.c). */
extern char bshm_seg_path[256];        /* the segment in /dev/shm while it exists */
extern volatile pid_t bshm_redis_pid;  /* redis-server while it runs */
extern volatile pid_t bshm_reader_pid; /* the reader process while it runs */

/* ------------------------------------------------------------------------ */
/* Measurement harness (shmdb.c)                                             */
/* ------------------------------------------------------------------------ */

/** What a lookup writes per row: dim floats (decoded), or the row as stored in dtype. */
typedef struct form {
    hps_dtype_t dtype;
    bool stored;
} form_t;

/** Look up batch b into out (batch rows of the context's form) and found; return hits or < 0. */
typedef int (*batch_fn)(void *ctx, unsigned tid, size_t b, void *out, uint8_t *found);

typedef struct run_result {
    double mkeys;     /* million keys per second, all threads together (best run) */
    double cpu_share; /* best run: thread CPU time / wall time, lowest of its threads */
    uint64_t batches; /* batches timed, all runs */
    uint64_t misses;  /* keys reported missing during the timed runs */
    int err;          /* first error of a batch call, 0 if none */
} run_result_t;

typedef struct check_result {
    uint64_t keys;       /* keys checked */
    uint64_t missing;    /* of them reported missing */
    uint64_t wrong;      /* of them found with a wrong vector */
    uint64_t sum;        /* checksum of the sample batches' outputs */
    uint64_t sum_expect; /* checksum of the expected outputs */
    int err;
} check_result_t;

size_t bshm_out_row_max(unsigned dim);
run_result_t bshm_measure(batch_fn fn, void *ctx, unsigned dim, unsigned nthreads, bool gate);
void bshm_check_batch(const int64_t *keys, unsigned n, unsigned dim, form_t f, const void *out,
                      const uint8_t *found, void *exp, void *scratch, check_result_t *cr);
check_result_t bshm_check_sample(batch_fn fn, void *ctx, unsigned dim, form_t f);

/* ------------------------------------------------------------------------ */
/* shmdb: writer (this process) and reader (forked child), shmdb_reader.c    */
/* ------------------------------------------------------------------------ */

typedef struct reader_reply {
    int err;                                      /* 0, or an hps_err_t of attach/find */
    char what[64];                                /* the call that failed */
    pid_t pid;                                    /* the reader's pid */
    uint64_t rows_seen;                           /* hps_shmdb_size from the reader */
    uint64_t full_keys, full_missing, full_wrong; /* every loaded key, once */
    check_result_t sample;
    check_result_t sample_stored;      /* compact types: hps_shmdb_lookup_stored */
    run_result_t clients[MAX_THREADS]; /* [i]: threads[i] threads, one handle */
    run_result_t split[MAX_THREADS];   /* [i]: 1 thread, num_threads = threads[i] (fp32) */
    run_result_t stored[MAX_THREADS];  /* [i]: as clients, stored rows (compact types) */
} reader_reply_t;

typedef struct reader {
    pid_t pid;
    int cmd_fd;
    int reply_fd;
} reader_t;

typedef struct shm_load {
    char segment[HPS_SHMDB_SEGMENT_NAME_MAX + 1];
    char table[HPS_SHMDB_NAME_MAX + 1];
    hps_dtype_t dtype;
    double load_s;
    uint64_t inserted;
    hps_table_info_t ti;
    hps_segment_info_t si;
    double bytes_per_slot;
} shm_load_t;

reader_t bshm_reader_start(void);
void bshm_reader_stop(reader_t *rd);
reader_reply_t bshm_reader_run(reader_t *rd, unsigned dim, const shm_load_t *sl);
hps_shmdb_t *bshm_shm_load(unsigned dim, const float *flat, shm_load_t *sl);
void bshm_shm_drop(hps_shmdb_t *db, const shm_load_t *sl);

/* ------------------------------------------------------------------------ */
/* Redis (shmdb_redis.c)                                                      */
/* ------------------------------------------------------------------------ */

typedef struct redis_srv {
    bool up;
    char why[128]; /* why not up */
    int port;
    char version[32];
} redis_srv_t;

typedef struct redis_load {
    bool done;
    double load_s;
    uint64_t rows;      /* sum of HLEN after loading */
    uint64_t mem_bytes; /* INFO memory used_memory after loading */
    uint64_t mem_base;  /* used_memory before loading */
} redis_load_t;

/** What one table measured (shmdb.c's per-dimension driver); bshm_redis_run() fills redis. */
typedef struct dim_results {
    reader_reply_t rp;
    run_result_t floor[MAX_THREADS];
    run_result_t redis[MAX_THREADS];
    check_result_t floor_check;
    check_result_t redis_check;
    bool have_redis;
} dim_results_t;

redis_srv_t bshm_redis_start(void);
void bshm_redis_stop(redis_srv_t *rs);
#if HPS_HAVE_REDIS
void bshm_redis_run(const redis_srv_t *rs, unsigned dim, const float *flat, dim_results_t *d,
                    redis_load_t *rl);
#endif

#endif /* HPS_BENCH_SHMDB_H */
