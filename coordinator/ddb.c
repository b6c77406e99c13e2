/*
 * ddb.c -- the distributed DB over a Redis Cluster, in HugeCTR's layout
 * (see include/hps/ddb.h).  Every Redis round trip goes through
 * hps_rcluster_exec(): the commands of one call are built into one command
 * list, keys and values are passed by pointer into the caller's buffers
 * (raw little-endian bytes, no copy), and the client pipelines them per node.
 *
 * This file: options, open and close, tables, a table's record, counters.
 * Command lists and bucketing: ddb-cmd.c; access tracking: ddb-touch.c;
 * lookups and checks: ddb-read.c; overflow resolution: ddb-evict.c;
 * insert, erase, drop: ddb-write.c.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddb-internal.h"

/* ---- open / close / tables ---------------------------------------------- */

void hps_ddb_opts_init(hps_ddb_opts_t *o)
{
    *o = (hps_ddb_opts_t){.address = "127.0.0.1:7000",
                          .user_name = "default",
                          .password = "",
                          .num_partitions = 8,
                          .num_node_connections = 5,
                          .max_batch_size = 65536,
                          .overflow_margin = UINT64_MAX,
                          .overflow_policy = HPS_EVICT_RANDOM,
                          .overflow_resolution_target = 0.8,
                          .enable_tls = false,
                          .timeout_ms = 1000,
                          .lookup_timeout_ms = 0};
}

hps_err_t hps_ddb_key_name(const char *model, const char *table, unsigned part, char kind,
                           char *buf, size_t buf_len)
{
    if ((kind != 'v' && kind != 't' && kind != 'r') || !model || !table || !buf)
        return HPS_EINVAL;
    int n = snprintf(buf, buf_len, HPS_TABLE_TAG_PREFIX "{" HPS_TABLE_TAG_PREFIX ".%s.%s/p%u}%c",
                     model, table, part, kind);
    return n < 0 || (size_t)n >= buf_len ? HPS_EINVAL : n;
}

void hps__ddb_set_err(char *err, size_t len, const char *msg)
{
    if (err && len)
        snprintf(err, len, "%s", msg);
}

hps_err_t hps_ddb_open(const hps_ddb_opts_t *opts, hps_ddb_t **ret, char *err, size_t err_len)
{
    if (!opts || !ret)
        return HPS_EINVAL;
    if (opts->enable_tls) {
        hps__ddb_set_err(
            err, err_len,
            "enable_tls = true: TLS to Redis is not supported by this build (hiredis 0.14 "
            "has no TLS); set enable_tls = false or reach the cluster through a TLS tunnel");
        return HPS_EUNSUPPORTED;
    }
    if (opts->num_partitions < 1 || opts->num_partitions > 65535 || opts->max_batch_size < 1 ||
        opts->num_node_connections < 1 || !(opts->overflow_resolution_target > 0) ||
        opts->overflow_resolution_target > 1) {
        hps__ddb_set_err(err, err_len, "invalid distributed DB options");
        return HPS_EINVAL;
    }
    hps_ddb_t *db = calloc(1, sizeof(*db));
    if (!db)
        return -ENOMEM;
    db->o = *opts;
    pthread_mutex_init(&db->mu, NULL);
    hps_rcluster_opts_t ro;
    hps_rcluster_opts_init(&ro);
    ro.address = opts->address;
    ro.user = opts->user_name;
    ro.password = opts->password;
    ro.conns_per_node = opts->num_node_connections;
    ro.timeout_ms = opts->timeout_ms ? opts->timeout_ms : 1000;
    ro.fast_timeout_ms = opts->lookup_timeout_ms ? opts->lookup_timeout_ms : ro.timeout_ms;
    hps_err_t e = hps_rcluster_create(&ro, &db->rc, err, err_len);
    if (!e && (e = hps__ddb_touch_start(db)) < 0)
        hps__ddb_set_err(err, err_len, "cannot start the access-tracking thread");
    if (e) {
        hps_ddb_close(db);
        return e;
    }
    db->o.address = db->o.user_name = db->o.password = NULL; /* not kept */
    *ret = db;
    return 0;
}

static void table_free(hps_ddb_table_t *t)
{
    if (!t)
        return;
    for (unsigned p = 0; t->evict_mu && p < t->np; p++)
        pthread_mutex_destroy(&t->evict_mu[p]);
    free(t->vkey);
    free(t->tkey);
    free(t->klen);
    free(t->slot);
    free(t->evict_mu);
    free(t);
}

void hps_ddb_close(hps_ddb_t *db)
{
    if (!db)
        return;
    hps__ddb_touch_stop(db);
    for (size_t i = 0; i < db->num_tables; i++)
        table_free(db->tables[i]);
    hps_rcluster_destroy(db->rc);
    pthread_mutex_destroy(&db->mu);
    free(db);
}

