/*
 * ddb.c -- the distributed DB over a Redis Cluster, in HugeCTR's layout
 * (see include/hps/ddb.h).  Every Redis round trip goes through
 * hps_rcluster_exec(): the commands of one call are built into one command
 * list, keys and values are passed by pointer into the caller's buffers
 * (raw little-endian bytes, no copy), and the client pipelines them per node.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hps/ddb.h"
#include "hps/rcluster.h"

#define MAX_TABLES       4096
#define TOUCH_QUEUE_KEYS (1u << 20) /* most keys waiting for access tracking */
/* Hit keys of one lookup, waiting for touch_loop(). */
typedef struct touch_item {
    struct touch_item *next;
    hps_ddb_table_t *t;
    size_t n;
    char keys[]; /* (n) packed keys */
} touch_item_t;

struct hps_ddb_table {
    hps_ddb_t *db;
    char model[128], table[128];
    uint32_t dim, key_bytes;
    unsigned np;
    char (*vkey)[HPS_DDB_KEY_MAX]; /* (np) value hash names */
    char (*tkey)[HPS_DDB_KEY_MAX]; /* (np) metadata hash names */
    size_t *klen;                  /* (np) name lengths (same for v and t) */
    uint16_t *slot;                /* (np) hash slot of the partition */
    pthread_mutex_t *evict_mu;     /* (np) one overflow resolution at a time */
    int64_t bad_warned_s;          /* take_hmget: monotonic s + 1 of the last warn, 0: none */
};

struct hps_ddb {
    hps_ddb_opts_t o;
    hps_rcluster_t *rc;
    pthread_mutex_t mu; /* tables[] */
    hps_ddb_table_t *tables[MAX_TABLES];
    size_t num_tables;
    hps_ddb_stats_t st; /* updated with relaxed atomic adds */
    /* access-tracking queue (touch_loop) */
    pthread_mutex_t tq_mu;
    pthread_cond_t tq_cv;
    touch_item_t *tq_head, *tq_tail;
    size_t tq_keys;
    bool tq_init, tq_running, tq_stop;
    pthread_t tq_thread;
};

#define STAT_ADD(db, f, v) __atomic_fetch_add(&(db)->st.f, (v), __ATOMIC_RELAXED)

static hps_err_t touch_start(hps_ddb_t *db);
static void touch_stop(hps_ddb_t *db);

/* ---- command lists ------------------------------------------------------ */

/* Commands of one exec with their argument pools, sized up front so that
 * argv pointers stay valid. */
typedef struct cmdlist {
    hps_rcluster_cmd_t *c;
    size_t n, cap;
    const char **argv;
    size_t *len;
    size_t na, acap;
} cmdlist_t;

static hps_err_t cl_init(cmdlist_t *cl, size_t cmds, size_t args)
{
    *cl = (cmdlist_t){.cap = cmds, .acap = args};
    cl->c = calloc(cmds ? cmds : 1, sizeof(*cl->c));
    cl->argv = malloc((args ? args : 1) * sizeof(*cl->argv));
    cl->len = malloc((args ? args : 1) * sizeof(*cl->len));
    return cl->c && cl->argv && cl->len ? 0 : -ENOMEM;
}

static void cl_fini(cmdlist_t *cl)
{
    for (size_t i = 0; cl->c && i < cl->n; i++)
        if (cl->c[i].reply)
            freeReplyObject(cl->c[i].reply);
    free(cl->c);
    free(cl->argv);
    free(cl->len);
}

/* Start a command on partition p of t: verb + hash name. */
static hps_rcluster_cmd_t *cl_begin(cmdlist_t *cl, const hps_ddb_table_t *t, unsigned p,
                                    const char *verb, char kind)
{
    hps_rcluster_cmd_t *c = &cl->c[cl->n++];
    *c = (hps_rcluster_cmd_t){
        .argv = cl->argv + cl->na, .argvlen = cl->len + cl->na, .slot = t->slot[p]};
    cl->argv[cl->na] = verb;
    cl->len[cl->na++] = strlen(verb);
    cl->argv[cl->na] = kind == 'v' ? t->vkey[p] : t->tkey[p];
    cl->len[cl->na++] = t->klen[p];
    c->argc = 2;
    return c;
}

static void cl_arg(cmdlist_t *cl, hps_rcluster_cmd_t *c, const void *p, size_t len)
{
    cl->argv[cl->na] = p;
    cl->len[cl->na++] = len;
    c->argc++;
}

/* ---- partitioning ------------------------------------------------------- */

static uint64_t key_at(const hps_ddb_table_t *t, const void *keys, size_t i)
{
    if (t->key_bytes == 8) {
        int64_t k;
        memcpy(&k, (const char *)keys + i * 8, 8);
        return (uint64_t)k;
    }
    uint32_t k;
    memcpy(&k, (const char *)keys + i * 4, 4);
    return k;
}

