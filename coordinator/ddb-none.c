/*
 * ddb-none.c -- the distributed-DB API in builds without hiredis
 * (-Dredis=disabled): opening answers HPS_EUNSUPPORTED with a message.
 */
#include <stdio.h>

#include "hps/ddb.h"

void hps_ddb_opts_init(hps_ddb_opts_t *o)
{
    *o = (hps_ddb_opts_t){.num_partitions = 8,
                          .num_node_connections = 5,
                          .max_batch_size = 65536,
                          .overflow_margin = UINT64_MAX,
                          .overflow_resolution_target = 0.8,
                          .timeout_ms = 1000};
}

hps_err_t hps_ddb_key_name(const char *model, const char *table, unsigned part, char kind,
                           char *buf, size_t buf_len)
{
    if ((kind != 'v' && kind != 't' && kind != 'r') || !model || !table || !buf)
        return HPS_EINVAL;
    int n = snprintf(buf, buf_len, "hps_et{hps_et.%s.%s/p%u}%c", model, table, part, kind);
    return n < 0 || (size_t)n >= buf_len ? HPS_EINVAL : n;
}

hps_err_t hps_ddb_open(const hps_ddb_opts_t *opts, hps_ddb_t **ret, char *err, size_t err_len)
{
    (void)opts;
    (void)ret;
    if (err && err_len)
        snprintf(err, err_len, "this build has no Redis support (built without hiredis)");
    return HPS_EUNSUPPORTED;
}

void hps_ddb_close(hps_ddb_t *db)
{
    (void)db;
}

hps_err_t hps_ddb_table(hps_ddb_t *db, const char *model, const char *table, uint32_t dim,
                        uint32_t key_bytes, hps_ddb_table_t **ret)
{
    (void)db, (void)model, (void)table, (void)dim, (void)key_bytes, (void)ret;
    return HPS_EUNSUPPORTED;
}

hps_err_t hps_ddb_lookup(hps_ddb_table_t *t, size_t n, const void *keys, float *values, bool *found,
                         size_t *ret_hits, char *err, size_t err_len)
{
    (void)t, (void)n, (void)keys, (void)values, (void)found, (void)ret_hits, (void)err,
        (void)err_len;
    return HPS_EUNSUPPORTED;
}

hps_err_t hps_ddb_insert(hps_ddb_table_t *t, size_t n, const void *keys, const float *values,
                         char *err, size_t err_len)
{
    (void)t, (void)n, (void)keys, (void)values, (void)err, (void)err_len;
    return HPS_EUNSUPPORTED;
}

hps_err_t hps_ddb_insert_missing(hps_ddb_table_t *t, size_t n, const void *keys,
                                 const float *values, char *err, size_t err_len)
{
    return hps_ddb_insert(t, n, keys, values, err, err_len);
}

hps_err_t hps_ddb_erase(hps_ddb_table_t *t, size_t n, const void *keys, char *err, size_t err_len)
{
    (void)t, (void)n, (void)keys, (void)err, (void)err_len;
    return HPS_EUNSUPPORTED;
}

hps_err_t hps_ddb_partition_rows(hps_ddb_table_t *t, unsigned part, uint64_t *ret_rows, char *err,
                                 size_t err_len)
{
    (void)t, (void)part, (void)ret_rows, (void)err, (void)err_len;
    return HPS_EUNSUPPORTED;
}

hps_err_t hps_ddb_extra_partitions(hps_ddb_table_t *t, unsigned probe_to, long *ret_highest,
                                   char *err, size_t err_len)
{
    (void)t, (void)probe_to, (void)ret_highest, (void)err, (void)err_len;
    return HPS_EUNSUPPORTED;
}

hps_err_t hps_ddb_legacy_partitions(hps_ddb_table_t *t, unsigned probe_to, unsigned *ret_count,
                                    char *err, size_t err_len)
{
    (void)t, (void)probe_to, (void)ret_count, (void)err, (void)err_len;
    return HPS_EUNSUPPORTED;
}

void hps_ddb_stats(hps_ddb_t *db, hps_ddb_stats_t *ret)
{
    (void)db;
    *ret = (hps_ddb_stats_t){0};
}

unsigned hps_ddb_partition_of(const hps_ddb_table_t *t, const void *keys, size_t i)
{
    (void)t, (void)keys, (void)i;
    return 0;
}

hps_err_t hps_ddb_record_get(hps_ddb_table_t *t, char *buf, size_t len, char *err, size_t err_len)
{
    (void)t, (void)buf, (void)len, (void)err, (void)err_len;
    return HPS_EUNSUPPORTED;
}

hps_err_t hps_ddb_record_set(hps_ddb_table_t *t, const char *rec, char *err, size_t err_len)
{
    (void)t, (void)rec, (void)err, (void)err_len;
    return HPS_EUNSUPPORTED;
}

hps_err_t hps_ddb_drop(hps_ddb_table_t *t, char *err, size_t err_len)
{
    (void)t, (void)err, (void)err_len;
    return HPS_EUNSUPPORTED;
}

hps_err_t hps_ddb_check_sample(hps_ddb_table_t *t, unsigned per_partition, hps_ddb_sample_t *ret,
                               char *err, size_t err_len)
{
    (void)t, (void)per_partition, (void)ret, (void)err, (void)err_len;
    return HPS_EUNSUPPORTED;
}
