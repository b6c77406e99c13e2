/*
 * test-shmdb-gpureg.c -- the GPU-cache registry (hps_shmdb_gcache_*): who
 * creates a cache, who joins it, when an entry is created again, the process
 * lists, the refresher election, the published counters and every error.
 *
 * Other processes are forked "agents": each attaches to the segment and runs
 * the registry calls the test sends it through a pipe, answering through
 * another, until told to exit.  An agent that exited (and was reaped) is a
 * dead process for the registry.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "hps/shmdb_gcache.h"
#include "testutil.h"

#define DIM 16
#define CAP 1000

struct fixture {
    char name[T_NAME_LEN];
    hps_shmdb_t *db;
};

/* ---- agents --------------------------------------------------------------- */

enum op { OP_CLAIM, OP_READY, OP_LEAVE, OP_PRUNE, OP_EXIT };

struct cmd {
    enum op op;
    hps_gcache_reg_t want; /* OP_CLAIM */
    uint32_t index;
    uint64_t generation;
    uint64_t capacity_rows, bytes; /* OP_READY */
};

struct res {
    hps_err_t rc;
    hps_gcache_reg_t reg; /* OP_CLAIM */
    bool creator;         /* OP_CLAIM */
    uint32_t dropped;     /* OP_PRUNE */
    bool refresher;       /* OP_PRUNE */
};

struct agent {
    pid_t pid;
    int cmd_w, res_r;
};

static bool full_io(int fd, void *buf, size_t len, bool wr)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = wr ? write(fd, p, len) : read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t)n;
    }
    return true;
}

static struct res agent_do(hps_shmdb_t *db, const struct cmd *c)
{
    struct res r;
    memset(&r, 0, sizeof(r));
    switch (c->op) {
    case OP_CLAIM:
        r.rc = hps_shmdb_gcache_claim(db, &c->want, &r.reg, &r.creator);
        break;
    case OP_READY:
        r.rc = hps_shmdb_gcache_ready(db, c->index, c->generation, c->capacity_rows, c->bytes);
        break;
    case OP_LEAVE:
        r.rc = hps_shmdb_gcache_leave(db, c->index, c->generation);
        break;
    case OP_PRUNE:
        r.rc = hps_shmdb_gcache_prune(db, c->index, c->generation, &r.dropped, &r.refresher);
        break;
    default:
        break;
    }
    return r;
}

static void agent_main(const char *name, int cmd_r, int res_w)
{
    t_child_mode();
    hps_shmdb_t *db;
    HPS_ASSERT_OK(hps_shmdb_attach(name, NULL, &db));
    struct cmd c;
    while (full_io(cmd_r, &c, sizeof(c), false) && c.op != OP_EXIT) {
        struct res r = agent_do(db, &c);
        if (!full_io(res_w, &r, sizeof(r), true))
            break;
    }
    hps_shmdb_detach(db);
    _exit(0);
}

static struct agent agent_start(const char *name)
{
    int cp[2], rp[2];
    T_CHECK(pipe(cp) == 0 && pipe(rp) == 0, "pipe: %s", strerror(errno));
    struct agent a = {.pid = t_fork(), .cmd_w = cp[1], .res_r = rp[0]};
    if (a.pid == 0) {
        close(cp[1]);
        close(rp[0]);
        agent_main(name, cp[0], rp[1]);
    }
    close(cp[0]);
    close(rp[1]);
    return a;
}

static struct res agent_call(struct agent *a, const struct cmd *c)
{
    struct res r;
    T_CHECK(full_io(a->cmd_w, (void *)c, sizeof(*c), true), "agent %d gone", (int)a->pid);
    T_CHECK(full_io(a->res_r, &r, sizeof(r), false), "agent %d did not answer", (int)a->pid);
    return r;
}

/* The agent exits and is reaped: from now on a dead process. */
static void agent_exit(struct agent *a)
{
    struct cmd c = {.op = OP_EXIT};
    int st = 0;
    char buf[64];
    (void)full_io(a->cmd_w, &c, sizeof(c), true);
    T_CHECK(t_wait_timeout(a->pid, 10000, &st), "agent %d did not exit", (int)a->pid);
    T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "agent %d: %s", (int)a->pid,
            t_status_str(st, buf, sizeof(buf)));
    close(a->cmd_w);
    close(a->res_r);
}

static struct res agent_claim(struct agent *a, const hps_gcache_reg_t *want)
{
    struct cmd c = {.op = OP_CLAIM, .want = *want};
    return agent_call(a, &c);
}

static struct res agent_op(struct agent *a, enum op op, uint32_t index, uint64_t gen)
{
    struct cmd c = {.op = op, .index = index, .generation = gen};
    return agent_call(a, &c);
}

