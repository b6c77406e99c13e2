/*
 * test-conf-schema.c -- one test per configuration key, generated from the
 * schema (conf/hps_conf.def): a new row is tested without a new test.
 *
 * For each key:
 *  - its default equals the one in expected_defaults below, a table written
 *    independently of the schema from HugeCTR's documentation (so a wrong
 *    default in hps_conf.def fails here); required keys must be reported
 *    missing with the section header's line;
 *  - values derived from its type and range: both ends of the range are
 *    accepted and read back exactly, the values just outside are rejected,
 *    as is malformed input, each with the exact message
 *    "t.ini:2: [section] key = value: must be <what is allowed>", where the
 *    description is computed here from the row, not by the library.
 */
#include <math.h>
#include <unistd.h>

#include "conftest.h"

/* ---- The schema, as rows the test can read ---------------------------------- */

enum ttype {
    T_BOOL,
    T_INT,
    T_AUTO,
    T_SIZE,
    T_MARGIN,
    T_REAL,
    T_REAL_GT,
    T_MODE,
    T_ENUM,
    T_STR,
    T_REGEXES,
    T_INTS,
    T_TSTRS,
    T_TINTS,
    T_TREALS,
};

#define BASE_hps            offsetof(hps_conf_t, hps)
#define BASE_volatile_db    offsetof(hps_conf_t, volatile_db)
#define BASE_distributed_db offsetof(hps_conf_t, distributed_db)
#define BASE_persistent_db  offsetof(hps_conf_t, persistent_db)
#define BASE_update_source  offsetof(hps_conf_t, update_source)
#define BASE_worker         offsetof(hps_conf_t, worker)
#define BASE_model          SIZE_MAX

#define LEN_(s, k)        offsetof(hps_conf_##s##_t, k##_len)
#define LEN_BOOL(s, k)    0
#define LEN_INT(s, k)     0
#define LEN_AUTO(s, k)    0
#define LEN_SIZE(s, k)    0
#define LEN_MARGIN(s, k)  0
#define LEN_REAL(s, k)    0
#define LEN_REAL_GT(s, k) 0
#define LEN_MODE(s, k)    0
#define LEN_ENUM(s, k)    0
#define LEN_STR(s, k)     0
#define LEN_REGEXES(s, k) LEN_(s, k)
#define LEN_INTS(s, k)    LEN_(s, k)
#define LEN_TSTRS(s, k)   LEN_(s, k)
#define LEN_TINTS(s, k)   LEN_(s, k)
#define LEN_TREALS(s, k)  LEN_(s, k)

struct row {
    const char *sec, *key;
    enum ttype type;
    const char *extra, *dflt;
    double lo, hi;
    size_t base, off, lenoff;
};

