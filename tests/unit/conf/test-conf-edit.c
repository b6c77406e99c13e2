/*
 * test-conf-edit.c -- hps_conf_edit_string(), hps_conf_edit_many(), hps_conf_strip_secrets(),
 * hps_conf_remove_section() and their file versions: edits that keep
 * comments, blank lines and order; several edits validated once (a new model
 * section); removed keys taking their defaults; removed sections taking
 * exactly their own lines; validation before any write; atomic replacement
 * that keeps the file's mode.
 */
#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conftest.h"

/* Edit text; fail the test unless it succeeds with exactly `want`. */
static void edit_ok(const char *text, const char *key, const char *value, const char *want)
{
    char *out = NULL, err[1024];
    hps_err_t rc = hps_conf_edit_string(text, "t.ini", key, value, &out, err, sizeof(err));

    if (rc != 0)
        fail_msg("set %s=%s failed (%s): %s", key, value, hps_err_name(rc), err);
    if (strcmp(out, want) != 0)
        fail_msg("set %s=%s\n--- got:\n%s--- expected:\n%s", key, value, out, want);
    free(out);
}

/* Edit text; fail the test unless it fails with rc and exactly `message`. */
static void edit_fails(const char *text, const char *key, const char *value, hps_err_t want_rc,
                       const char *message)
{
    char *out = (char *)"untouched", err[1024];
    hps_err_t rc = hps_conf_edit_string(text, "t.ini", key, value, &out, err, sizeof(err));

    if (rc != want_rc)
        fail_msg("set %s=%s: rc %s, expected %s", key, value, hps_err_name(rc),
                 hps_err_name(want_rc));
    assert_string_equal(out, "untouched");
    if (strcmp(err, message) != 0)
        fail_msg("message differs\n  got:      %s\n  expected: %s", err, message);
}

static const char base[] = "; HPS config\n"
                           "\n"
                           "[hps]\n"
                           "log_level = info   ; how chatty\n"
                           "\n"
                           "; the VDB\n"
                           "[volatile_db]\n"
                           "  shared_memory_size=1GiB\n"
                           "allocation_rate = 64MiB\n"
                           "\n"
                           "; trailing comment of volatile_db\n"
                           "\n"
                           "[model.m]\n"
                           "sparse_files = /a,\n"
                           "    /b ; two tables\n"
                           "embedding_vecsize_per_table = 8, 16\n"
                           "maxnum_catfeature_query_per_table_per_sample = 1, 2\n";

static void test_replace_keeps_layout(void **state)
{
    (void)state;
    /* Spacing, indentation and the inline comment stay; only the value changes. */
    edit_ok(base, "hps.log_level", "debug",
            "; HPS config\n\n[hps]\nlog_level = debug   ; how chatty\n\n; the VDB\n"
            "[volatile_db]\n  shared_memory_size=1GiB\nallocation_rate = 64MiB\n\n"
            "; trailing comment of volatile_db\n\n[model.m]\nsparse_files = /a,\n"
            "    /b ; two tables\nembedding_vecsize_per_table = 8, 16\n"
            "maxnum_catfeature_query_per_table_per_sample = 1, 2\n");
    edit_ok(base, "volatile_db.shared_memory_size", " 2GiB ",
            "; HPS config\n\n[hps]\nlog_level = info   ; how chatty\n\n; the VDB\n"
            "[volatile_db]\n  shared_memory_size=2GiB\nallocation_rate = 64MiB\n\n"
            "; trailing comment of volatile_db\n\n[model.m]\nsparse_files = /a,\n"
            "    /b ; two tables\nembedding_vecsize_per_table = 8, 16\n"
            "maxnum_catfeature_query_per_table_per_sample = 1, 2\n");
}

static void test_replace_multiline_value(void **state)
{
    (void)state;
    /* The continuation line (with its comment) goes; the rest stays. */
    edit_ok(base, "model.m.sparse_files", "/x, /y",
            "; HPS config\n\n[hps]\nlog_level = info   ; how chatty\n\n; the VDB\n"
            "[volatile_db]\n  shared_memory_size=1GiB\nallocation_rate = 64MiB\n\n"
            "; trailing comment of volatile_db\n\n[model.m]\nsparse_files = /x, /y\n"
            "embedding_vecsize_per_table = 8, 16\n"
            "maxnum_catfeature_query_per_table_per_sample = 1, 2\n");
}

static void test_add_key_and_section(void **state)
{
    (void)state;
    /* A missing key goes after the last key of its section. */
    edit_ok(base, "volatile_db.overflow_policy", "evict_oldest",
            "; HPS config\n\n[hps]\nlog_level = info   ; how chatty\n\n; the VDB\n"
            "[volatile_db]\n  shared_memory_size=1GiB\nallocation_rate = 64MiB\n"
            "overflow_policy = evict_oldest\n\n"
            "; trailing comment of volatile_db\n\n[model.m]\nsparse_files = /a,\n"
            "    /b ; two tables\nembedding_vecsize_per_table = 8, 16\n"
            "maxnum_catfeature_query_per_table_per_sample = 1, 2\n");
    /* ... also after a multi-line value. */
    edit_ok("[model.m]\nembedding_vecsize_per_table = 8, 8\n"
            "maxnum_catfeature_query_per_table_per_sample = 1, 1\n"
            "sparse_files = /a,\n    /b\n\n[hps]\n",
            "model.m.gpucache", "false",
            "[model.m]\nembedding_vecsize_per_table = 8, 8\n"
            "maxnum_catfeature_query_per_table_per_sample = 1, 1\n"
            "sparse_files = /a,\n    /b\ngpucache = false\n\n[hps]\n");
    /* A missing section goes at the end. */
    edit_ok("[hps]\nlog_level = info", "worker.http_port", "9000",
            "[hps]\nlog_level = info\n\n[worker]\nhttp_port = 9000\n");
    edit_ok("", "worker.http_port", "9000", "[worker]\nhttp_port = 9000\n");
    /* A section without keys gets the key right after its header. */
    edit_ok("[worker]\n; nothing yet\n[hps]\n", "worker.http_threads", "4",
            "[worker]\nhttp_threads = 4\n; nothing yet\n[hps]\n");
}

