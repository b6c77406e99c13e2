/*
 * query.c -- `hps-gen alpha` (the power-law exponent for a hot share, or the
 * share of a given exponent) and `hps-gen row` (keys and vectors of the
 * generator, for scripts that check lookups).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hps-gen.h"

/* The options of `hps-gen alpha` and `hps-gen row`. */
/* clang-format off */
#define ALPHA_OPTS(X)                                                                              \
    X("shape", shape)                                                                              \
    X("scale", scale)                                                                              \
    X("rows", rows)                                                                                \
    X("model-dir", dir)                                                                            \
    X("model", model)                                                                              \
    X("config", config)                                                                            \
    X("hot-keys", hot_keys)                                                                        \
    X("hot-share", hot_share)                                                                      \
    X("alpha", alpha)
#define ROW_OPTS(X)                                                                                \
    X("table", table)                                                                              \
    X("index", index)                                                                              \
    X("key", key)                                                                                  \
    X("count", count)                                                                              \
    X("dim", dim)                                                                                  \
    X("key-bytes", key_bytes)                                                                      \
    X("model-version", version)
/* clang-format on */

typedef struct alpha_args {
    ALPHA_OPTS(GEN_ARG_FIELD)
} alpha_args_t;

typedef struct row_args {
    ROW_OPTS(GEN_ARG_FIELD)
} row_args_t;

enum { GEN_OPT_FIRST_ = 255, ALPHA_OPTS(GEN_OPT_ID) ROW_OPTS(GEN_OPT_ID) };

static const struct option alpha_opts[] = {ALPHA_OPTS(GEN_OPT_VALUE){NULL, 0, NULL, 0}};
static const struct option row_opts[] = {ROW_OPTS(GEN_OPT_VALUE){NULL, 0, NULL, 0}};

static bool set_alpha_arg(void *args, int id)
{
    alpha_args_t *a = args;

    switch (id) {
        ALPHA_OPTS(GEN_SET_VALUE)
    default:
        return false;
    }
    return true;
}

static bool set_row_arg(void *args, int id)
{
    row_args_t *a = args;

    switch (id) {
        ROW_OPTS(GEN_SET_VALUE)
    default:
        return false;
    }
    return true;
}

/* Rows from --shape/--scale, --rows or a model directory. */
static int alpha_rows(const alpha_args_t *a, uint64_t **ret_rows, size_t *ret_n)
{
    double scale;
    char **s;
    size_t n;

    if (a->shape) {
        if (strcmp(a->shape, "criteo-1tb") != 0 || !a->scale ||
            !gen_parse_double(a->scale, 1e-12, 1e6, &scale))
            return gen_usage("alpha: --shape criteo-1tb --scale F (0 < F <= 1e6)");
        *ret_rows = gen_xmalloc(HPS_GEN_CRITEO_TABLES * sizeof **ret_rows);
        *ret_n = HPS_GEN_CRITEO_TABLES;
        hps_gen_criteo_rows(scale, *ret_rows);
        return GEN_OK;
    }
    if (a->rows) {
        if ((n = gen_split(a->rows, &s)) == 0)
            return gen_usage("alpha: --rows: empty list entry");
        *ret_rows = gen_xmalloc(n * sizeof **ret_rows);
        *ret_n = n;
        for (size_t t = 0; t < n; t++) {
            if (!gen_parse_u64(s[t], 1, HPS_GEN_KEY_LIMIT, &(*ret_rows)[t])) {
                gen_strv_free(s, n);
                free(*ret_rows);
                return gen_usage("alpha: --rows: each entry must be an integer >= 1");
            }
        }
        gen_strv_free(s, n);
        return GEN_OK;
    }
    gen_loaded_t l;
    int rc = gen_load_model(a->dir, a->model, a->config, &l);
    if (rc != GEN_OK)
        return rc;
    *ret_rows = l.rows;
    *ret_n = l.num_tables;
    l.rows = NULL;
    gen_loaded_free(&l);
    return GEN_OK;
}

