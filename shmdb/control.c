/*
 * control.c -- model control requests through the segment (Triton's
 * explicit model control mode; include/hps/shmdb.h "Model control
 * requests").  A worker or any libhps client asks, the coordinator (the
 * segment's only writer of tables) does.
 *
 * Each request lives in one of the header's HPS_SHMDB_CTL_SLOTS slots
 * (layout.h struct shm_ctl_slot).  Its state word orders everything:
 *
 *   FREE --CAS by a requester--> CLAIMED --fields, then release store-->
 *   PENDING --CAS by the coordinator--> TAKEN --message, then release
 *   store--> DONE | FAILED --requester (or the coordinator's reap)--> FREE
 *
 * so a reader that sees PENDING (acquire) sees the op, id and model, and
 * one that sees DONE or FAILED sees the message.  A request that needs a
 * new segment stays TAKEN in the old one; its answer is the new segment's
 * result record (written before the segment is published, so it is seen
 * by every process that attaches it), or FAILED in the old slot when the
 * new segment could not be built.  Requests still PENDING when a new
 * segment is published are copied into it first (hps_shmdb_ctl_carry).
 */
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#define CLAIM_TIMEOUT_NS (10ull * 1000000000ull)

static struct shm_ctl *ctl(hps_shmdb_t *db)
{
    return &db->hdr->ctl;
}

static uint32_t state_of(struct shm_ctl_slot *s)
{
    return atomic_load_explicit(&s->state, memory_order_acquire);
}

/* Stamp s with stamp_ns (CLOCK_REALTIME; 0: now), then publish state. */
static void set_state(struct shm_ctl_slot *s, uint32_t state, uint64_t stamp_ns)
{
    atomic_store_explicit(&s->stamp_ns, stamp_ns ? stamp_ns : hps__shmdb_clock_ns(CLOCK_REALTIME),
                          memory_order_relaxed);
    atomic_store_explicit(&s->state, state, memory_order_release);
}

/* Copy a NUL-terminated string of at most cap - 1 bytes. */
static void copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = 0;
}

/* Claim a free slot of db for request id and fill it in state st (PENDING,
 * or an answer with its message), stamped stamp_ns (CLOCK_REALTIME; 0:
 * now).  0 or HPS_EBUSY (every slot in use). */
static hps_err_t put(hps_shmdb_t *db, uint32_t op, const char *model, uint64_t id, uint32_t st,
                     const char *message, uint64_t stamp_ns)
{
    for (int i = 0; i < HPS_SHMDB_CTL_SLOTS; i++) {
        struct shm_ctl_slot *s = &ctl(db)->slot[i];
        uint32_t free_state = HPS_CTL_FREE;
        if (!atomic_compare_exchange_strong_explicit(&s->state, &free_state, HPS_CTL_CLAIMED,
                                                     memory_order_acquire, memory_order_relaxed))
            continue;
        atomic_store_explicit(&s->stamp_ns, hps__shmdb_clock_ns(CLOCK_REALTIME),
                              memory_order_relaxed);
        s->op = op;
        atomic_store_explicit(&s->id, id, memory_order_relaxed);
        copy_str(s->model, sizeof(s->model), model);
        copy_str(s->message, sizeof(s->message), message);
        set_state(s, st, stamp_ns); /* a carried answer keeps its age */
        return 0;
    }
    return HPS_EBUSY;
}

hps_err_t hps_shmdb_ctl_submit(hps_shmdb_t *db, hps_model_op_t op, const char *model, uint64_t id)
{
    if (!db || !model || !id || (op != HPS_MODEL_LOAD && op != HPS_MODEL_UNLOAD))
        return HPS_EINVAL;
    size_t len = strlen(model);
    if (len == 0 || len > HPS_SHMDB_NAME_MAX)
        return HPS_EINVAL;
    return put(db, (uint32_t)op, model, id, HPS_CTL_PENDING, "", 0);
}

/* The slot holding request id in a state of the mask (bit per state), or NULL. */
static struct shm_ctl_slot *find(hps_shmdb_t *db, uint64_t id, unsigned mask, uint32_t *ret_state)
{
    for (int i = 0; i < HPS_SHMDB_CTL_SLOTS; i++) {
        struct shm_ctl_slot *s = &ctl(db)->slot[i];
        uint32_t st = state_of(s);
        if (st == HPS_CTL_FREE || !(mask & (1u << st)) ||
            atomic_load_explicit(&s->id, memory_order_relaxed) != id)
            continue;
        *ret_state = st;
        return s;
    }
    return NULL;
}