/* Counting sort of key indices by partition: order (n), start (np + 1). */
static hps_err_t bucket(const hps_ddb_table_t *t, size_t n, const void *keys, size_t **ret_order,
                        size_t **ret_start)
{
    size_t *order = malloc((n ? n : 1) * sizeof(size_t));
    size_t *start = calloc(t->np + 1, sizeof(size_t));
    uint32_t *part = malloc((n ? n : 1) * sizeof(uint32_t));
    if (!order || !start || !part) {
        free(order);
        free(start);
        free(part);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        part[i] = (uint32_t)(hps_rrxmrrxmsx_0(key_at(t, keys, i)) % t->np);
        start[part[i] + 1]++;
    }
    for (unsigned p = 0; p < t->np; p++)
        start[p + 1] += start[p];
    size_t *pos = malloc((t->np ? t->np : 1) * sizeof(size_t));
    if (!pos) {
        free(order);
        free(start);
        free(part);
        return -ENOMEM;
    }
    memcpy(pos, start, t->np * sizeof(size_t));
    for (size_t i = 0; i < n; i++)
        order[pos[part[i]]++] = i;
    free(pos);
    free(part);
    *ret_order = order;
    *ret_start = start;
    return 0;
}

static size_t num_batches(const hps_ddb_table_t *t, const size_t *start)
{
    size_t b = t->db->o.max_batch_size, nb = 0;
    for (unsigned p = 0; p < t->np; p++)
        nb += (start[p + 1] - start[p] + b - 1) / b;
    return nb;
}

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

static void set_err(char *err, size_t len, const char *msg)
{
    if (err && len)
        snprintf(err, len, "%s", msg);
}

