/*
 * import.c -- hps_conf_import(): a HugeCTR ps.json (import_json.c) and
 * Triton config.pbtxt files (triton.c) to HPS INI text.
 *
 * HOW IT WORKS.  Every input value is first written as the INI would spell
 * it ("raw"), then parsed with the INI's own value parser into a scratch
 * struct (value.c: type, range, one entry per table) and formatted back, so
 * what is stored is the canonical INI text, and a bad value is reported
 * against the input that gave it ("ps.json: models[0].gpucacheper = 1.5:
 * must be a number in [0, 1]").  Values are kept per (section, key) with
 * the name of their source.  After the ps.json, each config.pbtxt applies
 * to its model.  The INI is then written in schema order, one key per
 * line, remembering the source of each line, and loaded whole as an INI
 * file (hps_conf_load_string()): its cross-key rules name a line, which
 * leads back to the input.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "conf/internal.h"

/* Record an input error (HPS_ECONFIG), the first only. */
hps_err_t hps__conf_imp_fail(struct hps__conf_imp *im, const char *fmt, ...)
{
    va_list ap;

    if (!im->rc && im->err && im->err_len) {
        va_start(ap, fmt);
        vsnprintf(im->err, im->err_len, fmt, ap);
        va_end(ap);
    }
    if (!im->rc)
        im->rc = HPS_ECONFIG;
    return im->rc;
}

hps_err_t hps__conf_imp_oom(struct hps__conf_imp *im)
{
    if (!im->rc)
        hps__conf_msg(im->err, im->err_len, "%s: out of memory", im->jname);
    im->rc = -ENOMEM;
    return im->rc;
}

/* Append one warning line. */
void hps__conf_imp_warn(struct hps__conf_imp *im, const char *fmt, ...)
{
    char line[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    hps__conf_buf_puts(&im->warn, line);
    hps__conf_buf_puts(&im->warn, "\n");
}

static struct hps__conf_isec *sec_of(struct hps__conf_imp *im, hps__conf_sec_t sec,
                                     struct hps__conf_imodel *m)
{
    return sec == HPS__CONF_SEC_model ? &m->s : &im->g[sec];
}

struct hps__conf_ival *hps__conf_imp_val(struct hps__conf_imp *im, hps__conf_sec_t sec,
                                         struct hps__conf_imodel *m, const char *key)
{
    return &sec_of(im, sec, m)->v[hps__conf_key_find(sec, key)];
}

/* ---- Storing a value --------------------------------------------------------- */

/* Why s cannot be an INI value (or list entry), or NULL: the INI has no
 * quoting, so blanks at the ends, line breaks and " ;" (a comment) cannot
 * be written, nor a comma inside a list entry. */
const char *hps__conf_ini_unsafe(const char *s, bool list_entry)
{
    size_t n = strlen(s);

    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            return "it contains a control character";
        if (c == ';' && (i == 0 || s[i - 1] == ' ' || s[i - 1] == '\t'))
            return "it contains \" ;\", which starts an INI comment";
        if (c == ',' && list_entry)
            return "it contains a comma, the INI list separator";
    }
    if (n && (s[0] == ' ' || s[n - 1] == ' '))
        return "it begins or ends with a blank";
    return NULL;
}

/* Check each entry of a list value on its own, so that a bad one is named
 * by its index from 0, as the inputs count (ps.json: models[0].x[1],
 * config.pbtxt: gpus: [0, 1]), not from 1 as the INI's messages do. */
static hps_err_t check_entries(struct hps__conf_imp *im, const struct hps__conf_key *k,
                               const char *raw, const char *src, const char *shown)
{
    size_t n;
    bool oom;
    struct hps__conf_buf msg = {0};
    char **items = hps__conf_list_split(raw, k->type == HPS__CONF_T_REGEXES, &n, &oom);

    if (oom)
        return hps__conf_imp_oom(im);
    for (size_t i = 0; i < n && !im->rc; i++) {
        hps_err_t rc = hps__conf_value_check_entry(k, items[i], &msg);
        bool secret = k->check == HPS__CONF_CHECK_secret;
        if (rc == -ENOMEM)
            hps__conf_imp_oom(im);
        else if (rc && !*items[i])
            hps__conf_imp_fail(im, "%s = %s: entry %zu is empty", src,
                               hps__conf_masked(secret, shown), i);
        else if (rc)
            hps__conf_imp_fail(im, "%s = %s: entry %zu (%s) %s", src,
                               hps__conf_masked(secret, shown), i,
                               hps__conf_masked(secret, items[i]), hps__conf_buf_str(&msg));
    }
    hps__conf_buf_fini(&msg);
    hps__conf_list_free(items, n);
    return im->rc;
}

