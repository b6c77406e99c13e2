/*
 * missq.c -- the miss queue: workers hand the keys they could not find in
 * the volatile DB to the coordinator, which looks them up in the layers
 * below (Redis, RocksDB) and answers through the same slot.
 *
 * A slot belongs to one side at a time.  Its word packs a sequence number
 * (bumped at every claim) with the state, and every transition is a
 * compare-and-swap of the whole word, so a late or stale party can never
 * act on a slot that has since been reused:
 *
 *   FREE --worker claims--> FILLING --keys written--> PENDING
 *   PENDING --coordinator--> SERVING --answer written--> DONE --worker reads--> FREE
 *   PENDING --worker times out--> FREE
 *   SERVING --worker times out--> ABANDONED --coordinator finishes--> FREE
 *   any state of a dead worker --reap--> FREE (SERVING: ABANDONED)
 *
 * Wake-ups use futexes on the slot word's low 32 bits (state and the low
 * sequence bits) and on a doorbell counter the coordinator sleeps on; no
 * side ever polls, and every wait has a deadline.
 */
#include <errno.h>
#include <linux/futex.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

enum { MS_FREE = 0, MS_FILLING = 1, MS_PENDING = 2, MS_SERVING = 3, MS_DONE = 4, MS_ABANDONED = 5 };

#define WORD(seq, st) (((uint64_t)(seq) << 8) | (uint64_t)(st))
#define STATE(w)      ((uint32_t)((w)&0xff))
#define SEQ(w)        ((w) >> 8)

struct shm_mslot {
    _Atomic uint64_t word; /* seq << 8 | state; futex on its low half (little-endian) */
    _Atomic int32_t owner; /* worker pid */
    uint32_t table;
    uint32_t n;
    int32_t rc; /* coordinator's result */
    uint32_t hits;
    uint32_t pad;
    uint64_t slab; /* offset: keys, found (n bytes), values (n, dim) */
    uint8_t pad2[24];
};
_Static_assert(sizeof(struct shm_mslot) == 64, "miss slot must be one cache line");

struct shm_missq {
    _Atomic uint32_t doorbell; /* bumped by every request; the coordinator waits on it */
    uint32_t nslots;
    uint64_t slab_bytes;
    _Atomic uint64_t served;
    _Atomic uint64_t busy;
    _Atomic uint64_t timeouts;
    uint8_t pad[24];
    struct shm_mslot slots[];
};
_Static_assert(sizeof(struct shm_missq) == 64, "miss queue header must be one cache line");

static long futex(void *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, addr, op, val, ts, NULL, 0);
}

static void wake_all(void *addr)
{
    futex(addr, FUTEX_WAKE, INT32_MAX, NULL);
}

static struct shm_missq *missq(hps_shmdb_t *db)
{
    uint64_t off =
        atomic_load_explicit((_Atomic uint64_t *)&db->hdr->missq_off, memory_order_acquire);
    if (!off || !hps__in_bounds(db, off, sizeof(struct shm_missq)))
        return NULL;
    struct shm_missq *q = hps__ptr(db, off);
    if (!hps__in_bounds(db, off, sizeof(*q) + (uint64_t)q->nslots * sizeof(struct shm_mslot)))
        return NULL;
    return q;
}

hps_err_t hps_shmdb_missq_init(hps_shmdb_t *db, uint32_t slots, uint64_t slab_bytes)
{
    if (slots == 0 || slots > 4096 || slab_bytes < 4096)
        return HPS_EINVAL;
    if (missq(db))
        return 0;
    int lr = hps__lock(&db->hdr->dir_lock);
    if (lr < 0)
        return lr;
    if (lr == 1)
        hps__lock_consistent(db, &db->hdr->dir_lock);
    hps_err_t rc = 0;
    if (!missq(db)) {
        uint64_t off, slab0;
        slab_bytes = hps__round_up(slab_bytes, HPS_CACHELINE);
        rc = hps__alloc(db, sizeof(struct shm_missq) + (uint64_t)slots * sizeof(struct shm_mslot),
                        &off);
        if (rc == 0)
            rc = hps__alloc(db, (uint64_t)slots * slab_bytes, &slab0);
        if (rc == 0) {
            struct shm_missq *q = hps__ptr(db, off);
            q->nslots = slots;
            q->slab_bytes = slab_bytes;
            for (uint32_t i = 0; i < slots; i++)
                q->slots[i].slab = slab0 + (uint64_t)i * slab_bytes;
            /* Release: the queue is complete before workers can find it. */
            atomic_store_explicit((_Atomic uint64_t *)&db->hdr->missq_off, off,
                                  memory_order_release);
        }
    }
    hps__unlock(&db->hdr->dir_lock);
    return rc;
}

