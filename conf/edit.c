/*
 * edit.c -- edit an INI file keeping every other byte: set or remove keys
 * (hps_conf_edit_many(), hps_conf_edit_string()), remove a whole section
 * (hps_conf_remove_section()), and the same on a file, replaced atomically
 * (hps_conf_edit_file(), hps_conf_set_file(), hps_conf_remove_section_file()).
 *
 * The scan (scan.c) gives the lines of each section and key, so an edit is
 * a splice of whole lines: replace the key's lines (its value line and any
 * continuation lines), or insert one line after the last key line of the
 * section, or append a new section, or cut lines out.  On the key's own line
 * only the value changes: indentation, spacing around '=' and an inline
 * comment stay.  Several edits are applied one after the other, each to the
 * text the previous one made; only the final text is validated (so a new
 * model section can get its required keys one by one), like any file, before
 * it is returned or written.
 *
 * What a section owns, when it is removed: its header line, every line up to
 * the next section's header, and the block of comment lines directly above
 * its header (no blank line in between) -- except the comment block directly
 * above the next section's header, which is that section's.  The blank lines
 * before the next section's comments go with the removed section; when the
 * last section of the file is removed, the blank lines before it go too, so
 * the file does not end in blank lines.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf/internal.h"

/* A list value longer than this is written one entry per line. */
#define WRAP_COLUMNS 100

/* One line of the text: [s, s + len) without its '\n'. */
struct line {
    const char *s;
    size_t len;
};

struct lines {
    struct line *v; /* v[i] is line i + 1 */
    size_t n;
};

static bool index_lines(const char *text, struct lines *ret)
{
    size_t n = 0;
    const char *end = text + strlen(text);

    *ret = (struct lines){0};
    for (const char *p = text; p < end; n++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        p = nl ? nl + 1 : end;
    }
    ret->v = calloc(n + 1, sizeof(*ret->v));
    if (!ret->v)
        return false;
    for (const char *p = text; p < end; ret->n++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        ret->v[ret->n] = (struct line){p, nl ? (size_t)(nl - p) : (size_t)(end - p)};
        p = nl ? nl + 1 : end;
    }
    return true;
}

/* Offset just past line l (1-based) and its '\n', if any. */
static size_t after_line(const char *text, const struct lines *li, uint32_t l)
{
    const struct line *x = &li->v[l - 1];
    size_t off = (size_t)(x->s - text) + x->len;

    return text[off] == '\n' ? off + 1 : off;
}

/* The new value: trimmed; refused if inih would read it differently. */
static hps_err_t check_value(const char *key, bool secret, const char *value, char **ret, char *err,
                             size_t err_len)
{
    size_t n = strlen(value);

    while (n && isspace((unsigned char)value[n - 1]))
        n--;
    while (n && isspace((unsigned char)*value)) {
        value++;
        n--;
    }
    for (size_t i = 0; i < n; i++) {
        if (value[i] == '\n' || value[i] == '\r' ||
            (value[i] == ';' && (i == 0 || isspace((unsigned char)value[i - 1])))) {
            hps__conf_msg(err, err_len,
                          "%s = %.*s: a value cannot contain a line break, nor a ';' "
                          "at its start or after a blank (that starts a comment)",
                          key, secret ? (int)strlen(HPS__CONF_MASK) : (int)n,
                          secret ? HPS__CONF_MASK : value);
            return HPS_ECONFIG;
        }
    }
    *ret = hps__conf_strndup(value, n);
    return *ret ? 0 : -ENOMEM;
}

/* prefix + value + suffix, a long list wrapped onto indented lines. */
static void emit(struct hps__conf_buf *out, const struct hps__conf_key *k, const char *prefix,
                 size_t prefix_len, const char *value, const char *suffix, size_t suffix_len,
                 const char *eol)
{
    size_t n = 0;
    bool oom = false;
    char **items = NULL;

    if (hps__conf_is_list(k->type) && prefix_len + strlen(value) > WRAP_COLUMNS)
        items = hps__conf_list_split(value, k->type == HPS__CONF_T_REGEXES, &n, &oom);
    hps__conf_buf_add(out, prefix, prefix_len);
    if (!items)
        hps__conf_buf_puts(out, value);
    for (size_t i = 0; i < n; i++) {
        if (i)
            hps__conf_buf_printf(out, ",%s    ", eol);
        hps__conf_buf_puts(out, items[i]);
    }
    hps__conf_buf_add(out, suffix, suffix_len);
    out->oom |= oom;
    hps__conf_list_free(items, n);
}

