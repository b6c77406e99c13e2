/*
 * test-kserve-http-infer.c -- inference through the HTTP front end over real
 * TCP (in-process server, fake backend): JSON and binary tensors give
 * identical floats, the non-batching model, zero keys, every validation
 * error with its status and {"error": ...} body, chunked bodies over the
 * limit, backend failures and the statistics they leave, and random garbage
 * bodies, headers and request lines.
 */
#include "kshttp.h"

/* ------------------------------------------------------------------------ */
/* Inference                                                                 */
/* ------------------------------------------------------------------------ */

static void test_infer_json_binary_identical(void **state)
{
    (void)state;
    int64_t *keys;
    size_t n;
    int32_t nk[2];
    wdl_batch(10, &keys, &n, nk);
    keys[0] = INT64_MIN;
    keys[1] = INT64_MAX;
    struct output a, b, c, d;
    wdl_infer(keys, n, nk, (struct reqopt){.id = "7", .out_bin = -1, .bdo = -1},
              "/v2/models/hps_wdl/infer", &a);
    KS_CHECK(!a.binary, "json answer");
    KS_CHECK(strcmp(str_member(a.hdr, "id"), "7") == 0, "id echo");
    KS_CHECK(strcmp(str_member(a.hdr, "model_name"), "hps_wdl") == 0, "model_name");
    KS_CHECK(strcmp(str_member(a.hdr, "model_version"), "1") == 0, "model_version");
    KS_CHECK(param_i64(a.hdr, "NumSample") == 10, "NumSample");
    KS_CHECK(param_i64(a.hdr, "DeviceID") == 0, "DeviceID");
    KS_CHECK(a.n == 10 * 2 * 1 + 10 * 26 * 16, "4180 floats, got %zu", a.n);
    /* tritonclient's form: binary KEYS, JSON NUMKEYS, binary output. */
    wdl_infer(keys, n, nk, (struct reqopt){.keys_bin = true, .out_bin = 1, .bdo = -1},
              "/v2/models/hps_wdl/versions/1/infer", &b);
    KS_CHECK(b.binary, "binary answer");
    wdl_infer(keys, n, nk,
              (struct reqopt){
                  .keys_bin = true, .numkeys_bin = true, .out_bin = -1, .bdo = 1, .nested = true},
              "/v2/models/hps_wdl/infer", &c);
    KS_CHECK(c.binary, "binary_data_output");
    /* The per-output flag overrides binary_data_output. */
    wdl_infer(keys, n, nk,
              (struct reqopt){.numkeys_bin = true, .out_bin = 0, .bdo = 1, .nested = true},
              "/v2/models/hps_wdl/infer", &d);
    KS_CHECK(!d.binary, "binary_data false overrides");
    KS_CHECK(a.n == b.n && b.n == c.n && c.n == d.n, "lengths");
    KS_CHECK(memcmp(a.v, b.v, a.n * 4) == 0 && memcmp(b.v, c.v, a.n * 4) == 0 &&
                 memcmp(c.v, d.v, a.n * 4) == 0,
             "identical floats");
    output_free(&a);
    output_free(&b);
    output_free(&c);
    output_free(&d);
    free(keys);
}

/* The non-batching model: shapes without the leading 1, version path. */
static void test_infer_plain(void **state)
{
    (void)state;
    int64_t keys[6] = {5, -5, 100002, 100003, 0, 42};
    int32_t nk[3] = {2, 0, 4};
    struct reqopt o = {.keys_bin = true, .out_bin = 1, .bdo = -1};
    struct body b = build(keys, 6, nk, 3, &o);
    struct ks_resp r;
    post_infer("/v2/models/plain/versions/7/infer", &b, true, &r);
    struct output out;
    decode(&r, &out);
    check_values(1, keys, nk, &out);
    KS_CHECK(param_i64(out.hdr, "DeviceID") == -1, "DeviceID");
    KS_CHECK(param_i64(out.hdr, "NumSample") == 2, "NumSample = 6 / 3");
    KS_CHECK(!json_object_object_get_ex(out.hdr, "id", NULL), "no id");
    output_free(&out);
    ks_resp_free(&r);
    free(b.data);
}

