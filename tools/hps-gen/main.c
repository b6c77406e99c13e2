/*
 * main.c -- hps-gen: synthetic HugeCTR models, their HPS configuration, and
 * request workloads (see include/hps/gen.h for the functions behind them).
 */
#include <stdio.h>
#include <string.h>

#include "hps-gen.h"

static const char help_text[] =
    "usage: hps-gen COMMAND [OPTIONS]\n"
    "\n"
    "Write synthetic HugeCTR sparse models, a matching HPS configuration and request\n"
    "workloads.  Every value is a deterministic function of (table, key), so any lookup\n"
    "can be checked exactly: `hps-gen row` prints any key's vector (the functions,\n"
    "hps_gen_key and hps_gen_vector, are include/hps/gen.h of the source tree).\n"
    "\n"
    "hps-gen model --out DIR --model NAME [OPTIONS]\n"
    "  Writes DIR/<table>/key (N int64, native order) and DIR/<table>/emb_vector\n"
    "  (N x dim float32) per table, rows in a shuffled deterministic order, and the\n"
    "  INI DIR/<NAME>.ini for hps-coordinator and hps-worker.  Table t's keys are\n"
    "  hps_gen_key(t, 0..N-1) (or hps_gen_key32 with --key-bytes 4).\n"
    "  --tables N              number of tables (default: length of the longest\n"
    "                          per-table list, else 1; at most 256)\n"
    "  --rows R[,R2,...]       rows per table (default 1000)\n"
    "  --dim D[,D2,...]        floats per vector (default 16; 128 with --shape)\n"
    "  --table-names a,b,...   table names (default sparse_embedding0, 1, ...)\n"
    "  --shape criteo-1tb      the 26 MLPerf DLRM Criteo 1TB tables ...\n"
    "  --scale F               ... with max(1, ceil(cardinality * F)) rows each\n"
    "  --key-bytes 8|4         int64 keys < 2^62 (default) or uint32 keys < 2^32-1\n"
    "                          ([hps] supportlonglong = false); files hold int64 always\n"
    "  --model-version V       model version (default 1): [model] version, and every\n"
    "                          vector of version V > 1 differs from version 1's\n"
    "                          (hps-gen row --model-version V prints them)\n"
    "  --seed S                seed of the row order (default 0); keys and values\n"
    "                          never depend on it\n"
    "  --threads N             writer threads (default: online CPUs, at most 16)\n"
    "  --force                 replace existing table directories and INI\n"
    "  --quiet                 no progress and no summary line\n"
    "  INI options:\n"
    "  --ini PATH              write the INI there (default DIR/<NAME>.ini)\n"
    "  --segment NAME          [volatile_db] shared_memory_name (default: NAME)\n"
    "  --max-query Q[,Q2...]   maxnum_catfeature_query_per_table_per_sample (default 1)\n"
    "  --default V[,V2,...]    default_value_for_each_table (default 0.0)\n"
    "  --max-batch B           [model] max_batch_size (default 1024)\n"
    "  --gpucache              gpucache = true (default false)\n"
    "  --gpucacheper F         gpucacheper (default 0.2)\n"
    "  --http-port P           [worker] http_port (default 8000); metrics_port = P + 2\n"
    "  --metrics-port P        [worker] metrics_port\n"
    "  --no-persistent-db      [persistent_db] type = disabled (default rocks_db at\n"
    "                          DIR/rocksdb)\n"
    "  shared_memory_size = 1.5 x raw model + 24 B per row + 64 MiB, rounded up to MiB.\n"
    "\n"
    "hps-gen requests --model-dir DIR [--model NAME | --config PATH] --batch B\n"
    "                 --count C --out FILE [--alpha A|auto] [--seed S] [OPTIONS]\n"
    "  Writes C requests of B samples for the model's tables (sparse_files and\n"
    "  supportlonglong of the INI; rows from the key files).  Each sample has one key\n"
    "  per table, drawn by power law: rank r = floor(((N+1)^(1-a) - 1) U + 1)^(1/(1-a)),\n"
    "  key = hps_gen_key(t, r - 1), so the first keys generated are the most popular.\n"
    "  --alpha auto (default) picks a so that the hottest --hot-keys (0.0016) of all keys\n"
    "  get --hot-share (0.96) of the accesses, as in the Criteo 1TB log.  Draws come from\n"
    "  one splitmix64 stream seeded with --seed (default 0), in file order.\n"
    "  --force replaces FILE; --quiet prints nothing.\n"
    "  File format (native byte order; read by hps-bench):\n"
    "    offset 0   char[8]  magic \"HPSREQ1\\0\"\n"
    "    offset 8   uint32   num_tables T\n"
    "    offset 12  uint32   batch B\n"
    "    offset 16  uint64   count C\n"
    "    offset 24  int64    C requests x T tables x B keys, table-major per request\n"
    "                        (the KEYS input of one request; NUMKEYS = B per table)\n"
    "  size = 24 + 8*C*T*B bytes.\n"
    "\n"
    "hps-gen alpha (--shape criteo-1tb --scale F | --rows R,... | --model-dir DIR)\n"
    "              [--alpha A] [--hot-keys F] [--hot-share F]\n"
    "  Prints the alpha for the hot share (or, with --alpha, the share of that alpha).\n"
    "\n"
    "hps-gen row --table T (--index I [--count N] | --key K) [--dim D] [--key-bytes 8|4]\n"
    "            [--model-version V]\n"
    "  Prints \"KEY v0 v1 ...\" (values with %.9g, exact) for keys of the generator.\n"
    "  --model-version V       the vectors of version V (default 1), as hps-gen model\n"
    "                          --model-version V writes them (hps_gen_vector_v)\n"
    "\n"
    "exit status: 0 ok, 1 error, 2 usage error\n";

typedef struct cmd_def {
    const char *name;
    int (*fn)(int argc, char **argv);
} cmd_def_t;

static const cmd_def_t cmds[] = {
    {"model", gen_cmd_model},
    {"requests", gen_cmd_requests},
    {"alpha", gen_cmd_alpha},
    {"row", gen_cmd_row},
};

int main(int argc, char **argv)
{
    if (argc < 2)
        return gen_usage("a command is required: model, requests, alpha or row");
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0 ||
            (i == 1 && strcmp(argv[i], "help") == 0)) {
            fputs(help_text, stdout);
            return GEN_OK;
        }
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("hps-gen %s\n", hps_version());
        return GEN_OK;
    }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        if (strcmp(argv[1], cmds[i].name) == 0)
            return cmds[i].fn(argc - 1, argv + 1);
    }
    return gen_usage("unknown command '%s'", argv[1]);
}
