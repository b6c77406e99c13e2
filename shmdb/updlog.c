/*
 * updlog.c -- what the coordinator tells the workers about online updates:
 * the update statistics of each layer (for /metrics) and the per-table
 * update logs (changed keys with a sequence number; a reader
 * lapped by the log does a full refresh); and, published the same way, the
 * distributed DB's counters (for /metrics).
 *
 * Update log: a ring of cap slots per table, one writer (the coordinator).
 * Key number s (s = 0, 1, ...) goes to slot s & (cap - 1), which is
 * validated like a seqlock by its own sequence word:
 *
 *   writer: seq = UINT64_MAX; fence(release); key = k; seq = s + 1 (release)
 *   reader: q = seq (acquire); k = key; fence(acquire); q' = seq
 *           k is key s iff q == q' == s + 1
 *
 * and head (the next s) is stored with release after the slots, so a reader
 * that loads head (acquire) finds every slot below it written, unless the
 * writer has lapped it since, which the slot check reports.
 */
#include <string.h>
#include <time.h>

#include "internal.h"

#define SLOT_BUSY UINT64_MAX

static const char *const layer_names[HPS_SHMDB_UPDATE_LAYERS] = {"volatile", "persistent",
                                                                 "distributed"};

const char *hps_shmdb_update_layer_name(uint32_t layer)
{
    return layer < HPS_SHMDB_UPDATE_LAYERS ? layer_names[layer] : NULL;
}

/* ---- Area creation ------------------------------------------------------ */

/* The block at *slot (a header offset word), if set and in bounds. */
void *hps__shmdb_area(hps_shmdb_t *db, uint64_t *slot, uint64_t bytes)
{
    uint64_t off = atomic_load_explicit((_Atomic uint64_t *)slot, memory_order_acquire);
    if (!off || !hps__shmdb_block_ok(db, off, bytes))
        return NULL; /* not a block the allocator hands out: corrupt */
    return hps__shmdb_ptr(db, off);
}

/* Allocate a zeroed block of `bytes` and publish it at *slot, once. */
hps_err_t hps__shmdb_area_create(hps_shmdb_t *db, uint64_t *slot, uint64_t bytes)
{
    int lr = hps__shmdb_lock(&db->hdr->dir_lock);
    if (lr < 0)
        return lr;
    if (lr == 1)
        hps__shmdb_lock_consistent(db, &db->hdr->dir_lock);
    hps_err_t rc = 0;
    if (!hps__shmdb_area(db, slot, bytes)) {
        uint64_t off;
        rc = hps__shmdb_alloc(db, bytes, &off);
        if (rc == 0) /* release: the block is zeroed before anyone finds it */
            atomic_store_explicit((_Atomic uint64_t *)slot, off, memory_order_release);
    }
    hps__shmdb_unlock(&db->hdr->dir_lock);
    return rc;
}

/* ---- Update statistics -------------------------------------------------- */

static struct shm_ustats *ustats(hps_shmdb_t *db)
{
    return hps__shmdb_area(db, &db->hdr->ustats_off, sizeof(struct shm_ustats));
}

hps_err_t hps_shmdb_update_stats_set(hps_shmdb_t *db, uint32_t layer, const hps_update_stats_t *s)
{
    if (layer >= HPS_SHMDB_UPDATE_LAYERS || !s)
        return HPS_EINVAL;
    struct shm_ustats *u = ustats(db);
    if (!u) {
        hps_err_t rc = hps__shmdb_area_create(db, &db->hdr->ustats_off, sizeof(struct shm_ustats));
        if (rc < 0 || !(u = ustats(db)))
            return rc < 0 ? rc : HPS_ENOSPC;
    }
    struct shm_ustat *d = &u->layer[layer];
    ST(d->messages, s->messages);
    ST(d->received, s->received);
    ST(d->nonfinite, s->nonfinite);
    ST(d->offset_resets, s->offset_resets);
    ST(d->applied, s->applied);
    for (int i = 0; i < HPS_SHMDB_UPDATE_REASONS; i++)
        ST(d->skipped[i], s->skipped[i]);
    ST(d->beacons, s->beacons);
    ST(d->errors, s->errors);
    ST(d->lag, s->lag);
    ST(d->newest_applied_ms, s->newest_applied_ms);
    ST(d->published_ms, s->published_ms);
    atomic_store_explicit(&d->valid, 1, memory_order_release);
    return 0;
}

