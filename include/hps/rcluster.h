/*
 * rcluster.h -- a Redis Cluster client over hiredis (which has no cluster
 * support): the slot map, routing, redirections and reconnection are ours;
 * hiredis formats commands and parses replies.
 *
 * Routing.  Every command names the hash slot of its key
 * (hps_rcluster_key_slot(): CRC16/XMODEM of the key, or of the text inside
 * the first non-empty {hash tag}, modulo 16384, as Redis Cluster).  The slot
 * map comes from CLUSTER SLOTS, asked of any known node (the seeds first at
 * start-up, then every master and replica seen so far).
 *
 * Execution.  hps_rcluster_exec() runs a batch of commands: it groups them
 * by node, appends each group to one connection of that node as a pipeline,
 * and drives every node's socket at once from one poll() loop (non-blocking
 * I/O; no thread per node), under one deadline.  Replies are matched to
 * commands in order.  Then, for each command:
 *  - "-MOVED slot host:port": the slot map entry is updated, a full map
 *    refresh is scheduled, and the command is re-sent to the new owner;
 *  - "-ASK slot host:port": re-sent to that node after ASKING (map unchanged);
 *  - "-TRYAGAIN", "-CLUSTERDOWN", "-LOADING", a lost connection or a
 *    refused connect: the map is refreshed and the command retried after a
 *    short back-off while the deadline allows;
 * at most max_redirects rounds.  A command that still has no answer gets
 * status < 0 and reply NULL; the other commands of the batch are unaffected.
 *
 * Connections.  conns_per_node connections per node, made on first use
 * (connect timeout, then AUTH; a call takes a free connected one first).  A
 * connection that fails is closed and made again on next use; a node whose
 * connect fails, or that lets a call's deadline pass (AUTH included, which
 * the connect timeout also bounds), is skipped for a back-off period (50 ms
 * doubling to 2 s), with its open connections too, so that a dead or hung
 * master costs no time per call (the probe that ends a period costs at most
 * the probing call's deadline): its commands fail at once and the caller
 * falls back.  A timeout counts against a node only when the node had at
 * least half of the call's time (or the whole connect timeout): not when
 * other nodes' connects used it up.  Within a round, nodes with a free
 * connected connection are served first; connects, and nodes whose
 * connections are all busy, come after.  When the period ends, one call
 * probes the node while the others keep skipping it.  AUTH: with a
 * password, "AUTH <password>" when user is empty or "default" (works on
 * every Redis version), else "AUTH <user> <password>" (Redis 6 ACLs).
 *
 * TLS: none (hiredis 0.14 has no TLS); the distributed-DB layer refuses
 * enable_tls.
 *
 * Thread safety.  Every function taking an hps_rcluster_t may be called from
 * any number of threads at once, except hps_rcluster_destroy() (last call).
 * Concurrent calls use different connections of a node when there are
 * enough, else wait for one.  Do not use a handle after fork().
 *
 * Errors.  hps_err_t codes; a message goes to err[0..err_len) when err is
 * not NULL.  The library never prints.
 */
#ifndef HPS_RCLUSTER_H
#define HPS_RCLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "hps/hps.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Number of hash slots of a Redis Cluster. */
#define HPS_RCLUSTER_SLOTS 16384u
/** Longest host name kept for a node. */
#define HPS_RCLUSTER_HOST_MAX 256

typedef struct hps_rcluster hps_rcluster_t;

