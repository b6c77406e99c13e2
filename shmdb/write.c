/*
 * write.c -- the writer side of a partition: insert, update, erase, clear,
 * growth (rehash), overflow eviction, row pages and crash repair.
 *
 * Every function here runs with the partition's robust mutex held, so only
 * readers run concurrently; they are protected by bucket versions (see
 * map.c).  Inside a bucket write the order is: version odd, row, key,
 * occupancy bit, version even, so a crash leaves either no visible row or a
 * bucket whose version is odd, which repair empties.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "wview.h"

/* ---- bucket write protocol --------------------------------------------- */

void hps__shmdb_bucket_begin(struct shm_bucket *b)
{
    uint32_t v = atomic_load_explicit(&b->ver, memory_order_relaxed);
    atomic_store_explicit(&b->ver, v + 1, memory_order_relaxed);
    /* Release fence: readers that see any data write below see the odd
     * version first (and retry). */
    atomic_thread_fence(memory_order_release);
}

void hps__shmdb_bucket_end(struct shm_bucket *b)
{
    uint32_t v = atomic_load_explicit(&b->ver, memory_order_relaxed);
    /* Release: the row and key writes happen before the even version. */
    atomic_store_explicit(&b->ver, v + 1, memory_order_release);
}

/* ---- geometry ---------------------------------------------------------- */

uint64_t hps__shmdb_block_bytes(const struct shm_table *t, uint32_t nb)
{
    return hps__shmdb_geo(t->layout, hps__shmdb_vbytes(t->dtype, t->dim), t->policy, nb).bytes;
}

void hps__shmdb_wview(hps_shmdb_t *db, const struct shm_table *t, struct shm_part *p, uint64_t blk,
                      uint32_t nb, struct wview *w)
{
    uint32_t vbytes = hps__shmdb_vbytes(t->dtype, t->dim);
    struct shm_geo g = hps__shmdb_geo(t->layout, vbytes, t->policy, nb);
    uint8_t *base = hps__shmdb_ptr(db, blk);
    w->db = db;
    w->t = t;
    w->p = p;
    w->b = (struct shm_bucket *)base;
    w->nb = nb;
    w->dim = t->dim;
    w->dtype = t->dtype;
    w->vbytes = vbytes;
    w->gstride = g.gstride;
    w->vstride = g.vstride;
    w->vals = !hps__shmdb_layout_paged(t->layout) ? base + g.voff : NULL;
    w->rowid = hps__shmdb_layout_paged(t->layout) ? (_Atomic uint32_t *)(base + g.voff) : NULL;
    w->stamp = t->policy != HPS_EVICT_RANDOM ? (_Atomic uint32_t *)(base + g.stamp_off) : NULL;
    w->pages =
        p->pagetab && !(p->pagetab & 7) &&
                hps__shmdb_in_bounds(db, p->pagetab, HPS_MAX_ROW_PAGES * sizeof(struct shm_page))
            ? hps__shmdb_ptr(db, p->pagetab)
            : NULL;
}

bool hps__shmdb_wview_current(hps_shmdb_t *db, const struct shm_table *t, struct shm_part *p,
                              struct wview *w)
{
    uint64_t g = atomic_load_explicit(&p->geom, memory_order_relaxed);
    uint64_t blk = HPS_GEOM_BLK(g);
    uint32_t nb = HPS_GEOM_NB(g);
    if (nb == 0 || !hps__shmdb_in_bounds(db, blk, hps__shmdb_block_bytes(t, nb)))
        return false;
    hps__shmdb_wview(db, t, p, blk, nb, w);
    return true;
}

static inline uint32_t home_of(uint64_t key, uint32_t nb)
{
    uint64_t h = hps_rrxmrrxmsx_0(key);
    return (uint32_t)(((h >> 32) * (uint64_t)nb) >> 32);
}

static inline uint32_t next_bucket(uint32_t b, uint32_t nb)
{
    return b + 1 == nb ? 0 : b + 1;
}

/* ---- row pages (indirect storage) -------------------------------------- */

static uint8_t *row_by_id(const struct wview *w, uint32_t r)
{
    struct shm_page *pe = &w->pages[r >> HPS_PAGE_SHIFT];
    return (uint8_t *)hps__shmdb_ptr(w->db,
                                     pe->off + (uint64_t)(r & (HPS_PAGE_MAX_ROWS - 1)) * w->vbytes);
}

