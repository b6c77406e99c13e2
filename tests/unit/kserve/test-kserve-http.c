/*
 * test-kserve-http.c -- the HTTP front end over real TCP: a server started
 * in-process on free ports with a fake backend, driven by a small HTTP/1.1
 * client.  Every endpoint, JSON and binary inference (identical floats),
 * every validation error with its status and {"error": ...} body, metrics
 * text, ready vs degraded, concurrency, garbage bodies, graceful stop.
 */
#include <math.h>

#include <json-c/json.h>

#include "kstest.h"

#define MAX_BODY (1u << 20)
#define MAX_KEYS 50000u

static struct ks_backend g_be;
static hps_kserve_t *g_srv;
static uint16_t g_port, g_mport;

static int group_setup(void **state)
{
    (void)state;
    hps_kserve_options_t o;
    hps_kserve_options_init(&o);
    o.threads = 4;
    o.max_body_bytes = MAX_BODY;
    o.max_keys_per_request = MAX_KEYS;
    o.server_name = "hps-test";
    o.server_version = "9.8.7";
    return ks_server_start(&o, &g_be, ks_vtable(&g_be), &g_srv, &g_port, &g_mport);
}

static int group_teardown(void **state)
{
    (void)state;
    hps_kserve_destroy(g_srv);
    return 0;
}

/* Reset the fake backend between tests. */
static int test_setup(void **state)
{
    (void)state;
    atomic_store(&g_be.ready, true);
    atomic_store(&g_be.fail, 0);
    atomic_store(&g_be.delay_ms, 0);
    atomic_store(&g_be.metrics_fail, 0);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Request builders and response decoding                                    */
/* ------------------------------------------------------------------------ */

struct reqopt {
    const char *id;
    bool keys_bin;    /* KEYS as binary data */
    bool numkeys_bin; /* NUMKEYS as binary data */
    int out_bin;      /* outputs[0].parameters.binary_data: -1 absent, 0, 1 */
    int bdo;          /* parameters.binary_data_output: -1 absent, 0, 1 */
    bool nested;      /* KEYS data as [[...]] */
    bool batching;    /* shapes with the leading 1 */
};

struct body {
    char *data;
    size_t len;
    size_t hlen; /* JSON header length */
};

static void put_shape(json_object *in, bool batching, size_t n)
{
    json_object *shape = json_object_new_array();
    if (batching)
        json_object_array_add(shape, json_object_new_int64(1));
    json_object_array_add(shape, json_object_new_int64((int64_t)n));
    json_object_object_add(in, "shape", shape);
}

static json_object *make_input(const char *name, const char *dt, bool batching, size_t n)
{
    json_object *in = json_object_new_object();
    json_object_object_add(in, "name", json_object_new_string(name));
    json_object_object_add(in, "datatype", json_object_new_string(dt));
    put_shape(in, batching, n);
    return in;
}

static void set_bin_size(json_object *in, size_t bytes)
{
    json_object *p = json_object_new_object();
    json_object_object_add(p, "binary_data_size", json_object_new_int64((int64_t)bytes));
    json_object_object_add(in, "parameters", p);
}

static json_object *keys_input(const int64_t *keys, size_t n, const struct reqopt *o)
{
    json_object *in = make_input("KEYS", "INT64", o->batching, n);
    if (o->keys_bin) {
        set_bin_size(in, n * 8);
        return in;
    }
    json_object *d = json_object_new_array();
    for (size_t i = 0; i < n; i++)
        json_object_array_add(d, json_object_new_int64(keys[i]));
    if (o->nested) {
        json_object *outer = json_object_new_array();
        json_object_array_add(outer, d);
        d = outer;
    }
    json_object_object_add(in, "data", d);
    return in;
}

static json_object *numkeys_input(const int32_t *nk, uint32_t nt, const struct reqopt *o)
{
    json_object *in = make_input("NUMKEYS", "INT32", o->batching, nt);
    if (o->numkeys_bin) {
        set_bin_size(in, nt * 4u);
        return in;
    }
    json_object *d = json_object_new_array();
    for (uint32_t i = 0; i < nt; i++)
        json_object_array_add(d, json_object_new_int(nk[i]));
    json_object_object_add(in, "data", d);
    return in;
}

static json_object *request_json(const int64_t *keys, size_t n, const int32_t *nk, uint32_t nt,
                                 const struct reqopt *o)
{
    json_object *root = json_object_new_object();
    if (o->id)
        json_object_object_add(root, "id", json_object_new_string(o->id));
    if (o->bdo >= 0) {
        json_object *p = json_object_new_object();
        json_object_object_add(p, "binary_data_output", json_object_new_boolean(o->bdo));
        json_object_object_add(root, "parameters", p);
    }
    json_object *inputs = json_object_new_array();
    json_object_array_add(inputs, keys_input(keys, n, o));
    json_object_array_add(inputs, numkeys_input(nk, nt, o));
    json_object_object_add(root, "inputs", inputs);
    if (o->out_bin >= 0) {
        json_object *out = json_object_new_object();
        json_object_object_add(out, "name", json_object_new_string("OUTPUT0"));
        json_object *p = json_object_new_object();
        json_object_object_add(p, "binary_data", json_object_new_boolean(o->out_bin));
        json_object_object_add(out, "parameters", p);
        json_object *outs = json_object_new_array();
        json_object_array_add(outs, out);
        json_object_object_add(root, "outputs", outs);
    }
    return root;
}

/* JSON header followed by the binary inputs, in input order. */
static struct body build(const int64_t *keys, size_t n, const int32_t *nk, uint32_t nt,
                         const struct reqopt *o)
{
    json_object *root = request_json(keys, n, nk, nt, o);
    const char *js = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN);
    struct body b = {.hlen = strlen(js)};
    size_t kb = o->keys_bin ? n * 8 : 0, nb = o->numkeys_bin ? nt * 4u : 0;
    b.len = b.hlen + kb + nb;
    b.data = malloc(b.len + 1);
    memcpy(b.data, js, b.hlen);
    if (kb)
        memcpy(b.data + b.hlen, keys, kb);
    if (nb)
        memcpy(b.data + b.hlen + kb, nk, nb);
    json_object_put(root);
    return b;
}

/* POST to the infer endpoint of model with the body; header set if binary. */
static void post_infer(const char *path, const struct body *b, bool header, struct ks_resp *r)
{
    char extra[128] = "";
    if (header)
        snprintf(extra, sizeof(extra), "inference-header-content-length: %zu\r\n", b->hlen);
    KS_CHECK(ks_http(g_port, "POST", path, extra, b->data, b->len, r) == 0, "transport");
}