static struct res agent_ready(struct agent *a, uint32_t index, uint64_t gen, uint64_t cap,
                              uint64_t bytes)
{
    struct cmd c = {
        .op = OP_READY, .index = index, .generation = gen, .capacity_rows = cap, .bytes = bytes};
    return agent_call(a, &c);
}

/* ---- helpers -------------------------------------------------------------- */

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    hps_shmdb_opts_t o = t_opts(16u << 20);
    t_segname(f->name, "gpureg");
    HPS_ASSERT_OK(hps_shmdb_create(f->name, &o, NULL, &f->db));
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

static hps_gcache_reg_t want_of(uint32_t table_id, int32_t device)
{
    hps_gcache_reg_t w;
    memset(&w, 0, sizeof(w));
    w.table_id = table_id;
    w.device = device;
    w.dim = DIM;
    w.policy = 0;
    w.capacity_rows = CAP;
    return w;
}

static bool has_pid(const hps_gcache_reg_t *r, pid_t pid)
{
    for (uint32_t i = 0; i < r->num_pids; i++)
        if (r->pids[i] == pid)
            return true;
    return false;
}

static hps_gcache_reg_t get(struct fixture *f, uint32_t index)
{
    hps_gcache_reg_t r;
    HPS_ASSERT_OK(hps_shmdb_gcache_get(f->db, index, &r));
    return r;
}

/* This process creates (table, device) and makes it READY. */
static hps_gcache_reg_t create_ready(struct fixture *f, uint32_t table_id, int32_t device)
{
    hps_gcache_reg_t w = want_of(table_id, device), r;
    bool creator = false;
    HPS_ASSERT_OK(hps_shmdb_gcache_claim(f->db, &w, &r, &creator));
    HPS_ASSERT_EQ(creator, true);
    HPS_ASSERT_OK(hps_shmdb_gcache_ready(f->db, r.index, r.generation, CAP, 4096));
    return get(f, r.index);
}

/* ---- tests ---------------------------------------------------------------- */

static void test_claim_empty(void **state)
{
    struct fixture *f = *state;
    hps_gcache_reg_t w = want_of(3, 1), r;
    HPS_ASSERT_ERR(hps_shmdb_gcache_get(f->db, 0, &r), HPS_ENOTFOUND); /* no registry yet */
    w.bytes = 123;
    bool creator = false;
    HPS_ASSERT_OK(hps_shmdb_gcache_claim(f->db, &w, &r, &creator));
    pid_t me = getpid();
    HPS_ASSERT_EQ(creator, true);
    HPS_ASSERT_EQ(r.index, 0);
    HPS_ASSERT_EQ(r.state, HPS_GCACHE_CREATING);
    HPS_ASSERT_EQ(r.generation, 1);
    HPS_ASSERT_EQ(r.table_id, 3);
    HPS_ASSERT_EQ(r.device, 1);
    HPS_ASSERT_EQ(r.dim, DIM);
    HPS_ASSERT_EQ(r.capacity_rows, CAP);
    HPS_ASSERT_EQ(r.num_pids, 1);
    HPS_ASSERT_EQ(r.pids[0], me);
    HPS_ASSERT_EQ(r.creator_pid, me);
    HPS_ASSERT_EQ(r.refresher_pid, me);
    hps_gcache_reg_t g = get(f, 0);
    HPS_ASSERT_EQ(g.state, HPS_GCACHE_CREATING);
    HPS_ASSERT_EQ(g.generation, 1);
    HPS_ASSERT_EQ(g.num_pids, 1);
    HPS_ASSERT_EQ(g.pids[0], me);
    HPS_ASSERT_EQ(get(f, 1).state, HPS_GCACHE_FREE);
    HPS_ASSERT_EQ(get(f, 1).num_pids, 0);
}

/* Busy while being created, joined once ready: same generation, the
 * creator's final capacity, both processes listed. */
