/*
 * kserve_http.c -- one HTTP request, from libmicrohttpd's callbacks to the
 * queued response: routing and method checks, bounded upload accumulation,
 * and the endpoint handlers.  The responses are queued by kserve_send.c.
 *
 * libmicrohttpd calls the access handler first with the headers only
 * (*req_cls == NULL), then once per chunk of body, then once more with no
 * data: that last call answers.  Errors known from the headers alone (404,
 * 405, 501, unsupported encoding, a Content-Length over the limit) are
 * answered in the first call, before any body is read; libmicrohttpd then
 * closes the connection instead of reading the body.  A chunked body that
 * outgrows the limit is dropped as it arrives (never buffered) and answered
 * with 400 at its end; past twice the limit the connection is cut.
 *
 * A body of Content-Encoding gzip or deflate is inflated as it arrives
 * (kserve_zlib.c): only its inflated bytes are kept, and the limit applies
 * to them; a body that would inflate past it, or that does not inflate,
 * is dropped and answered with 400 at its end.  A successful inference
 * answer is compressed when Accept-Encoding asks for gzip or deflate, as
 * Triton does (Inference-Header-Content-Length stays the length of the
 * uncompressed JSON; kserve_send.c); every other answer is sent as it is.
 *
 * Only inference and shared-memory register bodies are kept.  Everything runs on the listener's
 * threads except inference lookups that may wait: backend->lookup_nowait()
 * answers inline what it can; otherwise the connection is suspended, the
 * lookup and the response run on the lookup pool (kserve_pool.c), which
 * parks the response in the request state (kserve_send.c: queue() sees
 * the thread's `parked` request, named by hps__kserve_http_park()) and resumes
 * the connection; libmicrohttpd then calls the access handler again, which
 * queues the parked response.
 */
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "worker/kserve_http.h"

/* Answer to shared-memory requests when client registration is disabled
 * (Triton: 501 UNSUPPORTED without --allow-client-shm=true). */
#define SHM_DISABLED_MSG                                                                           \
    "Shared memory registration is disabled: clients may not register shared "                     \
    "memory regions (Triton: --allow-client-shm=true; here: hps_kserve_options_t."                 \
    "disable_client_shm = false)"

/* Largest body buffer reserved from Content-Length before data arrives. */
#define PREALLOC_MAX ((size_t)1 << 20)
/* Most floats of a JSON OUTPUT0 formatted on an event-loop thread (about
 * 1 MB of text, a few ms); a longer one is formatted on the lookup pool. */
#define JSON_INLINE_MAX ((uint64_t)1 << 16)

/** Per-request state (MHD's *req_cls). */
struct kreq {
    hps_kserve_t *srv;
    bool responded; /* answered in the first call */
    bool store;     /* keep the body (inference) */
    bool too_large;
    bool busy;                      /* the server's body budget was spent: 503 */
    struct hps__kserve_inflate *z;  /* a gzip or deflate body: its decoder, else NULL */
    enum hps__kserve_zenc resp_enc; /* the coding of a successful inference answer */
    char *body;
    size_t len;
    size_t cap;
    uint64_t received;
    /* A lookup on the pool: set before the connection is suspended; the
     * response is parked by the pool thread before it resumes the
     * connection, and queued by the next access-handler call. */
    bool deferred;
    struct hps__kserve_http_parked parked;
};

/* ------------------------------------------------------------------------ */
/* Endpoints                                                                 */
/* ------------------------------------------------------------------------ */

static bool backend_ready(const hps_kserve_t *s)
{
    return !s->backend.ready || s->backend.ready(s->backend.ctx);
}

/* Model mi is loaded (explicit model control unloads models). */
static bool model_loaded(const hps_kserve_t *s, size_t mi)
{
    return !s->backend.model_loaded || s->backend.model_loaded(s->backend.ctx, mi);
}

/* Model mi's state is READY (every model without a model_state callback):
 * a loaded model the backend cannot answer (say, its tables have another
 * shape than it serves) is not. */
static bool model_ready(const hps_kserve_t *s, size_t mi)
{
    bool served;
    return !s->backend.model_state ||
           s->backend.model_state(s->backend.ctx, mi, &served) == HPS_MODEL_READY;
}

/* Triton's message for a model without a loaded version (len: at least
 * UNLOADED_MSG_MAX). */
#define UNLOADED_MSG_MAX (HPS_KSERVE_NAME_MAX + 80)
static const char *unloaded_msg(const struct hps__kserve_kmodel *m, char *buf, size_t len)
{
    snprintf(buf, len, "Request for unknown model: '%s' has no available versions", m->name);
    return buf;
}

/* Triton's answer for a model without a loaded version. */
static enum MHD_Result send_unloaded(const hps_kserve_t *s, struct MHD_Connection *c,
                                     const struct hps__kserve_kmodel *m)
{
    char msg[UNLOADED_MSG_MAX];
    return hps__kserve_http_send_error(s, c, 400, unloaded_msg(m, msg, sizeof(msg)));
}

static enum MHD_Result h_server_meta(hps_kserve_t *s, struct MHD_Connection *c)
{
    hps__kserve_text_t t;
    hps__kserve_text_init(&t);
    hps__kserve_resp_server_meta(&t, s->server_name, s->server_version, s->limits.shm != NULL,
                                 s->shm.cuda);
    return hps__kserve_http_send_json(s, c, 200, &t);
}

/* The model a request names.  A name not in the registry, or whose entry
 * is not loaded, has the backend look for models added to its
 * configuration since, or for a new shape of this one (refresh_models: a
 * reload may have changed the model's tables, and the backend switches to
 * the new shape before its registry has it), then is looked up once more. */
