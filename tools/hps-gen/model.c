/*
 * model.c -- `hps-gen model`: parse the command line into a gen_model_t,
 * check every target before anything is written, then write the tables
 * (write.c) and the INI (ini.c).
 *
 * Per-table options (--rows, --dim, --default, --max-query) take one value
 * for every table or a comma-separated list with one value per table.  The
 * number of tables is --tables, else 26 for --shape criteo-1tb, else the
 * length of the longest list given, else 1.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hps-gen.h"

/* The options of `hps-gen model`: X("long-name", field of model_args_t). */
/* clang-format off */
#define MODEL_VALUE_OPTS(X)                                                                        \
    X("out", out)                                                                                  \
    X("model", name)                                                                               \
    X("ini", ini)                                                                                  \
    X("segment", segment)                                                                          \
    X("shape", shape)                                                                              \
    X("tables", tables)                                                                            \
    X("rows", rows)                                                                                \
    X("dim", dim)                                                                                  \
    X("table-names", names)                                                                        \
    X("default", dflt)                                                                             \
    X("max-query", max_query)                                                                      \
    X("scale", scale)                                                                              \
    X("key-bytes", key_bytes)                                                                      \
    X("seed", seed)                                                                                \
    X("model-version", version)                                                                    \
    X("threads", threads)                                                                          \
    X("gpucacheper", gpucacheper)                                                                  \
    X("max-batch", max_batch)                                                                      \
    X("http-port", http_port)                                                                      \
    X("metrics-port", metrics_port)
#define MODEL_FLAG_OPTS(X)                                                                         \
    X("force", force)                                                                              \
    X("quiet", quiet)                                                                              \
    X("gpucache", gpucache)                                                                        \
    X("no-persistent-db", no_pdb)
/* clang-format on */

/* The raw command line of `hps-gen model`, before per-table expansion. */
typedef struct model_args {
    MODEL_VALUE_OPTS(GEN_ARG_FIELD)
    MODEL_FLAG_OPTS(GEN_FLAG_FIELD)
} model_args_t;

enum { GEN_OPT_FIRST_ = 255, MODEL_VALUE_OPTS(GEN_OPT_ID) MODEL_FLAG_OPTS(GEN_OPT_ID) };

static const struct option model_opts[] = {
    MODEL_VALUE_OPTS(GEN_OPT_VALUE) MODEL_FLAG_OPTS(GEN_OPT_FLAG){NULL, 0, NULL, 0},
};

static bool set_arg(void *args, int id)
{
    model_args_t *a = args;

    switch (id) {
        MODEL_VALUE_OPTS(GEN_SET_VALUE)
        MODEL_FLAG_OPTS(GEN_SET_FLAG)
    default:
        return false;
    }
    return true;
}

static int parse_args(int argc, char **argv, model_args_t *a)
{
    int rc = gen_getopt(argc, argv, "model", model_opts, set_arg, a);

    if (rc == GEN_OK && (a->out == NULL || a->name == NULL))
        return gen_usage("model: --out DIR and --model NAME are required");
    return rc;
}

/* Number of entries of an optional list (0 if absent). */
static size_t list_len(const char *s)
{
    size_t n = s ? 1 : 0;

    for (const char *p = s; p && *p; p++)
        n += *p == ',';
    return n;
}

static size_t max_list_len(const model_args_t *a)
{
    const char *lists[] = {a->rows, a->dim, a->names, a->dflt, a->max_query};
    size_t n = 0;

    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
        size_t k = list_len(lists[i]);
        n = k > n ? k : n;
    }
    return n;
}

/* The number of tables, or 0 after a usage message. */
static size_t table_count(const model_args_t *a, bool criteo)
{
    uint64_t n = 0;

    if (a->tables && !gen_parse_u64(a->tables, 1, GEN_TABLES_MAX, &n)) {
        gen_usage("model: --tables %s: must be an integer in [1, %d]", a->tables, GEN_TABLES_MAX);
        return 0;
    }
    if (criteo) {
        if (n != 0 && n != HPS_GEN_CRITEO_TABLES) {
            gen_usage("model: --shape criteo-1tb has 26 tables, not %s", a->tables);
            return 0;
        }
        return HPS_GEN_CRITEO_TABLES;
    }
    if (n == 0)
        n = max_list_len(a);
    if (n > GEN_TABLES_MAX) {
        gen_usage("model: %llu tables: at most %d", (unsigned long long)n, GEN_TABLES_MAX);
        return 0;
    }
    return n ? (size_t)n : 1;
}

