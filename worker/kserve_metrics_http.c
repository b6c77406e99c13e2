/*
 * kserve_metrics_http.c -- the metrics port's request handler: GET /metrics
 * answers the Prometheus text of every model's statistics
 * (kserve_metrics.c), the HTTP front end's connection counters and the
 * backend's own families (hps_kserve_backend_t.metrics); any other method
 * or path gets 405 or 404 with a JSON body.  Its connections are admitted
 * and closed like the inference port's (kserve_conn.c, s->mconns).
 */
#include <stdio.h>
#include <string.h>

#include "worker/kserve_http.h"

static enum MHD_Result metrics_scrape(hps_kserve_t *s, struct MHD_Connection *c)
{
    hps__kserve_text_t t;
    hps__kserve_text_init(&t);
    hps__kserve_metrics_render(&t, s->models, s->num_models, &s->backend);
    pthread_mutex_lock(&s->conns.mu);
    unsigned open_conns = s->conns.count;
    pthread_mutex_unlock(&s->conns.mu);
    hps__kserve_text_printf(
        &t,
        "# HELP nv_hps_http_connections HTTP connections open\n"
        "# TYPE nv_hps_http_connections gauge\nnv_hps_http_connections %u\n"
        "# HELP nv_hps_http_connections_evicted Idle, header-sending or slow body-sending "
        "connections closed to make room for new ones\n"
        "# TYPE nv_hps_http_connections_evicted counter\n"
        "nv_hps_http_connections_evicted %llu\n"
        "# HELP nv_hps_http_header_timeouts Connections closed for not sending a whole request "
        "header within header_timeout_ms\n# TYPE nv_hps_http_header_timeouts counter\n"
        "nv_hps_http_header_timeouts %llu\n"
        "# HELP nv_hps_http_body_timeouts Connections closed for sending a request body slower "
        "than min_body_rate\n# TYPE nv_hps_http_body_timeouts counter\n"
        "nv_hps_http_body_timeouts %llu\n",
        open_conns,
        (unsigned long long)atomic_load_explicit(&s->conns.evicted, memory_order_relaxed),
        (unsigned long long)atomic_load_explicit(&s->conns.header_timeouts, memory_order_relaxed),
        (unsigned long long)atomic_load_explicit(&s->conns.body_timeouts, memory_order_relaxed));
    if (s->backend.metrics && !t.oom) {
        hps_err_t rc = s->backend.metrics(s->backend.ctx, &t);
        if (rc) {
            char msg[256];
            snprintf(msg, sizeof(msg), "backend metrics failed: %s", hps_strerror(rc));
            hps__kserve_text_fini(&t);
            return hps__kserve_http_send_error(s, c, 500, msg);
        }
    }
    return hps__kserve_http_send_text(s, c, 200, "text/plain; charset=utf-8", &t);
}

enum MHD_Result hps__kserve_metrics_on_request(void *cls, struct MHD_Connection *conn,
                                               const char *url, const char *method,
                                               const char *version, const char *upload_data,
                                               size_t *upload_data_size, void **req_cls)
{
    static int answered; /* address used as a marker only */
    (void)version;
    (void)upload_data;
    if (*req_cls) {
        *upload_data_size = 0; /* already answered: drop any body */
        return MHD_YES;
    }
    *req_cls = &answered;
    hps__kserve_conn_busy(&((hps_kserve_t *)cls)->mconns, conn); /* GET: no body */
    if (strcmp(method, "GET") != 0)
        return hps__kserve_http_send_error(cls, conn, 405, "Method Not Allowed");
    if (strcmp(url, "/metrics") != 0)
        return hps__kserve_http_send_error(cls, conn, 404, "Not Found");
    return metrics_scrape(cls, conn);
}
