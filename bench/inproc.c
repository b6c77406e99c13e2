/*
 * bench-inproc -- latency of libhps lookups inside the calling process
 * (include/hps/client.h), keys and output in device memory: the "(a)" column
 * of bench/inproc-gpu.sh.
 *
 *   bench-inproc --config INI [--model NAME] [--device D] [--duration S]
 *                [--warmup S] [--min-calls N] [--no-hot] [--hot-out DIR]
 *                REQUEST_FILE...
 *
 * A client is opened on the INI (hps-coordinator must be serving its
 * segment; an hps-worker on the same device shares the GPU caches) and
 * waits until ready.  Per request file (`hps-gen requests`, one batch size
 * B each, see include/hps/gen.h): every request's T*B keys (table-major,
 * NUMKEYS = B per table) are copied to device memory once, an output of
 * B * sum(dim) floats is allocated on the device, and hps_client_lookup()
 * is called with keys_loc = out_loc = the device on a stream of our own
 * (cudaStreamNonBlocking), cycling through the file's requests: --warmup
 * seconds untimed, then at least --min-calls calls and --duration seconds,
 * each call timed on the host clock (the call returns when its output is
 * complete).  Printed per file: p50 / p99 / mean per call (us), keys/s, the
 * GPU cache hit rate over the timed calls (cache counters of the model's
 * tables) and an exact check of one answer (rows equal to hps_gen_vector,
 * rows with the table's default value, wrong rows).
 *
 * "All hits" (unless --no-hot): a hot set per table of
 * K_t = max(1, min(rows_t, capacity_t / 4)) keys -- the K_t most popular
 * keys of the power law, i.e. hps_gen_key(t, 0 .. K_t-1) -- is looked up
 * until one whole pass hits the caches for every key (at most 50 passes);
 * then per batch size the same number of requests as the file holds are
 * drawn from it (power law over ranks 1..K_t with the file's alpha, seed
 * fixed) and timed the same way; the hit rate over the timed calls is
 * printed (1.0000 when every key hit).  --hot-out DIR writes those requests
 * as DIR/hot-b<B>.bin (the request-file format) for bench/inproc_py.py.
 *
 * Machine-readable lines, one per measurement:
 *   RESULT mode=a|a-hot B=.. keys=.. calls=.. p50_us=.. p99_us=.. mean_us=..
 *          keys_s=.. hit=.. exact=.. default=.. wrong=..
 *
 * Exit status 0; 1 on an error (a lookup error or a wrong row); 2 usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "bench/benchutil.h"
#include "hps/client.h"
#include "hps/gen.h"

#define MAX_FILES 16

typedef struct opts {
    const char *ini, *model, *hot_out;
    int device;
    double duration, warmup;
    unsigned min_calls;
    bool hot;
    const char *files[MAX_FILES];
    int nfiles;
} opts_t;

typedef struct reqs {
    uint32_t T, B;
    uint64_t C;
    int64_t *h_keys; /* C x T x B (host copy) */
    void *map;
    size_t map_len;
} reqs_t;

typedef struct stats {
    uint64_t calls;
    double p50, p99, mean, keys_s, hit;
    uint64_t exact, dflt, wrong;
} stats_t;

static hps_client_t *cl;
static size_t mi;
static uint32_t T;
static uint32_t *dims;
static float *defaults;
static uint64_t *rows;
static uint32_t key_bytes;
static uint64_t dim_sum;
static cudaStream_t stream;
static int device;

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t ce_ = (x);                                                                     \
        if (ce_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "bench-inproc: %s: %s (%s:%d)\n", #x, cudaGetErrorString(ce_),         \
                    __FILE__, __LINE__);                                                           \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static void usage(void)
{
    fprintf(stderr, "usage: bench-inproc --config INI [--model NAME] [--device D] [--duration S]\n"
                    "                    [--warmup S] [--min-calls N] [--no-hot] [--hot-out DIR]\n"
                    "                    REQUEST_FILE...\n");
    exit(2);
}