/*
 * Split a per-table list: 1 entry (broadcast) or n entries.  On success
 * *ret_v has n strings (free with gen_strv_free(v, n)); returns false after
 * a usage message.
 */
static bool per_table(const char *opt, const char *s, size_t n, bool exact, char ***ret_v)
{
    char **v;
    size_t k = gen_split(s, &v);

    if (k == 0) {
        gen_usage("model: --%s %s: empty list entry", opt, s);
        return false;
    }
    if (k != n && (exact || k != 1)) {
        gen_usage("model: --%s has %zu entries; the model has %zu tables", opt, k, n);
        gen_strv_free(v, k);
        return false;
    }
    if (k == 1 && n > 1) {
        char **w = gen_xmalloc(n * sizeof *w);
        for (size_t i = 0; i < n; i++)
            w[i] = gen_strdupf("%s", v[0]);
        gen_strv_free(v, k);
        v = w;
    }
    *ret_v = v;
    return true;
}

/* Parse one integer per table in [lo, hi] and store it with set(). */
static bool fill_u64(gen_model_t *m, const char *opt, const char *s, uint64_t lo, uint64_t hi,
                     void (*set)(gen_table_t *, uint64_t))
{
    char **v;
    bool ok = true;

    if (!per_table(opt, s, m->num_tables, false, &v))
        return false;
    for (size_t t = 0; t < m->num_tables && ok; t++) {
        uint64_t x;
        ok = gen_parse_u64(v[t], lo, hi, &x);
        if (ok)
            set(&m->tables[t], x);
        else
            gen_usage("model: --%s %s: must be an integer in [%llu, %llu]", opt, v[t],
                      (unsigned long long)lo, (unsigned long long)hi);
    }
    gen_strv_free(v, m->num_tables);
    return ok;
}

static void set_rows(gen_table_t *t, uint64_t x)
{
    t->rows = x;
}

static void set_dim(gen_table_t *t, uint64_t x)
{
    t->dim = (uint32_t)x;
}

static void set_maxq(gen_table_t *t, uint64_t x)
{
    t->max_query = (uint32_t)x;
}

static bool fill_defaults(gen_model_t *m, const char *s)
{
    char **v;
    bool ok = true;

    if (!per_table("default", s, m->num_tables, false, &v))
        return false;
    for (size_t t = 0; t < m->num_tables && ok; t++) {
        ok = gen_parse_double(v[t], -1e30, 1e30, &m->tables[t].default_value);
        if (!ok)
            gen_usage("model: --default %s: must be a finite number", v[t]);
    }
    gen_strv_free(v, m->num_tables);
    return ok;
}

static bool fill_names(gen_model_t *m, const char *s)
{
    char **v = NULL;

    if (s && !per_table("table-names", s, m->num_tables, true, &v))
        return false;
    for (size_t t = 0; t < m->num_tables; t++) {
        gen_table_t *tb = &m->tables[t];
        tb->name = v ? v[t] : gen_strdupf("sparse_embedding%zu", t);
        if (!gen_valid_name(tb->name, GEN_NAME_MAX, false)) {
            gen_usage("model: table name '%s': must be 1..120 of [A-Za-z0-9_-]", tb->name);
            for (size_t u = t + 1; v && u < m->num_tables; u++)
                free(v[u]);
            free(v);
            return false;
        }
        for (size_t u = 0; u < t; u++) {
            if (strcmp(m->tables[u].name, tb->name) == 0) {
                gen_usage("model: table name '%s' appears twice", tb->name);
                for (size_t w = t + 1; v && w < m->num_tables; w++)
                    free(v[w]);
                free(v);
                return false;
            }
        }
    }
    free(v); /* the strings now belong to the tables */
    return true;
}

/* Rows of every table from --shape/--scale or --rows (default 1000). */
static bool fill_rows(gen_model_t *m, const model_args_t *a, bool criteo)
{
    uint64_t lim = m->key_bytes == 4 ? HPS_GEN_KEY32_LIMIT : HPS_GEN_KEY_LIMIT;
    uint64_t crit[HPS_GEN_CRITEO_TABLES];
    double scale;

    if (!criteo)
        return fill_u64(m, "rows", a->rows ? a->rows : "1000", 1, lim, set_rows);
    if (a->rows)
        return gen_usage("model: --rows and --shape exclude each other"), false;
    if (a->scale == NULL || !gen_parse_double(a->scale, 1e-12, 1e6, &scale) ||
        hps_gen_criteo_rows(scale, crit) != 0)
        return gen_usage("model: --shape criteo-1tb needs --scale F, 0 < F <= 1e6"), false;
    for (size_t t = 0; t < m->num_tables; t++) {
        if (crit[t] > lim)
            return gen_usage("model: --scale %s: table %zu would have %llu rows, more than "
                             "%u-byte keys allow",
                             a->scale, t, (unsigned long long)crit[t], m->key_bytes),
                   false;
        m->tables[t].rows = crit[t];
    }
    return true;
}

