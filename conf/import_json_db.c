/*
 * import_json_db.c -- the database and update source objects of a
 * ps.json: volatile_db (and HugeCTR v3.3's cpu_memory_db and
 * distributed_db), persistent_db and update_source, with their types,
 * address lists and initialize_after_startup.
 */
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/import_json.h"

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
static char *host_list(struct hps__conf_imp *im, const char *s, const char *path, const char *port,
                       const char *port_why)
{
    struct hps__conf_buf b = {0};
    bool semi = strchr(s, ';') != NULL;

    hps__conf_buf_add(&b, "", 0);
    for (const char *p = s; *p;) {
        size_t n = strcspn(p, ",;");
        while (n && *p == ' ')
            p++, n--;
        size_t t = n;
        while (t && p[t - 1] == ' ')
            t--;
        hps__conf_buf_printf(&b, "%s%.*s", b.len ? "," : "", (int)t, p);
        if (t && !memchr(p, ':', t)) {
            hps__conf_buf_printf(&b, ":%s", port);
            hps__conf_imp_warn(im, "%s: %s: \"%.*s\" has no port: %s", im->jname, path, (int)t, p,
                               port_why);
        }
        p += n;
        if (*p)
            p++;
    }
    if (semi)
        hps__conf_imp_warn(
            im, "%s: %s: the ';' separators are written as ',' (the INI's list separator)",
            im->jname, path);
    return b.oom ? (hps__conf_buf_fini(&b), NULL) : b.p;
}

static hps_err_t map_host_list(struct hps__conf_imp *im, hps__conf_sec_t sec, const char *key,
                               json_object *v, const char *path, const char *port,
                               const char *port_why)
{
    const char *s = hps__conf_imp_json_str(im, v, path);
    char src[512], shown[224];

    if (!s)
        return im->rc;
    char *list = host_list(im, s, path, port, port_why);
    if (!list)
        return hps__conf_imp_oom(im);
    snprintf(src, sizeof(src), "%s: %s", im->jname, path);
    hps__conf_imp_shown_json(v, shown, sizeof(shown));
    const char *why = hps__conf_ini_unsafe(list, false);
    hps_err_t rc = why ? hps__conf_imp_fail(im, "%s = %s: %s", src, shown, why)
                       : hps__conf_imp_put(im, sec, NULL, key, list, src, shown);
    free(list);
    return rc;
}