static void test_busy_then_join(void **state)
{
    struct fixture *f = *state;
    hps_gcache_reg_t w = want_of(5, 0), r;
    bool creator = false;
    HPS_ASSERT_OK(hps_shmdb_gcache_claim(f->db, &w, &r, &creator));
    struct agent a = agent_start(f->name);
    struct res ar = agent_claim(&a, &w);
    HPS_ASSERT_ERR(ar.rc, HPS_EBUSY);
    HPS_ASSERT_OK(hps_shmdb_gcache_ready(f->db, r.index, r.generation, 2048, 65536));
    w.capacity_rows = 7; /* a joiner's wish does not change the entry */
    ar = agent_claim(&a, &w);
    HPS_ASSERT_OK(ar.rc);
    HPS_ASSERT_EQ(ar.creator, false);
    HPS_ASSERT_EQ(ar.reg.index, r.index);
    HPS_ASSERT_EQ(ar.reg.generation, 1);
    HPS_ASSERT_EQ(ar.reg.state, HPS_GCACHE_READY);
    HPS_ASSERT_EQ(ar.reg.capacity_rows, 2048);
    HPS_ASSERT_EQ(ar.reg.bytes, 65536);
    HPS_ASSERT_EQ(ar.reg.num_pids, 2);
    HPS_ASSERT_EQ(has_pid(&ar.reg, getpid()), true);
    HPS_ASSERT_EQ(has_pid(&ar.reg, a.pid), true);
    HPS_ASSERT_EQ(ar.reg.creator_pid, getpid());
    HPS_ASSERT_EQ(ar.reg.refresher_pid, getpid());
    /* Joining twice does not list the agent twice. */
    ar = agent_claim(&a, &w);
    HPS_ASSERT_OK(ar.rc);
    HPS_ASSERT_EQ(ar.reg.num_pids, 2);
    agent_exit(&a);
    hps_gcache_reg_t g = get(f, r.index);
    HPS_ASSERT_EQ(g.num_pids, 1); /* get leaves the dead agent out */
    HPS_ASSERT_EQ(g.pids[0], getpid());
}

/* A process that left and claims again is listed once, even with a free
 * slot before its own. */
static void test_rejoin_listed_once(void **state)
{
    struct fixture *f = *state;
    hps_gcache_reg_t w = want_of(5, 0);
    struct agent a = agent_start(f->name);
    struct res ar = agent_claim(&a, &w);
    HPS_ASSERT_EQ(ar.creator, true);
    HPS_ASSERT_OK(agent_ready(&a, ar.reg.index, ar.reg.generation, CAP, 1).rc);
    hps_gcache_reg_t r;
    bool creator = true;
    HPS_ASSERT_OK(hps_shmdb_gcache_claim(f->db, &w, &r, &creator)); /* pids [a, me] */
    HPS_ASSERT_EQ(creator, false);
    HPS_ASSERT_OK(agent_op(&a, OP_LEAVE, r.index, r.generation).rc); /* pids [0, me] */
    HPS_ASSERT_OK(hps_shmdb_gcache_claim(f->db, &w, &r, &creator));
    HPS_ASSERT_EQ(creator, false);
    HPS_ASSERT_EQ(r.num_pids, 1);
    HPS_ASSERT_EQ(r.pids[0], getpid());
    HPS_ASSERT_OK(hps_shmdb_gcache_leave(f->db, r.index, r.generation));
    HPS_ASSERT_EQ(get(f, r.index).state, HPS_GCACHE_FREE); /* nobody listed twice */
    agent_exit(&a);
}

static void test_mismatch(void **state)
{
    struct fixture *f = *state;
    hps_gcache_reg_t e = create_ready(f, 2, 0);
    struct agent a = agent_start(f->name);
    hps_gcache_reg_t w = want_of(2, 0);
    w.dim = DIM + 1;
    HPS_ASSERT_ERR(agent_claim(&a, &w).rc, HPS_EMISMATCH);
    w = want_of(2, 0);
    w.policy = 1;
    HPS_ASSERT_ERR(agent_claim(&a, &w).rc, HPS_EMISMATCH);
    hps_gcache_reg_t g = get(f, e.index);
    HPS_ASSERT_EQ(g.num_pids, 1); /* the refused agent was not listed */
    HPS_ASSERT_EQ(g.dim, DIM);
    HPS_ASSERT_EQ(g.policy, 0);
    agent_exit(&a);
}

static void test_separate_entries(void **state)
{
    struct fixture *f = *state;
    hps_gcache_reg_t e0 = create_ready(f, 1, 0);
    hps_gcache_reg_t e1 = create_ready(f, 2, 0); /* other table */
    hps_gcache_reg_t e2 = create_ready(f, 1, 1); /* other device */
    HPS_ASSERT_EQ(e0.index, 0);
    HPS_ASSERT_EQ(e1.index, 1);
    HPS_ASSERT_EQ(e2.index, 2);
    HPS_ASSERT_EQ(e1.generation, 1);
    HPS_ASSERT_EQ(e2.generation, 1);
    HPS_ASSERT_EQ(e1.table_id, 2);
    HPS_ASSERT_EQ(e2.device, 1);
    /* and each is found again by its own key */
    hps_gcache_reg_t w = want_of(1, 1), r;
    bool creator = true;
    HPS_ASSERT_OK(hps_shmdb_gcache_claim(f->db, &w, &r, &creator));
    HPS_ASSERT_EQ(creator, false);
    HPS_ASSERT_EQ(r.index, 2);
    HPS_ASSERT_EQ(r.num_pids, 1);
}

