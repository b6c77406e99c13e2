/*
 * bench-gather-bulk: could bulk asynchronous copies (cp.async.bulk, the
 * Hopper TMA engine) move the rows of a lookup faster than the register
 * copy of the cache's block kernel?  Measured as plain gathers (no cache,
 * no probing), so that the figure is the ceiling of either copy:
 *   register  a warp per row, four rows in flight per warp, 16-byte loads
 *             and streaming stores (bench-gpu-cache's gather), at its own
 *             occupancy and padded to 4 blocks per SM (the block kernel's);
 *   bulk      each warp runs a ring of S stages of R rows: a lane per row
 *             issues a 512-byte global-to-shared copy that completes on the
 *             stage's mbarrier; one lane then stores the stage's R
 *             contiguous output rows with one shared-to-global bulk store,
 *             and the stage is refilled once that store has read shared
 *             memory.
 * Workload of bench-gpu-cache: dim 128 fp32, a flat table of 8,388,608
 * rows, Zipf(1.05) row indices, 262,144 and 1,048,576 rows per call, 16
 * rotating batches, CUDA events, median of 5 runs, two rounds.  Each
 * variant's output is checked against the register gather's.
 * sm_90 or later (exit 77 without such a GPU).  kernels/NOTES.md (tenth
 * session) has the figures of an H200.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "bench_vcs.h"
#include "gather.cuh"

#define DIM       DIM_GATHER
#define ROW_BYTES (DIM * 4)

/* Rows in the group that starts at row first (R at most). */
__device__ __forceinline__ uint32_t group_rows(uint64_t n, uint64_t first, uint32_t R)
{
    return n - first < R ? (uint32_t)(n - first) : R;
}

__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* Rows first .. first + cnt - 1 of idx into stage buffer buf, completing on
 * bar (whose phase expects cnt rows).  Every lane of the warp calls it. */
__device__ __forceinline__ void bulk_fill(const float *table, const uint32_t *idx, uint64_t first,
                                          uint32_t cnt, unsigned char *buf, uint64_t *bar, int lane)
{
#if __CUDA_ARCH__ >= 900
    if (lane == 0)
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
                     "r"(cnt * ROW_BYTES)
                     : "memory");
    __syncwarp();
    if ((uint32_t)lane < cnt)
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
            "%2, [%3];" ::"r"(smem_addr(buf + lane * ROW_BYTES)),
            "l"(table + (uint64_t)idx[first + lane] * DIM), "n"(ROW_BYTES), "r"(smem_addr(bar))
            : "memory");
#endif
}

/* The bulk gather: groups of R rows, grid-strided over the warps, S stages
 * per warp; EF: the output stores carry an L2 evict-first hint. */
template <int R, int S, bool EF>
__global__ void k_bulk(const float *__restrict__ table, const uint32_t *__restrict__ idx,
                       uint64_t n, float *__restrict__ out)
{
#if __CUDA_ARCH__ >= 900 /* bulk copies and transaction-count barriers: sm_90 and later */
    extern __shared__ __align__(128) unsigned char ring[];
    __shared__ __align__(8) uint64_t bars[32][S];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nwb = blockDim.x >> 5;
    unsigned char *buf = ring + (size_t)w * S * R * ROW_BYTES;
    uint64_t gw = (uint64_t)blockIdx.x * nwb + w, nw = (uint64_t)gridDim.x * nwb;
    uint64_t groups = (n + R - 1) / R;
    uint64_t pol;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    if (lane == 0)
        for (int s = 0; s < S; s++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bars[w][s])));
    /* why: the barriers' initialization is visible to the bulk copies */
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncwarp();
    for (int s = 0; s < S && gw + s * nw < groups; s++) {
        uint64_t first = (gw + s * nw) * R;
        bulk_fill(table, idx, first, group_rows(n, first, R), buf + s * R * ROW_BYTES, &bars[w][s],
                  lane);
    }
    for (uint64_t it = 0; gw + it * nw < groups; it++) {
        int s = (int)(it % S);
        uint64_t first = (gw + it * nw) * R;
        uint32_t cnt = group_rows(n, first, R);
        asm volatile("{ .reg .pred p; W%=: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1; "
                     "@!p bra W%=; }" ::"r"(smem_addr(&bars[w][s])),
                     "r"((uint32_t)((it / S) & 1))
                     : "memory");
        if (lane == 0) {
            if (EF)
                asm volatile(
                    "cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], "
                    "%2, %3;" ::"l"(out + first * DIM),
                    "r"(smem_addr(buf + s * R * ROW_BYTES)), "r"(cnt * ROW_BYTES), "l"(pol)
                    : "memory");
            else
                asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(
                                 out + first * DIM),
                             "r"(smem_addr(buf + s * R * ROW_BYTES)), "r"(cnt * ROW_BYTES)
                             : "memory");
            asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        }
        if (it == 0)
            continue;
        /* the previous stage: refilled once its store has read it (the
         * newest store may still be reading its own stage) */
        if (lane == 0)
            asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
        __syncwarp();
        uint64_t g = gw + (it - 1 + S) * nw;
        if (g < groups) {
            int ps = (int)((it - 1) % S);
            bulk_fill(table, idx, g * R, group_rows(n, g * R, R), buf + ps * R * ROW_BYTES,
                      &bars[w][ps], lane);
        }
    }
    if (lane == 0)
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
}

