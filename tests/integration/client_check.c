/*
 * client-check -- the C API of libhps (include/hps/client.h) against a real
 * hps-coordinator, as an installed program would use it: linked with
 * libhps.so only (the exported hps_client_* symbols), the expected vectors
 * from the generator (include/hps/gen.h).  Driven by test_client_c.py.
 *
 *   client-check CONFIG exact [--rows MODEL=N0,N1,...]... [--rate R] [--seed S]
 *   client-check CONFIG early [same options]
 *   client-check CONFIG loop  [same options]
 *
 * --rows gives the rows of each table of a model as hps-gen wrote them (its
 * keys are hps_gen_key_w(t, 0..N-1)), --rate the INI's initial_cache_rate
 * and --seed hps-gen's --seed: file row j holds key index
 * hps_gen_shuffle_at(j), and the first ceil(N * rate) file rows are in the
 * volatile DB, the others only in the persistent DB.  A model without
 * --rows is taken to be wholly in the volatile DB (N = its rows there).
 *
 * exact: prints TAP (plan last); exit 0 when every check passed.
 *   - hps_client_open errors, wait_ready, ready, coordinator_alive, device;
 *   - every model and table: model_info, model_find, table_find, table_info;
 *     hps_client_lookup_table with int64 keys (volatile-DB, persistent-DB
 *     only and unknown keys) and int32 keys, compared bit for bit with
 *     hps_gen_vector (unknown keys: the table's default), the counters;
 *   - hps_client_lookup (KEYS / NUMKEYS) over all tables with a 0 entry,
 *     over a prefix of the tables, int32 keys; out fully written, nothing
 *     written past it; hps_client_lookup_typed to bf16 against the test's
 *     own rounding of the exact vectors;
 *   - errors: bad indices, num_tables, negative numkeys, device locations
 *     on a host-only client, bad key type, NULL buffers -> HPS_EINVAL with a
 *     message; unknown names -> HPS_ENOTFOUND; GPU calls on a host-only
 *     client; hps_client_last_error() is per thread;
 *   - 8 threads looking up for 1 s, all exact; counters add up (a call
 *     of 0 keys is not counted in lookup_calls).
 * early: opened before the coordinator runs: not ready; prints "# waiting",
 *   then waits for readiness and checks one lookup.
 * loop: looks up (checked) until killed; "LOOKUPS <n>" every 1000 calls,
 *   "MISMATCH ..." and exit 1 on a wrong answer.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hps/client.h"
#include "hps/gen.h"

#define MAX_MODELS 16
#define MAX_TABLES 64
#define MAX_KEYS   256

/* ---- TAP ------------------------------------------------------------------ */

static int tap_n, tap_failed;

static bool ok(bool cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool ok(bool cond, const char *fmt, ...)
{
    char desc[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(desc, sizeof(desc), fmt, ap);
    va_end(ap);
    for (char *p = desc; *p; p++)
        if (*p == '#' || *p == '\n')
            *p = *p == '#' ? 'N' : ' ';
    tap_n++;
    if (!cond)
        tap_failed++;
    printf("%s %d - %s\n", cond ? "ok" : "not ok", tap_n, desc);
    fflush(stdout);
    return cond;
}

static void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void diag(const char *fmt, ...)
{
    char text[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    printf("# %s\n", text);
    fflush(stdout);
}

static int tap_done(void)
{
    printf("1..%d\n", tap_n);
    printf("# %d checks, %d failed\n", tap_n, tap_failed);
    fflush(stdout);
    return tap_failed || tap_n == 0 ? 1 : 0;
}

/* ---- The models as the generator wrote them -------------------------------- */

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

static model_t models[MAX_MODELS];
static size_t num_models;

typedef struct rows_opt {
    char model[128];
    uint64_t rows[MAX_TABLES];
    uint32_t n;
} rows_opt_t;

static rows_opt_t rows_opts[MAX_MODELS];
static size_t num_rows_opts;
static double opt_rate = 1.0;
static uint64_t opt_seed = 0;

/* Key of file row j of table t of model m. */
static int64_t file_key(const model_t *m, uint32_t t, uint64_t j)
{
    const table_t *tb = &m->t[t];
    return hps_gen_key_w(t, hps_gen_shuffle_at(&tb->sh, j), tb->key_bytes);
}

static int64_t vdb_key(const model_t *m, uint32_t t, uint64_t *rng)
{
    return file_key(m, t, hps_gen_splitmix64(rng) % m->t[t].n_vdb);
}

static bool has_pdb(const model_t *m, uint32_t t)
{
    return m->t[t].rows > m->t[t].n_vdb;
}

static int64_t pdb_key(const model_t *m, uint32_t t, uint64_t *rng)
{
    const table_t *tb = &m->t[t];
    return file_key(m, t, tb->n_vdb + hps_gen_splitmix64(rng) % (tb->rows - tb->n_vdb));
}

/* A key in no layer: a generated key past the table's rows, a negative key,
 * or for 32-bit models a key >= 2^32 (a table key + 2^32: must not alias). */
static int64_t unknown_key(const model_t *m, uint32_t t, uint64_t *rng)
{
    const table_t *tb = &m->t[t];
    uint64_t r = hps_gen_splitmix64(rng);
    switch (r % 3) {
    case 0:
        return hps_gen_key_w(t, tb->rows + (r >> 8) % 100000, tb->key_bytes);
    case 1:
        return -1 - (int64_t)((r >> 8) % 1000000);
    default:
        if (tb->key_bytes == 4)
            return ((int64_t)1 << 32) + file_key(m, t, (r >> 8) % tb->rows);
        return hps_gen_key_w(t, tb->rows + 100000 + (r >> 8) % 100000, tb->key_bytes);
    }
}

/* Whether key is one of table t's keys: known keys are only produced by
 * file_key(), so callers track that; this is for keys of unknown origin. */
typedef enum { K_VDB, K_PDB, K_UNK } kind_t;

static void expect_row(const model_t *m, uint32_t t, int64_t key, kind_t k, float *out)
{
    const table_t *tb = &m->t[t];
    if (k == K_UNK) {
        for (uint32_t d = 0; d < tb->dim; d++)
            out[d] = tb->def;
    } else {
        hps_gen_vector(t, key, tb->dim, out);
    }
}

/* First differing float of got/want (n floats) as text; "" when equal. */
static const char *mismatch(const float *got, const float *want, size_t n, uint32_t dim,
                            const int64_t *keys)
{
    static __thread char buf[256];
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            snprintf(buf, sizeof(buf), "element %zu (row %zu key %lld, d %zu): got %.9g, want %.9g",
                     i, i / dim, keys ? (long long)keys[i / dim] : -1LL, i % dim, (double)got[i],
                     (double)want[i]);
            return buf;
        }
    }
    return "";
}

static const char *err_text(hps_err_t rc)
{
    static __thread char buf[512];
    snprintf(buf, sizeof(buf), "%d (%s)", rc, rc ? hps_client_last_error() : "ok");
    return buf;
}

/* ---- Setup ------------------------------------------------------------------ */

static void usage(void)
{
    fprintf(stderr, "usage: client-check CONFIG exact|early|loop [--rows MODEL=N0,N1,...]... "
                    "[--rate R] [--seed S]\n");
    exit(2);
}

static void parse_opts(int argc, char **argv)
{
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--rows") && i + 1 < argc) {
            rows_opt_t *o = &rows_opts[num_rows_opts++];
            char *eq = strchr(argv[++i], '=');
            if (!eq || num_rows_opts > MAX_MODELS)
                usage();
            snprintf(o->model, sizeof(o->model), "%.*s", (int)(eq - argv[i]), argv[i]);
            for (char *p = eq + 1; *p && o->n < MAX_TABLES;) {
                o->rows[o->n++] = strtoull(p, &p, 10);
                if (*p == ',')
                    p++;
                else if (*p)
                    usage();
            }
        } else if (!strcmp(argv[i], "--rate") && i + 1 < argc) {
            opt_rate = strtod(argv[++i], NULL);
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            opt_seed = strtoull(argv[++i], NULL, 10);
        } else {
            usage();
        }
    }
}

