/*
 * test-conf-parse.c -- file structure, exact error messages, cross-key rules,
 * the typed structs and the access API of the configuration module.
 */
#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conftest.h"

/* ---- Typed access ------------------------------------------------------------- */

static void test_empty_file_gives_defaults(void **state)
{
    (void)state;
    hps_conf_t *c = ct_load("");
    assert_true(c->hps.supportlonglong);
    assert_int_equal(c->hps.log_level, HPS_LOG_INFO);
    assert_int_equal(c->volatile_db.type, HPS_CONF_VDB_MULTI_PROCESS_HASH_MAP);
    assert_true(c->volatile_db.shared_memory_size == UINT64_C(16) << 30);
    assert_true(c->volatile_db.allocation_rate == UINT64_C(256) << 20);
    assert_true(c->volatile_db.overflow_margin == HPS_CONF_UNBOUNDED);
    assert_int_equal(c->volatile_db.overflow_policy, HPS_EVICT_RANDOM);
    assert_true(c->volatile_db.overflow_resolution_target == 0.8);
    assert_int_equal(c->volatile_db.shared_memory_mode, 0600);
    assert_string_equal(c->volatile_db.shared_memory_name, "hps");
    assert_int_equal(c->volatile_db.update_filters_len, 1);
    assert_string_equal(c->volatile_db.update_filters[0], ".+");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    assert_int_equal(c->volatile_db.num_partitions, cores > 16 ? 16 : cores);
    assert_int_equal(c->distributed_db.type, HPS_CONF_DDB_DISABLED);
    assert_string_equal(c->distributed_db.password, "");
    assert_int_equal(c->persistent_db.type, HPS_CONF_PDB_DISABLED);
    assert_int_equal(c->update_source.type, HPS_CONF_UPDATE_NONE);
    assert_int_equal(c->worker.http_port, 8000);
    assert_int_equal(c->num_models, 0);
    assert_null(c->models);
    assert_string_equal(c->source, "t.ini");
    hps_conf_free(c);
}

static void test_model_fields(void **state)
{
    (void)state;
    hps_conf_t *c = ct_load("[model.wdl]\n"
                            "sparse_files = /m/0, /m/1, /m/2\n"
                            "embedding_vecsize_per_table = 1, 16, 128\n"
                            "maxnum_catfeature_query_per_table_per_sample = 2, 26, 1\n"
                            "default_value_for_each_table = 0.5, -1, 0\n"
                            "deployed_device_list = 0, 3\n"
                            "embedding_cache_type = uvm\n"
                            "[model.dcn]\n"
                            "sparse_files = /d/0, /d/1\n"
                            "embedding_vecsize_per_table = 8, 8\n"
                            "maxnum_catfeature_query_per_table_per_sample = 1, 1\n");
    assert_int_equal(c->num_models, 2);
    const hps_conf_model_t *m = &c->models[0];
    assert_string_equal(m->name, "wdl");
    assert_int_equal(m->num_tables, 3);
    assert_int_equal(m->embedding_vecsize_per_table[2], 128);
    assert_int_equal(m->maxnum_catfeature_query_per_table_per_sample[1], 26);
    assert_true(m->default_value_for_each_table[0] == 0.5);
    assert_true(m->default_value_for_each_table[1] == -1.0);
    assert_string_equal(m->embedding_table_names[2], "sparse_embedding2");
    assert_string_equal(m->sparse_files[1], "/m/1");
    assert_int_equal(m->deployed_device_list_len, 2);
    assert_int_equal(m->deployed_device_list[1], 3);
    assert_int_equal(m->embedding_cache_type, HPS_CONF_CACHE_UVM);
    assert_true(m->gpucacheper == 0.2);
    assert_ptr_equal(hps_conf_model_find(c, "dcn"), &c->models[1]);
    assert_null(hps_conf_model_find(c, "nope"));
    assert_int_equal(c->models[1].num_tables, 2);
    hps_conf_free(c);
}

static void test_value_syntax(void **state)
{
    (void)state;
    hps_conf_t *c = ct_load("[volatile_db]\n"
                            "type = hash_map\n"
                            "shared_memory_size = 2 g\n"
                            "allocation_rate = 1048576B\n"
                            "overflow_policy = least_used\n"
                            "overflow_margin = 1000\n"
                            "shared_memory_mode = 640\n"
                            "update_filters = ^wdl$,  dcn_.*\n"
                            "num_partitions = 7\n"
                            "[hps]\n"
                            "supportlonglong = Off\n"
                            "log_level = warning\n"
                            "[update_source]\n"
                            "type = kafka\n"
                            "[persistent_db]\n"
                            "type = rocksdb\n"
                            "[distributed_db]\n"
                            "type = redis\n");
    assert_int_equal(c->volatile_db.type, HPS_CONF_VDB_MULTI_PROCESS_HASH_MAP);
    assert_true(c->volatile_db.shared_memory_size == UINT64_C(2) << 30);
    assert_true(c->volatile_db.allocation_rate == 1048576);
    assert_int_equal(c->volatile_db.overflow_policy, HPS_EVICT_LEAST_USED);
    assert_true(c->volatile_db.overflow_margin == 1000);
    assert_int_equal(c->volatile_db.shared_memory_mode, 0640);
    assert_int_equal(c->volatile_db.update_filters_len, 2);
    assert_string_equal(c->volatile_db.update_filters[1], "dcn_.*");
    assert_int_equal(c->volatile_db.num_partitions, 7);
    assert_false(c->hps.supportlonglong);
    assert_int_equal(c->hps.log_level, HPS_LOG_WARN);
    assert_int_equal(c->update_source.type, HPS_CONF_UPDATE_KAFKA);
    assert_int_equal(c->persistent_db.type, HPS_CONF_PDB_ROCKS_DB);
    assert_int_equal(c->distributed_db.type, HPS_CONF_DDB_REDIS_CLUSTER);
    hps_conf_free(c);
}

