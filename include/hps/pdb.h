/*
 * pdb.h -- the persistent database (PDB): embedding tables in RocksDB.
 *
 * Layout (HugeCTR's RocksDBBackend, reference/hugectr-hps.md §4, so a
 * database written by HugeCTR's HPS is readable here and vice versa):
 *  - one column family per table, named by the tag hps_et.<model>.<table>;
 *  - key   = the raw key bytes, sizeof(Key) of them (8 for int64 keys, 4 for
 *            uint32 keys), host order (little-endian on x86-64);
 *  - value = the raw float32 vector, dim * 4 bytes.
 * Neither the dimension nor the key width is stored: every call that moves
 * rows names them, as HugeCTR passed value_size per call.
 *
 * Order.  RocksDB's default comparator is bytewise, so rows are ordered by
 * memcmp of the little-endian key bytes, not numerically: 256 (00 01 00 ..)
 * sorts before 1 (01 00 00 ..), and -1 (ff ff ..) sorts last.  Bulk loads
 * sort by that order before writing SST files (HugeCTR's SST dumps sorted
 * numerically, which RocksDB refuses for keys >= 256; §4, §9).
 *
 * Options (HugeCTR's): create_if_missing, manual_wal_flush,
 * OptimizeForPointLookup(block_cache_mb), OptimizeLevelStyleCompaction(),
 * IncreaseParallelism(num_threads), for the DB and every column family;
 * writes are not synced one by one, each insert/erase call ends with a WAL
 * flush (FlushWAL(sync)).  read_only opens with OpenForReadOnly (a static
 * DB, e.g. on NFS): every write then fails with -EROFS.
 *
 * Thread safety.  One hps_pdb_t may be used by many threads at once:
 * lookups, inserts, erases, bulk loads and table opens may all run
 * concurrently (RocksDB's DB object is thread-safe; the table registry has
 * its own mutex).  Exceptions: hps_pdb_close() must be the last call on the
 * handle, and hps_pdb_drop() must not run while another thread uses the
 * same table handle, unless that thread holds it (hps_pdb_table_hold()).  Concurrent writes of the
 * same key: one of them wins. Do not use a handle in a child after fork().
 *
 * Memory.  Every key, value and mask buffer is host memory owned by the
 * caller.  Table handles (hps_pdb_table_t) are owned by the hps_pdb_t and
 * stay valid until hps_pdb_drop() of that table (its last release, when
 * held) or hps_pdb_close().
 *
 * Errors.  Every fallible function returns 0 or an hps_err_t code and, when
 * err is not NULL, writes a NUL-terminated explanation (RocksDB's own status
 * text where there is one) into err[0..err_len), truncated to fit; err is
 * untouched on success.  RocksDB statuses map to: Corruption ->
 * HPS_ECORRUPT; Busy, TryAgain, TimedOut and a held LOCK file -> HPS_EBUSY;
 * InvalidArgument -> HPS_EINVAL; NotFound -> HPS_ENOTFOUND; IO errors and
 * anything else -> HPS_EIO; the message keeps RocksDB's text.  Nothing is
 * printed.
 *
 * Builds without RocksDB (-Drocksdb=disabled) keep this API; every function
 * then returns HPS_EUNSUPPORTED (hps_pdb_opts_init() and hps_pdb_close()
 * still work).
 */
#ifndef HPS_PDB_H
#define HPS_PDB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hps/hps.h"
#include "hps/modelfile.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hps_pdb hps_pdb_t;
/** A table (column family) of an open PDB; owned by the hps_pdb_t. */
typedef struct hps_pdb_table hps_pdb_table_t;

/** Default num_threads (HugeCTR persistent_db.num_threads). */
#define HPS_PDB_DEFAULT_THREADS 16u
/** Default max_batch_size (HugeCTR persistent_db.max_batch_size). */
#define HPS_PDB_DEFAULT_BATCH 65536u
/** Default block cache of OptimizeForPointLookup, in MiB (HugeCTR's 8). */
#define HPS_PDB_DEFAULT_BLOCK_CACHE_MB 8u

