/*
 * test-kserve-zlib.c -- gzip and deflate bodies (worker/kserve_zlib.c):
 * the header parsers, the incremental decoder against the body limit (an
 * exact-limit body, one byte over, a zip bomb, truncated, corrupt and
 * trailing data, every wrapper under either name, any split of the input),
 * the response compressor; then the same over real TCP against an
 * in-process server with the fake backend: compressed requests answer
 * byte for byte what plain ones do, compressed answers inflate to the
 * plain ones, and the server's body budget is whole again afterwards.
 *
 * Reference streams are made here with zlib's own API, not with the code
 * under test.
 */
#include <zlib.h>

#include <json-c/json.h>

#include "kstest.h"
#include "worker/kserve_http.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

/* Reference compressor: windowBits 15 (zlib), 31 (gzip) or -15 (raw). */
static unsigned char *zref(int wbits, int level, const void *in, size_t n, size_t *ret_len)
{
    z_stream zs;
    memset(&zs, 0, sizeof(zs));
    KS_CHECK(deflateInit2(&zs, level, Z_DEFLATED, wbits, 8, Z_DEFAULT_STRATEGY) == Z_OK, "init");
    size_t cap = deflateBound(&zs, (uLong)n) + 64;
    unsigned char *out = malloc(cap);
    zs.next_in = (Bytef *)(uintptr_t)in;
    zs.avail_in = (uInt)n;
    zs.next_out = out;
    zs.avail_out = (uInt)cap;
    KS_CHECK(deflate(&zs, Z_FINISH) == Z_STREAM_END, "deflate");
    *ret_len = cap - zs.avail_out;
    deflateEnd(&zs);
    return out;
}

/* Reference decompressor (gzip or zlib, detected); NULL when it fails. */
static unsigned char *zinflate_ref(const void *in, size_t n, size_t *ret_len)
{
    z_stream zs;
    memset(&zs, 0, sizeof(zs));
    KS_CHECK(inflateInit2(&zs, 15 + 32) == Z_OK, "init");
    size_t cap = n * 8 + 1024, len = 0;
    unsigned char *out = malloc(cap);
    zs.next_in = (Bytef *)(uintptr_t)in;
    zs.avail_in = (uInt)n;
    int rc;
    do {
        if (len == cap)
            out = realloc(out, cap *= 2);
        zs.next_out = out + len;
        zs.avail_out = (uInt)(cap - len);
        rc = inflate(&zs, Z_NO_FLUSH);
        len = cap - zs.avail_out;
    } while (rc == Z_OK);
    inflateEnd(&zs);
    if (rc != Z_STREAM_END || zs.avail_in != 0) {
        free(out);
        return NULL;
    }
    *ret_len = len;
    return out;
}

/* A sink that collects what it gets, or refuses past `refuse_after`. */
struct collect {
    char *data;
    size_t len;
    size_t cap;
    size_t calls;
    size_t refuse_after; /* 0: never refuse */
};

static int collect_sink(void *ctx, const char *data, size_t n, hps__kserve_kerr_t *err)
{
    struct collect *c = ctx;
    c->calls++;
    KS_CHECK(n > 0, "empty sink call");
    if (c->refuse_after && c->len + n > c->refuse_after)
        return hps__kserve_kerr_set(err, 503, "sink full");
    if (c->len + n > c->cap) {
        c->cap = (c->len + n) * 2;
        c->data = realloc(c->data, c->cap);
    }
    memcpy(c->data + c->len, data, n);
    c->len += n;
    return 0;
}

/* Decode in[0, n) in pieces of at most `step` bytes (0: random sizes).
 * Returns 0 or -1; *ret_err gets the decoder's error (status 0 if none). */
static int decode(enum hps__kserve_zenc enc, size_t max, const void *in, size_t n, size_t step,
                  struct collect *out, hps__kserve_kerr_t *ret_err)
{
    struct hps__kserve_inflate *z;
    KS_CHECK(hps__kserve_inflate_create(enc, max, collect_sink, out, &z) == 0, "create");
    const char *p = in;
    int rc = 0;
    for (size_t off = 0; off < n && rc == 0;) {
        size_t k = step ? step : 1 + (size_t)(ks_rand() % 5000);
        k = k > n - off ? n - off : k;
        rc = hps__kserve_inflate_feed(z, p + off, k);
        off += k;
    }
    if (rc == 0)
        rc = hps__kserve_inflate_end(z);
    KS_CHECK(hps__kserve_inflate_total(z) == out->len, "total %llu vs %zu",
             (unsigned long long)hps__kserve_inflate_total(z), out->len);
    const hps__kserve_kerr_t *e = hps__kserve_inflate_error(z);
    KS_CHECK((rc == 0) == (e == NULL), "error iff -1");
    memset(ret_err, 0, sizeof(*ret_err));
    if (e)
        *ret_err = *e;
    /* Refused for good: another feed does nothing. */
    size_t calls = out->calls;
    if (rc && n)
        KS_CHECK(hps__kserve_inflate_feed(z, in, n) == -1 && out->calls == calls, "sticky failure");
    hps__kserve_inflate_destroy(z);
    return rc;
}

