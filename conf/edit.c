/*
 * edit.c -- hps_conf_edit_string() and hps_conf_set_file(): change one key
 * of an INI file, keeping every other byte.
 *
 * The scan (scan.c) gives the lines of each section and key, so an edit is
 * a splice of whole lines: replace the key's lines (its value line and any
 * continuation lines), or insert one line after the last key line of the
 * section, or append a new section.  On the key's own line only the value
 * changes: indentation, spacing around '=' and an inline comment stay.  The
 * result is validated like any file before it is returned or written.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
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
static hps_err_t check_value(const char *key, const char *value, char **ret, char *err,
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
            hps__msg(err, err_len,
                     "%s = %.*s: a value cannot contain a line break, nor a ';' "
                     "at its start or after a blank (that starts a comment)",
                     key, (int)n, value);
            return HPS_ECONFIG;
        }
    }
    *ret = hps__strndup(value, n);
    return *ret ? 0 : -ENOMEM;
}

/* prefix + value + suffix, a long list wrapped onto indented lines. */
static void emit(struct hps__buf *out, const struct hps__key *k, const char *prefix,
                 size_t prefix_len, const char *value, const char *suffix, size_t suffix_len,
                 const char *eol)
{
    size_t n = 0;
    bool oom = false;
    char **items = NULL;

    if (hps__is_list(k->type) && prefix_len + strlen(value) > WRAP_COLUMNS)
        items = hps__list_split(value, k->type == HPS__T_REGEXES, &n, &oom);
    hps__buf_add(out, prefix, prefix_len);
    if (!items)
        hps__buf_puts(out, value);
    for (size_t i = 0; i < n; i++) {
        if (i)
            hps__buf_printf(out, ",%s    ", eol);
        hps__buf_puts(out, items[i]);
    }
    hps__buf_add(out, suffix, suffix_len);
    out->oom |= oom;
    hps__list_free(items, n);
}

/* Replace the lines of an existing key; keep the first line's layout. */
static void replace_key(struct hps__buf *out, const char *text, const struct lines *li,
                        const struct hps__raw *raw, const struct hps__key *k, const char *value,
                        const char *eol)
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
    hps__buf_add(out, text, (size_t)(s - text));
    struct hps__buf prefix = {0};
    hps__buf_add(&prefix, s, (size_t)(vstart - s));
    if (vstart == vend && vstart == sep + 1 && *value)
        hps__buf_puts(&prefix, " ");
    emit(out, k, hps__buf_str(&prefix), prefix.len, value, vend, (size_t)(e - vend), eol);
    out->oom |= prefix.oom;
    hps__buf_fini(&prefix);
    size_t rest = (size_t)(li->v[raw->last_line - 1].s - text) + li->v[raw->last_line - 1].len;
    hps__buf_puts(out, text + rest);
}

static void new_key_line(struct hps__buf *out, const struct hps__key *k, const char *value,
                         const char *eol)
{
    struct hps__buf prefix = {0};

    hps__buf_printf(&prefix, "%s =%s", k->name, *value ? " " : "");
    emit(out, k, hps__buf_str(&prefix), prefix.len, value, eol, strlen(eol), eol);
    out->oom |= prefix.oom;
    hps__buf_fini(&prefix);
}

/* Build the edited text into out. */
static void edit_splice(struct hps__buf *out, const char *text, const struct hps__scan *scan,
                        const char *sec_name, int ki, const char *value)
{
    const struct hps__scan_sec *ss = NULL;
    struct lines li;
    const char *nl = strchr(text, '\n');
    const char *eol = nl && nl > text && nl[-1] == '\r' ? "\r\n" : "\n"; /* the file's own */

    for (size_t i = 0; i < scan->nsecs && !ss; i++)
        if (strcmp(scan->secs[i]->name, sec_name) == 0)
            ss = scan->secs[i];
    if (!index_lines(text, &li)) {
        out->oom = true;
        return;
    }
    if (ss && ss->raw[ki].value) {
        replace_key(out, text, &li, &ss->raw[ki], &hps__keys[ki], value, eol);
    } else if (ss) {
        size_t at = after_line(text, &li, ss->last_line);
        hps__buf_add(out, text, at);
        if (at == 0 || text[at - 1] != '\n')
            hps__buf_puts(out, eol);
        new_key_line(out, &hps__keys[ki], value, eol);
        hps__buf_puts(out, text + at);
    } else {
        size_t n = strlen(text);
        hps__buf_add(out, text, n);
        if (n && text[n - 1] != '\n')
            hps__buf_puts(out, eol);
        hps__buf_printf(out, "%s[%s]%s", n ? eol : "", sec_name, eol);
        new_key_line(out, &hps__keys[ki], value, eol);
    }
    free(li.v);
}

