/*
 * bench-freshness -- end-to-end freshness of Kafka online updates (issue 5):
 * time from produce() to the new vector being returned by an hps-worker over
 * HTTP while that worker serves ~1,000 requests/s.
 *
 * Real processes: the librdkafka mock cluster (rdkafka_mock.h, in this
 * process, the Kafka protocol over loopback TCP), hps-coordinator with
 * [update_source] type = kafka_message_queue (its defaults otherwise:
 * poll_timeout_ms 500, fetch_wait_max_ms 10), and one hps-worker (CPU path,
 * volatile DB), on a 1-table model of 1,000 rows, dim 128, written by hps-gen.
 *
 *   producer  every 1000/F ms one HugeCTR message (reference/hugectr-hps.md
 *             2.2: "HCTR", value size, key + 128 floats) updating the probe
 *             key to a new vector, every element 1e6 + probe number;
 *             sent[i] = CLOCK_MONOTONIC just before rd_kafka_producev().
 *   client    a thread sending paced KServe v2 infer requests (binary
 *             data, keep-alive) for the probe key plus 7 other model keys;
 *             seen[i] = receive time of the first response carrying probe
 *             i's vector.  The 7 other rows are checked against
 *             hps_gen_vector (exact) and the probe row for tearing.
 *   baseline  a thread attached to the segment doing hps_shmdb_lookup of
 *             the probe key every millisecond, in the same run: the
 *             freshness floor of the Kafka -> coordinator -> volatile DB
 *             path; HTTP minus baseline is what the worker adds.
 * Latency = seen - sent.  A probe overwritten before any response carried
 * it is lost (its latency exceeded 1000/F ms); PASS needs none lost.
 *
 * usage: bench-freshness [--probes N] [--rate F] [--rps R] [--quick]
 *          [--poll-timeout-ms T] [--fetch-wait-ms W]
 *          [--gen PATH] [--coordinator PATH] [--worker PATH] [--keep]
 *   defaults: 200 probes at 5/s, 1,000 requests/s (about 45 s);
 *   --quick: 40 probes at 10/s (about 9 s).
 * Every child is killed and the segment and temp dir removed on exit,
 * on error and on SIGINT/SIGTERM; every wait has a deadline.
 *
 * Measured on a 2-core Intel Xeon VM (commit fd1db89 + this file, default
 * settings, load average 0.35 at the start, `bench-freshness`, 43 s):
 *   requests 1000/s served, 0 failed, 0 wrong rows; 200/200 probes seen
 *   HTTP, hps-worker          p50 6.52 ms  p99 11.27 ms  max 11.81 ms  PASS
 *   baseline, segment lookup  p50 6.51 ms  p99 11.43 ms  max 11.94 ms
 *   CPU: coordinator 1%, worker 3%, this process 5%.
 * With two busy loops beside it (load 1.2 -> 2.1, --quick) p50 6.70 ms, p99
 * 11.14 ms.  The worker adds nothing measurable (within the 1 ms sampling):
 * the time is the coordinator consumer's fetch.wait.max.ms, because the mock
 * broker answers a fetch only at that deadline; with --fetch-wait-ms 100
 * (--quick) p50 43.2 ms, p99 100.6 ms, 2 of 40 probes lost: MISS.
 */
#include <errno.h>
#include <fcntl.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/benchutil.h"
#include "bench_vcs.h"
#include "hps/gen.h"
#include "hps/kafka.h"
#include "hps/shmdb.h"

#define MODEL       "fresh"
#define TABLE       "sparse_embedding0"
#define TOPIC       "hps_et." MODEL "." TABLE
#define ROWS        1000
#define DIM         128
#define NKEYS       8 /* per request: the probe key + 7 others */
#define PROBE_BASE  1e6f
#define MAX_PROBES  100000
#define START_S     60.0 /* coordinator ready, worker ready, first probe seen */
#define IO_TIMEOUT  5    /* seconds, per socket operation */
#define STOP_WAIT_S 5.0  /* SIGTERM -> SIGKILL */

#ifndef HPS_GEN_PATH
#define HPS_GEN_PATH "hps-gen"
#endif
#ifndef HPS_COORDINATOR_PATH
#define HPS_COORDINATOR_PATH "hps-coordinator"
#endif
#ifndef HPS_WORKER_PATH
#define HPS_WORKER_PATH "hps-worker"
#endif

