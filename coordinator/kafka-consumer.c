/*
 * kafka-consumer.c -- HugeCTR's KafkaMessageSource loop over librdkafka
 * (reference/hugectr-hps.md §2.3), as a library: no logging, counters and
 * an event callback instead.
 *
 * HOW IT WORKS.  Each message's records are copied into its topic's batch
 * (keys and values de-interleaved, as the databases want them), and the
 * message's offset + 1 becomes the pending offset of its partition.  A batch
 * is applied (the apply callback) when it reaches max_batch_size, and every
 * pending batch is applied as soon as the local queue runs dry: a poll
 * without waiting that returns nothing.  HugeCTR waited for poll_timeout_ms
 * of silence instead, so an update could sit unapplied for half a second;
 * applying early changes nothing for the commit protocol.  Offsets are
 * committed (the explicit list) only after every batch has been applied:
 * after a poll timeout, at partition EOF and after max_commit_interval
 * messages asynchronously (the loop goes on reading while the broker
 * answers; the results come back on a queue of our own, served every
 * step), and synchronously before a rebalance revokes partitions and on
 * stop, after waiting (with a deadline) for the asynchronous ones.  A commit
 * is only ever sent for applied messages, so a crash, or a commit that
 * fails, replays messages: at-least-once, and applying an update twice is
 * harmless.  (Synchronous commits every 32 messages and at every
 * partition's EOF took about a third of the loop's time: bench-kafka.)  Skipped messages (bad
 * magic, wrong value size, truncated record, a Kafka key, unknown topic) are counted and their
 * offsets committed like the others, so they are never retried.
 *
 * ASSIGNMENT.  The consumer subscribes to its filters' regexes (group
 * membership; librdkafka's rebalances), or, with assign_all, joins no group
 * and assigns itself every partition of the matching topics from the
 * cluster's metadata (refresh_assignment), at the group's committed offsets.
 * Either way it tracks which assigned partitions have reached their end
 * since they were assigned, for hps_kafka_consumer_caught_up().
 */
#include <errno.h>
#include <librdkafka/rdkafka.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hps/dtype.h"
#include "hps/kafka.h"

#define STAT_ADD(c, f, v) __atomic_fetch_add(&(c)->st.f, (v), __ATOMIC_RELAXED)
#define STAT_SET(c, f, v) __atomic_store_n(&(c)->st.f, (v), __ATOMIC_RELAXED)
#define STAT_GET(c, f)    __atomic_load_n(&(c)->st.f, __ATOMIC_RELAXED)

/* Longest wait for the answers to asynchronous commits before a synchronous
 * one (revocation, stop) and before closing. */
#define COMMIT_WAIT_MS 5000

typedef struct topic_buf {
    char name[HPS_KAFKA_TOPIC_MAX];
    bool known;            /* resolve() accepted it */
    void *sink;            /* resolve()'s handle */
    uint32_t value_size;   /* bytes per value */
    bool refuse_nonfinite; /* drop updates with a NaN or +-Inf element (resolve()) */
    bool nonfinite_seen;   /* one warning per topic for such updates */
    uint8_t *keys;         /* (cap, key_bytes) */
    float *values;         /* (cap, value_size / 4) */
    size_t cap;            /* rows the buffers hold: grown up to max_batch_size (grow) */
    size_t n;              /* rows in the batch */
    unsigned failures;     /* consecutive failed applies of this batch */
} topic_buf_t;

struct hps_kafka_consumer {
    hps_kafka_consumer_opts_t o;
    rd_kafka_t *rk;
    topic_buf_t **topics;
    size_t num_topics;
    topic_buf_t *last;                        /* the topic of the previous message */
    rd_kafka_topic_partition_list_t *pending; /* offsets to commit */
    rd_kafka_queue_t *commit_q;               /* results of asynchronous commits */
    int commits_in_flight;                    /* sent, result not yet served */
    int msg_count;                            /* messages since the last commit */
    const atomic_int *stop;                   /* run()'s; read with acquire loads */
    hps_kafka_stats_t st; /* updated with relaxed atomics (read by other threads) */
    /* Catch-up tracking, consumer thread only: the partitions assigned (an
     * element's opaque is non-NULL once it reached EOF) and how many have
     * not reached it yet. */
    rd_kafka_topic_partition_list_t *assigned;
    int eof_left;
    int caught_up;   /* hps_kafka_consumer_caught_up(): written by the consumer thread
                      * (release), read by any (acquire) */
    int unreachable; /* assign_all: the last metadata read failed (same access rules) */
    /* assign_all: the filters as POSIX regexes; consumer thread only after create */
    regex_t *re;
    size_t num_re;
    int64_t next_refresh_ms;        /* CLOCK_MONOTONIC: the next metadata read */
    hps_kafka_consumer_t *start_at; /* hps_kafka_consumer_start_at(); set before run() */
    /* start_at's group's committed offsets, read when start_at was called
     * (before either consumer ran); NULL when they could not be read. */
    rd_kafka_topic_partition_list_t *start_offsets;
    /* update_lag, consumer thread only: the group's committed offsets of
     * assigned partitions not fetched from yet, read once per assignment. */
    rd_kafka_topic_partition_list_t *starts;
    /* Copies of o.brokers, o.group and o.legacy_group (NULL: none), which
     * c->o points at instead of the caller's strings; read-only after
     * create. */
    char *brokers, *group, *legacy_group;
    bool legacy_tried; /* refresh_assignment looked at legacy_group; consumer thread */
};

