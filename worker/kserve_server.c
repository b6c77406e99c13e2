/*
 * kserve_server.c -- lifecycle of the HTTP front end: options, the model
 * registry copy, listening sockets and the libmicrohttpd daemons.
 *
 * Listeners.  The sockets are created here (so bind errors come back as
 * plain -errno and port 0 can be read back with getsockname) and handed to
 * libmicrohttpd with MHD_OPTION_LISTEN_SOCKET.  The HTTP daemon runs
 * `threads` epoll event loops (MHD_USE_EPOLL_INTERNAL_THREAD with
 * MHD_OPTION_THREAD_POOL_SIZE) sharing the non-blocking listening socket;
 * the metrics daemon runs one.
 *
 * Lookup pool.  Inference lookups that may wait run on the pool's threads
 * (kserve_pool.c) with their connection suspended (MHD_ALLOW_SUSPEND_RESUME).
 *
 * Graceful stop.  `draining` is set, and from then on the accept policy
 * (accept_policy) closes every new connection as soon as it is accepted;
 * requests already started (counted in srv->inflight from their first
 * callback to their completion notification) get up to drain_timeout_ms to
 * be answered; the pool finishes its lookups (each resumes its
 * connection); then MHD_stop_daemon() closes every connection and the
 * listening socket and joins every thread.  Not MHD_quiesce_daemon(): on an
 * epoll daemon with its own threads it races the event loop to remove the
 * listening socket from the epoll set, and the loser aborts the process
 * (MHD_PANIC "Failed to remove listen FD from epoll set", libmicrohttpd
 * 0.9.75: kserve-python's server aborted so at exit in a CI run under
 * ASan).
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "worker/kserve_http.h"

#define MAX_MODELS      1024
#define MAX_THREADS     1024
#define VERSION_MAX_LEN 18
#define JSON_DEPTH      32
#define CONN_MEMORY     (64 * 1024)
/* Connections of the metrics port (Prometheus keeps one per scraper) */
#define METRICS_CONNECTIONS 64

void hps_kserve_options_init(hps_kserve_options_t *o)
{
    memset(o, 0, sizeof(*o));
    o->http_address = "127.0.0.1";
    o->http_port = HPS_KSERVE_DEFAULT_HTTP_PORT;
    o->metrics_port = HPS_KSERVE_DEFAULT_METRICS_PORT;
    o->threads = 4;
    o->max_body_bytes = HPS_KSERVE_DEFAULT_MAX_BODY_BYTES;
    o->max_keys_per_request = HPS_KSERVE_DEFAULT_MAX_KEYS;
    o->max_connections = 1024;
    o->idle_timeout_s = 60;
    o->drain_timeout_ms = 5000;
    o->server_name = "hps";
    o->server_version = hps_version();
}

/* ------------------------------------------------------------------------ */
/* Registry                                                                  */
/* ------------------------------------------------------------------------ */

static bool valid_name(const char *s)
{
    if (!s)
        return false;
    size_t n = strlen(s);
    if (n == 0 || n > HPS_KSERVE_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == '-';
        if (!ok)
            return false;
    }
    return true;
}

static bool parse_version(const char *s, uint64_t *ret)
{
    size_t n = strlen(s);
    if (n == 0 || n > VERSION_MAX_LEN || strspn(s, "0123456789") != n)
        return false;
    *ret = strtoull(s, NULL, 10);
    return true;
}

static hps_err_t check_model(const hps_kserve_model_t *in)
{
    if (!valid_name(in->name) || in->num_tables == 0 || in->num_tables > HPS_KSERVE_MAX_TABLES ||
        !in->dims)
        return HPS_EINVAL;
    uint64_t v;
    if (in->version && !parse_version(in->version, &v))
        return HPS_EINVAL;
    for (uint32_t t = 0; t < in->num_tables; t++) {
        if (in->dims[t] == 0 || in->dims[t] > HPS_KSERVE_MAX_DIM ||
            (in->table_names && !valid_name(in->table_names[t])) ||
            (in->max_keys_per_sample && in->max_keys_per_sample[t] == 0))
            return HPS_EINVAL;
    }
    return 0;
}

