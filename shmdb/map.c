/*
 * map.c -- the partition hash map: lock-free batch lookup, upsert, erase,
 * clear, overflow eviction, growth, crash repair.
 *
 * HOW A READ STAYS CONSISTENT WITHOUT A LOCK
 *
 * A reader snapshots the partition's geometry word and gen, then for its key
 * reads the home bucket's version (acquire).  An odd version means a writer
 * is inside: retry.  It scans the bucket's keys, copies the matching row,
 * issues an acquire fence and re-reads the version: if it moved, the copy may
 * be torn and is retried.  Finally gen is re-read: a rehash in between may
 * have freed the block the reader was looking at (its memory may since hold
 * anything), so a changed gen also means retry.  Every offset derived from
 * shared memory (geometry, row ids, row pages) is bounds-checked before use;
 * a failed check counts as a torn read.  Retries are bounded; a key that
 * stays busy is reported missing, so a writer that died mid-write (leaving a
 * version odd) never blocks a reader.
 *
 * A writer holds the partition mutex, makes the bucket version odd (relaxed
 * store + release fence: the odd value is visible before any data write),
 * writes, then stores the next even version with release semantics.
 *
 * Probing is linear over buckets; ovf counts keys that passed a bucket, so
 * a search ends at the first bucket with ovf == 0 and an erase decrements
 * the counters on the way from the key's home bucket (no tombstones).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define READ_RETRIES 2048 /* bounded: about 50 us of spinning, then "missing" */
#define GROUP        16   /* keys per prefetch group in batch lookups */

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* ---- geometry ---------------------------------------------------------- */

/* A partition's hash block as seen by one reader or writer. */
struct view {
    struct shm_bucket *b;
    uint32_t nb;
    uint32_t dim;
    float *vals;             /* inline values, (nb * 7, dim) */
    _Atomic uint32_t *rowid; /* indirect: row id per slot */
    _Atomic uint32_t *stamp; /* access stamps per slot, or NULL */
    struct shm_page *pages;  /* indirect: row pages */
};

static uint64_t vals_bytes(const struct shm_table *t, uint32_t nb)
{
    uint64_t per = t->inline_values ? (uint64_t)t->dim * sizeof(float) : sizeof(uint32_t);
    return hps__round_up((uint64_t)nb * HPS_BUCKET_SLOTS * per, HPS_CACHELINE);
}

static uint64_t block_bytes(const struct shm_table *t, uint32_t nb)
{
    uint64_t b = (uint64_t)nb * sizeof(struct shm_bucket) + vals_bytes(t, nb);
    if (t->policy != HPS_EVICT_RANDOM)
        b += hps__round_up((uint64_t)nb * HPS_BUCKET_SLOTS * sizeof(uint32_t), HPS_CACHELINE);
    return b;
}

/* Build a view of block blk with nb buckets; false if it is out of bounds. */
static bool make_view(hps_shmdb_t *db, const struct shm_table *t, const struct shm_part *p,
                      uint64_t g, struct view *v)
{
    uint64_t blk = HPS_GEOM_BLK(g);
    uint32_t nb = HPS_GEOM_NB(g);
    if (nb == 0 || !hps__in_bounds(db, blk, block_bytes(t, nb)))
        return false;
    uint8_t *base = hps__ptr(db, blk);
    uint8_t *after = base + (uint64_t)nb * sizeof(struct shm_bucket);
    v->b = (struct shm_bucket *)base;
    v->nb = nb;
    v->dim = t->dim;
    v->vals = t->inline_values ? (float *)after : NULL;
    v->rowid = t->inline_values ? NULL : (_Atomic uint32_t *)after;
    v->stamp =
        t->policy != HPS_EVICT_RANDOM ? (_Atomic uint32_t *)(after + vals_bytes(t, nb)) : NULL;
    v->pages = NULL;
    if (!t->inline_values &&
        hps__in_bounds(db, p->pagetab, HPS_MAX_ROW_PAGES * sizeof(struct shm_page)))
        v->pages = hps__ptr(db, p->pagetab);
    return true;
}

static inline uint64_t key_at(const void *keys, uint32_t key_bytes, size_t i)
{
    return key_bytes == 8 ? (uint64_t)((const int64_t *)keys)[i] : ((const uint32_t *)keys)[i];
}

