/*
 * requests.c -- `hps-gen requests`: a request workload for hps-bench, drawn
 * by power law over the keys of an existing model; and the loading of a
 * model's tables from its INI (also used by `hps-gen alpha`).
 *
 * Draws: one splitmix64 stream seeded with --seed, consumed in file order
 * (request 0 table 0 sample 0, sample 1, ..., table 1, ..., request 1, ...);
 * each draw u = hps_gen_uniform() gives rank r = hps_gen_powerlaw_rank(u)
 * of table t and the key hps_gen_key_w(t, r - 1, key_bytes).
 */
#include <errno.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

#include "hps-gen.h"

/* ---- loading a model ------------------------------------------------------ */

typedef struct ini_ctx {
    const char *want; /* model name, or NULL: the only one */
    char *model;      /* the model whose keys are collected */
    char *last;       /* the last [model.*] section seen */
    char *files;      /* sparse_files, continuation lines joined with ',' */
    int models;       /* distinct [model.*] sections seen */
    unsigned key_bytes;
    bool bad_bool;
} ini_ctx_t;

static void note_model(ini_ctx_t *c, const char *name)
{
    if (c->last && strcmp(c->last, name) == 0)
        return;
    free(c->last);
    c->last = gen_strdupf("%s", name);
    c->models++;
    if (c->model == NULL && (c->want == NULL || strcmp(c->want, name) == 0))
        c->model = gen_strdupf("%s", name);
}

static int on_ini_kv(void *user, const char *section, const char *name, const char *value)
{
    ini_ctx_t *c = user;

    if (strcmp(section, "hps") == 0 && strcmp(name, "supportlonglong") == 0) {
        if (!strcasecmp(value, "true") || !strcasecmp(value, "yes") || !strcasecmp(value, "on") ||
            !strcmp(value, "1"))
            c->key_bytes = 8;
        else if (!strcasecmp(value, "false") || !strcasecmp(value, "no") ||
                 !strcasecmp(value, "off") || !strcmp(value, "0"))
            c->key_bytes = 4;
        else
            c->bad_bool = true;
    } else if (strncmp(section, "model.", 6) == 0) {
        note_model(c, section + 6);
        if (c->model && strcmp(c->model, section + 6) == 0 && strcmp(name, "sparse_files") == 0) {
            char *n = c->files ? gen_strdupf("%s,%s", c->files, value) : gen_strdupf("%s", value);
            free(c->files);
            c->files = n;
        }
    }
    return 1;
}

/* The only *.ini of dir (malloc'd), or NULL after a message. */
static char *only_ini(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char *found = NULL;
    int n = 0;

    if (d == NULL)
        return gen_fail(-errno, "cannot open %s", dir), NULL;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len > 4 && strcmp(e->d_name + len - 4, ".ini") == 0 && n++ == 0)
            found = gen_strdupf("%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (n == 1)
        return found;
    free(found);
    gen_fail(0, "%s holds %d .ini files; name one with --model or --config", dir, n);
    return NULL;
}

/* Split sparse_files (empty entries, from line-end commas, are skipped) and
 * resolve relative paths against the INI's directory. */
