/*
 * kserve_repo.c -- Triton's model repository extension (advertised as
 * "model_repository"; reference/kserve-v2.md section 1.5, Triton's
 * docs/protocol/extension_model_repository.md):
 *
 *   POST /v2/repository/index                      the models, their version and state
 *   POST /v2/repository/models/{m}/load | unload   refused: model control mode `none`
 *   POST /v2/repository/{repo}/...                 501 for a named repository
 *
 * hps-worker runs in Triton's model control mode `none`: the models are
 * those of the INI file, loaded by hps-coordinator at its start, and a
 * load or unload request gets Triton's answer for that mode (503,
 * "explicit model load / unload is not allowed if polling is enabled").
 * A model is READY while the worker is ready (its segment attached, every
 * table found, the coordinator serving), else UNAVAILABLE with the reason.
 */
#include <json-c/json.h>
#include <string.h>

#include "worker/kserve_internal.h"

/* Triton's text for a load or unload outside model control mode
 * `explicit` (model_repository_manager.cc, Status::Code::UNAVAILABLE). */
#define CONTROL_REFUSED "explicit model load / unload is not allowed if polling is enabled"

/* Why a configured model is not READY while the worker is not ready. */
#define NOT_READY_REASON                                                                           \
    "the worker is not ready: its coordinator is not serving or the model's tables are not in "    \
    "the shared-memory segment yet"

/* The index request's body: empty, or an object whose optional "ready" is
 * a boolean.  *ret_ready = that value (false when absent). */
static int index_body(const char *body, size_t len, bool *ret_ready, hps__kerr_t *err)
{
    *ret_ready = false;
    size_t i = 0;
    while (i < len && strchr(" \t\r\n", body[i]))
        i++;
    if (i == len)
        return 0;
    json_tokener *tok = json_tokener_new_ex(8);
    if (!tok)
        return hps__kerr_set(err, 500, "out of memory");
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    json_object *root = json_tokener_parse_ex(tok, body, (int)len);
    bool whole =
        root && json_tokener_get_error(tok) == json_tokener_success && tok->char_offset == (int)len;
    json_tokener_free(tok);
    int rc = 0;
    json_object *ready;
    if (!whole || !json_object_is_type(root, json_type_object))
        rc = hps__kerr_set(err, 400, "failed to parse the request JSON buffer: expected an object");
    else if (json_object_object_get_ex(root, "ready", &ready)) {
        if (!json_object_is_type(ready, json_type_boolean))
            rc = hps__kerr_set(err, 400, "expected a boolean for 'ready'");
        else
            *ret_ready = json_object_get_boolean(ready);
    }
    json_object_put(root);
    return rc;
}

int hps__repo_index(const struct hps__kmodel *models, size_t num_models, bool worker_ready,
                    const char *body, size_t len, hps__text_t *out, hps__kerr_t *err)
{
    bool only_ready;
    if (index_body(body, len, &only_ready, err) < 0)
        return -1;
    hps__text_putc(out, '[');
    bool first = true;
    for (size_t i = 0; i < num_models; i++) {
        const struct hps__kmodel *m = &models[i];
        if (only_ready && !worker_ready)
            continue;
        if (!first)
            hps__text_putc(out, ',');
        first = false;
        hps__text_puts(out, "{\"name\":");
        hps__text_json_str(out, m->name, m->name_len);
        hps__text_puts(out, ",\"version\":");
        hps__text_version(out, m);
        hps__text_puts(out, worker_ready ? ",\"state\":\"READY\"" : ",\"state\":\"UNAVAILABLE\"");
        if (!worker_ready) {
            hps__text_puts(out, ",\"reason\":");
            hps__text_json_str(out, NOT_READY_REASON, strlen(NOT_READY_REASON));
        }
        hps__text_putc(out, '}');
    }
    hps__text_putc(out, ']');
    return 0;
}

int hps__repo_control(const struct hps__route *r, hps__kerr_t *err)
{
    (void)r; /* the same answer for every model, known or not, as Triton's */
    return hps__kerr_set(err, 503, "%s", CONTROL_REFUSED);
}