static int64_t now_ms(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

__attribute__((format(printf, 3, 4))) static void event(hps_kafka_consumer_t *c, int level,
                                                        const char *fmt, ...)
{
    if (!c->o.event)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    c->o.event(c->o.ctx, level, msg);
}

/* ---- batches ------------------------------------------------------------ */

/* Apply one topic's batch.  A failure is retried after failure_backoff_ms,
 * doubled per consecutive failure up to 64 times it, and logged at the
 * 1st, 2nd, 4th, 8th ... failure; HPS_ECORRUPT (apply's "never") drops the
 * batch and counts its updates in errors.  False when stopped before it
 * succeeded (the batch stays; nothing gets committed). */
static bool deliver(hps_kafka_consumer_t *c, topic_buf_t *t)
{
    while (t->n) {
        hps_err_t rc = c->o.apply(c->o.ctx, t->sink, t->n, t->keys, t->values);
        if (rc == 0 || rc == HPS_ECORRUPT) {
            if (rc == 0) {
                STAT_ADD(c, applied, t->n);
                STAT_SET(c, newest_applied_ms, now_ms(CLOCK_REALTIME));
            } else {
                STAT_ADD(c, errors, t->n);
                event(c, 1, "%s: %zu updates cannot be applied to this layer: dropped", t->name,
                      t->n);
            }
            t->n = 0;
            t->failures = 0;
            STAT_SET(c, retrying, 0);
            break;
        }
        STAT_ADD(c, apply_failures, 1);
        STAT_SET(c, retrying, 1);
        unsigned f = ++t->failures;
        long wait = (long)c->o.failure_backoff_ms << (f - 1 < 6 ? f - 1 : 6);
        if ((f & (f - 1)) == 0)
            event(c, 1, "%s: applying %zu updates failed %u time%s (%s); retrying in %ld ms",
                  t->name, t->n, f, f == 1 ? "" : "s", hps_strerror(rc), wait);
        for (long slept = 0; slept < wait; slept += 50) { /* a stop is seen within 50 ms */
            if (atomic_load_explicit(c->stop, memory_order_acquire))
                return false;
            sleep_ms(wait - slept < 50 ? (int)(wait - slept) : 50);
        }
    }
    return true;
}

static bool deliver_all(hps_kafka_consumer_t *c)
{
    for (size_t i = 0; i < c->num_topics; i++)
        if (!deliver(c, c->topics[i]))
            return false;
    return true;
}

/* Result of one commit (either kind), served on the consumer thread. */
static void on_commit(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                      rd_kafka_topic_partition_list_t *offsets, void *opaque)
{
    hps_kafka_consumer_t *c = opaque;
    (void)rk;
    (void)offsets;
    if (err && err != RD_KAFKA_RESP_ERR__NO_OFFSET) {
        /* Revoked partitions or a broker away: the messages will be read
         * again (at-least-once). */
        STAT_ADD(c, commit_failures, 1);
        event(c, 1, "offset commit failed: %s", rd_kafka_err2str(err));
    } else {
        STAT_ADD(c, commits, 1);
    }
}

static void on_async_commit(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                            rd_kafka_topic_partition_list_t *offsets, void *opaque)
{
    hps_kafka_consumer_t *c = opaque;
    c->commits_in_flight--;
    on_commit(rk, err, offsets, opaque);
}

/* Serve the results of asynchronous commits; with wait_ms > 0, wait up to
 * that long for every one in flight. */
static void serve_commits(hps_kafka_consumer_t *c, int wait_ms)
{
    int64_t until = now_ms(CLOCK_MONOTONIC) + wait_ms;
    if (!c->commit_q)
        return;
    rd_kafka_queue_poll_callback(c->commit_q, 0);
    while (wait_ms > 0 && c->commits_in_flight > 0 && now_ms(CLOCK_MONOTONIC) < until)
        rd_kafka_queue_poll_callback(c->commit_q, 10);
}

/* Apply everything, then commit the pending offsets: asynchronously, or
 * synchronously (sync) once the asynchronous ones have been answered. */
static void commit_as(hps_kafka_consumer_t *c, bool sync)
{
    c->msg_count = 0;
    if (!deliver_all(c))
        return;
    if (sync)
        serve_commits(c, COMMIT_WAIT_MS);
    if (c->pending->cnt == 0)
        return;
    if (sync) {
        rd_kafka_commit_queue(c->rk, c->pending, NULL, on_commit, c); /* serves on_commit */
    } else {
        rd_kafka_resp_err_t err =
            rd_kafka_commit_queue(c->rk, c->pending, c->commit_q, on_async_commit, c);
        if (err)
            on_commit(c->rk, err, c->pending, c);
        else
            c->commits_in_flight++;
    }
    rd_kafka_topic_partition_list_destroy(c->pending);
    c->pending = rd_kafka_topic_partition_list_new(16);
}

static void commit(hps_kafka_consumer_t *c)
{
    commit_as(c, false);
}

/* Rows a topic's batch buffers hold at first.  They grow (doubling) up to
 * max_batch_size as a batch fills: allocated whole up front, a large
 * max_batch_size (its range goes to 2^31 - 1) failed to allocate, and
 * every update of the topic was dropped without a word (kr audit). */
#define FIRST_ROWS 4096

/* Room for one more row in t's batch: the buffers doubled (up to
 * max_batch_size) when full; where that fails, the rows so far are applied
 * first (a smaller batch).  false: a stop came while applying. */
static bool grow(hps_kafka_consumer_t *c, topic_buf_t *t)
{
    if (t->n < t->cap)
        return true;
    size_t max = (size_t)c->o.max_batch_size, cap = t->cap * 2 < max ? t->cap * 2 : max;
    uint8_t *k = realloc(t->keys, cap * c->o.model_key_bytes);
    if (k)
        t->keys = k;
    float *v = k ? realloc(t->values, cap * t->value_size) : NULL;
    if (v) {
        t->values = v;
        t->cap = cap;
        return true;
    }
    return deliver(c, t); /* t->n is 0 after it, unless a stop came */
}

static topic_buf_t *topic_new(hps_kafka_consumer_t *c, const char *name)
{
    topic_buf_t *t = calloc(1, sizeof(*t));
    topic_buf_t **grown = realloc(c->topics, (c->num_topics + 1) * sizeof(*grown));
    if (!t || !grown) {
        free(t);
        return NULL;
    }
    c->topics = grown;
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->known = c->o.resolve(c->o.ctx, name, &t->sink, &t->value_size, &t->refuse_nonfinite);
    if (t->known) {
        size_t rows = (size_t)c->o.max_batch_size;
        t->cap = rows < FIRST_ROWS ? rows : FIRST_ROWS;
        t->keys = malloc(t->cap * c->o.model_key_bytes);
        t->values = malloc(t->cap * t->value_size);
        if (!t->keys || !t->values) {
            free(t->keys);
            free(t->values);
            free(t);
            return NULL;
        }
    }
    c->topics[c->num_topics++] = t;
    return t;
}

static topic_buf_t *topic_of(hps_kafka_consumer_t *c, const char *name)
{
    if (c->last && strcmp(c->last->name, name) == 0)
        return c->last;
    for (size_t i = 0; i < c->num_topics; i++)
        if (strcmp(c->topics[i]->name, name) == 0)
            return c->last = c->topics[i];
    return c->last = topic_new(c, name);
}

/* Store wire key w (wire width wb) at dst in the model's width mb: widened
 * from uint32, or narrowed to uint32 when it fits; false when it does not. */
static bool key_to_model(uint8_t *dst, const uint8_t *w, uint32_t wb, uint32_t mb)
{
    if (wb == mb) {
        memcpy(dst, w, mb);
        return true;
    }
    if (wb == 4) {
        uint32_t k32;
        memcpy(&k32, w, 4);
        int64_t k = (int64_t)k32;
        memcpy(dst, &k, 8);
        return true;
    }
    int64_t k;
    memcpy(&k, w, 8);
    if (k < 0 || k > (int64_t)UINT32_MAX)
        return false;
    uint32_t k32 = (uint32_t)k;
    memcpy(dst, &k32, 4);
    return true;
}

/* Copy the records into the batch (keys in the model's width), applying
 * each time it fills up.  *ret_narrow: records dropped because the model's
 * key width cannot hold their key; *ret_nonfinite: records with a NaN or
 * +-Inf value, dropped where t->refuse_nonfinite, else copied as the rest. */
static bool append(hps_kafka_consumer_t *c, topic_buf_t *t, const hps_kafka_msg_t *m,
                   size_t *ret_narrow, size_t *ret_nonfinite)
{
    uint32_t wb = c->o.key_bytes, mb = c->o.model_key_bytes;
    size_t floats = t->value_size / sizeof(float);
    const uint8_t *r = m->records;
    *ret_narrow = *ret_nonfinite = 0;
    for (size_t i = 0; i < m->count; i++, r += m->record_size) {
        if (hps_f32_any_nonfinite(r + wb, floats)) {
            ++*ret_nonfinite;
            if (t->refuse_nonfinite)
                continue;
        }
        if (!grow(c, t))
            return false;
        if (!key_to_model(t->keys + t->n * mb, r, wb, mb)) {
            ++*ret_narrow;
            continue;
        }
        memcpy(t->values + t->n * floats, r + wb, t->value_size);
        if (++t->n >= (size_t)c->o.max_batch_size && !deliver(c, t))
            return false;
    }
    return true;
}

static void set_pending(hps_kafka_consumer_t *c, const char *topic, int32_t part, int64_t off)
{
    rd_kafka_topic_partition_t *p = rd_kafka_topic_partition_list_find(c->pending, topic, part);
    if (!p)
        p = rd_kafka_topic_partition_list_add(c->pending, topic, part);
    p->offset = off;
}

static bool has_batches(const hps_kafka_consumer_t *c)
{
    for (size_t i = 0; i < c->num_topics; i++)
        if (c->topics[i]->n)
            return true;
    return false;
}

/* ---- catch-up ----------------------------------------------------------- */

static void update_caught_up(hps_kafka_consumer_t *c)
{
    __atomic_store_n(&c->caught_up, c->eof_left == 0 && !has_batches(c), __ATOMIC_RELEASE);
}

/* Partitions parts (not yet assigned) are assigned now: none has reached
 * its end. */
static void track_assigned(hps_kafka_consumer_t *c, const rd_kafka_topic_partition_list_t *parts)
{
    for (int i = 0; i < parts->cnt; i++)
        rd_kafka_topic_partition_list_add(c->assigned, parts->elems[i].topic,
                                          parts->elems[i].partition);
    if (c->starts) { /* a new assignment: its starts are read again */
        rd_kafka_topic_partition_list_destroy(c->starts);
        c->starts = NULL;
    }
    c->eof_left += parts->cnt;
    update_caught_up(c);
}

static void track_revoked_all(hps_kafka_consumer_t *c)
{
    rd_kafka_topic_partition_list_destroy(c->assigned);
    c->assigned = rd_kafka_topic_partition_list_new(16);
    c->eof_left = 0;
    __atomic_store_n(&c->caught_up, 0, __ATOMIC_RELEASE); /* until a new assignment */
}

/* Partition EOF of (topic, part); its batches have just been applied. */
static void track_eof(hps_kafka_consumer_t *c, const char *topic, int32_t part)
{
    rd_kafka_topic_partition_t *p = rd_kafka_topic_partition_list_find(c->assigned, topic, part);
    if (p && !p->opaque) {
        p->opaque = c; /* any non-NULL mark */
        c->eof_left--;
    }
    update_caught_up(c);
}

bool hps_kafka_consumer_caught_up(hps_kafka_consumer_t *c)
{
    return __atomic_load_n(&c->caught_up, __ATOMIC_ACQUIRE) != 0;
}

bool hps_kafka_consumer_unreachable(hps_kafka_consumer_t *c)
{
    return __atomic_load_n(&c->unreachable, __ATOMIC_ACQUIRE) != 0;
}

static bool topic_matches(const hps_kafka_consumer_t *c, const char *topic)
{
    for (size_t i = 0; i < c->num_re; i++)
        if (regexec(&c->re[i], topic, 0, NULL, 0) == 0)
            return true;
    return false;
}

/* Where the group has committed no offset for an element of l (offset < 0),
 * take the one c's legacy_group committed, read through a bare handle of
 * that group (it joins nothing and commits nothing).  Logged when any. */
static void legacy_offsets(hps_kafka_consumer_t *c, rd_kafka_topic_partition_list_t *l)
{
    if (!c->legacy_group)
        return;
    rd_kafka_topic_partition_list_t *q = rd_kafka_topic_partition_list_new(l->cnt ? l->cnt : 1);
    for (int i = 0; i < l->cnt; i++)
        if (l->elems[i].offset < 0)
            rd_kafka_topic_partition_list_add(q, l->elems[i].topic, l->elems[i].partition);
    rd_kafka_conf_t *conf = q->cnt ? rd_kafka_conf_new() : NULL;
    char why[512] = "";
    rd_kafka_t *rk = NULL;
    if (conf && (rd_kafka_conf_set(conf, "metadata.broker.list", c->o.brokers, why, sizeof(why)) !=
                     RD_KAFKA_CONF_OK ||
                 rd_kafka_conf_set(conf, "group.id", c->legacy_group, why, sizeof(why)) !=
                     RD_KAFKA_CONF_OK ||
                 rd_kafka_conf_set(conf, "enable.auto.commit", "false", why, sizeof(why)) !=
                     RD_KAFKA_CONF_OK ||
                 !(rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, why, sizeof(why)))))
        rd_kafka_conf_destroy(conf); /* rd_kafka_new owns it only on success */
    rd_kafka_resp_err_t e = rk ? rd_kafka_committed(rk, q, 5000) : RD_KAFKA_RESP_ERR__FAIL;
    int taken = 0;
    for (int i = 0; !e && i < q->cnt; i++) {
        const rd_kafka_topic_partition_t *g = &q->elems[i];
        rd_kafka_topic_partition_t *t =
            rd_kafka_topic_partition_list_find(l, g->topic, g->partition);
        if (t && !g->err && g->offset >= 0) {
            t->offset = g->offset;
            taken++;
        }
    }
    if (q->cnt && (e || taken))
        event(c, e ? 1 : 2,
              "%d of %d partitions without an offset in group %s start where group %s (its "
              "name before the segment's name was part of it) committed%s%s",
              taken, q->cnt, c->o.group, c->legacy_group, e ? ": " : "",
              e ? (rk ? rd_kafka_err2str(e) : why) : "");
    if (rk) {
        rd_kafka_consumer_close(rk);
        rd_kafka_destroy(rk);
    }
    rd_kafka_topic_partition_list_destroy(q);
}