static void parse(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){.device = 0, .duration = 1.5, .warmup = 0.5, .min_calls = 30, .hot = true};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "--config") && has)
            o->ini = argv[++i];
        else if (!strcmp(a, "--model") && has)
            o->model = argv[++i];
        else if (!strcmp(a, "--device") && has)
            o->device = atoi(argv[++i]);
        else if (!strcmp(a, "--duration") && has)
            o->duration = atof(argv[++i]);
        else if (!strcmp(a, "--warmup") && has)
            o->warmup = atof(argv[++i]);
        else if (!strcmp(a, "--min-calls") && has)
            o->min_calls = (unsigned)atoi(argv[++i]);
        else if (!strcmp(a, "--hot-out") && has)
            o->hot_out = argv[++i];
        else if (!strcmp(a, "--no-hot"))
            o->hot = false;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            usage();
        else if (a[0] == '-')
            usage();
        else if (o->nfiles < MAX_FILES)
            o->files[o->nfiles++] = a;
        else
            usage();
    }
    if (!o->ini || o->nfiles == 0 || o->device < 0)
        usage();
}

static int reqs_open(const char *path, reqs_t *r)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        fprintf(stderr, "bench-inproc: %s: %s\n", path, strerror(errno));
        return -1;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED || st.st_size < 24) {
        fprintf(stderr, "bench-inproc: %s: cannot map or too short\n", path);
        return -1;
    }
    const hps_gen_req_header_t *h = map;
    hps_err_t rc = hps_gen_req_check(h, (uint64_t)st.st_size);
    if (rc != 0) {
        fprintf(stderr, "bench-inproc: %s: not a request file (%s)\n", path, hps_strerror(rc));
        return -1;
    }
    *r = (reqs_t){.T = h->num_tables,
                  .B = h->batch,
                  .C = h->count,
                  .map = map,
                  .map_len = (size_t)st.st_size};
    r->h_keys = (int64_t *)((char *)map + sizeof(*h));
    return 0;
}

/* Sum of the model's GPU cache counters (hits, lookups); 0, 0 without caches. */
static void cache_sum(uint64_t *hits, uint64_t *lookups)
{
    *hits = *lookups = 0;
    for (uint32_t t = 0; t < T; t++) {
        hps_client_cache_stats_t s;
        if (hps_client_cache_stats(cl, mi, t, &s) == 0) {
            *hits += s.hits;
            *lookups += s.lookups;
        }
    }
}

static void lookup_or_die(const int32_t *nk, const int64_t *d_keys, float *d_out)
{
    hps_err_t rc =
        hps_client_lookup(cl, mi, T, nk, d_keys, HPS_KEY_INT64, device, d_out, device, stream);
    if (rc < 0) {
        fprintf(stderr, "bench-inproc: hps_client_lookup: %s\n", hps_client_last_error());
        exit(1);
    }
}

/* Check the answer of request keys (host) in h_out: exact / default / wrong rows. */
static void check(const int64_t *keys, uint32_t B, const float *h_out, stats_t *s)
{
    size_t fo = 0;
    float *want = malloc(4096 * sizeof(float));
    for (uint32_t t = 0; t < T; t++) {
        for (uint32_t b = 0; b < B; b++, fo += dims[t]) {
            int64_t key = keys[(size_t)t * B + b];
            hps_gen_vector(t, key, dims[t], want);
            const float *got = h_out + fo;
            if (!memcmp(got, want, dims[t] * sizeof(float))) {
                s->exact++;
                continue;
            }
            bool def = true;
            for (uint32_t d = 0; d < dims[t] && def; d++)
                def = got[d] == defaults[t];
            if (def) {
                s->dflt++;
            } else {
                if (s->wrong == 0)
                    fprintf(stderr,
                            "bench-inproc: wrong row: table %u key %" PRId64 " [0] = %g, want %g\n",
                            t, key, got[0], want[0]);
                s->wrong++;
            }
        }
    }
    free(want);
}

