/* opts.c -- parsing of numbers, lists and names for hps-gen. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hps-gen.h"

bool gen_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *ret)
{
    char *end;
    unsigned long long v;

    if (s == NULL || !isdigit((unsigned char)*s))
        return false;
    errno = 0;
    v = strtoull(s, &end, 10); /* decimal: "010" is ten, not octal */
    if (errno != 0 || *end != '\0' || v < lo || v > hi)
        return false;
    *ret = v;
    return true;
}

bool gen_parse_double(const char *s, double lo, double hi, double *ret)
{
    char *end;
    double v;

    if (s == NULL || *s == '\0')
        return false;
    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v) || v < lo || v > hi)
        return false;
    *ret = v;
    return true;
}

void gen_strv_free(char **v, size_t n)
{
    if (v == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* The trimmed entry s[0..len) as a new string, or NULL if it is empty. */
static char *trimmed(const char *s, size_t len)
{
    while (len > 0 && isspace((unsigned char)*s)) {
        s++;
        len--;
    }
    while (len > 0 && isspace((unsigned char)s[len - 1]))
        len--;
    return len ? gen_strdupf("%.*s", (int)len, s) : NULL;
}

size_t gen_split(const char *s, char ***ret)
{
    size_t n = 1, i = 0;
    char **v;

    for (const char *p = s; *p; p++)
        n += *p == ',';
    v = gen_xmalloc(n * sizeof *v);
    for (const char *p = s;; i++) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if ((v[i] = trimmed(p, len)) == NULL) {
            gen_strv_free(v, i);
            return 0;
        }
        if (c == NULL)
            break;
        p = c + 1;
    }
    *ret = v;
    return n;
}

bool gen_valid_name(const char *s, size_t max, bool dot)
{
    size_t n = strlen(s);

    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!isalnum(c) && c != '_' && c != '-' && !(dot && c == '.'))
            return false;
    }
    return true;
}

int gen_getopt(int argc, char **argv, const char *cmd, const struct option *opts,
               bool (*set)(void *args, int id), void *args)
{
    int c;

    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == '?' || !set(args, c))
            return gen_usage("%s: unknown option or missing value: '%s'", cmd, argv[optind - 1]);
    }
    if (optind < argc)
        return gen_usage("%s: unexpected argument '%s'", cmd, argv[optind]);
    return GEN_OK;
}