hps_err_t hps_conf_edit_string(const char *text, const char *name, const char *key,
                               const char *value, char **ret_text, char *err, size_t err_len)
{
    hps__sec_t sec;
    char *sec_name = NULL, *val = NULL;
    int ki;
    struct hps__scan scan = {0};
    struct hps__buf out = {0};
    hps_conf_t *conf = NULL;

    hps__msg(err, err_len, "%s", "");
    if (!text || !key || !value || !ret_text)
        return HPS_EINVAL;
    name = name ? name : "<string>";
    hps_err_t rc = hps__dotted_split(key, &sec, &sec_name, &ki);
    if (rc == HPS_ENOTFOUND)
        hps__msg(err, err_len, "unknown key \"%s\" (expected section.key or model.<name>.key)",
                 key);
    if (!rc)
        rc = check_value(key, value, &val, err, err_len);
    if (!rc)
        rc = hps__scan(text, strlen(text), name, &scan, err, err_len);
    if (!rc) {
        edit_splice(&out, text, &scan, sec_name, ki, val);
        rc =
            out.oom ? -ENOMEM : hps_conf_load_string(hps__buf_str(&out), name, &conf, err, err_len);
    }
    if (!rc) {
        *ret_text = out.p ? out.p : strdup("");
        out.p = NULL;
        rc = *ret_text ? 0 : -ENOMEM;
    }
    hps_conf_free(conf);
    hps__scan_fini(&scan);
    hps__buf_fini(&out);
    free(val);
    free(sec_name);
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
    struct hps__buf tmp = {0};
    hps_err_t rc = -ENOMEM;
    int fd = -1;

    if (!d || !b)
        goto out;
    const char *dir = dirname(d);
    hps__buf_printf(&tmp, "%s/.%s.XXXXXX", dir, basename(b));
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
        hps__msg(err, err_len, "cannot write %s: %s", path, hps_strerror(rc));
    hps__buf_fini(&tmp);
    free(d);
    free(b);
    return rc;
}

hps_err_t hps_conf_set_file(const char *path, const char *key, const char *value, char *err,
                            size_t err_len)
{
    char *real = NULL, *old = NULL, *new_text = NULL;
    size_t len;
    struct stat st;
    hps_err_t rc;

    hps__msg(err, err_len, "%s", "");
    if (!path || !key || !value)
        return HPS_EINVAL;
    real = realpath(path, NULL);
    if (!real) {
        rc = -errno;
        hps__msg(err, err_len, "cannot read %s: %s", path, hps_strerror(rc));
        return rc;
    }
    rc = hps__read_file(real, &old, &len, err, err_len);
    if (!rc && stat(real, &st) != 0) {
        rc = -errno;
        hps__msg(err, err_len, "cannot read %s: %s", path, hps_strerror(rc));
    }
    if (!rc && memchr(old, '\0', len)) {
        hps__msg(err, err_len, "%s: the file contains a NUL byte", path);
        rc = HPS_ECONFIG;
    }
    if (!rc)
        rc = hps_conf_edit_string(old, path, key, value, &new_text, err, err_len);
    if (!rc && strcmp(new_text, old) != 0)
        rc = replace_file(real, new_text, &st, err, err_len);
    free(new_text);
    free(old);
    free(real);
    return rc;
}
