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
 * new model: the table's rows are dropped and the new files ingested, once
 * every model of the start has been loaded (STAGING).  The record is
 * deleted before and written after (synced) a re-ingestion, so a crash in
 * between re-ingests at the next start.  Whenever the persistent DB
 * held the current files before this start (recorded identity = the
 * files'), the volatile DB and Redis, when they are filled, take the same
 * rows (the files' first initial_cache_rate keys) with the values from the
 * persistent DB, which include the applied updates; tables ingested by this
 * start fill them from the files, in the same pass (THE LOAD PASS).
 *
 * The identity samples the files (2 MiB each) rather than hashing them
 * whole: a whole-file hash would be a second full read of the model at
 * every start, and path, size, mtime and both ends already tell a replaced
 * or rewritten file (a model writer rewrites the whole file, moving mtime).
 * The hashes are computed as they always were, so the records of an
 * existing persistent DB still match and no start re-ingests (and drops
 * the applied updates) for a change of this code.
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
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "coord.h"
#include "hps/log.h"
#include "hps/modelfile.h"
#include "load-internal.h"

_Static_assert(HPS_CONF_MAX_TABLES == HPS_SHMDB_MAX_TABLES,
               "the config's table limit is the volatile DB's table directory");

#define CHUNK_BYTES (64ULL << 20) /* bounds start-up memory per table */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
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

/* One table's content check and identity, taken on a loader thread. */
typedef struct check_res {
    hps_modelfile_stats_t st;
    hps_err_t rc;
    int ident_errno; /* 0: identity taken (or none wanted) */
    char err[1024];
} check_res_t;

typedef struct check_ctx {
    const coord_t *c;
    const hps_conf_model_t *m;
    const hps_modelfile_spec_t *specs;
    unsigned refuse;
    table_dups_t *dups;   /* m's entries of g_dups */
    coord_ident_t *ident; /* m's identities; NULL without a persistent or distributed DB */
    check_res_t *res;
} check_ctx_t;

static void check_job(void *ctx, size_t t, load_buf_t *b)
{
    check_ctx_t *k = ctx;
    check_res_t *r = &k->res[t];
    (void)b;
    r->rc = hps_modelfile_check_table(&k->specs[t], k->refuse, &r->st, &k->dups[t].d, &k->dups[t].n,
                                      r->err, sizeof(r->err));
    if (r->rc == 0 && k->ident &&
        !coord_table_ident(k->c, k->m, t, k->ident[t].files, IDENT_MAX, k->ident[t].content))
        r->ident_errno = errno ? errno : EIO;
}

/* Check the contents of m's tables (NaN/Inf values, duplicate keys) and,
 * with ident, take their identities, on the loader threads: refuse the
 * model as its nonfinite_values / duplicate_keys say (the first bad table
 * in order), else log one warning per table with bad rows. */
static int check_contents(const coord_t *c, const hps_conf_model_t *m,
                          const hps_modelfile_spec_t *specs, table_dups_t *dups,
                          coord_ident_t *ident, uint64_t *ret_nonfinite, uint64_t *ret_dup_keys)
{
    bool refuse_nf = m->nonfinite_values == HPS_CONF_BAD_ROWS_REFUSE;
    bool refuse_dup = m->duplicate_keys == HPS_CONF_BAD_ROWS_REFUSE;
    check_ctx_t k = {.c = c,
                     .m = m,
                     .specs = specs,
                     .dups = dups,
                     .ident = ident,
                     .refuse = (refuse_nf ? HPS_MODELFILE_NONFINITE : 0) |
                               (refuse_dup ? HPS_MODELFILE_DUPLICATES : 0),
                     .res = calloc(m->num_tables, sizeof(check_res_t))};
    char what[768], hint[320];
    int ex = k.res ? 0 : HPS_EXIT_RUNTIME;
    if (!ex)
        coord_load_par_run(check_job, &k, m->num_tables);
    for (size_t t = 0; !ex && t < m->num_tables; t++) {
        const check_res_t *r = &k.res[t];
        bool nf = r->st.nonfinite_rows > 0, dup = r->st.dup_keys > 0;
        if (r->rc < 0) {
            hint[0] = '\0';
            if ((refuse_nf && nf) || (refuse_dup && dup))
                snprintf(hint, sizeof(hint), " ([model.%s] %s = refuse)", m->name,
                         bad_row_keys(refuse_nf && nf, refuse_dup && dup));
            HPS_ERROR("model %s refused, nothing was loaded: %s%s", m->name, r->err, hint);
            ex = HPS_EXIT_MODEL;
            break;
        }
        *ret_nonfinite += r->st.nonfinite_rows;
        *ret_dup_keys += r->st.dup_keys;
        if (hps_modelfile_stats_format(&r->st, specs[t].dir,
                                       HPS_MODELFILE_NONFINITE | HPS_MODELFILE_DUPLICATES, what,
                                       sizeof(what)))
            HPS_WARN("model %s table %s: %s; loaded%s%s%s ([model.%s] %s = warn; `refuse` "
                     "refuses such a model)",
                     m->name, specs[t].table, what,
                     nf ? " the rows with NaN or Inf as they are" : "", nf && dup ? " and" : "",
                     dup ? " the last row of each repeated key" : "", m->name,
                     bad_row_keys(nf, dup));
    }
    for (size_t t = 0; !ex && t < m->num_tables; t++) {
        if (!k.res[t].ident_errno)
            continue;
        HPS_ERROR("model %s refused, nothing was loaded: table %s: cannot take the identity of "
                  "%s/key and emb_vector: %s",
                  m->name, m->embedding_table_names[t], m->sparse_files[t],
                  strerror(k.res[t].ident_errno));
        ex = HPS_EXIT_MODEL;
    }
    free(k.res);
    return ex;
}

/* Refuse the whole start-up if any table of any model is malformed.  With
 * ident (a persistent DB), the identities of every model's tables, in order. */
static int validate_all(coord_t *c, coord_ident_t *ident)
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
        int ex = check_contents(c, m, specs, g_dups + first, ident ? ident + first : NULL,
                                &nonfinite, &dup_keys);
        if (ex)
            return ex;
        unsigned threads = (unsigned)(m->num_tables < LOAD_THREADS ? m->num_tables : LOAD_THREADS);
        HPS_INFO("model %s: %zu table%s, %llu rows, files valid; contents checked in %.2f s (rows "
                 "with NaN or Inf: %llu, keys on more than one row: %llu) by %u thread%s",
                 m->name, m->num_tables, m->num_tables == 1 ? "" : "s", (unsigned long long)rows,
                 now_s() - t0, (unsigned long long)nonfinite, (unsigned long long)dup_keys, threads,
                 threads == 1 ? "" : "s");
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
        else if (ti.storage_type != s->storage_type)
            snprintf(what, sizeof(what), "storage_type: %s there, %s here",
                     hps_dtype_name(ti.storage_type), hps_dtype_name(s->storage_type));
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

/* [model.<name>] storage_type's constants are hps_dtype_t's, in its order. */
_Static_assert((int)HPS_CONF_STORAGE_FP32 == (int)HPS_DTYPE_FP32 &&
                   (int)HPS_CONF_STORAGE_FP16 == (int)HPS_DTYPE_FP16 &&
                   (int)HPS_CONF_STORAGE_BF16 == (int)HPS_DTYPE_BF16 &&
                   (int)HPS_CONF_STORAGE_INT8 == (int)HPS_DTYPE_INT8,
               "storage_type and hps_dtype_t must agree");

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
                          .source_rows = rows,
                          .model_version = (uint32_t)m->version,
                          .storage_type = (hps_dtype_t)m->storage_type};
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
        bool pdb_failed = false;
        if (rc == 0 && from_pdb)
            pdb_failed = (rc = values_from_pdb(c, ct, n, keys, vecs, err, sizeof(err))) < 0;
        else if (rc == 0 && want < hps_modelfile_rows(mf))
            rc = last_rows(mf, dups, want, c->key_bytes, n, keys, vecs, err, sizeof(err));
        if (rc == 0)
            rc = put_rows(c, ct, ddb, n, keys, vecs, err, sizeof(err));
        if (rc < 0) {
            HPS_ERROR("%s: loading into the %s DB%s: %s", dir, layer,
                      pdb_failed ? " (reading the persistent DB)" : "",
                      err[0] ? err : hps_strerror(rc));
            ex = pdb_failed ? HPS_EXIT_PDB : ddb ? HPS_EXIT_DDB : HPS_EXIT_MODEL;
        }
        progress(ct->name, row + n, want);
        *ret_bytes += n * (8 + ct->dim * sizeof(float));
    }
    free(keys);
    free(vecs);
    hps_modelfile_close(mf);
    return ex;
}

