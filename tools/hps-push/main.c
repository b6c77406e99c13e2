/*
 * hps-push -- publish embedding updates to Kafka as HugeCTR's MessageSink
 * did (KafkaMessageSink<Key>::post, reference/hugectr-hps.md §2.2).
 *
 * Keys are split into --num-partitions key groups by
 * rrxmrrxmsx_0(key) % num_partitions; each group fills send buffers of
 * --send-buffer-size bytes ("HCTR", value_size, records), one buffer = one
 * message, produced to Kafka partition (group & 0x7fffffff) % partitions
 * (HugeCTR's kafka_key_group_partitioner).  Exit status 0 only when every
 * message was acknowledged by the brokers (delivery reports).
 */
#include <errno.h>
#include <getopt.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hps/hps.h"
#include "hps/kafka.h"
#include "hps/modelfile.h"

typedef struct push_opts {
    const char *brokers, *model, *table, *topic, *dir, *msg_key;
    uint32_t dim, key_bytes, num_groups, num_buffers;
    size_t send_buffer_size;
    int timeout_ms, partition;
    bool from_stdin, raw, quiet;
} push_opts_t;

typedef struct group_buf {
    uint8_t *buf;
    size_t len;
} group_buf_t;

typedef struct push {
    push_opts_t o;
    rd_kafka_t *rk;
    rd_kafka_topic_t *rkt;
    int32_t partitions;
    group_buf_t *groups;
    uint64_t updates, produced, delivered, failed, bytes;
    double t0, last_progress;
} push_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: hps-push -b BROKERS -m MODEL -t TABLE -d DIM (--dir TABLE_DIR | --stdin)\n"
            "       hps-push -b BROKERS --topic TOPIC --raw [--message-key K] [--partition P]\n"
            "\n"
            "Publishes embedding updates to topic hps_et.MODEL.TABLE in HugeCTR's format.\n"
            "  --dir D              a HugeCTR sparse model table directory (key + emb_vector)\n"
            "  --stdin              records from stdin: { key (key-bytes, little-endian);\n"
            "                       float32[DIM] } repeated, no header, until EOF\n"
            "  --raw                send stdin verbatim as one message (tests, beacons)\n"
            "  --key-bytes 8|4      wire key width (supportlonglong: 8, default)\n"
            "  --num-partitions N   key groups (default 8)\n"
            "  --send-buffer-size B bytes per message (default 262144)\n"
            "  --num-send-buffers N messages in flight at most (default 1024)\n"
            "  --timeout-ms T       delivery timeout per message (default 60000)\n"
            "  -q, --quiet          no progress lines\n"
            "  -h, --help           show this help and exit\n"
            "  --version            show the version and exit\n"
            "Exit status: 0 all delivered, 1 a message was not delivered, 2 usage.\n");
}

/* The integer of option --opt in [lo, hi], else false with a message. */
static bool num_opt(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *v)
{
    if (hps_parse_int(s, lo, hi, v))
        return true;
    fprintf(stderr, "hps-push: --%s '%s': must be an integer in [%lld, %lld]\n", opt, s,
            (long long)lo, (long long)hi);
    return false;
}