static size_t split_files(const char *files, const char *ini, char ***ret)
{
    const char *slash = strrchr(ini, '/');
    int dlen = slash ? (int)(slash - ini) : 1;
    const char *dir = slash ? ini : ".";
    char **v = gen_xmalloc((strlen(files) / 2 + 1) * sizeof *v);
    size_t n = 0;

    for (const char *p = files; *p;) {
        size_t len = strcspn(p, ",");
        size_t b = 0;
        while (b < len && (p[b] == ' ' || p[b] == '\t'))
            b++;
        while (len > b && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        if (len > b)
            v[n++] = p[b] == '/' ? gen_strdupf("%.*s", (int)(len - b), p + b)
                                 : gen_strdupf("%.*s/%.*s", dlen, dir, (int)(len - b), p + b);
        p += strcspn(p, ",");
        p += *p == ',';
    }
    *ret = v;
    return n;
}

/* rows[t] from the size of each table's `key` file. */
static int load_rows(gen_loaded_t *l)
{
    l->rows = gen_xmalloc(l->num_tables * sizeof *l->rows);
    for (size_t t = 0; t < l->num_tables; t++) {
        char *path = gen_strdupf("%s/key", l->files[t]);
        struct stat st;
        int rc = stat(path, &st) != 0 ? gen_fail(-errno, "cannot read %s", path) : GEN_OK;
        if (rc == GEN_OK && (st.st_size == 0 || st.st_size % 8 != 0))
            rc = gen_fail(0, "%s: %lld bytes is not a positive multiple of 8 (int64 keys)", path,
                          (long long)st.st_size);
        l->rows[t] = (uint64_t)st.st_size / 8;
        if (rc == GEN_OK && l->key_bytes == 4 && l->rows[t] >= HPS_GEN_KEY32_LIMIT)
            rc = gen_fail(0, "%s: too many rows for 32-bit keys", path);
        free(path);
        if (rc != GEN_OK)
            return rc;
    }
    return GEN_OK;
}

static int parse_ini(gen_loaded_t *l, const char *model)
{
    ini_ctx_t c = {.want = model, .key_bytes = 8};
    int line = ini_parse(l->ini, on_ini_kv, &c), rc = GEN_OK;

    if (line != 0)
        rc = line < 0 ? gen_fail(line == -1 ? -ENOENT : -ENOMEM, "cannot read %s", l->ini)
                      : gen_fail(0, "%s:%d: INI syntax error", l->ini, line);
    else if (c.bad_bool)
        rc = gen_fail(0, "%s: [hps] supportlonglong is not a boolean", l->ini);
    else if (c.model == NULL)
        rc = gen_fail(0, "%s: no [model.%s] section", l->ini, model ? model : "*");
    else if (model == NULL && c.models > 1)
        rc = gen_fail(0, "%s holds %d models; choose one with --model", l->ini, c.models);
    else if (c.files == NULL)
        rc = gen_fail(0, "%s: [model.%s] has no sparse_files", l->ini, c.model);
    if (rc == GEN_OK && (l->num_tables = split_files(c.files, l->ini, &l->files)) == 0)
        rc = gen_fail(0, "%s: [model.%s] sparse_files is empty", l->ini, c.model);
    l->model = c.model;
    l->key_bytes = c.key_bytes;
    free(c.files);
    free(c.last);
    return rc;
}

int gen_load_model(const char *dir, const char *model, const char *config, gen_loaded_t *ret)
{
    gen_loaded_t l = {0};
    int rc;

    if (config)
        l.ini = gen_strdupf("%s", config);
    else if (dir && model)
        l.ini = gen_strdupf("%s/%s.ini", dir, model);
    else if (dir)
        l.ini = only_ini(dir);
    else
        return gen_usage("--model-dir DIR or --config PATH is required");
    rc = l.ini ? parse_ini(&l, model) : GEN_FAIL;
    if (rc == GEN_OK && l.num_tables > GEN_TABLES_MAX)
        rc = gen_fail(0, "%s: %zu tables: at most %d", l.ini, l.num_tables, GEN_TABLES_MAX);
    if (rc == GEN_OK)
        rc = load_rows(&l);
    if (rc != GEN_OK) {
        gen_loaded_free(&l);
        return rc;
    }
    *ret = l;
    return GEN_OK;
}

void gen_loaded_free(gen_loaded_t *l)
{
    if (l->files)
        gen_strv_free(l->files, l->num_tables);
    free(l->rows);
    free(l->ini);
    free(l->model);
    memset(l, 0, sizeof *l);
}

/* ---- the requests command --------------------------------------------------- */

/* The options of `hps-gen requests`: X("long-name", field of req_args_t). */
/* clang-format off */
#define REQ_VALUE_OPTS(X)                                                                          \
    X("model-dir", dir)                                                                            \
    X("model", model)                                                                              \
    X("config", config)                                                                            \
    X("batch", batch)                                                                              \
    X("count", count)                                                                              \
    X("alpha", alpha)                                                                              \
    X("seed", seed)                                                                                \
    X("out", out)                                                                                  \
    X("hot-keys", hot_keys)                                                                        \
    X("hot-share", hot_share)
#define REQ_FLAG_OPTS(X)                                                                           \
    X("force", force)                                                                              \
    X("quiet", quiet)
/* clang-format on */

typedef struct req_args {
    REQ_VALUE_OPTS(GEN_ARG_FIELD)
    REQ_FLAG_OPTS(GEN_FLAG_FIELD)
} req_args_t;

enum { GEN_OPT_FIRST_ = 255, REQ_VALUE_OPTS(GEN_OPT_ID) REQ_FLAG_OPTS(GEN_OPT_ID) };

static const struct option req_opts[] = {
    REQ_VALUE_OPTS(GEN_OPT_VALUE) REQ_FLAG_OPTS(GEN_OPT_FLAG){NULL, 0, NULL, 0},
};

static bool set_req_arg(void *args, int id)
{
    req_args_t *a = args;

    switch (id) {
        REQ_VALUE_OPTS(GEN_SET_VALUE)
        REQ_FLAG_OPTS(GEN_SET_FLAG)
    default:
        return false;
    }
    return true;
}

/* The parsed, checked request parameters. */
typedef struct req_plan {
    gen_loaded_t model;
    uint64_t batch, count, seed;
    double alpha, hot_keys, hot_share, share;
    bool auto_alpha;
} req_plan_t;

static int parse_numbers(const req_args_t *a, req_plan_t *p)
{
    p->hot_keys = HPS_GEN_HOT_KEYS;
    p->hot_share = HPS_GEN_HOT_SHARE;
    if (a->batch == NULL || !gen_parse_u64(a->batch, 1, 1u << 24, &p->batch))
        return gen_usage("requests: --batch B is required, 1 <= B <= 2^24");
    if (a->count == NULL || !gen_parse_u64(a->count, 1, UINT64_MAX, &p->count))
        return gen_usage("requests: --count C is required, C >= 1");
    if (a->seed && !gen_parse_u64(a->seed, 0, UINT64_MAX, &p->seed))
        return gen_usage("requests: --seed %s: must be an unsigned integer", a->seed);
    if (a->hot_keys && !gen_parse_double(a->hot_keys, 1e-12, 1.0, &p->hot_keys))
        return gen_usage("requests: --hot-keys must be in (0, 1]");
    if (a->hot_share &&
        !(gen_parse_double(a->hot_share, 1e-12, 1.0, &p->hot_share) && p->hot_share < 1.0))
        return gen_usage("requests: --hot-share must be in (0, 1)");
    p->auto_alpha = a->alpha == NULL || strcmp(a->alpha, "auto") == 0;
    if (!p->auto_alpha && !gen_parse_double(a->alpha, 0.0, 100.0, &p->alpha))
        return gen_usage("requests: --alpha must be 'auto' or a number in [0, 100]");
    if (a->out == NULL)
        return gen_usage("requests: --out FILE is required");
    return GEN_OK;
}

/* Pick alpha (auto: solve for the hot share) and compute the share it gives. */
static int choose_alpha(req_plan_t *p)
{
    const gen_loaded_t *l = &p->model;

    if (p->auto_alpha) {
        int rc = hps_gen_alpha_solve(l->num_tables, l->rows, p->hot_keys, p->hot_share, &p->alpha,
                                     &p->share);
        if (rc != 0)
            return gen_fail(rc, "cannot solve for alpha");
        if (p->share < p->hot_share - 0.005 || p->share > p->hot_share + 0.005)
            fprintf(stderr,
                    "hps-gen: warning: no alpha gives %.2f%% of accesses to %.4g%% of "
                    "the keys of this model; alpha %.4f gives %.2f%%\n",
                    100 * p->hot_share, 100 * p->hot_keys, p->alpha, 100 * p->share);
        return GEN_OK;
    }
    p->share = hps_gen_hot_share(l->num_tables, l->rows, p->alpha, p->hot_keys, NULL);
    return GEN_OK;
}

static int write_requests(const req_plan_t *p, FILE *f, const char *tmp, bool progress)
{
    const gen_loaded_t *l = &p->model;
    size_t nt = l->num_tables, per = nt * p->batch;
    hps_gen_powerlaw_t *pl = gen_xmalloc(nt * sizeof *pl);
    int64_t *req = gen_xmalloc(per * sizeof *req);
    hps_gen_req_header_t h = {
        .num_tables = (uint32_t)nt, .batch = (uint32_t)p->batch, .count = p->count};
    uint64_t st = p->seed;
    double t0 = gen_now(), last = t0;
    int rc = GEN_OK;

    memcpy(h.magic, HPS_GEN_REQ_MAGIC, 8);
    for (size_t t = 0; t < nt; t++)
        hps_gen_powerlaw_init(&pl[t], l->rows[t], p->alpha);
    if (fwrite(&h, sizeof h, 1, f) != 1)
        rc = gen_fail(-errno, "cannot write %s", tmp);
    for (uint64_t c = 0; c < p->count && rc == GEN_OK; c++) {
        for (size_t k = 0; k < per; k++) {
            size_t t = k / p->batch;
            uint64_t r = hps_gen_powerlaw_rank(&pl[t], hps_gen_uniform(&st));
            req[k] = hps_gen_key_w((uint32_t)t, r - 1, l->key_bytes);
        }
        if (fwrite(req, sizeof *req, per, f) != per)
            rc = gen_fail(-errno, "cannot write %s", tmp);
        if (progress && gen_now() - last > 0.25) {
            last = gen_now();
            fprintf(stderr, "\rhps-gen: %5.1f%% of %llu requests   ",
                    100.0 * (double)(c + 1) / (double)p->count, (unsigned long long)p->count);
        }
    }
    if (progress)
        fputs("\n", stderr);
    free(pl);
    free(req);
    return rc;
}

/* Write to FILE.tmp-PID, fsync, rename. */
static int write_file(const req_plan_t *p, const char *out, bool quiet, double *ret_bytes)
{
    char *tmp = gen_strdupf("%s.tmp-%ld", out, (long)getpid());
    FILE *f = fopen(tmp, "wbx");
    double bytes = 24.0 + 8.0 * (double)p->count * (double)p->batch * (double)p->model.num_tables;
    int rc;

    if (f == NULL) {
        rc = gen_fail(-errno, "cannot create %s", tmp);
        free(tmp);
        return rc;
    }
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    rc = write_requests(p, f, tmp, !quiet && isatty(STDERR_FILENO) && bytes >= 64e6);
    if (rc == GEN_OK && (fflush(f) != 0 || fsync(fileno(f)) != 0))
        rc = gen_fail(-errno, "cannot write %s", tmp);
    if (fclose(f) != 0 && rc == GEN_OK)
        rc = gen_fail(-errno, "cannot write %s", tmp);
    if (rc == GEN_OK && rename(tmp, out) != 0)
        rc = gen_fail(-errno, "cannot rename %s to %s", tmp, out);
    if (rc != GEN_OK)
        unlink(tmp);
    free(tmp);
    *ret_bytes = bytes;
    return rc;
}

static int run_requests(const req_args_t *a, req_plan_t *p)
{
    struct stat st;
    double t0, bytes = 0.0, dt;
    int rc;

    if (!a->force && stat(a->out, &st) == 0)
        return gen_fail(0, "%s exists; use --force to replace it", a->out);
    if ((rc = gen_load_model(a->dir, a->model, a->config, &p->model)) != GEN_OK)
        return rc;
    if ((rc = choose_alpha(p)) != GEN_OK)
        return rc;
    t0 = gen_now();
    if ((rc = write_file(p, a->out, a->quiet, &bytes)) != GEN_OK || a->quiet)
        return rc;
    dt = gen_now() - t0;
    printf("hps-gen: requests: %llu x %zu tables x batch %llu = %.0f keys, alpha %.6f "
           "(%s; the hottest %.4g%% of keys get %.2f%% of accesses), %.0f bytes (%.2f MB) in "
           "%.2f s, %.1f MB/s -> %s\n",
           (unsigned long long)p->count, p->model.num_tables, (unsigned long long)p->batch,
           (double)p->count * (double)p->batch * (double)p->model.num_tables, p->alpha,
           p->auto_alpha ? "auto" : "given", 100 * p->hot_keys, 100 * p->share, bytes, bytes / 1e6,
           dt, dt > 0 ? bytes / 1e6 / dt : 0.0, a->out);
    return GEN_OK;
}

int gen_cmd_requests(int argc, char **argv)
{
    req_args_t a = {0};
    req_plan_t p = {0};
    int rc = gen_getopt(argc, argv, "requests", req_opts, set_req_arg, &a);

    if (rc == GEN_OK)
        rc = parse_numbers(&a, &p);
    if (rc == GEN_OK)
        rc = run_requests(&a, &p);
    gen_loaded_free(&p.model);
    return rc;
}