/* Fill models[] from the client; with checks when tap is true. */
static bool describe(hps_client_t *c, bool tap)
{
    num_models = hps_client_num_models(c);
    if (tap)
        ok(num_models >= 1 && num_models <= MAX_MODELS, "hps_client_num_models: %zu", num_models);
    if (num_models < 1 || num_models > MAX_MODELS)
        return false;
    bool good = true;
    for (size_t mi = 0; mi < num_models; mi++) {
        model_t *m = &models[mi];
        hps_client_model_info_t info;
        hps_err_t rc = hps_client_model_info(c, mi, &info);
        if (rc || info.num_tables < 1 || info.num_tables > MAX_TABLES) {
            ok(false, "hps_client_model_info(%zu): %s", mi, err_text(rc));
            return false;
        }
        snprintf(m->name, sizeof(m->name), "%s", info.name);
        m->num_tables = info.num_tables;
        m->key_bytes = info.key_bytes;
        const rows_opt_t *ro = NULL;
        for (size_t k = 0; k < num_rows_opts; k++)
            if (!strcmp(rows_opts[k].model, m->name))
                ro = &rows_opts[k];
        if (tap) {
            size_t found = SIZE_MAX;
            hps_err_t frc = hps_client_model_find(c, m->name, &found);
            ok(frc == 0 && found == mi, "model %zu '%s': hps_client_model_find gives %zu (%s)", mi,
               m->name, found, err_text(frc));
            ok((info.key_bytes == 8 || info.key_bytes == 4) && !info.gpu_cache &&
                   info.max_batch_size > 0,
               "model '%s': %u tables, key_bytes %u, max_batch_size %u, no GPU cache on a "
               "host-only client",
               m->name, info.num_tables, info.key_bytes, info.max_batch_size);
            if (ro)
                ok(ro->n == info.num_tables, "model '%s': --rows gives %u tables, the client %u",
                   m->name, ro->n, info.num_tables);
        }
        for (uint32_t t = 0; t < m->num_tables; t++) {
            table_t *tb = &m->t[t];
            hps_client_table_info_t ti;
            rc = hps_client_table_info(c, mi, t, &ti);
            if (rc || ti.dim == 0) {
                ok(false, "hps_client_table_info(%zu, %u): %s", mi, t, err_text(rc));
                return false;
            }
            snprintf(tb->name, sizeof(tb->name), "%s", ti.name);
            tb->dim = ti.dim;
            tb->key_bytes = ti.key_bytes;
            tb->def = ti.default_value;
            tb->vdb_rows = ti.rows;
            if (ro && t < ro->n) {
                tb->rows = ro->rows[t];
                tb->n_vdb = (uint64_t)ceil((double)tb->rows * opt_rate);
            } else {
                tb->rows = tb->n_vdb = ti.rows;
            }
            if (tb->rows == 0 || tb->n_vdb == 0) {
                ok(false, "model '%s' table %u: no rows", m->name, t);
                return false;
            }
            hps_gen_shuffle_init(&tb->sh, opt_seed, t, tb->rows);
            if (tap) {
                uint32_t ft = UINT32_MAX;
                hps_err_t frc = hps_client_table_find(c, mi, ti.name, &ft);
                ok(frc == 0 && ft == t, "model '%s' table '%s': hps_client_table_find gives %u",
                   m->name, ti.name, ft);
                good &= ok(ti.key_bytes == info.key_bytes && ti.max_keys_per_sample >= 1,
                           "model '%s' table %u '%s': dim %u, key_bytes %u, default %g, "
                           "max_keys_per_sample %u",
                           m->name, t, ti.name, ti.dim, ti.key_bytes, (double)ti.default_value,
                           ti.max_keys_per_sample);
                good &= ok(ti.rows > 0 && ti.rows == tb->n_vdb,
                           "model '%s' table %u: %llu rows in the volatile DB (want %llu of %llu)",
                           m->name, t, (unsigned long long)ti.rows, (unsigned long long)tb->n_vdb,
                           (unsigned long long)tb->rows);
            }
        }
    }
    return good;
}

/* ---- Lookups with checks ---------------------------------------------------- */

typedef struct batch {
    uint32_t table;
    size_t n;
    int64_t keys[MAX_KEYS];
    kind_t kind[MAX_KEYS];
    size_t n_kind[3];
} batch_t;

/* n keys of table t: n_vdb VDB keys, n_pdb PDB-only keys (fewer if the
 * table has none), the rest unknown; shuffled. */
static void make_batch(const model_t *m, uint32_t t, size_t n_vdb, size_t n_pdb, size_t n_unk,
                       uint64_t *rng, batch_t *b)
{
    memset(b, 0, sizeof(*b));
    b->table = t;
    if (!has_pdb(m, t))
        n_pdb = 0;
    for (size_t i = 0; i < n_vdb && b->n < MAX_KEYS; i++, b->n++)
        b->keys[b->n] = vdb_key(m, t, rng), b->kind[b->n] = K_VDB;
    for (size_t i = 0; i < n_pdb && b->n < MAX_KEYS; i++, b->n++)
        b->keys[b->n] = pdb_key(m, t, rng), b->kind[b->n] = K_PDB;
    for (size_t i = 0; i < n_unk && b->n < MAX_KEYS; i++, b->n++)
        b->keys[b->n] = unknown_key(m, t, rng), b->kind[b->n] = K_UNK;
    for (size_t i = b->n; i > 1; i--) {
        size_t j = hps_gen_splitmix64(rng) % i;
        int64_t k = b->keys[i - 1];
        kind_t d = b->kind[i - 1];
        b->keys[i - 1] = b->keys[j], b->kind[i - 1] = b->kind[j];
        b->keys[j] = k, b->kind[j] = d;
    }
    for (size_t i = 0; i < b->n; i++)
        b->n_kind[b->kind[i]]++;
}

/* Keep only the keys of b that are uint32 keys >= 2^31 (want_high) or
 * not: int32 keys carry the former as negative bit patterns. */
