/*
 * segment.c -- hps-coordinator's side of the shared-memory segment: create
 * it, or re-attach the one a previous coordinator left, and make sure no
 * other coordinator is alive on it.
 *
 * One coordinator per segment name: an exclusive flock(2) on the POSIX
 * shared-memory object ".hps.<name>.lock" (/dev/shm/.hps.<name>.lock, the
 * holder's pid), held for the coordinator's whole life.  The kernel drops
 * it when the process dies and keeps it while the process is stopped.  A
 * clean exit removes the file (a killed coordinator leaves it, to be
 * reused), so a lock taken on a file that was removed meanwhile is taken
 * again on the file under the name (the inode check in lock_open).  The
 * segment's heartbeat alone could not tell: it is 0 while a coordinator
 * creates the segment and stale while one is stopped (SIGSTOP), and a
 * second coordinator then replaced or shared the segment (two writers).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "coord.h"
#include "hps/log.h"

/* Another coordinator beats on this segment and its process exists. */
static hps_shmdb_proc_opts_t proc_opts(const coord_t *c)
{
    return (hps_shmdb_proc_opts_t){.num_threads = (unsigned)c->conf->volatile_db.num_threads,
                                   .role = HPS_ROLE_COORDINATOR,
                                   .device = -1};
}

static int create_fresh(coord_t *c, const char *name)
{
    const hps_conf_volatile_db_t *v = &c->conf->volatile_db;
    hps_shmdb_opts_t o = {.size_bytes = v->shared_memory_size,
                          .allocation_rate = v->allocation_rate,
                          .mode = (mode_t)v->shared_memory_mode,
                          .staged = true};
    hps_shmdb_proc_opts_t po = proc_opts(c);
    hps_err_t rc = hps_shmdb_create(name, &o, &po, &c->db);
    if (rc < 0) {
        HPS_ERROR("cannot create shared memory /dev/shm/hps.%s (%llu bytes): %s", name,
                  (unsigned long long)o.size_bytes, hps_strerror(rc));
        return HPS_EXIT_SEGMENT;
    }
    HPS_INFO("building shared memory /dev/shm/.hps.%s.new: %llu bytes, mode %04o (published "
             "as /dev/shm/hps.%s when loaded)",
             name, (unsigned long long)o.size_bytes, (unsigned)(o.mode ? o.mode : 0600), name);
    c->staged = true;
    return 0;
}

void coord_segment_serving_release(coord_t *c)
{
    coord_prev_stop(c); /* before its segment goes */
    pthread_mutex_lock(&c->serving_lock);
    hps_shmdb_t *old = c->serving;
    c->serving = NULL;
    pthread_mutex_unlock(&c->serving_lock);
    if (!old)
        return;
    if (!c->fallback_handover) {
        hps_shmdb_detach(old);
        return;
    }
    /* A failed build's fallback: this process stays alive to the workers
     * across execve() until the fallback beats on the segment. */
    int fd = hps_shmdb_detach_handover(old);
    char v[16];
    snprintf(v, sizeof(v), "%d", fd);
    if (fd >= 0)
        setenv(HPS_HANDOVER_ENV, v, 1);
}

int coord_segment_publish(coord_t *c)
{
    const char *name = c->conf->volatile_db.shared_memory_name;
    if (!c->staged)
        return 0;
    hps_err_t rc = hps_shmdb_publish(c->db);
    if (rc < 0) {
        HPS_ERROR("cannot publish /dev/shm/.hps.%s.new as /dev/shm/hps.%s: %s", name, name,
                  hps_strerror(rc));
        return HPS_EXIT_SEGMENT;
    }
    c->staged = false;
    HPS_INFO("published /dev/shm/hps.%s: workers switch to it now", name);
    return 0;
}

