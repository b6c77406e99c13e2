/*
 * test-gshare.c -- descriptors handed between processes over abstract Unix
 * sockets (worker/libhps/gshare.c, compiled into this test): a fetched descriptor
 * reads what the offering process wrote, and keeps reading it after that
 * process is SIGKILLed; wrong index or generation, and a process without a
 * socket, answer HPS_ENOTFOUND at once; a server that never answers gives
 * HPS_ETIMEDOUT within the timeout.
 *
 * The offering process ("A") is a forked child with a memfd of known bytes.
 */
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <cmocka.h>

#include "../shmdb/testutil.h"
#include "hps/shmdb_gcache.h"
#include "gshare.h"

#define BYTES    8192
#define INDEX    3
#define GEN      7
#define WAIT_MS  2000
#define SLACK_MS 500

struct fixture {
    char seg[T_NAME_LEN]; /* the socket names' middle part; no segment is created */
};

struct offerer {
    pid_t pid;
    int ctl_w; /* closed by the test: the offerer stops and exits */
};

static uint8_t pattern(size_t i, uint8_t salt)
{
    return (uint8_t)((i * 131u + 7u) ^ salt);
}

/* A memfd holding BYTES bytes of pattern(salt). */
static int make_memfd(uint8_t salt)
{
    int fd = memfd_create("gshare-test", MFD_CLOEXEC);
    T_CHECK(fd >= 0, "memfd_create: %s", strerror(errno));
    uint8_t *buf = malloc(BYTES);
    for (size_t i = 0; i < BYTES; i++)
        buf[i] = pattern(i, salt);
    T_CHECK(pwrite(fd, buf, BYTES, 0) == BYTES, "pwrite: %s", strerror(errno));
    free(buf);
    return fd;
}

/* fd reads exactly BYTES bytes of pattern(salt). */
static void check_contents(int fd, uint8_t salt)
{
    struct stat st;
    T_CHECK(fstat(fd, &st) == 0, "fstat: %s", strerror(errno));
    HPS_ASSERT_EQ(st.st_size, BYTES);
    uint8_t *buf = malloc(BYTES);
    HPS_ASSERT_EQ(pread(fd, buf, BYTES, 0), BYTES);
    size_t bad = 0;
    for (size_t i = 0; i < BYTES; i++)
        bad += buf[i] != pattern(i, salt);
    free(buf);
    HPS_ASSERT_EQ(bad, 0);
}

static void offerer_main(const char *seg, int ready_w, int ctl_r)
{
    t_child_mode();
    int fd = make_memfd(0x5a);
    gshare_t *s = NULL;
    HPS_ASSERT_EQ(gshare_start(seg, &s), 0);
    HPS_ASSERT_EQ(gshare_offer(s, INDEX, GEN, &fd, 1), 0);
    char c = 'r';
    T_CHECK(write(ready_w, &c, 1) == 1, "write: %s", strerror(errno));
    struct pollfd p = {.fd = ctl_r, .events = POLLIN};
    (void)poll(&p, 1, 30000); /* until the test closes the pipe, or 30 s */
    gshare_stop(s);
    close(fd);
    _exit(0);
}

/* Fork A; return once its offer is served. */
static struct offerer offerer_start(const char *seg)
{
    int rp[2], cp[2];
    T_CHECK(pipe(rp) == 0 && pipe(cp) == 0, "pipe: %s", strerror(errno));
    struct offerer o = {.pid = t_fork(), .ctl_w = cp[1]};
    if (o.pid == 0) {
        close(rp[0]);
        close(cp[1]);
        offerer_main(seg, rp[1], cp[0]);
    }
    close(rp[1]);
    close(cp[0]);
    struct pollfd p = {.fd = rp[0], .events = POLLIN};
    char c = 0;
    T_CHECK(poll(&p, 1, 10000) == 1 && read(rp[0], &c, 1) == 1 && c == 'r',
            "offerer %d did not start", (int)o.pid);
    close(rp[0]);
    return o;
}

/* Stop A normally (kill = false) or by SIGKILL; reap it either way. */
static void offerer_end(struct offerer *o, bool kill_it)
{
    int st = 0;
    char buf[64];
    if (kill_it)
        kill(o->pid, SIGKILL);
    close(o->ctl_w);
    T_CHECK(t_wait_timeout(o->pid, 10000, &st), "offerer %d did not end", (int)o->pid);
    if (kill_it)
        T_CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "offerer: %s",
                t_status_str(st, buf, sizeof(buf)));
    else
        T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "offerer: %s",
                t_status_str(st, buf, sizeof(buf)));
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    snprintf(f->seg, sizeof(f->seg), "t-gshare-%d-%u", (int)getpid(), (unsigned)rand());
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    free(*state);
    return 0;
}

static uint64_t ms_since(uint64_t t0)
{
    return (t_now_ns() - t0) / 1000000ULL;
}

/* ---- tests ---------------------------------------------------------------- */