/* Zero keys: answered without calling the backend, empty output. */
static void test_infer_empty(void **state)
{
    (void)state;
    const char *body = "{\"inputs\":[{\"name\":\"KEYS\",\"datatype\":\"INT64\",\"shape\":[1,0],"
                       "\"data\":[]},{\"name\":\"NUMKEYS\",\"datatype\":\"INT32\",\"shape\":[1,2],"
                       "\"data\":[0,0]}]}";
    uint64_t before = atomic_load(&g_be.lookups);
    struct ks_resp r;
    KS_CHECK(ks_http(g_port, "POST", "/v2/models/hps_wdl/infer", NULL, body, strlen(body), &r) == 0,
             "transport");
    struct output out;
    decode(&r, &out);
    KS_CHECK(out.n == 0, "empty");
    KS_CHECK(atomic_load(&g_be.lookups) == before, "backend not called");
    output_free(&out);
    ks_resp_free(&r);
}

/** One malformed request and what it must get. */
struct bad {
    const char *what;
    const char *path;
    const char *extra; /* headers */
    const char *json;  /* JSON header */
    size_t nbin;       /* bytes of 0x01 appended after the JSON */
    int hlen;          /* Inference-Header-Content-Length: -1 = JSON length, -2 = absent */
    int status;
    const char *msg;
};

