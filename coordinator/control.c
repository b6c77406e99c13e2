/*
 * control.c -- hps-coordinator's side of Triton's model control modes
 * ([hps] model_control_mode): which models a start loads (startup_models,
 * and in explicit mode those the serving segment holds), and the load and
 * unload requests that workers (or any libhps client) leave in the segment
 * (shmdb/control.c has the slot protocol).
 *
 * A load or unload changes the loaded set the way SIGHUP changes the INI:
 * the request is checked here (the INI read again for the loaded model's
 * section, the new set's model files validated, room in /dev/shm), and
 * then the coordinator stops and executes itself again with the new set in
 * its environment, building a new segment beside the serving one (main.c,
 * segment.c).  Only the requested model changes, as in Triton: the other
 * models are built from the configuration that serves (conftext.c), not
 * from the INI file, which may have been edited meanwhile.  Nothing is
 * written before the checks pass, and the serving segment keeps serving
 * until the new one is published in one step.  The request's answer goes
 * into the new segment before it is published, so a requester that sees
 * the new segment also sees the answer; a new segment that cannot be built
 * answers FAILED on the serving one, and the coordinator then starts again
 * on the serving segment with the set it had (the fallback).
 *
 * Why a whole new segment for one model: it is the restart path, already
 * proven never to disturb serving (int-restart_serving, int-reload), and it
 * frees an unloaded model's memory wholly (the new segment never held it).
 */
#include <errno.h>
#include <inttypes.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "conf/tools.h"
#include "coord.h"
#include "hps/log.h"
#include "hps/modelfile.h"

/* Triton's answer outside explicit mode (model_repository_manager.cc). */
#define CONTROL_REFUSED "explicit model load / unload is not allowed if polling is enabled"
/* How long an answered request's slot waits for its requester to read it. */
#define ANSWER_KEEP_NS (60ull * 1000000000ull)

/* Whole-name match of one of the regexes. */
static bool matches(const char *const *res, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++) {
        regex_t re;
        if (regcomp(&re, res[i], REG_EXTENDED) != 0)
            continue; /* checked when the INI was loaded */
        regmatch_t m;
        bool hit =
            regexec(&re, name, 1, &m, 0) == 0 && m.rm_so == 0 && (size_t)m.rm_eo == strlen(name);
        regfree(&re);
        if (hit)
            return true;
    }
    return false;
}

/* keep[i] = model i is named in the comma-separated list. */
static void mark_listed(const hps_conf_t *conf, const char *list, bool *keep)
{
    char *copy = strdup(list), *save = NULL;
    for (char *n = copy ? strtok_r(copy, ",", &save) : NULL; n; n = strtok_r(NULL, ",", &save)) {
        const hps_conf_model_t *m = hps_conf_model_find(conf, n);
        if (m)
            keep[m - conf->models] = true;
        else
            HPS_WARN("model %s was loaded but is no longer in %s: not loaded", n, conf->source);
    }
    free(copy);
}

/* keep[i] = model i has tables in the segment that serves now: a start that
 * is no reload keeps the models loaded through the repository API before
 * the last coordinator stopped (a restart never disturbs what serves).  A
 * segment that cannot be attached keeps nothing more. */
static size_t mark_serving(const hps_conf_t *conf, bool *keep)
{
    const hps_shmdb_proc_opts_t po = {.num_threads = 1, .role = HPS_ROLE_TOOL, .device = -1};
    hps_shmdb_t *db = NULL;
    size_t n = 0;
    if (hps_shmdb_attach(conf->volatile_db.shared_memory_name, &po, &db) != 0)
        return 0;
    char gone[256] = "";
    for (uint32_t id = 0; id < hps_shmdb_table_count(db); id++) {
        hps_table_info_t ti;
        if (hps_shmdb_table_info(db, id, &ti) != 0)
            continue;
        const hps_conf_model_t *m = hps_conf_model_find(conf, ti.model);
        if (m && !keep[m - conf->models]) {
            keep[m - conf->models] = true;
            n++;
        } else if (!m && !strstr(gone, ti.model) && strlen(gone) + strlen(ti.model) + 3 < 256) {
            strcat(gone, *gone ? ", " : "");
            strcat(gone, ti.model);
        }
    }
    if (*gone)
        HPS_WARN("the serving segment holds models that %s no longer has: %s; not loaded (a start "
                 "loads the INI file as it is now)",
                 conf->source, gone);
    hps_shmdb_detach(db);
    return n;
}