static char *sample(size_t n)
{
    char *s = malloc(n + 1);
    for (size_t i = 0; i < n; i++) /* compressible, not trivial */
        s[i] = "{\"KEYS\":[0123456789, ]}"[ks_rand() % 23];
    s[n] = 0;
    return s;
}

/* ------------------------------------------------------------------------ */
/* Header values                                                             */
/* ------------------------------------------------------------------------ */

static void test_parse_headers(void **state)
{
    (void)state;
    static const struct {
        const char *v;
        enum hps__kserve_zenc e;
    } ce[] = {
        {NULL, HPS__KSERVE_ZENC_IDENTITY},
        {"", HPS__KSERVE_ZENC_IDENTITY},
        {" identity ", HPS__KSERVE_ZENC_IDENTITY},
        {"gzip", HPS__KSERVE_ZENC_GZIP},
        {"GZip", HPS__KSERVE_ZENC_GZIP},
        {"x-gzip", HPS__KSERVE_ZENC_GZIP},
        {"\tdeflate ", HPS__KSERVE_ZENC_DEFLATE},
        {"br", HPS__KSERVE_ZENC_UNKNOWN},
        {"gzip, identity", HPS__KSERVE_ZENC_UNKNOWN},
        {"gzipx", HPS__KSERVE_ZENC_UNKNOWN},
        {"\xff\x01", HPS__KSERVE_ZENC_UNKNOWN},
    };
    for (size_t i = 0; i < sizeof(ce) / sizeof(ce[0]); i++)
        KS_CHECK(hps__kserve_zenc_parse(ce[i].v) == ce[i].e, "Content-Encoding '%s': %d", ce[i].v,
                 (int)hps__kserve_zenc_parse(ce[i].v));
    static const struct {
        const char *v;
        enum hps__kserve_zenc e;
    } ae[] = {
        {NULL, HPS__KSERVE_ZENC_IDENTITY},
        {"", HPS__KSERVE_ZENC_IDENTITY},
        {"gzip", HPS__KSERVE_ZENC_GZIP},
        {"deflate", HPS__KSERVE_ZENC_DEFLATE},
        {"gzip, deflate", HPS__KSERVE_ZENC_GZIP}, /* a tie: the first */
        {"deflate,gzip", HPS__KSERVE_ZENC_DEFLATE},
        {"gzip;q=0.5, deflate", HPS__KSERVE_ZENC_DEFLATE}, /* the highest q */
        {"gzip;q=0", HPS__KSERVE_ZENC_IDENTITY},           /* q=0: never */
        {"gzip ; q=0.000, deflate;q=0", HPS__KSERVE_ZENC_IDENTITY},
        {"identity, gzip", HPS__KSERVE_ZENC_IDENTITY}, /* identity first */
        {"identity;q=0.5, gzip;q=0.6", HPS__KSERVE_ZENC_GZIP},
        {"br, *", HPS__KSERVE_ZENC_IDENTITY}, /* unknown codings, '*' ignored */
        {"br;q=1, DEFLATE;q=0.1", HPS__KSERVE_ZENC_DEFLATE},
        {"gzip;q=2, deflate;q=0.2", HPS__KSERVE_ZENC_DEFLATE}, /* malformed q: skipped */
        {"gzip;q=abc", HPS__KSERVE_ZENC_IDENTITY},
        {"gzip;q=0.1234", HPS__KSERVE_ZENC_IDENTITY},
        {"gzip;level=1;q=1.000", HPS__KSERVE_ZENC_GZIP},
        {" , ,gzip", HPS__KSERVE_ZENC_GZIP},
        {"x-gzip;q=0.9", HPS__KSERVE_ZENC_GZIP},
    };
    for (size_t i = 0; i < sizeof(ae) / sizeof(ae[0]); i++)
        KS_CHECK(hps__kserve_zenc_accept(ae[i].v) == ae[i].e, "Accept-Encoding '%s': %d", ae[i].v,
                 (int)hps__kserve_zenc_accept(ae[i].v));
    KS_CHECK(strcmp(hps__kserve_zenc_name(HPS__KSERVE_ZENC_GZIP), "gzip") == 0 &&
                 strcmp(hps__kserve_zenc_name(HPS__KSERVE_ZENC_DEFLATE), "deflate") == 0,
             "names");
    KS_CHECK(hps__kserve_zbound(1000) > 1000 + 13 && hps__kserve_zbound(1 << 20) < (2u << 20),
             "bound");
}

/* ------------------------------------------------------------------------ */
/* Decoder                                                                   */
/* ------------------------------------------------------------------------ */

