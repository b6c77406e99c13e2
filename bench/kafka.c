/*
 * bench-kafka -- Kafka online updates, in-process mock cluster
 * (rdkafka_mock.h: the real protocol over loopback TCP), dim 128.
 *
 * (a) Throughput: N updates are produced once; then, in R rounds, each
 *     with new consumer groups (every pass reads all N from offset 0):
 *       bare    a bare librdkafka consumer that reads every message and sums
 *               every 8th byte of its payload (the whole value is read);
 *       insert  the hps_kafka consumer applying them the way hps-coordinator's
 *               volatile layer does (hps_shmdb_upsert, then the table's
 *               update log) into an emptied table: every update inserts;
 *       update  the same into the table holding every key: every update
 *               overwrites a row (the common case: models are loaded first).
 *     Both consumers have the same librdkafka settings (the coordinator's,
 *     HugeCTR's), are timed on their own threads from their first message
 *     to their last (bare) or to the apply that completes N (hps), and the
 *     order of the passes rotates from round to round (the mock broker and
 *     the machine's load drift).  Target: median over the rounds of
 *     hps / bare (the same round's bare pass) >= 0.8, for insert and update.
 * (b) Freshness: one update of a probe key every 1000/F ms (value = probe
 *     number), while a reader process attached to the segment looks the key
 *     up ~1,000 times a second (hps_shmdb_lookup, like a worker); latency =
 *     first lookup that returns the new vector - produce call (one
 *     CLOCK_MONOTONIC, shared).  Target: p99 < 100 ms.
 *
 * usage: bench-kafka [--updates N] [--rounds R] [--probes P] [--quick]
 *        (defaults 200000 updates, 5 rounds, 300 probes; --quick: 20000, 3, 50)
 * Every wait has a deadline; progress goes to stderr.
 */
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/benchutil.h"
#include "hps/kafka.h"
#include "hps/shmdb.h"

#define DIM    128
#define TOPIC  "hps_et.bench.t0"
#define FTOPIC "hps_et.fresh.t0"
/* The mock broker keeps only a few MB per partition (older messages are
 * deleted, and a consumer starting later silently begins at the new log
 * start): enough partitions that N updates stay in the log. */
#define PARTS      64
#define BUFSZ      262144
#define PROBE_KEY  1000000000
#define MAX_PROBES 10000
#define DEADLINE_S 120.0

/* What a signal or an early exit must not leave behind (a program, not a
 * library: file-scope state is fine here). */
static char g_shm_object[128]; /* "/hps.<segment>", shm_unlink()ed */
static pid_t g_reader;         /* the reader process */

static void cleanup(void)
{
    if (g_shm_object[0])
        shm_unlink(g_shm_object);
    g_shm_object[0] = '\0';
    if (g_reader > 0)
        kill(g_reader, SIGKILL);
    g_reader = 0;
}

/* SIGINT, SIGTERM, SIGHUP: remove the segment, stop the reader, then die of
 * the signal (async-signal-safe calls only). */
static void on_signal(int sig)
{
    cleanup();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void cleanup_and_exit(int code)
{
    cleanup();
    exit(code);
}

static void die(const char *what)
{
    fprintf(stderr, "bench-kafka: %s\n", what);
    cleanup_and_exit(1);
}

/* ---- Clients --------------------------------------------------------------- */

static void set(rd_kafka_conf_t *c, const char *k, const char *v)
{
    char err[512];
    if (rd_kafka_conf_set(c, k, v, err, sizeof(err)) != RD_KAFKA_CONF_OK)
        die(err);
}

static _Atomic size_t g_delivered, g_failed;

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    (void)opaque;
    if (m->err)
        g_failed++;
    else
        g_delivered++;
}

/* A producer; linger_ms 0 for the freshness probes. */
static rd_kafka_t *producer(const char *bootstrap, const char *linger_ms)
{
    char err[512];
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    set(c, "bootstrap.servers", bootstrap);
    set(c, "message.max.bytes", "1000000");
    set(c, "linger.ms", linger_ms);
    rd_kafka_conf_set_dr_msg_cb(c, on_delivery);
    rd_kafka_t *p = rd_kafka_new(RD_KAFKA_PRODUCER, c, err, sizeof(err));
    if (!p)
        die(err);
    return p;
}