typedef struct options {
    size_t probes;
    double rate, rps;
    int poll_timeout_ms, fetch_wait_ms; /* 0: the coordinator's defaults */
    const char *gen, *coordinator, *worker;
    bool keep;
} options_t;

/* What the client and baseline threads share with main. */
typedef struct shared {
    atomic_int stop;
    atomic_size_t probes_sent; /* probes 0 .. probes_sent-1 were produced */
    double *sent, *seen_http, *seen_shm;
    atomic_llong last_http, last_shm; /* highest probe seen, -1 = none */
    atomic_ullong ok, failed, wrong;  /* responses */
    atomic_ullong lookups;            /* baseline lookups */
    char first_error[256];
    atomic_int have_error;
    int port;
    const char *segment;
    double rps;
} shared_t;

/* Process state for cleanup (this is a program; signals need globals). */
static volatile sig_atomic_t g_signal;
static pid_t g_coord, g_worker;
static char g_tmp[256], g_seg[64];
static bool g_keep;
static rd_kafka_mock_cluster_t *g_mock;
static rd_kafka_t *g_mock_host, *g_producer;

/* ------------------------------------------------------------------------ */
/* Cleanup and errors                                                        */
/* ------------------------------------------------------------------------ */

/* SIGTERM, then SIGKILL after STOP_WAIT_S; reaps the child. */
static void stop_child(pid_t *pid)
{
    if (*pid <= 0)
        return;
    kill(*pid, SIGTERM);
    for (double t0 = bench_now_s(); bench_now_s() - t0 < STOP_WAIT_S;) {
        if (waitpid(*pid, NULL, WNOHANG) == *pid) {
            *pid = 0;
            return;
        }
        usleep(10000);
    }
    kill(*pid, SIGKILL);
    waitpid(*pid, NULL, 0);
    *pid = 0;
}

static void cleanup(void)
{
    stop_child(&g_worker);
    stop_child(&g_coord);
    if (g_seg[0])
        hps_shmdb_unlink(g_seg);
    g_seg[0] = 0;
    if (g_tmp[0] && !g_keep)
        bench_rm_tree(g_tmp);
    else if (g_tmp[0])
        fprintf(stderr, "bench-freshness: kept %s\n", g_tmp);
    g_tmp[0] = 0;
    if (g_producer)
        rd_kafka_destroy(g_producer);
    g_producer = NULL;
    if (g_mock)
        rd_kafka_mock_cluster_destroy(g_mock);
    g_mock = NULL;
    if (g_mock_host)
        rd_kafka_destroy(g_mock_host);
    g_mock_host = NULL;
}

static void on_signal(int sig)
{
    g_signal = sig;
}

/* Print the last lines of a child's log (on failure). */
static void log_tail(const char *name)
{
    char path[PATH_MAX + 32], line[1024];
    snprintf(path, sizeof(path), "%s/%s.log", g_tmp, name);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    static char ring[20][1024];
    size_t n = 0;
    while (fgets(line, sizeof(line), f))
        snprintf(ring[n++ % 20], sizeof(ring[0]), "%s", line);
    fclose(f);
    fprintf(stderr, "---- %s.log, last lines ----\n", name);
    for (size_t i = n > 20 ? n - 20 : 0; i < n; i++)
        fputs(ring[i % 20], stderr);
}

/* bench_die()'s cleanup: the children's last log lines, then cleanup(). */
static void on_error(void)
{
    if (g_tmp[0]) {
        log_tail("coordinator");
        log_tail("worker");
    }
    cleanup();
}

/* Called in every wait loop: a signal or a dead child ends the run. */
static void check_alive(void)
{
    if (g_signal) {
        fprintf(stderr, "bench-freshness: signal %d, cleaning up\n", (int)g_signal);
        cleanup();
        exit(128 + g_signal);
    }
    int st;
    if (g_coord > 0 && waitpid(g_coord, &st, WNOHANG) == g_coord) {
        g_coord = 0;
        bench_die("hps-coordinator exited (status %d)", st);
    }
    if (g_worker > 0 && waitpid(g_worker, &st, WNOHANG) == g_worker) {
        g_worker = 0;
        bench_die("hps-worker exited (status %d)", st);
    }
}

