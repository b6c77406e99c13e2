/*
 * bench-gpu-cache: keys/s of hps_gcache_lookup (de-duplication, query,
 * scatter: the whole call) against an ideal gather kernel (rows by
 * precomputed index from a flat table: the floor), in the same run.
 *
 * Workload (issue 4): dim 128 fp32, 8,388,608 keys all inserted into a cache
 * of capacity --capacity-factor times that (32-way sets: 2x leaves almost no
 * set overflowing; the run prints how many keys are not resident), query
 * keys drawn from Zipf(1.05) over the keys, 1,024 / 16,384 / 262,144 /
 * 1,048,576 keys per call, duplicates included.  Each batch size rotates
 * through up to 16 distinct batches; CUDA events time a run of calls after
 * a warm-up, repeated 5 times, median reported.  The gather reads the same
 * rows from a flat [keys][128] table through the Zipf rank's row index.
 * --batch B measures batch size B only (for a profiler).
 *
 * --dtype T (fp16, bf16 or int8; issue 22): a second cache stores the same
 * rows in type T (encoded on the host, hps_dtype_encode), and each batch
 * also measures, in the same run, hps_gcache_lookup_stored on it (rows out
 * in T), hps_gcache_lookup on it (rows decoded to fp32), and the gather of
 * the same stored bytes from a flat table of T rows (the floor of the
 * stored lookup).  Targets at 1,048,576 keys: the stored lookup at least
 * 1.6x the fp32 lookup's keys/s for fp16 / bf16, 2.5x for int8.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "bench_vcs.h"
#include "gather.cuh"
#include "hps/dtype.h"
#include "hps/gcache.h"

#define OK(call)                                                                                   \
    do {                                                                                           \
        int r_ = (call);                                                                           \
        if (r_) {                                                                                  \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, hps_strerror(r_));       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define DIM DIM_GATHER

__host__ __device__ static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

__host__ __device__ static int64_t key_of_row(uint64_t row)
{
    return (int64_t)(mix64(row) >> 1);
}

/* keys[i] and rows[i][*] of rows first..first+n. */
__global__ void k_gen(uint64_t first, uint64_t n, int64_t *keys, float *rows)
{
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t t = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; t < n * DIM; t += stride) {
        uint64_t i = t / DIM, j = t % DIM, row = first + i;
        rows[t] = (float)(row % 1000003) + 0.5f * (float)j;
        if (j == 0)
            keys[i] = key_of_row(row);
    }
}

static int num_sms;

/* Blocks of 256 threads for a gather kernel fn of n rows (four rows per
 * warp, at most one resident wave); *per_sm caches fn's occupancy. */
static unsigned gather_blocks(const void *fn, int *per_sm, uint64_t n)
{
    if (!*per_sm)
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, fn, 256, 0));
    uint64_t blocks = (n / 4 + 7) / 8 + 1;
    if (blocks > (uint64_t)num_sms * *per_sm)
        blocks = (uint64_t)num_sms * *per_sm;
    return (unsigned)blocks;
}

static void gather(const float *table, const uint32_t *idx, uint64_t n, float *out, cudaStream_t s)
{
    static int per_sm;
    k_gather<<<gather_blocks((const void *)k_gather, &per_sm, n), 256, 0, s>>>(table, idx, n, out);
}

static void gather_q(const void *table, const uint32_t *idx, uint64_t n, uint32_t q, void *out,
                     cudaStream_t s)
{
    static int per_sm;
    k_gather_q<<<gather_blocks((const void *)k_gather_q, &per_sm, n), 256, 0, s>>>(
        (const float4 *)table, idx, n, q, (float4 *)out);
}

typedef struct {
    double ref_gather_lo, ref_gather_hi, nvec, hkv, hugectr, target;
} refpt_t;

