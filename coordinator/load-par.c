/*
 * load-par.c -- the model loader's threads (load.c): a parallel loop over
 * the tables of a model on LOAD_THREADS threads, each with a chunk buffer
 * of its own (load-internal.h).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "load-internal.h"

/*
 * Loading runs on LOAD_THREADS threads, the caller and LOAD_THREADS - 1
 * more, whatever the machine: the content check and identities of the
 * tables (validate_all) and the pass that fills both DBs (load_files).
 * Each thread takes the next table; one thread's reads and fsyncs overlap
 * the other's sorting and copying.  They work in bounded steps and yield
 * the CPU between them (see THE LOAD PASS), so lookups served while a
 * model loads are not starved.
 */

#define HUGE_PAGE (2ULL << 20)

bool coord_load_buf_fit(load_buf_t *b, size_t rows, uint32_t dim)
{
    size_t key_bytes = (rows * sizeof(int64_t) + 63) & ~(size_t)63;
    size_t need = key_bytes + rows * dim * sizeof(float);
    if (need > b->cap) {
        free(b->mem);
        b->cap = (need + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
        b->mem = aligned_alloc(HUGE_PAGE, b->cap);
        b->cap = b->mem ? b->cap : 0;
        if (b->mem)
            madvise(b->mem, b->cap, MADV_HUGEPAGE); /* a hint: else plain pages */
    }
    b->keys = b->mem;
    b->vecs = b->mem ? (float *)((char *)b->mem + key_bytes) : NULL;
    return b->mem != NULL;
}

/* A parallel loop: fn(ctx, i, the thread's buffers) for i in [0, n). */
typedef struct par {
    par_fn fn;
    void *ctx;
    size_t n;
    /* Relaxed: a ticket counter, each i to one thread; what fn writes is
     * read after pthread_join, which orders it. */
    _Atomic size_t next;
} par_t;

static void *par_thread(void *arg)
{
    par_t *p = arg;
    load_buf_t b = {0};
    for (size_t i; (i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed)) < p->n;)
        p->fn(p->ctx, i, &b);
    free(b.mem);
    return NULL;
}

/* Run the loop on min(n, LOAD_THREADS) threads (fewer if a thread cannot
 * start: the caller is always one); returns how many ran it. */
size_t coord_load_par_run(par_fn fn, void *ctx, size_t n)
{
    par_t p = {.fn = fn, .ctx = ctx, .n = n};
    pthread_t th[LOAD_THREADS - 1];
    size_t started = 0;
    for (size_t i = 1; i < LOAD_THREADS && i < n; i++)
        if (pthread_create(&th[started], NULL, par_thread, &p) == 0)
            started++;
    par_thread(&p);
    for (size_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    return started + 1;
}
