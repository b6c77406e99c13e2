/*
 * layout.h -- the on-shm structures of the volatile database (private).
 *
 * Everything here lives in /dev/shm/hps.<name> and is shared by processes
 * that may be built from different commits: any change of a struct's size
 * changes HPS_SHM_FORMAT, and attach refuses a segment with another format.
 * No pointers: every reference is a byte offset from the segment start.
 *
 * Segment:
 *
 *   [ header (struct shm_hdr, incl. process table and table directory) ]
 *   [ blocks handed out by the allocator: partition arrays, hash blocks,
 *     row pages, page tables ... ]
 *
 * A partition is an open-addressing hash table of 64-byte buckets, seven
 * slots each, probed linearly.  Each bucket counts in `ovf` the keys whose
 * home bucket is at or before it but which live after it (the F14 "overflow
 * count"), so a lookup stops at the first bucket with ovf == 0 and erase
 * needs no tombstones.
 *
 * Values live either inline (one value slot per key slot, for stored rows
 * of at most 64 bytes, where a row pointer would cost more than the empty
 * slots) or in dense row pages referenced by a per-slot 32-bit row id
 * (larger rows: empty slots then cost 12 bytes, not a whole vector).  Row
 * pages never move, so growing the index (rehash) copies only keys and row
 * ids.
 *
 * A value slot holds one row in the table's storage type (hps_dtype_t,
 * include/hps/dtype.h): hps_dtype_row_bytes(dtype, dim) bytes, rounded up
 * to a multiple of 4 (hps__shmdb_vbytes) so that every row starts 4-byte aligned
 * (the fp16/bf16 decoders need 2, an int8 row's scale is then aligned too,
 * and a free row can hold the 32-bit link of the free-row list).  Writers
 * encode from fp32 before the bucket's version turns odd and copy the
 * stored bytes inside it; readers decode while they copy and validate the
 * version afterwards as for fp32, so a torn row is never returned.
 */
#ifndef HPS_SHMDB_LAYOUT_H
#define HPS_SHMDB_LAYOUT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "hps/dtype.h"
#include "hps/shmdb_gcache.h"

/* Layout version 2: GPU caches shared through the registry count their
 * writers (the writer epoch of kernels/gcache_internal.cuh); a build
 * without it would write a shared cache unseen by lookups that skip
 * validation.
 * Layout version 3: a process-table row is alive while its liveness lock
 * (an OFD lock on the row's first byte of the object, segment.c) is held,
 * not while kill(pid, 0) succeeds; a build of version 2 takes no such lock
 * and would be reaped as dead by this one.
 * Layout version 4: GPU-cache registry entries describe sharded caches
 * (device -1, shard devices, parts) and publish per-shard counters.
 * Layout version 5: the header's model control slots (struct shm_ctl); a
 * storage type per table (shm_table.dtype) and the ROWS_SOA layout. */
#define HPS_SHM_MAGIC          0x4244534d48535048ULL /* "HPSHMSDB" little-endian */
#define HPS_SHM_LAYOUT_VERSION 5u
#define HPS_CACHELINE          64
#define HPS_BUCKET_SLOTS       7
/* Layouts of a partition's hash block, chosen by the bytes of a stored row
 * (hps__shmdb_vbytes; 4 * dim for fp32) so that a lookup touches as few pages as
 * possible while a row stays close to its raw size:
 *  SOA  (<= 16 B):  [buckets (nb x 64 B)][values (nb x 7 slots)], densest;
 *  AOS  (<= 64 B):  per bucket [bucket][its 7 values], one page per key;
 *  ROWS (larger):   per bucket [bucket][7 row ids, padded to 64 B], the
 *                   rows in row pages; empty slots cost no vector;
 *  ROWS_SOA (larger, storage types other than fp32):
 *                   [buckets (nb x 64 B)][row ids (nb x 7, 28 B each)], the
 *                   rows in row pages.  The row ids of a bucket then sit in
 *                   another line (usually another page) than the bucket,
 *                   one more miss per lookup, but a row costs 5.5 bytes less
 *                   (4 per slot instead of 64 / 7), which a compact row
 *                   needs to stay within 5% of its key and stored bytes.
 *                   fp32 tables keep ROWS (one page per key). */
