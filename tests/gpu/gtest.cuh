/*
 * gtest.cuh -- what the GPU cache's test programs (test-gcache*.cu) share:
 * the failure count and assertions, a seeded generator, and host <->
 * device copies.  One program includes it once.
 */
#ifndef HPS_TESTS_GPU_GTEST_CUH
#define HPS_TESTS_GPU_GTEST_CUH

#include <stdio.h>
#include <stdlib.h>

#include <vector>

#include <cuda_runtime.h>

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

#endif
