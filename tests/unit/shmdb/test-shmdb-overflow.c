/*
 * test-shmdb-overflow.c -- overflow_margin and the three overflow policies.
 *
 * Geometry: 4 partitions, overflow_margin M = 1000 rows per partition.
 *
 * fill_<policy>: 40,000 distinct rows in random batches of 1..300 (target
 *   0.5).  After every upsert: each partition holds <= M rows, the inserted
 *   count is exact, and rows = inserted - evictions (partition and table
 *   counters agree).  Then 12,000 single-row upserts: whenever a partition
 *   evicts, it is left with M * target (+1 for the row just inserted), within
 *   2% of M.  Every row still present has its exact value; check() is clean.
 * target_one: target 1.0 evicts just enough: never above M, ends at M.
 * lru (evict_oldest, target 0.75): each partition is filled to M-1 rows, a
 *   random half ("hot") is read, then 200 new rows per partition force one
 *   eviction of ~M/4 rows per partition; 3 rounds.  Required: >= 90% of the
 *   hot rows survive every round, and >= 90% of the evicted rows are cold.
 *   (1.1 s pauses separate fill, reads and inserts, so access stamps with a
 *   one-second clock, as Redis has, still order them.)
 * lfu (evict_least_used, target 0.75): the hot half is read 8 times each,
 *   then the same eviction rounds; same 90% tolerances.
 * random (evict_random, target 0.75): after one eviction round the evicted
 *   rows must be spread over the fill order: < 50% of them from the oldest
 *   quarter (uniform: 25%) and >= 25% from the newest half (uniform: 50%).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"

#define PARTS     4
#define MARGIN    1000
#define DIM       8
#define SEG_SIZE  (256ULL << 20)
#define MAX_KEYS  (1 << 16)
#define SET_SLOTS (4 * MAX_KEYS)

struct fixture {
    char name[T_NAME_LEN];
    hps_shmdb_t *db;
    uint32_t id;
    uint64_t rng;
    uint64_t key_base;
    uint64_t next_key; /* keys are mix(key_base + i), all distinct */
    /* Every key ever inserted, in insertion order, and a key -> index map. */
    int64_t *keys;
    uint32_t nkeys;
    uint64_t *set_key;
    int32_t *set_val;
    uint8_t *present; /* (nkeys) filled by scan_present() */
    float *vbuf;
    uint8_t *fbuf;
};

/* A bijection on 64-bit words (splitmix64's finalizer): distinct in, distinct out. */
static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* The value of a key: a deterministic function, so any found row is checked. */
static void key_value(int64_t key, float *v)
{
    for (uint32_t d = 0; d < DIM; d++)
        v[d] = (float)(mix((uint64_t)key * 131 + d) >> 40);
}

static uint64_t fresh_key(struct fixture *f)
{
    return mix(f->key_base + f->next_key++);
}

static void set_add(struct fixture *f, int64_t key, int32_t idx)
{
    uint64_t h = mix((uint64_t)key ^ 0x1234567ULL) % SET_SLOTS;
    while (f->set_val[h] >= 0)
        h = (h + 1) % SET_SLOTS;
    f->set_key[h] = (uint64_t)key;
    f->set_val[h] = idx;
}

static int32_t set_find(struct fixture *f, uint64_t key)
{
    for (uint64_t h = mix(key ^ 0x1234567ULL) % SET_SLOTS;; h = (h + 1) % SET_SLOTS) {
        if (f->set_val[h] < 0)
            return -1;
        if (f->set_key[h] == key)
            return f->set_val[h];
    }
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    f->keys = calloc(MAX_KEYS, sizeof(int64_t));
    f->set_key = calloc(SET_SLOTS, sizeof(uint64_t));
    f->set_val = malloc(SET_SLOTS * sizeof(int32_t));
    f->present = calloc(MAX_KEYS, 1);
    f->vbuf = calloc((size_t)MAX_KEYS * DIM, sizeof(float));
    f->fbuf = calloc(MAX_KEYS, 1);
    if (!f->keys || !f->set_key || !f->set_val || !f->present || !f->vbuf || !f->fbuf)
        return -1;
    memset(f->set_val, 0xFF, SET_SLOTS * sizeof(int32_t));
    t_segname(f->name, "overflow");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    hps_shmdb_detach(f->db);
    hps_shmdb_unlink(f->name);
    t_unlink_all();
    free(f->keys);
    free(f->set_key);
    free(f->set_val);
    free(f->present);
    free(f->vbuf);
    free(f->fbuf);
    free(f);
    return 0;
}

