/*
 * wview.h -- a writer's view of a partition's hash block (private).  Valid
 * only while the partition mutex is held.
 *
 * The writer API below (write.c, evict.c, ops.c): unless a function says
 * otherwise, the caller holds the partition's mutex (shm_part.lock, taken
 * by hps__shmdb_part_lock, which repairs a partition whose last holder died), so
 * one writer per partition runs at a time, in any process; readers run
 * concurrently and are kept consistent by the bucket versions
 * (hps__shmdb_bucket_begin / _end) and shm_part.gen.  Functions that allocate
 * (hps__shmdb_winsert, hps__shmdb_walloc_row, hps__shmdb_winsert_row, hps__shmdb_wgrow) take
 * seg_lock inside hps__shmdb_alloc: lock order partition mutex, then seg_lock.
 * None reports an error other than those listed; none logs.
 */
#ifndef HPS_SHMDB_WVIEW_H
#define HPS_SHMDB_WVIEW_H

#include <string.h>

#include "internal.h"

struct wview {
    hps_shmdb_t *db;
    const struct shm_table *t;
    struct shm_part *p;
    struct shm_bucket *b; /* bucket 0; bucket i at b + i * gstride bytes */
    uint32_t nb;
    uint32_t dim;
    uint32_t dtype;          /* hps_dtype_t of the stored rows */
    uint32_t vbytes;         /* bytes of one stored row (value slot), a multiple of 4 */
    uint64_t gstride;        /* bytes between buckets */
    uint64_t vstride;        /* bytes between two buckets' values or row ids */
    uint8_t *vals;           /* inline values of bucket 0, or NULL */
    _Atomic uint32_t *rowid; /* indirect row ids, or NULL */
    _Atomic uint32_t *stamp; /* access stamps, or NULL */
    struct shm_page *pages;  /* row pages (indirect), or NULL */
};

/* A bucket's occupied slots.  Only the low HPS_BUCKET_SLOTS bits of occ
 * name slots; a corrupt segment may set the others, which must never
 * index key[]. */
static inline unsigned hps__shmdb_occ(const struct shm_bucket *b)
{
    return atomic_load_explicit(&b->occ, memory_order_relaxed) & ((1u << HPS_BUCKET_SLOTS) - 1);
}

/* Open / close a write of bucket b: the version turns odd (then a release
 * fence), then even again (release store).  Everything a writer changes in
 * a bucket (row, key, occupancy) goes between the two.  Partition mutex. */
void hps__shmdb_bucket_begin(struct shm_bucket *b);
void hps__shmdb_bucket_end(struct shm_bucket *b);
/* Bytes of a hash block of nb buckets for t's layout (hps__shmdb_geo).  Pure. */
uint64_t hps__shmdb_block_bytes(const struct shm_table *t, uint32_t nb);
/* Fill *w for the block at segment offset blk of nb buckets (not checked:
 * the caller bounds-checks blk; hps__shmdb_wview_current does).  The row-page
 * table is taken only if p->pagetab is in bounds and aligned, else
 * w->pages is NULL.  Also used by readers and check.c on a snapshot. */
void hps__shmdb_wview(hps_shmdb_t *db, const struct shm_table *t, struct shm_part *p, uint64_t blk,
                      uint32_t nb, struct wview *w);
/* The view of p's current geometry (relaxed load of geom: the caller holds
 * the partition mutex, so it cannot change); false when it is out of the
 * segment's bounds or has no buckets (a corrupt segment). */
bool hps__shmdb_wview_current(hps_shmdb_t *db, const struct shm_table *t, struct shm_part *p,
                              struct wview *w);
/* Slot (0 .. HPS_BUCKET_SLOTS-1) of key, its bucket in *ret_bucket; -1 if
 * absent.  Partition mutex (no version check). */
int hps__shmdb_wfind(const struct wview *w, uint64_t key, uint32_t *ret_bucket);
/* Add delta (+1 / -1) to the overflow counts of the buckets from key's
 * home up to, not including, bucket `to` (saturated counts stay).
 * Partition mutex; relaxed stores (a hint to readers). */
void hps__shmdb_ovf_walk(const struct wview *w, uint64_t key, uint32_t to, int delta);
/* Insert key, absent (the caller checked with hps__shmdb_wfind), with the row at
 * stored (vbytes bytes, host memory, already in the table's storage type;
 * copied) and access stamp `stamp`; counts shm_part.rows.  A paged table
 * takes a row from the free-row list or a page (hps__shmdb_alloc: seg_lock).
 * Returns 0; HPS_EFULL (no free slot in the block: the caller grows it);
 * HPS_ENOSPC (segment full, or HPS_MAX_ROW_PAGES pages); a negative errno
 * of seg_lock or posix_fallocate (-ENOSPC: /dev/shm full).  Partition
 * mutex. */
hps_err_t hps__shmdb_winsert(struct wview *w, uint64_t key, const void *stored, uint32_t stamp);
/* Paged tables: a row id handed out (hps__shmdb_walloc_row), written by the
 * caller at hps__shmdb_wrow_off (the segment offset of its vbytes), then
 * published with its key (hps__shmdb_winsert_row) or handed back
 * (hps__shmdb_wfree_row).  An unpublished row is invisible to readers; a writer
 * that dies holding one leaks it until the partition's repair, which frees
 * every row no slot names. */
