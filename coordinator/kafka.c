/*
 * kafka.c -- hps-coordinator's Kafka ingestion: glue between the consumer of
 * include/hps/kafka.h and the coordinator's tables.
 *
 * One consumer thread per layer (HugeCTR ran one KafkaMessageSource per
 * database): the volatile DB (shared-memory segment, hps_shmdb_upsert: rows
 * present are updated, new ones inserted by the overflow rules) and the
 * persistent DB (hps_pdb_insert) when it is writable, and the distributed DB
 * (Redis Cluster, hps_ddb_insert, overflow-bounded) when configured.  Each has its own
 * consumer group and commits after its own applies, so a slow or failing
 * RocksDB never holds back the volatile DB.  The shared-memory VDB lives on
 * one host, so its group carries the host name (HugeCTR called a
 * multi-process hash map "shared" and named its group hps.volatile, which
 * splits the partitions between hosts), and the segment's name: a host may
 * run one coordinator per segment, each with its own VDB and RocksDB, and
 * one group for two of them would let each commit past updates the other
 * had not applied (a coordinator restarted after the other had consumed
 * went on from there, and lost them).  Redis is shared by every host, so
 * its group, hps.distributed, is not.
 *
 * Counters are logged once a second when they change, one line per layer:
 *   kafka volatile: messages=M received=R applied=A skipped: magic=..
 *   value_size=.. truncated=.. keyed=.. empty=.. unknown_table=..
 *   beacons=B lag=L errors=E commits=C newest_applied_age_ms=T
 * and once more at shutdown.  At each tick the counters are also published
 * in the segment (hps_shmdb_update_stats_set, layer index = layer kind),
 * where the workers export them as nv_hps_update_* metrics.
 *
 * The volatile layer appends the keys of every applied batch to the table's
 * update log (hps_shmdb_updlog_append, UPDLOG_CAPACITY keys per table), for
 * the workers' caches to refresh from.
 */
#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hps/kafka.h"
#include "hps/log.h"
#include "hps/update.h"
#include "kafka-coord.h"

#define MAX_FILTERS 64
/* Keys kept per table in the segment's update log. */
#define UPDLOG_CAPACITY 65536u

_Static_assert(HPS_KAFKA_NUM_VERDICTS <= HPS_SHMDB_UPDATE_REASONS,
               "every skip reason needs a slot in the segment's update statistics");

typedef struct layer {
    const char *name; /* "volatile", "persistent" or "distributed" */
    coord_t *c;
    enum { LAYER_VDB, LAYER_PDB, LAYER_DDB } kind;
    regex_t re[MAX_FILTERS];
    size_t num_re;
    hps_kafka_consumer_t *cons;
    pthread_t thread;
    bool running;
    hps_kafka_stats_t logged; /* last counters written to the log */
    bool updlog_warned;       /* append failure logged once */
    bool publish_warned;      /* stats publication failure logged once */
    const atomic_int *stop;   /* the owner's stop flag */
} layer_t;

struct coord_kafka {
    layer_t layers[3];
    size_t num_layers;
    atomic_int stop; /* set by coord_kafka_stop, read by the consumer and stats threads */
    pthread_t stats_thread;
    bool stats_running;
};

static void on_event(void *ctx, int level, const char *msg)
{
    layer_t *l = ctx;
    if (level == 0)
        HPS_ERROR("kafka %s: %s", l->name, msg);
    else if (level == 1)
        HPS_WARN("kafka %s: %s", l->name, msg);
    else
        HPS_INFO("kafka %s: %s", l->name, msg);
}

static bool model_matches(const layer_t *l, const char *model)
{
    for (size_t i = 0; i < l->num_re; i++)
        if (regexec(&l->re[i], model, 0, NULL, 0) == 0)
            return true;
    return false;
}

static bool resolve(void *ctx, const char *topic, void **ret_sink, uint32_t *ret_value_size,
                    bool *ret_refuse_nonfinite)
{
    layer_t *l = ctx;
    char model[HPS_KAFKA_TOPIC_MAX], table[HPS_KAFKA_TOPIC_MAX];
    if (hps_kafka_topic_split(topic, model, table) < 0 || !model_matches(l, model))
        return false;
    for (uint32_t i = 0; i < l->c->num_tables; i++) {
        coord_table_t *t = &l->c->tables[i];
        if (!t->model || strcmp(t->model->name, model) || strcmp(t->name, table))
            continue;
        if ((l->kind == LAYER_PDB && !t->pdb) || (l->kind == LAYER_DDB && !t->ddb))
            return false;
        *ret_sink = t;
        *ret_value_size = t->dim * (uint32_t)sizeof(float);
        *ret_refuse_nonfinite = t->model->nonfinite_values == HPS_CONF_BAD_ROWS_REFUSE;
        HPS_INFO("kafka %s: topic %s -> table %u (dim %u)", l->name, topic, t->vdb_id, t->dim);
        return true;
    }
    HPS_WARN("kafka %s: topic %s: no such table here; its messages are skipped", l->name, topic);
    return false;
}

