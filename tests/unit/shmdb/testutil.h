/*
 * testutil.h -- small helpers shared by the shmdb unit tests and the
 * multi-process (mproc) tests.  Header-only; every function is static inline.
 *
 *  - Value-printing assertions (HPS_ASSERT_EQ, _LE, ..., HPS_ASSERT_OK,
 *    HPS_ASSERT_ERR).  Inside a cmocka test they fail the test; inside a
 *    forked child (after t_child_mode()) they print to stderr and _exit(99),
 *    because cmocka's longjmp must never run in a child.
 *  - Unique segment names ("t-<tag>-<pid>-<n>") that are unlinked from
 *    /dev/shm by t_unlink_all() (call it in teardown), at exit, and on
 *    SIGTERM/SIGINT/SIGABRT/SIGSEGV/SIGBUS (meson's timeout sends SIGTERM), so
 *    no /dev/shm/hps.t-* object outlives a test run.
 *  - A seeded PRNG (splitmix64) whose seed is printed and can be forced with
 *    HPS_TEST_SEED, a monotonic clock, fork/wait helpers.
 */
#ifndef HPS_TESTS_TESTUTIL_H
#define HPS_TESTS_TESTUTIL_H

#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "hps/hps.h"
#include "hps/shmdb.h"

/* ------------------------------------------------------------------------ */
/* Failure reporting                                                         */
/* ------------------------------------------------------------------------ */

/** Exit status of a forked child whose assertion failed. */
#define T_CHILD_FAIL 99

__attribute__((unused)) static volatile sig_atomic_t t__child;

