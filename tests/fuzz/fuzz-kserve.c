/*
 * fuzz-kserve.c -- libFuzzer target: one KServe v2 request as the worker's
 * HTTP front end sees it after libmicrohttpd (worker/kserve_http.c): URL,
 * the Inference-Header-Content-Length header, the body (JSON, or a JSON
 * header followed by binary tensors).  Drives the router, the inference
 * request parser with shared-memory windows, the output store and the
 * response formatter, and the model repository's index and load / unload
 * bodies in explicit mode (worker/kserve_*.c, through kserve_internal.h).
 *
 * Input:  byte 0   flags: bit 0 model (0 "hps_wdl" batching, 1 "plain"),
 *                  bit 1 send Inference-Header-Content-Length,
 *                  bit 2 the request may name region "r0", bit 3 small
 *                  key limit (4 instead of 1000)
 *         URL      up to the first '\n'
 *         header   (bit 1) up to the next '\n'
 *         body     the rest, in a buffer of exactly its size
 * A seed is easiest to write with tests/fuzz/mkseed.py.
 *
 * One region "r0" (16 KiB, system shared memory) is registered at start
 * from an object this process creates and unlinks at once (the region keeps
 * its descriptor), and refilled before every input, so nothing is left in
 * /dev/shm and every run of an input is the same.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "worker/kserve_internal.h"

#define REGION_BYTES 16384

static uint32_t wdl_dims[2] = {1, 16};
static uint32_t wdl_kps[2] = {2, 26};
static char *wdl_names[2] = {"wide", "deep"};
static uint32_t plain_dims[3] = {4, 8, 3};
static uint32_t plain_kps[3] = {1, 1, 1};
static char *plain_names[3] = {"a", "b", "c"};

static struct hps__kserve_kmodel models[2] = {
    {.name = "hps_wdl",
     .name_len = 7,
     .version_num = 1,
     .num_tables = 2,
     .dims = wdl_dims,
     .table_names = wdl_names,
     .max_keys_per_sample = wdl_kps,
     .keys_per_sample = 28,
     .max_dim = 16,
     .max_batch_size = 1024,
     .device_id = 0},
    {.name = "plain",
     .name_len = 5,
     .version_num = 7,
     .num_tables = 3,
     .dims = plain_dims,
     .table_names = plain_names,
     .max_keys_per_sample = plain_kps,
     .keys_per_sample = 3,
     .max_dim = 8,
     .max_batch_size = 0,
     .device_id = -1},
};

/* A backend in model control mode explicit, for the repository endpoints:
 * only the presence of model_control and the states matter to the parser. */
static hps_err_t fake_control(void *ctx, hps_model_op_t op, const char *model, char *msg,
                              size_t len)
{
    (void)ctx, (void)op, (void)model, (void)msg, (void)len;
    return 0;
}

static hps_model_state_t fake_state(void *ctx, size_t mi, bool *ret_served)
{
    (void)ctx;
    *ret_served = mi == 0;
    return mi == 0 ? HPS_MODEL_READY : HPS_MODEL_UNLOADED;
}

static const hps_kserve_backend_t backend = {.model_control = fake_control,
                                             .model_state = fake_state};

/* The repository endpoints: the index, and load / unload bodies. */
static void run_repo(const struct hps__kserve_route *r, const char *body, size_t len)
{
    hps__kserve_kerr_t err;
    hps__kserve_text_t t;
    hps__kserve_text_init(&t);
    if (r->kind == HPS__KSERVE_R_REPO_INDEX) {
        (void)hps__kserve_repo_index(models, 2, &backend, true, body, len, NULL, &t, &err);
    } else if (r->kind == HPS__KSERVE_R_REPO_LOAD || r->kind == HPS__KSERVE_R_REPO_UNLOAD) {
        char name[128];
        (void)hps__kserve_repo_control(r, models, 2, &backend, body, len, name, sizeof(name), &err);
    }
    hps__kserve_text_fini(&t);
}

static struct hps__kserve_shm shm;
static unsigned char *region; /* our own mapping of r0's object */

/* Register r0 over a fresh object, then unlink the object. */
static void setup(void)
{
    char key[64];
    snprintf(key, sizeof(key), "/hpsfuzz-kserve.%ld", (long)getpid());
    hps__kserve_shm_init(&shm, true, false);
    int fd = shm_open(key, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, REGION_BYTES) != 0) {
        perror("fuzz-kserve: shm_open");
        abort();
    }
    region = mmap(NULL, REGION_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    char body[160];
    int n = snprintf(body, sizeof(body), "{\"key\":\"%s\",\"offset\":0,\"byte_size\":%d}", key,
                     REGION_BYTES);
    hps__kserve_kerr_t err;
    int rc = hps__kserve_shm_register(&shm, "r0", body, (size_t)n, &err);
    shm_unlink(key);
    close(fd);
    if (region == MAP_FAILED || rc != 0) {
        fprintf(stderr, "fuzz-kserve: cannot register r0: %s\n", rc ? err.msg : "mmap");
        abort();
    }
}