#define HPS_LAYOUT_SOA       0
#define HPS_LAYOUT_AOS       1
#define HPS_LAYOUT_ROWS      2
#define HPS_LAYOUT_ROWS_SOA  3
#define HPS_SOA_MAX_BYTES    16
#define HPS_INLINE_MAX_BYTES 64
/* Row pages per partition (indirect storage) and rows per page (max). */
#define HPS_MAX_ROW_PAGES 256
#define HPS_PAGE_SHIFT    22
#define HPS_PAGE_MAX_ROWS (1u << HPS_PAGE_SHIFT)
/* Load factor at which a partition grows, and the one it is sized for. */
#define HPS_MAX_LOAD    0.95
#define HPS_TARGET_LOAD 0.93
/* A row id no slot holds. */
#define HPS_NO_ROW 0xffffffffu

/* One hash bucket: a seqlock version, the occupancy mask, the overflow count
 * and seven keys; exactly one cache line. */
struct shm_bucket {
    _Atomic uint32_t ver; /* odd while a writer changes this bucket */
    _Atomic uint8_t occ;  /* bit i set: slot i holds a key */
    _Atomic uint8_t ovf;  /* keys that probed past this bucket (saturates at 255) */
    uint16_t pad;
    _Atomic uint64_t key[HPS_BUCKET_SLOTS];
};
_Static_assert(sizeof(struct shm_bucket) == 64, "bucket must be one cache line");

/* A partition: the robust writer mutex, a seqlock (gen) over the geometry,
 * and the geometry itself.  Readers snapshot (blk, nb) between two even
 * reads of gen.
 *
 * Guards ("lock" = this partition's mutex; every write under it, by the
 * process holding it; docs/architecture.md's table of shared state).  The
 * whole struct is first written by the table's creator under dir_lock
 * (table.c: create_partitions), before the release store of
 * shm_hdr.num_tables publishes the table. */
struct shm_part {
    pthread_mutex_t lock; /* process-shared, robust: the writers' lock */
    /* Geometry, one word so it is never torn: (block offset / 64) << 30 | nb.
     * Readers validate a lookup by re-reading gen, which grows by 2 at every
     * change of geometry (rehash), so a block freed and reused under a slow
     * reader is detected.  Both written under lock with release stores
     * (write.c: hps__shmdb_wgrow); readers load them lock-free (map.c). */
    _Atomic uint64_t geom;
    _Atomic uint32_t gen;
    uint32_t pad0;
    /* Bytes of the block geom names: lock.  (hps_shmdb_partition_info
     * reads it without the lock, a statistic.) */
    uint64_t blk_bytes;
    uint64_t pending; /* block under construction (freed by repair): lock */
    /* Live rows: written under lock (relaxed atomic); read lock-free as a
     * statistic and by writers under lock. */
    _Atomic uint64_t rows;
    _Atomic uint64_t evictions; /* added under lock (relaxed); read lock-free */
    _Atomic uint64_t repairs;   /* added under lock after EOWNERDEAD; read lock-free */
    uint64_t rng;               /* xorshift state for evict_random: lock */
    /* Indirect storage: row id = page << HPS_PAGE_SHIFT | index. */
    /* Offset of struct shm_page[HPS_MAX_ROW_PAGES]: set once at creation
     * (see above), then read-only; readers bounds-check it. */
    uint64_t pagetab;
    /* Pages allocated: written under lock with a release store after the
     * page's entry (write.c: add_page); read by writers under lock. */
    _Atomic uint32_t npages;
    uint32_t last_fill; /* rows handed out from the last page: lock */
    uint32_t free_row;  /* head of the free-row list, HPS_NO_ROW if empty: lock */
    uint32_t pad1;
    /* Bytes of all row pages: lock.  (hps_shmdb_partition_info reads it
     * without the lock, a statistic.) */
    uint64_t page_bytes;
    uint8_t reserved[56];
};
_Static_assert(sizeof(struct shm_part) % HPS_CACHELINE == 0, "partition must fill cache lines");

/* A table descriptor, in the header's directory.  dim .. source_rows (and
 * dtype) are written once while the descriptor is built (state 1, dir_lock
 * held, table.c: fill_descriptor), before the release store of
 * shm_hdr.num_tables publishes it; read-only afterwards (plain loads). */
