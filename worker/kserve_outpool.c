/*
 * kserve_outpool.c -- reuse of the OUTPUT0 buffers of large responses.
 *
 * A response of many megabytes (8192 samples x 26 tables x dim 128 is
 * 109 MB) gets a fresh mmap from malloc each time, and first-touching its
 * pages costs more than the lookup itself: measured on a 16-core VM, 80 ms
 * of page faults for a 109 MB buffer against 2.6 ms for the GPU lookup and
 * its copy.  Buffers of at least HPS__KSERVE_OUTPOOL_MIN bytes are therefore kept
 * when freed (at most HPS__KSERVE_OUTPOOL_SLOTS of them, HPS__KSERVE_OUTPOOL_MAX bytes
 * together) and handed to the next request that fits; a full pool gives up
 * smaller buffers for a larger one.  Each buffer carries its capacity and
 * its pin state in a 64-byte header before the floats.
 *
 * With a backend pin_output hook (the GPU worker: cudaHostRegister), a
 * buffer is page-locked once, when it first goes into the pool, so that
 * GPU lookups copy rows straight into it, and unpinned just before it is
 * freed.  A refused pin is not asked again for that buffer.  The thread
 * that holds a buffer (taken, or about to be put) is its only user, so the
 * pin state needs no lock; pinning runs outside the pool's mutex.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kserve_internal.h"

#define HDR        64
#define HDR_PIN    8 /* offset of the pin state (one byte) in the header: */
#define PIN_NONE   0 /* not tried yet */
#define PIN_DONE   1 /* pinned: unpin before free */
#define PIN_FAILED 2 /* pin_output refused: not asked again for this buffer */

static char *base_of(float *out)
{
    return (char *)out - HDR;
}

static size_t cap_of(const float *out)
{
    size_t cap;
    memcpy(&cap, (const char *)out - HDR, sizeof(cap));
    return cap;
}

void hps__kserve_outpool_init(struct hps__kserve_outpool *p, const hps_kserve_backend_t *be)
{
    memset(p, 0, sizeof(*p));
    pthread_mutex_init(&p->mu, NULL);
    if (be && be->pin_output && be->unpin_output) {
        p->pin = be->pin_output;
        p->unpin = be->unpin_output;
        p->ctx = be->ctx;
    }
}

/* Unpin (if pinned) and free a buffer nobody else holds. */
static void release(struct hps__kserve_outpool *p, float *out)
{
    char *base = base_of(out);
    if (base[HDR_PIN] == PIN_DONE)
        p->unpin(p->ctx, base, HDR + cap_of(out));
    free(base);
}

void hps__kserve_outpool_fini(struct hps__kserve_outpool *p)
{
    for (int i = 0; i < HPS__KSERVE_OUTPOOL_SLOTS; i++)
        if (p->buf[i])
            release(p, p->buf[i]);
    pthread_mutex_destroy(&p->mu);
}

/* The smallest kept buffer of at least n bytes, removed from the pool. */
static float *take(struct hps__kserve_outpool *p, size_t n)
{
    int best = -1;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < HPS__KSERVE_OUTPOOL_SLOTS; i++)
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

float *hps__kserve_outpool_get(struct hps__kserve_outpool *p, size_t n)
{
    float *out = n >= HPS__KSERVE_OUTPOOL_MIN ? take(p, n) : NULL;
    if (out)
        return out;
    char *base = malloc(HDR + (n ? n : 1));
    if (!base)
        return NULL;
    memcpy(base, &n, sizeof(n));
    base[HDR_PIN] = PIN_NONE;
    return (float *)(void *)(base + HDR);
}

/*
 * Room for a buffer of cap bytes (mutex held): the kept buffers to give up
 * for it, smaller ones only, smallest first, stored in victims[]; their
 * count, or -1 when even that leaves no free slot or exceeds the byte bound.
 * *slot: where the buffer goes (free now, or freed by a victim).
 * So a pool full of small buffers still takes a large one (a 109 MB
 * response would otherwise get fresh pages every time).
 */
static int plan(const struct hps__kserve_outpool *p, size_t cap,
                int victims[HPS__KSERVE_OUTPOOL_SLOTS], int *slot)
{
    bool taken[HPS__KSERVE_OUTPOOL_SLOTS] = {false};
    size_t bytes = p->bytes;
    int n = 0;
    for (;;) {
        int free_slot = -1, small = -1;
        for (int i = 0; i < HPS__KSERVE_OUTPOOL_SLOTS; i++) {
            if (!p->buf[i] || taken[i]) {
                free_slot = free_slot < 0 ? i : free_slot;
            } else if (cap_of(p->buf[i]) < cap &&
                       (small < 0 || cap_of(p->buf[i]) < cap_of(p->buf[small]))) {
                small = i;
            }
        }
        if (free_slot >= 0 && bytes + cap <= HPS__KSERVE_OUTPOOL_MAX) {
            *slot = free_slot;
            return n;
        }
        if (small < 0)
            return -1;
        taken[small] = true;
        bytes -= cap_of(p->buf[small]);
        victims[n++] = small;
    }
}

/* Whether keep() would find room now (a hint: pin only buffers likely kept). */
static bool has_room(struct hps__kserve_outpool *p, size_t cap)
{
    int victims[HPS__KSERVE_OUTPOOL_SLOTS], slot;
    pthread_mutex_lock(&p->mu);
    bool room = plan(p, cap, victims, &slot) >= 0;
    pthread_mutex_unlock(&p->mu);
    return room;
}

/* Keep out (cap bytes) if plan() finds room; the buffers it gives up go to
 * gone[] (*ngone of them), to be released outside the mutex. */
static bool keep(struct hps__kserve_outpool *p, float *out, size_t cap,
                 float *gone[HPS__KSERVE_OUTPOOL_SLOTS], int *ngone)
{
    int victims[HPS__KSERVE_OUTPOOL_SLOTS], slot = -1;
    pthread_mutex_lock(&p->mu);
    int n = plan(p, cap, victims, &slot);
    for (int i = 0; i < n; i++) {
        gone[i] = p->buf[victims[i]];
        p->bytes -= cap_of(gone[i]);
        p->buf[victims[i]] = NULL;
    }
    if (n >= 0) {
        p->buf[slot] = out;
        p->bytes += cap;
    }
    pthread_mutex_unlock(&p->mu);
    *ngone = n > 0 ? n : 0;
    return n >= 0;
}

void hps__kserve_outpool_put(struct hps__kserve_outpool *p, float *out)
{
    if (!out)
        return;
    size_t cap = cap_of(out);
    char *base = base_of(out);
    if (cap < HPS__KSERVE_OUTPOOL_MIN || cap > HPS__KSERVE_OUTPOOL_MAX) {
        release(p, out);
        return;
    }
    if (p->pin && base[HDR_PIN] == PIN_NONE && has_room(p, cap))
        base[HDR_PIN] = p->pin(p->ctx, base, HDR + cap) == 0 ? PIN_DONE : PIN_FAILED;
    float *gone[HPS__KSERVE_OUTPOOL_SLOTS];
    int ngone;
    if (!keep(p, out, cap, gone, &ngone))
        release(p, out);
    for (int i = 0; i < ngone; i++)
        release(p, gone[i]);
}
