/*
 * test-shmdb-missq.c -- the miss queue between workers and the coordinator:
 * answers are exact, a full queue answers busy at once, a request without a
 * server times out within its deadline, a late answer never reaches the
 * caller, and the slots of dead workers and of a dead coordinator are
 * reclaimed.  The batched call (hps_shmdb_miss_lookup_many) answers many
 * tables in one round trip bounded by one deadline.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "testutil.h"

#define DIM 16

struct fixture {
    char name[T_NAME_LEN];
    hps_shmdb_t *db;
    uint32_t id;
};

/* The "persistent DB" of these tests: even keys exist, with known rows. */
static float expected(int64_t key, uint32_t d)
{
    return (float)(key % 1000) * 0.5f + (float)d;
}

static hps_err_t serve_even(void *ctx, uint32_t table, size_t n, const void *keys, float *values,
                            uint8_t *found)
{
    (void)table;
    uint64_t delay_ms = ctx ? *(uint64_t *)ctx : 0;
    if (delay_ms)
        t_sleep_ns(delay_ms * 1000000ULL);
    const int64_t *k = keys;
    for (size_t i = 0; i < n; i++) {
        if (k[i] % 2 != 0)
            continue;
        found[i] = 1;
        for (uint32_t d = 0; d < DIM; d++)
            values[i * DIM + d] = expected(k[i], d);
    }
    return 0;
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    hps_shmdb_opts_t o = t_opts(64u << 20);
    t_segname(f->name, "missq");
    HPS_ASSERT_OK(hps_shmdb_create(f->name, &o, NULL, &f->db));
    hps_table_spec_t s = t_spec("mq", "t", DIM, 8, 4, UINT64_MAX, HPS_EVICT_RANDOM, 0.8);
    HPS_ASSERT_OK(hps_shmdb_table_create(f->db, &s, &f->id));
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    hps_shmdb_detach(f->db);
    hps_shmdb_unlink(f->name);
    free(f);
    return 0;
}

/* Tables of the batched tests, by table id: dim and key width (0: the
 * fixture's table, DIM and int64).  Set before a server is forked. */
static uint32_t g_dim[HPS_SHMDB_MAX_TABLES];
static uint32_t g_kb[HPS_SHMDB_MAX_TABLES];

/* The row of a key of a batched-test table: depends on table and key. */
static float expected2(uint32_t table, uint64_t key, uint32_t d)
{
    return (float)table * 1000.0f + (float)(key % 1000) * 0.5f + (float)d * 0.25f;
}

static uint64_t key_at(const void *keys, uint32_t kb, size_t i)
{
    return kb == 4 ? ((const uint32_t *)keys)[i] : (uint64_t)((const int64_t *)keys)[i];
}

/* Batched-test tables: even keys exist, with rows from (table, key). */
static hps_err_t serve_tables(void *ctx, uint32_t table, size_t n, const void *keys, float *values,
                              uint8_t *found)
{
    uint64_t delay_ms = ctx ? *(uint64_t *)ctx : 0;
    if (delay_ms)
        t_sleep_ns(delay_ms * 1000000ULL);
    uint32_t dim = g_dim[table], kb = g_kb[table];
    if (dim == 0)
        return HPS_ENOTFOUND;
    for (size_t i = 0; i < n; i++) {
        uint64_t k = key_at(keys, kb, i);
        if (k % 2 != 0)
            continue;
        found[i] = 1;
        for (uint32_t d = 0; d < dim; d++)
            values[i * dim + d] = expected2(table, k, d);
    }
    return 0;
}

/* A child process that attaches and serves for ms milliseconds through fn. */
static pid_t start_server_fn(const char *name, uint64_t ms, uint64_t delay_ms, hps_shmdb_miss_fn fn)
{
    pid_t pid = t_fork();
    if (pid == 0) {
        t_child_mode();
        hps_shmdb_t *db;
        if (hps_shmdb_attach(name, NULL, &db) != 0)
            _exit(T_CHILD_FAIL);
        uint64_t end = t_now_ns() + ms * 1000000ULL;
        while (t_now_ns() < end)
            hps_shmdb_miss_serve(db, 20, fn, delay_ms ? &delay_ms : NULL, NULL);
        hps_shmdb_detach(db);
        _exit(0);
    }
    return pid;
}

static pid_t start_server(const char *name, uint64_t ms, uint64_t delay_ms)
{
    return start_server_fn(name, ms, delay_ms, serve_even);
}

static void stop(pid_t pid)
{
    int st;
    kill(pid, SIGKILL);
    t_wait_timeout(pid, 5000, &st);
}