/* The first assignment of a consumer with a legacy_group: partitions whose
 * group has no committed offset take legacy_group's (explicit offsets in
 * add; the rest stay RD_KAFKA_OFFSET_STORED). */
static void legacy_start(hps_kafka_consumer_t *c, rd_kafka_topic_partition_list_t *add)
{
    c->legacy_tried = true;
    rd_kafka_topic_partition_list_t *own = rd_kafka_topic_partition_list_copy(add);
    if (rd_kafka_committed(c->rk, own, 5000) == 0) {
        legacy_offsets(c, own);
        for (int i = 0; i < own->cnt; i++) {
            rd_kafka_topic_partition_t *t = rd_kafka_topic_partition_list_find(
                add, own->elems[i].topic, own->elems[i].partition);
            if (t && !own->elems[i].err && own->elems[i].offset >= 0)
                t->offset = own->elems[i].offset; /* the group's own, or the legacy one */
        }
    }
    rd_kafka_topic_partition_list_destroy(own);
}

/* Where parts start: the offsets start_at's group had committed when
 * hps_kafka_consumer_start_at() was called, i.e. when the layer was filled
 * from it, not the ones it commits since (its consumer runs meanwhile: a
 * later read skips the updates it applied after the fill).  A partition
 * without one (none committed then, unknown then, or unreadable) starts at
 * the beginning: replaying is harmless, skipping is not. */