/* Every wrapper under each name, any split: the exact bytes back. */
static void test_inflate_roundtrip(void **state)
{
    (void)state;
    size_t n = 300000;
    char *plain = sample(n);
    static const struct {
        int wbits;
        enum hps__kserve_zenc label;
    } cases[] = {
        {31, HPS__KSERVE_ZENC_GZIP},
        {15, HPS__KSERVE_ZENC_DEFLATE},
        {-15, HPS__KSERVE_ZENC_DEFLATE},
        {15, HPS__KSERVE_ZENC_GZIP},    /* zlib labelled gzip: Triton accepts it */
        {31, HPS__KSERVE_ZENC_DEFLATE}, /* and gzip labelled deflate */
    };
    static const size_t steps[] = {0, 1, 7, 65536, 1 << 30};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t zl;
        unsigned char *zb = zref(cases[i].wbits, 6, plain, n, &zl);
        for (size_t s = 0; s < sizeof(steps) / sizeof(steps[0]); s++) {
            if (steps[s] == 1 && i > 1)
                continue; /* byte by byte once per wrapper is enough */
            struct collect out = {0};
            hps__kserve_kerr_t e;
            int rc = decode(cases[i].label, n, zb, zl, steps[s], &out, &e);
            KS_CHECK(rc == 0, "case %zu step %zu: %u %s", i, steps[s], e.status, e.msg);
            KS_CHECK(out.len == n && memcmp(out.data, plain, n) == 0, "case %zu: bytes", i);
            free(out.data);
        }
        free(zb);
    }
    /* Raw deflate is not gzip. */
    size_t zl;
    unsigned char *zb = zref(-15, 6, plain, n, &zl);
    struct collect out = {0};
    hps__kserve_kerr_t e;
    KS_CHECK(decode(HPS__KSERVE_ZENC_GZIP, n, zb, zl, 0, &out, &e) == -1 && e.status == 400 &&
                 strstr(e.msg, "failed to decompress the request body (Content-Encoding: gzip)"),
             "raw as gzip: %u %s", e.status, e.msg);
    free(out.data);
    free(zb);
    free(plain);
}

/* A body of exactly the limit passes; one byte more is refused, and the
 * sink never sees a byte past the limit. */
static void test_inflate_exact_limit(void **state)
{
    (void)state;
    size_t max = 100000;
    char *plain = sample(max + 1);
    for (int w = 0; w < 2; w++) {
        int wbits = w ? 31 : 15;
        enum hps__kserve_zenc enc = w ? HPS__KSERVE_ZENC_GZIP : HPS__KSERVE_ZENC_DEFLATE;
        size_t zl;
        unsigned char *zb = zref(wbits, 6, plain, max, &zl);
        struct collect out = {0};
        hps__kserve_kerr_t e;
        KS_CHECK(decode(enc, max, zb, zl, 0, &out, &e) == 0, "exact limit: %s", e.msg);
        KS_CHECK(out.len == max && memcmp(out.data, plain, max) == 0, "exact bytes");
        free(out.data);
        free(zb);
        zb = zref(wbits, 6, plain, max + 1, &zl);
        memset(&out, 0, sizeof(out));
        KS_CHECK(decode(enc, max, zb, zl, 0, &out, &e) == -1, "one byte over");
        KS_CHECK(e.status == 400 && strstr(e.msg, "once decompressed") &&
                     strstr(e.msg, "exceeds the maximum allowed value of 100000 bytes"),
                 "over: %u %s", e.status, e.msg);
        KS_CHECK(out.len <= max, "sink got %zu > %zu", out.len, max);
        free(out.data);
        free(zb);
    }
    free(plain);
}

/* 256 MiB of zeros in ~250 KiB of gzip against a 1 MiB limit: refused
 * after at most 1 MiB of output, quickly. */
static void test_inflate_zip_bomb(void **state)
{
    (void)state;
    size_t big = (size_t)256 << 20, max = (size_t)1 << 20;
    z_stream zs;
    memset(&zs, 0, sizeof(zs));
    KS_CHECK(deflateInit2(&zs, 9, Z_DEFLATED, 31, 9, Z_DEFAULT_STRATEGY) == Z_OK, "init");
    size_t cap = big / 512, zl = 0;
    unsigned char *zb = malloc(cap);
    char *zeros = calloc(1, (size_t)1 << 20);
    for (size_t done = 0; done < big; done += (size_t)1 << 20) {
        zs.next_in = (Bytef *)zeros;
        zs.avail_in = 1u << 20;
        int flush = done + ((size_t)1 << 20) == big ? Z_FINISH : Z_NO_FLUSH;
        do {
            zs.next_out = zb + zl;
            zs.avail_out = (uInt)(cap - zl);
            deflate(&zs, flush);
            zl = cap - zs.avail_out;
        } while (zs.avail_in > 0);
    }
    deflateEnd(&zs);
    free(zeros);
    KS_CHECK(zl < big / 900, "a bomb: %zu compressed bytes", zl);
    uint64_t t0 = hps__kserve_now_ns();
    struct collect out = {0};
    hps__kserve_kerr_t e;
    KS_CHECK(decode(HPS__KSERVE_ZENC_GZIP, max, zb, zl, 4096, &out, &e) == -1, "bomb refused");
    uint64_t ms = (hps__kserve_now_ns() - t0) / 1000000;
    KS_CHECK(e.status == 400 && strstr(e.msg, "once decompressed"), "bomb: %u %s", e.status, e.msg);
    KS_CHECK(out.len <= max && out.cap <= 2 * max, "bomb: sink got %zu bytes", out.len);
    KS_CHECK(ms < 5000, "bomb took %llu ms: inflated past the limit?", (unsigned long long)ms);
    free(out.data);
    free(zb);
}

