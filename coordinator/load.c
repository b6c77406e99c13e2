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
 * every model of the start has been loaded (STAGING, load-stage.c).  The
 * record is deleted before and written after (synced) a re-ingestion, so a
 * crash in between re-ingests at the next start.  Whenever the persistent DB
 * held the current files before this start (recorded identity = the
 * files'), the volatile DB and Redis, when they are filled, take the same
 * rows (the files' first initial_cache_rate keys) with the values from the
 * persistent DB, which include the applied updates; tables ingested by this
 * start fill them from the files, in the same pass (THE LOAD PASS,
 * load-pass.c).
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
 * files (hps_modelfile_check_table(), load-check.c) counts the rows with a
 * NaN or +-Inf value and the keys given on more than one row.  [model.<name>]
 * nonfinite_values / duplicate_keys = refuse refuses the start-up for them
 * (HPS_EXIT_MODEL); warn (the default) logs one WARN line per table and
 * loads NaN/Inf rows as they are and, for a duplicated key, its LAST row in
 * every layer: the persistent DB keeps the last row by itself
 * (pdb-bulk.c), a full fill of the volatile or distributed DB upserts rows
 * in file order, and a partial one (initial_cache_rate < 1, values from the
 * files) writes the last row's vector for a key whose last row lies beyond
 * the rows it loads (coord_load_last_rows()).
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

double coord_load_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
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
                          .storage_type = m->storage_type,
                          .order = t + 1};
    uint32_t id;
    hps_err_t rc = hps_shmdb_table_create(c->db, &s, &id);
    hps_segment_info_t si;
    if (rc == HPS_ENOSPC && hps_shmdb_segment_info(c->db, &si) == 0) {
        /* its slots at the rehash bound (92% full): what it asks for first */
        double need = (double)s.expected_rows / 0.92 *
                      hps_shmdb_bytes_per_slot_of(s.dim, s.overflow_policy, s.storage_type);
        HPS_ERROR("model %s table %s (%llu expected rows of %u floats): cannot create it in the "
                  "volatile DB: the shared-memory segment is full, %llu of its %llu bytes in use, "
                  "and the table needs about %.0f MiB; raise [volatile_db] shared_memory_size in "
                  "%s by at least that (the tables created before it stay in the segment, empty, "
                  "until it is removed)",
                  m->name, s.table, (unsigned long long)s.expected_rows, s.dim,
                  (unsigned long long)si.used_bytes, (unsigned long long)si.size_bytes,
                  ceil(need / 1048576.0), c->conf->source);
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
        char err[HPS_PATH_MSG_MAX];
        bool create = !c->conf->persistent_db.read_only;
        rc = hps_pdb_table(c->pdb, m->name, s.table, create, &ct->pdb, err, sizeof(err));
        if (rc < 0) {
            HPS_ERROR("model %s table %s: persistent DB: %s", m->name, s.table, err);
            return HPS_EXIT_PDB;
        }
    }
    return 0;
}

void coord_load_progress(const char *what, uint64_t done, uint64_t total)
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

/* Partition masks of a model's tables (distributed_db num_partitions <= 256). */
typedef uint64_t part_mask_t[4];

/* Keep the rows of keys (n, key_bytes) and vecs (n, dim) whose partition
 * of the distributed DB is in only (the others move out); returns how many. */
static size_t only_partitions(const coord_t *c, const coord_table_t *ct, const uint64_t *only,
                              size_t n, void *keys, float *vecs)
{
    size_t kb = c->key_bytes, m = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned p = hps_ddb_partition_of(ct->ddb, keys, i);
        if (!(only[p / 64] >> (p % 64) & 1))
            continue;
        if (m != i) {
            memmove((char *)keys + m * kb, (char *)keys + i * kb, kb);
            memmove(vecs + m * ct->dim, vecs + i * ct->dim, ct->dim * sizeof(float));
        }
        m++;
    }
    return m;
}