static const struct bad bad_requests[] = {
    {"malformed JSON", P, NULL, "{\"inputs\":[", 0, -2, 400, "failed to parse the request JSON"},
    {"trailing comma", P, NULL, "{\"inputs\":[" K("[1,2,3]") "," NK ",]}", 0, -2, 400,
     "failed to parse"},
    {"not an object", P, NULL, "[1,2]", 0, -2, 400, "must be a JSON object"},
    {"single quotes", P, NULL, "{'inputs':[]}", 0, -2, 400, "single-quoted"},
    {"NaN", P, NULL, REQ(K("[1,NaN,3]"), NK), 0, -2, 400, "NaN"},
    {"int64 overflow", P, NULL, REQ(K("[1,9223372036854775808,3]"), NK), 0, -2, 400,
     "out of the int64 range"},
    {"int64 underflow", P, NULL, REQ(K("[1,-9223372036854775809,3]"), NK), 0, -2, 400,
     "out of the int64 range"},
    {"float key", P, NULL, REQ(K("[1,2.0,3]"), NK), 0, -2, 400, "not an INT64 value"},
    {"string key", P, NULL, REQ(K("[1,\"2\",3]"), NK), 0, -2, 400, "not an INT64 value"},
    {"no inputs", P, NULL, "{}", 0, -2, 400, "Unable to parse 'inputs'"},
    {"missing NUMKEYS", P, NULL, REQ1(K("[1,2,3]")), 0, -2, 400, "expected 2 inputs but got 1"},
    {"unknown input", P, NULL,
     REQ3(K("[1,2,3]"), NK, "{\"name\":\"X\",\"datatype\":\"INT32\",\"shape\":[1],\"data\":[1]}"),
     0, -2, 400, "unexpected inference input 'X'"},
    {"duplicate input", P, NULL, REQ3(K("[1,2,3]"), K("[1,2,3]"), NK), 0, -2, 400,
     "already exists"},
    {"wrong datatype", P, NULL,
     REQ("{\"name\":\"KEYS\",\"datatype\":\"INT32\",\"shape\":[1,3],\"data\":[1,2,3]}", NK), 0, -2,
     400, "data-type is 'INT32', but model 'hps_wdl' expects 'INT64'"},
    {"wrong rank", P, NULL,
     REQ("{\"name\":\"KEYS\",\"datatype\":\"INT64\",\"shape\":[3],\"data\":[1,2,3]}", NK), 0, -2,
     400, "unexpected shape for input 'KEYS'"},
    {"batch dim 2", P, NULL,
     REQ("{\"name\":\"KEYS\",\"datatype\":\"INT64\",\"shape\":[2,3],\"data\":[1,2,3,4,5,6]}", NK),
     0, -2, 400, "Expected [1,-1], got [2,3]"},
    {"negative dim", P, NULL,
     REQ("{\"name\":\"KEYS\",\"datatype\":\"INT64\",\"shape\":[1,-3],\"data\":[1,2,3]}", NK), 0, -2,
     400, "Unable to parse 'shape'"},
    {"shape vs data", P, NULL, REQ(K("[1,2]"), NK), 0, -2, 400, "Shape does not match"},
    {"shape vs data, more", P, NULL, REQ(K("[1,2,3,4]"), NK), 0, -2, 400, "Shape does not match"},
    {"NUMKEYS length", P, NULL,
     REQ(K("[1,2,3]"),
         "{\"name\":\"NUMKEYS\",\"datatype\":\"INT32\",\"shape\":[1,3],\"data\":[1,1,1]}"),
     0, -2, 400, "has 3 elements but model 'hps_wdl' has 2"},
    {"NUMKEYS sum", P, NULL,
     REQ(K("[1,2,3]"),
         "{\"name\":\"NUMKEYS\",\"datatype\":\"INT32\",\"shape\":[1,2],\"data\":[1,1]}"),
     0, -2, 400, "does not match the number of 'KEYS' (3)"},
    {"NUMKEYS negative", P, NULL,
     REQ(K("[1,2,3]"),
         "{\"name\":\"NUMKEYS\",\"datatype\":\"INT32\",\"shape\":[1,2],\"data\":[-1,4]}"),
     0, -2, 400, "negative key count -1"},
    {"NUMKEYS int32 range", P, NULL,
     REQ(K("[1,2,3]"),
         "{\"name\":\"NUMKEYS\",\"datatype\":\"INT32\",\"shape\":[1,2],\"data\":[1,4294967298]}"),
     0, -2, 400, "not an INT32 value"},
    {"data and binary", P, NULL,
     REQ("{\"name\":\"KEYS\",\"datatype\":\"INT64\",\"shape\":[1,3],\"data\":[1,2,3],"
         "\"parameters\":{\"binary_data_size\":24}}",
         NK),
     24, -1, 400, "Input must set only one of the following fields"},
    {"no data", P, NULL, REQ("{\"name\":\"KEYS\",\"datatype\":\"INT64\",\"shape\":[1,3]}", NK), 0,
     -2, 400, "But no field is set"},
    {"data and shm", P, NULL,
     REQ("{\"name\":\"KEYS\",\"datatype\":\"INT64\",\"shape\":[1,3],\"data\":[1,2,3],"
         "\"parameters\":{\"shared_memory_region\":\"r\"}}",
         NK),
     0, -2, 400, "set 'data' 'shared_memory_region'"},
    {"shm input", P, NULL,
     REQ("{\"name\":\"KEYS\",\"datatype\":\"INT64\",\"shape\":[1,3],"
         "\"parameters\":{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":24}}",
         NK),
     0, -2, 404, "Unable to find shared memory region: 'r'"},
    {"binary without header", P, NULL, REQ(KB(24), NK), 24, -2, 400,
     "must specify valid 'Infer-Header-Content-Length'"},
    {"binary short", P, NULL, REQ(KB(24), NK), 16, -1, 400, "expecting 8 additional bytes"},
    {"binary size mismatch", P, NULL, REQ(KB(16), NK), 16, -1, 400, "input byte size mismatch"},
    {"leftover bytes", P, NULL, REQ(KB(24), NK), 30, -1, 400,
     "unexpected additional input data for model 'hps_wdl'"},
    {"leftover, all JSON", P, NULL, REQ(K("[1,2,3]"), NK), 5, -1, 400,
     "unexpected additional input data"},
    {"bad binary_data_size", P, NULL, REQ(KB(-8), NK), 0, -1, 400,
     "Unable to parse 'binary_data_size'"},
    {"header out of range", P, NULL, REQ(K("[1,2,3]"), NK), 0, 100000, 400,
     "inference header size should be in range"},
    {"header not a number", P, "Inference-Header-Content-Length: abc\r\n", REQ(K("[1,2,3]"), NK), 0,
     -2, 400, "Unable to parse Inference-Header-Content-Length"},
    {"header zero (raw)", P, NULL, REQ(K("[1,2,3]"), NK), 0, 0, 400, "raw binary"},
    {"too many keys", P, NULL,
     REQ("{\"name\":\"KEYS\",\"datatype\":\"INT64\",\"shape\":[1,50001],"
         "\"parameters\":{\"binary_data_size\":400008}}",
         NK),
     400008, -1, 400, "more than the limit of 50000 keys"},
    {"batch too large", "/v2/models/hps_wdl/infer", NULL,
     REQ("{\"name\":\"KEYS\",\"datatype\":\"INT64\",\"shape\":[1,28700],"
         "\"parameters\":{\"binary_data_size\":229600}}",
         "{\"name\":\"NUMKEYS\",\"datatype\":\"INT32\",\"shape\":[1,2],\"data\":[2050,26650]}"),
     229600, -1, 501, "greater than max batch size"},
    {"unknown output", P, NULL,
     "{\"inputs\":[" K("[1,2,3]") "," NK "],\"outputs\":[{\"name\":\"Y\"}]}", 0, -2, 400,
     "unexpected inference output 'Y'"},
    {"output shm+binary", P, NULL,
     "{\"inputs\":[" K("[1,2,3]") "," NK "],\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":"
                                  "{\"binary_data\":true,\"shared_memory_region\":\"o\"}}]}",
     0, -2, 400, "Output can't set both 'shared_memory_region' and 'binary_data'"},
    {"output shm", P, NULL,
     "{\"inputs\":[" K("[1,2,3]") "," NK "],\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":"
                                  "{\"binary_data\":false,\"shared_memory_region\":\"o\",\"shared_"
                                  "memory_byte_size\":16}}]}",
     0, -2, 404, "Unable to find shared memory region: 'o'"},
    {"bad binary_data", P, NULL,
     "{\"inputs\":[" K("[1,2,3]") "," NK "],\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":"
                                  "{\"binary_data\":1}}]}",
     0, -2, 400, "Unable to parse 'binary_data'"},
    {"bad id", P, NULL, "{\"id\":7,\"inputs\":[" K("[1,2,3]") "," NK "]}", 0, -2, 400,
     "Unable to parse 'id'"},
    {"reserved parameter", P, NULL,
     "{\"parameters\":{\"triton_x\":1},\"inputs\":[" K("[1,2,3]") "," NK "]}", 0, -2, 400,
     "reserved for Triton usage"},
    {"bad binary_data_output", P, NULL,
     "{\"parameters\":{\"binary_data_output\":\"yes\"},\"inputs\":[" K("[1,2,3]") "," NK "]}", 0,
     -2, 400, "Unable to parse 'binary_data_output'"},
    {"bad parameter type", P, NULL,
     "{\"parameters\":{\"x\":[1]},\"inputs\":[" K("[1,2,3]") "," NK "]}", 0, -2, 400,
     "has invalid type"},
    {"too deep", P, NULL,
     "{\"inputs\":[{\"name\":\"KEYS\",\"datatype\":\"INT64\",\"shape\":[1,3],\"data\":"
     "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}]}",
     0, -2, 400, "nesting too deep"},
    {"unknown model", "/v2/models/x/infer", NULL, REQ(K("[1,2,3]"), NK), 0, -2, 400,
     "Request for unknown model: 'x' is not found"},
    {"unknown version", "/v2/models/hps_wdl/versions/2/infer", NULL, REQ(K("[1,2,3]"), NK), 0, -2,
     400, "Request for unknown model: 'hps_wdl' version 2 is not found"},
    {"gzip, not compressed", P, "Content-Encoding: gzip\r\n", REQ(K("[1,2,3]"), NK), 0, -2, 400,
     "failed to decompress the request body (Content-Encoding: gzip)"},
    {"unsupported coding", P, "Content-Encoding: br\r\n", REQ(K("[1,2,3]"), NK), 0, -2, 400,
     "unsupported Content-Encoding 'br'"},
    {"empty body", P, NULL, "", 0, -2, 400, "failed to parse the request JSON buffer"},
    {"body over the limit", P, NULL, REQ(K("[1,2,3]"), NK), MAX_BODY, -1, 400,
     "exceeds the maximum allowed value"},
};

