/*
 * kserve_infer.c -- parse and validate one inference request for an HPS
 * model: KEYS INT64 [1, N], NUMKEYS INT32 [1, T] -> OUTPUT0 FP32.
 *
 * Body layout (binary-data extension): the first Inference-Header-Content-
 * Length bytes are the JSON request; the binary tensors follow back to back
 * in the order their inputs appear in the JSON.  Without the header the
 * whole body is JSON and no input may be binary.
 *
 * JSON is parsed by json-c in strict mode with a depth limit.  json-c strict
 * still accepts single-quoted strings, NaN / Infinity and silently clamps
 * integers outside int64/uint64, so a lexical pass over the same bytes
 * (json_lex) rejects those: every integer literal of an accepted request is
 * exactly representable as int64.  The same pass counts the values first,
 * so a body of millions of tiny values is refused before json-c allocates
 * an object for each.
 *
 * Checks follow Triton's frontend and core, with their messages and status
 * codes (400 unless noted): exactly one of data / binary_data_size /
 * shared_memory_region per input, names, datatypes, shapes, element counts,
 * binary sizes, leftover bytes, NUMKEYS semantics, and the HPS batch limit
 * (501).  Inputs and OUTPUT0 may name a registered shared-memory region,
 * system or CUDA (lim->shm): the window is bounds-checked against the
 * registered size (Triton's 404 / 400 messages) and held until
 * hps__kserve_infer_req_fini(), so unregistering during the lookup cannot unmap
 * it.  Inputs in a CUDA region are copied to host memory here; OUTPUT0 is
 * copied into one by hps__kserve_infer_store_output() after the lookup.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "worker/kserve_internal.h"

#define IN_KEYS    0
#define IN_NUMKEYS 1

/* JSON values allowed besides 2 per key (nested KEYS data such as [[k],[k]]
 * takes 2): NUMKEYS, shapes, parameters.  Bounds json-c's memory, about
 * 70 bytes per value, before it parses anything. */
#define MAX_OTHER_VALUES 65536

/* Shorthand for a name taken from the request, bounded in messages. */
#define NAMEFMT       "%.*s"
#define NAMEARG(s, n) (int)((n) > 128 ? hps__kserve_utf8_cut((s), 128) : (n)), (s)

/** State of one parse. */
struct pctx {
    const struct hps__kserve_klimits *lim;
    const struct hps__kserve_kmodel *m;
    const char *body;
    size_t body_len;
    bool has_header; /* Inference-Header-Content-Length was given */
    size_t bin_off;  /* next unread binary byte */
    bool seen[2];    /* KEYS, NUMKEYS */
    unsigned ninputs;
    bool default_binary; /* request parameters.binary_data_output */
    hps__kserve_kerr_t *err;
};

/* ------------------------------------------------------------------------ */
/* Header length                                                             */
/* ------------------------------------------------------------------------ */

