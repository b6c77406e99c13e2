/*
 * ops.c -- batch writes (upsert, erase, clear), iteration and the partition
 * lock with its crash repair.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "wview.h"

/* ---- lock and repair --------------------------------------------------- */

int hps__shmdb_part_lock(hps_shmdb_t *db, const struct shm_table *t, struct shm_part *p)
{
    int rc = hps__shmdb_lock(&p->lock);
    if (rc == 1) {
        hps__shmdb_part_repair(db, t, p);
        atomic_fetch_add_explicit(&p->repairs, 1, memory_order_relaxed);
        hps__shmdb_lock_consistent(db, &p->lock);
        rc = 0;
    }
    return rc;
}

static inline uint32_t home_of(uint64_t key, uint32_t nb)
{
    uint64_t h = hps_rrxmrrxmsx_0(key);
    return (uint32_t)(((h >> 32) * (uint64_t)nb) >> 32);
}

/* Rows handed out from page pg. */
uint32_t hps__shmdb_page_used(const struct wview *w, uint32_t pg)
{
    uint32_t n = atomic_load_explicit(&w->p->npages, memory_order_relaxed);
    return pg + 1 == n ? w->p->last_fill : w->pages[pg].rows;
}

bool hps__shmdb_row_valid(const struct wview *w, uint32_t r)
{
    uint32_t pg = r >> HPS_PAGE_SHIFT;
    return pg < atomic_load_explicit(&w->p->npages, memory_order_relaxed) &&
           (r & (HPS_PAGE_MAX_ROWS - 1)) < hps__shmdb_page_used(w, pg);
}

bool hps__shmdb_pages_ok(const struct wview *w)
{
    uint32_t np = atomic_load_explicit(&w->p->npages, memory_order_relaxed);
    uint64_t row_bytes = w->vbytes;
    if (!w->pages || np > HPS_MAX_ROW_PAGES)
        return false;
    for (uint32_t pg = 0; pg < np; pg++) {
        const struct shm_page *pe = &w->pages[pg];
        if (pe->rows > HPS_PAGE_MAX_ROWS || (pe->off & 3) ||
            !hps__shmdb_in_bounds(w->db, pe->off, (uint64_t)pe->rows * row_bytes))
            return false;
    }
    return np == 0 || w->p->last_fill <= w->pages[np - 1].rows;
}

bool hps__shmdb_rowmap_init(struct rowmap *rm, const struct wview *w)
{
    uint32_t np = atomic_load_explicit(&w->p->npages, memory_order_relaxed);
    rm->prefix[0] = 0;
    for (uint32_t pg = 0; pg < np; pg++)
        rm->prefix[pg + 1] = rm->prefix[pg] + hps__shmdb_page_used(w, pg);
    rm->bits = calloc(rm->prefix[np] / 8 + 1, 1);
    return rm->bits != NULL;
}

/* Mark row r used; true if it already was. */
bool hps__shmdb_rowmap_set(struct rowmap *rm, uint32_t r)
{
    uint64_t i = rm->prefix[r >> HPS_PAGE_SHIFT] + (r & (HPS_PAGE_MAX_ROWS - 1));
    bool was = rm->bits[i >> 3] & (1u << (i & 7));
    rm->bits[i >> 3] |= (uint8_t)(1u << (i & 7));
    return was;
}

/* Drop slots whose row id is invalid or shared, then rebuild the free list
 * from every handed-out row no slot uses. */
static void repair_rows(struct wview *w)
{
    struct rowmap rm;
    if (!hps__shmdb_pages_ok(w) || !hps__shmdb_rowmap_init(&rm, w))
        return; /* row pages themselves corrupt: nothing sound to rebuild from */
    for (uint32_t bi = 0; bi < w->nb; bi++) {
        struct shm_bucket *b = BKT(w, bi);
        unsigned occ = hps__shmdb_occ(b);
        for (unsigned m = occ; m; m &= m - 1) {
            int s = __builtin_ctz(m);
            uint32_t r = atomic_load_explicit(
                ROWID(w, (uint64_t)bi * HPS_BUCKET_SLOTS + (unsigned)s), memory_order_relaxed);
            if (!hps__shmdb_row_valid(w, r) || hps__shmdb_rowmap_set(&rm, r))
                occ &= ~(1u << s);
        }
        atomic_store_explicit(&b->occ, (uint8_t)occ, memory_order_relaxed);
    }
    w->p->free_row = HPS_NO_ROW;
    uint32_t np = atomic_load_explicit(&w->p->npages, memory_order_relaxed);
    for (uint32_t pg = 0; pg < np; pg++)
        for (uint32_t i = 0; i < hps__shmdb_page_used(w, pg); i++) {
            uint32_t r = (pg << HPS_PAGE_SHIFT) | i;
            if (!hps__shmdb_rowmap_set(&rm, r)) {
                uint8_t *row = hps__shmdb_ptr(w->db, w->pages[pg].off + (uint64_t)i * w->vbytes);
                memcpy(row, &w->p->free_row, sizeof(uint32_t));
                w->p->free_row = r;
            }
        }
    free(rm.bits);
}