static void test_no_queue(void **state)
{
    struct fixture *f = *state;
    int64_t k = 2;
    float v[DIM];
    HPS_ASSERT_ERR(hps_shmdb_miss_lookup(f->db, f->id, 1, &k, v, NULL, 10, NULL), HPS_ENOTFOUND);
    hps_missq_info_t mi;
    HPS_ASSERT_ERR(hps_shmdb_miss_stats(f->db, &mi), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_missq_init(f->db, 0, 1 << 16), HPS_EINVAL);
}

/* Exact vectors for found keys, untouched rows for missing ones, and a
 * batch larger than one slot split over several requests. */
static void test_exact_answers(void **state)
{
    struct fixture *f = *state;
    HPS_ASSERT_OK(hps_shmdb_missq_init(f->db, 4, 8192)); /* 112 keys of dim 16 per slot */
    pid_t srv = start_server(f->name, 5000, 0);
    enum { N = 1000 };
    int64_t *keys = malloc(N * sizeof(int64_t));
    float *vals = malloc(N * DIM * sizeof(float));
    uint8_t found[N];
    for (size_t i = 0; i < N; i++)
        keys[i] = (int64_t)(i * 7919) - 3000;
    for (size_t i = 0; i < N * DIM; i++)
        vals[i] = -1.0f;
    size_t hits = 0;
    HPS_ASSERT_OK(hps_shmdb_miss_lookup(f->db, f->id, N, keys, vals, found, 2000, &hits));
    size_t want = 0;
    for (size_t i = 0; i < N; i++) {
        int even = keys[i] % 2 == 0;
        want += (size_t)even;
        HPS_ASSERT_EQ(found[i], even);
        for (uint32_t d = 0; d < DIM; d++)
            HPS_ASSERT_EQ(vals[i * DIM + d], even ? expected(keys[i], d) : -1.0f);
    }
    HPS_ASSERT_EQ(hits, want);
    hps_missq_info_t mi;
    HPS_ASSERT_OK(hps_shmdb_miss_stats(f->db, &mi));
    /* 8192 bytes hold 112 keys (896 B keys, 128 B mask, 7168 B rows): 9 requests */
    HPS_ASSERT_EQ(mi.served, 9);
    HPS_ASSERT_EQ(mi.in_use, 0);
    stop(srv);
    free(keys);
    free(vals);
}

/* Without a server the call returns at its deadline, not later. */
static void test_timeout_bounded(void **state)
{
    struct fixture *f = *state;
    HPS_ASSERT_OK(hps_shmdb_missq_init(f->db, 2, 8192));
    int64_t k = 4;
    float v[DIM];
    uint64_t t0 = t_now_ns();
    HPS_ASSERT_ERR(hps_shmdb_miss_lookup(f->db, f->id, 1, &k, v, NULL, 50, NULL), HPS_ETIMEDOUT);
    uint64_t ms = (t_now_ns() - t0) / 1000000ULL;
    HPS_ASSERT_GE(ms, 45);
    HPS_ASSERT_LT(ms, 500);
    hps_missq_info_t mi;
    HPS_ASSERT_OK(hps_shmdb_miss_stats(f->db, &mi));
    HPS_ASSERT_EQ(mi.timeouts, 1);
    HPS_ASSERT_EQ(mi.in_use, 0); /* a PENDING slot is taken back at once */
}

/* A slow server: the caller gives up; the late answer is discarded, the
 * caller's buffer is untouched, and the slot becomes free again. */
static void test_late_answer_discarded(void **state)
{
    struct fixture *f = *state;
    HPS_ASSERT_OK(hps_shmdb_missq_init(f->db, 1, 8192));
    pid_t srv = start_server(f->name, 3000, 300); /* answers after 300 ms */
    int64_t k = 6;
    float v[DIM];
    for (uint32_t d = 0; d < DIM; d++)
        v[d] = 42.0f;
    t_sleep_ns(50000000); /* let the server start waiting */
    HPS_ASSERT_ERR(hps_shmdb_miss_lookup(f->db, f->id, 1, &k, v, NULL, 100, NULL), HPS_ETIMEDOUT);
    t_sleep_ns(400000000); /* the answer arrives after the deadline */
    for (uint32_t d = 0; d < DIM; d++)
        HPS_ASSERT_EQ(v[d], 42.0f);
    hps_missq_info_t mi;
    HPS_ASSERT_OK(hps_shmdb_miss_stats(f->db, &mi));
    HPS_ASSERT_EQ(mi.in_use, 0); /* freed by the server after it finished */
    /* And the slot serves the next request normally. */
    size_t hits = 0;
    HPS_ASSERT_OK(hps_shmdb_miss_lookup(f->db, f->id, 1, &k, v, NULL, 2000, &hits));
    HPS_ASSERT_EQ(hits, 1);
    HPS_ASSERT_EQ(v[3], expected(6, 3));
    stop(srv);
}

