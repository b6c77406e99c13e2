/*
 * test-kserve-http-lifecycle.c -- the HTTP front end's server lifecycle and
 * resources over real TCP (in-process server, fake backend): models added
 * to a running server, concurrent clients with exact answers, graceful stop
 * and restart, hps_kserve_create / start errors, pinned OUTPUT0 buffers
 * (backend pin_output / unpin_output), and the bound on request bodies
 * buffered over all connections.
 */
#include "kshttp.h"

/* ------------------------------------------------------------------------ */
/* Concurrency and lifecycle                                                 */
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

/* A started server of ks_models[0] only, room for `capacity` models, on a
 * free HTTP port (*port), metrics disabled. */
static hps_kserve_t *start_registry(const hps_kserve_backend_t *vt, size_t capacity, uint16_t *port)
{
    hps_kserve_options_t o;
    hps_kserve_options_init(&o);
    o.http_port = 0;
    o.metrics_port = HPS_KSERVE_PORT_DISABLED;
    o.model_capacity = capacity;
    hps_kserve_t *s = NULL;
    KS_OK(hps_kserve_create(&o, ks_models, 1, vt, &s));
    KS_OK(hps_kserve_start(s));
    KS_OK(hps_kserve_ports(s, port, NULL));
    return s;
}

/* hps_kserve_add_model on a running server: the new model is served at
 * once as the next index; a duplicate name and a full registry are refused
 * and change nothing. */
static void test_add_model(void **state)
{
    (void)state;
    struct ks_backend be = {.ready = true};
    hps_kserve_backend_t vt = ks_vtable(&be);
    uint16_t port = 0;
    hps_kserve_t *s = start_registry(&vt, 2, &port);
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

/* test_replace_model's backend: which entry the backend serves. */
static _Atomic size_t g_loaded_entry;

static bool loaded_entry(void *ctx, size_t mi)
{
    (void)ctx;
    return mi == atomic_load(&g_loaded_entry);
}

/* test_replace_model's lookup: entry 0 (the old shape) answers
 * HPS_EMISMATCH and the backend switches to entry 1 then, as libhps does
 * when a reload changes a model's tables between the routing of a request
 * and its lookup; entry 1 (dims 48, 5) writes 100 * t + j. */
static hps_err_t shape_lookup(void *ctx, size_t mi, uint32_t nt, const int32_t *numkeys,
                              const int64_t *keys, size_t num_keys, float *out, size_t out_len,
                              hps_kserve_lookup_stats_t *stats)
{
    static const uint32_t dims1[2] = {48, 5};
    (void)ctx, (void)keys, (void)num_keys, (void)stats;
    if (mi == 0) {
        atomic_store(&g_loaded_entry, 1);
        return HPS_EMISMATCH;
    }
    size_t o = 0;
    for (uint32_t t = 0; t < nt && t < 2; t++)
        for (int32_t i = 0; i < numkeys[t]; i++)
            for (uint32_t j = 0; j < dims1[t] && o < out_len; j++)
                out[o++] = (float)(100 * t + j);
    return o == out_len ? 0 : HPS_EINVAL;
}

/* hps_kserve_replace_model: a new shape of hps_wdl is entry 1; requests,
 * the index and the statistics name hps_wdl once, and follow the entry the
 * backend says is loaded; a name not registered is refused; a request
 * caught in the switch is answered in the new shape. */
static void test_replace_model(void **state)
{
    (void)state;
    struct ks_backend be = {.ready = true};
    hps_kserve_backend_t vt = ks_vtable(&be);
    vt.model_loaded = loaded_entry;
    vt.lookup = shape_lookup;
    atomic_store(&g_loaded_entry, 0);
    uint16_t port = 0;
    hps_kserve_t *s = start_registry(&vt, 3, &port);
    hps_kserve_model_t m = ks_models[1];
    KS_CHECK(hps_kserve_replace_model(s, &m) == HPS_EINVAL, "replace: 'plain' is not registered");
    m = ks_models[0];
    uint32_t dims[2] = {48, 5};
    m.dims = dims;
    KS_OK(hps_kserve_replace_model(s, &m));
    KS_CHECK(hps_kserve_num_models(s) == 2, "the new shape is entry 1");
    struct ks_resp r;
    const char *cfg = "/v2/models/hps_wdl/config";
    KS_CHECK(ks_http(port, "GET", cfg, NULL, NULL, 0, &r) == 0, "transport");
    KS_EXPECT(&r, 200, "{\"string_value\":\"1,16\"}"); /* entry 0 loaded: its dims */
    ks_resp_free(&r);
    atomic_store(&g_loaded_entry, 1);
    KS_CHECK(ks_http(port, "GET", cfg, NULL, NULL, 0, &r) == 0, "transport");
    KS_EXPECT(&r, 200, "{\"string_value\":\"48,5\"}"); /* the backend switched */
    ks_resp_free(&r);
    KS_CHECK(ks_http(port, "POST", "/v2/repository/index", NULL, NULL, 0, &r) == 0, "transport");
    KS_EXPECT(&r, 200, "[{\"name\":\"hps_wdl\",\"version\":\"1\",\"state\":\"READY\"}]");
    ks_resp_free(&r);
    KS_CHECK(ks_http(port, "GET", "/v2/models/stats", NULL, NULL, 0, &r) == 0, "transport");
    KS_EXPECT(&r, 200, NULL);
    const char *first = strstr(r.body, "\"name\":\"hps_wdl\"");
    KS_CHECK(first && !strstr(first + 1, "\"name\":\"hps_wdl\""),
             "statistics name hps_wdl once: %s", r.body);
    ks_resp_free(&r);
    /* A request routed to entry 0 whose lookup finds the shape changed
     * (HPS_EMISMATCH): parsed again for entry 1 and answered in its shape,
     * 48 + 5 floats for one key per table, not 503. */
    atomic_store(&g_loaded_entry, 0);
    static const char body[] =
        "{\"inputs\":[{\"name\":\"KEYS\",\"shape\":[1,2],\"datatype\":\"INT64\","
        "\"data\":[7,9]},{\"name\":\"NUMKEYS\",\"shape\":[1,2],\"datatype\":\"INT32\","
        "\"data\":[1,1]}]}";
    KS_CHECK(ks_http(port, "POST", "/v2/models/hps_wdl/infer", NULL, body, strlen(body), &r) == 0,
             "transport");
    KS_EXPECT(&r, 200, "\"shape\":[53]");
    ks_resp_free(&r);
    KS_CHECK(atomic_load(&g_loaded_entry) == 1, "the backend switched during the request");
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
        cmocka_unit_test(test_add_model),
        cmocka_unit_test(test_replace_model),
        cmocka_unit_test_setup(test_concurrent, test_setup),
        cmocka_unit_test_setup(test_graceful_stop, test_setup),
        cmocka_unit_test_setup(test_create_errors, test_setup),
        cmocka_unit_test_setup(test_pinned_output, test_setup),
        cmocka_unit_test_setup(test_body_budget, test_setup),
    };
    if (getenv("KS_TEST_FILTER")) /* e.g. KS_TEST_FILTER=test_body_budget */
        cmocka_set_test_filter(getenv("KS_TEST_FILTER"));
    return cmocka_run_group_tests_name("kserve-http-lifecycle", tests, group_setup, group_teardown);
}
