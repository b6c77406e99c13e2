/*
 * worker.h -- hps-worker (private to the executable): the lookup library's
 * client (include/hps/client.h) behind the KServe v2 front end.
 */
#ifndef HPS_WORKER_H
#define HPS_WORKER_H

#include <pthread.h>

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
    /* The front end, set before it starts (its registry follows the
     * client's models: worker_sync_models). */
    hps_kserve_t *srv;       /* sync_mu */
    pthread_mutex_t sync_mu; /* serializes worker_sync_models, worker_follow_models */
    /* Model i was loaded at the last worker_follow_models (sync_mu): an
     * unload is seen as a change. */
    bool was_loaded[HPS_CONF_MAX_MODELS];
    /* The version model i was answered from at the last
     * worker_follow_models (sync_mu; 0 = none yet): a change is logged. */
    uint32_t was_version[HPS_CONF_MAX_MODELS];
} worker_t;

/* backend.c: the KServe backend over the client. */
void worker_backend(worker_t *w, hps_kserve_backend_t *ret);

/* backend.c: model c's registry entry for the front end; maxq and dims
 * ((c->num_tables) each) and ver (24 bytes) are the caller's, used by ret. */
void worker_describe_model(const worker_t *w, const hps_conf_model_t *c, uint32_t *maxq,
                           uint32_t *dims, char *ver, hps_kserve_model_t *ret);

/* backend.c: add the models the client learned since (added to the INI,
 * hps_client_refresh_models) to the front end's registry, in the client's
 * order (model index i is the same in both).  Thread-safe.  Returns how
 * many were added. */
size_t worker_sync_models(worker_t *w);

/* backend.c: bring the front end up to the client: worker_sync_models, the
 * version each model is answered from (it changes when the coordinator
 * reloads and the client switches segments), and unloads (the model's
 * Triton statistics start again at 0 for its next load).  Called by
 * serve()'s loop every 50 ms and by a model control call that succeeded,
 * before it answers (metadata and the index then show what the call did).
 * Thread-safe (sync_mu); a no-op before w->srv is set. */
void worker_follow_models(worker_t *w);

#endif