static long route_model(hps_kserve_t *s, const struct hps__kserve_route *r, hps__kserve_kerr_t *err)
{
    long mi = hps__kserve_route_model(r, s->models, s->num_models, &s->backend, err);
    if ((mi == -2 || (mi >= 0 && !model_loaded(s, (size_t)mi))) && s->backend.refresh_models &&
        s->backend.refresh_models(s->backend.ctx) > 0)
        mi = hps__kserve_route_model(r, s->models, s->num_models, &s->backend, err);
    return mi;
}

/* Model endpoints other than infer: metadata, ready, config, stats. */
static enum MHD_Result h_model(hps_kserve_t *s, struct MHD_Connection *c,
                               const struct hps__kserve_route *r)
{
    hps__kserve_kerr_t err;
    long mi = route_model(s, r, &err);
    if (mi < 0)
        return hps__kserve_http_send_error(s, c, err.status, err.msg);
    const struct hps__kserve_kmodel *m = &s->models[mi];
    if (!model_loaded(s, (size_t)mi)) /* its statistics too, as Triton's */
        return send_unloaded(s, c, m);
    if (r->kind == HPS__KSERVE_R_MODEL_READY) /* the worker, and the model (its state) */
        return backend_ready(s) && model_ready(s, (size_t)mi)
                   ? hps__kserve_http_send_empty(s, c, 200)
                   : hps__kserve_http_send_error(s, c, 400, "Model version not ready");
    hps__kserve_text_t t;
    hps__kserve_text_init(&t);
    if (r->kind == HPS__KSERVE_R_MODEL_META)
        hps__kserve_resp_model_meta(&t, m);
    else if (r->kind == HPS__KSERVE_R_MODEL_CONFIG)
        hps__kserve_resp_model_config(&t, m);
    else
        hps__kserve_resp_stats(&t, m, 1, NULL);
    return hps__kserve_http_send_json(s, c, 200, &t);
}

/* Suspend the connection and run job on the lookup pool: the job parks the
 * response (hps__kserve_http_park) and resumes the connection; the access handler then
 * queues it (hps__kserve_http_on_request). */
static void to_pool(hps_kserve_t *s, struct MHD_Connection *c, struct kreq *q,
                    struct hps__kserve_job *job)
{
    q->deferred = true;
    q->parked.r = NULL;
    MHD_suspend_connection(c);
    hps__kserve_pool_submit(s->pool, job);
}

/* A load or unload on the pool: it blocks until the model serves or failed. */
struct control_job {
    struct hps__kserve_job job; /* first: the pool's handle */
    hps_kserve_t *s;
    struct MHD_Connection *c;
    struct kreq *q;
    hps_model_op_t op;
    char model[HPS_KSERVE_NAME_MAX + 1];
};

static void control_job_run(struct hps__kserve_job *job)
{
    struct control_job *j = (struct control_job *)job;
    char msg[HPS__KSERVE_LOAD_FAILURE_MAX] = "";
    hps_err_t rc =
        j->s->backend.model_control(j->s->backend.ctx, j->op, j->model, msg, sizeof(msg));
    /* the index shows a failed load of a model not loaded; a load or an
     * unload that succeeded forgets it */
    if (rc == 0 || (rc == HPS_EIO && j->op == HPS_MODEL_LOAD))
        hps__kserve_load_failure_set(j->s, j->model, rc == 0 ? "" : msg);
    hps__kserve_http_park(&j->q->parked);
    if (rc == 0)
        hps__kserve_http_send_empty(j->s, j->c, 200);
    else
        hps__kserve_http_send_error(j->s, j->c, rc == HPS_EIO ? 400 : 503,
                                    *msg ? msg : hps_strerror(rc));
    hps__kserve_http_park(NULL);
    struct MHD_Connection *c = j->c;
    free(j);
    MHD_resume_connection(c); /* j->q may be gone once the event loop answers */
}

/* The model repository extension (kserve_repo.c). */
static enum MHD_Result h_repo(hps_kserve_t *s, struct MHD_Connection *c, struct kreq *q,
                              const struct hps__kserve_route *r)
{
    hps__kserve_kerr_t err;
    if (r->kind != HPS__KSERVE_R_REPO_INDEX) {
        struct control_job *j = calloc(1, sizeof(*j));
        if (!j)
            return hps__kserve_http_send_error(s, c, 500, "out of memory");
        if (hps__kserve_repo_control(r, s->models, s->num_models, &s->backend,
                                     q->body ? q->body : "", q->len, j->model, sizeof(j->model),
                                     &err) < 0 ||
            (!s->pool &&
             hps__kserve_kerr_set(&err, 503, "no lookup pool to run the request on") < 0)) {
            free(j);
            return hps__kserve_http_send_error(s, c, err.status, err.msg);
        }
        j->job.run = control_job_run;
        j->s = s;
        j->c = c;
        j->q = q;
        j->op = r->kind == HPS__KSERVE_R_REPO_LOAD ? HPS_MODEL_LOAD : HPS_MODEL_UNLOAD;
        to_pool(s, c, q, &j->job);
        return MHD_YES;
    }
    hps__kserve_text_t t;
    hps__kserve_text_init(&t);
    if (s->backend.refresh_models) /* Triton lists the repository as it is now */
        s->backend.refresh_models(s->backend.ctx);
    if (hps__kserve_repo_index(s->models, s->num_models, &s->backend, backend_ready(s),
                               q->body ? q->body : "", q->len, &s->fail_mu, &t, &err) < 0) {
        hps__kserve_text_fini(&t);
        return hps__kserve_http_send_error(s, c, err.status, err.msg);
    }
    return hps__kserve_http_send_json(s, c, 200, &t);
}

