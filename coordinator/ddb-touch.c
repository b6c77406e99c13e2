/*
 * ddb-touch.c -- access tracking of the distributed DB: the metadata
 * hash writes of an LFU/LRU table, and the queue and thread that write the
 * hit keys of lookups off the lookup path.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddb-internal.h"

/* ---- metadata (access tracking) ----------------------------------------- */

static const char LFU_ONE[] = "1";

/* Append the metadata writes for keys order[a..b) of partition p. */
void hps__ddb_meta_cmds(cmdlist_t *cl, const hps_ddb_table_t *t, unsigned p, const void *keys,
                        const size_t *order, size_t a, size_t b, const int64_t *now)
{
    size_t kb = t->key_bytes;
    if (t->db->o.overflow_policy == HPS_EVICT_LEAST_USED) {
        for (size_t j = a; j < b; j++) {
            hps_rcluster_cmd_t *c = hps__ddb_cl_begin(cl, t, p, "HINCRBY", 't');
            hps__ddb_cl_arg(cl, c, (const char *)keys + order[j] * kb, kb);
            hps__ddb_cl_arg(cl, c, LFU_ONE, 1);
        }
    } else if (t->db->o.overflow_policy == HPS_EVICT_OLDEST) {
        hps_rcluster_cmd_t *c = hps__ddb_cl_begin(cl, t, p, "HSET", 't');
        for (size_t j = a; j < b; j++) {
            hps__ddb_cl_arg(cl, c, (const char *)keys + order[j] * kb, kb);
            hps__ddb_cl_arg(cl, c, now, sizeof(*now)); /* raw 8-byte time_t, as HugeCTR */
        }
    }
}

/* Write the access metadata of m keys (hk, packed) of t now. */
static void touch_now(hps_ddb_table_t *t, size_t m, const char *hk)
{
    size_t *order = NULL, *start = NULL;
    cmdlist_t cl = {0};
    int64_t now = (int64_t)time(NULL);
    if (hps__ddb_bucket(t, m, hk, &order, &start) == 0) {
        size_t nb = hps__ddb_num_batches(t, start);
        if (hps__ddb_cl_init(&cl, m + nb, 4 * m + 2 * nb) == 0) {
            size_t B = t->db->o.max_batch_size;
            for (unsigned p = 0; p < t->np; p++)
                for (size_t a = start[p]; a < start[p + 1]; a += B)
                    hps__ddb_meta_cmds(&cl, t, p, hk, order, a,
                                       a + B < start[p + 1] ? a + B : start[p + 1], &now);
            if (hps_rcluster_exec(t->db->rc, cl.n, cl.c, NULL, 0) < 0)
                STAT_ADD(t->db, errors, 1);
        }
        hps__ddb_cl_fini(&cl);
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
void hps__ddb_touch(hps_ddb_table_t *t, size_t n, const void *keys, const bool *found, size_t m)
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
hps_err_t hps__ddb_touch_start(hps_ddb_t *db)
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
void hps__ddb_touch_stop(hps_ddb_t *db)
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
