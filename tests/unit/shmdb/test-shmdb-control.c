/*
 * test-shmdb-control.c -- the model control slots (shmdb/control.c): a
 * request submitted, taken by the coordinator, answered and released; and
 * taken back by its requester (hps_shmdb_ctl_withdraw) only while no
 * coordinator took it, so that exactly one of the two wins when they race.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "testutil.h"

/* The fixture: a segment of the test's own (testutil.h). */
static int setup(void **state)
{
    if (t_seg_setup(state, "ctl") != 0)
        return -1;
    t_seg_create(*state, 16u << 20);
    return 0;
}

static hps_ctl_state_t state_of(hps_shmdb_t *db, uint64_t id)
{
    hps_ctl_state_t st = HPS_CTL_FREE;
    if (hps_shmdb_ctl_status(db, id, &st, NULL, 0) != 0)
        return HPS_CTL_FREE;
    return st;
}

/* Submitted, taken, answered, read and released; a taken request can no
 * longer be withdrawn. */
static void test_take_answer(void **state)
{
    struct t_seg_fixture *f = *state;
    HPS_ASSERT_OK(hps_shmdb_ctl_submit(f->db, HPS_MODEL_LOAD, "m", 7));
    HPS_ASSERT_EQ(state_of(f->db, 7), HPS_CTL_PENDING);
    hps_ctl_request_t rq;
    HPS_ASSERT_OK(hps_shmdb_ctl_take(f->db, &rq));
    HPS_ASSERT_EQ(rq.id, 7);
    HPS_ASSERT_EQ(rq.op, HPS_MODEL_LOAD);
    assert_string_equal(rq.model, "m");
    HPS_ASSERT_EQ(state_of(f->db, 7), HPS_CTL_TAKEN);
    assert_false(hps_shmdb_ctl_withdraw(f->db, 7));
    HPS_ASSERT_ERR(hps_shmdb_ctl_take(f->db, &rq), HPS_ENOTFOUND);
    HPS_ASSERT_OK(hps_shmdb_ctl_answer(f->db, 7, true, "loaded"));
    char msg[64];
    hps_ctl_state_t st;
    HPS_ASSERT_OK(hps_shmdb_ctl_status(f->db, 7, &st, msg, sizeof(msg)));
    HPS_ASSERT_EQ(st, HPS_CTL_DONE);
    assert_string_equal(msg, "loaded");
    assert_false(hps_shmdb_ctl_withdraw(f->db, 7)); /* answered: not taken back */
    hps_shmdb_ctl_release(f->db, 7);
    HPS_ASSERT_ERR(hps_shmdb_ctl_status(f->db, 7, &st, NULL, 0), HPS_ENOTFOUND);
}

/* Withdrawn while PENDING: gone, never taken, its slot free again. */
static void test_withdraw_pending(void **state)
{
    struct t_seg_fixture *f = *state;
    for (uint64_t id = 1; id <= HPS_SHMDB_CTL_SLOTS; id++)
        HPS_ASSERT_OK(hps_shmdb_ctl_submit(f->db, HPS_MODEL_UNLOAD, "n", id));
    HPS_ASSERT_ERR(hps_shmdb_ctl_submit(f->db, HPS_MODEL_UNLOAD, "n", 99), HPS_EBUSY);
    assert_true(hps_shmdb_ctl_withdraw(f->db, 3));
    assert_false(hps_shmdb_ctl_withdraw(f->db, 3));
    assert_false(hps_shmdb_ctl_withdraw(f->db, 12345)); /* never submitted */
    hps_ctl_state_t st;
    HPS_ASSERT_ERR(hps_shmdb_ctl_status(f->db, 3, &st, NULL, 0), HPS_ENOTFOUND);
    HPS_ASSERT_OK(hps_shmdb_ctl_submit(f->db, HPS_MODEL_UNLOAD, "n", 99)); /* its slot */
    hps_ctl_request_t rq;
    for (int i = 0; i < HPS_SHMDB_CTL_SLOTS; i++) {
        HPS_ASSERT_OK(hps_shmdb_ctl_take(f->db, &rq));
        assert_true(rq.id != 3);
    }
    HPS_ASSERT_ERR(hps_shmdb_ctl_take(f->db, &rq), HPS_ENOTFOUND);
}

/* A requester withdrawing and a coordinator taking, racing: exactly one of
 * the two wins each request. */
struct race {
    hps_shmdb_t *db;
    atomic_bool stop;
    _Atomic uint64_t taken;
};

static void *taker(void *arg)
{
    struct race *r = arg;
    hps_ctl_request_t rq;
    while (!atomic_load(&r->stop))
        if (hps_shmdb_ctl_take(r->db, &rq) == 0) {
            atomic_fetch_add(&r->taken, 1);
            hps_shmdb_ctl_answer(r->db, rq.id, true, "");
            hps_shmdb_ctl_release(r->db, rq.id);
        }
    return NULL;
}

static void test_withdraw_races_take(void **state)
{
    struct t_seg_fixture *f = *state;
    struct race r = {.db = f->db};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, taker, &r), 0);
    uint64_t withdrawn = 0, n = 20000, rng = 12345;
    for (uint64_t id = 1; id <= n; id++) {
        /* every slot busy for a second: slots lost to the race (a taker that
         * marked a withdrawn slot TAKEN holds it for good) */
        for (int tries = 0; hps_shmdb_ctl_submit(f->db, HPS_MODEL_LOAD, "m", id) == HPS_EBUSY;
             tries++) {
            T_CHECK(tries < 100000, "request %llu: no free slot for 1 s", (unsigned long long)id);
            usleep(10);
        }
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        for (volatile uint64_t spin = (rng >> 33) % 4000; spin > 0; spin--)
            ; /* a few microseconds at most: the taker sometimes gets there first */
        if (hps_shmdb_ctl_withdraw(f->db, id))
            withdrawn++;
    }
    /* until the taker has answered and released every request it took */
    for (int i = 0; i < 2000 && withdrawn + atomic_load(&r.taken) < n; i++)
        usleep(1000);
    atomic_store(&r.stop, true);
    pthread_join(th, NULL);
    printf("# %llu withdrawn, %llu taken of %llu\n", (unsigned long long)withdrawn,
           (unsigned long long)atomic_load(&r.taken), (unsigned long long)n);
    HPS_ASSERT_EQ(withdrawn + atomic_load(&r.taken), n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_take_answer, setup, t_seg_teardown),
        cmocka_unit_test_setup_teardown(test_withdraw_pending, setup, t_seg_teardown),
        cmocka_unit_test_setup_teardown(test_withdraw_races_take, setup, t_seg_teardown),
    };
    return cmocka_run_group_tests_name("shmdb-control", tests, NULL, NULL);
}
