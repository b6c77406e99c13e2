/*
 * ddb-evict.c -- overflow resolution of the distributed DB: a
 * partition over its overflow_margin loses its lowest-scored rows, by
 * overflow_policy, down to overflow_resolution_target of the margin.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddb-internal.h"

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
    hps_err_t e = hps__ddb_cl_init(&cl, 2 * nb, 2 * count + 4 * nb);
    for (size_t a = 0; !e && a < count; a += B)
        for (int k = 0; k < 2; k++) {
            hps_rcluster_cmd_t *c = hps__ddb_cl_begin(&cl, t, p, "HDEL", k ? 't' : 'v');
            for (size_t j = a; j < count && j < a + B; j++)
                hps__ddb_cl_arg(&cl, c, vs[j].f, vs[j].len);
        }
    if (!e)
        e = hps_rcluster_exec(t->db->rc, cl.n, cl.c, err, err_len);
    for (size_t i = 0; !e && i < cl.n; i += 2)
        if (cl.c[i].reply->type == REDIS_REPLY_INTEGER)
            STAT_ADD(t->db, evicted_rows, (uint64_t)cl.c[i].reply->integer);
    hps__ddb_cl_fini(&cl);
    return e;
}

/* Shrink partition p to the resolution margin if it is over its margin. */
hps_err_t hps__ddb_resolve_overflow(hps_ddb_table_t *t, unsigned p, char *err, size_t err_len)
{
    const hps_ddb_opts_t *o = &t->db->o;
    size_t target = (size_t)((double)o->overflow_margin * o->overflow_resolution_target + 0.5);
    if (pthread_mutex_trylock(&t->evict_mu[p]) != 0)
        return 0; /* another thread is resolving this partition */
    cmdlist_t cl;
    hps_err_t e = hps__ddb_cl_init(&cl, 2, 4);
    if (!e) {
        hps__ddb_cl_begin(&cl, t, p, "HKEYS", 'v');
        if (o->overflow_policy != HPS_EVICT_RANDOM)
            hps__ddb_cl_begin(&cl, t, p, "HGETALL", 't');
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
    hps__ddb_cl_fini(&cl);
    pthread_mutex_unlock(&t->evict_mu[p]);
    return e;
}
