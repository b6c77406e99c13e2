/*
 * kserve_zlib.c -- gzip and deflate content codings of the HTTP front end
 * (zlib): request bodies inflated as they arrive, under the server's body
 * limit; inference responses compressed where Accept-Encoding asks.
 *
 * Inflating a hostile body.  A few KiB of deflate can inflate to
 * gigabytes, so the decoder never hands out more than max_out bytes: zlib
 * writes into a fixed 16 KiB chunk inside the decoder, and a chunk that
 * would take the total past max_out stops the decoding with an error
 * before any of it reaches the sink.  The caller's buffer therefore grows
 * to max_out at most, and the CPU spent is bounded by max_out bytes of
 * output plus hps__kserve_zbound(max_out) bytes of input, the most compressed
 * input accepted.
 *
 * Wrappers.  Triton inflates either coding with zlib's automatic detection
 * (windowBits 15 | 32), so a client may label a gzip body "deflate" and the
 * other way round.  The decoder waits for the first two bytes and picks the
 * wrapper itself: the gzip magic (1f 8b), else a valid zlib header (CM 8,
 * CINFO <= 7, FCHECK), else, for "deflate" only, raw deflate (RFC 1951,
 * which some HTTP clients send under that name).  A raw stream cannot start
 * like a zlib header in practice: that would be a non-final stored block
 * with a padding bit set, which no compressor writes.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#include "worker/kserve_internal.h"

/* Bytes zlib inflates at a time before they go to the sink. */
#define OUT_CHUNK ((size_t)16 << 10)

/* Level of response compression (see hps__kserve_zcompress). */
#define COMPRESS_LEVEL 1

struct hps__kserve_inflate {
    z_stream zs;
    enum hps__kserve_zenc enc;
    bool started; /* inflateInit2 done: the wrapper is known */
    bool ended;   /* the current stream (gzip member) reached its end */
    bool gzip;    /* gzip wrapper: another member may follow */
    bool failed;  /* err is set; everything else is refused */
    unsigned char head[2];
    size_t head_len; /* bytes of head[] seen before the start */
    size_t max_out;
    uint64_t max_in;
    uint64_t in_total;
    uint64_t out_total;
    hps__kserve_zsink_t sink;
    void *ctx;
    hps__kserve_kerr_t err;
    char out[OUT_CHUNK];
};

/* ------------------------------------------------------------------------ */
/* Header values                                                             */
/* ------------------------------------------------------------------------ */

static bool blank(char c)
{
    return c == ' ' || c == '\t';
}

/* s[0, n) without surrounding blanks: the new start, *n updated. */
static const char *trim(const char *s, size_t *n)
{
    while (*n && blank(*s)) {
        s++;
        (*n)--;
    }
    while (*n && blank(s[*n - 1]))
        (*n)--;
    return s;
}

static bool token_is(const char *s, size_t n, const char *word)
{
    return n == strlen(word) && strncasecmp(s, word, n) == 0;
}

/* The coding a token names (identity included); UNKNOWN otherwise. */
static enum hps__kserve_zenc token_enc(const char *s, size_t n)
{
    if (n == 0 || token_is(s, n, "identity"))
        return HPS__KSERVE_ZENC_IDENTITY;
    if (token_is(s, n, "gzip") || token_is(s, n, "x-gzip"))
        return HPS__KSERVE_ZENC_GZIP;
    if (token_is(s, n, "deflate"))
        return HPS__KSERVE_ZENC_DEFLATE;
    return HPS__KSERVE_ZENC_UNKNOWN;
}

enum hps__kserve_zenc hps__kserve_zenc_parse(const char *value)
{
    if (!value)
        return HPS__KSERVE_ZENC_IDENTITY;
    size_t n = strlen(value);
    const char *s = trim(value, &n);
    return token_enc(s, n);
}

/* An HTTP qvalue ("0", "0.5", "1.000") in thousandths; -1 if malformed. */
static int qvalue(const char *s, size_t n)
{
    if (n == 0 || (s[0] != '0' && s[0] != '1'))
        return -1;
    int q = (s[0] - '0') * 1000;
    if (n == 1)
        return q;
    if (s[1] != '.' || n > 5)
        return -1;
    int scale = 100;
    for (size_t i = 2; i < n; i++, scale /= 10) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        q += (s[i] - '0') * scale;
    }
    return q <= 1000 ? q : -1;
}

