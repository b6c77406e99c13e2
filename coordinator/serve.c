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
 *    one inserter thread that writes them to Redis, so that a slow or hung
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

/* Look up the keys that Redis lacked (found[i] == 0) in the persistent DB;
 * with [distributed_db] cache_missed_embeddings, set its hits aside for
 * the Redis inserter. */
static hps_err_t below_ddb(server_t *s, const coord_table_t *ct, size_t n, const void *keys,
                           float *values, uint8_t *found)
{
    coord_t *c = s->c;
    size_t m = 0, kb = c->key_bytes, vb = ct->dim * sizeof(float);
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
        rc = hps_pdb_lookup(ct->pdb, m, k, c->key_bytes, ct->dim, v, f, NULL, err, sizeof(err));
    if (rc < 0)
        HPS_WARN("table %s: persistent DB lookup of %zu keys: %s", ct->name, m, err);
    size_t hits = 0;
    for (size_t j = 0; !rc && j < m; j++)
        if (f[j]) {
            memcpy(values + at[j] * ct->dim, v + j * ct->dim, vb);
            found[at[j]] = 1;
            memmove(k + hits * kb, k + j * kb, kb); /* compact the hits for Redis */
            memmove(v + hits * ct->dim, v + j * ct->dim, vb);
            hits++;
        }
    if (!rc && hits && c->inserter) {
        set_aside(&s->ddb, ct, hits, k, v); /* takes k and v */
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
static hps_err_t as_stored(server_t *s, const coord_table_t *ct, size_t n, float *values,
                           const uint8_t *found)
{
    hps_dtype_t dt = (hps_dtype_t)ct->model->storage_type;
    if (dt == HPS_DTYPE_FP32)
        return 0;
    size_t rb = hps_dtype_row_bytes(dt, ct->dim);
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
        float *v = values + i * ct->dim;
        hps_err_t rc = hps_dtype_encode(dt, ct->dim, 1, v, s->row);
        if (rc == 0)
            rc = hps_dtype_decode(dt, ct->dim, 1, s->row, v);
        if (rc < 0)
            return rc;
    }
    return 0;
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
    if (ct->ddb) {
        if (hps_ddb_lookup(ct->ddb, n, keys, values, (bool *)found, NULL, err, sizeof(err)) < 0)
            ddb_warn(ct, "lookup (falling back)", n, err); /* what Redis answered stays found */
        if (ct->pdb)
            rc = below_ddb(s, ct, n, keys, values, found);
    } else if (ct->pdb) {
        rc = hps_pdb_lookup(ct->pdb, n, keys, c->key_bytes, ct->dim, values, (bool *)found, NULL,
                            err, sizeof(err));
        if (rc < 0)
            HPS_WARN("table %s: persistent DB lookup of %zu keys: %s", ct->name, n, err);
    } else
        return 0; /* no layer below the VDB: every key is missing */
    if (rc < 0)
        return rc;
    if (c->conf->volatile_db.cache_missed_embeddings)
        elevate_later(s, ct, n, keys, values, found); /* copies the fp32 rows */
    return as_stored(s, ct, n, values, found);
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
        hps_err_t rc = hps_ddb_insert(b->ct->ddb, b->n, b->keys, b->values, err, sizeof(err));
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
    for (unsigned i = 0; i < c->num_miss_threads; i++)
        pthread_join(c->miss_threads[i], NULL);
    c->num_miss_threads = 0;
    inserter_stop(c); /* after the serving threads: nothing is queued any more */
}
