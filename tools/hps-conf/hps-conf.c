/*
 * hps-conf -- check, show, query and edit HPS configuration files.
 *
 *   hps-conf check [--files] FILE|-
 *   hps-conf show FILE
 *   hps-conf get FILE SECTION.KEY
 *   hps-conf set FILE SECTION.KEY=VALUE...
 *   hps-conf unset FILE SECTION.KEY...
 *   hps-conf remove-model FILE NAME
 *   hps-conf doc [--format markdown|man]
 *   hps-conf import FILE.json [--pbtxt CONFIG.pbtxt]... [--strict]
 *
 * Exit status: 0 success, 1 invalid configuration or I/O failure, 2 usage;
 * import: 2 also for an input it cannot import, 3 for warnings with --strict.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "conf/tools.h"
#include "hps/modelfile.h"

enum { EXIT_OK = 0, EXIT_INVALID = 1, EXIT_USAGE = 2, EXIT_WARNINGS = 3 };

static const char usage_text[] =
    "Usage: hps-conf COMMAND [ARGS]\n"
    "Check, show, query and edit HPS configuration files (INI).\n"
    "\n"
    "Commands:\n"
    "  check [--files] FILE         validate FILE (- : standard input, read to its\n"
    "                               end; other pipes and FIFOs are refused, as\n"
    "                               hps-coordinator refuses them); errors go to\n"
    "                               stderr.  --files:\n"
    "                               also open every model's sparse_files (key and\n"
    "                               emb_vector present, regular, sized for the\n"
    "                               table's dimension) and read them (keys that fit\n"
    "                               a 32-bit model; NaN/Inf values and repeated keys,\n"
    "                               refused or warned about as nonfinite_values and\n"
    "                               duplicate_keys say), as hps-coordinator will\n"
    "  show FILE                    print the effective configuration: every key,\n"
    "                               those the file does not set marked \"; default\"\n"
    "  get FILE SECTION.KEY         print one effective value; a model's keys are\n"
    "                               model.<name>.KEY\n"
    "  set FILE SECTION.KEY=VALUE...\n"
    "                               change keys in place: comments, blank lines and\n"
    "                               order are kept, a missing key is added at the end of\n"
    "                               its section, a missing section at the end of FILE;\n"
    "                               all assignments are applied (in order), then the\n"
    "                               result is validated once and written atomically\n"
    "                               (same permissions); nothing is written if it is\n"
    "                               invalid.  A new model is several assignments to\n"
    "                               model.<name>.KEY, at least its required keys (see\n"
    "                               Examples)\n"
    "  unset FILE SECTION.KEY...    remove keys' lines (with their continuation lines),\n"
    "                               so that they take their defaults; a key FILE does\n"
    "                               not set is an error (2); validated and written as\n"
    "                               set (removing a required key is refused)\n"
    "  remove-model FILE NAME       remove the section [model.NAME]: its header, its\n"
    "                               lines up to the next section and the comment lines\n"
    "                               directly above its header; a comment block directly\n"
    "                               above the next section's header stays with that\n"
    "                               section; validated and written as set\n"
    "  doc [--format markdown|man]  print the reference of every key: markdown\n"
    "                               (docs/configuration.md), or the manual page\n"
    "                               hps.ini(5) in roff\n"
    "  import FILE.json [--pbtxt CONFIG.pbtxt]... [--strict]\n"
    "                               convert a HugeCTR HPS configuration (ps.json) and\n"
    "                               the Triton config.pbtxt files of its models (hps\n"
    "                               backend: parameters, name, instance_group gpus) to\n"
    "                               INI on standard output; the result is validated as\n"
    "                               `check` does.  Every input key that is not imported\n"
    "                               (no meaning here, obsolete, unknown) is listed on\n"
    "                               stderr as \"hps-conf: warning: FILE: KEY: reason\";\n"
    "                               --strict makes warnings fail (exit 3, no output)\n"
    "\n"
    "Options:\n"
    "  -h, --help                   show this help and exit\n"
    "  --version                    show the version and exit\n"
    "\n"
    "Examples:\n"
    "  Add the model n (its three required keys) in one edit, then remove it:\n"
    "\n"
    "    hps-conf set hps.ini model.n.sparse_files=/m/n/0,/m/n/1 \\\n"
    "        model.n.embedding_vecsize_per_table=16,8 \\\n"
    "        model.n.maxnum_catfeature_query_per_table_per_sample=2,1\n"
    "    hps-conf remove-model hps.ini n\n"
    "\n"
    "Exit status:\n"
    "  0  success (check: the file is valid; import: the INI was written, warnings\n"
    "     may have been printed on stderr)\n"
    "  1  the configuration is invalid (an unknown section or key in the file\n"
    "     included), or a file cannot be read or written\n"
    "  2  usage error: bad command line, or a section or key named on it that is\n"
    "     unknown (unset: a key the file does not set; remove-model: a model the file\n"
    "     lacks); import: an input that cannot be imported (not JSON or protobuf text,\n"
    "     a missing required key, a value of the wrong type or out of range, named\n"
    "     with its file and key)\n"
    "  3  import --strict: warnings were printed, nothing was written\n";

static int usage_error(const char *fmt, const char *arg)
{
    fputs("hps-conf: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\nTry 'hps-conf --help'.\n", stderr);
    return EXIT_USAGE;
}

/* Exit status of a library error; its message goes to stderr. */
static int failed(hps_err_t rc, const char *msg)
{
    fprintf(stderr, "hps-conf: %s\n", *msg ? msg : hps_strerror(rc));
    return rc == HPS_ENOTFOUND ? EXIT_USAGE : EXIT_INVALID;
}

