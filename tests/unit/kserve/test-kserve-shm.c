/*
 * test-kserve-shm.c -- the system shared-memory extension over real TCP:
 * POSIX shared-memory objects created by the test are registered with the
 * server; KEYS / NUMKEYS are read from them and OUTPUT0 written into them.
 * Register / status / unregister semantics, every error with its status
 * and message, bounds against the registered size, unregistering while a
 * lookup is in flight, objects truncated after registration, the cap on
 * regions, and a server with client shared memory disabled.
 */
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <json-c/json.h>

#include "kstest.h"

#define OBJ_SIZE 4096

static struct ks_backend g_be;
static hps_kserve_t *g_srv;
static uint16_t g_port;

/* ------------------------------------------------------------------------ */
/* Shared-memory objects of the test                                         */
/* ------------------------------------------------------------------------ */

/** A POSIX shared-memory object created and mapped by the test. */
struct obj {
    char key[64];
    char *p;
    size_t size;
};

static void obj_make(struct obj *o, const char *tag, size_t size)
{
    snprintf(o->key, sizeof(o->key), "/hps_kst_%d_%s", (int)getpid(), tag);
    shm_unlink(o->key);
    int fd = shm_open(o->key, O_CREAT | O_EXCL | O_RDWR, 0600);
    KS_CHECK(fd >= 0, "shm_open %s: %s", o->key, strerror(errno));
    KS_CHECK(ftruncate(fd, (off_t)size) == 0, "ftruncate");
    o->p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    KS_CHECK(o->p != MAP_FAILED, "mmap");
    close(fd);
    o->size = size;
}

/* Resize the object under the test's own mapping (shrinking it makes the
 * mapped pages past the new end fault, in the server as here). */
static void obj_resize(struct obj *o, size_t size)
{
    int fd = shm_open(o->key, O_RDWR, 0);
    KS_CHECK(fd >= 0, "shm_open %s: %s", o->key, strerror(errno));
    KS_CHECK(ftruncate(fd, (off_t)size) == 0, "ftruncate");
    close(fd);
}

static void obj_free(struct obj *o)
{
    munmap(o->p, o->size);
    shm_unlink(o->key);
}

/* ------------------------------------------------------------------------ */
/* Requests                                                                  */
/* ------------------------------------------------------------------------ */

static void post(const char *path, const char *body, struct ks_resp *r)
{
    KS_CHECK(ks_http(g_port, "POST", path, NULL, body, body ? strlen(body) : 0, r) == 0,
             "transport %s", path);
}

static void get(const char *path, struct ks_resp *r)
{
    KS_CHECK(ks_http(g_port, "GET", path, NULL, NULL, 0, r) == 0, "transport %s", path);
}

/* Register and expect status st (message want for errors). */
static void reg(const char *name, const char *key, long long offset, long long size, int st,
                const char *want)
{
    char path[256], body[512];
    snprintf(path, sizeof(path), "/v2/systemsharedmemory/region/%s/register", name);
    snprintf(body, sizeof(body), "{\"key\":\"%s\",\"offset\":%lld,\"byte_size\":%lld}", key, offset,
             size);
    struct ks_resp r;
    post(path, body, &r);
    KS_EXPECT(&r, st, want);
    if (st == 200)
        KS_CHECK(r.body_len == 0, "empty body: %s", r.body);
    ks_resp_free(&r);
}

static void unreg(const char *name)
{
    char path[256];
    if (name)
        snprintf(path, sizeof(path), "/v2/systemsharedmemory/region/%s/unregister", name);
    else
        snprintf(path, sizeof(path), "/v2/systemsharedmemory/unregister");
    struct ks_resp r;
    post(path, NULL, &r);
    KS_EXPECT(&r, 200, NULL);
    ks_resp_free(&r);
}

/* GET status into a parsed array (caller puts it), expecting 200. */
static json_object *status_json(const char *name)
{
    char path[256];
    if (name)
        snprintf(path, sizeof(path), "/v2/systemsharedmemory/region/%s/status", name);
    else
        snprintf(path, sizeof(path), "/v2/systemsharedmemory/status");
    struct ks_resp r;
    get(path, &r);
    KS_EXPECT(&r, 200, NULL);
    json_object *j = json_tokener_parse(r.body);
    KS_CHECK(json_object_is_type(j, json_type_array), "array: %s", r.body);
    ks_resp_free(&r);
    return j;
}

static const char *jstr(json_object *o, const char *k)
{
    json_object *v = NULL;
    json_object_object_get_ex(o, k, &v);
    return v ? json_object_get_string(v) : "";
}

static int64_t jint(json_object *o, const char *k)
{
    json_object *v = NULL;
    json_object_object_get_ex(o, k, &v);
    return v ? json_object_get_int64(v) : -1;
}