static void filter_high(batch_t *b, bool want_high)
{
    size_t j = 0;
    memset(b->n_kind, 0, sizeof(b->n_kind));
    for (size_t i = 0; i < b->n; i++) {
        bool high = b->keys[i] >= ((int64_t)1 << 31) && b->keys[i] < ((int64_t)1 << 32);
        if (high == want_high) {
            b->keys[j] = b->keys[i], b->kind[j] = b->kind[i];
            b->n_kind[b->kind[j]]++;
            j++;
        }
    }
    b->n = j;
}

static void expect_batch(const model_t *m, const batch_t *b, float *want)
{
    uint32_t dim = m->t[b->table].dim;
    for (size_t i = 0; i < b->n; i++)
        expect_row(m, b->table, b->keys[i], b->kind[i], want + i * dim);
}

#define CANARY 16
static const uint32_t canary_bits = 0x7fc0dead; /* a NaN no lookup writes */

static void fill_canary(float *buf, size_t n)
{
    for (size_t i = 0; i < n; i++)
        memcpy(&buf[i], &canary_bits, 4);
}

static bool canary_intact(const float *buf, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&buf[i], &canary_bits, 4) != 0)
            return false;
    return true;
}

/* lookup_table of b (int64 keys) into a canaried buffer; returns the error
 * text (NULL when exact). */
static const char *check_table_lookup(hps_client_t *c, size_t mi, const batch_t *b,
                                      hps_key_type_t kt)
{
    static __thread char msg[1024];
    const model_t *m = &models[mi];
    uint32_t dim = m->t[b->table].dim;
    size_t nf = b->n * dim;
    float *out = malloc((nf + CANARY) * sizeof(float));
    float *want = malloc((nf + 1) * sizeof(float));
    int32_t k32[MAX_KEYS];
    const void *keys = b->keys;
    if (kt == HPS_KEY_INT32) {
        for (size_t i = 0; i < b->n; i++)
            k32[i] = (int32_t)(uint32_t)b->keys[i];
        keys = k32;
    }
    fill_canary(out, nf + CANARY);
    expect_batch(m, b, want);
    hps_err_t rc =
        hps_client_lookup_table(c, mi, b->table, b->n, keys, kt, HPS_HOST, out, HPS_HOST, NULL);
    const char *r = NULL;
    if (rc) {
        snprintf(msg, sizeof(msg), "hps_client_lookup_table: %s", err_text(rc));
        r = msg;
    } else if (!canary_intact(out + nf, CANARY)) {
        snprintf(msg, sizeof(msg), "wrote past the %zu output floats", nf);
        r = msg;
    } else if (memcmp(out, want, nf * sizeof(float)) != 0) {
        snprintf(msg, sizeof(msg), "%s", mismatch(out, want, nf, dim, b->keys));
        r = msg;
    }
    free(out);
    free(want);
    return r;
}

/* hps_client_lookup over batches bs[0..T-1] (bs[t].table == t). */
static const char *check_multi_lookup(hps_client_t *c, size_t mi, const batch_t *bs, uint32_t T,
                                      hps_key_type_t kt)
{
    static __thread char msg[1024];
    const model_t *m = &models[mi];
    int32_t numkeys[MAX_TABLES];
    size_t nk = 0, nf = 0;
    for (uint32_t t = 0; t < T; t++) {
        numkeys[t] = (int32_t)bs[t].n;
        nk += bs[t].n;
        nf += bs[t].n * m->t[t].dim;
    }
    int64_t *k64 = malloc((nk + 1) * sizeof(int64_t));
    int32_t *k32 = malloc((nk + 1) * sizeof(int32_t));
    float *out = malloc((nf + CANARY) * sizeof(float));
    float *want = malloc((nf + 1) * sizeof(float));
    size_t ki = 0, fi = 0;
    for (uint32_t t = 0; t < T; t++) {
        for (size_t i = 0; i < bs[t].n; i++, ki++) {
            k64[ki] = bs[t].keys[i];
            k32[ki] = (int32_t)(uint32_t)bs[t].keys[i];
        }
        expect_batch(m, &bs[t], want + fi);
        fi += bs[t].n * m->t[t].dim;
    }
    fill_canary(out, nf + CANARY);
    hps_err_t rc = hps_client_lookup(c, mi, T, numkeys, kt == HPS_KEY_INT32 ? (void *)k32 : k64, kt,
                                     HPS_HOST, out, HPS_HOST, NULL);
    const char *r = NULL;
    if (rc) {
        snprintf(msg, sizeof(msg), "hps_client_lookup: %s", err_text(rc));
        r = msg;
    } else if (!canary_intact(out + nf, CANARY)) {
        snprintf(msg, sizeof(msg), "wrote past the %zu output floats", nf);
        r = msg;
    } else {
        fi = 0;
        for (uint32_t t = 0; t < T && !r; t++) {
            size_t n = bs[t].n * m->t[t].dim;
            if (memcmp(out + fi, want + fi, n * sizeof(float)) != 0) {
                snprintf(msg, sizeof(msg), "table %u: %s", t,
                         mismatch(out + fi, want + fi, n, m->t[t].dim, bs[t].keys));
                r = msg;
            }
            fi += n;
        }
    }
    free(k64);
    free(k32);
    free(out);
    free(want);
    return r;
}

/* bf16 bits of x rounded to nearest even (x not NaN): the test's own
 * reference for hps_client_lookup_typed. */
