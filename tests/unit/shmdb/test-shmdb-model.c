/*
 * test-shmdb-model.c -- the shmdb hash map against a reference model.
 *
 * Six configurations (dim 1, 16, 128 x key_bytes 4, 8, with 1..16
 * partitions) each run 1,000,000 random batch operations (6,000,000 in all;
 * HPS_TEST_MODEL_OPS sets the number per configuration, HPS_TEST_SEED
 * repeats a run).  One "operation" is one API call on a batch of 1..1024
 * keys (80% of batches 1..8 keys), so each configuration moves ~27 million
 * keys; about 19 s for all six on one core, ~1.6x that under ASan.
 *
 * Keys come from a universe of 16384 keys (special values first: 0, -1,
 * INT64_MIN/MAX, keys that differ only above bit 32, ...) so that updates and
 * erases hit; lookups and erases also use keys never inserted.  The model is
 * a dense array indexed by the key's position in the universe.  Checked:
 *  - lookup: found mask, hit count, every found vector bit-exact (memcmp),
 *    rows of missing keys filled with the default value; duplicate keys within a batch;
 *  - upsert: inserted count = distinct new keys; duplicates: the last wins;
 *  - erase: erased count = distinct present keys;
 *  - hps_shmdb_size after every operation; clear (rarely);
 *  - iterate (every few thousand operations): each row once, bit-exact,
 *    same count; per-partition row counts = the model's under HugeCTR's
 *    partition rule; hps_shmdb_check reports nothing;
 *  - the table counters (lookups, hits, inserts, updates, evictions = 0).
 * overflow_margin is unbounded, so nothing may be evicted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"

#define UNIVERSE       16384
#define MAX_BATCH      1024
#define SEG_SIZE       (256ULL << 20)
#define OPS_PER_CONFIG 1000000L
#define NUM_CONFIG     6

struct config {
    uint32_t dim;
    uint32_t key_bytes;
    uint32_t parts;
};

static const struct config configs[NUM_CONFIG] = {
    {1, 4, 1}, {1, 8, 5}, {16, 4, 8}, {16, 8, 3}, {128, 4, 2}, {128, 8, 16},
};

/* Key -> universe index, open addressing over 4 * UNIVERSE slots. */
#define IDX_SLOTS (4 * UNIVERSE)

struct model {
    uint32_t dim;
    uint32_t key_bytes;
    uint32_t parts;
    uint64_t keys[UNIVERSE]; /* universe (zero-extended for 32-bit tables) */
    uint64_t idx_key[IDX_SLOTS];
    int32_t idx_val[IDX_SLOTS]; /* -1 = empty */
    uint8_t present[UNIVERSE];
    float *vals; /* (UNIVERSE, dim) */
    uint64_t rows;
    /* expected table counters */
    uint64_t lookups, hits, inserts, updates, erased, cleared_rows;
    /* batch buffers */
    void *kbuf;      /* (MAX_BATCH) keys in the table's width */
    int32_t *bidx;   /* (MAX_BATCH) universe index, -1 = foreign key */
    float *bvals;    /* (MAX_BATCH, dim) */
    uint8_t *bfound; /* (MAX_BATCH) */
    uint8_t seen[UNIVERSE];
    uint64_t rng;
};

struct fixture {
    char name[T_NAME_LEN];
    hps_shmdb_t *db;
    struct model *m;
};

static uint64_t idx_hash(uint64_t k)
{
    return hps_rrxmrrxmsx_0(k ^ 0x5851F42D4C957F2DULL);
}

static int32_t model_find(const struct model *m, uint64_t key)
{
    for (uint64_t h = idx_hash(key) % IDX_SLOTS;; h = (h + 1) % IDX_SLOTS) {
        if (m->idx_val[h] < 0)
            return -1;
        if (m->idx_key[h] == key)
            return m->idx_val[h];
    }
}

