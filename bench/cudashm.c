/*
 * bench-cudashm -- latency of hps-worker lookups over KServe v2 HTTP with
 * OUTPUT0 written into a CUDA shared-memory region of this process: the
 * "(d)" column of bench/inproc-gpu.sh.
 *
 *   bench-cudashm --port P --model NAME [--device D] [--duration S]
 *                 [--warmup S] [--min-calls N] REQUEST_FILE...
 *
 * Allocates one device buffer (cudaMalloc) big enough for the largest
 * answer, registers its cudaIpcMemHandle with the worker
 * (POST /v2/cudasharedmemory/region/bench-out/register), then per request
 * file (`hps-gen requests`, one batch size B each) sends, on one keep-alive
 * connection, one request at a time: a JSON header + binary KEYS (INT64,
 * T*B keys, the binary data extension), NUMKEYS = B per table in the JSON,
 * and OUTPUT0 as {"shared_memory_region": "bench-out", offset 0}; the answer
 * is JSON only.  --warmup seconds untimed, then at least --min-calls
 * requests and --duration seconds, each timed on the host clock from the
 * first byte sent to the last byte of the answer received.  After the timed
 * run one answer is checked exactly from the region (rows equal to
 * hps_gen_vector, rows of value 0 = the default of hps-gen models, wrong).
 *
 * Prints a table and, per file, a machine-readable line:
 *   RESULT mode=d B=.. keys=.. calls=.. p50_us=.. p99_us=.. mean_us=..
 *          keys_s=.. exact=.. default=.. wrong=..
 * Exit status 0; 1 on errors (a failed request, a wrong row); 2 usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "bench/benchutil.h"
#include "hps/gen.h"

#define MAX_FILES 16
#define REGION    "bench-out"

static int port, fd = -1;
static char *rbuf;
static size_t rcap = 1 << 20;

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t ce_ = (x);                                                                     \
        if (ce_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "bench-cudashm: %s: %s (%s:%d)\n", #x, cudaGetErrorString(ce_),        \
                    __FILE__, __LINE__);                                                           \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static void die(const char *msg)
{
    fprintf(stderr, "bench-cudashm: %s\n", msg);
    exit(1);
}

static void connect_worker(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        perror("bench-cudashm: connect");
        exit(1);
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static void send_all(struct iovec *iov, int cnt)
{
    while (cnt > 0) {
        ssize_t w = writev(fd, iov, cnt);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            die("send failed");
        }
        while (cnt > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++, cnt--;
        }
        if (cnt > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
}

/* Read one whole answer; returns the status, *body points into rbuf. */
static int recv_answer(const char **body, size_t *body_len)
{
    size_t len = 0, hdr_end = 0, clen = 0;
    for (;;) {
        if (len + 1 >= rcap)
            rbuf = realloc(rbuf, rcap *= 2);
        ssize_t r = read(fd, rbuf + len, rcap - len - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            die("connection closed by the worker");
        len += (size_t)r;
        rbuf[len] = 0;
        if (!hdr_end) {
            char *e = strstr(rbuf, "\r\n\r\n");
            if (!e)
                continue;
            hdr_end = (size_t)(e - rbuf) + 4;
            char *cl = strcasestr(rbuf, "\r\ncontent-length:");
            if (!cl || cl > e)
                die("answer without Content-Length");
            clen = strtoull(cl + 17, NULL, 10);
        }
        if (len >= hdr_end + clen)
            break;
    }
    *body = rbuf + hdr_end;
    *body_len = clen;
    return atoi(rbuf + 9);
}

static int post(const char *path, const char *json, const char **body, size_t *blen)
{
    char head[1024];
    int hl = snprintf(head, sizeof(head),
                      "POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\n\r\n",
                      path, port, strlen(json));
    struct iovec iov[2] = {{head, (size_t)hl}, {(void *)json, strlen(json)}};
    send_all(iov, 2);
    return recv_answer(body, blen);
}

static void b64(const unsigned char *src, size_t n, char *dst)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned w = (unsigned)src[i] << 16;
        if (i + 1 < n)
            w |= (unsigned)src[i + 1] << 8;
        if (i + 2 < n)
            w |= src[i + 2];
        dst[o++] = abc[w >> 18 & 63];
        dst[o++] = abc[w >> 12 & 63];
        dst[o++] = i + 1 < n ? abc[w >> 6 & 63] : '=';
        dst[o++] = i + 2 < n ? abc[w & 63] : '=';
    }
    dst[o] = 0;
}

typedef struct reqs {
    uint32_t T, B;
    uint64_t C;
    const int64_t *keys;
    void *map;
    size_t map_len;
} reqs_t;

