/*
 * conf.c -- loading: raw values (scan.c) to hps_conf_t, with defaults, type
 * and range checks (value.c) and the cross-key rules; hps_conf_get() and
 * hps_conf_free().
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf/internal.h"

/* Where messages go while a configuration is built. */
struct ctx {
    const char *name; /* file name */
    char *err;
    size_t err_len;
};

void *hps__conf_base(const hps_conf_t *conf, hps__conf_sec_t sec, size_t model)
{
    if (sec == HPS__CONF_SEC_model)
        return &conf->models[model];
    return (char *)conf + hps__conf_sections[sec].offset;
}

static hps_err_t oom(struct ctx *c)
{
    hps__conf_msg(c->err, c->err_len, "%s: out of memory", c->name);
    return -ENOMEM;
}

/* ---- One key -------------------------------------------------------------- */

/* Parse the value of key ki (from the file, else its default) into base. */
static hps_err_t build_key(struct ctx *c, int ki, const struct hps__conf_scan_sec *ss,
                           const char *sec_name, void *base, size_t ntables,
                           struct hps__conf_inst_meta *meta)
{
    const struct hps__conf_key *k = &hps__conf_keys[ki];
    const struct hps__conf_raw *raw = ss ? &ss->raw[ki] : NULL;
    bool is_auto = false, no_mem = false;
    char *dflt = NULL;
    struct hps__conf_buf msg = {0};

    if (!raw || !raw->value) {
        dflt = hps__conf_value_default(k, ntables, &no_mem);
        if (no_mem)
            return oom(c);
        if (!dflt) {
            hps__conf_msg(c->err, c->err_len, "%s:%u: [%s] %s: missing required key", c->name,
                          meta->header_line, sec_name, k->name);
            return HPS_ECONFIG;
        }
    }
    const char *text = dflt ? dflt : raw->value;
    uint32_t line = dflt ? 0 : raw->first_line;
    hps_err_t rc = hps__conf_value_parse(k, text, base, ntables, &is_auto, &msg);
    if (rc == HPS_ECONFIG)
        hps__conf_msg(c->err, c->err_len, "%s:%u: [%s] %s = %s: %s", c->name,
                      line ? line : meta->header_line, sec_name, k->name,
                      hps__conf_masked(k->check == HPS__CONF_CHECK_secret, text),
                      hps__conf_buf_str(&msg));
    else if (rc)
        oom(c);
    meta->line[ki] = line;
    meta->is_auto[ki] = is_auto;
    hps__conf_buf_fini(&msg);
    free(dflt);
    return rc;
}

