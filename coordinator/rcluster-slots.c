/*
 * rcluster-slots.c -- hash slots and the slot map of the Redis Cluster client
 * (see include/hps/rcluster.h): key hashing (CRC16, hash tags), host:port and
 * MOVED/ASK parsing, loading the map from CLUSTER SLOTS, and refreshing it.
 * Nodes, connections, create/destroy and exec are in rcluster.c.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/rcluster-internal.h"

#define REFRESH_MIN 20 /* ms between two slot-map refreshes */

/* ---- hashing ------------------------------------------------------------ */

uint16_t hps_rcluster_crc16(const void *buf, size_t len)
{
    const uint8_t *p = buf;
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

uint16_t hps_rcluster_key_slot(const void *key, size_t len)
{
    const char *k = key;
    const char *open = memchr(k, '{', len);
    if (open) {
        size_t s = (size_t)(open - k) + 1;
        const char *close = memchr(k + s, '}', len - s);
        if (close && close > k + s)
            return hps_rcluster_crc16(k + s, (size_t)(close - (k + s))) & 16383u;
    }
    return hps_rcluster_crc16(k, len) & 16383u;
}

/* Split "host:port" or "[v6]:port" (length len) into host and port. */
hps_err_t hps__rcluster_parse_hostport(const char *s, size_t len, char *host, int *port)
{
    const char *colon = NULL;
    for (size_t i = len; i > 0; i--)
        if (s[i - 1] == ':') {
            colon = s + i - 1;
            break;
        }
    if (!colon || colon == s || colon + 1 == s + len)
        return HPS_EINVAL;
    const char *h = s;
    size_t hl = (size_t)(colon - s);
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (hl == 0 || hl >= HPS_RCLUSTER_HOST_MAX)
        return HPS_EINVAL;
    long p = 0;
    for (const char *c = colon + 1; c < s + len; c++) {
        if (*c < '0' || *c > '9' || p > 65535)
            return HPS_EINVAL;
        p = p * 10 + (*c - '0');
    }
    if (p < 1 || p > 65535)
        return HPS_EINVAL;
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (int)p;
    return 0;
}

hps_err_t hps_rcluster_parse_redirect(const char *msg, hps_rcluster_redirect_t *ret)
{
    hps_rcluster_redirect_t r = {0};
    const char *p;
    if (!msg || !ret)
        return HPS_EINVAL;
    if (strncmp(msg, "MOVED ", 6) == 0)
        p = msg + 6;
    else if (strncmp(msg, "ASK ", 4) == 0) {
        r.ask = true;
        p = msg + 4;
    } else
        return HPS_EINVAL;
    char *end;
    errno = 0;
    unsigned long slot = strtoul(p, &end, 10);
    if (end == p || *end != ' ' || errno || slot >= HPS_RCLUSTER_SLOTS)
        return HPS_EINVAL;
    r.slot = (uint16_t)slot;
    p = end + 1;
    size_t len = strcspn(p, " \r\n");
    if (hps__rcluster_parse_hostport(p, len, r.host, &r.port) < 0)
        return HPS_EINVAL;
    *ret = r;
    return 0;
}

/* ---- slot map ----------------------------------------------------------- */

/* Apply one CLUSTER SLOTS reply from node `from` to the map. */
static hps_err_t map_apply(hps_rcluster_t *rc, const redisReply *r, const node_t *from)
{
    if (r->type != REDIS_REPLY_ARRAY)
        return HPS_ECONFIG;
    uint16_t owner[HPS_RCLUSTER_SLOTS];
    size_t covered = 0;
    for (size_t s = 0; s < HPS_RCLUSTER_SLOTS; s++)
        owner[s] = NO_NODE;
    pthread_mutex_lock(&rc->map_mu);
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER ||
            e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2)
            continue;
        const redisReply *m = e->element[2];
        const char *host = m->element[0]->type == REDIS_REPLY_STRING && m->element[0]->len > 0
                               ? m->element[0]->str
                               : from->host; /* "" or NULL: the node we asked */
        if (m->element[1]->type != REDIS_REPLY_INTEGER)
            continue;
        unsigned ni = hps__rcluster_node_get_locked(rc, host, (int)m->element[1]->integer);
        for (size_t r2 = 3; r2 < e->elements; r2++) { /* replicas: later refresh sources */
            const redisReply *rp = e->element[r2];
            if (rp->type == REDIS_REPLY_ARRAY && rp->elements >= 2 &&
                rp->element[0]->type == REDIS_REPLY_STRING && rp->element[0]->len > 0 &&
                rp->element[1]->type == REDIS_REPLY_INTEGER)
                hps__rcluster_node_get_locked(rc, rp->element[0]->str,
                                              (int)rp->element[1]->integer);
        }
        long long lo = e->element[0]->integer, hi = e->element[1]->integer;
        for (long long s = lo; ni != NO_NODE && s <= hi && s >= 0 && s < HPS_RCLUSTER_SLOTS; s++) {
            owner[s] = (uint16_t)ni;
            covered++;
        }
    }
    if (covered)
        memcpy(rc->slot_node, owner, sizeof(owner));
    rc->last_refresh_ms = hps__rcluster_now_ms();
    pthread_mutex_unlock(&rc->map_mu);
    return covered ? 0 : HPS_ECONFIG;
}

