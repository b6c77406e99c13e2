/*
 * test-ddb-live.c -- the distributed DB against a real Redis Cluster, whose
 * seed address is in $HPS_REDIS_ADDR (tests/integration/test_redis_live.py
 * starts the cluster and runs this program; without the variable it skips:
 * the TAP plan "1..0 # SKIP", exit 0).  TAP via cmocka.
 *
 *  - insert + lookup give exact vectors (dims 1, 16, 128; int64 and uint32
 *    keys), misses are misses, erase removes from both hashes;
 *  - a partition's slot is migrated to another master while lookups run:
 *    after MIGRATE the old owner answers ASK (the client must send ASKING),
 *    after SETSLOT NODE it answers MOVED (the client must update its map);
 *    every lookup stays exact, and the target node counts ASKING calls;
 *  - overflow: concurrent inserters into one table never leave a partition
 *    over its margin (all three policies);
 *  - a wrong password is refused with -EACCES and a message.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "hps/ddb.h"
#include "hps/gen.h"
#include "hps/rcluster.h"

static const char *g_addr, *g_pw;
static char g_msg[1024];

static hps_ddb_t *open_db(hps_overflow_policy_t pol, uint64_t margin)
{
    hps_ddb_opts_t o;
    hps_ddb_t *db = NULL;
    hps_ddb_opts_init(&o);
    o.address = g_addr;
    o.password = g_pw;
    o.num_partitions = 4;
    o.max_batch_size = 64;
    o.overflow_policy = pol;
    o.overflow_margin = margin;
    o.overflow_resolution_target = 0.5;
    o.timeout_ms = 5000;
    if (hps_ddb_open(&o, &db, g_msg, sizeof(g_msg)) < 0)
        fail_msg("open: %s", g_msg);
    return db;
}

/* n keys of table tid: gen keys (int64) or low 32 bits (uint32). */
static void *make_keys(uint32_t kb, uint32_t tid, size_t n, size_t first)
{
    char *k = malloc(n * kb);
    for (size_t i = 0; i < n; i++) {
        int64_t key = hps_gen_key_w(tid, first + i, kb);
        if (kb == 8)
            memcpy(k + i * 8, &key, 8);
        else {
            uint32_t k32 = (uint32_t)key;
            memcpy(k + i * 4, &k32, 4);
        }
    }
    return k;
}

static int64_t key_of(const void *keys, uint32_t kb, size_t i)
{
    if (kb == 8) {
        int64_t k;
        memcpy(&k, (const char *)keys + i * 8, 8);
        return k;
    }
    uint32_t k;
    memcpy(&k, (const char *)keys + i * 4, 4);
    return k;
}

static float *make_vals(uint32_t tid, const void *keys, uint32_t kb, size_t n, uint32_t dim)
{
    float *v = malloc(n * dim * sizeof(float));
    for (size_t i = 0; i < n; i++)
        hps_gen_vector(tid, key_of(keys, kb, i), dim, v + i * dim);
    return v;
}

/* Look up n keys; the first `present` must hit with exact vectors. */
static void expect(hps_ddb_table_t *t, uint32_t tid, const void *keys, uint32_t kb, size_t n,
                   size_t present, uint32_t dim)
{
    float *got = calloc(n * dim, sizeof(float)), *want = malloc(dim * sizeof(float));
    bool *found = calloc(n, 1);
    size_t hits = 0;
    if (hps_ddb_lookup(t, n, keys, got, found, &hits, g_msg, sizeof(g_msg)) < 0)
        fail_msg("lookup: %s", g_msg);
    assert_int_equal(hits, present);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(found[i], i < present);
        if (i >= present)
            continue;
        hps_gen_vector(tid, key_of(keys, kb, i), dim, want);
        assert_memory_equal(got + i * dim, want, dim * sizeof(float));
    }
    free(got);
    free(want);
    free(found);
}

