/*
 * write.c -- write the tables of a model: key and emb_vector files, in
 * parallel, then move them into place.
 *
 * Work is cut into chunks of about 4 MiB of emb_vector (at least one row);
 * the chunks of all tables are numbered one after another and threads claim
 * them from an atomic counter, so big and small tables mix and every thread
 * stays busy.  A chunk is rows [j0, j1) of one table: row j holds key index
 * i = hps_gen_shuffle_at(j), key = hps_gen_key_w(t, i), and its vector.  A
 * thread fills its buffers and pwrite()s them at the chunk's offsets.
 *
 * Safety: files are written into OUT/.<table>.tmp-PID, preallocated (a
 * full disk fails at once, before any row is generated), fsync'd, and only
 * then renamed to OUT/<table>.  An existing table directory (allowed only
 * with --force) is first renamed aside to OUT/.<table>.old-PID and removed
 * after the new one is in place.  On failure every tmp directory is removed.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hps-gen.h"

#define CHUNK_BYTES (4u << 20)

/* Shared state of one gen_write_tables() call. */
typedef struct wjob {
    gen_model_t *m;
    int *fds;                /* (2 * T): key, emb_vector of each table */
    hps_gen_shuffle_t *shuf; /* (T) */
    uint64_t *first_chunk;   /* (T + 1): first global chunk of each table */
    uint64_t *chunk_rows;    /* (T) */
    size_t buf_keys;         /* most rows of any chunk */
    size_t buf_floats;       /* most floats of any chunk */
    atomic_uint_fast64_t next_chunk;
    atomic_uint_fast64_t bytes_done;
    atomic_uint running;
    atomic_int err;      /* first error (negative errno), 0 = none */
    atomic_int err_file; /* index into fds of that error */
} wjob_t;

static uint64_t table_bytes(const gen_table_t *t)
{
    return t->rows * 8 + t->rows * t->dim * 4ULL;
}

static const char *file_name(int which)
{
    return which == 0 ? "key" : "emb_vector";
}

static void set_error(wjob_t *j, int rc, int file)
{
    int none = 0;

    /* The first error wins (CAS); its file index is read only after every
     * thread has been joined, so the two stores need no ordering. */
    if (atomic_compare_exchange_strong(&j->err, &none, rc))
        atomic_store(&j->err_file, file);
}

