/*
 * serve.c -- the miss service: threads that answer the workers' miss-queue
 * requests from the distributed DB (Redis) first, then from the persistent
 * DB for what Redis lacked; with [distributed_db] cache_missed_embeddings
 * the persistent-DB hits are inserted into Redis, and with [volatile_db]
 * cache_missed_embeddings everything found goes into the volatile DB, so the
 * next lookup hits higher up.  A Redis failure (a node down, a timeout) only
 * costs that layer: its keys are asked of the persistent DB.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coord.h"
#include "hps/log.h"

_Static_assert(sizeof(bool) == 1, "found masks are shared as bytes");

/* Insert the found rows of a request into the volatile DB. */
static void elevate(coord_t *c, const coord_table_t *ct, size_t n, const void *keys,
                    const float *values, const uint8_t *found)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        m += found[i];
    if (m == 0)
        return;
    void *k = malloc(m * c->key_bytes);
    float *v = malloc(m * ct->dim * sizeof(float));
    if (k && v) {
        size_t j = 0;
        for (size_t i = 0; i < n; i++) {
            if (!found[i])
                continue;
            memcpy((char *)k + j * c->key_bytes, (const char *)keys + i * c->key_bytes,
                   c->key_bytes);
            memcpy(v + j * ct->dim, values + i * ct->dim, ct->dim * sizeof(float));
            j++;
        }
        hps_err_t rc = hps_shmdb_upsert(c->db, ct->vdb_id, m, k, v, NULL);
        if (rc < 0)
            HPS_WARN("table %s: inserting %zu missed rows into the volatile DB: %s", ct->name, m,
                     hps_strerror(rc));
    }
    free(k);
    free(v);
}

/* Warn at most once a second per process (Redis outages are loud otherwise). */
static void ddb_warn(const coord_table_t *ct, const char *what, size_t n, const char *err)
{
    static _Atomic long last; /* a hint shared by the service threads */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long prev = last;
    if (ts.tv_sec != prev && atomic_compare_exchange_strong(&last, &prev, (long)ts.tv_sec))
        HPS_WARN("table %s: distributed DB %s of %zu keys: %s", ct->name, what, n, err);
}

/* Look up the keys that Redis lacked (found[i] == 0) in the persistent DB;
 * with [distributed_db] cache_missed_embeddings, insert its hits into Redis. */
static hps_err_t below_ddb(coord_t *c, const coord_table_t *ct, size_t n, const void *keys,
                           float *values, uint8_t *found)
{
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
    if (!rc && hits && c->conf->distributed_db.cache_missed_embeddings &&
        hps_ddb_insert(ct->ddb, hits, k, v, err, sizeof(err)) < 0)
        ddb_warn(ct, "insert (cache_missed_embeddings)", hits, err);
    free(k);
    free(v);
    free(f);
    free(at);
    return rc;
}

static hps_err_t answer(void *ctx, uint32_t table, size_t n, const void *keys, float *values,
                        uint8_t *found)
{
    coord_t *c = ctx;
    if (table >= c->num_tables || !c->tables[table].model)
        return HPS_ENOTFOUND;
    const coord_table_t *ct = &c->tables[table];
    char err[256];
    hps_err_t rc = 0;
    if (ct->ddb) {
        if (hps_ddb_lookup(ct->ddb, n, keys, values, (bool *)found, NULL, err, sizeof(err)) < 0)
            ddb_warn(ct, "lookup (falling back)", n, err); /* what Redis answered stays found */
        if (ct->pdb)
            rc = below_ddb(c, ct, n, keys, values, found);
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
        elevate(c, ct, n, keys, values, found);
    return 0;
}

static void *serve_loop(void *arg)
{
    coord_t *c = arg;
    while (!*c->stop) {
        hps_err_t rc = hps_shmdb_miss_serve(c->db, 100, answer, c, NULL);
        if (rc < 0) {
            HPS_ERROR("miss service stopped: %s", hps_strerror(rc));
            break;
        }
    }
    return NULL;
}

int coord_serve_start(coord_t *c)
{
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
}
