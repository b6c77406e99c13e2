/*
 * segment.c -- the shared-memory object: create, attach, validate, detach,
 * the process table, the coordinator heartbeat and robust locks.  The block
 * allocator under the segment lock is in alloc.c.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define MIN_SIZE_BYTES (1ULL << 20)
#define MIN_ALLOC_RATE (64ULL << 10)
#define MAX_SIZE_BYTES (1ULL << 40) /* 1 TiB: HPS_GEOM packs block offsets in 34 bits */

uint64_t hps__shmdb_clock_ns(int clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* ---- names ------------------------------------------------------------- */

bool hps_shmdb_name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > HPS_SHMDB_SEGMENT_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-' || c == '.';
        if (!ok)
            return false;
    }
    return true;
}

static void object_name(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "/hps.%s", name);
}

void hps__shmdb_staged_name(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "/" HPS__SHMDB_STAGED_PREFIX "%s" HPS__SHMDB_STAGED_SUFFIX, name);
}

/* The shm object name a handle's object has now. */
static void handle_object(const hps_shmdb_t *db, char *buf, size_t len)
{
    if (db->staged)
        hps__shmdb_staged_name(buf, len, db->name);
    else
        object_name(buf, len, db->name);
}

/* ---- robust mutexes ---------------------------------------------------- */

hps_err_t hps__shmdb_mutex_init(pthread_mutex_t *m)
{
    pthread_mutexattr_t a;
    int rc = pthread_mutexattr_init(&a);
    if (rc == 0)
        rc = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    if (rc == 0)
        rc = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    if (rc == 0)
        rc = pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
    return -rc;
}

int hps__shmdb_lock(pthread_mutex_t *m)
{
    int rc = pthread_mutex_lock(m);
    if (rc == 0)
        return 0;
    if (rc == EOWNERDEAD)
        return 1;
    return -rc; /* ENOTRECOVERABLE: a repairer died too; nothing safe to do */
}

void hps__shmdb_lock_consistent(hps_shmdb_t *db, pthread_mutex_t *m)
{
    /* Relaxed: a statistic only. */
    atomic_fetch_add_explicit(&db->hdr->repairs, 1, memory_order_relaxed);
    pthread_mutex_consistent(m);
}

void hps__shmdb_unlock(pthread_mutex_t *m)
{
    pthread_mutex_unlock(m);
}

/* ---- process table ----------------------------------------------------- */

bool hps__shmdb_pid_alive(pid_t pid)
{
    return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

/*
 * Liveness locks.  Row i of the process table is alive while an open file
 * description of the segment object holds an OFD write lock on byte
 * LIVE_OFF(i), the row's first byte (the lock guards no data: rows are
 * read and written through the mapping).  The owner takes it through a
 * descriptor of its own (live_fd) before it writes the row, and the kernel
 * drops it when the last copy of that descriptor is closed: at exit or at
 * death by any signal, with nobody left to clean up.  Locks belong to the
 * object's inode, so every process that maps /dev/shm/hps.<name> sees them
 * in whatever PID namespace it runs (containers sharing /dev/shm), where a
 * pid means nothing; the row's pid is the owner's own view, informative.
 *
 *  - Only the holder of a row's lock writes the row: its owner (take:
 *    lock, fill, pid last; detach: pid = 0, unlock) or a reaper, which
 *    takes a dead row's lock through the handle's other descriptor (fd),
 *    clears the pid and unlocks.  So a reaper never frees a live row and
 *    never races a process taking the row.
 *  - Probes (F_OFD_GETLK) go through fd, another open file description
 *    than live_fd, so a handle sees its own row's lock held like any other.
 *  - fork(): a child shares its parent's open file descriptions, and a
 *    lock lasts while any copy is open, so the child closes its copy of
 *    live_fd at once (pthread_atfork): a dead parent's row never stays
 *    alive through a child.  exec closes it as well (O_CLOEXEC).
 *  - (slot, gen) names a process across reuse of its row: gen is bumped
 *    each time the row is taken, so the header's coord_proc and
 *    creator_proc stop matching once their process is gone.
 * Heartbeats are kept beside the locks: a stopped or hung process holds
 * its lock, and only its heartbeat's age tells (hps_shmdb_coordinator_alive).
 */
#define LIVE_OFF(i) HPS__SHMDB_LIVE_OFF(i)

static int live_lock(int fd, int slot, short type)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = LIVE_OFF(slot), .l_len = 1};
    return fcntl(fd, F_OFD_SETLK, &fl) == 0 ? 0 : -errno;
}