/* Upsert, then log the keys (after: a reader of the log finds the new rows). */
static hps_err_t apply_vdb(layer_t *l, coord_table_t *t, size_t n, const void *keys,
                           const float *values)
{
    hps_err_t rc = hps_shmdb_upsert(l->c->db, t->vdb_id, n, keys, values, NULL);
    if (rc < 0)
        return rc;
    if (hps_shmdb_updlog_append(l->c->db, t->vdb_id, n, keys) < 0 && !l->updlog_warned) {
        l->updlog_warned = true;
        HPS_WARN("kafka %s: table %u has no update log; changed keys are not logged", l->name,
                 t->vdb_id);
    }
    return 0;
}

static hps_err_t apply(void *ctx, void *sink, size_t n, const void *keys, const float *values)
{
    layer_t *l = ctx;
    coord_table_t *t = sink;
    if (l->kind == LAYER_VDB)
        return apply_vdb(l, t, n, keys, values);
    char err[256] = "";
    hps_err_t rc = l->kind == LAYER_PDB ? hps_pdb_insert(t->pdb, n, keys, l->c->key_bytes, values,
                                                         t->dim, err, sizeof(err))
                                        : hps_ddb_insert(t->ddb, n, keys, values, err, sizeof(err));
    if (rc < 0)
        HPS_WARN("kafka %s: %s.%s: %s", l->name, t->model->name, t->name, err);
    /* A partition's hash of another type answers WRONGTYPE to every write:
     * retrying would stall every table of the layer.  Such a hash holds no
     * value of the table, so dropping the updates serves nothing stale. */
    if (rc < 0 && l->kind == LAYER_DDB && strncmp(err, "WRONGTYPE", 9) == 0)
        return HPS_ECORRUPT;
    return rc;
}

static int compile_filters(layer_t *l, const char **filters, size_t n)
{
    if (n > MAX_FILTERS) {
        HPS_ERROR("kafka %s: %zu update_filters, at most %d", l->name, n, MAX_FILTERS);
        return HPS_EXIT_USAGE;
    }
    for (size_t i = 0; i < n; i++) {
        char re[1024];
        if (hps_kafka_model_regex(filters[i], re, sizeof(re)) < 0 ||
            regcomp(&l->re[i], re, REG_EXTENDED | REG_NOSUB) != 0) {
            HPS_ERROR("kafka %s: update_filters \"%s\" is not a usable regex", l->name, filters[i]);
            return HPS_EXIT_USAGE;
        }
        l->num_re = i + 1;
    }
    return 0;
}

/*
 * The shared group hps.distributed: subscribe to the topics of the models
 * served here that the filters match, each model name as its own filter
 * (names match [A-Za-z0-9_-]{1,120}: literal regexes).  The group's
 * assignor gives each topic's partitions only to members subscribed to
 * it, so hosts that serve different models split each model's topics among
 * the hosts that serve it.  Subscribed to every model's topics, a host got
 * partitions of models it does not serve, skipped their updates as topics
 * of no table here and committed them: Redis never got them from anyone.
 * *ret_names: the names (pointers into c->conf), *ret_n of them; free()
 * the array.
 */
static int served_filters(coord_t *c, layer_t *l, const char ***ret_names, size_t *ret_n)
{
    const hps_conf_t *conf = c->conf;
    const char **names = calloc(conf->num_models ? conf->num_models : 1, sizeof(*names));
    if (!names)
        return HPS_EXIT_RUNTIME;
    size_t n = 0;
    for (size_t i = 0; i < conf->num_models && n < MAX_FILTERS; i++)
        if (model_matches(l, conf->models[i].name))
            names[n++] = conf->models[i].name;
    *ret_names = names;
    *ret_n = n;
    return 0;
}