/** Decoded OUTPUT0 of a successful response, plus the JSON header. */
struct output {
    json_object *hdr;
    float *v;
    size_t n;
    bool binary;
};

static void output_free(struct output *o)
{
    json_object_put(o->hdr);
    free(o->v);
    memset(o, 0, sizeof(*o));
}

static json_object *out0(json_object *hdr)
{
    json_object *outs = NULL;
    json_object_object_get_ex(hdr, "outputs", &outs);
    KS_CHECK(json_object_array_length(outs) == 1, "one output");
    return json_object_array_get_idx(outs, 0);
}

static int64_t out_shape(json_object *o)
{
    json_object *shape = NULL;
    json_object_object_get_ex(o, "shape", &shape);
    KS_CHECK(json_object_array_length(shape) == 1, "1-D output");
    return json_object_get_int64(json_object_array_get_idx(shape, 0));
}

static void decode(const struct ks_resp *r, struct output *o)
{
    char v[32], ct[64];
    memset(o, 0, sizeof(*o));
    KS_EXPECT(r, 200, NULL);
    KS_CHECK(ks_header(r, "Content-Type", ct, sizeof(ct)), "content type");
    size_t hlen = r->body_len;
    if (ks_header(r, "Inference-Header-Content-Length", v, sizeof(v))) {
        KS_CHECK(strcmp(ct, "application/octet-stream") == 0, "binary content type %s", ct);
        hlen = strtoull(v, NULL, 10);
        o->binary = true;
    } else {
        KS_CHECK(strcmp(ct, "application/json") == 0, "json content type %s", ct);
    }
    KS_CHECK(hlen <= r->body_len, "header length");
    o->hdr = json_tokener_parse(strndupa(r->body, hlen));
    KS_CHECK(o->hdr != NULL, "response JSON: %.200s", r->body);
    json_object *oo = out0(o->hdr);
    o->n = (size_t)out_shape(oo);
    o->v = calloc(o->n + 1, sizeof(float));
    json_object *data = NULL, *params = NULL, *bds = NULL;
    if (o->binary) {
        KS_CHECK(json_object_object_get_ex(oo, "parameters", &params) &&
                     json_object_object_get_ex(params, "binary_data_size", &bds),
                 "binary_data_size");
        KS_CHECK((size_t)json_object_get_int64(bds) == o->n * 4, "binary_data_size value");
        KS_CHECK(r->body_len - hlen == o->n * 4, "binary body %zu vs %zu", r->body_len - hlen,
                 o->n * 4);
        memcpy(o->v, r->body + hlen, o->n * 4);
        KS_CHECK(!json_object_object_get_ex(oo, "data", &data), "no data with binary");
        return;
    }
    KS_CHECK(json_object_object_get_ex(oo, "data", &data), "data");
    KS_CHECK(json_object_array_length(data) == o->n, "data length");
    for (size_t i = 0; i < o->n; i++)
        o->v[i] = (float)json_object_get_double(json_object_array_get_idx(data, i));
}

/* The expected OUTPUT0 for keys/numkeys of model mi, compared bit for bit. */
static void check_values(size_t mi, const int64_t *keys, const int32_t *nk, const struct output *o)
{
    const hps_kserve_model_t *m = &ks_models[mi];
    size_t ki = 0, idx = 0;
    for (uint32_t t = 0; t < m->num_tables; t++)
        for (int32_t i = 0; i < nk[t]; i++, ki++)
            for (uint32_t j = 0; j < m->dims[t]; j++, idx++) {
                float want = ks_value(t, keys[ki], j);
                KS_CHECK(idx < o->n, "output too short");
                KS_CHECK(memcmp(&want, &o->v[idx], 4) == 0, "value %zu: %.9g vs %.9g", idx,
                         (double)want, (double)o->v[idx]);
            }
    KS_CHECK(idx == o->n, "output length %zu vs %zu", o->n, idx);
}

static int64_t param_i64(json_object *hdr, const char *name)
{
    json_object *p = NULL, *v = NULL;
    KS_CHECK(json_object_object_get_ex(hdr, "parameters", &p) &&
                 json_object_object_get_ex(p, name, &v),
             "parameter %s", name);
    return json_object_get_int64(v);
}

static const char *str_member(json_object *o, const char *k)
{
    json_object *v = NULL;
    return json_object_object_get_ex(o, k, &v) ? json_object_get_string(v) : NULL;
}

/* A WDL batch of `batch` samples: 2 wide keys, 26 deep keys per sample. */
static void wdl_batch(size_t batch, int64_t **keys, size_t *n, int32_t nk[2])
{
    nk[0] = (int32_t)(2 * batch);
    nk[1] = (int32_t)(26 * batch);
    *n = 28 * batch;
    *keys = malloc(*n * sizeof(int64_t));
    for (size_t i = 0; i < *n; i++)
        (*keys)[i] = (int64_t)(ks_rand() >> (ks_rand() % 64)) * (ks_rand() & 1 ? -1 : 1);
}

/* ------------------------------------------------------------------------ */
/* Health and metadata                                                       */
/* ------------------------------------------------------------------------ */

static void test_health(void **state)
{
    (void)state;
    struct ks_resp r;
    KS_CHECK(ks_http(g_port, "GET", "/v2/health/live", NULL, NULL, 0, &r) == 0, "transport");
    KS_EXPECT(&r, 200, NULL);
    KS_CHECK(r.body_len == 0, "empty body");
    ks_resp_free(&r);
    KS_CHECK(ks_http(g_port, "GET", "/v2/health/ready", NULL, NULL, 0, &r) == 0, "transport");
    KS_EXPECT(&r, 200, NULL);
    ks_resp_free(&r);
    KS_CHECK(ks_http(g_port, "GET", "/v2/models/hps_wdl/ready", NULL, NULL, 0, &r) == 0, "t");
    KS_EXPECT(&r, 200, NULL);
    ks_resp_free(&r);
    KS_CHECK(ks_http(g_port, "GET", "/v2/models/plain/versions/7/ready", NULL, NULL, 0, &r) == 0,
             "t");
    KS_EXPECT(&r, 200, NULL);
    ks_resp_free(&r);
    KS_CHECK(ks_http(g_port, "GET", "/v2/models/plain/versions/8/ready", NULL, NULL, 0, &r) == 0,
             "t");
    KS_EXPECT(&r, 400, "version 8 is not found");
    ks_resp_free(&r);
    KS_CHECK(ks_http(g_port, "POST", "/v2/health/live", NULL, NULL, 0, &r) == 0, "t");
    KS_EXPECT(&r, 405, "Method Not Allowed");
    ks_resp_free(&r);
}

