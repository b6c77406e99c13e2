/*
 * load-internal.h -- what the model loader's files share (load.c: the
 * loading; load-par.c: its threads; load-ident.c: the identity of a table's
 * files).  Private to hps-coordinator.
 */
#ifndef HPS_COORD_LOAD_INTERNAL_H
#define HPS_COORD_LOAD_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coord.h"

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

#endif