/* Errors of hps__shmdb_walloc_row: as hps__shmdb_winsert's but HPS_EFULL.  Those of
 * hps__shmdb_winsert_row: HPS_EFULL only (the row is then still the caller's, to
 * hand back).  hps__shmdb_wrow_off: the segment offset of row r (r valid).  All
 * under the partition mutex. */
hps_err_t hps__shmdb_walloc_row(struct wview *w, uint32_t *ret);
hps_err_t hps__shmdb_winsert_row(struct wview *w, uint64_t key, uint32_t row, uint32_t stamp);
void hps__shmdb_wfree_row(struct wview *w, uint32_t r);
uint64_t hps__shmdb_wrow_off(const struct wview *w, uint32_t r);
/* Remove the key in slot s of bucket bi (a paged table's row goes to the
 * free-row list); counts shm_part.rows.  Partition mutex. */
void hps__shmdb_wremove(struct wview *w, uint32_t bi, int s);
/* Rehash into a new block of nb buckets (hps__shmdb_alloc: seg_lock), publish it
 * (geom, then gen += 2, release), free the old one and make *w its view.
 * Readers keep reading the old block until they see the new gen; row pages
 * do not move.  Returns 0 or hps__shmdb_alloc's error (HPS_ENOSPC, a negative
 * errno); *w and the partition are then unchanged.  Partition mutex. */
hps_err_t hps__shmdb_wgrow(struct wview *w, uint32_t nb);
/* Copy one slot of `from` (key, row or row id, stamp) into view n of a
 * block no reader can see yet (hps__shmdb_wgrow's new block); n must have a free
 * slot (it loops otherwise).  Does not count rows.  Partition mutex. */
void hps__shmdb_wplace(struct wview *n, uint64_t key, const struct wview *from, uint64_t fslot);
/* Evict rows until at most target_rows are left (ranked by the access
 * stamps for LRU / LFU policies, then random); returns the rows evicted,
 * added to shm_part.evictions.  Partition mutex; a malloc failure only
 * turns ranked eviction into random. */
uint64_t hps__shmdb_wevict(struct wview *w, uint64_t target_rows);

/* The stored row of a slot (vbytes bytes, 4-byte aligned, in the table's
 * storage type), or NULL when its row id points outside the row pages
 * (possible only for a reader racing a writer: a torn read). */
static inline uint8_t *hps__shmdb_row(const struct wview *w, uint64_t slot)
{
    if (w->vals)
        return VALP(w, slot);
    uint32_t r = atomic_load_explicit(ROWID(w, slot), memory_order_relaxed);
    uint32_t pg = r >> HPS_PAGE_SHIFT, idx = r & (HPS_PAGE_MAX_ROWS - 1);
    if (!w->pages || pg >= HPS_MAX_ROW_PAGES)
        return NULL;
    struct shm_page pe = w->pages[pg];
    uint64_t row_bytes = w->vbytes;
    if (idx >= pe.rows || !hps__shmdb_in_bounds(w->db, pe.off, (uint64_t)pe.rows * row_bytes) ||
        (pe.off & 3))
        return NULL;
    return (uint8_t *)hps__shmdb_ptr(w->db, pe.off + idx * row_bytes);
}

/* Decode one stored row (vbytes at src, in dtype) into dim floats at out.
 * src may be racing a writer (a reader validates afterwards): any bits
 * decode without fault.  fp32 is a plain copy. */
static inline void hps__shmdb_decode_row(const struct wview *w, const void *src, float *out)
{
    if (w->dtype == HPS_DTYPE_FP32)
        memcpy(out, src, (size_t)w->dim * sizeof(float));
    else
        (void)hps_dtype_decode((hps_dtype_t)w->dtype, w->dim, 1, src, out);
}

/* Bit set over the handed-out row ids: bit prefix[page] + index. */
struct rowmap {
    uint64_t prefix[HPS_MAX_ROW_PAGES + 1];
    uint8_t *bits;
};
/* Size rm for the rows handed out so far (hps__shmdb_page_used of each page) and
 * clear it; false when the bit set cannot be allocated (the caller frees
 * rm->bits with free() otherwise).  Partition mutex; the caller has checked
 * hps__shmdb_pages_ok. */
bool hps__shmdb_rowmap_init(struct rowmap *rm, const struct wview *w);
/* Mark row r (hps__shmdb_row_valid) used; true if it already was. */
bool hps__shmdb_rowmap_set(struct rowmap *rm, uint32_t r);
/* Rows handed out from page pg (< npages): last_fill for the last page,
 * the page's rows otherwise.  Partition mutex. */
uint32_t hps__shmdb_page_used(const struct wview *w, uint32_t pg);
/* Whether row id r names a row handed out (page < npages, index < its
 * hps__shmdb_page_used).  Partition mutex. */
bool hps__shmdb_row_valid(const struct wview *w, uint32_t r);
/* The row pages of a paged view (ROWS, ROWS_SOA) are sound: page table present, at
 * most HPS_MAX_ROW_PAGES pages, each inside the segment and float-aligned,
 * the last page's fill within it.  Only a corrupt segment fails this; the
 * rowmap and free-row walks above rely on it. */
bool hps__shmdb_pages_ok(const struct wview *w);

#endif