hps_err_t hps_ddb_open(const hps_ddb_opts_t *opts, hps_ddb_t **ret, char *err, size_t err_len)
{
    if (!opts || !ret)
        return HPS_EINVAL;
    if (opts->enable_tls) {
        set_err(err, err_len,
                "enable_tls = true: TLS to Redis is not supported by this build (hiredis 0.14 "
                "has no TLS); set enable_tls = false or reach the cluster through a TLS tunnel");
        return HPS_EUNSUPPORTED;
    }
    if (opts->num_partitions < 1 || opts->num_partitions > 65535 || opts->max_batch_size < 1 ||
        opts->num_node_connections < 1 || !(opts->overflow_resolution_target > 0) ||
        opts->overflow_resolution_target > 1) {
        set_err(err, err_len, "invalid distributed DB options");
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
    if (!e && (e = touch_start(db)) < 0)
        set_err(err, err_len, "cannot start the access-tracking thread");
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
    touch_stop(db);
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

/* ---- metadata (access tracking) ----------------------------------------- */

static const char LFU_ONE[] = "1";

/* Append the metadata writes for keys order[a..b) of partition p. */
static void meta_cmds(cmdlist_t *cl, const hps_ddb_table_t *t, unsigned p, const void *keys,
                      const size_t *order, size_t a, size_t b, const int64_t *now)
{
    size_t kb = t->key_bytes;
    if (t->db->o.overflow_policy == HPS_EVICT_LEAST_USED) {
        for (size_t j = a; j < b; j++) {
            hps_rcluster_cmd_t *c = cl_begin(cl, t, p, "HINCRBY", 't');
            cl_arg(cl, c, (const char *)keys + order[j] * kb, kb);
            cl_arg(cl, c, LFU_ONE, 1);
        }
    } else if (t->db->o.overflow_policy == HPS_EVICT_OLDEST) {
        hps_rcluster_cmd_t *c = cl_begin(cl, t, p, "HSET", 't');
        for (size_t j = a; j < b; j++) {
            cl_arg(cl, c, (const char *)keys + order[j] * kb, kb);
            cl_arg(cl, c, now, sizeof(*now)); /* raw 8-byte time_t, as HugeCTR */
        }
    }
}

/* Write the access metadata of m keys (hk, packed) of t now. */
static void touch_now(hps_ddb_table_t *t, size_t m, const char *hk)
{
    size_t *order = NULL, *start = NULL;
    cmdlist_t cl = {0};
    int64_t now = (int64_t)time(NULL);
    if (bucket(t, m, hk, &order, &start) == 0) {
        size_t nb = num_batches(t, start);
        if (cl_init(&cl, m + nb, 4 * m + 2 * nb) == 0) {
            size_t B = t->db->o.max_batch_size;
            for (unsigned p = 0; p < t->np; p++)
                for (size_t a = start[p]; a < start[p + 1]; a += B)
                    meta_cmds(&cl, t, p, hk, order, a, a + B < start[p + 1] ? a + B : start[p + 1],
                              &now);
            if (hps_rcluster_exec(t->db->rc, cl.n, cl.c, NULL, 0) < 0)
                STAT_ADD(t->db, errors, 1);
        }
        cl_fini(&cl);
    }
    free(order);
    free(start);
}

/*
 * Access tracking runs off the lookup path, as HugeCTR's background worker
 * did: lookups queue their hit keys (a bounded queue; when it is full the
 * touch is dropped and counted -- the metadata is a hint), one thread per
 * handle writes them (HINCRBY / HSET time).
 */
static void *touch_loop(void *arg)
{
    hps_ddb_t *db = arg;
    pthread_mutex_lock(&db->tq_mu);
    for (;;) {
        while (!db->tq_head && !db->tq_stop)
            pthread_cond_wait(&db->tq_cv, &db->tq_mu);
        touch_item_t *it = db->tq_head;
        if (!it)
            break; /* stopping and drained */
        db->tq_head = it->next;
        if (!db->tq_head)
            db->tq_tail = NULL;
        db->tq_keys -= it->n;
        pthread_mutex_unlock(&db->tq_mu);
        touch_now(it->t, it->n, it->keys);
        free(it);
        pthread_mutex_lock(&db->tq_mu);
    }
    pthread_mutex_unlock(&db->tq_mu);
    return NULL;
}

/* Queue the hit keys of an LFU/LRU table for touch_loop(). */
static void touch(hps_ddb_table_t *t, size_t n, const void *keys, const bool *found, size_t m)
{
    hps_ddb_t *db = t->db;
    if (!db->tq_running || m == 0)
        return;
    touch_item_t *it = malloc(sizeof(*it) + m * t->key_bytes);
    if (!it)
        return;
    *it = (touch_item_t){.t = t, .n = m};
    for (size_t i = 0, j = 0; i < n; i++)
        if (found[i])
            memcpy(it->keys + j++ * t->key_bytes, (const char *)keys + i * t->key_bytes,
                   t->key_bytes);
    pthread_mutex_lock(&db->tq_mu);
    bool full = db->tq_keys + m > TOUCH_QUEUE_KEYS;
    if (!full) {
        if (db->tq_tail)
            db->tq_tail->next = it;
        else
            db->tq_head = it;
        db->tq_tail = it;
        db->tq_keys += m;
        pthread_cond_signal(&db->tq_cv);
    }
    pthread_mutex_unlock(&db->tq_mu);
    if (full) {
        STAT_ADD(db, touches_dropped, m);
        free(it);
    }
}

/* Start the touch thread (LFU/LRU only). */
static hps_err_t touch_start(hps_ddb_t *db)
{
    pthread_mutex_init(&db->tq_mu, NULL);
    pthread_cond_init(&db->tq_cv, NULL);
    db->tq_init = true;
    if (db->o.overflow_policy == HPS_EVICT_RANDOM)
        return 0;
    if (pthread_create(&db->tq_thread, NULL, touch_loop, db) != 0)
        return -EAGAIN;
    db->tq_running = true;
    return 0;
}

/* Drain the queue (pending touches are written), stop the thread. */
static void touch_stop(hps_ddb_t *db)
{
    if (!db->tq_init)
        return;
    if (db->tq_running) {
        pthread_mutex_lock(&db->tq_mu);
        db->tq_stop = true;
        pthread_cond_signal(&db->tq_cv);
        pthread_mutex_unlock(&db->tq_mu);
        pthread_join(db->tq_thread, NULL);
    }
    pthread_mutex_destroy(&db->tq_mu);
    pthread_cond_destroy(&db->tq_cv);
}

/* ---- lookup ------------------------------------------------------------- */

static hps_err_t reply_errors(const struct cmdlist *cl, char *err, size_t err_len);

/* Count n stored values of len bytes (not dim * 4) met by a lookup of t,
 * and tell opts.warn at most once per table per HPS_DDB_WARN_INTERVAL_S. */
static void bad_values(hps_ddb_table_t *t, size_t n, size_t len)
{
    hps_ddb_t *db = t->db;
    uint64_t total = STAT_ADD(db, bad_values, n) + n;
    if (!db->o.warn)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t now = (int64_t)ts.tv_sec + 1; /* + 1: 0 means "never warned" */
    int64_t last = __atomic_load_n(&t->bad_warned_s, __ATOMIC_RELAXED);
    if ((last && now - last < HPS_DDB_WARN_INTERVAL_S) ||
        !__atomic_compare_exchange_n(&t->bad_warned_s, &last, now, false, __ATOMIC_RELAXED,
                                     __ATOMIC_RELAXED))
        return; /* warned lately, or another thread warns now */
    char msg[1024];
    snprintf(msg, sizeof(msg),
             "model %s table %s: Redis holds values of %zu bytes (%zu in one reply), but the "
             "table's vectors are %u floats (%zu bytes): they are answered as misses, from the "
             "layer below or the default (%llu such values met so far, all tables; this warning "
             "repeats at most every %d s per table); the rows were written for another "
             "dimension (another model, or the table's embedding_vecsize_per_table changed): "
             "delete them or write them again",
             t->model, t->table, len, n, t->dim, (size_t)t->dim * sizeof(float),
             (unsigned long long)total, HPS_DDB_WARN_INTERVAL_S);
    db->o.warn(db->o.warn_ctx, msg);
}

/* Copy one HMGET reply's hits into values/found; a value of the wrong
 * length is a miss, counted and reported (bad_values). */
static size_t take_hmget(hps_ddb_table_t *t, const redisReply *r, const size_t *idx, size_t m,
                         float *values, bool *found)
{
    size_t hits = 0, bad = 0, bad_len = 0, vb = (size_t)t->dim * sizeof(float);
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != m)
        return 0;
    for (size_t j = 0; j < m; j++) {
        const redisReply *e = r->element[j];
        if (e->type != REDIS_REPLY_STRING)
            continue; /* nil: not stored */
        if ((size_t)e->len != vb) {
            if (bad++ == 0)
                bad_len = (size_t)e->len;
            continue;
        }
        memcpy(values + idx[j] * t->dim, e->str, vb);
        found[idx[j]] = true;
        hits++;
    }
    if (bad)
        bad_values(t, bad, bad_len);
    return hits;
}

/* The smallest partition count in [from, 1024] under which every sampled
 * key (keys[i] in the hash of partition parts[i]) is in its hash; 0: none. */
static unsigned likely_partitions(const uint64_t *keys, const unsigned *parts, size_t n,
                                  unsigned from)
{
    for (unsigned np = from < 2 ? 2 : from; n && np <= 1024; np++) {
        size_t i = 0;
        while (i < n && hps_rrxmrrxmsx_0(keys[i]) % np == parts[i])
            i++;
        if (i == n)
            return np;
    }
    return 0;
}

/* Check the fields of one HSCAN reply (partition p) into *s; the keys of
 * the right width are appended to keys/parts (*nk of them). */
static void sample_reply(const hps_ddb_table_t *t, unsigned p, const redisReply *r,
                         unsigned per_partition, hps_ddb_sample_t *s, uint64_t *keys,
                         unsigned *parts, size_t *nk)
{
    const redisReply *a = r->element[1];
    size_t vb = (size_t)t->dim * sizeof(float), before = s->fields;
    for (size_t i = 0; i + 1 < a->elements && i / 2 < per_partition; i += 2) {
        const redisReply *f = a->element[i], *v = a->element[i + 1];
        if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
            continue;
        s->fields++;
        hps_ddb_sample_fault_t fault = HPS_DDB_SAMPLE_OK;
        size_t found = 0, want = 0;
        uint64_t key = 0;
        unsigned kp = 0;
        if ((size_t)f->len != t->key_bytes) {
            fault = HPS_DDB_SAMPLE_KEY_BYTES;
            found = (size_t)f->len;
            want = t->key_bytes;
        } else {
            key = key_at(t, f->str, 0);
            kp = (unsigned)(hps_rrxmrrxmsx_0(key) % t->np);
            keys[*nk] = key;
            parts[(*nk)++] = p;
            if ((size_t)v->len != vb) {
                fault = HPS_DDB_SAMPLE_VALUE_BYTES;
                found = (size_t)v->len;
                want = vb;
            } else if (kp != p)
                fault = HPS_DDB_SAMPLE_PARTITION;
        }
        if (fault == HPS_DDB_SAMPLE_OK || (s->fault && s->fault != fault))
            continue;
        if (!s->fault)
            *s = (hps_ddb_sample_t){.fault = fault,
                                    .part = p,
                                    .found_bytes = found,
                                    .want_bytes = want,
                                    .key = key,
                                    .key_part = kp,
                                    .fields = s->fields,
                                    .hashes = s->hashes};
        s->bad++;
    }
    if (s->fields > before)
        s->hashes++;
}

hps_err_t hps_ddb_check_sample(hps_ddb_table_t *t, unsigned per_partition, hps_ddb_sample_t *ret,
                               char *err, size_t err_len)
{
    if (!t || !ret || per_partition < 1 || per_partition > 1024)
        return HPS_EINVAL;
    *ret = (hps_ddb_sample_t){0};
    char count[16];
    snprintf(count, sizeof(count), "%u", per_partition);
    uint64_t *keys = NULL;
    unsigned *parts = NULL;
    size_t nk = 0, cap = 0;
    cmdlist_t cl;
    hps_err_t e = cl_init(&cl, t->np, 5 * (size_t)t->np);
    for (unsigned p = 0; !e && p < t->np; p++) {
        hps_rcluster_cmd_t *c = cl_begin(&cl, t, p, "HSCAN", 'v');
        cl_arg(&cl, c, "0", 1);
        cl_arg(&cl, c, "COUNT", 5);
        cl_arg(&cl, c, count, strlen(count));
    }
    if (!e)
        e = hps_rcluster_exec(t->db->rc, cl.n, cl.c, err, err_len);
    if (!e)
        e = reply_errors(&cl, err, err_len);
    for (unsigned p = 0; !e && p < t->np; p++) {
        const redisReply *r = cl.c[p].reply;
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[1]->type != REDIS_REPLY_ARRAY) {
            set_err(err, err_len, "HSCAN: unexpected reply");
            e = HPS_EIO;
        } else {
            size_t n = r->element[1]->elements / 2;
            cap += n < per_partition ? n : per_partition;
        }
    }
    if (!e) {
        keys = malloc((cap ? cap : 1) * sizeof(*keys));
        parts = malloc((cap ? cap : 1) * sizeof(*parts));
        if (!keys || !parts)
            e = -ENOMEM;
    }
    for (unsigned p = 0; !e && p < t->np; p++)
        sample_reply(t, p, cl.c[p].reply, per_partition, ret, keys, parts, &nk);
    if (!e && ret->fault == HPS_DDB_SAMPLE_PARTITION) {
        unsigned top = 0;
        for (size_t i = 0; i < nk; i++)
            top = parts[i] > top ? parts[i] : top;
        ret->likely_partitions = likely_partitions(keys, parts, nk, top + 1);
    }
    cl_fini(&cl);
    free(keys);
    free(parts);
    return e;
}