static int layer_create(coord_t *c, layer_t *l, const char **filters, size_t nf)
{
    const hps_conf_update_source_t *u = &c->conf->update_source;
    int ex = compile_filters(l, filters, nf);
    if (ex)
        return ex;
    const char **served = NULL;
    if (l->kind == LAYER_DDB && (ex = served_filters(c, l, &served, &nf)) != 0)
        return ex;
    if (served)
        filters = served;
    char host[256] = "localhost", local[512], group[640], legacy[640], err[512];
    gethostname(host, sizeof(host) - 1);
    snprintf(local, sizeof(local), "%s.%s", host, c->conf->volatile_db.shared_memory_name);
    hps_kafka_group_name(l->name, l->kind == LAYER_DDB, local, group, sizeof(group));
    /* The per-host groups' names before the segment's name was added: a
     * first start after the upgrade goes on from their offsets, where this
     * start continues the segment of that time (c->continues; a segment
     * started anew beside it reads its topics from the oldest update). */
    hps_kafka_group_name(l->name, false, host, legacy, sizeof(legacy));
    hps_kafka_consumer_opts_t o = {
        .brokers = u->brokers,
        .group = group,
        .filters = filters,
        .num_filters = nf,
        .key_bytes = (uint32_t)u->key_bytes, /* the wire's: HugeCTR's producer sends int64 */
        .model_key_bytes = c->key_bytes,
        .metadata_refresh_interval_ms = (int)u->metadata_refresh_interval_ms,
        .receive_buffer_size = (int)u->receive_buffer_size,
        .poll_timeout_ms = (int)u->poll_timeout_ms,
        .max_batch_size = (int)u->max_batch_size,
        .failure_backoff_ms = (int)u->failure_backoff_ms,
        .max_commit_interval = (int)u->max_commit_interval,
        .fetch_wait_max_ms = (int)u->fetch_wait_max_ms,
        /* a per-host group has one member: assigning by hand spares a
         * reloaded coordinator the group's rejoin wait (its catch-up) */
        .assign_all = l->kind != LAYER_DDB,
        .legacy_group = l->kind != LAYER_DDB && c->continues ? legacy : NULL,
        .resolve = resolve,
        .apply = apply,
        .event = on_event,
        .ctx = l,
    };
    hps_err_t rc = hps_kafka_consumer_create(&o, &l->cons, err, sizeof(err));
    free(served); /* the consumer compiled its subscription */
    if (rc == HPS_EUNSUPPORTED) {
        HPS_ERROR("[update_source] type = kafka_message_queue: this hps-coordinator was %s", err);
        return HPS_EXIT_USAGE;
    }
    if (rc < 0) {
        HPS_ERROR("kafka %s: %s", l->name, err);
        return HPS_EXIT_USAGE;
    }
    if (l->kind == LAYER_DDB)
        HPS_INFO("kafka %s: brokers %s, group %s, the topics of the %zu model%s served here that "
                 "update_filters match (hosts that share the group split each model's "
                 "partitions among those that serve it)",
                 l->name, u->brokers, group, nf, nf == 1 ? "" : "s");
    else
        HPS_INFO("kafka %s: brokers %s, group %s, %zu update filters", l->name, u->brokers, group,
                 nf);
    return 0;
}

