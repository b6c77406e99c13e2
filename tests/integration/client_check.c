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
 * switch [--threads N]: N threads (8) look up volatile-DB keys of model 0
 *   back to back, unchecked, until killed; "VERSION <v>" each time the
 *   oldest model version any thread was answered from (hps_client_last_
 *   version) changes: the threads together must not keep the client from
 *   switching to a reloaded segment.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client_check.h"

/* ---- TAP ------------------------------------------------------------------ */

static int tap_n, tap_failed;

bool cc_ok(bool cond, const char *fmt, ...)
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

void cc_diag(const char *fmt, ...)
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

/* table_t, model_t and kind_t are in client_check.h. */
model_t cc_models[MAX_MODELS];
size_t cc_num_models;

typedef struct rows_opt {
    char model[128];
    uint64_t rows[MAX_TABLES];
    uint32_t n;
} rows_opt_t;

static rows_opt_t rows_opts[MAX_MODELS];
static size_t num_rows_opts;
static double opt_rate = 1.0;
static uint64_t opt_seed = 0;
static int opt_threads = 8; /* switch */

/* Key of file row j of table t of model m. */
int64_t cc_file_key(const model_t *m, uint32_t t, uint64_t j)
{
    const table_t *tb = &m->t[t];
    return hps_gen_key_w(t, hps_gen_shuffle_at(&tb->sh, j), tb->key_bytes);
}

int64_t cc_vdb_key(const model_t *m, uint32_t t, uint64_t *rng)
{
    return cc_file_key(m, t, hps_gen_splitmix64(rng) % m->t[t].n_vdb);
}

bool cc_has_pdb(const model_t *m, uint32_t t)
{
    return m->t[t].rows > m->t[t].n_vdb;
}

int64_t cc_pdb_key(const model_t *m, uint32_t t, uint64_t *rng)
{
    const table_t *tb = &m->t[t];
    return cc_file_key(m, t, tb->n_vdb + hps_gen_splitmix64(rng) % (tb->rows - tb->n_vdb));
}

/* A key in no layer: a generated key past the table's rows, a negative key,
 * or for 32-bit models a key >= 2^32 (a table key + 2^32: must not alias). */
int64_t cc_unknown_key(const model_t *m, uint32_t t, uint64_t *rng)
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
            return ((int64_t)1 << 32) + cc_file_key(m, t, (r >> 8) % tb->rows);
        return hps_gen_key_w(t, tb->rows + 100000 + (r >> 8) % 100000, tb->key_bytes);
    }
}

void cc_expect_row(const model_t *m, uint32_t t, int64_t key, kind_t k, float *out)
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
const char *cc_mismatch(const float *got, const float *want, size_t n, uint32_t dim,
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

const char *cc_err_text(hps_err_t rc)
{
    static __thread char buf[512];
    snprintf(buf, sizeof(buf), "%d (%s)", rc, rc ? hps_client_last_error() : "ok");
    return buf;
}

/* ---- Setup ------------------------------------------------------------------ */

static void usage(void)
{
    fprintf(stderr, "usage: client-check CONFIG exact|early|loop|switch "
                    "[--rows MODEL=N0,N1,...]... [--rate R] [--seed S] [--threads N]\n");
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
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            opt_threads = atoi(argv[++i]);
        } else {
            usage();
        }
    }
}

