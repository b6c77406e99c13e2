/*
 * serve.c -- the miss service: threads that answer the workers' miss-queue
 * requests from the distributed DB (Redis) first, then from the persistent
 * DB for what Redis lacked.  A Redis failure (a node down, or silent past
 * [distributed_db] lookup_timeout_ms) only costs that layer: its keys are
 * asked of the persistent DB.
 *
 * cache_missed_embeddings inserts run after the answer, not on its path.
 * The lookup callback (answer()) only sets the rows to insert aside; the
 * answer is published (slot DONE) as soon as the callback returns; then
 *  - [volatile_db] cache_missed_embeddings: the serving thread upserts
 *    everything found into the volatile DB once hps_shmdb_miss_serve()
 *    returns, before it waits for the next requests (shared memory: no
 *    more than the copy, and the next lookup of those keys finds them);
 *  - [distributed_db] cache_missed_embeddings: the persistent-DB hits go to
 *    one inserter thread that writes those Redis still lacks (HSETNX: an
 *    online update that reached Redis after the persistent DB was read is
 *    not overwritten by the older row), so that a slow or hung
 *    node (writes have a 1 s deadline) never holds a serving thread.  Its
 *    queue is bounded (INS_QUEUE_BYTES); when full, rows are dropped and
 *    counted (they stay in the persistent DB and come back on the next
 *    miss).  Stopping the service drains it.
 *
 * Tables stored compactly ([model.<name>] storage_type fp16, bf16 or int8)
 * answer decode(encode(row)), the value the volatile DB will hold, not the
 * fp32 row of Redis or RocksDB: otherwise a key's first answer (through
 * this queue) would be its fp32 row and every later one (from the volatile
 * DB) the stored value, two answers for one key and one model version.
 * The copies set aside for the volatile DB and Redis keep the fp32 rows
 * (the volatile DB encodes them itself, and by the idempotence of the
 * conversions, include/hps/dtype.h, to the same bytes; Redis holds fp32).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coord.h"
#include "hps/dtype.h"
#include "hps/log.h"
#include "kafka-coord.h"

_Static_assert(sizeof(bool) == 1, "found masks are shared as bytes");

#define INS_QUEUE_BYTES (64u << 20) /* most bytes of rows waiting for Redis */

/* Rows of one table waiting for an insert (keys, then values, both owned). */
typedef struct ins_batch {
    struct ins_batch *next;
    const coord_table_t *ct;
    size_t n;
    void *keys;    /* (n) keys */
    float *values; /* (n, dim) */
} ins_batch_t;

typedef struct ins_list {
    ins_batch_t *head, *tail;
} ins_list_t;

/* The Redis inserter (distributed_db cache_missed_embeddings). */
struct coord_inserter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ins_list_t q;
    size_t bytes; /* queued */
    bool stop;
    pthread_t thread;
    uint64_t inserted, dropped, failed; /* rows; under mu */
};

/* One serving thread: the rows its last hps_shmdb_miss_serve() set aside. */
typedef struct server {
    coord_t *c;
    ins_list_t vdb, ddb;
    uint8_t *row;   /* one stored row, for as_stored(); grown to the largest row seen */
    size_t row_cap; /* bytes of row */
} server_t;

static size_t batch_bytes(const coord_t *c, const ins_batch_t *b)
{
    return b->n * (c->key_bytes + b->ct->dim * sizeof(float)) + sizeof(*b);
}

static void batch_free(ins_batch_t *b)
{
    if (!b)
        return;
    free(b->keys);
    free(b->values);
    free(b);
}

static void list_push(ins_list_t *l, ins_batch_t *b)
{
    b->next = NULL;
    if (l->tail)
        l->tail->next = b;
    else
        l->head = b;
    l->tail = b;
}

/* Set aside m rows (keys k, values v: malloc'd, taken over) for l. */
static void set_aside(ins_list_t *l, const coord_table_t *ct, size_t m, void *k, float *v)
{
    ins_batch_t *b = malloc(sizeof(*b));
    if (!b) {
        free(k);
        free(v);
        return;
    }
    *b = (ins_batch_t){.ct = ct, .n = m, .keys = k, .values = v};
    list_push(l, b);
}

/* Warn at most once a second per call site (Redis outages are loud otherwise). */
static bool warn_now(_Atomic long *last)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long prev = *last;
    return ts.tv_sec != prev && atomic_compare_exchange_strong(last, &prev, (long)ts.tv_sec);
}