static void run_bad(const struct bad *b)
{
    size_t jl = strlen(b->json);
    size_t len = jl + b->nbin;
    char *body = malloc(len + 1);
    memcpy(body, b->json, jl);
    memset(body + jl, 1, b->nbin);
    char extra[256];
    int n = snprintf(extra, sizeof(extra), "%s", b->extra ? b->extra : "");
    if (b->hlen != -2)
        snprintf(extra + n, sizeof(extra) - (size_t)n, "Inference-Header-Content-Length: %d\r\n",
                 b->hlen == -1 ? (int)jl : b->hlen);
    struct ks_resp r;
    KS_CHECK(ks_http(g_port, "POST", b->path, extra, body, len, &r) == 0, "%s: transport", b->what);
    if (r.status != b->status || !strstr(r.body, b->msg) || strncmp(r.body, "{\"error\":\"", 10))
        KS_FAIL("%s: status %d, body %.300s; expected %d with '%s'", b->what, r.status, r.body,
                b->status, b->msg);
    char ct[64];
    KS_CHECK(ks_header(&r, "Content-Type", ct, sizeof(ct)) && !strcmp(ct, "application/json"),
             "%s: error content type", b->what);
    json_object *j = json_tokener_parse(r.body);
    KS_CHECK(j && json_object_is_type(j, json_type_object), "%s: error body is JSON", b->what);
    json_object_put(j);
    ks_resp_free(&r);
    free(body);
}