/** Options of hps_pdb_open(); fill with hps_pdb_opts_init() first. */
typedef struct hps_pdb_opts {
    /** num_threads: background threads (IncreaseParallelism); >= 1. */
    unsigned num_threads;
    /** read_only: open with OpenForReadOnly; every write fails with -EROFS. */
    bool read_only;
    /** max_batch_size: rows per WriteBatch and per MultiGet; >= 1. */
    size_t max_batch_size;
    /** OptimizeForPointLookup block cache size in MiB; >= 1. */
    uint64_t block_cache_mb;
    /** Sync the WAL to disk at the end of every write call (FlushWAL(true),
     *  HugeCTR's choice); false flushes it to the OS only. */
    bool sync_wal;
} hps_pdb_opts_t;

/** Counters of one handle (since open); see hps_pdb_stats(). */
typedef struct hps_pdb_stats {
    uint64_t lookup_keys;    /**< keys asked for by hps_pdb_lookup() */
    uint64_t lookup_hits;    /**< of those, found */
    uint64_t multiget_calls; /**< batched MultiGet calls issued */
    uint64_t insert_rows;    /**< rows written by hps_pdb_insert() */
    uint64_t write_batches;  /**< WriteBatches written (insert and erase) */
    uint64_t erase_keys;     /**< keys deleted by hps_pdb_erase() */
    uint64_t bulk_rows;      /**< distinct rows ingested through SST files */
    uint64_t sst_files;      /**< SST files ingested */
    uint64_t errors;         /**< calls that returned an error */
} hps_pdb_stats_t;

/** Callback of hps_pdb_foreach_table(); return non-zero to stop (returned). */
typedef int (*hps_pdb_table_fn)(const char *model, const char *table, void *ctx);

/**
 * @brief Fill opts with HugeCTR's defaults: 16 threads, read-write, batches
 *        of 65536, 8 MiB block cache, WAL synced after each write call.
 * @param[out] opts  Options to fill (host memory).
 * Thread-safe.
 */
void hps_pdb_opts_init(hps_pdb_opts_t *opts);

/**
 * @brief Open (creating if missing) a RocksDB database as the PDB.
 *
 * Lists the existing column families and opens them all (plus "default"),
 * each with the options above.  Read-write opens also remove leftover
 * ingestion directories (.hps-ingest-*) of a bulk load that crashed.
 * A read-only open of a path that holds no database fails.
 *
 * @param[in]  path     Database directory, NUL-terminated.  Copied.
 * @param[in]  opts     Options, or NULL for hps_pdb_opts_init()'s defaults.
 * @param[out] ret_db   The handle; release with hps_pdb_close().  Written
 *                      only on success (nothing to release on failure).
 * @param[out] err      Message buffer (may be NULL).
 * @param[in]  err_len  Size of err.
 *
 * Thread safety: reentrant.  RocksDB allows one read-write opener of a
 * path at a time: a second one, in this process or another, gets HPS_EBUSY.
 *
 * @return 0; HPS_EINVAL (NULL path or ret_db, zero num_threads,
 *         max_batch_size or block_cache_mb; or RocksDB's InvalidArgument,
 *         e.g. options incompatible with the files); HPS_ENOTFOUND (read_only
 *         and no database at path, or a parent directory missing);
 *         HPS_EBUSY (the LOCK is held); HPS_ECORRUPT (corrupt files);
 *         HPS_EIO (other RocksDB I/O failures); -ENOMEM; HPS_EUNSUPPORTED
 *         without RocksDB.
 */
hps_err_t hps_pdb_open(const char *path, const hps_pdb_opts_t *opts, hps_pdb_t **ret_db, char *err,
                       size_t err_len);

