/*
 * test-mproc-pidns.c -- liveness across PID namespaces: a coordinator and
 * a worker in different PID namespaces on one /dev/shm (the sidecar
 * deployment: containers of a pod sharing a memory-backed volume), each
 * pid 1 in its own namespace, so that no pid means anything to the other.
 *
 * Each side is this executable in agent mode (--agent ROLE NAME TIMEOUT_MS),
 * started through `unshare --pid --fork --kill-child` (with --user
 * --map-root-user where plain unshare is not permitted; the whole test is
 * skipped, "1..0 # SKIP", where neither is).  It attaches, prints "ready
 * <its pid> <its row>" and then reports what it sees, one line each:
 *   coordinator: beats every 5 ms, says SERVING, reaps the process table
 *                every 5 ms and prints "seen <row>" for each row that came
 *                and "gone <row>" for each row that left;
 *   worker:      prints "coord 1" / "coord 0" as hps_shmdb_coordinator_alive
 *                (TIMEOUT_MS, serving) changes.
 * The test process (the host's namespace) creates the segment, SIGKILLs an
 * agent's process inside its namespace (found as the child of its unshare)
 * and requires:
 *  - the worker sees the coordinator alive across the namespaces;
 *  - a killed worker is reaped by the coordinator within WORKER_TIMEOUT_MS;
 *  - a killed coordinator is seen dead by the worker within
 *    WORKER_TIMEOUT_MS, and before its heartbeat could have aged out
 *    (WORKER_TIMEOUT_MS / 2): by its row's lock, not by the heartbeat;
 *  - from the host, both rows show pid 1, alive while they live, and not
 *    alive once dead (what hps-shm info prints).
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "testutil.h"

#define WORKER_TIMEOUT_MS 500
#define AGENT_LIFE_S      60

static char g_exe[PATH_MAX];
static bool g_userns; /* unshare needs --user --map-root-user here */

/* ---- agent mode (inside the namespace) ----------------------------------- */

static int own_row(hps_shmdb_t *db)
{
    hps_proc_info_t procs[HPS_SHMDB_MAX_PROCS];
    size_t n = 0;
    hps_shmdb_procs(db, procs, &n, false);
    for (size_t i = 0; i < n; i++)
        if (procs[i].self)
            return procs[i].slot;
    return -1;
}

static int agent(const char *role, const char *name, uint32_t timeout_ms)
{
    bool coord = strcmp(role, "coordinator") == 0;
    hps_shmdb_proc_opts_t po = {
        .num_threads = 1, .role = coord ? HPS_ROLE_COORDINATOR : HPS_ROLE_WORKER, .device = -1};
    hps_shmdb_t *db;
    hps_err_t rc = hps_shmdb_attach(name, &po, &db);
    if (rc != 0) {
        printf("error attach %s\n", hps_strerror(rc));
        return 1;
    }
    bool seen[HPS_SHMDB_MAX_PROCS] = {false};
    int last = -1;
    if (coord) {
        hps_shmdb_heartbeat(db);
        hps_shmdb_set_coord_state(db, HPS_COORD_SERVING);
    }
    printf("ready %d %d\n", (int)getpid(), own_row(db));
    fflush(stdout);
    for (uint64_t end = t_now_ns() + AGENT_LIFE_S * 1000000000ULL; t_now_ns() < end;) {
        if (coord) {
            hps_shmdb_heartbeat(db);
            hps_proc_info_t procs[HPS_SHMDB_MAX_PROCS];
            bool now[HPS_SHMDB_MAX_PROCS] = {false};
            size_t n = 0;
            hps_shmdb_procs(db, procs, &n, true);
            for (size_t i = 0; i < n; i++)
                now[procs[i].slot] = true;
            for (int s = 0; s < HPS_SHMDB_MAX_PROCS; s++) {
                if (seen[s] && !now[s])
                    printf("gone %d\n", s);
                if (!seen[s] && now[s])
                    printf("seen %d\n", s);
                seen[s] = now[s];
            }
        } else {
            hps_shmdb_proc_heartbeat(db);
            int alive = hps_shmdb_coordinator_alive(db, timeout_ms, true);
            if (alive != last)
                printf("coord %d\n", alive);
            last = alive;
        }
        fflush(stdout);
        usleep(5000);
    }
    hps_shmdb_detach(db);
    return 0;
}

