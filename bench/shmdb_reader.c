/*
 * shmdb_reader.c -- the shmdb side of bench-shmdb: this process creates a
 * segment per table (bshm_shm_load) and a forked child, the reader, attaches
 * it and looks up every key, checks the sample batches and times the shmdb
 * lookups, on a command from the pipe (bshm_reader_run); its reply carries
 * the results back.  So every shmdb number is a cross-process read.
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/benchutil.h"
#include "bench/shmdb.h"
#include "hps/dtype.h"
#include "hps/hps.h"
#include "hps/shmdb.h"

/* ------------------------------------------------------------------------ */
/* shmdb: writer (this process) and reader (forked child)                    */
/* ------------------------------------------------------------------------ */

typedef struct reader_cmd {
    char segment[HPS_SHMDB_SEGMENT_NAME_MAX + 1];
    char table[HPS_SHMDB_NAME_MAX + 1];
    unsigned dim;
    hps_dtype_t dtype; /* the table's storage type */
    bool quit;
} reader_cmd_t;

typedef struct shm_ctx {
    hps_shmdb_t *db;
    uint32_t id;
    size_t rb; /* stored row bytes (hps_table_info_t.row_bytes) */
} shm_ctx_t;

static int shm_batch(void *p, unsigned tid, size_t b, void *out, uint8_t *found)
{
    (void)tid;
    const shm_ctx_t *sc = p;
    size_t hits = 0;
    hps_err_t e = hps_shmdb_lookup(sc->db, sc->id, bshm_wl.batch, &bshm_wl.qkeys[b * bshm_wl.batch],
                                   out, found, &hits);
    return e < 0 ? e : (int)hits;
}

/** The batch as stored rows: hps_shmdb_lookup_stored reads one key per call. */
static int shm_batch_stored(void *p, unsigned tid, size_t b, void *out, uint8_t *found)
{
    (void)tid;
    const shm_ctx_t *sc = p;
    const int64_t *keys = &bshm_wl.qkeys[b * bshm_wl.batch];
    int hits = 0;
    for (unsigned q = 0; q < bshm_wl.batch; q++) {
        bool f = false;
        hps_err_t e = hps_shmdb_lookup_stored(sc->db, sc->id, (uint64_t)keys[q],
                                              (uint8_t *)out + q * sc->rb, sc->rb, &f);
        if (e < 0)
            return e;
        found[q] = f;
        hits += f;
    }
    return hits;
}

/* false when the other end is gone (SIGPIPE is ignored: EPIPE). */
static bool write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static bool read_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

/** Look up every loaded key once, in order: warms the mapping, checks exactness. */
static void reader_full_pass(shm_ctx_t *sc, unsigned dim, hps_dtype_t dtype, reader_reply_t *rp)
{
    size_t chunk = bshm_wl.batch;
    form_t f = {dtype, false};
    float *out = bench_xmalloc(chunk * dim * sizeof(float));
    float *exp = bench_xmalloc(chunk * dim * sizeof(float));
    void *scratch = bench_xmalloc(2 * bshm_out_row_max(dim));
    uint8_t *found = bench_xmalloc(chunk);
    check_result_t cr = {0};
    for (uint64_t i = 0; i < bshm_wl.rows; i += chunk) {
        unsigned n = (unsigned)(bshm_wl.rows - i < chunk ? bshm_wl.rows - i : chunk);
        memset(found, 0, n);
        hps_err_t e = hps_shmdb_lookup(sc->db, sc->id, n, &bshm_wl.keys[i], out, found, NULL);
        if (e < 0) {
            rp->err = e;
            snprintf(rp->what, sizeof(rp->what), "hps_shmdb_lookup");
            break;
        }
        bshm_check_batch(&bshm_wl.keys[i], n, dim, f, out, found, exp, scratch, &cr);
    }
    rp->full_keys += cr.keys;
    rp->full_missing += cr.missing;
    rp->full_wrong += cr.wrong;
    free(out);
    free(exp);
    free(scratch);
    free(found);
}