/* Per table of a model: the identity of its files, whether the persistent
 * DB holds exactly them (plus the updates applied since), and what loading
 * must do to its column family. */
typedef struct model_state {
    coord_ident_t *ident;
    bool *current; /* the PDB holds these files (else staged by the pass) */
    bool *held;    /* ... and did before this start: values come from the PDB */
    bool *has_rec; /* the PDB has a record of this table (maybe another's files) */
    bool *had_cf;  /* the column family existed before this start */
} model_state_t;

static int model_state_init(model_state_t *st, size_t n, coord_ident_t *ident)
{
    bool *b = calloc(n ? 4 * n : 1, sizeof(bool));
    *st = (model_state_t){
        .ident = ident, .current = b, .held = b + n, .has_rec = b + 2 * n, .had_cf = b + 3 * n};
    return b ? 0 : HPS_EXIT_RUNTIME;
}

typedef struct cf_seen {
    const hps_conf_model_t *m;
    bool *had_cf;
} cf_seen_t;

static int note_cf(const char *model, const char *table, void *ctx)
{
    cf_seen_t *s = ctx;
    for (size_t t = 0; strcmp(model, s->m->name) == 0 && t < s->m->num_tables; t++)
        if (strcmp(table, s->m->embedding_table_names[t]) == 0)
            s->had_cf[t] = true;
    return 0;
}

/* Fill st->current, held and has_rec: the identities of the files (taken by
 * validate_all) compared with the PDB's records. */