/* "a,b,c": the names of conf's models, those with keep[i] when keep is
 * not NULL (malloc'ed; NULL when out of memory). */
static char *names_of(const hps_conf_t *conf, const bool *keep)
{
    size_t len = 1;
    for (size_t i = 0; i < conf->num_models; i++)
        len += strlen(conf->models[i].name) + 1;
    char *s = malloc(len), *p = s;
    for (size_t i = 0; s && i < conf->num_models; i++)
        if (!keep || keep[i])
            p += sprintf(p, "%s%s", p > s ? "," : "", conf->models[i].name);
    if (s)
        *p = 0;
    return s;
}

/* "id:op:model" of HPS_CONTROL_ENV. */
static void parse_request(const char *v, hps_ctl_request_t *rq)
{
    unsigned op = 0;
    int at = 0;
    memset(rq, 0, sizeof(*rq));
    if (sscanf(v, "%" SCNu64 ":%u:%n", &rq->id, &op, &at) < 2 || at <= 0 ||
        (op != HPS_MODEL_LOAD && op != HPS_MODEL_UNLOAD)) {
        rq->id = 0;
        return;
    }
    rq->op = (hps_model_op_t)op;
    snprintf(rq->model, sizeof(rq->model), "%s", v + at);
}

int coord_control_init(coord_t *c, hps_conf_t *conf)
{
    const char *ctl = getenv(HPS_CONTROL_ENV), *names = getenv(HPS_MODELS_ENV);
    const char *prev = getenv(HPS_PREV_MODELS_ENV);
    if (ctl)
        parse_request(ctl, &c->control);
    c->adopt = getenv(HPS_ADOPT_ENV) != NULL;
    /* The set the fallback restores: the one before this reload, or a
     * fallback's own (the serving set: a fallback that fails gets it again). */
    prev = prev ? prev : c->adopt ? names : NULL;
    c->prev_models = prev ? strdup(prev) : NULL;
    bool explicit_mode = conf->hps.model_control_mode == HPS_CONF_MODEL_CONTROL_EXPLICIT;
    bool *keep = calloc(conf->num_models + 1, sizeof(bool));
    if (!keep)
        return HPS_EXIT_RUNTIME;
    size_t n = 0;
    for (size_t i = 0; explicit_mode && !names && i < conf->num_models; i++)
        keep[i] =
            matches(conf->hps.startup_models, conf->hps.startup_models_len, conf->models[i].name);
    if (explicit_mode && !names && mark_serving(conf, keep))
        HPS_INFO("model control explicit: the serving segment /dev/shm/hps.%s holds models "
                 "loaded since the start: they stay loaded",
                 conf->volatile_db.shared_memory_name);
    if (explicit_mode && names)
        mark_listed(conf, names, keep);
    for (size_t i = 0; i < conf->num_models; i++)
        n += keep[i];
    if (explicit_mode) {
        size_t all = conf->num_models;
        hps_conf_keep_models(conf, keep);
        char *list = names_of(conf, NULL);
        HPS_INFO("model control explicit: loading %zu of the %zu models of %s%s%s", n, all,
                 conf->source, n ? ": " : "", list && n ? list : "");
        free(list);
    }
    free(keep);
    unsetenv(HPS_CONTROL_ENV); /* not for the processes it may start */
    unsetenv(HPS_MODELS_ENV);
    unsetenv(HPS_PREV_MODELS_ENV);
    unsetenv(HPS_ADOPT_ENV);
    return 0;
}