static void model_fini(struct hps__kserve_kmodel *m)
{
    if (m->table_names)
        for (uint32_t t = 0; t < m->num_tables; t++)
            free(m->table_names[t]);
    free(m->table_names);
    free(m->dims);
    free(m->max_keys_per_sample);
    free(m->name);
}

static char *table_name(const hps_kserve_model_t *in, uint32_t t)
{
    if (in->table_names)
        return strdup(in->table_names[t]);
    char buf[32];
    snprintf(buf, sizeof(buf), "table%u", (unsigned)t);
    return strdup(buf);
}

/* Deep copy of a validated model. */
static hps_err_t model_copy(struct hps__kserve_kmodel *m, const hps_kserve_model_t *in)
{
    uint32_t n = in->num_tables;
    m->num_tables = n;
    m->name = strdup(in->name);
    uint64_t version = 1;
    if (in->version)
        parse_version(in->version, &version); /* checked by model_check */
    atomic_store(&m->version_num, version);
    m->dims = calloc(n, sizeof(uint32_t));
    m->max_keys_per_sample = calloc(n, sizeof(uint32_t));
    m->table_names = calloc(n, sizeof(char *));
    if (!m->name || !m->dims || !m->max_keys_per_sample || !m->table_names)
        return -ENOMEM;
    m->name_len = strlen(m->name);
    m->max_batch_size = in->max_batch_size;
    m->device_id = in->device_id;
    for (uint32_t t = 0; t < n; t++) {
        m->dims[t] = in->dims[t];
        m->max_keys_per_sample[t] = in->max_keys_per_sample ? in->max_keys_per_sample[t] : 1;
        m->keys_per_sample += m->max_keys_per_sample[t];
        if (m->dims[t] > m->max_dim)
            m->max_dim = m->dims[t];
        m->table_names[t] = table_name(in, t);
        if (!m->table_names[t])
            return -ENOMEM;
    }
    return 0;
}

static hps_err_t copy_models(hps_kserve_t *s, const hps_kserve_model_t *models, size_t n,
                             size_t cap)
{
    for (size_t i = 0; i < n; i++) {
        hps_err_t rc = check_model(&models[i]);
        if (rc)
            return rc;
        for (size_t j = 0; j < i; j++)
            if (strcmp(models[i].name, models[j].name) == 0)
                return HPS_EINVAL;
    }
    s->model_cap = cap > n ? cap : n;
    s->models = calloc(s->model_cap, sizeof(*s->models));
    if (!s->models)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        s->num_models = i + 1; /* model_fini of hps_kserve_destroy frees a partial copy */
        hps_err_t rc = model_copy(&s->models[i], &models[i]);
        if (rc)
            return rc;
    }
    return 0;
}

size_t hps_kserve_num_models(const hps_kserve_t *s)
{
    return atomic_load_explicit(&((hps_kserve_t *)s)->num_models, memory_order_acquire);
}

/* hps_kserve_add_model (replace false: the name is new) and
 * hps_kserve_replace_model (true: the name is known). */
