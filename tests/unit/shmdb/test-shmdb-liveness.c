/*
 * test-shmdb-liveness.c -- the process table's liveness locks (segment.c).
 *
 * A row is alive exactly while its process holds the row's liveness lock
 * (an OFD lock on the segment object), whatever its pid means here:
 *  - a live process is alive; SIGKILLed, it is dead at once (before its
 *    parent even waits for it), listed as not alive until reaped;
 *  - the coordinator's liveness is its row's lock plus its heartbeat: a
 *    killed coordinator is dead at once although its heartbeat is fresh, a
 *    stopped one is alive by its lock but not by its heartbeat, and a row
 *    taken again by another process does not revive it;
 *  - a row handed over (hps_shmdb_detach_handover) stays alive across the
 *    process's execve() until the new image ends;
 *  - a child forked from an attached process does not keep its parent's
 *    row alive, and its detach leaves the parent's row alone;
 *  - several handles of one process are all its own rows (self), and count
 *    as no other process.
 * Cross-PID-namespace runs are in tests/mproc/test-mproc-pidns.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "testutil.h"

#define DEAD_WITHIN_MS 200 /* "at once", with room for a loaded machine */

struct fixture {
    char name[T_NAME_LEN];
    hps_shmdb_t *db;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    hps_shmdb_opts_t o = t_opts(4u << 20);
    hps_shmdb_proc_opts_t po = {.num_threads = 1, .role = HPS_ROLE_TOOL, .device = -1};
    t_segname(f->name, "live");
    HPS_ASSERT_OK(hps_shmdb_create(f->name, &o, &po, &f->db));
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    hps_shmdb_detach(f->db);
    hps_shmdb_unlink(f->name);
    free(f);
    return 0;
}

/* A row of the table by slot; -1 if none. */
static int find_slot(const hps_proc_info_t *p, size_t n, int slot)
{
    for (size_t i = 0; i < n; i++)
        if (p[i].slot == slot)
            return (int)i;
    return -1;
}

static int own_slot(hps_shmdb_t *db)
{
    hps_proc_info_t procs[HPS_SHMDB_MAX_PROCS];
    size_t n = 0;
    HPS_ASSERT_OK(hps_shmdb_procs(db, procs, &n, false));
    for (size_t i = 0; i < n; i++)
        if (procs[i].self)
            return procs[i].slot;
    return -1;
}

enum agent_kind { AGENT_WORKER, AGENT_COORDINATOR, AGENT_FORKER };

struct agent {
    pid_t pid;
    int slot;
    pid_t grandchild; /* AGENT_FORKER: its unattached child */
};

/* A child that attaches (a coordinator beats every 5 ms and says SERVING;
 * a forker forks an unattached child that detaches the inherited handle and
 * sleeps), reports its row and waits to be killed. */
static struct agent agent_start(const char *name, enum agent_kind kind)
{
    int fds[2];
    T_CHECK(pipe(fds) == 0, "pipe");
    struct agent a = {.pid = t_fork(), .slot = -1, .grandchild = 0};
    if (a.pid == 0) {
        t_child_mode();
        close(fds[0]);
        hps_shmdb_proc_opts_t po = {.num_threads = 1,
                                    .role = kind == AGENT_COORDINATOR ? HPS_ROLE_COORDINATOR
                                                                      : HPS_ROLE_WORKER,
                                    .device = 1};
        hps_shmdb_t *db;
        if (hps_shmdb_attach(name, &po, &db) != 0)
            _exit(T_CHILD_FAIL);
        int32_t msg[2] = {own_slot(db), 0};
        if (kind == AGENT_COORDINATOR) {
            hps_shmdb_heartbeat(db);
            hps_shmdb_set_coord_state(db, HPS_COORD_SERVING);
        }
        if (kind == AGENT_FORKER) {
            fflush(NULL);
            pid_t g = fork();
            if (g == 0) { /* no PDEATHSIG: it must outlive its parent */
                prctl(PR_SET_PDEATHSIG, 0);
                hps_shmdb_detach(db); /* not its row: must leave it alone */
                for (int i = 0; i < 300; i++)
                    usleep(100000);
                _exit(0);
            }
            msg[1] = g;
        }
        if (write(fds[1], msg, sizeof(msg)) != (ssize_t)sizeof(msg))
            _exit(3);
        for (int i = 0; i < 60000; i++) { /* at most a minute */
            if (kind == AGENT_COORDINATOR)
                hps_shmdb_heartbeat(db);
            else
                hps_shmdb_proc_heartbeat(db);
            usleep(5000);
        }
        _exit(0);
    }
    close(fds[1]);
    int32_t msg[2];
    T_CHECK(read(fds[0], msg, sizeof(msg)) == (ssize_t)sizeof(msg), "agent %d did not attach",
            (int)a.pid);
    close(fds[0]);
    a.slot = msg[0];
    a.grandchild = msg[1];
    T_CHECK(a.slot >= 0, "agent %d has no row of its own", (int)a.pid);
    return a;
}