/* Sum of the sizes of m's model files (its new segment's rows, about). */
static uint64_t files_bytes(const hps_conf_model_t *m)
{
    uint64_t sum = 0;
    static const char *const files[] = {"key", "emb_vector"};
    for (size_t t = 0; t < m->num_tables; t++)
        for (int f = 0; f < 2; f++) {
            char path[4096];
            struct stat st;
            snprintf(path, sizeof(path), "%s/%s", m->sparse_files[t], files[f]);
            if (stat(path, &st) == 0)
                sum += (uint64_t)st.st_size;
        }
    return sum;
}

bool coord_control_room(const coord_t *c, uint64_t extra_bytes, char *msg, size_t len)
{
    hps_segment_info_t si;
    struct statvfs fs;
    if (!c->db || hps_shmdb_segment_info(c->db, &si) != 0 || statvfs("/dev/shm", &fs) != 0)
        return true; /* cannot tell: the build itself will say */
    uint64_t need = si.used_bytes + extra_bytes;
    uint64_t avail = (uint64_t)fs.f_bavail * (uint64_t)fs.f_frsize;
    if (avail >= need)
        return true;
    snprintf(msg, len,
             "not enough shared memory for the new segment beside the serving one: /dev/shm has "
             "%" PRIu64 " MiB free, the new segment needs about %" PRIu64
             " MiB (the serving one uses %" PRIu64 " MiB); the serving models stay as they are",
             avail >> 20, need >> 20, si.used_bytes >> 20);
    return false;
}

static void answer(coord_t *c, const hps_ctl_request_t *rq, bool ok, const char *msg)
{
    hps_shmdb_ctl_answer(c->db, rq->id, ok, msg);
    hps_log(ok ? HPS_LOG_INFO : HPS_LOG_WARN, "model control: %s %s: %s",
            rq->op == HPS_MODEL_LOAD ? "load" : "unload", rq->model, msg);
}

/* Validate model m's files: conf (the INI read again) is pruned to m (the
 * loaded models were checked when they loaded, and the new coordinator
 * checks every model again before it writes anything).  0, or why in msg. */
static int check_files(const coord_t *c, hps_conf_t *conf, const char *m, char *msg, size_t len)
{
    char why[HPS_SHMDB_CTL_MSG_MAX];
    bool keep[HPS_CONF_MAX_MODELS] = {false};
    for (size_t i = 0; i < conf->num_models; i++)
        keep[i] = strcmp(conf->models[i].name, m) == 0;
    hps_conf_keep_models(conf, keep);
    /* pdb: identities are taken (coord_pdb_room); nothing is written */
    coord_t t = {.conf = conf,
                 .key_bytes = conf->hps.supportlonglong ? 8 : 4,
                 .stop = c->stop,
                 .pdb = c->pdb};
    hps_log_capture(why, sizeof(why));
    int ex = coord_validate_models(&t);
    hps_log_capture(NULL, 0);
    bool room = ex || coord_pdb_room(c, &t, why, sizeof(why));
    free(t.idents);
    if (ex)
        snprintf(msg, len, "failed to load '%s': %.360s", m,
                 *why ? why : "its files were refused (see hps-coordinator's log)");
    else if (!room)
        snprintf(msg, len, "failed to load '%s': %.360s", m, why);
    return ex || !room ? -1 : 0;
}

/* The models kept loaded (keep[i], not the requested one) can be built
 * again: a new segment is built from every model's files, so files deleted
 * or broken since they loaded would fail the build (and its fallback).
 * Each table opened (presence, kind, sizes).  0, or why in msg. */
static int check_kept(const hps_conf_t *next, const bool *keep, const hps_ctl_request_t *rq,
                      char *msg, size_t len)
{
    for (size_t i = 0; i < next->num_models; i++) {
        const hps_conf_model_t *m = &next->models[i];
        for (size_t t = 0; keep[i] && strcmp(m->name, rq->model) != 0 && t < m->num_tables; t++) {
            char err[512] = "";
            hps_err_t rc = hps_modelfile_check_open(
                m->sparse_files[t], (uint32_t)m->embedding_vecsize_per_table[t], err, sizeof(err));
            if (rc < 0) {
                snprintf(msg, len,
                         "failed to %s '%s': model '%.120s', kept loaded, cannot be built again "
                         "from its files (every loaded model is): %.150s",
                         rq->op == HPS_MODEL_LOAD ? "load" : "unload", rq->model, m->name,
                         *err ? err : hps_strerror(rc));
                return -1;
            }
        }
    }
    return 0;
}

