/*
 * load-check.c -- the content check of every model's files before anything
 * is written (NaN/Inf values, keys on more than one row: load.c's MODEL
 * CONTENTS), taken with the tables' identities on the loader threads, and
 * the duplicate keys it finds, kept for the fills (coord_load_last_rows).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "hps/log.h"
#include "hps/modelfile.h"
#include "load-internal.h"

static void specs_of(const coord_t *c, const hps_conf_model_t *m, hps_modelfile_spec_t *specs)
{
    for (size_t t = 0; t < m->num_tables; t++)
        specs[t] = (hps_modelfile_spec_t){.table = m->embedding_table_names[t],
                                          .dir = m->sparse_files[t],
                                          .dim = (uint32_t)m->embedding_vecsize_per_table[t],
                                          .key_bytes = c->key_bytes};
}

/* Per table of every model, in the order of c->idents: filled by
 * coord_validate_models() (the content check), used by the fills (load.c
 * fill_layer(), load-pass.c), freed by coord_load_models().  Main thread
 * only, except that the content check fills entry t on the loader thread
 * that checks table t (read after coord_load_par_run returns); the other
 * files reach it through coord_load_dups(). */
static table_dups_t *g_dups;
static size_t g_dups_len;

void coord_load_dups_free(void)
{
    for (size_t i = 0; i < g_dups_len; i++)
        free(g_dups[i].d);
    free(g_dups);
    g_dups = NULL;
    g_dups_len = 0;
}

/* The [model] keys that govern the kinds of bad rows found. */
static const char *bad_row_keys(bool nonfinite, bool dup)
{
    return nonfinite && dup ? "nonfinite_values, duplicate_keys"
           : nonfinite      ? "nonfinite_values"
                            : "duplicate_keys";
}

/* One table's content check and identity, taken on a loader thread. */
typedef struct check_res {
    hps_modelfile_stats_t st;
    hps_err_t rc;
    int ident_errno; /* 0: identity taken (or none wanted) */
    char err[HPS_PATH_MSG_MAX];
} check_res_t;

typedef struct check_ctx {
    const coord_t *c;
    const hps_conf_model_t *m;
    const hps_modelfile_spec_t *specs;
    unsigned refuse;
    table_dups_t *dups;   /* m's entries of g_dups */
    coord_ident_t *ident; /* m's identities */
    check_res_t *res;
} check_ctx_t;

static void check_job(void *ctx, size_t t, load_buf_t *b)
{
    check_ctx_t *k = ctx;
    check_res_t *r = &k->res[t];
    (void)b;
    if (k->ident) /* first: a file replaced from now on is not loaded */
        coord_files_stamp(k->m, t, &k->ident[t]);
    r->rc = hps_modelfile_check_table(&k->specs[t], k->refuse, &r->st, &k->dups[t].d, &k->dups[t].n,
                                      r->err, sizeof(r->err));
    if (r->rc == 0 && k->ident &&
        !coord_table_ident(k->c, k->m, t, k->ident[t].files, IDENT_MAX, k->ident[t].content))
        r->ident_errno = errno ? errno : EIO;
}

/* Where model m's files are named, for a refusal: "FILE:LINE: [model.m]
 * sparse_files" (hps_conf_key_where). */
static const char *files_key(const coord_t *c, const hps_conf_model_t *m, char *buf, size_t len)
{
    char key[HPS_CONF_NAME_MAX + 32];
    snprintf(key, sizeof(key), "model.%s.sparse_files", m->name);
    return hps_conf_key_where(c->conf, key, buf, len);
}

/* Check the contents of m's tables (NaN/Inf values, duplicate keys) and,
 * with ident, take their identities, on the loader threads: refuse the
 * model as its nonfinite_values / duplicate_keys say (the first bad table
 * in order), else log one warning per table with bad rows. */