/* Every listed process dead: the memory is gone, the next claim creates the
 * cache again (generation + 1); also for a creator that died while CREATING. */
static void test_dead_recreate(void **state)
{
    struct fixture *f = *state;
    struct agent a = agent_start(f->name), b = agent_start(f->name);
    hps_gcache_reg_t w = want_of(9, 0);
    struct res ar = agent_claim(&a, &w);
    HPS_ASSERT_EQ(ar.creator, true);
    HPS_ASSERT_OK(agent_ready(&a, ar.reg.index, 1, CAP, 512).rc);
    struct res br = agent_claim(&b, &w);
    HPS_ASSERT_OK(br.rc);
    HPS_ASSERT_EQ(br.creator, false);
    agent_exit(&a);
    agent_exit(&b);
    w.capacity_rows = 300;
    hps_gcache_reg_t r;
    bool creator = false;
    HPS_ASSERT_OK(hps_shmdb_gcache_claim(f->db, &w, &r, &creator));
    HPS_ASSERT_EQ(creator, true);
    HPS_ASSERT_EQ(r.index, ar.reg.index);
    HPS_ASSERT_EQ(r.generation, 2);
    HPS_ASSERT_EQ(r.state, HPS_GCACHE_CREATING);
    HPS_ASSERT_EQ(r.capacity_rows, 300);
    HPS_ASSERT_EQ(r.num_pids, 1);
    HPS_ASSERT_EQ(r.pids[0], getpid());
    HPS_ASSERT_EQ(r.creator_pid, getpid());
    HPS_ASSERT_EQ(r.refresher_pid, getpid());

    /* A creator dead in CREATING: no EBUSY, a new generation. */
    struct agent c = agent_start(f->name);
    w = want_of(10, 0);
    struct res cr = agent_claim(&c, &w);
    HPS_ASSERT_EQ(cr.creator, true);
    HPS_ASSERT_ERR(hps_shmdb_gcache_claim(f->db, &w, &r, &creator), HPS_EBUSY);
    agent_exit(&c);
    HPS_ASSERT_OK(hps_shmdb_gcache_claim(f->db, &w, &r, &creator));
    HPS_ASSERT_EQ(creator, true);
    HPS_ASSERT_EQ(r.index, cr.reg.index);
    HPS_ASSERT_EQ(r.generation, 2);
}

static void test_prune(void **state)
{
    struct fixture *f = *state;
    struct agent a = agent_start(f->name), b = agent_start(f->name);
    hps_gcache_reg_t w = want_of(4, 0), r;
    struct res ar = agent_claim(&a, &w); /* a creates: a is the refresher */
    HPS_ASSERT_OK(agent_ready(&a, ar.reg.index, 1, CAP, 512).rc);
    bool creator = true, refresher = false;
    HPS_ASSERT_OK(hps_shmdb_gcache_claim(f->db, &w, &r, &creator));
    HPS_ASSERT_OK(agent_claim(&b, &w).rc);
    uint32_t dropped = 99;
    HPS_ASSERT_OK(hps_shmdb_gcache_prune(f->db, r.index, 1, &dropped, &refresher));
    HPS_ASSERT_EQ(dropped, 0);
    HPS_ASSERT_EQ(refresher, false); /* a is alive */
    HPS_ASSERT_EQ(get(f, r.index).refresher_pid, a.pid);

    agent_exit(&a);
    HPS_ASSERT_OK(hps_shmdb_gcache_prune(f->db, r.index, 1, &dropped, &refresher));
    HPS_ASSERT_EQ(dropped, 1);
    HPS_ASSERT_EQ(refresher, true);
    hps_gcache_reg_t g = get(f, r.index);
    HPS_ASSERT_EQ(g.refresher_pid, getpid());
    HPS_ASSERT_EQ(g.creator_pid, a.pid);
    HPS_ASSERT_EQ(g.num_pids, 2);
    HPS_ASSERT_EQ(has_pid(&g, getpid()), true);
    HPS_ASSERT_EQ(has_pid(&g, b.pid), true);

    struct res br = agent_op(&b, OP_PRUNE, r.index, 1); /* nothing to do for b */
    HPS_ASSERT_OK(br.rc);
    HPS_ASSERT_EQ(br.dropped, 0);
    HPS_ASSERT_EQ(br.refresher, false);
    agent_exit(&b);
    HPS_ASSERT_OK(hps_shmdb_gcache_prune(f->db, r.index, 1, NULL, NULL)); /* NULL outputs */
    HPS_ASSERT_OK(hps_shmdb_gcache_prune(f->db, r.index, 1, &dropped, &refresher));
    HPS_ASSERT_EQ(dropped, 0); /* b was dropped by the call before */
    HPS_ASSERT_EQ(refresher, true);
    HPS_ASSERT_EQ(get(f, r.index).num_pids, 1);
}

