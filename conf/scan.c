/*
 * scan.c -- INI text to raw values, with line numbers.
 *
 * HOW IT WORKS.  inih tokenizes: it splits "key = value" lines, strips blanks
 * and comments, and joins nothing.  It is driven through ini_parse_stream()
 * with our own reader (rd_line) instead of fgets, because inih as packaged
 * is not enough on its own:
 *
 *  - Line numbers.  The handler gets a line number only when inih was built
 *    with INI_HANDLER_LINENO, and Debian's libinih is not (the header decides
 *    the handler's type, the library was compiled with the default 0).  inih
 *    reads exactly one line per reader call and finishes that line, calling
 *    the handler at most once, before it reads the next; so the reader counts
 *    lines and the handler reads the count: always the handler's own line.
 *    (Every line handed over fits and ends in '\n', so inih never reads a
 *    second piece of a line, neither to grow its buffer nor to skip a tail.)
 *  - Long lines.  inih's line buffer is INI_MAX_LINE (200) bytes; a longer
 *    line would be split or cut silently, and a list of 26 table paths is
 *    longer.  The reader is told the buffer size; a line that does not fit
 *    is split into key and value here, with inih's rules (first '=' or ':',
 *    inline comment = ';' after a blank, blanks trimmed), and inih gets a
 *    short stand-in line, "key=\x01" (or " \x01" for a continuation line),
 *    whose value the handler replaces with the real one.  So every line
 *    length works, and inih still decides what kind of line it is.
 *  - Section names.  inih truncates section names to 49 bytes (model names
 *    may have 120) and calls the handler for key lines only, so an empty or
 *    misspelt section would go unnoticed.  The reader therefore recognizes
 *    "[name]" lines itself, with inih's own rules (a line is a section header
 *    if, after leading blanks, it starts with '[' and is neither a comment
 *    nor a continuation: an indented line after a key line), and records the
 *    full name and its line.
 *  - A UTF-8 byte order mark on line 1 is dropped by the reader.
 *
 * The handler then checks keys (known, not repeated), joins continuation
 * lines of lists and stores each value as written.  Types and ranges are
 * checked later (conf.c), so `hps-conf set` can repair a bad value in a file
 * whose structure is sound.  Errors stop the scan: the reader returns EOF.
 * inih reports a syntax error (no '=', no ']') only as a line number when it
 * returns; it is reported if it comes before our first error.
 */
#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/internal.h"

struct rd {
    const char *p, *end; /* unread text */
    const char *name;    /* file name for messages */
    uint32_t lineno;     /* line last handed to inih */
    bool prev_name;      /* mirrors inih: a key line since the last section */
    bool cont;           /* this line is a continuation (inih's multi-line) */
    char *long_value;    /* value of a line too long for inih (see above) */
    struct hps__conf_scan *scan;
    struct hps__conf_scan_sec *cur; /* current section, NULL before the first */
    int last_key;                   /* key index of the last key line in cur */
    hps_err_t rc;
    uint32_t err_line;
    char *err;
    size_t err_len;
};

