/*
 * pdb-none.c -- the persistent database API in a build without RocksDB
 * (-Drocksdb=disabled): every operation returns HPS_EUNSUPPORTED, so the
 * coordinator links and can report "persistent_db needs RocksDB" itself.
 */
#include <stdio.h>
#include <string.h>

#include "hps/pdb.h"

static hps_err_t unsupported(char *err, size_t err_len)
{
    if (err != NULL && err_len > 0)
        snprintf(err, err_len, "this build has no RocksDB (meson -Drocksdb=enabled)");
    return HPS_EUNSUPPORTED;
}

void hps_pdb_opts_init(hps_pdb_opts_t *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->num_threads = HPS_PDB_DEFAULT_THREADS;
    opts->max_batch_size = HPS_PDB_DEFAULT_BATCH;
    opts->block_cache_mb = HPS_PDB_DEFAULT_BLOCK_CACHE_MB;
    opts->sync_wal = true;
}

hps_err_t hps_pdb_open(const char *path, const hps_pdb_opts_t *opts, hps_pdb_t **ret_db, char *err,
                       size_t err_len)
{
    (void)path, (void)opts, (void)ret_db;
    return unsupported(err, err_len);
}

hps_err_t hps_pdb_close(hps_pdb_t *db, char *err, size_t err_len)
{
    (void)db, (void)err, (void)err_len;
    return 0;
}

hps_err_t hps_pdb_table(hps_pdb_t *db, const char *model, const char *table, bool create,
                        hps_pdb_table_t **ret_table, char *err, size_t err_len)
{
    (void)db, (void)model, (void)table, (void)create, (void)ret_table;
    return unsupported(err, err_len);
}

hps_err_t hps_pdb_foreach_table(hps_pdb_t *db, hps_pdb_table_fn fn, void *ctx)
{
    (void)db, (void)fn, (void)ctx;
    return HPS_EUNSUPPORTED;
}

hps_err_t hps_pdb_insert(hps_pdb_table_t *t, size_t n, const void *keys, uint32_t key_bytes,
                         const float *values, uint32_t dim, char *err, size_t err_len)
{
    (void)t, (void)n, (void)keys, (void)key_bytes, (void)values, (void)dim;
    return unsupported(err, err_len);
}

hps_err_t hps_pdb_stage_open(hps_pdb_t *db, const char *what, hps_pdb_stage_t **ret, char *err,
                             size_t err_len)
{
    (void)db, (void)what, (void)ret;
    return unsupported(err, err_len);
}

hps_err_t hps_pdb_stage_rows(hps_pdb_stage_t *s, size_t n, const void *keys, uint32_t key_bytes,
                             const float *values, uint32_t dim, char *err, size_t err_len)
{
    (void)s, (void)n, (void)keys, (void)key_bytes, (void)values, (void)dim;
    return unsupported(err, err_len);
}

hps_err_t hps_pdb_stage_ingest(hps_pdb_stage_t *s, hps_pdb_table_t *t, char *err, size_t err_len)
{
    (void)s, (void)t;
    return unsupported(err, err_len);
}

void hps_pdb_stage_close(hps_pdb_stage_t *s)
{
    (void)s;
}

hps_err_t hps_pdb_bulk_load(hps_pdb_table_t *t, size_t n, const void *keys, uint32_t key_bytes,
                            const float *values, uint32_t dim, char *err, size_t err_len)
{
    (void)t, (void)n, (void)keys, (void)key_bytes, (void)values, (void)dim;
    return unsupported(err, err_len);
}

hps_err_t hps_pdb_load_modelfile(hps_pdb_table_t *t, hps_modelfile_t *mf, uint32_t key_bytes,
                                 uint64_t chunk_rows, char *err, size_t err_len)
{
    (void)t, (void)mf, (void)key_bytes, (void)chunk_rows;
    return unsupported(err, err_len);
}

hps_err_t hps_pdb_load_model(hps_pdb_t *db, const char *model, const hps_modelfile_spec_t *specs,
                             size_t n, uint64_t chunk_rows, char *err, size_t err_len)
{
    (void)db, (void)model, (void)specs, (void)n, (void)chunk_rows;
    return unsupported(err, err_len);
}

hps_err_t hps_pdb_lookup(hps_pdb_table_t *t, size_t n, const void *keys, uint32_t key_bytes,
                         uint32_t dim, float *values, bool *found, size_t *ret_hits, char *err,
                         size_t err_len)
{
    (void)t, (void)n, (void)keys, (void)key_bytes, (void)dim, (void)values, (void)found;
    (void)ret_hits;
    return unsupported(err, err_len);
}

hps_err_t hps_pdb_erase(hps_pdb_table_t *t, size_t n, const void *keys, uint32_t key_bytes,
                        char *err, size_t err_len)
{
    (void)t, (void)n, (void)keys, (void)key_bytes;
    return unsupported(err, err_len);
}

hps_err_t hps_pdb_drop(hps_pdb_table_t *t, char *err, size_t err_len)
{
    (void)t;
    return unsupported(err, err_len);
}

void hps_pdb_table_hold(hps_pdb_table_t *t)
{
    (void)t;
}

void hps_pdb_table_release(hps_pdb_table_t *t)
{
    (void)t;
}

hps_err_t hps_pdb_rows_estimate(hps_pdb_table_t *t, uint64_t *ret_rows)
{
    (void)t, (void)ret_rows;
    return HPS_EUNSUPPORTED;
}

const char *hps_pdb_table_name(const hps_pdb_table_t *t)
{
    (void)t;
    return "";
}

void hps_pdb_stats(hps_pdb_t *db, hps_pdb_stats_t *ret)
{
    (void)db;
    memset(ret, 0, sizeof(*ret));
}

hps_err_t hps_pdb_meta_get(hps_pdb_t *db, const char *name, char *buf, size_t len, char *err,
                           size_t err_len)
{
    (void)db, (void)name;
    if (buf != NULL && len > 0)
        buf[0] = '\0';
    return unsupported(err, err_len);
}

hps_err_t hps_pdb_meta_put(hps_pdb_t *db, const char *name, const char *value, char *err,
                           size_t err_len)
{
    (void)db, (void)name, (void)value;
    return unsupported(err, err_len);
}