hps_err_t hps_shmdb_update_stats_get(hps_shmdb_t *db, uint32_t layer, hps_update_stats_t *ret)
{
    if (layer >= HPS_SHMDB_UPDATE_LAYERS || !ret)
        return HPS_EINVAL;
    struct shm_ustats *u = ustats(db);
    if (!u || !atomic_load_explicit(&u->layer[layer].valid, memory_order_acquire))
        return HPS_ENOTFOUND;
    struct shm_ustat *d = &u->layer[layer];
    ret->messages = LD(d->messages);
    ret->received = LD(d->received);
    ret->nonfinite = LD(d->nonfinite);
    ret->offset_resets = LD(d->offset_resets);
    ret->applied = LD(d->applied);
    for (int i = 0; i < HPS_SHMDB_UPDATE_REASONS; i++)
        ret->skipped[i] = LD(d->skipped[i]);
    ret->beacons = LD(d->beacons);
    ret->errors = LD(d->errors);
    ret->lag = LD(d->lag);
    ret->newest_applied_ms = LD(d->newest_applied_ms);
    ret->published_ms = LD(d->published_ms);
    return 0;
}

/* ---- Distributed-DB statistics ------------------------------------------ */

/* An area of its own (hdr->ddbstats_off, a word taken from the header's
 * reserved ones) rather than more fields in struct shm_ustats: these are
 * not update counters, and a segment of an older build has ustats_off set
 * with no room for them.  See layout.h (struct shm_hdr) for why no layout
 * version changes. */
static struct shm_ddbstats *ddbstats(hps_shmdb_t *db)
{
    return hps__shmdb_area(db, &db->hdr->ddbstats_off, sizeof(struct shm_ddbstats));
}

hps_err_t hps_shmdb_ddb_stats_set(hps_shmdb_t *db, const hps_shmdb_ddb_stats_t *s)
{
    if (!db || !s)
        return HPS_EINVAL;
    struct shm_ddbstats *d = ddbstats(db);
    if (!d) {
        hps_err_t rc =
            hps__shmdb_area_create(db, &db->hdr->ddbstats_off, sizeof(struct shm_ddbstats));
        if (rc < 0 || !(d = ddbstats(db)))
            return rc < 0 ? rc : HPS_ENOSPC;
    }
    ST(d->lookup_keys, s->lookup_keys);
    ST(d->lookup_hits, s->lookup_hits);
    ST(d->insert_rows, s->insert_rows);
    ST(d->evicted_rows, s->evicted_rows);
    ST(d->errors, s->errors);
    ST(d->touches_dropped, s->touches_dropped);
    ST(d->bad_values, s->bad_values);
    ST(d->published_ms, s->published_ms);
    atomic_store_explicit(&d->valid, 1, memory_order_release);
    return 0;
}

hps_err_t hps_shmdb_ddb_stats_get(hps_shmdb_t *db, hps_shmdb_ddb_stats_t *ret)
{
    if (!db || !ret)
        return HPS_EINVAL;
    struct shm_ddbstats *d = ddbstats(db);
    if (!d || !atomic_load_explicit(&d->valid, memory_order_acquire))
        return HPS_ENOTFOUND;
    ret->lookup_keys = LD(d->lookup_keys);
    ret->lookup_hits = LD(d->lookup_hits);
    ret->insert_rows = LD(d->insert_rows);
    ret->evicted_rows = LD(d->evicted_rows);
    ret->errors = LD(d->errors);
    ret->touches_dropped = LD(d->touches_dropped);
    ret->bad_values = LD(d->bad_values);
    ret->published_ms = LD(d->published_ms);
    return 0;
}

/* ---- Update logs -------------------------------------------------------- */

static struct shm_updlog_dir *updlog_dir(hps_shmdb_t *db)
{
    return hps__shmdb_area(db, &db->hdr->updlog_off, sizeof(struct shm_updlog_dir));
}

static uint64_t ring_bytes(uint64_t cap)
{
    return sizeof(struct shm_updlog) + cap * sizeof(struct shm_updslot);
}

/* The ring of a table, or NULL (no log, bad id, corrupt offset). */
static struct shm_updlog *ring(hps_shmdb_t *db, uint32_t id)
{
    struct shm_updlog_dir *d = updlog_dir(db);
    if (!d || id >= HPS_SHMDB_MAX_TABLES)
        return NULL;
    uint64_t off = atomic_load_explicit(&d->ring[id], memory_order_acquire);
    if (!off || !hps__shmdb_block_ok(db, off, sizeof(struct shm_updlog)))
        return NULL;
    struct shm_updlog *r = hps__shmdb_ptr(db, off);
    uint32_t cap = r->cap;
    if (cap == 0 || (cap & (cap - 1)) || !hps__shmdb_in_bounds(db, off, ring_bytes(cap)))
        return NULL;
    return r;
}

static hps_err_t ring_create(hps_shmdb_t *db, struct shm_updlog_dir *d, uint32_t id, uint32_t cap,
                             uint32_t key_bytes)
{
    int lr = hps__shmdb_lock(&db->hdr->dir_lock);
    if (lr < 0)
        return lr;
    if (lr == 1)
        hps__shmdb_lock_consistent(db, &db->hdr->dir_lock);
    hps_err_t rc = 0;
    if (!atomic_load_explicit(&d->ring[id], memory_order_acquire)) {
        uint64_t off;
        rc = hps__shmdb_alloc(db, ring_bytes(cap), &off);
        if (rc == 0) {
            struct shm_updlog *r = hps__shmdb_ptr(db, off);
            r->cap = cap;
            r->key_bytes = key_bytes;
            atomic_store_explicit(&d->ring[id], off, memory_order_release);
        }
    }
    hps__shmdb_unlock(&db->hdr->dir_lock);
    return rc;
}

