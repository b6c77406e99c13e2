/*
 * cmd-rows.c -- hps-shm get (look keys up) and dump (write HugeCTR sparse
 * model files).
 *
 * get uses hps_shmdb_lookup(), so it counts in the table's lookups and hits
 * and refreshes the access stamps of the keys it reads, like any reader.
 * For a table stored in another type than fp32 it also reads each found
 * row as stored (hps_shmdb_lookup_stored) and shows those bits beside the
 * fp32 value, which is then the decoding of exactly those bits.
 *
 * dump walks the table with hps_shmdb_iterate() into two temporary files in
 * DIR, syncs them and renames them to DIR/emb_vector and DIR/key, so a failed
 * dump never leaves half-written model files.  Keys are always written as
 * int64 (HugeCTR's sparse model format); 32-bit keys are zero-extended.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hps-shm.h"

/* ---- get ----------------------------------------------------------------- */

static bool parse_u32(const char *s, uint32_t *ret)
{
    char *end = NULL;
    unsigned long long v;

    if (!isdigit((unsigned char)s[0]))
        return false;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (*end != '\0' || errno == ERANGE || v > UINT32_MAX)
        return false;
    *ret = (uint32_t)v;
    return true;
}

static bool parse_i64(const char *s, int64_t *ret)
{
    char *end = NULL;
    long long v;

    if (!isdigit((unsigned char)s[0]) && !(s[0] == '-' && isdigit((unsigned char)s[1])))
        return false;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (*end != '\0' || errno == ERANGE)
        return false;
    *ret = v;
    return true;
}

/* Parse the keys of argv[3..] into keys (n entries of key_bytes). */
static int parse_keys(const hps__tool_t *t, const hps_table_info_t *ti, void *keys, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *s = t->argv[3 + i];
        if (ti->key_bytes == 4 && !parse_u32(s, (uint32_t *)keys + i))
            return hps__tool_usage(t,
                                   "key '%s' is not a uint32 (0..4294967295); table %s/%s "
                                   "has 4-byte keys",
                                   s, ti->model, ti->table);
        if (ti->key_bytes != 4 && !parse_i64(s, (int64_t *)keys + i))
            return hps__tool_usage(t,
                                   "key '%s' is not an int64 (decimal, "
                                   "-9223372036854775808..9223372036854775807)",
                                   s);
    }
    return HPS__TOOL_OK;
}

static int64_t key_at(const hps_table_info_t *ti, const void *keys, size_t i)
{
    return ti->key_bytes == 4 ? (int64_t)((const uint32_t *)keys)[i] : ((const int64_t *)keys)[i];
}

/* Rows as stored, for a table of another type than fp32: n rows of
 * ti->row_bytes, has[i] set where row i was read. */
typedef struct stored_rows {
    uint8_t *bytes;
    uint8_t *has;
} stored_rows_t;

static uint16_t stored_u16(const uint8_t *row, uint32_t j)
{
    uint16_t h;
    memcpy(&h, row + 2 * (size_t)j, sizeof h);
    return h;
}

static float stored_scale(const uint8_t *row, uint32_t *ret_bits)
{
    float f;
    memcpy(&f, row, sizeof f);
    memcpy(ret_bits, row, sizeof *ret_bits);
    return f;
}

/* "  stored fp16: 0x3c00 ..." or "  stored int8: scale S (0xBITS), q Q ..." */
static void stored_text(const hps_table_info_t *ti, const uint8_t *row)
{
    printf("  stored %s:", hps_dtype_name(ti->storage_type));
    if (ti->storage_type == HPS_DTYPE_INT8) {
        uint32_t bits;
        float scale = stored_scale(row, &bits);
        printf(" scale %.9g (0x%08x), q", (double)scale, bits);
        for (uint32_t j = 0; j < ti->dim; j++)
            printf(" %d", (int)(int8_t)row[4 + j]);
    } else {
        for (uint32_t j = 0; j < ti->dim; j++)
            printf(" 0x%04x", stored_u16(row, j));
    }
    printf("\n");
}

