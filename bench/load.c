/*
 * bench-load -- model loading speed of hps-coordinator (HugeCTR sparse files
 * into the persistent DB, RocksDB, and the shared-memory volatile DB)
 * against the speed of merely reading the same files.
 *
 *   1. hps-gen writes a model (criteo-1tb shape at --scale, --dim floats).
 *   2. Cold load: the files are fsync'ed and dropped from the page cache
 *      with posix_fadvise(POSIX_FADV_DONTNEED) (no root needed; mincore()
 *      reports how much stayed resident), then hps-coordinator starts on a
 *      fresh RocksDB directory and segment.  Its log lines give the time of
 *      the model load (both DBs, filled in one pass over the files on the
 *      coordinator's loader threads), of that pass, and of the persistent-
 *      and volatile-DB steps summed over the threads; this program also
 *      times exec -> "ready:" line.  Then SIGTERM, and its exit status is
 *      checked.
 *   3. Warm load: the same again with the files in the page cache.
 *   4. Floors, read by this program in 4 MiB read() calls:
 *        disk floor        O_DIRECT (bypasses the page cache), files
 *                          evicted first;
 *        page-cache floor  plain read() of the cached files.
 *   5. What this machine charges for the first write to fresh shared
 *      memory, which a load makes to every page of its segment: a new shm
 *      object written once through a mapping (its pages mapped first with
 *      MADV_POPULATE_WRITE, as the segment's are) and once more, and another
 *      written with pwrite() (how the volatile DB's large upserts write their
 *      rows, shmdb/ops.c), in seconds per GB.  On a VM whose hypervisor
 *      shadows the guest's page tables the first write through a mapping
 *      traps once per page.
 *
 * MB = 10^6 bytes of key + vector files (what the coordinator ingests).
 * Every number printed is measured by this run.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_vcs.h"
#include "bench/benchutil.h"
#include "hps/hps.h"

#define MAX_FILES       1024
#define READ_CHUNK      (4u << 20)
#define READY_TIMEOUT_S 600.0

typedef struct options {
    double scale;
    unsigned dim;
    const char *gen, *coordinator, *dir;
    bool keep, quick;
} options_t;

static options_t g_opt;
static char g_work[PATH_MAX], g_seg[64];
static pid_t g_child;
static char *g_files[MAX_FILES];
static size_t g_nfiles;
static uint64_t g_bytes;

static void cleanup(void)
{
    char shm[128];
    if (g_child > 0) {
        kill(g_child, SIGKILL);
        waitpid(g_child, NULL, 0);
        g_child = 0;
    }
    if (g_seg[0]) {
        snprintf(shm, sizeof(shm), "/dev/shm/hps.%s", g_seg);
        unlink(shm);
    }
    if (g_work[0] && !g_opt.keep)
        bench_rm_tree(g_work);
    g_work[0] = 0;
}

static void on_signal(int sig)
{
    if (g_child > 0)
        kill(g_child, SIGKILL);
    _exit(128 + sig);
}

/* ------------------------------------------------------------------------ */
/* Model files                                                               */
/* ------------------------------------------------------------------------ */

static int collect(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    const char *base = path + ftw->base;
    if (flag == FTW_F && (!strcmp(base, "key") || !strcmp(base, "emb_vector"))) {
        if (g_nfiles == MAX_FILES)
            bench_die("more than %d model files", MAX_FILES);
        g_files[g_nfiles] = strdup(path);
        if (!g_files[g_nfiles++])
            bench_die("out of memory");
        g_bytes += (uint64_t)st->st_size;
    }
    return 0;
}

/* fsync and drop every model file from the page cache; returns the resident
 * fraction measured with mincore() afterwards. */
