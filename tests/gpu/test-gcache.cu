/*
 * test-gcache.cu -- the GPU embedding cache against a CPU reference.
 * Exits 77 (skip) when no CUDA device is usable.
 *
 *  - random workloads with duplicates, both policies, vectorized (dim 128)
 *    and scalar (dim 7) rows, fused and de-duplicated lookup paths: hits are
 *    exact rows, misses are reported (mask, index list, count) and their
 *    output rows left untouched;
 *  - set bound and placement: dump per set, <= 32 keys, each in its hash set;
 *  - eviction order: LRU and LFU evict the untouched way of a full set;
 *  - update touches existing keys only;
 *  - concurrent lookups and inserts on two streams: every row returned is one
 *    whole inserted version of its key;
 *  - shared caches (CUDA VMM): a child process (this program, exec'd with
 *    --import) maps the cache by the inherited descriptor, reads the
 *    parent's rows exactly and inserts rows the parent then reads;
 *  - a cache sharded over devices 0 and 1 (skipped on one GPU): each holds
 *    about half, rows written through one device's mapping read exactly
 *    through the other's, per-shard occupancy adds up;
 *  - a set left locked (as by a writer killed mid-write): lookups answer
 *    miss on every path instead of waiting forever, inserts are skipped and
 *    counted, hps_gcache_repair empties and unlocks exactly that set.
 * One-launch lookups over several tables and their miss split:
 * test-gcache-tables.cu.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <set>
#include <vector>

#include "hps/gcache.h"
#include "../../kernels/gcache_internal.cuh" /* the stuck-lock test pokes a set version */
#include "gtest.cuh"

static uint64_t set_of(int64_t key, uint64_t sets)
{
    return (uint64_t)(((unsigned __int128)mix64((uint64_t)key) * sets) >> 64);
}

/* Keys resident per dump, checking the per-set bound and placement. */
static std::set<int64_t> resident(hps_gcache_t *c)
{
    uint64_t sets = hps_gcache_num_sets(c);
    int64_t *dk;
    uint32_t *dn;
    CK(cudaMalloc((void **)&dk, sets * 32 * sizeof(int64_t)));
    CK(cudaMalloc((void **)&dn, sizeof(uint32_t)));
    std::set<int64_t> all;
    for (uint64_t s = 0; s < sets; s++) {
        OK(hps_gcache_dump(c, s, s + 1, dk, dn, 0));
        uint32_t n = host_copy(dn, 1)[0];
        HPS_ASSERT_EQ(n <= 32, 1);
        std::vector<int64_t> k = host_copy(dk, n);
        for (int64_t x : k) {
            HPS_ASSERT_EQ(set_of(x, sets), s);
            HPS_ASSERT_EQ(all.insert(x).second, 1);
        }
    }
    hps_gcache_stats_t st;
    OK(hps_gcache_stats(c, &st));
    HPS_ASSERT_EQ(st.occupied, all.size());
    CK(cudaFree(dk));
    CK(cudaFree(dn));
    return all;
}

/* Look up q; compare with ref (key -> version); rows of misses stay poisoned. */
static void check_lookup(hps_gcache_t *c, hps_gcache_ws_t *ws, const std::vector<int64_t> &q,
                         const std::map<int64_t, int> &ref, uint64_t out_off)
{
    uint32_t dim = hps_gcache_dim(c);
    size_t n = q.size();
    int64_t *dk = dev_copy(q);
    float *dout;
    uint8_t *dmask;
    uint32_t *dmi, *dmc;
    /* out_off floats of offset: also exercises unaligned output rows */
    CK(cudaMalloc((void **)&dout, (n * dim + out_off) * sizeof(float)));
    CK(cudaMemset(dout, 0xff, (n * dim + out_off) * sizeof(float))); /* NaN poison */
    CK(cudaMalloc((void **)&dmask, n + 1));
    CK(cudaMalloc((void **)&dmi, n * 4 + 4));
    CK(cudaMalloc((void **)&dmc, 4));
    OK(hps_gcache_lookup(c, ws, dk, n, dout + out_off, dmask, dmi, dmc, 0));
    CK(cudaDeviceSynchronize());
    std::vector<float> out = host_copy(dout + out_off, n * dim);
    std::vector<uint8_t> mask = host_copy(dmask, n);
    uint32_t nm = host_copy(dmc, 1)[0];
    std::vector<uint32_t> mi = host_copy(dmi, nm);
    std::set<uint32_t> missing(mi.begin(), mi.end());
    HPS_ASSERT_EQ(missing.size(), nm);
    size_t expect_miss = 0;
    for (size_t i = 0; i < n; i++) {
        auto it = ref.find(q[i]);
        bool hit = it != ref.end();
        expect_miss += !hit;
        HPS_ASSERT_EQ(mask[i], hit);
        HPS_ASSERT_EQ(missing.count((uint32_t)i), !hit);
        for (uint32_t j = 0; j < dim; j++) {
            uint32_t bits;
            memcpy(&bits, &out[i * dim + j], 4);
            if (hit)
                HPS_ASSERT_EQ(out[i * dim + j], row_val(q[i], it->second, j));
            else
                HPS_ASSERT_EQ(bits, 0xffffffffu);
        }
    }
    HPS_ASSERT_EQ(nm, expect_miss);
    CK(cudaFree(dk));
    CK(cudaFree(dout));
    CK(cudaFree(dmask));
    CK(cudaFree(dmi));
    CK(cudaFree(dmc));
}

