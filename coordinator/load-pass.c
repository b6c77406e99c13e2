/*
 * load-pass.c -- the load pass: one read of a model's files on the loader
 * threads, staged for the persistent DB and upserted into the volatile DB
 * from the same buffers.
 */
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "hps/log.h"
#include "hps/modelfile.h"
#include "load-internal.h"

/*
 * THE LOAD PASS.  A table whose rows go to the persistent DB (the PDB does
 * not hold its files) or to the volatile DB from the files is read once:
 * each chunk of up to SST_BYTES of rows is read with large sequential
 * preads, sorted and written as one SST file of the table's stage
 * (hps_pdb_stage_rows(), ingested after every model by
 * coord_load_pdb_commit: STAGING, load-stage.c; one SST per table up to
 * that size: HugeCTR's ten chunks per table made overlapping SSTs that
 * RocksDB then compacted), and its first rows (up to initial_cache_rate of
 * the table) are upserted into the volatile DB from the same buffers.  Filling the volatile DB from
 * the files rather than reading the freshly ingested rows back from RocksDB gives the same values:
 * the ingestion keeps each key's last row, and so do file-order upserts (a
 * partial fill: coord_load_last_rows()); no update can arrive in between
 * (the update source starts after loading).  A table that the PDB held
 * already takes its values from the PDB afterwards (load.c fill_layer()):
 * they include the updates applied since the files were ingested.
 *
 * STEPS.  Each loader thread (LOAD_THREADS) takes the tables largest
 * first and works in bounded steps -- a READ_PIECE read, a VDB_BATCH-row
 * upsert -- yielding the CPU between them (sched_yield), so that lookups
 * served meanwhile get the CPU, and the volatile DB's partition locks,
 * between steps.  RocksDB's background threads ([persistent_db]
 * num_threads) have nothing to compact: each SST lands in an empty key
 * range of its column family's bottom level.  Memory: per thread one chunk
 * (at most SST_BYTES of keys and vectors) and the sort's 32 bytes per row.
 */
#define SST_BYTES  (256ULL << 20) /* rows per SST file, and per read chunk */
#define READ_PIECE (16ULL << 20)  /* bytes of rows per pread pair, between yields */
#define VDB_BATCH  16384          /* rows per volatile-DB upsert, between yields */

/* One table's work in the pass, and its outcome. */
typedef struct load_job {
    coord_t *c;
    coord_table_t *ct;
    const char *dir;
    const table_dups_t *dups; /* NULL: none known */
    uint64_t rows;            /* of the files */
    bool pdb;                 /* stage for the persistent DB */
    hps_pdb_stage_t *stage;   /* ... there (the job's until the pass ends) */
    uint64_t vdb_want;        /* upsert the first vdb_want rows into the volatile DB */
    int ex;                   /* 0, or the exit status of a failure (err says why) */
    char err[HPS_PATH_MSG_MAX];
    double read_s, pdb_s, vdb_s; /* seconds this job's thread spent in each step */
} load_job_t;

/* The jobs of a pass and the threads' shared cursor. */
typedef struct load_pass {
    load_job_t *jobs;
    size_t njobs;
    /* Relaxed atomics: failed is only a hint to stop early, done feeds the
     * progress line; the jobs' results are read after pthread_join. */
    _Atomic bool failed;
    _Atomic uint64_t done;
    uint64_t total;
} load_pass_t;

/* Read rows [row, row + n) into keys and vecs, READ_PIECE at a time. */
static hps_err_t read_rows(hps_modelfile_t *mf, uint32_t key_bytes, uint64_t row, size_t n,
                           int64_t *keys, float *vecs, char *err, size_t err_len)
{
    uint32_t dim = hps_modelfile_dim(mf);
    size_t piece = READ_PIECE / (8 + (size_t)dim * sizeof(float));
    for (size_t d = 0; d < n; d += piece) {
        size_t k = n - d < piece ? n - d : piece;
        hps_err_t rc = key_bytes == 8 ? hps_modelfile_read(mf, row + d, k, keys + d, vecs + d * dim,
                                                           err, err_len)
                                      : hps_modelfile_read_u32(mf, row + d, k, (uint32_t *)keys + d,
                                                               vecs + d * dim, err, err_len);
        if (rc < 0)
            return rc;
        sched_yield();
    }
    return 0;
}

/* -ECANCELED once a SIGTERM or SIGINT came (main.c, stop_signal; the reads
 * of the model files fail then too): the pass stops between its steps. */
static hps_err_t stopping(const load_job_t *j, char *err, size_t err_len)
{
    if (!atomic_load(j->c->stop))
        return 0;
    snprintf(err, err_len, "not finished: the coordinator is stopping");
    return -ECANCELED;
}

