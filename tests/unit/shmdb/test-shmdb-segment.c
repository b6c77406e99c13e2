/*
 * test-shmdb-segment.c -- segment lifecycle, process table and validation.
 *
 *  - create / attach / detach / unlink / list, EEXIST, ENOTFOUND, mode 0600
 *    by default (and an explicit mode), the object's size = size_bytes;
 *  - a handle keeps working after unlink; O_EXCL create races (one winner);
 *  - re-attach after the creator _exit()ed without detaching: rows are kept;
 *  - the process table: roles, devices, liveness, reaping of dead rows;
 *  - refused segments: foreign object (bad magic), another format word,
 *    truncated objects (shorter than the header / than the recorded size),
 *    absurd recorded sizes; restoring the bytes makes the segment attach;
 *  - bad segment names and options (and the minimums themselves);
 *  - staged objects (opts.staged): listed apart, in progress while their
 *    creator lives, a killed creator's left over and removable; the
 *    creator's row taken back after an execve (creator_reattach);
 *  - the coordinator's INI text: absent, recorded, read by another handle,
 *    replaced, too long; hps_shmdb_check passes a segment holding one.
 *
 * Tables in a segment (specs, ids, limits, space and memory per row) are
 * tested by test-shmdb-tables.c.
 *
 * Segment header facts relied on (the implementation commits to them):
 * offset 0 uint64 magic, offset 8 uint32 format, offset 16 uint64 total
 * size (= the shm object's size).
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "testutil.h"

#define OFF_MAGIC  0
#define OFF_FORMAT 8
#define OFF_SIZE   16
#define SEG_SIZE   (64ULL << 20)

static int setup(void **state)
{
    return t_seg_setup(state, "seg");
}

static int teardown(void **state)
{
    return t_seg_teardown(state);
}

static int path_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                 */
/* ------------------------------------------------------------------------ */

/* How many times name is in the list (hps_shmdb_list or _list_staged). */
static int listed_in(hps_err_t (*list)(char ***, size_t *), const char *name)
{
    char **names = NULL;
    size_t n = 0;
    HPS_ASSERT_OK(list(&names, &n));
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        found += strcmp(names[i], name) == 0;
        free(names[i]);
    }
    free(names);
    return found;
}

static int name_listed(const char *name)
{
    return listed_in(hps_shmdb_list, name);
}

static void test_lifecycle(void **state)
{
    struct t_seg_fixture *f = *state;
    hps_shmdb_t *db2 = NULL;
    HPS_ASSERT_ERR(hps_shmdb_attach(f->name, NULL, &db2), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_probe(f->name, NULL, 0), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_unlink(f->name), HPS_ENOTFOUND);
    T_CHECK(db2 == NULL, "attach wrote its out-parameter on failure");

    t_seg_create(f, SEG_SIZE);
    T_CHECK(path_exists(f->path), "%s missing after create", f->path);
    HPS_ASSERT_EQ(name_listed(f->name), 1);

    struct stat st;
    T_CHECK(stat(f->path, &st) == 0, "stat %s", f->path);
    HPS_ASSERT_EQ(st.st_mode & 07777, 0600);
    HPS_ASSERT_EQ(st.st_size, SEG_SIZE);
    HPS_ASSERT_EQ(st.st_uid, getuid());

    hps_segment_info_t si;
    HPS_ASSERT_OK(hps_shmdb_segment_info(f->db, &si));
    T_CHECK(strcmp(si.name, f->name) == 0, "segment_info name '%s'", si.name);
    HPS_ASSERT_EQ(si.size_bytes, SEG_SIZE);
    HPS_ASSERT_EQ(si.creator_pid, getpid());
    HPS_ASSERT_EQ(si.num_tables, 0);
    HPS_ASSERT_NE(si.format, 0);
    HPS_ASSERT_LE(si.used_bytes, si.committed_bytes);
    HPS_ASSERT_LE(si.committed_bytes, si.size_bytes);
    HPS_ASSERT_EQ(si.repairs, 0);

    /* Format word on disk = the one reported. */
    int fd = open(f->path, O_RDONLY);
    T_CHECK(fd >= 0, "open %s", f->path);
    uint32_t fmt = 0;
    uint64_t size = 0;
    T_CHECK(pread(fd, &fmt, 4, OFF_FORMAT) == 4, "pread");
    T_CHECK(pread(fd, &size, 8, OFF_SIZE) == 8, "pread");
    close(fd);
    HPS_ASSERT_EQ(fmt, si.format);
    HPS_ASSERT_EQ(size, SEG_SIZE);

    /* Creating it again fails; the first handle is unharmed. */
    hps_shmdb_opts_t o = t_opts(SEG_SIZE);
    HPS_ASSERT_ERR(hps_shmdb_create(f->name, &o, NULL, &db2), HPS_EEXIST);
    T_CHECK(db2 == NULL, "create wrote its out-parameter on failure");
    HPS_ASSERT_OK(hps_shmdb_probe(f->name, NULL, 0));

    HPS_ASSERT_OK(hps_shmdb_attach(f->name, NULL, &db2));
    hps_shmdb_detach(db2);
    db2 = NULL;
    hps_shmdb_detach(f->db);
    f->db = NULL;
    hps_shmdb_detach(NULL); /* harmless no-op */
    T_CHECK(path_exists(f->path), "detach removed the segment");

    HPS_ASSERT_OK(hps_shmdb_attach(f->name, NULL, &f->db));
    hps_shmdb_detach(f->db);
    f->db = NULL;
    HPS_ASSERT_OK(hps_shmdb_unlink(f->name));
    T_CHECK(!path_exists(f->path), "%s still there after unlink", f->path);
    HPS_ASSERT_EQ(name_listed(f->name), 0);
    HPS_ASSERT_ERR(hps_shmdb_unlink(f->name), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_attach(f->name, NULL, &f->db), HPS_ENOTFOUND);
    f->db = NULL;
}