/* Not ready: health and model ready answer 400, inference still works. */
static void test_degraded(void **state)
{
    (void)state;
    struct ks_resp r;
    atomic_store(&g_be.ready, false);
    KS_CHECK(ks_http(g_port, "GET", "/v2/health/ready", NULL, NULL, 0, &r) == 0, "transport");
    KS_CHECK(r.status == 400 && r.body_len == 0, "status %d body %s", r.status, r.body);
    ks_resp_free(&r);
    KS_CHECK(ks_http(g_port, "GET", "/v2/health/live", NULL, NULL, 0, &r) == 0, "transport");
    KS_EXPECT(&r, 200, NULL);
    ks_resp_free(&r);
    KS_CHECK(ks_http(g_port, "GET", "/v2/models/hps_wdl/ready", NULL, NULL, 0, &r) == 0, "t");
    KS_EXPECT(&r, 400, "Model version not ready");
    ks_resp_free(&r);
    int64_t keys[3] = {1, 2, 3};
    int32_t nk[2] = {1, 2};
    struct reqopt o = {.out_bin = -1, .bdo = -1, .batching = true};
    struct body b = build(keys, 3, nk, 2, &o);
    post_infer("/v2/models/hps_wdl/infer", &b, false, &r);
    struct output out;
    decode(&r, &out);
    check_values(0, keys, nk, &out);
    output_free(&out);
    ks_resp_free(&r);
    free(b.data);
    atomic_store(&g_be.ready, true);
}

static void test_server_metadata(void **state)
{
    (void)state;
    struct ks_resp r;
    KS_CHECK(ks_http(g_port, "GET", "/v2", NULL, NULL, 0, &r) == 0, "transport");
    KS_EXPECT(&r, 200, NULL);
    json_object *j = json_tokener_parse(r.body);
    KS_CHECK(j, "json");
    KS_CHECK(strcmp(str_member(j, "name"), "hps-test") == 0, "name");
    KS_CHECK(strcmp(str_member(j, "version"), "9.8.7") == 0, "version");
    json_object *ext = NULL;
    json_object_object_get_ex(j, "extensions", &ext);
    const char *want[] = {"binary_tensor_data",  "model_repository", "statistics",
                          "model_configuration", "parameters",       "system_shared_memory"};
    KS_CHECK(json_object_array_length(ext) == 6, "%s", r.body);
    for (size_t i = 0; i < 6; i++)
        KS_CHECK(strcmp(json_object_get_string(json_object_array_get_idx(ext, i)), want[i]) == 0,
                 "extension %zu", i);
    KS_CHECK(!strstr(r.body, "cuda_shared_memory"), "no CUDA shm advertised");
    json_object_put(j);
    ks_resp_free(&r);
}

static void check_tensor(json_object *t, const char *name, const char *dt, int rank)
{
    KS_CHECK(strcmp(str_member(t, "name"), name) == 0, "name %s", name);
    KS_CHECK(strcmp(str_member(t, "datatype"), dt) == 0, "datatype of %s", name);
    json_object *shape = NULL;
    json_object_object_get_ex(t, "shape", &shape);
    KS_CHECK((int)json_object_array_length(shape) == rank, "rank of %s", name);
    for (int i = 0; i < rank; i++)
        KS_CHECK(json_object_get_int(json_object_array_get_idx(shape, (size_t)i)) == -1, "dim");
}

static void model_meta(const char *path, const char *name, const char *version, int rank)
{
    struct ks_resp r;
    KS_CHECK(ks_http(g_port, "GET", path, NULL, NULL, 0, &r) == 0, "transport");
    KS_EXPECT(&r, 200, NULL);
    json_object *j = json_tokener_parse(r.body), *a = NULL;
    KS_CHECK(j, "json %s", r.body);
    KS_CHECK(strcmp(str_member(j, "name"), name) == 0, "name");
    KS_CHECK(strcmp(str_member(j, "platform"), "hps") == 0, "platform");
    json_object_object_get_ex(j, "versions", &a);
    KS_CHECK(strcmp(json_object_get_string(json_object_array_get_idx(a, 0)), version) == 0, "v");
    json_object_object_get_ex(j, "inputs", &a);
    KS_CHECK(json_object_array_length(a) == 2, "inputs");
    check_tensor(json_object_array_get_idx(a, 0), "KEYS", "INT64", rank);
    check_tensor(json_object_array_get_idx(a, 1), "NUMKEYS", "INT32", rank);
    json_object_object_get_ex(j, "outputs", &a);
    KS_CHECK(json_object_array_length(a) == 1, "outputs");
    check_tensor(json_object_array_get_idx(a, 0), "OUTPUT0", "FP32", rank);
    json_object_put(j);
    ks_resp_free(&r);
}

