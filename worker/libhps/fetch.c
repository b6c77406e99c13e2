/*
 * fetch.c -- the one fetch path below the GPU cache (docs/architecture.md,
 * "Trace 1"), for host-only lookups and for the GPU cache's misses
 * alike: per table the volatile DB in shared memory (lock-free,
 * partition-parallel), then one miss-queue round trip to the coordinator
 * carrying the misses of every table, bounded by one miss_timeout_ms
 * deadline (shmdb/missq.c: hps_shmdb_miss_lookup_many), then the table's
 * default value.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

uint64_t hps__client_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void hps__client_fill(float *out, size_t n, uint32_t dim, float v)
{
    for (size_t i = 0; i < n * dim; i++)
        out[i] = v;
}

/* Per table of a fetch: its keys at the table's width, what the volatile
 * DB lacked, and the miss-queue request for those. */
struct part {
    const void *k;   /* keys at the table's width: f->keys or k32 */
    uint32_t *k32;   /* (n) narrowed keys of a 32-bit model */
    uint8_t *valid;  /* (n) key fits the model's width; NULL = all */
    uint8_t *found;  /* (n) f->found or own */
    uint8_t *own;    /* found buffer when the caller wants none */
    size_t miss;     /* keys asked of the coordinator */
    char *mkeys;     /* (miss) their keys */
    size_t *midx;    /* (miss) their positions */
    float *mrows;    /* (miss, dim) their rows */
    uint8_t *mfound; /* (miss) */
    uint64_t vdb;    /* weighed hits in the volatile DB */
    size_t hits;     /* keys the volatile DB found (unweighed) */
    bool looked;     /* the volatile DB was asked: its counters are owed */
    bool asked;      /* a miss-queue request carries this part */
};

static void part_free(struct part *p)
{
    free(p->k32);
    free(p->valid);
    free(p->own);
    free(p->mkeys);
    free(p->midx);
    free(p->mrows);
    free(p->mfound);
}

/** Sum of weight[i] over the keys with found[i] (every key when found is NULL). */
static uint64_t weighed(const uint8_t *found, const uint32_t *weight, size_t n)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += found && !found[i] ? 0 : (weight ? weight[i] : 1);
    return sum;
}

/* The volatile DB for one table; collects the misses.  0 or -ENOMEM. */
static int vdb_part(hps_client_t *cl, client_model_t *m, const client_fetch_t *f, struct part *p,
                    bool attached)
{
    uint32_t kb = cl->key_bytes, dim = m->dims[f->table];
    size_t n = f->n;
    p->found = f->found ? f->found : (p->own = malloc(n ? n : 1));
    if (!p->found)
        return -ENOMEM;
    memset(p->found, 0, n);
    p->k = f->keys;
    if (kb == 4) { /* 32-bit model: keys outside [0, 2^32) exist in no layer */
        p->k32 = malloc(n * sizeof(uint32_t) + 1);
        p->valid = malloc(n + 1);
        if (!p->k32 || !p->valid)
            return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
            p->valid[i] = f->keys[i] >= 0 && f->keys[i] <= (int64_t)UINT32_MAX;
            p->k32[i] = p->valid[i] ? (uint32_t)f->keys[i] : 0;
        }
        p->k = p->k32;
    }
    /* Uncounted: a lookup that cannot wait is asked again where it may
     * (HPS_EAGAIN), and the segment counts each key once (hps__client_fetch). */
    p->looked =
        attached && hps_shmdb_lookup_ex(cl->db, m->vdb_ids[f->table], n, p->k, f->rows, p->found,
                                        &p->hits, HPS_SHMDB_LOOKUP_UNCOUNTED) == 0;
    if (!p->looked)
        memset(p->found, 0, n);
    for (size_t i = 0; p->valid && i < n; i++)
        p->found[i] &= p->valid[i];
    p->vdb = weighed(p->found, f->weight, n);
    for (size_t i = 0; i < n; i++)
        p->miss += !p->found[i] && (!p->valid || p->valid[i]);
    if (!attached || p->miss == 0)
        return 0;
    p->mkeys = malloc(p->miss * kb);
    p->midx = malloc(p->miss * sizeof(size_t));
    p->mrows = malloc(p->miss * dim * sizeof(float));
    p->mfound = malloc(p->miss);
    if (!p->mkeys || !p->midx || !p->mrows || !p->mfound)
        return -ENOMEM;
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (p->found[i] || (p->valid && !p->valid[i]))
            continue;
        memcpy(p->mkeys + j * kb, (const char *)p->k + i * kb, kb);
        p->midx[j++] = i;
    }
    return 0;
}

