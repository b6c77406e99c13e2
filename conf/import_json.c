/*
 * import_json.c -- the ps.json side of hps_conf_import(): HugeCTR's keys,
 * one table per JSON object, mapped to INI values (import.c stores and
 * checks them).
 *
 * Each key of a table is mapped to the INI key of the same name, listed as
 * having no meaning here (with the reason), obsolete, or handled by code
 * (database types, addresses, names).  Any other key is unknown: listed,
 * with the nearest known name or, for one of HugeCTR's Python keyword
 * arguments, the JSON name it stands for.  JSON is read by json-c in strict
 * mode, after `//` and block comments are blanked out (the HugeCTR
 * documentation's examples have them).
 */
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/internal.h"

/** Deepest JSON nesting read (a ps.json has 3 levels). */
#define JSON_MAX_DEPTH 64

/* ---- JSON values --------------------------------------------------------------- */

/* The JSON text of v, for messages (at most ~200 bytes). */
static void shown_json(json_object *v, char *buf, size_t len)
{
    const char *s =
        json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    size_t n = strlen(s);

    if (n < len)
        snprintf(buf, len, "%s", s);
    else
        snprintf(buf, len, "%.*s...", (int)(len - 4), s);
}

enum elem { E_BOOL, E_INT, E_REAL, E_STR, E_REGEX };

static enum elem elem_of(const struct hps__key *k)
{
    switch (k->type) {
    case HPS__T_BOOL:
        return E_BOOL;
    case HPS__T_INT:
    case HPS__T_AUTO:
    case HPS__T_SIZE:
    case HPS__T_MARGIN:
    case HPS__T_MODE:
    case HPS__T_INTS:
    case HPS__T_TINTS:
        return E_INT;
    case HPS__T_REAL:
    case HPS__T_REAL_GT:
    case HPS__T_TREALS:
        return E_REAL;
    case HPS__T_REGEXES:
        return E_REGEX;
    default:
        return E_STR;
    }
}

