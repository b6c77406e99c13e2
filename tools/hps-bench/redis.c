/*
 * redis.c -- the Redis yardstick: a private redis-server holding the model
 * in HugeCTR's Redis layout (reference/hugectr-hps.md section 3), and a
 * client that answers one request the way HugeCTR's RedisClusterBackend
 * fetches it.
 *
 * Layout: per table and partition p one hash
 *     hps_et{hps_et.<model>.<table>/p<p>}v
 * with field = the raw key bytes (key_bytes of them, little-endian) and
 * value = the raw float32 vector; p = hps_rrxmrrxmsx_0(key) % partitions.
 *
 * A request (T*B keys, table-major): group each table's keys by partition,
 * append one HMGET per non-empty (table, partition) to the connection's
 * pipeline, then read the replies in order and copy every vector into the
 * output (table blocks, input order, the default value for a nil).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hps-bench.h"
#include "hps_build_config.h"
#include "hps/hps.h"
#include "hps/modelfile.h"

#if HPS_HAVE_REDIS
#include <hiredis/hiredis.h>

#define LOAD_CHUNK    65536u /* rows read from the files at a time */
#define LOAD_FIELDS   256u   /* key/value pairs per HSET */
#define LOAD_PIPELINE 64u    /* HSETs in flight before draining the replies */

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &al) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static redisContext *connect_redis(int port)
{
    struct timeval tv = {30, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, (struct timeval){2, 0});
    if (!c || c->err) {
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

static void info_field(redisContext *c, const char *section, const char *field, char *out, size_t n)
{
    redisReply *r = redisCommand(c, "INFO %s", section);
    char pat[64];
    out[0] = 0;
    snprintf(pat, sizeof(pat), "%s:", field);
    if (r && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, pat);
        if (p)
            snprintf(out, n, "%.*s", (int)strcspn(p + strlen(pat), "\r\n"), p + strlen(pat));
    }
    freeReplyObject(r);
}

int hb_redis_start(hb_redis_t *r, char *err, size_t n)
{
    char ps[16];
    r->port = free_port();
    if (r->port < 0) {
        snprintf(err, n, "no free TCP port");
        return -1;
    }
    snprintf(ps, sizeof(ps), "%d", r->port);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, n, "fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the benchmark */
        int nul = open("/dev/null", O_RDWR);
        if (nul >= 0) {
            dup2(nul, 0), dup2(nul, 1), dup2(nul, 2);
        }
        execlp("redis-server", "redis-server", "--port", ps, "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", (char *)NULL);
        _exit(127);
    }
    r->pid = pid;
    for (int i = 0; i < 1000; i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            r->pid = 0;
            snprintf(err, n, "redis-server exited at start (not installed?)");
            return -1;
        }
        redisContext *c = connect_redis(r->port);
        if (c) {
            redisReply *rep = redisCommand(c, "PING");
            bool ok = rep && rep->type == REDIS_REPLY_STATUS;
            freeReplyObject(rep);
            if (ok)
                info_field(c, "server", "redis_version", r->version, sizeof(r->version));
            redisFree(c);
            if (ok)
                return 0;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    snprintf(err, n, "redis-server did not answer PING within 10 s");
    hb_redis_stop(r);
    return -1;
}

void hb_redis_stop(hb_redis_t *r)
{
    if (r->pid > 0) {
        kill(r->pid, SIGTERM);
        waitpid(r->pid, NULL, 0);
    }
    r->pid = 0;
}

static void hkey(char *buf, size_t n, const hb_model_t *m, uint32_t t, unsigned p)
{
    snprintf(buf, n, "hps_et{hps_et.%s.%s/p%u}v", m->name, m->tables[t].name, p);
}

static int drain(redisContext *c, unsigned *pending, char *err, size_t n)
{
    for (; *pending > 0; (*pending)--) {
        redisReply *rep = NULL;
        if (redisGetReply(c, (void **)&rep) != REDIS_OK || !rep) {
            snprintf(err, n, "redis: HSET: %s", c->errstr);
            return -1;
        }
        bool bad = rep->type == REDIS_REPLY_ERROR;
        if (bad)
            snprintf(err, n, "redis: HSET: %s", rep->str);
        freeReplyObject(rep);
        if (bad)
            return -1;
    }
    return 0;
}

/* Append HSETs for `cnt` rows (indices idx) of one partition. */
static int load_group(redisContext *c, const char *key, const int64_t *keys, const float *vecs,
                      uint32_t dim, uint32_t kb, const uint32_t *idx, size_t cnt, unsigned *pending,
                      char *err, size_t n)
{
    const char *argv[2 + 2 * LOAD_FIELDS];
    size_t argl[2 + 2 * LOAD_FIELDS];
    argv[0] = "HSET", argl[0] = 4;
    argv[1] = key, argl[1] = strlen(key);
    for (size_t s = 0; s < cnt; s += LOAD_FIELDS) {
        size_t m = cnt - s < LOAD_FIELDS ? cnt - s : LOAD_FIELDS;
        for (size_t j = 0; j < m; j++) {
            uint32_t i = idx[s + j];
            argv[2 + 2 * j] = (const char *)&keys[i], argl[2 + 2 * j] = kb; /* LE: low bytes */
            argv[3 + 2 * j] = (const char *)&vecs[(size_t)i * dim], argl[3 + 2 * j] = 4ull * dim;
        }
        redisAppendCommandArgv(c, (int)(2 + 2 * m), argv, argl);
        if (++*pending >= LOAD_PIPELINE && drain(c, pending, err, n) < 0)
            return -1;
    }
    return 0;
}

static int load_table(hb_redis_t *r, redisContext *c, uint32_t t, int64_t *keys, float *vecs,
                      uint32_t *idx, uint32_t *start, char *err, size_t n)
{
    const hb_table_t *tb = &r->m->tables[t];
    const unsigned P = r->partitions;
    char e[512], key[300];
    hps_modelfile_t *mf;
    unsigned pending = 0;
    if (hps_modelfile_open(tb->dir, tb->dim, &mf, e, sizeof(e)) < 0) {
        snprintf(err, n, "%s", e);
        return -1;
    }
    int rc = 0;
    for (uint64_t row = 0; rc == 0 && row < tb->rows; row += LOAD_CHUNK) {
        size_t k = (size_t)(tb->rows - row < LOAD_CHUNK ? tb->rows - row : LOAD_CHUNK);
        if (hps_modelfile_read(mf, row, k, keys, vecs, e, sizeof(e)) < 0) {
            snprintf(err, n, "%s", e);
            rc = -1;
            break;
        }
        /* Counting sort of the chunk's rows by partition. */
        memset(start, 0, (P + 1) * sizeof(uint32_t));
        for (size_t i = 0; i < k; i++)
            start[hps_rrxmrrxmsx_0((uint64_t)keys[i]) % P + 1]++;
        for (unsigned p = 0; p < P; p++)
            start[p + 1] += start[p];
        for (size_t i = 0; i < k; i++)
            idx[start[hps_rrxmrrxmsx_0((uint64_t)keys[i]) % P]++] = (uint32_t)i;
        for (unsigned p = P; p > 0; p--) /* start[p] now ends p: shift back */
            start[p] = start[p - 1];
        start[0] = 0;
        for (unsigned p = 0; rc == 0 && p < P; p++) {
            hkey(key, sizeof(key), r->m, t, p);
            rc = load_group(c, key, keys, vecs, tb->dim, r->m->key_bytes, idx + start[p],
                            start[p + 1] - start[p], &pending, err, n);
        }
    }
    if (rc == 0)
        rc = drain(c, &pending, err, n);
    hps_modelfile_close(mf);
    return rc;
}

int hb_redis_load(hb_redis_t *r, char *err, size_t n)
{
    uint32_t maxdim = 1;
    for (uint32_t t = 0; t < r->m->num_tables; t++)
        maxdim = r->m->tables[t].dim > maxdim ? r->m->tables[t].dim : maxdim;
    redisContext *c = connect_redis(r->port);
    int64_t *keys = malloc(LOAD_CHUNK * sizeof(int64_t));
    float *vecs = malloc((size_t)LOAD_CHUNK * maxdim * sizeof(float));
    uint32_t *idx = malloc(LOAD_CHUNK * sizeof(uint32_t));
    uint32_t *start = malloc((r->partitions + 1) * sizeof(uint32_t));
    int rc = c && keys && vecs && idx && start ? 0 : -1;
    if (rc < 0)
        snprintf(err, n, c ? "out of memory" : "cannot connect to redis-server");
    if (rc == 0)
        freeReplyObject(redisCommand(c, "FLUSHALL"));
    double t0 = hb_now_s();
    for (uint32_t t = 0; rc == 0 && t < r->m->num_tables; t++)
        rc = load_table(r, c, t, keys, vecs, idx, start, err, n);
    r->load_s = hb_now_s() - t0;
    r->rows_loaded = 0;
    for (uint32_t t = 0; rc == 0 && t < r->m->num_tables; t++) {
        for (unsigned p = 0; p < r->partitions; p++) {
            char key[300];
            hkey(key, sizeof(key), r->m, t, p);
            redisReply *rep = redisCommand(c, "HLEN %s", key);
            if (rep && rep->type == REDIS_REPLY_INTEGER)
                r->rows_loaded += (uint64_t)rep->integer;
            freeReplyObject(rep);
        }
    }
    if (rc == 0) {
        char v[32];
        info_field(c, "memory", "used_memory", v, sizeof(v));
        r->used_memory = strtoull(v, NULL, 10);
    }
    redisFree(c);
    free(keys);
    free(vecs);
    free(idx);
    free(start);
    return rc;
}

/* ---- Client -------------------------------------------------------------- */

typedef struct redis_conn {
    const hb_redis_t *r;
    redisContext *c;
    uint32_t T, B, P;
    char (*hkeys)[300]; /* (T * P) hash names */
    size_t *hkey_len;
    uint32_t *cnt;     /* (T * P + 1) keys per group, then starts */
    uint32_t *order;   /* (T * B) key index (within its table) in group order */
    const char **argv; /* (B + 2) */
    size_t *argl;
    float *out;   /* (B * dim_sum) */
    size_t *toff; /* (T) float offset of each table's block */
} redis_conn_t;

static void redis_close(void *conn)
{
    redis_conn_t *c = conn;
    if (!c)
        return;
    redisFree(c->c);
    free(c->hkeys);
    free(c->hkey_len);
    free(c->cnt);
    free(c->order);
    free(c->argv);
    free(c->argl);
    free(c->out);
    free(c->toff);
    free(c);
}

static void *redis_open(void *ctx, unsigned tid, char *err, size_t n)
{
    (void)tid;
    const hb_redis_t *r = ctx;
    redis_conn_t *c = calloc(1, sizeof(*c));
    if (!c) {
        snprintf(err, n, "out of memory");
        return NULL;
    }
    c->r = r;
    c->T = r->rf->T, c->B = r->rf->B, c->P = r->partitions;
    size_t g = (size_t)c->T * c->P;
    c->c = connect_redis(r->port);
    c->hkeys = malloc(g * sizeof(*c->hkeys));
    c->hkey_len = malloc(g * sizeof(size_t));
    c->cnt = malloc((g + 1) * sizeof(uint32_t));
    c->order = malloc((size_t)c->T * c->B * sizeof(uint32_t));
    c->argv = malloc((c->B + 2) * sizeof(char *));
    c->argl = malloc((c->B + 2) * sizeof(size_t));
    c->out = malloc((size_t)c->B * r->m->dim_sum * sizeof(float));
    c->toff = malloc(c->T * sizeof(size_t));
    if (!c->c || !c->hkeys || !c->hkey_len || !c->cnt || !c->order || !c->argv || !c->argl ||
        !c->out || !c->toff) {
        snprintf(err, n, c->c ? "out of memory" : "cannot connect to redis-server");
        redis_close(c);
        return NULL;
    }
    size_t off = 0;
    for (uint32_t t = 0; t < c->T; t++) {
        c->toff[t] = off;
        off += (size_t)c->B * r->m->tables[t].dim;
        for (uint32_t p = 0; p < c->P; p++) {
            hkey(c->hkeys[t * c->P + p], sizeof(c->hkeys[0]), r->m, t, p);
            c->hkey_len[t * c->P + p] = strlen(c->hkeys[t * c->P + p]);
        }
    }
    return c;
}

/* Copy one HMGET reply's vectors to their rows of the output. */
static int take_reply(redis_conn_t *c, const redisReply *rep, uint32_t t, const uint32_t *ord,
                      uint32_t m, char *err, size_t n)
{
    const hb_table_t *tb = &c->r->m->tables[t];
    size_t rb = 4ull * tb->dim;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != m) {
        snprintf(err, n, "redis: HMGET replied type %d with %zu elements, expected %u", rep->type,
                 rep->type == REDIS_REPLY_ARRAY ? rep->elements : 0, m);
        return -1;
    }
    for (uint32_t j = 0; j < m; j++) {
        const redisReply *e = rep->element[j];
        float *row = c->out + c->toff[t] + (size_t)ord[j] * tb->dim;
        if (e->type == REDIS_REPLY_STRING && e->len == rb) {
            memcpy(row, e->str, rb);
        } else if (e->type == REDIS_REPLY_NIL) {
            for (uint32_t d = 0; d < tb->dim; d++)
                row[d] = tb->default_value;
        } else {
            snprintf(err, n, "redis: HMGET element of type %d, %zu bytes (expected %zu)", e->type,
                     e->type == REDIS_REPLY_STRING ? e->len : 0, rb);
            return -1;
        }
    }
    return 0;
}