static int load(const char *path, hps_conf_t **ret)
{
    char err[1024];
    hps_err_t rc = hps_conf_load(path, ret, err, sizeof(err));

    return rc ? failed(rc, err) : EXIT_OK;
}

/* Read model m's tables as hps-coordinator does before it loads them:
 * keys that fit a 32-bit model (supportlonglong = false), then NaN/Inf
 * values and keys on more than one row, refused or warned about as m's
 * nonfinite_values / duplicate_keys say.  Each refusal and warning on
 * stderr; the number of refusals. */
static size_t check_contents(const hps_conf_model_t *m, const hps_modelfile_spec_t *specs,
                             const char *path)
{
    unsigned refuse =
        (m->nonfinite_values == HPS_CONF_BAD_ROWS_REFUSE ? HPS_MODELFILE_NONFINITE : 0) |
        (m->duplicate_keys == HPS_CONF_BAD_ROWS_REFUSE ? HPS_MODELFILE_DUPLICATES : 0);
    char err[1024], what[768];
    size_t bad = 0;

    if (m->num_tables > 0 && specs[0].key_bytes == 4 &&
        hps_modelfile_validate_model(specs, m->num_tables, NULL, err, sizeof(err)) < 0) {
        fprintf(stderr, "hps-conf: %s: [model.%s] refused: %s\n", path, m->name, err);
        return 1;
    }
    for (size_t t = 0; t < m->num_tables; t++) {
        hps_modelfile_stats_t st = {0};
        hps_err_t rc =
            hps_modelfile_check_table(&specs[t], refuse, &st, NULL, NULL, err, sizeof(err));
        bool nf = st.nonfinite_rows > 0, dup = st.dup_keys > 0;
        if (rc < 0) {
            bool rnf = nf && (refuse & HPS_MODELFILE_NONFINITE);
            bool rdup = dup && (refuse & HPS_MODELFILE_DUPLICATES);
            fprintf(stderr, "hps-conf: %s: [model.%s] refused: %s%s%s%s%s\n", path, m->name, err,
                    rnf || rdup ? " (" : "", rnf ? "nonfinite_values = refuse" : "",
                    rnf && rdup ? ", " : "",
                    rdup  ? "duplicate_keys = refuse)"
                    : rnf ? ")"
                          : "");
            bad++;
        } else if (hps_modelfile_stats_format(&st, specs[t].dir,
                                              HPS_MODELFILE_NONFINITE | HPS_MODELFILE_DUPLICATES,
                                              what, sizeof(what))) {
            fprintf(stderr,
                    "hps-conf: %s: warning: [model.%s] table %s: %s; hps-coordinator loads%s%s%s "
                    "(%s%s%s = warn)\n",
                    path, m->name, specs[t].table, what,
                    nf ? " the rows with NaN or Inf as they are" : "", nf && dup ? " and" : "",
                    dup ? " the last row of each repeated key" : "", nf ? "nonfinite_values" : "",
                    nf && dup ? ", " : "", dup ? "duplicate_keys" : "");
        }
    }
    return bad;
}

