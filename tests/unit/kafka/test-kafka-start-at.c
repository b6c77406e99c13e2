/*
 * test-kafka-start-at.c -- hps_kafka_consumer_start_at(c, from)
 * (coordinator/kafka-consumer.c) against an in-process librdkafka mock
 * cluster (rdkafka_mock.h: the real Kafka protocol over loopback TCP).
 *
 * hps-coordinator fills its volatile DB from the persistent DB, then runs
 * two consumers: the persistent layer's (from, "P") and the volatile
 * layer's (c, "V"), both started at the same moment.  V must start at the
 * offsets P's group had committed when the volatile DB was filled, i.e. AS
 * OF THE start_at CALL (a snapshot), so that V reads again every update the
 * persistent DB did not hold then.  It used to read P's committed offsets
 * lazily, at V's first assignment; by then P could already have applied and
 * committed newer messages, so V started past them and never applied them
 * (the volatile DB silently missed updates).
 *
 *   snapshot_before_from_runs  nothing committed at the call; P then applies
 *                              and commits all N messages; V must still apply
 *                              all N (the lazy read made it start at the end
 *                              and apply none)
 *   snapshot_at_committed      P's group had committed offset K on partition
 *                              0 (none on partition 1) at the call: V starts
 *                              exactly at K there (applies the messages from K
 *                              on, none before) and at the beginning of
 *                              partition 1, although P commits the ends before
 *                              V runs
 *
 *   offset_reset_counted       a committed offset the broker does not have:
 *                              read again from the beginning, and counted
 *                              as an offset reset (messages may have been
 *                              skipped); a partition never committed is not
 *   legacy_group_offsets       the group's earlier name (legacy_group) had
 *                              committed K on partition 0: a consumer whose
 *                              group has no offsets starts there (and at the
 *                              beginning of partition 1), where it used to
 *                              replay all N; once its own group committed,
 *                              a restart goes on from its own offsets
 *   start_at_legacy            start_at's from has no offsets, its legacy
 *                              group K on partition 0: the snapshot takes K
 *   huge_batch_size            max_batch_size 2^31 - 1: every message applied
 *
 * Offsets are taken from the producer's delivery reports, not assumed.  The
 * waits are deadlines on the consumers' own signals (caught_up, counters),
 * never fixed sleeps.  Skipped (exit 77) in a build without librdkafka.
 */
#include "hps_build_config.h"

#if !HPS_HAVE_KAFKA

#include <stdio.h>

int main(void)
{
    printf("1..0 # SKIP built without librdkafka\n");
    return 77;
}

#else

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "hps/kafka.h"

#define DIM        4
#define PARTS      2
#define N          50 /* messages, one update each: a few KB per partition */
#define KEY_BASE   1000
#define DEADLINE_S 30.0 /* per wait; a loaded 2-core machine needs a few s at most */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void nap_ms(int ms)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- one layer's sink: which keys its consumer applied ------------------- */

typedef struct sink {
    pthread_mutex_t mu;
    const char *topic; /* the only topic resolve() accepts */
    unsigned seen[N];  /* times key KEY_BASE + i was applied */
    size_t foreign;    /* keys out of range or values not matching their key */
} sink_t;

static bool resolve(void *ctx, const char *topic, void **ret_sink, uint32_t *ret_value_size,
                    bool *ret_refuse_nonfinite)
{
    sink_t *s = ctx;
    if (strcmp(topic, s->topic) != 0)
        return false;
    *ret_sink = s;
    *ret_value_size = DIM * sizeof(float);
    *ret_refuse_nonfinite = false;
    return true;
}

static hps_err_t apply(void *ctx, void *sinkp, size_t n, const void *keys, const float *values)
{
    sink_t *s = sinkp;
    (void)ctx;
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < n; i++) {
        int64_t k;
        memcpy(&k, (const uint8_t *)keys + i * 8, 8);
        int64_t idx = k - KEY_BASE;
        if (idx < 0 || idx >= N || values[i * DIM] != (float)k)
            s->foreign++;
        else
            s->seen[idx]++;
    }
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static void on_event(void *ctx, int level, const char *msg)
{
    sink_t *s = ctx;
    if (level <= 1) /* errors and warnings only: TAP comments on stderr */
        fprintf(stderr, "# %s consumer: %s\n", s->topic, msg);
}

/* ---- the world: mock cluster, topic, produced messages, consumers -------- */