/*
 * Row-page sizing.  Pages never move (a rehash copies row ids only), so
 * every row a page holds beyond the partition's live rows is memory lost;
 * pages follow what the partition can need.
 *
 * Unsized table (expected_rows 0): 64 rows, then a quarter of what the
 * pages hold (at least 256 rows, at most allocation_rate bytes): geometric
 * growth, so an unsized partition wastes at most a fifth and stays far
 * below HPS_MAX_ROW_PAGES.
 *
 * Sized table: each partition is sized for e rows (hps__shmdb_part_expected).
 * Keys hash uniformly to the P partitions, so when the table holds its
 * expected N = e * P rows a partition holds Binomial(N, 1/P) of them: mean
 * e, sigma = sqrt(e * (1 - 1/P)), 0 for P = 1.  Relative to e the spread
 * shrinks with scale: sigma = 242 rows (0.39%) at e = 62,500 and P = 16,
 * 106 (0.71%) at e = 15,000 and P = 4.  The old first page of e + 2% + 64
 * rows wasted 2% everywhere; now:
 *  - the first page holds e rows (e + k sigma with k = 0).  Slack above
 *    the mean is lost in every partition that stays below it, on average
 *    E[(e + k sigma - X)+] = sigma (k Phi(k) + phi(k)): 0.40 sigma at
 *    k = 0, 1.08 at k = 1, 2.01 at k = 2.  The partitions above it take
 *    overflow pages of s rows, which waste s / 2 on average; an overflow
 *    page costs nothing else (its entry in the page table exists anyway,
 *    and a row id names its page, so lookups do not slow down).  The
 *    expected loss sigma (k Phi(k) + phi(k)) + (1 - Phi(k)) s / 2 is then
 *    0.52 sigma at k = 0 (s = sigma / 2) against 1.12 sigma at k = 1.  A
 *    first page below e would save a little more, but would give overflow
 *    pages to every partition of a table filled exactly as sized (P = 1
 *    included);
 *  - overflow pages hold s = max(sigma / 2, 64) rows while the pages hold
 *    fewer than e + 4 sigma + 4 s rows: at most about twelve small pages.
 *    A partition more than 4 sigma above e by chance has odds of 3e-5; past
 *    that the table holds more rows than it was sized for, and its pages
 *    grow geometrically as an unsized table's;
 *  - a partition whose e exceeds HPS_PAGE_MAX_ROWS takes full pages up to
 *    e first, and no page reaches past the overflow margin (a partition
 *    never holds more rows).
 * At e = 62,500, P = 16 the pages then hold about 0.2% more rows than
 * live, at e = 15,000, P = 4 about 0.4% (test-shmdb-dtype measures it).
 */
#define PAGE_FIRST_UNSIZED 64  /* rows of an unsized partition's first page */
#define PAGE_MIN_GROWTH    256 /* least rows of a geometric page */
#define PAGE_MIN_OVERFLOW  64  /* least rows of a sized partition's overflow page */
#define PAGE_SPREAD_SIGMAS 4   /* small overflow pages up to e + 4 sigma (+ 4 pages) */

uint64_t hps__shmdb_part_expected(const struct shm_table *t)
{
    uint64_t e = t->num_partitions ? t->expected_rows / t->num_partitions : 0;
    return t->margin != UINT64_MAX && e > t->margin ? t->margin : e;
}

/* floor(sqrt(x)), bit by bit (shmdb does not link libm). */
static uint64_t isqrt64(uint64_t x)
{
    uint64_t r = 0, bit = 1ull << 62;
    while (bit > x)
        bit >>= 2;
    for (; bit; bit >>= 2) {
        if (x >= r + bit) {
            x -= r + bit;
            r = (r >> 1) + bit;
        } else {
            r >>= 1;
        }
    }
    return r;
}

/* Rows the partition's pages hold. */
static uint64_t page_rows(const struct wview *w)
{
    uint64_t have = 0;
    uint32_t np = atomic_load_explicit(&w->p->npages, memory_order_relaxed);
    for (uint32_t i = 0; i < np; i++)
        have += w->pages[i].rows;
    return have;
}