static int model_add_key(struct model *m, uint64_t key, int32_t idx)
{
    if (m->key_bytes == 4)
        key &= 0xFFFFFFFFULL;
    uint64_t h = idx_hash(key) % IDX_SLOTS;
    for (;; h = (h + 1) % IDX_SLOTS) {
        if (m->idx_val[h] < 0)
            break;
        if (m->idx_key[h] == key)
            return 0; /* duplicate */
    }
    m->idx_key[h] = key;
    m->idx_val[h] = idx;
    m->keys[idx] = key;
    return 1;
}

static void model_build_universe(struct model *m)
{
    memset(m->idx_val, 0xFF, sizeof(m->idx_val));
    static const uint64_t special8[] = {
        0,
        1,
        ~0ULL,                 /* -1 */
        0x8000000000000000ULL, /* INT64_MIN */
        0x7FFFFFFFFFFFFFFFULL, /* INT64_MAX */
        0xFFFFFFFFULL,         /* differ from -1 only above bit 32 */
        0x100000000ULL,        /* truncates to 0 */
        0x100000001ULL,        /* truncates to 1 */
        0x7FFFFFFFULL,
        0x80000000ULL,
        0xFFFFFFFF00000000ULL,
        0x8000000000000001ULL,
        2,
        3,
    };
    static const uint64_t special4[] = {0, 1, 0xFFFFFFFFULL, 0x7FFFFFFFULL, 0x80000000ULL, 2, 3};
    const uint64_t *sp = m->key_bytes == 8 ? special8 : special4;
    size_t nsp = m->key_bytes == 8 ? sizeof(special8) / 8 : sizeof(special4) / 8;
    int32_t n = 0;
    for (size_t i = 0; i < nsp; i++)
        n += model_add_key(m, sp[i], n);
    while (n < UNIVERSE) {
        uint64_t r = t_rng_next(&m->rng);
        /* Some small keys (dense ids, as real tables have), most random. */
        uint64_t k = (r & 3) == 0 ? (r >> 2) % (4 * UNIVERSE) : t_rng_next(&m->rng);
        n += model_add_key(m, k, n);
    }
}

/* A key not in the universe (never inserted). */
static uint64_t foreign_key(struct model *m)
{
    for (;;) {
        uint64_t k = t_rng_next(&m->rng);
        if (m->key_bytes == 4)
            k &= 0xFFFFFFFFULL;
        if (model_find(m, k) < 0)
            return k;
    }
}

static void put_key(struct model *m, size_t i, uint64_t key)
{
    if (m->key_bytes == 4)
        ((uint32_t *)m->kbuf)[i] = (uint32_t)key;
    else
        ((int64_t *)m->kbuf)[i] = (int64_t)key;
}

static size_t batch_size(struct model *m)
{
    uint64_t r = t_rng_below(&m->rng, 100);
    if (r < 80)
        return 1 + t_rng_below(&m->rng, 8);
    if (r < 98)
        return 9 + t_rng_below(&m->rng, 120);
    return 129 + t_rng_below(&m->rng, MAX_BATCH - 128);
}

/*
 * Fill kbuf/bidx with n keys: universe keys, with a share of foreign keys
 * when allow_foreign, and duplicates of earlier positions in some batches.
 */
static void make_keys(struct model *m, size_t n, int allow_foreign)
{
    int dups = n > 1 && t_rng_below(&m->rng, 100) < 30;
    for (size_t i = 0; i < n; i++) {
        if (dups && i > 0 && t_rng_below(&m->rng, 100) < 25) {
            size_t j = t_rng_below(&m->rng, i);
            m->bidx[i] = m->bidx[j];
            if (m->key_bytes == 4)
                ((uint32_t *)m->kbuf)[i] = ((uint32_t *)m->kbuf)[j];
            else
                ((int64_t *)m->kbuf)[i] = ((int64_t *)m->kbuf)[j];
        } else if (allow_foreign && t_rng_below(&m->rng, 100) < 5) {
            m->bidx[i] = -1;
            put_key(m, i, foreign_key(m));
        } else {
            int32_t x = (int32_t)t_rng_below(&m->rng, UNIVERSE);
            m->bidx[i] = x;
            put_key(m, i, m->keys[x]);
        }
    }
}