/* hps_shmdb_set_conf_text / hps_shmdb_conf_text. */
static void test_conf_text(void **state)
{
    struct t_seg_fixture *f = *state;
    hps_shmdb_opts_t o = t_opts(SEG_SIZE);
    HPS_ASSERT_OK(hps_shmdb_create(f->name, &o, NULL, &f->db));
    char *text = NULL;
    HPS_ASSERT_ERR(hps_shmdb_conf_text(f->db, &text), HPS_ENOTFOUND);
    const char v1[] = "[hps]\nsupportlonglong = true\n[model.m]\nsparse_files = /a\n";
    HPS_ASSERT_OK(hps_shmdb_set_conf_text(f->db, v1, strlen(v1)));
    hps_shmdb_t *db2 = NULL;
    HPS_ASSERT_OK(hps_shmdb_attach(f->name, NULL, &db2));
    HPS_ASSERT_OK(hps_shmdb_conf_text(db2, &text));
    assert_string_equal(text, v1);
    free(text);
    /* a new text replaces it; bytes past len are not taken */
    HPS_ASSERT_OK(hps_shmdb_set_conf_text(f->db, "[hps]\nXYZ", 6));
    HPS_ASSERT_OK(hps_shmdb_conf_text(db2, &text));
    assert_string_equal(text, "[hps]\n");
    free(text);
    HPS_ASSERT_ERR(hps_shmdb_set_conf_text(f->db, v1, (size_t)HPS_SHMDB_CONF_TEXT_MAX + 1),
                   HPS_EINVAL);
    uint64_t problems = 99;
    HPS_ASSERT_OK(hps_shmdb_check(db2, NULL, NULL, &problems));
    HPS_ASSERT_EQ(problems, 0);
    hps_shmdb_detach(db2);
}

static void test_mode_option(void **state)
{
    struct t_seg_fixture *f = *state;
    hps_shmdb_opts_t o = t_opts(SEG_SIZE);
    o.mode = 0640;
    HPS_ASSERT_OK(hps_shmdb_create(f->name, &o, NULL, &f->db));
    struct stat st;
    T_CHECK(stat(f->path, &st) == 0, "stat %s", f->path);
    HPS_ASSERT_EQ(st.st_mode & 07777, 0640);
}

static void test_unlink_while_attached(void **state)
{
    struct t_seg_fixture *f = *state;
    t_seg_create(f, SEG_SIZE);
    hps_table_spec_t spec = t_spec("m", "t", 4, 8, 2, UINT64_MAX, HPS_EVICT_RANDOM, 0.5);
    uint32_t id;
    HPS_ASSERT_OK(hps_shmdb_table_create(f->db, &spec, &id));
    HPS_ASSERT_OK(hps_shmdb_unlink(f->name));
    hps_shmdb_t *db2 = NULL;
    HPS_ASSERT_ERR(hps_shmdb_attach(f->name, NULL, &db2), HPS_ENOTFOUND);
    /* The mapping lives on. */
    int64_t k = 42;
    float v[4], w[4] = {0};
    t_value_of(42, 4, v);
    HPS_ASSERT_OK(hps_shmdb_upsert(f->db, id, 1, &k, v, NULL));
    uint8_t found = 0;
    HPS_ASSERT_OK(hps_shmdb_lookup(f->db, id, 1, &k, w, &found, NULL));
    HPS_ASSERT_EQ(found, 1);
    T_CHECK(memcmp(v, w, sizeof(v)) == 0, "value after unlink");
}