static void roundtrip(hps_ddb_t *db, uint32_t kb, uint32_t dim)
{
    char name[32];
    hps_ddb_table_t *t;
    size_t n = 700, m = 500;
    snprintf(name, sizeof(name), "rt_k%u_d%u", kb, dim);
    assert_int_equal(hps_ddb_table(db, "live", name, dim, kb, &t), 0);
    void *keys = make_keys(kb, 3, n, 0);
    float *v = make_vals(3, keys, kb, m, dim);
    if (hps_ddb_insert(t, m, keys, v, g_msg, sizeof(g_msg)) < 0)
        fail_msg("insert: %s", g_msg);
    expect(t, 3, keys, kb, n, m, dim);
    /* erase the last 100 present keys: they become misses */
    assert_int_equal(hps_ddb_erase(t, 100, (char *)keys + 400 * kb, g_msg, sizeof(g_msg)), 0);
    expect(t, 3, keys, kb, 400, 400, dim);
    uint64_t rows = 0, r;
    for (unsigned p = 0; p < 4; p++) {
        assert_int_equal(hps_ddb_partition_rows(t, p, &r, g_msg, sizeof(g_msg)), 0);
        rows += r;
    }
    assert_int_equal(rows, 400);
    hps_ddb_erase(t, 400, keys, NULL, 0);
    free(keys);
    free(v);
}

static void test_roundtrip(void **state)
{
    (void)state;
    hps_ddb_t *db = open_db(HPS_EVICT_RANDOM, UINT64_MAX);
    static const uint32_t dims[] = {1, 16, 128};
    for (int i = 0; i < 3; i++) {
        roundtrip(db, 8, dims[i]);
        roundtrip(db, 4, dims[i]);
    }
    hps_ddb_close(db);
}

/* ---- slot migration: ASK, then MOVED --------------------------------- */

typedef struct node {
    char id[64];
    int port;
} node_t;

static redisContext *raw(int port)
{
    redisContext *c = redisConnect("127.0.0.1", port);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    if (g_pw[0])
        freeReplyObject(redisCommand(c, "AUTH %s", g_pw));
    return c;
}

static int seed_port(void)
{
    return atoi(strrchr(g_addr, ':') + 1);
}

/* Owner of slot and another master, from CLUSTER NODES. */
static void owner_and_other(uint16_t slot, node_t *own, node_t *other)
{
    redisContext *c = raw(seed_port());
    redisReply *r = redisCommand(c, "CLUSTER NODES");
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    own->port = other->port = 0;
    for (char *line = strtok(r->str, "\n"); line; line = strtok(NULL, "\n")) {
        char id[64], addr[128], flags[128];
        if (sscanf(line, "%63s %127s %127s", id, addr, flags) != 3 || !strstr(flags, "master") ||
            strstr(flags, "fail"))
            continue;
        int port = atoi(strchr(addr, ':') + 1);
        bool owns = false;
        char *p = line;
        for (int f = 0; f < 8 && p; f++)
            p = strchr(p + 1, ' ');
        while (p && *p) {
            int lo, hi;
            int k = sscanf(p, " %d-%d", &lo, &hi);
            if (k == 1)
                hi = lo;
            if (k >= 1 && lo <= slot && slot <= hi)
                owns = true;
            p = strchr(p + 1, ' ');
        }
        node_t *n = owns ? own : other;
        if (n->port == 0) {
            snprintf(n->id, sizeof(n->id), "%s", id);
            n->port = port;
        }
    }
    freeReplyObject(r);
    redisFree(c);
    assert_int_not_equal(own->port, 0);
    assert_int_not_equal(other->port, 0);
}

static long long asking_calls(int port)
{
    redisContext *c = raw(port);
    redisReply *r = redisCommand(c, "INFO commandstats");
    char *s = strstr(r->str, "cmdstat_asking:calls=");
    long long n = s ? atoll(s + strlen("cmdstat_asking:calls=")) : 0;
    freeReplyObject(r);
    redisFree(c);
    return n;
}