/* Upsert the first `want` rows of the table's files into the volatile DB,
 * or, when ddb, into the distributed DB (only: those of the partitions
 * whose bits it sets; NULL: every row); with from_pdb, the values come from
 * the persistent DB (the files' where it lacks a key); else, for a key that
 * the files give again after row `want`, the vector of its last row. */
static int fill_layer(coord_t *c, const coord_table_t *ct, bool ddb, bool from_pdb, const char *dir,
                      const table_dups_t *dups, const uint64_t *only, uint64_t want,
                      uint64_t *ret_bytes)
{
    const char *layer = ddb ? "distributed" : "volatile";
    char err[HPS_PATH_MSG_MAX];
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
            rc =
                coord_load_last_rows(mf, dups, want, c->key_bytes, n, keys, vecs, err, sizeof(err));
        size_t got = n; /* rows read: what progress and bytes count */
        if (rc == 0 && ddb && only)
            n = only_partitions(c, ct, only, n, keys, vecs);
        coord_ddb_wait_t w = {0}; /* the distributed DB waits out a failover */
        if (rc == 0 && ddb)
            while (coord_ddb_wait(
                c, &w, rc = put_rows(c, ct, true, n, keys, vecs, err, sizeof(err)), dir, err))
                ;
        else if (rc == 0)
            rc = put_rows(c, ct, false, n, keys, vecs, err, sizeof(err));
        if (rc < 0) { /* INFO: cut short by a SIGTERM (main.c, stop_signal) */
            hps_log(atomic_load(c->stop) ? HPS_LOG_INFO : HPS_LOG_ERROR,
                    "%s: loading into the %s DB%s: %s", dir, layer,
                    pdb_failed ? " (reading the persistent DB)" : "",
                    err[0] ? err : hps_strerror(rc));
            ex = pdb_failed ? HPS_EXIT_PDB : ddb ? HPS_EXIT_DDB : HPS_EXIT_MODEL;
        }
        coord_load_progress(ct->name, row + got, want);
        *ret_bytes += n * (8 + ct->dim * sizeof(float));
    }
    free(keys);
    free(vecs);
    hps_modelfile_close(mf);
    return ex;
}

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
 * validate_all) compared with the PDB's records.  A persistent DB this
 * start does not write the files into (initialize_after_startup = false, or
 * read_only) that has the table but no record of files holds its own rows
 * (online updates, or data put there otherwise): held too, so that the
 * other layers take its values where it has the key (fill_layer, from_pdb)
 * and the files' elsewhere, rather than serve a key's pre-update vector
 * from shared memory while the persistent DB holds the update. */
static int pdb_check(coord_t *c, const hps_conf_model_t *m, model_state_t *st)
{
    if (!c->pdb)
        return 0;
    const hps_conf_persistent_db_t *p = &c->conf->persistent_db;
    bool ingest = !p->read_only && p->initialize_after_startup;
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
        if (st->ident[t].unread) { /* a fallback's: its rows stay as they are */
            st->current[t] = st->held[t] = true;
            continue;
        }
        if (rc == 0 && !st->current[t])
            HPS_INFO("model %s table %s: the model files changed since the persistent DB "
                     "ingested them (was: %s; now: %s)",
                     m->name, m->embedding_table_names[t], rec, st->ident[t].files);
        if (!ingest && rc == HPS_ENOTFOUND && st->had_cf[t]) {
            st->held[t] = true;
            HPS_INFO("model %s table %s: the persistent DB (not written from the model files: "
                     "%s) has rows of it: the other layers take its values where it has the "
                     "key, the files' elsewhere",
                     m->name, m->embedding_table_names[t],
                     p->read_only ? "read_only" : "initialize_after_startup = false");
        }
    }
    return 0;
}

coord_table_t *coord_load_table(coord_t *c, const hps_conf_model_t *m, size_t t)
{
    uint32_t id = 0;
    hps_shmdb_table_find(c->db, m->name, m->embedding_table_names[t], &id);
    return &c->tables[id];
}