/* Only the result must be valid: an edit may complete an incomplete file. */
static void test_edit_completes_file(void **state)
{
    (void)state;
    edit_ok("[model.m]\nsparse_files = /a\nembedding_vecsize_per_table = 8\n",
            "model.m.maxnum_catfeature_query_per_table_per_sample", "1",
            "[model.m]\nsparse_files = /a\nembedding_vecsize_per_table = 8\n"
            "maxnum_catfeature_query_per_table_per_sample = 1\n");
}

static void test_invalid_edits(void **state)
{
    (void)state;
    edit_fails(base, "volatile_db.overflow_resolution_target", "1.5", HPS_ECONFIG,
               "t.ini:10: [volatile_db] overflow_resolution_target = 1.5: must be a number in "
               "(0, 1]");
    edit_fails(base, "volatile_db.sharde_memory_size", "1GiB", HPS_ENOTFOUND,
               "unknown key \"volatile_db.sharde_memory_size\" (expected section.key or "
               "model.<name>.key)");
    edit_fails(base, "nosuch.key", "1", HPS_ENOTFOUND,
               "unknown key \"nosuch.key\" (expected section.key or model.<name>.key)");
    edit_fails(base, "model.a/b.sparse_files", "/a", HPS_ENOTFOUND,
               "\"model.a/b.sparse_files\": not a model name (a model name matches "
               "[A-Za-z0-9_-]{1,120})");
    edit_fails(base, "model.m.sparse_files", "/a, /b, /c", HPS_ECONFIG,
               "t.ini:15: [model.m] embedding_vecsize_per_table = 8, 16: has 2 entries, but "
               "sparse_files has 3 (one per table)");
    edit_fails(base, "hps.log_level", "info ; x", HPS_ECONFIG,
               "hps.log_level = info ; x: a value cannot contain a line break, nor a ';' at its "
               "start or after a blank (that starts a comment)");
    edit_fails(base, "hps.log_level", "a\nb", HPS_ECONFIG,
               "hps.log_level = a\nb: a value cannot contain a line break, nor a ';' at its "
               "start or after a blank (that starts a comment)");
    /* A new model section needs its required keys. */
    edit_fails(base, "model.new.gpucache", "true", HPS_ECONFIG,
               "t.ini:19: [model.new] sparse_files: missing required key");
    /* A structurally broken file is not edited. */
    edit_fails("[hps]\nbogus = 1\n", "hps.log_level", "info", HPS_ECONFIG,
               "t.ini:2: [hps] bogus = 1: unknown key");
}

static void test_repair_bad_value(void **state)
{
    (void)state;
    edit_ok("[hps]\nlog_level = loud ; typo\n", "hps.log_level", "warn",
            "[hps]\nlog_level = warn ; typo\n");
    edit_ok("[distributed_db]\npassword = ; none\n", "distributed_db.password", "pw",
            "[distributed_db]\npassword = pw ; none\n");
    edit_ok("[distributed_db]\npassword =\n", "distributed_db.password", "pw",
            "[distributed_db]\npassword = pw\n");
    edit_ok("[distributed_db]\npassword = pw\n", "distributed_db.password", "",
            "[distributed_db]\npassword = \n");
}

static void test_crlf_and_long_lists(void **state)
{
    char list[2048] = "";
    (void)state;
    edit_ok("[hps]\r\nlog_level = info\r\n", "hps.heartbeat_interval_ms", "200",
            "[hps]\r\nlog_level = info\r\nheartbeat_interval_ms = 200\r\n");
    edit_ok("[hps]\r\nlog_level = info ; c\r\n", "hps.log_level", "error",
            "[hps]\r\nlog_level = error ; c\r\n");
    /* A long list is wrapped onto indented lines, and loads back. */
    for (int i = 0; i < 8; i++) {
        char one[64];
        snprintf(one, sizeof(one), "%s/models/some/long/path/table_%d", i ? ", " : "", i);
        strcat(list, one);
    }
    edit_ok("[volatile_db]\n", "volatile_db.update_filters", "a{1,3}, b",
            "[volatile_db]\nupdate_filters = a{1,3}, b\n");
    char *out = NULL, err[256];
    assert_int_equal(hps_conf_edit_string("[model.m]\nsparse_files = /a\n"
                                          "embedding_vecsize_per_table = 8, 8, 8, 8, 8, 8, 8, 8\n"
                                          "maxnum_catfeature_query_per_table_per_sample = 1, 1, "
                                          "1, 1, 1, 1, 1, 1\n",
                                          "t.ini", "model.m.sparse_files", list, &out, err,
                                          sizeof(err)),
                     0);
    assert_non_null(strstr(out, "sparse_files = /models/some/long/path/table_0,\n"
                                "    /models/some/long/path/table_1,\n"));
    hps_conf_t *c = ct_load(out);
    assert_int_equal(c->models[0].num_tables, 8);
    assert_string_equal(c->models[0].sparse_files[7], "/models/some/long/path/table_7");
    hps_conf_free(c);
    free(out);
}

/* ---- Several edits, unset ----------------------------------------------------- */

#define NEDITS(a) (sizeof(a) / sizeof((a)[0]))

/* hps_conf_edit_many(); fail the test unless it succeeds with exactly `want`. */
static void many_ok(const char *text, const hps_conf_edit_t *e, size_t n, const char *want)
{
    char *out = NULL, err[1024];
    hps_err_t rc = hps_conf_edit_many(text, "t.ini", e, n, &out, err, sizeof(err));

    if (rc != 0)
        fail_msg("edit of %zu keys failed (%s): %s", n, hps_err_name(rc), err);
    if (strcmp(out, want) != 0)
        fail_msg("edit of %zu keys\n--- got:\n%s--- expected:\n%s", n, out, want);
    free(out);
}

