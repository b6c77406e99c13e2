/*
 * reload-check.c -- what a reload may not change while it serves: checked
 * before anything is written, for SIGHUP (main.c: reload_ok) and for a
 * model control load (control.c), so that a configuration the running
 * workers cannot follow is refused with the reason, and the serving state
 * goes on as it was (issue 20: loading never disturbs what is serving).
 *
 * A running worker (hps-worker, or a process of the lookup library) takes
 * a new shape of a model (other tables or dimensions) from the INI text
 * the coordinator records in the segment (main.c, hps_shmdb_set_conf_text)
 * when it switches to it (worker/libhps/shape.c, attach.c: resolve), so a
 * reload may change a model's tables (logged), unless a worker of a build
 * before that is attached (its row records no HPS_PROC_CAP_FOLLOWS_SHAPES:
 * it would fail every request of the model until it restarts, while
 * reporting ready; a rolling upgrade meets this).  And while workers are
 * attached to the serving segment:
 *  - the key width (supportlonglong) stays: a worker's callers pass keys of
 *    the width it started with;
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

/* The workers and lookup-library clients attached to db (tools aside). */
typedef struct attached {
    size_t n;              /* all of them */
    size_t fixed;          /* of those, of a build that cannot follow a new shape */
    char pids[96];         /* the first few of those, for the message */
    size_t by_name;        /* of those, of a build that takes tables by name (no order) */
    char by_name_pids[96]; /* the first few of those */
} attached_t;

/* Append pid to the list in buf (len bytes) at *at, while it fits. */
static void add_pid(char *buf, size_t len, size_t *at, int pid)
{
    int w = snprintf(buf + *at, len - *at, "%s%d", *at ? ", " : "", pid);
    *at = w > 0 && *at + (size_t)w < len ? *at + (size_t)w : *at;
}

static attached_t workers(hps_shmdb_t *db)
{
    hps_proc_info_t procs[HPS_SHMDB_MAX_PROCS];
    attached_t a = {0};
    size_t n = 0, at = 0, at2 = 0;
    if (!db || hps_shmdb_procs(db, procs, &n, false) != 0)
        return a;
    for (size_t i = 0; i < n; i++) {
        if (!procs[i].alive || procs[i].self || procs[i].role != HPS_ROLE_WORKER)
            continue;
        a.n++;
        if (!(procs[i].caps & HPS_PROC_CAP_FOLLOWS_ORDER)) {
            a.by_name++;
            add_pid(a.by_name_pids, sizeof(a.by_name_pids), &at2, (int)procs[i].pid);
        }
        if (procs[i].caps & HPS_PROC_CAP_FOLLOWS_SHAPES)
            continue;
        a.fixed++;
        add_pid(a.pids, sizeof(a.pids), &at, (int)procs[i].pid);
    }
    return a;
}

/* Where model m of next names the tables of now's section of it (what
 * serves) in another order: the first position whose table is another one,
 * as "position P: T to U" in buf; false when the order is the same (or the
 * tables differ in number: another shape, said otherwise). */
static bool order_change(const hps_conf_t *now, const hps_conf_model_t *m, char *buf, size_t len)
{
    const hps_conf_model_t *was = now ? hps_conf_model_find(now, m->name) : NULL;
    for (size_t t = 0; was && was->num_tables == m->num_tables && t < m->num_tables; t++)
        if (strcmp(was->embedding_table_names[t], m->embedding_table_names[t]) != 0) {
            snprintf(buf, len, "position %zu: table %s to %s", t + 1, was->embedding_table_names[t],
                     m->embedding_table_names[t]);
            return true;
        }
    return false;
}

/* Model m of next against the tables db holds for it: false (the reason in msg)
 * when their key width differs, or when its tables or dimensions change
 * while workers of a build that cannot follow are attached (w), or its
 * tables are renamed or reordered (against now, what serves) while workers
 * of a build that takes tables by name are; such a change is logged
 * otherwise (the workers take it from the segment at the switch). */
