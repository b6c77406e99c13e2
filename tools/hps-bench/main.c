/*
 * hps-bench -- end-to-end lookup benchmark of a running hps-worker over
 * KServe v2 HTTP (binary data extension), beside the same lookups against a
 * local redis-server in HugeCTR's Redis layout.
 *
 * Reads request files written by `hps-gen requests` (one per batch size),
 * sends each request as POST /v2/models/<model>/infer from N concurrent
 * keep-alive connections, and reports requests/s, keys/s and latency
 * percentiles; then the same requests as pipelined HMGETs (one per table and
 * partition) against Redis, over N connections, and the ratio.  --verify N
 * checks N answers of each file exactly against hps_gen_vector_v() of the
 * hps-gen version the model files hold (or the table's default value for
 * keys not in the model).
 *
 * Every figure printed is measured by this run.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hps-bench.h"
#include "hps-bench-vcs.h"
#include "bench/benchutil.h"
#include "hps/hps.h"

#define MAX_FILES 16
#define MAX_CONC  16

typedef struct options {
    const char *url, *config, *model;
    const char *files[MAX_FILES];
    unsigned nfiles;
    unsigned conc[MAX_CONC];
    unsigned nconc;
    double duration_s, warmup_s, wait_ready_s;
    uint64_t count, verify;
    unsigned reps;
    bool redis, quick;
    unsigned partitions;
    pid_t server_pid;
} options_t;

typedef struct row {
    uint32_t batch, T;
    unsigned conc;
    hb_result_t ours, redis;
} row_t;

static hb_redis_t g_redis;
static unsigned g_failures;

static void on_signal(int sig)
{
    if (g_redis.pid > 0)
        kill(g_redis.pid, SIGKILL);
    _exit(128 + sig);
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("hps-bench: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    hb_redis_stop(&g_redis);
    exit(1);
}

/* ---- Options ------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: hps-bench --url http://HOST:PORT --config INI [--model NAME] [OPTIONS]\n"
        "                 REQUEST_FILE...\n"
        "       hps-bench -h | --help | --version\n"
        "\n"
        "Drives a running hps-worker with the requests of each file (written by\n"
        "`hps-gen requests`; one file per batch size) over KServe v2 HTTP with binary\n"
        "tensors, and the same lookups against a private redis-server in HugeCTR's\n"
        "layout (loaded from the model files named by INI), and prints both.\n"
        "\n"
        "  --concurrency N[,N..]  concurrent connections (threads), each measured (default 1)\n"
        "  --duration S           timed seconds per measurement (default 5)\n"
        "  --count C              timed requests per measurement instead of a duration\n"
        "  --warmup S             untimed seconds before each measurement (default 1)\n"
        "  --reps R               timed runs per measurement, the best (req/s) kept (default 1)\n"
        "  --verify N             check N answers per file exactly, for both (default 0),\n"
        "                         against hps-gen's vectors of the version of the model\n"
        "                         files (hps-gen model --model-version; row 0 tells)\n"
        "  --no-redis             skip the Redis comparison\n"
        "  --redis-partitions P   partitions of HugeCTR's Redis layout (default 8)\n"
        "  --server-pid PID       the worker's pid: report its CPU time per request\n"
        "  --wait-ready S         wait up to S s for /v2/health/ready (default 0: once)\n"
        "  --quick                smoke test: 0.5 s measurements, 0.1 s warm-up, verify 2\n"
        "  -h, --help             print this help and exit\n"
        "  --version              print the version and exit\n"
        "\n"
        "Exit status: 0 ok; 1 failure (errors, a failed check, or a setup error); 2 usage.\n");
}

static const char *arg(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "hps-bench: %s needs a value\n", argv[*i]);
        exit(2);
    }
    return argv[++*i];
}

static double num(const char *s, double lo, double hi, const char *what)
{
    char *e;
    double v = strtod(s, &e);
    if (e == s || *e || !(v >= lo && v <= hi)) {
        fprintf(stderr, "hps-bench: bad %s '%s' (%g..%g)\n", what, s, lo, hi);
        exit(2);
    }
    return v;
}

static void parse(int argc, char **argv, options_t *o)
{
    *o = (options_t){.conc = {1},
                     .nconc = 1,
                     .duration_s = 5,
                     .warmup_s = 1,
                     .reps = 1,
                     .redis = true,
                     .partitions = 8};
    bool dur = false, warm = false, ver = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--url"))
            o->url = arg(argc, argv, &i);
        else if (!strcmp(a, "--config"))
            o->config = arg(argc, argv, &i);
        else if (!strcmp(a, "--model"))
            o->model = arg(argc, argv, &i);
        else if (!strcmp(a, "--concurrency")) {
            const char *s = arg(argc, argv, &i);
            o->nconc = 0;
            while (*s) {
                char *e;
                unsigned long v = strtoul(s, &e, 10);
                if (e == s || v < 1 || v > 4096 || o->nconc == MAX_CONC || (*e && *e != ',')) {
                    fprintf(stderr, "hps-bench: bad --concurrency list\n");
                    exit(2);
                }
                o->conc[o->nconc++] = (unsigned)v;
                s = *e ? e + 1 : e;
            }
        } else if (!strcmp(a, "--duration"))
            o->duration_s = num(arg(argc, argv, &i), 0.01, 86400, "--duration"), dur = true;
        else if (!strcmp(a, "--count"))
            o->count = (uint64_t)num(arg(argc, argv, &i), 1, 1e12, "--count");
        else if (!strcmp(a, "--warmup"))
            o->warmup_s = num(arg(argc, argv, &i), 0, 3600, "--warmup"), warm = true;
        else if (!strcmp(a, "--reps"))
            o->reps = (unsigned)num(arg(argc, argv, &i), 1, 100, "--reps");
        else if (!strcmp(a, "--verify"))
            o->verify = (uint64_t)num(arg(argc, argv, &i), 0, 1e9, "--verify"), ver = true;
        else if (!strcmp(a, "--no-redis"))
            o->redis = false;
        else if (!strcmp(a, "--redis-partitions"))
            o->partitions = (unsigned)num(arg(argc, argv, &i), 1, 65536, "--redis-partitions");
        else if (!strcmp(a, "--server-pid"))
            o->server_pid = (pid_t)num(arg(argc, argv, &i), 1, 1e9, "--server-pid");
        else if (!strcmp(a, "--wait-ready"))
            o->wait_ready_s = num(arg(argc, argv, &i), 0, 3600, "--wait-ready");
        else if (!strcmp(a, "--quick"))
            o->quick = true;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--version")) {
            printf("hps-bench %s\n", hps_version());
            exit(0);
        } else if (a[0] == '-') {
            fprintf(stderr, "hps-bench: unknown option %s\n", a);
            usage(stderr);
            exit(2);
        } else if (o->nfiles == MAX_FILES) {
            fprintf(stderr, "hps-bench: at most %d request files\n", MAX_FILES);
            exit(2);
        } else
            o->files[o->nfiles++] = a;
    }
    if (o->quick) {
        o->duration_s = dur ? o->duration_s : 0.5;
        o->warmup_s = warm ? o->warmup_s : 0.1;
        o->verify = ver ? o->verify : 2;
    }
    if (!o->url || !o->config || o->nfiles == 0) {
        usage(stderr);
        exit(2);
    }
}

/* ---- Report -------------------------------------------------------------- */

