/*
 * bench-redis -- lookup throughput of the distributed DB (hps_ddb_lookup
 * over hps_rcluster) against a bare hiredis client doing the same pipelined
 * HMGETs, on the same Redis Cluster in the same run; then 1 against 3
 * masters.
 *
 *   1. Start a cluster of `masters` redis-server processes on loopback
 *      (cluster mode, no persistence; 1 master: CLUSTER ADDSLOTSRANGE 0
 *      16383; 3: redis-cli --cluster create, no replicas), in a temp dir.
 *   2. Insert `rows` rows of hps-gen's table 0 (int64 keys, dim floats) in
 *      HugeCTR's layout through hps_ddb_insert() (num_partitions 8), timed,
 *      and the same rows into a second table through
 *      hps_ddb_insert_missing() (one HSETNX per row, as the coordinator's
 *      cache_missed_embeddings inserter), timed.
 *   3. The same precomputed batches of `batch` keys drawn uniformly from the
 *      loaded keys, one thread.  ours = hps_ddb_lookup() of a batch (one
 *      HMGET per partition, pipelined per node, all nodes driven at once);
 *      bare = one blocking hiredis context per master: partition the batch
 *      (same rrxmrrxmsx_0 % 8), append one HMGET per partition to its
 *      master's context (slot map read once from CLUSTER SLOTS), then read
 *      every reply and copy each value into the output rows with its found
 *      flag -- the output the lookup API delivers, so both do equal work.
 *   4. Alternating timed runs of `seconds` each, best of `reps`; every
 *      lookup is checked against the generator.
 *
 * Every number printed is measured by this run.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "bench/benchutil.h"
#include "bench_vcs.h"
#include "hps/ddb.h"
#include "hps/gen.h"
#include "hps/hps.h"
#include "hps/rcluster.h"

#define MODEL  "bench"
#define TABLE  "t0"
#define NP     8
#define TARGET 0.8

typedef struct options {
    uint64_t rows;
    uint32_t dim;
    unsigned batch, nbatches, reps;
    double seconds;
} options_t;

typedef struct cluster {
    char dir[64];
    int ports[3];
    unsigned n;
} cluster_t;

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void cluster_stop(cluster_t *c)
{
    for (unsigned i = 0; i < c->n; i++)
        sh("kill $(cat %s/%d.pid 2>/dev/null) 2>/dev/null", c->dir, c->ports[i]);
    usleep(200000);
    sh("rm -rf %s", c->dir);
}

static bool cluster_ok(const cluster_t *c)
{
    for (unsigned i = 0; i < c->n; i++)
        if (sh("redis-cli -p %d cluster info 2>/dev/null | grep -q cluster_state:ok",
               c->ports[i]) != 0)
            return false;
    return true;
}

static int cluster_start(cluster_t *c, unsigned masters, int base_port)
{
    snprintf(c->dir, sizeof(c->dir), "/tmp/bench-redis-XXXXXX");
    if (!mkdtemp(c->dir))
        return -1;
    c->n = masters;
    for (unsigned i = 0; i < masters; i++) {
        c->ports[i] = base_port + (int)i;
        if (sh("cd %s && redis-server --port %d --bind 127.0.0.1 --cluster-enabled yes "
               "--cluster-config-file n%d.conf --save '' --appendonly no --daemonize yes "
               "--pidfile %s/%d.pid --logfile %s/%d.log",
               c->dir, c->ports[i], c->ports[i], c->dir, c->ports[i], c->dir, c->ports[i]))
            return -1;
    }
    for (unsigned i = 0; i < masters; i++)
        for (int k = 0; k < 100 && sh("redis-cli -p %d ping >/dev/null 2>&1", c->ports[i]); k++)
            usleep(50000);
    int rc = masters == 1
                 ? sh("redis-cli -p %d cluster addslotsrange 0 16383 >/dev/null", c->ports[0])
                 : sh("redis-cli --cluster create 127.0.0.1:%d 127.0.0.1:%d 127.0.0.1:%d "
                      "--cluster-replicas 0 --cluster-yes >/dev/null",
                      c->ports[0], c->ports[1], c->ports[2]);
    for (int k = 0; rc == 0 && k < 200 && !cluster_ok(c); k++)
        usleep(50000);
    return rc == 0 && cluster_ok(c) ? 0 : -1;
}

/* ---- the bare hiredis client ------------------------------------------ */