hps_err_t hps_shmdb_updlog_init(hps_shmdb_t *db, uint32_t id, uint32_t capacity)
{
    if (capacity < 64 || capacity > (1u << 30) || (capacity & (capacity - 1)))
        return HPS_EINVAL;
    struct shm_table *t = hps__shmdb_table(db, id);
    if (!t)
        return HPS_ENOTFOUND;
    if (ring(db, id))
        return 0;
    struct shm_updlog_dir *d = updlog_dir(db);
    if (!d) {
        hps_err_t rc =
            hps__shmdb_area_create(db, &db->hdr->updlog_off, sizeof(struct shm_updlog_dir));
        if (rc < 0 || !(d = updlog_dir(db)))
            return rc < 0 ? rc : HPS_ENOSPC;
    }
    return ring_create(db, d, id, capacity, t->key_bytes);
}

static uint64_t key_at(const void *keys, uint32_t key_bytes, size_t i)
{
    if (key_bytes == 4)
        return ((const uint32_t *)keys)[i];
    uint64_t k;
    memcpy(&k, (const uint8_t *)keys + i * 8, 8);
    return k;
}

static void key_put(void *keys, uint32_t key_bytes, size_t i, uint64_t k)
{
    if (key_bytes == 4)
        ((uint32_t *)keys)[i] = (uint32_t)k;
    else
        memcpy((uint8_t *)keys + i * 8, &k, 8);
}

hps_err_t hps_shmdb_updlog_append(hps_shmdb_t *db, uint32_t id, size_t n, const void *keys)
{
    struct shm_updlog *r = ring(db, id);
    if (!r)
        return HPS_ENOTFOUND;
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    uint64_t mask = r->cap - 1;
    /* Only the last cap keys of a larger batch survive; skip the others. */
    size_t first = n > r->cap ? n - r->cap : 0;
    for (size_t i = first; i < n; i++) {
        uint64_t s = head + i;
        struct shm_updslot *sl = &r->slot[s & mask];
        atomic_store_explicit(&sl->seq, SLOT_BUSY, memory_order_relaxed);
        atomic_thread_fence(memory_order_release);
        atomic_store_explicit(&sl->key, key_at(keys, r->key_bytes, i), memory_order_relaxed);
        atomic_store_explicit(&sl->seq, s + 1, memory_order_release);
    }
    atomic_store_explicit(&r->head, head + n, memory_order_release);
    return 0;
}

/* Key number s from its slot; false if the slot no longer (or not yet)
 * holds it. */
static bool slot_read(struct shm_updlog *r, uint64_t s, uint64_t *ret)
{
    struct shm_updslot *sl = &r->slot[s & (r->cap - 1)];
    uint64_t q = atomic_load_explicit(&sl->seq, memory_order_acquire);
    uint64_t k = atomic_load_explicit(&sl->key, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    uint64_t q2 = atomic_load_explicit(&sl->seq, memory_order_relaxed);
    *ret = k;
    return q == s + 1 && q2 == q;
}

hps_err_t hps_shmdb_updlog_read(hps_shmdb_t *db, uint32_t id, uint64_t since, void *keys_out,
                                size_t max, size_t *ret_n, uint64_t *ret_next, bool *ret_lapped)
{
    struct shm_updlog *r = ring(db, id);
    *ret_n = 0;
    *ret_lapped = false;
    *ret_next = since;
    if (!r)
        return HPS_ENOTFOUND;
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    uint64_t oldest = head > r->cap ? head - r->cap : 0;
    if (since < oldest || since > head) {
        *ret_lapped = true;
        *ret_next = head;
        return 0;
    }
    size_t n = head - since < max ? (size_t)(head - since) : max;
    for (size_t i = 0; i < n; i++) {
        uint64_t k;
        if (!slot_read(r, since + i, &k)) {
            *ret_lapped = true; /* overwritten while we read */
            *ret_next = atomic_load_explicit(&r->head, memory_order_acquire);
            return 0;
        }
        key_put(keys_out, r->key_bytes, i, k);
    }
    *ret_n = n;
    *ret_next = since + n;
    return 0;
}

hps_err_t hps_shmdb_updlog_head(hps_shmdb_t *db, uint32_t id, uint64_t *ret_head,
                                uint32_t *ret_capacity)
{
    struct shm_updlog *r = ring(db, id);
    if (!r)
        return HPS_ENOTFOUND;
    if (ret_head)
        *ret_head = atomic_load_explicit(&r->head, memory_order_acquire);
    if (ret_capacity)
        *ret_capacity = r->cap;
    return 0;
}