static void cmd_ok(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("%s: %s", fmt, r->str);
    freeReplyObject(r);
}

/* Table "live".name (dim 8, int64 keys) holding n rows of gen table tid;
 * its keys and values are returned (free them). */
static hps_ddb_table_t *filled(hps_ddb_t *db, const char *name, uint32_t tid, size_t n,
                               void **ret_keys, float **ret_vals)
{
    hps_ddb_table_t *t;
    assert_int_equal(hps_ddb_table(db, "live", name, 8, 8, &t), 0);
    *ret_keys = make_keys(8, tid, n, 0);
    *ret_vals = make_vals(tid, *ret_keys, 8, n, 8);
    assert_int_equal(hps_ddb_insert(t, n, *ret_keys, *ret_vals, g_msg, sizeof(g_msg)), 0);
    return t;
}

static void test_migration_ask_moved(void **state)
{
    (void)state;
    hps_ddb_t *db = open_db(HPS_EVICT_OLDEST, UINT64_MAX);
    size_t n = 400;
    void *keys;
    float *v;
    hps_ddb_table_t *t = filled(db, "mig", 5, n, &keys, &v);
    expect(t, 5, keys, 8, n, n, 8);

    char vk[HPS_DDB_KEY_MAX], tk[HPS_DDB_KEY_MAX];
    hps_ddb_key_name("live", "mig", 0, 'v', vk, sizeof(vk));
    hps_ddb_key_name("live", "mig", 0, 't', tk, sizeof(tk));
    uint16_t slot = hps_rcluster_key_slot(vk, strlen(vk));
    node_t src, dst;
    owner_and_other(slot, &src, &dst);
    redisContext *a = raw(src.port), *b = raw(dst.port);
    long long ask0 = asking_calls(dst.port);
    cmd_ok(b, "CLUSTER SETSLOT %d IMPORTING %s", slot, src.id);
    cmd_ok(a, "CLUSTER SETSLOT %d MIGRATING %s", slot, dst.id);
    if (g_pw[0])
        cmd_ok(a, "MIGRATE 127.0.0.1 %d %s 0 5000 AUTH %s KEYS %s %s", dst.port, "", g_pw, vk, tk);
    else
        cmd_ok(a, "MIGRATE 127.0.0.1 %d %s 0 5000 KEYS %s %s", dst.port, "", vk, tk);
    expect(t, 5, keys, 8, n, n, 8); /* partition 0 now answers with ASK */
    assert_true(asking_calls(dst.port) > ask0);
    cmd_ok(b, "CLUSTER SETSLOT %d NODE %s", slot, dst.id);
    cmd_ok(a, "CLUSTER SETSLOT %d NODE %s", slot, dst.id);
    expect(t, 5, keys, 8, n, n, 8); /* MOVED, map updated */
    expect(t, 5, keys, 8, n, n, 8);
    /* and back, so the cluster is as it was */
    cmd_ok(a, "CLUSTER SETSLOT %d IMPORTING %s", slot, dst.id);
    cmd_ok(b, "CLUSTER SETSLOT %d MIGRATING %s", slot, src.id);
    if (g_pw[0])
        cmd_ok(b, "MIGRATE 127.0.0.1 %d %s 0 5000 AUTH %s KEYS %s %s", src.port, "", g_pw, vk, tk);
    else
        cmd_ok(b, "MIGRATE 127.0.0.1 %d %s 0 5000 KEYS %s %s", src.port, "", vk, tk);
    cmd_ok(a, "CLUSTER SETSLOT %d NODE %s", slot, src.id);
    cmd_ok(b, "CLUSTER SETSLOT %d NODE %s", slot, src.id);
    expect(t, 5, keys, 8, n, n, 8);
    redisFree(a);
    redisFree(b);
    free(keys);
    free(v);
    hps_ddb_close(db);
}

