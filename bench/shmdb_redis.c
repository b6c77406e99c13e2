/*
 * shmdb_redis.c -- the Redis baseline of bench-shmdb: a local redis-server
 * (started and stopped here) holding the rows in HugeCTR's layout, one hash
 * per partition, field = raw 8-byte key, value = raw floats; loaded by
 * pipelined HSET and read with one pipelined HMGET per partition per batch,
 * one connection per thread.  fp32 tables only.  Built without hiredis
 * (HPS_HAVE_REDIS 0) it only reports Redis as skipped.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hps_build_config.h"
#include "bench/benchutil.h"
#include "bench/shmdb.h"
#include "hps/hps.h"
#include "hps/shmdb.h"

#if HPS_HAVE_REDIS
#include <hiredis/hiredis.h>
#endif

/* ------------------------------------------------------------------------ */
/* Redis                                                                      */
/* ------------------------------------------------------------------------ */

#if HPS_HAVE_REDIS

static bool find_in_path(const char *prog)
{
    const char *path = getenv("PATH");
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", path ? path : "/usr/bin:/bin");
    for (char *save = NULL, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        char full[4200];
        snprintf(full, sizeof(full), "%s/%s", d, prog);
        if (access(full, X_OK) == 0)
            return true;
    }
    return false;
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static pid_t spawn_redis(int port)
{
    char ps[16];
    snprintf(ps, sizeof(ps), "%d", port);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    setpgid(0, 0); /* keep the terminal's SIGINT away: we stop it ourselves */
    int nul = open("/dev/null", O_RDWR);
    dup2(nul, 1);
    dup2(nul, 2);
    execlp("redis-server", "redis-server", "--port", ps, "--save", "", "--appendonly", "no",
           "--bind", "127.0.0.1", (char *)NULL);
    _exit(127);
}

static redisContext *redis_connect(int port)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c && c->err) {
        redisFree(c);
        return NULL;
    }
    return c;
}

static bool redis_ping(int port)
{
    redisContext *c = redis_connect(port);
    if (!c)
        return false;
    redisReply *r = redisCommand(c, "PING");
    bool ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return ok;
}

/** INFO <section> field as a string (empty if absent). */
static void redis_info(int port, const char *section, const char *field, char *out, size_t n)
{
    out[0] = 0;
    redisContext *c = redis_connect(port);
    redisReply *r = c ? redisCommand(c, "INFO %s", section) : NULL;
    if (r && r->type == REDIS_REPLY_STRING) {
        char pat[64];
        snprintf(pat, sizeof(pat), "%s:", field);
        const char *p = strstr(r->str, pat);
        if (p)
            sscanf(p + strlen(pat), "%31[^\r\n]", out);
    }
    if (r)
        freeReplyObject(r);
    if (c)
        redisFree(c);
    (void)n;
}

redis_srv_t bshm_redis_start(void)
{
    redis_srv_t rs = {0};
    if (!find_in_path("redis-server")) {
        snprintf(rs.why, sizeof(rs.why), "redis-server not found");
        return rs;
    }
    rs.port = free_port();
    bshm_redis_pid = spawn_redis(rs.port);
    for (int i = 0; i < 200 && !rs.up; i++) {
        if (waitpid(bshm_redis_pid, NULL, WNOHANG) == bshm_redis_pid) {
            bshm_redis_pid = 0;
            snprintf(rs.why, sizeof(rs.why), "redis-server exited at start");
            return rs;
        }
        rs.up = redis_ping(rs.port);
        if (!rs.up)
            usleep(50000);
    }
    if (!rs.up)
        snprintf(rs.why, sizeof(rs.why), "redis-server did not answer PING within 10 s");
    else
        redis_info(rs.port, "server", "redis_version", rs.version, sizeof(rs.version));
    return rs;
}

void bshm_redis_stop(redis_srv_t *rs)
{
    if (bshm_redis_pid > 0) {
        kill(bshm_redis_pid, SIGTERM);
        waitpid(bshm_redis_pid, NULL, 0);
    }
    bshm_redis_pid = 0;
    rs->up = false;
}

