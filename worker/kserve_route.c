/*
 * kserve_route.c -- URL path to endpoint.
 *
 * Full matches of Triton's route regexes (src/http_server.cc), written as a
 * small segment matcher instead of a regex engine:
 *
 *   /v2(/health/(live|ready))?
 *   /v2/models/stats
 *   /v2/models/([^/]+)(/versions/([0-9]+))?(/(infer|ready|config|stats))?
 *   /v2/(system|cuda)sharedmemory(/region/([^/]+))?/(status|register|unregister)
 *   /v2/repository(/[^/]+)?/index
 *   /v2/repository(/[^/]+)?/models/([^/]+)/(load|unload)
 *
 * A repository path that names a repository is REPO_NAMED (Triton: 501).
 * Anything else (including Triton's generate and trace paths, which this
 * front end does not implement) is NOT_FOUND -> 404.
 */
#include <string.h>

#include "worker/kserve_internal.h"

/* If *p starts with lit, advance past it and return true. */
static bool eat(const char **p, const char *lit)
{
    size_t n = strlen(lit);
    if (strncmp(*p, lit, n) != 0)
        return false;
    *p += n;
    return true;
}

/* One non-empty path segment ([^/]+); returns its length, 0 if none. */
static size_t segment(const char *p)
{
    return strcspn(p, "/");
}

static bool all_digits(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return n > 0;
}

static enum hps__kserve_route_kind shm_action(const char *p)
{
    if (strcmp(p, "/status") == 0)
        return HPS__KSERVE_R_SHM_STATUS;
    if (strcmp(p, "/register") == 0)
        return HPS__KSERVE_R_SHM_REGISTER;
    if (strcmp(p, "/unregister") == 0)
        return HPS__KSERVE_R_SHM_UNREGISTER;
    return HPS__KSERVE_R_NOT_FOUND;
}

/* p points after "/v2/systemsharedmemory" or "/v2/cudasharedmemory". */
static void parse_shm(const char *p, struct hps__kserve_route *r)
{
    if (eat(&p, "/region/")) {
        size_t n = segment(p);
        if (n == 0)
            return;
        r->region = p;
        r->region_len = n;
        p += n;
    }
    r->kind = shm_action(p);
}

static enum hps__kserve_route_kind model_suffix(const char *p)
{
    if (*p == '\0')
        return HPS__KSERVE_R_MODEL_META;
    if (strcmp(p, "/infer") == 0)
        return HPS__KSERVE_R_INFER;
    if (strcmp(p, "/ready") == 0)
        return HPS__KSERVE_R_MODEL_READY;
    if (strcmp(p, "/config") == 0)
        return HPS__KSERVE_R_MODEL_CONFIG;
    if (strcmp(p, "/stats") == 0)
        return HPS__KSERVE_R_MODEL_STATS;
    return HPS__KSERVE_R_NOT_FOUND;
}

/* p points after "/v2/models/". */
static void parse_model(const char *p, struct hps__kserve_route *r)
{
    size_t n = segment(p);
    if (n == 0)
        return;
    r->model = p;
    r->model_len = n;
    p += n;
    if (eat(&p, "/versions/")) {
        size_t v = segment(p);
        if (!all_digits(p, v))
            return;
        r->version = p;
        r->version_len = v;
        p += v;
    }
    r->kind = model_suffix(p);
}

/* p points after "/v2/repository": [/<repo>]/index or
 * [/<repo>]/models/<m>/(load|unload). */