/* n query keys: 60% inserted keys, 20% among the first 16 (heavy
 * duplicates), 10% absent, 10% the reserved empty key. */
static std::vector<int64_t> random_query(const std::vector<int64_t> &keys, size_t n)
{
    std::vector<int64_t> q(n);
    for (auto &k : q) {
        uint64_t r = rnd() % 10;
        if (r < 6)
            k = keys[rnd() % keys.size()];
        else if (r < 8)
            k = keys[rnd() % 16];
        else if (r < 9)
            k = (int64_t)(rnd() >> 2) + 3000000000ll;
        else
            k = HPS_GCACHE_EMPTY_KEY;
    }
    return q;
}

/* A writer killed mid-kernel leaves the writer epoch open (a block counted
 * as begun, never as ended).  The BLOCK kernels must then re-read every
 * set's version, the path that otherwise runs only while inserts overlap
 * a lookup; stats report the open block, and hps_gcache_repair closes it. */
static void check_open_epoch(hps_gcache_t *c, hps_gcache_ws_t *ws, const std::vector<int64_t> &keys,
                             const std::map<int64_t, int> &ref)
{
    hps_gcache_stats_t st;
    OK(hps_gcache_stats(c, &st));
    HPS_ASSERT_EQ(st.writer_blocks_open, 0);
    std::vector<uint64_t> ep = host_copy(&c->ref.ctr[HPS_GC_WR_BEGUN], 2); /* begun, ended */
    HPS_ASSERT_EQ(ep[0] > 0 && ep[0] == ep[1], 1);
    uint64_t open = ep[0] + 1;
    CK(cudaMemcpy(&c->ref.ctr[HPS_GC_WR_BEGUN], &open, 8, cudaMemcpyHostToDevice));
    OK(hps_gcache_stats(c, &st));
    HPS_ASSERT_EQ(st.writer_blocks_open, 1);
    size_t sizes[] = {5000, 100000, 700000}; /* the three BLOCK kernels */
    for (size_t n : sizes)
        check_lookup(c, ws, random_query(keys, n), ref, 0);
    uint64_t repaired = 99;
    OK(hps_gcache_repair(c, 20, &repaired));
    HPS_ASSERT_EQ(repaired, 0);
    OK(hps_gcache_stats(c, &st));
    HPS_ASSERT_EQ(st.writer_blocks_open, 0);
    ep = host_copy(&c->ref.ctr[HPS_GC_WR_BEGUN], 2);
    HPS_ASSERT_EQ(ep[1], ep[0]); /* the repair's own blocks counted on both sides */
    HPS_ASSERT_EQ(ep[0] > open, 1);
    check_lookup(c, ws, random_query(keys, 700000), ref, 0);
}

static void test_random(hps_gcache_policy_t pol, uint32_t dim, uint64_t cap, size_t nkeys)
{
    hps_gcache_t *c;
    hps_gcache_ws_t *ws;
    OK(hps_gcache_create(cap, dim, HPS_DTYPE_FP32, pol, 0, &c));
    OK(hps_gcache_ws_create(c, 700000, &ws));
    std::vector<int64_t> keys(nkeys);
    for (auto &k : keys)
        k = (int64_t)(rnd() % 1000000000) - 500000000;
    keys.push_back(-1);
    keys.push_back(0);
    keys.push_back(INT64_MIN);
    insert_rows(c, keys, 1, false, 0);
    std::set<int64_t> res = resident(c);
    if (cap >= 4 * nkeys) /* load <= 1/4: nothing should overflow a set */
        HPS_ASSERT_EQ(res.size(), std::set<int64_t>(keys.begin(), keys.end()).size());
    std::map<int64_t, int> ref;
    for (int64_t k : res)
        ref[k] = 1;
    /* update: half of the keys get version 2, plus absent keys (ignored) */
    std::vector<int64_t> upd;
    for (size_t i = 0; i < keys.size(); i += 2)
        upd.push_back(keys[i]);
    for (int i = 0; i < 100; i++)
        upd.push_back((int64_t)(rnd() >> 1) + 2000000000ll);
    insert_rows(c, upd, 2, true, 0);
    for (int64_t k : upd)
        if (ref.count(k))
            ref[k] = 2;
    HPS_ASSERT_EQ(resident(c).size(), res.size());
    /* Up to 64K keys the BLOCK kernel takes 4 chunks per SM; 100,000 takes
     * 512-thread blocks (two per SM), 300,000 256-thread blocks (four per
     * SM) and 700,000 more 1,024-key blocks than fit at once (several
     * waves), on GPUs of 49 to 146 SMs. */
    size_t sizes[] = {1, 31, 100, 1024, 1025, 5000, 40000, 100000, 300000, 700000};
    for (size_t n : sizes) {
        std::vector<int64_t> q = random_query(keys, n);
        hps_gcache_path_t paths[] = {HPS_GCACHE_PATH_AUTO, HPS_GCACHE_PATH_FUSED,
                                     HPS_GCACHE_PATH_BLOCK, HPS_GCACHE_PATH_GLOBAL};
        for (hps_gcache_path_t path : paths) {
            if (n > 40000 && path != HPS_GCACHE_PATH_AUTO)
                continue; /* the large batches are for the BLOCK kernels (AUTO's choice) */
            hps_gcache_set_lookup_path(c, path);
            hps_gcache_set_strict(c, path == HPS_GCACHE_PATH_GLOBAL);
            check_lookup(c, ws, q, ref, 0);
            if (n <= 40000)
                check_lookup(c, ws, q, ref, 1); /* unaligned output: scalar paths */
        }
        hps_gcache_set_lookup_path(c, HPS_GCACHE_PATH_AUTO);
        hps_gcache_set_strict(c, 0);
    }
    check_open_epoch(c, ws, keys, ref);
    hps_gcache_stats_t st;
    OK(hps_gcache_stats(c, &st));
    HPS_ASSERT_EQ(st.lookups > 0, 1);
    HPS_ASSERT_EQ(st.hits <= st.lookups, 1);
    printf("ok random policy=%d dim=%u cap=%llu keys=%zu resident=%zu evictions=%llu\n", pol, dim,
           (unsigned long long)cap, nkeys, res.size(), (unsigned long long)st.evictions);
    hps_gcache_ws_destroy(ws);
    hps_gcache_destroy(c);
}

