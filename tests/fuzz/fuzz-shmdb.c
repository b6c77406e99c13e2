/*
 * fuzz-shmdb.c -- libFuzzer target: `hps-shm check`, attach and the readers
 * on a corrupted segment image (shmdb/).
 *
 * At start the target builds a small valid segment through the API (three
 * tables, one of each value layout: dim 4 SOA, dim 8 AOS with 32-bit keys,
 * dim 20 in row pages with a free-row list; an update log and a miss
 * queue), normalizes the fields that depend on the time and the process
 * (so an input means the same image in every run), and keeps that image.
 * For each input it writes the image back, applies the input's patches to
 * it, then does what hps-shm and a worker do: probe, attach, segment and
 * table info, lookups, size, hps_shmdb_check, iterate, the process table,
 * the update log and miss-queue readers, then detaches.  Writers are left
 * out: the coordinator writes only segments it created and trusts them.
 *
 * Input:  byte 0   bit 1 also iterate (hps-shm dump), other bits unused
 *         patches  [off: 3 bytes LE, modulo the image's used bytes]
 *                  [n: 1 byte, 1 + n % 64 bytes follow][bytes]
 *
 * Lock words are segment bytes like any other: a garbage one makes
 * pthread_mutex_lock wait forever (a hang no code can tell from a live
 * holder) or fail an assertion inside glibc (a garbage mutex kind).  This
 * file therefore defines pthread_mutex_lock: a mutex inside the attached
 * segment whose kind is not that of the segment's robust, process-shared
 * mutexes gets EINVAL, any other is tried once (pthread_mutex_trylock;
 * EBUSY then reaches the caller as an error); a mutex outside the segment
 * is taken as usual (trylock, yielding while it is held).
 *
 * The object is /dev/shm/hps.hpsfuzz-shmdb.<pid>, unlinked at exit;
 * objects of processes that are gone (a crash) are removed by the next run.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hps/shmdb.h"
#include "shmdb/internal.h"

#define PREFIX    "hpsfuzz-shmdb."
#define SEG_BYTES (1u << 20)

static char seg_name[64];
static uint8_t *pristine; /* the valid image */
static uint64_t used;     /* bytes of it handed out by the allocator */
static uint32_t ids[3];

/* The attached handle's mapping, while a run uses it. */
static const uint8_t *seg_lo, *seg_hi;
static int seg_kind; /* __kind of a robust, process-shared mutex (glibc) */

static uint8_t *img; /* our mapping of the object */

int pthread_mutex_lock(pthread_mutex_t *m)
{
    const uint8_t *p = (const uint8_t *)m;
    if (p >= seg_lo && p < seg_hi) {
        if (m->__data.__kind != seg_kind)
            return EINVAL;
        return pthread_mutex_trylock(m);
    }
    for (;;) {
        int rc = pthread_mutex_trylock(m);
        if (rc != EBUSY)
            return rc;
        sched_yield();
    }
}

static void fail(const char *what, hps_err_t rc)
{
    fprintf(stderr, "fuzz-shmdb: %s: %s\n", what, hps_strerror(rc));
    abort();
}

static void cleanup(void)
{
    hps_shmdb_unlink(seg_name);
}

/* Remove the objects of earlier runs whose process is gone. */
static void remove_stale(void)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    if (!d)
        return;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "hps." PREFIX, sizeof("hps." PREFIX) - 1) != 0)
            continue;
        char *end;
        long pid = strtol(e->d_name + sizeof("hps." PREFIX) - 1, &end, 10);
        if (*end || pid <= 0 || (kill((pid_t)pid, 0) != 0 && errno == ESRCH))
            hps_shmdb_unlink(e->d_name + 4);
    }
    closedir(d);
}

static void fill(hps_shmdb_t *db, uint32_t id, uint32_t dim, uint32_t key_bytes, int n,
                 int64_t base)
{
    uint8_t keys[64 * 8];
    float vals[64 * 20];
    for (int i = 0; i < n; i++) {
        int64_t k = base + i * 7919;
        if (key_bytes == 4)
            memcpy(keys + i * 4, &(uint32_t){(uint32_t)k}, 4);
        else
            memcpy(keys + i * 8, &k, 8);
        for (uint32_t j = 0; j < dim; j++)
            vals[i * dim + j] = (float)i + (float)j / 64.0f;
    }
    hps_err_t rc = hps_shmdb_upsert(db, id, (size_t)n, keys, vals, NULL);
    if (rc)
        fail("upsert", rc);
}