/* Append one JSON scalar as INI text; NULL, or why it cannot be. */
static const char *json_scalar(json_object *v, enum elem e, bool list, struct hps__buf *out)
{
    json_type t = json_object_get_type(v);

    switch (e) {
    case E_BOOL:
        if (t != json_type_boolean)
            return "must be true or false (a JSON boolean)";
        hps__buf_puts(out, json_object_get_boolean(v) ? "true" : "false");
        return NULL;
    case E_INT:
        if (t == json_type_double) {
            double d = json_object_get_double(v);
            if (d != floor(d) || fabs(d) >= 9.2e18)
                return "must be an integer";
            hps__buf_printf(out, "%.0f", d);
            return NULL;
        }
        if (t != json_type_int)
            return "must be an integer (a JSON number)";
        hps__buf_puts(out, json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
        return NULL;
    case E_REAL:
        if (t != json_type_int && t != json_type_double)
            return "must be a JSON number";
        hps__buf_puts(out, json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
        return NULL;
    default: {
        if (t != json_type_string)
            return "must be a JSON string";
        const char *s = json_object_get_string(v);
        if ((size_t)json_object_get_string_len(v) != strlen(s))
            return "contains a NUL character";
        const char *why = hps__ini_unsafe(s, list && e == E_STR);
        if (why)
            return why;
        if (e == E_REGEX) { /* a comma outside (), [], {} would split the entry */
            size_t n = 0;
            bool no_mem = false;
            char **parts = hps__list_split(s, true, &n, &no_mem);
            bool one = n == 1 && strcmp(parts[0], s) == 0;
            hps__list_free(parts, n);
            if (!one && *s)
                return "it contains a comma outside (), [] or {}, the INI list separator";
        }
        hps__buf_puts(out, s);
        return NULL;
    }
    }
}

/* Map JSON value v (at `path`) to `key` of section sec (of model m). */
static hps_err_t map_json(struct hps__imp *im, hps__sec_t sec, struct hps__imodel *m,
                          const char *key, json_object *v, const char *path)
{
    const struct hps__key *k = &hps__keys[hps__key_find(sec, key)];
    enum elem e = elem_of(k);
    struct hps__buf raw = {0}, msg = {0};
    char src[512], shown[224];
    const char *why = NULL;

    snprintf(src, sizeof(src), "%s: %s", im->jname, path);
    shown_json(v, shown, sizeof(shown));
    if (k->check == HPS__CHECK_secret) /* a password: messages never show it */
        snprintf(shown, sizeof(shown), "%s", HPS__MASK);
    hps__buf_add(&raw, "", 0);
    if (!hps__is_list(k->type)) {
        why = json_scalar(v, e, false, &raw);
    } else if (!json_object_is_type(v, json_type_array)) {
        why = "must be a JSON array";
    } else {
        for (size_t i = 0; i < json_object_array_length(v) && !why; i++) {
            json_object *x = json_object_array_get_idx(v, i);
            hps__buf_puts(&raw, i ? ", " : "");
            size_t at = raw.len;
            why = json_scalar(x, e, true, &raw);
            /* each entry is checked here, so a bad one is named by its JSON
             * path (x[0], from 0), not as the INI's "entry 1" */
            if (!why && !raw.oom && hps__value_check_entry(k, raw.p + at, &msg) == HPS_ECONFIG)
                why = hps__buf_str(&msg);
            if (why) {
                char xs[224];
                shown_json(x, xs, sizeof(xs));
                if (k->check == HPS__CHECK_secret)
                    snprintf(xs, sizeof(xs), "%s", HPS__MASK);
                hps__imp_fail(im, "%s[%zu] = %s: %s", src, i, xs, why);
            }
        }
    }
    hps_err_t rc = im->rc;
    if (!rc && why)
        rc = hps__imp_fail(im, "%s = %s: %s", src, shown, why);
    else if (!rc)
        rc = raw.oom ? hps__imp_oom(im) : hps__imp_put(im, sec, m, key, raw.p, src, shown);
    hps__buf_fini(&raw);
    hps__buf_fini(&msg); /* after its last use: why may point into it */
    return rc;
}

/* The string value of v, or NULL after reporting that it is not one. */
static const char *json_str(struct hps__imp *im, json_object *v, const char *path)
{
    char shown[224];

    if (json_object_is_type(v, json_type_string) &&
        (size_t)json_object_get_string_len(v) == strlen(json_object_get_string(v)))
        return json_object_get_string(v);
    shown_json(v, shown, sizeof(shown));
    hps__imp_fail(im, "%s: %s = %s: must be a JSON string", im->jname, path, shown);
    return NULL;
}

/* ---- Key tables ------------------------------------------------------------------ */

enum jact {
    J_MAP,      /* to the INI key of the same name */
    J_SKIP,     /* no meaning here: listed with `why` */
    J_OBSOLETE, /* an old HugeCTR name: listed with `why` */
    J_CODE,     /* handled by the caller */
};

/* Volatile DB keys that apply to one kind of database only. */
#define ONLY_HASH  1u
#define ONLY_REDIS 2u

struct jkey {
    const char *name;
    enum jact act;
    unsigned only;
    const char *why;
};

#define OLD_BATCH                                                                                  \
    "a name from before HugeCTR v3.9, which since ignored it: set max_batch_size (not imported)"

static const struct jkey top_keys[] = {
    {"supportlonglong", J_CODE, 0, NULL},
    {"volatile_db", J_CODE, 0, NULL},
    {"persistent_db", J_CODE, 0, NULL},
    {"update_source", J_CODE, 0, NULL},
    {"models", J_CODE, 0, NULL},
    {"cpu_memory_db", J_CODE, 0, NULL},
    {"distributed_db", J_CODE, 0, NULL},
    {"fuse_embedding_table", J_SKIP, 0,
     "HugeCTR's table fusion (one lookup for all tables of a vector size) has no counterpart: "
     "each table is looked up on its own"},
    {"db_type", J_OBSOLETE, 0,
     "HugeCTR's database choice before v3.3 (\"local\", \"rocksdb\", \"redis\", \"hierarchy\"), "
     "replaced by volatile_db and persistent_db: set their types instead (not imported)"},
};

static const struct jkey vdb_keys[] = {
    {"type", J_CODE, 0, NULL},
    {"num_partitions", J_MAP, 0, NULL},
    {"max_batch_size", J_MAP, 0, NULL},
    {"overflow_margin", J_MAP, 0, NULL},
    {"overflow_policy", J_MAP, 0, NULL},
    {"overflow_resolution_target", J_MAP, 0, NULL},
    {"initial_cache_rate", J_MAP, 0, NULL},
    {"cache_missed_embeddings", J_MAP, 0, NULL},
    {"update_filters", J_MAP, 0, NULL},
    {"initialize_after_startup", J_CODE, 0, NULL},
    {"allocation_rate", J_MAP, ONLY_HASH, NULL},
    {"shared_memory_size", J_MAP, ONLY_HASH, NULL},
    {"shared_memory_name", J_MAP, ONLY_HASH, NULL},
    {"shared_memory_auto_remove", J_MAP, ONLY_HASH, NULL},
    {"address", J_CODE, ONLY_REDIS, NULL},
    {"user_name", J_MAP, ONLY_REDIS, NULL},
    {"password", J_MAP, ONLY_REDIS, NULL},
    {"num_node_connections", J_MAP, ONLY_REDIS, NULL},
    {"enable_tls", J_MAP, ONLY_REDIS, NULL},
    {"tls_ca_certificate", J_MAP, ONLY_REDIS, NULL},
    {"tls_client_certificate", J_MAP, ONLY_REDIS, NULL},
    {"tls_client_key", J_MAP, ONLY_REDIS, NULL},
    {"tls_server_name_identification", J_MAP, ONLY_REDIS, NULL},
    {"max_get_batch_size", J_OBSOLETE, 0, OLD_BATCH},
    {"max_set_batch_size", J_OBSOLETE, 0, OLD_BATCH},
};

static const struct jkey pdb_keys[] = {
    {"type", J_CODE, 0, NULL},
    {"path", J_MAP, 0, NULL},
    {"num_threads", J_MAP, 0, NULL},
    {"read_only", J_MAP, 0, NULL},
    {"max_batch_size", J_MAP, 0, NULL},
    {"update_filters", J_MAP, 0, NULL},
    {"initialize_after_startup", J_CODE, 0, NULL},
    {"max_get_batch_size", J_OBSOLETE, 0, OLD_BATCH},
    {"max_set_batch_size", J_OBSOLETE, 0, OLD_BATCH},
};

static const struct jkey us_keys[] = {
    {"type", J_CODE, 0, NULL},
    {"brokers", J_CODE, 0, NULL},
    {"metadata_refresh_interval_ms", J_MAP, 0, NULL},
    {"receive_buffer_size", J_MAP, 0, NULL},
    {"poll_timeout_ms", J_MAP, 0, NULL},
    {"max_batch_size", J_MAP, 0, NULL},
    {"failure_backoff_ms", J_MAP, 0, NULL},
    {"max_commit_interval", J_MAP, 0, NULL},
};

#define NOT_READ "HugeCTR's HPS did not read it either (documented, never parsed)"

static const struct jkey model_keys[] = {
    {"model", J_CODE, 0, NULL},
    {"sparse_files", J_CODE, 0, NULL},
    {"default_value_for_each_table", J_CODE, 0, NULL},
    {"max_batch_size", J_MAP, 0, NULL},
    {"dense_file", J_MAP, 0, NULL},
    {"gpucache", J_MAP, 0, NULL},
    {"gpucacheper", J_MAP, 0, NULL},
    {"hit_rate_threshold", J_MAP, 0, NULL},
    {"num_of_worker_buffer_in_pool", J_MAP, 0, NULL},
    {"num_of_refresher_buffer_in_pool", J_MAP, 0, NULL},
    {"cache_refresh_percentage_per_iteration", J_MAP, 0, NULL},
    {"deployed_device_list", J_MAP, 0, NULL},
    {"maxnum_catfeature_query_per_table_per_sample", J_MAP, 0, NULL},
    {"embedding_vecsize_per_table", J_MAP, 0, NULL},
    {"maxnum_des_feature_per_sample", J_MAP, 0, NULL},
    {"refresh_delay", J_MAP, 0, NULL},
    {"refresh_interval", J_MAP, 0, NULL},
    {"embedding_table_names", J_MAP, 0, NULL},
    {"use_static_table", J_MAP, 0, NULL},
    {"embedding_cache_type", J_MAP, 0, NULL},
    {"thread_pool_size", J_MAP, 0, NULL},
    {"init_ec", J_MAP, 0, NULL},
    {"fuse_embedding_table", J_SKIP, 0,
     "HugeCTR's table fusion has no counterpart: each table is looked up on its own"},
    {"use_context_stream", J_SKIP, 0,
     "a choice of HugeCTR's TensorFlow/TensorRT plugins; libhps callers pass their CUDA stream "
     "with each lookup"},
    {"use_hctr_cache_implementation", J_SKIP, 0,
     "HPS has one GPU cache implementation (HugeCTR's lock-free alternative is not offered)"},
    {"enable_pagelock", J_SKIP, 0,
     "static tables in page-locked host memory are not offered; a static table is in GPU memory"},
    {"fp8_quant", J_SKIP, 0, "fp8 static tables are not offered; vectors are float32"},
    {"network_file", J_SKIP, 0, NOT_READ},
    {"label_dim", J_SKIP, 0, NOT_READ},
    {"slot_num", J_SKIP, 0, NOT_READ},
};

/* HugeCTR's Python keyword arguments, which its JSON reader ignored. */
static const struct {
    const char *python, *json;
} python_names[] = {
    {"i64_input_key", "supportlonglong"},
    {"model_name", "model"},
    {"max_batchsize", "max_batch_size"},
    {"sparse_model_files", "sparse_files"},
    {"dense_model_file", "dense_file"},
    {"use_gpu_embedding_cache", "gpucache"},
    {"cache_size_percentage", "gpucacheper"},
    {"deployed_devices", "deployed_device_list"},
    {"device_id", "deployed_device_list"},
    {"number_of_worker_buffers_in_pool", "num_of_worker_buffer_in_pool"},
    {"number_of_refresh_buffers_in_pool", "num_of_refresher_buffer_in_pool"},
    {"backend", "type"},
};

#define NKEYS(t) (sizeof(t) / sizeof((t)[0]))

/* Levenshtein distance, capped at 3 (names are short). */
static int distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    int row[64];

    if (la >= 64 || lb >= 64 || (la > lb ? la - lb : lb - la) > 2)
        return 3;
    for (size_t j = 0; j <= lb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            best = up + 1 < best ? up + 1 : best;
            best = row[j - 1] + 1 < best ? row[j - 1] + 1 : best;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb] > 3 ? 3 : row[lb];
}

static void unknown_key(struct hps__imp *im, const char *path, const char *key,
                        const struct jkey *tab, size_t n)
{
    for (size_t i = 0; i < NKEYS(python_names); i++) {
        if (strcmp(key, python_names[i].python) == 0) {
            hps__imp_warn(
                im,
                "%s: %s: unknown key, not imported (HugeCTR's Python name of %s; its JSON "
                "reader ignored it)",
                im->jname, path, python_names[i].json);
            return;
        }
    }
    const char *best = NULL;
    int bd = 3;
    for (size_t i = 0; i < n; i++) {
        int d = distance(key, tab[i].name);
        if (d < bd) {
            bd = d;
            best = tab[i].name;
        }
    }
    if (best)
        hps__imp_warn(im, "%s: %s: unknown key, not imported (did you mean %s?)", im->jname, path,
                      best);
    else
        hps__imp_warn(im, "%s: %s: unknown key, not imported", im->jname, path);
}

static const struct jkey *jkey_find(const struct jkey *tab, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(tab[i].name, name) == 0)
            return &tab[i];
    return NULL;
}