static hps_err_t reader_open(const reader_cmd_t *cmd, unsigned nt, shm_ctx_t *sc,
                             reader_reply_t *rp)
{
    hps_shmdb_proc_opts_t po = {.num_threads = nt, .role = HPS_ROLE_WORKER, .device = -1};
    hps_err_t e = hps_shmdb_attach(cmd->segment, &po, &sc->db);
    if (e < 0) {
        snprintf(rp->what, sizeof(rp->what), "hps_shmdb_attach");
        return e;
    }
    e = hps_shmdb_table_find(sc->db, MODEL_NAME, cmd->table, &sc->id);
    if (e < 0) {
        snprintf(rp->what, sizeof(rp->what), "hps_shmdb_table_find");
        hps_shmdb_detach(sc->db);
        return e;
    }
    hps_table_info_t ti;
    e = hps_shmdb_table_info(sc->db, sc->id, &ti);
    if (e < 0) {
        snprintf(rp->what, sizeof(rp->what), "hps_shmdb_table_info");
        hps_shmdb_detach(sc->db);
        return e;
    }
    sc->rb = ti.row_bytes;
    return 0;
}

/** One attach with num_threads = 1: check, then t clients for each t (and
 * for a compact type the same as stored rows). */
static void reader_clients(const reader_cmd_t *cmd, reader_reply_t *rp)
{
    shm_ctx_t sc;
    if ((rp->err = reader_open(cmd, 1, &sc, rp)) < 0)
        return;
    bool compact = cmd->dtype != HPS_DTYPE_FP32;
    hps_shmdb_size(sc.db, sc.id, &rp->rows_seen);
    reader_full_pass(&sc, cmd->dim, cmd->dtype, rp);
    rp->sample = bshm_check_sample(shm_batch, &sc, cmd->dim, (form_t){cmd->dtype, false});
    if (compact)
        rp->sample_stored =
            bshm_check_sample(shm_batch_stored, &sc, cmd->dim, (form_t){cmd->dtype, true});
    for (unsigned i = 0; i < bshm_opt.nthreads && rp->err == 0; i++) {
        rp->clients[i] = bshm_measure(shm_batch, &sc, cmd->dim, bshm_opt.threads[i], true);
        if (compact)
            rp->stored[i] =
                bshm_measure(shm_batch_stored, &sc, cmd->dim, bshm_opt.threads[i], true);
    }
    hps_shmdb_detach(sc.db);
}

/** One attach per t > 1 with num_threads = t: one client splits each batch. */
static void reader_split(const reader_cmd_t *cmd, reader_reply_t *rp)
{
    for (unsigned i = 0; i < bshm_opt.nthreads && rp->err == 0; i++) {
        if (bshm_opt.threads[i] < 2)
            continue;
        shm_ctx_t sc;
        if ((rp->err = reader_open(cmd, bshm_opt.threads[i], &sc, rp)) < 0)
            return;
        reader_full_pass(&sc, cmd->dim, cmd->dtype, rp);
        rp->split[i] = bshm_measure(shm_batch, &sc, cmd->dim, 1, true);
        hps_shmdb_detach(sc.db);
    }
}

static void reader_main(int cmd_fd, int reply_fd)
{
    reader_cmd_t cmd;
    while (read_all(cmd_fd, &cmd, sizeof(cmd)) && !cmd.quit) {
        reader_reply_t rp;
        memset(&rp, 0, sizeof(rp));
        rp.pid = getpid();
        reader_clients(&cmd, &rp);
        if (rp.err == 0 && cmd.dtype == HPS_DTYPE_FP32)
            reader_split(&cmd, &rp);
        if (!write_all(reply_fd, &rp, sizeof(rp)))
            _exit(3);
    }
    _exit(0);
}