/*
 * Check raw (an INI value) for `key` of section sec (of model m) with the
 * INI parser and store its canonical form, replacing an earlier value.
 * src names the input, shown is the value as the input wrote it.
 */
hps_err_t hps__conf_imp_put(struct hps__conf_imp *im, hps__conf_sec_t sec,
                            struct hps__conf_imodel *m, const char *key, const char *raw,
                            const char *src, const char *shown)
{
    int ki = hps__conf_key_find(sec, key);
    const struct hps__conf_key *k = &hps__conf_keys[ki];
    void *scratch =
        calloc(1, sec == HPS__CONF_SEC_model ? sizeof(hps_conf_model_t) : sizeof(hps_conf_t));
    struct hps__conf_buf msg = {0}, canon = {0};
    bool is_auto = false;

    if (!scratch)
        return hps__conf_imp_oom(im);
    if (hps__conf_is_list(k->type) && check_entries(im, k, raw, src, shown)) {
        free(scratch);
        return im->rc;
    }
    void *base = sec == HPS__CONF_SEC_model ? scratch : hps__conf_base(scratch, sec, 0);
    hps_err_t rc = hps__conf_value_parse(k, raw, base, m ? m->ntables : 0, &is_auto, &msg);
    if (rc == 0) {
        hps__conf_buf_add(&canon, "", 0);
        hps__conf_value_format(k, base, false, &canon);
        hps__conf_value_free(k, base);
    }
    free(scratch);
    if (rc == HPS_ECONFIG)
        hps__conf_imp_fail(im, "%s = %s: %s", src,
                           hps__conf_masked(k->check == HPS__CONF_CHECK_secret, shown),
                           hps__conf_buf_str(&msg));
    hps__conf_buf_fini(&msg);
    char *s = rc ? NULL : strdup(src);
    if (!rc && (canon.oom || !s))
        rc = -ENOMEM;
    if (rc) {
        free(s);
        hps__conf_buf_fini(&canon);
        return rc == -ENOMEM ? hps__conf_imp_oom(im) : rc;
    }
    struct hps__conf_ival *v = &sec_of(im, sec, m)->v[ki];
    free(v->text);
    free(v->src);
    v->text = canon.p;
    v->src = s;
    return 0;
}

/* ---- Triton config.pbtxt ------------------------------------------------------------ */

/* The devices of a canonical INI list ("0, 1"): whether g is one of them. */
static bool in_list(const char *list, int64_t g)
{
    for (const char *p = list; p && *p;) {
        char *end;
        if (strtoll(p, &end, 10) == g)
            return true;
        p = *end ? end + 2 : end;
    }
    return false;
}

/* A parameter that sets an INI key; it overrides the ps.json's value. */
static hps_err_t apply_param(struct hps__conf_imp *im, struct hps__conf_imodel *m, const char *file,
                             const struct hps__conf_triton_param *tp)
{
    bool global = strcmp(tp->ini, "hps.supportlonglong") == 0;
    hps__conf_sec_t sec = global ? HPS__CONF_SEC_hps : HPS__CONF_SEC_model;
    const char *key = global ? "supportlonglong" : tp->ini;
    struct hps__conf_ival *old = hps__conf_imp_val(im, sec, global ? NULL : m, key);
    char src[512], shown[512], *old_text = old->text ? strdup(old->text) : NULL;
    char *old_src = old->src ? strdup(old->src) : NULL;

    snprintf(src, sizeof(src), "%s:%u: parameters %s", file, tp->line, tp->key);
    snprintf(shown, sizeof(shown), "\"%s\"", tp->value);
    const char *why = hps__conf_ini_unsafe(tp->value, false);
    hps_err_t rc = (old->text && !old_text) || (old->src && !old_src) ? hps__conf_imp_oom(im)
                   : why ? hps__conf_imp_fail(im, "%s = %s: %s", src, shown, why)
                         : hps__conf_imp_put(im, sec, m, key, tp->value, src, shown);
    if (!rc && old_text && strcmp(old_text, old->text) != 0) {
        if (global)
            rc = hps__conf_imp_fail(im, "%s = %s: contradicts %s = %s", src, shown, old_src,
                                    old_text);
        else
            hps__conf_imp_warn(im, "%s = %s: overrides %s = %s", src, shown, old_src, old_text);
    }
    free(old_text);
    free(old_src);
    return rc;
}

