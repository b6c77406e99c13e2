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
 *
 * This file: JSON values, models, the whole ps.json and its reading.  The
 * key tables and their walk: import_json_keys.c; the database and update
 * source objects: import_json_db.c.
 */
#include <ctype.h>
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/import_json.h"

/** Deepest JSON nesting read (a ps.json has 3 levels). */
#define JSON_MAX_DEPTH 64

/* ---- JSON values --------------------------------------------------------------- */

/* The JSON text of v, for messages (at most ~200 bytes). */
void hps__conf_imp_shown_json(json_object *v, char *buf, size_t len)
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

static enum elem elem_of(const struct hps__conf_key *k)
{
    switch (k->type) {
    case HPS__CONF_T_BOOL:
        return E_BOOL;
    case HPS__CONF_T_INT:
    case HPS__CONF_T_AUTO:
    case HPS__CONF_T_SIZE:
    case HPS__CONF_T_MARGIN:
    case HPS__CONF_T_MODE:
    case HPS__CONF_T_INTS:
    case HPS__CONF_T_TINTS:
        return E_INT;
    case HPS__CONF_T_REAL:
    case HPS__CONF_T_REAL_GT:
    case HPS__CONF_T_TREALS:
        return E_REAL;
    case HPS__CONF_T_REGEXES:
        return E_REGEX;
    default:
        return E_STR;
    }
}