static void test_fetch_contents(void **state)
{
    struct fixture *f = *state;
    struct offerer a = offerer_start(f->seg);
    int fd = -1, fd2 = -1;
    HPS_ASSERT_EQ(gshare_fetch(f->seg, a.pid, INDEX, 0, GEN, WAIT_MS, &fd), 0);
    T_CHECK(fd >= 0, "fd %d", fd);
    check_contents(fd, 0x5a);
    HPS_ASSERT_EQ(gshare_fetch(f->seg, a.pid, INDEX, 0, GEN, WAIT_MS, &fd2), 0); /* again */
    HPS_ASSERT_NE(fd2, fd);
    check_contents(fd2, 0x5a);
    /* Same file: a write through one shows through the other. */
    uint8_t x = 0xee;
    HPS_ASSERT_EQ(pwrite(fd, &x, 1, 100), 1);
    uint8_t y = 0;
    HPS_ASSERT_EQ(pread(fd2, &y, 1, 100), 1);
    HPS_ASSERT_EQ(y, 0xee);
    HPS_ASSERT_NE(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0); /* MSG_CMSG_CLOEXEC */
    close(fd);
    close(fd2);
    offerer_end(&a, false);
}

static void test_wrong_index_or_generation(void **state)
{
    struct fixture *f = *state;
    struct offerer a = offerer_start(f->seg);
    int fd = -1;
    HPS_ASSERT_EQ(gshare_fetch(f->seg, a.pid, INDEX, 0, GEN + 1, WAIT_MS, &fd), HPS_ENOTFOUND);
    HPS_ASSERT_EQ(gshare_fetch(f->seg, a.pid, INDEX, 0, GEN - 1, WAIT_MS, &fd), HPS_ENOTFOUND);
    HPS_ASSERT_EQ(gshare_fetch(f->seg, a.pid, INDEX + 1, 0, GEN, WAIT_MS, &fd), HPS_ENOTFOUND);
    HPS_ASSERT_EQ(gshare_fetch(f->seg, a.pid, 0, 0, 0, WAIT_MS, &fd), HPS_ENOTFOUND);
    HPS_ASSERT_EQ(gshare_fetch(f->seg, a.pid, HPS_SHMDB_MAX_GCACHES, 0, GEN, WAIT_MS, &fd),
                  HPS_ENOTFOUND);
    HPS_ASSERT_EQ(fd, -1); /* never written on failure */
    /* Another segment name is another socket. */
    char other[T_NAME_LEN + 8];
    snprintf(other, sizeof(other), "%s-x", f->seg);
    HPS_ASSERT_EQ(gshare_fetch(other, a.pid, INDEX, 0, GEN, WAIT_MS, &fd), HPS_ENOTFOUND);
    HPS_ASSERT_EQ(gshare_fetch(f->seg, a.pid, INDEX, 0, GEN, WAIT_MS, &fd), 0); /* still served */
    check_contents(fd, 0x5a);
    close(fd);
    offerer_end(&a, false);
}

/* No socket for that pid: HPS_ENOTFOUND at once, not after the timeout. */
static void test_no_socket(void **state)
{
    struct fixture *f = *state;
    struct offerer a = offerer_start(f->seg);
    pid_t gone = a.pid;
    offerer_end(&a, false); /* stopped: its socket is closed */
    int fd = -1;
    uint64_t t0 = t_now_ns();
    HPS_ASSERT_EQ(gshare_fetch(f->seg, gone, INDEX, 0, GEN, 10000, &fd), HPS_ENOTFOUND);
    HPS_ASSERT_EQ(gshare_fetch(f->seg, getpid(), INDEX, 0, GEN, 10000, &fd), HPS_ENOTFOUND);
    uint64_t ms = ms_since(t0);
    t_note("two fetches without a socket: %llu ms", (unsigned long long)ms);
    HPS_ASSERT_LT(ms, 1000);
    HPS_ASSERT_EQ(fd, -1);
}

/* The point of passing references: the memory outlives the offerer. */
static void test_survives_sigkill(void **state)
{
    struct fixture *f = *state;
    struct offerer a = offerer_start(f->seg);
    int fd = -1;
    HPS_ASSERT_EQ(gshare_fetch(f->seg, a.pid, INDEX, 0, GEN, WAIT_MS, &fd), 0);
    pid_t gone = a.pid;
    offerer_end(&a, true);
    check_contents(fd, 0x5a);
    int fd2 = -1;
    HPS_ASSERT_EQ(gshare_fetch(f->seg, gone, INDEX, 0, GEN, WAIT_MS, &fd2), HPS_ENOTFOUND);
    close(fd);
}

