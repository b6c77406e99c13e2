/*
 * control.c -- a client's side of Triton's model control (include/hps/
 * client.h hps_client_model_control, hps_client_model_state): requests go
 * to the coordinator through the segment's control slots (shmdb/control.c),
 * and their answers come back in the same segment, or in the new segment
 * that a load or unload publishes (its result record), which this client's
 * maintenance thread switches to.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define POLL_NS       10000000L /* 10 ms between looks at the answer */
#define MAX_RESUBMITS 3         /* times a request not found is asked again */
/* A wait for an answer ends once the coordinator looks gone (no liveness
 * lock, or no heartbeat for worker_timeout_ms: the maintenance round's
 * verdict, every 50 ms) and its last heartbeat is older than
 * worker_timeout_ms + GONE_NS: a coordinator killed (its lock gone at
 * once) and started again by a supervisor within worker_timeout_ms takes
 * the request over (resubmitted if it was lost); GONE_NS, a few rounds,
 * keeps one stale verdict of a client that just attached from ending it. */
#define GONE_NS 200000000ull

/* Triton's answer to an unload of a model it never served
 * (model_repository_manager.cc).  hps-worker decides it too, before its
 * call comes here, from its registry (kserve_repo.c:
 * hps__kserve_repo_control): the same rule, the same text. */
#define UNLOAD_NEVER_SERVED "Model to be unloaded has not been served"

/* The CLOCK_MONOTONIC ns of the serving coordinator's last heartbeat, or
 * 0 (none, or not attached). */
static uint64_t coord_heartbeat_ns(hps_client_t *cl)
{
    hps_segment_info_t si = {0};
    pthread_rwlock_rdlock(&cl->seg_lock);
    if (!cl->db || hps_shmdb_segment_info(cl->db, &si) != 0)
        si.coord_heartbeat_ns = 0;
    pthread_rwlock_unlock(&cl->seg_lock);
    return si.coord_heartbeat_ns;
}

/* Stop waiting for request id: take it back if no coordinator took it yet
 * (it is then never carried out); true when withdrawn. */
static bool withdraw(hps_client_t *cl, uint64_t id)
{
    pthread_rwlock_rdlock(&cl->seg_lock);
    bool w = cl->db && hps_shmdb_ctl_withdraw(cl->db, id);
    pthread_rwlock_unlock(&cl->seg_lock);
    return w;
}

static bool explicit_mode(const hps_client_t *cl)
{
    return cl->conf->hps.model_control_mode == HPS_CONF_MODEL_CONTROL_EXPLICIT;
}

hps_err_t hps_client_model_state(hps_client_t *cl, size_t mi, hps_model_state_t *ret_state,
                                 bool *ret_served)
{
    if (!cl || !ret_state || mi >= cl->num_models)
        return hps__client_fail(HPS_EINVAL, "model state: bad argument (model %zu)", mi);
    client_model_t *m = &cl->models[mi];
    hps_model_op_t op = HPS_MODEL_LOAD;
    pthread_rwlock_rdlock(&cl->seg_lock);
    bool resolved = atomic_load(&m->resolved);
    bool busy = cl->db && explicit_mode(cl) && hps_shmdb_ctl_busy(cl->db, m->conf->name, &op);
    bool known = cl->db && hps__client_models_known(cl);
    pthread_rwlock_unlock(&cl->seg_lock);
    bool alive = atomic_load(&cl->coord_alive);
    if (busy && (op == HPS_MODEL_UNLOAD || !resolved))
        *ret_state = op == HPS_MODEL_UNLOAD ? HPS_MODEL_UNLOADING : HPS_MODEL_LOADING;
    else if (resolved && alive)
        *ret_state = HPS_MODEL_READY;
    else if (!resolved && known && !atomic_load(&m->misfit))
        *ret_state = HPS_MODEL_UNLOADED;
    else
        *ret_state = HPS_MODEL_UNAVAILABLE;
    if (ret_served)
        *ret_served = atomic_load(&m->served);
    return 0;
}

bool hps_client_model_loaded(const hps_client_t *cl, size_t mi)
{
    if (!cl || mi >= cl->num_models)
        return false;
    /* An older shape of a model another entry serves (or will serve: the
     * newest) is not, so that every listing names the model once.  A misfit
     * (the segment holds another dimension) stays "loaded": its lookups fail
     * with the message that says why. */
    if (hps__client_model_current(cl, mi) != mi)
        return false;
    return atomic_load(&cl->models[mi].resolved) || atomic_load(&cl->models[mi].misfit) ||
           !hps__client_models_known(cl);
}

/* A request id no other process on the host picks: the pid, a per-process
 * counter and the clock. */
static uint64_t new_id(void)
{
    static _Atomic uint64_t seq;
    uint64_t n = atomic_fetch_add(&seq, 1) + 1;
    uint64_t id = ((uint64_t)(uint32_t)getpid() << 32) ^ (n << 20) ^ (hps__client_now_ns() >> 10);
    return id ? id : 1;
}

/* One look at request id: 1 answered (*ret_rc, msg), 0 not yet, -1 lost. */
static int look(hps_client_t *cl, uint64_t id, hps_err_t *ret_rc, char *msg, size_t len)
{
    hps_ctl_state_t st;
    pthread_rwlock_rdlock(&cl->seg_lock);
    hps_err_t rc = cl->db ? hps_shmdb_ctl_status(cl->db, id, &st, msg, len) : HPS_ENOTFOUND;
    if (rc == 0 && (st == HPS_CTL_DONE || st == HPS_CTL_FAILED))
        hps_shmdb_ctl_release(cl->db, id);
    pthread_rwlock_unlock(&cl->seg_lock);
    if (rc < 0)
        return -1;
    if (st != HPS_CTL_DONE && st != HPS_CTL_FAILED)
        return 0;
    *ret_rc = st == HPS_CTL_DONE ? 0 : HPS_EIO;
    return 1;
}

