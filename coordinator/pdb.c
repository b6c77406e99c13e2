/*
 * pdb.c -- the persistent database over RocksDB's C API: options, open and
 * close, counters.  The table (column family) registry, drop and metadata
 * live in pdb-table.c, insert, lookup and erase in pdb-rows.c, the error
 * mapping and argument checks in pdb-err.c, bulk loading through SST files
 * in pdb-bulk.c.
 *
 * The C API returns errors as malloc'd strings through a char ** out
 * parameter; hps__pdb_rerr() turns each into an hps_err_t plus a message
 * and frees it, so no RocksDB string outlives the call that produced it.
 *
 * Keys are passed to RocksDB as they lie in the caller's buffer: on a
 * little-endian host the bytes of an int64 or uint32 are exactly HugeCTR's
 * raw key bytes, so nothing is copied or converted on the hot paths.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coordinator/pdb-internal.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "HugeCTR's RocksDB layout is little-endian raw bytes; big-endian hosts need a "
               "byte swap of every key");

/* OptimizeLevelStyleCompaction's C++ default memtable budget (the C API has
 * no default arguments). */
#define LEVEL_COMPACTION_BUDGET (512ull * 1024 * 1024)

static const char DEFAULT_CF[] = "default";

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
/* Handle                                                                    */
/* ------------------------------------------------------------------------ */

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
            rc = hps__pdb_table_add(db, cf, l->open_names[i], NULL);
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
            hps__pdb_table_free(t);
        }
    if (db->db_default_cf != NULL)
        rocksdb_column_family_handle_destroy(db->db_default_cf);
    db->db_default_cf = NULL;
    if (db->db_rdb != NULL)
        rocksdb_close(db->db_rdb);
    db->db_rdb = NULL;
}

/*
 * Empty write-ahead logs of earlier opens.  RocksDB creates a WAL at every
 * open, and before 8.3 (Debian 12 has 7.8) does not advance the log number
 * to keep past an empty one until a memtable flush: a process that opens
 * the DB and stops (or is killed) before writing leaves one more 0-byte
 * NNNNNN.log for good (one per coordinator start; a crash loop, one a
 * second).  RocksDB fixed it in 8.3 (facebook/rocksdb#11409); its
 * maintainers give deleting them as the mitigation, safe while
 * track_and_verify_wals_in_manifest is false (the default, not set here).
 * Called with the DB open (its LOCK held: no other process writes here):
 * only logs below the newest, the one this open writes, and only empty
 * ones, whose removal loses nothing.  Best effort.
 */
static bool wal_number(const char *name, unsigned long long *ret)
{
    char *end;
    if (name[0] < '0' || name[0] > '9')
        return false;
    errno = 0;
    *ret = strtoull(name, &end, 10);
    return errno == 0 && strcmp(end, ".log") == 0;
}

static void clean_empty_wals(const char *path)
{
    unsigned long long n, newest = 0;
    struct dirent *e;
    DIR *d = opendir(path);
    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL)
        if (wal_number(e->d_name, &n) && n > newest)
            newest = n;
    rewinddir(d);
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        if (!wal_number(e->d_name, &n) || n >= newest ||
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
            st.st_size != 0)
            continue;
        unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
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
    if (rc == 0 && !db->db_cfg.read_only) {
        hps__pdb_clean_ingest_dirs(db->db_path);
        clean_empty_wals(db->db_path);
    }
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
