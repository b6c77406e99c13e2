/*
 * coord.h -- hps-coordinator's state and its parts (private to the
 * executable): segment setup, model loading, the miss service.
 */
#ifndef HPS_COORD_H
#define HPS_COORD_H

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
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
    HPS_EXIT_PDB = 5,     /* the persistent database cannot be opened or failed */
    HPS_EXIT_DDB = 6,     /* the distributed database (Redis) could not be opened */
};

/* Miss queue geometry (fixed; docs/architecture.md, "Miss queue"). */
#define HPS_COORD_MISS_SLOTS      64
#define HPS_COORD_MISS_SLAB_BYTES (1u << 20)
#define HPS_COORD_MISS_THREADS    2

/* One embedding table as the coordinator knows it.  Filled by the main
 * thread (load.c: coord_load_models) before coord_serve_start() starts the
 * miss-service threads (pthread_create orders the writes before their
 * reads) and read-only while they run, ddb_warned_s excepted. */
typedef struct coord_table {
    const hps_conf_model_t *model;
    uint32_t index;   /* table index within the model */
    const char *name; /* embedding_table_names[index] */
    uint32_t dim;
    uint32_t vdb_id;      /* id in the segment; set once (see above) */
    hps_pdb_table_t *pdb; /* NULL without a persistent DB; set once (see above) */
    hps_ddb_table_t *ddb; /* NULL without a distributed DB */
    /* serve.c ddb_warn: CLOCK_MONOTONIC second of this table's last Redis
     * failure warning (at most one a second per table); CAS by the miss
     * service threads and the inserter. */
    _Atomic long ddb_warned_s;
} coord_table_t;

/* hps-coordinator's state.  Fields without a guard of their own are
 * written by the main thread only, and those the other threads read (db,
 * pdb, ddb, tables, num_tables, key_bytes, conf) are set before
 * coord_serve_start() / coord_kafka_start() start them and not changed
 * until coord_serve_stop() has joined them. */