/* A note on update_filters entries with anchors (HugeCTR wrapped each filter
 * in ^hps_et\.FILTER\..+$, so an anchor inside never matched). */
static void check_filters(struct hps__imp *im, json_object *v, const char *path)
{
    for (size_t i = 0; json_object_is_type(v, json_type_array) && i < json_object_array_length(v);
         i++) {
        const char *s = json_object_get_string(json_object_array_get_idx(v, i));
        size_t n = s ? strlen(s) : 0;
        if (n && (s[0] == '^' || s[n - 1] == '$'))
            hps__imp_warn(
                im,
                "%s: %s[%zu]: \"%s\" has an anchor: HugeCTR embedded each filter in "
                "^hps_et\\.FILTER\\..+$, where it never matched; here filters match model "
                "names, so this one applies updates to the models it matches",
                im->jname, path, i, s);
    }
}

/*
 * Walk the keys of object o (at `path`): J_MAP keys go to section sec (or
 * [volatile_db] / [distributed_db] for the keys of one database kind); a
 * database that is off (off_why) or of another kind (kind: ONLY_* bits)
 * gets its keys listed instead.  J_CODE keys are the caller's.
 */
static hps_err_t walk(struct hps__imp *im, json_object *o, const char *path, const struct jkey *tab,
                      size_t n, hps__sec_t sec, struct hps__imodel *m, unsigned kind,
                      const char *off_why)
{
    char p[512];

    json_object_object_foreach(o, key, v)
    {
        const struct jkey *jk = jkey_find(tab, n, key);
        snprintf(p, sizeof(p), "%s%s%s", path, *path ? "." : "", key);
        if (!jk) {
            unknown_key(im, p, key, tab, n);
        } else if (jk->act == J_SKIP) {
            hps__imp_warn(im, "%s: %s: no meaning here, not imported: %s", im->jname, p, jk->why);
        } else if (jk->act == J_OBSOLETE) {
            hps__imp_warn(im, "%s: %s: obsolete: %s", im->jname, p, jk->why);
        } else if (jk->act == J_MAP && off_why) {
            hps__imp_warn(im, "%s: %s: not imported: %s", im->jname, p, off_why);
        } else if (jk->act == J_MAP && jk->only && !(jk->only & kind)) {
            hps__imp_warn(im, "%s: %s: not imported: it applies to %s only, and %s.type is %s",
                          im->jname, p,
                          jk->only == ONLY_REDIS ? "redis_cluster" : "the hash-map types", path,
                          kind == ONLY_REDIS ? "redis_cluster" : "a hash map");
        } else if (jk->act == J_MAP) {
            hps__sec_t s = jk->only == ONLY_REDIS  ? HPS__SEC_distributed_db
                           : jk->only == ONLY_HASH ? HPS__SEC_volatile_db
                                                   : sec;
            if (map_json(im, s, m, key, v, p))
                return im->rc;
            if (strcmp(key, "update_filters") == 0)
                check_filters(im, v, p);
        }
    }
    return im->rc;
}