/* Recount rows and rebuild every overflow count from the keys present. */
static void rebuild_counts(struct wview *w)
{
    uint64_t rows = 0;
    for (uint32_t bi = 0; bi < w->nb; bi++)
        atomic_store_explicit(&BKT(w, bi)->ovf, 0, memory_order_relaxed);
    for (uint32_t bi = 0; bi < w->nb; bi++) {
        struct shm_bucket *b = BKT(w, bi);
        for (unsigned m = hps__shmdb_occ(b); m; m &= m - 1) {
            uint64_t key = atomic_load_explicit(&b->key[__builtin_ctz(m)], memory_order_relaxed);
            hps__shmdb_ovf_walk(w, key, bi, +1);
            rows++;
        }
    }
    atomic_store_explicit(&w->p->rows, rows, memory_order_relaxed);
}

/* The previous holder of the partition lock died.  Whatever it was doing,
 * the bucket it was writing has an odd version: empty that bucket (the VDB
 * is a cache; the persistent DB or the next update brings the rows back),
 * free a half-built rehash block, rebuild counts and the free-row list, and
 * make every version even.  Readers keep going throughout: the buckets
 * touched here get their versions bumped. */
/* [off, off + len) overlaps partition p's own struct, its lock included:
 * only in a corrupt segment.  Repair writes nothing there, since a write
 * into the lock it holds would corrupt the thread's robust-mutex list
 * (found by fuzz-shmdb). */
static bool hits_part(const hps_shmdb_t *db, const struct shm_part *p, uint64_t off, uint64_t len)
{
    uint64_t po = (uint64_t)((const uint8_t *)p - db->base);
    return off < po + sizeof(*p) && po < off + len;
}

/* Some row page of w overlaps its partition's struct (see hits_part). */
static bool pages_hit_part(const struct wview *w)
{
    uint32_t np = atomic_load_explicit(&w->p->npages, memory_order_relaxed);
    for (uint32_t pg = 0; pg < np; pg++)
        if (hits_part(w->db, w->p, w->pages[pg].off, (uint64_t)w->pages[pg].rows * w->vbytes))
            return true;
    return false;
}

void hps__shmdb_part_repair(hps_shmdb_t *db, const struct shm_table *t, struct shm_part *p)
{
    struct wview w;
    uint64_t blk = HPS_GEOM_BLK(atomic_load_explicit(&p->geom, memory_order_relaxed));
    uint64_t pend = p->pending, bytes = hps__shmdb_round_up(p->blk_bytes, HPS_CACHELINE);
    /* Freed only if it can be a block: in a corrupt segment, pending may
     * point anywhere, and hps__shmdb_free writes there. */
    if (pend && pend != blk && !(pend & (HPS_CACHELINE - 1)) && pend >= db->hdr->hdr_bytes &&
        hps__shmdb_in_bounds(db, pend, bytes) && !hits_part(db, p, pend, bytes) &&
        pend + bytes <= atomic_load_explicit(&db->hdr->bump, memory_order_relaxed))
        hps__shmdb_free(db, pend, p->blk_bytes); /* size unknown: at most a leak */
    p->pending = 0;
    /* The view's own extent, not blk_bytes: both are segment words, and a
     * corrupt blk_bytes smaller than the block let a bucket's version or
     * occupancy land on the held lock (found by fuzz-shmdb). */
    if (!hps__shmdb_wview_current(db, t, p, &w) ||
        hits_part(db, p, blk, hps__shmdb_block_bytes(t, w.nb)))
        return;
    for (uint32_t bi = 0; bi < w.nb; bi++) {
        struct shm_bucket *b = BKT(&w, bi);
        uint32_t v = atomic_load_explicit(&b->ver, memory_order_relaxed);
        if (v & 1) {
            atomic_store_explicit(&b->occ, 0, memory_order_relaxed);
            /* Release: the emptied bucket is visible with the even version. */
            atomic_store_explicit(&b->ver, v + 1, memory_order_release);
        }
    }
    if (w.rowid && hps__shmdb_pages_ok(&w) && !pages_hit_part(&w))
        repair_rows(&w);
    rebuild_counts(&w);
}