/* ------------------------------------------------------------------------ */
/* Child processes                                                           */
/* ------------------------------------------------------------------------ */

/* fork + exec with stdout and stderr to log (NULL: inherited); the child dies
 * with us (PR_SET_PDEATHSIG).  Only async-signal-safe calls after fork(). */
static pid_t spawn(char *const argv[], const char *log)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        bench_die("fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int in = open("/dev/null", O_RDONLY);
        if (in >= 0)
            dup2(in, 0);
        if (log) {
            int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
            if (fd < 0)
                _exit(126);
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* Run to completion within timeout_s; returns the exit status. */
static int run(char *const argv[], const char *log, double timeout_s)
{
    pid_t pid = spawn(argv, log);
    int st = 0;
    for (double t0 = bench_now_s(); waitpid(pid, &st, WNOHANG) != pid; usleep(10000)) {
        if (g_signal || bench_now_s() - t0 > timeout_s) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            check_alive();
            bench_die("%s did not finish in %.0f s", argv[0], timeout_s);
        }
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The whole file (NUL-terminated, malloc'ed), or NULL. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + len, 1, cap - 1 - len, f)) > 0;) {
        len += r;
        if (len == cap - 1) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb)
                free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (buf)
        buf[len] = 0;
    return buf;
}

/* Wait until the child's log holds `what`; returns the text after it. */
static void wait_log(const char *name, const char *what, char *after, size_t n)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/%s.log", g_tmp, name);
    for (double t0 = bench_now_s();; usleep(20000)) {
        check_alive();
        char *text = slurp(path), *p = text ? strstr(text, what) : NULL;
        if (p) {
            snprintf(after, n, "%s", p + strlen(what));
            free(text);
            return;
        }
        free(text);
        if (bench_now_s() - t0 > START_S)
            bench_die("%s: no \"%s\" in its log after %.0f s", name, what, START_S);
    }
}

/* hps-gen writes the model; the INI gets the Kafka update source. */
static void make_model(const options_t *o, const char *bootstrap, char *ini, size_t n)
{
    char out[PATH_MAX], log[PATH_MAX + 16];
    snprintf(out, sizeof(out), "%s/model", g_tmp);
    snprintf(log, sizeof(log), "%s/gen.log", g_tmp);
    snprintf(ini, n, "%s/" MODEL ".ini", out);
    char rows[16], dim[16];
    snprintf(rows, sizeof(rows), "%d", ROWS);
    snprintf(dim, sizeof(dim), "%d", DIM);
    char *argv[] = {(char *)o->gen, "model", "--out", out,         "--model", MODEL,     "--rows",
                    rows,           "--dim", dim,     "--segment", g_seg,     "--quiet", NULL};
    int rc = run(argv, log, 60);
    char *text = slurp(ini);
    const char *old = "[update_source]\ntype = none\n";
    char *at = text ? strstr(text, old) : NULL;
    if (rc != 0 || !at)
        bench_die("%s model exited %d or wrote no \"%.24s\" in %s", o->gen, rc, old, ini);
    FILE *f = fopen(ini, "w");
    if (!f)
        bench_die("%s: %s", ini, strerror(errno));
    fprintf(f, "%.*s[update_source]\ntype = kafka_message_queue\nbrokers = %s\n", (int)(at - text),
            text, bootstrap);
    fprintf(f, "metadata_refresh_interval_ms = 1000\n");
    if (o->poll_timeout_ms)
        fprintf(f, "poll_timeout_ms = %d\n", o->poll_timeout_ms);
    if (o->fetch_wait_ms)
        fprintf(f, "fetch_wait_max_ms = %d\n", o->fetch_wait_ms);
    fputs(at + strlen(old), f);
    if (fclose(f) != 0)
        bench_die("%s: %s", ini, strerror(errno));
    free(text);
}

/* Start the coordinator and the worker; returns the worker's HTTP port. */
static int start_servers(const options_t *o, const char *ini)
{
    char log[PATH_MAX + 32], after[256];
    snprintf(log, sizeof(log), "%s/coordinator.log", g_tmp);
    char *cargv[] = {(char *)o->coordinator, "-c", (char *)ini, NULL};
    g_coord = spawn(cargv, log);
    wait_log("coordinator", "serving misses", after, sizeof(after));
    snprintf(log, sizeof(log), "%s/worker.log", g_tmp);
    char *wargv[] = {(char *)o->worker, "-c", (char *)ini,      "--device", "0", "--instance", "0",
                     "--http-port",     "0",  "--metrics-port", "0",        NULL};
    g_worker = spawn(wargv, log);
    wait_log("worker", " on http://", after, sizeof(after));
    char *colon = strchr(after, ':');
    int port = colon ? atoi(colon + 1) : 0;
    if (port <= 0 || port > 65535)
        bench_die("cannot read the worker's port from \"%s\"", after);
    wait_log("worker", "tables found: ready", after, sizeof(after));
    return port;
}

/* ------------------------------------------------------------------------ */
/* HTTP client (KServe v2 binary data extension, one request in flight)      */
/* ------------------------------------------------------------------------ */

typedef struct conn {
    int port, fd;
    char req[2048];
    size_t req_len;
    char buf[65536 + NKEYS * DIM * 4];
    size_t len;
} conn_t;

static int conn_open(conn_t *c)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)c->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        return -1;
    if (connect(c->fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(c->fd);
        c->fd = -1;
        return -1;
    }
    int one = 1;
    struct timeval tv = {IO_TIMEOUT, 0};
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return 0;
}