static bool parse_scalars(gen_model_t *m, const model_args_t *a)
{
    uint64_t kb = 8, thr = gen_default_threads(), mb = 1024, hp = 8000, mp;

    if (a->key_bytes && (!gen_parse_u64(a->key_bytes, 4, 8, &kb) || (kb != 4 && kb != 8)))
        return gen_usage("model: --key-bytes must be 8 or 4"), false;
    if (a->seed && !gen_parse_u64(a->seed, 0, UINT64_MAX, &m->seed))
        return gen_usage("model: --seed %s: must be an unsigned integer", a->seed), false;
    uint64_t ver = 1;
    if (a->version && !gen_parse_u64(a->version, 1, INT32_MAX, &ver))
        return gen_usage("model: --model-version %s: must be in [1, 2^31-1]", a->version), false;
    m->version = (uint32_t)ver;
    if (a->threads && !gen_parse_u64(a->threads, 1, 256, &thr))
        return gen_usage("model: --threads must be in [1, 256]"), false;
    if (a->max_batch && !gen_parse_u64(a->max_batch, 1, INT32_MAX, &mb))
        return gen_usage("model: --max-batch must be in [1, 2^31-1]"), false;
    if (a->http_port && !gen_parse_u64(a->http_port, 1, 65535, &hp))
        return gen_usage("model: --http-port must be in [1, 65535]"), false;
    mp = hp <= 65533 ? hp + 2 : hp - 2;
    if (a->metrics_port && (!gen_parse_u64(a->metrics_port, 1, 65535, &mp) || mp == hp))
        return gen_usage("model: --metrics-port must be in [1, 65535], not --http-port"), false;
    m->gpucacheper = 0.2;
    if (a->gpucacheper && !gen_parse_double(a->gpucacheper, 0.0, 1.0, &m->gpucacheper))
        return gen_usage("model: --gpucacheper must be in [0, 1]"), false;
    m->key_bytes = (unsigned)kb;
    m->threads = (unsigned)thr;
    m->max_batch = (uint32_t)mb;
    m->http_port = (int)hp;
    m->metrics_port = (int)mp;
    return true;
}

static bool check_names(gen_model_t *m, const model_args_t *a)
{
    m->name = a->name;
    m->segment = a->segment ? a->segment : a->name;
    if (!gen_valid_name(m->name, GEN_NAME_MAX, false))
        return gen_usage("model: --model '%s': must be 1..120 of [A-Za-z0-9_-]", m->name), false;
    if (!gen_valid_name(m->segment, GEN_SEGMENT_MAX, true))
        return gen_usage("model: --segment '%s': must be 1..200 of [A-Za-z0-9_.-]", m->segment),
               false;
    return true;
}

static bool check_sizes(const gen_model_t *m)
{
    for (size_t t = 0; t < m->num_tables; t++) {
        uint64_t b;
        if (__builtin_mul_overflow(m->tables[t].rows, (uint64_t)m->tables[t].dim * 4, &b) ||
            b > (1ULL << 60))
            return gen_usage("model: table %s: %llu rows x dim %u is too large", m->tables[t].name,
                             (unsigned long long)m->tables[t].rows, m->tables[t].dim),
                   false;
    }
    return true;
}

/* Build the model description from the arguments; false after a message. */
static bool build_model(gen_model_t *m, const model_args_t *a)
{
    bool criteo = false;

    if (a->shape && !(criteo = strcmp(a->shape, "criteo-1tb") == 0))
        return gen_usage("model: unknown --shape '%s' (known: criteo-1tb)", a->shape), false;
    if (!criteo && a->scale)
        return gen_usage("model: --scale needs --shape"), false;
    if (!check_names(m, a) || !parse_scalars(m, a))
        return false;
    if ((m->num_tables = table_count(a, criteo)) == 0)
        return false;
    m->tables = calloc(m->num_tables, sizeof *m->tables);
    if (m->tables == NULL)
        return gen_fail(-ENOMEM, "model"), false;
    m->force = a->force;
    m->quiet = a->quiet;
    m->gpucache = a->gpucache;
    m->persistent_db = !a->no_pdb;
    return fill_names(m, a->names) && fill_rows(m, a, criteo) &&
           fill_u64(m, "dim",
                    a->dim   ? a->dim
                    : criteo ? "128"
                             : "16",
                    1, GEN_DIM_MAX, set_dim) &&
           fill_u64(m, "max-query", a->max_query ? a->max_query : "1", 1, INT32_MAX, set_maxq) &&
           fill_defaults(m, a->dflt ? a->dflt : "0.0") && check_sizes(m);
}