/* Row i's lock is held, by anyone (this handle included: the probe goes
 * through fd).  A failed probe counts as held: never reap on a doubt. */
static bool row_locked(hps_shmdb_t *db, int i)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = LIVE_OFF(i), .l_len = 1};
    if (fcntl(db->fd, F_OFD_GETLK, &fl) != 0)
        return true;
    return fl.l_type != F_UNLCK;
}

/* This process's handles, for the fork handler and for telling our own
 * rows from others' (pids cannot: they repeat across PID namespaces). */
static pthread_mutex_t g_handles_lock = PTHREAD_MUTEX_INITIALIZER;
static hps_shmdb_t *g_handles;
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

static void atfork_prepare(void)
{
    pthread_mutex_lock(&g_handles_lock);
}

static void atfork_parent(void)
{
    pthread_mutex_unlock(&g_handles_lock);
}

/* The child's copies of the liveness descriptors go: the parent's locks
 * stay with the parent's copies and end with the parent. */
static void atfork_child(void)
{
    for (hps_shmdb_t *h = g_handles; h; h = h->next_handle) {
        if (h->live_fd >= 0)
            close(h->live_fd);
        h->live_fd = -1;
    }
    pthread_mutex_unlock(&g_handles_lock);
}

static void atfork_register(void)
{
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* Open the handle's liveness descriptor on the object db->fd maps and list
 * the handle, in one step under g_handles_lock, so that no fork in between
 * can leave a child with a copy that would keep our lock. */
static hps_err_t live_open(hps_shmdb_t *db)
{
    char obj[HPS_SHMDB_SEGMENT_NAME_MAX + 16];
    struct stat a, b;
    pthread_once(&g_atfork_once, atfork_register);
    if (fstat(db->fd, &a) < 0)
        return -errno;
    db->dev = a.st_dev;
    db->ino = a.st_ino;
    handle_object(db, obj, sizeof(obj));
    hps_err_t rc = 0;
    pthread_mutex_lock(&g_handles_lock);
    int fd = shm_open(obj, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
        rc = errno == ENOENT ? HPS_ENOTFOUND : -errno;
    } else if (fstat(fd, &b) < 0 || b.st_dev != a.st_dev || b.st_ino != a.st_ino) {
        close(fd); /* the name was removed and reused under us */
        rc = HPS_ENOTFOUND;
    } else {
        db->live_fd = fd;
        db->next_handle = g_handles;
        g_handles = db;
    }
    pthread_mutex_unlock(&g_handles_lock);
    return rc;
}

/* Unlist the handle and close its liveness descriptor (its lock goes). */
static void live_close(hps_shmdb_t *db)
{
    pthread_mutex_lock(&g_handles_lock);
    for (hps_shmdb_t **p = &g_handles; *p; p = &(*p)->next_handle) {
        if (*p == db) {
            *p = db->next_handle;
            break;
        }
    }
    if (db->live_fd >= 0)
        close(db->live_fd);
    db->live_fd = -1;
    pthread_mutex_unlock(&g_handles_lock);
}

/* Record the handle's row (read by own_rows() of other threads' handles). */
static void set_slot(hps_shmdb_t *db, int slot)
{
    pthread_mutex_lock(&g_handles_lock);
    db->proc_slot = slot;
    pthread_mutex_unlock(&g_handles_lock);
}

/* Mark the rows held by this process's handles of db's object. */
static void own_rows(const hps_shmdb_t *db, bool own[HPS_SHMDB_MAX_PROCS])
{
    memset(own, 0, HPS_SHMDB_MAX_PROCS * sizeof(bool));
    pthread_mutex_lock(&g_handles_lock);
    for (const hps_shmdb_t *h = g_handles; h; h = h->next_handle)
        if (h->live_fd >= 0 && h->proc_slot >= 0 && h->dev == db->dev && h->ino == db->ino)
            own[h->proc_slot] = true;
    pthread_mutex_unlock(&g_handles_lock);
}

/* Take a row: free ones first, then rows of dead processes not reaped
 * yet.  Returns the slot, HPS_EFULL, or -errno of the lock itself. */
static int proc_register(hps_shmdb_t *db, const hps_shmdb_proc_opts_t *po)
{
    struct shm_hdr *h = db->hdr;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < HPS_SHMDB_MAX_PROCS; i++) {
            struct shm_proc *s = &h->procs[i];
            if (pass == 0 && LD(s->pid) != 0)
                continue;
            int rc = live_lock(db->live_fd, i, F_WRLCK);
            if (rc == -EAGAIN || rc == -EACCES)
                continue; /* a live owner (or a reaper, for a moment) */
            if (rc < 0)
                return rc; /* no OFD locks here (Linux < 3.15): no liveness */
            /* The row is ours: nobody else writes it while we hold its lock. */
            s->role = po->role;
            s->device = po->device;
            s->attached_ns = hps__shmdb_clock_ns(CLOCK_REALTIME);
            atomic_store_explicit(&s->heartbeat_ns, hps__shmdb_clock_ns(CLOCK_MONOTONIC),
                                  memory_order_relaxed);
            s->caps = po->caps;
            s->caps_gen = atomic_fetch_add_explicit(&s->gen, 1, memory_order_relaxed) + 1;
            /* Release: a reader that sees our pid sees the row filled. */
            atomic_store_explicit(&s->pid, getpid(), memory_order_release);
            return i;
        }
    }
    return HPS_EFULL;
}