/* Home bucket from the high half of the mixer; the partition uses it mod P. */
static inline uint32_t home_of(uint64_t h, uint32_t nb)
{
    return (uint32_t)(((h >> 32) * (uint64_t)nb) >> 32);
}

static inline uint32_t next_bucket(uint32_t b, uint32_t nb)
{
    return b + 1 == nb ? 0 : b + 1;
}

/* Row storage of a slot, or NULL when the row id is out of bounds (torn). */
static inline float *row_ptr(hps_shmdb_t *db, const struct view *v, uint64_t slot)
{
    if (v->vals)
        return v->vals + slot * v->dim;
    uint32_t r = atomic_load_explicit(&v->rowid[slot], memory_order_relaxed);
    uint32_t pg = r >> HPS_PAGE_SHIFT, idx = r & (HPS_PAGE_MAX_ROWS - 1);
    if (!v->pages || pg >= HPS_MAX_ROW_PAGES)
        return NULL;
    struct shm_page pe = v->pages[pg];
    uint64_t row_bytes = (uint64_t)v->dim * sizeof(float);
    if (idx >= pe.rows || !hps__in_bounds(db, pe.off, (uint64_t)pe.rows * row_bytes))
        return NULL;
    return (float *)hps__ptr(db, pe.off + idx * row_bytes);
}

/* ---- readers ----------------------------------------------------------- */

static inline int find_in_bucket(struct shm_bucket *b, uint64_t key)
{
    unsigned occ = atomic_load_explicit(&b->occ, memory_order_relaxed);
    while (occ) {
        int s = __builtin_ctz(occ);
        if (atomic_load_explicit(&b->key[s], memory_order_relaxed) == key)
            return s;
        occ &= occ - 1;
    }
    return -1;
}

static inline void touch(const struct view *v, uint64_t slot, uint32_t policy, uint32_t clock)
{
    /* Relaxed: access stamps are eviction hints; a lost update is harmless. */
    if (policy == HPS_EVICT_OLDEST) {
        atomic_store_explicit(&v->stamp[slot], clock, memory_order_relaxed);
    } else {
        uint32_t c = atomic_load_explicit(&v->stamp[slot], memory_order_relaxed);
        if (c != UINT32_MAX)
            atomic_store_explicit(&v->stamp[slot], c + 1, memory_order_relaxed);
    }
}

/* One attempt to read key from view v: 1 found (row copied), 0 missing,
 * -1 torn or busy (retry). */
static int read_once(hps_shmdb_t *db, const struct view *v, uint64_t key, uint64_t h, float *out,
                     int64_t *ret_slot)
{
    uint32_t bi = home_of(h, v->nb);
    for (uint32_t step = 0; step < v->nb; step++, bi = next_bucket(bi, v->nb)) {
        struct shm_bucket *b = &v->b[bi];
        /* Acquire: the data reads below happen after this version read. */
        uint32_t v1 = atomic_load_explicit(&b->ver, memory_order_acquire);
        if (v1 & 1)
            return -1;
        int s = find_in_bucket(b, key);
        unsigned ovf = atomic_load_explicit(&b->ovf, memory_order_relaxed);
        if (s >= 0) {
            uint64_t slot = (uint64_t)bi * HPS_BUCKET_SLOTS + (unsigned)s;
            const float *src = row_ptr(db, v, slot);
            if (!src)
                return -1;
            memcpy(out, src, (size_t)v->dim * sizeof(float));
            *ret_slot = (int64_t)slot;
        }
        /* Acquire fence: the copies above complete before the re-read. */
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&b->ver, memory_order_relaxed) != v1)
            return -1;
        if (s >= 0)
            return 1;
        if (ovf == 0)
            return 0;
    }
    return 0;
}

/* Snapshot a partition's geometry; false when it is being changed. */
static bool snapshot(hps_shmdb_t *db, const struct shm_table *t, struct shm_part *p,
                     uint32_t *ret_gen, struct view *v)
{
    /* Acquire: the geometry and block reads follow the gen read. */
    uint32_t gen = atomic_load_explicit(&p->gen, memory_order_acquire);
    uint64_t g = atomic_load_explicit(&p->geom, memory_order_acquire);
    if (!make_view(db, t, p, g, v))
        return false;
    *ret_gen = gen;
    return true;
}