static void test_model_metadata(void **state)
{
    (void)state;
    model_meta("/v2/models/hps_wdl", "hps_wdl", "1", 2);
    model_meta("/v2/models/hps_wdl/versions/1", "hps_wdl", "1", 2);
    model_meta("/v2/models/plain/versions/007", "plain", "7", 1);
    struct ks_resp r;
    KS_CHECK(ks_http(g_port, "GET", "/v2/models/nope", NULL, NULL, 0, &r) == 0, "transport");
    KS_EXPECT(&r, 400, "Request for unknown model: 'nope' is not found");
    ks_resp_free(&r);
    KS_CHECK(ks_http(g_port, "GET", "/v2/models/hps_wdl/versions/99999999999999999999999", NULL,
                     NULL, 0, &r) == 0,
             "transport");
    KS_EXPECT(&r, 400, "version");
    ks_resp_free(&r);
    KS_CHECK(ks_http(g_port, "GET", "/v2/models/hps_wdl/config", NULL, NULL, 0, &r) == 0, "t");
    KS_EXPECT(&r, 200, NULL);
    json_object *j = json_tokener_parse(r.body);
    KS_CHECK(j && strcmp(str_member(j, "backend"), "hps") == 0, "config %s", r.body);
    KS_CHECK(strstr(r.body, "\"embedding_table_names\":{\"string_value\":\"wide,deep\"}"), "%s",
             r.body);
    KS_CHECK(strstr(r.body, "\"max_batch_size\":1024"), "%s", r.body);
    json_object_put(j);
    ks_resp_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Inference                                                                 */
/* ------------------------------------------------------------------------ */

/* One WDL request in a given encoding; returns the decoded output. */
static void wdl_infer(const int64_t *keys, size_t n, const int32_t *nk, struct reqopt o,
                      const char *path, struct output *out)
{
    struct ks_resp r;
    o.batching = true;
    struct body b = build(keys, n, nk, 2, &o);
    post_infer(path, &b, o.keys_bin || o.numkeys_bin, &r);
    decode(&r, out);
    check_values(0, keys, nk, out);
    ks_resp_free(&r);
    free(b.data);
}

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

#define P    "/v2/models/hps_wdl/infer"
#define K(d) "{\"name\":\"KEYS\",\"datatype\":\"INT64\",\"shape\":[1,3],\"data\":" d "}"
#define NK   "{\"name\":\"NUMKEYS\",\"datatype\":\"INT32\",\"shape\":[1,2],\"data\":[1,2]}"
#define KB(n)                                                                                      \
    "{\"name\":\"KEYS\",\"datatype\":\"INT64\",\"shape\":[1,3],\"parameters\":{\"binary_data_"     \
    "size\":" #n "}}"
#define REQ1(a)       "{\"inputs\":[" a "]}"
#define REQ(a, b)     "{\"inputs\":[" a "," b "]}"
#define REQ3(a, b, c) "{\"inputs\":[" a "," b "," c "]}"

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

static void test_routes(void **state)
{
    (void)state;
    static const struct {
        const char *method, *path;
        int status;
        const char *msg;
    } cases[] = {
        {"GET", "/", 404, "Not Found"},
        {"GET", "/v2/", 404, "Not Found"},
        {"GET", "/v2/health", 404, "Not Found"},
        {"GET", "/v2/models/hps_wdl/versions/x", 404, "Not Found"},
        {"GET", "/v2/models/hps_wdl/generate", 404, "Not Found"},
        {"POST", "/v2/repository/models/hps_wdl/load", 503, "explicit model load / unload"},
        {"POST", "/v2/repository/r/index", 501, "'repository_name' specification"},
        {"GET", "/v2/repository/index", 405, "Method Not Allowed"},
        {"POST", "/v2/repository/models/hps_wdl", 404, "Not Found"},
        {"GET", "/metrics", 404, "Not Found"},
        {"GET", "/v2/models/hps_wdl/infer", 405, "Method Not Allowed"},
        {"POST", "/v2/models/hps_wdl", 405, "Method Not Allowed"},
        {"DELETE", "/v2", 405, "Method Not Allowed"},
        {"HEAD", "/v2/health/live", 405, NULL},
        {"POST", "/v2/cudasharedmemory/region/r/register", 501, "not supported"},
        {"POST", "/v2/cudasharedmemory/unregister", 501, "not supported"},
        {"GET", "/v2/cudasharedmemory/region/r/status", 501, "not supported"},
        {"GET", "/v2/systemsharedmemory/region/r/register", 405, "Method Not Allowed"},
        {"POST", "/v2/cudasharedmemory/status", 405, "Method Not Allowed"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct ks_resp r;
        KS_CHECK(ks_http(g_port, cases[i].method, cases[i].path, NULL, NULL, 0, &r) == 0, "t");
        KS_CHECK(r.status == cases[i].status, "%s %s: %d %s", cases[i].method, cases[i].path,
                 r.status, r.body);
        if (strcmp(cases[i].method, "HEAD") != 0)
            KS_EXPECT(&r, cases[i].status, cases[i].msg);
        ks_resp_free(&r);
    }
}

/* Several requests on one keep-alive connection. */
static void test_keepalive(void **state)
{
    (void)state;
    int fd = ks_connect(g_port);
    KS_CHECK(fd >= 0, "connect");
    const char *body = REQ(K("[1,2,3]"), NK);
    char req[1024];
    int n = snprintf(req, sizeof(req),
                     "POST " P " HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n%s",
                     strlen(body), body);
    for (int i = 0; i < 5; i++) {
        struct ks_resp r;
        KS_CHECK(ks_send_all(fd, req, (size_t)n), "send");
        KS_CHECK(ks_read_resp(fd, &r) == 0, "response %d", i);
        KS_EXPECT(&r, 200, NULL);
        ks_resp_free(&r);
        const char *get = "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n";
        KS_CHECK(ks_send_all(fd, get, strlen(get)), "send");
        KS_CHECK(ks_read_resp(fd, &r) == 0, "live %d", i);
        KS_EXPECT(&r, 200, NULL);
        ks_resp_free(&r);
    }
    close(fd);
}

/* ------------------------------------------------------------------------ */
/* Backend failures, statistics, metrics                                     */
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

static void simple_infer(int expect_status, const char *msg)
{
    struct ks_resp r;
    const char *body = REQ(K("[1,2,3]"), NK);
    KS_CHECK(ks_http(g_port, "POST", P, NULL, body, strlen(body), &r) == 0, "transport");
    KS_EXPECT(&r, expect_status, msg);
    ks_resp_free(&r);
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
    atomic_store(&g_be.fail, 0);
    run_bad(&bad_requests[0]); /* a validation failure counts for the model too */
    json_object *after = model_stats_json("hps_wdl");
    KS_CHECK(stat_u64(after, "inference_stats", "success", "count") == s0 + 2, "success");
    KS_CHECK(stat_u64(after, "inference_stats", "fail", "count") == f0 + 4, "fail");
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

/* Each line: "# HELP name text", "# TYPE name counter|gauge", or a sample
 * name{label="value",...} number; returns the number of samples. */
static size_t check_prometheus(const char *text)
{
    size_t samples = 0;
    for (const char *l = text; *l;) {
        const char *e = strchr(l, '\n');
        KS_CHECK(e, "every line ends in a newline");
        char line[1024];
        size_t n = (size_t)(e - l);
        KS_CHECK(n < sizeof(line), "line length");
        memcpy(line, l, n);
        line[n] = '\0';
        l = e + 1;
        char name[256], rest[768];
        if (strncmp(line, "# HELP ", 7) == 0) {
            KS_CHECK(sscanf(line + 7, "%255s %767[^\n]", name, rest) == 2, "HELP: %s", line);
            continue;
        }
        if (strncmp(line, "# TYPE ", 7) == 0) {
            KS_CHECK(sscanf(line + 7, "%255s %767s", name, rest) == 2 &&
                         (!strcmp(rest, "counter") || !strcmp(rest, "gauge")),
                     "TYPE: %s", line);
            continue;
        }
        const char *p = line;
        KS_CHECK((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_', "%s", line);
        p += strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:");
        if (*p == '{') {
            for (p++; *p != '}';) {
                p += strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
                KS_CHECK(p[0] == '=' && p[1] == '"', "label: %s", line);
                for (p += 2; *p != '"'; p++) {
                    KS_CHECK(*p, "unterminated label value: %s", line);
                    if (*p == '\\') {
                        p++;
                        KS_CHECK(*p == '\\' || *p == '"' || *p == 'n', "escape: %s", line);
                    }
                }
                p++;
                if (*p == ',')
                    p++;
                else
                    KS_CHECK(*p == '}', "label list: %s", line);
            }
            p++;
        }
        KS_CHECK(*p == ' ', "value separator: %s", line);
        char *end;
        strtod(p + 1, &end);
        KS_CHECK(end != p + 1 && *end == '\0', "value: %s", line);
        samples++;
    }
    return samples;
}

static void test_metrics(void **state)
{
    (void)state;
    simple_infer(200, NULL);
    struct ks_resp r;
    KS_CHECK(ks_http(g_mport, "GET", "/metrics", NULL, NULL, 0, &r) == 0, "transport");
    KS_EXPECT(&r, 200, NULL);
    char ct[64];
    KS_CHECK(ks_header(&r, "Content-Type", ct, sizeof(ct)) &&
                 !strcmp(ct, "text/plain; charset=utf-8"),
             "content type");
    size_t samples = check_prometheus(r.body);
    /* 9 single families + 4 failure reasons, for 2 models, the 3 connection
     * families, plus the backend's. */
    KS_CHECK(samples == (9 + 4) * 2 + 3 + 1, "samples %zu", samples);
    static const char *const must[] = {
        "# HELP nv_inference_request_success Number of successful inference requests, all batch "
        "sizes\n# TYPE nv_inference_request_success counter\n",
        "# HELP nv_inference_request_failure Number of failed inference requests, all batch "
        "sizes\n",
        "nv_inference_request_failure{model=\"hps_wdl\",reason=\"BACKEND\",version=\"1\"} ",
        "nv_inference_request_failure{model=\"hps_wdl\",reason=\"REJECTED\",version=\"1\"} ",
        "nv_inference_count{model=\"plain\",version=\"7\"} ",
        "# HELP nv_inference_exec_count Number of model executions performed (does not include "
        "cached requests)\n",
        "# HELP nv_inference_request_duration_us Cumulative inference request duration in "
        "microseconds (includes cached requests)\n",
        "# HELP nv_inference_queue_duration_us Cumulative inference queuing duration in "
        "microseconds (includes cached requests)\n",
        "# HELP nv_inference_compute_input_duration_us Cumulative compute input duration in "
        "microseconds (does not include cached requests)\n",
        "# HELP nv_inference_compute_infer_duration_us Cumulative compute inference duration in "
        "microseconds (does not include cached requests)\n",
        "# HELP nv_inference_compute_output_duration_us Cumulative inference compute output "
        "duration in microseconds (does not include cached requests)\n",
        "nv_inference_pending_request_count{model=\"hps_wdl\",version=\"1\"} 0\n",
        "nv_hps_test_lookups{model=\"hps_\\\"wdl\\\"\",version=\"1\"} ",
    };
    for (size_t i = 0; i < sizeof(must) / sizeof(must[0]); i++)
        KS_CHECK(strstr(r.body, must[i]), "metrics lack: %s", must[i]);
    KS_CHECK(!strstr(r.body, "nv_inference_request_success{model=\"hps_wdl\",version=\"1\"} 0\n"),
             "success counted");
    ks_resp_free(&r);
    KS_CHECK(ks_http(g_mport, "POST", "/metrics", NULL, "x", 1, &r) == 0, "transport");
    KS_EXPECT(&r, 405, "Method Not Allowed");
    ks_resp_free(&r);
    KS_CHECK(ks_http(g_mport, "GET", "/v2", NULL, NULL, 0, &r) == 0, "transport");
    KS_EXPECT(&r, 404, "Not Found");
    ks_resp_free(&r);
    atomic_store(&g_be.metrics_fail, 1);
    KS_CHECK(ks_http(g_mport, "GET", "/metrics", NULL, NULL, 0, &r) == 0, "transport");
    KS_EXPECT(&r, 500, "backend metrics failed");
    ks_resp_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Concurrency, garbage, lifecycle                                           */
/* ------------------------------------------------------------------------ */

struct worker_arg {
    unsigned id;
    unsigned iters;
    _Atomic unsigned *errors;
};

/* A request with keys derived from (id, i), checked exactly. */
static void *conc_worker(void *p)
{
    struct worker_arg *a = p;
    for (unsigned i = 0; i < a->iters; i++) {
        size_t batch = 1 + (a->id * 7 + i) % 20, n = 28 * batch;
        int64_t *keys = malloc(n * 8);
        int32_t nk[2] = {(int32_t)(2 * batch), (int32_t)(26 * batch)};
        for (size_t k = 0; k < n; k++)
            keys[k] = (int64_t)(a->id * 1000003u + i * 7919u + k);
        struct reqopt o = {
            .keys_bin = i & 1, .out_bin = (int)(i >> 1 & 1), .bdo = -1, .batching = true};
        struct body b = build(keys, n, nk, 2, &o);
        char extra[96] = "";
        if (o.keys_bin)
            snprintf(extra, sizeof(extra), "Inference-Header-Content-Length: %zu\r\n", b.hlen);
        struct ks_resp r = {0};
        bool ok = ks_http(g_port, "POST", P, extra, b.data, b.len, &r) == 0 && r.status == 200;
        if (ok) {
            /* Spot-check the last float of the response. */
            size_t len = 2 * batch + 26 * batch * 16;
            float want = ks_value(1, keys[n - 1], 15), got;
            if (o.out_bin) {
                memcpy(&got, r.body + r.body_len - 4, 4);
                ok = memcmp(&got, &want, 4) == 0 && r.body_len > len * 4;
            } else {
                const char *lb = strrchr(r.body, ',');
                ok = lb && strtof(lb + 1, NULL) == want;
            }
        }
        if (!ok)
            atomic_fetch_add(a->errors, 1);
        if (r.head)
            ks_resp_free(&r);
        free(b.data);
        free(keys);
    }
    return NULL;
}

static void test_concurrent(void **state)
{
    (void)state;
    enum { NT = 8 };
    pthread_t th[NT];
    struct worker_arg args[NT];
    _Atomic unsigned errors = 0;
    for (unsigned i = 0; i < NT; i++) {
        args[i] = (struct worker_arg){i, 150, &errors};
        pthread_create(&th[i], NULL, conc_worker, &args[i]);
    }
    for (unsigned i = 0; i < NT; i++)
        pthread_join(th[i], NULL);
    KS_CHECK(atomic_load(&errors) == 0, "%u failed requests", atomic_load(&errors));
    KS_CHECK(!atomic_load(&g_be.bad_args), "backend got consistent arguments");
}

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
    struct ks_resp r;
    KS_CHECK(ks_http(g_port, "GET", "/v2/health/live", NULL, NULL, 0, &r) == 0, "alive");
    KS_EXPECT(&r, 200, NULL);
    ks_resp_free(&r);
}

struct slow_arg {
    uint16_t port;
    int status;
    bool closes; /* the answer said Connection: close */
};

static void *slow_request(void *p)
{
    struct slow_arg *a = p;
    const char *body = REQ(K("[1,2,3]"), NK);
    struct ks_resp r;
    a->status = ks_http(a->port, "POST", P, NULL, body, strlen(body), &r) == 0 ? r.status : -1;
    char v[32];
    if (a->status > 0) {
        a->closes = ks_header(&r, "Connection", v, sizeof(v)) && !strcasecmp(v, "close");
        ks_resp_free(&r);
    }
    return NULL;
}

/* stop() lets a request in progress finish, then refuses connections. */
static void test_graceful_stop(void **state)
{
    (void)state;
    struct ks_backend be = {.ready = true, .delay_ms = 300};
    hps_kserve_options_t o;
    hps_kserve_options_init(&o);
    o.http_port = 0;
    o.metrics_port = HPS_KSERVE_PORT_DISABLED;
    o.threads = 1;
    hps_kserve_backend_t vt = ks_vtable(&be);
    hps_kserve_t *s;
    KS_OK(hps_kserve_create(&o, ks_models, KS_NUM_MODELS, &vt, &s));
    KS_OK(hps_kserve_start(s));
    uint16_t port, mport = 1;
    KS_OK(hps_kserve_ports(s, &port, &mport));
    KS_CHECK(mport == 0, "metrics disabled");
    struct slow_arg a = {port, 0, false};
    pthread_t th;
    pthread_create(&th, NULL, slow_request, &a);
    while (atomic_load(&be.entered) == 0)
        usleep(1000);
    hps_kserve_stop(s);
    pthread_join(th, NULL);
    KS_CHECK(a.status == 200, "request in progress answered: %d", a.status);
    KS_CHECK(a.closes, "answers during the drain close the connection");
    KS_CHECK(ks_connect(port) < 0, "no longer listening");
    KS_CHECK(hps_kserve_ports(s, &port, NULL) == HPS_EINVAL, "ports after stop");
    /* Restart on a fresh port, stop again, destroy. */
    be.delay_ms = 0;
    KS_OK(hps_kserve_start(s));
    KS_CHECK(hps_kserve_start(s) == HPS_EBUSY, "double start");
    KS_OK(hps_kserve_ports(s, &port, NULL));
    struct ks_resp r;
    KS_CHECK(ks_http(port, "GET", "/v2/models/hps_wdl/stats", NULL, NULL, 0, &r) == 0, "t");
    KS_CHECK(strstr(r.body, "\"success\":{\"count\":1,"), "stats kept: %s", r.body);
    ks_resp_free(&r);
    hps_kserve_stop(s);
    hps_kserve_stop(s);
    hps_kserve_destroy(s);
}

static void test_create_errors(void **state)
{
    (void)state;
    struct ks_backend be = {.ready = true};
    hps_kserve_backend_t vt = ks_vtable(&be), novt = {0};
    hps_kserve_t *s = NULL;
    hps_kserve_destroy(NULL);
    hps_kserve_stop(NULL);
    KS_CHECK(hps_kserve_create(NULL, ks_models, 0, &vt, &s) == HPS_EINVAL, "no models");
    KS_CHECK(hps_kserve_create(NULL, NULL, 1, &vt, &s) == HPS_EINVAL, "NULL models");
    KS_CHECK(hps_kserve_create(NULL, ks_models, 1, &novt, &s) == HPS_EINVAL, "no lookup");
    KS_CHECK(hps_kserve_create(NULL, ks_models, 1, NULL, &s) == HPS_EINVAL, "no backend");
    hps_kserve_model_t m = ks_models[0];
    hps_kserve_model_t two[2] = {m, m};
    KS_CHECK(hps_kserve_create(NULL, two, 2, &vt, &s) == HPS_EINVAL, "duplicate names");
    m.name = "bad/name";
    KS_CHECK(hps_kserve_create(NULL, &m, 1, &vt, &s) == HPS_EINVAL, "bad name");
    m = ks_models[0];
    m.version = "v1";
    KS_CHECK(hps_kserve_create(NULL, &m, 1, &vt, &s) == HPS_EINVAL, "bad version");
    m = ks_models[0];
    uint32_t zero_dims[2] = {4, 0};
    m.dims = zero_dims;
    KS_CHECK(hps_kserve_create(NULL, &m, 1, &vt, &s) == HPS_EINVAL, "dim 0");
    m = ks_models[0];
    m.num_tables = 0;
    KS_CHECK(hps_kserve_create(NULL, &m, 1, &vt, &s) == HPS_EINVAL, "no tables");
    hps_kserve_options_t o;
    hps_kserve_options_init(&o);
    o.http_port = 70000;
    KS_CHECK(hps_kserve_create(&o, ks_models, 1, &vt, &s) == HPS_EINVAL, "port range");
    KS_CHECK(s == NULL, "ret untouched");
    /* Port in use, and an address that does not parse. */
    hps_kserve_options_init(&o);
    o.http_port = g_port;
    o.metrics_port = HPS_KSERVE_PORT_DISABLED;
    KS_OK(hps_kserve_create(&o, ks_models, 1, &vt, &s));
    KS_CHECK(hps_kserve_start(s) == -EADDRINUSE, "port in use");
    KS_CHECK(hps_kserve_ports(s, NULL, NULL) == HPS_EINVAL, "not started");
    hps_kserve_destroy(s);
    o.http_port = 0;
    o.http_address = "not an address";
    KS_OK(hps_kserve_create(&o, ks_models, 1, &vt, &s));
    KS_CHECK(hps_kserve_start(s) == HPS_EINVAL, "bad address");
    hps_kserve_destroy(s);
    /* Zeroed options are valid: free ports, defaults. */
    memset(&o, 0, sizeof(o));
    KS_OK(hps_kserve_create(&o, ks_models, 2, &vt, &s));
    KS_OK(hps_kserve_start(s));
    uint16_t p1 = 0, p2 = 0;
    KS_OK(hps_kserve_ports(s, &p1, &p2));
    KS_CHECK(p1 && p2 && p1 != p2, "ports %u %u", p1, p2);
    hps_kserve_destroy(s);
}

/* hps_kserve_add_model on a running server: the new model is served at
 * once as the next index; a duplicate name and a full registry are refused
 * and change nothing. */
static void test_add_model(void **state)
{
    (void)state;
    struct ks_backend be = {.ready = true};
    hps_kserve_backend_t vt = ks_vtable(&be);
    hps_kserve_options_t o;
    hps_kserve_options_init(&o);
    o.http_port = 0;
    o.metrics_port = HPS_KSERVE_PORT_DISABLED;
    o.model_capacity = 2;
    hps_kserve_t *s = NULL;
    KS_OK(hps_kserve_create(&o, ks_models, 1, &vt, &s));
    KS_OK(hps_kserve_start(s));
    uint16_t port = 0;
    KS_OK(hps_kserve_ports(s, &port, NULL));
    struct ks_resp r;
    KS_CHECK(ks_http(port, "GET", "/v2/models/plain", NULL, NULL, 0, &r) == 0, "transport");
    KS_EXPECT(&r, 400, "Request for unknown model: 'plain' is not found");
    ks_resp_free(&r);
    KS_CHECK(hps_kserve_num_models(s) == 1, "one model");
    KS_OK(hps_kserve_add_model(s, &ks_models[1]));
    KS_CHECK(hps_kserve_num_models(s) == 2, "two models");
    KS_CHECK(ks_http(port, "GET", "/v2/models/plain", NULL, NULL, 0, &r) == 0, "transport");
    KS_EXPECT(&r, 200, "\"name\":\"plain\"");
    ks_resp_free(&r);
    KS_CHECK(hps_kserve_add_model(s, &ks_models[1]) == HPS_EINVAL, "a name already registered");
    hps_kserve_model_t m = ks_models[1];
    m.name = "third";
    KS_CHECK(hps_kserve_add_model(s, &m) == HPS_EFULL, "past model_capacity");
    m.name = "bad/name";
    KS_CHECK(hps_kserve_add_model(s, &m) == HPS_EINVAL, "a malformed model");
    KS_CHECK(hps_kserve_num_models(s) == 2, "still two models");
    KS_CHECK(ks_http(port, "GET", "/v2/models/hps_wdl", NULL, NULL, 0, &r) == 0, "transport");
    KS_EXPECT(&r, 200, NULL);
    ks_resp_free(&r);
    hps_kserve_destroy(s);
}

/* ------------------------------------------------------------------------ */
/* Pinned OUTPUT0 buffers (backend pin_output / unpin_output)                */
/* ------------------------------------------------------------------------ */

/* A server on free ports with ks_vtable_pinned(b); g_port points at it. */
static hps_kserve_t *pinned_server(struct ks_backend *b)
{
    hps_kserve_options_t o;
    hps_kserve_options_init(&o);
    o.http_port = 0;
    o.metrics_port = HPS_KSERVE_PORT_DISABLED;
    o.max_body_bytes = MAX_BODY;
    o.max_keys_per_request = MAX_KEYS;
    hps_kserve_backend_t vt = ks_vtable_pinned(b);
    hps_kserve_t *s = NULL;
    KS_OK(hps_kserve_create(&o, ks_models, KS_NUM_MODELS, &vt, &s));
    KS_OK(hps_kserve_start(s));
    KS_OK(hps_kserve_ports(s, &g_port, NULL));
    return s;
}

static uint64_t pinned_lookups(struct ks_backend *b)
{
    pthread_mutex_lock(&b->pin_mu);
    uint64_t n = b->pinned_lookups;
    pthread_mutex_unlock(&b->pin_mu);
    return n;
}

/*
 * 1,024 WDL samples (1.7 MB of OUTPUT0), exact each time, until `want`
 * lookups wrote into a pinned buffer (at most 50 requests, 5 ms apart: a
 * binary response's buffer goes back to the pool only after it was sent,
 * which may be after the client read it).  Returns the requests made.
 */
static int big_rounds(struct ks_backend *b, uint64_t want, bool binary)
{
    int64_t *keys;
    size_t n;
    int32_t nk[2];
    wdl_batch(1024, &keys, &n, nk);
    int r = 0;
    for (; r < 50 && pinned_lookups(b) < want; r++) {
        struct output out;
        wdl_infer(keys, n, nk, (struct reqopt){.keys_bin = true, .out_bin = binary, .bdo = -1},
                  "/v2/models/hps_wdl/infer", &out);
        KS_CHECK(out.n == 1024 * (2 + 26 * 16), "output length %zu", out.n);
        output_free(&out);
        struct timespec ts = {0, 5000000L};
        nanosleep(&ts, NULL);
    }
    free(keys);
    return r;
}

/*
 * A large OUTPUT0 buffer is pinned when it first goes back to the pool,
 * then reused pinned by the next lookups (exact answers, JSON output too),
 * and unpinned by hps_kserve_destroy(); a refused pin leaves it pageable,
 * still exact, never asked again and never unpinned.  Small outputs are not pinned.
 */
static void test_pinned_output(void **state)
{
    (void)state;
    uint16_t port = g_port;
    struct ks_backend b = {.ready = true};
    pthread_mutex_init(&b.pin_mu, NULL);
    hps_kserve_t *s = pinned_server(&b);
    int rounds = big_rounds(&b, 2, true);
    KS_CHECK(pinned_lookups(&b) == 2, "binary: 2 lookups into a pinned buffer in %d requests",
             rounds);
    big_rounds(&b, 3, false);
    KS_CHECK(pinned_lookups(&b) == 3, "JSON output: into the pinned buffer");
    int64_t small[28] = {1, 2, 3};
    int32_t nk[2] = {2, 26};
    struct output out;
    wdl_infer(small, 28, nk, (struct reqopt){.keys_bin = true, .out_bin = 1, .bdo = -1},
              "/v2/models/hps_wdl/infer", &out);
    output_free(&out);
    hps_kserve_destroy(s);
    KS_CHECK(!b.pin_bad && !atomic_load(&b.bad_args), "pin bookkeeping consistent");
    KS_CHECK(b.pins >= 1 && b.pins == b.pin_calls && b.pins < (uint64_t)rounds + 1,
             "%llu pins, %llu calls, %d requests", (unsigned long long)b.pins,
             (unsigned long long)b.pin_calls, rounds + 1);
    KS_CHECK(b.pinned_lookups == 3, "the small output was not pinned");
    KS_CHECK(b.unpins == b.pins, "destroy unpinned every buffer: %llu unpins of %llu",
             (unsigned long long)b.unpins, (unsigned long long)b.pins);
    pthread_mutex_destroy(&b.pin_mu);

    struct ks_backend f = {.ready = true, .pin_fail = HPS_EIO};
    pthread_mutex_init(&f.pin_mu, NULL);
    s = pinned_server(&f);
    rounds = big_rounds(&f, 1, true);
    hps_kserve_destroy(s);
    KS_CHECK(rounds == 50 && !f.pin_bad && f.pins == 0 && f.pin_calls >= 1 && f.pin_calls < 50 &&
                 f.unpins == 0 && f.pinned_lookups == 0,
             "failed pins: %d requests exact, %llu calls, %llu unpins", rounds,
             (unsigned long long)f.pin_calls, (unsigned long long)f.unpins);
    pthread_mutex_destroy(&f.pin_mu);

    hps_kserve_backend_t half = ks_vtable(&f);
    half.pin_output = ks_pin;
    KS_CHECK(hps_kserve_create(NULL, ks_models, 1, &half, &s) == HPS_EINVAL,
             "pin_output without unpin_output");
    g_port = port;
}

/* Open a request that declares a cl-byte body and send its first sent
 * bytes (spaces), then stall; returns the socket. */
static int stalled_body(uint16_t port, size_t cl, size_t sent)
{
    int fd = ks_connect(port);
    KS_CHECK(fd >= 0, "connect");
    char head[160];
    snprintf(head, sizeof(head), "POST " P " HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n",
             cl);
    char *pad = malloc(sent);
    memset(pad, ' ', sent);
    KS_CHECK(ks_send_all(fd, head, strlen(head)) && ks_send_all(fd, pad, sent), "send");
    free(pad);
    return fd;
}

/* Bodies buffered over all connections are bounded: with 2.5 MiB allowed,
 * two stalled 1 MB uploads hold 2 MB, a third upload gets 503 (its body
 * read and dropped) while small requests still pass, and once the stalled
 * clients go the budget is whole again.  (Stalled uploads used to grow the
 * worker to max_connections x max_body_size: 2.47 GB with 40 clients.) */
static void test_body_budget(void **state)
{
    (void)state;
    uint16_t port0 = g_port;
    hps_kserve_options_t o;
    hps_kserve_options_init(&o);
    o.http_port = 0;
    o.metrics_port = HPS_KSERVE_PORT_DISABLED;
    o.max_body_bytes = MAX_BODY;
    o.max_buffered_body_bytes = 5 * MAX_BODY / 2;
    struct ks_backend b = {.ready = true};
    hps_kserve_backend_t vt = ks_vtable(&b);
    hps_kserve_t *s = NULL;
    uint16_t port;
    KS_OK(hps_kserve_create(&o, ks_models, KS_NUM_MODELS, &vt, &s));
    KS_OK(hps_kserve_start(s));
    KS_OK(hps_kserve_ports(s, &port, NULL));
    const size_t cl = 1000000;
    int f1 = stalled_body(port, cl, 900000), f2 = stalled_body(port, cl, 900000);
    usleep(300 * 1000); /* both hold their 1 MB buffers */
    int f3 = stalled_body(port, cl, cl);
    struct ks_resp r;
    KS_CHECK(ks_read_resp(f3, &r) == 0, "response");
    KS_EXPECT(&r, 503,
              "server busy: the request bodies being received exceed 2621440 bytes in "
              "all; retry later");
    ks_resp_free(&r);
    close(f3);
    const char *small = REQ(K("[1,2,3]"), NK);
    KS_CHECK(ks_http(port, "POST", P, NULL, small, strlen(small), &r) == 0, "small request");
    KS_EXPECT(&r, 200, NULL);
    ks_resp_free(&r);
    close(f1);
    close(f2);
    usleep(300 * 1000); /* their buffers are given back */
    size_t n = 900000;
    char *big = malloc(n + 1);
    memset(big, ' ', n);
    memcpy(big + n - strlen(small), small, strlen(small));
    KS_CHECK(ks_http(port, "POST", P, NULL, big, n, &r) == 0, "large request");
    KS_EXPECT(&r, 200, NULL);
    ks_resp_free(&r);
    free(big);
    hps_kserve_destroy(s);
    g_port = port0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_health, test_setup),
        cmocka_unit_test(test_add_model),
        cmocka_unit_test_setup(test_degraded, test_setup),
        cmocka_unit_test_setup(test_server_metadata, test_setup),
        cmocka_unit_test_setup(test_model_metadata, test_setup),
        cmocka_unit_test_setup(test_infer_json_binary_identical, test_setup),
        cmocka_unit_test_setup(test_infer_plain, test_setup),
        cmocka_unit_test_setup(test_infer_empty, test_setup),
        cmocka_unit_test_setup(test_infer_errors, test_setup),
        cmocka_unit_test_setup(test_chunked_over_limit, test_setup),
        cmocka_unit_test_setup(test_routes, test_setup),
        cmocka_unit_test_setup(test_keepalive, test_setup),
        cmocka_unit_test_setup(test_backend_errors_and_stats, test_setup),
        cmocka_unit_test_setup(test_metrics, test_setup),
        cmocka_unit_test_setup(test_concurrent, test_setup),
        cmocka_unit_test_setup(test_fuzz_tcp, test_setup),
        cmocka_unit_test_setup(test_graceful_stop, test_setup),
        cmocka_unit_test_setup(test_create_errors, test_setup),
        cmocka_unit_test_setup(test_pinned_output, test_setup),
        cmocka_unit_test_setup(test_body_budget, test_setup),
    };
    if (getenv("KS_TEST_FILTER")) /* e.g. KS_TEST_FILTER=test_fuzz_tcp */
        cmocka_set_test_filter(getenv("KS_TEST_FILTER"));
    return cmocka_run_group_tests_name("kserve-http", tests, group_setup, group_teardown);
}
