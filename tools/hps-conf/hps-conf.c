/*
 * hps-conf -- check, show, query and edit HPS configuration files.
 *
 *   hps-conf check FILE
 *   hps-conf show FILE
 *   hps-conf get FILE SECTION.KEY
 *   hps-conf set FILE SECTION.KEY=VALUE
 *   hps-conf doc
 *
 * Exit status: 0 success, 1 invalid configuration or I/O failure, 2 usage.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hps/conf.h"

enum { EXIT_OK = 0, EXIT_INVALID = 1, EXIT_USAGE = 2 };

static const char usage_text[] =
    "Usage: hps-conf COMMAND [ARGS]\n"
    "Check, show, query and edit HPS configuration files (INI).\n"
    "\n"
    "Commands:\n"
    "  check FILE                   validate FILE; errors go to stderr\n"
    "  show FILE                    print the effective configuration: every key,\n"
    "                               those the file does not set marked \"; default\"\n"
    "  get FILE SECTION.KEY         print one effective value; a model's keys are\n"
    "                               model.<name>.KEY\n"
    "  set FILE SECTION.KEY=VALUE   change one key in place: comments, blank lines and\n"
    "                               order are kept, a missing key is added at the end of\n"
    "                               its section, a missing section at the end of FILE;\n"
    "                               the result is validated first, then written\n"
    "                               atomically (same permissions)\n"
    "  doc                          print the reference of every key (markdown)\n"
    "\n"
    "Options:\n"
    "  -h, --help                   show this help and exit\n"
    "  --version                    show the version and exit\n"
    "\n"
    "Exit status:\n"
    "  0  success (check: the file is valid)\n"
    "  1  the configuration is invalid, or a file cannot be read or written\n"
    "  2  usage error: bad command line, or an unknown section or key\n";

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

static int cmd_check(const char *path)
{
    hps_conf_t *conf = NULL;
    int st = load(path, &conf);

    if (st == EXIT_OK)
        printf("%s: OK\n", path);
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
    else if (rc == HPS_ENOTFOUND)
        st = usage_error("unknown key \"%s\" (expected section.key or model.<name>.key)", key);
    else
        st = failed(rc, "");
    free(buf);
    hps_conf_free(conf);
    return st;
}

static int cmd_set(const char *path, const char *assignment)
{
    char err[1024];
    const char *eq = strchr(assignment, '=');

    if (!eq || eq == assignment)
        return usage_error("set needs SECTION.KEY=VALUE, got \"%s\"", assignment);
    char *key = strndup(assignment, (size_t)(eq - assignment));
    if (!key)
        return failed(-ENOMEM, "");
    hps_err_t rc = hps_conf_set_file(path, key, eq + 1, err, sizeof(err));
    free(key);
    return rc ? failed(rc, err) : EXIT_OK;
}

static int cmd_doc(void)
{
    hps_err_t rc = hps_conf_doc(stdout);

    return rc ? failed(rc, "cannot write to standard output") : EXIT_OK;
}

/* Number of operands each command takes. */
static int operands(const char *cmd)
{
    static const struct {
        const char *name;
        int n;
    } cmds[] = {{"check", 1}, {"show", 1}, {"get", 2}, {"set", 2}, {"doc", 0}};

    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
        if (strcmp(cmd, cmds[i].name) == 0)
            return cmds[i].n;
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
    int n = operands(cmd);
    if (n < 0)
        return usage_error("unknown command \"%s\"", cmd);
    if (argc - 2 != n)
        return usage_error("wrong number of arguments for \"%s\"", cmd);
    if (strcmp(cmd, "check") == 0)
        return cmd_check(argv[2]);
    if (strcmp(cmd, "show") == 0)
        return cmd_show(argv[2]);
    if (strcmp(cmd, "get") == 0)
        return cmd_get(argv[2], argv[3]);
    if (strcmp(cmd, "set") == 0)
        return cmd_set(argv[2], argv[3]);
    return cmd_doc();
}