/* Replace the lines of an existing key; keep the first line's layout. */
static void replace_key(struct hps__conf_buf *out, const char *text, const struct lines *li,
                        const struct hps__conf_raw *raw, const struct hps__conf_key *k,
                        const char *value, const char *eol)
{
    const struct line *x = &li->v[raw->first_line - 1];
    const char *s = x->s, *e = x->s + x->len;
    const char *scan_end = (e > s && e[-1] == '\r') ? e - 1 : e;
    const char *sep = s + strcspn(s, "=:"); /* the key line has one before e */
    const char *c = sep + 1;
    bool was_space = false;

    /* inih's inline comment: ';' after a blank. */
    while (c < scan_end && !(was_space && *c == ';')) {
        was_space = isspace((unsigned char)*c);
        c++;
    }
    const char *vend = c, *vstart = sep + 1;
    while (vend > sep + 1 && isspace((unsigned char)vend[-1]))
        vend--;
    while (vstart < vend && isspace((unsigned char)*vstart))
        vstart++;
    hps__conf_buf_add(out, text, (size_t)(s - text));
    struct hps__conf_buf prefix = {0};
    hps__conf_buf_add(&prefix, s, (size_t)(vstart - s));
    if (vstart == vend && vstart == sep + 1 && *value)
        hps__conf_buf_puts(&prefix, " ");
    emit(out, k, hps__conf_buf_str(&prefix), prefix.len, value, vend, (size_t)(e - vend), eol);
    out->oom |= prefix.oom;
    hps__conf_buf_fini(&prefix);
    size_t rest = (size_t)(li->v[raw->last_line - 1].s - text) + li->v[raw->last_line - 1].len;
    hps__conf_buf_puts(out, text + rest);
}

static void new_key_line(struct hps__conf_buf *out, const struct hps__conf_key *k,
                         const char *value, const char *eol)
{
    struct hps__conf_buf prefix = {0};

    hps__conf_buf_printf(&prefix, "%s =%s", k->name, *value ? " " : "");
    emit(out, k, hps__conf_buf_str(&prefix), prefix.len, value, eol, strlen(eol), eol);
    out->oom |= prefix.oom;
    hps__conf_buf_fini(&prefix);
}

/* The section called sec_name in the scan, or NULL. */
static const struct hps__conf_scan_sec *find_section(const struct hps__conf_scan *scan,
                                                     const char *sec_name)
{
    for (size_t i = 0; i < scan->nsecs; i++)
        if (strcmp(scan->secs[i]->name, sec_name) == 0)
            return scan->secs[i];
    return NULL;
}

/* HPS_ENOTFOUND: "t.ini: no section [model.x] (the models are a, b)". */
static hps_err_t no_section(const struct hps__conf_scan *scan, const char *name,
                            const char *sec_name, char *err, size_t err_len)
{
    struct hps__conf_buf models = {0};

    if (strncmp(sec_name, "model.", 6) == 0) {
        for (size_t i = 0; i < scan->nsecs; i++)
            if (scan->secs[i]->sec == HPS__CONF_SEC_model)
                hps__conf_buf_printf(&models, "%s%s", models.len ? ", " : " (the models are ",
                                     scan->secs[i]->name + 6);
        hps__conf_buf_puts(&models, models.len ? ")" : " (there is no model)");
    }
    hps__conf_msg(err, err_len, "%s: no section [%s]%s", name, sec_name,
                  hps__conf_buf_str(&models));
    hps__conf_buf_fini(&models);
    return HPS_ENOTFOUND;
}