/* initialize_after_startup: HugeCTR read it from Python only. */
static hps_err_t map_init_after(struct hps__conf_imp *im, hps__conf_sec_t sec, json_object *v,
                                const char *path)
{
    if (hps__conf_imp_map_json(im, sec, NULL, "initialize_after_startup", v, path))
        return im->rc;
    if (!json_object_get_boolean(v))
        hps__conf_imp_warn(
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
hps_err_t hps__conf_imp_do_vdb(struct hps__conf_imp *im, json_object *o, const char *path,
                               unsigned kinds, bool sole)
{
    char p[128], src[512];
    json_object *t = NULL, *v = NULL;
    unsigned kind = 0;
    bool ok = true;

    if (!json_object_is_type(o, json_type_object))
        return hps__conf_imp_fail(im, "%s: %s: must be a JSON object", im->jname, path);
    snprintf(p, sizeof(p), "%s.type", path);
    snprintf(src, sizeof(src), "%s: %s", im->jname, p);
    if (json_object_object_get_ex(o, "type", &t)) {
        const char *s = hps__conf_imp_json_str(im, t, p);
        if (!s)
            return im->rc;
        kind = vdb_kind(s, &ok);
        if (!ok || (kind && !(kind & kinds)))
            return hps__conf_imp_fail(im, "%s = \"%s\": must be %s", src, s,
                                      kinds == ONLY_REDIS ? "redis_cluster (or redis) or disabled"
                                      : kinds == ONLY_HASH
                                          ? "hash_map, parallel_hash_map, "
                                            "multi_process_hash_map or disabled"
                                          : "hash_map, parallel_hash_map, "
                                            "multi_process_hash_map, redis_cluster or disabled");
    } else {
        hps__conf_imp_warn(
            im, "%s: %s: no type: HugeCTR then disabled this database; imported as disabled",
            im->jname, path);
    }
    hps__conf_sec_t sec =
        kind == ONLY_REDIS ? HPS__CONF_SEC_distributed_db : HPS__CONF_SEC_volatile_db;
    if (kind == ONLY_HASH &&
        hps__conf_imp_put(im, sec, NULL, "type", "multi_process_hash_map", src, "hash"))
        return im->rc;
    if (kind == ONLY_REDIS) {
        if (hps__conf_imp_put(im, sec, NULL, "type", "redis_cluster", src, "redis_cluster") ||
            (sole && hps__conf_imp_put(im, HPS__CONF_SEC_volatile_db, NULL, "type", "disabled", src,
                                       "redis")))
            return im->rc;
        if (sole)
            hps__conf_imp_warn(
                im,
                "%s: %s: redis_cluster is imported as [distributed_db]; [volatile_db] is "
                "disabled, as HugeCTR had no other volatile DB (enable it for a shared-memory "
                "cache in front of Redis)",
                im->jname, p);
        if (!json_object_object_get_ex(o, "num_partitions", &v))
            hps__conf_imp_warn(
                im,
                "%s: %s.num_partitions: not set: HugeCTR used min(16, CPU cores) partitions, "
                "[distributed_db] defaults to 8; set it to the partition count of the data "
                "already in Redis",
                im->jname, path);
    }
    if (kind == 0 && sole &&
        hps__conf_imp_put(im, HPS__CONF_SEC_volatile_db, NULL, "type", "disabled", src, "disabled"))
        return im->rc;
    const char *off = kind ? NULL : "this database is disabled";
    if (hps__conf_imp_walk(im, o, path, hps__conf_imp_vdb_keys, hps__conf_imp_vdb_keys_n, sec, NULL,
                           kind, off))
        return im->rc;
    if (json_object_object_get_ex(o, "address", &v)) {
        snprintf(p, sizeof(p), "%s.address", path);
        if (kind == ONLY_REDIS) {
            if (map_host_list(im, sec, "address", v, p, "6379", "Redis's port 6379 is added"))
                return im->rc;
        } else {
            hps__conf_imp_warn(
                im, "%s: %s: not imported: %s", im->jname, p,
                off ? off : "it applies to redis_cluster only, and this database is a hash map");
        }
    }
    if (json_object_object_get_ex(o, "initialize_after_startup", &v)) {
        snprintf(p, sizeof(p), "%s.initialize_after_startup", path);
        if (kind == ONLY_HASH)
            return map_init_after(im, HPS__CONF_SEC_volatile_db, v, p);
        hps__conf_imp_warn(
            im, "%s: %s: not imported: %s", im->jname, p,
            kind ? "[distributed_db] has no such key (HugeCTR did not read it from a ps.json "
                   "either)"
                 : off);
    }
    return im->rc;
}

hps_err_t hps__conf_imp_do_pdb(struct hps__conf_imp *im, json_object *o)
{
    json_object *t = NULL, *v;
    const char *off = "persistent_db has no type: HugeCTR left it disabled";

    if (!json_object_is_type(o, json_type_object))
        return hps__conf_imp_fail(im, "%s: persistent_db: must be a JSON object", im->jname);
    if (json_object_object_get_ex(o, "type", &t)) {
        if (hps__conf_imp_map_json(im, HPS__CONF_SEC_persistent_db, NULL, "type", t,
                                   "persistent_db.type"))
            return im->rc;
        off = strcmp(im->g[HPS__CONF_SEC_persistent_db]
                         .v[hps__conf_key_find(HPS__CONF_SEC_persistent_db, "type")]
                         .text,
                     "disabled") == 0
                  ? "this database is disabled"
                  : NULL;
    }
    if (hps__conf_imp_walk(im, o, "persistent_db", hps__conf_imp_pdb_keys, hps__conf_imp_pdb_keys_n,
                           HPS__CONF_SEC_persistent_db, NULL, 0, off))
        return im->rc;
    if (json_object_object_get_ex(o, "initialize_after_startup", &v)) {
        if (!off)
            return map_init_after(im, HPS__CONF_SEC_persistent_db, v,
                                  "persistent_db.initialize_after_startup");
        hps__conf_imp_warn(im, "%s: persistent_db.initialize_after_startup: not imported: %s",
                           im->jname, off);
    }
    return im->rc;
}

hps_err_t hps__conf_imp_do_update_source(struct hps__conf_imp *im, json_object *o)
{
    json_object *t = NULL, *v;
    const char *off = "update_source has no type: HugeCTR left updates off";

    if (!json_object_is_type(o, json_type_object))
        return hps__conf_imp_fail(im, "%s: update_source: must be a JSON object", im->jname);
    if (json_object_object_get_ex(o, "type", &t)) {
        if (t == NULL) { /* JSON null: HugeCTR's documented "no update source" */
            off = "update_source.type is null";
        } else {
            if (hps__conf_imp_map_json(im, HPS__CONF_SEC_update_source, NULL, "type", t,
                                       "update_source.type"))
                return im->rc;
            bool none =
                strcmp(hps__conf_imp_val(im, HPS__CONF_SEC_update_source, NULL, "type")->text,
                       "none") == 0;
            off = none ? "update_source.type is none" : NULL;
        }
    }
    if (hps__conf_imp_walk(im, o, "update_source", hps__conf_imp_us_keys, hps__conf_imp_us_keys_n,
                           HPS__CONF_SEC_update_source, NULL, 0, off))
        return im->rc;
    if (json_object_object_get_ex(o, "brokers", &v)) {
        if (off)
            hps__conf_imp_warn(im, "%s: update_source.brokers: not imported: %s", im->jname, off);
        else
            return map_host_list(im, HPS__CONF_SEC_update_source, "brokers", v,
                                 "update_source.brokers", "9092", "Kafka's port 9092 is added");
    }
    return im->rc;
}