/* ---- upsert ------------------------------------------------------------ */

/* Keys ahead whose home bucket upsert_task prefetches. */
#define UPSERT_AHEAD 8

struct batch {
    hps_shmdb_t *db;
    const struct shm_table *t;
    const void *keys;
    const float *values; /* (n, dim) fp32, host */
    size_t *order;       /* key indices grouped by partition */
    size_t *start;       /* start[p] .. start[p + 1] in order */
    size_t *count;       /* per partition: inserted or erased */
    uint32_t clock;
    hps_err_t *rc; /* per partition */
};

static inline uint64_t key_at(const void *keys, uint32_t key_bytes, size_t i)
{
    return key_bytes == 8 ? (uint64_t)((const int64_t *)keys)[i] : ((const uint32_t *)keys)[i];
}

/* Overwrite the row of slot s of bucket bi with stored (vbytes bytes in the
 * table's storage type). */
static void update_row(struct wview *w, uint32_t bi, int s, const void *stored, uint32_t clock)
{
    struct shm_bucket *b = BKT(w, bi);
    uint64_t slot = (uint64_t)bi * HPS_BUCKET_SLOTS + (unsigned)s;
    hps__shmdb_bucket_begin(b);
    memcpy(hps__shmdb_row(w, slot), stored, w->vbytes);
    if (w->stamp && w->t->policy == HPS_EVICT_OLDEST)
        atomic_store_explicit(&w->stamp[slot], clock, memory_order_relaxed);
    hps__shmdb_bucket_end(b);
}

static uint64_t evict_target(uint64_t rows, double target)
{
    return (uint64_t)((double)rows * target);
}

/* Whether an allocation failure is the segment's own limit, where the
 * table evicts rows to make room (HPS_ENOSPC: shared_memory_size or the
 * row pages; HPS_EFULL: no free slot), rather than the machine's (a
 * negative errno: /dev/shm full, -ENOSPC from posix_fallocate), where
 * evicting would drop rows that fit the configured size: the write fails
 * instead, and its caller retries (Kafka) or refuses (a load). */
static bool own_limit(hps_err_t rc)
{
    return rc == HPS_ENOSPC || rc == HPS_EFULL;
}

/* Make room for one new row: overflow margin first, then load factor.
 * 0, or the machine's error (own_limit false: nothing evicted). */
static hps_err_t make_room(struct wview *w)
{
    const struct shm_table *t = w->t;
    uint64_t rows = atomic_load_explicit(&w->p->rows, memory_order_relaxed);
    if (rows >= t->margin) {
        /* Down to margin * target, and at least one row (target 1.0). */
        uint64_t to = evict_target(t->margin, t->target);
        hps__shmdb_wevict(w, to < t->margin ? to : t->margin - 1);
        rows = atomic_load_explicit(&w->p->rows, memory_order_relaxed);
    }
    if ((double)(rows + 1) <= (double)w->nb * HPS_BUCKET_SLOTS * HPS_MAX_LOAD)
        return 0;
    uint64_t nb = (uint64_t)w->nb * 2;
    if (t->margin != UINT64_MAX) {
        uint64_t need = (uint64_t)((double)t->margin / (HPS_BUCKET_SLOTS * HPS_TARGET_LOAD)) + 2;
        if (nb > need)
            nb = need > w->nb ? need : (uint64_t)w->nb + 1;
    }
    hps_err_t rc = nb >= (1u << 30) ? HPS_ENOSPC : hps__shmdb_wgrow(w, (uint32_t)nb);
    if (rc < 0 && !own_limit(rc))
        return rc;
    if (rc < 0) /* segment full: evict instead */
        hps__shmdb_wevict(w, evict_target(rows, t->target));
    return 0;
}

static hps_err_t insert_row(struct wview *w, uint64_t key, const void *stored, uint32_t stamp)
{
    hps_err_t rc = make_room(w);
    if (rc < 0)
        return rc;
    rc = hps__shmdb_winsert(w, key, stored, stamp);
    if (own_limit(rc)) { /* no row page could be allocated: evict, try once more */
        hps__shmdb_wevict(
            w, evict_target(atomic_load_explicit(&w->p->rows, memory_order_relaxed), w->t->target));
        rc = hps__shmdb_winsert(w, key, stored, stamp);
    }
    return rc;
}