static hps_err_t do_pbtxt(struct hps__conf_imp *im, const char *path)
{
    struct hps__conf_triton t;
    struct hps__conf_imodel *m = NULL;
    char src[512];

    hps_err_t rc = hps__conf_triton_read(path, &t, &im->warn, im->err, im->err_len);
    if (rc)
        return im->rc = rc;
    for (size_t i = 0; i < im->nmodels && !m; i++)
        if (strcmp(im->models[i].name, t.name) == 0)
            m = &im->models[i];
    if (!m) {
        hps__conf_imp_fail(im, "%s:%u: model \"%s\": the ps.json %s has no model of that name",
                           path, t.name_line ? t.name_line : 1, t.name, im->jname);
    } else if (m->has_pbtxt) {
        hps__conf_imp_fail(im, "%s: model \"%s\" has a config.pbtxt already", path, t.name);
    } else {
        m->has_pbtxt = true;
        const struct hps__conf_ival *mbs =
            hps__conf_imp_val(im, HPS__CONF_SEC_model, m, "max_batch_size");
        if (t.max_batch_size && strcmp(t.max_batch_size, mbs->text ? mbs->text : "64") != 0)
            hps__conf_imp_warn(
                im,
                "%s:%u: max_batch_size = %s: not imported: HugeCTR's hps backend used the "
                "ps.json's (%s)",
                path, t.max_batch_size_line, t.max_batch_size, mbs->text ? mbs->text : "64");
        for (size_t i = 0; i < t.nparams && !im->rc; i++)
            apply_param(im, m, path, &t.params[i]);
    }
    const struct hps__conf_ival *dev =
        m ? hps__conf_imp_val(im, HPS__CONF_SEC_model, m, "deployed_device_list") : NULL;
    if (!im->rc && t.ngpus && dev->text) { /* the ps.json lists the devices: check */
        for (size_t i = 0; i < t.ngpus && !im->rc; i++)
            if (!in_list(dev->text, t.gpus[i]))
                hps__conf_imp_fail(im, "%s:%u: instance_group gpus: device %lld is not in %s (%s)",
                                   path, t.gpus_line, (long long)t.gpus[i], dev->src, dev->text);
    } else if (!im->rc && t.ngpus) {
        struct hps__conf_buf b = {0};
        hps__conf_buf_add(&b, "", 0);
        for (size_t i = 0; i < t.ngpus; i++)
            hps__conf_buf_printf(&b, "%s%lld", i ? ", " : "", (long long)t.gpus[i]);
        snprintf(src, sizeof(src), "%s:%u: instance_group gpus", path, t.gpus_line);
        if (b.oom)
            hps__conf_imp_oom(im);
        else
            hps__conf_imp_put(im, HPS__CONF_SEC_model, m, "deployed_device_list", b.p, src, b.p);
        hps__conf_buf_fini(&b);
    }
    hps__conf_triton_fini(&t);
    return im->rc;
}

/* ---- Writing and checking the INI ----------------------------------------------------- */

struct out {
    struct hps__conf_buf b;
    const char **line_src; /* source of each line (1-based); NULL: not a key line */
    size_t nlines, cap;
};

/* Append one line a b c (b, c may be NULL) from source src. */
static void out_line(struct out *o, const char *src, const char *a, const char *b, const char *c)
{
    if (o->nlines + 2 > o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        const char **n = realloc(o->line_src, cap * sizeof(*n));
        if (!n) {
            o->b.oom = true;
            return;
        }
        o->line_src = n;
        o->cap = cap;
    }
    o->line_src[++o->nlines] = src;
    hps__conf_buf_puts(&o->b, a);
    hps__conf_buf_puts(&o->b, b ? b : "");
    hps__conf_buf_puts(&o->b, c ? c : "");
    hps__conf_buf_puts(&o->b, "\n");
}

static void out_section(struct out *o, const char *name, const struct hps__conf_isec *s,
                        hps__conf_sec_t sec)
{
    bool any = false;

    for (int ki = 0; ki < HPS__CONF_NKEYS && !any; ki++)
        any = hps__conf_keys[ki].sec == sec && s->v[ki].text;
    if (!any)
        return;
    out_line(o, NULL, "", NULL, NULL);
    out_line(o, NULL, "[", name, "]");
    for (int ki = 0; ki < HPS__CONF_NKEYS; ki++)
        if (hps__conf_keys[ki].sec == sec && s->v[ki].text)
            out_line(o, s->v[ki].src, hps__conf_keys[ki].name, *s->v[ki].text ? " = " : " =",
                     s->v[ki].text);
}

/* A file name in a comment line: control characters would end the comment. */
static void out_name(struct out *o, const char *name)
{
    for (const char *p = name; *p; p++)
        hps__conf_buf_add(&o->b, (unsigned char)*p < 0x20 ? "?" : p, 1);
}