static int pdb_check(coord_t *c, const hps_conf_model_t *m, model_state_t *st)
{
    if (!c->pdb)
        return 0;
    for (size_t t = 0; t < m->num_tables; t++) {
        char name[320], rec[HPS_PDB_META_MAX], err[512];
        coord_ident_name(m->name, m->embedding_table_names[t], name, sizeof(name));
        hps_err_t rc = hps_pdb_meta_get(c->pdb, name, rec, sizeof(rec), err, sizeof(err));
        if (rc < 0 && rc != HPS_ENOTFOUND) {
            HPS_ERROR("model %s: persistent DB: %s", m->name, err);
            return HPS_EXIT_PDB;
        }
        st->has_rec[t] = rc == 0;
        st->current[t] = st->held[t] = rc == 0 && strcmp(rec, st->ident[t].files) == 0;
        if (rc == 0 && !st->current[t])
            HPS_INFO("model %s table %s: the model files changed since the persistent DB "
                     "ingested them (was: %s; now: %s)",
                     m->name, m->embedding_table_names[t], rec, st->ident[t].files);
    }
    return 0;
}

/* Table t of m: its handles in every layer (create_table made it). */
static coord_table_t *table_of(coord_t *c, const hps_conf_model_t *m, size_t t)
{
    uint32_t id = 0;
    hps_shmdb_table_find(c->db, m->name, m->embedding_table_names[t], &id);
    return &c->tables[id];
}

/*
 * STAGING.  A table whose files the persistent DB does not hold gets its
 * new rows as SST files in a stage (hps_pdb_stage_t) during the pass; its
 * column family keeps the rows it had until every model of this start has
 * been loaded, and only then are they replaced (pdb_commit): the contents
 * token renewed once, the table's record forgotten, its column family
 * dropped and made anew, the stage ingested, the record written.  So a
 * reload that fails or is killed while it builds leaves the persistent DB
 * as the serving version had it: the fallback (or the restart) finds its
 * tables and contents token unchanged, keeps them, and answers the serving
 * segment's misses from them meanwhile (serve.c), instead of ingesting them
 * again with those misses answered by defaults.  What remains is the time
 * from the first replacement to the publish (the ingestions, each a move
 * of files, and the Kafka catch-up).
 */
typedef struct staged {
    const hps_conf_model_t *m;
    size_t t;
    coord_table_t *ct;
    hps_pdb_stage_t *stage;
    bool has_rec, had_cf; /* model_state_t's, at staging */
    char *files;          /* the identity to record (coord_ident_t.files) */
} staged_t;

/* The stages of this start, in load order: main thread only, committed or
 * closed by coord_load_models(). */
static staged_t *g_staged;
static size_t g_staged_len, g_staged_cap;

static void staged_free(void)
{
    for (size_t i = 0; i < g_staged_len; i++) {
        hps_pdb_stage_close(g_staged[i].stage);
        free(g_staged[i].files);
    }
    free(g_staged);
    g_staged = NULL;
    g_staged_len = g_staged_cap = 0;
}

/* Table t of m staged: its entry (the stage stays the caller's until the
 * entry is added by staged_add). */
static int staged_add(const staged_t *e)
{
    if (g_staged_len == g_staged_cap) {
        size_t cap = g_staged_cap ? 2 * g_staged_cap : 64;
        staged_t *n = realloc(g_staged, cap * sizeof(*n));
        if (!n)
            return HPS_EXIT_RUNTIME;
        g_staged = n;
        g_staged_cap = cap;
    }
    g_staged[g_staged_len++] = *e;
    return 0;
}

/* Replace staged table e's rows: renew the contents token (once per image:
 * a segment built before no longer matches what the persistent DB holds,
 * so coord_prev_restart must not answer from here on a restart), forget
 * its record (a crash from here on ingests it again), drop its rows (a new
 * model replaces the old one), ingest the stage, record the files.  A
 * table without a record has none to forget, and a column family created
 * by this start is empty: neither costs a synced RocksDB write then. */
static int pdb_replace(coord_t *c, staged_t *e)
{
    char name[320], err[512] = "";
    coord_ident_name(e->m->name, e->m->embedding_table_names[e->t], name, sizeof(name));
    coord_table_t *ct = e->ct;
    int ex = c->pdb_token_renewed ? 0 : coord_pdb_token_renew(c);
    if (ex)
        return ex;
    if ((e->has_rec && hps_pdb_meta_put(c->pdb, name, NULL, err, sizeof(err)) < 0) ||
        (e->had_cf &&
         (hps_pdb_drop(ct->pdb, err, sizeof(err)) < 0 ||
          hps_pdb_table(c->pdb, e->m->name, ct->name, true, &ct->pdb, err, sizeof(err)) < 0)) ||
        hps_pdb_stage_ingest(e->stage, ct->pdb, err, sizeof(err)) < 0 ||
        hps_pdb_meta_put(c->pdb, name, e->files, err, sizeof(err)) < 0) {
        HPS_ERROR("model %s table %s: persistent DB: %s", e->m->name, ct->name, err);
        return HPS_EXIT_PDB;
    }
    return 0;
}