/* Every proper prefix of a stream is truncated; the empty body too. */
static void test_inflate_truncated(void **state)
{
    (void)state;
    size_t n = 5000;
    char *plain = sample(n);
    for (int w = 0; w < 3; w++) {
        int wbits = w == 0 ? 31 : w == 1 ? 15 : -15;
        enum hps__kserve_zenc enc = w == 0 ? HPS__KSERVE_ZENC_GZIP : HPS__KSERVE_ZENC_DEFLATE;
        size_t zl;
        unsigned char *zb = zref(wbits, 6, plain, n, &zl);
        for (size_t cut = 0; cut < zl; cut++) {
            struct collect out = {0};
            hps__kserve_kerr_t e;
            KS_CHECK(decode(enc, n, zb, cut, 0, &out, &e) == -1, "w %d: prefix %zu of %zu passed",
                     w, cut, zl);
            KS_CHECK(e.status == 400 && strstr(e.msg, "failed to decompress the request body"),
                     "w %d prefix %zu: %u %s", w, cut, e.status, e.msg);
            KS_CHECK(strstr(e.msg, cut ? "truncated" : "empty"), "w %d prefix %zu: %s", w, cut,
                     e.msg);
            free(out.data);
        }
        free(zb);
    }
    free(plain);
}

/* Flipped bytes (header, data, checksum), garbage, trailing bytes: 400,
 * never a crash or a silent success with other bytes. */
static void test_inflate_corrupt(void **state)
{
    (void)state;
    size_t n = 20000;
    char *plain = sample(n);
    size_t zl;
    unsigned char *gz = zref(31, 6, plain, n, &zl);
    /* Each byte of the stream flipped in turn (a sample of positions). */
    for (size_t pos = 0; pos < zl; pos += pos < 20 ? 1 : 97) {
        unsigned char *bad = malloc(zl);
        memcpy(bad, gz, zl);
        bad[pos] ^= 0x5a;
        struct collect out = {0};
        hps__kserve_kerr_t e;
        int rc = decode(HPS__KSERVE_ZENC_GZIP, n * 2, bad, zl, 0, &out, &e);
        /* Header bytes like MTIME or OS may be changed harmlessly. */
        if (rc == 0)
            KS_CHECK(out.len == n && memcmp(out.data, plain, n) == 0,
                     "flip at %zu: other bytes accepted", pos);
        else
            KS_CHECK(e.status == 400, "flip at %zu: %u %s", pos, e.status, e.msg);
        KS_CHECK(pos < 10 || rc != 0, "flip at %zu past the header went unnoticed", pos);
        free(out.data);
        free(bad);
    }
    /* The CRC-32 and the length of the trailer. */
    for (size_t k = 1; k <= 8; k++) {
        unsigned char *bad = malloc(zl);
        memcpy(bad, gz, zl);
        bad[zl - k] ^= 1;
        struct collect out = {0};
        hps__kserve_kerr_t e;
        KS_CHECK(decode(HPS__KSERVE_ZENC_GZIP, n * 2, bad, zl, 0, &out, &e) == -1 &&
                     e.status == 400 && strstr(e.msg, "incorrect"),
                 "trailer byte %zu: %s", k, e.msg);
        free(out.data);
        free(bad);
    }
    /* Not compressed at all. */
    struct collect out = {0};
    hps__kserve_kerr_t e;
    KS_CHECK(decode(HPS__KSERVE_ZENC_GZIP, n, plain, n, 0, &out, &e) == -1 && e.status == 400,
             "plain");
    free(out.data);
    /* Bytes after a zlib stream; a second gzip member is fine. */
    size_t dl;
    unsigned char *dz = zref(15, 6, plain, n, &dl);
    unsigned char *two = malloc(2 * zl + 1);
    memcpy(two, dz, dl);
    two[dl] = 0;
    memset(&out, 0, sizeof(out));
    KS_CHECK(decode(HPS__KSERVE_ZENC_DEFLATE, 4 * n, two, dl + 1, 0, &out, &e) == -1 &&
                 strstr(e.msg, "data after the end"),
             "trailing byte: %s", e.msg);
    free(out.data);
    memcpy(two, gz, zl);
    memcpy(two + zl, gz, zl);
    memset(&out, 0, sizeof(out));
    KS_CHECK(decode(HPS__KSERVE_ZENC_GZIP, 2 * n, two, 2 * zl, 0, &out, &e) == 0, "two members: %s",
             e.msg);
    KS_CHECK(out.len == 2 * n && memcmp(out.data, plain, n) == 0 &&
                 memcmp(out.data + n, plain, n) == 0,
             "two members: bytes");
    free(out.data);
    /* ... within the limit over both members. */
    memset(&out, 0, sizeof(out));
    KS_CHECK(decode(HPS__KSERVE_ZENC_GZIP, 2 * n - 1, two, 2 * zl, 0, &out, &e) == -1 &&
                 strstr(e.msg, "once decompressed") && out.len <= 2 * n - 1,
             "two members over the limit: %s", e.msg);
    free(out.data);
    /* Garbage after a gzip member. */
    two[zl] = 'x';
    memset(&out, 0, sizeof(out));
    KS_CHECK(decode(HPS__KSERVE_ZENC_GZIP, 2 * n, two, zl + 1, 0, &out, &e) == -1 &&
                 e.status == 400,
             "garbage after a member");
    free(out.data);
    free(two);
    free(dz);
    free(gz);
    free(plain);
}