/* Row r of the table: a value that names it. */
__global__ void k_fill(float *t, uint64_t n)
{
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x)
        t[i] = (float)((i / DIM) % 1000003) + 0.5f * (float)(i % DIM);
}

typedef void (*gather_fn)(const float *, const uint32_t *, uint64_t, float *);

typedef struct {
    const char *name;
    gather_fn fn;
    int threads, smem;
} variant_t;

int main(int argc, char **argv)
{
    uint64_t nrows = 8388608, pool = 16ull << 20, iters = 200;
    if (argc > 1 && !strcmp(argv[1], "--quick")) {
        nrows = 1 << 20;
        pool = 4 << 20;
        iters = 20;
    } else if (argc > 1) {
        fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
        return 2;
    }
    cudaDeviceProp prop;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0 ||
        cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major < 9) {
        printf("bench-gather-bulk: no sm_90 GPU, skipped\n");
        return 77;
    }
    int sms = prop.multiProcessorCount;
    printf("bench-gather-bulk %s: GPU %s, %d SMs, L2 %d MiB; %llu rows of %d fp32\n", BENCH_VCS,
           prop.name, sms, prop.l2CacheSize >> 20, (unsigned long long)nrows, DIM);
    float *table, *out, *ref;
    uint32_t *d_idx;
    CK(cudaMalloc((void **)&table, nrows * ROW_BYTES));
    k_fill<<<sms * 8, 256>>>(table, nrows * DIM);
    std::vector<uint32_t> h_idx = zipf_rows(nrows, pool);
    CK(cudaMalloc((void **)&d_idx, pool * 4));
    CK(cudaMemcpy(d_idx, h_idx.data(), pool * 4, cudaMemcpyHostToDevice));
    const uint64_t maxb = 1 << 20;
    CK(cudaMalloc((void **)&out, maxb * ROW_BYTES));
    CK(cudaMalloc((void **)&ref, maxb * ROW_BYTES));
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));

    const variant_t vs[] = {
        {"register", k_gather, 256, 0},
        {"register, 4 blocks/SM", k_gather, 256, 50 * 1024},
        {"bulk R32 S2, 1 warp", k_bulk<32, 2, false>, 32, 2 * 32 * ROW_BYTES},
        {"bulk R16 S4, 2 warps", k_bulk<16, 4, false>, 64, 2 * 4 * 16 * ROW_BYTES},
        {"bulk R16 S4, 2 warps, EF", k_bulk<16, 4, true>, 64, 2 * 4 * 16 * ROW_BYTES},
        {"bulk R32 S3, 2 warps, EF", k_bulk<32, 3, true>, 64, 2 * 3 * 32 * ROW_BYTES},
        {"bulk R8 S6, 4 warps", k_bulk<8, 6, false>, 128, 4 * 6 * 8 * ROW_BYTES},
    };
    const int nv = (int)(sizeof(vs) / sizeof(vs[0]));
    for (int v = 0; v < nv; v++)
        CK(cudaFuncSetAttribute(vs[v].fn, cudaFuncAttributeMaxDynamicSharedMemorySize, vs[v].smem));
    std::vector<float> a(maxb * DIM), b(maxb * DIM);
    int bad = 0;
    for (uint64_t B : {(uint64_t)262144, (uint64_t)1048576}) {
        uint64_t nb = std::min<uint64_t>(16, pool / B);
        printf("\n%8s  %-26s %9s %10s %9s %8s\n", "rows", "copy", "blocks/SM", "M rows/s",
               "us/call", "ratio");
        for (int round = 0; round < 2; round++) {
            double base = 0;
            for (int v = 0; v < nv; v++) {
                int per = 0;
                CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, vs[v].fn, vs[v].threads,
                                                                 vs[v].smem));
                unsigned grid = (unsigned)(sms * per);
                /* the first batch against the register gather's output */
                k_gather<<<sms * 8, 256, 0, st>>>(table, d_idx, B, ref);
                CK(cudaMemsetAsync(out, 0, B * ROW_BYTES, st));
                vs[v].fn<<<grid, vs[v].threads, vs[v].smem, st>>>(table, d_idx, B, out);
                CK(cudaMemcpyAsync(a.data(), out, B * ROW_BYTES, cudaMemcpyDeviceToHost, st));
                CK(cudaMemcpyAsync(b.data(), ref, B * ROW_BYTES, cudaMemcpyDeviceToHost, st));
                CK(cudaStreamSynchronize(st));
                if (memcmp(a.data(), b.data(), B * ROW_BYTES)) {
                    printf("MISMATCH: %s\n", vs[v].name);
                    bad = 1;
                }
                double t[5];
                for (int rep = 0; rep < 5; rep++) {
                    for (uint64_t it = 0; it < iters + 10; it++) {
                        if (it == 10)
                            CK(cudaEventRecord(e0, st)); /* after 10 warm-up calls */
                        vs[v].fn<<<grid, vs[v].threads, vs[v].smem, st>>>(
                            table, d_idx + (it % nb) * B, B, out);
                    }
                    t[rep] = ms_since(e0, e1, st) / iters;
                }
                std::sort(t, t + 5);
                double mps = B / (t[2] * 1e3);
                if (v == 0)
                    base = mps;
                printf("%8llu  %-26s %9d %10.0f %9.1f %7.1f%%\n", (unsigned long long)B, vs[v].name,
                       per, mps, t[2] * 1e3, 100.0 * mps / base);
            }
        }
    }
    return bad;
}