/* hps_conf_edit_many(); fail the test unless it fails with rc and exactly `message`. */
static void many_fails(const char *text, const hps_conf_edit_t *e, size_t n, hps_err_t want_rc,
                       const char *message)
{
    char *out = (char *)"untouched", err[1024];
    hps_err_t rc = hps_conf_edit_many(text, "t.ini", e, n, &out, err, sizeof(err));

    if (rc != want_rc)
        fail_msg("edit of %zu keys: rc %s, expected %s (%s)", n, hps_err_name(rc),
                 hps_err_name(want_rc), err);
    assert_string_equal(out, "untouched");
    if (strcmp(err, message) != 0)
        fail_msg("message differs\n  got:      %s\n  expected: %s", err, message);
}

static const char base_debug_with_n[] =
    "; HPS config\n\n[hps]\nlog_level = debug   ; how chatty\n\n; the VDB\n"
    "[volatile_db]\n  shared_memory_size=1GiB\nallocation_rate = 64MiB\n\n"
    "; trailing comment of volatile_db\n\n[model.m]\nsparse_files = /a,\n"
    "    /b ; two tables\nembedding_vecsize_per_table = 8, 16\n"
    "maxnum_catfeature_query_per_table_per_sample = 1, 2\n"
    "\n[model.n]\nsparse_files = /m/n/0, /m/n/1\nembedding_vecsize_per_table = 16, 4\n"
    "maxnum_catfeature_query_per_table_per_sample = 3, 1\ngpucache = false\n";

/* A new model n (its required keys and one more) and another key: applied to
 * base, they give base_debug_with_n. */
static const hps_conf_edit_t new_model_edits[] = {
    {"model.n.sparse_files", "/m/n/0, /m/n/1"},
    {"model.n.embedding_vecsize_per_table", "16, 4"},
    {"hps.log_level", "debug"},
    {"model.n.maxnum_catfeature_query_per_table_per_sample", "3, 1"},
    {"model.n.gpucache", "false"},
};

/* A new model needs its required keys at once: each alone fails, together
 * they make a section (keys in the order given) that loads with the values. */
static void test_many_new_model(void **state)
{
    char buf[256];
    (void)state;
    edit_fails(base, "model.n.sparse_files", "/m/n/0, /m/n/1", HPS_ECONFIG,
               "t.ini:19: [model.n] embedding_vecsize_per_table: missing required key");
    many_ok(base, new_model_edits, NEDITS(new_model_edits), base_debug_with_n);
    char *out = NULL, err[512];
    assert_int_equal(hps_conf_edit_many(base, "t.ini", new_model_edits, NEDITS(new_model_edits),
                                        &out, err, sizeof(err)),
                     0);
    hps_conf_t *c = ct_load(out);
    assert_int_equal(c->num_models, 2);
    assert_string_equal(c->models[0].name, "m");
    const hps_conf_model_t *n = hps_conf_model_find(c, "n");
    assert_non_null(n);
    assert_int_equal(n->num_tables, 2);
    assert_string_equal(n->sparse_files[0], "/m/n/0");
    assert_string_equal(n->sparse_files[1], "/m/n/1");
    assert_int_equal(n->embedding_vecsize_per_table[0], 16);
    assert_int_equal(n->embedding_vecsize_per_table[1], 4);
    assert_int_equal(n->maxnum_catfeature_query_per_table_per_sample[0], 3);
    assert_false(n->gpucache);
    assert_int_equal(c->hps.log_level, HPS_LOG_DEBUG);
    assert_string_equal(ct_get(c, "model.n.gpucacheper", buf, sizeof(buf)), "0.2"); /* default */
    hps_conf_free(c);
    free(out);
    /* Into an empty file: the new section is the whole file. */
    const hps_conf_edit_t one[] = {
        {"model.x.maxnum_catfeature_query_per_table_per_sample", "1"},
        {"model.x.sparse_files", "/x"},
        {"model.x.embedding_vecsize_per_table", "8"},
    };
    many_ok("", one, NEDITS(one),
            "[model.x]\nmaxnum_catfeature_query_per_table_per_sample = 1\n"
            "sparse_files = /x\nembedding_vecsize_per_table = 8\n");
}

/* One edit is exactly hps_conf_edit_string(); a key edited twice gets the
 * last value; CRLF files get CRLF lines. */
static void test_many_single_and_repeated(void **state)
{
    const hps_conf_edit_t one[] = {{"volatile_db.overflow_policy", "evict_oldest"}};
    const hps_conf_edit_t twice[] = {{"hps.log_level", "warn"}, {"hps.log_level", "error"}};
    const hps_conf_edit_t crlf[] = {{"worker.http_port", "9000"}, {"hps.log_level", "warn"}};
    char *a = NULL, *b = NULL, err[512];
    (void)state;
    assert_int_equal(
        hps_conf_edit_string(base, "t.ini", one[0].key, one[0].value, &a, err, sizeof(err)), 0);
    assert_int_equal(hps_conf_edit_many(base, "t.ini", one, 1, &b, err, sizeof(err)), 0);
    assert_string_equal(a, b);
    free(a);
    free(b);
    many_ok("[hps]\nlog_level = info\n", twice, NEDITS(twice), "[hps]\nlog_level = error\n");
    many_ok("[hps]\r\nlog_level = info\r\n", crlf, NEDITS(crlf),
            "[hps]\r\nlog_level = warn\r\n\r\n[worker]\r\nhttp_port = 9000\r\n");
}