static void start_where(hps_kafka_consumer_t *c, rd_kafka_topic_partition_list_t *parts)
{
    for (int i = 0; i < parts->cnt; i++) {
        const rd_kafka_topic_partition_t *s =
            c->start_offsets
                ? rd_kafka_topic_partition_list_find(c->start_offsets, parts->elems[i].topic,
                                                     parts->elems[i].partition)
                : NULL;
        parts->elems[i].offset =
            s && !s->err && s->offset >= 0 ? s->offset : RD_KAFKA_OFFSET_BEGINNING;
    }
    event(c, 2, "%d partitions start where the layer it was filled from stood", parts->cnt);
}

void hps_kafka_consumer_start_at(hps_kafka_consumer_t *c, hps_kafka_consumer_t *from)
{
    c->start_at = from;
    /* Read from's committed offsets now, before from's consumer runs. */
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(from->rk, 1, NULL, &md, 5000);
    rd_kafka_topic_partition_list_t *q = rd_kafka_topic_partition_list_new(16);
    for (int i = 0; !e && i < md->topic_cnt; i++) {
        const rd_kafka_metadata_topic_t *t = &md->topics[i];
        if (t->err || !topic_matches(c, t->topic))
            continue;
        for (int j = 0; j < t->partition_cnt; j++)
            rd_kafka_topic_partition_list_add(q, t->topic, t->partitions[j].id);
    }
    if (md)
        rd_kafka_metadata_destroy(md);
    if (!e && q->cnt)
        e = rd_kafka_committed(from->rk, q, 5000);
    if (!e)
        legacy_offsets(from, q); /* from's group renamed: where its old name stood */
    if (e) {
        event(c, 1,
              "reading the offsets of the layer it was filled from: %s; its partitions "
              "are read from the beginning",
              rd_kafka_err2str(e));
        rd_kafka_topic_partition_list_destroy(q);
        return;
    }
    c->start_offsets = q;
}