/* Four processes race to create one name: exactly one wins. */
static void test_create_race(void **state)
{
    struct t_seg_fixture *f = *state;
    enum { N = 4 };
    int go[2];
    T_CHECK(pipe(go) == 0, "pipe");
    pid_t pids[N];
    for (int i = 0; i < N; i++) {
        pids[i] = t_fork();
        if (pids[i] == 0) {
            t_child_mode();
            close(go[1]);
            char c;
            if (read(go[0], &c, 1) != 0)
                _exit(3);
            hps_shmdb_opts_t o = t_opts(SEG_SIZE);
            hps_shmdb_t *db = NULL;
            hps_err_t r = hps_shmdb_create(f->name, &o, NULL, &db);
            hps_shmdb_detach(db);
            _exit(r == 0 ? 0 : r == HPS_EEXIST ? 1 : 2);
        }
    }
    close(go[0]);
    close(go[1]); /* EOF releases all children at once */
    int winners = 0, losers = 0;
    for (int i = 0; i < N; i++) {
        int st;
        char buf[64];
        T_CHECK(t_wait_timeout(pids[i], 20000, &st), "creator child %d hung", (int)pids[i]);
        if (!WIFEXITED(st) || WEXITSTATUS(st) > 1)
            T_FAIL("creator child ended with %s (2 = an error other than EEXIST)",
                   t_status_str(st, buf, sizeof(buf)));
        winners += WEXITSTATUS(st) == 0;
        losers += WEXITSTATUS(st) == 1;
    }
    HPS_ASSERT_EQ(winners, 1);
    HPS_ASSERT_EQ(losers, N - 1);
    HPS_ASSERT_OK(hps_shmdb_attach(f->name, NULL, &f->db));
    HPS_ASSERT_EQ(t_check(f->db, "race"), 0);
}

/* ------------------------------------------------------------------------ */
/* Crash of the creator, process table                                       */
/* ------------------------------------------------------------------------ */

static int find_proc(const hps_proc_info_t *p, size_t n, pid_t pid)
{
    for (size_t i = 0; i < n; i++)
        if (p[i].pid == pid)
            return (int)i;
    return -1;
}

