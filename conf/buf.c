/*
 * buf.c -- a growable string buffer and the error-message helper.
 *
 * An append that cannot allocate sets b->oom and keeps what is there, so a
 * caller builds a whole text and checks for ENOMEM once at the end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/internal.h"

static bool buf_reserve(struct hps__conf_buf *b, size_t more)
{
    if (b->oom)
        return false;
    if (b->len + more + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + more + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void hps__conf_buf_add(struct hps__conf_buf *b, const char *s, size_t n)
{
    if (!buf_reserve(b, n))
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void hps__conf_buf_puts(struct hps__conf_buf *b, const char *s)
{
    hps__conf_buf_add(b, s, strlen(s));
}

void hps__conf_buf_printf(struct hps__conf_buf *b, const char *fmt, ...)
{
    va_list ap;
    char small[256];

    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof(small)) {
        hps__conf_buf_add(b, small, (size_t)n);
        return;
    }
    if (!buf_reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

const char *hps__conf_buf_str(const struct hps__conf_buf *b)
{
    return b->p ? b->p : "";
}

void hps__conf_buf_fini(struct hps__conf_buf *b)
{
    free(b->p);
    *b = (struct hps__conf_buf){0};
}

void hps__conf_msg(char *err, size_t err_len, const char *fmt, ...)
{
    va_list ap;

    if (!err || err_len == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

void hps__conf_cloc_enter(struct hps__conf_cloc *l)
{
    l->c = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    l->old = l->c ? uselocale(l->c) : (locale_t)0;
}

void hps__conf_cloc_leave(struct hps__conf_cloc *l)
{
    if (!l->c)
        return;
    uselocale(l->old);
    freelocale(l->c);
}

char *hps__conf_strndup(const char *s, size_t n)
{
    char *p = malloc(n + 1);

    if (!p)
        return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}