hps_err_t hps_ddb_lookup(hps_ddb_table_t *t, size_t n, const void *keys, float *values, bool *found,
                         size_t *ret_hits, char *err, size_t err_len)
{
    size_t *order, *start, hits = 0, B = t->db->o.max_batch_size, kb = t->key_bytes;
    memset(found, 0, n * sizeof(bool));
    if (n == 0) {
        if (ret_hits)
            *ret_hits = 0;
        return 0;
    }
    hps_err_t e = bucket(t, n, keys, &order, &start);
    if (e)
        return e;
    size_t nb = num_batches(t, start);
    cmdlist_t cl;
    if ((e = cl_init(&cl, nb, n + 2 * nb)) == 0) {
        for (unsigned p = 0; p < t->np; p++)
            for (size_t a = start[p]; a < start[p + 1]; a += B) {
                hps_rcluster_cmd_t *c = cl_begin(&cl, t, p, "HMGET", 'v');
                for (size_t j = a; j < start[p + 1] && j < a + B; j++)
                    cl_arg(&cl, c, (const char *)keys + order[j] * kb, kb);
            }
        /* fast: a cluster that is down answers "miss" at once, and a hung
         * node by lookup_timeout_ms, so the caller's lower layer answers
         * within the worker's miss timeout */
        e = hps_rcluster_exec_fast(t->db->rc, cl.n, cl.c, err, err_len);
        if (e == 0) /* e.g. WRONGTYPE: a partition's hash replaced by another type */
            e = reply_errors(&cl, err, err_len);
        size_t pos = 0;
        for (size_t i = 0; i < cl.n; i++) {
            size_t m = (size_t)cl.c[i].argc - 2;
            if (cl.c[i].status == 0)
                hits += take_hmget(t, cl.c[i].reply, order + pos, m, values, found);
            pos += m;
        }
    }
    cl_fini(&cl);
    free(order);
    free(start);
    STAT_ADD(t->db, lookup_keys, n);
    STAT_ADD(t->db, lookup_hits, hits);
    if (e)
        STAT_ADD(t->db, errors, 1);
    touch(t, n, keys, found, hits);
    if (ret_hits)
        *ret_hits = hits;
    return e;
}