/* All slots taken by a dead worker: busy at the deadline; reaping frees
 * them. */
static void test_busy_and_reap(void **state)
{
    struct fixture *f = *state;
    HPS_ASSERT_OK(hps_shmdb_missq_init(f->db, 1, 8192));
    pid_t w = t_fork();
    if (w == 0) { /* a worker that dies while waiting for an answer */
        t_child_mode();
        hps_shmdb_t *db;
        if (hps_shmdb_attach(f->name, NULL, &db) != 0)
            _exit(T_CHILD_FAIL);
        int64_t k = 8;
        float v[DIM];
        hps_shmdb_miss_lookup(db, f->id, 1, &k, v, NULL, 60000, NULL);
        _exit(0);
    }
    hps_missq_info_t mi;
    for (int i = 0; i < 200; i++) { /* wait until it holds the slot */
        HPS_ASSERT_OK(hps_shmdb_miss_stats(f->db, &mi));
        if (mi.in_use == 1)
            break;
        t_sleep_ns(5000000);
    }
    HPS_ASSERT_EQ(mi.in_use, 1);
    int64_t k = 10;
    float v[DIM];
    uint64_t t0 = t_now_ns();
    /* it waits for a slot until its deadline, then gives up as busy */
    HPS_ASSERT_ERR(hps_shmdb_miss_lookup(f->db, f->id, 1, &k, v, NULL, 200, NULL), HPS_EBUSY);
    HPS_ASSERT_GE(t_now_ns() - t0, 200000000ULL);
    HPS_ASSERT_LT(t_now_ns() - t0, 2000000000ULL);
    size_t reaped = 99;
    HPS_ASSERT_OK(hps_shmdb_miss_reap(f->db, false, &reaped));
    HPS_ASSERT_EQ(reaped, 0); /* its owner is alive */
    stop(w);
    HPS_ASSERT_OK(hps_shmdb_miss_reap(f->db, false, &reaped));
    HPS_ASSERT_EQ(reaped, 1);
    HPS_ASSERT_OK(hps_shmdb_miss_stats(f->db, &mi));
    HPS_ASSERT_EQ(mi.in_use, 0);
    HPS_ASSERT_EQ(mi.busy, 1);
}

/* A coordinator killed while serving: a restarting one reclaims the slot. */
static void test_coordinator_restart(void **state)
{
    struct fixture *f = *state;
    HPS_ASSERT_OK(hps_shmdb_missq_init(f->db, 1, 8192));
    pid_t srv = start_server(f->name, 10000, 5000); /* takes the request, then hangs */
    t_sleep_ns(50000000);
    int64_t k = 12;
    float v[DIM];
    HPS_ASSERT_ERR(hps_shmdb_miss_lookup(f->db, f->id, 1, &k, v, NULL, 100, NULL), HPS_ETIMEDOUT);
    stop(srv); /* dies in the middle of serving */
    hps_missq_info_t mi;
    HPS_ASSERT_OK(hps_shmdb_miss_stats(f->db, &mi));
    HPS_ASSERT_EQ(mi.in_use, 1); /* abandoned, its server gone */
    size_t reaped = 0;
    HPS_ASSERT_OK(hps_shmdb_miss_reap(f->db, true, &reaped));
    HPS_ASSERT_EQ(reaped, 1);
    srv = start_server(f->name, 5000, 0);
    size_t hits = 0;
    HPS_ASSERT_OK(hps_shmdb_miss_lookup(f->db, f->id, 1, &k, v, NULL, 2000, &hits));
    HPS_ASSERT_EQ(hits, 1);
    HPS_ASSERT_EQ(v[0], expected(12, 0));
    stop(srv);
}

/* One lookup of key 12 with a long deadline, on a thread of its own. */
struct waiter {
    struct fixture *f;
    hps_err_t rc;
    size_t hits;
    float v[DIM];
};

static void *waiter_run(void *arg)
{
    struct waiter *w = arg;
    int64_t k = 12;
    w->rc = hps_shmdb_miss_lookup(w->f->db, w->f->id, 1, &k, w->v, NULL, 10000, &w->hits);
    return NULL;
}

/* A coordinator killed while serving a request its worker still waits for:
 * the next one (a restart taking the segment over) asks it again instead of
 * freeing it, and the worker gets the answer, not its timeout. */