/* Append one JSON scalar as INI text; NULL, or why it cannot be. */
static const char *json_scalar(json_object *v, enum elem e, bool list, struct hps__conf_buf *out)
{
    json_type t = json_object_get_type(v);

    switch (e) {
    case E_BOOL:
        if (t != json_type_boolean)
            return "must be true or false (a JSON boolean)";
        hps__conf_buf_puts(out, json_object_get_boolean(v) ? "true" : "false");
        return NULL;
    case E_INT:
        if (t == json_type_double) {
            double d = json_object_get_double(v);
            if (d != floor(d))
                return "must be an integer";
            if (fabs(d) >= 9.2e18)
                return "is out of range: write integers above 2^63 without a fraction or "
                       "exponent";
            hps__conf_buf_printf(out, "%.0f", d);
            return NULL;
        }
        if (t != json_type_int)
            return "must be an integer (a JSON number)";
        /* read_json refused literals beyond 64 bits, which json-c would
         * have read as the nearest 64-bit integer */
        hps__conf_buf_puts(out, json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
        return NULL;
    case E_REAL:
        if (t != json_type_int && t != json_type_double)
            return "must be a JSON number";
        hps__conf_buf_puts(out, json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
        return NULL;
    default: {
        if (t != json_type_string)
            return "must be a JSON string";
        const char *s = json_object_get_string(v);
        if ((size_t)json_object_get_string_len(v) != strlen(s))
            return "contains a NUL character";
        const char *why = hps__conf_ini_unsafe(s, list && e == E_STR);
        if (why)
            return why;
        if (e == E_REGEX) { /* a comma outside (), [], {} would split the entry */
            size_t n = 0;
            bool no_mem = false;
            char **parts = hps__conf_list_split(s, true, &n, &no_mem);
            bool one = n == 1 && strcmp(parts[0], s) == 0;
            hps__conf_list_free(parts, n);
            if (!one && *s)
                return "it contains a comma outside (), [] or {}, the INI list separator";
        }
        hps__conf_buf_puts(out, s);
        return NULL;
    }
    }
}

/* Map JSON value v (at `path`) to `key` of section sec (of model m). */
hps_err_t hps__conf_imp_map_json(struct hps__conf_imp *im, hps__conf_sec_t sec,
                                 struct hps__conf_imodel *m, const char *key, json_object *v,
                                 const char *path)
{
    const struct hps__conf_key *k = &hps__conf_keys[hps__conf_key_find(sec, key)];
    enum elem e = elem_of(k);
    struct hps__conf_buf raw = {0}, msg = {0};
    char src[512], shown[224];
    const char *why = NULL;

    snprintf(src, sizeof(src), "%s: %s", im->jname, path);
    hps__conf_imp_shown_json(v, shown, sizeof(shown));
    if (k->check == HPS__CONF_CHECK_secret) /* a password: messages never show it */
        snprintf(shown, sizeof(shown), "%s", HPS__CONF_MASK);
    hps__conf_buf_add(&raw, "", 0);
    if (!hps__conf_is_list(k->type)) {
        why = json_scalar(v, e, false, &raw);
    } else if (!json_object_is_type(v, json_type_array)) {
        why = "must be a JSON array";
    } else {
        for (size_t i = 0; i < json_object_array_length(v) && !why; i++) {
            json_object *x = json_object_array_get_idx(v, i);
            hps__conf_buf_puts(&raw, i ? ", " : "");
            size_t at = raw.len;
            why = json_scalar(x, e, true, &raw);
            /* each entry is checked here, so a bad one is named by its JSON
             * path (x[0], from 0), not as the INI's "entry 1" */
            if (!why && !raw.oom && hps__conf_value_check_entry(k, raw.p + at, &msg) == HPS_ECONFIG)
                why = hps__conf_buf_str(&msg);
            if (why) {
                char xs[224];
                hps__conf_imp_shown_json(x, xs, sizeof(xs));
                if (k->check == HPS__CONF_CHECK_secret)
                    snprintf(xs, sizeof(xs), "%s", HPS__CONF_MASK);
                hps__conf_imp_fail(im, "%s[%zu] = %s: %s", src, i, xs, why);
            }
        }
    }
    hps_err_t rc = im->rc;
    if (!rc && why)
        rc = hps__conf_imp_fail(im, "%s = %s: %s", src, shown, why);
    else if (!rc)
        rc =
            raw.oom ? hps__conf_imp_oom(im) : hps__conf_imp_put(im, sec, m, key, raw.p, src, shown);
    hps__conf_buf_fini(&raw);
    hps__conf_buf_fini(&msg); /* after its last use: why may point into it */
    return rc;
}

/* The string value of v, or NULL after reporting that it is not one. */
const char *hps__conf_imp_json_str(struct hps__conf_imp *im, json_object *v, const char *path)
{
    char shown[224];

    if (json_object_is_type(v, json_type_string) &&
        (size_t)json_object_get_string_len(v) == strlen(json_object_get_string(v)))
        return json_object_get_string(v);
    hps__conf_imp_shown_json(v, shown, sizeof(shown));
    hps__conf_imp_fail(im, "%s: %s = %s: must be a JSON string", im->jname, path, shown);
    return NULL;
}

/* ---- Models --------------------------------------------------------------------------- */

/* sparse_files: one local directory per table; sets the table count. */
static hps_err_t do_sparse_files(struct hps__conf_imp *im, struct hps__conf_imodel *m,
                                 json_object *v, const char *p)
{
    if (json_object_is_type(v, json_type_object))
        return hps__conf_imp_fail(
            im,
            "%s: %s: an object (HugeCTR's fused tables) is not accepted: list one "
            "directory per table",
            im->jname, p);
    if (hps__conf_imp_map_json(im, HPS__CONF_SEC_model, m, "sparse_files", v, p))
        return im->rc;
    m->ntables = json_object_array_length(v);
    for (size_t i = 0; i < m->ntables; i++) {
        const char *s = json_object_get_string(json_object_array_get_idx(v, i));
        if (strstr(s, "://"))
            hps__conf_imp_warn(
                im,
                "%s: %s[%zu]: \"%s\" is a remote path (HugeCTR read HDFS, S3 and GCS): "
                "hps-coordinator reads local files only; copy the files and change the path",
                im->jname, p, i, s);
    }
    return 0;
}

/* default_value_for_each_table: HugeCTR padded a short list with 0.0. */
static hps_err_t do_defaults(struct hps__conf_imp *im, struct hps__conf_imodel *m, json_object *v,
                             const char *p)
{
    if (!json_object_is_type(v, json_type_array) || json_object_array_length(v) >= m->ntables)
        return hps__conf_imp_map_json(im, HPS__CONF_SEC_model, m, "default_value_for_each_table", v,
                                      p);
    json_object *padded = json_object_new_array();
    if (!padded)
        return hps__conf_imp_oom(im);
    for (size_t i = 0; i < m->ntables; i++) {
        json_object *x = json_object_array_get_idx(v, i);
        json_object_array_add(padded, x ? json_object_get(x) : json_object_new_double_s(0, "0.0"));
    }
    hps_err_t rc = hps__conf_imp_map_json(im, HPS__CONF_SEC_model, m,
                                          "default_value_for_each_table", padded, p);
    json_object_put(padded);
    return rc;
}

/* Table names are unique within a model; the INI's check would number the
 * entries from 1, so the repeat is named here by JSON path (from 0). */
static hps_err_t check_table_names(struct hps__conf_imp *im, json_object *o, const char *path)
{
    json_object *v;

    if (!json_object_object_get_ex(o, "embedding_table_names", &v) ||
        !json_object_is_type(v, json_type_array))
        return im->rc;
    for (size_t i = 1; i < json_object_array_length(v); i++) {
        const char *s = json_object_get_string(json_object_array_get_idx(v, i));
        for (size_t j = 0; j < i; j++)
            if (strcmp(s, json_object_get_string(json_object_array_get_idx(v, j))) == 0)
                return hps__conf_imp_fail(im,
                                          "%s: %s.embedding_table_names[%zu] = \"%s\": repeats "
                                          "[%zu]; table names must be unique",
                                          im->jname, path, i, s, j);
    }
    return im->rc;
}

static hps_err_t do_model(struct hps__conf_imp *im, json_object *o, size_t i)
{
    struct hps__conf_imodel *m = &im->models[i];
    char path[64], p[128];
    json_object *v;

    snprintf(path, sizeof(path), "models[%zu]", i);
    if (!json_object_is_type(o, json_type_object))
        return hps__conf_imp_fail(im, "%s: %s: must be a JSON object", im->jname, path);
    snprintf(p, sizeof(p), "%s.model", path);
    if (!json_object_object_get_ex(o, "model", &v))
        return hps__conf_imp_fail(im, "%s: %s: missing (the model's name)", im->jname, p);
    const char *name = hps__conf_imp_json_str(im, v, p);
    if (!name)
        return im->rc;
    if (!hps__conf_is_name(name, strlen(name)))
        return hps__conf_imp_fail(im,
                                  "%s: %s = \"%s\": must be a name matching [A-Za-z0-9_-]{1,120}",
                                  im->jname, p, name);
    for (size_t j = 0; j < i; j++)
        if (strcmp(im->models[j].name, name) == 0)
            return hps__conf_imp_fail(im, "%s: %s = \"%s\": models[%zu] has the same name",
                                      im->jname, p, name, j);
    m->name = strdup(name);
    if (!m->name)
        return hps__conf_imp_oom(im);
    snprintf(p, sizeof(p), "%s.sparse_files", path);
    if (!json_object_object_get_ex(o, "sparse_files", &v))
        return hps__conf_imp_fail(im, "%s: %s: missing (one directory per table)", im->jname, p);
    if (do_sparse_files(im, m, v, p))
        return im->rc;
    if (hps__conf_imp_walk(im, o, path, hps__conf_imp_model_keys, hps__conf_imp_model_keys_n,
                           HPS__CONF_SEC_model, m, 0, NULL) ||
        check_table_names(im, o, path))
        return im->rc;
    snprintf(p, sizeof(p), "%s.default_value_for_each_table", path);
    if (json_object_object_get_ex(o, "default_value_for_each_table", &v) &&
        do_defaults(im, m, v, p))
        return im->rc;
    static const char *const required[] = {"embedding_vecsize_per_table",
                                           "maxnum_catfeature_query_per_table_per_sample"};
    for (size_t r = 0; r < NKEYS(required); r++)
        if (!hps__conf_imp_val(im, HPS__CONF_SEC_model, m, required[r])->text)
            return hps__conf_imp_fail(im, "%s: %s.%s: missing (one entry per table)", im->jname,
                                      path, required[r]);
    return 0;
}

/* ---- The whole ps.json ----------------------------------------------------------------- */

static hps_err_t do_models(struct hps__conf_imp *im, json_object *v)
{
    size_t n = json_object_is_type(v, json_type_array) ? json_object_array_length(v) : 0;

    if (n == 0 || n > HPS_CONF_MAX_MODELS)
        return hps__conf_imp_fail(im, "%s: models: must be a JSON array of 1 to %d models",
                                  im->jname, HPS_CONF_MAX_MODELS);
    im->models = calloc(n, sizeof(*im->models));
    if (!im->models)
        return hps__conf_imp_oom(im);
    im->nmodels = n; /* all n are freed, even after a failure in the middle */
    for (size_t i = 0; i < n; i++)
        if (do_model(im, json_object_array_get_idx(v, i), i))
            return im->rc;
    return 0;
}

static hps_err_t do_root(struct hps__conf_imp *im, json_object *root)
{
    json_object *v;
    bool vdb = json_object_object_get_ex(root, "volatile_db", &v);

    if (!json_object_is_type(root, json_type_object))
        return hps__conf_imp_fail(im, "%s: the top level must be a JSON object", im->jname);
    if (!json_object_object_get_ex(root, "models", &v))
        return hps__conf_imp_fail(im, "%s: models: missing (HugeCTR requires it)", im->jname);
    if (!json_object_object_get_ex(root, "supportlonglong", &v))
        hps__conf_imp_warn(
            im,
            "%s: supportlonglong: missing (HugeCTR requires it): the INI default, true "
            "(int64 keys), applies",
            im->jname);
    json_object_object_foreach(root, key, val)
    {
        const struct jkey *jk =
            hps__conf_imp_jkey_find(hps__conf_imp_top_keys, hps__conf_imp_top_keys_n, key);
        bool old = strcmp(key, "cpu_memory_db") == 0 || strcmp(key, "distributed_db") == 0;
        if (!jk || jk->act != J_CODE)
            continue;
        if (old && vdb) {
            hps__conf_imp_warn(
                im,
                "%s: %s: obsolete: HugeCTR v3.3's section, ignored (as by HugeCTR since) "
                "because volatile_db is set",
                im->jname, key);
        } else if (old) {
            hps__conf_imp_warn(
                im,
                "%s: %s: obsolete: HugeCTR v3.3's section (later versions ignore it), "
                "imported as [%s]",
                im->jname, key, key[0] == 'c' ? "volatile_db" : "distributed_db");
            hps__conf_imp_do_vdb(im, val, key, key[0] == 'c' ? ONLY_HASH : ONLY_REDIS,
                                 key[0] == 'c');
        } else if (strcmp(key, "supportlonglong") == 0) {
            hps__conf_imp_map_json(im, HPS__CONF_SEC_hps, NULL, key, val, key);
        } else if (strcmp(key, "volatile_db") == 0) {
            hps__conf_imp_do_vdb(im, val, key, ONLY_HASH | ONLY_REDIS, true);
        } else if (strcmp(key, "persistent_db") == 0) {
            hps__conf_imp_do_pdb(im, val);
        } else if (strcmp(key, "update_source") == 0) {
            hps__conf_imp_do_update_source(im, val);
        } else if (strcmp(key, "models") == 0) {
            do_models(im, val);
        }
        if (im->rc)
            return im->rc;
    }
    return hps__conf_imp_walk(im, root, "", hps__conf_imp_top_keys, hps__conf_imp_top_keys_n,
                              HPS__CONF_SEC_hps, NULL, 0, NULL);
}

/* Notes on what HugeCTR did differently by default (after all inputs). */
void hps__conf_import_notes(struct hps__conf_imp *im)
{
    static const hps__conf_sec_t dbs[] = {HPS__CONF_SEC_volatile_db, HPS__CONF_SEC_distributed_db,
                                          HPS__CONF_SEC_persistent_db};
    const struct hps__conf_ival *us =
        hps__conf_imp_val(im, HPS__CONF_SEC_update_source, NULL, "type");

    for (size_t i = 0; i < im->nmodels; i++) {
        struct hps__conf_imodel *m = &im->models[i];
        if (!hps__conf_imp_val(im, HPS__CONF_SEC_model, m, "deployed_device_list")->text)
            hps__conf_imp_warn(
                im,
                "%s: models[%zu].deployed_device_list: missing (HugeCTR requires it): the "
                "INI default, device 0, applies",
                im->jname, i);
        if (!hps__conf_imp_val(im, HPS__CONF_SEC_model, m, "default_value_for_each_table")->text)
            hps__conf_imp_warn(
                im,
                "%s: models[%zu].default_value_for_each_table: missing (HugeCTR requires it): "
                "the INI default, 0.0 for %s, applies",
                im->jname, i, m->ntables == 1 ? "the table" : "every table");
    }
    if (!us->text || strcmp(us->text, "none") == 0)
        return;
    for (size_t i = 0; i < NKEYS(dbs); i++) {
        const struct hps__conf_ival *type = hps__conf_imp_val(im, dbs[i], NULL, "type");
        bool on =
            type->text ? strcmp(type->text, "disabled") != 0 : dbs[i] == HPS__CONF_SEC_volatile_db;
        if (on && !hps__conf_imp_val(im, dbs[i], NULL, "update_filters")->text)
            hps__conf_imp_warn(
                im,
                "%s: [%s] update_filters: not set: HugeCTR's default (^hps_.+$) matched no "
                "model, so it applied no online updates to this database; the INI default "
                "(.+) applies those of every model",
                im->jname, hps__conf_sections[dbs[i]].name);
    }
}

/* ---- Reading the JSON --------------------------------------------------------------------- */

/* Whether the number token at s[i] (outside strings) is an integer literal
 * that does not fit 64 bits (above 2^64 - 1, or below -2^63); *ret_end:
 * past its digits.  json-c reads such a literal as the nearest 64-bit
 * integer without a word (and 2^64 - 1 is a value HugeCTR writes:
 * overflow_margin's default), so it is refused before parsing. */
static bool wide_literal(const char *s, size_t n, size_t i, size_t *ret_end)
{
    bool neg = s[i] == '-';
    size_t a = i + neg, b = a;
    while (b < n && s[b] >= '0' && s[b] <= '9')
        b++;
    *ret_end = b > i ? b : i + 1;
    bool real = b < n && (s[b] == '.' || s[b] == 'e' || s[b] == 'E');
    const char *lim = neg ? "9223372036854775808" : "18446744073709551615";
    size_t digits = b - a, ll = strlen(lim);
    return !real && (digits > ll || (digits == ll && strncmp(s + a, lim, ll) > 0));
}

/* Blank out // and C-style block comments outside strings (line breaks
 * stay, so positions keep their line); json-c then reads strict JSON.  And
 * *ret_wide: the offset of the first integer literal beyond 64 bits
 * (wide_literal), n when none.  Returns false for a block comment that is
 * not closed. */
static bool scan_text(char *s, size_t n, size_t *ret_wide)
{
    bool in_str = false;

    *ret_wide = n;
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
        } else if ((s[i] == '-' || (s[i] >= '0' && s[i] <= '9')) &&
                   (i == 0 || !(isalnum((unsigned char)s[i - 1]) || s[i - 1] == '.'))) {
            size_t end;
            if (wide_literal(s, n, i, &end) && *ret_wide == n)
                *ret_wide = i;
            i = end - 1;
        }
    }
    return true;
}