/* Time lookups of C requests of T*B keys (host copy keys). */
static void measure(const opts_t *o, const int64_t *keys, uint32_t B, uint64_t C, stats_t *s)
{
    size_t per = (size_t)T * B;
    int64_t *d_keys;
    float *d_out, *h_out;
    size_t nfloats = (size_t)B * dim_sum;
    CK(cudaMalloc((void **)&d_keys, C * per * sizeof(int64_t)));
    CK(cudaMemcpy(d_keys, keys, C * per * sizeof(int64_t), cudaMemcpyHostToDevice));
    CK(cudaMalloc((void **)&d_out, nfloats * sizeof(float)));
    h_out = malloc(nfloats * sizeof(float));
    int32_t *nk = malloc(T * sizeof(int32_t));
    for (uint32_t t = 0; t < T; t++)
        nk[t] = (int32_t)B;

    uint64_t i = 0;
    double t0 = bench_now_s();
    unsigned wmin = 5;
    while (bench_now_s() - t0 < o->warmup || wmin) {
        lookup_or_die(nk, d_keys + (i++ % C) * per, d_out);
        if (wmin)
            wmin--;
    }
    uint64_t h0, l0, h1, l1;
    cache_sum(&h0, &l0);
    size_t cap = 1 << 16, n = 0;
    uint64_t *lat = malloc(cap * sizeof(uint64_t));
    double start = bench_now_s(), end = start;
    while (n < o->min_calls || end - start < o->duration) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        lookup_or_die(nk, d_keys + (i++ % C) * per, d_out);
        clock_gettime(CLOCK_MONOTONIC, &b);
        if (n == cap)
            lat = realloc(lat, (cap *= 2) * sizeof(uint64_t));
        lat[n++] = (uint64_t)(b.tv_sec - a.tv_sec) * 1000000000ULL + (uint64_t)b.tv_nsec -
                   (uint64_t)a.tv_nsec;
        end = (double)b.tv_sec + (double)b.tv_nsec * 1e-9;
        if (n >= 2000000)
            break;
    }
    cache_sum(&h1, &l1);
    double sum = 0;
    for (size_t j = 0; j < n; j++)
        sum += (double)lat[j];
    qsort(lat, n, sizeof(*lat), bench_cmp_u64);
    s->calls = n;
    s->p50 = (double)lat[bench_rank(n, 0.50)] / 1e3;
    s->p99 = (double)lat[bench_rank(n, 0.99)] / 1e3;
    s->mean = sum / (double)n / 1e3;
    s->keys_s = (double)n * (double)per / (end - start);
    s->hit = l1 > l0 ? (double)(h1 - h0) / (double)(l1 - l0) : -1;
    /* one answer checked exactly: the request after the last timed one */
    uint64_t r = i % C;
    lookup_or_die(nk, d_keys + r * per, d_out);
    CK(cudaMemcpy(h_out, d_out, nfloats * sizeof(float), cudaMemcpyDeviceToHost));
    s->exact = s->dflt = s->wrong = 0;
    check(keys + r * per, B, h_out, s);
    free(lat);
    free(nk);
    free(h_out);
    CK(cudaFree(d_keys));
    CK(cudaFree(d_out));
}

static void report(const char *mode, uint32_t B, const stats_t *s)
{
    printf("  %-6s %6u %8u | %8" PRIu64 " %9.1f %9.1f %9.1f %12.4g | %6.4f | %6" PRIu64 " %6" PRIu64
           " %5" PRIu64 "\n",
           mode, B, T * B, s->calls, s->p50, s->p99, s->mean, s->keys_s, s->hit, s->exact, s->dflt,
           s->wrong);
    printf("RESULT mode=%s B=%u keys=%u calls=%" PRIu64 " p50_us=%.2f p99_us=%.2f mean_us=%.2f"
           " keys_s=%.6g hit=%.4f exact=%" PRIu64 " default=%" PRIu64 " wrong=%" PRIu64 "\n",
           mode, B, T * B, s->calls, s->p50, s->p99, s->mean, s->keys_s, s->hit, s->exact, s->dflt,
           s->wrong);
    fflush(stdout);
}

static void header(void)
{
    printf("  %-6s %6s %8s | %8s %9s %9s %9s %12s | %6s | %6s %6s %5s\n", "mode", "B", "keys",
           "calls", "p50 us", "p99 us", "mean us", "keys/s", "hit", "exact", "dflt", "wrong");
}

static int write_reqs(const char *path, uint32_t B, uint64_t C, const int64_t *keys)
{
    FILE *f = fopen(path, "wb");
    hps_gen_req_header_t h = {.magic = HPS_GEN_REQ_MAGIC, .num_tables = T, .batch = B, .count = C};
    if (!f || fwrite(&h, sizeof(h), 1, f) != 1 ||
        fwrite(keys, sizeof(int64_t), C * T * B, f) != C * T * B || fclose(f) != 0) {
        fprintf(stderr, "bench-inproc: cannot write %s\n", path);
        return -1;
    }
    return 0;
}