/* Miss queue sized to the segment: 64 slots of up to 1 MiB. */
static int init_missq(coord_t *c)
{
    uint64_t slab = HPS_COORD_MISS_SLAB_BYTES;
    uint64_t cap = c->conf->volatile_db.shared_memory_size / 256;
    if (slab > cap)
        slab = cap < 65536 ? 65536 : cap;
    hps_err_t rc = hps_shmdb_missq_init(c->db, HPS_COORD_MISS_SLOTS, slab);
    if (rc < 0) {
        HPS_ERROR("cannot create the miss queue (%u slots of %llu bytes): %s", HPS_COORD_MISS_SLOTS,
                  (unsigned long long)slab, hps_strerror(rc));
        return HPS_EXIT_SEGMENT;
    }
    size_t reaped = 0;
    hps_shmdb_miss_reap(c->db, true, &reaped);
    if (reaped)
        HPS_INFO("reclaimed %zu miss-queue slots left by a previous coordinator", reaped);
    return 0;
}

/* Open the lock object and take its lock: the descriptor, -1 with errno
 * (EWOULDBLOCK: another process holds it).  A lock taken on a file that a
 * clean exit removed meanwhile is dropped and taken again. */
static int lock_open(const char *obj, mode_t mode)
{
    char path[HPS_CONF_SHM_NAME_MAX + 32];
    snprintf(path, sizeof(path), "/dev/shm%s", obj);
    for (int tries = 0; tries < 8; tries++) {
        int fd = shm_open(obj, O_RDWR | O_CREAT | O_CLOEXEC, mode);
        if (fd < 0)
            return -1;
        struct stat held, named;
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            close(fd);
            errno = e;
            return -1;
        }
        if (fstat(fd, &held) == 0 && stat(path, &named) == 0 && held.st_ino == named.st_ino)
            return fd;
        close(fd); /* removed under us: the name now holds another file */
    }
    errno = EAGAIN;
    return -1;
}

pid_t coord_segment_holder(const coord_t *c)
{
    char obj[HPS_CONF_SHM_NAME_MAX + 16], pid[32];
    snprintf(obj, sizeof(obj), "/.hps.%s.lock", c->conf->volatile_db.shared_memory_name);
    int fd = shm_open(obj, O_RDONLY | O_CLOEXEC, 0);
    ssize_t n = fd >= 0 ? pread(fd, pid, sizeof(pid) - 1, 0) : -1;
    if (fd >= 0)
        close(fd);
    pid[n > 0 ? n : 0] = 0;
    long v = strtol(pid, NULL, 10);
    return v > 0 && v < INT32_MAX ? (pid_t)v : 0;
}

/* Take the segment name's coordinator lock (see the top of this file); the
 * descriptor stays open until coord_segment_unlock() or the process exits. */
static int lock_name(coord_t *c, const char *name)
{
    char obj[HPS_CONF_SHM_NAME_MAX + 16], pid[32] = "";
    snprintf(obj, sizeof(obj), "/.hps.%s.lock", name);
    unsigned m = c->conf->volatile_db.shared_memory_mode;
    int fd = lock_open(obj, m ? (mode_t)m : 0600);
    int e = errno;
    char path[HPS_CONF_SHM_NAME_MAX + 32], owner[96] = "";
    struct stat st;
    snprintf(path, sizeof(path), "/dev/shm%s", obj);
    if (fd < 0 && stat(path, &st) == 0 && st.st_uid != geteuid())
        snprintf(owner, sizeof(owner), " (the lock file belongs to uid %u, mode %04o)",
                 (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
    if (fd < 0 && e == EWOULDBLOCK) {
        pid_t holder = coord_segment_holder(c);
        if (holder)
            snprintf(pid, sizeof(pid), "%d", (int)holder);
        HPS_ERROR("another hps-coordinator (pid %s) holds /dev/shm%s%s and serves "
                  "/dev/shm/hps.%s; stop it first",
                  *pid ? pid : "unknown", obj, owner, name);
        return HPS_EXIT_SEGMENT;
    }
    if (fd < 0) {
        HPS_ERROR("cannot take the coordinator lock /dev/shm%s%s: %s%s", obj, owner, strerror(e),
                  e == EACCES ? "; left by a coordinator of another user: once no coordinator "
                                "of this segment runs, `hps-shm rm` removes it (or run as its "
                                "owner)"
                              : "");
        return HPS_EXIT_SEGMENT;
    }
    /* A segment of this name owned by another user is not taken: its owner
     * can change every row served and every structure this process reads
     * (a root coordinator would serve a segment any local user planted). */
    char seg[HPS_CONF_SHM_NAME_MAX + 16];
    snprintf(seg, sizeof(seg), "/dev/shm/hps.%s", name);
    if (lstat(seg, &st) == 0 && st.st_uid != geteuid()) {
        HPS_ERROR("%s belongs to uid %u (mode %04o), not to this process's uid %u: not taken "
                  "(its owner could change what it serves); remove it (hps-shm rm %s) or run "
                  "hps-coordinator as its owner",
                  seg, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777), (unsigned)geteuid(),
                  name);
        close(fd);
        return HPS_EXIT_SEGMENT;
    }
    int n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n)
        HPS_WARN("cannot write the pid into /dev/shm%s: %s", obj, strerror(errno));
    c->lock_fd = fd;
    c->locked = true;
    return 0;
}

