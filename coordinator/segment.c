/*
 * segment.c -- hps-coordinator's side of the shared-memory segment: create
 * it, or re-attach the one a previous coordinator left, and make sure no
 * other coordinator is alive on it.
 */
#include <errno.h>
#include <signal.h>
#include <time.h>

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
                          .mode = (mode_t)v->shared_memory_mode};
    hps_shmdb_proc_opts_t po = proc_opts(c);
    hps_err_t rc = hps_shmdb_create(name, &o, &po, &c->db);
    if (rc < 0) {
        HPS_ERROR("cannot create shared memory /dev/shm/hps.%s (%llu bytes): %s", name,
                  (unsigned long long)o.size_bytes, hps_strerror(rc));
        return HPS_EXIT_SEGMENT;
    }
    HPS_INFO("created shared memory /dev/shm/hps.%s: %llu bytes, mode %04o", name,
             (unsigned long long)o.size_bytes, (unsigned)(o.mode ? o.mode : 0600));
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

int coord_segment_open(coord_t *c, bool *ret_reused)
{
    const char *name = c->conf->volatile_db.shared_memory_name;
    bool keep = !c->conf->volatile_db.initialize_after_startup;
    hps_shmdb_proc_opts_t po = proc_opts(c);
    char why[256];
    *ret_reused = false;
    hps_err_t rc = hps_shmdb_attach(name, &po, &c->db);
    if (rc == 0 &&
        hps_shmdb_coordinator_alive(c->db, (uint32_t)c->conf->hps.worker_timeout_ms, false)) {
        hps_segment_info_t si;
        hps_shmdb_segment_info(c->db, &si);
        HPS_ERROR("another hps-coordinator (pid %d) is alive on /dev/shm/hps.%s; stop it first",
                  (int)si.coord_pid, name);
        hps_shmdb_detach(c->db);
        c->db = NULL;
        return HPS_EXIT_SEGMENT;
    }
    if (rc == 0 && keep) {
        HPS_INFO("re-attached /dev/shm/hps.%s and kept its rows (initialize_after_startup = false)",
                 name);
        *ret_reused = true;
        return init_missq(c);
    }
    if (rc == 0) {
        HPS_INFO("replacing the existing /dev/shm/hps.%s (initialize_after_startup = true)", name);
        hps_shmdb_detach(c->db);
        c->db = NULL;
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
    int ex = create_fresh(c, name);
    return ex ? ex : init_missq(c);
}