/* ---- Databases and the update source ------------------------------------------------ */

/* HugeCTR's spellings of the volatile DB types (DatabaseType_t). */
static unsigned vdb_kind(const char *s, bool *ret_ok)
{
    static const char *const hash[] = {"hash_map",
                                       "hashmap",
                                       "hash",
                                       "map",
                                       "parallel_hash_map",
                                       "parallel_hashmap",
                                       "parallel_hash",
                                       "parallel_map",
                                       "multi_process_hash_map",
                                       "multi_process_hashmap",
                                       "multi_process_hash",
                                       "multi_process_map"};
    static const char *const off[] = {"disabled", "disable", "none"};

    *ret_ok = true;
    for (size_t i = 0; i < NKEYS(hash); i++)
        if (strcasecmp(s, hash[i]) == 0)
            return ONLY_HASH;
    if (strcasecmp(s, "redis_cluster") == 0 || strcasecmp(s, "redis") == 0)
        return ONLY_REDIS;
    for (size_t i = 0; i < NKEYS(off); i++)
        if (strcasecmp(s, off[i]) == 0)
            return 0;
    *ret_ok = false;
    return 0;
}

/* "h1:p;h2" -> "h1:p,h2:<port>", noting each change. */
static char *host_list(struct hps__imp *im, const char *s, const char *path, const char *port,
                       const char *port_why)
{
    struct hps__buf b = {0};
    bool semi = strchr(s, ';') != NULL;

    hps__buf_add(&b, "", 0);
    for (const char *p = s; *p;) {
        size_t n = strcspn(p, ",;");
        while (n && *p == ' ')
            p++, n--;
        size_t t = n;
        while (t && p[t - 1] == ' ')
            t--;
        hps__buf_printf(&b, "%s%.*s", b.len ? "," : "", (int)t, p);
        if (t && !memchr(p, ':', t)) {
            hps__buf_printf(&b, ":%s", port);
            hps__imp_warn(im, "%s: %s: \"%.*s\" has no port: %s", im->jname, path, (int)t, p,
                          port_why);
        }
        p += n;
        if (*p)
            p++;
    }
    if (semi)
        hps__imp_warn(im,
                      "%s: %s: the ';' separators are written as ',' (the INI's list separator)",
                      im->jname, path);
    return b.oom ? (hps__buf_fini(&b), NULL) : b.p;
}