/* ---- overflow ----------------------------------------------------------- */

/* A field of a partition with its eviction score (lower goes first). */
typedef struct victim {
    const char *f;
    size_t len;
    uint64_t score;
} victim_t;

static int by_field(const void *a, const void *b)
{
    const victim_t *x = a, *y = b;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return memcmp(x->f, y->f, x->len);
}

static int by_score(const void *a, const void *b)
{
    const victim_t *x = a, *y = b;
    return x->score < y->score ? -1 : x->score > y->score;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static uint64_t meta_score(const hps_ddb_table_t *t, const redisReply *v)
{
    if (v->type != REDIS_REPLY_STRING)
        return 0;
    if (t->db->o.overflow_policy == HPS_EVICT_OLDEST) {
        int64_t ts = 0;
        if (v->len == 8)
            memcpy(&ts, v->str, 8);
        return ts > 0 ? (uint64_t)ts : 0;
    }
    return strtoull(v->str, NULL, 10);
}

/* Score every field of fields (HKEYS v) from meta (HGETALL t) or randomly. */
static void score_all(const hps_ddb_table_t *t, victim_t *vs, size_t n, const redisReply *meta)
{
    uint64_t seed = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)vs;
    if (t->db->o.overflow_policy == HPS_EVICT_RANDOM || !meta || meta->type != REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i < n; i++)
            vs[i].score = t->db->o.overflow_policy == HPS_EVICT_RANDOM ? splitmix(&seed) : 0;
        return;
    }
    qsort(vs, n, sizeof(*vs), by_field);
    for (size_t i = 0; i + 1 < meta->elements; i += 2) {
        const redisReply *f = meta->element[i];
        victim_t key = {.f = f->str, .len = (size_t)f->len};
        victim_t *hit =
            f->type == REDIS_REPLY_STRING ? bsearch(&key, vs, n, sizeof(*vs), by_field) : NULL;
        if (hit)
            hit->score = meta_score(t, meta->element[i + 1]);
    }
}