/* Free row i of a process that died attached: take its lock (fails if
 * the row is alive or just taken), clear it, let go.  true if freed. */
static bool reap_row(hps_shmdb_t *db, int i)
{
    if (live_lock(db->fd, i, F_WRLCK) != 0)
        return false;
    atomic_store_explicit(&db->hdr->procs[i].pid, 0, memory_order_release);
    live_lock(db->fd, i, F_UNLCK);
    return true;
}

/* (slot, gen) of this handle's row, as stored in coord_proc and creator_proc. */
static uint64_t own_ident(hps_shmdb_t *db)
{
    if (db->proc_slot < 0)
        return 0;
    uint64_t gen = LD(db->hdr->procs[db->proc_slot].gen);
    return gen << 32 | (uint64_t)(db->proc_slot + 1);
}

/* The process named by ident is still attached: its row was not taken
 * again since, and the row's lock is held. */
static bool ident_alive(hps_shmdb_t *db, uint64_t ident)
{
    uint32_t slot = (uint32_t)ident, gen = (uint32_t)(ident >> 32);
    if (slot == 0 || slot > HPS_SHMDB_MAX_PROCS)
        return false;
    struct shm_proc *s = &db->hdr->procs[slot - 1];
    if (LD(s->gen) != gen || LD(s->pid) == 0)
        return false;
    bool held = row_locked(db, (int)slot - 1);
    /* Re-read: the row may have been freed and taken again meanwhile. */
    return held && LD(s->gen) == gen && LD(s->pid) != 0;
}

hps_err_t hps_shmdb_proc_heartbeat(hps_shmdb_t *db)
{
    if (db->proc_slot >= 0)
        atomic_store_explicit(&db->hdr->procs[db->proc_slot].heartbeat_ns,
                              hps__shmdb_clock_ns(CLOCK_MONOTONIC), memory_order_relaxed);
    return 0;
}

hps_err_t hps_shmdb_heartbeat(hps_shmdb_t *db)
{
    /* Relaxed: readers only compare ages and test the row's lock; no data
     * depends on them.  The row first: a reader that pairs a new
     * heartbeat with the previous coordinator's row sees it dead once. */
    atomic_store_explicit(&db->hdr->coord_proc, own_ident(db), memory_order_relaxed);
    atomic_store_explicit(&db->hdr->coord_pid, getpid(), memory_order_relaxed);
    atomic_store_explicit(&db->hdr->coord_heartbeat_ns, hps__shmdb_clock_ns(CLOCK_MONOTONIC),
                          memory_order_relaxed);
    return hps_shmdb_proc_heartbeat(db);
}

void hps_shmdb_set_coord_timeout(hps_shmdb_t *db, uint32_t timeout_ms)
{
    atomic_store_explicit(&db->hdr->coord_timeout_ms, timeout_ms, memory_order_relaxed);
}

