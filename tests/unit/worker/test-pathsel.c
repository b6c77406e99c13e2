/*
 * test-pathsel.c -- the per-request path choice of a GPU client
 * (worker/libhps/pathsel.c, compiled into this test; [worker] lookup_path):
 * forced paths; in auto mode the GPU path measured first, then the fetch
 * path, then the faster of the two with the other re-measured on exactly
 * one call in 32; the estimate: the least of the first 8 samples, then a
 * mean of weight 1/8 over samples clipped to twice it; sizes in other
 * power-of-two buckets keep their own choice; the path counters; calls
 * whose keys are all of one table decided by that table's estimates,
 * calls over several tables by the model's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "internal.h"

static hps_conf_t conf;
static hps_client_t cl;

#define NT 3 /* tables of the test's model */

static client_model_t *fresh(hps_conf_lookup_path_t mode)
{
    static client_model_t m;
    static client_pathsel_t tpath[NT];
    memset(&m, 0, sizeof(m));
    memset(tpath, 0, sizeof(tpath));
    m.tpath = tpath;
    memset(&conf, 0, sizeof(conf));
    conf.worker.lookup_path = mode;
    cl.conf = &conf;
    return &m;
}

/* How many of n calls of nk keys, decided by ps, choose the GPU path. */
static int gpu_calls_by(client_pathsel_t *ps, size_t nk, int n)
{
    int g = 0;
    for (int i = 0; i < n; i++)
        g += hps__client_path_gpu(&cl, ps, nk);
    return g;
}

/* The same for calls over several tables (the model's estimates). */
static int gpu_calls(client_model_t *m, size_t nk, int n)
{
    return gpu_calls_by(&m->path, nk, n);
}

static void record(client_model_t *m, size_t nk, bool gpu, uint64_t ns)
{
    hps__client_path_record(m, &m->path, nk, gpu, ns);
}

static void test_forced(void **state)
{
    (void)state;
    client_model_t *m = fresh(HPS_CONF_LOOKUP_PATH_GPU);
    record(m, 26, false, 10);
    record(m, 26, true, 1000000);
    assert_int_equal(gpu_calls(m, 26, 200), 200);
    m = fresh(HPS_CONF_LOOKUP_PATH_CPU);
    record(m, 26, true, 10);
    record(m, 26, false, 1000000);
    assert_int_equal(gpu_calls(m, 26, 200), 0);
}

static void test_auto(void **state)
{
    (void)state;
    client_model_t *m = fresh(HPS_CONF_LOOKUP_PATH_AUTO);
    assert_true(hps__client_path_gpu(&cl, &m->path, 26)); /* nothing measured: the GPU path first */
    record(m, 26, true, 30000);
    assert_false(hps__client_path_gpu(&cl, &m->path, 26)); /* then the fetch path */
    record(m, 26, false, 9000);
    /* both measured: the fetch path, the GPU path once in 32 */
    assert_int_equal(gpu_calls(m, 26, 64), 2);
    assert_int_equal(gpu_calls(m, 26, 640), 20);
    /* 16..31 keys share the bucket; 1,664 keys have their own, unmeasured */
    assert_int_equal(gpu_calls(m, 16, 64), 2);
    assert_true(hps__client_path_gpu(&cl, &m->path, 1664));
    /* the GPU path's first call was slow (a graph captured): its next
     * samples, still among the first 8, replace the estimate */
    for (int i = 0; i < 40; i++)
        record(m, 26, true, 2000);
    assert_int_equal(m->path.ns[4][1], 2000);
    assert_int_equal(gpu_calls(m, 26, 64), 62);
    assert_int_equal(m->ctr.gpu_path, 41);
    assert_int_equal(m->ctr.cpu_path, 1);
}

static void test_mean(void **state)
{
    (void)state;
    client_model_t *m = fresh(HPS_CONF_LOOKUP_PATH_AUTO);
    record(m, 1, true, 1600);
    assert_int_equal(m->path.ns[0][1], 1600);
    for (int i = 0; i < 7; i++) /* the first 8: their least */
        record(m, 1, true, i == 3 ? 800 : 1000);
    assert_int_equal(m->path.ns[0][1], 800);
    record(m, 1, true, 1600); /* then the mean, weight 1/8 */
    assert_int_equal(m->path.ns[0][1], 800 - 100 + 200);
    record(m, 1, true, 100000); /* a stall counts as twice the estimate */
    assert_int_equal(m->path.ns[0][1], 900 - 112 + 225);
    record(m, 1, false, 0); /* a 0 ns call still counts as measured */
    assert_int_equal(m->path.ns[0][0], 1);
    record(m, (size_t)1 << 40, false, 5); /* beyond the last bucket: the last */
    assert_int_equal(m->path.ns[CLIENT_PATH_BUCKETS - 1][0], 5);
}

static void test_tables(void **state)
{
    (void)state;
    client_model_t *m = fresh(HPS_CONF_LOOKUP_PATH_AUTO);
    int32_t only1[NT] = {0, 26, 0}, only2[NT] = {0, 0, 26}, two[NT] = {26, 0, 26}, none[NT] = {0};
    client_pathsel_t *p1 = hps__client_pathsel(m, NT, only1);
    client_pathsel_t *p2 = hps__client_pathsel(m, NT, only2);
    assert_ptr_equal(p1, &m->tpath[1]);
    assert_ptr_equal(p2, &m->tpath[2]);
    assert_ptr_equal(hps__client_pathsel(m, NT, two), &m->path);
    assert_ptr_equal(hps__client_pathsel(m, NT, none), &m->path);
    assert_ptr_equal(hps__client_pathsel(m, 2, only1), &m->tpath[1]); /* nt counts */
    /* table 1 is sooner on the GPU, table 2 from the volatile DB, and a
     * call over both tables by what the model measured (nothing yet) */
    hps__client_path_record(m, p1, 26, true, 3000);
    hps__client_path_record(m, p1, 26, false, 9000);
    hps__client_path_record(m, p2, 26, true, 30000);
    hps__client_path_record(m, p2, 26, false, 9000);
    assert_int_equal(gpu_calls_by(p1, 26, 64), 62);
    assert_int_equal(gpu_calls_by(p2, 26, 64), 2);
    assert_true(hps__client_path_gpu(&cl, &m->path, 52));
    assert_int_equal(m->path.ns[5][1], 0);
    /* the counters are the model's, whichever estimates decided */
    assert_int_equal(m->ctr.gpu_path, 2);
    assert_int_equal(m->ctr.cpu_path, 2);
    /* a model without per-table estimates decides every call by its own */
    m->tpath = NULL;
    assert_ptr_equal(hps__client_pathsel(m, NT, only1), &m->path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forced),
        cmocka_unit_test(test_auto),
        cmocka_unit_test(test_mean),
        cmocka_unit_test(test_tables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