/* The hps-gen version(s) --verify expects (hb_model_load_keys). */
static void print_versions(const hb_model_t *m)
{
    bool same = true, found = true;
    for (uint32_t t = 0; t < m->num_tables; t++) {
        same = same && m->tables[t].version == m->tables[0].version;
        found = found && m->tables[t].version_found;
    }
    if (same)
        printf("verify: against the vectors of hps-gen version %u (hps_gen_vector_v), %s;"
               " [model.%s] version = %u\n",
               m->tables[0].version,
               found ? "the version row 0 of the model files holds" : "the INI's", m->name,
               m->version);
    for (uint32_t t = 0; t < m->num_tables; t++) {
        const hb_table_t *tb = &m->tables[t];
        if (!same && tb->version_found)
            printf("verify: table %s: against the vectors of hps-gen version %u\n", tb->name,
                   tb->version);
        else if (!tb->version_found && tb->rows)
            printf("verify: table %s: row 0 of %s is no vector of hps-gen version %u nor of"
                   " versions 1..%d (not hps-gen's model files?): checked against version"
                   " %u's\n",
                   tb->name, tb->dir, m->version, HB_VERSION_SCAN, tb->version);
    }
}

static void print_header(const options_t *o, const hb_model_t *m, const hb_http_target_t *tg)
{
    char cpu[256];
    bench_cpu_model(cpu, sizeof(cpu));
    printf("hps-bench (hps %s, built from git %s): end-to-end lookups, hps-worker over KServe v2"
           " HTTP vs redis-server\n",
           hps_version(), HPS_BENCH_VCS);
    printf("machine: nproc %ld, CPU %s; client, worker and redis-server share it\n",
           sysconf(_SC_NPROCESSORS_ONLN), cpu);
    bench_print_loadavg("at start");
    uint32_t d0 = m->tables[0].dim;
    bool same = true;
    for (uint32_t t = 1; t < m->num_tables; t++)
        same = same && m->tables[t].dim == d0;
    printf("model: %s, %u tables, %" PRIu64 " rows, dim %s%u, %u-byte keys, %.1f MB of keys +"
           " vectors (config %s)\n",
           m->name, m->num_tables, m->rows, same ? "" : "up to ", d0, m->key_bytes,
           (double)m->raw_bytes / 1e6, o->config);
    if (o->verify)
        print_versions(m);
    printf("ours:  POST http://%s:%d/v2/models/%s/infer, JSON header + binary KEYS (INT64"
           " [1,T*B]), NUMKEYS (INT32 [1,T]) as JSON data, OUTPUT0 requested binary; HTTP/1.1"
           " keep-alive, one request in flight per connection%s\n",
           tg->host, tg->port, m->name,
           o->server_pid ? "" : " (worker CPU not measured: no --server-pid)");
    if (o->redis)
        printf("redis: redis-server %s on 127.0.0.1:%d (--save '' --appendonly no), HugeCTR"
               " layout hps_et{hps_et.%s.<table>/p<i>}v, %u partitions per table; per request"
               " one HMGET per non-empty (table, partition), all pipelined on the"
               " connection, vectors copied into one output buffer in input order (hiredis)\n",
               g_redis.version, g_redis.port, m->name, g_redis.partitions);
    else
        printf("redis: skipped\n");
    printf("timing: per measurement %u timed run(s) of ", o->reps);
    if (o->count)
        printf("%" PRIu64 " requests", o->count);
    else
        printf("%.2f s", o->duration_s);
    printf(", each after %.2f s untimed warm-up; the run with the most requests/s is reported"
           " (with its own latencies); closed loop, N connections = N client threads; latency"
           " = write of the request to the last byte of the answer, nearest-rank percentiles"
           " over the run's requests\n",
           o->warmup_s);
}

