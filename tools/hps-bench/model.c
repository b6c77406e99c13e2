/*
 * model.c -- the model under test (from its INI), key sets, request files,
 * and the exact check of a response against hps_gen_vector_v() of the
 * version the model files were written with.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hps-bench.h"
#include "hps/gen.h"
#include "hps/modelfile.h"

#define HB_EMPTY  INT64_MIN
#define KEY_CHUNK (1u << 20)

/* ---- Key sets ------------------------------------------------------------ */

int hb_keyset_init(hb_keyset_t *s, uint64_t expected)
{
    uint64_t cap = 16;
    while (cap < expected * 2)
        cap <<= 1;
    *s = (hb_keyset_t){.mask = cap - 1};
    s->slots = malloc(cap * sizeof(int64_t));
    if (!s->slots)
        return -ENOMEM;
    for (uint64_t i = 0; i < cap; i++)
        s->slots[i] = HB_EMPTY;
    return 0;
}

void hb_keyset_add(hb_keyset_t *s, int64_t key)
{
    if (key == HB_EMPTY) {
        s->count += !s->has_empty;
        s->has_empty = true;
        return;
    }
    uint64_t i = hps_rrxmrrxmsx_0((uint64_t)key) & s->mask;
    while (s->slots[i] != HB_EMPTY) {
        if (s->slots[i] == key)
            return;
        i = (i + 1) & s->mask;
    }
    s->slots[i] = key;
    s->count++;
}

bool hb_keyset_has(const hb_keyset_t *s, int64_t key)
{
    if (key == HB_EMPTY)
        return s->has_empty;
    uint64_t i = hps_rrxmrrxmsx_0((uint64_t)key) & s->mask;
    while (s->slots[i] != HB_EMPTY) {
        if (s->slots[i] == key)
            return true;
        i = (i + 1) & s->mask;
    }
    return false;
}

/* ---- Model --------------------------------------------------------------- */

int hb_model_open(const char *ini, const char *model, hb_model_t *m, char *err, size_t n)
{
    char e[512];
    memset(m, 0, sizeof(*m));
    hps_err_t rc = hps_conf_load(ini, &m->conf, e, sizeof(e));
    if (rc < 0) {
        snprintf(err, n, "%s: %s", ini, e[0] ? e : hps_strerror(rc));
        return -1;
    }
    const hps_conf_model_t *cm = NULL;
    if (model)
        cm = hps_conf_model_find(m->conf, model);
    else if (m->conf->num_models == 1)
        cm = &m->conf->models[0];
    if (!cm) {
        snprintf(err, n, "%s: %s", ini,
                 model ? "no such model" : "holds several models: name one with --model");
        return -1;
    }
    m->name = cm->name;
    m->version = (uint32_t)cm->version;
    m->key_bytes = m->conf->hps.supportlonglong ? 8 : 4;
    m->num_tables = (uint32_t)cm->num_tables;
    m->tables = calloc(m->num_tables, sizeof(hb_table_t));
    if (!m->tables) {
        snprintf(err, n, "out of memory");
        return -1;
    }
    for (uint32_t t = 0; t < m->num_tables; t++) {
        hb_table_t *tb = &m->tables[t];
        hps_modelfile_t *mf;
        tb->name = cm->embedding_table_names[t];
        tb->dir = cm->sparse_files[t];
        tb->dim = (uint32_t)cm->embedding_vecsize_per_table[t];
        tb->default_value = (float)cm->default_value_for_each_table[t];
        tb->version = m->version;
        rc = hps_modelfile_open(tb->dir, tb->dim, &mf, e, sizeof(e));
        if (rc < 0) {
            snprintf(err, n, "table %s: %s", tb->name, e);
            return -1;
        }
        tb->rows = hps_modelfile_rows(mf);
        hps_modelfile_close(mf);
        m->rows += tb->rows;
        m->dim_sum += tb->dim;
        m->raw_bytes += tb->rows * (8 + 4ull * tb->dim);
    }
    return 0;
}

