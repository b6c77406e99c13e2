/* util.c -- errors, files and time for hps-gen. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include "hps-gen.h"

int gen_fail(int err, const char *fmt, ...)
{
    va_list ap;

    fputs("hps-gen: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (err != 0)
        fprintf(stderr, ": %s", hps_strerror(err));
    fputc('\n', stderr);
    return GEN_FAIL;
}

int gen_usage(const char *fmt, ...)
{
    va_list ap;

    fputs("hps-gen: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\ntry 'hps-gen --help'\n", stderr);
    return GEN_USAGE;
}

void *gen_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);

    if (p == NULL) {
        fputs("hps-gen: out of memory\n", stderr);
        abort();
    }
    return p;
}

char *gen_strdupf(const char *fmt, ...)
{
    va_list ap;
    char *s = NULL;
    int n;

    va_start(ap, fmt);
    n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0) {
        fputs("hps-gen: out of memory\n", stderr);
        abort();
    }
    return s;
}

double gen_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

unsigned gen_default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);

    return n < 1 ? 1 : n > 16 ? 16 : (unsigned)n;
}

int gen_mkdir_p(const char *path)
{
    char *p = gen_strdupf("%s", path);
    int rc = 0;

    for (char *s = p + 1; rc == 0; s++) {
        bool end = *s == '\0';
        if (*s != '/' && !end)
            continue;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            rc = -errno;
        if (end)
            break;
        *s = '/';
    }
    if (rc == 0) {
        struct stat st;
        if (stat(path, &st) != 0)
            rc = -errno;
        else if (!S_ISDIR(st.st_mode))
            rc = -ENOTDIR;
    }
    free(p);
    return rc;
}

int gen_fsync_path(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int rc = 0;

    if (fd < 0)
        return -errno;
    if (fsync(fd) != 0 && errno != EINVAL)
        rc = -errno;
    close(fd);
    return rc;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_DP)
        return rmdir(path) != 0 ? -errno : 0;
    return unlink(path) != 0 ? -errno : 0;
}

int gen_rm_rf(const char *path)
{
    int rc = nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);

    if (rc == -1)
        return errno == ENOENT ? 0 : -errno;
    return rc;
}

int gen_path_state(const char *path, bool *ret_exists, bool *ret_nonempty)
{
    struct stat st;
    DIR *d;
    struct dirent *e;
    bool nonempty = false;

    if (lstat(path, &st) != 0) {
        if (errno != ENOENT)
            return -errno;
        *ret_exists = *ret_nonempty = false;
        return 0;
    }
    *ret_exists = true;
    if (!S_ISDIR(st.st_mode)) {
        *ret_nonempty = true; /* a file in the way counts as content */
        return 0;
    }
    if ((d = opendir(path)) == NULL)
        return -errno;
    while (!nonempty && (e = readdir(d)) != NULL)
        nonempty = strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    *ret_nonempty = nonempty;
    return 0;
}

int gen_pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
    const char *p = buf;

    while (len > 0) {
        ssize_t n = pwrite(fd, p, len, (off_t)off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

static char *parent_dir(const char *path)
{
    const char *slash = strrchr(path, '/');

    if (slash == NULL)
        return gen_strdupf(".");
    if (slash == path)
        return gen_strdupf("/");
    return gen_strdupf("%.*s", (int)(slash - path), path);
}

int gen_write_file_atomic(const char *path, const void *data, size_t len)
{
    char *tmp = gen_strdupf("%s.tmp-%ld", path, (long)getpid());
    char *dir = parent_dir(path);
    int rc = 0, fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

    if (fd < 0) {
        rc = -errno;
        goto out;
    }
    rc = gen_pwrite_all(fd, data, len, 0);
    if (rc == 0 && fsync(fd) != 0)
        rc = -errno;
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) != 0)
        rc = -errno;
    if (rc != 0)
        unlink(tmp);
    else
        rc = gen_fsync_path(dir);
out:
    free(tmp);
    free(dir);
    return rc;
}