/* The file's own line ending, from its first line. */
static const char *file_eol(const char *text)
{
    const char *nl = strchr(text, '\n');

    return nl && nl > text && nl[-1] == '\r' ? "\r\n" : "\n";
}

/* Build into out the text with key ki of section sec_name set to value. */
static void edit_splice(struct hps__conf_buf *out, const char *text,
                        const struct hps__conf_scan *scan, const char *sec_name, int ki,
                        const char *value)
{
    const struct hps__conf_scan_sec *ss = find_section(scan, sec_name);
    struct lines li;
    const char *eol = file_eol(text);

    if (!index_lines(text, &li)) {
        out->oom = true;
        return;
    }
    if (ss && ss->raw[ki].value) {
        replace_key(out, text, &li, &ss->raw[ki], &hps__conf_keys[ki], value, eol);
    } else if (ss) {
        size_t at = after_line(text, &li, ss->last_line);
        hps__conf_buf_add(out, text, at);
        if (at == 0 || text[at - 1] != '\n')
            hps__conf_buf_puts(out, eol);
        new_key_line(out, &hps__conf_keys[ki], value, eol);
        hps__conf_buf_puts(out, text + at);
    } else {
        size_t n = strlen(text);
        hps__conf_buf_add(out, text, n);
        if (n && text[n - 1] != '\n')
            hps__conf_buf_puts(out, eol);
        hps__conf_buf_printf(out, "%s[%s]%s", n ? eol : "", sec_name, eol);
        new_key_line(out, &hps__conf_keys[ki], value, eol);
    }
    free(li.v);
}

/* Copy text into out without lines first..last (1-based, inclusive). */
static void cut_lines(struct hps__conf_buf *out, const char *text, const struct lines *li,
                      uint32_t first, uint32_t last)
{
    hps__conf_buf_add(out, text, (size_t)(li->v[first - 1].s - text));
    hps__conf_buf_puts(out, text + after_line(text, li, last));
}

/* Build into out the text without key ki of section sec_name (its value
 * line and continuation lines); HPS_ENOTFOUND if the file does not set it. */
static hps_err_t unset_splice(struct hps__conf_buf *out, const char *text,
                              const struct hps__conf_scan *scan, const char *name,
                              const char *sec_name, int ki, char *err, size_t err_len)
{
    const struct hps__conf_scan_sec *ss = find_section(scan, sec_name);
    struct lines li;

    if (!ss)
        return no_section(scan, name, sec_name, err, err_len);
    if (!ss->raw[ki].value) {
        hps__conf_msg(err, err_len, "%s: [%s] %s is not set (nothing to remove)", name, sec_name,
                      hps__conf_keys[ki].name);
        return HPS_ENOTFOUND;
    }
    if (!index_lines(text, &li))
        return -ENOMEM;
    cut_lines(out, text, &li, ss->raw[ki].first_line, ss->raw[ki].last_line);
    free(li.v);
    return out->oom ? -ENOMEM : 0;
}

static bool line_blank(const struct line *x)
{
    for (size_t i = 0; i < x->len; i++)
        if (!isspace((unsigned char)x->s[i]))
            return false;
    return true;
}

static bool line_comment(const struct line *x)
{
    size_t i = 0;

    while (i < x->len && isspace((unsigned char)x->s[i]))
        i++;
    return i < x->len && (x->s[i] == ';' || x->s[i] == '#');
}

/* First line of the comment block directly above line l (l if none). */
static uint32_t comments_above(const struct lines *li, uint32_t l)
{
    while (l > 1 && line_comment(&li->v[l - 2]))
        l--;
    return l;
}

/* The lines section i of the scan owns (the rule in the file comment). */
static void section_lines(const struct lines *li, const struct hps__conf_scan *scan, size_t i,
                          uint32_t *ret_first, uint32_t *ret_last)
{
    uint32_t first = comments_above(li, scan->secs[i]->header_line);

    if (i + 1 < scan->nsecs) {
        *ret_last = comments_above(li, scan->secs[i + 1]->header_line) - 1;
    } else {
        *ret_last = (uint32_t)li->n;
        while (first > 1 && line_blank(&li->v[first - 2]))
            first--;
    }
    *ret_first = first;
}