static void agent_reap(pid_t pid)
{
    int st;
    T_CHECK(t_wait_timeout(pid, 10000, &st), "agent %d did not end", (int)pid);
}

/* Milliseconds until row `slot` is seen dead (not alive or gone), at most
 * limit_ms; limit_ms + 1 when it stayed alive. */
static uint64_t ms_until_dead(hps_shmdb_t *db, int slot, uint64_t limit_ms)
{
    uint64_t t0 = t_now_ns();
    for (;;) {
        hps_proc_info_t procs[HPS_SHMDB_MAX_PROCS];
        size_t n = 0;
        HPS_ASSERT_OK(hps_shmdb_procs(db, procs, &n, false));
        int i = find_slot(procs, n, slot);
        uint64_t ms = (t_now_ns() - t0) / 1000000ULL;
        if (i < 0 || !procs[i].alive)
            return ms;
        if (ms > limit_ms)
            return limit_ms + 1;
        t_sleep_ns(1000000);
    }
}

static void test_live_then_killed(void **state)
{
    struct fixture *f = *state;
    struct agent a = agent_start(f->name, AGENT_WORKER);
    hps_proc_info_t procs[HPS_SHMDB_MAX_PROCS];
    size_t n = 0;
    HPS_ASSERT_OK(hps_shmdb_procs(f->db, procs, &n, true));
    int i = find_slot(procs, n, a.slot);
    HPS_ASSERT_GE(i, 0);
    HPS_ASSERT_EQ(procs[i].pid, a.pid);
    HPS_ASSERT_EQ(procs[i].role, HPS_ROLE_WORKER);
    T_CHECK(procs[i].alive, "live worker reported dead");
    T_CHECK(!procs[i].self, "another process's row reported as self");
    T_CHECK(hps_shmdb_pid_alive(f->db, a.pid), "live worker's pid not alive");
    HPS_ASSERT_EQ(hps_shmdb_other_procs(f->db), 1);

    /* SIGKILL, and look before waiting for it: the lock is gone with the
     * process's descriptors, a zombie holds none. */
    kill(a.pid, SIGKILL);
    uint64_t ms = ms_until_dead(f->db, a.slot, 5000);
    T_CHECK(ms <= DEAD_WITHIN_MS, "killed worker still alive after %llu ms",
            (unsigned long long)ms);
    HPS_ASSERT_EQ(hps_shmdb_pid_alive(f->db, a.pid), false);
    HPS_ASSERT_EQ(hps_shmdb_other_procs(f->db), 0);
    HPS_ASSERT_OK(hps_shmdb_procs(f->db, procs, &n, false));
    i = find_slot(procs, n, a.slot);
    HPS_ASSERT_GE(i, 0); /* listed, not alive, until reaped */
    HPS_ASSERT_EQ(procs[i].alive, false);
    HPS_ASSERT_OK(hps_shmdb_procs(f->db, procs, &n, true));
    HPS_ASSERT_EQ(find_slot(procs, n, a.slot), -1);
    HPS_ASSERT_GE(find_slot(procs, n, own_slot(f->db)), 0); /* never reaps itself */
    agent_reap(a.pid);
}

