/*
 * gshare.h -- handing the descriptors of shared GPU caches between worker
 * processes (worker/libhps/gshare.c).
 *
 * A cache created by hps_gcache_create_shared is reachable through a file
 * descriptor (CUDA VMM, POSIX handle).  Each worker that maps a shared cache
 * offers its descriptor on a Unix socket of its own in the abstract
 * namespace, "hps.<segment>.gcache.<pid>"; a worker joining a cache asks
 * one of the processes the registry lists (shmdb gcache registry) and
 * receives a duplicate by SCM_RIGHTS.  So the cache stays importable as long
 * as any process maps it, whoever created it.  Only processes of the same
 * user are answered (SO_PEERCRED).
 */
#ifndef HPS_WORKER_GSHARE_H
#define HPS_WORKER_GSHARE_H

#include <stdint.h>
#include <sys/types.h>

#include "hps/hps.h"

typedef struct gshare gshare_t;

/**
 * @brief Start serving this process's offers (a thread polling the socket).
 * @param[in] segment  segment name (the socket name's middle part).
 * @return 0, -errno (socket, bind: e.g. another process with our pid in
 *         another pid namespace), -ENOMEM.
 */
int gshare_start(const char *segment, gshare_t **ret);

/** Most descriptors one cache has (HPS_GCACHE_MAX_PARTS of hps/gcache.h). */
#define GSHARE_MAX_PARTS 33

/**
 * @brief Offer the num_fds descriptors of registry entry (index,
 * generation), part p being fds[p] (one unless the cache is sharded); they
 * stay owned by the caller and must stay open until gshare_stop.  A second
 * offer for the same index replaces the first.  Thread-safe.
 * @return 0 or -ENOMEM (s NULL, index >= HPS_SHMDB_MAX_GCACHES, num_fds
 *         not in 1..GSHARE_MAX_PARTS).
 */
int gshare_offer(gshare_t *s, uint32_t index, uint64_t generation, const int *fds,
                 uint32_t num_fds);

/** @brief Stop the thread and close the socket (NULL is a no-op); offered fds are not closed. */
void gshare_stop(gshare_t *s);

/**
 * @brief Ask process pid for its descriptor of part `part` of (index,
 * generation).
 * @param[out] ret_fd  a new descriptor in this process, owned by the caller.
 * @param[in] timeout_ms  for the connection and the answer each (>= 1;
 *                        smaller values count as 1).
 * @return 0; HPS_ENOTFOUND (pid does not offer it: no socket, other
 *         generation, no such part); HPS_ETIMEDOUT (no answer in timeout_ms, or the
 *         server's backlog is full); -errno.
 * The server answers one request at a time and gives a silent client at
 * most 200 ms.
 */
int gshare_fetch(const char *segment, pid_t pid, uint32_t index, uint32_t part, uint64_t generation,
                 int timeout_ms, int *ret_fd);

#endif