static void test_infer_errors(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(bad_requests) / sizeof(bad_requests[0]); i++)
        run_bad(&bad_requests[i]);
    /* The server is still fine. */
    struct ks_resp r;
    KS_CHECK(ks_http(g_port, "GET", "/v2/health/live", NULL, NULL, 0, &r) == 0, "transport");
    KS_EXPECT(&r, 200, NULL);
    ks_resp_free(&r);
}

/* A chunked body that outgrows the limit: dropped as it arrives, 400. */
static void test_chunked_over_limit(void **state)
{
    (void)state;
    int fd = ks_connect(g_port);
    KS_CHECK(fd >= 0, "connect");
    const char *head = "POST " P " HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                       "Connection: close\r\n\r\n";
    ks_send_all(fd, head, strlen(head));
    size_t chunk = 64 * 1024;
    char *buf = malloc(chunk);
    memset(buf, ' ', chunk);
    char line[32];
    for (size_t sent = 0; sent <= MAX_BODY + chunk; sent += chunk) {
        snprintf(line, sizeof(line), "%zx\r\n", chunk);
        ks_send_all(fd, line, strlen(line));
        ks_send_all(fd, buf, chunk);
        ks_send_all(fd, "\r\n", 2);
    }
    ks_send_all(fd, "0\r\n\r\n", 5);
    struct ks_resp r;
    KS_CHECK(ks_read_resp(fd, &r) == 0, "response");
    KS_EXPECT(&r, 400, "exceeds the maximum allowed value");
    ks_resp_free(&r);
    close(fd);
    free(buf);
    /* A small chunked request works. */
    fd = ks_connect(g_port);
    const char *body = REQ(K("[1,2,3]"), NK);
    ks_send_all(fd, head, strlen(head));
    snprintf(line, sizeof(line), "%zx\r\n", strlen(body));
    ks_send_all(fd, line, strlen(line));
    ks_send_all(fd, body, strlen(body));
    ks_send_all(fd, "\r\n0\r\n\r\n", 7);
    KS_CHECK(ks_read_resp(fd, &r) == 0, "response");
    KS_EXPECT(&r, 200, NULL);
    ks_resp_free(&r);
    close(fd);
}

