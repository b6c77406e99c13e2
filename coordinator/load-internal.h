/*
 * load-internal.h -- what the model loader's files share (load.c: the
 * loading; load-check.c: the content check; load-pass.c: the pass over the
 * files; load-stage.c: the persistent DB's staged tables; load-par.c: its
 * threads; load-ident.c: the identity of a table's files).  Private to
 * hps-coordinator.
 */
#ifndef HPS_COORD_LOAD_INTERNAL_H
#define HPS_COORD_LOAD_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "coord.h"
#include "hps/modelfile.h"

/* Loading runs on LOAD_THREADS threads, the caller and LOAD_THREADS - 1
 * more, whatever the machine (load-par.c). */
#define LOAD_THREADS 2
/* A table's file identity, with the NUL (< HPS_PDB_META_MAX). */
#define IDENT_MAX 3072
/* Its contents' identity (no path, no mtime), with the NUL. */
#define CONTENT_IDENT_MAX 192

/* The identities of one table's model files (coord_table_ident): `files`
 * for the persistent DB's record (this host's files: paths and mtimes), and
 * `content` for the distributed DB's (shared by hosts whose copies of the
 * files sit at other paths: sizes and hashes only). */
typedef struct coord_ident {
    char files[IDENT_MAX];
    char content[CONTENT_IDENT_MAX];
    /* A fallback's (c->adopt) table whose files it does not read: they
     * were refused, or are not those the serving segment was built from
     * (load-check.c: adopt_unread).  Its layers stay as they are. */
    bool unread;
    /* key's and emb_vector's inode, size and modification time when the
     * content check began (coord_files_stamp): a file replaced (another
     * inode) or written (mtime) after that is not loaded
     * (coord_files_unchanged), since its rows are not those that were
     * checked.  Not the change time: a chmod or a hard link made by a backup
     * tool moves it and changes no row.  0 (st_ino): none taken. */
    struct coord_file_stamp {
        dev_t dev;
        ino_t ino;
        off_t size;
        struct timespec mtim;
    } stamp[2];
} coord_ident_t;

/* A thread's chunk buffer, keys then vectors, grown on demand and reused
 * across its tables (fresh memory costs a page fault per page at first
 * touch).  In transparent huge pages where the kernel allows: the SST
 * writer gathers rows in key order from the whole chunk.  Owned by one
 * loader thread. */
typedef struct load_buf {
    void *mem;
    size_t cap;
    int64_t *keys; /* uint32 keys when key_bytes is 4 */
    float *vecs;
} load_buf_t;

/* Make b hold rows keys (8 bytes each, 64-byte aligned part) and rows * dim
 * floats: b->keys and b->vecs point into it.  false when out of memory
 * (b then holds nothing). */
bool coord_load_buf_fit(load_buf_t *b, size_t rows, uint32_t dim);

/* One step of a parallel loop: item i with the running thread's buffer. */
typedef void (*par_fn)(void *ctx, size_t i, load_buf_t *b);

/* Run fn(ctx, i, buffer) for every i in [0, n) on min(n, LOAD_THREADS)
 * threads, the caller one of them (fewer when a thread cannot start); each
 * i runs once, on one thread.  Returns after all of them, with how many
 * threads ran the loop.  What fn writes is visible to the caller then. */
size_t coord_load_par_run(par_fn fn, void *ctx, size_t n);

/* The identity of table t of model m's files into buf (len bytes, at most
 * IDENT_MAX needed): "v1 dim=D key_bytes=K; <key file>; <emb_vector file>",
 * each file "<path> size=S mtime=SEC.NSEC head=H tail=T" (load-ident.c);
 * and, when content is not NULL, their contents' identity into it
 * (CONTENT_IDENT_MAX bytes): "v1 dim=D key_bytes=K; key size=S head=H
 * tail=T; emb_vector size=S head=H tail=T".  false with errno set (a file
 * missing, not regular, unreadable: EIO; too long: ENAMETOOLONG).  Opens
 * the files O_NONBLOCK. */
bool coord_table_ident(const coord_t *c, const hps_conf_model_t *m, size_t t, char *buf, size_t len,
                       char *content);

/* load-ident.c: take table t's files' stamps into id->stamp (before their
 * content check), and say whether they are still the same files, unwritten
 * (after the load read them: false when a file was replaced, written,
 * truncated or removed since).  Thread-safe. */
