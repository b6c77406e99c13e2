/*
 * shm-fixture.c -- test helper of test-hps-shm.sh: creates segment hps.NAME
 * with two tables and known rows through the shmdb API, then detaches (the
 * segment stays in /dev/shm).
 *
 *   shm-fixture NAME OUTDIR
 *   shm-fixture --hold NAME OUTDIR
 *
 * Tables (model "demo"):
 *   t64: dim 4, int64 keys, default 0.5, 4 partitions, unbounded.  8 rows are
 *        inserted, key 42 is then updated, key 1000000007 erased, and keys
 *        {42, 999} looked up (2 lookups, 1 hit).
 *   t32: dim 3, uint32 keys, default -1, 2 partitions, margin 1000,
 *        evict_oldest, target 0.5.  4 rows.
 * For each table, OUTDIR/demo.<table>.txt gets the live rows, sorted by key
 * as int64, one per line: "key v0 v1 ..." with %.9g, the form the test
 * script makes of the files that hps-shm dump writes.
 *
 * GPU-cache registry (no GPU needed: only the entries):
 *   entry 0: t64 on device 0, dim 4, lru, created by the fixture, READY with
 *            1024 rows and 1 MiB, counters published (occupied 256, lookups
 *            1000, hits 750, inserts 300, evictions 44, refreshed 20, full
 *            refreshes 1, lock timeouts 2, repaired sets 3, published now);
 *   entry 1: t32 on device 1, dim 3, lfu, CREATING.
 * Both list only the fixture, dead once it returns.  "shm-fixture --hold
 * NAME OUTDIR" (run in the background) creates entry 2: t64 on device 2,
 * READY with 512 rows and 64 KiB, counters occupied 512, lookups 10, hits
 * 10, inserts 512; it writes its pid to OUTDIR/holder.pid and stays (the
 * live creator, refresher and only process of entry 2) until the segment is
 * removed, or 120 s.  It attaches as a coordinator and beats once
 * (hps_shmdb_heartbeat), so that hps-shm ls shows the segment "ok" while it
 * lives and "orphan" once it is gone (before, no coordinator ever ran and
 * the creator is gone: "orphan" too).
 * OUTDIR/fixture.pid gets the fixture's pid (the creator of both).
 * The holder also records the coordinator state "serving", which info
 * shows as the last state recorded once the holder is killed.
 *
 *   shm-fixture --offsets
 *
 * prints, as shell assignments, the byte offsets of the header fields and
 * table-descriptor fields that test-hps-shm.sh corrupts in copies of the
 * segment (shmdb/layout.h; OFF_* in the header, T_* in a descriptor, table
 * id's descriptor at OFF_TABLES + id * TABLE_BYTES).
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hps/shmdb_gcache.h"
#include "shmdb/layout.h"

#define FX_MAX_ROWS 8
#define FX_MAX_DIM  4

typedef struct fx_row {
    int64_t key;
    float v[FX_MAX_DIM];
    bool live;
} fx_row_t;

/** A table and the rows it should hold (the test's model of it). */
typedef struct fx_table {
    hps_table_spec_t spec;
    uint32_t id;
    size_t n;
    fx_row_t rows[FX_MAX_ROWS];
} fx_table_t;

static int fx_check(hps_err_t err, const char *what)
{
    if (err != 0)
        fprintf(stderr, "shm-fixture: %s: %s (%s)\n", what, hps_strerror(err), hps_err_name(err));
    return err != 0;
}

/* Pack n keys of rows into buf as the table's key width. */
static void fx_pack_keys(const fx_table_t *t, const fx_row_t *rows, size_t n, void *buf)
{
    for (size_t i = 0; i < n; i++) {
        if (t->spec.key_bytes == 4) {
            uint32_t k = (uint32_t)rows[i].key;
            memcpy((char *)buf + i * 4, &k, 4);
        } else {
            memcpy((char *)buf + i * 8, &rows[i].key, 8);
        }
    }
}

