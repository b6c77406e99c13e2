/*
 * import_json_keys.c -- the keys of HugeCTR's ps.json: one table per
 * JSON object (what each key becomes here), the walk of an object's keys
 * by its table, and the names offered for an unknown key (HugeCTR's Python
 * keyword arguments, the nearest known name).
 */
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/import_json.h"

#define OLD_BATCH                                                                                  \
    "a name from before HugeCTR v3.9, which since ignored it: set max_batch_size (not imported)"

const struct jkey hps__conf_imp_top_keys[] = {
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
const size_t hps__conf_imp_top_keys_n = NKEYS(hps__conf_imp_top_keys);

const struct jkey hps__conf_imp_vdb_keys[] = {
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
const size_t hps__conf_imp_vdb_keys_n = NKEYS(hps__conf_imp_vdb_keys);

const struct jkey hps__conf_imp_pdb_keys[] = {
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
const size_t hps__conf_imp_pdb_keys_n = NKEYS(hps__conf_imp_pdb_keys);

const struct jkey hps__conf_imp_us_keys[] = {
    {"type", J_CODE, 0, NULL},
    {"brokers", J_CODE, 0, NULL},
    {"metadata_refresh_interval_ms", J_MAP, 0, NULL},
    {"receive_buffer_size", J_MAP, 0, NULL},
    {"poll_timeout_ms", J_MAP, 0, NULL},
    {"max_batch_size", J_MAP, 0, NULL},
    {"failure_backoff_ms", J_MAP, 0, NULL},
    {"max_commit_interval", J_MAP, 0, NULL},
};
const size_t hps__conf_imp_us_keys_n = NKEYS(hps__conf_imp_us_keys);

#define NOT_READ "HugeCTR's HPS did not read it either (documented, never parsed)"

const struct jkey hps__conf_imp_model_keys[] = {
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
const size_t hps__conf_imp_model_keys_n = NKEYS(hps__conf_imp_model_keys);

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

static void unknown_key(struct hps__conf_imp *im, const char *path, const char *key,
                        const struct jkey *tab, size_t n)
{
    for (size_t i = 0; i < NKEYS(python_names); i++) {
        if (strcmp(key, python_names[i].python) == 0) {
            hps__conf_imp_warn(
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
        hps__conf_imp_warn(im, "%s: %s: unknown key, not imported (did you mean %s?)", im->jname,
                           path, best);
    else
        hps__conf_imp_warn(im, "%s: %s: unknown key, not imported", im->jname, path);
}

const struct jkey *hps__conf_imp_jkey_find(const struct jkey *tab, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(tab[i].name, name) == 0)
            return &tab[i];
    return NULL;
}

/* A note on update_filters entries with anchors (HugeCTR wrapped each filter
 * in ^hps_et\.FILTER\..+$, so an anchor inside never matched). */
static void check_filters(struct hps__conf_imp *im, json_object *v, const char *path)
{
    for (size_t i = 0; json_object_is_type(v, json_type_array) && i < json_object_array_length(v);
         i++) {
        const char *s = json_object_get_string(json_object_array_get_idx(v, i));
        size_t n = s ? strlen(s) : 0;
        if (n && (s[0] == '^' || s[n - 1] == '$'))
            hps__conf_imp_warn(
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
hps_err_t hps__conf_imp_walk(struct hps__conf_imp *im, json_object *o, const char *path,
                             const struct jkey *tab, size_t n, hps__conf_sec_t sec,
                             struct hps__conf_imodel *m, unsigned kind, const char *off_why)
{
    char p[512];

    json_object_object_foreach(o, key, v)
    {
        const struct jkey *jk = hps__conf_imp_jkey_find(tab, n, key);
        snprintf(p, sizeof(p), "%s%s%s", path, *path ? "." : "", key);
        if (!jk) {
            unknown_key(im, p, key, tab, n);
        } else if (jk->act == J_SKIP) {
            hps__conf_imp_warn(im, "%s: %s: no meaning here, not imported: %s", im->jname, p,
                               jk->why);
        } else if (jk->act == J_OBSOLETE) {
            hps__conf_imp_warn(im, "%s: %s: obsolete: %s", im->jname, p, jk->why);
        } else if (jk->act == J_MAP && off_why) {
            hps__conf_imp_warn(im, "%s: %s: not imported: %s", im->jname, p, off_why);
        } else if (jk->act == J_MAP && jk->only && !(jk->only & kind)) {
            hps__conf_imp_warn(im, "%s: %s: not imported: it applies to %s only, and %s.type is %s",
                               im->jname, p,
                               jk->only == ONLY_REDIS ? "redis_cluster" : "the hash-map types",
                               path, kind == ONLY_REDIS ? "redis_cluster" : "a hash map");
        } else if (jk->act == J_MAP) {
            hps__conf_sec_t s = jk->only == ONLY_REDIS  ? HPS__CONF_SEC_distributed_db
                                : jk->only == ONLY_HASH ? HPS__CONF_SEC_volatile_db
                                                        : sec;
            if (hps__conf_imp_map_json(im, s, m, key, v, p))
                return im->rc;
            if (strcmp(key, "update_filters") == 0)
                check_filters(im, v, p);
        }
    }
    return im->rc;
}