static int check_contents(const coord_t *c, const hps_conf_model_t *m,
                          const hps_modelfile_spec_t *specs, table_dups_t *dups,
                          coord_ident_t *ident, uint64_t *ret_nonfinite, uint64_t *ret_dup_keys)
{
    bool refuse_nf = m->nonfinite_values == HPS_CONF_BAD_ROWS_REFUSE;
    bool refuse_dup = m->duplicate_keys == HPS_CONF_BAD_ROWS_REFUSE;
    check_ctx_t k = {.c = c,
                     .m = m,
                     .specs = specs,
                     .dups = dups,
                     .ident = ident,
                     .refuse = (refuse_nf ? HPS_MODELFILE_NONFINITE : 0) |
                               (refuse_dup ? HPS_MODELFILE_DUPLICATES : 0),
                     .res = calloc(m->num_tables, sizeof(check_res_t))};
    char what[768], hint[320], where[HPS_CONF_NAME_MAX + 4200];
    int ex = k.res ? 0 : HPS_EXIT_RUNTIME;
    if (!ex)
        coord_load_par_run(check_job, &k, m->num_tables);
    for (size_t t = 0; !ex && t < m->num_tables; t++) {
        const check_res_t *r = &k.res[t];
        bool nf = r->st.nonfinite_rows > 0, dup = r->st.dup_keys > 0;
        if (r->rc == -ECANCELED) { /* a SIGTERM (main.c, stop_signal) */
            HPS_INFO("model %s: the check stopped: %s", m->name, r->err);
            ex = HPS_EXIT_RUNTIME;
            break;
        }
        if (r->rc < 0) {
            hint[0] = '\0';
            if ((refuse_nf && nf) || (refuse_dup && dup))
                snprintf(hint, sizeof(hint), " ([model.%s] %s = refuse)", m->name,
                         bad_row_keys(refuse_nf && nf, refuse_dup && dup));
            HPS_ERROR("%s: model %s refused, nothing was loaded: %s%s",
                      files_key(c, m, where, sizeof(where)), m->name, r->err, hint);
            ex = HPS_EXIT_MODEL;
            break;
        }
        *ret_nonfinite += r->st.nonfinite_rows;
        *ret_dup_keys += r->st.dup_keys;
        if (hps_modelfile_stats_format(&r->st, specs[t].dir,
                                       HPS_MODELFILE_NONFINITE | HPS_MODELFILE_DUPLICATES, what,
                                       sizeof(what)))
            HPS_WARN("model %s table %s: %s; loaded%s%s%s ([model.%s] %s = warn; `refuse` "
                     "refuses such a model)",
                     m->name, specs[t].table, what,
                     nf ? " the rows with NaN or Inf as they are" : "", nf && dup ? " and" : "",
                     dup ? " the last row of each repeated key" : "", m->name,
                     bad_row_keys(nf, dup));
    }
    for (size_t t = 0; !ex && t < m->num_tables; t++) {
        if (!k.res[t].ident_errno)
            continue;
        HPS_ERROR("%s: model %s refused, nothing was loaded: table %s: cannot take the "
                  "identity of %s/key and emb_vector: %s",
                  files_key(c, m, where, sizeof(where)), m->name, m->embedding_table_names[t],
                  m->sparse_files[t], strerror(k.res[t].ident_errno));
        ex = HPS_EXIT_MODEL;
    }
    free(k.res);
    return ex;
}

/* Refuse the whole start-up if any table of any model is malformed.  With
 * ident (a persistent DB), the identities of every model's tables, in order. */
/* A failed reload's fallback (c->adopt) serves the segment it adopts, with
 * the persistent DB's and Redis's rows as they stand: it reads a model's
 * files only to put back what the failed build removed, and only files
 * whose identity is the one the serving segment was built from
 * (hps_shmdb_table_files_ident).  Files refused (ex != 0: deleted, broken)
 * or changed since (a new version written over them) are not read: reading
 * them would serve another version's rows under the serving one, or stop
 * the fallback, and then the next (the same files again).  Marks m's
 * tables unread accordingly; true when all are. */
static bool adopt_unread(coord_t *c, const hps_conf_model_t *m, coord_ident_t *ident, int ex)
{
    size_t unread = 0;
    for (size_t t = 0; ident && t < m->num_tables; t++) {
        uint32_t id;
        uint64_t built = 0;
        if (!ex && hps_shmdb_table_find(c->serving, m->name, m->embedding_table_names[t], &id) == 0)
            built = hps_shmdb_table_files_ident(c->serving, id);
        ident[t].unread = ex || !built || built != coord_ident_hash(ident[t].files);
        unread += ident[t].unread;
    }
    if (unread)
        HPS_WARN("model %s: the fallback does not read the files of %zu of its %zu tables (%s): "
                 "it serves the rows the segment, the persistent DB and Redis hold for them",
                 m->name, unread, m->num_tables,
                 ex ? "refused, above"
                    : "not those the serving segment was built from, or of a build that did not "
                      "record them");
    return ident && unread == m->num_tables;
}