static hps_err_t add_entry(hps_kserve_t *s, const hps_kserve_model_t *model, bool replace)
{
    if (!s || !model)
        return HPS_EINVAL;
    hps_err_t rc = check_model(model);
    if (rc)
        return rc;
    pthread_mutex_lock(&s->models_mu);
    size_t n = atomic_load_explicit(&s->num_models, memory_order_relaxed);
    bool known = false;
    for (size_t i = 0; i < n; i++)
        known |= strcmp(s->models[i].name, model->name) == 0;
    if (known != replace)
        rc = HPS_EINVAL;
    if (rc == 0 && n >= s->model_cap)
        rc = HPS_EFULL;
    if (rc == 0) {
        rc = model_copy(&s->models[n], model);
        if (rc) {
            model_fini(&s->models[n]);
            memset(&s->models[n], 0, sizeof(s->models[n]));
        } else
            atomic_store_explicit(&s->num_models, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&s->models_mu);
    return rc;
}

hps_err_t hps_kserve_add_model(hps_kserve_t *s, const hps_kserve_model_t *model)
{
    return add_entry(s, model, false);
}

hps_err_t hps_kserve_replace_model(hps_kserve_t *s, const hps_kserve_model_t *model)
{
    return add_entry(s, model, true);
}

/* ------------------------------------------------------------------------ */
/* Options                                                                   */
/* ------------------------------------------------------------------------ */

static hps_err_t check_options(const hps_kserve_options_t *o)
{
    if (o->http_port < 0 || o->http_port > 65535)
        return HPS_EINVAL;
    if (o->metrics_port != HPS_KSERVE_PORT_DISABLED &&
        (o->metrics_port < 0 || o->metrics_port > 65535))
        return HPS_EINVAL;
    if (o->threads > MAX_THREADS || o->lookup_threads > MAX_THREADS ||
        o->max_keys_per_request > HPS_KSERVE_MAX_KEYS_LIMIT)
        return HPS_EINVAL;
    return 0;
}

static hps_err_t apply_options(hps_kserve_t *s, const hps_kserve_options_t *o)
{
    const char *addr = o->http_address ? o->http_address : "127.0.0.1";
    s->http_address = strdup(addr);
    s->metrics_address = strdup(o->metrics_address ? o->metrics_address : addr);
    s->server_name = strdup(o->server_name ? o->server_name : "hps");
    s->server_version = strdup(o->server_version ? o->server_version : hps_version());
    if (!s->http_address || !s->metrics_address || !s->server_name || !s->server_version)
        return -ENOMEM;
    s->http_port = o->http_port;
    s->metrics_port = o->metrics_port;
    s->threads = o->threads ? o->threads : 4;
    s->lookup_threads = o->lookup_threads ? o->lookup_threads : 32;
    s->max_body = o->max_body_bytes ? o->max_body_bytes : HPS_KSERVE_DEFAULT_MAX_BODY_BYTES;
    /* 16 requests at their largest, each with a decoder's state (a gzip
     * body of a small max_body was refused at any load otherwise) */
    s->max_buffered = o->max_buffered_body_bytes
                          ? o->max_buffered_body_bytes
                          : 16 * (s->max_body + HPS__KSERVE_INFLATE_STATE_BYTES);
    s->limits.max_keys =
        o->max_keys_per_request ? o->max_keys_per_request : HPS_KSERVE_DEFAULT_MAX_KEYS;
    s->limits.json_depth = JSON_DEPTH;
    s->limits.shm = o->disable_client_shm ? NULL : &s->shm;
    s->max_connections = o->max_connections ? o->max_connections : 1024;
    s->idle_timeout_s = o->idle_timeout_s ? o->idle_timeout_s : 60;
    s->header_timeout_ms = o->header_timeout_ms ? o->header_timeout_ms : 10000;
    s->min_body_rate = o->min_body_rate ? o->min_body_rate : 1024;
    pthread_mutex_init(&s->conns.mu, NULL);
    pthread_cond_init(&s->conns.cv, NULL);
    pthread_mutex_init(&s->mconns.mu, NULL);
    pthread_cond_init(&s->mconns.cv, NULL);
    s->drain_timeout_ms = o->drain_timeout_ms ? o->drain_timeout_ms : 5000;
    return 0;
}

hps_err_t hps_kserve_create(const hps_kserve_options_t *opts, const hps_kserve_model_t *models,
                            size_t num_models, const hps_kserve_backend_t *backend,
                            hps_kserve_t **ret)
{
    hps_kserve_options_t o;
    if (!models || num_models == 0 || num_models > MAX_MODELS || !backend || !backend->lookup ||
        (backend->pin_output && !backend->unpin_output) || !ret)
        return HPS_EINVAL;
    if (opts)
        o = *opts;
    else
        hps_kserve_options_init(&o);
    hps_err_t rc = check_options(&o);
    if (rc)
        return rc;
    hps_kserve_t *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->http_fd = s->metrics_fd = -1;
    s->backend = *backend;
    pthread_mutex_init(&s->models_mu, NULL);
    pthread_mutex_init(&s->fail_mu, NULL);
    hps__kserve_shm_init(&s->shm, !o.disable_client_shm, o.cuda_shared_memory);
    s->outpool = malloc(sizeof(*s->outpool));
    if (s->outpool)
        hps__kserve_outpool_init(s->outpool, backend);
    rc = s->outpool ? apply_options(s, &o) : -ENOMEM;
    if (rc == 0)
        rc = copy_models(s, models, num_models,
                         o.model_capacity > MAX_MODELS ? MAX_MODELS : o.model_capacity);
    if (rc) {
        hps_kserve_destroy(s);
        return rc;
    }
    *ret = s;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Listeners                                                                 */
/* ------------------------------------------------------------------------ */

/* A TCP socket (type_flags: SOCK_NONBLOCK or 0) bound to addr:port with
 * SO_REUSEADDR, as hps_kserve_start() binds its listeners.  Numeric
 * addresses only ("localhost" = 127.0.0.1): a library call must not block
 * on DNS.  0 or a negative errno (HPS_EINVAL: an address that does not
 * parse). */
static hps_err_t bind_addr(const char *addr, int port, int type_flags, int *ret_fd)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV | AI_NUMERICHOST};
    struct addrinfo *ai = NULL;
    char portstr[8];
    snprintf(portstr, sizeof(portstr), "%d", port);
    if (strcmp(addr, "localhost") == 0)
        addr = "127.0.0.1";
    if (getaddrinfo(addr, portstr, &hints, &ai) != 0 || !ai)
        return HPS_EINVAL;
    hps_err_t rc = 0;
    int one = 1;
    int fd = socket(ai->ai_family, SOCK_STREAM | type_flags | SOCK_CLOEXEC, 0);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) != 0)
        rc = -errno;
    freeaddrinfo(ai);
    if (rc && fd >= 0)
        close(fd);
    *ret_fd = rc ? -1 : fd;
    return rc;
}