/* Rows of the partition's next row page (see above). */
static uint32_t next_page_rows(const struct wview *w)
{
    const struct shm_table *t = w->t;
    uint64_t e = hps__shmdb_part_expected(t), have = page_rows(w), rows;
    uint64_t sigma = e ? isqrt64(e - e / t->num_partitions) : 0;
    uint64_t small = sigma / 2 > PAGE_MIN_OVERFLOW ? sigma / 2 : PAGE_MIN_OVERFLOW;
    if (e == 0 && have == 0) {
        rows = PAGE_FIRST_UNSIZED;
    } else if (have < e) {
        rows = e - have;
    } else if (e && have < e + PAGE_SPREAD_SIGMAS * (sigma + small)) {
        rows = small;
    } else {
        rows = have / 4;
        uint64_t cap = w->db->hdr->allocation_rate / w->vbytes;
        if (rows > cap)
            rows = cap;
        if (rows < PAGE_MIN_GROWTH)
            rows = PAGE_MIN_GROWTH;
    }
    /* A sized partition never holds more rows than its margin (ops.c evicts
     * first), so no page reaches past it. */
    if (e && t->margin != UINT64_MAX && have < t->margin && have + rows > t->margin)
        rows = t->margin - have;
    return rows > HPS_PAGE_MAX_ROWS ? HPS_PAGE_MAX_ROWS : (uint32_t)rows;
}

static hps_err_t add_page(struct wview *w)
{
    struct shm_part *p = w->p;
    if (p->npages >= HPS_MAX_ROW_PAGES)
        return HPS_ENOSPC;
    uint32_t rows = next_page_rows(w);
    uint64_t off, bytes = (uint64_t)rows * w->vbytes;
    hps_err_t rc = hps__shmdb_alloc(w->db, bytes, &off);
    if (rc < 0)
        return rc;
    uint32_t n = atomic_load_explicit(&p->npages, memory_order_relaxed);
    w->pages[n] = (struct shm_page){.off = off, .rows = rows};
    p->page_bytes += hps__shmdb_round_up(bytes, HPS_CACHELINE);
    p->last_fill = 0;
    /* Release: the page entry is visible before a row id can point into it. */
    atomic_store_explicit(&p->npages, n + 1, memory_order_release);
    return 0;
}

static hps_err_t alloc_row(struct wview *w, uint32_t *ret)
{
    struct shm_part *p = w->p;
    if (p->free_row != HPS_NO_ROW) {
        uint32_t r = p->free_row;
        memcpy(&p->free_row, row_by_id(w, r), sizeof(uint32_t));
        *ret = r;
        return 0;
    }
    uint32_t n = atomic_load_explicit(&p->npages, memory_order_relaxed);
    if (n == 0 || p->last_fill >= w->pages[n - 1].rows) {
        hps_err_t rc = add_page(w);
        if (rc < 0)
            return rc;
        n++;
    }
    *ret = ((n - 1) << HPS_PAGE_SHIFT) | p->last_fill++;
    return 0;
}

static void free_row(struct wview *w, uint32_t r)
{
    memcpy(row_by_id(w, r), &w->p->free_row, sizeof(uint32_t));
    w->p->free_row = r;
}

/* ---- partition init ---------------------------------------------------- */

static uint32_t buckets_for(uint64_t rows)
{
    uint64_t nb = (uint64_t)((double)rows / (HPS_BUCKET_SLOTS * HPS_TARGET_LOAD)) + 1;
    if (nb < 4)
        nb = 4;
    return nb > (1u << 29) ? (1u << 29) : (uint32_t)nb;
}

hps_err_t hps__shmdb_part_init(hps_shmdb_t *db, const struct shm_table *t, struct shm_part *p)
{
    uint32_t nb = buckets_for(hps__shmdb_part_expected(t));
    uint64_t blk, bytes = hps__shmdb_block_bytes(t, nb);
    hps_err_t rc = hps__shmdb_alloc(db, bytes, &blk);
    if (rc < 0)
        return rc;
    p->blk_bytes = bytes;
    p->free_row = HPS_NO_ROW;
    atomic_store_explicit(&p->geom, HPS_GEOM(blk, nb), memory_order_release);
    if (!hps__shmdb_layout_paged(t->layout))
        return 0;
    rc = hps__shmdb_alloc(db, HPS_MAX_ROW_PAGES * sizeof(struct shm_page), &p->pagetab);
    if (rc < 0)
        return rc;
    struct wview w;
    hps__shmdb_wview(db, t, p, blk, nb, &w);
    return add_page(&w);
}

/* ---- slots ------------------------------------------------------------- */

