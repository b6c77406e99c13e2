/*
 * test-kserve-json.c -- every error body is valid JSON, whatever bytes the
 * request sent.
 *
 * The escaper (hps__kserve_text_json_str) against an independent UTF-8 decoder:
 * each class of ill-formed UTF-8 becomes U+FFFD, well-formed sequences are
 * kept, control characters escaped; every output parsed back by json-c.
 * Then over TCP: invalid UTF-8 in the model name, input, output, datatype,
 * parameter and region names, keys, headers; and a mutation fuzzer over
 * valid requests whose every answer is strict JSON unless libmicrohttpd's
 * own framing code produced it (its HTML pages, listed in README.md and
 * asserted exactly in test_mhd_own_answers).
 */
#include <json-c/json.h>

#include "kstest.h"
#include "worker/kserve_internal.h"

#define FFFD "\xef\xbf\xbd"

static struct ks_backend g_be;
static hps_kserve_t *g_srv;
static uint16_t g_port, g_mport;

static int group_setup(void **state)
{
    (void)state;
    hps_kserve_options_t o;
    hps_kserve_options_init(&o);
    o.threads = 4;
    o.max_body_bytes = 1u << 20;
    o.idle_timeout_s = 2; /* stalled fuzz connections go away soon */
    return ks_server_start(&o, &g_be, ks_vtable(&g_be), &g_srv, &g_port, &g_mport);
}

static int group_teardown(void **state)
{
    (void)state;
    hps_kserve_destroy(g_srv);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Reference UTF-8 and strict JSON                                           */
/* ------------------------------------------------------------------------ */

/* Well-formed UTF-8 (RFC 3629), decoded to code points: written apart from
 * the server's table of byte ranges on purpose. */
static bool ref_utf8_valid(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        }
        if ((c & 0xe0) == 0xc0) {
            len = 2, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return false;
        }
        if (n - i < len)
            return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += len;
    }
    return true;
}

/*
 * Strict JSON: valid UTF-8 (reference decoder), no raw byte below 0x20 (our
 * bodies have no whitespace between tokens), and json-c in strict mode with
 * UTF-8 validation consumes all n bytes.  Returns the value or NULL with a
 * reason in why.
 */
static json_object *strict_json(const char *b, size_t n, const char **why)
{
    if (n == 0 || n > INT32_MAX) {
        *why = "empty or huge";
        return NULL;
    }
    if (!ref_utf8_valid(b, n)) {
        *why = "not valid UTF-8";
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)b[i] < 0x20) {
            *why = "raw control character";
            return NULL;
        }
    json_tokener *tok = json_tokener_new();
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    json_object *j = json_tokener_parse_ex(tok, b, (int)n);
    bool whole = j && json_tokener_get_error(tok) == json_tokener_success &&
                 json_tokener_get_parse_end(tok) == n;
    json_tokener_free(tok);
    if (!whole) {
        json_object_put(j);
        *why = "json-c (strict) refused it";
        return NULL;
    }
    return j;
}

/* The escaper's literal for s[0, n), checked strict and parsed back. */
static json_object *escape_parse(const char *s, size_t n, hps__kserve_text_t *t)
{
    t->len = 0;
    hps__kserve_text_json_str(t, s, n);
    KS_CHECK(!t->oom && t->data, "escaper ran out of memory");
    const char *why = NULL;
    json_object *j = strict_json(t->data, t->len, &why);
    if (!j)
        KS_FAIL("escaped %zu bytes to an invalid literal (%s): %s", n, why, t->data);
    KS_CHECK(json_object_is_type(j, json_type_string), "a string: %s", t->data);
    return j;
}

/* Hex dump for messages. */
static const char *hexs(const char *s, size_t n, char *buf, size_t cap)
{
    size_t w = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && w + 4 < cap; i++)
        w += (size_t)snprintf(buf + w, cap - w, "%02x ", (unsigned char)s[i]);
    return buf;
}

/* ------------------------------------------------------------------------ */
/* The escaper                                                               */
/* ------------------------------------------------------------------------ */

struct esc_case {
    const char *desc;
    const char *in;
    size_t in_len;    /* 0: strlen */
    const char *want; /* the parsed string */
    size_t want_len;  /* 0: strlen */
};