static void produce(rd_kafka_t *p, const char *topic, int part, const void *buf, size_t len)
{
    while (rd_kafka_producev(p, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(part),
                             RD_KAFKA_V_VALUE((void *)buf, len),
                             RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                             RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR__QUEUE_FULL)
        rd_kafka_poll(p, 10);
    rd_kafka_poll(p, 0);
}

/* One record: key, then DIM floats v + d. */
static size_t put_record(uint8_t *dst, int64_t key, float v)
{
    float row[DIM];
    for (int d = 0; d < DIM; d++)
        row[d] = v + (float)d;
    memcpy(dst, &key, 8);
    memcpy(dst + 8, row, sizeof(row));
    return 8 + sizeof(row);
}

/* N updates (keys 0..N-1) in messages of up to BUFSZ bytes, round robin
 * over the partitions.  Returns the messages delivered. */
static size_t produce_all(const char *bootstrap, size_t n)
{
    rd_kafka_t *p = producer(bootstrap, "5");
    size_t per = (BUFSZ - 8) / (8 + DIM * 4), msgs = 0;
    uint8_t *buf = malloc(BUFSZ);
    const uint32_t hdr[2] = {HPS_KAFKA_MAGIC, DIM * 4};
    memcpy(buf, hdr, 8);
    for (size_t i = 0; i < n; msgs++) {
        size_t len = 8;
        for (size_t j = 0; j < per && i < n; j++, i++)
            len += put_record(buf + len, (int64_t)i, (float)i);
        produce(p, TOPIC, (int)(msgs % PARTS), buf, len);
    }
    rd_kafka_flush(p, 60000);
    rd_kafka_destroy(p);
    free(buf);
    if (g_failed || g_delivered != msgs) {
        fprintf(stderr, "bench-kafka: %zu of %zu messages delivered, %zu failed\n",
                (size_t)g_delivered, msgs, (size_t)g_failed);
        cleanup_and_exit(1);
    }
    return msgs;
}

/* ---- (a) bare consumer ------------------------------------------------------- */

/* A plain librdkafka consumer with hps_kafka_consumer_create()'s settings
 * (hps_kafka_consumer_configure) for receive_buffer_size BUFSZ and the
 * metadata refresh interval that ours_start() passes; the group is the
 * caller's. */
static rd_kafka_t *bare_consumer(const char *bootstrap, const char *group)
{
    char err[512];
    hps_kafka_consumer_opts_t opts = {.brokers = bootstrap,
                                      .group = group,
                                      .metadata_refresh_interval_ms = 1000,
                                      .receive_buffer_size = BUFSZ};
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    if (hps_kafka_consumer_configure(&opts, c, err, sizeof(err)) < 0)
        die(err);
    rd_kafka_t *k = rd_kafka_new(RD_KAFKA_CONSUMER, c, err, sizeof(err));
    if (!k)
        die(err);
    rd_kafka_poll_set_consumer(k);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, TOPIC, RD_KAFKA_PARTITION_UA);
    rd_kafka_subscribe(k, l);
    rd_kafka_topic_partition_list_destroy(l);
    return k;
}

/* Every 8th byte of a payload, summed: the whole value comes through the
 * caches, as it does for the hps consumer's parser and copy. */
static uint64_t touch(const uint8_t *p, size_t len)
{
    uint64_t sum = 0;
    for (size_t i = 0; i + 8 <= len; i += 8)
        sum += p[i];
    return sum + (len ? p[len - 1] : 0);
}

/* Seconds from the first to the last of msgs messages. */
static double bare(const char *bootstrap, const char *group, size_t msgs)
{
    rd_kafka_t *c = bare_consumer(bootstrap, group);
    size_t got = 0;
    double t0 = 0, start = bench_now_s();
    volatile uint64_t sink = 0;
    while (got < msgs) {
        if (bench_now_s() - start > DEADLINE_S) {
            fprintf(stderr, "bench-kafka: bare consumer got %zu of %zu messages\n", got, msgs);
            cleanup_and_exit(1);
        }
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 100);
        if (!m)
            continue;
        if (m->err && m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
            fprintf(stderr, "bench-kafka: bare consumer: %s\n", rd_kafka_message_errstr(m));
        if (!m->err && m->len) {
            if (!got++)
                t0 = bench_now_s();
            sink += touch(m->payload, m->len);
        }
        rd_kafka_message_destroy(m);
    }
    double dt = bench_now_s() - t0;
    rd_kafka_consumer_close(c);
    rd_kafka_destroy(c);
    return dt;
}

