/*
 * pool.c -- a small fork-join thread pool for batch lookups and upserts.
 *
 * hps__shmdb_pool_run() publishes a job (fn, arg, n tasks) by bumping a
 * generation counter; workers and the caller take task indices from an
 * atomic counter until none is left.  Workers spin briefly (with pause) on
 * the generation before sleeping on a condition variable, because batches
 * arrive back to back and a wake-up costs more than a 1024-key batch takes.
 * A caller that finds the pool busy with another thread's job runs its own
 * job inline instead of waiting.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"

#define SPIN_ROUNDS 2000

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

struct hps__shmdb_pool {
    pid_t pid; /* the process whose threads these are; immutable */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned nworkers;
    pthread_t *threads;
    bool stop;
    /* The current job, written before gen is bumped. */
    void (*fn)(void *, unsigned);
    void *arg;
    _Atomic uint64_t gen; /* bumped per job */
    /* gen << 32 | n << 16 | next task index: a claim is a CAS of the whole
     * word, and the job's task count travels with it, so a thread still
     * looking at a finished job can never take (or count) a task of the
     * next one. */
    _Atomic uint64_t next;
    _Atomic unsigned done;  /* tasks finished in the current job */
    pthread_mutex_t run_mu; /* one job at a time per pool */
};

#define WORD(gen, n, i) ((((gen)&0xffffffffULL) << 32) | ((uint64_t)(n) << 16) | (uint64_t)(i))

static void take_tasks(struct hps__shmdb_pool *p, uint64_t gen)
{
    for (;;) {
        uint64_t v = atomic_load_explicit(&p->next, memory_order_acquire);
        unsigned n = (unsigned)(v >> 16) & 0xffff, i = (unsigned)v & 0xffff;
        if ((v >> 32) != (gen & 0xffffffffULL) || i >= n)
            return;
        /* Acquire: the job's fn and arg are those of gen (they change only
         * after every task of gen, this one included, is done). */
        if (!atomic_compare_exchange_weak_explicit(&p->next, &v, v + 1, memory_order_acquire,
                                                   memory_order_relaxed))
            continue;
        p->fn(p->arg, i);
        /* Release: the task's writes are visible to the joiner. */
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
    }
}

static void *worker(void *arg)
{
    struct hps__shmdb_pool *p = arg;
    uint64_t seen = 0;
    for (;;) {
        uint64_t g;
        int spins = 0;
        /* Acquire: pairs with the release bump in run; the job is visible. */
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
               spins++ < SPIN_ROUNDS)
            cpu_relax();
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            while (!p->stop && atomic_load_explicit(&p->gen, memory_order_acquire) == seen)
                pthread_cond_wait(&p->cv, &p->mu);
            bool stop = p->stop;
            pthread_mutex_unlock(&p->mu);
            if (stop)
                return NULL;
            g = atomic_load_explicit(&p->gen, memory_order_acquire);
        }
        seen = g;
        take_tasks(p, g);
    }
}

hps_err_t hps__shmdb_pool_create(unsigned nthreads, hps__shmdb_pool_t **ret)
{
    struct hps__shmdb_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->pid = getpid();
    pthread_mutex_init(&p->mu, NULL);
    pthread_mutex_init(&p->run_mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threads = calloc(nthreads, sizeof(pthread_t));
    if (!p->threads) {
        hps__shmdb_pool_destroy(p);
        return -ENOMEM;
    }
    for (unsigned i = 0; i + 1 < nthreads; i++) {
        int rc = pthread_create(&p->threads[i], NULL, worker, p);
        if (rc != 0) {
            hps__shmdb_pool_destroy(p);
            return -rc;
        }
        p->nworkers++;
    }
    *ret = p;
    return 0;
}

void hps__shmdb_pool_destroy(hps__shmdb_pool_t *p)
{
    if (!p)
        return;
    if (p->pid != getpid()) {
        /* A child after fork(): the workers are its parent's (none runs
         * here), and the condition variable still counts them as waiters,
         * so destroying it would wait for ever.  Only the memory is ours. */
        free(p->threads);
        free(p);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->nworkers; i++)
        pthread_join(p->threads[i], NULL);
    free(p->threads);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->run_mu);
    free(p);
}

void hps__shmdb_pool_run(hps__shmdb_pool_t *p, unsigned n, void (*fn)(void *arg, unsigned i),
                         void *arg)
{
    if (n > 0xffff) /* callers use at most 256 tasks */
        n = 0xffff;
    /* Another thread of this process is using the pool (several HTTP
     * threads look up at once): its threads are busy anyway, so run the
     * job here rather than queue behind it. */
    if (pthread_mutex_trylock(&p->run_mu) != 0) {
        for (unsigned i = 0; i < n; i++)
            fn(arg, i);
        return;
    }
    uint64_t gen = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    /* Release: fn and arg are visible to whoever claims a task of gen. */
    atomic_store_explicit(&p->next, WORD(gen, n, 0), memory_order_release);
    pthread_mutex_lock(&p->mu);
    /* Release: the job fields above are visible to a worker that sees gen. */
    atomic_store_explicit(&p->gen, gen, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    take_tasks(p, gen);
    /* Acquire: the tasks' writes are visible once all are counted done. */
    while (atomic_load_explicit(&p->done, memory_order_acquire) < n)
        cpu_relax();
    pthread_mutex_unlock(&p->run_mu);
}
