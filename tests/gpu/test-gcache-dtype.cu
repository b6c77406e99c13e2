/*
 * test-gcache-dtype.cu -- the GPU cache's storage types (issue 22) against
 * the host conversions of include/hps/dtype.h.  Exits 77 (skip) when no
 * CUDA device is usable.
 *
 * For fp16, bf16 and int8 (and fp32 as the control), at dims that take the
 * vectorized kernels (8, 128) and the element-wise ones (33), on every
 * lookup path (FUSED, BLOCK, GLOBAL):
 *  - rows encoded on the host (hps_dtype_encode) and inserted; every hit's
 *    fp32 output equals hps_dtype_decode of those bytes, bit for bit; a
 *    miss is reported and leaves its output row untouched;
 *  - hps_gcache_lookup_stored returns the encoded bytes, then zero padding
 *    up to hps_gcache_row_bytes;
 *  - an update replaces the rows (the new rows read back exactly);
 *  - the row values span magnitudes (subnormal to 1e30) and include inf and
 *    NaN, so that each type's special cases cross the device decoders.
 * And one launch over tables of four storage types (hps_gcache_lookup_tables)
 * decodes each table by its own type.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "hps/dtype.h"
#include "hps/gcache.h"
#include "gtest.cuh"

static const hps_dtype_t TYPES[] = {HPS_DTYPE_FP32, HPS_DTYPE_FP16, HPS_DTYPE_BF16, HPS_DTYPE_INT8};

/* A value of varied magnitude; about 1 in 64 is inf or NaN. */
static float any_value(void)
{
    uint64_t r = rnd();
    switch (r % 64) {
    case 0:
        return (r >> 8) & 1 ? INFINITY : -INFINITY;
    case 1:
        return NAN;
    default:
        break;
    }
    float m = (float)((r >> 8) % 1000000) / 1000000.0f;
    int e = (int)((r >> 32) % 40) - 30; /* 1e-30 .. 1e9 */
    if ((r >> 40) % 8 == 0)
        e = -40; /* subnormal in fp32 */
    float v = m * powf(10.0f, (float)e);
    return (r >> 48) & 1 ? -v : v;
}

/* n rows of dim values: row i of key i's. */
static std::vector<float> some_rows(size_t n, uint32_t dim)
{
    std::vector<float> v(n * dim);
    for (float &x : v)
        x = any_value();
    return v;
}