static void get_text(const hps_table_info_t *ti, const void *keys, size_t n, const float *values,
                     const uint8_t *found, const stored_rows_t *st)
{
    for (size_t i = 0; i < n; i++) {
        printf("%lld:", (long long)key_at(ti, keys, i));
        if (!found[i]) {
            printf(" missing (default %.9g)\n", (double)ti->default_value);
            continue;
        }
        for (uint32_t j = 0; j < ti->dim; j++)
            printf(" %.9g", (double)values[i * ti->dim + j]);
        printf("\n");
        if (st->has && st->has[i])
            stored_text(ti, st->bytes + i * ti->row_bytes);
    }
}

/* {"type": "fp16", "bits": [...]} or {"type": "int8", "scale": S,
 * "scale_bits": B, "q": [...]}. */
static json_object *stored_json(const hps_table_info_t *ti, const uint8_t *row)
{
    json_object *o = json_object_new_object();
    json_object *arr = json_object_new_array_ext((int)ti->dim);

    hps__tool_jset(o, "type", hps__tool_json_str(hps_dtype_name(ti->storage_type)));
    if (ti->storage_type == HPS_DTYPE_INT8) {
        uint32_t bits;
        float scale = stored_scale(row, &bits);
        hps__tool_jset(o, "scale", hps__tool_json_float(scale));
        hps__tool_jset(o, "scale_bits", json_object_new_int64(bits));
        for (uint32_t j = 0; j < ti->dim; j++)
            json_object_array_add(arr, json_object_new_int((int8_t)row[4 + j]));
        hps__tool_jset(o, "q", arr);
    } else {
        for (uint32_t j = 0; j < ti->dim; j++)
            json_object_array_add(arr, json_object_new_int(stored_u16(row, j)));
        hps__tool_jset(o, "bits", arr);
    }
    return o;
}

static json_object *get_row_json(const hps_table_info_t *ti, int64_t key, const float *value,
                                 bool found, const uint8_t *stored)
{
    json_object *o = json_object_new_object();
    json_object *vec;

    hps__tool_jset(o, "key", json_object_new_int64(key));
    hps__tool_jset(o, "found", json_object_new_boolean(found));
    if (!found) {
        hps__tool_jset(o, "default", hps__tool_json_float(ti->default_value));
        return o;
    }
    vec = json_object_new_array_ext((int)ti->dim);
    for (uint32_t j = 0; j < ti->dim; j++)
        json_object_array_add(vec, hps__tool_json_float(value[j]));
    hps__tool_jset(o, "vector", vec);
    if (stored)
        hps__tool_jset(o, "stored", stored_json(ti, stored));
    return o;
}

static int get_json(const hps__tool_t *t, const hps_table_info_t *ti, const void *keys, size_t n,
                    const float *values, const uint8_t *found, const stored_rows_t *st)
{
    json_object *root = json_object_new_object();
    json_object *rows = json_object_new_array();

    hps__tool_jset(root, "segment", hps__tool_json_str(t->argv[0]));
    hps__tool_jset(root, "model", hps__tool_json_str(ti->model));
    hps__tool_jset(root, "table", hps__tool_json_str(ti->table));
    hps__tool_jset(root, "dim", json_object_new_int64(ti->dim));
    hps__tool_jset(root, "key_bytes", json_object_new_int64(ti->key_bytes));
    hps__tool_jset(root, "storage_type", hps__tool_json_str(hps_dtype_name(ti->storage_type)));
    for (size_t i = 0; i < n; i++)
        json_object_array_add(
            rows, get_row_json(ti, key_at(ti, keys, i), values + i * ti->dim, found[i],
                               st->has && st->has[i] ? st->bytes + i * ti->row_bytes : NULL));
    hps__tool_jset(root, "rows", rows);
    return hps__tool_emit_json(t, root);
}