/* The first failing edit stops everything; the result is validated once. */
static void test_many_errors(void **state)
{
    const hps_conf_edit_t unknown[] = {{"model.n.sparse_files", "/x"}, {"hps.nope", "1"}};
    const hps_conf_edit_t lengths[] = {
        {"model.n.sparse_files", "/x, /y"},
        {"model.n.embedding_vecsize_per_table", "16"},
        {"model.n.maxnum_catfeature_query_per_table_per_sample", "1, 1"},
    };
    const hps_conf_edit_t badval[] = {{"hps.log_level", "warn"}, {"hps.log_level", "a ;b"}};
    const hps_conf_edit_t nullkey[] = {{"hps.log_level", "warn"}, {NULL, "x"}};
    char *out = (char *)"untouched", err[256];
    (void)state;
    many_fails(base, unknown, NEDITS(unknown), HPS_ENOTFOUND,
               "unknown key \"hps.nope\" (expected section.key or model.<name>.key)");
    many_fails(base, lengths, NEDITS(lengths), HPS_ECONFIG,
               "t.ini:21: [model.n] embedding_vecsize_per_table = 16: has 1 entry, but "
               "sparse_files has 2 (one per table)");
    many_fails(base, badval, NEDITS(badval), HPS_ECONFIG,
               "hps.log_level = a ;b: a value cannot contain a line break, nor a ';' at its "
               "start or after a blank (that starts a comment)");
    assert_int_equal(hps_conf_edit_many(base, "t.ini", nullkey, 2, &out, err, sizeof(err)),
                     HPS_EINVAL);
    assert_int_equal(hps_conf_edit_many(base, "t.ini", unknown, 0, &out, err, sizeof(err)),
                     HPS_EINVAL);
    assert_int_equal(hps_conf_edit_many(base, "t.ini", NULL, 1, &out, err, sizeof(err)),
                     HPS_EINVAL);
    assert_string_equal(out, "untouched");
}

/* Unset: the key's lines go (continuations and inline comment too), the key
 * takes its default, other lines stay. */
static void test_unset_takes_default(void **state)
{
    const hps_conf_edit_t rate[] = {{"volatile_db.allocation_rate", NULL}};
    const hps_conf_edit_t devs[] = {{"model.m.deployed_device_list", NULL}};
    const hps_conf_edit_t mixed[] = {{"hps.log_level", NULL},
                                     {"volatile_db.allocation_rate", "128MiB"}};
    static const char with_devs[] = CT_MODEL "deployed_device_list = 0,\n"
                                             "    1 ; two GPUs\n"
                                             "; keep me\n"
                                             "gpucache = false\n";
    char *out = NULL, err[512];
    bool set = true;
    (void)state;
    many_ok(base, rate, 1,
            "; HPS config\n\n[hps]\nlog_level = info   ; how chatty\n\n; the VDB\n"
            "[volatile_db]\n  shared_memory_size=1GiB\n\n"
            "; trailing comment of volatile_db\n\n[model.m]\nsparse_files = /a,\n"
            "    /b ; two tables\nembedding_vecsize_per_table = 8, 16\n"
            "maxnum_catfeature_query_per_table_per_sample = 1, 2\n");
    assert_int_equal(hps_conf_edit_many(base, "t.ini", rate, 1, &out, err, sizeof(err)), 0);
    hps_conf_t *c = ct_load(out), *dflt = ct_load("");
    assert_int_equal(hps_conf_is_set(c, "volatile_db.allocation_rate", &set), 0);
    assert_false(set);
    assert_int_equal(c->volatile_db.allocation_rate, dflt->volatile_db.allocation_rate);
    assert_int_equal(c->volatile_db.allocation_rate, 256u << 20);
    hps_conf_free(c);
    free(out);

    many_ok(with_devs, devs, 1, CT_MODEL "; keep me\ngpucache = false\n");
    assert_int_equal(hps_conf_edit_many(with_devs, "t.ini", devs, 1, &out, err, sizeof(err)), 0);
    c = ct_load(out);
    assert_int_equal(c->models[0].deployed_device_list_len, 1);
    assert_int_equal(c->models[0].deployed_device_list[0], 0);
    assert_false(c->models[0].gpucache);
    hps_conf_free(c);
    hps_conf_free(dflt);
    free(out);

    many_ok("[hps]\nlog_level = warn\nheartbeat_interval_ms = 200\n[volatile_db]\n"
            "allocation_rate = 64MiB\n",
            mixed, NEDITS(mixed),
            "[hps]\nheartbeat_interval_ms = 200\n[volatile_db]\nallocation_rate = 128MiB\n");
    /* The last key of a section: the header stays, the section is empty. */
    many_ok("[hps]\nlog_level = warn\n", mixed, 1, "[hps]\n");
}

static void test_unset_refused(void **state)
{
    const hps_conf_edit_t req[] = {{"model.m.sparse_files", NULL}};
    const hps_conf_edit_t notset[] = {{"hps.heartbeat_interval_ms", NULL}};
    const hps_conf_edit_t nomodel[] = {{"model.zz.gpucache", NULL}};
    const hps_conf_edit_t noglobal[] = {{"worker.http_port", NULL}};
    const hps_conf_edit_t unknown[] = {{"hps.nope", NULL}};
    (void)state;
    /* A required key: the result is invalid, nothing is returned. */
    many_fails(base, req, 1, HPS_ECONFIG, "t.ini:13: [model.m] sparse_files: missing required key");
    many_fails(base, notset, 1, HPS_ENOTFOUND,
               "t.ini: [hps] heartbeat_interval_ms is not set (nothing to remove)");
    many_fails(base, nomodel, 1, HPS_ENOTFOUND, "t.ini: no section [model.zz] (the models are m)");
    many_fails("[hps]\n", nomodel, 1, HPS_ENOTFOUND,
               "t.ini: no section [model.zz] (there is no model)");
    many_fails(base, noglobal, 1, HPS_ENOTFOUND, "t.ini: no section [worker]");
    many_fails(base, unknown, 1, HPS_ENOTFOUND,
               "unknown key \"hps.nope\" (expected section.key or model.<name>.key)");
}

/* ---- Remove a section ------------------------------------------------------------ */

