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
#include <stdlib.h>
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
    if (!off || !hps__shmdb_block_ok(db, off, sizeof(struct shm_missq)))
        return NULL; /* not a block the allocator hands out: corrupt */
    struct shm_missq *q = hps__shmdb_ptr(db, off);
    if (!hps__shmdb_in_bounds(db, off, sizeof(*q) + (uint64_t)q->nslots * sizeof(struct shm_mslot)))
        return NULL;
    return q;
}

bool hps__shmdb_missq_ok(hps_shmdb_t *db)
{
    return missq(db) != NULL;
}

hps_err_t hps_shmdb_missq_init(hps_shmdb_t *db, uint32_t slots, uint64_t slab_bytes)
{
    if (slots == 0 || slots > 4096 || slab_bytes < 4096)
        return HPS_EINVAL;
    if (missq(db))
        return 0;
    int lr = hps__shmdb_lock(&db->hdr->dir_lock);
    if (lr < 0)
        return lr;
    if (lr == 1)
        hps__shmdb_lock_consistent(db, &db->hdr->dir_lock);
    hps_err_t rc = 0;
    if (!missq(db)) {
        uint64_t off, slab0;
        slab_bytes = hps__shmdb_round_up(slab_bytes, HPS_CACHELINE);
        rc = hps__shmdb_alloc(
            db, sizeof(struct shm_missq) + (uint64_t)slots * sizeof(struct shm_mslot), &off);
        if (rc == 0)
            rc = hps__shmdb_alloc(db, (uint64_t)slots * slab_bytes, &slab0);
        if (rc == 0) {
            struct shm_missq *q = hps__shmdb_ptr(db, off);
            q->nslots = slots;
            q->slab_bytes = slab_bytes;
            for (uint32_t i = 0; i < slots; i++)
                q->slots[i].slab = slab0 + (uint64_t)i * slab_bytes;
            /* Release: the queue is complete before workers can find it. */
            atomic_store_explicit((_Atomic uint64_t *)&db->hdr->missq_off, off,
                                  memory_order_release);
        }
    }
    hps__shmdb_unlock(&db->hdr->dir_lock);
    return rc;
}

/* Bytes a request of n keys needs in a slab, for a table. */
static uint64_t slab_need(const struct shm_table *t, uint64_t n)
{
    return hps__shmdb_round_up(n * t->key_bytes, 64) + hps__shmdb_round_up(n, 64) +
           n * t->dim * sizeof(float);
}

/* Keys of one chunk at most, whatever a slab would hold: a large request's
 * answers come back chunk by chunk (the coordinator's threads take them in
 * parallel), so that what was answered before the deadline is the caller's
 * (hps_shmdb_miss_lookup_many) instead of one slab-sized chunk still being
 * read when it passes.  A few milliseconds of RocksDB reads. */
enum { CHUNK_KEYS_MAX = 4096 };

static uint64_t max_keys(const struct shm_missq *q, const struct shm_table *t)
{
    uint64_t n = q->slab_bytes / (t->key_bytes + 1 + (uint64_t)t->dim * sizeof(float));
    while (n > 0 && slab_need(t, n) > q->slab_bytes)
        n--;
    return n < CHUNK_KEYS_MAX ? n : CHUNK_KEYS_MAX;
}

struct slab_view {
    void *keys;
    uint8_t *found;
    float *values;
};

static struct slab_view slab_of(hps_shmdb_t *db, const struct shm_table *t,
                                const struct shm_mslot *s, uint32_t n)
{
    uint8_t *base = hps__shmdb_ptr(db, s->slab);
    struct slab_view v = {.keys = base};
    v.found = base + hps__shmdb_round_up((uint64_t)n * t->key_bytes, 64);
    v.values = (float *)(v.found + hps__shmdb_round_up(n, 64));
    return v;
}

static uint64_t deadline_ns(uint32_t timeout_ms)
{
    return hps__shmdb_clock_ns(CLOCK_MONOTONIC) + (uint64_t)timeout_ms * 1000000ULL;
}

