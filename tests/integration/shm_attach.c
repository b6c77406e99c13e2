/*
 * shm-attach -- a test helper: attach to /dev/shm/hps.<name> as a process
 * of the given role with the given hps_proc_cap_t bits, and stay attached
 * until SIGTERM or SIGINT.  `shm-attach NAME worker 0` stands in for an
 * hps-worker of a build before the capabilities (it records none), which
 * int-control_config needs.  Prints "attached <pid>" once attached.
 * Exit status: 0 when stopped by a signal, 1 when it cannot attach, 2 on
 * bad usage.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hps/shmdb.h"

int main(int argc, char **argv)
{
    if (argc != 4 || (strcmp(argv[2], "worker") != 0 && strcmp(argv[2], "tool") != 0)) {
        fprintf(stderr, "usage: shm-attach NAME worker|tool CAPS\n");
        return 2;
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    hps_shmdb_proc_opts_t po = {
        .num_threads = 1,
        .role = strcmp(argv[2], "worker") == 0 ? HPS_ROLE_WORKER : HPS_ROLE_TOOL,
        .device = -1,
        .caps = (uint32_t)strtoul(argv[3], NULL, 0),
    };
    hps_shmdb_t *db = NULL;
    hps_err_t rc = hps_shmdb_attach(argv[1], &po, &db);
    if (rc < 0) {
        fprintf(stderr, "shm-attach: %s: %s\n", argv[1], hps_strerror(rc));
        return 1;
    }
    printf("attached %d\n", (int)getpid());
    fflush(stdout);
    int sig = 0;
    sigwait(&set, &sig);
    hps_shmdb_detach(db);
    return 0;
}