typedef struct coord {
    const hps_conf_t *conf;
    hps_shmdb_t *db;      /* main thread writes (segment.c, serve.c coord_prev_adopt); see above */
    hps_shmdb_t *beat_db; /* the segment the heartbeat thread beats on: db once it is open
                           * (main.c start_heartbeat); atomic (release / acquire) */
    hps_pdb_t *pdb;       /* main.c open_pdb, before the segment; closed by shutdown_all */
    hps_ddb_t *ddb;       /* Redis Cluster; NULL when [distributed_db] is disabled, or when a
                           * fallback could not open it (ddb_degraded) */
    uint32_t key_bytes;
    coord_table_t *tables; /* by VDB id (index == vdb_id); main thread fills (load.c) */
    uint32_t num_tables;   /* main thread (load.c), before the miss threads start */
    pthread_t beat_thread; /* heartbeat, from segment open (a reload: from serving
                              segment hold) to shutdown */
    bool beating;          /* beat_thread runs (to join): main thread only */
    int beat_stop;         /* set (atomic, release) by shutdown_all to end the heartbeat thread */
    int lock_fd;           /* the segment name's coordinator lock (segment.c), while locked */
    bool locked;           /* lock_fd holds the lock: main thread only (segment.c) */
    bool staged;           /* db is a new segment not yet published under its name (segment.c) */
    pthread_t miss_threads[HPS_COORD_MISS_THREADS];
    unsigned num_miss_threads;       /* started, to join: main thread only (serve.c) */
    struct coord_inserter *inserter; /* serve.c: [distributed_db] cache_missed_embeddings
                                        writes to Redis, off the answer path; NULL if off */
    atomic_int *stop;                /* main.c's stop flag (set by the signal thread or main) */
    /* kafka.c: the running update consumers (coord_kafka_start .. _stop),
     * read by the miss service (coord_kafka_behind); kafka_mu guards the
     * pointer and keeps what it points to alive while a thread reads it. */
    pthread_mutex_t kafka_mu;
    struct coord_kafka *kafka;
    /* Reload (HPS_RELOAD_ENV): the segment that serves while the new one is
     * built (segment.c keeps it attached; the heartbeat thread beats on it
     * too, so workers stay ready), detached after publishing.  serving_lock
     * guards the pointer between the heartbeat thread and the main thread. */
    hps_shmdb_t *serving;
    pthread_mutex_t serving_lock;
    /* serve.c: the service of the serving segment's misses during a reload
     * (coord_prev_start), or NULL; main thread only.  prev_answering: it
     * runs, or the previous image handed the segment over RELOADING_SERVED
     * (segment.c) and coord_prev_start has not yet decided, so the
     * heartbeat thread leaves the serving segment's pending requests alone
     * (written by the main thread, read by the heartbeat). */
    struct coord_prev *prev;
    atomic_bool prev_answering;
    /* control.c: the model control request this start was made for
     * (HPS_CONTROL_ENV); id 0 = none. */
    hps_ctl_request_t control;
    char *prev_models; /* HPS_PREV_MODELS_ENV: the loaded set before this reload, or NULL */
    /* conftext.c, main thread only: the INI text conf was loaded from (what
     * this image serves), and the text of the configuration that served
     * before this reload (its fallback builds that), or NULL. */
    char *text;
    char *prev_text;
    /* HPS_ADOPT_ENV: a failed reload's fallback, which serves the serving
     * segment it holds again (coord_prev_adopt); main thread only */
    bool adopt;
    /* ddb_wire.c, load.c: this fallback (adopt) could not open the
     * distributed DB (ddb NULL), or restore its rows (ddb kept: its misses
     * and online updates go on trying it), and serves on rather than stop;
     * main thread only */
    bool ddb_degraded;
    /* main.c, main thread only: this failed build hands the serving segment
     * (whose misses it answered, coord_prev_start, or was handed to answer,
     * prev_answering) to its fallback as a reload hands its own:
     * RELOADING_SERVED, requests pending, this process alive to the workers
     * until the fallback attaches (coord_prev_stop,
     * coord_segment_serving_release). */
    bool fallback_handover;
    /* serve.c: serving is a dead coordinator's segment that this restart
     * answers the misses of while it builds (coord_prev_restart); a failed
     * build then just stops (no fallback).  Main thread only. */
    bool serving_restart;
    /* segment.c: the segment this start builds replaces one that workers
     * (attached when the build began) serve from meanwhile (a reload, a
     * restart with initialize_after_startup = true): main.c lets the Kafka
     * consumers catch up before publishing, so the workers never see rows
     * older than those they served.  Main thread only. */
    bool replacing;
    /* main.c, segment.c: this start continues a deployment of this segment
     * name on this host (a segment of the name existed, or the persistent
     * DB held a contents token): only then may its Kafka consumers take the
     * offsets of the groups' names before the segment's name was part of
     * them (kafka.c: legacy_group), which belonged to this host's one
     * coordinator of that time, not to a segment started anew beside it.
     * Main thread only. */
    bool continues;
    bool restart_tried;     /* serve.c: coord_prev_restart decided once; main thread */
    bool pdb_token_renewed; /* load-ident.c: this image renewed the token; main thread */
    bool vdb_from_pdb;      /* load.c: a volatile-DB table took its values from the persistent DB
                               at this start (kafka.c: its consumer starts where the persistent
                               DB's stands); main thread only, before coord_kafka_start() */
    struct coord_ident *idents; /* load.c: every table's file identities, from
                                   coord_validate_models() to coord_load_models() */
    /* cpus.c, main thread only: the CPUs the process may use, saved while its
     * threads are confined to [hps] load_cpu_share of them. */
    cpu_set_t cpus_all;
    bool cpus_confined;
} coord_t;

/* Set in the environment of a coordinator that executes itself again on
 * SIGHUP (main.c): coord_segment_open then builds a new segment beside the
 * serving one even with initialize_after_startup = false. */
#define HPS_RELOAD_ENV "HPS_COORDINATOR_RELOAD"
/* Set beside it (main.c release_segment): the descriptor that holds the
 * reloading coordinator's liveness lock on the serving segment across
 * execve() (hps_shmdb_detach_handover), closed once the new image holds the
 * segment itself (coord_segment_hold_serving). */
#define HPS_HANDOVER_ENV "HPS_COORDINATOR_LIVE_FD"

/* Environment of a coordinator executed again by a reload or a model
 * control request (control.c): the names of the models to load (explicit
 * mode: "a,b", may be empty), the request ("id:op:model"), the loaded set
 * before it (for the fallback), and the fallback itself (re-attach the
 * serving segment after a failed reload). */