static hps_err_t table_new(hps_ddb_t *db, const char *model, const char *table, uint32_t dim,
                           uint32_t key_bytes, hps_ddb_table_t **ret)
{
    hps_ddb_table_t *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    *t =
        (hps_ddb_table_t){.db = db, .dim = dim, .key_bytes = key_bytes, .np = db->o.num_partitions};
    snprintf(t->model, sizeof(t->model), "%s", model);
    snprintf(t->table, sizeof(t->table), "%s", table);
    t->vkey = malloc(t->np * sizeof(*t->vkey));
    t->tkey = malloc(t->np * sizeof(*t->tkey));
    t->klen = malloc(t->np * sizeof(size_t));
    t->slot = malloc(t->np * sizeof(uint16_t));
    t->evict_mu = malloc(t->np * sizeof(pthread_mutex_t));
    if (!t->vkey || !t->tkey || !t->klen || !t->slot || !t->evict_mu) {
        free(t->evict_mu);
        t->evict_mu = NULL;
        table_free(t);
        return -ENOMEM;
    }
    for (unsigned p = 0; p < t->np; p++) {
        hps_err_t n = hps_ddb_key_name(model, table, p, 'v', t->vkey[p], HPS_DDB_KEY_MAX);
        hps_ddb_key_name(model, table, p, 't', t->tkey[p], HPS_DDB_KEY_MAX);
        t->klen[p] = (size_t)n;
        t->slot[p] = hps_rcluster_key_slot(t->vkey[p], t->klen[p]);
        pthread_mutex_init(&t->evict_mu[p], NULL);
    }
    *ret = t;
    return 0;
}

hps_err_t hps_ddb_table(hps_ddb_t *db, const char *model, const char *table, uint32_t dim,
                        uint32_t key_bytes, hps_ddb_table_t **ret)
{
    if (!db || !model || !table || !ret || dim == 0 || (key_bytes != 4 && key_bytes != 8) ||
        !model[0] || !table[0] || strlen(model) > 120 || strlen(table) > 120)
        return HPS_EINVAL;
    hps_err_t e = 0;
    pthread_mutex_lock(&db->mu);
    for (size_t i = 0; i < db->num_tables; i++) {
        hps_ddb_table_t *t = db->tables[i];
        if (strcmp(t->model, model) || strcmp(t->table, table))
            continue;
        e = t->dim == dim && t->key_bytes == key_bytes ? 0 : HPS_EMISMATCH;
        if (!e)
            *ret = t;
        pthread_mutex_unlock(&db->mu);
        return e;
    }
    hps_ddb_table_t *t = NULL;
    if (db->num_tables == MAX_TABLES)
        e = HPS_EFULL;
    else if ((e = table_new(db, model, table, dim, key_bytes, &t)) == 0) {
        db->tables[db->num_tables++] = t;
        *ret = t;
    }
    pthread_mutex_unlock(&db->mu);
    return e;
}

void hps_ddb_stats(hps_ddb_t *db, hps_ddb_stats_t *ret)
{
    ret->lookup_keys = __atomic_load_n(&db->st.lookup_keys, __ATOMIC_RELAXED);
    ret->lookup_hits = __atomic_load_n(&db->st.lookup_hits, __ATOMIC_RELAXED);
    ret->insert_rows = __atomic_load_n(&db->st.insert_rows, __ATOMIC_RELAXED);
    ret->evicted_rows = __atomic_load_n(&db->st.evicted_rows, __ATOMIC_RELAXED);
    ret->errors = __atomic_load_n(&db->st.errors, __ATOMIC_RELAXED);
    ret->touches_dropped = __atomic_load_n(&db->st.touches_dropped, __ATOMIC_RELAXED);
    ret->bad_values = __atomic_load_n(&db->st.bad_values, __ATOMIC_RELAXED);
}

/* ---- the table's record: which model files its rows came from ----------- */

/* One command on t's record key (partition 0's slot): verb, the key, and
 * val when given.  The reply stays in cl (hps__ddb_cl_fini frees it). */
static hps_err_t record_cmd(hps_ddb_table_t *t, cmdlist_t *cl, char *name, const char *verb,
                            const char *val, char *err, size_t err_len)
{
    hps_err_t len = hps_ddb_key_name(t->model, t->table, 0, 'r', name, HPS_DDB_KEY_MAX);
    hps_err_t e = len < 0 ? len : hps__ddb_cl_init(cl, 1, 3);
    if (e)
        return e;
    hps_rcluster_cmd_t *c = &cl->c[cl->n++];
    *c = (hps_rcluster_cmd_t){.argv = cl->argv, .argvlen = cl->len, .slot = t->slot[0]};
    hps__ddb_cl_arg(cl, c, verb, strlen(verb));
    hps__ddb_cl_arg(cl, c, name, (size_t)len);
    if (val)
        hps__ddb_cl_arg(cl, c, val, strlen(val));
    e = hps_rcluster_exec(t->db->rc, 1, cl->c, err, err_len);
    if (!e && (!c->reply || c->reply->type == REDIS_REPLY_ERROR))
        e = (hps__ddb_reply_errors(cl, err, err_len), HPS_EIO); /* the message, if any */
    return e;
}

hps_err_t hps_ddb_record_get(hps_ddb_table_t *t, char *buf, size_t len, char *err, size_t err_len)
{
    char name[HPS_DDB_KEY_MAX];
    cmdlist_t cl = {0};
    hps_err_t e = record_cmd(t, &cl, name, "GET", NULL, err, err_len);
    if (!e) {
        const redisReply *r = cl.c[0].reply;
        if (r->type == REDIS_REPLY_NIL)
            e = HPS_ENOTFOUND;
        else if (r->type != REDIS_REPLY_STRING || r->len >= len)
            e = HPS_EIO;
        else
            memcpy(buf, r->str, r->len + 1);
    }
    hps__ddb_cl_fini(&cl);
    return e;
}

hps_err_t hps_ddb_record_set(hps_ddb_table_t *t, const char *rec, char *err, size_t err_len)
{
    char name[HPS_DDB_KEY_MAX];
    cmdlist_t cl = {0};
    hps_err_t e = record_cmd(t, &cl, name, rec ? "SET" : "DEL", rec, err, err_len);
    hps__ddb_cl_fini(&cl);
    return e;
}
