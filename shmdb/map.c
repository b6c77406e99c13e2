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
 * anything), so a changed gen also means retry.  A table stored in another
 * type than fp32 is decoded while it is copied (into the caller's output,
 * which a failed validation overwrites on the retry, or with the default),
 * so a torn row is never returned, decoded or not.  Every offset derived from
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

#include "wview.h"

#define READ_RETRIES 2048 /* bounded: about 50 us of spinning, then "missing" */

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* ---- geometry ---------------------------------------------------------- */

/* Readers use the writers' view type (wview.h); a reader's view is built
 * only from a snapshot of the geometry word, and every offset is
 * bounds-checked. */

/* Build a view of the block in geometry word g; false if out of bounds. */
static bool make_view(hps_shmdb_t *db, const struct shm_table *t, struct shm_part *p, uint64_t g,
                      struct wview *v)
{
    uint64_t blk = HPS_GEOM_BLK(g);
    uint32_t nb = HPS_GEOM_NB(g);
    if (nb == 0 || !hps__shmdb_in_bounds(db, blk, hps__shmdb_block_bytes(t, nb)))
        return false;
    hps__shmdb_wview(db, t, p, blk, nb, v);
    if (hps__shmdb_layout_paged(t->layout) &&
        !hps__shmdb_in_bounds(db, p->pagetab, HPS_MAX_ROW_PAGES * sizeof(struct shm_page)))
        v->pages = NULL;
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

/* ---- readers ----------------------------------------------------------- */

/* Slot of key in bucket b, or -1.  Branch-free over the seven keys: a
 * data-dependent early exit mispredicts about once per lookup. */
#if defined(__SSE2__)
/* Two keys compared at once: equal 32-bit halves, then both halves. */
static inline unsigned eq2(__m128i pair, __m128i k)
{
    __m128i c = _mm_cmpeq_epi32(pair, k);
    c = _mm_and_si128(c, _mm_shuffle_epi32(c, _MM_SHUFFLE(2, 3, 0, 1)));
    return (unsigned)_mm_movemask_pd(_mm_castsi128_pd(c));
}
#endif

/* Slot of key in bucket b, or -1.  The seven keys are compared without
 * branches (SSE2 where available).  The loads are plain: a reader's copy is
 * validated by the bucket version afterwards, like the row it copies. */
static inline int find_in_bucket(struct shm_bucket *b, uint64_t key)
{
    unsigned occ = atomic_load_explicit(&b->occ, memory_order_relaxed);
#if defined(__SSE2__)
    const char *kp = (const char *)b->key;
    __m128i k = _mm_set1_epi64x((long long)key);
    unsigned eq = eq2(_mm_loadu_si128((const __m128i *)kp), k) |
                  eq2(_mm_loadu_si128((const __m128i *)(kp + 16)), k) << 2 |
                  eq2(_mm_loadu_si128((const __m128i *)(kp + 32)), k) << 4 |
                  (eq2(_mm_loadl_epi64((const __m128i *)(kp + 48)), k) & 1) << 6;
#else
#define EQ(s) ((unsigned)(atomic_load_explicit(&b->key[s], memory_order_relaxed) == key) << (s))
    unsigned eq = EQ(0) | EQ(1) | EQ(2) | EQ(3) | EQ(4) | EQ(5) | EQ(6);
#undef EQ
#endif
    _Static_assert(HPS_BUCKET_SLOTS == 7, "unrolled for 7 slots");
    eq &= occ;
    return eq ? __builtin_ctz(eq) : -1;
}

static inline void touch(const struct wview *v, uint64_t slot, uint32_t policy, uint32_t clock)
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
 * -1 torn or busy (retry).  The row is decoded into out (dim floats), or
 * with raw, copied as stored (vbytes bytes). */
static int read_once(const struct wview *v, uint64_t key, uint64_t h, void *out, bool raw,
                     int64_t *ret_slot)
{
    uint32_t bi = home_of(h, v->nb);
    for (uint32_t step = 0; step < v->nb; step++, bi = next_bucket(bi, v->nb)) {
        struct shm_bucket *b = BKT(v, bi);
        /* Acquire: the data reads below happen after this version read. */
        uint32_t v1 = atomic_load_explicit(&b->ver, memory_order_acquire);
        if (v1 & 1)
            return -1;
        int s = find_in_bucket(b, key);
        unsigned ovf = atomic_load_explicit(&b->ovf, memory_order_relaxed);
        if (s >= 0) {
            uint64_t slot = (uint64_t)bi * HPS_BUCKET_SLOTS + (unsigned)s;
            const uint8_t *src = hps__shmdb_row(v, slot);
            if (!src)
                return -1;
            if (raw)
                memcpy(out, src, v->vbytes);
            else
                hps__shmdb_decode_row(v, src, out);
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
                     uint32_t *ret_gen, struct wview *v)
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

/* Slow path for one key: fresh snapshots, bounded retries.  With raw, out
 * receives the stored bytes and no access stamp is touched. */
static int read_key(hps_shmdb_t *db, const struct shm_table *t, uint64_t key, void *out, bool raw,
                    uint32_t clock)
{
    uint64_t h = hps_rrxmrrxmsx_0(key);
    struct shm_part *p = &hps__shmdb_parts(db, t)[h % t->num_partitions];
    for (int tries = 0; tries < READ_RETRIES; tries++) {
        struct wview v;
        uint32_t gen;
        int64_t slot = -1;
        if (snapshot(db, t, p, &gen, &v)) {
            int r = read_once(&v, key, h, out, raw, &slot);
            if (r >= 0 && gen_same(p, gen)) {
                if (r == 1 && v.stamp && !raw)
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

/* h % d without a division (Lemire, Kaser, Kurz: "Faster remainder by
 * direct computation", 2019): m = 2^128 / d + 1 (computed once per batch);
 * exact for every 64-bit h when d < 2^32. */
static inline __uint128_t fastmod_magic(uint32_t d)
{
    return ~(__uint128_t)0 / d + 1;
}

static inline uint32_t fastmod(uint64_t h, __uint128_t m, uint32_t d)
{
    __uint128_t low = m * h; /* wraps mod 2^128 */
    /* high 64 bits of low * d, split to stay within 128-bit arithmetic */
    __uint128_t lo_lo = (low & UINT64_MAX) * d;
    __uint128_t hi = (low >> 64) * d + (lo_lo >> 64);
    return (uint32_t)(hi >> 64);
}

/* Copy one row.  Constant sizes for the common small dims compile to a
 * few vector moves; a libc call costs more than the copy itself there. */
static inline void copy_row(float *dst, const float *src, uint32_t dim)
{
    switch (dim) {
    case 1:
        memcpy(dst, src, 4);
        break;
    case 2:
        memcpy(dst, src, 8);
        break;
    case 4:
        memcpy(dst, src, 16);
        break;
    case 8:
        memcpy(dst, src, 32);
        break;
    case 16:
        memcpy(dst, src, 64);
        break;
    default:
        memcpy(dst, src, (size_t)dim * sizeof(float));
    }
}

/* A missing key's row gets the table's default value in every element
 * (HugeCTR's default_value_for_each_table); whatever a failed read had
 * copied there is overwritten. */
static void fill_default(float *out, uint32_t dim, float v)
{
    for (uint32_t i = 0; i < dim; i++)
        out[i] = v;
}

/* One key in flight in the lookup pipeline. */
struct flight {
    uint64_t key;
    uint64_t h;
    uint32_t pi; /* partition */
    uint32_t bi; /* bucket holding the key (home until found elsewhere) */
    uint32_t ver;
    int slot; /* >= 0 found, -1 missing, -2 retry through read_key, 3: done */
    int done; /* stage B finished the key itself (overflow chain): result */
};

/* The row ids of bucket bi: the line after the bucket (ROWS) or in the
 * row-id array (ROWS_SOA). */
static inline const void *rowids_of(const struct wview *v, uint32_t bi)
{
    return (const uint8_t *)v->rowid + (uint64_t)bi * v->vstride;
}

/* Stage A: hash, pick the home bucket, prefetch it (and its row ids). */
static void stage_a(const struct shm_table *t, __uint128_t pm, struct wview *views,
                    struct flight *f, uint64_t key)
{
    f->key = key;
    f->h = hps_rrxmrrxmsx_0(key);
    f->pi = fastmod(f->h, pm, t->num_partitions);
    struct wview *v = &views[f->pi];
    f->bi = home_of(f->h, v->nb);
    __builtin_prefetch(BKT(v, f->bi));
    if (v->rowid)
        __builtin_prefetch(rowids_of(v, f->bi));
}

/* Stage B result: keep probing at the next bucket (already prefetched). */
#define PROBE_NEXT (-3)
/* Probe passes run together before the rest go the slow way. */
#define MAX_PASSES 16

/* Prefetch a bucket (and, for row ids, the line of its row ids). */
static inline void prefetch_bucket(const struct wview *v, uint32_t bi)
{
    __builtin_prefetch(BKT(v, bi));
    if (v->rowid)
        __builtin_prefetch(rowids_of(v, bi));
}

/* Stage B: probe the key's current bucket.  Found: prefetch the row (its
 * first line into L1, the rest into L2: a whole row per key into L1 would
 * exhaust the line-fill buffers).  Not here but the bucket overflowed:
 * move to the next bucket and prefetch it, to be probed in the next pass
 * together with every other displaced key of the group. */
static void stage_b(struct wview *views, struct flight *f)
{
    struct wview *v = &views[f->pi];
    struct shm_bucket *b = BKT(v, f->bi);
    f->ver = atomic_load_explicit(&b->ver, memory_order_acquire);
    if (f->ver & 1) {
        f->slot = -2;
        return;
    }
    f->slot = find_in_bucket(b, f->key);
    if (f->slot >= 0) {
        const char *r =
            (const char *)hps__shmdb_row(v, (uint64_t)f->bi * HPS_BUCKET_SLOTS + (unsigned)f->slot);
        if (!r) {
            f->slot = -2;
            return;
        }
        __builtin_prefetch(r);
        for (uint32_t off = HPS_CACHELINE; off < v->vbytes; off += HPS_CACHELINE)
            __builtin_prefetch(r + off, 0, 2);
    } else if (atomic_load_explicit(&b->ovf, memory_order_relaxed)) {
        /* Acquire fence: the ovf read is validated like a row copy. */
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&b->ver, memory_order_relaxed) != f->ver) {
            f->slot = -2;
            return;
        }
        f->slot = PROBE_NEXT;
        f->bi = next_bucket(f->bi, v->nb);
        prefetch_bucket(v, f->bi);
    }
}

/* Stage C: copy the row, validate the bucket version and the partition's
 * gen; anything disturbed goes through read_key.  Returns 1 hit, 0 miss. */
static int stage_c(hps_shmdb_t *db, const struct shm_table *t, struct wview *views,
                   const uint32_t *gens, struct flight *f, float *out, uint32_t clock)
{
    struct wview *v = &views[f->pi];
    struct shm_bucket *b = BKT(v, f->bi);
    int r = f->slot >= 0 ? 1 : (f->slot == -1 ? 0 : -1);
    uint64_t s = (uint64_t)f->bi * HPS_BUCKET_SLOTS + (unsigned)(f->slot >= 0 ? f->slot : 0);
    if (r == 1) {
        const uint8_t *src = hps__shmdb_row(v, s);
        if (src && v->dtype == HPS_DTYPE_FP32)
            copy_row(out, (const float *)src, v->dim);
        else if (src)
            hps__shmdb_decode_row(v, src, out);
        /* Acquire fence: the copy completes before the version re-read. */
        atomic_thread_fence(memory_order_acquire);
        if (!src || atomic_load_explicit(&b->ver, memory_order_relaxed) != f->ver)
            r = -1;
    } else if (r == 0) {
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&b->ver, memory_order_relaxed) != f->ver)
            r = -1;
    }
    if (r >= 0 && !gen_same(&hps__shmdb_parts(db, t)[f->pi], gens[f->pi]))
        r = -1;
    if (r < 0)
        return read_key(db, t, f->key, out, false, clock);
    if (r == 1 && v->stamp)
        touch(v, s, t->policy, clock);
    return r;
}

/* Group prefetching (Chen et al., "Improving hash join performance through
 * prefetching"): each stage runs over a whole group of keys in a tight loop,
 * so a group's bucket misses, then its row misses, are all in flight at
 * once.  Stage A hashes and prefetches buckets, stage B probes them and
 * prefetches rows, stage C copies and validates. */
static size_t lookup_groups(hps_shmdb_t *db, const struct shm_table *t, struct wview *views,
                            uint32_t *gens, const void *keys, size_t n, float *values,
                            uint8_t *found, uint32_t clock)
{
    enum { G = 32 };
    struct flight fl[G];
    const uint32_t dim = t->dim;
    const __uint128_t pm = fastmod_magic(t->num_partitions);
    size_t hits = 0;
    for (size_t base = 0; base < n; base += G) {
        size_t m = n - base < G ? n - base : G;
        for (size_t i = 0; i < m; i++)
            stage_a(t, pm, views, &fl[i], key_at(keys, t->key_bytes, base + i));
        uint8_t todo[G];
        size_t nt = m;
        for (size_t i = 0; i < m; i++)
            todo[i] = (uint8_t)i;
        for (int pass = 0; nt > 0 && pass < MAX_PASSES; pass++) {
            size_t left = 0;
            for (size_t k = 0; k < nt; k++) {
                stage_b(views, &fl[todo[k]]);
                if (fl[todo[k]].slot == PROBE_NEXT)
                    todo[left++] = todo[k];
            }
            nt = left;
        }
        for (size_t k = 0; k < nt; k++) /* very long chains: the slow path */
            fl[todo[k]].slot = -2;
        for (size_t i = 0; i < m; i++) {
            float *out = values + (base + i) * dim;
            int r = stage_c(db, t, views, gens, &fl[i], out, clock);
            if (r == 0)
                fill_default(out, dim, t->default_value);
            if (found)
                found[base + i] = (uint8_t)r;
            hits += (size_t)r;
        }
    }
    return hits;
}

static size_t lookup_range(hps_shmdb_t *db, const struct shm_table *t, const void *keys, size_t n,
                           float *values, uint8_t *found, uint32_t clock)
{
    struct wview views[HPS_SHMDB_MAX_PARTITIONS];
    uint32_t gens[HPS_SHMDB_MAX_PARTITIONS];
    struct shm_part *parts = hps__shmdb_parts(db, t);
    bool ok = true;
    for (uint32_t i = 0; i < t->num_partitions && ok; i++)
        ok = snapshot(db, t, &parts[i], &gens[i], &views[i]);
    if (ok)
        return lookup_groups(db, t, views, gens, keys, n, values, found, clock);
    size_t hits = 0; /* geometry was changing: key by key */
    for (size_t j = 0; j < n; j++) {
        int r = read_key(db, t, key_at(keys, t->key_bytes, j), values + j * t->dim, false, clock);
        if (r == 0)
            fill_default(values + j * t->dim, t->dim, t->default_value);
        if (found)
            found[j] = (uint8_t)r;
        hits += (size_t)r;
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
    return hps_shmdb_lookup_ex(db, id, n, keys, values, found, ret_hits, 0);
}

/* Add to t's lookups and hits counters (relaxed: statistics). */
static void count_lookups(struct shm_table *t, uint64_t lookups, uint64_t hits)
{
    atomic_fetch_add_explicit(&t->lookups, lookups, memory_order_relaxed);
    atomic_fetch_add_explicit(&t->hits, hits, memory_order_relaxed);
}

hps_err_t hps_shmdb_count_lookups(hps_shmdb_t *db, uint32_t id, uint64_t lookups, uint64_t hits)
{
    struct shm_table *t = hps__shmdb_table(db, id);
    if (!t)
        return HPS_ENOTFOUND;
    count_lookups(t, lookups, hits);
    return 0;
}

hps_err_t hps_shmdb_lookup_ex(hps_shmdb_t *db, uint32_t id, size_t n, const void *keys,
                              float *values, uint8_t *found, size_t *ret_hits, unsigned flags)
{
    if (flags & ~(unsigned)HPS_SHMDB_LOOKUP_UNCOUNTED)
        return HPS_EINVAL; /* a flag this version does not know: never ignored */
    struct shm_table *t = hps__shmdb_table(db, id);
    if (!t)
        return HPS_ENOTFOUND;
    struct lookup_job j = {
        .db = db, .t = t, .keys = keys, .values = values, .found = found, .n = n, .parts = 1};
    /* Relaxed: the LRU clock only orders accesses roughly. */
    j.clock = (uint32_t)atomic_fetch_add_explicit(&t->clock, 1, memory_order_relaxed);
    size_t hits = 0;
    if (db->pool && n >= 64) {
        j.parts = db->nthreads < 64 ? db->nthreads : 64;
        hps__shmdb_pool_run(db->pool, j.parts, lookup_task, &j);
        for (unsigned i = 0; i < j.parts; i++)
            hits += j.hits[i];
    } else {
        hits = lookup_range(db, t, keys, n, values, found, j.clock);
    }
    if (!(flags & HPS_SHMDB_LOOKUP_UNCOUNTED))
        count_lookups(t, n, hits);
    if (ret_hits)
        *ret_hits = hits;
    return 0;
}

hps_err_t hps_shmdb_lookup_stored(hps_shmdb_t *db, uint32_t id, uint64_t key, void *out,
                                  size_t out_len, bool *ret_found)
{
    struct shm_table *t = hps__shmdb_table(db, id);
    if (!t)
        return HPS_ENOTFOUND;
    size_t rb = hps_dtype_row_bytes((hps_dtype_t)t->dtype, t->dim);
    if (!out || !ret_found || out_len < rb)
        return HPS_EINVAL;
    if (t->key_bytes == 4 && key > UINT32_MAX) {
        *ret_found = false;
        return 0;
    }
    /* A row of vbytes (>= rb): the copy lands here first, so out is
     * written only with a validated row. */
    uint8_t *buf = malloc(hps__shmdb_vbytes(t->dtype, t->dim));
    if (!buf)
        return -ENOMEM;
    int r = read_key(db, t, key, buf, true, 0);
    if (r == 1)
        memcpy(out, buf, rb);
    free(buf);
    *ret_found = r == 1;
    return 0;
}
