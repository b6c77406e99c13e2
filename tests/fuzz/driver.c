/*
 * driver.c -- runs a fuzz target's LLVMFuzzerTestOneInput on files, without
 * libFuzzer: the unit suite's replay of the seed corpora and of the
 * regression inputs under tests/fuzz/ (built with the normal compiler, and
 * under ASan + UBSan in CI's sanitizer build).
 *
 *   fuzz-replay-TARGET PATH...
 *
 * Each PATH is a file or a directory (its regular files not starting with
 * '.', sorted by name).  A directory may be empty (regress/TARGET holds
 * only a .gitkeep until a fuzz run finds something), but a PATH that does
 * not exist fails: a path renamed in meson.build must not turn the replay
 * into a run of nothing.  So do no inputs at all: every target has seeds.
 * Output is TAP: one "ok" per input.  A crash or a sanitizer report ends
 * the run with the input's name printed just before.  Exit status 0 when
 * every PATH existed and every input ran.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char **files;
static size_t nfiles, capfiles;

static void add(const char *path)
{
    if (nfiles == capfiles) {
        capfiles = capfiles ? capfiles * 2 : 64;
        files = realloc(files, capfiles * sizeof(*files));
        if (!files)
            abort();
    }
    files[nfiles++] = strdup(path);
}

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char **missing;
static size_t nmissing;

static void collect(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        missing = realloc(missing, (nmissing + 1) * sizeof(*missing));
        if (!missing)
            abort();
        missing[nmissing++] = strdup(path);
        return;
    }
    if (!S_ISDIR(st.st_mode)) {
        add(path);
        return;
    }
    DIR *d = opendir(path);
    struct dirent *e;
    size_t first = nfiles;
    while (d && (e = readdir(d)) != NULL) {
        char p[4096];
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof(p), "%s/%s", path, e->d_name);
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode))
            add(p);
    }
    if (d)
        closedir(d);
    qsort(files + first, nfiles - first, sizeof(*files), cmp);
}

static uint8_t *slurp(const char *path, size_t *ret_len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap)
            buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    *ret_len = len;
    return buf;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        collect(argv[i]);
    /* The missing paths first, then "no inputs" or one line per input. */
    size_t n = nmissing + (nfiles ? nfiles : 1);
    printf("1..%zu\n", n);
    int bad = 0;
    for (size_t i = 0; i < nmissing; i++) {
        printf("not ok %zu %s: no such file or directory\n", i + 1, missing[i]);
        free(missing[i]);
        bad = 1;
    }
    free(missing);
    if (nfiles == 0) {
        printf("not ok %zu no inputs (every target has seeds in corpus/TARGET)\n", nmissing + 1);
        bad = 1;
    }
    for (size_t i = 0; i < nfiles; i++) {
        size_t num = nmissing + i + 1, len = 0;
        uint8_t *buf = slurp(files[i], &len);
        if (!buf) {
            printf("not ok %zu %s: cannot read\n", num, files[i]);
            bad = 1;
            continue;
        }
        printf("# %s\n", files[i]);
        fflush(stdout);
        /* An exact-size copy, as libFuzzer passes: over-reads are caught. */
        uint8_t *in = malloc(len ? len : 1);
        memcpy(in, buf, len);
        LLVMFuzzerTestOneInput(in, len);
        free(in);
        free(buf);
        printf("ok %zu %s\n", num, files[i]);
        free(files[i]);
    }
    free(files);
    return bad;
}