static void redis_hkey(char *buf, size_t n, unsigned dim, unsigned part)
{
    snprintf(buf, n, "hps_et{hps_et." MODEL_NAME ".emb_d%u/p%u}v", dim, part);
}

static unsigned part_of(int64_t key)
{
    return (unsigned)(hps_rrxmrrxmsx_0((uint64_t)key) % bshm_opt.partitions);
}

static void redis_drain(redisContext *c, unsigned pending, uint64_t *added)
{
    for (unsigned i = 0; i < pending; i++) {
        redisReply *r = NULL;
        if (redisGetReply(c, (void **)&r) != REDIS_OK || !r)
            bench_die("redis: HSET: %s", c->errstr);
        if (r->type != REDIS_REPLY_INTEGER)
            bench_die("redis: HSET replied type %d (%s)", r->type, r->str ? r->str : "");
        *added += (uint64_t)r->integer;
        freeReplyObject(r);
    }
}

/** Pipelined HSET hkey k1 v1 ... kn vn for the rows (idx) of one partition. */
static void redis_load_part(redisContext *c, unsigned dim, unsigned part, const float *flat,
                            const uint32_t *idx, size_t n, uint64_t *added)
{
    enum { PAIRS = 256, PIPE = 32 };
    static const char *argv[2 + 2 * PAIRS];
    static size_t argl[2 + 2 * PAIRS];
    char hkey[256];
    redis_hkey(hkey, sizeof(hkey), dim, part);
    argv[0] = "HSET", argl[0] = 4;
    argv[1] = hkey, argl[1] = strlen(hkey);
    unsigned pending = 0;
    for (size_t i = 0; i < n; i += PAIRS) {
        size_t m = n - i < PAIRS ? n - i : PAIRS;
        for (size_t k = 0; k < m; k++) {
            uint32_t r = idx[i + k];
            argv[2 + 2 * k] = (const char *)&bshm_wl.keys[r], argl[2 + 2 * k] = 8;
            argv[3 + 2 * k] = (const char *)(flat + (size_t)r * dim), argl[3 + 2 * k] = 4 * dim;
        }
        redisAppendCommandArgv(c, (int)(2 + 2 * m), argv, argl);
        if (++pending == PIPE) {
            redis_drain(c, pending, added);
            pending = 0;
        }
    }
    redis_drain(c, pending, added);
}

/** Row indexes grouped by partition (counting sort); start has parts + 1 entries. */
static uint32_t *group_rows(size_t *start)
{
    unsigned np = bshm_opt.partitions;
    uint32_t *order = bench_xmalloc(bshm_wl.rows * sizeof(uint32_t));
    memset(start, 0, (np + 1) * sizeof(size_t));
    for (uint64_t i = 0; i < bshm_wl.rows; i++)
        start[part_of(bshm_wl.keys[i]) + 1]++;
    for (unsigned p = 0; p < np; p++)
        start[p + 1] += start[p];
    size_t *fill = bench_xmalloc(np * sizeof(size_t));
    memcpy(fill, start, np * sizeof(size_t));
    for (uint64_t i = 0; i < bshm_wl.rows; i++)
        order[fill[part_of(bshm_wl.keys[i])]++] = (uint32_t)i;
    free(fill);
    return order;
}

static uint64_t redis_u64(int port, const char *section, const char *field)
{
    char s[32];
    redis_info(port, section, field, s, sizeof(s));
    return strtoull(s, NULL, 10);
}

static uint64_t redis_rows(redisContext *c, unsigned dim)
{
    uint64_t rows = 0;
    for (unsigned p = 0; p < bshm_opt.partitions; p++) {
        char hkey[256];
        redis_hkey(hkey, sizeof(hkey), dim, p);
        redisReply *r = redisCommand(c, "HLEN %s", hkey);
        if (r && r->type == REDIS_REPLY_INTEGER)
            rows += (uint64_t)r->integer;
        if (r)
            freeReplyObject(r);
    }
    return rows;
}