/* Row 0 of table t's files equals hps_gen_vector_v(t, key, dim, v). */
static bool row_is_version(uint32_t t, int64_t key, const float *row, uint32_t dim, uint32_t v,
                           float *scratch)
{
    hps_gen_vector_v(t, key, dim, v, scratch);
    return memcmp(row, scratch, 4ull * dim) == 0;
}

/*
 * Set tb->version to the hps-gen version row 0 of table t's files holds:
 * the model's [model] version first (what hps-gen model --model-version V
 * writes beside the files), then 1 .. HB_VERSION_SCAN.  The files are what
 * the server answers from; the INI's `version` may have been edited, or
 * left out, since.  Unchanged (the INI's) when no version matches: the
 * files are not hps-gen's, and the checks will say so.
 */
static int find_version(hps_modelfile_t *mf, uint32_t t, hb_table_t *tb, char *e, size_t n)
{
    int64_t key;
    float *buf;
    hps_err_t rc;

    tb->version_found = false;
    if (tb->rows == 0)
        return 0;
    buf = malloc(8ull * tb->dim); /* row 0, then a candidate's vector */
    if (!buf) {
        snprintf(e, n, "out of memory");
        return -ENOMEM;
    }
    rc = hps_modelfile_read(mf, 0, 1, &key, buf, e, n);
    for (uint32_t v = 0; rc == 0 && v <= HB_VERSION_SCAN && !tb->version_found; v++) {
        uint32_t cand = v == 0 ? tb->version : v;
        if (row_is_version(t, key, buf, tb->dim, cand, buf + tb->dim)) {
            tb->version = cand;
            tb->version_found = true;
        }
    }
    free(buf);
    return rc;
}

int hb_model_load_keys(hb_model_t *m, char *err, size_t n)
{
    char e[512];
    int64_t *buf = malloc(KEY_CHUNK * sizeof(int64_t));
    if (!buf) {
        snprintf(err, n, "out of memory");
        return -1;
    }
    for (uint32_t t = 0; t < m->num_tables; t++) {
        hb_table_t *tb = &m->tables[t];
        hps_modelfile_t *mf;
        hps_err_t rc = hps_modelfile_open(tb->dir, tb->dim, &mf, e, sizeof(e));
        if (rc == 0 && hb_keyset_init(&tb->keys, tb->rows) < 0)
            rc = -ENOMEM, snprintf(e, sizeof(e), "out of memory");
        if (rc == 0)
            rc = find_version(mf, t, tb, e, sizeof(e));
        for (uint64_t row = 0; rc == 0 && row < tb->rows; row += KEY_CHUNK) {
            size_t k = (size_t)(tb->rows - row < KEY_CHUNK ? tb->rows - row : KEY_CHUNK);
            rc = hps_modelfile_read(mf, row, k, buf, NULL, e, sizeof(e));
            for (size_t i = 0; rc == 0 && i < k; i++)
                hb_keyset_add(&tb->keys, buf[i]);
        }
        if (rc == 0)
            hps_modelfile_close(mf);
        if (rc < 0) {
            snprintf(err, n, "table %s: %s", tb->name, e);
            free(buf);
            return -1;
        }
    }
    free(buf);
    return 0;
}

void hb_model_close(hb_model_t *m)
{
    for (uint32_t t = 0; m->tables && t < m->num_tables; t++)
        free(m->tables[t].keys.slots);
    free(m->tables);
    hps_conf_free(m->conf);
    memset(m, 0, sizeof(*m));
}

/* ---- Request files ------------------------------------------------------- */

