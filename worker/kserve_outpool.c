/*
 * kserve_outpool.c -- reuse of the OUTPUT0 buffers of large responses.
 *
 * A response of many megabytes (8192 samples x 26 tables x dim 128 is
 * 109 MB) gets a fresh mmap from malloc each time, and first-touching its
 * pages costs more than the lookup itself: measured on a 16-core VM, 80 ms
 * of page faults for a 109 MB buffer against 2.6 ms for the GPU lookup and
 * its copy.  Buffers of at least HPS__OUTPOOL_MIN bytes are therefore kept
 * when freed (at most HPS__OUTPOOL_SLOTS of them, HPS__OUTPOOL_MAX bytes
 * together) and handed to the next request that fits.  Each buffer carries
 * its capacity in a 64-byte header before the floats.
 */
#include <stdlib.h>
#include <string.h>

#include "kserve_internal.h"

#define HDR 64

static size_t cap_of(const float *out)
{
    size_t cap;
    memcpy(&cap, (const char *)out - HDR, sizeof(cap));
    return cap;
}

void hps__outpool_init(struct hps__outpool *p)
{
    memset(p, 0, sizeof(*p));
    pthread_mutex_init(&p->mu, NULL);
}

void hps__outpool_fini(struct hps__outpool *p)
{
    for (int i = 0; i < HPS__OUTPOOL_SLOTS; i++)
        if (p->buf[i])
            free((char *)p->buf[i] - HDR);
    pthread_mutex_destroy(&p->mu);
}

/* The smallest kept buffer of at least n bytes, removed from the pool. */
static float *take(struct hps__outpool *p, size_t n)
{
    int best = -1;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < HPS__OUTPOOL_SLOTS; i++)
        if (p->buf[i] && cap_of(p->buf[i]) >= n &&
            (best < 0 || cap_of(p->buf[i]) < cap_of(p->buf[best])))
            best = i;
    float *out = best >= 0 ? p->buf[best] : NULL;
    if (out) {
        p->buf[best] = NULL;
        p->bytes -= cap_of(out);
    }
    pthread_mutex_unlock(&p->mu);
    return out;
}

float *hps__outpool_get(struct hps__outpool *p, size_t n)
{
    float *out = n >= HPS__OUTPOOL_MIN ? take(p, n) : NULL;
    if (out)
        return out;
    char *base = malloc(HDR + (n ? n : 1));
    if (!base)
        return NULL;
    memcpy(base, &n, sizeof(n));
    return (float *)(void *)(base + HDR);
}

void hps__outpool_put(struct hps__outpool *p, float *out)
{
    if (!out)
        return;
    size_t cap = cap_of(out);
    if (cap >= HPS__OUTPOOL_MIN && cap <= HPS__OUTPOOL_MAX) {
        pthread_mutex_lock(&p->mu);
        for (int i = 0; i < HPS__OUTPOOL_SLOTS && p->bytes + cap <= HPS__OUTPOOL_MAX; i++)
            if (!p->buf[i]) {
                p->buf[i] = out;
                p->bytes += cap;
                out = NULL;
                break;
            }
        pthread_mutex_unlock(&p->mu);
    }
    if (out)
        free((char *)out - HDR);
}