/* Values stored as fp32 stay finite (1e39 used to be served as Infinity,
 * which is not JSON), and refresh_delay stays within what the worker's
 * nanosecond timer holds (1e10 s overflowed it: the refresh ran at once). */
static void test_fp32_and_timer_ranges(void **state)
{
    (void)state;
    ct_load_fails(CT_MODEL "default_value_for_each_table = 1e39, 0\n",
                  "t.ini:5: [model.m] default_value_for_each_table = 1e39, 0: entry 1 (1e39) must "
                  "be a number in [-3.4028234663852886e+38, 3.4028234663852886e+38]");
    ct_load_fails(CT_MODEL "default_value_for_each_table = 0, -1e300\n",
                  "t.ini:5: [model.m] default_value_for_each_table = 0, -1e300: entry 2 (-1e300) "
                  "must be a number in [-3.4028234663852886e+38, 3.4028234663852886e+38]");
    ct_load_fails(CT_MODEL "refresh_delay = 1e10\n",
                  "t.ini:5: [model.m] refresh_delay = 1e10: must be a number in [0, 2147483647]");
    char err[256];
    hps_conf_t *c = NULL;
    const char *ok = CT_MODEL "default_value_for_each_table = 3.4e38, -3.4e38\n"
                              "refresh_delay = 2147483647\n";
    assert_int_equal(hps_conf_load_string(ok, "t.ini", &c, err, sizeof(err)), 0);
    assert_true(c->models[0].default_value_for_each_table[1] == -3.4e38);
    assert_true(c->models[0].refresh_delay == 2147483647.0);
    hps_conf_free(c);
}

/* overflow_policy is hps_overflow_policy_t: the INI names (HugeCTR's) are
 * hps_overflow_policy_name()'s, and every spelling parses to its constant. */
static void test_overflow_policy_names(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        hps_overflow_policy_t want;
    } cases[] = {{"evict_random", HPS_EVICT_RANDOM},
                 {"least_used", HPS_EVICT_LEAST_USED},
                 {"evict_least_used", HPS_EVICT_LEAST_USED},
                 {"oldest", HPS_EVICT_OLDEST},
                 {"evict_oldest", HPS_EVICT_OLDEST}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char text[160];
        snprintf(text, sizeof(text),
                 "[volatile_db]\noverflow_policy = %s\n[distributed_db]\noverflow_policy = %s\n",
                 cases[i].text, cases[i].text);
        hps_conf_t *c = ct_load(text);
        assert_int_equal(c->volatile_db.overflow_policy, cases[i].want);
        assert_int_equal(c->distributed_db.overflow_policy, cases[i].want);
        hps_conf_free(c);
    }
    assert_string_equal(hps_overflow_policy_name((hps_overflow_policy_t)3), "unknown");
#define OP_V(e, c, n) assert_string_equal(hps_overflow_policy_name(c), #n);
#define OP_A(e, c, n)
    HPS_CONF_ENUM_overflow_policy(OP_V, OP_A)
#undef OP_A
#undef OP_V
}

static void test_vdb_disabled_aliases(void **state)
{
    static const char *const names[] = {"disabled", "disable", "none"};
    (void)state;
    for (size_t i = 0; i < 3; i++) {
        char *t = ct_fmt("[volatile_db]\ntype = %s\ninitial_cache_rate = 0.5\n"
                         "cache_missed_embeddings = true\n",
                         names[i]);
        hps_conf_t *c = ct_load(t);
        assert_int_equal(c->volatile_db.type, HPS_CONF_VDB_DISABLED);
        /* disabled: the shared-memory volatile DB holds no rows of its own */
        assert_true(c->volatile_db.initial_cache_rate == 0.0);
        assert_false(c->volatile_db.cache_missed_embeddings);
        hps_conf_free(c);
        free(t);
    }
}

/* No ',' locale installed: compile de_DE.UTF-8 from the locale sources
 * (Debian's package locales) into a temporary directory with localedef,
 * and point glibc's LOCPATH there.  The directory's name, or NULL. */
static char *compile_comma_locale(void)
{
    static char dir[] = "/tmp/hps-test-locale-XXXXXX";
    char cmd[256];
    if (!mkdtemp(dir))
        return NULL;
    snprintf(cmd, sizeof(cmd), "localedef -i de_DE -f UTF-8 %s/de_DE.UTF-8 >/dev/null 2>&1", dir);
    if (system(cmd) == -1) /* localedef exits 1 for mere warnings: its output decides */
        return NULL;
    setenv("LOCPATH", dir, 1); /* read by each setlocale() */
    return dir;
}

/* Numbers use '.' even if the process switched to a ',' locale (skipped
 * where no such locale is installed nor can be compiled). */
static void test_numbers_ignore_process_locale(void **state)
{
    static const char *const locales[] = {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8",
                                          "ru_RU.UTF-8"};
    char buf[64], *made = NULL;
    (void)state;
    for (size_t i = 0; i < sizeof(locales) / sizeof(locales[0]); i++) {
        if (!setlocale(LC_NUMERIC, locales[i]) &&
            !(i == 0 && (made = compile_comma_locale()) && setlocale(LC_NUMERIC, locales[i])))
            continue;
        assert_true(strcmp(localeconv()->decimal_point, ",") == 0); /* the point of the test */
        hps_conf_t *c = ct_load("[volatile_db]\noverflow_resolution_target = 0.25\n");
        assert_true(c->volatile_db.overflow_resolution_target == 0.25);
        assert_string_equal(ct_get(c, "volatile_db.overflow_resolution_target", buf, sizeof(buf)),
                            "0.25");
        hps_conf_free(c);
        setlocale(LC_NUMERIC, "C");
        if (made) {
            snprintf(buf, sizeof(buf), "rm -rf %s", made);
            (void)!system(buf);
        }
        return;
    }
    print_message("# no locale with a ',' decimal point installed (de_DE, fr_FR or ru_RU), "
                  "and localedef could not compile one (package locales)\n");
    skip();
}