static uint16_t bf16_rne(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* hps_client_lookup_typed of bs[0..T-1] to bf16 on the host: every value
 * the reference rounding of the exact fp32 vector, nothing written past
 * the output; int8 refused.  Returns the error text (NULL when exact). */
static const char *check_typed_lookup(hps_client_t *c, size_t mi, const batch_t *bs, uint32_t T)
{
    static __thread char msg[1024];
    const model_t *m = &models[mi];
    int32_t numkeys[MAX_TABLES];
    size_t nk = 0, nf = 0;
    for (uint32_t t = 0; t < T; t++)
        numkeys[t] = (int32_t)bs[t].n, nk += bs[t].n, nf += bs[t].n * m->t[t].dim;
    int64_t *keys = malloc((nk + 1) * sizeof(int64_t));
    float *want = malloc((nf + 1) * sizeof(float));
    uint16_t *out = malloc((nf + CANARY) * sizeof(uint16_t));
    for (size_t t = 0, ki = 0, fi = 0; t < T; fi += bs[t].n * m->t[t].dim, t++) {
        memcpy(keys + ki, bs[t].keys, bs[t].n * sizeof(int64_t));
        ki += bs[t].n;
        expect_batch(m, &bs[t], want + fi);
    }
    memset(out, 0xa5, (nf + CANARY) * sizeof(uint16_t));
    hps_err_t rc = hps_client_lookup_typed(c, mi, T, numkeys, keys, HPS_KEY_INT64, HPS_HOST, out,
                                           HPS_DTYPE_BF16, HPS_HOST, NULL, 0);
    const char *r = NULL;
    size_t i = 0;
    while (rc == 0 && i < nf && out[i] == bf16_rne(want[i]))
        i++;
    if (rc)
        snprintf(msg, sizeof(msg), "hps_client_lookup_typed: %s", err_text(rc)), r = msg;
    else if (i < nf)
        snprintf(msg, sizeof(msg), "value %zu: 0x%04x, want 0x%04x (fp32 %a)", i, out[i],
                 bf16_rne(want[i]), (double)want[i]),
            r = msg;
    else if (out[nf] != 0xa5a5 || out[nf + CANARY - 1] != 0xa5a5)
        snprintf(msg, sizeof(msg), "wrote past the %zu output values", nf), r = msg;
    else if ((rc = hps_client_lookup_typed(c, mi, T, numkeys, keys, HPS_KEY_INT64, HPS_HOST, out,
                                           HPS_DTYPE_INT8, HPS_HOST, NULL, 0)) != HPS_EINVAL)
        snprintf(msg, sizeof(msg), "output type int8: %s, want HPS_EINVAL", err_text(rc)), r = msg;
    free(keys);
    free(want);
    free(out);
    return r;
}

static hps_client_counters_t counters(hps_client_t *c, size_t mi)
{
    hps_client_counters_t k;
    memset(&k, 0, sizeof(k));
    hps_err_t rc = hps_client_counters(c, mi, &k);
    if (rc)
        ok(false, "hps_client_counters(%zu): %s", mi, err_text(rc));
    return k;
}

#define D(field) ((unsigned long long)(b1.field - b0.field))

/* ---- exact: per table --------------------------------------------------------- */

static void check_table(hps_client_t *c, size_t mi, uint32_t t, uint64_t *rng)
{
    const model_t *m = &models[mi];
    const table_t *tb = &m->t[t];
    batch_t b;
    const char *e;
    hps_client_counters_t b0, b1;

    /* Volatile-DB keys. */
    make_batch(m, t, 100, 0, 0, rng, &b);
    b0 = counters(c, mi);
    e = check_table_lookup(c, mi, &b, HPS_KEY_INT64);
    b1 = counters(c, mi);
    ok(!e, "%s/%s: 100 volatile-DB keys (int64) exact", m->name, tb->name);
    if (e)
        diag("%s", e);
    ok(D(lookup_keys) == 100 && D(vdb_hits) == 100 && D(lower_hits) == 0 && D(default_keys) == 0 &&
           D(lookup_calls) == 1,
       "%s/%s: counters +%llu keys, +%llu vdb_hits, +%llu lower_hits, +%llu defaults, +%llu "
       "calls (want 100, 100, 0, 0, 1)",
       m->name, tb->name, D(lookup_keys), D(vdb_hits), D(lower_hits), D(default_keys),
       D(lookup_calls));

    /* Persistent-DB-only keys. */
    if (has_pdb(m, t)) {
        make_batch(m, t, 0, 40, 0, rng, &b);
        b0 = counters(c, mi);
        e = check_table_lookup(c, mi, &b, HPS_KEY_INT64);
        b1 = counters(c, mi);
        ok(!e, "%s/%s: 40 persistent-DB-only keys exact (through the coordinator)", m->name,
           tb->name);
        if (e)
            diag("%s", e);
        ok(D(lookup_keys) == 40 && D(vdb_hits) + D(lower_hits) == 40 && D(lower_hits) > 0 &&
               D(default_keys) == 0,
           "%s/%s: counters +%llu keys, +%llu vdb_hits, +%llu lower_hits, +%llu defaults", m->name,
           tb->name, D(lookup_keys), D(vdb_hits), D(lower_hits), D(default_keys));
    }

    /* Unknown keys: every element is the default. */
    make_batch(m, t, 0, 0, 12, rng, &b);
    {
        size_t nf = b.n * tb->dim;
        float *out = malloc(nf * sizeof(float));
        b0 = counters(c, mi);
        hps_err_t rc = hps_client_lookup_table(c, mi, t, b.n, b.keys, HPS_KEY_INT64, HPS_HOST, out,
                                               HPS_HOST, NULL);
        b1 = counters(c, mi);
        size_t bad = 0;
        for (size_t i = 0; i < nf; i++)
            bad += memcmp(&out[i], &tb->def, sizeof(float)) != 0;
        ok(rc == 0 && bad == 0,
           "%s/%s: 12 unknown keys: every element is the default %g (%s, "
           "%zu differ)",
           m->name, tb->name, (double)tb->def, err_text(rc), bad);
        ok(D(lookup_keys) == 12 && D(default_keys) == 12 && D(vdb_hits) == 0 && D(lower_hits) == 0,
           "%s/%s: counters +%llu keys, +%llu defaults, +%llu vdb_hits, +%llu lower_hits (want "
           "12, 12, 0, 0)",
           m->name, tb->name, D(lookup_keys), D(default_keys), D(vdb_hits), D(lower_hits));
        free(out);
    }

    /* A mixed batch. */
    make_batch(m, t, 60, 20, 8, rng, &b);
    b0 = counters(c, mi);
    e = check_table_lookup(c, mi, &b, HPS_KEY_INT64);
    b1 = counters(c, mi);
    ok(!e, "%s/%s: %zu mixed keys (%zu vdb, %zu pdb-only, %zu unknown) exact", m->name, tb->name,
       b.n, b.n_kind[K_VDB], b.n_kind[K_PDB], b.n_kind[K_UNK]);
    if (e)
        diag("%s", e);
    ok(D(lookup_keys) == b.n && D(default_keys) == b.n_kind[K_UNK] &&
           D(vdb_hits) + D(lower_hits) == b.n_kind[K_VDB] + b.n_kind[K_PDB] &&
           D(vdb_hits) >= b.n_kind[K_VDB],
       "%s/%s: mixed counters +%llu keys = %llu vdb_hits + %llu lower_hits + %llu defaults",
       m->name, tb->name, D(lookup_keys), D(vdb_hits), D(lower_hits), D(default_keys));

    /* int32 keys. */
    if (tb->key_bytes == 4) {
        /* Known keys below 2^31 as int32, then keys >= 2^31 as int32 bit
         * patterns (zero-extended for a 32-bit model, not sign-extended). */
        batch_t hi;
        make_batch(m, t, 120, 30, 0, rng, &b);
        hi = b;
        filter_high(&b, false);
        filter_high(&hi, true);
        e = check_table_lookup(c, mi, &b, HPS_KEY_INT32);
        ok(!e, "%s/%s: %zu known keys below 2^31 as int32 exact", m->name, tb->name, b.n);
        if (e)
            diag("%s", e);
        e = check_table_lookup(c, mi, &hi, HPS_KEY_INT32);
        ok(!e, "%s/%s: %zu known uint32 keys >= 2^31 as int32 bit patterns exact", m->name,
           tb->name, hi.n);
        if (e)
            diag("%s", e);
        /* int64 keys outside the uint32 range: defaults, no aliasing. */
        batch_t o;
        memset(&o, 0, sizeof(o));
        o.table = t;
        for (size_t i = 0; i < 10; i++) {
            int64_t k = vdb_key(m, t, rng);
            o.keys[o.n] = k + ((int64_t)(i + 1) << 32), o.kind[o.n++] = K_UNK;
            o.keys[o.n] = k - ((int64_t)(i + 1) << 32), o.kind[o.n++] = K_UNK;
        }
        e = check_table_lookup(c, mi, &o, HPS_KEY_INT64);
        ok(!e,
           "%s/%s: int64 keys outside the uint32 range (table key +- k * 2^32) get the "
           "default",
           m->name, tb->name);
        if (e)
            diag("%s", e);
    } else {
        /* 64-bit model: int32 values are sign-extended; generated keys are
         * all far above 2^31, so these are unknown keys. */
        static const int32_t vals[] = {0, 1, 5, -1, -7, INT32_MAX, INT32_MIN, 123456789};
        batch_t o;
        memset(&o, 0, sizeof(o));
        o.table = t;
        for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++)
            o.keys[o.n] = vals[i], o.kind[o.n++] = K_UNK;
        e = check_table_lookup(c, mi, &o, HPS_KEY_INT32);
        ok(!e,
           "%s/%s: int32 keys on a 64-bit model (0, 1, 5, -1, -7, INT32_MAX, INT32_MIN, "
           "...): defaults",
           m->name, tb->name);
        if (e)
            diag("%s", e);
        /* The same values as int64 give the same rows (sign extension). */
        size_t nf = o.n * tb->dim;
        float *a = malloc(nf * sizeof(float)), *bb = malloc(nf * sizeof(float));
        int32_t k32[16];
        for (size_t i = 0; i < o.n; i++)
            k32[i] = (int32_t)o.keys[i];
        hps_err_t r1 =
            hps_client_lookup_table(c, mi, t, o.n, k32, HPS_KEY_INT32, HPS_HOST, a, HPS_HOST, NULL);
        hps_err_t r2 = hps_client_lookup_table(c, mi, t, o.n, o.keys, HPS_KEY_INT64, HPS_HOST, bb,
                                               HPS_HOST, NULL);
        ok(r1 == 0 && r2 == 0 && memcmp(a, bb, nf * sizeof(float)) == 0,
           "%s/%s: int32 keys equal the same values as int64 keys", m->name, tb->name);
        free(a);
        free(bb);
    }

    /* No keys. */
    float dummy[4] = {1, 2, 3, 4};
    int64_t nokey = 0;
    hps_err_t rc = hps_client_lookup_table(c, mi, t, 0, &nokey, HPS_KEY_INT64, HPS_HOST, dummy,
                                           HPS_HOST, NULL);
    ok(rc == 0 && dummy[0] == 1 && dummy[3] == 4,
       "%s/%s: a lookup of 0 keys returns 0 and writes nothing (%s)", m->name, tb->name,
       err_text(rc));
}

