/*
 * shmdb.h -- the shared-memory volatile database (VDB).
 *
 * One POSIX shared-memory object, /dev/shm/hps.<name>, holds every embedding
 * table of the host: HugeCTR's multi_process_hash_map, rebuilt for lock-free
 * reads across processes.  The coordinator creates the segment and is its only
 * writer in production; workers and tools attach and read.  Nothing in the
 * segment is a pointer: every reference is an offset, bounds-checked before it
 * is followed.
 *
 * Tables.  A table is (model, table name, dimension, key width, default
 * value).  Its rows are split over num_partitions partitions by HugeCTR's
 * rule partition = rrxmrrxmsx_0((uint64)key) % num_partitions.  Each
 * partition is an open-addressing hash table of 64-byte buckets of seven
 * slots (key array) beside a dense value array: a row costs its stored
 * bytes (hps_dtype_row_bytes() of the table's storage type, rounded up to a
 * multiple of 4) plus about 9 bytes of key and bucket header, divided by the
 * load factor (at most 0.92).
 *
 * Storage types.  A table stores its rows as fp32 (the default), fp16, bf16
 * or int8 (include/hps/dtype.h), fixed at creation.  The API speaks fp32
 * only: upserts encode each row once, every read (lookup, iterate) decodes
 * it, with exactly the conversions of hps_dtype_encode()/hps_dtype_decode(),
 * so a row read back equals hps_dtype_decode(hps_dtype_encode(row)) bit for
 * bit.
 *
 * Concurrency.
 *  - Readers (hps_shmdb_lookup, hps_shmdb_iterate, hps_shmdb_size) take no
 *    lock and never wait for a writer.  Each bucket carries a version word,
 *    odd while a writer changes it; a reader copies the key and row, then
 *    re-reads the version and retries on a change.  After a bounded number of
 *    retries the key is reported missing (the layer below answers).
 *  - Writers (upsert, erase, clear, table create) take the partition's
 *    process-shared robust mutex.  When its holder died (EOWNERDEAD) the next
 *    writer repairs the partition: rows in buckets left odd are dropped (the
 *    VDB is a cache), counts and probe counters are rebuilt, every version is
 *    made even, and the repair is counted in the segment header.
 *  - An hps_shmdb_t handle may be used by several threads of one process at
 *    once, except hps_shmdb_detach(), which must be the last call.
 *
 * Memory.  The segment is sized by shared_memory_size (a hard cap); space is
 * committed with posix_fallocate in allocation_rate steps, so a full
 * /dev/shm is a clear -ENOSPC instead of a SIGBUS (HPS_ENOSPC: the segment
 * itself, shared_memory_size, is full).  When a partition
 * cannot grow, it evicts by its overflow policy instead of failing.
 *
 * Byte order is the host's (HugeCTR never byte-swaps).  Do not use a handle
 * in a child after fork(); attach again (LMDB's rule).
 */
#ifndef HPS_SHMDB_H
#define HPS_SHMDB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "hps/dtype.h"
#include "hps/hps.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hps_shmdb hps_shmdb_t;

/** Longest model or table name (HugeCTR: [a-zA-Z0-9_-]{1,120}). */
#define HPS_SHMDB_NAME_MAX 120
/** Longest segment name; the object is /dev/shm/hps.<name>. */
#define HPS_SHMDB_SEGMENT_NAME_MAX 200
/** Tables per segment (fixed by the format). */
#define HPS_SHMDB_MAX_TABLES 256
/** Partitions per table (fixed by the format). */
#define HPS_SHMDB_MAX_PARTITIONS 256
/** Attached processes tracked in the segment's process table. */
#define HPS_SHMDB_MAX_PROCS 128
/** Largest dimension accepted (values per vector). */
#define HPS_SHMDB_MAX_DIM 65536

/** Role of an attached process, shown by hps-shm info. */
typedef enum hps_proc_role {
    HPS_ROLE_TOOL = 0,
    HPS_ROLE_COORDINATOR = 1,
    HPS_ROLE_WORKER = 2,
} hps_proc_role_t;

/** Segment-wide options, fixed when the segment is created. */
typedef struct hps_shmdb_opts {
    /** shared_memory_size: bytes of the whole segment, a hard cap.  >= 1 MiB. */
    uint64_t size_bytes;
    /** allocation_rate: bytes committed at a time (posix_fallocate). >= 64 KiB
     *  and at most size_bytes (a step is cut at the segment's end). */
    uint64_t allocation_rate;
    /** File mode of the shm object; 0 means 0600. */
    mode_t mode;
    /** Build the segment beside the one that serves: create it as the hidden
     *  object /dev/shm/.hps.<name>.new (replacing one a killed creator left),
     *  invisible to attach, until hps_shmdb_publish() renames it over
     *  /dev/shm/hps.<name> in one step.  Processes attached to the old
     *  segment keep their mapping and re-attach when they see the new
     *  object.  Callers serialize creators of one name (hps-coordinator's
     *  name lock).  /dev/shm must hold both segments meanwhile. */
    bool staged;
} hps_shmdb_opts_t;

/** Per-process options of a handle (not stored in the segment). */
typedef struct hps_shmdb_proc_opts {
    /** Threads that serve one batch lookup or upsert; 0 or 1 = the caller only. */
    unsigned num_threads;
    /** Role recorded in the process table. */
    hps_proc_role_t role;
    /** Device of a worker (-1 for none), recorded in the process table. */
    int device;
} hps_shmdb_proc_opts_t;

/** What a table is; given to hps_shmdb_table_create. */
typedef struct hps_table_spec {
    const char *model;       /**< model name, 1..120 chars of [A-Za-z0-9_-] */
    const char *table;       /**< table name, same alphabet */
    uint32_t dim;            /**< embedding_vecsize: floats per vector, 1..65536 */
    uint32_t key_bytes;      /**< 8 (int64 keys, supportlonglong) or 4 (uint32) */
    float default_value;     /**< default_value_for_each_table: every element */
    uint32_t num_partitions; /**< 1..256; must never change once data exists */
    /** overflow_margin: max rows per partition; UINT64_MAX = unbounded. */
    uint64_t overflow_margin;
    hps_overflow_policy_t overflow_policy;
    /** overflow_resolution_target in (0, 1]: evict down to margin * target. */
    double overflow_resolution_target;
    /** Expected rows of the whole table (sizes the first allocation); 0 = small. */
    uint64_t expected_rows;
    /** Rows of the table's model files (0 = unknown): kept for the GPU
     *  caches, sized by gpucacheper of the whole table, not of what the
     *  volatile DB holds. */
    uint64_t source_rows;
    /** The model's version ([model.<name>] version), 0 = none: workers
     *  report the version the segment they serve from holds. */
    uint32_t model_version;
    /** How rows are stored ([model.<name>] storage_type); HPS_DTYPE_FP32
     *  (0, what a zero-initialized spec gives) keeps them bit for bit.  Part
     *  of the geometry: an existing table of another type is a mismatch. */
    hps_dtype_t storage_type;
} hps_table_spec_t;