static void test_leave(void **state)
{
    struct fixture *f = *state;
    hps_gcache_reg_t e = create_ready(f, 6, 2);
    struct agent a = agent_start(f->name);
    hps_gcache_reg_t w = want_of(6, 2);
    HPS_ASSERT_OK(agent_claim(&a, &w).rc);
    HPS_ASSERT_OK(hps_shmdb_gcache_leave(f->db, e.index, 1));
    hps_gcache_reg_t g = get(f, e.index);
    HPS_ASSERT_EQ(g.state, HPS_GCACHE_READY);
    HPS_ASSERT_EQ(g.num_pids, 1);
    HPS_ASSERT_EQ(g.pids[0], a.pid);
    HPS_ASSERT_EQ(g.refresher_pid, 0); /* the refresher left: none until a prune */
    HPS_ASSERT_ERR(hps_shmdb_gcache_leave(f->db, e.index, 1), HPS_ENOTFOUND); /* not listed */
    struct res ar = agent_op(&a, OP_PRUNE, e.index, 1);
    HPS_ASSERT_OK(ar.rc);
    HPS_ASSERT_EQ(ar.refresher, true);
    HPS_ASSERT_EQ(get(f, e.index).refresher_pid, a.pid);
    HPS_ASSERT_OK(agent_op(&a, OP_LEAVE, e.index, 1).rc);
    g = get(f, e.index);
    HPS_ASSERT_EQ(g.state, HPS_GCACHE_FREE);
    HPS_ASSERT_EQ(g.num_pids, 0);
    agent_exit(&a);

    /* The free entry is reused: a new generation. */
    bool creator = false;
    HPS_ASSERT_OK(hps_shmdb_gcache_claim(f->db, &w, &g, &creator));
    HPS_ASSERT_EQ(creator, true);
    HPS_ASSERT_EQ(g.index, e.index);
    HPS_ASSERT_EQ(g.generation, 2);

    /* Leaving when the others are all dead frees the entry too. */
    hps_gcache_reg_t w2 = want_of(7, 2);
    struct agent b = agent_start(f->name);
    struct res br = agent_claim(&b, &w2);
    HPS_ASSERT_OK(agent_ready(&b, br.reg.index, 1, CAP, 1).rc);
    HPS_ASSERT_OK(hps_shmdb_gcache_claim(f->db, &w2, &g, &creator));
    HPS_ASSERT_EQ(creator, false);
    agent_exit(&b);
    HPS_ASSERT_OK(hps_shmdb_gcache_leave(f->db, g.index, 1));
    HPS_ASSERT_EQ(get(f, g.index).state, HPS_GCACHE_FREE);
}

static void test_publish_get(void **state)
{
    struct fixture *f = *state;
    hps_gcache_reg_t e = create_ready(f, 8, 0);
    hps_gcache_counters_t c = {
        .occupied = 1000001,
        .lookups = 2000000000002ull,
        .hits = 3000003,
        .inserts = 4000004,
        .evictions = 5000005,
        .refreshed = 6000006,
        .full_refreshes = 7,
        .lock_timeouts = 8,
        .repaired_sets = 9,
        .published_ns = UINT64_MAX - 10,
    };
    HPS_ASSERT_EQ(get(f, e.index).counters.lookups, 0);
    HPS_ASSERT_OK(hps_shmdb_gcache_publish(f->db, e.index, 1, &c));
    hps_gcache_reg_t g = get(f, e.index);
    HPS_ASSERT_EQ(g.counters.occupied, 1000001);
    HPS_ASSERT_EQ(g.counters.lookups, 2000000000002ull);
    HPS_ASSERT_EQ(g.counters.hits, 3000003);
    HPS_ASSERT_EQ(g.counters.inserts, 4000004);
    HPS_ASSERT_EQ(g.counters.evictions, 5000005);
    HPS_ASSERT_EQ(g.counters.refreshed, 6000006);
    HPS_ASSERT_EQ(g.counters.full_refreshes, 7);
    HPS_ASSERT_EQ(g.counters.lock_timeouts, 8);
    HPS_ASSERT_EQ(g.counters.repaired_sets, 9);
    HPS_ASSERT_EQ(g.counters.published_ns, UINT64_MAX - 10);
    /* Another process reads the same snapshot... */
    struct agent a = agent_start(f->name);
    hps_gcache_reg_t w = want_of(8, 0);
    struct res ar = agent_claim(&a, &w);
    HPS_ASSERT_OK(ar.rc);
    HPS_ASSERT_EQ(memcmp(&ar.reg.counters, &c, sizeof(c)), 0);
    agent_exit(&a);
    /* ...and a new generation starts from zero. */
    HPS_ASSERT_OK(hps_shmdb_gcache_leave(f->db, e.index, 1));
    bool creator = false;
    HPS_ASSERT_OK(hps_shmdb_gcache_claim(f->db, &w, &g, &creator));
    HPS_ASSERT_EQ(g.generation, 2);
    HPS_ASSERT_EQ(g.counters.lookups, 0);
    HPS_ASSERT_EQ(g.counters.published_ns, 0);
}