static enum MHD_Result h_all_stats(hps_kserve_t *s, struct MHD_Connection *c)
{
    hps__kserve_text_t t;
    hps__kserve_text_init(&t);
    hps__kserve_resp_stats(&t, s->models, s->num_models, &s->backend);
    return hps__kserve_http_send_json(s, c, 200, &t);
}

/* Durations of one successful request, per hps_kserve_lookup_stats_t's
 * rule; ls->queue_ns includes the wait for the lookup pool (infer_job_run),
 * which the lookup span stamp[1]..stamp[2] holds too. */
static void request_times(struct hps__kserve_ktimes *t, const hps_kserve_lookup_stats_t *ls,
                          const uint64_t stamp[4])
{
    bool reported = ls->compute_input_ns | ls->compute_infer_ns | ls->compute_output_ns;
    uint64_t span = stamp[2] - stamp[1];
    t->total_ns = stamp[3] - stamp[0];
    t->queue_ns = ls->queue_ns;
    t->input_ns = ls->compute_input_ns + (stamp[1] - stamp[0]);
    t->infer_ns = reported ? ls->compute_infer_ns : span > ls->queue_ns ? span - ls->queue_ns : 0;
    t->output_ns = ls->compute_output_ns + (stamp[3] - stamp[2]);
}

static enum MHD_Result infer_failed(const hps_kserve_t *s, struct hps__kserve_kmodel *m,
                                    struct MHD_Connection *c, uint64_t t0,
                                    enum hps__kserve_fail_reason reason, unsigned status,
                                    const char *msg)
{
    hps__kserve_stats_failure(&m->stats, hps__kserve_now_ns() - t0, reason);
    return hps__kserve_http_send_error(s, c, status, msg);
}

/* Call the backend; on failure answer and return false. */
/* OUTPUT0 into a CUDA region, straight from the backend's device memory:
 * HPS_EUNSUPPORTED when the backend cannot (then lookup + copy). */
static hps_err_t lookup_device(hps_kserve_t *s, size_t mi, const struct hps__kserve_infer_req *req,
                               hps_kserve_lookup_stats_t *ls)
{
    int dev = req->out_cuda ? hps__kserve_shm_device(req->held[HPS__KSERVE_HELD_OUTPUT]) : -1;
    if (dev < 0 || !s->backend.lookup_device || ((uintptr_t)req->out_shm & 3) != 0)
        return HPS_EUNSUPPORTED;
    hps_err_t rc = s->backend.lookup_device(
        s->backend.ctx, mi, s->models[mi].num_tables, req->numkeys, req->keys, req->num_keys, dev,
        (float *)(void *)req->out_shm, (size_t)req->out_len, ls);
    if (rc == HPS_EUNSUPPORTED)
        memset(ls, 0, sizeof(*ls));
    return rc;
}

/* The blocking lookup (on the pool): straight into a CUDA output region
 * when the backend can, else into out; *on_device says which. */
static hps_err_t run_lookup(hps_kserve_t *s, size_t mi, const struct hps__kserve_infer_req *req,
                            float *out, hps_kserve_lookup_stats_t *ls, bool *on_device)
{
    memset(ls, 0, sizeof(*ls));
    hps_err_t rc = lookup_device(s, mi, req, ls);
    *on_device = rc == 0;
    if (rc == HPS_EUNSUPPORTED)
        rc = s->backend.lookup(s->backend.ctx, mi, s->models[mi].num_tables, req->numkeys,
                               req->keys, req->num_keys, out, (size_t)req->out_len, ls);
    return rc;
}

/* A failed lookup: answer 503 (busy, or the model changed its tables while
 * the request was in flight and it does not fit the new shape:
 * HPS_EMISMATCH after retry_new_shape) or 500 with the backend's message. */
static enum MHD_Result lookup_failed(hps_kserve_t *s, struct MHD_Connection *c, size_t mi,
                                     hps_err_t rc, hps_kserve_lookup_stats_t *ls, uint64_t t0)
{
    struct hps__kserve_kmodel *m = &s->models[mi];
    ls->message[sizeof(ls->message) - 1] = '\0';
    if (rc == HPS_ENOTFOUND && !model_loaded(s, mi)) { /* unloaded since its route: as a route */
        char um[UNLOADED_MSG_MAX];
        return infer_failed(s, m, c, t0, HPS__KSERVE_FAIL_REJECTED, 400,
                            unloaded_msg(m, um, sizeof(um)));
    }
    char msg[HPS__KSERVE_KERR_MSG_MAX];
    snprintf(msg, sizeof(msg), "lookup failed for model '%s': %s", m->name,
             ls->message[0] ? ls->message : hps_strerror(rc));
    bool busy = rc == HPS_EBUSY || rc == HPS_EMISMATCH || rc == HPS_EFULL; /* try again */
    return infer_failed(s, m, c, t0, busy ? HPS__KSERVE_FAIL_REJECTED : HPS__KSERVE_FAIL_BACKEND,
                        busy ? 503 : 500, msg);
}

/*
 * Format and queue the answer of a successful lookup (out is consumed).
 * stamp[0..2] are the request start, lookup start and lookup end.
 */