static void print_check(const char *who, const hb_reqfile_t *rf, const hb_check_t *c, int rc,
                        const char *err)
{
    bool ok = rc == 0 && c->rows_missed == 0 && c->rows_wrong == 0 && c->responses > 0;
    printf("  verify %-5s B=%-5u %" PRIu64 " answers, %" PRIu64 " rows: %" PRIu64
           " = hps_gen_vector_v (keys in the model), %" PRIu64 " = default (keys not in the"
           " model), %" PRIu64 " default for a key in the model, %" PRIu64 " wrong: %s\n",
           who, rf->B, c->responses, c->rows, c->rows_vector, c->rows_default, c->rows_missed,
           c->rows_wrong, ok ? "PASS" : "FAIL");
    if (rc != 0)
        printf("         request failed: %s\n", err);
    if (c->first_bad[0])
        printf("         first mismatch: %s\n", c->first_bad);
    g_failures += !ok;
}

static double rate(const hb_result_t *r)
{
    return r->wall_s > 0 ? (double)r->requests / r->wall_s : 0;
}

static void print_measure(const char *who, const hb_reqfile_t *rf, unsigned conc,
                          const hb_result_t *r, const double *rates, unsigned reps)
{
    printf("  run    %-5s B=%-5u conns=%-3u", who, rf->B, conc);
    if (reps > 1) {
        printf(" req/s of each run:");
        for (unsigned i = 0; i < reps; i++)
            printf(" %.1f", rates[i]);
        printf("; best:");
    }
    printf(" %" PRIu64 " requests in %.3f s, %" PRIu64 " errors, client CPU %.2f s", r->requests,
           r->wall_s, r->errors, r->client_cpu_s);
    if (r->server_cpu_s >= 0)
        printf(", server CPU %.2f s", r->server_cpu_s);
    printf("\n");
    if (r->errors)
        printf("         first error: %s\n", r->first_error);
    g_failures += r->errors > 0 || r->requests == 0;
}

static void fmt_srv(char *buf, size_t n, const hb_result_t *r)
{
    if (r->server_cpu_s >= 0 && r->requests)
        snprintf(buf, n, "%8.3f", r->server_cpu_s * 1e3 / (double)r->requests);
    else
        snprintf(buf, n, "%8s", "-");
}