/* Read the found keys' rows as stored into st; the fp32 value shown for a
 * row read is replaced by the decoding of those very bits, so both lines
 * agree even if a writer changed the row between the two reads. */
static int read_stored(const hps__tool_t *t, hps_shmdb_t *db, uint32_t id,
                       const hps_table_info_t *ti, const void *keys, size_t n, float *values,
                       const uint8_t *found, stored_rows_t *st)
{
    st->bytes = calloc(n, ti->row_bytes);
    st->has = calloc(n, 1);
    if (!st->bytes || !st->has)
        return hps__tool_fail(t, -ENOMEM, NULL, "cannot read %zu stored rows", n);
    for (size_t i = 0; i < n; i++) {
        bool has = false;
        uint8_t *row = st->bytes + i * ti->row_bytes;
        if (!found[i])
            continue;
        hps_err_t err = hps_shmdb_lookup_stored(db, id, (uint64_t)key_at(ti, keys, i), row,
                                                ti->row_bytes, &has);
        if (err != 0)
            return hps__tool_fail(t, err, NULL, "stored row in %s/%s", ti->model, ti->table);
        if (has && hps_dtype_decode(ti->storage_type, ti->dim, 1, row, values + i * ti->dim) == 0)
            st->has[i] = 1;
    }
    return HPS__TOOL_OK;
}

static int get_keys(const hps__tool_t *t, hps_shmdb_t *db, uint32_t id, const hps_table_info_t *ti)
{
    size_t n = (size_t)t->argc - 3;
    void *keys = calloc(n, ti->key_bytes == 4 ? 4 : 8);
    float *values = calloc(n * ti->dim, sizeof *values);
    uint8_t *found = calloc(n, 1);
    int rc = HPS__TOOL_OK;
    hps_err_t err;

    if (!keys || !values || !found)
        rc = hps__tool_fail(t, -ENOMEM, NULL, "cannot look up %zu keys", n);
    if (rc == HPS__TOOL_OK)
        rc = parse_keys(t, ti, keys, n);
    if (rc == HPS__TOOL_OK) {
        err = hps_shmdb_lookup(db, id, n, keys, values, found, NULL);
        if (err != 0)
            rc = hps__tool_fail(t, err, NULL, "lookup in %s/%s failed", ti->model, ti->table);
    }
    stored_rows_t st = {NULL, NULL};
    if (rc == HPS__TOOL_OK && ti->storage_type != HPS_DTYPE_FP32)
        rc = read_stored(t, db, id, ti, keys, n, values, found, &st);
    if (rc == HPS__TOOL_OK && t->json)
        rc = get_json(t, ti, keys, n, values, found, &st);
    else if (rc == HPS__TOOL_OK) {
        get_text(ti, keys, n, values, found, &st);
        rc = hps__tool_flush(t);
    }
    free(st.bytes);
    free(st.has);
    free(found);
    free(values);
    free(keys);
    return rc;
}

typedef int (*table_cmd_fn)(const hps__tool_t *t, hps_shmdb_t *db, uint32_t id,
                            const hps_table_info_t *ti);

/* Attach SEGMENT (argv[0]), find MODEL TABLE (argv[1], argv[2]), run fn. */
static int on_table(const hps__tool_t *t, table_cmd_fn fn)
{
    hps_shmdb_t *db = NULL;
    hps_table_info_t ti;
    uint32_t id = 0;
    int rc = hps__tool_attach(t, t->argv[0], &db);

    if (rc != HPS__TOOL_OK)
        return rc;
    rc = hps__tool_find_table(t, db, t->argv[1], t->argv[2], &id, &ti);
    if (rc == HPS__TOOL_OK)
        rc = fn(t, db, id, &ti);
    hps_shmdb_detach(db);
    return rc;
}

