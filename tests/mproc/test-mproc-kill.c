/*
 * test-mproc-kill.c -- SIGKILL a writer mid-write, 200 times, while readers
 * read; the next writer repairs and writes on.
 *
 * One table: dim 64, 8-byte keys, 4 partitions, 2048 keys, overflow_margin
 * 400 rows per partition (evict_oldest, target 0.75), so the writer is also
 * killed in the middle of evictions.  Rows are self-checking (rowcheck.h).
 *
 * Round r (HPS_TEST_KILL_ROUNDS, default 200):
 *  1. fork a writer; it attaches, upserts one probe key into every partition
 *     (taking every partition lock: the EOWNERDEAD repair path when the last
 *     writer died holding it), looks the probes up, then tells the parent
 *     "ready" and upserts/erases random batches until killed;
 *  2. even rounds: a checker process (fresh attach) runs hps_shmdb_check
 *     while the writer runs (after the writer's repair);
 *  3. the parent sleeps a random 0..5 ms and SIGKILLs the writer;
 *  4. odd rounds: the checker runs now, before the next writer (so check()
 *     does the repair); it also iterates the table and verifies every row;
 *  5. every 40th round and the last: `hps-shm check NAME` (if the binary is
 *     built: $HPS_SHM_BIN, else ../../tools/hps-shm/hps-shm next to this
 *     test's build directory) must exit 0.
 * Throughout, 3 reader processes (the CI machine has 2 cores) look up
 * random batches, verify every found row, check that the output rows of
 * missing keys hold the default value (not the sentinel written before the
 * call), and time every lookup call.
 *
 * A reader must never wait for a writer.  Limit: a lookup call taking
 * >= 100 ms of wall time fails the test if during it the reader either
 * blocked (a voluntary context switch: futex, sleep) or used >= 50 ms of
 * CPU (spinning); a slow call with neither was preemption by the scheduler
 * and is counted and reported, not failed.  Any call >= 1 s fails outright.
 * Required besides: torn = 0, no missing row overwritten, every writer ready within 10 s of its
 * start (no deadlock on a dead owner's lock), every check clean, repairs counted.
 */
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <cmocka.h>

#include "rowcheck.h"
#include "testutil.h"

#define READERS 3
#define NKEYS   2048
#define DIM     64
#define PARTS   4
#define MARGIN  400
#define SEG     (128ULL << 20)

#define SLOW_NS      100000000ULL  /* 100 ms */
#define SLOW_CPU_NS  50000000ULL   /* 50 ms */
#define HARD_SLOW_NS 1000000000ULL /* 1 s */

struct reader_stats {
    uint64_t batches;
    uint64_t lookups;
    uint64_t hits;
    uint64_t torn;
    uint64_t scribbled; /* missing rows whose output was overwritten */
    uint64_t max_wall_ns;
    uint64_t max_cpu_ns;
    uint64_t slow_blocked;   /* >= 100 ms and blocked or spinning */
    uint64_t slow_preempted; /* >= 100 ms, neither: scheduler */
    uint64_t hard_slow;      /* >= 1 s */
    char first_torn[600];
    char first_scribble[256];
    char first_slow[256];
};

struct shared {
    _Atomic int stop;
    uint64_t seed;
    struct reader_stats rs[READERS];
};

static char seg_name[T_NAME_LEN];
static int64_t probe_keys[PARTS];
/* For teardown: stop and reap the readers when the test fails midway. */
static struct shared *g_sh;
static pid_t g_readers[READERS];

static uint64_t key_of(uint32_t i)
{
    return row_mix(0xC0FFEEULL + i) ^ 0x8000000000000000ULL;
}

/* ------------------------------------------------------------------------ */
/* Writer                                                                    */
/* ------------------------------------------------------------------------ */

