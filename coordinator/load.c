/*
 * load.c -- model loading at start-up: every model's files are validated
 * before anything is written; then each table is created in the volatile DB,
 * every row goes to the persistent DB (bulk SST ingestion), and
 * initial_cache_rate of the rows go to the volatile DB (HugeCTR only logged
 * that rate; here it is honoured) and, with [distributed_db] redis_cluster,
 * that layer's initial_cache_rate of the rows to Redis.
 *
 * RESTARTS.  After ingesting a table's files the persistent DB records their
 * identity (metadata entry "loaded.hps_et.<model>.<table>": dim, key width,
 * and for the key and emb_vector files the path, size, mtime and FNV-1a
 * hashes of the first and the last MiB).  A later start with the same files
 * does not ingest them again, so the online updates applied (and committed)
 * since are kept: Kafka would not deliver them again.  Changed files are a
 * new model: the table's rows are dropped and the new files ingested.  The
 * record is deleted before and written after (synced) a re-ingestion, so a
 * crash in between re-ingests at the next start.  Whenever the persistent DB
 * holds the current files (recorded identity = the files'), the volatile DB
 * and Redis, when they are filled, take the same rows (the files' first
 * initial_cache_rate keys) with the values from the persistent DB, which
 * include the applied updates.
 *
 * MODEL CONTENTS.  Before anything is written, one pass over every table's
 * files (hps_modelfile_check_table()) counts the rows with a NaN or +-Inf
 * value and the keys given on more than one row.  [model.<name>]
 * nonfinite_values / duplicate_keys = refuse refuses the start-up for them
 * (HPS_EXIT_MODEL); warn (the default) logs one WARN line per table and
 * loads NaN/Inf rows as they are and, for a duplicated key, its LAST row in
 * every layer: the persistent DB keeps the last row by itself
 * (pdb-bulk.c), a full fill of the volatile or distributed DB upserts rows
 * in file order, and a partial one (initial_cache_rate < 1, values from the
 * files) writes the last row's vector for a key whose last row lies beyond
 * the rows it loads (last_rows()).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "coord.h"
#include "hps/log.h"
#include "hps/modelfile.h"

_Static_assert(HPS_CONF_MAX_TABLES == HPS_SHMDB_MAX_TABLES,
               "the config's table limit is the volatile DB's table directory");

#define CHUNK_BYTES (64ULL << 20) /* bounds start-up memory per table */
#define IDENT_MAX   3072          /* a table's file identity, with the NUL (< HPS_PDB_META_MAX) */
#define FILE_ID_MAX 1400          /* one file's part of it */
#define PATH_ID_MAX 1200          /* longer paths are named by their hash in it */
#define HASH_SPAN   (1u << 20)    /* bytes hashed at each end of a file */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- identity of a table's files ---------------------------------------- */

/* FNV-1a (64 bit) of up to HASH_SPAN bytes of fd at off, folded into h. */
static bool hash_span(int fd, off_t off, size_t len, uint64_t *h)
{
    static const size_t bufsz = 65536;
    unsigned char *buf = malloc(bufsz);
    bool ok = buf != NULL;
    while (ok && len > 0) {
        ssize_t got = pread(fd, buf, len < bufsz ? len : bufsz, off);
        if (got <= 0) {
            ok = false;
            break;
        }
        for (ssize_t i = 0; i < got; i++)
            *h = (*h ^ buf[i]) * 0x100000001b3ULL;
        off += got;
        len -= (size_t)got;
    }
    free(buf);
    return ok;
}

/* "<path> size=S mtime=SEC.NSEC head=H tail=T" of one file; a path longer
 * than PATH_ID_MAX is written "path-fnv1a=<hash of the path>" so that every
 * valid path fits the persistent DB's record.  false with errno set. */