static bool wait_until(_Atomic uint64_t *word, uint64_t seen, uint64_t deadline)
{
    uint64_t now = hps__shmdb_clock_ns(CLOCK_MONOTONIC);
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

/* One posted chunk of a batched request: a slot we claimed and made PENDING. */
struct flight {
    const struct shm_table *t;
    uint64_t seq; /* the slot's sequence at our claim: the slot is ours while it holds */
    size_t req;   /* index of the request */
    size_t off;   /* first key of the chunk in its request */
    uint32_t slot;
    uint32_t m; /* keys in the chunk, <= max_keys */
};

/* Chunks the common case (a request of a few dozen tables) tracks on the stack. */
enum { FLIGHT_STACK = 64 };

/* Check one request; 0 and its chunk size in *per when it needs slots. */
static hps_err_t check(hps_shmdb_t *db, struct shm_missq *q, const hps_miss_req_t *r,
                       const struct shm_table **ret_t, uint64_t *ret_per)
{
    const struct shm_table *t = db ? hps__shmdb_table(db, r->table) : NULL;
    if (!db)
        return HPS_EINVAL;
    if (!t || !q)
        return HPS_ENOTFOUND;
    uint64_t per = max_keys(q, t);
    if (per == 0 || (r->n > 0 && (!r->keys || !r->values)))
        return HPS_EINVAL;
    *ret_t = t;
    *ret_per = per;
    return 0;
}

/* Claim a slot for keys [off, off + m) of request r and make it PENDING. */
static bool post(hps_shmdb_t *db, struct shm_missq *q, const hps_miss_req_t *r,
                 const struct shm_table *t, size_t off, uint32_t m, struct flight *ret)
{
    uint64_t w;
    int i = claim(q, &w);
    if (i < 0)
        return false;
    struct shm_mslot *s = &q->slots[i];
    s->table = r->table;
    s->n = m;
    struct slab_view v = slab_of(db, t, s, m);
    memcpy(v.keys, (const char *)r->keys + off * t->key_bytes, (size_t)m * t->key_bytes);
    /* Release: the request is complete before the coordinator sees PENDING. */
    atomic_store_explicit(&s->word, WORD(SEQ(w), MS_PENDING), memory_order_release);
    *ret = (struct flight){.t = t, .seq = SEQ(w), .off = off, .slot = (uint32_t)i, .m = m};
    return true;
}

/* Wait for one posted chunk, copy its answer out and free its slot. */
static hps_err_t collect(hps_shmdb_t *db, struct shm_missq *q, hps_miss_req_t *r,
                         const struct flight *f, uint64_t deadline)
{
    struct shm_mslot *s = &q->slots[f->slot];
    hps_err_t rc = await(q, s, f->seq, deadline);
    if (rc != 0)
        return rc; /* the slot was given back or abandoned: no longer ours, not touched */
    const struct shm_table *t = f->t;
    rc = s->rc;
    if (rc == 0) {
        struct slab_view v = slab_of(db, t, s, f->m);
        for (size_t k = 0; k < f->m; k++) {
            if (!v.found[k])
                continue;
            if (r->found)
                r->found[f->off + k] = 1;
            memcpy(r->values + (f->off + k) * t->dim, v.values + k * t->dim,
                   t->dim * sizeof(float));
            r->hits++;
        }
    }
    /* Release: our slab reads are done before the slot is reused. */
    atomic_store_explicit(&s->word, WORD(f->seq, MS_FREE), memory_order_release);
    return rc < 0 ? rc : 0; /* a positive answer is no error, and no rows */
}

/* Wake the coordinator for the chunks posted since the last ring. */
static void ring(struct shm_missq *q, size_t *unrung)
{
    if (*unrung == 0)
        return;
    atomic_fetch_add_explicit(&q->doorbell, 1, memory_order_release);
    futex(&q->doorbell, FUTEX_WAKE, *unrung < INT32_MAX ? (uint32_t)*unrung : INT32_MAX, NULL);
    *unrung = 0;
}

/* Sleep a little while the queue is full of other callers' chunks: 50 us
 * doubling to 1 ms (*waits counts the sleeps of this call), never past the
 * deadline. */
static void wait_for_slot(uint64_t deadline, unsigned *waits)
{
    uint64_t now = hps__shmdb_clock_ns(CLOCK_MONOTONIC);
    uint64_t ns = *waits < 5 ? 50000ull << *waits : 1000000ull;
    (*waits)++;
    if (now >= deadline)
        return;
    if (ns > deadline - now)
        ns = deadline - now;
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                          .tv_nsec = (long)(ns % 1000000000ull)};
    nanosleep(&ts, NULL);
}