/* ---- hps consumer (coordinator's volatile layer) ---------------------------- */

typedef struct ours {
    hps_shmdb_t *db;
    uint32_t id;
    hps_kafka_consumer_t *cons;
    pthread_t thread;
    atomic_int stop;
    int fetch_wait_ms; /* 0: librdkafka's default */
    /* Throughput passes, written on the consumer thread: */
    size_t target;         /* updates of the pass */
    _Atomic size_t done;   /* applied in this pass */
    _Atomic double t0, t1; /* first message (resolve), the apply reaching target */
} ours_t;

static bool resolve(void *ctx, const char *topic, void **ret_sink, uint32_t *ret_vs,
                    bool *ret_refuse_nonfinite)
{
    ours_t *o = ctx;
    (void)topic;
    if (o->t0 == 0) /* called at the topic's first message */
        o->t0 = bench_now_s();
    *ret_sink = ctx;
    *ret_vs = DIM * 4;
    *ret_refuse_nonfinite = false;
    return true;
}

static hps_err_t apply(void *ctx, void *sink, size_t n, const void *keys, const float *values)
{
    ours_t *o = ctx;
    (void)sink;
    hps_err_t rc = hps_shmdb_upsert(o->db, o->id, n, keys, values, NULL);
    if (rc == 0)
        rc = hps_shmdb_updlog_append(o->db, o->id, n, keys);
    if (rc == 0 && (o->done += n) >= o->target && o->t1 == 0)
        o->t1 = bench_now_s();
    return rc;
}

static void *run(void *arg)
{
    ours_t *o = arg;
    hps_kafka_consumer_run(o->cons, &o->stop);
    return NULL;
}

/* Start the hps consumer, group `group`, HugeCTR's defaults otherwise. */
static void ours_start(const char *bootstrap, const char *group, const char *model, ours_t *o)
{
    const char *filters[] = {model};
    hps_kafka_consumer_opts_t opts = {
        .brokers = bootstrap,
        .group = group,
        .filters = filters,
        .num_filters = 1,
        .key_bytes = 8,
        .metadata_refresh_interval_ms = 1000,
        .receive_buffer_size = BUFSZ,
        .poll_timeout_ms = 500,
        .max_batch_size = 8192,
        .failure_backoff_ms = 50,
        .max_commit_interval = 32,
        .resolve = resolve,
        .apply = apply,
        .ctx = o,
        .fetch_wait_max_ms = o->fetch_wait_ms,
    };
    char err[512];
    atomic_store(&o->stop, 0);
    o->done = 0;
    o->t0 = o->t1 = 0;
    if (hps_kafka_consumer_create(&opts, &o->cons, err, sizeof(err)) < 0)
        die(err);
    pthread_create(&o->thread, NULL, run, o);
}

static void ours_stop(ours_t *o)
{
    atomic_store(&o->stop, 1);
    pthread_join(o->thread, NULL);
    hps_kafka_consumer_destroy(o->cons);
}

/* Seconds from the first message to the apply that completes n (stamped
 * on the consumer thread; this one only waits, in 5 ms naps). */
static double ours(const char *bootstrap, const char *group, size_t n, ours_t *o)
{
    o->target = n;
    ours_start(bootstrap, group, "bench", o);
    double start = bench_now_s();
    while (o->t1 == 0) {
        if (bench_now_s() - start > DEADLINE_S) {
            fprintf(stderr, "bench-kafka: hps consumer applied %zu of %zu\n", (size_t)o->done, n);
            cleanup_and_exit(1);
        }
        usleep(5000);
    }
    double dt = o->t1 - o->t0;
    ours_stop(o);
    return dt;
}

/* ---- (b) freshness ------------------------------------------------------------ */

/* Shared between the bench and its reader process (MAP_SHARED). */
struct fresh {
    _Atomic int go, done, quit;
    _Atomic uint32_t round;
    _Atomic size_t probes;
    _Atomic uint64_t lookups;
    double sent[MAX_PROBES]; /* produce time of probe i */
    double seen[MAX_PROBES]; /* first lookup returning probe i's vector */
};

/* Reader process: every millisecond one lookup request of all probe keys
 * (key PROBE_KEY + i carries DIM floats 1e6 + round * MAX_PROBES + i + d). */