#define ROW(s, k, t, x, d, lo_, hi_, u, doc)                                                       \
    {#s, #k, T_##t, #x, d, lo_, hi_, BASE_##s, offsetof(hps_conf_##s##_t, k), LEN_##t(s, k)},
static const struct row rows[] = {HPS_CONF_KEYS(ROW)};
#define NROWS (sizeof(rows) / sizeof(rows[0]))

struct ename {
    const char *en, *name;
    int value;
    bool canonical;
};
#define EV(e, c, n) {#e, #n, c, true},
#define EA(e, c, n) {#e, #n, c, false},
#define EN(e)       HPS_CONF_ENUM_##e(EV, EA)
static const struct ename enames[] = {HPS_CONF_ENUMS(EN)};

/* ---- Expected defaults (HugeCTR's, per the issue; not from the schema) ------- */

#define REQUIRED "(required)"
#define AUTO     "(auto)"
static const struct {
    const char *key, *value;
} expected_defaults[] = {
    {"hps.supportlonglong", "true"},
    {"hps.log_level", "info"},
    {"hps.heartbeat_interval_ms", "100"},
    {"hps.worker_timeout_ms", "2000"},
    {"hps.load_cpu_share", "0.5"},
    {"hps.model_control_mode", "none"}, /* Triton's --model-control-mode default */
    {"hps.startup_models", ".+"},       /* not a HugeCTR key: every model */
    {"volatile_db.type", "multi_process_hash_map"},
    {"volatile_db.num_partitions", AUTO},
    {"volatile_db.max_batch_size", "65536"},
    {"volatile_db.overflow_margin", "max"},
    {"volatile_db.overflow_policy", "evict_random"},
    {"volatile_db.overflow_resolution_target", "0.8"},
    {"volatile_db.initialize_after_startup", "true"},
    {"volatile_db.initial_cache_rate", "1.0"},
    {"volatile_db.cache_missed_embeddings", "false"},
    {"volatile_db.update_filters", ".+"},
    {"volatile_db.allocation_rate", "256MiB"},
    {"volatile_db.shared_memory_size", "16GiB"},
    {"volatile_db.shared_memory_name", "hps"},
    {"volatile_db.shared_memory_auto_remove", "true"},
    {"volatile_db.shared_memory_mode", "0600"},
    {"volatile_db.num_threads", AUTO},
    {"distributed_db.type", "disabled"},
    {"distributed_db.address", "127.0.0.1:7000"},
    {"distributed_db.user_name", "default"},
    {"distributed_db.password", ""},
    {"distributed_db.num_partitions", "8"},
    {"distributed_db.num_node_connections", "5"},
    {"distributed_db.max_batch_size", "65536"},
    {"distributed_db.lookup_timeout_ms", "20"}, /* not HugeCTR's: under [worker] miss_timeout_ms */
    {"distributed_db.failover_wait_ms", "30000"}, /* not HugeCTR's: Redis's failover time */
    {"distributed_db.overflow_margin", "max"},
    {"distributed_db.overflow_policy", "evict_random"},
    {"distributed_db.overflow_resolution_target", "0.8"},
    {"distributed_db.initial_cache_rate", "1.0"},
    {"distributed_db.cache_missed_embeddings", "false"},
    {"distributed_db.update_filters", ".+"},
    {"distributed_db.enable_tls", "false"},
    {"distributed_db.tls_ca_certificate", "cacertbundle.crt"},
    {"distributed_db.tls_client_certificate", "client_cert.pem"},
    {"distributed_db.tls_client_key", "client_key.pem"},
    {"distributed_db.tls_server_name_identification", "redis.localhost"},
    {"persistent_db.type", "disabled"},
    {"persistent_db.path", "/tmp/rocksdb"},
    {"persistent_db.num_threads", "16"},
    {"persistent_db.read_only", "false"},
    {"persistent_db.max_batch_size", "65536"},
    {"persistent_db.initialize_after_startup", "true"},
    {"persistent_db.update_filters", ".+"},
    {"update_source.type", "none"},
    {"update_source.key_bytes", "8"},
    {"update_source.brokers", "127.0.0.1:9092"},
    {"update_source.metadata_refresh_interval_ms", "30000"},
    {"update_source.receive_buffer_size", "262144"},
    {"update_source.poll_timeout_ms", "500"},
    {"update_source.max_batch_size", "8192"},
    {"update_source.failure_backoff_ms", "50"},
    {"update_source.max_commit_interval", "32"},
    {"update_source.fetch_wait_max_ms", "10"},
    {"worker.http_address", "127.0.0.1"},
    {"worker.http_port", "8000"},
    {"worker.metrics_port", "8002"},
    {"worker.max_body_size", "64MiB"},
    {"worker.max_keys_per_request", "1048576"},
    {"worker.miss_timeout_ms", "50"},
    {"worker.lookup_path", "auto"}, /* not a HugeCTR key: the faster path per request size */
    {"worker.http_threads", "2"},
    {"worker.lookup_threads", "32"},
    {"worker.max_connections", "1024"},
    {"worker.header_timeout_ms", "10000"},
    {"worker.min_body_rate", "1024"},
    /* model.m has two tables (CT_MODEL) */
    {"model.m.sparse_files", REQUIRED},
    {"model.m.embedding_table_names", "sparse_embedding0, sparse_embedding1"},
    {"model.m.embedding_vecsize_per_table", REQUIRED},
    {"model.m.maxnum_catfeature_query_per_table_per_sample", REQUIRED},
    {"model.m.default_value_for_each_table", "0.0, 0.0"},
    {"model.m.version", "1"}, /* not HugeCTR's: Triton's first version */
    {"model.m.deployed_device_list", "0"},
    {"model.m.max_batch_size", "64"},
    {"model.m.gpucache", "true"},
    {"model.m.gpucacheper", "0.2"},
    {"model.m.gpu_cache_placement", "replicate"}, /* not HugeCTR's: its only placement */
    {"model.m.gpu_cache_max_bytes", "0"},         /* not HugeCTR's: no limit */
    {"model.m.hit_rate_threshold", "0.9"},
    {"model.m.cache_refresh_percentage_per_iteration", "0.0"},
    {"model.m.refresh_delay", "0.0"},
    {"model.m.refresh_interval", "0"},
    {"model.m.num_of_worker_buffer_in_pool", "1"},
    {"model.m.num_of_refresher_buffer_in_pool", "1"},
    {"model.m.maxnum_des_feature_per_sample", "26"},
    {"model.m.embedding_cache_type", "dynamic"},
    {"model.m.use_static_table", "false"},
    {"model.m.thread_pool_size", "16"},
    {"model.m.init_ec", "true"},
    {"model.m.dense_file", ""},
    {"model.m.nonfinite_values", "warn"}, /* not a HugeCTR key */
    {"model.m.duplicate_keys", "warn"},   /* not a HugeCTR key */
    {"model.m.storage_type", "fp32"},     /* not a HugeCTR key: rows stored as loaded */
};
#define NDEFAULTS (sizeof(expected_defaults) / sizeof(expected_defaults[0]))

/* Settings a key's boundary values need so that a cross-key rule holds. */
static const struct {
    const char *key, *lines;
} companions[] = {
    {"distributed_db.num_node_connections", "num_partitions = 256\n"},
    {"distributed_db.num_partitions", "num_node_connections = 1\n"},
    {"volatile_db.shared_memory_size", "allocation_rate = 64KiB\n"},
    {"volatile_db.allocation_rate", "shared_memory_size = 1TiB\n"},
    {"hps.heartbeat_interval_ms", "worker_timeout_ms = 600000\n"},
    {"hps.worker_timeout_ms", "heartbeat_interval_ms = 10\n"},
};

/* The model's required keys (T = 2 tables), for tests of other model keys. */
static const struct {
    const char *key, *value;
} model_base[] = {
    {"sparse_files", "/a, /b"},
    {"embedding_vecsize_per_table", "8, 16"},
    {"maxnum_catfeature_query_per_table_per_sample", "1, 2"},
};

static int64_t auto_value(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 16 ? 16 : n;
}

static bool is_model(const struct row *r)
{
    return strcmp(r->sec, "model") == 0;
}

static char *dotted(const struct row *r)
{
    return is_model(r) ? ct_fmt("model.m.%s", r->key) : ct_fmt("%s.%s", r->sec, r->key);
}

/* ---- Config text with one key set (on line 2) -------------------------------- */

static char *config_text(const struct row *r, const char *value)
{
    char *d = dotted(r);
    char *text = ct_fmt("[%s]\n", is_model(r) ? "model.m" : r->sec);

    if (value) {
        char *t = ct_fmt("%s%s = %s\n", text, r->key, value);
        free(text);
        text = t;
    }
    for (size_t i = 0; i < sizeof(companions) / sizeof(companions[0]); i++) {
        if (strcmp(companions[i].key, d) == 0) {
            char *t = ct_fmt("%s%s", text, companions[i].lines);
            free(text);
            text = t;
        }
    }
    for (size_t i = 0; is_model(r) && i < sizeof(model_base) / sizeof(model_base[0]); i++) {
        if (strcmp(model_base[i].key, r->key) == 0)
            continue;
        char *t = ct_fmt("%s%s = %s\n", text, model_base[i].key, model_base[i].value);
        free(text);
        text = t;
    }
    free(d);
    return text;
}

/* ---- What the library must say is allowed (computed from the row) ------------ */

static char *fmt_size(double v)
{
    static const char *const units[] = {"TiB", "GiB", "MiB", "KiB"};
    uint64_t u = (uint64_t)v;

    for (int i = 0; i < 4 && u; i++) {
        uint64_t m = UINT64_C(1) << (40 - 10 * i);
        if (u % m == 0)
            return ct_fmt("%llu%s", (unsigned long long)(u / m), units[i]);
    }
    return ct_fmt("%llu", (unsigned long long)u);
}

static char *int_range(const struct row *r)
{
    if (isinf(r->hi))
        return ct_fmt(" >= %.0f", r->lo);
    return ct_fmt(" in [%.0f, %.0f]", r->lo, r->hi);
}

/* A real bound as messages write it: integral ones plainly, others in the
 * fewest digits that read back as the same double. */
static char *real_text(double v)
{
    if (v == floor(v) && fabs(v) <= 1e15)
        return ct_fmt("%.0f", v);
    for (int prec = 1;; prec++) {
        char *t = ct_fmt("%.*g", prec, v);
        if (strtod(t, NULL) == v || prec == 17)
            return t;
        free(t);
    }
}

/* Just past bound v, away from the range (dir +1 above hi, -1 below lo). */
static char *real_past(double v, int dir)
{
    if (v + dir * 1e-9 != v)
        return ct_fmt("%.9f", v + dir * 1e-9);
    return real_text(nextafter(v, dir * INFINITY));
}

static char *real_range(const struct row *r)
{
    if (isinf(r->lo) && isinf(r->hi))
        return strdup("");
    char *lo = real_text(r->lo);
    if (isinf(r->hi)) {
        char *s = ct_fmt(" >= %s", lo);
        free(lo);
        return s;
    }
    char *hi = real_text(r->hi);
    char *s = ct_fmt(r->type == T_REAL_GT ? " in (%s, %s]" : " in [%s, %s]", lo, hi);
    free(lo);
    free(hi);
    return s;
}

static char *enum_names(const char *en)
{
    char *s = strdup("one of ");

    for (size_t i = 0; i < sizeof(enames) / sizeof(enames[0]); i++) {
        if (strcmp(enames[i].en, en) != 0 || !enames[i].canonical)
            continue;
        char *t = ct_fmt("%s%s%s", s, strcmp(s, "one of ") ? ", " : "", enames[i].name);
        free(s);
        s = t;
    }
    return s;
}

static char *string_phrase(const char *extra, bool plural)
{
    if (strcmp(extra, "path") == 0)
        return strdup(plural ? "non-empty paths" : "a non-empty path");
    if (strcmp(extra, "host") == 0)
        return strdup("a host name or an IP address");
    if (strcmp(extra, "hostports") == 0)
        return strdup(
            "a comma-separated list of host:port (port in [1, 65535]; IPv6 as [addr]:port)");
    if (strcmp(extra, "shm_name") == 0)
        return strdup("a name matching [A-Za-z0-9_.-]{1,200}");
    if (strcmp(extra, "name") == 0)
        return ct_fmt("%s matching [A-Za-z0-9_-]{1,120}", plural ? "names" : "a name");
    return strdup("any text");
}

static char *elem_phrase(const struct row *r, bool plural)
{
    char *range = NULL, *s;

    switch (r->type) {
    case T_BOOL:
        return strdup("true or false (also yes/no, on/off, 1/0)");
    case T_INT:
        if (strcmp(r->sec, "update_source") == 0 && strcmp(r->key, "key_bytes") == 0)
            return strdup("4 or 8"); /* not [4, 8]: 5 to 7 are refused too */
        /* fall through */
    case T_INTS:
    case T_TINTS:
        s = ct_fmt("%s%s", plural ? "integers" : "an integer", range = int_range(r));
        break;
    case T_AUTO:
        s = ct_fmt("auto or an integer%s", range = int_range(r));
        break;
    case T_SIZE:
        if (isinf(r->hi)) {
            range = fmt_size(r->lo);
            s = ct_fmt("a size of at least %s (units B, KiB, MiB, GiB, TiB)", range);
        } else {
            char *lo = fmt_size(r->lo), *hi = fmt_size(r->hi);
            range = ct_fmt("[%s, %s]", lo, hi);
            free(lo);
            free(hi);
            s = ct_fmt("a size in %s (units B, KiB, MiB, GiB, TiB)", range);
        }
        break;
    case T_MARGIN:
        s = ct_fmt("max (unbounded) or an integer >= %.0f", r->lo);
        break;
    case T_REAL:
    case T_REAL_GT:
    case T_TREALS:
        range = real_range(r);
        s = ct_fmt("%s%s",
                   *range ? (plural ? "numbers" : "a number")
                          : (plural ? "finite numbers" : "a finite number"),
                   range);
        break;
    case T_MODE:
        s = ct_fmt("an octal mode in [%04o, %04o]", (unsigned)r->lo, (unsigned)r->hi);
        break;
    case T_ENUM:
        return enum_names(r->extra);
    case T_REGEXES:
        return strdup(plural ? "POSIX extended regular expressions"
                             : "a POSIX extended regular expression");
    default:
        return string_phrase(r->extra, plural);
    }
    free(range);
    return s;
}

static bool is_list(enum ttype t)
{
    return t == T_REGEXES || t == T_INTS || t == T_TSTRS || t == T_TINTS || t == T_TREALS;
}

static bool is_tlist(enum ttype t)
{
    return t == T_TSTRS || t == T_TINTS || t == T_TREALS;
}

static char *must_be(const struct row *r)
{
    char *e = elem_phrase(r, is_list(r->type));
    char *s = is_list(r->type) ? ct_fmt("must be a comma-separated list of %s%s", e,
                                        is_tlist(r->type) ? ", one per table" : "")
                               : ct_fmt("must be %s", e);
    free(e);
    return s;
}

static char *entry_must_be(const struct row *r, int i, const char *v)
{
    char *e = elem_phrase(r, false);
    char *s = ct_fmt("entry %d (%s) must be %s", i, v, e);
    free(e);
    return s;
}

/* Entry i is empty: two commas in a row, or a leading one. */
static char *entry_empty(const struct row *r, int i)
{
    char *m = must_be(r);
    char *s = ct_fmt("entry %d is empty (a comma may end the list, but not start it nor follow "
                     "another comma); %s",
                     i, m);
    free(m);
    return s;
}

static char *entry_must_be_num(const struct row *r, int i, double v)
{
    char buf[64];

    snprintf(buf, sizeof(buf), "%.0f", v);
    return entry_must_be(r, i, buf);
}

/* ---- Test cases ------------------------------------------------------------------- */

struct tcase {
    char *value;
    bool ok;
    double num;  /* ok: expected number (scalar) or entry count (list); NAN: skip */
    char *get;   /* ok: expected hps_conf_get text, or NULL */
    char *tail;  /* !ok: expected message after "key = value: " */
    bool prefix; /* !ok: tail is only a prefix of the message */
};

struct cases {
    struct tcase c[24];
    size_t n;
};

static void add_ok(struct cases *cs, char *value, double num, char *get)
{
    assert_true(cs->n < 24);
    cs->c[cs->n++] = (struct tcase){.value = value, .ok = true, .num = num, .get = get};
}

static void add_bad(struct cases *cs, char *value, char *tail)
{
    assert_true(cs->n < 24);
    cs->c[cs->n++] = (struct tcase){.value = value, .tail = tail};
}

static void int_cases(const struct row *r, struct cases *cs)
{
    add_ok(cs, ct_fmt("%.0f", r->lo), r->lo, ct_fmt("%.0f", r->lo));
    add_ok(cs, ct_fmt("%.0f", r->hi), r->hi, ct_fmt("%.0f", r->hi));
    add_bad(cs, ct_fmt("%.0f", r->lo - 1), must_be(r));
    add_bad(cs, ct_fmt("%.0f", r->hi + 1), must_be(r));
    add_bad(cs, strdup("1.5"), must_be(r));
    add_bad(cs, strdup("0x10"), must_be(r));
    add_bad(cs, strdup("12abc"), must_be(r));
    add_bad(cs, strdup(""), must_be(r));
}

static void size_cases(const struct row *r, struct cases *cs)
{
    add_ok(cs, ct_fmt("%.0f", r->lo), r->lo, fmt_size(r->lo));
    add_ok(cs, ct_fmt("%.0f KiB", r->lo / 1024), r->lo, fmt_size(r->lo));
    add_ok(cs, strdup("1g"), 1073741824.0, strdup("1GiB"));
    if (isinf(r->hi)) {
        add_ok(cs, strdup("2TiB"), 2199023255552.0, strdup("2TiB"));
    } else { /* a bounded size: its bound, and one byte past it */
        add_ok(cs, ct_fmt("%.0f", r->hi), r->hi, fmt_size(r->hi));
        add_bad(cs, ct_fmt("%.0f", r->hi + 1), must_be(r));
    }
    add_ok(cs, strdup("6M"), 6291456.0, strdup("6MiB"));
    add_bad(cs, ct_fmt("%.0f", r->lo - 1), must_be(r));
    add_bad(cs, strdup("1.5GiB"), must_be(r));
    char *m = must_be(r);
    add_bad(cs, strdup("1KB"),
            ct_fmt("%s; \"KB\" is not one of the units (sizes are binary: 1KiB is 1 x 2^10 "
                   "bytes; SI units such as KB = 10^3 bytes are not accepted)",
                   m));
    add_bad(cs, strdup("-1"), must_be(r));
    add_bad(cs, strdup("GiB"), must_be(r));
    if (isinf(r->hi))
        add_bad(cs, strdup("99999999999TiB"),
                ct_fmt("%s; 99999999999TiB is too large: the largest size accepted is "
                       "18446744073709551615 bytes (2^64 - 1, a little under 16777216TiB)",
                       m));
    free(m);
    add_bad(cs, strdup(""), must_be(r));
}

static void real_cases(const struct row *r, struct cases *cs)
{
    if (isinf(r->lo) && isinf(r->hi)) {
        add_ok(cs, strdup("-1e300"), -1e300, strdup("-1e+300"));
        add_ok(cs, strdup("0.25"), 0.25, strdup("0.25"));
    }
    if (!isinf(r->lo) && r->type != T_REAL_GT) {
        add_ok(cs, real_text(r->lo), r->lo, NULL);
        add_bad(cs, real_past(r->lo, -1), must_be(r));
    }
    if (r->type == T_REAL_GT) {
        add_bad(cs, ct_fmt("%g", r->lo), must_be(r));
        add_ok(cs, ct_fmt("%.9f", r->lo + 1e-9), r->lo + 1e-9, NULL);
    }
    if (!isinf(r->hi)) {
        add_ok(cs, real_text(r->hi), r->hi, NULL);
        add_bad(cs, real_past(r->hi, 1), must_be(r));
    }
    add_bad(cs, strdup("nan"), must_be(r));
    add_bad(cs, strdup("inf"), must_be(r));
    add_bad(cs, strdup("1e999"), must_be(r));
    add_bad(cs, strdup("0.5x"), must_be(r));
    add_bad(cs, strdup(""), must_be(r));
}

static void scalar_cases(const struct row *r, struct cases *cs)
{
    switch (r->type) {
    case T_BOOL:
        add_ok(cs, strdup("yes"), 1, strdup("true"));
        add_ok(cs, strdup("Off"), 0, strdup("false"));
        add_ok(cs, strdup("TRUE"), 1, strdup("true"));
        add_ok(cs, strdup("0"), 0, strdup("false"));
        add_bad(cs, strdup("maybe"), must_be(r));
        add_bad(cs, strdup("2"), must_be(r));
        add_bad(cs, strdup(""), must_be(r));
        break;
    case T_AUTO:
        add_ok(cs, strdup("auto"), (double)auto_value(), ct_fmt("%lld", (long long)auto_value()));
        add_bad(cs, strdup("automatic"), must_be(r));
        /* fall through */
    case T_INT:
        int_cases(r, cs);
        break;
    case T_SIZE:
        size_cases(r, cs);
        break;
    case T_MARGIN:
        add_ok(cs, strdup("max"), (double)UINT64_MAX, strdup("max"));
        add_ok(cs, strdup("Unbounded"), (double)UINT64_MAX, strdup("max"));
        add_ok(cs, strdup("1"), 1, strdup("1"));
        add_ok(cs, strdup("1000000"), 1e6, strdup("1000000"));
        add_bad(cs, strdup("0"), must_be(r));
        add_bad(cs, strdup("-1"), must_be(r));
        add_bad(cs, strdup("1.5"), must_be(r));
        add_bad(cs, strdup("inf"), must_be(r));
        char *m = must_be(r);
        add_bad(cs, strdup("18446744073709551616"),
                ct_fmt("%s; 18446744073709551616 is too large: the largest integer accepted is "
                       "18446744073709551615 (2^64 - 1, the same as max)",
                       m));
        free(m);
        break;
    case T_MODE:
        add_ok(cs, ct_fmt("%04o", (unsigned)r->lo), r->lo, ct_fmt("%04o", (unsigned)r->lo));
        add_ok(cs, ct_fmt("%o", (unsigned)r->hi), r->hi, ct_fmt("%04o", (unsigned)r->hi));
        add_bad(cs, ct_fmt("%04o", (unsigned)r->lo - 1), must_be(r));
        add_bad(cs, ct_fmt("%04o", (unsigned)r->hi + 1), must_be(r));
        add_bad(cs, strdup("0x1ff"), must_be(r));
        add_bad(cs, strdup("8"), must_be(r));
        break;
    default:
        real_cases(r, cs);
    }
}

static void enum_cases(const struct row *r, struct cases *cs)
{
    for (size_t i = 0; i < sizeof(enames) / sizeof(enames[0]); i++) {
        if (strcmp(enames[i].en, r->extra) != 0)
            continue;
        const char *canon = NULL;
        for (size_t j = 0; j < sizeof(enames) / sizeof(enames[0]) && !canon; j++)
            if (strcmp(enames[j].en, r->extra) == 0 && enames[j].canonical &&
                enames[j].value == enames[i].value)
                canon = enames[j].name;
        add_ok(cs, strdup(enames[i].name), enames[i].value, strdup(canon));
    }
    add_bad(cs, strdup("bogus"), must_be(r));
    add_bad(cs, strdup(""), must_be(r));
}

/* Samples for the string checks: {check, value, accepted}. */
static const struct {
    const char *check, *value;
    bool ok;
} string_samples[] = {
    {"path", "/some/where", true},
    {"path", "relative.pem", true},
    {"path", "", false},
    {"host", "localhost", true},
    {"host", "10.1.2.3", true},
    {"host", "::1", true},
    {"host", "a-b.example.com", true},
    {"host", "0.0.0.0", true},
    {"host", "", false},
    {"host", "-a.com", false},
    {"host", "a..b", false},
    {"host", "999.1.1.1", false},
    {"host", "a b", false},
    {"hostports", "h:1", true},
    {"hostports", "h.example:65535", true},
    {"hostports", "[::1]:7000", true},
    {"hostports", "10.0.0.1:7000, 10.0.0.2:7001", true},
    {"hostports", "h", false},
    {"hostports", "h:0", false},
    {"hostports", "h:65536", false},
    {"hostports", "::1:7000", false},
    {"hostports", "h:1,,h:2", false},
    {"hostports", ",", false},
    {"hostports", "h:1, ,", false},
    {"hostports", "", false},
    {"shm_name", "a", true},
    {"shm_name", "hps.test-1_x", true},
    {"shm_name", "a/b", false},
    {"shm_name", "", false},
    {"name", "t_0-x", true},
    {"name", "a.b", false},
    {"any", "", true},
    {"any", "x", true},
    {"any", "any text; really", true},
    {"secret", "", true},
    {"secret", "s3cr3t", true},
    {"secret", "pass word", true},
};

static void string_cases(const struct row *r, struct cases *cs)
{
    for (size_t i = 0; i < sizeof(string_samples) / sizeof(string_samples[0]); i++) {
        if (strcmp(string_samples[i].check, r->extra) != 0)
            continue;
        if (string_samples[i].ok)
            add_ok(cs, strdup(string_samples[i].value), NAN, strdup(string_samples[i].value));
        else
            add_bad(cs, strdup(string_samples[i].value), must_be(r));
    }
    if (strcmp(r->extra, "hostports") == 0) {
        /* a trailing comma ends the list (the docs' list syntax); the value
         * is kept without it */
        add_ok(cs, strdup("h:1,"), NAN, strdup("h:1"));
        add_ok(cs, strdup("h:1, [::1]:2 , "), NAN, strdup("h:1, [::1]:2"));
    }
    if (strcmp(r->extra, "shm_name") == 0) {
        char long_name[202];
        memset(long_name, 'a', 201);
        long_name[201] = '\0';
        add_bad(cs, strdup(long_name), must_be(r));
        long_name[200] = '\0';
        add_ok(cs, strdup(long_name), NAN, strdup(long_name));
    }
}

static void list_cases(const struct row *r, struct cases *cs)
{
    switch (r->type) {
    case T_REGEXES:
        add_ok(cs, strdup(".+"), 1, strdup(".+"));
        add_ok(cs, strdup("^a{1,3}$, [,;]x, (a|b)"), 3, strdup("^a{1,3}$, [,;]x, (a|b)"));
        add_bad(cs, strdup("a("),
                strdup("entry 1 (a() is not a valid POSIX extended regular "
                       "expression: "));
        cs->c[cs->n - 1].prefix = true;
        /* a trailing comma ends the list; an empty entry between commas is an error */
        add_ok(cs, strdup(".+, "), 1, strdup(".+"));
        add_ok(cs, strdup("a, b,"), 2, strdup("a, b"));
        add_bad(cs, strdup(".+,, x"), entry_empty(r, 2));
        add_bad(cs, strdup(",x"), entry_empty(r, 1));
        /* Nested duplications glibc's regcomp would expand to minutes of
         * work (the fuzz-conf finding) are refused before compiling; an
         * escaped '+' duplicates nothing. */
        add_bad(cs, strdup("((a{1,999}){1,999})"),
                strdup("entry 1 (((a{1,999}){1,999})) repeats too much: its '*', '+', '?' and "
                       "'{m,n}' multiply to more than 256 (each counts 2, {m,n} n + 1), which "
                       "compiles slowly; simplify it"));
        add_bad(cs, strdup("x, a+++++++++++++++++"),
                strdup("entry 2 (a+++++++++++++++++) repeats too much: its '*', '+', '?' and "
                       "'{m,n}' multiply to more than 256 (each counts 2, {m,n} n + 1), which "
                       "compiles slowly; simplify it"));
        /* 12 repetitions, '*' among them: 20 s and more before the limit */
        add_bad(cs, strdup("x(5*++++++)*+++++"),
                strdup("entry 1 (x(5*++++++)*+++++) repeats too much: its '*', '+', '?' and "
                       "'{m,n}' multiply to more than 256 (each counts 2, {m,n} n + 1), which "
                       "compiles slowly; simplify it"));
        /* 8 repetitions and one of 255 pass */
        add_ok(cs, strdup("^hps_(a|b)*.+x?y*z+_v[0-9]+.*$, a{1,254}"), 2,
               strdup("^hps_(a|b)*.+x?y*z+_v[0-9]+.*$, a{1,254}"));
        add_ok(cs, strdup("a\\+\\+\\+\\+\\+\\+\\+\\+\\+\\+\\+\\+\\+\\+\\+\\+\\+"), 1,
               strdup("a\\+\\+\\+\\+\\+\\+\\+\\+\\+\\+\\+\\+\\+\\+\\+\\+\\+"));
        break;
    case T_INTS:
        add_ok(cs, ct_fmt("%.0f", r->lo), 1, ct_fmt("%.0f", r->lo));
        add_ok(cs, ct_fmt("%.0f,%.0f", r->lo, r->hi), 2, ct_fmt("%.0f, %.0f", r->lo, r->hi));
        add_bad(cs, ct_fmt("%.0f", r->lo - 1), entry_must_be_num(r, 1, r->lo - 1));
        add_bad(cs, ct_fmt("%.0f, x", r->lo), entry_must_be(r, 2, "x"));
        break;
    case T_TINTS:
        add_ok(cs, ct_fmt("%.0f, %.0f", r->lo, r->hi), 2, ct_fmt("%.0f, %.0f", r->lo, r->hi));
        add_bad(cs, ct_fmt("%.0f", r->lo),
                strdup("has 1 entry, but sparse_files has 2 (one per "
                       "table)"));
        add_bad(cs, ct_fmt("%.0f, %.0f", r->lo, r->hi + 1), entry_must_be_num(r, 2, r->hi + 1));
        add_bad(cs, ct_fmt("%.0f, %.0f", r->lo - 1, r->lo), entry_must_be_num(r, 1, r->lo - 1));
        add_bad(cs, ct_fmt("%.0f, 1.5", r->lo), entry_must_be(r, 2, "1.5"));
        add_ok(cs, ct_fmt("%.0f, %.0f,", r->lo, r->hi), 2, ct_fmt("%.0f, %.0f", r->lo, r->hi));
        add_bad(cs, ct_fmt("%.0f, ", r->lo),
                strdup("has 1 entry, but sparse_files has 2 (one per table)"));
        add_bad(cs, ct_fmt("%.0f,, %.0f", r->lo, r->hi), entry_empty(r, 2));
        break;
    case T_TREALS:
        add_ok(cs, strdup("-1.5, 2"), 2, strdup("-1.5, 2.0"));
        add_bad(cs, strdup("0"), strdup("has 1 entry, but sparse_files has 2 (one per table)"));
        add_bad(cs, strdup("0, nan"), entry_must_be(r, 2, "nan"));
        break;
    default: /* T_TSTRS */
        if (strcmp(r->extra, "path") == 0) {
            add_ok(cs, strdup("/x,/y"), 2, strdup("/x, /y"));
            add_ok(cs, strdup("/x, /y,"), 2, strdup("/x, /y"));
            add_bad(cs, strdup("/x,, /y"), entry_empty(r, 2));
        } else {
            add_ok(cs, strdup("t0, t_1-x"), 2, strdup("t0, t_1-x"));
            add_bad(cs, strdup("t0"),
                    strdup("has 1 entry, but sparse_files has 2 (one per "
                           "table)"));
            add_bad(cs, strdup("t0, a.b"), entry_must_be(r, 2, "a.b"));
        }
    }
    add_bad(cs, strdup(""), must_be(r));
}

static void make_cases(const struct row *r, struct cases *cs)
{
    if (r->type == T_ENUM)
        enum_cases(r, cs);
    else if (r->type == T_STR)
        string_cases(r, cs);
    else if (is_list(r->type))
        list_cases(r, cs);
    else
        scalar_cases(r, cs);
}

/* ---- Checks ----------------------------------------------------------------------- */

static const void *section_of(const hps_conf_t *c, const struct row *r)
{
    return r->base == SIZE_MAX ? (const void *)&c->models[0] : (const char *)c + r->base;
}

static double field_number(const hps_conf_t *c, const struct row *r)
{
    const char *f = (const char *)section_of(c, r) + r->off;

    if (is_list(r->type))
        return (double)*(const size_t *)((const char *)section_of(c, r) + r->lenoff);
    switch (r->type) {
    case T_BOOL:
        return *(const bool *)f;
    case T_INT:
    case T_AUTO:
        return (double)*(const int64_t *)f;
    case T_SIZE:
    case T_MARGIN:
        return (double)*(const uint64_t *)f;
    case T_MODE:
        return *(const uint32_t *)f;
    case T_ENUM:
        return *(const int *)f;
    case T_REAL:
    case T_REAL_GT:
        return *(const double *)f;
    default:
        return NAN;
    }
}

static void check_ok(const struct row *r, const struct tcase *tc)
{
    char *text = config_text(r, tc->value), *key = dotted(r), buf[4096];
    hps_conf_t *conf = ct_load(text);
    bool set = false;

    if (!isnan(tc->num) && field_number(conf, r) != tc->num)
        fail_msg("%s = %s: field is %.17g, expected %.17g", key, tc->value, field_number(conf, r),
                 tc->num);
    if (tc->get && strcmp(ct_get(conf, key, buf, sizeof(buf)), tc->get) != 0)
        fail_msg("%s = %s: get says \"%s\", expected \"%s\"", key, tc->value, buf, tc->get);
    assert_int_equal(hps_conf_is_set(conf, key, &set), 0);
    assert_true(set);
    hps_conf_free(conf);
    free(text);
    free(key);
}

static void check_bad(const struct row *r, const struct tcase *tc)
{
    char *text = config_text(r, tc->value), err[1024];
    size_t vlen = strlen(tc->value); /* inih trims the value */
    while (vlen && tc->value[vlen - 1] == ' ')
        vlen--;
    char *expected = ct_fmt("t.ini:2: [%s] %s = %.*s: %s", is_model(r) ? "model.m" : r->sec, r->key,
                            (int)vlen, tc->value, tc->tail);
    hps_conf_t *conf = NULL;
    hps_err_t rc = hps_conf_load_string(text, "t.ini", &conf, err, sizeof(err));

    if (rc != HPS_ECONFIG)
        fail_msg("%s.%s = \"%s\" accepted (rc %d)", r->sec, r->key, tc->value, rc);
    if (tc->prefix ? strncmp(err, expected, strlen(expected)) != 0 : strcmp(err, expected) != 0)
        fail_msg("message differs\n  got:      %s\n  expected: %s%s", err, expected,
                 tc->prefix ? "..." : "");
    free(expected);
    free(text);
}

static const char *expected_default(const struct row *r)
{
    char *key = dotted(r);

    for (size_t i = 0; i < NDEFAULTS; i++) {
        if (strcmp(expected_defaults[i].key, key) == 0) {
            free(key);
            return expected_defaults[i].value;
        }
    }
    fail_msg("%s is not in expected_defaults (add its HugeCTR default there)", key);
    return NULL;
}

static void check_default(const struct row *r)
{
    const char *want = expected_default(r);
    char *text = config_text(r, NULL), *key = dotted(r), buf[4096];

    if (strcmp(want, REQUIRED) == 0) {
        assert_null(r->dflt);
        char *msg = ct_fmt("t.ini:1: [model.m] %s: missing required key", r->key);
        ct_load_fails(text, msg);
        free(msg);
    } else {
        hps_conf_t *conf = ct_load(text);
        bool set = true;
        char *w = strcmp(want, AUTO) == 0 ? ct_fmt("%lld", (long long)auto_value()) : strdup(want);
        if (strcmp(ct_get(conf, key, buf, sizeof(buf)), w) != 0)
            fail_msg("default of %s is \"%s\", expected \"%s\"", key, buf, w);
        assert_int_equal(hps_conf_is_set(conf, key, &set), 0);
        assert_false(set);
        free(w);
        hps_conf_free(conf);
    }
    free(text);
    free(key);
}

static void test_key(void **state)
{
    const struct row *r = *state;
    struct cases cs = {.n = 0};

    check_default(r);
    make_cases(r, &cs);
    assert_true(cs.n >= 3);
    for (size_t i = 0; i < cs.n; i++) {
        if (cs.c[i].ok)
            check_ok(r, &cs.c[i]);
        else
            check_bad(r, &cs.c[i]);
        free(cs.c[i].value);
        free(cs.c[i].get);
        free(cs.c[i].tail);
    }
}

/* Every schema key has an expected default, and every expected default a key. */
static void test_defaults_table_matches_schema(void **state)
{
    (void)state;
    assert_int_equal(NDEFAULTS, NROWS);
    for (size_t i = 0; i < NROWS; i++)
        (void)expected_default(&rows[i]);
}

int main(void)
{
    struct CMUnitTest *tests = calloc(NROWS + 1, sizeof(*tests));
    char **names = calloc(NROWS, sizeof(*names));

    assert_non_null(tests);
    assert_non_null(names);
    tests[0] = (struct CMUnitTest){"defaults_table_matches_schema",
                                   test_defaults_table_matches_schema, NULL, NULL, NULL};
    for (size_t i = 0; i < NROWS; i++) {
        names[i] = ct_fmt("%s.%s", rows[i].sec, rows[i].key);
        tests[i + 1] = (struct CMUnitTest){names[i], test_key, NULL, NULL, (void *)&rows[i]};
    }
    int rc = _cmocka_run_group_tests("conf-schema", tests, NROWS + 1, NULL, NULL);
    for (size_t i = 0; i < NROWS; i++)
        free(names[i]);
    free(names);
    free(tests);
    return rc;
}
