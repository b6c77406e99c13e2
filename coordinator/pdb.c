/*
 * pdb.c -- the persistent database over RocksDB's C API: open and close,
 * the table (column family) registry, insert, lookup, erase, drop, counters.
 * Bulk loading through SST files lives in pdb-bulk.c.
 *
 * The C API returns errors as malloc'd strings through a char ** out
 * parameter; hps__pdb_rerr() turns each into an hps_err_t plus a message
 * and frees it, so no RocksDB string outlives the call that produced it.
 *
 * Keys are passed to RocksDB as they lie in the caller's buffer: on a
 * little-endian host the bytes of an int64 or uint32 are exactly HugeCTR's
 * raw key bytes, so nothing is copied or converted on the hot paths.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/pdb-internal.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "HugeCTR's RocksDB layout is little-endian raw bytes; big-endian hosts need a "
               "byte swap of every key");

/* OptimizeLevelStyleCompaction's C++ default memtable budget (the C API has
 * no default arguments). */
#define LEVEL_COMPACTION_BUDGET (512ull * 1024 * 1024)

static const char DEFAULT_CF[] = "default";
static const char PROP_NUM_KEYS[] = "rocksdb.estimate-num-keys";

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

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Status::ToString() starts with the code's name ("IO error: ..."). */
static hps_err_t map_status(const char *s)
{
    if (strstr(s, "lock file") != NULL || strstr(s, "lock hold") != NULL)
        return HPS_EBUSY; /* another process (or this one) holds the DB */
    if (starts_with(s, "Corruption"))
        return HPS_ECORRUPT;
    if (starts_with(s, "Resource busy") || starts_with(s, "Busy") ||
        starts_with(s, "Operation failed. Try again") || starts_with(s, "Operation timed out"))
        return HPS_EBUSY;
    if (starts_with(s, "Invalid argument"))
        return HPS_EINVAL;
    if (starts_with(s, "NotFound") || starts_with(s, "Not found"))
        return HPS_ENOTFOUND;
    return HPS_EIO;
}

