/*
 * main.c -- hps-shm: inspect the HPS shared-memory segments in /dev/shm.
 *
 * Command line: hps-shm [--json] [--help] [--version] COMMAND ARGS...; the
 * options may appear anywhere.  Only those exact words are options, so
 * negative keys ("get seg m t -5") are positional arguments; "--" ends the
 * options.
 */
#include <stdio.h>
#include <string.h>

#include "hps-shm.h"
#include "hps/hps.h"

/** One subcommand: name, positional argument count range, handler. */
typedef struct cmd_def {
    const char *name;
    int min_args;
    int max_args; /* -1 = no limit */
    int (*fn)(const hps__tool_t *t);
} cmd_def_t;

static const cmd_def_t cmd_defs[] = {
    {"ls", 0, 0, hps__tool_cmd_ls},       {"info", 1, 1, hps__tool_cmd_info},
    {"get", 4, -1, hps__tool_cmd_get},    {"dump", 4, 4, hps__tool_cmd_dump},
    {"check", 1, 1, hps__tool_cmd_check}, {"rm", 1, 1, hps__tool_cmd_rm},
};

static const char usage_text[] =
    "usage: hps-shm [--json] COMMAND [ARGS...]\n"
    "\n"
    "Inspect the HPS shared-memory segments (/dev/shm/hps.NAME).\n"
    "\n"
    "commands:\n"
    "  ls                           list the segments: size, committed bytes, tables,\n"
    "                               creator pid and STATUS: ok (the coordinator, or\n"
    "                               before any coordinator ran the creator, is attached),\n"
    "                               stalled (the coordinator is attached but silent past\n"
    "                               its worker_timeout_ms: stopped or hung; the workers\n"
    "                               call it gone), orphan (it is gone: nothing loads or\n"
    "                               updates the data) or refused (cannot be attached,\n"
    "                               and why);\n"
    "                               then the staged objects /dev/shm/.hps.NAME.new:\n"
    "                               a build in progress, or left by a killed one\n"
    "  info NAME                    header (bytes used, unused and on the allocator's\n"
    "                               free list), every table (geometry, storage type,\n"
    "                               counters, per-partition fill), the attached processes\n"
    "                               and the GPU caches (shape, occupancy, hit rate,\n"
    "                               refresher, processes); the coordinator's state is\n"
    "                               the last one it recorded ('last state' once it is\n"
    "                               gone).  A table whose descriptor is corrupt is\n"
    "                               listed in its place as CORRUPT with what is wrong,\n"
    "                               a table count out of range is said; either makes\n"
    "                               info exit 1 once the rest is listed\n"
    "  get NAME MODEL TABLE KEY...  print the vector of each key, or the default if\n"
    "                               missing (counts as lookups in the table's statistics);\n"
    "                               for a table stored as fp16, bf16 or int8 also the\n"
    "                               stored bits (int8: the row's scale and codes)\n"
    "  dump NAME MODEL TABLE DIR    write DIR/key (int64) and DIR/emb_vector (float32,\n"
    "                               rows x dim, decoded from the storage type), the\n"
    "                               HugeCTR sparse model files\n"
    "  check NAME                   full consistency check; exit 1 if a problem is found\n"
    "  rm [--force] NAME            remove the segment; refused while processes other\n"
    "                               than the tool are attached (a coordinator, workers,\n"
    "                               in-process clients) unless --force: they keep\n"
    "                               their mapping, but nothing started later finds it;\n"
    "                               also removes /dev/shm/.hps.NAME.new that a build\n"
    "                               killed before it published left (never one in\n"
    "                               progress), even where the segment is refused, and\n"
    "                               the coordinator lock /dev/shm/.hps.NAME.lock when no\n"
    "                               process holds it (a killed coordinator's)\n"
    "\n"
    "TABLE (get, dump) is a table's name or, if no table of MODEL has that name, its\n"
    "index among MODEL's tables: 0, 1, ... in the order info lists them (the order of\n"
    "embedding_table_names when the coordinator created them), corrupt tables\n"
    "included: get and dump refuse a corrupt table (exit 1, saying what is wrong).\n"
    "\n"
    "options:\n"
    "  --json      machine-readable JSON on stdout (errors stay text on stderr);\n"
    "              strings are valid UTF-8: control characters and bytes that are\n"
    "              not UTF-8 (a corrupt name) are written as \\u00XX of their value.\n"
    "              info: segment.coordinator_state is the state the coordinator\n"
    "              recorded last, current only while segment.coordinator_alive is\n"
    "              true (attached and beating within its worker_timeout_ms,\n"
    "              segment.coordinator_timeout_ms; segment.coordinator_stalled:\n"
    "              attached but silent past it); each table has \"corrupt\" (true:\n"
    "              only id, model, table and \"problem\"); \"problems\" lists what\n"
    "              info found wrong\n"
    "  --force     rm only: remove the segment even while processes are attached\n"
    "  -h, --help  show this help\n"
    "  --version   show the version and exit\n"
    "\n"
    "exit status: 0 ok, 1 error or inconsistency (check: a problem found; info: a\n"
    "corrupt table or table count, the rest listed; get, dump: a corrupt table),\n"
    "2 usage error\n";

