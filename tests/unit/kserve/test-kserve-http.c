/*
 * test-kserve-http.c -- the HTTP front end's endpoints over real TCP: a
 * server started in-process on free ports with a fake backend, driven by a
 * small HTTP/1.1 client.  Health and readiness (ready vs degraded), server
 * and model metadata and config, routing (404 / 405 / 501 for every other
 * path and method), keep-alive connections, and the Prometheus metrics text.
 * Inference and its errors: test-kserve-http-infer.c; server lifecycle,
 * concurrency and resource limits: test-kserve-http-lifecycle.c.
 */
#include "kshttp.h"

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
/* Routes and connections                                                    */
/* ------------------------------------------------------------------------ */

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
        /* The same with a declared body that never comes: answered from the
         * headers alone (the named repository's 501 waited for the body). */
        if (strcmp(cases[i].method, "POST") != 0 || cases[i].status == 503)
            continue;
        char head[256];
        snprintf(head, sizeof(head),
                 "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n", cases[i].path);
        KS_CHECK(ks_raw(g_port, head, strlen(head), 3000, &r) == 0, "%s: no answer before the body",
                 cases[i].path);
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
/* Metrics                                                                   */
/* ------------------------------------------------------------------------ */

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
    /* 9 single families + 4 failure reasons, for 2 models, the 4 connection
     * families, plus the backend's. */
    KS_CHECK(samples == (9 + 4) * 2 + 4 + 1, "samples %zu", samples);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_health, test_setup),
        cmocka_unit_test_setup(test_degraded, test_setup),
        cmocka_unit_test_setup(test_server_metadata, test_setup),
        cmocka_unit_test_setup(test_model_metadata, test_setup),
        cmocka_unit_test_setup(test_routes, test_setup),
        cmocka_unit_test_setup(test_keepalive, test_setup),
        cmocka_unit_test_setup(test_metrics, test_setup),
    };
    if (getenv("KS_TEST_FILTER")) /* e.g. KS_TEST_FILTER=test_metrics */
        cmocka_set_test_filter(getenv("KS_TEST_FILTER"));
    return cmocka_run_group_tests_name("kserve-http", tests, group_setup, group_teardown);
}
