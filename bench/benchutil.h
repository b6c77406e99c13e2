/*
 * benchutil.h -- what every benchmark prints about the machine it ran on,
 * and the helpers the bench/ programs share: a monotonic clock, fatal
 * errors that clean up first, aligned allocation (header-only; bench/
 * programs and tools/hps-bench).
 */
#ifndef HPS_BENCHUTIL_H
#define HPS_BENCHUTIL_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

#endif