static bool gen_same(struct shm_part *p, uint32_t gen)
{
    /* Acquire fence: all block reads complete before gen is re-read. */
    atomic_thread_fence(memory_order_acquire);
    return atomic_load_explicit(&p->gen, memory_order_relaxed) == gen;
}

/* Slow path for one key: fresh snapshots, bounded retries. */
static int read_key(hps_shmdb_t *db, const struct shm_table *t, uint64_t key, float *out,
                    uint32_t clock)
{
    uint64_t h = hps_rrxmrrxmsx_0(key);
    struct shm_part *p = &hps__parts(db, t)[h % t->num_partitions];
    for (int tries = 0; tries < READ_RETRIES; tries++) {
        struct view v;
        uint32_t gen;
        int64_t slot = -1;
        if (snapshot(db, t, p, &gen, &v)) {
            int r = read_once(db, &v, key, h, out, &slot);
            if (r >= 0 && gen_same(p, gen)) {
                if (r == 1 && v.stamp)
                    touch(&v, (uint64_t)slot, t->policy, clock);
                return r;
            }
        }
        cpu_relax();
    }
    return 0; /* still busy: report missing, the layer below answers */
}

struct lookup_job {
    hps_shmdb_t *db;
    const struct shm_table *t;
    const void *keys;
    float *values;
    uint8_t *found;
    size_t n;
    unsigned parts;
    uint32_t clock;
    size_t hits[64];
};

/* Fast path for a group of keys: hash and prefetch every home bucket, then
 * probe the home buckets and prefetch the rows, then copy and validate.  A
 * key that needs more than its home bucket, or whose read was disturbed,
 * goes through read_key(). */
static size_t lookup_group(hps_shmdb_t *db, const struct shm_table *t, struct view *views,
                           uint32_t *gens, const void *keys, size_t n, float *values,
                           uint8_t *found, uint32_t clock)
{
    uint64_t key[GROUP], h[GROUP];
    uint32_t pi[GROUP], bi[GROUP], ver[GROUP];
    int slot[GROUP];
    size_t hits = 0;
    const uint32_t dim = t->dim, P = t->num_partitions;
    for (size_t i = 0; i < n; i++) {
        key[i] = key_at(keys, t->key_bytes, i);
        h[i] = hps_rrxmrrxmsx_0(key[i]);
        pi[i] = (uint32_t)(h[i] % P);
        bi[i] = home_of(h[i], views[pi[i]].nb);
        __builtin_prefetch(&views[pi[i]].b[bi[i]]);
        if (views[pi[i]].rowid)
            __builtin_prefetch(&views[pi[i]].rowid[(uint64_t)bi[i] * HPS_BUCKET_SLOTS]);
    }
    for (size_t i = 0; i < n; i++) {
        struct view *v = &views[pi[i]];
        struct shm_bucket *b = &v->b[bi[i]];
        ver[i] = atomic_load_explicit(&b->ver, memory_order_acquire);
        slot[i] = (ver[i] & 1) ? -2 : find_in_bucket(b, key[i]);
        if (slot[i] >= 0) {
            const char *r =
                (const char *)row_ptr(db, v, (uint64_t)bi[i] * HPS_BUCKET_SLOTS + slot[i]);
            if (!r) {
                slot[i] = -2;
                continue;
            }
            for (uint32_t off = 0; off < dim * sizeof(float); off += HPS_CACHELINE)
                __builtin_prefetch(r + off);
        } else if (slot[i] == -1 && atomic_load_explicit(&b->ovf, memory_order_relaxed)) {
            slot[i] = -2; /* may live further on: slow path */
        }
    }
    for (size_t i = 0; i < n; i++) {
        struct view *v = &views[pi[i]];
        struct shm_bucket *b = &v->b[bi[i]];
        float *out = values + i * dim;
        int r = slot[i] >= 0 ? 1 : 0;
        if (slot[i] >= 0) {
            uint64_t s = (uint64_t)bi[i] * HPS_BUCKET_SLOTS + (unsigned)slot[i];
            const float *src = row_ptr(db, v, s);
            if (src)
                memcpy(out, src, (size_t)dim * sizeof(float));
            /* Acquire fence: the copy completes before the version re-read. */
            atomic_thread_fence(memory_order_acquire);
            if (!src || atomic_load_explicit(&b->ver, memory_order_relaxed) != ver[i] ||
                atomic_load_explicit(&b->key[slot[i]], memory_order_relaxed) != key[i])
                r = -1;
            else if (v->stamp)
                touch(v, s, t->policy, clock);
        } else if (slot[i] == -1) {
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load_explicit(&b->ver, memory_order_relaxed) != ver[i])
                r = -1;
        } else {
            r = -1;
        }
        if (r >= 0 && !gen_same(&hps__parts(db, t)[pi[i]], gens[pi[i]]))
            r = -1;
        if (r < 0)
            r = read_key(db, t, key[i], out, clock);
        if (found)
            found[i] = (uint8_t)r;
        hits += (size_t)r;
    }
    return hits;
}