int coord_segment_lock(coord_t *c)
{
    return c->locked ? 0 : lock_name(c, c->conf->volatile_db.shared_memory_name);
}

void coord_segment_unlock(coord_t *c)
{
    if (!c->locked)
        return;
    char obj[HPS_CONF_SHM_NAME_MAX + 16];
    snprintf(obj, sizeof(obj), "/.hps.%s.lock", c->conf->volatile_db.shared_memory_name);
    shm_unlink(obj); /* before the unlock: the next coordinator creates a new file */
    close(c->lock_fd);
    c->locked = false;
}

/* A segment object whose magic word is still 0: a coordinator was killed
 * between creating and initializing it (the magic is written last).  Only
 * checked under the name's lock, so no creation is in progress. */
static bool unfinished(const char *name)
{
    char obj[HPS_CONF_SHM_NAME_MAX + 16];
    uint64_t magic = 1;
    snprintf(obj, sizeof(obj), "/hps.%s", name);
    int fd = shm_open(obj, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return false;
    bool zero = pread(fd, &magic, sizeof(magic), 0) == (ssize_t)sizeof(magic) && magic == 0;
    close(fd);
    return zero;
}

/* An attached segment whose coordinator is alive: logged, detached. */
static bool other_coordinator(coord_t *c, hps_shmdb_t *db, const char *name)
{
    if (!hps_shmdb_coordinator_alive(db, (uint32_t)c->conf->hps.worker_timeout_ms, false))
        return false;
    hps_segment_info_t si;
    hps_shmdb_segment_info(db, &si);
    HPS_ERROR("another hps-coordinator (pid %d) is alive on /dev/shm/hps.%s; stop it first",
              (int)si.coord_pid, name);
    hps_shmdb_detach(db);
    return true;
}

/* Keep db (the serving segment of a reload) attached: beaten on, told the
 * answer if the build fails.  Handed over RELOADING_SERVED (the previous
 * image had a persistent or distributed DB), it stays so, its requests
 * pending, until coord_prev_start() answers them or gives up.  Handed
 * over LOADING (a fallback that failed waited: main.c, fallback_backoff),
 * it stays so, its workers not ready, until this image answers its misses
 * (coord_prev_start) or publishes: RELOADING would make them ready with
 * the defaults for every key outside shared memory meanwhile. */
static void hold(coord_t *c, hps_shmdb_t *db)
{
    hps_segment_info_t si;
    bool known = hps_shmdb_segment_info(db, &si) == 0;
    if (known && si.coord_state == HPS_COORD_RELOADING_SERVED)
        atomic_store(&c->prev_answering, true);
    else if (!known || si.coord_state != HPS_COORD_LOADING)
        hps_shmdb_set_coord_state(db, HPS_COORD_RELOADING);
    pthread_mutex_lock(&c->serving_lock);
    c->serving = db;
    pthread_mutex_unlock(&c->serving_lock);
}

/* The previous image's liveness descriptor (HPS_HANDOVER_ENV), taken out
 * of the environment; -1 if none. */
static int take_handover_fd(void)
{
    const char *v = getenv(HPS_HANDOVER_ENV);
    char *end;
    long fd = v ? strtol(v, &end, 10) : -1;
    unsetenv(HPS_HANDOVER_ENV);
    return v && *end == 0 && fd >= 0 && fd < 65536 && fcntl((int)fd, F_GETFD) >= 0 ? (int)fd : -1;
}

int coord_segment_hold_serving(coord_t *c)
{
    const char *name = c->conf->volatile_db.shared_memory_name;
    hps_shmdb_proc_opts_t po = proc_opts(c);
    int handover = take_handover_fd(); /* the previous image: alive to the workers until here */
    int ex = lock_name(c, name);
    hps_shmdb_t *db = NULL;
    if (!ex && hps_shmdb_attach(name, &po, &db) == 0) {
        /* The coordinator alive on it is the previous image of this one
         * when it handed its lock over. */
        if (handover < 0 && other_coordinator(c, db, name))
            ex = HPS_EXIT_SEGMENT;
        else
            hold(c, db);
        /* This image's row becomes the coordinator's (the workers test its
         * liveness lock) before the previous image's row dies below: left
         * to the beat thread's first beat, the workers saw no live
         * coordinator for a round or more under load (int-model_control,
         * "ready throughout the load"). */
        if (!ex)
            hps_shmdb_heartbeat(db);
        if (!ex && handover >= 0) /* this process created it, before its execve */
            hps_shmdb_creator_reattach(db);
    } /* else nothing usable serves: coord_segment_open says what */
    if (handover >= 0)
        close(handover); /* the previous image's row: dead from now on, reaped */
    return ex;
}

int coord_segment_take_over(coord_t *c)
{
    const char *name = c->conf->volatile_db.shared_memory_name;
    if (c->serving || c->adopt || (!c->pdb && !c->ddb) ||
        !c->conf->volatile_db.initialize_after_startup || getenv(HPS_RELOAD_ENV))
        return 0;
    hps_shmdb_proc_opts_t po = proc_opts(c);
    hps_shmdb_t *db = NULL;
    int ex = coord_segment_lock(c);
    if (ex || hps_shmdb_attach(name, &po, &db) != 0)
        return ex; /* nothing usable: coord_segment_open says what */
    if (other_coordinator(c, db, name))
        return HPS_EXIT_SEGMENT;
    coord_cpus_confine(c); /* its workers serve from it while this process loads */
    if (!coord_prev_restart(c, db))
        hps_shmdb_detach(db); /* coord_segment_open attaches it again and decides */
    return 0;
}

int coord_segment_open(coord_t *c, bool *ret_reused)
{
    const char *name = c->conf->volatile_db.shared_memory_name;
    bool reload = getenv(HPS_RELOAD_ENV) != NULL;
    bool keep = c->adopt || (!c->conf->volatile_db.initialize_after_startup && !reload);
    unsetenv(HPS_RELOAD_ENV);          /* not for the processes it may start */
    int handover = take_handover_fd(); /* when not held by coord_segment_hold_serving */
    if (handover >= 0)
        close(handover);
    hps_shmdb_proc_opts_t po = proc_opts(c);
    char why[256];
    *ret_reused = false;
    int ex = coord_segment_lock(c);
    if (ex)
        return ex;
    if (c->serving)
        c->continues = true; /* a reload's, a fallback's or a restart's serving segment */
    if (c->serving && c->adopt) {
        /* A failed build's fallback: the segment it held from the start
         * (its misses answered meanwhile) is the one it serves again. */
        coord_prev_adopt(c);
        HPS_INFO("re-attached /dev/shm/hps.%s and kept its rows (the fallback of a failed "
                 "build)",
                 name);
        *ret_reused = true;
        return init_missq(c);
    }
    if (c->serving) { /* held from the start (coord_segment_hold_serving, _take_over) */
        c->replacing = hps_shmdb_other_procs(c->serving) > 0;
        if (c->serving_restart)
            coord_restart_check(c, c->serving); /* a reload checked before it began */
        HPS_INFO("replacing the existing /dev/shm/hps.%s once the new one is loaded (%s); "
                 "its workers serve from it meanwhile",
                 name, c->serving_restart ? "restart" : "reload");
        ex = create_fresh(c, name);
        return ex ? ex : init_missq(c);
    }
    hps_err_t rc = hps_shmdb_attach(name, &po, &c->db);
    if (rc == 0)
        c->continues = true; /* a segment of this name served before */
    if (rc == 0 && other_coordinator(c, c->db, name)) {
        c->db = NULL;
        return HPS_EXIT_SEGMENT;
    }
    if (rc == 0) /* its workers serve from it while this process loads */
        coord_cpus_confine(c);
    char stale[512];
    bool was_stale = false;
    if (rc == 0 && keep && !c->adopt && coord_kept_segment_stale(c, c->db, stale, sizeof(stale))) {
        HPS_WARN("not keeping the rows of /dev/shm/hps.%s (initialize_after_startup = false): "
                 "%s; a new segment is built beside it",
                 name, stale);
        keep = false;
        was_stale = true;
    }
    if (rc == 0 && keep) {
        /* A coordinator killed while loading leaves LOADING: its tables may
         * be incomplete, so they are filled again (upserts: idempotent). */
        hps_segment_info_t si;
        bool partial =
            hps_shmdb_segment_info(c->db, &si) == 0 && si.coord_state == HPS_COORD_LOADING;
        if (partial)
            HPS_WARN("re-attached /dev/shm/hps.%s, left by a coordinator (pid %d) that stopped "
                     "while loading: filling its tables again (initialize_after_startup = false)",
                     name, (int)si.coord_pid);
        else
            HPS_INFO("re-attached /dev/shm/hps.%s and kept its rows "
                     "(initialize_after_startup = false)",
                     name);
        *ret_reused = !partial;
        return init_missq(c);
    }
    if (rc == 0) {
        /* Built beside it: its workers serve from it until the new one is
         * published (issue 20: a restart never disturbs what is serving). */
        c->replacing = hps_shmdb_other_procs(c->db) > 0;
        if (!reload)
            coord_restart_check(c, c->db);
        HPS_INFO("replacing the existing /dev/shm/hps.%s once the new one is loaded "
                 "(%s); its workers serve from it meanwhile",
                 name,
                 reload      ? "reload"
                 : was_stale ? "its rows are not this configuration's"
                             : "initialize_after_startup = true");
        if (reload) { /* kept: beaten on, and told the answer if the build fails */
            hold(c, c->db);
            coord_prev_start(c); /* not held from the start: its misses answered from here */
        } else if (!coord_prev_restart(c, c->db)) /* kept: its misses answered meanwhile */
            hps_shmdb_detach(c->db);
        c->db = NULL;
    } else if (rc == HPS_EBADMAGIC && unfinished(name)) {
        HPS_WARN("replacing /dev/shm/hps.%s: never initialized (magic 0), left by a coordinator "
                 "killed while creating it",
                 name);
        hps_shmdb_unlink(name);
    } else if (rc == HPS_EBADMAGIC || rc == -EACCES || rc == HPS_EINVAL) {
        hps_shmdb_probe(name, why, sizeof(why));
        HPS_ERROR("/dev/shm/hps.%s cannot be used: %s (%s); remove it or set "
                  "volatile_db.shared_memory_name",
                  name, hps_strerror(rc), why);
        return HPS_EXIT_SEGMENT;
    } else if (rc != HPS_ENOTFOUND) {
        hps_shmdb_probe(name, why, sizeof(why));
        HPS_WARN("replacing /dev/shm/hps.%s: %s (%s)", name, hps_strerror(rc), why);
        hps_shmdb_unlink(name);
    }
    if (rc == HPS_ENOTFOUND && keep && c->conf->update_source.type == HPS_CONF_UPDATE_KAFKA)
        /* A reboot (or hps-shm rm): the rows it kept are gone, and the
         * volatile group's committed offsets are past the updates they
         * held.  Filled from the persistent DB where it holds the files
         * (with its updates; Kafka then goes on from where its group
         * stands); else from the files, and those updates are lost. */
        HPS_WARN("initialize_after_startup = false, but there is no /dev/shm/hps.%s to keep (a "
                 "first start, a reboot, or removed): a new segment is filled from %s; online "
                 "updates a previous one held %s",
                 name,
                 c->pdb ? "the persistent DB where it holds the model files, else from the files"
                        : "the model files",
                 c->pdb ? "are in it only for tables the persistent DB holds the files of"
                        : "are not in it (no persistent DB keeps them), and Kafka goes on from "
                          "the offsets its group committed: they are lost");
    ex = create_fresh(c, name);
    return ex ? ex : init_missq(c);
}