/* A sink's error stops the decoder with the sink's status; compressed
 * input past hps__kserve_zbound() is refused. */
static void test_inflate_sink_and_input_limit(void **state)
{
    (void)state;
    size_t n = 200000;
    char *plain = sample(n);
    size_t zl;
    unsigned char *zb = zref(15, 6, plain, n, &zl);
    struct collect out = {.refuse_after = 50000};
    hps__kserve_kerr_t e;
    KS_CHECK(decode(HPS__KSERVE_ZENC_DEFLATE, n, zb, zl, 0, &out, &e) == -1 && e.status == 503 &&
                 strcmp(e.msg, "sink full") == 0,
             "sink error: %u %s", e.status, e.msg);
    free(out.data);
    /* Incompressible data stored in tiny blocks: more input than the
     * bound allows for a small limit. */
    size_t max = 1000;
    size_t big = (size_t)hps__kserve_zbound(max) + 10;
    unsigned char *junk = calloc(1, big);
    memset(&out, 0, sizeof(out));
    struct hps__kserve_inflate *z;
    KS_CHECK(hps__kserve_inflate_create(HPS__KSERVE_ZENC_GZIP, max, collect_sink, &out, &z) == 0,
             "create");
    KS_CHECK(hps__kserve_inflate_feed(z, junk, big) == -1, "input over the bound");
    KS_CHECK(hps__kserve_inflate_error(z)->status == 400 &&
                 strstr(hps__kserve_inflate_error(z)->msg, "compressed request body of more than"),
             "input bound: %s", hps__kserve_inflate_error(z)->msg);
    KS_CHECK(out.len == 0, "nothing inflated");
    hps__kserve_inflate_destroy(z);
    hps__kserve_inflate_destroy(NULL);
    free(junk);
    free(zb);
    free(plain);
}

/* ------------------------------------------------------------------------ */
/* Compressor                                                                */
/* ------------------------------------------------------------------------ */

static void test_compress(void **state)
{
    (void)state;
    size_t n = 100000;
    char *a = sample(n);
    float *f = malloc(4096 * sizeof(float));
    for (size_t i = 0; i < 4096; i++)
        f[i] = (float)ks_rand() / 1e9f;
    struct hps__kserve_zpart parts[3] = {{a, n}, {NULL, 0}, {f, 4096 * sizeof(float)}};
    size_t want_len = n + 4096 * sizeof(float);
    char *want = malloc(want_len);
    memcpy(want, a, n);
    memcpy(want + n, f, 4096 * sizeof(float));
    for (int g = 0; g < 2; g++) {
        enum hps__kserve_zenc enc = g ? HPS__KSERVE_ZENC_GZIP : HPS__KSERVE_ZENC_DEFLATE;
        char *z = NULL;
        size_t zl = 0;
        KS_CHECK(hps__kserve_zcompress(enc, parts, 3, &z, &zl) == 0, "compress");
        KS_CHECK(zl < want_len, "smaller: %zu of %zu", zl, want_len);
        KS_CHECK(
            g ? ((unsigned char)z[0] == 0x1f && (unsigned char)z[1] == 0x8b)
              : (((unsigned char)z[0] << 8 | (unsigned char)z[1]) % 31 == 0 && (z[0] & 0x0f) == 8),
            "%s wrapper", hps__kserve_zenc_name(enc));
        size_t got_len;
        unsigned char *got = zinflate_ref(z, zl, &got_len);
        KS_CHECK(got && got_len == want_len && memcmp(got, want, want_len) == 0, "round trip");
        free(got);
        /* Our decoder agrees, under the other name too. */
        struct collect out = {0};
        hps__kserve_kerr_t e;
        KS_CHECK(decode(g ? HPS__KSERVE_ZENC_DEFLATE : HPS__KSERVE_ZENC_GZIP, want_len, z, zl, 0,
                        &out, &e) == 0,
                 "decode: %s", e.msg);
        KS_CHECK(out.len == want_len && memcmp(out.data, want, want_len) == 0, "decode bytes");
        free(out.data);
        free(z);
        /* Nothing at all is still one valid, empty stream. */
        KS_CHECK(hps__kserve_zcompress(enc, NULL, 0, &z, &zl) == 0 && zl > 0, "empty");
        got = zinflate_ref(z, zl, &got_len);
        KS_CHECK(got && got_len == 0, "empty round trip");
        free(got);
        free(z);
    }
    char *z = (char *)1;
    size_t zl = 7;
    KS_CHECK(hps__kserve_zcompress(HPS__KSERVE_ZENC_IDENTITY, parts, 1, &z, &zl) == -EINVAL &&
                 z == (char *)1 && zl == 7,
             "identity refused, outputs untouched");
    free(want);
    free(f);
    free(a);
}