int hps__tool_cmd_get(const hps__tool_t *t)
{
    return on_table(t, get_keys);
}

/* ---- dump ---------------------------------------------------------------- */

/** The two files of one dump: temporary and final paths, open streams. */
typedef struct dump_files {
    char key_tmp[PATH_MAX], vec_tmp[PATH_MAX];
    char key_path[PATH_MAX], vec_path[PATH_MAX];
    FILE *key_f, *vec_f;
    uint32_t dim;
    uint64_t rows;
    int write_errno; /* errno of the first failed write, 0 if none */
} dump_files_t;

/* mkdir -p: create dir and its missing parents. */
static int make_dirs(const char *dir)
{
    char path[PATH_MAX];
    struct stat st;
    size_t len = strlen(dir);

    if (len == 0 || len >= sizeof path)
        return -ENAMETOOLONG;
    memcpy(path, dir, len + 1);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(path, 0777) != 0 && errno != EEXIST)
        return -errno;
    if (stat(path, &st) != 0)
        return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

static int dump_paths(dump_files_t *f, const char *dir)
{
    int pid = (int)getpid();
    int n1 = snprintf(f->key_path, PATH_MAX, "%s/key", dir);
    int n2 = snprintf(f->vec_path, PATH_MAX, "%s/emb_vector", dir);
    int n3 = snprintf(f->key_tmp, PATH_MAX, "%s/.key.hps-shm-%d.tmp", dir, pid);
    int n4 = snprintf(f->vec_tmp, PATH_MAX, "%s/.emb_vector.hps-shm-%d.tmp", dir, pid);

    if (n1 >= PATH_MAX || n2 >= PATH_MAX || n3 >= PATH_MAX || n4 >= PATH_MAX)
        return -ENAMETOOLONG;
    return 0;
}

static FILE *open_tmp(const char *path)
{
    /* Only a dead hps-shm with our pid can have left this name: overwrite it. */
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
    FILE *f;

    if (fd < 0)
        return NULL;
    f = fdopen(fd, "wb");
    if (!f) {
        int e = errno;
        close(fd);
        unlink(path);
        errno = e;
    }
    return f;
}

static int dump_open(dump_files_t *f)
{
    f->key_f = open_tmp(f->key_tmp);
    if (!f->key_f)
        return -errno;
    f->vec_f = open_tmp(f->vec_tmp);
    if (!f->vec_f)
        return -errno;
    return 0;
}

/* Flush, sync and close one stream; returns 0 or -errno (stream closed). */
static int close_synced(FILE **fp)
{
    FILE *f = *fp;
    int err = 0;

    *fp = NULL;
    if (!f)
        return 0;
    if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        err = -errno;
    if (fclose(f) != 0 && err == 0)
        err = -errno;
    return err;
}

/* Drop the temporary files (after a failure). */
static void dump_abort(dump_files_t *f)
{
    if (f->key_f)
        fclose(f->key_f);
    if (f->vec_f)
        fclose(f->vec_f);
    f->key_f = f->vec_f = NULL;
    unlink(f->key_tmp);
    unlink(f->vec_tmp);
}

static int dump_row(void *ctx, uint64_t key, const float *value)
{
    dump_files_t *f = ctx;
    int64_t k;

    memcpy(&k, &key, sizeof k); /* same bits; 32-bit keys arrive zero-extended */
    if (fwrite(&k, sizeof k, 1, f->key_f) != 1 ||
        fwrite(value, sizeof *value, f->dim, f->vec_f) != f->dim) {
        f->write_errno = errno ? errno : EIO;
        return 1;
    }
    f->rows++;
    return 0;
}

