/*
 * client_check_errors.c -- client-check's "exact" checks of the failing
 * calls: bad indices, counts, locations, key types and NULL buffers,
 * unknown names, GPU calls on a host-only client, each with its own
 * message; hps_client_last_error() per thread; hps_client_open's errors.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client_check.h"

/* ---- exact: errors -------------------------------------------------------------- */

/* A thread that records its hps_client_last_error() before any call, then
 * fails a call of its own. */
typedef struct fresh {
    hps_client_t *c;
    char before[512];
    hps_err_t rc;
} fresh_t;

static void *fresh_thread(void *arg)
{
    fresh_t *f = arg;
    snprintf(f->before, sizeof(f->before), "%s", hps_client_last_error());
    hps_client_table_info_t ti;
    f->rc = hps_client_table_info(f->c, 0, UINT32_MAX, &ti);
    return NULL;
}

/* Before each call expected to fail, a failure with a known message, so
 * that a call that fails without setting its own message is caught. */
static hps_client_t *sentinel_client;
#define SENTINEL "sentinel_model_of_client_check"

static void set_sentinel(void)
{
    size_t x;
    (void)hps_client_model_find(sentinel_client, SENTINEL, &x);
}

static void expect_err_fn(const char *what, hps_err_t rc, hps_err_t want)
{
    const char *msg = hps_client_last_error();
    bool fresh = msg && msg[0] && !strstr(msg, SENTINEL);
    cc_ok(rc == want && fresh, "%s -> %s with its own message (got %d %s: \"%s\")", what,
          hps_err_name(want), rc, hps_err_name(rc), msg ? msg : "(null)");
}

#define expect_err(what, call, want)                                                               \
    do {                                                                                           \
        set_sentinel();                                                                            \
        hps_err_t rc_ = (call);                                                                    \
        expect_err_fn(what, rc_, want);                                                            \
    } while (0)