typedef struct world {
    rd_kafka_t *host; /* the mock cluster's handle (a throwaway producer) */
    rd_kafka_mock_cluster_t *mc;
    char bs[256];
    char topic[HPS_KAFKA_TOPIC_MAX];
    int32_t part[N]; /* where message i (key KEY_BASE + i) landed */
    int64_t off[N];
    int delivered, failed;
    char group_p[64], group_v[64], legacy_p[64], legacy_v[64];
    sink_t sp, sv;
    hps_kafka_consumer_t *p, *v;
} world_t;

static int setup(void **state)
{
    world_t *w = calloc(1, sizeof(*w));
    if (!w)
        return -1;
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "2", err, sizeof(err));
    w->host = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!w->host) {
        fprintf(stderr, "# rd_kafka_new: %s\n", err);
        free(w);
        return -1;
    }
    w->mc = rd_kafka_mock_cluster_new(w->host, 1);
    if (!w->mc || hps_kafka_topic_name("m", "t", w->topic, sizeof(w->topic)) != 0 ||
        rd_kafka_mock_topic_create(w->mc, w->topic, PARTS, 1) != 0) {
        if (w->mc)
            rd_kafka_mock_cluster_destroy(w->mc);
        rd_kafka_destroy(w->host);
        free(w);
        return -1;
    }
    snprintf(w->bs, sizeof(w->bs), "%s", rd_kafka_mock_cluster_bootstraps(w->mc));
    /* Groups unique to the test (each has its own cluster anyway). */
    static int serial;
    serial++;
    snprintf(w->group_p, sizeof(w->group_p), "hps.persistent.t%d", serial);
    snprintf(w->group_v, sizeof(w->group_v), "hps.volatile.t%d", serial);
    snprintf(w->legacy_p, sizeof(w->legacy_p), "hps.persistent.legacy%d", serial);
    snprintf(w->legacy_v, sizeof(w->legacy_v), "hps.volatile.legacy%d", serial);
    pthread_mutex_init(&w->sp.mu, NULL);
    pthread_mutex_init(&w->sv.mu, NULL);
    w->sp.topic = w->sv.topic = w->topic;
    *state = w;
    return 0;
}

static int teardown(void **state)
{
    world_t *w = *state;
    /* V first: with the old lazy code it reads through P's handle. */
    hps_kafka_consumer_destroy(w->v);
    hps_kafka_consumer_destroy(w->p);
    rd_kafka_mock_cluster_destroy(w->mc);
    rd_kafka_destroy(w->host);
    pthread_mutex_destroy(&w->sp.mu);
    pthread_mutex_destroy(&w->sv.mu);
    free(w);
    return 0;
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    world_t *w = opaque;
    intptr_t i = (intptr_t)m->_private;
    (void)rk;
    if (m->err || i < 0 || i >= N) {
        w->failed++;
        return;
    }
    w->part[i] = m->partition;
    w->off[i] = m->offset;
    w->delivered++;
}

/* N messages in HugeCTR's format, one update each (key KEY_BASE + i, value
 * {k, k+1, k+2, k+3}), message i to partition i % PARTS. */
static void produce(world_t *w)
{
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    assert_int_equal(rd_kafka_conf_set(conf, "bootstrap.servers", w->bs, err, sizeof(err)),
                     RD_KAFKA_CONF_OK);
    assert_int_equal(rd_kafka_conf_set(conf, "linger.ms", "0", err, sizeof(err)), RD_KAFKA_CONF_OK);
    rd_kafka_conf_set_opaque(conf, w);
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_t *pr = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    assert_non_null(pr);
    for (intptr_t i = 0; i < N; i++) {
        uint8_t buf[HPS_KAFKA_HEADER_SIZE + 8 + DIM * sizeof(float)];
        uint32_t hdr[2] = {HPS_KAFKA_MAGIC, DIM * sizeof(float)};
        int64_t k = KEY_BASE + i;
        float v[DIM] = {(float)k, (float)k + 1, (float)k + 2, (float)k + 3};
        memcpy(buf, hdr, sizeof(hdr));
        memcpy(buf + 8, &k, 8);
        memcpy(buf + 16, v, sizeof(v));
        hps_kafka_msg_t m; /* the consumer's own parser accepts it */
        assert_int_equal(hps_kafka_parse(buf, sizeof(buf), 0, 8, DIM * sizeof(float), &m),
                         HPS_KAFKA_OK);
        rd_kafka_resp_err_t e = rd_kafka_producev(
            pr, RD_KAFKA_V_TOPIC(w->topic), RD_KAFKA_V_PARTITION((int32_t)(i % PARTS)),
            RD_KAFKA_V_VALUE(buf, sizeof(buf)), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_OPAQUE((void *)i), RD_KAFKA_V_END);
        assert_int_equal(e, RD_KAFKA_RESP_ERR_NO_ERROR);
    }
    rd_kafka_flush(pr, 30000);
    assert_int_equal(rd_kafka_outq_len(pr), 0);
    rd_kafka_destroy(pr);
    assert_int_equal(w->failed, 0);
    assert_int_equal(w->delivered, N);
}