static const cmd_def_t *find_cmd(const char *name)
{
    for (size_t i = 0; i < sizeof cmd_defs / sizeof cmd_defs[0]; i++) {
        if (strcmp(cmd_defs[i].name, name) == 0)
            return &cmd_defs[i];
    }
    return NULL;
}

/*
 * Remove the options from argv in place (argv[1..]), leaving the positional
 * words in argv[1 .. *ret_n]; --help and --version set *help and *version.
 * Returns HPS__TOOL_USAGE for an unknown option.
 */
static int parse_options(int argc, char **argv, hps__tool_t *t, bool *help, bool *version,
                         int *ret_n)
{
    int n = 0;
    bool opts_done = false;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!opts_done && strcmp(a, "--") == 0) {
            opts_done = true;
        } else if (!opts_done && strcmp(a, "--json") == 0) {
            t->json = true;
        } else if (!opts_done && strcmp(a, "--force") == 0) {
            t->force = true;
        } else if (!opts_done && (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)) {
            *help = true;
        } else if (!opts_done && strcmp(a, "--version") == 0) {
            *version = true;
        } else if (!opts_done && strncmp(a, "--", 2) == 0) {
            fprintf(stderr, "hps-shm: unknown option '%s'\n%s", a, usage_text);
            return HPS__TOOL_USAGE;
        } else {
            argv[1 + n++] = argv[i];
        }
    }
    *ret_n = n;
    return HPS__TOOL_OK;
}

static int run_cmd(hps__tool_t *t, char **words, int n)
{
    const cmd_def_t *c = find_cmd(words[0]);

    if (!c) {
        fprintf(stderr, "hps-shm: unknown command '%s'\n%s", words[0], usage_text);
        return HPS__TOOL_USAGE;
    }
    if (t->force && strcmp(c->name, "rm") != 0) {
        fprintf(stderr, "hps-shm %s: --force applies to rm only\n%s", c->name, usage_text);
        return HPS__TOOL_USAGE;
    }
    t->cmd = c->name;
    t->argc = n - 1;
    t->argv = words + 1;
    if (t->argc < c->min_args || (c->max_args >= 0 && t->argc > c->max_args)) {
        fprintf(stderr, "hps-shm %s: wrong number of arguments (%d)\n%s", c->name, t->argc,
                usage_text);
        return HPS__TOOL_USAGE;
    }
    if (c->min_args > 0 && !hps_shmdb_name_ok(t->argv[0])) /* every command's NAME */
        return hps__tool_usage(t,
                               "'%.200s' is not a segment name: 1 to %d characters of "
                               "[A-Za-z0-9_.-], without the 'hps.' prefix",
                               t->argv[0], HPS_SHMDB_SEGMENT_NAME_MAX);
    return c->fn(t);
}

int main(int argc, char **argv)
{
    hps__tool_t t = {.cmd = "", .argv = NULL};
    bool help = false, version = false;
    int n = 0;
    int rc = parse_options(argc, argv, &t, &help, &version, &n);

    if (rc != HPS__TOOL_OK)
        return rc;
    if (help) {
        fputs(usage_text, stdout);
        return hps__tool_flush(&t);
    }
    if (version) {
        printf("hps-shm %s\n", hps_version());
        return hps__tool_flush(&t);
    }
    if (n == 0) {
        fputs(usage_text, stderr);
        return HPS__TOOL_USAGE;
    }
    return run_cmd(&t, argv + 1, n);
}