hps_err_t hps_shmdb_set_coord_state(hps_shmdb_t *db, hps_coord_state_t state)
{
    /* Release: what the coordinator did before (tables, rows) is visible to
     * a worker that sees the new state. */
    atomic_store_explicit(&db->hdr->coord_state, (uint32_t)state, memory_order_release);
    return 0;
}

void hps_shmdb_set_pdb_token(hps_shmdb_t *db, uint64_t token)
{
    atomic_store_explicit(&db->hdr->pdb_token, token, memory_order_release);
}

uint64_t hps_shmdb_pdb_token(hps_shmdb_t *db)
{
    return atomic_load_explicit(&db->hdr->pdb_token, memory_order_acquire);
}

hps_err_t hps_shmdb_set_conf_text(hps_shmdb_t *db, const char *text, size_t len)
{
    if (!db || !text || len > HPS_SHMDB_CONF_TEXT_MAX)
        return HPS_EINVAL;
    int lr = hps__shmdb_lock(&db->hdr->dir_lock);
    if (lr < 0)
        return lr;
    if (lr == 1)
        hps__shmdb_lock_consistent(db, &db->hdr->dir_lock);
    uint64_t off;
    hps_err_t rc = hps__shmdb_alloc(db, sizeof(struct shm_conftext) + len + 1, &off);
    if (rc == 0) {
        struct shm_conftext *ct = hps__shmdb_ptr(db, off);
        ct->len = len;
        memcpy(ct->text, text, len);
        ct->text[len] = '\0';
        /* release: the text is written before anyone finds it */
        atomic_store_explicit((_Atomic uint64_t *)&db->hdr->conftext_off, off,
                              memory_order_release);
    }
    hps__shmdb_unlock(&db->hdr->dir_lock);
    return rc;
}

hps_err_t hps_shmdb_conf_text(hps_shmdb_t *db, char **ret_text)
{
    uint64_t off =
        atomic_load_explicit((_Atomic uint64_t *)&db->hdr->conftext_off, memory_order_acquire);
    if (!off)
        return HPS_ENOTFOUND;
    if (!hps__shmdb_block_ok(db, off, sizeof(struct shm_conftext)))
        return HPS_ECORRUPT;
    const struct shm_conftext *ct = hps__shmdb_ptr(db, off);
    uint64_t len = ct->len;
    if (len > HPS_SHMDB_CONF_TEXT_MAX ||
        !hps__shmdb_in_bounds(db, off, sizeof(struct shm_conftext) + len + 1))
        return HPS_ECORRUPT;
    char *t = malloc(len + 1);
    if (!t)
        return -ENOMEM;
    memcpy(t, ct->text, len);
    t[len] = '\0';
    *ret_text = t;
    return 0;
}

size_t hps_shmdb_other_procs(hps_shmdb_t *db)
{
    bool own[HPS_SHMDB_MAX_PROCS];
    size_t n = 0;
    own_rows(db, own);
    for (int i = 0; i < HPS_SHMDB_MAX_PROCS; i++)
        n += !own[i] && LD(db->hdr->procs[i].pid) != 0 && row_locked(db, i);
    return n;
}

size_t hps_shmdb_other_rows(hps_shmdb_t *db)
{
    size_t n = 0;
    for (int i = 0; i < HPS_SHMDB_MAX_PROCS; i++)
        n += i != db->proc_slot && LD(db->hdr->procs[i].pid) != 0 && row_locked(db, i);
    return n;
}

bool hps_shmdb_pid_alive(hps_shmdb_t *db, pid_t pid)
{
    if (!db || pid <= 0)
        return false;
    for (int i = 0; i < HPS_SHMDB_MAX_PROCS; i++)
        if (LD(db->hdr->procs[i].pid) == pid && row_locked(db, i))
            return true;
    return false;
}

bool hps_shmdb_coordinator_attached(hps_shmdb_t *db)
{
    return ident_alive(db, LD(db->hdr->coord_proc));
}

bool hps_shmdb_creator_attached(hps_shmdb_t *db)
{
    return ident_alive(db, LD(db->hdr->creator_proc));
}