/** Call first thing in a forked child: failures then _exit(T_CHILD_FAIL). */
static inline void t_child_mode(void)
{
    t__child = 1;
    /* Die with the test: never leave a looping child behind a killed parent. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
}

__attribute__((format(printf, 3, 4))) static inline void t__fail(const char *file, int line,
                                                                 const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (t__child) {
        fprintf(stderr, "child %d: %s:%d: %s\n", (int)getpid(), file, line, msg);
        fflush(stderr);
        _exit(T_CHILD_FAIL);
    }
    print_error("%s:%d: %s\n", file, line, msg);
    _fail(file, line);
}

/** Fail with a printf-style message. */
#define T_FAIL(...) t__fail(__FILE__, __LINE__, __VA_ARGS__)

/** Fail with a message unless cond holds. */
#define T_CHECK(cond, ...)                                                                         \
    do {                                                                                           \
        if (!(cond))                                                                               \
            T_FAIL("check failed: " #cond ": " __VA_ARGS__);                                       \
    } while (0)

/* Integers are compared as signed 128-bit values, so int64 and uint64
 * operands of any sign compare exactly and -Wsign-compare stays quiet. */
__extension__ typedef __int128 t__i128;

static inline const char *t__fmt_int(char *buf, size_t len, t__i128 v)
{
    if (v >= 0 && v > (t__i128)INT64_MAX)
        snprintf(buf, len, "%llu", (unsigned long long)v);
    else
        snprintf(buf, len, "%lld", (long long)v);
    return buf;
}

#define T__CMP(a, op, b)                                                                           \
    do {                                                                                           \
        t__i128 t_a_ = (t__i128)(a);                                                               \
        t__i128 t_b_ = (t__i128)(b);                                                               \
        if (!(t_a_ op t_b_)) {                                                                     \
            char t_ba_[48], t_bb_[48];                                                             \
            T_FAIL("expected %s %s %s, got %s vs %s", #a, #op, #b,                                 \
                   t__fmt_int(t_ba_, sizeof(t_ba_), t_a_),                                         \
                   t__fmt_int(t_bb_, sizeof(t_bb_), t_b_));                                        \
        }                                                                                          \
    } while (0)

#define HPS_ASSERT_EQ(a, b) T__CMP(a, ==, b)
#define HPS_ASSERT_NE(a, b) T__CMP(a, !=, b)
#define HPS_ASSERT_LT(a, b) T__CMP(a, <, b)
#define HPS_ASSERT_LE(a, b) T__CMP(a, <=, b)
#define HPS_ASSERT_GT(a, b) T__CMP(a, >, b)
#define HPS_ASSERT_GE(a, b) T__CMP(a, >=, b)

/** expr must return 0 (an hps_err_t). */
#define HPS_ASSERT_OK(expr)                                                                        \
    do {                                                                                           \
        hps_err_t t_r_ = (expr);                                                                   \
        if (t_r_ != 0)                                                                             \
            T_FAIL("%s returned %s (%d: %s), expected OK", #expr, hps_err_name(t_r_), t_r_,        \
                   hps_strerror(t_r_));                                                            \
    } while (0)

/** expr must return the error code want. */
#define HPS_ASSERT_ERR(expr, want)                                                                 \
    do {                                                                                           \
        hps_err_t t_r_ = (expr);                                                                   \
        hps_err_t t_w_ = (want);                                                                   \
        if (t_r_ != t_w_)                                                                          \
            T_FAIL("%s returned %s (%d: %s), expected %s (%d)", #expr, hps_err_name(t_r_), t_r_,   \
                   hps_strerror(t_r_), hps_err_name(t_w_), t_w_);                                  \
    } while (0)

/** expr must return one of the error codes w1, w2. */
#define HPS_ASSERT_ERR2(expr, w1, w2)                                                              \
    do {                                                                                           \
        hps_err_t t_r_ = (expr);                                                                   \
        hps_err_t t_w1_ = (w1), t_w2_ = (w2);                                                      \
        if (t_r_ != t_w1_ && t_r_ != t_w2_)                                                        \
            T_FAIL("%s returned %s (%d: %s), expected %s or %s", #expr, hps_err_name(t_r_), t_r_,  \
                   hps_strerror(t_r_), hps_err_name(t_w1_), hps_err_name(t_w2_));                  \
    } while (0)

/** A "# ..." TAP comment line on stdout (flushed: children may fork). */
__attribute__((format(printf, 1, 2))) static inline void t_note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("# ", stdout);
    vfprintf(stdout, fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
    fflush(stdout);
}

/* ------------------------------------------------------------------------ */
/* Segment names and cleanup                                                 */
/* ------------------------------------------------------------------------ */

#define T_MAX_SEGS 64
#define T_NAME_LEN 96

__attribute__((unused)) static char t__seg_paths[T_MAX_SEGS][T_NAME_LEN + 16];
__attribute__((unused)) static volatile sig_atomic_t t__nsegs;
__attribute__((unused)) static pid_t t__owner;
__attribute__((unused)) static unsigned t__seg_counter;

/** Unlink every registered segment (owner process only; async-signal-safe). */
static inline void t_unlink_all(void)
{
    if (t__owner == 0 || getpid() != t__owner)
        return;
    for (int i = 0; i < t__nsegs; i++)
        unlink(t__seg_paths[i]);
}

static inline void t__on_signal(int sig)
{
    t_unlink_all();
    signal(sig, SIG_DFL);
    raise(sig);
}

/** Install the at-exit and signal cleanup; idempotent. */
static inline void t_install_cleanup(void)
{
    if (t__owner == getpid())
        return;
    t__owner = getpid();
    t__nsegs = 0;
    atexit(t_unlink_all);
    static const int sigs[] = {SIGTERM, SIGINT, SIGABRT, SIGSEGV, SIGBUS, SIGHUP};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = t__on_signal;
        sa.sa_flags = SA_RESETHAND | SA_NODEFER;
        sigaction(sigs[i], &sa, NULL);
    }
}

/** Path of the shm object of segment name: /dev/shm/hps.<name>. */
static inline void t_shm_path(const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "/dev/shm/hps.%s", name);
}

/**
 * A fresh segment name "t-<tag>-<pid>-<n>" in buf (at least T_NAME_LEN),
 * registered for cleanup.  A leftover object of that name is removed first.
 */
