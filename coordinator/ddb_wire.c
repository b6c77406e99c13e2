/*
 * ddb_wire.c -- the distributed DB (Redis Cluster) in hps-coordinator:
 * opening it from [distributed_db], and the per-table handles.  Model loading
 * (load.c) writes initial_cache_rate of each table into it; the miss service
 * (serve.c) reads it before the persistent DB.
 */
#include "coord.h"
#include "hps/log.h"

int coord_ddb_open(coord_t *c)
{
    const hps_conf_distributed_db_t *d = &c->conf->distributed_db;
    if (c->ddb || d->type != HPS_CONF_DDB_REDIS_CLUSTER)
        return 0;
    hps_ddb_opts_t o;
    hps_ddb_opts_init(&o);
    o.address = d->address;
    o.user_name = d->user_name;
    o.password = d->password;
    o.num_partitions = (unsigned)d->num_partitions;
    o.num_node_connections = (unsigned)d->num_node_connections;
    o.max_batch_size = (size_t)d->max_batch_size;
    o.overflow_margin = d->overflow_margin;
    o.overflow_policy = d->overflow_policy;
    o.overflow_resolution_target = d->overflow_resolution_target;
    o.enable_tls = d->enable_tls;
    o.lookup_timeout_ms = (unsigned)d->lookup_timeout_ms;
    if (d->lookup_timeout_ms >= c->conf->worker.miss_timeout_ms)
        HPS_WARN("[distributed_db] lookup_timeout_ms = %lld is not under [worker] "
                 "miss_timeout_ms = %lld: a hung Redis node makes workers answer default values "
                 "instead of the persistent DB's rows",
                 (long long)d->lookup_timeout_ms, (long long)c->conf->worker.miss_timeout_ms);
    char err[1024];
    hps_err_t rc = hps_ddb_open(&o, &c->ddb, err, sizeof(err));
    if (rc < 0) {
        HPS_ERROR("[distributed_db] redis_cluster at %s: %s (%s)", d->address, err,
                  hps_err_name(rc));
        return HPS_EXIT_DDB;
    }
    HPS_INFO("distributed DB: Redis Cluster at %s, %lld partitions per table, lookup deadline "
             "%lld ms",
             d->address, (long long)d->num_partitions, (long long)d->lookup_timeout_ms);
    return 0;
}

/* Partition hashes probed past num_partitions: HugeCTR's counts (min(16,
 * CPU cores)) and any other a deployment plausibly used. */
#define PROBE_PARTITIONS 256u

/* Refuse a table that Redis holds with more partitions than num_partitions:
 * its rows outside the first num_partitions hashes would never be found
 * (each key would get the default or the persistent DB's row, silently). */
static int check_partitions(coord_t *c, coord_table_t *ct)
{
    char err[512];
    long highest = -1;
    hps_err_t rc = hps_ddb_extra_partitions(ct->ddb, PROBE_PARTITIONS, &highest, err, sizeof(err));
    if (rc < 0) {
        HPS_WARN("model %s table %s: distributed DB: cannot check for partitions past "
                 "num_partitions: %s",
                 ct->model->name, ct->name, err);
        return 0;
    }
    if (highest < 0)
        return 0;
    char name[HPS_DDB_KEY_MAX];
    hps_ddb_key_name(ct->model->name, ct->name, (unsigned)highest, 'v', name, sizeof(name));
    HPS_ERROR("model %s table %s: Redis holds %s, partition %ld of the table, but [distributed_db] "
              "num_partitions = %lld: its rows were written with at least %ld partitions "
              "(HugeCTR used min(16, CPU cores)), and lookups would miss every row outside the "
              "first %lld; set num_partitions to the count they were written with",
              ct->model->name, ct->name, name, highest,
              (long long)c->conf->distributed_db.num_partitions, highest + 1,
              (long long)c->conf->distributed_db.num_partitions);
    return HPS_EXIT_DDB;
}

int coord_ddb_table(coord_t *c, coord_table_t *ct)
{
    if (!c->ddb)
        return 0;
    hps_err_t rc =
        hps_ddb_table(c->ddb, ct->model->name, ct->name, ct->dim, c->key_bytes, &ct->ddb);
    if (rc < 0) {
        HPS_ERROR("model %s table %s: distributed DB: %s", ct->model->name, ct->name,
                  hps_strerror(rc));
        return HPS_EXIT_DDB;
    }
    return check_partitions(c, ct);
}

void coord_ddb_close(coord_t *c)
{
    hps_ddb_close(c->ddb);
    c->ddb = NULL;
    for (uint32_t i = 0; c->tables && i < c->num_tables; i++)
        c->tables[i].ddb = NULL;
}