static int fx_upsert(hps_shmdb_t *db, const fx_table_t *t, const fx_row_t *rows, size_t n)
{
    uint64_t keys[FX_MAX_ROWS];
    float values[FX_MAX_ROWS * FX_MAX_DIM];

    fx_pack_keys(t, rows, n, keys);
    for (size_t i = 0; i < n; i++)
        memcpy(values + i * t->spec.dim, rows[i].v, t->spec.dim * sizeof(float));
    return fx_check(hps_shmdb_upsert(db, t->id, n, keys, values, NULL), "upsert");
}

static int fx_create(hps_shmdb_t *db, fx_table_t *t)
{
    if (fx_check(hps_shmdb_table_create(db, &t->spec, &t->id), "table_create"))
        return 1;
    return fx_upsert(db, t, t->rows, t->n);
}

static fx_row_t *fx_find(fx_table_t *t, int64_t key)
{
    for (size_t i = 0; i < t->n; i++) {
        if (t->rows[i].key == key)
            return &t->rows[i];
    }
    return NULL;
}

static int fx_update(hps_shmdb_t *db, fx_table_t *t, int64_t key, const float *v)
{
    fx_row_t *r = fx_find(t, key);

    memcpy(r->v, v, t->spec.dim * sizeof(float));
    return fx_upsert(db, t, r, 1);
}

static int fx_erase(hps_shmdb_t *db, fx_table_t *t, int64_t key)
{
    uint64_t k;
    size_t erased = 0;

    fx_find(t, key)->live = false;
    fx_pack_keys(t, fx_find(t, key), 1, &k);
    if (fx_check(hps_shmdb_erase(db, t->id, 1, &k, &erased), "erase"))
        return 1;
    return erased == 1 ? 0 : fx_check(HPS_ECORRUPT, "erase removed no row");
}

static int cmp_rows(const void *a, const void *b)
{
    int64_t x = ((const fx_row_t *)a)->key, y = ((const fx_row_t *)b)->key;
    return (x > y) - (x < y);
}

static int fx_write_expected(const fx_table_t *t, const char *outdir)
{
    char path[4096];
    fx_row_t sorted[FX_MAX_ROWS];
    FILE *f;

    snprintf(path, sizeof path, "%s/%s.%s.txt", outdir, t->spec.model, t->spec.table);
    f = fopen(path, "w");
    if (!f) {
        perror(path);
        return 1;
    }
    memcpy(sorted, t->rows, t->n * sizeof *sorted);
    qsort(sorted, t->n, sizeof *sorted, cmp_rows);
    for (size_t i = 0; i < t->n; i++) {
        if (!sorted[i].live)
            continue;
        fprintf(f, "%" PRId64, sorted[i].key);
        for (uint32_t j = 0; j < t->spec.dim; j++)
            fprintf(f, " %.9g", (double)sorted[i].v[j]);
        fprintf(f, "\n");
    }
    return fclose(f) != 0;
}

static void fx_fill(fx_table_t *t, const int64_t *keys, size_t n)
{
    t->n = n;
    for (size_t i = 0; i < n; i++) {
        t->rows[i].key = keys[i];
        t->rows[i].live = true;
        for (uint32_t j = 0; j < t->spec.dim; j++)
            t->rows[i].v[j] = (float)(8 * (int)i + (int)j) / 8.0f - 1.0f;
    }
}