/* ---- concurrent overflow ---------------------------------------------- */

typedef struct ins {
    hps_ddb_table_t *t;
    size_t first;
} ins_t;

static void *inserter(void *arg)
{
    ins_t *in = arg;
    for (size_t r = 0; r < 10; r++) {
        size_t n = 200;
        void *keys = make_keys(8, 6, n, in->first + r * n);
        float *v = make_vals(6, keys, 8, n, 4);
        hps_ddb_insert(in->t, n, keys, v, NULL, 0);
        free(keys);
        free(v);
    }
    return NULL;
}

static void test_concurrent_overflow(void **state)
{
    (void)state;
    static const char *names[] = {"ovr", "ovl", "ovo"};
    for (int pol = 0; pol < 3; pol++) {
        hps_ddb_t *db = open_db((hps_overflow_policy_t)pol, 100);
        hps_ddb_table_t *t;
        assert_int_equal(hps_ddb_table(db, "live", names[pol], 4, 8, &t), 0);
        pthread_t th[4];
        ins_t in[4];
        for (int i = 0; i < 4; i++) {
            in[i] = (ins_t){.t = t, .first = (size_t)i * 100000};
            pthread_create(&th[i], NULL, inserter, &in[i]);
        }
        for (int i = 0; i < 4; i++)
            pthread_join(th[i], NULL);
        /* one more insert resolves whatever a concurrent resolution skipped */
        ins_t last = {.t = t, .first = 900000};
        inserter(&last);
        for (unsigned p = 0; p < 4; p++) {
            uint64_t rows = 0;
            assert_int_equal(hps_ddb_partition_rows(t, p, &rows, g_msg, sizeof(g_msg)), 0);
            if (rows == 0 || rows > 100)
                fail_msg("policy %d partition %u: %llu rows, margin 100", pol, p,
                         (unsigned long long)rows);
        }
        hps_ddb_stats_t st;
        hps_ddb_stats(db, &st);
        assert_true(st.evicted_rows > 0);
        hps_ddb_close(db);
    }
}

/* ---- access tracking ---------------------------------------------------- */

/* HGET of one field through the cluster client (routes by slot). */
static redisReply *cluster_hget(const char *hash, const void *field, size_t flen)
{
    hps_rcluster_opts_t o;
    hps_rcluster_t *rc;
    hps_rcluster_opts_init(&o);
    o.address = g_addr;
    o.password = g_pw;
    assert_int_equal(hps_rcluster_create(&o, &rc, g_msg, sizeof(g_msg)), 0);
    const char *argv[] = {"HGET", hash, field};
    size_t len[] = {4, strlen(hash), flen};
    hps_rcluster_cmd_t c = {
        .argc = 3, .argv = argv, .argvlen = len, .slot = hps_rcluster_key_slot(hash, strlen(hash))};
    assert_int_equal(hps_rcluster_exec(rc, 1, &c, g_msg, sizeof(g_msg)), 0);
    hps_rcluster_destroy(rc);
    return c.reply;
}

static void test_touch(void **state)
{
    (void)state;
    for (int pol = 1; pol <= 2; pol++) {
        hps_ddb_t *db = open_db((hps_overflow_policy_t)pol, UINT64_MAX);
        hps_ddb_table_t *t;
        const char *name = pol == 1 ? "tlfu" : "tlru";
        size_t n = 50;
        assert_int_equal(hps_ddb_table(db, "live", name, 4, 8, &t), 0);
        void *keys = make_keys(8, 7, n, 0);
        float *v = make_vals(7, keys, 8, n, 4);
        assert_int_equal(hps_ddb_insert(t, n, keys, v, g_msg, sizeof(g_msg)), 0);
        expect(t, 7, keys, 8, n, n, 4);
        expect(t, 7, keys, 8, n, n, 4);
        hps_ddb_close(db); /* drains the touch queue */
        int64_t k = key_of(keys, 8, 0);
        char tk[HPS_DDB_KEY_MAX];
        hps_ddb_key_name("live", name, (unsigned)(hps_rrxmrrxmsx_0((uint64_t)k) % 4), 't', tk,
                         sizeof(tk));
        redisReply *r = cluster_hget(tk, &k, 8);
        assert_int_equal(r->type, REDIS_REPLY_STRING);
        if (pol == 1)
            assert_string_equal(r->str, "3"); /* insert + two lookups */
        else
            assert_int_equal(r->len, 8); /* raw time_t */
        freeReplyObject(r);
        free(keys);
        free(v);
    }
}