/** Counters and geometry of one partition (a snapshot). */
typedef struct hps_partition_info {
    uint64_t rows;      /**< live rows */
    uint64_t capacity;  /**< slots allocated (rows fit up to 92% of this) */
    uint64_t bytes;     /**< bytes of the partition's block in the segment */
    uint64_t evictions; /**< rows evicted by overflow handling */
    uint64_t repairs;   /**< EOWNERDEAD repairs of this partition */
} hps_partition_info_t;

/** A table's description and counters (a snapshot). */
typedef struct hps_table_info {
    char model[HPS_SHMDB_NAME_MAX + 1];
    char table[HPS_SHMDB_NAME_MAX + 1];
    uint32_t id;
    uint32_t dim;
    uint32_t key_bytes;
    uint32_t num_partitions;
    float default_value;
    uint64_t overflow_margin;
    hps_overflow_policy_t overflow_policy;
    double overflow_resolution_target;
    uint64_t rows;            /**< sum over partitions */
    uint64_t source_rows;     /**< rows of the model files (hps_table_spec_t), 0 = unknown */
    uint32_t model_version;   /**< hps_table_spec_t.model_version */
    hps_dtype_t storage_type; /**< hps_table_spec_t.storage_type */
    uint32_t row_bytes;  /**< bytes of one stored row: hps_dtype_row_bytes(storage_type, dim) */
    uint32_t slot_bytes; /**< bytes a row takes in the segment: row_bytes rounded up to 4 */
    uint64_t capacity;   /**< slots, sum over partitions */
    uint64_t bytes;      /**< segment bytes held by the table's blocks */
    uint64_t lookups;    /**< keys looked up */
    uint64_t hits;       /**< keys found */
    uint64_t inserts;    /**< rows inserted (new keys) */
    uint64_t updates;    /**< rows overwritten (existing keys) */
    uint64_t evictions;  /**< rows evicted by overflow handling */
    uint64_t erased;     /**< rows erased on request */
} hps_table_info_t;

/**
 * One row of the process table.
 *
 * Liveness.  Each attached process holds its row's liveness lock (an
 * open-file-description lock on one byte of /dev/shm/hps.<name>) for as
 * long as it is attached; the kernel drops it when the process dies, by
 * any signal.  Locks belong to the shm object, so processes in different
 * PID namespaces that share /dev/shm (containers of one pod, hostIPC) see
 * each other's: a row is alive exactly while its lock is held.  A pid is
 * the process's pid in its own namespace: informative only (two containers
 * may both show pid 1).  A child forked from an attached process does not
 * inherit the lock (it must attach again, see the top of this file).
 */
typedef struct hps_proc_info {
    pid_t pid; /**< in the process's own PID namespace */
    hps_proc_role_t role;
    int device;
    uint64_t attached_ns;  /**< CLOCK_REALTIME at attach, ns */
    uint64_t heartbeat_ns; /**< CLOCK_MONOTONIC of the last heartbeat, ns */
    bool alive;            /**< its liveness lock was held at the time of the call */
    bool self;             /**< the row of a handle of the calling process */
    int slot;              /**< row index, 0 .. HPS_SHMDB_MAX_PROCS - 1 */
} hps_proc_info_t;

/** What the coordinator is doing, as it last said in the segment header. */
typedef enum hps_coord_state {
    HPS_COORD_NONE = 0,    /**< no coordinator has said anything, or it stopped cleanly */
    HPS_COORD_LOADING = 1, /**< loading models: tables may be incomplete, misses unanswered */
    HPS_COORD_SERVING = 2, /**< models loaded, miss queue served */
    /** A reload (SIGHUP, model control) builds the next segment: this one's
     *  rows still serve (workers stay ready), its miss queue is not served. */
    HPS_COORD_RELOADING = 3,
    /** As RELOADING, and the reloading coordinator answers this segment's
     *  misses from the rows its model versions were built from (the
     *  persistent DB's column families, held while the next version is
     *  ingested beside them).  Builds before it never set it, and treat it
     *  as RELOADING. */
    HPS_COORD_RELOADING_SERVED = 4,
} hps_coord_state_t;

/** Segment header values (a snapshot). */
typedef struct hps_segment_info {
    char name[HPS_SHMDB_SEGMENT_NAME_MAX + 1];
    uint32_t format;          /**< format word (layout version + struct sizes) */
    uint64_t size_bytes;      /**< shared_memory_size */
    uint64_t committed_bytes; /**< fallocated so far */
    uint64_t used_bytes;      /**< handed out by the allocator (incl. header) */
    uint64_t free_bytes;      /**< freed blocks waiting for reuse */
    uint64_t allocation_rate;
    pid_t creator_pid;
    uint64_t created_ns;           /**< CLOCK_REALTIME, ns */
    uint64_t coord_heartbeat_ns;   /**< CLOCK_MONOTONIC, ns; 0 = never */
    pid_t coord_pid;               /**< coordinator that beat last; 0 = none */
    hps_coord_state_t coord_state; /**< as set by hps_shmdb_set_coord_state() */
    uint32_t num_tables;
    uint64_t repairs; /**< EOWNERDEAD repairs, all locks */
} hps_segment_info_t;

/* ------------------------------------------------------------------------ */
/* Segment lifecycle                                                         */
/* ------------------------------------------------------------------------ */

/**
 * @brief Create the segment /dev/shm/hps.<name> (O_EXCL) and attach to it.
 * @param[in]  name   Segment name, 1..200 chars of [A-Za-z0-9_.-].
 * @param[in]  opts   Segment options (copied).  size_bytes is a hard cap.
 * @param[in]  popts  Per-process options, or NULL for defaults (1 thread, tool).
 * @param[out] ret    The handle, owned by the caller; release with
 *                    hps_shmdb_detach().  Written only on success.
 * @return 0; HPS_EEXIST if the segment exists (attach or unlink it first);
 *         HPS_EINVAL for a bad name or option; -ENOSPC if /dev/shm cannot
 *         hold the header; -errno from shm_open, mmap, posix_fallocate.  On failure nothing is left
 * in /dev/shm. Process-safe: two creators race on O_EXCL, one wins.
 */
hps_err_t hps_shmdb_create(const char *name, const hps_shmdb_opts_t *opts,
                           const hps_shmdb_proc_opts_t *popts, hps_shmdb_t **ret);

/**
 * @brief Make a segment created with opts.staged the one under its name:
 *        rename(2) /dev/shm/.hps.<name>.new over /dev/shm/hps.<name>, which
 *        is atomic, so an attach finds either the old segment or the whole
 *        new one, never none and never a half-built one.
 * @param[in] db  A handle from hps_shmdb_create() with opts.staged.
 * @return 0 (also when db was published already or was not staged);
 *         -errno from rename(2).  Not thread-safe with other calls on db.
 * A staged segment never published is removed by hps_shmdb_detach().
 */
hps_err_t hps_shmdb_publish(hps_shmdb_t *db);