static void parse_repo(const char *p, struct hps__kserve_route *r)
{
    bool named = false;
    if (strcmp(p, "/index") != 0 && strncmp(p, "/models/", 8) != 0) {
        size_t n = *p == '/' ? segment(p + 1) : 0;
        if (n == 0)
            return;
        p += 1 + n; /* a named repository: /v2/repository/<repo>/... */
        named = true;
    }
    enum hps__kserve_route_kind kind = HPS__KSERVE_R_NOT_FOUND;
    if (strcmp(p, "/index") == 0) {
        kind = HPS__KSERVE_R_REPO_INDEX;
    } else if (eat(&p, "/models/")) {
        size_t n = segment(p);
        if (n == 0)
            return;
        r->model = p;
        r->model_len = n;
        p += n;
        kind = strcmp(p, "/load") == 0     ? HPS__KSERVE_R_REPO_LOAD
               : strcmp(p, "/unload") == 0 ? HPS__KSERVE_R_REPO_UNLOAD
                                           : HPS__KSERVE_R_NOT_FOUND;
    }
    r->kind = kind != HPS__KSERVE_R_NOT_FOUND && named ? HPS__KSERVE_R_REPO_NAMED : kind;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

size_t hps__kserve_unescape(void *cls, struct MHD_Connection *c, char *s)
{
    (void)cls, (void)c;
    char *w = s;
    for (const char *p = s; *p; p++) {
        int hi = p[0] == '%' ? hex_digit(p[1]) : -1, lo = hi >= 0 ? hex_digit(p[2]) : -1;
        int v = lo >= 0 ? hi * 16 + lo : -1;
        if (v > 0 && v != '/') { /* %00 and %2F stay as they are */
            *w++ = (char)v;
            p += 2;
        } else {
            *w++ = *p;
        }
    }
    *w = '\0';
    return (size_t)(w - s);
}

void hps__kserve_route_parse(const char *url, struct hps__kserve_route *r)
{
    memset(r, 0, sizeof(*r));
    r->kind = HPS__KSERVE_R_NOT_FOUND;
    const char *p = url;
    if (!eat(&p, "/v2"))
        return;
    if (*p == '\0')
        r->kind = HPS__KSERVE_R_SERVER_META;
    else if (strcmp(p, "/health/live") == 0)
        r->kind = HPS__KSERVE_R_LIVE;
    else if (strcmp(p, "/health/ready") == 0)
        r->kind = HPS__KSERVE_R_READY;
    else if (strcmp(p, "/models/stats") == 0)
        r->kind = HPS__KSERVE_R_ALL_STATS;
    else if (eat(&p, "/models/"))
        parse_model(p, r);
    else if (eat(&p, "/repository"))
        parse_repo(p, r);
    else if (eat(&p, "/systemsharedmemory"))
        parse_shm(p, r);
    else if (eat(&p, "/cudasharedmemory")) {
        r->cuda = true;
        parse_shm(p, r);
    }
    if (r->kind == HPS__KSERVE_R_NOT_FOUND)
        memset(r, 0, sizeof(*r));
}

const char *hps__kserve_route_method(enum hps__kserve_route_kind kind)
{
    switch (kind) {
    case HPS__KSERVE_R_NOT_FOUND:
        return NULL;
    case HPS__KSERVE_R_INFER:
    case HPS__KSERVE_R_SHM_REGISTER:
    case HPS__KSERVE_R_SHM_UNREGISTER:
    case HPS__KSERVE_R_REPO_INDEX:
    case HPS__KSERVE_R_REPO_LOAD:
    case HPS__KSERVE_R_REPO_UNLOAD:
    case HPS__KSERVE_R_REPO_NAMED:
        return "POST";
    default:
        return "GET";
    }
}

/* Decimal version string to a number; false on overflow. */
static bool parse_version(const char *s, size_t n, uint64_t *ret)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *ret = v;
    return true;
}

bool hps__kserve_route_version(const struct hps__kserve_route *r, uint64_t *ret)
{
    return r->version && parse_version(r->version, r->version_len, ret);
}

long hps__kserve_model_pick(const struct hps__kserve_kmodel *models, size_t num_models,
                            const hps_kserve_backend_t *b, const char *name, size_t len)
{
    long newest = -1;
    size_t count = 0;
    for (size_t i = 0; i < num_models; i++)
        if (models[i].name_len == len && memcmp(models[i].name, name, len) == 0) {
            newest = (long)i;
            count++;
        }
    if (count < 2 || !b || !b->model_loaded) /* the rule: one entry per name */
        return newest;
    for (long i = newest; i >= 0; i--)
        if (models[i].name_len == len && memcmp(models[i].name, name, len) == 0 &&
            b->model_loaded(b->ctx, (size_t)i))
            return i;
    return newest;
}

bool hps__kserve_model_current(const struct hps__kserve_kmodel *models, size_t num_models,
                               const hps_kserve_backend_t *b, size_t i)
{
    return hps__kserve_model_pick(models, num_models, b, models[i].name, models[i].name_len) ==
           (long)i;
}

long hps__kserve_route_model(const struct hps__kserve_route *r,
                             const struct hps__kserve_kmodel *models, size_t num_models,
                             const hps_kserve_backend_t *b, hps__kserve_kerr_t *err)
{
    int mlen = (int)(r->model_len > 200 ? hps__kserve_utf8_cut(r->model, 200) : r->model_len);
    long found = hps__kserve_model_pick(models, num_models, b, r->model, r->model_len);
    if (found < 0) {
        hps__kserve_kerr_set(err, 400, "Request for unknown model: '%.*s' is not found", mlen,
                             r->model);
        return -2;
    }
    if (!r->version)
        return found;
    int vlen = (int)(r->version_len > 40 ? 40 : r->version_len);
    uint64_t v;
    if (!parse_version(r->version, r->version_len, &v)) {
        hps__kserve_kerr_set(err, 400,
                             "failed to get model version from specified version string '%.*s'",
                             vlen, r->version);
        return -1;
    }
    if (v != hps__kserve_kmodel_version(&models[found])) {
        hps__kserve_kerr_set(err, 400,
                             "Request for unknown model: '%.*s' version %.*s is not found", mlen,
                             r->model, vlen, r->version);
        return -1;
    }
    return found;
}
