/*
 * alloc.c -- the block allocator of the shared-memory object: the segment
 * lock and its repair, committing the object's pages, the address-ordered
 * free list, hps__shmdb_alloc and hps__shmdb_free.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>

#include "internal.h"

/* The segment lock guards the allocator and the table directory.  A dead
 * holder can at worst leak the block it was carving, because the free list
 * and the bump pointer are each updated by one final store. */
/* The list is kept in address order (hps__shmdb_free inserts in order, a split
 * leaves its tail in place): a link that does not go up is corrupt (it
 * could close a cycle) and is cut.  Called under the segment lock. */
static struct shm_free *free_next_checked(hps_shmdb_t *db, uint64_t off)
{
    struct shm_free *f = hps__shmdb_ptr(db, off);
    if (f->next && f->next <= off)
        f->next = 0;
    return f;
}

/* A free-list entry that can be followed: past the header, below the bump
 * pointer, cache-line aligned (every block is: hps__shmdb_alloc rounds), and its
 * size a whole number of lines inside the segment.  A corrupt segment may
 * hold anything there; following such an entry would read a misaligned or
 * out-of-bounds struct shm_free (the fuzz-shmdb target's finding).
 * Called under the segment lock. */
static bool free_entry_ok(const hps_shmdb_t *db, uint64_t off)
{
    uint64_t bump = atomic_load_explicit(&db->hdr->bump, memory_order_relaxed);
    if (off < HDR_BYTES || off >= bump || (off & (HPS_CACHELINE - 1)) ||
        !hps__shmdb_in_bounds(db, off, sizeof(struct shm_free)))
        return false;
    const struct shm_free *f = hps__shmdb_ptr(db, off);
    return f->bytes >= HPS_CACHELINE && !(f->bytes & (HPS_CACHELINE - 1)) && f->bytes <= bump - off;
}

/* After a holder died: cut the free list at its first bad entry and
 * recount free_bytes, so the allocator and hps_shmdb_check agree again. */
static void seg_repair(hps_shmdb_t *db)
{
    struct shm_hdr *h = db->hdr;
    uint64_t sum = 0, n = 0;
    uint64_t *link = &h->free_head;
    while (*link) {
        if (!free_entry_ok(db, *link) || ++n > (1u << 24)) {
            *link = 0;
            break;
        }
        struct shm_free *f = free_next_checked(db, *link);
        sum += f->bytes;
        link = &f->next;
    }
    atomic_store_explicit(&h->free_bytes, sum, memory_order_relaxed);
}

static int seg_lock(hps_shmdb_t *db)
{
    int rc = hps__shmdb_lock(&db->hdr->seg_lock);
    if (rc == 1) {
        seg_repair(db);
        hps__shmdb_lock_consistent(db, &db->hdr->seg_lock);
        rc = 0;
    }
    return rc;
}

/* ---- allocator --------------------------------------------------------- */

/* Commit [committed, end) with posix_fallocate in allocation_rate steps, so
 * a full /dev/shm is an error here and never a SIGBUS later. */
static hps_err_t commit_to(hps_shmdb_t *db, uint64_t end)
{
    struct shm_hdr *h = db->hdr;
    uint64_t c = atomic_load_explicit(&h->committed, memory_order_relaxed);
    if (end <= c)
        return 0;
    uint64_t to = hps__shmdb_round_up(end, h->allocation_rate);
    if (to > h->size_bytes)
        to = h->size_bytes;
    int rc = posix_fallocate(db->fd, (off_t)c, (off_t)(to - c));
    if (rc != 0)
        return -rc; /* -ENOSPC: /dev/shm is full, not the segment (HPS_ENOSPC) */
    /* why: a load writes every new page once; mapping them in one call costs
     * a fraction of one page fault each (Linux >= 5.14; elsewhere the
     * pages fault in on first touch, as before) */
    (void)madvise(hps__shmdb_ptr(db, c), to - c, HPS__SHMDB_MADV_POPULATE_WRITE);
    atomic_store_explicit(&h->committed, to, memory_order_relaxed);
    return 0;
}

static bool alloc_from_free_list(hps_shmdb_t *db, uint64_t bytes, uint64_t *ret_off)
{
    struct shm_hdr *h = db->hdr;
    uint64_t *link = &h->free_head;
    while (*link) {
        if (!free_entry_ok(db, *link)) {
            *link = 0; /* corrupt: cut the list here (leak the rest, never follow it) */
            break;
        }
        struct shm_free *f = free_next_checked(db, *link);
        if (f->bytes >= bytes) {
            uint64_t off = *link;
            if (f->bytes - bytes >= 4096) { /* split: keep the tail free */
                uint64_t tail = off + bytes;
                struct shm_free *t = hps__shmdb_ptr(db, tail);
                t->bytes = f->bytes - bytes;
                t->next = f->next;
                *link = tail;
            } else {
                bytes = f->bytes;
                *link = f->next;
            }
            atomic_fetch_sub_explicit(&h->free_bytes, bytes, memory_order_relaxed);
            *ret_off = off;
            return true;
        }
        link = &f->next;
    }
    return false;
}