#define ANY_STATE                                                                                  \
    ((1u << HPS_CTL_CLAIMED) | (1u << HPS_CTL_PENDING) | (1u << HPS_CTL_TAKEN) |                   \
     (1u << HPS_CTL_DONE) | (1u << HPS_CTL_FAILED))

hps_err_t hps_shmdb_ctl_status(hps_shmdb_t *db, uint64_t id, hps_ctl_state_t *ret_state, char *msg,
                               size_t len)
{
    uint32_t st = 0;
    const char *text = "";
    struct shm_ctl_slot *s = id ? find(db, id, ANY_STATE, &st) : NULL;
    if (s) {
        if (st == HPS_CTL_DONE || st == HPS_CTL_FAILED)
            text = s->message;
    } else if (id && atomic_load_explicit(&ctl(db)->result_id, memory_order_relaxed) == id) {
        st = ctl(db)->result_state;
        text = ctl(db)->result_message;
    } else {
        return HPS_ENOTFOUND;
    }
    *ret_state = (hps_ctl_state_t)st;
    if (msg && len)
        copy_str(msg, len < HPS_SHMDB_CTL_MSG_MAX ? len : HPS_SHMDB_CTL_MSG_MAX, text);
    return 0;
}

/* Free slot s, found in state st, unless its state moved meanwhile (a
 * CAS); true when freed. */
static bool free_slot(struct shm_ctl_slot *s, uint32_t st)
{
    if (!atomic_compare_exchange_strong_explicit(&s->state, &st, HPS_CTL_FREE, memory_order_acq_rel,
                                                 memory_order_relaxed))
        return false;
    atomic_store_explicit(&s->id, 0, memory_order_relaxed);
    return true;
}

void hps_shmdb_ctl_release(hps_shmdb_t *db, uint64_t id)
{
    uint32_t st;
    struct shm_ctl_slot *s = find(db, id, (1u << HPS_CTL_DONE) | (1u << HPS_CTL_FAILED), &st);
    if (s)
        free_slot(s, st);
    else if (id) /* answered by the segment's result record: read, not to be carried */
        atomic_compare_exchange_strong_explicit(&ctl(db)->result_id, &id, 0, memory_order_relaxed,
                                                memory_order_relaxed);
}

bool hps_shmdb_ctl_withdraw(hps_shmdb_t *db, uint64_t id)
{
    uint32_t st;
    struct shm_ctl_slot *s = find(db, id, 1u << HPS_CTL_PENDING, &st);
    return s && free_slot(s, st);
}

bool hps_shmdb_ctl_busy(hps_shmdb_t *db, const char *model, hps_model_op_t *ret_op)
{
    for (int i = 0; i < HPS_SHMDB_CTL_SLOTS; i++) {
        struct shm_ctl_slot *s = &ctl(db)->slot[i];
        uint32_t st = state_of(s);
        if ((st != HPS_CTL_PENDING && st != HPS_CTL_TAKEN) ||
            strncmp(s->model, model, sizeof(s->model)) != 0)
            continue;
        if (ret_op)
            *ret_op = (hps_model_op_t)s->op;
        return true;
    }
    return false;
}

hps_err_t hps_shmdb_ctl_take(hps_shmdb_t *db, hps_ctl_request_t *ret)
{
    for (;;) {
        struct shm_ctl_slot *oldest = NULL;
        uint64_t oldest_ns = UINT64_MAX;
        for (int i = 0; i < HPS_SHMDB_CTL_SLOTS; i++) {
            struct shm_ctl_slot *s = &ctl(db)->slot[i];
            uint64_t ns = atomic_load_explicit(&s->stamp_ns, memory_order_relaxed);
            if (state_of(s) == HPS_CTL_PENDING && ns < oldest_ns) {
                oldest = s;
                oldest_ns = ns;
            }
        }
        if (!oldest)
            return HPS_ENOTFOUND;
        ret->id = atomic_load_explicit(&oldest->id, memory_order_relaxed);
        ret->op = oldest->op == HPS_MODEL_UNLOAD ? HPS_MODEL_UNLOAD : HPS_MODEL_LOAD;
        copy_str(ret->model, sizeof(ret->model), oldest->model);
        /* PENDING -> TAKEN by CAS: its requester may withdraw it meanwhile
         * (hps_shmdb_ctl_withdraw), and then it is not ours (look again). */
        uint32_t st = HPS_CTL_PENDING;
        if (atomic_compare_exchange_strong_explicit(&oldest->state, &st, HPS_CTL_TAKEN,
                                                    memory_order_acq_rel, memory_order_acquire)) {
            atomic_store_explicit(&oldest->stamp_ns, hps__shmdb_clock_ns(CLOCK_REALTIME),
                                  memory_order_relaxed);
            return 0;
        }
    }
}

