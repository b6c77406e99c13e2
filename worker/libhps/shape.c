/*
 * shape.c -- a model whose tables a reload changed (their names, count,
 * dimensions or default values): the client follows the coordinator's new
 * shape.
 *
 * A client's model entries are fixed at creation (callers size their
 * buffers by them, and lock-free readers hold them), so a new shape is a
 * new entry of the same name (client.c: hps__client_append_model), and
 * attach.c: resolve serves whichever entry of a name fits the segment.  The
 * new entry's section is taken from the INI text the coordinator recorded
 * in the segment (hps_shmdb_conf_text), not from this process's INI: the
 * segment holds what the coordinator built, while the file may have been
 * edited again meanwhile, or may be another file.
 */
#include <stdlib.h>
#include <string.h>

#include "hps/log.h"
#include "conf/tools.h"
#include "internal.h"

/* Tables db holds of model `name`. */
static size_t model_tables(hps_shmdb_t *db, const char *name)
{
    uint32_t n = hps_shmdb_table_count(db);
    size_t held = 0;
    for (uint32_t i = 0; i < n; i++) {
        hps_table_info_t ti;
        held += hps_shmdb_table_info(db, i, &ti) == 0 && strcmp(ti.model, name) == 0;
    }
    return held;
}

static int text_order(hps_shmdb_t *db, const hps_conf_model_t *c, uint32_t key_bytes);

int hps__client_shape_state(hps_shmdb_t *db, const hps_conf_model_t *c, uint32_t key_bytes)
{
    size_t held = model_tables(db, c->name);
    if (held == 0)
        return 1;
    if (held != c->num_tables) /* a table added or removed; names are unique */
        return held > c->num_tables ? 2 : 1;
    bool unrecorded = false;      /* a table of the segment records no position */
    bool defaults_differ = false; /* a table's default value is not c's */
    for (size_t t = 0; t < c->num_tables; t++) {
        uint32_t id;
        hps_table_info_t ti;
        if (hps_shmdb_table_find(db, c->name, c->embedding_table_names[t], &id) != 0 ||
            hps_shmdb_table_info(db, id, &ti) != 0)
            return 1;
        /* another order: a reload reordered or renamed its tables, and the
         * KEYS of position t belong to another table now */
        if (ti.dim != (uint32_t)c->embedding_vecsize_per_table[t] || ti.key_bytes != key_bytes ||
            (ti.order && ti.order != t + 1))
            return 2;
        unrecorded |= ti.order == 0;
        defaults_differ |= ti.default_value != (float)c->default_value_for_each_table[t];
    }
    /* a segment of an earlier build records no positions: its builder's INI */
    int state = unrecorded && c->num_tables > 1 ? text_order(db, c, key_bytes) : 0;
    /* Another default value: the coordinator answers (and records) its own
     * for keys found nowhere, so this process follows it where the segment
     * holds the coordinator's INI text to take it from; without (a
     * coordinator of an earlier build), it serves with its own as before
     * rather than not at all. */
    char *text = NULL;
    if (state == 0 && defaults_differ && hps_shmdb_conf_text(db, &text) == 0)
        state = 2;
    free(text);
    return state;
}

/* Whether entry i is the first of its name (each name is looked at once). */
static bool first_of_name(const hps_client_t *cl, size_t i)
{
    for (size_t j = 0; j < i; j++)
        if (strcmp(cl->models[j].conf->name, cl->models[i].conf->name) == 0)
            return false;
    return true;
}

/* Whether some entry of name fits db. */
static bool name_fits(const hps_client_t *cl, hps_shmdb_t *db, const char *name)
{
    for (size_t j = 0; j < cl->num_models; j++)
        if (strcmp(cl->models[j].conf->name, name) == 0 &&
            hps__client_shape_state(db, cl->models[j].conf, cl->key_bytes) == 0)
            return true;
    return false;
}

/* The [model.*] sections of the coordinator's INI text, under an [hps] of
 * key_bytes-wide keys: for a text this build does not take whole (a
 * coordinator of an earlier build may have values in other sections that
 * this one refuses, such as shared_memory_mode 0400), while only its models
 * matter here.  NULL when they do not parse either. */
