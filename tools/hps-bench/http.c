/*
 * http.c -- a minimal HTTP/1.1 keep-alive client for KServe v2 inference
 * with the binary data extension (reference/kserve-v2.md section 1.3).
 *
 * One request at a time per connection (no pipelining), like Triton's own
 * perf_analyzer in its default mode.  A request is one writev() of
 *
 *     POST /v2/models/<model>/infer HTTP/1.1         (fixed per request file:
 *     Host, Content-Type, Inference-Header-Content-Length, Content-Length,
 *     the JSON header)                               built once)
 *     T*B int64 keys                                 (straight from the mmap)
 *
 * The answer is read whole (Content-Length bodies only; a chunked answer is
 * reported as an error) and checked: status 200, Inference-Header-Content-
 * Length present, and exactly B * sum(dims) * 4 binary bytes after the JSON.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "hps-bench.h"

#define IO_TIMEOUT_S 30

typedef struct http_conn {
    const hb_http_target_t *tg;
    int fd;
    char *head; /* request line, headers and JSON header */
    size_t head_len;
    size_t keys_len; /* T * B * 8 */
    size_t out_len;  /* expected binary output bytes */
    char *rbuf;
    size_t rcap, rlen;
} http_conn_t;

int hb_http_parse_url(const char *url, hb_http_target_t *t, char *err, size_t n)
{
    const char *p = url;
    if (strncmp(p, "http://", 7) == 0)
        p += 7;
    const char *colon = strrchr(p, ':');
    size_t hl = colon ? (size_t)(colon - p) : strcspn(p, "/");
    if (hl == 0 || hl >= sizeof(t->host)) {
        snprintf(err, n, "bad URL '%s' (want http://HOST:PORT)", url);
        return -1;
    }
    memcpy(t->host, p, hl);
    t->host[hl] = 0;
    t->port = colon ? atoi(colon + 1) : 80;
    if (t->port <= 0 || t->port > 65535) {
        snprintf(err, n, "bad port in URL '%s'", url);
        return -1;
    }
    return 0;
}

static int connect_to(const hb_http_target_t *t, char *err, size_t n)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *ai;
    char port[16];
    snprintf(port, sizeof(port), "%d", t->port);
    int rc = getaddrinfo(t->host, port, &hints, &res);
    if (rc != 0) {
        snprintf(err, n, "%s: %s", t->host, gai_strerror(rc));
        return -1;
    }
    int fd = -1, e = 0;
    for (ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
            e = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(err, n, "connect %s:%d: %s", t->host, t->port, strerror(e ? e : errno));
        return -1;
    }
    int one = 1;
    struct timeval tv = {IO_TIMEOUT_S, 0};
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return fd;
}

/* Build the fixed part of every request of the request file. */
static int build_head(http_conn_t *c, char *err, size_t n)
{
    const hb_http_target_t *t = c->tg;
    uint32_t T = t->rf->T, B = t->rf->B;
    size_t cap = 512 + (size_t)T * 12, jl = 0;
    char *json = malloc(cap);
    if (!json) {
        snprintf(err, n, "out of memory");
        return -1;
    }
    c->keys_len = (size_t)T * B * 8;
    c->out_len = (size_t)B * t->m->dim_sum * 4;
    jl += (size_t)snprintf(json + jl, cap - jl,
                           "{\"inputs\":[{\"name\":\"KEYS\",\"shape\":[1,%llu],\"datatype\":"
                           "\"INT64\",\"parameters\":{\"binary_data_size\":%zu}},{\"name\":"
                           "\"NUMKEYS\",\"shape\":[1,%u],\"datatype\":\"INT32\",\"data\":[",
                           (unsigned long long)T * B, c->keys_len, T);
    for (uint32_t i = 0; i < T; i++)
        jl += (size_t)snprintf(json + jl, cap - jl, "%s%u", i ? "," : "", B);
    jl += (size_t)snprintf(json + jl, cap - jl,
                           "]}],\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":"
                           "{\"binary_data\":true}}]}");
    size_t hcap = jl + 512;
    c->head = malloc(hcap);
    if (!c->head) {
        free(json);
        snprintf(err, n, "out of memory");
        return -1;
    }
    int hl = snprintf(c->head, hcap,
                      "POST /v2/models/%s/infer HTTP/1.1\r\nHost: %s:%d\r\n"
                      "Content-Type: application/octet-stream\r\n"
                      "Inference-Header-Content-Length: %zu\r\nContent-Length: %zu\r\n\r\n",
                      t->model, t->host, t->port, jl, jl + c->keys_len);
    memcpy(c->head + hl, json, jl);
    c->head_len = (size_t)hl + jl;
    free(json);
    return 0;
}