static void open_table(struct fixture *f, hps_overflow_policy_t policy, double target,
                       uint32_t parts, uint64_t margin)
{
    f->rng = t_seed(hps_overflow_policy_name(policy));
    f->key_base = t_rng_next(&f->rng);
    hps_shmdb_opts_t o = t_opts(SEG_SIZE);
    HPS_ASSERT_OK(hps_shmdb_create(f->name, &o, NULL, &f->db));
    hps_table_spec_t spec = t_spec("ovf", "t", DIM, 8, parts, margin, policy, target);
    HPS_ASSERT_OK(hps_shmdb_table_create(f->db, &spec, &f->id));
    hps_table_info_t info;
    HPS_ASSERT_OK(hps_shmdb_table_info(f->db, f->id, &info));
    HPS_ASSERT_EQ(info.overflow_margin, margin);
    HPS_ASSERT_EQ(info.overflow_policy, policy);
}

/* Upsert keys (with their values); they must all be new. */
static void insert_keys(struct fixture *f, const int64_t *keys, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        key_value(keys[i], &f->vbuf[i * DIM]);
        T_CHECK(f->nkeys < MAX_KEYS, "MAX_KEYS too small");
        f->keys[f->nkeys] = keys[i];
        set_add(f, keys[i], (int32_t)f->nkeys);
        f->nkeys++;
    }
    size_t inserted = ~(size_t)0;
    HPS_ASSERT_OK(hps_shmdb_upsert(f->db, f->id, n, keys, f->vbuf, &inserted));
    HPS_ASSERT_EQ(inserted, n);
}

/* Per-partition invariants; returns total evictions. */
static uint64_t check_margin(struct fixture *f, uint32_t parts, uint64_t margin,
                             hps_partition_info_t *pi)
{
    HPS_ASSERT_OK(hps_shmdb_partition_info(f->db, f->id, pi));
    uint64_t rows = 0, ev = 0;
    for (uint32_t p = 0; p < parts; p++) {
        if (pi[p].rows > margin)
            T_FAIL("partition %u holds %" PRIu64 " rows, overflow_margin is %" PRIu64
                   " (after %u inserts)",
                   p, pi[p].rows, margin, f->nkeys);
        rows += pi[p].rows;
        ev += pi[p].evictions;
    }
    hps_table_info_t info;
    HPS_ASSERT_OK(hps_shmdb_table_info(f->db, f->id, &info));
    HPS_ASSERT_EQ(info.rows, rows);
    HPS_ASSERT_EQ(info.evictions, ev);
    /* No erases: every row inserted is either present or was evicted. */
    if (rows + ev != f->nkeys)
        T_FAIL("rows %" PRIu64 " + evictions %" PRIu64 " != rows inserted %u", rows, ev, f->nkeys);
    return ev;
}

static int scan_fn(void *ctx, uint64_t key, const float *value)
{
    struct fixture *f = ctx;
    int32_t x = set_find(f, key);
    if (x < 0 || f->present[x])
        return 1000 + (x < 0 ? 1 : 2);
    float want[DIM];
    key_value((int64_t)key, want);
    if (memcmp(want, value, sizeof(want)) != 0)
        return 1003;
    f->present[x] = 1;
    return 0;
}

/*
 * Which inserted keys are still present, by iterate (which, unlike lookup,
 * does not touch LRU/LFU stamps); values are verified on the way.
 */
static uint64_t scan_present(struct fixture *f)
{
    memset(f->present, 0, f->nkeys);
    hps_err_t r = hps_shmdb_iterate(f->db, f->id, scan_fn, f);
    if (r == 1001)
        T_FAIL("iterate returned a key that was never inserted");
    if (r == 1002)
        T_FAIL("iterate returned a key twice");
    if (r == 1003)
        T_FAIL("iterate returned a row with a wrong value");
    HPS_ASSERT_OK(r);
    uint64_t n = 0;
    for (uint32_t i = 0; i < f->nkeys; i++)
        n += f->present[i];
    uint64_t size = 0;
    HPS_ASSERT_OK(hps_shmdb_size(f->db, f->id, &size));
    HPS_ASSERT_EQ(n, size);
    return n;
}