/** Fork the reader while this process is still single-threaded. */
reader_t bshm_reader_start(void)
{
    int c[2], r[2];
    if (pipe(c) != 0 || pipe(r) != 0)
        bench_die("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
        bench_die("fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        close(c[1]);
        close(r[0]);
        reader_main(c[0], r[1]);
    }
    close(c[0]);
    close(r[1]);
    bshm_reader_pid = pid;
    return (reader_t){pid, c[1], r[0]};
}

void bshm_reader_stop(reader_t *rd)
{
    reader_cmd_t cmd;
    memset(&cmd, 0, sizeof(cmd));
    cmd.quit = true;
    (void)write_all(rd->cmd_fd, &cmd, sizeof(cmd)); /* a dead reader has quit */
    close(rd->cmd_fd);
    close(rd->reply_fd);
    waitpid(rd->pid, NULL, 0);
    bshm_reader_pid = 0;
}

static void shm_check(hps_err_t e, const char *what)
{
    if (e < 0)
        bench_die("%s: %s (%s)", what, hps_strerror(e), hps_err_name(e));
}

static hps_shmdb_t *shm_create(unsigned dim, shm_load_t *sl)
{
    /* fp32 keeps the names of the runs before --types. */
    const char *sfx = sl->dtype == HPS_DTYPE_FP32 ? "" : hps_dtype_name(sl->dtype);
    snprintf(sl->segment, sizeof(sl->segment), "bench-%d-d%u%s", (int)getpid(), dim, sfx);
    snprintf(sl->table, sizeof(sl->table), "emb_d%u%s%s", dim, *sfx ? "_" : "", sfx);
    uint64_t raw = bshm_wl.rows * (8 + 4ULL * dim);
    uint64_t size = 4ULL << 30;
    if (2 * raw + (64ULL << 20) > size)
        size = 2 * raw + (64ULL << 20);
    hps_shmdb_opts_t so = {.size_bytes = size, .allocation_rate = 256ULL << 20, .mode = 0600};
    hps_shmdb_proc_opts_t po = {.num_threads = 1, .role = HPS_ROLE_COORDINATOR, .device = -1};
    hps_shmdb_t *db = NULL;
    snprintf(bshm_seg_path, sizeof(bshm_seg_path), "/dev/shm/hps.%s", sl->segment);
    shm_check(hps_shmdb_create(sl->segment, &so, &po, &db), "hps_shmdb_create");
    return db;
}

static uint32_t shm_table(hps_shmdb_t *db, unsigned dim, const shm_load_t *sl)
{
    hps_table_spec_t spec = {
        .model = MODEL_NAME,
        .table = sl->table,
        .dim = dim,
        .key_bytes = 8,
        .default_value = 0.0f,
        .num_partitions = bshm_opt.partitions,
        .overflow_margin = UINT64_MAX,
        .overflow_policy = HPS_EVICT_RANDOM,
        .overflow_resolution_target = 0.8,
        .expected_rows = bshm_wl.rows,
        .storage_type = sl->dtype,
    };
    uint32_t id = 0;
    shm_check(hps_shmdb_table_create(db, &spec, &id), "hps_shmdb_table_create");
    return id;
}

/** Create the segment and a table of sl->dtype, upsert every row (fp32 vectors,
 * encoded by the upsert); the segment stays in /dev/shm. */
hps_shmdb_t *bshm_shm_load(unsigned dim, const float *flat, shm_load_t *sl)
{
    hps_shmdb_t *db = shm_create(dim, sl);
    uint32_t id = shm_table(db, dim, sl);
    double t0 = bench_now_s();
    for (uint64_t i = 0; i < bshm_wl.rows; i += LOAD_CHUNK) {
        size_t n = bshm_wl.rows - i < LOAD_CHUNK ? bshm_wl.rows - i : LOAD_CHUNK;
        size_t ins = 0;
        shm_check(hps_shmdb_upsert(db, id, n, &bshm_wl.keys[i], flat + i * dim, &ins),
                  "hps_shmdb_upsert");
        sl->inserted += ins;
    }
    sl->load_s = bench_now_s() - t0;
    shm_check(hps_shmdb_table_info(db, id, &sl->ti), "hps_shmdb_table_info");
    shm_check(hps_shmdb_segment_info(db, &sl->si), "hps_shmdb_segment_info");
    sl->bytes_per_slot = hps_shmdb_bytes_per_slot_of(dim, HPS_EVICT_RANDOM, sl->dtype);
    return db;
}

void bshm_shm_drop(hps_shmdb_t *db, const shm_load_t *sl)
{
    hps_shmdb_detach(db);
    hps_err_t e = hps_shmdb_unlink(sl->segment);
    if (e < 0)
        fprintf(stderr, "bench-shmdb: hps_shmdb_unlink(%s): %s\n", sl->segment, hps_strerror(e));
    bshm_seg_path[0] = 0;
}

reader_reply_t bshm_reader_run(reader_t *rd, unsigned dim, const shm_load_t *sl)
{
    reader_cmd_t cmd;
    memset(&cmd, 0, sizeof(cmd));
    snprintf(cmd.segment, sizeof(cmd.segment), "%s", sl->segment);
    snprintf(cmd.table, sizeof(cmd.table), "%s", sl->table);
    cmd.dim = dim;
    cmd.dtype = sl->dtype;
    reader_reply_t rp;
    if (!write_all(rd->cmd_fd, &cmd, sizeof(cmd)) || !read_all(rd->reply_fd, &rp, sizeof(rp)))
        bench_die("the reader process (pid %d) died", (int)rd->pid);
    if (rp.err < 0)
        bench_die("reader: %s: %s (%s)", rp.what, hps_strerror(rp.err), hps_err_name(rp.err));
    return rp;
}
