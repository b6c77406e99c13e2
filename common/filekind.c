/* filekind.c -- hps_file_kind(): what a file that is not a regular file
 * is, for the messages that refuse it (INI, model files, shm keys). */
#include <sys/stat.h>

#include "hps/hps.h"

const char *hps_file_kind(mode_t mode)
{
    if (S_ISREG(mode))
        return "a regular file";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISCHR(mode) || S_ISBLK(mode))
        return "a device";
    if (S_ISSOCK(mode))
        return "a socket";
    return "not a regular file";
}