/* ---- exact: multi-table --------------------------------------------------------- */

static void check_multi(hps_client_t *c, size_t mi, uint64_t *rng)
{
    const model_t *m = &models[mi];
    uint32_t T = m->num_tables;
    batch_t *bs = calloc(T, sizeof(batch_t));
    const char *e;
    hps_client_counters_t b0, b1;
    size_t nk = 0, unk = 0;

    /* All tables; with 2+ tables table 1 gets no keys. */
    for (uint32_t t = 0; t < T; t++) {
        if (T >= 2 && t == 1)
            make_batch(m, t, 0, 0, 0, rng, &bs[t]);
        else
            make_batch(m, t, 20 + 7 * t, 10, 3 + t, rng, &bs[t]);
        nk += bs[t].n;
        unk += bs[t].n_kind[K_UNK];
    }
    b0 = counters(c, mi);
    e = check_multi_lookup(c, mi, bs, T, HPS_KEY_INT64);
    b1 = counters(c, mi);
    ok(!e,
       "%s: hps_client_lookup over all %u tables (numkeys with a 0 entry: %s), %zu keys, "
       "exact",
       m->name, T, T >= 2 ? "yes" : "single table", nk);
    if (e)
        diag("%s", e);
    ok(D(lookup_keys) == nk && D(default_keys) == unk &&
           D(vdb_hits) + D(lower_hits) + D(default_keys) == nk && D(lookup_calls) == 1,
       "%s: multi-table counters +%llu keys (want %zu) = %llu vdb + %llu lower + %llu defaults "
       "(want %zu), +%llu calls",
       m->name, D(lookup_keys), nk, D(vdb_hits), D(lower_hits), D(default_keys), unk,
       D(lookup_calls));

    e = check_typed_lookup(c, mi, bs, T);
    ok(!e,
       "%s: hps_client_lookup_typed to bf16 over all %u tables: the fp32 vectors rounded "
       "to nearest even, bit for bit; int8 output refused",
       m->name, T);
    if (e)
        diag("%s", e);

    /* A prefix of the tables. */
    if (T >= 2) {
        for (uint32_t t = 0; t < T - 1; t++)
            make_batch(m, t, 9, 4, 2, rng, &bs[t]);
        e = check_multi_lookup(c, mi, bs, T - 1, HPS_KEY_INT64);
        ok(!e, "%s: hps_client_lookup over tables 0..%u of %u exact", m->name, T - 2, T);
        if (e)
            diag("%s", e);
    }

    /* int32 keys. */
    for (uint32_t t = 0; t < T; t++) {
        if (m->key_bytes == 4) {
            make_batch(m, t, 30, 10, 0, rng, &bs[t]);
            filter_high(&bs[t], false);
        } else {
            memset(&bs[t], 0, sizeof(bs[t]));
            bs[t].table = t;
            for (int i = 0; i < 5; i++)
                bs[t].keys[bs[t].n] = (int32_t)hps_gen_splitmix64(rng),
                bs[t].kind[bs[t].n++] = K_UNK;
        }
    }
    e = check_multi_lookup(c, mi, bs, T, HPS_KEY_INT32);
    ok(!e, "%s: hps_client_lookup with int32 keys (%s) exact", m->name,
       m->key_bytes == 4 ? "known keys below 2^31" : "64-bit model: unknown values, defaults");
    if (e)
        diag("%s", e);
    if (m->key_bytes == 4) {
        for (uint32_t t = 0; t < T; t++) {
            make_batch(m, t, 30, 10, 0, rng, &bs[t]);
            filter_high(&bs[t], true);
        }
        e = check_multi_lookup(c, mi, bs, T, HPS_KEY_INT32);
        ok(!e, "%s: hps_client_lookup with int32 bit patterns of uint32 keys >= 2^31 exact",
           m->name);
        if (e)
            diag("%s", e);
    }

    /* One table only, T = 1, no keys at all. */
    memset(&bs[0], 0, sizeof(bs[0]));
    e = check_multi_lookup(c, mi, bs, 1, HPS_KEY_INT64);
    ok(!e, "%s: hps_client_lookup with numkeys {0}", m->name);
    if (e)
        diag("%s", e);
    free(bs);
}

/* ---- exact: errors -------------------------------------------------------------- */

/* A thread that records its hps_client_last_error() before any call, then
 * fails a call of its own. */