static void test_coordinator_restart_requeues(void **state)
{
    struct fixture *f = *state;
    HPS_ASSERT_OK(hps_shmdb_missq_init(f->db, 1, 8192));
    pid_t srv = start_server(f->name, 10000, 5000); /* takes the request, then hangs */
    struct waiter w = {.f = f};
    pthread_t th;
    HPS_ASSERT_EQ(pthread_create(&th, NULL, waiter_run, &w), 0);
    t_sleep_ns(200000000);
    stop(srv); /* dies in the middle of serving; the worker waits on */
    size_t reaped = 0;
    HPS_ASSERT_OK(hps_shmdb_miss_reap(f->db, true, &reaped));
    HPS_ASSERT_EQ(reaped, 1);
    uint64_t t0 = t_now_ns();
    srv = start_server(f->name, 5000, 0);
    pthread_join(th, NULL);
    HPS_ASSERT_OK(w.rc);
    HPS_ASSERT_EQ(w.hits, 1);
    HPS_ASSERT_EQ(w.v[0], expected(12, 0));
    HPS_ASSERT_LT(t_now_ns() - t0, 3000000000ULL); /* answered, not its 10 s deadline */
    stop(srv);
}

/* ------------------------------------------------------------------------ */
/* Batched requests: hps_shmdb_miss_lookup_many                              */
/* ------------------------------------------------------------------------ */

#define NT 26

/* A batch of requests with their buffers, one table each. */
struct batch {
    size_t nreq;
    hps_miss_req_t req[NT + 1];
    uint32_t dim[NT + 1], kb[NT + 1];
};

/* Create NT tables of different dims (1..64) and key widths (int64 and
 * uint32), recorded for the server. */
static void make_tables(struct fixture *f, uint32_t ids[NT])
{
    for (uint32_t i = 0; i < NT; i++) {
        char name[16];
        snprintf(name, sizeof(name), "b%u", i);
        uint32_t dim = 1 + (i * 23) % 64, kb = i % 3 == 2 ? 4 : 8;
        hps_table_spec_t s = t_spec("mq", name, dim, kb, 1, UINT64_MAX, HPS_EVICT_RANDOM, 0.8);
        HPS_ASSERT_OK(hps_shmdb_table_create(f->db, &s, &ids[i]));
        g_dim[ids[i]] = dim;
        g_kb[ids[i]] = kb;
    }
}

/* Fill request r of b: table id, n keys (j * 7 + id + 3), values -1, found 7. */
static void batch_add(struct batch *b, uint32_t id, size_t n)
{
    size_t r = b->nreq++;
    uint32_t dim = g_dim[id], kb = g_kb[id];
    void *keys = n ? malloc(n * kb) : NULL;
    float *vals = n ? malloc(n * dim * sizeof(float)) : NULL;
    uint8_t *found = n ? malloc(n) : NULL;
    for (size_t j = 0; j < n; j++) {
        uint64_t k = j * 7 + id + 3;
        if (kb == 4)
            ((uint32_t *)keys)[j] = (uint32_t)k;
        else
            ((int64_t *)keys)[j] = (int64_t)k;
        found[j] = 7;
    }
    for (size_t j = 0; j < n * dim; j++)
        vals[j] = -1.0f;
    b->dim[r] = dim;
    b->kb[r] = kb;
    b->req[r] = (hps_miss_req_t){.table = id,
                                 .n = n,
                                 .keys = keys,
                                 .values = vals,
                                 .found = found,
                                 .hits = 999,
                                 .rc = 12345};
}

/* Check request r: keys [0, answered) answered exactly, the rest untouched
 * (found 0, rows -1); returns the keys found. */
static size_t batch_check(const struct batch *b, size_t r, size_t answered)
{
    const hps_miss_req_t *q = &b->req[r];
    size_t hits = 0;
    for (size_t j = 0; j < q->n; j++) {
        uint64_t k = key_at(q->keys, b->kb[r], j);
        int have = j < answered && k % 2 == 0;
        hits += (size_t)have;
        HPS_ASSERT_EQ(q->found[j], have);
        for (uint32_t d = 0; d < b->dim[r]; d++)
            HPS_ASSERT_EQ(q->values[j * b->dim[r] + d], have ? expected2(q->table, k, d) : -1.0f);
    }
    return hits;
}

static void batch_free(struct batch *b)
{
    for (size_t r = 0; r < b->nreq; r++) {
        free((void *)b->req[r].keys);
        free(b->req[r].values);
        free(b->req[r].found);
    }
}

