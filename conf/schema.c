/*
 * schema.c -- the const tables generated from hps_conf.def, and lookups.
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "conf/internal.h"

/* ---- Enumerations -------------------------------------------------------- */

#define HPS__CONF_EN_V(e, c, n) {#n, c, true},
#define HPS__CONF_EN_A(e, c, n) {#n, c, false},
#define HPS__CONF_EN_TABLE(e)                                                                      \
    static const struct hps__conf_enum_name hps__conf_names_##e[] = {                              \
        HPS_CONF_ENUM_##e(HPS__CONF_EN_V, HPS__CONF_EN_A)};                                        \
    static const struct hps__conf_enum hps__conf_enum_##e = {                                      \
        hps__conf_names_##e, sizeof(hps__conf_names_##e) / sizeof(hps__conf_names_##e[0])};        \
    _Static_assert(sizeof(HPS_CONF_CTYPE_##e) == sizeof(int), "enum " #e " is stored as an int");
HPS_CONF_ENUMS(HPS__CONF_EN_TABLE)

/* ---- Keys ---------------------------------------------------------------- */

/* Per-type parts of a row: the enum or string check named by `extra`, and
 * the offset of the count of a list. */
#define HPS__CONF_X_ENUM(x)    .en = &hps__conf_enum_##x,
#define HPS__CONF_X_STR(x)     .check = HPS__CONF_CHECK_##x,
#define HPS__CONF_X_TSTRS(x)   .check = HPS__CONF_CHECK_##x,
#define HPS__CONF_X_BOOL(x)    /* nothing */
#define HPS__CONF_X_INT(x)     /* nothing */
#define HPS__CONF_X_AUTO(x)    /* nothing */
#define HPS__CONF_X_SIZE(x)    /* nothing */
#define HPS__CONF_X_MARGIN(x)  /* nothing */
#define HPS__CONF_X_REAL(x)    /* nothing */
#define HPS__CONF_X_REAL_GT(x) /* nothing */
#define HPS__CONF_X_MODE(x)    /* nothing */
#define HPS__CONF_X_REGEXES(x) /* nothing */
#define HPS__CONF_X_INTS(x)    /* nothing */
#define HPS__CONF_X_TINTS(x)   /* nothing */
#define HPS__CONF_X_TREALS(x)  /* nothing */

#define HPS__CONF_LEN(s, k)       .len_offset = offsetof(hps_conf_##s##_t, k##_len),
#define HPS__CONF_L_REGEXES(s, k) HPS__CONF_LEN(s, k)
#define HPS__CONF_L_INTS(s, k)    HPS__CONF_LEN(s, k)
#define HPS__CONF_L_TSTRS(s, k)   HPS__CONF_LEN(s, k)
#define HPS__CONF_L_TINTS(s, k)   HPS__CONF_LEN(s, k)
#define HPS__CONF_L_TREALS(s, k)  HPS__CONF_LEN(s, k)
#define HPS__CONF_L_BOOL(s, k)    /* not a list */
#define HPS__CONF_L_INT(s, k)     /* not a list */
#define HPS__CONF_L_AUTO(s, k)    /* not a list */
#define HPS__CONF_L_SIZE(s, k)    /* not a list */
#define HPS__CONF_L_MARGIN(s, k)  /* not a list */
#define HPS__CONF_L_REAL(s, k)    /* not a list */
#define HPS__CONF_L_REAL_GT(s, k) /* not a list */
#define HPS__CONF_L_MODE(s, k)    /* not a list */
#define HPS__CONF_L_ENUM(s, k)    /* not a list */
#define HPS__CONF_L_STR(s, k)     /* not a list */

#define HPS__CONF_ROW(s_, k_, t_, x_, d_, lo_, hi_, u_, doc_)                                      \
    {.sec = HPS__CONF_SEC_##s_,                                                                    \
     .name = #k_,                                                                                  \
     .type = HPS__CONF_T_##t_,                                                                     \
     .dflt = d_,                                                                                   \
     .lo = lo_,                                                                                    \
     .hi = hi_,                                                                                    \
     .unit = u_,                                                                                   \
     .doc = doc_,                                                                                  \
     .offset = offsetof(hps_conf_##s_##_t, k_),                                                    \
     HPS__CONF_L_##t_(s_, k_) HPS__CONF_X_##t_(x_)},

const struct hps__conf_key hps__conf_keys[HPS__CONF_NKEYS] = {HPS_CONF_KEYS(HPS__CONF_ROW)};

/* ---- Sections ------------------------------------------------------------ */

#define HPS__CONF_SEC_ROW(id, doc) {#id, doc, offsetof(hps_conf_t, id)},
const struct hps__conf_section hps__conf_sections[HPS__CONF_SEC_COUNT] = {
    HPS_CONF_GLOBAL_SECTIONS(HPS__CONF_SEC_ROW){"model", HPS_CONF_MODEL_SECTION_DOC, 0}};

/* ---- Lookups ------------------------------------------------------------- */

int hps__conf_key_find(hps__conf_sec_t sec, const char *name)
{
    for (int i = 0; i < HPS__CONF_NKEYS; i++)
        if (hps__conf_keys[i].sec == sec && strcmp(hps__conf_keys[i].name, name) == 0)
            return i;
    return -1;
}

bool hps__conf_is_name(const char *s, size_t len)
{
    if (len == 0 || len > HPS_CONF_NAME_MAX)
        return false;
    return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") >= len;
}

int hps__conf_sec_find(const char *name, bool *ret_bad_model)
{
    *ret_bad_model = false;
    for (int s = 0; s < HPS__CONF_NGLOBAL; s++)
        if (strcmp(hps__conf_sections[s].name, name) == 0)
            return s;
    if (strncmp(name, "model.", 6) != 0)
        return -1;
    if (!hps__conf_is_name(name + 6, strlen(name + 6))) {
        *ret_bad_model = true;
        return -1;
    }
    return HPS__CONF_SEC_model;
}

bool hps__conf_is_list(hps__conf_type_t t)
{
    return t == HPS__CONF_T_REGEXES || t == HPS__CONF_T_INTS || hps__conf_is_tlist(t);
}

bool hps__conf_is_tlist(hps__conf_type_t t)
{
    return t == HPS__CONF_T_TSTRS || t == HPS__CONF_T_TINTS || t == HPS__CONF_T_TREALS;
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

const char *hps__conf_suggest_key(hps__conf_sec_t sec, const char *s)
{
    const char *best = NULL;
    unsigned best_d = 3;

    for (int i = 0; i < HPS__CONF_NKEYS; i++) {
        if (hps__conf_keys[i].sec != sec)
            continue;
        unsigned d = distance(s, hps__conf_keys[i].name);
        if (d < best_d) {
            best_d = d;
            best = hps__conf_keys[i].name;
        }
    }
    return best;
}

bool hps__conf_secret_name(const char *name)
{
    for (int i = 0; name && i < HPS__CONF_NKEYS; i++)
        if (hps__conf_keys[i].check == HPS__CONF_CHECK_secret &&
            strcmp(hps__conf_keys[i].name, name) == 0)
            return true;
    return false;
}

const char *hps__conf_masked(bool secret, const char *value)
{
    return secret && value && *value ? HPS__CONF_MASK : value;
}

const char *hps__conf_suggest_section(const char *s)
{
    const char *best = NULL;
    unsigned best_d = 3;

    for (int i = 0; i < HPS__CONF_NGLOBAL; i++) {
        unsigned d = distance(s, hps__conf_sections[i].name);
        if (d < best_d) {
            best_d = d;
            best = hps__conf_sections[i].name;
        }
    }
    return best;
}