/* Every model loaded: the staged tables' rows replace the old ones.  The
 * ingestions move files (no room needed), but the token, the records and
 * the column families are synced RocksDB writes: with its disk full, one
 * of them fails midway (and the system's RocksDB may abort on the next:
 * an assertion after a failed log write), so the replacement does not
 * start without HPS_COORD_PDB_COMMIT_ROOM free, and the build fails with
 * the persistent DB as it was. */
static int pdb_commit(coord_t *c)
{
    uint64_t avail;
    if (g_staged_len && coord_pdb_avail(c->conf->persistent_db.path, &avail) &&
        avail < HPS_COORD_PDB_COMMIT_ROOM) {
        HPS_ERROR("persistent DB: %s has %llu MiB free, less than the %llu MiB replacing the "
                  "tables' rows needs (RocksDB's logs and metadata): nothing replaced",
                  c->conf->persistent_db.path, (unsigned long long)(avail >> 20),
                  HPS_COORD_PDB_COMMIT_ROOM >> 20);
        return HPS_EXIT_PDB;
    }
    double t0 = now_s();
    for (size_t i = 0; i < g_staged_len; i++) {
        int ex = pdb_replace(c, &g_staged[i]);
        if (ex)
            return ex;
    }
    if (g_staged_len)
        HPS_INFO("persistent DB: the staged rows of %zu table%s ingested in %.3f s (every model "
                 "loaded: only now do they replace what the tables held)",
                 g_staged_len, g_staged_len == 1 ? "" : "s", now_s() - t0);
    return 0;
}

/* ---- one pass over the files: persistent and volatile DB together ------ */

/*
 * THE LOAD PASS.  A table whose rows go to the persistent DB (the PDB does
 * not hold its files) or to the volatile DB from the files is read once:
 * each chunk of up to SST_BYTES of rows is read with large sequential
 * preads, sorted and written as one SST file of the table's stage
 * (hps_pdb_stage_rows(), ingested after every model by pdb_commit: STAGING
 * above; one SST per table up to that size: HugeCTR's ten chunks per table
 * made overlapping SSTs that RocksDB then compacted), and its first rows (up to
 * initial_cache_rate of the table) are upserted into the volatile DB from
 * the same buffers.  Filling the volatile DB from the files rather than
 * reading the freshly ingested rows back from RocksDB gives the same values:
 * the ingestion keeps each key's last row, and so do file-order upserts (a
 * partial fill: last_rows()); no update can arrive in between (the update
 * source starts after loading).  A table that the PDB held already takes
 * its values from the PDB afterwards (fill_layer()): they include the
 * updates applied since the files were ingested.
 *
 * STEPS.  Each loader thread (LOAD_THREADS) takes the tables largest
 * first and works in bounded steps -- a READ_PIECE read, a VDB_BATCH-row
 * upsert -- yielding the CPU between them (sched_yield), so that lookups
 * served meanwhile get the CPU, and the volatile DB's partition locks,
 * between steps.  RocksDB's background threads ([persistent_db]
 * num_threads) have nothing to compact: each SST lands in an empty key
 * range of its column family's bottom level.  Memory: per thread one chunk
 * (at most SST_BYTES of keys and vectors) and the sort's 32 bytes per row.
 */
#define SST_BYTES  (256ULL << 20) /* rows per SST file, and per read chunk */
#define READ_PIECE (16ULL << 20)  /* bytes of rows per pread pair, between yields */
#define VDB_BATCH  16384          /* rows per volatile-DB upsert, between yields */

/* One table's work in the pass, and its outcome. */
typedef struct load_job {
    coord_t *c;
    coord_table_t *ct;
    const char *dir;
    const table_dups_t *dups; /* NULL: none known */
    uint64_t rows;            /* of the files */
    bool pdb;                 /* stage for the persistent DB */
    hps_pdb_stage_t *stage;   /* ... there (the job's until the pass ends) */
    uint64_t vdb_want;        /* upsert the first vdb_want rows into the volatile DB */
    int ex;                   /* 0, or the exit status of a failure (err says why) */
    char err[640];
    double read_s, pdb_s, vdb_s; /* seconds this job's thread spent in each step */
} load_job_t;

/* The jobs of a pass and the threads' shared cursor. */
typedef struct load_pass {
    load_job_t *jobs;
    size_t njobs;
    /* Relaxed atomics: failed is only a hint to stop early, done feeds the
     * progress line; the jobs' results are read after pthread_join. */
    _Atomic bool failed;
    _Atomic uint64_t done;
    uint64_t total;
} load_pass_t;

/* Read rows [row, row + n) into keys and vecs, READ_PIECE at a time. */
static hps_err_t read_rows(hps_modelfile_t *mf, uint32_t key_bytes, uint64_t row, size_t n,
                           int64_t *keys, float *vecs, char *err, size_t err_len)
{
    uint32_t dim = hps_modelfile_dim(mf);
    size_t piece = READ_PIECE / (8 + (size_t)dim * sizeof(float));
    for (size_t d = 0; d < n; d += piece) {
        size_t k = n - d < piece ? n - d : piece;
        hps_err_t rc = key_bytes == 8 ? hps_modelfile_read(mf, row + d, k, keys + d, vecs + d * dim,
                                                           err, err_len)
                                      : hps_modelfile_read_u32(mf, row + d, k, (uint32_t *)keys + d,
                                                               vecs + d * dim, err, err_len);
        if (rc < 0)
            return rc;
        sched_yield();
    }
    return 0;
}