static const struct esc_case esc_cases[] = {
    /* the examples */
    {"trailing 0xff", "KEYS\xff", 0, "KEYS" FFFD, 0},
    {"lone 0xfe", "\xfe", 0, FFFD, 0},
    /* stray continuation bytes */
    {"one continuation", "a\x80z", 0, "a" FFFD "z", 0},
    {"two continuations", "\x80\xbf", 0, FFFD FFFD, 0},
    /* overlong forms */
    {"overlong '/' C0 AF", "\xc0\xaf", 0, FFFD FFFD, 0},
    {"overlong C1 BF", "\xc1\xbf", 0, FFFD FFFD, 0},
    {"overlong 3-byte E0 80 AF", "\xe0\x80\xaf", 0, FFFD FFFD FFFD, 0},
    {"overlong 3-byte E0 9F BF", "\xe0\x9f\xbf", 0, FFFD FFFD FFFD, 0},
    {"overlong 4-byte F0 80 80 AF", "\xf0\x80\x80\xaf", 0, FFFD FFFD FFFD FFFD, 0},
    {"overlong 4-byte F0 8F BF BF", "\xf0\x8f\xbf\xbf", 0, FFFD FFFD FFFD FFFD, 0},
    /* UTF-16 surrogates */
    {"surrogate U+D800", "\xed\xa0\x80", 0, FFFD FFFD FFFD, 0},
    {"surrogate U+DFFF", "\xed\xbf\xbf", 0, FFFD FFFD FFFD, 0},
    {"surrogate pair (CESU-8)", "\xed\xa0\xbd\xed\xb8\x80", 0, FFFD FFFD FFFD FFFD FFFD FFFD, 0},
    /* past U+10FFFF, and lead bytes F5..FF */
    {"U+110000", "\xf4\x90\x80\x80", 0, FFFD FFFD FFFD FFFD, 0},
    {"F5 lead", "\xf5\x80\x80\x80", 0, FFFD FFFD FFFD FFFD, 0},
    {"5-byte form", "\xf8\x88\x80\x80\x80", 0, FFFD FFFD FFFD FFFD FFFD, 0},
    {"FF FE", "\xff\xfe", 0, FFFD FFFD, 0},
    /* truncated sequences: one U+FFFD per maximal subpart */
    {"2-byte lead at the end", "ab\xc3", 0, "ab" FFFD, 0},
    {"3-byte cut at the end", "a\xe2\x82", 0, "a" FFFD, 0},
    {"4-byte cut at the end", "\xf0\x9f\x98", 0, FFFD, 0},
    {"3-byte cut before ASCII",
     "\xe2\x82"
     "a",
     0, FFFD "a", 0},
    {"bad second byte", "\xe2\x28\xa1", 0, FFFD "(" FFFD, 0},
    {"valid then cut", "\xf0\x9f\x98\x80\xf0\x9f", 0, "\xf0\x9f\x98\x80" FFFD, 0},
    {"cut then quote", "\xe2\x82\"", 0, FFFD "\"", 0},
    /* well-formed sequences at the class boundaries are kept */
    {"U+0080", "\xc2\x80", 0, "\xc2\x80", 0},
    {"U+07FF", "\xdf\xbf", 0, "\xdf\xbf", 0},
    {"U+0800", "\xe0\xa0\x80", 0, "\xe0\xa0\x80", 0},
    {"U+D7FF", "\xed\x9f\xbf", 0, "\xed\x9f\xbf", 0},
    {"U+E000", "\xee\x80\x80", 0, "\xee\x80\x80", 0},
    {"U+FFFD", FFFD, 0, FFFD, 0},
    {"U+FFFF", "\xef\xbf\xbf", 0, "\xef\xbf\xbf", 0},
    {"U+10000", "\xf0\x90\x80\x80", 0, "\xf0\x90\x80\x80", 0},
    {"U+10FFFF", "\xf4\x8f\xbf\xbf", 0, "\xf4\x8f\xbf\xbf", 0},
    {"mixed text", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 0,
     "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 0},
    /* quotes, backslashes, control characters */
    {"quote and backslash", "a\"b\\c", 0, "a\"b\\c", 0},
    {"controls", "\x01\x1f\n\t\r\x7f", 0, "\x01\x1f\n\t\r\x7f", 0},
    {"NUL inside", "a\0b", 3, "a\0b", 3},
    {"control after invalid", "\xc3\x01", 0, FFFD "\x01", 0},
    {"empty", "", 0, "", 0},
};

static void test_escaper_cases(void **state)
{
    (void)state;
    hps__kserve_text_t t;
    hps__kserve_text_init(&t);
    char hx[256];
    for (size_t i = 0; i < sizeof(esc_cases) / sizeof(esc_cases[0]); i++) {
        const struct esc_case *c = &esc_cases[i];
        size_t n = c->in_len ? c->in_len : strlen(c->in);
        size_t wn = c->want_len ? c->want_len : strlen(c->want);
        json_object *j = escape_parse(c->in, n, &t);
        size_t gn = (size_t)json_object_get_string_len(j);
        const char *g = json_object_get_string(j);
        if (gn != wn || memcmp(g, c->want, wn) != 0)
            KS_FAIL("%s: got %s", c->desc, hexs(g, gn, hx, sizeof(hx)));
        json_object_put(j);
    }
    /* The exact escapes of control characters. */
    t.len = 0;
    hps__kserve_text_json_str(&t, "\x01\x7f\x1f\n\"\\", 6);
    KS_CHECK(!strcmp(t.data, "\"\\u0001\\u007f\\u001f\\n\\\"\\\\\""), "%s", t.data);
    /* Every single byte value, alone and before a valid character. */
    for (int b = 0; b < 256; b++) {
        char in[3] = {(char)b, '\xc3', '\xa9'};
        json_object *j = escape_parse(in, 3, &t);
        const char *g = json_object_get_string(j);
        size_t gn = (size_t)json_object_get_string_len(j);
        if (b < 0x80)
            KS_CHECK(gn == 3 && !memcmp(g, in, 3), "byte %02x kept", b);
        else
            KS_CHECK(gn == 5 && !memcmp(g, FFFD "\xc3\xa9", 5), "byte %02x replaced: %s", b,
                     hexs(g, gn, hx, sizeof(hx)));
        json_object_put(j);
    }
    hps__kserve_text_fini(&t);
}

/* s[0, n) is a run of sequences that hps__kserve_utf8_seq accepts. */
static bool seq_run(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t l = hps__kserve_utf8_seq(s + i, n - i);
        if (!l)
            return false;
        i += l;
    }
    return true;
}

/* hps__kserve_utf8_seq against the reference: every 1-, 2- and 3-byte string, and
 * 4-byte strings of every lead from EF to F8 (a sample of the rest). */