static void wait_in_use_zero(struct fixture *f)
{
    hps_missq_info_t mi;
    for (int i = 0; i < 400; i++) {
        HPS_ASSERT_OK(hps_shmdb_miss_stats(f->db, &mi));
        if (mi.in_use == 0)
            break;
        t_sleep_ns(5000000);
    }
    HPS_ASSERT_EQ(mi.in_use, 0);
}

/* 26 tables of different dims and key widths in one call: exact rows,
 * found flags and hits per table; an empty request needs no slot. */
static void test_many_exact(void **state)
{
    struct fixture *f = *state;
    uint32_t ids[NT];
    make_tables(f, ids);
    HPS_ASSERT_OK(hps_shmdb_missq_init(f->db, 128, 8192));
    pid_t srv = start_server_fn(f->name, 5000, 0, serve_tables);
    struct batch b = {0};
    for (uint32_t i = 0; i < NT; i++)
        batch_add(&b, ids[i], 20 + i * 8); /* 20..220 keys: 69 slots in all */
    batch_add(&b, ids[0], 0);
    HPS_ASSERT_OK(hps_shmdb_miss_lookup_many(f->db, b.req, b.nreq, 2000));
    for (size_t r = 0; r < b.nreq; r++) {
        HPS_ASSERT_EQ(b.req[r].rc, 0);
        size_t want = batch_check(&b, r, b.req[r].n);
        HPS_ASSERT_EQ(b.req[r].hits, want);
        if (b.req[r].n >= 4)
            HPS_ASSERT_GT(want, 0);
    }
    hps_missq_info_t mi;
    HPS_ASSERT_OK(hps_shmdb_miss_stats(f->db, &mi));
    HPS_ASSERT_EQ(mi.in_use, 0);
    HPS_ASSERT_EQ(mi.busy, 0);
    HPS_ASSERT_EQ(mi.timeouts, 0);
    HPS_ASSERT_EQ(mi.served, 69); /* tables of up to 7 slots; more than 64 in flight */
    stop(srv);
    batch_free(&b);
}

/* Requests larger than one slab go in several chunks; more chunks than the
 * queue has slots go in waves (the call reuses its own slots), all exact,
 * none refused. */
static void test_many_chunked(void **state)
{
    struct fixture *f = *state;
    uint32_t ids[NT];
    make_tables(f, ids);
    HPS_ASSERT_OK(hps_shmdb_missq_init(f->db, 32, 8192));
    pid_t srv = start_server_fn(f->name, 5000, 0, serve_tables);
    struct batch b = {0};
    batch_add(&b, ids[2], 1500); /* dim 47, uint32 keys: 42 keys a slab, 36 chunks > 32 slots */
    batch_add(&b, ids[1], 700);  /* dim 24, int64 keys: 77 keys a slab, 10 chunks */
    HPS_ASSERT_OK(hps_shmdb_miss_lookup_many(f->db, b.req, 2, 2000));
    for (size_t r = 0; r < 2; r++) {
        HPS_ASSERT_EQ(b.req[r].rc, 0);
        HPS_ASSERT_EQ(b.req[r].hits, batch_check(&b, r, b.req[r].n));
    }
    hps_missq_info_t mi;
    HPS_ASSERT_OK(hps_shmdb_miss_stats(f->db, &mi));
    HPS_ASSERT_EQ(mi.served, 36 + 10);
    HPS_ASSERT_EQ(mi.busy, 0);
    HPS_ASSERT_EQ(mi.in_use, 0);
    stop(srv);
    batch_free(&b);
}

/* No coordinator: 26 tables time out together at the one deadline (not 26
 * deadlines one after another), and every slot, still PENDING, is taken
 * back by the call itself: none is left in use, no reap needed.  The call
 * holds at most half the queue's 32 slots: 16 chunks were posted (and
 * counted as timeouts), the other 10 found no time left to be asked. */
static void test_many_timeout_one_deadline(void **state)
{
    struct fixture *f = *state;
    uint32_t ids[NT];
    make_tables(f, ids);
    HPS_ASSERT_OK(hps_shmdb_missq_init(f->db, 32, 8192));
    struct batch b = {0};
    for (uint32_t i = 0; i < NT; i++)
        batch_add(&b, ids[i], 4);
    uint64_t t0 = t_now_ns();
    HPS_ASSERT_ERR(hps_shmdb_miss_lookup_many(f->db, b.req, b.nreq, 50), HPS_ETIMEDOUT);
    uint64_t ms = (t_now_ns() - t0) / 1000000ULL;
    HPS_ASSERT_GE(ms, 45);
    HPS_ASSERT_LT(ms, 500); /* one table after another would take 26 x 50 ms */
    for (size_t r = 0; r < b.nreq; r++) {
        HPS_ASSERT_EQ(b.req[r].rc, HPS_ETIMEDOUT);
        HPS_ASSERT_EQ(b.req[r].hits, 0);
        HPS_ASSERT_EQ(batch_check(&b, r, 0), 0); /* found zeroed, rows untouched */
    }
    hps_missq_info_t mi;
    HPS_ASSERT_OK(hps_shmdb_miss_stats(f->db, &mi));
    HPS_ASSERT_EQ(mi.in_use, 0);
    HPS_ASSERT_EQ(mi.timeouts, 16);
    HPS_ASSERT_EQ(mi.busy, 0);
    batch_free(&b);
}