static int parse_args(int argc, char **argv, push_opts_t *o)
{
    static const struct option longs[] = {{"brokers", 1, NULL, 'b'},
                                          {"model", 1, NULL, 'm'},
                                          {"table", 1, NULL, 't'},
                                          {"dim", 1, NULL, 'd'},
                                          {"dir", 1, NULL, 'D'},
                                          {"stdin", 0, NULL, 'S'},
                                          {"raw", 0, NULL, 'R'},
                                          {"topic", 1, NULL, 'T'},
                                          {"key-bytes", 1, NULL, 'k'},
                                          {"num-partitions", 1, NULL, 'n'},
                                          {"send-buffer-size", 1, NULL, 's'},
                                          {"num-send-buffers", 1, NULL, 'N'},
                                          {"timeout-ms", 1, NULL, 'o'},
                                          {"message-key", 1, NULL, 'K'},
                                          {"partition", 1, NULL, 'p'},
                                          {"quiet", 0, NULL, 'q'},
                                          {"help", 0, NULL, 'h'},
                                          {"version", 0, NULL, 'V'},
                                          {NULL, 0, NULL, 0}};
    *o = (push_opts_t){.brokers = "127.0.0.1:9092",
                       .key_bytes = 8,
                       .num_groups = 8,
                       .num_buffers = 1024,
                       .send_buffer_size = 262144,
                       .timeout_ms = 60000};
    int ch;
    int64_t v = 0;
    bool bad = false;
    while ((ch = getopt_long(argc, argv, "b:m:t:d:qh", longs, NULL)) != -1) {
        switch (ch) {
        case 'b':
            o->brokers = optarg;
            break;
        case 'm':
            o->model = optarg;
            break;
        case 't':
            o->table = optarg;
            break;
        case 'd':
            bad |= !num_opt("dim", optarg, 1, 65536, &v);
            o->dim = (uint32_t)v;
            break;
        case 'D':
            o->dir = optarg;
            break;
        case 'S':
            o->from_stdin = true;
            break;
        case 'R':
            o->raw = true;
            break;
        case 'T':
            o->topic = optarg;
            break;
        case 'k':
            bad |= !num_opt("key-bytes", optarg, 4, 8, &v);
            o->key_bytes = (uint32_t)v;
            break;
        case 'n':
            bad |= !num_opt("num-partitions", optarg, 1, 65536, &v);
            o->num_groups = (uint32_t)v;
            break;
        case 's':
            bad |= !num_opt("send-buffer-size", optarg, 64, 1 << 30, &v);
            o->send_buffer_size = (size_t)v;
            break;
        case 'N':
            bad |= !num_opt("num-send-buffers", optarg, 1, 1 << 20, &v);
            o->num_buffers = (uint32_t)v;
            break;
        case 'o':
            bad |= !num_opt("timeout-ms", optarg, 1, INT32_MAX, &v);
            o->timeout_ms = (int)v;
            break;
        case 'K':
            o->msg_key = optarg;
            break;
        case 'p':
            bad |= !num_opt("partition", optarg, -1, INT32_MAX, &v);
            o->partition = (int)v;
            break;
        case 'q':
            o->quiet = true;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        case 'V':
            printf("hps-push %s\n", hps_version());
            exit(0);
        default:
            return 2;
        }
    }
    if (bad)
        return 2;
    const char *why = NULL;
    if (optind != argc)
        why = "unexpected arguments after the options";
    else if (o->raw && !o->topic)
        why = "--raw needs --topic";
    else if (!o->raw && !!o->dir + o->from_stdin != 1)
        why = "give one of --dir and --stdin";
    else if (!o->raw && (!o->model || !o->table || o->dim == 0))
        why = "-m MODEL, -t TABLE and -d DIM are required";
    else if (o->key_bytes != 4 && o->key_bytes != 8)
        why = "--key-bytes must be 4 or 8";
    else if (!o->raw && 8 + o->key_bytes + 4ull * o->dim > o->send_buffer_size)
        why = "--send-buffer-size is too small for one record (8 + key-bytes + 4 x dim bytes)";
    if (why) {
        fprintf(stderr, "hps-push: %s\n", why);
        usage(stderr);
        return 2;
    }
    return 0;
}

/* ---- producer ----------------------------------------------------------- */

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    push_t *p = opaque;
    (void)rk;
    if (m->err) {
        if (p->failed++ < 5)
            fprintf(stderr, "hps-push: message not delivered: %s\n", rd_kafka_err2str(m->err));
    } else {
        p->delivered++;
    }
}

static int configure(push_t *p, rd_kafka_conf_t *conf)
{
    char max_bytes[32], timeout[32], err[512];
    snprintf(max_bytes, sizeof(max_bytes), "%zu", p->o.send_buffer_size + 1024);
    snprintf(timeout, sizeof(timeout), "%d", p->o.timeout_ms);
    const char *kv[][2] = {
        {"metadata.broker.list", p->o.brokers},
        {"message.max.bytes", max_bytes},
        {"receive.message.max.bytes", "134217728"},
        {"topic.metadata.refresh.interval.ms", "60000"},
        {"topic.metadata.refresh.sparse", "true"},
        {"enable.idempotence", "true"},
        {"queue.buffering.max.messages", "65536"},
        {"queue.buffering.max.kbytes", "1048576"},
        {"queue.buffering.max.ms", "100"},
        {"compression.codec", "none"},
        {"batch.num.messages", "8192"},
        {"batch.size", "67108864"},
        {"message.timeout.ms", timeout},
    };
    for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++)
        if (rd_kafka_conf_set(conf, kv[i][0], kv[i][1], err, sizeof(err)) != RD_KAFKA_CONF_OK) {
            fprintf(stderr, "hps-push: %s=%s: %s\n", kv[i][0], kv[i][1], err);
            return 1;
        }
    rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
    rd_kafka_conf_set_opaque(conf, p);
    return 0;
}