/* A bare consumer handle of group (joins nothing) to commit or read offsets
 * as that group, as any other member would. */
static rd_kafka_t *group_handle(const world_t *w, const char *group)
{
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    assert_int_equal(rd_kafka_conf_set(conf, "bootstrap.servers", w->bs, err, sizeof(err)),
                     RD_KAFKA_CONF_OK);
    assert_int_equal(rd_kafka_conf_set(conf, "group.id", group, err, sizeof(err)),
                     RD_KAFKA_CONF_OK);
    assert_int_equal(rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof(err)),
                     RD_KAFKA_CONF_OK);
    rd_kafka_conf_set(conf, "log_level", "2", err, sizeof(err));
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
    assert_non_null(rk);
    return rk;
}

static void close_handle(rd_kafka_t *rk)
{
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
}

/* Group's committed offsets of every partition into ret (< 0: none). */
static void committed(const world_t *w, const char *group, int64_t ret[PARTS])
{
    rd_kafka_t *rk = group_handle(w, group);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(PARTS);
    for (int32_t p = 0; p < PARTS; p++)
        rd_kafka_topic_partition_list_add(l, w->topic, p);
    assert_int_equal(rd_kafka_committed(rk, l, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
    for (int32_t p = 0; p < PARTS; p++) {
        assert_int_equal(l->elems[p].err, RD_KAFKA_RESP_ERR_NO_ERROR);
        ret[l->elems[p].partition] = l->elems[p].offset;
    }
    rd_kafka_topic_partition_list_destroy(l);
    close_handle(rk);
}

/* max_batch_size of the consumers made next (test_huge_batch_size). */
static int64_t g_max_batch = 16;

/* A consumer of group (legacy: its legacy_group, or NULL) into s. */
static void consumer_of(world_t *w, const char *group, const char *legacy, sink_t *s,
                        hps_kafka_consumer_t **ret)
{
    static const char *const filters[] = {"m"};
    hps_kafka_consumer_opts_t o = {
        .brokers = w->bs,
        .group = group,
        .filters = filters,
        .num_filters = 1,
        .key_bytes = 8,
        .metadata_refresh_interval_ms = 200,
        .receive_buffer_size = 65536,
        .poll_timeout_ms = 50,
        .max_batch_size = g_max_batch,
        .failure_backoff_ms = 10,
        .max_commit_interval = 8,
        .resolve = resolve,
        .apply = apply,
        .event = on_event,
        .ctx = s,
        .fetch_wait_max_ms = 10,
        .assign_all = true,
        .legacy_group = legacy,
    };
    char err[256] = "";
    hps_err_t rc = hps_kafka_consumer_create(&o, ret, err, sizeof(err));
    if (rc != 0)
        fprintf(stderr, "# hps_kafka_consumer_create: %s\n", err);
    assert_int_equal(rc, 0);
}

static void consumer(world_t *w, const char *group, sink_t *s, hps_kafka_consumer_t **ret)
{
    consumer_of(w, group, NULL, s, ret);
}

typedef struct runner {
    hps_kafka_consumer_t *c;
    atomic_int stop; /* run()'s stop flag */
} runner_t;

static void *run_thread(void *arg)
{
    runner_t *r = arg;
    hps_kafka_consumer_run(r->c, &r->stop);
    return NULL;
}

/* Run c on a thread until it has caught up (every partition read to its
 * end and applied) with at least min_applied updates applied, or
 * DEADLINE_S; stop it (run() commits what it applied) and join.  No
 * assertion while the thread runs.  True when the condition was met. */
static bool run_until_caught_up(hps_kafka_consumer_t *c, uint64_t min_applied)
{
    runner_t r = {.c = c};
    atomic_init(&r.stop, 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, run_thread, &r), 0);
    bool ok = false;
    for (double until = now_s() + DEADLINE_S; !ok && now_s() < until; nap_ms(10)) {
        hps_kafka_stats_t st;
        hps_kafka_consumer_stats(c, &st);
        ok = hps_kafka_consumer_caught_up(c) && st.applied >= min_applied;
    }
    atomic_store_explicit(&r.stop, 1, memory_order_release);
    pthread_join(th, NULL);
    return ok;
}

/* s applied each update i at most once, those with want[i] exactly. */
static void assert_applied(sink_t *s, const bool want[N])
{
    pthread_mutex_lock(&s->mu);
    size_t foreign = s->foreign;
    unsigned seen[N];
    memcpy(seen, s->seen, sizeof(seen));
    pthread_mutex_unlock(&s->mu);
    assert_int_equal(foreign, 0);
    int missing = 0, extra = 0;
    for (int i = 0; i < N; i++) {
        if (want[i] && seen[i] == 0)
            missing++;
        if (!want[i] && seen[i] != 0)
            extra++;
    }
    if (missing || extra)
        fprintf(stderr, "# %d wanted updates not applied, %d unwanted ones applied\n", missing,
                extra);
    assert_int_equal(missing, 0);
    assert_int_equal(extra, 0);
}

/* ---- tests ----------------------------------------------------------------- */

/* Nothing committed at the call; P applies and commits everything before V
 * runs: V must still start at the beginning and apply all N. */
static void test_snapshot_before_from_runs(void **state)
{
    world_t *w = *state;
    produce(w);
    consumer(w, w->group_p, &w->sp, &w->p);
    consumer(w, w->group_v, &w->sv, &w->v);
    hps_kafka_consumer_start_at(w->v, w->p); /* snapshot: nothing committed yet */

    /* P runs first: applies all N, commits them (at the latest on stop). */
    assert_true(run_until_caught_up(w->p, N));
    hps_kafka_stats_t st;
    hps_kafka_consumer_stats(w->p, &st);
    assert_int_equal(st.applied, N);
    assert_true(st.commits >= 1);
    /* What makes the test discriminate: P's group now stands at the end of
     * every partition, where a read at V's first assignment would start. */
    int64_t pc[PARTS];
    committed(w, w->group_p, pc);
    for (int32_t p = 0; p < PARTS; p++)
        assert_int_equal(pc[p], N / PARTS);

    /* V: started where P stood at the call (the beginning): all N. */
    assert_true(run_until_caught_up(w->v, 0));
    bool want[N];
    for (int i = 0; i < N; i++)
        want[i] = true;
    assert_applied(&w->sv, want);
    hps_kafka_consumer_stats(w->v, &st);
    assert_int_equal(st.applied, N);
}

/* Group commits offset off on partition part, as a consumer that had
 * applied the messages before it there would have. */
static void commit_at(const world_t *w, const char *group, int32_t part, int64_t off)
{
    rd_kafka_t *rk = group_handle(w, group);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, w->topic, part)->offset = off;
    assert_int_equal(rd_kafka_commit(rk, l, 0), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_destroy(l);
    close_handle(rk);
}

/* want[i]: message i is on partition 1, or at offset K or later on 0;
 * returns how many are. */
static int want_from(const world_t *w, int64_t k, bool want[N])
{
    int nwant = 0;
    for (int i = 0; i < N; i++) {
        want[i] = w->part[i] != 0 || w->off[i] >= k;
        nwant += want[i];
    }
    return nwant;
}

/* Run c (into sink s) until it has caught up: it must have applied exactly
 * the messages at offset k or later on partition 0 and every message of
 * partition 1 (want_from), each once.  Returns how many those are. */
static int assert_applies_from(world_t *w, hps_kafka_consumer_t *c, sink_t *s, int64_t k)
{
    bool want[N];
    int nwant = want_from(w, k, want);
    assert_true(run_until_caught_up(c, (uint64_t)nwant));
    assert_applied(s, want);
    hps_kafka_stats_t st;
    hps_kafka_consumer_stats(c, &st);
    assert_int_equal(st.applied, (uint64_t)nwant);
    return nwant;
}

/* P's group had committed K on partition 0 and nothing on partition 1 at
 * the call: V starts exactly at K on 0 and at the beginning of 1. */
static void test_snapshot_at_committed(void **state)
{
    enum { K = 10 };
    world_t *w = *state;
    produce(w);
    commit_at(w, w->group_p, 0, K);
    int64_t pc[PARTS];
    committed(w, w->group_p, pc);
    assert_int_equal(pc[0], K);
    assert_true(pc[1] < 0);

    consumer(w, w->group_p, &w->sp, &w->p);
    consumer(w, w->group_v, &w->sv, &w->v);
    hps_kafka_consumer_start_at(w->v, w->p); /* snapshot: {0: K, 1: none} */

    /* Expected of both: partition 0 from offset K on, all of partition 1. */
    bool want[N];
    int nwant = want_from(w, K, want);
    assert_int_equal(nwant, N - K);

    /* P (its own group's offsets) applies those and commits the ends. */
    assert_true(run_until_caught_up(w->p, (uint64_t)nwant));
    assert_applied(&w->sp, want);
    committed(w, w->group_p, pc);
    for (int32_t p = 0; p < PARTS; p++)
        assert_int_equal(pc[p], N / PARTS);

    /* V: exactly from K on partition 0, from the beginning of partition 1. */
    assert_applies_from(w, w->v, &w->sv, K);
}

/* P's group had committed an offset past the end of partition 0 (the
 * broker no longer has it, as after retention deleted unread messages):
 * librdkafka resets it to the beginning (auto.offset.reset smallest), and
 * the consumer counts the reset (nv_hps_update_offset_resets); partition 1,
 * without a committed offset, starts at the beginning without one. */
static void test_offset_reset_counted(void **state)
{
    world_t *w = *state;
    produce(w);
    commit_at(w, w->group_p, 0, 1000);
    consumer(w, w->group_p, &w->sp, &w->p);
    assert_true(run_until_caught_up(w->p, N));
    bool want[N];
    for (int i = 0; i < N; i++)
        want[i] = true;
    assert_applied(&w->sp, want);
    hps_kafka_stats_t st;
    hps_kafka_consumer_stats(w->p, &st);
    assert_int_equal(st.offset_resets, 1);
}

/* The group's earlier name had committed K on partition 0 (and nothing on
 * 1); the group itself nothing: V starts at K on 0 and at the beginning
 * of 1, not at the beginning of both (every retained update replayed over
 * rows loaded since).  After V committed in its own group, a new V with the
 * same names goes on from its own offsets (the ends), not from K again. */
static void test_legacy_group_offsets(void **state)
{
    enum { K = 10 };
    world_t *w = *state;
    produce(w);
    commit_at(w, w->legacy_v, 0, K);
    consumer_of(w, w->group_v, w->legacy_v, &w->sv, &w->v);
    assert_int_equal(assert_applies_from(w, w->v, &w->sv, K), N - K);
    hps_kafka_stats_t st;
    hps_kafka_consumer_stats(w->v, &st);
    assert_int_equal(st.offset_resets, 0);
    int64_t vc[PARTS];
    committed(w, w->group_v, vc);
    for (int32_t p = 0; p < PARTS; p++)
        assert_int_equal(vc[p], N / PARTS);

    /* Restarted: its own offsets win over the legacy group's K. */
    hps_kafka_consumer_destroy(w->v);
    memset(w->sv.seen, 0, sizeof(w->sv.seen));
    consumer_of(w, w->group_v, w->legacy_v, &w->sv, &w->v);
    assert_true(run_until_caught_up(w->v, 0));
    hps_kafka_consumer_stats(w->v, &st);
    assert_int_equal(st.applied, 0);
}

/* start_at's from has no offsets in its group, K on partition 0 in its
 * legacy group: the snapshot takes K there (V applies from K on 0 and all
 * of 1). */
static void test_start_at_legacy(void **state)
{
    enum { K = 10 };
    world_t *w = *state;
    produce(w);
    commit_at(w, w->legacy_p, 0, K);
    consumer_of(w, w->group_p, w->legacy_p, &w->sp, &w->p);
    consumer(w, w->group_v, &w->sv, &w->v);
    hps_kafka_consumer_start_at(w->v, w->p);
    assert_applies_from(w, w->v, &w->sv, K);
}

/* max_batch_size at the top of its range (2^31 - 1, as [update_source]
 * allows): every message is applied.  Its batch buffers were allocated
 * whole up front; that failed, and every update of the topic was dropped
 * without a word (kr audit). */
static void test_huge_batch_size(void **state)
{
    world_t *w = *state;
    produce(w);
    g_max_batch = INT32_MAX;
    consumer(w, w->group_v, &w->sv, &w->v);
    g_max_batch = 16;
    assert_true(run_until_caught_up(w->v, N));
    bool want[N];
    for (int i = 0; i < N; i++)
        want[i] = true;
    assert_applied(&w->sv, want);
    hps_kafka_stats_t st;
    hps_kafka_consumer_stats(w->v, &st);
    assert_int_equal(st.applied, N);
    assert_int_equal(st.errors, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_snapshot_before_from_runs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_snapshot_at_committed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_offset_reset_counted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_legacy_group_offsets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_start_at_legacy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_huge_batch_size, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
