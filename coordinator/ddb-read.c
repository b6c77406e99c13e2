/*
 * ddb-read.c -- the distributed DB's reads: lookups, and the checks of
 * what a table holds (sampled values, partition sizes, extra partitions,
 * hashes in HugeCTR's pre-v4.2 layout).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddb-internal.h"

/* ---- lookup ------------------------------------------------------------- */

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
            key = hps__ddb_key_at(t, f->str, 0);
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
    hps_err_t e = hps__ddb_cl_init(&cl, t->np, 5 * (size_t)t->np);
    for (unsigned p = 0; !e && p < t->np; p++) {
        hps_rcluster_cmd_t *c = hps__ddb_cl_begin(&cl, t, p, "HSCAN", 'v');
        hps__ddb_cl_arg(&cl, c, "0", 1);
        hps__ddb_cl_arg(&cl, c, "COUNT", 5);
        hps__ddb_cl_arg(&cl, c, count, strlen(count));
    }
    if (!e)
        e = hps_rcluster_exec(t->db->rc, cl.n, cl.c, err, err_len);
    if (!e)
        e = hps__ddb_reply_errors(&cl, err, err_len);
    for (unsigned p = 0; !e && p < t->np; p++) {
        const redisReply *r = cl.c[p].reply;
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[1]->type != REDIS_REPLY_ARRAY) {
            hps__ddb_set_err(err, err_len, "HSCAN: unexpected reply");
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
    hps__ddb_cl_fini(&cl);
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
    hps_err_t e = hps__ddb_bucket(t, n, keys, &order, &start);
    if (e)
        return e;
    size_t nb = hps__ddb_num_batches(t, start);
    cmdlist_t cl;
    if ((e = hps__ddb_cl_init(&cl, nb, n + 2 * nb)) == 0) {
        for (unsigned p = 0; p < t->np; p++)
            for (size_t a = start[p]; a < start[p + 1]; a += B) {
                hps_rcluster_cmd_t *c = hps__ddb_cl_begin(&cl, t, p, "HMGET", 'v');
                for (size_t j = a; j < start[p + 1] && j < a + B; j++)
                    hps__ddb_cl_arg(&cl, c, (const char *)keys + order[j] * kb, kb);
            }
        /* fast: a cluster that is down answers "miss" at once, and a hung
         * node by lookup_timeout_ms, so the caller's lower layer answers
         * within the worker's miss timeout */
        e = hps_rcluster_exec_fast(t->db->rc, cl.n, cl.c, err, err_len);
        if (e == 0) /* e.g. WRONGTYPE: a partition's hash replaced by another type */
            e = hps__ddb_reply_errors(&cl, err, err_len);
        size_t pos = 0;
        for (size_t i = 0; i < cl.n; i++) {
            size_t m = (size_t)cl.c[i].argc - 2;
            if (cl.c[i].status == 0)
                hits += take_hmget(t, cl.c[i].reply, order + pos, m, values, found);
            pos += m;
        }
    }
    hps__ddb_cl_fini(&cl);
    free(order);
    free(start);
    STAT_ADD(t->db, lookup_keys, n);
    STAT_ADD(t->db, lookup_hits, hits);
    if (e)
        STAT_ADD(t->db, errors, 1);
    hps__ddb_touch(t, n, keys, found, hits);
    if (ret_hits)
        *ret_hits = hits;
    return e;
}

hps_err_t hps_ddb_partition_rows(hps_ddb_table_t *t, unsigned part, uint64_t *ret_rows, char *err,
                                 size_t err_len)
{
    if (part >= t->np)
        return HPS_EINVAL;
    cmdlist_t cl;
    hps_err_t e = hps__ddb_cl_init(&cl, 1, 2);
    if (!e) {
        hps__ddb_cl_begin(&cl, t, part, "HLEN", 'v');
        e = hps_rcluster_exec(t->db->rc, 1, cl.c, err, err_len);
    }
    if (!e && cl.c[0].reply->type != REDIS_REPLY_INTEGER)
        e = (hps__ddb_reply_errors(&cl, err, err_len), HPS_EIO); /* the message, if any */
    if (!e)
        *ret_rows = (uint64_t)cl.c[0].reply->integer;
    hps__ddb_cl_fini(&cl);
    return e;
}

/* EXISTS for the value hashes of partitions [first, first + n) of t, in
 * one pipelined exec: HugeCTR's names, or (legacy) its names before v4.2,
 * "hps_et.<model>.<table>/p<i>/v".  *ret_highest: the highest partition
 * found (-1: none); *ret_count: how many were found. */
static hps_err_t probe_hashes(hps_ddb_table_t *t, unsigned first, size_t n, bool legacy,
                              long *ret_highest, unsigned *ret_count, char *err, size_t err_len)
{
    *ret_highest = -1;
    *ret_count = 0;
    char *names = malloc(n * HPS_DDB_KEY_MAX);
    cmdlist_t cl;
    hps_err_t e = hps__ddb_cl_init(&cl, n, 2 * n);
    if (!e && !names)
        e = -ENOMEM;
    for (size_t i = 0; !e && i < n; i++) {
        char *name = names + i * HPS_DDB_KEY_MAX;
        unsigned part = first + (unsigned)i;
        hps_err_t len;
        if (legacy) {
            int w = snprintf(name, HPS_DDB_KEY_MAX, HPS_TABLE_TAG_PREFIX ".%s.%s/p%u/v", t->model,
                             t->table, part);
            len = w < 0 || w >= HPS_DDB_KEY_MAX ? HPS_EINVAL : w;
        } else {
            len = hps_ddb_key_name(t->model, t->table, part, 'v', name, HPS_DDB_KEY_MAX);
        }
        if (len < 0) {
            e = len;
            break;
        }
        hps_rcluster_cmd_t *c = &cl.c[cl.n++];
        *c = (hps_rcluster_cmd_t){.argv = cl.argv + cl.na,
                                  .argvlen = cl.len + cl.na,
                                  .slot = hps_rcluster_key_slot(name, (size_t)len)};
        hps__ddb_cl_arg(&cl, c, "EXISTS", 6);
        hps__ddb_cl_arg(&cl, c, name, (size_t)len);
    }
    if (!e)
        e = hps_rcluster_exec(t->db->rc, cl.n, cl.c, err, err_len);
    for (size_t i = 0; !e && i < cl.n; i++) {
        const redisReply *r = cl.c[i].reply;
        if (!r || r->type != REDIS_REPLY_INTEGER) {
            e = (hps__ddb_reply_errors(&cl, err, err_len), HPS_EIO); /* the message, if any */
        } else if (r->integer > 0) {
            *ret_highest = (long)(first + i);
            ++*ret_count;
        }
    }
    hps__ddb_cl_fini(&cl);
    free(names);
    return e;
}

hps_err_t hps_ddb_extra_partitions(hps_ddb_table_t *t, unsigned probe_to, long *ret_highest,
                                   char *err, size_t err_len)
{
    unsigned found;
    *ret_highest = -1;
    if (probe_to <= t->np)
        return 0;
    return probe_hashes(t, t->np, probe_to - t->np, false, ret_highest, &found, err, err_len);
}

hps_err_t hps_ddb_legacy_partitions(hps_ddb_table_t *t, unsigned probe_to, unsigned *ret_count,
                                    char *err, size_t err_len)
{
    long highest;
    *ret_count = 0;
    if (probe_to == 0)
        return 0;
    return probe_hashes(t, 0, probe_to, true, &highest, ret_count, err, err_len);
}