int main(int argc, char **argv)
{
    uint64_t nkeys = 8388608, pool = 16ull << 20;
    double capf = 2.0;
    int iters_scale = 1;
    uint64_t only = 0; /* --batch: measure this batch size only (profiling) */
    uint32_t lru_res = HPS_GCACHE_LRU_RESOLUTION;
    hps_dtype_t dt = HPS_DTYPE_FP32; /* --dtype: the compact cache's type */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            nkeys = 1 << 20;
            pool = 4 << 20;
            iters_scale = 0;
        } else if (!strcmp(argv[i], "--keys") && i + 1 < argc) {
            nkeys = strtoull(argv[++i], NULL, 0);
        } else if (!strcmp(argv[i], "--capacity-factor") && i + 1 < argc) {
            capf = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--batch") && i + 1 < argc) {
            only = strtoull(argv[++i], NULL, 0);
        } else if (!strcmp(argv[i], "--lru-resolution") && i + 1 < argc) {
            lru_res = (uint32_t)strtoul(argv[++i], NULL, 0);
        } else if (!strcmp(argv[i], "--dtype") && i + 1 < argc &&
                   hps_dtype_parse(argv[i + 1], &dt) == 0) {
            i++;
        } else {
            fprintf(stderr,
                    "usage: %s [--quick] [--keys N] [--capacity-factor F] [--batch B] "
                    "[--lru-resolution LOOKUPS] [--dtype fp16|bf16|int8]\n",
                    argv[0]);
            return 2;
        }
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("bench-gpu-cache: no CUDA device, skipped\n");
        return 77;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    num_sms = prop.multiProcessorCount;
    printf("bench-gpu-cache %s: GPU %s, %d SMs, %.1f GiB, L2 %d MiB\n", BENCH_VCS, prop.name,
           prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0, prop.l2CacheSize >> 20);

    /* Cache and flat table with the same rows. */
    hps_gcache_t *c;
    OK(hps_gcache_create((uint64_t)(nkeys * capf), DIM, HPS_DTYPE_FP32, HPS_GCACHE_LRU, 0, &c));
    OK(hps_gcache_set_lru_resolution(c, lru_res));
    float *table;
    CK(cudaMalloc((void **)&table, nkeys * DIM * sizeof(float)));
    const uint64_t chunk = 1 << 20;
    int64_t *ckeys;
    CK(cudaMalloc((void **)&ckeys, chunk * sizeof(int64_t)));
    for (uint64_t f = 0; f < nkeys; f += chunk) {
        uint64_t n = std::min(chunk, nkeys - f);
        k_gen<<<num_sms * 8, 256>>>(f, n, ckeys, table + f * DIM);
        CK(cudaGetLastError());
        OK(hps_gcache_insert(c, ckeys, table + f * DIM, n, 0));
    }
    CK(cudaDeviceSynchronize());
    /* --dtype: the same rows in type dt, in a cache and in a flat table of
     * its slot rows (the stored lookup's output rows, padding included) */
    hps_gcache_t *ct = NULL;
    char *table_t = NULL;
    uint32_t rbs = 0;
    if (dt != HPS_DTYPE_FP32) {
        OK(hps_gcache_create((uint64_t)(nkeys * capf), DIM, dt, HPS_GCACHE_LRU, 0, &ct));
        OK(hps_gcache_set_lru_resolution(ct, lru_res));
        rbs = hps_gcache_row_bytes(ct);
        size_t rb = hps_dtype_row_bytes(dt, DIM);
        CK(cudaMalloc((void **)&table_t, nkeys * rbs));
        std::vector<float> h(chunk * DIM);
        std::vector<char> enc(chunk * rb), slot(chunk * rbs, 0);
        char *denc;
        CK(cudaMalloc((void **)&denc, chunk * rb));
        for (uint64_t f = 0; f < nkeys; f += chunk) {
            uint64_t n = std::min(chunk, nkeys - f);
            k_gen<<<num_sms * 8, 256>>>(f, n, ckeys, table + f * DIM);
            CK(cudaMemcpy(h.data(), table + f * DIM, n * DIM * 4, cudaMemcpyDeviceToHost));
            OK(hps_dtype_encode(dt, DIM, n, h.data(), enc.data()));
            for (uint64_t i = 0; i < n; i++)
                memcpy(&slot[i * rbs], &enc[i * rb], rb);
            CK(cudaMemcpy(denc, enc.data(), n * rb, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(table_t + f * rbs, slot.data(), n * rbs, cudaMemcpyHostToDevice));
            OK(hps_gcache_insert(ct, ckeys, denc, n, 0));
            CK(cudaDeviceSynchronize());
        }
        CK(cudaFree(denc));
        printf("%s cache: the same rows, %u bytes per slot row (%zu stored)\n", hps_dtype_name(dt),
               rbs, rb);
    }
    hps_gcache_stats_t st;
    OK(hps_gcache_stats(c, &st));
    printf("cache: %llu keys inserted, capacity %llu rows (%llu sets of 32), resident %llu, "
           "evicted %llu (%.4f%% not resident), dim %d fp32, LRU (resolution %u lookups)\n",
           (unsigned long long)nkeys, (unsigned long long)st.capacity_rows,
           (unsigned long long)st.num_sets, (unsigned long long)st.occupied,
           (unsigned long long)st.evictions, 100.0 * (nkeys - st.occupied) / nkeys, DIM, lru_res);

    /* Zipf(1.05) ranks -> rows (a fixed permutation, so hot rows are spread). */
    std::vector<uint32_t> h_idx = zipf_rows(nkeys, pool);
    std::vector<int64_t> h_q(pool);
    for (uint64_t i = 0; i < pool; i++)
        h_q[i] = key_of_row(h_idx[i]);
    uint32_t *d_idx;
    int64_t *d_q;
    CK(cudaMalloc((void **)&d_idx, pool * sizeof(uint32_t)));
    CK(cudaMalloc((void **)&d_q, pool * sizeof(int64_t)));
    CK(cudaMemcpy(d_idx, h_idx.data(), pool * sizeof(uint32_t), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_q, h_q.data(), pool * sizeof(int64_t), cudaMemcpyHostToDevice));

    const uint64_t batches[] = {1024, 16384, 262144, 1048576};
    const refpt_t refs[] = {{141, 180, 61, 29, 69, 95},
                            {1710, 2150, 934, 425, 605, 1400},
                            {4500, 4580, 3812, 2744, 1503, 4200},
                            {5020, 5040, 4463, 3804, 1982, 4800}};
    uint64_t maxb = 1048576;
    hps_gcache_ws_t *ws, *ws_t = NULL;
    OK(hps_gcache_ws_create(c, maxb, &ws));
    if (ct)
        OK(hps_gcache_ws_create(ct, maxb, &ws_t));
    float *out, *out2;
    uint32_t *d_mi, *d_mc;
    CK(cudaMalloc((void **)&out, maxb * DIM * sizeof(float)));
    CK(cudaMalloc((void **)&out2, maxb * DIM * sizeof(float)));
    CK(cudaMalloc((void **)&d_mi, maxb * sizeof(uint32_t)));
    CK(cudaMalloc((void **)&d_mc, sizeof(uint32_t)));
    cudaStream_t st0;
    CK(cudaStreamCreateWithFlags(&st0, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));

    printf("\n%9s %7s %10s %10s %7s %9s  | H200 reference M keys/s: gather, NVEC, HKV, "
           "HugeCTR; target\n",
           "batch", "uniq%", "ours Mk/s", "gather", "ratio", "target");
    char sidebar[4][256] = {{0}}, typed[4][320] = {{0}};
    for (int b = 0; b < 4; b++) {
        uint64_t B = batches[b];
        if (B > pool || (only && B != only))
            continue;
        uint64_t nb = std::min<uint64_t>(16, pool / B);
        /* correctness and unique fraction on batch 0 */
        std::vector<int64_t> q0(h_q.begin(), h_q.begin() + B);
        std::sort(q0.begin(), q0.end());
        double uniq = 100.0 * (std::unique(q0.begin(), q0.end()) - q0.begin()) / B;
        CK(cudaMemset(out, 0xff, B * DIM * sizeof(float)));
        OK(hps_gcache_lookup(c, ws, d_q, B, out, NULL, d_mi, d_mc, st0));
        gather(table, d_idx, B, out2, st0);
        CK(cudaStreamSynchronize(st0));
        uint32_t misses;
        CK(cudaMemcpy(&misses, d_mc, 4, cudaMemcpyDeviceToHost));
        std::vector<float> o1(B * DIM), o2(B * DIM);
        CK(cudaMemcpy(o1.data(), out, B * DIM * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(o2.data(), out2, B * DIM * 4, cudaMemcpyDeviceToHost));
        uint64_t bad = 0;
        for (uint64_t i = 0; i < B * DIM; i++)
            bad += memcmp(&o1[i], &o2[i], 4) != 0;
        if (bad > (uint64_t)misses * DIM)
            printf("MISMATCH: %llu floats differ from the gather (misses %u)\n",
                   (unsigned long long)bad, misses);
        if (ct) { /* the stored lookup against the gather of the same slot rows */
            OK(hps_gcache_lookup_stored(ct, ws_t, d_q, B, out, NULL, d_mi, d_mc, st0));
            gather_q(table_t, d_idx, B, rbs / 16, out2, st0);
            CK(cudaStreamSynchronize(st0));
            uint32_t tm;
            CK(cudaMemcpy(&tm, d_mc, 4, cudaMemcpyDeviceToHost));
            std::vector<char> s1(B * rbs), s2(B * rbs);
            CK(cudaMemcpy(s1.data(), out, B * rbs, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(s2.data(), out2, B * rbs, cudaMemcpyDeviceToHost));
            uint64_t rows_bad = 0;
            for (uint64_t i = 0; i < B; i++)
                rows_bad += memcmp(&s1[i * rbs], &s2[i * rbs], rbs) != 0;
            if (rows_bad > tm)
                printf("MISMATCH (%s): %llu stored rows differ from the gather (misses %u)\n",
                       hps_dtype_name(dt), (unsigned long long)rows_bad, tm);
        }

        uint64_t iters = std::max<uint64_t>(iters_scale ? 200 : 20,
                                            (iters_scale ? 1ull << 28 : 1ull << 24) / B / 4);
        /* modes: 0 the API's choice, 1 gather, 2 FUSED, 3 GLOBAL, 4 BLOCK,
         * 5 the API's choice with strict (fence) validation, 6 the API's
         * choice without overlap (each call waits for the previous one) */
        static const hps_gcache_path_t mode_path[7] = {
            HPS_GCACHE_PATH_AUTO,   HPS_GCACHE_PATH_AUTO,  HPS_GCACHE_PATH_FUSED,
            HPS_GCACHE_PATH_GLOBAL, HPS_GCACHE_PATH_BLOCK, HPS_GCACHE_PATH_AUTO,
            HPS_GCACHE_PATH_AUTO};
        /* with --dtype: 7 its stored lookup, 8 its decoding lookup, 9 the
         * gather of its slot rows */
        double med[10];
        for (int mode = 0; mode < (ct ? 10 : 7); mode++) {
            hps_gcache_set_lookup_path(c, mode_path[mode < 7 ? mode : 0]);
            hps_gcache_set_strict(c, mode == 5);
            hps_gcache_set_overlap(c, mode != 6);
            double t[5];
            for (int rep = 0; rep < 5; rep++) {
                for (uint64_t it = 0; it < iters + 10; it++) {
                    if (it == 10)
                        CK(cudaEventRecord(e0, st0)); /* after 10 warm-up calls */
                    if (mode == 1)
                        gather(table, d_idx + (it % nb) * B, B, out, st0);
                    else if (mode == 7)
                        OK(hps_gcache_lookup_stored(ct, ws_t, d_q + (it % nb) * B, B, out, NULL,
                                                    d_mi, d_mc, st0));
                    else if (mode == 8)
                        OK(hps_gcache_lookup(ct, ws_t, d_q + (it % nb) * B, B, out, NULL, d_mi,
                                             d_mc, st0));
                    else if (mode == 9)
                        gather_q(table_t, d_idx + (it % nb) * B, B, rbs / 16, out, st0);
                    else
                        OK(hps_gcache_lookup(c, ws, d_q + (it % nb) * B, B, out, NULL, d_mi, d_mc,
                                             st0));
                }
                t[rep] = ms_since(e0, e1, st0) / iters;
            }
            std::sort(t, t + 5);
            med[mode] = t[2];
        }
        hps_gcache_set_lookup_path(c, HPS_GCACHE_PATH_AUTO);
        hps_gcache_set_strict(c, 0);
        hps_gcache_set_overlap(c, 1);
        double ours = B / (med[0] * 1e3), g = B / (med[1] * 1e3);
        const refpt_t *r = &refs[b];
        printf("%9llu %6.1f%% %10.0f %10.0f %6.1f%% %9.0f  | %.0f-%.0f, %.0f, %.0f, %.0f; >= %.0f%s"
               " (%.2f us/call, misses %u)\n",
               (unsigned long long)B, uniq, ours, g, 100.0 * ours / g, r->target, r->ref_gather_lo,
               r->ref_gather_hi, r->nvec, r->hkv, r->hugectr, r->target,
               ours >= r->target ? " MET" : " not met", med[0] * 1e3, misses);
        snprintf(sidebar[b], sizeof(sidebar[b]),
                 "%9llu  FUSED %5.0f (%5.1f%%)  BLOCK %5.0f (%5.1f%%)  GLOBAL %5.0f (%5.1f%%)"
                 "  AUTO+strict %5.0f (%5.1f%%)  AUTO, no overlap %5.0f (%5.1f%%)",
                 (unsigned long long)B, B / (med[2] * 1e3), 100.0 * med[1] / med[2],
                 B / (med[4] * 1e3), 100.0 * med[1] / med[4], B / (med[3] * 1e3),
                 100.0 * med[1] / med[3], B / (med[5] * 1e3), 100.0 * med[1] / med[5],
                 B / (med[6] * 1e3), 100.0 * med[1] / med[6]);
        if (ct)
            snprintf(typed[b], sizeof(typed[b]),
                     "%9llu  stored %6.0f (%.2fx fp32 lookup; %5.1f%% of its gather %6.0f)  "
                     "decoded to fp32 %6.0f (%.2fx)",
                     (unsigned long long)B, B / (med[7] * 1e3), med[0] / med[7],
                     100.0 * med[9] / med[7], B / (med[9] * 1e3), B / (med[8] * 1e3),
                     med[0] / med[8]);
    }
    printf(
        "\neach lookup path forced, M keys/s (ratio to the gather); AUTO = FUSED up to %d "
        "keys, BLOCK above; strict = fence-ordered validation; overlap = each call's probes beside "
        "the previous call's copies (hps_gcache_set_overlap, on by default on sm_90+):\n",
        HPS_GCACHE_FUSED_MAX);
    for (int b = 0; b < 4; b++)
        if (sidebar[b][0])
            printf("%s\n", sidebar[b]);
    if (ct) {
        printf("\n%s cache, same rows and batches, M keys/s (stored: rows out as %u-byte %s "
               "slot rows; the gather moves the same bytes):\n",
               hps_dtype_name(dt), rbs, hps_dtype_name(dt));
        for (int b = 0; b < 4; b++)
            if (typed[b][0])
                printf("%s\n", typed[b]);
        printf("target (issue 22) at 1,048,576 keys: stored >= %.1fx the fp32 lookup\n",
               dt == HPS_DTYPE_INT8 ? 2.5 : 1.6);
    }
    printf("\ntargets (issue 4): >= 95 / 1,400 / 4,200 / 4,800 M keys/s and within 5%% of the "
           "gather at 1M keys; reference points were measured on an H200.\n");
    hps_gcache_ws_destroy(ws);
    hps_gcache_ws_destroy(ws_t);
    hps_gcache_destroy(c);
    hps_gcache_destroy(ct);
    cudaFree(table_t);
    return 0;
}