/* Upsert the chunk's rows below j->vdb_want into the volatile DB.  A
 * partial fill first gives each repeated key its last row (last_rows():
 * vecs is changed, so this runs after the SST was written from it). */
static hps_err_t vdb_put(load_job_t *j, hps_modelfile_t *mf, uint64_t row, size_t n,
                         const int64_t *keys, float *vecs, char *err, size_t err_len)
{
    uint32_t kb = j->c->key_bytes, dim = j->ct->dim;
    size_t m = row >= j->vdb_want ? 0 : j->vdb_want - row < n ? (size_t)(j->vdb_want - row) : n;
    hps_err_t rc = 0;
    if (m > 0 && j->vdb_want < j->rows)
        rc = last_rows(mf, j->dups, j->vdb_want, kb, m, keys, vecs, err, err_len);
    for (size_t d = 0; d < m && rc == 0; d += VDB_BATCH) {
        size_t k = m - d < VDB_BATCH ? m - d : VDB_BATCH;
        rc = hps_shmdb_upsert(j->c->db, j->ct->vdb_id, k, (const char *)keys + d * kb,
                              vecs + d * dim, NULL);
        sched_yield();
    }
    return rc;
}

/* One chunk: read it, ingest it, upsert it; the step times go to j, the
 * message of a failure to j->err.  0; HPS_EXIT_PDB when the persistent DB
 * failed (a full disk, an I/O error: not the model's fault, so the service
 * manager may start the coordinator again); HPS_EXIT_MODEL otherwise (the
 * files, or a volatile DB too small for the model). */
static int load_chunk(load_job_t *j, hps_modelfile_t *mf, uint64_t row, size_t n, load_buf_t *b,
                      char *err, size_t err_len)
{
    int ex = HPS_EXIT_MODEL;
    double t0 = now_s(), t1, t2;
    const char *step = "reading the model files";
    hps_err_t rc = read_rows(mf, j->c->key_bytes, row, n, b->keys, b->vecs, err, err_len);
    t1 = now_s();
    if (rc == 0 && j->pdb) {
        step = "writing the persistent DB's SST files";
        rc = hps_pdb_stage_rows(j->stage, n, b->keys, j->c->key_bytes, b->vecs, j->ct->dim, err,
                                err_len);
        if (rc < 0)
            ex = HPS_EXIT_PDB;
    }
    t2 = now_s();
    if (rc == 0) {
        step = "loading into the volatile DB";
        rc = vdb_put(j, mf, row, n, b->keys, b->vecs, err, err_len);
    }
    j->read_s += t1 - t0;
    j->pdb_s += t2 - t1;
    j->vdb_s += now_s() - t2;
    if (rc == 0)
        return 0;
    snprintf(j->err, sizeof(j->err), "model %s table %s: %s: %s", j->ct->model->name, j->ct->name,
             step, err[0] ? err : hps_strerror(rc));
    return ex;
}

/* par_fn of the pass: job i of the load_pass_t ctx. */
static void run_job(void *ctx, size_t i, load_buf_t *b)
{
    load_pass_t *lp = ctx;
    load_job_t *j = &lp->jobs[i];
    char err[512] = "";
    uint32_t dim = j->ct->dim;
    hps_modelfile_t *mf = NULL;
    hps_err_t rc = hps_modelfile_open(j->dir, dim, &mf, err, sizeof(err));
    uint64_t chunk = SST_BYTES / (8 + (uint64_t)dim * sizeof(float));
    uint64_t end = j->pdb ? j->rows : j->vdb_want; /* rows to read */
    chunk = chunk < 1 ? 1 : chunk < end ? chunk : end;
    if (rc < 0)
        snprintf(j->err, sizeof(j->err), "%s", err);
    else if (end > 0 && !coord_load_buf_fit(b, (size_t)chunk, dim))
        snprintf(j->err, sizeof(j->err), "model %s table %s: out of memory for %llu rows",
                 j->ct->model->name, j->ct->name, (unsigned long long)chunk);
    j->ex = rc < 0 ? HPS_EXIT_MODEL : end > 0 && !b->keys ? HPS_EXIT_RUNTIME : 0;
    for (uint64_t row = 0, n; j->ex == 0 && row < end; row += n) {
        n = end - row < chunk ? end - row : chunk;
        if (atomic_load_explicit(&lp->failed, memory_order_relaxed))
            break;
        j->ex = load_chunk(j, mf, row, (size_t)n, b, err, sizeof(err));
        uint64_t done = atomic_fetch_add_explicit(&lp->done, n, memory_order_relaxed) + n;
        progress(j->ct->model->name, done, lp->total);
    }
    if (j->ex)
        atomic_store_explicit(&lp->failed, true, memory_order_relaxed);
    hps_modelfile_close(mf);
}

