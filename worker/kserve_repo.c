/*
 * kserve_repo.c -- Triton's model repository extension (advertised as
 * "model_repository"; reference/kserve-v2.md section 1.5, Triton's
 * docs/protocol/extension_model_repository.md):
 *
 *   POST /v2/repository/index                      the models, their version and state
 *   POST /v2/repository/models/{m}/load | unload   explicit model control
 *   POST /v2/repository/{repo}/...                 501 for a named repository
 *
 * Model control mode `none` (the backend has no model_control): the models
 * are those of the INI file, loaded by hps-coordinator at its start and on
 * SIGHUP (a model added to the INI shows by name only until a reload loads
 * it; one a reload removed, as "unloaded"), and a load or unload request
 * gets Triton's answer for that mode (503, "explicit model load / unload is
 * not allowed if polling is enabled").
 * Mode `explicit`: the request is checked here (its body, the model), then
 * the backend's model_control runs it on the lookup pool (kserve_http.c)
 * and the answer is 200 when the model serves (or is gone), 400 with the
 * reason when it was refused.  A model is READY while it is loaded and the
 * worker is ready, LOADING / UNLOADING while a request for it waits or
 * runs, UNAVAILABLE with reason "unloaded" after an unload, UNAVAILABLE
 * with the coordinator's message when its last load through this worker
 * failed while it was not loaded (Triton's index after a failed load; the
 * other workers do not know of it), and listed by name only when it was
 * never loaded (Triton's index).
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

/* A body that is empty (*ret_root NULL) or one JSON object (*ret_root, put
 * it).  0, or -1 with err: 400 when it is something else. */
static int parse_object(const char *body, size_t len, json_object **ret_root,
                        hps__kserve_kerr_t *err)
{
    *ret_root = NULL;
    size_t i = 0;
    while (i < len && strchr(" \t\r\n", body[i]))
        i++;
    if (i == len)
        return 0;
    json_tokener *tok = json_tokener_new_ex(8);
    if (!tok)
        return hps__kserve_kerr_set(err, 500, "out of memory");
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    json_object *root = json_tokener_parse_ex(tok, body, (int)len);
    enum json_tokener_error e = json_tokener_get_error(tok);
    bool whole = root && e == json_tokener_success && tok->char_offset == (int)len;
    json_tokener_free(tok);
    if (!whole || !json_object_is_type(root, json_type_object)) {
        json_object_put(root);
        if (e == json_tokener_error_depth)
            return hps__kserve_kerr_set(
                err, 400,
                "failed to parse the request JSON buffer: nested deeper than 8 "
                "levels");
        if (e != json_tokener_success)
            return hps__kserve_kerr_set(err, 400, "failed to parse the request JSON buffer: %s",
                                        json_tokener_error_desc(e));
        return hps__kserve_kerr_set(err, 400,
                                    "failed to parse the request JSON buffer: expected an object");
    }
    *ret_root = root;
    return 0;
}

/* The index request's body: empty, or an object whose optional "ready" is
 * a boolean.  *ret_ready = that value (false when absent). */
static int index_body(const char *body, size_t len, bool *ret_ready, hps__kserve_kerr_t *err)
{
    *ret_ready = false;
    json_object *root, *ready;
    if (parse_object(body, len, &root, err) < 0)
        return -1;
    int rc = 0;
    if (root && json_object_object_get_ex(root, "ready", &ready)) {
        if (!json_object_is_type(ready, json_type_boolean))
            rc = hps__kserve_kerr_set(err, 400, "expected a boolean for 'ready'");
        else
            *ret_ready = json_object_get_boolean(ready);
    }
    json_object_put(root);
    return rc;
}

/* Whether m was ever loaded, and its state now. */
static hps_model_state_t state_of(const hps_kserve_backend_t *b, size_t i, bool worker_ready,
                                  bool *ret_served)
{
    *ret_served = true;
    if (b->model_state)
        return b->model_state(b->ctx, i, ret_served);
    return worker_ready ? HPS_MODEL_READY : HPS_MODEL_UNAVAILABLE;
}

static const char *state_name(hps_model_state_t st)
{
    switch (st) {
    case HPS_MODEL_READY:
        return "READY";
    case HPS_MODEL_LOADING:
        return "LOADING";
    case HPS_MODEL_UNLOADING:
        return "UNLOADING";
    default:
        return "UNAVAILABLE";
    }
}