/* Inference-Header-Content-Length: decimal digits, optional blanks around. */
static int header_length(const char *v, size_t body_len, size_t *ret, hps__kserve_kerr_t *err)
{
    const char *p = v + strspn(v, " \t");
    size_t nd = strspn(p, "0123456789");
    const char *end = p + nd + strspn(p + nd, " \t");
    if (nd == 0 || *end != '\0')
        return hps__kserve_kerr_set(
            err, 400, "Unable to parse Inference-Header-Content-Length, got: %.64s", v);
    uint64_t x = 0;
    bool over = false;
    for (size_t i = 0; i < nd; i++) {
        over |= x > (UINT64_MAX - 9) / 10;
        x = x * 10 + (uint64_t)(p[i] - '0');
    }
    if (over || x > body_len)
        return hps__kserve_kerr_set(
            err, 400, "inference header size should be in range (0, %zu), got: %.64s", body_len, v);
    *ret = (size_t)x;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Lexical strictness (see the file comment)                                 */
/* ------------------------------------------------------------------------ */

/* Index just past the string whose opening quote is at s[i - 1]. */
static size_t skip_string(const char *s, size_t n, size_t i)
{
    while (i < n && s[i] != '"')
        i += s[i] == '\\' ? 2 : 1;
    return i + 1;
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool is_number_char(char c)
{
    return is_digit(c) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-';
}

/** State of the lexical pass. */
struct lex {
    size_t values; /* scalars and containers: bounds json-c's allocations */
    bool bad;      /* a strictness error was found (the first is in err) */
    hps__kserve_kerr_t err;
};

__attribute__((format(printf, 2, 3))) static void lex_bad(struct lex *lx, const char *fmt, ...)
{
    if (lx->bad)
        return;
    lx->bad = true;
    va_list ap;
    va_start(ap, fmt);
    lx->err.status = 400;
    vsnprintf(lx->err.msg, sizeof(lx->err.msg), fmt, ap);
    va_end(ap);
}

/* The number token at s[i]; returns the index after it. */
static size_t lex_number(const char *s, size_t n, size_t i, struct lex *lx)
{
    size_t start = i;
    bool neg = s[i] == '-';
    i += neg;
    size_t d0 = i;
    while (i < n && is_digit(s[i]))
        i++;
    size_t nd = i - d0;
    if (i < n && (s[i] == '.' || s[i] == 'e' || s[i] == 'E')) {
        while (i < n && is_number_char(s[i]))
            i++;
        return i; /* a real number: json-c keeps it as a double */
    }
    const char *lim = neg ? "9223372036854775808" : "9223372036854775807";
    if (nd == 0)
        lex_bad(lx, "failed to parse the request JSON buffer: invalid number at offset %zu", start);
    else if (nd > 19 || (nd == 19 && memcmp(s + d0, lim, 19) > 0))
        lex_bad(lx,
                "failed to parse the request JSON buffer: integer %.*s is out of the int64 "
                "range",
                (int)(i - start > 40 ? 40 : i - start), s + start);
    return i > start ? i : start + 1;
}

/* The literal at s[i] (a letter outside strings): true, false or null. */
static size_t lex_literal(const char *s, size_t n, size_t i, struct lex *lx)
{
    static const char *const lits[] = {"true", "false", "null"};
    for (size_t k = 0; k < 3; k++) {
        size_t len = strlen(lits[k]);
        if (n - i >= len && memcmp(s + i, lits[k], len) == 0)
            return i + len;
    }
    lex_bad(lx,
            "failed to parse the request JSON buffer: invalid literal (NaN or Infinity) at "
            "offset %zu",
            i);
    return i + 1;
}

static bool is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* One pass over the JSON text: count values, note the first strictness
 * error.  Works on any bytes (it runs before the parser). */
static void json_lex(const char *s, size_t n, struct lex *lx)
{
    size_t i = 0;
    while (i < n) {
        char c = s[i];
        if (c == '"') {
            i = skip_string(s, n, i + 1);
            lx->values++;
        } else if (c == '-' || is_digit(c)) {
            i = lex_number(s, n, i, lx);
            lx->values++;
        } else if (is_alpha(c)) {
            i = lex_literal(s, n, i, lx);
            lx->values++;
        } else {
            if (c == '\'')
                lex_bad(lx,
                        "failed to parse the request JSON buffer: single-quoted string at "
                        "offset %zu",
                        i);
            lx->values += c == '[' || c == '{';
            i++;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* JSON helpers                                                              */
/* ------------------------------------------------------------------------ */

/*
 * Parse s[0, n) as one JSON value.  On failure *ret_end is where the
 * tokenizer stopped and *ret_err its error; *ret_end = SIZE_MAX if no
 * tokenizer could be allocated.
 */
static json_object *parse_json(const char *s, size_t n, unsigned depth, size_t *ret_end,
                               enum json_tokener_error *ret_err)
{
    json_tokener *tok = json_tokener_new_ex((int)depth);
    if (!tok) {
        *ret_err = json_tokener_error_size;
        *ret_end = SIZE_MAX;
        return NULL;
    }
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    json_object *root = json_tokener_parse_ex(tok, s, (int)n);
    *ret_err = json_tokener_get_error(tok);
    *ret_end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (root && *ret_end == n)
        return root;
    json_object_put(root);
    return NULL;
}

static json_object *member(json_object *o, const char *key);

/* Whether any input of the request declares binary data. */
static bool has_binary_input(json_object *root)
{
    json_object *inputs = member(root, "inputs");
    if (!json_object_is_type(inputs, json_type_array))
        return false;
    for (size_t i = 0; i < json_object_array_length(inputs); i++) {
        json_object *params = member(json_object_array_get_idx(inputs, i), "parameters");
        if (member(params, "binary_data_size"))
            return true;
    }
    return false;
}

/*
 * Parse the JSON header.  Without Inference-Header-Content-Length, a body
 * made of a complete JSON request that declares binary inputs, followed by
 * more bytes, is reported as binary data sent without the header.
 */
/* The message for a JSON header that failed to parse. */
static void parse_error(struct pctx *c, size_t end, enum json_tokener_error e)
{
    size_t end2;
    enum json_tokener_error e2;
    json_object *root;
    if (end == SIZE_MAX) {
        hps__kserve_kerr_set(c->err, 500, "out of memory parsing the request");
        return;
    }
    if (e == json_tokener_continue || e == json_tokener_success) {
        hps__kserve_kerr_set(c->err, 400,
                             "failed to parse the request JSON buffer: unexpected end of "
                             "JSON");
        return;
    }
    if (!c->has_header && end > 0 &&
        (root = parse_json(c->body, end, c->lim->json_depth, &end2, &e2)) != NULL) {
        bool bin = has_binary_input(root);
        json_object_put(root);
        if (bin) {
            hps__kserve_kerr_set(
                c->err, 400,
                "must specify valid 'Infer-Header-Content-Length' in "
                "request header and 'binary_data_size' when passing inputs in binary "
                "data format (%zu bytes follow the JSON)",
                c->body_len - end);
            return;
        }
    }
    hps__kserve_kerr_set(c->err, 400, "failed to parse the request JSON buffer: %s at offset %zu",
                         json_tokener_error_desc(e), end);
}

/*
 * Parse the JSON header.  Without Inference-Header-Content-Length, a body
 * made of a complete JSON request that declares binary inputs, followed by
 * more bytes, is reported as binary data sent without the header.
 */
static json_object *parse_header(struct pctx *c, size_t n)
{
    size_t end;
    enum json_tokener_error e;
    if (n > INT_MAX) {
        hps__kserve_kerr_set(c->err, 400,
                             "failed to parse the request JSON buffer: %zu bytes is too "
                             "large",
                             n);
        return NULL;
    }
    json_object *root = parse_json(c->body, n, c->lim->json_depth, &end, &e);
    if (!root)
        parse_error(c, end, e);
    return root;
}

static json_object *member(json_object *o, const char *key)
{
    json_object *v = NULL;
    if (!json_object_is_type(o, json_type_object))
        return NULL;
    return json_object_object_get_ex(o, key, &v) ? v : NULL;
}

/* The string value of v, or NULL if v is not a string. */
static const char *str_of(json_object *v, size_t *len)
{
    if (!json_object_is_type(v, json_type_string))
        return NULL;
    *len = (size_t)json_object_get_string_len(v);
    return json_object_get_string(v);
}

static bool str_eq(const char *s, size_t n, const char *lit)
{
    return n == strlen(lit) && memcmp(s, lit, n) == 0;
}

/* An integer in [lo, hi].  The lexer guarantees int64 range for literals. */
static bool int_in(json_object *v, int64_t lo, int64_t hi, int64_t *ret)
{
    if (!json_object_is_type(v, json_type_int))
        return false;
    int64_t x = json_object_get_int64(v);
    if (x == INT64_MAX && json_object_get_uint64(v) != (uint64_t)INT64_MAX)
        return false;
    if (x < lo || x > hi)
        return false;
    *ret = x;
    return true;
}

/* ------------------------------------------------------------------------ */
/* Request parameters                                                        */
/* ------------------------------------------------------------------------ */

static int check_param(struct pctx *c, const char *key, json_object *v)
{
    int64_t x;
    if (strncmp(key, "triton_", 7) == 0)
        return hps__kserve_kerr_set(c->err, 400,
                                    "parameter keys starting with 'triton_' are reserved for "
                                    "Triton usage and should not be specified.");
    if (strcmp(key, "binary_data_output") == 0) {
        if (!json_object_is_type(v, json_type_boolean))
            return hps__kserve_kerr_set(c->err, 400, "Unable to parse 'binary_data_output'");
        c->default_binary = json_object_get_boolean(v);
        return 0;
    }
    if (strcmp(key, "sequence_start") == 0 || strcmp(key, "sequence_end") == 0) {
        if (!json_object_is_type(v, json_type_boolean))
            return hps__kserve_kerr_set(c->err, 400, "Unable to parse '%s'", key);
        return 0;
    }
    if (strcmp(key, "priority") == 0 || strcmp(key, "timeout") == 0) {
        if (!int_in(v, 0, INT64_MAX, &x))
            return hps__kserve_kerr_set(c->err, 400, "Unable to parse '%s'", key);
        return 0;
    }
    if (strcmp(key, "sequence_id") == 0) {
        if (!int_in(v, 0, INT64_MAX, &x) && !json_object_is_type(v, json_type_string))
            return hps__kserve_kerr_set(c->err, 400, "Unable to parse 'sequence_id'");
        return 0;
    }
    if (json_object_is_type(v, json_type_string) || json_object_is_type(v, json_type_int) ||
        json_object_is_type(v, json_type_boolean))
        return 0;
    return hps__kserve_kerr_set(c->err, 400,
                                "parameter '%.128s' has invalid type. It should be either "
                                "'int', 'bool', or 'string'.",
                                key);
}

static int parse_params(struct pctx *c, json_object *root)
{
    json_object *params = member(root, "parameters");
    if (!params)
        return 0;
    if (!json_object_is_type(params, json_type_object))
        return hps__kserve_kerr_set(c->err, 400, "Unable to parse 'parameters'");
    json_object_object_foreach(params, key, val)
    {
        if (check_param(c, key, val))
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Inputs                                                                    */
/* ------------------------------------------------------------------------ */

/** What one input says about itself. */
struct input {
    int which; /* IN_KEYS / IN_NUMKEYS */
    const char *name;
    json_object *obj;
    json_object *params;
    uint64_t count; /* element count from the shape */
};

/* Triton's ValidateInputContentType: exactly one data source. */
static int check_content_type(struct pctx *c, json_object *in, json_object *params)
{
    bool d = member(in, "data") != NULL;
    bool b = member(params, "binary_data_size") != NULL;
    bool s = member(params, "shared_memory_region") != NULL;
    int set = d + b + s;
    if (set == 1)
        return 0;
    return hps__kserve_kerr_set(c->err, 400,
                                "Input must set only one of the following fields: 'data', "
                                "'binary_data_size' in 'parameters', 'shared_memory_region' in "
                                "'parameters'. But %s%s%s%s",
                                set ? "set" : "no field is set", d ? " 'data'" : "",
                                b ? " 'binary_data_size'" : "", s ? " 'shared_memory_region'" : "");
}

static int input_identity(struct pctx *c, json_object *in, struct input *ret)
{
    size_t nlen, dlen;
    const char *name = str_of(member(in, "name"), &nlen);
    if (!name)
        return hps__kserve_kerr_set(c->err, 400, "Unable to parse 'name'");
    const char *dt = str_of(member(in, "datatype"), &dlen);
    if (!dt)
        return hps__kserve_kerr_set(c->err, 400, "Unable to parse 'datatype'");
    if (str_eq(name, nlen, "KEYS"))
        ret->which = IN_KEYS;
    else if (str_eq(name, nlen, "NUMKEYS"))
        ret->which = IN_NUMKEYS;
    else
        return hps__kserve_kerr_set(c->err, 400,
                                    "unexpected inference input '" NAMEFMT "' for model '%s'",
                                    NAMEARG(name, nlen), c->m->name);
    ret->name = ret->which == IN_KEYS ? "KEYS" : "NUMKEYS";
    if (c->seen[ret->which])
        return hps__kserve_kerr_set(c->err, 400, "input '%s' already exists in request", ret->name);
    c->seen[ret->which] = true;
    const char *want = ret->which == IN_KEYS ? "INT64" : "INT32";
    if (!str_eq(dt, dlen, want))
        return hps__kserve_kerr_set(c->err, 400,
                                    "inference input '%s' data-type is '" NAMEFMT "', but model "
                                    "'%s' expects '%s'",
                                    ret->name, NAMEARG(dt, dlen), c->m->name, want);
    return 0;
}

static void shape_str(char *buf, size_t cap, const int64_t *dims, size_t rank)
{
    size_t w = (size_t)snprintf(buf, cap, "[");
    for (size_t i = 0; i < rank && w < cap; i++)
        w += (size_t)snprintf(buf + w, cap - w, "%s%lld", i ? "," : "", (long long)dims[i]);
    if (w < cap)
        snprintf(buf + w, cap - w, "]");
}

/* Shape: [1, n] for a batching model, [n] otherwise; n is the count. */
static int input_shape(struct pctx *c, json_object *in, struct input *ret)
{
    json_object *shape = member(in, "shape");
    if (!json_object_is_type(shape, json_type_array))
        return hps__kserve_kerr_set(c->err, 400, "Unable to parse 'shape'");
    size_t rank = json_object_array_length(shape);
    int64_t dims[8] = {0};
    for (size_t i = 0; i < rank && i < 8; i++)
        if (!int_in(json_object_array_get_idx(shape, i), 0, INT64_MAX, &dims[i]))
            return hps__kserve_kerr_set(c->err, 400, "Unable to parse 'shape'");
    size_t want = c->m->max_batch_size ? 2 : 1;
    if (rank != want || (want == 2 && dims[0] != 1)) {
        char got[160];
        shape_str(got, sizeof(got), dims, rank < 8 ? rank : 8);
        return hps__kserve_kerr_set(c->err, 400,
                                    "unexpected shape for input '%s' for model '%s'. Expected "
                                    "%s, got %s%s",
                                    ret->name, c->m->name, want == 2 ? "[1,-1]" : "[-1]", got,
                                    want == 2 ? " (HPS takes the whole batch in one row)" : "");
    }
    ret->count = (uint64_t)dims[rank - 1];
    return 0;
}

static int input_limits(struct pctx *c, const struct input *in)
{
    if (in->which == IN_KEYS && in->count > c->lim->max_keys)
        return hps__kserve_kerr_set(c->err, 400,
                                    "input 'KEYS' has %llu keys, more than the limit of %zu "
                                    "keys per request",
                                    (unsigned long long)in->count, c->lim->max_keys);
    if (in->which == IN_NUMKEYS && in->count != c->m->num_tables)
        return hps__kserve_kerr_set(c->err, 400,
                                    "input 'NUMKEYS' has %llu elements but model '%s' has %u "
                                    "embedding tables",
                                    (unsigned long long)in->count, c->m->name, c->m->num_tables);
    return 0;
}

/* Destination of an input's values. */
static int input_alloc(struct pctx *c, const struct input *in, struct hps__kserve_infer_req *r)
{
    if (in->which == IN_NUMKEYS) {
        r->numkeys = calloc(c->m->num_tables, sizeof(int32_t));
        if (!r->numkeys)
            return hps__kserve_kerr_set(c->err, 500, "out of memory");
        return 0;
    }
    r->num_keys = (size_t)in->count;
    r->keys_owned = malloc(r->num_keys ? r->num_keys * sizeof(int64_t) : 1);
    if (!r->keys_owned)
        return hps__kserve_kerr_set(c->err, 500, "out of memory");
    r->keys = r->keys_owned;
    return 0;
}

/** Flattening of a (possibly nested) JSON "data" array. */
struct flat {
    struct pctx *c;
    const struct input *in;
    void *dst;
    uint64_t n;
};

static int flat_fill(struct flat *f, json_object *v)
{
    if (json_object_is_type(v, json_type_array)) {
        size_t len = json_object_array_length(v);
        for (size_t i = 0; i < len; i++)
            if (flat_fill(f, json_object_array_get_idx(v, i)))
                return -1;
        return 0;
    }
    if (f->n >= f->in->count)
        return hps__kserve_kerr_set(f->c->err, 400,
                                    "Unable to parse 'data': Shape does not match true "
                                    "shape of 'data' field");
    int64_t x;
    if (f->in->which == IN_KEYS) {
        if (!int_in(v, INT64_MIN, INT64_MAX, &x))
            return hps__kserve_kerr_set(f->c->err, 400,
                                        "Unable to parse 'data': element %llu of input "
                                        "'KEYS' is not an INT64 value",
                                        (unsigned long long)f->n);
        ((int64_t *)f->dst)[f->n++] = x;
    } else {
        if (!int_in(v, INT32_MIN, INT32_MAX, &x))
            return hps__kserve_kerr_set(f->c->err, 400,
                                        "Unable to parse 'data': element %llu of input "
                                        "'NUMKEYS' is not an INT32 value",
                                        (unsigned long long)f->n);
        ((int32_t *)f->dst)[f->n++] = (int32_t)x;
    }
    return 0;
}

static int input_json_data(struct pctx *c, const struct input *in, struct hps__kserve_infer_req *r)
{
    json_object *data = member(in->obj, "data");
    if (!json_object_is_type(data, json_type_array))
        return hps__kserve_kerr_set(c->err, 400, "Unable to parse 'data'");
    /* Each element takes at least 2 bytes of JSON: refuse absurd shapes
     * before allocating for them. */
    if (in->count > c->bin_off)
        return hps__kserve_kerr_set(c->err, 400,
                                    "Unable to parse 'data': Shape does not match true shape "
                                    "of 'data' field");
    if (input_alloc(c, in, r))
        return -1;
    struct flat f = {c, in, in->which == IN_KEYS ? (void *)r->keys_owned : (void *)r->numkeys, 0};
    if (flat_fill(&f, data))
        return -1;
    if (f.n != in->count)
        return hps__kserve_kerr_set(c->err, 400,
                                    "Unable to parse 'data': Shape does not match true shape "
                                    "of 'data' field");
    return 0;
}

static int input_binary_data(struct pctx *c, const struct input *in,
                             struct hps__kserve_infer_req *r)
{
    int64_t size;
    if (!int_in(member(in->params, "binary_data_size"), 0, INT64_MAX, &size))
        return hps__kserve_kerr_set(c->err, 400, "Unable to parse 'binary_data_size'");
    if (!c->has_header)
        return hps__kserve_kerr_set(
            c->err, 400,
            "must specify valid 'Infer-Header-Content-Length' in "
            "request header and 'binary_data_size' when passing inputs in binary "
            "data format");
    size_t avail = c->body_len - c->bin_off;
    if ((uint64_t)size > avail)
        return hps__kserve_kerr_set(c->err, 400,
                                    "unexpected size for input '%s', expecting %llu additional "
                                    "bytes for model '%s'",
                                    in->name, (unsigned long long)((uint64_t)size - avail),
                                    c->m->name);
    size_t elsize = in->which == IN_KEYS ? 8 : 4;
    if ((uint64_t)size != in->count * elsize)
        return hps__kserve_kerr_set(c->err, 400,
                                    "input byte size mismatch for input '%s' for model '%s'. "
                                    "Expected %llu, got %lld",
                                    in->name, c->m->name, (unsigned long long)(in->count * elsize),
                                    (long long)size);
    const char *src = c->body + c->bin_off;
    c->bin_off += (size_t)size;
    if (in->which == IN_KEYS && ((uintptr_t)src & 7) == 0) {
        r->num_keys = (size_t)in->count; /* aligned: use the body in place */
        r->keys = (const int64_t *)(const void *)src;
        return 0;
    }
    if (input_alloc(c, in, r))
        return -1;
    memcpy(in->which == IN_KEYS ? (void *)r->keys_owned : (void *)r->numkeys, src, (size_t)size);
    return 0;
}

/* shared_memory_byte_size (required) and shared_memory_offset (default 0). */
static int shm_params(struct pctx *c, json_object *params, int64_t *size, int64_t *offset)
{
    if (!int_in(member(params, "shared_memory_byte_size"), 0, INT64_MAX, size))
        return hps__kserve_kerr_set(c->err, 400, "Unable to parse 'shared_memory_byte_size'");
    json_object *o = member(params, "shared_memory_offset");
    *offset = 0;
    if (o && !int_in(o, 0, INT64_MAX, offset))
        return hps__kserve_kerr_set(c->err, 400, "Unable to parse 'shared_memory_offset'");
    return 0;
}

/* Borrow the window an input or output names; NULL name: 400. */
static int shm_window(struct pctx *c, json_object *params, bool write,
                      struct hps__kserve_shm_ref *ref, int64_t *size, int64_t *offset)
{
    size_t n;
    const char *region = str_of(member(params, "shared_memory_region"), &n);
    if (!region)
        return hps__kserve_kerr_set(c->err, 400, "Unable to parse 'shared_memory_region'");
    if (shm_params(c, params, size, offset))
        return -1;
    return hps__kserve_shm_acquire(c->lim->shm, region, n, (uint64_t)*offset, (uint64_t)*size,
                                   write, ref, c->err);
}

/* An input read from a registered region: KEYS in place when aligned in
 * system memory, NUMKEYS always copied (it is validated, then trusted),
 * CUDA regions always copied (device to host). */
static int input_shm(struct pctx *c, const struct input *in, struct hps__kserve_infer_req *r)
{
    struct hps__kserve_shm_ref ref;
    int64_t size, offset;
    if (shm_window(c, in->params, false, &ref, &size, &offset))
        return -1;
    r->held[in->which == IN_KEYS ? HPS__KSERVE_HELD_KEYS : HPS__KSERVE_HELD_NUMKEYS] = ref.region;
    size_t elsize = in->which == IN_KEYS ? 8 : 4;
    if ((uint64_t)size != in->count * elsize)
        return hps__kserve_kerr_set(c->err, 400,
                                    "input byte size mismatch for input '%s' for model '%s'. "
                                    "Expected %llu, got %lld",
                                    in->name, c->m->name, (unsigned long long)(in->count * elsize),
                                    (long long)size);
    if (in->which == IN_KEYS && !ref.cuda && ((uintptr_t)ref.ptr & 7) == 0) {
        r->num_keys = (size_t)in->count;
        r->keys = (const int64_t *)(const void *)ref.ptr;
        return 0;
    }
    if (input_alloc(c, in, r))
        return -1;
    return hps__kserve_shm_read(&ref,
                                in->which == IN_KEYS ? (void *)r->keys_owned : (void *)r->numkeys,
                                (size_t)size, c->err);
}

static int parse_input(struct pctx *c, json_object *obj, struct hps__kserve_infer_req *r)
{
    struct input in = {.obj = obj};
    if (!json_object_is_type(obj, json_type_object))
        return hps__kserve_kerr_set(c->err, 400, "Unable to parse 'inputs'");
    in.params = member(obj, "parameters");
    if (in.params && !json_object_is_type(in.params, json_type_object))
        return hps__kserve_kerr_set(c->err, 400, "Unable to parse 'parameters'");
    if (check_content_type(c, obj, in.params) || input_identity(c, obj, &in) ||
        input_shape(c, obj, &in) || input_limits(c, &in))
        return -1;
    c->ninputs++;
    if (member(in.params, "shared_memory_region"))
        return input_shm(c, &in, r);
    if (member(in.params, "binary_data_size"))
        return input_binary_data(c, &in, r);
    return input_json_data(c, &in, r);
}

static int parse_inputs(struct pctx *c, json_object *root, struct hps__kserve_infer_req *r)
{
    json_object *inputs = member(root, "inputs");
    if (!json_object_is_type(inputs, json_type_array))
        return hps__kserve_kerr_set(c->err, 400, "Unable to parse 'inputs'");
    size_t n = json_object_array_length(inputs);
    for (size_t i = 0; i < n; i++)
        if (parse_input(c, json_object_array_get_idx(inputs, i), r))
            return -1;
    if (c->bin_off != c->body_len)
        return hps__kserve_kerr_set(c->err, 400, "unexpected additional input data for model '%s'",
                                    c->m->name);
    if (!c->seen[IN_KEYS] || !c->seen[IN_NUMKEYS])
        return hps__kserve_kerr_set(c->err, 400,
                                    "expected 2 inputs but got %u inputs for model '%s'. "
                                    "Missing required input(s) [%s%s%s]",
                                    c->ninputs, c->m->name, c->seen[IN_KEYS] ? "" : "'KEYS'",
                                    !c->seen[IN_KEYS] && !c->seen[IN_NUMKEYS] ? ", " : "",
                                    c->seen[IN_NUMKEYS] ? "" : "'NUMKEYS'");
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Outputs                                                                   */
/* ------------------------------------------------------------------------ */

/* Triton's ValidateOutputParameter plus the type of binary_data. */
static int check_output_params(struct pctx *c, json_object *params)
{
    if (params && !json_object_is_type(params, json_type_object))
        return hps__kserve_kerr_set(c->err, 400, "Unable to parse 'parameters'");
    json_object *bin = member(params, "binary_data");
    if (bin && !json_object_is_type(bin, json_type_boolean))
        return hps__kserve_kerr_set(c->err, 400, "Unable to parse 'binary_data'");
    if (!member(params, "shared_memory_region"))
        return 0;
    if (member(params, "classification"))
        return hps__kserve_kerr_set(c->err, 400,
                                    "Output can't set both 'shared_memory_region' and "
                                    "'classification'");
    if (bin && json_object_get_boolean(bin))
        return hps__kserve_kerr_set(c->err, 400,
                                    "Output can't set both 'shared_memory_region' and "
                                    "'binary_data'");
    return 0;
}

/* OUTPUT0 written into a registered region. */
static int output_shm(struct pctx *c, json_object *params, struct hps__kserve_infer_req *r)
{
    struct hps__kserve_shm_ref ref;
    int64_t size, offset;
    if (shm_window(c, params, true, &ref, &size, &offset))
        return -1;
    r->held[HPS__KSERVE_HELD_OUTPUT] = ref.region;
    r->out_shm = ref.ptr;
    r->out_cuda = ref.cuda;
    r->out_shm_size = (uint64_t)size;
    r->out_shm_offset = (uint64_t)offset;
    size_t n = 0;
    const char *name = str_of(member(params, "shared_memory_region"), &n);
    r->out_region = strndup(name, n);
    if (!r->out_region)
        return hps__kserve_kerr_set(c->err, 500, "out of memory");
    return 0;
}

static int parse_output(struct pctx *c, json_object *o, bool *seen, struct hps__kserve_infer_req *r)
{
    size_t n;
    if (!json_object_is_type(o, json_type_object))
        return hps__kserve_kerr_set(c->err, 400, "Unable to parse 'outputs'");
    json_object *params = member(o, "parameters");
    if (check_output_params(c, params))
        return -1;
    const char *name = str_of(member(o, "name"), &n);
    if (!name)
        return hps__kserve_kerr_set(c->err, 400, "Unable to parse 'name'");
    if (!str_eq(name, n, "OUTPUT0"))
        return hps__kserve_kerr_set(c->err, 400,
                                    "unexpected inference output '" NAMEFMT "' for model '%s'",
                                    NAMEARG(name, n), c->m->name);
    if (*seen)
        return hps__kserve_kerr_set(c->err, 400, "output 'OUTPUT0' already exists in request");
    *seen = true;
    if (member(params, "classification"))
        return hps__kserve_kerr_set(
            c->err, 501, "classification is not supported for output 'OUTPUT0' of model '%s'",
            c->m->name);
    if (member(params, "shared_memory_region"))
        return output_shm(c, params, r);
    json_object *bin = member(params, "binary_data");
    if (bin)
        r->binary_output = json_object_get_boolean(bin);
    return 0;
}

static int parse_outputs(struct pctx *c, json_object *root, struct hps__kserve_infer_req *r)
{
    r->binary_output = c->default_binary;
    json_object *outputs = member(root, "outputs");
    if (!outputs)
        return 0;
    if (!json_object_is_type(outputs, json_type_array))
        return hps__kserve_kerr_set(c->err, 400, "Unable to parse 'outputs'");
    bool seen = false;
    size_t n = json_object_array_length(outputs);
    for (size_t i = 0; i < n; i++)
        if (parse_output(c, json_object_array_get_idx(outputs, i), &seen, r))
            return -1;
    if (r->out_shm)
        r->binary_output = false; /* the data goes to the region */
    return 0;
}

/* ------------------------------------------------------------------------ */
/* HPS semantics                                                             */
/* ------------------------------------------------------------------------ */

static int check_numkeys(struct pctx *c, struct hps__kserve_infer_req *r)
{
    const struct hps__kserve_kmodel *m = c->m;
    uint64_t sum = 0, out = 0;
    for (uint32_t t = 0; t < m->num_tables; t++) {
        int32_t k = r->numkeys[t];
        if (k < 0)
            return hps__kserve_kerr_set(c->err, 400,
                                        "input 'NUMKEYS' of model '%s' has a negative key "
                                        "count %d for table %u",
                                        m->name, (int)k, (unsigned)t);
        sum += (uint64_t)k;
        out += (uint64_t)k * m->dims[t];
    }
    if (sum != r->num_keys)
        return hps__kserve_kerr_set(c->err, 400,
                                    "the sum of 'NUMKEYS' (%llu) does not match the number of "
                                    "'KEYS' (%zu) for model '%s'",
                                    (unsigned long long)sum, r->num_keys, m->name);
    r->out_len = out;
    r->num_samples = m->keys_per_sample ? sum / m->keys_per_sample : 0;
    if (m->max_batch_size && r->num_samples > m->max_batch_size)
        return hps__kserve_kerr_set(c->err, 501,
                                    "The number of Input samples greater than max batch size "
                                    "(%llu > %u) for model '%s'",
                                    (unsigned long long)r->num_samples, m->max_batch_size, m->name);
    if (out > SIZE_MAX / 32) /* the JSON answer reserves 16 bytes per float */
        return hps__kserve_kerr_set(c->err, 400, "output of %llu floats is too large",
                                    (unsigned long long)out);
    return 0;
}

/* Triton's check that an output region can hold the result (INTERNAL). */
static int check_output_shm(struct pctx *c, const struct hps__kserve_infer_req *r)
{
    uint64_t need = r->out_len * sizeof(float);
    if (!r->out_shm || r->out_shm_size >= need)
        return 0;
    return hps__kserve_kerr_set(c->err, 500,
                                "shared memory size specified with the request for output "
                                "'OUTPUT0' (%llu bytes) should be at least %llu bytes to hold the "
                                "results",
                                (unsigned long long)r->out_shm_size, (unsigned long long)need);
}

static int parse_id(struct pctx *c, json_object *root, struct hps__kserve_infer_req *r)
{
    json_object *id = member(root, "id");
    size_t n;
    if (!id)
        return 0;
    const char *s = str_of(id, &n);
    if (!s)
        return hps__kserve_kerr_set(c->err, 400, "Unable to parse 'id'");
    r->id = malloc(n + 1);
    if (!r->id)
        return hps__kserve_kerr_set(c->err, 500, "out of memory");
    memcpy(r->id, s, n);
    r->id[n] = '\0';
    r->id_len = n;
    return 0;
}

static int parse_request(struct pctx *c, json_object *root, struct hps__kserve_infer_req *r)
{
    if (!json_object_is_type(root, json_type_object))
        return hps__kserve_kerr_set(c->err, 400,
                                    "failed to parse the request JSON buffer: the request "
                                    "must be a JSON object");
    if (parse_id(c, root, r) || parse_params(c, root) || parse_inputs(c, root, r) ||
        parse_outputs(c, root, r))
        return -1;
    return check_numkeys(c, r) || check_output_shm(c, r) ? -1 : 0;
}

int hps__kserve_infer_parse(const struct hps__kserve_klimits *lim,
                            const struct hps__kserve_kmodel *m, const char *body, size_t body_len,
                            const char *header_len, struct hps__kserve_infer_req *ret,
                            hps__kserve_kerr_t *err)
{
    memset(ret, 0, sizeof(*ret));
    ret->shm = lim->shm;
    struct pctx c = {.lim = lim, .m = m, .body = body, .body_len = body_len, .err = err};
    size_t json_len = body_len;
    if (header_len) {
        if (header_length(header_len, body_len, &json_len, err))
            return -1;
        if (json_len == 0)
            return hps__kserve_kerr_set(err, 400,
                                        "raw binary requests (Inference-Header-Content-Length: "
                                        "0) need a model with one input; model '%s' has 2",
                                        m->name);
        c.has_header = true;
    }
    c.bin_off = json_len;
    struct lex lx = {0};
    json_lex(body, json_len, &lx);
    size_t max_values =
        lim->max_keys > SIZE_MAX / 4 ? SIZE_MAX : lim->max_keys * 2 + MAX_OTHER_VALUES;
    if (lx.values > max_values)
        return hps__kserve_kerr_set(
            err, 400, "failed to parse the request JSON buffer: more than %zu values", max_values);
    json_object *root = parse_header(&c, json_len);
    if (!root)
        return -1;
    int rc = 0;
    if (lx.bad) {
        *err = lx.err;
        rc = -1;
    }
    if (rc == 0)
        rc = parse_request(&c, root, ret);
    json_object_put(root);
    if (rc)
        hps__kserve_infer_req_fini(ret);
    return rc;
}

int hps__kserve_infer_store_output(const struct hps__kserve_infer_req *r, const float *out,
                                   hps__kserve_kerr_t *err)
{
    if (!r->out_shm || (const char *)out == r->out_shm)
        return 0;
    return hps__kserve_shm_write(r->held[HPS__KSERVE_HELD_OUTPUT], r->out_shm, out,
                                 (size_t)r->out_len * sizeof(float), err);
}

void hps__kserve_infer_req_fini(struct hps__kserve_infer_req *r)
{
    free(r->id);
    free(r->keys_owned);
    free(r->numkeys);
    free(r->out_region);
    for (int i = 0; i < HPS__KSERVE_HELD_N; i++)
        hps__kserve_shm_release(r->shm, r->held[i]);
    memset(r, 0, sizeof(*r));
}