/**
 * @brief Attach to an existing segment and register in its process table.
 * @param[in]  name   Segment name (as for create).
 * @param[in]  popts  Per-process options or NULL.
 * @param[out] ret    The handle; release with hps_shmdb_detach().
 * @return 0; HPS_ENOTFOUND if there is no such segment; HPS_EBADMAGIC for a
 *         foreign object; HPS_EVERSION for another format (layout version or
 *         struct sizes); HPS_ETRUNCATED if the object is smaller than its
 *         header says; HPS_ECORRUPT for absurd header values; HPS_EFULL if
 *         the process table is full of live processes; -errno (-EACCES...).
 * A segment left by a crashed creator attaches normally: its data is kept.
 */
hps_err_t hps_shmdb_attach(const char *name, const hps_shmdb_proc_opts_t *popts, hps_shmdb_t **ret);

/**
 * @brief Whether name can name a segment (/dev/shm/hps.<name>): 1 to
 * HPS_SHMDB_SEGMENT_NAME_MAX characters of [A-Za-z0-9_.-].  Pure function;
 * thread-safe.
 */
bool hps_shmdb_name_ok(const char *name);

/**
 * @brief Validate a segment without attaching as a user (no process-table row).
 * Same checks and errors as hps_shmdb_attach(); used by tools to explain why
 * a segment is refused.  On error, a message is written to msg (may be NULL).
 */
hps_err_t hps_shmdb_probe(const char *name, char *msg, size_t msg_len);

/**
 * @brief Leave the process table, stop the helper threads, unmap.  Accepts
 *        NULL.  The segment stays in /dev/shm.  Not thread-safe: call last.
 */
void hps_shmdb_detach(hps_shmdb_t *db);

/**
 * @brief Detach like hps_shmdb_detach(), but leave this process's row in the
 * process table with its liveness lock held, by a descriptor that survives
 * execve() (FD_CLOEXEC cleared): a process that executes itself again (a
 * coordinator's reload) stays alive to the others until its new image has
 * attached, which then closes the descriptor (the row then reads as dead and
 * is reaped like any other).  Heartbeats stop with the handle: the new image
 * must attach within the others' timeout.  Not thread-safe: call last.
 * @param db  Handle, freed; not NULL.
 * @return The descriptor (owned by the caller: close it once the new image
 *         is attached), or -1 when there is no lock to hand over (the handle
 *         had no row; the segment is then detached as by hps_shmdb_detach()).
 */
int hps_shmdb_detach_handover(hps_shmdb_t *db);

/**
 * @brief Remove /dev/shm/hps.<name>.  Processes still attached keep their
 *        mapping until they detach.
 * @return 0; HPS_ENOTFOUND; -errno.
 */
hps_err_t hps_shmdb_unlink(const char *name);

/**
 * @brief Segment names present in /dev/shm (the part after "hps.").
 * @param[out] ret_names  malloc'ed array of malloc'ed strings; free each and
 *                        the array.  Written only on success.
 * @param[out] ret_n      Number of names.
 * @return 0; -ENOMEM; -errno from opendir.
 */
hps_err_t hps_shmdb_list(char ***ret_names, size_t *ret_n);

/** @brief Header snapshot of an attached segment.  Thread-safe.  Returns 0. */
hps_err_t hps_shmdb_segment_info(hps_shmdb_t *db, hps_segment_info_t *ret);

/**
 * @brief Record which contents of the persistent DB the segment's tables
 *        were built from: the token hps-coordinator keeps in the persistent
 *        DB (renewed before any table's rows are replaced there).  A later
 *        coordinator that finds the same token in the persistent DB may
 *        answer this segment's misses from it (a restart, a reload).
 * @param[in] token  Opaque, 0 = unknown (what older builds' segments hold).
 * Atomic store (release); coordinator only.
 */
void hps_shmdb_set_pdb_token(hps_shmdb_t *db, uint64_t token);

/** @brief The token of hps_shmdb_set_pdb_token(), 0 if none.  Atomic load;
 *  any process. */
uint64_t hps_shmdb_pdb_token(hps_shmdb_t *db);

/**
 * @brief Publish the coordinator's state (workers report ready only while it
 *        is HPS_COORD_SERVING and its heartbeat is fresh).  Atomic store;
 *        thread- and process-safe.  Returns 0.
 */
hps_err_t hps_shmdb_set_coord_state(hps_shmdb_t *db, hps_coord_state_t state);

/* ---- Model control requests (Triton's explicit mode) ------------------- */

/** Slots for model control requests in a segment; more at once get HPS_EBUSY. */
#define HPS_SHMDB_CTL_SLOTS 8
/** Bytes of a control answer's message, NUL included. */
#define HPS_SHMDB_CTL_MSG_MAX 512

/** A control request's state in its slot. */
typedef enum hps_ctl_state {
    HPS_CTL_FREE = 0,    /**< slot unused */
    HPS_CTL_CLAIMED = 1, /**< a requester is filling it in */
    HPS_CTL_PENDING = 2, /**< waiting for the coordinator */
    HPS_CTL_TAKEN = 3,   /**< the coordinator works on it (it may build a new segment) */
    HPS_CTL_DONE = 4,    /**< done; message says what happened */
    HPS_CTL_FAILED = 5,  /**< refused or failed; message says why */
} hps_ctl_state_t;

/** A request as the coordinator takes it (hps_shmdb_ctl_take). */
typedef struct hps_ctl_request {
    uint64_t id;
    hps_model_op_t op;
    char model[HPS_SHMDB_NAME_MAX + 1];
} hps_ctl_request_t;

/**
 * @brief Ask the segment's coordinator to load or unload a model: a free
 *        slot is claimed (CAS), filled in and made PENDING.  Any process,
 *        any thread; lock-free.
 * @param[in] db     The segment the requester serves from.
 * @param[in] op     HPS_MODEL_LOAD or HPS_MODEL_UNLOAD.
 * @param[in] model  Model name, 1..HPS_SHMDB_NAME_MAX bytes, host string.
 * @param[in] id     The request's id, nonzero, unique on the host (the
 *                   requester's choice, e.g. pid and clock); it follows
 *                   the request into a new segment.
 * @return 0; HPS_EINVAL (bad op, name or id 0); HPS_EBUSY (every slot in use).
 */
hps_err_t hps_shmdb_ctl_submit(hps_shmdb_t *db, hps_model_op_t op, const char *model, uint64_t id);

/**
 * @brief The state of request id in db: its slot (CLAIMED .. FAILED), else
 *        the request the segment was built for (DONE or FAILED).
 *        Lock-free, any process.
 * @param[out] ret_state  Its state.
 * @param[out] msg        The answer's message for DONE / FAILED (else ""),
 *                        NUL-terminated, at most len bytes; may be NULL.
 * @return 0; HPS_ENOTFOUND (no trace of id in this segment).
 */
hps_err_t hps_shmdb_ctl_status(hps_shmdb_t *db, uint64_t id, hps_ctl_state_t *ret_state, char *msg,
                               size_t len);

