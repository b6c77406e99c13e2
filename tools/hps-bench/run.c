/*
 * run.c -- the measurement harness, shared by the HTTP and Redis clients.
 *
 * N client threads, one connection each, each sending its next request as
 * soon as the previous answer is in (closed loop).  Thread i starts at
 * request i * C / N of the file and walks it cyclically.  All threads
 * connect, meet at a barrier, then run a warm-up until a common instant t0;
 * only requests that START at or after t0 are timed.  Duration mode: each
 * thread stops issuing at t0 + duration; count mode: the threads share
 * `count` requests.  The window ends when the last timed answer arrives, so
 * requests/s = timed requests / (last answer - t0).
 *
 * Latency = from just before the request is written to the socket until its
 * whole answer is read (client side, includes the client's own parsing).
 * CPU: this process's user+system time and the server's (from
 * /proc/<pid>/stat), both over the timed window.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "hps-bench.h"

double hb_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double hb_proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t k = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[k] = 0;
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    unsigned long long ut, st;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static double self_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

typedef struct shared {
    const hb_client_t *cl;
    const hb_reqfile_t *rf;
    const hb_run_opts_t *o;
    pthread_barrier_t ready;
    double t0, t_end; /* set by main between the two barriers */
    pthread_barrier_t go;
    _Atomic int64_t remaining; /* count mode: requests left to hand out */
} shared_t;

typedef struct worker {
    shared_t *sh;
    unsigned tid;
    void *conn;
    char open_err[HB_ERR_LEN];
    float *lat_ms;
    size_t nlat, caplat;
    uint64_t errors;
    double last_end;
    char first_error[HB_ERR_LEN];
} worker_t;

static void record(worker_t *w, float ms)
{
    if (w->nlat == w->caplat) {
        size_t nc = w->caplat ? w->caplat * 2 : 4096;
        float *nl = realloc(w->lat_ms, nc * sizeof(float));
        if (!nl)
            return; /* drop the sample rather than the run */
        w->lat_ms = nl, w->caplat = nc;
    }
    w->lat_ms[w->nlat++] = ms;
}