/* A slow coordinator: the slot it serves is abandoned, the others taken
 * back, all at the one deadline; the late answer never reaches the caller. */
static void test_many_late_answer(void **state)
{
    struct fixture *f = *state;
    uint32_t ids[NT];
    make_tables(f, ids);
    HPS_ASSERT_OK(hps_shmdb_missq_init(f->db, 8, 8192));
    pid_t srv = start_server_fn(f->name, 3000, 300, serve_tables); /* 300 ms a request */
    t_sleep_ns(50000000);
    struct batch b = {0};
    for (uint32_t i = 0; i < 3; i++)
        batch_add(&b, ids[i], 6);
    uint64_t t0 = t_now_ns();
    HPS_ASSERT_ERR(hps_shmdb_miss_lookup_many(f->db, b.req, b.nreq, 100), HPS_ETIMEDOUT);
    HPS_ASSERT_LT(t_now_ns() - t0, 250000000ULL);
    t_sleep_ns(400000000); /* the answer arrives after the deadline */
    for (size_t r = 0; r < b.nreq; r++) {
        HPS_ASSERT_EQ(b.req[r].rc, HPS_ETIMEDOUT);
        HPS_ASSERT_EQ(batch_check(&b, r, 0), 0);
    }
    wait_in_use_zero(f); /* the abandoned slot, freed by the server when done */
    hps_missq_info_t mi;
    HPS_ASSERT_OK(hps_shmdb_miss_stats(f->db, &mi));
    HPS_ASSERT_EQ(mi.timeouts, 3);
    stop(srv);
    batch_free(&b);
}

/* More chunks than slots: answered in waves through the call's own slots,
 * every request exact, none busy. */
static void test_many_more_than_slots(void **state)
{
    struct fixture *f = *state;
    uint32_t ids[NT];
    for (uint32_t i = 0; i < NT; i++) { /* all like the fixture's table: 112 keys a slab */
        char name[16];
        snprintf(name, sizeof(name), "s%u", i);
        hps_table_spec_t s = t_spec("mq", name, DIM, 8, 1, UINT64_MAX, HPS_EVICT_RANDOM, 0.8);
        HPS_ASSERT_OK(hps_shmdb_table_create(f->db, &s, &ids[i]));
        g_dim[ids[i]] = DIM;
        g_kb[ids[i]] = 8;
    }
    HPS_ASSERT_OK(hps_shmdb_missq_init(f->db, 4, 8192));
    pid_t srv = start_server_fn(f->name, 5000, 0, serve_tables);
    struct batch b = {0};
    for (uint32_t i = 0; i < NT; i++)
        batch_add(&b, ids[i], i == 3 ? 200 : 10); /* request 3: 2 chunks */
    uint64_t t0 = t_now_ns();
    HPS_ASSERT_OK(hps_shmdb_miss_lookup_many(f->db, b.req, b.nreq, 5000));
    HPS_ASSERT_LT(t_now_ns() - t0, 2000000000ULL); /* answered, not at the deadline */
    for (size_t r = 0; r < NT; r++) {
        HPS_ASSERT_EQ(b.req[r].rc, 0);
        HPS_ASSERT_EQ(b.req[r].hits, batch_check(&b, r, b.req[r].n));
        HPS_ASSERT_GT(b.req[r].hits, 0);
    }
    hps_missq_info_t mi;
    HPS_ASSERT_OK(hps_shmdb_miss_stats(f->db, &mi));
    HPS_ASSERT_EQ(mi.busy, 0);
    HPS_ASSERT_EQ(mi.served, NT + 1);
    HPS_ASSERT_EQ(mi.in_use, 0);
    stop(srv);
    batch_free(&b);
}

/* A caller holding its share of the queue's slots (no coordinator answering). */
struct hog {
    hps_shmdb_t *db;
    struct batch *b;
    hps_err_t rc;
};