static void setup(void)
{
    pthread_mutex_t ref;
    if (hps__shmdb_mutex_init(&ref) != 0)
        abort();
    seg_kind = ref.__data.__kind;
    remove_stale();
    snprintf(seg_name, sizeof(seg_name), PREFIX "%ld", (long)getpid());
    hps_shmdb_opts_t o = {.size_bytes = SEG_BYTES, .allocation_rate = 64u << 10};
    hps_shmdb_t *db;
    hps_err_t rc = hps_shmdb_create(seg_name, &o, NULL, &db);
    if (rc)
        fail("create", rc);
    atexit(cleanup);
    static const struct {
        const char *name;
        uint32_t dim, key_bytes, parts;
        hps_overflow_policy_t policy;
        uint64_t margin;
    } t[3] = {
        {"soa", 4, 8, 2, HPS_EVICT_LEAST_USED, UINT64_MAX},
        {"aos", 8, 4, 1, HPS_EVICT_RANDOM, 1000},
        {"rows", 20, 8, 2, HPS_EVICT_OLDEST, 40},
    };
    for (int i = 0; i < 3; i++) {
        hps_table_spec_t s = {.model = "fz",
                              .table = t[i].name,
                              .dim = t[i].dim,
                              .key_bytes = t[i].key_bytes,
                              .default_value = 0.5f,
                              .num_partitions = t[i].parts,
                              .overflow_margin = t[i].margin,
                              .overflow_policy = t[i].policy,
                              .overflow_resolution_target = 0.75,
                              .expected_rows = 32};
        if ((rc = hps_shmdb_table_create(db, &s, &ids[i])))
            fail("table_create", rc);
        fill(db, ids[i], t[i].dim, t[i].key_bytes, 24, 1 + i);
    }
    int64_t gone[2] = {3, 3 + 7919 * 5};
    if ((rc = hps_shmdb_erase(db, ids[2], 2, gone, NULL)))
        fail("erase", rc);
    float v[4] = {0};
    (void)hps_shmdb_lookup(db, ids[0], 1, &(int64_t){1}, v, NULL, NULL);
    if ((rc = hps_shmdb_updlog_init(db, ids[0], 64)) ||
        (rc = hps_shmdb_updlog_append(db, ids[0], 2, (int64_t[]){1, 2})))
        fail("updlog", rc);
    if ((rc = hps_shmdb_missq_init(db, 2, 4096)))
        fail("missq_init", rc);
    hps_segment_info_t si;
    hps_shmdb_segment_info(db, &si);
    used = si.used_bytes;
    hps_shmdb_detach(db);

    char obj[128];
    snprintf(obj, sizeof(obj), "/hps.%s", seg_name);
    int fd = shm_open(obj, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0)
        fail("shm_open", -errno);
    img = mmap(NULL, SEG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (img == MAP_FAILED)
        fail("mmap", -errno);
    /* The same image in every run: no times, pids or names of this run. */
    struct shm_hdr *h = (struct shm_hdr *)img;
    h->creator_pid = 1;
    h->created_ns = 0;
    memset(h->name, 0, sizeof(h->name));
    snprintf(h->name, sizeof(h->name), "fuzz");
    for (int i = 0; i < HPS_SHMDB_MAX_PROCS; i++) {
        h->procs[i].attached_ns = 0;
        atomic_store(&h->procs[i].heartbeat_ns, 0);
    }
    pristine = malloc(SEG_BYTES);
    memcpy(pristine, img, SEG_BYTES);
}

static void report(void *ctx, const char *msg)
{
    (void)msg;
    ++*(uint64_t *)ctx;
}

static int visit(void *ctx, uint64_t key, const float *value)
{
    (void)key;
    volatile float x = value[0];
    (void)x;
    return ++*(uint64_t *)ctx >= 10000; /* enough: stop */
}

static void readers(hps_shmdb_t *db, uint8_t flags)
{
    hps_segment_info_t si;
    hps_table_info_t ti;
    hps_partition_info_t parts[HPS_SHMDB_MAX_PARTITIONS];
    (void)hps_shmdb_segment_info(db, &si);
    uint32_t n = hps_shmdb_table_count(db);
    for (uint32_t id = 0; id < n && id < 4; id++) {
        if (hps_shmdb_table_info(db, id, &ti) != 0)
            continue;
        (void)hps_shmdb_partition_info(db, id, parts);
        int64_t keys[6] = {1, 2, 3, 1 + 7919, 2 + 7919 * 23, -1};
        uint32_t keys32[6] = {1, 2, 3, 1 + 7919, 2 + 7919 * 23, 0xffffffffu};
        if (ti.dim > 0 && ti.dim <= HPS_SHMDB_MAX_DIM) {
            float *vals = malloc(6 * (size_t)ti.dim * sizeof(float));
            uint8_t found[6];
            size_t hits;
            (void)hps_shmdb_lookup(db, id, 6, ti.key_bytes == 4 ? (void *)keys32 : (void *)keys,
                                   vals, found, &hits);
            free(vals);
        }
        uint64_t rows;
        (void)hps_shmdb_size(db, id, &rows);
        uint64_t head, got_keys[8];
        uint32_t cap;
        size_t got;
        bool lapped;
        if (hps_shmdb_updlog_head(db, id, &head, &cap) == 0)
            (void)hps_shmdb_updlog_read(db, id, 0, got_keys, 8, &got, &head, &lapped);
    }
    uint64_t problems = 0;
    (void)hps_shmdb_check(db, report, &problems, &problems);
    if (flags & 2) {
        uint64_t seen = 0;
        for (uint32_t id = 0; id < n && id < 4; id++)
            (void)hps_shmdb_iterate(db, id, visit, &seen);
    }
    hps_proc_info_t procs[HPS_SHMDB_MAX_PROCS];
    size_t np = HPS_SHMDB_MAX_PROCS;
    (void)hps_shmdb_procs(db, procs, &np, false);
    (void)hps_shmdb_coordinator_alive(db, 1000, false);
    (void)hps_shmdb_creator_attached(db);
    hps_missq_info_t mq;
    (void)hps_shmdb_miss_stats(db, &mq);
    hps_update_stats_t us;
    (void)hps_shmdb_update_stats_get(db, 0, &us);
}

/* Every mutex this run locked should be unlocked and off the thread's
 * robust list (glibc links each robust mutex it holds there, and writes
 * through the list's first entry at the next lock).  Some corrupt images
 * left an entry inside the segment after it was detached (found by this
 * target in November 2026, issue 19): partition repair wrote into the lock
 * it held, so its unlock failed (EPERM).  The write (a bucket version made
 * even) happened only when the lock word, this thread's TID, was odd, so an
 * input reproduced it in one process out of two (regress/shmdb/
 * crash-00b2279a...).  Such an entry would make a later run's lock fault
 * far from the cause, so the run that leaves one fails here, with its own
 * input. */
static void robust_list_check(void)
{
    struct robust_list_head *head = NULL;
    size_t len = 0;
    if (syscall(SYS_get_robust_list, 0, &head, &len) != 0 || !head)
        return;
    if (head->list.next != &head->list) {
        fprintf(stderr, "fuzz-shmdb: this run left a robust mutex on the thread's list (a lock "
                        "written while held, or left held)\n");
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!img)
        setup();
    memcpy(img, pristine, SEG_BYTES);
    if (size < 1)
        return 0;
    uint8_t flags = data[0];
    size_t i = 1;
    while (i + 4 <= size) {
        uint64_t off =
            ((uint64_t)data[i] | (uint64_t)data[i + 1] << 8 | (uint64_t)data[i + 2] << 16) % used;
        size_t n = 1 + data[i + 3] % 64;
        i += 4;
        if (n > size - i)
            n = size - i;
        if (n > used - off)
            n = (size_t)(used - off);
        memcpy(img + off, data + i, n);
        i += n;
    }
    char msg[256];
    if (hps_shmdb_probe(seg_name, msg, sizeof(msg)) != 0)
        return 0;
    hps_shmdb_t *db;
    hps_shmdb_proc_opts_t popts = {.role = HPS_ROLE_TOOL, .device = -1};
    if (hps_shmdb_attach(seg_name, &popts, &db) != 0)
        return 0;
    seg_lo = db->base;
    seg_hi = db->base + db->size;
    readers(db, flags);
    seg_lo = seg_hi = NULL;
    hps_shmdb_detach(db);
    robust_list_check();
    return 0;
}
