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
 *  - hps_ddb_check_sample() finds rows written with fewer partitions,
 *    another dimension or another key width; a lookup that meets values of
 *    the wrong length counts them (bad_values) and reports them to
 *    opts.warn once per table per interval;
 *  - a wrong password is refused with -EACCES and a message;
 *  - a hung master (SIGSTOP: it accepts connections and answers nothing)
 *    costs a lookup lookup_timeout_ms (50 ms here), not the 1 s deadline
 *    of other calls: the other masters' keys are still found, later
 *    lookups skip the node or probe it within the same deadline, and a
 *    write holding the node's only connection does not make a lookup wait.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
    o.lookup_timeout_ms = 5000; /* a busy test machine must not turn hits into misses */
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

/* cache_missed_embeddings' insert (hps_ddb_insert_missing): rows Redis
 * holds stay as they are (an online update that came after the lower
 * layer was read), the missing ones are written; insert_rows counts the
 * written ones only. */
static void test_insert_missing(void **state)
{
    (void)state;
    hps_ddb_t *db = open_db(HPS_EVICT_LEAST_USED, UINT64_MAX);
    hps_ddb_table_t *t;
    size_t n = 300, dim = 8;
    assert_int_equal(hps_ddb_table(db, "live", "nx", (uint32_t)dim, 8, &t), 0);
    void *keys = make_keys(8, 5, n, 0);
    float *newer = make_vals(5, keys, 8, n, (uint32_t)dim);            /* the update's rows */
    float *older = make_vals(6, keys, 8, n, (uint32_t)dim);            /* the lower layer's */
    if (hps_ddb_insert(t, 100, keys, newer, g_msg, sizeof(g_msg)) < 0) /* keys [0, 100) */
        fail_msg("insert: %s", g_msg);
    hps_ddb_stats_t before, after;
    hps_ddb_stats(db, &before);
    if (hps_ddb_insert_missing(t, n, keys, older, g_msg, sizeof(g_msg)) < 0)
        fail_msg("insert_missing: %s", g_msg);
    hps_ddb_stats(db, &after);
    assert_int_equal(after.insert_rows - before.insert_rows, n - 100);
    float *got = calloc(n * dim, sizeof(float));
    bool *found = calloc(n, 1);
    size_t hits = 0;
    if (hps_ddb_lookup(t, n, keys, got, found, &hits, g_msg, sizeof(g_msg)) < 0)
        fail_msg("lookup: %s", g_msg);
    assert_int_equal(hits, n);
    for (size_t i = 0; i < n; i++) /* the update's row kept; the others written */
        assert_memory_equal(got + i * dim, (i < 100 ? newer : older) + i * dim,
                            dim * sizeof(float));
    hps_ddb_erase(t, n, keys, NULL, 0);
    free(got);
    free(found);
    free(keys);
    free(newer);
    free(older);
    hps_ddb_close(db);
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

/* ---- rows in another layout --------------------------------------------- */

/* A handle like open_db()'s with np partitions and a warn callback. */
static hps_ddb_t *open_db_np(unsigned np, void (*warn)(void *, const char *), void *ctx)
{
    hps_ddb_opts_t o;
    hps_ddb_t *db = NULL;
    hps_ddb_opts_init(&o);
    o.address = g_addr;
    o.password = g_pw;
    o.num_partitions = np;
    o.max_batch_size = 64;
    o.timeout_ms = 5000;
    o.lookup_timeout_ms = 5000;
    o.warn = warn;
    o.warn_ctx = ctx;
    if (hps_ddb_open(&o, &db, g_msg, sizeof(g_msg)) < 0)
        fail_msg("open: %s", g_msg);
    return db;
}

/* n rows of gen table 7 written into live.name through db (with its
 * partition count), as dim floats and kb-byte keys; erased at the end by
 * the caller with the returned table. */
static hps_ddb_table_t *write_rows(hps_ddb_t *db, const char *name, uint32_t dim, uint32_t kb,
                                   size_t n, void **ret_keys)
{
    hps_ddb_table_t *t;
    assert_int_equal(hps_ddb_table(db, "live", name, dim, kb, &t), 0);
    void *keys = make_keys(kb, 7, n, 0);
    float *v = make_vals(7, keys, kb, n, dim);
    if (hps_ddb_insert(t, n, keys, v, g_msg, sizeof(g_msg)) < 0)
        fail_msg("insert: %s", g_msg);
    free(v);
    *ret_keys = keys;
    return t;
}

static hps_ddb_sample_t sample(hps_ddb_table_t *t)
{
    hps_ddb_sample_t s;
    if (hps_ddb_check_sample(t, 16, &s, g_msg, sizeof(g_msg)) < 0)
        fail_msg("check_sample: %s", g_msg);
    return s;
}

/* hps_ddb_check_sample(): the INI's layout passes (absent hashes too);
 * rows written with fewer partitions, another dimension or another key
 * width are found, with what the first faulty field holds. */
static void test_check_sample(void **state)
{
    (void)state;
    hps_ddb_t *db = open_db_np(4, NULL, NULL), *db2 = open_db_np(2, NULL, NULL),
              *other = open_db_np(4, NULL, NULL);
    size_t n = 300;
    hps_ddb_table_t *t;
    void *keys;

    assert_int_equal(hps_ddb_table(db, "live", "cs_empty", 8, 8, &t), 0);
    hps_ddb_sample_t s = sample(t);
    assert_int_equal(s.fault, HPS_DDB_SAMPLE_OK);
    assert_int_equal(s.fields, 0);

    hps_ddb_table_t *w = write_rows(db, "cs_ok", 8, 8, n, &keys);
    s = sample(w);
    assert_int_equal(s.fault, HPS_DDB_SAMPLE_OK);
    assert_int_equal(s.hashes, 4);
    assert_true(s.fields >= 4 && s.fields <= 4 * 16);
    hps_ddb_erase(w, n, keys, NULL, 0);
    free(keys);

    /* written with 2 partitions, read with 4: half the keys of p0 and p1
     * belong to p2 and p3 */
    w = write_rows(db2, "cs_np", 8, 8, n, &keys);
    assert_int_equal(hps_ddb_table(db, "live", "cs_np", 8, 8, &t), 0);
    s = sample(t);
    assert_int_equal(s.fault, HPS_DDB_SAMPLE_PARTITION);
    assert_true(s.part < 2);
    assert_int_equal(s.key_part, hps_rrxmrrxmsx_0(s.key) % 4);
    assert_int_not_equal(s.key_part, s.part);
    assert_int_equal(s.hashes, 2);
    assert_true(s.bad >= 1 && s.bad <= s.fields);
    assert_int_equal(s.likely_partitions, 2);
    hps_ddb_erase(w, n, keys, NULL, 0);
    free(keys);

    /* another dimension */
    w = write_rows(other, "cs_dim", 16, 8, n, &keys);
    assert_int_equal(hps_ddb_table(db, "live", "cs_dim", 8, 8, &t), 0);
    s = sample(t);
    assert_int_equal(s.fault, HPS_DDB_SAMPLE_VALUE_BYTES);
    assert_int_equal(s.found_bytes, 64);
    assert_int_equal(s.want_bytes, 32);
    assert_int_equal(s.bad, s.fields);
    hps_ddb_erase(w, n, keys, NULL, 0);
    free(keys);

    /* 32-bit keys in a table of 64-bit keys */
    w = write_rows(other, "cs_kb", 8, 4, n, &keys);
    assert_int_equal(hps_ddb_table(db, "live", "cs_kb", 8, 8, &t), 0);
    s = sample(t);
    assert_int_equal(s.fault, HPS_DDB_SAMPLE_KEY_BYTES);
    assert_int_equal(s.found_bytes, 4);
    assert_int_equal(s.want_bytes, 8);
    hps_ddb_erase(w, n, keys, NULL, 0);
    free(keys);

    assert_int_equal(hps_ddb_check_sample(t, 0, &s, NULL, 0), HPS_EINVAL);
    hps_ddb_close(db);
    hps_ddb_close(db2);
    hps_ddb_close(other);
}

typedef struct warned {
    pthread_mutex_t mu;
    int calls;
    char last[1024];
} warned_t;

static void on_warn(void *ctx, const char *msg)
{
    warned_t *w = ctx;
    pthread_mutex_lock(&w->mu);
    w->calls++;
    snprintf(w->last, sizeof(w->last), "%s", msg);
    pthread_mutex_unlock(&w->mu);
}

/* Stored values of the wrong length: misses, counted in bad_values, and
 * reported to opts.warn once per table per interval (they used to be
 * skipped without a trace). */
static void test_bad_values(void **state)
{
    (void)state;
    warned_t wn = {.mu = PTHREAD_MUTEX_INITIALIZER};
    hps_ddb_t *db = open_db_np(4, on_warn, &wn), *other = open_db_np(4, NULL, NULL);
    size_t n = 100;
    void *keys, *keys2;
    hps_ddb_table_t *w = write_rows(other, "bv", 16, 8, n, &keys);
    hps_ddb_table_t *w2 = write_rows(other, "bv2", 16, 8, n, &keys2);
    hps_ddb_table_t *t, *t2;
    assert_int_equal(hps_ddb_table(db, "live", "bv", 8, 8, &t), 0);
    assert_int_equal(hps_ddb_table(db, "live", "bv2", 8, 8, &t2), 0);
    float *out = calloc(n * 8, sizeof(float));
    bool *found = calloc(n, sizeof(bool));
    size_t hits = 1;
    hps_ddb_stats_t st0, st;
    hps_ddb_stats(db, &st0);

    assert_int_equal(hps_ddb_lookup(t, n, keys, out, found, &hits, g_msg, sizeof(g_msg)), 0);
    assert_int_equal(hits, 0);
    hps_ddb_stats(db, &st);
    assert_int_equal(st.bad_values - st0.bad_values, n);
    assert_int_equal(st.lookup_hits - st0.lookup_hits, 0);
    assert_int_equal(wn.calls, 1);
    assert_non_null(strstr(wn.last, "model live table bv:"));
    assert_non_null(strstr(wn.last, "values of 64 bytes"));
    assert_non_null(strstr(wn.last, "8 floats (32 bytes)"));

    /* the same table again: counted, not reported within the interval */
    assert_int_equal(hps_ddb_lookup(t, n, keys, out, found, &hits, g_msg, sizeof(g_msg)), 0);
    hps_ddb_stats(db, &st);
    assert_int_equal(st.bad_values - st0.bad_values, 2 * n);
    assert_int_equal(wn.calls, 1);

    /* another table has its own interval */
    assert_int_equal(hps_ddb_lookup(t2, n, keys2, out, found, &hits, g_msg, sizeof(g_msg)), 0);
    assert_int_equal(wn.calls, 2);
    assert_non_null(strstr(wn.last, "model live table bv2:"));

    hps_ddb_erase(w, n, keys, NULL, 0);
    hps_ddb_erase(w2, n, keys2, NULL, 0);
    free(keys);
    free(keys2);
    free(out);
    free(found);
    hps_ddb_close(db);
    hps_ddb_close(other);
}

/* ---- a hung master: the lookup deadline --------------------------------- */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static pid_t server_pid(int port)
{
    redisContext *c = raw(port);
    redisReply *r = redisCommand(c, "INFO server");
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    char *s = strstr(r->str, "process_id:");
    pid_t pid = s ? (pid_t)atol(s + strlen("process_id:")) : 0;
    freeReplyObject(r);
    redisFree(c);
    assert_true(pid > 0);
    return pid;
}

static hps_ddb_t *open_hang_db(unsigned timeout_ms, unsigned lookup_timeout_ms)
{
    hps_ddb_opts_t o;
    hps_ddb_t *db = NULL;
    hps_ddb_opts_init(&o);
    o.address = g_addr;
    o.password = g_pw;
    o.num_partitions = 4;
    o.num_node_connections = 1; /* a write holding it makes a lookup wait for one */
    o.timeout_ms = timeout_ms;
    o.lookup_timeout_ms = lookup_timeout_ms;
    if (hps_ddb_open(&o, &db, g_msg, sizeof(g_msg)) < 0)
        fail_msg("open: %s", g_msg);
    return db;
}

/* One timed lookup of n keys: its rc and hits, the exactness of what it
 * found, and its duration (ms). */
typedef struct timed {
    hps_err_t rc;
    size_t hits, wrong, victim_hits, other_misses;
    double ms;
} timed_t;

static timed_t timed_lookup(hps_ddb_table_t *t, const void *keys, const float *want, size_t n,
                            const bool *on_victim)
{
    float *out = calloc(n * 8, sizeof(float));
    bool *found = calloc(n, sizeof(bool));
    timed_t r = {0};
    double t0 = now_ms();
    r.rc = hps_ddb_lookup(t, n, keys, out, found, &r.hits, NULL, 0);
    r.ms = now_ms() - t0;
    for (size_t i = 0; i < n; i++) {
        if (found[i] && memcmp(out + i * 8, want + i * 8, 8 * sizeof(float)))
            r.wrong++;
        r.victim_hits += found[i] && on_victim[i];
        r.other_misses += !found[i] && !on_victim[i];
    }
    free(out);
    free(found);
    return r;
}

typedef struct hold {
    hps_ddb_table_t *t;
    const void *keys;
    const float *vals;
    size_t n;
    hps_err_t rc;
    double ms;
} hold_t;

static void *hold_insert(void *arg)
{
    hold_t *h = arg;
    double t0 = now_ms();
    h->rc = hps_ddb_insert(h->t, h->n, h->keys, h->vals, NULL, 0);
    h->ms = now_ms() - t0;
    return NULL;
}

static void test_hung_master_lookup_deadline(void **state)
{
    (void)state;
    enum { N = 400, DEADLINE = 50, BOUND = 250 }; /* ms; BOUND: deadline + a busy machine */
    hps_ddb_t *db = open_hang_db(1000, DEADLINE); /* 1000: the old fixed deadline */
    hps_ddb_t *db2 = open_hang_db(500, DEADLINE); /* its write holds the connection 500 ms */
    void *keys;
    float *v;
    hps_ddb_table_t *t = filled(db, "hang", 8, N, &keys, &v), *t2;
    assert_int_equal(hps_ddb_table(db2, "live", "hang", 8, 8, &t2), 0);

    /* the master of partition 0, and which keys live on it */
    char vk[HPS_DDB_KEY_MAX];
    node_t victim, other, own;
    hps_ddb_key_name("live", "hang", 0, 'v', vk, sizeof(vk));
    owner_and_other(hps_rcluster_key_slot(vk, strlen(vk)), &victim, &other);
    bool part_on_victim[4], on_victim[N];
    for (unsigned p = 0; p < 4; p++) {
        hps_ddb_key_name("live", "hang", p, 'v', vk, sizeof(vk));
        owner_and_other(hps_rcluster_key_slot(vk, strlen(vk)), &own, &other);
        part_on_victim[p] = own.port == victim.port;
    }
    size_t nv = 0;
    for (size_t i = 0; i < N; i++)
        nv += on_victim[i] = part_on_victim[hps_rrxmrrxmsx_0((uint64_t)key_of(keys, 8, i)) % 4];
    timed_t warm = timed_lookup(t, keys, v, N, on_victim),
            warm2 = timed_lookup(t2, keys, v, N, on_victim);
    assert_int_equal(warm.hits, N);
    assert_int_equal(warm2.hits, N);
    assert_true(nv > 0 && nv < N); /* keys on the stopped master and on the others */

    /* Stopped for well under cluster-node-timeout (1 s), so the other
     * masters keep serving their slots. */
    pid_t pid = server_pid(victim.port);
    assert_int_equal(kill(pid, SIGSTOP), 0);
    double t0 = now_ms();
    /* db2 writes the node's rows: they go to it alone, on db2's one
     * connection to it, which the write holds until its deadline */
    int64_t *hk = malloc(nv * 8);
    float *hv = malloc(nv * 8 * sizeof(float));
    for (size_t i = 0, j = 0; i < N; i++)
        if (on_victim[i]) {
            hk[j] = key_of(keys, 8, i);
            memcpy(hv + j++ * 8, v + i * 8, 8 * sizeof(float));
        }
    pthread_t th;
    hold_t h = {.t = t2, .keys = hk, .vals = hv, .n = nv};
    pthread_create(&th, NULL, hold_insert, &h); /* takes db2's one connection to the node */
    timed_t first = timed_lookup(t, keys, v, N, on_victim); /* waits on the silent node */
    timed_t held = timed_lookup(t2, keys, v, N, on_victim); /* waits for a connection */
    timed_t worst = {0};
    size_t later = 0;
    while (now_ms() - t0 < 450) { /* skipped while backing off; probes at its ends */
        timed_t r = timed_lookup(t, keys, v, N, on_victim);
        later++;
        worst.wrong += r.wrong + r.victim_hits + r.other_misses;
        if (r.ms > worst.ms)
            worst.ms = r.ms;
    }
    pthread_join(th, NULL);
    kill(pid, SIGCONT);
    double stopped = now_ms() - t0;

    printf("# hung master (%zu of %d keys on it), lookup deadline %d ms: first lookup %.1f ms, "
           "lookup waiting for a connection held by a write %.1f ms (the write %.1f ms), "
           "%zu later lookups at most %.1f ms; node stopped %.0f ms\n",
           nv, N, DEADLINE, first.ms, held.ms, h.ms, later, worst.ms, stopped);
    assert_true(first.rc < 0);
    assert_true(first.ms >= DEADLINE - 2 && first.ms < BOUND);
    assert_int_equal(first.hits, N - nv); /* the other masters answered */
    assert_int_equal(first.wrong + first.victim_hits + first.other_misses, 0);
    assert_true(held.rc < 0);
    assert_true(held.ms < BOUND);
    assert_int_equal(held.hits, N - nv);
    assert_int_equal(held.wrong + held.victim_hits + held.other_misses, 0);
    assert_true(h.rc < 0 && h.ms >= 450); /* the write had its own, longer deadline */
    assert_true(later > 0);
    assert_true(worst.ms < BOUND);
    assert_int_equal(worst.wrong, 0);

    /* the node answers again once its back-off ends */
    timed_t r = {0};
    for (double t1 = now_ms(); now_ms() - t1 < 10000 && r.hits < N; usleep(20000))
        r = timed_lookup(t, keys, v, N, on_victim);
    assert_int_equal(r.hits, N);
    assert_int_equal(r.wrong, 0);
    hps_ddb_erase(t, N, keys, NULL, 0);
    free(hk);
    free(hv);
    free(keys);
    free(v);
    hps_ddb_close(db2);
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
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_insert_missing),
        cmocka_unit_test(test_migration_ask_moved),
        cmocka_unit_test(test_concurrent_overflow),
        cmocka_unit_test(test_touch),
        cmocka_unit_test(test_wrongtype),
        cmocka_unit_test(test_check_sample),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_wrong_password),
        cmocka_unit_test(test_hung_master_lookup_deadline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