#define HPS_MODELS_ENV      "HPS_COORDINATOR_MODELS"
#define HPS_CONTROL_ENV     "HPS_COORDINATOR_CONTROL"
#define HPS_PREV_MODELS_ENV "HPS_COORDINATOR_PREV_MODELS"
#define HPS_ADOPT_ENV       "HPS_COORDINATOR_ADOPT"
/* main.c: how many fallbacks in a row failed themselves (fallback_backoff). */
#define HPS_FALLBACKS_ENV "HPS_COORDINATOR_FALLBACKS"
/* conftext.c: memfds (by descriptor number) with the INI text the next
 * image builds, and the text of the configuration that serves. */
#define HPS_CONF_FD_ENV      "HPS_COORDINATOR_CONF_FD"
#define HPS_PREV_CONF_FD_ENV "HPS_COORDINATOR_PREV_CONF_FD"

/* conftext.c: the configuration this image builds: the text handed over
 * by the previous image (HPS_CONF_FD_ENV), else path's; *ret_text is that
 * text and *ret_prev_text the serving configuration's (HPS_PREV_CONF_FD_ENV,
 * or NULL), both the caller's to free.  The variables and descriptors are
 * gone after.  0, HPS_EXIT_USAGE (a bad file: logged) or HPS_EXIT_RUNTIME
 * (a handed-over text that cannot be read: logged). */
int coord_conf_load(const char *path, hps_conf_t **ret_conf, char **ret_text, char **ret_prev_text);
/* conftext.c: hand text to the next image: a memfd (kept across execve)
 * named in the environment variable env.  false if it could not (logged). */
bool coord_conf_pass(const char *env, const char *text);
/* conftext.c: take back a hand-over not used (a reload refused after
 * coord_conf_pass()): its memfd closed, env unset. */
void coord_conf_unpass(const char *env);

/* control.c: the models this start loads.  Mode none: every model of the
 * INI.  Mode explicit: those named by HPS_MODELS_ENV when set (a reload;
 * names no longer in the INI are dropped with a warning), else those
 * matching [hps] startup_models; the others are removed from conf.  Reads
 * (and clears) the control environment into c.  0 or HPS_EXIT_USAGE. */
int coord_control_init(coord_t *c, hps_conf_t *conf);
/* control.c: take and handle one model control request from the segment.
 * Requests answered at once (refused, nothing to do) return false; a load
 * or unload that needs a new segment sets the environment for the next
 * start and returns true (the caller stops and executes itself again). */
bool coord_control_step(coord_t *c, const char *path);
/* control.c: SIGHUP in explicit mode: the next start keeps the loaded set. */
void coord_control_keep_loaded(const coord_t *c);
/* control.c: before a reloaded coordinator publishes its new segment: the
 * requests still pending on the serving one move to it, and the request it
 * was started for gets its answer. */
void coord_control_before_publish(coord_t *c);
/* control.c: after an unload's new segment is published: the model's
 * tables are dropped from the persistent DB (record first), so their disk
 * space returns; a later load ingests its files again. */
void coord_control_after_publish(coord_t *c);
/* control.c: a reloaded coordinator failed before publishing (ex, its exit
 * status): the request it was started for is answered FAILED on the
 * serving segment with why (or a generic message), and the environment is
 * set for a fallback start that re-attaches the serving segment with the
 * previous loaded set.  Returns true when that fallback should run. */
bool coord_control_failed(coord_t *c, int ex, const char *why);
/* control.c: bytes free in /dev/shm are at least what a new segment beside
 * the serving one needs (its committed bytes now, plus extra_bytes); else
 * false with a message in msg. */
bool coord_control_room(const coord_t *c, uint64_t extra_bytes, char *msg, size_t len);
/* reload-check.c: whether next, the configuration a reload would build, is
 * one the running workers can follow (file header): coord_reload_check for
 * SIGHUP (the segment's name, the loaded set, the served models' key
 * width, and no shape change while a worker of an earlier build is
 * attached; logs the models next drops and the shapes it changes),
 * coord_reload_keys_ok for a model control load (the key width and the
 * shape rule only).
 * Main thread, c->db the serving segment; false with the reason in msg
 * (len bytes).  Nothing is written. */
