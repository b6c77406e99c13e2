/*
 * table.c -- the table directory: create, find, describe.
 *
 * Table descriptors sit in a fixed array in the header.  A slot moves
 * 0 (free) -> 1 (being created, segment lock held) -> 2 (ready); readers use
 * only ready tables, and num_tables is published after the descriptor, so a
 * table id < num_tables is always ready.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static bool valid_name(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > HPS_SHMDB_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

static hps_err_t check_spec(const hps_table_spec_t *s)
{
    if (!s || !valid_name(s->model) || !valid_name(s->table))
        return HPS_EINVAL;
    if (s->dim == 0 || s->dim > HPS_SHMDB_MAX_DIM)
        return HPS_EINVAL;
    if (s->key_bytes != 4 && s->key_bytes != 8)
        return HPS_EINVAL;
    if (s->num_partitions == 0 || s->num_partitions > HPS_SHMDB_MAX_PARTITIONS)
        return HPS_EINVAL;
    if (!(s->overflow_resolution_target > 0.0 && s->overflow_resolution_target <= 1.0))
        return HPS_EINVAL;
    if (s->overflow_margin == 0 || (unsigned)s->overflow_policy > HPS_EVICT_OLDEST)
        return HPS_EINVAL;
    if ((unsigned)s->storage_type >= HPS_DTYPE_COUNT)
        return HPS_EINVAL;
    return 0;
}

/* Reason for a corrupt descriptor: into buf (when given) and returned. */
__attribute__((format(printf, 3, 4))) static const char *why(char *buf, size_t len, const char *fmt,
                                                             ...)
{
    va_list ap;
    if (!buf)
        return "corrupt";
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    return buf;
}

const char *hps__shmdb_table_problem(hps_shmdb_t *db, const struct shm_table *t, char *buf,
                                     size_t len)
{
    uint32_t np = t->num_partitions;
    if (np == 0 || np > HPS_SHMDB_MAX_PARTITIONS)
        return why(buf, len, "partition count %u out of range (1..%u)", np,
                   HPS_SHMDB_MAX_PARTITIONS);
    if (!hps__shmdb_block_ok(db, t->parts, (uint64_t)np * sizeof(struct shm_part)))
        return why(buf, len, "partition array offset %llu (0x%llx) out of bounds or misaligned",
                   (unsigned long long)t->parts, (unsigned long long)t->parts);
    if (t->dim == 0 || t->dim > HPS_SHMDB_MAX_DIM)
        return why(buf, len, "dim %u out of range (1..%u)", t->dim, HPS_SHMDB_MAX_DIM);
    if (t->dtype >= HPS_DTYPE_COUNT)
        return why(buf, len, "storage type %u is no type (0..%u)", t->dtype, HPS_DTYPE_COUNT - 1);
    if (t->layout > HPS_LAYOUT_ROWS_SOA)
        return why(buf, len, "layout %u is no layout (0..%u)", t->layout, HPS_LAYOUT_ROWS_SOA);
    if (t->key_bytes != 4 && t->key_bytes != 8)
        return why(buf, len, "key width %u bytes (4 or 8)", t->key_bytes);
    if (t->policy > HPS_EVICT_OLDEST)
        return why(buf, len, "overflow policy %u is no policy (0..%u)", t->policy,
                   (unsigned)HPS_EVICT_OLDEST);
    return NULL;
}

const char *hps__shmdb_name_problem(const char *name, size_t field, char *buf, size_t len)
{
    const char *nul = memchr(name, '\0', field);
    if (!nul)
        return why(buf, len, "no terminating NUL within its %zu bytes", field);
    size_t n = (size_t)(nul - name);
    if (n == 0 || n > HPS_SHMDB_NAME_MAX)
        return why(buf, len, "%zu bytes long (1..%d)", n, HPS_SHMDB_NAME_MAX);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return why(buf, len, "byte %zu is 0x%02x, outside [A-Za-z0-9_-]", i, c);
    }
    return NULL;
}

struct shm_table *hps__shmdb_table(hps_shmdb_t *db, uint32_t id)
{
    /* Acquire: pairs with the release store of num_tables in create. */
    uint32_t n = atomic_load_explicit(&db->hdr->num_tables, memory_order_acquire);
    if (id >= n || n > HPS_SHMDB_MAX_TABLES)
        return NULL;
    struct shm_table *t = &db->hdr->tables[id];
    return hps__shmdb_table_problem(db, t, NULL, 0) ? NULL : t;
}