static void writer_main(int round, int ready_fd, uint64_t seed)
{
    t_child_mode();
    hps_shmdb_t *db = t_attach(seg_name, HPS_ROLE_COORDINATOR);
    uint32_t base = (uint32_t)round << 16;
    uint32_t cnt = 1;
    static float vals[128 * DIM];
    static int64_t keys[128];

    /* Probe: one row in every partition, then read them back. */
    for (int p = 0; p < PARTS; p++)
        row_fill(&vals[p * DIM], DIM, (uint64_t)probe_keys[p], base);
    HPS_ASSERT_OK(hps_shmdb_upsert(db, 0, PARTS, probe_keys, vals, NULL));
    static float got[PARTS * DIM];
    uint8_t found[PARTS];
    HPS_ASSERT_OK(hps_shmdb_lookup(db, 0, PARTS, probe_keys, got, found, NULL));
    for (int p = 0; p < PARTS; p++) {
        char msg[512];
        uint32_t v;
        if (!found[p])
            T_FAIL("round %d: probe key of partition %d not found right after upsert", round, p);
        if (row_verify(&got[p * DIM], DIM, (uint64_t)probe_keys[p], &v, msg, sizeof(msg)))
            T_FAIL("round %d: probe: %s", round, msg);
        if (v != base)
            T_FAIL("round %d: probe of partition %d has version %u, wrote %u", round, p, v, base);
    }
    char c = 'R';
    if (write(ready_fd, &c, 1) != 1)
        _exit(3);

    uint64_t rng = seed ^ ((uint64_t)round * 0x9E3779B97F4A7C15ULL);
    uint64_t end = t_now_ns() + 30000000000ULL; /* safety net: the parent kills us */
    while (t_now_ns() < end) {
        size_t n = 1 + t_rng_below(&rng, 128);
        for (size_t j = 0; j < n; j++)
            keys[j] = (int64_t)key_of((uint32_t)t_rng_below(&rng, NKEYS));
        if (t_rng_below(&rng, 10) == 0) {
            HPS_ASSERT_OK(hps_shmdb_erase(db, 0, n, keys, NULL));
        } else {
            for (size_t j = 0; j < n; j++)
                row_fill(&vals[j * DIM], DIM, (uint64_t)keys[j], base | (cnt++ & 0xFFFF));
            HPS_ASSERT_OK(hps_shmdb_upsert(db, 0, n, keys, vals, NULL));
        }
    }
    _exit(4);
}