static void test_coordinator_killed(void **state)
{
    struct fixture *f = *state;
    struct agent c = agent_start(f->name, AGENT_COORDINATOR);
    T_CHECK(hps_shmdb_coordinator_alive(f->db, 60000, true), "live coordinator not alive");
    T_CHECK(hps_shmdb_coordinator_attached(f->db), "live coordinator not attached");
    HPS_ASSERT_EQ(hps_shmdb_creator_attached(f->db), true); /* we created it */

    kill(c.pid, SIGKILL);
    uint64_t t0 = t_now_ns();
    while (hps_shmdb_coordinator_alive(f->db, 60000, true) && t_now_ns() - t0 < 5000000000ULL)
        t_sleep_ns(1000000);
    uint64_t ms = (t_now_ns() - t0) / 1000000ULL;
    T_CHECK(ms <= DEAD_WITHIN_MS,
            "killed coordinator alive for %llu ms (its heartbeat is fresh: the lock must tell)",
            (unsigned long long)ms);
    HPS_ASSERT_EQ(hps_shmdb_coordinator_attached(f->db), false);
    hps_segment_info_t si;
    HPS_ASSERT_OK(hps_shmdb_segment_info(f->db, &si));
    HPS_ASSERT_EQ(si.coord_pid, c.pid); /* still says who it was */
    agent_reap(c.pid);

    /* Its row, reaped and taken by a worker, does not revive it. */
    hps_proc_info_t procs[HPS_SHMDB_MAX_PROCS];
    size_t n = 0;
    HPS_ASSERT_OK(hps_shmdb_procs(f->db, procs, &n, true));
    struct agent w = agent_start(f->name, AGENT_WORKER);
    HPS_ASSERT_EQ(w.slot, c.slot);
    HPS_ASSERT_EQ(hps_shmdb_coordinator_attached(f->db), false);
    HPS_ASSERT_EQ(hps_shmdb_coordinator_alive(f->db, 60000, false), false);
    /* A new coordinator is. */
    struct agent c2 = agent_start(f->name, AGENT_COORDINATOR);
    T_CHECK(hps_shmdb_coordinator_alive(f->db, 60000, true), "second coordinator not alive");
    kill(w.pid, SIGKILL);
    kill(c2.pid, SIGKILL);
    agent_reap(w.pid);
    agent_reap(c2.pid);
}

/* Stopped (SIGSTOP): alive by its lock, dead by its heartbeat. */
static void test_coordinator_stopped(void **state)
{
    struct fixture *f = *state;
    struct agent c = agent_start(f->name, AGENT_COORDINATOR);
    kill(c.pid, SIGSTOP);
    t_sleep_ns(300000000);
    HPS_ASSERT_EQ(hps_shmdb_coordinator_attached(f->db), true);
    HPS_ASSERT_EQ(hps_shmdb_coordinator_alive(f->db, 100, false), false);
    HPS_ASSERT_EQ(hps_shmdb_coordinator_alive(f->db, 60000, false), true);
    hps_proc_info_t procs[HPS_SHMDB_MAX_PROCS];
    size_t n = 0;
    HPS_ASSERT_OK(hps_shmdb_procs(f->db, procs, &n, true)); /* not reaped: alive */
    HPS_ASSERT_GE(find_slot(procs, n, c.slot), 0);
    kill(c.pid, SIGCONT);
    t_sleep_ns(50000000);
    HPS_ASSERT_EQ(hps_shmdb_coordinator_alive(f->db, 100, false), true);
    kill(c.pid, SIGKILL);
    agent_reap(c.pid);
}

/* hps_shmdb_detach_handover: the row stays alive across the process's
 * execve() (here into sleep(1)) while the handed-over descriptor is open,
 * and is dead once the new image ends. */