typedef struct fresh {
    hps_client_t *c;
    char before[512];
    hps_err_t rc;
} fresh_t;

static void *fresh_thread(void *arg)
{
    fresh_t *f = arg;
    snprintf(f->before, sizeof(f->before), "%s", hps_client_last_error());
    hps_client_table_info_t ti;
    f->rc = hps_client_table_info(f->c, 0, UINT32_MAX, &ti);
    return NULL;
}

/* Before each call expected to fail, a failure with a known message, so
 * that a call that fails without setting its own message is caught. */
static hps_client_t *sentinel_client;
#define SENTINEL "sentinel_model_of_client_check"

static void set_sentinel(void)
{
    size_t x;
    (void)hps_client_model_find(sentinel_client, SENTINEL, &x);
}

static void expect_err_fn(const char *what, hps_err_t rc, hps_err_t want)
{
    const char *msg = hps_client_last_error();
    bool fresh = msg && msg[0] && !strstr(msg, SENTINEL);
    ok(rc == want && fresh, "%s -> %s with its own message (got %d %s: \"%s\")", what,
       hps_err_name(want), rc, hps_err_name(rc), msg ? msg : "(null)");
}

#define expect_err(what, call, want)                                                               \
    do {                                                                                           \
        set_sentinel();                                                                            \
        hps_err_t rc_ = (call);                                                                    \
        expect_err_fn(what, rc_, want);                                                            \
    } while (0)

static void check_errors(hps_client_t *c, const char *config)
{
    const model_t *m = &models[0];
    uint32_t T = m->num_tables;
    int64_t keys[4] = {file_key(m, 0, 0), file_key(m, 0, 1), 5, 6};
    int32_t numkeys[MAX_TABLES + 1];
    float *out = calloc((size_t)4 * 4096, sizeof(float));
    hps_client_table_info_t ti;
    hps_client_model_info_t mi_;
    hps_client_counters_t k;
    size_t found;
    uint32_t tfound;

    sentinel_client = c;
    for (uint32_t t = 0; t <= MAX_TABLES; t++)
        numkeys[t] = 0;
    numkeys[0] = 2;

    expect_err("hps_client_lookup_table model index = num_models",
               hps_client_lookup_table(c, num_models, 0, 2, keys, HPS_KEY_INT64, HPS_HOST, out,
                                       HPS_HOST, NULL),
               HPS_EINVAL);
    expect_err("hps_client_lookup_table model index SIZE_MAX",
               hps_client_lookup_table(c, SIZE_MAX, 0, 2, keys, HPS_KEY_INT64, HPS_HOST, out,
                                       HPS_HOST, NULL),
               HPS_EINVAL);
    expect_err(
        "hps_client_lookup_table table index = num_tables",
        hps_client_lookup_table(c, 0, T, 2, keys, HPS_KEY_INT64, HPS_HOST, out, HPS_HOST, NULL),
        HPS_EINVAL);
    expect_err("hps_client_lookup_table table index UINT32_MAX",
               hps_client_lookup_table(c, 0, UINT32_MAX, 2, keys, HPS_KEY_INT64, HPS_HOST, out,
                                       HPS_HOST, NULL),
               HPS_EINVAL);
    expect_err("hps_client_lookup model index = num_models",
               hps_client_lookup(c, num_models, 1, numkeys, keys, HPS_KEY_INT64, HPS_HOST, out,
                                 HPS_HOST, NULL),
               HPS_EINVAL);
    expect_err(
        "hps_client_lookup num_tables = num_tables + 1",
        hps_client_lookup(c, 0, T + 1, numkeys, keys, HPS_KEY_INT64, HPS_HOST, out, HPS_HOST, NULL),
        HPS_EINVAL);
    numkeys[0] = -1;
    expect_err(
        "hps_client_lookup numkeys {-1}",
        hps_client_lookup(c, 0, 1, numkeys, keys, HPS_KEY_INT64, HPS_HOST, out, HPS_HOST, NULL),
        HPS_EINVAL);
    if (T >= 2) {
        numkeys[0] = 3;
        numkeys[1] = -1;
        expect_err(
            "hps_client_lookup numkeys {3, -1} (sum 2)",
            hps_client_lookup(c, 0, 2, numkeys, keys, HPS_KEY_INT64, HPS_HOST, out, HPS_HOST, NULL),
            HPS_EINVAL);
        numkeys[1] = 0;
    }
    numkeys[0] = INT32_MIN;
    expect_err(
        "hps_client_lookup numkeys {INT32_MIN}",
        hps_client_lookup(c, 0, 1, numkeys, keys, HPS_KEY_INT64, HPS_HOST, out, HPS_HOST, NULL),
        HPS_EINVAL);
    numkeys[0] = 2;
    expect_err("hps_client_lookup_table keys_loc 0 (device) on a host-only client",
               hps_client_lookup_table(c, 0, 0, 2, keys, HPS_KEY_INT64, 0, out, HPS_HOST, NULL),
               HPS_EINVAL);
    expect_err("hps_client_lookup_table out_loc 0 (device) on a host-only client",
               hps_client_lookup_table(c, 0, 0, 2, keys, HPS_KEY_INT64, HPS_HOST, out, 0, NULL),
               HPS_EINVAL);
    expect_err("hps_client_lookup keys_loc 0 (device) on a host-only client",
               hps_client_lookup(c, 0, 1, numkeys, keys, HPS_KEY_INT64, 0, out, HPS_HOST, NULL),
               HPS_EINVAL);
    expect_err("hps_client_lookup out_loc 0 (device) on a host-only client",
               hps_client_lookup(c, 0, 1, numkeys, keys, HPS_KEY_INT64, HPS_HOST, out, 0, NULL),
               HPS_EINVAL);
    expect_err("hps_client_lookup_table keys_loc -2",
               hps_client_lookup_table(c, 0, 0, 2, keys, HPS_KEY_INT64, -2, out, HPS_HOST, NULL),
               HPS_EINVAL);
    expect_err(
        "hps_client_lookup_table key_type 7",
        hps_client_lookup_table(c, 0, 0, 2, keys, (hps_key_type_t)7, HPS_HOST, out, HPS_HOST, NULL),
        HPS_EINVAL);
    expect_err("hps_client_lookup key_type -1",
               hps_client_lookup(c, 0, 1, numkeys, keys, (hps_key_type_t)-1, HPS_HOST, out,
                                 HPS_HOST, NULL),
               HPS_EINVAL);
    expect_err(
        "hps_client_lookup_table keys NULL (2 keys)",
        hps_client_lookup_table(c, 0, 0, 2, NULL, HPS_KEY_INT64, HPS_HOST, out, HPS_HOST, NULL),
        HPS_EINVAL);
    expect_err(
        "hps_client_lookup_table out NULL (2 keys)",
        hps_client_lookup_table(c, 0, 0, 2, keys, HPS_KEY_INT64, HPS_HOST, NULL, HPS_HOST, NULL),
        HPS_EINVAL);
    expect_err("hps_client_lookup numkeys NULL",
               hps_client_lookup(c, 0, 1, NULL, keys, HPS_KEY_INT64, HPS_HOST, out, HPS_HOST, NULL),
               HPS_EINVAL);
    expect_err("hps_client_lookup_table n = 2^31 (over INT32_MAX)",
               hps_client_lookup_table(c, 0, 0, (size_t)1 << 31, keys, HPS_KEY_INT64, HPS_HOST, out,
                                       HPS_HOST, NULL),
               HPS_EINVAL);

    expect_err("hps_client_table_info model index = num_models",
               hps_client_table_info(c, num_models, 0, &ti), HPS_EINVAL);
    expect_err("hps_client_table_info table index = num_tables",
               hps_client_table_info(c, 0, T, &ti), HPS_EINVAL);
    expect_err("hps_client_model_info model index = num_models",
               hps_client_model_info(c, num_models, &mi_), HPS_EINVAL);
    expect_err("hps_client_counters model index = num_models",
               hps_client_counters(c, num_models, &k), HPS_EINVAL);
    expect_err("hps_client_table_find model index = num_models",
               hps_client_table_find(c, num_models, m->t[0].name, &tfound), HPS_EINVAL);
    expect_err("hps_client_table_find unknown table name",
               hps_client_table_find(c, 0, "no_such_table", &tfound), HPS_ENOTFOUND);
    expect_err("hps_client_model_find unknown model name",
               hps_client_model_find(c, "no_such_model", &found), HPS_ENOTFOUND);
    const char *msg = hps_client_last_error();
    ok(strstr(msg, "no_such_model") && strstr(msg, m->name),
       "the HPS_ENOTFOUND message names the model and the known ones: \"%s\"", msg);

    /* GPU-only calls on a host-only client. */
    hps_client_cache_stats_t cs;
    hps_client_gpu_stats_t gs;
    expect_err("hps_client_cache_stats on a host-only client", hps_client_cache_stats(c, 0, 0, &cs),
               HPS_ENOTFOUND);
    expect_err("hps_client_gpu_stats on a host-only client", hps_client_gpu_stats(c, &gs),
               HPS_ENOTFOUND);
    expect_err("hps_client_host_register on a host-only client",
               hps_client_host_register(c, out, 4096), HPS_EUNSUPPORTED);

    /* hps_client_last_error is per thread: "" in a fresh thread, and the
     * main thread's message survives another thread's failure. */
    (void)hps_client_model_find(c, "main_thread_model", &found);
    char before[512];
    snprintf(before, sizeof(before), "%s", hps_client_last_error());
    fresh_t fr = {.c = c, .before = "(unset)", .rc = 0};
    pthread_t th;
    pthread_create(&th, NULL, fresh_thread, &fr);
    pthread_join(th, NULL);
    ok(fr.before[0] == '\0',
       "hps_client_last_error() in a thread that never failed is \"\" (got \"%s\")", fr.before);
    ok(fr.rc == HPS_EINVAL, "that thread's own failing call: %d", fr.rc);
    ok(strstr(before, "main_thread_model") && !strcmp(before, hps_client_last_error()),
       "another thread's failure leaves this thread's message alone (\"%s\")",
       hps_client_last_error());

    /* Still exact after the failures. */
    batch_t b;
    uint64_t rng = 99;
    make_batch(m, 0, 30, 5, 3, &rng, &b);
    const char *e = check_table_lookup(c, 0, &b, HPS_KEY_INT64);
    ok(!e, "the client is exact after the failed calls");
    if (e)
        diag("%s", e);

    /* hps_client_open's errors. */
    hps_client_t *c2 = (hps_client_t *)0x1;
    char err[512];
    hps_err_t rc = hps_client_open(NULL, -1, &c2, err, sizeof(err));
    ok(rc == HPS_EINVAL, "hps_client_open(NULL config) -> HPS_EINVAL (got %d)", rc);
    rc = hps_client_open(config, -1, NULL, err, sizeof(err));
    ok(rc == HPS_EINVAL, "hps_client_open(ret NULL) -> HPS_EINVAL (got %d)", rc);
    err[0] = 0;
    rc = hps_client_open(config, -2, &c2, err, sizeof(err));
    ok(rc == HPS_EINVAL, "hps_client_open(device -2) -> HPS_EINVAL (got %d: %s)", rc, err);
    err[0] = 0;
    rc = hps_client_open("/nonexistent/hps-client-check.ini", -1, &c2, err, sizeof(err));
    ok(rc < 0 && rc > -4096 && err[0],
       "hps_client_open(missing file) -> a negative errno with a "
       "message (got %d %s: %s)",
       rc, hps_err_name(rc), err);
    char path[] = "/tmp/client-check-XXXXXX.ini";
    int fd = mkstemps(path, 4);
    if (fd >= 0) {
        static const char bad[] = "[hps]\nsupportlonglong = perhaps\n";
        ssize_t w = write(fd, bad, sizeof(bad) - 1);
        close(fd);
        err[0] = 0;
        rc = w > 0 ? hps_client_open(path, -1, &c2, err, sizeof(err)) : -EIO;
        ok(rc == HPS_ECONFIG && strstr(err, "supportlonglong"),
           "hps_client_open(bad INI) -> HPS_ECONFIG naming the key (got %d: %s)", rc, err);
        unlink(path);
    }
    rc = hps_client_open("/nonexistent/x.ini", -1, &c2, NULL, 0);
    ok(rc < 0, "hps_client_open with err NULL, err_len 0 fails cleanly (got %d)", rc);
    hps_client_close(NULL);
    ok(true, "hps_client_close(NULL) is a no-op");
    free(out);
}

