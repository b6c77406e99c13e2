/*
 * shmdb_missq.h -- the miss queue of a shared-memory segment
 * (include/hps/shmdb.h): workers hand the keys the volatile DB lacks to
 * the coordinator, which answers them from the layers below.
 */
#ifndef HPS_SHMDB_MISSQ_H
#define HPS_SHMDB_MISSQ_H

#include "hps/shmdb.h"

#ifdef __cplusplus
extern "C" {
#endif

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
 * @return 0; HPS_EBUSY when every slot stayed taken by other callers
 *         until the deadline (a full queue is waited on, 50 us to 1 ms
 *         sleeps); HPS_ETIMEDOUT at the deadline; HPS_ENOTFOUND if the table or the
 *         queue does not exist; or the coordinator's error for the request.
 * Thread- and process-safe.  Each request holds one slot.  A batch larger
 * than one chunk (as hps_shmdb_miss_lookup_many()) goes one slot at a time (each freed before the
 * next is claimed, so any size fits any queue); the first failing one ends the call.  Errors as
 * hps_shmdb_miss_lookup_many() (keys or values NULL with n > 0: HPS_EINVAL); *ret_hits is set only
 * when it returns 0; found is left untouched when the table or the queue is missing.
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
 * Every chunk of every request is posted first (a request is split into
 * chunks of at most 4096 keys, fewer where a slab holds fewer, so that a
 * large request's answers come back piece by piece), the doorbell is rung
 * once, then every posted slot is awaited against the one deadline
 * computed at entry (now + timeout_ms).  A call holds at most half of the
 * queue's slots at once (the rest stay free for other callers): when it
 * holds its share while chunks remain, it rings for what it posted and
 * waits for its own oldest chunk, reusing that slot (so a large call goes
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
 *                      callers' requests until the deadline (it waits for a
 *                      slot: 50 us sleeps doubling to 1 ms);
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

#ifdef __cplusplus
}
#endif
#endif /* HPS_SHMDB_MISSQ_H */