/**
 * @brief Close the PDB: sync the WAL, flush every column family's memtable
 *        (read-write only), destroy the handles and close RocksDB.
 *
 * The handle and all its table handles are freed even when the flush fails.
 * After a failed write (a full disk, an I/O error; every later write was
 * refused with HPS_EIO) nothing is flushed, closed or freed: RocksDB's log
 * writer is unusable then, and Debian's library aborts when it is closed.
 * The database is left as a killed process leaves it (its WAL recovered at
 * the next open); the caller should exit or execute a new image soon.
 *
 * @param[in]  db       The handle, or NULL (no-op, returns 0).  Must not be
 *                      in use by any other thread.
 * @param[out] err      Message buffer (may be NULL).
 * @param[in]  err_len  Size of err.
 * @return 0, or the first flush error (HPS_EIO, ...); the DB is closed anyway;
 *         HPS_EIO after a failed write (not closed, as above).
 */
hps_err_t hps_pdb_close(hps_pdb_t *db, char *err, size_t err_len);

/**
 * @brief Get the table hps_et.<model>.<table>, creating its column family
 *        on first use when create is true and the DB is read-write.
 *
 * @param[in]  db        An open PDB.
 * @param[in]  model     Model name, 1..120 chars of [A-Za-z0-9_-].
 * @param[in]  table     Table name, same alphabet.
 * @param[in]  create    Create the column family if it does not exist.
 * @param[out] ret_table The table; owned by db, valid until hps_pdb_drop()
 *                       of it or hps_pdb_close().  Calling again with the
 *                       same names returns the same handle.  Written only on
 *                       success.
 * @param[out] err       Message buffer (may be NULL).
 * @param[in]  err_len   Size of err.
 *
 * Thread-safe (the registry is locked; concurrent first uses create once).
 *
 * @return 0; HPS_EINVAL (NULL argument or bad name); HPS_ENOTFOUND (no such
 *         column family and create is false or the DB is read-only);
 *         HPS_EIO (RocksDB refused to create it); -ENOMEM.
 */
hps_err_t hps_pdb_table(hps_pdb_t *db, const char *model, const char *table, bool create,
                        hps_pdb_table_t **ret_table, char *err, size_t err_len);

/**
 * @brief Call fn(model, table, ctx) for every table (column family named
 *        hps_et.<model>.<table>) of the PDB, in no particular order.
 *
 * @param[in] db   An open PDB.
 * @param[in] fn   Callback; the strings are valid during the call only.  It
 *                 must not call hps_pdb_table(), hps_pdb_drop() or
 *                 hps_pdb_close() (the registry is locked while it runs).
 * @param[in] ctx  Passed through.
 * Thread-safe.
 * @return 0, the first non-zero value fn returned, or HPS_EINVAL (NULL db or
 *         fn).
 */
hps_err_t hps_pdb_foreach_table(hps_pdb_t *db, hps_pdb_table_fn fn, void *ctx);

/**
 * @brief Insert or overwrite rows: WriteBatches of at most max_batch_size
 *        Puts, then one WAL flush.
 *
 * @param[in]  t          A table of a read-write PDB.
 * @param[in]  n          Number of rows (0 is a no-op).
 * @param[in]  keys       (n) keys, host memory: int64 when key_bytes == 8,
 *                        uint32 when key_bytes == 4.
 * @param[in]  key_bytes  4 or 8.
 * @param[in]  values     (n, dim) float32 row-major, host memory.
 * @param[in]  dim        Floats per vector, >= 1.
 * @param[out] err        Message buffer (may be NULL).
 * @param[in]  err_len    Size of err.
 *
 * Duplicate keys in one call: the last row wins.  Not atomic across batches:
 * after an error, earlier batches may be written.  Thread-safe.
 *
 * @return 0; HPS_EINVAL (NULL argument, bad key_bytes or dim); -EROFS
 *         (read-only PDB); HPS_EIO / HPS_ECORRUPT / HPS_EBUSY (RocksDB);
 *         -ENOMEM.
 */
hps_err_t hps_pdb_insert(hps_pdb_table_t *t, size_t n, const void *keys, uint32_t key_bytes,
                         const float *values, uint32_t dim, char *err, size_t err_len);