/* Open every table of every model of conf (hps_modelfile_open: the files'
 * presence, kind and sizes), then read the contents of each model whose
 * tables all opened (check_contents); each refusal on stderr.  The number
 * of refusals. */
static size_t check_files(const hps_conf_t *conf, const char *path)
{
    size_t bad = 0;
    for (size_t i = 0; i < conf->num_models; i++) {
        const hps_conf_model_t *m = &conf->models[i];
        hps_modelfile_spec_t specs[256];
        size_t opened = 0;
        if (m->num_tables > 256) { /* hps-coordinator's limit (coordinator/load.c) */
            fprintf(stderr, "hps-conf: %s: [model.%s] has %zu tables, at most 256\n", path, m->name,
                    m->num_tables);
            bad++;
            continue;
        }
        for (size_t t = 0; t < m->num_tables; t++) {
            char err[HPS_PATH_MSG_MAX] = "";
            hps_err_t rc = hps_modelfile_check_open(
                m->sparse_files[t], (uint32_t)m->embedding_vecsize_per_table[t], err, sizeof(err));
            if (rc < 0) {
                char key[HPS_CONF_NAME_MAX + 32], where[HPS_CONF_NAME_MAX + 4200];
                snprintf(key, sizeof(key), "model.%s.sparse_files", m->name);
                fprintf(stderr, "hps-conf: %s entry %zu (%s): %s\n",
                        hps_conf_key_where(conf, key, where, sizeof(where)), t + 1,
                        m->sparse_files[t], *err ? err : hps_strerror(rc));
                bad++;
            } else {
                specs[t] =
                    (hps_modelfile_spec_t){.table = m->embedding_table_names[t],
                                           .dir = m->sparse_files[t],
                                           .dim = (uint32_t)m->embedding_vecsize_per_table[t],
                                           .key_bytes = conf->hps.supportlonglong ? 8 : 4};
                opened++;
            }
        }
        if (opened == m->num_tables)
            bad += check_contents(m, specs, path);
    }
    return bad;
}

/** Largest INI read from standard input: hps_conf_load()'s file limit. */
#define STDIN_MAX (16u << 20)

/*
 * `check -`: the INI from standard input, read to its end, for a pipe such
 * as `hps-conf import ps.json | hps-conf check -`.  hps_conf_load() refuses
 * FIFOs on purpose (a FIFO given as the coordinator's INI used to hang it);
 * here the user asked for standard input, so waiting for it is expected.
 * Messages name it <stdin>.
 */