static void test_reattach_after_creator_exit(void **state)
{
    struct t_seg_fixture *f = *state;
    enum { ROWS = 1000, DIM = 16 };
    pid_t pid = t_fork();
    if (pid == 0) {
        t_child_mode();
        hps_shmdb_opts_t o = t_opts(SEG_SIZE);
        hps_shmdb_t *db;
        hps_shmdb_proc_opts_t po = {.num_threads = 1, .role = HPS_ROLE_COORDINATOR, .device = -1};
        HPS_ASSERT_OK(hps_shmdb_create(f->name, &o, &po, &db));
        hps_table_spec_t spec = t_spec("crash", "t", DIM, 8, 4, UINT64_MAX, HPS_EVICT_OLDEST, 0.8);
        uint32_t id;
        HPS_ASSERT_OK(hps_shmdb_table_create(db, &spec, &id));
        static int64_t keys[ROWS];
        static float vals[ROWS * DIM];
        for (int i = 0; i < ROWS; i++) {
            keys[i] = (int64_t)i * 1000003 - 500000;
            t_value_of((uint64_t)keys[i], DIM, &vals[i * DIM]);
        }
        HPS_ASSERT_OK(hps_shmdb_upsert(db, id, ROWS, keys, vals, NULL));
        _exit(0); /* no detach */
    }
    int st;
    char buf[64];
    T_CHECK(t_wait_timeout(pid, 30000, &st), "creator child hung");
    T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "creator child: %s",
            t_status_str(st, buf, sizeof(buf)));

    HPS_ASSERT_OK(hps_shmdb_attach(f->name, NULL, &f->db));
    hps_segment_info_t si;
    HPS_ASSERT_OK(hps_shmdb_segment_info(f->db, &si));
    HPS_ASSERT_EQ(si.creator_pid, pid);
    HPS_ASSERT_EQ(si.num_tables, 1);
    uint32_t id = 99;
    HPS_ASSERT_OK(hps_shmdb_table_find(f->db, "crash", "t", &id));
    HPS_ASSERT_EQ(id, 0);
    /* table_create with the same geometry opens it. */
    hps_table_spec_t spec = t_spec("crash", "t", DIM, 8, 4, UINT64_MAX, HPS_EVICT_OLDEST, 0.8);
    uint32_t id2 = 99;
    HPS_ASSERT_OK(hps_shmdb_table_create(f->db, &spec, &id2));
    HPS_ASSERT_EQ(id2, id);

    int64_t *keys = malloc(ROWS * sizeof(int64_t));
    float *vals = malloc(ROWS * DIM * sizeof(float));
    uint8_t *found = malloc(ROWS);
    T_CHECK(keys && vals && found, "out of memory");
    for (int i = 0; i < ROWS; i++)
        keys[i] = (int64_t)i * 1000003 - 500000;
    size_t hits = 0;
    HPS_ASSERT_OK(hps_shmdb_lookup(f->db, id, ROWS, keys, vals, found, &hits));
    HPS_ASSERT_EQ(hits, ROWS);
    for (int i = 0; i < ROWS; i++) {
        float want[DIM];
        t_value_of((uint64_t)keys[i], DIM, want);
        if (!found[i] || memcmp(want, &vals[i * DIM], sizeof(want)) != 0)
            T_FAIL("row %d (key %" PRId64 ") lost or wrong after the creator died", i, keys[i]);
    }
    uint64_t rows = 0;
    HPS_ASSERT_OK(hps_shmdb_size(f->db, id, &rows));
    HPS_ASSERT_EQ(rows, ROWS);
    HPS_ASSERT_EQ(t_check(f->db, "reattach"), 0);

    /* The dead creator's row is not alive, and reaping removes it. */
    hps_proc_info_t procs[HPS_SHMDB_MAX_PROCS];
    size_t n = 0;
    HPS_ASSERT_OK(hps_shmdb_procs(f->db, procs, &n, false));
    int i = find_proc(procs, n, pid);
    if (i >= 0)
        T_CHECK(!procs[i].alive, "dead creator %d reported alive", (int)pid);
    HPS_ASSERT_GE(find_proc(procs, n, getpid()), 0);
    HPS_ASSERT_OK(hps_shmdb_procs(f->db, procs, &n, true));
    HPS_ASSERT_OK(hps_shmdb_procs(f->db, procs, &n, false));
    HPS_ASSERT_EQ(find_proc(procs, n, pid), -1);
    HPS_ASSERT_GE(find_proc(procs, n, getpid()), 0);
    free(keys);
    free(vals);
    free(found);
}

static int staged_listed(const char *name)
{
    return listed_in(hps_shmdb_list_staged, name);
}

/* The staged object of a build (opts.staged): listed apart from segments;
 * in progress while its creator lives (not removable); what a creator
 * killed before it published leaves is told apart, removed, and its size
 * reported.  The creator of a segment executed again (same pid, new
 * handle) takes the creator's row back (hps_shmdb_creator_reattach). */