/* The stored form of an fp32 row: the row itself for fp32, else encoded
 * into scratch (vbytes bytes, 4-byte aligned; the bytes past the encoded
 * row stay zero).  Encoding happens here, before the bucket's version turns
 * odd, so readers are kept waiting only for the copy. */
static const void *stored_row(const struct wview *w, const float *value, uint8_t *scratch)
{
    if (w->dtype == HPS_DTYPE_FP32)
        return value;
    (void)hps_dtype_encode((hps_dtype_t)w->dtype, w->dim, 1, value, scratch);
    return scratch;
}

/*
 * BULK ROWS.  On some virtual machines the first write through a process's
 * mapping to each 4 KiB page of shared memory traps to the hypervisor, even
 * after MADV_POPULATE_WRITE mapped the page: on the 2-core dev VM 2.2 s per
 * GB against 0.13 s per GB for the kernel's pwrite() into the same tmpfs
 * pages (bench-load prints both), and that trap was most of a model load's
 * volatile-DB time.  Where the machine charges it (rows_by_fd), a
 * partition's share of an upsert with at least BULK_MIN_ROWS keys writes
 * the rows of its new keys through the segment's file descriptor, in
 * cycles of up to cap keys: row ids handed out first, the rows encoded
 * into a staging buffer and written with pwrite() in runs of consecutive
 * rows, then the keys published with their row ids.  An unpublished row is
 * invisible, so readers see what a memcpy inside the bucket write gave
 * them.  Within a cycle a key is either published for the whole cycle
 * (each of its rows is an update in place, update_row) or new for the
 * whole cycle (each is pending; the first is published, the later ones
 * update it), so rows are applied in batch order and the last one wins, as
 * in file order.  Elsewhere (the H200 host measured the mapping at 0.11 s
 * per GB and pwrite() at 0.23), small upserts, inline layouts and rows
 * wider than the staging buffer, rows are copied through the mapping.
 */
#define BULK_MIN_ROWS 64
#define STAGE_BYTES   (64u << 10) /* below malloc's mmap threshold: reused memory */

/* A new key whose row is handed out, not yet written or published. */
struct pend {
    uint64_t key;
    size_t i; /* index of its key and value in the batch */
    uint32_t row;
};

struct bulk {
    struct wview *w;
    struct batch *j;
    uint8_t *stage;   /* zeroed: a compact row's padding is written as zeros */
    uint8_t *scratch; /* an encoded row for update_row (non-fp32 tables) */
    size_t cap, n;    /* pending rows: at most cap = STAGE_BYTES / vbytes */
    struct pend *pend;
    size_t ins, upd;
    hps_err_t err; /* the first row that could not be written, 0: none */
};

/* Seconds a first write of PROBE_BYTES takes through a mapping whose pages
 * MADV_POPULATE_WRITE mapped (*ret_map) and with pwrite() (*ret_fd), into
 * fresh pages of a memfd (shared memory, as the segment); false if the
 * probe cannot run. */