/* Look keys up (touching them); returns hits and verifies values. */
static size_t lookup_keys(struct fixture *f, const int64_t *keys, size_t n)
{
    size_t hits = 0;
    HPS_ASSERT_OK(hps_shmdb_lookup(f->db, f->id, n, keys, f->vbuf, f->fbuf, &hits));
    size_t h2 = 0;
    for (size_t i = 0; i < n; i++) {
        if (!f->fbuf[i])
            continue;
        h2++;
        float want[DIM];
        key_value(keys[i], want);
        if (memcmp(want, &f->vbuf[i * DIM], sizeof(want)) != 0)
            T_FAIL("lookup of key %" PRId64 " returned a wrong value", keys[i]);
    }
    HPS_ASSERT_EQ(hits, h2);
    return hits;
}

/* ------------------------------------------------------------------------ */

static void fill_test(void **state, hps_overflow_policy_t policy)
{
    struct fixture *f = *state;
    const double target = 0.5;
    open_table(f, policy, target, PARTS, MARGIN);
    hps_partition_info_t pi[PARTS], prev[PARTS];
    int64_t batch[300];

    /* Phase A: random batches. */
    uint64_t ev = 0;
    while (f->nkeys < 40000) {
        size_t n = 1 + t_rng_below(&f->rng, 300);
        for (size_t i = 0; i < n; i++)
            batch[i] = (int64_t)fresh_key(f);
        insert_keys(f, batch, n);
        ev = check_margin(f, PARTS, MARGIN, pi);
    }
    HPS_ASSERT_GE(ev, 40000 - PARTS * MARGIN);

    /* Phase B: single rows; each resolution ends near M * target (+1). */
    const double tol = 0.02 * MARGIN + 1;
    const double level = MARGIN * target + 1;
    unsigned events = 0;
    check_margin(f, PARTS, MARGIN, prev);
    for (int i = 0; i < 3 * PARTS * MARGIN; i++) {
        int64_t k = (int64_t)fresh_key(f);
        insert_keys(f, &k, 1);
        check_margin(f, PARTS, MARGIN, pi);
        uint32_t p = t_part_of((uint64_t)k, PARTS);
        for (uint32_t q = 0; q < PARTS; q++) {
            if (q != p && (pi[q].rows != prev[q].rows || pi[q].evictions != prev[q].evictions))
                T_FAIL("inserting into partition %u changed partition %u (rows %" PRIu64
                       " -> %" PRIu64 ", evictions %" PRIu64 " -> %" PRIu64 ")",
                       p, q, prev[q].rows, pi[q].rows, prev[q].evictions, pi[q].evictions);
        }
        if (pi[p].evictions != prev[p].evictions) {
            events++;
            if ((double)pi[p].rows < level - tol || (double)pi[p].rows > level + tol)
                T_FAIL("partition %u resolved its overflow to %" PRIu64 " rows (evicted %" PRIu64
                       "); expected margin * target + 1 = %.0f +- %.0f",
                       p, pi[p].rows, pi[p].evictions - prev[p].evictions, level, tol);
        } else {
            HPS_ASSERT_EQ(pi[p].rows, prev[p].rows + 1);
        }
        memcpy(prev, pi, sizeof(pi));
    }
    /* Each partition gets ~3000 rows and resolves every ~500. */
    HPS_ASSERT_GE(events, 4 * PARTS);

    uint64_t present = scan_present(f);
    HPS_ASSERT_EQ(t_check(f->db, "overflow"), 0);
    t_note("%s: %u rows inserted, %" PRIu64 " present, %u single-row resolutions checked",
           hps_overflow_policy_name(policy), f->nkeys, present, events);
}

static void test_fill_random(void **state)
{
    fill_test(state, HPS_EVICT_RANDOM);
}

static void test_fill_least_used(void **state)
{
    fill_test(state, HPS_EVICT_LEAST_USED);
}

static void test_fill_oldest(void **state)
{
    fill_test(state, HPS_EVICT_OLDEST);
}

/* target 1.0: evict just enough to stay at the margin. */
static void test_target_one(void **state)
{
    struct fixture *f = *state;
    const uint32_t parts = 2, margin = 500;
    open_table(f, HPS_EVICT_OLDEST, 1.0, parts, margin);
    hps_partition_info_t pi[2];
    for (int i = 0; i < 5000; i++) {
        int64_t k = (int64_t)fresh_key(f);
        insert_keys(f, &k, 1);
        check_margin(f, parts, margin, pi);
    }
    for (uint32_t p = 0; p < parts; p++)
        HPS_ASSERT_GE(pi[p].rows, margin - 2);
    HPS_ASSERT_EQ(t_check(f->db, "target-one"), 0);
}

