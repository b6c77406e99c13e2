/*
 * cmd-info-gcache.c -- the "gpu caches" part of hps-shm info: every entry of
 * the segment's GPU-cache registry that is not FREE, with the counters its
 * refresher last published (hps_shmdb_gcache_publish).
 *
 * Snapshots are lock-free; the counters are as old as counters_age_s says.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hps-shm.h"
#include "hps/shmdb_gcache.h"

/** A registry entry and the names of the table it caches. */
typedef struct gcache_snap {
    hps_gcache_reg_t reg;
    bool named; /* model/table resolved */
    char model[HPS_SHMDB_NAME_MAX + 1];
    char table[HPS_SHMDB_NAME_MAX + 1];
} gcache_snap_t;

static const char *state_name(hps_gcache_state_t st)
{
    switch (st) {
    case HPS_GCACHE_FREE:
        return "free";
    case HPS_GCACHE_CREATING:
        return "creating";
    case HPS_GCACHE_READY:
        return "ready";
    default:
        return "unknown";
    }
}

/* hps_gcache_policy_t (gcache.h, not included: it needs CUDA headers). */
static const char *policy_name(uint32_t p)
{
    return p == 0 ? "lru" : p == 1 ? "lfu" : "unknown";
}

static double ratio(uint64_t num, uint64_t den)
{
    return den ? (double)num / (double)den : 0.0;
}

static void snap_names(hps_shmdb_t *db, gcache_snap_t *s)
{
    hps_table_info_t ti;

    s->named = hps_shmdb_table_info(db, s->reg.table_id, &ti) == 0;
    if (!s->named)
        return;
    snprintf(s->model, sizeof s->model, "%s", ti.model);
    snprintf(s->table, sizeof s->table, "%s", ti.table);
}

/* ---- JSON ---------------------------------------------------------------- */

static void gcache_json_shape(json_object *o, const gcache_snap_t *s)
{
    const hps_gcache_reg_t *r = &s->reg;

    hps__tool_jset(o, "index", json_object_new_int64(r->index));
    hps__tool_jset(o, "model", s->named ? hps__tool_json_str(s->model) : NULL);
    hps__tool_jset(o, "table", s->named ? hps__tool_json_str(s->table) : NULL);
    hps__tool_jset(o, "table_id", json_object_new_int64(r->table_id));
    hps__tool_jset(o, "device", json_object_new_int64(r->device));
    hps__tool_jset(o, "state", hps__tool_json_str(state_name(r->state)));
    hps__tool_jset(o, "generation", hps__tool_json_u64(r->generation));
    hps__tool_jset(o, "dim", json_object_new_int64(r->dim));
    hps__tool_jset(o, "policy", hps__tool_json_str(policy_name(r->policy)));
    hps__tool_jset(o, "capacity_rows", hps__tool_json_u64(r->capacity_rows));
    hps__tool_jset(o, "bytes", hps__tool_json_u64(r->bytes));
    bool sharded = r->device == HPS_SHMDB_GCACHE_SHARDED;
    hps__tool_jset(o, "placement", hps__tool_json_str(sharded ? "shard" : "replicate"));
    if (!sharded)
        return;
    json_object *shards = json_object_new_array();
    for (uint32_t j = 0; j < r->num_shards && j < HPS_SHMDB_GCACHE_SHARDS; j++) {
        json_object *sh = json_object_new_object();
        hps__tool_jset(sh, "device", json_object_new_int64(r->shard_dev[j]));
        hps__tool_jset(sh, "bytes", hps__tool_json_u64(r->shard_bytes[j]));
        hps__tool_jset(sh, "occupied_rows", hps__tool_json_u64(r->counters.shard_occupied[j]));
        json_object_array_add(shards, sh);
    }
    hps__tool_jset(o, "parts", json_object_new_int64(r->num_parts));
    hps__tool_jset(o, "shards", shards);
}