/**
 * @brief Bulk load rows through an SST file and external-file ingestion.
 *
 * The rows are sorted in RocksDB's bytewise order of the little-endian key
 * bytes (a stable LSD radix sort; duplicate keys keep the last row of the
 * input), written with an SstFileWriter into a private directory
 * <path>/.hps-ingest-XXXXXX, ingested into the table's column family with
 * move_files, and the directory is removed, whether the load succeeded or
 * not.  Ingested rows overwrite older values of the same keys.  Much faster
 * than hps_pdb_insert() for loading a model; needs 32 * n bytes of scratch
 * memory besides the input, and disk space for one SST file.
 *
 * @param[in]  t          A table of a read-write PDB.
 * @param[in]  n          Number of rows (0 is a no-op).
 * @param[in]  keys       (n) keys, host memory, any order: int64 when
 *                        key_bytes == 8, uint32 when key_bytes == 4.
 * @param[in]  key_bytes  4 or 8.
 * @param[in]  values     (n, dim) float32 row-major, host memory.
 * @param[in]  dim        Floats per vector, >= 1.
 * @param[out] err        Message buffer (may be NULL).
 * @param[in]  err_len    Size of err.
 *
 * Thread-safe; concurrent bulk loads use separate directories.
 *
 * @return 0; HPS_EINVAL (NULL argument, bad key_bytes or dim); -EROFS;
 *         -errno (creating the directory, e.g. -ENOSPC); HPS_EIO /
 *         HPS_ECORRUPT (SST writer or ingestion); -ENOMEM.
 */
hps_err_t hps_pdb_bulk_load(hps_pdb_table_t *t, size_t n, const void *keys, uint32_t key_bytes,
                            const float *values, uint32_t dim, char *err, size_t err_len);

/**
 * @brief Staged rows: a table's new contents written as SST files now and
 *        ingested later (hps_pdb_stage_ingest()), so that the rows the
 *        table holds meanwhile stay as they were -- for a model reload,
 *        whose new version is built while the old one serves, and which
 *        must leave the old rows in place if it fails or is killed before
 *        the new version is ready.  The files live in a private directory
 *        under the database path (`.hps-ingest-*`: removed by
 *        hps_pdb_open() when a process died with one).
 *
 * One stage is used by one thread at a time; stages are independent.
 */
typedef struct hps_pdb_stage hps_pdb_stage_t;

/**
 * @brief Open an empty stage in db's directory.
 * @param[in]  what  The table it is for, for messages (copied).
 * @param[out] ret   The stage; hps_pdb_stage_close() frees it.
 * @return 0; HPS_EINVAL (NULL argument); -EROFS (db read-only); -errno
 *         (creating the directory, e.g. -ENOSPC); -ENOMEM.
 */
hps_err_t hps_pdb_stage_open(hps_pdb_t *db, const char *what, hps_pdb_stage_t **ret, char *err,
                             size_t err_len);

/**
 * @brief Write rows as the stage's next SST file (sorted, one row per
 *        distinct key, the last row of a repeated key winning, as
 *        hps_pdb_bulk_load()); keys, key_bytes, values and dim as there
 *        (host memory, (n) keys, (n, dim) float32).  Later calls' rows win
 *        over earlier ones' at ingestion.  n == 0 writes nothing.
 * @return 0; HPS_EINVAL (NULL argument, bad key_bytes or dim); HPS_EIO
 *         (the SST writer, e.g. a full disk); -ENOMEM.
 */
hps_err_t hps_pdb_stage_rows(hps_pdb_stage_t *s, size_t n, const void *keys, uint32_t key_bytes,
                             const float *values, uint32_t dim, char *err, size_t err_len);

