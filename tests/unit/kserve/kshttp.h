/*
 * kshttp.h -- the fixture and request helpers shared by the HTTP front-end
 * tests over real TCP (test-kserve-http.c, test-kserve-http-infer.c,
 * test-kserve-http-lifecycle.c): one in-process server per test program on
 * free ports with the fake backend of kstest.h, a backend reset before each
 * test, inference request builders (JSON or binary KEYS / NUMKEYS), decoding
 * and bit-exact checking of OUTPUT0, and request-string fragments.
 * Header-only; every function is static.
 */
#ifndef HPS_TESTS_KSHTTP_H
#define HPS_TESTS_KSHTTP_H

#include <json-c/json.h>

#include "kstest.h"

#define MAX_BODY (1u << 20)
#define MAX_KEYS 50000u

static struct ks_backend g_be;
static hps_kserve_t *g_srv;
static uint16_t g_port, g_mport;

static inline int group_setup(void **state)
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

static inline int group_teardown(void **state)
{
    (void)state;
    hps_kserve_destroy(g_srv);
    return 0;
}

/* Reset the fake backend between tests. */
static inline int test_setup(void **state)
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

static inline void put_shape(json_object *in, bool batching, size_t n)
{
    json_object *shape = json_object_new_array();
    if (batching)
        json_object_array_add(shape, json_object_new_int64(1));
    json_object_array_add(shape, json_object_new_int64((int64_t)n));
    json_object_object_add(in, "shape", shape);
}

static inline json_object *make_input(const char *name, const char *dt, bool batching, size_t n)
{
    json_object *in = json_object_new_object();
    json_object_object_add(in, "name", json_object_new_string(name));
    json_object_object_add(in, "datatype", json_object_new_string(dt));
    put_shape(in, batching, n);
    return in;
}

static inline void set_bin_size(json_object *in, size_t bytes)
{
    json_object *p = json_object_new_object();
    json_object_object_add(p, "binary_data_size", json_object_new_int64((int64_t)bytes));
    json_object_object_add(in, "parameters", p);
}

static inline json_object *keys_input(const int64_t *keys, size_t n, const struct reqopt *o)
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

static inline json_object *numkeys_input(const int32_t *nk, uint32_t nt, const struct reqopt *o)
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

static inline json_object *request_json(const int64_t *keys, size_t n, const int32_t *nk,
                                        uint32_t nt, const struct reqopt *o)
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
static inline struct body build(const int64_t *keys, size_t n, const int32_t *nk, uint32_t nt,
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
static inline void post_infer(const char *path, const struct body *b, bool header,
                              struct ks_resp *r)
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

static inline void output_free(struct output *o)
{
    json_object_put(o->hdr);
    free(o->v);
    memset(o, 0, sizeof(*o));
}

static inline json_object *out0(json_object *hdr)
{
    json_object *outs = NULL;
    json_object_object_get_ex(hdr, "outputs", &outs);
    KS_CHECK(json_object_array_length(outs) == 1, "one output");
    return json_object_array_get_idx(outs, 0);
}

static inline int64_t out_shape(json_object *o)
{
    json_object *shape = NULL;
    json_object_object_get_ex(o, "shape", &shape);
    KS_CHECK(json_object_array_length(shape) == 1, "1-D output");
    return json_object_get_int64(json_object_array_get_idx(shape, 0));
}

static inline void decode(const struct ks_resp *r, struct output *o)
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
static inline void check_values(size_t mi, const int64_t *keys, const int32_t *nk,
                                const struct output *o)
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

static inline int64_t param_i64(json_object *hdr, const char *name)
{
    json_object *p = NULL, *v = NULL;
    KS_CHECK(json_object_object_get_ex(hdr, "parameters", &p) &&
                 json_object_object_get_ex(p, name, &v),
             "parameter %s", name);
    return json_object_get_int64(v);
}

static inline const char *str_member(json_object *o, const char *k)
{
    json_object *v = NULL;
    return json_object_object_get_ex(o, k, &v) ? json_object_get_string(v) : NULL;
}

/* A WDL batch of `batch` samples: 2 wide keys, 26 deep keys per sample. */
static inline void wdl_batch(size_t batch, int64_t **keys, size_t *n, int32_t nk[2])
{
    nk[0] = (int32_t)(2 * batch);
    nk[1] = (int32_t)(26 * batch);
    *n = 28 * batch;
    *keys = malloc(*n * sizeof(int64_t));
    for (size_t i = 0; i < *n; i++)
        (*keys)[i] = (int64_t)(ks_rand() >> (ks_rand() % 64)) * (ks_rand() & 1 ? -1 : 1);
}

/* One WDL request in a given encoding; returns the decoded output. */
static inline void wdl_infer(const int64_t *keys, size_t n, const int32_t *nk, struct reqopt o,
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

/* Request fragments: the WDL infer path, KEYS as JSON data d, NUMKEYS
 * [1,2], KEYS as n bytes of binary data, and inputs arrays. */
#define P    "/v2/models/hps_wdl/infer"
#define K(d) "{\"name\":\"KEYS\",\"datatype\":\"INT64\",\"shape\":[1,3],\"data\":" d "}"
#define NK   "{\"name\":\"NUMKEYS\",\"datatype\":\"INT32\",\"shape\":[1,2],\"data\":[1,2]}"
#define KB(n)                                                                                      \
    "{\"name\":\"KEYS\",\"datatype\":\"INT64\",\"shape\":[1,3],\"parameters\":{\"binary_data_"     \
    "size\":" #n "}}"
#define REQ1(a)       "{\"inputs\":[" a "]}"
#define REQ(a, b)     "{\"inputs\":[" a "," b "]}"
#define REQ3(a, b, c) "{\"inputs\":[" a "," b "," c "]}"

static inline void simple_infer(int expect_status, const char *msg)
{
    struct ks_resp r;
    const char *body = REQ(K("[1,2,3]"), NK);
    KS_CHECK(ks_http(g_port, "POST", P, NULL, body, strlen(body), &r) == 0, "transport");
    KS_EXPECT(&r, expect_status, msg);
    ks_resp_free(&r);
}

#endif /* HPS_TESTS_KSHTTP_H */