/* ------------------------------------------------------------------------ */

/* Fresh keys of partition p. */
static void keys_of_partition(struct fixture *f, uint32_t p, int64_t *out, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint64_t k = fresh_key(f);
        if (t_part_of(k, PARTS) == p)
            out[i++] = (int64_t)k;
    }
}

struct policy_run {
    int64_t *hot;
    size_t nhot;
    int64_t *cold; /* of the initial fill */
    size_t ncold;
};

/*
 * Fill every partition to M-1 rows; half of each partition's rows become
 * the hot set (random choice), the rest the cold set.
 */
static void fill_hot_cold(struct fixture *f, struct policy_run *r)
{
    const size_t per = MARGIN - 1;
    int64_t *buf = malloc(per * sizeof(int64_t));
    r->hot = malloc(PARTS * per * sizeof(int64_t));
    r->cold = malloc(PARTS * per * sizeof(int64_t));
    T_CHECK(buf && r->hot && r->cold, "out of memory");
    r->nhot = r->ncold = 0;
    for (uint32_t p = 0; p < PARTS; p++) {
        keys_of_partition(f, p, buf, per);
        for (size_t i = 0; i < per; i += 100)
            insert_keys(f, &buf[i], per - i < 100 ? per - i : 100);
        /* Fisher-Yates on the indices, first half hot. */
        for (size_t i = per - 1; i > 0; i--) {
            size_t j = t_rng_below(&f->rng, i + 1);
            int64_t t = buf[i];
            buf[i] = buf[j];
            buf[j] = t;
        }
        for (size_t i = 0; i < per; i++) {
            if (i < per / 2)
                r->hot[r->nhot++] = buf[i];
            else
                r->cold[r->ncold++] = buf[i];
        }
    }
    free(buf);
    hps_partition_info_t pi[PARTS];
    HPS_ASSERT_EQ(check_margin(f, PARTS, MARGIN, pi), 0);
}

/* 200 new rows per partition: one resolution (M-1+2 > M) down to 0.75 M. */
static void eviction_round(struct fixture *f)
{
    int64_t buf[200];
    hps_partition_info_t before[PARTS], after[PARTS];
    check_margin(f, PARTS, MARGIN, before);
    for (uint32_t p = 0; p < PARTS; p++) {
        keys_of_partition(f, p, buf, 200);
        for (size_t i = 0; i < 200; i += 20)
            insert_keys(f, &buf[i], 20);
    }
    check_margin(f, PARTS, MARGIN, after);
    for (uint32_t p = 0; p < PARTS; p++)
        if (after[p].evictions == before[p].evictions)
            T_FAIL("partition %u did not evict: %" PRIu64 " rows before, %" PRIu64 " after", p,
                   before[p].rows, after[p].rows);
}

static int is_member(const int64_t *set, size_t n, int64_t key)
{
    for (size_t i = 0; i < n; i++)
        if (set[i] == key)
            return 1;
    return 0;
}

/*
 * Survival of the hot set and the share of cold rows among the evicted;
 * evicted = inserted before this round and absent now.
 */
static void judge_round(struct fixture *f, const struct policy_run *r, const char *policy,
                        int round, uint32_t inserted_before, const uint8_t *present_before)
{
    scan_present(f);
    size_t hot_alive = 0;
    for (size_t i = 0; i < r->nhot; i++)
        hot_alive += f->present[set_find(f, (uint64_t)r->hot[i])];
    size_t evicted = 0, evicted_hot = 0;
    for (uint32_t i = 0; i < inserted_before; i++) {
        if (present_before[i] && !f->present[i]) {
            evicted++;
            evicted_hot += is_member(r->hot, r->nhot, f->keys[i]);
        }
    }
    double surv = (double)hot_alive / (double)r->nhot;
    double cold_share = evicted ? 1.0 - (double)evicted_hot / (double)evicted : 0.0;
    t_note("%s round %d: %zu of %zu hot rows survive (%.1f%%), %zu evicted, %.1f%% of them cold",
           policy, round, hot_alive, r->nhot, 100.0 * surv, evicted, 100.0 * cold_share);
    HPS_ASSERT_GT(evicted, 0);
    if (surv < 0.90)
        T_FAIL("%s round %d: only %.1f%% of the hot rows survived (tolerance: >= 90%%)", policy,
               round, 100.0 * surv);
    if (cold_share < 0.90)
        T_FAIL("%s round %d: only %.1f%% of the evicted rows were cold (tolerance: >= 90%%)",
               policy, round, 100.0 * cold_share);
}