/* The q of one Accept-Encoding element's parameters p[0, n) (after the
 * coding's ';'): 1000 when absent, -1 when malformed. */
static int element_q(const char *p, size_t n)
{
    int q = 1000;
    while (n) {
        const char *semi = memchr(p, ';', n);
        size_t len = semi ? (size_t)(semi - p) : n;
        const char *eq = memchr(p, '=', len);
        if (eq) {
            size_t kn = (size_t)(eq - p), vn = len - kn - 1;
            const char *k = trim(p, &kn), *v = trim(eq + 1, &vn);
            if (token_is(k, kn, "q"))
                q = qvalue(v, vn);
        }
        if (!semi)
            break;
        p = semi + 1;
        n -= len + 1;
    }
    return q;
}

enum hps__kserve_zenc hps__kserve_zenc_accept(const char *value)
{
    enum hps__kserve_zenc best = HPS__KSERVE_ZENC_IDENTITY;
    int best_q = 0; /* strictly more wins: q=0 never, ties keep the first */
    const char *p = value;
    size_t left = value ? strlen(value) : 0;
    while (left) {
        const char *comma = memchr(p, ',', left);
        size_t len = comma ? (size_t)(comma - p) : left;
        const char *semi = memchr(p, ';', len);
        size_t cn = semi ? (size_t)(semi - p) : len;
        const char *coding = trim(p, &cn);
        enum hps__kserve_zenc e = cn ? token_enc(coding, cn) : HPS__KSERVE_ZENC_UNKNOWN;
        int q = semi ? element_q(semi + 1, (size_t)(p + len - semi - 1)) : 1000;
        if (e != HPS__KSERVE_ZENC_UNKNOWN && q > best_q) {
            best = e;
            best_q = q;
        }
        if (!comma)
            break;
        p = comma + 1;
        left -= len + 1;
    }
    return best;
}

const char *hps__kserve_zenc_name(enum hps__kserve_zenc enc)
{
    switch (enc) {
    case HPS__KSERVE_ZENC_IDENTITY:
        return "identity";
    case HPS__KSERVE_ZENC_GZIP:
        return "gzip";
    case HPS__KSERVE_ZENC_DEFLATE:
        return "deflate";
    default:
        return "unknown";
    }
}

uint64_t hps__kserve_zbound(size_t n)
{
    /* deflateBound()'s bound for any zlib settings (stored blocks as small
     * as memLevel 1 makes them), plus a gzip header naming a file. */
    return (uint64_t)n + (n >> 3) + (n >> 6) + 4096;
}

/* ------------------------------------------------------------------------ */
/* Inflating                                                                 */
/* ------------------------------------------------------------------------ */

int hps__kserve_inflate_create(enum hps__kserve_zenc enc, size_t max_out, hps__kserve_zsink_t sink,
                               void *ctx, struct hps__kserve_inflate **ret)
{
    struct hps__kserve_inflate *z = malloc(sizeof(*z));
    if (!z)
        return -ENOMEM;
    memset(z, 0, offsetof(struct hps__kserve_inflate, out));
    z->enc = enc == HPS__KSERVE_ZENC_GZIP ? HPS__KSERVE_ZENC_GZIP : HPS__KSERVE_ZENC_DEFLATE;
    z->max_out = max_out;
    z->max_in = hps__kserve_zbound(max_out);
    z->sink = sink;
    z->ctx = ctx;
    *ret = z;
    return 0;
}

void hps__kserve_inflate_destroy(struct hps__kserve_inflate *z)
{
    if (!z)
        return;
    if (z->started)
        inflateEnd(&z->zs);
    free(z);
}

const hps__kserve_kerr_t *hps__kserve_inflate_error(const struct hps__kserve_inflate *z)
{
    return z->failed ? &z->err : NULL;
}

