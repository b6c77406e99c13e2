/*
 * load-stage.c -- the persistent DB's staged tables of a start or build:
 * the load pass stages a table's new rows (coord_load_staged_add), and once
 * every model is loaded they replace the old ones (coord_load_pdb_commit).
 */
#include <stdio.h>
#include <stdlib.h>

#include "coord.h"
#include "hps/log.h"
#include "load-internal.h"

/*
 * STAGING.  A table whose files the persistent DB does not hold gets its
 * new rows as SST files in a stage (hps_pdb_stage_t) during the pass; its
 * column family keeps the rows it had until every model of this start has
 * been loaded, and only then are they replaced (coord_load_pdb_commit):
 * the contents token renewed once, the table's record forgotten, its
 * column family dropped and made anew, the stage ingested, the record
 * written.  So a
 * reload that fails or is killed while it builds leaves the persistent DB
 * as the serving version had it: the fallback (or the restart) finds its
 * tables and contents token unchanged, keeps them, and answers the serving
 * segment's misses from them meanwhile (serve.c), instead of ingesting them
 * again with those misses answered by defaults.  What remains is the time
 * from the first replacement to the publish (the ingestions, each a move
 * of files, and the Kafka catch-up).
 */

/* The stages of this start, in load order: main thread only, committed or
 * closed by coord_load_models(). */
static staged_t *g_staged;
static size_t g_staged_len, g_staged_cap;

void coord_load_staged_free(void)
{
    for (size_t i = 0; i < g_staged_len; i++) {
        hps_pdb_stage_close(g_staged[i].stage);
        free(g_staged[i].files);
    }
    free(g_staged);
    g_staged = NULL;
    g_staged_len = g_staged_cap = 0;
}

/* Table t of m staged: its entry (the stage stays the caller's until the
 * entry is added by coord_load_staged_add). */
int coord_load_staged_add(const staged_t *e)
{
    if (g_staged_len == g_staged_cap) {
        size_t cap = g_staged_cap ? 2 * g_staged_cap : 64;
        staged_t *n = realloc(g_staged, cap * sizeof(*n));
        if (!n)
            return HPS_EXIT_RUNTIME;
        g_staged = n;
        g_staged_cap = cap;
    }
    g_staged[g_staged_len++] = *e;
    return 0;
}

/* Replace staged table e's rows: renew the contents token (once per image:
 * a segment built before no longer matches what the persistent DB holds,
 * so coord_prev_restart must not answer from here on a restart), forget
 * its record (a crash from here on ingests it again), drop its rows (a new
 * model replaces the old one), ingest the stage, record the files.  A
 * table without a record has none to forget, and a column family created
 * by this start is empty: neither costs a synced RocksDB write then. */
static int pdb_replace(coord_t *c, staged_t *e)
{
    char name[320], err[512] = "";
    coord_ident_name(e->m->name, e->m->embedding_table_names[e->t], name, sizeof(name));
    coord_table_t *ct = e->ct;
    int ex = c->pdb_token_renewed ? 0 : coord_pdb_token_renew(c);
    if (ex)
        return ex;
    if ((e->has_rec && hps_pdb_meta_put(c->pdb, name, NULL, err, sizeof(err)) < 0) ||
        (e->had_cf &&
         (hps_pdb_drop(ct->pdb, err, sizeof(err)) < 0 ||
          hps_pdb_table(c->pdb, e->m->name, ct->name, true, &ct->pdb, err, sizeof(err)) < 0)) ||
        hps_pdb_stage_ingest(e->stage, ct->pdb, err, sizeof(err)) < 0 ||
        hps_pdb_meta_put(c->pdb, name, e->files, err, sizeof(err)) < 0) {
        HPS_ERROR("model %s table %s: persistent DB: %s", e->m->name, ct->name, err);
        return HPS_EXIT_PDB;
    }
    return 0;
}

/* Every model loaded: the staged tables' rows replace the old ones.  The
 * ingestions move files (no room needed), but the token, the records and
 * the column families are synced RocksDB writes: with its disk full, one
 * of them fails midway (and the system's RocksDB may abort on the next:
 * an assertion after a failed log write), so the replacement does not
 * start without HPS_COORD_PDB_COMMIT_ROOM free, and the build fails with
 * the persistent DB as it was. */
int coord_load_pdb_commit(coord_t *c)
{
    uint64_t avail;
    if (g_staged_len && coord_pdb_avail(c->conf->persistent_db.path, &avail) &&
        avail < HPS_COORD_PDB_COMMIT_ROOM) {
        HPS_ERROR("persistent DB: %s has %llu MiB free, less than the %llu MiB replacing the "
                  "tables' rows needs (RocksDB's logs and metadata): nothing replaced",
                  c->conf->persistent_db.path, (unsigned long long)(avail >> 20),
                  HPS_COORD_PDB_COMMIT_ROOM >> 20);
        return HPS_EXIT_PDB;
    }
    double t0 = coord_load_now_s();
    for (size_t i = 0; i < g_staged_len; i++) {
        int ex = pdb_replace(c, &g_staged[i]);
        if (ex)
            return ex;
    }
    if (g_staged_len)
        HPS_INFO("persistent DB: the staged rows of %zu table%s ingested in %.3f s (every model "
                 "loaded: only now do they replace what the tables held)",
                 g_staged_len, g_staged_len == 1 ? "" : "s", coord_load_now_s() - t0);
    return 0;
}