static void test_coordinator_handover(void **state)
{
    struct fixture *f = *state;
    int fds[2];
    T_CHECK(pipe(fds) == 0, "pipe");
    pid_t pid = t_fork();
    if (pid == 0) {
        t_child_mode();
        close(fds[0]);
        hps_shmdb_proc_opts_t po = {.num_threads = 1, .role = HPS_ROLE_COORDINATOR, .device = -1};
        hps_shmdb_t *db;
        if (hps_shmdb_attach(f->name, &po, &db) != 0)
            _exit(T_CHILD_FAIL);
        hps_shmdb_heartbeat(db);
        hps_shmdb_set_coord_state(db, HPS_COORD_RELOADING);
        int32_t slot = own_slot(db);
        int fd = hps_shmdb_detach_handover(db);
        if (fd < 0 || write(fds[1], &slot, sizeof(slot)) != (ssize_t)sizeof(slot))
            _exit(3);
        close(fds[1]);
        execl("/bin/sleep", "sleep", "0.5", (char *)NULL);
        _exit(4);
    }
    close(fds[1]);
    int32_t slot = -1;
    T_CHECK(read(fds[0], &slot, sizeof(slot)) == (ssize_t)sizeof(slot), "child did not attach");
    close(fds[0]);
    t_sleep_ns(200000000); /* well into sleep(1): the exec is done */
    char comm[64] = "";
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
    FILE *cf = fopen(path, "r");
    T_CHECK(cf && fgets(comm, sizeof(comm), cf), "cannot read %s", path);
    fclose(cf);
    T_CHECK(strncmp(comm, "sleep", 5) == 0, "the child has not executed sleep: %s", comm);
    T_CHECK(hps_shmdb_coordinator_alive(f->db, 60000, true),
            "the coordinator's row is dead after execve although its lock was handed over");
    hps_proc_info_t procs[HPS_SHMDB_MAX_PROCS];
    size_t n = 0;
    HPS_ASSERT_OK(hps_shmdb_procs(f->db, procs, &n, true)); /* alive: not reaped */
    HPS_ASSERT_GE(find_slot(procs, n, slot), 0);
    agent_reap(pid);
    HPS_ASSERT_EQ(hps_shmdb_coordinator_alive(f->db, 60000, true), false);
    HPS_ASSERT_OK(hps_shmdb_procs(f->db, procs, &n, true)); /* dead: reaped */
    HPS_ASSERT_EQ(find_slot(procs, n, slot), -1);
}

/* A forked child neither keeps its parent's row alive nor frees it. */
static void test_fork_keeps_no_lock(void **state)
{
    struct fixture *f = *state;
    struct agent p = agent_start(f->name, AGENT_FORKER);
    T_CHECK(p.grandchild > 0, "forker reported no child");
    t_sleep_ns(100000000); /* the child has detached its copy of the handle */
    hps_proc_info_t procs[HPS_SHMDB_MAX_PROCS];
    size_t n = 0;
    HPS_ASSERT_OK(hps_shmdb_procs(f->db, procs, &n, false));
    int i = find_slot(procs, n, p.slot);
    HPS_ASSERT_GE(i, 0);
    HPS_ASSERT_EQ(procs[i].pid, p.pid);
    T_CHECK(procs[i].alive, "the child's detach freed its parent's row");
    kill(p.pid, SIGKILL);
    agent_reap(p.pid);
    T_CHECK(kill(p.grandchild, 0) == 0, "forker's child %d died with it", (int)p.grandchild);
    uint64_t ms = ms_until_dead(f->db, p.slot, 2000);
    kill(p.grandchild, SIGKILL); /* not ours to wait for: init reaps it */
    T_CHECK(ms <= DEAD_WITHIN_MS, "a forked child kept its dead parent's row alive (%llu ms)",
            (unsigned long long)ms);
}

/* Two handles of one process: both rows are self and none counts as
 * another process; a detach frees its row at once. */
