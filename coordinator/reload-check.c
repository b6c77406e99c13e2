/*
 * reload-check.c -- what a reload may not change while it serves: checked
 * before anything is written, for SIGHUP (main.c: reload_ok) and for a
 * model control load (control.c), so that a configuration the running
 * workers cannot follow is refused with the reason, and the serving state
 * goes on as it was (issue 20: loading never disturbs what is serving).
 *
 * A running worker (hps-worker, or a process of the lookup library) serves
 * each model with the tables, dimensions and key width its INI had when it
 * learnt the model; a segment that holds the model otherwise is not served
 * by it (worker/libhps/attach.c: table_fits) until it starts again.  So,
 * while workers are attached to the serving segment:
 *  - a model the segment holds keeps its tables' names, dimensions and key
 *    width (load the new shape under another model name, or stop the
 *    workers, reload, and start them again);
 *  - shared_memory_name stays: the workers attach by name and would keep
 *    the old segment, with no coordinator answering its misses.
 * And, workers or not:
 *  - model_control_mode explicit: a loaded model's [model.<name>] section
 *    stays in the INI (Triton unloads only on an unload request);
 *  - model_control_mode none: a SIGHUP never leaves no model at all while
 *    models serve (an INI truncated by an editor, say); the models a
 *    reload drops are named in the log.
 */
#include <stdio.h>
#include <string.h>

#include "coord.h"
#include "hps/log.h"

/* Workers and lookup-library clients attached to db (tools aside). */
static size_t workers(hps_shmdb_t *db)
{
    hps_proc_info_t procs[HPS_SHMDB_MAX_PROCS];
    size_t n = 0, w = 0;
    if (!db || hps_shmdb_procs(db, procs, &n, false) != 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        w += procs[i].alive && !procs[i].self && procs[i].role == HPS_ROLE_WORKER;
    return w;
}

/* Whether model m of next has the tables db holds for it (the same count,
 * names, dimensions and key width), or db holds none of it.  Why not in msg. */
static bool same_shape(hps_shmdb_t *db, const hps_conf_model_t *m, uint32_t key_bytes, char *msg,
                       size_t len)
{
    uint32_t n = hps_shmdb_table_count(db), held = 0;
    for (uint32_t i = 0; i < n; i++) {
        hps_table_info_t ti;
        if (hps_shmdb_table_info(db, i, &ti) != 0 || strcmp(ti.model, m->name) != 0)
            continue;
        held++;
        size_t t = 0;
        while (t < m->num_tables && strcmp(m->embedding_table_names[t], ti.table) != 0)
            t++;
        if (t == m->num_tables) {
            snprintf(msg, len, "model %s: table %s, which the workers serve, is no longer in it",
                     m->name, ti.table);
            return false;
        }
        if (ti.dim != (uint32_t)m->embedding_vecsize_per_table[t] || ti.key_bytes != key_bytes) {
            snprintf(msg, len,
                     "model %s table %s: dimension %u with %u-byte keys is served, the INI has "
                     "dimension %lld with %u-byte keys",
                     m->name, ti.table, ti.dim, ti.key_bytes,
                     (long long)m->embedding_vecsize_per_table[t], key_bytes);
            return false;
        }
    }
    if (held && held != m->num_tables) {
        snprintf(msg, len, "model %s: %u tables are served, the INI has %zu", m->name, held,
                 m->num_tables);
        return false;
    }
    return true;
}

/* coord_reload_shape_ok with the count of workers attached (w). */
static bool shape_ok(const coord_t *c, const hps_conf_t *next, size_t w, char *msg, size_t len)
{
    if (!w)
        return true;
    char why[512];
    uint32_t key_bytes = next->hps.supportlonglong ? 8 : 4;
    for (size_t i = 0; i < next->num_models; i++)
        if (!same_shape(c->db, &next->models[i], key_bytes, why, sizeof(why))) {
            snprintf(msg, len,
                     "%s: the %zu running worker%s cannot answer another shape of a model they "
                     "serve (load it under a new model name, or stop the workers, reload and "
                     "start them again)",
                     why, w, w == 1 ? "" : "s");
            return false;
        }
    return true;
}

bool coord_reload_shape_ok(const coord_t *c, const hps_conf_t *next, char *msg, size_t len)
{
    return shape_ok(c, next, workers(c->db), msg, len);
}

bool coord_reload_check(const coord_t *c, const hps_conf_t *next, char *msg, size_t len)
{
    const hps_conf_t *now = c->conf;
    size_t w = workers(c->db);
    if (w && strcmp(next->volatile_db.shared_memory_name, now->volatile_db.shared_memory_name)) {
        snprintf(msg, len,
                 "[volatile_db] shared_memory_name changed (%s to %s): the %zu running worker%s "
                 "attach by the name they started with and cannot follow (stop them first)",
                 now->volatile_db.shared_memory_name, next->volatile_db.shared_memory_name, w,
                 w == 1 ? "" : "s");
        return false;
    }
    bool explicit_mode = now->hps.model_control_mode == HPS_CONF_MODEL_CONTROL_EXPLICIT;
    for (size_t i = 0; explicit_mode && i < now->num_models; i++)
        if (!hps_conf_model_find(next, now->models[i].name)) {
            snprintf(msg, len,
                     "model %s is loaded and its [model.%s] section is gone from the INI: in "
                     "explicit model control only an unload request unloads it (POST "
                     "/v2/repository/models/%s/unload), or restore the section",
                     now->models[i].name, now->models[i].name, now->models[i].name);
            return false;
        }
    if (!explicit_mode && now->num_models && !next->num_models) {
        snprintf(msg, len,
                 "the INI has no [model.<name>] section while %zu model%s serve%s (a file cut "
                 "short?): a reload does not unload every model (stop the coordinator for that)",
                 now->num_models, now->num_models == 1 ? "" : "s", now->num_models == 1 ? "s" : "");
        return false;
    }
    if (!shape_ok(c, next, w, msg, len))
        return false;
    for (size_t i = 0; !explicit_mode && i < now->num_models; i++)
        if (!hps_conf_model_find(next, now->models[i].name))
            HPS_WARN("SIGHUP: model %s is not in the INI any more: the reload unloads it",
                     now->models[i].name);
    return true;
}