hps_err_t hps_shmdb_table_entry(hps_shmdb_t *db, uint32_t id, hps_table_entry_t *ret)
{
    uint32_t n = atomic_load_explicit(&db->hdr->num_tables, memory_order_acquire);
    memset(ret, 0, sizeof(*ret));
    if (id >= n || n > HPS_SHMDB_MAX_TABLES)
        return HPS_ENOTFOUND;
    const struct shm_table *t = &db->hdr->tables[id];
    char why_model[96], why_table[96];
    /* At most HPS_SHMDB_NAME_MAX bytes of each, whether a NUL ends it or not. */
    snprintf(ret->model, sizeof(ret->model), "%.*s", HPS_SHMDB_NAME_MAX, t->model);
    snprintf(ret->table, sizeof(ret->table), "%.*s", HPS_SHMDB_NAME_MAX, t->table);
    if (hps__shmdb_table_problem(db, t, ret->problem, sizeof(ret->problem)))
        return HPS_ECORRUPT;
    if (hps__shmdb_name_problem(t->model, sizeof(t->model), why_model, sizeof(why_model))) {
        snprintf(ret->problem, sizeof(ret->problem), "model name: %s", why_model);
        return HPS_ECORRUPT;
    }
    if (hps__shmdb_name_problem(t->table, sizeof(t->table), why_table, sizeof(why_table))) {
        snprintf(ret->problem, sizeof(ret->problem), "table name: %s", why_table);
        return HPS_ECORRUPT;
    }
    return 0;
}

struct shm_part *hps__shmdb_parts(hps_shmdb_t *db, const struct shm_table *t)
{
    return hps__shmdb_ptr(db, t->parts);
}

uint32_t hps_shmdb_table_count(hps_shmdb_t *db)
{
    return atomic_load_explicit(&db->hdr->num_tables, memory_order_acquire);
}

hps_err_t hps_shmdb_table_find(hps_shmdb_t *db, const char *model, const char *table,
                               uint32_t *ret_id)
{
    uint32_t n = hps_shmdb_table_count(db);
    for (uint32_t i = 0; i < n && i < HPS_SHMDB_MAX_TABLES; i++) {
        struct shm_table *t = &db->hdr->tables[i];
        if (strncmp(t->model, model, sizeof(t->model)) == 0 &&
            strncmp(t->table, table, sizeof(t->table)) == 0) {
            *ret_id = i;
            return 0;
        }
    }
    return HPS_ENOTFOUND;
}

static void fill_descriptor(struct shm_table *t, const hps_table_spec_t *s)
{
    t->dim = s->dim;
    t->key_bytes = s->key_bytes;
    t->num_partitions = s->num_partitions;
    t->policy = (uint32_t)s->overflow_policy;
    t->default_value = s->default_value;
    t->dtype = (uint32_t)s->storage_type;
    t->layout = hps__shmdb_layout_for(t->dtype, hps__shmdb_vbytes(t->dtype, s->dim));
    t->margin = s->overflow_margin;
    t->target = s->overflow_resolution_target;
    t->expected_rows = s->expected_rows;
    t->source_rows = s->source_rows;
    t->model_version = s->model_version;
    t->order = s->order;
    snprintf(t->model, sizeof(t->model), "%s", s->model);
    snprintf(t->table, sizeof(t->table), "%s", s->table);
}

static hps_err_t create_partitions(hps_shmdb_t *db, struct shm_table *t)
{
    hps_err_t rc =
        hps__shmdb_alloc(db, (uint64_t)t->num_partitions * sizeof(struct shm_part), &t->parts);
    if (rc < 0)
        return rc;
    struct shm_part *p = hps__shmdb_parts(db, t);
    for (uint32_t i = 0; i < t->num_partitions; i++) {
        /* Different seeds so random eviction differs between partitions. */
        p[i].rng = 0x9E3779B97F4A7C15ULL * (i + 1) ^ (uint64_t)(uintptr_t)t;
        if ((rc = hps__shmdb_mutex_init(&p[i].lock)) < 0)
            return rc;
        if ((rc = hps__shmdb_part_init(db, t, &p[i])) < 0)
            return rc;
    }
    return 0;
}