hps_err_t hps_kserve_probe_port(const char *addr, int port)
{
    int fd;
    if (!addr || port < 0 || port > 65535)
        return HPS_EINVAL;
    if (port == 0)
        return 0;
    hps_err_t rc = bind_addr(addr, port, 0, &fd);
    if (rc == 0)
        close(fd);
    return rc;
}

/* Bind and listen on addr:port; the socket is non-blocking (shared by the
 * pool's event loops) and close-on-exec.  defer_s > 0 sets TCP_DEFER_ACCEPT
 * (tcp(7)): the kernel hands a connection over only once its first bytes
 * arrive, or after about defer_s seconds without any.  A connection that
 * has sent nothing cannot be told from one of a flood, and one accepted
 * that way could be closed for room (kserve_conn.c) a moment before its
 * client sends; deferred, it is accepted with its request already waiting,
 * which admission never closes.  Valid clients lose nothing: their connect()
 * completes as before and the request follows at once. */
static hps_err_t open_listener(const char *addr, int port, int defer_s, int *ret_fd,
                               uint16_t *ret_port)
{
    int fd;
    hps_err_t rc = bind_addr(addr, port, SOCK_NONBLOCK, &fd);
    if (rc)
        return rc;
    if (listen(fd, SOMAXCONN) != 0 || (defer_s > 0 && setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT,
                                                                 &defer_s, sizeof(defer_s)) != 0))
        rc = -errno;
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (rc == 0 && getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        rc = -errno;
    if (rc) {
        if (fd >= 0)
            close(fd);
        return rc;
    }
    *ret_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
    *ret_fd = fd;
    return 0;
}

/* libmicrohttpd's accept policy: every connection, but none while
 * draining (see Graceful stop). */
static enum MHD_Result accept_policy(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    const hps_kserve_t *s = cls;
    (void)addr, (void)addrlen;
    return atomic_load_explicit(&s->draining, memory_order_relaxed) ? MHD_NO : MHD_YES;
}