static void gcache_json_counters(json_object *o, const hps_gcache_counters_t *c, uint64_t cap)
{
    char buf[64];

    hps__tool_jset(o, "occupied", hps__tool_json_u64(c->occupied));
    hps__tool_jset(o, "occupancy", cap ? hps__tool_json_double(ratio(c->occupied, cap)) : NULL);
    hps__tool_jset(o, "lookups", hps__tool_json_u64(c->lookups));
    hps__tool_jset(o, "hits", hps__tool_json_u64(c->hits));
    hps__tool_jset(o, "hit_rate",
                   c->lookups ? hps__tool_json_double(ratio(c->hits, c->lookups)) : NULL);
    hps__tool_jset(o, "inserts", hps__tool_json_u64(c->inserts));
    hps__tool_jset(o, "evictions", hps__tool_json_u64(c->evictions));
    hps__tool_jset(o, "refreshed", hps__tool_json_u64(c->refreshed));
    hps__tool_jset(o, "full_refreshes", hps__tool_json_u64(c->full_refreshes));
    hps__tool_jset(o, "lock_timeouts", hps__tool_json_u64(c->lock_timeouts));
    hps__tool_jset(o, "repaired_sets", hps__tool_json_u64(c->repaired_sets));
    hps__tool_jset(o, "published_ns", hps__tool_json_u64(c->published_ns));
    hps__tool_jset(o, "published",
                   hps__tool_json_str(hps__tool_fmt_time(c->published_ns, buf, sizeof buf)));
    hps__tool_jset(o, "counters_age_s",
                   c->published_ns ? hps__tool_json_double(
                                         hps__tool_age_clock_s(CLOCK_REALTIME, c->published_ns))
                                   : NULL);
}

static void gcache_json_procs(hps_shmdb_t *db, json_object *o, const hps_gcache_reg_t *r)
{
    json_object *pids = json_object_new_array();

    hps__tool_jset(o, "creator_pid", json_object_new_int64(r->creator_pid));
    hps__tool_jset(o, "creator_alive",
                   json_object_new_boolean(hps__tool_pid_alive(db, r->creator_pid)));
    hps__tool_jset(o, "refresher_pid",
                   r->refresher_pid > 0 ? json_object_new_int64(r->refresher_pid) : NULL);
    hps__tool_jset(o, "refresher_alive",
                   json_object_new_boolean(hps__tool_pid_alive(db, r->refresher_pid)));
    for (uint32_t i = 0; i < r->num_pids && i < HPS_SHMDB_GCACHE_PROCS; i++)
        json_object_array_add(pids, json_object_new_int64(r->pids[i]));
    hps__tool_jset(o, "attached_pids", pids);
}

static json_object *gcache_json(hps_shmdb_t *db, const gcache_snap_t *s)
{
    json_object *o = json_object_new_object();

    gcache_json_shape(o, s);
    gcache_json_counters(o, &s->reg.counters, s->reg.capacity_rows);
    gcache_json_procs(db, o, &s->reg);
    return o;
}

/* ---- text ---------------------------------------------------------------- */

static void gcache_text_shape(const gcache_snap_t *s)
{
    const hps_gcache_reg_t *r = &s->reg;
    const hps_gcache_counters_t *c = &r->counters;
    char b[64];

    if (s->named)
        printf("  cache %u: %s/%s (table %u)", r->index, s->model, s->table, r->table_id);
    else
        printf("  cache %u: table %u (not in the segment)", r->index, r->table_id);
    if (r->device == HPS_SHMDB_GCACHE_SHARDED)
        printf(" sharded over %u devices", r->num_shards);
    else
        printf(" on device %d", (int)r->device);
    printf(", %s, generation %llu, dim %u, %s\n", state_name(r->state),
           (unsigned long long)r->generation, r->dim, policy_name(r->policy));
    printf("    capacity %llu rows, %s, occupancy %llu/%llu", (unsigned long long)r->capacity_rows,
           hps__tool_fmt_bytes(r->bytes, b, sizeof b), (unsigned long long)c->occupied,
           (unsigned long long)r->capacity_rows);
    if (r->capacity_rows)
        printf(" (%.1f%%)", 100.0 * ratio(c->occupied, r->capacity_rows));
    printf("\n");
    for (uint32_t j = 0;
         r->device == HPS_SHMDB_GCACHE_SHARDED && j < r->num_shards && j < HPS_SHMDB_GCACHE_SHARDS;
         j++)
        printf("    shard on device %d: %s, %llu rows homed there\n", (int)r->shard_dev[j],
               hps__tool_fmt_bytes(r->shard_bytes[j], b, sizeof b),
               (unsigned long long)c->shard_occupied[j]);
}