/* The one request, built once: JSON header, then NKEYS int64 keys. */
static void conn_build(conn_t *c, const int64_t *keys)
{
    char json[512];
    int jl = snprintf(json, sizeof(json),
                      "{\"inputs\":[{\"name\":\"KEYS\",\"shape\":[1,%d],\"datatype\":\"INT64\","
                      "\"parameters\":{\"binary_data_size\":%d}},{\"name\":\"NUMKEYS\","
                      "\"shape\":[1,1],\"datatype\":\"INT32\",\"data\":[%d]}],\"outputs\":"
                      "[{\"name\":\"OUTPUT0\",\"parameters\":{\"binary_data\":true}}]}",
                      NKEYS, NKEYS * 8, NKEYS);
    int hl = snprintf(c->req, sizeof(c->req),
                      "POST /v2/models/" MODEL "/infer HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                      "Content-Type: application/octet-stream\r\n"
                      "Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n%s",
                      c->port, jl, jl + NKEYS * 8, json);
    memcpy(c->req + hl, keys, NKEYS * 8);
    c->req_len = (size_t)hl + NKEYS * 8;
}

static long header_long(const char *head, const char *name)
{
    const char *p = strcasestr(head, name);
    return p ? strtol(p + strlen(name), NULL, 10) : -1;
}

/* One round trip; on success *ret_out points at NKEYS * DIM floats. */
static int conn_request(conn_t *c, const uint8_t **ret_out, char *err, size_t n)
{
    if (c->fd < 0 && conn_open(c) < 0)
        return snprintf(err, n, "connect: %s", strerror(errno)), -1;
    for (size_t off = 0; off < c->req_len;) {
        ssize_t w = send(c->fd, c->req + off, c->req_len - off, MSG_NOSIGNAL);
        if (w <= 0)
            return snprintf(err, n, "send: %s", strerror(errno)), -1;
        off += (size_t)w;
    }
    char *end = NULL;
    long cl = -1;
    size_t head = 0;
    for (c->len = 0; !end || c->len < head + (size_t)cl;) {
        ssize_t r = recv(c->fd, c->buf + c->len, sizeof(c->buf) - 1 - c->len, 0);
        if (r <= 0)
            return snprintf(err, n, "recv: %s", r ? strerror(errno) : "closed"), -1;
        c->len += (size_t)r;
        c->buf[c->len] = 0;
        if (!end && (end = strstr(c->buf, "\r\n\r\n"))) {
            head = (size_t)(end - c->buf) + 4;
            cl = header_long(c->buf, "\r\nContent-Length:");
            if (cl < 0 || head + (size_t)cl >= sizeof(c->buf))
                return snprintf(err, n, "bad Content-Length"), -1;
        }
    }
    *end = 0;
    long ihcl = header_long(c->buf, "\r\nInference-Header-Content-Length:");
    if (strncmp(c->buf, "HTTP/1.1 200", 12) != 0)
        return snprintf(err, n, "%.60s: %.120s", c->buf, end + 4), -1;
    if (ihcl < 0 || (size_t)(cl - ihcl) != NKEYS * DIM * 4 || c->len != head + (size_t)cl)
        return snprintf(err, n, "binary output of %ld bytes", cl - ihcl), -1;
    *ret_out = (const uint8_t *)c->buf + head + ihcl;
    return 0;
}