static redis_load_t redis_load(const redis_srv_t *rs, unsigned dim, const float *flat)
{
    redis_load_t rl = {0};
    redisContext *c = redis_connect(rs->port);
    if (!c)
        bench_die("redis: cannot connect to 127.0.0.1:%d", rs->port);
    freeReplyObject(redisCommand(c, "FLUSHALL"));
    rl.mem_base = redis_u64(rs->port, "memory", "used_memory");
    size_t start[HPS_SHMDB_MAX_PARTITIONS + 1];
    uint32_t *order = group_rows(start);
    uint64_t added = 0;
    double t0 = bench_now_s();
    for (unsigned p = 0; p < bshm_opt.partitions; p++)
        redis_load_part(c, dim, p, flat, order + start[p], start[p + 1] - start[p], &added);
    rl.load_s = bench_now_s() - t0;
    rl.rows = redis_rows(c, dim);
    rl.mem_bytes = redis_u64(rs->port, "memory", "used_memory");
    rl.done = true;
    free(order);
    redisFree(c);
    return rl;
}

/** Per-thread state of the Redis reader: its connection and scratch arrays. */
typedef struct redis_conn {
    redisContext *c;
    const char **argv;
    size_t *argl;
    unsigned *part;  /* (batch) partition of each query key */
    uint32_t *order; /* (batch) query positions grouped by partition */
    size_t start[HPS_SHMDB_MAX_PARTITIONS + 1];
    char hkey[HPS_SHMDB_MAX_PARTITIONS][128];
} redis_conn_t;

typedef struct redis_ctx {
    unsigned dim;
    unsigned nconn;
    redis_conn_t conn[MAX_THREADS];
} redis_ctx_t;

static void redis_group(redis_conn_t *rc, const int64_t *keys)
{
    unsigned np = bshm_opt.partitions, n = bshm_wl.batch;
    size_t fill[HPS_SHMDB_MAX_PARTITIONS];
    memset(rc->start, 0, (np + 1) * sizeof(size_t));
    for (unsigned q = 0; q < n; q++) {
        rc->part[q] = part_of(keys[q]);
        rc->start[rc->part[q] + 1]++;
    }
    for (unsigned p = 0; p < np; p++)
        fill[p] = rc->start[p + 1] += rc->start[p];
    for (unsigned p = np; p-- > 0;)
        fill[p] = rc->start[p];
    for (unsigned q = 0; q < n; q++)
        rc->order[fill[rc->part[q]]++] = q;
}

static void redis_send(redis_conn_t *rc, const int64_t *keys)
{
    for (unsigned p = 0; p < bshm_opt.partitions; p++) {
        size_t s = rc->start[p], m = rc->start[p + 1] - s;
        if (m == 0)
            continue;
        rc->argv[1] = rc->hkey[p], rc->argl[1] = strlen(rc->hkey[p]);
        for (size_t k = 0; k < m; k++)
            rc->argv[2 + k] = (const char *)&keys[rc->order[s + k]], rc->argl[2 + k] = 8;
        redisAppendCommandArgv(rc->c, (int)(2 + m), rc->argv, rc->argl);
    }
}

/** Copy one HMGET reply into out; returns hits, or -1 on a malformed reply. */
static int redis_parse(const redisReply *r, const uint32_t *order, size_t m, unsigned dim,
                       float *out, uint8_t *found)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != m)
        return -1;
    int hits = 0;
    for (size_t k = 0; k < m; k++) {
        const redisReply *e = r->element[k];
        uint32_t q = order[k];
        found[q] = e->type == REDIS_REPLY_STRING && e->len == (size_t)dim * 4;
        if (found[q]) {
            memcpy(out + (size_t)q * dim, e->str, (size_t)dim * 4);
            hits++;
        }
    }
    return hits;
}