/* Sync the directory so the renames survive a crash (best effort). */
static void sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* Close both temporaries and rename them into place. */
static int dump_commit(const hps__tool_t *t, dump_files_t *f, const char *dir)
{
    int err = close_synced(&f->key_f);
    int err2 = close_synced(&f->vec_f);

    if (err == 0)
        err = err2;
    if (err != 0) {
        dump_abort(f);
        return hps__tool_fail(t, err,
                              "check the free space and file size limits of the destination",
                              "cannot write the dump in '%s'", dir);
    }
    if (rename(f->vec_tmp, f->vec_path) != 0) {
        err = -errno;
        dump_abort(f);
        return hps__tool_fail(t, err, NULL, "cannot rename to '%s'", f->vec_path);
    }
    if (rename(f->key_tmp, f->key_path) != 0) {
        err = -errno;
        dump_abort(f);
        unlink(f->vec_path); /* never leave emb_vector without its keys */
        return hps__tool_fail(t, err, NULL, "cannot rename to '%s' (removed '%s' too)", f->key_path,
                              f->vec_path);
    }
    sync_dir(dir);
    return HPS__TOOL_OK;
}

static int dump_report(const hps__tool_t *t, const hps_table_info_t *ti, const dump_files_t *f,
                       const char *dir)
{
    uint64_t key_bytes = f->rows * sizeof(int64_t);
    uint64_t vec_bytes = f->rows * ti->dim * sizeof(float);
    json_object *o;

    if (!t->json) {
        printf("dumped %llu rows of %s/%s (dim %u) to %s: key %llu bytes, emb_vector %llu "
               "bytes\n",
               (unsigned long long)f->rows, ti->model, ti->table, ti->dim, dir,
               (unsigned long long)key_bytes, (unsigned long long)vec_bytes);
        return hps__tool_flush(t);
    }
    o = json_object_new_object();
    hps__tool_jset(o, "segment", hps__tool_json_str(t->argv[0]));
    hps__tool_jset(o, "model", hps__tool_json_str(ti->model));
    hps__tool_jset(o, "table", hps__tool_json_str(ti->table));
    hps__tool_jset(o, "dim", json_object_new_int64(ti->dim));
    hps__tool_jset(o, "rows", hps__tool_json_u64(f->rows));
    hps__tool_jset(o, "dir", hps__tool_json_str(dir));
    hps__tool_jset(o, "key_file", hps__tool_json_str(f->key_path));
    hps__tool_jset(o, "key_file_bytes", hps__tool_json_u64(key_bytes));
    hps__tool_jset(o, "emb_vector_file", hps__tool_json_str(f->vec_path));
    hps__tool_jset(o, "emb_vector_file_bytes", hps__tool_json_u64(vec_bytes));
    return hps__tool_emit_json(t, o);
}

static int dump_table(const hps__tool_t *t, hps_shmdb_t *db, uint32_t id,
                      const hps_table_info_t *ti)
{
    const char *dir = t->argv[3];
    dump_files_t *f = calloc(1, sizeof *f);
    hps_err_t err;
    int rc;

    if (!f)
        return hps__tool_fail(t, -ENOMEM, NULL, "cannot dump");
    f->dim = ti->dim;
    err = make_dirs(dir);
    if (err == 0)
        err = dump_paths(f, dir);
    if (err != 0) {
        free(f);
        return hps__tool_fail(t, err, NULL, "cannot create directory '%s'", dir);
    }
    err = dump_open(f);
    if (err == 0)
        err = hps_shmdb_iterate(db, id, dump_row, f);
    if (err != 0) {
        if (f->write_errno)
            err = -f->write_errno;
        dump_abort(f);
        free(f);
        return hps__tool_fail(t, err, "nothing was written; check the destination",
                              "cannot dump %s/%s to '%s'", ti->model, ti->table, dir);
    }
    rc = dump_commit(t, f, dir);
    if (rc == HPS__TOOL_OK)
        rc = dump_report(t, ti, f, dir);
    free(f);
    return rc;
}

int hps__tool_cmd_dump(const hps__tool_t *t)
{
    return on_table(t, dump_table);
}
