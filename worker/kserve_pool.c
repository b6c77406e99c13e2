/*
 * kserve_pool.c -- the lookup pool: threads that run inference lookups off
 * libmicrohttpd's event loops, so that a request waiting for the
 * coordinator (or a GPU) never holds up the other requests of its loop.
 *
 * Jobs are intrusive (struct hps__kserve_job inside the caller's state), so a
 * submit never allocates and never fails.  The queue is unbounded in
 * principle but bounded in fact: each job is a suspended connection, and
 * connections are capped by max_connections.
 */
#include <errno.h>
#include <stdlib.h>

#include "worker/kserve_http.h"

struct hps__kserve_pool {
    pthread_mutex_t mu; /* guards head, tail, stopping */
    pthread_cond_t cv;  /* a job queued, or stopping */
    struct hps__kserve_job *head, *tail;
    bool stopping;
    unsigned nthreads;
    pthread_t *threads;
};

static void *pool_main(void *arg)
{
    struct hps__kserve_pool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        struct hps__kserve_job *j = p->head;
        if (!j) {
            if (p->stopping)
                break;
            pthread_cond_wait(&p->cv, &p->mu);
            continue;
        }
        p->head = j->next;
        if (!p->head)
            p->tail = NULL;
        pthread_mutex_unlock(&p->mu);
        j->run(j);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

hps_err_t hps__kserve_pool_start(unsigned threads, struct hps__kserve_pool **ret)
{
    struct hps__kserve_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->threads = calloc(threads ? threads : 1, sizeof(pthread_t));
    if (!p->threads) {
        free(p);
        return -ENOMEM;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    for (; p->nthreads < threads; p->nthreads++)
        if (pthread_create(&p->threads[p->nthreads], NULL, pool_main, p) != 0) {
            hps__kserve_pool_stop(p);
            return HPS_EIO;
        }
    *ret = p;
    return 0;
}

void hps__kserve_pool_submit(struct hps__kserve_pool *p, struct hps__kserve_job *j)
{
    j->next = NULL;
    pthread_mutex_lock(&p->mu);
    if (p->tail)
        p->tail->next = j;
    else
        p->head = j;
    p->tail = j;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void hps__kserve_pool_stop(struct hps__kserve_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->threads);
    free(p);
}
