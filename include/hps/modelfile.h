/*
 * modelfile.h -- HugeCTR sparse model files: validation and chunked reading.
 *
 * A sparse model table is a directory (e.g. wdl0_sparse_20000.model/) with
 * two raw files, no header (reference/hugectr-hps.md §1.1):
 *
 *     key         N keys, int64, host byte order -- always 8 bytes per key,
 *                 even for models with 32-bit keys (training widens them)
 *     emb_vector  N x dim float32, row i belongs to key i
 *     meta        optional; ignored here (HugeCTR never really used it)
 *     slot_id     optional; ignored (HugeCTR's HPS ignores it too)
 *
 * The dimension is not in the files; it comes from the configuration
 * (embedding_vecsize_per_table).  HugeCTR checked only that key is a whole
 * number of int64 and emb_vector a whole number of floats; it did not check
 * that emb_vector holds exactly N * dim floats, so a wrong dim loaded
 * garbage.  hps_modelfile_open() refuses every such table, with a message
 * that names both files, their sizes, N, the dim and the expected and actual
 * vector bytes, before the caller writes anything anywhere.
 *
 * Reading is chunked (HugeCTR reads a table in chunks to bound start-up
 * memory; §1.3): hps_modelfile_read() copies rows [first_row, first_row + n)
 * with pread(), so several threads may read disjoint or overlapping chunks
 * of one open table at once.
 *
 * 32-bit-key models: the key file still holds int64.  HugeCTR truncated each
 * key with static_cast<unsigned>; this module refuses a key outside
 * [0, 2^32) with a message naming the file and the row instead.
 *
 * Memory: every buffer of this API is host memory owned by the caller.
 * Errors: every fallible function returns 0 or an hps_err_t code and, when
 * err is not NULL, writes a NUL-terminated explanation into err[0..err_len)
 * (truncated to fit).  err is left untouched on success.  Nothing is printed.
 */
#ifndef HPS_MODELFILE_H
#define HPS_MODELFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hps/hps.h"