int hb_reqfile_open(const char *path, hb_reqfile_t *rf, char *err, size_t n)
{
    struct stat st;
    hps_gen_req_header_t h;
    memset(rf, 0, sizeof(*rf));
    rf->path = path;
    /* O_NONBLOCK: a FIFO would otherwise block open() until a writer came */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0) {
        snprintf(err, n, "%s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, n, "%s: not a regular file (%s)", path,
                 S_ISFIFO(st.st_mode)   ? "a FIFO"
                 : S_ISDIR(st.st_mode)  ? "a directory"
                 : S_ISSOCK(st.st_mode) ? "a socket"
                                        : "a device");
        close(fd);
        return -1;
    }
    if ((size_t)st.st_size < sizeof(h)) {
        snprintf(err, n, "%s: not a request file (%lld bytes)", path, (long long)st.st_size);
        close(fd);
        return -1;
    }
    rf->map_len = (size_t)st.st_size;
    rf->map = mmap(NULL, rf->map_len, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    if (rf->map == MAP_FAILED) {
        rf->map = NULL;
        snprintf(err, n, "%s: mmap: %s", path, strerror(errno));
        return -1;
    }
    memcpy(&h, rf->map, sizeof(h));
    hps_err_t rc = hps_gen_req_check(&h, (uint64_t)st.st_size);
    if (rc < 0) {
        snprintf(err, n, "%s: bad request file: %s", path, hps_strerror(rc));
        hb_reqfile_close(rf);
        return -1;
    }
    rf->T = h.num_tables;
    rf->B = h.batch;
    rf->C = h.count;
    rf->keys = (const int64_t *)((const char *)rf->map + sizeof(h));
    return 0;
}

void hb_reqfile_close(hb_reqfile_t *rf)
{
    if (rf->map)
        munmap(rf->map, rf->map_len);
    rf->map = NULL;
}

/* ---- Checks -------------------------------------------------------------- */

static bool all_default(const float *row, uint32_t dim, float dv)
{
    for (uint32_t d = 0; d < dim; d++)
        if (memcmp(&row[d], &dv, 4) != 0)
            return false;
    return true;
}

void hb_check_response(const hb_model_t *m, const int64_t *keys, uint32_t B, const void *out,
                       float *scratch, hb_check_t *c)
{
    const char *o = out;
    float got[4096]; /* dims above this are checked exactly but not classified */
    c->responses++;
    for (uint32_t t = 0; t < m->num_tables; t++) {
        const hb_table_t *tb = &m->tables[t];
        size_t rb = 4ull * tb->dim;
        for (uint32_t i = 0; i < B; i++, o += rb) {
            int64_t key = keys[(size_t)t * B + i];
            bool present = hb_keyset_has(&tb->keys, key);
            if (present)
                hps_gen_vector_v(t, key, tb->dim, tb->version, scratch);
            else
                for (uint32_t d = 0; d < tb->dim; d++)
                    scratch[d] = tb->default_value;
            c->rows++;
            if (memcmp(o, scratch, rb) == 0) {
                c->rows_vector += present;
                c->rows_default += !present;
                continue;
            }
            bool dflt = false;
            if (tb->dim <= 4096) {
                memcpy(got, o, rb);
                dflt = all_default(got, tb->dim, tb->default_value);
            }
            if (present && dflt)
                c->rows_missed++;
            else
                c->rows_wrong++;
            if (!c->first_bad[0]) {
                uint32_t d = 0;
                float g;
                while (d < tb->dim && memcmp(o + 4ull * d, &scratch[d], 4) == 0)
                    d++;
                memcpy(&g, o + 4ull * (d < tb->dim ? d : 0), 4);
                snprintf(c->first_bad, sizeof(c->first_bad),
                         "response %" PRIu64 ", table %u (%s), sample %u, key %" PRId64
                         " (%s the model): element %u is %.9g, expected %.9g%s",
                         c->responses - 1, t, tb->name, i, key, present ? "in" : "not in", d,
                         (double)g, (double)scratch[d < tb->dim ? d : 0],
                         present && dflt ? " (the default value: a miss)" : "");
            }
        }
    }
}