static void write_ini(struct hps__conf_imp *im, const char *json_path, const char *const *pbtxt,
                      size_t npbtxt, struct out *o)
{
    hps__conf_buf_puts(&o->b, "; Imported from HugeCTR by hps-conf import: ");
    out_name(o, json_path);
    for (size_t i = 0; i < npbtxt; i++) {
        hps__conf_buf_puts(&o->b, ", ");
        out_name(o, pbtxt[i]);
    }
    out_line(o, NULL, "", NULL, NULL);
    out_line(o, NULL, "; Keys not set here have their defaults (hps-conf show FILE lists them).",
             NULL, NULL);
    for (int s = 0; s < HPS__CONF_NGLOBAL; s++)
        out_section(o, hps__conf_sections[s].name, &im->g[s], (hps__conf_sec_t)s);
    for (size_t i = 0; i < im->nmodels; i++) {
        char name[8 + HPS_CONF_NAME_MAX];
        snprintf(name, sizeof(name), "model.%s", im->models[i].name);
        out_section(o, name, &im->models[i].s, HPS__CONF_SEC_model);
    }
}

/* Load the INI as a file; an error names the input of its line. */
static void validate(struct hps__conf_imp *im, const struct out *o)
{
    static const char name[] = "<imported>";
    char err[1024];
    hps_conf_t *conf = NULL;
    unsigned line = 0;
    int at = 0;

    hps_err_t rc = hps_conf_load_string(o->b.p, name, &conf, err, sizeof(err));
    hps_conf_free(conf);
    if (rc == -ENOMEM)
        hps__conf_imp_oom(im);
    if (rc != HPS_ECONFIG)
        return;
    if (sscanf(err, "<imported>:%u: %n", &line, &at) == 1 && at > 0 && line <= o->nlines &&
        o->line_src[line])
        hps__conf_imp_fail(im, "%s: %s", o->line_src[line], err + at);
    else
        hps__conf_imp_fail(im, "%s: the imported configuration is not valid: %s", im->jname,
                           at > 0 ? err + at : err);
}

static void free_sec(struct hps__conf_isec *s)
{
    for (int ki = 0; ki < HPS__CONF_NKEYS; ki++) {
        free(s->v[ki].text);
        free(s->v[ki].src);
    }
}

static void imp_fini(struct hps__conf_imp *im)
{
    for (int s = 0; s < HPS__CONF_NGLOBAL; s++)
        free_sec(&im->g[s]);
    for (size_t m = 0; m < im->nmodels; m++) {
        free_sec(&im->models[m].s);
        free(im->models[m].name);
    }
    free(im->models);
    hps__conf_buf_fini(&im->warn);
    free(im);
}

hps_err_t hps_conf_import(const char *json_path, const char *const *pbtxt_paths, size_t num_pbtxt,
                          char **ret_ini, char **ret_warnings, char *err, size_t err_len)
{
    struct hps__conf_cloc loc;
    struct out o = {0};

    hps__conf_msg(err, err_len, "%s", "");
    if (!json_path || !ret_ini || !ret_warnings || (num_pbtxt && !pbtxt_paths)) {
        hps__conf_msg(err, err_len, "hps_conf_import: NULL argument");
        return HPS_EINVAL;
    }
    struct hps__conf_imp *im = calloc(1, sizeof(*im));
    if (!im) {
        hps__conf_msg(err, err_len, "%s: out of memory", json_path);
        return -ENOMEM;
    }
    im->jname = json_path;
    im->err = err;
    im->err_len = err_len;
    hps__conf_cloc_enter(&loc);
    hps__conf_import_json(im, json_path);
    for (size_t i = 0; i < num_pbtxt && !im->rc; i++)
        do_pbtxt(im, pbtxt_paths[i]);
    if (!im->rc) {
        hps__conf_import_notes(im);
        write_ini(im, json_path, pbtxt_paths, num_pbtxt, &o);
        if (o.b.oom || im->warn.oom)
            hps__conf_imp_oom(im);
        else
            validate(im, &o);
    }
    hps__conf_cloc_leave(&loc);
    hps_err_t rc = im->rc;
    if (!rc) {
        *ret_ini = o.b.p;
        *ret_warnings = im->warn.len ? im->warn.p : NULL;
        if (im->warn.len)
            im->warn = (struct hps__conf_buf){0};
        o.b.p = NULL;
    }
    hps__conf_buf_fini(&o.b);
    free(o.line_src);
    imp_fini(im);
    return rc;
}