static int job_cmp(const void *a, const void *b)
{
    const load_job_t *x = a, *y = b;
    uint64_t wx = (x->pdb ? x->rows : x->vdb_want) * x->ct->dim;
    uint64_t wy = (y->pdb ? y->rows : y->vdb_want) * y->ct->dim;
    return (wx < wy) - (wx > wy); /* largest first */
}

/* Outcome of a model's load, for its log lines. */
typedef struct load_times {
    double create_s, pass_s, read_s, pdb_s, vdb_s; /* wall times; step times summed over threads */
    size_t ingested, vdb_tables, threads;
    uint64_t vdb_rows, vdb_bytes, bytes; /* bytes: read by the pass */
} load_times_t;

/* The pass over m's tables: read the files once into both DBs (the
 * persistent DB's rows staged: pdb_commit ingests them after every model). */
static int load_files(coord_t *c, const hps_conf_model_t *m, model_state_t *st,
                      const uint64_t *rows, bool ingest, bool vdb, const table_dups_t *dups,
                      load_times_t *lt)
{
    load_pass_t lp = {.jobs = calloc(m->num_tables ? m->num_tables : 1, sizeof(load_job_t))};
    double rate = c->conf->volatile_db.initial_cache_rate, t0 = now_s();
    int ex = lp.jobs ? 0 : HPS_EXIT_RUNTIME;
    for (uint32_t t = 0; ex == 0 && t < m->num_tables; t++) {
        uint32_t id;
        bool pdb = ingest && !st->current[t], from_files = vdb && !st->held[t];
        uint64_t want = from_files ? (uint64_t)ceil((double)rows[t] * rate) : 0;
        if (!pdb && want == 0)
            continue;
        hps_shmdb_table_find(c->db, m->name, m->embedding_table_names[t], &id);
        hps_pdb_stage_t *stage = NULL;
        char err[512] = "";
        if (pdb && hps_pdb_stage_open(c->pdb, c->tables[id].name, &stage, err, sizeof(err)) < 0) {
            HPS_ERROR("model %s table %s: persistent DB: %s", m->name, c->tables[id].name, err);
            ex = HPS_EXIT_PDB;
            break;
        }
        lp.jobs[lp.njobs++] = (load_job_t){.c = c,
                                           .ct = &c->tables[id],
                                           .dir = m->sparse_files[t],
                                           .dups = dups ? &dups[t] : NULL,
                                           .rows = rows[t],
                                           .pdb = pdb,
                                           .stage = stage,
                                           .vdb_want = want};
        lp.total += pdb ? rows[t] : want;
        lt->ingested += pdb;
        lt->vdb_tables += want > 0;
        lt->vdb_rows += want;
        lt->vdb_bytes += want * (8 + (uint64_t)c->tables[id].dim * sizeof(float));
        lt->bytes += (pdb ? rows[t] : want) * (8 + (uint64_t)c->tables[id].dim * sizeof(float));
    }
    if (ex == 0 && lp.njobs > 0) {
        qsort(lp.jobs, lp.njobs, sizeof(*lp.jobs), job_cmp);
        lt->threads = coord_load_par_run(run_job, &lp, lp.njobs);
    }
    for (size_t i = 0; ex == 0 && i < lp.njobs; i++) {
        lt->read_s += lp.jobs[i].read_s;
        lt->pdb_s += lp.jobs[i].pdb_s;
        lt->vdb_s += lp.jobs[i].vdb_s;
        if (lp.jobs[i].ex) {
            HPS_ERROR("%s", lp.jobs[i].err);
            ex = lp.jobs[i].ex;
        }
    }
    for (size_t i = 0; lp.jobs && i < lp.njobs; i++) {
        load_job_t *j = &lp.jobs[i];
        if (!j->stage)
            continue;
        size_t t = j->ct->index;
        staged_t e = {.m = m,
                      .t = t,
                      .ct = j->ct,
                      .stage = j->stage,
                      .has_rec = st->has_rec[t],
                      .had_cf = st->had_cf[t],
                      .files = strdup(st->ident[t].files)};
        if (ex == 0 && e.files && staged_add(&e) == 0)
            continue; /* committed or closed by coord_load_models() */
        if (ex == 0)
            ex = HPS_EXIT_RUNTIME;
        hps_pdb_stage_close(e.stage); /* a failed pass: the old rows stay */
        free(e.files);
    }
    free(lp.jobs);
    lt->pass_s = now_s() - t0;
    return ex;
}

/* Fill a layer with initial_cache_rate of every table's rows, values from
 * the persistent DB where it held the files before this start (held[t]):
 * the distributed DB (ddb), or the volatile DB's tables the pass did not
 * fill (the held ones).  Adds the rows and bytes written to *ret. */
