/*
 * kserve_text.c -- growable text buffer and the JSON / Prometheus value
 * formatting of the HTTP front end, plus the public hps_kserve_text_*
 * appenders the backend's metrics callback uses.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worker/kserve_internal.h"

void hps__kserve_text_init(hps__kserve_text_t *t)
{
    t->data = NULL;
    t->len = 0;
    t->cap = 0;
    t->oom = false;
}

void hps__kserve_text_fini(hps__kserve_text_t *t)
{
    free(t->data);
    hps__kserve_text_init(t);
}

bool hps__kserve_text_reserve(hps__kserve_text_t *t, size_t extra)
{
    if (t->oom)
        return false;
    if (extra >= SIZE_MAX / 2 - t->len) {
        t->oom = true;
        return false;
    }
    size_t need = t->len + extra + 1;
    if (need <= t->cap)
        return true;
    size_t cap = t->cap ? t->cap : 256;
    while (cap < need)
        cap *= 2;
    char *p = realloc(t->data, cap);
    if (!p) {
        t->oom = true;
        return false;
    }
    t->data = p;
    t->cap = cap;
    return true;
}

void hps__kserve_text_put(hps__kserve_text_t *t, const char *s, size_t n)
{
    if (!hps__kserve_text_reserve(t, n))
        return;
    if (n)
        memcpy(t->data + t->len, s, n);
    t->len += n;
    t->data[t->len] = '\0';
}

void hps__kserve_text_puts(hps__kserve_text_t *t, const char *s)
{
    hps__kserve_text_put(t, s, strlen(s));
}

void hps__kserve_text_putc(hps__kserve_text_t *t, char c)
{
    hps__kserve_text_put(t, &c, 1);
}

void hps__kserve_text_vprintf(hps__kserve_text_t *t, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    char small[256];
    int n = vsnprintf(small, sizeof(small), fmt, ap2);
    va_end(ap2);
    if (n < 0) {
        t->oom = true; /* encoding error: poison the buffer, as for ENOMEM */
        return;
    }
    if ((size_t)n < sizeof(small)) {
        hps__kserve_text_put(t, small, (size_t)n);
        return;
    }
    if (!hps__kserve_text_reserve(t, (size_t)n))
        return;
    vsnprintf(t->data + t->len, (size_t)n + 1, fmt, ap);
    t->len += (size_t)n;
}

void hps__kserve_text_printf(hps__kserve_text_t *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    hps__kserve_text_vprintf(t, fmt, ap);
    va_end(ap);
}

size_t hps__kserve_utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf; /* range of the second byte */
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0; /* overlong below U+0800 */
        else if (c == 0xed)
            hi = 0x9f; /* surrogates U+D800..U+DFFF */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90; /* overlong below U+10000 */
        else if (c == 0xf4)
            hi = 0x8f; /* past U+10FFFF */
    } else {
        return 0; /* 80..C1 (continuation, overlong 2-byte lead), F5..FF */
    }
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return len;
}

/* Bytes of the maximal subpart of an ill-formed sequence at s[0, n) (at
 * least 1): the lead byte and the continuation bytes that could still
 * have completed it.  Each such subpart becomes one U+FFFD, as Unicode's
 * "best practice" says (and Python's decode(errors='replace') does). */
static size_t utf8_bad_len(const unsigned char *s, size_t n)
{
    unsigned char pad[4] = {s[0], 0x80, 0x80, 0x80};
    size_t i = 1;
    while (i < n && i < 4) {
        pad[i] = s[i];
        if (!hps__kserve_utf8_seq(pad, 4))
            break;
        i++;
    }
    return i;
}

size_t hps__kserve_utf8_cut(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = s[n - back];
        if (c < 0x80)
            return n;
        if (c < 0xc0)
            continue;  /* a continuation byte: look further back for the lead */
        if (back == 1) /* a lone lead byte: any valid one starts a sequence */
            return c >= 0xc2 && c <= 0xf4 ? n - 1 : n;
        /* s[n - back, n) padded with continuation bytes: the second byte,
         * the only one whose range depends on the lead, is a real one. */
        unsigned char pad[4] = {0x80, 0x80, 0x80, 0x80};
        memcpy(pad, s + n - back, back);
        return hps__kserve_utf8_seq(pad, 4) > back ? n - back : n;
    }
    return n;
}