static inline const char *t_segname(char *buf, const char *tag)
{
    t_install_cleanup();
    snprintf(buf, T_NAME_LEN, "t-%s-%d-%u", tag, (int)getpid(), t__seg_counter++);
    if (t__nsegs < T_MAX_SEGS) {
        t_shm_path(buf, t__seg_paths[t__nsegs], sizeof(t__seg_paths[0]));
        unlink(t__seg_paths[t__nsegs]);
        t__nsegs++;
    } else {
        T_FAIL("too many test segments (T_MAX_SEGS=%d)", T_MAX_SEGS);
    }
    return buf;
}

/** Register an arbitrary segment name for cleanup (e.g. a 200-char name). */
static inline void t_register_name(const char *name)
{
    t_install_cleanup();
    if (t__nsegs < T_MAX_SEGS) {
        t_shm_path(name, t__seg_paths[t__nsegs], sizeof(t__seg_paths[0]));
        t__nsegs++;
    }
}

/* ------------------------------------------------------------------------ */
/* Random numbers, time                                                      */
/* ------------------------------------------------------------------------ */

/** splitmix64: small, fast, good enough for test data. */
static inline uint64_t t_rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/** Uniform in [0, n) (n > 0; the tiny modulo bias is irrelevant here). */
static inline uint64_t t_rng_below(uint64_t *s, uint64_t n)
{
    return t_rng_next(s) % n;
}

/** Uniform in [0, 1). */
static inline double t_rng_unit(uint64_t *s)
{
    return (double)(t_rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

/** The run's seed: HPS_TEST_SEED if set, else from time and pid; printed. */
static inline uint64_t t_seed(const char *what)
{
    const char *e = getenv("HPS_TEST_SEED");
    uint64_t seed;
    if (e && *e) {
        seed = strtoull(e, NULL, 0);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = ((uint64_t)ts.tv_sec * 1000000007ULL) ^ (uint64_t)ts.tv_nsec ^
               ((uint64_t)getpid() << 32);
    }
    t_note("%s: seed=%" PRIu64 " (HPS_TEST_SEED=%" PRIu64 " repeats this run)", what, seed, seed);
    return seed;
}

/** An integer from the environment, or def. */
static inline long t_env_long(const char *name, long def)
{
    const char *e = getenv(name);
    return (e && *e) ? strtol(e, NULL, 0) : def;
}

static inline uint64_t t_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static inline void t_sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ULL),
                          .tv_nsec = (long)(ns % 1000000000ULL)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ------------------------------------------------------------------------ */
/* Processes                                                                 */
/* ------------------------------------------------------------------------ */

/** fork() after flushing stdio, so buffered output is not duplicated. */
static inline pid_t t_fork(void)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        T_FAIL("fork: %s", strerror(errno));
    return pid;
}

/**
 * Wait for pid up to timeout_ms; on timeout SIGKILL it, reap it and return
 * false.  *status receives the wait status.
 */
static inline int t_wait_timeout(pid_t pid, uint64_t timeout_ms, int *status)
{
    uint64_t deadline = t_now_ns() + timeout_ms * 1000000ULL;
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid)
            return 1;
        if (r < 0 && errno != EINTR)
            return 0;
        if (t_now_ns() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, status, 0);
            return 0;
        }
        t_sleep_ns(1000000);
    }
}