/* ------------------------------------------------------------------------ */
/* Backend failures and statistics                                           */
/* ------------------------------------------------------------------------ */

static json_object *model_stats_json(const char *model)
{
    char path[128];
    snprintf(path, sizeof(path), "/v2/models/%s/stats", model);
    struct ks_resp r;
    KS_CHECK(ks_http(g_port, "GET", path, NULL, NULL, 0, &r) == 0, "transport");
    KS_EXPECT(&r, 200, NULL);
    json_object *j = json_tokener_parse(r.body), *arr = NULL;
    KS_CHECK(j && json_object_object_get_ex(j, "model_stats", &arr), "%s", r.body);
    KS_CHECK(json_object_array_length(arr) == 1, "one model");
    json_object *m = json_object_get(json_object_array_get_idx(arr, 0));
    json_object_put(j);
    ks_resp_free(&r);
    return m;
}

static uint64_t stat_u64(json_object *m, const char *group, const char *name, const char *field)
{
    json_object *g = m, *v = NULL;
    if (group)
        KS_CHECK(json_object_object_get_ex(m, group, &g), "%s", group);
    if (field) {
        KS_CHECK(json_object_object_get_ex(g, name, &g), "%s", name);
        name = field;
    }
    KS_CHECK(json_object_object_get_ex(g, name, &v), "%s", name);
    return (uint64_t)json_object_get_int64(v);
}