static int redis_request(void *conn, const int64_t *keys, const void **ret_out, char *err, size_t n)
{
    redis_conn_t *c = conn;
    const uint32_t T = c->T, B = c->B, P = c->P, kb = c->r->m->key_bytes;
    const size_t G = (size_t)T * P;
    /* Group by (table, partition): counting sort into order[]. */
    memset(c->cnt, 0, (G + 1) * sizeof(uint32_t));
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t i = 0; i < B; i++)
            c->cnt[t * P + hps_rrxmrrxmsx_0((uint64_t)keys[(size_t)t * B + i]) % P + 1]++;
    for (size_t g = 0; g < G; g++)
        c->cnt[g + 1] += c->cnt[g];
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t i = 0; i < B; i++)
            c->order[c->cnt[t * P + hps_rrxmrrxmsx_0((uint64_t)keys[(size_t)t * B + i]) % P]++] = i;
    for (size_t g = G; g > 0; g--) /* back to group starts */
        c->cnt[g] = c->cnt[g - 1];
    c->cnt[0] = 0;
    /* One HMGET per non-empty group, all pipelined. */
    c->argv[0] = "HMGET", c->argl[0] = 5;
    unsigned sent = 0;
    for (size_t g = 0; g < G; g++) {
        uint32_t s = c->cnt[g], m = c->cnt[g + 1] - s, t = (uint32_t)(g / P);
        if (m == 0)
            continue;
        c->argv[1] = c->hkeys[g], c->argl[1] = c->hkey_len[g];
        for (uint32_t j = 0; j < m; j++) {
            c->argv[2 + j] = (const char *)&keys[(size_t)t * B + c->order[s + j]];
            c->argl[2 + j] = kb;
        }
        if (redisAppendCommandArgv(c->c, (int)(2 + m), c->argv, c->argl) != REDIS_OK) {
            snprintf(err, n, "redis: %s", c->c->errstr);
            return -1;
        }
        sent++;
    }
    int rc = 0;
    for (size_t g = 0; g < G && sent > 0; g++) {
        uint32_t s = c->cnt[g], m = c->cnt[g + 1] - s;
        if (m == 0)
            continue;
        redisReply *rep = NULL;
        sent--;
        if (redisGetReply(c->c, (void **)&rep) != REDIS_OK || !rep) {
            snprintf(err, n, "redis: %s", c->c->errstr);
            return -1; /* the context is unusable now; later requests fail too */
        }
        if (rc == 0)
            rc = take_reply(c, rep, (uint32_t)(g / P), c->order + s, m, err, n);
        freeReplyObject(rep);
    }
    if (rc == 0 && ret_out)
        *ret_out = c->out;
    return rc;
}

const hb_client_t hb_redis_client = {
    .name = "redis",
    .open = redis_open,
    .close = redis_close,
    .request = redis_request,
};

#else /* !HPS_HAVE_REDIS */

int hb_redis_start(hb_redis_t *r, char *err, size_t n)
{
    (void)r;
    snprintf(err, n, "hps-bench was built without hiredis");
    return -1;
}

void hb_redis_stop(hb_redis_t *r)
{
    (void)r;
}

int hb_redis_load(hb_redis_t *r, char *err, size_t n)
{
    (void)r;
    snprintf(err, n, "hps-bench was built without hiredis");
    return -1;
}

const hb_client_t hb_redis_client = {.name = "redis"};

#endif
