/*
 * rcluster.c -- Redis Cluster client over hiredis (see include/hps/rcluster.h).
 *
 * HOW IT WORKS.  The client keeps a table of nodes (never shrinks, so node
 * pointers stay valid until destroy) and a slot map slot -> node index,
 * both under map_mu.  A call routes its commands by slot, takes one
 * connection of each node involved (in ascending node order, so concurrent
 * calls cannot deadlock), appends the commands to hiredis' output buffers,
 * and runs one poll() loop over all those sockets: write while there is
 * output, read and parse replies until each connection has all of its
 * replies, or the deadline passes.  Connections are non-blocking (REDIS_BLOCK
 * cleared after connect), so neither a slow node nor a full socket buffer
 * stalls the others.  Redirections and failures are then sorted out
 * command by command and the rest re-routed in another round.
 *
 * This file holds the nodes and their connections (connect, AUTH, back-off),
 * create / destroy, and exec (routing, pipelines, the poll() loop).  Key
 * hashing and the slot map (CLUSTER SLOTS, refresh) are in rcluster-slots.c;
 * what both share is in rcluster-internal.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "coordinator/rcluster-internal.h"

#define BACKOFF_MIN 50   /* ms: first skip period of a node that refused */
#define BACKOFF_MAX 2000 /* ms */
#define MAX_SEEDS   64

/* ---- small helpers ------------------------------------------------------ */

uint64_t hps__rcluster_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