static void *hog_run(void *arg)
{
    struct hog *h = arg;
    h->rc = hps_shmdb_miss_lookup_many(h->db, h->b->req, h->b->nreq, 1000);
    return NULL;
}

/* Start hogs[i] on tables first + 2i and + 2i + 1 (5 keys each), and wait
 * until the queue has `slots` slots in use. */
static void start_hogs(struct fixture *f, const uint32_t *ids, struct hog *hogs, struct batch *hb,
                       pthread_t *th, size_t n, uint32_t first, uint32_t slots)
{
    for (size_t i = 0; i < n; i++) {
        batch_add(&hb[i], ids[first + 2 * i], 5);
        batch_add(&hb[i], ids[first + 2 * i + 1], 5);
        hogs[i] = (struct hog){.db = f->db, .b = &hb[i]};
        HPS_ASSERT_EQ(pthread_create(&th[i], NULL, hog_run, &hogs[i]), 0);
    }
    hps_missq_info_t mi;
    for (int i = 0; i < 500; i++) {
        HPS_ASSERT_OK(hps_shmdb_miss_stats(f->db, &mi));
        if (mi.in_use == slots)
            break;
        usleep(1000);
    }
    HPS_ASSERT_EQ(mi.in_use, slots);
}

static void join_hogs(struct hog *hogs, struct batch *hb, pthread_t *th, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        HPS_ASSERT_ERR(hogs[i].rc, HPS_ETIMEDOUT);
        batch_free(&hb[i]);
    }
}

/* A queue (4 slots) full of two hogs' requests, each holding its half
 * until its 1 s deadline, and b, a request of 2 tables of 5 keys. */
struct full_queue {
    uint32_t ids[NT];
    struct batch hb[2], b;
    struct hog hogs[2];
    pthread_t th[2];
};

static void fill_queue(struct fixture *f, struct full_queue *q)
{
    *q = (struct full_queue){0};
    make_tables(f, q->ids);
    HPS_ASSERT_OK(hps_shmdb_missq_init(f->db, 4, 8192));
    start_hogs(f, q->ids, q->hogs, q->hb, q->th, 2, 0, 4);
    batch_add(&q->b, q->ids[5], 5);
    batch_add(&q->b, q->ids[6], 5);
}

/* A queue full of other callers' requests that are answered (a server
 * taking 200 ms per request): the call waits for a slot and is answered
 * within its deadline, instead of giving up at once (which answered every
 * key of a few concurrent large lookups with its default: scale audit). */
static void test_many_waits_for_slot(void **state)
{
    struct fixture *f = *state;
    struct full_queue q;
    fill_queue(f, &q);
    pid_t srv = start_server_fn(f->name, 5000, 200, serve_tables);
    HPS_ASSERT_OK(hps_shmdb_miss_lookup_many(f->db, q.b.req, q.b.nreq, 4000));
    for (size_t r = 0; r < 2; r++) {
        HPS_ASSERT_EQ(q.b.req[r].rc, 0);
        HPS_ASSERT_GT(q.b.req[r].hits, 0); /* the even keys, answered */
    }
    hps_missq_info_t mi;
    HPS_ASSERT_OK(hps_shmdb_miss_stats(f->db, &mi));
    HPS_ASSERT_EQ(mi.busy, 0);
    for (size_t i = 0; i < 2; i++)
        pthread_join(q.th[i], NULL), batch_free(&q.hb[i]);
    stop(srv);
    batch_free(&q.b);
}

/* A queue full of other callers' requests (two, each holding its half,
 * unanswered until their 1 s deadline): busy at this call's shorter
 * deadline, counted once per chunk. */
static void test_many_busy(void **state)
{
    struct fixture *f = *state;
    struct full_queue q;
    fill_queue(f, &q);
    uint64_t t0 = t_now_ns();
    HPS_ASSERT_ERR(hps_shmdb_miss_lookup_many(f->db, q.b.req, q.b.nreq, 300), HPS_EBUSY);
    HPS_ASSERT_GE(t_now_ns() - t0, 300000000ULL);
    HPS_ASSERT_LT(t_now_ns() - t0, 900000000ULL); /* before theirs: it gave up at its own */
    HPS_ASSERT_EQ(q.b.req[0].rc, HPS_EBUSY);
    HPS_ASSERT_EQ(q.b.req[1].rc, HPS_EBUSY);
    hps_missq_info_t mi;
    HPS_ASSERT_OK(hps_shmdb_miss_stats(f->db, &mi));
    HPS_ASSERT_EQ(mi.busy, 2);
    join_hogs(q.hogs, q.hb, q.th, 2);
    HPS_ASSERT_OK(hps_shmdb_miss_stats(f->db, &mi));
    HPS_ASSERT_EQ(mi.in_use, 0);
    batch_free(&q.b);
}