static void test_utf8_seq_exhaustive(void **state)
{
    (void)state;
    unsigned char s[4];
    for (uint32_t v = 0; v < (1u << 24); v++) {
        s[0] = (unsigned char)(v >> 16);
        s[1] = (unsigned char)(v >> 8);
        s[2] = (unsigned char)v;
        for (size_t n = 1; n <= 3; n++) {
            if (n < 3 && (v & ((1u << (8 * (3 - n))) - 1)))
                continue; /* shorter strings: once each */
            if (seq_run(s, n) != ref_utf8_valid((const char *)s, n))
                KS_FAIL("%02x %02x %02x (n %zu): seq %zu", s[0], s[1], s[2], n,
                        hps__kserve_utf8_seq(s, n));
        }
    }
    for (uint32_t lead = 0xef; lead <= 0xf8; lead++)
        for (uint32_t v = 0; v < (1u << 24); v += 1 + (uint32_t)(ks_rand() % 97)) {
            s[0] = (unsigned char)lead;
            s[1] = (unsigned char)(v >> 16);
            s[2] = (unsigned char)(v >> 8);
            s[3] = (unsigned char)v;
            if (seq_run(s, 4) != ref_utf8_valid((const char *)s, 4))
                KS_FAIL("%02x %02x %02x %02x: seq %zu", s[0], s[1], s[2], s[3],
                        hps__kserve_utf8_seq(s, 4));
        }
}

/* Random strings of every class: the literal is strict JSON, parses to
 * well-formed UTF-8, equals the input when that was well-formed, and has a
 * U+FFFD when it was not. */
static void test_escaper_random(void **state)
{
    (void)state;
    static const char *const pieces[] = {
        "a",
        "\"",
        "\\",
        "\n",
        "\x01",
        "\x7f",
        "\xc3\xa9",
        "\xe2\x82\xac",
        "\xf0\x9f\x98\x80",
        "\xf4\x8f\xbf\xbf",
        "\x80",
        "\xbf",
        "\xc0\xaf",
        "\xc1",
        "\xe0\x80",
        "\xed\xa0\x80",
        "\xed\xbf",
        "\xf4\x90",
        "\xf5",
        "\xff",
        "\xe2\x82",
        "\xf0\x9f\x98",
        FFFD,
    };
    hps__kserve_text_t t;
    hps__kserve_text_init(&t);
    char in[256], hx[800];
    for (int it = 0; it < 20000; it++) {
        size_t n = 0, parts = ks_rand() % 24;
        for (size_t p = 0; p < parts && n < sizeof(in) - 8; p++) {
            if (ks_rand() % 3 == 0) {
                in[n++] = (char)ks_rand();
            } else {
                const char *s = pieces[ks_rand() % (sizeof(pieces) / sizeof(pieces[0]))];
                memcpy(in + n, s, strlen(s));
                n += strlen(s);
            }
        }
        json_object *j = escape_parse(in, n, &t);
        const char *g = json_object_get_string(j);
        size_t gn = (size_t)json_object_get_string_len(j);
        KS_CHECK(ref_utf8_valid(g, gn), "parsed string is valid UTF-8: %s",
                 hexs(in, n, hx, sizeof(hx)));
        if (ref_utf8_valid(in, n))
            KS_CHECK(gn == n && !memcmp(g, in, n), "well-formed input kept: %s",
                     hexs(in, n, hx, sizeof(hx)));
        else
            KS_CHECK(memmem(g, gn, FFFD, 3) != NULL, "ill-formed input marked: %s",
                     hexs(in, n, hx, sizeof(hx)));
        json_object_put(j);
    }
    hps__kserve_text_fini(&t);
}

/* Truncation never leaves half a character, and never cuts an escape. */
static void test_truncation(void **state)
{
    (void)state;
    KS_CHECK(hps__kserve_utf8_cut("ab\xe2\x82", 4) == 2, "cut 3-byte");
    KS_CHECK(hps__kserve_utf8_cut("ab\xe2\x82\xac", 5) == 5, "whole 3-byte kept");
    KS_CHECK(hps__kserve_utf8_cut("ab\xc3", 3) == 2, "cut 2-byte");
    KS_CHECK(hps__kserve_utf8_cut("ab\xe0", 3) == 2 && hps__kserve_utf8_cut("ab\xf0", 3) == 2 &&
                 hps__kserve_utf8_cut("ab\xf4", 3) == 2 && hps__kserve_utf8_cut("ab\xed", 3) == 2,
             "cut lone leads of every class");
    KS_CHECK(hps__kserve_utf8_cut("ab\xc1", 3) == 3 && hps__kserve_utf8_cut("ab\xf5", 3) == 3,
             "invalid leads left to the escaper");
    KS_CHECK(hps__kserve_utf8_cut("ab\xe0\x80", 4) == 4, "overlong prefix left to the escaper");
    KS_CHECK(hps__kserve_utf8_cut("a\xf0\x9f\x98", 4) == 1, "cut 4-byte");
    KS_CHECK(hps__kserve_utf8_cut("a\xf0\x9f", 3) == 1, "cut 4-byte after 2");
    KS_CHECK(hps__kserve_utf8_cut("ab\xff", 3) == 3, "invalid byte left to the escaper");
    KS_CHECK(hps__kserve_utf8_cut("ab\xed\xa0", 4) == 4, "surrogate prefix left to the escaper");
    KS_CHECK(hps__kserve_utf8_cut("abc", 3) == 3 && hps__kserve_utf8_cut("", 0) == 0, "ASCII");
    /* hps__kserve_kerr_set's 512-byte buffer: "xy" + 169 euros fill 509 bytes,
     * the 170th would end at 512. */
    char arg[700] = "xy";
    for (int i = 0; i < 200; i++)
        strcat(arg, "\xe2\x82\xac");
    hps__kserve_kerr_t e;
    hps__kserve_kerr_set(&e, 400, "%s", arg);
    KS_CHECK(strlen(e.msg) == 509 && ref_utf8_valid(e.msg, strlen(e.msg)),
             "truncated message ends on a character: %zu bytes", strlen(e.msg));
    /* A message full of characters that need escapes, truncated: its JSON
     * body stays whole (escaping comes after truncation). */
    char q[700];
    memset(q, '"', sizeof(q) - 1);
    q[sizeof(q) - 1] = '\0';
    hps__kserve_kerr_set(&e, 400, "%s", q);
    hps__kserve_text_t t;
    hps__kserve_text_init(&t);
    hps__kserve_resp_error(&t, e.msg);
    const char *why = NULL;
    json_object *j = strict_json(t.data, t.len, &why);
    KS_CHECK(j != NULL, "error body of 511 quotes: %s", why);
    json_object *m;
    KS_CHECK(json_object_object_get_ex(j, "error", &m) && json_object_get_string_len(m) == 511,
             "511 quotes");
    json_object_put(j);
    hps__kserve_text_fini(&t);
}