/* One round trip for the misses of every part; counts busy / timeouts. */
static void lower_layers(hps_client_t *cl, client_model_t *m, const client_fetch_t *f,
                         struct part *p, size_t nf)
{
    hps_miss_req_t stack[8], *req = nf <= 8 ? stack : calloc(nf, sizeof(*req));
    size_t nr = 0;
    if (!req)
        return;
    for (size_t i = 0; i < nf; i++) {
        if (!p[i].miss || !p[i].mkeys)
            continue;
        p[i].asked = true;
        req[nr++] = (hps_miss_req_t){.table = m->vdb_ids[f[i].table],
                                     .n = p[i].miss,
                                     .keys = p[i].mkeys,
                                     .values = p[i].mrows,
                                     .found = p[i].mfound};
    }
    if (nr)
        hps_shmdb_miss_lookup_many(cl->db, req, nr, (uint32_t)cl->conf->worker.miss_timeout_ms);
    bool busy = false, late = false;
    for (size_t i = 0, r = 0; i < nf; i++) {
        if (!p[i].asked)
            continue;
        hps_miss_req_t *q = &req[r++];
        busy |= q->rc == HPS_EBUSY;
        late |= q->rc == HPS_ETIMEDOUT;
        uint32_t dim = m->dims[f[i].table];
        /* Whatever was answered, also when the deadline cut the rest off
         * (mfound is set only for the keys of answered chunks): the rows
         * the coordinator found are the caller's, the rest get defaults. */
        for (size_t j = 0; j < p[i].miss; j++) {
            if (!p[i].mfound[j])
                continue;
            memcpy(f[i].rows + p[i].midx[j] * dim, p[i].mrows + j * dim, dim * sizeof(float));
            p[i].found[p[i].midx[j]] = 1;
        }
    }
    /* One request of the caller: counted once, as a request that hit a full
     * queue or its deadline. */
    if (busy)
        atomic_fetch_add_explicit(&m->ctr.miss_busy, 1, memory_order_relaxed);
    if (late)
        atomic_fetch_add_explicit(&m->ctr.miss_timeout, 1, memory_order_relaxed);
    if (req != stack)
        free(req);
}

/* Whether misses are asked for.  Believed not (no coordinator answered at
 * the last maintenance round, up to 50 ms ago), the segment is looked at
 * again, at most once a millisecond per client: a coordinator that took the
 * segment over since (a restart answering what its workers miss) is asked
 * at once instead of the rest of the round getting defaults.  cl->db
 * attached, under seg_lock (read). */
static bool misses_served(hps_client_t *cl)
{
    if (atomic_load_explicit(&cl->misses_served, memory_order_relaxed))
        return true;
    uint64_t now = hps__client_now_ns();
    uint64_t last = atomic_load_explicit(&cl->served_checked_ns, memory_order_relaxed);
    if (now - last < 1000000u ||
        !atomic_compare_exchange_strong_explicit(&cl->served_checked_ns, &last, now,
                                                 memory_order_relaxed, memory_order_relaxed))
        return false;
    hps_segment_info_t si;
    bool served =
        hps_shmdb_coordinator_alive(cl->db, (uint32_t)cl->conf->hps.worker_timeout_ms, true) &&
        hps_shmdb_segment_info(cl->db, &si) == 0 && hps__client_state_answers(si.coord_state);
    if (served) /* the next maintenance round says the same, or better */
        atomic_store_explicit(&cl->misses_served, true, memory_order_relaxed);
    return served;
}

int hps__client_fetch(hps_client_t *cl, client_model_t *m, client_fetch_t *f, size_t nf, bool count,
                      bool nowait)
{
    struct part stack[8], *p = nf <= 8 ? stack : calloc(nf, sizeof(*p));
    if (!p)
        return -ENOMEM;
    memset(p, 0, nf * sizeof(*p));
    bool attached = cl->db && m->resolved;
    int rc = 0;
    for (size_t i = 0; i < nf && rc == 0; i++)
        rc = vdb_part(cl, m, &f[i], &p[i], attached);
    size_t missing = 0;
    for (size_t i = 0; rc == 0 && attached && i < nf; i++)
        missing += p[i].miss;
    bool ask = rc == 0 && attached &&
               (missing ? misses_served(cl)
                        : atomic_load_explicit(&cl->misses_served, memory_order_relaxed));
    if (!ask)
        missing = 0;
    if (nowait && missing) { /* the caller asks again where it may wait */
        for (size_t i = 0; i < nf; i++)
            part_free(&p[i]);
        if (p != stack)
            free(p);
        return HPS_EAGAIN;
    }
    for (size_t i = 0; i < nf; i++)
        if (p[i].looked)
            hps_shmdb_count_lookups(cl->db, m->vdb_ids[f[i].table], f[i].n, p[i].hits);
    if (ask)
        lower_layers(cl, m, f, p, nf);
    for (size_t i = 0; i < nf; i++) {
        uint32_t dim = m->dims[f[i].table];
        float def = m->defaults[f[i].table];
        uint8_t *found = p[i].found;
        for (size_t j = 0; j < f[i].n; j++)
            if (!found || !found[j])
                hps__client_fill(f[i].rows + j * dim, 1, dim, def);
        if (count) {
            uint64_t all = weighed(NULL, f[i].weight, f[i].n);
            uint64_t any = found ? weighed(found, f[i].weight, f[i].n) : 0;
            atomic_fetch_add_explicit(&m->ctr.vdb_hits, p[i].vdb, memory_order_relaxed);
            atomic_fetch_add_explicit(&m->ctr.lower_hits, any - p[i].vdb, memory_order_relaxed);
            atomic_fetch_add_explicit(&m->ctr.default_keys, all - any, memory_order_relaxed);
        }
        part_free(&p[i]);
    }
    if (p != stack)
        free(p);
    return rc;
}
