/*
 * pdb-internal.h -- private structures of the RocksDB persistent database,
 * shared by pdb.c (options, handle, counters), pdb-err.c (errors, argument
 * checks), pdb-table.c (column families, metadata), pdb-rows.c (point
 * operations) and pdb-bulk.c (sorted SST ingestion, model loading).  Not
 * installed.
 */
#ifndef HPS_COORDINATOR_PDB_INTERNAL_H
#define HPS_COORDINATOR_PDB_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include <rocksdb/c.h>

#include "hps/pdb.h"

/*
 * Counters.  Relaxed atomics: each is an independent tally read for
 * metrics; nothing is ordered by them, so no fence is needed.
 */
struct hps__pdb_counters {
    _Atomic uint64_t lookup_keys;
    _Atomic uint64_t lookup_hits;
    _Atomic uint64_t multiget_calls;
    _Atomic uint64_t insert_rows;
    _Atomic uint64_t write_batches;
    _Atomic uint64_t erase_keys;
    _Atomic uint64_t bulk_rows;
    _Atomic uint64_t sst_files;
    _Atomic uint64_t errors;
};

/* One column family.  Immutable after creation except the fields under
 * db_lock. */
struct hps_pdb_table {
    hps_pdb_t *t_db;
    rocksdb_column_family_handle_t *t_cf;
    char *t_name;                 /* the column family name (tag) */
    struct hps_pdb_table *t_next; /* db_tables, or db_retired once dropped while held; db_lock */
    unsigned t_holds;             /* hps_pdb_table_hold() count; db_lock */
};

struct hps_pdb {
    rocksdb_t *db_rdb;
    rocksdb_options_t *db_opts;     /* DB and column family options (shared) */
    rocksdb_options_t *db_sst_opts; /* db_opts for bulk-load SST files: uncompressed
                                       (embedding floats do not compress; see pdb-bulk.c) */
    rocksdb_readoptions_t *db_ropts;
    rocksdb_writeoptions_t *db_wopts;
    rocksdb_column_family_handle_t *db_default_cf;
    char *db_path;
    hps_pdb_opts_t db_cfg;
    pthread_mutex_t db_lock;     /* guards db_tables */
    hps_pdb_table_t *db_tables;  /* every non-default column family */
    hps_pdb_table_t *db_retired; /* dropped while held: freed at their last release; db_lock */
    struct hps__pdb_counters db_cnt;
    /* A write, WAL flush, ingestion or column-family change failed (a full
     * disk, an I/O error): RocksDB's log writer is then unusable, and the
     * system library asserts (aborts) on its next use, so no further write
     * is made until the database is opened again (hps__pdb_check_writable)
     * and close does not flush.  Set by hps__pdb_wrote; __atomic, relaxed. */
    bool db_write_failed;
};

/** Prefix of the private bulk-load directories under the DB path. */
#define HPS__PDB_INGEST_PREFIX ".hps-ingest-"

/** Add v to a counter (relaxed: see struct hps__pdb_counters). */
#define HPS__PDB_COUNT(db, field, v)                                                               \
    atomic_fetch_add_explicit(&(db)->db_cnt.field, (uint64_t)(v), memory_order_relaxed)

/* printf into err (NULL-safe, truncating). */
__attribute__((format(printf, 3, 4))) void hps__pdb_err(char *err, size_t err_len, const char *fmt,
                                                        ...);

/*
 * Turn a RocksDB error string (malloc'd by RocksDB, may be NULL) into a code,
 * write "<what>: <rocksdb text>" into err and free the string.  Returns 0 when
 * rerr is NULL.
 */
hps_err_t hps__pdb_rerr(char *rerr, const char *what, char *err, size_t err_len);

/* Count an error of db and return rc unchanged. */
hps_err_t hps__pdb_fail(hps_pdb_t *db, hps_err_t rc);

/* Common argument checks of the row operations (key_bytes, dim, pointers). */
hps_err_t hps__pdb_check_args(size_t n, const void *keys, uint32_t key_bytes, const void *values,
                              uint32_t dim, const char *what, char *err, size_t err_len);

/* hps__pdb_check_args(), and t not NULL. */
hps_err_t hps__pdb_check_rows(const hps_pdb_table_t *t, size_t n, const void *keys,
                              uint32_t key_bytes, const void *values, uint32_t dim,
                              const char *what, char *err, size_t err_len);

/* rc of a RocksDB write, WAL flush, ingestion or column-family change of
 * db: an error marks db (db_write_failed).  Returns rc. */
hps_err_t hps__pdb_wrote(hps_pdb_t *db, hps_err_t rc);

/* -EROFS with a message when db is read-only, HPS_EIO when a write failed
 * since it was opened (db_write_failed), else 0. */
hps_err_t hps__pdb_check_writable(const hps_pdb_t *db, const char *what, char *err, size_t err_len);

/* pdb-err.c: whether s begins with prefix. */
bool hps__pdb_starts_with(const char *s, const char *prefix);

/* pdb-err.c: the code of a RocksDB status string (Status::ToString()). */
hps_err_t hps__pdb_map_status(const char *s);

/* pdb-table.c: register column family cf as table name of db (db_tables);
 * *ret (when not NULL) is the new table.  -ENOMEM. */
hps_err_t hps__pdb_table_add(hps_pdb_t *db, rocksdb_column_family_handle_t *cf, const char *name,
                             hps_pdb_table_t **ret);

/* pdb-table.c: destroy t's column family handle and free t (unlinked). */
void hps__pdb_table_free(hps_pdb_table_t *t);

/* Remove leftover bulk-load directories under the DB path (best effort). */
void hps__pdb_clean_ingest_dirs(const char *path);

#endif /* HPS_COORDINATOR_PDB_INTERNAL_H */