static double evict(void)
{
    uint64_t pages = 0, resident = 0;
    long psz = sysconf(_SC_PAGESIZE);
    for (size_t i = 0; i < g_nfiles; i++) {
        int fd = open(g_files[i], O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0)
            bench_die("%s: %s", g_files[i], strerror(errno));
        fdatasync(fd);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        size_t len = (size_t)st.st_size;
        if (len) {
            void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
            size_t np = (len + (size_t)psz - 1) / (size_t)psz;
            unsigned char *vec = malloc(np);
            if (m != MAP_FAILED && vec && mincore(m, len, vec) == 0)
                for (size_t p = 0; p < np; p++)
                    resident += vec[p] & 1;
            pages += np;
            free(vec);
            if (m != MAP_FAILED)
                munmap(m, len);
        }
        close(fd);
    }
    return pages ? (double)resident / (double)pages : 0;
}

/* Read every model file in READ_CHUNK pieces; returns seconds or < 0. */
static double read_all(bool direct, bool *ret_direct_ok)
{
    void *buf = NULL;
    if (posix_memalign(&buf, 4096, READ_CHUNK) != 0)
        bench_die("out of memory");
    uint64_t total = 0;
    double t0 = bench_now_s();
    *ret_direct_ok = direct;
    for (size_t i = 0; i < g_nfiles; i++) {
        int fd = open(g_files[i], O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
        if (fd < 0 && direct && errno == EINVAL) { /* filesystem without O_DIRECT */
            *ret_direct_ok = false;
            fd = open(g_files[i], O_RDONLY | O_CLOEXEC);
        }
        if (fd < 0)
            bench_die("%s: %s", g_files[i], strerror(errno));
        for (;;) {
            ssize_t r = read(fd, buf, READ_CHUNK);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0)
                bench_die("read %s: %s", g_files[i], strerror(errno));
            if (r == 0)
                break;
            total += (uint64_t)r;
        }
        close(fd);
    }
    double dt = bench_now_s() - t0;
    free(buf);
    if (total != g_bytes)
        bench_die("read %" PRIu64 " bytes, expected %" PRIu64, total, g_bytes);
    return dt;
}

/* ------------------------------------------------------------------------ */
/* Processes                                                                 */
/* ------------------------------------------------------------------------ */