static int validate_all(coord_t *c, coord_ident_t *ident)
{
    char err[HPS_PATH_MSG_MAX], where[HPS_CONF_NAME_MAX + 4200];
    bool adopt = c->adopt && c->serving && ident;
    for (size_t i = 0, first = 0; i < c->conf->num_models;
         first += c->conf->models[i++].num_tables) {
        const hps_conf_model_t *m = &c->conf->models[i];
        hps_modelfile_spec_t specs[256];
        uint64_t rows = 0;
        if (m->num_tables > 256) {
            HPS_ERROR("model %s: %zu tables, at most 256", m->name, m->num_tables);
            return HPS_EXIT_MODEL;
        }
        specs_of(c, m, specs);
        hps_err_t rc = hps_modelfile_validate_model(specs, m->num_tables, &rows, err, sizeof(err));
        if (rc == -ECANCELED) { /* a SIGTERM (main.c, stop_signal) */
            HPS_INFO("model %s: the check stopped: %s", m->name, err);
            return HPS_EXIT_RUNTIME;
        }
        if (rc < 0) {
            HPS_ERROR("%s: model %s refused, nothing was loaded: %s",
                      files_key(c, m, where, sizeof(where)), m->name, err);
            if (adopt && adopt_unread(c, m, ident + first, HPS_EXIT_MODEL))
                continue;
            return HPS_EXIT_MODEL;
        }
        uint64_t nonfinite = 0, dup_keys = 0;
        double t0 = coord_load_now_s();
        int ex = check_contents(c, m, specs, g_dups + first, ident ? ident + first : NULL,
                                &nonfinite, &dup_keys);
        if (ex && atomic_load(c->stop))
            return ex; /* cut short by a SIGTERM: not a refusal to serve around */
        if (adopt && adopt_unread(c, m, ident + first, ex))
            continue;
        if (ex)
            return ex;
        unsigned threads = (unsigned)(m->num_tables < LOAD_THREADS ? m->num_tables : LOAD_THREADS);
        HPS_INFO("model %s: %zu table%s, %llu rows, files valid; contents checked in %.2f s (rows "
                 "with NaN or Inf: %llu, keys on more than one row: %llu) by %u thread%s",
                 m->name, m->num_tables, m->num_tables == 1 ? "" : "s", (unsigned long long)rows,
                 coord_load_now_s() - t0, (unsigned long long)nonfinite,
                 (unsigned long long)dup_keys, threads, threads == 1 ? "" : "s");
    }
    return 0;
}

static int dup_key_cmp(const void *a, const void *b)
{
    int64_t x = ((const hps_modelfile_dup_t *)a)->key, y = ((const hps_modelfile_dup_t *)b)->key;
    return (x > y) - (x < y);
}

/* A fill of the first `want` rows only: give each of the n rows whose key
 * the files repeat after row `want` the vector of the key's last row, so
 * that the last row wins here too. */
hps_err_t coord_load_last_rows(hps_modelfile_t *mf, const table_dups_t *dups, uint64_t want,
                               uint32_t key_bytes, size_t n, const void *keys, float *vecs,
                               char *err, size_t err_len)
{
    uint32_t dim = hps_modelfile_dim(mf);
    for (size_t i = 0; dups && dups->n && i < n; i++) {
        hps_modelfile_dup_t k = {.key = key_bytes == 8 ? ((const int64_t *)keys)[i]
                                                       : (int64_t)((const uint32_t *)keys)[i]};
        const hps_modelfile_dup_t *d = bsearch(&k, dups->d, dups->n, sizeof(k), dup_key_cmp);
        hps_err_t rc = d && d->last_row >= want ? hps_modelfile_read(mf, d->last_row, 1, NULL,
                                                                     vecs + i * dim, err, err_len)
                                                : 0;
        if (rc < 0)
            return rc;
    }
    return 0;
}

const table_dups_t *coord_load_dups(size_t first)
{
    return g_dups ? g_dups + first : NULL;
}

int coord_validate_models(coord_t *c)
{
    size_t total = 0;
    for (size_t i = 0; i < c->conf->num_models; i++)
        total += c->conf->models[i].num_tables;
    free(c->idents);
    /* every table's: the persistent DB's record, the distributed DB's, and
     * the segment's content identity (load-carry.c) */
    c->idents = total ? calloc(total, sizeof(coord_ident_t)) : NULL;
    if (total && !c->idents)
        return HPS_EXIT_RUNTIME;
    coord_load_dups_free();
    g_dups = calloc(total ? total : 1, sizeof(*g_dups));
    if (!g_dups)
        return HPS_EXIT_RUNTIME;
    g_dups_len = total;
    return validate_all(c, c->idents);
}
