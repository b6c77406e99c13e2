/*
 * pdb-table.c -- the persistent database's tables: the registry of
 * column families, table tags (hps_et.<model>.<table>), creation, drop,
 * hold and release, and the metadata entries of the default column
 * family.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/pdb-internal.h"

static const char PROP_NUM_KEYS[] = "rocksdb.estimate-num-keys";

/* ------------------------------------------------------------------------ */
/* Registry                                                                  */
/* ------------------------------------------------------------------------ */

hps_err_t hps__pdb_table_add(hps_pdb_t *db, rocksdb_column_family_handle_t *cf, const char *name,
                             hps_pdb_table_t **ret)
{
    hps_pdb_table_t *t = calloc(1, sizeof(*t));

    if (t == NULL || (t->t_name = strdup(name)) == NULL) {
        free(t);
        return -ENOMEM;
    }
    t->t_db = db;
    t->t_cf = cf;
    t->t_next = db->db_tables;
    db->db_tables = t;
    if (ret != NULL)
        *ret = t;
    return 0;
}

static hps_pdb_table_t *table_find(hps_pdb_t *db, const char *name)
{
    hps_pdb_table_t *t;

    for (t = db->db_tables; t != NULL; t = t->t_next)
        if (strcmp(t->t_name, name) == 0)
            return t;
    return NULL;
}

void hps__pdb_table_free(hps_pdb_table_t *t)
{
    rocksdb_column_family_handle_destroy(t->t_cf);
    free(t->t_name);
    free(t);
}

/* ------------------------------------------------------------------------ */
/* Tables                                                                    */
/* ------------------------------------------------------------------------ */

static hps_err_t make_tag(const char *model, const char *table, char *buf, size_t len, char *err,
                          size_t err_len)
{
    if (!hps_modelfile_name_ok(model) || !hps_modelfile_name_ok(table)) {
        hps__pdb_err(err, err_len,
                     "bad table name '%s.%s': model and table must be 1..120 characters of "
                     "[A-Za-z0-9_-]",
                     model != NULL ? model : "(null)", table != NULL ? table : "(null)");
        return HPS_EINVAL;
    }
    snprintf(buf, len, "%s.%s.%s", HPS_TABLE_TAG_PREFIX, model, table);
    return 0;
}

static hps_err_t table_create_locked(hps_pdb_t *db, const char *tag, hps_pdb_table_t **ret,
                                     char *err, size_t err_len)
{
    char *rerr = NULL;
    rocksdb_column_family_handle_t *cf;
    hps_err_t rc;

    cf = rocksdb_create_column_family(db->db_rdb, db->db_opts, tag, &rerr);
    if (rerr != NULL)
        return hps__pdb_wrote(db, hps__pdb_rerr(rerr, tag, err, err_len));
    rc = hps__pdb_table_add(db, cf, tag, ret);
    if (rc != 0) {
        /* Keep RocksDB and the registry in step: the family exists but we
         * cannot track it; it is opened again at the next hps_pdb_open. */
        rocksdb_column_family_handle_destroy(cf);
        hps__pdb_err(err, err_len, "%s: out of memory", tag);
    }
    return rc;
}

hps_err_t hps_pdb_table(hps_pdb_t *db, const char *model, const char *table, bool create,
                        hps_pdb_table_t **ret_table, char *err, size_t err_len)
{
    char tag[8 + 2 * 121 + 8];
    hps_pdb_table_t *t;
    hps_err_t rc;

    if (db == NULL || ret_table == NULL) {
        hps__pdb_err(err, err_len, "hps_pdb_table: NULL argument");
        return hps__pdb_fail(db, HPS_EINVAL);
    }
    rc = make_tag(model, table, tag, sizeof(tag), err, err_len);
    if (rc != 0)
        return hps__pdb_fail(db, rc);
    pthread_mutex_lock(&db->db_lock);
    t = table_find(db, tag);
    if (t == NULL && (!create || db->db_cfg.read_only)) {
        hps__pdb_err(err, err_len, "%s: no such table in %s%s", tag, db->db_path,
                     db->db_cfg.read_only ? " (open read-only)" : "");
        rc = HPS_ENOTFOUND;
    } else if (t == NULL) {
        rc = table_create_locked(db, tag, &t, err, err_len);
    }
    pthread_mutex_unlock(&db->db_lock);
    if (rc == 0)
        *ret_table = t;
    return hps__pdb_fail(db, rc);
}