static void random_vector(struct model *m, float *v)
{
    for (uint32_t d = 0; d < m->dim; d++) {
        uint64_t r = t_rng_next(&m->rng);
        if ((r & 0xFF) == 0) {
            /* Now and then an arbitrary bit pattern (NaN payloads, -0.0,
             * denormals): the store must copy bits, not values. */
            uint32_t bits = (uint32_t)(r >> 32);
            memcpy(&v[d], &bits, 4);
        } else {
            v[d] = (float)((int64_t)(r >> 40) - (1LL << 23)) / 1024.0f;
        }
    }
}

static void op_upsert(struct fixture *f, uint32_t id)
{
    struct model *m = f->m;
    size_t n = batch_size(m);
    make_keys(m, n, 0);
    for (size_t i = 0; i < n; i++)
        random_vector(m, &m->bvals[i * m->dim]);
    uint64_t want_ins = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t x = m->bidx[i];
        if (!m->present[x]) {
            m->present[x] = 1;
            m->rows++;
            want_ins++;
        }
        memcpy(&m->vals[(size_t)x * m->dim], &m->bvals[i * m->dim], m->dim * sizeof(float));
    }
    size_t inserted = ~(size_t)0;
    HPS_ASSERT_OK(hps_shmdb_upsert(f->db, id, n, m->kbuf, m->bvals, &inserted));
    HPS_ASSERT_EQ(inserted, want_ins);
    m->inserts += want_ins;
    m->updates += n - want_ins;
}

static void op_erase(struct fixture *f, uint32_t id)
{
    struct model *m = f->m;
    size_t n = batch_size(m);
    make_keys(m, n, 1);
    uint64_t want = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t x = m->bidx[i];
        if (x >= 0 && m->present[x]) {
            m->present[x] = 0;
            m->rows--;
            want++;
        }
    }
    size_t erased = ~(size_t)0;
    HPS_ASSERT_OK(hps_shmdb_erase(f->db, id, n, m->kbuf, &erased));
    HPS_ASSERT_EQ(erased, want);
    m->erased += want;
}

static void op_lookup(struct fixture *f, uint32_t id)
{
    struct model *m = f->m;
    size_t n = batch_size(m);
    make_keys(m, n, 1);
    /* Sentinel: rows of missing keys must come back as the default value. */
    memset(m->bvals, 0xA5, n * m->dim * sizeof(float));
    memset(m->bfound, 0x77, n);
    size_t hits = ~(size_t)0;
    HPS_ASSERT_OK(hps_shmdb_lookup(f->db, id, n, m->kbuf, m->bvals, m->bfound, &hits));
    size_t want_hits = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t x = m->bidx[i];
        int want = x >= 0 && m->present[x];
        uint64_t key = x >= 0 ? m->keys[x] : 0;
        if (m->bfound[i] != want)
            T_FAIL("lookup batch of %zu, position %zu, key %" PRIu64 " (universe %d): found=%u, "
                   "model says %d",
                   n, i, key, (int)x, (unsigned)m->bfound[i], want);
        const float *got = &m->bvals[i * m->dim];
        if (want) {
            want_hits++;
            const float *exp = &m->vals[(size_t)x * m->dim];
            if (memcmp(got, exp, m->dim * sizeof(float)) != 0) {
                uint32_t d = 0;
                while (d < m->dim && memcmp(&got[d], &exp[d], 4) == 0)
                    d++;
                T_FAIL("lookup key %" PRIu64 " (position %zu of %zu): element %u is %a, model "
                       "has %a",
                       key, i, n, d, (double)got[d], (double)exp[d]);
            }
        } else {
            for (uint32_t d = 0; d < m->dim; d++) {
                float def = T_DEFAULT_VALUE;
                if (memcmp(&got[d], &def, 4) != 0)
                    T_FAIL("lookup of missing key (position %zu): element %u = %a, not the "
                           "default %a",
                           i, d, (double)got[d], (double)def);
            }
        }
    }
    HPS_ASSERT_EQ(hits, want_hits);
    m->lookups += n;
    m->hits += want_hits;
}

struct iter_ctx {
    struct model *m;
    uint64_t visited;
    char err[256];
};

