/*
 * bench-dtype -- throughput of the row conversions of include/hps/dtype.h
 * (hps_dtype_encode / hps_dtype_decode) for each storage type, beside a
 * memcpy of the same fp32 bytes (the floor: no conversion can move the fp32
 * side faster than copying it).
 *
 * GB/s counts the fp32 side only (rows * dim * 4 bytes per call, 1 GB =
 * 1e9 bytes), for encode and decode alike, so the columns compare directly
 * with the memcpy column; the stored side is smaller (row bytes printed).
 * Each figure is the median of --reps timed calls over the whole buffer,
 * one thread, after one untimed warm-up call; every buffer is written
 * before timing so no call pays page faults.
 *
 * Every number printed is measured by this run.
 */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_vcs.h"
#include "bench/benchutil.h"
#include "hps/dtype.h"
#include "hps/hps.h"

#define MAX_REPS 64

typedef struct options {
    uint64_t rows;
    uint32_t dim;
    unsigned reps;
} options_t;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bench-dtype [--rows N] [--dim D] [--reps R] [--quick]\n"
            "  --rows N   rows per call (default 1000000)\n"
            "  --dim D    floats per row (default 128)\n"
            "  --reps R   timed calls per figure, median printed (default 7, at most %d)\n"
            "  --quick    10000 rows, 3 reps (a smoke test)\n",
            MAX_REPS);
}

static void parse_args(int argc, char **argv, options_t *o)
{
    *o = (options_t){.rows = 1000000, .dim = 128, .reps = 7};
    for (int i = 1; i < argc; i++) {
        int64_t v;
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--quick")) {
            o->rows = 10000;
            o->reps = 3;
        } else if (!strcmp(a, "--rows") && hps_parse_int(next, 1, INT64_C(1) << 32, &v)) {
            o->rows = (uint64_t)v;
            i++;
        } else if (!strcmp(a, "--dim") && hps_parse_int(next, 1, 65536, &v)) {
            o->dim = (uint32_t)v;
            i++;
        } else if (!strcmp(a, "--reps") && hps_parse_int(next, 1, MAX_REPS, &v)) {
            o->reps = (unsigned)v;
            i++;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else {
            usage(stderr);
            bench_die("bad argument '%s'%s", a, next ? "" : " (or missing value)");
        }
    }
}

/* What one timed operation does; the context holds the buffers. */
typedef struct ctx {
    const options_t *o;
    float *src;   /* (rows, dim) fp32 input */
    void *stored; /* (rows, row_bytes) */
    float *out;   /* (rows, dim) fp32 output */
    hps_dtype_t dt;
} ctx_t;

typedef void (*op_fn)(ctx_t *c);

static void op_memcpy(ctx_t *c)
{
    memcpy(c->out, c->src, c->o->rows * c->o->dim * sizeof(float));
}

static void op_encode(ctx_t *c)
{
    hps_err_t rc = hps_dtype_encode(c->dt, c->o->dim, c->o->rows, c->src, c->stored);
    if (rc != 0)
        bench_die("hps_dtype_encode(%s): %s", hps_dtype_name(c->dt), hps_strerror(rc));
}

static void op_decode(ctx_t *c)
{
    hps_err_t rc = hps_dtype_decode(c->dt, c->o->dim, c->o->rows, c->stored, c->out);
    if (rc != 0)
        bench_die("hps_dtype_decode(%s): %s", hps_dtype_name(c->dt), hps_strerror(rc));
}

/* Median GB/s (fp32 bytes) of reps calls of op, after one warm-up call. */
static double measure(ctx_t *c, op_fn op)
{
    double gb = (double)c->o->rows * c->o->dim * sizeof(float) / 1e9, rate[MAX_REPS];
    op(c);
    for (unsigned r = 0; r < c->o->reps; r++) {
        double t0 = bench_now_s();
        op(c);
        rate[r] = gb / (bench_now_s() - t0);
    }
    qsort(rate, c->o->reps, sizeof(double), bench_cmp_double);
    return rate[c->o->reps / 2];
}

/* Largest |src - out| relative to the largest |src| of the buffer: a check
 * that the timed calls did the work (and a number to eyeball). */
static double max_rel_error(const ctx_t *c)
{
    double err = 0, amax = 0;
    size_t count = c->o->rows * c->o->dim;
    for (size_t i = 0; i < count; i++) {
        err = fmax(err, fabs((double)c->src[i] - (double)c->out[i]));
        amax = fmax(amax, fabs((double)c->src[i]));
    }
    return amax > 0 ? err / amax : err;
}

int main(int argc, char **argv)
{
    options_t o;
    char cpu[256], load[256];

    bench_on_error("bench-dtype", NULL);
    parse_args(argc, argv, &o);
    size_t count = o.rows * o.dim;
    ctx_t c = {.o = &o,
               .src = bench_xmalloc(count * sizeof(float)),
               .stored = bench_xmalloc(hps_dtype_row_bytes(HPS_DTYPE_FP32, o.dim) * o.rows),
               .out = bench_xmalloc(count * sizeof(float))};

    /* Embedding-like values: roughly N(0, 0.05) from a fixed generator. */
    uint64_t s = 0x0dd7e5eedULL;
    for (size_t i = 0; i < count; i++) {
        double sum = 0;
        for (int k = 0; k < 4; k++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            sum += (double)(s >> 11) * 0x1p-53;
        }
        c.src[i] = (float)((sum - 2.0) * 0.05 * 1.7320508);
    }
    memset(c.stored, 0, hps_dtype_row_bytes(HPS_DTYPE_FP32, o.dim) * o.rows);
    memset(c.out, 0, count * sizeof(float));

    bench_cpu_model(cpu, sizeof(cpu));
    bench_loadavg(load, sizeof(load));
    printf("bench-dtype (hps %s, built from git %s): row conversions vs memcpy\n", hps_version(),
           BENCH_VCS);
    printf("machine: nproc %ld, CPU %s\n", sysconf(_SC_NPROCESSORS_ONLN), cpu);
    printf("loadavg at start: %s\n", load);
    printf("rows %" PRIu64 ", dim %u, fp32 side %.1f MB per call, one thread, median of %u\n\n",
           o.rows, o.dim, (double)count * 4 / 1e6, o.reps);

    double floor_gbs = measure(&c, op_memcpy);
    printf("%-6s %9s %13s %13s %15s %15s %12s\n", "type", "row bytes", "encode GB/s", "decode GB/s",
           "encode/memcpy", "decode/memcpy", "max rel err");
    printf("%-6s %9zu %13.2f %13.2f %15s %15s %12s\n", "memcpy",
           hps_dtype_row_bytes(HPS_DTYPE_FP32, o.dim), floor_gbs, floor_gbs, "1.00", "1.00", "-");
    for (int d = 0; d < HPS_DTYPE_COUNT; d++) {
        c.dt = (hps_dtype_t)d;
        double enc = measure(&c, op_encode);
        double dec = measure(&c, op_decode);
        printf("%-6s %9zu %13.2f %13.2f %15.2f %15.2f %12.3g\n", hps_dtype_name(c.dt),
               hps_dtype_row_bytes(c.dt, o.dim), enc, dec, enc / floor_gbs, dec / floor_gbs,
               max_rel_error(&c));
    }
    bench_loadavg(load, sizeof(load));
    printf("\nloadavg at end: %s\n", load);
    free(c.src);
    free(c.stored);
    free(c.out);
    return 0;
}