/* Upsert the chunk's rows below j->vdb_want into the volatile DB.  A
 * partial fill first gives each repeated key its last row
 * (coord_load_last_rows(): vecs is changed, so this runs after the SST was
 * written from it). */
static hps_err_t vdb_put(load_job_t *j, hps_modelfile_t *mf, uint64_t row, size_t n,
                         const int64_t *keys, float *vecs, char *err, size_t err_len)
{
    uint32_t kb = j->c->key_bytes, dim = j->ct->dim;
    size_t m = row >= j->vdb_want ? 0 : j->vdb_want - row < n ? (size_t)(j->vdb_want - row) : n;
    hps_err_t rc = 0;
    if (m > 0 && j->vdb_want < j->rows)
        rc = coord_load_last_rows(mf, j->dups, j->vdb_want, kb, m, keys, vecs, err, err_len);
    for (size_t d = 0; d < m && rc == 0 && !(rc = stopping(j, err, err_len)); d += VDB_BATCH) {
        size_t k = m - d < VDB_BATCH ? m - d : VDB_BATCH;
        rc = hps_shmdb_upsert(j->c->db, j->ct->vdb_id, k, (const char *)keys + d * kb,
                              vecs + d * dim, NULL);
        sched_yield();
    }
    return rc;
}

/* One chunk: read it, ingest it, upsert it; the step times go to j, the
 * message of a failure to j->err.  0; HPS_EXIT_PDB when the persistent DB
 * failed (a full disk, an I/O error: not the model's fault, so the service
 * manager may start the coordinator again); HPS_EXIT_MODEL otherwise (the
 * files, or a volatile DB too small for the model). */
static int load_chunk(load_job_t *j, hps_modelfile_t *mf, uint64_t row, size_t n, load_buf_t *b,
                      char *err, size_t err_len)
{
    int ex = HPS_EXIT_MODEL;
    double t0 = coord_load_now_s(), t1, t2;
    const char *step = "reading the model files";
    hps_err_t rc = read_rows(mf, j->c->key_bytes, row, n, b->keys, b->vecs, err, err_len);
    t1 = coord_load_now_s();
    if (rc == 0 && j->pdb && !(rc = stopping(j, err, err_len))) {
        step = "writing the persistent DB's SST files";
        rc = hps_pdb_stage_rows(j->stage, n, b->keys, j->c->key_bytes, b->vecs, j->ct->dim, err,
                                err_len);
        if (rc < 0)
            ex = HPS_EXIT_PDB;
    }
    t2 = coord_load_now_s();
    if (rc == 0) {
        step = "loading into the volatile DB";
        rc = vdb_put(j, mf, row, n, b->keys, b->vecs, err, err_len);
    }
    j->read_s += t1 - t0;
    j->pdb_s += t2 - t1;
    j->vdb_s += coord_load_now_s() - t2;
    if (rc == 0)
        return 0;
    snprintf(j->err, sizeof(j->err), "model %s table %s: %s: %s", j->ct->model->name, j->ct->name,
             step, err[0] ? err : hps_strerror(rc));
    return ex;
}

/* par_fn of the pass: job i of the load_pass_t ctx. */
static void run_job(void *ctx, size_t i, load_buf_t *b)
{
    load_pass_t *lp = ctx;
    load_job_t *j = &lp->jobs[i];
    char err[HPS_PATH_MSG_MAX] = "";
    uint32_t dim = j->ct->dim;
    hps_modelfile_t *mf = NULL;
    hps_err_t rc = hps_modelfile_open(j->dir, dim, &mf, err, sizeof(err));
    uint64_t chunk = SST_BYTES / (8 + (uint64_t)dim * sizeof(float));
    uint64_t end = j->pdb ? j->rows : j->vdb_want; /* rows to read */
    chunk = chunk < 1 ? 1 : chunk < end ? chunk : end;
    if (rc < 0)
        snprintf(j->err, sizeof(j->err), "%s", err);
    else if (end > 0 && !coord_load_buf_fit(b, (size_t)chunk, dim))
        snprintf(j->err, sizeof(j->err), "model %s table %s: out of memory for %llu rows",
                 j->ct->model->name, j->ct->name, (unsigned long long)chunk);
    j->ex = rc < 0 ? HPS_EXIT_MODEL : end > 0 && !b->keys ? HPS_EXIT_RUNTIME : 0;
    for (uint64_t row = 0, n; j->ex == 0 && row < end; row += n) {
        n = end - row < chunk ? end - row : chunk;
        if (atomic_load_explicit(&lp->failed, memory_order_relaxed))
            break;
        j->ex = load_chunk(j, mf, row, (size_t)n, b, err, sizeof(err));
        uint64_t done = atomic_fetch_add_explicit(&lp->done, n, memory_order_relaxed) + n;
        coord_load_progress(j->ct->model->name, done, lp->total);
    }
    if (j->ex)
        atomic_store_explicit(&lp->failed, true, memory_order_relaxed);
    hps_modelfile_close(mf);
}