uint64_t hps__kserve_inflate_total(const struct hps__kserve_inflate *z)
{
    return z->out_total;
}

__attribute__((format(printf, 3, 4))) static int fail(struct hps__kserve_inflate *z,
                                                      unsigned status, const char *fmt, ...)
{
    char msg[HPS__KSERVE_KERR_MSG_MAX - 80];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    z->failed = true;
    return hps__kserve_kerr_set(&z->err, status,
                                "failed to decompress the request body (Content-Encoding: %s): %s",
                                hps__kserve_zenc_name(z->enc), msg);
}

static int too_large(struct hps__kserve_inflate *z)
{
    z->failed = true;
    return hps__kserve_kerr_set(
        &z->err, 400,
        "request body of more than %zu bytes once decompressed (Content-Encoding: "
        "%s) exceeds the maximum allowed value of %zu bytes",
        z->max_out, hps__kserve_zenc_name(z->enc), z->max_out);
}

/* The wrapper from the first two bytes, then inflateInit2. */
static int start(struct hps__kserve_inflate *z)
{
    const unsigned char *h = z->head;
    bool gzip = h[0] == 0x1f && h[1] == 0x8b;
    bool zlib = (h[0] & 0x0f) == 8 && (h[0] >> 4) <= 7 && ((h[0] << 8) | h[1]) % 31 == 0;
    int wbits = gzip || (!zlib && z->enc == HPS__KSERVE_ZENC_GZIP) ? 15 + 16 : zlib ? 15 : -15;
    z->gzip = wbits > 15;
    int rc = inflateInit2(&z->zs, wbits);
    if (rc != Z_OK)
        return rc == Z_MEM_ERROR ? fail(z, 500, "out of memory")
                                 : fail(z, 500, "inflateInit2 failed (%d)", rc);
    z->started = true;
    return 0;
}

/* Hand the chunk's first n bytes to the sink, within max_out. */
static int deliver(struct hps__kserve_inflate *z, size_t n)
{
    if (z->out_total + n > z->max_out)
        return too_large(z);
    if (z->sink(z->ctx, z->out, n, &z->err) != 0) {
        z->failed = true;
        return -1;
    }
    z->out_total += n;
    return 0;
}

static int inflate_error(struct hps__kserve_inflate *z, int rc)
{
    switch (rc) {
    case Z_NEED_DICT:
        return fail(z, 400, "a preset dictionary is not supported");
    case Z_MEM_ERROR:
        return fail(z, 500, "out of memory");
    case Z_DATA_ERROR:
        return fail(z, 400, "%s", z->zs.msg ? z->zs.msg : "invalid compressed data");
    default:
        return fail(z, 500, "inflate failed (%d)", rc);
    }
}

/* Inflate in[0, n) (the wrapper is known). */
static int run(struct hps__kserve_inflate *z, const unsigned char *in, size_t n)
{
    while (n > 0) {
        if (z->ended) { /* bytes after a stream: another gzip member, or garbage */
            if (!z->gzip)
                return fail(z, 400, "data after the end of the compressed stream");
            inflateReset(&z->zs);
            z->ended = false;
        }
        uInt take = n > UINT_MAX ? UINT_MAX : (uInt)n;
        z->zs.next_in = (Bytef *)(uintptr_t)in;
        z->zs.avail_in = take;
        int rc;
        do {
            z->zs.next_out = (Bytef *)z->out;
            z->zs.avail_out = (uInt)OUT_CHUNK;
            rc = inflate(&z->zs, Z_NO_FLUSH);
            size_t got = OUT_CHUNK - z->zs.avail_out;
            if (got && deliver(z, got))
                return -1;
            if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
                return inflate_error(z, rc);
        } while (rc == Z_OK && (z->zs.avail_in > 0 || z->zs.avail_out == 0));
        z->ended = rc == Z_STREAM_END;
        size_t used = take - z->zs.avail_in;
        if (used == 0 && !z->ended)
            return fail(z, 500, "inflate made no progress");
        in += used;
        n -= used;
    }
    return 0;
}

