/*
 * kstest.h -- helpers for the HTTP front-end tests: a fake backend whose
 * vectors are a known function of (table, key), a model registry, and a
 * tiny blocking HTTP/1.1 client over TCP with timeouts (a test can fail,
 * never hang).  Header-only; every function is static.
 */
#ifndef HPS_TESTS_KSTEST_H
#define HPS_TESTS_KSTEST_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "hps/hps.h"
#include "hps/kserve.h"

/* ------------------------------------------------------------------------ */
/* Assertions with messages                                                  */
/* ------------------------------------------------------------------------ */

__attribute__((format(printf, 3, 4))) static inline void ks__fail(const char *file, int line,
                                                                  const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    print_error("%s:%d: %s\n", file, line, msg);
    _fail(file, line);
}

__attribute__((format(printf, 4, 5))) static inline void
ks__check_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    ks__fail(file, line, "check failed: %s: %s", cond, msg);
}

#define KS_FAIL(...) ks__fail(__FILE__, __LINE__, __VA_ARGS__)
#define KS_CHECK(cond, ...)                                                                        \
    do {                                                                                           \
        if (!(cond))                                                                               \
            ks__check_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                                \
    } while (0)
#define KS_OK(expr)                                                                                \
    do {                                                                                           \
        hps_err_t ks_r_ = (expr);                                                                  \
        if (ks_r_ != 0)                                                                            \
            KS_FAIL("%s returned %s (%s)", #expr, hps_err_name(ks_r_), hps_strerror(ks_r_));       \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Seeded PRNG (splitmix64); HPS_TEST_SEED repeats a run                     */
/* ------------------------------------------------------------------------ */

__attribute__((unused)) static uint64_t ks_rng_state;

static inline uint64_t ks_rand(void)
{
    uint64_t z = (ks_rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline void ks_seed(void)
{
    const char *s = getenv("HPS_TEST_SEED");
    ks_rng_state = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) ^ (uint64_t)getpid() << 32;
    printf("# HPS_TEST_SEED=%llu\n", (unsigned long long)ks_rng_state);
    fflush(stdout);
}

/* ------------------------------------------------------------------------ */
/* Models and the fake backend                                               */
/* ------------------------------------------------------------------------ */

/* Model 0: "hps_wdl", batching, 2 tables of dims 1 and 16 (HugeCTR's WDL
 * sample: 2 and 26 keys per sample).  Model 1: "plain", version 7, no
 * batching, 3 tables of dims 4, 8, 3, on the CPU. */
static const uint32_t ks_wdl_dims[] = {1, 16};
static const uint32_t ks_wdl_kps[] = {2, 26};
static const char *const ks_wdl_tables[] = {"wide", "deep"};
static const uint32_t ks_plain_dims[] = {4, 8, 3};

static const hps_kserve_model_t ks_models[] = {
    {.name = "hps_wdl",
     .version = "1",
     .num_tables = 2,
     .dims = ks_wdl_dims,
     .table_names = ks_wdl_tables,
     .max_keys_per_sample = ks_wdl_kps,
     .max_batch_size = 1024,
     .device_id = 0},
    {.name = "plain",
     .version = "7",
     .num_tables = 3,
     .dims = ks_plain_dims,
     .max_batch_size = 0,
     .device_id = -1},
};
#define KS_NUM_MODELS 2

/** Element j of the vector of key k in table t: exact, platform independent. */
static inline float ks_value(uint32_t t, int64_t k, uint32_t j)
{
    double km = (double)(int64_t)((uint64_t)k % 100003u);
    return (float)((double)t * 0.5 + km * 0.001 + (double)j * 1e-5);
}

#define KS_PIN_SLOTS 16

/** The fake backend's behaviour, changed by tests. */
struct ks_backend {
    _Atomic bool ready;
    _Atomic int fail;            /* error to return from lookup, 0 = succeed */
    _Atomic bool unload_on_fail; /* a failing lookup unloads every model first (a race with an
                                  * unload: ks_loaded says so from then on) */
    _Atomic bool unloaded;
    _Atomic unsigned delay_ms; /* sleep in lookup */
    _Atomic int metrics_fail;
    _Atomic uint64_t entered; /* lookups started */
    _Atomic uint64_t lookups; /* lookups answered */
    _Atomic uint64_t keys;
    _Atomic bool bad_args; /* set when the front end passed inconsistent arguments */
    /* pin_output / unpin_output (ks_vtable_pinned): the buffers pinned now */
    bool pin_track; /* set by ks_vtable_pinned, before the server starts */
    pthread_mutex_t pin_mu;
    int pin_fail; /* error to return from pin_output, 0 = pin */
    const char *pin_base[KS_PIN_SLOTS];
    size_t pin_bytes[KS_PIN_SLOTS];
    uint64_t pins, unpins;   /* successful pins, unpins */
    uint64_t pin_calls;      /* pin_output calls, failed ones too */
    uint64_t pinned_lookups; /* lookups whose out lay inside a pinned buffer */
    bool pin_bad;            /* double pin, unknown unpin, size mismatch, out past a buffer */
};

/* Slot of the pinned buffer holding [p, p + n), or -1; pin_mu held. */
static inline int ks_pin_find(struct ks_backend *b, const void *p, size_t n)
{
    const char *c = p;
    for (int i = 0; i < KS_PIN_SLOTS; i++)
        if (b->pin_base[i] && c >= b->pin_base[i] && c < b->pin_base[i] + b->pin_bytes[i]) {
            if (c + n > b->pin_base[i] + b->pin_bytes[i])
                b->pin_bad = true;
            return i;
        }
    return -1;
}

/* Count a lookup into a pinned buffer (only with ks_vtable_pinned). */
static inline void ks_pin_note_lookup(struct ks_backend *b, const float *out, size_t out_len)
{
    if (!b->pin_track)
        return;
    pthread_mutex_lock(&b->pin_mu);
    if (ks_pin_find(b, out, out_len * sizeof(float)) >= 0)
        b->pinned_lookups++;
    pthread_mutex_unlock(&b->pin_mu);
}

static inline hps_err_t ks_lookup(void *ctx, size_t mi, uint32_t nt, const int32_t *numkeys,
                                  const int64_t *keys, size_t num_keys, float *out, size_t out_len,
                                  hps_kserve_lookup_stats_t *stats)
{
    struct ks_backend *b = ctx;
    const hps_kserve_model_t *m = &ks_models[mi];
    atomic_fetch_add(&b->entered, 1);
    unsigned delay = atomic_load(&b->delay_ms);
    if (delay) {
        struct timespec ts = {delay / 1000, (long)(delay % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    int fail = atomic_load(&b->fail);
    if (fail && atomic_load(&b->unload_on_fail))
        atomic_store(&b->unloaded, true);
    if (fail) {
        if (fail == HPS_EIO)
            snprintf(stats->message, sizeof(stats->message), "fake backend I/O failure");
        return fail;
    }
    size_t want = 0, sum = 0;
    for (uint32_t t = 0; t < nt; t++) {
        sum += (size_t)numkeys[t];
        want += (size_t)numkeys[t] * m->dims[t];
    }
    if (nt != m->num_tables || sum != num_keys || want != out_len || ((uintptr_t)keys & 7) ||
        num_keys == 0)
        atomic_store(&b->bad_args, true);
    size_t ki = 0, o = 0;
    for (uint32_t t = 0; t < nt; t++)
        for (int32_t i = 0; i < numkeys[t]; i++, ki++)
            for (uint32_t j = 0; j < m->dims[t]; j++)
                out[o++] = ks_value(t, keys[ki], j);
    ks_pin_note_lookup(b, out, out_len);
    atomic_fetch_add(&b->lookups, 1);
    atomic_fetch_add(&b->keys, num_keys);
    stats->compute_infer_ns = 1000;
    return 0;
}

static inline bool ks_ready(void *ctx)
{
    return atomic_load(&((struct ks_backend *)ctx)->ready);
}

static inline hps_err_t ks_metrics(void *ctx, hps_kserve_text_t *text)
{
    struct ks_backend *b = ctx;
    if (atomic_load(&b->metrics_fail))
        return HPS_EIO;
    hps_err_t rc = hps_kserve_text_appendf(
        text, "# HELP nv_hps_test_lookups Lookups served by the fake backend\n"
              "# TYPE nv_hps_test_lookups counter\n");
    if (rc == 0)
        rc = hps_kserve_text_append(text, "nv_hps_test_lookups{model=\"", 27);
    if (rc == 0)
        rc = hps_kserve_text_append_label(text, "hps_\"wdl\"");
    if (rc == 0)
        rc = hps_kserve_text_appendf(text, "\",version=\"1\"} %llu\n",
                                     (unsigned long long)atomic_load(&b->lookups));
    return rc;
}

static inline bool ks_loaded(void *ctx, size_t mi)
{
    (void)mi;
    return !atomic_load(&((struct ks_backend *)ctx)->unloaded);
}

static inline hps_kserve_backend_t ks_vtable(struct ks_backend *b)
{
    hps_kserve_backend_t v = {.ctx = b,
                              .lookup = ks_lookup,
                              .ready = ks_ready,
                              .metrics = ks_metrics,
                              .model_loaded = ks_loaded};
    return v;
}

/**
 * Start an in-process server on kernel-chosen ports over the test models
 * (ks_models) and backend b (marked ready), after seeding the test's
 * random numbers.  o: options from hps_kserve_options_init() with the
 * test's changes; its http_port is set to 0 here, and metrics_port to 0
 * unless the test disabled metrics (HPS_KSERVE_PORT_DISABLED).  vt: the
 * backend's table (ks_vtable or ks_vtable_pinned of b).  Writes the
 * server and its ports (mport may be NULL); returns 0 or -1.
 */
static inline int ks_server_start(hps_kserve_options_t *o, struct ks_backend *b,
                                  hps_kserve_backend_t vt, hps_kserve_t **srv, uint16_t *port,
                                  uint16_t *mport)
{
    ks_seed();
    atomic_store(&b->ready, true);
    o->http_port = 0;
    if (o->metrics_port != HPS_KSERVE_PORT_DISABLED)
        o->metrics_port = 0;
    if (hps_kserve_create(o, ks_models, KS_NUM_MODELS, &vt, srv) != 0)
        return -1;
    return hps_kserve_start(*srv) || hps_kserve_ports(*srv, port, mport) ? -1 : 0;
}

static inline hps_err_t ks_pin(void *ctx, void *buf, size_t bytes)
{
    struct ks_backend *b = ctx;
    hps_err_t rc = b->pin_fail;
    pthread_mutex_lock(&b->pin_mu);
    b->pin_calls++;
    if (ks_pin_find(b, buf, bytes) >= 0)
        b->pin_bad = true;
    int i = 0;
    while (i < KS_PIN_SLOTS && b->pin_base[i])
        i++;
    if (rc == 0 && i == KS_PIN_SLOTS)
        rc = -ENOMEM;
    if (rc == 0) {
        b->pin_base[i] = buf;
        b->pin_bytes[i] = bytes;
        b->pins++;
    }
    pthread_mutex_unlock(&b->pin_mu);
    return rc;
}

static inline void ks_unpin(void *ctx, void *buf, size_t bytes)
{
    struct ks_backend *b = ctx;
    pthread_mutex_lock(&b->pin_mu);
    int i = ks_pin_find(b, buf, bytes);
    if (i < 0 || b->pin_base[i] != buf || b->pin_bytes[i] != bytes) {
        b->pin_bad = true;
    } else {
        b->pin_base[i] = NULL;
        b->unpins++;
    }
    pthread_mutex_unlock(&b->pin_mu);
}

/** ks_vtable with pin_output / unpin_output that record the pinned buffers
 *  (b->pin_mu initialized by the caller). */
static inline hps_kserve_backend_t ks_vtable_pinned(struct ks_backend *b)
{
    hps_kserve_backend_t v = ks_vtable(b);
    b->pin_track = true;
    v.pin_output = ks_pin;
    v.unpin_output = ks_unpin;
    return v;
}

/* ------------------------------------------------------------------------ */
/* HTTP/1.1 client                                                           */
/* ------------------------------------------------------------------------ */

/** A response: status, raw header block, body (NUL-terminated copy). */
struct ks_resp {
    int status;
    char *head;
    char *body;
    size_t body_len;
};

static inline void ks_resp_free(struct ks_resp *r)
{
    free(r->head);
    free(r->body);
    memset(r, 0, sizeof(*r));
}

/** Value of a response header (case-insensitive), copied into buf; NULL if absent. */
static inline const char *ks_header(const struct ks_resp *r, const char *name, char *buf,
                                    size_t cap)
{
    size_t n = strlen(name);
    for (const char *p = r->head ? strstr(r->head, "\r\n") : NULL; p && p[2];
         p = strstr(p + 2, "\r\n")) {
        const char *l = p + 2;
        if (strncasecmp(l, name, n) == 0 && l[n] == ':') {
            const char *v = l + n + 1;
            v += strspn(v, " \t");
            size_t len = strcspn(v, "\r\n");
            if (len >= cap)
                len = cap - 1;
            memcpy(buf, v, len);
            buf[len] = '\0';
            return buf;
        }
    }
    return NULL;
}

static inline int ks_connect_timeout(uint16_t port, unsigned timeout_ms)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/** A connection to 127.0.0.1:port whose reads and writes time out after 20 s. */
static inline int ks_connect(uint16_t port)
{
    return ks_connect_timeout(port, 20000);
}

/* Send all bytes; false on error (the peer may have closed: that is allowed
 * for early answers, the caller still reads the response). */
static inline bool ks_send_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w <= 0)
            return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}

/* Read one response from fd (Content-Length framed, else until EOF). */
static inline int ks_read_resp(int fd, struct ks_resp *r)
{
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    char *hend = NULL;
    size_t need = SIZE_MAX;
    memset(r, 0, sizeof(*r));
    for (;;) {
        if (hend && len >= need)
            break;
        if (len + 1 >= cap) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
        ssize_t n = recv(fd, buf + len, cap - len - 1, 0);
        if (n < 0) {
            free(buf);
            return -1;
        }
        if (n == 0)
            break;
        len += (size_t)n;
        buf[len] = '\0';
        if (!hend && (hend = strstr(buf, "\r\n\r\n"))) {
            size_t hl = (size_t)(hend - buf) + 4;
            r->head = strndup(buf, hl - 2);
            char v[32];
            need = ks_header(r, "Content-Length", v, sizeof(v)) ? hl + strtoull(v, NULL, 10)
                                                                : SIZE_MAX;
        }
    }
    if (!hend || sscanf(buf, "HTTP/1.%*d %d", &r->status) != 1) {
        free(buf);
        free(r->head);
        r->head = NULL;
        return -1;
    }
    size_t hl = (size_t)(strstr(buf, "\r\n\r\n") - buf) + 4;
    size_t bl = (need != SIZE_MAX && need <= len ? need : len) - hl;
    r->body = malloc(bl + 1);
    memcpy(r->body, buf + hl, bl);
    r->body[bl] = '\0';
    r->body_len = bl;
    free(buf);
    return 0;
}

/**
 * One request on a fresh connection.  extra: more header lines, each ending
 * in \r\n, or NULL.  Adds Host, Connection: close and (if body or POST)
 * Content-Length.  Returns 0 and fills r, or -1 on a transport error.
 */
static inline int ks_http(uint16_t port, const char *method, const char *path, const char *extra,
                          const void *body, size_t len, struct ks_resp *r)
{
    int fd = ks_connect(port);
    if (fd < 0)
        return -1;
    char head[4096];
    int hl = snprintf(head, sizeof(head),
                      "%s %s HTTP/1.1\r\nHost: localhost\r\n"
                      "Connection: close\r\n%s",
                      method, path, extra ? extra : "");
    if (body || strcmp(method, "POST") == 0)
        hl += snprintf(head + hl, sizeof(head) - (size_t)hl, "Content-Length: %zu\r\n", len);
    hl += snprintf(head + hl, sizeof(head) - (size_t)hl, "\r\n");
    if (ks_send_all(fd, head, (size_t)hl) && len)
        ks_send_all(fd, body, len);
    int rc = ks_read_resp(fd, r);
    close(fd);
    return rc;
}

/** Raw bytes on a fresh connection, then read one response (at most
 *  timeout_ms per read). */
static inline int ks_raw(uint16_t port, const void *bytes, size_t len, unsigned timeout_ms,
                         struct ks_resp *r)
{
    int fd = ks_connect_timeout(port, timeout_ms);
    if (fd < 0)
        return -1;
    ks_send_all(fd, bytes, len);
    shutdown(fd, SHUT_WR);
    int rc = ks_read_resp(fd, r);
    close(fd);
    return rc;
}

/* Assert status, and for errors a JSON {"error": ...} body containing want
 * (want NULL: any message). */
static inline void ks__expect(const char *file, int line, const struct ks_resp *r, int st,
                              const char *want)
{
    const char *body = r->body ? r->body : "";
    if (r->status != st)
        ks__fail(file, line, "status %d, expected %d; body: %.300s", r->status, st, body);
    if (st == 200)
        return;
    if (strncmp(body, "{\"error\":\"", 10) != 0)
        ks__fail(file, line, "status %d without a JSON error body: %.300s", st, body);
    if (want && !strstr(body, want))
        ks__fail(file, line, "error body %.300s lacks '%s'", body, want);
}

#define KS_EXPECT(r, st, want) ks__expect(__FILE__, __LINE__, (r), (st), (want))

/* The server on port still answers GET /v2/health/live with 200 (after a
 * flood of bad requests). */
#define KS_ALIVE(port)                                                                             \
    do {                                                                                           \
        struct ks_resp ks_alive_;                                                                  \
        KS_CHECK(ks_http((port), "GET", "/v2/health/live", NULL, NULL, 0, &ks_alive_) == 0,        \
                 "alive");                                                                         \
        KS_EXPECT(&ks_alive_, 200, NULL);                                                          \
        ks_resp_free(&ks_alive_);                                                                  \
    } while (0)

#endif /* HPS_TESTS_KSTEST_H */