static int load_stdin(hps_conf_t **ret)
{
    char err[1024], *text = NULL;
    size_t len = 0, cap = 0;

    for (;;) {
        if (len >= STDIN_MAX) {
            free(text);
            fprintf(stderr, "hps-conf: <stdin>: larger than %u MiB, not a configuration file\n",
                    STDIN_MAX >> 20);
            return EXIT_INVALID;
        }
        if (len + 1 >= cap) {
            cap = cap ? 2 * cap : 65536;
            char *n = realloc(text, cap);
            if (!n) {
                free(text);
                return failed(-ENOMEM, "");
            }
            text = n;
        }
        size_t n = fread(text + len, 1, cap - len - 1, stdin);
        len += n;
        if (n == 0)
            break;
    }
    if (ferror(stdin)) {
        int e = errno;
        free(text);
        fprintf(stderr, "hps-conf: cannot read <stdin>: %s\n", strerror(e));
        return EXIT_INVALID;
    }
    text[len] = '\0';
    const char *nul = memchr(text, '\0', len);
    if (nul) { /* as hps_conf_read_file() says it for a file */
        unsigned line = 1;
        for (const char *p = text; p < nul; p++)
            line += *p == '\n';
        free(text);
        fprintf(stderr, "hps-conf: <stdin>:%u: the line contains a NUL byte\n", line);
        return EXIT_INVALID;
    }
    hps_err_t rc = hps_conf_load_string(text, "<stdin>", ret, err, sizeof(err));
    free(text);
    return rc ? failed(rc, err) : EXIT_OK;
}

/* A note of hps_conf_notes: a warning of `check` (its exit status stays). */
static void print_note(void *ctx, const char *note)
{
    fprintf(stderr, "hps-conf: %s: warning: %s\n", (const char *)ctx, note);
}

static int cmd_check(const char *path, bool files)
{
    hps_conf_t *conf = NULL;
    bool in = strcmp(path, "-") == 0;
    int st = in ? load_stdin(&conf) : load(path, &conf);

    struct stat sb;
    if (in)
        path = "<stdin>";
    else if (st != EXIT_OK && stat(path, &sb) == 0 &&
             (S_ISFIFO(sb.st_mode) || S_ISSOCK(sb.st_mode)))
        fputs("hps-conf: to check standard input (a pipe), name it -: hps-conf check -\n", stderr);

    if (st == EXIT_OK && files && check_files(conf, path) > 0)
        st = EXIT_INVALID;
    if (st == EXIT_OK)
        hps_conf_notes(conf, print_note, (void *)path);
    if (st == EXIT_OK)
        printf("%s: OK%s\n", path, files ? " (model files too)" : "");
    hps_conf_free(conf);
    return st;
}

static int cmd_show(const char *path)
{
    hps_conf_t *conf = NULL;
    int st = load(path, &conf);

    if (st != EXIT_OK)
        return st;
    hps_err_t rc = hps_conf_show(conf, stdout);
    hps_conf_free(conf);
    return rc ? failed(rc, "cannot write to standard output") : EXIT_OK;
}

/* key is model.<name>.<key> and the file has no [model.<name>]: say so,
 * with the models it has (stderr), and return true. */
static bool missing_model(const hps_conf_t *conf, const char *path, const char *key)
{
    const char *name = key + strlen("model."), *dot = strrchr(key, '.');
    if (strncmp(key, "model.", strlen("model.")) != 0 || !dot || dot <= name)
        return false;
    char model[HPS_CONF_NAME_MAX + 1];
    snprintf(model, sizeof(model), "%.*s", (int)(dot - name), name);
    if (hps_conf_model_find(conf, model))
        return false;
    fprintf(stderr, "hps-conf: %s has no [model.%s]; its models:", path, model);
    for (size_t i = 0; i < conf->num_models; i++)
        fprintf(stderr, " %s", conf->models[i].name);
    fprintf(stderr, "%s\n", conf->num_models ? "" : " none");
    return true;
}

static int cmd_get(const char *path, const char *key)
{
    hps_conf_t *conf = NULL;
    size_t len = 4096;
    char *buf = NULL;
    hps_err_t rc = -ERANGE;
    int st = load(path, &conf);

    if (st != EXIT_OK)
        return st;
    while (rc == -ERANGE) {
        char *nb = realloc(buf, len *= 2);
        if (!nb) {
            rc = -ENOMEM;
            break;
        }
        buf = nb;
        rc = hps_conf_get(conf, key, buf, len);
    }
    if (rc == 0)
        printf("%s\n", buf);
    else if (rc == HPS_ENOTFOUND && missing_model(conf, path, key))
        st = EXIT_USAGE;
    else if (rc == HPS_ENOTFOUND)
        st = usage_error("unknown key \"%s\" (expected section.key or model.<name>.key)", key);
    else
        st = failed(rc, "");
    free(buf);
    hps_conf_free(conf);
    return st;
}