static int fill_layers(coord_t *c, const hps_conf_model_t *m, const uint64_t *rows,
                       const bool *held, const table_dups_t *dups, bool ddb, uint64_t ret[2])
{
    double rate =
        ddb ? c->conf->distributed_db.initial_cache_rate : c->conf->volatile_db.initial_cache_rate;
    for (uint32_t t = 0; t < m->num_tables; t++) {
        uint32_t id;
        uint64_t want = (uint64_t)ceil((double)rows[t] * rate);
        if (!ddb && !held[t])
            continue;
        if (!ddb && want > 0)
            c->vdb_from_pdb = true; /* with the updates the persistent DB applied */
        hps_shmdb_table_find(c->db, m->name, m->embedding_table_names[t], &id);
        int ex = fill_layer(c, &c->tables[id], ddb, held[t], m->sparse_files[t],
                            dups ? &dups[t] : NULL, want, &ret[1]);
        if (ex)
            return ex;
        ret[0] += want;
    }
    return 0;
}

/* The log lines of a loaded model (bench/load.c reads them). */
static void log_load(const coord_t *c, const hps_conf_model_t *m, const model_state_t *st,
                     bool ingest, bool vdb, const load_times_t *lt, double total_s)
{
    size_t held = 0;
    for (size_t t = 0; t < m->num_tables; t++)
        held += st->held[t];
    if (ingest && lt->ingested == 0)
        HPS_INFO("model %s: the persistent DB already holds these model files (same path, size, "
                 "mtime and first/last MiB): not ingested again, the updates applied since are "
                 "kept",
                 m->name);
    else if (ingest)
        HPS_INFO("model %s: %zu of %zu tables ingested into the persistent DB in %.2f s (sorting, "
                 "SST files and ingestion, summed over the loader threads)",
                 m->name, lt->ingested, m->num_tables, lt->pdb_s);
    if (vdb)
        HPS_INFO("model %s: %llu rows (initial_cache_rate %.3g) into the volatile DB in %.2f s, "
                 "%.1f MB/s; values of %zu of %zu tables from the persistent DB (with the updates "
                 "applied to it), of %zu from the model files",
                 m->name, (unsigned long long)lt->vdb_rows, c->conf->volatile_db.initial_cache_rate,
                 lt->vdb_s, lt->vdb_s > 0 ? (double)lt->vdb_bytes / lt->vdb_s / 1e6 : 0.0, held,
                 m->num_tables, lt->vdb_tables);
    if (lt->threads == 0) /* every table came from the persistent DB */
        HPS_INFO("model %s: loaded in %.2f s; tables created in %.2f s, no model file read "
                 "(volatile DB %.2f s)",
                 m->name, total_s, lt->create_s, lt->vdb_s);
    else
        HPS_INFO("model %s: loaded in %.2f s; tables created in %.2f s, one pass over %.1f MB of "
                 "its files by %zu threads in %.2f s (%.0f MB/s; reading %.2f s, persistent DB "
                 "%.2f s, volatile DB %.2f s, summed over the threads)",
                 m->name, total_s, lt->create_s, (double)lt->bytes / 1e6, lt->threads, lt->pass_s,
                 lt->pass_s > 0 ? (double)lt->bytes / lt->pass_s / 1e6 : 0.0, lt->read_s, lt->pdb_s,
                 lt->vdb_s);
}

/*
 * Before the distributed DB is filled with m's tables: a table whose record
 * (hps_ddb_record_get) names other model files, another version or changed
 * files, loses its rows first, so that no request is answered partly from
 * the old rows (Redis keeps every row the fill does not overwrite, and
 * serves them to cache_missed_embeddings' misses too).  The record goes
 * before the rows: a start killed in between drops them again.  A table
 * without a record keeps its rows (HugeCTR wrote none: data it wrote is
 * taken for these files'), as does one whose record matches (with the
 * updates applied to it since); kept rows must fit the configuration
 * (coord_ddb_check_rows: partitions, dimension, key width), dropped ones
 * need not (a new version may change the dimension).  The record names the
 * files' contents, not their paths: hosts that share the cluster may keep
 * their copies anywhere.
 */
static int ddb_prepare(coord_t *c, const hps_conf_model_t *m, const model_state_t *st)
{
    for (size_t t = 0; st->ident && t < m->num_tables; t++) {
        coord_table_t *ct = table_of(c, m, t);
        char rec[1024], err[512] = "";
        hps_err_t rc = hps_ddb_record_get(ct->ddb, rec, sizeof(rec), err, sizeof(err));
        if (rc == HPS_ENOTFOUND)
            HPS_INFO("model %s table %s: the distributed DB has no record of the model files its "
                     "rows came from (HugeCTR's data, or none yet): taken for these files'",
                     m->name, ct->name);
        if (rc == HPS_ENOTFOUND || (rc == 0 && strcmp(rec, st->ident[t].content) == 0)) {
            int ex = coord_ddb_check_rows(c, ct); /* kept: they must fit this configuration */
            if (ex)
                return ex;
            continue;
        }
        if (rc == 0) {
            HPS_INFO("model %s table %s: the distributed DB holds the rows of other model files "
                     "(%s; now %s): removing them before loading",
                     m->name, ct->name, rec, st->ident[t].content);
            rc = hps_ddb_record_set(ct->ddb, NULL, err, sizeof(err));
        }
        if (rc == 0)
            rc = hps_ddb_drop(ct->ddb, err, sizeof(err));
        if (rc < 0) {
            HPS_ERROR("model %s table %s: distributed DB: %s", m->name, ct->name,
                      err[0] ? err : hps_strerror(rc));
            return HPS_EXIT_DDB;
        }
    }
    return 0;
}