bool coord_reload_check(const coord_t *c, const hps_conf_t *next, char *msg, size_t len);
bool coord_reload_keys_ok(const coord_t *c, const hps_conf_t *next, char *msg, size_t len);
/* reload-check.c: a restart replaces serving, the segment workers serve
 * from, with c->conf: warn (naming the pids) where a worker of an earlier
 * build is attached and a model's shape or key width changes (that worker
 * fails the model's requests until restarted).  Nothing is refused: the
 * configuration that served is gone.  Main thread. */
void coord_restart_check(const coord_t *c, hps_shmdb_t *serving);

/* load-ident.c: the persistent DB's metadata entry that records which files
 * table <model>.<table> was ingested from: "loaded.hps_et.<model>.<table>"
 * (buf of len bytes; names of at most HPS_SHMDB_NAME_MAX bytes fit in
 * 2 * HPS_SHMDB_NAME_MAX + 32). */
void coord_ident_name(const char *model, const char *table, char *buf, size_t len);
/* load-ident.c: the persistent DB's contents token (metadata entry
 * "contents"): a random word renewed (synced) before a build first replaces
 * any table's rows there (coord_pdb_token_renew: 0 or HPS_EXIT_PDB,
 * logged), and recorded in each segment built (hps_shmdb_set_pdb_token).
 * A segment whose token equals the persistent DB's was built from the rows
 * the persistent DB holds (online updates aside, which both get).
 * coord_pdb_token: 0 without a persistent DB or a token; coord_pdb_token_of
 * likewise for another handle (a previous persistent DB, serve.c). */
uint64_t coord_pdb_token(coord_t *c);
uint64_t coord_pdb_token_of(hps_pdb_t *pdb);
int coord_pdb_token_renew(coord_t *c);
/* load-ident.c: write the persistent DB's token into c->db, once its
 * tables are built (a first token for a persistent DB without one, unless
 * read-only); no-op without a persistent DB. */
void coord_pdb_token_record(coord_t *c);

/* cpus.c: workers serve from a segment while this coordinator loads: every
 * thread of the process (and those it starts later, which inherit it) runs
 * on [hps] load_cpu_share of the CPUs it may use, the highest-numbered, at
 * least one; logged.  No-op when that is all of them or already confined.
 * Main thread. */
void coord_cpus_confine(coord_t *c);
/* cpus.c: every thread back on all the CPUs saved by coord_cpus_confine;
 * no-op when not confined.  Main thread. */
void coord_cpus_restore(coord_t *c);

/* segment.c: take the segment name's coordinator lock (one coordinator per
 * segment) unless held already, before anything is opened or created: a
 * second coordinator stops here, leaving no RocksDB directory behind.  0 or
 * HPS_EXIT_SEGMENT (logged, naming the holder's pid). */
int coord_segment_lock(coord_t *c);
/* segment.c: create or re-attach /dev/shm/hps.<shared_memory_name>. */
int coord_segment_open(coord_t *c, bool *ret_reused);
/* segment.c: a reload (HPS_RELOAD_ENV, not a fallback): take the name's lock
 * and attach the serving segment at once, marked RELOADING, as c->serving,
 * before RocksDB is opened and the model files checked, so that the workers
 * stay ready through the whole reload (with the heartbeat thread started by
 * the caller).  0 (nothing to hold is not an error: coord_segment_open
 * decides) or HPS_EXIT_SEGMENT (logged: another coordinator holds the name). */
int coord_segment_hold_serving(coord_t *c);
/* segment.c: a start with initialize_after_startup = true and a persistent
 * DB, right after RocksDB opened (before the model files are checked):
 * the segment a stopped or dead coordinator left is taken over when the
 * persistent DB still holds its rows (coord_prev_restart), so its workers
 * are ready again for the whole build.  0 (nothing taken over is not an
 * error: coord_segment_open decides) or HPS_EXIT_SEGMENT (logged: a live
 * coordinator on it). */
int coord_segment_take_over(coord_t *c);
/* segment.c: a new segment built beside the serving one (coord_segment_open
 * creates new segments staged) becomes the one under its name, in one
 * atomic rename; workers re-attach to it.  0 or HPS_EXIT_SEGMENT (logged);
 * a no-op for a re-attached or already published segment. */
int coord_segment_publish(coord_t *c);
/* segment.c: detach the segment that served during a reload (c->serving);
 * no-op without one.  After publishing, or when the reload failed. */