/* ------------------------------------------------------------------------ */
/* Over HTTP                                                                 */
/* ------------------------------------------------------------------------ */

#define HTTP_MAX_BODY ((size_t)64 << 10)

static struct ks_backend g_be;
static hps_kserve_t *g_srv;
static uint16_t g_port, g_mport;

static int group_setup(void **state)
{
    (void)state;
    hps_kserve_options_t o;
    hps_kserve_options_init(&o);
    o.threads = 2;
    o.max_body_bytes = HTTP_MAX_BODY;
    return ks_server_start(&o, &g_be, ks_vtable(&g_be), &g_srv, &g_port, &g_mport);
}

static int group_teardown(void **state)
{
    (void)state;
    hps_kserve_destroy(g_srv);
    return 0;
}

#define P "/v2/models/plain/infer"

/* A request for "plain": keys in JSON or binary; returns the body and sets
 * *hlen (the JSON length). */
static char *plain_request(const int64_t *keys, const int32_t nk[3], bool binary, bool bin_out,
                           size_t *len, size_t *hlen)
{
    size_t n = (size_t)nk[0] + (size_t)nk[1] + (size_t)nk[2];
    hps__kserve_text_t t;
    hps__kserve_text_init(&t);
    hps__kserve_text_printf(
        &t, "{\"inputs\":[{\"name\":\"KEYS\",\"datatype\":\"INT64\",\"shape\":[%zu]", n);
    if (binary) {
        hps__kserve_text_printf(&t, ",\"parameters\":{\"binary_data_size\":%zu}}", n * 8);
    } else {
        hps__kserve_text_puts(&t, ",\"data\":[");
        for (size_t i = 0; i < n; i++)
            hps__kserve_text_printf(&t, "%s%lld", i ? "," : "", (long long)keys[i]);
        hps__kserve_text_puts(&t, "]}");
    }
    hps__kserve_text_printf(&t,
                            ",{\"name\":\"NUMKEYS\",\"datatype\":\"INT32\",\"shape\":[3],\"data\":"
                            "[%d,%d,%d]}],\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":"
                            "{\"binary_data\":%s}}]}",
                            nk[0], nk[1], nk[2], bin_out ? "true" : "false");
    *hlen = t.len;
    if (binary)
        hps__kserve_text_put(&t, (const char *)keys, n * 8);
    KS_CHECK(!t.oom, "oom");
    return hps__kserve_text_steal(&t, len);
}

/* POST body (with Content-Encoding enc_hdr when not NULL, and
 * Accept-Encoding accept when not NULL). */
static void post(const void *body, size_t len, size_t hlen, bool binary, const char *enc_hdr,
                 const char *accept, struct ks_resp *r)
{
    char extra[512];
    int k = snprintf(extra, sizeof(extra), "%s%s%s", enc_hdr ? "Content-Encoding: " : "",
                     enc_hdr ? enc_hdr : "", enc_hdr ? "\r\n" : "");
    if (accept)
        k += snprintf(extra + k, sizeof(extra) - (size_t)k, "Accept-Encoding: %s\r\n", accept);
    if (binary)
        snprintf(extra + k, sizeof(extra) - (size_t)k, "Inference-Header-Content-Length: %zu\r\n",
                 hlen);
    KS_CHECK(ks_http(g_port, "POST", P, extra, body, len, r) == 0, "transport");
}

static void expect_error(const struct ks_resp *r, int status, const char *want)
{
    KS_EXPECT(r, status, want);
    json_object *j = json_tokener_parse(r->body);
    KS_CHECK(j && json_object_is_type(j, json_type_object), "error body is JSON: %.200s", r->body);
    json_object_put(j);
}

/* The body buffers are all given back once the requests completed. */
static void expect_budget_whole(void)
{
    for (int i = 0; i < 200 && atomic_load(&g_srv->body_held) != 0; i++)
        usleep(5000);
    KS_CHECK(atomic_load(&g_srv->body_held) == 0, "body budget: %llu bytes still held",
             (unsigned long long)atomic_load(&g_srv->body_held));
}

/* gzip, deflate (zlib), raw deflate, and each wrapper under the other name:
 * JSON and binary requests answer exactly what the plain request does. */