static void reqs_open(const char *path, reqs_t *r)
{
    int f = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (f < 0 || fstat(f, &st) < 0 || st.st_size < 24)
        die("cannot open a request file");
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, f, 0);
    close(f);
    if (map == MAP_FAILED || hps_gen_req_check(map, (uint64_t)st.st_size) != 0)
        die("not a request file");
    const hps_gen_req_header_t *h = map;
    *r = (reqs_t){h->num_tables, h->batch,          h->count, (const int64_t *)((char *)map + 24),
                  map,           (size_t)st.st_size};
}

int main(int argc, char **argv)
{
    const char *model = NULL, *files[MAX_FILES];
    int nfiles = 0, device = 0;
    double duration = 1.5, warmup = 0.5;
    unsigned min_calls = 30;
    for (int i = 1; i < argc; i++) {
        bool has = i + 1 < argc;
        if (!strcmp(argv[i], "--port") && has)
            port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--model") && has)
            model = argv[++i];
        else if (!strcmp(argv[i], "--device") && has)
            device = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--duration") && has)
            duration = atof(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && has)
            warmup = atof(argv[++i]);
        else if (!strcmp(argv[i], "--min-calls") && has)
            min_calls = (unsigned)atoi(argv[++i]);
        else if (argv[i][0] != '-' && nfiles < MAX_FILES)
            files[nfiles++] = argv[i];
        else {
            fprintf(stderr, "usage: bench-cudashm --port P --model NAME [--device D] [--duration S]"
                            " [--warmup S] [--min-calls N] REQUEST_FILE...\n");
            return 2;
        }
    }
    if (!port || !model || !nfiles) {
        fprintf(stderr, "bench-cudashm: --port, --model and a request file are needed\n");
        return 2;
    }
    rbuf = malloc(rcap);
    reqs_t rq[MAX_FILES];
    size_t max_keys = 0;
    for (int f = 0; f < nfiles; f++) {
        reqs_open(files[f], &rq[f]);
        size_t n = (size_t)rq[f].T * rq[f].B;
        max_keys = n > max_keys ? n : max_keys;
    }
    /* the dimension: from the first answer (shape of OUTPUT0 / keys); the
     * region is sized for dim 1024 at the largest request, at least 64 MiB */
    size_t region = max_keys * 1024 * sizeof(float);
    CK(cudaSetDevice(device));
    char *d_region;
    size_t avail, total;
    CK(cudaMemGetInfo(&avail, &total));
    if (region > avail / 4)
        region = avail / 4;
    CK(cudaMalloc((void **)&d_region, region));
    CK(cudaMemset(d_region, 0xA5, region));
    cudaIpcMemHandle_t h;
    CK(cudaIpcGetMemHandle(&h, d_region));
    char hb64[128], json[1024];
    b64((const unsigned char *)&h, sizeof(h), hb64);
    connect_worker();
    snprintf(json, sizeof(json),
             "{\"raw_handle\":{\"b64\":\"%s\"},\"device_id\":%d,\"byte_size\":%zu}", hb64, device,
             region);
    const char *body;
    size_t blen;
    int st = post("/v2/cudasharedmemory/region/" REGION "/register", json, &body, &blen);
    if (st != 200) {
        fprintf(stderr, "bench-cudashm: register: HTTP %d: %.*s\n", st, (int)blen, body);
        return 1;
    }
    printf("bench-cudashm: region '%s' of %zu bytes on device %d registered with hps-worker on"
           " port %d; one connection, one request at a time\n",
           REGION, region, device, port);
    printf("  %-6s %6s %8s | %8s %9s %9s %9s %12s | %6s %6s %5s\n", "mode", "B", "keys", "calls",
           "p50 us", "p99 us", "mean us", "keys/s", "exact", "dflt", "wrong");
    int bad = 0;
    for (int f = 0; f < nfiles; f++) {
        uint32_t T = rq[f].T, B = rq[f].B;
        size_t per = (size_t)T * B;
        /* The request header: the output byte size from a probe with the largest window. */
        char *hdr = malloc(1024 + (size_t)T * 12);
        size_t out_bytes = region;
        char *head = malloc(2048 + (size_t)T * 12);
        int hl = 0;
        uint64_t i = 0, nlat = 0;
        size_t cap = 1 << 16;
        uint64_t *lat = malloc(cap * sizeof(uint64_t));
        double t0 = bench_now_s(), start = 0, end = 0;
        int phase = 0; /* 0 probe, 1 warm-up, 2 timed */
        for (;;) {
            if (hl == 0) {
                int jl = snprintf(hdr, 1024,
                                  "{\"inputs\":[{\"name\":\"KEYS\",\"shape\":[1,%zu],\"datatype\":"
                                  "\"INT64\",\"parameters\":{\"binary_data_size\":%zu}},{\"name\":"
                                  "\"NUMKEYS\",\"shape\":[1,%u],\"datatype\":\"INT32\",\"data\":[",
                                  per, per * 8, T);
                for (uint32_t t = 0; t < T; t++)
                    jl += snprintf(hdr + jl, 16, "%s%u", t ? "," : "", B);
                jl +=
                    snprintf(hdr + jl, 512,
                             "]}],\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":{"
                             "\"shared_memory_region\":\"" REGION "\",\"shared_memory_byte_size\":"
                             "%zu,\"shared_memory_offset\":0}}]}",
                             out_bytes);
                hl =
                    snprintf(head, 2048 + (size_t)T * 12,
                             "POST /v2/models/%s/infer HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                             "Content-Type: application/octet-stream\r\n"
                             "Inference-Header-Content-Length: %d\r\nContent-Length: %zu\r\n\r\n%s",
                             model, port, jl, (size_t)jl + per * 8, hdr);
            }
            const int64_t *keys = rq[f].keys + (i++ % rq[f].C) * per;
            struct timespec a, b;
            clock_gettime(CLOCK_MONOTONIC, &a);
            struct iovec iov[2] = {{head, (size_t)hl}, {(void *)keys, per * 8}};
            send_all(iov, 2);
            st = recv_answer(&body, &blen);
            clock_gettime(CLOCK_MONOTONIC, &b);
            if (st != 200) {
                fprintf(stderr, "bench-cudashm: B=%u: HTTP %d: %.*s\n", B, st, (int)blen, body);
                return 1;
            }
            if (phase == 0) { /* the exact window from the answer's shape */
                const char *s = strstr(body, "\"shape\"");
                s = s ? strchr(s, '[') : NULL;
                if (!s)
                    die("answer without a shape");
                out_bytes = strtoull(s + 1, NULL, 10) * sizeof(float);
                hl = 0;
                phase = 1;
                t0 = bench_now_s();
                continue;
            }
            double tb = (double)b.tv_sec + (double)b.tv_nsec * 1e-9;
            if (phase == 1) {
                if (tb - t0 >= warmup && i > 6) {
                    phase = 2;
                    start = tb;
                }
                continue;
            }
            if (nlat == cap)
                lat = realloc(lat, (cap *= 2) * sizeof(uint64_t));
            lat[nlat++] = (uint64_t)(b.tv_sec - a.tv_sec) * 1000000000ULL + (uint64_t)b.tv_nsec -
                          (uint64_t)a.tv_nsec;
            end = tb;
            if ((nlat >= min_calls && end - start >= duration) || nlat >= 2000000)
                break;
        }
        double sum = 0;
        for (uint64_t j = 0; j < nlat; j++)
            sum += (double)lat[j];
        qsort(lat, nlat, sizeof(*lat), bench_cmp_u64);
        double p50 = (double)lat[bench_rank(nlat, 0.50)] / 1e3;
        double p99 = (double)lat[bench_rank(nlat, 0.99)] / 1e3;
        double keys_s = (double)nlat * (double)per / (end - start);
        /* check the last answer (request i-1) from the region */
        uint32_t dim = (uint32_t)(out_bytes / sizeof(float) / per);
        const int64_t *keys = rq[f].keys + ((i - 1) % rq[f].C) * per;
        float *got = malloc(out_bytes), *want = malloc(dim * sizeof(float));
        CK(cudaMemcpy(got, d_region, out_bytes, cudaMemcpyDeviceToHost));
        uint64_t exact = 0, dflt = 0, wrong = 0;
        for (uint32_t t = 0; t < T; t++)
            for (uint32_t s = 0; s < B; s++) {
                const float *row = got + ((size_t)t * B + s) * dim;
                hps_gen_vector(t, keys[(size_t)t * B + s], dim, want);
                if (!memcmp(row, want, dim * sizeof(float))) {
                    exact++;
                    continue;
                }
                bool z = true;
                for (uint32_t d = 0; d < dim && z; d++)
                    z = row[d] == 0.0f;
                z ? dflt++ : wrong++;
            }
        printf("  %-6s %6u %8zu | %8" PRIu64 " %9.1f %9.1f %9.1f %12.4g | %6" PRIu64 " %6" PRIu64
               " %5" PRIu64 "\n",
               "d", B, per, nlat, p50, p99, sum / (double)nlat / 1e3, keys_s, exact, dflt, wrong);
        printf("RESULT mode=d B=%u keys=%zu calls=%" PRIu64 " p50_us=%.2f p99_us=%.2f mean_us=%.2f"
               " keys_s=%.6g exact=%" PRIu64 " default=%" PRIu64 " wrong=%" PRIu64 "\n",
               B, per, nlat, p50, p99, sum / (double)nlat / 1e3, keys_s, exact, dflt, wrong);
        fflush(stdout);
        bad |= wrong != 0;
        free(got);
        free(want);
        free(lat);
        free(hdr);
        free(head);
    }
    st = post("/v2/cudasharedmemory/region/" REGION "/unregister", "{}", &body, &blen);
    if (st != 200)
        fprintf(stderr, "bench-cudashm: unregister: HTTP %d\n", st);
    close(fd);
    CK(cudaFree(d_region));
    for (int f = 0; f < nfiles; f++)
        munmap(rq[f].map, rq[f].map_len);
    return bad;
}