/* ---- Syntax --------------------------------------------------------------------- */

static void test_comments_blank_lines_colon_bom_crlf(void **state)
{
    (void)state;
    hps_conf_t *c = ct_load("\xEF\xBB\xBF; leading comment\r\n"
                            "# another\r\n"
                            "\r\n"
                            "[hps]   ; section comment\r\n"
                            "  heartbeat_interval_ms = 250\r\n"
                            "log_level: debug ; inline comment\r\n"
                            "worker_timeout_ms=3000\r\n");
    assert_int_equal(c->hps.log_level, HPS_LOG_DEBUG);
    assert_int_equal(c->hps.heartbeat_interval_ms, 250);
    assert_int_equal(c->hps.worker_timeout_ms, 3000);
    hps_conf_free(c);
}

static void test_continuation_lines(void **state)
{
    (void)state;
    hps_conf_t *c = ct_load("[model.m]\n"
                            "sparse_files = /a,\n"
                            "    /b\n"
                            "    ; a comment between\n"
                            "\n"
                            "    /c, ; a comment after an entry\n"
                            "\t/d\n"
                            "embedding_vecsize_per_table =\n"
                            "    1, 2, 3, 4\n"
                            "maxnum_catfeature_query_per_table_per_sample = 1, 1, 1, 1\n");
    assert_int_equal(c->models[0].num_tables, 4);
    assert_string_equal(c->models[0].sparse_files[3], "/d");
    assert_int_equal(c->models[0].embedding_vecsize_per_table[3], 4);
    hps_conf_free(c);
}

/* docs/configuration.md: lists may end in a comma, on one line or on the
 * last continuation line; host:port lists (address, brokers) are lists too.
 * These were refused ("entry 2 is empty", "must be a comma-separated list
 * of host:port", "only lists may continue"). */
static void test_trailing_comma(void **state)
{
    (void)state;
    hps_conf_t *c = ct_load("[distributed_db]\n"
                            "update_filters = a,\n"
                            "address = 10.0.0.1:7000,\n"
                            "    10.0.0.2:7000,\n"
                            "[update_source]\n"
                            "brokers = b:9092,\n"
                            "[model.m]\n"
                            "sparse_files = /a,\n"
                            "    /b,\n"
                            "embedding_vecsize_per_table = 4, 8,\n"
                            "maxnum_catfeature_query_per_table_per_sample = 1, 1\n");
    assert_int_equal(c->distributed_db.update_filters_len, 1);
    assert_string_equal(c->distributed_db.update_filters[0], "a");
    assert_string_equal(c->distributed_db.address, "10.0.0.1:7000, 10.0.0.2:7000");
    assert_string_equal(c->update_source.brokers, "b:9092");
    assert_int_equal(c->models[0].num_tables, 2);
    assert_int_equal(c->models[0].embedding_vecsize_per_table[1], 8);
    hps_conf_free(c);
    ct_load_fails("[distributed_db]\nupdate_filters = a,,b\n",
                  "t.ini:2: [distributed_db] update_filters = a,,b: entry 2 is empty (a comma "
                  "may end the list, but not start it nor follow another comma); must be a "
                  "comma-separated list of POSIX extended regular expressions");
    ct_load_fails("[distributed_db]\naddress = a:1,,b:2\n",
                  "t.ini:2: [distributed_db] address = a:1,,b:2: must be a comma-separated list "
                  "of host:port (port in [1, 65535]; IPv6 as [addr]:port)");
}

static void test_continuation_of_scalar_is_error(void **state)
{
    (void)state;
    ct_load_fails("[hps]\nlog_level = info\n  heartbeat_interval_ms = 5\n",
                  "t.ini:3: [hps] log_level: the indented line \"heartbeat_interval_ms = 5\" "
                  "continues the value of log_level, but only lists may continue on indented "
                  "lines (do not indent keys)");
}

/* Lines longer than inih's 200-byte buffer work, in every position. */
static void test_long_lines(void **state)
{
    char files[4096] = "", sizes[4096] = "", q[4096] = "";
    (void)state;
    for (int t = 0; t < 40; t++) {
        char one[64];
        snprintf(one, sizeof(one), "%s/models/a_rather_long_directory/table_%02d", t ? ", " : "",
                 t);
        strcat(files, one);
        strcat(sizes, t ? ", 1024" : "1024");
        strcat(q, t ? ", 1" : "1");
    }
    assert_true(strlen(files) > 1000);
    char *text = ct_fmt("; %0300d\n[model.m]   ; %0300d\nsparse_files = %s ; %0300d\n"
                        "embedding_vecsize_per_table = 1,\n    %s\n"
                        "maxnum_catfeature_query_per_table_per_sample = %s\n",
                        0, 0, files, 0, sizes + 6, q);
    hps_conf_t *c = ct_load(text);
    assert_int_equal(c->models[0].num_tables, 40);
    assert_string_equal(c->models[0].sparse_files[39], "/models/a_rather_long_directory/table_39");
    assert_int_equal(c->models[0].embedding_vecsize_per_table[0], 1);
    assert_int_equal(c->models[0].embedding_vecsize_per_table[39], 1024);
    hps_conf_free(c);
    free(text);

    /* A long line keeps its line number and its exact value in messages. */
    text = ct_fmt("[hps]\n\nlog_level = %0250d\n", 7);
    char *msg =
        ct_fmt("t.ini:3: [hps] log_level = %0250d: must be one of error, warn, info, debug", 7);
    ct_load_fails(text, msg);
    free(text);
    free(msg);
    text = ct_fmt("[hps]\n%0250d\n", 7);
    msg = ct_fmt("t.ini:2: syntax error: \"%080d\": expected \"key = value\", \"[section]\" or a "
                 "comment",
                 0);
    ct_load_fails(text, msg);
    free(text);
    free(msg);
}