static void test_staged_leftover(void **state)
{
    struct t_seg_fixture *f = *state;
    hps_shmdb_opts_t o = t_opts(SEG_SIZE);
    o.staged = true;
    uint64_t bytes = 0;
    bool building = false;
    HPS_ASSERT_ERR(hps_shmdb_staged_info(f->name, &bytes, &building), HPS_ENOTFOUND);
    HPS_ASSERT_ERR(hps_shmdb_staged_info("bad/name", &bytes, &building), HPS_EINVAL);

    /* in progress: this process's build */
    HPS_ASSERT_OK(hps_shmdb_create(f->name, &o, NULL, &f->db));
    HPS_ASSERT_EQ(staged_listed(f->name), 1);
    HPS_ASSERT_EQ(name_listed(f->name), 0);
    HPS_ASSERT_OK(hps_shmdb_staged_info(f->name, &bytes, &building));
    HPS_ASSERT_EQ(bytes, SEG_SIZE);
    T_CHECK(building, "a live creator's staged object reported as left over");
    HPS_ASSERT_ERR(hps_shmdb_staged_unlink(f->name, NULL), HPS_EBUSY);
    HPS_ASSERT_OK(hps_shmdb_publish(f->db));
    HPS_ASSERT_EQ(staged_listed(f->name), 0);
    HPS_ASSERT_EQ(name_listed(f->name), 1);
    /* a second handle of the creator's pid (as after execve) takes the row */
    hps_shmdb_t *again = NULL;
    HPS_ASSERT_OK(hps_shmdb_attach(f->name, NULL, &again));
    T_CHECK(hps_shmdb_creator_reattach(again), "the creator's pid did not reattach");
    hps_shmdb_detach(f->db); /* the first image's row ends */
    f->db = NULL;
    T_CHECK(hps_shmdb_creator_attached(again), "creator called gone after reattach");
    hps_shmdb_detach(again);

    /* left over: a creator killed before it published */
    pid_t pid = t_fork();
    if (pid == 0) {
        t_child_mode();
        hps_shmdb_t *db;
        HPS_ASSERT_OK(hps_shmdb_create(f->name, &o, NULL, &db));
        _exit(0); /* no detach, no publish */
    }
    int st;
    char buf[64];
    T_CHECK(t_wait_timeout(pid, 30000, &st), "creator child hung");
    T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "creator child: %s",
            t_status_str(st, buf, sizeof(buf)));
    HPS_ASSERT_OK(hps_shmdb_staged_info(f->name, &bytes, &building));
    T_CHECK(!building, "a dead creator's staged object reported in progress");
    HPS_ASSERT_OK(hps_shmdb_staged_unlink(f->name, &bytes));
    HPS_ASSERT_EQ(bytes, SEG_SIZE);
    HPS_ASSERT_EQ(staged_listed(f->name), 0);
    HPS_ASSERT_ERR(hps_shmdb_staged_unlink(f->name, NULL), HPS_ENOTFOUND);
    HPS_ASSERT_EQ(name_listed(f->name), 1); /* the segment itself is untouched */
}

static void test_process_table(void **state)
{
    struct t_seg_fixture *f = *state;
    hps_shmdb_opts_t o = t_opts(SEG_SIZE);
    hps_shmdb_proc_opts_t po = {.num_threads = 1, .role = HPS_ROLE_COORDINATOR, .device = -1};
    HPS_ASSERT_OK(hps_shmdb_create(f->name, &o, &po, &f->db));

    hps_proc_info_t procs[HPS_SHMDB_MAX_PROCS];
    size_t n = 0;
    HPS_ASSERT_OK(hps_shmdb_procs(f->db, procs, &n, false));
    int me = find_proc(procs, n, getpid());
    HPS_ASSERT_GE(me, 0);
    HPS_ASSERT_EQ(procs[me].role, HPS_ROLE_COORDINATOR);
    HPS_ASSERT_EQ(procs[me].device, -1);
    T_CHECK(procs[me].alive, "own row not alive");
    uint64_t hb0 = procs[me].heartbeat_ns;
    t_sleep_ns(2000000);
    HPS_ASSERT_OK(hps_shmdb_proc_heartbeat(f->db));
    HPS_ASSERT_OK(hps_shmdb_procs(f->db, procs, &n, false));
    me = find_proc(procs, n, getpid());
    HPS_ASSERT_GE(me, 0);
    HPS_ASSERT_GT(procs[me].heartbeat_ns, hb0);

    /* Two workers attach; one detaches cleanly, one dies. */
    int ready[2], go[2];
    T_CHECK(pipe(ready) == 0 && pipe(go) == 0, "pipe");
    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        kids[k] = t_fork();
        if (kids[k] == 0) {
            t_child_mode();
            close(ready[0]);
            close(go[1]);
            hps_shmdb_proc_opts_t wpo = {
                .num_threads = 1, .role = HPS_ROLE_WORKER, .device = 3 + k};
            hps_shmdb_t *db;
            HPS_ASSERT_OK(hps_shmdb_attach(f->name, &wpo, &db));
            char c = 'r';
            if (write(ready[1], &c, 1) != 1)
                _exit(3);
            if (read(go[0], &c, 1) != 0) /* parent closes: go on */
                _exit(4);
            if (k == 0)
                hps_shmdb_detach(db);
            _exit(0); /* k == 1: dies attached */
        }
    }
    close(ready[1]);
    close(go[0]);
    for (int k = 0; k < 2; k++) {
        char c;
        T_CHECK(read(ready[0], &c, 1) == 1, "worker did not attach");
    }
    HPS_ASSERT_OK(hps_shmdb_procs(f->db, procs, &n, false));
    for (int k = 0; k < 2; k++) {
        int i = find_proc(procs, n, kids[k]);
        if (i < 0)
            T_FAIL("attached worker %d missing from the process table", (int)kids[k]);
        HPS_ASSERT_EQ(procs[i].role, HPS_ROLE_WORKER);
        HPS_ASSERT_EQ(procs[i].device, 3 + k);
        T_CHECK(procs[i].alive, "live worker reported dead");
    }
    close(go[1]);
    close(ready[0]);
    for (int k = 0; k < 2; k++) {
        int st;
        char buf[64];
        T_CHECK(t_wait_timeout(kids[k], 20000, &st), "worker hung");
        T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "worker: %s",
                t_status_str(st, buf, sizeof(buf)));
    }
    /* Detached: gone.  Died attached: listed as not alive until reaped. */
    HPS_ASSERT_OK(hps_shmdb_procs(f->db, procs, &n, false));
    HPS_ASSERT_EQ(find_proc(procs, n, kids[0]), -1);
    int dead = find_proc(procs, n, kids[1]);
    if (dead < 0)
        T_FAIL("worker %d died attached but vanished without a reap", (int)kids[1]);
    T_CHECK(!procs[dead].alive, "dead worker %d reported alive", (int)kids[1]);
    HPS_ASSERT_OK(hps_shmdb_procs(f->db, procs, &n, true));
    HPS_ASSERT_OK(hps_shmdb_procs(f->db, procs, &n, false));
    HPS_ASSERT_EQ(find_proc(procs, n, kids[1]), -1);
    HPS_ASSERT_GE(find_proc(procs, n, getpid()), 0);
}