/* The n smallest positive keys that map to set s of cache c. */
static std::vector<int64_t> keys_of_set(hps_gcache_t *c, uint64_t s, size_t n)
{
    uint64_t sets = hps_gcache_num_sets(c);
    std::vector<int64_t> keys;
    for (int64_t k = 1; keys.size() < n; k++)
        if (set_of(k, sets) == s)
            keys.push_back(k);
    return keys;
}

/* Insert 32 keys of one set into the empty set: keys[0] alone first, so
 * that it takes way 0 (the lowest free way), which the victim choice
 * prefers on equal stamps; then the other 31. */
static void fill_set(hps_gcache_t *c, const std::vector<int64_t> &keys)
{
    insert_rows(c, std::vector<int64_t>(keys.begin(), keys.begin() + 1), 1, false, 0);
    insert_rows(c, std::vector<int64_t>(keys.begin() + 1, keys.begin() + 32), 1, false, 0);
}

/* A full set: touch 31 ways, insert one more key: the untouched way goes. */
static void test_eviction(hps_gcache_policy_t pol)
{
    hps_gcache_t *c;
    hps_gcache_ws_t *ws;
    OK(hps_gcache_create(64 * 32, 16, HPS_DTYPE_FP32, pol, 0, &c));
    OK(hps_gcache_ws_create(c, 4096, &ws));
    std::vector<int64_t> in_set = keys_of_set(c, 5, 34);
    std::vector<int64_t> first(in_set.begin(), in_set.begin() + 32);
    OK(hps_gcache_set_lru_resolution(c, 1)); /* exact: every lookup call restamps */
    fill_set(c, first);
    std::map<int64_t, int> ref;
    for (int64_t k : first)
        ref[k] = 1;
    std::vector<int64_t> touch(first);
    touch.erase(touch.begin() + 5); /* all but first[5]; way 0 (first[0]) is touched */
    check_lookup(c, ws, touch, ref, 0);
    check_lookup(c, ws, touch, ref, 0);
    insert_rows(c, std::vector<int64_t>(1, in_set[32]), 1, false, 0);
    std::set<int64_t> res = resident(c);
    HPS_ASSERT_EQ(res.size(), 32);
    HPS_ASSERT_EQ(res.count(first[5]), 0); /* the only untouched way, not the tie-break's way 0 */
    HPS_ASSERT_EQ(res.count(first[0]), 1);
    HPS_ASSERT_EQ(res.count(in_set[32]), 1);
    /* many keys into a small cache: never more than 32 per set */
    std::vector<int64_t> many(20000);
    for (auto &k : many)
        k = (int64_t)rnd();
    insert_rows(c, many, 3, false, 0);
    res = resident(c);
    HPS_ASSERT_EQ(res.size() <= hps_gcache_capacity(c), 1);
    hps_gcache_stats_t st;
    OK(hps_gcache_stats(c, &st));
    HPS_ASSERT_EQ(st.evictions > 0, 1);
    printf("ok eviction policy=%d resident=%zu evictions=%llu\n", pol, res.size(),
           (unsigned long long)st.evictions);
    hps_gcache_ws_destroy(ws);
    hps_gcache_destroy(c);
}

/* LRU with a resolution of 4 lookups (windows [0, 4), [4, 8), ...): a row
 * hit in the window of its stamp keeps it, a row hit in a later window is
 * restamped.  The restamping lookup is a 70,000-key batch, so the BLOCK
 * kernel that touches in its probe step serves it. */