/* Delete the `count` lowest-scored fields from both hashes of p. */
static hps_err_t evict(hps_ddb_table_t *t, unsigned p, victim_t *vs, size_t n, size_t count,
                       char *err, size_t err_len)
{
    size_t B = t->db->o.max_batch_size, nb = (count + B - 1) / B;
    qsort(vs, n, sizeof(*vs), by_score);
    cmdlist_t cl;
    hps_err_t e = cl_init(&cl, 2 * nb, 2 * count + 4 * nb);
    for (size_t a = 0; !e && a < count; a += B)
        for (int k = 0; k < 2; k++) {
            hps_rcluster_cmd_t *c = cl_begin(&cl, t, p, "HDEL", k ? 't' : 'v');
            for (size_t j = a; j < count && j < a + B; j++)
                cl_arg(&cl, c, vs[j].f, vs[j].len);
        }
    if (!e)
        e = hps_rcluster_exec(t->db->rc, cl.n, cl.c, err, err_len);
    for (size_t i = 0; !e && i < cl.n; i += 2)
        if (cl.c[i].reply->type == REDIS_REPLY_INTEGER)
            STAT_ADD(t->db, evicted_rows, (uint64_t)cl.c[i].reply->integer);
    cl_fini(&cl);
    return e;
}

/* Shrink partition p to the resolution margin if it is over its margin. */
static hps_err_t resolve_overflow(hps_ddb_table_t *t, unsigned p, char *err, size_t err_len)
{
    const hps_ddb_opts_t *o = &t->db->o;
    size_t target = (size_t)((double)o->overflow_margin * o->overflow_resolution_target + 0.5);
    if (pthread_mutex_trylock(&t->evict_mu[p]) != 0)
        return 0; /* another thread is resolving this partition */
    cmdlist_t cl;
    hps_err_t e = cl_init(&cl, 2, 4);
    if (!e) {
        cl_begin(&cl, t, p, "HKEYS", 'v');
        if (o->overflow_policy != HPS_EVICT_RANDOM)
            cl_begin(&cl, t, p, "HGETALL", 't');
        e = hps_rcluster_exec(t->db->rc, cl.n, cl.c, err, err_len);
    }
    redisReply *keys = e ? NULL : cl.c[0].reply;
    if (!e && keys->type == REDIS_REPLY_ARRAY && keys->elements > o->overflow_margin) {
        victim_t *vs = malloc(keys->elements * sizeof(*vs));
        if (!vs)
            e = -ENOMEM;
        for (size_t i = 0; vs && i < keys->elements; i++)
            vs[i] = (victim_t){.f = keys->element[i]->str, .len = (size_t)keys->element[i]->len};
        if (vs) {
            score_all(t, vs, keys->elements, cl.n > 1 ? cl.c[1].reply : NULL);
            e = evict(t, p, vs, keys->elements, keys->elements - target, err, err_len);
        }
        free(vs);
    }
    cl_fini(&cl);
    pthread_mutex_unlock(&t->evict_mu[p]);
    return e;
}

/* ---- insert / erase ----------------------------------------------------- */

/* First error reply of a command list, as HPS_EIO with its text. */
static hps_err_t reply_errors(const cmdlist_t *cl, char *err, size_t err_len)
{
    for (size_t i = 0; i < cl->n; i++)
        if (cl->c[i].reply && cl->c[i].reply->type == REDIS_REPLY_ERROR) {
            set_err(err, err_len, cl->c[i].reply->str);
            return HPS_EIO;
        }
    return 0;
}

/* The commands that write rows order[a, b) of partition p: one HSET of
 * them all, or (missing) one HSETNX each, which leaves a row that exists. */
static void insert_cmds(cmdlist_t *cl, hps_ddb_table_t *t, unsigned p, const void *keys,
                        const float *values, const size_t *order, size_t a, size_t b,
                        const int64_t *now, bool missing)
{
    size_t kb = t->key_bytes, vb = (size_t)t->dim * sizeof(float);
    meta_cmds(cl, t, p, keys, order, a, b, now);
    hps_rcluster_cmd_t *c = missing ? NULL : cl_begin(cl, t, p, "HSET", 'v');
    for (size_t j = a; j < b; j++) {
        if (missing)
            c = cl_begin(cl, t, p, "HSETNX", 'v');
        cl_arg(cl, c, (const char *)keys + order[j] * kb, kb);
        cl_arg(cl, c, values + order[j] * t->dim, vb);
    }
    cl_begin(cl, t, p, "HLEN", 'v');
}

