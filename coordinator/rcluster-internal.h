/*
 * rcluster-internal.h -- private structures and functions of the Redis
 * Cluster client, shared by rcluster.c (nodes, connections, create /
 * destroy, exec), rcluster-slots.c (key hashing, the slot map and its
 * refresh) and rcluster-resolve.c (node host names).  Not installed.
 */
#ifndef HPS_COORDINATOR_RCLUSTER_INTERNAL_H
#define HPS_COORDINATOR_RCLUSTER_INTERNAL_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "hps/rcluster.h"

#define MAX_NODES 256     /* size of the node table (it never shrinks) */
#define NO_NODE   0xffffu /* no node: unserved slot, no ASK target */

/* One connection of a node.  mu is held for as long as one call uses it
 * (hps__rcluster_conn_take locks it, the call unlocks it when done), so
 * one thread at a time talks on ctx. */
typedef struct conn {
    pthread_mutex_t mu;
    redisContext *ctx; /* NULL: not connected; read and replaced under mu (destroy: none) */
} conn_t;

typedef struct node {
    char host[HPS_RCLUSTER_HOST_MAX];
    int port;
    conn_t *conns;           /* conns_per_node */
    unsigned next;           /* round-robin pick (a hint; races are harmless) */
    pthread_mutex_t down_mu; /* guards retry_at_ms and backoff_ms */
    uint64_t retry_at_ms;    /* connect attempts skipped until then */
    unsigned backoff_ms;     /* written atomically under down_mu; read unlocked */
    /* The host's numeric address (rcluster-resolve.c). */
    bool numeric;                  /* host is an IP literal (immutable after creation) */
    pthread_mutex_t addr_mu;       /* guards addr, addr_ms and gai */
    char addr[INET6_ADDRSTRLEN];   /* the resolved address, "" = none yet */
    uint64_t addr_ms;              /* when it was resolved (monotonic ms), 0 = stale */
    struct hps__rcluster_gai *gai; /* a resolution in flight, NULL = none */
} node_t;

struct hps_rcluster {
    hps_rcluster_opts_t o;
    char *address, *user, *password;
    pthread_mutex_t map_mu; /* nodes[], num_nodes, slot_node[], last_refresh_ms */
    node_t *nodes[MAX_NODES];
    unsigned num_nodes;
    uint16_t slot_node[HPS_RCLUSTER_SLOTS];
    uint64_t last_refresh_ms;
    pthread_mutex_t refresh_mu; /* one refresh at a time */
};

/* ---- rcluster-resolve.c ------------------------------------------------- */

/* Set up / tear down nd's address state (after nd->host is set; fini
 * before nd is freed, with no call in progress). */
void hps__rcluster_addr_init(node_t *nd);
void hps__rcluster_addr_fini(node_t *nd);

/* nd's numeric address (IPv4 or IPv6, at most INET6_ADDRSTRLEN bytes with
 * the NUL) into out: the host itself if it is one, else the resolved one,
 * waiting for a resolution until deadline (monotonic ms) at most.  Returns
 * 0; HPS_ETIMEDOUT (no answer by deadline: the resolution goes on);
 * -ECONNREFUSED (the name does not resolve); -ENOMEM.  err says why.
 * Thread-safe (addr_mu). */
hps_err_t hps__rcluster_addr(node_t *nd, uint64_t deadline, char *out, size_t len, char *err,
                             size_t err_len);

/* A connect to nd's address failed: resolve the name again at the next
 * call (the old address is used until the answer comes).  Thread-safe. */
void hps__rcluster_addr_stale(node_t *nd);

/* ---- rcluster.c --------------------------------------------------------- */

/* Milliseconds of CLOCK_MONOTONIC. */
uint64_t hps__rcluster_now_ms(void);

/* printf into err (NULL-safe, truncating). */
__attribute__((format(printf, 3, 4))) void hps__rcluster_set_err(char *err, size_t len,
                                                                 const char *fmt, ...);

/* Find or add node host:port; map_mu held.  Returns its index or NO_NODE. */
unsigned hps__rcluster_node_get_locked(hps_rcluster_t *rc, const char *host, int port);

/* Node i (map_mu taken briefly; node pointers stay valid until destroy). */
node_t *hps__rcluster_node_at(hps_rcluster_t *rc, unsigned i);

/* Close cn's connection, if any; cn->mu held. */
void hps__rcluster_conn_drop(conn_t *cn);

/* Run one command on a connected context by the deadline (AUTH, CLUSTER
 * SLOTS); *ret is the reply on success. */
hps_err_t hps__rcluster_ctx_call(redisContext *ctx, uint64_t deadline, redisReply **ret, int argc,
                                 const char **argv, char *err, size_t err_len);

/* True while nd backs off (no side effect: for ordering nodes). */
bool hps__rcluster_node_backing_off(node_t *nd);

/* Make cn connected (connect, non-blocking, AUTH); cn->mu held.  call_ms is
 * the timeout of the call that connects (see rcluster.c on back-off). */
hps_err_t hps__rcluster_conn_ensure(hps_rcluster_t *rc, node_t *nd, conn_t *cn, uint64_t deadline,
                                    unsigned call_ms, char *err, size_t err_len);

/* Lock one connection of nd, waiting for a busy one at most until deadline;
 * NULL when none came in time. */
conn_t *hps__rcluster_conn_take(hps_rcluster_t *rc, node_t *nd, uint64_t deadline);

/* ---- rcluster-slots.c --------------------------------------------------- */

/* Split "host:port" or "[v6]:port" (length len) into host and port. */
hps_err_t hps__rcluster_parse_hostport(const char *s, size_t len, char *host, int *port);

/* CLUSTER SLOTS from node i, by the deadline (ms, CLOCK_MONOTONIC). */
hps_err_t hps__rcluster_map_load_from(hps_rcluster_t *rc, unsigned i, uint64_t deadline,
                                      unsigned call_ms, char *err, size_t err_len);

/* Refresh unless another thread did so lately; a fast call (lookups)
 * neither waits for a refresh in progress nor passes its deadline. */
void hps__rcluster_maybe_refresh(hps_rcluster_t *rc, uint64_t deadline, bool fast);

#endif /* HPS_COORDINATOR_RCLUSTER_INTERNAL_H */