/* Same geometry -> the existing table is opened. */
static hps_err_t open_existing(hps_shmdb_t *db, const hps_table_spec_t *s, uint32_t *ret_id)
{
    uint32_t id;
    if (hps_shmdb_table_find(db, s->model, s->table, &id) < 0)
        return HPS_ENOTFOUND;
    struct shm_table *t = &db->hdr->tables[id];
    if (t->dim != s->dim || t->key_bytes != s->key_bytes ||
        t->num_partitions != s->num_partitions || t->dtype != (uint32_t)s->storage_type)
        return HPS_EMISMATCH;
    *ret_id = id;
    return 0;
}

hps_err_t hps_shmdb_table_create(hps_shmdb_t *db, const hps_table_spec_t *spec, uint32_t *ret_id)
{
    hps_err_t rc = check_spec(spec);
    if (rc < 0)
        return rc;
    struct shm_hdr *h = db->hdr;
    rc = open_existing(db, spec, ret_id);
    if (rc != HPS_ENOTFOUND)
        return rc;
    /* The directory lock serializes creators for the whole creation; the
     * allocator takes its own lock inside. */
    int lr = hps__shmdb_lock(&h->dir_lock);
    if (lr < 0)
        return lr;
    if (lr == 1) /* a creator died: its half-built slot is rebuilt below, its blocks leak */
        hps__shmdb_lock_consistent(db, &h->dir_lock);
    uint32_t id = atomic_load_explicit(&h->num_tables, memory_order_relaxed);
    rc = open_existing(db, spec, ret_id); /* lost a race with another creator? */
    if (rc != HPS_ENOTFOUND)
        goto out;
    rc = HPS_EFULL;
    if (id >= HPS_SHMDB_MAX_TABLES)
        goto out;
    struct shm_table *t = &h->tables[id];
    memset(t, 0, sizeof(*t));
    atomic_store(&t->state, 1);
    fill_descriptor(t, spec);
    rc = create_partitions(db, t);
    if (rc < 0) {
        atomic_store(&t->state, 0);
        goto out;
    }
    atomic_store(&t->state, 2);
    /* Release: a reader that sees the new count sees the whole descriptor. */
    atomic_store_explicit(&h->num_tables, id + 1, memory_order_release);
    *ret_id = id;
out:
    hps__shmdb_unlock(&h->dir_lock);
    return rc;
}

hps_err_t hps_shmdb_partition_info(hps_shmdb_t *db, uint32_t id, hps_partition_info_t *parts)
{
    struct shm_table *t = hps__shmdb_table(db, id);
    if (!t)
        return HPS_ENOTFOUND;
    struct shm_part *p = hps__shmdb_parts(db, t);
    for (uint32_t i = 0; i < t->num_partitions; i++) {
        uint64_t pages = 0;
        if (p[i].pagetab)
            pages = p[i].page_bytes + HPS_MAX_ROW_PAGES * sizeof(struct shm_page);
        uint64_t g = atomic_load_explicit(&p[i].geom, memory_order_acquire);
        parts[i] = (hps_partition_info_t){
            .rows = atomic_load_explicit(&p[i].rows, memory_order_relaxed),
            .capacity = (uint64_t)HPS_GEOM_NB(g) * HPS_BUCKET_SLOTS,
            .bytes = p[i].blk_bytes + pages,
            .evictions = atomic_load_explicit(&p[i].evictions, memory_order_relaxed),
            .repairs = atomic_load_explicit(&p[i].repairs, memory_order_relaxed),
        };
    }
    return 0;
}

/* Set table id's ddb_ident, or its files_ident (files): release store. */
static hps_err_t ident_set(hps_shmdb_t *db, uint32_t id, bool files, uint64_t ident)
{
    struct shm_table *t = hps__shmdb_table(db, id);
    if (!t)
        return HPS_ENOTFOUND;
    atomic_store_explicit(files ? &t->files_ident : &t->ddb_ident, ident, memory_order_release);
    return 0;
}

/* Table id's ddb_ident or files_ident (files), acquire load; 0 for a bad id. */
static uint64_t ident_get(hps_shmdb_t *db, uint32_t id, bool files)
{
    struct shm_table *t = hps__shmdb_table(db, id);
    return t ? atomic_load_explicit(files ? &t->files_ident : &t->ddb_ident, memory_order_acquire)
             : 0;
}