/* set FILE A=V...: argv holds the assignments (argc of them). */
static int cmd_set(const char *path, int argc, char **argv)
{
    char err[1024];
    hps_conf_edit_t *edits = calloc((size_t)argc, sizeof(*edits));
    int st = edits ? EXIT_OK : failed(-ENOMEM, "");

    for (int i = 0; i < argc && st == EXIT_OK; i++) {
        const char *eq = strchr(argv[i], '=');
        if (!eq || eq == argv[i]) {
            st = usage_error("set needs SECTION.KEY=VALUE, got \"%s\"", argv[i]);
            break;
        }
        edits[i].key = strndup(argv[i], (size_t)(eq - argv[i]));
        edits[i].value = eq + 1;
        if (!edits[i].key)
            st = failed(-ENOMEM, "");
    }
    if (st == EXIT_OK) {
        hps_err_t rc = hps_conf_edit_file(path, edits, (size_t)argc, err, sizeof(err));
        st = rc ? failed(rc, err) : EXIT_OK;
    }
    for (int i = 0; edits && i < argc; i++)
        free((char *)edits[i].key);
    free(edits);
    return st;
}

/* unset FILE KEY...: argv holds the keys (argc of them). */
static int cmd_unset(const char *path, int argc, char **argv)
{
    char err[1024];
    hps_conf_edit_t *edits = calloc((size_t)argc, sizeof(*edits));

    if (!edits)
        return failed(-ENOMEM, "");
    for (int i = 0; i < argc; i++)
        edits[i] = (hps_conf_edit_t){argv[i], NULL};
    hps_err_t rc = hps_conf_edit_file(path, edits, (size_t)argc, err, sizeof(err));
    free(edits);
    return rc ? failed(rc, err) : EXIT_OK;
}

static int cmd_remove_model(const char *path, const char *model)
{
    char err[1024];
    size_t n = strlen("model.") + strlen(model) + 1;
    char *section = malloc(n);

    if (!section)
        return failed(-ENOMEM, "");
    snprintf(section, n, "model.%s", model);
    hps_err_t rc = hps_conf_remove_section_file(path, section, err, sizeof(err));
    free(section);
    return rc ? failed(rc, err) : EXIT_OK;
}

/* doc [--format F | --format=F]: the arguments after "doc". */
static int cmd_doc(int argc, char **argv)
{
    const char *format = "markdown";

    if (argc == 1 && strncmp(argv[0], "--format=", 9) == 0)
        format = argv[0] + 9;
    else if (argc == 2 && strcmp(argv[0], "--format") == 0)
        format = argv[1];
    else if (argc != 0)
        return usage_error("doc takes only --format markdown|man, got \"%s\"", argv[0]);
    bool man = strcmp(format, "man") == 0;
    if (!man && strcmp(format, "markdown") != 0 && strcmp(format, "md") != 0)
        return usage_error("unknown doc format \"%s\" (expected markdown or man)", format);
    hps_err_t rc = man ? hps_conf_doc_man(stdout) : hps_conf_doc(stdout);

    return rc ? failed(rc, "cannot write to standard output") : EXIT_OK;
}

/* Print each warning line with the tool's prefix. */
static void print_warnings(const char *w)
{
    while (w && *w) {
        size_t n = strcspn(w, "\n");
        fprintf(stderr, "hps-conf: warning: %.*s\n", (int)n, w);
        w += n + (w[n] == '\n');
    }
}