/* A group member not assigned anything yet: whether its subscription
 * matches no topic of the cluster (from its metadata, read every
 * metadata_refresh_interval_ms).  The group gives such a member no
 * assignment at all, so it would never count as caught up (a reload's
 * catch-up waited its whole 30 s for a model nobody had pushed updates
 * of); it has nothing to read, and is caught up, until a topic appears. */
static void none_to_read(hps_kafka_consumer_t *c)
{
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(c->rk, 1, NULL, &md, 5000);
    if (e) {
        STAT_ADD(c, errors, 1);
        event(c, 1, "reading the topics' metadata: %s", rd_kafka_err2str(e));
        return;
    }
    bool any = false;
    for (int i = 0; i < md->topic_cnt && !any; i++)
        any = !md->topics[i].err && topic_matches(c, md->topics[i].topic);
    rd_kafka_metadata_destroy(md);
    if (!any && c->assigned->cnt == 0)
        __atomic_store_n(&c->caught_up, 1, __ATOMIC_RELEASE);
}

/* assign_all: read the cluster's topics and assign the partitions of the
 * matching ones that are not assigned yet, each at the group's committed
 * offset.  A failed metadata read leaves the assignment as it is (tried
 * again at the next refresh). */
static void refresh_assignment(hps_kafka_consumer_t *c)
{
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(c->rk, 1, NULL, &md, 5000);
    __atomic_store_n(&c->unreachable, e != 0, __ATOMIC_RELEASE);
    if (e) {
        STAT_ADD(c, errors, 1);
        event(c, 1, "reading the topics' metadata: %s; the assignment stays", rd_kafka_err2str(e));
        return;
    }
    rd_kafka_topic_partition_list_t *add = rd_kafka_topic_partition_list_new(16);
    for (int i = 0; i < md->topic_cnt; i++) {
        const rd_kafka_metadata_topic_t *t = &md->topics[i];
        if (t->err || !topic_matches(c, t->topic))
            continue;
        for (int j = 0; j < t->partition_cnt; j++)
            if (!rd_kafka_topic_partition_list_find(c->assigned, t->topic, t->partitions[j].id))
                rd_kafka_topic_partition_list_add(add, t->topic, t->partitions[j].id)->offset =
                    RD_KAFKA_OFFSET_STORED;
    }
    rd_kafka_metadata_destroy(md);
    if (add->cnt && c->start_at)
        start_where(c, add);
    else if (add->cnt && c->legacy_group && !c->legacy_tried)
        legacy_start(c, add);
    if (add->cnt) {
        rd_kafka_error_t *err = rd_kafka_incremental_assign(c->rk, add);
        if (err) {
            STAT_ADD(c, errors, 1);
            event(c, 1, "assigning %d partitions: %s", add->cnt, rd_kafka_error_string(err));
            rd_kafka_error_destroy(err);
        } else {
            event(c, 2, "assigned %d partitions", add->cnt);
            track_assigned(c, add);
        }
    } else {
        update_caught_up(c); /* nothing (new) to read: caught up when the rest is */
    }
    rd_kafka_topic_partition_list_destroy(add);
}

/* ---- messages ----------------------------------------------------------- */

static void on_error_message(hps_kafka_consumer_t *c, const rd_kafka_message_t *m)
{
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        commit(c); /* applies every batch first */
        if (!has_batches(c))
            track_eof(c, rd_kafka_topic_name(m->rkt), m->partition);
        return;
    }
    STAT_ADD(c, errors, 1);
    event(c, 1, "consumer: %s", rd_kafka_message_errstr(m));
    char why[256];
    if (rd_kafka_fatal_error(c->rk, why, sizeof(why))) {
        event(c, 0, "fatal librdkafka error: %s; backing off %d ms", why, c->o.failure_backoff_ms);
        sleep_ms(c->o.failure_backoff_ms);
    }
}