static void print_table(const row_t *rows, size_t nrows, bool redis)
{
    printf("\n== results ==\n");
    printf("  samples = B (samples per request, one key per table); keys/req = T x B;"
           " req/s and Mkeys/s over the timed window; latencies in ms; srv ms/req = server"
           " process CPU time per request\n");
    printf("  %7s %8s %5s | ", "", "", "");
    if (redis)
        printf("%-62s | %-37s | %s", "ours: hps-worker, HTTP + binary tensors",
               "redis: pipelined HMGET", "ours/redis");
    else
        printf("ours: hps-worker, HTTP + binary tensors");
    printf("\n  %7s %8s %5s | %9s %8s %7s %7s %7s %7s %4s %8s", "samples", "keys/req", "conns",
           "req/s", "Mkeys/s", "p50", "p90", "p99", "max", "err", "srv ms/r");
    if (redis)
        printf(" | %9s %7s %7s %4s %8s | %6s %6s %6s", "req/s", "p50", "p99", "err", "srv ms/r",
               "req/s", "p50", "p99");
    printf("\n");
    for (size_t i = 0; i < nrows; i++) {
        const row_t *w = &rows[i];
        const hb_result_t *o = &w->ours, *r = &w->redis;
        char so[16], sr[16];
        double ro = rate(o), rr = rate(r);
        fmt_srv(so, sizeof(so), o);
        printf("  %7u %8u %5u | %9.1f %8.3f %7.3f %7.3f %7.3f %7.3f %4" PRIu64 " %s", w->batch,
               w->batch * w->T, w->conc, ro, ro * w->batch * w->T / 1e6, o->p50_ms, o->p90_ms,
               o->p99_ms, o->max_ms, o->errors, so);
        if (redis && r->done) {
            fmt_srv(sr, sizeof(sr), r);
            printf(" | %9.1f %7.3f %7.3f %4" PRIu64 " %s | %5.2fx %5.2fx %5.2fx", rr, r->p50_ms,
                   r->p99_ms, r->errors, sr, rr > 0 ? ro / rr : 0,
                   r->p50_ms > 0 ? o->p50_ms / r->p50_ms : 0,
                   r->p99_ms > 0 ? o->p99_ms / r->p99_ms : 0);
        }
        printf("\n");
    }
    if (redis)
        printf("  ours/redis: req/s above 1 = ours faster; p50 and p99 below 1 = ours lower"
               " latency\n");
}

/* ---- Main ---------------------------------------------------------------- */

/* One timed run; keeps the best by requests/s in *best (errors of any run
 * are never hidden behind a clean best run). */
static void measure_once(const hb_client_t *cl, const hb_reqfile_t *rf, const hb_run_opts_t *ro,
                         hb_result_t *best, double *ret_rate)
{
    char err[512];
    hb_result_t r;
    if (hb_run(cl, rf, ro, &r, err, sizeof(err)) < 0)
        die("%s", err);
    *ret_rate = rate(&r);
    uint64_t errors = best->errors + r.errors;
    if (!best->done || rate(&r) > rate(best)) {
        if (!r.errors && best->errors)
            snprintf(r.first_error, sizeof(r.first_error), "%.200s (in another run)",
                     best->first_error);
        *best = r;
    }
    best->errors = errors;
}

