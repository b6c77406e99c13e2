/*
 * modelfile.c -- HugeCTR sparse model files: validation and chunked reading.
 *
 * See include/hps/modelfile.h for the format and the contract.  Everything
 * here is plain POSIX I/O: open + fstat at open time, pread for the chunks,
 * so one handle serves any number of reader threads.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hps/dtype.h"
#include "hps/modelfile.h"

/** Longest model or table name (HugeCTR: [a-zA-Z0-9_-]{1,120}). */
#define NAME_MAX_LEN HPS_NAME_MAX
/** Keys read per piece when checking or narrowing 32-bit keys. */
#define U32_PIECE_KEYS 4096u
/** Bytes of keys read per piece by hps_modelfile_validate_model(). */
#define SCAN_PIECE_BYTES (1u << 20)

/* Set once by hps_modelfile_cancel() (any thread, a signal handler too),
 * read relaxed before every pread: a flag, it orders nothing else. */
static atomic_bool g_cancelled;

struct hps_modelfile {
    char *mf_dir;      /* the table directory, as given */
    char *mf_key_path; /* <dir>/key */
    char *mf_vec_path; /* <dir>/emb_vector */
    int mf_key_fd;
    int mf_vec_fd;
    uint64_t mf_rows; /* N */
    uint32_t mf_dim;
};

__attribute__((format(printf, 3, 4))) static void set_err(char *err, size_t err_len,
                                                          const char *fmt, ...)
{
    va_list ap;

    if (err == NULL || err_len == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

static char *path_join(const char *dir, const char *file)
{
    char *p = NULL;

    if (asprintf(&p, "%s/%s", dir, file) < 0)
        return NULL;
    return p;
}

bool hps_modelfile_name_ok(const char *name)
{
    size_t i;

    if (name == NULL || name[0] == '\0')
        return false;
    for (i = 0; name[i] != '\0'; i++) {
        char c = name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-';
        if (!ok || i >= NAME_MAX_LEN)
            return false;
    }
    return true;
}

/*
 * Open one file of the table and return its size.  Missing file (or
 * directory) is HPS_ENOTFOUND; anything but a regular file is HPS_EINVAL.
 * O_NONBLOCK: opening a FIFO that nobody writes would otherwise wait
 * forever; for a regular file it changes nothing (pread ignores it).
 */
static hps_err_t open_sized(const char *path, int *ret_fd, uint64_t *ret_size, char *err,
                            size_t err_len)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);

    if (fd < 0) {
        int e = errno;
        set_err(err, err_len, "%s: cannot open: %s", path, strerror(e));
        return (e == ENOENT || e == ENOTDIR) ? HPS_ENOTFOUND : -e;
    }
    if (fstat(fd, &st) != 0) {
        int e = errno;
        set_err(err, err_len, "%s: fstat: %s", path, strerror(e));
        close(fd);
        return -e;
    }
    if (!S_ISREG(st.st_mode)) {
        set_err(err, err_len, "%s: not a regular file (%s)", path, hps_file_kind(st.st_mode));
        close(fd);
        return HPS_EINVAL;
    }
    *ret_fd = fd;
    *ret_size = (uint64_t)st.st_size;
    return 0;
}

static hps_err_t check_key_size(const hps_modelfile_t *mf, uint64_t key_bytes, char *err,
                                size_t err_len)
{
    if (key_bytes == 0) {
        set_err(err, err_len, "%s: empty key file (0 bytes); a table needs at least one key",
                mf->mf_key_path);
        return HPS_ETRUNCATED;
    }
    if (key_bytes % 8 != 0) {
        set_err(err, err_len,
                "%s: %" PRIu64 " bytes is not a multiple of 8 (keys are int64): "
                "the file ends inside a key",
                mf->mf_key_path, key_bytes);
        return HPS_ETRUNCATED;
    }
    return 0;
}

/* Append ", a whole number of rows for dim D" when the size fits another dim. */
static void hint_dim(char *buf, size_t len, uint64_t rows, uint64_t vec_bytes)
{
    uint64_t row_bytes = rows * 4;

    buf[0] = '\0';
    if (vec_bytes != 0 && vec_bytes % row_bytes == 0)
        snprintf(buf, len, " (the file would fit dim %" PRIu64 ")", vec_bytes / row_bytes);
}