/* Bytes a request of n keys needs in a slab, for a table. */
static uint64_t slab_need(const struct shm_table *t, uint64_t n)
{
    return hps__round_up(n * t->key_bytes, 64) + hps__round_up(n, 64) + n * t->dim * sizeof(float);
}

static uint64_t max_keys(const struct shm_missq *q, const struct shm_table *t)
{
    uint64_t n = q->slab_bytes / (t->key_bytes + 1 + (uint64_t)t->dim * sizeof(float));
    while (n > 0 && slab_need(t, n) > q->slab_bytes)
        n--;
    return n;
}

struct slab_view {
    void *keys;
    uint8_t *found;
    float *values;
};

static struct slab_view slab_of(hps_shmdb_t *db, const struct shm_table *t,
                                const struct shm_mslot *s, uint32_t n)
{
    uint8_t *base = hps__ptr(db, s->slab);
    struct slab_view v = {.keys = base};
    v.found = base + hps__round_up((uint64_t)n * t->key_bytes, 64);
    v.values = (float *)(v.found + hps__round_up(n, 64));
    return v;
}

static uint64_t deadline_ns(uint32_t timeout_ms)
{
    return hps__clock_ns(CLOCK_MONOTONIC) + (uint64_t)timeout_ms * 1000000ULL;
}

static bool wait_until(_Atomic uint64_t *word, uint64_t seen, uint64_t deadline)
{
    uint64_t now = hps__clock_ns(CLOCK_MONOTONIC);
    if (now >= deadline)
        return false;
    uint64_t left = deadline - now;
    struct timespec ts = {.tv_sec = (time_t)(left / 1000000000ULL),
                          .tv_nsec = (long)(left % 1000000000ULL)};
    futex((void *)word, FUTEX_WAIT, (uint32_t)seen, &ts);
    return true;
}

/* Claim a free slot; returns its index or -1 (all busy). */
static int claim(struct shm_missq *q, uint64_t *ret_word)
{
    for (uint32_t i = 0; i < q->nslots; i++) {
        struct shm_mslot *s = &q->slots[i];
        uint64_t w = atomic_load_explicit(&s->word, memory_order_relaxed);
        if (STATE(w) != MS_FREE)
            continue;
        uint64_t mine = WORD(SEQ(w) + 1, MS_FILLING);
        /* Acquire: the previous user's slab accesses happen before ours. */
        if (atomic_compare_exchange_strong_explicit(&s->word, &w, mine, memory_order_acquire,
                                                    memory_order_relaxed)) {
            atomic_store_explicit(&s->owner, getpid(), memory_order_relaxed);
            *ret_word = mine;
            return (int)i;
        }
    }
    return -1;
}

/* Wait for DONE; on the deadline take the slot back or abandon it. */
static hps_err_t await(struct shm_missq *q, struct shm_mslot *s, uint64_t seq, uint64_t deadline)
{
    for (;;) {
        uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire);
        if (SEQ(w) != seq)
            return HPS_ETIMEDOUT; /* reaped meanwhile: the slot is no longer ours */
        if (STATE(w) == MS_DONE)
            return 0;
        if (STATE(w) == MS_FREE)
            return HPS_ETIMEDOUT; /* dropped by a restarting coordinator */
        if (wait_until(&s->word, w, deadline))
            continue;
        uint64_t give = STATE(w) == MS_PENDING ? WORD(seq, MS_FREE) : WORD(seq, MS_ABANDONED);
        if (atomic_compare_exchange_strong(&s->word, &w, give)) {
            atomic_fetch_add_explicit(&q->timeouts, 1, memory_order_relaxed);
            return HPS_ETIMEDOUT;
        }
    }
}