static std::vector<uint8_t> encode(hps_dtype_t dt, uint32_t dim, const std::vector<float> &rows)
{
    size_t n = rows.size() / dim, rb = hps_dtype_row_bytes(dt, dim);
    std::vector<uint8_t> b(n * rb + 16);
    OK(hps_dtype_encode(dt, dim, n, rows.data(), b.data()));
    return b;
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Look up keys (the first `hit` inserted, the rest not) on one path and
 * check the fp32 and the stored outputs against the host. */
static void check(hps_gcache_t *c, hps_gcache_ws_t *ws, const std::vector<int64_t> &keys,
                  size_t hit, const std::vector<uint8_t> &enc)
{
    uint32_t dim = hps_gcache_dim(c), rbs = hps_gcache_row_bytes(c);
    hps_dtype_t dt = hps_gcache_storage_type(c);
    size_t n = keys.size(), rb = hps_dtype_row_bytes(dt, dim);
    std::vector<float> want(hit * dim);
    OK(hps_dtype_decode(dt, dim, hit, enc.data(), want.data()));
    int64_t *dk = dev_copy(keys);
    float *dout;
    uint8_t *dmask, *dst;
    CK(cudaMalloc((void **)&dout, n * dim * sizeof(float)));
    CK(cudaMalloc((void **)&dst, n * rbs));
    CK(cudaMalloc((void **)&dmask, n));
    CK(cudaMemset(dout, 0x7f, n * dim * sizeof(float))); /* a pattern misses must keep */
    CK(cudaMemset(dst, 0x7f, n * rbs));
    OK(hps_gcache_lookup(c, ws, dk, n, dout, dmask, NULL, NULL, 0));
    CK(cudaDeviceSynchronize());
    std::vector<float> out = host_copy(dout, n * dim);
    std::vector<uint8_t> mask = host_copy(dmask, n);
    OK(hps_gcache_lookup_stored(c, ws, dk, n, dst, dmask, NULL, NULL, 0));
    CK(cudaDeviceSynchronize());
    std::vector<uint8_t> st = host_copy(dst, n * rbs);
    std::vector<uint8_t> mask2 = host_copy(dmask, n);
    size_t bad = 0, bad_st = 0, bad_miss = 0;
    for (size_t i = 0; i < n; i++) {
        bool h = i < hit;
        HPS_ASSERT_EQ(mask[i], h);
        HPS_ASSERT_EQ(mask2[i], h);
        for (uint32_t j = 0; j < dim; j++)
            if (h ? bits(out[i * dim + j]) != bits(want[i * dim + j])
                  : bits(out[i * dim + j]) != 0x7f7f7f7fu)
                (h ? bad : bad_miss)++;
        for (uint32_t b = 0; b < rbs; b++) {
            uint8_t w = !h ? 0x7f : b < rb ? enc[i * rb + b] : 0;
            bad_st += st[i * rbs + b] != w;
        }
    }
    if (bad || bad_st || bad_miss)
        fprintf(stderr,
                "%s dim %u n %zu: %zu fp32 values, %zu stored bytes, %zu miss values "
                "differ\n",
                hps_dtype_name(dt), dim, n, bad, bad_st, bad_miss);
    HPS_ASSERT_EQ(bad, 0);
    HPS_ASSERT_EQ(bad_st, 0);
    HPS_ASSERT_EQ(bad_miss, 0);
    CK(cudaFree(dk));
    CK(cudaFree(dout));
    CK(cudaFree(dst));
    CK(cudaFree(dmask));
}

static void write(hps_gcache_t *c, const std::vector<int64_t> &keys, size_t n,
                  const std::vector<uint8_t> &enc, bool update)
{
    int64_t *dk = dev_copy(keys);
    uint8_t *dv = dev_copy(enc);
    OK(update ? hps_gcache_update(c, dk, dv, n, 0) : hps_gcache_insert(c, dk, dv, n, 0));
    CK(cudaDeviceSynchronize());
    CK(cudaFree(dk));
    CK(cudaFree(dv));
}

static void test_type(hps_dtype_t dt, uint32_t dim, size_t n)
{
    hps_gcache_t *c = NULL;
    hps_gcache_ws_t *ws = NULL;
    OK(hps_gcache_create(4 * n, dim, dt, HPS_GCACHE_LRU, 0, &c));
    if (!c)
        return;
    HPS_ASSERT_EQ(hps_gcache_storage_type(c), dt);
    uint32_t rbs = hps_gcache_row_bytes(c);
    HPS_ASSERT_EQ(rbs >= hps_dtype_row_bytes(dt, dim) && rbs % 4 == 0, 1);
    if (dt == HPS_DTYPE_FP32)
        HPS_ASSERT_EQ(rbs, 4 * dim);
    else
        HPS_ASSERT_EQ(rbs, (hps_dtype_row_bytes(dt, dim) + 15) / 16 * 16);
    OK(hps_gcache_ws_create(c, 2 * n, &ws));
    std::vector<int64_t> keys(2 * n); /* [0, n) inserted, [n, 2n) never */
    for (size_t i = 0; i < 2 * n; i++)
        keys[i] = (int64_t)(i * 7919 + 13);
    std::vector<float> rows = some_rows(n, dim);
    std::vector<uint8_t> enc = encode(dt, dim, rows);
    write(c, keys, n, enc, false);
    hps_gcache_path_t paths[] = {HPS_GCACHE_PATH_FUSED, HPS_GCACHE_PATH_BLOCK,
                                 HPS_GCACHE_PATH_GLOBAL};
    for (hps_gcache_path_t p : paths) {
        hps_gcache_set_lookup_path(c, p);
        check(c, ws, keys, n, enc);
    }
    /* an update: new rows replace the old */
    std::vector<float> rows2 = some_rows(n, dim);
    std::vector<uint8_t> enc2 = encode(dt, dim, rows2);
    write(c, keys, n, enc2, true);
    hps_gcache_set_lookup_path(c, HPS_GCACHE_PATH_AUTO);
    check(c, ws, keys, n, enc2);
    hps_gcache_ws_destroy(ws);
    hps_gcache_destroy(c);
}

/* One launch over four tables, one of each type, dims 8 / 16 / 12 / 33. */
static void test_tables(void)
{
    const uint32_t dims[4] = {8, 16, 12, 33};
    const size_t n = 300;
    hps_gcache_t *c[4] = {};
    std::vector<int64_t> keys;
    std::vector<uint32_t> koff(1, 0);
    std::vector<uint64_t> ooff;
    std::vector<float> want;
    for (int t = 0; t < 4; t++) {
        OK(hps_gcache_create(4096, dims[t], TYPES[t], HPS_GCACHE_LRU, 0, &c[t]));
        if (!c[t])
            return;
        std::vector<int64_t> k(n);
        for (size_t i = 0; i < n; i++)
            k[i] = (int64_t)(i * 31 + t);
        std::vector<float> rows = some_rows(n, dims[t]);
        std::vector<uint8_t> enc = encode(TYPES[t], dims[t], rows);
        write(c[t], k, n, enc, false);
        std::vector<float> w(n * dims[t]);
        OK(hps_dtype_decode(TYPES[t], dims[t], n, enc.data(), w.data()));
        ooff.push_back(want.size());
        want.insert(want.end(), w.begin(), w.end());
        keys.insert(keys.end(), k.begin(), k.end());
        koff.push_back((uint32_t)keys.size());
    }
    hps_gcache_set_t *set = NULL;
    OK(hps_gcache_set_create(c, 4, &set));
    int64_t *dk = dev_copy(keys);
    uint32_t *dkoff = dev_copy(koff);
    uint64_t *dooff = dev_copy(ooff);
    std::vector<uint32_t> zero(4, 0);
    uint32_t *dcount = dev_copy(zero);
    uint32_t *dmidx;
    float *dout;
    CK(cudaMalloc((void **)&dmidx, keys.size() * sizeof(uint32_t)));
    CK(cudaMalloc((void **)&dout, want.size() * sizeof(float)));
    OK(hps_gcache_lookup_tables(set, dk, keys.size(), dkoff, dooff, dout, dmidx, dcount, 0));
    CK(cudaDeviceSynchronize());
    std::vector<float> out = host_copy(dout, want.size());
    std::vector<uint32_t> count = host_copy(dcount, 4);
    size_t bad = 0;
    for (size_t i = 0; i < want.size(); i++)
        bad += bits(out[i]) != bits(want[i]);
    HPS_ASSERT_EQ(bad, 0);
    for (int t = 0; t < 4; t++)
        HPS_ASSERT_EQ(count[t], 0);
    hps_gcache_set_destroy(set);
    CK(cudaFree(dk));
    CK(cudaFree(dkoff));
    CK(cudaFree(dooff));
    CK(cudaFree(dcount));
    CK(cudaFree(dmidx));
    CK(cudaFree(dout));
    for (int t = 0; t < 4; t++)
        hps_gcache_destroy(c[t]);
}

int main(void)
{
    hps_gpu_require();
    hps_gcache_t *c = NULL;
    HPS_ASSERT_EQ(hps_gcache_create(64, 8, (hps_dtype_t)9, HPS_GCACHE_LRU, 0, &c), HPS_EINVAL);
    HPS_ASSERT_EQ(hps_gcache_rows_within(1ull << 30, 8, (hps_dtype_t)9, 1), 0);
    /* compact rows take fewer bytes: more rows fit the same memory */
    HPS_ASSERT_EQ(hps_gcache_rows_within(1ull << 30, 128, HPS_DTYPE_FP16, 1) >
                      hps_gcache_rows_within(1ull << 30, 128, HPS_DTYPE_FP32, 1),
                  1);
    const uint32_t dims[] = {8, 128, 33};
    for (hps_dtype_t dt : TYPES)
        for (uint32_t dim : dims) {
            test_type(dt, dim, 1000);
            test_type(dt, dim, 70000); /* BLOCK above 64K keys: the writer-epoch kernels */
        }
    test_tables();
    printf("%s (%d failures)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