/* Calls for an older generation, or for an entry that became FREE. */
static void test_stale_generation(void **state)
{
    struct fixture *f = *state;
    hps_gcache_counters_t c = {.lookups = 1};
    hps_gcache_reg_t w = want_of(11, 0), r;
    bool creator = false;
    HPS_ASSERT_OK(hps_shmdb_gcache_claim(f->db, &w, &r, &creator));
    HPS_ASSERT_ERR(hps_shmdb_gcache_ready(f->db, r.index, 2, CAP, 1), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_gcache_leave(f->db, r.index, 0), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_gcache_prune(f->db, r.index, 2, NULL, NULL), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_gcache_publish(f->db, r.index, 2, &c), HPS_ENOTFOUND);
    HPS_ASSERT_EQ(get(f, r.index).state, HPS_GCACHE_CREATING); /* untouched */
    HPS_ASSERT_EQ(get(f, r.index).counters.lookups, 0);

    /* Left (FREE, generation still 1): every call of generation 1 is stale. */
    HPS_ASSERT_OK(hps_shmdb_gcache_leave(f->db, r.index, 1));
    HPS_ASSERT_ERR(hps_shmdb_gcache_ready(f->db, r.index, 1, CAP, 1), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_gcache_leave(f->db, r.index, 1), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_gcache_prune(f->db, r.index, 1, NULL, NULL), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_gcache_publish(f->db, r.index, 1, &c), HPS_ENOTFOUND);
    HPS_ASSERT_EQ(get(f, r.index).state, HPS_GCACHE_FREE);
    HPS_ASSERT_EQ(get(f, r.index).counters.lookups, 0);

    /* Re-created (generation 2): generation 1 is stale. */
    HPS_ASSERT_OK(hps_shmdb_gcache_claim(f->db, &w, &r, &creator));
    HPS_ASSERT_EQ(r.generation, 2);
    HPS_ASSERT_ERR(hps_shmdb_gcache_ready(f->db, r.index, 1, CAP, 1), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_gcache_prune(f->db, r.index, 1, NULL, NULL), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_gcache_publish(f->db, r.index, 1, &c), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_gcache_leave(f->db, r.index, 1), HPS_ENOTFOUND);
    HPS_ASSERT_OK(hps_shmdb_gcache_ready(f->db, r.index, 2, CAP, 1));
    HPS_ASSERT_EQ(get(f, r.index).state, HPS_GCACHE_READY);
}

