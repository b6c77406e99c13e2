/*
 * hps-worker -- serves embedding lookups over the KServe v2 / Triton HTTP
 * protocol through the lookup library (worker/libhps, include/hps/client.h):
 * from its device's GPU embedding caches when the model has them, else from
 * the host's shared-memory volatile database, with misses answered by the
 * coordinator.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "hps/hps.h"
#include "hps/log.h"
#include "worker.h"

/* The two globals, written by signal handlers: stop, and SIGHUP seen (logged
 * by the main loop: a handler may not log). */
static volatile sig_atomic_t g_stop, g_hup;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

/* SIGHUP reloads hps-coordinator; a worker has nothing to reload, and must
 * not die of it (an operator may send HUP to every hps process). */
static void on_hup(int sig)
{
    (void)sig;
    g_hup = 1;
}

struct args {
    const char *conf;
    int device;
    int instance;
    int http_port;    /* -1: from the config */
    int metrics_port; /* -1: from the config */
    int log_level;    /* hps_log_level_t; -1: [hps] log_level */
};

/* --log-level's names, in hps_log_level_t order (as hps-coordinator's). */
static const char *const g_level_names[] = {"error", "warn", "info", "debug"};

static void usage(FILE *out)
{
    fprintf(out, "usage: hps-worker -c FILE --device N [--instance K]\n"
                 "                  [--http-port P] [--metrics-port P]\n"
                 "                  [--log-level error|warn|info|debug]\n"
                 "       hps-worker -h | --help | -V | --version\n"
                 "\n"
                 "Serves the models of FILE over KServe v2 / Triton HTTP from the shared-memory\n"
                 "volatile database that hps-coordinator maintains.  Instance K listens on\n"
                 "[worker] http_port + K and metrics_port + K unless the ports are given\n"
                 "(0: any free port, logged).\n"
                 "\n"
                 "  -c, --config FILE      the INI (the one hps-coordinator reads)\n"
                 "  -d, --device N         the device (GPU) it serves from, 0..1023\n"
                 "  -i, --instance K       its number on the host, 0..1023 (default 0)\n"
                 "      --http-port P      HTTP port, 0..65535, instead of http_port + K\n"
                 "      --metrics-port P   metrics port, 0..65535, instead of metrics_port + K;\n"
                 "                         not --http-port's (unless both are 0)\n"
                 "  -l, --log-level LEVEL  error, warn, info or debug; else [hps] log_level\n"
                 "  -h, --help             print this help and exit\n"
                 "  -V, --version          print the version and exit\n"
                 "\n"
                 "SIGTERM or SIGINT stop it cleanly.  SIGHUP is ignored (logged): configuration\n"
                 "reloads go to hps-coordinator, which re-reads the INI on SIGHUP.\n"
                 "\n"
                 "Exit status: 0 clean shutdown, 1 runtime failure, 2 usage or configuration,\n"
                 "3 the HTTP or metrics port could not be opened.\n");
}

/* An option's integer in [lo, hi]; else a message naming it and -1. */
static int parse_int(const char *opt, const char *s, int lo, int hi, int *ret)
{
    int64_t v;
    if (!hps_parse_int(s, lo, hi, &v)) {
        fprintf(stderr, "hps-worker: --%s '%s': must be an integer in [%d, %d]\n", opt, s, lo, hi);
        return -1;
    }
    *ret = (int)v;
    return 0;
}

