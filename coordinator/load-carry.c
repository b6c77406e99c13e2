/*
 * load-carry.c -- a reload's volatile DB keeps the rows of the tables
 * whose model files did not change: after the new segment's table is
 * filled (from the files, where no persistent DB holds them), every row of
 * the serving segment's table of that name is written over it.
 *
 * Why: the serving segment holds the online updates its Kafka consumers
 * applied, and they committed those offsets when this image stopped them;
 * a table refilled from the files alone would serve the files' values for
 * good (a SIGHUP, or the load of another model, reverted every update of
 * an unchanged model: an audit's 100 of 100).  With a persistent DB that
 * holds the files the volatile DB is filled from it instead and the
 * volatile consumer replays from the persistent DB's offsets (kafka.c), so
 * those tables need no carry.
 *
 * "Did not change": the serving table was loaded from files of the same
 * identity (hps_shmdb_table_files_ident: the persistent DB's record of
 * them: paths, sizes, modification times, hashes of their ends), and has
 * the same dimension, key width and storage type.  Every row of the
 * serving table came from those files, from the layers below (misses, of
 * the same files), or from updates, so it is the value to serve; the rows
 * the fill wrote that the serving table lacks stay.  Nothing writes to
 * the serving segment meanwhile: its consumers are stopped, and the misses
 * answered for it (serve.c: prev_loop) are not inserted into it; so the
 * walk (hps_shmdb_iterate, which holds each partition's writer lock while
 * its rows are copied) delays no writer, and lookups take no lock.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hps/log.h"
#include "load-internal.h"

/* Rows written to the new table per upsert. */
#define CARRY_BATCH 4096

typedef struct carry {
    hps_shmdb_t *db; /* the new segment */
    uint32_t id;     /* the new table */
    uint32_t dim, key_bytes;
    size_t n;        /* rows in the batch */
    uint64_t copied; /* rows written */
    hps_err_t rc;    /* the first upsert error */
    uint8_t *keys;   /* (CARRY_BATCH) keys of key_bytes */
    float *values;   /* (CARRY_BATCH, dim) */
} carry_t;

static int flush(carry_t *k)
{
    if (k->n == 0)
        return 0;
    hps_err_t rc = hps_shmdb_upsert(k->db, k->id, k->n, k->keys, k->values, NULL);
    if (rc < 0) {
        k->rc = rc;
        return 1; /* stops the walk */
    }
    k->copied += k->n;
    k->n = 0;
    return 0;
}

/* hps_shmdb_row_fn: one serving row into the batch. */
static int take_row(void *ctx, uint64_t key, const float *value)
{
    carry_t *k = ctx;
    if (k->key_bytes == 8)
        memcpy(k->keys + k->n * 8, &key, 8);
    else {
        uint32_t k32 = (uint32_t)key;
        memcpy(k->keys + k->n * 4, &k32, 4);
    }
    memcpy(k->values + k->n * k->dim, value, k->dim * sizeof(float));
    return ++k->n == CARRY_BATCH ? flush(k) : 0;
}

/* The serving segment's table of ct's name when its rows may be carried:
 * same files identity (nonzero), dimension, key width and storage type. */
static bool carriable(hps_shmdb_t *serving, hps_shmdb_t *db, const coord_table_t *ct,
                      uint64_t files, uint32_t *ret_id)
{
    hps_table_info_t old, now;
    uint32_t id;
    if (!files || hps_shmdb_table_find(serving, ct->model->name, ct->name, &id) != 0 ||
        hps_shmdb_table_files_ident(serving, id) != files ||
        hps_shmdb_table_info(serving, id, &old) != 0 ||
        hps_shmdb_table_info(db, ct->vdb_id, &now) != 0 || old.dim != now.dim ||
        old.key_bytes != now.key_bytes || old.storage_type != now.storage_type)
        return false;
    *ret_id = id;
    return true;
}

int coord_load_carry(coord_t *c, const hps_conf_model_t *m, const model_state_t *st)
{
    hps_shmdb_t *serving = c->serving; /* set by the main thread: this one */
    for (uint32_t t = 0; t < m->num_tables; t++) {
        const coord_table_t *ct = coord_load_table(c, m, t);
        uint64_t files = coord_ident_hash(st->ident[t].files);
        hps_shmdb_table_set_files_ident(c->db, ct->vdb_id, files);
        uint32_t old;
        if (!serving || c->serving_restart || st->held[t] ||
            !carriable(serving, c->db, ct, files, &old))
            continue;
        carry_t k = {.db = c->db,
                     .id = ct->vdb_id,
                     .dim = ct->dim,
                     .key_bytes = c->key_bytes,
                     .keys = malloc((size_t)CARRY_BATCH * 8),
                     .values = malloc((size_t)CARRY_BATCH * ct->dim * sizeof(float))};
        double t0 = coord_load_now_s();
        hps_err_t rc = k.keys && k.values ? hps_shmdb_iterate(serving, old, take_row, &k) : -ENOMEM;
        if (rc == 0)
            flush(&k);
        rc = k.rc ? k.rc : rc > 0 ? 0 : rc;
        free(k.keys);
        free(k.values);
        if (rc < 0) {
            HPS_ERROR("model %s table %s: cannot carry the serving segment's rows over "
                      "(their online updates would be lost): %s",
                      m->name, ct->name, hps_strerror(rc));
            return HPS_EXIT_SEGMENT;
        }
        HPS_INFO("model %s table %s: its files did not change: %llu rows of the serving segment "
                 "carried over in %.2f s (the online updates applied to them stay)",
                 m->name, ct->name, (unsigned long long)k.copied, coord_load_now_s() - t0);
    }
    return 0;
}
