/*
 * ini.c -- the HPS configuration (INI, conf/hps_conf.def key names) that
 * serves a generated model: [hps], [volatile_db] sized for the model,
 * [distributed_db], [persistent_db], [update_source], [worker] and
 * [model.<name>].  Long lists are wrapped onto indented continuation lines
 * (each line ends with the list's comma), so no line is much longer than
 * 100 characters unless one path is.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hps-gen.h"

#define MIB         (1ULL << 20)
#define GIB         (1ULL << 30)
#define WRAP_COLUMN 96

uint64_t gen_segment_bytes(const gen_model_t *m)
{
    uint64_t raw = 0, rows = 0, b;

    for (size_t t = 0; t < m->num_tables; t++) {
        raw += m->tables[t].rows * (8 + 4ULL * m->tables[t].dim);
        rows += m->tables[t].rows;
    }
    b = raw + raw / 2 + rows * 24 + 64 * MIB;
    return (b + MIB - 1) / MIB * MIB;
}

static void put_size(FILE *f, const char *key, uint64_t bytes)
{
    if (bytes % GIB == 0)
        fprintf(f, "%s = %lluGiB\n", key, (unsigned long long)(bytes / GIB));
    else
        fprintf(f, "%s = %lluMiB\n", key, (unsigned long long)(bytes / MIB));
}

/* One list entry of table t, as text (malloc'd). */
typedef char *(*item_fn)(const gen_model_t *m, size_t t);

static char *item_file(const gen_model_t *m, size_t t)
{
    return gen_strdupf("%s", m->tables[t].dir);
}

static char *item_name(const gen_model_t *m, size_t t)
{
    return gen_strdupf("%s", m->tables[t].name);
}

static char *item_dim(const gen_model_t *m, size_t t)
{
    return gen_strdupf("%u", m->tables[t].dim);
}

static char *item_maxq(const gen_model_t *m, size_t t)
{
    return gen_strdupf("%u", m->tables[t].max_query);
}

static char *item_default(const gen_model_t *m, size_t t)
{
    char *s = gen_strdupf("%.9g", m->tables[t].default_value);

    if (strpbrk(s, ".eEni") == NULL) { /* "0" -> "0.0": clearly a real */
        char *r = gen_strdupf("%s.0", s);
        free(s);
        s = r;
    }
    return s;
}

/* "key = a, b, c," wrapped onto "    d, e" lines. */
static void put_list(FILE *f, const gen_model_t *m, const char *key, item_fn item)
{
    size_t col = (size_t)fprintf(f, "%s =", key);

    for (size_t t = 0; t < m->num_tables; t++) {
        char *s = item(m, t);
        size_t len = strlen(s);
        if (t > 0 && col + len + 2 > WRAP_COLUMN) {
            fputs(",\n   ", f);
            col = 3;
        } else if (t > 0) {
            fputc(',', f);
            col++;
        }
        fprintf(f, " %s", s);
        col += len + 1;
        free(s);
    }
    fputc('\n', f);
}

/* Comment lines of at most this many bytes: inih (hps-gen requests' INI
 * reader) takes lines of up to 200 bytes (INI_MAX_LINE). */
#define COMMENT_WIDTH 100

/* The command line as comment lines ";   ...", broken at spaces (a word
 * longer than COMMENT_WIDTH is cut: it is a comment). */
static void put_cmdline(FILE *f, const char *cmd)
{
    while (*cmd) {
        size_t n = strlen(cmd);
        if (n > COMMENT_WIDTH) {
            size_t cut = COMMENT_WIDTH;
            while (cut > 0 && cmd[cut] != ' ')
                cut--;
            n = cut ? cut : COMMENT_WIDTH;
        }
        fprintf(f, ";   %.*s\n", (int)n, cmd);
        cmd += n;
        while (*cmd == ' ')
            cmd++;
    }
}

static void put_header(FILE *f, const gen_model_t *m)
{
    uint64_t rows = 0;
    char vec[64];

    for (size_t t = 0; t < m->num_tables; t++)
        rows += m->tables[t].rows;
    if (m->version > 1)
        snprintf(vec, sizeof vec, "hps_gen_vector_v(t, key, dim, %u)", m->version);
    else
        snprintf(vec, sizeof vec, "hps_gen_vector(t, key, dim)");
    fprintf(f, "; HPS configuration of model '%s', written by hps-gen %s:\n", m->name,
            hps_version());
    put_cmdline(f, m->cmdline);
    fprintf(f,
            "; %zu tables, %llu rows, %u-byte keys.  Row j of table t holds key\n"
            "; hps_gen_key_w(t, hps_gen_shuffle_at(j), %u) (file-order seed %llu) and\n"
            "; its vector %s (`hps-gen row` prints any).\n\n",
            m->num_tables, (unsigned long long)rows, m->key_bytes, m->key_bytes,
            (unsigned long long)m->seed, vec);
}

static void put_globals(FILE *f, const gen_model_t *m)
{
    uint64_t seg = gen_segment_bytes(m);

    fprintf(f, "[hps]\nsupportlonglong = %s\nlog_level = info\n\n",
            m->key_bytes == 8 ? "true" : "false");
    fprintf(f,
            "[volatile_db]\ntype = multi_process_hash_map\nnum_partitions = auto\n"
            "shared_memory_name = %s\n"
            "; 1.5 x the raw model + 24 bytes per row + 64 MiB, rounded up to MiB\n",
            m->segment);
    put_size(f, "shared_memory_size", seg);
    put_size(f, "allocation_rate", seg < GIB ? 16 * MIB : 256 * MIB);
    fputs("overflow_margin = max\ninitialize_after_startup = true\n\n", f);
    fputs("[distributed_db]\ntype = disabled\n\n", f);
    if (m->persistent_db)
        fprintf(f, "[persistent_db]\ntype = rocks_db\npath = %s/rocksdb\n\n", m->out_dir);
    else
        fputs("[persistent_db]\ntype = disabled\n\n", f);
    fputs("[update_source]\ntype = none\n\n", f);
    fprintf(f, "[worker]\nhttp_address = 127.0.0.1\nhttp_port = %d\nmetrics_port = %d\n\n",
            m->http_port, m->metrics_port);
}

static void put_model(FILE *f, const gen_model_t *m)
{
    fprintf(f, "[model.%s]\n", m->name);
    put_list(f, m, "sparse_files", item_file);
    put_list(f, m, "embedding_table_names", item_name);
    put_list(f, m, "embedding_vecsize_per_table", item_dim);
    put_list(f, m, "maxnum_catfeature_query_per_table_per_sample", item_maxq);
    put_list(f, m, "default_value_for_each_table", item_default);
    fprintf(f, "version = %u\n", m->version ? m->version : 1u);
    fprintf(f, "deployed_device_list = 0\nmax_batch_size = %u\ngpucache = %s\ngpucacheper = %g\n",
            m->max_batch, m->gpucache ? "true" : "false", m->gpucacheper);
}

int gen_write_ini(const gen_model_t *m)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    int rc;

    if (f == NULL)
        return gen_fail(-ENOMEM, "cannot build %s", m->ini_path);
    put_header(f, m);
    put_globals(f, m);
    put_model(f, m);
    if (fclose(f) != 0) {
        free(text);
        return gen_fail(-ENOMEM, "cannot build %s", m->ini_path);
    }
    rc = gen_write_file_atomic(m->ini_path, text, len);
    free(text);
    if (rc != 0)
        return gen_fail(rc, "cannot write %s", m->ini_path);
    return GEN_OK;
}