static hps_err_t map_host_list(struct hps__imp *im, hps__sec_t sec, const char *key, json_object *v,
                               const char *path, const char *port, const char *port_why)
{
    const char *s = json_str(im, v, path);
    char src[512], shown[224];

    if (!s)
        return im->rc;
    char *list = host_list(im, s, path, port, port_why);
    if (!list)
        return hps__imp_oom(im);
    snprintf(src, sizeof(src), "%s: %s", im->jname, path);
    shown_json(v, shown, sizeof(shown));
    const char *why = hps__ini_unsafe(list, false);
    hps_err_t rc = why ? hps__imp_fail(im, "%s = %s: %s", src, shown, why)
                       : hps__imp_put(im, sec, NULL, key, list, src, shown);
    free(list);
    return rc;
}

/* initialize_after_startup: HugeCTR read it from Python only. */
static hps_err_t map_init_after(struct hps__imp *im, hps__sec_t sec, json_object *v,
                                const char *path)
{
    if (map_json(im, sec, NULL, "initialize_after_startup", v, path))
        return im->rc;
    if (!json_object_get_boolean(v))
        hps__imp_warn(
            im,
            "%s: %s: imported as written (false), but HugeCTR did not read this key from a "
            "ps.json: it always loaded the model files at start-up",
            im->jname, path);
    return 0;
}

/*
 * A volatile DB object: volatile_db, or the v3.3 sections cpu_memory_db
 * (kinds: hash, disabled) and distributed_db (redis, disabled).  `sole`: it
 * is HugeCTR's only volatile DB, so Redis disables [volatile_db].
 */
static hps_err_t do_vdb(struct hps__imp *im, json_object *o, const char *path, unsigned kinds,
                        bool sole)
{
    char p[128], src[512];
    json_object *t = NULL, *v = NULL;
    unsigned kind = 0;
    bool ok = true;

    if (!json_object_is_type(o, json_type_object))
        return hps__imp_fail(im, "%s: %s: must be a JSON object", im->jname, path);
    snprintf(p, sizeof(p), "%s.type", path);
    snprintf(src, sizeof(src), "%s: %s", im->jname, p);
    if (json_object_object_get_ex(o, "type", &t)) {
        const char *s = json_str(im, t, p);
        if (!s)
            return im->rc;
        kind = vdb_kind(s, &ok);
        if (!ok || (kind && !(kind & kinds)))
            return hps__imp_fail(im, "%s = \"%s\": must be %s", src, s,
                                 kinds == ONLY_REDIS ? "redis_cluster (or redis) or disabled"
                                 : kinds == ONLY_HASH
                                     ? "hash_map, parallel_hash_map, "
                                       "multi_process_hash_map or disabled"
                                     : "hash_map, parallel_hash_map, "
                                       "multi_process_hash_map, redis_cluster or disabled");
    } else {
        hps__imp_warn(im,
                      "%s: %s: no type: HugeCTR then disabled this database; imported as disabled",
                      im->jname, path);
    }
    hps__sec_t sec = kind == ONLY_REDIS ? HPS__SEC_distributed_db : HPS__SEC_volatile_db;
    if (kind == ONLY_HASH &&
        hps__imp_put(im, sec, NULL, "type", "multi_process_hash_map", src, "hash"))
        return im->rc;
    if (kind == ONLY_REDIS) {
        if (hps__imp_put(im, sec, NULL, "type", "redis_cluster", src, "redis_cluster") ||
            (sole &&
             hps__imp_put(im, HPS__SEC_volatile_db, NULL, "type", "disabled", src, "redis")))
            return im->rc;
        if (sole)
            hps__imp_warn(
                im,
                "%s: %s: redis_cluster is imported as [distributed_db]; [volatile_db] is "
                "disabled, as HugeCTR had no other volatile DB (enable it for a shared-memory "
                "cache in front of Redis)",
                im->jname, p);
        if (!json_object_object_get_ex(o, "num_partitions", &v))
            hps__imp_warn(
                im,
                "%s: %s.num_partitions: not set: HugeCTR used min(16, CPU cores) partitions, "
                "[distributed_db] defaults to 8; set it to the partition count of the data "
                "already in Redis",
                im->jname, path);
    }
    if (kind == 0 && sole &&
        hps__imp_put(im, HPS__SEC_volatile_db, NULL, "type", "disabled", src, "disabled"))
        return im->rc;
    const char *off = kind ? NULL : "this database is disabled";
    if (walk(im, o, path, vdb_keys, NKEYS(vdb_keys), sec, NULL, kind, off))
        return im->rc;
    if (json_object_object_get_ex(o, "address", &v)) {
        snprintf(p, sizeof(p), "%s.address", path);
        if (kind == ONLY_REDIS) {
            if (map_host_list(im, sec, "address", v, p, "6379", "Redis's port 6379 is added"))
                return im->rc;
        } else {
            hps__imp_warn(
                im, "%s: %s: not imported: %s", im->jname, p,
                off ? off : "it applies to redis_cluster only, and this database is a hash map");
        }
    }
    if (json_object_object_get_ex(o, "initialize_after_startup", &v)) {
        snprintf(p, sizeof(p), "%s.initialize_after_startup", path);
        if (kind == ONLY_HASH)
            return map_init_after(im, HPS__SEC_volatile_db, v, p);
        hps__imp_warn(
            im, "%s: %s: not imported: %s", im->jname, p,
            kind ? "[distributed_db] has no such key (HugeCTR did not read it from a ps.json "
                   "either)"
                 : off);
    }
    return im->rc;
}