/* ------------------------------------------------------------------------ */
/* Refused segments                                                          */
/* ------------------------------------------------------------------------ */

static void poke(const char *path, off_t off, const void *buf, size_t len)
{
    int fd = open(path, O_RDWR);
    T_CHECK(fd >= 0, "open %s: %s", path, strerror(errno));
    T_CHECK(pwrite(fd, buf, len, off) == (ssize_t)len, "pwrite: %s", strerror(errno));
    close(fd);
}

static void peek(const char *path, off_t off, void *buf, size_t len)
{
    int fd = open(path, O_RDONLY);
    T_CHECK(fd >= 0, "open %s: %s", path, strerror(errno));
    T_CHECK(pread(fd, buf, len, off) == (ssize_t)len, "pread: %s", strerror(errno));
    close(fd);
}

static void truncate_to(const char *path, off_t len)
{
    int fd = open(path, O_RDWR);
    T_CHECK(fd >= 0, "open %s: %s", path, strerror(errno));
    T_CHECK(ftruncate(fd, len) == 0, "ftruncate: %s", strerror(errno));
    close(fd);
}

/* Attach and probe must both refuse with want (or want2). */
static void expect_refused(struct t_seg_fixture *f, hps_err_t want, hps_err_t want2,
                           const char *what)
{
    hps_shmdb_t *db = NULL;
    hps_err_t r = hps_shmdb_attach(f->name, NULL, &db);
    if (r != want && r != want2) {
        hps_shmdb_detach(db);
        T_FAIL("%s: attach returned %s (%d), expected %s or %s", what, hps_err_name(r), r,
               hps_err_name(want), hps_err_name(want2));
    }
    T_CHECK(db == NULL, "%s: attach wrote its out-parameter on failure", what);
    char msg[256] = "";
    r = hps_shmdb_probe(f->name, msg, sizeof(msg));
    if (r != want && r != want2)
        T_FAIL("%s: probe returned %s (%d), expected %s or %s", what, hps_err_name(r), r,
               hps_err_name(want), hps_err_name(want2));
    T_CHECK(msg[0] != '\0', "%s: probe gave no message", what);
    t_note("%s: %s: %s", what, hps_err_name(r), msg);
}

/* A valid segment with one table and one row, detached. */
static void make_segment(struct t_seg_fixture *f)
{
    t_seg_create(f, SEG_SIZE);
    hps_table_spec_t spec = t_spec("m", "t", 4, 8, 2, UINT64_MAX, HPS_EVICT_RANDOM, 0.5);
    uint32_t id;
    HPS_ASSERT_OK(hps_shmdb_table_create(f->db, &spec, &id));
    int64_t k = 7;
    float v[4];
    t_value_of(7, 4, v);
    HPS_ASSERT_OK(hps_shmdb_upsert(f->db, id, 1, &k, v, NULL));
    hps_shmdb_detach(f->db);
    f->db = NULL;
}