static void test_lru_resolution(void)
{
    hps_gcache_t *c;
    hps_gcache_ws_t *ws;
    OK(hps_gcache_create(64 * 32, 16, HPS_DTYPE_FP32, HPS_GCACHE_LRU, 0, &c));
    OK(hps_gcache_ws_create(c, 70000, &ws));
    HPS_ASSERT_EQ(hps_gcache_set_lru_resolution(c, 0), HPS_EINVAL);
    HPS_ASSERT_EQ(hps_gcache_set_lru_resolution(c, 48), HPS_EINVAL); /* not a power of two */
    HPS_ASSERT_EQ(hps_gcache_set_lru_resolution(NULL, 4), HPS_EINVAL);
    OK(hps_gcache_set_lru_resolution(c, 4));
    std::vector<int64_t> in_set = keys_of_set(c, 5, 34);
    std::vector<int64_t> first(in_set.begin(), in_set.begin() + 32);
    int64_t x = in_set[32], y = in_set[33];
    HPS_ASSERT_EQ(host_copy(c->ref.clock, 1)[0], 0); /* a new cache: the windows start at 0 */
    fill_set(c, first);                              /* every stamp 0 */
    std::map<int64_t, int> ref;
    for (int64_t k : first)
        ref[k] = 1;
    /* hit at clock 1, in its stamp's window: not restamped, so the
     * tie-break still picks way 0 (exact LRU would evict another way) */
    check_lookup(c, ws, std::vector<int64_t>(1, first[0]), ref, 0);
    insert_rows(c, std::vector<int64_t>(1, x), 1, false, 0); /* stamp 1 */
    std::set<int64_t> res = resident(c);
    HPS_ASSERT_EQ(res.count(first[0]), 0);
    HPS_ASSERT_EQ(res.count(x), 1);
    ref.erase(first[0]);
    ref[x] = 1;
    /* three lookups of an absent key advance the clock to 4 */
    for (int i = 0; i < 3; i++)
        check_lookup(c, ws, std::vector<int64_t>(1, y), ref, 0);
    /* at clock 5 (window [4, 8)) every resident key but first[7] is read:
     * stamps 0 and x's 1 are all restamped */
    std::vector<int64_t> q;
    for (int i = 0; q.size() < 70000; i++) {
        int64_t k = i % 32 == 0 ? x : first[i % 32];
        if (k != first[7])
            q.push_back(k);
    }
    hps_gcache_set_lookup_path(c, HPS_GCACHE_PATH_BLOCK);
    check_lookup(c, ws, q, ref, 0);
    hps_gcache_set_lookup_path(c, HPS_GCACHE_PATH_AUTO);
    insert_rows(c, std::vector<int64_t>(1, y), 1, false, 0);
    res = resident(c);
    HPS_ASSERT_EQ(res.size(), 32);
    HPS_ASSERT_EQ(res.count(first[7]), 0);
    HPS_ASSERT_EQ(res.count(x), 1);
    HPS_ASSERT_EQ(res.count(y), 1);
    printf("ok lru resolution\n");
    hps_gcache_ws_destroy(ws);
    hps_gcache_destroy(c);
}

/* Lookups of nq keys on one stream while another rewrites the same keys,
 * rounds times. */
static void test_concurrent(hps_gcache_policy_t pol, int strict, int nq, int rounds)
{
    const uint32_t dim = 128;
    const int nkeys = 1000;
    hps_gcache_t *c;
    hps_gcache_ws_t *ws_big, *ws_small;
    OK(hps_gcache_create(8 * nkeys, dim, HPS_DTYPE_FP32, pol, 0, &c));
    hps_gcache_set_strict(c, strict);
    hps_gcache_set_lookup_path(c, HPS_GCACHE_PATH_GLOBAL); /* then BLOCK, then FUSED */
    OK(hps_gcache_ws_create(c, nq, &ws_big));
    OK(hps_gcache_ws_create(c, nq, &ws_small));
    std::vector<int64_t> keys(nkeys);
    for (int i = 0; i < nkeys; i++)
        keys[i] = (int64_t)(mix64(i + 12345) >> 1);
    insert_rows(c, keys, 0, false, 0);
    HPS_ASSERT_EQ(resident(c).size(), nkeys);
    /* all versions' rows, staged on the device up front */
    std::vector<float> vals((size_t)rounds * nkeys * dim);
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < nkeys; i++)
            for (uint32_t j = 0; j < dim; j++)
                vals[((size_t)r * nkeys + i) * dim + j] = row_val(keys[i], r + 1, j);
    float *dvals = dev_copy(vals);
    int64_t *dkeys = dev_copy(keys);
    std::vector<int64_t> q(nq);
    for (auto &k : q)
        k = keys[rnd() % 64 < 32 ? rnd() % 8 : rnd() % nkeys];
    int64_t *dq = dev_copy(q);
    float *dout;
    uint32_t *dmc;
    CK(cudaMalloc((void **)&dout, (size_t)2 * rounds * nq * dim * sizeof(float)));
    CK(cudaMalloc((void **)&dmc, 2 * rounds * sizeof(uint32_t)));
    cudaStream_t sa, sb;
    CK(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
    for (int r = 0; r < rounds; r++) {
        OK(hps_gcache_insert(c, dkeys, dvals + (size_t)r * nkeys * dim, nkeys, sb));
        OK(hps_gcache_lookup(c, ws_big, dq, nq, dout + (size_t)(2 * r) * nq * dim, NULL, NULL, NULL,
                             sa));
        OK(hps_gcache_lookup(c, ws_small, dq, 700, dout + (size_t)(2 * r + 1) * nq * dim, NULL,
                             NULL, NULL, sa));
        if (r == rounds / 3)
            hps_gcache_set_lookup_path(c, HPS_GCACHE_PATH_BLOCK);
        if (r == 2 * rounds / 3)
            hps_gcache_set_lookup_path(c, HPS_GCACHE_PATH_FUSED);
    }
    CK(cudaDeviceSynchronize());
    std::vector<float> out = host_copy(dout, (size_t)2 * rounds * nq * dim);
    long torn = 0, checked = 0;
    for (int b = 0; b < 2 * rounds; b++) {
        size_t n = b % 2 ? 700 : nq;
        for (size_t i = 0; i < n; i++) {
            const float *row = &out[((size_t)b * nq + i) * dim];
            int found = -1;
            for (int v = 0; v <= rounds && found < 0; v++)
                if (row[0] == row_val(q[i], v, 0))
                    found = v;
            bool whole = found >= 0;
            for (uint32_t j = 0; whole && j < dim; j++)
                whole = row[j] == row_val(q[i], found, j);
            torn += !whole;
            checked++;
        }
    }
    HPS_ASSERT_EQ(torn, 0);
    printf("ok concurrent policy=%d strict=%d nq=%d rows=%ld torn=%ld\n", pol, strict, nq, checked,
           torn);
    CK(cudaStreamDestroy(sa));
    CK(cudaStreamDestroy(sb));
    CK(cudaFree(dvals));
    CK(cudaFree(dkeys));
    CK(cudaFree(dq));
    CK(cudaFree(dout));
    CK(cudaFree(dmc));
    hps_gcache_ws_destroy(ws_big);
    hps_gcache_ws_destroy(ws_small);
    hps_gcache_destroy(c);
}