/* Run argv to completion with output to stdout; die unless it exits 0. */
static void run(char *const argv[])
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        bench_die("fork: %s", strerror(errno));
    if (pid == 0) {
        execv(argv[0], argv);
        fprintf(stderr, "bench-load: exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        bench_die("%s failed (status %#x)", argv[0], st);
}

typedef struct load_result {
    double pdb_s, vdb_s, vdb_mbps, ready_s, load_s, create_s, pass_s, check_s;
    uint64_t vdb_rows;
    bool have_pdb, have_vdb, have_load, have_check;
    int exit_status;
    char log[16384];
    size_t loglen;
} load_result_t;

static void parse_line(const char *line, load_result_t *r)
{
    const char *p;
    unsigned long long rows;
    double rate, s, mbps;
    if ((p = strstr(line, " tables ingested into the persistent DB in ")) &&
        sscanf(p, " tables ingested into the persistent DB in %lf", &s) == 1)
        r->pdb_s += s, r->have_pdb = true;
    if ((p = strstr(line, " rows (initial_cache_rate ")) != NULL) {
        const char *q = p;
        while (q > line && q[-1] >= '0' && q[-1] <= '9')
            q--;
        if (sscanf(q, "%llu rows (initial_cache_rate %lf) into the volatile DB in %lf s, %lf MB/s",
                   &rows, &rate, &s, &mbps) == 4)
            r->vdb_rows += rows, r->vdb_s += s, r->vdb_mbps = mbps, r->have_vdb = true;
    }
    if ((p = strstr(line, "contents checked in ")) && sscanf(p, "contents checked in %lf", &s) == 1)
        r->check_s += s, r->have_check = true;
    /* "model M version V: loaded in T s; tables created in C s, one pass over X MB of
     * its files by N threads in P s (...)" */
    double create, pass, mb;
    unsigned threads;
    if ((p = strstr(line, ": loaded in ")) &&
        sscanf(p,
               ": loaded in %lf s; tables created in %lf s, one pass over %lf MB of its files "
               "by %u threads in %lf s",
               &s, &create, &mb, &threads, &pass) == 5)
        r->load_s += s, r->create_s += create, r->pass_s += pass, r->have_load = true;
    /* "... tables created in C s, no model file read (...)": all from RocksDB */
    else if (p && strstr(p, ", no model file read") &&
             sscanf(p, ": loaded in %lf s; tables created in %lf s", &s, &create) == 2)
        r->load_s += s, r->create_s += create, r->have_load = true;
}

/* Start the coordinator, read its log until "ready:", stop it. */
static void coordinator_load(const char *ini, load_result_t *r)
{
    int pfd[2];
    memset(r, 0, sizeof(*r));
    if (pipe2(pfd, O_CLOEXEC) < 0)
        bench_die("pipe: %s", strerror(errno));
    double t0 = bench_now_s();
    pid_t pid = fork();
    if (pid < 0)
        bench_die("fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(pfd[1], 1);
        dup2(pfd[1], 2);
        execl(g_opt.coordinator, g_opt.coordinator, "-c", ini, (char *)NULL);
        fprintf(stderr, "exec %s: %s\n", g_opt.coordinator, strerror(errno));
        _exit(127);
    }
    g_child = pid;
    close(pfd[1]);
    char line[4096];
    size_t ll = 0;
    bool ready = false, eof = false;
    while (!ready && !eof) {
        struct pollfd pf = {pfd[0], POLLIN, 0};
        double left = READY_TIMEOUT_S - (bench_now_s() - t0);
        if (left <= 0)
            bench_die("hps-coordinator not ready after %.0f s", READY_TIMEOUT_S);
        if (poll(&pf, 1, (int)(left * 1000) + 1) <= 0)
            continue;
        char c;
        ssize_t k = read(pfd[0], &c, 1); /* a byte at a time: log volume is tiny */
        if (k <= 0) {
            eof = k == 0 || errno != EINTR;
            continue;
        }
        if (r->loglen + 1 < sizeof(r->log))
            r->log[r->loglen++] = c;
        if (c != '\n' && ll + 1 < sizeof(line)) {
            line[ll++] = c;
            continue;
        }
        line[ll] = 0;
        ll = 0;
        parse_line(line, r);
        if (strstr(line, "ready:"))
            ready = true, r->ready_s = bench_now_s() - t0;
    }
    if (!ready) {
        r->log[r->loglen] = 0;
        bench_die("hps-coordinator exited before \"ready:\"; its output:\n%s", r->log);
    }
    kill(pid, SIGTERM);
    for (;;) { /* collect the shutdown lines */
        ssize_t k = read(pfd[0], r->log + r->loglen, sizeof(r->log) - 1 - r->loglen);
        if (k <= 0 && !(k < 0 && errno == EINTR))
            break;
        if (k > 0)
            r->loglen += (size_t)k;
    }
    r->log[r->loglen] = 0;
    close(pfd[0]);
    int st;
    waitpid(pid, &st, 0);
    g_child = 0;
    r->exit_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ------------------------------------------------------------------------ */
/* Report                                                                    */
/* ------------------------------------------------------------------------ */

static void print_log(const char *what, const load_result_t *r)
{
    printf("  hps-coordinator log (%s):\n", what);
    const char *p = r->log;
    while (*p) {
        size_t k = strcspn(p, "\n");
        printf("    %.*s\n", (int)k, p);
        p += k + (p[k] == '\n');
    }
}

static double mbps(double s)
{
    return s > 0 ? (double)g_bytes / s / 1e6 : 0;
}

static void row(const char *what, double s, double disk_s, double cache_s)
{
    printf("  %-44s %8.3f %9.1f %9.3fx %9.3fx\n", what, s, mbps(s), disk_s / s, cache_s / s);
}

static void print_load_rows(const char *tag, const load_result_t *r, double disk_s, double cache_s)
{
    char what[96];
    snprintf(what, sizeof(what), "%s: persistent DB (log, thread-s)", tag);
    if (r->have_pdb)
        row(what, r->pdb_s, disk_s, cache_s);
    snprintf(what, sizeof(what), "%s: volatile DB (log, thread-s)", tag);
    if (r->have_vdb)
        row(what, r->vdb_s, disk_s, cache_s);
    snprintf(what, sizeof(what), "%s: one pass, both DBs (log)", tag);
    if (r->have_load)
        row(what, r->pass_s, disk_s, cache_s);
    snprintf(what, sizeof(what), "%s: contents check (log)", tag);
    if (r->have_check)
        row(what, r->check_s, disk_s, cache_s);
    snprintf(what, sizeof(what), "%s: volatile DB tables created (log)", tag);
    if (r->have_load)
        row(what, r->create_s, disk_s, cache_s);
    snprintf(what, sizeof(what), "%s: model load, both DBs (log)", tag);
    if (r->have_load)
        row(what, r->load_s, disk_s, cache_s);
    snprintf(what, sizeof(what), "%s: exec -> \"ready:\" (measured here)", tag);
    row(what, r->ready_s, disk_s, cache_s);
}

/* ------------------------------------------------------------------------ */
/* Main                                                                      */
/* ------------------------------------------------------------------------ */

#define TOUCH_CHUNK (64u << 10)

/* Seconds to write size bytes of a fresh shm object in TOUCH_CHUNK pieces:
 * through a mapping whose pages MADV_POPULATE_WRITE mapped first (twice:
 * *ret_again times the second pass), or with pwrite() (ret_again NULL). */
static double first_write(size_t size, double *ret_again)
{
    char name[64];
    snprintf(name, sizeof(name), "/bench-load-touch-%d", (int)getpid());
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        bench_die("shm_open %s: %s", name, strerror(errno));
    shm_unlink(name); /* the descriptor keeps it until close */
    if (ftruncate(fd, (off_t)size) != 0 || posix_fallocate(fd, 0, (off_t)size) != 0)
        bench_die("cannot size a %zu-byte shm object: %s", size, strerror(errno));
    static char src[TOUCH_CHUNK];
    memset(src, 0x5a, sizeof(src));
    double t0, s;
    if (ret_again) {
        char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED)
            bench_die("mmap: %s", strerror(errno));
        (void)madvise(p, size, 23 /* MADV_POPULATE_WRITE, Linux >= 5.14 */);
        t0 = bench_now_s();
        for (size_t off = 0; off < size; off += TOUCH_CHUNK)
            memcpy(p + off, src, TOUCH_CHUNK);
        s = bench_now_s() - t0;
        t0 = bench_now_s();
        for (size_t off = 0; off < size; off += TOUCH_CHUNK)
            memcpy(p + off, src, TOUCH_CHUNK);
        *ret_again = bench_now_s() - t0;
        munmap(p, size);
    } else {
        t0 = bench_now_s();
        for (size_t off = 0; off < size; off += TOUCH_CHUNK)
            if (pwrite(fd, src, TOUCH_CHUNK, (off_t)off) != (ssize_t)TOUCH_CHUNK)
                bench_die("pwrite: %s", strerror(errno));
        s = bench_now_s() - t0;
    }
    close(fd);
    return s;
}

static void print_first_write(void)
{
    size_t size = g_opt.quick ? 16u << 20 : 256u << 20;
    double again, mapped = first_write(size, &again), written = first_write(size, NULL);
    double gb = (double)size / 1e9;
    printf("\n-- fresh shared memory, %zu MiB objects (first write, seconds per GB): through a"
           " mapping after MADV_POPULATE_WRITE %.3f (again: %.3f); with pwrite() %.3f, %.1fx"
           " faster (over 2x: the volatile DB's large upserts write rows this way, shmdb/ops.c)\n",
           size >> 20, mapped / gb, again / gb, written / gb, mapped / written);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench-load [--quick] [--scale F] [--dim D] [--dir DIR] [--keep]\n"
               "                  [--gen PATH] [--coordinator PATH]\n"
               "  --scale        criteo-1tb shape scale (default 0.01: 1.88 M rows)\n"
               "  --dim          floats per vector (default 128)\n"
               "  --dir          parent of the work directory (default $TMPDIR or /tmp)\n"
               "  --keep         keep the work directory\n"
               "  --gen, --coordinator  the executables (default: beside this build)\n"
               "  --quick        smoke test: scale 0.0005\n");
}

/* <build>/bench/bench-load -> <build>/<rel> */
static char *beside(const char *rel)
{
    char self[PATH_MAX], *out;
    ssize_t k = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (k <= 0)
        bench_die("readlink /proc/self/exe: %s", strerror(errno));
    self[k] = 0;
    for (int up = 0; up < 2; up++) {
        char *s = strrchr(self, '/');
        if (s)
            *s = 0;
    }
    if (asprintf(&out, "%s/%s", self, rel) < 0)
        bench_die("out of memory");
    return out;
}

static void parse(int argc, char **argv)
{
    g_opt = (options_t){.scale = 0.01, .dim = 128};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = strcmp(a, "--quick") && strcmp(a, "--keep") && strcmp(a, "--help");
        if (takes && !v) {
            usage(stderr);
            exit(2);
        }
        if (!strcmp(a, "--quick"))
            g_opt.quick = true, g_opt.scale = 0.0005;
        else if (!strcmp(a, "--keep"))
            g_opt.keep = true;
        else if (!strcmp(a, "--scale"))
            g_opt.scale = atof(v);
        else if (!strcmp(a, "--dim"))
            g_opt.dim = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--dir"))
            g_opt.dir = v;
        else if (!strcmp(a, "--gen"))
            g_opt.gen = v;
        else if (!strcmp(a, "--coordinator"))
            g_opt.coordinator = v;
        else {
            usage(!strcmp(a, "--help") ? stdout : stderr);
            exit(!strcmp(a, "--help") ? 0 : 2);
        }
        i += takes;
    }
    if (!(g_opt.scale > 0) || g_opt.dim < 1)
        bench_die("bad --scale or --dim");
    if (!g_opt.gen)
        g_opt.gen = beside("tools/hps-gen/hps-gen");
    if (!g_opt.coordinator)
        g_opt.coordinator = beside("coordinator/hps-coordinator");
}