static void set_error(shared_t *s, const char *msg)
{
    if (!atomic_exchange(&s->have_error, 1))
        snprintf(s->first_error, sizeof(s->first_error), "%s", msg);
}

/* Which probe a row carries (-1: none, -2: torn or foreign). */
static long probe_of(const float *row)
{
    if (row[0] < PROBE_BASE)
        return -1;
    for (int d = 1; d < DIM; d++)
        if (row[d] != row[0])
            return -2;
    return (long)(row[0] - PROBE_BASE);
}

static void note_seen(shared_t *s, double *seen, atomic_llong *last, long p, double t)
{
    if (p < 0 || (size_t)p >= atomic_load(&s->probes_sent) || seen[p] > 0)
        return;
    seen[p] = t;
    if (p > atomic_load(last))
        atomic_store(last, p);
}

/* Check a response; returns false if a row is wrong. */
static bool check_response(shared_t *s, const uint8_t *out, const float *want, double t)
{
    float rows[NKEYS * DIM];
    memcpy(rows, out, sizeof(rows));
    long p = probe_of(rows);
    note_seen(s, s->seen_http, &s->last_http, p, t);
    return p != -2 && memcmp(rows + DIM, want + DIM, (NKEYS - 1) * DIM * 4) == 0;
}

static void sleep_until(double t)
{
    struct timespec ts = {(time_t)t, (long)((t - floor(t)) * 1e9)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* The client thread: rps paced requests (absolute schedule; more than 50 ms
 * behind, the schedule restarts instead of bursting). */
static void *client(void *arg)
{
    shared_t *s = arg;
    static conn_t c;
    int64_t keys[NKEYS];
    float want[NKEYS * DIM];
    for (int i = 0; i < NKEYS; i++) {
        keys[i] = hps_gen_key(0, (uint64_t)i);
        hps_gen_vector(0, keys[i], DIM, want + i * DIM);
    }
    c.port = s->port;
    c.fd = -1;
    conn_build(&c, keys);
    double next = bench_now_s();
    while (!atomic_load(&s->stop)) {
        sleep_until(next);
        const uint8_t *out;
        char err[256];
        if (conn_request(&c, &out, err, sizeof(err)) < 0) {
            atomic_fetch_add(&s->failed, 1);
            set_error(s, err);
            if (c.fd >= 0)
                close(c.fd);
            c.fd = -1;
            usleep(10000);
        } else if (check_response(s, out, want, bench_now_s())) {
            atomic_fetch_add(&s->ok, 1);
        } else {
            atomic_fetch_add(&s->wrong, 1);
        }
        next += 1.0 / s->rps;
        double now = bench_now_s();
        if (now - next > 0.05)
            next = now;
    }
    if (c.fd >= 0)
        close(c.fd);
    return NULL;
}

/* The baseline thread: hps_shmdb_lookup of the probe key every millisecond. */
static void *baseline(void *arg)
{
    shared_t *s = arg;
    hps_shmdb_t *db;
    uint32_t id;
    if (hps_shmdb_attach(s->segment, NULL, &db) < 0) {
        set_error(s, "baseline: cannot attach the segment");
        return NULL;
    }
    if (hps_shmdb_table_find(db, MODEL, TABLE, &id) < 0) {
        set_error(s, "baseline: no table " MODEL "." TABLE " in the segment");
        hps_shmdb_detach(db);
        return NULL;
    }
    int64_t key = hps_gen_key(0, 0);
    float row[DIM];
    double next = bench_now_s();
    while (!atomic_load(&s->stop)) {
        sleep_until(next);
        hps_shmdb_lookup(db, id, 1, &key, row, NULL, NULL);
        atomic_fetch_add(&s->lookups, 1);
        note_seen(s, s->seen_shm, &s->last_shm, probe_of(row), bench_now_s());
        next += 0.001;
        double now = bench_now_s();
        if (now - next > 0.05)
            next = now;
    }
    hps_shmdb_detach(db);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Producer                                                                  */
/* ------------------------------------------------------------------------ */

static atomic_size_t g_delivered, g_undelivered;

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk, (void)opaque;
    atomic_fetch_add(m->err ? &g_undelivered : &g_delivered, 1);
}

static rd_kafka_t *producer(const char *bootstrap)
{
    char err[512];
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    if (rd_kafka_conf_set(c, "bootstrap.servers", bootstrap, err, sizeof(err)) ||
        rd_kafka_conf_set(c, "linger.ms", "0", err, sizeof(err)))
        bench_die("producer: %s", err);
    rd_kafka_conf_set_dr_msg_cb(c, on_delivery);
    rd_kafka_t *p = rd_kafka_new(RD_KAFKA_PRODUCER, c, err, sizeof(err));
    if (!p)
        bench_die("producer: %s", err);
    return p;
}

/* Produce probe i; records its send time. */
static void produce_probe(rd_kafka_t *p, shared_t *s, size_t i)
{
    uint8_t msg[8 + 8 + DIM * 4];
    uint32_t hdr[2] = {HPS_KAFKA_MAGIC, DIM * 4};
    int64_t key = hps_gen_key(0, 0);
    float row[DIM];
    for (int d = 0; d < DIM; d++)
        row[d] = PROBE_BASE + (float)i;
    memcpy(msg, hdr, 8);
    memcpy(msg + 8, &key, 8);
    memcpy(msg + 16, row, sizeof(row));
    atomic_store(&s->probes_sent, i + 1);
    s->sent[i] = bench_now_s();
    rd_kafka_resp_err_t e = rd_kafka_producev(
        p, RD_KAFKA_V_TOPIC(TOPIC), RD_KAFKA_V_PARTITION(0), RD_KAFKA_V_VALUE(msg, sizeof(msg)),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
    if (e)
        bench_die("produce: %s", rd_kafka_err2str(e));
    rd_kafka_poll(p, 0);
}

/* Serve the producer's callbacks until t (or until *cond holds, if given). */
static void pump_until(rd_kafka_t *p, double t, atomic_llong *last, long long want)
{
    while (bench_now_s() < t && (!last || atomic_load(last) < want)) {
        check_alive();
        rd_kafka_poll(p, 1);
    }
}

/* ------------------------------------------------------------------------ */
/* Report                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct lat {
    size_t seen, lost;
    double p50, p99, max;
} lat_t;

/* Latencies (ms) of probes first .. n-1. */
static lat_t latencies(const double *sent, const double *seen, size_t first, size_t n)
{
    double *l = malloc(n * sizeof(double));
    lat_t r = {0};
    if (!l)
        bench_die("out of memory");
    for (size_t i = first; i < n; i++)
        if (seen[i] > 0)
            l[r.seen++] = (seen[i] - sent[i]) * 1e3;
    r.lost = n - first - r.seen;
    qsort(l, r.seen, sizeof(double), bench_cmp_double);
    if (r.seen) {
        r.p50 = l[bench_rank(r.seen, 0.50)];
        r.p99 = l[bench_rank(r.seen, 0.99)];
        r.max = l[r.seen - 1];
    }
    free(l);
    return r;
}

/* utime + stime of a process in seconds, or -1. */
static double cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    unsigned long ut, st;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static void print_lat(const char *what, lat_t l, size_t n)
{
    printf("  %-34s %zu/%zu seen, lost %zu; p50 %7.2f ms  p99 %7.2f ms  max %7.2f ms\n", what,
           l.seen, n, l.lost, l.p50, l.p99, l.max);
}

/* ------------------------------------------------------------------------ */
/* Main                                                                      */
/* ------------------------------------------------------------------------ */

static void usage(void)
{
    fprintf(stderr, "usage: bench-freshness [--probes N] [--rate F] [--rps R] [--quick]\n"
                    "         [--poll-timeout-ms T] [--fetch-wait-ms W]\n"
                    "         [--gen PATH] [--coordinator PATH] [--worker PATH] [--keep]\n");
    exit(2);
}

static void parse(int argc, char **argv, options_t *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--quick")) {
            o->probes = 40, o->rate = 10;
        } else if (!strcmp(a, "--keep")) {
            o->keep = true;
        } else if (!v) {
            usage();
        } else if (!strcmp(a, "--probes")) {
            o->probes = strtoull(v, NULL, 10), i++;
        } else if (!strcmp(a, "--rate")) {
            o->rate = atof(v), i++;
        } else if (!strcmp(a, "--rps")) {
            o->rps = atof(v), i++;
        } else if (!strcmp(a, "--poll-timeout-ms")) {
            o->poll_timeout_ms = atoi(v), i++;
        } else if (!strcmp(a, "--fetch-wait-ms")) {
            o->fetch_wait_ms = atoi(v), i++;
        } else if (!strcmp(a, "--gen")) {
            o->gen = v, i++;
        } else if (!strcmp(a, "--coordinator")) {
            o->coordinator = v, i++;
        } else if (!strcmp(a, "--worker")) {
            o->worker = v, i++;
        } else {
            usage();
        }
    }
    if (o->probes < 1 || o->probes >= MAX_PROBES || !(o->rate > 0 && o->rate <= 1000) ||
        !(o->rps > 0 && o->rps <= 100000) || o->poll_timeout_ms < 0 || o->fetch_wait_ms < 0) {
        fprintf(stderr, "bench-freshness: --probes 1..%d, --rate 0..1000, --rps 0..100000\n",
                MAX_PROBES - 1);
        exit(2);
    }
}

static void setup_signals(void)
{
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

static const char *start_mock(void)
{
    char err[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "2", err, sizeof(err));
    g_mock_host = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!g_mock_host || !(g_mock = rd_kafka_mock_cluster_new(g_mock_host, 1)))
        bench_die("cannot create the mock cluster: %s", err);
    if (rd_kafka_mock_topic_create(g_mock, TOPIC, 1, 1))
        bench_die("cannot create topic " TOPIC);
    return rd_kafka_mock_cluster_bootstraps(g_mock);
}

/* Probe 0 (not measured): the consumer group has joined and the whole path
 * works once the worker returns it. */
static void warm_up(rd_kafka_t *p, shared_t *s)
{
    produce_probe(p, s, 0);
    pump_until(p, bench_now_s() + START_S, &s->last_http, 0);
    if (atomic_load(&s->last_http) < 0)
        bench_die("the worker never returned the first update in %.0f s (%llu ok, %llu failed: %s)",
                  START_S, (unsigned long long)atomic_load(&s->ok),
                  (unsigned long long)atomic_load(&s->failed), s->first_error);
}

int main(int argc, char **argv)
{
    options_t o = {.probes = 200,
                   .rate = 5,
                   .rps = 1000,
                   .gen = HPS_GEN_PATH,
                   .coordinator = HPS_COORDINATOR_PATH,
                   .worker = HPS_WORKER_PATH};
    parse(argc, argv, &o);
    g_keep = o.keep;
    bench_on_error("bench-freshness", on_error);
    setup_signals();
    char cpu[128], load0[128], load1[128], ini[PATH_MAX + 32];
    bench_cpu_model(cpu, sizeof(cpu));
    bench_loadavg(load0, sizeof(load0));
    snprintf(g_tmp, sizeof(g_tmp), "/tmp/bench-fresh-XXXXXX");
    if (!mkdtemp(g_tmp))
        bench_die("mkdtemp: %s", strerror(errno));
    snprintf(g_seg, sizeof(g_seg), "bench-fresh-%d", (int)getpid());

    const char *bs = start_mock();
    make_model(&o, bs, ini, sizeof(ini));
    fprintf(stderr, "bench-freshness: starting hps-coordinator and hps-worker (%s)\n", g_tmp);
    shared_t s = {.port = start_servers(&o, ini), .segment = g_seg, .rps = o.rps};
    size_t n = o.probes + 1;
    s.sent = calloc(n, sizeof(double));
    s.seen_http = calloc(n, sizeof(double));
    s.seen_shm = calloc(n, sizeof(double));
    if (!s.sent || !s.seen_http || !s.seen_shm)
        bench_die("out of memory");
    atomic_store(&s.last_http, -1);
    atomic_store(&s.last_shm, -1);
    pthread_t tc, tb;
    if (pthread_create(&tc, NULL, client, &s) || pthread_create(&tb, NULL, baseline, &s))
        bench_die("pthread_create");
    rd_kafka_t *p = g_producer = producer(bs);
    warm_up(p, &s);

    fprintf(stderr, "bench-freshness: %zu probes at %.1f/s, %.0f requests/s...\n", o.probes, o.rate,
            o.rps);
    uint64_t ok0 = atomic_load(&s.ok), failed0 = atomic_load(&s.failed),
             wrong0 = atomic_load(&s.wrong), lk0 = atomic_load(&s.lookups);
    double cc0 = cpu_s(g_coord), cw0 = cpu_s(g_worker), cb0 = cpu_s(getpid());
    double t0 = bench_now_s();
    for (size_t i = 1; i < n; i++) {
        produce_probe(p, &s, i);
        pump_until(p, s.sent[i] + 1.0 / o.rate, NULL, 0);
    }
    /* The last probe's grace: seen by both, or 1 s. */
    pump_until(p, bench_now_s() + 1.0, &s.last_http, (long long)n - 1);
    pump_until(p, bench_now_s() + 0.2, &s.last_shm, (long long)n - 1);
    double wall = bench_now_s() - t0;
    uint64_t ok = atomic_load(&s.ok) - ok0, failed = atomic_load(&s.failed) - failed0,
             wrong = atomic_load(&s.wrong) - wrong0, lk = atomic_load(&s.lookups) - lk0;
    double cc = cpu_s(g_coord) - cc0, cw = cpu_s(g_worker) - cw0, cb = cpu_s(getpid()) - cb0;
    atomic_store(&s.stop, 1);
    pthread_join(tc, NULL);
    pthread_join(tb, NULL);
    rd_kafka_flush(p, 5000);
    size_t undelivered = n - atomic_load(&g_delivered);
    rd_kafka_destroy(p);
    g_producer = NULL;
    bench_loadavg(load1, sizeof(load1));

    lat_t h = latencies(s.sent, s.seen_http, 1, n), b = latencies(s.sent, s.seen_shm, 1, n);
    printf("bench-freshness: produce -> vector returned by hps-worker over HTTP (commit %s)\n",
           BENCH_VCS);
    printf("  machine: %s, %ld CPUs; load average at start %s, at end %s\n", cpu,
           sysconf(_SC_NPROCESSORS_ONLN), load0, load1);
    char pt[32] = "default", fw[32] = "default";
    if (o.poll_timeout_ms)
        snprintf(pt, sizeof(pt), "%d", o.poll_timeout_ms);
    if (o.fetch_wait_ms)
        snprintf(fw, sizeof(fw), "%d", o.fetch_wait_ms);
    printf("  model %d rows dim %d, 1 partition, mock cluster; %zu probes at %.1f/s "
           "(lost if > %.0f ms); [update_source] poll_timeout_ms %s, fetch_wait_max_ms %s\n",
           ROWS, DIM, o.probes, o.rate, 1e3 / o.rate, pt, fw);
    printf("  requests: %.0f/s served (target %.0f/s), %llu failed, %llu wrong rows; %zu "
           "probes undelivered by Kafka\n",
           (double)ok / wall, o.rps, (unsigned long long)failed, (unsigned long long)wrong,
           undelivered);
    if (s.have_error)
        printf("  first error: %s\n", s.first_error);
    printf("  CPU over the window: coordinator %.0f%%, worker %.0f%%, this process (mock "
           "broker, producer, client, baseline) %.0f%%\n",
           100 * cc / wall, 100 * cw / wall, 100 * cb / wall);
    print_lat("HTTP, hps-worker:", h, o.probes);
    char what[64];
    snprintf(what, sizeof(what), "baseline, hps_shmdb_lookup %.0f/s:", (double)lk / wall);
    print_lat(what, b, o.probes);
    printf("  worker adds: p50 %+.2f ms, p99 %+.2f ms over the baseline\n", h.p50 - b.p50,
           h.p99 - b.p99);
    bool pass = h.lost == 0 && h.seen && h.p99 < 100 && !failed && !wrong;
    printf("  p99 < 100 ms: %s\n", pass ? "PASS" : "MISS");
    cleanup();
    free(s.sent), free(s.seen_http), free(s.seen_shm);
    return 0;
}