/* Apply one edit (set, or remove if e->value is NULL) to text, into out;
 * the result is not validated. */
static hps_err_t edit_one(const char *text, const char *name, const hps_conf_edit_t *e,
                          struct hps__conf_buf *out, char *err, size_t err_len)
{
    hps__conf_sec_t sec;
    char *sec_name = NULL, *val = NULL;
    int ki;
    struct hps__conf_scan scan = {0};
    hps_err_t rc = hps__conf_dotted_split(e->key, &sec, &sec_name, &ki);

    if (rc == HPS_ENOTFOUND) {
        /* model.<name>.key with a name no section can have: say so */
        const char *dot = strrchr(e->key, '.');
        bool bad_model = false;
        char *sec = dot && strncmp(e->key, "model.", 6) == 0 && dot > e->key + 6
                        ? hps__conf_strndup(e->key, (size_t)(dot - e->key))
                        : NULL;
        if (sec)
            hps__conf_sec_find(sec, &bad_model);
        free(sec);
        if (bad_model)
            hps__conf_msg(err, err_len,
                          "\"%s\": not a model name (a model name matches [A-Za-z0-9_-]{1,120})",
                          e->key);
        else
            hps__conf_msg(err, err_len,
                          "unknown key \"%s\" (expected section.key or model.<name>.key)", e->key);
    }
    if (!rc && e->value)
        rc = check_value(e->key, hps__conf_keys[ki].check == HPS__CONF_CHECK_secret, e->value, &val,
                         err, err_len);
    if (!rc)
        rc = hps__conf_scan(text, strlen(text), name, &scan, err, err_len);
    if (!rc && e->value)
        edit_splice(out, text, &scan, sec_name, ki, val);
    else if (!rc)
        rc = unset_splice(out, text, &scan, name, sec_name, ki, err, err_len);
    if (!rc && out->oom)
        rc = -ENOMEM;
    hps__conf_scan_fini(&scan);
    free(val);
    free(sec_name);
    return rc;
}

/* The text of out, taken from it ("" if empty); NULL on ENOMEM. */
static char *buf_take(struct hps__conf_buf *out)
{
    char *p = out->oom ? NULL : out->p ? out->p : strdup("");

    if (p == out->p)
        out->p = NULL;
    return p;
}

/* Validate the edited text (taken over) and hand it to the caller. */
static hps_err_t finish(char *text, const char *name, char **ret_text, char *err, size_t err_len)
{
    hps_conf_t *conf = NULL;
    hps_err_t rc = hps_conf_load_string(text, name, &conf, err, err_len);

    hps_conf_free(conf);
    if (rc)
        free(text);
    else
        *ret_text = text;
    return rc;
}

hps_err_t hps_conf_edit_many(const char *text, const char *name, const hps_conf_edit_t *edits,
                             size_t n, char **ret_text, char *err, size_t err_len)
{
    hps__conf_msg(err, err_len, "%s", "");
    if (!text || !edits || n == 0 || !ret_text)
        return HPS_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!edits[i].key)
            return HPS_EINVAL;
    name = name ? name : "<string>";
    char *cur = strdup(text);
    hps_err_t rc = cur ? 0 : -ENOMEM;
    for (size_t i = 0; i < n && !rc; i++) {
        struct hps__conf_buf out = {0};
        rc = edit_one(cur, name, &edits[i], &out, err, err_len);
        free(cur);
        cur = rc ? NULL : buf_take(&out);
        rc = rc ? rc : cur ? 0 : -ENOMEM;
        hps__conf_buf_fini(&out);
    }
    return rc ? rc : finish(cur, name, ret_text, err, err_len);
}