bool hps_shmdb_creator_reattach(hps_shmdb_t *db)
{
    if (!db || db->proc_slot < 0 || db->hdr->creator_pid != getpid()) /* written once, at create */
        return false;
    atomic_store_explicit(&db->hdr->creator_proc, own_ident(db), memory_order_relaxed);
    return true;
}

hps_err_t hps_shmdb_procs(hps_shmdb_t *db, hps_proc_info_t *procs, size_t *ret_n, bool reap)
{
    bool own[HPS_SHMDB_MAX_PROCS];
    size_t n = 0;
    own_rows(db, own);
    for (int i = 0; i < HPS_SHMDB_MAX_PROCS; i++) {
        struct shm_proc *s = &db->hdr->procs[i];
        /* Acquire: pairs with the taker's release; the row is filled. */
        int32_t pid = atomic_load_explicit(&s->pid, memory_order_acquire);
        if (pid == 0)
            continue;
        bool alive = row_locked(db, i);
        if (!alive && reap && reap_row(db, i))
            continue;
        procs[n++] = (hps_proc_info_t){
            .pid = pid,
            .role = (hps_proc_role_t)s->role,
            .device = s->device,
            .attached_ns = s->attached_ns,
            .heartbeat_ns = atomic_load_explicit(&s->heartbeat_ns, memory_order_relaxed),
            .alive = alive,
            .self = own[i],
            .slot = i,
            .caps = s->caps_gen == LD(s->gen) ? s->caps : 0,
        };
    }
    *ret_n = n;
    return 0;
}

/* ---- create / attach --------------------------------------------------- */

static hps_err_t handle_new(const char *name, const hps_shmdb_proc_opts_t *popts, hps_shmdb_t **ret)
{
    hps_shmdb_t *db = calloc(1, sizeof(*db));
    if (!db)
        return -ENOMEM;
    db->fd = -1;
    db->live_fd = -1;
    db->proc_slot = -1;
    db->base = MAP_FAILED;
    snprintf(db->name, sizeof(db->name), "%s", name);
    db->nthreads = popts && popts->num_threads > 1 ? popts->num_threads : 1;
    if (db->nthreads > 1) {
        hps_err_t rc = hps__shmdb_pool_create(db->nthreads, &db->pool);
        if (rc < 0) {
            free(db);
            return rc;
        }
    }
    *ret = db;
    return 0;
}

static hps_err_t init_header(hps_shmdb_t *db, const hps_shmdb_opts_t *o, mode_t mode)
{
    struct shm_hdr *h = db->hdr;
    h->hdr_bytes = (uint32_t)HDR_BYTES;
    h->size_bytes = o->size_bytes;
    h->allocation_rate = o->allocation_rate;
    h->creator_pid = getpid();
    h->mode = mode;
    h->created_ns = hps__shmdb_clock_ns(CLOCK_REALTIME);
    snprintf(h->name, sizeof(h->name), "%s", db->name);
    atomic_store(&h->committed, HDR_BYTES);
    atomic_store(&h->bump, HDR_BYTES);
    h->zero_from = HDR_BYTES; /* a new object: zeros from here on */
    db->created = true;
    hps_err_t rc = hps__shmdb_mutex_init(&h->seg_lock);
    if (rc == 0)
        rc = hps__shmdb_mutex_init(&h->dir_lock);
    for (int i = 0; rc == 0 && i < HPS_SHMDB_MAX_TABLES; i++)
        atomic_store(&h->tables[i].state, 0);
    if (rc < 0)
        return rc;
    h->format = HPS_SHM_FORMAT;
    /* Release: a process that sees the magic sees an initialized header. */
    atomic_thread_fence(memory_order_release);
    h->magic = HPS_SHM_MAGIC;
    return 0;
}

static hps_err_t check_opts(const hps_shmdb_opts_t *o)
{
    if (!o || o->size_bytes < MIN_SIZE_BYTES || o->size_bytes > MAX_SIZE_BYTES ||
        o->allocation_rate < MIN_ALLOC_RATE || o->allocation_rate > o->size_bytes)
        return HPS_EINVAL;
    return 0;
}

