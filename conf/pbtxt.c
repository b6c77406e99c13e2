/*
 * pbtxt.c -- a strict reader of protobuf text format, the subset that
 * Triton's config.pbtxt files use, for `hps-conf import`.
 *
 * Grammar (no schema is known, so a value is kept as its token):
 *
 *   message := { field [',' | ';'] }
 *   field   := NAME ':' scalar
 *            | NAME [':'] ( '{' message '}' | '<' message '>' )
 *            | NAME [':'] '[' [ element { ',' element } ] ']'
 *   element := scalar | '{' message '}' | '<' message '>'
 *   scalar  := STRING { STRING } | NUMBER | IDENT
 *
 * A list is read as repeated fields of the same name, as protobuf does
 * (`gpus: [0, 1]` == `gpus: 0 gpus: 1`); a list of scalars needs the ':'.
 * STRING is "..." or '...' with the C escapes \a \b \f \n \r \t \v \\ \' \"
 * \?, octal \NNN and hex \xHH; adjacent strings are joined; a raw line break
 * or a NUL byte in a string is refused.  NUMBER is a decimal integer or
 * float (optional '-', fraction, exponent, f suffix) or a 0x hex integer;
 * IDENT is [A-Za-z_][A-Za-z0-9_]* (enum values, true, false).  '#' starts a
 * comment to the end of the line.  Extensions ([pkg.ext]), Any expansion
 * and the -inf/-nan spellings are not part of the subset.  Every error is
 * "file:line: what was expected, what was found".
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "conf/internal.h"

/** Deepest nesting of messages accepted (Triton configs use 3 or 4). */
#define PB_MAX_DEPTH 64

enum tok_kind { TK_EOF, TK_IDENT, TK_NUM, TK_STR, TK_PUNCT };

struct tok {
    enum tok_kind kind;
    const char *s; /* token text in the input */
    size_t n;
    uint32_t line;
};

struct lex {
    const char *p, *end;
    const char *name; /* file name for messages */
    uint32_t line;
    struct tok cur; /* the next token, not yet consumed */
    hps_err_t rc;
    char *err;
    size_t err_len;
};