void hps__kserve_text_json_str(hps__kserve_text_t *t, const char *str, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)str;
    /* Worst case every byte becomes \u00XX (6 bytes), plus the quotes;
     * an invalid byte becomes at most 3 (U+FFFD). */
    if (n > SIZE_MAX / 8 || !hps__kserve_text_reserve(t, n * 6 + 2))
        return;
    char *w = t->data + t->len;
    *w++ = '"';
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        if (c >= 0x80) {
            size_t k = hps__kserve_utf8_seq(s + i, n - i);
            if (k) {
                memcpy(w, s + i, k);
                w += k;
                i += k;
            } else {
                memcpy(w, "\xef\xbf\xbd", 3); /* U+FFFD */
                w += 3;
                i += utf8_bad_len(s + i, n - i);
            }
            continue;
        }
        i++;
        if (c == '"' || c == '\\') {
            *w++ = '\\';
            *w++ = (char)c;
        } else if (c >= 0x20 && c != 0x7f) {
            *w++ = (char)c;
        } else if (c == '\n') {
            *w++ = '\\';
            *w++ = 'n';
        } else if (c == '\t') {
            *w++ = '\\';
            *w++ = 't';
        } else if (c == '\r') {
            *w++ = '\\';
            *w++ = 'r';
        } else {
            memcpy(w, "\\u00", 4);
            w[4] = hex[c >> 4];
            w[5] = hex[c & 15];
            w += 6;
        }
    }
    *w++ = '"';
    *w = '\0';
    t->len = (size_t)(w - t->data);
}

void hps__kserve_text_u64(hps__kserve_text_t *t, uint64_t v)
{
    char buf[24];
    char *p = buf + sizeof(buf);
    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    hps__kserve_text_put(t, p, (size_t)(buf + sizeof(buf) - p));
}

void hps__kserve_text_i64(hps__kserve_text_t *t, int64_t v)
{
    if (v < 0) {
        hps__kserve_text_putc(t, '-');
        hps__kserve_text_u64(t, (uint64_t)0 - (uint64_t)v);
    } else {
        hps__kserve_text_u64(t, (uint64_t)v);
    }
}

void hps__kserve_text_f32(hps__kserve_text_t *t, float v)
{
    if (isnan(v)) {
        hps__kserve_text_put(t, "NaN", 3);
        return;
    }
    if (isinf(v)) {
        hps__kserve_text_puts(t, v < 0 ? "-Infinity" : "Infinity");
        return;
    }
    /* 9 significant digits identify every float exactly (FLT_DECIMAL_DIG). */
    if (!hps__kserve_text_reserve(t, 24))
        return;
    int n = snprintf(t->data + t->len, 24, "%.9g", (double)v);
    if (n > 0 && n < 24)
        t->len += (size_t)n;
}

void hps__kserve_text_label(hps__kserve_text_t *t, const char *s)
{
    for (const char *p = s; *p; p++) {
        if (*p == '\\')
            hps__kserve_text_put(t, "\\\\", 2);
        else if (*p == '"')
            hps__kserve_text_put(t, "\\\"", 2);
        else if (*p == '\n')
            hps__kserve_text_put(t, "\\n", 2);
        else
            hps__kserve_text_putc(t, *p);
    }
}

char *hps__kserve_text_steal(hps__kserve_text_t *t, size_t *ret_len)
{
    char *p = t->data;
    *ret_len = t->len;
    hps__kserve_text_init(t);
    return p;
}

int hps__kserve_kerr_set(hps__kserve_kerr_t *e, unsigned status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    e->status = status;
    int n = vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof(e->msg)) /* truncated: never end in half a character */
        e->msg[hps__kserve_utf8_cut(e->msg, sizeof(e->msg) - 1)] = '\0';
    return -1;
}

uint64_t hps__kserve_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t hps__kserve_epoch_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- Public appenders for backend->metrics() ---------------------------- */

/* Undo a failed append: the buffer keeps its previous contents, usable again. */
static hps_err_t text_settle(hps_kserve_text_t *text, size_t len)
{
    if (!text->oom)
        return 0;
    text->oom = false;
    text->len = len;
    if (text->data)
        text->data[len] = '\0';
    return -ENOMEM;
}

hps_err_t hps_kserve_text_append(hps_kserve_text_t *text, const char *s, size_t n)
{
    if (!text || (!s && n))
        return HPS_EINVAL;
    size_t len = text->len;
    hps__kserve_text_put(text, s, n);
    return text_settle(text, len);
}

hps_err_t hps_kserve_text_appendf(hps_kserve_text_t *text, const char *fmt, ...)
{
    if (!text || !fmt)
        return HPS_EINVAL;
    size_t len = text->len;
    va_list ap;
    va_start(ap, fmt);
    hps__kserve_text_vprintf(text, fmt, ap);
    va_end(ap);
    return text_settle(text, len);
}

hps_err_t hps_kserve_text_append_label(hps_kserve_text_t *text, const char *s)
{
    if (!text || !s)
        return HPS_EINVAL;
    size_t len = text->len;
    hps__kserve_text_label(text, s);
    return text_settle(text, len);
}