hps_err_t hps_conf_strip_secrets(const char *text, const char *name, char **ret_text, char *err,
                                 size_t err_len)
{
    char keys[HPS__CONF_NKEYS][96]; /* "section.key" of edits[i] */
    hps_conf_edit_t edits[HPS__CONF_NKEYS];
    size_t n = 0;
    hps_conf_t *conf = NULL;

    hps__conf_msg(err, err_len, "%s", "");
    if (!text || !ret_text)
        return HPS_EINVAL;
    hps_err_t rc = hps_conf_load_string(text, name, &conf, err, err_len);
    for (size_t i = 0; rc == 0 && i < HPS__CONF_NKEYS; i++) {
        const struct hps__conf_key *k = &hps__conf_keys[i];
        bool set = false;
        if (k->check != HPS__CONF_CHECK_secret || k->sec == HPS__CONF_SEC_model)
            continue; /* (no [model] key is a secret) */
        snprintf(keys[n], sizeof(keys[n]), "%s.%s", hps__conf_sections[k->sec].name, k->name);
        if (hps_conf_is_set(conf, keys[n], &set) == 0 && set) {
            edits[n] = (hps_conf_edit_t){keys[n], NULL};
            n++;
        }
    }
    hps_conf_free(conf);
    if (rc == 0 && n == 0) {
        *ret_text = strdup(text);
        return *ret_text ? 0 : -ENOMEM;
    }
    return rc ? rc : hps_conf_edit_many(text, name, edits, n, ret_text, err, err_len);
}

hps_err_t hps_conf_edit_string(const char *text, const char *name, const char *key,
                               const char *value, char **ret_text, char *err, size_t err_len)
{
    const hps_conf_edit_t edit = {key, value};

    hps__conf_msg(err, err_len, "%s", "");
    if (!value)
        return HPS_EINVAL;
    return hps_conf_edit_many(text, name, &edit, 1, ret_text, err, err_len);
}

hps_err_t hps_conf_remove_section(const char *text, const char *name, const char *section,
                                  char **ret_text, char *err, size_t err_len)
{
    bool bad_model;
    struct hps__conf_scan scan = {0};
    struct hps__conf_buf out = {0};
    struct lines li = {0};

    hps__conf_msg(err, err_len, "%s", "");
    if (!text || !section || !ret_text)
        return HPS_EINVAL;
    name = name ? name : "<string>";
    if (hps__conf_sec_find(section, &bad_model) < 0) {
        hps__conf_msg(err, err_len,
                      bad_model
                          ? "[%s]: no such section (a model name matches [A-Za-z0-9_-]{1,120})"
                          : "[%s]: unknown section",
                      section);
        return HPS_ENOTFOUND;
    }
    hps_err_t rc = hps__conf_scan(text, strlen(text), name, &scan, err, err_len);
    size_t i = 0;
    while (!rc && i < scan.nsecs && strcmp(scan.secs[i]->name, section) != 0)
        i++;
    if (!rc && i == scan.nsecs)
        rc = no_section(&scan, name, section, err, err_len);
    if (!rc && !index_lines(text, &li))
        rc = -ENOMEM;
    if (!rc) {
        uint32_t first, last;
        section_lines(&li, &scan, i, &first, &last);
        cut_lines(&out, text, &li, first, last);
        char *cut = buf_take(&out);
        rc = cut ? finish(cut, name, ret_text, err, err_len) : -ENOMEM;
    }
    free(li.v);
    hps__conf_buf_fini(&out);
    hps__conf_scan_fini(&scan);
    return rc;
}

/* Section `section` of text as scanned: its index in scan, or scan->nsecs. */
static size_t section_index(const struct hps__conf_scan *scan, const char *section)
{
    size_t i = 0;
    while (i < scan->nsecs && strcmp(scan->secs[i]->name, section) != 0)
        i++;
    return i;
}

