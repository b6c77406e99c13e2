/*
 * test-gcache-tables -- one-launch lookups over several tables and the
 * device-side split of their misses (suite gpu; exits 77 without a CUDA
 * device):
 *  - hps_gcache_lookup_tables over 4 tables (one without keys): rows, miss
 *    positions and counts per table as the per-table lookups, the cache
 *    counters;
 *  - the misses split on the device (hps_gcache_miss_gather, libhps's
 *    device-output path after per-table lookups) at thresholds that make
 *    every table, some, or none synchronous: counts, flags as the host
 *    formula, each miss's key and position compacted table after table, the
 *    default-answered rows filled with the table's default and nothing else
 *    touched;
 *  - the same lookup with the split as its tail (hps_gcache_miss_lookup_tables):
 *    the same rows, counts, head and records, every missed row the default.
 */
#include <stdio.h>
#include <string.h>

#include <map>
#include <set>
#include <vector>

#include "hps/gcache.h"
#include "../../kernels/miss.h"
#include "gtest.cuh"

/* Whether a table's m misses of n keys are fetched now at threshold thr
 * (HugeCTR's rule, the host's expression). */
static bool split_sync(uint32_t m, size_t n, double thr)
{
    return m && 1.0 - (double)m / (double)n < thr;
}

/**
 * The head and records of a split of test_tables' 4-table lookup at
 * threshold thr (hps_gcache_miss_gather's, or the tail of
 * hps_gcache_miss_lookup_tables), against the lookup's miss counts mc: per
 * table its count and flags, and each record's position (pos: the miss
 * positions the split read, table t's at pos[ko[t] ..]) and key.
 */
static void check_split(const size_t *nq, const std::vector<uint32_t> &ko,
                        const std::vector<int64_t> &keys, const std::vector<uint32_t> &mc,
                        const std::vector<uint32_t> &pos, double thr, const uint32_t *dhead,
                        const hps_gmiss_t *drec)
{
    const int nt = 4;
    std::vector<uint32_t> head = host_copy(dhead, 2 * nt);
    uint32_t total = 0;
    for (int t = 0; t < nt; t++)
        total += nq[t] ? mc[t] : 0;
    std::vector<hps_gmiss_t> rec = host_copy(drec, total);
    for (uint32_t t = 0, base = 0; t < (uint32_t)nt; t++) {
        uint32_t m = nq[t] ? mc[t] : 0;
        HPS_ASSERT_EQ(head[t], m);
        HPS_ASSERT_EQ(head[nt + t], split_sync(m, nq[t], thr) ? HPS_GMISS_SYNC : 0u);
        for (uint32_t j = 0; j < m; j++) {
            const hps_gmiss_t &r = rec[base + j];
            HPS_ASSERT_EQ(r.pos, pos[ko[t] + j]);
            HPS_ASSERT_EQ(r.key, keys[ko[t] + r.pos]);
            HPS_ASSERT_EQ(r.pad, 0);
        }
        base += m;
    }
}

/**
 * hps_gcache_miss_gather over test_tables' 4-table lookup: out (host, floats),
 * mi / mc (host) its result; dk, dko, dfo, dmi its device inputs.  Checks
 * counts, flags, records and the filled rows at three thresholds.
 */
static void check_gmiss(const uint32_t *dims, const size_t *nq, const std::vector<uint32_t> &ko,
                        const std::vector<uint64_t> &fo, const std::vector<int64_t> &keys,
                        const std::vector<float> &out, const std::vector<uint32_t> &mi,
                        const std::vector<uint32_t> &mc, const int64_t *dk, const uint32_t *dko,
                        const uint64_t *dfo, const uint32_t *dmi)
{
    const int nt = 4;
    std::vector<uint32_t> dim(dims, dims + nt), cnt(mc);
    std::vector<float> def = {0.25f, -1.0f, 3.5f, -7.0f};
    cnt[1] = 7; /* table 1 has no keys: its count is not read */
    uint32_t *ddim = dev_copy(dim), *dmc = dev_copy(cnt), *dhead;
    float *ddef = dev_copy(def), *dout = dev_copy(out);
    hps_gmiss_t *drec;
    CK(cudaMalloc((void **)&dhead, 2 * nt * sizeof(uint32_t)));
    CK(cudaMalloc((void **)&drec, keys.size() * sizeof(hps_gmiss_t)));
    const double thrs[3] = {0.0, 0.5, 2.0};
    for (double thr : thrs) {
        CK(cudaMemcpy(dout, out.data(), out.size() * sizeof(float), cudaMemcpyHostToDevice));
        OK(hps_gcache_miss_gather(nt, dko, dfo, ddim, ddef, thr, dk, dmi, dmc, dout, dhead, drec,
                                  0));
        CK(cudaDeviceSynchronize());
        check_split(nq, ko, keys, mc, mi, thr, dhead, drec);
        std::vector<float> got = host_copy(dout, out.size());
        for (int t = 0; t < nt; t++) {
            uint32_t m = nq[t] ? mc[t] : 0;
            bool sync = split_sync(m, nq[t], thr);
            std::set<uint32_t> missing(mi.begin() + ko[t], mi.begin() + ko[t] + m);
            for (size_t i = 0; i < nq[t]; i++)
                for (uint32_t j = 0; j < dims[t]; j++) {
                    size_t at = fo[t] + i * dims[t] + j;
                    bool filled = !sync && missing.count((uint32_t)i);
                    if (filled)
                        HPS_ASSERT_EQ(memcmp(&got[at], &def[t], 4), 0);
                    else
                        HPS_ASSERT_EQ(memcmp(&got[at], &out[at], 4), 0);
                }
        }
    }
    HPS_ASSERT_EQ(
        hps_gcache_miss_gather(0, dko, dfo, ddim, ddef, 0.5, dk, dmi, dmc, dout, dhead, drec, 0),
        HPS_EINVAL);
    CK(cudaFree(ddim));
    CK(cudaFree(dmc));
    CK(cudaFree(dhead));
    CK(cudaFree(ddef));
    CK(cudaFree(dout));
    CK(cudaFree(drec));
}