/**
 * @brief Ingest the stage's files into t, in the order they were written
 *        (RocksDB moves them: no copy).  Meant for a table just created or
 *        emptied: rows t holds are shadowed where keys repeat and kept
 *        elsewhere.  A failure leaves the files ingested so far in t and
 *        the rest in the stage (calling again goes on from there).
 * @param[in] t  A table of the stage's database.
 * @return 0; HPS_EINVAL (NULL, or a table of another database); -EROFS;
 *         HPS_EIO / HPS_ECORRUPT (ingestion); -ENOMEM.
 */
hps_err_t hps_pdb_stage_ingest(hps_pdb_stage_t *s, hps_pdb_table_t *t, char *err, size_t err_len);

/**
 * @brief Remove the stage's files not ingested and its directory; free it.
 *        Files already ingested belong to their table and stay.  Failures
 *        to remove (unlink, rmdir) are ignored, not reported: what is left
 *        is removed by the next hps_pdb_open() of the path.  The database
 *        is not touched, so this may also follow hps_pdb_close().
 *        NULL: no-op.  No other call on s may be running (stages are
 *        independent; one thread at a time each).
 */
void hps_pdb_stage_close(hps_pdb_stage_t *s);

/**
 * @brief Bulk load a whole sparse model table (validated by
 *        hps_modelfile_open()) into t, chunk by chunk through
 *        hps_pdb_bulk_load().
 *
 * Each chunk of chunk_rows rows is read, narrowed to uint32 when key_bytes
 * == 4 (keys outside [0, 2^32) are refused, not truncated), and ingested as
 * one SST file; later chunks win for keys repeated across chunks (file
 * order, as HugeCTR's chunked insert).
 *
 * @param[in]  t           A table of a read-write PDB.
 * @param[in]  mf          An open model table; its dim is used.
 * @param[in]  key_bytes   4 or 8: the key width stored in RocksDB.
 * @param[in]  chunk_rows  Rows per chunk; 0 = hps_modelfile_chunk_rows(mf, 0)
 *                         (HugeCTR's ten chunks).
 * @param[out] err         Message buffer (may be NULL).
 * @param[in]  err_len     Size of err.
 *
 * Thread-safe.  After an error, earlier chunks stay ingested.
 *
 * @return 0; the codes of hps_modelfile_read() / hps_modelfile_read_u32()
 *         and hps_pdb_bulk_load().
 */
hps_err_t hps_pdb_load_modelfile(hps_pdb_table_t *t, hps_modelfile_t *mf, uint32_t key_bytes,
                                 uint64_t chunk_rows, char *err, size_t err_len);

/**
 * @brief Load every table of a model: validate all of them first
 *        (hps_modelfile_validate_model()), then create each column family
 *        hps_et.<model>.<table> and bulk load it.
 *
 * A model with any malformed table is refused before anything is created or
 * written.  An I/O error during loading may leave earlier tables loaded.
 *
 * @param[in]  db          A read-write PDB.
 * @param[in]  model       Model name, 1..120 chars of [A-Za-z0-9_-].
 * @param[in]  specs       (n) tables, host memory.
 * @param[in]  n           Number of tables, >= 1.
 * @param[in]  chunk_rows  As hps_pdb_load_modelfile().
 * @param[out] err         Message buffer (may be NULL).
 * @param[in]  err_len     Size of err.
 *
 * Thread-safe.
 *
 * @return 0; the codes of hps_modelfile_validate_model(), hps_pdb_table()
 *         and hps_pdb_load_modelfile(); HPS_EINVAL for a bad model name;
 *         -EROFS for a read-only PDB.
 */
hps_err_t hps_pdb_load_model(hps_pdb_t *db, const char *model, const hps_modelfile_spec_t *specs,
                             size_t n, uint64_t chunk_rows, char *err, size_t err_len);