/** @brief Free the slot of request id once answered (DONE / FAILED), or,
 *         where the segment's result record answered it, clear that record
 *         so that the next segment does not carry it into a slot; no-op
 *         otherwise.  The requester calls it after reading the answer.
 *         Lock-free; process-safe. */
void hps_shmdb_ctl_release(hps_shmdb_t *db, uint64_t id);

/** @brief Take request id back while it is still PENDING (no coordinator
 *         took it): its slot is freed and the request is never carried
 *         out.  For a requester that stops waiting (its deadline, or no
 *         live coordinator).  Lock-free; process-safe (a CAS against the
 *         coordinator's take: exactly one of the two wins).
 *  @return true when withdrawn; false when it was taken (it may still
 *          complete), answered or is not in this segment. */
bool hps_shmdb_ctl_withdraw(hps_shmdb_t *db, uint64_t id);

/**
 * @brief Whether a request for model is waiting or being worked on
 *        (PENDING or TAKEN), and which (*ret_op, may be NULL).  For
 *        Triton's LOADING / UNLOADING states.  Lock-free.
 */
bool hps_shmdb_ctl_busy(hps_shmdb_t *db, const char *model, hps_model_op_t *ret_op);

/**
 * @brief The coordinator takes the oldest PENDING request (it becomes
 *        TAKEN).  Only the segment's coordinator calls it.
 * @return 0 (*ret filled); HPS_ENOTFOUND (none pending).
 */
hps_err_t hps_shmdb_ctl_take(hps_shmdb_t *db, hps_ctl_request_t *ret);

/**
 * @brief Answer request id (TAKEN or PENDING in db): DONE if ok, else
 *        FAILED, with msg (truncated to HPS_SHMDB_CTL_MSG_MAX - 1 bytes).
 * @return 0; HPS_ENOTFOUND (no such request waiting in db).
 */
hps_err_t hps_shmdb_ctl_answer(hps_shmdb_t *db, uint64_t id, bool ok, const char *msg);

/**
 * @brief Record in a new segment, before it is published, the answer to
 *        the request it was built for (hps_shmdb_ctl_status finds it
 *        there).  Coordinator only.  Returns 0.
 */
hps_err_t hps_shmdb_ctl_set_result(hps_shmdb_t *db, uint64_t id, bool ok, const char *msg);

/**
 * @brief Copy the requests of the serving segment into a new one before it
 *        is published, so that none is lost with the old segment: those
 *        still PENDING (the new coordinator takes them after publishing),
 *        and the answers not yet read (answered slots and the old
 *        segment's result record, as answered slots).  Coordinator only.
 *        Returns how many were copied (as many as free slots allow).
 */
size_t hps_shmdb_ctl_carry(hps_shmdb_t *from, hps_shmdb_t *to);

/**
 * @brief A coordinator starting on a segment answers FAILED, with msg, the
 *        requests a previous coordinator took (TAKEN) and never answered
 *        (it was killed while working on them).  Returns how many.
 */
size_t hps_shmdb_ctl_abandon(hps_shmdb_t *db, const char *msg);

/**
 * @brief Free answered slots older than max_age_ns (their requester died
 *        or forgot them) and slots CLAIMED for over 10 s (a requester died
 *        while filling one).  Coordinator only.  Returns how many.
 */
size_t hps_shmdb_ctl_reap(hps_shmdb_t *db, uint64_t max_age_ns);

/**
 * @brief Number of live rows in the process table (liveness locks held)
 *        other than the calling process's (for HugeCTR's
 *        shared_memory_auto_remove: the last process out removes the
 *        segment).  Thread-safe.
 */
size_t hps_shmdb_other_procs(hps_shmdb_t *db);

/**
 * @brief Whether a coordinator is alive on the segment: the process-table
 * row of the coordinator that beat last still holds its liveness lock (the
 * same process: the row was not taken again since), and its heartbeat
 * (hps_shmdb_heartbeat) is younger than timeout_ms (worker_timeout_ms);
 * with serving, it must also have said SERVING, RELOADING or
 * RELOADING_SERVED.  A killed coordinator is
 * seen at once, in any PID namespace; a stopped or hung one when its
 * heartbeat ages out.  Lock-free (a few fcntl calls), any process.
 */
bool hps_shmdb_coordinator_alive(hps_shmdb_t *db, uint32_t timeout_ms, bool serving);

/**
 * @brief Whether the process that beat last as coordinator
 *        (hps_segment_info_t.coord_pid) is still attached: its row's
 *        liveness lock is held, whatever its heartbeat's age.
 */
bool hps_shmdb_coordinator_attached(hps_shmdb_t *db);

/**
 * @brief Whether the process that created the segment
 *        (hps_segment_info_t.creator_pid) is still attached.
 */
bool hps_shmdb_creator_attached(hps_shmdb_t *db);

/**
 * @brief Whether a live row of the process table (liveness lock held) has
 *        this pid.  For pids recorded elsewhere in the segment (miss-queue
 *        owners, GPU-cache users): a pid is namespace-local, so with
 *        processes of several PID namespaces attached, any live process
 *        of that pid answers true.  false for pid <= 0.
 */
bool hps_shmdb_pid_alive(hps_shmdb_t *db, pid_t pid);

/**
 * @brief Record the coordinator heartbeat (CLOCK_MONOTONIC now, caller's
 * pid and process-table row, whose liveness lock hps_shmdb_coordinator_alive
 * tests).  Thread- and process-safe (atomic stores).  Returns 0.
 */
hps_err_t hps_shmdb_heartbeat(hps_shmdb_t *db);

/**
 * @brief Refresh this process's heartbeat in the process table.  Returns 0.
 */
hps_err_t hps_shmdb_proc_heartbeat(hps_shmdb_t *db);

/**
 * @brief Snapshot of the process table.
 * @param[out] procs  Array of at least HPS_SHMDB_MAX_PROCS entries (host).
 * @param[out] ret_n  Entries written.
 * @param[in]  reap   true: free the rows whose liveness lock is not held
 *                    (the process died without detaching); they are left
 *                    out of procs.
 * @return 0.
 */
hps_err_t hps_shmdb_procs(hps_shmdb_t *db, hps_proc_info_t *procs, size_t *ret_n, bool reap);

/* ------------------------------------------------------------------------ */
/* Tables                                                                    */
/* ------------------------------------------------------------------------ */

/**
 * @brief Create a table, or open it if it exists with the same dim,
 *        key_bytes, num_partitions and storage_type.
 * @param[in]  spec    The table (copied; its strings need not outlive the call).
 *                     spec->storage_type fixes how every row is stored for
 *                     the table's life (its descriptor in the segment).
 * @param[out] ret_id  Table id, stable for the segment's life.
 * @return 0; HPS_EINVAL for a bad name, dim 0 or > HPS_SHMDB_MAX_DIM, key
 *         width other than 4 or 8, partitions outside 1..256, target outside
 *         (0, 1], a storage_type that is no hps_dtype_t; HPS_EMISMATCH if the
 *         table exists with another geometry (storage type included);
 *         HPS_EFULL if the segment already has HPS_SHMDB_MAX_TABLES tables;
 *         HPS_ENOSPC if the first blocks do not fit the segment, -ENOSPC if
 *         /dev/shm has no room to commit them.
 * Process-safe (segment lock).
 */