int main(int argc, char **argv)
{
    char cpu[256], model[PATH_MAX + 16], ini[PATH_MAX + 64], scale[32], dim[16];
    bench_on_error("bench-load", cleanup);
    parse(argc, argv);
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    const char *parent = g_opt.dir ? g_opt.dir : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(g_work, sizeof(g_work), "%s/bench-load.XXXXXX", parent);
    if (!mkdtemp(g_work))
        bench_die("mkdtemp(%s): %s", g_work, strerror(errno));
    atexit(cleanup);
    snprintf(g_seg, sizeof(g_seg), "bench-load-%d", (int)getpid());
    snprintf(model, sizeof(model), "%s/model", g_work);
    snprintf(scale, sizeof(scale), "%g", g_opt.scale);
    snprintf(dim, sizeof(dim), "%u", g_opt.dim);

    bench_cpu_model(cpu, sizeof(cpu));
    printf("bench-load (hps %s, built from git %s): hps-coordinator model loading vs reading"
           " the files\n",
           hps_version(), BENCH_VCS);
    printf("machine: nproc %ld, CPU %s\n", sysconf(_SC_NPROCESSORS_ONLN), cpu);
    bench_print_loadavg("at start");
    printf("work directory: %s\n", g_work);
    printf("\n-- hps-gen model --shape criteo-1tb --scale %s --dim %s\n", scale, dim);
    char *gen_argv[] = {(char *)g_opt.gen, "model",      "--out",   model, "--model", "load",
                        "--shape",         "criteo-1tb", "--scale", scale, "--dim",   dim,
                        "--segment",       g_seg,        "--force", NULL};
    run(gen_argv);
    snprintf(ini, sizeof(ini), "%s/load.ini", model);
    nftw(model, collect, 16, FTW_PHYS);
    printf("model files: %zu (key + emb_vector per table), %" PRIu64 " bytes = %.1f MB\n", g_nfiles,
           g_bytes, (double)g_bytes / 1e6);

    /* Cold: evict, then load. */
    char rdb[PATH_MAX + 32];
    snprintf(rdb, sizeof(rdb), "%s/rocksdb", model);
    load_result_t cold, warm;
    double res_cold = evict();
    printf("\n-- cold load: files evicted from the page cache (resident afterwards: %.1f%%)\n",
           res_cold * 100);
    coordinator_load(ini, &cold);
    print_log("cold", &cold);
    /* Warm: fresh RocksDB directory, files now cached. */
    bench_rm_tree(rdb);
    printf("\n-- warm load: fresh RocksDB directory, files in the page cache\n");
    coordinator_load(ini, &warm);
    print_log("warm", &warm);
    if (!g_opt.keep) /* --keep leaves the warm load's RocksDB for inspection */
        bench_rm_tree(rdb);

    /* Floors. */
    bool direct_ok, dummy;
    double res_floor = evict();
    double disk_s = read_all(true, &direct_ok);
    read_all(false, &dummy); /* bring the files into the cache */
    double cache_s = read_all(false, &dummy);
    printf("\n-- floors: files evicted (resident afterwards: %.1f%%), then read with %s;"
           " then read twice with plain read(), the second time timed\n",
           res_floor * 100, direct_ok ? "O_DIRECT" : "plain read() (O_DIRECT unsupported here)");

    printf("\n== load throughput (MB = 10^6 bytes of key + vector files, %.1f MB) ==\n",
           (double)g_bytes / 1e6);
    printf("  %-44s %8s %9s %10s %10s\n", "", "seconds", "MB/s", "vs disk", "vs cache");
    printf("  %-44s %8.3f %9.1f %9.3fx %9.3fx\n",
           direct_ok ? "disk floor: O_DIRECT read of the files"
                     : "disk floor: read() after eviction",
           disk_s, mbps(disk_s), 1.0, cache_s / disk_s);
    printf("  %-44s %8.3f %9.1f %9.3fx %9.3fx\n", "page-cache floor: read() of cached files",
           cache_s, mbps(cache_s), disk_s / cache_s, 1.0);
    print_load_rows("cold", &cold, disk_s, cache_s);
    print_load_rows("warm", &warm, disk_s, cache_s);
    printf("  vs disk / vs cache = floor seconds / these seconds: the share of the floor's"
           " speed reached (1.0x = as fast as just reading the files); thread-s: seconds"
           " summed over the loader threads, which run both DBs in one pass\n");
    print_first_write();
    printf("\n  cold start to ready: %.3f s = %.3fx the O_DIRECT floor (%.3f s) of the same"
           " files, this run\n",
           cold.ready_s, disk_s / cold.ready_s, disk_s);
    int bad = 0;
    if (!cold.have_pdb || !cold.have_vdb || !warm.have_pdb || !warm.have_vdb || !cold.have_load ||
        !warm.have_load) {
        printf("  ERROR: an \"ingested into the persistent DB\", \"into the volatile DB\" or"
               " \"loaded in\" log line was missing\n");
        bad++;
    }
    if (cold.exit_status || warm.exit_status) {
        printf("  ERROR: hps-coordinator exit status after SIGTERM: cold %d, warm %d\n",
               cold.exit_status, warm.exit_status);
        bad++;
    }
    printf("\n");
    bench_print_loadavg("at end");
    printf("overall: %d failure(s)\n", bad);
    for (size_t i = 0; i < g_nfiles; i++)
        free(g_files[i]);
    return bad ? 1 : 0;
}