/* One request of n <= max_keys keys. */
static hps_err_t request(hps_shmdb_t *db, struct shm_missq *q, uint32_t id,
                         const struct shm_table *t, size_t n, const void *keys, float *values,
                         uint8_t *found, uint64_t deadline, size_t *ret_hits)
{
    uint64_t w;
    int i = claim(q, &w);
    if (i < 0) {
        atomic_fetch_add_explicit(&q->busy, 1, memory_order_relaxed);
        return HPS_EBUSY;
    }
    struct shm_mslot *s = &q->slots[i];
    s->table = id;
    s->n = (uint32_t)n;
    struct slab_view v = slab_of(db, t, s, (uint32_t)n);
    memcpy(v.keys, keys, n * t->key_bytes);
    /* Release: the request is complete before the coordinator sees PENDING. */
    atomic_store_explicit(&s->word, WORD(SEQ(w), MS_PENDING), memory_order_release);
    atomic_fetch_add_explicit(&q->doorbell, 1, memory_order_release);
    futex(&q->doorbell, FUTEX_WAKE, 1, NULL);
    hps_err_t rc = await(q, s, SEQ(w), deadline);
    if (rc == 0) {
        rc = s->rc;
        size_t hits = 0;
        for (size_t k = 0; rc == 0 && k < n; k++) {
            if (found)
                found[k] = v.found[k];
            if (v.found[k]) {
                memcpy(values + k * t->dim, v.values + k * t->dim, t->dim * sizeof(float));
                hits++;
            }
        }
        *ret_hits = hits;
        /* Release: our slab reads are done before the slot is reused. */
        atomic_store_explicit(&s->word, WORD(SEQ(w), MS_FREE), memory_order_release);
    }
    return rc;
}

hps_err_t hps_shmdb_miss_lookup(hps_shmdb_t *db, uint32_t id, size_t n, const void *keys,
                                float *values, uint8_t *found, uint32_t timeout_ms,
                                size_t *ret_hits)
{
    struct shm_table *t = hps__table(db, id);
    if (!t)
        return HPS_ENOTFOUND;
    struct shm_missq *q = missq(db);
    if (!q)
        return HPS_ENOTFOUND;
    uint64_t per = max_keys(q, t);
    if (per == 0)
        return HPS_EINVAL;
    uint64_t deadline = deadline_ns(timeout_ms);
    size_t total = 0;
    if (found)
        memset(found, 0, n);
    for (size_t off = 0; off < n; off += per) {
        size_t m = n - off < per ? n - off : per, hits = 0;
        hps_err_t rc = request(db, q, id, t, m, (const char *)keys + off * t->key_bytes,
                               values + off * t->dim, found ? found + off : NULL, deadline, &hits);
        if (rc < 0)
            return rc;
        total += hits;
    }
    if (ret_hits)
        *ret_hits = total;
    return 0;
}