static struct MHD_Daemon *start_http(hps_kserve_t *s)
{
    return MHD_start_daemon(
        MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ITC | MHD_ALLOW_SUSPEND_RESUME, 0, accept_policy, s,
        hps__kserve_http_on_request, s, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)s->http_fd,
        MHD_OPTION_NOTIFY_COMPLETED, hps__kserve_http_on_completed, s, MHD_OPTION_THREAD_POOL_SIZE,
        s->threads, MHD_OPTION_CONNECTION_LIMIT, s->max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
        s->idle_timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY,
        MHD_OPTION_NOTIFY_CONNECTION, hps__kserve_conn_notify, &s->conns,
        MHD_OPTION_URI_LOG_CALLBACK, hps__kserve_conn_uri_log, &s->conns,
        MHD_OPTION_UNESCAPE_CALLBACK, hps__kserve_unescape, NULL, MHD_OPTION_END);
}

static void metrics_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                              enum MHD_RequestTerminationCode toe)
{
    (void)req_cls, (void)toe;
    hps__kserve_conn_idle(cls, c);
}

/* The metrics port: the HTTP port's admission with its own table
 * (METRICS_CONNECTIONS): silent, trickling or idle scrapers cannot hold
 * every slot (64 silent connections blocked every scrape for a minute). */
static struct MHD_Daemon *start_metrics(hps_kserve_t *s)
{
    return MHD_start_daemon(
        MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ITC, 0, NULL, NULL, hps__kserve_metrics_on_request,
        s, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)s->metrics_fd, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)METRICS_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT, s->idle_timeout_s,
        MHD_OPTION_NOTIFY_CONNECTION, hps__kserve_conn_notify, &s->mconns,
        MHD_OPTION_URI_LOG_CALLBACK, hps__kserve_conn_uri_log, &s->mconns,
        MHD_OPTION_NOTIFY_COMPLETED, metrics_completed, &s->mconns, MHD_OPTION_END);
}

/* Undo a partial start: daemons first (they close their sockets), then
 * sockets no daemon took. */
static void teardown(hps_kserve_t *s)
{
    if (s->metrics)
        MHD_stop_daemon(s->metrics);
    else if (s->metrics_fd >= 0)
        close(s->metrics_fd);
    if (s->http)
        MHD_stop_daemon(s->http);
    else if (s->http_fd >= 0)
        close(s->http_fd);
    hps__kserve_pool_stop(s->pool);
    s->pool = NULL;
    hps__kserve_conns_stop(&s->conns);
    hps__kserve_conns_stop(&s->mconns);
    s->http = s->metrics = NULL;
    s->http_fd = s->metrics_fd = -1;
    s->bound_http_port = s->bound_metrics_port = 0;
}

hps_err_t hps_kserve_start(hps_kserve_t *s)
{
    if (!s)
        return HPS_EINVAL;
    if (s->running)
        return HPS_EBUSY;
    /* the deferral ends with the header deadline, rounded up to seconds */
    int defer_s = (int)((s->header_timeout_ms + 999) / 1000);
    hps_err_t rc =
        open_listener(s->http_address, s->http_port, defer_s, &s->http_fd, &s->bound_http_port);
    if (rc == 0 && s->metrics_port != HPS_KSERVE_PORT_DISABLED)
        rc = open_listener(s->metrics_address, s->metrics_port, defer_s, &s->metrics_fd,
                           &s->bound_metrics_port);
    if (rc == 0)
        rc = hps__kserve_pool_start(s->lookup_threads, &s->pool);
    if (rc == 0)
        rc = hps__kserve_conns_start(&s->conns, s->max_connections, s->header_timeout_ms,
                                     s->min_body_rate);
    if (rc == 0)
        rc = hps__kserve_conns_start(&s->mconns, METRICS_CONNECTIONS, s->header_timeout_ms,
                                     s->min_body_rate);
    if (rc == 0 && !(s->http = start_http(s)))
        rc = HPS_EIO;
    if (rc == 0 && s->metrics_fd >= 0 && !(s->metrics = start_metrics(s)))
        rc = HPS_EIO;
    if (rc) {
        teardown(s);
        return rc;
    }
    s->running = true;
    return 0;
}