/* Rows an insert wrote: n, or (missing) the HSETNX replies of 1. */
static size_t rows_written(const cmdlist_t *cl, size_t n, bool missing)
{
    if (!missing)
        return n;
    size_t w = 0;
    for (size_t i = 0; i < cl->n; i++)
        w += cl->c[i].argvlen[0] == 6 && !memcmp(cl->c[i].argv[0], "HSETNX", 6) && cl->c[i].reply &&
             cl->c[i].reply->type == REDIS_REPLY_INTEGER && cl->c[i].reply->integer == 1;
    return w;
}

/* Resolve every partition whose last HLEN reply exceeds the margin. */
static hps_err_t resolve_all(hps_ddb_table_t *t, const cmdlist_t *cl, char *err, size_t err_len)
{
    hps_err_t e = 0;
    uint8_t *over = calloc(t->np, 1);
    if (!over)
        return -ENOMEM;
    for (size_t i = 0; i < cl->n; i++) {
        const hps_rcluster_cmd_t *c = &cl->c[i];
        if (c->argc == 2 && c->argvlen[0] == 4 && !memcmp(c->argv[0], "HLEN", 4) && c->reply &&
            c->reply->type == REDIS_REPLY_INTEGER &&
            (uint64_t)c->reply->integer > t->db->o.overflow_margin)
            over[(size_t)(c->argv[1] - t->vkey[0]) / HPS_DDB_KEY_MAX] = 1; /* argv[1] = vkey[p] */
    }
    for (unsigned p = 0; p < t->np && !e; p++)
        if (over[p])
            e = resolve_overflow(t, p, err, err_len);
    free(over);
    return e;
}

static hps_err_t insert_rows(hps_ddb_table_t *t, size_t n, const void *keys, const float *values,
                             bool missing, char *err, size_t err_len)
{
    size_t *order, *start, B = t->db->o.max_batch_size, written = 0;
    if (n == 0)
        return 0;
    hps_err_t e = bucket(t, n, keys, &order, &start);
    if (e)
        return e;
    size_t nb = num_batches(t, start);
    int64_t now = (int64_t)time(NULL);
    cmdlist_t cl;
    if ((e = cl_init(&cl, 2 * n + 3 * nb, 12 * n + 8 * nb)) == 0) {
        for (unsigned p = 0; p < t->np; p++)
            for (size_t a = start[p]; a < start[p + 1]; a += B)
                insert_cmds(&cl, t, p, keys, values, order, a,
                            a + B < start[p + 1] ? a + B : start[p + 1], &now, missing);
        e = hps_rcluster_exec(t->db->rc, cl.n, cl.c, err, err_len);
        if (!e)
            e = reply_errors(&cl, err, err_len);
        if (!e)
            written = rows_written(&cl, n, missing);
        if (!e)
            e = resolve_all(t, &cl, err, err_len);
    }
    cl_fini(&cl);
    free(order);
    free(start);
    STAT_ADD(t->db, insert_rows, written);
    if (e)
        STAT_ADD(t->db, errors, 1);
    return e;
}

hps_err_t hps_ddb_insert(hps_ddb_table_t *t, size_t n, const void *keys, const float *values,
                         char *err, size_t err_len)
{
    return insert_rows(t, n, keys, values, false, err, err_len);
}

hps_err_t hps_ddb_insert_missing(hps_ddb_table_t *t, size_t n, const void *keys,
                                 const float *values, char *err, size_t err_len)
{
    return insert_rows(t, n, keys, values, true, err, err_len);
}

hps_err_t hps_ddb_erase(hps_ddb_table_t *t, size_t n, const void *keys, char *err, size_t err_len)
{
    size_t *order, *start, B = t->db->o.max_batch_size, kb = t->key_bytes;
    if (n == 0)
        return 0;
    hps_err_t e = bucket(t, n, keys, &order, &start);
    if (e)
        return e;
    size_t nb = num_batches(t, start);
    cmdlist_t cl;
    if ((e = cl_init(&cl, 2 * nb, 2 * n + 4 * nb)) == 0) {
        for (unsigned p = 0; p < t->np; p++)
            for (size_t a = start[p]; a < start[p + 1]; a += B)
                for (int k = 0; k < 2; k++) {
                    hps_rcluster_cmd_t *c = cl_begin(&cl, t, p, "HDEL", k ? 't' : 'v');
                    for (size_t j = a; j < start[p + 1] && j < a + B; j++)
                        cl_arg(&cl, c, (const char *)keys + order[j] * kb, kb);
                }
        e = hps_rcluster_exec(t->db->rc, cl.n, cl.c, err, err_len);
        if (!e)
            e = reply_errors(&cl, err, err_len);
    }
    cl_fini(&cl);
    free(order);
    free(start);
    return e;
}