static int parse_args(int argc, char **argv, struct args *a)
{
    static const struct option longs[] = {{"config", required_argument, NULL, 'c'},
                                          {"device", required_argument, NULL, 'd'},
                                          {"instance", required_argument, NULL, 'i'},
                                          {"http-port", required_argument, NULL, 'p'},
                                          {"metrics-port", required_argument, NULL, 'm'},
                                          {"log-level", required_argument, NULL, 'l'},
                                          {"help", no_argument, NULL, 'h'},
                                          {"version", no_argument, NULL, 'V'},
                                          {NULL, 0, NULL, 0}};
    *a = (struct args){.device = -1, .http_port = -1, .metrics_port = -1, .log_level = -1};
    int ch, bad = 0;
    /* getopt's own messages start with argv[0]: the name, not the path */
    char *argv0 = argv[0];
    argv[0] = (char *)"hps-worker";
    while ((ch = getopt_long(argc, argv, "c:d:i:l:hV", longs, NULL)) != -1) {
        switch (ch) {
        case 'c':
            a->conf = optarg;
            break;
        case 'd':
            bad |= parse_int("device", optarg, 0, 1023, &a->device);
            break;
        case 'i':
            bad |= parse_int("instance", optarg, 0, 1023, &a->instance);
            break;
        case 'p':
            bad |= parse_int("http-port", optarg, 0, 65535, &a->http_port);
            break;
        case 'm':
            bad |= parse_int("metrics-port", optarg, 0, 65535, &a->metrics_port);
            break;
        case 'l':
            a->log_level = -1;
            for (int i = 0; i < 4; i++)
                if (strcmp(optarg, g_level_names[i]) == 0)
                    a->log_level = i;
            if (a->log_level < 0) {
                fprintf(stderr, "hps-worker: --log-level %s: use error, warn, info or debug\n",
                        optarg);
                bad = 1;
            }
            break;
        case 'h':
            usage(stdout);
            exit(HPS_WEXIT_OK);
        case 'V':
            printf("hps-worker %s\n", hps_version());
            exit(HPS_WEXIT_OK);
        default:
            bad = 1;
        }
    }
    argv[0] = argv0;
    if (!bad && a->http_port > 0 && a->http_port == a->metrics_port) {
        fprintf(stderr,
                "hps-worker: --http-port and --metrics-port are both %d: they must differ\n",
                a->http_port);
        bad = 1;
    }
    if (!bad && (!a->conf || a->device < 0 || optind != argc))
        fprintf(stderr, "hps-worker: %s\n",
                !a->conf        ? "-c FILE is required"
                : a->device < 0 ? "--device N is required"
                                : "unexpected arguments after the options");
    if (bad || !a->conf || a->device < 0 || optind != argc) {
        usage(stderr);
        return HPS_WEXIT_USAGE;
    }
    return 0;
}

/* The ports this worker listens on: the options', else [worker]'s plus the
 * instance; src says which, for messages. */
struct ports {
    const char *addr; /* [worker] http_address: both listeners' */
    long http, metrics;
    char http_src[96], metrics_src[96];
};

static void effective_ports(const hps_conf_t *conf, const struct args *a, struct ports *p)
{
    const hps_conf_worker_t *wc = &conf->worker;
    p->addr = wc->http_address;
    p->http = a->http_port >= 0 ? a->http_port : (long)wc->http_port + a->instance;
    p->metrics = a->metrics_port >= 0 ? a->metrics_port : (long)wc->metrics_port + a->instance;
    if (a->http_port >= 0)
        snprintf(p->http_src, sizeof(p->http_src), "--http-port");
    else
        snprintf(p->http_src, sizeof(p->http_src), "[worker] http_port %lld + instance %d",
                 (long long)wc->http_port, a->instance);
    if (a->metrics_port >= 0)
        snprintf(p->metrics_src, sizeof(p->metrics_src), "--metrics-port");
    else
        snprintf(p->metrics_src, sizeof(p->metrics_src), "[worker] metrics_port %lld + instance %d",
                 (long long)wc->metrics_port, a->instance);
}

/* Exit status 2 (configuration) unless the ports are valid: each in
 * 1..65535 once the instance is added, and two different ones (0: a free
 * port).  Equal --http-port and --metrics-port are refused by parse_args. */
static int check_ports(const char *path, const hps_conf_t *conf, const struct args *a,
                       const struct ports *p)
{
    const hps_conf_worker_t *wc = &conf->worker;
    const char *key[2] = {"http_port", "metrics_port"}, *opt[2] = {"http-port", "metrics-port"};
    long long base[2] = {(long long)wc->http_port, (long long)wc->metrics_port};
    long port[2] = {p->http, p->metrics};
    int given[2] = {a->http_port, a->metrics_port};
    for (int i = 0; i < 2; i++)
        if (given[i] < 0 && (port[i] < 1 || port[i] > 65535)) {
            HPS_ERROR("%s: [worker] %s = %lld with --instance %d gives port %ld, outside "
                      "1..65535: lower %s or the instance, or give --%s",
                      path, key[i], base[i], a->instance, port[i], key[i], opt[i]);
            return HPS_WEXIT_USAGE;
        }
    if (p->http != 0 && p->http == p->metrics) {
        HPS_ERROR("the HTTP and metrics ports are both %ld (%s; %s): they must differ", p->http,
                  p->http_src, p->metrics_src);
        return HPS_WEXIT_USAGE;
    }
    return 0;
}

/* Probe both listeners and log, for each that cannot open, which and why;
 * rc: hps_kserve_start()'s error when it failed (logged as is when the
 * probes find nothing wrong), else 0.  Returns whether all is well. */
