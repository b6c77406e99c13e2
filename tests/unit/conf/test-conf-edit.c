/*
 * test-conf-edit.c -- hps_conf_edit_string() and hps_conf_set_file(): edits
 * that keep comments, blank lines and order; validation before any write;
 * atomic replacement that keeps the file's mode.
 */
#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
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
    assert_int_equal(c->hps.log_level, HPS_CONF_LOG_DEBUG);
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
                       "[0400, 0777]",
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
        cmocka_unit_test(test_set_file_keeps_mode_and_is_atomic),
        cmocka_unit_test(test_set_file_invalid_leaves_file_unchanged),
        cmocka_unit_test(test_set_file_follows_symlink),
        cmocka_unit_test(test_set_file_errors),
    };
    return cmocka_run_group_tests_name("conf-edit", tests, NULL, NULL);
}