/* Split "hps_et.<model>.<table>" into its parts; false for other names. */
static bool split_tag(const char *name, char *model, char *table, size_t len)
{
    const char *m = name + strlen(HPS_TABLE_TAG_PREFIX) + 1, *dot;

    if (!hps__pdb_starts_with(name, HPS_TABLE_TAG_PREFIX ".") || (dot = strchr(m, '.')) == NULL ||
        (size_t)(dot - m) >= len || strlen(dot + 1) >= len)
        return false;
    memcpy(model, m, (size_t)(dot - m));
    model[dot - m] = '\0';
    strcpy(table, dot + 1);
    return hps_modelfile_name_ok(model) && hps_modelfile_name_ok(table);
}

hps_err_t hps_pdb_foreach_table(hps_pdb_t *db, hps_pdb_table_fn fn, void *ctx)
{
    char model[256], table[256];
    hps_pdb_table_t *t;
    int rc = 0;

    if (db == NULL || fn == NULL)
        return HPS_EINVAL;
    pthread_mutex_lock(&db->db_lock);
    for (t = db->db_tables; t != NULL && rc == 0; t = t->t_next)
        if (split_tag(t->t_name, model, table, sizeof(model)))
            rc = fn(model, table, ctx);
    pthread_mutex_unlock(&db->db_lock);
    return rc;
}

const char *hps_pdb_table_name(const hps_pdb_table_t *t)
{
    return t->t_name;
}

/* Unlink t from list *head (db_lock held); false when t is not on it. */
static bool table_unlink_locked(hps_pdb_table_t **head, hps_pdb_table_t *t)
{
    hps_pdb_table_t **pp;

    for (pp = head; *pp != NULL; pp = &(*pp)->t_next) {
        if (*pp == t) {
            *pp = t->t_next;
            return true;
        }
    }
    return false;
}

hps_err_t hps_pdb_drop(hps_pdb_table_t *t, char *err, size_t err_len)
{
    char *rerr = NULL;
    hps_pdb_t *db;
    hps_err_t rc;
    bool held = false;

    if (t == NULL) {
        hps__pdb_err(err, err_len, "hps_pdb_drop: NULL table");
        return HPS_EINVAL;
    }
    db = t->t_db;
    rc = hps__pdb_check_writable(db, t->t_name, err, err_len);
    if (rc != 0)
        return hps__pdb_fail(db, rc);
    pthread_mutex_lock(&db->db_lock);
    rocksdb_drop_column_family(db->db_rdb, t->t_cf, &rerr);
    rc = hps__pdb_wrote(db, hps__pdb_rerr(rerr, t->t_name, err, err_len));
    if (rc == 0) {
        table_unlink_locked(&db->db_tables, t);
        held = t->t_holds > 0;
        if (held) { /* readable by its holders until the last release */
            t->t_next = db->db_retired;
            db->db_retired = t;
        }
    }
    pthread_mutex_unlock(&db->db_lock);
    if (rc == 0 && !held)
        hps__pdb_table_free(t);
    return hps__pdb_fail(db, rc);
}

void hps_pdb_table_hold(hps_pdb_table_t *t)
{
    pthread_mutex_lock(&t->t_db->db_lock);
    t->t_holds++;
    pthread_mutex_unlock(&t->t_db->db_lock);
}

void hps_pdb_table_release(hps_pdb_table_t *t)
{
    hps_pdb_t *db;
    bool gone = false;

    if (t == NULL)
        return;
    db = t->t_db;
    pthread_mutex_lock(&db->db_lock);
    if (t->t_holds > 0 && --t->t_holds == 0) /* on db_retired: dropped while held */
        gone = table_unlink_locked(&db->db_retired, t);
    pthread_mutex_unlock(&db->db_lock);
    if (gone)
        hps__pdb_table_free(t); /* RocksDB deletes the dropped family's files */
}

