/*
 * worker.h -- hps-worker's state (private to the executable): the attached
 * segment, the models it serves, the CPU lookup pipeline and its counters.
 */
#ifndef HPS_WORKER_H
#define HPS_WORKER_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "hps/conf.h"
#include "hps/kserve.h"
#include "hps/shmdb.h"

/* Exit codes of hps-worker. */
enum {
    HPS_WEXIT_OK = 0,
    HPS_WEXIT_RUNTIME = 1,
    HPS_WEXIT_USAGE = 2,
    HPS_WEXIT_HTTP = 3, /* the HTTP or metrics port could not be opened */
};

/* Per-model counters, exported as nv_hps_* metrics. */
typedef struct worker_counters {
    _Atomic uint64_t lookup_keys;  /* keys looked up */
    _Atomic uint64_t vdb_hits;     /* found in the volatile DB (shared memory) */
    _Atomic uint64_t lower_hits;   /* found below it, through the coordinator */
    _Atomic uint64_t default_keys; /* answered with the table's default value */
    _Atomic uint64_t miss_busy;    /* miss-queue requests refused (queue full) */
    _Atomic uint64_t miss_timeout; /* miss-queue requests past miss_timeout_ms */
    _Atomic uint64_t lookup_ns;    /* time in the lookup path */
} worker_counters_t;

typedef struct worker_model {
    const hps_conf_model_t *conf;
    uint32_t *dims;    /* (T) */
    float *defaults;   /* (T) */
    uint32_t *vdb_ids; /* (T) table ids in the segment */
    bool resolved;     /* every table found in the segment */
    worker_counters_t ctr;
} worker_model_t;

typedef struct worker {
    const hps_conf_t *conf;
    int device;
    int instance;
    uint32_t key_bytes;
    /* The segment; swapped by the maintenance thread when a new coordinator
     * recreates it.  Lookups hold seg_lock for reading. */
    pthread_rwlock_t seg_lock;
    hps_shmdb_t *db;
    dev_t seg_dev;
    ino_t seg_ino;
    _Atomic bool coord_alive;
    _Atomic bool resolved;
    worker_model_t *models;
    size_t num_models;
    pthread_t maint;
    volatile sig_atomic_t *stop;
    struct worker_gpu *gpu; /* GPU mode (gpu.h); NULL in CPU mode */
} worker_t;

/* pipeline.c */
int worker_init_models(worker_t *w);
void worker_free_models(worker_t *w);
void worker_backend(worker_t *w, hps_kserve_backend_t *ret);

/* attach.c */
int worker_maint_start(worker_t *w);
void worker_maint_stop(worker_t *w);

#include "gpu.h" /* GPU mode: worker_gpu_* (inline no-ops without CUDA) */

#endif
