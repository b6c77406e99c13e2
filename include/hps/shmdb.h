/*
 * shmdb.h -- the shared-memory volatile database (VDB): the segment's
 * lifecycle, the attached processes, the coordinator's state and model
 * control requests.  Tables and rows (shmdb_table.h), the miss queue
 * (shmdb_missq.h), statistics (shmdb_stats.h) and update logs
 * (shmdb_updlog.h) have headers of their own, which this one includes at
 * its end; the GPU-cache registry is shmdb_gcache.h.
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
#define HPS_SHMDB_NAME_MAX HPS_NAME_MAX
/** Longest segment name; the object is /dev/shm/hps.<name>. */
#define HPS_SHMDB_SEGMENT_NAME_MAX HPS_SEGMENT_NAME_MAX
/** Tables per segment (fixed by the format). */
#define HPS_SHMDB_MAX_TABLES HPS_MAX_TABLES
/** Partitions per table (fixed by the format). */
#define HPS_SHMDB_MAX_PARTITIONS 256
/** Attached processes tracked in the segment's process table. */
#define HPS_SHMDB_MAX_PROCS 128
/** Largest dimension accepted (values per vector). */
#define HPS_SHMDB_MAX_DIM HPS_MAX_DIM

/** Role of an attached process, shown by hps-shm info. */
typedef enum hps_proc_role {
    HPS_ROLE_TOOL = 0,
    HPS_ROLE_COORDINATOR = 1,
    HPS_ROLE_WORKER = 2,
} hps_proc_role_t;

/** What a process can do, recorded in its process-table row
 *  (hps_shmdb_proc_opts_t.caps; hps_proc_info_t.caps).  Processes of builds
 *  before these flags record none (caps 0). */
typedef enum hps_proc_cap {
    /** It takes a model's new tables or dimensions from the INI text the
     *  coordinator records in the segment (hps_shmdb_conf_text) when it
     *  switches, so a reload may change the shape of a model it serves
     *  (lookup-library clients: hps-worker, in-process callers). */
    HPS_PROC_CAP_FOLLOWS_SHAPES = 1u << 0,
    /** It takes a model's tables by their position, as the segment records
     *  it (hps_table_info_t.order), so a reload may also rename or reorder
     *  the tables of a model it serves.  Processes of builds before it take
     *  them by name and would answer a position from another table. */
    HPS_PROC_CAP_FOLLOWS_ORDER = 1u << 1,
} hps_proc_cap_t;

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
    /** hps_proc_cap_t bits, recorded in the process table. */
    uint32_t caps;
    /** For a process that only looks (hps-shm): when every row of the
     *  process table is taken by a live process, attach without a row
     *  instead of failing with HPS_EFULL.  It is then not listed, beats no
     *  heartbeat and holds no miss-queue slot; hps_shmdb_procs() marks no
     *  row self.  (A full table is when one wants to see who fills it.) */
    bool rowless_if_full;
} hps_shmdb_proc_opts_t;

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
    uint32_t caps;         /**< hps_proc_cap_t bits it recorded; 0 from builds before them */
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
    uint32_t coord_timeout_ms;     /**< its worker_timeout_ms; 0 = not said */
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
 *         the process table is full of live processes (unless
 *         popts->rowless_if_full); -errno (-EACCES...).
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
 * @return 0; HPS_ENOTFOUND; HPS_EINVAL (not a valid segment name); -errno.
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

/**
 * @brief Names of the segments that have a staged object in /dev/shm
 *        (/dev/shm/.hps.<name>.new, opts.staged): a build in progress, or
 *        what a build killed before hps_shmdb_publish() left.  As
 *        hps_shmdb_list(): malloc'ed names (the part between ".hps." and
 *        ".new"), written only on success.
 * @return 0; -ENOMEM; -errno from opendir.
 */
hps_err_t hps_shmdb_list_staged(char ***ret_names, size_t *ret_n);

/**
 * @brief The staged object of segment @p name: its size, and whether its
 *        build is in progress (its creator still holds its row in the
 *        object's process table; any PID namespace) or it is what a killed
 *        build left.  Reads the header through a read-only mapping; takes
 *        no lock and attaches nothing.  A header that names no creator yet
 *        counts as in progress for 60 s after the object's creation, and
 *        any doubt counts as in progress.
 * @param[out] ret_bytes     The object's size in bytes (st_size).
 * @param[out] ret_building  true while a build is in progress.
 * @return 0; HPS_ENOTFOUND (no staged object); HPS_EINVAL (bad name, NULL,
 *         not a regular file); -errno from shm_open or fstat.
 */