/* ------------------------------------------------------------------------ */
/* Readers                                                                   */
/* ------------------------------------------------------------------------ */

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void reader_main(struct shared *sh, int r)
{
    t_child_mode();
    struct reader_stats *st = &sh->rs[r];
    hps_shmdb_t *db = t_attach(seg_name, HPS_ROLE_WORKER);
    uint64_t rng = sh->seed + 104729 * (uint64_t)(r + 1);
    enum { MAXB = 64 };
    static int64_t keys[MAXB];
    static float vals[MAXB * DIM];
    static uint8_t found[MAXB];
    while (!atomic_load_explicit(&sh->stop, memory_order_relaxed)) {
        size_t n = 1 + t_rng_below(&rng, MAXB);
        for (size_t j = 0; j < n; j++)
            keys[j] = t_rng_below(&rng, 16) == 0
                          ? probe_keys[t_rng_below(&rng, PARTS)]
                          : (int64_t)key_of((uint32_t)t_rng_below(&rng, NKEYS));
        struct rusage ru0, ru1;
        getrusage(RUSAGE_THREAD, &ru0);
        uint64_t c0 = thread_cpu_ns();
        uint64_t t0 = t_now_ns();
        size_t hits = 0;
        row_poison(vals, n * DIM);
        hps_err_t e = hps_shmdb_lookup(db, 0, n, keys, vals, found, &hits);
        uint64_t wall = t_now_ns() - t0;
        uint64_t cpu = thread_cpu_ns() - c0;
        getrusage(RUSAGE_THREAD, &ru1);
        HPS_ASSERT_OK(e);
        if (wall > st->max_wall_ns)
            st->max_wall_ns = wall;
        if (cpu > st->max_cpu_ns)
            st->max_cpu_ns = cpu;
        if (wall >= SLOW_NS) {
            long vol = ru1.ru_nvcsw - ru0.ru_nvcsw;
            long invol = ru1.ru_nivcsw - ru0.ru_nivcsw;
            int blocked = vol > 0 || cpu >= SLOW_CPU_NS;
            if (blocked)
                st->slow_blocked++;
            else
                st->slow_preempted++;
            if (wall >= HARD_SLOW_NS)
                st->hard_slow++;
            if (!st->first_slow[0] && (blocked || wall >= HARD_SLOW_NS))
                snprintf(st->first_slow, sizeof(st->first_slow),
                         "lookup of %zu keys took %.1f ms wall, %.1f ms CPU, %ld voluntary and "
                         "%ld involuntary context switches",
                         n, (double)wall / 1e6, (double)cpu / 1e6, vol, invol);
        }
        size_t h2 = 0;
        for (size_t j = 0; j < n; j++) {
            if (!found[j]) {
                long d = row_is_default(&vals[j * DIM], DIM, T_DEFAULT_VALUE);
                if (d >= 0 && st->scribbled++ == 0)
                    snprintf(st->first_scribble, sizeof(st->first_scribble),
                             "key %" PRId64 " reported missing, but element %ld of its output "
                             "row is not the default value (= %a)",
                             keys[j], d, (double)vals[j * DIM + (size_t)d]);
                continue;
            }
            h2++;
            char msg[512];
            uint32_t v;
            if (row_verify(&vals[j * DIM], DIM, (uint64_t)keys[j], &v, msg, sizeof(msg)) &&
                st->torn++ == 0)
                snprintf(st->first_torn, sizeof(st->first_torn), "%s", msg);
        }
        HPS_ASSERT_EQ(hits, h2);
        st->lookups += n;
        st->hits += hits;
        st->batches++;
    }
    hps_shmdb_detach(db);
    _exit(st->torn || st->scribbled ? 1 : 0);
}

/* ------------------------------------------------------------------------ */
/* Checker (fresh process)                                                   */
/* ------------------------------------------------------------------------ */

struct verify_ctx {
    uint64_t rows;
    uint64_t torn;
    char first[512];
};

static int verify_fn(void *ctx, uint64_t key, const float *value)
{
    struct verify_ctx *c = ctx;
    char msg[512];
    uint32_t v;
    c->rows++;
    if (row_verify(value, DIM, key, &v, msg, sizeof(msg)) && c->torn++ == 0)
        snprintf(c->first, sizeof(c->first), "%s", msg);
    return 0;
}

/* Exit 0: clean; 1: problems; 2: torn rows in iterate. */
static void checker_main(int round)
{
    t_child_mode();
    hps_shmdb_t *db = t_attach(seg_name, HPS_ROLE_TOOL);
    uint64_t problems = t_check(db, "checker");
    struct verify_ctx c = {0, 0, ""};
    HPS_ASSERT_OK(hps_shmdb_iterate(db, 0, verify_fn, &c));
    hps_partition_info_t pi[PARTS];
    HPS_ASSERT_OK(hps_shmdb_partition_info(db, 0, pi));
    for (int p = 0; p < PARTS; p++)
        if (pi[p].rows > MARGIN)
            T_FAIL("round %d: partition %d holds %" PRIu64 " rows > margin %d", round, p,
                   pi[p].rows, MARGIN);
    hps_shmdb_detach(db);
    if (c.torn)
        fprintf(stderr, "round %d: iterate returned a torn row: %s\n", round, c.first);
    if (problems)
        fprintf(stderr, "round %d: hps_shmdb_check found %" PRIu64 " problems\n", round, problems);
    _exit(c.torn ? 2 : problems ? 1 : 0);
}