static void *layer_loop(void *arg)
{
    layer_t *l = arg;
    hps_kafka_consumer_run(l->cons, l->stop);
    return NULL;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Copy the counters into the segment for the workers' /metrics. */
static void publish_stats(layer_t *l, const hps_kafka_stats_t *s)
{
    hps_update_stats_t u = {
        .messages = s->messages,
        .received = s->received,
        .nonfinite = s->nonfinite,
        .applied = s->applied,
        .beacons = s->beacons,
        .errors = s->errors,
        .lag = s->lag,
        .newest_applied_ms = s->newest_applied_ms,
        .published_ms = now_ms(),
        .offset_resets = s->offset_resets,
    };
    for (int i = 0; i < HPS_KAFKA_NUM_VERDICTS; i++)
        u.skipped[i] = s->skipped[i];
    hps_err_t rc = hps_shmdb_update_stats_set(l->c->db, (uint32_t)l->kind, &u);
    if (rc < 0 && !l->publish_warned) {
        l->publish_warned = true;
        HPS_WARN("kafka %s: cannot publish update statistics in the segment (%d)", l->name, rc);
    }
}

static void log_stats(layer_t *l, bool force)
{
    hps_kafka_stats_t s;
    hps_kafka_consumer_stats(l->cons, &s);
    publish_stats(l, &s);
    if (!force && memcmp(&s, &l->logged, sizeof(s)) == 0)
        return;
    l->logged = s;
    /* "magic=.. value_size=.. ...": the reason names of the workers' metrics. */
    char sk[256];
    size_t n = 0;
    for (uint32_t r = 0; r < HPS_KAFKA_NUM_VERDICTS && n < sizeof(sk); r++)
        if (hps_update_reason_name(r))
            n += (size_t)snprintf(sk + n, sizeof(sk) - n, "%s%s=%llu", n ? " " : "",
                                  hps_update_reason_name(r), (unsigned long long)s.skipped[r]);
    HPS_INFO("kafka %s: messages=%llu received=%llu nonfinite=%llu applied=%llu skipped: %s "
             "beacons=%llu lag=%lld errors=%llu commits=%llu newest_applied_age_ms=%lld",
             l->name, (unsigned long long)s.messages, (unsigned long long)s.received,
             (unsigned long long)s.nonfinite, (unsigned long long)s.applied, sk,
             (unsigned long long)s.beacons, (long long)s.lag, (unsigned long long)s.errors,
             (unsigned long long)s.commits,
             s.newest_applied_ms ? (long long)(now_ms() - s.newest_applied_ms) : -1LL);
}

static void *stats_loop(void *arg)
{
    coord_kafka_t *k = arg;
    while (!atomic_load(&k->stop)) {
        for (int i = 0; i < 10 && !atomic_load(&k->stop); i++)
            usleep(100000);
        for (size_t i = 0; i < k->num_layers; i++)
            log_stats(&k->layers[i], false);
    }
    return NULL;
}

static int start_threads(coord_kafka_t *k)
{
    for (size_t i = 0; i < k->num_layers; i++) {
        k->layers[i].stop = &k->stop;
        if (pthread_create(&k->layers[i].thread, NULL, layer_loop, &k->layers[i]) != 0) {
            HPS_ERROR("cannot start the Kafka consumer thread");
            return HPS_EXIT_RUNTIME;
        }
        k->layers[i].running = true;
    }
    if (pthread_create(&k->stats_thread, NULL, stats_loop, k) != 0)
        return HPS_EXIT_RUNTIME;
    k->stats_running = true;
    return 0;
}

/* An update log per table of the volatile DB (kept across restarts). */
static void init_updlogs(coord_t *c)
{
    for (uint32_t i = 0; i < c->num_tables; i++) {
        coord_table_t *t = &c->tables[i];
        hps_err_t rc = t->model ? hps_shmdb_updlog_init(c->db, t->vdb_id, UPDLOG_CAPACITY) : 0;
        if (rc < 0)
            HPS_WARN("kafka volatile: no update log for %s.%s (%d)", t->model->name, t->name, rc);
    }
}

int coord_kafka_start(coord_t *c, coord_kafka_t **ret)
{
    *ret = NULL;
    const hps_conf_t *conf = c->conf;
    if (conf->update_source.type != HPS_CONF_UPDATE_KAFKA)
        return 0;
    coord_kafka_t *k = calloc(1, sizeof(*k));
    if (!k)
        return HPS_EXIT_RUNTIME;
    *ret = k;
    k->layers[0] = (layer_t){.name = "volatile", .c = c};
    int ex = layer_create(c, &k->layers[0], conf->volatile_db.update_filters,
                          conf->volatile_db.update_filters_len);
    k->num_layers = ex ? 0 : 1;
    if (!ex)
        init_updlogs(c);
    if (!ex && c->pdb && !conf->persistent_db.read_only) {
        k->layers[1] = (layer_t){.name = "persistent", .c = c, .kind = LAYER_PDB};
        ex = layer_create(c, &k->layers[1], conf->persistent_db.update_filters,
                          conf->persistent_db.update_filters_len);
        k->num_layers = ex ? 1 : 2;
        /* The volatile DB was filled from the persistent DB: it holds the
         * updates that one applied, and not those its own consumer had
         * applied beyond (they were in the segment this start replaced).
         * So it reads from where the persistent consumer stands. */
        if (!ex && c->vdb_from_pdb) {
            hps_kafka_consumer_start_at(k->layers[0].cons, k->layers[1].cons);
            HPS_INFO("kafka volatile: starts where kafka persistent stands (the volatile DB was "
                     "filled from the persistent DB)");
        }
    }
    if (!ex && c->ddb) {
        layer_t *l = &k->layers[k->num_layers];
        *l = (layer_t){.name = "distributed", .c = c, .kind = LAYER_DDB};
        ex = layer_create(c, l, conf->distributed_db.update_filters,
                          conf->distributed_db.update_filters_len);
        k->num_layers += ex ? 0 : 1;
    }
    if (!ex)
        ex = start_threads(k);
    if (!ex) {
        pthread_mutex_lock(&c->kafka_mu);
        c->kafka = k;
        pthread_mutex_unlock(&c->kafka_mu);
    }
    return ex;
}

bool coord_kafka_behind(coord_t *c, bool ddb)
{
    bool behind = false;
    pthread_mutex_lock(&c->kafka_mu);
    coord_kafka_t *k = c->kafka;
    for (size_t i = 1; k && i < k->num_layers; i++) {
        const layer_t *l = &k->layers[i];
        if (!l->cons || (l->kind == LAYER_DDB) != ddb)
            continue;
        hps_kafka_stats_t v, s;
        hps_kafka_consumer_stats(k->layers[0].cons, &v);
        hps_kafka_consumer_stats(l->cons, &s);
        behind = s.retrying || (v.lag >= 0 && s.lag > v.lag);
    }
    pthread_mutex_unlock(&c->kafka_mu);
    return behind;
}

/* No broker answers layer l: its own verdict (a layer that assigns itself
 * its partitions reads the metadata), or, for the shared group's member
 * (which waits for the group coordinator instead), any layer's: they all
 * use [update_source] brokers. */
static bool unreachable(coord_kafka_t *k, const layer_t *l)
{
    if (l->kind != LAYER_DDB)
        return hps_kafka_consumer_unreachable(l->cons);
    for (size_t i = 0; i < k->num_layers; i++)
        if (k->layers[i].kind != LAYER_DDB && hps_kafka_consumer_unreachable(k->layers[i].cons))
            return true;
    return false;
}

/* Whether the coordinator that runs k is stopping (its coord_t.stop). */
static bool stopping(const coord_kafka_t *k)
{
    return k->num_layers && atomic_load(k->layers[0].c->stop);
}

bool coord_kafka_catch_up(coord_kafka_t *k, int timeout_ms)
{
    if (!k)
        return true;
    int64_t start = now_ms(), waited = 0;
    bool done = false;
    /* a SIGTERM meanwhile (the layers' coord_t.stop) ends the wait */
    while (!done && waited < timeout_ms && !stopping(k)) {
        done = true;
        for (size_t i = 0; i < k->num_layers; i++) /* no broker: nothing to wait for */
            if (!hps_kafka_consumer_caught_up(k->layers[i].cons) && !unreachable(k, &k->layers[i]))
                done = false;
        if (!done) {
            struct timespec ts = {.tv_nsec = 20 * 1000000L};
            nanosleep(&ts, NULL);
        }
        waited = now_ms() - start;
    }
    if (!done && stopping(k)) {
        HPS_INFO("kafka: the catch-up stopped after %lld ms: the coordinator is stopping",
                 (long long)waited);
        return false;
    }
    for (size_t i = 0; i < k->num_layers; i++) {
        layer_t *l = &k->layers[i];
        hps_kafka_stats_t s;
        hps_kafka_consumer_stats(l->cons, &s);
        if (hps_kafka_consumer_caught_up(l->cons))
            HPS_INFO("kafka %s: caught up in %lld ms (%llu updates applied)", l->name,
                     (long long)waited, (unsigned long long)s.applied);
        else if (unreachable(k, l))
            HPS_WARN("kafka %s: no broker answers: going on after %lld ms; the updates are "
                     "applied once one does",
                     l->name, (long long)waited);
        else
            HPS_WARN("kafka %s: not caught up after %lld ms (%llu updates applied, lag %lld): "
                     "going on; the rest is applied while serving",
                     l->name, (long long)waited, (unsigned long long)s.applied, (long long)s.lag);
    }
    return done;
}

void coord_kafka_stop(coord_kafka_t *k)
{
    if (!k)
        return;
    coord_t *c = k->layers[0].c;
    pthread_mutex_lock(&c->kafka_mu);
    if (c->kafka == k)
        c->kafka = NULL;
    pthread_mutex_unlock(&c->kafka_mu);
    atomic_store(&k->stop, 1);
    if (k->stats_running)
        pthread_join(k->stats_thread, NULL);
    for (size_t i = 0; i < 3; i++) {
        layer_t *l = &k->layers[i];
        if (l->running)
            pthread_join(l->thread, NULL);
        if (l->cons) {
            log_stats(l, true);
            hps_kafka_consumer_destroy(l->cons);
        }
        for (size_t j = 0; j < l->num_re; j++)
            regfree(&l->re[j]);
    }
    free(k);
}