static hps_err_t do_pdb(struct hps__imp *im, json_object *o)
{
    json_object *t = NULL, *v;
    const char *off = "persistent_db has no type: HugeCTR left it disabled";

    if (!json_object_is_type(o, json_type_object))
        return hps__imp_fail(im, "%s: persistent_db: must be a JSON object", im->jname);
    if (json_object_object_get_ex(o, "type", &t)) {
        if (map_json(im, HPS__SEC_persistent_db, NULL, "type", t, "persistent_db.type"))
            return im->rc;
        off =
            strcmp(
                im->g[HPS__SEC_persistent_db].v[hps__key_find(HPS__SEC_persistent_db, "type")].text,
                "disabled") == 0
                ? "this database is disabled"
                : NULL;
    }
    if (walk(im, o, "persistent_db", pdb_keys, NKEYS(pdb_keys), HPS__SEC_persistent_db, NULL, 0,
             off))
        return im->rc;
    if (json_object_object_get_ex(o, "initialize_after_startup", &v)) {
        if (!off)
            return map_init_after(im, HPS__SEC_persistent_db, v,
                                  "persistent_db.initialize_after_startup");
        hps__imp_warn(im, "%s: persistent_db.initialize_after_startup: not imported: %s", im->jname,
                      off);
    }
    return im->rc;
}

static hps_err_t do_update_source(struct hps__imp *im, json_object *o)
{
    json_object *t = NULL, *v;
    const char *off = "update_source has no type: HugeCTR left updates off";

    if (!json_object_is_type(o, json_type_object))
        return hps__imp_fail(im, "%s: update_source: must be a JSON object", im->jname);
    if (json_object_object_get_ex(o, "type", &t)) {
        if (t == NULL) { /* JSON null: HugeCTR's documented "no update source" */
            off = "update_source.type is null";
        } else {
            if (map_json(im, HPS__SEC_update_source, NULL, "type", t, "update_source.type"))
                return im->rc;
            bool none =
                strcmp(hps__imp_val(im, HPS__SEC_update_source, NULL, "type")->text, "none") == 0;
            off = none ? "update_source.type is none" : NULL;
        }
    }
    if (walk(im, o, "update_source", us_keys, NKEYS(us_keys), HPS__SEC_update_source, NULL, 0, off))
        return im->rc;
    if (json_object_object_get_ex(o, "brokers", &v)) {
        if (off)
            hps__imp_warn(im, "%s: update_source.brokers: not imported: %s", im->jname, off);
        else
            return map_host_list(im, HPS__SEC_update_source, "brokers", v, "update_source.brokers",
                                 "9092", "Kafka's port 9092 is added");
    }
    return im->rc;
}

/* ---- Models --------------------------------------------------------------------------- */

/* sparse_files: one local directory per table; sets the table count. */
static hps_err_t do_sparse_files(struct hps__imp *im, struct hps__imodel *m, json_object *v,
                                 const char *p)
{
    if (json_object_is_type(v, json_type_object))
        return hps__imp_fail(im,
                             "%s: %s: an object (HugeCTR's fused tables) is not accepted: list one "
                             "directory per table",
                             im->jname, p);
    if (map_json(im, HPS__SEC_model, m, "sparse_files", v, p))
        return im->rc;
    m->ntables = json_object_array_length(v);
    for (size_t i = 0; i < m->ntables; i++) {
        const char *s = json_object_get_string(json_object_array_get_idx(v, i));
        if (strstr(s, "://"))
            hps__imp_warn(
                im,
                "%s: %s[%zu]: \"%s\" is a remote path (HugeCTR read HDFS, S3 and GCS): "
                "hps-coordinator reads local files only; copy the files and change the path",
                im->jname, p, i, s);
    }
    return 0;
}

/* default_value_for_each_table: HugeCTR padded a short list with 0.0. */
static hps_err_t do_defaults(struct hps__imp *im, struct hps__imodel *m, json_object *v,
                             const char *p)
{
    if (!json_object_is_type(v, json_type_array) || json_object_array_length(v) >= m->ntables)
        return map_json(im, HPS__SEC_model, m, "default_value_for_each_table", v, p);
    json_object *padded = json_object_new_array();
    if (!padded)
        return hps__imp_oom(im);
    for (size_t i = 0; i < m->ntables; i++) {
        json_object *x = json_object_array_get_idx(v, i);
        json_object_array_add(padded, x ? json_object_get(x) : json_object_new_double_s(0, "0.0"));
    }
    hps_err_t rc = map_json(im, HPS__SEC_model, m, "default_value_for_each_table", padded, p);
    json_object_put(padded);
    return rc;
}

/* Table names are unique within a model; the INI's check would number the
 * entries from 1, so the repeat is named here by JSON path (from 0). */
static hps_err_t check_table_names(struct hps__imp *im, json_object *o, const char *path)
{
    json_object *v;

    if (!json_object_object_get_ex(o, "embedding_table_names", &v) ||
        !json_object_is_type(v, json_type_array))
        return im->rc;
    for (size_t i = 1; i < json_object_array_length(v); i++) {
        const char *s = json_object_get_string(json_object_array_get_idx(v, i));
        for (size_t j = 0; j < i; j++)
            if (strcmp(s, json_object_get_string(json_object_array_get_idx(v, j))) == 0)
                return hps__imp_fail(im,
                                     "%s: %s.embedding_table_names[%zu] = \"%s\": repeats "
                                     "[%zu]; table names must be unique",
                                     im->jname, path, i, s, j);
    }
    return im->rc;
}