static int iter_fn(void *ctx, uint64_t key, const float *value)
{
    struct iter_ctx *c = ctx;
    struct model *m = c->m;
    int32_t x = model_find(m, key);
    if (x < 0) {
        snprintf(c->err, sizeof(c->err), "iterate visited key %" PRIu64 ", never inserted", key);
        return 1;
    }
    if (!m->present[x]) {
        snprintf(c->err, sizeof(c->err), "iterate visited key %" PRIu64 ", erased or cleared", key);
        return 1;
    }
    if (m->seen[x]) {
        snprintf(c->err, sizeof(c->err), "iterate visited key %" PRIu64 " twice", key);
        return 1;
    }
    m->seen[x] = 1;
    if (memcmp(value, &m->vals[(size_t)x * m->dim], m->dim * sizeof(float)) != 0) {
        snprintf(c->err, sizeof(c->err), "iterate: value of key %" PRIu64 " differs", key);
        return 1;
    }
    c->visited++;
    return 0;
}

static void op_iterate_compare(struct fixture *f, uint32_t id)
{
    struct model *m = f->m;
    struct iter_ctx c = {.m = m, .visited = 0, .err = ""};
    memset(m->seen, 0, sizeof(m->seen));
    hps_err_t r = hps_shmdb_iterate(f->db, id, iter_fn, &c);
    if (c.err[0])
        T_FAIL("%s", c.err);
    HPS_ASSERT_OK(r);
    HPS_ASSERT_EQ(c.visited, m->rows);

    /* Rows per partition under HugeCTR's rule. */
    uint64_t want[HPS_SHMDB_MAX_PARTITIONS] = {0};
    for (uint32_t x = 0; x < UNIVERSE; x++)
        if (m->present[x])
            want[t_part_of(m->keys[x], m->parts)]++;
    hps_partition_info_t parts[HPS_SHMDB_MAX_PARTITIONS];
    memset(parts, 0, sizeof(parts));
    HPS_ASSERT_OK(hps_shmdb_partition_info(f->db, id, parts));
    for (uint32_t p = 0; p < m->parts; p++) {
        if (parts[p].rows != want[p])
            T_FAIL("partition %u of %u holds %" PRIu64 " rows, HugeCTR's partition rule gives "
                   "%" PRIu64,
                   p, m->parts, parts[p].rows, want[p]);
        HPS_ASSERT_EQ(parts[p].evictions, 0);
        HPS_ASSERT_LE(parts[p].rows, parts[p].capacity);
    }
}

static void check_counters(struct fixture *f, uint32_t id)
{
    struct model *m = f->m;
    hps_table_info_t info;
    HPS_ASSERT_OK(hps_shmdb_table_info(f->db, id, &info));
    HPS_ASSERT_EQ(info.rows, m->rows);
    HPS_ASSERT_EQ(info.lookups, m->lookups);
    HPS_ASSERT_EQ(info.hits, m->hits);
    HPS_ASSERT_EQ(info.inserts, m->inserts);
    HPS_ASSERT_EQ(info.updates, m->updates);
    HPS_ASSERT_EQ(info.evictions, 0);
    /* Whether clear() counts its rows as erased is not specified. */
    if (info.erased != m->erased && info.erased != m->erased + m->cleared_rows)
        T_FAIL("table counter erased = %" PRIu64 ", expected %" PRIu64 " (or %" PRIu64
               " counting cleared rows)",
               info.erased, m->erased, m->erased + m->cleared_rows);
}