static void fail(struct lex *lx, uint32_t line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Record the first error as "file:line: message". */
static void fail(struct lex *lx, uint32_t line, const char *fmt, ...)
{
    va_list ap;

    if (lx->rc)
        return;
    lx->rc = HPS_ECONFIG;
    if (!lx->err || lx->err_len == 0)
        return;
    int n = snprintf(lx->err, lx->err_len, "%s:%u: ", lx->name, line);
    if (n < 0 || (size_t)n >= lx->err_len)
        return;
    va_start(ap, fmt);
    vsnprintf(lx->err + n, lx->err_len - (size_t)n, fmt, ap);
    va_end(ap);
}

static void nomem(struct lex *lx)
{
    if (!lx->rc)
        hps__conf_msg(lx->err, lx->err_len, "%s: out of memory", lx->name);
    lx->rc = -ENOMEM;
}

/* ---- Tokens ---------------------------------------------------------------- */

static bool is_ident_start(int c)
{
    return isalpha(c) || c == '_';
}

static bool is_ident_char(int c)
{
    return isalnum(c) || c == '_';
}

/* Whether [s, s+n) is a number of the subset (see the file comment). */
static bool valid_number(const char *s, size_t n)
{
    size_t i = 0, digits = 0;

    if (i < n && s[i] == '-')
        i++;
    if (n - i > 2 && s[i] == '0' && (s[i + 1] == 'x' || s[i + 1] == 'X')) {
        for (i += 2; i < n; i++)
            if (!isxdigit((unsigned char)s[i]))
                return false;
        return true;
    }
    for (; i < n && isdigit((unsigned char)s[i]); i++)
        digits++;
    if (i < n && s[i] == '.')
        for (i++; i < n && isdigit((unsigned char)s[i]); i++)
            digits++;
    if (digits == 0)
        return false;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        size_t exp = 0;
        if (++i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        for (; i < n && isdigit((unsigned char)s[i]); i++)
            exp++;
        if (exp == 0)
            return false;
    }
    if (i < n && (s[i] == 'f' || s[i] == 'F'))
        i++;
    return i == n;
}

/* Skip a string literal starting at lx->p (the quote); checks only that it
 * ends on its line (escapes are decoded by decode_string). */
static bool skip_string(struct lex *lx)
{
    char q = *lx->p++;

    while (lx->p < lx->end && *lx->p != q && *lx->p != '\n') {
        if (*lx->p == '\\' && lx->p + 1 < lx->end && lx->p[1] != '\n')
            lx->p++;
        lx->p++;
    }
    if (lx->p >= lx->end || *lx->p != q) {
        fail(lx, lx->line,
             "string not closed on its line (a line break in a string is not "
             "allowed)");
        return false;
    }
    lx->p++;
    return true;
}

/* Read the next token into lx->cur. */
static void advance(struct lex *lx)
{
    for (;;) {
        while (lx->p < lx->end && isspace((unsigned char)*lx->p)) {
            if (*lx->p == '\n')
                lx->line++;
            lx->p++;
        }
        if (lx->p < lx->end && *lx->p == '#') {
            while (lx->p < lx->end && *lx->p != '\n')
                lx->p++;
            continue;
        }
        break;
    }
    struct tok *t = &lx->cur;
    t->s = lx->p;
    t->line = lx->line;
    if (lx->p >= lx->end) {
        t->kind = TK_EOF;
        t->n = 0;
        return;
    }
    unsigned char c = (unsigned char)*lx->p;
    if (is_ident_start(c)) {
        while (lx->p < lx->end && is_ident_char((unsigned char)*lx->p))
            lx->p++;
        t->kind = TK_IDENT;
    } else if (isdigit(c) || ((c == '-' || c == '.') && lx->p + 1 < lx->end &&
                              (isdigit((unsigned char)lx->p[1]) || lx->p[1] == '.'))) {
        lx->p++;
        while (lx->p < lx->end &&
               (is_ident_char((unsigned char)*lx->p) || *lx->p == '.' ||
                ((*lx->p == '+' || *lx->p == '-') && (lx->p[-1] == 'e' || lx->p[-1] == 'E'))))
            lx->p++;
        t->kind = TK_NUM;
        if (!valid_number(t->s, (size_t)(lx->p - t->s)))
            fail(lx, t->line, "malformed number \"%.*s\"", (int)(lx->p - t->s), t->s);
    } else if (c == '"' || c == '\'') {
        t->kind = TK_STR;
        skip_string(lx);
    } else if (strchr(":{}<>[],;", c)) {
        lx->p++;
        t->kind = TK_PUNCT;
    } else {
        fail(lx, t->line, "unexpected character '%c'", isprint(c) ? c : '?');
        t->kind = TK_EOF;
    }
    t->n = (size_t)(lx->p - t->s);
}

static bool is_punct(const struct tok *t, char c)
{
    return t->kind == TK_PUNCT && t->s[0] == c;
}

/* What a token is, for messages. */
static void describe(const struct tok *t, char *buf, size_t len)
{
    int n = t->n > 40 ? 40 : (int)t->n;

    switch (t->kind) {
    case TK_EOF:
        snprintf(buf, len, "end of file");
        break;
    case TK_PUNCT:
        snprintf(buf, len, "'%c'", t->s[0]);
        break;
    case TK_STR:
        snprintf(buf, len, "string %.*s%s", n, t->s, t->n > 40 ? "..." : "");
        break;
    default:
        snprintf(buf, len, "\"%.*s\"", n, t->s);
    }
}

static void expected(struct lex *lx, const char *what)
{
    char found[64];

    describe(&lx->cur, found, sizeof(found));
    fail(lx, lx->cur.line, "expected %s, found %s", what, found);
}

/* Decode the string literal t (quotes included), appending to out. */
static void decode_string(struct lex *lx, const struct tok *t, struct hps__conf_buf *out)
{
    static const char esc_in[] = "abfnrtv\\'\"?", esc_out[] = "\a\b\f\n\r\t\v\\'\"?";
    const char *s = t->s + 1, *e = t->s + t->n - 1;

    while (s < e) {
        char c = *s++;
        if (c != '\\') {
            if (c == '\0')
                fail(lx, t->line, "NUL byte in a string");
            hps__conf_buf_add(out, &c, 1);
            continue;
        }
        c = *s++;
        const char *k = strchr(esc_in, c);
        unsigned v = 0;
        int nd = 0;
        if (c && k) {
            v = (unsigned char)esc_out[k - esc_in];
        } else if (c >= '0' && c <= '7') {
            for (v = (unsigned)(c - '0'), nd = 1; nd < 3 && s < e && *s >= '0' && *s <= '7'; nd++)
                v = v * 8 + (unsigned)(*s++ - '0');
        } else if (c == 'x' && s < e && isxdigit((unsigned char)*s)) {
            for (; nd < 2 && s < e && isxdigit((unsigned char)*s); nd++, s++)
                v = v * 16 +
                    (unsigned)(isdigit((unsigned char)*s) ? *s - '0' : (tolower(*s) - 'a' + 10));
        } else {
            fail(lx, t->line, "unknown escape sequence '\\%c' in a string",
                 isprint((unsigned char)c) ? c : '?');
            return;
        }
        if (v == 0 || v > 255) {
            fail(lx, t->line, "escape \\%c... in a string gives %s", c,
                 v ? "a value over 255" : "a NUL byte");
            return;
        }
        char b = (char)v;
        hps__conf_buf_add(out, &b, 1);
    }
}

/* ---- Messages --------------------------------------------------------------- */

static struct hps__conf_pb_field *add_field(struct lex *lx, struct hps__conf_pb_msg *m,
                                            const struct tok *name)
{
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 8;
        struct hps__conf_pb_field *f = realloc(m->fields, cap * sizeof(*f));
        if (!f) {
            nomem(lx);
            return NULL;
        }
        m->fields = f;
        m->cap = cap;
    }
    struct hps__conf_pb_field *f = &m->fields[m->n];
    memset(f, 0, sizeof(*f));
    f->name = hps__conf_strndup(name->s, name->n);
    if (!f->name) {
        nomem(lx);
        return NULL;
    }
    f->line = name->line;
    m->n++;
    return f;
}