/**
 * hps_gcache_miss_lookup_tables (the lookup with the split as its tail) over the
 * same 4 tables at three thresholds: per table the same counts, miss
 * positions (as a set) and hit rows as hps_gcache_lookup_tables gave (out,
 * mi, mc), every missed row the table's default (synchronous tables too),
 * and the head and records as hps_gcache_miss_gather's: count, flags, each
 * record's position in the table's miss positions and its key.
 */
static void check_fused(hps_gcache_set_t *set, const uint32_t *dims, const size_t *nq,
                        const std::vector<uint32_t> &ko, const std::vector<uint64_t> &fo,
                        const std::vector<int64_t> &keys, const std::vector<float> &out,
                        const std::vector<uint32_t> &mi, const std::vector<uint32_t> &mc,
                        const int64_t *dk, const uint32_t *dko, const uint64_t *dfo)
{
    const int nt = 4;
    std::vector<float> def = {0.25f, -1.0f, 3.5f, -7.0f};
    float *ddef = dev_copy(def), *dout;
    uint32_t *dmi, *dstate, *dhead; /* dstate: the counts, then the ticket */
    hps_gmiss_t *drec;
    CK(cudaMalloc((void **)&dout, out.size() * sizeof(float)));
    CK(cudaMalloc((void **)&dmi, keys.size() * 4));
    CK(cudaMalloc((void **)&dstate, (nt + 1) * 4));
    CK(cudaMalloc((void **)&dhead, 2 * nt * sizeof(uint32_t)));
    CK(cudaMalloc((void **)&drec, keys.size() * sizeof(hps_gmiss_t)));
    const double thrs[3] = {0.0, 0.5, 2.0};
    for (double thr : thrs) {
        CK(cudaMemset(dout, 0xff, out.size() * sizeof(float)));
        CK(cudaMemset(dstate, 0, (nt + 1) * 4));
        OK(hps_gcache_miss_lookup_tables(set, dk, keys.size(), dko, dfo, ddef, thr, dout, dmi,
                                         dstate, dstate + nt, dhead, drec, 0));
        CK(cudaDeviceSynchronize());
        std::vector<uint32_t> cnt = host_copy(dstate, nt), pos = host_copy(dmi, keys.size());
        check_split(nq, ko, keys, mc, pos, thr, dhead, drec);
        std::vector<float> got = host_copy(dout, out.size());
        for (int t = 0; t < nt; t++) {
            uint32_t m = nq[t] ? mc[t] : 0;
            HPS_ASSERT_EQ(cnt[t], m);
            std::set<uint32_t> missing(mi.begin() + ko[t], mi.begin() + ko[t] + m);
            HPS_ASSERT_EQ(
                std::set<uint32_t>(pos.begin() + ko[t], pos.begin() + ko[t] + m) == missing, true);
            for (size_t i = 0; i < nq[t]; i++)
                for (uint32_t j = 0; j < dims[t]; j++) {
                    size_t at = fo[t] + i * dims[t] + j;
                    const float *want = missing.count((uint32_t)i) ? &def[t] : &out[at];
                    HPS_ASSERT_EQ(memcmp(&got[at], want, 4), 0);
                }
        }
    }
    HPS_ASSERT_EQ(hps_gcache_miss_lookup_tables(set, dk, keys.size(), dko, dfo, ddef, 0.5, dout,
                                                dmi, dstate, NULL, dhead, drec, 0),
                  HPS_EINVAL);
    CK(cudaFree(ddef));
    CK(cudaFree(dout));
    CK(cudaFree(dmi));
    CK(cudaFree(dstate));
    CK(cudaFree(dhead));
    CK(cudaFree(drec));
}

