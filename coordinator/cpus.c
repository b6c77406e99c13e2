/*
 * cpus.c -- the CPUs of the coordinator's threads while workers serve from
 * a segment and it loads ([hps] load_cpu_share; issue 20: loading never
 * disturbs what is serving).
 *
 * Why confinement.  On 2 CPUs the serving model's p99 during a 1 GB load
 * was 2.7x-3.7x its idle p99 (bench/load_serving.py), and neither a lower
 * priority (nice 10: 2.92x), a duty cycle for the loader thread (sleeping
 * as long as each step ran: 3.32x against 2.81x in the same pair), nor one
 * loader thread brought it down, while a process doing the kernel's side
 * of the same load (reading the files, filling as much fresh shared
 * memory, writing and syncing as much to disk: --mode hog) left p99 at
 * 0.83x-0.93x.  What the coordinator adds is threads (loader, RocksDB's,
 * heartbeat) that the scheduler moves onto the CPU where a worker's
 * request is about to run.  Confined to one of the 2 CPUs (taskset), p99
 * during the load measured 1.06x-1.20x, the load 10-15% longer.
 *
 * Not a lower scheduling class either: SCHED_IDLE on every coordinator
 * thread for the load (chrt -i -a, on top of this confinement) measured
 * p99 1.38x and 1.59x of idle against 1.14x and 1.18x with the
 * confinement alone (alternating, 2 pairs), and the load took 12.5 s and
 * 22.5 s against 10.9 s and 10.3 s.  And an unprivileged thread cannot
 * leave SCHED_IDLE again (sched(7): it needs RLIMIT_NICE), so the threads
 * that answer the workers' misses would stay there after the load.
 *
 * Threads: the mask is set on every thread listed in /proc/self/task, and
 * threads started later inherit their creator's, so it covers RocksDB's
 * background threads as well.  execve keeps the calling thread's mask:
 * main.c restores it before executing itself again.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "hps/log.h"

/* Set mask on every thread of the process; how many refused it. */
static int set_all(const cpu_set_t *mask)
{
    DIR *d = opendir("/proc/self/task");
    int bad = 0;
    if (!d)
        return sched_setaffinity(0, sizeof(*mask), mask) != 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char *end;
        long tid = strtol(e->d_name, &end, 10);
        if (*end == '\0' && tid > 0)
            bad += sched_setaffinity((pid_t)tid, sizeof(*mask), mask) != 0;
    }
    closedir(d);
    return bad;
}

/* "0-3,8" of mask into buf. */
static void cpu_list(const cpu_set_t *mask, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < CPU_SETSIZE && o + 24 < len; i++) {
        if (!CPU_ISSET(i, mask) || (i > 0 && CPU_ISSET(i - 1, mask)))
            continue;
        int j = i;
        while (j + 1 < CPU_SETSIZE && CPU_ISSET(j + 1, mask))
            j++;
        o += (size_t)snprintf(buf + o, len - o, j > i ? "%s%d-%d" : "%s%d", o ? "," : "", i, j);
    }
}

void coord_cpus_confine(coord_t *c)
{
    double share = c->conf->hps.load_cpu_share;
    if (c->cpus_confined || share >= 1.0 ||
        sched_getaffinity(0, sizeof(c->cpus_all), &c->cpus_all) != 0)
        return;
    int n = CPU_COUNT(&c->cpus_all), k = (int)(n * share);
    k = k < 1 ? 1 : k;
    if (k >= n)
        return;
    cpu_set_t part;
    CPU_ZERO(&part);
    for (int i = CPU_SETSIZE - 1, left = k; i >= 0 && left > 0; i--)
        if (CPU_ISSET(i, &c->cpus_all)) {
            CPU_SET(i, &part);
            left--;
        }
    int bad = set_all(&part);
    c->cpus_confined = true;
    char all[256], some[256];
    cpu_list(&c->cpus_all, all, sizeof(all));
    cpu_list(&part, some, sizeof(some));
    HPS_INFO("loading beside a serving segment: this process runs on CPUs %s of %s "
             "(load_cpu_share %g)%s",
             some, all, share, bad ? "; some threads refused" : "");
}

void coord_cpus_restore(coord_t *c)
{
    if (!c->cpus_confined)
        return;
    c->cpus_confined = false;
    int bad = set_all(&c->cpus_all);
    char all[256];
    cpu_list(&c->cpus_all, all, sizeof(all));
    HPS_INFO("loaded: this process runs on CPUs %s again%s", all,
             bad ? " (some threads refused)" : "");
}
