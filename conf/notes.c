/*
 * notes.c -- what a valid configuration asks that this HPS serves otherwise:
 * HugeCTR keys it accepts (so that a HugeCTR configuration loads) but has no
 * such thing for.  Said by hps-coordinator at each start (conftext.c, as
 * warnings) and by `hps-conf check` (as warnings, exit status unchanged),
 * so that a HugeCTR configuration's intent is never dropped silently;
 * docs/configuration.md says the same beside each key.
 */
#include <stdio.h>

#include "conf/tools.h"

void hps_conf_notes(const hps_conf_t *conf, hps_conf_note_fn fn, void *ctx)
{
    char note[512];
    if (!conf || !fn)
        return;
    if (conf->volatile_db.type == HPS_CONF_VDB_DISABLED)
        fn(ctx, "[volatile_db] type = disabled: the shared-memory volatile DB, which every "
                "lookup goes through, holds no rows at start and keeps none of the misses "
                "(initial_cache_rate 0, cache_missed_embeddings false): each key is asked of the "
                "coordinator (the distributed DB, then the persistent DB); Kafka updates still go "
                "into it");
    static const char *const kinds[] = {[HPS_CONF_CACHE_DYNAMIC] = "dynamic",
                                        [HPS_CONF_CACHE_STATIC] = "static",
                                        [HPS_CONF_CACHE_UVM] = "uvm",
                                        [HPS_CONF_CACHE_STOCHASTIC] = "stochastic"};
    for (size_t i = 0; i < conf->num_models; i++) {
        const hps_conf_model_t *m = &conf->models[i];
        if (m->embedding_cache_type == HPS_CONF_CACHE_DYNAMIC && !m->use_static_table)
            continue;
        snprintf(note, sizeof(note),
                 "model %s: embedding_cache_type = %s%s: this HPS has the dynamic GPU embedding "
                 "cache only (gpucacheper sets its size; 1.0 holds the whole table)",
                 m->name, kinds[m->embedding_cache_type],
                 m->use_static_table ? ", use_static_table = true" : "");
        fn(ctx, note);
    }
}