int hps__kserve_repo_index(const struct hps__kserve_kmodel *models, size_t num_models,
                           const hps_kserve_backend_t *b, bool worker_ready, const char *body,
                           size_t len, pthread_mutex_t *fail_mu, hps__kserve_text_t *out,
                           hps__kserve_kerr_t *err)
{
    char failure[HPS__KSERVE_LOAD_FAILURE_MAX];
    bool only_ready;
    if (index_body(body, len, &only_ready, err) < 0)
        return -1;
    hps__kserve_text_putc(out, '[');
    bool first = true;
    for (size_t i = 0; i < num_models; i++) {
        const struct hps__kserve_kmodel *m = &models[i];
        bool served;
        if (!hps__kserve_model_current(models, num_models, b, i))
            continue; /* an older shape of a model listed by its current entry */
        hps_model_state_t st = state_of(b, i, worker_ready, &served);
        if (only_ready && st != HPS_MODEL_READY)
            continue;
        failure[0] = '\0';
        if (st == HPS_MODEL_UNLOADED && fail_mu) {
            pthread_mutex_lock(fail_mu);
            memcpy(failure, m->load_failure, sizeof(failure));
            pthread_mutex_unlock(fail_mu);
        }
        if (!first)
            hps__kserve_text_putc(out, ',');
        first = false;
        hps__kserve_text_puts(out, "{\"name\":");
        hps__kserve_text_json_str(out, m->name, m->name_len);
        if (st == HPS_MODEL_UNLOADED && !served && !failure[0]) { /* never loaded: the name only */
            hps__kserve_text_putc(out, '}');
            continue;
        }
        hps__kserve_text_puts(out, ",\"version\":");
        hps__kserve_text_version(out, m);
        hps__kserve_text_puts(out, ",\"state\":\"");
        hps__kserve_text_puts(out, state_name(st));
        hps__kserve_text_putc(out, '"');
        const char *reason = failure[0]                    ? failure
                             : st == HPS_MODEL_UNLOADED    ? "unloaded"
                             : st == HPS_MODEL_UNAVAILABLE ? NOT_READY_REASON
                                                           : NULL;
        if (reason) {
            hps__kserve_text_puts(out, ",\"reason\":");
            hps__kserve_text_json_str(out, reason, strlen(reason));
        }
        hps__kserve_text_putc(out, '}');
    }
    hps__kserve_text_putc(out, ']');
    return 0;
}

/* A load or unload body: empty, or an object whose "parameters", if any, is
 * an object.  Loading with a model configuration or files in the request
 * ("config", "file:<version>/<name>") is refused: the INI is the
 * repository. */
static int control_body(const char *body, size_t len, bool load, hps__kserve_kerr_t *err)
{
    json_object *root = NULL;
    if (parse_object(body, len, &root, err) < 0)
        return -1;
    json_object *params;
    int rc = 0;
    if (root && json_object_object_get_ex(root, "parameters", &params)) {
        if (!json_object_is_type(params, json_type_object)) {
            json_object_put(root); /* (json-c's foreach reads an object's table) */
            return hps__kserve_kerr_set(err, 400, "expected an object for 'parameters'");
        }
        json_object_object_foreach(params, key, val)
        {
            if (rc == 0 && !load && strcmp(key, "unload_dependents") == 0 &&
                !json_object_is_type(val, json_type_boolean))
                rc = hps__kserve_kerr_set(err, 400, "expected a boolean for 'unload_dependents'");
            if (rc == 0 && load && (strcmp(key, "config") == 0 || strncmp(key, "file:", 5) == 0))
                rc = hps__kserve_kerr_set(
                    err, 400,
                    "load parameter '%s' is not supported: the models are the "
                    "[model.<name>] sections of the INI file; change it there, "
                    "then load the model",
                    key);
        }
    }
    json_object_put(root);
    return rc;
}

int hps__kserve_repo_control(const struct hps__kserve_route *r,
                             const struct hps__kserve_kmodel *models, size_t num_models,
                             const hps_kserve_backend_t *b, const char *body, size_t len,
                             char *name, size_t name_cap, hps__kserve_kerr_t *err)
{
    if (!b->model_control) /* the same answer for every model, known or not, as Triton's */
        return hps__kserve_kerr_set(err, 503, "%s", CONTROL_REFUSED);
    bool load = r->kind == HPS__KSERVE_R_REPO_LOAD;
    if (r->model_len == 0 || r->model_len >= name_cap || memchr(r->model, 0, r->model_len))
        return hps__kserve_kerr_set(
            err, 400, "failed to %s '%.*s': not a model name", load ? "load" : "unload",
            (int)(r->model_len > 200 ? hps__kserve_utf8_cut(r->model, 200) : r->model_len),
            r->model);
    memcpy(name, r->model, r->model_len);
    name[r->model_len] = 0;
    if (control_body(body, len, load, err) < 0)
        return -1;
    if (load)
        return 0; /* a model unknown here may have been added to the INI: the coordinator says */
    for (size_t i = 0; i < num_models; i++) {
        bool served;
        if (models[i].name_len != r->model_len || memcmp(models[i].name, name, r->model_len))
            continue;
        if (state_of(b, i, true, &served) == HPS_MODEL_UNLOADED && !served)
            break;
        return 0;
    }
    return hps__kserve_kerr_set(err, 400, "Model to be unloaded has not been served");
}