/* ------------------------------------------------------------------------ */
/* Over TCP                                                                  */
/* ------------------------------------------------------------------------ */

/* Content-Type of r (empty string when absent). */
static const char *ctype(const struct ks_resp *r, char *buf, size_t cap)
{
    return ks_header(r, "Content-Type", buf, cap) ? buf : "";
}

/* r is an application/json error {"error": string} in strict JSON; returns
 * the message (in a static buffer). */
static const char *json_error(const struct ks_resp *r, const char *desc)
{
    static char msg[2048];
    char ct[128];
    KS_CHECK(!strcmp(ctype(r, ct, sizeof(ct)), "application/json"), "%s: Content-Type '%s'", desc,
             ct);
    const char *why = NULL;
    json_object *j = strict_json(r->body, r->body_len, &why);
    if (!j)
        KS_FAIL("%s: %d body is not strict JSON (%s): %.400s", desc, r->status, why, r->body);
    json_object *m = NULL;
    KS_CHECK(json_object_is_type(j, json_type_object) &&
                 json_object_object_get_ex(j, "error", &m) &&
                 json_object_is_type(m, json_type_string),
             "%s: {\"error\": string}: %s", desc, r->body);
    snprintf(msg, sizeof(msg), "%s", json_object_get_string(m));
    json_object_put(j);
    return msg;
}

struct badreq {
    const char *desc;
    const char *method;
    const char *path;
    const char *extra; /* header lines */
    const char *body;  /* NULL: none */
    int status;
    const char *want; /* in the parsed message (UTF-8) */
};

#define P  "/v2/models/hps_wdl/infer"
#define NK "{\"name\":\"NUMKEYS\",\"datatype\":\"INT32\",\"shape\":[1,2],\"data\":[1,2]}"
#define KEYS_AS(name, dt)                                                                          \
    "{\"name\":\"" name "\",\"datatype\":\"" dt "\",\"shape\":[1,3],\"data\":[1,2,3]}"
#define REQ_WITH(extra) "{" extra "\"inputs\":[" KEYS_AS("KEYS", "INT64") "," NK "]}"
#define RAWH(path)      "POST " path " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"

