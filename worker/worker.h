/*
 * worker.h -- hps-worker (private to the executable): the lookup library's
 * client (include/hps/client.h) behind the KServe v2 front end.
 */
#ifndef HPS_WORKER_H
#define HPS_WORKER_H

#include "hps/client.h"
#include "hps/conf.h"
#include "hps/kserve.h"

/* Exit codes of hps-worker. */
enum {
    HPS_WEXIT_OK = 0,
    HPS_WEXIT_RUNTIME = 1,
    HPS_WEXIT_USAGE = 2,
    HPS_WEXIT_HTTP = 3, /* the HTTP or metrics port could not be opened */
};

typedef struct worker {
    const hps_conf_t *conf;
    hps_client_t *client; /* device --device, instance --instance */
} worker_t;

/* backend.c: the KServe backend over the client. */
void worker_backend(worker_t *w, hps_kserve_backend_t *ret);

#endif
