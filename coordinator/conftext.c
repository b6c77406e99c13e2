/*
 * conftext.c -- the configuration a coordinator serves, as INI text, carried
 * across its re-executions.
 *
 * A reload (SIGHUP) and a model load or unload execute the coordinator
 * again (main.c).  The new image does not read the INI file for what it
 * builds: the old image hands it the exact text to build (the file as it
 * was checked at SIGHUP; for a model load, the serving configuration with
 * that model's section taken from the file: hps_conf_splice_section), and
 * the text that serves, which a failed build falls back to.  So a file
 * edited meanwhile, or another model's section broken or changed in it,
 * never reaches what a load request or a fallback builds, and a fallback
 * rebuilds exactly what served (its persistent DB rows included).
 *
 * The texts travel in memfds (not files: the password stays in memory),
 * named by descriptor number in the environment.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf/tools.h"
#include "coord.h"
#include "hps/log.h"

/* The text of the memfd whose number env holds (the variable and the
 * descriptor are both gone after); NULL when env is not set.  *ret_err: an
 * unreadable descriptor. */
static char *take_text(const char *env, bool *ret_err)
{
    const char *v = getenv(env);
    int64_t fd;
    char *text = NULL;
    struct stat st;
    if (!v)
        return NULL;
    bool is_fd = hps_parse_int(v, 0, 1 << 20, &fd);
    if (is_fd && fstat((int)fd, &st) == 0 && st.st_size >= 0 &&
        (text = malloc((size_t)st.st_size + 1))) {
        size_t got = 0;
        while (got < (size_t)st.st_size) {
            ssize_t n = pread((int)fd, text + got, (size_t)st.st_size - got, (off_t)got);
            if (n <= 0 && !(n < 0 && errno == EINTR))
                break;
            got += n > 0 ? (size_t)n : 0;
        }
        text[got] = '\0';
        if (got != (size_t)st.st_size) {
            free(text);
            text = NULL;
        }
    }
    if (!text)
        *ret_err = true;
    if (is_fd)
        close((int)fd);
    unsetenv(env);
    return text;
}

/* hps_conf_notes' notes, as warnings of this start. */
static void warn_note(void *ctx, const char *note)
{
    (void)ctx;
    HPS_WARN("%s", note);
}

int coord_conf_load(const char *path, hps_conf_t **ret_conf, char **ret_text, char **ret_prev_text)
{
    char err[1024];
    bool bad = false;
    char *text = take_text(HPS_CONF_FD_ENV, &bad);
    *ret_prev_text = take_text(HPS_PREV_CONF_FD_ENV, &bad);
    if (bad) {
        HPS_ERROR("reload: the configuration handed over by the previous image cannot be read");
        free(text);
        free(*ret_prev_text);
        *ret_prev_text = NULL;
        return HPS_EXIT_RUNTIME;
    }
    hps_err_t rc = text ? 0 : hps_conf_read_file(path, &text, err, sizeof(err));
    if (!rc)
        rc = hps_conf_load_string(text, path, ret_conf, err, sizeof(err));
    if (rc < 0) {
        HPS_ERROR("%s", err);
        free(text);
        free(*ret_prev_text);
        *ret_prev_text = NULL;
        return HPS_EXIT_USAGE;
    }
    *ret_text = text;
    hps_conf_notes(*ret_conf, warn_note, NULL);
    return 0;
}

void coord_conf_unpass(const char *env)
{
    const char *v = getenv(env);
    int64_t fd;
    if (v && hps_parse_int(v, 0, 1 << 20, &fd))
        close((int)fd);
    unsetenv(env);
}

bool coord_conf_pass(const char *env, const char *text)
{
    int fd = memfd_create("hps-coordinator-conf", 0); /* no CLOEXEC: for the next image */
    size_t len = strlen(text), put = 0;
    while (fd >= 0 && put < len) {
        ssize_t n = write(fd, text + put, len - put);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        put += (size_t)n;
    }
    if (fd < 0 || put < len) {
        HPS_ERROR("reload: cannot hand the configuration to the next image: %s",
                  strerror(fd < 0 ? errno : EIO));
        if (fd >= 0)
            close(fd);
        return false;
    }
    char v[16];
    snprintf(v, sizeof(v), "%d", fd);
    setenv(env, v, 1);
    return true;
}