hps_err_t hps_shmdb_create(const char *name, const hps_shmdb_opts_t *opts,
                           const hps_shmdb_proc_opts_t *popts, hps_shmdb_t **ret)
{
    char obj[HPS_SHMDB_SEGMENT_NAME_MAX + 16];
    hps_shmdb_t *db = NULL;
    if (!hps_shmdb_name_ok(name) || check_opts(opts) < 0)
        return HPS_EINVAL;
    hps_err_t rc = handle_new(name, popts, &db);
    if (rc < 0)
        return rc;
    mode_t mode = opts->mode ? opts->mode : 0600;
    db->staged = opts->staged;
    handle_object(db, obj, sizeof(obj));
    if (db->staged)
        shm_unlink(obj); /* left by a creator killed before it published */
    db->fd = shm_open(obj, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (db->fd < 0) {
        rc = errno == EEXIST ? HPS_EEXIST : -errno;
        hps_shmdb_detach(db);
        return rc;
    }
    fchmod(db->fd, mode); /* umask must not narrow the configured mode */
    db->size = opts->size_bytes;
    if (ftruncate(db->fd, (off_t)db->size) < 0) {
        rc = -errno;
        goto fail;
    }
    rc = posix_fallocate(db->fd, 0, (off_t)HDR_BYTES);
    if (rc != 0) {
        rc = -rc; /* -ENOSPC: /dev/shm has no room for the first allocation */
        goto fail;
    }
    db->base = mmap(NULL, db->size, PROT_READ | PROT_WRITE, MAP_SHARED, db->fd, 0);
    if (db->base == MAP_FAILED) {
        rc = -errno;
        goto fail;
    }
    db->hdr = (struct shm_hdr *)db->base;
    if ((rc = init_header(db, opts, mode)) < 0 || (rc = live_open(db)) < 0)
        goto fail;
    rc = proc_register(db, popts ? popts : &(hps_shmdb_proc_opts_t){.device = -1});
    if (rc < 0)
        goto fail;
    set_slot(db, rc);
    atomic_store_explicit(&db->hdr->creator_proc, own_ident(db), memory_order_relaxed);
    *ret = db;
    return 0;
fail:
    shm_unlink(obj);
    hps_shmdb_detach(db);
    return rc;
}

/* Validate an object's header through a small read-only mapping first, so
 * that a foreign or truncated object never gets a large mapping.  On error
 * msg says why. */
static hps_err_t validate(int fd, uint64_t *ret_size, char *msg, size_t len)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    if ((uint64_t)st.st_size < 64) {
        snprintf(msg, len, "object is %lld bytes, smaller than a segment header",
                 (long long)st.st_size);
        return HPS_ETRUNCATED;
    }
    struct shm_hdr *h = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED)
        return -errno;
    hps_err_t rc = 0;
    if (h->magic != HPS_SHM_MAGIC) {
        snprintf(msg, len, "its first 8 bytes are 0x%016llx", (unsigned long long)h->magic);
        rc = HPS_EBADMAGIC;
    } else if (h->format != HPS_SHM_FORMAT) {
        snprintf(msg, len, "format 0x%08x, this build reads 0x%08x (another HPS version)",
                 h->format, HPS_SHM_FORMAT);
        rc = HPS_EVERSION;
    } else if (h->size_bytes < HDR_BYTES || h->size_bytes > MAX_SIZE_BYTES ||
               h->hdr_bytes != HDR_BYTES) {
        snprintf(msg, len, "absurd header: size %llu bytes, header %u bytes",
                 (unsigned long long)h->size_bytes, h->hdr_bytes);
        rc = HPS_ECORRUPT;
    } else if ((uint64_t)st.st_size < h->size_bytes) {
        snprintf(msg, len, "object is %lld bytes but its header says %llu (truncated)",
                 (long long)st.st_size, (unsigned long long)h->size_bytes);
        rc = HPS_ETRUNCATED;
    } else {
        *ret_size = h->size_bytes;
    }
    munmap(h, 4096);
    return rc;
}

static hps_err_t open_checked(const char *name, int *ret_fd, uint64_t *ret_size, char *msg,
                              size_t len)
{
    char obj[HPS_SHMDB_SEGMENT_NAME_MAX + 16];
    if (!hps_shmdb_name_ok(name)) {
        snprintf(msg, len, "invalid segment name");
        return HPS_EINVAL;
    }
    object_name(obj, sizeof(obj), name);
    int fd = shm_open(obj, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        snprintf(msg, len, "/dev/shm%s: %s", obj, strerror(e));
        return e == ENOENT ? HPS_ENOTFOUND : -e;
    }
    hps_err_t rc = validate(fd, ret_size, msg, len);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    *ret_fd = fd;
    return 0;
}