static bool followable(hps_shmdb_t *db, const hps_conf_t *now, const hps_conf_model_t *m,
                       uint32_t key_bytes, const attached_t *w, char *msg, size_t len)
{
    uint32_t n = hps_shmdb_table_count(db), held = 0;
    char change[256] = "", order[192] = "";
    for (uint32_t i = 0; i < n; i++) {
        hps_table_info_t ti;
        if (hps_shmdb_table_info(db, i, &ti) != 0 || strcmp(ti.model, m->name) != 0)
            continue;
        held++;
        if (ti.key_bytes != key_bytes) {
            snprintf(msg, len,
                     "model %s table %s: %u-byte keys are served, the INI has %u-byte keys "
                     "([hps] supportlonglong): the %zu running worker%s cannot take keys of "
                     "another width (stop the workers, reload and start them again)",
                     m->name, ti.table, ti.key_bytes, key_bytes, w->n, w->n == 1 ? "" : "s");
            return false;
        }
        size_t t = 0;
        while (t < m->num_tables && strcmp(m->embedding_table_names[t], ti.table) != 0)
            t++;
        if (!change[0] && t == m->num_tables)
            snprintf(change, sizeof(change), "table %s is no longer in it", ti.table);
        else if (!change[0] && ti.dim != (uint32_t)m->embedding_vecsize_per_table[t])
            snprintf(change, sizeof(change), "table %s: dimension %u to %lld", ti.table, ti.dim,
                     (long long)m->embedding_vecsize_per_table[t]);
        else if (!order[0] && ti.order && ti.order != t + 1) /* recorded where it serves */
            snprintf(order, sizeof(order), "table %s: position %u to %zu", ti.table, ti.order,
                     t + 1);
    }
    if (held && !change[0] && held != m->num_tables)
        snprintf(change, sizeof(change), "%u tables to %zu", held, m->num_tables);
    if (!change[0] && held && (order[0] || order_change(now, m, order, sizeof(order))) &&
        w->by_name) {
        snprintf(msg, len,
                 "model %s renames or reorders its tables (%s), and %zu running worker%s (pid "
                 "%s) of an earlier build take%s tables by name: each would answer a position of "
                 "KEYS from another table; upgrade or restart %s first",
                 m->name, order, w->by_name, w->by_name == 1 ? "" : "s", w->by_name_pids,
                 w->by_name == 1 ? "s" : "", w->by_name == 1 ? "it" : "them");
        return false;
    }
    if (change[0] && w->fixed) {
        snprintf(msg, len,
                 "model %s changes shape (%s), and %zu running worker%s (pid %s) of an earlier "
                 "build cannot follow a new shape: each would fail every request of the model "
                 "until restarted; upgrade or restart %s first",
                 m->name, change, w->fixed, w->fixed == 1 ? "" : "s", w->pids,
                 w->fixed == 1 ? "it" : "them");
        return false;
    }
    if (change[0])
        HPS_WARN("model %s changes shape (%s): the running workers serve the new shape from the "
                 "switch on (callers that sized buffers by the old one get errors: "
                 "HPS_EMISMATCH in process, 503 over HTTP for a request caught in the switch)",
                 m->name, change);
    return true;
}

/* coord_reload_keys_ok with the workers attached (w). */
static bool keys_ok(const coord_t *c, const hps_conf_t *next, const attached_t *w, char *msg,
                    size_t len)
{
    if (!w->n)
        return true;
    uint32_t key_bytes = next->hps.supportlonglong ? 8 : 4;
    for (size_t i = 0; i < next->num_models; i++)
        if (!followable(c->db, c->conf, &next->models[i], key_bytes, w, msg, len))
            return false;
    return true;
}

bool coord_reload_keys_ok(const coord_t *c, const hps_conf_t *next, char *msg, size_t len)
{
    attached_t w = workers(c->db);
    return keys_ok(c, next, &w, msg, len);
}

bool coord_reload_check(const coord_t *c, const hps_conf_t *next, char *msg, size_t len)
{
    const hps_conf_t *now = c->conf;
    attached_t a = workers(c->db);
    size_t w = a.n;
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
    if (!keys_ok(c, next, &a, msg, len))
        return false;
    for (size_t i = 0; !explicit_mode && i < now->num_models; i++)
        if (!hps_conf_model_find(next, now->models[i].name))
            HPS_WARN("SIGHUP: model %s is not in the INI any more: the reload unloads it",
                     now->models[i].name);
    return true;
}

void coord_restart_check(const coord_t *c, hps_shmdb_t *serving)
{
    attached_t w = workers(serving);
    if (!w.fixed && !w.by_name)
        return;
    char msg[1024];
    uint32_t key_bytes = c->conf->hps.supportlonglong ? 8 : 4;
    for (size_t i = 0; i < c->conf->num_models; i++)
        if (!followable(serving, NULL, &c->conf->models[i], key_bytes, &w, msg, sizeof(msg)))
            HPS_WARN("restart: %s (a restart cannot keep the serving configuration: it goes on)",
                     msg);
}