struct shm_table {
    _Atomic uint32_t state; /* 0 free, 1 being created, 2 ready; written under dir_lock */
    uint32_t dim;
    uint32_t key_bytes;
    uint32_t num_partitions;
    uint32_t policy;
    float default_value;
    uint32_t layout;        /* HPS_LAYOUT_*: where values live */
    uint32_t model_version; /* hps_table_spec_t.model_version; set at creation */
    uint64_t margin;
    double target;
    uint64_t expected_rows;
    uint64_t parts; /* offset of struct shm_part[num_partitions] */
    char model[128];
    char table[128];
    uint64_t source_rows; /* rows of the model files; 0 = unknown */
    /* Storage type of every row (hps_dtype_t; 0 = fp32, also in segments of
     * builds before it).  Written once while the descriptor is built (state
     * 1, dir_lock held), before the release store of num_tables publishes
     * it; read-only afterwards, so readers load it plainly.  hps__shmdb_table()
     * refuses a value that is no type (corrupt segment). */
    uint32_t dtype;
    /* hps_table_spec_t.order: the table's 1-based position among its
     * model's tables (the KEYS / NUMKEYS order); 0 = not recorded (builds
     * before it: pad then, zero).  Written and read as dtype. */
    uint32_t order;
    /* Counters written by readers, one line of their own. */
    _Alignas(HPS_CACHELINE) _Atomic uint64_t lookups;
    _Atomic uint64_t hits;
    _Atomic uint64_t clock; /* LRU clock: one tick per lookup or upsert batch */
    uint8_t pad2[40];
    /* Counters written by writers. */
    _Alignas(HPS_CACHELINE) _Atomic uint64_t inserts;
    _Atomic uint64_t updates;
    _Atomic uint64_t erased;
    /* Which Redis rows the table was built beside (hps_shmdb_table_set_ddb_ident:
     * a hash of the distributed DB's record); 0: none known, also in
     * segments of builds before it (pad then, never written).  Release
     * store by the coordinator that builds the segment, acquire loads. */
    _Atomic uint64_t ddb_ident;
    /* The identity of the model files the table was loaded from
     * (hps_shmdb_table_set_files_ident: a hash of their paths, sizes,
     * modification times and contents); 0: none known, also in segments of builds before it (pad
     * then).  Release store by the coordinator that builds the segment,
     * acquire loads. */
    _Atomic uint64_t files_ident;
    uint8_t pad3[24];
};
_Static_assert(sizeof(struct shm_table) % HPS_CACHELINE == 0, "table must fill cache lines");

/* A row of the process table; one cache line (LMDB's reader slots).  Its
 * owner holds the row's liveness lock (segment.c) for as long as it is
 * attached; only the holder of that lock writes the row.  pid is the
 * owner's pid in its own PID namespace: informative, never a liveness
 * test, and not unique across containers. */
struct shm_proc {
    _Atomic int32_t pid; /* 0 = free; stored last (release) when a row is taken */
    int32_t role;
    int32_t device;
    _Atomic uint32_t gen; /* bumped each time the row is taken: (slot, gen) names a process */
    uint64_t attached_ns;
    _Atomic uint64_t heartbeat_ns;
    /* hps_proc_cap_t bits, and the gen they were written for: written by
     * the row's owner before its pid (release).  Builds before them leave
     * both as the row's last owner wrote them (pad then): caps count only
     * where caps_gen equals gen, else the owner recorded none. */
    uint32_t caps;
    uint32_t caps_gen;
    uint8_t pad[24];
};
_Static_assert(sizeof(struct shm_proc) == 64, "proc slot must be one cache line");

/* An entry of a partition's row-page table. */
struct shm_page {
    uint64_t off;  /* offset of rows * vbytes bytes (hps__shmdb_vbytes) */
    uint32_t rows; /* rows the page holds */
    uint32_t pad;
};

#define HPS_GEOM(blk, nb) ((((uint64_t)(blk) >> 6) << 30) | (uint64_t)(nb))
#define HPS_GEOM_BLK(g)   (((g) >> 30) << 6)
#define HPS_GEOM_NB(g)    ((uint32_t)((g) & ((1u << 30) - 1)))