void coord_segment_serving_release(coord_t *c);
/* segment.c: the pid a coordinator wrote into the segment name's lock file
 * (/dev/shm/.hps.<name>.lock) when it took the lock; 0 if none or unreadable.
 * Informative only (a pid of another PID namespace names nobody here). */
pid_t coord_segment_holder(const coord_t *c);
/* segment.c: remove and release the segment name's coordinator lock (a clean
 * exit, after the segment is detached); no-op when not locked. */
void coord_segment_unlock(coord_t *c);

/* load-check.c: validate every model's files (a FIFO, a directory, a short
 * file... refuses the start-up with HPS_EXIT_MODEL and a message naming the file)
 * and take their identities into c->idents.  Called
 * before the segment is created, so a bad model writes nothing. */
int coord_validate_models(coord_t *c);
/* load.c: create the tables and load every model (PDB, then VDB); after
 * coord_validate_models().  Frees c->idents. */
int coord_load_models(coord_t *c, bool vdb_reused);
/* load-ident.c: whether db, a segment initialize_after_startup = false would
 * keep, holds rows this start does not serve: the persistent DB's rows
 * were replaced since it was built (its contents token differs), a model's
 * version differs, or a table's files differ from those the persistent DB
 * ingested (this start re-ingests them).  Its rows would then mix with the
 * persistent DB's in one answer.  why: the reason, when true.  After
 * coord_validate_models(). */
bool coord_kept_segment_stale(coord_t *c, hps_shmdb_t *db, char *why, size_t len);
/* load-ident.c: whether the persistent DB's file system has room for the
 * tables a build of next (its idents: after coord_validate_models) would
 * ingest anew, beside those that serve (held until the switch), as c's
 * records tell; else false with the reason in msg.  True without a
 * persistent DB that ingests, or when it cannot tell.  next == c: a start
 * (main.c), checked before its segment is built. */
bool coord_pdb_room(const coord_t *c, const coord_t *next, char *msg, size_t len);
/* Free bytes a build needs on the persistent DB's disk once its tables are
 * staged, to replace the serving rows with them (RocksDB's logs and
 * metadata; load-stage.c coord_load_pdb_commit): counted by coord_pdb_room
 * too. */
#define HPS_COORD_PDB_COMMIT_ROOM (64ULL << 20)
/* load-ident.c: free bytes (*ret) of the file system of path, or of its
 * nearest existing parent (RocksDB creates the directory); false when none
 * can be told. */
bool coord_pdb_avail(const char *path, uint64_t *ret);

/* ddb_wire.c: the distributed DB, main thread only.  coord_ddb_open()
 * opens it when [distributed_db] type = redis_cluster (0; a no-op otherwise
 * or when already open; HPS_EXIT_DDB with a logged message on failure);
 * coord_ddb_table() sets ct->ddb (NULL without a distributed DB; 0, or
 * HPS_EXIT_DDB, logged, for a table it cannot register or partitions
 * beyond num_partitions); coord_ddb_check_rows() refuses rows that this
 * configuration would not find (for rows that are kept: load.c; 0 or
 * HPS_EXIT_DDB, logged); coord_ddb_rows_fit() is its test without a word
 * (the same sample; true also when the sample cannot be read);
 * coord_ddb_close() closes it (after the miss service stopped; flushes the
 * queued access updates; no-op without one). */
int coord_ddb_open(coord_t *c);
int coord_ddb_table(coord_t *c, coord_table_t *ct);
int coord_ddb_check_rows(coord_t *c, coord_table_t *ct);
bool coord_ddb_rows_fit(coord_t *c, coord_table_t *ct);
/* ddb_wire.c: the nonzero 64-bit hash (FNV-1a) of an identity string: a
 * table's distributed-DB record, or its files' identity, as a segment keeps
 * them per table (hps_shmdb_table_set_ddb_ident, _set_files_ident).  Pure. */
uint64_t coord_ident_hash(const char *ident);
void coord_ddb_close(coord_t *c);

/* ddb_wire.c: one loading call's wait for the Redis Cluster
 * ([distributed_db] failover_wait_ms), on the caller's stack; zeroed before
 * the call's first try. */