/** Options of hps_rcluster_create(); fill with hps_rcluster_opts_init(). */
typedef struct hps_rcluster_opts {
    /** Seeds: "host:port[,host:port...]", IPv6 as "[::1]:7000".  Every seed
     *  is tried in turn (HugeCTR used only the first). */
    const char *address;
    /** ACL user ("" or "default": password-only AUTH). */
    const char *user;
    /** Password; "" sends no AUTH. */
    const char *password;
    /** Connections per node, >= 1 (HugeCTR num_node_connections, 5). */
    unsigned conns_per_node;
    /** Timeout of one TCP connect, in ms (default 500). */
    unsigned connect_timeout_ms;
    /** Deadline of one hps_rcluster_exec() call, in ms (default 1000). */
    unsigned timeout_ms;
    /** Deadline of one hps_rcluster_exec_fast() call (lookups), in ms
     *  (default 1000).  Everything such a call does waits no longer: the
     *  connects and AUTHs it makes, a free connection of a node, the slot-map
     *  refresh it may start (skipped when another call is refreshing). */
    unsigned fast_timeout_ms;
    /** Most routing rounds of one call (MOVED/ASK/retries; default 5). */
    unsigned max_redirects;
} hps_rcluster_opts_t;

/** One command of a batch; see hps_rcluster_exec(). */
typedef struct hps_rcluster_cmd {
    int argc;              /**< in: number of arguments, >= 1 */
    const char **argv;     /**< in: (argc) argument pointers (binary-safe) */
    const size_t *argvlen; /**< in: (argc) argument lengths in bytes */
    uint16_t slot;         /**< in: hash slot of the command's key */
    redisReply *reply;     /**< out: the reply (caller frees with
                                freeReplyObject), NULL when status < 0 */
    hps_err_t status;      /**< out: 0 when a reply came (it may be an error
                                reply: check reply->type); < 0: none came */
} hps_rcluster_cmd_t;

/** A parsed "-MOVED" or "-ASK" error. */
typedef struct hps_rcluster_redirect {
    bool ask;                         /**< ASK (true) or MOVED (false) */
    uint16_t slot;                    /**< the slot */
    char host[HPS_RCLUSTER_HOST_MAX]; /**< target host (no brackets) */
    int port;                         /**< target port */
} hps_rcluster_redirect_t;

/**
 * @brief CRC16/XMODEM (polynomial 0x1021, init 0, no reflection), Redis
 *        Cluster's key hash: "123456789" -> 0x31C3.
 * @param[in] buf  (len) bytes, host memory; may be NULL when len is 0.
 * @param[in] len  Length in bytes.
 * @return The CRC.  Pure; thread-safe.
 */
uint16_t hps_rcluster_crc16(const void *buf, size_t len);

/**
 * @brief Hash slot of a key: CRC16 of the whole key, or, when the key holds
 *        "{...}" with at least one byte between the first '{' and the next
 *        '}', of those bytes only; modulo 16384.
 * @param[in] key  (len) bytes (binary-safe), host memory.
 * @param[in] len  Length in bytes.
 * @return The slot, < HPS_RCLUSTER_SLOTS.  Pure; thread-safe.
 */
uint16_t hps_rcluster_key_slot(const void *key, size_t len);

/**
 * @brief Parse a redirection error text, "MOVED 3999 127.0.0.1:6381" or
 *        "ASK 3999 [::1]:6381" (without the leading '-').
 * @param[in]  msg  NUL-terminated error text of a reply.
 * @param[out] ret  The redirection; written only on success.
 * Thread-safe.
 * @return 0; HPS_EINVAL when msg is no MOVED/ASK error or is malformed
 *         (slot >= 16384, no port, host too long).
 */
hps_err_t hps_rcluster_parse_redirect(const char *msg, hps_rcluster_redirect_t *ret);

/**
 * @brief Fill opts with the defaults: address "127.0.0.1:7000", user
 *        "default", no password, 5 connections per node, connect timeout
 *        500 ms, call deadline 1000 ms (fast calls too), 5 rounds.
 * @param[out] opts  Options to fill.  Thread-safe.
 */
void hps_rcluster_opts_init(hps_rcluster_opts_t *opts);