static void parse_message(struct lex *lx, struct hps__conf_pb_msg *m, char close, int depth);

/* A '{' or '<' message value (the opening token is current). */
static void parse_sub(struct lex *lx, struct hps__conf_pb_field *f, int depth)
{
    char close = lx->cur.s[0] == '{' ? '}' : '>';

    if (depth >= PB_MAX_DEPTH) {
        fail(lx, lx->cur.line, "messages nested deeper than %d", PB_MAX_DEPTH);
        return;
    }
    f->kind = HPS__CONF_PB_MESSAGE;
    f->msg = calloc(1, sizeof(*f->msg));
    if (!f->msg) {
        nomem(lx);
        return;
    }
    advance(lx);
    parse_message(lx, f->msg, close, depth + 1);
}

/* A scalar value: the current token is a string, number or identifier. */
static void parse_scalar(struct lex *lx, struct hps__conf_pb_field *f)
{
    struct hps__conf_buf b = {0};

    f->value_line = lx->cur.line;
    if (lx->cur.kind != TK_STR) {
        f->kind = HPS__CONF_PB_SCALAR;
        f->text = hps__conf_strndup(lx->cur.s, lx->cur.n);
        if (!f->text)
            nomem(lx);
        advance(lx);
        return;
    }
    f->kind = HPS__CONF_PB_STRING;
    hps__conf_buf_add(&b, "", 0);
    while (!lx->rc && lx->cur.kind == TK_STR) {
        decode_string(lx, &lx->cur, &b);
        advance(lx);
    }
    if (b.oom)
        nomem(lx);
    f->text = b.p;
}

static bool is_scalar(const struct tok *t)
{
    return t->kind == TK_STR || t->kind == TK_NUM || t->kind == TK_IDENT;
}