/* Fill cc_models[] from the client; with checks when tap is true. */
static bool describe(hps_client_t *c, bool tap)
{
    cc_num_models = hps_client_num_models(c);
    if (tap)
        cc_ok(cc_num_models >= 1 && cc_num_models <= MAX_MODELS, "hps_client_num_models: %zu",
              cc_num_models);
    if (cc_num_models < 1 || cc_num_models > MAX_MODELS)
        return false;
    bool good = true;
    for (size_t mi = 0; mi < cc_num_models; mi++) {
        model_t *m = &cc_models[mi];
        hps_client_model_info_t info;
        hps_err_t rc = hps_client_model_info(c, mi, &info);
        if (rc || info.num_tables < 1 || info.num_tables > MAX_TABLES) {
            cc_ok(false, "hps_client_model_info(%zu): %s", mi, cc_err_text(rc));
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
            cc_ok(frc == 0 && found == mi, "model %zu '%s': hps_client_model_find gives %zu (%s)",
                  mi, m->name, found, cc_err_text(frc));
            cc_ok((info.key_bytes == 8 || info.key_bytes == 4) && !info.gpu_cache &&
                      info.max_batch_size > 0,
                  "model '%s': %u tables, key_bytes %u, max_batch_size %u, no GPU cache on a "
                  "host-only client",
                  m->name, info.num_tables, info.key_bytes, info.max_batch_size);
            if (ro)
                cc_ok(ro->n == info.num_tables, "model '%s': --rows gives %u tables, the client %u",
                      m->name, ro->n, info.num_tables);
        }
        for (uint32_t t = 0; t < m->num_tables; t++) {
            table_t *tb = &m->t[t];
            hps_client_table_info_t ti;
            rc = hps_client_table_info(c, mi, t, &ti);
            if (rc || ti.dim == 0) {
                cc_ok(false, "hps_client_table_info(%zu, %u): %s", mi, t, cc_err_text(rc));
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
                cc_ok(false, "model '%s' table %u: no rows", m->name, t);
                return false;
            }
            hps_gen_shuffle_init(&tb->sh, opt_seed, t, tb->rows);
            if (tap) {
                uint32_t ft = UINT32_MAX;
                hps_err_t frc = hps_client_table_find(c, mi, ti.name, &ft);
                cc_ok(frc == 0 && ft == t, "model '%s' table '%s': hps_client_table_find gives %u",
                      m->name, ti.name, ft);
                good &= cc_ok(ti.key_bytes == info.key_bytes && ti.max_keys_per_sample >= 1,
                              "model '%s' table %u '%s': dim %u, key_bytes %u, default %g, "
                              "max_keys_per_sample %u",
                              m->name, t, ti.name, ti.dim, ti.key_bytes, (double)ti.default_value,
                              ti.max_keys_per_sample);
                good &=
                    cc_ok(ti.rows > 0 && ti.rows == tb->n_vdb,
                          "model '%s' table %u: %llu rows in the volatile DB (want %llu of %llu)",
                          m->name, t, (unsigned long long)ti.rows, (unsigned long long)tb->n_vdb,
                          (unsigned long long)tb->rows);
            }
        }
    }
    return good;
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
        size_t mi = hps_gen_splitmix64(&rng) % cc_num_models;
        const model_t *m = &cc_models[mi];
        const char *e;
        if (w->calls % 3 == 2) {
            size_t nk = 0;
            for (uint32_t t = 0; t < m->num_tables; t++) {
                size_t n = hps_gen_splitmix64(&rng) % 24;
                cc_make_batch(m, t, n, n / 4, n % 3, &rng, &bs[t]);
                nk += bs[t].n;
            }
            e = cc_check_multi_lookup(w->c, mi, bs, m->num_tables, HPS_KEY_INT64);
            w->keys[mi] += nk;
            w->calls_m[mi] += nk > 0; /* a call of 0 keys is not counted */
        } else {
            uint32_t t = (uint32_t)(hps_gen_splitmix64(&rng) % m->num_tables);
            size_t n = 1 + hps_gen_splitmix64(&rng) % 64;
            cc_make_batch(m, t, n, n / 4, n % 3, &rng, &b);
            hps_key_type_t kt = m->key_bytes == 4 && w->calls % 2 ? HPS_KEY_INT32 : HPS_KEY_INT64;
            if (kt == HPS_KEY_INT32) /* unknown keys must fit uint32: no aliasing */
                for (size_t i = 0; i < b.n; i++)
                    if (b.kind[i] == K_UNK && (b.keys[i] < 0 || b.keys[i] >= UINT32_MAX))
                        b.keys[i] = hps_gen_key32(t, m->t[t].rows + i); /* past the rows */
            e = cc_check_table_lookup(w->c, mi, &b, kt);
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
    for (size_t mi = 0; mi < cc_num_models; mi++)
        b0[mi] = cc_counters(c, mi);
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
        for (size_t mi = 0; mi < cc_num_models; mi++)
            keys[mi] += w[i].keys[mi], calls_m[mi] += w[i].calls_m[mi];
        if (w[i].bad)
            cc_diag("thread %d: %llu wrong of %llu; first: %s", i, (unsigned long long)w[i].bad,
                    (unsigned long long)w[i].calls, w[i].first);
    }
    cc_ok(bad == 0 && calls >= NT, "%d threads for 1 s: %llu lookups, all exact", NT,
          (unsigned long long)calls);
    for (size_t mi = 0; mi < cc_num_models; mi++) {
        b1 = cc_counters(c, mi);
        hps_client_counters_t bb0 = b0[mi];
#define DD(field) ((unsigned long long)(b1.field - bb0.field))
        cc_ok(DD(lookup_keys) == keys[mi] && DD(lookup_calls) == calls_m[mi] &&
                  DD(vdb_hits) + DD(lower_hits) + DD(default_keys) == keys[mi],
              "model %s after the threads: +%llu keys (want %llu) = %llu vdb + %llu lower + %llu "
              "defaults, +%llu calls (want %llu)",
              cc_models[mi].name, DD(lookup_keys), (unsigned long long)keys[mi], DD(vdb_hits),
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
    if (!cc_ok(rc == 0 && c, "hps_client_open(config, -1): %d %s", rc, err))
        return tap_done();
    rc = hps_client_wait_ready(c, 30000);
    cc_ok(rc == 0, "hps_client_wait_ready: %s", cc_err_text(rc));
    cc_ok(hps_client_ready(c), "hps_client_ready");
    cc_ok(hps_client_coordinator_alive(c), "hps_client_coordinator_alive");
    cc_ok(hps_client_device(c) == -1, "hps_client_device is -1 (host-only)");
    if (describe(c, true)) {
        uint64_t rng = 42;
        for (size_t mi = 0; mi < cc_num_models; mi++) {
            for (uint32_t t = 0; t < cc_models[mi].num_tables; t++)
                cc_check_table(c, mi, t, &rng);
            cc_check_multi(c, mi, &rng);
        }
        cc_check_errors(c, config);
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
    if (!cc_ok(rc == 0 && c, "hps_client_open before the coordinator runs: %d %s", rc, err))
        return tap_done();
    cc_ok(!hps_client_ready(c), "not ready before the coordinator runs");
    rc = hps_client_wait_ready(c, 200);
    cc_ok(rc == HPS_ETIMEDOUT, "hps_client_wait_ready(200 ms) -> HPS_ETIMEDOUT (got %d)", rc);
    cc_diag("waiting");
    rc = hps_client_wait_ready(c, 60000);
    cc_ok(rc == 0 && hps_client_ready(c), "ready once the coordinator is up (%s)", cc_err_text(rc));
    if (describe(c, false)) {
        uint64_t rng = 7;
        batch_t b;
        cc_make_batch(&cc_models[0], 0, 50, 10, 5, &rng, &b);
        const char *e = cc_check_table_lookup(c, 0, &b, HPS_KEY_INT64);
        cc_ok(!e, "a lookup after attaching late is exact");
        if (e)
            cc_diag("%s", e);
    }
    hps_client_close(c);
    return tap_done();
}

/* A host-only client of config, ready and described (cc_models), or NULL
 * with "OPEN FAILED ..." / "NOT READY ..." printed (loop, switch). */
static hps_client_t *open_ready(const char *config)
{
    hps_client_t *c = NULL;
    char err[512] = "";
    if (hps_client_open(config, HPS_HOST, &c, err, sizeof(err)) < 0) {
        printf("OPEN FAILED %s\n", err);
        return NULL;
    }
    if (hps_client_wait_ready(c, 30000) < 0 || !describe(c, false)) {
        printf("NOT READY %s\n", hps_client_last_error());
        return NULL;
    }
    return c;
}

static int cmd_loop(const char *config)
{
    hps_client_t *c = open_ready(config);
    if (!c)
        return 2;
    printf("READY pid %d\n", (int)getpid());
    fflush(stdout);
    /* A fixed set of batches (mostly volatile-DB keys, a few that go to
     * the coordinator, a few unknown), cycled. */
    enum { NB = 16 };
    static batch_t bs[NB];
    size_t bm[NB];
    uint64_t rng = 5;
    for (int i = 0; i < NB; i++) {
        bm[i] = (size_t)i % cc_num_models;
        const model_t *m = &cc_models[bm[i]];
        cc_make_batch(m, (uint32_t)(i / cc_num_models) % m->num_tables, 24, 2, 2, &rng, &bs[i]);
    }
    for (unsigned long long n = 1;; n++) {
        int i = (int)(n % NB);
        const char *e = cc_check_table_lookup(c, bm[i], &bs[i], HPS_KEY_INT64);
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

/* ---- switch ------------------------------------------------------------------ */

enum { SWITCH_MAX_THREADS = 64, SWITCH_KEYS = 64 };

typedef struct {
    hps_client_t *c;
    int64_t keys[SWITCH_KEYS];
    float *out;
    _Atomic uint32_t version; /* the last one this thread was answered from */
} switch_thread_t;

/* SIGTERM: close the client, exit 0.  Read by the lookup threads too, so an
 * atomic (lock-free: async-signal-safe), not a volatile sig_atomic_t, which
 * is safe only for the thread the handler interrupts (ThreadSanitizer). */
static atomic_int switch_stop;

static void switch_on_term(int sig)
{
    (void)sig;
    atomic_store(&switch_stop, 1);
}

static void *switch_thread(void *arg)
{
    switch_thread_t *st = arg;
    while (!atomic_load(&switch_stop))
        if (hps_client_lookup_table(st->c, 0, 0, SWITCH_KEYS, st->keys, HPS_KEY_INT64, HPS_HOST,
                                    st->out, HPS_HOST, NULL) == 0)
            atomic_store(&st->version, hps_client_last_version());
    return NULL;
}

static int cmd_switch(const char *config)
{
    static switch_thread_t sts[SWITCH_MAX_THREADS];
    pthread_t ths[SWITCH_MAX_THREADS];
    signal(SIGTERM, switch_on_term);
    if (opt_threads < 1 || opt_threads > SWITCH_MAX_THREADS)
        usage();
    hps_client_t *c = open_ready(config);
    if (!c)
        return 2;
    const model_t *m = &cc_models[0];
    uint64_t rng = 11;
    for (int i = 0; i < opt_threads; i++) {
        sts[i].c = c;
        for (int k = 0; k < SWITCH_KEYS; k++)
            sts[i].keys[k] = cc_vdb_key(m, 0, &rng);
        sts[i].out = malloc((size_t)SWITCH_KEYS * m->t[0].dim * sizeof(float));
        if (!sts[i].out || pthread_create(&ths[i], NULL, switch_thread, &sts[i]) != 0) {
            printf("THREAD FAILED\n");
            return 2;
        }
    }
    printf("READY pid %d, %d threads\n", (int)getpid(), opt_threads);
    uint32_t said = 0;
    const struct timespec tick = {0, 10000000}; /* 10 ms */
    while (!atomic_load(&switch_stop)) {
        nanosleep(&tick, NULL);
        uint32_t oldest = UINT32_MAX;
        for (int i = 0; i < opt_threads; i++) {
            uint32_t v = atomic_load(&sts[i].version);
            oldest = v < oldest ? v : oldest;
        }
        if (oldest && oldest != said) {
            printf("VERSION %u\n", oldest);
            said = oldest;
        }
    }
    for (int i = 0; i < opt_threads; i++) {
        pthread_join(ths[i], NULL);
        free(sts[i].out);
    }
    hps_client_close(c);
    printf("CLOSED\n");
    return 0;
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
    if (!strcmp(argv[2], "switch"))
        return cmd_switch(argv[1]);
    usage();
    return 2;
}