static enum MHD_Result infer_respond(const hps_kserve_t *s, struct MHD_Connection *c,
                                     struct hps__kserve_kmodel *m,
                                     const struct hps__kserve_infer_req *req, float *out,
                                     const hps_kserve_lookup_stats_t *ls, uint64_t stamp[4],
                                     enum hps__kserve_zenc enc, uint64_t version)
{
    hps__kserve_text_t t;
    hps__kserve_text_init(&t);
    hps__kserve_resp_infer(&t, m, req, out, version);
    stamp[3] = hps__kserve_now_ns();
    if (t.oom) {
        hps__kserve_text_fini(&t);
        hps__kserve_outpool_put(s->outpool, out);
        return infer_failed(s, m, c, stamp[0], HPS__KSERVE_FAIL_OTHER, 500, "out of memory");
    }
    struct hps__kserve_ktimes times;
    request_times(&times, ls, stamp);
    hps__kserve_stats_success(&m->stats, &times, req->num_samples);
    if (req->binary_output)
        return hps__kserve_http_send_binary(s, c, &t, out, req->out_len, enc);
    hps__kserve_outpool_put(s->outpool, out);
    return hps__kserve_http_send_infer_json(s, c, &t, enc);
}

/* Where the backend writes OUTPUT0: a system output region in place when
 * it is 4-byte aligned, else a heap buffer; NULL when out of memory. */
static float *out_buffer(const hps_kserve_t *s, const struct hps__kserve_infer_req *req)
{
    if (req->out_shm && !req->out_cuda && ((uintptr_t)req->out_shm & 3) == 0)
        return (float *)(void *)req->out_shm;
    return hps__kserve_outpool_get(s->outpool, (size_t)req->out_len * sizeof(float));
}

/* The lookup is over (and hps__kserve_infer_store_output() ran if it succeeded):
 * free a heap buffer of an output region.  Returns what infer_respond()
 * takes: the buffer to send and free, or NULL when the data went to the
 * region. */
static float *out_done(const hps_kserve_t *s, const struct hps__kserve_infer_req *req, float *out,
                       bool ok)
{
    if (!req->out_shm && ok)
        return out;
    if ((char *)out != req->out_shm)
        hps__kserve_outpool_put(s->outpool, out);
    return NULL;
}

/* The backend answered HPS_EMISMATCH: a reload changed the model's tables
 * after the request was routed to entry *mi, and another entry serves the
 * name now (hps_kserve_replace_model).  Parse the request again for that
 * entry and look it up there, once; on success *mi, *req and *out are the
 * new attempt's (the old request and buffer are released).  hlen: the
 * Inference-Header-Content-Length header as parsed the first time.
 * Returns the new attempt's result, or rc with nothing changed when no
 * other entry serves the name or the request does not fit the new shape
 * (its client then gets the retryable 503). */
static hps_err_t retry_new_shape(hps_kserve_t *s, struct kreq *q, const char *hlen, size_t *mi,
                                 struct hps__kserve_infer_req *req, float **out,
                                 hps_kserve_lookup_stats_t *ls, bool *on_device, hps_err_t rc)
{
    const struct hps__kserve_kmodel *m = &s->models[*mi];
    if (s->backend.refresh_models)
        s->backend.refresh_models(s->backend.ctx); /* the registry may not have the new entry */
    long mi2 = hps__kserve_model_pick(s->models, s->num_models, &s->backend, m->name, m->name_len);
    if (mi2 < 0 || (size_t)mi2 == *mi || !model_loaded(s, (size_t)mi2))
        return rc;
    struct hps__kserve_infer_req req2;
    hps__kserve_kerr_t err;
    if (hps__kserve_infer_parse(&s->limits, &s->models[mi2], q->body ? q->body : "", q->len, hlen,
                                &req2, &err))
        return rc;
    req2.version = req->version;
    float *out2 = out_buffer(s, &req2);
    if (!out2) {
        hps__kserve_infer_req_fini(&req2);
        return rc;
    }
    out_done(s, req, *out, false);
    hps__kserve_infer_req_fini(req);
    *req = req2;
    *out = out2;
    *mi = (size_t)mi2;
    return run_lookup(s, *mi, req, *out, ls, on_device);
}

/* After the lookup (result rc): the output region, then the answer
 * (compressed with enc). */
static enum MHD_Result infer_finish(hps_kserve_t *s, struct MHD_Connection *c, size_t mi,
                                    const struct hps__kserve_infer_req *req, float *out,
                                    hps_kserve_lookup_stats_t *ls, hps_err_t rc, bool on_device,
                                    uint64_t stamp[4], enum hps__kserve_zenc enc)
{
    struct hps__kserve_kmodel *m = &s->models[mi];
    hps__kserve_kerr_t err;
    if (rc < 0) {
        out_done(s, req, out, false);
        return lookup_failed(s, c, mi, rc, ls, stamp[0]);
    }
    /* The version the rows came from: a reload may have switched the
     * backend since the route checked the URL's version against the
     * registry's (which follows the switch a moment later). */
    uint64_t v = ls->model_version ? ls->model_version : hps__kserve_kmodel_version(m);
    if (req->version && req->version != v) {
        out_done(s, req, out, false);
        char msg[HPS__KSERVE_KERR_MSG_MAX];
        snprintf(msg, sizeof(msg), "Request for unknown model: '%s' version %llu is not found",
                 m->name, (unsigned long long)req->version);
        return infer_failed(s, m, c, stamp[0], HPS__KSERVE_FAIL_REJECTED, 400, msg);
    }
    if (!on_device && hps__kserve_infer_store_output(req, out, &err)) {
        out_done(s, req, out, false);
        return infer_failed(s, m, c, stamp[0], HPS__KSERVE_FAIL_OTHER, err.status, err.msg);
    }
    stamp[2] = hps__kserve_now_ns();
    out = out_done(s, req, out, true);
    return infer_respond(s, c, m, req, out, ls, stamp, enc, v);
}

