/*
 * benchutil.h -- what every benchmark prints about the machine it ran on,
 * and the helpers the bench/ programs share: a monotonic clock, fatal
 * errors that clean up first, aligned allocation, removal of a directory
 * tree, sort comparators and percentiles (header-only; bench/ programs and
 * tools/hps-bench).
 */
#ifndef HPS_BENCHUTIL_H
#define HPS_BENCHUTIL_H

#include <ftw.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* The CPU's "model name" from /proc/cpuinfo into buf (n bytes), or "unknown". */
static inline void bench_cpu_model(char *buf, size_t n)
{
    char line[512];
    FILE *f = fopen("/proc/cpuinfo", "r");
    snprintf(buf, n, "unknown");
    while (f && fgets(line, sizeof(line), f)) {
        char *c = strchr(line, ':');
        if (!strncmp(line, "model name", 10) && c) {
            c[strcspn(c, "\n")] = 0;
            snprintf(buf, n, "%s", c + 2);
            break;
        }
    }
    if (f)
        fclose(f);
}

/* The line of /proc/loadavg into buf (n bytes), or "unknown". */
static inline void bench_loadavg(char *buf, size_t n)
{
    FILE *f = fopen("/proc/loadavg", "r");
    snprintf(buf, n, "unknown");
    if (f && fgets(buf, (int)n, f))
        buf[strcspn(buf, "\n")] = 0;
    if (f)
        fclose(f);
}

/* "load average <when>: <the line of /proc/loadavg>" on stdout. */
static inline void bench_print_loadavg(const char *when)
{
    char buf[128];
    bench_loadavg(buf, sizeof(buf));
    printf("load average %s: %s\n", when, buf);
}

/* Seconds on CLOCK_MONOTONIC. */
static inline double bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* What bench_die() prints and undoes: one per program (a function-local
 * static, so a program that never sets it pays nothing). */
typedef struct bench_exit {
    const char *prog;      /* "bench-xyz", the prefix of error messages */
    void (*cleanup)(void); /* run before exit(1); may be NULL */
} bench_exit_t;

/* One per program, whichever of its files sets it: every file that
 * includes this header defines it weak, and the linker keeps one. */
__attribute__((weak)) bench_exit_t bench__exit_state = {"bench", NULL};

static inline bench_exit_t *bench__exit(void)
{
    return &bench__exit_state;
}

/* Name the program for bench_die() and register its cleanup (may be NULL). */
static inline void bench_on_error(const char *prog, void (*cleanup)(void))
{
    bench__exit()->prog = prog;
    bench__exit()->cleanup = cleanup;
}

/* "<prog>: error: <message>" on stderr, the cleanup, exit(1). */
__attribute__((format(printf, 1, 2), noreturn)) static inline void bench_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: error: ", bench__exit()->prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (bench__exit()->cleanup)
        bench__exit()->cleanup();
    exit(1);
}

/* n bytes (at least 64) aligned to 64, or bench_die(). */
static inline void *bench_xmalloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64) != 0)
        bench_die("out of memory (%zu bytes)", n);
    return p;
}

static inline int bench__rm_entry(const char *path, const struct stat *st, int flag,
                                  struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* Remove path and everything under it (symbolic links not followed);
 * nftw's result: 0 when every entry was removed. */
static inline int bench_rm_tree(const char *path)
{
    return nftw(path, bench__rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* qsort comparators, ascending. */
static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static inline int bench_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The index of the q-quantile (0 < q <= 1) in n sorted values (n > 0), by
 * the nearest-rank definition: the smallest value with at least q * n
 * values at or below it, index ceil(q * n) - 1 (p50 of 4 values is the
 * 2nd, p99 of 50 the 50th).  Every bench/ percentile is this one. */
static inline size_t bench_rank(size_t n, double q)
{
    double x = q * (double)n;
    size_t k = (size_t)x;
    if ((double)k < x)
        k++; /* ceil without libm */
    if (k > n)
        k = n;
    return k ? k - 1 : 0;
}

#endif