hps_err_t hps_kserve_ports(const hps_kserve_t *s, uint16_t *ret_http_port,
                           uint16_t *ret_metrics_port)
{
    if (!s || !s->running)
        return HPS_EINVAL;
    if (ret_http_port)
        *ret_http_port = s->bound_http_port;
    if (ret_metrics_port)
        *ret_metrics_port = s->bound_metrics_port;
    return 0;
}

hps_err_t hps_kserve_set_model_version(hps_kserve_t *s, size_t model_index, uint64_t version)
{
    if (!s || model_index >= s->num_models || version == 0)
        return HPS_EINVAL;
    struct hps__kserve_kmodel *m = &s->models[model_index];
    if (atomic_exchange_explicit(&m->version_num, version, memory_order_relaxed) != version)
        hps__kserve_stats_reset(&m->stats); /* the new version's statistics start at 0 */
    return 0;
}

hps_err_t hps_kserve_model_unloaded(hps_kserve_t *s, size_t model_index)
{
    if (!s || model_index >= s->num_models)
        return HPS_EINVAL;
    struct hps__kserve_kmodel *m = &s->models[model_index];
    hps__kserve_stats_reset(&m->stats);
    pthread_mutex_lock(&s->fail_mu); /* it was loaded since: its failure is past */
    m->load_failure[0] = '\0';
    pthread_mutex_unlock(&s->fail_mu);
    return 0;
}

void hps__kserve_load_failure_set(hps_kserve_t *s, const char *name, const char *reason)
{
    long i = hps__kserve_model_pick(s->models, s->num_models, &s->backend, name, strlen(name));
    if (i < 0)
        return;
    pthread_mutex_lock(&s->fail_mu);
    snprintf(s->models[i].load_failure, sizeof(s->models[i].load_failure), "%s", reason);
    pthread_mutex_unlock(&s->fail_mu);
}

/* Wait until no request is in progress, at most drain_timeout_ms. */
static void drain(hps_kserve_t *s)
{
    uint64_t deadline = hps__kserve_now_ns() + (uint64_t)s->drain_timeout_ms * 1000000u;
    const struct timespec tick = {0, 1000000}; /* 1 ms */
    while (atomic_load_explicit(&s->inflight, memory_order_relaxed) > 0 &&
           hps__kserve_now_ns() < deadline)
        nanosleep(&tick, NULL);
}

void hps_kserve_stop(hps_kserve_t *s)
{
    if (!s || !s->running)
        return;
    atomic_store_explicit(&s->draining, true, memory_order_relaxed);
    drain(s);
    /* Every pooled lookup finishes and resumes its connection before the
     * daemon stops (it must not stop with connections suspended). */
    hps__kserve_pool_stop(s->pool);
    s->pool = NULL;
    MHD_stop_daemon(s->http); /* closes the listening socket too */
    s->http = NULL;
    s->http_fd = -1;
    teardown(s);
    atomic_store_explicit(&s->draining, false, memory_order_relaxed);
    s->running = false;
}

void hps_kserve_destroy(hps_kserve_t *s)
{
    if (!s)
        return;
    hps_kserve_stop(s);
    hps__kserve_shm_fini(&s->shm);
    if (s->outpool) {
        hps__kserve_outpool_fini(s->outpool);
        free(s->outpool);
    }
    for (size_t i = 0; s->models && i < s->num_models; i++)
        model_fini(&s->models[i]);
    free(s->models);
    pthread_mutex_destroy(&s->models_mu);
    pthread_mutex_destroy(&s->fail_mu);
    free(s->http_address);
    free(s->metrics_address);
    free(s->server_name);
    free(s->server_version);
    pthread_mutex_destroy(&s->conns.mu);
    pthread_cond_destroy(&s->conns.cv);
    pthread_mutex_destroy(&s->mconns.mu);
    pthread_cond_destroy(&s->mconns.cv);
    free(s);
}