void cc_check_errors(hps_client_t *c, const char *config)
{
    const model_t *m = &cc_models[0];
    uint32_t T = m->num_tables;
    int64_t keys[4] = {cc_file_key(m, 0, 0), cc_file_key(m, 0, 1), 5, 6};
    int32_t numkeys[MAX_TABLES + 1];
    float *out = calloc((size_t)4 * 4096, sizeof(float));
    hps_client_table_info_t ti;
    hps_client_model_info_t mi_;
    hps_client_counters_t k;
    size_t found;
    uint32_t tfound;

    sentinel_client = c;
    for (uint32_t t = 0; t <= MAX_TABLES; t++)
        numkeys[t] = 0;
    numkeys[0] = 2;

    expect_err("hps_client_lookup_table model index = num_models",
               hps_client_lookup_table(c, cc_num_models, 0, 2, keys, HPS_KEY_INT64, HPS_HOST, out,
                                       HPS_HOST, NULL),
               HPS_EINVAL);
    expect_err("hps_client_lookup_table model index SIZE_MAX",
               hps_client_lookup_table(c, SIZE_MAX, 0, 2, keys, HPS_KEY_INT64, HPS_HOST, out,
                                       HPS_HOST, NULL),
               HPS_EINVAL);
    expect_err(
        "hps_client_lookup_table table index = num_tables",
        hps_client_lookup_table(c, 0, T, 2, keys, HPS_KEY_INT64, HPS_HOST, out, HPS_HOST, NULL),
        HPS_EINVAL);
    expect_err("hps_client_lookup_table table index UINT32_MAX",
               hps_client_lookup_table(c, 0, UINT32_MAX, 2, keys, HPS_KEY_INT64, HPS_HOST, out,
                                       HPS_HOST, NULL),
               HPS_EINVAL);
    expect_err("hps_client_lookup model index = num_models",
               hps_client_lookup(c, cc_num_models, 1, numkeys, keys, HPS_KEY_INT64, HPS_HOST, out,
                                 HPS_HOST, NULL),
               HPS_EINVAL);
    expect_err(
        "hps_client_lookup num_tables = num_tables + 1",
        hps_client_lookup(c, 0, T + 1, numkeys, keys, HPS_KEY_INT64, HPS_HOST, out, HPS_HOST, NULL),
        HPS_EINVAL);
    numkeys[0] = -1;
    expect_err(
        "hps_client_lookup numkeys {-1}",
        hps_client_lookup(c, 0, 1, numkeys, keys, HPS_KEY_INT64, HPS_HOST, out, HPS_HOST, NULL),
        HPS_EINVAL);
    if (T >= 2) {
        numkeys[0] = 3;
        numkeys[1] = -1;
        expect_err(
            "hps_client_lookup numkeys {3, -1} (sum 2)",
            hps_client_lookup(c, 0, 2, numkeys, keys, HPS_KEY_INT64, HPS_HOST, out, HPS_HOST, NULL),
            HPS_EINVAL);
        numkeys[1] = 0;
    }
    numkeys[0] = INT32_MIN;
    expect_err(
        "hps_client_lookup numkeys {INT32_MIN}",
        hps_client_lookup(c, 0, 1, numkeys, keys, HPS_KEY_INT64, HPS_HOST, out, HPS_HOST, NULL),
        HPS_EINVAL);
    numkeys[0] = 2;
    expect_err("hps_client_lookup_table keys_loc 0 (device) on a host-only client",
               hps_client_lookup_table(c, 0, 0, 2, keys, HPS_KEY_INT64, 0, out, HPS_HOST, NULL),
               HPS_EINVAL);
    expect_err("hps_client_lookup_table out_loc 0 (device) on a host-only client",
               hps_client_lookup_table(c, 0, 0, 2, keys, HPS_KEY_INT64, HPS_HOST, out, 0, NULL),
               HPS_EINVAL);
    expect_err("hps_client_lookup keys_loc 0 (device) on a host-only client",
               hps_client_lookup(c, 0, 1, numkeys, keys, HPS_KEY_INT64, 0, out, HPS_HOST, NULL),
               HPS_EINVAL);
    expect_err("hps_client_lookup out_loc 0 (device) on a host-only client",
               hps_client_lookup(c, 0, 1, numkeys, keys, HPS_KEY_INT64, HPS_HOST, out, 0, NULL),
               HPS_EINVAL);
    expect_err("hps_client_lookup_table keys_loc -2",
               hps_client_lookup_table(c, 0, 0, 2, keys, HPS_KEY_INT64, -2, out, HPS_HOST, NULL),
               HPS_EINVAL);
    expect_err(
        "hps_client_lookup_table key_type 7",
        hps_client_lookup_table(c, 0, 0, 2, keys, (hps_key_type_t)7, HPS_HOST, out, HPS_HOST, NULL),
        HPS_EINVAL);
    expect_err("hps_client_lookup key_type -1",
               hps_client_lookup(c, 0, 1, numkeys, keys, (hps_key_type_t)-1, HPS_HOST, out,
                                 HPS_HOST, NULL),
               HPS_EINVAL);
    expect_err(
        "hps_client_lookup_table keys NULL (2 keys)",
        hps_client_lookup_table(c, 0, 0, 2, NULL, HPS_KEY_INT64, HPS_HOST, out, HPS_HOST, NULL),
        HPS_EINVAL);
    expect_err(
        "hps_client_lookup_table out NULL (2 keys)",
        hps_client_lookup_table(c, 0, 0, 2, keys, HPS_KEY_INT64, HPS_HOST, NULL, HPS_HOST, NULL),
        HPS_EINVAL);
    expect_err("hps_client_lookup numkeys NULL",
               hps_client_lookup(c, 0, 1, NULL, keys, HPS_KEY_INT64, HPS_HOST, out, HPS_HOST, NULL),
               HPS_EINVAL);
    expect_err("hps_client_lookup_table n = 2^31 (over INT32_MAX)",
               hps_client_lookup_table(c, 0, 0, (size_t)1 << 31, keys, HPS_KEY_INT64, HPS_HOST, out,
                                       HPS_HOST, NULL),
               HPS_EINVAL);

    expect_err("hps_client_lookup_ex unknown flag bits 0xff",
               hps_client_lookup_ex(c, 0, 1, numkeys, keys, HPS_KEY_INT64, HPS_HOST, out, HPS_HOST,
                                    NULL, 0xffu),
               HPS_EINVAL);
    hps_model_state_t mstate;
    uint32_t version;
    hps_client_update_stats_t ustats;
    expect_err("hps_client_model_state model index SIZE_MAX",
               hps_client_model_state(c, SIZE_MAX, &mstate, NULL), HPS_EINVAL);
    expect_err("hps_client_model_version model index SIZE_MAX",
               hps_client_model_version(c, SIZE_MAX, &version), HPS_EINVAL);
    expect_err("hps_client_update_stats layer UINT32_MAX",
               hps_client_update_stats(c, UINT32_MAX, &ustats), HPS_EINVAL);
    expect_err("hps_client_refresh_models NULL client", hps_client_refresh_models(NULL, NULL),
               HPS_EINVAL);
    expect_err("hps_client_table_info model index = num_models",
               hps_client_table_info(c, cc_num_models, 0, &ti), HPS_EINVAL);
    expect_err("hps_client_table_info table index = num_tables",
               hps_client_table_info(c, 0, T, &ti), HPS_EINVAL);
    expect_err("hps_client_model_info model index = num_models",
               hps_client_model_info(c, cc_num_models, &mi_), HPS_EINVAL);
    expect_err("hps_client_counters model index = num_models",
               hps_client_counters(c, cc_num_models, &k), HPS_EINVAL);
    expect_err("hps_client_table_find model index = num_models",
               hps_client_table_find(c, cc_num_models, m->t[0].name, &tfound), HPS_EINVAL);
    expect_err("hps_client_table_find unknown table name",
               hps_client_table_find(c, 0, "no_such_table", &tfound), HPS_ENOTFOUND);
    expect_err("hps_client_model_find unknown model name",
               hps_client_model_find(c, "no_such_model", &found), HPS_ENOTFOUND);
    const char *msg = hps_client_last_error();
    cc_ok(strstr(msg, "no_such_model") && strstr(msg, m->name),
          "the HPS_ENOTFOUND message names the model and the known ones: \"%s\"", msg);

    /* GPU-only calls on a host-only client. */
    hps_client_cache_stats_t cs;
    hps_client_gpu_stats_t gs;
    expect_err("hps_client_cache_stats on a host-only client", hps_client_cache_stats(c, 0, 0, &cs),
               HPS_ENOTFOUND);
    expect_err("hps_client_gpu_stats on a host-only client", hps_client_gpu_stats(c, &gs),
               HPS_ENOTFOUND);
    expect_err("hps_client_host_register on a host-only client",
               hps_client_host_register(c, out, 4096), HPS_EUNSUPPORTED);

    /* hps_client_last_error is per thread: "" in a fresh thread, and the
     * main thread's message survives another thread's failure. */
    (void)hps_client_model_find(c, "main_thread_model", &found);
    char before[512];
    snprintf(before, sizeof(before), "%s", hps_client_last_error());
    fresh_t fr = {.c = c, .before = "(unset)", .rc = 0};
    pthread_t th;
    pthread_create(&th, NULL, fresh_thread, &fr);
    pthread_join(th, NULL);
    cc_ok(fr.before[0] == '\0',
          "hps_client_last_error() in a thread that never failed is \"\" (got \"%s\")", fr.before);
    cc_ok(fr.rc == HPS_EINVAL, "that thread's own failing call: %d", fr.rc);
    cc_ok(strstr(before, "main_thread_model") && !strcmp(before, hps_client_last_error()),
          "another thread's failure leaves this thread's message alone (\"%s\")",
          hps_client_last_error());

    /* Still exact after the failures. */
    batch_t b;
    uint64_t rng = 99;
    cc_make_batch(m, 0, 30, 5, 3, &rng, &b);
    const char *e = cc_check_table_lookup(c, 0, &b, HPS_KEY_INT64);
    cc_ok(!e, "the client is exact after the failed calls");
    if (e)
        cc_diag("%s", e);

    /* hps_client_open's errors. */
    hps_client_t *c2 = (hps_client_t *)0x1;
    char err[512];
    hps_err_t rc = hps_client_open(NULL, -1, &c2, err, sizeof(err));
    cc_ok(rc == HPS_EINVAL, "hps_client_open(NULL config) -> HPS_EINVAL (got %d)", rc);
    rc = hps_client_open(config, -1, NULL, err, sizeof(err));
    cc_ok(rc == HPS_EINVAL, "hps_client_open(ret NULL) -> HPS_EINVAL (got %d)", rc);
    err[0] = 0;
    rc = hps_client_open(config, -2, &c2, err, sizeof(err));
    cc_ok(rc == HPS_EINVAL, "hps_client_open(device -2) -> HPS_EINVAL (got %d: %s)", rc, err);
    /* A device that does not exist (no machine has 1024 GPUs): a host-only
     * client that still reports the ordinal asked for as its DeviceID. */
    err[0] = 0;
    hps_client_t *nd = NULL;
    rc = hps_client_open(config, 1023, &nd, err, sizeof(err));
    if (cc_ok(rc == 0 && nd, "hps_client_open(device 1023) succeeds (got %d: %s)", rc, err)) {
        cc_ok(hps_client_device(nd) == 1023 && hps_client_gpu_device(nd) == -1,
              "device 1023 that does not exist: hps_client_device 1023, hps_client_gpu_device -1 "
              "(got %d, %d)",
              hps_client_device(nd), hps_client_gpu_device(nd));
        cc_ok(hps_client_wait_ready(nd, 30000) == 0, "the host-only client gets ready");
        int32_t nk = 1;
        int64_t k1 = 1;
        expect_err("hps_client_lookup keys_loc 1023 (the device that does not exist)",
                   hps_client_lookup(nd, 0, 1, &nk, &k1, HPS_KEY_INT64, 1023, out, HPS_HOST, NULL),
                   HPS_EINVAL);
        hps_client_close(nd);
    }
    err[0] = 0;
    rc = hps_client_open("/nonexistent/hps-client-check.ini", -1, &c2, err, sizeof(err));
    cc_ok(rc < 0 && rc > -4096 && err[0],
          "hps_client_open(missing file) -> a negative errno with a "
          "message (got %d %s: %s)",
          rc, hps_err_name(rc), err);
    char path[] = "/tmp/client-check-XXXXXX.ini";
    int fd = mkstemps(path, 4);
    if (fd >= 0) {
        static const char bad[] = "[hps]\nsupportlonglong = perhaps\n";
        ssize_t w = write(fd, bad, sizeof(bad) - 1);
        close(fd);
        err[0] = 0;
        rc = w > 0 ? hps_client_open(path, -1, &c2, err, sizeof(err)) : -EIO;
        cc_ok(rc == HPS_ECONFIG && strstr(err, "supportlonglong"),
              "hps_client_open(bad INI) -> HPS_ECONFIG naming the key (got %d: %s)", rc, err);
        unlink(path);
    }
    rc = hps_client_open("/nonexistent/x.ini", -1, &c2, NULL, 0);
    cc_ok(rc < 0, "hps_client_open with err NULL, err_len 0 fails cleanly (got %d)", rc);
    hps_client_close(NULL);
    cc_ok(true, "hps_client_close(NULL) is a no-op");
    free(out);
}
