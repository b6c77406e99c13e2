/*
 * staged.c -- what builds beside a serving segment leave in /dev/shm: the
 * hidden objects /dev/shm/.hps.<name>.new (hps_shmdb_opts_t.staged), found,
 * told apart (a build in progress, or the remains of a killed one) and
 * removed for the tools (hps-shm ls, rm).
 *
 * A staged object's creator registers in the object's own process table
 * and holds its row's liveness lock (segment.c, LIVENESS) until it
 * publishes the object or dies.  So "in progress" is that lock held,
 * probed with F_OFD_GETLK through a descriptor of our own: nothing is
 * attached, locked or written, in any PID namespace.  The header is read
 * through a read-only mapping of its first page(s) only.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* A staged object whose header names no creator yet is taken for a build
 * in progress while it is younger than this (a creator fills its header
 * within milliseconds of creating the object). */
#define STAGED_YOUNG_S 60

/* Whether the creator of the staged object open at fd (st: its fstat) is
 * alive: its process-table row's lock is held.  A header too short or
 * unreadable, or a doubt, counts as alive (never remove on a doubt). */
static bool creator_alive(int fd, const struct stat *st)
{
    size_t len = sizeof(struct shm_hdr);
    if ((uint64_t)st->st_size < len)
        return time(NULL) - st->st_ctime < STAGED_YOUNG_S;
    const struct shm_hdr *h = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED)
        return true;
    uint64_t ident = atomic_load_explicit(&h->creator_proc, memory_order_relaxed);
    uint32_t slot = (uint32_t)ident, gen = (uint32_t)(ident >> 32);
    bool alive;
    if (slot == 0 || slot > HPS_SHMDB_MAX_PROCS)
        alive = time(NULL) - st->st_ctime < STAGED_YOUNG_S;
    else {
        const struct shm_proc *p = &h->procs[slot - 1];
        struct flock fl = {.l_type = F_WRLCK,
                           .l_whence = SEEK_SET,
                           .l_start = HPS__SHMDB_LIVE_OFF(slot - 1),
                           .l_len = 1};
        alive = fcntl(fd, F_OFD_GETLK, &fl) != 0 || fl.l_type != F_UNLCK;
        alive = alive && atomic_load_explicit(&p->gen, memory_order_relaxed) == gen;
    }
    munmap((void *)h, len);
    return alive;
}

/* hps_shmdb_staged_info, and the object's identity (*ret_st) */
static hps_err_t probe(const char *name, uint64_t *ret_bytes, bool *ret_building,
                       struct stat *ret_st)
{
    if (!name || !hps_shmdb_name_ok(name) || !ret_bytes || !ret_building)
        return HPS_EINVAL;
    char obj[HPS_SHMDB_SEGMENT_NAME_MAX + 32];
    hps__shmdb_staged_name(obj, sizeof(obj), name);
    int fd = shm_open(obj, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0);
    if (fd < 0)
        return errno == ENOENT ? HPS_ENOTFOUND : -errno;
    hps_err_t rc = fstat(fd, ret_st) == 0 ? 0 : -errno;
    if (rc == 0 && !S_ISREG(ret_st->st_mode))
        rc = HPS_EINVAL;
    if (rc == 0) {
        *ret_bytes = (uint64_t)ret_st->st_size;
        *ret_building = creator_alive(fd, ret_st);
    }
    close(fd);
    return rc;
}

hps_err_t hps_shmdb_staged_info(const char *name, uint64_t *ret_bytes, bool *ret_building)
{
    struct stat st;
    return probe(name, ret_bytes, ret_building, &st);
}

hps_err_t hps_shmdb_staged_unlink(const char *name, uint64_t *ret_bytes)
{
    uint64_t bytes = 0;
    bool building = false;
    struct stat st, now;
    hps_err_t rc = probe(name, &bytes, &building, &st);
    if (rc < 0)
        return rc;
    if (building)
        return HPS_EBUSY;
    /* A coordinator that started meanwhile replaces a leftover with its own
     * build (hps_shmdb_create): unlink only the object probed.  (The window
     * between this check and the unlink is left: microseconds.) */
    char obj[HPS_SHMDB_SEGMENT_NAME_MAX + 32], path[HPS_SHMDB_SEGMENT_NAME_MAX + 48];
    hps__shmdb_staged_name(obj, sizeof(obj), name);
    snprintf(path, sizeof(path), "/dev/shm%s", obj);
    if (stat(path, &now) == 0 && (now.st_dev != st.st_dev || now.st_ino != st.st_ino))
        return HPS_EBUSY;
    if (shm_unlink(obj) != 0)
        return errno == ENOENT ? HPS_ENOTFOUND : -errno;
    if (ret_bytes)
        *ret_bytes = bytes;
    return 0;
}

hps_err_t hps_shmdb_list_staged(char ***ret_names, size_t *ret_n)
{
    return hps__shmdb_list_objects(HPS__SHMDB_STAGED_PREFIX, HPS__SHMDB_STAGED_SUFFIX, ret_names,
                                   ret_n);
}