hps_err_t hps_ddb_partition_rows(hps_ddb_table_t *t, unsigned part, uint64_t *ret_rows, char *err,
                                 size_t err_len)
{
    if (part >= t->np)
        return HPS_EINVAL;
    cmdlist_t cl;
    hps_err_t e = cl_init(&cl, 1, 2);
    if (!e) {
        cl_begin(&cl, t, part, "HLEN", 'v');
        e = hps_rcluster_exec(t->db->rc, 1, cl.c, err, err_len);
    }
    if (!e && cl.c[0].reply->type != REDIS_REPLY_INTEGER)
        e = (reply_errors(&cl, err, err_len), HPS_EIO); /* reply_errors: the message, if any */
    if (!e)
        *ret_rows = (uint64_t)cl.c[0].reply->integer;
    cl_fini(&cl);
    return e;
}

hps_err_t hps_ddb_extra_partitions(hps_ddb_table_t *t, unsigned probe_to, long *ret_highest,
                                   char *err, size_t err_len)
{
    *ret_highest = -1;
    if (probe_to <= t->np)
        return 0;
    size_t n = probe_to - t->np;
    char *names = malloc(n * HPS_DDB_KEY_MAX);
    cmdlist_t cl;
    hps_err_t e = cl_init(&cl, n, 2 * n);
    if (!e && !names)
        e = -ENOMEM;
    for (size_t i = 0; !e && i < n; i++) {
        char *name = names + i * HPS_DDB_KEY_MAX;
        hps_err_t len =
            hps_ddb_key_name(t->model, t->table, t->np + (unsigned)i, 'v', name, HPS_DDB_KEY_MAX);
        if (len < 0) {
            e = len;
            break;
        }
        hps_rcluster_cmd_t *c = &cl.c[cl.n++];
        *c = (hps_rcluster_cmd_t){.argv = cl.argv + cl.na,
                                  .argvlen = cl.len + cl.na,
                                  .slot = hps_rcluster_key_slot(name, (size_t)len)};
        cl_arg(&cl, c, "EXISTS", 6);
        cl_arg(&cl, c, name, (size_t)len);
    }
    if (!e)
        e = hps_rcluster_exec(t->db->rc, cl.n, cl.c, err, err_len);
    for (size_t i = 0; !e && i < cl.n; i++) {
        const redisReply *r = cl.c[i].reply;
        if (!r || r->type != REDIS_REPLY_INTEGER)
            e = (reply_errors(&cl, err, err_len), HPS_EIO); /* the message, if any */
        else if (r->integer > 0)
            *ret_highest = (long)(t->np + i);
    }
    cl_fini(&cl);
    free(names);
    return e;
}

/* ---- the table's record: which model files its rows came from ----------- */

/* One command on t's record key (partition 0's slot): verb, the key, and
 * val when given.  The reply stays in cl (cl_fini frees it). */
static hps_err_t record_cmd(hps_ddb_table_t *t, cmdlist_t *cl, char *name, const char *verb,
                            const char *val, char *err, size_t err_len)
{
    hps_err_t len = hps_ddb_key_name(t->model, t->table, 0, 'r', name, HPS_DDB_KEY_MAX);
    hps_err_t e = len < 0 ? len : cl_init(cl, 1, 3);
    if (e)
        return e;
    hps_rcluster_cmd_t *c = &cl->c[cl->n++];
    *c = (hps_rcluster_cmd_t){.argv = cl->argv, .argvlen = cl->len, .slot = t->slot[0]};
    cl_arg(cl, c, verb, strlen(verb));
    cl_arg(cl, c, name, (size_t)len);
    if (val)
        cl_arg(cl, c, val, strlen(val));
    e = hps_rcluster_exec(t->db->rc, 1, cl->c, err, err_len);
    if (!e && (!c->reply || c->reply->type == REDIS_REPLY_ERROR))
        e = (reply_errors(cl, err, err_len), HPS_EIO); /* the message, if any */
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
    cl_fini(&cl);
    return e;
}

hps_err_t hps_ddb_record_set(hps_ddb_table_t *t, const char *rec, char *err, size_t err_len)
{
    char name[HPS_DDB_KEY_MAX];
    cmdlist_t cl = {0};
    hps_err_t e = record_cmd(t, &cl, name, rec ? "SET" : "DEL", rec, err, err_len);
    cl_fini(&cl);
    return e;
}

hps_err_t hps_ddb_drop(hps_ddb_table_t *t, char *err, size_t err_len)
{
    cmdlist_t cl;
    hps_err_t e = cl_init(&cl, 2 * (size_t)t->np, 4 * (size_t)t->np);
    for (unsigned p = 0; !e && p < t->np; p++) {
        cl_begin(&cl, t, p, "UNLINK", 'v');
        cl_begin(&cl, t, p, "UNLINK", 't');
    }
    if (!e)
        e = hps_rcluster_exec(t->db->rc, cl.n, cl.c, err, err_len);
    if (!e)
        e = reply_errors(&cl, err, err_len);
    cl_fini(&cl);
    return e;
}