/* A partition's value hash replaced by another type (WRONGTYPE replies):
 * the lookup answers the other partitions' keys, reports the error and
 * counts it (it used to return 0 with the partition's keys silently
 * missing). */
static void test_wrongtype(void **state)
{
    (void)state;
    hps_ddb_t *db = open_db(HPS_EVICT_RANDOM, UINT64_MAX);
    size_t n = 400;
    void *keys;
    float *v;
    hps_ddb_table_t *t = filled(db, "wt", 6, n, &keys, &v);
    char vk[HPS_DDB_KEY_MAX];
    hps_ddb_key_name("live", "wt", 0, 'v', vk, sizeof(vk));
    node_t own, other;
    owner_and_other(hps_rcluster_key_slot(vk, strlen(vk)), &own, &other);
    redisContext *c = raw(own.port);
    cmd_ok(c, "DEL %s", vk);
    cmd_ok(c, "SET %s not-a-hash", vk);
    hps_ddb_stats_t st0, st1;
    hps_ddb_stats(db, &st0);
    float *out = calloc(n * 8, sizeof(float));
    bool *found = calloc(n, sizeof(bool));
    size_t hits = 0;
    g_msg[0] = 0;
    assert_int_equal(hps_ddb_lookup(t, n, keys, out, found, &hits, g_msg, sizeof(g_msg)), HPS_EIO);
    assert_non_null(strstr(g_msg, "WRONGTYPE"));
    hps_ddb_stats(db, &st1);
    assert_int_equal(st1.errors, st0.errors + 1);
    assert_true(hits > 0 && hits < n); /* the three healthy partitions still answer */
    for (size_t i = 0; i < n; i++)
        if (found[i])
            assert_memory_equal(out + i * 8, v + i * 8, 8 * sizeof(float));
    cmd_ok(c, "DEL %s", vk);
    redisFree(c);
    hps_ddb_erase(t, n, keys, NULL, 0);
    free(out);
    free(found);
    free(keys);
    free(v);
    hps_ddb_close(db);
}

static void test_wrong_password(void **state)
{
    (void)state;
    hps_ddb_opts_t o;
    hps_ddb_t *db = NULL;
    hps_ddb_opts_init(&o);
    o.address = g_addr;
    o.password = "not-the-password";
    char err[512] = "";
    hps_err_t rc = hps_ddb_open(&o, &db, err, sizeof(err));
    assert_int_equal(rc, -EACCES);
    assert_null(db);
    assert_non_null(strstr(err, "AUTH"));
}

int main(void)
{
    g_addr = getenv("HPS_REDIS_ADDR");
    g_pw = getenv("HPS_REDIS_PASSWORD") ? getenv("HPS_REDIS_PASSWORD") : "";
    if (!g_addr) {
        printf("1..0 # SKIP HPS_REDIS_ADDR not set (run by test_redis_live.py)\n");
        return 0; /* a TAP skip; exit 77 would be an error under TAP */
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),           cmocka_unit_test(test_migration_ask_moved),
        cmocka_unit_test(test_concurrent_overflow), cmocka_unit_test(test_touch),
        cmocka_unit_test(test_wrongtype),           cmocka_unit_test(test_wrong_password),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