static hps_err_t check_vec_size(const hps_modelfile_t *mf, uint64_t key_bytes, uint64_t vec_bytes,
                                char *err, size_t err_len)
{
    uint64_t rows = key_bytes / 8, expected;
    char hint[64];

    if (vec_bytes % 4 != 0) {
        set_err(err, err_len,
                "%s: %" PRIu64 " bytes is not a multiple of 4 (vectors are float32): "
                "the file ends inside a float",
                mf->mf_vec_path, vec_bytes);
        return HPS_ETRUNCATED;
    }
    if (__builtin_mul_overflow(rows, (uint64_t)mf->mf_dim * 4, &expected))
        expected = UINT64_MAX;
    if (vec_bytes == expected)
        return 0;
    hint_dim(hint, sizeof(hint), rows, vec_bytes);
    set_err(err, err_len,
            "%s holds %" PRIu64 " bytes, but %s (%" PRIu64 " bytes) holds N = %" PRIu64
            " keys and dim is %" PRIu32 ": expected N x dim x 4 = %" PRIu64
            " bytes of vectors, got %" PRIu64 "%s",
            mf->mf_vec_path, vec_bytes, mf->mf_key_path, key_bytes, rows, mf->mf_dim, expected,
            vec_bytes, hint);
    return vec_bytes < expected ? HPS_ETRUNCATED : HPS_EINVAL;
}

static hps_err_t mf_alloc(const char *dir, uint32_t dim, hps_modelfile_t **ret_mf)
{
    hps_modelfile_t *mf = calloc(1, sizeof(*mf));

    if (mf == NULL)
        return -ENOMEM;
    mf->mf_key_fd = -1;
    mf->mf_vec_fd = -1;
    mf->mf_dim = dim;
    mf->mf_dir = strdup(dir);
    mf->mf_key_path = path_join(dir, "key");
    mf->mf_vec_path = path_join(dir, "emb_vector");
    *ret_mf = mf;
    if (mf->mf_dir == NULL || mf->mf_key_path == NULL || mf->mf_vec_path == NULL)
        return -ENOMEM;
    return 0;
}

static hps_err_t mf_open_files(hps_modelfile_t *mf, char *err, size_t err_len)
{
    uint64_t key_bytes = 0, vec_bytes = 0;
    hps_err_t rc;

    rc = open_sized(mf->mf_key_path, &mf->mf_key_fd, &key_bytes, err, err_len);
    if (rc == 0)
        rc = open_sized(mf->mf_vec_path, &mf->mf_vec_fd, &vec_bytes, err, err_len);
    if (rc == 0)
        rc = check_key_size(mf, key_bytes, err, err_len);
    if (rc == 0)
        rc = check_vec_size(mf, key_bytes, vec_bytes, err, err_len);
    if (rc == 0)
        mf->mf_rows = key_bytes / 8;
    return rc;
}

hps_err_t hps_modelfile_open(const char *dir, uint32_t dim, hps_modelfile_t **ret_mf, char *err,
                             size_t err_len)
{
    hps_modelfile_t *mf = NULL;
    hps_err_t rc;

    if (dir == NULL || ret_mf == NULL) {
        set_err(err, err_len, "hps_modelfile_open: NULL argument");
        return HPS_EINVAL;
    }
    if (dim == 0 || dim > HPS_MODELFILE_MAX_DIM) {
        set_err(err, err_len, "%s: dim %" PRIu32 " outside [1, %u]", dir, dim,
                HPS_MODELFILE_MAX_DIM);
        return HPS_EINVAL;
    }
    rc = mf_alloc(dir, dim, &mf);
    if (rc == 0)
        rc = mf_open_files(mf, err, err_len);
    else
        set_err(err, err_len, "%s: out of memory", dir);
    if (rc != 0) {
        hps_modelfile_close(mf);
        return rc;
    }
    *ret_mf = mf;
    return 0;
}

hps_err_t hps_modelfile_check_open(const char *dir, uint32_t dim, char *err, size_t err_len)
{
    hps_modelfile_t *mf = NULL;
    hps_err_t rc = hps_modelfile_open(dir, dim, &mf, err, err_len);
    hps_modelfile_close(mf);
    return rc;
}