static void test_syntax_errors(void **state)
{
    (void)state;
    ct_load_fails("[hps]\nlog_level info\n",
                  "t.ini:2: syntax error: \"log_level info\": expected \"key = value\", "
                  "\"[section]\" or a comment");
    ct_load_fails("[hps]\n[volatile_db\n",
                  "t.ini:2: syntax error: \"[volatile_db\": a section header needs a closing ']'");
    ct_load_fails("[hps] x\n", "t.ini:1: [hps]: unexpected text after ']'");
    /* The syntax error comes first, though a later line is wrong too. */
    ct_load_fails("[hps]\nlog_level info\nbogus = 1\n",
                  "t.ini:2: syntax error: \"log_level info\": expected \"key = value\", "
                  "\"[section]\" or a comment");
    /* HugeCTR's JSON configuration: the message says how to convert it. */
    ct_load_fails("{\n  \"supportlonglong\": true,\n  \"models\": []\n}\n",
                  "t.ini:1: \"{\": a JSON file (HugeCTR's ps.json?), not an INI "
                  "file: convert it with 'hps-conf import FILE.json > hps.ini'");
    /* Minified on one line it reads as "key: value" to inih: the same hint,
     * the line quoted as written (':' not rewritten as '='), cut at 40. */
    ct_load_fails("{\"supportlonglong\": true, \"models\": []}\n",
                  "t.ini:1: \"{\"supportlonglong\": true, \"models\": []}\": a JSON file "
                  "(HugeCTR's ps.json?), not an INI file: convert it with 'hps-conf import "
                  "FILE.json > hps.ini'");
    ct_load_fails(
        "\xEF\xBB\xBF\n  \n {\"supportlonglong\": true, \"models\": [{\"model\": \"m\"}]}",
        "t.ini:3: \"{\"supportlonglong\": true, \"models\": [{\"m...\": a JSON "
        "file (HugeCTR's ps.json?), not an INI file: convert it with 'hps-conf "
        "import FILE.json > hps.ini'");
    /* [volatile_db] type = redis_cluster (HugeCTR's): where Redis goes here. */
    ct_load_fails("[volatile_db]\ntype = redis_cluster\n",
                  "t.ini:2: [volatile_db] type = redis_cluster: must be one of disabled, "
                  "multi_process_hash_map; a Redis Cluster is [distributed_db] type = "
                  "redis_cluster here (HugeCTR configured it as its volatile_db)");
    ct_load_fails("log_level = info\n",
                  "t.ini:1: log_level = info: key outside of any section (add a [section] line "
                  "above)");
}

/* ---- Structure errors ------------------------------------------------------------ */

/* The example of the issue, verbatim. */
static void test_issue_example_message(void **state)
{
    char err[256];
    hps_conf_t *c = NULL;
    (void)state;
    const char *text = "; HPS\n\n[hps]\nlog_level = info\n\n[volatile_db]\n"
                       "type = multi_process_hash_map\n; sizes\nshared_memory_size = 1GiB\n"
                       "allocation_rate = 64MiB\n\noverflow_resolution_target = 1.5\n";
    assert_int_equal(hps_conf_load_string(text, "hps.ini", &c, err, sizeof(err)), HPS_ECONFIG);
    assert_string_equal(err, "hps.ini:12: [volatile_db] overflow_resolution_target = 1.5: must be "
                             "a number in (0, 1]");
    assert_null(c);
}

static void test_unknown_keys_and_sections(void **state)
{
    (void)state;
    ct_load_fails("[hps]\nlog_levl = debug\n",
                  "t.ini:2: [hps] log_levl = debug: unknown key (did you mean log_level?)");
    ct_load_fails("[worker]\npath = /x\n",
                  "t.ini:2: [worker] path = /x: unknown key (path belongs in [persistent_db])");
    ct_load_fails("[model.m]\nhttp_threads = 4\n",
                  "t.ini:2: [model.m] http_threads = 4: unknown key (http_threads belongs in "
                  "[worker])");
    ct_load_fails("[hps]\nfuse_embedding_table = true\n",
                  "t.ini:2: [hps] fuse_embedding_table = true: unknown key");
    ct_load_fails("[hps]\n[volatile]\n",
                  "t.ini:2: [volatile]: unknown section (did you mean volatile_db?); the sections "
                  "are hps, volatile_db, distributed_db, persistent_db, update_source, worker, "
                  "model.<name>");
    ct_load_fails("[bogus]\n",
                  "t.ini:1: [bogus]: unknown section; the sections are hps, volatile_db, "
                  "distributed_db, persistent_db, update_source, worker, model.<name>");
    ct_load_fails("[model]\n", "t.ini:1: [model]: a model section needs a name: [model.<name>]");
    ct_load_fails("[model.a b]\n",
                  "t.ini:1: [model.a b]: the model name must match [A-Za-z0-9_-]{1,120}");
    ct_load_fails("[model.]\n", "t.ini:1: [model.]: the model name must match "
                                "[A-Za-z0-9_-]{1,120}");
}

/* A secret's value (show masks it) is masked in every message too: the
 * coordinator logs them. */