/* Quote an argument for the INI comment if it has odd characters. */
static char *join_cmdline(int argc, char **argv)
{
    char *s = gen_strdupf("hps-gen");

    for (int i = 0; i < argc; i++) {
        bool plain = strpbrk(argv[i], " \t\n'\"\\;#$`") == NULL && argv[i][0] != '\0';
        char *n = plain ? gen_strdupf("%s %s", s, argv[i]) : gen_strdupf("%s '%s'", s, argv[i]);
        free(s);
        s = n;
    }
    for (char *p = s; *p; p++)
        *p = *p == '\n' ? ' ' : *p;
    return s;
}

/* Make OUT, resolve it, and derive every path. */
static int prepare_paths(gen_model_t *m, const char *out, const char *ini)
{
    int rc = gen_mkdir_p(out);
    pid_t pid = getpid();

    if (rc != 0)
        return gen_fail(rc, "cannot create the output directory %s", out);
    if ((m->out_dir = realpath(out, NULL)) == NULL)
        return gen_fail(-errno, "cannot resolve %s", out);
    m->ini_path = ini ? gen_strdupf("%s", ini) : gen_strdupf("%s/%s.ini", m->out_dir, m->name);
    for (size_t t = 0; t < m->num_tables; t++) {
        gen_table_t *tb = &m->tables[t];
        tb->dir = gen_strdupf("%s/%s", m->out_dir, tb->name);
        tb->tmp = gen_strdupf("%s/.%s.tmp-%ld", m->out_dir, tb->name, (long)pid);
    }
    return GEN_OK;
}

/* Refuse, before writing anything, to replace existing content without --force. */
static int check_targets(const gen_model_t *m)
{
    bool exists, nonempty;
    int rc;

    for (size_t t = 0; t < m->num_tables; t++) {
        const char *dir = m->tables[t].dir;
        if ((rc = gen_path_state(dir, &exists, &nonempty)) != 0)
            return gen_fail(rc, "cannot inspect %s", dir);
        if (nonempty && !m->force)
            return gen_fail(0, "%s exists and is not empty; use --force to replace it", dir);
    }
    if ((rc = gen_path_state(m->ini_path, &exists, &nonempty)) != 0)
        return gen_fail(rc, "cannot inspect %s", m->ini_path);
    if (exists && !m->force)
        return gen_fail(0, "%s exists; use --force to replace it", m->ini_path);
    return GEN_OK;
}

static void free_model(gen_model_t *m)
{
    for (size_t t = 0; m->tables && t < m->num_tables; t++) {
        free(m->tables[t].name);
        free(m->tables[t].dir);
        free(m->tables[t].tmp);
    }
    free(m->tables);
    free(m->out_dir);
    free(m->ini_path);
    free(m->cmdline);
}

static void print_summary(const gen_model_t *m)
{
    uint64_t rows = 0;
    double mb = (double)m->bytes / 1e6;

    for (size_t t = 0; t < m->num_tables; t++)
        rows += m->tables[t].rows;
    printf("hps-gen: model %s: %zu tables, %llu rows, %llu bytes (%.2f MB) in %.2f s, "
           "%.1f MB/s -> %s; config %s\n",
           m->name, m->num_tables, (unsigned long long)rows, (unsigned long long)m->bytes, mb,
           m->seconds, m->seconds > 0 ? mb / m->seconds : 0.0, m->out_dir, m->ini_path);
}

int gen_cmd_model(int argc, char **argv)
{
    model_args_t a = {0};
    gen_model_t m = {0};
    int rc = parse_args(argc, argv, &a);

    if (rc == GEN_OK)
        rc = build_model(&m, &a) ? GEN_OK : GEN_USAGE;
    if (rc == GEN_OK)
        rc = prepare_paths(&m, a.out, a.ini);
    if (rc == GEN_OK)
        rc = check_targets(&m);
    m.cmdline = join_cmdline(argc, argv);
    if (rc == GEN_OK)
        rc = gen_write_tables(&m);
    if (rc == GEN_OK)
        rc = gen_write_ini(&m);
    if (rc == GEN_OK && !m.quiet)
        print_summary(&m);
    free_model(&m);
    return rc;
}