static bool check_listeners(const hps_conf_worker_t *wc, const struct args *a,
                            const struct ports *p, hps_err_t rc)
{
    hps_err_t hr = hps_kserve_probe_port(p->addr, (int)p->http),
              mr = hps_kserve_probe_port(p->addr, (int)p->metrics);
    if (hr)
        HPS_ERROR("cannot serve HTTP on %s:%ld (%s): %s", p->addr, p->http, p->http_src,
                  hps_strerror(hr));
    if (mr)
        HPS_ERROR("cannot serve metrics on %s:%ld (%s): %s", p->addr, p->metrics, p->metrics_src,
                  hps_strerror(mr));
    if (!hr && !mr && rc == 0)
        return true;
    if (!hr && !mr) /* the ports are free: the server's threads or memory are not */
        HPS_ERROR("the HTTP server on %s:%ld (metrics %ld) could not start, though both ports "
                  "are free: %s; it starts %lld HTTP and %lld lookup threads: a limit on "
                  "memory or threads (ulimit -v, ulimit -u, a container's) may be the cause",
                  p->addr, p->http, p->metrics, hps_strerror(rc), (long long)wc->http_threads,
                  (long long)wc->lookup_threads);
    /* Instance K takes http_port + K and metrics_port + K: instances
     * whose numbers differ by metrics_port - http_port share a port. */
    long gap = (long)wc->metrics_port - (long)wc->http_port;
    if (a->http_port < 0 && a->metrics_port < 0 && gap > 0 && a->instance >= gap)
        HPS_ERROR("instance %d's HTTP port %ld is instance %ld's metrics port: with more "
                  "than %ld instances, set [worker] metrics_port at least the number of "
                  "instances above http_port (%ld)",
                  a->instance, p->http, a->instance - gap, gap, (long)wc->http_port);
    return false;
}

static void kserve_models(const worker_t *w, hps_kserve_model_t *km, uint32_t **maxq,
                          uint32_t **dims, char (*vers)[24])
{
    for (size_t i = 0; i < w->conf->num_models; i++) {
        const hps_conf_model_t *c = &w->conf->models[i];
        maxq[i] = calloc(c->num_tables, sizeof(uint32_t));
        dims[i] = calloc(c->num_tables, sizeof(uint32_t));
        if (maxq[i] && dims[i])
            worker_describe_model(w, c, maxq[i], dims[i], vers[i], &km[i]);
    }
}

static int serve(worker_t *w, const struct args *a, const struct ports *p)
{
    const hps_conf_worker_t *wc = &w->conf->worker;
    hps_kserve_options_t o;
    hps_kserve_options_init(&o);
    o.http_address = p->addr;
    o.http_port = (int)p->http; /* in 0..65535: check_ports */
    o.metrics_port = (int)p->metrics;
    o.threads = (unsigned)wc->http_threads;
    o.lookup_threads = (unsigned)wc->lookup_threads;
    o.max_connections = (unsigned)wc->max_connections;
    o.header_timeout_ms = (unsigned)wc->header_timeout_ms;
    o.min_body_rate = (unsigned)wc->min_body_rate;
    o.max_body_bytes = (size_t)wc->max_body_size;
    o.max_keys_per_request = (size_t)wc->max_keys_per_request;
    o.cuda_shared_memory = true;            /* honoured in builds with CUDA only */
    o.model_capacity = HPS_CONF_MAX_MODELS; /* the INI may gain models (worker_sync_models) */
    hps_kserve_model_t km[HPS_CONF_MAX_MODELS];
    uint32_t *maxq[HPS_CONF_MAX_MODELS] = {0}, *dims[HPS_CONF_MAX_MODELS] = {0};
    char vers[HPS_CONF_MAX_MODELS][24];
    kserve_models(w, km, maxq, dims, vers);
    hps_kserve_backend_t be;
    worker_backend(w, &be);
    hps_kserve_t *srv = NULL;
    hps_err_t rc = hps_kserve_create(&o, km, w->conf->num_models, &be, &srv);
    pthread_mutex_lock(&w->sync_mu);
    w->srv = srv;
    pthread_mutex_unlock(&w->sync_mu);
    if (rc == 0)
        rc = hps_kserve_start(srv);
    int ex = HPS_WEXIT_OK;
    if (rc < 0) {
        /* taken since main() probed them, or another failure */
        check_listeners(wc, a, p, rc);
        ex = HPS_WEXIT_HTTP;
    } else {
        uint16_t hp = 0, mp = 0;
        hps_kserve_ports(srv, &hp, &mp);
        HPS_INFO("serving %zu model%s on http://%s:%u (metrics :%u), device %d, instance %d",
                 w->conf->num_models, w->conf->num_models == 1 ? "" : "s", o.http_address, hp, mp,
                 hps_client_device(w->client), a->instance);
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 50000000L};
        while (!g_stop) {
            nanosleep(&ts, NULL);
            if (g_hup) {
                g_hup = 0;
                HPS_WARN("SIGHUP ignored: hps-worker does not reload; send SIGHUP to "
                         "hps-coordinator, which re-reads the INI");
            }
            worker_follow_models(w);
        }
        HPS_INFO("shutting down");
        hps_kserve_stop(srv);
    }
    pthread_mutex_lock(&w->sync_mu);
    w->srv = NULL;
    pthread_mutex_unlock(&w->sync_mu);
    hps_kserve_destroy(srv);
    for (size_t i = 0; i < w->conf->num_models; i++) {
        free(maxq[i]);
        free(dims[i]);
    }
    return ex;
}