/* ------------------------------------------------------------------------ */
/* Metadata (default column family)                                          */
/* ------------------------------------------------------------------------ */

#define META_PREFIX   "hps.meta."
#define META_NAME_MAX 300

/* The RocksDB key of entry name; false for a bad name. */
static bool meta_key(const char *name, char *key, size_t len, char *err, size_t err_len)
{
    size_t n = name != NULL ? strlen(name) : 0;
    if (n == 0 || n > META_NAME_MAX) {
        hps__pdb_err(err, err_len, "metadata entry name must be 1..%d bytes", META_NAME_MAX);
        return false;
    }
    snprintf(key, len, "%s%s", META_PREFIX, name);
    return true;
}

hps_err_t hps_pdb_meta_get(hps_pdb_t *db, const char *name, char *buf, size_t len, char *err,
                           size_t err_len)
{
    char key[sizeof(META_PREFIX) + META_NAME_MAX], *rerr = NULL;
    size_t vlen = 0;

    if (db == NULL || buf == NULL || len == 0) {
        hps__pdb_err(err, err_len, "hps_pdb_meta_get: NULL argument");
        return HPS_EINVAL;
    }
    buf[0] = '\0';
    if (!meta_key(name, key, sizeof(key), err, err_len))
        return HPS_EINVAL;
    char *v =
        rocksdb_get_cf(db->db_rdb, db->db_ropts, db->db_default_cf, key, strlen(key), &vlen, &rerr);
    if (rerr != NULL)
        return hps__pdb_fail(db, hps__pdb_rerr(rerr, key, err, err_len));
    if (v == NULL)
        return HPS_ENOTFOUND;
    hps_err_t rc = 0;
    if (vlen >= len) {
        hps__pdb_err(err, err_len, "%s: value of %zu bytes does not fit in %zu", key, vlen, len);
        rc = HPS_EINVAL;
    } else {
        memcpy(buf, v, vlen);
        buf[vlen] = '\0';
    }
    rocksdb_free(v);
    return rc;
}

hps_err_t hps_pdb_meta_put(hps_pdb_t *db, const char *name, const char *value, char *err,
                           size_t err_len)
{
    char key[sizeof(META_PREFIX) + META_NAME_MAX], *rerr = NULL;

    if (db == NULL) {
        hps__pdb_err(err, err_len, "hps_pdb_meta_put: NULL db");
        return HPS_EINVAL;
    }
    if (!meta_key(name, key, sizeof(key), err, err_len))
        return HPS_EINVAL;
    if (value != NULL && strlen(value) >= HPS_PDB_META_MAX) {
        hps__pdb_err(err, err_len, "%s: value longer than %d bytes", key, HPS_PDB_META_MAX - 1);
        return HPS_EINVAL;
    }
    hps_err_t rc = hps__pdb_check_writable(db, key, err, err_len);
    if (rc != 0)
        return hps__pdb_fail(db, rc);
    if (value != NULL)
        rocksdb_put_cf(db->db_rdb, db->db_wopts, db->db_default_cf, key, strlen(key), value,
                       strlen(value), &rerr);
    else
        rocksdb_delete_cf(db->db_rdb, db->db_wopts, db->db_default_cf, key, strlen(key), &rerr);
    rc = hps__pdb_rerr(rerr, key, err, err_len);
    if (rc == 0) {
        rocksdb_flush_wal(db->db_rdb, 1, &rerr); /* synced, whatever sync_wal says */
        rc = hps__pdb_rerr(rerr, key, err, err_len);
    }
    return hps__pdb_fail(db, hps__pdb_wrote(db, rc));
}

hps_err_t hps_pdb_rows_estimate(hps_pdb_table_t *t, uint64_t *ret_rows)
{
    uint64_t v = 0;

    if (t == NULL || ret_rows == NULL)
        return HPS_EINVAL;
    if (rocksdb_property_int_cf(t->t_db->db_rdb, t->t_cf, PROP_NUM_KEYS, &v) != 0)
        return hps__pdb_fail(t->t_db, HPS_EIO);
    *ret_rows = v;
    return 0;
}