static size_t lookup_range(hps_shmdb_t *db, const struct shm_table *t, const void *keys, size_t n,
                           float *values, uint8_t *found, uint32_t clock)
{
    struct view views[HPS_SHMDB_MAX_PARTITIONS];
    uint32_t gens[HPS_SHMDB_MAX_PARTITIONS];
    struct shm_part *parts = hps__parts(db, t);
    bool ok = true;
    for (uint32_t i = 0; i < t->num_partitions && ok; i++)
        ok = snapshot(db, t, &parts[i], &gens[i], &views[i]);
    size_t hits = 0;
    for (size_t i = 0; i < n; i += GROUP) {
        size_t m = n - i < GROUP ? n - i : GROUP;
        const void *k = (const char *)keys + i * t->key_bytes;
        float *out = values + i * t->dim;
        uint8_t *f = found ? found + i : NULL;
        if (ok) {
            hits += lookup_group(db, t, views, gens, k, m, out, f, clock);
            continue;
        }
        for (size_t j = 0; j < m; j++) { /* geometry was changing: slow path */
            int r = read_key(db, t, key_at(k, t->key_bytes, j), out + j * t->dim, clock);
            if (f)
                f[j] = (uint8_t)r;
            hits += (size_t)r;
        }
    }
    return hits;
}

static void lookup_task(void *arg, unsigned i)
{
    struct lookup_job *j = arg;
    size_t per = (j->n + j->parts - 1) / j->parts;
    size_t lo = (size_t)i * per, hi = lo + per > j->n ? j->n : lo + per;
    if (lo >= hi)
        return;
    j->hits[i] =
        lookup_range(j->db, j->t, (const char *)j->keys + lo * j->t->key_bytes, hi - lo,
                     j->values + lo * j->t->dim, j->found ? j->found + lo : NULL, j->clock);
}

hps_err_t hps_shmdb_lookup(hps_shmdb_t *db, uint32_t id, size_t n, const void *keys, float *values,
                           uint8_t *found, size_t *ret_hits)
{
    struct shm_table *t = hps__table(db, id);
    if (!t)
        return HPS_ENOTFOUND;
    struct lookup_job j = {
        .db = db, .t = t, .keys = keys, .values = values, .found = found, .n = n, .parts = 1};
    /* Relaxed: the LRU clock only orders accesses roughly. */
    j.clock = (uint32_t)atomic_fetch_add_explicit(&t->clock, 1, memory_order_relaxed);
    size_t hits = 0;
    if (db->pool && n >= 2 * GROUP) {
        j.parts = db->nthreads < 64 ? db->nthreads : 64;
        hps__pool_run(db->pool, j.parts, lookup_task, &j);
        for (unsigned i = 0; i < j.parts; i++)
            hits += j.hits[i];
    } else {
        hits = lookup_range(db, t, keys, n, values, found, j.clock);
    }
    /* Relaxed: statistics. */
    atomic_fetch_add_explicit(&t->lookups, n, memory_order_relaxed);
    atomic_fetch_add_explicit(&t->hits, hits, memory_order_relaxed);
    if (ret_hits)
        *ret_hits = hits;
    return 0;
}