/* ---- the test process ---------------------------------------------------- */

/* Run `unshare [--user --map-root-user] --pid --fork --kill-child -- argv`
 * with stdout to out_fd (-1: /dev/null); the unshare process's pid. */
static pid_t spawn_unshare(bool userns, char *const *argv, int out_fd)
{
    char *args[32];
    int n = 0;
    args[n++] = "unshare";
    if (userns) {
        args[n++] = "--user";
        args[n++] = "--map-root-user";
    }
    args[n++] = "--pid";
    args[n++] = "--fork";
    args[n++] = "--kill-child";
    args[n++] = "--";
    for (int i = 0; argv[i] && n < 31; i++)
        args[n++] = argv[i];
    args[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* unshare dies with us, its child with it */
        int fd = out_fd >= 0 ? out_fd : open("/dev/null", O_WRONLY);
        dup2(fd, STDOUT_FILENO);
        if (out_fd < 0)
            dup2(fd, STDERR_FILENO);
        execvp("unshare", args);
        _exit(127);
    }
    return pid;
}

static bool unshare_works(bool userns)
{
    char *argv[] = {"true", NULL};
    pid_t pid = spawn_unshare(userns, argv, -1);
    int st;
    return pid > 0 && t_wait_timeout(pid, 10000, &st) && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

struct agent {
    pid_t unshare_pid; /* ours */
    pid_t inner;       /* its child, the agent (host pid) */
    int fd;            /* the agent's stdout */
    char buf[4096];
    size_t len;
    int ns_pid; /* its pid in its namespace */
    int row;
};

/* The next line the agent printed, within timeout_ms; false on timeout or EOF. */
static bool agent_line(struct agent *a, uint64_t timeout_ms, char *line, size_t cap)
{
    uint64_t end = t_now_ns() + timeout_ms * 1000000ULL;
    for (;;) {
        char *nl = memchr(a->buf, '\n', a->len);
        if (nl) {
            size_t k = (size_t)(nl - a->buf);
            snprintf(line, cap, "%.*s", (int)k, a->buf);
            memmove(a->buf, nl + 1, a->len - k - 1);
            a->len -= k + 1;
            return true;
        }
        uint64_t now = t_now_ns();
        if (now >= end || a->len == sizeof(a->buf))
            return false;
        struct pollfd p = {.fd = a->fd, .events = POLLIN};
        int ms = (int)((end - now + 999999) / 1000000ULL);
        if (poll(&p, 1, ms) <= 0)
            continue;
        ssize_t r = read(a->fd, a->buf + a->len, sizeof(a->buf) - a->len);
        if (r <= 0)
            return false;
        a->len += (size_t)r;
    }
}

/* Wait for a line equal to want; ms it took, or UINT64_MAX. */
static uint64_t agent_expect(struct agent *a, const char *want, uint64_t timeout_ms)
{
    uint64_t t0 = t_now_ns();
    char line[256];
    while (agent_line(a, timeout_ms, line, sizeof(line))) {
        if (strcmp(line, want) == 0)
            return (t_now_ns() - t0) / 1000000ULL;
        if (strncmp(line, "error", 5) == 0)
            T_FAIL("agent %d: %s", (int)a->unshare_pid, line);
        uint64_t spent = (t_now_ns() - t0) / 1000000ULL;
        if (spent >= timeout_ms)
            break;
    }
    return UINT64_MAX;
}

/* The child of pid (the agent under its unshare), within 5 s. */
static pid_t child_of(pid_t pid)
{
    for (int tries = 0; tries < 500; tries++) {
        DIR *d = opendir("/proc");
        struct dirent *e;
        pid_t found = 0;
        while (d && (e = readdir(d)) && !found) {
            char path[300], stat[512];
            if (e->d_name[0] < '0' || e->d_name[0] > '9')
                continue;
            snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
            int fd = open(path, O_RDONLY);
            if (fd < 0)
                continue;
            ssize_t n = read(fd, stat, sizeof(stat) - 1);
            close(fd);
            if (n <= 0)
                continue;
            stat[n] = 0;
            char *rp = strrchr(stat, ')'); /* comm may hold spaces */
            int ppid = 0;
            if (rp && sscanf(rp + 1, " %*c %d", &ppid) == 1 && ppid == pid)
                found = (pid_t)atoi(e->d_name);
        }
        if (d)
            closedir(d);
        if (found)
            return found;
        t_sleep_ns(10000000);
    }
    return 0;
}

static struct agent *agent_start(const char *role, const char *name)
{
    struct agent *a = calloc(1, sizeof(*a));
    int fds[2];
    char tmo[32];
    T_CHECK(a && pipe(fds) == 0, "pipe");
    snprintf(tmo, sizeof(tmo), "%d", WORKER_TIMEOUT_MS);
    char *argv[] = {g_exe, "--agent", (char *)role, (char *)name, tmo, NULL};
    a->unshare_pid = spawn_unshare(g_userns, argv, fds[1]);
    close(fds[1]);
    a->fd = fds[0];
    T_CHECK(a->unshare_pid > 0, "fork");
    char line[256];
    T_CHECK(agent_line(a, 10000, line, sizeof(line)), "%s agent did not start", role);
    bool ready = sscanf(line, "ready %d %d", &a->ns_pid, &a->row) == 2;
    T_CHECK(ready, "%s agent: %s", role, line);
    a->inner = child_of(a->unshare_pid);
    T_CHECK(a->inner > 0, "%s agent: no child of unshare %d", role, (int)a->unshare_pid);
    return a;
}

static void agent_stop(struct agent *a)
{
    int st;
    if (!a)
        return;
    kill(a->unshare_pid, SIGKILL); /* --kill-child: the agent goes too */
    t_wait_timeout(a->unshare_pid, 10000, &st);
    close(a->fd);
    free(a);
}

struct fixture {
    char name[T_NAME_LEN];
    hps_shmdb_t *db;
    struct agent *a[3];
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    hps_shmdb_opts_t o = t_opts(4u << 20);
    t_segname(f->name, "pidns");
    HPS_ASSERT_OK(hps_shmdb_create(f->name, &o, NULL, &f->db));
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    for (int i = 0; i < 3; i++)
        agent_stop(f->a[i]);
    hps_shmdb_detach(f->db);
    hps_shmdb_unlink(f->name);
    free(f);
    return 0;
}

/* The host's view of row `row`: 1 alive, 0 listed and dead, -1 absent. */
static int host_view(hps_shmdb_t *db, int row, pid_t *ret_pid)
{
    hps_proc_info_t procs[HPS_SHMDB_MAX_PROCS];
    size_t n = 0;
    HPS_ASSERT_OK(hps_shmdb_procs(db, procs, &n, false));
    for (size_t i = 0; i < n; i++) {
        if (procs[i].slot != row)
            continue;
        if (ret_pid)
            *ret_pid = procs[i].pid;
        return procs[i].alive;
    }
    return -1;
}

/* Both agents up, each pid 1 of its own namespace, and the worker sees
 * the coordinator; the host sees both rows alive with pid 1. */
static void start_pair(struct fixture *f, struct agent **c, struct agent **w)
{
    *c = f->a[0] = agent_start("coordinator", f->name);
    *w = f->a[1] = agent_start("worker", f->name);
    HPS_ASSERT_EQ((*c)->ns_pid, 1);
    HPS_ASSERT_EQ((*w)->ns_pid, 1);
    HPS_ASSERT_NE((*c)->row, (*w)->row);
    uint64_t ms = agent_expect(*w, "coord 1", 5000);
    T_CHECK(ms != UINT64_MAX, "the worker never saw the coordinator (other PID namespace) alive");
    char seen[32];
    snprintf(seen, sizeof(seen), "seen %d", (*w)->row);
    /* The coordinator lists the worker's row before anything is killed:
     * "gone" is reported only for rows it has seen. */
    T_CHECK(agent_expect(*c, seen, 5000) != UINT64_MAX,
            "the coordinator never listed the worker's row %d", (*w)->row);
    for (int i = 0; i < 2; i++) {
        struct agent *a = i ? *w : *c;
        pid_t pid = 0;
        int v = host_view(f->db, a->row, &pid);
        T_CHECK(v == 1 && pid == 1, "host view of row %d: alive %d, pid %d", a->row, v, (int)pid);
    }
    T_CHECK(hps_shmdb_coordinator_attached(f->db), "host: coordinator not attached");
}

static void test_worker_killed(void **state)
{
    struct fixture *f = *state;
    struct agent *c, *w;
    start_pair(f, &c, &w);
    char want[64];
    snprintf(want, sizeof(want), "gone %d", w->row);
    kill(w->inner, SIGKILL);
    uint64_t ms = agent_expect(c, want, 10000);
    T_CHECK(ms <= WORKER_TIMEOUT_MS,
            "the coordinator reaped the killed worker after %lld ms "
            "(worker_timeout_ms %d)",
            ms == UINT64_MAX ? -1LL : (long long)ms, WORKER_TIMEOUT_MS);
    HPS_ASSERT_EQ(host_view(f->db, w->row, NULL), -1);
    HPS_ASSERT_EQ(host_view(f->db, c->row, NULL), 1);
    T_CHECK(hps_shmdb_coordinator_alive(f->db, WORKER_TIMEOUT_MS, true),
            "host: coordinator no longer alive");
}

static void test_coordinator_killed(void **state)
{
    struct fixture *f = *state;
    struct agent *c, *w;
    start_pair(f, &c, &w);
    kill(c->inner, SIGKILL);
    uint64_t ms = agent_expect(w, "coord 0", 10000);
    T_CHECK(ms <= WORKER_TIMEOUT_MS,
            "the worker saw the killed coordinator dead after %lld ms (worker_timeout_ms %d)",
            ms == UINT64_MAX ? -1LL : (long long)ms, WORKER_TIMEOUT_MS);
    T_CHECK(ms < WORKER_TIMEOUT_MS / 2,
            "seen after %llu ms: the heartbeat's age told, not the coordinator's lock",
            (unsigned long long)ms);
    HPS_ASSERT_EQ(host_view(f->db, c->row, NULL), 0); /* listed dead: nobody reaps it */
    HPS_ASSERT_EQ(host_view(f->db, w->row, NULL), 1);
    HPS_ASSERT_EQ(hps_shmdb_coordinator_attached(f->db), false);

    /* A new coordinator, pid 1 again in a third namespace: seen alive. */
    f->a[2] = agent_start("coordinator", f->name);
    HPS_ASSERT_EQ(f->a[2]->ns_pid, 1);
    ms = agent_expect(w, "coord 1", 5000);
    T_CHECK(ms != UINT64_MAX, "the worker never saw the second coordinator alive");
    /* It reaped its dead predecessor's row. */
    for (int i = 0; i < 200 && host_view(f->db, c->row, NULL) == 0; i++)
        t_sleep_ns(5000000);
    HPS_ASSERT_NE(host_view(f->db, c->row, NULL), 0);
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "--agent") == 0)
        return agent(argv[2], argv[3], (uint32_t)atoi(argv[4]));
    ssize_t n = readlink("/proc/self/exe", g_exe, sizeof(g_exe) - 1);
    if (n <= 0) {
        printf("1..0 # SKIP /proc/self/exe unreadable\n");
        return 0;
    }
    g_exe[n] = 0;
    if (!unshare_works(false)) {
        g_userns = true;
        if (!unshare_works(true)) {
            printf("1..0 # SKIP unshare --pid --fork is not permitted here "
                   "(needs CAP_SYS_ADMIN or user namespaces)\n");
            return 0;
        }
    }
    t_install_cleanup();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_worker_killed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_coordinator_killed, setup, teardown),
    };
    return cmocka_run_group_tests_name("mproc-pidns", tests, NULL, NULL);
}