/* At most once a second per table: with one timestamp for all of them, a
 * failure of several tables named only the one that warned first. */
static void ddb_warn(const coord_table_t *ct, const char *what, size_t n, const char *err)
{
    /* The table's timestamp is the one field written while serving; the
     * tables themselves are calloc'd (load.c), not const objects. */
    if (warn_now(&((coord_table_t *)ct)->ddb_warned_s))
        HPS_WARN("model %s table %s: distributed DB %s of %zu keys: %s", ct->model->name, ct->name,
                 what, n, err);
}

/* Copy the found rows of a request, to be inserted into the volatile DB
 * after the answer. */
static void elevate_later(server_t *s, const coord_table_t *ct, size_t n, const void *keys,
                          const float *values, const uint8_t *found)
{
    size_t m = 0, kb = s->c->key_bytes;
    for (size_t i = 0; i < n; i++)
        m += found[i];
    if (m == 0)
        return;
    char *k = malloc(m * kb);
    float *v = malloc(m * ct->dim * sizeof(float));
    if (!k || !v) {
        free(k);
        free(v);
        return;
    }
    for (size_t i = 0, j = 0; i < n; i++) {
        if (!found[i])
            continue;
        memcpy(k + j * kb, (const char *)keys + i * kb, kb);
        memcpy(v + j * ct->dim, values + i * ct->dim, ct->dim * sizeof(float));
        j++;
    }
    set_aside(&s->vdb, ct, m, k, v);
}

/* Look up the keys that Redis lacked (found[i] == 0) in pdb, a table of
 * dim floats named name (for the log); with aside (ct, when [distributed_db]
 * cache_missed_embeddings is on), set its hits aside for the Redis
 * inserter. */
static hps_err_t below_ddb(server_t *s, hps_pdb_table_t *pdb, uint32_t dim, const char *name,
                           const coord_table_t *aside, size_t n, const void *keys, float *values,
                           uint8_t *found)
{
    coord_t *c = s->c;
    size_t m = 0, kb = c->key_bytes, vb = dim * sizeof(float);
    for (size_t i = 0; i < n; i++)
        m += !found[i];
    if (m == 0)
        return 0;
    char *k = malloc(m * kb), err[256];
    float *v = malloc(m * vb);
    bool *f = malloc(m);
    size_t *at = malloc(m * sizeof(size_t));
    hps_err_t rc = k && v && f && at ? 0 : -ENOMEM;
    for (size_t i = 0, j = 0; !rc && i < n; i++)
        if (!found[i]) {
            memcpy(k + j * kb, (const char *)keys + i * kb, kb);
            at[j++] = i;
        }
    if (!rc)
        rc = hps_pdb_lookup(pdb, m, k, c->key_bytes, dim, v, f, NULL, err, sizeof(err));
    if (rc < 0)
        HPS_WARN("table %s: persistent DB lookup of %zu keys: %s", name, m, err);
    size_t hits = 0;
    for (size_t j = 0; !rc && j < m; j++)
        if (f[j]) {
            memcpy(values + at[j] * dim, v + j * dim, vb);
            found[at[j]] = 1;
            memmove(k + hits * kb, k + j * kb, kb); /* compact the hits for Redis */
            memmove(v + hits * dim, v + j * dim, vb);
            hits++;
        }
    if (!rc && hits && aside && c->inserter) {
        set_aside(&s->ddb, aside, hits, k, v); /* takes k and v */
        k = NULL;
        v = NULL;
    }
    free(k);
    free(v);
    free(f);
    free(at);
    return rc;
}

/*
 * Replace the found rows of an answer by the value their table stores:
 * decode(encode(row)) through the thread's one-row scratch, which grows
 * only when a table's stored row is larger than any seen before (no
 * allocation per row or per request once it has).  fp32 is the identity
 * and is left alone.
 */