hps_err_t hps__pdb_rerr(char *rerr, const char *what, char *err, size_t err_len)
{
    hps_err_t rc;

    if (rerr == NULL)
        return 0;
    rc = map_status(rerr);
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

/* ------------------------------------------------------------------------ */
/* Options                                                                   */
/* ------------------------------------------------------------------------ */

void hps_pdb_opts_init(hps_pdb_opts_t *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->num_threads = HPS_PDB_DEFAULT_THREADS;
    opts->read_only = false;
    opts->max_batch_size = HPS_PDB_DEFAULT_BATCH;
    opts->block_cache_mb = HPS_PDB_DEFAULT_BLOCK_CACHE_MB;
    opts->sync_wal = true;
}

static hps_err_t check_opts(const hps_pdb_opts_t *o, char *err, size_t err_len)
{
    if (o->num_threads == 0 || o->num_threads > INT32_MAX || o->max_batch_size == 0 ||
        o->block_cache_mb == 0) {
        hps__pdb_err(err, err_len,
                     "hps_pdb_open: num_threads (%u), max_batch_size (%zu) and "
                     "block_cache_mb (%" PRIu64 ") must be >= 1",
                     o->num_threads, o->max_batch_size, o->block_cache_mb);
        return HPS_EINVAL;
    }
    return 0;
}

/*
 * HugeCTR's RocksDBBackend options, for the DB and every column family,
 * less one: OptimizeForPointLookup also gives every memtable a bloom filter
 * of 2% of write_buffer_size (128 MiB after OptimizeLevelStyleCompaction's
 * budget), 2.6 MB allocated and cleared with each memtable of each column
 * family, one per embedding table.  Our memtables hold only the Kafka
 * updates since the last flush; the tables' rows are ingested SST files,
 * which keep their bloom filters.  Without it, bench-load's 26 column
 * families were created in 0.26 s less CPU (perf, on the 2-core dev VM).
 */
/* Info log files (LOG and LOG.old.*) RocksDB keeps in the database's
 * directory. */
#define PDB_INFO_LOGS_KEPT 4
#define PDB_INFO_LOG_LEVEL 4 /* InfoLogLevel::FATAL_LEVEL (rocksdb/env.h) */

static rocksdb_options_t *make_options(const hps_pdb_opts_t *o)
{
    rocksdb_options_t *opts = rocksdb_options_create();

    rocksdb_options_set_create_if_missing(opts, 1);
    rocksdb_options_set_manual_wal_flush(opts, 1);
    rocksdb_options_optimize_for_point_lookup(opts, o->block_cache_mb);
    rocksdb_options_set_memtable_prefix_bloom_size_ratio(opts, 0.0);
    rocksdb_options_optimize_level_style_compaction(opts, LEVEL_COMPACTION_BUDGET);
    rocksdb_options_increase_parallelism(opts, (int)o->num_threads);
    /* Each open (a start, and every reload or model load / unload, which
     * executes the coordinator again) rotates the info log to LOG.old.*:
     * keep a few, not RocksDB's 1000. */
    rocksdb_options_set_keep_log_file_num(opts, PDB_INFO_LOGS_KEPT);
    /* Fatal messages only in that LOG (its options header is written at
     * every open): on a full disk a failed append to it makes the next
     * message abort the process (Debian's library keeps RocksDB's
     * assertions), and its INFO lines come from every ingestion, column
     * family change and flush.  What fails reaches our log through the
     * calls' errors. */
    rocksdb_options_set_info_log_level(opts, PDB_INFO_LOG_LEVEL);
    return opts;
}

/*
 * The options of bulk-load SST files: db_opts without compression.  An
 * SstFileWriter compresses with the last level's algorithm (LZ4 after
 * optimize_level_style_compaction); float vectors do not compress, so that
 * only burnt CPU (RocksDB then stores each block as it was anyway).  Reads
 * take a file's compression from the file itself, so nothing else changes.
 */
static rocksdb_options_t *make_sst_options(rocksdb_options_t *db_opts)
{
    rocksdb_options_t *opts = rocksdb_options_create_copy(db_opts);
    int none = rocksdb_no_compression;

    rocksdb_options_set_compression(opts, rocksdb_no_compression);
    rocksdb_options_set_compression_per_level(opts, &none, 1);
    return opts;
}

/* ------------------------------------------------------------------------ */
/* Handle and registry                                                       */
/* ------------------------------------------------------------------------ */

static hps_err_t table_add(hps_pdb_t *db, rocksdb_column_family_handle_t *cf, const char *name,
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

static void table_free(hps_pdb_table_t *t)
{
    rocksdb_column_family_handle_destroy(t->t_cf);
    free(t->t_name);
    free(t);
}

static hps_err_t db_alloc(const char *path, const hps_pdb_opts_t *o, hps_pdb_t **ret)
{
    hps_pdb_t *db = calloc(1, sizeof(*db));

    if (db == NULL)
        return -ENOMEM;
    db->db_cfg = *o;
    pthread_mutex_init(&db->db_lock, NULL);
    *ret = db;
    db->db_path = strdup(path);
    if (db->db_path == NULL)
        return -ENOMEM;
    db->db_opts = make_options(o);
    db->db_sst_opts = make_sst_options(db->db_opts);
    db->db_ropts = rocksdb_readoptions_create();
    db->db_wopts = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(db->db_wopts, 0);
    return 0;
}

/* Free everything of a handle (after rocksdb_close, or when open failed). */
static void db_free(hps_pdb_t *db)
{
    if (db->db_opts != NULL)
        rocksdb_options_destroy(db->db_opts);
    if (db->db_sst_opts != NULL)
        rocksdb_options_destroy(db->db_sst_opts);
    if (db->db_ropts != NULL)
        rocksdb_readoptions_destroy(db->db_ropts);
    if (db->db_wopts != NULL)
        rocksdb_writeoptions_destroy(db->db_wopts);
    pthread_mutex_destroy(&db->db_lock);
    free(db->db_path);
    free(db);
}

/* Names of the column families to open: those listed, or just "default". */
typedef struct cf_list {
    char **names; /* from rocksdb_list_column_families, or NULL */
    size_t n;
    const char **open_names;
    const rocksdb_options_t **open_opts;
    rocksdb_column_family_handle_t **handles;
    size_t n_open;
} cf_list_t;

static void cf_list_free(cf_list_t *l)
{
    if (l->names != NULL)
        rocksdb_list_column_families_destroy(l->names, l->n);
    free(l->open_names);
    free(l->open_opts);
    free(l->handles);
}

/* Errors of opening: a missing directory or CURRENT file is HPS_ENOTFOUND. */
static hps_err_t open_rerr(char *rerr, const char *what, char *err, size_t err_len)
{
    bool missing = rerr != NULL && strstr(rerr, "No such file or directory") != NULL;
    hps_err_t rc = hps__pdb_rerr(rerr, what, err, err_len);

    return missing && rc == HPS_EIO ? HPS_ENOTFOUND : rc;
}

static hps_err_t cf_list_build(hps_pdb_t *db, cf_list_t *l, char *err, size_t err_len)
{
    char *rerr = NULL;
    size_t i;

    l->names = rocksdb_list_column_families(db->db_opts, db->db_path, &l->n, &rerr);
    if (rerr != NULL) {
        /* On failure RocksDB still returns an (empty) malloc'd array. */
        if (l->names != NULL)
            rocksdb_list_column_families_destroy(l->names, 0);
        l->names = NULL;
        l->n = 0;
        if (db->db_cfg.read_only)
            return open_rerr(rerr, db->db_path, err, err_len);
        rocksdb_free(rerr); /* a new database: only "default" */
    }
    l->open_names = calloc(l->n + 1, sizeof(*l->open_names));
    l->open_opts = calloc(l->n + 1, sizeof(*l->open_opts));
    l->handles = calloc(l->n + 1, sizeof(*l->handles));
    if (l->open_names == NULL || l->open_opts == NULL || l->handles == NULL)
        return -ENOMEM;
    for (i = 0; i < l->n; i++)
        l->open_names[i] = l->names[i];
    l->n_open = l->n;
    if (l->n == 0)
        l->open_names[l->n_open++] = DEFAULT_CF;
    for (i = 0; i < l->n_open; i++)
        l->open_opts[i] = db->db_opts;
    return 0;
}

static hps_err_t cf_open(hps_pdb_t *db, cf_list_t *l, char *err, size_t err_len)
{
    char *rerr = NULL;

    if (db->db_cfg.read_only)
        db->db_rdb = rocksdb_open_for_read_only_column_families(db->db_opts, db->db_path,
                                                                (int)l->n_open, l->open_names,
                                                                l->open_opts, l->handles, 0, &rerr);
    else
        db->db_rdb = rocksdb_open_column_families(db->db_opts, db->db_path, (int)l->n_open,
                                                  l->open_names, l->open_opts, l->handles, &rerr);
    if (rerr != NULL) {
        db->db_rdb = NULL;
        return open_rerr(rerr, db->db_path, err, err_len);
    }
    return 0;
}

/* Move the opened handles into the registry; handles[] entries are taken. */
static hps_err_t cf_register(hps_pdb_t *db, cf_list_t *l)
{
    hps_err_t rc = 0;
    size_t i;

    for (i = 0; i < l->n_open; i++) {
        rocksdb_column_family_handle_t *cf = l->handles[i];
        l->handles[i] = NULL;
        if (strcmp(l->open_names[i], DEFAULT_CF) == 0 && db->db_default_cf == NULL)
            db->db_default_cf = cf;
        else if (rc == 0)
            rc = table_add(db, cf, l->open_names[i], NULL);
        if (rc != 0)
            rocksdb_column_family_handle_destroy(cf);
    }
    return rc;
}

/* Destroy all column family handles (the dropped ones still held too)
 * and close RocksDB. */
static void db_close_rocksdb(hps_pdb_t *db)
{
    hps_pdb_table_t **lists[] = {&db->db_tables, &db->db_retired};

    for (size_t i = 0; i < 2; i++)
        while (*lists[i] != NULL) {
            hps_pdb_table_t *t = *lists[i];
            *lists[i] = t->t_next;
            table_free(t);
        }
    if (db->db_default_cf != NULL)
        rocksdb_column_family_handle_destroy(db->db_default_cf);
    db->db_default_cf = NULL;
    if (db->db_rdb != NULL)
        rocksdb_close(db->db_rdb);
    db->db_rdb = NULL;
}

hps_err_t hps_pdb_open(const char *path, const hps_pdb_opts_t *opts, hps_pdb_t **ret_db, char *err,
                       size_t err_len)
{
    hps_pdb_opts_t defaults;
    cf_list_t l = {0};
    hps_pdb_t *db = NULL;
    hps_err_t rc;

    hps_pdb_opts_init(&defaults);
    if (path == NULL || ret_db == NULL) {
        hps__pdb_err(err, err_len, "hps_pdb_open: NULL argument");
        return HPS_EINVAL;
    }
    rc = check_opts(opts != NULL ? opts : &defaults, err, err_len);
    if (rc == 0)
        rc = db_alloc(path, opts != NULL ? opts : &defaults, &db);
    if (rc == 0)
        rc = cf_list_build(db, &l, err, err_len);
    if (rc == 0)
        rc = cf_open(db, &l, err, err_len);
    if (rc == 0)
        rc = cf_register(db, &l);
    cf_list_free(&l);
    if (rc == -ENOMEM)
        hps__pdb_err(err, err_len, "%s: out of memory", path);
    if (rc != 0 && db != NULL) {
        db_close_rocksdb(db);
        db_free(db);
        return rc;
    }
    if (rc == 0 && !db->db_cfg.read_only)
        hps__pdb_clean_ingest_dirs(db->db_path);
    if (rc == 0)
        *ret_db = db;
    return rc;
}

/* Sync the WAL and flush every memtable, so a read-only open sees all. */
static hps_err_t db_flush_all(hps_pdb_t *db, char *err, size_t err_len)
{
    rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
    char *rerr = NULL;
    hps_err_t rc, first;
    hps_pdb_table_t *t;

    rocksdb_flushoptions_set_wait(fo, 1);
    rocksdb_flush_wal(db->db_rdb, 1, &rerr);
    first = hps__pdb_rerr(rerr, "close: syncing the WAL", err, err_len);
    if (first == 0 && db->db_default_cf != NULL) { /* metadata entries */
        rocksdb_flush_cf(db->db_rdb, fo, db->db_default_cf, &rerr);
        first = hps__pdb_rerr(rerr, "close: flushing the metadata", err, err_len);
    }
    for (t = db->db_tables; t != NULL; t = t->t_next) {
        rerr = NULL;
        rocksdb_flush_cf(db->db_rdb, fo, t->t_cf, &rerr);
        rc = hps__pdb_rerr(rerr, t->t_name, first == 0 ? err : NULL, err_len);
        if (first == 0)
            first = rc;
    }
    rocksdb_flushoptions_destroy(fo);
    return first;
}

hps_err_t hps_pdb_close(hps_pdb_t *db, char *err, size_t err_len)
{
    hps_err_t rc = 0;

    if (db == NULL)
        return 0;
    if (__atomic_load_n(&db->db_write_failed, __ATOMIC_RELAXED)) {
        /* The log writer is unusable (see db_write_failed): closing would
         * flush it, which the system library turns into an abort.  Left
         * open, as a killed process leaves it: the next open recovers what
         * the WAL holds; the handle and its memory go with the process. */
        hps__pdb_err(err, err_len,
                     "%s: not closed after a failed write (recovered at the next open)",
                     db->db_path);
        return HPS_EIO;
    }
    if (!db->db_cfg.read_only && db->db_rdb != NULL)
        rc = db_flush_all(db, err, err_len);
    db_close_rocksdb(db);
    db_free(db);
    return rc;
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
    rc = table_add(db, cf, tag, ret);
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

    if (!starts_with(name, HPS_TABLE_TAG_PREFIX ".") || (dot = strchr(m, '.')) == NULL ||
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
        table_free(t);
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
        table_free(t); /* RocksDB deletes the dropped family's files */
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
        rc = map_status(m->errs[i]);
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

/* ------------------------------------------------------------------------ */
/* Counters                                                                  */
/* ------------------------------------------------------------------------ */

#define LOAD(f) atomic_load_explicit(&db->db_cnt.f, memory_order_relaxed)

void hps_pdb_stats(hps_pdb_t *db, hps_pdb_stats_t *ret)
{
    ret->lookup_keys = LOAD(lookup_keys);
    ret->lookup_hits = LOAD(lookup_hits);
    ret->multiget_calls = LOAD(multiget_calls);
    ret->insert_rows = LOAD(insert_rows);
    ret->write_batches = LOAD(write_batches);
    ret->erase_keys = LOAD(erase_keys);
    ret->bulk_rows = LOAD(bulk_rows);
    ret->sst_files = LOAD(sst_files);
    ret->errors = LOAD(errors);
}

#undef LOAD
