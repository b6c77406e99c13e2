/*
 * client_check.h -- what the files of client-check share: the models as
 * the generator wrote them (cc_models), a batch of keys of one table, TAP
 * output, and the lookups with checks.  Private to client-check
 * (client_check.c, client_check_lookup.c, client_check_errors.c).
 */
#ifndef HPS_TESTS_CLIENT_CHECK_H
#define HPS_TESTS_CLIENT_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hps/client.h"
#include "hps/gen.h"

#define MAX_MODELS 16
#define MAX_TABLES 64
#define MAX_KEYS   256

/* ---- TAP (client_check.c) --------------------------------------------------- */

/* One check: "ok N - desc" or "not ok N - desc"; returns cond. */
bool cc_ok(bool cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A "# text" line. */
void cc_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- The models as the generator wrote them (client_check.c) ---------------- */

typedef struct table {
    char name[128];
    uint32_t dim, key_bytes;
    float def;
    uint64_t rows;     /* N: keys hps_gen_key_w(t, 0..N-1) */
    uint64_t n_vdb;    /* file rows 0 .. n_vdb-1 are in the volatile DB */
    uint64_t vdb_rows; /* table_info's rows */
    hps_gen_shuffle_t sh;
} table_t;

typedef struct model {
    char name[128];
    uint32_t num_tables, key_bytes;
    table_t t[MAX_TABLES];
} model_t;

/* Filled by describe() in client_check.c. */
extern model_t cc_models[MAX_MODELS];
extern size_t cc_num_models;

/* Whether key is one of table t's keys: known keys are only produced by
 * cc_file_key(), so callers track that; this is for keys of unknown origin. */
typedef enum { K_VDB, K_PDB, K_UNK } kind_t;

int64_t cc_file_key(const model_t *m, uint32_t t, uint64_t j);
int64_t cc_vdb_key(const model_t *m, uint32_t t, uint64_t *rng);
bool cc_has_pdb(const model_t *m, uint32_t t);
int64_t cc_pdb_key(const model_t *m, uint32_t t, uint64_t *rng);
int64_t cc_unknown_key(const model_t *m, uint32_t t, uint64_t *rng);
void cc_expect_row(const model_t *m, uint32_t t, int64_t key, kind_t k, float *out);
const char *cc_mismatch(const float *got, const float *want, size_t n, uint32_t dim,
                        const int64_t *keys);
/* rc and hps_client_last_error() as text (a per-thread buffer). */
const char *cc_err_text(hps_err_t rc);

/* ---- Lookups with checks (client_check_lookup.c) ----------------------------- */

/* Keys of one table, each with its kind. */
typedef struct batch {
    uint32_t table;
    size_t n;
    int64_t keys[MAX_KEYS];
    kind_t kind[MAX_KEYS];
    size_t n_kind[3];
} batch_t;

void cc_make_batch(const model_t *m, uint32_t t, size_t n_vdb, size_t n_pdb, size_t n_unk,
                   uint64_t *rng, batch_t *b);
/* Error text of a checked lookup, NULL when exact. */
const char *cc_check_table_lookup(hps_client_t *c, size_t mi, const batch_t *b, hps_key_type_t kt);
const char *cc_check_multi_lookup(hps_client_t *c, size_t mi, const batch_t *bs, uint32_t T,
                                  hps_key_type_t kt);
/* Model mi's counters (a failed check when they cannot be read). */
hps_client_counters_t cc_counters(hps_client_t *c, size_t mi);

/* ---- exact: per table, multi-table, errors ---------------------------------- */

/* Table t of model mi (client_check_lookup.c). */
void cc_check_table(hps_client_t *c, size_t mi, uint32_t t, uint64_t *rng);
/* hps_client_lookup over the tables of model mi (client_check_lookup.c). */
void cc_check_multi(hps_client_t *c, size_t mi, uint64_t *rng);
/* The failing calls and hps_client_open's errors (client_check_errors.c). */
void cc_check_errors(hps_client_t *c, const char *config);

#endif /* HPS_TESTS_CLIENT_CHECK_H */