hps_err_t hps_shmdb_table_create(hps_shmdb_t *db, const hps_table_spec_t *spec, uint32_t *ret_id);

/**
 * @brief Find a table by (model, table).  Lock-free.
 * @return 0; HPS_ENOTFOUND.
 */
hps_err_t hps_shmdb_table_find(hps_shmdb_t *db, const char *model, const char *table,
                               uint32_t *ret_id);

/** @brief Number of tables; ids are 0 .. n-1.  Lock-free. */
uint32_t hps_shmdb_table_count(hps_shmdb_t *db);

/**
 * @brief Description and counters of a table (a snapshot, not atomic as a
 *        whole).  @return 0; HPS_ENOTFOUND for a bad id.
 */
hps_err_t hps_shmdb_table_info(hps_shmdb_t *db, uint32_t id, hps_table_info_t *ret);

/**
 * @brief Per-partition counters.
 * @param[out] parts  Array of at least info.num_partitions entries (host).
 * @return 0; HPS_ENOTFOUND.
 */
hps_err_t hps_shmdb_partition_info(hps_shmdb_t *db, uint32_t id, hps_partition_info_t *parts);

/* ------------------------------------------------------------------------ */
/* Rows                                                                      */
/* ------------------------------------------------------------------------ */

/**
 * @brief Batch lookup, lock-free.
 * @param[in]  id      Table id.
 * @param[in]  n       Number of keys.
 * @param[in]  keys    (n) keys in host memory: int64 for key_bytes 8,
 *                     uint32 for key_bytes 4.  Duplicates allowed.
 * @param[out] values  (n, dim) float32, host memory, 4-byte aligned,
 *                     row-major, input order.  Rows of found keys are
 *                     decoded from the table's storage type (identity for
 *                     fp32).  Rows of missing keys are filled with the
 *                     table's default value (every element), so the output
 *                     is always fully written and never holds a torn row.
 * @param[out] found   (n) uint8, 1 = found, 0 = missing; may be NULL.
 * @param[out] ret_hits Number of keys found; may be NULL.
 * @return 0; HPS_ENOTFOUND for a bad table id.  Never blocks on a writer; a
 *         key whose bucket stays busy through the retry budget reports missing.
 * Thread- and process-safe.  Counts lookups and hits in the table.
 * Updates the access stamps used by evict_least_used / evict_oldest.
 */
hps_err_t hps_shmdb_lookup(hps_shmdb_t *db, uint32_t id, size_t n, const void *keys, float *values,
                           uint8_t *found, size_t *ret_hits);

/** Flags of hps_shmdb_lookup_ex(). */
typedef enum hps_shmdb_lookup_flags {
    /** Leave the table's lookups and hits counters alone: a caller that may
     *  look the same keys up again (libhps's lookup that cannot wait for
     *  misses on an HTTP loop, then does wait on a lookup thread) counts
     *  the one lookup that answers with hps_shmdb_count_lookups(). */
    HPS_SHMDB_LOOKUP_UNCOUNTED = 1u << 0,
} hps_shmdb_lookup_flags_t;

/**
 * @brief hps_shmdb_lookup() with flags (hps_shmdb_lookup_flags_t, or 0 for
 *        exactly hps_shmdb_lookup()).  Same parameters, returns and safety.
 */
hps_err_t hps_shmdb_lookup_ex(hps_shmdb_t *db, uint32_t id, size_t n, const void *keys,
                              float *values, uint8_t *found, size_t *ret_hits, unsigned flags);

/**
 * @brief Add to table id's lookups and hits counters (hps_table_info_t,
 *        hps-shm info) what an uncounted lookup found.
 * @param[in] lookups  Keys looked up.
 * @param[in] hits     Of those, found (at most lookups).
 * @return 0; HPS_ENOTFOUND for a bad table id.  Lock-free (relaxed atomic
 *         adds); thread- and process-safe.
 */
hps_err_t hps_shmdb_count_lookups(hps_shmdb_t *db, uint32_t id, uint64_t lookups, uint64_t hits);

/**
 * @brief Batch insert-or-update (upsert).
 * @param[in] n       Number of rows.
 * @param[in] keys    (n) keys, host memory, width as in lookup.
 * @param[in] values  (n, dim) float32, host memory, 4-byte aligned,
 *                    row-major; each row is encoded into the table's
 *                    storage type (hps_dtype_encode()) before it is written.
 * @param[out] ret_inserted  New keys inserted (others were updated); may be NULL.
 * @return 0; HPS_ENOTFOUND for a bad table id; -ENOMEM if the encoding
 *         buffer of a non-fp32 table cannot be allocated (those partitions'
 *         rows are not written).  When a partition reaches its
 *         overflow_margin, or cannot grow because the segment is full, rows
 *         are evicted by the table's overflow_policy down to
 *         margin * overflow_resolution_target before inserting; the call
 *         never fails for lack of space once the table exists.
 * Thread- and process-safe (per-partition robust mutex).  Each row is written
 * fully before its key becomes visible.  Duplicate keys in one batch: the
 * last one wins.  Where the first user-space write to each page of shared
 * memory traps to a hypervisor (a probe, once per handle, finds the
 * mapping's first writes over twice as slow as pwrite()), a partition's
 * share of 64 or more keys in a table of row pages (stored rows over 64
 * bytes) writes its new rows with pwrite() on the handle's descriptor of
 * the segment before publishing the keys (shmdb/ops.c, BULK ROWS); the
 * environment variable HPS_SHMDB_ROW_WRITES=mapping or =pwrite, read at
 * that first large upsert, forces the choice.
 */
hps_err_t hps_shmdb_upsert(hps_shmdb_t *db, uint32_t id, size_t n, const void *keys,
                           const float *values, size_t *ret_inserted);

/**
 * @brief Erase keys.  @param[out] ret_erased rows removed; may be NULL.
 * @return 0; HPS_ENOTFOUND for a bad table id.  Thread- and process-safe.
 */
hps_err_t hps_shmdb_erase(hps_shmdb_t *db, uint32_t id, size_t n, const void *keys,
                          size_t *ret_erased);

/**
 * @brief Remove every row of a table (the table and its geometry remain).
 * @return 0; HPS_ENOTFOUND.  Thread- and process-safe.
 */
hps_err_t hps_shmdb_clear(hps_shmdb_t *db, uint32_t id);

/** @brief Live rows of a table (sum of partition counters).  Lock-free. */
hps_err_t hps_shmdb_size(hps_shmdb_t *db, uint32_t id, uint64_t *ret_rows);