void hps_modelfile_close(hps_modelfile_t *mf)
{
    if (mf == NULL)
        return;
    if (mf->mf_key_fd >= 0)
        close(mf->mf_key_fd);
    if (mf->mf_vec_fd >= 0)
        close(mf->mf_vec_fd);
    free(mf->mf_dir);
    free(mf->mf_key_path);
    free(mf->mf_vec_path);
    free(mf);
}

uint64_t hps_modelfile_rows(const hps_modelfile_t *mf)
{
    return mf->mf_rows;
}

uint32_t hps_modelfile_dim(const hps_modelfile_t *mf)
{
    return mf->mf_dim;
}

const char *hps_modelfile_dir(const hps_modelfile_t *mf)
{
    return mf->mf_dir;
}

uint64_t hps_modelfile_chunk_rows(const hps_modelfile_t *mf, uint64_t max_bytes)
{
    uint64_t rows = mf->mf_rows, row_bytes = 8 + (uint64_t)mf->mf_dim * 4, chunk;

    if (max_bytes == 0)
        chunk = (rows + HPS_MODELFILE_DEFAULT_CHUNKS - 1) / HPS_MODELFILE_DEFAULT_CHUNKS;
    else
        chunk = max_bytes / row_bytes;
    if (chunk < 1)
        chunk = 1;
    return chunk < rows ? chunk : rows;
}

void hps_modelfile_cancel(void)
{
    atomic_store_explicit(&g_cancelled, true, memory_order_relaxed);
}

/* pread exactly len bytes at off; a short file is HPS_ETRUNCATED, a read
 * after hps_modelfile_cancel() -ECANCELED. */
static hps_err_t pread_full(int fd, const char *path, void *buf, size_t len, uint64_t off,
                            char *err, size_t err_len)
{
    char *p = buf;

    if (atomic_load_explicit(&g_cancelled, memory_order_relaxed)) {
        set_err(err, err_len, "%s: not read: the process is stopping", path);
        return -ECANCELED;
    }

    while (len > 0) {
        ssize_t got = pread(fd, p, len, (off_t)off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int e = errno;
            set_err(err, err_len, "%s: read at offset %" PRIu64 ": %s", path, off, strerror(e));
            return -e;
        }
        if (got == 0) {
            set_err(err, err_len,
                    "%s: file ends at offset %" PRIu64 ", shorter than when it was opened", path,
                    off);
            return HPS_ETRUNCATED;
        }
        p += got;
        len -= (size_t)got;
        off += (uint64_t)got;
    }
    return 0;
}

static hps_err_t check_range(const hps_modelfile_t *mf, uint64_t first_row, size_t n, char *err,
                             size_t err_len)
{
    if (n == 0)
        return 0;
    if (first_row >= mf->mf_rows || n > mf->mf_rows - first_row) {
        set_err(err, err_len,
                "%s: rows [%" PRIu64 ", %" PRIu64 " + %zu) outside the table of %" PRIu64 " rows",
                mf->mf_dir, first_row, first_row, n, mf->mf_rows);
        return HPS_EINVAL;
    }
    return 0;
}

static hps_err_t read_vectors(hps_modelfile_t *mf, uint64_t first_row, size_t n, float *vectors,
                              char *err, size_t err_len)
{
    uint64_t row_bytes = (uint64_t)mf->mf_dim * 4;

    return pread_full(mf->mf_vec_fd, mf->mf_vec_path, vectors, n * row_bytes, first_row * row_bytes,
                      err, err_len);
}

hps_err_t hps_modelfile_read(hps_modelfile_t *mf, uint64_t first_row, size_t n, int64_t *keys,
                             float *vectors, char *err, size_t err_len)
{
    hps_err_t rc;

    if (mf == NULL) {
        set_err(err, err_len, "hps_modelfile_read: NULL table");
        return HPS_EINVAL;
    }
    rc = check_range(mf, first_row, n, err, err_len);
    if (rc != 0 || n == 0)
        return rc;
    if (keys != NULL) {
        rc = pread_full(mf->mf_key_fd, mf->mf_key_path, keys, n * 8, first_row * 8, err, err_len);
        if (rc != 0)
            return rc;
    }
    if (vectors != NULL)
        rc = read_vectors(mf, first_row, n, vectors, err, err_len);
    return rc;
}