static void test_http_compressed_requests(void **state)
{
    (void)state;
    int64_t keys[600];
    for (size_t i = 0; i < 600; i++)
        keys[i] = (int64_t)(ks_rand() % 1000000) - 500000;
    int32_t nk[3] = {200, 250, 150};
    static const struct {
        const char *hdr;
        int wbits;
    } encs[] = {{"gzip", 31}, {"deflate", 15}, {"deflate", -15}, {"GZIP", 15}, {"deflate", 31}};
    for (int binary = 0; binary < 2; binary++)
        for (int bin_out = 0; bin_out < 2; bin_out++) {
            size_t len, hlen;
            char *body = plain_request(keys, nk, binary, bin_out, &len, &hlen);
            struct ks_resp want;
            post(body, len, hlen, binary, NULL, NULL, &want);
            KS_EXPECT(&want, 200, NULL);
            for (size_t e = 0; e < sizeof(encs) / sizeof(encs[0]); e++) {
                size_t zl;
                unsigned char *zb = zref(encs[e].wbits, 6, body, len, &zl);
                struct ks_resp r;
                post(zb, zl, hlen, binary, encs[e].hdr, NULL, &r);
                KS_CHECK(r.status == 200 && r.body_len == want.body_len &&
                             memcmp(r.body, want.body, want.body_len) == 0,
                         "binary %d out %d %s/%d: status %d, %zu vs %zu bytes: %.200s", binary,
                         bin_out, encs[e].hdr, encs[e].wbits, r.status, r.body_len, want.body_len,
                         r.body);
                char ce[32];
                KS_CHECK(!ks_header(&r, "Content-Encoding", ce, sizeof(ce)),
                         "no Content-Encoding unasked");
                ks_resp_free(&r);
                free(zb);
            }
            ks_resp_free(&want);
            free(body);
        }
    expect_budget_whole();
}

/* Accept-Encoding: the answer compressed, inflating to the plain answer;
 * Inference-Header-Content-Length stays the uncompressed JSON's. */
static void test_http_compressed_responses(void **state)
{
    (void)state;
    int64_t keys[300];
    for (size_t i = 0; i < 300; i++)
        keys[i] = (int64_t)i * 7919;
    int32_t nk[3] = {100, 100, 100};
    static const struct {
        const char *accept;
        const char *coding; /* NULL: not compressed */
    } acc[] = {{"gzip", "gzip"},
               {"deflate", "deflate"},
               {"gzip, deflate, br", "gzip"},
               {"deflate;q=0.9, gzip;q=0.8", "deflate"},
               {"gzip;q=0", NULL},
               {"br", NULL},
               {"identity", NULL}};
    for (int bin_out = 0; bin_out < 2; bin_out++) {
        size_t len, hlen;
        char *body = plain_request(keys, nk, true, bin_out, &len, &hlen);
        struct ks_resp want;
        post(body, len, hlen, true, NULL, NULL, &want);
        KS_EXPECT(&want, 200, NULL);
        char want_ihcl[32] = "", want_ct[64] = "";
        ks_header(&want, "Inference-Header-Content-Length", want_ihcl, sizeof(want_ihcl));
        ks_header(&want, "Content-Type", want_ct, sizeof(want_ct));
        KS_CHECK(!bin_out || want_ihcl[0], "binary answer has the header length");
        for (size_t a = 0; a < sizeof(acc) / sizeof(acc[0]); a++) {
            for (int zreq = 0; zreq < 2; zreq++) { /* plain and gzip requests */
                size_t zl = len;
                unsigned char *zb = zreq ? zref(31, 1, body, len, &zl) : NULL;
                struct ks_resp r;
                post(zreq ? (void *)zb : body, zl, hlen, true, zreq ? "gzip" : NULL, acc[a].accept,
                     &r);
                KS_CHECK(r.status == 200, "%s: status %d %.200s", acc[a].accept, r.status, r.body);
                char ce[32] = "", ihcl[32] = "", ct[64] = "";
                bool has_ce = ks_header(&r, "Content-Encoding", ce, sizeof(ce));
                ks_header(&r, "Inference-Header-Content-Length", ihcl, sizeof(ihcl));
                ks_header(&r, "Content-Type", ct, sizeof(ct));
                KS_CHECK(strcmp(ihcl, want_ihcl) == 0, "%s: header length '%s' vs '%s'",
                         acc[a].accept, ihcl, want_ihcl);
                KS_CHECK(strcmp(ct, want_ct) == 0, "%s: content type", acc[a].accept);
                if (!acc[a].coding) {
                    KS_CHECK(!has_ce && r.body_len == want.body_len &&
                                 memcmp(r.body, want.body, want.body_len) == 0,
                             "%s: plain answer", acc[a].accept);
                } else {
                    KS_CHECK(has_ce && strcmp(ce, acc[a].coding) == 0, "%s: Content-Encoding '%s'",
                             acc[a].accept, ce);
                    bool gz = (unsigned char)r.body[0] == 0x1f && (unsigned char)r.body[1] == 0x8b;
                    KS_CHECK(gz == (strcmp(acc[a].coding, "gzip") == 0), "%s: wrapper",
                             acc[a].accept);
                    size_t ul;
                    unsigned char *u = zinflate_ref(r.body, r.body_len, &ul);
                    KS_CHECK(u && ul == want.body_len && memcmp(u, want.body, ul) == 0,
                             "%s: inflates to the plain answer", acc[a].accept);
                    free(u);
                }
                ks_resp_free(&r);
                free(zb);
            }
        }
        ks_resp_free(&want);
        free(body);
    }
    /* Errors are never compressed. */
    struct ks_resp r;
    post("{}", 2, 2, false, NULL, "gzip", &r);
    expect_error(&r, 400, NULL);
    char ce[32];
    KS_CHECK(!ks_header(&r, "Content-Encoding", ce, sizeof(ce)), "plain error");
    ks_resp_free(&r);
    expect_budget_whole();
}