static void gcache_text_counters(const hps_gcache_counters_t *c)
{
    char b[64];

    printf("    lookups %llu, hits %llu", (unsigned long long)c->lookups,
           (unsigned long long)c->hits);
    if (c->lookups)
        printf(" (hit rate %.1f%%)", 100.0 * ratio(c->hits, c->lookups));
    printf("\n    inserts %llu, evictions %llu, refreshed %llu, full refreshes %llu\n",
           (unsigned long long)c->inserts, (unsigned long long)c->evictions,
           (unsigned long long)c->refreshed, (unsigned long long)c->full_refreshes);
    printf("    lock timeouts %llu, repaired sets %llu\n", (unsigned long long)c->lock_timeouts,
           (unsigned long long)c->repaired_sets);
    if (c->published_ns)
        printf(
            "    counters published %s\n",
            hps__tool_fmt_age(hps__tool_age_clock_s(CLOCK_REALTIME, c->published_ns), b, sizeof b));
    else
        printf("    counters never published\n");
}

static void gcache_text_procs(hps_shmdb_t *db, const hps_gcache_reg_t *r)
{
    printf("    creator pid %d (%s), refresher ", (int)r->creator_pid,
           hps__tool_pid_alive(db, r->creator_pid) ? "alive" : "gone");
    if (r->refresher_pid > 0)
        printf("pid %d (%s)", (int)r->refresher_pid,
               hps__tool_pid_alive(db, r->refresher_pid) ? "alive" : "gone");
    else
        printf("none");
    printf(", attached pids");
    if (r->num_pids == 0)
        printf(" none");
    for (uint32_t i = 0; i < r->num_pids && i < HPS_SHMDB_GCACHE_PROCS; i++)
        printf("%s %d", i ? "," : "", (int)r->pids[i]);
    printf("\n");
}

/* ---- driver -------------------------------------------------------------- */

/* Snapshots of the entries that are not FREE into snaps; their count. */
static int collect(const hps__tool_t *t, hps_shmdb_t *db, gcache_snap_t *snaps, uint32_t *ret_n)
{
    uint32_t n = 0;

    for (uint32_t i = 0; i < HPS_SHMDB_MAX_GCACHES; i++) {
        hps_err_t err = hps_shmdb_gcache_get(db, i, &snaps[n].reg);
        if (err == HPS_ENOTFOUND) /* no registry: no GPU cache was ever made here */
            break;
        if (err != 0)
            return hps__tool_fail(t, err, NULL, "cannot read GPU-cache entry %u", i);
        if (snaps[n].reg.state == HPS_GCACHE_FREE)
            continue;
        snap_names(db, &snaps[n]);
        n++;
    }
    *ret_n = n;
    return HPS__TOOL_OK;
}

int hps__tool_info_gcaches(const hps__tool_t *t, hps_shmdb_t *db, json_object *arr)
{
    gcache_snap_t *snaps = calloc(HPS_SHMDB_MAX_GCACHES, sizeof *snaps);
    uint32_t n = 0;
    int rc;

    if (!snaps)
        return hps__tool_fail(t, -ENOMEM, NULL, "cannot read the GPU-cache registry");
    rc = collect(t, db, snaps, &n);
    if (rc == HPS__TOOL_OK && !arr)
        printf("\ngpu caches (%u)\n", n);
    for (uint32_t i = 0; rc == HPS__TOOL_OK && i < n; i++) {
        if (arr) {
            json_object_array_add(arr, gcache_json(db, &snaps[i]));
            continue;
        }
        gcache_text_shape(&snaps[i]);
        gcache_text_counters(&snaps[i].reg.counters);
        gcache_text_procs(db, &snaps[i].reg);
    }
    free(snaps);
    return rc;
}
