/*
 * pdb-rows.c -- the persistent database's rows: write batches,
 * insert and erase, and lookups by MultiGet.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/pdb-internal.h"

/* ------------------------------------------------------------------------ */
/* Writes                                                                    */
/* ------------------------------------------------------------------------ */

static hps_err_t write_batch(hps_pdb_t *db, rocksdb_writebatch_t *b, const char *tag, char *err,
                             size_t err_len)
{
    char *rerr = NULL;

    if (rocksdb_writebatch_count(b) == 0)
        return 0;
    rocksdb_write(db->db_rdb, db->db_wopts, b, &rerr);
    rocksdb_writebatch_clear(b);
    HPS__PDB_COUNT(db, write_batches, 1);
    return hps__pdb_wrote(db, hps__pdb_rerr(rerr, tag, err, err_len));
}

static hps_err_t flush_wal(hps_pdb_t *db, const char *tag, char *err, size_t err_len)
{
    char *rerr = NULL;

    rocksdb_flush_wal(db->db_rdb, db->db_cfg.sync_wal ? 1 : 0, &rerr);
    return hps__pdb_wrote(db, hps__pdb_rerr(rerr, tag, err, err_len));
}

/*
 * Put (values != NULL) or Delete (values == NULL) n rows in WriteBatches of
 * max_batch_size, then flush the WAL (manual_wal_flush is on).
 */
static hps_err_t write_rows(hps_pdb_table_t *t, size_t n, const char *keys, uint32_t kb,
                            const float *values, uint32_t dim, char *err, size_t err_len)
{
    hps_pdb_t *db = t->t_db;
    rocksdb_writebatch_t *b = rocksdb_writebatch_create();
    size_t i, row_bytes = (size_t)dim * 4;
    hps_err_t rc = 0;

    for (i = 0; i < n && rc == 0; i++) {
        if (values != NULL)
            rocksdb_writebatch_put_cf(b, t->t_cf, keys + i * kb, kb,
                                      (const char *)(values + i * dim), row_bytes);
        else
            rocksdb_writebatch_delete_cf(b, t->t_cf, keys + i * kb, kb);
        if ((size_t)rocksdb_writebatch_count(b) >= db->db_cfg.max_batch_size)
            rc = write_batch(db, b, t->t_name, err, err_len);
    }
    if (rc == 0)
        rc = write_batch(db, b, t->t_name, err, err_len);
    if (rc == 0)
        rc = flush_wal(db, t->t_name, err, err_len);
    rocksdb_writebatch_destroy(b);
    return rc;
}

hps_err_t hps_pdb_insert(hps_pdb_table_t *t, size_t n, const void *keys, uint32_t key_bytes,
                         const float *values, uint32_t dim, char *err, size_t err_len)
{
    hps_err_t rc;

    rc = hps__pdb_check_rows(t, n, keys, key_bytes, values, dim, "hps_pdb_insert", err, err_len);
    if (rc != 0)
        return hps__pdb_fail(t != NULL ? t->t_db : NULL, rc);
    rc = hps__pdb_check_writable(t->t_db, t->t_name, err, err_len);
    if (rc == 0 && n > 0)
        rc = write_rows(t, n, keys, key_bytes, values, dim, err, err_len);
    if (rc == 0)
        HPS__PDB_COUNT(t->t_db, insert_rows, n);
    return hps__pdb_fail(t->t_db, rc);
}

hps_err_t hps_pdb_erase(hps_pdb_table_t *t, size_t n, const void *keys, uint32_t key_bytes,
                        char *err, size_t err_len)
{
    static const float dummy; /* passes the values check; deletes need none */
    hps_err_t rc;

    rc = hps__pdb_check_rows(t, n, keys, key_bytes, &dummy, 1, "hps_pdb_erase", err, err_len);
    if (rc != 0)
        return hps__pdb_fail(t != NULL ? t->t_db : NULL, rc);
    rc = hps__pdb_check_writable(t->t_db, t->t_name, err, err_len);
    if (rc == 0 && n > 0)
        rc = write_rows(t, n, keys, key_bytes, NULL, 1, err, err_len);
    if (rc == 0)
        HPS__PDB_COUNT(t->t_db, erase_keys, n);
    return hps__pdb_fail(t->t_db, rc);
}

/* ------------------------------------------------------------------------ */
/* Lookup                                                                    */
/* ------------------------------------------------------------------------ */

/* Scratch arrays of one MultiGet batch. */
typedef struct mget {
    const char **keys;
    size_t *key_sizes;
    rocksdb_pinnableslice_t **vals;
    char **errs;
} mget_t;

static hps_err_t mget_alloc(mget_t *m, size_t cap)
{
    m->keys = malloc(cap * sizeof(*m->keys));
    m->key_sizes = malloc(cap * sizeof(*m->key_sizes));
    m->vals = malloc(cap * sizeof(*m->vals));
    m->errs = malloc(cap * sizeof(*m->errs));
    return (m->keys && m->key_sizes && m->vals && m->errs) ? 0 : -ENOMEM;
}