static void wait_ready(const options_t *o, const hb_http_target_t *tg)
{
    char path[300], body[200];
    double until = hb_now_s() + o->wait_ready_s;
    int st;
    snprintf(path, sizeof(path), "/v2/models/%s/ready", tg->model);
    for (;;) {
        st = hb_http_get_status(tg, "/v2/health/ready", body, sizeof(body));
        if (st == 200)
            st = hb_http_get_status(tg, path, body, sizeof(body));
        if (st == 200 || hb_now_s() >= until)
            break;
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (st != 200)
        die("worker at http://%s:%d not ready for model %s: %s %s", tg->host, tg->port, tg->model,
            st < 0 ? "no answer" : "HTTP status", st < 0 ? "" : body);
}

int main(int argc, char **argv)
{
    options_t o;
    hb_model_t m;
    hb_http_target_t tg = {0};
    hb_reqfile_t rf[MAX_FILES];
    char err[512];
    parse(argc, argv, &o);
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);

    if (hb_http_parse_url(o.url, &tg, err, sizeof(err)) < 0)
        die("%s", err);
    if (hb_model_open(o.config, o.model, &m, err, sizeof(err)) < 0)
        die("%s", err);
    tg.model = m.name;
    tg.m = &m;
    for (unsigned i = 0; i < o.nfiles; i++) {
        if (hb_reqfile_open(o.files[i], &rf[i], err, sizeof(err)) < 0)
            die("%s", err);
        if (rf[i].T != m.num_tables)
            die("%s: requests for %u tables, model %s has %u", o.files[i], rf[i].T, m.name,
                m.num_tables);
    }
    if (o.verify && hb_model_load_keys(&m, err, sizeof(err)) < 0)
        die("%s", err);
    wait_ready(&o, &tg);

    hb_client_t ours = hb_http_client, redis = hb_redis_client;
    ours.ctx = &tg;
    redis.ctx = &g_redis;
    if (o.redis) {
        g_redis.m = &m;
        g_redis.partitions = o.partitions;
        if (hb_redis_start(&g_redis, err, sizeof(err)) < 0) {
            fprintf(stderr, "hps-bench: Redis comparison skipped: %s\n", err);
            o.redis = false;
        }
    }
    print_header(&o, &m, &tg);
    if (o.redis) {
        if (hb_redis_load(&g_redis, err, sizeof(err)) < 0)
            die("loading Redis: %s", err);
        printf("redis load: %" PRIu64 " rows (sum of HLEN; model %" PRIu64 ") by pipelined HSET"
               " in %.2f s = %.1f MB/s; used_memory %.1f MB = %.2fx the raw key + vector"
               " bytes\n",
               g_redis.rows_loaded, m.rows, g_redis.load_s,
               g_redis.load_s > 0 ? (double)m.raw_bytes / g_redis.load_s / 1e6 : 0,
               (double)g_redis.used_memory / 1e6,
               (double)g_redis.used_memory / (double)m.raw_bytes);
        if (g_redis.rows_loaded != m.rows)
            die("Redis holds %" PRIu64 " rows, the model %" PRIu64, g_redis.rows_loaded, m.rows);
    }

    row_t rows[MAX_FILES * MAX_CONC];
    size_t nrows = 0;
    hb_run_opts_t ro = {.warmup_s = o.warmup_s, .duration_s = o.duration_s, .count = o.count};
    printf("\n== runs ==\n");
    for (unsigned i = 0; i < o.nfiles; i++) {
        printf("  file %s: %" PRIu64 " requests of B=%u samples x T=%u tables (%u keys,"
               " %.1f KB of keys; answer %.1f KB of floats)\n",
               rf[i].path, rf[i].C, rf[i].B, rf[i].T, rf[i].B * rf[i].T,
               rf[i].B * rf[i].T * 8 / 1e3, (double)rf[i].B * (double)m.dim_sum * 4 / 1e3);
        tg.rf = &rf[i];
        g_redis.rf = &rf[i];
        if (o.verify) {
            hb_check_t c;
            int rc = hb_verify(&ours, &m, &rf[i], o.verify, &c, err, sizeof(err));
            print_check("ours", &rf[i], &c, rc, err);
            if (o.redis) {
                rc = hb_verify(&redis, &m, &rf[i], o.verify, &c, err, sizeof(err));
                print_check("redis", &rf[i], &c, rc, err);
            }
        }
        for (unsigned k = 0; k < o.nconc; k++) {
            row_t *w = &rows[nrows++];
            memset(w, 0, sizeof(*w));
            w->batch = rf[i].B, w->T = rf[i].T, w->conc = o.conc[k];
            ro.concurrency = o.conc[k];
            ro.server_pid = o.server_pid;
            /* Runs alternate ours / redis, so both see the same machine load. */
            double ro_rates[100], rr_rates[100];
            for (unsigned rep = 0; rep < o.reps; rep++) {
                ro.server_pid = o.server_pid;
                measure_once(&ours, &rf[i], &ro, &w->ours, &ro_rates[rep]);
                if (o.redis) {
                    ro.server_pid = g_redis.pid;
                    measure_once(&redis, &rf[i], &ro, &w->redis, &rr_rates[rep]);
                }
            }
            print_measure("ours", &rf[i], o.conc[k], &w->ours, ro_rates, o.reps);
            if (o.redis)
                print_measure("redis", &rf[i], o.conc[k], &w->redis, rr_rates, o.reps);
        }
    }
    print_table(rows, nrows, o.redis);
    printf("\n");
    bench_print_loadavg("at end");
    printf("overall: %u failure(s) (failed checks, runs with errors or without a request)\n",
           g_failures);
    hb_redis_stop(&g_redis);
    for (unsigned i = 0; i < o.nfiles; i++)
        hb_reqfile_close(&rf[i]);
    hb_model_close(&m);
    return g_failures ? 1 : 0;
}
