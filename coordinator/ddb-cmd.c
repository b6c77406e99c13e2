/*
 * ddb-cmd.c -- the distributed DB's command lists (the commands of one
 * hps_rcluster_exec() with their argument pools) and the bucketing of keys
 * by partition.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddb-internal.h"

/* ---- command lists ------------------------------------------------------ */

hps_err_t hps__ddb_cl_init(cmdlist_t *cl, size_t cmds, size_t args)
{
    *cl = (cmdlist_t){.cap = cmds, .acap = args};
    cl->c = calloc(cmds ? cmds : 1, sizeof(*cl->c));
    cl->argv = malloc((args ? args : 1) * sizeof(*cl->argv));
    cl->len = malloc((args ? args : 1) * sizeof(*cl->len));
    return cl->c && cl->argv && cl->len ? 0 : -ENOMEM;
}

void hps__ddb_cl_fini(cmdlist_t *cl)
{
    for (size_t i = 0; cl->c && i < cl->n; i++)
        if (cl->c[i].reply)
            freeReplyObject(cl->c[i].reply);
    free(cl->c);
    free(cl->argv);
    free(cl->len);
}

/* Start a command on partition p of t: verb + hash name. */
hps_rcluster_cmd_t *hps__ddb_cl_begin(cmdlist_t *cl, const hps_ddb_table_t *t, unsigned p,
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

void hps__ddb_cl_arg(cmdlist_t *cl, hps_rcluster_cmd_t *c, const void *p, size_t len)
{
    cl->argv[cl->na] = p;
    cl->len[cl->na++] = len;
    c->argc++;
}

/* ---- partitioning ------------------------------------------------------- */

uint64_t hps__ddb_key_at(const hps_ddb_table_t *t, const void *keys, size_t i)
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

unsigned hps_ddb_partition_of(const hps_ddb_table_t *t, const void *keys, size_t i)
{
    return (unsigned)(hps_rrxmrrxmsx_0(hps__ddb_key_at(t, keys, i)) % t->np);
}

/* Counting sort of key indices by partition: order (n), start (np + 1). */
hps_err_t hps__ddb_bucket(const hps_ddb_table_t *t, size_t n, const void *keys, size_t **ret_order,
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
        part[i] = hps_ddb_partition_of(t, keys, i);
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

size_t hps__ddb_num_batches(const hps_ddb_table_t *t, const size_t *start)
{
    size_t b = t->db->o.max_batch_size, nb = 0;
    for (unsigned p = 0; p < t->np; p++)
        nb += (start[p + 1] - start[p] + b - 1) / b;
    return nb;
}

/* First error reply of a command list, as HPS_EIO with its text. */
hps_err_t hps__ddb_reply_errors(const cmdlist_t *cl, char *err, size_t err_len)
{
    for (size_t i = 0; i < cl->n; i++)
        if (cl->c[i].reply && cl->c[i].reply->type == REDIS_REPLY_ERROR) {
            hps__ddb_set_err(err, err_len, cl->c[i].reply->str);
            return HPS_EIO;
        }
    return 0;
}
