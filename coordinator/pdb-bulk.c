/*
 * pdb-bulk.c -- bulk loading of the persistent database through SST files
 * and external-file ingestion, loading of whole sparse models, and staged
 * rows (SST files written now and ingested later, hps_pdb_stage_*).
 *
 * Why the sort is not numeric.  RocksDB's default comparator orders keys by
 * memcmp of their bytes, and our keys are the raw little-endian bytes of an
 * int64 or uint32.  memcmp compares the least significant byte first, so the
 * order is that of the byte-swapped value: 1 (01 00 ..) sorts after 256
 * (00 01 ..), and a negative key (.. ff) sorts by its low byte like any
 * other.  SstFileWriter refuses keys that are not strictly increasing in
 * comparator order, which is how HugeCTR's numerically sorted SST dumps
 * failed for keys >= 256 (reference/hugectr-hps.md §4).  Here each key is
 * mapped to bswap(key) read as an unsigned integer -- whose numeric order is
 * exactly memcmp order of the LE bytes -- and the rows are sorted by that.
 *
 * The sort is an LSD radix sort over those bytes (a byte per pass, skipping
 * passes in which every key has the same byte), stable, so rows with equal
 * keys stay in input order and keeping the last row of each run gives "last
 * wins" for duplicates.  It runs in O(n * key_bytes) and needs a second
 * array of n entries.  Across the chunks of a model file the last row wins
 * too: chunks are ingested in file order, and RocksDB gives an ingested SST
 * file whose keys overlap the column family's a newer sequence number, so
 * its rows shadow the earlier chunks' (test-pdb-bulk.c checks it; the model
 * loader's rule, include/hps/modelfile.h).
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coordinator/pdb-internal.h"

/** One row to write: its comparator-order key and its index in the input. */
typedef struct sort_ent {
    uint64_t se_key; /* bswap of the LE key: numeric order == memcmp order */
    uint64_t se_idx;
} sort_ent_t;

/* ------------------------------------------------------------------------ */
/* Sorting in bytewise order                                                 */
/* ------------------------------------------------------------------------ */

static uint64_t order_key(const char *keys, size_t i, uint32_t kb)
{
    if (kb == 8) {
        uint64_t k;
        memcpy(&k, keys + i * 8, 8);
        return __builtin_bswap64(k);
    } else {
        uint32_t k;
        memcpy(&k, keys + i * 4, 4);
        return __builtin_bswap32(k);
    }
}

/* One stable counting pass on byte `shift / 8` of se_key, src -> dst. */
static void radix_pass(const sort_ent_t *src, sort_ent_t *dst, size_t n, const size_t *count,
                       unsigned shift)
{
    size_t pos[256], sum = 0, i;

    for (i = 0; i < 256; i++) {
        pos[i] = sum;
        sum += count[i];
    }
    for (i = 0; i < n; i++)
        dst[pos[(src[i].se_key >> shift) & 0xff]++] = src[i];
}

/*
 * Sort a[0..n) by se_key, stably, using tmp[0..n) as scratch; returns the
 * array that holds the result (a or tmp).
 */
static sort_ent_t *radix_sort(sort_ent_t *a, sort_ent_t *tmp, size_t n, uint32_t kb)
{
    size_t(*count)[256] = calloc(kb, sizeof(*count)), i;
    unsigned p;

    if (count == NULL)
        return NULL;
    if (n == 0) {
        free(count);
        return a;
    }
    for (i = 0; i < n; i++)
        for (p = 0; p < kb; p++)
            count[p][(a[i].se_key >> (8 * p)) & 0xff]++;
    for (p = 0; p < kb; p++) {
        sort_ent_t *swap;
        if (count[p][(a[0].se_key >> (8 * p)) & 0xff] == n)
            continue; /* every key has this byte: the pass would not move anything */
        radix_pass(a, tmp, n, count[p], 8 * p);
        swap = a;
        a = tmp;
        tmp = swap;
    }
    free(count);
    return a;
}

/* Keep the last entry of each run of equal keys; returns the new length. */
static size_t dedupe_last(sort_ent_t *a, size_t n)
{
    size_t i, m = 0;

    for (i = 0; i < n; i++)
        if (i + 1 == n || a[i + 1].se_key != a[i].se_key)
            a[m++] = a[i];
    return m;
}

/*
 * Build the sorted, de-duplicated row order of the input.  *ret_buf is the
 * allocation to free; *ret_rows points into it.
 */