#ifdef __cplusplus
extern "C" {
#endif

/** An open sparse model table (two file descriptors and the sizes). */
typedef struct hps_modelfile hps_modelfile_t;

/** Largest dimension accepted (floats per vector). */
#define HPS_MODELFILE_MAX_DIM ((unsigned)HPS_MAX_DIM)

/** HugeCTR splits a table into this many chunks when no chunk size is given. */
#define HPS_MODELFILE_DEFAULT_CHUNKS 10u

/** One table of a model, for hps_modelfile_validate_model(). */
typedef struct hps_modelfile_spec {
    /** Table name (embedding_table_names[i]): 1..120 chars of [A-Za-z0-9_-].
     *  Used in messages and, by the caller, in the tag hps_et.<model>.<table>. */
    const char *table;
    /** The table's directory (sparse_files[i]); holds key and emb_vector. */
    const char *dir;
    /** embedding_vecsize_per_table[i]: floats per vector, 1..HPS_MODELFILE_MAX_DIM. */
    uint32_t dim;
    /** 8 (int64 keys, supportlonglong) or 4 (uint32 keys). */
    uint32_t key_bytes;
} hps_modelfile_spec_t;

/**
 * @brief Open and validate one table directory.
 *
 * Checks, in this order, before returning a handle (nothing is read but the
 * file sizes):
 *  - dir/key exists and is a regular file, else HPS_ENOTFOUND (HPS_EINVAL
 *    when it exists but is not a regular file);
 *  - dir/emb_vector likewise;
 *  - key size > 0 and a multiple of 8, else HPS_ETRUNCATED;
 *  - emb_vector size a multiple of 4, else HPS_ETRUNCATED;
 *  - emb_vector size == N * dim * 4 where N = key size / 8: smaller is
 *    HPS_ETRUNCATED (a truncated file or a dim too large), larger is
 *    HPS_EINVAL (a dim too small or trailing data).  The message names
 *    both files, their sizes, N, dim, the expected and actual bytes and,
 *    when the size is a whole number of rows, the dim the file would fit.
 *
 * @param[in]  dir     Table directory, NUL-terminated.  Copied.
 * @param[in]  dim     Floats per vector, 1..HPS_MODELFILE_MAX_DIM.
 * @param[out] ret_mf  The open table; released with hps_modelfile_close().
 *                     Written only on success.
 * @param[out] err     Message buffer (may be NULL).
 * @param[in]  err_len Size of err in bytes.
 *
 * Thread safety: reentrant (no shared state).
 *
 * @return 0; HPS_EINVAL (NULL argument, bad dim, not a regular file, vector
 *         file too large for N and dim); HPS_ENOTFOUND (dir, key or
 *         emb_vector missing); HPS_ETRUNCATED (empty or partial key file,
 *         partial float, too few vector bytes); -ENOMEM; other -errno from
 *         open(2) or fstat(2) (e.g. -EACCES).
 */
hps_err_t hps_modelfile_open(const char *dir, uint32_t dim, hps_modelfile_t **ret_mf, char *err,
                             size_t err_len);

/**
 * @brief hps_modelfile_open() and close: whether a table's files are in
 *        place, regular and sized for dim (nothing is read but the sizes).
 * @return As hps_modelfile_open(); err as there.  Reentrant.
 */
hps_err_t hps_modelfile_check_open(const char *dir, uint32_t dim, char *err, size_t err_len);

/** Bytes of an err buffer for these functions' messages (and the caller's
 *  words around them): a path of PATH_MAX (4096) bytes and the rest. */
#define HPS_PATH_MSG_MAX 4608

/**
 * @brief Make every later read of model files in this process fail with
 *        -ECANCELED, err "<file>: not read: the process is stopping".
 *
 * For a process that stops while it loads (hps-coordinator on SIGTERM or
 * SIGINT): every reader here reads in pieces of at most a few MiB (the
 * callers' chunks: hps_modelfile_read(), hps_modelfile_scan(),
 * hps_modelfile_check_table(), the persistent DB's bulk load), so a load
 * stops within one piece instead of reading the rest of the model.  Files
 * opened meanwhile still open; only reads fail.  There is no way back.
 *
 * Thread safety: any thread; async-signal-safe (one atomic store).
 */
void hps_modelfile_cancel(void);

/**
 * @brief Close a table opened by hps_modelfile_open(): close its two file
 *        descriptors (key and vector files; the files are not changed) and
 *        free the handle.  close(2) errors are ignored (the files were only
 *        read).  The string of hps_modelfile_dir() is freed with it.
 * @param[in] mf  The table, or NULL (no-op).  No other call on mf may be
 *                running (a hps_modelfile_read() of another thread
 *                included); the handle is invalid afterwards.
 */
void hps_modelfile_close(hps_modelfile_t *mf);

/**
 * @brief Number of rows N (keys) of the table.
 * @param[in] mf  An open table.  Thread-safe (the value is fixed at open).
 * @return N >= 1.
 */
uint64_t hps_modelfile_rows(const hps_modelfile_t *mf);

/**
 * @brief The dimension given to hps_modelfile_open().
 * @param[in] mf  An open table.  Thread-safe.
 * @return dim.
 */
uint32_t hps_modelfile_dim(const hps_modelfile_t *mf);

/**
 * @brief The table directory given to hps_modelfile_open().
 * @param[in] mf  An open table.  Thread-safe.
 * @return A NUL-terminated string owned by mf, valid until it is closed.
 */
const char *hps_modelfile_dir(const hps_modelfile_t *mf);

/**
 * @brief Rows per chunk for a memory budget.
 *
 * @param[in] mf         An open table.
 * @param[in] max_bytes  Bytes one chunk of keys (8 per row) and vectors
 *                       (dim * 4 per row) may take; 0 = HugeCTR's rule, the
 *                       table in HPS_MODELFILE_DEFAULT_CHUNKS chunks
 *                       (ceil(N / 10) rows).
 *
 * Thread-safe.
 * @return Rows per chunk, in [1, N].
 */
uint64_t hps_modelfile_chunk_rows(const hps_modelfile_t *mf, uint64_t max_bytes);

/**
 * @brief Read rows [first_row, first_row + n) of the table.
 *
 * @param[in]  mf         An open table.
 * @param[in]  first_row  First row, < N (any value when n == 0).
 * @param[in]  n          Rows; first_row + n <= N.
 * @param[out] keys       (n) int64 keys, host memory, or NULL to skip the keys.
 * @param[out] vectors    (n, dim) float32 row-major, host memory, or NULL to
 *                        skip the vectors.
 * @param[out] err        Message buffer (may be NULL).
 * @param[in]  err_len    Size of err.
 *
 * On failure the contents of keys and vectors are unspecified.
 *
 * Thread safety: any number of threads may read one table at once (pread).
 *
 * @return 0; HPS_EINVAL (NULL mf, range outside [0, N)); HPS_ETRUNCATED (a
 *         file became shorter than it was at open); -ECANCELED after
 *         hps_modelfile_cancel(); -errno from pread(2) (e.g. -EIO).
 */
hps_err_t hps_modelfile_read(hps_modelfile_t *mf, uint64_t first_row, size_t n, int64_t *keys,
                             float *vectors, char *err, size_t err_len);

/**
 * @brief Read rows of a 32-bit-key table: as hps_modelfile_read(), with every
 *        key narrowed to uint32 and checked to lie in [0, 2^32).
 *
 * @param[out] keys  (n) uint32 keys, host memory, or NULL to skip keys (and
 *                   the range check).
 * Other parameters as hps_modelfile_read().
 *
 * Thread safety: as hps_modelfile_read().
 *
 * @return As hps_modelfile_read(), plus HPS_EINVAL when a key is negative or
 *         >= 2^32; the message names the key file, the row and the key.
 */
hps_err_t hps_modelfile_read_u32(hps_modelfile_t *mf, uint64_t first_row, size_t n, uint32_t *keys,
                                 float *vectors, char *err, size_t err_len);

/**
 * @brief Narrow int64 keys to uint32, refusing keys outside [0, 2^32).
 *
 * @param[in]  in          (n) int64 keys, host memory.
 * @param[in]  n           Number of keys.
 * @param[out] out         (n) uint32 keys, host memory.  May alias in (the
 *                         conversion runs forward, so in-place is safe).
 * @param[out] ret_bad     Index of the first out-of-range key; written only
 *                         on HPS_EINVAL.  May be NULL.
 *
 * Pure function; thread-safe.  On HPS_EINVAL, out[0 .. *ret_bad) is written.
 * @return 0, or HPS_EINVAL when a key is out of range.
 */
hps_err_t hps_modelfile_keys_to_u32(const int64_t *in, size_t n, uint32_t *out, size_t *ret_bad);

/**
 * @brief Validate every table of a model before any of it is loaded.
 *
 * Opens each table with hps_modelfile_open() (same checks and codes), and
 * for tables with key_bytes == 4 reads the whole key file (8 bytes per row,
 * in 1 MiB pieces) to check that every key fits in uint32.  Also checks that
 * each spec has a valid table name (1..120 chars of [A-Za-z0-9_-]), a
 * key_bytes of 4 or 8, and that no name is given twice.  Stops at the first
 * bad table; the message starts with "table '<name>': ".
 *
 * A model that passes can still fail to load on an I/O error or if a file
 * changes in between; format errors are all caught here, so a loader that
 * calls this first writes nothing for a malformed model.
 *
 * @param[in]  specs    (n) table descriptions, host memory.
 * @param[in]  n        Number of tables, >= 1.
 * @param[out] ret_rows Total rows of all tables; written only on success.
 *                      May be NULL.
 * @param[out] err      Message buffer (may be NULL).
 * @param[in]  err_len  Size of err.
 *
 * Thread safety: reentrant.
 *
 * @return 0, or the first error: the codes of hps_modelfile_open() and
 *         hps_modelfile_read_u32(), HPS_EINVAL for a bad name, key_bytes, a
 *         duplicate name or n == 0.
 */
hps_err_t hps_modelfile_validate_model(const hps_modelfile_spec_t *specs, size_t n,
                                       uint64_t *ret_rows, char *err, size_t err_len);

/**
 * @brief Whether a model or table name is valid: 1..120 characters of
 *        [A-Za-z0-9_-] (HugeCTR's rule for tags and Kafka topics).
 * @param[in] name  NUL-terminated string, or NULL (invalid).
 * Pure function; thread-safe.
 * @return true when valid.
 */
bool hps_modelfile_name_ok(const char *name);

/* ------------------------------------------------------------------------ */
/* Contents: NaN / Inf values and duplicate keys                             */
/* ------------------------------------------------------------------------ */

/** Kinds of bad rows, for the `what` / `refuse` masks below. */
#define HPS_MODELFILE_NONFINITE  0x1u /**< a vector with a NaN or +-Inf element */
#define HPS_MODELFILE_DUPLICATES 0x2u /**< a key given on more than one row */

/**
 * Content counts of one table (hps_modelfile_scan()).  Rows are 0-based
 * indices in file order; keys are as in the key file (int64).
 *
 * Which row of a duplicated key wins: the LAST one in the file.  Every layer
 * loads it that way: the persistent DB (a stable sort keeps the last row of
 * each key of a chunk, and a later chunk's SST file is ingested over an
 * earlier one), the volatile and the distributed DB (rows are upserted in
 * file order; a partial initial_cache_rate fill writes the key's last row).
 */
typedef struct hps_modelfile_stats {
    uint64_t rows;                /**< N */
    uint64_t nonfinite_rows;      /**< rows with at least one NaN or +-Inf element */
    uint64_t first_nonfinite_row; /**< the first of them; UINT64_MAX when none */
    int64_t first_nonfinite_key;  /**< its key; 0 when none */
    uint64_t dup_keys;            /**< distinct keys given on more than one row */
    uint64_t dup_rows;            /**< rows overridden by a later row of the same key
                                       (N - number of distinct keys) */
    uint64_t first_dup_row;       /**< the first row whose key an earlier row already
                                       gave; UINT64_MAX when none */
    int64_t first_dup_key;        /**< its key; 0 when none */
} hps_modelfile_stats_t;

/** A key given on more than one row, and the row that wins (its last). */
typedef struct hps_modelfile_dup {
    int64_t key;
    uint64_t last_row;
} hps_modelfile_dup_t;

/**
 * @brief Read a whole table once and count its bad rows.
 *
 * Reads every key and vector (4 MiB of vectors at a time, pread), checks
 * each vector for NaN / +-Inf elements (exponent bits all ones) and puts
 * every key in a hash set to find keys given twice.  The set is transient:
 * 12 to 24 bytes per row of the table, freed before returning, plus 16
 * bytes per duplicate row.
 *
 * @param[in]  mf         An open table.
 * @param[out] ret_stats  The counts; written on success.
 * @param[out] ret_dups   With ret_ndups: every duplicated key with its last
 *                        row, sorted by key (malloc'd, free() it; NULL when
 *                        none).  May be NULL (not wanted).
 * @param[out] ret_ndups  Number of entries, == ret_stats->dup_keys.
 * @param[out] err, err_len  Message buffer.
 *
 * Thread safety: reentrant; mf may be read by other threads meanwhile.
 * @return 0; HPS_EINVAL (NULL argument); -ENOMEM; the read errors of
 *         hps_modelfile_read().
 */
hps_err_t hps_modelfile_scan(hps_modelfile_t *mf, hps_modelfile_stats_t *ret_stats,
                             hps_modelfile_dup_t **ret_dups, size_t *ret_ndups, char *err,
                             size_t err_len);

/**
 * @brief Describe the bad rows of a table in words, e.g.
 *        "DIR/emb_vector: 2 rows with a NaN or Inf value (first: row 17,
 *        key 12345); DIR/key: 1 key on more than one row, 1 row overridden
 *        by a later row of the same key (first: row 9 repeats key 42)".
 *
 * @param[in]  st    Counts from hps_modelfile_scan().
 * @param[in]  dir   The table directory (named in the text).
 * @param[in]  what  HPS_MODELFILE_NONFINITE and/or HPS_MODELFILE_DUPLICATES:
 *                   the kinds to describe (a kind with a count of 0 is left out).
 * @param[out] buf   Output, NUL-terminated, truncated to len.
 * @param[in]  len   Size of buf (> 0).
 * Pure function; thread-safe.
 * @return true when something was written (some described kind has a count).
 */
bool hps_modelfile_stats_format(const hps_modelfile_stats_t *st, const char *dir, unsigned what,
                                char *buf, size_t len);

/**
 * @brief Open one table, scan its contents (hps_modelfile_scan()) and
 *        refuse it for the kinds of bad rows in `refuse`.
 *
 * @param[in]  s          The table (name, dir, dim; key_bytes unused).
 * @param[in]  refuse     Mask of HPS_MODELFILE_NONFINITE / _DUPLICATES: a
 *                        table with rows of such a kind is refused.
 * @param[out] ret_stats  The counts; written whenever the scan completed
 *                        (on refusal too).  May be NULL.
 * @param[out] ret_dups, ret_ndups  As hps_modelfile_scan(); written only
 *                        on success.  May be NULL.
 * @param[out] err, err_len  On refusal: "table '<name>': " followed by
 *                        hps_modelfile_stats_format() of the refused kinds
 *                        (file, count, first row and key).
 *
 * Thread safety: reentrant.
 * @return 0; HPS_EINVAL when refused; the errors of hps_modelfile_open()
 *         and hps_modelfile_scan() (messages prefixed "table '<name>': ").
 */
hps_err_t hps_modelfile_check_table(const hps_modelfile_spec_t *s, unsigned refuse,
                                    hps_modelfile_stats_t *ret_stats,
                                    hps_modelfile_dup_t **ret_dups, size_t *ret_ndups, char *err,
                                    size_t err_len);

#ifdef __cplusplus
}
#endif
#endif /* HPS_MODELFILE_H */