static void reader(const char *seg, uint32_t id, struct fresh *f)
{
    hps_shmdb_t *db;
    g_shm_object[0] = '\0'; /* the parent's to remove */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the bench */
    if (getppid() == 1)
        _exit(2);
    if (hps_shmdb_attach(seg, NULL, &db) < 0)
        _exit(2);
    int64_t *keys = malloc(MAX_PROBES * sizeof(int64_t));
    float *v = malloc((size_t)MAX_PROBES * DIM * sizeof(float));
    uint8_t *found = malloc(MAX_PROBES);
    for (int i = 0; i < MAX_PROBES; i++)
        keys[i] = PROBE_KEY + i;
    for (;;) {
        while (!f->go && !f->quit)
            usleep(1000);
        if (f->quit)
            break;
        size_t np = f->probes;
        double base = 1e6 + (double)f->round * MAX_PROBES;
        while (!f->done) {
            hps_shmdb_lookup(db, id, np, keys, v, found, NULL);
            f->lookups++;
            double t = bench_now_s();
            for (size_t i = 0; i < np; i++)
                if (found[i] && f->seen[i] == 0 && v[i * DIM] == (float)(base + (double)i))
                    f->seen[i] = t;
            usleep(1000);
        }
        f->go = 0;
        f->done = 0;
    }
    hps_shmdb_detach(db);
    _exit(0);
}

/* One round: produce probe i (key PROBE_KEY + i) every 20 ms, while the
 * reader looks them up; returns the latencies (ms), sorted. */
static size_t probe(const char *bootstrap, struct fresh *f, uint32_t round, size_t probes,
                    double *lat)
{
    rd_kafka_t *p = producer(bootstrap, "0");
    uint8_t buf[8 + 8 + DIM * 4];
    const uint32_t hdr[2] = {HPS_KAFKA_MAGIC, DIM * 4};
    memcpy(buf, hdr, 8);
    memset(f->seen, 0, sizeof(f->seen));
    f->round = round;
    f->probes = probes;
    f->lookups = 0;
    f->go = 1;
    double base = 1e6 + (double)round * MAX_PROBES;
    for (size_t i = 0; i < probes; i++) {
        put_record(buf + 8, PROBE_KEY + (int64_t)i, (float)(base + (double)i));
        f->sent[i] = bench_now_s();
        produce(p, FTOPIC, 0, buf, sizeof(buf));
        double until = f->sent[i] + 0.02; /* 50 probes/s */
        while (bench_now_s() < until)
            rd_kafka_poll(p, 1);
    }
    usleep(1000000); /* the last probes' grace */
    f->done = 1;
    while (f->go)
        usleep(1000);
    rd_kafka_flush(p, 10000);
    rd_kafka_destroy(p);
    size_t n = 0;
    for (size_t i = 0; i < probes; i++)
        if (f->seen[i] > 0)
            lat[n++] = (f->seen[i] - f->sent[i]) * 1e3;
    qsort(lat, n, sizeof(*lat), bench_cmp_double);
    return n;
}

/* Freshness with the hps consumer at a fetch.wait.max.ms (0 = default). */
static void freshness(const char *bs, ours_t *o, struct fresh *f, uint32_t round, size_t probes,
                      int fetch_wait_ms)
{
    char group[64];
    snprintf(group, sizeof(group), "bench.fresh.%u", round);
    o->fetch_wait_ms = fetch_wait_ms;
    ours_start(bs, group, "fresh", o);
    /* Group join and assignment, and the earlier rounds' probes read, before
     * the first probe: a fixed 3 s wait was sometimes shorter than the join,
     * and a whole setting then saw 0 of its probes. */
    for (double t0 = bench_now_s(); !hps_kafka_consumer_caught_up(o->cons); usleep(10000))
        if (bench_now_s() - t0 > DEADLINE_S) {
            fprintf(stderr, "bench-kafka: freshness consumer not assigned after %d s\n",
                    (int)DEADLINE_S);
            cleanup_and_exit(1);
        }
    double t = bench_now_s();
    double *lat = calloc(probes, sizeof(double));
    size_t got = probe(bs, f, round, probes, lat);
    t = bench_now_s() - t;
    ours_stop(o);
    double p50 = got ? lat[bench_rank(got, 0.50)] : -1.0;
    double p99 = got ? lat[bench_rank(got, 0.99)] : -1.0;
    char fw[32] = "default (500)";
    if (fetch_wait_ms)
        snprintf(fw, sizeof(fw), "%d", fetch_wait_ms);
    printf("  freshness, fetch.wait.max.ms %-13s: %zu/%zu seen, %.0f lookups/s; p50 %.2f ms "
           "p99 %.2f ms max %.2f ms (target p99 < 100 ms) %s\n",
           fw, got, probes, (double)f->lookups / t, p50, p99, got ? lat[got - 1] : -1.0,
           got == probes && p99 < 100 ? "PASS" : "FAIL");
    fflush(stdout);
    free(lat);
}