static const struct badreq badreqs[] = {
    {"model name 0xfe (path)", "GET", "/v2/models/\xfe", NULL, NULL, 400,
     "Request for unknown model: '" FFFD "' is not found"},
    {"model name 0xfe (infer)", "POST", "/v2/models/\xfe/infer", NULL, REQ_WITH(""), 400,
     "Request for unknown model: '" FFFD "' is not found"},
    {"model name %FF%C0%AF (percent-encoded)", "GET", "/v2/models/KEYS%FF%C0%AF/ready", NULL, NULL,
     400, "unknown model: 'KEYS" FFFD FFFD FFFD "'"},
    {"model name surrogate", "GET", "/v2/models/m\xed\xa0\x80/config", NULL, NULL, 400,
     "'m" FFFD FFFD FFFD "'"},
    {"model name with a quote and controls", "GET", "/v2/models/a%22%5C%01%7F/stats", NULL, NULL,
     400, "'a\"\\\x01\x7f'"},
    {"input name KEYS\\xff", "POST", P, NULL,
     "{\"inputs\":[" KEYS_AS("KEYS\xff", "INT64") "," NK "]}", 400,
     "unexpected inference input 'KEYS" FFFD "'"},
    {"input name with a lone surrogate escape", "POST", P, NULL,
     "{\"inputs\":[" KEYS_AS("KEYS\\ud800", "INT64") "," NK "]}", 400,
     "unexpected inference input 'KEYS"},
    {"datatype with a surrogate", "POST", P, NULL,
     "{\"inputs\":[" KEYS_AS("KEYS", "INT\xed\xa0\x80") "," NK "]}", 400,
     "data-type is 'INT" FFFD FFFD FFFD "'"},
    {"output name overlong", "POST", P, NULL, REQ_WITH("\"outputs\":[{\"name\":\"OUT\xc0\xaf\"}],"),
     400, "unexpected inference output 'OUT" FFFD FFFD "'"},
    {"parameter name past U+10FFFF", "POST", P, NULL,
     REQ_WITH("\"parameters\":{\"p\xf4\x90\x80\x80\":[1]},"), 400,
     "parameter 'p" FFFD FFFD FFFD FFFD "' has invalid type"},
    {"input region name truncated sequence", "POST", P, NULL,
     "{\"inputs\":[{\"name\":\"KEYS\",\"datatype\":\"INT64\",\"shape\":[1,3],\"parameters\":{"
     "\"shared_memory_region\":\"r\xe2\x82\",\"shared_memory_byte_size\":24}}," NK "]}",
     404, "Unable to find shared memory region: 'r" FFFD "'"},
    {"output region name 0xff", "POST", P, NULL,
     REQ_WITH("\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":{\"shared_memory_region\":"
              "\"o\xff\",\"shared_memory_byte_size\":400}}],"),
     404, "Unable to find shared memory region: 'o" FFFD "'"},
    {"region name in the URL (status)", "GET", "/v2/systemsharedmemory/region/\xff\xfe/status",
     NULL, NULL, 404, "'" FFFD FFFD "'"},
    {"region name and key (register)", "POST", "/v2/systemsharedmemory/region/\xc3/register", NULL,
     "{\"key\":\"/a/\xff\",\"offset\":0,\"byte_size\":8}", 400,
     "cannot register shared memory region '" FFFD "' with key '/a/" FFFD "'"},
    {"Content-Encoding bytes", "POST", P,
     "Content-Encoding: \xff\x01"
     "br\r\n",
     REQ_WITH(""), 400,
     "unsupported Content-Encoding '" FFFD "\x01"
     "br'"},
    {"Inference-Header-Content-Length bytes", "POST", P,
     "Inference-Header-Content-Length: 1\xff\r\n", REQ_WITH(""), 400,
     "Inference-Header-Content-Length, got: 1" FFFD},
    {"JSON syntax error after invalid bytes", "POST", P, NULL, "{\"inputs\":[\xff\xfe", 400,
     "failed to parse the request JSON buffer"},
};

static void test_http_invalid_utf8(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(badreqs) / sizeof(badreqs[0]); i++) {
        const struct badreq *b = &badreqs[i];
        struct ks_resp r;
        KS_CHECK(ks_http(g_port, b->method, b->path, b->extra, b->body,
                         b->body ? strlen(b->body) : 0, &r) == 0,
                 "%s: transport", b->desc);
        KS_CHECK(r.status == b->status, "%s: status %d, expected %d: %s", b->desc, r.status,
                 b->status, r.body);
        const char *msg = json_error(&r, b->desc);
        KS_CHECK(strstr(msg, b->want) != NULL, "%s: message '%s' lacks '%s'", b->desc, msg,
                 b->want);
        ks_resp_free(&r);
    }
    /* A long model name cut inside a character: the cut backs off, so the
     * message has no U+FFFD. */
    char path[512] = "/v2/models/";
    for (int i = 0; i < 199; i++)
        strcat(path, "a");
    strcat(path, "\xe2\x82\xac/ready");
    struct ks_resp r;
    KS_CHECK(ks_http(g_port, "GET", path, NULL, NULL, 0, &r) == 0, "transport");
    const char *msg = json_error(&r, "long model name");
    KS_CHECK(r.status == 400 && !strstr(msg, FFFD) && strstr(msg, "aaaa' is not found"), "%s", msg);
    ks_resp_free(&r);
    /* The same for an input name past 128 bytes: 127 'K', then a 4-byte
     * character across the cut. */
    char name[140];
    memset(name, 'K', 127);
    memcpy(name + 127, "\xf0\x9f\x98\x80", 5);
    char body[1024];
    snprintf(body, sizeof(body), "{\"inputs\":[" KEYS_AS("%s", "INT64") "," NK "]}", name);
    KS_CHECK(ks_http(g_port, "POST", P, NULL, body, strlen(body), &r) == 0, "transport");
    msg = json_error(&r, "long input name");
    KS_CHECK(r.status == 400 && !strstr(msg, FFFD) && strstr(msg, "KKK' for model"), "%s", msg);
    ks_resp_free(&r);
    /* A successful answer echoes the request id: valid JSON too. */
    const char *ok = REQ_WITH("\"id\":\"\xff\\\"\\\\\\u0001\xe2\x82\xac\xed\xa0\x80\",");
    KS_CHECK(ks_http(g_port, "POST", P, NULL, ok, strlen(ok), &r) == 0, "transport");
    KS_CHECK(r.status == 200, "status %d: %s", r.status, r.body);
    const char *why = NULL;
    json_object *j = strict_json(r.body, r.body_len, &why);
    KS_CHECK(j != NULL, "answer is strict JSON (%s): %s", why, r.body);
    json_object *id = NULL;
    KS_CHECK(json_object_object_get_ex(j, "id", &id) &&
                 !strcmp(json_object_get_string(id), FFFD "\"\\\x01\xe2\x82\xac" FFFD FFFD FFFD),
             "id: %s", r.body);
    json_object_put(j);
    ks_resp_free(&r);
}

/* Random bytes as the body of every POST endpoint; and random bytes as an
 * input name, a datatype and a region name, which the errors quote. */
static void test_http_random_bodies(void **state)
{
    (void)state;
    static const char *const paths[] = {
        P,
        "/v2/models/plain/versions/7/infer",
        "/v2/systemsharedmemory/region/r\xff/register",
        "/v2/systemsharedmemory/region/r/unregister",
    };
    static const char *const quoting[] = {
        "{\"inputs\":[" KEYS_AS("%s", "INT64") "," NK "]}",
        "{\"inputs\":[" KEYS_AS("KEYS", "%s") "," NK "]}",
        REQ_WITH("\"outputs\":[{\"name\":\"%s\"}],"),
        "{\"key\":\"/%s\",\"offset\":0,\"byte_size\":8}",
    };
    char body[1024], rnd[200];
    unsigned quoted = 0;
    for (int it = 0; it < 400; it++) {
        size_t n = 1 + ks_rand() % 512;
        const char *path = paths[it % 4];
        if (it % 2) {
            for (size_t k = 0; k < n; k++)
                body[k] = (char)ks_rand();
        } else { /* random bytes in a JSON string (no NUL, quote or backslash) */
            size_t rn = 1 + ks_rand() % (sizeof(rnd) - 1);
            for (size_t k = 0; k < rn; k++) {
                do
                    rnd[k] = (char)ks_rand();
                while (rnd[k] == '\0' || rnd[k] == '"' || rnd[k] == '\\');
            }
            rnd[rn] = '\0';
            size_t q = (size_t)(it / 2) % 4;
            n = (size_t)snprintf(body, sizeof(body), quoting[q], rnd);
            path = q == 3 ? "/v2/systemsharedmemory/region/r/register" : P;
        }
        struct ks_resp r;
        KS_CHECK(ks_http(g_port, "POST", path, NULL, body, n, &r) == 0, "transport");
        char ct[128];
        if (r.status == 200 && r.body_len == 0) {
            KS_CHECK(!strcmp(ctype(&r, ct, sizeof(ct)), "text/plain"), "empty 200");
        } else {
            const char *msg = json_error(&r, "random body");
            quoted += strstr(msg, FFFD) != NULL;
        }
        ks_resp_free(&r);
    }
    KS_CHECK(quoted > 50, "errors quoted the random bytes (U+FFFD in %u messages)", quoted);
}

