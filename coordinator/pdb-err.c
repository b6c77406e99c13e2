/*
 * pdb-err.c -- the persistent database's errors: RocksDB's error
 * strings mapped to hps_err_t codes with a message, the failed-write mark,
 * and the argument checks common to the row operations.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/pdb-internal.h"

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

void hps__pdb_err(char *err, size_t err_len, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL || err_len == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

bool hps__pdb_starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Status::ToString() starts with the code's name ("IO error: ..."). */
hps_err_t hps__pdb_map_status(const char *s)
{
    if (strstr(s, "lock file") != NULL || strstr(s, "lock hold") != NULL)
        return HPS_EBUSY; /* another process (or this one) holds the DB */
    if (hps__pdb_starts_with(s, "Corruption"))
        return HPS_ECORRUPT;
    if (hps__pdb_starts_with(s, "Resource busy") || hps__pdb_starts_with(s, "Busy") ||
        hps__pdb_starts_with(s, "Operation failed. Try again") ||
        hps__pdb_starts_with(s, "Operation timed out"))
        return HPS_EBUSY;
    if (hps__pdb_starts_with(s, "Invalid argument"))
        return HPS_EINVAL;
    if (hps__pdb_starts_with(s, "NotFound") || hps__pdb_starts_with(s, "Not found"))
        return HPS_ENOTFOUND;
    return HPS_EIO;
}

hps_err_t hps__pdb_rerr(char *rerr, const char *what, char *err, size_t err_len)
{
    hps_err_t rc;

    if (rerr == NULL)
        return 0;
    rc = hps__pdb_map_status(rerr);
    hps__pdb_err(err, err_len, "%s: %s", what, rerr);
    rocksdb_free(rerr);
    return rc;
}

hps_err_t hps__pdb_fail(hps_pdb_t *db, hps_err_t rc)
{
    if (rc != 0 && db != NULL)
        HPS__PDB_COUNT(db, errors, 1);
    return rc;
}

hps_err_t hps__pdb_wrote(hps_pdb_t *db, hps_err_t rc)
{
    if (rc != 0 && db != NULL)
        __atomic_store_n(&db->db_write_failed, true, __ATOMIC_RELAXED);
    return rc;
}

hps_err_t hps__pdb_check_writable(const hps_pdb_t *db, const char *what, char *err, size_t err_len)
{
    if (__atomic_load_n(&db->db_write_failed, __ATOMIC_RELAXED)) {
        hps__pdb_err(err, err_len,
                     "%s: an earlier write to %s failed (a full disk?): no more writes until it "
                     "is opened again",
                     what, db->db_path);
        return HPS_EIO;
    }
    if (!db->db_cfg.read_only)
        return 0;
    hps__pdb_err(err, err_len, "%s: %s is open read-only", what, db->db_path);
    return -EROFS;
}

hps_err_t hps__pdb_check_args(size_t n, const void *keys, uint32_t key_bytes, const void *values,
                              uint32_t dim, const char *what, char *err, size_t err_len)
{
    if (n > 0 && (keys == NULL || values == NULL)) {
        hps__pdb_err(err, err_len, "%s: NULL argument", what);
        return HPS_EINVAL;
    }
    if (key_bytes != 4 && key_bytes != 8) {
        hps__pdb_err(err, err_len, "%s: key_bytes %" PRIu32 " is neither 4 nor 8", what, key_bytes);
        return HPS_EINVAL;
    }
    if (dim == 0 || dim > UINT32_MAX / 4) {
        hps__pdb_err(err, err_len, "%s: dim %" PRIu32 " out of range", what, dim);
        return HPS_EINVAL;
    }
    return 0;
}

hps_err_t hps__pdb_check_rows(const hps_pdb_table_t *t, size_t n, const void *keys,
                              uint32_t key_bytes, const void *values, uint32_t dim,
                              const char *what, char *err, size_t err_len)
{
    if (t == NULL) {
        hps__pdb_err(err, err_len, "%s: NULL argument", what);
        return HPS_EINVAL;
    }
    return hps__pdb_check_args(n, keys, key_bytes, values, dim, what, err, err_len);
}