hps_err_t hps_modelfile_keys_to_u32(const int64_t *in, size_t n, uint32_t *out, size_t *ret_bad)
{
    size_t i;

    /* Forward order: out[i] (bytes 4i..4i+3) never overlaps a later in[j]
     * (bytes 8j..8j+7, j > i), so in == out is safe. */
    for (i = 0; i < n; i++) {
        int64_t k = in[i];
        if (k < 0 || k > (int64_t)UINT32_MAX) {
            if (ret_bad != NULL)
                *ret_bad = i;
            return HPS_EINVAL;
        }
        out[i] = (uint32_t)k;
    }
    return 0;
}

/* Read keys [first_row, first_row + n) narrowed to uint32, in pieces. */
static hps_err_t read_keys_u32(hps_modelfile_t *mf, uint64_t first_row, size_t n, uint32_t *keys,
                               char *err, size_t err_len)
{
    int64_t piece[U32_PIECE_KEYS];
    size_t done = 0, bad = 0;

    while (done < n) {
        size_t m = n - done < U32_PIECE_KEYS ? n - done : U32_PIECE_KEYS;
        hps_err_t rc = hps_modelfile_read(mf, first_row + done, m, piece, NULL, err, err_len);
        if (rc != 0)
            return rc;
        if (hps_modelfile_keys_to_u32(piece, m, keys + done, &bad) != 0) {
            set_err(err, err_len,
                    "%s: row %" PRIu64 ": key %" PRId64
                    " does not fit a 32-bit-key table (must be in [0, 2^32))",
                    mf->mf_key_path, first_row + done + bad, piece[bad]);
            return HPS_EINVAL;
        }
        done += m;
    }
    return 0;
}

hps_err_t hps_modelfile_read_u32(hps_modelfile_t *mf, uint64_t first_row, size_t n, uint32_t *keys,
                                 float *vectors, char *err, size_t err_len)
{
    hps_err_t rc;

    if (mf == NULL) {
        set_err(err, err_len, "hps_modelfile_read_u32: NULL table");
        return HPS_EINVAL;
    }
    rc = check_range(mf, first_row, n, err, err_len);
    if (rc != 0 || n == 0)
        return rc;
    if (keys != NULL) {
        rc = read_keys_u32(mf, first_row, n, keys, err, err_len);
        if (rc != 0)
            return rc;
    }
    if (vectors != NULL)
        rc = read_vectors(mf, first_row, n, vectors, err, err_len);
    return rc;
}

/* Check every key of a 32-bit-key table, SCAN_PIECE_BYTES at a time. */
static hps_err_t scan_u32(hps_modelfile_t *mf, char *err, size_t err_len)
{
    size_t piece_keys = SCAN_PIECE_BYTES / 8;
    uint32_t *buf = malloc(piece_keys * sizeof(*buf));
    uint64_t row;
    hps_err_t rc = 0;

    if (buf == NULL) {
        set_err(err, err_len, "%s: out of memory", mf->mf_dir);
        return -ENOMEM;
    }
    for (row = 0; row < mf->mf_rows && rc == 0; row += piece_keys) {
        uint64_t left = mf->mf_rows - row;
        size_t m = left < piece_keys ? (size_t)left : piece_keys;
        rc = hps_modelfile_read_u32(mf, row, m, buf, NULL, err, err_len);
    }
    free(buf);
    return rc;
}

static hps_err_t check_spec(const hps_modelfile_spec_t *specs, size_t i, char *err, size_t err_len)
{
    const hps_modelfile_spec_t *s = &specs[i];
    size_t j;

    if (!hps_modelfile_name_ok(s->table)) {
        set_err(err, err_len, "table %zu: name '%s' is not 1..120 characters of [A-Za-z0-9_-]", i,
                s->table != NULL ? s->table : "(null)");
        return HPS_EINVAL;
    }
    if (s->key_bytes != 4 && s->key_bytes != 8) {
        set_err(err, err_len, "table '%s': key_bytes %" PRIu32 " is neither 4 nor 8", s->table,
                s->key_bytes);
        return HPS_EINVAL;
    }
    for (j = 0; j < i; j++) {
        if (strcmp(specs[j].table, s->table) == 0) {
            set_err(err, err_len, "table '%s': name given twice (tables %zu and %zu)", s->table, j,
                    i);
            return HPS_EINVAL;
        }
    }
    return 0;
}