static void remove_ok(const char *text, const char *section, const char *want)
{
    char *out = NULL, err[1024];
    hps_err_t rc = hps_conf_remove_section(text, "t.ini", section, &out, err, sizeof(err));

    if (rc != 0)
        fail_msg("remove [%s] failed (%s): %s", section, hps_err_name(rc), err);
    if (strcmp(out, want) != 0)
        fail_msg("remove [%s]\n--- got:\n%s--- expected:\n%s", section, out, want);
    hps_conf_t *c = ct_load(out); /* the result is valid */
    assert_null(hps_conf_model_find(c, section + (strncmp(section, "model.", 6) ? 0 : 6)));
    hps_conf_free(c);
    free(out);
}

static void remove_fails(const char *text, const char *section, hps_err_t want_rc,
                         const char *message)
{
    char *out = (char *)"untouched", err[1024];
    hps_err_t rc = hps_conf_remove_section(text, "t.ini", section, &out, err, sizeof(err));

    if (rc != want_rc)
        fail_msg("remove [%s]: rc %s, expected %s (%s)", section, hps_err_name(rc),
                 hps_err_name(want_rc), err);
    assert_string_equal(out, "untouched");
    if (strcmp(err, message) != 0)
        fail_msg("message differs\n  got:      %s\n  expected: %s", err, message);
}

/* A file made of parts, each a section with what it owns (see edit.c). */
#define RM_HEAD "; HPS config\n\n[hps]\nlog_level = info   ; how chatty\n\n"
#define RM_A                                                                                       \
    "; model a: the ranking model\n"                                                               \
    "[model.a]\n"                                                                                  \
    "sparse_files = /a\n"                                                                          \
    "; between keys\n"                                                                             \
    "embedding_vecsize_per_table = 8\n"                                                            \
    "maxnum_catfeature_query_per_table_per_sample = 1\n"                                           \
    "; trailing comment of a\n"                                                                    \
    "\n"
#define RM_B                                                                                       \
    "; model b: its comment block\n"                                                               \
    "#   two lines\n"                                                                              \
    "[model.b]  ; inline\n"                                                                        \
    "sparse_files = /b1,\n"                                                                        \
    "    /b2 ; two tables\n"                                                                       \
    "embedding_vecsize_per_table = 8, 8\n"                                                         \
    "maxnum_catfeature_query_per_table_per_sample = 1, 1\n"                                        \
    "\n\n"
#define RM_WORKER_BODY "; worker settings\n[worker]\nhttp_port = 8000\n"
#define RM_C                                                                                       \
    "[model.c]\n"                                                                                  \
    "sparse_files = /c\n"                                                                          \
    "embedding_vecsize_per_table = 4\n"                                                            \
    "maxnum_catfeature_query_per_table_per_sample = 2\n"                                           \
    "; end of file\n"

static const char rm_text[] = RM_HEAD RM_A RM_B RM_WORKER_BODY "\n" RM_C;

/* Exactly the section's lines go; every other byte stays. */
static void test_remove_model(void **state)
{
    (void)state;
    remove_ok(rm_text, "model.a", RM_HEAD RM_B RM_WORKER_BODY "\n" RM_C);
    remove_ok(rm_text, "model.b", RM_HEAD RM_A RM_WORKER_BODY "\n" RM_C);
    /* The last section: the blank lines before it go too. */
    remove_ok(rm_text, "model.c", RM_HEAD RM_A RM_B RM_WORKER_BODY);
    /* A global section; its keys take their defaults. */
    remove_ok(rm_text, "worker", RM_HEAD RM_A RM_B RM_C);
    /* The first section, with a comment block directly above it. */
    remove_ok("; HPS config\n[hps]\nlog_level = info\n\n" CT_MODEL, "hps", CT_MODEL);
    /* The models that stay load with their values. */
    char *out = NULL, err[512];
    assert_int_equal(hps_conf_remove_section(rm_text, "t.ini", "model.b", &out, err, sizeof(err)),
                     0);
    hps_conf_t *c = ct_load(out);
    assert_int_equal(c->num_models, 2);
    assert_string_equal(c->models[0].name, "a");
    assert_string_equal(c->models[1].name, "c");
    assert_int_equal(c->models[1].embedding_vecsize_per_table[0], 4);
    assert_int_equal(c->worker.http_port, 8000);
    hps_conf_free(c);
    free(out);
    /* CRLF lines: blank lines with '\r' are blank. */
    remove_ok("[hps]\r\nlog_level = info\r\n\r\n[model.m]\r\nsparse_files = /a\r\n"
              "embedding_vecsize_per_table = 8\r\n"
              "maxnum_catfeature_query_per_table_per_sample = 1\r\n\r\n; w\r\n[worker]\r\n",
              "model.m", "[hps]\r\nlog_level = info\r\n\r\n; w\r\n[worker]\r\n");
}

/* Removing the only model leaves a valid configuration without models. */
static void test_remove_only_model(void **state)
{
    (void)state;
    remove_ok("[hps]\nlog_level = info\n\n" CT_MODEL, "model.m", "[hps]\nlog_level = info\n");
    remove_ok(CT_MODEL, "model.m", "");
    char *out = NULL, err[256];
    assert_int_equal(hps_conf_remove_section(CT_MODEL, "t.ini", "model.m", &out, err, sizeof(err)),
                     0);
    hps_conf_t *c = ct_load(out);
    assert_int_equal(c->num_models, 0);
    hps_conf_free(c);
    free(out);
}