/* Offsets inside a hash block of nb buckets for a table's layout. */
struct shm_geo {
    uint64_t gstride;   /* bytes from one bucket to the next */
    uint64_t voff;      /* offset of bucket 0's values or row ids */
    uint64_t vstride;   /* bytes from one bucket's values/row ids to the next */
    uint64_t stamp_off; /* offset of the access stamps (nb x 7 uint32), if any */
    uint64_t bytes;     /* whole block */
};

/* Bytes of one value slot: a stored row of dim elements of dtype
 * (hps_dtype_row_bytes, computed inline: every lookup's snapshot of every
 * partition needs it), rounded up to 4 (see the top of this file); 0 for
 * dim 0 or a dtype that is no type. */
static inline uint32_t hps__shmdb_vbytes(uint32_t dtype, uint32_t dim)
{
    uint64_t rb = dtype == HPS_DTYPE_FP32                              ? 4ull * dim
                  : dtype == HPS_DTYPE_FP16 || dtype == HPS_DTYPE_BF16 ? 2ull * dim
                  : dtype == HPS_DTYPE_INT8 && dim                     ? dim + 4ull
                                                                       : 0;
    return (uint32_t)((rb + 3) / 4 * 4);
}

/* Layout for value slots of vbytes bytes of storage type dtype. */
static inline uint32_t hps__shmdb_layout_for(uint32_t dtype, uint32_t vbytes)
{
    return vbytes <= HPS_SOA_MAX_BYTES      ? HPS_LAYOUT_SOA
           : vbytes <= HPS_INLINE_MAX_BYTES ? HPS_LAYOUT_AOS
           : dtype == HPS_DTYPE_FP32        ? HPS_LAYOUT_ROWS
                                            : HPS_LAYOUT_ROWS_SOA;
}

/* True for the layouts whose rows live in row pages (slots hold row ids). */
static inline int hps__shmdb_layout_paged(uint32_t layout)
{
    return layout == HPS_LAYOUT_ROWS || layout == HPS_LAYOUT_ROWS_SOA;
}

/* Geometry of a hash block of nb buckets whose value slots are vbytes
 * bytes (hps__shmdb_vbytes). */
static inline struct shm_geo hps__shmdb_geo(uint32_t layout, uint32_t vbytes, uint32_t policy,
                                            uint32_t nb)
{
    struct shm_geo g;
    uint64_t vals = (uint64_t)HPS_BUCKET_SLOTS * vbytes;
    if (layout == HPS_LAYOUT_ROWS_SOA) /* the slots hold 4-byte row ids */
        vals = HPS_BUCKET_SLOTS * sizeof(uint32_t);
    if (layout == HPS_LAYOUT_SOA || layout == HPS_LAYOUT_ROWS_SOA) {
        g.gstride = 64;
        g.voff = (uint64_t)nb * 64;
        g.vstride = vals;
        g.stamp_off = g.voff + ((uint64_t)nb * vals + 63) / 64 * 64;
    } else {
        uint64_t per = layout == HPS_LAYOUT_AOS ? vals : HPS_BUCKET_SLOTS * sizeof(uint32_t);
        g.gstride = 64 + (per + 63) / 64 * 64;
        g.voff = 64;
        g.vstride = g.gstride;
        g.stamp_off = (uint64_t)nb * g.gstride;
    }
    g.bytes = g.stamp_off;
    if (policy != HPS_EVICT_RANDOM)
        g.bytes += ((uint64_t)nb * HPS_BUCKET_SLOTS * sizeof(uint32_t) + 63) / 64 * 64;
    return g;
}

/* Element access through a view (struct wview, wview.h): it has b,
 * gstride, vals or rowid, vstride and vbytes. */
#define BKT(v, bi) ((struct shm_bucket *)((uint8_t *)(v)->b + (uint64_t)(bi) * (v)->gstride))
#define ROWID(v, slot)                                                                             \
    ((_Atomic uint32_t *)((uint8_t *)(v)->rowid + ((slot) / HPS_BUCKET_SLOTS) * (v)->vstride +     \
                          ((slot) % HPS_BUCKET_SLOTS) * sizeof(uint32_t)))