static hps_err_t do_model(struct hps__imp *im, json_object *o, size_t i)
{
    struct hps__imodel *m = &im->models[i];
    char path[64], p[128];
    json_object *v;

    snprintf(path, sizeof(path), "models[%zu]", i);
    if (!json_object_is_type(o, json_type_object))
        return hps__imp_fail(im, "%s: %s: must be a JSON object", im->jname, path);
    snprintf(p, sizeof(p), "%s.model", path);
    if (!json_object_object_get_ex(o, "model", &v))
        return hps__imp_fail(im, "%s: %s: missing (the model's name)", im->jname, p);
    const char *name = json_str(im, v, p);
    if (!name)
        return im->rc;
    if (!hps__is_name(name, strlen(name)))
        return hps__imp_fail(im, "%s: %s = \"%s\": must be a name matching [A-Za-z0-9_-]{1,120}",
                             im->jname, p, name);
    for (size_t j = 0; j < i; j++)
        if (strcmp(im->models[j].name, name) == 0)
            return hps__imp_fail(im, "%s: %s = \"%s\": models[%zu] has the same name", im->jname, p,
                                 name, j);
    m->name = strdup(name);
    if (!m->name)
        return hps__imp_oom(im);
    snprintf(p, sizeof(p), "%s.sparse_files", path);
    if (!json_object_object_get_ex(o, "sparse_files", &v))
        return hps__imp_fail(im, "%s: %s: missing (one directory per table)", im->jname, p);
    if (do_sparse_files(im, m, v, p))
        return im->rc;
    if (walk(im, o, path, model_keys, NKEYS(model_keys), HPS__SEC_model, m, 0, NULL) ||
        check_table_names(im, o, path))
        return im->rc;
    snprintf(p, sizeof(p), "%s.default_value_for_each_table", path);
    if (json_object_object_get_ex(o, "default_value_for_each_table", &v) &&
        do_defaults(im, m, v, p))
        return im->rc;
    static const char *const required[] = {"embedding_vecsize_per_table",
                                           "maxnum_catfeature_query_per_table_per_sample"};
    for (size_t r = 0; r < NKEYS(required); r++)
        if (!hps__imp_val(im, HPS__SEC_model, m, required[r])->text)
            return hps__imp_fail(im, "%s: %s.%s: missing (one entry per table)", im->jname, path,
                                 required[r]);
    return 0;
}

/* ---- The whole ps.json ----------------------------------------------------------------- */

static hps_err_t do_models(struct hps__imp *im, json_object *v)
{
    size_t n = json_object_is_type(v, json_type_array) ? json_object_array_length(v) : 0;

    if (n == 0 || n > HPS_CONF_MAX_MODELS)
        return hps__imp_fail(im, "%s: models: must be a JSON array of 1 to %d models", im->jname,
                             HPS_CONF_MAX_MODELS);
    im->models = calloc(n, sizeof(*im->models));
    if (!im->models)
        return hps__imp_oom(im);
    im->nmodels = n; /* all n are freed, even after a failure in the middle */
    for (size_t i = 0; i < n; i++)
        if (do_model(im, json_object_array_get_idx(v, i), i))
            return im->rc;
    return 0;
}

static hps_err_t do_root(struct hps__imp *im, json_object *root)
{
    json_object *v;
    bool vdb = json_object_object_get_ex(root, "volatile_db", &v);

    if (!json_object_is_type(root, json_type_object))
        return hps__imp_fail(im, "%s: the top level must be a JSON object", im->jname);
    if (!json_object_object_get_ex(root, "models", &v))
        return hps__imp_fail(im, "%s: models: missing (HugeCTR requires it)", im->jname);
    if (!json_object_object_get_ex(root, "supportlonglong", &v))
        hps__imp_warn(im,
                      "%s: supportlonglong: missing (HugeCTR requires it): the INI default, true "
                      "(int64 keys), applies",
                      im->jname);
    json_object_object_foreach(root, key, val)
    {
        const struct jkey *jk = jkey_find(top_keys, NKEYS(top_keys), key);
        bool old = strcmp(key, "cpu_memory_db") == 0 || strcmp(key, "distributed_db") == 0;
        if (!jk || jk->act != J_CODE)
            continue;
        if (old && vdb) {
            hps__imp_warn(im,
                          "%s: %s: obsolete: HugeCTR v3.3's section, ignored (as by HugeCTR since) "
                          "because volatile_db is set",
                          im->jname, key);
        } else if (old) {
            hps__imp_warn(im,
                          "%s: %s: obsolete: HugeCTR v3.3's section (later versions ignore it), "
                          "imported as [%s]",
                          im->jname, key, key[0] == 'c' ? "volatile_db" : "distributed_db");
            do_vdb(im, val, key, key[0] == 'c' ? ONLY_HASH : ONLY_REDIS, key[0] == 'c');
        } else if (strcmp(key, "supportlonglong") == 0) {
            map_json(im, HPS__SEC_hps, NULL, key, val, key);
        } else if (strcmp(key, "volatile_db") == 0) {
            do_vdb(im, val, key, ONLY_HASH | ONLY_REDIS, true);
        } else if (strcmp(key, "persistent_db") == 0) {
            do_pdb(im, val);
        } else if (strcmp(key, "update_source") == 0) {
            do_update_source(im, val);
        } else if (strcmp(key, "models") == 0) {
            do_models(im, val);
        }
        if (im->rc)
            return im->rc;
    }
    return walk(im, root, "", top_keys, NKEYS(top_keys), HPS__SEC_hps, NULL, 0, NULL);
}