static void test_backend_errors_and_stats(void **state)
{
    (void)state;
    json_object *before = model_stats_json("hps_wdl");
    uint64_t s0 = stat_u64(before, "inference_stats", "success", "count");
    uint64_t f0 = stat_u64(before, "inference_stats", "fail", "count");
    uint64_t i0 = stat_u64(before, NULL, "inference_count", NULL);
    uint64_t e0 = stat_u64(before, NULL, "execution_count", NULL);
    json_object_put(before);
    simple_infer(200, NULL);
    simple_infer(200, NULL);
    atomic_store(&g_be.fail, HPS_EBUSY);
    simple_infer(503, "lookup failed for model 'hps_wdl': busy");
    atomic_store(&g_be.fail, HPS_EIO);
    simple_infer(500, "fake backend I/O failure");
    atomic_store(&g_be.fail, -ENOMEM);
    simple_infer(500, "Cannot allocate memory");
    /* a model loaded but not served here (another shape): 500 with why */
    atomic_store(&g_be.fail, HPS_ENOTFOUND);
    simple_infer(500, "lookup failed for model 'hps_wdl'");
    /* unloaded between the route and the lookup: Triton's 400, as the route */
    atomic_store(&g_be.unload_on_fail, true);
    simple_infer(400, "Request for unknown model: 'hps_wdl' has no available versions");
    atomic_store(&g_be.unload_on_fail, false);
    atomic_store(&g_be.unloaded, false);
    atomic_store(&g_be.fail, 0);
    run_bad(&bad_requests[0]); /* a validation failure counts for the model too */
    json_object *after = model_stats_json("hps_wdl");
    KS_CHECK(stat_u64(after, "inference_stats", "success", "count") == s0 + 2, "success");
    KS_CHECK(stat_u64(after, "inference_stats", "fail", "count") == f0 + 6, "fail");
    KS_CHECK(stat_u64(after, "inference_stats", "compute_infer", "count") == s0 + 2, "infer");
    KS_CHECK(stat_u64(after, "inference_stats", "queue", "count") == s0 + 2, "queue");
    /* 3 keys / (2 + 26) keys per sample = 0 samples each. */
    KS_CHECK(stat_u64(after, NULL, "inference_count", NULL) == i0, "inference_count");
    KS_CHECK(stat_u64(after, NULL, "execution_count", NULL) == e0 + 2, "execution_count");
    KS_CHECK(stat_u64(after, NULL, "last_inference", NULL) > 1600000000000ull, "last_inference");
    KS_CHECK(stat_u64(after, "inference_stats", "success", "ns") > 0, "success ns");
    json_object_put(after);
    /* All models. */
    struct ks_resp r;
    KS_CHECK(ks_http(g_port, "GET", "/v2/models/stats", NULL, NULL, 0, &r) == 0, "transport");
    KS_EXPECT(&r, 200, NULL);
    json_object *j = json_tokener_parse(r.body), *arr = NULL;
    KS_CHECK(j && json_object_object_get_ex(j, "model_stats", &arr) &&
                 json_object_array_length(arr) == 2,
             "%s", r.body);
    json_object_put(j);
    ks_resp_free(&r);
    KS_CHECK(ks_http(g_port, "GET", "/v2/models/zz/stats", NULL, NULL, 0, &r) == 0, "transport");
    KS_EXPECT(&r, 400, "unknown model");
    ks_resp_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Garbage                                                                   */
/* ------------------------------------------------------------------------ */

/* Random garbage: bodies, headers, request lines.  The server must answer
 * or close, and stay alive. */
static void test_fuzz_tcp(void **state)
{
    (void)state;
    static const char *const tmpl[] = {
        REQ(K("[1,2,3]"), NK),
        "{\"inputs\":[" KB(24) "," NK "],\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":"
                               "{\"binary_data\":true}}]}",
    };
    char buf[2048];
    for (int it = 0; it < 400; it++) {
        const char *t = tmpl[ks_rand() % 2];
        size_t len = strlen(t);
        memcpy(buf, t, len);
        size_t extra = ks_rand() % 40;
        for (size_t k = 0; k < extra; k++)
            buf[len++] = (char)ks_rand();
        unsigned muts = 1 + ks_rand() % 8;
        for (unsigned k = 0; k < muts; k++)
            buf[ks_rand() % len] = (char)(ks_rand() % 4 ? ks_rand() % 128 : ks_rand());
        if (ks_rand() % 4 == 0)
            len = ks_rand() % len;
        char hdr[96] = "";
        if (ks_rand() % 2)
            snprintf(hdr, sizeof(hdr), "Inference-Header-Content-Length: %llu\r\n",
                     (unsigned long long)(ks_rand() % (len + 8)));
        struct ks_resp r;
        if (ks_http(g_port, "POST", P, hdr, buf, len, &r) == 0) {
            KS_CHECK(r.status == 200 || r.status == 400 || r.status == 404 || r.status == 501,
                     "status %d for fuzz %d: %s", r.status, it, r.body);
            if (r.status != 200)
                KS_EXPECT(&r, r.status, NULL);
            ks_resp_free(&r);
        }
    }
    /* Raw protocol garbage. */
    for (int it = 0; it < 100; it++) {
        size_t len = 1 + ks_rand() % sizeof(buf);
        for (size_t k = 0; k < len; k++)
            buf[k] = (char)ks_rand();
        if (it % 2)
            memcpy(buf, "POST /v2/models/hps_wdl/infer HTTP/1.1\r\n", 40 < len ? 40 : len);
        /* An incomplete request may get no answer until the idle timeout
         * (the client's half-close does not end it): wait briefly only. */
        struct ks_resp r;
        if (ks_raw(g_port, buf, len, 200, &r) == 0)
            ks_resp_free(&r);
    }
    KS_ALIVE(g_port);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_infer_json_binary_identical, test_setup),
        cmocka_unit_test_setup(test_infer_plain, test_setup),
        cmocka_unit_test_setup(test_infer_empty, test_setup),
        cmocka_unit_test_setup(test_infer_errors, test_setup),
        cmocka_unit_test_setup(test_chunked_over_limit, test_setup),
        cmocka_unit_test_setup(test_backend_errors_and_stats, test_setup),
        cmocka_unit_test_setup(test_fuzz_tcp, test_setup),
    };
    if (getenv("KS_TEST_FILTER")) /* e.g. KS_TEST_FILTER=test_fuzz_tcp */
        cmocka_set_test_filter(getenv("KS_TEST_FILTER"));
    return cmocka_run_group_tests_name("kserve-http-infer", tests, group_setup, group_teardown);
}