hps_err_t hps_shmdb_probe(const char *name, char *msg, size_t msg_len)
{
    char tmp[256];
    int fd;
    uint64_t size;
    if (!msg) {
        msg = tmp;
        msg_len = sizeof(tmp);
    }
    msg[0] = 0;
    hps_err_t rc = open_checked(name, &fd, &size, msg, msg_len);
    if (rc == 0)
        close(fd);
    return rc;
}

hps_err_t hps_shmdb_attach(const char *name, const hps_shmdb_proc_opts_t *popts, hps_shmdb_t **ret)
{
    char msg[256];
    hps_shmdb_t *db = NULL;
    int fd;
    uint64_t size;
    hps_err_t rc = open_checked(name, &fd, &size, msg, sizeof(msg));
    if (rc < 0)
        return rc;
    rc = handle_new(name, popts, &db);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    db->fd = fd;
    db->size = size;
    db->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (db->base == MAP_FAILED) {
        rc = -errno;
        hps_shmdb_detach(db);
        return rc;
    }
    db->hdr = (struct shm_hdr *)db->base;
    rc = live_open(db);
    if (rc == 0)
        rc = proc_register(db, popts ? popts : &(hps_shmdb_proc_opts_t){.device = -1});
    if (rc == HPS_EFULL && popts && popts->rowless_if_full)
        rc = -1; /* attached without a row (proc_slot -1) */
    else if (rc < 0) {
        hps_shmdb_detach(db);
        return rc;
    }
    set_slot(db, rc);
    *ret = db;
    return 0;
}

void hps_shmdb_detach(hps_shmdb_t *db)
{
    if (!db)
        return;
    if (db->base != MAP_FAILED && db->base) {
        /* Free our row while we hold its lock, then let the lock go (a
         * forked child has no lock: its parent's row is not its own). */
        if (db->proc_slot >= 0 && db->live_fd >= 0)
            atomic_store_explicit(&db->hdr->procs[db->proc_slot].pid, 0, memory_order_release);
        live_close(db);
        munmap(db->base, db->size);
    } else {
        live_close(db);
    }
    if (db->fd >= 0)
        close(db->fd);
    if (db->staged && db->fd >= 0) { /* never published: nobody else can use it */
        char obj[HPS_SHMDB_SEGMENT_NAME_MAX + 16];
        handle_object(db, obj, sizeof(obj));
        shm_unlink(obj);
    }
    hps__shmdb_pool_destroy(db->pool);
    free(db);
}

int hps_shmdb_detach_handover(hps_shmdb_t *db)
{
    int fd = -1;
    pthread_mutex_lock(&g_handles_lock); /* unlisted: the fork handler leaves it alone */
    for (hps_shmdb_t **p = &g_handles; *p; p = &(*p)->next_handle) {
        if (*p == db) {
            *p = db->next_handle;
            break;
        }
    }
    if (db->proc_slot >= 0) {
        fd = db->live_fd;
        db->live_fd = -1; /* the row stays (detach frees it only with a descriptor) */
    }
    pthread_mutex_unlock(&g_handles_lock);
    if (fd >= 0 && fcntl(fd, F_SETFD, 0) < 0) {
        close(fd);
        fd = -1;
    }
    hps_shmdb_detach(db);
    return fd;
}

hps_err_t hps_shmdb_publish(hps_shmdb_t *db)
{
    char from[HPS_SHMDB_SEGMENT_NAME_MAX + 32] = "/dev/shm";
    char to[HPS_SHMDB_SEGMENT_NAME_MAX + 32] = "/dev/shm";
    if (!db->staged)
        return 0;
    hps__shmdb_staged_name(from + 8, sizeof(from) - 8, db->name); /* after "/dev/shm" */
    object_name(to + 8, sizeof(to) - 8, db->name);
    /* The liveness descriptors and locks are on the inode: they survive. */
    if (rename(from, to) < 0)
        return -errno;
    db->staged = false;
    return 0;
}