static void *http_open(void *ctx, unsigned tid, char *err, size_t n)
{
    (void)tid;
    http_conn_t *c = calloc(1, sizeof(*c));
    if (!c) {
        snprintf(err, n, "out of memory");
        return NULL;
    }
    c->tg = ctx;
    c->fd = -1;
    if (build_head(c, err, n) < 0 || (c->fd = connect_to(c->tg, err, n)) < 0) {
        free(c->head);
        free(c);
        return NULL;
    }
    c->rcap = c->out_len + 64 * 1024;
    c->rbuf = malloc(c->rcap);
    if (!c->rbuf) {
        snprintf(err, n, "out of memory");
        close(c->fd);
        free(c->head);
        free(c);
        return NULL;
    }
    return c;
}

static void http_close(void *conn)
{
    http_conn_t *c = conn;
    if (!c)
        return;
    if (c->fd >= 0)
        close(c->fd);
    free(c->head);
    free(c->rbuf);
    free(c);
}

static int send_all(int fd, struct iovec *iov, int cnt)
{
    while (cnt > 0) {
        ssize_t w = writev(fd, iov, cnt);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        while (cnt > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++, cnt--;
        }
        if (cnt > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

/* Read more bytes into rbuf; 0 on EOF, -1 on error. */
static ssize_t fill(http_conn_t *c, size_t want_total)
{
    if (want_total > c->rcap) {
        char *nb = realloc(c->rbuf, want_total);
        if (!nb) {
            errno = ENOMEM;
            return -1;
        }
        c->rbuf = nb, c->rcap = want_total;
    }
    if (c->rlen == c->rcap) {
        size_t nc = c->rcap * 2;
        char *nb = realloc(c->rbuf, nc);
        if (!nb) {
            errno = ENOMEM;
            return -1;
        }
        c->rbuf = nb, c->rcap = nc;
    }
    for (;;) {
        ssize_t r = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r > 0)
            c->rlen += (size_t)r;
        return r;
    }
}

/* Value of header `name` in the head [p, end), or NULL. */
static const char *header(const char *p, const char *end, const char *name, size_t *ret_len)
{
    size_t nl = strlen(name);
    while (p < end) {
        const char *eol = memmem(p, (size_t)(end - p), "\r\n", 2);
        if (!eol)
            eol = end;
        if ((size_t)(eol - p) > nl && p[nl] == ':' && strncasecmp(p, name, nl) == 0) {
            const char *v = p + nl + 1;
            while (v < eol && (*v == ' ' || *v == '\t'))
                v++;
            *ret_len = (size_t)(eol - v);
            return v;
        }
        p = eol + 2;
    }
    return NULL;
}

static long long header_ll(const char *p, const char *end, const char *name)
{
    size_t len;
    const char *v = header(p, end, name, &len);
    char buf[32];
    if (!v || len == 0 || len >= sizeof(buf))
        return -1;
    memcpy(buf, v, len);
    buf[len] = 0;
    char *e;
    long long x = strtoll(buf, &e, 10);
    return *e || x < 0 ? -1 : x;
}

/* A received response: status, body, and the binary split of the body. */
typedef struct response {
    int status;
    const char *body;
    size_t body_len;
    long long ihcl; /* Inference-Header-Content-Length, or -1 */
    bool close;     /* the server will close (or the stream is out of step) */
} response_t;

/* Receive one response into c->rbuf. */
static int recv_response(http_conn_t *c, response_t *rs, char *err, size_t n)
{
    char *end;
    c->rlen = 0;
    for (;;) {
        end = c->rlen >= 4 ? memmem(c->rbuf, c->rlen, "\r\n\r\n", 4) : NULL;
        if (end)
            break;
        ssize_t r = fill(c, 0);
        if (r <= 0) {
            snprintf(err, n, "reading response head: %s",
                     r == 0 ? "connection closed by the server" : strerror(errno));
            return -1;
        }
    }
    size_t head_len = (size_t)(end - c->rbuf) + 4, vl;
    if (sscanf(c->rbuf, "HTTP/1.%*d %d", &rs->status) != 1) {
        snprintf(err, n, "malformed status line");
        return -1;
    }
    const char *hs = memchr(c->rbuf, '\n', head_len);
    hs = hs ? hs + 1 : c->rbuf;
    const char *te = header(hs, end, "Transfer-Encoding", &vl);
    if (te && !(vl == 8 && strncasecmp(te, "identity", 8) == 0)) {
        snprintf(err, n, "chunked responses are not supported by hps-bench");
        return -1;
    }
    long long cl = header_ll(hs, end, "Content-Length");
    if (cl < 0) {
        snprintf(err, n, "response without a valid Content-Length");
        return -1;
    }
    const char *conn = header(hs, end, "Connection", &vl);
    rs->close = conn && vl == 5 && strncasecmp(conn, "close", 5) == 0;
    rs->ihcl = header_ll(hs, end, "Inference-Header-Content-Length");
    size_t total = head_len + (size_t)cl;
    while (c->rlen < total) {
        ptrdiff_t off = end - c->rbuf, hoff = hs - c->rbuf;
        ssize_t r = fill(c, total);
        end = c->rbuf + off, hs = c->rbuf + hoff; /* rbuf may have moved */
        if (r <= 0) {
            snprintf(err, n, "reading response body (%zu of %lld bytes): %s", c->rlen - head_len,
                     cl, r == 0 ? "connection closed by the server" : strerror(errno));
            return -1;
        }
    }
    if (c->rlen > total)
        rs->close = true; /* bytes we did not ask for: resynchronise by reconnecting */
    rs->body = c->rbuf + head_len;
    rs->body_len = (size_t)cl;
    return 0;
}

static void reconnect(http_conn_t *c)
{
    char e[HB_ERR_LEN];
    if (c->fd >= 0)
        close(c->fd);
    c->fd = connect_to(c->tg, e, sizeof(e));
}

/* Copy a short, printable excerpt of an error body. */
static void excerpt(char *dst, size_t n, const char *src, size_t len)
{
    size_t k = len < n - 1 ? len : n - 1, i;
    for (i = 0; i < k; i++)
        dst[i] = (src[i] >= 32 && src[i] < 127) ? src[i] : '.';
    dst[i] = 0;
}

/* Check a 200 answer: JSON header naming OUTPUT0, then exactly out_len bytes. */
static int check_ok(const http_conn_t *c, const response_t *rs, char *err, size_t n)
{
    if (rs->ihcl < 0 || (size_t)rs->ihcl > rs->body_len) {
        snprintf(err, n, "200 without a valid Inference-Header-Content-Length (body %zu bytes)",
                 rs->body_len);
        return -1;
    }
    size_t bin = rs->body_len - (size_t)rs->ihcl;
    if (bin != c->out_len) {
        snprintf(err, n, "binary output of %zu bytes, expected %zu (B x sum(dims) x 4)", bin,
                 c->out_len);
        return -1;
    }
    const char *j = rs->body, *je = rs->body + rs->ihcl;
    const char *o = memmem(j, (size_t)(je - j), "\"OUTPUT0\"", 9);
    const char *b = o ? memmem(o, (size_t)(je - o), "\"binary_data_size\"", 18) : NULL;
    if (!b) {
        snprintf(err, n, "JSON header without OUTPUT0 / binary_data_size");
        return -1;
    }
    b += 18;
    while (b < je && (*b == ' ' || *b == ':'))
        b++;
    if ((size_t)strtoull(b, NULL, 10) != c->out_len) {
        snprintf(err, n, "OUTPUT0 binary_data_size differs from %zu", c->out_len);
        return -1;
    }
    return 0;
}

static int http_request(void *conn, const int64_t *keys, const void **ret_out, char *err, size_t n)
{
    http_conn_t *c = conn;
    response_t rs = {0};
    if (c->fd < 0) {
        reconnect(c);
        if (c->fd < 0) {
            snprintf(err, n, "cannot reconnect to %s:%d", c->tg->host, c->tg->port);
            struct timespec ts = {0, 10 * 1000 * 1000}; /* do not spin on a dead server */
            nanosleep(&ts, NULL);
            return -1;
        }
    }
    struct iovec iov[2] = {{c->head, c->head_len}, {(void *)keys, c->keys_len}};
    if (send_all(c->fd, iov, 2) < 0) {
        snprintf(err, n, "sending request: %s", strerror(errno));
        reconnect(c);
        return -1;
    }
    if (recv_response(c, &rs, err, n) < 0) {
        reconnect(c);
        return -1;
    }
    int rc = 0;
    if (rs.status != 200) {
        char ex[160];
        excerpt(ex, sizeof(ex), rs.body, rs.body_len);
        snprintf(err, n, "HTTP %d: %s", rs.status, ex);
        rc = -1;
    } else if (check_ok(c, &rs, err, n) < 0) {
        rc = -1;
    } else if (ret_out) {
        *ret_out = rs.body + rs.ihcl;
    }
    if (rs.close)
        reconnect(c);
    return rc;
}

const hb_client_t hb_http_client = {
    .name = "ours",
    .open = http_open,
    .close = http_close,
    .request = http_request,
};

int hb_http_get_status(const hb_http_target_t *t, const char *path, char *body, size_t body_len)
{
    char e[HB_ERR_LEN], req[512];
    http_conn_t c = {.tg = t, .fd = connect_to(t, e, sizeof(e))};
    response_t rs = {0};
    if (body_len)
        body[0] = 0;
    if (c.fd < 0)
        return -1;
    c.rcap = 65536;
    c.rbuf = malloc(c.rcap);
    int len = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: %s:%d\r\n\r\n", path, t->host,
                       t->port);
    struct iovec iov = {req, (size_t)len};
    int status = -1;
    if (c.rbuf && send_all(c.fd, &iov, 1) == 0 && recv_response(&c, &rs, e, sizeof(e)) == 0) {
        status = rs.status;
        if (body_len)
            excerpt(body, body_len, rs.body, rs.body_len);
    }
    close(c.fd);
    free(c.rbuf);
    return status;
}
