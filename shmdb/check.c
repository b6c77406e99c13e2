/*
 * check.c -- hps_shmdb_check(): a full consistency walk of the segment.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wview.h"

struct checker {
    hps_shmdb_report_fn report;
    void *ctx;
    uint64_t problems;
};

static void problem(struct checker *c, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    c->problems++;
    if (c->report)
        c->report(c->ctx, msg);
}

static void check_header(hps_shmdb_t *db, struct checker *c)
{
    struct shm_hdr *h = db->hdr;
    uint64_t bump = atomic_load(&h->bump), committed = atomic_load(&h->committed);
    if (bump > h->size_bytes || committed > h->size_bytes || bump > committed)
        problem(c, "header: allocator bump %llu, committed %llu, size %llu out of order",
                (unsigned long long)bump, (unsigned long long)committed,
                (unsigned long long)h->size_bytes);
    uint64_t free_sum = 0, n = 0;
    for (uint64_t off = h->free_head; off; n++) {
        /* Blocks are 64-byte aligned: a misaligned entry is corrupt (and
         * must not be read as a struct shm_free). */
        if (!hps__shmdb_in_bounds(db, off, sizeof(struct shm_free)) ||
            (off & (HPS_CACHELINE - 1)) || off >= bump || n > (1u << 24)) {
            problem(c, "allocator: free-list entry %llu out of bounds or misaligned",
                    (unsigned long long)off);
            break;
        }
        struct shm_free *f = hps__shmdb_ptr(db, off);
        free_sum += f->bytes;
        off = f->next;
    }
    if (free_sum != atomic_load(&h->free_bytes))
        problem(c, "allocator: free list holds %llu bytes, header says %llu",
                (unsigned long long)free_sum, (unsigned long long)atomic_load(&h->free_bytes));
    if (atomic_load(&h->num_tables) > HPS_SHMDB_MAX_TABLES)
        problem(c, "header: num_tables %u out of range (at most %u): tables not checked",
                atomic_load(&h->num_tables), HPS_SHMDB_MAX_TABLES);
}

/* One optional area's header word (missq_off ...): 0 (absent) or a block
 * the readers follow (hps__shmdb_block_ok, the rule of hps__shmdb_area);
 * the readers ignore any other value, so the area is lost. */
static void check_area(hps_shmdb_t *db, struct checker *c, const char *field, uint64_t off,
                       uint64_t bytes)
{
    if (off && !hps__shmdb_block_ok(db, off, bytes))
        problem(c,
                "header: %s %llu (0x%llx) out of bounds or misaligned (a %llu-byte block, "
                "64-byte aligned, between %llu and %llu)",
                field, (unsigned long long)off, (unsigned long long)off, (unsigned long long)bytes,
                (unsigned long long)HDR_BYTES, (unsigned long long)db->size);
}

static void check_areas(hps_shmdb_t *db, struct checker *c)
{
    struct shm_hdr *h = db->hdr;
    /* The published words, as the readers load them (acquire). */
#define AREA(f) atomic_load_explicit((_Atomic uint64_t *)&h->f, memory_order_acquire)
    uint64_t missq = AREA(missq_off);
    check_area(db, c, "missq_off", missq, HPS_CACHELINE); /* the queue's header line */
    if (missq && hps__shmdb_block_ok(db, missq, HPS_CACHELINE) && !hps__shmdb_missq_ok(db))
        problem(c, "miss queue at %llu: its slots run past the end of the segment",
                (unsigned long long)missq);
    check_area(db, c, "gpureg_off", AREA(gpureg_off), sizeof(struct shm_gpureg));
    check_area(db, c, "updlog_off", AREA(updlog_off), sizeof(struct shm_updlog_dir));
    check_area(db, c, "ustats_off", AREA(ustats_off), sizeof(struct shm_ustats));
    check_area(db, c, "ddbstats_off", AREA(ddbstats_off), sizeof(struct shm_ddbstats));
    uint64_t ct = AREA(conftext_off);
    check_area(db, c, "conftext_off", ct, sizeof(struct shm_conftext));
    if (ct && hps__shmdb_block_ok(db, ct, sizeof(struct shm_conftext))) {
        uint64_t len = ((const struct shm_conftext *)hps__shmdb_ptr(db, ct))->len;
        if (len > HPS_SHMDB_CONF_TEXT_MAX ||
            !hps__shmdb_in_bounds(db, ct, sizeof(struct shm_conftext) + len + 1))
            problem(c,
                    "header: conftext_off %llu: its text of %llu bytes runs past the end of "
                    "the segment (or past %u bytes)",
                    (unsigned long long)ct, (unsigned long long)len, HPS_SHMDB_CONF_TEXT_MAX);
    }
#undef AREA
}

/* A table's names: what a coordinator writes (hps__shmdb_name_problem). */
static void check_names(const struct shm_table *t, uint32_t id, struct checker *c)
{
    char why[96];
    if (hps__shmdb_name_problem(t->model, sizeof(t->model), why, sizeof(why)))
        problem(c, "table %u: model name: %s", id, why);
    if (hps__shmdb_name_problem(t->table, sizeof(t->table), why, sizeof(why)))
        problem(c, "table %u: table name: %s", id, why);
}

