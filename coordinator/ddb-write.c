/*
 * ddb-write.c -- the distributed DB's writes: insert (all rows, or only
 * the missing ones), erase, and the drop of a table's hashes.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddb-internal.h"

/* ---- insert / erase ----------------------------------------------------- */

/* The commands that write rows order[a, b) of partition p: one HSET of
 * them all, or (missing) one HSETNX each, which leaves a row that exists. */
static void insert_cmds(cmdlist_t *cl, hps_ddb_table_t *t, unsigned p, const void *keys,
                        const float *values, const size_t *order, size_t a, size_t b,
                        const int64_t *now, bool missing)
{
    size_t kb = t->key_bytes, vb = (size_t)t->dim * sizeof(float);
    hps__ddb_meta_cmds(cl, t, p, keys, order, a, b, now);
    hps_rcluster_cmd_t *c = missing ? NULL : hps__ddb_cl_begin(cl, t, p, "HSET", 'v');
    for (size_t j = a; j < b; j++) {
        if (missing)
            c = hps__ddb_cl_begin(cl, t, p, "HSETNX", 'v');
        hps__ddb_cl_arg(cl, c, (const char *)keys + order[j] * kb, kb);
        hps__ddb_cl_arg(cl, c, values + order[j] * t->dim, vb);
    }
    hps__ddb_cl_begin(cl, t, p, "HLEN", 'v');
}

/* Rows an insert wrote, from the replies of its value-hash commands (those
 * whose argv[1] is one of t->vkey): every field of an HSET answered with an
 * integer, each HSETNX answered 1.  Counted whether or not another command
 * failed: a batch refused on one partition wrote the others. */
static size_t rows_written(const hps_ddb_table_t *t, const cmdlist_t *cl)
{
    const char *v0 = t->vkey[0], *v1 = t->vkey[t->np];
    size_t w = 0;
    for (size_t i = 0; i < cl->n; i++) {
        const hps_rcluster_cmd_t *c = &cl->c[i];
        if (c->argc < 2 || c->argv[1] < v0 || c->argv[1] >= v1 || !c->reply ||
            c->reply->type != REDIS_REPLY_INTEGER)
            continue;
        if (c->argvlen[0] == 6 && !memcmp(c->argv[0], "HSETNX", 6))
            w += c->reply->integer == 1;
        else if (c->argvlen[0] == 4 && !memcmp(c->argv[0], "HSET", 4))
            w += (size_t)(c->argc - 2) / 2;
    }
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
            e = hps__ddb_resolve_overflow(t, p, err, err_len);
    free(over);
    return e;
}

static hps_err_t insert_rows(hps_ddb_table_t *t, size_t n, const void *keys, const float *values,
                             bool missing, char *err, size_t err_len)
{
    size_t *order, *start, B = t->db->o.max_batch_size, written = 0;
    if (n == 0)
        return 0;
    hps_err_t e = hps__ddb_bucket(t, n, keys, &order, &start);
    if (e)
        return e;
    size_t nb = hps__ddb_num_batches(t, start);
    int64_t now = (int64_t)time(NULL);
    cmdlist_t cl;
    if ((e = hps__ddb_cl_init(&cl, 2 * n + 3 * nb, 12 * n + 8 * nb)) == 0) {
        for (unsigned p = 0; p < t->np; p++)
            for (size_t a = start[p]; a < start[p + 1]; a += B)
                insert_cmds(&cl, t, p, keys, values, order, a,
                            a + B < start[p + 1] ? a + B : start[p + 1], &now, missing);
        e = hps_rcluster_exec(t->db->rc, cl.n, cl.c, err, err_len);
        written = rows_written(t, &cl); /* the replies there are, failed or not */
        if (!e)
            e = hps__ddb_reply_errors(&cl, err, err_len);
        if (!e)
            e = resolve_all(t, &cl, err, err_len);
    }
    hps__ddb_cl_fini(&cl);
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
    hps_err_t e = hps__ddb_bucket(t, n, keys, &order, &start);
    if (e)
        return e;
    size_t nb = hps__ddb_num_batches(t, start);
    cmdlist_t cl;
    if ((e = hps__ddb_cl_init(&cl, 2 * nb, 2 * n + 4 * nb)) == 0) {
        for (unsigned p = 0; p < t->np; p++)
            for (size_t a = start[p]; a < start[p + 1]; a += B)
                for (int k = 0; k < 2; k++) {
                    hps_rcluster_cmd_t *c = hps__ddb_cl_begin(&cl, t, p, "HDEL", k ? 't' : 'v');
                    for (size_t j = a; j < start[p + 1] && j < a + B; j++)
                        hps__ddb_cl_arg(&cl, c, (const char *)keys + order[j] * kb, kb);
                }
        e = hps_rcluster_exec(t->db->rc, cl.n, cl.c, err, err_len);
        if (!e)
            e = hps__ddb_reply_errors(&cl, err, err_len);
    }
    hps__ddb_cl_fini(&cl);
    free(order);
    free(start);
    return e;
}

hps_err_t hps_ddb_drop(hps_ddb_table_t *t, char *err, size_t err_len)
{
    cmdlist_t cl;
    hps_err_t e = hps__ddb_cl_init(&cl, 2 * (size_t)t->np, 4 * (size_t)t->np);
    for (unsigned p = 0; !e && p < t->np; p++) {
        hps__ddb_cl_begin(&cl, t, p, "UNLINK", 'v');
        hps__ddb_cl_begin(&cl, t, p, "UNLINK", 't');
    }
    if (!e)
        e = hps_rcluster_exec(t->db->rc, cl.n, cl.c, err, err_len);
    if (!e)
        e = hps__ddb_reply_errors(&cl, err, err_len);
    hps__ddb_cl_fini(&cl);
    return e;
}