/* After the fill: record which files the distributed DB's tables hold. */
static int ddb_record(coord_t *c, const hps_conf_model_t *m, const model_state_t *st)
{
    for (size_t t = 0; st->ident && t < m->num_tables; t++) {
        coord_table_t *ct = table_of(c, m, t);
        char err[512] = "";
        hps_err_t rc = hps_ddb_record_set(ct->ddb, st->ident[t].content, err, sizeof(err));
        if (rc < 0) {
            HPS_ERROR("model %s table %s: distributed DB: recording the loaded files: %s", m->name,
                      ct->name, err[0] ? err : hps_strerror(rc));
            return HPS_EXIT_DDB;
        }
    }
    return 0;
}

/* ident: the identities of m's tables (validate_all), NULL without a
 * persistent or distributed DB; dups: m's entries of g_dups (NULL: none
 * known). */
static int load_model(coord_t *c, const hps_conf_model_t *m, bool vdb_reused, coord_ident_t *ident,
                      const table_dups_t *dups)
{
    const hps_conf_persistent_db_t *p = &c->conf->persistent_db;
    bool ingest = c->pdb && !p->read_only && p->initialize_after_startup;
    uint64_t rows[256];
    model_state_t st;
    load_times_t lt = {0};
    double t0 = now_s();
    int ex = model_state_init(&st, m->num_tables, ident);
    if (!ex && c->pdb)
        hps_pdb_foreach_table(c->pdb, note_cf, &(cf_seen_t){.m = m, .had_cf = st.had_cf});
    for (uint32_t t = 0; !ex && t < m->num_tables; t++) {
        hps_modelfile_t *mf;
        char err[512];
        uint32_t dim = (uint32_t)m->embedding_vecsize_per_table[t];
        if (hps_modelfile_open(m->sparse_files[t], dim, &mf, err, sizeof(err)) < 0) {
            HPS_ERROR("model %s: %s", m->name, err);
            ex = HPS_EXIT_MODEL;
            break;
        }
        rows[t] = hps_modelfile_rows(mf);
        hps_modelfile_close(mf);
        ex = create_table(c, m, t, rows[t]);
    }
    lt.create_s = now_s() - t0;
    if (!ex)
        ex = pdb_check(c, m, &st);
    if (!ex)
        ex = load_files(c, m, &st, rows, ingest, !vdb_reused, dups, &lt);
    uint64_t ddb[2] = {0}, vdb[2] = {0};
    double t1 = now_s();
    if (!ex && c->ddb)
        ex = ddb_prepare(c, m, &st);
    if (!ex && c->ddb && !(ex = fill_layers(c, m, rows, st.held, dups, true, ddb)) &&
        !(ex = ddb_record(c, m, &st)))
        HPS_INFO("model %s: %llu rows (initial_cache_rate %.3g) into the distributed DB in %.2f s",
                 m->name, (unsigned long long)ddb[0], c->conf->distributed_db.initial_cache_rate,
                 now_s() - t1);
    t1 = now_s();
    if (!ex && !vdb_reused)
        ex = fill_layers(c, m, rows, st.held, dups, false, vdb);
    lt.vdb_rows += vdb[0];
    lt.vdb_bytes += vdb[1];
    lt.vdb_s += now_s() - t1;
    if (!ex)
        log_load(c, m, &st, ingest, !vdb_reused, &lt, now_s() - t0);
    free(st.current);
    return ex;
}

int coord_validate_models(coord_t *c)
{
    size_t total = 0;
    for (size_t i = 0; i < c->conf->num_models; i++)
        total += c->conf->models[i].num_tables;
    free(c->idents);
    c->idents = (c->pdb || c->ddb) && total ? calloc(total, sizeof(coord_ident_t)) : NULL;
    if ((c->pdb || c->ddb) && total && !c->idents)
        return HPS_EXIT_RUNTIME;
    free_dups();
    g_dups = calloc(total ? total : 1, sizeof(*g_dups));
    if (!g_dups)
        return HPS_EXIT_RUNTIME;
    g_dups_len = total;
    return validate_all(c, c->idents);
}

int coord_load_models(coord_t *c, bool vdb_reused)
{
    coord_ident_t *ident = c->idents;
    int ex = coord_ddb_open(c); /* no-op when main.c opened it already */
    if (!ex && !(c->tables = calloc(HPS_SHMDB_MAX_TABLES, sizeof(coord_table_t))))
        ex = HPS_EXIT_RUNTIME;
    for (size_t i = 0, first = 0; !ex && i < c->conf->num_models;
         first += c->conf->models[i++].num_tables)
        ex = load_model(c, &c->conf->models[i], vdb_reused, ident ? ident + first : NULL,
                        g_dups ? g_dups + first : NULL);
    if (!ex)
        ex = pdb_commit(c);
    staged_free(); /* after a failure: the stages' files go, the old rows stay */
    free(c->idents);
    c->idents = NULL;
    free_dups();
    return ex;
}
