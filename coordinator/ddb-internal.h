/*
 * ddb-internal.h -- what the distributed DB's files share (ddb.c: open,
 * close, tables, records, stats; ddb-cmd.c: command lists and bucketing;
 * ddb-touch.c: access tracking; ddb-read.c: lookups and checks;
 * ddb-evict.c: overflow resolution; ddb-write.c: insert, erase, drop).
 * Private to the hps_ddb library.
 */
#ifndef HPS_COORD_DDB_INTERNAL_H
#define HPS_COORD_DDB_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hps/ddb.h"
#include "hps/rcluster.h"

#define MAX_TABLES       4096
#define TOUCH_QUEUE_KEYS (1u << 20) /* most keys waiting for access tracking */
/* Hit keys of one lookup, waiting for touch_loop(). */
typedef struct touch_item {
    struct touch_item *next;
    hps_ddb_table_t *t;
    size_t n;
    char keys[]; /* (n) packed keys */
} touch_item_t;

struct hps_ddb_table {
    hps_ddb_t *db;
    char model[128], table[128];
    uint32_t dim, key_bytes;
    unsigned np;
    char (*vkey)[HPS_DDB_KEY_MAX]; /* (np) value hash names */
    char (*tkey)[HPS_DDB_KEY_MAX]; /* (np) metadata hash names */
    size_t *klen;                  /* (np) name lengths (same for v and t) */
    uint16_t *slot;                /* (np) hash slot of the partition */
    pthread_mutex_t *evict_mu;     /* (np) one overflow resolution at a time */
    int64_t bad_warned_s;          /* take_hmget: monotonic s + 1 of the last warn, 0: none */
};

struct hps_ddb {
    hps_ddb_opts_t o;
    hps_rcluster_t *rc;
    pthread_mutex_t mu; /* tables[] */
    hps_ddb_table_t *tables[MAX_TABLES];
    size_t num_tables;
    hps_ddb_stats_t st; /* updated with relaxed atomic adds */
    /* access-tracking queue (touch_loop) */
    pthread_mutex_t tq_mu;
    pthread_cond_t tq_cv;
    touch_item_t *tq_head, *tq_tail;
    size_t tq_keys;
    bool tq_init, tq_running, tq_stop;
    pthread_t tq_thread;
};

#define STAT_ADD(db, f, v) __atomic_fetch_add(&(db)->st.f, (v), __ATOMIC_RELAXED)

/* Commands of one exec with their argument pools, sized up front so that
 * argv pointers stay valid. */
typedef struct cmdlist {
    hps_rcluster_cmd_t *c;
    size_t n, cap;
    const char **argv;
    size_t *len;
    size_t na, acap;
} cmdlist_t;

/* ddb.c: msg into err (NULL-safe, truncating). */
void hps__ddb_set_err(char *err, size_t len, const char *msg);

/* ddb-cmd.c: make cl hold `cmds` commands of `args` arguments in all;
 * -ENOMEM. */
hps_err_t hps__ddb_cl_init(cmdlist_t *cl, size_t cmds, size_t args);
/* ddb-cmd.c: free cl's pools and the replies it holds. */
void hps__ddb_cl_fini(cmdlist_t *cl);
/* ddb-cmd.c: start a command on partition p of t: verb + hash name
 * (kind 'v': values, 't': metadata). */
hps_rcluster_cmd_t *hps__ddb_cl_begin(cmdlist_t *cl, const hps_ddb_table_t *t, unsigned p,
                                      const char *verb, char kind);
/* ddb-cmd.c: append an argument (by pointer, not copied) to c. */
void hps__ddb_cl_arg(cmdlist_t *cl, hps_rcluster_cmd_t *c, const void *p, size_t len);
/* ddb-cmd.c: the first error reply of a command list, as HPS_EIO with its
 * text; 0 when none. */
hps_err_t hps__ddb_reply_errors(const cmdlist_t *cl, char *err, size_t err_len);
/* ddb-cmd.c: key i of keys (t's key width), as a uint64. */
uint64_t hps__ddb_key_at(const hps_ddb_table_t *t, const void *keys, size_t i);
/* ddb-cmd.c: counting sort of key indices by partition: order (n), start
 * (np + 1), both malloc'd; -ENOMEM. */
hps_err_t hps__ddb_bucket(const hps_ddb_table_t *t, size_t n, const void *keys, size_t **ret_order,
                          size_t **ret_start);
/* ddb-cmd.c: the max_batch_size batches the partitions of start make. */
size_t hps__ddb_num_batches(const hps_ddb_table_t *t, const size_t *start);

/* ddb-touch.c: append the metadata writes for keys order[a..b) of
 * partition p (none under the random policy). */
void hps__ddb_meta_cmds(cmdlist_t *cl, const hps_ddb_table_t *t, unsigned p, const void *keys,
                        const size_t *order, size_t a, size_t b, const int64_t *now);
/* ddb-touch.c: queue the m hit keys (found) of an LFU/LRU table's lookup
 * for the touch thread. */
void hps__ddb_touch(hps_ddb_table_t *t, size_t n, const void *keys, const bool *found, size_t m);
/* ddb-touch.c: start the touch thread (LFU/LRU only). */
hps_err_t hps__ddb_touch_start(hps_ddb_t *db);
/* ddb-touch.c: drain the queue (pending touches are written), stop the
 * thread. */
void hps__ddb_touch_stop(hps_ddb_t *db);

/* ddb-evict.c: shrink partition p to the resolution margin if it is over
 * its margin. */
hps_err_t hps__ddb_resolve_overflow(hps_ddb_table_t *t, unsigned p, char *err, size_t err_len);

#endif