/* Look up the hot sets (K[t] first keys of each table) until a whole pass hits. */
static int warm_hot(const uint64_t *K)
{
    size_t total = 0;
    for (uint32_t t = 0; t < T; t++)
        total += K[t];
    int64_t *h = malloc(total * sizeof(int64_t)), *d;
    int32_t *nk = malloc(T * sizeof(int32_t));
    size_t o = 0, nf = 0;
    for (uint32_t t = 0; t < T; t++) {
        nk[t] = (int32_t)K[t];
        for (uint64_t k = 0; k < K[t]; k++)
            h[o++] = hps_gen_key_w(t, k, key_bytes);
        nf += K[t] * dims[t];
    }
    float *d_out;
    CK(cudaMalloc((void **)&d, total * sizeof(int64_t)));
    CK(cudaMemcpy(d, h, total * sizeof(int64_t), cudaMemcpyHostToDevice));
    CK(cudaMalloc((void **)&d_out, nf * sizeof(float)));
    int pass;
    uint64_t h0, l0, h1, l1;
    for (pass = 1; pass <= 50; pass++) {
        cache_sum(&h0, &l0);
        lookup_or_die(nk, d, d_out);
        cache_sum(&h1, &l1);
        if (l1 - l0 == total && h1 - h0 == total)
            break;
        usleep(20000); /* background inserts */
    }
    printf("hot set: %zu keys over %u tables; every key hit the caches on pass %d%s\n", total, T,
           pass > 50 ? 50 : pass, pass > 50 ? " -- NOT REACHED (hits " : "");
    if (pass > 50)
        printf("   last pass: %" PRIu64 " hits of %" PRIu64 " lookups)\n", h1 - h0, l1 - l0);
    CK(cudaFree(d));
    CK(cudaFree(d_out));
    free(h);
    free(nk);
    return pass > 50 ? -1 : 0;
}

