/*
 * test-kserve-parse.c -- the network-free parts of the HTTP front end:
 * router, inference request parser (including a mutation fuzz loop),
 * JSON / float / label formatting, metrics text.
 */
#include <float.h>
#include <math.h>

#include <json-c/json.h>

#include "kstest.h"
#include "worker/kserve_internal.h"

static uint32_t wdl_dims[2] = {1, 16};
static uint32_t wdl_kps[2] = {2, 26};
static char *wdl_names[2] = {"wide", "deep"};
static struct hps__kserve_kmodel wdl = {
    .name = "hps_wdl",
    .name_len = 7,
    .version_num = 1,
    .num_tables = 2,
    .dims = wdl_dims,
    .table_names = wdl_names,
    .max_keys_per_sample = wdl_kps,
    .keys_per_sample = 28,
    .max_dim = 16,
    .max_batch_size = 1024,
    .device_id = 3,
};
static const struct hps__kserve_klimits lim = {.max_keys = 1000, .json_depth = 32};

static int group_setup(void **state)
{
    (void)state;
    ks_seed();
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Router                                                                    */
/* ------------------------------------------------------------------------ */

static void test_route(void **state)
{
    (void)state;
    static const struct {
        const char *url;
        enum hps__kserve_route_kind kind;
        const char *model, *version;
    } cases[] = {
        {"/v2", HPS__KSERVE_R_SERVER_META, NULL, NULL},
        {"/v2/health/live", HPS__KSERVE_R_LIVE, NULL, NULL},
        {"/v2/health/ready", HPS__KSERVE_R_READY, NULL, NULL},
        {"/v2/models/stats", HPS__KSERVE_R_ALL_STATS, NULL, NULL},
        {"/v2/models/m", HPS__KSERVE_R_MODEL_META, "m", NULL},
        {"/v2/models/m/versions/12", HPS__KSERVE_R_MODEL_META, "m", "12"},
        {"/v2/models/m/versions/12/infer", HPS__KSERVE_R_INFER, "m", "12"},
        {"/v2/models/a.b-c_d/infer", HPS__KSERVE_R_INFER, "a.b-c_d", NULL},
        {"/v2/models/m/ready", HPS__KSERVE_R_MODEL_READY, "m", NULL},
        {"/v2/models/m/config", HPS__KSERVE_R_MODEL_CONFIG, "m", NULL},
        {"/v2/models/m/stats", HPS__KSERVE_R_MODEL_STATS, "m", NULL},
        {"/v2/models/m/versions/1/stats", HPS__KSERVE_R_MODEL_STATS, "m", "1"},
        {"/v2/systemsharedmemory/status", HPS__KSERVE_R_SHM_STATUS, NULL, NULL},
        {"/v2/systemsharedmemory/region/r/register", HPS__KSERVE_R_SHM_REGISTER, NULL, NULL},
        {"/v2/cudasharedmemory/unregister", HPS__KSERVE_R_SHM_UNREGISTER, NULL, NULL},
        {"/v2/cudasharedmemory/region/x/status", HPS__KSERVE_R_SHM_STATUS, NULL, NULL},
        {"", HPS__KSERVE_R_NOT_FOUND, NULL, NULL},
        {"/", HPS__KSERVE_R_NOT_FOUND, NULL, NULL},
        {"/v2/", HPS__KSERVE_R_NOT_FOUND, NULL, NULL},
        {"/v22", HPS__KSERVE_R_NOT_FOUND, NULL, NULL},
        {"/v2/health/live/", HPS__KSERVE_R_NOT_FOUND, NULL, NULL},
        {"/v2/models/", HPS__KSERVE_R_NOT_FOUND, NULL, NULL},
        {"/v2/models//infer", HPS__KSERVE_R_NOT_FOUND, NULL, NULL},
        {"/v2/models/m/", HPS__KSERVE_R_NOT_FOUND, NULL, NULL},
        {"/v2/models/m/versions/", HPS__KSERVE_R_NOT_FOUND, NULL, NULL},
        {"/v2/models/m/versions/1a", HPS__KSERVE_R_NOT_FOUND, NULL, NULL},
        {"/v2/models/m/versions/-1", HPS__KSERVE_R_NOT_FOUND, NULL, NULL},
        {"/v2/models/m/infer/x", HPS__KSERVE_R_NOT_FOUND, NULL, NULL},
        {"/v2/models/m/generate", HPS__KSERVE_R_NOT_FOUND, NULL, NULL},
        {"/v2/models/m/trace/setting", HPS__KSERVE_R_NOT_FOUND, NULL, NULL},
        {"/v2/repository/index", HPS__KSERVE_R_REPO_INDEX, NULL, NULL},
        {"/v2/repository/models/m/load", HPS__KSERVE_R_REPO_LOAD, "m", NULL},
        {"/v2/repository/models/a.b/unload", HPS__KSERVE_R_REPO_UNLOAD, "a.b", NULL},
        {"/v2/repository/r/index", HPS__KSERVE_R_REPO_NAMED, NULL, NULL},
        {"/v2/repository/r/models/m/load", HPS__KSERVE_R_REPO_NAMED, "m", NULL},
        {"/v2/repository", HPS__KSERVE_R_NOT_FOUND, NULL, NULL},
        {"/v2/repository/", HPS__KSERVE_R_NOT_FOUND, NULL, NULL},
        {"/v2/repository/index/", HPS__KSERVE_R_NOT_FOUND, NULL, NULL},
        {"/v2/repository/models//load", HPS__KSERVE_R_NOT_FOUND, NULL, NULL},
        {"/v2/repository/models/m/reload", HPS__KSERVE_R_NOT_FOUND, NULL, NULL},
        {"/v2/repository/r/models/m", HPS__KSERVE_R_NOT_FOUND, NULL, NULL},
        {"/v2/repository//index", HPS__KSERVE_R_NOT_FOUND, NULL, NULL},
        {"/v2/systemsharedmemory/region//status", HPS__KSERVE_R_NOT_FOUND, NULL, NULL},
        {"/v2/systemsharedmemory/foo", HPS__KSERVE_R_NOT_FOUND, NULL, NULL},
        {"/v2/systemsharedmemoryx/status", HPS__KSERVE_R_NOT_FOUND, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct hps__kserve_route r;
        hps__kserve_route_parse(cases[i].url, &r);
        KS_CHECK(r.kind == cases[i].kind, "%s: kind %d", cases[i].url, (int)r.kind);
        if (cases[i].model)
            KS_CHECK(r.model_len == strlen(cases[i].model) &&
                         !memcmp(r.model, cases[i].model, r.model_len),
                     "%s: model", cases[i].url);
        if (cases[i].version)
            KS_CHECK(r.version && r.version_len == strlen(cases[i].version) &&
                         !memcmp(r.version, cases[i].version, r.version_len),
                     "%s: version", cases[i].url);
        else
            KS_CHECK(!r.version, "%s: no version", cases[i].url);
    }
    KS_CHECK(hps__kserve_route_method(HPS__KSERVE_R_INFER) &&
                 !strcmp(hps__kserve_route_method(HPS__KSERVE_R_INFER), "POST"),
             "infer is POST");
    KS_CHECK(!strcmp(hps__kserve_route_method(HPS__KSERVE_R_SHM_STATUS), "GET"), "status is GET");
    KS_CHECK(hps__kserve_route_method(HPS__KSERVE_R_NOT_FOUND) == NULL, "not found");
    hps__kserve_kerr_t err;
    struct hps__kserve_route r;
    hps__kserve_route_parse("/v2/models/hps_wdl/versions/0001/infer", &r);
    KS_CHECK(hps__kserve_route_model(&r, &wdl, 1, NULL, &err) == 0, "0001 is version 1");
    hps__kserve_route_parse("/v2/models/hps_wdl/versions/18446744073709551616/infer", &r);
    KS_CHECK(hps__kserve_route_model(&r, &wdl, 1, NULL, &err) == -1 && err.status == 400,
             "overflow");
    hps__kserve_route_parse("/v2/models/hps_wd/infer", &r);
    KS_CHECK(hps__kserve_route_model(&r, &wdl, 1, NULL, &err) == -2 &&
                 !strcmp(err.msg, "Request for unknown model: 'hps_wd' is not found"),
             "%s", err.msg);
    hps__kserve_route_parse("/v2/systemsharedmemory/region/in_0/register", &r);
    KS_CHECK(r.kind == HPS__KSERVE_R_SHM_REGISTER && !r.cuda && r.region_len == 4 &&
                 !strncmp(r.region, "in_0", 4),
             "system region");
    hps__kserve_route_parse("/v2/cudasharedmemory/unregister", &r);
    KS_CHECK(r.kind == HPS__KSERVE_R_SHM_UNREGISTER && r.cuda && !r.region, "cuda, no region");
    /* the unescaper: %HH decoded, except %2F and %00, which cannot make
     * separators or cut the path; a bad escape stays as it is */
    const struct {
        const char *in, *out;
        enum hps__kserve_route_kind kind;
    } esc[] = {
        {"/%76%32/health/ready", "/v2/health/ready", HPS__KSERVE_R_READY},
        {"/v2/models/%6d/infer", "/v2/models/m/infer", HPS__KSERVE_R_INFER},
        {"/v2%2Frepository/index", "/v2%2Frepository/index", HPS__KSERVE_R_NOT_FOUND},
        {"/v2%2frepository%2fmodels%2fm%2funload", "/v2%2frepository%2fmodels%2fm%2funload",
         HPS__KSERVE_R_NOT_FOUND},
        {"/v2/models/m%00xyz", "/v2/models/m%00xyz", HPS__KSERVE_R_MODEL_META},
        {"/v2/systemsharedmemory/region/a%20b/status", "/v2/systemsharedmemory/region/a b/status",
         HPS__KSERVE_R_SHM_STATUS},
        {"/v2/models/m%2", "/v2/models/m%2", HPS__KSERVE_R_MODEL_META},
        {"/v2/models/m%zz/%252F", "/v2/models/m%zz/%2F", HPS__KSERVE_R_NOT_FOUND},
    };
    for (size_t i = 0; i < sizeof(esc) / sizeof(esc[0]); i++) {
        char buf[128];
        snprintf(buf, sizeof(buf), "%s", esc[i].in);
        size_t n = hps__kserve_unescape(NULL, NULL, buf);
        KS_CHECK(n == strlen(esc[i].out) && !strcmp(buf, esc[i].out), "unescape %s: %s", esc[i].in,
                 buf);
        hps__kserve_route_parse(buf, &r);
        KS_CHECK(r.kind == esc[i].kind, "%s: kind %d", esc[i].in, (int)r.kind);
    }
}

/* ------------------------------------------------------------------------ */
/* Parser                                                                    */
/* ------------------------------------------------------------------------ */

static int parse(const char *body, size_t len, const char *hdr, struct hps__kserve_infer_req *r,
                 hps__kserve_kerr_t *err)
{
    /* Copy into an exact-size heap buffer so ASan sees any overread. */
    char *copy = malloc(len ? len : 1);
    memcpy(copy, body, len);
    int rc = hps__kserve_infer_parse(&lim, &wdl, copy, len, hdr, r, err);
    if (rc == 0) {
        /* Touch every key: keys may point into the body. */
        volatile uint64_t sink = 0;
        for (size_t i = 0; i < r->num_keys; i++)
            sink += (uint64_t)r->keys[i];
        (void)sink;
        hps__kserve_infer_req_fini(r);
    }
    free(copy);
    return rc;
}

static void test_parse_json(void **state)
{
    (void)state;
    const char *body =
        "{\"id\":\"a\\\"b\",\"parameters\":{\"binary_data_output\":true,\"priority\":1,\"x\":\"y\"}"
        ","
        "\"inputs\":[{\"name\":\"NUMKEYS\",\"datatype\":\"INT32\",\"shape\":[1,2],\"data\":[[1],[2]"
        "]},"
        "{\"name\":\"KEYS\",\"datatype\":\"INT64\",\"shape\":[1,3],"
        "\"data\":[-9223372036854775808,9223372036854775807,0]}],"
        "\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":{\"binary_data\":false}}]}  \n";
    struct hps__kserve_infer_req r;
    hps__kserve_kerr_t err;
    KS_CHECK(hps__kserve_infer_parse(&lim, &wdl, body, strlen(body), NULL, &r, &err) == 0, "%s",
             err.msg);
    KS_CHECK(r.num_keys == 3 && r.keys[0] == INT64_MIN && r.keys[1] == INT64_MAX && r.keys[2] == 0,
             "keys");
    KS_CHECK(r.numkeys[0] == 1 && r.numkeys[1] == 2, "numkeys");
    KS_CHECK(r.out_len == 1 * 1 + 2 * 16, "out_len %llu", (unsigned long long)r.out_len);
    KS_CHECK(r.num_samples == 0, "3 / 28");
    KS_CHECK(!r.binary_output, "per-output flag overrides binary_data_output");
    KS_CHECK(r.id_len == 3 && !memcmp(r.id, "a\"b", 3), "id");
    float out[33];
    for (int i = 0; i < 33; i++)
        out[i] = (float)i / 3.0f;
    hps__kserve_text_t t;
    hps__kserve_text_init(&t);
    hps__kserve_resp_infer(&t, &wdl, &r, out, hps__kserve_kmodel_version(&wdl));
    json_object *j = json_tokener_parse(t.data), *o = NULL, *d = NULL;
    KS_CHECK(j, "response parses: %s", t.data);
    KS_CHECK(json_object_object_get_ex(j, "outputs", &o), "outputs");
    o = json_object_array_get_idx(o, 0);
    KS_CHECK(json_object_object_get_ex(o, "data", &d) && json_object_array_length(d) == 33, "data");
    for (int i = 0; i < 33; i++)
        KS_CHECK((float)json_object_get_double(json_object_array_get_idx(d, (size_t)i)) == out[i],
                 "value %d", i);
    KS_CHECK(strstr(t.data, "\"id\":\"a\\\"b\""), "id escaped: %s", t.data);
    KS_CHECK(strstr(t.data, "\"parameters\":{\"NumSample\":0,\"DeviceID\":3}"), "%s", t.data);
    json_object_put(j);
    hps__kserve_text_fini(&t);
    hps__kserve_infer_req_fini(&r);
}

/* Binary KEYS at an aligned and an unaligned offset. */
static void test_parse_binary(void **state)
{
    (void)state;
    int64_t keys[28];
    for (int i = 0; i < 28; i++)
        keys[i] = (int64_t)ks_rand();
    int32_t nk[2] = {2, 26};
    for (int pad = 0; pad < 8; pad++) {
        char json[512];
        int jl = snprintf(json, sizeof(json),
                          "{\"inputs\":[{\"name\":\"KEYS\",\"datatype\":\"INT64\",\"shape\":[1,28],"
                          "\"parameters\":{\"binary_data_size\":224}},{\"name\":\"NUMKEYS\","
                          "\"datatype\":\"INT32\",\"shape\":[1,2],\"parameters\":"
                          "{\"binary_data_size\":8}}],\"parameters\":{\"binary_data_output\":true}}"
                          "%*s",
                          pad, "");
        size_t len = (size_t)jl + 224 + 8;
        char *body = aligned_alloc(64, 512 + 256);
        memcpy(body, json, (size_t)jl);
        memcpy(body + jl, keys, 224);
        memcpy(body + jl + 224, nk, 8);
        char hdr[16];
        snprintf(hdr, sizeof(hdr), " %d ", jl);
        struct hps__kserve_infer_req r;
        hps__kserve_kerr_t err;
        KS_CHECK(hps__kserve_infer_parse(&lim, &wdl, body, len, hdr, &r, &err) == 0, "pad %d: %s",
                 pad, err.msg);
        KS_CHECK(((uintptr_t)r.keys & 7) == 0, "aligned keys");
        KS_CHECK(((jl & 7) == 0) == ((const char *)r.keys == body + jl), "in place iff aligned");
        KS_CHECK(!memcmp(r.keys, keys, 224) && r.numkeys[1] == 26, "values");
        KS_CHECK(r.binary_output && r.num_samples == 1 && r.out_len == 2 + 26 * 16, "fields");
        hps__kserve_infer_req_fini(&r);
        free(body);
    }
}

static void expect_err(const char *body, const char *hdr, unsigned status, const char *msg)
{
    struct hps__kserve_infer_req r;
    hps__kserve_kerr_t err;
    int rc = parse(body, strlen(body), hdr, &r, &err);
    KS_CHECK(rc == -1, "accepted: %s", body);
    KS_CHECK(err.status == status && strstr(err.msg, msg), "%s -> %u %s (expected %u %s)", body,
             err.status, err.msg, status, msg);
}

#define NK       "{\"name\":\"NUMKEYS\",\"datatype\":\"INT32\",\"shape\":[1,2],\"data\":[1,0]}"
#define KEYS1(v) "{\"name\":\"KEYS\",\"datatype\":\"INT64\",\"shape\":[1,1],\"data\":[" v "]}"

static void expect_ok(const char *body)
{
    struct hps__kserve_infer_req r;
    hps__kserve_kerr_t err;
    KS_CHECK(parse(body, strlen(body), NULL, &r, &err) == 0, "%s: %s", body, err.msg);
}

/* The lexical pass: exact int64, no NaN / Infinity / single quotes. */
static void test_lexical(void **state)
{
    (void)state;
    expect_ok("{\"inputs\":[" KEYS1("-9223372036854775808") "," NK "]}");
    expect_ok("{\"inputs\":[" KEYS1("9223372036854775807") "," NK "]}");
    expect_ok("{\"inputs\":[" KEYS1("-0") "," NK "]}");
    expect_ok("{\"id\":\"99999999999999999999 NaN 'x' \\\" Infinity\",\"inputs\":[" KEYS1(
        "1") "," NK "]}");
    expect_ok("{\"parameters\":{\"t\":true,\"f\":false},\"extra\":null,\"inputs\":[" KEYS1(
        "1") "," NK "]}");
    expect_err("{\"inputs\":[" KEYS1("9223372036854775808") "," NK "]}", NULL, 400, "int64 range");
    expect_err("{\"inputs\":[" KEYS1("-9223372036854775809") "," NK "]}", NULL, 400, "int64 range");
    expect_err("{\"inputs\":[" KEYS1("18446744073709551616") "," NK "]}", NULL, 400, "int64 range");
    expect_err("{\"inputs\":[" KEYS1("-Infinity") "," NK "]}", NULL, 400, "failed to parse");
    expect_err("{\"inputs\":[" KEYS1("Infinity") "," NK "]}", NULL, 400, "Infinity");
    expect_err("{\"inputs\":[" KEYS1("NaN") "," NK "]}", NULL, 400, "NaN");
    expect_err("{'inputs':[" KEYS1("1") "," NK "]}", NULL, 400, "single-quoted");
    expect_err("{\"inputs\":[" KEYS1("1.5e3") "," NK "]}", NULL, 400, "not an INT64");
    expect_err("{\"inputs\":[" KEYS1("1") "," NK "]}x", NULL, 400, "failed to parse");
    expect_err("{\"inputs\":[" KEYS1("1") "," NK "]}\x01\x02", NULL, 400, "failed to parse");
    expect_err("{\"inputs\":[{\"name\":\"KEYS\",\"datatype\":\"INT64\",\"shape\":[1,1],"
               "\"parameters\":{\"binary_data_size\":8}}," NK "]}\x01\x02\x03\x04\x05\x06\x07\x08",
               NULL, 400, "must specify valid 'Infer-Header-Content-Length'");
    expect_err("{\"inputs\":[" KEYS1("1") "," NK "]}", "-5", 400, "Unable to parse");
    expect_err("{\"inputs\":[" KEYS1("1") "," NK "]}", "", 400, "Unable to parse");
    expect_err("{\"inputs\":[" KEYS1("1") "," NK "]}", "99999999999999999999999", 400,
               "should be in range");
    expect_err("{\"inputs\":[" KEYS1("1") "," NK "]}", "10", 400, "failed to parse");
    /* Too many values for the key limit: refused before json-c sees them. */
    size_t n = 70000;
    char *big = malloc(n * 4 + 64);
    size_t w = (size_t)sprintf(big, "{\"x\":[");
    for (size_t i = 0; i < n; i++)
        w += (size_t)sprintf(big + w, "[1],");
    sprintf(big + w - 1, "]}");
    expect_err(big, NULL, 400, "more than 67536 values");
    free(big);
}

/* Mutations of valid requests and random bytes: never crash, and every
 * outcome is a success with consistent fields or an error with a status. */
static void test_fuzz_parser(void **state)
{
    (void)state;
    int64_t keys[28];
    int32_t nk[2] = {2, 26};
    for (int i = 0; i < 28; i++)
        keys[i] = i * 1000003;
    char seeds[3][1024];
    size_t seed_len[3], seed_hlen[3];
    seed_len[0] = seed_hlen[0] = (size_t)snprintf(
        seeds[0], sizeof(seeds[0]),
        "{\"id\":\"x\",\"inputs\":[{\"name\":\"KEYS\",\"datatype\":\"INT64\",\"shape\":[1,3],"
        "\"data\":[[1,-2],[3]]},{\"name\":\"NUMKEYS\",\"datatype\":\"INT32\",\"shape\":[1,2],"
        "\"data\":[1,2]}],\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":{\"binary_data\":true}}"
        "]}");
    int jl = snprintf(seeds[1], sizeof(seeds[1]),
                      "{\"inputs\":[{\"name\":\"KEYS\",\"datatype\":\"INT64\",\"shape\":[1,28],"
                      "\"parameters\":{\"binary_data_size\":224}},{\"name\":\"NUMKEYS\","
                      "\"datatype\":\"INT32\",\"shape\":[1,2],\"data\":[2,26]}]}");
    memcpy(seeds[1] + jl, keys, 224);
    seed_hlen[1] = (size_t)jl;
    seed_len[1] = (size_t)jl + 224;
    jl = snprintf(seeds[2], sizeof(seeds[2]),
                  "{\"inputs\":[{\"name\":\"NUMKEYS\",\"datatype\":\"INT32\",\"shape\":[1,2],"
                  "\"parameters\":{\"binary_data_size\":8}},{\"name\":\"KEYS\",\"datatype\":"
                  "\"INT64\",\"shape\":[1,28],\"parameters\":{\"binary_data_size\":224}}]}");
    memcpy(seeds[2] + jl, nk, 8);
    memcpy(seeds[2] + jl + 8, keys, 224);
    seed_hlen[2] = (size_t)jl;
    seed_len[2] = (size_t)jl + 232;
    static const char tokens[][24] = {"{",    "}",    "[",  "]",       ",",
                                      ":",    "\"",   "-",  "0",       "1e9",
                                      "null", "true", "\\", "\\u0000", "99999999999999999999",
                                      "[[[["};
    unsigned ok = 0, bad = 0;
    char buf[2048];
    for (int it = 0; it < 60000; it++) {
        int s = (int)(ks_rand() % 3);
        size_t len = seed_len[s];
        memcpy(buf, seeds[s], len);
        unsigned muts = (unsigned)(ks_rand() % 6);
        for (unsigned k = 0; k < muts && len > 0; k++) {
            size_t pos = ks_rand() % len;
            switch (ks_rand() % 4) {
            case 0: /* flip a byte */
                buf[pos] = (char)ks_rand();
                break;
            case 1: /* truncate */
                len = pos;
                break;
            case 2: { /* insert a token */
                const char *tk = tokens[ks_rand() % (sizeof(tokens) / sizeof(tokens[0]))];
                size_t tl = strlen(tk);
                if (len + tl < sizeof(buf)) {
                    memmove(buf + pos + tl, buf + pos, len - pos);
                    memcpy(buf + pos, tk, tl);
                    len += tl;
                }
                break;
            }
            default: /* delete a span */
                memmove(buf + pos, buf + pos + (len - pos) / 2, len - pos - (len - pos) / 2);
                len -= (len - pos) / 2;
                break;
            }
        }
        if (it % 10 == 0) /* pure garbage */
            for (size_t k = 0; k < len; k++)
                buf[k] = (char)ks_rand();
        char hdr[32], *h = NULL;
        unsigned hm = (unsigned)(ks_rand() % 4);
        if (hm == 1 || (hm == 2 && s)) {
            snprintf(hdr, sizeof(hdr), "%zu",
                     hm == 1 ? (size_t)(ks_rand() % (len + 3)) : seed_hlen[s]);
            h = hdr;
        }
        struct hps__kserve_infer_req r;
        hps__kserve_kerr_t err = {0};
        if (parse(buf, len, h, &r, &err) == 0) {
            ok++;
        } else {
            bad++;
            KS_CHECK(err.status == 400 || err.status == 404 || err.status == 500 ||
                         err.status == 501,
                     "status %u", err.status);
            KS_CHECK(err.msg[0] != '\0', "message");
        }
    }
    printf("# fuzz: %u accepted, %u rejected\n", ok, bad);
    KS_CHECK(ok > 100 && bad > 100, "both outcomes exercised");
}

/* ------------------------------------------------------------------------ */
/* Formatting                                                                */
/* ------------------------------------------------------------------------ */

static void test_f32_roundtrip(void **state)
{
    (void)state;
    hps__kserve_text_t t;
    hps__kserve_text_init(&t);
    for (int i = 0; i < 200000; i++) {
        uint32_t bits = (uint32_t)ks_rand();
        float v;
        if (i < 6) {
            const float special[] = {0.0f, -0.0f, FLT_MIN, FLT_MAX, FLT_TRUE_MIN, 1.0f / 3.0f};
            v = special[i];
        } else {
            memcpy(&v, &bits, 4);
        }
        if (!isfinite(v))
            continue;
        t.len = 0;
        hps__kserve_text_f32(&t, v);
        KS_CHECK(!t.oom && t.len < 20, "length");
        float back = strtof(t.data, NULL);
        KS_CHECK(memcmp(&back, &v, 4) == 0, "%s does not round-trip %08x", t.data, bits);
    }
    t.len = 0;
    hps__kserve_text_f32(&t, NAN);
    hps__kserve_text_putc(&t, ' ');
    hps__kserve_text_f32(&t, INFINITY);
    hps__kserve_text_putc(&t, ' ');
    hps__kserve_text_f32(&t, -INFINITY);
    KS_CHECK(!strcmp(t.data, "NaN Infinity -Infinity"), "%s", t.data);
    hps__kserve_text_fini(&t);
}

static void test_json_string(void **state)
{
    (void)state;
    char raw[256];
    for (int i = 0; i < 256; i++)
        raw[i] = (char)(i + 1 == 256 ? 'z' : i + 1); /* 0x01 .. 0xff, no NUL */
    /* Replace bytes >= 0x80 by valid UTF-8 so json-c accepts the result. */
    for (int i = 127; i < 256; i++)
        raw[i] = 'a';
    memcpy(raw + 130, "\xc3\xa9\xe2\x82\xac", 5);
    hps__kserve_text_t t;
    hps__kserve_text_init(&t);
    hps__kserve_text_json_str(&t, raw, sizeof(raw));
    json_object *j = json_tokener_parse(t.data);
    KS_CHECK(j && json_object_is_type(j, json_type_string), "%s", t.data);
    KS_CHECK(json_object_get_string_len(j) == 256 && !memcmp(json_object_get_string(j), raw, 256),
             "round trip");
    json_object_put(j);
    t.len = 0;
    hps__kserve_resp_error(&t, "bad \"x\"\n");
    KS_CHECK(!strcmp(t.data, "{\"error\":\"bad \\\"x\\\"\\n\"}"), "%s", t.data);
    t.len = 0;
    hps__kserve_text_label(&t, "a\\b\"c\nd");
    KS_CHECK(!strcmp(t.data, "a\\\\b\\\"c\\nd"), "%s", t.data);
    t.len = 0;
    hps__kserve_text_i64(&t, INT64_MIN);
    hps__kserve_text_putc(&t, ' ');
    hps__kserve_text_u64(&t, UINT64_MAX);
    KS_CHECK(!strcmp(t.data, "-9223372036854775808 18446744073709551615"), "%s", t.data);
    hps__kserve_text_fini(&t);
}

static void test_public_text(void **state)
{
    (void)state;
    hps__kserve_text_t t;
    hps__kserve_text_init(&t);
    KS_CHECK(hps_kserve_text_append(NULL, "x", 1) == HPS_EINVAL, "NULL text");
    KS_CHECK(hps_kserve_text_append(&t, NULL, 1) == HPS_EINVAL, "NULL bytes");
    KS_OK(hps_kserve_text_append(&t, NULL, 0));
    KS_OK(hps_kserve_text_append(&t, "ab", 2));
    KS_OK(hps_kserve_text_appendf(&t, "%d-%s", 7, "x"));
    KS_OK(hps_kserve_text_append_label(&t, "q\""));
    KS_CHECK(hps_kserve_text_append_label(&t, NULL) == HPS_EINVAL, "NULL label");
    char big[1000];
    memset(big, 'y', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    KS_OK(hps_kserve_text_appendf(&t, "%s", big));
    KS_CHECK(t.len == 2 + 3 + 3 + 999 && !strncmp(t.data, "ab7-xq\\\"", 8), "%.20s", t.data);
    hps__kserve_text_fini(&t);
}

/* A backend's model_loaded for the metrics test: model 0 only. */
static bool only_model0_loaded(void *ctx, size_t mi)
{
    (void)ctx;
    return mi == 0;
}

static void test_responses(void **state)
{
    (void)state;
    struct hps__kserve_kmodel m[2] = {wdl, wdl};
    m[1].name = "b\"q";
    m[1].max_batch_size = 0;
    m[1].device_id = -1;
    hps__kserve_stats_success(&m[0].stats,
                              &(struct hps__kserve_ktimes){5000, 1000, 1000, 2000, 1000}, 4);
    hps__kserve_stats_failure(&m[0].stats, 3000, HPS__KSERVE_FAIL_BACKEND);
    hps__kserve_text_t t;
    hps__kserve_text_init(&t);
    hps__kserve_resp_stats(&t, m, 2, NULL);
    json_object *j = json_tokener_parse(t.data);
    KS_CHECK(j, "stats JSON: %s", t.data);
    json_object_put(j);
    KS_CHECK(strstr(t.data,
                    "\"inference_count\":4,\"execution_count\":1,\"inference_stats\":"
                    "{\"success\":{\"count\":1,\"ns\":5000},\"fail\":{\"count\":1,\"ns\":3000}"),
             "%s", t.data);
    t.len = 0;
    hps__kserve_resp_model_meta(&t, &m[1]);
    j = json_tokener_parse(t.data);
    KS_CHECK(j && strstr(t.data, "\"shape\":[-1]}") && !strstr(t.data, "[-1,-1]"), "%s", t.data);
    json_object_put(j);
    t.len = 0;
    hps__kserve_resp_model_config(&t, &m[1]);
    j = json_tokener_parse(t.data);
    KS_CHECK(j && strstr(t.data, "KIND_CPU"), "%s", t.data);
    json_object_put(j);
    t.len = 0;
    hps_kserve_backend_t be = {0}; /* no model_loaded: every model is shown */
    hps__kserve_metrics_render(&t, m, 2, &be);
    KS_CHECK(strstr(t.data, "nv_inference_request_success{model=\"b\\\"q\",version=\"1\"} 0\n"),
             "escaped label: %s", t.data);
    KS_CHECK(
        strstr(t.data, "nv_inference_request_duration_us{model=\"hps_wdl\",version=\"1\"} 5\n"),
        "duration us: successful requests only (5000 ns), as Triton");
    KS_CHECK(strstr(t.data, "nv_inference_request_failure{model=\"hps_wdl\",reason=\"BACKEND\","
                            "version=\"1\"} 1\n"),
             "failure reason");
    /* An unloaded model has no samples; the families stay. */
    t.len = 0;
    be.model_loaded = only_model0_loaded;
    hps__kserve_metrics_render(&t, m, 2, &be);
    KS_CHECK(!strstr(t.data, "model=\"b\\\"q\"") && strstr(t.data, "model=\"hps_wdl\"") &&
                 strstr(t.data, "# TYPE nv_inference_count counter\n"),
             "unloaded model hidden: %s", t.data);
    hps__kserve_text_fini(&t);
}

/*
 * The OUTPUT0 pool: buffers of 1 MiB or more are kept, handed out smallest
 * fit first, pinned once when they go in (fake pin_output) and unpinned
 * before being freed; a full pool gives up its smallest buffers for a
 * larger one, never a larger buffer for a smaller one.
 */
static void test_outpool(void **state)
{
    (void)state;
    const size_t mib = (size_t)1 << 20;
    struct ks_backend b = {.ready = true};
    pthread_mutex_init(&b.pin_mu, NULL);
    hps_kserve_backend_t vt = ks_vtable_pinned(&b);
    struct hps__kserve_outpool p;
    hps__kserve_outpool_init(&p, &vt);
    float *small = hps__kserve_outpool_get(&p, 1000);
    hps__kserve_outpool_put(&p, small);
    KS_CHECK(b.pin_calls == 0, "a small buffer is neither kept nor pinned");
    float *held[HPS__KSERVE_OUTPOOL_SLOTS];
    for (int i = 0; i < HPS__KSERVE_OUTPOOL_SLOTS; i++) {
        held[i] = hps__kserve_outpool_get(&p, mib + (size_t)i * 4096);
        memset(held[i], 0x5a, mib); /* in use: writable */
    }
    for (int i = 0; i < HPS__KSERVE_OUTPOOL_SLOTS; i++)
        hps__kserve_outpool_put(&p, held[i]);
    KS_CHECK(b.pins == HPS__KSERVE_OUTPOOL_SLOTS && b.unpins == 0, "%llu pins",
             (unsigned long long)b.pins);
    KS_CHECK(hps__kserve_outpool_get(&p, mib + 4096) == held[1], "smallest fit first");
    hps__kserve_outpool_put(&p, held[1]);
    float *big = hps__kserve_outpool_get(&p, 4 * mib);
    hps__kserve_outpool_put(&p, big);
    KS_CHECK(b.pins == HPS__KSERVE_OUTPOOL_SLOTS + 1 && b.unpins == 1,
             "the full pool gave up one small buffer for the big one: %llu pins, %llu unpins",
             (unsigned long long)b.pins, (unsigned long long)b.unpins);
    KS_CHECK(hps__kserve_outpool_get(&p, 2 * mib) == big, "the big buffer is kept");
    hps__kserve_outpool_put(&p, big);
    float *medium = hps__kserve_outpool_get(&p, mib / 2 + mib);
    KS_CHECK(medium == big, "a 1.5 MiB request takes the only buffer that fits");
    float *other = hps__kserve_outpool_get(&p, 3 * mib);
    hps__kserve_outpool_put(&p, medium);
    hps__kserve_outpool_put(&p, other);
    KS_CHECK(b.unpins == 2, "3 MiB replaced the smallest 1 MiB buffer: %llu unpins",
             (unsigned long long)b.unpins);
    KS_CHECK(hps__kserve_outpool_get(&p, 3 * mib + 1) == big, "4 MiB kept, not given up for 3 MiB");
    hps__kserve_outpool_put(&p, big);
    hps__kserve_outpool_fini(&p);
    KS_CHECK(!b.pin_bad && b.unpins == b.pins, "fini unpinned every buffer: %llu of %llu",
             (unsigned long long)b.unpins, (unsigned long long)b.pins);
    pthread_mutex_destroy(&b.pin_mu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_route),        cmocka_unit_test(test_parse_json),
        cmocka_unit_test(test_parse_binary), cmocka_unit_test(test_lexical),
        cmocka_unit_test(test_fuzz_parser),  cmocka_unit_test(test_f32_roundtrip),
        cmocka_unit_test(test_json_string),  cmocka_unit_test(test_public_text),
        cmocka_unit_test(test_responses),    cmocka_unit_test(test_outpool),
    };
    return cmocka_run_group_tests_name("kserve-parse", tests, group_setup, NULL);
}