/* After repair of the header the segment attaches again with its row. */
static void expect_attaches(struct t_seg_fixture *f)
{
    HPS_ASSERT_OK(hps_shmdb_attach(f->name, NULL, &f->db));
    uint32_t id;
    HPS_ASSERT_OK(hps_shmdb_table_find(f->db, "m", "t", &id));
    int64_t k = 7;
    float v[4], w[4];
    t_value_of(7, 4, v);
    uint8_t found = 0;
    HPS_ASSERT_OK(hps_shmdb_lookup(f->db, id, 1, &k, w, &found, NULL));
    HPS_ASSERT_EQ(found, 1);
    T_CHECK(memcmp(v, w, sizeof(v)) == 0, "row changed");
    HPS_ASSERT_EQ(t_check(f->db, "restored"), 0);
    hps_shmdb_detach(f->db);
    f->db = NULL;
}

static void test_bad_magic(void **state)
{
    struct t_seg_fixture *f = *state;
    make_segment(f);
    uint64_t magic, bad;
    peek(f->path, OFF_MAGIC, &magic, 8);
    bad = magic ^ 0x0100000000000000ULL;
    poke(f->path, OFF_MAGIC, &bad, 8);
    expect_refused(f, HPS_EBADMAGIC, HPS_EBADMAGIC, "flipped magic");
    bad = 0;
    poke(f->path, OFF_MAGIC, &bad, 8);
    expect_refused(f, HPS_EBADMAGIC, HPS_EBADMAGIC, "zero magic");
    poke(f->path, OFF_MAGIC, &magic, 8);
    expect_attaches(f);

    /* A foreign object of plausible size: text. */
    HPS_ASSERT_OK(hps_shmdb_unlink(f->name));
    int fd = open(f->path, O_RDWR | O_CREAT | O_EXCL, 0600);
    T_CHECK(fd >= 0, "create %s", f->path);
    char *junk = malloc(1 << 20);
    T_CHECK(junk != NULL, "out of memory");
    memset(junk, 'x', 1 << 20);
    T_CHECK(write(fd, junk, 1 << 20) == (1 << 20), "write");
    free(junk);
    close(fd);
    expect_refused(f, HPS_EBADMAGIC, HPS_EBADMAGIC, "foreign object");
}

static void test_bad_format(void **state)
{
    struct t_seg_fixture *f = *state;
    make_segment(f);
    uint32_t fmt, bad;
    peek(f->path, OFF_FORMAT, &fmt, 4);
    bad = fmt ^ 1u;
    poke(f->path, OFF_FORMAT, &bad, 4);
    expect_refused(f, HPS_EVERSION, HPS_EVERSION, "format word ^ 1");
    bad = fmt + 0x10000u;
    poke(f->path, OFF_FORMAT, &bad, 4);
    expect_refused(f, HPS_EVERSION, HPS_EVERSION, "format word + 0x10000");
    poke(f->path, OFF_FORMAT, &fmt, 4);
    expect_attaches(f);
}

static void test_truncated(void **state)
{
    struct t_seg_fixture *f = *state;
    make_segment(f);
    /* Keep a copy of the header to rebuild a short object from it. */
    uint8_t head[64];
    peek(f->path, 0, head, sizeof(head));
    truncate_to(f->path, SEG_SIZE / 2);
    expect_refused(f, HPS_ETRUNCATED, HPS_ETRUNCATED, "object half its recorded size");
    truncate_to(f->path, SEG_SIZE - 4096);
    expect_refused(f, HPS_ETRUNCATED, HPS_ETRUNCATED, "object a page short");
    truncate_to(f->path, 20); /* magic and format intact, size field cut */
    expect_refused(f, HPS_ETRUNCATED, HPS_ETRUNCATED, "object of 20 bytes");
    truncate_to(f->path, 0);
    expect_refused(f, HPS_ETRUNCATED, HPS_ETRUNCATED, "empty object");
}