hps_err_t hps_conf_splice_section(const char *dst, const char *src, const char *name,
                                  const char *section, char **ret_text, char *err, size_t err_len)
{
    struct hps__conf_scan ds = {0}, ss = {0};
    struct lines dl = {0}, sl = {0};
    struct hps__conf_buf out = {0};
    bool bad_model;

    hps__conf_msg(err, err_len, "%s", "");
    if (!dst || !src || !section || !ret_text)
        return HPS_EINVAL;
    name = name ? name : "<string>";
    if (hps__conf_sec_find(section, &bad_model) < 0) {
        hps__conf_msg(err, err_len, "[%s]: not a section name", section);
        return HPS_ENOTFOUND;
    }
    hps_err_t rc = hps__conf_scan(dst, strlen(dst), name, &ds, err, err_len);
    if (!rc)
        rc = hps__conf_scan(src, strlen(src), name, &ss, err, err_len);
    if (!rc && (!index_lines(dst, &dl) || !index_lines(src, &sl)))
        rc = -ENOMEM;
    if (!rc) {
        size_t di = section_index(&ds, section), si = section_index(&ss, section);
        uint32_t first, last;
        if (di < ds.nsecs) { /* dst without its section */
            section_lines(&dl, &ds, di, &first, &last);
            cut_lines(&out, dst, &dl, first, last);
        } else {
            hps__conf_buf_puts(&out, dst);
        }
        if (si < ss.nsecs) { /* then src's, after a blank line */
            section_lines(&sl, &ss, si, &first, &last);
            if (out.len && out.p[out.len - 1] != '\n')
                hps__conf_buf_puts(&out, "\n");
            if (out.len)
                hps__conf_buf_puts(&out, "\n");
            size_t from = (size_t)(sl.v[first - 1].s - src);
            while (from < strlen(src) && (src[from] == '\n' || src[from] == '\r'))
                from++; /* the blank lines a last section owns */
            hps__conf_buf_add(&out, src + from, after_line(src, &sl, last) - from);
        }
        char *text = buf_take(&out);
        rc = text ? finish(text, name, ret_text, err, err_len) : -ENOMEM;
    }
    free(dl.v);
    free(sl.v);
    hps__conf_buf_fini(&out);
    hps__conf_scan_fini(&ds);
    hps__conf_scan_fini(&ss);
    return rc;
}

/* ---- Atomic file replacement ----------------------------------------------- */

static hps_err_t write_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

static hps_err_t fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    if (fd < 0)
        return -errno;
    hps_err_t rc = fsync(fd) == 0 ? 0 : -errno;
    close(fd);
    return rc;
}

/* Fill the temporary file: contents, permissions (and owner), durability. */
static hps_err_t fill_temp(int fd, const char *text, const struct stat *st)
{
    if (fchmod(fd, st->st_mode & 07777) != 0)
        return -errno;
    /* The owner can be kept only by root (or if it is ours already). */
    if (fchown(fd, st->st_uid, st->st_gid) != 0 && errno != EPERM)
        return -errno;
    hps_err_t rc = write_all(fd, text, strlen(text));
    if (!rc && fsync(fd) != 0)
        rc = -errno;
    return rc;
}

/* Write text to a temporary file next to path, then rename it over path. */
static hps_err_t replace_file(const char *path, const char *text, const struct stat *st, char *err,
                              size_t err_len)
{
    char *d = strdup(path), *b = strdup(path);
    struct hps__conf_buf tmp = {0};
    hps_err_t rc = -ENOMEM;
    int fd = -1;

    if (!d || !b)
        goto out;
    const char *dir = dirname(d);
    hps__conf_buf_printf(&tmp, "%s/.%s.XXXXXX", dir, basename(b));
    if (tmp.oom)
        goto out;
    fd = mkostemp(tmp.p, O_CLOEXEC);
    rc = fd < 0 ? -errno : fill_temp(fd, text, st);
    if (fd >= 0 && close(fd) != 0 && !rc)
        rc = -errno;
    if (!rc && rename(tmp.p, path) != 0)
        rc = -errno;
    if (rc && fd >= 0)
        unlink(tmp.p);
    if (!rc)
        rc = fsync_dir(dir);
out:
    if (rc)
        hps__conf_msg(err, err_len, "cannot write %s: %s", path, hps_strerror(rc));
    hps__conf_buf_fini(&tmp);
    free(d);
    free(b);
    return rc;
}

/* A change of a file's text: as hps_conf_edit_many(), with its own arg. */
typedef hps_err_t (*text_edit_fn)(const char *text, const char *name, const void *arg,
                                  char **ret_text, char *err, size_t err_len);