hps_err_t hps_shmdb_staged_info(const char *name, uint64_t *ret_bytes, bool *ret_building);

/**
 * @brief Remove the staged object that a killed build left (the next
 *        coordinator of the name would remove it too; this frees its
 *        memory without one), never one whose build is in progress.
 * @param[out] ret_bytes  The removed object's size in bytes; may be NULL.
 * @return 0; HPS_ENOTFOUND (none); HPS_EBUSY (its build is in progress:
 *         left alone); HPS_EINVAL; -errno from shm_unlink.
 */
hps_err_t hps_shmdb_staged_unlink(const char *name, uint64_t *ret_bytes);

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

/** Most bytes of an INI text hps_shmdb_set_conf_text() keeps (hps_conf_load's
 *  16 MiB file limit). */
#define HPS_SHMDB_CONF_TEXT_MAX (16u << 20)

/**
 * @brief Record the INI text the segment's models were built from (what
 *        hps-coordinator serves), so that a lookup process can take a
 *        model's section as the coordinator read it (libhps follows a model
 *        whose tables a reload changed by it, whatever its own INI says).
 *        Each call stores a new copy in the segment and publishes it in one
 *        atomic step; the old copy's bytes are not reused.
 * @param[in] text  len bytes (host), need not be NUL-terminated; copied.
 * @return 0; HPS_EINVAL (NULL, or over HPS_SHMDB_CONF_TEXT_MAX bytes);
 *         HPS_ENOSPC (the segment is full); a lock error.  Coordinator only.
 */
hps_err_t hps_shmdb_set_conf_text(hps_shmdb_t *db, const char *text, size_t len);

/**
 * @brief A copy of the text of hps_shmdb_set_conf_text().
 * @param[out] ret_text  malloc'd, NUL-terminated; the caller frees it.
 * @return 0; HPS_ENOTFOUND (none recorded: a segment of an older build, or
 *         a coordinator that has not served yet); HPS_ECORRUPT (its offset
 *         or length is out of the segment's bounds); -ENOMEM.  Any process,
 *         lock-free.
 */
hps_err_t hps_shmdb_conf_text(hps_shmdb_t *db, char **ret_text);

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
 * @brief Number of live rows in the process table other than this
 *        handle's own: other processes' and this process's other handles
 *        (two in-process clients of one segment).  For HugeCTR's
 *        shared_memory_auto_remove, where the last handle out removes the
 *        segment.  Thread-safe.
 */
size_t hps_shmdb_other_rows(hps_shmdb_t *db);

/**
 * @brief Whether a coordinator is alive on the segment: the process-table
 * row of the coordinator that beat last still holds its liveness lock (the
 * same process: the row was not taken again since), and its heartbeat
 * (hps_shmdb_heartbeat) is younger than timeout_ms (the caller's
 * worker_timeout_ms) or, where larger, than the coordinator's own
 * worker_timeout_ms recorded in the segment (hps_shmdb_set_coord_timeout:
 * it beats at its heartbeat_interval_ms, at most half of that, and a
 * reload may raise both while the caller keeps the value it started with);
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
 * @brief The segment's creator executed itself again (execve keeps the pid
 *        and ends the old image's process-table row): this handle's row
 *        becomes the creator's, so that hps_shmdb_creator_attached() and
 *        `hps-shm info` do not call a live creator gone (a coordinator's
 *        reload holds its serving segment through the re-execution).
 * @return true when done; false (nothing changed) when this process is not
 *         the creator by pid (hps_segment_info_t.creator_pid) or the handle
 *         has no row.  Lock-free; the creator only.
 */
bool hps_shmdb_creator_reattach(hps_shmdb_t *db);

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
 * @brief Say the heartbeat's deadline: the coordinator's worker_timeout_ms
 * (ms, > 0), after which the workers judge it gone; tools that read no INI
 * (hps-shm) judge a heartbeat older than it stalled.  Called by the
 * coordinator with each heartbeat.  Thread- and process-safe (a relaxed
 * atomic store).
 */
void hps_shmdb_set_coord_timeout(hps_shmdb_t *db, uint32_t timeout_ms);

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

#ifdef __cplusplus
}
#endif

/* The other parts of the API, each in a header of its own; every one
 * includes this one, so any of them, or this one alone, gives them all. */
#include "hps/shmdb_table.h"  /* tables and rows */
#include "hps/shmdb_missq.h"  /* the miss queue */
#include "hps/shmdb_stats.h"  /* update and distributed-DB statistics */
#include "hps/shmdb_updlog.h" /* update logs */

#endif /* HPS_SHMDB_H */