static hps_conf_t *model_only(const char *text, uint32_t key_bytes)
{
    char *cur = strdup(key_bytes == 8 ? "[hps]\nsupportlonglong = true\n"
                                      : "[hps]\nsupportlonglong = false\n");
    hps_conf_t *conf = NULL;
    for (const char *p = text; cur && (p = strstr(p, "[model.")) != NULL; p++) {
        if (p != text && p[-1] != '\n')
            continue; /* not a section header */
        const char *end = strchr(p, ']');
        if (!end || end - p > 8 + HPS_CONF_NAME_MAX)
            continue;
        char section[HPS_CONF_NAME_MAX + 8], *next = NULL;
        snprintf(section, sizeof(section), "%.*s", (int)(end - p - 1), p + 1);
        if (hps_conf_splice_section(cur, text, NULL, section, &next, NULL, 0) < 0) {
            free(cur);
            return NULL;
        }
        free(cur);
        cur = next;
    }
    if (cur &&
        hps_conf_load_string(cur, "the coordinator's models (in the segment)", &conf, NULL, 0) < 0)
        conf = NULL;
    free(cur);
    return conf;
}

/* The coordinator's INI text parsed: whole, else its [model.*] sections
 * alone (model_only); NULL when neither parses (err: why the whole did not). */
static hps_conf_t *coord_conf(const char *text, uint32_t key_bytes, char *err, size_t err_len)
{
    hps_conf_t *conf = NULL;
    if (hps_conf_load_string(text, "the coordinator's INI (in the segment)", &conf, err, err_len) <
        0)
        conf = model_only(text, key_bytes);
    return conf;
}

/* 2 when the INI text db's builder recorded names section c's tables in
 * another order (a coordinator of a build that records no positions in the
 * tables: upgrade review), else 0 (the same order, or not known). */
static int text_order(hps_shmdb_t *db, const hps_conf_model_t *c, uint32_t key_bytes)
{
    char *text = NULL;
    if (hps_shmdb_conf_text(db, &text) != 0)
        return 0;
    hps_conf_t *conf = coord_conf(text, key_bytes, NULL, 0);
    free(text);
    const hps_conf_model_t *was = conf ? hps_conf_model_find(conf, c->name) : NULL;
    int state = 0;
    for (size_t t = 0; was && was->num_tables == c->num_tables && t < c->num_tables; t++)
        if (strcmp(was->embedding_table_names[t], c->embedding_table_names[t]) != 0)
            state = 2;
    hps_conf_free(conf);
    return state;
}

size_t hps__client_follow_shapes(hps_client_t *cl, hps_shmdb_t *db)
{
    hps_conf_t *conf = NULL; /* the coordinator's, parsed once it is needed */
    bool tried = false;
    size_t added = 0;
    pthread_mutex_lock(&cl->models_lock);
    size_t n = cl->num_models;
    for (size_t i = 0; i < n; i++) {
        const char *name = cl->models[i].conf->name;
        if (!first_of_name(cl, i) || name_fits(cl, db, name) || !model_tables(db, name))
            continue;
        if (!tried) {
            tried = true;
            char *text = NULL, err[512] = "";
            hps_err_t rc = hps_shmdb_conf_text(db, &text);
            atomic_store(&cl->no_conf_text, rc == HPS_ENOTFOUND);
            if (rc == 0 && !(conf = coord_conf(text, cl->key_bytes, err, sizeof(err)))) {
                HPS_WARN("the coordinator's INI text in the segment does not parse: %s", err);
            } else if (rc < 0 && rc != HPS_ENOTFOUND) {
                HPS_WARN("cannot read the coordinator's INI text in the segment: %s",
                         hps_strerror(rc));
            }
            free(text);
        }
        const hps_conf_model_t *c = conf ? hps_conf_model_find(conf, name) : NULL;
        if (!c || (conf->hps.supportlonglong ? 8u : 4u) != cl->key_bytes ||
            hps__client_shape_state(db, c, cl->key_bytes) != 0)
            continue; /* resolve() says why it is not served */
        if (hps__client_append_model(cl, c) < 0)
            break;
        added++;
        HPS_INFO("model %s: the coordinator serves it with other tables, dimensions or default "
                 "values than this process did: served with them from now on (index %zu)",
                 name, cl->num_models - 1);
    }
    if (added && !hps__client_keep_conf(cl, conf))
        HPS_WARN("out of memory keeping the coordinator's configuration (leaked)");
    else if (!added)
        hps_conf_free(conf);
    pthread_mutex_unlock(&cl->models_lock);
    return added;
}