/* The batched request against an absolute deadline (CLOCK_MONOTONIC ns). */
static hps_err_t lookup_many(hps_shmdb_t *db, hps_miss_req_t *reqs, size_t nreq, uint64_t deadline)
{
    if (nreq == 0)
        return 0;
    if (!reqs)
        return HPS_EINVAL;
    struct shm_missq *q = db ? missq(db) : NULL;
    const struct shm_table *t;
    uint64_t per;
    size_t chunks = 0;
    for (size_t r = 0; r < nreq; r++) {
        hps_miss_req_t *rq = &reqs[r];
        rq->hits = 0;
        if (rq->found && rq->n > 0)
            memset(rq->found, 0, rq->n);
        rq->rc = check(db, q, rq, &t, &per);
        if (rq->rc == 0)
            chunks += rq->n / per + (rq->n % per != 0);
    }
    /* At most half the queue's slots are ours at once (a ring of chunks in
     * flight): a large call goes in waves and leaves the other half to the
     * requests of other threads and processes, instead of making them
     * HPS_EBUSY until it is done. */
    size_t share = q ? (q->nslots + 1) / 2 : 0;
    size_t cap = chunks < share ? chunks : share;
    struct flight stack[FLIGHT_STACK], *fl = stack;
    if (cap > FLIGHT_STACK && !(fl = malloc(cap * sizeof(*fl)))) {
        for (size_t r = 0; r < nreq; r++)
            if (reqs[r].rc == 0 && reqs[r].n > 0)
                reqs[r].rc = -ENOMEM;
        cap = 0;
        fl = stack;
    }
    /* Post every chunk of every request; when the queue (or our share of
     * it) is full, ring the doorbell for what is posted and collect our
     * oldest chunk to reuse its slot, all against the one deadline.  Only a
     * queue full of other callers' requests until the deadline makes a
     * chunk HPS_EBUSY. */
    size_t head = 0, tail = 0, unrung = 0;
    unsigned waits = 0; /* wait_for_slot's sleeps */
    bool full = false;  /* waiting for a slot of other callers' since the last post */
    for (size_t r = 0; cap > 0 && r < nreq; r++) {
        hps_miss_req_t *rq = &reqs[r];
        if (rq->rc != 0 || rq->n == 0 || check(db, q, rq, &t, &per) != 0)
            continue;
        for (size_t off = 0; off < rq->n; off += per) {
            uint32_t m = (uint32_t)(rq->n - off < per ? rq->n - off : per);
            for (;;) {
                if (hps__shmdb_clock_ns(CLOCK_MONOTONIC) >= deadline) {
                    /* no time left to ask: the queue stayed full of other
                     * callers' chunks (HPS_EBUSY), or the time went on ours */
                    if (full)
                        atomic_fetch_add_explicit(&q->busy, 1, memory_order_relaxed);
                    rq->rc = rq->rc ? rq->rc : full ? HPS_EBUSY : HPS_ETIMEDOUT;
                    break;
                }
                if (tail - head < cap && post(db, q, rq, t, off, m, &fl[tail % cap])) {
                    fl[tail++ % cap].req = r;
                    unrung++;
                    full = false;
                    break;
                }
                if (tail == head) {
                    /* None of ours out: the queue is full of other callers'
                     * chunks.  Wait for one to be freed (they are answered
                     * and collected), within the deadline; the other chunks
                     * still go after it.  Refusing at once (HPS_EBUSY) gave a
                     * caller among a few concurrent large ones the defaults
                     * of every key while the coordinator served. */
                    full = true;
                    wait_for_slot(deadline, &waits);
                    continue;
                }
                ring(q, &unrung);
                struct flight *f = &fl[head++ % cap];
                hps_err_t rc = collect(db, q, &reqs[f->req], f, deadline);
                if (rc != 0 && reqs[f->req].rc == 0)
                    reqs[f->req].rc = rc;
            }
        }
    }
    /* Ring the doorbell once for the rest, then await them all against the
     * one deadline.  Each wait ends at DONE or at the deadline; once it has
     * passed, every chunk still out is given back (PENDING) or abandoned
     * (SERVING) without waiting. */
    ring(q, &unrung);
    for (; head < tail; head++) {
        struct flight *f = &fl[head % cap];
        hps_miss_req_t *rq = &reqs[f->req];
        hps_err_t rc = collect(db, q, rq, f, deadline);
        if (rc != 0 && rq->rc == 0)
            rq->rc = rc;
    }
    if (fl != stack)
        free(fl);
    for (size_t r = 0; r < nreq; r++)
        if (reqs[r].rc != 0)
            return reqs[r].rc;
    return 0;
}

hps_err_t hps_shmdb_miss_lookup_many(hps_shmdb_t *db, hps_miss_req_t *reqs, size_t nreq,
                                     uint32_t timeout_ms)
{
    /* The one deadline, taken at entry. */
    return lookup_many(db, reqs, nreq, deadline_ns(timeout_ms));
}

/*
 * One table, one chunk at a time through lookup_many(): each chunk's slot is
 * freed before the next is claimed, so a request larger than the whole queue
 * still goes through (as it always has), and the first failing chunk ends
 * the call.  All chunks share the deadline taken at entry.
 */