/* The loaded set after rq, checked: *ret_next = its names (next, the
 * configuration the new image builds, gives the models; next is used up),
 * the models kept loadable, a loaded model's files validated, room for it.
 * 0, or why in msg. */
static int check_request(coord_t *c, const hps_ctl_request_t *rq, hps_conf_t *next, char **ret_next,
                         char *msg, size_t len)
{
    bool load = rq->op == HPS_MODEL_LOAD;
    const hps_conf_model_t *m = hps_conf_model_find(next, rq->model);
    uint64_t extra = load && m ? files_bytes(m) : 0;
    bool keep[HPS_CONF_MAX_MODELS] = {false};
    for (size_t i = 0; i < next->num_models; i++) {
        const char *n = next->models[i].name;
        bool is_m = strcmp(n, rq->model) == 0;
        keep[i] = is_m ? load : hps_conf_model_find(c->conf, n) != NULL;
    }
    if (!(*ret_next = names_of(next, keep))) {
        snprintf(msg, len, "out of memory");
        return -1;
    }
    char why[HPS_SHMDB_CTL_MSG_MAX];
    if (load && !coord_reload_keys_ok(c, next, why, sizeof(why))) {
        snprintf(msg, len, "failed to load '%s': %.340s", rq->model, why);
        free(*ret_next);
        *ret_next = NULL;
        return -1;
    }
    if (check_kept(next, keep, rq, msg, len) < 0 ||
        (load && check_files(c, next, rq->model, msg, len) < 0) ||
        !coord_control_room(c, extra, msg, len)) {
        free(*ret_next);
        *ret_next = NULL;
        return -1;
    }
    return 0;
}

/* The configuration rq's new image builds (*ret_text, *ret_conf): the one
 * that serves (c->text), with the section of a loaded model as the INI at
 * path has it now.  0, or why in msg. */
static int next_config(const coord_t *c, const hps_ctl_request_t *rq, const char *path,
                       char **ret_text, hps_conf_t **ret_conf, char *msg, size_t len)
{
    bool load = rq->op == HPS_MODEL_LOAD;
    char err[HPS_SHMDB_CTL_MSG_MAX], *ini = NULL, *text = NULL;
    hps_conf_t *conf2 = NULL;
    char section[HPS_SHMDB_NAME_MAX + 8];
    snprintf(section, sizeof(section), "model.%s", rq->model);
    hps_err_t rc = 0;
    if (load) {
        rc = hps_conf_read_file(path, &ini, err, sizeof(err));
        if (!rc)
            rc = hps_conf_load_string(ini, path, &conf2, err, sizeof(err));
        if (!rc && !hps_conf_model_find(conf2, rq->model)) {
            snprintf(msg, len,
                     "failed to load '%s', failed to poll from model repository: %s has no "
                     "[model.%s]",
                     rq->model, path, rq->model);
            rc = HPS_ENOTFOUND;
            err[0] = 0;
        }
        if (!rc && conf2->hps.supportlonglong != c->conf->hps.supportlonglong) {
            /* the model's section alone is read: its keys would be read at
             * the running width, the INI's asked for silently ignored */
            snprintf(msg, len,
                     "failed to load '%s': %s sets [hps] supportlonglong = %s, but the "
                     "coordinator serves with %s, and a load reads the model's section only; "
                     "change the key width with a SIGHUP (refused while workers are attached: "
                     "stop them first) or a restart",
                     rq->model, path, conf2->hps.supportlonglong ? "true" : "false",
                     c->conf->hps.supportlonglong ? "true" : "false");
            rc = HPS_EMISMATCH;
            err[0] = 0;
        }
        if (!rc)
            rc = hps_conf_splice_section(c->text, ini, path, section, &text, err, sizeof(err));
    } else if (!(text = strdup(c->text))) {
        rc = -ENOMEM;
        snprintf(err, sizeof(err), "out of memory");
    }
    if (!rc)
        rc = hps_conf_load_string(text, path, ret_conf, err, sizeof(err));
    hps_conf_free(conf2);
    free(ini);
    if (rc < 0) {
        if (*err)
            snprintf(msg, len, "failed to %s '%s': %.360s", load ? "load" : "unload", rq->model,
                     err);
        free(text);
        return -1;
    }
    *ret_text = text;
    return 0;
}