static int redis_batch(void *p, unsigned tid, size_t b, void *out, uint8_t *found)
{
    redis_ctx_t *ctx = p;
    redis_conn_t *rc = &ctx->conn[tid];
    const int64_t *keys = &bshm_wl.qkeys[b * bshm_wl.batch];
    redis_group(rc, keys);
    redis_send(rc, keys);
    int hits = 0;
    for (unsigned part = 0; part < bshm_opt.partitions; part++) {
        size_t s = rc->start[part], m = rc->start[part + 1] - s;
        if (m == 0)
            continue;
        redisReply *r = NULL;
        if (redisGetReply(rc->c, (void **)&r) != REDIS_OK || !r)
            return HPS_EIO;
        int h = redis_parse(r, rc->order + s, m, ctx->dim, out, found);
        freeReplyObject(r);
        if (h < 0)
            return HPS_ECORRUPT;
        hits += h;
    }
    return hits;
}

static void redis_conn_open(redis_conn_t *rc, int port, unsigned dim)
{
    rc->c = redis_connect(port);
    if (!rc->c)
        bench_die("redis: cannot connect to 127.0.0.1:%d", port);
    rc->argv = bench_xmalloc((2 + bshm_wl.batch) * sizeof(char *));
    rc->argl = bench_xmalloc((2 + bshm_wl.batch) * sizeof(size_t));
    rc->part = bench_xmalloc(bshm_wl.batch * sizeof(unsigned));
    rc->order = bench_xmalloc(bshm_wl.batch * sizeof(uint32_t));
    rc->argv[0] = "HMGET", rc->argl[0] = 5;
    for (unsigned p = 0; p < bshm_opt.partitions; p++)
        redis_hkey(rc->hkey[p], sizeof(rc->hkey[p]), dim, p);
}

static void redis_conn_close(redis_conn_t *rc)
{
    redisFree(rc->c);
    free(rc->argv);
    free(rc->argl);
    free(rc->part);
    free(rc->order);
}

static redis_ctx_t *redis_ctx_open(const redis_srv_t *rs, unsigned dim)
{
    redis_ctx_t *ctx = bench_xmalloc(sizeof(*ctx));
    memset(ctx, 0, sizeof(*ctx));
    ctx->dim = dim;
    for (unsigned i = 0; i < bshm_opt.nthreads; i++)
        ctx->nconn = bshm_opt.threads[i] > ctx->nconn ? bshm_opt.threads[i] : ctx->nconn;
    for (unsigned t = 0; t < ctx->nconn; t++)
        redis_conn_open(&ctx->conn[t], rs->port, dim);
    return ctx;
}

static void redis_ctx_close(redis_ctx_t *ctx)
{
    for (unsigned t = 0; t < ctx->nconn; t++)
        redis_conn_close(&ctx->conn[t]);
    free(ctx);
}

static void redis_flush(const redis_srv_t *rs)
{
    redisContext *c = redis_connect(rs->port);
    if (c) {
        freeReplyObject(redisCommand(c, "FLUSHALL"));
        redisFree(c);
    }
}

/** Load the rows into redis, check and time it at dim: the redis part of d, and rl. */
void bshm_redis_run(const redis_srv_t *rs, unsigned dim, const float *flat, dim_results_t *d,
                    redis_load_t *rl)
{
    *rl = redis_load(rs, dim, flat);
    if (rl->rows != bshm_wl.rows)
        bench_die("redis holds %" PRIu64 " rows after loading %" PRIu64, rl->rows, bshm_wl.rows);
    redis_ctx_t *ctx = redis_ctx_open(rs, dim);
    d->redis_check = bshm_check_sample(redis_batch, ctx, dim, (form_t){HPS_DTYPE_FP32, false});
    for (unsigned i = 0; i < bshm_opt.nthreads; i++)
        d->redis[i] = bshm_measure(redis_batch, ctx, dim, bshm_opt.threads[i], false);
    redis_ctx_close(ctx);
    redis_flush(rs);
    d->have_redis = true;
}

#else /* !HPS_HAVE_REDIS */

redis_srv_t bshm_redis_start(void)
{
    redis_srv_t rs = {0};
    snprintf(rs.why, sizeof(rs.why), "built without hiredis");
    return rs;
}

void bshm_redis_stop(redis_srv_t *rs)
{
    (void)rs;
}

#endif