hps_err_t hps_shmdb_miss_lookup(hps_shmdb_t *db, uint32_t id, size_t n, const void *keys,
                                float *values, uint8_t *found, uint32_t timeout_ms,
                                size_t *ret_hits)
{
    uint64_t deadline = deadline_ns(timeout_ms);
    hps_miss_req_t r = {.table = id, .n = n, .keys = keys, .values = values, .found = found};
    const struct shm_table *t;
    uint64_t per;
    hps_err_t rc = check(db, db ? missq(db) : NULL, &r, &t, &per);
    if (rc != 0)
        return rc;
    if (found && n > 0)
        memset(found, 0, n);
    size_t total = 0;
    for (size_t off = 0; off < n; off += per) {
        hps_miss_req_t c = {.table = id,
                            .n = n - off < per ? n - off : per,
                            .keys = (const char *)keys + off * t->key_bytes,
                            .values = values + off * t->dim,
                            .found = found ? found + off : NULL};
        rc = lookup_many(db, &c, 1, deadline);
        if (rc != 0)
            return rc;
        total += c.hits;
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
    struct shm_table *t = hps__shmdb_table(db, s->table);
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
    bool rung = false; /* the doorbell moved since the last scan */
    for (;;) {
        uint32_t bell = atomic_load_explicit(&q->doorbell, memory_order_acquire);
        for (uint32_t i = 0; i < q->nslots; i++)
            served += serve_slot(db, q, &q->slots[i], fn, ctx);
        /* Rung and nothing to serve: hps_shmdb_miss_wake() (or a request
         * another thread took): back to the caller, which may be stopping. */
        if (served > 0 || rung)
            break;
        uint64_t now = hps__shmdb_clock_ns(CLOCK_MONOTONIC);
        if (now >= deadline)
            break;
        struct timespec ts = {.tv_sec = (time_t)((deadline - now) / 1000000000ULL),
                              .tv_nsec = (long)((deadline - now) % 1000000000ULL)};
        futex(&q->doorbell, FUTEX_WAIT, bell, &ts);
        rung = atomic_load_explicit(&q->doorbell, memory_order_acquire) != bell;
    }
    if (ret_served)
        *ret_served = served;
    return 0;
}

/* A slot's owner is the pid its worker had in its own PID namespace, so
 * it is looked up in the process table, whose rows' liveness locks hold
 * in every namespace: the owner is gone when no live row carries its pid.
 * (A live process of the same pid in another namespace keeps the slots
 * until it is gone too: a late reclaim, never a wrong one.) */
static bool owner_gone(hps_shmdb_t *db, pid_t pid)
{
    return pid <= 0 || !hps_shmdb_pid_alive(db, pid);
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
        bool gone = owner_gone(db, atomic_load(&s->owner));
        if (st == MS_FREE || (!stale && !gone))
            continue;
        /* A dead worker's slot in SERVING is left to the coordinator serving it;
         * one a dead coordinator was serving for a live worker still waiting
         * is asked again (its keys are intact: the coordinator only writes
         * values), for the next coordinator to answer. */
        uint64_t to = st == MS_SERVING && !stale  ? WORD(SEQ(w), MS_ABANDONED)
                      : st == MS_SERVING && !gone ? WORD(SEQ(w), MS_PENDING)
                                                  : WORD(SEQ(w), MS_FREE);
        if (atomic_compare_exchange_strong(&s->word, &w, to)) {
            wake_all(&s->word);
            n++;
        }
    }
    if (n && q) /* what was asked again: to the servers at once */
        hps_shmdb_miss_wake(db);
    if (ret_reaped)
        *ret_reaped = n;
    return 0;
}

void hps_shmdb_miss_wake(hps_shmdb_t *db)
{
    struct shm_missq *q = missq(db);
    if (!q)
        return;
    atomic_fetch_add_explicit(&q->doorbell, 1, memory_order_release);
    futex(&q->doorbell, FUTEX_WAKE, INT32_MAX, NULL);
}

size_t hps_shmdb_miss_drop_pending(hps_shmdb_t *db)
{
    struct shm_missq *q = missq(db);
    size_t n = 0;
    for (uint32_t i = 0; q && i < q->nslots; i++) {
        struct shm_mslot *s = &q->slots[i];
        uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire);
        /* FREE with the same sequence: its waiter sees it given back
         * (await) and no longer touches the slot. */
        if (STATE(w) == MS_PENDING &&
            atomic_compare_exchange_strong(&s->word, &w, WORD(SEQ(w), MS_FREE))) {
            wake_all(&s->word);
            n++;
        }
    }
    return n;
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