static void test_secret_values_masked(void **state)
{
    (void)state;
    ct_load_fails("[distributed_db]\npassword = x\npassword = s3cret\n",
                  "t.ini:3: [distributed_db] password = ********: duplicate key (first set at "
                  "line 2)");
    ct_load_fails("[distributed_db]\npasword = s3cret\n",
                  "t.ini:2: [distributed_db] pasword = ********: unknown key (did you mean "
                  "password?)");
    ct_load_fails("[volatile_db]\npassword = s3cret\n",
                  "t.ini:2: [volatile_db] password = ********: unknown key (password belongs in "
                  "[distributed_db])");
    ct_load_fails("password = s3cret\n[distributed_db]\n",
                  "t.ini:1: password = ********: key outside of any section (add a [section] "
                  "line above)");
    ct_load_fails("[distributed_db]\npassword = s3cret\n  more\n",
                  "t.ini:3: [distributed_db] password: the indented line \"********\" continues "
                  "the value of password, but only lists may continue on indented lines (do not "
                  "indent keys)");
    /* an empty value hides nothing; other keys are shown as written */
    ct_load_fails("[distributed_db]\npassword =\npassword =\n",
                  "t.ini:3: [distributed_db] password = : duplicate key (first set at line 2)");
    ct_load_fails("[distributed_db]\nuser_name = a\nuser_name = b\n",
                  "t.ini:3: [distributed_db] user_name = b: duplicate key (first set at line 2)");
}

static void test_duplicates(void **state)
{
    (void)state;
    ct_load_fails("[hps]\nlog_level = info\nlog_level = warn\n",
                  "t.ini:3: [hps] log_level = warn: duplicate key (first set at line 2)");
    ct_load_fails("[hps]\n\n[worker]\n[hps]\n",
                  "t.ini:4: [hps]: duplicate section (first at line 1)");
    ct_load_fails(CT_MODEL CT_MODEL, "t.ini:5: [model.m]: duplicate section (first at line 1)");
}

static void test_required_keys(void **state)
{
    (void)state;
    ct_load_fails("[hps]\n\n[model.m]\nembedding_vecsize_per_table = 8\n",
                  "t.ini:3: [model.m] sparse_files: missing required key");
    ct_load_fails("[model.m]\nsparse_files = /a\n",
                  "t.ini:1: [model.m] embedding_vecsize_per_table: missing required key");
    ct_load_fails("[model.m]\nsparse_files = /a\nembedding_vecsize_per_table = 8\n",
                  "t.ini:1: [model.m] maxnum_catfeature_query_per_table_per_sample: missing "
                  "required key");
}

static void test_list_length_mismatch(void **state)
{
    (void)state;
    ct_load_fails("[model.m]\n"
                  "sparse_files = /a, /b, /c\n"
                  "embedding_vecsize_per_table = 8, 16\n"
                  "maxnum_catfeature_query_per_table_per_sample = 1, 1, 1\n",
                  "t.ini:3: [model.m] embedding_vecsize_per_table = 8, 16: has 2 entries, but "
                  "sparse_files has 3 (one per table)");
    ct_load_fails("[model.m]\n"
                  "sparse_files = /a, /b\n"
                  "embedding_vecsize_per_table = 8, 16\n"
                  "maxnum_catfeature_query_per_table_per_sample = 1, 1\n"
                  "embedding_table_names = x, y, z\n",
                  "t.ini:5: [model.m] embedding_table_names = x, y, z: has 3 entries, but "
                  "sparse_files has 2 (one per table)");
}

static void test_model_limit(void **state)
{
    char *text = strdup("");
    (void)state;
    for (int i = 0; i <= HPS_CONF_MAX_MODELS; i++) {
        char *t = ct_fmt("%s[model.m%d]\nsparse_files = /a\nembedding_vecsize_per_table = 4\n"
                         "maxnum_catfeature_query_per_table_per_sample = 1\n",
                         text, i);
        free(text);
        text = t;
        if (i == HPS_CONF_MAX_MODELS - 1) {
            hps_conf_t *c = ct_load(text);
            assert_int_equal(c->num_models, HPS_CONF_MAX_MODELS);
            hps_conf_free(c);
        }
    }
    ct_load_fails(text, "t.ini:257: [model.m64]: too many models (at most 64)");
    free(text);
}

/* A model section of n tables (sparse_files on its second line). */
static char *model_of(const char *name, int n)
{
    char *dirs = strdup(""), *ones = strdup("");
    for (int i = 0; i < n; i++) {
        char *d = ct_fmt("%s%s/t%d", dirs, i ? ", " : "", i),
             *o = ct_fmt("%s%s1", ones, i ? ", " : "");
        free(dirs);
        free(ones);
        dirs = d;
        ones = o;
    }
    char *t = ct_fmt("[model.%s]\nsparse_files = %s\nembedding_vecsize_per_table = %s\n"
                     "maxnum_catfeature_query_per_table_per_sample = %s\n",
                     name, dirs, ones, ones);
    free(dirs);
    free(ones);
    return t;
}

/* The volatile DB holds 256 tables: a file whose models have more is
 * refused here, not by a coordinator that has loaded the first models. */
static void test_table_limit(void **state)
{
    (void)state;
    char *a = model_of("a", 200), *b = model_of("b", 56), *c57 = model_of("b", 57);
    char *ok = ct_fmt("%s%s", a, b), *bad = ct_fmt("%s%s", a, c57), *one = model_of("big", 257);
    hps_conf_t *c = ct_load(ok);
    assert_int_equal(c->models[0].num_tables + c->models[1].num_tables, HPS_CONF_MAX_TABLES);
    hps_conf_free(c);
    ct_load_fails(bad, "t.ini:6: [model.b] sparse_files: 57 tables, 257 with the models above "
                       "it: the models of a file may have at most 256 tables in all (the "
                       "volatile DB's table directory)");
    ct_load_fails(one, "t.ini:2: [model.big] sparse_files: 257 tables: the models of a file may "
                       "have at most 256 tables in all (the volatile DB's table directory)");
    free(a);
    free(b);
    free(c57);
    free(ok);
    free(bad);
    free(one);
}