static void mget_free(mget_t *m)
{
    free(m->keys);
    free(m->key_sizes);
    free(m->vals);
    free(m->errs);
}

static void format_key(char *buf, size_t len, const char *key, uint32_t kb)
{
    if (kb == 8) {
        int64_t k;
        memcpy(&k, key, 8);
        snprintf(buf, len, "%" PRId64, k);
    } else {
        uint32_t k;
        memcpy(&k, key, 4);
        snprintf(buf, len, "%" PRIu32, k);
    }
}

/* Result i of a batch: copy the row, or report missing, or an error.  Frees
 * the slice and error string of row i. */
static hps_err_t mget_take(const hps_pdb_table_t *t, mget_t *m, size_t i, float *row, uint32_t dim,
                           bool *ret_found, char *err, size_t err_len)
{
    size_t len = 0;
    const char *v;
    char kbuf[32];
    hps_err_t rc = 0;

    *ret_found = false;
    if (m->errs[i] != NULL) {
        rc = hps__pdb_map_status(m->errs[i]);
        rc = rc == HPS_ENOTFOUND ? 0 : hps__pdb_rerr(m->errs[i], t->t_name, err, err_len);
        if (rc == 0)
            rocksdb_free(m->errs[i]);
    }
    if (m->vals[i] == NULL)
        return rc;
    v = rocksdb_pinnableslice_value(m->vals[i], &len);
    if (rc == 0 && len != (size_t)dim * 4) {
        format_key(kbuf, sizeof(kbuf), m->keys[i], (uint32_t)m->key_sizes[i]);
        hps__pdb_err(err, err_len,
                     "%s: key %s has a %zu-byte value, expected dim %" PRIu32 " x 4 = %zu bytes "
                     "(table written with another dim?)",
                     t->t_name, kbuf, len, dim, (size_t)dim * 4);
        rc = HPS_ECORRUPT;
    } else if (rc == 0) {
        memcpy(row, v, len);
        *ret_found = true;
    }
    rocksdb_pinnableslice_destroy(m->vals[i]);
    return rc;
}

/* One MultiGet over keys [0, cnt) of this batch; returns hits in *hits. */
static hps_err_t mget_batch(hps_pdb_table_t *t, mget_t *m, size_t cnt, const char *keys,
                            uint32_t kb, uint32_t dim, float *values, bool *found, size_t *hits,
                            char *err, size_t err_len)
{
    hps_pdb_t *db = t->t_db;
    hps_err_t rc = 0, r;
    size_t i;
    bool f;

    for (i = 0; i < cnt; i++) {
        m->keys[i] = keys + i * kb;
        m->key_sizes[i] = kb;
    }
    /* sorted_input = false: RocksDB sorts a copy of the key list itself. */
    rocksdb_batched_multi_get_cf(db->db_rdb, db->db_ropts, t->t_cf, cnt, m->keys, m->key_sizes,
                                 m->vals, m->errs, false);
    HPS__PDB_COUNT(db, multiget_calls, 1);
    for (i = 0; i < cnt; i++) {
        r = mget_take(t, m, i, values + i * dim, dim, &f, rc == 0 ? err : NULL, err_len);
        if (rc == 0)
            rc = r;
        if (found != NULL)
            found[i] = f;
        *hits += f ? 1 : 0;
    }
    return rc;
}

hps_err_t hps_pdb_lookup(hps_pdb_table_t *t, size_t n, const void *keys, uint32_t key_bytes,
                         uint32_t dim, float *values, bool *found, size_t *ret_hits, char *err,
                         size_t err_len)
{
    size_t off, cnt, hits = 0, bs;
    mget_t m = {0};
    hps_err_t rc;

    rc = hps__pdb_check_rows(t, n, keys, key_bytes, values, dim, "hps_pdb_lookup", err, err_len);
    if (rc != 0)
        return hps__pdb_fail(t != NULL ? t->t_db : NULL, rc);
    bs = n < t->t_db->db_cfg.max_batch_size ? n : t->t_db->db_cfg.max_batch_size;
    rc = n > 0 ? mget_alloc(&m, bs) : 0;
    for (off = 0; off < n && rc == 0; off += cnt) {
        cnt = n - off < bs ? n - off : bs;
        rc =
            mget_batch(t, &m, cnt, (const char *)keys + off * key_bytes, key_bytes, dim,
                       values + off * dim, found != NULL ? found + off : NULL, &hits, err, err_len);
    }
    mget_free(&m);
    if (rc == -ENOMEM)
        hps__pdb_err(err, err_len, "%s: out of memory", t->t_name);
    HPS__PDB_COUNT(t->t_db, lookup_keys, n);
    HPS__PDB_COUNT(t->t_db, lookup_hits, hits);
    if (rc == 0 && ret_hits != NULL)
        *ret_hits = hits;
    return hps__pdb_fail(t->t_db, rc);
}
