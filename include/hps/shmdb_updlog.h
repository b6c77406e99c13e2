/*
 * shmdb_updlog.h -- the update logs of a shared-memory segment
 * (include/hps/shmdb.h): per-table rings of changed keys, read by the GPU
 * caches' refreshers.
 */
#ifndef HPS_SHMDB_UPDLOG_H
#define HPS_SHMDB_UPDLOG_H

#include "hps/shmdb.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif
#endif /* HPS_SHMDB_UPDLOG_H */