/**
 * @brief Look up keys: batched MultiGet over at most max_batch_size keys
 *        per call.
 *
 * @param[in]  t          A table.
 * @param[in]  n          Number of keys (0 is a no-op).
 * @param[in]  keys       (n) keys, host memory, any order, duplicates
 *                        allowed: int64 when key_bytes == 8, uint32 when 4.
 * @param[in]  key_bytes  4 or 8.
 * @param[in]  dim        Floats per vector, >= 1.
 * @param[out] values     (n, dim) float32 row-major, host memory; row i is
 *                        written when keys[i] is found and left untouched
 *                        when it is missing.
 * @param[out] found      (n) flags, host memory, or NULL: found[i] is true
 *                        when keys[i] was found.
 * @param[out] ret_hits   Number of keys found, or NULL.
 * @param[out] err        Message buffer (may be NULL).
 * @param[in]  err_len    Size of err.
 *
 * On error, values, found and ret_hits are unspecified.  Thread-safe: any
 * number of threads may look up (the same or different tables) at once.
 *
 * @return 0; HPS_EINVAL (NULL argument, bad key_bytes or dim);
 *         HPS_ECORRUPT (a stored value is not dim * 4 bytes: the table was
 *         written with another dim; the message names the key and sizes;
 *         also RocksDB corruption); HPS_EIO / HPS_EBUSY (RocksDB); -ENOMEM.
 */
hps_err_t hps_pdb_lookup(hps_pdb_table_t *t, size_t n, const void *keys, uint32_t key_bytes,
                         uint32_t dim, float *values, bool *found, size_t *ret_hits, char *err,
                         size_t err_len);

/**
 * @brief Delete keys (batched Deletes, then one WAL flush).  Missing keys are
 *        not an error.
 *
 * @param[in]  t          A table of a read-write PDB.
 * @param[in]  n          Number of keys (0 is a no-op).
 * @param[in]  keys       (n) keys, host memory, as hps_pdb_insert().
 * @param[in]  key_bytes  4 or 8.
 * @param[out] err        Message buffer (may be NULL).
 * @param[in]  err_len    Size of err.
 * Thread-safe.
 * @return 0; HPS_EINVAL; -EROFS; HPS_EIO / HPS_ECORRUPT / HPS_EBUSY; -ENOMEM.
 */
hps_err_t hps_pdb_erase(hps_pdb_table_t *t, size_t n, const void *keys, uint32_t key_bytes,
                        char *err, size_t err_len);

/**
 * @brief Drop a table: DropColumnFamily, then free its handle, or, while
 *        the handle is held (hps_pdb_table_hold()), keep it readable until
 *        its last hps_pdb_table_release().
 *
 * RocksDB keeps a dropped column family's data for as long as a handle of
 * it exists, and a column family of the same name can be created beside
 * it: a held handle goes on reading the rows it had (the table of a model
 * version that still serves), whatever the new table of that name gets.
 * Writes through a dropped handle are not refused by RocksDB but vanish
 * with it: do not write through one.
 *
 * @param[in]  t        A table of a read-write PDB.  Unheld: invalid
 *                      afterwards, on success; no other thread may use it
 *                      during the call.  Held: still valid for lookups by
 *                      its holders, no longer found by hps_pdb_table() or
 *                      hps_pdb_foreach_table().  hps_pdb_table() with create
 *                      can make the table anew either way.
 * @param[out] err      Message buffer (may be NULL).
 * @param[in]  err_len  Size of err.
 * Thread-safe with respect to other tables, and to holders of t.
 * @return 0; HPS_EINVAL (NULL t); -EROFS; HPS_EIO (RocksDB).  On error the
 *         handle stays valid.
 */
hps_err_t hps_pdb_drop(hps_pdb_table_t *t, char *err, size_t err_len);

/**
 * @brief Hold a table handle: hps_pdb_drop() of it then keeps it readable
 *        (a dropped column family's rows, as they were) until the matching
 *        hps_pdb_table_release().
 *
 * Used by hps-coordinator while it builds a new model version: the version
 * that serves goes on answering its misses from the rows it was built
 * from, while the new version's files are ingested into a new column family
 * of the same name.
 *
 * @param[in] t  A table of an open PDB.  Holds nest (a count).
 * Thread-safe (the registry's lock).  hps_pdb_close() frees held handles
 * too: release every hold, or stop using them, before it.
 */