/* r0: int64 keys 1.. at offset 0, int32 ones at 8192 (NUMKEYS), the rest 0. */
static void refill_region(void)
{
    for (int64_t i = 0; i < 1024; i++)
        memcpy(region + i * 8, &(int64_t){i + 1}, 8);
    for (int32_t i = 0; i < 1024; i++)
        memcpy(region + 8192 + i * 4, &(int32_t){1}, 4);
}

/* The next line of [*p, end) as a NUL-terminated copy (at most cap - 1). */
static void take_line(const uint8_t **p, const uint8_t *end, char *buf, size_t cap)
{
    const uint8_t *nl = memchr(*p, '\n', (size_t)(end - *p));
    size_t n = (size_t)((nl ? nl : end) - *p);
    size_t c = n < cap - 1 ? n : cap - 1;
    memcpy(buf, *p, c);
    buf[c] = '\0';
    *p += n + (nl != NULL);
}

static void run_infer(const struct hps__kserve_klimits *lim, const struct hps__kserve_kmodel *m,
                      const char *body, size_t len, const char *hlen)
{
    struct hps__kserve_infer_req req;
    hps__kserve_kerr_t err;
    hps__kserve_text_t t;
    hps__kserve_text_init(&t);
    if (hps__kserve_infer_parse(lim, m, body, len, hlen, &req, &err) != 0) {
        if (err.status < 400 || err.status > 599)
            abort(); /* every refusal has an HTTP error status */
        hps__kserve_resp_error(&t, err.msg);
        hps__kserve_text_fini(&t);
        return;
    }
    /* What the server checks before it lets the backend write out_len floats. */
    uint64_t want = 0;
    const int64_t *k = req.keys;
    for (uint32_t i = 0; i < m->num_tables; i++) {
        if (req.numkeys[i] < 0)
            abort();
        want += (uint64_t)req.numkeys[i] * m->dims[i];
    }
    if (want != req.out_len || req.num_keys > lim->max_keys)
        abort();
    float *out = malloc(req.out_len ? (size_t)req.out_len * sizeof(float) : 1);
    size_t o = 0;
    for (uint32_t i = 0; i < m->num_tables; i++)
        for (int32_t j = 0; j < req.numkeys[i]; j++, k++)
            for (uint32_t d = 0; d < m->dims[i]; d++)
                out[o++] = (float)(*k % 1000) + (float)d * 0.5f;
    if (hps__kserve_infer_store_output(&req, out, &err) == 0) {
        hps__kserve_resp_infer(&t, m, &req, req.out_shm ? NULL : out,
                               hps__kserve_kmodel_version(m));
    } else {
        hps__kserve_resp_error(&t, err.msg);
    }
    free(out);
    hps__kserve_text_fini(&t);
    hps__kserve_infer_req_fini(&req);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!region)
        setup();
    if (size < 1)
        return 0;
    const uint8_t *p = data + 1, *end = data + size;
    uint8_t flags = data[0];
    char url[512], hlen_buf[128];
    take_line(&p, end, url, sizeof(url));
    const char *hlen = NULL;
    if (flags & 2) {
        take_line(&p, end, hlen_buf, sizeof(hlen_buf));
        hlen = hlen_buf;
    }
    size_t len = (size_t)(end - p);
    char *body = malloc(len ? len : 1);
    memcpy(body, p, len);

    struct hps__kserve_klimits lim = {
        .max_keys = (flags & 8) ? 4 : 1000, .json_depth = 32, .shm = (flags & 4) ? &shm : NULL};
    refill_region();

    struct hps__kserve_route r;
    hps__kserve_route_parse(url, &r);
    (void)hps__kserve_route_method(r.kind);
    hps__kserve_kerr_t err;
    const struct hps__kserve_kmodel *m = &models[flags & 1];
    if (r.model) {
        long mi = hps__kserve_route_model(&r, models, 2, &backend, &err);
        if (mi >= 0)
            m = &models[mi];
    }
    if (r.kind == HPS__KSERVE_R_SHM_STATUS) {
        hps__kserve_text_t t;
        hps__kserve_text_init(&t);
        char *name = r.region ? strndup(r.region, r.region_len) : NULL;
        (void)hps__kserve_shm_status(&shm, r.cuda, name, &t, &err);
        free(name);
        hps__kserve_text_fini(&t);
    }
    run_repo(&r, body, len);
    run_infer(&lim, m, body, len, hlen);
    free(body);
    return 0;
}