static int fx_t64(hps_shmdb_t *db, fx_table_t *t)
{
    static const int64_t keys[] = {-7, 0, 1, 42, 1000000007, INT64_MAX, INT64_MIN, 123456789012345};
    static const float upd[] = {0.1f, -0.001f, 1e20f, -2.5f};
    static const int64_t probe[] = {42, 999};
    float out[2 * 4];

    t->spec = (hps_table_spec_t){.model = "demo",
                                 .table = "t64",
                                 .dim = 4,
                                 .key_bytes = 8,
                                 .default_value = 0.5f,
                                 .num_partitions = 4,
                                 .overflow_margin = UINT64_MAX,
                                 .overflow_policy = HPS_EVICT_RANDOM,
                                 .overflow_resolution_target = 1.0,
                                 .expected_rows = 16};
    fx_fill(t, keys, sizeof keys / sizeof keys[0]);
    if (fx_create(db, t) || fx_update(db, t, 42, upd) || fx_erase(db, t, 1000000007))
        return 1;
    return fx_check(hps_shmdb_lookup(db, t->id, 2, probe, out, NULL, NULL), "lookup");
}

static int fx_t32(hps_shmdb_t *db, fx_table_t *t)
{
    static const int64_t keys[] = {0, 1, 77, 4294967295};

    t->spec = (hps_table_spec_t){.model = "demo",
                                 .table = "t32",
                                 .dim = 3,
                                 .key_bytes = 4,
                                 .default_value = -1.0f,
                                 .num_partitions = 2,
                                 .overflow_margin = 1000,
                                 .overflow_policy = HPS_EVICT_OLDEST,
                                 .overflow_resolution_target = 0.5,
                                 .expected_rows = 4};
    fx_fill(t, keys, sizeof keys / sizeof keys[0]);
    return fx_create(db, t);
}

static int fx_write_pid(const char *outdir, const char *file, pid_t pid)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof path, "%s/%s", outdir, file);
    f = fopen(path, "w");
    if (!f) {
        perror(path);
        return 1;
    }
    fprintf(f, "%d\n", (int)pid);
    return fclose(f) != 0;
}

static hps_gcache_reg_t fx_want(uint32_t table_id, int32_t device, uint32_t dim, uint32_t policy)
{
    return (hps_gcache_reg_t){.table_id = table_id,
                              .device = device,
                              .dim = dim,
                              .policy = policy,
                              .capacity_rows = 1000};
}

/* shm-fixture --hold NAME OUTDIR: beat as the coordinator, create and
 * publish GPU cache 2, write OUTDIR/holder.pid, stay until the segment is
 * gone (or 120 s). */
static int fx_hold(const char *name, const char *outdir)
{
    const hps_shmdb_proc_opts_t popts = {
        .num_threads = 1, .role = HPS_ROLE_COORDINATOR, .device = -1};
    hps_shmdb_t *db = NULL;
    hps_gcache_reg_t w = fx_want(0, 2, 4, 0), r;
    hps_gcache_counters_t c = {.occupied = 512, .lookups = 10, .hits = 10, .inserts = 512};
    bool creator = false;
    char path[300];

    if (fx_check(hps_shmdb_attach(name, &popts, &db), "attach"))
        return 1;
    if (fx_check(hps_shmdb_heartbeat(db), "heartbeat (hold)") ||
        fx_check(hps_shmdb_set_coord_state(db, HPS_COORD_SERVING), "coord state (hold)") ||
        fx_check(hps_shmdb_gcache_claim(db, &w, &r, &creator), "gcache_claim (hold)") ||
        fx_check(hps_shmdb_gcache_ready(db, r.index, r.generation, 512, 65536), "gcache_ready") ||
        fx_check(hps_shmdb_gcache_publish(db, r.index, r.generation, &c), "gcache_publish") ||
        fx_write_pid(outdir, "holder.pid", getpid())) {
        hps_shmdb_detach(db);
        return 1;
    }
    snprintf(path, sizeof path, "/dev/shm/hps.%s", name);
    for (int i = 0; i < 1200 && access(path, F_OK) == 0; i++)
        usleep(100000);
    hps_shmdb_detach(db);
    return 0;
}