static void test_bad_arguments(void **state)
{
    struct fixture *f = *state;
    hps_gcache_counters_t c = {0};
    hps_gcache_reg_t w = want_of(1, 0), r;
    bool creator;
    /* No registry yet. */
    HPS_ASSERT_ERR(hps_shmdb_gcache_publish(f->db, 0, 1, &c), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_gcache_claim(NULL, &w, &r, &creator), HPS_EINVAL);
    HPS_ASSERT_ERR(hps_shmdb_gcache_claim(f->db, NULL, &r, &creator), HPS_EINVAL);
    HPS_ASSERT_ERR(hps_shmdb_gcache_claim(f->db, &w, NULL, &creator), HPS_EINVAL);
    HPS_ASSERT_ERR(hps_shmdb_gcache_claim(f->db, &w, &r, NULL), HPS_EINVAL);
    w.capacity_rows = 0;
    HPS_ASSERT_ERR(hps_shmdb_gcache_claim(f->db, &w, &r, &creator), HPS_EINVAL);
    w = want_of(1, 0);
    w.dim = 0;
    HPS_ASSERT_ERR(hps_shmdb_gcache_claim(f->db, &w, &r, &creator), HPS_EINVAL);
    w = want_of(1, 0);
    HPS_ASSERT_OK(hps_shmdb_gcache_claim(f->db, &w, &r, &creator));
    const uint32_t bad = HPS_SHMDB_MAX_GCACHES;
    HPS_ASSERT_ERR(hps_shmdb_gcache_ready(f->db, bad, 1, CAP, 1), HPS_EINVAL);
    HPS_ASSERT_ERR(hps_shmdb_gcache_leave(f->db, bad, 1), HPS_EINVAL);
    HPS_ASSERT_ERR(hps_shmdb_gcache_prune(f->db, bad, 1, NULL, NULL), HPS_EINVAL);
    HPS_ASSERT_ERR(hps_shmdb_gcache_publish(f->db, bad, 1, &c), HPS_EINVAL);
    HPS_ASSERT_ERR(hps_shmdb_gcache_publish(f->db, 0, 1, NULL), HPS_EINVAL);
    HPS_ASSERT_ERR(hps_shmdb_gcache_get(f->db, bad, &r), HPS_EINVAL);
    HPS_ASSERT_ERR(hps_shmdb_gcache_get(f->db, 0, NULL), HPS_EINVAL);
    HPS_ASSERT_ERR(hps_shmdb_gcache_get(NULL, 0, &r), HPS_EINVAL);
    HPS_ASSERT_ERR(hps_shmdb_gcache_ready(NULL, 0, 1, CAP, 1), HPS_EINVAL);
    HPS_ASSERT_ERR(hps_shmdb_gcache_leave(NULL, 0, 1), HPS_EINVAL);
    HPS_ASSERT_ERR(hps_shmdb_gcache_prune(NULL, 0, 1, NULL, NULL), HPS_EINVAL);
    HPS_ASSERT_ERR(hps_shmdb_gcache_publish(NULL, 0, 1, &c), HPS_EINVAL);
    HPS_ASSERT_EQ(get(f, 0).state, HPS_GCACHE_CREATING); /* none of that changed it */
    HPS_ASSERT_EQ(get(f, 0).generation, 1);
}

static void test_registry_full(void **state)
{
    struct fixture *f = *state;
    hps_gcache_reg_t w, r;
    bool creator = false;
    for (uint32_t t = 0; t < HPS_SHMDB_MAX_GCACHES; t++) {
        w = want_of(100 + t, 0);
        HPS_ASSERT_OK(hps_shmdb_gcache_claim(f->db, &w, &r, &creator));
        HPS_ASSERT_EQ(creator, true);
        HPS_ASSERT_EQ(r.index, t);
    }
    w = want_of(100 + HPS_SHMDB_MAX_GCACHES, 0);
    HPS_ASSERT_ERR(hps_shmdb_gcache_claim(f->db, &w, &r, &creator), HPS_EFULL);
    w = want_of(100, 1); /* same table, other device: a new entry too */
    HPS_ASSERT_ERR(hps_shmdb_gcache_claim(f->db, &w, &r, &creator), HPS_EFULL);
    /* One leaves: its entry is the one reused. */
    HPS_ASSERT_OK(hps_shmdb_gcache_leave(f->db, 17, 1));
    HPS_ASSERT_OK(hps_shmdb_gcache_claim(f->db, &w, &r, &creator));
    HPS_ASSERT_EQ(creator, true);
    HPS_ASSERT_EQ(r.index, 17);
    HPS_ASSERT_EQ(r.generation, 2);
}

/* HPS_SHMDB_GCACHE_PROCS live processes listed: one more gets HPS_EFULL. */
static void test_process_list_full(void **state)
{
    struct fixture *f = *state;
    hps_gcache_reg_t e = create_ready(f, 12, 0);
    hps_gcache_reg_t w = want_of(12, 0);
    struct agent a[HPS_SHMDB_GCACHE_PROCS];
    for (int i = 0; i < HPS_SHMDB_GCACHE_PROCS; i++) {
        a[i] = agent_start(f->name);
        struct res ar = agent_claim(&a[i], &w);
        HPS_ASSERT_ERR(ar.rc, i < HPS_SHMDB_GCACHE_PROCS - 1 ? 0 : HPS_EFULL);
    }
    HPS_ASSERT_EQ(get(f, e.index).num_pids, HPS_SHMDB_GCACHE_PROCS);
    agent_exit(&a[0]); /* its slot goes to the next claimer */
    struct res ar = agent_claim(&a[HPS_SHMDB_GCACHE_PROCS - 1], &w);
    HPS_ASSERT_OK(ar.rc);
    HPS_ASSERT_EQ(ar.reg.num_pids, HPS_SHMDB_GCACHE_PROCS);
    HPS_ASSERT_EQ(has_pid(&ar.reg, a[HPS_SHMDB_GCACHE_PROCS - 1].pid), true);
    HPS_ASSERT_EQ(has_pid(&ar.reg, a[0].pid), false);
    for (int i = 1; i < HPS_SHMDB_GCACHE_PROCS; i++)
        agent_exit(&a[i]);
}