/* ---- main ---------------------------------------------------------------------- */

static void parse(int argc, char **argv, size_t *n, size_t *rounds, size_t *probes)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            *n = 20000;
            *rounds = 3;
            *probes = 50;
        } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
            *rounds = strtoull(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--updates") && i + 1 < argc) {
            *n = strtoull(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--probes") && i + 1 < argc) {
            *probes = strtoull(argv[++i], NULL, 10);
        } else {
            die("usage: bench-kafka [--updates N] [--rounds R] [--probes P] [--quick]");
        }
    }
    if (*probes > MAX_PROBES || *probes == 0 || *n == 0 || *rounds == 0 || *rounds > 100)
        die("--probes must be 1..10000, --rounds 1..100, --updates > 0");
}

static void make_segment(const char *seg, size_t n, ours_t *o)
{
    hps_shmdb_opts_t so = {.size_bytes = (uint64_t)n * (DIM * 4 + 64) * 2 + (128ull << 20),
                           .allocation_rate = 16ull << 20};
    hps_shmdb_proc_opts_t po = {.role = HPS_ROLE_COORDINATOR, .device = -1};
    if (hps_shmdb_create(seg, &so, &po, &o->db) < 0)
        die("cannot create the segment");
    hps_table_spec_t ts = {.model = "bench",
                           .table = "t0",
                           .dim = DIM,
                           .key_bytes = 8,
                           .num_partitions = 8,
                           .overflow_margin = UINT64_MAX,
                           .overflow_resolution_target = 0.8,
                           .expected_rows = n};
    if (hps_shmdb_table_create(o->db, &ts, &o->id) < 0 ||
        hps_shmdb_updlog_init(o->db, o->id, 65536) < 0)
        die("cannot create the table");
}

static double median(const double *v, size_t n)
{
    double *c = malloc(n * sizeof(*c));
    memcpy(c, v, n * sizeof(*c));
    qsort(c, n, sizeof(*c), bench_cmp_double);
    double m = n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
    free(c);
    return m;
}

