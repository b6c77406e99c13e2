/* log.c -- one-line, leveled logging to stderr for the executables and libhps. */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "hps/log.h"

/* Process-wide, set once at start (house style item 16); atomic, since a
 * library client (hps_log_default_level) may set it while threads log. */
static _Atomic int g_level = HPS_LOG_INFO;
static _Atomic bool g_level_chosen; /* hps_log_init ran: an executable chose the level */
static char g_prog[64] = "hps";

/* hps_log_capture(): the calling thread's buffer for its next ERROR. */
static _Thread_local char *t_cap;
static _Thread_local size_t t_cap_len;

void hps_log_capture(char *buf, size_t len)
{
    t_cap = buf && len ? buf : NULL;
    t_cap_len = len;
    if (t_cap)
        t_cap[0] = 0;
}

void hps_log_init(const char *prog, hps_log_level_t level)
{
    snprintf(g_prog, sizeof(g_prog), "%s", prog);
    atomic_store_explicit(&g_level, (int)level, memory_order_relaxed);
    atomic_store_explicit(&g_level_chosen, true, memory_order_relaxed);
}

void hps_log_default_level(hps_log_level_t level)
{
    if (!atomic_load_explicit(&g_level_chosen, memory_order_relaxed))
        atomic_store_explicit(&g_level, (int)level, memory_order_relaxed);
}

hps_log_level_t hps_log_level(void)
{
    return (hps_log_level_t)atomic_load_explicit(&g_level, memory_order_relaxed);
}

void hps_log(hps_log_level_t level, const char *fmt, ...)
{
    static const char *names[] = {"ERROR", "WARN ", "INFO ", "DEBUG"};
    if ((int)level > atomic_load_explicit(&g_level, memory_order_relaxed))
        return;
    char line[HPS_LOG_LINE_MAX], ts[32];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
    int n = snprintf(line, sizeof(line), "%s.%03ldZ %s[%d] %s ", ts, (long)(tv.tv_usec / 1000),
                     g_prog, (int)getpid(), names[level]);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof(line))
        vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    if (level == HPS_LOG_ERROR && t_cap && n > 0 && (size_t)n < sizeof(line)) {
        snprintf(t_cap, t_cap_len, "%s", line + n);
        t_cap = NULL; /* the first one only */
    }
    size_t len = strnlen(line, sizeof(line) - 2);
    line[len] = '\n';
    fwrite(line, 1, len + 1, stderr);
}
