/*
 * gtest.cuh -- what the GPU cache's test programs (test-gcache*.cu) share:
 * the failure count and assertions, a seeded generator, host <-> device
 * copies, and deterministic rows inserted by key and version; with
 * gpucheck.h, hps_gpu_require() (exit 77 without a usable device).  One
 * program includes it once.
 */
#ifndef HPS_TESTS_GPU_GTEST_CUH
#define HPS_TESTS_GPU_GTEST_CUH

#include <stdio.h>
#include <stdlib.h>

#include <vector>

#include <cuda_runtime.h>

#include "gpucheck.h"
#include "hps/gcache.h"

static int failures;

#define HPS_ASSERT_EQ(a, b)                                                                        \
    do {                                                                                           \
        long long hps__a = (long long)(a), hps__b = (long long)(b);                                \
        if (hps__a != hps__b) {                                                                    \
            fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, #a, #b,  \
                    hps__a, hps__b);                                                               \
            if (++failures > 20)                                                                   \
                exit(1);                                                                           \
        }                                                                                          \
    } while (0)

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define OK(call) HPS_ASSERT_EQ((call), 0)

static uint64_t rng = 88172645463325252ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

template <typename T> static T *dev_copy(const std::vector<T> &h)
{
    T *d;
    CK(cudaMalloc((void **)&d, h.size() * sizeof(T) + 16));
    CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

template <typename T> static std::vector<T> host_copy(const T *d, size_t n)
{
    std::vector<T> h(n);
    CK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

/* ---- rows of the cache tests (test-gcache*.cu) ---------------------------- */

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* Deterministic row of (key, version). */
static inline float row_val(int64_t key, int ver, uint32_t j)
{
    return (float)((mix64((uint64_t)key + (uint64_t)ver * 7919) % 100000) * 7 + j);
}

static inline void insert_rows(hps_gcache_t *c, const std::vector<int64_t> &keys, int ver,
                               bool update, cudaStream_t s)
{
    uint32_t dim = hps_gcache_dim(c);
    std::vector<float> vals(keys.size() * dim);
    for (size_t i = 0; i < keys.size(); i++)
        for (uint32_t j = 0; j < dim; j++)
            vals[i * dim + j] = row_val(keys[i], ver, j);
    int64_t *dk = dev_copy(keys);
    float *dv = dev_copy(vals);
    OK(update ? hps_gcache_update(c, dk, dv, keys.size(), s)
              : hps_gcache_insert(c, dk, dv, keys.size(), s));
    CK(cudaStreamSynchronize(s));
    CK(cudaFree(dk));
    CK(cudaFree(dv));
}

/* Keys 1..n (shared test): rows of version ver. */
static inline std::vector<int64_t> seq_keys(int64_t from, size_t n)
{
    std::vector<int64_t> k(n);
    for (size_t i = 0; i < n; i++)
        k[i] = from + (int64_t)i * 7;
    return k;
}

#endif