static void on_message(hps_kafka_consumer_t *c, const rd_kafka_message_t *m)
{
    if (m->err) {
        on_error_message(c, m);
        return;
    }
    const char *name = rd_kafka_topic_name(m->rkt);
    topic_buf_t *t = topic_of(c, name);
    if (!t) { /* out of memory for a few KiB: this message's updates are lost */
        STAT_ADD(c, errors, 1);
        event(c, 0, "%s [%d] offset %lld: out of memory for its batch: the message is dropped",
              name, (int)m->partition, (long long)m->offset);
        return;
    }
    STAT_ADD(c, messages, 1);
    hps_kafka_msg_t msg;
    hps_kafka_verdict_t v = HPS_KAFKA_SKIP_UNKNOWN;
    if (t->known)
        v = hps_kafka_parse(m->payload, m->len, m->key_len, c->o.key_bytes, t->value_size, &msg);
    if (v == HPS_KAFKA_OK) {
        STAT_ADD(c, received, msg.count);
        size_t narrow, nonfinite;
        if (!append(c, t, &msg, &narrow, &nonfinite))
            return;
        STAT_ADD(c, errors, narrow + (t->refuse_nonfinite ? nonfinite : 0));
        if (nonfinite) {
            STAT_ADD(c, nonfinite, nonfinite);
            if (!t->nonfinite_seen) {
                t->nonfinite_seen = true;
                event(c, 1,
                      "%s [%d] offset %lld: %zu of %zu updates have a NaN or Inf value: %s "
                      "(nonfinite_values = %s; later ones are only counted)",
                      name, (int)m->partition, (long long)m->offset, nonfinite, msg.count,
                      t->refuse_nonfinite ? "dropped" : "applied as they are",
                      t->refuse_nonfinite ? "refuse" : "warn");
            }
        }
        if (narrow) {
            event(c, 1,
                  "%s [%d] offset %lld: %zu of %zu keys do not fit the model's 32-bit keys: "
                  "dropped",
                  name, (int)m->partition, (long long)m->offset, narrow, msg.count);
        }
        rd_kafka_timestamp_type_t tt;
        int64_t ts = rd_kafka_message_timestamp(m, &tt);
        if (ts > STAT_GET(c, newest_applied_msg_ms))
            STAT_SET(c, newest_applied_msg_ms, ts);
    } else if (v == HPS_KAFKA_BEACON) {
        STAT_ADD(c, beacons, 1);
    } else {
        STAT_ADD(c, skipped[v], 1);
        event(c, 2, "%s [%d] offset %lld: skipped (%s)", name, (int)m->partition,
              (long long)m->offset, hps_kafka_verdict_name(v));
    }
    set_pending(c, name, m->partition, m->offset + 1);
    if (++c->msg_count > c->o.max_commit_interval)
        commit(c);
}

/* Sum over the assignment of (high watermark - position); cached values. */
static void update_lag(hps_kafka_consumer_t *c)
{
    rd_kafka_topic_partition_list_t *a = NULL;
    if (rd_kafka_assignment(c->rk, &a) || !a)
        return;
    int64_t lag = a->cnt ? 0 : -1;
    if (a->cnt && rd_kafka_position(c->rk, a) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        /* A partition not fetched from yet has no position: it starts at
         * its group's committed offset (the low watermark where none), not
         * at the low watermark (which counted a whole topic as lag after
         * every restart).  Those offsets are read from the broker once per
         * assignment, not on every call of this consumer thread. */
        if (!c->starts) {
            rd_kafka_topic_partition_list_t *q = rd_kafka_topic_partition_list_new(4);
            for (int i = 0; i < a->cnt; i++)
                if (a->elems[i].offset < 0)
                    rd_kafka_topic_partition_list_add(q, a->elems[i].topic, a->elems[i].partition);
            if (q->cnt && rd_kafka_committed(c->rk, q, 500) == 0)
                c->starts = q;
            else
                rd_kafka_topic_partition_list_destroy(q);
        }
        for (int i = 0; i < a->cnt; i++) {
            int64_t lo = -1, hi = -1, pos = a->elems[i].offset;
            rd_kafka_get_watermark_offsets(c->rk, a->elems[i].topic, a->elems[i].partition, &lo,
                                           &hi);
            const rd_kafka_topic_partition_t *cp =
                pos < 0 && c->starts ? rd_kafka_topic_partition_list_find(
                                           c->starts, a->elems[i].topic, a->elems[i].partition)
                                     : NULL;
            if (cp && !cp->err && cp->offset >= 0)
                pos = cp->offset;
            if (hi >= 0)
                lag += hi - (pos >= 0 ? pos : (lo >= 0 ? lo : hi));
        }
    }
    STAT_SET(c, lag, lag);
    rd_kafka_topic_partition_list_destroy(a);
}

/* ---- librdkafka callbacks ----------------------------------------------- */

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *parts, void *opaque)
{
    hps_kafka_consumer_t *c = opaque;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        event(c, 2, "assigned %d partitions", parts->cnt);
        rd_kafka_assign(rk, parts);
        track_revoked_all(c);
        track_assigned(c, parts);
        return;
    }
    commit_as(c, true); /* apply and commit what we hold before the partitions go */
    event(c, 2, "revoked %d partitions", parts->cnt);
    rd_kafka_assign(rk, NULL);
    track_revoked_all(c);
}

static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    hps_kafka_consumer_t *c = opaque;
    (void)rk;
    STAT_ADD(c, errors, 1);
    event(c, 1, "librdkafka: %s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    hps_kafka_consumer_t *c = rd_kafka_opaque(rk);
    if (c && level <= 3) /* syslog error and worse; the rest is librdkafka chatter */
        event(c, 1, "librdkafka %s: %s", fac, buf);
    else if (c && level == 4 && strcmp(fac, "OFFSET") == 0) { /* an offset reset: */
        event(c, 1, "librdkafka %s: %s", fac, buf);           /* messages may have been skipped */
        if (strstr(buf, "offset reset"))
            STAT_ADD(c, offset_resets, 1);
    }
}

/* ---- life cycle --------------------------------------------------------- */

static hps_err_t set(rd_kafka_conf_t *conf, const char *k, const char *v, char *err, size_t err_len)
{
    char why[256];
    if (rd_kafka_conf_set(conf, k, v, why, sizeof(why)) == RD_KAFKA_CONF_OK)
        return 0;
    snprintf(err, err_len, "librdkafka setting %s=%s: %s", k, v, why);
    return HPS_ECONFIG;
}