/* NAME [':'] '[' ... ']' with the '[' current: one field per element. */
static void parse_list(struct lex *lx, struct hps__conf_pb_msg *m, const struct tok *name,
                       bool colon, int depth)
{
    advance(lx);
    if (is_punct(&lx->cur, ']')) {
        advance(lx);
        return;
    }
    while (!lx->rc) {
        bool sub = is_punct(&lx->cur, '{') || is_punct(&lx->cur, '<');
        if (!sub && !(colon && is_scalar(&lx->cur))) {
            expected(lx,
                     colon ? "a value or '{' in the list" : "'{' (a list of scalars needs ':')");
            return;
        }
        struct hps__conf_pb_field *f = add_field(lx, m, name);
        if (!f)
            return;
        if (sub)
            parse_sub(lx, f, depth);
        else
            parse_scalar(lx, f);
        if (lx->rc)
            return;
        if (is_punct(&lx->cur, ']')) {
            advance(lx);
            return;
        }
        if (!is_punct(&lx->cur, ',')) {
            expected(lx, "',' or ']' in the list");
            return;
        }
        advance(lx);
    }
}

/* Fields up to `close` ('\0': end of file), which is consumed. */
static void parse_message(struct lex *lx, struct hps__conf_pb_msg *m, char close, int depth)
{
    while (!lx->rc) {
        if (close ? is_punct(&lx->cur, close) : lx->cur.kind == TK_EOF) {
            advance(lx);
            return;
        }
        if (lx->cur.kind != TK_IDENT) {
            char what[48];
            snprintf(what, sizeof(what), close ? "a field name or '%c'" : "a field name", close);
            expected(lx, what);
            return;
        }
        struct tok name = lx->cur;
        advance(lx);
        bool colon = is_punct(&lx->cur, ':');
        if (colon)
            advance(lx);
        if (is_punct(&lx->cur, '[')) {
            parse_list(lx, m, &name, colon, depth);
        } else if (is_punct(&lx->cur, '{') || is_punct(&lx->cur, '<')) {
            struct hps__conf_pb_field *f = add_field(lx, m, &name);
            if (f)
                parse_sub(lx, f, depth);
        } else if (colon && is_scalar(&lx->cur)) {
            struct hps__conf_pb_field *f = add_field(lx, m, &name);
            if (f)
                parse_scalar(lx, f);
        } else {
            char what[200];
            snprintf(what, sizeof(what),
                     colon ? "a value after \"%.*s:\"" : "':' or '{' after the field name \"%.*s\"",
                     (int)(name.n > 120 ? 120 : name.n), name.s);
            expected(lx, what);
            return;
        }
        if (!lx->rc && (is_punct(&lx->cur, ',') || is_punct(&lx->cur, ';')))
            advance(lx);
    }
}

void hps__conf_pb_free(struct hps__conf_pb_msg *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++) {
        free(m->fields[i].name);
        free(m->fields[i].text);
        hps__conf_pb_free(m->fields[i].msg);
    }
    free(m->fields);
    free(m);
}

hps_err_t hps__conf_pb_parse(const char *text, size_t len, const char *name,
                             struct hps__conf_pb_msg **ret, char *err, size_t err_len)
{
    struct lex lx = {
        .p = text, .end = text + len, .name = name, .line = 1, .err = err, .err_len = err_len};
    struct hps__conf_pb_msg *m = calloc(1, sizeof(*m));

    if (!m) {
        hps__conf_msg(err, err_len, "%s: out of memory", name);
        return -ENOMEM;
    }
    if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0) /* UTF-8 byte order mark */
        lx.p += 3;
    advance(&lx);
    parse_message(&lx, m, '\0', 0);
    if (lx.rc) {
        hps__conf_pb_free(m);
        return lx.rc;
    }
    *ret = m;
    return 0;
}

const struct hps__conf_pb_field *hps__conf_pb_find(const struct hps__conf_pb_msg *m,
                                                   const char *name)
{
    for (size_t i = 0; m && i < m->n; i++)
        if (strcmp(m->fields[i].name, name) == 0)
            return &m->fields[i];
    return NULL;
}