void hps__rcluster_set_err(char *err, size_t len, const char *fmt, ...)
{
    if (!err || len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

/* ---- nodes and connections ---------------------------------------------- */

/* Find or add node host:port; map_mu held.  Returns its index or NO_NODE. */
unsigned hps__rcluster_node_get_locked(hps_rcluster_t *rc, const char *host, int port)
{
    for (unsigned i = 0; i < rc->num_nodes; i++)
        if (rc->nodes[i]->port == port && strcmp(rc->nodes[i]->host, host) == 0)
            return i;
    if (rc->num_nodes == MAX_NODES)
        return NO_NODE;
    node_t *nd = calloc(1, sizeof(*nd));
    conn_t *cs = calloc(rc->o.conns_per_node, sizeof(*cs));
    if (!nd || !cs) {
        free(nd);
        free(cs);
        return NO_NODE;
    }
    snprintf(nd->host, sizeof(nd->host), "%s", host);
    nd->port = port;
    nd->conns = cs;
    pthread_mutex_init(&nd->down_mu, NULL);
    hps__rcluster_addr_init(nd);
    for (unsigned i = 0; i < rc->o.conns_per_node; i++)
        pthread_mutex_init(&cs[i].mu, NULL);
    rc->nodes[rc->num_nodes] = nd;
    return rc->num_nodes++;
}

static unsigned node_get(hps_rcluster_t *rc, const char *host, int port)
{
    pthread_mutex_lock(&rc->map_mu);
    unsigned i = hps__rcluster_node_get_locked(rc, host, port);
    pthread_mutex_unlock(&rc->map_mu);
    return i;
}

node_t *hps__rcluster_node_at(hps_rcluster_t *rc, unsigned i)
{
    pthread_mutex_lock(&rc->map_mu);
    node_t *nd = rc->nodes[i];
    pthread_mutex_unlock(&rc->map_mu);
    return nd;
}

void hps__rcluster_conn_drop(conn_t *cn)
{
    if (cn->ctx)
        redisFree(cn->ctx);
    cn->ctx = NULL;
}

/* A pipeline on one connection: the replies it still expects. */
typedef struct job {
    redisContext *ctx;
    size_t want, got;
    redisReply **replies; /* (want) */
    hps_err_t status;     /* 0, or why the connection failed */
    uint64_t window;      /* ms it had: from the start of jobs_run() to the deadline */
    char msg[160];
} job_t;

static void job_fail(job_t *j, hps_err_t rc, const char *what)
{
    j->status = rc;
    snprintf(j->msg, sizeof(j->msg), "%s", what);
}

/* Read what is there and parse replies; returns false on failure. */
static bool job_read(job_t *j)
{
    if (redisBufferRead(j->ctx) != REDIS_OK) {
        job_fail(j, HPS_EIO, j->ctx->errstr[0] ? j->ctx->errstr : "connection lost");
        return false;
    }
    while (j->got < j->want) {
        void *r = NULL;
        if (redisGetReplyFromReader(j->ctx, &r) != REDIS_OK) {
            job_fail(j, HPS_EIO, "protocol error");
            return false;
        }
        if (!r)
            break;
        j->replies[j->got++] = r;
    }
    return true;
}

static bool job_pending_output(const job_t *j)
{
    return j->ctx->obuf && j->ctx->obuf[0];
}

/*
 * Drive every job until it has all its replies, fails, or the deadline
 * passes.  One poll() over all sockets: the nodes are served in parallel.
 */
static void jobs_run(job_t *jobs, size_t nj, uint64_t deadline)
{
    struct pollfd pf[MAX_NODES];
    size_t idx[MAX_NODES];
    uint64_t start = hps__rcluster_now_ms();
    for (size_t i = 0; i < nj; i++)
        jobs[i].window = deadline > start ? deadline - start : 0;
    for (;;) {
        size_t np = 0;
        for (size_t i = 0; i < nj; i++) {
            job_t *j = &jobs[i];
            if (j->status || j->got == j->want)
                continue;
            pf[np] = (struct pollfd){.fd = j->ctx->fd,
                                     .events = POLLIN | (job_pending_output(j) ? POLLOUT : 0)};
            idx[np++] = i;
        }
        if (np == 0)
            return;
        uint64_t now = hps__rcluster_now_ms();
        if (now >= deadline) {
            for (size_t k = 0; k < np; k++)
                job_fail(&jobs[idx[k]], HPS_ETIMEDOUT,
                         jobs[idx[k]].window ? "timed out" : "not sent: deadline passed");
            return;
        }
        int rv = poll(pf, np, (int)(deadline - now));
        if (rv < 0 && errno != EINTR) {
            for (size_t k = 0; k < np; k++)
                job_fail(&jobs[idx[k]], -errno, "poll failed");
            return;
        }
        for (size_t k = 0; rv > 0 && k < np; k++) {
            job_t *j = &jobs[idx[k]];
            int done = 0;
            if ((pf[k].revents & POLLOUT) && redisBufferWrite(j->ctx, &done) != REDIS_OK) {
                job_fail(j, HPS_EIO, j->ctx->errstr[0] ? j->ctx->errstr : "write failed");
                continue;
            }
            if (pf[k].revents & (POLLIN | POLLHUP | POLLERR))
                job_read(j);
        }
    }
}

/* Run one command on a connected context (AUTH, CLUSTER SLOTS). */
hps_err_t hps__rcluster_ctx_call(redisContext *ctx, uint64_t deadline, redisReply **ret, int argc,
                                 const char **argv, char *err, size_t err_len)
{
    redisReply *r = NULL;
    job_t j = {.ctx = ctx, .want = 1, .replies = &r};
    if (redisAppendCommandArgv(ctx, argc, argv, NULL) != REDIS_OK)
        return -ENOMEM;
    jobs_run(&j, 1, deadline);
    if (j.status) {
        hps__rcluster_set_err(err, err_len, "%s", j.msg);
        return j.status;
    }
    *ret = r;
    return 0;
}

static hps_err_t ctx_auth(hps_rcluster_t *rc, redisContext *ctx, uint64_t deadline, char *err,
                          size_t err_len)
{
    if (!rc->password[0])
        return 0;
    bool user = rc->user[0] && strcmp(rc->user, "default") != 0;
    const char *argv[3] = {"AUTH", user ? rc->user : rc->password, rc->password};
    redisReply *r;
    hps_err_t e = hps__rcluster_ctx_call(ctx, deadline, &r, user ? 3 : 2, argv, err, err_len);
    if (e)
        return e;
    if (r->type == REDIS_REPLY_ERROR) {
        hps__rcluster_set_err(err, err_len, "AUTH as user '%s' refused: %s",
                              user ? rc->user : "default", r->str);
        e = -EACCES;
    }
    freeReplyObject(r);
    return e;
}

static void node_backoff(node_t *nd, bool failed)
{
    pthread_mutex_lock(&nd->down_mu);
    /* backoff_ms is stored atomically: group_collect reads it unlocked */
    if (failed) {
        unsigned b = nd->backoff_ms ? nd->backoff_ms * 2 : BACKOFF_MIN;
        __atomic_store_n(&nd->backoff_ms, b > BACKOFF_MAX ? BACKOFF_MAX : b, __ATOMIC_RELAXED);
        nd->retry_at_ms = hps__rcluster_now_ms() + nd->backoff_ms;
    } else {
        __atomic_store_n(&nd->backoff_ms, 0u, __ATOMIC_RELAXED);
        nd->retry_at_ms = 0;
    }
    pthread_mutex_unlock(&nd->down_mu);
}

/* True while nd backs off (no side effect: for ordering nodes). */
bool hps__rcluster_node_backing_off(node_t *nd)
{
    pthread_mutex_lock(&nd->down_mu);
    bool off = nd->retry_at_ms > hps__rcluster_now_ms();
    pthread_mutex_unlock(&nd->down_mu);
    return off;
}

/* True while nd backs off.  Once its pause is over, the first caller
 * probes it and the others keep skipping it until that probe ends
 * (node_backoff): a node that hangs costs one call, not every call. */
static bool node_skipped(node_t *nd)
{
    pthread_mutex_lock(&nd->down_mu);
    uint64_t now = hps__rcluster_now_ms();
    bool skip = nd->retry_at_ms > now;
    if (!skip && nd->backoff_ms)
        nd->retry_at_ms = now + nd->backoff_ms; /* this caller's probe */
    pthread_mutex_unlock(&nd->down_mu);
    return skip;
}

/*
 * Make cn connected (connect, non-blocking, AUTH); cn->mu held.  call_ms is
 * the timeout of the call that connects: a connect or AUTH that times out
 * backs the node off only when it had at least min(connect_timeout_ms,
 * call_ms / 2) -- a window cut shorter by the call's deadline (a lookup's
 * is tight, and other nodes may have used most of it) says nothing about
 * the node.  A refused connect always does.
 */
hps_err_t hps__rcluster_conn_ensure(hps_rcluster_t *rc, node_t *nd, conn_t *cn, uint64_t deadline,
                                    unsigned call_ms, char *err, size_t err_len)
{
    if (node_skipped(nd)) { /* also with a connection: a hung node keeps its sockets */
        hps__rcluster_set_err(err, err_len, "%s:%d: down (backing off)", nd->host, nd->port);
        return -ECONNREFUSED;
    }
    if (cn->ctx)
        return 0;
    uint64_t now = hps__rcluster_now_ms();
    if (now >= deadline) { /* spent on other nodes: no reason to blame this one */
        hps__rcluster_set_err(err, err_len, "%s:%d: deadline passed before connecting", nd->host,
                              nd->port);
        return HPS_ETIMEDOUT;
    }
    uint64_t left = deadline - now;
    if (left > rc->o.connect_timeout_ms)
        left = rc->o.connect_timeout_ms;
    uint64_t fair = call_ms / 2 < rc->o.connect_timeout_ms ? call_ms / 2 : rc->o.connect_timeout_ms;
    /* The host name is resolved within the same window (hiredis's own
     * resolving would block without a bound): a numeric address only. */
    char addr[INET6_ADDRSTRLEN];
    hps_err_t e = hps__rcluster_addr(nd, now + left, addr, sizeof(addr), err, err_len);
    if (e) {
        if (e != HPS_ETIMEDOUT)
            node_backoff(nd, true);
        return e;
    }
    uint64_t after = hps__rcluster_now_ms();
    left = now + left > after ? now + left - after : 0;
    if (left == 0) {
        hps__rcluster_set_err(err, err_len, "%s:%d: deadline passed while resolving", nd->host,
                              nd->port);
        return HPS_ETIMEDOUT;
    }
    struct timeval tv = {.tv_sec = (time_t)(left / 1000), .tv_usec = (long)(left % 1000) * 1000};
    redisContext *ctx = redisConnectWithTimeout(addr, nd->port, tv);
    if (!ctx || ctx->err) {
        hps__rcluster_set_err(err, err_len, "%s:%d: %s", nd->host, nd->port,
                              ctx ? ctx->errstr : "out of memory");
        bool timed_out = ctx && strstr(ctx->errstr, "timed out");
        if (ctx)
            redisFree(ctx);
        if (ctx)
            hps__rcluster_addr_stale(nd); /* the name may point elsewhere now */
        if (ctx && (!timed_out || left >= fair))
            node_backoff(nd, true);
        return ctx ? -ECONNREFUSED : -ENOMEM;
    }
    /* From here on every read and write goes through jobs_run()'s poll(). */
    fcntl(ctx->fd, F_SETFL, fcntl(ctx->fd, F_GETFL) | O_NONBLOCK);
    ctx->flags &= ~REDIS_BLOCK;
    char msg[256] = "";
    /* the connect timeout bounds AUTH too: a stopped or hung node accepts
     * connections (the kernel does) and answers nothing */
    now = hps__rcluster_now_ms();
    uint64_t auth_by = now + rc->o.connect_timeout_ms;
    if (deadline < auth_by)
        auth_by = deadline;
    e = ctx_auth(rc, ctx, auth_by, msg, sizeof(msg));
    if (e) {
        hps__rcluster_set_err(err, err_len, "%s:%d: %s", nd->host, nd->port, msg);
        redisFree(ctx);
        /* accepts connections but answers nothing (stopped, hung) */
        if (e == HPS_ETIMEDOUT && auth_by > now && auth_by - now >= fair)
            node_backoff(nd, true);
        return e;
    }
    node_backoff(nd, false);
    cn->ctx = ctx;
    return 0;
}

/* Lock one connection of nd (a free connected one if any, else a free one),
 * waiting for a busy one at most until deadline (a call with a longer deadline may hold it, e.g. a
 * write to a hung node); NULL when none came in time. */
conn_t *hps__rcluster_conn_take(hps_rcluster_t *rc, node_t *nd, uint64_t deadline)
{
    unsigned k = rc->o.conns_per_node;
    unsigned start = __atomic_fetch_add(&nd->next, 1, __ATOMIC_RELAXED); /* spreads load */
    conn_t *spare = NULL; /* a free one that is not connected: if no connected one is free */
    for (unsigned i = 0; i < k; i++) {
        conn_t *cn = &nd->conns[(start + i) % k];
        if (pthread_mutex_trylock(&cn->mu) != 0)
            continue;
        if (cn->ctx) {
            if (spare)
                pthread_mutex_unlock(&spare->mu);
            return cn;
        }
        if (spare)
            pthread_mutex_unlock(&cn->mu);
        else
            spare = cn;
    }
    if (spare)
        return spare;
    conn_t *cn = &nd->conns[start % k];
    uint64_t now = hps__rcluster_now_ms();
    if (now >= deadline)
        return NULL;
    struct timespec ts; /* pthread_mutex_timedlock() takes CLOCK_REALTIME */
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + (deadline - now) * 1000000u;
    ts.tv_sec += (time_t)(ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    return pthread_mutex_timedlock(&cn->mu, &ts) == 0 ? cn : NULL;
}

/* ---- create / destroy --------------------------------------------------- */

void hps_rcluster_opts_init(hps_rcluster_opts_t *o)
{
    *o = (hps_rcluster_opts_t){.address = "127.0.0.1:7000",
                               .user = "default",
                               .password = "",
                               .conns_per_node = 5,
                               .connect_timeout_ms = 500,
                               .timeout_ms = 1000,
                               .fast_timeout_ms = 1000,
                               .max_redirects = 5};
}

static hps_err_t add_seeds(hps_rcluster_t *rc, char *err, size_t err_len)
{
    const char *p = rc->address;
    while (*p) {
        size_t len = strcspn(p, ",");
        while (len && (*p == ' ' || *p == '\t')) {
            p++;
            len--;
        }
        size_t l = len;
        while (l && (p[l - 1] == ' ' || p[l - 1] == '\t'))
            l--;
        char host[HPS_RCLUSTER_HOST_MAX];
        int port;
        if (hps__rcluster_parse_hostport(p, l, host, &port) < 0) {
            hps__rcluster_set_err(err, err_len, "address '%.*s': expected host:port", (int)l, p);
            return HPS_EINVAL;
        }
        if (node_get(rc, host, port) == NO_NODE)
            return -ENOMEM;
        p += len;
        if (*p == ',')
            p++;
    }
    if (rc->num_nodes == 0) {
        hps__rcluster_set_err(err, err_len, "address: no host:port given");
        return HPS_EINVAL;
    }
    return 0;
}

/* Load the first map from the seeds; the message names every failure. */
static hps_err_t first_map(hps_rcluster_t *rc, char *err, size_t err_len)
{
    char all[1024] = "", one[512];
    hps_err_t e = HPS_EIO;
    unsigned n = rc->num_nodes;
    for (unsigned i = 0; i < n && e; i++) {
        one[0] = '\0';
        e = hps__rcluster_map_load_from(rc, i, hps__rcluster_now_ms() + rc->o.timeout_ms,
                                        rc->o.timeout_ms, one, sizeof(one));
        if (e)
            snprintf(all + strlen(all), sizeof(all) - strlen(all), "%s%s", i ? "; " : "", one);
    }
    if (e)
        hps__rcluster_set_err(err, err_len, "no Redis Cluster node usable: %s", all);
    return e;
}

hps_err_t hps_rcluster_create(const hps_rcluster_opts_t *opts, hps_rcluster_t **ret, char *err,
                              size_t err_len)
{
    if (!opts || !ret || !opts->address || !opts->conns_per_node || !opts->timeout_ms ||
        !opts->fast_timeout_ms || !opts->connect_timeout_ms || !opts->max_redirects) {
        hps__rcluster_set_err(err, err_len, "invalid Redis Cluster client options");
        return HPS_EINVAL;
    }
    hps_rcluster_t *rc = calloc(1, sizeof(*rc));
    if (!rc)
        return -ENOMEM;
    rc->o = *opts;
    rc->address = strdup(opts->address);
    rc->user = strdup(opts->user ? opts->user : "");
    rc->password = strdup(opts->password ? opts->password : "");
    pthread_mutex_init(&rc->map_mu, NULL);
    pthread_mutex_init(&rc->refresh_mu, NULL);
    for (size_t s = 0; s < HPS_RCLUSTER_SLOTS; s++)
        rc->slot_node[s] = NO_NODE;
    hps_err_t e = rc->address && rc->user && rc->password ? 0 : -ENOMEM;
    if (!e)
        e = add_seeds(rc, err, err_len);
    if (!e)
        e = first_map(rc, err, err_len);
    if (e) {
        hps_rcluster_destroy(rc);
        return e;
    }
    *ret = rc;
    return 0;
}

void hps_rcluster_destroy(hps_rcluster_t *rc)
{
    if (!rc)
        return;
    for (unsigned i = 0; i < rc->num_nodes; i++) {
        node_t *nd = rc->nodes[i];
        for (unsigned k = 0; k < rc->o.conns_per_node; k++) {
            hps__rcluster_conn_drop(&nd->conns[k]);
            pthread_mutex_destroy(&nd->conns[k].mu);
        }
        pthread_mutex_destroy(&nd->down_mu);
        hps__rcluster_addr_fini(nd);
        free(nd->conns);
        free(nd);
    }
    pthread_mutex_destroy(&rc->map_mu);
    pthread_mutex_destroy(&rc->refresh_mu);
    free(rc->address);
    free(rc->user);
    free(rc->password);
    free(rc);
}

/* ---- exec --------------------------------------------------------------- */

/* Per-command routing state of one hps_rcluster_exec() call. */
typedef struct route {
    uint16_t node; /* where it goes this round */
    uint16_t ask;  /* ASK target, or NO_NODE */
    bool pending;  /* still needs a reply */
} route_t;

/* Per-node group of one round. */
typedef struct group {
    unsigned node;
    conn_t *cn;
    size_t n;     /* commands (ASKING not counted) */
    size_t *cmd;  /* (n) command indices */
    size_t nasks; /* ASKING commands interleaved */
    bool wait;    /* every connection of the node was busy: waited for in the 2nd pass */
    size_t job;   /* its job in round_t.jobs while cn is set */
} group_t;

/* Everything one round needs, allocated once per call. */
typedef struct round {
    group_t g[MAX_NODES];
    size_t ng;
    size_t *cmdidx;       /* (n) command indices grouped by node */
    redisReply **replies; /* (n + n) replies incl. ASKING */
    job_t jobs[MAX_NODES];
    unsigned call_ms; /* the call's timeout (conn_ensure) */
} round_t;

static void route_all(hps_rcluster_t *rc, size_t n, hps_rcluster_cmd_t *cmds, route_t *rt)
{
    pthread_mutex_lock(&rc->map_mu);
    for (size_t i = 0; i < n; i++)
        if (rt[i].pending)
            rt[i].node = rt[i].ask != NO_NODE ? rt[i].ask : rc->slot_node[cmds[i].slot];
    pthread_mutex_unlock(&rc->map_mu);
}

/* Group pending, routable commands by node, in ascending node order. */
static void group_all(round_t *r, size_t n, const route_t *rt, unsigned num_nodes)
{
    size_t count[MAX_NODES] = {0}, pos = 0;
    for (size_t i = 0; i < n; i++)
        if (rt[i].pending && rt[i].node != NO_NODE)
            count[rt[i].node]++;
    r->ng = 0;
    for (unsigned nd = 0; nd < num_nodes; nd++) {
        if (!count[nd])
            continue;
        r->g[r->ng] = (group_t){.node = nd, .cmd = r->cmdidx + pos};
        pos += count[nd];
        r->ng++;
    }
    for (size_t i = 0; i < n; i++) {
        if (!rt[i].pending || rt[i].node == NO_NODE)
            continue;
        for (size_t k = 0; k < r->ng; k++)
            if (r->g[k].node == rt[i].node) {
                group_t *g = &r->g[k];
                g->cmd[g->n++] = i;
                g->nasks += rt[i].ask != NO_NODE;
                break;
            }
    }
}

/* Connect and append one group's commands; returns false if the node failed. */
static bool group_send(hps_rcluster_t *rc, group_t *g, hps_rcluster_cmd_t *cmds, const route_t *rt,
                       uint64_t deadline, unsigned call_ms, char *msg, size_t msg_len)
{
    node_t *nd = hps__rcluster_node_at(rc, g->node);
    hps_err_t e = hps__rcluster_conn_ensure(rc, nd, g->cn, deadline, call_ms, msg, msg_len);
    if (e)
        return false;
    static const char *asking[] = {"ASKING"};
    for (size_t k = 0; k < g->n; k++) {
        const hps_rcluster_cmd_t *c = &cmds[g->cmd[k]];
        if (rt[g->cmd[k]].ask != NO_NODE)
            redisAppendCommandArgv(g->cn->ctx, 1, asking, NULL);
        if (redisAppendCommandArgv(g->cn->ctx, c->argc, c->argv, c->argvlen) != REDIS_OK) {
            hps__rcluster_set_err(msg, msg_len, "out of memory");
            hps__rcluster_conn_drop(g->cn);
            return false;
        }
    }
    return true;
}

/* Outcome of one command's reply: 0 done, 1 retry now, 2 retry after back-off. */
static int classify(hps_rcluster_t *rc, redisReply *r, route_t *rt, bool *refresh)
{
    hps_rcluster_redirect_t rd;
    rt->ask = NO_NODE;
    if (r->type != REDIS_REPLY_ERROR)
        return 0;
    if (hps_rcluster_parse_redirect(r->str, &rd) == 0) {
        unsigned ni = node_get(rc, rd.host, rd.port);
        if (ni == NO_NODE)
            return 0;
        if (rd.ask)
            rt->ask = (uint16_t)ni;
        else {
            pthread_mutex_lock(&rc->map_mu);
            rc->slot_node[rd.slot] = (uint16_t)ni;
            pthread_mutex_unlock(&rc->map_mu);
            *refresh = true;
        }
        return 1;
    }
    if (!strncmp(r->str, "TRYAGAIN", 8) || !strncmp(r->str, "CLUSTERDOWN", 11) ||
        !strncmp(r->str, "LOADING", 7)) {
        *refresh = true;
        return 2;
    }
    return 0;
}

/* Hand one group's replies to its commands. */
static void group_collect(hps_rcluster_t *rc, group_t *g, job_t *j, unsigned call_ms,
                          hps_rcluster_cmd_t *cmds, route_t *rt, bool *refresh, bool *backoff)
{
    size_t ri = 0;
    for (size_t k = 0; k < g->n; k++) {
        size_t i = g->cmd[k];
        if (rt[i].ask != NO_NODE) {
            if (ri < j->got)
                freeReplyObject(j->replies[ri]);
            ri++;
        }
        if (ri >= j->got) {
            cmds[i].status = j->status ? j->status : HPS_EIO;
            ri++;
            continue;
        }
        redisReply *r = j->replies[ri++];
        int what = classify(rc, r, &rt[i], refresh);
        if (what == 0) {
            cmds[i].reply = r;
            cmds[i].status = 0;
            rt[i].pending = false;
        } else {
            cmds[i].status = !strncmp(r->str, "CLUSTERDOWN", 11) || !strncmp(r->str, "TRY", 3)
                                 ? HPS_EBUSY
                                 : HPS_EIO;
            *backoff |= what == 2;
            freeReplyObject(r);
        }
    }
    node_t *nd = hps__rcluster_node_at(rc, g->node);
    if (!j->status && __atomic_load_n(&nd->backoff_ms, __ATOMIC_RELAXED))
        node_backoff(nd, false); /* a probe of a backing-off node answered */
    if (j->status) {
        hps__rcluster_conn_drop(g->cn); /* unknown state: replies may be in flight */
        *refresh = *backoff = true;
        /* a node that let the deadline pass is skipped for a while, so that
         * the next calls do not each wait for it (reconnects back off); not
         * one that had less than half the call's time (other nodes' connects
         * took the rest) */
        if (j->status == HPS_ETIMEDOUT && j->window >= call_ms / 2)
            node_backoff(nd, true);
    }
}

/* Lock a connection of g's node (wait: until the deadline; else only a free,
 * connected one), send g's commands on it and set up its job.  False when
 * the group did not start (its commands' status says why, unless !wait
 * deferred it: then g->wait). */
static bool group_start(hps_rcluster_t *rc, round_t *r, group_t *g, bool wait,
                        hps_rcluster_cmd_t *cmds, const route_t *rt, uint64_t deadline,
                        size_t *rpos, size_t *nj, bool *refresh, char *msg, size_t msg_len)
{
    node_t *nd = hps__rcluster_node_at(rc, g->node);
    g->cn = hps__rcluster_conn_take(rc, nd, wait ? deadline : 0);
    if (!g->cn && !wait) {
        g->wait = true;
        return false;
    }
    if (g->cn && !wait && !g->cn->ctx) { /* connecting waits: after the connected nodes */
        pthread_mutex_unlock(&g->cn->mu);
        g->cn = NULL;
        g->wait = true;
        return false;
    }
    if (!g->cn) { /* every connection busy in calls that outlast this one's deadline */
        for (size_t q = 0; q < g->n; q++)
            cmds[g->cmd[q]].status = HPS_ETIMEDOUT;
        hps__rcluster_set_err(msg, msg_len, "%s:%d: no free connection before the deadline",
                              nd->host, nd->port);
        return false;
    }
    if (!group_send(rc, g, cmds, rt, deadline, r->call_ms, msg, msg_len)) {
        for (size_t q = 0; q < g->n; q++)
            cmds[g->cmd[q]].status = -ECONNREFUSED;
        pthread_mutex_unlock(&g->cn->mu);
        g->cn = NULL;
        *refresh = true;
        return false;
    }
    g->job = *nj;
    r->jobs[(*nj)++] =
        (job_t){.ctx = g->cn->ctx, .want = g->n + g->nasks, .replies = r->replies + *rpos};
    *rpos += g->n + g->nasks;
    return true;
}

/*
 * One round: send every group, run all sockets, collect.  Two passes: first
 * the nodes with a free, connected connection; then the others: those to
 * connect (connect and AUTH wait, and a hung node's AUTH waits until the
 * deadline) and those whose connections were all busy (held by other calls,
 * e.g. a write to a hung node), waiting for one at most until the deadline.
 * So a node that hangs never costs the other nodes their answers.  False:
 * nothing sent.
 */
static bool round_run(hps_rcluster_t *rc, round_t *r, hps_rcluster_cmd_t *cmds, route_t *rt,
                      uint64_t deadline, bool *refresh, bool *backoff, char *msg, size_t msg_len)
{
    size_t rpos = 0, nj = 0;
    for (size_t k = 0; k < r->ng; k++)
        r->g[k].wait = false;
    for (int pass = 0; pass < 2; pass++) {
        size_t first = nj;
        for (size_t k = 0; k < r->ng; k++)
            if (pass == 0 || r->g[k].wait)
                group_start(rc, r, &r->g[k], pass == 1, cmds, rt, deadline, &rpos, &nj, refresh,
                            msg, msg_len);
        if (nj == first)
            continue;
        jobs_run(r->jobs + first, nj - first, deadline);
        for (size_t k = 0; k < r->ng; k++) {
            group_t *g = &r->g[k];
            if (!g->cn)
                continue;
            job_t *j = &r->jobs[g->job];
            if (j->status)
                hps__rcluster_set_err(msg, msg_len, "%s:%d: %s",
                                      hps__rcluster_node_at(rc, g->node)->host,
                                      hps__rcluster_node_at(rc, g->node)->port, j->msg);
            group_collect(rc, g, j, r->call_ms, cmds, rt, refresh, backoff);
            pthread_mutex_unlock(&g->cn->mu);
            g->cn = NULL;
        }
    }
    return nj > 0;
}

static size_t count_pending(size_t n, hps_rcluster_cmd_t *cmds, route_t *rt, bool *any_unrouted)
{
    size_t p = 0;
    for (size_t i = 0; i < n; i++) {
        if (!rt[i].pending)
            continue;
        p++;
        if (rt[i].node == NO_NODE) {
            cmds[i].status = HPS_EIO;
            *any_unrouted = true;
        }
    }
    return p;
}

/* hps_rcluster_exec(); fail_fast: no pause and no further round after one
 * that met CLUSTERDOWN, TRYAGAIN, LOADING or a failed connection. */
static hps_err_t exec(hps_rcluster_t *rc, size_t n, hps_rcluster_cmd_t *cmds, bool fail_fast,
                      char *err, size_t err_len)
{
    if (n == 0)
        return 0;
    round_t *r = calloc(1, sizeof(*r));
    route_t *rt = calloc(n, sizeof(*rt));
    if (r) {
        r->cmdidx = malloc(n * sizeof(size_t));
        r->replies = malloc(2 * n * sizeof(redisReply *));
    }
    if (!r || !rt || !r->cmdidx || !r->replies) {
        if (r) {
            free(r->cmdidx);
            free(r->replies);
        }
        free(r);
        free(rt);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        rt[i] = (route_t){.node = NO_NODE, .ask = NO_NODE, .pending = true};
        cmds[i].reply = NULL;
        cmds[i].status = HPS_EIO;
    }
    static const char no_node[] = "no node serves the slot";
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", no_node);
    r->call_ms = fail_fast ? rc->o.fast_timeout_ms : rc->o.timeout_ms;
    uint64_t deadline = hps__rcluster_now_ms() + r->call_ms;
    bool redirected = false; /* a round asked for a new slot map (MOVED, TRYAGAIN ...) */
    for (unsigned round = 0; round < rc->o.max_redirects; round++) {
        bool refresh = false, backoff = false, unrouted = false;
        route_all(rc, n, cmds, rt);
        if (count_pending(n, cmds, rt, &unrouted) == 0)
            break;
        pthread_mutex_lock(&rc->map_mu);
        unsigned num_nodes = rc->num_nodes;
        pthread_mutex_unlock(&rc->map_mu);
        group_all(r, n, rt, num_nodes);
        round_run(rc, r, cmds, rt, deadline, &refresh, &backoff, msg, sizeof(msg));
        redirected |= refresh;
        bool unused = false;
        if (count_pending(n, cmds, rt, &unused) == 0 || hps__rcluster_now_ms() >= deadline)
            break;
        if (refresh || unrouted)
            hps__rcluster_maybe_refresh(rc, deadline, fail_fast);
        if (backoff && fail_fast)
            break;
        if (backoff && round + 1 < rc->o.max_redirects)
            sleep_ms(10u << (round < 4 ? round : 4));
        if (hps__rcluster_now_ms() >= deadline)
            break;
    }
    hps_err_t first = 0;
    for (size_t i = 0; i < n && !first; i++)
        first = cmds[i].status;
    if (first && redirected && strcmp(msg, no_node) == 0) /* nodes sent it back and forth */
        snprintf(msg, sizeof(msg),
                 "still redirected (MOVED/ASK) after %u redirections: the nodes disagree on who "
                 "serves the slot (a reshard or failover in progress)",
                 rc->o.max_redirects);
    if (first)
        hps__rcluster_set_err(err, err_len, "%s", msg);
    free(r->cmdidx);
    free(r->replies);
    free(r);
    free(rt);
    return first;
}

hps_err_t hps_rcluster_exec(hps_rcluster_t *rc, size_t n, hps_rcluster_cmd_t *cmds, char *err,
                            size_t err_len)
{
    return exec(rc, n, cmds, false, err, err_len);
}

hps_err_t hps_rcluster_exec_fast(hps_rcluster_t *rc, size_t n, hps_rcluster_cmd_t *cmds, char *err,
                                 size_t err_len)
{
    return exec(rc, n, cmds, true, err, err_len);
}