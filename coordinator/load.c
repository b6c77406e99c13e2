/*
 * load.c -- model loading at start-up: every model's files are validated
 * before anything is written; then each table is created in the volatile DB,
 * every row goes to the persistent DB (bulk SST ingestion), and
 * initial_cache_rate of the rows go to the volatile DB (HugeCTR only logged
 * that rate; here it is honoured) and, with [distributed_db] redis_cluster,
 * that layer's initial_cache_rate of the rows to Redis.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coord.h"
#include "hps/log.h"
#include "hps/modelfile.h"

#define CHUNK_BYTES (64ULL << 20) /* bounds start-up memory per table */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static hps_overflow_policy_t policy_of(hps_conf_overflow_policy_t p)
{
    switch (p) {
    case HPS_CONF_EVICT_LEAST_USED:
        return HPS_EVICT_LEAST_USED;
    case HPS_CONF_EVICT_OLDEST:
        return HPS_EVICT_OLDEST;
    default:
        return HPS_EVICT_RANDOM;
    }
}

static void specs_of(const coord_t *c, const hps_conf_model_t *m, hps_modelfile_spec_t *specs)
{
    for (size_t t = 0; t < m->num_tables; t++)
        specs[t] = (hps_modelfile_spec_t){.table = m->embedding_table_names[t],
                                          .dir = m->sparse_files[t],
                                          .dim = (uint32_t)m->embedding_vecsize_per_table[t],
                                          .key_bytes = c->key_bytes};
}

/* Refuse the whole start-up if any table of any model is malformed. */
static int validate_all(coord_t *c)
{
    char err[512];
    for (size_t i = 0; i < c->conf->num_models; i++) {
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
        HPS_INFO("model %s: %zu tables, %llu rows, files valid", m->name, m->num_tables,
                 (unsigned long long)rows);
    }
    return 0;
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
                          .overflow_policy = policy_of(v->overflow_policy),
                          .overflow_resolution_target = v->overflow_resolution_target,
                          .expected_rows = (uint64_t)want};
    uint32_t id;
    hps_err_t rc = hps_shmdb_table_create(c->db, &s, &id);
    if (rc < 0) {
        HPS_ERROR("model %s table %s: cannot create it in the volatile DB: %s", m->name, s.table,
                  hps_strerror(rc));
        return rc == HPS_EMISMATCH ? HPS_EXIT_SEGMENT : HPS_EXIT_MODEL;
    }
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

/* Upsert the first `want` rows of the table's files into the volatile DB,
 * or, when ddb, into the distributed DB. */
static int fill_layer(coord_t *c, const coord_table_t *ct, bool ddb, const char *dir, uint64_t want,
                      uint64_t *ret_bytes)
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

static int load_pdb(coord_t *c, const hps_conf_model_t *m)
{
    char err[512];
    hps_modelfile_spec_t specs[256];
    specs_of(c, m, specs);
    double t0 = now_s();
    /* One SST per table up to 256 MiB of rows (HugeCTR's ten chunks per
     * table make overlapping SSTs that RocksDB then compacts). */
    uint32_t maxdim = 1;
    for (size_t t = 0; t < m->num_tables; t++)
        if (specs[t].dim > maxdim)
            maxdim = specs[t].dim;
    uint64_t chunk = (256ULL << 20) / (8 + (uint64_t)maxdim * sizeof(float));
    hps_err_t rc =
        hps_pdb_load_model(c->pdb, m->name, specs, m->num_tables, chunk, err, sizeof(err));
    if (rc < 0) {
        HPS_ERROR("model %s: loading into the persistent DB: %s", m->name, err);
        return HPS_EXIT_MODEL;
    }
    HPS_INFO("model %s: persistent DB loaded in %.2f s", m->name, now_s() - t0);
    return 0;
}

/* Write initial_cache_rate of every table of m to the distributed DB. */
static int fill_ddb(coord_t *c, const hps_conf_model_t *m, const uint64_t *rows)
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
        int ex = fill_layer(c, &c->tables[id], true, m->sparse_files[t], want, &bytes);
        if (ex)
            return ex;
    }
    HPS_INFO("model %s: %llu rows (initial_cache_rate %.3g) into the distributed DB in %.2f s",
             m->name, (unsigned long long)total, rate, now_s() - t0);
    return 0;
}

static int load_model(coord_t *c, const hps_conf_model_t *m, bool vdb_reused)
{
    uint64_t rows[256], bytes = 0, total = 0;
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
    if (c->pdb && !p->read_only && p->initialize_after_startup) {
        int ex = load_pdb(c, m);
        if (ex)
            return ex;
    }
    int ex = fill_ddb(c, m, rows);
    if (ex || vdb_reused)
        return ex;
    double t0 = now_s();
    for (uint32_t t = 0; t < m->num_tables; t++) {
        uint32_t id;
        hps_shmdb_table_find(c->db, m->name, m->embedding_table_names[t], &id);
        uint64_t want = (uint64_t)ceil((double)rows[t] * c->conf->volatile_db.initial_cache_rate);
        total += want;
        ex = fill_layer(c, &c->tables[id], false, m->sparse_files[t], want, &bytes);
        if (ex)
            return ex;
    }
    double dt = now_s() - t0;
    HPS_INFO("model %s: %llu rows (initial_cache_rate %.3g) into the volatile DB in %.2f s, "
             "%.1f MB/s",
             m->name, (unsigned long long)total, c->conf->volatile_db.initial_cache_rate, dt,
             dt > 0 ? (double)bytes / dt / 1e6 : 0.0);
    return 0;
}

int coord_load_models(coord_t *c, bool vdb_reused)
{
    int ex = validate_all(c);
    if (!ex)
        ex = coord_ddb_open(c); /* no-op when main.c opened it already */
    if (ex)
        return ex;
    c->tables = calloc(HPS_SHMDB_MAX_TABLES, sizeof(coord_table_t));
    if (!c->tables)
        return HPS_EXIT_RUNTIME;
    for (size_t i = 0; i < c->conf->num_models; i++) {
        ex = load_model(c, &c->conf->models[i], vdb_reused);
        if (ex)
            return ex;
    }
    return 0;
}