static hps_err_t build_section(struct ctx *c, hps__conf_sec_t sec,
                               const struct hps__conf_scan_sec *ss, void *base,
                               struct hps__conf_inst_meta *meta)
{
    meta->header_line = ss ? ss->header_line : 0;
    for (int ki = 0; ki < HPS__CONF_NKEYS; ki++) {
        if (hps__conf_keys[ki].sec != sec)
            continue;
        hps_err_t rc = build_key(c, ki, ss, hps__conf_sections[sec].name, base, 0, meta);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- Cross-key rules ------------------------------------------------------ */

/*
 * Report that keys a and b of a section break a rule: a must be `rel` b,
 * i.e. b must be `converse` a ("at most" / "at least", "different from").
 * The key at fault is the one the file sets: a, unless only b is set (a
 * then has its default, which the message says, as the user never wrote
 * it).  The message names the file, that key's line (else the section
 * header's), the key, its value and what it may be: its own range and the
 * rule, e.g. "t.ini:2: [distributed_db] num_partitions = 2: must be an
 * integer in [1, 256] and at least num_node_connections (5, its default: the
 * file does not set num_node_connections)".
 */
static hps_err_t rule_error(struct ctx *c, const hps_conf_t *conf, hps__conf_sec_t sec,
                            size_t model, const char *a, const char *b, const char *rel,
                            const char *converse)
{
    const struct hps__conf_inst_meta *m =
        sec == HPS__CONF_SEC_model ? &conf->meta->model[model] : &conf->meta->global[sec];
    int ka = hps__conf_key_find(sec, a), kb = hps__conf_key_find(sec, b);
    bool blame_b = !m->line[ka] && m->line[kb];
    int kx = blame_b ? kb : ka, ky = blame_b ? ka : kb;
    uint32_t line = m->line[kx] ? m->line[kx] : m->line[ky] ? m->line[ky] : m->header_line;
    struct hps__conf_buf vx = {0}, vy = {0}, allowed = {0};
    const void *base = hps__conf_base(conf, sec, model);
    char sec_name[160];

    if (sec == HPS__CONF_SEC_model)
        snprintf(sec_name, sizeof(sec_name), "model.%s", conf->models[model].name);
    else
        snprintf(sec_name, sizeof(sec_name), "%s", hps__conf_sections[sec].name);
    hps__conf_value_format(&hps__conf_keys[kx], base, true, &vx); /* true: a secret is masked */
    hps__conf_value_format(&hps__conf_keys[ky], base, true, &vy);
    hps__conf_value_allowed(&hps__conf_keys[kx], &allowed);
    hps__conf_msg(c->err, c->err_len, "%s:%u: [%s] %s = %s: must be %s and %s %s (%s%s%s)", c->name,
                  line, sec_name, hps__conf_keys[kx].name, hps__conf_buf_str(&vx),
                  hps__conf_buf_str(&allowed), blame_b ? converse : rel, hps__conf_keys[ky].name,
                  hps__conf_buf_str(&vy),
                  m->line[ky] ? "" : ", its default: the file does not set ",
                  m->line[ky] ? "" : hps__conf_keys[ky].name);
    hps__conf_buf_fini(&vx);
    hps__conf_buf_fini(&vy);
    hps__conf_buf_fini(&allowed);
    return HPS_ECONFIG;
}

static hps_err_t check_globals(struct ctx *c, const hps_conf_t *conf)
{
    if (conf->distributed_db.num_node_connections > conf->distributed_db.num_partitions)
        return rule_error(c, conf, HPS__CONF_SEC_distributed_db, 0, "num_node_connections",
                          "num_partitions", "at most", "at least");
    if (conf->volatile_db.allocation_rate > conf->volatile_db.shared_memory_size)
        return rule_error(c, conf, HPS__CONF_SEC_volatile_db, 0, "allocation_rate",
                          "shared_memory_size", "at most", "at least");
    if (conf->update_source.key_bytes != 4 && conf->update_source.key_bytes != 8) {
        int ki = hps__conf_key_find(HPS__CONF_SEC_update_source, "key_bytes");
        hps__conf_msg(c->err, c->err_len, "%s:%u: [update_source] key_bytes = %lld: must be 4 or 8",
                      c->name, conf->meta->global[HPS__CONF_SEC_update_source].line[ki],
                      (long long)conf->update_source.key_bytes);
        return HPS_ECONFIG;
    }
    /* Workers take a coordinator whose heartbeat is older than
     * worker_timeout_ms for gone: a beat less often than that made a live
     * one look dead for good (not ready, defaults for every miss), at about
     * that rate it flapped (scale audit). */
    if (conf->hps.heartbeat_interval_ms * 2 > conf->hps.worker_timeout_ms)
        return rule_error(c, conf, HPS__CONF_SEC_hps, 0, "heartbeat_interval_ms",
                          "worker_timeout_ms", "at most half of", "at least twice");
    if (conf->worker.metrics_port == conf->worker.http_port)
        return rule_error(c, conf, HPS__CONF_SEC_worker, 0, "metrics_port", "http_port",
                          "different from", "different from");
    return 0;
}

/* The tables of models 0..mi fit the volatile DB's table directory. */
static hps_err_t check_table_count(struct ctx *c, const hps_conf_t *conf, size_t mi)
{
    size_t total = 0;
    for (size_t i = 0; i <= mi; i++)
        total += conf->models[i].num_tables;
    if (total <= HPS_CONF_MAX_TABLES)
        return 0;
    const hps_conf_model_t *m = &conf->models[mi];
    uint32_t line =
        conf->meta->model[mi].line[hps__conf_key_find(HPS__CONF_SEC_model, "sparse_files")];
    char above[64] = "";
    if (total > m->num_tables)
        snprintf(above, sizeof(above), ", %zu with the models above it", total);
    hps__conf_msg(
        c->err, c->err_len,
        "%s:%u: [model.%s] sparse_files: %zu tables%s: the models of a file may have at most "
        "%d tables in all (the volatile DB's table directory)",
        c->name, line ? line : conf->meta->model[mi].header_line, m->name, m->num_tables, above,
        HPS_CONF_MAX_TABLES);
    return HPS_ECONFIG;
}

/* Table names are tags (hps_et.<model>.<table>): unique within a model. */
static hps_err_t check_model(struct ctx *c, const hps_conf_t *conf, size_t mi)
{
    const hps_conf_model_t *m = &conf->models[mi];
    int ki = hps__conf_key_find(HPS__CONF_SEC_model, "embedding_table_names");
    if (check_table_count(c, conf, mi))
        return HPS_ECONFIG;

    for (size_t i = 1; i < m->embedding_table_names_len; i++) {
        for (size_t j = 0; j < i; j++) {
            if (strcmp(m->embedding_table_names[i], m->embedding_table_names[j]) != 0)
                continue;
            uint32_t line = conf->meta->model[mi].line[ki];
            struct hps__conf_buf v = {0};
            hps__conf_value_format(&hps__conf_keys[ki], m, false, &v);
            hps__conf_msg(
                c->err, c->err_len,
                "%s:%u: [model.%s] embedding_table_names = %s: entry %zu (%s) repeats entry "
                "%zu; table names must be unique",
                c->name, line ? line : conf->meta->model[mi].header_line, m->name,
                hps__conf_buf_str(&v), i + 1, m->embedding_table_names[i], j + 1);
            hps__conf_buf_fini(&v);
            return HPS_ECONFIG;
        }
    }
    return 0;
}

/* ---- Models ---------------------------------------------------------------- */

/* sparse_files first: its length is T, which every per-table list must match. */
static hps_err_t build_model(struct ctx *c, const struct hps__conf_scan_sec *ss,
                             hps_conf_model_t *m, struct hps__conf_inst_meta *meta)
{
    int sf = hps__conf_key_find(HPS__CONF_SEC_model, "sparse_files");

    meta->header_line = ss->header_line;
    m->name = strdup(ss->name + strlen("model."));
    if (!m->name)
        return oom(c);
    hps_err_t rc = build_key(c, sf, ss, ss->name, m, 0, meta);
    if (rc)
        return rc;
    m->num_tables = m->sparse_files_len;
    for (int ki = 0; ki < HPS__CONF_NKEYS; ki++) {
        if (hps__conf_keys[ki].sec != HPS__CONF_SEC_model || ki == sf)
            continue;
        rc = build_key(c, ki, ss, ss->name, m, m->num_tables, meta);
        if (rc)
            return rc;
    }
    return 0;
}

static hps_err_t build_models(struct ctx *c, const struct hps__conf_scan *scan, hps_conf_t *conf)
{
    if (scan->nmodels == 0)
        return 0;
    conf->models = calloc(scan->nmodels, sizeof(*conf->models));
    conf->meta->model = calloc(scan->nmodels, sizeof(*conf->meta->model));
    if (!conf->models || !conf->meta->model)
        return oom(c);
    conf->num_models = scan->nmodels;
    size_t mi = 0;
    for (size_t i = 0; i < scan->nsecs; i++) {
        if (scan->secs[i]->sec != HPS__CONF_SEC_model)
            continue;
        hps_err_t rc = build_model(c, scan->secs[i], &conf->models[mi], &conf->meta->model[mi]);
        if (!rc)
            rc = check_model(c, conf, mi);
        if (rc)
            return rc;
        mi++;
    }
    return 0;
}

/* ---- Loading ---------------------------------------------------------------- */

static const struct hps__conf_scan_sec *find_global(const struct hps__conf_scan *scan,
                                                    hps__conf_sec_t sec)
{
    for (size_t i = 0; i < scan->nsecs; i++)
        if (scan->secs[i]->sec == sec)
            return scan->secs[i];
    return NULL;
}

static hps_err_t build(struct ctx *c, const struct hps__conf_scan *scan, hps_conf_t *conf)
{
    for (int s = 0; s < HPS__CONF_NGLOBAL; s++) {
        hps_err_t rc =
            build_section(c, (hps__conf_sec_t)s, find_global(scan, (hps__conf_sec_t)s),
                          hps__conf_base(conf, (hps__conf_sec_t)s, 0), &conf->meta->global[s]);
        if (rc)
            return rc;
    }
    hps_err_t rc = build_models(c, scan, conf);
    /* allocation_rate's default (256 MiB) never exceeds shared_memory_size:
     * a small segment needs no second setting.  Set in the file, it must be
     * at most the segment (check_globals); a step is cut at the segment's
     * end. */
    hps_conf_volatile_db_t *v = &conf->volatile_db;
    int ka = hps__conf_key_find(HPS__CONF_SEC_volatile_db, "allocation_rate");
    if (!conf->meta->global[HPS__CONF_SEC_volatile_db].line[ka] &&
        v->allocation_rate > v->shared_memory_size)
        v->allocation_rate = v->shared_memory_size;
    /* type = disabled (HugeCTR's volatile DB turned off, e.g. Redis only):
     * the shared-memory volatile DB that every lookup goes through holds no
     * rows of its own, whatever the section's other keys say (HugeCTR
     * applied them to the database that is off). */
    if (v->type == HPS_CONF_VDB_DISABLED) {
        v->initial_cache_rate = 0;
        v->cache_missed_embeddings = false;
    }
    return rc ? rc : check_globals(c, conf);
}

static hps_err_t load_text(const char *text, size_t len, const char *name, hps_conf_t **ret_conf,
                           char *err, size_t err_len)
{
    struct ctx c = {.name = name, .err = err, .err_len = err_len};
    struct hps__conf_scan scan;
    struct hps__conf_cloc loc;
    hps_conf_t *conf = NULL;

    hps_err_t rc = hps__conf_scan(text, len, name, &scan, err, err_len);
    if (rc)
        return rc;
    conf = calloc(1, sizeof(*conf));
    if (conf) {
        conf->meta = calloc(1, sizeof(*conf->meta));
        conf->source = strdup(name);
    }
    hps__conf_cloc_enter(&loc);
    rc = conf && conf->meta && conf->source ? build(&c, &scan, conf) : oom(&c);
    hps__conf_cloc_leave(&loc);
    hps__conf_scan_fini(&scan);
    if (rc) {
        hps_conf_free(conf);
        return rc;
    }
    *ret_conf = conf;
    return 0;
}

hps_err_t hps_conf_load_string(const char *text, const char *name, hps_conf_t **ret_conf, char *err,
                               size_t err_len)
{
    hps__conf_msg(err, err_len, "%s", "");
    if (!text || !ret_conf) {
        hps__conf_msg(err, err_len, "hps_conf_load_string: NULL argument");
        return HPS_EINVAL;
    }
    return load_text(text, strlen(text), name ? name : "<string>", ret_conf, err, err_len);
}

/** Largest configuration file read (a guard against /dev/zero and the like). */
#define CONF_FILE_MAX (16u << 20)

/* Read a whole configuration file, a regular file of at most CONF_FILE_MAX
 * bytes.  O_NONBLOCK: opening a FIFO that nobody writes would otherwise
 * wait forever; for a regular file it changes nothing.  -EISDIR,
 * -ENODEV (a device), -EINVAL (a FIFO or socket: *ret_kind says which),
 * -EFBIG. */
static hps_err_t read_file(const char *path, char **ret_text, size_t *ret_len,
                           const char **ret_kind)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    char *text = NULL;
    size_t len = 0, cap = 0;
    hps_err_t rc = 0;

    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        if (S_ISDIR(st.st_mode))
            rc = -EISDIR;
        else if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
            rc = -ENODEV;
        else
            rc = -EINVAL;
        *ret_kind = hps_file_kind(st.st_mode);
        goto out;
    }
    for (;;) {
        if (len >= CONF_FILE_MAX) {
            rc = -EFBIG;
            goto out;
        }
        if (len + 1 >= cap) {
            cap = cap ? cap * 2 : 4096;
            char *t = realloc(text, cap);
            if (!t) {
                rc = -ENOMEM;
                goto out;
            }
            text = t;
        }
        ssize_t n = read(fd, text + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            goto out;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    text[len] = '\0';
out:
    close(fd);
    if (rc) {
        free(text);
        return rc;
    }
    *ret_text = text;
    *ret_len = len;
    return 0;
}

hps_err_t hps__conf_read_file(const char *path, char **ret_text, size_t *ret_len, char *err,
                              size_t err_len)
{
    const char *kind = "";
    hps_err_t rc = read_file(path, ret_text, ret_len, &kind);

    if (rc == -ENODEV)
        hps__conf_msg(err, err_len, "cannot read %s: a device, not a configuration file", path);
    else if (rc == -EINVAL)
        hps__conf_msg(err, err_len, "cannot read %s: not a regular file (%s)", path, kind);
    else if (rc == -EFBIG)
        hps__conf_msg(err, err_len, "cannot read %s: larger than %u MiB, not a configuration file",
                      path, CONF_FILE_MAX >> 20);
    else if (rc)
        hps__conf_msg(err, err_len, "cannot read %s: %s", path, hps_strerror(rc));
    return rc;
}

hps_err_t hps_conf_load(const char *path, hps_conf_t **ret_conf, char *err, size_t err_len)
{
    char *text;
    size_t len;

    hps__conf_msg(err, err_len, "%s", "");
    if (!path || !ret_conf) {
        hps__conf_msg(err, err_len, "hps_conf_load: NULL argument");
        return HPS_EINVAL;
    }
    hps_err_t rc = hps__conf_read_file(path, &text, &len, err, err_len);
    if (rc)
        return rc;
    rc = load_text(text, len, path, ret_conf, err, err_len);
    free(text);
    return rc;
}

hps_err_t hps_conf_read_file(const char *path, char **ret_text, char *err, size_t err_len)
{
    size_t len;

    hps__conf_msg(err, err_len, "%s", "");
    if (!path || !ret_text) {
        hps__conf_msg(err, err_len, "hps_conf_read_file: NULL argument");
        return HPS_EINVAL;
    }
    char *text;
    hps_err_t rc = hps__conf_read_file(path, &text, &len, err, err_len);
    const char *nul = rc ? NULL : memchr(text, '\0', len);
    if (nul) { /* as the scan says it: the text must load as hps_conf_load() loads it */
        unsigned line = 1;
        for (const char *p = text; p < nul; p++)
            line += *p == '\n';
        hps__conf_msg(err, err_len, "%s:%u: the line contains a NUL byte", path, line);
        free(text);
        return HPS_ECONFIG;
    }
    if (!rc)
        *ret_text = text;
    return rc;
}

/* ---- Free ------------------------------------------------------------------- */

void hps_conf_free(hps_conf_t *conf)
{
    if (!conf)
        return;
    for (int ki = 0; ki < HPS__CONF_NKEYS; ki++) {
        const struct hps__conf_key *k = &hps__conf_keys[ki];
        if (k->sec != HPS__CONF_SEC_model) {
            hps__conf_value_free(k, hps__conf_base(conf, k->sec, 0));
            continue;
        }
        for (size_t m = 0; m < conf->num_models; m++)
            hps__conf_value_free(k, &conf->models[m]);
    }
    for (size_t m = 0; m < conf->num_models; m++)
        free((char *)conf->models[m].name);
    if (conf->meta)
        free(conf->meta->model);
    free(conf->meta);
    free(conf->models);
    free((char *)conf->source);
    free(conf);
}

void hps_conf_keep_models(hps_conf_t *conf, const bool *keep)
{
    size_t n = 0;
    for (size_t m = 0; m < conf->num_models; m++) {
        if (!keep[m]) {
            for (int ki = 0; ki < HPS__CONF_NKEYS; ki++)
                if (hps__conf_keys[ki].sec == HPS__CONF_SEC_model)
                    hps__conf_value_free(&hps__conf_keys[ki], &conf->models[m]);
            free((char *)conf->models[m].name);
            continue;
        }
        conf->models[n] = conf->models[m];
        conf->meta->model[n++] = conf->meta->model[m];
    }
    conf->num_models = n;
}

/* ---- Access ------------------------------------------------------------------ */

const hps_conf_model_t *hps_conf_model_find(const hps_conf_t *conf, const char *name)
{
    for (size_t i = 0; conf && name && i < conf->num_models; i++)
        if (strcmp(conf->models[i].name, name) == 0)
            return &conf->models[i];
    return NULL;
}

hps_err_t hps__conf_dotted_split(const char *dotted, hps__conf_sec_t *ret_sec, char **ret_sec_name,
                                 int *ret_key)
{
    bool model = strncmp(dotted, "model.", 6) == 0;
    const char *dot = model ? strrchr(dotted, '.') : strchr(dotted, '.');
    bool bad_model;

    if (!dot || dot == dotted + 5)
        return HPS_ENOTFOUND;
    char *sec_name = hps__conf_strndup(dotted, (size_t)(dot - dotted));
    if (!sec_name)
        return -ENOMEM;
    int sec = hps__conf_sec_find(sec_name, &bad_model);
    int ki = sec < 0 ? -1 : hps__conf_key_find((hps__conf_sec_t)sec, dot + 1);
    if (ki < 0) {
        free(sec_name);
        return HPS_ENOTFOUND;
    }
    *ret_sec = (hps__conf_sec_t)sec;
    *ret_sec_name = sec_name;
    *ret_key = ki;
    return 0;
}

/* Resolve a dotted key against a loaded configuration. */
static hps_err_t lookup(const hps_conf_t *conf, const char *dotted, const void **ret_base,
                        const struct hps__conf_inst_meta **ret_meta, int *ret_key)
{
    hps__conf_sec_t sec;
    char *sec_name;
    int ki;
    hps_err_t rc = hps__conf_dotted_split(dotted, &sec, &sec_name, &ki);

    if (rc)
        return rc;
    if (sec != HPS__CONF_SEC_model) {
        *ret_base = hps__conf_base(conf, sec, 0);
        *ret_meta = &conf->meta->global[sec];
    } else {
        const hps_conf_model_t *m = hps_conf_model_find(conf, sec_name + strlen("model."));
        if (!m) {
            free(sec_name);
            return HPS_ENOTFOUND;
        }
        *ret_base = m;
        *ret_meta = &conf->meta->model[m - conf->models];
    }
    free(sec_name);
    *ret_key = ki;
    return 0;
}

hps_err_t hps_conf_get(const hps_conf_t *conf, const char *key, char *buf, size_t len)
{
    const void *base;
    const struct hps__conf_inst_meta *meta;
    int ki;
    struct hps__conf_buf v = {0};

    if (!conf || !key || !buf || len == 0)
        return HPS_EINVAL;
    hps_err_t rc = lookup(conf, key, &base, &meta, &ki);
    if (rc)
        return rc;
    struct hps__conf_cloc loc;
    hps__conf_cloc_enter(&loc);
    hps__conf_value_format(&hps__conf_keys[ki], base, false, &v);
    hps__conf_cloc_leave(&loc);
    if (v.oom) {
        hps__conf_buf_fini(&v);
        return -ENOMEM;
    }
    snprintf(buf, len, "%s", hps__conf_buf_str(&v));
    rc = v.len >= len ? -ERANGE : 0;
    hps__conf_buf_fini(&v);
    return rc;
}

hps_err_t hps_conf_is_set(const hps_conf_t *conf, const char *key, bool *ret_set)
{
    const void *base;
    const struct hps__conf_inst_meta *meta;
    int ki;

    if (!conf || !key || !ret_set)
        return HPS_EINVAL;
    hps_err_t rc = lookup(conf, key, &base, &meta, &ki);
    if (rc)
        return rc;
    *ret_set = meta->line[ki] != 0;
    return 0;
}

const char *hps_conf_key_where(const hps_conf_t *conf, const char *key, char *buf, size_t len)
{
    const void *base;
    const struct hps__conf_inst_meta *meta;
    int ki;

    if (!buf || !len)
        return buf;
    buf[0] = '\0';
    if (!conf || !key || lookup(conf, key, &base, &meta, &ki) != 0)
        return buf;
    const char *dot = strrchr(key, '.'); /* lookup found one */
    if (meta->line[ki])
        snprintf(buf, len, "%s:%u: [%.*s] %s", conf->source, meta->line[ki], (int)(dot - key), key,
                 dot + 1);
    else
        snprintf(buf, len, "[%.*s] %s", (int)(dot - key), key, dot + 1);
    return buf;
}