static void test_model_name_length(void **state)
{
    char name[122];
    (void)state;
    memset(name, 'n', 120);
    name[120] = '\0';
    char *text = ct_fmt("[model.%s]\nsparse_files = /a\nembedding_vecsize_per_table = 4\n"
                        "maxnum_catfeature_query_per_table_per_sample = 1\n",
                        name);
    hps_conf_t *c = ct_load(text);
    assert_string_equal(c->models[0].name, name);
    hps_conf_free(c);
    free(text);
    strcat(name, "n");
    text = ct_fmt("[model.%s]\n", name);
    char *msg = ct_fmt("t.ini:1: [model.%s]: the model name must match [A-Za-z0-9_-]{1,120}", name);
    ct_load_fails(text, msg);
    free(text);
    free(msg);
}

/* ---- Cross-key rules -------------------------------------------------------------- */

static void test_cross_key_rules(void **state)
{
    (void)state;
    /* Only num_partitions is set: it is the key at fault for the user, and
     * num_node_connections' value is its default (it used to blame
     * "num_node_connections = 5", a key the file does not have). */
    ct_load_fails("[distributed_db]\nnum_partitions = 4\n",
                  "t.ini:2: [distributed_db] num_partitions = 4: must be an integer in [1, 256] "
                  "and at least num_node_connections (5, its default: the file does not set "
                  "num_node_connections)");
    ct_load_fails("[distributed_db]\ntype = redis_cluster\nnum_partitions = 2\n",
                  "t.ini:3: [distributed_db] num_partitions = 2: must be an integer in [1, 256] "
                  "and at least num_node_connections (5, its default: the file does not set "
                  "num_node_connections)");
    ct_load_fails("[distributed_db]\nnum_node_connections = 9\nnum_partitions = 8\n",
                  "t.ini:2: [distributed_db] num_node_connections = 9: must be an integer in "
                  "[1, 256] and at most num_partitions (8)");
    ct_load_fails("[distributed_db]\nnum_node_connections = 9\n",
                  "t.ini:2: [distributed_db] num_node_connections = 9: must be an integer in "
                  "[1, 256] and at most num_partitions (8, its default: the file does not set "
                  "num_partitions)");
    /* the smallest segment a coordinator starts with: the miss queue alone
     * takes 4 MiB (shmdb), so 2 MiB failed at start-up */
    ct_load_fails("[volatile_db]\nshared_memory_size = 2MiB\n",
                  "t.ini:2: [volatile_db] shared_memory_size = 2MiB: must be a size in [5MiB, "
                  "1TiB] (units B, KiB, MiB, GiB, TiB)");
    ct_load_fails("[volatile_db]\nshared_memory_size = 5242879\n",
                  "t.ini:2: [volatile_db] shared_memory_size = 5242879: must be a size in "
                  "[5MiB, 1TiB] (units B, KiB, MiB, GiB, TiB)");
    /* An SI unit is named, with the binary unit to write instead. */
    ct_load_fails("[volatile_db]\nshared_memory_size = 79MB\n",
                  "t.ini:2: [volatile_db] shared_memory_size = 79MB: must be a size in [5MiB, "
                  "1TiB] (units B, KiB, MiB, GiB, TiB); \"MB\" is not one of the units (sizes are "
                  "binary: 79MiB is 79 x 2^20 bytes; SI units such as MB = 10^6 bytes are not "
                  "accepted)");
    ct_load_fails("[worker]\nmax_body_size = 2 gb\n",
                  "t.ini:2: [worker] max_body_size = 2 gb: must be a size of at least 1KiB (units "
                  "B, KiB, MiB, GiB, TiB); \"gb\" is not one of the units (sizes are binary: 2GiB "
                  "is 2 x 2^30 bytes; SI units such as GB = 10^9 bytes are not accepted)");
    ct_load_fails("[volatile_db]\nshared_memory_size = 64XiB\n",
                  "t.ini:2: [volatile_db] shared_memory_size = 64XiB: must be a size in [5MiB, "
                  "1TiB] (units B, KiB, MiB, GiB, TiB); \"XiB\" is not one of the units");
    /* Sizes and margins have no upper bound of their own: past 2^64 - 1,
     * the message states the largest value accepted. */
    ct_load_fails("[volatile_db]\nshared_memory_size = 16777216TiB\n",
                  "t.ini:2: [volatile_db] shared_memory_size = 16777216TiB: must be a size in "
                  "[5MiB, 1TiB] (units B, KiB, MiB, GiB, TiB)");
    ct_load_fails("[worker]\nmax_body_size = 18446744073709551616\n",
                  "t.ini:2: [worker] max_body_size = 18446744073709551616: must be a size "
                  "of at least 1KiB (units B, KiB, MiB, GiB, TiB); 18446744073709551616 is too "
                  "large: the largest size accepted is 18446744073709551615 bytes (2^64 - 1, a "
                  "little under 16777216TiB)");
    ct_load_fails("[volatile_db]\noverflow_margin = 10000000000000000000000\n",
                  "t.ini:2: [volatile_db] overflow_margin = 10000000000000000000000: must be max "
                  "(unbounded) or an integer >= 1; 10000000000000000000000 is too large: the "
                  "largest integer accepted is 18446744073709551615 (2^64 - 1, the same as max)");
    ct_load_fails("[volatile_db]\noverflow_margin = 0\n",
                  "t.ini:2: [volatile_db] overflow_margin = 0: must be max (unbounded) or an "
                  "integer >= 1");
    ct_load_fails("[volatile_db]\nshared_memory_size = 128MiB\nallocation_rate = 256MiB\n",
                  "t.ini:3: [volatile_db] allocation_rate = 256MiB: must be a size in [64KiB, "
                  "1TiB] (units B, KiB, MiB, GiB, TiB) and at most shared_memory_size (128MiB)");
    /* a heartbeat at least every half worker_timeout_ms (a slower one made
     * a live coordinator look gone to the workers) */
    ct_load_fails("[hps]\nheartbeat_interval_ms = 60000\nworker_timeout_ms = 100\n",
                  "t.ini:2: [hps] heartbeat_interval_ms = 60000: must be an integer in [10, "
                  "60000] and at most half of worker_timeout_ms (100)");
    ct_load_fails("[hps]\nworker_timeout_ms = 150\n",
                  "t.ini:2: [hps] worker_timeout_ms = 150: must be an integer in [100, 600000] "
                  "and at least twice heartbeat_interval_ms (100, its default: the file does not "
                  "set heartbeat_interval_ms)");
    hps_conf_free(ct_load("[hps]\nheartbeat_interval_ms = 50\nworker_timeout_ms = 100\n"));
    ct_load_fails("[worker]\nmetrics_port = 8000\n",
                  "t.ini:2: [worker] metrics_port = 8000: must be an integer in [1, 65535] and "
                  "different from http_port (8000, its default: the file does not set "
                  "http_port)");
    ct_load_fails("[worker]\nhttp_port = 8002\n",
                  "t.ini:2: [worker] http_port = 8002: must be an integer in [1, 65535] and "
                  "different from metrics_port (8002, its default: the file does not set "
                  "metrics_port)");
    ct_load_fails("[model.m]\nsparse_files = /a, /b\nembedding_vecsize_per_table = 8, 16\n"
                  "maxnum_catfeature_query_per_table_per_sample = 1, 1\n"
                  "embedding_table_names = t, t\n",
                  "t.ini:5: [model.m] embedding_table_names = t, t: entry 2 (t) repeats entry 1; "
                  "table names must be unique");
    hps_conf_t *c = ct_load("[distributed_db]\nnum_partitions = 5\nnum_node_connections = 5\n");
    hps_conf_free(c);
    /* allocation_rate not set: its default (256 MiB) shrinks to a smaller
     * segment's size (one step commits it all) */
    c = ct_load("[volatile_db]\nshared_memory_size = 5MiB\n");
    assert_int_equal(c->volatile_db.allocation_rate, 5ull << 20);
    hps_conf_free(c);
    c = ct_load("[volatile_db]\nshared_memory_size = 256MiB\n");
    assert_int_equal(c->volatile_db.allocation_rate, 256ull << 20);
    hps_conf_free(c);
    c = ct_load("[volatile_db]\nshared_memory_size = 1GiB\n");
    assert_int_equal(c->volatile_db.allocation_rate, 256ull << 20);
    hps_conf_free(c);
}