/** Where one tensor of an inference request comes from or goes. */
struct shmref {
    const char *region; /* NULL: not in shared memory */
    long long size;
    long long offset; /* -1: parameter absent */
};

static void shm_params(char *buf, size_t cap, const struct shmref *s)
{
    int n = snprintf(buf, cap, "\"shared_memory_region\":\"%s\",\"shared_memory_byte_size\":%lld",
                     s->region, s->size);
    if (s->offset >= 0)
        snprintf(buf + n, cap - (size_t)n, ",\"shared_memory_offset\":%lld", s->offset);
}

/*
 * An hps_wdl request: KEYS [1, nkeys] and NUMKEYS [1, 2] from the given
 * regions; OUTPUT0 into out.region (extra: more output parameters) or as
 * JSON when out is NULL.
 */
static char *infer_body(size_t nkeys, const struct shmref *keys, const struct shmref *nk,
                        const struct shmref *out, const char *extra)
{
    static char buf[4096];
    char kp[256], np[256], op[512] = "";
    shm_params(kp, sizeof(kp), keys);
    shm_params(np, sizeof(np), nk);
    if (out) {
        shm_params(op, sizeof(op), out);
        snprintf(op + strlen(op), sizeof(op) - strlen(op), "%s", extra ? extra : "");
    }
    snprintf(buf, sizeof(buf),
             "{\"id\":\"s1\",\"inputs\":[{\"name\":\"KEYS\",\"shape\":[1,%zu],\"datatype\":"
             "\"INT64\",\"parameters\":{%s}},{\"name\":\"NUMKEYS\",\"shape\":[1,2],\"datatype\":"
             "\"INT32\",\"parameters\":{%s}}]%s%s%s}",
             nkeys, kp, np, out ? ",\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":{" : "", op,
             out ? "}}]" : "");
    return buf;
}

static void infer(const char *body, struct ks_resp *r)
{
    post("/v2/models/hps_wdl/infer", body, r);
}

/* Fill a region with WDL keys (k wide keys, then k*13 deep ones) and
 * NUMKEYS after them; returns the key count. */
static size_t put_wdl(char *p, size_t batch, size_t keys_off, size_t nk_off, int64_t *keys_copy)
{
    int32_t nk[2] = {(int32_t)(2 * batch), (int32_t)(26 * batch)};
    size_t n = (size_t)nk[0] + (size_t)nk[1];
    for (size_t i = 0; i < n; i++) {
        int64_t k = (int64_t)(ks_rand() >> 1) - (int64_t)(i * 7);
        keys_copy[i] = k;
        memcpy(p + keys_off + i * 8, &k, 8);
    }
    memcpy(p + nk_off, nk, sizeof(nk));
    return n;
}

/* The floats the fake backend returns for WDL keys. */
static void wdl_expected(const int64_t *keys, size_t batch, float *out)
{
    size_t o = 0, ki = 0;
    for (size_t i = 0; i < 2 * batch; i++, ki++)
        out[o++] = ks_value(0, keys[ki], 0);
    for (size_t i = 0; i < 26 * batch; i++, ki++)
        for (uint32_t j = 0; j < 16; j++)
            out[o++] = ks_value(1, keys[ki], j);
}

/* ------------------------------------------------------------------------ */
/* Fixtures                                                                  */
/* ------------------------------------------------------------------------ */

static int group_setup(void **state)
{
    (void)state;
    hps_kserve_options_t o;
    hps_kserve_options_init(&o);
    o.metrics_port = HPS_KSERVE_PORT_DISABLED;
    o.threads = 4;
    return ks_server_start(&o, &g_be, ks_vtable(&g_be), &g_srv, &g_port, NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    hps_kserve_destroy(g_srv);
    return 0;
}

static int test_setup(void **state)
{
    (void)state;
    atomic_store(&g_be.fail, 0);
    atomic_store(&g_be.delay_ms, 0);
    return 0;
}

static int test_teardown(void **state)
{
    (void)state;
    unreg(NULL);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                     */
/* ------------------------------------------------------------------------ */

static void test_metadata(void **state)
{
    (void)state;
    struct ks_resp r;
    get("/v2", &r);
    KS_EXPECT(&r, 200, NULL);
    KS_CHECK(strstr(r.body, "\"system_shared_memory\""), "%s", r.body);
    KS_CHECK(!strstr(r.body, "cuda_shared_memory"), "%s", r.body);
    ks_resp_free(&r);
}

static void test_register_status_unregister(void **state)
{
    (void)state;
    struct obj a, b;
    obj_make(&a, "a", OBJ_SIZE);
    obj_make(&b, "b", OBJ_SIZE);
    reg("zeta", a.key, 0, OBJ_SIZE, 200, NULL);
    reg("alpha", b.key, 4096 - 100, 100, 200, NULL);
    reg("zeta", b.key, 0, 8, 400, "shared memory region 'zeta' already in manager");
    json_object *all = status_json(NULL);
    KS_CHECK(json_object_array_length(all) == 2, "%s", json_object_to_json_string(all));
    json_object *e0 = json_object_array_get_idx(all, 0), *e1 = json_object_array_get_idx(all, 1);
    KS_CHECK(!strcmp(jstr(e0, "name"), "alpha") && !strcmp(jstr(e0, "key"), b.key) &&
                 jint(e0, "offset") == 4096 - 100 && jint(e0, "byte_size") == 100,
             "alpha: %s", json_object_to_json_string(e0));
    KS_CHECK(!strcmp(jstr(e1, "name"), "zeta") && jint(e1, "offset") == 0 &&
                 jint(e1, "byte_size") == OBJ_SIZE,
             "zeta: %s", json_object_to_json_string(e1));
    json_object_put(all);
    json_object *one = status_json("zeta");
    KS_CHECK(json_object_array_length(one) == 1 &&
                 !strcmp(jstr(json_object_array_get_idx(one, 0), "name"), "zeta"),
             "one");
    json_object_put(one);
    struct ks_resp r;
    get("/v2/systemsharedmemory/region/nope/status", &r);
    KS_EXPECT(&r, 404, "Unable to find system shared memory region: 'nope'");
    ks_resp_free(&r);
    unreg("zeta");
    unreg("zeta"); /* unknown: no-op */
    unreg("never-registered");
    get("/v2/systemsharedmemory/region/zeta/status", &r);
    KS_EXPECT(&r, 404, "Unable to find system shared memory region: 'zeta'");
    ks_resp_free(&r);
    reg("zeta", a.key, 8, 8, 200, NULL); /* the name is free again */
    unreg(NULL);
    json_object *none = status_json(NULL);
    KS_CHECK(json_object_array_length(none) == 0, "empty after unregister all");
    json_object_put(none);
    obj_free(&a);
    obj_free(&b);
}

static void test_register_errors(void **state)
{
    (void)state;
    struct obj a;
    obj_make(&a, "e", OBJ_SIZE);
    static const struct {
        const char *body;
        const char *want;
    } bad[] = {
        {"{\"offset\":0,\"byte_size\":8}", "Shared memory register request has no 'key' field"},
        {"{\"key\":\"/x\",\"offset\":0}",
         "Shared memory register request has no 'byte_size' field"},
        {"{\"key\":7,\"byte_size\":8}", "Unable to parse 'key'"},
        {"{\"key\":\"/x\",\"offset\":-1,\"byte_size\":8}", "Unable to parse 'offset'"},
        {"{\"key\":\"/x\",\"byte_size\":-8}", "Unable to parse 'byte_size'"},
        {"{\"key\":\"/x\",\"byte_size\":\"8\"}", "Unable to parse 'byte_size'"},
        {"{not json", "failed to parse the request JSON buffer"},
        {"", "failed to parse the request JSON buffer: unexpected end of JSON"},
        {"{\"key\":", "failed to parse the request JSON buffer: unexpected end of JSON"},
        {"[1]", "failed to parse the request JSON buffer"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct ks_resp r;
        post("/v2/systemsharedmemory/region/bad/register", bad[i].body, &r);
        KS_EXPECT(&r, 400, bad[i].want);
        ks_resp_free(&r);
    }
    const char *inval = "failed to register shared memory region 'bad': invalid args";
    reg("bad", a.key, 0, OBJ_SIZE + 1, 400, inval);
    reg("bad", a.key, 1, OBJ_SIZE, 400, inval);
    reg("bad", a.key, OBJ_SIZE + 8, 8, 400, inval);
    reg("bad", a.key, 0, 0, 400, inval);
    reg("bad", "///", 0, 8, 400, "not a valid shared memory key");
    reg("bad", "/triton_python_backend_shm_region_1", 0, 8, 400,
        "as the key contains the reserved prefix 'triton_python_backend_shm_region_'");
    /* a NUL inside the key would register the name before it */
    reg("bad", "/hps_kst_a\\u0000zz", 0, 8, 400,
        "key '/hps_kst_a\\\\0zz' as the key is not a valid");
    /* the server's own segments: OUTPUT0 would be written over the VDB */
    reg("bad", "/hps.demo", 0, 8, 400,
        "cannot register shared memory region 'bad' with key '/hps.demo' as the key names an "
        "HPS segment (prefix 'hps.' or '.hps.')");
    reg("bad", "//hps.x", 0, 8, 400, "names an HPS segment");
    /* one being built (published under hps.<name>), the coordinator's lock */
    reg("bad", "/.hps.demo.new", 0, 8, 400, "names an HPS segment");
    reg("bad", ".hps.demo.lock", 0, 8, 400, "names an HPS segment");
    reg("bad", "/hps_kst_does_not_exist", 0, 8, 500,
        "Unable to open shared memory region: '/hps_kst_does_not_exist'");
    json_object *none = status_json(NULL);
    KS_CHECK(json_object_array_length(none) == 0, "nothing registered by failures");
    json_object_put(none);
    reg("ok", a.key, OBJ_SIZE - 8, 8, 200, NULL); /* last 8 bytes: in bounds */
    obj_free(&a);
}

/* A JSON request with the same keys, for the reference floats. */
static void json_reference(const int64_t *keys, size_t n, size_t batch, float *want)
{
    wdl_expected(keys, batch, want);
    size_t cap = 200 + n * 24;
    char *body = malloc(cap);
    size_t w = (size_t)snprintf(body, cap,
                                "{\"inputs\":[{\"name\":\"KEYS\",\"shape\":[1,%zu],\"datatype\":"
                                "\"INT64\",\"data\":[",
                                n);
    for (size_t i = 0; i < n; i++)
        w += (size_t)snprintf(body + w, cap - w, "%s%lld", i ? "," : "", (long long)keys[i]);
    snprintf(body + w, cap - w,
             "]},{\"name\":\"NUMKEYS\",\"shape\":[1,2],\"datatype\":\"INT32\",\"data\":[%zu,%zu]}"
             "]}",
             2 * batch, 26 * batch);
    struct ks_resp r;
    infer(body, &r);
    free(body);
    KS_EXPECT(&r, 200, NULL);
    json_object *j = json_tokener_parse(r.body), *outs, *data;
    json_object_object_get_ex(j, "outputs", &outs);
    json_object_object_get_ex(json_object_array_get_idx(outs, 0), "data", &data);
    for (size_t i = 0; i < json_object_array_length(data); i++) {
        float f = strtof(json_object_get_string(json_object_array_get_idx(data, i)), NULL);
        KS_CHECK(memcmp(&f, &want[i], 4) == 0, "JSON float %zu", i);
    }
    json_object_put(j);
    ks_resp_free(&r);
}

/* The response of an inference whose OUTPUT0 went to region `name`. */
static void check_shm_response(const struct ks_resp *r, const char *name, size_t floats,
                               long long size, long long offset)
{
    char ct[64];
    KS_CHECK(ks_header(r, "Content-Type", ct, sizeof(ct)) && !strcmp(ct, "application/json"),
             "content type");
    KS_CHECK(!ks_header(r, "Inference-Header-Content-Length", ct, sizeof(ct)), "no binary");
    json_object *j = json_tokener_parse(r->body), *outs, *o, *params, *v;
    KS_CHECK(!strcmp(jstr(j, "id"), "s1"), "id");
    json_object_object_get_ex(j, "outputs", &outs);
    KS_CHECK(json_object_array_length(outs) == 1, "one output");
    o = json_object_array_get_idx(outs, 0);
    KS_CHECK(!strcmp(jstr(o, "name"), "OUTPUT0") && !strcmp(jstr(o, "datatype"), "FP32"), "o");
    KS_CHECK(!json_object_object_get_ex(o, "data", &v), "no data: %s", r->body);
    json_object_object_get_ex(o, "shape", &v);
    KS_CHECK(json_object_array_length(v) == 1 &&
                 json_object_get_int64(json_object_array_get_idx(v, 0)) == (int64_t)floats,
             "shape: %s", r->body);
    KS_CHECK(json_object_object_get_ex(o, "parameters", &params), "parameters");
    KS_CHECK(!strcmp(jstr(params, "shared_memory_region"), name) &&
                 jint(params, "shared_memory_byte_size") == size &&
                 (offset ? jint(params, "shared_memory_offset") == offset : true) &&
                 !json_object_object_get_ex(params, "binary_data_size", &v),
             "parameters: %s", r->body);
    json_object_put(j);
}

/* KEYS and NUMKEYS from one region, OUTPUT0 into another at out_off. */
static void shm_round_trip(size_t batch, size_t keys_off, size_t out_off, const char *extra)
{
    size_t n = 28 * batch, floats = 2 * batch + 26 * batch * 16;
    struct obj in, out;
    obj_make(&in, "in", OBJ_SIZE * 4);
    obj_make(&out, "out", OBJ_SIZE * 8);
    int64_t *keys = malloc(n * 8);
    float *want = malloc(floats * 4);
    size_t nk_off = keys_off + n * 8 + 4;
    put_wdl(in.p, batch, keys_off, nk_off, keys);
    memset(out.p, 0xAB, out.size);
    reg("in", in.key, 0, (long long)in.size, 200, NULL);
    reg("out", out.key, 0, (long long)out.size, 200, NULL);
    struct shmref k = {"in", (long long)n * 8, (long long)keys_off};
    struct shmref nk = {"in", 8, (long long)nk_off};
    long long osize = (long long)(floats * 4 + 12);
    struct shmref o = {"out", osize, (long long)out_off};
    struct ks_resp r;
    infer(infer_body(n, &k, &nk, &o, extra), &r);
    KS_EXPECT(&r, 200, NULL);
    check_shm_response(&r, "out", floats, osize, (long long)out_off);
    ks_resp_free(&r);
    json_reference(keys, n, batch, want);
    KS_CHECK(memcmp(out.p + out_off, want, floats * 4) == 0, "output bytes");
    KS_CHECK((unsigned char)out.p[out_off + floats * 4] == 0xAB, "nothing written past the end");
    KS_CHECK(out_off == 0 || (unsigned char)out.p[out_off - 1] == 0xAB, "nothing before");
    free(keys);
    free(want);
    unreg(NULL);
    obj_free(&in);
    obj_free(&out);
}

static void test_infer_shm(void **state)
{
    (void)state;
    shm_round_trip(10, 0, 0, ",\"binary_data\":false");
    shm_round_trip(3, 4, 6, NULL);  /* unaligned KEYS and OUTPUT0: copies */
    shm_round_trip(5, 16, 8, NULL); /* aligned, in place */
}

/* Request parameters binary_data_output: true still sends OUTPUT0 to shm;
 * JSON NUMKEYS mixes with shm KEYS; KEYS from an offset registration. */
static void test_infer_shm_mixed(void **state)
{
    (void)state;
    struct obj in, out;
    obj_make(&in, "mi", OBJ_SIZE);
    obj_make(&out, "mo", OBJ_SIZE);
    int64_t keys[28];
    put_wdl(in.p, 1, 64, 8, keys);
    reg("mi", in.key, 64, 28 * 8, 200, NULL); /* registered window starts at 64 */
    reg("mo", out.key, 0, OBJ_SIZE, 200, NULL);
    char body[1024];
    snprintf(
        body, sizeof(body),
        "{\"id\":\"s1\",\"parameters\":{\"binary_data_output\":true},\"inputs\":[{\"name\":"
        "\"KEYS\",\"shape\":[1,28],\"datatype\":\"INT64\",\"parameters\":{\"shared_memory_"
        "region\":\"mi\",\"shared_memory_byte_size\":224}},{\"name\":\"NUMKEYS\",\"shape\":"
        "[1,2],\"datatype\":\"INT32\",\"data\":[2,26]}],\"outputs\":[{\"name\":\"OUTPUT0\","
        "\"parameters\":{\"shared_memory_region\":\"mo\",\"shared_memory_byte_size\":1672}}]}");
    struct ks_resp r;
    infer(body, &r);
    KS_EXPECT(&r, 200, NULL);
    check_shm_response(&r, "mo", 418, 1672, 0);
    ks_resp_free(&r);
    float want[418];
    wdl_expected(keys, 1, want);
    KS_CHECK(memcmp(out.p, want, sizeof(want)) == 0, "output bytes");
    obj_free(&in);
    obj_free(&out);
}

static void expect_infer(const char *body, int st, const char *want)
{
    struct ks_resp r;
    infer(body, &r);
    KS_EXPECT(&r, st, want);
    ks_resp_free(&r);
}

static void test_infer_shm_errors(void **state)
{
    (void)state;
    struct obj a;
    obj_make(&a, "ie", OBJ_SIZE);
    int64_t keys[28];
    put_wdl(a.p, 1, 0, 512, keys);
    /* Registered: 600 bytes of a 4096-byte object. */
    reg("r", a.key, 0, 600, 200, NULL);
    struct shmref k = {"r", 224, 0}, nk = {"r", 8, 512}, o = {"r", 1672, -1};
    struct shmref kx = {"x", 224, 0};
    expect_infer(infer_body(28, &kx, &nk, NULL, NULL), 404,
                 "Unable to find shared memory region: 'x'");
    struct shmref ko = {"r", 224, 600};
    expect_infer(infer_body(28, &ko, &nk, NULL, NULL), 400,
                 "Invalid offset for shared memory region");
    struct shmref kb = {"r", 224, 400}; /* inside the object, past the registration */
    expect_infer(infer_body(28, &kb, &nk, NULL, NULL), 400,
                 "Invalid offset + byte size for shared memory region: 'r'");
    struct shmref km = {"r", 216, 0};
    expect_infer(infer_body(28, &km, &nk, NULL, NULL), 400,
                 "input byte size mismatch for input 'KEYS' for model 'hps_wdl'. Expected 224, "
                 "got 216");
    expect_infer(infer_body(28, &k, &nk, &o, NULL), 400,
                 "Invalid offset + byte size for shared memory region: 'r'");
    struct shmref small = {"r", 64, 0};
    expect_infer(infer_body(28, &k, &nk, &small, NULL), 500,
                 "shared memory size specified with the request for output 'OUTPUT0' (64 "
                 "bytes) should be at least 1672 bytes to hold the results");
    expect_infer(infer_body(28, &k, &nk, &small, ",\"binary_data\":true"), 400,
                 "Output can't set both 'shared_memory_region' and 'binary_data'");
    struct shmref ox = {"nope", 1672, 0};
    expect_infer(infer_body(28, &k, &nk, &ox, NULL), 404,
                 "Unable to find shared memory region: 'nope'");
    expect_infer("{\"inputs\":[{\"name\":\"KEYS\",\"shape\":[1,28],\"datatype\":\"INT64\","
                 "\"parameters\":{\"shared_memory_region\":\"r\"}}]}",
                 400, "Unable to parse 'shared_memory_byte_size'");
    expect_infer("{\"inputs\":[{\"name\":\"KEYS\",\"shape\":[1,28],\"datatype\":\"INT64\","
                 "\"parameters\":{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":224,"
                 "\"shared_memory_offset\":-8}}]}",
                 400, "Unable to parse 'shared_memory_offset'");
    expect_infer("{\"inputs\":[{\"name\":\"KEYS\",\"shape\":[1,28],\"datatype\":\"INT64\","
                 "\"data\":[1],\"parameters\":{\"shared_memory_region\":\"r\","
                 "\"shared_memory_byte_size\":224}}]}",
                 400, "Input must set only one of the following fields");
    expect_infer(infer_body(28, &k, &nk, NULL, NULL), 200, NULL); /* the valid one */
    obj_free(&a);
}

/* A client truncates its object after registering it: requests naming the
 * region get a 400 (the server used to die of SIGBUS reading KEYS or
 * writing OUTPUT0 in place), other requests are served, and once the
 * object is large enough again the region serves again. */
static void test_truncated(void **state)
{
    (void)state;
    struct obj a, o;
    obj_make(&a, "ti", OBJ_SIZE);
    obj_make(&o, "to", OBJ_SIZE);
    int64_t keys[28];
    put_wdl(a.p, 1, 0, 512, keys);
    reg("ti", a.key, 0, 600, 200, NULL);
    reg("to", o.key, 0, OBJ_SIZE, 200, NULL);
    struct shmref k = {"ti", 224, 0}, nk = {"ti", 8, 512}, out = {"to", 1672, 0};
    expect_infer(infer_body(28, &k, &nk, &out, NULL), 200, NULL);
    obj_resize(&a, 0);
    expect_infer(infer_body(28, &k, &nk, NULL, NULL), 400,
                 "shared memory region 'ti' was truncated: its key");
    obj_resize(&a, 599); /* one byte short of the registered window */
    expect_infer(infer_body(28, &k, &nk, NULL, NULL), 400,
                 "now holds 599 bytes, the registered "
                 "window ends at 600; register it again");
    obj_resize(&a, OBJ_SIZE);
    put_wdl(a.p, 1, 0, 512, keys); /* the pages came back zeroed */
    obj_resize(&o, 1000);
    expect_infer(infer_body(28, &k, &nk, &out, NULL), 400,
                 "shared memory region 'to' was truncated");
    struct ks_resp r;
    infer(infer_body(28, &k, &nk, NULL, NULL), &r); /* KEYS from the region again */
    KS_EXPECT(&r, 200, NULL);
    ks_resp_free(&r);
    json_object *st = status_json(NULL); /* both still registered */
    KS_CHECK(json_object_array_length(st) == 2, "two regions listed");
    json_object_put(st);
    obj_free(&a);
    obj_free(&o);
}

/* At most 4,096 regions (each holds a descriptor and a mapping): the next
 * one gets a 400 that says so, and unregistering makes room again. */
static void test_region_cap(void **state)
{
    (void)state;
    struct rlimit rl;
    KS_CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0, "getrlimit");
    if (rl.rlim_cur < 4400 && rl.rlim_max >= 4400) {
        rl.rlim_cur = 4400;
        KS_CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0, "setrlimit");
    }
    if (rl.rlim_cur < 4400) {
        printf("# region cap: skipped, RLIMIT_NOFILE hard limit %llu < 4400\n",
               (unsigned long long)rl.rlim_max);
        return;
    }
    struct obj a;
    obj_make(&a, "cap", OBJ_SIZE);
    char name[32];
    for (int i = 0; i < 4096; i++) {
        snprintf(name, sizeof(name), "c%04d", i);
        reg(name, a.key, i % 512, 8, 200, NULL);
    }
    reg("c4096", a.key, 0, 8, 400,
        "cannot register shared memory region 'c4096': 4096 regions are registered, the most "
        "this server holds; unregister some first");
    unreg("c0007");
    reg("c4096", a.key, 0, 8, 200, NULL);
    json_object *st = status_json(NULL);
    KS_CHECK(json_object_array_length(st) == 4096, "4096 regions listed");
    json_object_put(st);
    unreg(NULL);
    reg("again", a.key, 0, 8, 200, NULL);
    obj_free(&a);
}

/** A request run on its own thread. */
struct flight {
    const char *body;
    struct ks_resp r;
};

static void *flight_run(void *p)
{
    struct flight *f = p;
    infer(f->body, &f->r);
    return NULL;
}

static void wait_entered(uint64_t before)
{
    for (int i = 0; i < 2000 && atomic_load(&g_be.entered) == before; i++)
        usleep(1000);
    KS_CHECK(atomic_load(&g_be.entered) > before, "lookup started");
}

static void test_unregister_inflight(void **state)
{
    (void)state;
    struct obj in, out;
    obj_make(&in, "fi", OBJ_SIZE);
    obj_make(&out, "fo", OBJ_SIZE);
    int64_t keys[28];
    put_wdl(in.p, 1, 0, 512, keys);
    reg("fi", in.key, 0, OBJ_SIZE, 200, NULL);
    reg("fo", out.key, 0, OBJ_SIZE, 200, NULL);
    struct shmref k = {"fi", 224, 0}, nk = {"fi", 8, 512}, o = {"fo", 1672, 8};
    struct flight f = {.body = strdup(infer_body(28, &k, &nk, &o, NULL))};
    atomic_store(&g_be.delay_ms, 400);
    uint64_t before = atomic_load(&g_be.entered);
    pthread_t th;
    KS_CHECK(pthread_create(&th, NULL, flight_run, &f) == 0, "thread");
    wait_entered(before);
    unreg("fo");
    unreg(NULL);
    json_object *none = status_json(NULL);
    KS_CHECK(json_object_array_length(none) == 0, "gone from the table at once");
    json_object_put(none);
    reg("fo", in.key, 0, 64, 200, NULL); /* the name is reusable meanwhile */
    pthread_join(th, NULL);
    KS_EXPECT(&f.r, 200, NULL);
    check_shm_response(&f.r, "fo", 418, 1672, 8);
    float want[418];
    wdl_expected(keys, 1, want);
    KS_CHECK(memcmp(out.p + 8, want, sizeof(want)) == 0, "output written before the unmap");
    ks_resp_free(&f.r);
    free((void *)f.body);
    obj_free(&in);
    obj_free(&out);
}

/* Many requests racing register / unregister cycles: no crash, each
 * answer is 200 or a clean 404. */
static void test_unregister_race(void **state)
{
    (void)state;
    struct obj in;
    obj_make(&in, "race", OBJ_SIZE);
    int64_t keys[28];
    put_wdl(in.p, 1, 0, 512, keys);
    struct shmref k = {"race", 224, 0}, nk = {"race", 8, 512};
    char *body = strdup(infer_body(28, &k, &nk, NULL, NULL));
    atomic_store(&g_be.delay_ms, 5);
    enum { N = 8 };
    struct flight f[N];
    pthread_t th[N];
    for (int round = 0; round < 5; round++) {
        reg("race", in.key, 0, OBJ_SIZE, 200, NULL);
        for (int i = 0; i < N; i++) {
            f[i].body = body;
            KS_CHECK(pthread_create(&th[i], NULL, flight_run, &f[i]) == 0, "thread");
        }
        usleep(2000 * (unsigned)round);
        unreg("race");
        for (int i = 0; i < N; i++) {
            pthread_join(th[i], NULL);
            KS_CHECK(f[i].r.status == 200 || f[i].r.status == 404, "status %d: %s", f[i].r.status,
                     f[i].r.body);
            ks_resp_free(&f[i].r);
        }
    }
    free(body);
    obj_free(&in);
}

static void test_disabled(void **state)
{
    (void)state;
    hps_kserve_options_t o;
    hps_kserve_options_init(&o);
    o.http_port = 0;
    o.metrics_port = HPS_KSERVE_PORT_DISABLED;
    o.disable_client_shm = true;
    hps_kserve_backend_t vt = ks_vtable(&g_be);
    hps_kserve_t *s;
    uint16_t port;
    KS_OK(hps_kserve_create(&o, ks_models, KS_NUM_MODELS, &vt, &s));
    KS_OK(hps_kserve_start(s));
    KS_OK(hps_kserve_ports(s, &port, NULL));
    struct ks_resp r;
    KS_CHECK(ks_http(port, "GET", "/v2/systemsharedmemory/status", NULL, NULL, 0, &r) == 0, "t");
    KS_EXPECT(&r, 501, "Shared memory registration is disabled");
    ks_resp_free(&r);
    const char *reg_body = "{\"key\":\"/x\",\"byte_size\":8}";
    KS_CHECK(ks_http(port, "POST", "/v2/systemsharedmemory/region/a/register", NULL, reg_body,
                     strlen(reg_body), &r) == 0,
             "t");
    KS_EXPECT(&r, 501, "Shared memory registration is disabled");
    ks_resp_free(&r);
    KS_CHECK(ks_http(port, "GET", "/v2", NULL, NULL, 0, &r) == 0, "t");
    KS_CHECK(r.status == 200 && !strstr(r.body, "shared_memory"), "%s", r.body);
    ks_resp_free(&r);
    struct shmref k = {"a", 224, 0}, nk = {"a", 8, 512};
    const char *body = infer_body(28, &k, &nk, NULL, NULL);
    KS_CHECK(ks_http(port, "POST", "/v2/models/hps_wdl/infer", NULL, body, strlen(body), &r) == 0,
             "t");
    KS_EXPECT(&r, 404, "Unable to find shared memory region: 'a'");
    ks_resp_free(&r);
    hps_kserve_destroy(s);
}

/* Regions still registered at destroy are unmapped (ASan: no leak). */
static void test_destroy_with_regions(void **state)
{
    (void)state;
    hps_kserve_options_t o;
    hps_kserve_options_init(&o);
    o.http_port = 0;
    o.metrics_port = HPS_KSERVE_PORT_DISABLED;
    hps_kserve_backend_t vt = ks_vtable(&g_be);
    hps_kserve_t *s;
    uint16_t port;
    KS_OK(hps_kserve_create(&o, ks_models, KS_NUM_MODELS, &vt, &s));
    KS_OK(hps_kserve_start(s));
    KS_OK(hps_kserve_ports(s, &port, NULL));
    struct obj a;
    obj_make(&a, "d", OBJ_SIZE);
    char body[256];
    snprintf(body, sizeof(body), "{\"key\":\"%s\",\"byte_size\":64}", a.key);
    struct ks_resp r;
    KS_CHECK(ks_http(port, "POST", "/v2/systemsharedmemory/region/d/register", NULL, body,
                     strlen(body), &r) == 0,
             "t");
    KS_EXPECT(&r, 200, NULL);
    ks_resp_free(&r);
    hps_kserve_destroy(s);
    obj_free(&a);
}

/* A FIFO under /dev/shm as the key: a 400 naming the key, at once (a
 * read-only open of it used to wait for a writer; read-write, mmap failed
 * with a 500).  alarm() turns a hang into a failure. */
static void test_register_fifo(void **state)
{
    (void)state;
    char key[64], path[96], want[256];
    snprintf(key, sizeof(key), "/hps_kst_%d_fifo", (int)getpid());
    snprintf(path, sizeof(path), "/dev/shm%s", key);
    unlink(path);
    KS_CHECK(mkfifo(path, 0600) == 0, "mkfifo %s: %s", path, strerror(errno));
    snprintf(want, sizeof(want),
             "cannot register shared memory region 'ff' with key '%s' as the key is not a shared "
             "memory object (a FIFO)",
             key);
    alarm(10);
    reg("ff", key, 0, 8, 400, want);
    KS_CHECK(chmod(path, 0444) == 0, "chmod"); /* read-only: the O_RDONLY retry when not root */
    reg("ff", key, 0, 8, 400, want);
    alarm(0);
    json_object *none = status_json(NULL);
    KS_CHECK(json_object_array_length(none) == 0, "the FIFO was not registered");
    json_object_put(none);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_metadata, test_setup, test_teardown),
        cmocka_unit_test_setup_teardown(test_register_status_unregister, test_setup, test_teardown),
        cmocka_unit_test_setup_teardown(test_register_errors, test_setup, test_teardown),
        cmocka_unit_test_setup_teardown(test_register_fifo, test_setup, test_teardown),
        cmocka_unit_test_setup_teardown(test_infer_shm, test_setup, test_teardown),
        cmocka_unit_test_setup_teardown(test_infer_shm_mixed, test_setup, test_teardown),
        cmocka_unit_test_setup_teardown(test_infer_shm_errors, test_setup, test_teardown),
        cmocka_unit_test_setup_teardown(test_truncated, test_setup, test_teardown),
        cmocka_unit_test_setup_teardown(test_region_cap, test_setup, test_teardown),
        cmocka_unit_test_setup_teardown(test_unregister_inflight, test_setup, test_teardown),
        cmocka_unit_test_setup_teardown(test_unregister_race, test_setup, test_teardown),
        cmocka_unit_test_setup_teardown(test_disabled, test_setup, test_teardown),
        cmocka_unit_test_setup_teardown(test_destroy_with_regions, test_setup, test_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