static void run_checker(int round, const char *when)
{
    pid_t pid = t_fork();
    if (pid == 0)
        checker_main(round);
    int st;
    char buf[64];
    if (!t_wait_timeout(pid, 20000, &st))
        T_FAIL("round %d (%s): checker hung > 20 s (check() blocked on a partition lock?)", round,
               when);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        T_FAIL("round %d (%s): checker ended with %s (1 = check() problems, 2 = torn row)", round,
               when, t_status_str(st, buf, sizeof(buf)));
}

/* ------------------------------------------------------------------------ */
/* The CLI                                                                   */
/* ------------------------------------------------------------------------ */

static int find_cli(char *path, size_t len)
{
    const char *env = getenv("HPS_SHM_BIN");
    if (env && *env) {
        snprintf(path, len, "%s", env);
        return access(path, X_OK) == 0;
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return 0;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash)
        return 0;
    *slash = '\0';
    static const char rel[] = "/../../tools/hps-shm/hps-shm";
    size_t sl = strlen(self);
    if (sl + sizeof(rel) > len)
        return 0;
    memcpy(path, self, sl);
    memcpy(path + sl, rel, sizeof(rel));
    return access(path, X_OK) == 0;
}

static void run_cli_check(const char *cli, int round)
{
    int out[2];
    T_CHECK(pipe(out) == 0, "pipe");
    pid_t pid = t_fork();
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(out[1], 2);
        close(out[0]);
        close(out[1]);
        execl(cli, cli, "check", seg_name, (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    char text[4096];
    size_t len = 0;
    ssize_t k;
    while ((k = read(out[0], text + len, sizeof(text) - 1 - len)) > 0)
        len += (size_t)k;
    text[len] = '\0';
    close(out[0]);
    int st;
    char buf[64];
    if (!t_wait_timeout(pid, 30000, &st))
        T_FAIL("round %d: hps-shm check hung", round);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        T_FAIL("round %d: `%s check %s` ended with %s; output:\n%s", round, cli, seg_name,
               t_status_str(st, buf, sizeof(buf)), text);
}

/* ------------------------------------------------------------------------ */

static void test_kill_writers(void **state)
{
    (void)state;
    struct shared *sh =
        mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    T_CHECK(sh != MAP_FAILED, "mmap");
    memset(sh, 0, sizeof(*sh));
    sh->seed = t_seed("kill");
    uint64_t rng = sh->seed;
    int rounds = (int)t_env_long("HPS_TEST_KILL_ROUNDS", 200);
    char cli[PATH_MAX];
    int have_cli = find_cli(cli, sizeof(cli));
    t_note("hps-shm CLI: %s", have_cli ? cli : "not built, its rounds are skipped");

    for (int p = 0, i = 0; p < PARTS; i++) {
        uint64_t k = row_mix(0xBEEF0000ULL + (uint64_t)i);
        if (t_part_of(k, PARTS) == (uint32_t)p)
            probe_keys[p++] = (int64_t)k;
    }

    /* Segment and table; prefill; the parent holds no handle while forking. */
    t_segname(seg_name, "kill");
    hps_shmdb_t *db = NULL;
    hps_shmdb_opts_t o = t_opts(SEG);
    HPS_ASSERT_OK(hps_shmdb_create(seg_name, &o, NULL, &db));
    hps_table_spec_t s = t_spec("kill", "t", DIM, 8, PARTS, MARGIN, HPS_EVICT_OLDEST, 0.75);
    uint32_t id;
    HPS_ASSERT_OK(hps_shmdb_table_create(db, &s, &id));
    HPS_ASSERT_EQ(id, 0);
    static int64_t keys[NKEYS];
    static float vals[NKEYS * DIM];
    for (uint32_t i = 0; i < 1000; i++) {
        keys[i] = (int64_t)key_of(i);
        row_fill(&vals[(size_t)i * DIM], DIM, (uint64_t)keys[i], 1);
    }
    HPS_ASSERT_OK(hps_shmdb_upsert(db, 0, 1000, keys, vals, NULL));
    hps_shmdb_detach(db);
    db = NULL;

    pid_t *readers = g_readers;
    g_sh = sh;
    for (int r = 0; r < READERS; r++) {
        readers[r] = t_fork();
        if (readers[r] == 0)
            reader_main(sh, r);
    }

    uint64_t t0 = t_now_ns();
    uint64_t max_ready_ns = 0;
    int killed_busy = 0, cli_runs = 0;
    for (int round = 0; round < rounds; round++) {
        int rp[2];
        T_CHECK(pipe(rp) == 0, "pipe");
        uint64_t ts = t_now_ns();
        pid_t w = t_fork();
        if (w == 0) {
            close(rp[0]);
            writer_main(round, rp[1], sh->seed);
        }
        close(rp[1]);
        struct pollfd pfd = {.fd = rp[0], .events = POLLIN};
        int pr = poll(&pfd, 1, 10000);
        char c = 0;
        if (pr != 1 || read(rp[0], &c, 1) != 1 || c != 'R') {
            int st;
            char buf[64];
            kill(w, SIGKILL);
            waitpid(w, &st, 0);
            close(rp[0]);
            atomic_store(&sh->stop, 1);
            T_FAIL("round %d: writer not ready within 10 s (poll %d, status %s): it could not "
                   "repair/lock a partition left by the writer killed in round %d",
                   round, pr, t_status_str(st, buf, sizeof(buf)), round - 1);
        }
        close(rp[0]);
        uint64_t ready = t_now_ns() - ts;
        if (ready > max_ready_ns)
            max_ready_ns = ready;

        if (round % 2 == 0)
            run_checker(round, "writer alive, after its repair");

        t_sleep_ns(t_rng_below(&rng, 5000001));
        kill(w, SIGKILL);
        int st;
        char buf[64];
        T_CHECK(t_wait_timeout(w, 10000, &st), "round %d: killed writer not reaped", round);
        if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL))
            T_FAIL("round %d: writer ended with %s before it was killed", round,
                   t_status_str(st, buf, sizeof(buf)));
        killed_busy++;

        if (round % 2 == 1)
            run_checker(round, "writer just killed");
        if (have_cli && (round % 40 == 39 || round == rounds - 1)) {
            run_cli_check(cli, round);
            cli_runs++;
        }
    }
    uint64_t kill_s = t_now_ns() - t0;

    atomic_store(&sh->stop, 1);
    int failed = 0;
    for (int r = 0; r < READERS; r++) {
        int st;
        char buf[64];
        int ok = t_wait_timeout(readers[r], 30000, &st);
        readers[r] = 0;
        if (!ok) {
            print_error("reader %d hung after stop\n", r);
            failed = 1;
        } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            print_error("reader %d ended with %s\n", r, t_status_str(st, buf, sizeof(buf)));
            failed = 1;
        }
    }

    /* Final state: a fresh attach repairs the last kill and checks. */
    HPS_ASSERT_OK(hps_shmdb_attach(seg_name, NULL, &db));
    uint64_t problems = t_check(db, "final");
    hps_segment_info_t si;
    HPS_ASSERT_OK(hps_shmdb_segment_info(db, &si));
    hps_partition_info_t pi[PARTS];
    HPS_ASSERT_OK(hps_shmdb_partition_info(db, 0, pi));
    uint64_t part_repairs = 0;
    for (int p = 0; p < PARTS; p++)
        part_repairs += pi[p].repairs;
    hps_proc_info_t procs[HPS_SHMDB_MAX_PROCS];
    size_t nprocs = 0;
    HPS_ASSERT_OK(hps_shmdb_procs(db, procs, &nprocs, true));
    HPS_ASSERT_OK(hps_shmdb_procs(db, procs, &nprocs, false));
    hps_shmdb_detach(db);
    hps_shmdb_unlink(seg_name);

    uint64_t lookups = 0, hits = 0, torn = 0, scribbled = 0, max_wall = 0, max_cpu = 0,
             slow_blocked = 0, slow_pre = 0, hard = 0;
    for (int r = 0; r < READERS; r++) {
        struct reader_stats *rs = &sh->rs[r];
        t_note("reader %d: %" PRIu64 " batches, %" PRIu64 " keys, %" PRIu64 " hits, torn %" PRIu64
               ", slowest lookup %.2f ms wall / %.2f ms CPU, slow: %" PRIu64 " blocked, %" PRIu64
               " preempted",
               r, rs->batches, rs->lookups, rs->hits, rs->torn, (double)rs->max_wall_ns / 1e6,
               (double)rs->max_cpu_ns / 1e6, rs->slow_blocked, rs->slow_preempted);
        if (rs->torn)
            print_error("reader %d first torn row: %s\n", r, rs->first_torn);
        if (rs->scribbled)
            print_error("reader %d: %" PRIu64 " missing rows not default; first: %s\n", r,
                        rs->scribbled, rs->first_scribble);
        if (rs->first_slow[0])
            print_error("reader %d first bad slow lookup: %s\n", r, rs->first_slow);
        lookups += rs->lookups;
        hits += rs->hits;
        torn += rs->torn;
        scribbled += rs->scribbled;
        max_wall = rs->max_wall_ns > max_wall ? rs->max_wall_ns : max_wall;
        max_cpu = rs->max_cpu_ns > max_cpu ? rs->max_cpu_ns : max_cpu;
        slow_blocked += rs->slow_blocked;
        slow_pre += rs->slow_preempted;
        hard += rs->hard_slow;
    }
    t_note("%d writers killed in %.1f s (slowest ready after fork %.1f ms); %d CLI checks; "
           "repairs: %" PRIu64 " in the header, %" PRIu64 " in the partitions; %zu process rows "
           "left after reaping",
           killed_busy, (double)kill_s / 1e9, (double)max_ready_ns / 1e6, cli_runs, si.repairs,
           part_repairs, nprocs);
    t_note("readers: %" PRIu64 " keys, %" PRIu64 " hits, torn=%" PRIu64
           ", missing rows not default=%" PRIu64 ", max lookup %.2f ms wall, %.2f ms CPU",
           lookups, hits, torn, scribbled, (double)max_wall / 1e6, (double)max_cpu / 1e6);
    munmap(sh, sizeof(*sh));
    g_sh = NULL;

    HPS_ASSERT_EQ(torn, 0);
    HPS_ASSERT_EQ(scribbled, 0);
    HPS_ASSERT_EQ(problems, 0);
    HPS_ASSERT_EQ(slow_blocked, 0);
    HPS_ASSERT_EQ(hard, 0);
    HPS_ASSERT_GT(hits, 0);
    /* Writers spend their life inside upsert: many die holding a lock. */
    HPS_ASSERT_GT(si.repairs, 0);
    HPS_ASSERT_GT(part_repairs, 0);
    /* Every dead writer, reader and checker reaped: only this process is left. */
    HPS_ASSERT_EQ(nprocs, 1);
    HPS_ASSERT_EQ(procs[0].pid, getpid());
    T_CHECK(!failed, "a reader failed (see above)");
    (void)slow_pre;
}

static int teardown(void **state)
{
    (void)state;
    if (g_sh) {
        atomic_store(&g_sh->stop, 1);
        for (int r = 0; r < READERS; r++) {
            int st;
            if (g_readers[r] > 0)
                t_wait_timeout(g_readers[r], 10000, &st);
            g_readers[r] = 0;
        }
    }
    t_unlink_all();
    return 0;
}

int main(void)
{
    t_install_cleanup();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_kill_writers, teardown),
    };
    return cmocka_run_group_tests_name("mproc-kill", tests, NULL, NULL);
}