#define VALP(v, slot)                                                                              \
    ((uint8_t *)(v)->vals + ((slot) / HPS_BUCKET_SLOTS) * (v)->vstride +                           \
     ((slot) % HPS_BUCKET_SLOTS) * (uint64_t)(v)->vbytes)

/* A free block of the allocator (lives in the freed memory itself). */
struct shm_free {
    uint64_t bytes;
    uint64_t next;
};

/* Model control (Triton's explicit mode): one request per slot, claimed by
 * a requester with a CAS FREE -> CLAIMED, filled, then PENDING (release);
 * taken by the coordinator PENDING -> TAKEN, answered DONE or FAILED
 * (release, message first); freed by the requester when it has read the
 * answer, or by the coordinator 60 s after it (control.c). */
struct shm_ctl_slot {
    _Atomic uint32_t state;              /* hps_ctl_state_t; the protocol above */
    uint32_t op;                         /* hps_model_op_t; written by the claimer before PENDING */
    _Atomic uint64_t id;                 /* the requester's id (nonzero); written before PENDING */
    _Atomic uint64_t stamp_ns;           /* CLOCK_REALTIME of the last state change */
    char model[HPS_SHMDB_NAME_MAX + 8];  /* written before PENDING */
    char message[HPS_SHMDB_CTL_MSG_MAX]; /* written by the coordinator before DONE/FAILED */
};

struct shm_ctl {
    struct shm_ctl_slot slot[HPS_SHMDB_CTL_SLOTS];
    /* The request this segment was built for (a load or unload that needed
     * a new segment): written by its coordinator before publishing, then
     * read-only, except result_id: its requester clears it (CAS id -> 0,
     * hps_shmdb_ctl_release) once it has read the answer, so that the next
     * segment does not carry the answer over into a slot.  0 = none. */
    _Atomic uint64_t result_id;
    uint32_t result_state; /* HPS_CTL_DONE or HPS_CTL_FAILED */
    uint32_t pad;
    char result_message[HPS_SHMDB_CTL_MSG_MAX];
};

/* The header.  Unless a field says otherwise, it is written once by the
 * creator (segment.c: init_header) before the release fence that precedes
 * the store of magic, and read-only afterwards. */