/* import FILE.json [--pbtxt F]... [--strict]: argv holds what follows "import". */
static int cmd_import(int argc, char **argv)
{
    const char **pbtxt = calloc((size_t)argc + 1, sizeof(*pbtxt));
    const char *json = NULL;
    size_t n = 0;
    bool strict = false;
    char err[2048], *ini = NULL, *warnings = NULL;

    if (!pbtxt)
        return failed(-ENOMEM, "");
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--strict") == 0) {
            strict = true;
        } else if (strcmp(argv[i], "--pbtxt") == 0 && i + 1 < argc) {
            pbtxt[n++] = argv[++i];
        } else if (strncmp(argv[i], "--pbtxt=", 8) == 0 && argv[i][8]) {
            pbtxt[n++] = argv[i] + 8;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            free(pbtxt);
            return usage_error("import: unknown option or missing argument \"%s\"", argv[i]);
        } else if (json) {
            free(pbtxt);
            return usage_error("import takes one ps.json file; \"%s\" is a second one", argv[i]);
        } else {
            json = argv[i];
        }
    }
    if (!json) {
        free(pbtxt);
        return usage_error("%s", "import needs a ps.json file");
    }
    hps_err_t rc = hps_conf_import(json, pbtxt, n, &ini, &warnings, err, sizeof(err));
    free(pbtxt);
    if (rc) {
        fprintf(stderr, "hps-conf: %s\n", *err ? err : hps_strerror(rc));
        return rc == HPS_ECONFIG ? EXIT_USAGE : EXIT_INVALID;
    }
    print_warnings(warnings);
    int st = EXIT_OK;
    if (strict && warnings) {
        fputs("hps-conf: import --strict: warnings above; nothing written\n", stderr);
        st = EXIT_WARNINGS;
    } else if (fputs(ini, stdout) == EOF || fflush(stdout) != 0) {
        st = failed(-EIO, "cannot write to standard output");
    }
    free(ini);
    free(warnings);
    return st;
}

/* Operands each command takes: at least min, at most max (-1: any number);
 * min -2: doc, which parses its own; -1: not a command. */
static int operands(const char *cmd, int *ret_max)
{
    static const struct {
        const char *name;
        int min, max;
    } cmds[] = {{"check", 1, 2},  {"show", 1, 1},         {"get", 2, 2},  {"set", 2, -1},
                {"unset", 2, -1}, {"remove-model", 2, 2}, {"doc", -2, -2}};

    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        if (strcmp(cmd, cmds[i].name) == 0) {
            *ret_max = cmds[i].max;
            return cmds[i].min;
        }
    }
    return -1;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage_error("%s", "missing command");
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0) {
        fputs(usage_text, stdout);
        return EXIT_OK;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("hps-conf %s\n", hps_version());
        return EXIT_OK;
    }
    if (strcmp(cmd, "import") == 0)
        return cmd_import(argc - 2, argv + 2);
    int max, n = operands(cmd, &max);
    if (n == -1)
        return usage_error("unknown command \"%s\"", cmd);
    if (n == -2)
        return cmd_doc(argc - 2, argv + 2);
    if (argc - 2 < n || (max >= 0 && argc - 2 > max))
        return usage_error("wrong number of arguments for \"%s\"", cmd);
    if (strcmp(cmd, "check") == 0 && argc - 2 == 2 && strcmp(argv[2], "--files") != 0)
        return usage_error("check takes [--files] FILE, not \"%s\"", argv[2]);
    if (strcmp(cmd, "check") == 0)
        return cmd_check(argv[argc - 1], argc - 2 == 2);
    if (strcmp(cmd, "show") == 0)
        return cmd_show(argv[2]);
    if (strcmp(cmd, "get") == 0)
        return cmd_get(argv[2], argv[3]);
    if (strcmp(cmd, "set") == 0)
        return cmd_set(argv[2], argc - 3, argv + 3);
    if (strcmp(cmd, "unset") == 0)
        return cmd_unset(argv[2], argc - 3, argv + 3);
    if (strcmp(cmd, "remove-model") == 0)
        return cmd_remove_model(argv[2], argv[3]);
    return usage_error("unknown command \"%s\"", cmd);
}