static bool file_ident(const char *path, char *buf, size_t len)
{
    /* O_NONBLOCK: a FIFO put in place since validation must not hang here */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return false;
    int e = fstat(fd, &st) < 0 ? errno : !S_ISREG(st.st_mode) ? EINVAL : 0;
    if (e) {
        close(fd);
        errno = e;
        return false;
    }
    uint64_t head = 0xcbf29ce484222325ULL, tail = head;
    size_t span = (uint64_t)st.st_size < HASH_SPAN ? (size_t)st.st_size : HASH_SPAN;
    bool ok = hash_span(fd, 0, span, &head) && hash_span(fd, st.st_size - (off_t)span, span, &tail);
    close(fd);
    char named[64];
    if (strlen(path) > PATH_ID_MAX) {
        uint64_t h = 0xcbf29ce484222325ULL;
        for (const char *p = path; *p; p++)
            h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
        snprintf(named, sizeof(named), "path-fnv1a=%016" PRIx64, h);
    }
    int n = snprintf(buf, len, "%s size=%lld mtime=%lld.%09ld head=%016" PRIx64 " tail=%016" PRIx64,
                     strlen(path) > PATH_ID_MAX ? named : path, (long long)st.st_size,
                     (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec, head, tail);
    if (!ok)
        errno = EIO;
    else if (n <= 0 || (size_t)n >= len)
        errno = ENAMETOOLONG;
    return ok && n > 0 && (size_t)n < len;
}

/* The identity of table t's files (see the top of this file). */
static bool table_ident(const coord_t *c, const hps_conf_model_t *m, size_t t, char *buf,
                        size_t len)
{
    char key[PATH_MAX + 16], vec[PATH_MAX + 16], kid[FILE_ID_MAX], vid[FILE_ID_MAX];
    snprintf(key, sizeof(key), "%s/key", m->sparse_files[t]);
    snprintf(vec, sizeof(vec), "%s/emb_vector", m->sparse_files[t]);
    if (!file_ident(key, kid, sizeof(kid)) || !file_ident(vec, vid, sizeof(vid)))
        return false;
    int n = snprintf(buf, len, "v1 dim=%d key_bytes=%u; %s; %s",
                     (int)m->embedding_vecsize_per_table[t], c->key_bytes, kid, vid);
    if (n <= 0 || (size_t)n >= len)
        errno = ENAMETOOLONG;
    return n > 0 && (size_t)n < len;
}

/* With a persistent DB: every table's file identity, taken before anything
 * is written, into ident (m's tables; pdb_check compares them). */
static int take_idents(const coord_t *c, const hps_conf_model_t *m, char (*ident)[IDENT_MAX])
{
    for (size_t t = 0; ident && t < m->num_tables; t++) {
        if (table_ident(c, m, t, ident[t], IDENT_MAX))
            continue;
        HPS_ERROR("model %s refused, nothing was loaded: table %s: cannot take the identity of "
                  "%s/key and emb_vector: %s",
                  m->name, m->embedding_table_names[t], m->sparse_files[t], strerror(errno));
        return HPS_EXIT_MODEL;
    }
    return 0;
}

/* Name of table t's metadata entry. */
static void ident_name(const hps_conf_model_t *m, size_t t, char *buf, size_t len)
{
    snprintf(buf, len, "loaded.hps_et.%s.%s", m->name, m->embedding_table_names[t]);
}

static void specs_of(const coord_t *c, const hps_conf_model_t *m, hps_modelfile_spec_t *specs)
{
    for (size_t t = 0; t < m->num_tables; t++)
        specs[t] = (hps_modelfile_spec_t){.table = m->embedding_table_names[t],
                                          .dir = m->sparse_files[t],
                                          .dim = (uint32_t)m->embedding_vecsize_per_table[t],
                                          .key_bytes = c->key_bytes};
}

/* The keys a table's files give on more than one row, each with the row
 * that wins (its last), sorted by key. */
typedef struct table_dups {
    hps_modelfile_dup_t *d;
    size_t n;
} table_dups_t;

/* Per table of every model, in the order of c->idents: filled by
 * coord_validate_models() (the content check), used by fill_layer(), freed
 * by coord_load_models(). */
static table_dups_t *g_dups;
static size_t g_dups_len;

static void free_dups(void)
{
    for (size_t i = 0; i < g_dups_len; i++)
        free(g_dups[i].d);
    free(g_dups);
    g_dups = NULL;
    g_dups_len = 0;
}

/* The [model] keys that govern the kinds of bad rows found. */
static const char *bad_row_keys(bool nonfinite, bool dup)
{
    return nonfinite && dup ? "nonfinite_values, duplicate_keys"
           : nonfinite      ? "nonfinite_values"
                            : "duplicate_keys";
}

/* Check the contents of m's tables (NaN/Inf values, duplicate keys): refuse
 * the model as its nonfinite_values / duplicate_keys say, else log one
 * warning per table with bad rows.  dups: m's entries of g_dups. */
static int check_contents(const hps_conf_model_t *m, const hps_modelfile_spec_t *specs,
                          table_dups_t *dups, uint64_t *ret_nonfinite, uint64_t *ret_dup_keys)
{
    bool refuse_nf = m->nonfinite_values == HPS_CONF_BAD_ROWS_REFUSE;
    bool refuse_dup = m->duplicate_keys == HPS_CONF_BAD_ROWS_REFUSE;
    unsigned refuse =
        (refuse_nf ? HPS_MODELFILE_NONFINITE : 0) | (refuse_dup ? HPS_MODELFILE_DUPLICATES : 0);
    char err[1024], what[768], hint[320];
    for (size_t t = 0; t < m->num_tables; t++) {
        hps_modelfile_stats_t st = {0};
        hps_err_t rc = hps_modelfile_check_table(&specs[t], refuse, &st, &dups[t].d, &dups[t].n,
                                                 err, sizeof(err));
        bool nf = st.nonfinite_rows > 0, dup = st.dup_keys > 0;
        if (rc < 0) {
            hint[0] = '\0';
            if ((refuse_nf && nf) || (refuse_dup && dup))
                snprintf(hint, sizeof(hint), " ([model.%s] %s = refuse)", m->name,
                         bad_row_keys(refuse_nf && nf, refuse_dup && dup));
            HPS_ERROR("model %s refused, nothing was loaded: %s%s", m->name, err, hint);
            return HPS_EXIT_MODEL;
        }
        *ret_nonfinite += st.nonfinite_rows;
        *ret_dup_keys += st.dup_keys;
        if (hps_modelfile_stats_format(&st, specs[t].dir,
                                       HPS_MODELFILE_NONFINITE | HPS_MODELFILE_DUPLICATES, what,
                                       sizeof(what)))
            HPS_WARN("model %s table %s: %s; loaded%s%s%s ([model.%s] %s = warn; `refuse` "
                     "refuses such a model)",
                     m->name, specs[t].table, what,
                     nf ? " the rows with NaN or Inf as they are" : "", nf && dup ? " and" : "",
                     dup ? " the last row of each repeated key" : "", m->name,
                     bad_row_keys(nf, dup));
    }
    return 0;
}

/* Refuse the whole start-up if any table of any model is malformed.  With
 * ident (a persistent DB), the identities of every model's tables, in order. */
static int validate_all(coord_t *c, char (*ident)[IDENT_MAX])
{
    char err[512];
    for (size_t i = 0, first = 0; i < c->conf->num_models;
         first += c->conf->models[i++].num_tables) {
        const hps_conf_model_t *m = &c->conf->models[i];
        hps_modelfile_spec_t specs[256];
        uint64_t rows = 0;
        if (m->num_tables > 256) {
            HPS_ERROR("model %s: %zu tables, at most 256", m->name, m->num_tables);
            return HPS_EXIT_MODEL;
        }
        specs_of(c, m, specs);
        hps_err_t rc = hps_modelfile_validate_model(specs, m->num_tables, &rows, err, sizeof(err));
        if (rc < 0) {
            HPS_ERROR("model %s refused, nothing was loaded: %s", m->name, err);
            return HPS_EXIT_MODEL;
        }
        uint64_t nonfinite = 0, dup_keys = 0;
        double t0 = now_s();
        int ex = check_contents(m, specs, g_dups + first, &nonfinite, &dup_keys);
        if (ex)
            return ex;
        double dt = now_s() - t0;
        ex = take_idents(c, m, ident ? ident + first : NULL);
        if (ex)
            return ex;
        HPS_INFO("model %s: %zu tables, %llu rows, files valid; contents checked in %.2f s (rows "
                 "with NaN or Inf: %llu, keys on more than one row: %llu)",
                 m->name, m->num_tables, (unsigned long long)rows, dt,
                 (unsigned long long)nonfinite, (unsigned long long)dup_keys);
    }
    return 0;
}

/* A re-attached segment holds the table with another geometry: name the
 * setting that differs (it cannot change while the segment holds data). */
static int table_mismatch(coord_t *c, const hps_table_spec_t *s)
{
    uint32_t id;
    hps_table_info_t ti;
    char what[160] = "its geometry";
    if (hps_shmdb_table_find(c->db, s->model, s->table, &id) == 0 &&
        hps_shmdb_table_info(c->db, id, &ti) == 0) {
        if (ti.dim != s->dim)
            snprintf(what, sizeof(what), "embedding_vecsize_per_table: %u there, %u here", ti.dim,
                     s->dim);
        else if (ti.key_bytes != s->key_bytes)
            snprintf(what, sizeof(what), "supportlonglong: %u-byte keys there, %u-byte here",
                     ti.key_bytes, s->key_bytes);
        else if (ti.num_partitions != s->num_partitions)
            snprintf(what, sizeof(what), "[volatile_db] num_partitions: %u there, %u here",
                     ti.num_partitions, s->num_partitions);
    }
    HPS_ERROR("model %s table %s: the existing /dev/shm/hps.%s holds it with another %s; set "
              "[volatile_db] initialize_after_startup = true to rebuild the segment, or restore "
              "the setting in %s",
              s->model, s->table, c->conf->volatile_db.shared_memory_name, what, c->conf->source);
    return HPS_EXIT_SEGMENT;
}

/* A re-attached table keeps its default value and overflow settings: say so
 * when the configuration asks for others. */
static void warn_changed(coord_t *c, const hps_table_spec_t *s, uint32_t id)
{
    hps_table_info_t ti;
    if (hps_shmdb_table_info(c->db, id, &ti) != 0)
        return;
    if (ti.default_value != s->default_value || ti.overflow_margin != s->overflow_margin ||
        ti.overflow_policy != s->overflow_policy ||
        ti.overflow_resolution_target != s->overflow_resolution_target)
        HPS_WARN("model %s table %s: the re-attached volatile DB keeps the table's default value "
                 "(%g) and overflow settings (margin %llu, policy %s, target %g); the "
                 "configuration's (%g, %llu, %s, %g) take effect only with "
                 "initialize_after_startup = true",
                 s->model, s->table, (double)ti.default_value,
                 (unsigned long long)ti.overflow_margin,
                 hps_overflow_policy_name(ti.overflow_policy), ti.overflow_resolution_target,
                 (double)s->default_value, (unsigned long long)s->overflow_margin,
                 hps_overflow_policy_name(s->overflow_policy), s->overflow_resolution_target);
}

static int create_table(coord_t *c, const hps_conf_model_t *m, uint32_t t, uint64_t rows)
{
    const hps_conf_volatile_db_t *v = &c->conf->volatile_db;
    double want = ceil((double)rows * v->initial_cache_rate);
    hps_table_spec_t s = {.model = m->name,
                          .table = m->embedding_table_names[t],
                          .dim = (uint32_t)m->embedding_vecsize_per_table[t],
                          .key_bytes = c->key_bytes,
                          .default_value = (float)m->default_value_for_each_table[t],
                          .num_partitions = (uint32_t)v->num_partitions,
                          .overflow_margin = v->overflow_margin,
                          .overflow_policy = v->overflow_policy,
                          .overflow_resolution_target = v->overflow_resolution_target,
                          .expected_rows = (uint64_t)want,
                          .source_rows = rows};
    uint32_t id;
    hps_err_t rc = hps_shmdb_table_create(c->db, &s, &id);
    hps_segment_info_t si;
    if (rc == HPS_ENOSPC && hps_shmdb_segment_info(c->db, &si) == 0) {
        HPS_ERROR("model %s table %s (%llu expected rows of %u floats): cannot create it in the "
                  "volatile DB: the shared-memory segment is full, %llu of its %llu bytes in use; "
                  "raise [volatile_db] shared_memory_size in %s (the tables created before it "
                  "stay in the segment, empty, until it is removed)",
                  m->name, s.table, (unsigned long long)s.expected_rows, s.dim,
                  (unsigned long long)si.used_bytes, (unsigned long long)si.size_bytes,
                  c->conf->source);
        return HPS_EXIT_MODEL;
    }
    if (rc == -ENOSPC) {
        HPS_ERROR("model %s table %s: cannot create it in the volatile DB: /dev/shm has no space "
                  "left for the segment to grow (posix_fallocate); free space there or lower "
                  "[volatile_db] shared_memory_size in %s",
                  m->name, s.table, c->conf->source);
        return HPS_EXIT_MODEL;
    }
    if (rc == HPS_EMISMATCH)
        return table_mismatch(c, &s);
    if (rc < 0) {
        HPS_ERROR("model %s table %s: cannot create it in the volatile DB: %s", m->name, s.table,
                  hps_strerror(rc));
        return HPS_EXIT_MODEL;
    }
    warn_changed(c, &s, id);
    coord_table_t *ct = &c->tables[id];
    *ct = (coord_table_t){.model = m, .index = t, .name = s.table, .dim = s.dim, .vdb_id = id};
    if (id + 1 > c->num_tables)
        c->num_tables = id + 1;
    int ex = coord_ddb_table(c, ct);
    if (ex)
        return ex;
    if (c->pdb) {
        char err[512];
        bool create = !c->conf->persistent_db.read_only;
        rc = hps_pdb_table(c->pdb, m->name, s.table, create, &ct->pdb, err, sizeof(err));
        if (rc < 0) {
            HPS_ERROR("model %s table %s: persistent DB: %s", m->name, s.table, err);
            return HPS_EXIT_PDB;
        }
    }
    return 0;
}

static void progress(const char *what, uint64_t done, uint64_t total)
{
    if (!isatty(STDERR_FILENO) || total == 0)
        return;
    fprintf(stderr, "\r  %s: %5.1f%% (%llu / %llu rows)", what,
            100.0 * (double)done / (double)total, (unsigned long long)done,
            (unsigned long long)total);
    if (done >= total)
        fputc('\n', stderr);
}

/* Write n rows to the volatile DB, or to the distributed DB when ddb. */
static hps_err_t put_rows(coord_t *c, const coord_table_t *ct, bool ddb, size_t n, const void *keys,
                          const float *vecs, char *err, size_t err_len)
{
    if (ddb)
        return hps_ddb_insert(ct->ddb, n, keys, vecs, err, err_len);
    return hps_shmdb_upsert(c->db, ct->vdb_id, n, keys, vecs, NULL);
}

/* Replace the n rows' values by the persistent DB's (those found). */
static hps_err_t values_from_pdb(const coord_t *c, const coord_table_t *ct, size_t n,
                                 const void *keys, float *vecs, char *err, size_t err_len)
{
    return hps_pdb_lookup(ct->pdb, n, keys, c->key_bytes, ct->dim, vecs, NULL, NULL, err, err_len);
}

static int dup_key_cmp(const void *a, const void *b)
{
    int64_t x = ((const hps_modelfile_dup_t *)a)->key, y = ((const hps_modelfile_dup_t *)b)->key;
    return (x > y) - (x < y);
}

/* A fill of the first `want` rows only: give each of the n rows whose key
 * the files repeat after row `want` the vector of the key's last row, so
 * that the last row wins here too. */
static hps_err_t last_rows(hps_modelfile_t *mf, const table_dups_t *dups, uint64_t want,
                           uint32_t key_bytes, size_t n, const void *keys, float *vecs, char *err,
                           size_t err_len)
{
    uint32_t dim = hps_modelfile_dim(mf);
    for (size_t i = 0; dups && dups->n && i < n; i++) {
        hps_modelfile_dup_t k = {.key = key_bytes == 8 ? ((const int64_t *)keys)[i]
                                                       : (int64_t)((const uint32_t *)keys)[i]};
        const hps_modelfile_dup_t *d = bsearch(&k, dups->d, dups->n, sizeof(k), dup_key_cmp);
        hps_err_t rc = d && d->last_row >= want ? hps_modelfile_read(mf, d->last_row, 1, NULL,
                                                                     vecs + i * dim, err, err_len)
                                                : 0;
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Upsert the first `want` rows of the table's files into the volatile DB,
 * or, when ddb, into the distributed DB; with from_pdb, the values come from
 * the persistent DB (the files' where it lacks a key); else, for a key that
 * the files give again after row `want`, the vector of its last row. */
static int fill_layer(coord_t *c, const coord_table_t *ct, bool ddb, bool from_pdb, const char *dir,
                      const table_dups_t *dups, uint64_t want, uint64_t *ret_bytes)
{
    const char *layer = ddb ? "distributed" : "volatile";
    char err[512];
    hps_modelfile_t *mf;
    err[0] = '\0';
    hps_err_t rc = hps_modelfile_open(dir, ct->dim, &mf, err, sizeof(err));
    if (rc < 0) {
        HPS_ERROR("%s: %s", dir, err);
        return HPS_EXIT_MODEL;
    }
    uint64_t chunk = hps_modelfile_chunk_rows(mf, CHUNK_BYTES);
    int64_t *keys = malloc(chunk * sizeof(int64_t));
    float *vecs = malloc(chunk * ct->dim * sizeof(float));
    int ex = keys && vecs ? 0 : HPS_EXIT_RUNTIME;
    for (uint64_t row = 0; ex == 0 && row < want; row += chunk) {
        size_t n = (size_t)(want - row < chunk ? want - row : chunk);
        rc = c->key_bytes == 8
                 ? hps_modelfile_read(mf, row, n, keys, vecs, err, sizeof(err))
                 : hps_modelfile_read_u32(mf, row, n, (uint32_t *)keys, vecs, err, sizeof(err));
        if (rc == 0 && from_pdb)
            rc = values_from_pdb(c, ct, n, keys, vecs, err, sizeof(err));
        else if (rc == 0 && want < hps_modelfile_rows(mf))
            rc = last_rows(mf, dups, want, c->key_bytes, n, keys, vecs, err, sizeof(err));
        if (rc == 0)
            rc = put_rows(c, ct, ddb, n, keys, vecs, err, sizeof(err));
        if (rc < 0) {
            HPS_ERROR("%s: loading into the %s DB: %s", dir, layer,
                      err[0] ? err : hps_strerror(rc));
            ex = ddb ? HPS_EXIT_DDB : HPS_EXIT_MODEL;
        }
        progress(ct->name, row + n, want);
        *ret_bytes += n * (8 + ct->dim * sizeof(float));
    }
    free(keys);
    free(vecs);
    hps_modelfile_close(mf);
    return ex;
}

/* Per table of a model: the identity of its files and whether the
 * persistent DB holds exactly them (plus the updates applied since). */
typedef struct model_state {
    char (*ident)[IDENT_MAX];
    bool *current;
} model_state_t;

/* Fill st->current: the identities of the files (taken by validate_all),
 * compared with the PDB's records. */
static int pdb_check(coord_t *c, const hps_conf_model_t *m, model_state_t *st)
{
    if (!c->pdb)
        return 0;
    for (size_t t = 0; t < m->num_tables; t++) {
        char name[320], rec[HPS_PDB_META_MAX], err[512];
        ident_name(m, t, name, sizeof(name));
        hps_err_t rc = hps_pdb_meta_get(c->pdb, name, rec, sizeof(rec), err, sizeof(err));
        if (rc < 0 && rc != HPS_ENOTFOUND) {
            HPS_ERROR("model %s: persistent DB: %s", m->name, err);
            return HPS_EXIT_PDB;
        }
        st->current[t] = rc == 0 && strcmp(rec, st->ident[t]) == 0;
        if (rc == 0 && !st->current[t])
            HPS_INFO("model %s table %s: the model files changed since the persistent DB "
                     "ingested them (was: %s; now: %s)",
                     m->name, m->embedding_table_names[t], rec, st->ident[t]);
    }
    return 0;
}

/* Before re-ingesting table t: forget its record (a crash from here on
 * re-ingests), then drop its rows (a new model replaces the old one). */
static int pdb_reset_table(coord_t *c, const hps_conf_model_t *m, size_t t)
{
    char name[320], err[512];
    uint32_t id;
    ident_name(m, t, name, sizeof(name));
    hps_shmdb_table_find(c->db, m->name, m->embedding_table_names[t], &id);
    coord_table_t *ct = &c->tables[id];
    if (hps_pdb_meta_put(c->pdb, name, NULL, err, sizeof(err)) < 0 ||
        hps_pdb_drop(ct->pdb, err, sizeof(err)) < 0 ||
        hps_pdb_table(c->pdb, m->name, ct->name, true, &ct->pdb, err, sizeof(err)) < 0) {
        HPS_ERROR("model %s table %s: persistent DB: %s", m->name, ct->name, err);
        return HPS_EXIT_PDB;
    }
    return 0;
}

static int pdb_ingest(coord_t *c, const hps_conf_model_t *m, model_state_t *st)
{
    char err[512];
    hps_modelfile_spec_t all[256], specs[256];
    size_t n = 0;
    specs_of(c, m, all);
    /* One SST per table up to 256 MiB of rows (HugeCTR's ten chunks per
     * table make overlapping SSTs that RocksDB then compacts). */
    uint32_t maxdim = 1;
    for (size_t t = 0; t < m->num_tables; t++) {
        if (st->current[t])
            continue;
        int ex = pdb_reset_table(c, m, t);
        if (ex)
            return ex;
        specs[n++] = all[t];
        if (all[t].dim > maxdim)
            maxdim = all[t].dim;
    }
    uint64_t chunk = (256ULL << 20) / (8 + (uint64_t)maxdim * sizeof(float));
    hps_err_t rc = hps_pdb_load_model(c->pdb, m->name, specs, n, chunk, err, sizeof(err));
    if (rc < 0) {
        HPS_ERROR("model %s: loading into the persistent DB: %s", m->name, err);
        return HPS_EXIT_MODEL;
    }
    for (size_t t = 0; t < m->num_tables; t++) {
        char name[320];
        ident_name(m, t, name, sizeof(name));
        if (!st->current[t] && hps_pdb_meta_put(c->pdb, name, st->ident[t], err, sizeof(err)) < 0) {
            HPS_ERROR("model %s: persistent DB: recording the ingested files: %s", m->name, err);
            return HPS_EXIT_PDB;
        }
        st->current[t] = true;
    }
    return 0;
}

/* Ingest the tables whose files the persistent DB does not hold yet. */
static int load_pdb(coord_t *c, const hps_conf_model_t *m, model_state_t *st)
{
    size_t stale = 0;
    for (size_t t = 0; t < m->num_tables; t++)
        stale += !st->current[t];
    if (stale == 0) {
        HPS_INFO("model %s: the persistent DB already holds these model files (same path, size, "
                 "mtime and first/last MiB): not ingested again, the updates applied since are "
                 "kept",
                 m->name);
        return 0;
    }
    double t0 = now_s();
    int ex = pdb_ingest(c, m, st);
    if (ex)
        return ex;
    HPS_INFO("model %s: %zu of %zu tables ingested into the persistent DB in %.2f s", m->name,
             stale, m->num_tables, now_s() - t0);
    return 0;
}

/* Write initial_cache_rate of every table of m to the distributed DB. */
static int fill_ddb(coord_t *c, const hps_conf_model_t *m, const uint64_t *rows,
                    const bool *from_pdb, const table_dups_t *dups)
{
    if (!c->ddb)
        return 0;
    double rate = c->conf->distributed_db.initial_cache_rate, t0 = now_s();
    uint64_t bytes = 0, total = 0;
    for (uint32_t t = 0; t < m->num_tables; t++) {
        uint32_t id;
        hps_shmdb_table_find(c->db, m->name, m->embedding_table_names[t], &id);
        uint64_t want = (uint64_t)ceil((double)rows[t] * rate);
        total += want;
        int ex = fill_layer(c, &c->tables[id], true, from_pdb[t], m->sparse_files[t],
                            dups ? &dups[t] : NULL, want, &bytes);
        if (ex)
            return ex;
    }
    HPS_INFO("model %s: %llu rows (initial_cache_rate %.3g) into the distributed DB in %.2f s",
             m->name, (unsigned long long)total, rate, now_s() - t0);
    return 0;
}

/* Fill the volatile DB: initial_cache_rate of every table's rows. */
static int fill_vdb(coord_t *c, const hps_conf_model_t *m, const uint64_t *rows,
                    const bool *from_pdb, const table_dups_t *dups)
{
    uint64_t bytes = 0, total = 0;
    size_t pdb_tables = 0;
    double t0 = now_s();
    for (uint32_t t = 0; t < m->num_tables; t++) {
        uint32_t id;
        hps_shmdb_table_find(c->db, m->name, m->embedding_table_names[t], &id);
        uint64_t want = (uint64_t)ceil((double)rows[t] * c->conf->volatile_db.initial_cache_rate);
        total += want;
        pdb_tables += from_pdb[t];
        int ex = fill_layer(c, &c->tables[id], false, from_pdb[t], m->sparse_files[t],
                            dups ? &dups[t] : NULL, want, &bytes);
        if (ex)
            return ex;
    }
    double dt = now_s() - t0;
    HPS_INFO("model %s: %llu rows (initial_cache_rate %.3g) into the volatile DB in %.2f s, "
             "%.1f MB/s; values of %zu of %zu tables from the persistent DB (with the updates "
             "applied to it)",
             m->name, (unsigned long long)total, c->conf->volatile_db.initial_cache_rate, dt,
             dt > 0 ? (double)bytes / dt / 1e6 : 0.0, pdb_tables, m->num_tables);
    return 0;
}

/* ident: the identities of m's tables (validate_all), NULL without a
 * persistent DB; dups: m's entries of g_dups (NULL: none known). */
static int load_model(coord_t *c, const hps_conf_model_t *m, bool vdb_reused,
                      char (*ident)[IDENT_MAX], const table_dups_t *dups)
{
    uint64_t rows[256];
    for (uint32_t t = 0; t < m->num_tables; t++) {
        hps_modelfile_t *mf;
        char err[512];
        uint32_t dim = (uint32_t)m->embedding_vecsize_per_table[t];
        if (hps_modelfile_open(m->sparse_files[t], dim, &mf, err, sizeof(err)) < 0) {
            HPS_ERROR("model %s: %s", m->name, err);
            return HPS_EXIT_MODEL;
        }
        rows[t] = hps_modelfile_rows(mf);
        hps_modelfile_close(mf);
        int ex = create_table(c, m, t, rows[t]);
        if (ex)
            return ex;
    }
    const hps_conf_persistent_db_t *p = &c->conf->persistent_db;
    model_state_t st = {.ident = ident, .current = calloc(m->num_tables, sizeof(bool))};
    int ex = st.current ? pdb_check(c, m, &st) : HPS_EXIT_RUNTIME;
    if (!ex && c->pdb && !p->read_only && p->initialize_after_startup)
        ex = load_pdb(c, m, &st);
    if (!ex)
        ex = fill_ddb(c, m, rows, st.current, dups);
    if (!ex && !vdb_reused)
        ex = fill_vdb(c, m, rows, st.current, dups);
    free(st.current);
    return ex;
}

int coord_validate_models(coord_t *c)
{
    size_t total = 0;
    for (size_t i = 0; i < c->conf->num_models; i++)
        total += c->conf->models[i].num_tables;
    free(c->idents);
    c->idents = c->pdb && total ? calloc(total, IDENT_MAX) : NULL;
    if (c->pdb && total && !c->idents)
        return HPS_EXIT_RUNTIME;
    free_dups();
    g_dups = calloc(total ? total : 1, sizeof(*g_dups));
    if (!g_dups)
        return HPS_EXIT_RUNTIME;
    g_dups_len = total;
    return validate_all(c, (char(*)[IDENT_MAX])c->idents);
}

int coord_load_models(coord_t *c, bool vdb_reused)
{
    char(*ident)[IDENT_MAX] = (char(*)[IDENT_MAX])c->idents;
    int ex = coord_ddb_open(c); /* no-op when main.c opened it already */
    if (!ex && !(c->tables = calloc(HPS_SHMDB_MAX_TABLES, sizeof(coord_table_t))))
        ex = HPS_EXIT_RUNTIME;
    for (size_t i = 0, first = 0; !ex && i < c->conf->num_models;
         first += c->conf->models[i++].num_tables)
        ex = load_model(c, &c->conf->models[i], vdb_reused, ident ? ident + first : NULL,
                        g_dups ? g_dups + first : NULL);
    free(c->idents);
    c->idents = NULL;
    free_dups();
    return ex;
}