/* Overflow counts expected from the keys present, compared to the stored. */
static void check_ovf(const struct wview *w, struct checker *c, const char *where)
{
    uint32_t *want = calloc(w->nb, sizeof(uint32_t));
    if (!want)
        return;
    for (uint32_t bi = 0; bi < w->nb; bi++)
        for (unsigned m = hps__shmdb_occ(BKT(w, bi)); m; m &= m - 1) {
            uint64_t key = atomic_load(&BKT(w, bi)->key[__builtin_ctz(m)]);
            uint64_t h = hps_rrxmrrxmsx_0(key);
            for (uint32_t x = (uint32_t)(((h >> 32) * (uint64_t)w->nb) >> 32); x != bi;
                 x = x + 1 == w->nb ? 0 : x + 1)
                want[x]++;
        }
    for (uint32_t bi = 0; bi < w->nb; bi++) {
        unsigned have = atomic_load(&BKT(w, bi)->ovf);
        /* 255 is sticky: a saturated count is never decremented. */
        if (have != want[bi] && have != 255)
            problem(c, "%s bucket %u: overflow count %u, keys passing it %u", where, bi, have,
                    want[bi]);
    }
    free(want);
}

static void check_rows(const struct wview *w, struct checker *c, const char *where)
{
    struct rowmap rm;
    if (!hps__shmdb_rowmap_init(&rm, w))
        return;
    uint64_t used = 0, freed = 0;
    for (uint32_t bi = 0; bi < w->nb; bi++)
        for (unsigned m = hps__shmdb_occ(BKT(w, bi)); m; m &= m - 1) {
            uint32_t r = atomic_load(ROWID(w, (uint64_t)bi * HPS_BUCKET_SLOTS + __builtin_ctz(m)));
            if (!hps__shmdb_row_valid(w, r))
                problem(c, "%s bucket %u: row id 0x%x out of range", where, bi, r);
            else if (hps__shmdb_rowmap_set(&rm, r))
                problem(c, "%s bucket %u: row id 0x%x used twice", where, bi, r);
            else
                used++;
        }
    for (uint32_t r = w->p->free_row; r != HPS_NO_ROW; freed++) {
        if (!hps__shmdb_row_valid(w, r) || hps__shmdb_rowmap_set(&rm, r)) {
            problem(c, "%s: free-row list entry 0x%x invalid or in use", where, r);
            break;
        }
        memcpy(&r,
               hps__shmdb_ptr(w->db, w->pages[r >> HPS_PAGE_SHIFT].off +
                                         (uint64_t)(r & (HPS_PAGE_MAX_ROWS - 1)) * w->vbytes),
               sizeof(r));
    }
    uint32_t np = atomic_load(&w->p->npages);
    if (used + freed != rm.prefix[np])
        problem(c, "%s: %llu rows used + %llu free != %llu handed out", where,
                (unsigned long long)used, (unsigned long long)freed,
                (unsigned long long)rm.prefix[np]);
    free(rm.bits);
}

static void check_part(hps_shmdb_t *db, const struct shm_table *t, struct shm_part *p, uint32_t pi,
                       struct checker *c)
{
    char where[300];
    struct wview w;
    snprintf(where, sizeof(where), "table %.*s.%.*s partition %u", HPS_SHMDB_NAME_MAX, t->model,
             HPS_SHMDB_NAME_MAX, t->table, pi);
    if (!hps__shmdb_wview_current(db, t, p, &w)) {
        problem(c, "%s: hash block out of bounds", where);
        return;
    }
    uint64_t rows = 0;
    for (uint32_t bi = 0; bi < w.nb; bi++) {
        struct shm_bucket *b = BKT(&w, bi);
        if (atomic_load(&b->ver) & 1)
            problem(c, "%s bucket %u: version odd (writer inside)", where, bi);
        for (unsigned m = hps__shmdb_occ(b); m; m &= m - 1) {
            int s = __builtin_ctz(m);
            uint64_t key = atomic_load(&b->key[s]);
            uint32_t fb;
            rows++;
            if (hps_rrxmrrxmsx_0(key) % t->num_partitions != pi)
                problem(c, "%s bucket %u: key %lld belongs to another partition", where, bi,
                        (long long)key);
            if (hps__shmdb_wfind(&w, key, &fb) != s || fb != bi)
                problem(c, "%s bucket %u: key %lld unreachable or duplicated", where, bi,
                        (long long)key);
        }
    }
    if (rows != atomic_load(&p->rows))
        problem(c, "%s: %llu keys present, counter says %llu", where, (unsigned long long)rows,
                (unsigned long long)atomic_load(&p->rows));
    if (rows > t->margin)
        problem(c, "%s: %llu rows above overflow_margin %llu", where, (unsigned long long)rows,
                (unsigned long long)t->margin);
    check_ovf(&w, c, where);
    if (w.rowid && !hps__shmdb_pages_ok(&w))
        problem(c, "%s: row pages out of bounds", where);
    else if (w.rowid)
        check_rows(&w, c, where);
}

hps_err_t hps_shmdb_check(hps_shmdb_t *db, hps_shmdb_report_fn report, void *ctx,
                          uint64_t *ret_problems)
{
    struct checker c = {.report = report, .ctx = ctx};
    check_header(db, &c);
    check_areas(db, &c);
    uint32_t n = hps_shmdb_table_count(db);
    for (uint32_t id = 0; id < n && n <= HPS_SHMDB_MAX_TABLES; id++) {
        struct shm_table *t = hps__shmdb_table(db, id);
        char why[160];
        check_names(&db->hdr->tables[id], id, &c);
        if (!t) {
            hps__shmdb_table_problem(db, &db->hdr->tables[id], why, sizeof(why));
            problem(&c, "table %u: corrupt descriptor: %s", id, why);
            continue;
        }
        for (uint32_t pi = 0; pi < t->num_partitions; pi++) {
            struct shm_part *p = &hps__shmdb_parts(db, t)[pi];
            int rc = hps__shmdb_part_lock(db, t, p);
            if (rc < 0)
                return rc;
            check_part(db, t, p, pi, &c);
            hps__shmdb_unlock(&p->lock);
        }
    }
    *ret_problems = c.problems;
    return 0;
}