/* Bombs, corrupt and truncated bodies, unknown codings: 400 with JSON,
 * and the server goes on. */
static void test_http_bad_bodies(void **state)
{
    (void)state;
    /* 32 MiB of spaces in gzip: refused after the limit's worth. */
    size_t big = (size_t)32 << 20;
    char *spaces = malloc(big);
    memset(spaces, ' ', big);
    size_t zl;
    unsigned char *bomb = zref(31, 9, spaces, big, &zl);
    free(spaces);
    KS_CHECK(zl < HTTP_MAX_BODY, "bomb of %zu bytes", zl);
    struct ks_resp r;
    post(bomb, zl, 0, false, "gzip", NULL, &r);
    expect_error(&r, 400,
                 "once decompressed (Content-Encoding: gzip) exceeds the maximum allowed "
                 "value of 65536 bytes");
    ks_resp_free(&r);
    /* A request padded with blanks to exactly the limit inflates and is
     * answered as the plain request is; one blank more is refused. */
    int64_t keys[3] = {1, 2, 3};
    int32_t nk[3] = {1, 1, 1};
    size_t len, hlen;
    char *body = plain_request(keys, nk, false, false, &len, &hlen);
    struct ks_resp want;
    post(body, len, 0, false, NULL, NULL, &want);
    KS_EXPECT(&want, 200, NULL);
    char *pad = malloc(HTTP_MAX_BODY + 1);
    for (size_t extra = 0; extra < 2; extra++) {
        size_t n = HTTP_MAX_BODY + extra;
        memcpy(pad, body, len - 1);
        memset(pad + len - 1, ' ', n - len);
        pad[n - 1] = '}';
        unsigned char *pz = zref(15, 6, pad, n, &zl);
        post(pz, zl, 0, false, "deflate", NULL, &r);
        if (extra == 0)
            KS_CHECK(r.status == 200 && r.body_len == want.body_len &&
                         memcmp(r.body, want.body, r.body_len) == 0,
                     "exact limit: %d %.200s", r.status, r.body);
        else
            expect_error(&r, 400, "once decompressed");
        ks_resp_free(&r);
        free(pz);
    }
    free(pad);
    ks_resp_free(&want);
    /* Corrupt and truncated. */
    unsigned char *gz = zref(31, 6, body, len, &zl);
    gz[zl / 2] ^= 0xff;
    post(gz, zl, 0, false, "gzip", NULL, &r);
    expect_error(&r, 400, "failed to decompress the request body (Content-Encoding: gzip)");
    ks_resp_free(&r);
    gz[zl / 2] ^= 0xff;
    post(gz, zl - 9, 0, false, "gzip", NULL, &r);
    expect_error(&r, 400, "truncated");
    ks_resp_free(&r);
    post(body, len, 0, false, "deflate", NULL, &r); /* not compressed */
    expect_error(&r, 400, "failed to decompress the request body (Content-Encoding: deflate)");
    ks_resp_free(&r);
    post("", 0, 0, false, "gzip", NULL, &r);
    expect_error(&r, 400, "empty");
    ks_resp_free(&r);
    post(gz, zl, 0, false, "br", NULL, &r);
    expect_error(&r, 400, "unsupported Content-Encoding 'br'");
    ks_resp_free(&r);
    /* A compressed Content-Length past the bound: answered before the body. */
    char head[256];
    snprintf(head, sizeof(head),
             "POST " P " HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\n"
             "Content-Length: %llu\r\n\r\n",
             (unsigned long long)hps__kserve_zbound(HTTP_MAX_BODY) + 1);
    KS_CHECK(ks_raw(g_port, head, strlen(head), 5000, &r) == 0, "transport");
    expect_error(&r, 400, "compressed request body of");
    ks_resp_free(&r);
    /* Still serving, and compressed bodies still work. */
    post(gz, zl, 0, false, "gzip", NULL, &r);
    KS_EXPECT(&r, 200, NULL);
    ks_resp_free(&r);
    free(gz);
    free(body);
    free(bomb);
    expect_budget_whole();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_headers),
        cmocka_unit_test(test_inflate_roundtrip),
        cmocka_unit_test(test_inflate_exact_limit),
        cmocka_unit_test(test_inflate_zip_bomb),
        cmocka_unit_test(test_inflate_truncated),
        cmocka_unit_test(test_inflate_corrupt),
        cmocka_unit_test(test_inflate_sink_and_input_limit),
        cmocka_unit_test(test_compress),
        cmocka_unit_test(test_http_compressed_requests),
        cmocka_unit_test(test_http_compressed_responses),
        cmocka_unit_test(test_http_bad_bodies),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