/** Describe a wait status ("exit 0", "signal 9") into buf. */
static inline const char *t_status_str(int status, char *buf, size_t len)
{
    if (WIFEXITED(status))
        snprintf(buf, len, "exit %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, len, "status 0x%x", status);
    return buf;
}

/* ------------------------------------------------------------------------ */
/* shmdb helpers                                                             */
/* ------------------------------------------------------------------------ */

/* Default value of tables made by t_spec: lookups fill the rows of missing
 * keys with it (shmdb_table.h), and an odd value tells them from zeroed memory. */
#define T_DEFAULT_VALUE (-7.25f)

static inline hps_table_spec_t t_spec(const char *model, const char *table, uint32_t dim,
                                      uint32_t key_bytes, uint32_t parts, uint64_t margin,
                                      hps_overflow_policy_t policy, double target)
{
    hps_table_spec_t s;
    memset(&s, 0, sizeof(s));
    s.model = model;
    s.table = table;
    s.dim = dim;
    s.key_bytes = key_bytes;
    s.default_value = T_DEFAULT_VALUE;
    s.num_partitions = parts;
    s.overflow_margin = margin;
    s.overflow_policy = policy;
    s.overflow_resolution_target = target;
    s.expected_rows = 0;
    return s;
}

static inline hps_shmdb_opts_t t_opts(uint64_t size_bytes)
{
    hps_shmdb_opts_t o;
    memset(&o, 0, sizeof(o));
    o.size_bytes = size_bytes;
    o.allocation_rate = 1u << 20;
    o.mode = 0;
    return o;
}

struct t__check_ctx {
    unsigned printed;
    const char *who;
};

static inline void t__check_report(void *ctx, const char *msg)
{
    struct t__check_ctx *c = ctx;
    if (c->printed++ < 20)
        fprintf(stderr, "%s: hps_shmdb_check: %s\n", c->who, msg);
}

/** Run hps_shmdb_check, print up to 20 problems, return the problem count. */
static inline uint64_t t_check(hps_shmdb_t *db, const char *who)
{
    struct t__check_ctx c = {0, who};
    uint64_t problems = ~0ULL;
    HPS_ASSERT_OK(hps_shmdb_check(db, t__check_report, &c, &problems));
    return problems;
}

/** Partition of a key under HugeCTR's rule (keys zero-extended/reinterpreted). */
static inline uint32_t t_part_of(uint64_t key, uint32_t parts)
{
    return (uint32_t)(hps_rrxmrrxmsx_0(key) % parts);
}

/**
 * The fixture of a test that works on one segment of its own: a fresh name
 * (t_segname, tag as given), its /dev/shm path and the handle the test
 * opens, if any.  t_seg_setup puts it in *state; t_seg_teardown detaches
 * the handle and unlinks every segment the program named.
 */
struct t_seg_fixture {
    char name[T_NAME_LEN];
    char path[T_NAME_LEN + 16];
    hps_shmdb_t *db;
};

static inline int t_seg_setup(void **state, const char *tag)
{
    struct t_seg_fixture *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    t_segname(f->name, tag);
    t_shm_path(f->name, f->path, sizeof(f->path));
    *state = f;
    return 0;
}

/** Create the fixture's segment: size bytes, t_opts' options, no handle options. */
static inline void t_seg_create(struct t_seg_fixture *f, uint64_t size)
{
    hps_shmdb_opts_t o = t_opts(size);
    HPS_ASSERT_OK(hps_shmdb_create(f->name, &o, NULL, &f->db));
}

/** Attach segment name as a process of role (one thread, no device);
 *  fails the test (or the forked child) when it cannot. */
static inline hps_shmdb_t *t_attach(const char *name, hps_proc_role_t role)
{
    hps_shmdb_t *db = NULL;
    hps_shmdb_proc_opts_t po = {.num_threads = 1, .role = role, .device = -1};
    HPS_ASSERT_OK(hps_shmdb_attach(name, &po, &db));
    return db;
}

/** Element d of a test row of key (integers below 2^24: exact in fp32). */
static inline void t_value_of(uint64_t key, uint32_t dim, float *v)
{
    for (uint32_t d = 0; d < dim; d++)
        v[d] = (float)((key * 7919 + d * 104729) % 16777216);
}

static inline int t_seg_teardown(void **state)
{
    struct t_seg_fixture *f = *state;
    hps_shmdb_detach(f->db);
    t_unlink_all();
    free(f);
    return 0;
}

#endif /* HPS_TESTS_TESTUTIL_H */