/* Descriptors kept beside the HTTP connections: the segment, its liveness
 * lock, CUDA, logs, listeners, and a margin for shared-memory regions. */
#define NOFILE_RESERVE 256

/* Descriptors: one per HTTP connection (max_connections, 1,024) and one per
 * registered system shared-memory region (up to 4,096), beside the segment
 * and CUDA.  The usual soft limit of 1,024 is below that, so take the hard
 * limit, as Redis and nginx do.  Where the limit stays below max_connections
 * + NOFILE_RESERVE, max_connections is lowered to fit (logged): accept()
 * would otherwise fail with EMFILE before the eviction of idle connections,
 * which starts near max_connections, could make room (scale audit: a normal
 * request waited 8.7 s behind 10,200 trickling connections). */
static void fit_nofile(hps_conf_worker_t *wc)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t was = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            HPS_WARN("open files limit stays at %llu: %s", (unsigned long long)was,
                     strerror(errno));
            rl.rlim_cur = was;
        }
    }
    uint64_t lim = (uint64_t)rl.rlim_cur, want = (uint64_t)wc->max_connections + NOFILE_RESERVE;
    if (rl.rlim_cur == RLIM_INFINITY || lim >= want)
        return;
    uint64_t fit = lim > 2 * NOFILE_RESERVE ? lim - NOFILE_RESERVE : lim / 2;
    fit = fit < 16 ? 16 : fit; /* max_connections' least value */
    HPS_WARN("open files limit %llu is below [worker] max_connections (%lld) + %d: serving at "
             "most %llu connections (idle and slow ones evicted first, as configured); raise the "
             "limit (ulimit -n, systemd LimitNOFILE) or lower max_connections",
             (unsigned long long)lim, (long long)wc->max_connections, NOFILE_RESERVE,
             (unsigned long long)fit);
    wc->max_connections = (int64_t)fit;
}

int main(int argc, char **argv)
{
    struct args a;
    int ex = parse_args(argc, argv, &a);
    if (ex)
        return ex;
    hps_log_init("hps-worker", a.log_level >= 0 ? (hps_log_level_t)a.log_level : HPS_LOG_INFO);
    char err[1024];
    hps_conf_t *conf;
    if (hps_conf_load(a.conf, &conf, err, sizeof(err)) < 0) {
        HPS_ERROR("%s", err);
        return HPS_WEXIT_USAGE;
    }
    /* --log-level, else [hps] log_level (as hps-coordinator) */
    hps_log_init("hps-worker",
                 a.log_level >= 0 ? (hps_log_level_t)a.log_level : conf->hps.log_level);
    struct ports ports;
    effective_ports(conf, &a, &ports);
    if ((ex = check_ports(a.conf, conf, &a, &ports))) {
        hps_conf_free(conf);
        return ex;
    }
    struct sigaction sa = {.sa_handler = on_signal}, hup = {.sa_handler = on_hup};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &hup, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* The listeners open once the client has attached (the front end
     * describes its models); a port that cannot open is told before. */
    if (!check_listeners(&conf->worker, &a, &ports, 0)) {
        hps_conf_free(conf);
        return HPS_WEXIT_HTTP;
    }
    fit_nofile(&conf->worker);
    hps_client_options_t co = {.device = a.device, .instance = a.instance};
    worker_t w = {.conf = conf, .sync_mu = PTHREAD_MUTEX_INITIALIZER};
    hps_err_t rc = hps_client_open_conf(conf, &co, &w.client);
    if (rc < 0) {
        HPS_ERROR("%s", hps_client_last_error());
        ex = HPS_WEXIT_RUNTIME;
    } else {
        ex = serve(&w, &a, &ports);
    }
    hps_client_close(w.client);
    hps_conf_free(conf);
    return ex;
}