bool coord_control_step(coord_t *c, const char *path)
{
    hps_shmdb_ctl_reap(c->db, ANSWER_KEEP_NS);
    hps_ctl_request_t rq;
    if (hps_shmdb_ctl_take(c->db, &rq) != 0)
        return false;
    char msg[HPS_SHMDB_CTL_MSG_MAX];
    bool load = rq.op == HPS_MODEL_LOAD;
    if (c->conf->hps.model_control_mode != HPS_CONF_MODEL_CONTROL_EXPLICIT) {
        answer(c, &rq, false, CONTROL_REFUSED);
        return false;
    }
    if (!load && !hps_conf_model_find(c->conf, rq.model)) {
        snprintf(msg, sizeof(msg), "model '%s' is not loaded", rq.model);
        answer(c, &rq, true, msg);
        return false;
    }
    char *text = NULL;
    hps_conf_t *conf = NULL;
    if (next_config(c, &rq, path, &text, &conf, msg, sizeof(msg)) < 0) {
        answer(c, &rq, false, msg);
        return false;
    }
    char *next = NULL, *now = names_of(c->conf, NULL);
    int rc = check_request(c, &rq, conf, &next, msg, sizeof(msg));
    hps_conf_free(conf);
    if (rc == 0 && !now)
        snprintf(msg, sizeof(msg), "out of memory");
    if (rc == 0 && now &&
        !(coord_conf_pass(HPS_CONF_FD_ENV, text) &&
          coord_conf_pass(HPS_PREV_CONF_FD_ENV, c->text))) {
        snprintf(msg, sizeof(msg),
                 "failed to %s '%s': the configuration could not be handed to "
                 "the new image",
                 load ? "load" : "unload", rq.model);
        rc = -1;
    }
    free(text);
    if (rc != 0 || !now) {
        coord_conf_unpass(HPS_CONF_FD_ENV);
        coord_conf_unpass(HPS_PREV_CONF_FD_ENV);
        answer(c, &rq, false, msg);
        free(next);
        free(now);
        return false;
    }
    char req[HPS_SHMDB_NAME_MAX + 64];
    snprintf(req, sizeof(req), "%" PRIu64 ":%u:%s", rq.id, (unsigned)rq.op, rq.model);
    setenv(HPS_MODELS_ENV, next, 1);
    setenv(HPS_PREV_MODELS_ENV, now, 1);
    setenv(HPS_CONTROL_ENV, req, 1);
    HPS_INFO("model control: %s %s: building a new segment with the models {%s} beside the "
             "serving one",
             load ? "load" : "unload", rq.model, next);
    free(next);
    free(now);
    return true;
}

void coord_control_keep_loaded(const coord_t *c)
{
    if (c->conf->hps.model_control_mode != HPS_CONF_MODEL_CONTROL_EXPLICIT)
        return;
    char *now = names_of(c->conf, NULL);
    if (now) {
        setenv(HPS_MODELS_ENV, now, 1);
        setenv(HPS_PREV_MODELS_ENV, now, 1);
    }
    free(now);
}