void hps_pdb_table_hold(hps_pdb_table_t *t);

/**
 * @brief Release a hold of hps_pdb_table_hold(): the last release of a
 *        dropped table frees its handle (and RocksDB then deletes its rows).
 *
 * @param[in] t  A held table, or NULL (no-op).  Invalid afterwards when it
 *               was dropped and this was its last hold.
 * Thread-safe.
 */
void hps_pdb_table_release(hps_pdb_table_t *t);

/**
 * @brief Estimated number of rows of a table (RocksDB property
 *        rocksdb.estimate-num-keys).
 *
 * This is an ESTIMATE: overwrites and deletes still in memtables or
 * uncompacted files count twice or not at all, so it can be above or below
 * the true count until compaction.  An existing, empty table gives 0.
 * (HugeCTR's size() had its existence check inverted and returned 0 for
 * every existing table; not here.)
 *
 * @param[in]  t         A table.
 * @param[out] ret_rows  The estimate; written only on success.
 * Thread-safe.
 * @return 0; HPS_EINVAL (NULL argument); HPS_EIO (property unavailable).
 */
hps_err_t hps_pdb_rows_estimate(hps_pdb_table_t *t, uint64_t *ret_rows);

/**
 * @brief The tag of a table, "hps_et.<model>.<table>" (its column family).
 * @param[in] t  A table.
 * @return A NUL-terminated string owned by the table, valid as long as t.
 * Thread-safe.
 */
const char *hps_pdb_table_name(const hps_pdb_table_t *t);

/** Longest value of hps_pdb_meta_get() / hps_pdb_meta_put(), bytes with the NUL. */
#define HPS_PDB_META_MAX 4096

/**
 * @brief Read a metadata entry: a small string stored under "hps.meta.<name>"
 *        in the default column family (never a table's), e.g. the identity
 *        of the model files loaded into a table.
 *
 * @param[in]  db       An open PDB (read-only or read-write).
 * @param[in]  name     NUL-terminated entry name, 1..300 bytes.
 * @param[out] buf      Receives the NUL-terminated value (host memory).
 * @param[in]  len      Size of buf; HPS_PDB_META_MAX holds any value.
 * @param[out] err      Message buffer (may be NULL).
 * @param[in]  err_len  Size of err.
 * Thread-safe.
 * @return 0; HPS_ENOTFOUND (no such entry; buf is ""); HPS_EINVAL (NULL
 *         argument, bad name, or the value does not fit in len);
 *         HPS_EIO or another mapped RocksDB status.
 */
hps_err_t hps_pdb_meta_get(hps_pdb_t *db, const char *name, char *buf, size_t len, char *err,
                           size_t err_len);

/**
 * @brief Store (value != NULL) or delete (value == NULL) a metadata entry,
 *        durably: the WAL is synced before returning, so the entry survives
 *        a crash (SIGKILL, power loss) once this returns 0.
 *
 * @param[in]  db       A read-write PDB.
 * @param[in]  name     As in hps_pdb_meta_get().
 * @param[in]  value    NUL-terminated, shorter than HPS_PDB_META_MAX; or NULL.
 * @param[out] err      Message buffer (may be NULL).
 * @param[in]  err_len  Size of err.
 * Thread-safe.
 * @return 0 (deleting a missing entry too); HPS_EINVAL (NULL db or name,
 *         bad name, value too long); -EROFS (read-only); HPS_EIO or another
 *         mapped RocksDB status.
 */
hps_err_t hps_pdb_meta_put(hps_pdb_t *db, const char *name, const char *value, char *err,
                           size_t err_len);

/**
 * @brief Counters of the handle since it was opened.
 * @param[in]  db   An open PDB.
 * @param[out] ret  The counters (host memory).  Each is read atomically;
 *                  the set is not a single snapshot.
 * Thread-safe.
 */
void hps_pdb_stats(hps_pdb_t *db, hps_pdb_stats_t *ret);

#ifdef __cplusplus
}
#endif
#endif /* HPS_PDB_H */
