/*
 * coord.h -- hps-coordinator's state and its parts (private to the
 * executable): segment setup, model loading, the miss service.
 */
#ifndef HPS_COORD_H
#define HPS_COORD_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "hps/conf.h"
#include "hps/ddb.h"
#include "hps/pdb.h"
#include "hps/shmdb.h"

/* Exit codes of hps-coordinator (documented in --help and the README). */
enum {
    HPS_EXIT_OK = 0,      /* clean shutdown */
    HPS_EXIT_RUNTIME = 1, /* failure while running */
    HPS_EXIT_USAGE = 2,   /* bad command line or configuration */
    HPS_EXIT_SEGMENT = 3, /* shared memory: another live coordinator, incompatible segment */
    HPS_EXIT_MODEL = 4,   /* a model was refused (bad files) or could not be loaded */
    HPS_EXIT_PDB = 5,     /* the persistent database could not be opened */
    HPS_EXIT_DDB = 6,     /* the distributed database (Redis) could not be opened */
};

/* Miss queue geometry (fixed; see DESIGN.md "Miss queue invariants"). */
#define HPS_COORD_MISS_SLOTS      64
#define HPS_COORD_MISS_SLAB_BYTES (1u << 20)
#define HPS_COORD_MISS_THREADS    2

/* One embedding table as the coordinator knows it. */
typedef struct coord_table {
    const hps_conf_model_t *model;
    uint32_t index;   /* table index within the model */
    const char *name; /* embedding_table_names[index] */
    uint32_t dim;
    uint32_t vdb_id;      /* id in the segment */
    hps_pdb_table_t *pdb; /* NULL without a persistent DB */
    hps_ddb_table_t *ddb; /* NULL without a distributed DB */
} coord_table_t;

typedef struct coord {
    const hps_conf_t *conf;
    hps_shmdb_t *db;
    hps_pdb_t *pdb;
    hps_ddb_t *ddb; /* Redis Cluster; NULL when [distributed_db] is disabled */
    uint32_t key_bytes;
    coord_table_t *tables; /* by VDB id (index == vdb_id) */
    uint32_t num_tables;
    pthread_t beat_thread; /* heartbeat, from segment open to shutdown */
    bool beating;
    int lock_fd; /* the segment name's coordinator lock (segment.c), while locked */
    bool locked;
    bool staged; /* db is a new segment not yet published under its name (segment.c) */
    pthread_t miss_threads[HPS_COORD_MISS_THREADS];
    unsigned num_miss_threads;
    struct coord_inserter *inserter; /* serve.c: [distributed_db] cache_missed_embeddings
                                        writes to Redis, off the answer path; NULL if off */
    volatile sig_atomic_t *stop;
    char *idents; /* load.c: every table's file identity, from coord_validate_models() to
                     coord_load_models(); NULL without a persistent DB */
} coord_t;

/* Set in the environment of a coordinator that executes itself again on
 * SIGHUP (main.c): coord_segment_open then builds a new segment beside the
 * serving one even with initialize_after_startup = false. */
#define HPS_RELOAD_ENV "HPS_COORDINATOR_RELOAD"

/* segment.c: create or re-attach /dev/shm/hps.<shared_memory_name>. */
int coord_segment_open(coord_t *c, bool *ret_reused);
/* segment.c: a new segment built beside the serving one (coord_segment_open
 * creates new segments staged) becomes the one under its name, in one
 * atomic rename; workers re-attach to it.  0 or HPS_EXIT_SEGMENT (logged);
 * a no-op for a re-attached or already published segment. */
int coord_segment_publish(coord_t *c);
/* segment.c: the pid a coordinator wrote into the segment name's lock file
 * (/dev/shm/.hps.<name>.lock) when it took the lock; 0 if none or unreadable.
 * Informative only (a pid of another PID namespace names nobody here). */
pid_t coord_segment_holder(const coord_t *c);
/* segment.c: remove and release the segment name's coordinator lock (a clean
 * exit, after the segment is detached); no-op when not locked. */
void coord_segment_unlock(coord_t *c);

/* load.c: validate every model's files (a FIFO, a directory, a short file...
 * refuses the start-up with HPS_EXIT_MODEL and a message naming the file)
 * and, with a persistent DB, take their identities into c->idents.  Called
 * before the segment is created, so a bad model writes nothing. */
int coord_validate_models(coord_t *c);
/* load.c: create the tables and load every model (PDB, then VDB); after
 * coord_validate_models().  Frees c->idents. */
int coord_load_models(coord_t *c, bool vdb_reused);

/* ddb_wire.c: the distributed DB.  coord_ddb_open() opens it when
 * [distributed_db] type = redis_cluster (no-op otherwise or when already
 * open; HPS_EXIT_DDB with a logged message on failure); coord_ddb_table()
 * sets ct->ddb; coord_ddb_close() closes it (after the miss service stopped). */
int coord_ddb_open(coord_t *c);
int coord_ddb_table(coord_t *c, coord_table_t *ct);
void coord_ddb_close(coord_t *c);

/* serve.c: miss-queue service threads; cache_missed_embeddings inserts run
 * after each answer is published (see serve.c).  coord_serve_stop() drains
 * the Redis inserts. */
int coord_serve_start(coord_t *c);
void coord_serve_stop(coord_t *c);

#endif