/* Child side of test_shared: map, check the parent's rows, insert others. */
static int child_import(int fd, uint64_t cap, uint32_t dim, int pol)
{
    hps_gcache_t *c = NULL;
    hps_gcache_ws_t *ws = NULL;
    OK(hps_gcache_import(fd, cap, dim, HPS_DTYPE_FP32, (hps_gcache_policy_t)pol, 0, &c));
    if (!c)
        return 1;
    for (int i = 0; i < HPS_LK_NOCC; i++) /* launch setup ran for the imported cache too */
        HPS_ASSERT_EQ(c->ref.occ[HPS_DTYPE_FP32][i] >= 1, 1);
    OK(hps_gcache_ws_create(c, 4096, &ws));
    std::map<int64_t, int> ref;
    for (int64_t k : seq_keys(1, 1000))
        ref[k] = 1;
    check_lookup(c, ws, seq_keys(1, 1000), ref, 0);
    insert_rows(c, seq_keys(100001, 500), 2, false, 0);
    hps_gcache_ws_destroy(ws);
    hps_gcache_destroy(c);
    return failures ? 1 : 0;
}

static void test_shared(const char *self, hps_gcache_policy_t pol)
{
    const uint64_t cap = 8192;
    const uint32_t dim = 16;
    hps_gcache_t *c = NULL;
    hps_gcache_ws_t *ws = NULL;
    int fd = -1;
    OK(hps_gcache_create_shared(cap, dim, HPS_DTYPE_FP32, pol, 0, &c, &fd));
    if (!c)
        return;
    HPS_ASSERT_EQ(hps_gcache_bytes(c) > 0, 1);
    for (int i = 0; i < HPS_LK_NOCC; i++) /* blocks per SM, measured at creation */
        HPS_ASSERT_EQ(c->ref.occ[HPS_DTYPE_FP32][i] >= 1, 1);
    OK(hps_gcache_ws_create(c, 4096, &ws));
    insert_rows(c, seq_keys(1, 1000), 1, false, 0);
    fcntl(fd, F_SETFD, 0); /* the child inherits it across exec */
    char a_fd[16], a_cap[32], a_dim[16], a_pol[16];
    snprintf(a_fd, sizeof(a_fd), "%d", fd);
    snprintf(a_cap, sizeof(a_cap), "%llu", (unsigned long long)cap);
    snprintf(a_dim, sizeof(a_dim), "%u", dim);
    snprintf(a_pol, sizeof(a_pol), "%d", (int)pol);
    pid_t pid = fork();
    if (pid == 0) {
        execl(self, self, "--import", a_fd, a_cap, a_dim, a_pol, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    HPS_ASSERT_EQ(WIFEXITED(status) && WEXITSTATUS(status) == 0, 1);
    std::map<int64_t, int> ref;
    for (int64_t k : seq_keys(1, 1000))
        ref[k] = 1;
    for (int64_t k : seq_keys(100001, 500))
        ref[k] = 2;
    std::vector<int64_t> q = seq_keys(1, 1000), q2 = seq_keys(100001, 500);
    q.insert(q.end(), q2.begin(), q2.end());
    check_lookup(c, ws, q, ref, 0); /* the child's inserts, in our mapping */
    close(fd);
    hps_gcache_ws_destroy(ws);
    hps_gcache_destroy(c);
}

/* Free bytes of device d. */
static size_t dev_free(int d)
{
    size_t fr = 0, total = 0;
    CK(cudaSetDevice(d));
    CK(cudaMemGetInfo(&fr, &total));
    return fr;
}

/* A cache sharded over devices 0 and 1 (needs 2 devices with peer access):
 * each device gives about half of the memory (shard bytes, and device 1's
 * free memory drops by its shard); rows inserted through device 0's mapping
 * are read exactly through device 1's (the same descriptors imported again)
 * and back; per-shard occupancy adds up to the whole; a mismatched part
 * count is refused. */
static void test_sharded(hps_gcache_policy_t pol)
{
    int ndev = 0, can = 0;
    CK(cudaGetDeviceCount(&ndev));
    if (ndev >= 2)
        CK(cudaDeviceCanAccessPeer(&can, 0, 1));
    if (!can) {
        printf(
            "ok sharded cache policy=%d # SKIP needs 2 devices with peer access (%d device%s%s)\n",
            pol, ndev, ndev == 1 ? "" : "s", ndev >= 2 ? ", no peer access" : "");
        return;
    }
    const uint64_t cap = 400000;
    const uint32_t dim = 32;
    hps_gcache_shards_t sh = {2, {0, 1}};
    hps_gcache_t *c0 = NULL, *c1 = NULL;
    hps_gcache_ws_t *ws0 = NULL, *ws1 = NULL;
    int fds[HPS_GCACHE_MAX_PARTS];
    uint32_t nfds = 0;
    size_t free1 = dev_free(1);
    OK(hps_gcache_create_sharded(cap, dim, HPS_DTYPE_FP32, pol, 0, &sh, &c0, fds, &nfds));
    if (!c0)
        return;
    size_t used1 = free1 - dev_free(1);
    HPS_ASSERT_EQ(hps_gcache_num_shards(c0), 2);
    HPS_ASSERT_EQ(nfds >= 2, 1);
    uint64_t bytes[2], occ[2];
    int dev[2];
    for (uint32_t j = 0; j < 2; j++)
        OK(hps_gcache_shard_stats(c0, j, &dev[j], &bytes[j], &occ[j]));
    HPS_ASSERT_EQ(dev[0], 0);
    HPS_ASSERT_EQ(dev[1], 1);
    HPS_ASSERT_EQ(bytes[0] + bytes[1], hps_gcache_bytes(c0));
    for (uint32_t j = 0; j < 2; j++) /* about half each: cuts within one granule per array */
        HPS_ASSERT_EQ(bytes[j] > hps_gcache_bytes(c0) / 3, 1);
    HPS_ASSERT_EQ(used1 >= bytes[1], 1); /* device 1's memory really holds its shard */
    HPS_ASSERT_EQ(
        hps_gcache_import_sharded(fds, nfds - 1, cap, dim, HPS_DTYPE_FP32, pol, 1, &sh, &c1),
        HPS_EINVAL);
    OK(hps_gcache_import_sharded(fds, nfds, cap, dim, HPS_DTYPE_FP32, pol, 1, &sh, &c1));
    if (!c1)
        return;
    CK(cudaSetDevice(0));
    OK(hps_gcache_ws_create(c0, 131072, &ws0));
    std::vector<int64_t> a = seq_keys(1, 60000), b = seq_keys(900001, 20000);
    insert_rows(c0, a, 1, false, 0);
    CK(cudaDeviceSynchronize());
    std::map<int64_t, int> ref;
    for (int64_t k : a)
        ref[k] = 1;
    CK(cudaSetDevice(1));
    OK(hps_gcache_ws_create(c1, 131072, &ws1));
    check_lookup(c1, ws1, a, ref, 0); /* device 1 reads rows of both shards */
    insert_rows(c1, b, 3, false, 0);  /* and writes into both */
    CK(cudaDeviceSynchronize());
    for (int64_t k : b)
        ref[k] = 3;
    std::vector<int64_t> q = a;
    q.insert(q.end(), b.begin(), b.end());
    CK(cudaSetDevice(0));
    check_lookup(c0, ws0, q, ref, 0);
    hps_gcache_stats_t st;
    OK(hps_gcache_stats(c0, &st));
    for (uint32_t j = 0; j < 2; j++)
        OK(hps_gcache_shard_stats(c0, j, &dev[j], &bytes[j], &occ[j]));
    HPS_ASSERT_EQ(occ[0] + occ[1], st.occupied);
    HPS_ASSERT_EQ(occ[0] > st.occupied / 4 && occ[1] > st.occupied / 4, 1); /* homed by hash */
    printf("# sharded cache: %llu + %llu bytes on devices 0, 1 (device 1 used %zu), rows "
           "%llu + %llu\n",
           (unsigned long long)bytes[0], (unsigned long long)bytes[1], used1,
           (unsigned long long)occ[0], (unsigned long long)occ[1]);
    CK(cudaSetDevice(1));
    hps_gcache_ws_destroy(ws1);
    hps_gcache_destroy(c1);
    CK(cudaSetDevice(0));
    hps_gcache_ws_destroy(ws0);
    hps_gcache_destroy(c0);
    for (uint32_t p = 0; p < nfds; p++)
        close(fds[p]);
}

/* One stream, no synchronization between calls: lookups of 300,000 /
 * 1,000 / 40,000 keys (BLOCK above 64K, FUSED, BLOCK small) into one
 * output buffer, an insert, then more lookups.  With overlap (the default
 * on sm_90+) each lookup probes while the previous kernel still runs, so
 * this checks that none writes its output, mask or miss list before the
 * previous call has finished (the last call's rows win), and that a
 * lookup after the insert sees the inserted keys. */
static void test_overlap(void)
{
    const uint32_t dim = 128;
    const size_t nmax = 300000;
    hps_gcache_t *c;
    hps_gcache_ws_t *ws;
    OK(hps_gcache_create(262144, dim, HPS_DTYPE_FP32, HPS_GCACHE_LRU, 0,
                         &c)); /* ~6 keys per set: none overflows */
    OK(hps_gcache_ws_create(c, nmax, &ws));
    std::vector<int64_t> keys(50000);
    for (auto &k : keys)
        k = (int64_t)(rnd() % 1000000000) + 1;
    std::vector<int64_t> first(keys.begin(), keys.begin() + 40000);
    std::vector<int64_t> later(keys.begin() + 40000, keys.end());
    insert_rows(c, first, 1, false, 0);
    std::map<int64_t, int> before, after;
    for (int64_t k : resident(c))
        before[k] = 1;
    HPS_ASSERT_EQ(before.size(), std::set<int64_t>(first.begin(), first.end()).size());
    after = before;
    for (int64_t k : later)
        after[k] = 1;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::vector<float> vals(later.size() * dim);
    for (size_t i = 0; i < later.size(); i++)
        for (uint32_t j = 0; j < dim; j++)
            vals[i * dim + j] = row_val(later[i], 1, j);
    int64_t *dlater = dev_copy(later);
    float *dvals = dev_copy(vals);
    float *out[2];
    for (auto &o : out)
        CK(cudaMalloc((void **)&o, nmax * dim * sizeof(float)));
    /* the insert goes before call 4; calls 3 and 7 are the last into their buffers */
    const size_t sizes[] = {300000, 1000, 40000, 300000, 300000, 1000, 300000, 40000};
    const int dst[] = {0, 0, 0, 0, 1, 1, 1, 1};
    const int ncalls = 8;
    std::vector<int64_t> q[ncalls];
    int64_t *dq[ncalls];
    uint8_t *dmask[ncalls];
    uint32_t *dmi[ncalls], *dmc[ncalls];
    for (int i = 0; i < ncalls; i++) {
        q[i] = random_query(keys, sizes[i]);
        dq[i] = dev_copy(q[i]);
        CK(cudaMalloc((void **)&dmask[i], sizes[i]));
        CK(cudaMalloc((void **)&dmi[i], sizes[i] * 4));
        CK(cudaMalloc((void **)&dmc[i], 4));
    }
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < ncalls; i++) {
        if (i == 4)
            OK(hps_gcache_insert(c, dlater, dvals, later.size(), s));
        OK(hps_gcache_lookup(c, ws, dq[i], sizes[i], out[dst[i]], dmask[i], dmi[i], dmc[i], s));
    }
    CK(cudaStreamSynchronize(s));
    for (int i = 0; i < ncalls; i++) {
        const std::map<int64_t, int> &ref = i < 4 ? before : after;
        std::vector<uint8_t> mask = host_copy(dmask[i], sizes[i]);
        uint32_t nm = host_copy(dmc[i], 1)[0], expect = 0;
        for (size_t j = 0; j < sizes[i]; j++) {
            bool hit = ref.count(q[i][j]) != 0;
            expect += !hit;
            HPS_ASSERT_EQ(mask[j], hit);
        }
        HPS_ASSERT_EQ(nm, expect);
    }
    for (int i : {3, 7}) { /* the last call into each buffer */
        const std::map<int64_t, int> &ref = i < 4 ? before : after;
        std::vector<float> o = host_copy(out[dst[i]], sizes[i] * dim);
        size_t bad = 0;
        for (size_t j = 0; j < sizes[i]; j++)
            if (ref.count(q[i][j]))
                for (uint32_t x = 0; x < dim; x++)
                    bad += o[j * dim + x] != row_val(q[i][j], 1, x);
        HPS_ASSERT_EQ(bad, 0);
    }
    for (int i = 0; i < ncalls; i++) {
        CK(cudaFree(dq[i]));
        CK(cudaFree(dmask[i]));
        CK(cudaFree(dmi[i]));
        CK(cudaFree(dmc[i]));
    }
    for (auto &o : out)
        CK(cudaFree(o));
    CK(cudaFree(dlater));
    CK(cudaFree(dvals));
    CK(cudaStreamDestroy(s));
    printf("ok overlap: %d lookups and an insert on one stream\n", ncalls);
    hps_gcache_ws_destroy(ws);
    hps_gcache_destroy(c);
}

static void test_stuck_lock(void)
{
    hps_gcache_t *c = NULL;
    hps_gcache_ws_t *ws = NULL;
    OK(hps_gcache_create(64 * 32, 16, HPS_DTYPE_FP32, HPS_GCACHE_LRU, 0, &c));
    OK(hps_gcache_ws_create(c, 70000, &ws));
    uint64_t sets = hps_gcache_num_sets(c);
    std::vector<int64_t> in_set, other;
    for (int64_t k = 1; in_set.size() < 3 || other.size() < 100; k++)
        (set_of(k, sets) == 5 ? in_set : other).push_back(k);
    std::vector<int64_t> first(in_set.begin(), in_set.begin() + 2);
    insert_rows(c, first, 1, false, 0);
    insert_rows(c, other, 1, false, 0);
    /* "locked" and a writer block begun, never ended: as a killed writer
     * leaves them */
    uint32_t odd = 41;
    CK(cudaMemcpy(&c->ref.ver[5], &odd, 4, cudaMemcpyHostToDevice));
    std::vector<uint64_t> ep = host_copy(&c->ref.ctr[HPS_GC_WR_BEGUN], 2);
    uint64_t open = ep[0] + 1;
    CK(cudaMemcpy(&c->ref.ctr[HPS_GC_WR_BEGUN], &open, 8, cudaMemcpyHostToDevice));
    std::map<int64_t, int> ref;
    for (int64_t k : other)
        ref[k] = 1;
    std::vector<int64_t> q = other;
    q.insert(q.end(), first.begin(), first.end()); /* locked set: misses */
    /* 70,000 keys (the EPOCH BLOCK kernel, which reads set versions here
     * since a writer is in flight), the locked set's keys once: each of
     * their reads waits out the lock */
    std::vector<int64_t> big(first);
    while (big.size() + other.size() <= 70000)
        big.insert(big.end(), other.begin(), other.end());
    hps_gcache_path_t paths[] = {HPS_GCACHE_PATH_FUSED, HPS_GCACHE_PATH_BLOCK,
                                 HPS_GCACHE_PATH_GLOBAL};
    for (hps_gcache_path_t p : paths) {
        hps_gcache_set_lookup_path(c, p);
        check_lookup(c, ws, q, ref, 0);
        check_lookup(c, ws, big, ref, 0);
    }
    hps_gcache_set_lookup_path(c, HPS_GCACHE_PATH_AUTO);
    std::vector<int64_t> third(1, in_set[2]);
    insert_rows(c, third, 1, false, 0); /* skipped: the set stays locked */
    hps_gcache_stats_t st;
    OK(hps_gcache_stats(c, &st));
    HPS_ASSERT_EQ(st.lock_timeouts, 1);
    uint64_t repaired = 99;
    OK(hps_gcache_repair(c, 20, &repaired));
    HPS_ASSERT_EQ(repaired, 1);
    uint32_t v = 0;
    CK(cudaMemcpy(&v, &c->ref.ver[5], 4, cudaMemcpyDeviceToHost));
    HPS_ASSERT_EQ(v, 42);
    OK(hps_gcache_stats(c, &st));
    HPS_ASSERT_EQ(st.writer_blocks_open, 0); /* the dead block counted as ended */
    check_lookup(c, ws, q, ref, 0);          /* the set was emptied */
    insert_rows(c, first, 3, false, 0);
    for (int64_t k : first)
        ref[k] = 3;
    check_lookup(c, ws, q, ref, 0);
    check_lookup(c, ws, big, ref, 0);
    OK(hps_gcache_repair(c, 20, &repaired));
    HPS_ASSERT_EQ(repaired, 0);
    hps_gcache_ws_destroy(ws);
    hps_gcache_destroy(c);
}

int main(int argc, char **argv)
{
    hps_gpu_require();
    if (argc == 6 && strcmp(argv[1], "--import") == 0)
        return child_import(atoi(argv[2]), strtoull(argv[3], NULL, 10), (uint32_t)atoi(argv[4]),
                            atoi(argv[5]));
    bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0; /* for the sanitizers */
    hps_gcache_t *c = NULL;
    HPS_ASSERT_EQ(hps_gcache_create(0, 8, HPS_DTYPE_FP32, HPS_GCACHE_LRU, 0, &c), HPS_EINVAL);
    HPS_ASSERT_EQ(hps_gcache_create(64, 0, HPS_DTYPE_FP32, HPS_GCACHE_LRU, 0, &c), HPS_EINVAL);
    HPS_ASSERT_EQ(hps_gcache_create(64, 8, HPS_DTYPE_FP32, (hps_gcache_policy_t)7, 0, &c),
                  HPS_EINVAL);
    hps_gcache_policy_t pols[] = {HPS_GCACHE_LRU, HPS_GCACHE_LFU};
    for (hps_gcache_policy_t pol : pols) {
        test_random(pol, 128, 16384, 3000);
        test_random(pol, 7, 16384, 3000);
        if (!quick)
            test_random(pol, 128, 4096, 3000); /* overfull: evictions */
        test_eviction(pol);
        test_shared(argv[0], pol);
        test_sharded(pol);
        if (!quick) {
            test_concurrent(pol, 0, 20000, 40);
            test_concurrent(pol, 1, 20000, 40);
            test_concurrent(pol, 0, 300000, 8); /* the large-batch BLOCK kernels */
            test_concurrent(pol, 1, 300000, 8);
        }
    }
    test_lru_resolution();
    test_overlap();
    test_stuck_lock();
    printf("%s (%d failures)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