/* ---- libmicrohttpd's own answers ---------------------------------------- */

/* The pages libmicrohttpd 0.9.75 sends by itself, by status and title. */
struct mhd_page {
    int status;
    const char *title;
};

static const struct mhd_page mhd_pages[] = {
    {400, "Request malformed"},                       /* syntax, chunked encoding, Content-Length */
    {413, "Request content too large"},               /* chunk size or Content-Length overflow */
    {414, "Request too big"},                         /* request line past the connection memory */
    {431, "Request too big"},                         /* headers or footers past it */
    {505, "Requested HTTP version is not supported"}, /* HTTP/0.x, HTTP/2+ */
};

/* r came from libmicrohttpd's framing code: no Content-Type (every answer
 * of ours has one) and one of its HTML pages.  0.9.75 answers a bad
 * Content-Length with its status line and headers twice, the HTML after
 * the second copy ("dup"). */
static bool mhd_own(const struct ks_resp *r, const char **title)
{
    char ct[128];
    if (ks_header(r, "Content-Type", ct, sizeof(ct)))
        return false;
    const char *b = r->body ? r->body : "";
    if (!strncmp(b, "HTTP/1.1 ", 9)) {
        *title = "dup";
        return (r->status == 400 || r->status == 413) && atoi(b + 9) == r->status;
    }
    for (size_t i = 0; i < sizeof(mhd_pages) / sizeof(mhd_pages[0]); i++) {
        char want[160];
        snprintf(want, sizeof(want), "<html><head><title>%s</title>", mhd_pages[i].title);
        if (r->status == mhd_pages[i].status && !strncmp(b, want, strlen(want))) {
            *title = mhd_pages[i].title;
            return true;
        }
    }
    return false;
}

struct own_case {
    const char *desc;
    const char *raw;
    size_t pad; /* bytes of 'a' inserted at the '@' of raw */
    int status; /* 0: no answer at all (the connection is closed or times out) */
};

#define GETL "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n"
#define CHK  "POST " P " HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"

static const struct own_case own_cases[] = {
    {"chunk size not hex", CHK "zz\r\nabc\r\n0\r\n\r\n", 0, 400},
    {"chunk without its CRLF", CHK "3\r\nabcXX0\r\n\r\n", 0, 400},
    {"bad footer line", CHK "0\r\nbadfooter\r\n\r\n", 0, 400},
    {"chunk size overflow", CHK "ffffffffffffffffff\r\nabc\r\n0\r\n\r\n", 0, 413},
    {"footer too large", CHK "0\r\nX-F: @\r\n\r\n", 100000, 431},
    {"Content-Length not a number", RAWH(P) "Content-Length: abc\r\n\r\n{}", 0, 400},
    {"Content-Length negative", RAWH(P) "Content-Length: -1\r\n\r\n{}", 0, 400},
    {"Content-Length overflow", RAWH(P) "Content-Length: 99999999999999999999999\r\n\r\n{}", 0,
     413},
    {"header too large", GETL "X-Big: @\r\n\r\n", 100000, 431},
    {"URL too long", "GET /@ HTTP/1.1\r\nHost: x\r\n\r\n", 100000, 414},
    {"header line without a colon", GETL "NoColon\r\n\r\n", 0, 400},
    {"request line without a version", "GET /v2/health/live\r\n\r\n", 0, 400},
    {"not HTTP", "GET /v2/health/live HTTPX/1.1\r\nHost: x\r\n\r\n", 0, 400},
    {"HTTP/2.0", "GET /v2/health/live HTTP/2.0\r\nHost: x\r\n\r\n", 0, 505},
    {"HTTP/0.9", "GET /v2/health/live HTTP/0.9\r\nHost: x\r\n\r\n", 0, 505},
    {"Transfer-Encoding gzip", RAWH(P) "Transfer-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}", 0,
     0},
    {"binary garbage", "\x01\x02\x03\r\n\r\n", 0, 0},
    {"empty method", " /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n", 0, 0},
};

/* libmicrohttpd answers these by itself, with the status and HTML page
 * README.md lists (no option of 0.9.75 changes them).  If this fails after
 * a libmicrohttpd upgrade, update README.md and mhd_pages[]. */