/* Prefix err (already holding a message) with "table '<name>': ". */
static void prefix_err(char *err, size_t err_len, const char *table)
{
    char *tmp;

    if (err == NULL || err_len == 0)
        return;
    tmp = strdup(err);
    if (tmp == NULL)
        return;
    set_err(err, err_len, "table '%s': %s", table, tmp);
    free(tmp);
}

static hps_err_t validate_table(const hps_modelfile_spec_t *s, uint64_t *rows, char *err,
                                size_t err_len)
{
    hps_modelfile_t *mf = NULL;
    hps_err_t rc = hps_modelfile_open(s->dir, s->dim, &mf, err, err_len);

    if (rc == 0 && s->key_bytes == 4)
        rc = scan_u32(mf, err, err_len);
    if (rc == 0)
        *rows += hps_modelfile_rows(mf);
    else
        prefix_err(err, err_len, s->table);
    hps_modelfile_close(mf);
    return rc;
}

hps_err_t hps_modelfile_validate_model(const hps_modelfile_spec_t *specs, size_t n,
                                       uint64_t *ret_rows, char *err, size_t err_len)
{
    uint64_t rows = 0;
    size_t i;
    hps_err_t rc;

    if (specs == NULL || n == 0) {
        set_err(err, err_len, "a model needs at least one table");
        return HPS_EINVAL;
    }
    for (i = 0; i < n; i++) {
        rc = check_spec(specs, i, err, err_len);
        if (rc == 0)
            rc = validate_table(&specs[i], &rows, err, err_len);
        if (rc != 0)
            return rc;
    }
    if (ret_rows != NULL)
        *ret_rows = rows;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Contents: NaN / Inf values and duplicate keys                             */
/* ------------------------------------------------------------------------ */

/** Bytes of vectors read per piece by hps_modelfile_scan(). */
#define CONTENT_PIECE_BYTES (4u << 20)
/** Keys whose slots are prefetched ahead of their insertion. */
#define KS_BATCH 16u

/*
 * A set of int64 keys: open addressing with linear probing, a power-of-two
 * capacity >= 1.5 x the rows (at most 2/3 full), slots zeroed by calloc
 * (untouched pages cost nothing); 0 marks a free slot, so the key 0 is
 * tracked apart in has_zero.
 */
typedef struct keyset {
    uint64_t *slots;
    uint64_t mask;
    unsigned shift;
    bool has_zero;
} keyset_t;

/* Everything one scan accumulates. */
typedef struct scan {
    keyset_t set;
    hps_modelfile_stats_t st;
    hps_modelfile_dup_t *occ; /* (key, row) of every row that repeats a key */
    size_t nocc, capocc;
} scan_t;

static hps_err_t ks_init(keyset_t *s, uint64_t rows)
{
    unsigned bits = 4;

    while (bits < 63 && (UINT64_C(1) << bits) < rows + rows / 2)
        bits++;
    if (bits >= 61 || (UINT64_C(1) << bits) > SIZE_MAX / sizeof(uint64_t))
        return -ENOMEM;
    s->slots = calloc((size_t)1 << bits, sizeof(uint64_t));
    s->mask = (UINT64_C(1) << bits) - 1;
    s->shift = 64 - bits;
    s->has_zero = false;
    return s->slots != NULL ? 0 : -ENOMEM;
}

static inline uint64_t ks_slot(const keyset_t *s, uint64_t k)
{
    return ((k ^ (k >> 32)) * UINT64_C(0x9E3779B97F4A7C15)) >> s->shift;
}

/* Insert k, probing from slot i; true when k was in the set already. */
static inline bool ks_insert_at(keyset_t *s, uint64_t k, uint64_t i)
{
    if (k == 0) {
        bool had = s->has_zero;
        s->has_zero = true;
        return had;
    }
    for (;;) {
        uint64_t v = s->slots[i];
        if (v == k)
            return true;
        if (v == 0) {
            s->slots[i] = k;
            return false;
        }
        i = (i + 1) & s->mask;
    }
}

static hps_err_t note_dup(scan_t *sc, int64_t key, uint64_t row)
{
    if (sc->nocc == sc->capocc) {
        size_t cap = sc->capocc ? 2 * sc->capocc : 1024;
        hps_modelfile_dup_t *p = realloc(sc->occ, cap * sizeof(*p));
        if (p == NULL)
            return -ENOMEM;
        sc->occ = p;
        sc->capocc = cap;
    }
    if (sc->st.dup_rows++ == 0) {
        sc->st.first_dup_row = row;
        sc->st.first_dup_key = key;
    }
    sc->occ[sc->nocc++] = (hps_modelfile_dup_t){.key = key, .last_row = row};
    return 0;
}

/* Put keys of rows [first_row, first_row + n) in the set, in file order. */
static hps_err_t scan_keys(scan_t *sc, const int64_t *keys, size_t n, uint64_t first_row)
{
    keyset_t *s = &sc->set;
    uint64_t slot[KS_BATCH];

    for (size_t a = 0; a < n; a += KS_BATCH) {
        size_t b = n - a < KS_BATCH ? n : a + KS_BATCH;
        for (size_t i = a; i < b; i++) {
            slot[i - a] = ks_slot(s, (uint64_t)keys[i]);
            __builtin_prefetch(&s->slots[slot[i - a]], 1);
        }
        for (size_t i = a; i < b; i++)
            if (ks_insert_at(s, (uint64_t)keys[i], slot[i - a]) &&
                note_dup(sc, keys[i], first_row + i) != 0)
                return -ENOMEM;
    }
    return 0;
}

/* Count the rows of a piece with a NaN or Inf; cheap when there is none. */
static void scan_vectors(scan_t *sc, const int64_t *keys, const float *vecs, size_t n, uint32_t dim,
                         uint64_t first_row)
{
    if (!hps_f32_any_nonfinite(vecs, n * dim))
        return;
    for (size_t i = 0; i < n; i++) {
        if (!hps_f32_any_nonfinite(vecs + i * dim, dim))
            continue;
        if (sc->st.nonfinite_rows++ == 0) {
            sc->st.first_nonfinite_row = first_row + i;
            sc->st.first_nonfinite_key = keys[i];
        }
    }
}

static int dup_cmp(const void *a, const void *b)
{
    const hps_modelfile_dup_t *x = a, *y = b;

    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->last_row < y->last_row ? -1 : x->last_row > y->last_row;
}

/* Sort the repeats by key and keep one entry per key with its last row. */
static void finish_dups(scan_t *sc)
{
    size_t m = 0;

    if (sc->nocc > 1)
        qsort(sc->occ, sc->nocc, sizeof(*sc->occ), dup_cmp);
    for (size_t i = 0; i < sc->nocc; i++)
        if (i + 1 == sc->nocc || sc->occ[i + 1].key != sc->occ[i].key)
            sc->occ[m++] = sc->occ[i];
    sc->st.dup_keys = m;
}

static hps_err_t scan_all(hps_modelfile_t *mf, scan_t *sc, char *err, size_t err_len)
{
    uint64_t rows = mf->mf_rows, row_bytes = (uint64_t)mf->mf_dim * 4;
    uint64_t piece = CONTENT_PIECE_BYTES / row_bytes ? CONTENT_PIECE_BYTES / row_bytes : 1;
    int64_t *keys = NULL;
    float *vecs = NULL;
    hps_err_t rc;

    if (piece > rows)
        piece = rows;
    rc = ks_init(&sc->set, rows);
    if (rc == 0) {
        keys = malloc(piece * sizeof(*keys));
        vecs = malloc(piece * row_bytes);
        rc = keys != NULL && vecs != NULL ? 0 : -ENOMEM;
    }
    if (rc != 0)
        set_err(err, err_len, "%s: out of memory scanning %" PRIu64 " rows", mf->mf_dir, rows);
    for (uint64_t row = 0; row < rows && rc == 0; row += piece) {
        size_t m = (size_t)(rows - row < piece ? rows - row : piece);
        rc = hps_modelfile_read(mf, row, m, keys, vecs, err, err_len);
        if (rc == 0) {
            scan_vectors(sc, keys, vecs, m, mf->mf_dim, row);
            rc = scan_keys(sc, keys, m, row);
            if (rc != 0)
                set_err(err, err_len, "%s: out of memory recording duplicate keys", mf->mf_dir);
        }
    }
    free(keys);
    free(vecs);
    free(sc->set.slots);
    sc->set.slots = NULL;
    return rc;
}

hps_err_t hps_modelfile_scan(hps_modelfile_t *mf, hps_modelfile_stats_t *ret_stats,
                             hps_modelfile_dup_t **ret_dups, size_t *ret_ndups, char *err,
                             size_t err_len)
{
    scan_t sc = {.st = {.first_nonfinite_row = UINT64_MAX, .first_dup_row = UINT64_MAX}};
    hps_err_t rc;

    if (mf == NULL || ret_stats == NULL || (ret_dups == NULL) != (ret_ndups == NULL)) {
        set_err(err, err_len, "hps_modelfile_scan: NULL argument");
        return HPS_EINVAL;
    }
    sc.st.rows = mf->mf_rows;
    rc = scan_all(mf, &sc, err, err_len);
    if (rc == 0) {
        finish_dups(&sc);
        *ret_stats = sc.st;
        if (ret_dups != NULL) {
            *ret_dups = sc.nocc ? sc.occ : NULL;
            *ret_ndups = sc.st.dup_keys;
            sc.occ = NULL;
        }
    }
    free(sc.occ);
    return rc;
}

bool hps_modelfile_stats_format(const hps_modelfile_stats_t *st, const char *dir, unsigned what,
                                char *buf, size_t len)
{
    size_t off = 0;
    int k;

    buf[0] = '\0';
    if ((what & HPS_MODELFILE_NONFINITE) && st->nonfinite_rows > 0) {
        k = snprintf(buf, len,
                     "%s/emb_vector: %" PRIu64 " row%s with a NaN or Inf value (first: row %" PRIu64
                     ", key %" PRId64 ")",
                     dir, st->nonfinite_rows, st->nonfinite_rows == 1 ? "" : "s",
                     st->first_nonfinite_row, st->first_nonfinite_key);
        off = k < 0 ? 0 : (size_t)k < len ? (size_t)k : len - 1;
    }
    if ((what & HPS_MODELFILE_DUPLICATES) && st->dup_keys > 0)
        snprintf(buf + off, len - off,
                 "%s%s/key: %" PRIu64 " key%s on more than one row, %" PRIu64
                 " row%s overridden by a later row of the same key (first: row %" PRIu64
                 " repeats key %" PRId64 ")",
                 off ? "; " : "", dir, st->dup_keys, st->dup_keys == 1 ? "" : "s", st->dup_rows,
                 st->dup_rows == 1 ? "" : "s", st->first_dup_row, st->first_dup_key);
    return buf[0] != '\0';
}

hps_err_t hps_modelfile_check_table(const hps_modelfile_spec_t *s, unsigned refuse,
                                    hps_modelfile_stats_t *ret_stats,
                                    hps_modelfile_dup_t **ret_dups, size_t *ret_ndups, char *err,
                                    size_t err_len)
{
    hps_modelfile_t *mf = NULL;
    hps_modelfile_stats_t st;
    hps_modelfile_dup_t *dups = NULL;
    size_t ndups = 0;
    hps_err_t rc;
    char what[768];

    if (s == NULL || s->dir == NULL || s->table == NULL) {
        set_err(err, err_len, "hps_modelfile_check_table: NULL argument");
        return HPS_EINVAL;
    }
    rc = hps_modelfile_open(s->dir, s->dim, &mf, err, err_len);
    if (rc == 0)
        rc = hps_modelfile_scan(mf, &st, &dups, &ndups, err, err_len);
    hps_modelfile_close(mf);
    if (rc != 0) {
        prefix_err(err, err_len, s->table);
        return rc;
    }
    if (ret_stats != NULL)
        *ret_stats = st;
    if (hps_modelfile_stats_format(&st, s->dir, refuse, what, sizeof(what))) {
        set_err(err, err_len, "table '%s': %s", s->table, what);
        free(dups);
        return HPS_EINVAL;
    }
    if (ret_dups != NULL && ret_ndups != NULL) {
        *ret_dups = dups;
        *ret_ndups = ndups;
    } else {
        free(dups);
    }
    return 0;
}