/* CLUSTER SLOTS from node i, by the deadline (ms, CLOCK_MONOTONIC). */
hps_err_t hps__rcluster_map_load_from(hps_rcluster_t *rc, unsigned i, uint64_t deadline,
                                      unsigned call_ms, char *err, size_t err_len)
{
    node_t *nd = hps__rcluster_node_at(rc, i);
    conn_t *cn = hps__rcluster_conn_take(rc, nd, deadline);
    if (!cn) {
        hps__rcluster_set_err(err, err_len, "%s:%d: no free connection before the deadline",
                              nd->host, nd->port);
        return HPS_ETIMEDOUT;
    }
    hps_err_t e = hps__rcluster_conn_ensure(rc, nd, cn, deadline, call_ms, err, err_len);
    redisReply *r = NULL;
    static const char *argv[] = {"CLUSTER", "SLOTS"};
    char msg[256] = "";
    if (!e && (e = hps__rcluster_ctx_call(cn->ctx, deadline, &r, 2, argv, msg, sizeof(msg))) < 0) {
        hps__rcluster_set_err(err, err_len, "%s:%d: %s", nd->host, nd->port, msg);
        hps__rcluster_conn_drop(cn);
    }
    pthread_mutex_unlock(&cn->mu);
    if (e)
        return e;
    if (r->type == REDIS_REPLY_ERROR) {
        bool auth = strncmp(r->str, "NOAUTH", 6) == 0 || strncmp(r->str, "WRONGPASS", 9) == 0;
        bool perm = strncmp(r->str, "NOPERM", 6) == 0;
        hps__rcluster_set_err(err, err_len, "%s:%d: CLUSTER SLOTS: %s%s", nd->host, nd->port,
                              r->str,
                              auth   ? ""
                              : perm ? " (the user needs the cluster command: an ACL with "
                                       "+cluster|slots, or +@all)"
                                     : " (is it a Redis Cluster node?)");
        e = auth || perm ? -EACCES : HPS_ECONFIG;
    } else if ((e = map_apply(rc, r, nd)) < 0)
        hps__rcluster_set_err(err, err_len, "%s:%d: CLUSTER SLOTS lists no served slot", nd->host,
                              nd->port);
    freeReplyObject(r);
    return e;
}

/* Reload the map, asking each node at most timeout_ms and nothing past cap
 * (ms, CLOCK_MONOTONIC; UINT64_MAX: none) for a call of timeout call_ms.  wait = false: return
 * HPS_EBUSY at once when another thread is refreshing (its map will do). */
static hps_err_t refresh(hps_rcluster_t *rc, uint64_t cap, unsigned call_ms, bool wait, char *err,
                         size_t err_len)
{
    if (!wait && pthread_mutex_trylock(&rc->refresh_mu) != 0)
        return HPS_EBUSY;
    if (wait)
        pthread_mutex_lock(&rc->refresh_mu);
    pthread_mutex_lock(&rc->map_mu);
    unsigned n = rc->num_nodes;
    pthread_mutex_unlock(&rc->map_mu);
    hps_err_t e = HPS_EIO;
    hps__rcluster_set_err(err, err_len, "no cluster node known");
    /* Nodes that are not backing off first; then the rest. */
    bool late = false;
    for (int pass = 0; pass < 2 && e && !late; pass++)
        for (unsigned i = 0; i < n && e && !late; i++) {
            if (hps__rcluster_node_backing_off(hps__rcluster_node_at(rc, i)) != (pass == 1))
                continue;
            uint64_t now = hps__rcluster_now_ms(), by = now + rc->o.timeout_ms;
            if ((late = now >= cap)) {
                hps__rcluster_set_err(err, err_len, "slot map refresh: deadline passed");
                e = HPS_ETIMEDOUT;
            } else
                e = hps__rcluster_map_load_from(rc, i, by < cap ? by : cap, call_ms, err, err_len);
        }
    pthread_mutex_unlock(&rc->refresh_mu);
    return e;
}

hps_err_t hps_rcluster_refresh(hps_rcluster_t *rc, char *err, size_t err_len)
{
    return refresh(rc, UINT64_MAX, rc->o.timeout_ms, true, err, err_len);
}

/* Refresh unless another thread did so within REFRESH_MIN ms; a fast call
 * (lookups) neither waits for a refresh in progress nor passes its deadline. */
void hps__rcluster_maybe_refresh(hps_rcluster_t *rc, uint64_t deadline, bool fast)
{
    pthread_mutex_lock(&rc->map_mu);
    bool recent = hps__rcluster_now_ms() - rc->last_refresh_ms < REFRESH_MIN;
    pthread_mutex_unlock(&rc->map_mu);
    if (!recent)
        refresh(rc, fast ? deadline : UINT64_MAX, fast ? rc->o.fast_timeout_ms : rc->o.timeout_ms,
                !fast, NULL, 0);
}

unsigned hps_rcluster_num_masters(hps_rcluster_t *rc)
{
    uint8_t seen[MAX_NODES] = {0};
    unsigned n = 0;
    pthread_mutex_lock(&rc->map_mu);
    for (size_t s = 0; s < HPS_RCLUSTER_SLOTS; s++) {
        uint16_t i = rc->slot_node[s];
        if (i != NO_NODE && !seen[i]) {
            seen[i] = 1;
            n++;
        }
    }
    pthread_mutex_unlock(&rc->map_mu);
    return n;
}