hps_err_t hps_shmdb_ctl_answer(hps_shmdb_t *db, uint64_t id, bool ok, const char *msg)
{
    uint32_t st;
    struct shm_ctl_slot *s = find(db, id, (1u << HPS_CTL_PENDING) | (1u << HPS_CTL_TAKEN), &st);
    if (!s)
        return HPS_ENOTFOUND;
    copy_str(s->message, sizeof(s->message), msg ? msg : "");
    set_state(s, ok ? HPS_CTL_DONE : HPS_CTL_FAILED, 0);
    return 0;
}

hps_err_t hps_shmdb_ctl_set_result(hps_shmdb_t *db, uint64_t id, bool ok, const char *msg)
{
    struct shm_ctl *c = ctl(db);
    copy_str(c->result_message, sizeof(c->result_message), msg ? msg : "");
    c->result_state = ok ? HPS_CTL_DONE : HPS_CTL_FAILED;
    atomic_store_explicit(&c->result_id, id, memory_order_relaxed); /* published later */
    return 0;
}

size_t hps_shmdb_ctl_carry(hps_shmdb_t *from, hps_shmdb_t *to)
{
    size_t n = 0;
    struct shm_ctl *f = ctl(from);
    for (int i = 0; i < HPS_SHMDB_CTL_SLOTS; i++) {
        struct shm_ctl_slot *s = &f->slot[i];
        uint32_t st = state_of(s);
        if (st != HPS_CTL_PENDING && st != HPS_CTL_DONE && st != HPS_CTL_FAILED)
            continue;
        char model[sizeof(s->model)], message[sizeof(s->message)];
        copy_str(model, sizeof(model), s->model);
        copy_str(message, sizeof(message), st == HPS_CTL_PENDING ? "" : s->message);
        uint64_t id = atomic_load_explicit(&s->id, memory_order_relaxed);
        uint64_t stamp = atomic_load_explicit(&s->stamp_ns, memory_order_relaxed);
        if (id && state_of(s) == st &&
            put(to, s->op, model, id, st, message, st == HPS_CTL_PENDING ? 0 : stamp) == 0)
            n++;
    }
    /* The answer the old segment was built with, for a requester that has
     * not looked yet (one that has cleared result_id): an answered slot now. */
    uint64_t rid = atomic_load_explicit(&f->result_id, memory_order_relaxed);
    if (rid && (f->result_state == HPS_CTL_DONE || f->result_state == HPS_CTL_FAILED) &&
        put(to, 0, "", rid, f->result_state, f->result_message, 0) == 0)
        n++;
    return n;
}

size_t hps_shmdb_ctl_reap(hps_shmdb_t *db, uint64_t max_age_ns)
{
    size_t n = 0;
    uint64_t now = hps__shmdb_clock_ns(CLOCK_REALTIME);
    for (int i = 0; i < HPS_SHMDB_CTL_SLOTS; i++) {
        struct shm_ctl_slot *s = &ctl(db)->slot[i];
        uint32_t st = state_of(s);
        uint64_t age = now - atomic_load_explicit(&s->stamp_ns, memory_order_relaxed);
        bool stale = ((st == HPS_CTL_DONE || st == HPS_CTL_FAILED) && age > max_age_ns) ||
                     (st == HPS_CTL_CLAIMED && age > CLAIM_TIMEOUT_NS);
        if (stale && atomic_compare_exchange_strong_explicit(
                         &s->state, &st, HPS_CTL_FREE, memory_order_acq_rel, memory_order_relaxed))
            n++;
    }
    return n;
}

size_t hps_shmdb_ctl_abandon(hps_shmdb_t *db, const char *msg)
{
    size_t n = 0;
    for (int i = 0; i < HPS_SHMDB_CTL_SLOTS; i++) {
        struct shm_ctl_slot *s = &ctl(db)->slot[i];
        uint32_t st = HPS_CTL_TAKEN;
        if (state_of(s) != HPS_CTL_TAKEN)
            continue;
        copy_str(s->message, sizeof(s->message), msg ? msg : "");
        if (atomic_compare_exchange_strong_explicit(&s->state, &st, HPS_CTL_FAILED,
                                                    memory_order_acq_rel, memory_order_relaxed)) {
            atomic_store_explicit(&s->stamp_ns, hps__shmdb_clock_ns(CLOCK_REALTIME),
                                  memory_order_relaxed);
            n++;
        }
    }
    return n;
}