static void run_config(struct fixture *f, const struct config *cfg, long ops)
{
    struct model *m = f->m;
    m->dim = cfg->dim;
    m->key_bytes = cfg->key_bytes;
    m->parts = cfg->parts;
    m->rng = t_seed("model");
    m->vals = calloc((size_t)UNIVERSE * cfg->dim, sizeof(float));
    m->kbuf = calloc(MAX_BATCH, 8);
    m->bidx = calloc(MAX_BATCH, sizeof(int32_t));
    m->bvals = calloc((size_t)MAX_BATCH * cfg->dim, sizeof(float));
    m->bfound = calloc(MAX_BATCH, 1);
    T_CHECK(m->vals && m->kbuf && m->bidx && m->bvals && m->bfound, "out of memory");
    model_build_universe(m);

    hps_shmdb_opts_t o = t_opts(SEG_SIZE);
    HPS_ASSERT_OK(hps_shmdb_create(f->name, &o, NULL, &f->db));
    hps_table_spec_t spec = t_spec("model", "t", cfg->dim, cfg->key_bytes, cfg->parts, UINT64_MAX,
                                   HPS_EVICT_RANDOM, 0.5);
    uint32_t id = 999;
    HPS_ASSERT_OK(hps_shmdb_table_create(f->db, &spec, &id));

    uint64_t t0 = t_now_ns();
    long n_up = 0, n_er = 0, n_lk = 0, n_clear = 0, n_iter = 0, n_check = 0;
    for (long op = 0; op < ops; op++) {
        uint64_t r = t_rng_below(&m->rng, 100000);
        if (r < 40000) {
            op_upsert(f, id);
            n_up++;
        } else if (r < 55000) {
            op_erase(f, id);
            n_er++;
        } else if (r < 99993) {
            op_lookup(f, id);
            n_lk++;
        } else {
            m->cleared_rows += m->rows;
            HPS_ASSERT_OK(hps_shmdb_clear(f->db, id));
            memset(m->present, 0, sizeof(m->present));
            m->rows = 0;
            n_clear++;
        }
        uint64_t rows = ~0ULL;
        HPS_ASSERT_OK(hps_shmdb_size(f->db, id, &rows));
        if (rows != m->rows)
            T_FAIL("after operation %ld: hps_shmdb_size = %" PRIu64 ", model has %" PRIu64, op,
                   rows, m->rows);
        if (op % 5000 == 4999) {
            op_iterate_compare(f, id);
            n_iter++;
        }
        if (op % 50000 == 49999) {
            HPS_ASSERT_EQ(t_check(f->db, "model"), 0);
            n_check++;
        }
    }
    op_iterate_compare(f, id);
    HPS_ASSERT_EQ(t_check(f->db, "model"), 0);
    check_counters(f, id);
    t_note("dim %u key_bytes %u partitions %u: %ld ops (%ld upsert, %ld erase, %ld lookup, %ld "
           "clear, %ld iterate, %ld check), %" PRIu64 " keys looked up, %" PRIu64 " rows at end, "
           "%.2f s",
           cfg->dim, cfg->key_bytes, cfg->parts, ops, n_up, n_er, n_lk, n_clear, n_iter + 1,
           n_check + 1, m->lookups, m->rows, (double)(t_now_ns() - t0) / 1e9);
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    f->m = calloc(1, sizeof(*f->m));
    if (!f->m) {
        free(f);
        return -1;
    }
    t_segname(f->name, "model");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    hps_shmdb_detach(f->db);
    hps_shmdb_unlink(f->name);
    t_unlink_all();
    free(f->m->vals);
    free(f->m->kbuf);
    free(f->m->bidx);
    free(f->m->bvals);
    free(f->m->bfound);
    free(f->m);
    free(f);
    return 0;
}

static long ops_per_config(void)
{
    long n = t_env_long("HPS_TEST_MODEL_OPS", OPS_PER_CONFIG);
    return n > 0 ? n : 1;
}

#define CONFIG_TEST(name, i)                                                                       \
    static void test_##name(void **state)                                                          \
    {                                                                                              \
        run_config(*state, &configs[i], ops_per_config());                                         \
    }
CONFIG_TEST(dim1_key4_p1, 0)
CONFIG_TEST(dim1_key8_p5, 1)
CONFIG_TEST(dim16_key4_p8, 2)
CONFIG_TEST(dim16_key8_p3, 3)
CONFIG_TEST(dim128_key4_p2, 4)
CONFIG_TEST(dim128_key8_p16, 5)

int main(void)
{
    t_install_cleanup();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dim1_key4_p1, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dim1_key8_p5, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dim16_key4_p8, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dim16_key8_p3, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dim128_key4_p2, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dim128_key8_p16, setup, teardown),
    };
    return cmocka_run_group_tests_name("shmdb-model", tests, NULL, NULL);
}