static void test_remove_errors(void **state)
{
    char *out = (char *)"untouched", err[256];
    (void)state;
    remove_fails(rm_text, "model.zz", HPS_ENOTFOUND,
                 "t.ini: no section [model.zz] (the models are a, b, c)");
    remove_fails("[hps]\n", "model.m", HPS_ENOTFOUND,
                 "t.ini: no section [model.m] (there is no model)");
    remove_fails("[hps]\n", "worker", HPS_ENOTFOUND, "t.ini: no section [worker]");
    remove_fails(rm_text, "nosuch", HPS_ENOTFOUND, "[nosuch]: unknown section");
    remove_fails(rm_text, "model.x y", HPS_ENOTFOUND,
                 "[model.x y]: no such section (a model name matches [A-Za-z0-9_-]{1,120})");
    /* A structurally broken file is not edited. */
    remove_fails("[hps]\nbogus = 1\n" CT_MODEL, "model.m", HPS_ECONFIG,
                 "t.ini:2: [hps] bogus = 1: unknown key");
    assert_int_equal(hps_conf_remove_section(NULL, "t.ini", "model.m", &out, err, sizeof(err)),
                     HPS_EINVAL);
    assert_int_equal(hps_conf_remove_section(CT_MODEL, "t.ini", NULL, &out, err, sizeof(err)),
                     HPS_EINVAL);
    assert_string_equal(out, "untouched");
}

/* ---- Files ---------------------------------------------------------------------- */

struct tmp {
    char dir[64];
    char *path;
};