typedef struct bare {
    redisContext *ctx[3];
    int ports[3];
    unsigned n;
    int part_ctx[NP]; /* context of each partition's master */
    char names[NP][HPS_DDB_KEY_MAX];
} bare_t;

static int bare_open(bare_t *b, const cluster_t *c)
{
    b->n = c->n;
    for (unsigned i = 0; i < c->n; i++) {
        b->ports[i] = c->ports[i];
        b->ctx[i] = redisConnect("127.0.0.1", c->ports[i]);
        if (!b->ctx[i] || b->ctx[i]->err)
            return -1;
    }
    redisReply *r = redisCommand(b->ctx[0], "CLUSTER SLOTS");
    if (!r || r->type != REDIS_REPLY_ARRAY)
        return -1;
    for (unsigned p = 0; p < NP; p++) {
        hps_ddb_key_name(MODEL, TABLE, p, 'v', b->names[p], HPS_DDB_KEY_MAX);
        uint16_t slot = hps_rcluster_key_slot(b->names[p], strlen(b->names[p]));
        for (size_t i = 0; i < r->elements; i++) {
            redisReply *e = r->element[i];
            if (slot < e->element[0]->integer || slot > e->element[1]->integer)
                continue;
            for (unsigned k = 0; k < b->n; k++)
                if (b->ports[k] == e->element[2]->element[1]->integer)
                    b->part_ctx[p] = (int)k;
        }
    }
    freeReplyObject(r);
    return 0;
}

static void bare_close(bare_t *b)
{
    for (unsigned i = 0; i < b->n; i++)
        if (b->ctx[i])
            redisFree(b->ctx[i]);
}

/* One batch: bucket, one HMGET per partition, read, copy out. */
static size_t bare_lookup(bare_t *b, size_t n, const int64_t *keys, uint32_t dim, float *out,
                          bool *found, const char **argv, size_t *argl, size_t *order)
{
    size_t start[NP + 1] = {0}, pos[NP], hits = 0;
    for (size_t i = 0; i < n; i++)
        start[hps_rrxmrrxmsx_0((uint64_t)keys[i]) % NP + 1]++;
    for (unsigned p = 0; p < NP; p++)
        pos[p] = start[p + 1] += start[p];
    for (unsigned p = 0; p < NP; p++)
        pos[p] = start[p];
    for (size_t i = 0; i < n; i++)
        order[pos[hps_rrxmrrxmsx_0((uint64_t)keys[i]) % NP]++] = i;
    for (unsigned p = 0; p < NP; p++) {
        size_t m = start[p + 1] - start[p];
        argv[0] = "HMGET";
        argl[0] = 5;
        argv[1] = b->names[p];
        argl[1] = strlen(b->names[p]);
        for (size_t j = 0; j < m; j++) {
            argv[2 + j] = (const char *)&keys[order[start[p] + j]];
            argl[2 + j] = 8;
        }
        redisAppendCommandArgv(b->ctx[b->part_ctx[p]], (int)(2 + m), argv, argl);
    }
    memset(found, 0, n);
    for (unsigned p = 0; p < NP; p++) {
        redisReply *r;
        if (redisGetReply(b->ctx[b->part_ctx[p]], (void **)&r) != REDIS_OK)
            return 0;
        for (size_t j = 0; j < r->elements; j++) {
            redisReply *e = r->element[j];
            if (e->type != REDIS_REPLY_STRING || (size_t)e->len != dim * 4)
                continue;
            size_t i = order[start[p] + j];
            memcpy(out + i * dim, e->str, dim * 4);
            found[i] = true;
            hits++;
        }
        freeReplyObject(r);
    }
    return hits;
}

/* ---- the runs --------------------------------------------------------- */