/* Notes on what HugeCTR did differently by default (after all inputs). */
void hps__import_notes(struct hps__imp *im)
{
    static const hps__sec_t dbs[] = {HPS__SEC_volatile_db, HPS__SEC_distributed_db,
                                     HPS__SEC_persistent_db};
    const struct hps__ival *us = hps__imp_val(im, HPS__SEC_update_source, NULL, "type");

    for (size_t i = 0; i < im->nmodels; i++) {
        struct hps__imodel *m = &im->models[i];
        if (!hps__imp_val(im, HPS__SEC_model, m, "deployed_device_list")->text)
            hps__imp_warn(
                im,
                "%s: models[%zu].deployed_device_list: missing (HugeCTR requires it): the "
                "INI default, device 0, applies",
                im->jname, i);
        if (!hps__imp_val(im, HPS__SEC_model, m, "default_value_for_each_table")->text)
            hps__imp_warn(
                im,
                "%s: models[%zu].default_value_for_each_table: missing (HugeCTR requires it): "
                "the INI default, 0.0 for %s, applies",
                im->jname, i, m->ntables == 1 ? "the table" : "every table");
    }
    if (!us->text || strcmp(us->text, "none") == 0)
        return;
    for (size_t i = 0; i < NKEYS(dbs); i++) {
        const struct hps__ival *type = hps__imp_val(im, dbs[i], NULL, "type");
        bool on = type->text ? strcmp(type->text, "disabled") != 0 : dbs[i] == HPS__SEC_volatile_db;
        if (on && !hps__imp_val(im, dbs[i], NULL, "update_filters")->text)
            hps__imp_warn(
                im,
                "%s: [%s] update_filters: not set: HugeCTR's default (^hps_.+$) matched no "
                "model, so it applied no online updates to this database; the INI default "
                "(.+) applies those of every model",
                im->jname, hps__sections[dbs[i]].name);
    }
}

/* ---- Reading the JSON --------------------------------------------------------------------- */

/* Blank out // and C-style block comments outside strings (line breaks
 * stay, so positions keep their line); json-c then reads strict JSON.
 * Returns false for a block comment that is not closed. */
static bool strip_comments(char *s, size_t n)
{
    bool in_str = false;

    for (size_t i = 0; i < n; i++) {
        if (in_str) {
            if (s[i] == '\\' && i + 1 < n)
                i++;
            else if (s[i] == '"')
                in_str = false;
        } else if (s[i] == '"') {
            in_str = true;
        } else if (s[i] == '/' && i + 1 < n && s[i + 1] == '/') {
            for (; i < n && s[i] != '\n'; i++)
                s[i] = ' ';
        } else if (s[i] == '/' && i + 1 < n && s[i + 1] == '*') {
            size_t j = i + 2;
            while (j + 1 < n && !(s[j] == '*' && s[j + 1] == '/'))
                j++;
            if (j + 1 >= n)
                return false;
            for (; i <= j + 1; i++)
                if (s[i] != '\n')
                    s[i] = ' ';
            i--;
        }
    }
    return true;
}

static hps_err_t read_json(struct hps__imp *im, const char *path, json_object **ret)
{
    char *text;
    size_t len;
    hps_err_t rc = hps__read_file(path, &text, &len, im->err, im->err_len);

    if (rc)
        return im->rc = rc;
    json_tokener *tok = json_tokener_new_ex(JSON_MAX_DEPTH);
    json_object *root = NULL;
    const char *why = NULL;
    size_t end = len;
    if (!tok) {
        free(text);
        return hps__imp_oom(im);
    }
#ifdef JSON_TOKENER_VALIDATE_UTF8
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
#else
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
#endif
    if (!strip_comments(text, len)) {
        why = "a comment is not closed";
    } else {
        root = json_tokener_parse_ex(tok, text, (int)len);
        enum json_tokener_error e = json_tokener_get_error(tok);
        end = json_tokener_get_parse_end(tok);
        if (e == json_tokener_continue)
            why = "unexpected end of file";
        else if (e != json_tokener_success)
            why = json_tokener_error_desc(e);
        else if (text[end + strspn(text + end, " \t\r\n")] != '\0')
            why = "more text after the top-level value";
    }
    if (why) {
        unsigned line = 1, col = 1;
        for (size_t i = 0; i < end && i < len; i++, col++)
            if (text[i] == '\n')
                line++, col = 0;
        hps__imp_fail(im, "%s:%u:%u: not valid JSON: %s", path, line, col, why);
        json_object_put(root);
        root = NULL;
    }
    json_tokener_free(tok);
    free(text);
    *ret = root;
    return im->rc;
}

hps_err_t hps__import_json(struct hps__imp *im, const char *path)
{
    json_object *root = NULL;

    if (read_json(im, path, &root) == 0)
        do_root(im, root);
    json_object_put(root);
    return im->rc;
}