/**
 * Row visitor for hps_shmdb_iterate().  key is zero-extended for 32-bit
 * tables; value points to (dim) floats (decoded from the table's storage
 * type; host memory) valid only during the call.
 * Return 0 to go on, anything else to stop (returned by iterate).
 */
typedef int (*hps_shmdb_row_fn)(void *ctx, uint64_t key, const float *value);

/**
 * @brief Visit every row of a table, partition by partition.  Each partition
 * is walked under its writer lock (repairing it first if its last holder
 * died), so every row is seen exactly once and consistent; writers to that
 * partition wait meanwhile (keep fn short), readers never do.
 * @return 0; HPS_ENOTFOUND; -errno if a lock cannot be taken; -ENOMEM (no
 *         decoding buffer); or the visitor's non-zero return.
 */
hps_err_t hps_shmdb_iterate(hps_shmdb_t *db, uint32_t id, hps_shmdb_row_fn fn, void *ctx);

/**
 * @brief Read one row as it is stored (in the table's storage type, not
 *        decoded), lock-free, for tools that show the stored value.
 * @param[in]  id         Table id.
 * @param[in]  key        The key: an int64 key's bits, or a 32-bit key
 *                        zero-extended (above UINT32_MAX: not found).
 * @param[out] out        Host memory, any alignment, at least
 *                        hps_table_info_t.row_bytes bytes; receives the
 *                        stored row in the layout of include/hps/dtype.h
 *                        (row_bytes bytes) only when the key is found.
 * @param[in]  out_len    Bytes available at out.
 * @param[out] ret_found  true when the key is present (a key whose bucket
 *                        stays busy through the retry budget reads as
 *                        absent, as in hps_shmdb_lookup()).
 * @return 0; HPS_ENOTFOUND for a bad table id; HPS_EINVAL for out or
 *         ret_found NULL or out_len < row_bytes; -ENOMEM.  Thread- and
 *         process-safe; touches no counter and no access stamp.
 */
hps_err_t hps_shmdb_lookup_stored(hps_shmdb_t *db, uint32_t id, uint64_t key, void *out,
                                  size_t out_len, bool *ret_found);

/**
 * Problem reporter for hps_shmdb_check(): one call per inconsistency found.
 */
typedef void (*hps_shmdb_report_fn)(void *ctx, const char *msg);

/**
 * @brief Full consistency check of the segment: header, allocator, every
 *        table and partition (bounds, even versions, row counts, probe
 *        counters, no duplicate keys, every key in its partition and
 *        reachable from its home bucket).  Takes each partition's writer lock
 *        while checking it (repairing it first if its holder died).
 * @param[out] ret_problems  Number of problems found.
 * @return 0 when the walk finished (problems are counted, not errors);
 *         -errno on a lock failure.
 */
hps_err_t hps_shmdb_check(hps_shmdb_t *db, hps_shmdb_report_fn report, void *ctx,
                          uint64_t *ret_problems);

/* ------------------------------------------------------------------------ */
/* Miss queue: worker -> coordinator lookups of keys missing in the VDB      */
/* ------------------------------------------------------------------------ */

/** Miss-queue counters (a snapshot). */
typedef struct hps_missq_info {
    uint32_t slots;      /**< request slots */
    uint32_t in_use;     /**< slots not free right now */
    uint64_t slab_bytes; /**< bytes per slot for keys, found mask and vectors */
    uint64_t served;     /**< requests answered by the coordinator */
    uint64_t busy;       /**< requests refused because every slot was taken */
    uint64_t timeouts;   /**< requests whose worker stopped waiting */
} hps_missq_info_t;

/**
 * @brief Create the segment's miss queue (idempotent; the coordinator calls
 *        it at start).  Process-safe.
 * @param[in] slots       Request slots, 1..4096: at most this many worker
 *                        requests are outstanding; more are refused at once.
 * @param[in] slab_bytes  Bytes per slot (>= 4096): keys (n x key_bytes), a
 *                        found mask (n bytes) and vectors (n, dim) float32.
 *                        Larger requests are split into several.
 * @return 0; HPS_EINVAL; HPS_ENOSPC if the segment cannot hold it.
 */
hps_err_t hps_shmdb_missq_init(hps_shmdb_t *db, uint32_t slots, uint64_t slab_bytes);

/**
 * @brief Ask the coordinator for keys the VDB did not have, and wait.
 * @param[in]  id       Table id.
 * @param[in]  n        Number of keys.
 * @param[in]  keys     (n) host keys of the table's width (int64 or uint32).
 * @param[out] values   (n, dim) float32 host; rows of found keys are written,
 *                      rows of missing keys are left untouched.
 * @param[out] found    (n) uint8 1/0, or NULL.
 * @param[in]  timeout_ms  Deadline for the whole call: the caller never waits
 *                      longer; a late answer is discarded by the slot protocol
 *                      and never touches the caller's memory.
 * @param[out] ret_hits Keys found, or NULL.
 * @return 0; HPS_EBUSY when every slot is taken (answered at once);
 *         HPS_ETIMEDOUT at the deadline; HPS_ENOTFOUND if the table or the
 *         queue does not exist; or the coordinator's error for the request.
 * Thread- and process-safe.  Each request holds one slot.  A batch larger
 * than one slot's slab goes one slot at a time (each freed before the next
 * is claimed, so any size fits any queue); the first failing one ends the
 * call.  Errors as hps_shmdb_miss_lookup_many() (keys or values NULL with
 * n > 0: HPS_EINVAL); *ret_hits is set only when it returns 0; found is
 * left untouched when the table or the queue is missing.
 */
hps_err_t hps_shmdb_miss_lookup(hps_shmdb_t *db, uint32_t id, size_t n, const void *keys,
                                float *values, uint8_t *found, uint32_t timeout_ms,
                                size_t *ret_hits);

/** One table's part of a batched miss-queue request (hps_shmdb_miss_lookup_many). */
typedef struct hps_miss_req {
    uint32_t table;   /**< in: table id in the segment */
    size_t n;         /**< in: number of keys */
    const void *keys; /**< in: (n) keys of the table's key width, host memory */
    float *values;    /**< out: (n, dim) float32; rows of found keys written, others untouched */
    uint8_t *found;   /**< out: (n) 1 = found, 0 = not; may be NULL */
    size_t hits;      /**< out: keys found */
    hps_err_t rc;     /**< out: 0, or this table's error (HPS_EBUSY, HPS_ETIMEDOUT, HPS_ENOTFOUND,
                           HPS_EINVAL, or the coordinator's) */
} hps_miss_req_t;

