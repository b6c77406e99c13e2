/*
 * gpucheck.h -- whether a GPU test can run here: the one place that tells
 * a machine without a usable CUDA device (the test skips, exit 77) from a
 * CUDA error (the test fails).  C and CUDA C++; included by the gpu suite's
 * programs (gtest.cuh, cudashm-client.c).
 */
#ifndef HPS_TESTS_GPU_GPUCHECK_H
#define HPS_TESTS_GPU_GPUCHECK_H

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

/* The number of CUDA devices.  Returns 0 with *count > 0; 77 when there is
 * nothing to run on: no device (cudaErrorNoDevice, or a count of 0) or no
 * driver able to run this runtime (cudaErrorInsufficientDriver, also what a
 * machine without the driver installed gives); 1 on any other error.  *why
 * says which, NULL on 0. */
static inline int hps_gpu_probe(int *count, const char **why)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    *count = 0;
    *why = NULL;
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
        *why = cudaGetErrorString(e);
        return 77;
    }
    if (e != cudaSuccess) {
        *why = cudaGetErrorString(e);
        return 1;
    }
    if (n <= 0) {
        *why = "no CUDA device";
        return 77;
    }
    *count = n;
    return 0;
}

/* For a test program's main(): the number of devices, or exit 77 printing
 * "1..0 # SKIP <why>" when there is nothing to run on, or exit 1 printing
 * the error on any other CUDA error. */
static inline int hps_gpu_require(void)
{
    int n;
    const char *why;
    int rc = hps_gpu_probe(&n, &why);
    if (rc == 77) {
        printf("1..0 # SKIP %s\n", why);
        exit(77);
    }
    if (rc != 0) {
        fprintf(stderr, "cudaGetDeviceCount: %s\n", why);
        printf("FAIL (cudaGetDeviceCount: %s)\n", why);
        exit(1);
    }
    return n;
}

#endif