/* Fill a layer with initial_cache_rate of every table's rows, values from
 * the persistent DB where it held the files before this start (held[t]):
 * the distributed DB (ddb; not its tables kept[t], and of a table with
 * lost partitions only those, lost[t]: ddb_prepare), or the volatile DB's
 * tables the pass did not fill (the held ones).  Adds the rows and bytes
 * written to *ret. */
static int fill_layers(coord_t *c, const hps_conf_model_t *m, const uint64_t *rows,
                       const bool *held, const bool *kept, const part_mask_t *lost,
                       const table_dups_t *dups, bool ddb, uint64_t ret[2])
{
    double rate =
        ddb ? c->conf->distributed_db.initial_cache_rate : c->conf->volatile_db.initial_cache_rate;
    for (uint32_t t = 0; t < m->num_tables; t++) {
        uint64_t want = (uint64_t)ceil((double)rows[t] * rate);
        if ((!ddb && !held[t]) || (ddb && kept && kept[t]))
            continue;
        if (!ddb && want > 0)
            c->vdb_from_pdb = true; /* with the updates the persistent DB applied */
        const uint64_t *only =
            ddb && lost && (lost[t][0] | lost[t][1] | lost[t][2] | lost[t][3]) ? lost[t] : NULL;
        int ex = fill_layer(c, coord_load_table(c, m, t), ddb, held[t], m->sparse_files[t],
                            dups ? &dups[t] : NULL, only, want, &ret[1]);
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
    size_t held = 0, unread = 0;
    for (size_t t = 0; t < m->num_tables; t++) {
        held += st->held[t];
        unread += st->ident && st->ident[t].unread;
    }
    if (ingest && lt->ingested == 0 && unread < m->num_tables)
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
        HPS_INFO("model %s version %lld: loaded in %.2f s; tables created in %.2f s, no model "
                 "file read (volatile DB %.2f s)",
                 m->name, (long long)m->version, total_s, lt->create_s, lt->vdb_s);
    else
        HPS_INFO("model %s version %lld: loaded in %.2f s; tables created in %.2f s, one pass "
                 "over %.1f MB of its files by %zu threads in %.2f s (%.0f MB/s; reading %.2f s, "
                 "persistent DB %.2f s, volatile DB %.2f s, summed over the threads)",
                 m->name, (long long)m->version, total_s, lt->create_s, (double)lt->bytes / 1e6,
                 lt->threads, lt->pass_s,
                 lt->pass_s > 0 ? (double)lt->bytes / lt->pass_s / 1e6 : 0.0, lt->read_s, lt->pdb_s,
                 lt->vdb_s);
}

/*
 * Before the distributed DB is filled with m's tables: a table whose record
 * (hps_ddb_record_get) names other model files, another version or changed
 * files, loses its rows first, so that no request is answered partly from
 * the old rows (Redis keeps every row the fill does not overwrite, and
 * serves them to cache_missed_embeddings' misses too).  The record is
 * replaced by DDB_REPLACING and the new files' contents identity before the
 * rows go, and stays so until the fill has written the new rows and
 * records them (ddb_record): a start or reload killed anywhere in between
 * leaves that mark, and the next one removes the rows again if it loads
 * other files; with the same files it fills over them (another host may be
 * filling them now: the rows are these files').  (It used to delete the record: the
 * next start took the leftover rows of the killed fill's files for its own,
 * as HugeCTR's data, and a start with the previous files served both
 * versions' rows in one table.)  A table without a record keeps its rows
 * (HugeCTR wrote none: data it wrote is taken for these files', and marked
 * before the fill writes over them), as does one whose record matches
 * (with the updates applied to it since); kept rows must fit the configuration
 * (coord_ddb_check_rows: partitions, dimension, key width), dropped ones
 * need not (a new version may change the dimension).  A table whose record
 * matches is not filled again either (kept[t]): its rows are there, with
 * the Kafka updates applied since, and the fill's values (the model files',
 * or this host's persistent DB's) could be older than those (a coordinator
 * without a persistent DB, or a host that starts while others serve).  One
 * without a record is filled (a fill killed before its record was written
 * left a part of the rows).  The record names the files' contents, not
 * their paths: hosts that share the cluster may keep their copies anywhere.
 */
/* The record of a table whose rows are being replaced (ddb_prepare): this
 * prefix, then the contents identity of the files being filled in (no
 * contents identity begins so: "v1 dim=..."; coord_table_ident). */
#define DDB_REPLACING     "replacing: "
#define DDB_REPLACING_LEN (sizeof(DDB_REPLACING) - 1)

/* Set t's record to DDB_REPLACING + content. */
static hps_err_t ddb_mark(coord_t *c, coord_table_t *ct, const char *content, const char *what,
                          char *err, size_t err_len)
{
    char mark[DDB_REPLACING_LEN + CONTENT_IDENT_MAX];
    snprintf(mark, sizeof(mark), "%s%s", DDB_REPLACING, content);
    hps_err_t rc;
    coord_ddb_wait_t w = {0};
    while (coord_ddb_wait(c, &w, rc = hps_ddb_record_set(ct->ddb, mark, err, err_len), what, err))
        ;
    return rc;
}

/* Partitions with no row count as lost (by a table of at least
 * LOST_MIN_ROWS_PER_PART rows per partition, keys spread over them: an
 * empty one then has odds below P e^-32). */
#define LOST_MIN_ROWS_PER_PART 32u

/* The partitions of a table whose record names these files that Redis
 * lost (their hash gone: evicted whole by maxmemory, a FLUSHALL, a node
 * that came back empty) while the files' rows fill every partition: their
 * keys got the default for good.  Sets their bits in lost (cleared first)
 * and returns how many; those partitions alone are filled again from the
 * files (the updates applied to their rows are gone anyway; the other
 * partitions keep theirs).  A Redis error: 0 (the rows are taken as they
 * are; the fill's own calls say what fails). */
static unsigned ddb_lost_partitions(coord_t *c, coord_table_t *ct, const coord_ident_t *id,
                                    const char *what, part_mask_t lost)
{
    unsigned np = (unsigned)c->conf->distributed_db.num_partitions, empty = 0;
    uint64_t rows = id->stamp[0].ino ? (uint64_t)id->stamp[1].size / ((uint64_t)ct->dim * 4) : 0;
    memset(lost, 0, sizeof(part_mask_t));
    if (!np || np > 256 || rows < (uint64_t)LOST_MIN_ROWS_PER_PART * np)
        return 0;
    for (unsigned p = 0; p < np; p++) {
        uint64_t n = 0;
        char err[256] = "";
        if (hps_ddb_partition_rows(ct->ddb, p, &n, err, sizeof(err)) < 0) {
            memset(lost, 0, sizeof(part_mask_t));
            return 0;
        }
        if (n == 0) {
            lost[p / 64] |= 1ull << (p % 64);
            empty++;
        }
    }
    if (empty)
        HPS_WARN("%s: the distributed DB lost every row of %u of its %u partitions (evicted by "
                 "maxmemory, flushed, or a node that came back empty), though its record names "
                 "these model files: filling those partitions again from them (the others keep "
                 "their rows and the updates applied to them)",
                 what, empty, np);
    return empty;
}

static int ddb_prepare(coord_t *c, const hps_conf_model_t *m, const model_state_t *st, bool *kept,
                       part_mask_t *lost)
{
    for (size_t t = 0; st->ident && t < m->num_tables; t++) {
        coord_table_t *ct = coord_load_table(c, m, t);
        char rec[1024], err[512] = "", what[2 * HPS_SHMDB_NAME_MAX + 32];
        snprintf(what, sizeof(what), "model %s table %s", m->name, ct->name);
        hps_err_t rc;
        coord_ddb_wait_t w = {0};
        while (coord_ddb_wait(
            c, &w, rc = hps_ddb_record_get(ct->ddb, rec, sizeof(rec), err, sizeof(err)), what, err))
            ;
        if (st->ident[t].unread) { /* a fallback's: what Redis holds stays */
            kept[t] = true;
            if (rc != 0 || coord_ident_hash(rec) != hps_shmdb_table_ddb_ident(c->db, ct->vdb_id))
                HPS_ERROR("%s: the failed build removed its rows from the distributed DB, and "
                          "the fallback does not read its files (above) to put them back: keys "
                          "outside shared memory come from the persistent DB, or get their "
                          "defaults, until a reload loads the model again",
                          what);
            continue;
        }
        if (rc == HPS_ENOTFOUND)
            HPS_INFO("model %s table %s: the distributed DB has no record of the model files its "
                     "rows came from (HugeCTR's data, or none yet): taken for these files'",
                     m->name, ct->name);
        bool match = rc == 0 && strcmp(rec, st->ident[t].content) == 0, whole = false;
        /* A fill of these same files that has not ended: another host's,
         * now, or one killed.  Taken as rows without a record are (filled
         * over, not removed): what it wrote is these files' rows. */
        bool same_fill = rc == 0 && strncmp(rec, DDB_REPLACING, DDB_REPLACING_LEN) == 0 &&
                         strcmp(rec + DDB_REPLACING_LEN, st->ident[t].content) == 0;
        if (same_fill)
            HPS_INFO("%s: a fill of these model files into the distributed DB began and has not "
                     "ended (another host's, or a coordinator killed): filling over it",
                     what);
        if (match && !coord_ddb_rows_fit(c, ct)) {
            /* The rows of these files (the record), written under another
             * layout (this reload raised num_partitions, most likely; a
             * lowered one is refused: coord_ddb_check_rows): the table is
             * written again whole. */
            HPS_WARN("%s: its rows in the distributed DB do not fit this configuration (another "
                     "num_partitions?): removing them and filling the table again",
                     what);
            match = false;
            whole = true;
        }
        unsigned nlost = match ? ddb_lost_partitions(c, ct, &st->ident[t], what, lost[t]) : 0;
        if (rc == HPS_ENOTFOUND || match || same_fill) {
            int ex = coord_ddb_check_rows(c, ct); /* kept: they must fit this configuration */
            if (ex)
                return ex;
            kept[t] = match && !nlost;
            if (kept[t])
                continue;
            /* Filled on top of the rows taken (or, where partitions were
             * lost, those partitions): marked first, so that a start killed
             * during the fill with other files removes what it left. */
            if (!same_fill)
                rc = ddb_mark(c, ct, st->ident[t].content, what, err, sizeof(err));
        } else {
            if (rc == 0) {
                coord_prev_ddb_replacing(c, m->name, ct->name); /* the serving segment's misses */
                if (strncmp(rec, DDB_REPLACING, DDB_REPLACING_LEN) == 0)
                    HPS_WARN("model %s table %s: the distributed DB's rows were being replaced by "
                             "those of other model files when that fill stopped before its end "
                             "(a coordinator killed?): removing them before loading",
                             m->name, ct->name);
                else if (!whole)
                    HPS_INFO("model %s table %s: the distributed DB holds the rows of other model "
                             "files (%s; now %s): removing them before loading",
                             m->name, ct->name, rec, st->ident[t].content);
                rc = ddb_mark(c, ct, st->ident[t].content, what, err, sizeof(err));
            }
            if (rc == 0)
                while (
                    coord_ddb_wait(c, &w, rc = hps_ddb_drop(ct->ddb, err, sizeof(err)), what, err))
                    ;
        }
        if (rc < 0) {
            HPS_ERROR("model %s table %s: distributed DB: %s", m->name, ct->name,
                      err[0] ? err : hps_strerror(rc));
            return HPS_EXIT_DDB;
        }
    }
    return 0;
}

/* After the reads of m's files, before anything records them as loaded:
 * refuse a table whose files were replaced, written or removed after their
 * content check began (their rows may not be those checked: a NaN where
 * nonfinite_values = refuse, another version).  A reload then falls back
 * and a start stops, before the persistent DB ingests the staged rows. */
static int files_unchanged(const hps_conf_model_t *m, const model_state_t *st)
{
    for (size_t t = 0; st->ident && t < m->num_tables; t++) {
        if (st->ident[t].unread || coord_files_unchanged(m, t, &st->ident[t]))
            continue;
        HPS_ERROR("model %s table %s: %s/key or emb_vector was replaced, written or removed while "
                  "the model loaded (after its contents were checked): refused, since its rows "
                  "may not be those checked; load it again once the files are in place",
                  m->name, m->embedding_table_names[t], m->sparse_files[t]);
        return HPS_EXIT_MODEL;
    }
    return 0;
}

/* After the fill: record which files the distributed DB's tables hold, in
 * Redis and in the segment (its ddb ident: a later build answers this
 * segment's misses from Redis only while that record stands,
 * serve.c: prev_ddb_table). */
static int ddb_record(coord_t *c, const hps_conf_model_t *m, const model_state_t *st)
{
    for (size_t t = 0; st->ident && t < m->num_tables; t++) {
        coord_table_t *ct = coord_load_table(c, m, t);
        char err[512] = "", what[2 * HPS_SHMDB_NAME_MAX + 32];
        if (st->ident[t].unread)
            continue; /* its record stays: this fallback wrote nothing there */
        snprintf(what, sizeof(what), "model %s table %s", m->name, ct->name);
        hps_err_t rc;
        coord_ddb_wait_t w = {0};
        while (coord_ddb_wait(
            c, &w, rc = hps_ddb_record_set(ct->ddb, st->ident[t].content, err, sizeof(err)), what,
            err))
            ;
        if (rc < 0) {
            HPS_ERROR("model %s table %s: distributed DB: recording the loaded files: %s", m->name,
                      ct->name, err[0] ? err : hps_strerror(rc));
            return HPS_EXIT_DDB;
        }
        hps_shmdb_table_set_ddb_ident(c->db, ct->vdb_id, coord_ident_hash(st->ident[t].content));
    }
    return 0;
}

/* The rows of model files that a fallback's adopted table was created with
 * (hps_table_info_t.source_rows), for a table whose files it does not read
 * (coord_ident_t.unread). */
static int adopted_rows(coord_t *c, const hps_conf_model_t *m, uint32_t t, uint64_t *ret)
{
    uint32_t id;
    hps_table_info_t ti;
    if (hps_shmdb_table_find(c->db, m->name, m->embedding_table_names[t], &id) != 0 ||
        hps_shmdb_table_info(c->db, id, &ti) != 0) {
        HPS_ERROR("model %s table %s: not in the adopted segment, and its files are not read",
                  m->name, m->embedding_table_names[t]);
        return HPS_EXIT_MODEL;
    }
    *ret = ti.source_rows;
    return 0;
}

/* HPS_EXIT_RUNTIME once a SIGTERM or SIGINT came (main.c, stop_signal):
 * loading stops between its steps (the reads of model files fail then too). */
static int stopping(const coord_t *c, const hps_conf_model_t *m)
{
    if (!atomic_load(c->stop))
        return 0;
    HPS_INFO("model %s: loading stopped: the coordinator is stopping", m->name);
    return HPS_EXIT_RUNTIME;
}

/* ident: the identities of m's tables (validate_all); dups: m's entries of
 * g_dups (NULL: none known). */
static int load_model(coord_t *c, const hps_conf_model_t *m, bool vdb_reused, coord_ident_t *ident,
                      const table_dups_t *dups)
{
    const hps_conf_persistent_db_t *p = &c->conf->persistent_db;
    bool ingest = c->pdb && !p->read_only && p->initialize_after_startup;
    uint64_t rows[256];
    model_state_t st;
    load_times_t lt = {0};
    double t0 = coord_load_now_s();
    int ex = model_state_init(&st, m->num_tables, ident);
    if (!ex && c->pdb)
        hps_pdb_foreach_table(c->pdb, note_cf, &(cf_seen_t){.m = m, .had_cf = st.had_cf});
    for (uint32_t t = 0; !ex && !(ex = stopping(c, m)) && t < m->num_tables; t++) {
        hps_modelfile_t *mf;
        char err[HPS_PATH_MSG_MAX];
        uint32_t dim = (uint32_t)m->embedding_vecsize_per_table[t];
        if (ident && ident[t].unread) { /* a fallback's: the adopted table's count */
            ex = adopted_rows(c, m, t, &rows[t]);
            if (!ex)
                ex = create_table(c, m, t, rows[t]);
            continue;
        }
        if (hps_modelfile_open(m->sparse_files[t], dim, &mf, err, sizeof(err)) < 0) {
            HPS_ERROR("model %s: %s", m->name, err);
            ex = HPS_EXIT_MODEL;
            break;
        }
        rows[t] = hps_modelfile_rows(mf);
        hps_modelfile_close(mf);
        ex = create_table(c, m, t, rows[t]);
    }
    lt.create_s = coord_load_now_s() - t0;
    if (!ex)
        ex = pdb_check(c, m, &st);
    if (!ex)
        ex = coord_load_files(c, m, &st, rows, ingest, !vdb_reused, dups, &lt);
    uint64_t ddb[2] = {0}, vdb[2] = {0};
    double t1 = coord_load_now_s();
    bool kept[256] = {false};
    part_mask_t lost[256] = {{0}};
    size_t nkept = 0;
    if (!ex && c->ddb)
        ex = ddb_prepare(c, m, &st, kept, lost);
    for (size_t t = 0; t < m->num_tables; t++)
        nkept += kept[t];
    if (!ex && c->ddb && !(ex = fill_layers(c, m, rows, st.held, kept, lost, dups, true, ddb)) &&
        !(ex = files_unchanged(m, &st)) && !(ex = ddb_record(c, m, &st)))
        HPS_INFO("model %s: %llu rows (initial_cache_rate %.3g) into the distributed DB in %.2f s; "
                 "%zu of %zu tables kept as they were (their record names these files: their "
                 "rows and the updates applied to them stay)",
                 m->name, (unsigned long long)ddb[0], c->conf->distributed_db.initial_cache_rate,
                 coord_load_now_s() - t1, nkept, m->num_tables);
    if (ex == HPS_EXIT_DDB && c->adopt) {
        /* A failed reload's fallback adopts the segment its workers serve:
         * it keeps serving with what Redis still holds rather than stop.
         * The tables it could not fill have no record there, so the next
         * reload or restart fills them again. */
        HPS_ERROR("model %s: the fallback could not restore its rows in the distributed DB "
                  "(above): it serves on with the rows the cluster still holds (keys outside "
                  "shared memory that the failed build removed come from the persistent DB, or "
                  "get their defaults); send SIGHUP once the cluster answers to fill it again",
                  m->name);
        c->ddb_degraded = true;
        ex = 0;
    }
    t1 = coord_load_now_s();
    if (!ex && !vdb_reused)
        ex = fill_layers(c, m, rows, st.held, NULL, NULL, dups, false, vdb);
    if (!ex && !vdb_reused)
        ex = coord_load_carry(c, m, &st);
    if (!ex)
        ex = files_unchanged(m, &st);
    lt.vdb_rows += vdb[0];
    lt.vdb_bytes += vdb[1];
    lt.vdb_s += coord_load_now_s() - t1;
    if (!ex)
        log_load(c, m, &st, ingest, !vdb_reused, &lt, coord_load_now_s() - t0);
    free(st.current);
    return ex;
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
                        coord_load_dups(first));
    if (!ex)
        ex = coord_load_pdb_commit(c);
    coord_load_staged_free(); /* after a failure: the stages' files go, the old rows stay */
    free(c->idents);
    c->idents = NULL;
    coord_load_dups_free();
    return ex;
}