hps_err_t hps__shmdb_alloc(hps_shmdb_t *db, uint64_t bytes, uint64_t *ret_off)
{
    struct shm_hdr *h = db->hdr;
    bytes = hps__shmdb_round_up(bytes ? bytes : 1, HPS_CACHELINE);
    int rc = seg_lock(db);
    if (rc < 0)
        return rc;
    uint64_t off = 0, clear = bytes; /* bytes at off that may hold old data */
    if (!alloc_from_free_list(db, bytes, &off)) {
        uint64_t b = atomic_load_explicit(&h->bump, memory_order_relaxed);
        if (bytes > h->size_bytes - b) {
            hps__shmdb_unlock(&h->seg_lock);
            return HPS_ENOSPC;
        }
        rc = commit_to(db, b + bytes);
        if (rc < 0) {
            hps__shmdb_unlock(&h->seg_lock);
            return rc;
        }
        off = b;
        atomic_store_explicit(&h->bump, b + bytes, memory_order_relaxed);
        /* why: the first touch of fresh pages is the costly part of a load;
         * clearing memory that is already zero would touch them twice */
        uint64_t zf = h->zero_from;
        if (zf != 0 && db->created)
            clear = zf <= b ? 0 : zf - b < bytes ? zf - b : bytes;
        if (zf != 0 && zf < b + bytes) /* kept by every allocator */
            h->zero_from = b + bytes;
    }
    hps__shmdb_unlock(&h->seg_lock);
    memset(hps__shmdb_ptr(db, off), 0, clear);
    *ret_off = off;
    return 0;
}

static struct shm_free *free_block(hps_shmdb_t *db, uint64_t off)
{
    return hps__shmdb_ptr(db, off);
}

/* Return a block.  The free list is kept in address order and adjacent
 * blocks are merged, so that row pages and hash blocks of different sizes,
 * freed by growth and clears, do not fragment the segment; a free block
 * that ends at the bump pointer goes back to it. */
void hps__shmdb_free(hps_shmdb_t *db, uint64_t off, uint64_t bytes)
{
    struct shm_hdr *h = db->hdr;
    if (!off || !bytes)
        return;
    bytes = hps__shmdb_round_up(bytes, HPS_CACHELINE);
    if (seg_lock(db) < 0)
        return; /* leak rather than corrupt */
    uint64_t pp = 0, prev = 0, cur = h->free_head;
    while (cur && free_entry_ok(db, cur) && cur < off) {
        pp = prev;
        prev = cur;
        cur = free_next_checked(db, cur)->next;
    }
    if (cur && !free_entry_ok(db, cur)) /* corrupt: cut the list here, as seg_repair does */
        cur = 0;
    struct shm_free *f = free_block(db, off);
    f->bytes = bytes;
    f->next = cur;
    if (prev)
        free_block(db, prev)->next = off;
    else
        h->free_head = off;
    atomic_fetch_add_explicit(&h->free_bytes, bytes, memory_order_relaxed);
    /* Each merge unlinks first and grows second: a holder that dies in
     * between leaks a block, it never leaves two free blocks overlapping. */
    if (cur && off + f->bytes == cur) { /* merge the next block in */
        uint64_t nbytes = free_block(db, cur)->bytes;
        f->next = free_block(db, cur)->next;
        f->bytes += nbytes;
    }
    uint64_t pred = prev;
    if (prev && prev + free_block(db, prev)->bytes == off) { /* merge into the previous */
        free_block(db, prev)->next = f->next;
        free_block(db, prev)->bytes += f->bytes;
        off = prev;
        f = free_block(db, prev);
        pred = pp;
    }
    uint64_t bump = atomic_load_explicit(&h->bump, memory_order_relaxed);
    if (f->next == 0 && off + f->bytes == bump) { /* the tail: give it back to the bump */
        if (pred)
            free_block(db, pred)->next = 0;
        else
            h->free_head = 0;
        atomic_fetch_sub_explicit(&h->free_bytes, f->bytes, memory_order_relaxed);
        atomic_store_explicit(&h->bump, off, memory_order_relaxed);
    }
    hps__shmdb_unlock(&h->seg_lock);
}
