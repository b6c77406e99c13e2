/*
 * internal.h -- the process-local handle and helpers shared by the shmdb
 * source files (private).
 */
#ifndef HPS_SHMDB_INTERNAL_H
#define HPS_SHMDB_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/types.h>

#include "hps/shmdb.h"
#include "layout.h"

typedef struct hps__shmdb_pool hps__shmdb_pool_t;

/* The handle: pointers live here, never in the segment.  Unless a field
 * says otherwise it is set while the handle is built (create or attach,
 * one thread, before the handle is returned) and read-only afterwards. */
struct hps_shmdb {
    uint8_t *base;       /* mapping of the whole object */
    uint64_t size;       /* bytes mapped */
    struct shm_hdr *hdr; /* == base */
    int fd;              /* the object (shm_open); closed by detach, the last call */
    int live_fd;   /* own descriptor of the object holding the row's liveness lock, -1 if none */
    int proc_slot; /* row in hdr->procs, -1 if none */
    dev_t dev;     /* the object's identity: handles of one segment in this process */
    ino_t ino;
    /* This process's handles (segment.c: g_handles): linked, unlinked and
     * walked (live_fd closed by the fork child handler) under
     * g_handles_lock only. */
    struct hps_shmdb *next_handle;
    hps__shmdb_pool_t *pool; /* NULL: batches run in the caller */
    unsigned nthreads;       /* threads of a batch: pool's threads, or 1 */
    /* The object is still /dev/shm/.hps.<name>.new: set at create, cleared
     * by hps_shmdb_publish, which is not thread-safe with other calls on
     * the handle (no lock: the coordinator's main thread only). */
    bool staged;
    bool created; /* this handle created the object (init_header): only then is the
                   * header's zero_from trusted, never in a segment found on attach,
                   * whose never-used bytes may be anything (corruption) */
    char name[HPS_SHMDB_SEGMENT_NAME_MAX + 1];
    /* How this handle's large upserts write new rows (ops.c, BULK ROWS):
     * 0 until the first one chooses, then HPS__SHMDB_ROWS_MAPPING or
     * HPS__SHMDB_ROWS_PWRITE.  Relaxed atomic: set once; two threads that race
     * to choose measure the same machine. */
    _Atomic int row_writes;
};

/* madvise() advice that maps (and allocates) a range's pages for writing in
 * one call, Linux >= 5.14: commit_to, and the probe of ops.c. */
#ifdef MADV_POPULATE_WRITE
#define HPS__SHMDB_MADV_POPULATE_WRITE MADV_POPULATE_WRITE
#else
#define HPS__SHMDB_MADV_POPULATE_WRITE 23 /* <linux/mman.h>; older libcs lack the name */
#endif

#define HPS__SHMDB_ROWS_MAPPING 1
#define HPS__SHMDB_ROWS_PWRITE  2

/* Offset -> pointer; the caller has bounds-checked the offset. */
static inline void *hps__shmdb_ptr(const hps_shmdb_t *db, uint64_t off)
{
    return db->base + off;
}

/* True if [off, off + len) lies inside the mapping (no overflow). */
static inline bool hps__shmdb_in_bounds(const hps_shmdb_t *db, uint64_t off, uint64_t len)
{
    return off <= db->size && len <= db->size - off;
}

static inline uint64_t hps__shmdb_round_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) / a * a;
}

/* The header's bytes, a whole number of pages: the first block's offset
 * (segment.c writes it into the header and validates it, alloc.c bounds
 * the free list by it). */
#define HDR_BYTES hps__shmdb_round_up(sizeof(struct shm_hdr), 4096)

/* True if off names a block the allocator may have handed out that holds
 * len bytes: past the header, 64-byte aligned (every block is), and
 * [off, off + len) inside the mapping.  The rule for every offset a reader
 * follows from the segment (the header's area words, a table's partitions,
 * update-log rings); hps_shmdb_check() reports an offset that breaks it. */
static inline bool hps__shmdb_block_ok(const hps_shmdb_t *db, uint64_t off, uint64_t len)
{
    return off >= HDR_BYTES && !(off & (HPS_CACHELINE - 1)) && hps__shmdb_in_bounds(db, off, len);
}

uint64_t hps__shmdb_clock_ns(int clock);

/* The hidden object of a segment built beside the serving one
 * (hps_shmdb_opts_t.staged), "/.hps.<name>.new": not listed by
 * hps_shmdb_list(), never attached by name (segment.c; staged.c lists and
 * removes what a killed build left). */
#define HPS__SHMDB_STAGED_PREFIX ".hps."
#define HPS__SHMDB_STAGED_SUFFIX ".new"
void hps__shmdb_staged_name(char *buf, size_t len, const char *name);
/* The names of the objects "/dev/shm/<prefix><name><suffix>" whose name
 * passes hps_shmdb_name_ok, as hps_shmdb_list() returns them (segment.c). */
