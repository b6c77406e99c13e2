/*
 * import_json.h -- what the ps.json import's files share (import_json.c:
 * JSON values, models, the whole file; import_json_keys.c: the key tables
 * and their walk; import_json_db.c: the database and update source
 * objects).  Private to import_json*.c.
 */
#ifndef HPS_CONF_IMPORT_JSON_H
#define HPS_CONF_IMPORT_JSON_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

#include "conf/internal.h"

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

#define NKEYS(t) (sizeof(t) / sizeof((t)[0]))

/* import_json_keys.c: the keys of each JSON object, with their counts. */
extern const struct jkey hps__conf_imp_top_keys[];
extern const size_t hps__conf_imp_top_keys_n;
extern const struct jkey hps__conf_imp_vdb_keys[];
extern const size_t hps__conf_imp_vdb_keys_n;
extern const struct jkey hps__conf_imp_pdb_keys[];
extern const size_t hps__conf_imp_pdb_keys_n;
extern const struct jkey hps__conf_imp_us_keys[];
extern const size_t hps__conf_imp_us_keys_n;
extern const struct jkey hps__conf_imp_model_keys[];
extern const size_t hps__conf_imp_model_keys_n;

/* import_json_keys.c: the entry of name in tab (n entries), or NULL. */
const struct jkey *hps__conf_imp_jkey_find(const struct jkey *tab, size_t n, const char *name);
/*
 * import_json_keys.c: walk the keys of object o (at `path`): J_MAP keys go
 * to section sec (or [volatile_db] / [distributed_db] for the keys of one
 * database kind); a database that is off (off_why) or of another kind
 * (kind: ONLY_* bits) gets its keys listed instead.  J_CODE keys are the
 * caller's.
 */
hps_err_t hps__conf_imp_walk(struct hps__conf_imp *im, json_object *o, const char *path,
                             const struct jkey *tab, size_t n, hps__conf_sec_t sec,
                             struct hps__conf_imodel *m, unsigned kind, const char *off_why);

/* import_json.c: the JSON text of v, for messages (at most ~200 bytes). */
void hps__conf_imp_shown_json(json_object *v, char *buf, size_t len);
/* import_json.c: map JSON value v (at `path`) to `key` of section sec (of
 * model m). */
hps_err_t hps__conf_imp_map_json(struct hps__conf_imp *im, hps__conf_sec_t sec,
                                 struct hps__conf_imodel *m, const char *key, json_object *v,
                                 const char *path);
/* import_json.c: the string value of v, or NULL after reporting that it is
 * not one. */
const char *hps__conf_imp_json_str(struct hps__conf_imp *im, json_object *v, const char *path);

/* import_json_db.c: a volatile DB object (volatile_db, or v3.3's
 * cpu_memory_db / distributed_db): see there. */
hps_err_t hps__conf_imp_do_vdb(struct hps__conf_imp *im, json_object *o, const char *path,
                               unsigned kinds, bool sole);
/* import_json_db.c: the persistent_db object. */
hps_err_t hps__conf_imp_do_pdb(struct hps__conf_imp *im, json_object *o);
/* import_json_db.c: the update_source object. */
hps_err_t hps__conf_imp_do_update_source(struct hps__conf_imp *im, json_object *o);

#endif