hps_err_t hps_shmdb_unlink(const char *name)
{
    char obj[HPS_SHMDB_SEGMENT_NAME_MAX + 16];
    if (!hps_shmdb_name_ok(name))
        return HPS_EINVAL;
    object_name(obj, sizeof(obj), name);
    if (shm_unlink(obj) < 0)
        return errno == ENOENT ? HPS_ENOTFOUND : -errno;
    return 0;
}

hps_err_t hps__shmdb_list_objects(const char *prefix, const char *suffix, char ***ret_names,
                                  size_t *ret_n)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return -errno;
    char **names = NULL;
    size_t n = 0, cap = 0, pre = strlen(prefix), suf = strlen(suffix);
    struct dirent *e;
    hps_err_t rc = 0;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len <= pre + suf || strncmp(e->d_name, prefix, pre) != 0 ||
            strcmp(e->d_name + len - suf, suffix) != 0)
            continue;
        char *name = strndup(e->d_name + pre, len - pre - suf);
        if (name && !hps_shmdb_name_ok(name)) {
            free(name);
            continue;
        }
        char **nn = n < cap ? names : realloc(names, (cap = cap ? cap * 2 : 8) * sizeof(*names));
        if (!name || !nn) {
            free(name);
            rc = -ENOMEM;
            break;
        }
        names = nn;
        names[n++] = name;
    }
    closedir(d);
    if (rc < 0) {
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(names);
        return rc;
    }
    *ret_names = names;
    *ret_n = n;
    return 0;
}

hps_err_t hps_shmdb_list(char ***ret_names, size_t *ret_n)
{
    return hps__shmdb_list_objects("hps.", "", ret_names, ret_n);
}

bool hps_shmdb_coordinator_alive(hps_shmdb_t *db, uint32_t timeout_ms, bool serving)
{
    hps_segment_info_t si;
    hps_shmdb_segment_info(db, &si);
    /* The row's lock, not the pid: the coordinator may run in another PID
     * namespace, where its pid names nobody or somebody else. */
    if (si.coord_pid <= 0 || si.coord_heartbeat_ns == 0 ||
        (serving && si.coord_state != HPS_COORD_SERVING && si.coord_state != HPS_COORD_RELOADING &&
         si.coord_state != HPS_COORD_RELOADING_SERVED) ||
        !ident_alive(db, LD(db->hdr->coord_proc)))
        return false;
    if (si.coord_timeout_ms > timeout_ms) /* the coordinator's, raised by a reload */
        timeout_ms = si.coord_timeout_ms;
    return (hps__shmdb_clock_ns(CLOCK_MONOTONIC) - si.coord_heartbeat_ns) / 1000000ULL < timeout_ms;
}

hps_err_t hps_shmdb_segment_info(hps_shmdb_t *db, hps_segment_info_t *ret)
{
    struct shm_hdr *h = db->hdr;
    memset(ret, 0, sizeof(*ret));
    snprintf(ret->name, sizeof(ret->name), "%s", db->name);
    ret->format = h->format;
    ret->size_bytes = h->size_bytes;
    ret->committed_bytes = atomic_load_explicit(&h->committed, memory_order_relaxed);
    ret->free_bytes = atomic_load_explicit(&h->free_bytes, memory_order_relaxed);
    ret->used_bytes = atomic_load_explicit(&h->bump, memory_order_relaxed) - ret->free_bytes;
    ret->allocation_rate = h->allocation_rate;
    ret->creator_pid = h->creator_pid;
    ret->created_ns = h->created_ns;
    ret->coord_heartbeat_ns = atomic_load_explicit(&h->coord_heartbeat_ns, memory_order_relaxed);
    ret->coord_pid = atomic_load_explicit(&h->coord_pid, memory_order_relaxed);
    ret->coord_state =
        (hps_coord_state_t)atomic_load_explicit(&h->coord_state, memory_order_acquire);
    ret->coord_timeout_ms = atomic_load_explicit(&h->coord_timeout_ms, memory_order_relaxed);
    ret->num_tables = atomic_load_explicit(&h->num_tables, memory_order_acquire);
    ret->repairs = atomic_load_explicit(&h->repairs, memory_order_relaxed);
    return 0;
}