/**
 * @brief Connect to the cluster: parse the seeds, and load the slot map
 *        from the first seed that answers CLUSTER SLOTS (connect, AUTH).
 *
 * @param[in]  opts     Options (strings are copied).
 * @param[out] ret      The client; release with hps_rcluster_destroy().
 *                      Written only on success (nothing to release on
 *                      failure).
 * @param[out] err      Message buffer (may be NULL), e.g.
 *                      "127.0.0.1:7000: AUTH refused: WRONGPASS ...".
 * @param[in]  err_len  Size of err.
 * Reentrant.
 * @return 0; HPS_EINVAL (bad address list or zero option); -ECONNREFUSED
 *         or HPS_EIO (no seed reachable; the message names each);
 *         -EACCES (AUTH refused, or the server requires a password);
 *         HPS_ECONFIG (a seed is not in cluster mode, or it serves no
 *         slot); HPS_ETIMEDOUT; -ENOMEM.
 */
hps_err_t hps_rcluster_create(const hps_rcluster_opts_t *opts, hps_rcluster_t **ret, char *err,
                              size_t err_len);

/**
 * @brief Close every connection and free the client.
 * @param[in] rc  The client, or NULL (no-op).  No other call may be running.
 */
void hps_rcluster_destroy(hps_rcluster_t *rc);

/**
 * @brief Run a batch of commands: pipelined per node, all nodes at once,
 *        following MOVED/ASK and retrying lost nodes, under one deadline of
 *        timeout_ms (see the file comment).
 *
 * @param[in]     rc       The client.
 * @param[in]     n        Number of commands (0: no-op).
 * @param[in,out] cmds     (n) commands; on return every cmd has status and
 *                         reply set (reply owned by the caller).
 * @param[out]    err      Message for the first failed command (may be NULL).
 * @param[in]     err_len  Size of err.
 * Thread-safe.
 * @return 0 when every command got a reply (error replies included); else
 *         the status of the first command without one (-ECONNREFUSED,
 *         HPS_EIO, HPS_ETIMEDOUT, HPS_EBUSY for CLUSTERDOWN/TRYAGAIN,
 *         -ENOMEM); the replies that did come are still returned.
 */
hps_err_t hps_rcluster_exec(hps_rcluster_t *rc, size_t n, hps_rcluster_cmd_t *cmds, char *err,
                            size_t err_len);

/**
 * @brief hps_rcluster_exec() for callers with a lower layer to fall back
 *        on (lookups), under the deadline fast_timeout_ms: after a round that
 *        met CLUSTERDOWN, TRYAGAIN, LOADING, a timeout or a lost connection
 *        it returns at once, with no pause and no further round
 *        (hps_rcluster_exec() backs off 10, 20, 40, 80 ms and retries until
 *        its deadline).  MOVED / ASK redirections are still followed.  It
 *        never waits past its deadline for anything: a connection held by a
 *        slower call is HPS_ETIMEDOUT for that node's commands, and a slot-map
 *        refresh already running in another call is not waited for.  Same
 *        parameters, replies, thread safety and return values as
 *        hps_rcluster_exec().
 */
hps_err_t hps_rcluster_exec_fast(hps_rcluster_t *rc, size_t n, hps_rcluster_cmd_t *cmds, char *err,
                                 size_t err_len);

/**
 * @brief Reload the slot map now (CLUSTER SLOTS from any reachable node).
 * @param[in]  rc       The client.
 * @param[out] err      Message buffer (may be NULL).
 * @param[in]  err_len  Size of err.
 * Thread-safe.
 * @return 0, or the last node's error (as hps_rcluster_create()).
 */
hps_err_t hps_rcluster_refresh(hps_rcluster_t *rc, char *err, size_t err_len);

/**
 * @brief Number of distinct nodes that own slots in the current map.
 * @param[in] rc  The client.  Thread-safe.
 */
unsigned hps_rcluster_num_masters(hps_rcluster_t *rc);

#ifdef __cplusplus
}
#endif
#endif /* HPS_RCLUSTER_H */