/* ---- exact: threads ------------------------------------------------------------- */

typedef struct thr {
    pthread_t th;
    hps_client_t *c;
    int id;
    double until;
    uint64_t calls, keys[MAX_MODELS], calls_m[MAX_MODELS], bad;
    char first[512];
} thr_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *thr_main(void *arg)
{
    thr_t *w = arg;
    uint64_t rng = 1000 + (uint64_t)w->id;
    batch_t b, bs[MAX_TABLES];
    while (now_s() < w->until) {
        size_t mi = hps_gen_splitmix64(&rng) % num_models;
        const model_t *m = &models[mi];
        const char *e;
        if (w->calls % 3 == 2) {
            size_t nk = 0;
            for (uint32_t t = 0; t < m->num_tables; t++) {
                size_t n = hps_gen_splitmix64(&rng) % 24;
                make_batch(m, t, n, n / 4, n % 3, &rng, &bs[t]);
                nk += bs[t].n;
            }
            e = check_multi_lookup(w->c, mi, bs, m->num_tables, HPS_KEY_INT64);
            w->keys[mi] += nk;
            w->calls_m[mi] += nk > 0; /* a call of 0 keys is not counted */
        } else {
            uint32_t t = (uint32_t)(hps_gen_splitmix64(&rng) % m->num_tables);
            size_t n = 1 + hps_gen_splitmix64(&rng) % 64;
            make_batch(m, t, n, n / 4, n % 3, &rng, &b);
            hps_key_type_t kt = m->key_bytes == 4 && w->calls % 2 ? HPS_KEY_INT32 : HPS_KEY_INT64;
            if (kt == HPS_KEY_INT32) /* unknown keys must fit uint32: no aliasing */
                for (size_t i = 0; i < b.n; i++)
                    if (b.kind[i] == K_UNK && (b.keys[i] < 0 || b.keys[i] >= UINT32_MAX))
                        b.keys[i] = hps_gen_key32(t, m->t[t].rows + i); /* past the rows */
            e = check_table_lookup(w->c, mi, &b, kt);
            w->keys[mi] += b.n;
            w->calls_m[mi] += b.n > 0;
        }
        w->calls++;
        if (e && w->bad++ == 0)
            snprintf(w->first, sizeof(w->first), "%s", e);
    }
    return NULL;
}