static int job_cmp(const void *a, const void *b)
{
    const load_job_t *x = a, *y = b;
    uint64_t wx = (x->pdb ? x->rows : x->vdb_want) * x->ct->dim;
    uint64_t wy = (y->pdb ? y->rows : y->vdb_want) * y->ct->dim;
    return (wx < wy) - (wx > wy); /* largest first */
}

/* The pass over m's tables: read the files once into both DBs (the
 * persistent DB's rows staged: coord_load_pdb_commit ingests them after
 * every model). */
int coord_load_files(coord_t *c, const hps_conf_model_t *m, model_state_t *st, const uint64_t *rows,
                     bool ingest, bool vdb, const table_dups_t *dups, load_times_t *lt)
{
    load_pass_t lp = {.jobs = calloc(m->num_tables ? m->num_tables : 1, sizeof(load_job_t))};
    double rate = c->conf->volatile_db.initial_cache_rate, t0 = coord_load_now_s();
    int ex = lp.jobs ? 0 : HPS_EXIT_RUNTIME;
    for (uint32_t t = 0; ex == 0 && t < m->num_tables; t++) {
        bool pdb = ingest && !st->current[t], from_files = vdb && !st->held[t];
        uint64_t want = from_files ? (uint64_t)ceil((double)rows[t] * rate) : 0;
        if (!pdb && want == 0)
            continue;
        coord_table_t *ct = coord_load_table(c, m, t);
        hps_pdb_stage_t *stage = NULL;
        char err[HPS_PATH_MSG_MAX] = "";
        if (pdb && hps_pdb_stage_open(c->pdb, ct->name, &stage, err, sizeof(err)) < 0) {
            HPS_ERROR("model %s table %s: persistent DB: %s", m->name, ct->name, err);
            ex = HPS_EXIT_PDB;
            break;
        }
        lp.jobs[lp.njobs++] = (load_job_t){.c = c,
                                           .ct = ct,
                                           .dir = m->sparse_files[t],
                                           .dups = dups ? &dups[t] : NULL,
                                           .rows = rows[t],
                                           .pdb = pdb,
                                           .stage = stage,
                                           .vdb_want = want};
        lp.total += pdb ? rows[t] : want;
        lt->ingested += pdb;
        lt->vdb_tables += want > 0;
        lt->vdb_rows += want;
        lt->vdb_bytes += want * (8 + (uint64_t)ct->dim * sizeof(float));
        lt->bytes += (pdb ? rows[t] : want) * (8 + (uint64_t)ct->dim * sizeof(float));
    }
    if (ex == 0 && lp.njobs > 0) {
        qsort(lp.jobs, lp.njobs, sizeof(*lp.jobs), job_cmp);
        lt->threads = coord_load_par_run(run_job, &lp, lp.njobs);
    }
    for (size_t i = 0; ex == 0 && i < lp.njobs; i++) {
        lt->read_s += lp.jobs[i].read_s;
        lt->pdb_s += lp.jobs[i].pdb_s;
        lt->vdb_s += lp.jobs[i].vdb_s;
        if (lp.jobs[i].ex) {
            /* cut short by a SIGTERM (main.c, stop_signal): not an error */
            hps_log(atomic_load(c->stop) ? HPS_LOG_INFO : HPS_LOG_ERROR, "%s", lp.jobs[i].err);
            ex = lp.jobs[i].ex;
        }
    }
    for (size_t i = 0; lp.jobs && i < lp.njobs; i++) {
        load_job_t *j = &lp.jobs[i];
        if (!j->stage)
            continue;
        size_t t = j->ct->index;
        staged_t e = {.m = m,
                      .t = t,
                      .ct = j->ct,
                      .stage = j->stage,
                      .has_rec = st->has_rec[t],
                      .had_cf = st->had_cf[t],
                      .files = strdup(st->ident[t].files)};
        if (ex == 0 && e.files && coord_load_staged_add(&e) == 0)
            continue; /* committed or closed by coord_load_models() */
        if (ex == 0)
            ex = HPS_EXIT_RUNTIME;
        hps_pdb_stage_close(e.stage); /* a failed pass: the old rows stay */
        free(e.files);
    }
    free(lp.jobs);
    lt->pass_s = coord_load_now_s() - t0;
    return ex;
}