static void test_absurd_size(void **state)
{
    struct t_seg_fixture *f = *state;
    make_segment(f);
    uint64_t size, bad;
    peek(f->path, OFF_SIZE, &size, 8);
    HPS_ASSERT_EQ(size, SEG_SIZE);
    bad = 1ULL << 62;
    poke(f->path, OFF_SIZE, &bad, 8);
    expect_refused(f, HPS_ECORRUPT, HPS_ETRUNCATED, "recorded size 2^62");
    bad = ~0ULL;
    poke(f->path, OFF_SIZE, &bad, 8);
    expect_refused(f, HPS_ECORRUPT, HPS_ETRUNCATED, "recorded size 2^64-1");
    bad = 0;
    poke(f->path, OFF_SIZE, &bad, 8);
    expect_refused(f, HPS_ECORRUPT, HPS_ETRUNCATED, "recorded size 0");
    bad = 24; /* smaller than any header */
    poke(f->path, OFF_SIZE, &bad, 8);
    expect_refused(f, HPS_ECORRUPT, HPS_ETRUNCATED, "recorded size 24");
    bad = SEG_SIZE + 4096;
    poke(f->path, OFF_SIZE, &bad, 8);
    expect_refused(f, HPS_ETRUNCATED, HPS_ECORRUPT, "recorded size one page beyond the object");
    poke(f->path, OFF_SIZE, &size, 8);
    expect_attaches(f);
}

/* ------------------------------------------------------------------------ */
/* Names and options                                                         */
/* ------------------------------------------------------------------------ */

static void test_bad_names_and_options(void **state)
{
    struct t_seg_fixture *f = *state;
    hps_shmdb_opts_t o = t_opts(SEG_SIZE);
    hps_shmdb_t *db = NULL;
    char long_name[HPS_SHMDB_SEGMENT_NAME_MAX + 2];
    memset(long_name, 'n', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0'; /* 201 chars */
    const char *bad[] = {"", "a/b", "a b", "/x", "x\n", "caf\xc3\xa9", "a*b", long_name};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        hps_err_t r = hps_shmdb_create(bad[i], &o, NULL, &db);
        if (r != HPS_EINVAL) {
            hps_shmdb_detach(db);
            hps_shmdb_unlink(bad[i]);
            T_FAIL("create(\"%s\") returned %s, expected HPS_EINVAL", bad[i], hps_err_name(r));
        }
        r = hps_shmdb_attach(bad[i], NULL, &db);
        if (r != HPS_EINVAL && r != HPS_ENOTFOUND)
            T_FAIL("attach(\"%s\") returned %s, expected HPS_EINVAL", bad[i], hps_err_name(r));
    }
    /* 200 characters is allowed. */
    long_name[HPS_SHMDB_SEGMENT_NAME_MAX] = '\0';
    memcpy(long_name, "t-long-", 7);
    t_register_name(long_name);
    HPS_ASSERT_OK(hps_shmdb_create(long_name, &o, NULL, &db));
    hps_shmdb_detach(db);
    HPS_ASSERT_OK(hps_shmdb_unlink(long_name));

    /* Options below the documented minimums; nothing is left behind. */
    o = t_opts((1ULL << 20) - 4096);
    HPS_ASSERT_ERR(hps_shmdb_create(f->name, &o, NULL, &db), HPS_EINVAL);
    o = t_opts(SEG_SIZE);
    o.allocation_rate = 32 << 10;
    HPS_ASSERT_ERR(hps_shmdb_create(f->name, &o, NULL, &db), HPS_EINVAL);
    T_CHECK(!path_exists(f->path), "failed create left %s behind", f->path);
    /* A step larger than the segment is refused; the whole segment as one
     * step (the header included) works. */
    o = t_opts(1ULL << 20);
    o.allocation_rate = (1ULL << 20) + (64 << 10);
    HPS_ASSERT_ERR(hps_shmdb_create(f->name, &o, NULL, &db), HPS_EINVAL);
    o.allocation_rate = 1ULL << 20;
    HPS_ASSERT_OK(hps_shmdb_create(f->name, &o, NULL, &db));
    hps_shmdb_detach(db);
    HPS_ASSERT_OK(hps_shmdb_unlink(f->name));
    /* The minimums themselves work. */
    o = t_opts(1ULL << 20);
    o.allocation_rate = 64 << 10;
    HPS_ASSERT_OK(hps_shmdb_create(f->name, &o, NULL, &f->db));
}

int main(void)
{
    t_install_cleanup();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lifecycle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mode_option, setup, teardown),
        cmocka_unit_test_setup_teardown(test_conf_text, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unlink_while_attached, setup, teardown),
        cmocka_unit_test_setup_teardown(test_create_race, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reattach_after_creator_exit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_staged_leftover, setup, teardown),
        cmocka_unit_test_setup_teardown(test_process_table, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_magic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_format, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_absurd_size, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_names_and_options, setup, teardown),
    };
    return cmocka_run_group_tests_name("shmdb-segment", tests, NULL, NULL);
}
