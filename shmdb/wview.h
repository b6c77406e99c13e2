/*
 * wview.h -- a writer's view of a partition's hash block (private).  Valid
 * only while the partition mutex is held.
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
static inline unsigned hps__occ(const struct shm_bucket *b)
{
    return atomic_load_explicit(&b->occ, memory_order_relaxed) & ((1u << HPS_BUCKET_SLOTS) - 1);
}

void hps__bucket_begin(struct shm_bucket *b);
void hps__bucket_end(struct shm_bucket *b);
uint64_t hps__block_bytes(const struct shm_table *t, uint32_t nb);
void hps__wview(hps_shmdb_t *db, const struct shm_table *t, struct shm_part *p, uint64_t blk,
                uint32_t nb, struct wview *w);
bool hps__wview_current(hps_shmdb_t *db, const struct shm_table *t, struct shm_part *p,
                        struct wview *w);
int hps__wfind(const struct wview *w, uint64_t key, uint32_t *ret_bucket);
void hps__ovf_walk(const struct wview *w, uint64_t key, uint32_t to, int delta);
hps_err_t hps__winsert(struct wview *w, uint64_t key, const void *stored, uint32_t stamp);
/* Paged tables: a row id handed out (hps__walloc_row), written by the
 * caller at hps__wrow_off (the segment offset of its vbytes), then
 * published with its key (hps__winsert_row) or handed back
 * (hps__wfree_row).  An unpublished row is invisible to readers; a writer
 * that dies holding one leaks it until the partition's repair, which frees
 * every row no slot names. */
hps_err_t hps__walloc_row(struct wview *w, uint32_t *ret);
hps_err_t hps__winsert_row(struct wview *w, uint64_t key, uint32_t row, uint32_t stamp);
void hps__wfree_row(struct wview *w, uint32_t r);
uint64_t hps__wrow_off(const struct wview *w, uint32_t r);
void hps__wremove(struct wview *w, uint32_t bi, int s);
hps_err_t hps__wgrow(struct wview *w, uint32_t nb);
void hps__wplace(struct wview *n, uint64_t key, const struct wview *from, uint64_t fslot);
uint64_t hps__wevict(struct wview *w, uint64_t target_rows);

/* The stored row of a slot (vbytes bytes, 4-byte aligned, in the table's
 * storage type), or NULL when its row id points outside the row pages
 * (possible only for a reader racing a writer: a torn read). */
static inline uint8_t *hps__row(const struct wview *w, uint64_t slot)
{
    if (w->vals)
        return VALP(w, slot);
    uint32_t r = atomic_load_explicit(ROWID(w, slot), memory_order_relaxed);
    uint32_t pg = r >> HPS_PAGE_SHIFT, idx = r & (HPS_PAGE_MAX_ROWS - 1);
    if (!w->pages || pg >= HPS_MAX_ROW_PAGES)
        return NULL;
    struct shm_page pe = w->pages[pg];
    uint64_t row_bytes = w->vbytes;
    if (idx >= pe.rows || !hps__in_bounds(w->db, pe.off, (uint64_t)pe.rows * row_bytes) ||
        (pe.off & 3))
        return NULL;
    return (uint8_t *)hps__ptr(w->db, pe.off + idx * row_bytes);
}

/* Decode one stored row (vbytes at src, in dtype) into dim floats at out.
 * src may be racing a writer (a reader validates afterwards): any bits
 * decode without fault.  fp32 is a plain copy. */
static inline void hps__decode_row(const struct wview *w, const void *src, float *out)
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
bool hps__rowmap_init(struct rowmap *rm, const struct wview *w);
bool hps__rowmap_set(struct rowmap *rm, uint32_t r);
uint32_t hps__page_used(const struct wview *w, uint32_t pg);
bool hps__row_valid(const struct wview *w, uint32_t r);
/* The row pages of a paged view (ROWS, ROWS_SOA) are sound: page table present, at
 * most HPS_MAX_ROW_PAGES pages, each inside the segment and float-aligned,
 * the last page's fill within it.  Only a corrupt segment fails this; the
 * rowmap and free-row walks above rely on it. */
bool hps__pages_ok(const struct wview *w);

#endif