/* An inference request whose lookup runs on the pool. */
struct infer_job {
    struct hps__kserve_job job; /* first: the pool's handle */
    hps_kserve_t *s;
    struct MHD_Connection *c;
    struct kreq *q;
    size_t mi;        /* the entry the request was routed to (its pending gauge) */
    const char *hlen; /* Inference-Header-Content-Length (the connection's) */
    struct hps__kserve_infer_req req;
    float *out;
    uint64_t stamp[4];
};

static void infer_job_run(struct hps__kserve_job *job)
{
    struct infer_job *j = (struct infer_job *)job;
    hps_kserve_lookup_stats_t ls;
    bool on_device = false;
    uint64_t start = hps__kserve_now_ns();
    hps_err_t rc = run_lookup(j->s, j->mi, &j->req, j->out, &ls, &on_device);
    size_t mi = j->mi;
    if (rc == HPS_EMISMATCH)
        rc = retry_new_shape(j->s, j->q, j->hlen, &mi, &j->req, &j->out, &ls, &on_device, rc);
    /* Queue time (Triton's): from the lookup's first try on the event loop
     * (stamp[1]; lookup_nowait found misses) to its start on the pool. */
    ls.queue_ns += start - j->stamp[1];
    hps__kserve_http_park(&j->q->parked);
    infer_finish(j->s, j->c, mi, &j->req, j->out, &ls, rc, on_device, j->stamp, j->q->resp_enc);
    hps__kserve_http_park(NULL);
    hps__kserve_infer_req_fini(&j->req);
    atomic_fetch_sub_explicit(&j->s->models[j->mi].stats.pending, 1, memory_order_relaxed);
    struct MHD_Connection *c = j->c;
    free(j);
    MHD_resume_connection(c); /* j->q may be gone once the event loop answers */
}

/* Hand the lookup to the pool: false (nothing changed) when out of memory. */
static bool defer(hps_kserve_t *s, struct MHD_Connection *c, struct kreq *q, size_t mi,
                  const char *hlen, struct hps__kserve_infer_req *req, float *out,
                  const uint64_t stamp[4])
{
    struct infer_job *j = malloc(sizeof(*j));
    if (!j)
        return false;
    *j = (struct infer_job){.job = {.run = infer_job_run},
                            .s = s,
                            .c = c,
                            .q = q,
                            .mi = mi,
                            .hlen = hlen,
                            .req = *req,
                            .out = out};
    memcpy(j->stamp, stamp, sizeof(j->stamp));
    to_pool(s, c, q, &j->job);
    return true;
}

/* Parse, look up, answer: one inference request for model mi.  *deferred:
 * the lookup went to the pool, which answers (and ends the pending gauge). */
static enum MHD_Result infer_model(hps_kserve_t *s, struct MHD_Connection *c, struct kreq *q,
                                   size_t mi, uint64_t version, bool *deferred)
{
    struct hps__kserve_kmodel *m = &s->models[mi];
    uint64_t stamp[4] = {hps__kserve_now_ns(), 0, 0, 0};
    hps__kserve_kerr_t err;
    struct hps__kserve_infer_req req;
    const char *hlen =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Inference-Header-Content-Length");
    if (hps__kserve_infer_parse(&s->limits, m, q->body ? q->body : "", q->len, hlen, &req, &err))
        return infer_failed(s, m, c, stamp[0], HPS__KSERVE_FAIL_OTHER, err.status, err.msg);
    req.version = version;
    enum MHD_Result ret;
    hps_kserve_lookup_stats_t ls;
    memset(&ls, 0, sizeof(ls));
    float *out = out_buffer(s, &req);
    stamp[1] = hps__kserve_now_ns();
    if (!out) {
        ret = infer_failed(s, m, c, stamp[0], HPS__KSERVE_FAIL_OTHER, 500, "out of memory");
        hps__kserve_infer_req_fini(&req);
        return ret;
    }
    /* Inline what answers at once; the rest on the pool, and so an answer
     * whose JSON text takes long to format (JSON_INLINE_MAX floats: 4M of
     * them kept an event loop, and every connection on it, for about a
     * second).  A CUDA output region (4-byte aligned) is written where it
     * is. */
    hps_err_t rc = req.num_keys == 0 ? 0 : HPS_EAGAIN;
    int dev = req.out_cuda ? hps__kserve_shm_device(req.held[HPS__KSERVE_HELD_OUTPUT]) : -1;
    bool in_region = req.out_cuda && dev >= 0 && ((uintptr_t)req.out_shm & 3) == 0;
    bool long_json = !req.binary_output && !req.out_shm && req.out_len > JSON_INLINE_MAX;
    if (rc == HPS_EAGAIN && s->backend.lookup_nowait && (!req.out_cuda || in_region) &&
        !long_json) {
        rc = s->backend.lookup_nowait(s->backend.ctx, mi, m->num_tables, req.numkeys, req.keys,
                                      req.num_keys, in_region ? dev : -1,
                                      in_region ? (float *)(void *)req.out_shm : out,
                                      (size_t)req.out_len, &ls);
        rc = rc == HPS_EUNSUPPORTED ? HPS_EAGAIN : rc;
    }
    bool on_device = in_region && rc == 0;
    if (rc == HPS_EAGAIN && s->pool && defer(s, c, q, mi, hlen, &req, out, stamp)) {
        *deferred = true;
        return MHD_YES;
    }
    if (rc == HPS_EAGAIN)
        rc = run_lookup(s, mi, &req, out, &ls, &on_device);
    if (rc == HPS_EMISMATCH)
        rc = retry_new_shape(s, q, hlen, &mi, &req, &out, &ls, &on_device, rc);
    ret = infer_finish(s, c, mi, &req, out, &ls, rc, on_device, stamp, q->resp_enc);
    hps__kserve_infer_req_fini(&req);
    return ret;
}