struct shm_hdr {
    uint64_t magic;      /* 0: HPS_SHM_MAGIC; stored last by init_header (release fence) */
    uint32_t format;     /* 8: HPS_SHM_FORMAT */
    uint32_t hdr_bytes;  /* 12 */
    uint64_t size_bytes; /* 16: object size = shared_memory_size */
    uint64_t allocation_rate;
    /* Allocator (alloc.c): written under seg_lock; committed, bump and
     * free_bytes are atomics (relaxed) so that statistics read them
     * lock-free; free_head is read and written under seg_lock only. */
    _Atomic uint64_t committed; /* bytes fallocated, from 0 */
    _Atomic uint64_t bump;      /* next unallocated offset */
    _Atomic uint64_t free_bytes;
    uint64_t free_head; /* offset of the first struct shm_free, 0 = none */
    int32_t creator_pid;
    uint32_t mode;
    uint64_t created_ns;
    /* The serving coordinator's heartbeat (CLOCK_MONOTONIC ns) and pid:
     * relaxed stores by the coordinator only (hps_shmdb_heartbeat, one
     * writer: the flock of the segment name), lock-free readers that only
     * compare ages. */
    _Atomic uint64_t coord_heartbeat_ns;
    _Atomic int32_t coord_pid;
    /* Tables published: written under dir_lock with a release store after
     * the descriptor (table.c); readers load it (acquire) lock-free. */
    _Atomic uint32_t num_tables;
    _Atomic uint64_t repairs; /* robust-mutex repairs, any process (relaxed add) */
    char name[HPS_SHMDB_SEGMENT_NAME_MAX + 8];
    /* Offsets of optional areas, 0 = absent: each set once, under dir_lock,
     * by a release store after the area is built (missq.c, hps__shmdb_area_create
     * in updlog.c), then never changed; read lock-free with acquire loads
     * (hence plain uint64_t accessed through _Atomic casts) and
     * bounds-checked.  Miss queue, GPU-cache registry, update logs. */
    uint64_t missq_off;
    uint64_t gpureg_off;
    uint64_t updlog_off;
    /* hps_coord_state_t: the coordinator's release stores
     * (hps_shmdb_set_coord_state), lock-free readers. */
    _Atomic uint32_t coord_state;
    /* The worker_timeout_ms of the coordinator that beat last: relaxed
     * stores by it (hps_shmdb_set_coord_timeout), as coord_pid; 0 = not
     * said (a coordinator of a build before it).  hps-shm judges a
     * heartbeat older than it stalled, as the workers do. */
    _Atomic uint32_t coord_timeout_ms;
    uint64_t ustats_off; /* struct shm_ustats (update statistics), 0 = absent; as missq_off */
    /* Process-table rows of the coordinator that beat last and of the
     * creator, as gen << 32 | (slot + 1); 0 = none (segment.c, own_ident).
     * coord_proc: relaxed stores by the coordinator (as coord_pid).
     * creator_proc: a relaxed store by the creator once, after magic is
     * published (hps_shmdb_create), and again by the same process when it
     * executed itself again (a reload: hps_shmdb_creator_reattach); a
     * process attaching in between reads 0 (creator not attached). */
    _Atomic uint64_t coord_proc;
    _Atomic uint64_t creator_proc;
    /* Offsets at and above it were never handed out by hps__shmdb_alloc, so their
     * pages are still the zeros tmpfs gives (seg_lock); 0 in segments of
     * builds before it: every allocation is then cleared.  Trusted only by
     * the process that created the object (hps_shmdb_t.created).  Read and
     * written under seg_lock (alloc.c: hps__shmdb_alloc). */
    uint64_t zero_from;
    /* struct shm_ddbstats (the distributed DB's counters), 0 = absent.  Taken
     * from the reserved words below (reserved[8] before it), which no build
     * ever wrote: a segment of an older build holds 0 here (its header is
     * the zeros of a new object) and an older reader never looks, so the
     * header's size, the format word and the layout version stay as they
     * were and both builds keep attaching each other's segments. */
    uint64_t ddbstats_off; /* as ustats_off */
    /* The persistent DB contents token its tables were built from
     * (hps_shmdb_set_pdb_token), 0 = unknown; taken from the reserved words
     * like ddbstats_off, so 0 in segments of older builds. */
    _Atomic uint64_t pdb_token;
    /* struct shm_conftext: the INI text the coordinator serves
     * (hps_shmdb_set_conf_text), 0 = none; taken from the reserved words
     * like ddbstats_off.  A new block per set, published by a release store
     * under dir_lock and never freed (a reader may still copy the old one);
     * read lock-free with an acquire load and bounds-checked. */
    uint64_t conftext_off;
    uint64_t reserved[5]; /* 0; later parts of the format take words from here */
    struct shm_ctl ctl;   /* model control requests (control.c) */
    _Alignas(HPS_CACHELINE) pthread_mutex_t seg_lock; /* allocator */
    _Alignas(HPS_CACHELINE) pthread_mutex_t dir_lock; /* table directory (held while creating) */
    _Alignas(HPS_CACHELINE) struct shm_proc procs[HPS_SHMDB_MAX_PROCS];
    struct shm_table tables[HPS_SHMDB_MAX_TABLES];
};

/* The coordinator's INI text (hdr->conftext_off): len bytes, then a NUL.
 * Written before the block is published, then read-only. */
struct shm_conftext {
    uint64_t len;
    char text[];
};

/* Update statistics of one layer (hps_update_stats_t, each word atomic).
 * `valid` is set (release) after the first publication. */
struct shm_ustat {
    _Atomic uint64_t valid;
    _Atomic uint64_t messages, received, applied;
    _Atomic uint64_t skipped[HPS_SHMDB_UPDATE_REASONS];
    _Atomic uint64_t beacons, errors;
    _Atomic int64_t lag, newest_applied_ms, published_ms;
    _Atomic uint64_t nonfinite;     /* added in the pad: 0 from a coordinator that predates it */
    _Atomic uint64_t offset_resets; /* likewise */
    uint8_t pad[40];
};
_Static_assert(sizeof(struct shm_ustat) == 192, "update stats must fill three cache lines");

struct shm_ustats {
    struct shm_ustat layer[HPS_SHMDB_UPDATE_LAYERS];
};

