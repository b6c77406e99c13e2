/*
 * test-pathsel.c -- the per-request path choice of a GPU client
 * (worker/libhps/pathsel.c, compiled into this test; [worker] lookup_path):
 * forced paths; in auto mode the GPU path measured first, then the fetch
 * path, then the faster of the two with the other re-measured on exactly
 * one call in 32; the estimate: the least of the first 8 samples, then a
 * mean of weight 1/8 over samples clipped to twice it; sizes in other
 * power-of-two buckets keep their own choice; the path counters.
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

static client_model_t *fresh(hps_conf_lookup_path_t mode)
{
    static client_model_t m;
    memset(&m, 0, sizeof(m));
    memset(&conf, 0, sizeof(conf));
    conf.worker.lookup_path = mode;
    cl.conf = &conf;
    return &m;
}

/* How many of n calls of nk keys choose the GPU path. */
static int gpu_calls(client_model_t *m, size_t nk, int n)
{
    int g = 0;
    for (int i = 0; i < n; i++)
        g += hps__client_path_gpu(&cl, m, nk);
    return g;
}

static void test_forced(void **state)
{
    (void)state;
    client_model_t *m = fresh(HPS_CONF_LOOKUP_PATH_GPU);
    hps__client_path_record(m, 26, false, 10);
    hps__client_path_record(m, 26, true, 1000000);
    assert_int_equal(gpu_calls(m, 26, 200), 200);
    m = fresh(HPS_CONF_LOOKUP_PATH_CPU);
    hps__client_path_record(m, 26, true, 10);
    hps__client_path_record(m, 26, false, 1000000);
    assert_int_equal(gpu_calls(m, 26, 200), 0);
}

static void test_auto(void **state)
{
    (void)state;
    client_model_t *m = fresh(HPS_CONF_LOOKUP_PATH_AUTO);
    assert_true(hps__client_path_gpu(&cl, m, 26)); /* nothing measured: the GPU path first */
    hps__client_path_record(m, 26, true, 30000);
    assert_false(hps__client_path_gpu(&cl, m, 26)); /* then the fetch path */
    hps__client_path_record(m, 26, false, 9000);
    /* both measured: the fetch path, the GPU path once in 32 */
    assert_int_equal(gpu_calls(m, 26, 64), 2);
    assert_int_equal(gpu_calls(m, 26, 640), 20);
    /* 16..31 keys share the bucket; 1,664 keys have their own, unmeasured */
    assert_int_equal(gpu_calls(m, 16, 64), 2);
    assert_true(hps__client_path_gpu(&cl, m, 1664));
    /* the GPU path's first call was slow (a graph captured): its next
     * samples, still among the first 8, replace the estimate */
    for (int i = 0; i < 40; i++)
        hps__client_path_record(m, 26, true, 2000);
    assert_int_equal(m->path.ns[4][1], 2000);
    assert_int_equal(gpu_calls(m, 26, 64), 62);
    assert_int_equal(m->ctr.gpu_path, 41);
    assert_int_equal(m->ctr.cpu_path, 1);
}

static void test_mean(void **state)
{
    (void)state;
    client_model_t *m = fresh(HPS_CONF_LOOKUP_PATH_AUTO);
    hps__client_path_record(m, 1, true, 1600);
    assert_int_equal(m->path.ns[0][1], 1600);
    for (int i = 0; i < 7; i++) /* the first 8: their least */
        hps__client_path_record(m, 1, true, i == 3 ? 800 : 1000);
    assert_int_equal(m->path.ns[0][1], 800);
    hps__client_path_record(m, 1, true, 1600); /* then the mean, weight 1/8 */
    assert_int_equal(m->path.ns[0][1], 800 - 100 + 200);
    hps__client_path_record(m, 1, true, 100000); /* a stall counts as twice the estimate */
    assert_int_equal(m->path.ns[0][1], 900 - 112 + 225);
    hps__client_path_record(m, 1, false, 0); /* a 0 ns call still counts as measured */
    assert_int_equal(m->path.ns[0][0], 1);
    hps__client_path_record(m, (size_t)1 << 40, false, 5); /* beyond the last bucket: the last */
    assert_int_equal(m->path.ns[CLIENT_PATH_BUCKETS - 1][0], 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forced),
        cmocka_unit_test(test_auto),
        cmocka_unit_test(test_mean),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
