/*
 * conftest.h -- helpers shared by the configuration unit tests (cmocka).
 */
#ifndef HPS_CONFTEST_H
#define HPS_CONFTEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "conf/tools.h"

/* A minimal valid model section with two tables (T = 2). */
#define CT_MODEL                                                                                   \
    "[model.m]\n"                                                                                  \
    "sparse_files = /a, /b\n"                                                                      \
    "embedding_vecsize_per_table = 8, 16\n"                                                        \
    "maxnum_catfeature_query_per_table_per_sample = 1, 2\n"

/* Load text (named "t.ini"); fail the test, printing the error, if invalid. */
static inline hps_conf_t *ct_load(const char *text)
{
    char err[1024];
    hps_conf_t *conf = NULL;
    hps_err_t rc = hps_conf_load_string(text, "t.ini", &conf, err, sizeof(err));

    if (rc != 0)
        fail_msg("unexpected error %d (%s): %s\n--- text:\n%s", rc, hps_err_name(rc), err, text);
    return conf;
}

/* Load text that must fail with HPS_ECONFIG and exactly this message. */
static inline void ct_load_fails(const char *text, const char *message)
{
    char err[1024];
    hps_conf_t *conf = NULL;
    hps_err_t rc = hps_conf_load_string(text, "t.ini", &conf, err, sizeof(err));

    if (rc != HPS_ECONFIG) {
        hps_conf_free(conf);
        fail_msg("expected HPS_ECONFIG, got %d (%s)\n--- text:\n%s", rc, hps_err_name(rc), text);
    }
    assert_null(conf);
    if (strcmp(err, message) != 0)
        fail_msg("message differs\n  got:      %s\n  expected: %s\n--- text:\n%s", err, message,
                 text);
}

/* hps_conf_get into a static-size buffer; fails the test on error. */
static inline const char *ct_get(const hps_conf_t *conf, const char *key, char *buf, size_t len)
{
    hps_err_t rc = hps_conf_get(conf, key, buf, len);

    if (rc != 0)
        fail_msg("hps_conf_get(%s) = %d (%s)", key, rc, hps_err_name(rc));
    return buf;
}

/* Read a whole file (NULL if it cannot be read); caller frees. */
static inline char *ct_read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    size_t len = 0;

    if (!f)
        return NULL;
    for (;;) {
        char *t = realloc(text, len + 4097);
        assert_non_null(t);
        text = t;
        size_t n = fread(text + len, 1, 4096, f);
        len += n;
        if (n < 4096)
            break;
    }
    text[len] = '\0';
    fclose(f);
    return text;
}

/* printf into a malloc'd string. */
static inline char *ct_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline char *ct_fmt(const char *fmt, ...)
{
    va_list ap;
    char *s = NULL;

    va_start(ap, fmt);
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    assert_true(n >= 0);
    return s;
}

#endif /* HPS_CONFTEST_H */