static hps_err_t sort_rows(const char *keys, size_t n, uint32_t kb, sort_ent_t **ret_buf,
                           sort_ent_t **ret_rows, size_t *ret_m)
{
    sort_ent_t *buf = malloc(2 * n * sizeof(*buf)), *rows;
    size_t i;

    if (buf == NULL)
        return -ENOMEM;
    for (i = 0; i < n; i++) {
        buf[i].se_key = order_key(keys, i, kb);
        buf[i].se_idx = i;
    }
    rows = radix_sort(buf, buf + n, n, kb);
    if (rows == NULL) {
        free(buf);
        return -ENOMEM;
    }
    *ret_m = dedupe_last(rows, n);
    *ret_buf = buf;
    *ret_rows = rows;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* SST file and ingestion                                                    */
/* ------------------------------------------------------------------------ */

typedef struct bulk_src {
    const char *keys;
    uint32_t kb;
    const float *values;
    uint32_t dim;
    const sort_ent_t *rows; /* sorted, distinct */
    size_t m;
} bulk_src_t;

/* Rows ahead of the one being written whose first bytes are prefetched. */
#define PREFETCH_AHEAD 4
/* Rows written between two sched_yield()s: a model loads while lookups are
 * served, and one SST file holds up to 256 MiB of rows. */
#define YIELD_ROWS 16384

static void prefetch_row(const bulk_src_t *s, uint64_t idx, size_t row_bytes)
{
    const char *v = (const char *)(s->values + idx * s->dim);
    size_t lines = row_bytes < 512 ? (row_bytes + 63) / 64 : 8;

    __builtin_prefetch(s->keys + idx * s->kb);
    for (size_t l = 0; l < lines; l++)
        __builtin_prefetch(v + l * 64);
}

static hps_err_t sst_put_all(rocksdb_sstfilewriter_t *w, const bulk_src_t *s, const char *file,
                             char *err, size_t err_len)
{
    size_t i, row_bytes = (size_t)s->dim * 4;
    char *rerr = NULL;

    for (i = 0; i < s->m && rerr == NULL; i++) {
        uint64_t idx = s->rows[i].se_idx;
        if (i + PREFETCH_AHEAD < s->m) /* rows come in key order: each is a cache miss */
            prefetch_row(s, s->rows[i + PREFETCH_AHEAD].se_idx, row_bytes);
        if (i % YIELD_ROWS == YIELD_ROWS - 1)
            sched_yield();
        rocksdb_sstfilewriter_put(w, s->keys + idx * s->kb, s->kb,
                                  (const char *)(s->values + idx * s->dim), row_bytes, &rerr);
    }
    if (rerr == NULL)
        rocksdb_sstfilewriter_finish(w, &rerr);
    return hps__pdb_rerr(rerr, file, err, err_len);
}

static hps_err_t sst_write(hps_pdb_t *db, const bulk_src_t *s, const char *file, char *err,
                           size_t err_len)
{
    rocksdb_envoptions_t *env = rocksdb_envoptions_create();
    rocksdb_sstfilewriter_t *w = rocksdb_sstfilewriter_create(env, db->db_sst_opts);
    char *rerr = NULL;
    hps_err_t rc;

    rocksdb_sstfilewriter_open(w, file, &rerr);
    rc = hps__pdb_rerr(rerr, file, err, err_len);
    if (rc == 0)
        rc = sst_put_all(w, s, file, err, err_len);
    rocksdb_sstfilewriter_destroy(w);
    rocksdb_envoptions_destroy(env);
    return rc;
}

static hps_err_t sst_ingest(hps_pdb_table_t *t, const char *file, char *err, size_t err_len)
{
    rocksdb_ingestexternalfileoptions_t *io = rocksdb_ingestexternalfileoptions_create();
    const char *files[1] = {file};
    char *rerr = NULL;

    rocksdb_ingestexternalfileoptions_set_move_files(io, 1);
    rocksdb_ingest_external_file_cf(t->t_db->db_rdb, t->t_cf, files, 1, io, &rerr);
    rocksdb_ingestexternalfileoptions_destroy(io);
    return hps__pdb_wrote(t->t_db, hps__pdb_rerr(rerr, t->t_name, err, err_len));
}

/* Make <path>/.hps-ingest-XXXXXX; *ret_dir is malloc'd. */
static hps_err_t make_ingest_dir(const char *path, char **ret_dir, char *err, size_t err_len)
{
    char *dir = NULL;

    if (asprintf(&dir, "%s/%sXXXXXX", path, HPS__PDB_INGEST_PREFIX) < 0)
        return -ENOMEM;
    if (mkdtemp(dir) == NULL) {
        int e = errno;
        hps__pdb_err(err, err_len, "%s: cannot create an ingestion directory: %s", path,
                     strerror(e));
        free(dir);
        return -e;
    }
    *ret_dir = dir;
    return 0;
}

/* Sort rows (n) and write the distinct ones as SST file `file`; *ret_m:
 * how many. */
static hps_err_t write_rows_sst(hps_pdb_t *db, const char *what, size_t n, const void *keys,
                                uint32_t kb, const float *values, uint32_t dim, const char *file,
                                size_t *ret_m, char *err, size_t err_len)
{
    bulk_src_t s = {.keys = keys, .kb = kb, .values = values, .dim = dim};
    sort_ent_t *buf = NULL, *rows = NULL;
    hps_err_t rc;

    rc = sort_rows(keys, n, kb, &buf, &rows, &s.m);
    if (rc == -ENOMEM)
        hps__pdb_err(err, err_len, "%s: out of memory sorting %zu rows", what, n);
    if (rc != 0)
        return rc;
    s.rows = rows;
    rc = sst_write(db, &s, file, err, err_len);
    free(buf);
    *ret_m = s.m;
    return rc;
}

static hps_err_t bulk_load_rows(hps_pdb_table_t *t, size_t n, const void *keys, uint32_t kb,
                                const float *values, uint32_t dim, char *err, size_t err_len)
{
    char *dir = NULL, *file = NULL;
    size_t m = 0;
    hps_err_t rc = make_ingest_dir(t->t_db->db_path, &dir, err, err_len);
    if (rc != 0)
        return rc;
    if (asprintf(&file, "%s/load.sst", dir) < 0) {
        rmdir(dir);
        free(dir);
        return -ENOMEM;
    }
    rc = write_rows_sst(t->t_db, t->t_name, n, keys, kb, values, dim, file, &m, err, err_len);
    if (rc == 0)
        rc = sst_ingest(t, file, err, err_len);
    /* move_files removes our link on success; either way nothing stays. */
    unlink(file);
    rmdir(dir);
    free(file);
    free(dir);
    if (rc == 0) {
        HPS__PDB_COUNT(t->t_db, bulk_rows, m);
        HPS__PDB_COUNT(t->t_db, sst_files, 1);
    }
    return rc;
}

hps_err_t hps_pdb_bulk_load(hps_pdb_table_t *t, size_t n, const void *keys, uint32_t key_bytes,
                            const float *values, uint32_t dim, char *err, size_t err_len)
{
    hps_err_t rc;

    rc = hps__pdb_check_rows(t, n, keys, key_bytes, values, dim, "hps_pdb_bulk_load", err, err_len);
    if (rc != 0)
        return hps__pdb_fail(t != NULL ? t->t_db : NULL, rc);
    rc = hps__pdb_check_writable(t->t_db, t->t_name, err, err_len);
    if (rc == 0 && n > 0)
        rc = bulk_load_rows(t, n, keys, key_bytes, values, dim, err, err_len);
    return hps__pdb_fail(t->t_db, rc);
}

/* ------------------------------------------------------------------------ */
/* Model files                                                               */
/* ------------------------------------------------------------------------ */

static hps_err_t read_chunk(hps_modelfile_t *mf, uint64_t row, size_t m, uint32_t kb, void *keys,
                            float *vecs, char *err, size_t err_len)
{
    if (kb == 8)
        return hps_modelfile_read(mf, row, m, keys, vecs, err, err_len);
    return hps_modelfile_read_u32(mf, row, m, keys, vecs, err, err_len);
}

static hps_err_t load_chunks(hps_pdb_table_t *t, hps_modelfile_t *mf, uint32_t kb, uint64_t chunk,
                             char *err, size_t err_len)
{
    uint64_t rows = hps_modelfile_rows(mf), row;
    uint32_t dim = hps_modelfile_dim(mf);
    void *keys = malloc(chunk * 8);
    float *vecs = NULL;
    hps_err_t rc = 0;

    if (keys != NULL && chunk <= SIZE_MAX / 4 / dim)
        vecs = malloc(chunk * dim * 4);
    if (keys == NULL || vecs == NULL) {
        hps__pdb_err(err, err_len, "%s: out of memory for a chunk of %" PRIu64 " rows", t->t_name,
                     chunk);
        rc = -ENOMEM;
    }
    for (row = 0; row < rows && rc == 0; row += chunk) {
        size_t m = (size_t)(rows - row < chunk ? rows - row : chunk);
        rc = read_chunk(mf, row, m, kb, keys, vecs, err, err_len);
        if (rc == 0)
            rc = bulk_load_rows(t, m, keys, kb, vecs, dim, err, err_len);
    }
    free(keys);
    free(vecs);
    return rc;
}

static hps_err_t load_modelfile(hps_pdb_table_t *t, hps_modelfile_t *mf, uint32_t key_bytes,
                                uint64_t chunk_rows, char *err, size_t err_len)
{
    uint64_t rows;
    hps_err_t rc;

    if (t == NULL || mf == NULL || (key_bytes != 4 && key_bytes != 8)) {
        hps__pdb_err(err, err_len,
                     "hps_pdb_load_modelfile: NULL table or model file, or "
                     "key_bytes not 4 or 8");
        return HPS_EINVAL;
    }
    rc = hps__pdb_check_writable(t->t_db, t->t_name, err, err_len);
    if (rc != 0)
        return rc;
    rows = hps_modelfile_rows(mf);
    if (chunk_rows == 0)
        chunk_rows = hps_modelfile_chunk_rows(mf, 0);
    return load_chunks(t, mf, key_bytes, chunk_rows < rows ? chunk_rows : rows, err, err_len);
}

hps_err_t hps_pdb_load_modelfile(hps_pdb_table_t *t, hps_modelfile_t *mf, uint32_t key_bytes,
                                 uint64_t chunk_rows, char *err, size_t err_len)
{
    hps_err_t rc = load_modelfile(t, mf, key_bytes, chunk_rows, err, err_len);

    return hps__pdb_fail(t != NULL ? t->t_db : NULL, rc);
}

static hps_err_t load_table(hps_pdb_t *db, const char *model, const hps_modelfile_spec_t *s,
                            uint64_t chunk_rows, char *err, size_t err_len)
{
    hps_pdb_table_t *t = NULL;
    hps_modelfile_t *mf = NULL;
    hps_err_t rc;

    rc = hps_modelfile_open(s->dir, s->dim, &mf, err, err_len);
    if (rc == 0)
        rc = hps_pdb_table(db, model, s->table, true, &t, err, err_len);
    if (rc == 0)
        rc = load_modelfile(t, mf, s->key_bytes, chunk_rows, err, err_len);
    hps_modelfile_close(mf);
    return rc;
}

hps_err_t hps_pdb_load_model(hps_pdb_t *db, const char *model, const hps_modelfile_spec_t *specs,
                             size_t n, uint64_t chunk_rows, char *err, size_t err_len)
{
    hps_err_t rc;
    size_t i;

    if (db == NULL || !hps_modelfile_name_ok(model)) {
        hps__pdb_err(err, err_len, "hps_pdb_load_model: NULL PDB or bad model name '%s'",
                     model != NULL ? model : "(null)");
        return hps__pdb_fail(db, HPS_EINVAL);
    }
    rc = hps__pdb_check_writable(db, model, err, err_len);
    if (rc == 0)
        rc = hps_modelfile_validate_model(specs, n, NULL, err, err_len);
    for (i = 0; i < n && rc == 0; i++)
        rc = load_table(db, model, &specs[i], chunk_rows, err, err_len);
    return hps__pdb_fail(db, rc);
}

/* ------------------------------------------------------------------------ */
/* Staged rows: SST files written now, ingested later                        */
/* ------------------------------------------------------------------------ */

struct hps_pdb_stage {
    hps_pdb_t *st_db;
    char *st_what; /* for messages: the table the rows are for */
    char *st_dir;  /* <db path>/.hps-ingest-XXXXXX: removed at the next open if left */
    size_t st_files, st_ingested; /* chunk-<i>.sst for i < st_files; the first st_ingested moved */
    uint64_t st_rows;             /* distinct rows of each file, summed */
};

hps_err_t hps_pdb_stage_open(hps_pdb_t *db, const char *what, hps_pdb_stage_t **ret, char *err,
                             size_t err_len)
{
    if (db == NULL || what == NULL || ret == NULL) {
        hps__pdb_err(err, err_len, "hps_pdb_stage_open: NULL argument");
        return HPS_EINVAL;
    }
    hps_err_t rc = hps__pdb_check_writable(db, what, err, err_len);
    if (rc != 0)
        return rc;
    hps_pdb_stage_t *s = calloc(1, sizeof(*s));
    if (s == NULL || (s->st_what = strdup(what)) == NULL) {
        free(s);
        return -ENOMEM;
    }
    s->st_db = db;
    rc = make_ingest_dir(db->db_path, &s->st_dir, err, err_len);
    if (rc != 0) {
        free(s->st_what);
        free(s);
        return rc;
    }
    *ret = s;
    return 0;
}

static char *stage_file(const hps_pdb_stage_t *s, size_t i)
{
    char *file = NULL;
    return asprintf(&file, "%s/chunk-%06zu.sst", s->st_dir, i) < 0 ? NULL : file;
}

hps_err_t hps_pdb_stage_rows(hps_pdb_stage_t *s, size_t n, const void *keys, uint32_t key_bytes,
                             const float *values, uint32_t dim, char *err, size_t err_len)
{
    if (s == NULL) {
        hps__pdb_err(err, err_len, "hps_pdb_stage_rows: NULL stage");
        return HPS_EINVAL;
    }
    hps_err_t rc =
        hps__pdb_check_args(n, keys, key_bytes, values, dim, "hps_pdb_stage_rows", err, err_len);
    if (rc != 0 || n == 0)
        return rc;
    char *file = stage_file(s, s->st_files);
    if (file == NULL)
        return -ENOMEM;
    size_t m = 0;
    rc = write_rows_sst(s->st_db, s->st_what, n, keys, key_bytes, values, dim, file, &m, err,
                        err_len);
    if (rc == 0) {
        s->st_files++;
        s->st_rows += m;
    } else {
        unlink(file);
    }
    free(file);
    return hps__pdb_fail(s->st_db, rc);
}

hps_err_t hps_pdb_stage_ingest(hps_pdb_stage_t *s, hps_pdb_table_t *t, char *err, size_t err_len)
{
    if (s == NULL || t == NULL || t->t_db != s->st_db) {
        hps__pdb_err(err, err_len, "hps_pdb_stage_ingest: NULL argument or another database");
        return HPS_EINVAL;
    }
    hps_err_t rc = hps__pdb_check_writable(t->t_db, t->t_name, err, err_len);
    while (rc == 0 && s->st_ingested < s->st_files) {
        char *file = stage_file(s, s->st_ingested);
        if (file == NULL)
            return -ENOMEM;
        rc = sst_ingest(t, file, err, err_len); /* in order: a later chunk's rows win */
        free(file);
        if (rc == 0) {
            s->st_ingested++;
            HPS__PDB_COUNT(t->t_db, sst_files, 1);
        }
    }
    if (rc == 0)
        HPS__PDB_COUNT(t->t_db, bulk_rows, s->st_rows);
    return hps__pdb_fail(t->t_db, rc);
}

void hps_pdb_stage_close(hps_pdb_stage_t *s)
{
    if (s == NULL)
        return;
    for (size_t i = s->st_ingested; i < s->st_files; i++) {
        char *file = stage_file(s, i);
        if (file != NULL)
            unlink(file);
        free(file);
    }
    rmdir(s->st_dir);
    free(s->st_dir);
    free(s->st_what);
    free(s);
}

/* ------------------------------------------------------------------------ */
/* Leftovers of crashed bulk loads                                           */
/* ------------------------------------------------------------------------ */

/* Remove a directory holding plain files only (what bulk loads and stages make). */
static void rm_flat_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char *p;

    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (asprintf(&p, "%s/%s", dir, e->d_name) >= 0) {
            unlink(p);
            free(p);
        }
    }
    closedir(d);
    rmdir(dir);
}

void hps__pdb_clean_ingest_dirs(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *e;
    char *p;

    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, HPS__PDB_INGEST_PREFIX, strlen(HPS__PDB_INGEST_PREFIX)) != 0)
            continue;
        if (asprintf(&p, "%s/%s", path, e->d_name) >= 0) {
            rm_flat_dir(p);
            free(p);
        }
    }
    closedir(d);
}