static void test_tables(void)
{
    const uint32_t dims[4] = {16, 7, 128, 8};
    const size_t nq[4] = {50, 0, 300, 1};
    hps_gcache_t *c[4];
    std::vector<std::map<int64_t, int>> ref(4);
    std::vector<std::vector<int64_t>> q(4);
    for (int t = 0; t < 4; t++) {
        OK(hps_gcache_create(4096, dims[t], HPS_DTYPE_FP32, HPS_GCACHE_LRU, 0, &c[t]));
        std::vector<int64_t> ins = seq_keys(1 + t * 100000, 1000);
        insert_rows(c[t], ins, t + 1, false, 0);
        for (int64_t k : ins)
            ref[t][k] = t + 1;
        for (size_t i = 0; i < nq[t]; i++) /* about half hits, with duplicates */
            q[t].push_back(rnd() % 2 ? ins[rnd() % 40] : (int64_t)(rnd() % 1000000) + 5000000);
    }
    hps_gcache_set_t *set = NULL;
    OK(hps_gcache_set_create(c, 4, &set));
    std::vector<uint32_t> ko(5, 0);
    std::vector<uint64_t> fo(4, 0);
    std::vector<int64_t> keys;
    for (int t = 0; t < 4; t++) {
        ko[t + 1] = ko[t] + (uint32_t)nq[t];
        fo[t] = t ? fo[t - 1] + nq[t - 1] * dims[t - 1] : 0;
        keys.insert(keys.end(), q[t].begin(), q[t].end());
    }
    size_t floats = fo[3] + nq[3] * dims[3];
    int64_t *dk = dev_copy(keys);
    uint32_t *dko = dev_copy(ko), *dmi, *dmc;
    uint64_t *dfo = dev_copy(fo);
    float *dout;
    CK(cudaMalloc((void **)&dout, floats * sizeof(float)));
    CK(cudaMemset(dout, 0xff, floats * sizeof(float)));
    CK(cudaMalloc((void **)&dmi, keys.size() * 4));
    /* Defined bytes past each table's misses: the whole array is copied
     * back (compute-sanitizer --tool initcheck reads no uninitialised byte). */
    CK(cudaMemset(dmi, 0xff, keys.size() * 4));
    CK(cudaMalloc((void **)&dmc, 16));
    CK(cudaMemset(dmc, 0, 16));
    OK(hps_gcache_lookup_tables(set, dk, keys.size(), dko, dfo, dout, dmi, dmc, 0));
    CK(cudaDeviceSynchronize());
    std::vector<float> out = host_copy(dout, floats);
    std::vector<uint32_t> mi = host_copy(dmi, keys.size()), mc = host_copy(dmc, 4);
    for (int t = 0; t < 4; t++) {
        std::set<uint32_t> missing(mi.begin() + ko[t], mi.begin() + ko[t] + mc[t]);
        HPS_ASSERT_EQ(missing.size(), mc[t]);
        size_t expect_miss = 0;
        for (size_t i = 0; i < nq[t]; i++) {
            auto it = ref[t].find(q[t][i]);
            bool hit = it != ref[t].end();
            expect_miss += !hit;
            HPS_ASSERT_EQ(missing.count((uint32_t)i), !hit);
            for (uint32_t j = 0; j < dims[t]; j++) {
                float v = out[fo[t] + i * dims[t] + j];
                uint32_t bits;
                memcpy(&bits, &v, 4);
                if (hit)
                    HPS_ASSERT_EQ(v, row_val(q[t][i], it->second, j));
                else
                    HPS_ASSERT_EQ(bits, 0xffffffffu);
            }
        }
        HPS_ASSERT_EQ(mc[t], expect_miss);
        hps_gcache_stats_t st;
        OK(hps_gcache_stats(c[t], &st));
        HPS_ASSERT_EQ(st.lookups, nq[t]);
        HPS_ASSERT_EQ(st.hits, nq[t] - expect_miss);
    }
    check_gmiss(dims, nq, ko, fo, keys, out, mi, mc, dk, dko, dfo, dmi);
    check_fused(set, dims, nq, ko, fo, keys, out, mi, mc, dk, dko, dfo);
    HPS_ASSERT_EQ(hps_gcache_set_create(c, 0, &set), HPS_EINVAL);
    hps_gcache_set_destroy(set);
    for (int t = 0; t < 4; t++)
        hps_gcache_destroy(c[t]);
    CK(cudaFree(dk));
    CK(cudaFree(dko));
    CK(cudaFree(dfo));
    CK(cudaFree(dout));
    CK(cudaFree(dmi));
    CK(cudaFree(dmc));
}

int main(void)
{
    hps_gpu_require();
    test_tables();
    printf("%s (%d failures)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