/* The topic's partition count from the brokers (auto-creates it when allowed). */
static int fetch_partitions(push_t *p)
{
    double deadline = now_s() + p->o.timeout_ms / 1000.0;
    while (now_s() < deadline) {
        const struct rd_kafka_metadata *md = NULL;
        rd_kafka_resp_err_t e = rd_kafka_metadata(p->rk, 0, p->rkt, &md, 5000);
        if (!e && md->topic_cnt == 1 && !md->topics[0].err && md->topics[0].partition_cnt > 0)
            p->partitions = md->topics[0].partition_cnt;
        if (md)
            rd_kafka_metadata_destroy(md);
        if (p->partitions > 0)
            return 0;
        usleep(200000);
    }
    fprintf(stderr, "hps-push: no metadata for topic %s from %s\n", rd_kafka_topic_name(p->rkt),
            p->o.brokers);
    return 1;
}

static int open_producer(push_t *p, const char *topic)
{
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (configure(p, conf)) {
        rd_kafka_conf_destroy(conf);
        return 1;
    }
    p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!p->rk) {
        fprintf(stderr, "hps-push: %s\n", err);
        rd_kafka_conf_destroy(conf);
        return 1;
    }
    p->rkt = rd_kafka_topic_new(p->rk, topic, NULL);
    return p->rkt ? fetch_partitions(p) : 1;
}

static void progress(push_t *p, bool last)
{
    double t = now_s();
    if (p->o.quiet || (!last && t - p->last_progress < 1.0))
        return;
    p->last_progress = t;
    double dt = t - p->t0 > 0 ? t - p->t0 : 1e-9;
    fprintf(stderr,
            "hps-push: %llu updates, %llu messages, %llu delivered, %.0f updates/s, "
            "%.1f MB/s\n",
            (unsigned long long)p->updates, (unsigned long long)p->produced,
            (unsigned long long)p->delivered, (double)p->updates / dt, (double)p->bytes / dt / 1e6);
}

/* Produce one buffer (ownership passes to librdkafka); bounded in flight. */
static int produce(push_t *p, uint8_t *buf, size_t len, int32_t part, const char *key)
{
    while (p->produced - p->delivered - p->failed >= p->o.num_buffers)
        rd_kafka_poll(p->rk, 10);
    size_t klen = key ? strlen(key) : 0;
    while (rd_kafka_produce(p->rkt, part, RD_KAFKA_MSG_F_FREE, buf, len, key, klen, NULL) != 0) {
        if (rd_kafka_last_error() != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            fprintf(stderr, "hps-push: produce: %s\n", rd_kafka_err2str(rd_kafka_last_error()));
            free(buf);
            return 1;
        }
        rd_kafka_poll(p->rk, 50); /* HugeCTR: retry after 50 ms on QUEUE_FULL */
    }
    p->produced++;
    p->bytes += len;
    rd_kafka_poll(p->rk, 0);
    progress(p, false);
    return 0;
}

static int send_group(push_t *p, uint32_t g)
{
    group_buf_t *gb = &p->groups[g];
    if (gb->len <= HPS_KAFKA_HEADER_SIZE)
        return 0;
    uint8_t *buf = gb->buf;
    size_t len = gb->len;
    gb->buf = NULL;
    gb->len = 0;
    return produce(p, buf, len, hps_kafka_partition_of(g, p->partitions), NULL);
}

static int add_record(push_t *p, uint64_t key, const void *keyp, const float *vec)
{
    uint32_t g = hps_kafka_key_group(key, p->o.num_groups);
    group_buf_t *gb = &p->groups[g];
    size_t vs = (size_t)p->o.dim * 4, rec = p->o.key_bytes + vs;
    if (gb->buf && gb->len + rec > p->o.send_buffer_size && send_group(p, g))
        return 1;
    if (!gb->buf) {
        if (!(gb->buf = malloc(p->o.send_buffer_size)))
            return 1;
        uint32_t hdr[2] = {HPS_KAFKA_MAGIC, (uint32_t)vs};
        memcpy(gb->buf, hdr, sizeof(hdr));
        gb->len = HPS_KAFKA_HEADER_SIZE;
    }
    memcpy(gb->buf + gb->len, keyp, p->o.key_bytes);
    memcpy(gb->buf + gb->len + p->o.key_bytes, vec, vs);
    gb->len += rec;
    p->updates++;
    return 0;
}

/* ---- sources ------------------------------------------------------------ */

static int push_stdin(push_t *p)
{
    size_t vs = (size_t)p->o.dim * 4, rec = p->o.key_bytes + vs;
    uint8_t *r = malloc(rec);
    float *vec = malloc(vs);
    int rc = r && vec ? 0 : 1;
    size_t got;
    while (!rc && (got = fread(r, 1, rec, stdin)) == rec) {
        uint64_t key = 0;
        memcpy(&key, r, p->o.key_bytes); /* little-endian host: zero-extends u32 */
        memcpy(vec, r + p->o.key_bytes, vs);
        rc = add_record(p, key, r, vec);
    }
    if (!rc && got != 0 && got != rec) {
        fprintf(stderr, "hps-push: stdin ends inside a record (%zu of %zu bytes)\n", got, rec);
        rc = 1;
    }
    free(r);
    free(vec);
    return rc;
}

