/*
 * test-conf-output.c -- hps_conf_show() against a golden file, show output
 * that loads back to the same configuration, and hps_conf_doc() against the
 * checked-in docs/configuration.md.
 *
 * Arguments: the directory of sample.ini / sample.show, and the path of
 * docs/configuration.md.  After a deliberate change, regenerate with
 *   hps-conf show sample.ini > sample.show     (in tests/unit/conf)
 *   ninja -C <builddir> conf-doc
 */
#include <errno.h>

#include "conftest.h"

static const char *data_dir, *doc_path;

/* Everything hps_conf_show() (or doc, if conf is NULL) writes. */
static char *capture(const hps_conf_t *conf)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    assert_non_null(f);
    assert_int_equal(conf ? hps_conf_show(conf, f) : hps_conf_doc(f), 0);
    fclose(f);
    return text;
}

/* Fail with the first differing line of two texts. */
static void assert_same_text(const char *got, const char *want, const char *what)
{
    if (strcmp(got, want) == 0)
        return;
    int line = 1;
    const char *g = got, *w = want;
    while (*g && *g == *w) {
        line += *g == '\n';
        g++;
        w++;
    }
    const char *gl = g, *wl = w;
    while (gl > got && gl[-1] != '\n')
        gl--;
    while (wl > want && wl[-1] != '\n')
        wl--;
    fail_msg("%s differs at line %d\n  got:      %.*s\n  expected: %.*s", what, line,
             (int)strcspn(gl, "\n"), gl, (int)strcspn(wl, "\n"), wl);
}

static hps_conf_t *load_sample(void)
{
    char *path = ct_fmt("%s/sample.ini", data_dir);
    char *text = ct_read_file(path);
    char err[1024];
    hps_conf_t *conf = NULL;

    assert_non_null(text);
    if (hps_conf_load_string(text, "sample.ini", &conf, err, sizeof(err)) != 0)
        fail_msg("sample.ini: %s", err);
    free(text);
    free(path);
    return conf;
}

static void test_show_matches_golden(void **state)
{
    (void)state;
    hps_conf_t *conf = load_sample();
    char *got = capture(conf);
    char *path = ct_fmt("%s/sample.show", data_dir);
    char *want = ct_read_file(path);

    assert_non_null(want);
    assert_same_text(got, want, "hps_conf_show(sample.ini) vs sample.show");
    free(want);
    free(path);
    free(got);
    hps_conf_free(conf);
}

/* Drop comment lines and the " ; default..." notes. */
static char *strip_notes(const char *text)
{
    char *out = calloc(1, strlen(text) + 1), *o = out;

    for (const char *s = text; *s;) {
        size_t n = strcspn(s, "\n");
        const char *note = NULL;
        for (size_t i = 1; i < n && !note; i++)
            if (s[i] == ';' && s[i - 1] == ' ')
                note = s + i;
        if (*s != ';') {
            size_t keep = note ? (size_t)(note - s) : n;
            while (keep && s[keep - 1] == ' ')
                keep--;
            memcpy(o, s, keep);
            o += keep;
            *o++ = '\n';
        }
        s += n + (s[n] == '\n');
    }
    return out;
}

static void test_show_loads_back(void **state)
{
    (void)state;
    hps_conf_t *conf = load_sample();
    char *first = capture(conf), err[1024];
    hps_conf_t *again = NULL;

    if (hps_conf_load_string(first, "sample.ini", &again, err, sizeof(err)) != 0)
        fail_msg("show output does not load: %s", err);
    char *second = capture(again);
    char *a = strip_notes(first), *b = strip_notes(second);
    assert_same_text(b, a, "show(load(show(sample.ini)))");
    /* The second load sets every key: no "; default" any more. */
    assert_null(strstr(second, " ; default"));
    free(a);
    free(b);
    free(second);
    free(first);
    hps_conf_free(again);
    hps_conf_free(conf);
}

static void test_show_masks_password_and_marks_auto(void **state)
{
    char buf[64];
    (void)state;
    hps_conf_t *conf = ct_load("[distributed_db]\npassword = hunter2\n[volatile_db]\n"
                               "num_partitions = auto\n");
    char *out = capture(conf);

    assert_null(strstr(out, "hunter2"));
    assert_non_null(strstr(out, "\npassword = ********\n"));
    assert_string_equal(ct_get(conf, "distributed_db.password", buf, sizeof(buf)), "hunter2");
    char *np = ct_fmt("\nnum_partitions = %s ; auto\n",
                      ct_get(conf, "volatile_db.num_partitions", buf, sizeof(buf)));
    char *nt = ct_fmt("\nnum_threads = %s ; default (auto)\n",
                      ct_get(conf, "volatile_db.num_threads", buf, sizeof(buf)));
    assert_non_null(strstr(out, np));
    assert_non_null(strstr(out, nt));
    free(nt);
    free(np);
    free(out);
    hps_conf_free(conf);
}

static void test_doc_matches_checked_in_file(void **state)
{
    (void)state;
    char *got = capture(NULL);
    char *want = ct_read_file(doc_path);

    if (!want)
        fail_msg("cannot read %s", doc_path);
    assert_same_text(got, want, "hps_conf_doc() vs docs/configuration.md (ninja conf-doc)");
    free(want);
    free(got);
}

/* The reference names every key of the schema, in a table row. */
static void test_doc_lists_every_key(void **state)
{
    (void)state;
    char *doc = capture(NULL);
#define CHECK_ROW(s, k, ...)                                                                       \
    do {                                                                                           \
        if (!strstr(doc, "| `" #k "` |"))                                                          \
            fail_msg("doc has no row for %s.%s", #s, #k);                                          \
    } while (0);
    HPS_CONF_KEYS(CHECK_ROW)
#undef CHECK_ROW
    assert_non_null(strstr(doc, "## `[model.<name>]`"));
    free(doc);
}

static void test_output_errors(void **state)
{
    (void)state;
    hps_conf_t *conf = ct_load("");
    FILE *full = fopen("/dev/full", "w");

    assert_int_equal(hps_conf_show(NULL, stdout), HPS_EINVAL);
    assert_int_equal(hps_conf_show(conf, NULL), HPS_EINVAL);
    assert_int_equal(hps_conf_doc(NULL), HPS_EINVAL);
    if (full) {
        assert_int_equal(hps_conf_show(conf, full), -EIO);
        assert_int_equal(hps_conf_doc(full), -EIO);
        fclose(full);
    }
    hps_conf_free(conf);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_show_matches_golden),
        cmocka_unit_test(test_show_loads_back),
        cmocka_unit_test(test_show_masks_password_and_marks_auto),
        cmocka_unit_test(test_doc_matches_checked_in_file),
        cmocka_unit_test(test_doc_lists_every_key),
        cmocka_unit_test(test_output_errors),
    };

    if (argc != 3) {
        fprintf(stderr, "usage: %s DATA_DIR DOCS/configuration.md\n", argv[0]);
        return 2;
    }
    data_dir = argv[1];
    doc_path = argv[2];
    return cmocka_run_group_tests_name("conf-output", tests, NULL, NULL);
}