/* A sharded cache: one entry per table whatever the devices, separate from
 * the table's per-device entries; its shard devices are recorded at claim,
 * its parts and shard bytes before READY, per-shard counters published; a
 * claim with other shard devices is a mismatch; bad shard counts and part
 * counts are refused. */
static void test_sharded(void **state)
{
    struct fixture *f = *state;
    hps_gcache_reg_t w = want_of(4, HPS_SHMDB_GCACHE_SHARDED), r;
    w.num_shards = 2;
    w.shard_dev[0] = 1;
    w.shard_dev[1] = 0;
    bool creator = false;
    HPS_ASSERT_OK(hps_shmdb_gcache_claim(f->db, &w, &r, &creator));
    HPS_ASSERT_EQ(creator, true);
    HPS_ASSERT_EQ(r.device, HPS_SHMDB_GCACHE_SHARDED);
    HPS_ASSERT_EQ(r.num_shards, 2);
    HPS_ASSERT_EQ(r.shard_dev[0], 1);
    HPS_ASSERT_EQ(r.shard_dev[1], 0);
    hps_gcache_reg_t d0 = create_ready(f, 4, 0); /* the same table replicated: its own entry */
    HPS_ASSERT_NE(d0.index, r.index);
    HPS_ASSERT_EQ(d0.num_shards, 1);
    HPS_ASSERT_EQ(d0.shard_dev[0], 0);
    HPS_ASSERT_EQ(d0.num_parts, 1);
    uint64_t sb[HPS_SHMDB_GCACHE_SHARDS] = {6u << 20, 8u << 20};
    HPS_ASSERT_ERR(hps_shmdb_gcache_parts(f->db, r.index, r.generation, 0, sb), HPS_EINVAL);
    HPS_ASSERT_ERR(hps_shmdb_gcache_parts(f->db, r.index, r.generation, 3, NULL), HPS_EINVAL);
    HPS_ASSERT_ERR(hps_shmdb_gcache_parts(f->db, r.index, r.generation + 1, 3, sb), HPS_ENOTFOUND);
    HPS_ASSERT_OK(hps_shmdb_gcache_parts(f->db, r.index, r.generation, 3, sb));
    HPS_ASSERT_OK(hps_shmdb_gcache_ready(f->db, r.index, r.generation, CAP, 14u << 20));
    hps_gcache_counters_t k = {.occupied = 30, .shard_occupied = {10, 20}};
    HPS_ASSERT_OK(hps_shmdb_gcache_publish(f->db, r.index, r.generation, &k));
    hps_gcache_reg_t g = get(f, r.index);
    HPS_ASSERT_EQ(g.state, HPS_GCACHE_READY);
    HPS_ASSERT_EQ(g.num_parts, 3);
    HPS_ASSERT_EQ(g.shard_bytes[0], 6u << 20);
    HPS_ASSERT_EQ(g.shard_bytes[1], 8u << 20);
    HPS_ASSERT_EQ(g.counters.shard_occupied[0], 10);
    HPS_ASSERT_EQ(g.counters.shard_occupied[1], 20);
    /* joining: the same devices in the same order, else a mismatch */
    hps_gcache_reg_t j;
    HPS_ASSERT_OK(hps_shmdb_gcache_claim(f->db, &w, &j, &creator));
    HPS_ASSERT_EQ(creator, false);
    HPS_ASSERT_EQ(j.index, r.index);
    w.shard_dev[0] = 0;
    w.shard_dev[1] = 1;
    HPS_ASSERT_ERR(hps_shmdb_gcache_claim(f->db, &w, &j, &creator), HPS_EMISMATCH);
    w.num_shards = 3;
    HPS_ASSERT_ERR(hps_shmdb_gcache_claim(f->db, &w, &j, &creator), HPS_EMISMATCH);
    w.num_shards = 0;
    HPS_ASSERT_ERR(hps_shmdb_gcache_claim(f->db, &w, &j, &creator), HPS_EINVAL);
    w.num_shards = HPS_SHMDB_GCACHE_SHARDS + 1;
    HPS_ASSERT_ERR(hps_shmdb_gcache_claim(f->db, &w, &j, &creator), HPS_EINVAL);
}

int main(void)
{
    t_install_cleanup();
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_claim_empty),
        T(test_busy_then_join),
        T(test_rejoin_listed_once),
        T(test_mismatch),
        T(test_separate_entries),
        T(test_dead_recreate),
        T(test_prune),
        T(test_leave),
        T(test_publish_get),
        T(test_stale_generation),
        T(test_bad_arguments),
        T(test_registry_full),
        T(test_process_list_full),
        T(test_sharded),
    };
#undef T
    return cmocka_run_group_tests_name("shmdb-gpureg", tests, NULL, NULL);
}
