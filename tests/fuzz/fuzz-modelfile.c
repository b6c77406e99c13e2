/*
 * fuzz-modelfile.c -- libFuzzer target: the model-file validator and reader
 * (coordinator/modelfile.c, include/hps/modelfile.h) on a table directory
 * holding the input's key and emb_vector files: hps_modelfile_validate_model,
 * hps_modelfile_check_table (NaN/Inf rows, duplicate keys), then open, chunk
 * sizes and reads of the first and last rows, with 8- and 4-byte keys.
 *
 * Input:  byte 0      dim - 1 (dim 1..256)
 *         byte 1      bit 0 key_bytes 4 (else 8), bits 1-2 what check_table
 *                     refuses (HPS_MODELFILE_NONFINITE, _DUPLICATES)
 *         bytes 2-3   K, little-endian: bytes of the key file
 *         K bytes     the key file
 *         rest        the emb_vector file
 *
 * The directory is $TMPDIR/hpsfuzz-modelfile.<pid> (default /tmp), removed
 * at exit; directories of processes that are gone (a crash) are removed by
 * the next run.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hps/modelfile.h"

#define PREFIX "hpsfuzz-modelfile."

static char dir[512], key_path[600], vec_path[600];

static const char *tmpdir(void)
{
    const char *t = getenv("TMPDIR");
    return t && *t ? t : "/tmp";
}

static void remove_dir(const char *d)
{
    char p[700];
    snprintf(p, sizeof(p), "%s/key", d);
    unlink(p);
    snprintf(p, sizeof(p), "%s/emb_vector", d);
    unlink(p);
    rmdir(d);
}

static void cleanup(void)
{
    remove_dir(dir);
}

/* Remove the directories of earlier runs whose process is gone. */
static void remove_stale(void)
{
    DIR *d = opendir(tmpdir());
    struct dirent *e;
    if (!d)
        return;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, PREFIX, sizeof(PREFIX) - 1) != 0)
            continue;
        char *end;
        long pid = strtol(e->d_name + sizeof(PREFIX) - 1, &end, 10);
        if (*end || pid <= 0 || (kill((pid_t)pid, 0) != 0 && errno == ESRCH)) {
            char p[600];
            snprintf(p, sizeof(p), "%s/%s", tmpdir(), e->d_name);
            remove_dir(p);
        }
    }
    closedir(d);
}

static void setup(void)
{
    remove_stale();
    snprintf(dir, sizeof(dir), "%s/" PREFIX "%ld", tmpdir(), (long)getpid());
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        perror(dir);
        abort();
    }
    snprintf(key_path, sizeof(key_path), "%s/key", dir);
    snprintf(vec_path, sizeof(vec_path), "%s/emb_vector", dir);
    atexit(cleanup);
}

static void put_file(const char *path, const uint8_t *p, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || (n && write(fd, p, n) != (ssize_t)n)) {
        perror(path);
        abort();
    }
    close(fd);
}

static void read_rows(uint32_t dim, uint32_t key_bytes)
{
    hps_modelfile_t *mf;
    char err[512];
    if (hps_modelfile_open(dir, dim, &mf, err, sizeof(err)) != 0)
        return;
    uint64_t rows = hps_modelfile_rows(mf);
    if (hps_modelfile_dim(mf) != dim || strcmp(hps_modelfile_dir(mf), dir) != 0)
        abort();
    uint64_t chunk = hps_modelfile_chunk_rows(mf, 4096);
    if (rows && (chunk == 0 || chunk > rows))
        abort();
    size_t n = rows < 4 ? (size_t)rows : 4;
    int64_t keys[4];
    uint32_t keys32[4];
    float *vecs = malloc((size_t)dim * 4 * 4);
    uint64_t firsts[2] = {0, rows - n};
    for (int i = 0; i < 2 && n; i++) {
        if (key_bytes == 8) {
            if (hps_modelfile_read(mf, firsts[i], n, keys, vecs, err, sizeof(err)) == 0) {
                size_t bad = 0;
                (void)hps_modelfile_keys_to_u32(keys, n, keys32, &bad);
            }
        } else {
            (void)hps_modelfile_read_u32(mf, firsts[i], n, keys32, vecs, err, sizeof(err));
        }
    }
    /* Out of range: must be refused, not read. */
    if (hps_modelfile_read(mf, rows, 1, keys, vecs, err, sizeof(err)) == 0)
        abort();
    free(vecs);
    hps_modelfile_close(mf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0])
        setup();
    if (size < 4)
        return 0;
    uint32_t dim = (uint32_t)data[0] + 1;
    uint32_t key_bytes = (data[1] & 1) ? 4 : 8;
    unsigned refuse = (data[1] >> 1) & 3;
    size_t k = (size_t)data[2] | (size_t)data[3] << 8;
    if (k > size - 4)
        k = size - 4;
    put_file(key_path, data + 4, k);
    put_file(vec_path, data + 4 + k, size - 4 - k);

    hps_modelfile_spec_t spec = {.table = "t", .dir = dir, .dim = dim, .key_bytes = key_bytes};
    char err[512];
    uint64_t rows = 0;
    if (hps_modelfile_validate_model(&spec, 1, &rows, err, sizeof(err)) == 0) {
        hps_modelfile_stats_t st;
        hps_modelfile_dup_t *dups = NULL;
        size_t ndups = 0;
        if (hps_modelfile_check_table(&spec, refuse, &st, &dups, &ndups, err, sizeof(err)) == 0) {
            if (st.rows != rows || st.dup_keys != ndups || st.nonfinite_rows > rows ||
                st.dup_rows >= (rows ? rows : 1))
                abort();
            for (size_t i = 1; i < ndups; i++)
                if (dups[i].last_row >= rows)
                    abort();
            char msg[1024];
            (void)hps_modelfile_stats_format(&st, dir, 3, msg, sizeof(msg));
        }
        free(dups);
    }
    read_rows(dim, key_bytes);
    return 0;
}