typedef struct coord_ddb_wait {
    uint64_t until_ms; /* CLOCK_MONOTONIC ms when waiting ends; 0 before a failure */
    bool told;         /* the wait was logged */
} coord_ddb_wait_t;
/* ddb_wire.c: after each try of a distributed-DB call of loading, with its
 * result rc (message err; what names the table for the log): true when it
 * should be tried again, having slept 250 ms: the failure says a node is
 * unreachable or the cluster is down (a refused or lost connection, a
 * timeout, CLUSTERDOWN or TRYAGAIN: a master failing over), and
 * failover_wait_ms has not passed since the first of its failures in a
 * row, nor did a SIGTERM come.  Any other result (0, HPS_ENOTFOUND, an error reply of
 * Redis itself: WRONGTYPE, OOM, ERR ...) ends the call.  Logs the wait once
 * per call, and its end.  Main thread (loading):
 *     coord_ddb_wait_t w = {0};
 *     while (coord_ddb_wait(c, &w, rc = hps_ddb_...(...), what, err))
 *         ; */
bool coord_ddb_wait(coord_t *c, coord_ddb_wait_t *w, hps_err_t rc, const char *what,
                    const char *err);
/* ddb_wire.c: copy the distributed DB's counters (hps_ddb_stats) into the
 * segment for the workers' /metrics (nv_hps_distributed_db_*); no-op
 * without a distributed DB.  main.c calls it about once a second while
 * serving, and once when the miss service has stopped.  One thread. */
void coord_ddb_publish(coord_t *c);

/* serve.c: miss-queue service threads; cache_missed_embeddings inserts run
 * after each answer is published (see serve.c).  coord_serve_start():
 * the Redis inserter (when on) and HPS_COORD_MISS_THREADS threads serving
 * c->db's miss queue; 0 or HPS_EXIT_RUNTIME (logged; what started is
 * stopped by coord_serve_stop).  coord_serve_stop() stops coord_prev_start's
 * service, wakes and joins the miss threads, then drains the Redis
 * inserts; a no-op for what was not started.  Main thread only. */
int coord_serve_start(coord_t *c);
void coord_serve_stop(coord_t *c);
/* serve.c: during a reload, answer the serving segment's misses from the
 * distributed DB (each table until coord_prev_ddb_replacing) and from the
 * persistent DB's column families of the serving version, held across the
 * build's drops (see serve.c); marks the segment RELOADING_SERVED (or,
 * not starting, RELOADING, dropping what was asked since the hand-over).  After
 * open_pdb and coord_ddb_open, before anything is dropped; a no-op without
 * a serving segment, or with neither a distributed DB nor a persistent DB
 * of the serving version (the serving configuration used another one:
 * another path, and not the contents token of the serving segment).
 * Always 0: without it the serving segment's misses get their defaults, as
 * before.  coord_prev_stop() (no-op when not running; coord_serve_stop()
 * and coord_segment_serving_release() call it) marks it RELOADING again,
 * stops the threads and releases the holds. */
int coord_prev_start(coord_t *c);
void coord_prev_stop(coord_t *c);
/* serve.c: the build is about to drop or rewrite the Redis rows of table
 * <table> of model <model>: the serving segment's misses of that table
 * are no longer answered from Redis (nor with what a lookup in flight
 * read).  A no-op when coord_prev_start's service does not run.  Main
 * thread. */
void coord_prev_ddb_replacing(coord_t *c, const char *model, const char *table);
/* serve.c: a failed build's fallback (c->adopt) takes the serving segment
 * it held as its own (c->db; c->serving NULL): the answering stops, its
 * requests stay pending and the segment RELOADING_SERVED for the miss
 * service this image starts once it serves. */
void coord_prev_adopt(coord_t *c);
/* serve.c: a restart found db, the segment a dead coordinator served (and
 * initialize_after_startup = true): when the persistent DB still holds the
 * rows db was built from (hps_shmdb_pdb_token(db) equals the persistent
 * DB's token), or a distributed DB is open, db becomes c->serving
 * (serving_restart), this process its coordinator (beaten on: its workers
 * are ready again), and its misses are answered as during a reload (from
 * Redis only where the persistent DB holds other rows); true.  Else false
 * (logged), nothing held: the caller detaches db. */
bool coord_prev_restart(coord_t *c, hps_shmdb_t *db);
/* serve.c: after publishing, keep answering the serving segment until its
 * workers have moved to the new one (none attached but this process), at
 * most 3 s.  No-op when not running. */
void coord_prev_drain(coord_t *c);

#endif