typedef struct run {
    const options_t *o;
    int64_t *queries; /* (nbatches, batch) */
    float *out;
    bool *found;
    const char **argv;
    size_t *argl, *order;
} run_t;

/* Insert every row of hps-gen's table 0 into t, in chunks of 8,192: with
 * hps_ddb_insert (one HSET per partition and chunk) or, missing, with
 * hps_ddb_insert_missing (one HSETNX per row: cache_missed_embeddings'). */
static int load(hps_ddb_table_t *t, const options_t *o, bool missing)
{
    size_t chunk = 8192;
    int64_t *k = malloc(chunk * 8);
    float *v = malloc(chunk * o->dim * 4);
    char err[256];
    int rc = 0;
    for (uint64_t r = 0; rc == 0 && r < o->rows; r += chunk) {
        size_t n = o->rows - r < chunk ? (size_t)(o->rows - r) : chunk;
        for (size_t i = 0; i < n; i++) {
            k[i] = hps_gen_key(0, r + i);
            hps_gen_vector(0, k[i], o->dim, v + i * o->dim);
        }
        if ((missing ? hps_ddb_insert_missing : hps_ddb_insert)(t, n, k, v, err, sizeof(err)) < 0) {
            fprintf(stderr, "insert: %s\n", err);
            rc = -1;
        }
    }
    free(k);
    free(v);
    return rc;
}

static bool check(const run_t *r, size_t b)
{
    const int64_t *q = r->queries + b * r->o->batch;
    float want[1024];
    for (size_t i = 0; i < r->o->batch; i += 97) {
        hps_gen_vector(0, q[i], r->o->dim, want);
        if (!r->found[i] || memcmp(want, r->out + i * r->o->dim, r->o->dim * 4))
            return false;
    }
    return true;
}

/* rows/s of `seconds` of lookups by ours (t) or bare (b). */
static double timed(run_t *r, hps_ddb_table_t *t, bare_t *b, bool *ok)
{
    const options_t *o = r->o;
    size_t rows = 0, i = 0;
    double t0 = bench_now_s(), t1;
    do {
        size_t bi = i++ % o->nbatches;
        const int64_t *q = r->queries + bi * o->batch;
        if (t)
            hps_ddb_lookup(t, o->batch, q, r->out, r->found, NULL, NULL, 0);
        else
            bare_lookup(b, o->batch, q, o->dim, r->out, r->found, r->argv, r->argl, r->order);
        *ok &= check(r, bi);
        rows += o->batch;
    } while ((t1 = bench_now_s()) - t0 < o->seconds);
    return (double)rows / (t1 - t0);
}

/* ret_ins: rows/s of the load with hps_ddb_insert, then of the same rows
 * into a fresh table with hps_ddb_insert_missing. */