void coord_files_stamp(const hps_conf_model_t *m, size_t t, coord_ident_t *id);
bool coord_files_unchanged(const hps_conf_model_t *m, size_t t, const coord_ident_t *id);

/* load.c: seconds on CLOCK_MONOTONIC. */
double coord_load_now_s(void);

/* load.c: the progress line "what: done / total rows" on stderr, when it
 * is a terminal. */
void coord_load_progress(const char *what, uint64_t done, uint64_t total);

/* The keys a table's files give on more than one row, each with the row
 * that wins (its last), sorted by key. */
typedef struct table_dups {
    hps_modelfile_dup_t *d;
    size_t n;
} table_dups_t;

/* load-check.c: the duplicate keys of the tables of every model from the
 * model whose first table is the first-th of all (c->idents' order), as
 * coord_validate_models found them; NULL when none are known.  Main thread
 * only. */
const table_dups_t *coord_load_dups(size_t first);
/* load-check.c: forget them.  Main thread only. */
void coord_load_dups_free(void);

/* load-check.c: a fill of the first `want` rows only: give each of the n
 * rows whose key the files repeat after row `want` the vector of the key's
 * last row, so that the last row wins here too. */
hps_err_t coord_load_last_rows(hps_modelfile_t *mf, const table_dups_t *dups, uint64_t want,
                               uint32_t key_bytes, size_t n, const void *keys, float *vecs,
                               char *err, size_t err_len);

/* Per table of a model: the identity of its files, whether the persistent
 * DB holds exactly them (plus the updates applied since), and what loading
 * must do to its column family. */
typedef struct model_state {
    coord_ident_t *ident;
    bool *current; /* the PDB holds these files (else staged by the pass) */
    bool *held;    /* ... and did before this start: values come from the PDB */
    bool *has_rec; /* the PDB has a record of this table (maybe another's files) */
    bool *had_cf;  /* the column family existed before this start */
} model_state_t;

/* load.c: table t of m, its handles in every layer (create_table made it;
 * found by name in c->db).  Main thread. */
coord_table_t *coord_load_table(coord_t *c, const hps_conf_model_t *m, size_t t);

/* load-carry.c: after m's volatile DB tables were filled in this build,
 * record each one's files identity (st->ident) in the segment, and, in a
 * reload (c->serving, not a restart's), write over each table filled from
 * the files (not st->held) every row of the serving segment's table of
 * that name when its files did not change (same identity,
 * dimension, key width and storage type): the online updates the serving
 * segment holds stay.  0, or HPS_EXIT_SEGMENT (logged).  Main thread. */
int coord_load_carry(coord_t *c, const hps_conf_model_t *m, const model_state_t *st);

/* Outcome of a model's load, for its log lines. */
typedef struct load_times {
    double create_s, pass_s, read_s, pdb_s, vdb_s; /* wall times; step times summed over threads */
    size_t ingested, vdb_tables, threads;
    uint64_t vdb_rows, vdb_bytes, bytes; /* bytes: read by the pass */
} load_times_t;

/* A table staged for the persistent DB (load-stage.c: STAGING). */
typedef struct staged {
    const hps_conf_model_t *m;
    size_t t;
    coord_table_t *ct;
    hps_pdb_stage_t *stage;
    bool has_rec, had_cf; /* model_state_t's, at staging */
    char *files;          /* the identity to record (coord_ident_t.files) */
} staged_t;

/* load-stage.c: table t of m staged: its entry (the stage stays the
 * caller's until the entry is added).  Main thread only. */
int coord_load_staged_add(const staged_t *e);
/* load-stage.c: close the stages not committed and forget every entry.
 * Main thread only. */
void coord_load_staged_free(void);
/* load-stage.c: every model loaded: the staged tables' rows replace the old
 * ones.  Main thread only. */
int coord_load_pdb_commit(coord_t *c);

/* load-pass.c: the pass over m's tables: read the files once into both DBs
 * (the persistent DB's rows staged: coord_load_pdb_commit ingests them after
 * every model). */
int coord_load_files(coord_t *c, const hps_conf_model_t *m, model_state_t *st, const uint64_t *rows,
                     bool ingest, bool vdb, const table_dups_t *dups, load_times_t *lt);

#endif