static void test_own_handles(void **state)
{
    struct fixture *f = *state;
    hps_shmdb_t *db2;
    HPS_ASSERT_OK(hps_shmdb_attach(f->name, NULL, &db2));
    int s1 = own_slot(f->db), s2 = own_slot(db2);
    HPS_ASSERT_GE(s1, 0);
    HPS_ASSERT_GE(s2, 0);
    hps_proc_info_t procs[HPS_SHMDB_MAX_PROCS];
    size_t n = 0;
    HPS_ASSERT_OK(hps_shmdb_procs(f->db, procs, &n, true));
    HPS_ASSERT_EQ(n, 2);
    for (size_t i = 0; i < n; i++) {
        T_CHECK(procs[i].alive && procs[i].self, "row %d: alive %d self %d", procs[i].slot,
                procs[i].alive, procs[i].self);
        HPS_ASSERT_EQ(procs[i].pid, getpid());
    }
    HPS_ASSERT_EQ(hps_shmdb_other_procs(f->db), 0);
    HPS_ASSERT_EQ(hps_shmdb_other_procs(db2), 0);
    HPS_ASSERT_EQ(hps_shmdb_other_rows(f->db), 1); /* db2's: the last one out is not f->db */
    HPS_ASSERT_EQ(hps_shmdb_other_rows(db2), 1);
    T_CHECK(hps_shmdb_pid_alive(f->db, getpid()), "own pid not alive");
    hps_shmdb_detach(db2);
    HPS_ASSERT_EQ(hps_shmdb_other_rows(f->db), 0);
    HPS_ASSERT_OK(hps_shmdb_procs(f->db, procs, &n, false));
    HPS_ASSERT_EQ(n, 1);
    HPS_ASSERT_EQ(procs[0].slot, s1);
}

/* A full process table (this process's handles in every row): an attach
 * gets HPS_EFULL, one with rowless_if_full (hps-shm) attaches without a
 * row, sees every row (this process's: self), and leaves them as they
 * were. */
static void test_full_table_rowless(void **state)
{
    struct fixture *f = *state;
    hps_shmdb_t *h[HPS_SHMDB_MAX_PROCS], *db = NULL;
    size_t k = 0;
    while (k < HPS_SHMDB_MAX_PROCS && hps_shmdb_attach(f->name, NULL, &h[k]) == 0)
        k++;
    HPS_ASSERT_EQ(k, HPS_SHMDB_MAX_PROCS - 1); /* f->db holds the first row */
    HPS_ASSERT_ERR(hps_shmdb_attach(f->name, NULL, &db), HPS_EFULL);
    const hps_shmdb_proc_opts_t look = {.device = -1, .rowless_if_full = true};
    HPS_ASSERT_OK(hps_shmdb_attach(f->name, &look, &db));
    hps_proc_info_t procs[HPS_SHMDB_MAX_PROCS];
    size_t n = 0;
    HPS_ASSERT_OK(hps_shmdb_procs(db, procs, &n, true));
    HPS_ASSERT_EQ(n, HPS_SHMDB_MAX_PROCS);
    for (size_t i = 0; i < n; i++)
        T_CHECK(procs[i].alive && procs[i].self, "row %d: alive %d self %d", procs[i].slot,
                procs[i].alive, procs[i].self);
    hps_shmdb_detach(db);
    HPS_ASSERT_OK(hps_shmdb_procs(f->db, procs, &n, false));
    HPS_ASSERT_EQ(n, HPS_SHMDB_MAX_PROCS); /* the rowless handle freed no row */
    for (size_t i = 0; i < k; i++)
        hps_shmdb_detach(h[i]);
    HPS_ASSERT_OK(hps_shmdb_procs(f->db, procs, &n, false));
    HPS_ASSERT_EQ(n, 1);
}

int main(void)
{
    t_install_cleanup();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_live_then_killed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_coordinator_killed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_coordinator_stopped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_coordinator_handover, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fork_keeps_no_lock, setup, teardown),
        cmocka_unit_test_setup_teardown(test_own_handles, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_table_rowless, setup, teardown),
    };
    return cmocka_run_group_tests_name("shmdb-liveness", tests, NULL, NULL);
}
