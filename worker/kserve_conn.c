/*
 * kserve_conn.c -- connection admission of a listener (the HTTP port's and
 * the metrics port's, each a struct hps__kserve_conns): a deadline for a
 * request's whole header, a minimum rate for its body, and room kept for
 * new connections.
 *
 * libmicrohttpd's idle timeout restarts at every byte, so a client that
 * trickles a header or a body one byte at a time holds its connection for
 * ever, and about max_connections of them lock every other client out.
 * Here each connection has a state, moved by libmicrohttpd's callbacks:
 *
 *   FRESH   accepted, no request line yet         (NOTIFY_CONNECTION STARTED)
 *   HEADER  request line received, header coming  (URI log callback)
 *   BODY    header complete, body coming          (first access-handler call)
 *   BUSY    request whole: lookup, answer         (the body's end, or the
 *                                                  first call without one)
 *   IDLE    keep-alive between requests           (request completed)
 *
 * and the time it entered it.  A reaper thread closes FRESH and HEADER
 * connections older than header_timeout_ms: a request's header must arrive
 * whole within it, however it is sliced (the first request of a connection
 * counts from the accept); and BODY connections older than that whose body
 * has averaged less than min_body_rate bytes a second since the header.
 * And when a new connection brings the count past seven eighths of
 * max_connections, the oldest FRESH or HEADER connection that has waited
 * for its header GRACE_NS or more (or a BODY one as slow, past GRACE_NS),
 * else the oldest IDLE one, else the oldest FRESH or HEADER one that has no
 * request waiting unread, is closed to make room: trickling and idle
 * connections go first, a request being served or sent at speed never.  The listener defers accepts
 * (TCP_DEFER_ACCEPT, kserve_server.c: open_listener) until a connection's
 * first bytes arrive, so a valid client's connection comes with its
 * request already waiting, and a flood of silent connections never reaches
 * this table before the deferral ends.
 *
 * Closing is shutdown(2) on the connection's socket: libmicrohttpd then
 * sees the end of the stream and closes the connection itself.  The socket
 * cannot be closed under us: libmicrohttpd notifies CLOSED (which takes
 * conns->mu to unlink the connection) before it closes the descriptor, and
 * every shutdown happens under conns->mu on a linked connection.
 */
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>

#include "worker/kserve_http.h"

#define REAP_PERIOD_MS 100

enum { CONN_FRESH, CONN_HEADER, CONN_BODY, CONN_BUSY, CONN_IDLE };

static void unlink_conn(struct hps__kserve_conns *cs, struct hps__kserve_kconn *k)
{
    k->prev->next = k->next;
    k->next->prev = k->prev;
    cs->count--;
}

/* Shut k's socket down (conns->mu held). */
static void evict(struct hps__kserve_kconn *k, _Atomic uint64_t *counter)
{
    if (k->closing)
        return;
    k->closing = true;
    shutdown(k->fd, SHUT_RDWR);
    atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
}

/* A FRESH or HEADER connection younger than this is closed for room only
 * when no other can be: a valid client sends its header at once, so a
 * connection still without one after this long is trickling, while a new
 * one may simply not have been read yet (under a flood of connections, the
 * oldest FRESH one left was often a valid client accepted a moment ago). */
#define GRACE_NS (50 * 1000000ULL)
/* Bytes waiting unread on a young FRESH or HEADER connection that show a
 * client which sent its request at once (a request line is longer; a
 * trickler sends a byte at a time): such a connection is never closed for
 * room.  In the first GRACE_NS of a flood every other connection is young
 * too, and int-connections once saw the oldest of them, a valid client not
 * yet read, closed.  With deferred accepts a valid connection arrives with
 * its request waiting, so this check is what protects it. */
#define SENT_AT_ONCE 16

static bool sent_at_once(const struct hps__kserve_kconn *k)
{
    int n = 0;
    return ioctl(k->fd, FIONREAD, &n) == 0 && n >= SENT_AT_ONCE;
}

/* A BODY connection in that state for more than after_ns whose body has
 * averaged less than min_body_rate bytes a second (mu held). */
static bool body_slow(const struct hps__kserve_conns *cs, const struct hps__kserve_kconn *k,
                      uint64_t now, uint64_t after_ns)
{
    uint64_t ns = now - k->since_ns;
    if (k->state != CONN_BODY || !cs->min_body_rate || ns <= after_ns)
        return false;
    uint64_t got = atomic_load_explicit(&k->body_bytes, memory_order_relaxed);
    return (double)got * 1e9 < (double)cs->min_body_rate * (double)ns;
}

/* The connection to close for room: the oldest FRESH / HEADER one past
 * GRACE_NS (or BODY one too slow past it), else the oldest IDLE one, else
 * the oldest FRESH / HEADER one without a request waiting to be read
 * (SENT_AT_ONCE); NULL when none. */
