/*
 * evict.c -- overflow resolution: evict a partition down to a row count by
 * its overflow_policy.
 *
 * evict_random picks random occupied slots.  evict_oldest (LRU) and
 * evict_least_used (LFU) rank rows by their access stamp (the table clock
 * of the last read or write, or the read count): the stamps are collected,
 * the k-th smallest is found by quickselect, and rows below it (then equal
 * to it, until k are gone) are evicted: exact, O(rows) per resolution,
 * amortized over the margin * (1 - target) inserts between resolutions.
 * After an LFU resolution the survivors' counts are halved, so that
 * popularity ages (upstream meant to do this; its normalization was a no-op).
 */
#include <stdlib.h>
#include <string.h>

#include "wview.h"

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s ? *s : 0x2545F4914F6CDD1DULL;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x;
}

static uint64_t evict_random(struct wview *w, uint64_t target)
{
    struct shm_part *p = w->p;
    uint64_t n = 0;
    while (atomic_load_explicit(&p->rows, memory_order_relaxed) > target) {
        uint64_t r = xorshift(&p->rng);
        uint32_t bi = (uint32_t)(r % w->nb);
        unsigned occ = atomic_load_explicit(&BKT(w, bi)->occ, memory_order_relaxed);
        if (!occ)
            continue;
        unsigned pick = (unsigned)((r >> 40) % (unsigned)__builtin_popcount(occ));
        while (pick--)
            occ &= occ - 1;
        hps__shmdb_wremove(w, bi, __builtin_ctz(occ));
        n++;
    }
    return n;
}

static void swap32(uint32_t *a, uint32_t *b)
{
    uint32_t t = *a;
    *a = *b;
    *b = t;
}

/* k-th smallest (0-based) of v[0..n), reordering v (Hoare partition). */
static uint32_t quickselect(uint32_t *v, size_t n, size_t k)
{
    long lo = 0, hi = (long)n - 1, kk = (long)k;
    while (lo < hi) {
        uint32_t pivot = v[lo + (hi - lo) / 2];
        long i = lo, j = hi;
        while (i <= j) {
            while (v[i] < pivot)
                i++;
            while (v[j] > pivot)
                j--;
            if (i <= j)
                swap32(&v[i++], &v[j--]);
        }
        if (kk <= j)
            hi = j;
        else if (kk >= i)
            lo = i;
        else
            break;
    }
    return v[kk];
}

/* Evict rows with stamp < th, then == th, until k rows are gone. */
static uint64_t evict_below(struct wview *w, uint32_t th, uint64_t k)
{
    uint64_t n = 0;
    for (int pass = 0; pass < 2 && n < k; pass++) {
        for (uint32_t bi = 0; bi < w->nb && n < k; bi++) {
            unsigned occ = atomic_load_explicit(&BKT(w, bi)->occ, memory_order_relaxed);
            for (; occ && n < k; occ &= occ - 1) {
                int s = __builtin_ctz(occ);
                uint32_t st = atomic_load_explicit(
                    &w->stamp[(uint64_t)bi * HPS_BUCKET_SLOTS + (unsigned)s], memory_order_relaxed);
                if (pass == 0 ? st < th : st == th) {
                    hps__shmdb_wremove(w, bi, s);
                    n++;
                }
            }
        }
    }
    return n;
}

static void age_counts(struct wview *w)
{
    uint64_t slots = (uint64_t)w->nb * HPS_BUCKET_SLOTS;
    for (uint64_t i = 0; i < slots; i++) {
        uint32_t c = atomic_load_explicit(&w->stamp[i], memory_order_relaxed);
        atomic_store_explicit(&w->stamp[i], c / 2 + (c & 1), memory_order_relaxed);
    }
}

static uint64_t evict_ranked(struct wview *w, uint64_t target)
{
    uint64_t rows = atomic_load_explicit(&w->p->rows, memory_order_relaxed);
    uint32_t *v = malloc(rows * sizeof(uint32_t));
    if (!v) /* no memory for ranking: fall back to random eviction */
        return evict_random(w, target);
    size_t n = 0;
    for (uint32_t bi = 0; bi < w->nb && n < rows; bi++) {
        unsigned occ = atomic_load_explicit(&BKT(w, bi)->occ, memory_order_relaxed);
        for (; occ && n < rows; occ &= occ - 1)
            v[n++] = atomic_load_explicit(
                &w->stamp[(uint64_t)bi * HPS_BUCKET_SLOTS + (unsigned)__builtin_ctz(occ)],
                memory_order_relaxed);
    }
    uint64_t k = rows - target;
    uint64_t evicted = 0;
    if (n > 0 && k > 0) {
        uint32_t th = quickselect(v, n, (size_t)(k - 1 < n ? k - 1 : n - 1));
        evicted = evict_below(w, th, k);
    }
    free(v);
    if (w->t->policy == HPS_EVICT_LEAST_USED)
        age_counts(w);
    return evicted;
}

uint64_t hps__shmdb_wevict(struct wview *w, uint64_t target_rows)
{
    uint64_t rows = atomic_load_explicit(&w->p->rows, memory_order_relaxed);
    if (rows <= target_rows)
        return 0;
    uint64_t n = w->stamp ? evict_ranked(w, target_rows) : 0;
    /* Readers keep stamping rows while we rank them, so fewer than planned
     * may still be below the threshold: random eviction finishes the job,
     * the partition must end at the target. */
    n += evict_random(w, target_rows);
    /* Relaxed: statistics. */
    atomic_fetch_add_explicit(&w->p->evictions, n, memory_order_relaxed);
    return n;
}
