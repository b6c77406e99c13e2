/*
 * kserve_http.h -- the server object and the libmicrohttpd callbacks,
 * shared by kserve_server.c (lifecycle, listeners), kserve_http.c
 * (per-request upload handling and endpoint handlers) and kserve_send.c
 * (queueing the answers).
 */
#ifndef HPS_WORKER_KSERVE_HTTP_H
#define HPS_WORKER_KSERVE_HTTP_H

#include <microhttpd.h>

#include "worker/kserve_internal.h"

/** Connection admission of one listener (kserve_conn.c): the HTTP port's
 *  and the metrics port's, each with its own reaper. */
struct hps__kserve_conns {
    pthread_mutex_t mu; /* guards the list, count, stop and every connection's state */
    pthread_cond_t cv;  /* wakes the reaper to stop */
    struct hps__kserve_kconn {
        struct hps__kserve_kconn *prev, *next;
        int fd, state;
        uint64_t since_ns;
        bool closing;
        /* body bytes received in state BODY: relaxed atomic, added by the
         * connection's event-loop thread without mu, read by the reaper */
        _Atomic uint64_t body_bytes;
    } head;         /* list of live connections (sentinel) */
    unsigned count; /* mu */
    /* immutable while running (hps__kserve_conns_start): */
    unsigned high;          /* a new connection past this evicts one */
    uint64_t header_ns;     /* header deadline */
    uint64_t min_body_rate; /* bytes/s a body must average past header_ns; 0: none */
    bool stop;              /* mu */
    bool started;
    pthread_t reaper;
    _Atomic uint64_t evicted;         /* closed for room (relaxed: a counter) */
    _Atomic uint64_t header_timeouts; /* closed past header_timeout_ms */
    _Atomic uint64_t body_timeouts;   /* closed for a body slower than min_body_rate */
};

struct hps_kserve {
    /* Options, defaults resolved; strings owned. */
    char *http_address;
    char *metrics_address;
    char *server_name;
    char *server_version;
    int http_port;
    int metrics_port;
    unsigned threads;
    unsigned max_connections;
    unsigned idle_timeout_s;
    unsigned header_timeout_ms;
    unsigned min_body_rate; /* bytes/s */
    unsigned drain_timeout_ms;
    size_t max_body;
    size_t max_buffered;        /* request bodies buffered at once, all connections */
    _Atomic uint64_t body_held; /* bytes of body buffers now (relaxed: a budget) */
    struct hps__kserve_klimits limits;

    hps_kserve_backend_t backend;
    /* System shared-memory regions; limits.shm points here when enabled. */
    struct hps__kserve_shm shm;
    /* OUTPUT0 buffers of large responses (a pointer: const servers use it). */
    struct hps__kserve_outpool *outpool;
    /* The registry: model_cap entries, never moved; [0, num_models) in use.
     * hps_kserve_add_model writes an entry under models_mu, then publishes
     * it by num_models (atomic, release); entries are never removed. */
    struct hps__kserve_kmodel *models;
    _Atomic size_t num_models;
    size_t model_cap; /* set by hps_kserve_create, then read-only */
    pthread_mutex_t models_mu;
    /* Guards every entry's load_failure (hps__kserve_load_failure_set). */
    pthread_mutex_t fail_mu;

    /* Listeners; valid while running. */
    struct MHD_Daemon *http;
    struct MHD_Daemon *metrics;
    int http_fd; /* listening sockets, closed after MHD_stop_daemon */
    int metrics_fd;
    uint16_t bound_http_port;
    uint16_t bound_metrics_port;
    /* Listeners started: written by hps_kserve_start / _stop, read by
     * them and hps_kserve_ports; no lock (the caller serializes start,
     * stop and destroy of one server, include/hps/kserve.h). */
    bool running;
    /* Set while hps_kserve_stop() drains: responses carry Connection: close
     * and the accept policy closes new connections.  Relaxed: a connection
     * accepted just before it is set is drained like any other. */
    _Atomic bool draining;

    /* The lookup pool (kserve_pool.c): inference lookups run there;
     * created by hps_kserve_start, stopped after the drain. */
    struct hps__kserve_pool *pool;
    unsigned lookup_threads;
    struct hps__kserve_conns conns;  /* the HTTP port's */
    struct hps__kserve_conns mconns; /* the metrics port's */

    /* Requests between their first callback and their completion
     * notification; hps_kserve_stop() drains it to zero.  Only a counter,
     * no data is published through it: relaxed. */
    _Atomic int64_t inflight;
};

/** Record why this worker's load of model `name` failed (reason, a C
 *  string, cut to HPS__KSERVE_LOAD_FAILURE_MAX - 1 bytes), or forget it
 *  (reason ""), on the entry that speaks for the name (kserve_server.c).
 *  A name not in the registry: nothing.  Thread-safe (fail_mu). */
void hps__kserve_load_failure_set(hps_kserve_t *s, const char *name, const char *reason);

/* ------------------------------------------------------------------------ */
/* Lookup pool (kserve_pool.c)                                               */
/* ------------------------------------------------------------------------ */

/** A job of the lookup pool, embedded in the caller's state. */
struct hps__kserve_job {
    struct hps__kserve_job *next; /* the pool's queue (its mutex) */
    void (*run)(struct hps__kserve_job *j);
};