static void test_mhd_own_answers(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(own_cases) / sizeof(own_cases[0]); i++) {
        const struct own_case *c = &own_cases[i];
        size_t n = strlen(c->raw);
        char *buf = malloc(n + c->pad + 1);
        const char *at = c->pad ? strchr(c->raw, '@') : NULL;
        size_t pre = at ? (size_t)(at - c->raw) : n;
        memcpy(buf, c->raw, pre);
        memset(buf + pre, 'a', c->pad);
        if (at)
            memcpy(buf + pre + c->pad, at + 1, n - pre - 1);
        size_t len = at ? n - 1 + c->pad : n;
        struct ks_resp r;
        int rc = ks_raw(g_port, buf, len, 1000, &r);
        free(buf);
        if (c->status == 0) {
            KS_CHECK(rc != 0, "%s: no answer, got %d %.200s", c->desc, r.status, r.body);
            continue;
        }
        KS_CHECK(rc == 0, "%s: an answer", c->desc);
        const char *title = NULL;
        KS_CHECK(r.status == c->status && mhd_own(&r, &title), "%s: %d (want %d) %.300s", c->desc,
                 r.status, c->status, r.body);
        print_message("# libmicrohttpd: %-32s -> %d %s\n", c->desc, r.status, title);
        ks_resp_free(&r);
    }
}

/* ---- Mutation fuzzer ---------------------------------------------------- */

enum { C_NONE, C_JSON, C_BINARY, C_EMPTY, C_MHD, C_CONTINUE, C_N };
static const char *const class_names[C_N] = {"no answer", "JSON",     "binary",
                                             "empty",     "MHD HTML", "100 Continue"};

/* Classify one answer; fails the test on an answer that is neither ours in
 * strict JSON (binary: its JSON header) nor one of libmicrohttpd's pages. */
static int classify(int rc, const struct ks_resp *r, const char *what, unsigned *mhd_counts)
{
    if (rc != 0)
        return C_NONE;
    if (r->status == 100)
        return C_CONTINUE;
    char ct[128];
    const char *t = ctype(r, ct, sizeof(ct));
    const char *title = NULL;
    if (!*t) {
        if (!mhd_own(r, &title))
            KS_FAIL("%s: %d without Content-Type, not a libmicrohttpd page: %.300s", what,
                    r->status, r->body);
        for (size_t i = 0; i < sizeof(mhd_pages) / sizeof(mhd_pages[0]); i++)
            if (mhd_pages[i].status == r->status)
                mhd_counts[i]++;
        return C_MHD;
    }
    if (!strcmp(t, "application/json")) {
        if (r->status != 200) {
            json_error(r, what);
        } else {
            const char *why = NULL;
            json_object *j = strict_json(r->body, r->body_len, &why);
            if (!j)
                KS_FAIL("%s: 200 body is not strict JSON (%s): %.300s", what, why, r->body);
            json_object_put(j);
        }
        return C_JSON;
    }
    if (!strcmp(t, "application/octet-stream") && r->status == 200) {
        char v[32];
        KS_CHECK(ks_header(r, "Inference-Header-Content-Length", v, sizeof(v)), "%s: header", what);
        size_t hl = strtoull(v, NULL, 10);
        const char *why = NULL;
        json_object *j = hl <= r->body_len ? strict_json(r->body, hl, &why) : NULL;
        if (!j)
            KS_FAIL("%s: binary answer's JSON header is not strict JSON (%s)", what, why);
        json_object_put(j);
        return C_BINARY;
    }
    if (!strcmp(t, "text/plain") && r->body_len == 0 && (r->status == 200 || r->status == 400))
        return C_EMPTY;
    KS_FAIL("%s: unexpected answer %d '%s': %.300s", what, r->status, t, r->body);
    return C_NONE;
}

/* Valid requests the fuzzer starts from: head and body apart. */
struct seed {
    const char *head; /* request line and headers; "%zu" is the body's length */
    const char *body;
    size_t body_len; /* 0: strlen */
};

#define SEEDH(path, more)                                                                          \
    "POST " path " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"                           \
    "Content-Type: application/json\r\n" more "Content-Length: %zu\r\n\r\n"