static int fx_gcaches(hps_shmdb_t *db, const char *outdir)
{
    hps_gcache_reg_t w = fx_want(0, 0, 4, 0), r;
    bool creator = false;
    struct timespec ts;
    hps_gcache_counters_t c = {.occupied = 256,
                               .lookups = 1000,
                               .hits = 750,
                               .inserts = 300,
                               .evictions = 44,
                               .refreshed = 20,
                               .full_refreshes = 1,
                               .lock_timeouts = 2,
                               .repaired_sets = 3};

    clock_gettime(CLOCK_REALTIME, &ts);
    c.published_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    if (fx_check(hps_shmdb_gcache_claim(db, &w, &r, &creator), "gcache_claim t64") ||
        fx_check(hps_shmdb_gcache_ready(db, r.index, r.generation, 1024, 1u << 20),
                 "gcache_ready") ||
        fx_check(hps_shmdb_gcache_publish(db, r.index, r.generation, &c), "gcache_publish"))
        return 1;
    w = fx_want(1, 1, 3, 1);
    if (fx_check(hps_shmdb_gcache_claim(db, &w, &r, &creator), "gcache_claim t32"))
        return 1;
    return fx_write_pid(outdir, "fixture.pid", getpid());
}

/* shm-fixture --offsets: the layout offsets test-hps-shm.sh patches. */
static int fx_offsets(void)
{
#define FX_OFF(var, type, field) printf("%s=%zu\n", var, offsetof(type, field))
    FX_OFF("OFF_NUM_TABLES", struct shm_hdr, num_tables);
    FX_OFF("OFF_MISSQ", struct shm_hdr, missq_off);
    FX_OFF("OFF_GPUREG", struct shm_hdr, gpureg_off);
    FX_OFF("OFF_UPDLOG", struct shm_hdr, updlog_off);
    FX_OFF("OFF_USTATS", struct shm_hdr, ustats_off);
    FX_OFF("OFF_DDBSTATS", struct shm_hdr, ddbstats_off);
    FX_OFF("OFF_TABLES", struct shm_hdr, tables);
    FX_OFF("T_DIM", struct shm_table, dim);
    FX_OFF("T_NPARTS", struct shm_table, num_partitions);
    FX_OFF("T_PARTS", struct shm_table, parts);
    FX_OFF("T_MODEL", struct shm_table, model);
    FX_OFF("T_TABLE", struct shm_table, table);
    FX_OFF("T_DTYPE", struct shm_table, dtype);
#undef FX_OFF
    printf("TABLE_BYTES=%zu\n", sizeof(struct shm_table));
    printf("NAME_FIELD_BYTES=%zu\n", sizeof(((struct shm_table *)0)->model));
    return fflush(stdout) != 0;
}

int main(int argc, char **argv)
{
    const hps_shmdb_opts_t opts = {.size_bytes = 8u << 20, .allocation_rate = 1u << 20};
    const hps_shmdb_proc_opts_t popts = {.num_threads = 1, .role = HPS_ROLE_TOOL, .device = -1};
    fx_table_t *t = calloc(2, sizeof *t);
    hps_shmdb_t *db = NULL;
    int rc = 1;

    if (argc == 4 && strcmp(argv[1], "--hold") == 0) {
        free(t);
        return fx_hold(argv[2], argv[3]);
    }
    if (argc == 2 && strcmp(argv[1], "--offsets") == 0) {
        free(t);
        return fx_offsets();
    }
    if (argc != 3) {
        fprintf(stderr, "usage: shm-fixture [--hold] NAME OUTDIR | --offsets\n");
        free(t);
        return 2;
    }
    if (t && !fx_check(hps_shmdb_create(argv[1], &opts, &popts, &db), "create")) {
        rc = fx_t64(db, &t[0]) || fx_t32(db, &t[1]) || fx_write_expected(&t[0], argv[2]) ||
             fx_write_expected(&t[1], argv[2]) || fx_gcaches(db, argv[2]);
        hps_shmdb_detach(db);
    }
    free(t);
    return rc;
}