static hps_err_t as_stored(server_t *s, hps_dtype_t dt, uint32_t dim, size_t n, float *values,
                           const uint8_t *found)
{
    if (dt == HPS_DTYPE_FP32)
        return 0;
    size_t rb = hps_dtype_row_bytes(dt, dim);
    if (rb > s->row_cap) {
        uint8_t *p = realloc(s->row, rb);
        if (!p)
            return -ENOMEM;
        s->row = p;
        s->row_cap = rb;
    }
    for (size_t i = 0; i < n; i++) {
        if (!found[i])
            continue;
        float *v = values + i * dim;
        hps_err_t rc = hps_dtype_encode(dt, dim, 1, v, s->row);
        if (rc == 0)
            rc = hps_dtype_decode(dt, dim, 1, s->row, v);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Whether a layer below ct's volatile DB is behind its consumer
 * (coord_kafka_behind). */
static bool layers_behind(coord_t *c, const coord_table_t *ct)
{
    return (ct->ddb && coord_kafka_behind(c, true)) || (ct->pdb && coord_kafka_behind(c, false));
}

static hps_err_t answer(void *ctx, uint32_t table, size_t n, const void *keys, float *values,
                        uint8_t *found)
{
    server_t *s = ctx;
    coord_t *c = s->c;
    if (table >= c->num_tables || !c->tables[table].model)
        return HPS_ENOTFOUND;
    const coord_table_t *ct = &c->tables[table];
    char err[256];
    hps_err_t rc = 0;
    /* rows of a layer behind the volatile DB's consumer are answered, not
     * kept there (checked before and after reading them) */
    bool keep = c->conf->volatile_db.cache_missed_embeddings && !layers_behind(c, ct);
    if (ct->ddb) {
        if (hps_ddb_lookup(ct->ddb, n, keys, values, (bool *)found, NULL, err, sizeof(err)) < 0)
            ddb_warn(ct, "lookup (falling back)", n, err); /* what Redis answered stays found */
        if (ct->pdb)
            rc = below_ddb(s, ct->pdb, ct->dim, ct->name, ct, n, keys, values, found);
    } else if (ct->pdb) {
        rc = hps_pdb_lookup(ct->pdb, n, keys, c->key_bytes, ct->dim, values, (bool *)found, NULL,
                            err, sizeof(err));
        if (rc < 0)
            HPS_WARN("table %s: persistent DB lookup of %zu keys: %s", ct->name, n, err);
    } else
        return 0; /* no layer below the VDB: every key is missing */
    if (rc < 0)
        return rc;
    if (keep && !layers_behind(c, ct))
        elevate_later(s, ct, n, keys, values, found); /* copies the fp32 rows */
    return as_stored(s, ct->model->storage_type, ct->dim, n, values, found);
}

/* ---- after the answers ---------------------------------------------------- */

/* Upsert the rows set aside for the volatile DB. */
static void flush_vdb(server_t *s)
{
    ins_batch_t *b = s->vdb.head;
    s->vdb = (ins_list_t){0};
    while (b) {
        ins_batch_t *next = b->next;
        hps_err_t rc = hps_shmdb_upsert(s->c->db, b->ct->vdb_id, b->n, b->keys, b->values, NULL);
        if (rc < 0)
            HPS_WARN("table %s: inserting %zu missed rows into the volatile DB: %s", b->ct->name,
                     b->n, hps_strerror(rc));
        batch_free(b);
        b = next;
    }
}

/* Hand the rows set aside for Redis to the inserter (dropped when its queue
 * is full). */
static void flush_ddb(server_t *s)
{
    static _Atomic long last;
    struct coord_inserter *in = s->c->inserter;
    ins_batch_t *b = s->ddb.head;
    size_t dropped = 0;
    s->ddb = (ins_list_t){0};
    if (!b)
        return;
    pthread_mutex_lock(&in->mu);
    while (b) {
        ins_batch_t *next = b->next;
        size_t bytes = batch_bytes(s->c, b);
        if (in->bytes + bytes <= INS_QUEUE_BYTES) {
            list_push(&in->q, b);
            in->bytes += bytes;
        } else {
            in->dropped += b->n;
            dropped += b->n;
            batch_free(b);
        }
        b = next;
    }
    pthread_cond_signal(&in->cv);
    pthread_mutex_unlock(&in->mu);
    if (dropped && warn_now(&last))
        HPS_WARN("distributed DB cache_missed_embeddings: the insert queue is full (%u MiB), "
                 "%zu rows not inserted into Redis",
                 INS_QUEUE_BYTES >> 20, dropped);
}

static void *insert_loop(void *arg)
{
    coord_t *c = arg;
    struct coord_inserter *in = c->inserter;
    pthread_mutex_lock(&in->mu);
    for (;;) {
        while (!in->q.head && !in->stop)
            pthread_cond_wait(&in->cv, &in->mu);
        ins_batch_t *b = in->q.head;
        if (!b)
            break; /* stopping and drained */
        in->q.head = b->next;
        if (!in->q.head)
            in->q.tail = NULL;
        in->bytes -= batch_bytes(c, b);
        pthread_mutex_unlock(&in->mu);
        char err[256];
        /* HSETNX: an update that reached Redis since the read stays */
        hps_err_t rc =
            hps_ddb_insert_missing(b->ct->ddb, b->n, b->keys, b->values, err, sizeof(err));
        if (rc < 0)
            ddb_warn(b->ct, "insert (cache_missed_embeddings)", b->n, err);
        pthread_mutex_lock(&in->mu);
        if (rc < 0)
            in->failed += b->n;
        else
            in->inserted += b->n;
        batch_free(b);
    }
    pthread_mutex_unlock(&in->mu);
    return NULL;
}

static void *serve_loop(void *arg)
{
    server_t s = {.c = arg};
    while (!atomic_load_explicit(s.c->stop, memory_order_acquire)) {
        hps_err_t rc = hps_shmdb_miss_serve(s.c->db, 100, answer, &s, NULL);
        /* every request it took is answered (DONE): now the inserts */
        flush_vdb(&s);
        flush_ddb(&s);
        if (rc < 0) {
            HPS_ERROR("miss service stopped: %s", hps_strerror(rc));
            break;
        }
    }
    free(s.row);
    return NULL;
}

static int inserter_start(coord_t *c)
{
    if (!c->ddb || !c->conf->distributed_db.cache_missed_embeddings)
        return 0;
    struct coord_inserter *in = calloc(1, sizeof(*in));
    if (!in)
        return HPS_EXIT_RUNTIME;
    pthread_mutex_init(&in->mu, NULL);
    pthread_cond_init(&in->cv, NULL);
    c->inserter = in;
    if (pthread_create(&in->thread, NULL, insert_loop, c) != 0) {
        HPS_ERROR("cannot start the distributed DB inserter thread");
        pthread_mutex_destroy(&in->mu);
        pthread_cond_destroy(&in->cv);
        free(in);
        c->inserter = NULL;
        return HPS_EXIT_RUNTIME;
    }
    return 0;
}

/* Drain the queue into Redis, stop the thread. */
static void inserter_stop(coord_t *c)
{
    struct coord_inserter *in = c->inserter;
    if (!in)
        return;
    pthread_mutex_lock(&in->mu);
    in->stop = true;
    pthread_cond_signal(&in->cv);
    pthread_mutex_unlock(&in->mu);
    pthread_join(in->thread, NULL);
    if (in->dropped || in->failed)
        HPS_INFO("distributed DB cache_missed_embeddings: %llu rows inserted into Redis, %llu "
                 "dropped (queue full), %llu failed",
                 (unsigned long long)in->inserted, (unsigned long long)in->dropped,
                 (unsigned long long)in->failed);
    pthread_mutex_destroy(&in->mu);
    pthread_cond_destroy(&in->cv);
    free(in);
    c->inserter = NULL;
}

/* ---- the serving segment of a reload ------------------------------------- */

/*
 * While a reload builds the next segment, the workers go on serving from
 * the segment that served (c->serving), and its misses (keys outside shared
 * memory) are answered here, from the persistent DB's column families of
 * the version that serves.  They are held (hps_pdb_table_hold) before the
 * build drops and re-ingests any of them, so they read the rows that
 * version was built from, with the updates applied before the reload, until
 * the workers switch: a request is answered wholly from the serving version
 * (issue 20) instead of with its tables' defaults.  Redis is asked first,
 * as by the miss service, for each table until the build begins to replace
 * that table's rows there (coord_prev_ddb_replacing: Redis has one copy of
 * a table, rewritten in place): its answers are kept only when the flag is
 * still clear after the lookup, so no row of the new version answers the
 * serving one.  Tables the reload leaves alone (their files unchanged)
 * are thus answered from Redis throughout, with or without a persistent
 * DB.  Found rows are not inserted into the serving segment (the reload
 * replaces it) nor into Redis.
 */
typedef struct prev_table {
    hps_pdb_table_t *pdb; /* held; NULL: no column family */
    hps_ddb_table_t *ddb; /* NULL: Redis not asked (none, or the reload changes the dimension) */
    /* Set (seq_cst) by coord_prev_ddb_replacing before the build drops or
     * rewrites the table's Redis rows; read before and after each Redis
     * lookup.  Never cleared. */
    atomic_bool ddb_replaced;
    uint32_t dim;
    uint32_t key_bytes;
    hps_dtype_t storage_type;
    char model[HPS_SHMDB_NAME_MAX + 1], table[HPS_SHMDB_NAME_MAX + 1];
} prev_table_t;

struct coord_prev {
    hps_shmdb_t *db; /* c->serving; detached only after coord_prev_stop() */
    uint32_t num_tables;
    prev_table_t *tables; /* by the serving segment's table id; read-only while threads run */
    atomic_bool stop;
    pthread_t threads[HPS_COORD_MISS_THREADS];
    unsigned num_threads;
    _Atomic long warned_s; /* warn_now(): persistent DB failures */
    /* The serving configuration's persistent DB, opened read-only, where
     * the reload moved to another path (prev_open_old); closed by
     * prev_free after the tables' holds.  NULL: the tables are c->pdb's. */
    hps_pdb_t *old_pdb;
};

static hps_err_t answer_prev(void *ctx, uint32_t table, size_t n, const void *keys, float *values,
                             uint8_t *found)
{
    server_t *s = ctx;
    struct coord_prev *p = s->c->prev;
    if (table >= p->num_tables)
        return HPS_ENOTFOUND;
    prev_table_t *pt = &p->tables[table];
    char err[256];
    hps_err_t rc = 0;
    if (pt->ddb && !atomic_load(&pt->ddb_replaced)) {
        if (hps_ddb_lookup(pt->ddb, n, keys, values, (bool *)found, NULL, err, sizeof(err)) < 0 &&
            warn_now(&p->warned_s))
            HPS_WARN("reload: distributed DB lookup of %zu keys for the serving segment "
                     "(falling back): %s",
                     n, err);
        if (atomic_load(&pt->ddb_replaced))
            memset(found, 0, n); /* replaced meanwhile: they may be the new version's rows */
        if (pt->pdb)
            rc = below_ddb(s, pt->pdb, pt->dim, pt->table, NULL, n, keys, values, found);
    } else if (pt->pdb) {
        rc = hps_pdb_lookup(pt->pdb, n, keys, pt->key_bytes, pt->dim, values, (bool *)found, NULL,
                            err, sizeof(err));
    } else {
        return 0; /* every key missing: the table's default */
    }
    if (rc < 0) {
        if (warn_now(&p->warned_s))
            HPS_WARN("reload: persistent DB lookup of %zu keys for the serving segment: %s", n,
                     err);
        return rc;
    }
    return as_stored(s, pt->storage_type, pt->dim, n, values, found);
}

static void *prev_loop(void *arg)
{
    server_t s = {.c = arg};
    struct coord_prev *p = s.c->prev;
    while (!atomic_load_explicit(&p->stop, memory_order_acquire)) {
        hps_err_t rc = hps_shmdb_miss_serve(p->db, 100, answer_prev, &s, NULL);
        if (rc < 0) {
            HPS_WARN("reload: the serving segment's miss service stopped: %s", hps_strerror(rc));
            break;
        }
    }
    free(s.row);
    return NULL;
}

/* The serving configuration (c->prev_text, parsed), or NULL. */
static hps_conf_t *prev_conf(const coord_t *c)
{
    hps_conf_t *prev = NULL;
    if (!c->prev_text || hps_conf_load_string(c->prev_text, "(serving)", &prev, NULL, 0) < 0)
        return NULL;
    return prev;
}

/* Whether the persistent DB this image opened is the one the serving
 * version was built from and read (same type and path in the serving
 * configuration's text): the column families of another would hold other
 * rows under the same names. */
static bool prev_same_pdb(const coord_t *c, const hps_conf_t *prev)
{
    if (!prev)
        return false;
    const hps_conf_persistent_db_t *a = &prev->persistent_db, *b = &c->conf->persistent_db;
    return a->type == b->type && a->path && b->path && strcmp(a->path, b->path) == 0;
}

/* A reload that moves the persistent DB ([persistent_db] path changed, or
 * the type changed to none): the serving configuration's RocksDB, opened
 * read-only (no lock: nobody writes it any more, and a coordinator that
 * does would have renewed its contents token), when its contents token is
 * the one the serving segment was built from; NULL otherwise (logged).
 * Its rows answer the serving segment's misses while the new one builds,
 * as c->pdb's do where the path stays.  prev: the serving configuration. */
static hps_pdb_t *prev_open_old(const hps_conf_t *prev, uint64_t token)
{
    if (!prev)
        return NULL;
    const hps_conf_persistent_db_t *a = &prev->persistent_db;
    hps_pdb_t *old = NULL;
    char err[512] = "";
    if (a->type == HPS_CONF_PDB_ROCKS_DB && a->path && token) {
        hps_pdb_opts_t o;
        hps_pdb_opts_init(&o);
        o.read_only = true;
        o.num_threads = (unsigned)a->num_threads;
        o.max_batch_size = (size_t)a->max_batch_size;
        if (hps_pdb_open(a->path, &o, &old, err, sizeof(err)) < 0)
            old = NULL;
        else if (coord_pdb_token_of(old) != token) {
            snprintf(err, sizeof(err),
                     "it holds other rows than the serving segment was built "
                     "from (its contents token differs)");
            hps_pdb_close(old, NULL, 0);
            old = NULL;
        }
        if (old)
            HPS_INFO("reload: the persistent DB moves; the serving version's misses are read "
                     "from its previous one, %s, opened read-only",
                     a->path);
        else
            HPS_WARN("reload: the persistent DB moves, and its previous one, %s, cannot answer "
                     "the serving segment's misses: %s",
                     a->path, err);
    }
    return old;
}

/* No service for the serving segment after all (or no more): RELOADING,
 * and what its workers asked meanwhile gets its defaults at once.  A no-op
 * unless the previous image handed the segment over RELOADING_SERVED. */
static void prev_give_up(coord_t *c)
{
    if (!atomic_exchange(&c->prev_answering, false))
        return;
    pthread_mutex_lock(&c->serving_lock);
    if (c->serving) {
        hps_shmdb_set_coord_state(c->serving, HPS_COORD_RELOADING);
        hps_shmdb_miss_drop_pending(c->serving);
    }
    pthread_mutex_unlock(&c->serving_lock);
}

static void prev_free(struct coord_prev *p)
{
    for (uint32_t i = 0; i < p->num_tables; i++)
        hps_pdb_table_release(p->tables[i].pdb);
    free(p->tables);
    if (p->old_pdb)
        hps_pdb_close(p->old_pdb, NULL, 0);
    free(p);
}

/* The distributed DB's handle for table ti of the serving segment db, when
 * Redis may answer it: Redis's record of the table is the one db was built
 * beside (its ddb ident; a build killed or failed after it rewrote the
 * table, or a table refilled without a record, holds other rows, which
 * would mix versions in one answer), and this configuration gives the
 * table the same dimension and key width (else its rows are replaced, and
 * the load's handle of that name must be the new shape's: hps_ddb_table
 * refuses a second shape of one name). */
static hps_ddb_table_t *prev_ddb_table(const coord_t *c, hps_shmdb_t *db,
                                       const hps_table_info_t *ti)
{
    uint64_t built = hps_shmdb_table_ddb_ident(db, ti->id);
    if (!c->ddb || !built || ti->key_bytes != (c->conf->hps.supportlonglong ? 8u : 4u))
        return NULL;
    for (size_t i = 0; i < c->conf->num_models; i++) {
        const hps_conf_model_t *m = &c->conf->models[i];
        for (size_t t = 0; strcmp(m->name, ti->model) == 0 && t < m->num_tables; t++)
            if (strcmp(m->embedding_table_names[t], ti->table) == 0 &&
                (uint32_t)m->embedding_vecsize_per_table[t] != ti->dim)
                return NULL;
    }
    hps_ddb_table_t *t = NULL;
    char rec[1024], err[256];
    if (hps_ddb_table(c->ddb, ti->model, ti->table, ti->dim, ti->key_bytes, &t) != 0 ||
        hps_ddb_record_get(t, rec, sizeof(rec), err, sizeof(err)) != 0 ||
        coord_ident_hash(rec) != built)
        return NULL;
    return t;
}

/* Hold the column families of db's tables in pdb (c->pdb, or the previous
 * one of prev_open_old, which this takes whatever it returns; NULL: none)
 * and take the distributed DB's handles (c->ddb, when open), and start the
 * threads that answer db's misses from them; true when they run (db is
 * then marked RELOADING_SERVED).  what: "reload" or "restart", for the
 * log. */
static bool prev_run(coord_t *c, hps_shmdb_t *db, hps_pdb_t *pdb, const char *what)
{
    struct coord_prev *p = calloc(1, sizeof(*p));
    uint32_t n = hps_shmdb_table_count(db), answered = 0, from_pdb = 0, from_ddb = 0;
    if (!p || !(p->tables = calloc(n ? n : 1, sizeof(*p->tables)))) {
        free(p);
        if (pdb && pdb != c->pdb)
            hps_pdb_close(pdb, NULL, 0);
        return false;
    }
    p->db = db;
    p->old_pdb = pdb != c->pdb ? pdb : NULL;
    p->num_tables = n;
    for (uint32_t i = 0; i < n; i++) {
        hps_table_info_t ti;
        hps_pdb_table_t *t = NULL;
        if (hps_shmdb_table_info(db, i, &ti) < 0)
            continue;
        if (pdb && hps_pdb_table(pdb, ti.model, ti.table, false, &t, NULL, 0) == 0)
            hps_pdb_table_hold(t);
        else
            t = NULL;
        prev_table_t *pt = &p->tables[i];
        pt->pdb = t;
        pt->ddb = prev_ddb_table(c, db, &ti);
        pt->dim = ti.dim;
        pt->key_bytes = ti.key_bytes;
        pt->storage_type = ti.storage_type;
        snprintf(pt->model, sizeof(pt->model), "%s", ti.model);
        snprintf(pt->table, sizeof(pt->table), "%s", ti.table);
        from_pdb += pt->pdb != NULL;
        from_ddb += pt->ddb != NULL;
        answered += pt->pdb || pt->ddb;
    }
    c->prev = p;
    for (unsigned i = 0; answered && i < HPS_COORD_MISS_THREADS; i++) {
        if (pthread_create(&p->threads[i], NULL, prev_loop, c) != 0)
            break;
        /* Serving, not loading: on every CPU the workers have, not on the
         * load_cpu_share the loader threads are confined to (cpus.c). */
        if (c->cpus_confined)
            pthread_setaffinity_np(p->threads[i], sizeof(c->cpus_all), &c->cpus_all);
        p->num_threads++;
    }
    if (!p->num_threads) {
        c->prev = NULL;
        prev_free(p);
        return false;
    }
    /* Before the state: the heartbeat thread leaves its requests to us. */
    atomic_store(&c->prev_answering, true);
    hps_shmdb_set_coord_state(db, HPS_COORD_RELOADING_SERVED);
    char ddb_part[160] = "";
    if (from_ddb)
        snprintf(ddb_part, sizeof(ddb_part),
                 "%s the distributed DB (%u of %u table%s, each until the build replaces its rows "
                 "there)",
                 from_pdb ? ", after" : "", from_ddb, n, n == 1 ? "" : "s");
    if (from_pdb)
        HPS_INFO("%s: the serving segment's misses are answered from the persistent DB (%u of %u "
                 "table%s)%s while the new one builds",
                 what, from_pdb, n, n == 1 ? "" : "s", ddb_part);
    else
        HPS_INFO("%s: the serving segment's misses are answered from%s while the new one builds",
                 what, ddb_part);
    return true;
}

void coord_prev_ddb_replacing(coord_t *c, const char *model, const char *table)
{
    struct coord_prev *p = c->prev;
    for (uint32_t i = 0; p && i < p->num_tables; i++)
        if (strcmp(p->tables[i].model, model) == 0 && strcmp(p->tables[i].table, table) == 0)
            atomic_store(&p->tables[i].ddb_replaced, true);
}

int coord_prev_start(coord_t *c)
{
    hps_shmdb_t *db = c->serving;
    uint64_t token = db ? hps_shmdb_pdb_token(db) : 0;
    hps_conf_t *prev = db ? prev_conf(c) : NULL;
    bool same = db && c->pdb && (prev_same_pdb(c, prev) || (token && token == coord_pdb_token(c)));
    hps_pdb_t *pdb = same ? c->pdb : NULL;
    if (db && !same && !c->prev)
        pdb = prev_open_old(prev, token);
    hps_conf_free(prev);
    if (!db || (!pdb && !c->ddb) || c->prev || !prev_run(c, db, pdb, "reload"))
        prev_give_up(c); /* the reload goes on; the serving segment's misses get defaults */
    return 0;
}

bool coord_prev_restart(coord_t *c, hps_shmdb_t *db)
{
    uint64_t token = hps_shmdb_pdb_token(db);
    hps_pdb_t *pdb = c->pdb;
    if ((!pdb && !c->ddb) || c->prev || c->restart_tried)
        return false;
    c->restart_tried = true; /* one verdict (and log line) per start */
    if (pdb && (!token || token != coord_pdb_token(c))) {
        HPS_INFO("restart: the persistent DB holds other rows than the serving segment was "
                 "built from (or its build predates the record): its workers answer keys "
                 "outside shared memory %s until the new segment is published",
                 c->ddb ? "from the distributed DB only" : "with defaults");
        pdb = NULL;
        if (!c->ddb)
            return false;
    }
    pthread_mutex_lock(&c->serving_lock);
    c->serving = db;
    pthread_mutex_unlock(&c->serving_lock);
    /* What the dead coordinator was answering is asked again, for us. */
    size_t requeued = 0;
    hps_shmdb_miss_reap(db, true, &requeued);
    if (requeued)
        HPS_INFO("restart: %zu miss-queue slot%s the previous coordinator held reclaimed "
                 "(requests still waited for are answered now)",
                 requeued, requeued == 1 ? "" : "s");
    if (!prev_run(c, db, pdb, "restart")) {
        pthread_mutex_lock(&c->serving_lock);
        c->serving = NULL;
        pthread_mutex_unlock(&c->serving_lock);
        return false;
    }
    hps_shmdb_heartbeat(db); /* this process is its coordinator from now on */
    c->serving_restart = true;
    return true;
}

void coord_prev_drain(coord_t *c)
{
    /* Workers move within a maintenance round (50 ms), or after their
     * attach back-off (at most 1 s: a segment that refused them, e.g. its
     * process table full); the bound is for a process that never does (a
     * tool attached by hand). */
    struct coord_prev *p = c->prev;
    struct timespec ts = {.tv_nsec = 5 * 1000000L};
    for (long waited = 0; p && hps_shmdb_other_procs(p->db) > 0 && waited < 3000; waited += 5)
        nanosleep(&ts, NULL);
}

/* Stop answering the serving segment.  keep: its misses are answered
 * again soon (a fallback, or this process adopting the segment): it stays
 * RELOADING_SERVED with its requests pending (prev_answering stays set, so
 * the heartbeat thread leaves them too). */
static void prev_stop(coord_t *c, bool keep)
{
    struct coord_prev *p = c->prev;
    if (!p) {
        if (!keep)           /* else it goes on as it is */
            prev_give_up(c); /* handed over RELOADING_SERVED, and stopped before answering */
        return;
    }
    /* Workers stop asking (they read the state at their next check), the
     * threads stop, and what was asked meanwhile gets its defaults at once. */
    if (!keep)
        hps_shmdb_set_coord_state(p->db, HPS_COORD_RELOADING);
    atomic_store_explicit(&p->stop, true, memory_order_release);
    hps_shmdb_miss_wake(p->db);
    for (unsigned i = 0; i < p->num_threads; i++)
        pthread_join(p->threads[i], NULL);
    if (!keep) {
        atomic_store(&c->prev_answering, false);
        hps_shmdb_miss_drop_pending(p->db);
    }
    c->prev = NULL;
    prev_free(p); /* the last holds: dropped column families are deleted */
}

void coord_prev_stop(coord_t *c)
{
    prev_stop(c, c->fallback_handover);
}

void coord_prev_adopt(coord_t *c)
{
    prev_stop(c, true);
    pthread_mutex_lock(&c->serving_lock);
    c->db = c->serving;
    c->serving = NULL;
    pthread_mutex_unlock(&c->serving_lock);
    atomic_store(&c->prev_answering, false); /* nothing held for the heartbeat thread */
    __atomic_store_n(&c->beat_db, c->db, __ATOMIC_RELEASE);
}

int coord_serve_start(coord_t *c)
{
    if (inserter_start(c))
        return HPS_EXIT_RUNTIME;
    for (unsigned i = 0; i < HPS_COORD_MISS_THREADS; i++) {
        if (pthread_create(&c->miss_threads[i], NULL, serve_loop, c) != 0) {
            HPS_ERROR("cannot start the miss service threads");
            return HPS_EXIT_RUNTIME;
        }
        c->num_miss_threads++;
    }
    return 0;
}

void coord_serve_stop(coord_t *c)
{
    coord_prev_stop(c); /* a build that failed or was stopped */
    if (c->num_miss_threads && c->db)
        hps_shmdb_miss_wake(c->db); /* they see the stop flag now, not after their wait */
    for (unsigned i = 0; i < c->num_miss_threads; i++)
        pthread_join(c->miss_threads[i], NULL);
    c->num_miss_threads = 0;
    inserter_stop(c); /* after the serving threads: nothing is queued any more */
}
