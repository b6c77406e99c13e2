/*
 * benchutil.h -- what every benchmark prints about the machine it ran on
 * (header-only; bench/ programs and tools/hps-bench).
 */
#ifndef HPS_BENCHUTIL_H
#define HPS_BENCHUTIL_H

#include <stdio.h>
#include <string.h>

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

#endif