static hps_err_t read_json(struct hps__conf_imp *im, const char *path, json_object **ret)
{
    char *text;
    size_t len;
    hps_err_t rc = hps__conf_read_file(path, &text, &len, im->err, im->err_len);

    if (rc)
        return im->rc = rc;
    json_tokener *tok = json_tokener_new_ex(JSON_MAX_DEPTH);
    json_object *root = NULL;
    const char *why = NULL;
    size_t end = len;
    if (!tok) {
        free(text);
        return hps__conf_imp_oom(im);
    }
#ifdef JSON_TOKENER_VALIDATE_UTF8
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
#else
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
#endif
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        memset(text, ' ', 3); /* a UTF-8 byte order mark (editors on Windows write one) */
    size_t wide = len;
    if (!scan_text(text, len, &wide)) {
        why = "a comment is not closed";
    } else if ((end = wide) < len) {
        why = "an integer beyond 64 bits (above 18446744073709551615 or below "
              "-9223372036854775808), which no key accepts";
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
        hps__conf_imp_fail(im, "%s:%u:%u: not valid JSON: %s", path, line, col, why);
        json_object_put(root);
        root = NULL;
    }
    json_tokener_free(tok);
    free(text);
    *ret = root;
    return im->rc;
}

hps_err_t hps__conf_import_json(struct hps__conf_imp *im, const char *path)
{
    json_object *root = NULL;

    if (read_json(im, path, &root) == 0)
        do_root(im, root);
    json_object_put(root);
    return im->rc;
}