/**
 * @brief Ask the coordinator for the missing keys of several tables in one
 *        round trip, bounded by one deadline.
 *
 * Every chunk of every request is posted first (a request larger than one
 * slot's slab is split into chunks of as many keys as a slab holds), the
 * doorbell is rung once, then every posted slot is awaited against the one
 * deadline computed at entry (now + timeout_ms).  When the queue is full
 * while chunks remain, the call rings for what it posted and waits for its
 * own oldest chunk, reusing that slot (so a call larger than the queue goes
 * through in waves, all under the one deadline).  Once the deadline has
 * passed, each slot still outstanding is taken back (PENDING -> FREE) or
 * abandoned to the coordinator (SERVING -> ABANDONED, freed when it
 * finishes): a late answer never touches the caller's memory, and chunks
 * not yet posted get HPS_ETIMEDOUT.  A chunk that finds no free slot while
 * none of this call's chunks is out (the queue is full of other processes'
 * requests) is refused at once and counted as busy; the other chunks are
 * still posted and answered.
 *
 * @param[in,out] reqs  (nreq) host array, owned by the caller.  In: table, n,
 *                      keys, values, found.  Out, always set for every
 *                      request: rc, hits (keys found in the chunks that were
 *                      answered), found[] (zeroed at entry when non-NULL,
 *                      then 1 for each key found) and the rows (n, dim)
 *                      float32 of found keys in values (others untouched).
 *                      A request with n == 0 needs no slot (rc 0, hits 0)
 *                      but its table and the queue must exist.
 *                      A request's rc: HPS_EINVAL (db NULL, keys or values
 *                      NULL with n > 0, or a dim too large for one slab);
 *                      HPS_ENOTFOUND (no such table, or no queue); HPS_EBUSY
 *                      when any of its chunks found the queue full of other
 *                      processes' requests;
 *                      otherwise the first error of its chunks in key order:
 *                      HPS_ETIMEDOUT at the deadline, or the coordinator's
 *                      error (rows of that chunk not copied); -ENOMEM if the
 *                      call could not allocate its chunk list (more than 64
 *                      chunks in flight).
 * @param[in]     nreq  Number of requests; 0 returns 0 at once.
 * @param[in]     timeout_ms  Deadline for the whole call: it never waits
 *                      longer (plus the copying of answers already there).
 * @return 0 when every request's rc is 0, else the first non-zero rc in
 *         request order; HPS_EINVAL when reqs is NULL with nreq > 0 (nothing
 *         set).
 * Thread- and process-safe; reqs must not be shared with a concurrent call.
 * The call holds at most as many slots as the queue has, all given back
 * before it returns except abandoned ones (freed by the coordinator).
 */
hps_err_t hps_shmdb_miss_lookup_many(hps_shmdb_t *db, hps_miss_req_t *reqs, size_t nreq,
                                     uint32_t timeout_ms);

/**
 * Coordinator-side lookup for one request: fill values (n, dim) and found
 * (n, zeroed) for the keys (n, the table's key width) of table `table`.
 * Pointers are into the segment and valid only during the call.
 */
typedef hps_err_t (*hps_shmdb_miss_fn)(void *ctx, uint32_t table, size_t n, const void *keys,
                                       float *values, uint8_t *found);

/**
 * @brief Serve pending miss requests: wait up to wait_ms (futex, no polling)
 *        for at least one, answer every pending one through fn, return;
 *        also return, having served none, when the doorbell rang and
 *        another thread took the request (or hps_shmdb_miss_wake()).
 * @param[out] ret_served  Requests answered, or NULL.
 * @return 0; HPS_ENOTFOUND if there is no queue.  Several threads may serve
 *         at once (each request is taken by exactly one).
 */
hps_err_t hps_shmdb_miss_serve(hps_shmdb_t *db, uint32_t wait_ms, hps_shmdb_miss_fn fn, void *ctx,
                               size_t *ret_served);

/**
 * @brief Reclaim the slots of dead workers; with coordinator_restart, also
 *        the slots a dead coordinator was serving (call once at start, or
 *        when taking over a dead coordinator's segment): a request whose
 *        worker still waits is made PENDING again (the next serve answers
 *        it, within the worker's miss_timeout_ms), the others are freed.
 * @param[out] ret_reaped  Slots reclaimed (freed or asked again), or NULL.
 * @return 0.
 */
hps_err_t hps_shmdb_miss_reap(hps_shmdb_t *db, bool coordinator_restart, size_t *ret_reaped);

/**
 * @brief Give every PENDING request back to its worker at once (it then
 *        answers the table defaults, as after miss_timeout_ms, without the
 *        wait): for a segment whose miss queue nobody will serve, during a
 *        reload.  Coordinator only.  Returns how many.
 */
size_t hps_shmdb_miss_drop_pending(hps_shmdb_t *db);

/**
 * @brief Wake every thread waiting in hps_shmdb_miss_serve() on db (of any
 *        process) at once, as a request would: a service that stops then
 *        sees its stop flag without waiting out its wait_ms.  Coordinator
 *        only; no-op without a queue.  Process-safe.
 */
void hps_shmdb_miss_wake(hps_shmdb_t *db);

/** @brief Miss-queue counters.  @return 0; HPS_ENOTFOUND if there is no queue. */
hps_err_t hps_shmdb_miss_stats(hps_shmdb_t *db, hps_missq_info_t *ret);

/* ------------------------------------------------------------------------ */
/* Update statistics: the coordinator's update counters, for the workers    */
/* ------------------------------------------------------------------------ */

/** Layers that publish update statistics. */
#define HPS_SHMDB_UPDATE_LAYERS 3 /**< 0 volatile, 1 persistent, 2 distributed */
/** Skipped-message counters per layer, indexed 0 .. HPS_SHMDB_UPDATE_REASONS - 1.  The
 *  segment stores them anonymous: what an index means, and its name, belong
 *  to the update source (hps_update_reason_name(), include/hps/update.h). */
#define HPS_SHMDB_UPDATE_REASONS 8

/** Counters of one layer's update consumer (monotonic unless noted). */
typedef struct hps_update_stats {
    uint64_t messages;                          /**< messages received */
    uint64_t received;                          /**< updates in accepted messages */
    uint64_t nonfinite;                         /**< of those, with a NaN / Inf value */
    uint64_t applied;                           /**< updates applied to the layer */
    uint64_t skipped[HPS_SHMDB_UPDATE_REASONS]; /**< messages skipped, by reason index */
    uint64_t beacons;                           /**< header-only messages */
    uint64_t errors;                            /**< consumer errors and updates dropped */
    int64_t lag;                                /**< gauge: consumer lag (messages), -1 unknown */
    int64_t newest_applied_ms;                  /**< wall clock (ms) of the last apply, 0 none */
    int64_t published_ms;                       /**< wall clock (ms) of this snapshot */
    uint64_t offset_resets;                     /**< offset resets (hps_kafka_stats_t) */
} hps_update_stats_t;

/** @brief Name of a layer index ("volatile", "persistent", "distributed"), NULL if out of range. */
const char *hps_shmdb_update_layer_name(uint32_t layer);

/**
 * @brief Publish one layer's counters in the segment (the coordinator, once
 *        per stats tick).  The area is created on first use (dir_lock).
 *        Each field is stored with a relaxed atomic store: readers see every
 *        field whole, not necessarily one consistent snapshot.
 * @param[in] layer  0 .. HPS_SHMDB_UPDATE_LAYERS - 1.
 * @param[in] s      Host struct; s->published_ms is taken as given.
 * @return 0; HPS_EINVAL (bad layer); HPS_ENOSPC if the segment is full.
 * Process-safe for one writer per layer.
 */