/* ---- Access API ---------------------------------------------------------------------- */

static void test_get_and_is_set(void **state)
{
    char buf[64];
    bool set;
    (void)state;
    hps_conf_t *c = ct_load("[volatile_db]\nshared_memory_size = 5242880\nallocation_rate = 64K\n"
                            "[distributed_db]\npassword = secret\n" CT_MODEL);
    assert_string_equal(ct_get(c, "volatile_db.shared_memory_size", buf, sizeof(buf)), "5MiB");
    assert_string_equal(ct_get(c, "distributed_db.password", buf, sizeof(buf)), "secret");
    assert_string_equal(ct_get(c, "model.m.embedding_vecsize_per_table", buf, sizeof(buf)),
                        "8, 16");
    assert_int_equal(hps_conf_get(c, "volatile_db.nope", buf, sizeof(buf)), HPS_ENOTFOUND);
    assert_int_equal(hps_conf_get(c, "nope.type", buf, sizeof(buf)), HPS_ENOTFOUND);
    assert_int_equal(hps_conf_get(c, "model.x.gpucache", buf, sizeof(buf)), HPS_ENOTFOUND);
    assert_int_equal(hps_conf_get(c, "model.m", buf, sizeof(buf)), HPS_ENOTFOUND);
    assert_int_equal(hps_conf_get(c, "hps", buf, sizeof(buf)), HPS_ENOTFOUND);
    assert_int_equal(hps_conf_get(c, "volatile_db.type", buf, 5), -ERANGE);
    assert_string_equal(buf, "mult");
    assert_int_equal(hps_conf_get(c, "hps.log_level", buf, 0), HPS_EINVAL);
    assert_int_equal(hps_conf_get(NULL, "hps.log_level", buf, sizeof(buf)), HPS_EINVAL);
    assert_int_equal(hps_conf_is_set(c, "volatile_db.shared_memory_size", &set), 0);
    assert_true(set);
    assert_int_equal(hps_conf_is_set(c, "volatile_db.num_threads", &set), 0);
    assert_false(set);
    assert_int_equal(hps_conf_is_set(c, "model.m.sparse_files", &set), 0);
    assert_true(set);
    assert_int_equal(hps_conf_is_set(c, "worker.bogus", &set), HPS_ENOTFOUND);
    hps_conf_free(c);
}