/* Leave request id in the segment this client serves from now. */
/* Leave the request in the segment; why it cannot go into text (len). */
static hps_err_t submit(hps_client_t *cl, hps_model_op_t op, const char *model, uint64_t id,
                        char *text, size_t len)
{
    pthread_rwlock_rdlock(&cl->seg_lock);
    hps_err_t rc = cl->db ? hps_shmdb_ctl_submit(cl->db, op, model, id) : HPS_EAGAIN;
    pthread_rwlock_unlock(&cl->seg_lock);
    if (rc == HPS_EAGAIN)
        snprintf(text, len, "model control: no segment attached (is hps-coordinator running?)");
    else if (rc == HPS_EBUSY)
        snprintf(text, len, "model control: %d requests already wait; try again",
                 HPS_SHMDB_CTL_SLOTS);
    else if (rc < 0)
        snprintf(text, len, "model control: bad model name '%.200s%s' (1 to %d characters)", model,
                 strlen(model) > 200 ? "..." : "", HPS_SHMDB_NAME_MAX);
    return rc;
}

hps_err_t hps_client_model_control(hps_client_t *cl, hps_model_op_t op, const char *model,
                                   uint32_t timeout_ms, char *msg, size_t msg_len)
{
    char text[HPS_SHMDB_CTL_MSG_MAX] = "";
    if (msg && msg_len)
        msg[0] = 0;
    if (!cl || !model || (op != HPS_MODEL_LOAD && op != HPS_MODEL_UNLOAD))
        return hps__client_fail(HPS_EINVAL, "model control: bad argument");
    if (!explicit_mode(cl))
        return hps__client_fail(HPS_EUNSUPPORTED, "explicit model load / unload is not allowed "
                                                  "if polling is enabled");
    bool known = false;
    for (size_t i = 0; i < cl->num_models && !known; i++)
        known = strcmp(cl->models[i].conf->name, model) == 0;
    if (!known)
        hps_client_refresh_models(cl, NULL); /* added to the INI since it was read */
    /* Triton's refusal of an unload, as hps-worker answers it (400) */
    if (op == HPS_MODEL_UNLOAD) {
        size_t mi;
        hps_model_state_t st = HPS_MODEL_UNLOADED;
        bool served = false;
        if (hps_client_model_find(cl, model, &mi) < 0 ||
            (hps_client_model_state(cl, mi, &st, &served) == 0 && st == HPS_MODEL_UNLOADED &&
             !served)) {
            if (msg && msg_len)
                snprintf(msg, msg_len, "%s", UNLOAD_NEVER_SERVED);
            return hps__client_fail(HPS_EIO, "model control: unload %s: %s", model,
                                    UNLOAD_NEVER_SERVED);
        }
    }
    uint64_t id = new_id();
    hps_err_t rc = submit(cl, op, model, id, text, sizeof(text));
    uint64_t end = hps__client_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = POLL_NS};
    int resubmits = 0;
    uint64_t gone_since = 0;
    while (rc >= 0) {
        int got = look(cl, id, &rc, text, sizeof(text));
        if (got > 0)
            break;
        /* Not in the segment this client serves from: it was left in an
         * older one (this client had not switched yet when it asked, and no
         * coordinator reads that one any more), or a coordinator was
         * killed before it carried it over.  Loads and unloads are
         * idempotent: ask again, in the current segment. */
        if (got < 0 && resubmits++ < MAX_RESUBMITS &&
            (rc = submit(cl, op, model, id, text, sizeof(text))) < 0)
            break;
        if (got < 0 && resubmits > MAX_RESUBMITS) {
            rc = HPS_EIO;
            snprintf(text, sizeof(text),
                     "the request was lost %d times (coordinators restarted "
                     "without it); the models are as the last one's start-up "
                     "says",
                     MAX_RESUBMITS);
            break;
        }
        uint64_t now = hps__client_now_ns();
        gone_since = atomic_load(&cl->coord_alive) ? 0 : gone_since ? gone_since : now;
        bool gone = false;
        if (gone_since && now - gone_since >= GONE_NS) {
            uint64_t beat = coord_heartbeat_ns(cl), wt = cl->conf->hps.worker_timeout_ms;
            gone = !beat || beat > now || now - beat >= wt * 1000000ull + GONE_NS;
        }
        const char *why = NULL;
        char late[48];
        if (atomic_load(&cl->cancel) || atomic_load(&cl->stop)) {
            rc = HPS_ETIMEDOUT;
            why = "the wait was cancelled (the client closes)";
        } else if (gone) {
            rc = HPS_EAGAIN;
            why = "no hps-coordinator serves (gone or stopped)";
        } else if (timeout_ms && now >= end) {
            rc = HPS_ETIMEDOUT;
            snprintf(late, sizeof(late), "no answer within %u ms", timeout_ms);
            why = late;
        }
        if (why) {
            /* Withdrawn, it never happens; taken, a coordinator works on it. */
            snprintf(text, sizeof(text), "%s; %s", why,
                     withdraw(cl, id) ? "the request was withdrawn: nothing changed"
                                      : "the request may still complete");
            break;
        }
        nanosleep(&ts, NULL);
    }
    if (msg && msg_len)
        snprintf(msg, msg_len, "%s", text);
    if (rc < 0)
        return hps__client_fail(rc, "%s", text);
    return 0;
}
