/*
 * cmd-admin.c -- hps-shm check (consistency check) and rm (remove a segment).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hps-shm.h"

/* ---- check --------------------------------------------------------------- */

/** Where hps_shmdb_check() problems go: stdout lines or a JSON array. */
typedef struct check_ctx {
    json_object *problems; /* JSON mode; NULL for text */
    uint64_t reported;
} check_ctx_t;

static void check_report(void *ctx, const char *msg)
{
    check_ctx_t *c = ctx;

    c->reported++;
    if (c->problems)
        json_object_array_add(c->problems, hps__tool_json_str(msg));
    else
        printf("problem: %s\n", msg);
}

static int check_summary(const hps__tool_t *t, json_object *problems, uint64_t n)
{
    json_object *o;

    if (!t->json) {
        if (n == 0)
            printf("%s: ok, no problems found\n", t->argv[0]);
        else
            printf("%s: %llu problem%s found\n", t->argv[0], (unsigned long long)n,
                   n == 1 ? "" : "s");
        return hps__tool_flush(t);
    }
    o = json_object_new_object();
    hps__tool_jset(o, "segment", hps__tool_json_str(t->argv[0]));
    hps__tool_jset(o, "ok", json_object_new_boolean(n == 0));
    hps__tool_jset(o, "problem_count", hps__tool_json_u64(n));
    hps__tool_jset(o, "problems", json_object_get(problems));
    return hps__tool_emit_json(t, o);
}

int hps__tool_cmd_check(const hps__tool_t *t)
{
    hps_shmdb_t *db = NULL;
    check_ctx_t ctx = {.problems = t->json ? json_object_new_array() : NULL};
    uint64_t n = 0;
    hps_err_t err;
    int rc = hps__tool_attach(t, t->argv[0], &db);

    if (rc == HPS__TOOL_OK) {
        err = hps_shmdb_check(db, check_report, &ctx, &n);
        hps_shmdb_detach(db);
        if (err != 0)
            rc = hps__tool_fail(t, err, "retry; if it persists, stop the segment's users",
                                "check of '%s' could not finish", t->argv[0]);
    }
    if (rc == HPS__TOOL_OK) {
        /* Trust whichever count is larger: the library's or our callbacks'. */
        n = n > ctx.reported ? n : ctx.reported;
        rc = check_summary(t, ctx.problems, n);
        if (rc == HPS__TOOL_OK && n > 0)
            rc = HPS__TOOL_FAIL;
    }
    json_object_put(ctx.problems);
    return rc;
}

/* ---- rm ------------------------------------------------------------------ */

/* Live processes other than us attached to the segment; 0 if it won't attach. */
static size_t rm_live_users(const char *name)
{
    hps_proc_info_t *procs = calloc(HPS_SHMDB_MAX_PROCS, sizeof *procs);
    hps_shmdb_t *db = NULL;
    size_t n = 0, live = 0;

    if (procs && hps_shmdb_probe(name, NULL, 0) == 0 &&
        hps_shmdb_attach(name, &hps__tool_popts, &db) == 0) {
        if (hps_shmdb_procs(db, procs, &n, false) != 0)
            n = 0;
        for (size_t i = 0; i < n && i < HPS_SHMDB_MAX_PROCS; i++)
            live += procs[i].alive && !procs[i].self;
        hps_shmdb_detach(db);
    }
    free(procs);
    return live;
}

/* Remove the coordinator lock /dev/shm/.hps.<name>.lock (coordinator/segment.c:
 * lock_name) if no process holds it: 1 removed, 0 held or absent, -errno.
 * Every coordinator's exit leaves it (a clean one removes it; a killed one
 * cannot), and one of another user blocks a coordinator that runs as
 * another (EACCES).  Taken first, then unlinked: a coordinator that opens
 * it meanwhile finds the name gone once it holds the lock and opens again. */
static int rm_free_lock(const char *name)
{
    char obj[HPS_SHMDB_SEGMENT_NAME_MAX + 16];
    snprintf(obj, sizeof(obj), "/.hps.%s.lock", name);
    int fd = shm_open(obj, O_RDONLY | O_NONBLOCK | O_CLOEXEC, 0);
    if (fd < 0)
        return errno == ENOENT ? 0 : -errno;
    int rc = 0;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0)
        rc = shm_unlink(obj) == 0 ? 1 : errno == ENOENT ? 0 : -errno;
    else if (errno != EWOULDBLOCK)
        rc = -errno;
    close(fd);
    return rc;
}

int hps__tool_cmd_rm(const hps__tool_t *t)
{
    const char *name = t->argv[0];
    size_t live = rm_live_users(name);
    hps_err_t err;
    json_object *o;

    /* What a build killed before it published left (never one in progress):
     * nobody uses it, so it goes even where the segment stays below. */
    uint64_t staged = 0;
    hps_err_t serr = hps_shmdb_staged_unlink(name, &staged);
    /* A removed live segment keeps serving its users, but a worker or
     * coordinator started later creates or waits for a new one: refuse. */
    if (live > 0 && !t->force) {
        if (serr == 0)
            fprintf(stderr,
                    "hps-shm rm: removed /dev/shm/.hps.%s.new (%llu bytes), left by a build "
                    "killed before it published\n",
                    name, (unsigned long long)staged);
        return hps__tool_fail(t, 0,
                              "stop the coordinator, workers and clients first (hps-shm info "
                              "NAME lists them), or pass --force",
                              "refusing to remove segment '%s': %zu live process(es) attached",
                              name, live);
    }
    err = hps_shmdb_unlink(name);
    int lock = rm_free_lock(name);
    if (err != 0 && !(err == HPS_ENOTFOUND && (serr == 0 || lock > 0)))
        return hps__tool_fail(t, err, hps__tool_attach_hint(err), "cannot remove segment '%s'",
                              name);
    if (live > 0)
        fprintf(stderr,
                "hps-shm rm: warning: %zu live process(es) still attached to '%s' keep their "
                "mapping until they detach\n",
                live, name);
    if (serr == HPS_EBUSY)
        fprintf(stderr,
                "hps-shm rm: a build of '%s' is in progress in /dev/shm/.hps.%s.new: left "
                "alone\n",
                name, name);
    else if (serr < 0 && serr != HPS_ENOTFOUND)
        fprintf(stderr, "hps-shm rm: warning: cannot remove /dev/shm/.hps.%s.new: %s\n", name,
                hps_strerror(serr));
    if (lock < 0)
        fprintf(stderr, "hps-shm rm: warning: cannot remove /dev/shm/.hps.%s.lock: %s\n", name,
                strerror(-lock));
    if (!t->json) {
        if (err == 0)
            printf("removed /dev/shm/hps.%s\n", name);
        if (lock > 0)
            printf("removed /dev/shm/.hps.%s.lock, the coordinator lock no process held\n", name);
        if (serr == 0)
            printf("removed /dev/shm/.hps.%s.new (%llu bytes), left by a build killed before it "
                   "published\n",
                   name, (unsigned long long)staged);
        return hps__tool_flush(t);
    }
    o = json_object_new_object();
    hps__tool_jset(o, "removed", err == 0 ? hps__tool_json_str(name) : NULL);
    hps__tool_jset(o, "removed_staged_bytes", serr == 0 ? hps__tool_json_u64(staged) : NULL);
    hps__tool_jset(o, "staged_building", json_object_new_boolean(serr == HPS_EBUSY));
    hps__tool_jset(o, "removed_lock", json_object_new_boolean(lock > 0));
    hps__tool_jset(o, "live_processes_attached", json_object_new_int64((int64_t)live));
    return hps__tool_emit_json(t, o);
}