static void rd_fail(struct rd *r, hps_err_t rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Record the first error, "file:line: " + message. */
static void rd_fail(struct rd *r, hps_err_t rc, const char *fmt, ...)
{
    va_list ap;

    if (r->rc)
        return;
    r->rc = rc;
    r->err_line = r->lineno;
    if (!r->err || r->err_len == 0)
        return;
    int n = snprintf(r->err, r->err_len, "%s:%u: ", r->name, r->lineno);
    if (n < 0 || (size_t)n >= r->err_len)
        return;
    va_start(ap, fmt);
    vsnprintf(r->err + n, r->err_len - (size_t)n, fmt, ap);
    va_end(ap);
}

/* inih's ini_find_chars_or_comment(): the first of chars (any if NULL), or
 * an inline comment (';' after a blank), or the end. */
static char *find_chars_or_comment(const char *s, const char *chars)
{
    bool was_space = false;

    while (*s && (!chars || !strchr(chars, *s)) && !(was_space && *s == ';')) {
        was_space = isspace((unsigned char)*s);
        s++;
    }
    return (char *)s;
}

static char *lskip(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    return s;
}

static void rstrip(char *s, char *end)
{
    while (end > s && isspace((unsigned char)end[-1]))
        *--end = '\0';
}

/* ---- Sections ------------------------------------------------------------- */

static void unknown_section(struct rd *r, const char *name)
{
    struct hps__conf_buf all = {0};
    const char *hint = hps__conf_suggest_section(name);

    for (int s = 0; s < HPS__CONF_NGLOBAL; s++)
        hps__conf_buf_printf(&all, "%s, ", hps__conf_sections[s].name);
    if (strcmp(name, "model") == 0)
        rd_fail(r, HPS_ECONFIG, "[model]: a model section needs a name: [model.<name>]");
    else
        rd_fail(r, HPS_ECONFIG, "[%s]: unknown section%s%s%s; the sections are %smodel.<name>",
                name, hint ? " (did you mean " : "", hint ? hint : "", hint ? "?)" : "",
                hps__conf_buf_str(&all));
    hps__conf_buf_fini(&all);
}

static bool check_new_section(struct rd *r, const char *name, int sec, bool bad_model)
{
    if (bad_model) {
        rd_fail(r, HPS_ECONFIG, "[%s]: the model name must match [A-Za-z0-9_-]{1,120}", name);
        return false;
    }
    if (sec < 0) {
        unknown_section(r, name);
        return false;
    }
    for (size_t i = 0; i < r->scan->nsecs; i++) {
        if (strcmp(r->scan->secs[i]->name, name) == 0) {
            rd_fail(r, HPS_ECONFIG, "[%s]: duplicate section (first at line %u)", name,
                    r->scan->secs[i]->header_line);
            return false;
        }
    }
    if (sec == HPS__CONF_SEC_model && r->scan->nmodels >= HPS_CONF_MAX_MODELS) {
        rd_fail(r, HPS_ECONFIG, "[%s]: too many models (at most %d)", name, HPS_CONF_MAX_MODELS);
        return false;
    }
    return true;
}

/* Start section `name` (malloc'd; taken over). */
static bool open_section(struct rd *r, char *name)
{
    bool bad_model;
    int sec = hps__conf_sec_find(name, &bad_model);
    struct hps__conf_scan_sec *s = NULL, **v = NULL;

    if (!check_new_section(r, name, sec, bad_model))
        goto fail;
    v = realloc(r->scan->secs, (r->scan->nsecs + 1) * sizeof(*v));
    if (v)
        r->scan->secs = v;
    s = v ? calloc(1, sizeof(*s)) : NULL;
    if (!s) {
        rd_fail(r, -ENOMEM, "out of memory");
        goto fail;
    }
    s->name = name;
    s->sec = (hps__conf_sec_t)sec;
    s->header_line = s->last_line = r->lineno;
    r->scan->secs[r->scan->nsecs++] = s;
    r->scan->nmodels += sec == HPS__CONF_SEC_model;
    r->cur = s;
    r->last_key = -1;
    return true;
fail:
    free(name);
    return false;
}

/* A line whose first non-blank is '[' (s points there). */
static bool section_line(struct rd *r, char *s)
{
    char *e = find_chars_or_comment(s + 1, "]");

    if (*e != ']')
        return true; /* inih reports the syntax error */
    const char *rest = lskip(e + 1);
    if (*rest && *rest != ';' && *rest != '#') {
        rd_fail(r, HPS_ECONFIG, "[%.*s]: unexpected text after ']'", (int)(e - s - 1), s + 1);
        return false;
    }
    char *name = hps__conf_strndup(s + 1, (size_t)(e - s - 1));
    if (!name) {
        rd_fail(r, -ENOMEM, "out of memory");
        return false;
    }
    r->prev_name = false;
    r->cur = NULL;
    return open_section(r, name);
}

/* ---- Reader --------------------------------------------------------------- */

/* Decide what inih will make of the line in buf (inih's order of tests). */
static bool classify(struct rd *r, char *buf)
{
    char *s = lskip(buf);

    r->cont = false;
    if (*s == '\0' || *s == ';' || *s == '#')
        return true; /* blank or comment */
    if (r->prev_name && s > buf) {
        r->cont = true;
        return true;
    }
    if (*s == '[')
        return section_line(r, s);
    return true; /* key line, or a syntax error inih reports */
}

/* Keep the value of a long line (from v to its comment, trimmed). */
static bool keep_value(struct rd *r, char *v)
{
    char *end = find_chars_or_comment(v, NULL);

    *end = '\0';
    v = lskip(v);
    rstrip(v, end);
    r->long_value = strdup(v);
    if (!r->long_value)
        rd_fail(r, -ENOMEM, "out of memory");
    return r->long_value != NULL;
}

/* Write into str (num bytes) the short line inih gets for the long line
 * `line` (writable copy), as explained at the top of the file. */
static bool stand_in(struct rd *r, char *line, char *str, size_t num)
{
    char *s = lskip(line);

    if (!classify(r, line))
        return false;
    if (r->cont) {
        snprintf(str, num, " \x01\n");
        return keep_value(r, s);
    }
    if (*s == ';' || *s == '#') {
        snprintf(str, num, "#\n");
    } else if (*s == '[') {
        /* classify() opened the section (names are short); inih needs only
         * the name, or no ']' at all to report the syntax error. */
        bool opened = r->cur && r->cur->header_line == r->lineno;
        snprintf(str, num, opened ? "[%.*s]\n" : "[\n", (int)(num - 4), opened ? r->cur->name : "");
    } else {
        char *sep = find_chars_or_comment(s, "=:");
        if (*sep != '=' && *sep != ':') {
            snprintf(str, num, "?\n"); /* inih: syntax error on this line */
            return true;
        }
        char *v = sep + 1;
        *sep = '\0';
        rstrip(s, sep);
        snprintf(str, num, "%.*s=\x01\n", (int)(num - 5), s);
        return keep_value(r, v);
    }
    return true;
}

static char *long_line(struct rd *r, char *str, size_t num, const char *line, size_t len)
{
    char *copy = hps__conf_strndup(line, len);

    if (!copy) {
        rd_fail(r, -ENOMEM, "out of memory");
        return NULL;
    }
    bool ok = stand_in(r, copy, str, num);
    free(copy);
    return ok ? str : NULL;
}

/* ini_reader: hand inih one line, or NULL (EOF) after an error. */
static char *rd_line(char *str, int num, void *stream)
{
    struct rd *r = stream;

    free(r->long_value);
    r->long_value = NULL;
    if (r->rc || r->p >= r->end)
        return NULL;
    const char *line = r->p;
    const char *eol = memchr(line, '\n', (size_t)(r->end - line));
    size_t len = eol ? (size_t)(eol - line) : (size_t)(r->end - line);
    r->p = eol ? eol + 1 : r->end;
    r->lineno++;
    if (r->lineno == 1 && len >= 3 && memcmp(line, "\xEF\xBB\xBF", 3) == 0) {
        line += 3;
        len -= 3;
    }
    if (memchr(line, '\0', len)) {
        rd_fail(r, HPS_ECONFIG, "the line contains a NUL byte");
        return NULL;
    }
    if (num < 16) { /* no inih has so small a buffer */
        rd_fail(r, HPS_ECONFIG, "internal error: inih line buffer of %d bytes", num);
        return NULL;
    }
    if (len + 2 > (size_t)num)
        return long_line(r, str, (size_t)num, line, len);
    memcpy(str, line, len);
    str[len] = '\n';
    str[len + 1] = '\0';
    return classify(r, str) ? str : NULL;
}

/* ---- Handler -------------------------------------------------------------- */

static void unknown_key(struct rd *r, const char *name, const char *value)
{
    const char *hint = hps__conf_suggest_key(r->cur->sec, name);
    const char *home = NULL;

    /* A misspelt or misplaced secret key holds a secret all the same. */
    value = hps__conf_masked(hps__conf_secret_name(name) || hps__conf_secret_name(hint), value);

    for (int i = 0; i < HPS__CONF_NKEYS && !home; i++)
        if (strcmp(hps__conf_keys[i].name, name) == 0)
            home = hps__conf_keys[i].sec == HPS__CONF_SEC_model
                       ? "model.<name>"
                       : hps__conf_sections[hps__conf_keys[i].sec].name;
    if (hint)
        rd_fail(r, HPS_ECONFIG, "[%s] %s = %s: unknown key (did you mean %s?)", r->cur->name, name,
                value, hint);
    else if (home)
        rd_fail(r, HPS_ECONFIG, "[%s] %s = %s: unknown key (%s belongs in [%s])", r->cur->name,
                name, value, name, home);
    else
        rd_fail(r, HPS_ECONFIG, "[%s] %s = %s: unknown key", r->cur->name, name, value);
}

static int on_key(struct rd *r, const char *name, const char *value)
{
    if (!r->cur) {
        rd_fail(r, HPS_ECONFIG, "%s = %s: key outside of any section (add a [section] line above)",
                name, hps__conf_masked(hps__conf_secret_name(name), value));
        return 0;
    }
    int ki = hps__conf_key_find(r->cur->sec, name);
    if (ki < 0) {
        unknown_key(r, name, value);
        return 0;
    }
    struct hps__conf_raw *raw = &r->cur->raw[ki];
    if (raw->value) {
        rd_fail(r, HPS_ECONFIG, "[%s] %s = %s: duplicate key (first set at line %u)", r->cur->name,
                name, hps__conf_masked(hps__conf_keys[ki].check == HPS__CONF_CHECK_secret, value),
                raw->first_line);
        return 0;
    }
    raw->value = strdup(value);
    if (!raw->value) {
        rd_fail(r, -ENOMEM, "out of memory");
        return 0;
    }
    raw->first_line = raw->last_line = r->cur->last_line = r->lineno;
    r->last_key = ki;
    return 1;
}

/* An indented line after a key line: more entries of that key's list (a
 * list type, or a host:port list such as [distributed_db] address). */
static int on_continuation(struct rd *r, const char *value)
{
    const struct hps__conf_key *k = &hps__conf_keys[r->last_key];
    struct hps__conf_raw *raw = &r->cur->raw[r->last_key];
    struct hps__conf_buf b = {0};

    if (!hps__conf_is_list(k->type) && k->check != HPS__CONF_CHECK_hostports) {
        rd_fail(r, HPS_ECONFIG,
                "[%s] %s: the indented line \"%s\" continues the value of %s, but only lists "
                "may continue on indented lines (do not indent keys)",
                r->cur->name, k->name, hps__conf_masked(k->check == HPS__CONF_CHECK_secret, value),
                k->name);
        return 0;
    }
    /* inih r55 (Debian 12) keeps an inline comment on a continuation line;
     * later versions strip it.  Strip it here, as on every other line. */
    const char *end = find_chars_or_comment(value, NULL);
    while (end > value && isspace((unsigned char)end[-1]))
        end--;
    size_t n = strlen(raw->value);
    hps__conf_buf_puts(&b, raw->value);
    hps__conf_buf_puts(&b, n == 0 ? "" : raw->value[n - 1] == ',' ? " " : ", ");
    hps__conf_buf_add(&b, value, (size_t)(end - value));
    if (b.oom) {
        hps__conf_buf_fini(&b);
        rd_fail(r, -ENOMEM, "out of memory");
        return 0;
    }
    free(raw->value);
    raw->value = b.p;
    raw->last_line = r->cur->last_line = r->lineno;
    return 1;
}

#if INI_HANDLER_LINENO
static int on_kv(void *user, const char *section, const char *name, const char *value, int lineno)
#else
static int on_kv(void *user, const char *section, const char *name, const char *value)
#endif
{
    struct rd *r = user;

#if INI_HANDLER_LINENO
    (void)lineno; /* counted by the reader, which works with any inih build */
#endif
    if (r->rc)
        return 0;
    r->prev_name = true;
    /* inih keeps the first 49 bytes of the section name; ours is complete. */
    if (r->cur && strncmp(section, r->cur->name, strlen(section)) != 0) {
        rd_fail(r, HPS_ECONFIG, "internal error: inih reports section [%s], expected [%s]", section,
                r->cur->name);
        return 0;
    }
    if (!value)
        value = "";
    if (r->long_value && strcmp(value, "\x01") == 0)
        value = r->long_value;
    return r->cont ? on_continuation(r, value) : on_key(r, name, value);
}

/* ---- Entry point ---------------------------------------------------------- */

/* Report inih's syntax error at line `lineno`, quoting the line. */
static void syntax_error(struct rd *r, const char *text, size_t len, uint32_t lineno)
{
    const char *s = text, *end = text + len;

    for (uint32_t i = 1; i < lineno && s < end; i++) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        s = nl ? nl + 1 : end;
    }
    const char *nl = memchr(s, '\n', (size_t)(end - s));
    size_t n = nl ? (size_t)(nl - s) : (size_t)(end - s);
    while (n && isspace((unsigned char)*s)) {
        s++;
        n--;
    }
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
    r->rc = 0;
    r->lineno = lineno;
    if (n && *s == '[')
        rd_fail(r, HPS_ECONFIG, "syntax error: \"%.*s\": a section header needs a closing ']'",
                (int)(n > 80 ? 80 : n), s);
    else
        rd_fail(r, HPS_ECONFIG,
                "syntax error: \"%.*s\": expected \"key = value\", \"[section]\" or a comment",
                (int)(n > 80 ? 80 : n), s);
}