int main(int argc, char **argv)
{
    opts_t o;
    parse(argc, argv, &o);
    char err[512];
    int ndev = 0;
    CK(cudaGetDeviceCount(&ndev));
    if (ndev <= o.device) {
        fprintf(stderr, "bench-inproc: no CUDA device %d (%d devices)\n", o.device, ndev);
        return 1;
    }
    device = o.device;
    CK(cudaSetDevice(o.device));
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, o.device));
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    double t0 = bench_now_s();
    hps_err_t rc = hps_client_open(o.ini, o.device, &cl, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "bench-inproc: hps_client_open: %s\n", err);
        return 1;
    }
    if (hps_client_wait_ready(cl, 120000) < 0) {
        fprintf(stderr, "bench-inproc: client not ready after 120 s\n");
        return 1;
    }
    double t_ready = bench_now_s() - t0;
    if (o.model) {
        if (hps_client_model_find(cl, o.model, &mi) < 0) {
            fprintf(stderr, "bench-inproc: %s\n", hps_client_last_error());
            return 1;
        }
    } else {
        mi = 0;
    }
    hps_client_model_info_t info;
    hps_client_model_info(cl, mi, &info);
    T = info.num_tables;
    key_bytes = info.key_bytes;
    dims = calloc(T, sizeof(*dims));
    defaults = calloc(T, sizeof(*defaults));
    rows = calloc(T, sizeof(*rows));
    uint64_t *cap = calloc(T, sizeof(*cap)), *K = calloc(T, sizeof(*K));
    uint32_t ncaches = 0;
    for (uint32_t t = 0; t < T; t++) {
        hps_client_table_info_t ti;
        hps_client_table_info(cl, mi, t, &ti);
        dims[t] = ti.dim;
        defaults[t] = ti.default_value;
        rows[t] = ti.rows;
        dim_sum += ti.dim;
        hps_client_cache_stats_t cs;
        if (hps_client_cache_stats(cl, mi, t, &cs) == 0) {
            cap[t] = cs.capacity_rows;
            ncaches++;
        }
        uint64_t k = cap[t] / 4;
        K[t] = k < 1 ? 1 : k > rows[t] ? rows[t] : k;
    }
    printf("bench-inproc: libhps %s in-process, model %s (%u tables, dim sum %" PRIu64
           ", %u-byte keys, gpu_cache %s), device %d = %s; client ready in %.2f s; %u GPU caches\n",
           hps_version(), info.name, T, dim_sum, key_bytes, info.gpu_cache ? "on" : "off", o.device,
           prop.name, t_ready, ncaches);
    printf("timing: keys and output in device memory, own stream; %.2f s warm-up, then >= %u calls"
           " and >= %.2f s; per call host clock around hps_client_lookup()\n",
           o.warmup, o.min_calls, o.duration);
    if (ncaches == 0)
        printf("WARNING: no GPU caches: the lookups take the CPU path\n");

    reqs_t rq[MAX_FILES];
    int bad = 0;
    header();
    for (int f = 0; f < o.nfiles; f++) {
        if (reqs_open(o.files[f], &rq[f]) < 0)
            return 1;
        if (rq[f].T != T) {
            fprintf(stderr, "bench-inproc: %s has %u tables, the model %u\n", o.files[f], rq[f].T,
                    T);
            return 1;
        }
        stats_t s;
        measure(&o, rq[f].h_keys, rq[f].B, rq[f].C, &s);
        report("a", rq[f].B, &s);
        bad |= s.wrong != 0;
    }
    if (o.hot) {
        double alpha = 0;
        hps_gen_alpha_solve(T, rows, HPS_GEN_HOT_KEYS, HPS_GEN_HOT_SHARE, &alpha, NULL);
        if (warm_hot(K) < 0)
            bad = 1;
        printf("all hits: keys drawn by power law (alpha %.4f) from the K_t = min(rows, capacity/4)"
               " most popular keys of each table, warmed into the caches above\n",
               alpha);
        header();
        hps_gen_powerlaw_t *pl = calloc(T, sizeof(*pl));
        for (uint32_t t = 0; t < T; t++)
            hps_gen_powerlaw_init(&pl[t], K[t], alpha);
        for (int f = 0; f < o.nfiles; f++) {
            uint32_t B = rq[f].B;
            uint64_t C = rq[f].C;
            size_t per = (size_t)T * B;
            int64_t *keys = malloc(C * per * sizeof(int64_t));
            uint64_t st = 0x5eed0000ULL + B;
            for (uint64_t c = 0; c < C; c++)
                for (uint32_t t = 0; t < T; t++)
                    for (uint32_t b = 0; b < B; b++)
                        keys[c * per + (size_t)t * B + b] = hps_gen_key_w(
                            t, hps_gen_powerlaw_rank(&pl[t], hps_gen_uniform(&st)) - 1, key_bytes);
            if (o.hot_out) {
                char path[4096];
                snprintf(path, sizeof(path), "%s/hot-b%u.bin", o.hot_out, B);
                if (write_reqs(path, B, C, keys) < 0)
                    return 1;
            }
            stats_t s;
            measure(&o, keys, B, C, &s);
            report("a-hot", B, &s);
            bad |= s.wrong != 0;
            free(keys);
        }
        free(pl);
    }
    hps_client_counters_t k;
    if (hps_client_counters(cl, mi, &k) == 0)
        printf("client counters: %" PRIu64 " calls, %" PRIu64 " keys, mean %.1f us per call in"
               " libhps; vdb hits %" PRIu64 ", lower hits %" PRIu64 ", default %" PRIu64
               ", miss busy %" PRIu64 ", miss timeout %" PRIu64 "\n",
               k.lookup_calls, k.lookup_keys,
               k.lookup_calls ? (double)k.lookup_ns / (double)k.lookup_calls / 1e3 : 0.0,
               k.vdb_hits, k.lower_hits, k.default_keys, k.miss_busy, k.miss_timeout);
    hps_client_gpu_stats_t gs;
    if (hps_client_gpu_stats(cl, &gs) == 0)
        printf("gpu stats: dropped background inserts %" PRIu64 "\n", gs.dropped_inserts);
    hps_client_close(cl);
    for (int f = 0; f < o.nfiles; f++)
        munmap(rq[f].map, rq[f].map_len);
    return bad;
}
