/*
 * kserve_send.c -- queueing the answers of the HTTP listeners on
 * libmicrohttpd: empty, text and JSON answers, errors, and inference
 * answers, JSON or binary (JSON header, Inference-Header-Content-Length,
 * then the raw floats), compressed when Accept-Encoding asked for it
 * (kserve_zlib.c).  The bodies themselves are formatted by
 * kserve_response.c; the handlers that choose them are in kserve_http.c.
 *
 * An answer made on a lookup-pool thread is not queued on its suspended
 * connection: while hps__kserve_http_park() names a place, queue() parks it there,
 * and the access handler queues it once the connection resumes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/kserve_http.h"

/* ------------------------------------------------------------------------ */
/* Responses                                                                 */
/* ------------------------------------------------------------------------ */

/* The request whose response the calling pool thread is making: where
 * that response is parked (hps__kserve_http_park); NULL on other threads. */
static __thread struct hps__kserve_http_parked *parked_for;

void hps__kserve_http_park(struct hps__kserve_http_parked *p)
{
    parked_for = p;
}

static const char oom_body[] = "{\"error\":\"out of memory\"}";

/* Queue r (consumed).  While the server drains, ask clients to close their
 * keep-alive connections so that draining ends. */
static enum MHD_Result queue(const hps_kserve_t *s, struct MHD_Connection *c, unsigned status,
                             struct MHD_Response *r, const char *ctype)
{
    if (!r)
        return MHD_NO;
    if (ctype)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (atomic_load_explicit(&s->draining, memory_order_relaxed))
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    if (parked_for) { /* a pool thread: queued when the connection resumes */
        parked_for->status = status;
        parked_for->r = r;
        return MHD_YES;
    }
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_static(const hps_kserve_t *s, struct MHD_Connection *c, unsigned status,
                                   const char *body, size_t len, const char *ctype)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_PERSISTENT);
    return queue(s, c, status, r, ctype);
}

enum MHD_Result hps__kserve_http_send_empty(const hps_kserve_t *s, struct MHD_Connection *c,
                                            unsigned status)
{
    return send_static(s, c, status, "", 0, "text/plain");
}

/* Send the text (ownership taken); 500 if it ran out of memory. */
enum MHD_Result hps__kserve_http_send_text(const hps_kserve_t *s, struct MHD_Connection *c,
                                           unsigned status, const char *ctype,
                                           hps__kserve_text_t *t)
{
    if (t->oom || !t->data) {
        hps__kserve_text_fini(t);
        return send_static(s, c, 500, oom_body, sizeof(oom_body) - 1, "application/json");
    }
    size_t len;
    char *data = hps__kserve_text_steal(t, &len);
    struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback(len, data, free);
    if (!r)
        free(data);
    return queue(s, c, status, r, ctype);
}

enum MHD_Result hps__kserve_http_send_json(const hps_kserve_t *s, struct MHD_Connection *c,
                                           unsigned status, hps__kserve_text_t *t)
{
    return hps__kserve_http_send_text(s, c, status, "application/json", t);
}

enum MHD_Result hps__kserve_http_send_error(const hps_kserve_t *s, struct MHD_Connection *c,
                                            unsigned status, const char *msg)
{
    hps__kserve_text_t t;
    hps__kserve_text_init(&t);
    hps__kserve_resp_error(&t, msg);
    return hps__kserve_http_send_json(s, c, status, &t);
}

/* The body parts compressed with enc as a response with its
 * Content-Encoding; NULL (send them as they are, as Triton does) when enc
 * is identity or compressing failed. */
static struct MHD_Response *compressed(enum hps__kserve_zenc enc,
                                       const struct hps__kserve_zpart *parts, size_t nparts)
{
    char *data;
    size_t len;
    if (enc == HPS__KSERVE_ZENC_IDENTITY ||
        hps__kserve_zcompress(enc, parts, nparts, &data, &len) != 0)
        return NULL;
    struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback(len, data, free);
    if (!r) {
        free(data);
        return NULL;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_ENCODING, hps__kserve_zenc_name(enc));
    return r;
}