hps_err_t hps_shmdb_table_set_ddb_ident(hps_shmdb_t *db, uint32_t id, uint64_t ident)
{
    return ident_set(db, id, false, ident);
}

uint64_t hps_shmdb_table_ddb_ident(hps_shmdb_t *db, uint32_t id)
{
    return ident_get(db, id, false);
}

hps_err_t hps_shmdb_table_set_files_ident(hps_shmdb_t *db, uint32_t id, uint64_t ident)
{
    return ident_set(db, id, true, ident);
}

uint64_t hps_shmdb_table_files_ident(hps_shmdb_t *db, uint32_t id)
{
    return ident_get(db, id, true);
}

hps_err_t hps_shmdb_table_info(hps_shmdb_t *db, uint32_t id, hps_table_info_t *ret)
{
    struct shm_table *t = hps__shmdb_table(db, id);
    if (!t)
        return HPS_ENOTFOUND;
    hps_partition_info_t parts[HPS_SHMDB_MAX_PARTITIONS];
    hps_shmdb_partition_info(db, id, parts);
    memset(ret, 0, sizeof(*ret));
    snprintf(ret->model, sizeof(ret->model), "%.*s", HPS_SHMDB_NAME_MAX, t->model);
    snprintf(ret->table, sizeof(ret->table), "%.*s", HPS_SHMDB_NAME_MAX, t->table);
    ret->id = id;
    ret->dim = t->dim;
    ret->key_bytes = t->key_bytes;
    ret->num_partitions = t->num_partitions;
    ret->default_value = t->default_value;
    ret->overflow_margin = t->margin;
    ret->overflow_policy = (hps_overflow_policy_t)t->policy;
    ret->overflow_resolution_target = t->target;
    ret->source_rows = t->source_rows;
    ret->model_version = t->model_version;
    ret->order = t->order;
    ret->storage_type = (hps_dtype_t)t->dtype;
    ret->row_bytes = (uint32_t)hps_dtype_row_bytes((hps_dtype_t)t->dtype, t->dim);
    ret->slot_bytes = hps__shmdb_vbytes(t->dtype, t->dim);
    for (uint32_t i = 0; i < t->num_partitions; i++) {
        ret->rows += parts[i].rows;
        ret->capacity += parts[i].capacity;
        ret->bytes += parts[i].bytes;
        ret->evictions += parts[i].evictions;
    }
    ret->bytes += (uint64_t)t->num_partitions * sizeof(struct shm_part);
    ret->lookups = atomic_load_explicit(&t->lookups, memory_order_relaxed);
    ret->hits = atomic_load_explicit(&t->hits, memory_order_relaxed);
    ret->inserts = atomic_load_explicit(&t->inserts, memory_order_relaxed);
    ret->updates = atomic_load_explicit(&t->updates, memory_order_relaxed);
    ret->erased = atomic_load_explicit(&t->erased, memory_order_relaxed);
    return 0;
}

hps_err_t hps_shmdb_size(hps_shmdb_t *db, uint32_t id, uint64_t *ret_rows)
{
    struct shm_table *t = hps__shmdb_table(db, id);
    if (!t)
        return HPS_ENOTFOUND;
    struct shm_part *p = hps__shmdb_parts(db, t);
    uint64_t n = 0;
    for (uint32_t i = 0; i < t->num_partitions; i++)
        n += atomic_load_explicit(&p[i].rows, memory_order_relaxed);
    *ret_rows = n;
    return 0;
}

double hps_shmdb_bytes_per_slot_of(uint32_t dim, hps_overflow_policy_t policy, hps_dtype_t dtype)
{
    uint32_t vbytes = hps__shmdb_vbytes((uint32_t)dtype, dim);
    if (vbytes == 0)
        return 0.0;
    uint32_t layout = hps__shmdb_layout_for((uint32_t)dtype, vbytes);
    struct shm_geo g = hps__shmdb_geo(layout, vbytes, (uint32_t)policy, 1u << 16);
    double b = (double)g.bytes / ((1u << 16) * HPS_BUCKET_SLOTS);
    if (hps__shmdb_layout_paged(layout))
        b += vbytes; /* the row, in a row page */
    return b;
}

double hps_shmdb_bytes_per_slot(uint32_t dim, hps_overflow_policy_t policy)
{
    return hps_shmdb_bytes_per_slot_of(dim, policy, HPS_DTYPE_FP32);
}