static int bench_masters(const options_t *o, unsigned masters, int base_port, double *ret_ours,
                         double *ret_bare, double ret_ins[2])
{
    cluster_t c = {0};
    hps_ddb_t *db = NULL;
    hps_ddb_table_t *t = NULL, *t2 = NULL;
    double t0 = 0, t1 = 0, t2s = 0;
    bare_t b = {0};
    char err[512], addr[64];
    int rc = -1;
    /* A port (or its cluster bus port, +10000) may be taken: try elsewhere. */
    for (int k = 0; k < 4 && cluster_start(&c, masters, base_port + 97 * k) < 0; k++) {
        cluster_stop(&c);
        c = (cluster_t){0};
    }
    if (c.n == 0) {
        fprintf(stderr, "cannot start a %u-master cluster\n", masters);
        goto out;
    }
    hps_ddb_opts_t opts;
    hps_ddb_opts_init(&opts);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", c.ports[0]);
    opts.address = addr;
    opts.num_partitions = NP;
    opts.timeout_ms = 10000;
    bool up = hps_ddb_open(&opts, &db, err, sizeof(err)) == 0 &&
              hps_ddb_table(db, MODEL, TABLE, o->dim, 8, &t) == 0 &&
              hps_ddb_table(db, MODEL, TABLE "_nx", o->dim, 8, &t2) == 0;
    t0 = bench_now_s();
    up = up && load(t, o, false) == 0;
    t1 = bench_now_s();
    up = up && load(t2, o, true) == 0;
    t2s = bench_now_s();
    if (!up || bare_open(&b, &c) < 0) {
        fprintf(stderr, "setup: %s\n", err);
        goto out;
    }
    ret_ins[0] = (double)o->rows / (t1 - t0);
    ret_ins[1] = (double)o->rows / (t2s - t1);
    run_t r = {.o = o};
    r.queries = malloc((size_t)o->nbatches * o->batch * 8);
    r.out = malloc((size_t)o->batch * o->dim * 4);
    r.found = malloc(o->batch);
    r.argv = malloc((o->batch + 2) * sizeof(char *));
    r.argl = malloc((o->batch + 2) * sizeof(size_t));
    r.order = malloc(o->batch * sizeof(size_t));
    uint64_t seed = 42;
    for (size_t i = 0; i < (size_t)o->nbatches * o->batch; i++)
        r.queries[i] = hps_gen_key(0, hps_gen_splitmix64(&seed) % o->rows);
    bool ok = true;
    double best_o = 0, best_b = 0;
    timed(&r, t, NULL, &ok); /* warm-up */
    timed(&r, NULL, &b, &ok);
    for (unsigned k = 0; k < o->reps; k++) {
        double x = timed(&r, t, NULL, &ok), y = timed(&r, NULL, &b, &ok);
        best_o = x > best_o ? x : best_o;
        best_b = y > best_b ? y : best_b;
    }
    *ret_ours = best_o;
    *ret_bare = best_b;
    rc = ok ? 0 : -1;
    if (!ok)
        fprintf(stderr, "a lookup returned a wrong or missing vector\n");
    free(r.queries);
    free(r.out);
    free(r.found);
    free(r.argv);
    free(r.argl);
    free(r.order);
out:
    bare_close(&b);
    hps_ddb_close(db);
    cluster_stop(&c);
    return rc;
}

int main(int argc, char **argv)
{
    options_t o = {
        .rows = 200000, .dim = 64, .batch = 4096, .nbatches = 64, .reps = 3, .seconds = 2.0};
    if (argc > 1 && strcmp(argv[1], "--quick") == 0)
        o = (options_t){
            .rows = 20000, .dim = 16, .batch = 1024, .nbatches = 8, .reps = 1, .seconds = 0.3};
    if (system("command -v redis-server >/dev/null && command -v redis-cli >/dev/null") != 0) {
        printf("bench-redis: redis-server or redis-cli missing: skipped\n");
        return 77;
    }
    int base = 21000 + (int)(getpid() % 2000) * 4;
    printf("bench-redis (%s): %llu rows, dim %u, int64 keys, %d partitions, batches of %u keys, "
           "1 client thread, best of %u x %.1f s\n",
           BENCH_VCS, (unsigned long long)o.rows, o.dim, NP, o.batch, o.reps, o.seconds);
    double ours[2], bare[2], ins[2][2];
    unsigned ms[2] = {1, 3};
    for (int i = 0; i < 2; i++) {
        if (bench_masters(&o, ms[i], base + 4 * i, &ours[i], &bare[i], ins[i]) < 0)
            return 1;
        printf("  %u master%s: hps_ddb_lookup %10.0f rows/s   bare hiredis %10.0f rows/s   "
               "ratio %.2f (target >= %.1f)\n",
               ms[i], ms[i] > 1 ? "s" : " ", ours[i], bare[i], ours[i] / bare[i], TARGET);
        printf("  %u master%s: inserts, hps_ddb_insert (HSET) %10.0f rows/s, "
               "hps_ddb_insert_missing (HSETNX, cache_missed_embeddings) %10.0f rows/s: %.2fx\n",
               ms[i], ms[i] > 1 ? "s" : " ", ins[i][0], ins[i][1], ins[i][1] / ins[i][0]);
    }
    printf("  3 masters vs 1: hps_ddb_lookup %.2fx, bare hiredis %.2fx\n", ours[1] / ours[0],
           bare[1] / bare[0]);
    return 0;
}