static void test_bad_arguments(void **state)
{
    char err[64] = "x";
    hps_conf_t *c = (hps_conf_t *)(uintptr_t)1;
    (void)state;
    assert_int_equal(hps_conf_load_string(NULL, "t", &c, err, sizeof(err)), HPS_EINVAL);
    assert_int_equal(hps_conf_load_string("", "t", NULL, err, sizeof(err)), HPS_EINVAL);
    assert_int_equal(hps_conf_load(NULL, &c, err, sizeof(err)), HPS_EINVAL);
    assert_ptr_equal(c, (hps_conf_t *)(uintptr_t)1); /* untouched on failure */
    /* No error buffer at all is fine. */
    assert_int_equal(hps_conf_load_string("[x]\n", "t", &c, NULL, 0), HPS_ECONFIG);
    /* A short buffer gets a truncated, terminated message. */
    assert_int_equal(hps_conf_load_string("[x]\n", "t", &c, err, 8), HPS_ECONFIG);
    assert_string_equal(err, "t:1: [x");
    hps_conf_free(NULL);
    assert_null(hps_conf_model_find(NULL, "m"));
}

static void test_load_file(void **state)
{
    char dir[] = "/tmp/hps-conf-test-XXXXXX", err[512];
    hps_conf_t *c = NULL;
    (void)state;
    assert_non_null(mkdtemp(dir));
    char *path = ct_fmt("%s/hps.ini", dir);
    char *missing = ct_fmt("%s/missing.ini", dir);

    assert_int_equal(hps_conf_load(missing, &c, err, sizeof(err)), -ENOENT);
    char *msg = ct_fmt("cannot read %s: No such file or directory", missing);
    assert_string_equal(err, msg);
    assert_int_equal(hps_conf_load(dir, &c, err, sizeof(err)), -EISDIR);
    /* a device: /dev/zero used to be read until memory ran out */
    assert_int_equal(hps_conf_load("/dev/zero", &c, err, sizeof(err)), -ENODEV);
    assert_string_equal(err, "cannot read /dev/zero: a device, not a configuration file");

    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("[worker]\nhttp_port = 9000\n", f);
    fclose(f);
    assert_int_equal(hps_conf_load(path, &c, err, sizeof(err)), 0);
    assert_int_equal(c->worker.http_port, 9000);
    assert_string_equal(c->source, path);
    hps_conf_free(c);

    f = fopen(path, "w");
    static const char with_nul[] = "[worker]\nhttp_port = 9\0000\n";
    fwrite(with_nul, 1, sizeof(with_nul) - 1, f);
    fclose(f);
    assert_int_equal(hps_conf_load(path, &c, err, sizeof(err)), HPS_ECONFIG);
    char *nul = ct_fmt("%s:2: the line contains a NUL byte", path);
    assert_string_equal(err, nul);

    /* more than 16 MiB (of comment lines): refused, not parsed */
    f = fopen(path, "w");
    for (int i = 0; i < (16 << 20) / 64 + 1; i++)
        fprintf(f, "; %61d\n", i);
    fclose(f);
    assert_int_equal(hps_conf_load(path, &c, err, sizeof(err)), -EFBIG);
    char *big = ct_fmt("cannot read %s: larger than 16 MiB, not a configuration file", path);
    assert_string_equal(err, big);
    free(big);

    unlink(path);
    rmdir(dir);
    free(nul);
    free(msg);
    free(missing);
    free(path);
}

/* A FIFO as the configuration file: refused at once with the file named,
 * whether or not something holds it open for writing (open() used to wait
 * for a writer forever).  hps_conf_set_file() reads through the same path.
 * alarm() turns a regression into a failure instead of a hang. */
static void test_load_fifo(void **state)
{
    char dir[] = "/tmp/hps-conf-fifo-XXXXXX", err[512];
    hps_conf_t *c = NULL;
    (void)state;
    assert_non_null(mkdtemp(dir));
    char *path = ct_fmt("%s/hps.ini", dir);
    char *want = ct_fmt("cannot read %s: not a regular file (a FIFO)", path);
    assert_int_equal(mkfifo(path, 0644), 0);

    alarm(10);
    assert_int_equal(hps_conf_load(path, &c, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, want);
    assert_null(c);
    /* with a writer (O_RDWR does not wait on Linux) */
    int w = open(path, O_RDWR | O_CLOEXEC);
    assert_true(w >= 0);
    assert_int_equal(write(w, "[worker]\n", 9), 9);
    assert_int_equal(hps_conf_load(path, &c, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, want);
    close(w);
    assert_int_equal(hps_conf_set_file(path, "worker.http_port", "9000", err, sizeof(err)),
                     -EINVAL);
    assert_string_equal(err, want);
    alarm(0);

    unlink(path);
    rmdir(dir);
    free(want);
    free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_file_gives_defaults),
        cmocka_unit_test(test_model_fields),
        cmocka_unit_test(test_value_syntax),
        cmocka_unit_test(test_fp32_and_timer_ranges),
        cmocka_unit_test(test_vdb_disabled_aliases),
        cmocka_unit_test(test_overflow_policy_names),
        cmocka_unit_test(test_numbers_ignore_process_locale),
        cmocka_unit_test(test_comments_blank_lines_colon_bom_crlf),
        cmocka_unit_test(test_continuation_lines),
        cmocka_unit_test(test_trailing_comma),
        cmocka_unit_test(test_continuation_of_scalar_is_error),
        cmocka_unit_test(test_long_lines),
        cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_issue_example_message),
        cmocka_unit_test(test_unknown_keys_and_sections),
        cmocka_unit_test(test_duplicates),
        cmocka_unit_test(test_secret_values_masked),
        cmocka_unit_test(test_required_keys),
        cmocka_unit_test(test_list_length_mismatch),
        cmocka_unit_test(test_model_limit),
        cmocka_unit_test(test_table_limit),
        cmocka_unit_test(test_model_name_length),
        cmocka_unit_test(test_cross_key_rules),
        cmocka_unit_test(test_get_and_is_set),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_load_file),
        cmocka_unit_test(test_load_fifo),
    };
    return cmocka_run_group_tests_name("conf-parse", tests, NULL, NULL);
}