static struct hps__kserve_kconn *victim(struct hps__kserve_conns *cs)
{
    struct hps__kserve_kconn *best = NULL;
    int rank = 3; /* 0: FRESH or HEADER past the grace, 1: IDLE, 2: FRESH or HEADER */
    uint64_t now = hps__kserve_now_ns(), young = now - GRACE_NS;
    for (struct hps__kserve_kconn *k = cs->head.next; k != &cs->head; k = k->next) {
        int r = k->closing              ? 3
                : k->state == CONN_BODY ? (body_slow(cs, k, now, GRACE_NS) ? 0 : 3)
                : k->state == CONN_BUSY ? 3
                : k->state == CONN_IDLE ? 1
                : k->since_ns > young   ? 2
                                        : 0;
        /* ioctl only where a young one could be chosen: floods alone */
        if (r == 2 && rank == 3 && sent_at_once(k))
            r = 3;
        else if (r == 2 && rank == 2 && k->since_ns < best->since_ns && sent_at_once(k))
            r = 3;
        if (r < rank || (r == rank && r < 3 && k->since_ns < best->since_ns)) {
            best = k;
            rank = r;
        }
    }
    return rank < 3 ? best : NULL;
}

void hps__kserve_conn_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                             enum MHD_ConnectionNotificationCode toe)
{
    struct hps__kserve_conns *cs = cls;
    struct hps__kserve_kconn *k = *socket_context;
    if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        if (!k)
            return;
        pthread_mutex_lock(&cs->mu);
        unlink_conn(cs, k);
        pthread_mutex_unlock(&cs->mu);
        free(k);
        *socket_context = NULL;
        return;
    }
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci || !(k = calloc(1, sizeof(*k))))
        return; /* untracked: only libmicrohttpd's own timeouts apply */
    k->fd = ci->connect_fd;
    k->state = CONN_FRESH;
    k->since_ns = hps__kserve_now_ns();
    pthread_mutex_lock(&cs->mu);
    k->next = &cs->head;
    k->prev = cs->head.prev;
    k->prev->next = k;
    cs->head.prev = k;
    if (++cs->count > cs->high) {
        struct hps__kserve_kconn *v = victim(cs);
        if (v && v != k)
            evict(v, &cs->evicted);
    }
    pthread_mutex_unlock(&cs->mu);
    *socket_context = k;
}

static struct hps__kserve_kconn *kconn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* Move c to state st (from its socket context; untracked: nothing). */
static void set_state(struct hps__kserve_conns *cs, struct MHD_Connection *c, int st)
{
    struct hps__kserve_kconn *k = kconn_of(c);
    if (!k)
        return;
    pthread_mutex_lock(&cs->mu);
    k->state = st;
    k->since_ns = hps__kserve_now_ns();
    atomic_store_explicit(&k->body_bytes, 0, memory_order_relaxed);
    pthread_mutex_unlock(&cs->mu);
}

void *hps__kserve_conn_uri_log(void *cls, const char *uri, struct MHD_Connection *c)
{
    (void)uri;
    set_state(cls, c, CONN_HEADER);
    return NULL; /* the access handler still sees *req_cls == NULL first */
}

void hps__kserve_conn_body(struct hps__kserve_conns *cs, struct MHD_Connection *c)
{
    set_state(cs, c, CONN_BODY);
}

void hps__kserve_conn_body_bytes(struct MHD_Connection *c, size_t n)
{
    struct hps__kserve_kconn *k = kconn_of(c);
    if (k)
        atomic_fetch_add_explicit(&k->body_bytes, n, memory_order_relaxed);
}

void hps__kserve_conn_busy(struct hps__kserve_conns *cs, struct MHD_Connection *c)
{
    set_state(cs, c, CONN_BUSY);
}

void hps__kserve_conn_idle(struct hps__kserve_conns *cs, struct MHD_Connection *c)
{
    set_state(cs, c, CONN_IDLE);
}

static void *reaper(void *arg)
{
    struct hps__kserve_conns *cs = arg;
    pthread_mutex_lock(&cs->mu);
    while (!cs->stop) {
        uint64_t now = hps__kserve_now_ns();
        for (struct hps__kserve_kconn *k = cs->head.next; k != &cs->head; k = k->next)
            if ((k->state == CONN_FRESH || k->state == CONN_HEADER) &&
                now - k->since_ns > cs->header_ns)
                evict(k, &cs->header_timeouts);
            else if (body_slow(cs, k, now, cs->header_ns))
                evict(k, &cs->body_timeouts);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += REAP_PERIOD_MS * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&cs->cv, &cs->mu, &ts);
    }
    pthread_mutex_unlock(&cs->mu);
    return NULL;
}

hps_err_t hps__kserve_conns_start(struct hps__kserve_conns *cs, unsigned max, unsigned header_ms,
                                  unsigned min_body_rate)
{
    cs->head.next = cs->head.prev = &cs->head;
    cs->count = 0;
    cs->stop = false;
    cs->high = max - max / 8;
    cs->header_ns = (uint64_t)header_ms * 1000000ULL;
    cs->min_body_rate = min_body_rate;
    if (pthread_create(&cs->reaper, NULL, reaper, cs) != 0)
        return HPS_EIO;
    cs->started = true;
    return 0;
}

void hps__kserve_conns_stop(struct hps__kserve_conns *cs)
{
    if (!cs->started)
        return;
    pthread_mutex_lock(&cs->mu);
    cs->stop = true;
    pthread_cond_broadcast(&cs->cv);
    pthread_mutex_unlock(&cs->mu);
    pthread_join(cs->reaper, NULL);
    cs->started = false;
}