void coord_control_before_publish(coord_t *c)
{
    pthread_mutex_lock(&c->serving_lock);
    size_t carried = c->serving ? hps_shmdb_ctl_carry(c->serving, c->db) : 0;
    pthread_mutex_unlock(&c->serving_lock);
    if (carried)
        HPS_INFO("model control: %zu requests and unread answers moved to the new segment",
                 carried);
    if (!c->control.id)
        return;
    char msg[HPS_SHMDB_CTL_MSG_MAX];
    snprintf(msg, sizeof(msg), "model '%s' %s", c->control.model,
             c->control.op == HPS_MODEL_LOAD ? "loaded" : "unloaded");
    hps_shmdb_ctl_set_result(c->db, c->control.id, true, msg);
}

/* Tables of one model in the PDB (hps_pdb_foreach_table). */
typedef struct model_cfs {
    const char *model;
    char (*tables)[HPS_SHMDB_NAME_MAX + 1];
    size_t n, cap;
} model_cfs_t;

static int note_table(const char *model, const char *table, void *ctx)
{
    model_cfs_t *s = ctx;
    if (strcmp(model, s->model) != 0 || s->n == s->cap)
        return 0;
    snprintf(s->tables[s->n++], HPS_SHMDB_NAME_MAX + 1, "%s", table);
    return 0;
}

void coord_control_after_publish(coord_t *c)
{
    if (!c->control.id || c->control.op != HPS_MODEL_UNLOAD || !c->pdb ||
        hps_conf_model_find(c->conf, c->control.model))
        return;
    char tables[HPS_SHMDB_MAX_TABLES][HPS_SHMDB_NAME_MAX + 1];
    model_cfs_t s = {.model = c->control.model, .tables = tables, .cap = HPS_SHMDB_MAX_TABLES};
    hps_pdb_foreach_table(c->pdb, note_table, &s);
    size_t dropped = 0;
    for (size_t i = 0; i < s.n; i++) {
        char name[2 * HPS_SHMDB_NAME_MAX + 32], err[512];
        hps_pdb_table_t *t = NULL;
        coord_ident_name(s.model, tables[i], name, sizeof(name));
        /* The record first: a crash from here on re-ingests at the next load. */
        if (hps_pdb_meta_put(c->pdb, name, NULL, err, sizeof(err)) < 0 ||
            hps_pdb_table(c->pdb, s.model, tables[i], false, &t, err, sizeof(err)) < 0 ||
            hps_pdb_drop(t, err, sizeof(err)) < 0) {
            HPS_WARN("model %s unloaded, but its table %s stays in the persistent DB: %s", s.model,
                     tables[i], err);
            continue;
        }
        dropped++;
    }
    if (dropped)
        HPS_INFO("model %s unloaded: dropped its %zu tables from the persistent DB", s.model,
                 dropped);
}

bool coord_control_failed(coord_t *c, int ex, const char *why)
{
    pthread_mutex_lock(&c->serving_lock);
    bool serving = c->serving != NULL;
    if (serving && c->control.id) {
        char msg[HPS_SHMDB_CTL_MSG_MAX];
        snprintf(msg, sizeof(msg), "failed to %s '%s': %s",
                 c->control.op == HPS_MODEL_LOAD ? "load" : "unload", c->control.model,
                 why && *why ? why
                             : "the new segment could not be built (see hps-coordinator's log)");
        hps_shmdb_ctl_answer(c->serving, c->control.id, false, msg);
    }
    pthread_mutex_unlock(&c->serving_lock);
    if (!serving || c->serving_restart || ex == HPS_EXIT_USAGE)
        return false; /* a restart's build failed: it stops, as it would have */
    /* Back to the serving segment with the set it serves, as it was
     * configured (not as the INI file may say now).  A fallback that failed
     * itself is that configuration already: the next one gets it again,
     * never the INI file's (another version's files, under the serving
     * version's name). */
    const char *text = c->adopt ? c->text : c->prev_text;
    if (c->prev_models)
        setenv(HPS_MODELS_ENV, c->prev_models, 1);
    if (text && !coord_conf_pass(HPS_CONF_FD_ENV, text))
        HPS_WARN("the fallback reads %s again instead", c->conf->source);
    setenv(HPS_ADOPT_ENV, "1", 1);
    return true;
}