static const struct seed seeds[] = {
    {SEEDH(P, ""), REQ_WITH("\"id\":\"r1\",\"parameters\":{\"binary_data_output\":false},"), 0},
    {SEEDH(P, ""),
     REQ_WITH("\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":{\"binary_data\":true}}],"), 0},
    {SEEDH(P, "Inference-Header-Content-Length: 163\r\n"),
     "{\"inputs\":[{\"name\":\"KEYS\",\"datatype\":\"INT64\",\"shape\":[1,3],\"parameters\":{"
     "\"binary_data_size\":24}}," NK "]}"
     "\x01\0\0\0\0\0\0\0\x02\0\0\0\0\0\0\0\x03\0\0\0\0\0\0\0",
     163 + 24}, /* the JSON header is 163 bytes, then 3 int64 keys */
    {SEEDH("/v2/models/plain/versions/7/infer", ""),
     "{\"inputs\":[{\"name\":\"KEYS\",\"datatype\":\"INT64\",\"shape\":[3],\"data\":[1,2,3]},"
     "{\"name\":\"NUMKEYS\",\"datatype\":\"INT32\",\"shape\":[3],\"data\":[1,1,1]}]}",
     0},
    {SEEDH("/v2/systemsharedmemory/region/reg1/register", ""),
     "{\"key\":\"/hps-kserve-json-nokey\",\"offset\":0,\"byte_size\":8}", 0},
    {"GET /v2/models/hps_wdl/versions/1/config HTTP/1.1\r\nHost: localhost\r\nConnection: "
     "close\r\n\r\n",
     "", 0},
    {"POST " P " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nTransfer-Encoding: "
     "chunked\r\n\r\n",
     "40\r\n{\"inputs\":[{\"name\":\"KEYS\",\"datatype\":\"INT64\",\"shape\":[1,3],\"da\r\n"
     "54\r\nta\":[1,2,3]},{\"name\":\"NUMKEYS\",\"datatype\":\"INT32\",\"shape\":[1,2],\"data\":[1,"
     "2]}]}\r\n0\r\n\r\n",
     0},
};

static const char *const bad_utf8[] = {
    "\xff", "\xfe\xfe", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82", "\x80", "\x01",
};

/* Mutate buf[0, len) (cap bytes room) in the region [lo, hi). */
static size_t mutate(char *buf, size_t len, size_t cap, size_t lo, size_t hi)
{
    if (hi <= lo)
        return len;
    size_t at = lo + ks_rand() % (hi - lo);
    switch (ks_rand() % 6) {
    case 0: /* bit flip */
        buf[at] ^= (char)(1u << (ks_rand() % 8));
        break;
    case 1: /* random byte, often >= 0x80 */
        buf[at] = (char)(ks_rand() % 2 ? 0x80 | ks_rand() : ks_rand());
        break;
    case 2: { /* insert random bytes */
        size_t k = 1 + ks_rand() % 8;
        if (len + k > cap)
            break;
        memmove(buf + at + k, buf + at, len - at);
        for (size_t i = 0; i < k; i++)
            buf[at + i] = (char)ks_rand();
        len += k;
        break;
    }
    case 3: { /* insert an ill-formed UTF-8 sequence */
        const char *s = bad_utf8[ks_rand() % (sizeof(bad_utf8) / sizeof(bad_utf8[0]))];
        size_t k = strlen(s);
        if (len + k > cap)
            break;
        memmove(buf + at + k, buf + at, len - at);
        memcpy(buf + at, s, k);
        len += k;
        break;
    }
    case 4: { /* delete a range */
        size_t k = 1 + ks_rand() % 8;
        if (at + k > len)
            k = len - at;
        memmove(buf + at, buf + at + k, len - at - k);
        len -= k;
        break;
    }
    default: /* truncate */
        len = at;
        break;
    }
    return len;
}

struct fuzz_arg {
    uint64_t seed;
    unsigned iters;
    unsigned counts[C_N];
    unsigned mhd[sizeof(mhd_pages) / sizeof(mhd_pages[0])];
};

static void *fuzz_thread(void *p)
{
    struct fuzz_arg *a = p;
    uint64_t rng = a->seed;
    char buf[4096];
    for (unsigned it = 0; it < a->iters; it++) {
        /* ks_rand's state is global: each thread draws from its own. */
        rng += 0x9E3779B97F4A7C15ULL;
        uint64_t z = rng;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        z ^= z >> 31;
        const struct seed *s = &seeds[z % (sizeof(seeds) / sizeof(seeds[0]))];
        size_t bl = s->body_len ? s->body_len : strlen(s->body);
        int hl = snprintf(buf, sizeof(buf), s->head, bl);
        memcpy(buf + hl, s->body, bl);
        size_t len = (size_t)hl + bl;
        unsigned muts = 1 + (unsigned)(z >> 8) % 4;
        for (unsigned k = 0; k < muts && len > 0; k++) {
            bool in_head = (z >> (16 + k)) & 1 || bl == 0;
            size_t hend = (size_t)hl < len ? (size_t)hl : len;
            len = in_head ? mutate(buf, len, sizeof(buf), 0, hend)
                          : mutate(buf, len, sizeof(buf), hend, len);
        }
        struct ks_resp r;
        int rc = ks_raw(g_port, buf, len, 400, &r);
        char what[64];
        snprintf(what, sizeof(what), "mutant %u of thread seed %llu", it,
                 (unsigned long long)a->seed);
        a->counts[classify(rc, &r, what, a->mhd)]++;
        if (rc == 0)
            ks_resp_free(&r);
    }
    return NULL;
}

/* 2,000 mutated valid requests (bit flips, bytes inserted, deleted,
 * ill-formed UTF-8, truncation; in the headers or the body), 8 at a time. */
static void test_mutation_fuzz(void **state)
{
    (void)state;
    enum { NT = 8, ITERS = 250 };
    struct fuzz_arg args[NT];
    pthread_t th[NT];
    memset(args, 0, sizeof(args));
    for (int i = 0; i < NT; i++) {
        args[i].seed = ks_rand();
        args[i].iters = ITERS;
        pthread_create(&th[i], NULL, fuzz_thread, &args[i]);
    }
    unsigned counts[C_N] = {0}, mhd[sizeof(mhd_pages) / sizeof(mhd_pages[0])] = {0};
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        for (int c = 0; c < C_N; c++)
            counts[c] += args[i].counts[c];
        for (size_t c = 0; c < sizeof(mhd) / sizeof(mhd[0]); c++)
            mhd[c] += args[i].mhd[c];
    }
    for (int c = 0; c < C_N; c++)
        print_message("# %-14s %u\n", class_names[c], counts[c]);
    for (size_t c = 0; c < sizeof(mhd) / sizeof(mhd[0]); c++)
        print_message("#   libmicrohttpd %d %-40s %u\n", mhd_pages[c].status, mhd_pages[c].title,
                      mhd[c]);
    KS_CHECK(counts[C_JSON] > NT * ITERS / 4, "most mutants got a JSON answer: %u", counts[C_JSON]);
    KS_ALIVE(g_port);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escaper_cases),     cmocka_unit_test(test_utf8_seq_exhaustive),
        cmocka_unit_test(test_escaper_random),    cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_http_invalid_utf8), cmocka_unit_test(test_http_random_bodies),
        cmocka_unit_test(test_mhd_own_answers),   cmocka_unit_test(test_mutation_fuzz),
    };
    if (getenv("KS_TEST_FILTER"))
        cmocka_set_test_filter(getenv("KS_TEST_FILTER"));
    return cmocka_run_group_tests_name("kserve-json", tests, group_setup, group_teardown);
}
