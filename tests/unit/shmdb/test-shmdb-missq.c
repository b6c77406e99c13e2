/*
 * test-shmdb-missq.c -- the miss queue between workers and the coordinator:
 * answers are exact, a full queue answers busy at once, a request without a
 * server times out within its deadline, a late answer never reaches the
 * caller, and the slots of dead workers and of a dead coordinator are
 * reclaimed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
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

/* A child process that attaches and serves for ms milliseconds. */
static pid_t start_server(const char *name, uint64_t ms, uint64_t delay_ms)
{
    pid_t pid = t_fork();
    if (pid == 0) {
        t_child_mode();
        hps_shmdb_t *db;
        if (hps_shmdb_attach(name, NULL, &db) != 0)
            _exit(T_CHILD_FAIL);
        uint64_t end = t_now_ns() + ms * 1000000ULL;
        while (t_now_ns() < end)
            hps_shmdb_miss_serve(db, 20, serve_even, delay_ms ? &delay_ms : NULL, NULL);
        hps_shmdb_detach(db);
        _exit(0);
    }
    return pid;
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

/* All slots taken by a dead worker: busy at once; reaping frees them. */
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
    HPS_ASSERT_ERR(hps_shmdb_miss_lookup(f->db, f->id, 1, &k, v, NULL, 5000, NULL), HPS_EBUSY);
    HPS_ASSERT_LT(t_now_ns() - t0, 100000000ULL); /* at once, not at the deadline */
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
    };
    return cmocka_run_group_tests_name("shmdb-missq", tests, NULL, NULL);
}