/* Table of global chunk c (binary search over first_chunk). */
static size_t chunk_table(const wjob_t *j, uint64_t c)
{
    size_t lo = 0, hi = j->m->num_tables - 1;

    while (lo < hi) {
        size_t mid = (lo + hi + 1) / 2;
        if (j->first_chunk[mid] <= c)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Generate and write one chunk. */
static void write_chunk(wjob_t *j, uint64_t c, int64_t *keys, float *vecs)
{
    size_t t = chunk_table(j, c);
    const gen_table_t *tb = &j->m->tables[t];
    uint64_t j0 = (c - j->first_chunk[t]) * j->chunk_rows[t];
    uint64_t j1 = j0 + j->chunk_rows[t] < tb->rows ? j0 + j->chunk_rows[t] : tb->rows;
    size_t n = (size_t)(j1 - j0);
    int rc;

    for (size_t r = 0; r < n; r++) {
        uint64_t i = hps_gen_shuffle_at(&j->shuf[t], j0 + r);
        keys[r] = hps_gen_key_w((uint32_t)t, i, j->m->key_bytes);
        hps_gen_vector_v((uint32_t)t, keys[r], tb->dim, j->m->version, vecs + r * tb->dim);
    }
    rc = gen_pwrite_all(j->fds[2 * t], keys, n * 8, j0 * 8);
    if (rc != 0) {
        set_error(j, rc, (int)(2 * t));
        return;
    }
    rc = gen_pwrite_all(j->fds[2 * t + 1], vecs, n * tb->dim * 4, j0 * tb->dim * 4);
    if (rc != 0)
        set_error(j, rc, (int)(2 * t + 1));
    atomic_fetch_add_explicit(&j->bytes_done, n * 8 + n * tb->dim * 4, memory_order_relaxed);
}

static void *worker(void *arg)
{
    wjob_t *j = arg;
    int64_t *keys = malloc(j->buf_keys * sizeof *keys);
    float *vecs = malloc(j->buf_floats * sizeof *vecs);
    uint64_t total = j->first_chunk[j->m->num_tables];

    if (keys == NULL || vecs == NULL)
        set_error(j, -ENOMEM, -1);
    while (atomic_load_explicit(&j->err, memory_order_relaxed) == 0) {
        uint64_t c = atomic_fetch_add_explicit(&j->next_chunk, 1, memory_order_relaxed);
        if (c >= total)
            break;
        write_chunk(j, c, keys, vecs);
    }
    free(keys);
    free(vecs);
    atomic_fetch_sub(&j->running, 1);
    return NULL;
}

/* Plan the chunks of every table. */
static void plan_chunks(wjob_t *j)
{
    const gen_model_t *m = j->m;
    uint64_t c = 0;

    for (size_t t = 0; t < m->num_tables; t++) {
        const gen_table_t *tb = &m->tables[t];
        uint64_t per = CHUNK_BYTES / (tb->dim * 4ULL + 8);
        per = per < 1 ? 1 : per > tb->rows ? tb->rows : per;
        j->chunk_rows[t] = per;
        j->first_chunk[t] = c;
        c += (tb->rows + per - 1) / per;
        j->buf_keys = per > j->buf_keys ? per : j->buf_keys;
        j->buf_floats = per * tb->dim > j->buf_floats ? per * tb->dim : j->buf_floats;
        hps_gen_shuffle_init(&j->shuf[t], m->seed, (uint32_t)t, tb->rows);
    }
    j->first_chunk[m->num_tables] = c;
}

static char *file_path(const gen_model_t *m, int file)
{
    return gen_strdupf("%s/%s", m->tables[file / 2].tmp, file_name(file % 2));
}

/* Create one table's tmp directory and its two files, preallocated. */
static int open_table(wjob_t *j, size_t t)
{
    const gen_table_t *tb = &j->m->tables[t];
    uint64_t size[2] = {tb->rows * 8, tb->rows * tb->dim * 4ULL};
    int rc;

    gen_rm_rf(tb->tmp); /* a leftover of a crashed run with our pid */
    if (mkdir(tb->tmp, 0755) != 0)
        return gen_fail(-errno, "cannot create %s", tb->tmp);
    for (int f = 0; f < 2; f++) {
        char *path = file_path(j->m, (int)(2 * t) + f);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        rc = fd < 0 ? -errno : 0;
        if (fd >= 0 && (rc = posix_fallocate(fd, 0, (off_t)size[f])) == EOPNOTSUPP)
            rc = ftruncate(fd, (off_t)size[f]) != 0 ? errno : 0;
        j->fds[2 * t + f] = fd;
        if (rc != 0) {
            gen_fail(rc > 0 ? -rc : rc, "cannot create %s (%llu bytes)", path,
                     (unsigned long long)size[f]);
            free(path);
            return GEN_FAIL;
        }
        free(path);
    }
    return GEN_OK;
}

/* fsync and close every file; remove the tmp dirs if failed (or rc != OK). */
static int close_tables(wjob_t *j, int rc)
{
    const gen_model_t *m = j->m;

    for (size_t f = 0; f < 2 * m->num_tables; f++) {
        if (j->fds[f] < 0)
            continue;
        if (rc == GEN_OK && fsync(j->fds[f]) != 0) {
            char *path = file_path(m, (int)f);
            rc = gen_fail(-errno, "cannot sync %s", path);
            free(path);
        }
        close(j->fds[f]);
        j->fds[f] = -1;
    }
    for (size_t t = 0; t < m->num_tables; t++) {
        if (rc == GEN_OK)
            gen_fsync_path(m->tables[t].tmp);
        else
            gen_rm_rf(m->tables[t].tmp);
    }
    return rc;
}

static void print_progress(const wjob_t *j, uint64_t total, double t0, bool last)
{
    uint64_t done = atomic_load_explicit(&j->bytes_done, memory_order_relaxed);
    double dt = gen_now() - t0, rate = dt > 0 ? (double)done / dt : 0.0;
    double eta = rate > 0 ? (double)(total - done) / rate : 0.0;

    fprintf(stderr, "\rhps-gen: %5.1f%%  %.1f / %.1f MB  %.1f MB/s  ETA %.0f s   ",
            total ? 100.0 * (double)done / (double)total : 100.0, (double)done / 1e6,
            (double)total / 1e6, rate / 1e6, eta);
    if (last)
        fputs("\n", stderr);
}

/* Run the threads; print progress on a terminal for models >= 64 MiB. */
static int run_threads(wjob_t *j, uint64_t total, double t0)
{
    unsigned n = j->m->threads;
    pthread_t *th = gen_xmalloc(n * sizeof *th);
    bool progress = !j->m->quiet && isatty(STDERR_FILENO) && total >= (64u << 20);
    unsigned started = 0;
    int rc;

    atomic_store(&j->running, n);
    for (; started < n; started++) {
        if ((rc = pthread_create(&th[started], NULL, worker, j)) != 0) {
            set_error(j, -rc, -1);
            atomic_fetch_sub(&j->running, n - started);
            break;
        }
    }
    while (progress && atomic_load(&j->running) > 0) {
        struct timespec ts = {0, 250 * 1000 * 1000};
        nanosleep(&ts, NULL);
        print_progress(j, total, t0, false);
    }
    for (unsigned i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    if (progress)
        print_progress(j, total, t0, true);
    free(th);
    return atomic_load(&j->err);
}

/* Move one finished table into place, replacing what --force allowed. */
static int install_table(const gen_model_t *m, const gen_table_t *tb)
{
    char *old = gen_strdupf("%s/.%s.old-%ld", m->out_dir, tb->name, (long)getpid());
    bool exists, nonempty;
    int rc = gen_path_state(tb->dir, &exists, &nonempty);

    if (rc == 0 && nonempty && rename(tb->dir, old) != 0)
        rc = -errno;
    else if (rc == 0 && exists && !nonempty && rmdir(tb->dir) != 0)
        rc = -errno;
    if (rc == 0 && rename(tb->tmp, tb->dir) != 0)
        rc = -errno;
    if (rc != 0) {
        free(old);
        return gen_fail(rc, "cannot move %s to %s", tb->tmp, tb->dir);
    }
    if (nonempty && (rc = gen_rm_rf(old)) != 0)
        gen_fail(rc, "warning: cannot remove the replaced table %s", old);
    free(old);
    return GEN_OK;
}

static int install_tables(const gen_model_t *m)
{
    int rc = GEN_OK;

    for (size_t t = 0; t < m->num_tables && rc == GEN_OK; t++)
        rc = install_table(m, &m->tables[t]);
    for (size_t t = 0; t < m->num_tables && rc != GEN_OK; t++)
        gen_rm_rf(m->tables[t].tmp); /* the ones not moved yet */
    if (rc == GEN_OK && (rc = gen_fsync_path(m->out_dir)) != 0)
        rc = gen_fail(rc, "cannot sync %s", m->out_dir);
    return rc;
}

static int write_all(wjob_t *j)
{
    gen_model_t *m = j->m;
    uint64_t total = 0;
    double t0 = gen_now();
    int rc = GEN_OK, err;

    for (size_t t = 0; t < m->num_tables; t++)
        total += table_bytes(&m->tables[t]);
    for (size_t t = 0; t < m->num_tables && rc == GEN_OK; t++)
        rc = open_table(j, t);
    if (rc == GEN_OK && (err = run_threads(j, total, t0)) != 0) {
        int f = atomic_load(&j->err_file);
        char *path = f >= 0 ? file_path(m, f) : gen_strdupf("%s", m->out_dir);
        rc = gen_fail(err, "cannot write %s", path);
        free(path);
    }
    rc = close_tables(j, rc);
    if (rc == GEN_OK)
        rc = install_tables(m);
    m->bytes = total;
    m->seconds = gen_now() - t0;
    return rc;
}

int gen_write_tables(gen_model_t *m)
{
    size_t nt = m->num_tables;
    wjob_t j = {.m = m};
    int rc;

    j.fds = gen_xmalloc(2 * nt * sizeof *j.fds);
    j.shuf = gen_xmalloc(nt * sizeof *j.shuf);
    j.first_chunk = gen_xmalloc((nt + 1) * sizeof *j.first_chunk);
    j.chunk_rows = gen_xmalloc(nt * sizeof *j.chunk_rows);
    for (size_t f = 0; f < 2 * nt; f++)
        j.fds[f] = -1;
    atomic_init(&j.next_chunk, 0);
    atomic_init(&j.bytes_done, 0);
    atomic_init(&j.err, 0);
    atomic_init(&j.err_file, -1);
    plan_chunks(&j);
    rc = write_all(&j);
    free(j.fds);
    free(j.shuf);
    free(j.first_chunk);
    free(j.chunk_rows);
    return rc;
}