int hps__kserve_inflate_feed(struct hps__kserve_inflate *z, const void *in, size_t n)
{
    if (z->failed)
        return -1;
    z->in_total += n;
    if (z->in_total > z->max_in) {
        z->failed = true;
        return hps__kserve_kerr_set(
            &z->err, 400,
            "compressed request body of more than %llu bytes exceeds the "
            "maximum allowed value of %llu bytes (%zu bytes once decompressed)",
            (unsigned long long)z->max_in, (unsigned long long)z->max_in, z->max_out);
    }
    const unsigned char *p = in;
    if (!z->started) {
        while (n && z->head_len < 2) {
            z->head[z->head_len++] = *p++;
            n--;
        }
        if (z->head_len < 2)
            return 0;
        if (start(z) || run(z, z->head, 2))
            return -1;
    }
    return run(z, p, n);
}

int hps__kserve_inflate_end(struct hps__kserve_inflate *z)
{
    if (z->failed)
        return -1;
    if (z->in_total == 0)
        return fail(z, 400, "the body is empty");
    if (!z->ended)
        return fail(z, 400, "the compressed stream is truncated (%llu bytes inflated)",
                    (unsigned long long)z->out_total);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Compressing                                                               */
/* ------------------------------------------------------------------------ */

/* Point zlib's output at buf[len, cap). */
static void out_window(z_stream *zs, char *buf, size_t cap, size_t len)
{
    size_t room = cap - len;
    zs->next_out = (Bytef *)buf + len;
    zs->avail_out = room > UINT_MAX ? UINT_MAX : (uInt)room;
}

int hps__kserve_zcompress(enum hps__kserve_zenc enc, const struct hps__kserve_zpart *parts,
                          size_t nparts, char **ret, size_t *ret_len)
{
    if (enc != HPS__KSERVE_ZENC_GZIP && enc != HPS__KSERVE_ZENC_DEFLATE)
        return -EINVAL;
    z_stream zs;
    memset(&zs, 0, sizeof(zs));
    int rc = deflateInit2(&zs, COMPRESS_LEVEL, Z_DEFLATED,
                          enc == HPS__KSERVE_ZENC_GZIP ? 15 + 16 : 15, 8, Z_DEFAULT_STRATEGY);
    if (rc != Z_OK)
        return rc == Z_MEM_ERROR ? -ENOMEM : -EINVAL;
    size_t total = 0;
    for (size_t i = 0; i < nparts; i++)
        total += parts[i].len;
    /* deflateBound: one pass without growing, unless the bound is off. */
    size_t cap = (size_t)deflateBound(&zs, (uLong)total);
    size_t len = 0;
    char *buf = malloc(cap);
    int err = buf ? 0 : -ENOMEM;
    for (size_t i = 0; i <= nparts && !err; i++) {
        const unsigned char *in = i < nparts ? parts[i].data : NULL;
        size_t left = i < nparts ? parts[i].len : 0;
        int flush = i < nparts ? Z_NO_FLUSH : Z_FINISH;
        for (;;) {
            uInt take = left > UINT_MAX ? UINT_MAX : (uInt)left;
            zs.next_in = (Bytef *)(uintptr_t)in;
            zs.avail_in = take;
            if (len == cap) {
                char *p = realloc(buf, cap + cap / 2 + 64);
                if (!p) {
                    err = -ENOMEM;
                    break;
                }
                buf = p;
                cap += cap / 2 + 64;
            }
            out_window(&zs, buf, cap, len);
            uInt room = zs.avail_out;
            rc = deflate(&zs, left > take ? Z_NO_FLUSH : flush);
            len += room - zs.avail_out;
            if (in)
                in += take - zs.avail_in;
            left -= take - zs.avail_in;
            if (rc == Z_STREAM_ERROR) {
                err = -EINVAL;
                break;
            }
            if (flush == Z_FINISH ? rc == Z_STREAM_END : left == 0 && zs.avail_out > 0)
                break;
        }
    }
    deflateEnd(&zs);
    if (err) {
        free(buf);
        return err;
    }
    char *p = len < cap ? realloc(buf, len ? len : 1) : buf;
    *ret = p ? p : buf;
    *ret_len = len;
    return 0;
}