static void touch_hot(struct fixture *f, const struct policy_run *r, int times)
{
    for (int t = 0; t < times; t++)
        for (size_t i = 0; i < r->nhot; i += 256) {
            size_t n = r->nhot - i < 256 ? r->nhot - i : 256;
            size_t hits = lookup_keys(f, &r->hot[i], n);
            (void)hits;
        }
}

static void hot_cold_test(void **state, hps_overflow_policy_t policy, int touches,
                          uint64_t pause_ns)
{
    struct fixture *f = *state;
    const char *name = hps_overflow_policy_name(policy);
    open_table(f, policy, 0.75, PARTS, MARGIN);
    struct policy_run r;
    fill_hot_cold(f, &r);
    /* All hot rows are present before round 1. */
    HPS_ASSERT_EQ(lookup_keys(f, r.hot, r.nhot > 256 ? 256 : r.nhot), r.nhot > 256 ? 256 : r.nhot);
    uint8_t *before = malloc(MAX_KEYS);
    T_CHECK(before != NULL, "out of memory");
    for (int round = 1; round <= 3; round++) {
        t_sleep_ns(pause_ns);
        touch_hot(f, &r, touches);
        t_sleep_ns(pause_ns);
        scan_present(f);
        memcpy(before, f->present, f->nkeys);
        uint32_t inserted_before = f->nkeys;
        eviction_round(f);
        judge_round(f, &r, name, round, inserted_before, before);
    }
    free(before);
    free(r.hot);
    free(r.cold);
    HPS_ASSERT_EQ(t_check(f->db, name), 0);
}

static void test_lru_hot_survive(void **state)
{
    hot_cold_test(state, HPS_EVICT_OLDEST, 1, 1100000000ULL);
}

static void test_lfu_hot_survive(void **state)
{
    hot_cold_test(state, HPS_EVICT_LEAST_USED, 8, 0);
}

static void test_random_spreads(void **state)
{
    struct fixture *f = *state;
    open_table(f, HPS_EVICT_RANDOM, 0.75, PARTS, MARGIN);
    struct policy_run r;
    fill_hot_cold(f, &r);
    uint32_t filled = f->nkeys; /* fill order = index order, per partition */
    eviction_round(f);
    scan_present(f);
    /* Rank of a fill key within its partition's fill (0 = oldest). */
    const uint32_t per = MARGIN - 1;
    size_t evicted = 0, oldest_q = 0, newest_h = 0;
    for (uint32_t i = 0; i < filled; i++) {
        if (f->present[i])
            continue;
        evicted++;
        uint32_t rank = i % per;
        oldest_q += rank < per / 4;
        newest_h += rank >= per / 2;
    }
    t_note("evict_random: %zu evicted from the fill, %.1f%% from its oldest quarter, %.1f%% from "
           "its newest half",
           evicted, evicted ? 100.0 * (double)oldest_q / (double)evicted : 0.0,
           evicted ? 100.0 * (double)newest_h / (double)evicted : 0.0);
    HPS_ASSERT_GE(evicted, PARTS * MARGIN / 8);
    if ((double)oldest_q >= 0.5 * (double)evicted)
        T_FAIL("evict_random: %zu of %zu evicted rows are from the oldest quarter (uniform would "
               "give ~25%%, tolerance < 50%%)",
               oldest_q, evicted);
    if ((double)newest_h < 0.25 * (double)evicted)
        T_FAIL("evict_random: only %zu of %zu evicted rows are from the newest half (uniform "
               "would give ~50%%, tolerance >= 25%%)",
               newest_h, evicted);
    free(r.hot);
    free(r.cold);
    HPS_ASSERT_EQ(t_check(f->db, "random"), 0);
}

int main(void)
{
    t_install_cleanup();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fill_random, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fill_least_used, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fill_oldest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_target_one, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lru_hot_survive, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lfu_hot_survive, setup, teardown),
        cmocka_unit_test_setup_teardown(test_random_spreads, setup, teardown),
    };
    return cmocka_run_group_tests_name("shmdb-overflow", tests, NULL, NULL);
}