static enum MHD_Result h_infer(hps_kserve_t *s, struct MHD_Connection *c, struct kreq *q,
                               const struct hps__kserve_route *r)
{
    hps__kserve_kerr_t err;
    long mi = route_model(s, r, &err);
    if (mi < 0)
        return hps__kserve_http_send_error(s, c, err.status, err.msg);
    if (!model_loaded(s, (size_t)mi))
        return send_unloaded(s, c, &s->models[mi]);
    _Atomic int64_t *pending = &s->models[mi].stats.pending;
    atomic_fetch_add_explicit(pending, 1, memory_order_relaxed); /* a gauge only */
    bool deferred = false;
    uint64_t version = 0; /* the URL's, which route_model checked */
    if (r->version)
        hps__kserve_route_version(r, &version);
    enum MHD_Result ret = infer_model(s, c, q, (size_t)mi, version, &deferred);
    if (!deferred)
        atomic_fetch_sub_explicit(pending, 1, memory_order_relaxed);
    return ret;
}

/* GET .../status: one region or all of them. */
static enum MHD_Result h_shm_status(hps_kserve_t *s, struct MHD_Connection *c, bool cuda,
                                    const char *name)
{
    hps__kserve_kerr_t err;
    hps__kserve_text_t t;
    hps__kserve_text_init(&t);
    if (hps__kserve_shm_status(&s->shm, cuda, name, &t, &err) == 0)
        return hps__kserve_http_send_json(s, c, 200, &t);
    hps__kserve_text_fini(&t);
    return hps__kserve_http_send_error(s, c, err.status, err.msg);
}

/* The shared-memory endpoints, system or CUDA (r->cuda); CUDA ones were
 * answered by begin() when the server has no CUDA shared memory. */
static enum MHD_Result h_shm(hps_kserve_t *s, struct MHD_Connection *c, struct kreq *q,
                             const struct hps__kserve_route *r)
{
    char *name = r->region ? strndup(r->region, r->region_len) : NULL;
    if (r->region && !name)
        return hps__kserve_http_send_error(s, c, 500, "out of memory");
    enum MHD_Result ret;
    hps__kserve_kerr_t err;
    const char *body = q->body ? q->body : "";
    if (r->kind == HPS__KSERVE_R_SHM_STATUS) {
        ret = h_shm_status(s, c, r->cuda, name);
    } else if (r->kind == HPS__KSERVE_R_SHM_UNREGISTER) {
        hps__kserve_shm_unregister(&s->shm, r->cuda, name);
        ret = hps__kserve_http_send_empty(s, c, 200);
    } else if ((r->cuda ? hps__kserve_shm_register_cuda(&s->shm, name, body, q->len, &err)
                        : hps__kserve_shm_register(&s->shm, name, body, q->len, &err)) == 0) {
        ret = hps__kserve_http_send_empty(s, c, 200);
    } else {
        ret = hps__kserve_http_send_error(s, c, err.status, err.msg);
    }
    free(name);
    return ret;
}

/* The request is complete: answer it. */
static enum MHD_Result dispatch(struct kreq *q, struct MHD_Connection *c, const char *url)
{
    hps_kserve_t *s = q->srv;
    struct hps__kserve_route r;
    hps__kserve_route_parse(url, &r);
    if (q->busy) {
        char msg[200];
        snprintf(msg, sizeof(msg),
                 "server busy: the request bodies being received exceed %zu bytes in all; "
                 "retry later",
                 s->max_buffered);
        return hps__kserve_http_send_error(s, c, 503, msg);
    }
    if (q->too_large) {
        char msg[160];
        snprintf(msg, sizeof(msg),
                 "request body of more than %zu bytes exceeds the maximum allowed "
                 "value of %zu bytes",
                 s->max_body, s->max_body);
        return hps__kserve_http_send_error(s, c, 400, msg);
    }
    if (q->z) { /* left only when it failed: corrupt, truncated, too large */
        const hps__kserve_kerr_t *e = hps__kserve_inflate_error(q->z);
        return hps__kserve_http_send_error(s, c, e->status, e->msg);
    }
    switch (r.kind) {
    case HPS__KSERVE_R_LIVE:
        return hps__kserve_http_send_empty(s, c, 200);
    case HPS__KSERVE_R_READY:
        return hps__kserve_http_send_empty(s, c, backend_ready(s) ? 200 : 400);
    case HPS__KSERVE_R_SERVER_META:
        return h_server_meta(s, c);
    case HPS__KSERVE_R_ALL_STATS:
        return h_all_stats(s, c);
    case HPS__KSERVE_R_INFER:
        return h_infer(s, c, q, &r);
    case HPS__KSERVE_R_MODEL_META:
    case HPS__KSERVE_R_MODEL_READY:
    case HPS__KSERVE_R_MODEL_CONFIG:
    case HPS__KSERVE_R_MODEL_STATS:
        return h_model(s, c, &r);
    case HPS__KSERVE_R_SHM_STATUS:
    case HPS__KSERVE_R_SHM_REGISTER:
    case HPS__KSERVE_R_SHM_UNREGISTER:
        return h_shm(s, c, q, &r);
    case HPS__KSERVE_R_REPO_INDEX:
    case HPS__KSERVE_R_REPO_LOAD:
    case HPS__KSERVE_R_REPO_UNLOAD:
        return h_repo(s, c, q, &r);
    default:
        return hps__kserve_http_send_error(s, c, 404,
                                           "Not Found"); /* unreachable: begin() answered */
    }
}

