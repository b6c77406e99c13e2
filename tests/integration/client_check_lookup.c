/*
 * client_check_lookup.c -- client-check's lookups with checks (a lookup
 * into a canaried buffer compared bit for bit with the generator's
 * vectors) and the "exact" checks built on them: every table on its own
 * (volatile-DB, persistent-DB-only, unknown and int32 keys, the counters)
 * and hps_client_lookup / hps_client_lookup_typed over several tables.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_check.h"

/* ---- Lookups with checks ---------------------------------------------------- */

/* n keys of table t: n_vdb VDB keys, n_pdb PDB-only keys (fewer if the
 * table has none), the rest unknown; shuffled. */
void cc_make_batch(const model_t *m, uint32_t t, size_t n_vdb, size_t n_pdb, size_t n_unk,
                   uint64_t *rng, batch_t *b)
{
    memset(b, 0, sizeof(*b));
    b->table = t;
    if (!cc_has_pdb(m, t))
        n_pdb = 0;
    for (size_t i = 0; i < n_vdb && b->n < MAX_KEYS; i++, b->n++)
        b->keys[b->n] = cc_vdb_key(m, t, rng), b->kind[b->n] = K_VDB;
    for (size_t i = 0; i < n_pdb && b->n < MAX_KEYS; i++, b->n++)
        b->keys[b->n] = cc_pdb_key(m, t, rng), b->kind[b->n] = K_PDB;
    for (size_t i = 0; i < n_unk && b->n < MAX_KEYS; i++, b->n++)
        b->keys[b->n] = cc_unknown_key(m, t, rng), b->kind[b->n] = K_UNK;
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
        cc_expect_row(m, b->table, b->keys[i], b->kind[i], want + i * dim);
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

/* NULL if a call returned 0 and left the canary past its nf output floats
 * intact; else msg (len bytes), saying which. */
static const char *call_verdict(char *msg, size_t len, const char *call, hps_err_t rc,
                                const float *out, size_t nf)
{
    if (rc)
        snprintf(msg, len, "%s: %s", call, cc_err_text(rc));
    else if (!canary_intact(out + nf, CANARY))
        snprintf(msg, len, "wrote past the %zu output floats", nf);
    else
        return NULL;
    return msg;
}

/* lookup_table of b (int64 keys) into a canaried buffer; returns the error
 * text (NULL when exact). */
const char *cc_check_table_lookup(hps_client_t *c, size_t mi, const batch_t *b, hps_key_type_t kt)
{
    static __thread char msg[1024];
    const model_t *m = &cc_models[mi];
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
    const char *r = call_verdict(msg, sizeof(msg), "hps_client_lookup_table", rc, out, nf);
    if (!r && memcmp(out, want, nf * sizeof(float)) != 0) {
        snprintf(msg, sizeof(msg), "%s", cc_mismatch(out, want, nf, dim, b->keys));
        r = msg;
    }
    free(out);
    free(want);
    return r;
}

/* hps_client_lookup over batches bs[0..T-1] (bs[t].table == t). */
const char *cc_check_multi_lookup(hps_client_t *c, size_t mi, const batch_t *bs, uint32_t T,
                                  hps_key_type_t kt)
{
    static __thread char msg[1024];
    const model_t *m = &cc_models[mi];
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
    const char *r = call_verdict(msg, sizeof(msg), "hps_client_lookup", rc, out, nf);
    if (!r) {
        fi = 0;
        for (uint32_t t = 0; t < T && !r; t++) {
            size_t n = bs[t].n * m->t[t].dim;
            if (memcmp(out + fi, want + fi, n * sizeof(float)) != 0) {
                snprintf(msg, sizeof(msg), "table %u: %s", t,
                         cc_mismatch(out + fi, want + fi, n, m->t[t].dim, bs[t].keys));
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
    const model_t *m = &cc_models[mi];
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
        snprintf(msg, sizeof(msg), "hps_client_lookup_typed: %s", cc_err_text(rc)), r = msg;
    else if (i < nf)
        snprintf(msg, sizeof(msg), "value %zu: 0x%04x, want 0x%04x (fp32 %a)", i, out[i],
                 bf16_rne(want[i]), (double)want[i]),
            r = msg;
    else if (out[nf] != 0xa5a5 || out[nf + CANARY - 1] != 0xa5a5)
        snprintf(msg, sizeof(msg), "wrote past the %zu output values", nf), r = msg;
    else if ((rc = hps_client_lookup_typed(c, mi, T, numkeys, keys, HPS_KEY_INT64, HPS_HOST, out,
                                           HPS_DTYPE_INT8, HPS_HOST, NULL, 0)) != HPS_EINVAL)
        snprintf(msg, sizeof(msg), "output type int8: %s, want HPS_EINVAL", cc_err_text(rc)),
            r = msg;
    free(keys);
    free(want);
    free(out);
    return r;
}

hps_client_counters_t cc_counters(hps_client_t *c, size_t mi)
{
    hps_client_counters_t k;
    memset(&k, 0, sizeof(k));
    hps_err_t rc = hps_client_counters(c, mi, &k);
    if (rc)
        cc_ok(false, "hps_client_counters(%zu): %s", mi, cc_err_text(rc));
    return k;
}

#define D(field) ((unsigned long long)(b1.field - b0.field))

/* ---- exact: per table --------------------------------------------------------- */

void cc_check_table(hps_client_t *c, size_t mi, uint32_t t, uint64_t *rng)
{
    const model_t *m = &cc_models[mi];
    const table_t *tb = &m->t[t];
    batch_t b;
    const char *e;
    hps_client_counters_t b0, b1;

    /* Volatile-DB keys. */
    cc_make_batch(m, t, 100, 0, 0, rng, &b);
    b0 = cc_counters(c, mi);
    e = cc_check_table_lookup(c, mi, &b, HPS_KEY_INT64);
    b1 = cc_counters(c, mi);
    cc_ok(!e, "%s/%s: 100 volatile-DB keys (int64) exact", m->name, tb->name);
    if (e)
        cc_diag("%s", e);
    cc_ok(D(lookup_keys) == 100 && D(vdb_hits) == 100 && D(lower_hits) == 0 &&
              D(default_keys) == 0 && D(lookup_calls) == 1,
          "%s/%s: counters +%llu keys, +%llu vdb_hits, +%llu lower_hits, +%llu defaults, +%llu "
          "calls (want 100, 100, 0, 0, 1)",
          m->name, tb->name, D(lookup_keys), D(vdb_hits), D(lower_hits), D(default_keys),
          D(lookup_calls));

    /* Persistent-DB-only keys. */
    if (cc_has_pdb(m, t)) {
        cc_make_batch(m, t, 0, 40, 0, rng, &b);
        b0 = cc_counters(c, mi);
        e = cc_check_table_lookup(c, mi, &b, HPS_KEY_INT64);
        b1 = cc_counters(c, mi);
        cc_ok(!e, "%s/%s: 40 persistent-DB-only keys exact (through the coordinator)", m->name,
              tb->name);
        if (e)
            cc_diag("%s", e);
        cc_ok(D(lookup_keys) == 40 && D(vdb_hits) + D(lower_hits) == 40 && D(lower_hits) > 0 &&
                  D(default_keys) == 0,
              "%s/%s: counters +%llu keys, +%llu vdb_hits, +%llu lower_hits, +%llu defaults",
              m->name, tb->name, D(lookup_keys), D(vdb_hits), D(lower_hits), D(default_keys));
    }

    /* Unknown keys: every element is the default. */
    cc_make_batch(m, t, 0, 0, 12, rng, &b);
    {
        size_t nf = b.n * tb->dim;
        float *out = malloc(nf * sizeof(float));
        b0 = cc_counters(c, mi);
        hps_err_t rc = hps_client_lookup_table(c, mi, t, b.n, b.keys, HPS_KEY_INT64, HPS_HOST, out,
                                               HPS_HOST, NULL);
        b1 = cc_counters(c, mi);
        size_t bad = 0;
        for (size_t i = 0; i < nf; i++)
            bad += memcmp(&out[i], &tb->def, sizeof(float)) != 0;
        cc_ok(rc == 0 && bad == 0,
              "%s/%s: 12 unknown keys: every element is the default %g (%s, "
              "%zu differ)",
              m->name, tb->name, (double)tb->def, cc_err_text(rc), bad);
        cc_ok(D(lookup_keys) == 12 && D(default_keys) == 12 && D(vdb_hits) == 0 &&
                  D(lower_hits) == 0,
              "%s/%s: counters +%llu keys, +%llu defaults, +%llu vdb_hits, +%llu lower_hits (want "
              "12, 12, 0, 0)",
              m->name, tb->name, D(lookup_keys), D(default_keys), D(vdb_hits), D(lower_hits));
        free(out);
    }

    /* A mixed batch. */
    cc_make_batch(m, t, 60, 20, 8, rng, &b);
    b0 = cc_counters(c, mi);
    e = cc_check_table_lookup(c, mi, &b, HPS_KEY_INT64);
    b1 = cc_counters(c, mi);
    cc_ok(!e, "%s/%s: %zu mixed keys (%zu vdb, %zu pdb-only, %zu unknown) exact", m->name, tb->name,
          b.n, b.n_kind[K_VDB], b.n_kind[K_PDB], b.n_kind[K_UNK]);
    if (e)
        cc_diag("%s", e);
    cc_ok(D(lookup_keys) == b.n && D(default_keys) == b.n_kind[K_UNK] &&
              D(vdb_hits) + D(lower_hits) == b.n_kind[K_VDB] + b.n_kind[K_PDB] &&
              D(vdb_hits) >= b.n_kind[K_VDB],
          "%s/%s: mixed counters +%llu keys = %llu vdb_hits + %llu lower_hits + %llu defaults",
          m->name, tb->name, D(lookup_keys), D(vdb_hits), D(lower_hits), D(default_keys));

    /* int32 keys. */
    if (tb->key_bytes == 4) {
        /* Known keys below 2^31 as int32, then keys >= 2^31 as int32 bit
         * patterns (zero-extended for a 32-bit model, not sign-extended). */
        batch_t hi;
        cc_make_batch(m, t, 120, 30, 0, rng, &b);
        hi = b;
        filter_high(&b, false);
        filter_high(&hi, true);
        e = cc_check_table_lookup(c, mi, &b, HPS_KEY_INT32);
        cc_ok(!e, "%s/%s: %zu known keys below 2^31 as int32 exact", m->name, tb->name, b.n);
        if (e)
            cc_diag("%s", e);
        e = cc_check_table_lookup(c, mi, &hi, HPS_KEY_INT32);
        cc_ok(!e, "%s/%s: %zu known uint32 keys >= 2^31 as int32 bit patterns exact", m->name,
              tb->name, hi.n);
        if (e)
            cc_diag("%s", e);
        /* int64 keys outside the uint32 range: defaults, no aliasing. */
        batch_t o;
        memset(&o, 0, sizeof(o));
        o.table = t;
        for (size_t i = 0; i < 10; i++) {
            int64_t k = cc_vdb_key(m, t, rng);
            o.keys[o.n] = k + ((int64_t)(i + 1) << 32), o.kind[o.n++] = K_UNK;
            o.keys[o.n] = k - ((int64_t)(i + 1) << 32), o.kind[o.n++] = K_UNK;
        }
        e = cc_check_table_lookup(c, mi, &o, HPS_KEY_INT64);
        cc_ok(!e,
              "%s/%s: int64 keys outside the uint32 range (table key +- k * 2^32) get the "
              "default",
              m->name, tb->name);
        if (e)
            cc_diag("%s", e);
    } else {
        /* 64-bit model: int32 values are sign-extended; generated keys are
         * all far above 2^31, so these are unknown keys. */
        static const int32_t vals[] = {0, 1, 5, -1, -7, INT32_MAX, INT32_MIN, 123456789};
        batch_t o;
        memset(&o, 0, sizeof(o));
        o.table = t;
        for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++)
            o.keys[o.n] = vals[i], o.kind[o.n++] = K_UNK;
        e = cc_check_table_lookup(c, mi, &o, HPS_KEY_INT32);
        cc_ok(!e,
              "%s/%s: int32 keys on a 64-bit model (0, 1, 5, -1, -7, INT32_MAX, INT32_MIN, "
              "...): defaults",
              m->name, tb->name);
        if (e)
            cc_diag("%s", e);
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
        cc_ok(r1 == 0 && r2 == 0 && memcmp(a, bb, nf * sizeof(float)) == 0,
              "%s/%s: int32 keys equal the same values as int64 keys", m->name, tb->name);
        free(a);
        free(bb);
    }

    /* No keys. */
    float dummy[4] = {1, 2, 3, 4};
    int64_t nokey = 0;
    hps_err_t rc = hps_client_lookup_table(c, mi, t, 0, &nokey, HPS_KEY_INT64, HPS_HOST, dummy,
                                           HPS_HOST, NULL);
    cc_ok(rc == 0 && dummy[0] == 1 && dummy[3] == 4,
          "%s/%s: a lookup of 0 keys returns 0 and writes nothing (%s)", m->name, tb->name,
          cc_err_text(rc));
}

/* ---- exact: multi-table --------------------------------------------------------- */

void cc_check_multi(hps_client_t *c, size_t mi, uint64_t *rng)
{
    const model_t *m = &cc_models[mi];
    uint32_t T = m->num_tables;
    batch_t *bs = calloc(T, sizeof(batch_t));
    const char *e;
    hps_client_counters_t b0, b1;
    size_t nk = 0, unk = 0;

    /* All tables; with 2+ tables table 1 gets no keys. */
    for (uint32_t t = 0; t < T; t++) {
        if (T >= 2 && t == 1)
            cc_make_batch(m, t, 0, 0, 0, rng, &bs[t]);
        else
            cc_make_batch(m, t, 20 + 7 * t, 10, 3 + t, rng, &bs[t]);
        nk += bs[t].n;
        unk += bs[t].n_kind[K_UNK];
    }
    b0 = cc_counters(c, mi);
    e = cc_check_multi_lookup(c, mi, bs, T, HPS_KEY_INT64);
    b1 = cc_counters(c, mi);
    cc_ok(!e,
          "%s: hps_client_lookup over all %u tables (numkeys with a 0 entry: %s), %zu keys, "
          "exact",
          m->name, T, T >= 2 ? "yes" : "single table", nk);
    if (e)
        cc_diag("%s", e);
    cc_ok(D(lookup_keys) == nk && D(default_keys) == unk &&
              D(vdb_hits) + D(lower_hits) + D(default_keys) == nk && D(lookup_calls) == 1,
          "%s: multi-table counters +%llu keys (want %zu) = %llu vdb + %llu lower + %llu defaults "
          "(want %zu), +%llu calls",
          m->name, D(lookup_keys), nk, D(vdb_hits), D(lower_hits), D(default_keys), unk,
          D(lookup_calls));

    e = check_typed_lookup(c, mi, bs, T);
    cc_ok(!e,
          "%s: hps_client_lookup_typed to bf16 over all %u tables: the fp32 vectors rounded "
          "to nearest even, bit for bit; int8 output refused",
          m->name, T);
    if (e)
        cc_diag("%s", e);

    /* A prefix of the tables. */
    if (T >= 2) {
        for (uint32_t t = 0; t < T - 1; t++)
            cc_make_batch(m, t, 9, 4, 2, rng, &bs[t]);
        e = cc_check_multi_lookup(c, mi, bs, T - 1, HPS_KEY_INT64);
        cc_ok(!e, "%s: hps_client_lookup over tables 0..%u of %u exact", m->name, T - 2, T);
        if (e)
            cc_diag("%s", e);
    }

    /* int32 keys. */
    for (uint32_t t = 0; t < T; t++) {
        if (m->key_bytes == 4) {
            cc_make_batch(m, t, 30, 10, 0, rng, &bs[t]);
            filter_high(&bs[t], false);
        } else {
            memset(&bs[t], 0, sizeof(bs[t]));
            bs[t].table = t;
            for (int i = 0; i < 5; i++)
                bs[t].keys[bs[t].n] = (int32_t)hps_gen_splitmix64(rng),
                bs[t].kind[bs[t].n++] = K_UNK;
        }
    }
    e = cc_check_multi_lookup(c, mi, bs, T, HPS_KEY_INT32);
    cc_ok(!e, "%s: hps_client_lookup with int32 keys (%s) exact", m->name,
          m->key_bytes == 4 ? "known keys below 2^31" : "64-bit model: unknown values, defaults");
    if (e)
        cc_diag("%s", e);
    if (m->key_bytes == 4) {
        for (uint32_t t = 0; t < T; t++) {
            cc_make_batch(m, t, 30, 10, 0, rng, &bs[t]);
            filter_high(&bs[t], true);
        }
        e = cc_check_multi_lookup(c, mi, bs, T, HPS_KEY_INT32);
        cc_ok(!e, "%s: hps_client_lookup with int32 bit patterns of uint32 keys >= 2^31 exact",
              m->name);
        if (e)
            cc_diag("%s", e);
    }

    /* One table only, T = 1, no keys at all. */
    memset(&bs[0], 0, sizeof(bs[0]));
    e = cc_check_multi_lookup(c, mi, bs, 1, HPS_KEY_INT64);
    cc_ok(!e, "%s: hps_client_lookup with numkeys {0}", m->name);
    if (e)
        cc_diag("%s", e);
    free(bs);
}