/* Serve one PENDING slot, if we win it. */
static bool serve_slot(hps_shmdb_t *db, struct shm_missq *q, struct shm_mslot *s,
                       hps_shmdb_miss_fn fn, void *ctx)
{
    uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire);
    if (STATE(w) != MS_PENDING)
        return false;
    /* Acquire: the worker's keys are visible once we own the slot. */
    if (!atomic_compare_exchange_strong_explicit(&s->word, &w, WORD(SEQ(w), MS_SERVING),
                                                 memory_order_acquire, memory_order_relaxed))
        return false;
    struct shm_table *t = hps__table(db, s->table);
    uint32_t n = s->n;
    hps_err_t rc = HPS_ENOTFOUND;
    if (t && slab_need(t, n) <= q->slab_bytes) {
        struct slab_view v = slab_of(db, t, s, n);
        memset(v.found, 0, n);
        rc = fn(ctx, s->table, n, v.keys, v.values, v.found);
    }
    s->rc = rc;
    /* Counted before DONE, so a worker that saw its answer sees the count. */
    atomic_fetch_add_explicit(&q->served, 1, memory_order_relaxed);
    uint64_t serving = WORD(SEQ(w), MS_SERVING);
    /* Release: the answer is written before DONE. */
    if (!atomic_compare_exchange_strong_explicit(&s->word, &serving, WORD(SEQ(w), MS_DONE),
                                                 memory_order_release, memory_order_relaxed))
        atomic_store_explicit(&s->word, WORD(SEQ(w), MS_FREE),
                              memory_order_release); /* abandoned */
    wake_all(&s->word);
    return true;
}

hps_err_t hps_shmdb_miss_serve(hps_shmdb_t *db, uint32_t wait_ms, hps_shmdb_miss_fn fn, void *ctx,
                               size_t *ret_served)
{
    struct shm_missq *q = missq(db);
    if (!q)
        return HPS_ENOTFOUND;
    size_t served = 0;
    uint64_t deadline = deadline_ns(wait_ms);
    for (;;) {
        uint32_t bell = atomic_load_explicit(&q->doorbell, memory_order_acquire);
        for (uint32_t i = 0; i < q->nslots; i++)
            served += serve_slot(db, q, &q->slots[i], fn, ctx);
        if (served > 0)
            break;
        uint64_t now = hps__clock_ns(CLOCK_MONOTONIC);
        if (now >= deadline)
            break;
        struct timespec ts = {.tv_sec = (time_t)((deadline - now) / 1000000000ULL),
                              .tv_nsec = (long)((deadline - now) % 1000000000ULL)};
        futex(&q->doorbell, FUTEX_WAIT, bell, &ts);
    }
    if (ret_served)
        *ret_served = served;
    return 0;
}

static bool owner_gone(pid_t pid)
{
    return pid <= 0 || (kill(pid, 0) < 0 && errno == ESRCH);
}

hps_err_t hps_shmdb_miss_reap(hps_shmdb_t *db, bool coordinator_restart, size_t *ret_reaped)
{
    struct shm_missq *q = missq(db);
    size_t n = 0;
    for (uint32_t i = 0; q && i < q->nslots; i++) {
        struct shm_mslot *s = &q->slots[i];
        uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire);
        uint32_t st = STATE(w);
        bool stale = coordinator_restart && (st == MS_SERVING || st == MS_ABANDONED);
        if (st == MS_FREE || (!stale && !owner_gone(atomic_load(&s->owner))))
            continue;
        /* A dead worker's slot in SERVING is left to the coordinator serving it. */
        uint64_t to =
            st == MS_SERVING && !stale ? WORD(SEQ(w), MS_ABANDONED) : WORD(SEQ(w), MS_FREE);
        if (atomic_compare_exchange_strong(&s->word, &w, to)) {
            wake_all(&s->word);
            n++;
        }
    }
    if (ret_reaped)
        *ret_reaped = n;
    return 0;
}

hps_err_t hps_shmdb_miss_stats(hps_shmdb_t *db, hps_missq_info_t *ret)
{
    struct shm_missq *q = missq(db);
    memset(ret, 0, sizeof(*ret));
    if (!q)
        return HPS_ENOTFOUND;
    ret->slots = q->nslots;
    ret->slab_bytes = q->slab_bytes;
    ret->served = atomic_load_explicit(&q->served, memory_order_relaxed);
    ret->busy = atomic_load_explicit(&q->busy, memory_order_relaxed);
    ret->timeouts = atomic_load_explicit(&q->timeouts, memory_order_relaxed);
    for (uint32_t i = 0; i < q->nslots; i++)
        ret->in_use += STATE(atomic_load(&q->slots[i].word)) != MS_FREE;
    return 0;
}