/* A server that accepts connections into its backlog but never answers. */
static void test_timeout(void **state)
{
    struct fixture *f = *state;
    const pid_t fake = 999999999; /* above any pid_max: no real process has this name */
    struct sockaddr_un a;
    memset(&a, 0, sizeof(a));
    a.sun_family = AF_UNIX;
    int n =
        snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "hps.%s.gcache.%ld", f->seg, (long)fake);
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    int srv = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    T_CHECK(srv >= 0, "socket: %s", strerror(errno));
    T_CHECK(bind(srv, (struct sockaddr *)&a, len) == 0, "bind: %s", strerror(errno));
    T_CHECK(listen(srv, 4) == 0, "listen: %s", strerror(errno));
    int fd = -1;
    const int timeout_ms = 300;
    uint64_t t0 = t_now_ns();
    HPS_ASSERT_EQ(gshare_fetch(f->seg, fake, INDEX, 0, GEN, timeout_ms, &fd), HPS_ETIMEDOUT);
    uint64_t ms = ms_since(t0);
    t_note("fetch from a silent server: HPS_ETIMEDOUT after %llu ms (timeout %d ms)",
           (unsigned long long)ms, timeout_ms);
    HPS_ASSERT_GE(ms, timeout_ms - 10);
    HPS_ASSERT_LT(ms, timeout_ms + SLACK_MS);
    HPS_ASSERT_EQ(fd, -1);
    close(srv);
}

/* In one process: a second offer for an index replaces the first; errors of
 * start and offer. */
static void test_offer_replace_and_errors(void **state)
{
    struct fixture *f = *state;
    int m1 = make_memfd(1), m2 = make_memfd(2);
    gshare_t *s = NULL, *s2 = NULL;
    HPS_ASSERT_EQ(gshare_start(f->seg, &s), 0);
    HPS_ASSERT_EQ(gshare_start(f->seg, &s2), -EADDRINUSE); /* our name is taken */
    HPS_ASSERT_EQ(gshare_offer(s, HPS_SHMDB_MAX_GCACHES, 1, &m1, 1), -ENOMEM);
    HPS_ASSERT_EQ(gshare_offer(s, 0, 1, &m1, 1), 0);
    HPS_ASSERT_EQ(gshare_offer(s, HPS_SHMDB_MAX_GCACHES - 1, 5, &m2, 1), 0);
    int fd = -1;
    HPS_ASSERT_EQ(gshare_fetch(f->seg, getpid(), 0, 0, 1, WAIT_MS, &fd), 0);
    check_contents(fd, 1);
    close(fd);
    HPS_ASSERT_EQ(gshare_fetch(f->seg, getpid(), HPS_SHMDB_MAX_GCACHES - 1, 0, 5, WAIT_MS, &fd), 0);
    check_contents(fd, 2);
    close(fd);
    HPS_ASSERT_EQ(gshare_offer(s, 0, 2, &m2, 1), 0); /* replaces (1, m1) */
    HPS_ASSERT_EQ(gshare_fetch(f->seg, getpid(), 0, 0, 1, WAIT_MS, &fd), HPS_ENOTFOUND);
    HPS_ASSERT_EQ(gshare_fetch(f->seg, getpid(), 0, 0, 2, WAIT_MS, &fd), 0);
    check_contents(fd, 2);
    close(fd);
    gshare_stop(s);
    gshare_stop(NULL);
    fd = -1;
    HPS_ASSERT_EQ(gshare_fetch(f->seg, getpid(), 0, 0, 2, WAIT_MS, &fd), HPS_ENOTFOUND);
    HPS_ASSERT_EQ(gshare_start(f->seg, &s), 0); /* the name is free again */
    gshare_stop(s);
    close(m1);
    close(m2);
}

/* A sharded cache's parts: each part number hands out its own descriptor;
 * a part past the offer's count, or an offer of 0 or too many parts, is
 * refused. */
static void test_parts(void **state)
{
    struct fixture *f = *state;
    int m[3] = {make_memfd(7), make_memfd(8), make_memfd(9)};
    gshare_t *s = NULL;
    HPS_ASSERT_EQ(gshare_start(f->seg, &s), 0);
    HPS_ASSERT_EQ(gshare_offer(s, 3, 4, m, 0), -ENOMEM);
    HPS_ASSERT_EQ(gshare_offer(s, 3, 4, m, GSHARE_MAX_PARTS + 1), -ENOMEM);
    HPS_ASSERT_EQ(gshare_offer(s, 3, 4, m, 3), 0);
    for (uint32_t p = 0; p < 3; p++) {
        int fd = -1;
        HPS_ASSERT_EQ(gshare_fetch(f->seg, getpid(), 3, p, 4, WAIT_MS, &fd), 0);
        check_contents(fd, (uint8_t)(7 + p));
        close(fd);
    }
    int fd = -1;
    HPS_ASSERT_EQ(gshare_fetch(f->seg, getpid(), 3, 3, 4, WAIT_MS, &fd), HPS_ENOTFOUND);
    HPS_ASSERT_EQ(gshare_fetch(f->seg, getpid(), 3, UINT32_MAX, 4, WAIT_MS, &fd), HPS_ENOTFOUND);
    HPS_ASSERT_EQ(fd, -1);
    gshare_stop(s);
    for (int i = 0; i < 3; i++)
        close(m[i]);
}

int main(void)
{
    t_install_cleanup();
    srand((unsigned)t_now_ns());
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_fetch_contents), T(test_wrong_index_or_generation),
        T(test_no_socket),      T(test_survives_sigkill),
        T(test_timeout),        T(test_offer_replace_and_errors),
        T(test_parts),
    };
#undef T
    return cmocka_run_group_tests_name("gshare", tests, NULL, NULL);
}
