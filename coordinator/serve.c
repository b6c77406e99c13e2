/*
 * serve.c -- the miss service: threads that answer the workers' miss-queue
 * requests from the persistent DB, and, with cache_missed_embeddings, insert
 * what they found into the volatile DB so the next lookup hits there.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

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

static hps_err_t answer(void *ctx, uint32_t table, size_t n, const void *keys, float *values,
                        uint8_t *found)
{
    coord_t *c = ctx;
    if (table >= c->num_tables || !c->tables[table].model)
        return HPS_ENOTFOUND;
    const coord_table_t *ct = &c->tables[table];
    if (!ct->pdb)
        return 0; /* no layer below the VDB: every key is missing */
    char err[256];
    hps_err_t rc = hps_pdb_lookup(ct->pdb, n, keys, c->key_bytes, ct->dim, values, (bool *)found,
                                  NULL, err, sizeof(err));
    if (rc < 0) {
        HPS_WARN("table %s: persistent DB lookup of %zu keys: %s", ct->name, n, err);
        return rc;
    }
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