int hps__shmdb_wfind(const struct wview *w, uint64_t key, uint32_t *ret_bucket)
{
    uint32_t bi = home_of(key, w->nb);
    for (uint32_t step = 0; step < w->nb; step++, bi = next_bucket(bi, w->nb)) {
        struct shm_bucket *b = BKT(w, bi);
        for (unsigned m = hps__shmdb_occ(b); m; m &= m - 1) {
            int s = __builtin_ctz(m);
            if (atomic_load_explicit(&b->key[s], memory_order_relaxed) == key) {
                *ret_bucket = bi;
                return s;
            }
        }
        if (atomic_load_explicit(&b->ovf, memory_order_relaxed) == 0)
            return -1;
    }
    return -1;
}

/* Adjust the overflow counts of the buckets from key's home up to (not
 * including) bucket `to`.  Saturated counts stay saturated (until rehash). */
void hps__shmdb_ovf_walk(const struct wview *w, uint64_t key, uint32_t to, int delta)
{
    for (uint32_t bi = home_of(key, w->nb); bi != to; bi = next_bucket(bi, w->nb)) {
        _Atomic uint8_t *o = &BKT(w, bi)->ovf;
        uint8_t c = atomic_load_explicit(o, memory_order_relaxed);
        if (c == 255)
            continue;
        /* Relaxed: readers treat ovf as a hint to keep probing; a reader
         * that sees the old value of an increment misses a key that is not
         * yet published anyway. */
        atomic_store_explicit(o, (uint8_t)(c + delta), memory_order_relaxed);
    }
}

/* Place a new key (not present) into the table.  Its row is copied from
 * stored (vbytes bytes, already in the table's storage type), or, with
 * stored NULL (paged tables only), is row id `row`, which the caller
 * allocated (hps__shmdb_walloc_row) and wrote.  Fails only with HPS_EFULL (no
 * free slot) or a row-page error; a caller's row stays the caller's then. */
static hps_err_t insert(struct wview *w, uint64_t key, const void *stored, uint32_t row,
                        uint32_t stamp)
{
    uint32_t bi = home_of(key, w->nb);
    for (uint32_t step = 0; step < w->nb; step++, bi = next_bucket(bi, w->nb)) {
        struct shm_bucket *b = BKT(w, bi);
        unsigned occ = hps__shmdb_occ(b);
        if (occ == (1u << HPS_BUCKET_SLOTS) - 1)
            continue;
        int s = __builtin_ctz(~occ);
        uint64_t slot = (uint64_t)bi * HPS_BUCKET_SLOTS + (unsigned)s;
        if (w->rowid && stored) {
            hps_err_t rc = alloc_row(w, &row);
            if (rc < 0)
                return rc;
        }
        /* Count the probe before the key becomes visible. */
        hps__shmdb_ovf_walk(w, key, bi, +1);
        hps__shmdb_bucket_begin(b);
        if (w->rowid) {
            if (stored)
                memcpy(row_by_id(w, row), stored, w->vbytes);
            atomic_store_explicit(ROWID(w, slot), row, memory_order_relaxed);
        } else {
            memcpy(VALP(w, slot), stored, w->vbytes);
        }
        if (w->stamp)
            atomic_store_explicit(&w->stamp[slot], stamp, memory_order_relaxed);
        atomic_store_explicit(&b->key[s], key, memory_order_relaxed);
        atomic_store_explicit(&b->occ, (uint8_t)(occ | (1u << s)), memory_order_relaxed);
        hps__shmdb_bucket_end(b);
        atomic_fetch_add_explicit(&w->p->rows, 1, memory_order_relaxed);
        return 0;
    }
    return HPS_EFULL;
}

hps_err_t hps__shmdb_winsert(struct wview *w, uint64_t key, const void *stored, uint32_t stamp)
{
    return insert(w, key, stored, 0, stamp);
}

hps_err_t hps__shmdb_winsert_row(struct wview *w, uint64_t key, uint32_t row, uint32_t stamp)
{
    return insert(w, key, NULL, row, stamp);
}

hps_err_t hps__shmdb_walloc_row(struct wview *w, uint32_t *ret)
{
    return alloc_row(w, ret);
}

void hps__shmdb_wfree_row(struct wview *w, uint32_t r)
{
    free_row(w, r);
}

uint64_t hps__shmdb_wrow_off(const struct wview *w, uint32_t r)
{
    return (uint64_t)(row_by_id(w, r) - w->db->base);
}