/* HugeCTR's consumer settings (KafkaMessageSource), "DO NOT CHANGE" kept but
 * for the group session (include/hps/kafka.h says why). */
hps_err_t hps_kafka_consumer_configure(const hps_kafka_consumer_opts_t *o, rd_kafka_conf_t *conf,
                                       char *err, size_t err_len)
{
    char max_bytes[32], refresh[32];
    snprintf(max_bytes, sizeof(max_bytes), "%d", o->receive_buffer_size + 1024);
    snprintf(refresh, sizeof(refresh), "%d", o->metadata_refresh_interval_ms);
    const char *kv[][2] = {
        {"metadata.broker.list", o->brokers},
        {"group.id", o->group},
        {"session.timeout.ms", "6000"},
        {"heartbeat.interval.ms", "2000"},
        {"enable.auto.commit", "false"},
        {"enable.auto.offset.store", "true"},
        {"queued.min.messages", "65536"},
        {"queued.max.messages.kbytes", "1048576"},
        {"enable.partition.eof", "true"},
        {"check.crcs", "false"},
        {"allow.auto.create.topics", "true"},
        {"auto.offset.reset", "smallest"},
        {"message.max.bytes", max_bytes},
        {"receive.message.max.bytes", "134217728"},
        {"topic.metadata.refresh.interval.ms", refresh},
        {"topic.metadata.refresh.sparse", "true"},
    };
    for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++) {
        hps_err_t rc = set(conf, kv[i][0], kv[i][1], err, err_len);
        if (rc < 0)
            return rc;
    }
    if (o->fetch_wait_max_ms > 0) { /* bounds freshness where fetches are not woken early */
        char wait[32];
        snprintf(wait, sizeof(wait), "%d", o->fetch_wait_max_ms);
        return set(conf, "fetch.wait.max.ms", wait, err, err_len);
    }
    return 0;
}

static hps_err_t check_opts(const hps_kafka_consumer_opts_t *o, char *err, size_t err_len)
{
    if (!o || !o->brokers || !o->group || !o->resolve || !o->apply ||
        (o->key_bytes != 4 && o->key_bytes != 8) ||
        (o->model_key_bytes != 0 && o->model_key_bytes != 4 && o->model_key_bytes != 8) ||
        o->max_batch_size < 1 || o->poll_timeout_ms < 1 || o->failure_backoff_ms < 1 ||
        o->receive_buffer_size < 1024 || o->max_commit_interval < 1 ||
        o->metadata_refresh_interval_ms < 10) {
        snprintf(err, err_len, "invalid Kafka consumer options");
        return HPS_EINVAL;
    }
    return 0;
}

static hps_err_t subscribe(hps_kafka_consumer_t *c, char *err, size_t err_len)
{
    if (c->o.num_filters == 0)
        return 0;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new((int)c->o.num_filters);
    /* assign_all: the topics it assigns itself; a group member: whether any
     * exists (none_to_read) */
    c->re = calloc(c->o.num_filters, sizeof(*c->re));
    hps_err_t rc = !c->re ? -ENOMEM : 0;
    for (size_t i = 0; rc == 0 && i < c->o.num_filters; i++) {
        char re[1024];
        rc = hps_kafka_topic_regex(c->o.filters[i], re, sizeof(re));
        if (rc == 0 && c->re) {
            if (regcomp(&c->re[i], re, REG_EXTENDED | REG_NOSUB) != 0)
                rc = HPS_EINVAL;
            else
                c->num_re = i + 1;
        }
        if (rc < 0)
            snprintf(err, err_len, "update filter \"%s\" cannot be used", c->o.filters[i]);
        else
            rd_kafka_topic_partition_list_add(l, re, RD_KAFKA_PARTITION_UA);
    }
    if (rc == 0 && !c->o.assign_all) {
        rd_kafka_resp_err_t e = rd_kafka_subscribe(c->rk, l);
        if (e) {
            snprintf(err, err_len, "subscribe: %s", rd_kafka_err2str(e));
            rc = HPS_ECONFIG;
        }
    }
    rd_kafka_topic_partition_list_destroy(l);
    return rc;
}

hps_err_t hps_kafka_consumer_create(const hps_kafka_consumer_opts_t *opts,
                                    hps_kafka_consumer_t **ret, char *err, size_t err_len)
{
    hps_err_t rc = check_opts(opts, err, err_len);
    if (rc < 0)
        return rc;
    hps_kafka_consumer_t *c = calloc(1, sizeof(*c));
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (!c || !conf) {
        free(c);
        if (conf)
            rd_kafka_conf_destroy(conf);
        return -ENOMEM;
    }
    c->o = *opts;
    if (!c->o.model_key_bytes)
        c->o.model_key_bytes = c->o.key_bytes;
    c->brokers = strdup(opts->brokers);
    c->group = strdup(opts->group);
    if (opts->legacy_group && opts->assign_all)
        c->legacy_group = strdup(opts->legacy_group);
    c->o.brokers = c->brokers;
    c->o.group = c->group;
    c->o.legacy_group = NULL; /* c->legacy_group, where it applies */
    if (!c->brokers || !c->group || (opts->legacy_group && opts->assign_all && !c->legacy_group)) {
        rd_kafka_conf_destroy(conf);
        free(c->brokers);
        free(c->group);
        free(c->legacy_group);
        free(c);
        return -ENOMEM;
    }
    c->st.lag = -1;
    c->pending = rd_kafka_topic_partition_list_new(16);
    c->assigned = rd_kafka_topic_partition_list_new(16);
    rc = hps_kafka_consumer_configure(opts, conf, err, err_len);
    if (rc < 0) {
        rd_kafka_conf_destroy(conf);
        hps_kafka_consumer_destroy(c);
        return rc;
    }
    rd_kafka_conf_set_opaque(conf, c);
    rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
    rd_kafka_conf_set_error_cb(conf, error_cb);
    rd_kafka_conf_set_log_cb(conf, log_cb);
    char why[512];
    c->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, why, sizeof(why)); /* owns conf on success */
    if (!c->rk) {
        snprintf(err, err_len, "rd_kafka_new: %s", why);
        rd_kafka_conf_destroy(conf);
        hps_kafka_consumer_destroy(c);
        return HPS_ECONFIG;
    }
    rd_kafka_poll_set_consumer(c->rk);
    c->commit_q = rd_kafka_queue_new(c->rk);
    rc = c->commit_q ? subscribe(c, err, err_len) : -ENOMEM;
    c->o.filters = NULL; /* compiled: the caller's strings are not kept */
    if (rc < 0) {
        hps_kafka_consumer_destroy(c);
        return rc;
    }
    *ret = c;
    return 0;
}