static void check_threads(hps_client_t *c)
{
    enum { NT = 8 };
    thr_t w[NT];
    hps_client_counters_t b0[MAX_MODELS], b1;
    for (size_t mi = 0; mi < num_models; mi++)
        b0[mi] = counters(c, mi);
    double until = now_s() + 1.0;
    for (int i = 0; i < NT; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].c = c;
        w[i].id = i;
        w[i].until = until;
        pthread_create(&w[i].th, NULL, thr_main, &w[i]);
    }
    uint64_t calls = 0, bad = 0, keys[MAX_MODELS] = {0}, calls_m[MAX_MODELS] = {0};
    for (int i = 0; i < NT; i++) {
        pthread_join(w[i].th, NULL);
        calls += w[i].calls;
        bad += w[i].bad;
        for (size_t mi = 0; mi < num_models; mi++)
            keys[mi] += w[i].keys[mi], calls_m[mi] += w[i].calls_m[mi];
        if (w[i].bad)
            diag("thread %d: %llu wrong of %llu; first: %s", i, (unsigned long long)w[i].bad,
                 (unsigned long long)w[i].calls, w[i].first);
    }
    ok(bad == 0 && calls >= NT, "%d threads for 1 s: %llu lookups, all exact", NT,
       (unsigned long long)calls);
    for (size_t mi = 0; mi < num_models; mi++) {
        b1 = counters(c, mi);
        hps_client_counters_t bb0 = b0[mi];
#define DD(field) ((unsigned long long)(b1.field - bb0.field))
        ok(DD(lookup_keys) == keys[mi] && DD(lookup_calls) == calls_m[mi] &&
               DD(vdb_hits) + DD(lower_hits) + DD(default_keys) == keys[mi],
           "model %s after the threads: +%llu keys (want %llu) = %llu vdb + %llu lower + %llu "
           "defaults, +%llu calls (want %llu)",
           models[mi].name, DD(lookup_keys), (unsigned long long)keys[mi], DD(vdb_hits),
           DD(lower_hits), DD(default_keys), DD(lookup_calls), (unsigned long long)calls_m[mi]);
#undef DD
    }
}

/* ---- Subcommands ------------------------------------------------------------------ */

static int cmd_exact(const char *config)
{
    hps_client_t *c = NULL;
    char err[512] = "";
    hps_err_t rc = hps_client_open(config, HPS_HOST, &c, err, sizeof(err));
    if (!ok(rc == 0 && c, "hps_client_open(config, -1): %d %s", rc, err))
        return tap_done();
    rc = hps_client_wait_ready(c, 30000);
    ok(rc == 0, "hps_client_wait_ready: %s", err_text(rc));
    ok(hps_client_ready(c), "hps_client_ready");
    ok(hps_client_coordinator_alive(c), "hps_client_coordinator_alive");
    ok(hps_client_device(c) == -1, "hps_client_device is -1 (host-only)");
    if (describe(c, true)) {
        uint64_t rng = 42;
        for (size_t mi = 0; mi < num_models; mi++) {
            for (uint32_t t = 0; t < models[mi].num_tables; t++)
                check_table(c, mi, t, &rng);
            check_multi(c, mi, &rng);
        }
        check_errors(c, config);
        check_threads(c);
    }
    hps_client_close(c);
    return tap_done();
}

static int cmd_early(const char *config)
{
    hps_client_t *c = NULL;
    char err[512] = "";
    hps_err_t rc = hps_client_open(config, HPS_HOST, &c, err, sizeof(err));
    if (!ok(rc == 0 && c, "hps_client_open before the coordinator runs: %d %s", rc, err))
        return tap_done();
    ok(!hps_client_ready(c), "not ready before the coordinator runs");
    rc = hps_client_wait_ready(c, 200);
    ok(rc == HPS_ETIMEDOUT, "hps_client_wait_ready(200 ms) -> HPS_ETIMEDOUT (got %d)", rc);
    diag("waiting");
    rc = hps_client_wait_ready(c, 60000);
    ok(rc == 0 && hps_client_ready(c), "ready once the coordinator is up (%s)", err_text(rc));
    if (describe(c, false)) {
        uint64_t rng = 7;
        batch_t b;
        make_batch(&models[0], 0, 50, 10, 5, &rng, &b);
        const char *e = check_table_lookup(c, 0, &b, HPS_KEY_INT64);
        ok(!e, "a lookup after attaching late is exact");
        if (e)
            diag("%s", e);
    }
    hps_client_close(c);
    return tap_done();
}

static int cmd_loop(const char *config)
{
    hps_client_t *c = NULL;
    char err[512] = "";
    if (hps_client_open(config, HPS_HOST, &c, err, sizeof(err)) < 0) {
        printf("OPEN FAILED %s\n", err);
        return 2;
    }
    if (hps_client_wait_ready(c, 30000) < 0 || !describe(c, false)) {
        printf("NOT READY %s\n", hps_client_last_error());
        return 2;
    }
    printf("READY pid %d\n", (int)getpid());
    fflush(stdout);
    /* A fixed set of batches (mostly volatile-DB keys, a few that go to
     * the coordinator, a few unknown), cycled. */
    enum { NB = 16 };
    static batch_t bs[NB];
    size_t bm[NB];
    uint64_t rng = 5;
    for (int i = 0; i < NB; i++) {
        bm[i] = (size_t)i % num_models;
        const model_t *m = &models[bm[i]];
        make_batch(m, (uint32_t)(i / num_models) % m->num_tables, 24, 2, 2, &rng, &bs[i]);
    }
    for (unsigned long long n = 1;; n++) {
        int i = (int)(n % NB);
        const char *e = check_table_lookup(c, bm[i], &bs[i], HPS_KEY_INT64);
        if (e) {
            printf("MISMATCH after %llu calls: %s\n", n, e);
            fflush(stdout);
            return 1;
        }
        if (n % 1000 == 0) {
            printf("LOOKUPS %llu\n", n);
            fflush(stdout);
        }
    }
}

int main(int argc, char **argv)
{
    if (argc < 3)
        usage();
    parse_opts(argc, argv);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(argv[2], "exact"))
        return cmd_exact(argv[1]);
    if (!strcmp(argv[2], "early"))
        return cmd_early(argv[1]);
    if (!strcmp(argv[2], "loop"))
        return cmd_loop(argv[1]);
    usage();
    return 2;
}