hps_err_t hps__shmdb_list_objects(const char *prefix, const char *suffix, char ***ret_names,
                                  size_t *ret_n);

/* Byte of the object whose OFD lock says row i of the process table is
 * alive (segment.c, LIVENESS). */
#define HPS__SHMDB_LIVE_OFF(i)                                                                     \
    ((off_t)(offsetof(struct shm_hdr, procs) + (size_t)(i) * sizeof(struct shm_proc)))

/* Relaxed loads and stores of counters and published words (the readers
 * that need ordering use acquire/release explicitly). */
#define LD(f)    atomic_load_explicit(&(f), memory_order_relaxed)
#define ST(f, v) atomic_store_explicit(&(f), (v), memory_order_relaxed)

/* kill(pid, 0) says the process exists (EPERM counts as alive).  Only
 * right inside one PID namespace: the process table's liveness is
 * hps_shmdb_pid_alive() (a row's liveness lock, segment.c); this one is
 * left for the GPU-cache registry's pid lists (gpureg.c). */
bool hps__shmdb_pid_alive(pid_t pid);

/* Areas published at a header offset word (updlog.c): the block at *slot if
 * set and in bounds, else NULL; create allocates a zeroed block once (under
 * dir_lock). */
void *hps__shmdb_area(hps_shmdb_t *db, uint64_t *slot, uint64_t bytes);
hps_err_t hps__shmdb_area_create(hps_shmdb_t *db, uint64_t *slot, uint64_t bytes);

/* The miss queue (missq.c) at hdr->missq_off, with all its slots, lies
 * inside the segment: false for an absent one or a corrupt offset. */
bool hps__shmdb_missq_ok(hps_shmdb_t *db);

/* What is wrong with table descriptor t, or NULL if it is usable (the
 * rule of hps__shmdb_table); the reason goes to buf when buf is not NULL
 * (table.c). */
const char *hps__shmdb_table_problem(hps_shmdb_t *db, const struct shm_table *t, char *buf,
                                     size_t len);
/* What is wrong with a name field of a table descriptor (no NUL within the
 * field, empty, longer than HPS_SHMDB_NAME_MAX, a byte outside
 * [A-Za-z0-9_-]), or NULL (table.c). */
const char *hps__shmdb_name_problem(const char *name, size_t field, char *buf, size_t len);

/* Robust process-shared mutexes.  hps__shmdb_lock returns 0, or 1 when the
 * previous owner died (the caller must repair and then call
 * hps__shmdb_lock_consistent), or -errno. */
hps_err_t hps__shmdb_mutex_init(pthread_mutex_t *m);
int hps__shmdb_lock(pthread_mutex_t *m);
void hps__shmdb_lock_consistent(hps_shmdb_t *db, pthread_mutex_t *m);
void hps__shmdb_unlock(pthread_mutex_t *m);

/* Allocator (alloc.c; segment lock held by the callee). Blocks are 64-byte
 * aligned and zero-filled. */
hps_err_t hps__shmdb_alloc(hps_shmdb_t *db, uint64_t bytes, uint64_t *ret_off);
void hps__shmdb_free(hps_shmdb_t *db, uint64_t off, uint64_t bytes);

/* Table access. */
struct shm_table *hps__shmdb_table(hps_shmdb_t *db, uint32_t id);
struct shm_part *hps__shmdb_parts(hps_shmdb_t *db, const struct shm_table *t);

/* Partition operations (map.c, write.c). */
/* Rows each partition of t is sized for: expected_rows over the partitions,
 * at most the overflow margin; 0 for an unsized table. */
uint64_t hps__shmdb_part_expected(const struct shm_table *t);
/* Hash block sized for hps__shmdb_part_expected(t) rows and, for paged layouts,
 * the page table and the first row page (write.c, next_page_rows). */
hps_err_t hps__shmdb_part_init(hps_shmdb_t *db, const struct shm_table *t, struct shm_part *p);
int hps__shmdb_part_lock(hps_shmdb_t *db, const struct shm_table *t, struct shm_part *p);
void hps__shmdb_part_repair(hps_shmdb_t *db, const struct shm_table *t, struct shm_part *p);
uint64_t hps__shmdb_part_check(hps_shmdb_t *db, const struct shm_table *t, struct shm_part *p,
                               uint32_t pi, hps_shmdb_report_fn report, void *ctx);

/* Thread pool (pool.c): run fn(arg, i) for i in [0, n), spread over the
 * pool's threads and the caller; returns when all are done. */
hps_err_t hps__shmdb_pool_create(unsigned nthreads, hps__shmdb_pool_t **ret);
void hps__shmdb_pool_destroy(hps__shmdb_pool_t *pool);
void hps__shmdb_pool_run(hps__shmdb_pool_t *pool, unsigned n, void (*fn)(void *arg, unsigned i),
                         void *arg);

#endif