/* Remove the key in slot s of bucket bi. */
void hps__shmdb_wremove(struct wview *w, uint32_t bi, int s)
{
    struct shm_bucket *b = BKT(w, bi);
    uint64_t slot = (uint64_t)bi * HPS_BUCKET_SLOTS + (unsigned)s;
    uint64_t key = atomic_load_explicit(&b->key[s], memory_order_relaxed);
    unsigned occ = atomic_load_explicit(&b->occ, memory_order_relaxed);
    hps__shmdb_bucket_begin(b);
    atomic_store_explicit(&b->occ, (uint8_t)(occ & ~(1u << s)), memory_order_relaxed);
    if (w->rowid)
        free_row(w, atomic_load_explicit(ROWID(w, slot), memory_order_relaxed));
    hps__shmdb_bucket_end(b);
    hps__shmdb_ovf_walk(w, key, bi, -1);
    atomic_fetch_sub_explicit(&w->p->rows, 1, memory_order_relaxed);
}

/* ---- growth ------------------------------------------------------------ */

/* Rehash the partition into a block of nb buckets.  The old block stays
 * readable until the new geometry is published; row pages do not move. */
hps_err_t hps__shmdb_wgrow(struct wview *w, uint32_t nb)
{
    hps_shmdb_t *db = w->db;
    const struct shm_table *t = w->t;
    struct shm_part *p = w->p;
    uint64_t blk, bytes = hps__shmdb_block_bytes(t, nb);
    hps_err_t rc = hps__shmdb_alloc(db, bytes, &blk);
    if (rc < 0)
        return rc;
    p->pending = blk;
    struct wview n;
    hps__shmdb_wview(db, t, p, blk, nb, &n);
    uint64_t rows = atomic_load_explicit(&p->rows, memory_order_relaxed);
    for (uint32_t bi = 0; bi < w->nb; bi++) {
        struct shm_bucket *b = BKT(w, bi);
        for (unsigned m = hps__shmdb_occ(b); m; m &= m - 1) {
            int s = __builtin_ctz(m);
            uint64_t slot = (uint64_t)bi * HPS_BUCKET_SLOTS + (unsigned)s;
            uint64_t key = atomic_load_explicit(&b->key[s], memory_order_relaxed);
            hps__shmdb_wplace(&n, key, w, slot);
        }
    }
    atomic_store_explicit(&p->rows, rows, memory_order_relaxed); /* wplace does not count */
    uint64_t old = HPS_GEOM_BLK(atomic_load_explicit(&p->geom, memory_order_relaxed));
    uint64_t old_bytes = p->blk_bytes;
    /* Release: the new block's contents are visible before its geometry. */
    atomic_store_explicit(&p->geom, HPS_GEOM(blk, nb), memory_order_release);
    p->blk_bytes = bytes;
    /* Release: readers that started on the old block see gen move and retry. */
    atomic_fetch_add_explicit(&p->gen, 2, memory_order_release);
    p->pending = 0;
    hps__shmdb_free(db, old, old_bytes);
    *w = n;
    return 0;
}

/* Move one slot's key, row (or row id) and stamp from view `from` into the
 * private, unpublished view n. */
void hps__shmdb_wplace(struct wview *n, uint64_t key, const struct wview *from, uint64_t fslot)
{
    uint32_t bi = home_of(key, n->nb);
    for (;; bi = next_bucket(bi, n->nb)) {
        struct shm_bucket *b = BKT(n, bi);
        unsigned occ = hps__shmdb_occ(b);
        if (occ == (1u << HPS_BUCKET_SLOTS) - 1)
            continue;
        int s = __builtin_ctz(~occ);
        uint64_t slot = (uint64_t)bi * HPS_BUCKET_SLOTS + (unsigned)s;
        hps__shmdb_ovf_walk(n, key, bi, +1);
        if (n->rowid)
            atomic_store_explicit(ROWID(n, slot),
                                  atomic_load_explicit(ROWID(from, fslot), memory_order_relaxed),
                                  memory_order_relaxed);
        else
            memcpy(VALP(n, slot), VALP(from, fslot), n->vbytes);
        if (n->stamp)
            atomic_store_explicit(&n->stamp[slot],
                                  atomic_load_explicit(&from->stamp[fslot], memory_order_relaxed),
                                  memory_order_relaxed);
        atomic_store_explicit(&b->key[s], key, memory_order_relaxed);
        atomic_store_explicit(&b->occ, (uint8_t)(occ | (1u << s)), memory_order_relaxed);
        return;
    }
}