/* A JSON inference answer (t consumed), compressed with enc if it can be. */
enum MHD_Result hps__kserve_http_send_infer_json(const hps_kserve_t *s, struct MHD_Connection *c,
                                                 hps__kserve_text_t *t, enum hps__kserve_zenc enc)
{
    struct hps__kserve_zpart part = {t->data, t->len};
    struct MHD_Response *r = t->oom || !t->data ? NULL : compressed(enc, &part, 1);
    if (!r)
        return hps__kserve_http_send_json(s, c, 200, t);
    hps__kserve_text_fini(t);
    return queue(s, c, 200, r, "application/json");
}

/* Binary answers up to this size are sent from one buffer (see hps__kserve_http_send_binary). */
#define ONE_BUFFER_MAX ((size_t)64 * 1024)

/** Buffers of a binary inference response, freed by libmicrohttpd. */
struct binout {
    char *header;
    float *out; /* from the server's output pool */
    struct hps__kserve_outpool *pool;
};

static void binout_free(void *cls)
{
    struct binout *b = cls;
    free(b->header);
    hps__kserve_outpool_put(b->pool, b->out);
    free(b);
}

/* Queue a binary inference answer whose JSON header is hlen bytes. */
static enum MHD_Result queue_binary(const hps_kserve_t *s, struct MHD_Connection *c,
                                    struct MHD_Response *r, size_t hlen)
{
    char num[24];
    snprintf(num, sizeof(num), "%zu", hlen);
    MHD_add_response_header(r, "Inference-Header-Content-Length", num);
    return queue(s, c, 200, r, "application/octet-stream");
}

/* JSON header then the raw floats: both compressed with enc when it is not
 * identity; copied into one buffer up to ONE_BUFFER_MAX; else without
 * copying the floats (iovec response). */
enum MHD_Result hps__kserve_http_send_binary(const hps_kserve_t *s, struct MHD_Connection *c,
                                             hps__kserve_text_t *t, float *out, uint64_t out_len,
                                             enum hps__kserve_zenc enc)
{
    if (enc != HPS__KSERVE_ZENC_IDENTITY && !t->oom) {
        struct hps__kserve_zpart parts[2] = {{t->data, t->len},
                                             {out, (size_t)out_len * sizeof(float)}};
        struct MHD_Response *r = compressed(enc, parts, 2);
        if (r) {
            size_t hlen = t->len;
            hps__kserve_text_fini(t);
            hps__kserve_outpool_put(s->outpool, out);
            return queue_binary(s, c, r, hlen);
        }
    }
    size_t out_bytes = (size_t)out_len * sizeof(float);
    if (!t->oom && t->len + out_bytes <= ONE_BUFFER_MAX) {
        /* Small: header and floats in one buffer, which libmicrohttpd sends
         * with the HTTP header in one sendmsg; an iovec response costs a
         * second send (strace: 4 syscalls per 1-sample request with it). */
        char *one = malloc(t->len + out_bytes);
        if (one) {
            size_t hlen = t->len;
            memcpy(one, t->data, hlen);
            if (out_bytes)
                memcpy(one + hlen, out, out_bytes);
            hps__kserve_text_fini(t);
            hps__kserve_outpool_put(s->outpool, out);
            struct MHD_Response *r =
                MHD_create_response_from_buffer_with_free_callback(hlen + out_bytes, one, free);
            if (!r) {
                free(one);
                return MHD_NO;
            }
            return queue_binary(s, c, r, hlen);
        }
    }
    struct binout *b = malloc(sizeof(*b));
    if (!b || t->oom) {
        free(b);
        hps__kserve_outpool_put(s->outpool, out);
        hps__kserve_text_fini(t);
        return send_static(s, c, 500, oom_body, sizeof(oom_body) - 1, "application/json");
    }
    size_t hlen;
    b->header = hps__kserve_text_steal(t, &hlen);
    b->out = out;
    b->pool = s->outpool;
    struct MHD_IoVec iov[2] = {{b->header, hlen}, {out, (size_t)out_len * sizeof(float)}};
    struct MHD_Response *r = MHD_create_response_from_iovec(iov, out_len ? 2 : 1, binout_free, b);
    if (!r) {
        binout_free(b);
        return MHD_NO;
    }
    return queue_binary(s, c, r, hlen);
}