/* ------------------------------------------------------------------------ */
/* Upload handling                                                           */
/* ------------------------------------------------------------------------ */

/* Content-Length as a number; UINT64_MAX when absent or unparsable. */
static uint64_t content_length(struct MHD_Connection *c)
{
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (!v || !*v)
        return UINT64_MAX;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    return (errno || *end || *v == '-') ? UINT64_MAX : (uint64_t)n;
}

/* Body buffers count against s->max_buffered over all connections. */
static bool budget_take(hps_kserve_t *s, size_t n)
{
    uint64_t held = atomic_fetch_add_explicit(&s->body_held, n, memory_order_relaxed) + n;
    if (held <= s->max_buffered)
        return true;
    atomic_fetch_sub_explicit(&s->body_held, n, memory_order_relaxed);
    return false;
}

static void budget_give(hps_kserve_t *s, size_t n)
{
    atomic_fetch_sub_explicit(&s->body_held, n, memory_order_relaxed);
}

/* Free q's body buffer and give its bytes back. */
static void body_free(struct kreq *q)
{
    budget_give(q->srv, q->cap);
    free(q->body);
    q->body = NULL;
    q->len = q->cap = 0;
}

/* Grow the body buffer for n more bytes, at most max: 0, 1 when the
 * server's body budget is spent, -1 out of memory. */
static int body_grow(struct kreq *q, size_t n, size_t max)
{
    if (q->len + n <= q->cap)
        return 0;
    if (q->len + n > max)
        return -1;
    size_t cap = q->cap ? q->cap : max < 64 * 1024 ? max : 64 * 1024;
    while (cap < q->len + n)
        cap = cap > max / 2 ? max : cap * 2;
    if (!budget_take(q->srv, cap - q->cap))
        return 1;
    char *p = realloc(q->body, cap);
    if (!p) {
        budget_give(q->srv, cap - q->cap);
        return -1;
    }
    q->body = p;
    q->cap = cap;
    return 0;
}

/* Free q's decoder and give its bytes back. */
static void inflate_free(struct kreq *q)
{
    if (!q->z)
        return;
    hps__kserve_inflate_destroy(q->z);
    q->z = NULL;
    budget_give(q->srv, HPS__KSERVE_INFLATE_STATE_BYTES);
}

/* Bytes inflated from a compressed body (hps__kserve_zsink_t; the decoder keeps
 * the total within max_body). */
static int inflated(void *ctx, const char *data, size_t n, hps__kserve_kerr_t *err)
{
    struct kreq *q = ctx;
    int rc = body_grow(q, n, q->srv->max_body);
    if (rc > 0) {
        q->busy = true; /* answered with 503 */
        body_free(q);
        return hps__kserve_kerr_set(err, 503, "server busy");
    }
    if (rc < 0)
        return hps__kserve_kerr_set(err, 500, "out of memory");
    memcpy(q->body + q->len, data, n);
    q->len += n;
    return 0;
}

/* Checks of a request with a body (inference, shm register) that need only
 * the headers; the decoder of a compressed body. */
static enum MHD_Result begin_infer(struct kreq *q, struct MHD_Connection *c)
{
    hps_kserve_t *s = q->srv;
    const char *encv =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_ENCODING);
    enum hps__kserve_zenc enc = hps__kserve_zenc_parse(encv);
    char msg[200];
    q->responded = true;
    if (enc == HPS__KSERVE_ZENC_UNKNOWN) {
        snprintf(msg, sizeof(msg), "unsupported Content-Encoding '%.64s'", encv);
        return hps__kserve_http_send_error(s, c, 400, msg);
    }
    uint64_t cl = content_length(c);
    if (cl != UINT64_MAX && enc == HPS__KSERVE_ZENC_IDENTITY && cl > s->max_body) {
        snprintf(msg, sizeof(msg),
                 "request body of %llu bytes exceeds the maximum allowed value of "
                 "%zu bytes",
                 (unsigned long long)cl, s->max_body);
        return hps__kserve_http_send_error(s, c, 400, msg);
    }
    if (cl != UINT64_MAX && enc != HPS__KSERVE_ZENC_IDENTITY &&
        cl > hps__kserve_zbound(s->max_body)) {
        snprintf(msg, sizeof(msg),
                 "compressed request body of %llu bytes exceeds the maximum allowed value of "
                 "%llu bytes (%zu bytes once decompressed)",
                 (unsigned long long)cl, (unsigned long long)hps__kserve_zbound(s->max_body),
                 s->max_body);
        return hps__kserve_http_send_error(s, c, 400, msg);
    }
    q->responded = false;
    q->store = true;
    q->resp_enc =
        hps__kserve_zenc_accept(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept-Encoding"));
    if (enc != HPS__KSERVE_ZENC_IDENTITY) {
        if (!budget_take(s, HPS__KSERVE_INFLATE_STATE_BYTES)) {
            q->busy = true;
            return MHD_YES;
        }
        if (hps__kserve_inflate_create(enc, s->max_body, inflated, q, &q->z) != 0) {
            budget_give(s, HPS__KSERVE_INFLATE_STATE_BYTES);
            return MHD_NO;
        }
    }
    if (cl != UINT64_MAX && cl > 0) {
        /* Reserve up front, but not more than PREALLOC_MAX: a client that
         * declares a large body and sends nothing must not pin memory. */
        size_t n = cl < PREALLOC_MAX ? (size_t)cl : PREALLOC_MAX;
        if (budget_take(s, n) && !(q->body = malloc(n)))
            budget_give(s, n);
        q->cap = q->body ? n : 0;
    }
    return MHD_YES;
}