static int alpha_print(const alpha_args_t *a, const uint64_t *rows, size_t n)
{
    double hk = HPS_GEN_HOT_KEYS, hs = HPS_GEN_HOT_SHARE, alpha, share;
    uint64_t total = 0;

    if (a->hot_keys && !gen_parse_double(a->hot_keys, 1e-12, 1.0, &hk))
        return gen_usage("alpha: --hot-keys must be in (0, 1]");
    if (a->hot_share && !(gen_parse_double(a->hot_share, 1e-12, 1.0, &hs) && hs < 1.0))
        return gen_usage("alpha: --hot-share must be in (0, 1)");
    if (a->alpha) {
        if (!gen_parse_double(a->alpha, 0.0, 100.0, &alpha))
            return gen_usage("alpha: --alpha must be in [0, 100]");
        share = hps_gen_hot_share(n, rows, alpha, hk, NULL);
    } else if (hps_gen_alpha_solve(n, rows, hk, hs, &alpha, &share) != 0) {
        return gen_fail(HPS_EINVAL, "alpha: cannot solve");
    }
    for (size_t t = 0; t < n; t++)
        total += rows[t];
    printf("alpha %.6f\nhot_share %.6f\nhot_keys %.6g\ntables %zu\nkeys %llu\n", alpha, share, hk,
           n, (unsigned long long)total);
    return GEN_OK;
}

int gen_cmd_alpha(int argc, char **argv)
{
    alpha_args_t a = {0};
    uint64_t *rows = NULL;
    size_t n = 0;
    int rc = gen_getopt(argc, argv, "alpha", alpha_opts, set_alpha_arg, &a);

    if (rc == GEN_OK)
        rc = alpha_rows(&a, &rows, &n);
    if (rc == GEN_OK)
        rc = alpha_print(&a, rows, n);
    free(rows);
    return rc;
}

/* "KEY v0 v1 ..." of version `version` (hps_gen_vector_v); vec holds dim floats. */
static void print_row(uint32_t table, int64_t key, uint32_t dim, uint32_t version, float *vec)
{
    hps_gen_vector_v(table, key, dim, version, vec);
    printf("%lld", (long long)key);
    for (uint32_t d = 0; d < dim; d++)
        printf(" %.9g", (double)vec[d]);
    putchar('\n');
}

static int row_print(const row_args_t *a)
{
    uint64_t table = 0, index = 0, count = 1, dim = 16, kb = 8, key, ver = 1;
    float *vec;

    if (!a->table || !gen_parse_u64(a->table, 0, UINT32_MAX, &table))
        return gen_usage("row: --table T is required (T >= 0)");
    if (a->dim && !gen_parse_u64(a->dim, 0, GEN_DIM_MAX, &dim))
        return gen_usage("row: --dim must be in [0, %d]", GEN_DIM_MAX);
    if (a->key_bytes && (!gen_parse_u64(a->key_bytes, 4, 8, &kb) || (kb != 4 && kb != 8)))
        return gen_usage("row: --key-bytes must be 8 or 4");
    if (a->count && !gen_parse_u64(a->count, 1, 1u << 24, &count))
        return gen_usage("row: --count must be in [1, 2^24]");
    if (a->version && !gen_parse_u64(a->version, 1, INT32_MAX, &ver))
        return gen_usage("row: --model-version %s: must be in [1, 2^31-1]", a->version);
    if (a->key) {
        char *end;
        long long k = strtoll(a->key, &end, 0);
        if (*end != '\0' || end == a->key)
            return gen_usage("row: --key must be an integer");
        vec = gen_xmalloc(dim * sizeof *vec);
        print_row((uint32_t)table, (int64_t)k, (uint32_t)dim, (uint32_t)ver, vec);
        free(vec);
        return GEN_OK;
    }
    if (!a->index || !gen_parse_u64(a->index, 0, HPS_GEN_KEY_LIMIT - 1, &index))
        return gen_usage("row: --index I or --key K is required");
    vec = gen_xmalloc(dim * sizeof *vec);
    for (uint64_t i = index; i < index + count; i++) {
        key = (uint64_t)hps_gen_key_w((uint32_t)table, i, (unsigned)kb);
        print_row((uint32_t)table, (int64_t)key, (uint32_t)dim, (uint32_t)ver, vec);
    }
    free(vec);
    return GEN_OK;
}

int gen_cmd_row(int argc, char **argv)
{
    row_args_t a = {0};
    int rc = gen_getopt(argc, argv, "row", row_opts, set_row_arg, &a);

    return rc == GEN_OK ? row_print(&a) : rc;
}