static int push_chunk(push_t *p, const int64_t *keys, const float *vecs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t k32 = (uint32_t)keys[i];
        const void *kp = p->o.key_bytes == 8 ? (const void *)&keys[i] : (const void *)&k32;
        uint64_t key = p->o.key_bytes == 8 ? (uint64_t)keys[i] : k32;
        if (add_record(p, key, kp, vecs + i * p->o.dim))
            return 1;
    }
    return 0;
}

static int push_dir(push_t *p)
{
    char err[512];
    hps_modelfile_t *mf;
    if (hps_modelfile_open(p->o.dir, p->o.dim, &mf, err, sizeof(err)) < 0) {
        fprintf(stderr, "hps-push: %s\n", err);
        return 1;
    }
    uint64_t rows = hps_modelfile_rows(mf), chunk = hps_modelfile_chunk_rows(mf, 64ull << 20);
    int64_t *keys = malloc(chunk * sizeof(int64_t));
    float *vecs = malloc(chunk * p->o.dim * sizeof(float));
    int rc = keys && vecs ? 0 : 1;
    for (uint64_t row = 0; !rc && row < rows; row += chunk) {
        size_t n = (size_t)(rows - row < chunk ? rows - row : chunk);
        if (hps_modelfile_read(mf, row, n, keys, vecs, err, sizeof(err)) < 0) {
            fprintf(stderr, "hps-push: %s\n", err);
            rc = 1;
        } else {
            rc = push_chunk(p, keys, vecs, n);
        }
    }
    free(keys);
    free(vecs);
    hps_modelfile_close(mf);
    return rc;
}

static int push_raw(push_t *p)
{
    size_t cap = 1 << 16, len = 0, got;
    uint8_t *buf = malloc(cap);
    while (buf && (got = fread(buf + len, 1, cap - len, stdin)) > 0) {
        len += got;
        if (len == cap) {
            uint8_t *g = realloc(buf, cap *= 2);
            if (!g)
                break;
            buf = g;
        }
    }
    if (!buf)
        return 1;
    p->updates = 0;
    return produce(p, buf, len, p->o.partition, p->o.msg_key);
}

/* ---- main --------------------------------------------------------------- */

static int finish(push_t *p)
{
    for (uint32_t g = 0; g < p->o.num_groups; g++)
        if (send_group(p, g))
            return 1;
    while (rd_kafka_outq_len(p->rk) > 0)
        rd_kafka_flush(p->rk, 5000); /* until nothing is left; message.timeout.ms bounds it */
    progress(p, true);
    double dt = now_s() - p->t0;
    printf("hps-push: %s: %llu updates in %llu messages, %llu delivered, %llu failed, %.3f s, "
           "%.0f updates/s\n",
           rd_kafka_topic_name(p->rkt), (unsigned long long)p->updates,
           (unsigned long long)p->produced, (unsigned long long)p->delivered,
           (unsigned long long)p->failed, dt, dt > 0 ? (double)p->updates / dt : 0.0);
    return p->failed == 0 && p->delivered == p->produced ? 0 : 1;
}

int main(int argc, char **argv)
{
    push_t p = {0};
    int rc = parse_args(argc, argv, &p.o);
    if (rc)
        return rc;
    char topic[HPS_KAFKA_TOPIC_MAX];
    if (!p.o.topic && hps_kafka_topic_name(p.o.model ? p.o.model : "", p.o.table ? p.o.table : "",
                                           topic, sizeof(topic)) < 0) {
        fprintf(stderr, "hps-push: model and table names must be [a-zA-Z0-9_-]{1,120}\n");
        return 2;
    }
    p.groups = calloc(p.o.num_groups, sizeof(group_buf_t));
    p.t0 = p.last_progress = now_s();
    rc = !p.groups || open_producer(&p, p.o.topic ? p.o.topic : topic);
    if (!rc)
        rc = p.o.raw ? push_raw(&p) : p.o.dir ? push_dir(&p) : push_stdin(&p);
    if (p.rk)
        rc = finish(&p) || rc;
    for (uint32_t g = 0; p.groups && g < p.o.num_groups; g++)
        free(p.groups[g].buf);
    free(p.groups);
    if (p.rkt)
        rd_kafka_topic_destroy(p.rkt);
    if (p.rk)
        rd_kafka_destroy(p.rk);
    return rc ? 1 : 0;
}