hps_err_t hps_shmdb_update_stats_set(hps_shmdb_t *db, uint32_t layer, const hps_update_stats_t *s);

/**
 * @brief Read one layer's published counters (relaxed atomic loads).
 * @param[out] ret  Host struct.
 * @return 0; HPS_EINVAL (bad layer); HPS_ENOTFOUND when that layer never
 *         published (no update ingestion, or not this layer).
 * Lock-free; thread- and process-safe.
 */
hps_err_t hps_shmdb_update_stats_get(hps_shmdb_t *db, uint32_t layer, hps_update_stats_t *ret);

/* ------------------------------------------------------------------------ */
/* Distributed-DB statistics: the coordinator's Redis counters, for workers */
/* ------------------------------------------------------------------------ */

/** Counters of the coordinator's distributed DB (Redis Cluster) since it
 *  opened it: hps_ddb_stats_t of include/hps/ddb.h (monotonic unless noted). */
typedef struct hps_shmdb_ddb_stats {
    uint64_t lookup_keys;     /**< keys looked up (the misses of the volatile DB) */
    uint64_t lookup_hits;     /**< of those, found */
    uint64_t insert_rows;     /**< rows written (loading, cache_missed_embeddings) */
    uint64_t evicted_rows;    /**< rows removed by overflow handling */
    uint64_t errors;          /**< failed calls: lookups, inserts, access-tracking batches */
    uint64_t touches_dropped; /**< hits not tracked (LFU/LRU): the touch queue was full */
    uint64_t bad_values;      /**< stored values of another length than dim * 4: misses */
    int64_t published_ms;     /**< wall clock (ms) of this snapshot */
} hps_shmdb_ddb_stats_t;

/**
 * @brief Publish the distributed DB's counters in the segment (the
 *        coordinator, about once a second, when a distributed DB is
 *        configured).  The area is created on first use (dir_lock).  Each
 *        field is stored with a relaxed atomic store: readers see every
 *        field whole, not necessarily one consistent snapshot.
 * @param[in] s  Host struct; s->published_ms is taken as given.
 * @return 0; HPS_EINVAL (NULL); HPS_ENOSPC if the segment is full.
 * Process-safe for one writer.
 */
hps_err_t hps_shmdb_ddb_stats_set(hps_shmdb_t *db, const hps_shmdb_ddb_stats_t *s);

/**
 * @brief Read the distributed DB's published counters (relaxed atomic loads).
 * @param[out] ret  Host struct.
 * @return 0; HPS_EINVAL (NULL); HPS_ENOTFOUND when none was published (no
 *         distributed DB, or a coordinator of a build before it).
 * Lock-free; thread- and process-safe.
 */
hps_err_t hps_shmdb_ddb_stats_get(hps_shmdb_t *db, hps_shmdb_ddb_stats_t *ret);

/* ------------------------------------------------------------------------ */
/* Update logs: per-table rings of changed keys, for refreshing caches       */
/* ------------------------------------------------------------------------ */

/**
 * @brief Create the update log of a table (idempotent: an existing log is
 *        kept whatever its capacity).  The coordinator calls it before it
 *        appends.  Process-safe (dir_lock).
 * @param[in] id        Table id.
 * @param[in] capacity  Keys the ring holds, a power of two in [64, 2^30].
 * @return 0; HPS_EINVAL; HPS_ENOTFOUND (no such table); HPS_ENOSPC.
 */
hps_err_t hps_shmdb_updlog_init(hps_shmdb_t *db, uint32_t id, uint32_t capacity);

/**
 * @brief Append changed keys to a table's log, after their new values are in
 *        the table (a reader that sees a key's sequence then finds the new
 *        value).  Key i gets sequence head + i; head grows by n.
 * @param[in] keys  (n) host keys of the table's width (int64 or uint32).
 * @return 0; HPS_ENOTFOUND when the table has no log.  ONE writer per table
 *         (the coordinator's volatile-layer consumer); not thread-safe
 *         against another appender of the same table.
 */
hps_err_t hps_shmdb_updlog_append(hps_shmdb_t *db, uint32_t id, size_t n, const void *keys);

/**
 * @brief Read keys logged since a sequence number.  Lock-free, wait-free
 *        against the writer; each key is validated by its slot's sequence,
 *        so a key overwritten while it was read is never returned torn.
 * @param[in]  since     First sequence wanted (0 = from the very start; a
 *                       reader starts from hps_shmdb_updlog_head()).
 * @param[out] keys_out  (max) host keys of the table's width.
 * @param[in]  max       Capacity of keys_out.
 * @param[out] ret_n     Keys written.
 * @param[out] ret_next  Sequence to pass as `since` next time.
 * @param[out] ret_lapped  true when keys since `since` were already
 *                       overwritten (or since is beyond the head, e.g. a
 *                       recreated segment): the reader must refresh fully;
 *                       *ret_next is then the head and *ret_n 0.
 * @return 0; HPS_ENOTFOUND when the table has no log.  Thread/process-safe.
 */
hps_err_t hps_shmdb_updlog_read(hps_shmdb_t *db, uint32_t id, uint64_t since, void *keys_out,
                                size_t max, size_t *ret_n, uint64_t *ret_next, bool *ret_lapped);

/**
 * @brief Current head (sequence of the next key to be appended) and the
 *        ring's capacity.  Either pointer may be NULL.
 * @return 0; HPS_ENOTFOUND when the table has no log.  Lock-free.
 */
hps_err_t hps_shmdb_updlog_head(hps_shmdb_t *db, uint32_t id, uint64_t *ret_head,
                                uint32_t *ret_capacity);

/**
 * @brief Bytes of segment memory an fp32 table with this geometry needs per
 *        slot (key, bucket header, value, access stamp), for sizing and
 *        reports: hps_shmdb_bytes_per_slot_of(dim, policy, HPS_DTYPE_FP32).
 */
double hps_shmdb_bytes_per_slot(uint32_t dim, hps_overflow_policy_t policy);

/**
 * @brief Bytes of segment memory per slot of a table of dim elements
 *        stored as dtype (key, bucket header, row id, stored value rounded
 *        up to 4 bytes, access stamp), counting a row in a row page for
 *        every slot; the layout is the one hps_shmdb_table_create() picks.
 * @param[in] dim     1 .. HPS_SHMDB_MAX_DIM.
 * @param[in] policy  The overflow policy (access stamps for LRU and LFU).
 * @param[in] dtype   The storage type.
 * @return The bytes (a fraction: bucket headers are shared by 7 slots);
 *         0.0 for dim 0 or a dtype that is no type.  Pure; thread-safe.
 */
double hps_shmdb_bytes_per_slot_of(uint32_t dim, hps_overflow_policy_t policy, hps_dtype_t dtype);

#ifdef __cplusplus
}
#endif
#endif /* HPS_SHMDB_H */
