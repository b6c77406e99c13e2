/*
 * schema.c -- the const tables generated from hps_conf.def, and lookups.
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "conf/internal.h"

/* ---- Enumerations -------------------------------------------------------- */

#define HPS__EN_V(e, c, n) {#n, c, true},
#define HPS__EN_A(e, c, n) {#n, c, false},
#define HPS__EN_TABLE(e)                                                                           \
    static const struct hps__enum_name hps__names_##e[] = {                                        \
        HPS_CONF_ENUM_##e(HPS__EN_V, HPS__EN_A)};                                                  \
    static const struct hps__enum hps__enum_##e = {hps__names_##e, sizeof(hps__names_##e) /        \
                                                                       sizeof(hps__names_##e[0])}; \
    _Static_assert(sizeof(HPS_CONF_CTYPE_##e) == sizeof(int), "enum " #e " is stored as an int");
HPS_CONF_ENUMS(HPS__EN_TABLE)

/* ---- Keys ---------------------------------------------------------------- */

/* Per-type parts of a row: the enum or string check named by `extra`, and
 * the offset of the count of a list. */
#define HPS__X_ENUM(x)    .en = &hps__enum_##x,
#define HPS__X_STR(x)     .check = HPS__CHECK_##x,
#define HPS__X_TSTRS(x)   .check = HPS__CHECK_##x,
#define HPS__X_BOOL(x)    /* nothing */
#define HPS__X_INT(x)     /* nothing */
#define HPS__X_AUTO(x)    /* nothing */
#define HPS__X_SIZE(x)    /* nothing */
#define HPS__X_MARGIN(x)  /* nothing */
#define HPS__X_REAL(x)    /* nothing */
#define HPS__X_REAL_GT(x) /* nothing */
#define HPS__X_MODE(x)    /* nothing */
#define HPS__X_REGEXES(x) /* nothing */
#define HPS__X_INTS(x)    /* nothing */
#define HPS__X_TINTS(x)   /* nothing */
#define HPS__X_TREALS(x)  /* nothing */

#define HPS__LEN(s, k)       .len_offset = offsetof(hps_conf_##s##_t, k##_len),
#define HPS__L_REGEXES(s, k) HPS__LEN(s, k)
#define HPS__L_INTS(s, k)    HPS__LEN(s, k)
#define HPS__L_TSTRS(s, k)   HPS__LEN(s, k)
#define HPS__L_TINTS(s, k)   HPS__LEN(s, k)
#define HPS__L_TREALS(s, k)  HPS__LEN(s, k)
#define HPS__L_BOOL(s, k)    /* not a list */
#define HPS__L_INT(s, k)     /* not a list */
#define HPS__L_AUTO(s, k)    /* not a list */
#define HPS__L_SIZE(s, k)    /* not a list */
#define HPS__L_MARGIN(s, k)  /* not a list */
#define HPS__L_REAL(s, k)    /* not a list */
#define HPS__L_REAL_GT(s, k) /* not a list */
#define HPS__L_MODE(s, k)    /* not a list */
#define HPS__L_ENUM(s, k)    /* not a list */
#define HPS__L_STR(s, k)     /* not a list */

#define HPS__ROW(s_, k_, t_, x_, d_, lo_, hi_, u_, doc_)                                           \
    {.sec = HPS__SEC_##s_,                                                                         \
     .name = #k_,                                                                                  \
     .type = HPS__T_##t_,                                                                          \
     .dflt = d_,                                                                                   \
     .lo = lo_,                                                                                    \
     .hi = hi_,                                                                                    \
     .unit = u_,                                                                                   \
     .doc = doc_,                                                                                  \
     .offset = offsetof(hps_conf_##s_##_t, k_),                                                    \
     HPS__L_##t_(s_, k_) HPS__X_##t_(x_)},

const struct hps__key hps__keys[HPS__NKEYS] = {HPS_CONF_KEYS(HPS__ROW)};

/* ---- Sections ------------------------------------------------------------ */

#define HPS__SEC_ROW(id, doc) {#id, doc, offsetof(hps_conf_t, id)},
const struct hps__section hps__sections[HPS__SEC_COUNT] = {
    HPS_CONF_GLOBAL_SECTIONS(HPS__SEC_ROW){"model", HPS_CONF_MODEL_SECTION_DOC, 0}};

/* ---- Lookups ------------------------------------------------------------- */

int hps__key_find(hps__sec_t sec, const char *name)
{
    for (int i = 0; i < HPS__NKEYS; i++)
        if (hps__keys[i].sec == sec && strcmp(hps__keys[i].name, name) == 0)
            return i;
    return -1;
}

bool hps__is_name(const char *s, size_t len)
{
    if (len == 0 || len > HPS_CONF_NAME_MAX)
        return false;
    return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") >= len;
}

int hps__sec_find(const char *name, bool *ret_bad_model)
{
    *ret_bad_model = false;
    for (int s = 0; s < HPS__NGLOBAL; s++)
        if (strcmp(hps__sections[s].name, name) == 0)
            return s;
    if (strncmp(name, "model.", 6) != 0)
        return -1;
    if (!hps__is_name(name + 6, strlen(name + 6))) {
        *ret_bad_model = true;
        return -1;
    }
    return HPS__SEC_model;
}

bool hps__is_list(hps__type_t t)
{
    return t == HPS__T_REGEXES || t == HPS__T_INTS || hps__is_tlist(t);
}

bool hps__is_tlist(hps__type_t t)
{
    return t == HPS__T_TSTRS || t == HPS__T_TINTS || t == HPS__T_TREALS;
}

/* How far apart a typo s is from name: the Levenshtein distance, capped at
 * 3; a prefix of 3 or more bytes counts as 1 ("volatile" for "volatile_db"). */
static unsigned distance(const char *s, const char *name);

/* Levenshtein distance of two short strings, capped at 3 (enough to suggest
 * a fix for a typo; longer strings than 64 bytes are never close). */
static unsigned edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned row[65];

    if (la > 64 || lb > 64)
        return 3;
    for (size_t j = 0; j <= lb; j++)
        row[j] = (unsigned)j;
    for (size_t i = 1; i <= la; i++) {
        unsigned diag = row[0];
        row[0] = (unsigned)i;
        for (size_t j = 1; j <= lb; j++) {
            unsigned up = row[j];
            unsigned best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb] < 3 ? row[lb] : 3;
}

static unsigned distance(const char *s, const char *name)
{
    size_t ls = strlen(s), ln = strlen(name), n = ls < ln ? ls : ln;

    if (n >= 3 && strncmp(s, name, n) == 0)
        return 1;
    return edit_distance(s, name);
}

const char *hps__suggest_key(hps__sec_t sec, const char *s)
{
    const char *best = NULL;
    unsigned best_d = 3;

    for (int i = 0; i < HPS__NKEYS; i++) {
        if (hps__keys[i].sec != sec)
            continue;
        unsigned d = distance(s, hps__keys[i].name);
        if (d < best_d) {
            best_d = d;
            best = hps__keys[i].name;
        }
    }
    return best;
}

bool hps__secret_name(const char *name)
{
    for (int i = 0; name && i < HPS__NKEYS; i++)
        if (hps__keys[i].check == HPS__CHECK_secret && strcmp(hps__keys[i].name, name) == 0)
            return true;
    return false;
}

const char *hps__masked(bool secret, const char *value)
{
    return secret && value && *value ? HPS__MASK : value;
}

const char *hps__suggest_section(const char *s)
{
    const char *best = NULL;
    unsigned best_d = 3;

    for (int i = 0; i < HPS__NGLOBAL; i++) {
        unsigned d = distance(s, hps__sections[i].name);
        if (d < best_d) {
            best_d = d;
            best = hps__sections[i].name;
        }
    }
    return best;
}