/* First call: headers only. */
static enum MHD_Result begin(hps_kserve_t *s, struct MHD_Connection *c, const char *url,
                             const char *method, void **req_cls)
{
    struct kreq *q = calloc(1, sizeof(*q));
    if (!q)
        return MHD_NO;
    q->srv = s;
    *req_cls = q;
    /* the header is whole; a body's rate is watched from here
     * (kserve_conn.c) until the access handler's last call (BUSY) */
    hps__kserve_conn_body(&s->conns, c);
    atomic_fetch_add_explicit(&s->inflight, 1, memory_order_relaxed);
    struct hps__kserve_route r;
    hps__kserve_route_parse(url, &r);
    const char *want = hps__kserve_route_method(r.kind);
    q->responded = true;
    if (!want)
        return hps__kserve_http_send_error(s, c, 404, "Not Found");
    if (strcmp(method, want) != 0)
        return hps__kserve_http_send_error(s, c, 405, "Method Not Allowed");
    if (r.kind == HPS__KSERVE_R_SHM_STATUS || r.kind == HPS__KSERVE_R_SHM_REGISTER ||
        r.kind == HPS__KSERVE_R_SHM_UNREGISTER) {
        if (r.cuda && !s->shm.cuda)
            return hps__kserve_http_send_error(
                s, c, 501,
                "CUDA shared memory is not supported by this server (use "
                "system shared memory)");
        if (!s->limits.shm)
            return hps__kserve_http_send_error(s, c, 501, SHM_DISABLED_MSG);
    }
    if (r.kind == HPS__KSERVE_R_REPO_NAMED) /* Triton's answer, before any body is read */
        return hps__kserve_http_send_error(s, c, 501,
                                           "'repository_name' specification is not supported");
    q->responded = false;
    bool body = r.kind == HPS__KSERVE_R_INFER || r.kind == HPS__KSERVE_R_SHM_REGISTER ||
                r.kind == HPS__KSERVE_R_REPO_INDEX || r.kind == HPS__KSERVE_R_REPO_LOAD ||
                r.kind == HPS__KSERVE_R_REPO_UNLOAD;
    return body ? begin_infer(q, c) : MHD_YES;
}

/* A chunk of body.  Returns false to cut the connection. */
static bool absorb(struct kreq *q, const char *data, size_t n)
{
    size_t max = q->srv->max_body;
    q->received += n;
    if (q->received > 2 * (q->z ? hps__kserve_zbound(max) : (uint64_t)max))
        return false; /* a flood: stop reading */
    if (!q->store || q->too_large || q->busy)
        return true; /* discard */
    if (q->z) {
        hps__kserve_inflate_feed(q->z, data, n); /* an error is kept: answered at the end */
        return true;
    }
    if (q->received > max) {
        q->too_large = true;
        body_free(q);
        return true;
    }
    int rc = body_grow(q, n, max);
    if (rc > 0) {
        q->busy = true;
        body_free(q);
        return true;
    }
    if (rc < 0)
        return false;
    memcpy(q->body + q->len, data, n);
    q->len += n;
    return true;
}

enum MHD_Result hps__kserve_http_on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                            const char *method, const char *version,
                                            const char *upload_data, size_t *upload_data_size,
                                            void **req_cls)
{
    (void)version;
    struct kreq *q = *req_cls;
    if (!q)
        return begin(cls, conn, url, method, req_cls);
    if (q->deferred) { /* resumed by the pool: its answer is parked */
        q->deferred = false;
        struct MHD_Response *r = q->parked.r;
        q->parked.r = NULL;
        if (!r)
            return MHD_NO;
        enum MHD_Result ret = MHD_queue_response(conn, q->parked.status, r);
        MHD_destroy_response(r);
        return ret;
    }
    if (*upload_data_size) {
        hps__kserve_conn_body_bytes(conn, *upload_data_size);
        bool ok = absorb(q, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return ok ? MHD_YES : MHD_NO;
    }
    hps__kserve_conn_busy(&q->srv->conns, conn); /* the request is whole */
    if (q->responded)
        return MHD_YES;
    q->responded = true;
    if (q->z && hps__kserve_inflate_end(q->z) == 0)
        inflate_free(q); /* inflated: q->body holds the body */
    return dispatch(q, conn, url);
}

void hps__kserve_http_on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                                   enum MHD_RequestTerminationCode toe)
{
    (void)toe;
    hps_kserve_t *s = cls;
    struct kreq *q = *req_cls;
    hps__kserve_conn_idle(&s->conns, conn);
    if (!q)
        return;
    if (q->parked.r)
        MHD_destroy_response(q->parked.r);
    inflate_free(q);
    body_free(q);
    free(q);
    *req_cls = NULL;
    atomic_fetch_sub_explicit(&s->inflight, 1, memory_order_relaxed);
}
