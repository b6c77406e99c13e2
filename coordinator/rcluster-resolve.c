/*
 * rcluster-resolve.c -- a Redis node's host name resolved within the
 * caller's deadline.
 *
 * hiredis resolves a host name with a blocking getaddrinfo(), which no
 * connect timeout bounds: a slow or dead DNS server (a Kubernetes cluster's
 * resolver under load, ndots search lists) would hold a lookup's connect
 * for the resolver's own timeouts (5 s per try and server by default).  So
 * a node's name is resolved here, with glibc's getaddrinfo_a() (its helper
 * thread does the blocking call), and hiredis only ever gets the numeric
 * address:
 *
 *  - an IP literal is used as it is;
 *  - a resolved address is used for ADDR_TTL_MS, then again while a new
 *    resolution runs in the background, or after it failed (a stale
 *    address beats none: it is most often still right; a refused connect
 *    marks it stale);
 *  - with no address yet, the caller waits for the resolution until its
 *    deadline, and fails with HPS_ETIMEDOUT after that; the resolution
 *    goes on, and a later call finds its answer.
 *
 * One resolution per node is in flight at a time, owned by the node until
 * gai_error() says it is done, harvested by whichever caller sees that.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rcluster-internal.h"

#define ADDR_TTL_MS 30000u /* a resolved address is fresh this long */
#define RETRY_MS    5000u  /* a failed refresh is tried again after this */
#define POLL_MS     1u     /* a caller with no address checks this often */

/* One getaddrinfo_a() request and the strings it points to, which must
 * stay valid while it runs. */
struct hps__rcluster_gai {
    struct gaicb cb;
    struct addrinfo hints;
    char name[HPS_RCLUSTER_HOST_MAX];
    char service[8];
};

void hps__rcluster_addr_init(node_t *nd)
{
    pthread_mutex_init(&nd->addr_mu, NULL);
    unsigned char buf[sizeof(struct in6_addr)];
    nd->numeric = inet_pton(AF_INET, nd->host, buf) == 1 || inet_pton(AF_INET6, nd->host, buf) == 1;
}

void hps__rcluster_addr_fini(node_t *nd)
{
    struct hps__rcluster_gai *g = nd->gai;
    if (g && (gai_error(&g->cb) != EAI_INPROGRESS || gai_cancel(&g->cb) == EAI_CANCELED)) {
        if (g->cb.ar_result)
            freeaddrinfo(g->cb.ar_result);
        free(g);
    }
    /* else glibc's helper thread still owns g: left to it (reachable from
     * glibc's request list, and the process is most often exiting) */
    nd->gai = NULL;
    pthread_mutex_destroy(&nd->addr_mu);
}

/* The finished request's first address into nd->addr; addr_mu held.
 * Returns 0, or the request's EAI_* error. */
static int harvest_locked(node_t *nd, uint64_t now)
{
    struct hps__rcluster_gai *g = nd->gai;
    int e = gai_error(&g->cb);
    if (e == EAI_INPROGRESS)
        return e;
    const struct addrinfo *ai = e == 0 ? g->cb.ar_result : NULL;
    if (ai && ai->ai_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)ai->ai_addr)->sin_addr, nd->addr,
                  sizeof(nd->addr));
    else if (ai && ai->ai_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)ai->ai_addr)->sin6_addr, nd->addr,
                  sizeof(nd->addr));
    else if (e == 0)
        e = EAI_FAMILY;
    if (e == 0)
        nd->addr_ms = now ? now : 1;
    if (g->cb.ar_result)
        freeaddrinfo(g->cb.ar_result);
    free(g);
    nd->gai = NULL;
    return e;
}

/* Start resolving nd->host unless a resolution runs; addr_mu held.
 * Returns 0 or an EAI_* error of getaddrinfo_a() itself. */
static int start_locked(node_t *nd)
{
    if (nd->gai)
        return 0;
    struct hps__rcluster_gai *g = calloc(1, sizeof(*g));
    if (!g)
        return EAI_MEMORY;
    snprintf(g->name, sizeof(g->name), "%s", nd->host);
    snprintf(g->service, sizeof(g->service), "%d", nd->port);
    g->hints.ai_family = AF_UNSPEC;
    g->hints.ai_socktype = SOCK_STREAM;
    g->cb.ar_name = g->name;
    g->cb.ar_service = g->service;
    g->cb.ar_request = &g->hints;
    struct gaicb *list[1] = {&g->cb};
    int e = getaddrinfo_a(GAI_NOWAIT, list, 1, NULL);
    if (e) {
        free(g);
        return e;
    }
    nd->gai = g;
    return 0;
}

hps_err_t hps__rcluster_addr(node_t *nd, uint64_t deadline, char *out, size_t len, char *err,
                             size_t err_len)
{
    if (nd->numeric) {
        snprintf(out, len, "%s", nd->host);
        return 0;
    }
    for (;;) {
        uint64_t now = hps__rcluster_now_ms();
        pthread_mutex_lock(&nd->addr_mu);
        int e = nd->gai ? harvest_locked(nd, now) : 0;
        if (e && e != EAI_INPROGRESS && nd->addr[0]) {
            /* a refresh failed: the old address stays, asked again later */
            nd->addr_ms = now + RETRY_MS > ADDR_TTL_MS ? now + RETRY_MS - ADDR_TTL_MS : 1;
        } else if (e && e != EAI_INPROGRESS) { /* no address: say why, once */
            pthread_mutex_unlock(&nd->addr_mu);
            hps__rcluster_set_err(err, err_len, "%s:%d: resolving the host name: %s", nd->host,
                                  nd->port, gai_strerror(e));
            return -ECONNREFUSED;
        }
        bool have = nd->addr[0] != '\0';
        bool fresh = have && nd->addr_ms && now - nd->addr_ms < ADDR_TTL_MS;
        if (!fresh && (e = start_locked(nd)) != 0) {
            pthread_mutex_unlock(&nd->addr_mu);
            hps__rcluster_set_err(err, err_len, "%s:%d: resolving the host name: %s", nd->host,
                                  nd->port, gai_strerror(e));
            return e == EAI_MEMORY ? -ENOMEM : -ECONNREFUSED;
        }
        if (have) { /* fresh, or stale while the new answer comes */
            snprintf(out, len, "%s", nd->addr);
            pthread_mutex_unlock(&nd->addr_mu);
            return 0;
        }
        pthread_mutex_unlock(&nd->addr_mu);
        if (now >= deadline) {
            hps__rcluster_set_err(err, err_len,
                                  "%s:%d: resolving the host name: no answer in time (the DNS "
                                  "server is slow or unreachable; still trying)",
                                  nd->host, nd->port);
            return HPS_ETIMEDOUT;
        }
        const struct timespec tick = {0, POLL_MS * 1000000L};
        nanosleep(&tick, NULL);
    }
}

void hps__rcluster_addr_stale(node_t *nd)
{
    if (nd->numeric)
        return;
    pthread_mutex_lock(&nd->addr_mu);
    nd->addr_ms = 0;
    pthread_mutex_unlock(&nd->addr_mu);
}