/* Counters of the coordinator's distributed DB (hps_ddb_stats_t of
 * include/hps/ddb.h; hdr->ddbstats_off, created on first publication), each
 * word atomic, stored relaxed.  `valid` is set (release) after the first
 * publication.  New counters go into the pad (0 from a coordinator that
 * predates them), so the size never changes. */
struct shm_ddbstats {
    _Atomic uint64_t valid;
    _Atomic uint64_t lookup_keys, lookup_hits, insert_rows, evicted_rows, errors;
    _Atomic uint64_t touches_dropped, bad_values;
    _Atomic int64_t published_ms;
    uint8_t pad[56];
};
_Static_assert(sizeof(struct shm_ddbstats) == 128, "DDB stats must fill two cache lines");

/* Update log directory (hdr->updlog_off): one ring offset per table. */
struct shm_updlog_dir {
    _Atomic uint64_t ring[HPS_SHMDB_MAX_TABLES]; /* offset of struct shm_updlog, 0 = none */
};

/* One slot: the key and the sequence + 1 it was written with (0 = never,
 * UINT64_MAX while being rewritten). */
struct shm_updslot {
    _Atomic uint64_t seq;
    _Atomic uint64_t key;
};

/* A table's ring: head = sequence of the next key; slot of s = s & (cap-1). */
struct shm_updlog {
    _Atomic uint64_t head; /* one writer (the coordinator), release stores */
    /* cap and key_bytes: written once under dir_lock before the release
     * store of the ring's offset in shm_updlog_dir (updlog.c: ring_create),
     * then read-only; readers validate cap. */
    uint32_t cap;
    uint32_t key_bytes;
    uint8_t pad[48];
    struct shm_updslot slot[];
};
_Static_assert(sizeof(struct shm_updlog) == 64, "update log header must be one cache line");

/* GPU-cache registry (hdr->gpureg_off), changed under dir_lock; read
 * lock-free by tools.  Counters are published by the cache's refresher. */
#define HPS__SHMDB_GCACHE_NCTR (sizeof(hps_gcache_counters_t) / sizeof(uint64_t))
struct shm_gcache {
    _Atomic uint32_t state; /* hps_gcache_state_t */
    uint32_t table_id;
    int32_t device;
    uint32_t dim;
    uint32_t policy;
    uint32_t pad0;
    uint64_t capacity_rows;
    uint64_t bytes;
    _Atomic uint64_t generation;
    _Atomic int32_t creator_pid;
    _Atomic int32_t refresher_pid;
    _Atomic int32_t pids[HPS_SHMDB_GCACHE_PROCS];
    _Atomic uint64_t ctr[HPS__SHMDB_GCACHE_NCTR]; /* hps_gcache_counters_t, in its order */
    /* Sharding (set at claim: num_shards, shard_dev; by the creator before
     * READY: num_parts, shard_bytes); read by importers after READY. */
    uint32_t num_shards;
    uint32_t num_parts;
    int32_t shard_dev[HPS_SHMDB_GCACHE_SHARDS];
    uint64_t shard_bytes[HPS_SHMDB_GCACHE_SHARDS];
    uint8_t pad1[16];
};
_Static_assert(sizeof(struct shm_gcache) % HPS_CACHELINE == 0, "registry entry must fill lines");

struct shm_gpureg {
    struct shm_gcache e[HPS_SHMDB_MAX_GCACHES];
};

#define HPS__SHMDB_SZ6(s) ((uint32_t)((sizeof(s) / HPS_CACHELINE) & 0x3f))
/* Format word: layout version and the sizes of the on-shm structs, so two
 * builds that disagree on any of them refuse each other (LMDB's
 * MDB_LOCK_FORMAT). */
#define HPS_SHM_FORMAT                                                                             \
    ((HPS_SHM_LAYOUT_VERSION << 24) | (HPS__SHMDB_SZ6(struct shm_part) << 18) |                    \
     (HPS__SHMDB_SZ6(struct shm_table) << 12) |                                                    \
     (((uint32_t)sizeof(pthread_mutex_t) & 0x3f) << 6) |                                           \
     (uint32_t)((sizeof(struct shm_hdr) >> 12) & 0x3f))

#endif /* HPS_SHMDB_LAYOUT_H */