static void install_signals(void)
{
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

enum { BARE, INSERT, UPDATE };

/* One pass; groups are new for every pass so that each reads from offset 0. */
static double pass(const char *bs, int kind, size_t r, size_t n, size_t msgs, ours_t *o)
{
    char group[64];
    static const char *const names[] = {"bare", "insert", "update"};
    snprintf(group, sizeof(group), "bench.%s.%zu", names[kind], r);
    fprintf(stderr, "bench-kafka: round %zu: %s...\n", r + 1, names[kind]);
    if (kind == BARE)
        return bare(bs, group, msgs);
    if (kind == INSERT && hps_shmdb_clear(o->db, o->id) < 0)
        die("cannot clear the table");
    return ours(bs, group, n, o);
}

/* R rounds of the three passes, the order rotating: the update pass always
 * after the insert pass (it needs the keys). */
static void throughput(const char *bs, size_t n, size_t msgs, size_t rounds, ours_t *o)
{
    static const int order[3][3] = {
        {BARE, INSERT, UPDATE}, {INSERT, UPDATE, BARE}, {INSERT, BARE, UPDATE}};
    double *t = calloc(rounds * 3, sizeof(double)), *ratio = calloc(rounds * 2, sizeof(double));
    double *rate = calloc(rounds * 3, sizeof(double));
    for (size_t r = 0; r < rounds; r++) {
        for (int k = 0; k < 3; k++) {
            int kind = order[r % 3][k];
            t[r * 3 + kind] = pass(bs, kind, r, n, msgs, o);
        }
        for (int k = 0; k < 3; k++)
            rate[k * rounds + r] = (double)n / t[r * 3 + k];
        ratio[r] = t[r * 3 + BARE] / t[r * 3 + INSERT];
        ratio[rounds + r] = t[r * 3 + BARE] / t[r * 3 + UPDATE];
        printf("  round %2zu: bare %7.3f s %9.0f/s | hps insert %7.3f s %9.0f/s %.2fx | "
               "hps update %7.3f s %9.0f/s %.2fx\n",
               r + 1, t[r * 3 + BARE], rate[r], t[r * 3 + INSERT], rate[rounds + r], ratio[r],
               t[r * 3 + UPDATE], rate[2 * rounds + r], ratio[rounds + r]);
        fflush(stdout);
    }
    double mi = median(ratio, rounds), mu = median(ratio + rounds, rounds);
    printf("  median    bare librdkafka (reads every payload) %10.0f updates/s\n",
           median(rate, rounds));
    printf("  median    hps insert (VDB upsert + update log)  %10.0f updates/s = %.2fx bare\n",
           median(rate + rounds, rounds), mi);
    printf("  median    hps update (VDB upsert + update log)  %10.0f updates/s = %.2fx bare\n",
           median(rate + 2 * rounds, rounds), mu);
    printf("  (x = median over rounds of bare time / hps time in the same round)\n");
    printf("  target >= 0.8x: insert %s, update %s\n", mi >= 0.8 ? "PASS" : "MISS",
           mu >= 0.8 ? "PASS" : "MISS");
    fflush(stdout);
    free(t);
    free(ratio);
    free(rate);
}

int main(int argc, char **argv)
{
    size_t n = 200000, rounds = 5, probes = 300;
    parse(argc, argv, &n, &rounds, &probes);
    char seg[64];
    snprintf(seg, sizeof(seg), "bench-kafka-%d", (int)getpid());
    snprintf(g_shm_object, sizeof(g_shm_object), "/hps.%s", seg); /* hps_shmdb_unlink()'s name */
    install_signals();
    atexit(cleanup);
    ours_t o = {0};
    make_segment(seg, n, &o);
    struct fresh *f =
        mmap(NULL, sizeof(*f), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (f == MAP_FAILED)
        die("mmap");
    fflush(NULL);
    pid_t rpid = fork(); /* before any librdkafka thread exists */
    if (rpid == 0)
        reader(seg, o.id, f);
    g_reader = rpid;

    char err[256];
    rd_kafka_conf_t *mc_conf = rd_kafka_conf_new();
    rd_kafka_conf_set(mc_conf, "log_level", "2", err, sizeof(err));
    rd_kafka_t *host = rd_kafka_new(RD_KAFKA_PRODUCER, mc_conf, err, sizeof(err));
    rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(host, 1);
    rd_kafka_mock_topic_create(mc, TOPIC, PARTS, 1);
    rd_kafka_mock_topic_create(mc, FTOPIC, 1, 1);
    const char *bs = rd_kafka_mock_cluster_bootstraps(mc);

    fprintf(stderr, "bench-kafka: producing %zu updates...\n", n);
    double tp = bench_now_s();
    size_t msgs = produce_all(bs, n);
    tp = bench_now_s() - tp;
    printf("bench-kafka: %zu updates dim %d in %zu messages (%d partitions, mock cluster), "
           "%zu rounds\n",
           n, DIM, msgs, PARTS, rounds);
    printf("  both consumers: the coordinator's librdkafka settings, a new group per pass, "
           "timed from the first message to the last one read (bare) or applied (hps)\n");
    printf("  produce   %8.3f s %10.0f updates/s\n", tp, n / tp);
    throughput(bs, n, msgs, rounds, &o);

    fprintf(stderr, "bench-kafka: freshness, %zu probes per setting...\n", probes);
    freshness(bs, &o, f, 1, probes, 0);
    freshness(bs, &o, f, 2, probes, 100);
    freshness(bs, &o, f, 3, probes, 10); /* hps-coordinator's default fetch_wait_max_ms */
    f->quit = 1;
    int st;
    waitpid(rpid, &st, 0);
    g_reader = 0;
    hps_shmdb_detach(o.db);
    hps_shmdb_unlink(seg);
    g_shm_object[0] = '\0';
    rd_kafka_mock_cluster_destroy(mc);
    rd_kafka_destroy(host);
    return 0;
}