static void tmp_write(struct tmp *t, const char *text, mode_t mode)
{
    strcpy(t->dir, "/tmp/hps-conf-edit-XXXXXX");
    assert_non_null(mkdtemp(t->dir));
    t->path = ct_fmt("%s/hps.ini", t->dir);
    FILE *f = fopen(t->path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(chmod(t->path, mode), 0);
}

static int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;

    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static void tmp_remove(struct tmp *t)
{
    unlink(t->path);
    char *link = ct_fmt("%s/link.ini", t->dir);
    unlink(link);
    free(link);
    rmdir(t->dir);
    free(t->path);
}

static void test_set_file_keeps_mode_and_is_atomic(void **state)
{
    struct tmp t;
    struct stat st;
    char err[512];
    (void)state;
    tmp_write(&t, base, 0640);
    assert_int_equal(hps_conf_set_file(t.path, "hps.log_level", "debug", err, sizeof(err)), 0);
    char *text = ct_read_file(t.path);
    assert_non_null(strstr(text, "\nlog_level = debug   ; how chatty\n"));
    assert_int_equal(stat(t.path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0640);
    assert_int_equal(dir_entries(t.dir), 1); /* no temporary file left */
    hps_conf_t *c = NULL;
    assert_int_equal(hps_conf_load(t.path, &c, err, sizeof(err)), 0);
    assert_int_equal(c->hps.log_level, HPS_LOG_DEBUG);
    hps_conf_free(c);
    free(text);
    tmp_remove(&t);
}

static void test_set_file_invalid_leaves_file_unchanged(void **state)
{
    struct tmp t;
    struct stat before, after;
    char err[512];
    (void)state;
    tmp_write(&t, base, 0600);
    assert_int_equal(stat(t.path, &before), 0);
    assert_int_equal(
        hps_conf_set_file(t.path, "volatile_db.shared_memory_mode", "0999", err, sizeof(err)),
        HPS_ECONFIG);
    char *msg = ct_fmt("%s:10: [volatile_db] shared_memory_mode = 0999: must be an octal mode in "
                       "[0600, 0777]",
                       t.path);
    assert_string_equal(err, msg);
    assert_int_equal(hps_conf_set_file(t.path, "hps.nope", "1", err, sizeof(err)), HPS_ENOTFOUND);
    char *text = ct_read_file(t.path);
    assert_string_equal(text, base); /* byte for byte */
    assert_int_equal(stat(t.path, &after), 0);
    assert_true(before.st_ino == after.st_ino);
    assert_true(before.st_mtim.tv_sec == after.st_mtim.tv_sec &&
                before.st_mtim.tv_nsec == after.st_mtim.tv_nsec);
    assert_int_equal(dir_entries(t.dir), 1);
    free(text);
    free(msg);
    tmp_remove(&t);
}

static void test_set_file_follows_symlink(void **state)
{
    struct tmp t;
    struct stat st;
    char err[512];
    (void)state;
    tmp_write(&t, "[hps]\n", 0644);
    char *link = ct_fmt("%s/link.ini", t.dir);
    assert_int_equal(symlink(t.path, link), 0);
    assert_int_equal(hps_conf_set_file(link, "worker.http_port", "8080", err, sizeof(err)), 0);
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    char *text = ct_read_file(t.path);
    assert_string_equal(text, "[hps]\n\n[worker]\nhttp_port = 8080\n");
    free(text);
    free(link);
    tmp_remove(&t);
}

static void test_set_file_errors(void **state)
{
    char err[512];
    (void)state;
    assert_int_equal(
        hps_conf_set_file("/nonexistent/dir/hps.ini", "hps.log_level", "info", err, sizeof(err)),
        -ENOENT);
    assert_string_equal(err, "cannot read /nonexistent/dir/hps.ini: No such file or directory");
    assert_int_equal(hps_conf_set_file(NULL, "hps.log_level", "info", err, sizeof(err)),
                     HPS_EINVAL);
    if (geteuid() != 0) { /* root writes anywhere */
        struct tmp t;
        tmp_write(&t, "[hps]\n", 0644);
        assert_int_equal(chmod(t.dir, 0555), 0);
        assert_int_equal(hps_conf_set_file(t.path, "hps.log_level", "warn", err, sizeof(err)),
                         -EACCES);
        chmod(t.dir, 0755);
        char *text = ct_read_file(t.path);
        assert_string_equal(text, "[hps]\n");
        free(text);
        tmp_remove(&t);
    }
}

/* Several edits of a file: one atomic write, mode kept; a new model loads. */
static void test_edit_file_new_model(void **state)
{
    struct tmp t;
    struct stat st;
    char err[512];
    (void)state;
    tmp_write(&t, base, 0640);
    assert_int_equal(
        hps_conf_edit_file(t.path, new_model_edits, NEDITS(new_model_edits), err, sizeof(err)), 0);
    char *text = ct_read_file(t.path);
    assert_string_equal(text, base_debug_with_n);
    assert_int_equal(stat(t.path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0640);
    assert_int_equal(dir_entries(t.dir), 1);
    hps_conf_t *c = NULL;
    assert_int_equal(hps_conf_load(t.path, &c, err, sizeof(err)), 0);
    assert_non_null(hps_conf_model_find(c, "n"));
    hps_conf_free(c);
    free(text);
    tmp_remove(&t);
}

/* Edits of one file by several processes at once (hps-conf set run in
 * parallel): each adds its own model, none is lost (each edit holds the
 * file's lock from its read to its rename; before, most were lost). */
static void test_edit_file_concurrent(void **state)
{
    enum { PROCS = 12 };
    struct tmp t;
    char err[512];
    (void)state;
    tmp_write(&t, base, 0640);
    pid_t kids[PROCS];
    for (int i = 0; i < PROCS; i++) {
        kids[i] = fork();
        assert_true(kids[i] >= 0);
        if (kids[i] == 0) {
            char k1[64], k2[64], k3[96];
            snprintf(k1, sizeof(k1), "model.x%d.sparse_files", i);
            snprintf(k2, sizeof(k2), "model.x%d.embedding_vecsize_per_table", i);
            snprintf(k3, sizeof(k3), "model.x%d.maxnum_catfeature_query_per_table_per_sample", i);
            const hps_conf_edit_t e[] = {{k1, "/m/x"}, {k2, "4"}, {k3, "1"}};
            _exit(hps_conf_edit_file(t.path, e, 3, err, sizeof(err)) == 0 ? 0 : 1);
        }
    }
    for (int i = 0; i < PROCS; i++) {
        int st = -1;
        assert_int_equal(waitpid(kids[i], &st, 0), kids[i]);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    hps_conf_t *c = NULL;
    assert_int_equal(hps_conf_load(t.path, &c, err, sizeof(err)), 0);
    int found = 0;
    for (int i = 0; i < PROCS; i++) {
        char name[16];
        snprintf(name, sizeof(name), "x%d", i);
        found += hps_conf_model_find(c, name) != NULL;
    }
    assert_int_equal(found, PROCS);
    hps_conf_free(c);
    assert_int_equal(dir_entries(t.dir), 1); /* no temporary file left */
    tmp_remove(&t);
}

/* Refused edits and removals leave the file as it was: same bytes, inode, mtime. */
static void test_edit_file_refused_leaves_file_unchanged(void **state)
{
    const hps_conf_edit_t incomplete[] = {{"model.n.sparse_files", "/x"},
                                          {"model.n.embedding_vecsize_per_table", "8"}};
    const hps_conf_edit_t required[] = {{"model.m.sparse_files", NULL}};
    const hps_conf_edit_t notset[] = {{"hps.heartbeat_interval_ms", NULL}};
    struct tmp t;
    struct stat before, after;
    char err[512];
    (void)state;
    tmp_write(&t, base, 0600);
    assert_int_equal(stat(t.path, &before), 0);
    assert_int_equal(hps_conf_edit_file(t.path, incomplete, 2, err, sizeof(err)), HPS_ECONFIG);
    char *msg = ct_fmt("%s:19: [model.n] maxnum_catfeature_query_per_table_per_sample: missing "
                       "required key",
                       t.path);
    assert_string_equal(err, msg);
    free(msg);
    assert_int_equal(hps_conf_edit_file(t.path, required, 1, err, sizeof(err)), HPS_ECONFIG);
    assert_int_equal(hps_conf_edit_file(t.path, notset, 1, err, sizeof(err)), HPS_ENOTFOUND);
    assert_int_equal(hps_conf_remove_section_file(t.path, "model.zz", err, sizeof(err)),
                     HPS_ENOTFOUND);
    msg = ct_fmt("%s: no section [model.zz] (the models are m)", t.path);
    assert_string_equal(err, msg);
    free(msg);
    assert_int_equal(hps_conf_edit_file(t.path, NULL, 1, err, sizeof(err)), HPS_EINVAL);
    assert_int_equal(hps_conf_remove_section_file(t.path, NULL, err, sizeof(err)), HPS_EINVAL);
    char *text = ct_read_file(t.path);
    assert_string_equal(text, base);
    assert_int_equal(stat(t.path, &after), 0);
    assert_true(before.st_ino == after.st_ino);
    assert_true(before.st_mtim.tv_sec == after.st_mtim.tv_sec &&
                before.st_mtim.tv_nsec == after.st_mtim.tv_nsec);
    assert_int_equal(dir_entries(t.dir), 1);
    free(text);
    tmp_remove(&t);
}

static void test_remove_section_file(void **state)
{
    struct tmp t;
    struct stat st;
    char err[512];
    (void)state;
    tmp_write(&t, rm_text, 0604);
    assert_int_equal(hps_conf_remove_section_file(t.path, "model.b", err, sizeof(err)), 0);
    char *text = ct_read_file(t.path);
    assert_string_equal(text, RM_HEAD RM_A RM_WORKER_BODY "\n" RM_C);
    assert_int_equal(stat(t.path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0604);
    assert_int_equal(dir_entries(t.dir), 1);
    assert_int_equal(
        hps_conf_remove_section_file("/nonexistent/dir/hps.ini", "model.a", err, sizeof(err)),
        -ENOENT);
    free(text);
    tmp_remove(&t);
}

/* A model's section from another text: dst's goes, src's comes last. */
static void test_splice_section(void **state)
{
    char *out = NULL, err[512];
    const char *nb = "; new b\n"
                     "[model.b]\n"
                     "sparse_files = /nb1, /nb2\n"
                     "embedding_vecsize_per_table = 4, 4\n"
                     "maxnum_catfeature_query_per_table_per_sample = 1, 1\n";
    char src[1024];
    (void)state;
    snprintf(src, sizeof(src), "[hps]\nlog_level = warn\n\n%s", nb);
    /* replaced: the rest of dst byte for byte, its [hps] too */
    assert_int_equal(
        hps_conf_splice_section(rm_text, src, "t.ini", "model.b", &out, err, sizeof(err)), 0);
    char want[4096];
    snprintf(want, sizeof(want), "%s\n%s", RM_HEAD RM_A RM_WORKER_BODY "\n" RM_C, nb);
    assert_string_equal(out, want);
    hps_conf_t *c = ct_load(out);
    assert_int_equal(c->num_models, 3);
    assert_string_equal(c->models[2].name, "b");
    assert_int_equal(c->models[2].embedding_vecsize_per_table[1], 4);
    assert_int_equal(c->hps.log_level, HPS_LOG_INFO);
    hps_conf_free(c);
    free(out);
    /* added: dst without the section */
    assert_int_equal(
        hps_conf_splice_section(RM_HEAD RM_A, src, "t.ini", "model.b", &out, err, sizeof(err)), 0);
    snprintf(want, sizeof(want), "%s\n%s", RM_HEAD RM_A, nb);
    assert_string_equal(out, want);
    free(out);
    /* removed: src without it */
    assert_int_equal(
        hps_conf_splice_section(rm_text, "[hps]\n", "t.ini", "model.b", &out, err, sizeof(err)), 0);
    assert_string_equal(out, RM_HEAD RM_A RM_WORKER_BODY "\n" RM_C);
    free(out);
    /* a section that does not validate: refused, nothing returned */
    out = NULL;
    assert_int_equal(hps_conf_splice_section(rm_text, "[model.b]\nsparse_files = /x\n", "t.ini",
                                             "model.b", &out, err, sizeof(err)),
                     HPS_ECONFIG);
    assert_null(out);
    assert_non_null(strstr(err, "[model.b]"));
    assert_int_equal(
        hps_conf_splice_section(rm_text, src, "t.ini", "model", &out, err, sizeof(err)),
        HPS_ENOTFOUND);
}

/* hps_conf_read_file: the text hps_conf_load() would read, or its refusal. */
static void test_read_file(void **state)
{
    struct tmp t;
    char *text = NULL, err[512];
    (void)state;
    tmp_write(&t, rm_text, 0600);
    assert_int_equal(hps_conf_read_file(t.path, &text, err, sizeof(err)), 0);
    assert_string_equal(text, rm_text);
    free(text);
    tmp_remove(&t);
    tmp_write(&t, "[hps]\nlog_level = info\n", 0600);
    FILE *f = fopen(t.path, "a");
    assert_non_null(f);
    fputs("; x", f);
    fputc('\0', f);
    fputs("\n", f);
    fclose(f);
    text = NULL;
    assert_int_equal(hps_conf_read_file(t.path, &text, err, sizeof(err)), HPS_ECONFIG);
    assert_null(text);
    assert_non_null(strstr(err, ":3: the line contains a NUL byte"));
    tmp_remove(&t);
    assert_int_equal(hps_conf_read_file("/nonexistent/hps.ini", &text, err, sizeof(err)), -ENOENT);
}

/* hps_conf_strip_secrets: the password's line goes (its comment too), the
 * rest stays byte for byte; a text without one is copied. */
static void test_strip_secrets(void **state)
{
    static const char with[] = "[hps]\nlog_level = info ; a comment\n\n"
                               "[distributed_db]\ntype = redis_cluster\n"
                               "password = s3cret-pw ; the cluster's\n"
                               "address = 127.0.0.1:7000\n";
    static const char without[] = "[hps]\nlog_level = info ; a comment\n\n"
                                  "[distributed_db]\ntype = redis_cluster\n"
                                  "address = 127.0.0.1:7000\n";
    char *out = NULL, err[512];
    (void)state;
    assert_int_equal(hps_conf_strip_secrets(with, "t.ini", &out, err, sizeof(err)), 0);
    assert_string_equal(out, without);
    free(out);
    out = NULL;
    assert_int_equal(hps_conf_strip_secrets(without, "t.ini", &out, err, sizeof(err)), 0);
    assert_string_equal(out, without);
    free(out);
    out = NULL;
    assert_int_equal(hps_conf_strip_secrets("[nope]\n", "t.ini", &out, err, sizeof(err)),
                     HPS_ECONFIG);
    assert_null(out);
    assert_int_equal(hps_conf_strip_secrets(NULL, "t.ini", &out, err, sizeof(err)), HPS_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replace_keeps_layout),
        cmocka_unit_test(test_replace_multiline_value),
        cmocka_unit_test(test_add_key_and_section),
        cmocka_unit_test(test_edit_completes_file),
        cmocka_unit_test(test_invalid_edits),
        cmocka_unit_test(test_repair_bad_value),
        cmocka_unit_test(test_crlf_and_long_lists),
        cmocka_unit_test(test_many_new_model),
        cmocka_unit_test(test_many_single_and_repeated),
        cmocka_unit_test(test_many_errors),
        cmocka_unit_test(test_unset_takes_default),
        cmocka_unit_test(test_unset_refused),
        cmocka_unit_test(test_remove_model),
        cmocka_unit_test(test_remove_only_model),
        cmocka_unit_test(test_remove_errors),
        cmocka_unit_test(test_set_file_keeps_mode_and_is_atomic),
        cmocka_unit_test(test_set_file_invalid_leaves_file_unchanged),
        cmocka_unit_test(test_set_file_follows_symlink),
        cmocka_unit_test(test_set_file_errors),
        cmocka_unit_test(test_edit_file_new_model),
        cmocka_unit_test(test_edit_file_concurrent),
        cmocka_unit_test(test_edit_file_refused_leaves_file_unchanged),
        cmocka_unit_test(test_remove_section_file),
        cmocka_unit_test(test_splice_section),
        cmocka_unit_test(test_read_file),
        cmocka_unit_test(test_strip_secrets),
    };
    return cmocka_run_group_tests_name("conf-edit", tests, NULL, NULL);
}