/* One caller with more chunks than half the queue holds only its half: a
 * second caller still finds slots (it waits for its answer, here until its
 * deadline, instead of being refused as busy). */
static void test_many_half_queue(void **state)
{
    struct fixture *f = *state;
    uint32_t ids[NT];
    make_tables(f, ids);
    HPS_ASSERT_OK(hps_shmdb_missq_init(f->db, 4, 8192));
    struct batch hb[1] = {{0}}, b = {0};
    struct hog hogs[1];
    pthread_t th[1];
    batch_add(&hb[0], ids[2], 5); /* 4 chunks: 2 posted, 2 in a second wave */
    batch_add(&hb[0], ids[3], 5);
    start_hogs(f, ids, hogs, hb, th, 1, 0, 2);
    batch_add(&b, ids[5], 5);
    batch_add(&b, ids[6], 5);
    HPS_ASSERT_ERR(hps_shmdb_miss_lookup_many(f->db, b.req, b.nreq, 100), HPS_ETIMEDOUT);
    HPS_ASSERT_EQ(b.req[0].rc, HPS_ETIMEDOUT);
    HPS_ASSERT_EQ(b.req[1].rc, HPS_ETIMEDOUT);
    hps_missq_info_t mi;
    HPS_ASSERT_OK(hps_shmdb_miss_stats(f->db, &mi));
    HPS_ASSERT_EQ(mi.busy, 0);
    join_hogs(hogs, hb, th, 1);
    HPS_ASSERT_OK(hps_shmdb_miss_stats(f->db, &mi));
    HPS_ASSERT_EQ(mi.in_use, 0);
    batch_free(&b);
}

/* Argument errors are per request; the others are still answered. */
static void test_many_errors(void **state)
{
    struct fixture *f = *state;
    uint32_t ids[NT];
    make_tables(f, ids);
    struct batch b = {0};
    batch_add(&b, ids[0], 3);
    /* No queue yet: every request, even an empty one, is HPS_ENOTFOUND. */
    batch_add(&b, ids[1], 0);
    HPS_ASSERT_ERR(hps_shmdb_miss_lookup_many(f->db, b.req, 2, 10), HPS_ENOTFOUND);
    HPS_ASSERT_EQ(b.req[0].rc, HPS_ENOTFOUND);
    HPS_ASSERT_EQ(b.req[1].rc, HPS_ENOTFOUND);
    HPS_ASSERT_EQ(batch_check(&b, 0, 0), 0); /* found zeroed at entry */
    HPS_ASSERT_OK(hps_shmdb_miss_lookup_many(f->db, NULL, 0, 10));
    HPS_ASSERT_ERR(hps_shmdb_miss_lookup_many(f->db, NULL, 1, 10), HPS_EINVAL);
    HPS_ASSERT_OK(hps_shmdb_missq_init(f->db, 8, 8192));
    pid_t srv = start_server_fn(f->name, 5000, 0, serve_tables);
    batch_add(&b, ids[2], 5);
    b.req[1].table = 9999; /* no such table */
    b.req[1].n = 0;
    const void *keys = b.req[2].keys;
    b.req[2].keys = NULL; /* n > 0 without keys */
    batch_add(&b, ids[3], 5);
    HPS_ASSERT_ERR(hps_shmdb_miss_lookup_many(f->db, b.req, b.nreq, 2000), HPS_ENOTFOUND);
    HPS_ASSERT_EQ(b.req[0].rc, 0);
    HPS_ASSERT_EQ(b.req[0].hits, batch_check(&b, 0, 3));
    HPS_ASSERT_EQ(b.req[1].rc, HPS_ENOTFOUND);
    HPS_ASSERT_EQ(b.req[2].rc, HPS_EINVAL);
    HPS_ASSERT_EQ(b.req[2].hits, 0);
    HPS_ASSERT_EQ(b.req[3].rc, 0);
    HPS_ASSERT_EQ(b.req[3].hits, batch_check(&b, 3, 5));
    b.req[2].keys = keys;
    stop(srv);
    batch_free(&b);
}

int main(void)
{
    t_install_cleanup();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_no_queue, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exact_answers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timeout_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_late_answer_discarded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_busy_and_reap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_coordinator_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_coordinator_restart_requeues, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_exact, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_chunked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_timeout_one_deadline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_late_answer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_more_than_slots, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_busy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_waits_for_slot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_half_queue, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_errors, setup, teardown),
    };
    return cmocka_run_group_tests_name("shmdb-missq", tests, NULL, NULL);
}