static void *worker_main(void *p)
{
    worker_t *w = p;
    shared_t *sh = w->sh;
    const hb_reqfile_t *rf = sh->rf;
    char err[HB_ERR_LEN];
    uint64_t i = (uint64_t)w->tid * rf->C / sh->o->concurrency;
    pthread_barrier_wait(&sh->ready); /* connections open */
    pthread_barrier_wait(&sh->go);    /* t0, t_end set */
    if (!w->conn)
        return NULL;
    while (hb_now_s() < sh->t0) /* warm-up: untimed */
        (void)sh->cl->request(w->conn, hb_req_keys(rf, i++), NULL, err, sizeof(err));
    for (;;) {
        if (sh->o->count) {
            if (atomic_fetch_sub_explicit(&sh->remaining, 1, memory_order_relaxed) <= 0)
                break;
        } else if (hb_now_s() >= sh->t_end) {
            break;
        }
        double s = hb_now_s();
        int rc = sh->cl->request(w->conn, hb_req_keys(rf, i++), NULL, err, sizeof(err));
        double e = hb_now_s();
        w->last_end = e;
        if (rc == 0) {
            record(w, (float)((e - s) * 1e3));
        } else {
            if (!w->errors)
                snprintf(w->first_error, sizeof(w->first_error), "%s", err);
            w->errors++;
        }
    }
    return NULL;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted v[0..n). */
static double pct(const float *v, size_t n, double q)
{
    if (n == 0)
        return 0;
    size_t k = (size_t)ceil(q * (double)n);
    return v[k == 0 ? 0 : k - 1];
}

static void summarize(worker_t *ws, unsigned nt, double t0, hb_result_t *r)
{
    size_t total = 0;
    double last = t0, sum = 0;
    for (unsigned t = 0; t < nt; t++) {
        total += ws[t].nlat;
        r->errors += ws[t].errors;
        if (ws[t].last_end > last)
            last = ws[t].last_end;
        if (ws[t].errors && !r->first_error[0])
            snprintf(r->first_error, sizeof(r->first_error), "%s", ws[t].first_error);
    }
    float *all = malloc((total ? total : 1) * sizeof(float));
    size_t k = 0;
    for (unsigned t = 0; all && t < nt; t++) {
        memcpy(all + k, ws[t].lat_ms, ws[t].nlat * sizeof(float));
        k += ws[t].nlat;
    }
    if (all) {
        qsort(all, k, sizeof(float), cmp_float);
        for (size_t i = 0; i < k; i++)
            sum += all[i];
        r->p50_ms = pct(all, k, 0.50);
        r->p90_ms = pct(all, k, 0.90);
        r->p99_ms = pct(all, k, 0.99);
        r->max_ms = k ? all[k - 1] : 0;
        r->mean_ms = k ? sum / (double)k : 0;
    }
    free(all);
    r->requests = total;
    r->wall_s = last - t0;
    r->done = true;
}

int hb_run(const hb_client_t *cl, const hb_reqfile_t *rf, const hb_run_opts_t *o, hb_result_t *r,
           char *err, size_t n)
{
    unsigned nt = o->concurrency;
    shared_t sh = {.cl = cl, .rf = rf, .o = o};
    worker_t *ws = calloc(nt, sizeof(worker_t));
    pthread_t *th = calloc(nt, sizeof(pthread_t));
    memset(r, 0, sizeof(*r));
    if (!ws || !th) {
        snprintf(err, n, "out of memory");
        free(ws);
        free(th);
        return -1;
    }
    atomic_init(&sh.remaining, (int64_t)o->count);
    pthread_barrier_init(&sh.ready, NULL, nt + 1);
    pthread_barrier_init(&sh.go, NULL, nt + 1);
    for (unsigned t = 0; t < nt; t++)
        ws[t].sh = &sh, ws[t].tid = t;
    int rc = 0;
    for (unsigned t = 0; t < nt && rc == 0; t++) {
        ws[t].conn = cl->open(cl->ctx, t, ws[t].open_err, sizeof(ws[t].open_err));
        if (!ws[t].conn) {
            snprintf(err, n, "%s connection %u: %s", cl->name, t, ws[t].open_err);
            rc = -1;
        }
    }
    if (rc < 0)
        goto out;
    for (unsigned t = 0; t < nt; t++) {
        if (pthread_create(&th[t], NULL, worker_main, &ws[t]) != 0) {
            /* The others wait at a barrier that cannot complete any more. */
            fprintf(stderr, "hps-bench: pthread_create: %s\n", strerror(errno));
            exit(1);
        }
    }
    pthread_barrier_wait(&sh.ready);
    double now = hb_now_s();
    sh.t0 = now + o->warmup_s;
    sh.t_end = sh.t0 + o->duration_s;
    pthread_barrier_wait(&sh.go);
    while (hb_now_s() < sh.t0) {
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    double c0 = self_cpu_s(), s0 = o->server_pid > 0 ? hb_proc_cpu_s(o->server_pid) : -1;
    for (unsigned t = 0; t < nt; t++)
        pthread_join(th[t], NULL);
    double c1 = self_cpu_s(), s1 = o->server_pid > 0 ? hb_proc_cpu_s(o->server_pid) : -1;
    summarize(ws, nt, sh.t0, r);
    r->client_cpu_s = c1 - c0;
    r->server_cpu_s = s0 >= 0 && s1 >= 0 ? s1 - s0 : -1;
out:
    for (unsigned t = 0; t < nt; t++) {
        if (ws[t].conn)
            cl->close(ws[t].conn);
        free(ws[t].lat_ms);
    }
    pthread_barrier_destroy(&sh.ready);
    pthread_barrier_destroy(&sh.go);
    free(ws);
    free(th);
    return rc;
}

int hb_verify(const hb_client_t *cl, const hb_model_t *m, const hb_reqfile_t *rf, uint64_t count,
              hb_check_t *c, char *err, size_t n)
{
    uint32_t maxdim = 1;
    for (uint32_t t = 0; t < m->num_tables; t++)
        maxdim = m->tables[t].dim > maxdim ? m->tables[t].dim : maxdim;
    memset(c, 0, sizeof(*c));
    void *conn = cl->open(cl->ctx, 0, err, n);
    float *scratch = malloc(maxdim * sizeof(float));
    if (!conn || !scratch) {
        if (conn)
            cl->close(conn);
        free(scratch);
        if (!conn)
            return -1;
        snprintf(err, n, "out of memory");
        return -1;
    }
    int rc = 0;
    for (uint64_t i = 0; i < count && rc == 0; i++) {
        const void *out = NULL;
        const int64_t *keys = hb_req_keys(rf, i);
        rc = cl->request(conn, keys, &out, err, n);
        if (rc == 0)
            hb_check_response(m, keys, rf->B, out, scratch, c);
    }
    cl->close(conn);
    free(scratch);
    return rc;
}