#define PROBE_BYTES (2u << 20)
static bool probe_writes(double *ret_map, double *ret_fd)
{
    const size_t src_len = STAGE_BYTES;
    uint8_t *src = calloc(1, src_len);
    int fd = src ? memfd_create("hps-shmdb-probe", MFD_CLOEXEC) : -1;
    if (fd < 0) {
        free(src);
        return false;
    }
    uint8_t *p = MAP_FAILED;
    bool ok =
        ftruncate(fd, 2 * (off_t)PROBE_BYTES) == 0 &&
        posix_fallocate(fd, 0, 2 * (off_t)PROBE_BYTES) == 0 &&
        (p = mmap(NULL, PROBE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) != MAP_FAILED;
    if (ok) {
        (void)madvise(p, PROBE_BYTES, HPS__SHMDB_MADV_POPULATE_WRITE); /* as commit_to */
        uint64_t t0 = hps__shmdb_clock_ns(CLOCK_MONOTONIC);
        for (size_t off = 0; off < PROBE_BYTES; off += src_len)
            memcpy(p + off, src, src_len);
        uint64_t t1 = hps__shmdb_clock_ns(CLOCK_MONOTONIC);
        for (size_t off = 0; ok && off < PROBE_BYTES; off += src_len)
            ok = pwrite(fd, src, src_len, (off_t)(PROBE_BYTES + off)) == (ssize_t)src_len;
        uint64_t t2 = hps__shmdb_clock_ns(CLOCK_MONOTONIC);
        *ret_map = (double)(t1 - t0) * 1e-9;
        *ret_fd = (double)(t2 - t1) * 1e-9;
        munmap(p, PROBE_BYTES);
    }
    close(fd);
    free(src);
    return ok;
}

/* Whether db's large upserts write new rows with pwrite(): chosen once per
 * handle, by the environment variable HPS_SHMDB_ROW_WRITES (mapping or
 * pwrite: tests run both paths on any machine) or else by a probe, pwrite()
 * where the mapping's first writes took over twice as long. */
static bool rows_by_fd(hps_shmdb_t *db)
{
    int m = atomic_load_explicit(&db->row_writes, memory_order_relaxed);
    if (m == 0) {
        const char *e = getenv("HPS_SHMDB_ROW_WRITES");
        double map_s, fd_s;
        if (e && strcmp(e, "pwrite") == 0)
            m = HPS__SHMDB_ROWS_PWRITE;
        else if ((e && strcmp(e, "mapping") == 0) || !probe_writes(&map_s, &fd_s))
            m = HPS__SHMDB_ROWS_MAPPING;
        else
            m = map_s > 2 * fd_s ? HPS__SHMDB_ROWS_PWRITE : HPS__SHMDB_ROWS_MAPPING;
        atomic_store_explicit(&db->row_writes, m, memory_order_relaxed);
    }
    return m == HPS__SHMDB_ROWS_PWRITE;
}

/* Write len bytes of staged rows at segment offset off; through the
 * mapping where the descriptor refuses (nothing is lost either way). */
static void stage_out(hps_shmdb_t *db, const uint8_t *buf, size_t len, uint64_t off)
{
    size_t done = 0;
    while (done < len) {
        ssize_t r = pwrite(db->fd, buf + done, len - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        done += (size_t)r;
    }
    if (done < len)
        memcpy(hps__shmdb_ptr(db, off + done), buf + done, len - done);
}

/* Write the pending rows, then publish their keys. */
static void bulk_flush(struct bulk *k, uint32_t fresh)
{
    struct wview *w = k->w;
    const struct batch *j = k->j;
    size_t len = 0;
    uint64_t off0 = 0;
    for (size_t q = 0; q < k->n; q++) {
        uint64_t off = hps__shmdb_wrow_off(w, k->pend[q].row);
        if (len && off != off0 + len) {
            stage_out(w->db, k->stage, len, off0);
            len = 0;
        }
        if (!len)
            off0 = off;
        const float *value = j->values + k->pend[q].i * j->t->dim;
        if (w->dtype == HPS_DTYPE_FP32)
            memcpy(k->stage + len, value, w->vbytes);
        else
            (void)hps_dtype_encode((hps_dtype_t)w->dtype, w->dim, 1, value, k->stage + len);
        len += w->vbytes;
    }
    if (len)
        stage_out(w->db, k->stage, len, off0);
    for (size_t q = 0; q < k->n; q++) {
        const struct pend *e = &k->pend[q];
        uint32_t bi;
        int s = hps__shmdb_wfind(w, e->key, &bi);
        if (s >= 0) { /* a later row of a key published above */
            update_row(w, bi, s, stored_row(w, j->values + e->i * j->t->dim, k->scratch), j->clock);
            hps__shmdb_wfree_row(w, e->row);
            k->upd++;
            continue;
        }
        hps_err_t rc = make_room(w);
        if (rc < 0) {
            hps__shmdb_wfree_row(w, e->row);
            k->err = k->err ? k->err : rc;
            continue;
        }
        rc = hps__shmdb_winsert_row(w, e->key, e->row, fresh);
        if (rc < 0) { /* as insert_row: evict, try once more */
            hps__shmdb_wevict(w,
                              evict_target(atomic_load_explicit(&w->p->rows, memory_order_relaxed),
                                           w->t->target));
            rc = hps__shmdb_winsert_row(w, e->key, e->row, fresh);
        }
        if (rc < 0)
            hps__shmdb_wfree_row(w, e->row);
        else
            k->ins++;
    }
    k->n = 0;
}

/* Partition pi's keys in the batch, new rows written through the file
 * descriptor (BULK ROWS); false if it cannot (no memory) or should not
 * (rows_by_fd): nothing done. */
static bool upsert_bulk(struct batch *j, unsigned pi, struct wview *w, uint8_t *scratch,
                        uint32_t fresh, size_t *ret_ins, size_t *ret_upd, hps_err_t *ret_err)
{
    if (!rows_by_fd(j->db))
        return false;
    struct bulk k = {.w = w, .j = j, .scratch = scratch, .cap = STAGE_BYTES / w->vbytes};
    k.stage = calloc(1, STAGE_BYTES);
    k.pend = malloc(k.cap * sizeof(*k.pend));
    if (!k.stage || !k.pend) {
        free(k.stage);
        free(k.pend);
        return false;
    }
    const struct shm_table *t = j->t;
    for (size_t o = j->start[pi]; o < j->start[pi + 1]; o++) {
        if (o + UPSERT_AHEAD < j->start[pi + 1])
            __builtin_prefetch(
                BKT(w, home_of(key_at(j->keys, t->key_bytes, j->order[o + UPSERT_AHEAD]), w->nb)));
        if (k.n == k.cap) /* before the find: a cycle ends only here */
            bulk_flush(&k, fresh);
        size_t i = j->order[o];
        uint64_t key = key_at(j->keys, t->key_bytes, i);
        uint32_t bi, row;
        int s = hps__shmdb_wfind(w, key, &bi);
        if (s < 0 && hps__shmdb_walloc_row(w, &row) == 0) {
            k.pend[k.n++] = (struct pend){.key = key, .i = i, .row = row};
            continue;
        }
        if (s < 0) { /* no row page: end the cycle, then the memcpy path evicts for room */
            bulk_flush(&k, fresh);
            s = hps__shmdb_wfind(w, key, &bi);
        }
        const void *stored = stored_row(w, j->values + i * t->dim, scratch);
        hps_err_t e = 0;
        if (s >= 0) {
            update_row(w, bi, s, stored, j->clock);
            k.upd++;
        } else if ((e = insert_row(w, key, stored, fresh)) == 0) {
            k.ins++;
        } else if (!k.err) {
            k.err = e;
        }
    }
    bulk_flush(&k, fresh);
    free(k.stage);
    free(k.pend);
    *ret_ins = k.ins;
    *ret_upd = k.upd;
    *ret_err = k.err;
    return true;
}

static void upsert_task(void *arg, unsigned pi)
{
    struct batch *j = arg;
    const struct shm_table *t = j->t;
    struct shm_part *p = &hps__shmdb_parts(j->db, t)[pi];
    struct wview w;
    size_t ins = 0, upd = 0;
    uint8_t *scratch = NULL; /* the row being written, encoded (non-fp32 tables) */
    if (j->start[pi] == j->start[pi + 1])
        return;
    if (t->dtype != HPS_DTYPE_FP32 && !(scratch = calloc(1, hps__shmdb_vbytes(t->dtype, t->dim)))) {
        j->rc[pi] = -ENOMEM;
        return;
    }
    int rc = hps__shmdb_part_lock(j->db, t, p);
    if (rc < 0) {
        j->rc[pi] = rc;
        free(scratch);
        return;
    }
    hps_err_t err = 0; /* the first row that could not be written (/dev/shm full) */
    if (!hps__shmdb_wview_current(j->db, t, p, &w)) {
        err = HPS_ECORRUPT;
        goto out;
    }
    uint32_t fresh = t->policy == HPS_EVICT_OLDEST ? j->clock : 1;
    if (w.rowid && j->db->fd >= 0 && w.vbytes <= STAGE_BYTES &&
        j->start[pi + 1] - j->start[pi] >= BULK_MIN_ROWS &&
        upsert_bulk(j, pi, &w, scratch, fresh, &ins, &upd, &err))
        goto out;
    for (size_t o = j->start[pi]; o < j->start[pi + 1]; o++) {
        if (o + UPSERT_AHEAD < j->start[pi + 1]) /* the bucket is a cache miss in big tables */
            __builtin_prefetch(
                BKT(&w, home_of(key_at(j->keys, t->key_bytes, j->order[o + UPSERT_AHEAD]), w.nb)));
        size_t i = j->order[o];
        uint64_t key = key_at(j->keys, t->key_bytes, i);
        const void *stored = stored_row(&w, j->values + i * t->dim, scratch);
        uint32_t bi;
        int s = hps__shmdb_wfind(&w, key, &bi);
        hps_err_t e = 0;
        if (s >= 0) {
            update_row(&w, bi, s, stored, j->clock);
            upd++;
        } else if ((e = insert_row(&w, key, stored, fresh)) == 0) {
            ins++;
        } else if (!err) {
            err = e;
        }
    }
out:
    hps__shmdb_unlock(&p->lock);
    free(scratch);
    if (err)
        j->rc[pi] = err;
    j->count[pi] = ins;
    struct shm_table *mt = (struct shm_table *)t;
    /* Relaxed: statistics. */
    atomic_fetch_add_explicit(&mt->inserts, ins, memory_order_relaxed);
    atomic_fetch_add_explicit(&mt->updates, upd, memory_order_relaxed);
}

/* Group key indices by partition (counting sort, stable: later duplicates
 * are applied later, so the last one wins). */
static hps_err_t batch_init(struct batch *j, hps_shmdb_t *db, const struct shm_table *t, size_t n,
                            const void *keys)
{
    uint32_t P = t->num_partitions;
    memset(j, 0, sizeof(*j));
    j->db = db;
    j->t = t;
    j->keys = keys;
    j->order = malloc((n ? n : 1) * sizeof(size_t));
    j->start = calloc(P + 1, sizeof(size_t));
    j->count = calloc(P, sizeof(size_t));
    j->rc = calloc(P, sizeof(hps_err_t));
    uint32_t *pid = malloc((n ? n : 1) * sizeof(uint32_t));
    if (!j->order || !j->start || !j->count || !j->rc || !pid) {
        free(pid);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        pid[i] = (uint32_t)(hps_rrxmrrxmsx_0(key_at(keys, t->key_bytes, i)) % P);
        j->start[pid[i] + 1]++;
    }
    for (uint32_t p = 0; p < P; p++)
        j->start[p + 1] += j->start[p];
    size_t *fill = j->count; /* reuse as cursor, cleared below */
    for (size_t i = 0; i < n; i++)
        j->order[j->start[pid[i]] + fill[pid[i]]++] = i;
    memset(j->count, 0, P * sizeof(size_t));
    free(pid);
    return 0;
}

static void batch_fini(struct batch *j)
{
    free(j->order);
    free(j->start);
    free(j->count);
    free(j->rc);
}

/* Run fn over every partition (on the pool when there is one) and sum. */
static hps_err_t batch_run(struct batch *j, void (*fn)(void *, unsigned), size_t *ret_count)
{
    uint32_t P = j->t->num_partitions;
    if (j->db->pool)
        hps__shmdb_pool_run(j->db->pool, P, fn, j);
    else
        for (uint32_t p = 0; p < P; p++)
            fn(j, p);
    size_t total = 0;
    hps_err_t rc = 0;
    for (uint32_t p = 0; p < P; p++) {
        total += j->count[p];
        if (j->rc[p] < 0 && rc == 0)
            rc = j->rc[p];
    }
    if (ret_count)
        *ret_count = total;
    return rc;
}

hps_err_t hps_shmdb_upsert(hps_shmdb_t *db, uint32_t id, size_t n, const void *keys,
                           const float *values, size_t *ret_inserted)
{
    struct shm_table *t = hps__shmdb_table(db, id);
    if (!t)
        return HPS_ENOTFOUND;
    struct batch j;
    hps_err_t rc = batch_init(&j, db, t, n, keys);
    if (rc == 0) {
        j.values = values;
        j.clock = (uint32_t)atomic_fetch_add_explicit(&t->clock, 1, memory_order_relaxed);
        rc = batch_run(&j, upsert_task, ret_inserted);
    }
    batch_fini(&j);
    return rc;
}

/* ---- erase and clear --------------------------------------------------- */

static void erase_task(void *arg, unsigned pi)
{
    struct batch *j = arg;
    struct shm_part *p = &hps__shmdb_parts(j->db, j->t)[pi];
    struct wview w;
    if (j->start[pi] == j->start[pi + 1])
        return;
    int rc = hps__shmdb_part_lock(j->db, j->t, p);
    if (rc < 0) {
        j->rc[pi] = rc;
        return;
    }
    if (hps__shmdb_wview_current(j->db, j->t, p, &w)) {
        for (size_t o = j->start[pi]; o < j->start[pi + 1]; o++) {
            uint32_t bi;
            int s = hps__shmdb_wfind(&w, key_at(j->keys, j->t->key_bytes, j->order[o]), &bi);
            if (s >= 0) {
                hps__shmdb_wremove(&w, bi, s);
                j->count[pi]++;
            }
        }
    }
    hps__shmdb_unlock(&p->lock);
    atomic_fetch_add_explicit(&((struct shm_table *)j->t)->erased, j->count[pi],
                              memory_order_relaxed);
}

hps_err_t hps_shmdb_erase(hps_shmdb_t *db, uint32_t id, size_t n, const void *keys,
                          size_t *ret_erased)
{
    struct shm_table *t = hps__shmdb_table(db, id);
    if (!t)
        return HPS_ENOTFOUND;
    struct batch j;
    hps_err_t rc = batch_init(&j, db, t, n, keys);
    if (rc == 0)
        rc = batch_run(&j, erase_task, ret_erased);
    batch_fini(&j);
    return rc;
}

/* Empty one partition: every bucket emptied under its version, row pages
 * beyond the first returned to the segment. */
static void clear_part(hps_shmdb_t *db, const struct shm_table *t, struct shm_part *p)
{
    struct wview w;
    if (!hps__shmdb_wview_current(db, t, p, &w))
        return;
    for (uint32_t bi = 0; bi < w.nb; bi++) {
        struct shm_bucket *b = BKT(&w, bi);
        if (!atomic_load_explicit(&b->occ, memory_order_relaxed) &&
            !atomic_load_explicit(&b->ovf, memory_order_relaxed))
            continue;
        hps__shmdb_bucket_begin(b);
        atomic_store_explicit(&b->occ, 0, memory_order_relaxed);
        atomic_store_explicit(&b->ovf, 0, memory_order_relaxed);
        hps__shmdb_bucket_end(b);
    }
    atomic_store_explicit(&p->rows, 0, memory_order_relaxed);
    if (!w.rowid)
        return;
    uint32_t np = atomic_load_explicit(&p->npages, memory_order_relaxed);
    for (uint32_t pg = 1; pg < np; pg++) {
        uint64_t bytes = (uint64_t)w.pages[pg].rows * w.vbytes;
        hps__shmdb_free(db, w.pages[pg].off, bytes);
        p->page_bytes -= hps__shmdb_round_up(bytes, HPS_CACHELINE);
    }
    if (np > 1)
        atomic_store_explicit(&p->npages, 1, memory_order_release);
    p->last_fill = 0;
    p->free_row = HPS_NO_ROW;
}

hps_err_t hps_shmdb_clear(hps_shmdb_t *db, uint32_t id)
{
    struct shm_table *t = hps__shmdb_table(db, id);
    if (!t)
        return HPS_ENOTFOUND;
    for (uint32_t i = 0; i < t->num_partitions; i++) {
        struct shm_part *p = &hps__shmdb_parts(db, t)[i];
        int rc = hps__shmdb_part_lock(db, t, p);
        if (rc < 0)
            return rc;
        clear_part(db, t, p);
        hps__shmdb_unlock(&p->lock);
    }
    return 0;
}

/* ---- iteration --------------------------------------------------------- */

/* Walks each partition under its lock, so every row is seen exactly once
 * and consistent; writers to that partition wait meanwhile.  Rows of a
 * table stored in another type than fp32 are decoded into one buffer. */
hps_err_t hps_shmdb_iterate(hps_shmdb_t *db, uint32_t id, hps_shmdb_row_fn fn, void *ctx)
{
    struct shm_table *t = hps__shmdb_table(db, id);
    if (!t)
        return HPS_ENOTFOUND;
    float *buf = malloc((size_t)t->dim * sizeof(float));
    if (!buf)
        return -ENOMEM;
    hps_err_t ret = 0;
    for (uint32_t i = 0; i < t->num_partitions; i++) {
        struct shm_part *p = &hps__shmdb_parts(db, t)[i];
        struct wview w;
        int rc = hps__shmdb_part_lock(db, t, p);
        if (rc < 0) {
            ret = rc;
            break;
        }
        if (hps__shmdb_wview_current(db, t, p, &w)) {
            for (uint32_t bi = 0; bi < w.nb && rc == 0; bi++) {
                struct shm_bucket *b = BKT(&w, bi);
                for (unsigned m = hps__shmdb_occ(b); m && rc == 0; m &= m - 1) {
                    int s = __builtin_ctz(m);
                    uint64_t key = atomic_load_explicit(&b->key[s], memory_order_relaxed);
                    const uint8_t *v =
                        hps__shmdb_row(&w, (uint64_t)bi * HPS_BUCKET_SLOTS + (unsigned)s);
                    if (!v) /* a row id out of range, only in a corrupt segment */
                        continue;
                    if (w.dtype == HPS_DTYPE_FP32) {
                        rc = fn(ctx, key, (const float *)v);
                    } else {
                        hps__shmdb_decode_row(&w, v, buf);
                        rc = fn(ctx, key, buf);
                    }
                }
            }
        }
        hps__shmdb_unlock(&p->lock);
        if (rc != 0) {
            ret = rc;
            break;
        }
    }
    free(buf);
    return ret;
}