/* One poll step: drain without waiting; when dry, apply what is pending,
 * then wait up to the poll timeout (in slices, to see *stop). */
static void step(hps_kafka_consumer_t *c, int64_t *idle_ms)
{
    if (c->commits_in_flight)
        serve_commits(c, 0);
    rd_kafka_message_t *m = rd_kafka_consumer_poll(c->rk, 0);
    if (!m) {
        if (has_batches(c))
            deliver_all(c);
        int slice = c->o.poll_timeout_ms < 100 ? c->o.poll_timeout_ms : 100;
        m = rd_kafka_consumer_poll(c->rk, slice);
        if (!m) {
            if ((*idle_ms += slice) >= c->o.poll_timeout_ms) {
                commit(c); /* HugeCTR: poll timeout -> deliver + commit */
                *idle_ms = 0;
            }
            return;
        }
    }
    *idle_ms = 0;
    on_message(c, m);
    rd_kafka_message_destroy(m);
}

hps_err_t hps_kafka_consumer_run(hps_kafka_consumer_t *c, const atomic_int *stop)
{
    c->stop = stop;
    int64_t idle_ms = 0, next_lag = 0;
    if (c->o.num_filters == 0)
        update_caught_up(c); /* subscribed to nothing: nothing to catch up on */
    while (!atomic_load_explicit(stop, memory_order_acquire)) {
        int64_t now = now_ms(CLOCK_MONOTONIC);
        if (c->o.num_filters && now >= c->next_refresh_ms &&
            (c->o.assign_all || c->assigned->cnt == 0)) {
            if (c->o.assign_all)
                refresh_assignment(c);
            else
                none_to_read(c);
            c->next_refresh_ms = now_ms(CLOCK_MONOTONIC) + c->o.metadata_refresh_interval_ms;
        }
        step(c, &idle_ms);
        now = now_ms(CLOCK_MONOTONIC);
        if (now >= next_lag) {
            update_lag(c);
            next_lag = now + 1000;
        }
    }
    commit_as(c, true);
    return 0;
}

void hps_kafka_consumer_stats(hps_kafka_consumer_t *c, hps_kafka_stats_t *ret)
{
    hps_kafka_stats_t s;
    s.messages = STAT_GET(c, messages);
    s.received = STAT_GET(c, received);
    s.nonfinite = STAT_GET(c, nonfinite);
    s.applied = STAT_GET(c, applied);
    for (int i = 0; i < HPS_KAFKA_NUM_VERDICTS; i++)
        s.skipped[i] = STAT_GET(c, skipped[i]);
    s.beacons = STAT_GET(c, beacons);
    s.apply_failures = STAT_GET(c, apply_failures);
    s.commits = STAT_GET(c, commits);
    s.commit_failures = STAT_GET(c, commit_failures);
    s.errors = STAT_GET(c, errors);
    s.lag = STAT_GET(c, lag);
    s.newest_applied_ms = STAT_GET(c, newest_applied_ms);
    s.newest_applied_msg_ms = STAT_GET(c, newest_applied_msg_ms);
    s.offset_resets = STAT_GET(c, offset_resets);
    s.retrying = STAT_GET(c, retrying);
    *ret = s;
}

void hps_kafka_consumer_destroy(hps_kafka_consumer_t *c)
{
    if (!c)
        return;
    if (c->rk) {
        if (c->commit_q)
            serve_commits(c, COMMIT_WAIT_MS);
        rd_kafka_consumer_close(c->rk); /* may call rebalance_cb -> commit_as() */
        if (c->commit_q)
            rd_kafka_queue_destroy(c->commit_q);
        rd_kafka_destroy(c->rk);
    }
    for (size_t i = 0; i < c->num_topics; i++) {
        free(c->topics[i]->keys);
        free(c->topics[i]->values);
        free(c->topics[i]);
    }
    free(c->topics);
    if (c->pending)
        rd_kafka_topic_partition_list_destroy(c->pending);
    if (c->assigned)
        rd_kafka_topic_partition_list_destroy(c->assigned);
    if (c->starts)
        rd_kafka_topic_partition_list_destroy(c->starts);
    if (c->start_offsets)
        rd_kafka_topic_partition_list_destroy(c->start_offsets);
    free(c->brokers);
    free(c->group);
    free(c->legacy_group);
    for (size_t i = 0; i < c->num_re; i++)
        regfree(&c->re[i]);
    free(c->re);
    free(c);
}