/** Start `threads` pool threads.  0, -ENOMEM or HPS_EIO (nothing left running). */
hps_err_t hps__kserve_pool_start(unsigned threads, struct hps__kserve_pool **ret);
/** Queue j; a pool thread calls j->run(j).  Never fails; thread-safe. */
void hps__kserve_pool_submit(struct hps__kserve_pool *p, struct hps__kserve_job *j);
/** Run every queued job, then join the threads and free p (NULL: no-op). */
void hps__kserve_pool_stop(struct hps__kserve_pool *p);

/* ------------------------------------------------------------------------ */
/* Connection admission (kserve_conn.c)                                      */
/* ------------------------------------------------------------------------ */

/** Start cs's reaper (mu and cv initialised by the caller): connections
 *  past seven eighths of max evict one; headers due within header_ms;
 *  bodies at min_body_rate bytes/s on average once header_ms has passed
 *  (0: no minimum).  0 or HPS_EIO. */
hps_err_t hps__kserve_conns_start(struct hps__kserve_conns *cs, unsigned max, unsigned header_ms,
                                  unsigned min_body_rate);
/** Stop the reaper (after the daemon stopped); no-op if not started. */
void hps__kserve_conns_stop(struct hps__kserve_conns *cs);
/** MHD_NotifyConnectionCallback: track, and evict for room; cls = the
 *  listener's struct hps__kserve_conns. */
void hps__kserve_conn_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                             enum MHD_ConnectionNotificationCode toe);
/** MHD_OPTION_URI_LOG_CALLBACK: a request line arrived (header coming);
 *  cls as hps__kserve_conn_notify. */
void *hps__kserve_conn_uri_log(void *cls, const char *uri, struct MHD_Connection *c);
/** The header is complete and the request has a body coming. */
void hps__kserve_conn_body(struct hps__kserve_conns *cs, struct MHD_Connection *c);
/** n more bytes of body arrived (lock-free). */
void hps__kserve_conn_body_bytes(struct MHD_Connection *c, size_t n);
/** The request is whole (header, body if any): lookup, answer. */
void hps__kserve_conn_busy(struct hps__kserve_conns *cs, struct MHD_Connection *c);
/** The request completed: keep-alive idle. */
void hps__kserve_conn_idle(struct hps__kserve_conns *cs, struct MHD_Connection *c);

/* ------------------------------------------------------------------------ */
/* Answers (kserve_send.c)                                                   */
/* ------------------------------------------------------------------------ */

/*
 * Each hps__kserve_http_send_*() queues its answer on c and returns what the
 * access handler returns (MHD_NO: the response could not be made or
 * queued).  While the server drains, answers carry Connection: close.  On a
 * thread that called hps__kserve_http_park(p) they are parked in *p instead (the
 * connection is suspended) and MHD_YES is returned.
 */

/** A response made on a lookup-pool thread, kept until its connection resumes. */
struct hps__kserve_http_parked {
    unsigned status;
    struct MHD_Response *r; /* NULL: the response could not be made */
};

/** Until the next call, park the answers this thread sends in p (NULL: queue them). */
void hps__kserve_http_park(struct hps__kserve_http_parked *p);
/** An empty text/plain answer. */
enum MHD_Result hps__kserve_http_send_empty(const hps_kserve_t *s, struct MHD_Connection *c,
                                            unsigned status);
/** The text t (ownership taken) as a ctype answer; 500 if it ran out of memory. */
enum MHD_Result hps__kserve_http_send_text(const hps_kserve_t *s, struct MHD_Connection *c,
                                           unsigned status, const char *ctype,
                                           hps__kserve_text_t *t);
/** The text t (ownership taken) as an application/json answer. */
enum MHD_Result hps__kserve_http_send_json(const hps_kserve_t *s, struct MHD_Connection *c,
                                           unsigned status, hps__kserve_text_t *t);
/** {"error": msg} with the status. */
enum MHD_Result hps__kserve_http_send_error(const hps_kserve_t *s, struct MHD_Connection *c,
                                            unsigned status, const char *msg);
/** A JSON inference answer (t consumed), compressed with enc if it can be. */
enum MHD_Result hps__kserve_http_send_infer_json(const hps_kserve_t *s, struct MHD_Connection *c,
                                                 hps__kserve_text_t *t, enum hps__kserve_zenc enc);
/** A binary inference answer: JSON header t (consumed), then out_len floats of
 *  out (from s->outpool, consumed), compressed with enc if it can be. */
enum MHD_Result hps__kserve_http_send_binary(const hps_kserve_t *s, struct MHD_Connection *c,
                                             hps__kserve_text_t *t, float *out, uint64_t out_len,
                                             enum hps__kserve_zenc enc);

/* ------------------------------------------------------------------------ */
/* libmicrohttpd callbacks (kserve_http.c)                                   */
/* ------------------------------------------------------------------------ */

/** MHD_AccessHandlerCallback of the HTTP (KServe v2) listener; cls = server. */
enum MHD_Result hps__kserve_http_on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                            const char *method, const char *version,
                                            const char *upload_data, size_t *upload_data_size,
                                            void **req_cls);

/** MHD_RequestCompletedCallback of the HTTP listener: frees the request state. */
void hps__kserve_http_on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                                   enum MHD_RequestTerminationCode toe);

/** MHD_AccessHandlerCallback of the metrics listener; cls = server. */
enum MHD_Result hps__kserve_metrics_on_request(void *cls, struct MHD_Connection *conn,
                                               const char *url, const char *method,
                                               const char *version, const char *upload_data,
                                               size_t *upload_data_size, void **req_cls);

#endif /* HPS_WORKER_KSERVE_HTTP_H */