/* Lock the file at real against other hps-conf edits (flock, exclusive,
 * waiting for the holder): the open descriptor of the file the path names
 * once the lock is held.  An edit replaces the file (rename), so a waiter
 * that gets the lock of the replaced one looks again.  -errno on failure. */
static int lock_file(const char *real)
{
    for (;;) {
        int fd = open(real, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        struct stat held, now;
        if (fd < 0)
            return -errno;
        if (flock(fd, LOCK_EX) != 0 || fstat(fd, &held) != 0) {
            int e = errno;
            close(fd);
            return -e;
        }
        if (stat(real, &now) == 0 && now.st_dev == held.st_dev && now.st_ino == held.st_ino)
            return fd;
        close(fd); /* replaced meanwhile: lock the new one */
    }
}

/* Read path, change its text with fn, write the result back atomically if it
 * differs.  name (messages) is path as given; a link is followed.  Two
 * edits of one file (two hps-conf processes) run one after the other: each
 * holds the file's lock (lock_file) from its read to its rename, so neither
 * loses the other's change. */
static hps_err_t edit_file(const char *path, text_edit_fn fn, const void *arg, char *err,
                           size_t err_len)
{
    char *real = NULL, *old = NULL, *new_text = NULL;
    size_t len;
    struct stat st;
    hps_err_t rc;

    real = realpath(path, NULL);
    if (!real) {
        rc = -errno;
        hps__conf_msg(err, err_len, "cannot read %s: %s", path, hps_strerror(rc));
        return rc;
    }
    int lock = lock_file(real);
    if (lock < 0) {
        hps__conf_msg(err, err_len, "cannot lock %s: %s", path, hps_strerror(lock));
        free(real);
        return lock;
    }
    rc = hps__conf_read_file(real, &old, &len, err, err_len);
    if (!rc && stat(real, &st) != 0) {
        rc = -errno;
        hps__conf_msg(err, err_len, "cannot read %s: %s", path, hps_strerror(rc));
    }
    if (!rc && memchr(old, '\0', len)) {
        hps__conf_msg(err, err_len, "%s: the file contains a NUL byte", path);
        rc = HPS_ECONFIG;
    }
    if (!rc)
        rc = fn(old, path, arg, &new_text, err, err_len);
    if (!rc && strcmp(new_text, old) != 0)
        rc = replace_file(real, new_text, &st, err, err_len);
    close(lock); /* after the rename: a waiter then finds the new file */
    free(new_text);
    free(old);
    free(real);
    return rc;
}

struct edits {
    const hps_conf_edit_t *v;
    size_t n;
};

static hps_err_t apply_edits(const char *text, const char *name, const void *arg, char **ret_text,
                             char *err, size_t err_len)
{
    const struct edits *e = arg;

    return hps_conf_edit_many(text, name, e->v, e->n, ret_text, err, err_len);
}

static hps_err_t apply_remove(const char *text, const char *name, const void *arg, char **ret_text,
                              char *err, size_t err_len)
{
    return hps_conf_remove_section(text, name, arg, ret_text, err, err_len);
}

hps_err_t hps_conf_edit_file(const char *path, const hps_conf_edit_t *edits, size_t n, char *err,
                             size_t err_len)
{
    const struct edits e = {edits, n};

    hps__conf_msg(err, err_len, "%s", "");
    if (!path || !edits || n == 0)
        return HPS_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!edits[i].key)
            return HPS_EINVAL;
    return edit_file(path, apply_edits, &e, err, err_len);
}

hps_err_t hps_conf_set_file(const char *path, const char *key, const char *value, char *err,
                            size_t err_len)
{
    const hps_conf_edit_t edit = {key, value};

    hps__conf_msg(err, err_len, "%s", "");
    if (!path || !key || !value)
        return HPS_EINVAL;
    return hps_conf_edit_file(path, &edit, 1, err, err_len);
}

hps_err_t hps_conf_remove_section_file(const char *path, const char *section, char *err,
                                       size_t err_len)
{
    hps__conf_msg(err, err_len, "%s", "");
    if (!path || !section)
        return HPS_EINVAL;
    return edit_file(path, apply_remove, section, err, err_len);
}