/* A JSON file (HugeCTR's ps.json) instead of an INI file: its first
 * non-blank character is '{', which no INI line starts with.  Checked before
 * inih sees the text, because a minified one-line file such as
 * {"supportlonglong": true, "models": []} reads to inih as "key: value", not
 * as a syntax error.  The message quotes the line as written. */
static bool json_text(struct rd *r, const char *text, size_t len)
{
    const char *s = text, *end = text + len;
    uint32_t lineno = 1;

    if (len >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0)
        s += 3;
    for (; s < end && isspace((unsigned char)*s); s++)
        lineno += *s == '\n';
    if (s == end || *s != '{')
        return false;
    const char *nl = memchr(s, '\n', (size_t)(end - s));
    size_t n = nl ? (size_t)(nl - s) : (size_t)(end - s);
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
    r->lineno = lineno;
    rd_fail(r, HPS_ECONFIG,
            "\"%.*s%s\": a JSON file (HugeCTR's ps.json?), not an INI file: convert it with "
            "'hps-conf import FILE.json > hps.ini'",
            (int)(n > 40 ? 40 : n), s, n > 40 ? "..." : "");
    return true;
}

void hps__conf_scan_fini(struct hps__conf_scan *scan)
{
    for (size_t i = 0; i < scan->nsecs; i++) {
        for (int k = 0; k < HPS__CONF_NKEYS; k++)
            free(scan->secs[i]->raw[k].value);
        free(scan->secs[i]->name);
        free(scan->secs[i]);
    }
    free(scan->secs);
    *scan = (struct hps__conf_scan){0};
}

hps_err_t hps__conf_scan(const char *text, size_t len, const char *name,
                         struct hps__conf_scan *scan, char *err, size_t err_len)
{
    struct rd r = {.p = text,
                   .end = text + len,
                   .name = name,
                   .scan = scan,
                   .last_key = -1,
                   .err = err,
                   .err_len = err_len};

    *scan = (struct hps__conf_scan){0};
    if (json_text(&r, text, len))
        return r.rc;
    int rc = ini_parse_stream(rd_line, &r, on_kv, &r);
    if (rc == -2) {
        r.rc = 0;
        rd_fail(&r, -ENOMEM, "out of memory");
    } else if (rc > 0 && (r.rc == 0 || (uint32_t)rc < r.err_line)) {
        syntax_error(&r, text, len, (uint32_t)rc);
    }
    free(r.long_value);
    if (r.rc)
        hps__conf_scan_fini(scan);
    return r.rc;
}
