#!/usr/bin/env python3
"""
gpu-multi: one host, two CUDA devices (issue 23).  hps-coordinator, one
hps-worker per device (--device 0 and --device 1), kafka-mock + hps-push for
online updates.  Exit 77 (skip) with fewer than 2 CUDA devices (nvidia-smi -L,
narrowed by CUDA_VISIBLE_DEVICES) or without the Kafka tools.

Every scenario serves model "m": tables sparse_embedding0 (200,000 x 64) and
sparse_embedding1 (5,000 x 8), deployed_device_list = 0, 1, gpucacheper 1.0,
initial_cache_rate 1.0, hit_rate_threshold 2 (synchronous inserts), in a
segment of its own; each scenario's processes are killed and its segment
removed before the next starts.

  A. gpu_cache_placement = replicate: each device has its own caches (one
     registry entry per table and device, no worker maps another's);
     lookups exact on both; Kafka updates reach both devices' caches (each
     has its own refresher: both workers' refresh_keys move); worker 1
     SIGKILLed under a request stream to worker 0, which answers every
     request exactly.
  B. gpu_cache_placement = shard: one cache per table spans both devices
     (registry: device -1, placement "shard", one shard per device holding
     some of the rows, all of them together; nv_hps_embedding_cache_shard_*);
     one worker created it ("sharded over devices 0,1"), the other mapped it;
     lookups exact on both; a Kafka update reaches both; the creator
     SIGKILLed under a request stream to the other, which answers every
     request exactly, becomes the refresher and still applies updates.
  C. gpu_cache_max_bytes, between one device's share of the sharded cache
     and the whole replicated cache (measured in A and B, see
     choose_limit()): replicated, the cache is made smaller (fewer rows than
     the table, a warning naming gpu_cache_max_bytes); sharded over both
     devices, every row is cached, each shard within the limit, and a sweep
     of every key through each worker hits every time.
"""
import os
import random
import re
import subprocess
import sys
import time
import types

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import hpstest as H  # noqa: E402
from test_worker_gpu import cache_counters, total  # noqa: E402
from test_worker_gpu_share import Stream, procs_gauge  # noqa: E402

PUSH = os.environ.get("HPS_PUSH", "")
MOCK = os.environ.get("KAFKA_MOCK", "")
ROWS = [200000, 5000]
DIMS = [64, 8]
DEFAULTS = [0.25, -1.0]
TABLES = ["sparse_embedding%d" % i for i in range(len(ROWS))]
MIB = 1 << 20
UPD_TABLE = 1  # Kafka updates go to sparse_embedding1 (dim 8)


def gpu_count():
    """CUDA devices this test may use: the GPUs `nvidia-smi -L` lists (MIG
    instances not counted), at most as many as CUDA_VISIBLE_DEVICES names."""
    try:
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return 0
    if r.returncode != 0:
        return 0
    n = sum(1 for line in r.stdout.splitlines() if line.startswith("GPU "))
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None:
        n = min(n, len([v for v in vis.split(",") if v.strip()]))
    return n


# ---- scenario plumbing ------------------------------------------------------

def start_scenario(cl, name, settings, bootstrap=None):
    """Model "m" (ROWS, DIMS) in a segment and directory of its own, the INI
    (common settings, Kafka if bootstrap, then settings) and a coordinator.
    Returns (segment, model, conf path, coordinator)."""
    seg = cl.new_segment_name(name)
    model = cl.gen_model("m", ROWS, DIMS, defaults=DEFAULTS, subdir=name, segment=seg)
    base = [("volatile_db", "initial_cache_rate", 1.0), ("hps", "heartbeat_interval_ms", 50),
            ("worker", "http_threads", 2), ("worker", "miss_timeout_ms", 2000),
            ("model.m", "gpucache", "true"), ("model.m", "gpucacheper", 1.0),
            ("model.m", "hit_rate_threshold", 2.0), ("model.m", "deployed_device_list", "0, 1")]
    if bootstrap:
        base += [("update_source", "type", "kafka_message_queue"),
                 ("update_source", "brokers", bootstrap),
                 ("update_source", "poll_timeout_ms", "100"),
                 ("update_source", "metadata_refresh_interval_ms", "500")]
    conf = cl.write_config(name + ".ini", model.ini_text, base + settings)
    return seg, model, conf, cl.start_coordinator(conf)


def start_pair(cl, conf, first_instance):
    """A worker on device 0, then (once it is ready) one on device 1."""
    return [cl.start_worker(conf, instance=first_instance + d, device=d, timeout=90.0)
            for d in (0, 1)]


def kafka_topics():
    return ["hps_et.m.%s" % tb for tb in TABLES]


def new_vector(key, gen):
    dim = DIMS[UPD_TABLE]
    return [H.f32(1000.0 * gen + (key % 997) + d * 0.25) for d in range(dim)]


def answers(w, kpt):
    return H.decode_output(H.infer(w.http_port, "m", kpt, binary=True, timeout=60.0))[1]


def check_lookups(t, model, w, kpt, what, new=None):
    """kpt through w: exact (new: pushed rows), every key a GPU hit."""
    want = H.expected_with(model, kpt, new or {})
    c0 = cache_counters(w.metrics_port, "m")
    got = answers(w, kpt)
    c1 = cache_counters(w.metrics_port, "m")
    t.ok(got == want, "%s: exact" % what, H.first_mismatch(got, want, model, kpt))
    n = sum(map(len, kpt))
    t.eq((total(c1, "query_keys") - total(c0, "query_keys"),
          total(c1, "hit_keys") - total(c0, "hit_keys")), (n, n),
         "%s: all %d keys GPU hits" % (what, n))


def sample(model, rng, n):
    return [rng.sample(model.file_keys[i], n) for i in range(len(ROWS))]


def push_and_wait(t, bootstrap, model, workers, keys, gen, rng, new, what):
    """Push gen's vectors for keys (table UPD_TABLE) and wait until every
    worker answers them; new ({(table, key): row}) is updated.  Returns
    {worker pid: refresh_keys moved} (counters read before the push and
    once all answered)."""
    c0 = {w.pid: total(cache_counters(w.metrics_port, "m"), "refresh_keys") for w in workers}
    rows = [(k, new_vector(k, gen)) for k in keys]
    t.eq(H.push_updates(bootstrap, "m", TABLES[UPD_TABLE], DIMS[UPD_TABLE], rows), 0,
         "%s: hps-push delivered %d updates" % (what, len(rows)))
    new.update({(UPD_TABLE, k): v for k, v in rows})
    kpt = [rng.sample(model.file_keys[0], 10), list(keys)]
    want = H.expected_with(model, kpt, new)
    ok = H.wait_until(lambda: all(answers(w, kpt) == want for w in workers), 30.0, 0.1)
    t.ok(ok, "%s: every worker answers the new vectors within 30 s" % what,
         None if ok else [H.first_mismatch(answers(w, kpt), want) for w in workers])
    return {w.pid: total(cache_counters(w.metrics_port, "m"), "refresh_keys") - c0[w.pid]
            for w in workers}


def kill_under_stream(t, victim, survivor, model, excluded, what):
    """A request stream (random keys, not those in excluded[table]) to
    survivor; victim SIGKILLed after 1.5 s; 3 s more.  Every request must
    be answered exactly."""
    pool = types.SimpleNamespace(
        file_keys=[[k for k in model.file_keys[i] if k not in excluded.get(i, ())]
                   for i in range(len(ROWS))],
        expected=model.expected)
    s = Stream(survivor.http_port, pool, 7)
    s.start()
    time.sleep(1.5)
    victim.kill()
    rc = victim.wait(10)
    time.sleep(3.0)
    s.stop.set()
    s.join(15)
    t.ok(rc is not None, "%s: the killed worker exited" % what)
    t.ok(s.sent > 20 and s.failed == 0 and s.exact == s.sent,
         "%s: the other worker answered all %d requests exactly (failed %d, exact %d)"
         % (what, s.sent, s.failed, s.exact), s.bad)
    t.ok(survivor.alive(), "%s: the other worker is alive" % what)


def gcaches(cl, seg):
    """The ready GPU-cache registry entries of model m (hps-shm info --json)."""
    return [e for e in cl.shm_info(seg).get("gpu_caches", [])
            if e.get("model") == "m" and e.get("state") == "ready"]


def shard_gauge(port, name):
    """{(table, shard): value} of nv_hps_embedding_cache_shard_<name> of m."""
    return {(lb.get("table"), lb.get("shard")): int(v)
            for lb, v in H.metric_samples(port, "nv_hps_embedding_cache_shard_" + name)
            if lb.get("model") == "m"}


def shard_lines(w):
    """[(table, rest of the line)] of w's "sharded over devices 0,1:" lines."""
    return re.findall(r"GPU cache m/(\S+) sharded over devices 0,1: ([^\n]*)", w.log())


def created_shards(w):
    return {tb for tb, rest in shard_lines(w) if "mapped the shared cache" not in rest}


def warn_lines(w, word):
    return [ln for ln in w.log().splitlines() if " WARN " in ln and word in ln]


def check_shard_layout(t, cl, seg, workers, what, limit=None):
    """The registry and the metrics show one cache per table over devices
    0 and 1, all rows cached, each shard within limit (if given).  Returns
    the largest shard of sparse_embedding0 in bytes (registry), or None."""
    es = gcaches(cl, seg)
    by_table = {tb: [e for e in es if e.get("table") == tb] for tb in TABLES}
    t.ok(all(len(v) == 1 for v in by_table.values()),
         "%s: one registry entry per table (not one per device)" % what, es)
    t.ok(es and all(e.get("placement") == "shard" and e.get("device") == -1 for e in es),
         "%s: registry entries have placement \"shard\", device -1" % what, es)
    t.ok(es and all(sorted(s.get("device") for s in e.get("shards", [])) == [0, 1] for e in es),
         "%s: each entry lists shards on devices 0 and 1" % what, es)

    def occupied():
        ents = gcaches(cl, seg)
        return {e.get("table"): sum(s.get("occupied_rows", 0) for s in e.get("shards", []))
                for e in ents}
    want = dict(zip(TABLES, ROWS))
    # the registry's counters are published by the refresher, not live
    H.wait_until(lambda: occupied() == want, 10.0, 0.2)
    t.eq(occupied(), want, "%s: hps-shm info: the shards hold every row of each table" % what)
    # Memory is split at the 2 MiB VMM granularity: a cache of a few granules
    # (sparse_embedding1, 5,000 x 8) may lie on one device; the large one
    # must be spread, its keys homed on both devices by hash.
    es = [e for e in gcaches(cl, seg) if e.get("table") == TABLES[0]]
    t.ok(es and all(s.get("occupied_rows", 0) > ROWS[0] // 4 and s.get("bytes", 0) > 0
             for e in es for s in e.get("shards", [])),
         "%s: each shard of %s holds > 1/4 of its rows (keys spread over both devices)"
         % (what, TABLES[0]), es)
    biggest = max((s.get("bytes", 0) for e in es if e.get("table") == TABLES[0]
                   for s in e.get("shards", [])), default=None)
    if limit is not None:
        t.ok(es and all(s.get("bytes", limit + 1) <= limit for e in es
                        for s in e.get("shards", [])),
             "%s: hps-shm info: every shard's bytes <= gpu_cache_max_bytes %d" % (what, limit),
             es)
    keys = {(tb, d) for tb in TABLES for d in ("0", "1")}

    def rows_sum(w):
        rows = shard_gauge(w.metrics_port, "occupied_rows")
        return {tb: rows.get((tb, "0"), 0) + rows.get((tb, "1"), 0) for tb in TABLES}
    for w in workers:
        H.wait_until(lambda: rows_sum(w) == want, 10.0, 0.2)
        rows = shard_gauge(w.metrics_port, "occupied_rows")
        nbytes = shard_gauge(w.metrics_port, "bytes")
        t.eq(set(rows), keys, "%s, worker pid %d: nv_hps_embedding_cache_shard_occupied_rows "
             "per table and shard" % (what, w.pid))
        t.eq(set(nbytes), keys, "%s, worker pid %d: nv_hps_embedding_cache_shard_bytes per "
             "table and shard" % (what, w.pid))
        t.eq(rows_sum(w), want,
             "%s, worker pid %d: the shards' occupied rows add up to each table" % (what, w.pid))
        if limit is not None:
            t.ok(nbytes and all(v <= limit for v in nbytes.values()),
                 "%s, worker pid %d: every shard_bytes <= %d" % (what, w.pid, limit), nbytes)
    return biggest


def sweep(t, model, w, chunks, wants, what):
    """Every key of the model through w (chunks): exact, every key a hit."""
    c0 = cache_counters(w.metrics_port, "m")
    bad = None
    for kpt, want in zip(chunks, wants):
        got = answers(w, kpt)
        if got != want and bad is None:
            bad = H.first_mismatch(got, want, model, kpt)
    c1 = cache_counters(w.metrics_port, "m")
    n = sum(len(ks) for kpt in chunks for ks in kpt)
    t.ok(bad is None, "%s: all %d keys exact" % (what, n), bad)
    q = total(c1, "query_keys") - total(c0, "query_keys")
    h = total(c1, "hit_keys") - total(c0, "hit_keys")
    t.eq((q, h), (n, n), "%s: hit rate 1.0 (%d of %d queried keys hit)" % (what, h, q))


# ---- A: replicate -----------------------------------------------------------

def scenario_replicate(t, cl, rng):
    """Returns the bytes of the largest replicated sparse_embedding0 cache
    (registry), or None."""
    with H.KafkaMock(kafka_topics()) as mock:
        seg, model, conf, coord = start_scenario(
            cl, "replicate", [("model.m", "gpu_cache_placement", "replicate")], mock.bootstrap)
        w0, w1 = workers = start_pair(cl, conf, 0)
        for d, w in enumerate(workers):
            t.ok(all("GPU cache m/%s on device %d:" % (tb, d) in w.log() for tb in TABLES),
                 "replicate: worker %d created its own caches on device %d" % (d, d),
                 w.log()[-2000:])
            t.ok("mapped the shared cache" not in w.log() and not shard_lines(w),
                 "replicate: worker %d mapped no other worker's cache" % d, w.log()[-2000:])
            t.eq(procs_gauge(w.metrics_port), [1, 1],
                 "replicate: one process maps each cache of device %d" % d)
        es = gcaches(cl, seg)
        t.eq(sorted((e.get("table"), e.get("device"), e.get("placement")) for e in es),
             sorted((tb, d, "replicate") for tb in TABLES for d in (0, 1)),
             "replicate: hps-shm info: one cache per table and device, placement "
             "\"replicate\"")
        whole = max((e.get("bytes", 0) for e in es if e.get("table") == TABLES[0]), default=None)
        kpt = sample(model, rng, 2000)
        for d, w in enumerate(workers):
            check_lookups(t, model, w, kpt, "replicate: 2000 keys per table on device %d" % d)

        upd = rng.sample(model.file_keys[UPD_TABLE], 300)
        new = {}
        moved = push_and_wait(t, mock.bootstrap, model, workers, upd, 1, rng, new,
                              "replicate")
        for d, w in enumerate(workers):
            t.ok(moved[w.pid] >= len(upd), "replicate: device %d's refresher applied the "
                 "updates (refresh_keys moved by %d >= %d)" % (d, moved[w.pid], len(upd)))
        check_lookups(t, model, w0, [rng.sample(model.file_keys[0], 50), upd],
                      "replicate: updated keys on device 0 (still cached)", new)

        kill_under_stream(t, w1, w0, model, {UPD_TABLE: set(upd)},
                          "replicate: worker of device 1 SIGKILLed")
        check_lookups(t, model, w0, sample(model, rng, 500),
                      "replicate: device 0 after device 1's worker died", new)
        H.retire([w0, w1, coord], seg)
    return whole


# ---- B: shard ---------------------------------------------------------------

def scenario_shard(t, cl, rng):
    """Returns the bytes of the largest shard of sparse_embedding0, or None."""
    with H.KafkaMock(kafka_topics()) as mock:
        seg, model, conf, coord = start_scenario(
            cl, "shard", [("model.m", "gpu_cache_placement", "shard")], mock.bootstrap)
        workers = start_pair(cl, conf, 2)
        for d, w in enumerate(workers):
            t.ok({tb for tb, _ in shard_lines(w)} == set(TABLES),
                 "shard: worker %d logs \"sharded over devices 0,1\" for each table" % d,
                 w.log()[-2000:])
        creators = [w for w in workers if created_shards(w) == set(TABLES)]
        t.eq(len(creators), 1, "shard: one worker created both sharded caches")
        if len(creators) != 1:
            H.retire(workers + [coord], seg)
            return None
        creator = creators[0]
        other = workers[1 - workers.index(creator)]
        mapped = re.findall(r"GPU cache m/(\S+) sharded over devices 0,1: mapped the shared "
                            r"cache \(created by process %d," % creator.pid, other.log())
        t.ok(sorted(mapped) == TABLES, "shard: the other worker mapped both of the creator's "
             "caches", other.log()[-2000:])
        for d, w in enumerate(workers):
            t.eq(procs_gauge(w.metrics_port), [2, 2],
                 "shard: worker %d: 2 processes map each cache" % d)
        biggest = check_shard_layout(t, cl, seg, workers, "shard")

        kpt = sample(model, rng, 2000)
        for d, w in enumerate(workers):
            check_lookups(t, model, w, kpt, "shard: 2000 keys per table through device %d" % d)

        upd = rng.sample(model.file_keys[UPD_TABLE], 300)
        new = {}
        push_and_wait(t, mock.bootstrap, model, workers, upd, 1, rng, new, "shard, both workers")

        kill_under_stream(t, creator, other, model, {UPD_TABLE: set(upd)},
                          "shard: the creator SIGKILLed")
        ok = H.wait_until(lambda: procs_gauge(other.metrics_port) == [1, 1], 10.0, 0.2)
        t.ok(ok, "shard: the registry lists only the survivor after the creator's death",
             procs_gauge(other.metrics_port))
        ok = H.wait_until(lambda: "refreshes it now" in other.log(), 10.0, 0.2)
        t.ok(ok, "shard: the survivor took over refreshing the caches", other.log()[-2000:])
        check_lookups(t, model, other, sample(model, rng, 2000),
                      "shard: survivor after the creator's death (rows on both devices)", new)

        moved = push_and_wait(t, mock.bootstrap, model, [other], upd, 2, rng, new,
                              "shard, after the creator's death")
        t.ok(moved[other.pid] >= len(upd), "shard: the survivor applied the updates "
             "(refresh_keys moved by %d >= %d)" % (moved[other.pid], len(upd)))
        H.retire(workers + [coord], seg)
    return biggest


# ---- C: gpu_cache_max_bytes -------------------------------------------------

def choose_limit(whole, shard):
    """gpu_cache_max_bytes for scenario C, from what A and B measured with no
    limit: whole = the replicated sparse_embedding0 cache on one device
    (2 x 200,000 slots of 8 + 8 + 1 + 256 bytes: ~104 MiB, rounded to the
    device's allocation granularity, 2 MiB), shard = the larger of its two
    shards in B (about half of it, give or take the granules at which the
    cache's arrays are cut between the devices: ~54 MiB).

    The limit is 3/4 of the whole cache (~78 MiB), rounded down to a MiB,
    and must leave at least 12 MiB above the shard:
      - sharded, each device needs what it needed in B; a worker may keep
        headroom for the cuts and the rounding (a few granules per array:
        hps_gcache_rows_within keeps 10 MiB), which the 12 MiB or more
        cover, so every row stays cached;
      - replicated, one device gets at most 3/4 of the 2 x rows slots it
        would take, 1.5 slots per row or fewer: at that load (0.67 or more)
        the 32-way sets overflow (~1% of the sets get more than 32 of the
        200,000 keys, ~9,000 sets: about a hundred), so fewer rows than the
        table are cached.  (At the 2 x slots of the unlimited cache no set of
        these keys overflows: the whole table is cached there.)
    Returns the limit in bytes, or None when the measurements leave no room."""
    if not whole or not shard:
        return None
    limit = whole * 3 // 4 // MIB * MIB
    return limit if limit >= shard + 12 * MIB else None


def scenario_limit(t, cl, rng, whole, shard):
    limit = choose_limit(whole, shard)
    t.ok(limit is not None, "limit: a gpu_cache_max_bytes between one device's shard (%s "
         "bytes) and the whole cache (%s bytes)" % (shard, whole))
    if limit is None:
        return
    t.diag("gpu_cache_max_bytes = %d (%.1f MiB): shard %s, whole replicated cache %s"
           % (limit, limit / MIB, shard, whole))
    lim = [("model.m", "gpu_cache_max_bytes", str(limit))]
    row_bytes = DIMS[0] * 4

    # replicated: made smaller on each device, with a warning
    seg, model, conf, coord = start_scenario(
        cl, "limit-rep", lim + [("model.m", "gpu_cache_placement", "replicate")])
    workers = start_pair(cl, conf, 4)
    for d, w in enumerate(workers):
        t.ok(warn_lines(w, "gpu_cache_max_bytes"), "limit, replicate: worker %d warns that "
             "gpu_cache_max_bytes made its cache smaller" % d, w.log()[-2000:])
        c = cache_counters(w.metrics_port, "m")
        occ = c.get((TABLES[0], "occupancy_bytes"), -1) // row_bytes
        t.ok(0 < occ < ROWS[0], "limit, replicate: device %d caches %d of %d rows of %s"
             % (d, occ, ROWS[0], TABLES[0]), c)
    es = [e for e in gcaches(cl, seg) if e.get("table") == TABLES[0]]
    t.ok(sorted(e.get("device") for e in es) == [0, 1],
         "limit, replicate: one cache of %s per device" % TABLES[0], es)
    t.ok(es and all(e.get("bytes", limit + 1) <= limit for e in es),
         "limit, replicate: hps-shm info: each cache's bytes <= %d" % limit, es)
    kpt = sample(model, rng, 1000)
    for d, w in enumerate(workers):
        want = model.expected(kpt)
        got = answers(w, kpt)
        t.ok(got == want, "limit, replicate: device %d exact (misses fetched)" % d,
             H.first_mismatch(got, want, model, kpt))
    H.retire(workers + [coord], seg)

    # sharded over both devices: the whole table fits
    seg, model, conf, coord = start_scenario(
        cl, "limit-shard", lim + [("model.m", "gpu_cache_placement", "shard")])
    workers = start_pair(cl, conf, 6)
    for d, w in enumerate(workers):
        t.ok({tb for tb, _ in shard_lines(w)} == set(TABLES),
             "limit, shard: worker %d logs \"sharded over devices 0,1\"" % d, w.log()[-2000:])
        t.eq(warn_lines(w, "gpu_cache_max_bytes"), [],
             "limit, shard: worker %d: no gpu_cache_max_bytes warning" % d)
    check_shard_layout(t, cl, seg, workers, "limit, shard", limit)
    # every key, 50 requests of 4,000 + 100 keys; expected rows computed once
    chunks = [[model.file_keys[i][j::50] for i in range(len(ROWS))] for j in range(50)]
    wants = [model.expected(kpt) for kpt in chunks]
    for d, w in enumerate(workers):
        sweep(t, model, w, chunks, wants, "limit, shard: every key through device %d" % d)
    H.retire(workers + [coord], seg)


def body(t, cl):
    rng = random.Random(23)
    whole = scenario_replicate(t, cl, rng)
    shard = scenario_shard(t, cl, rng)
    scenario_limit(t, cl, rng, whole, shard)


if __name__ == "__main__":
    n = gpu_count()
    if n < 2:
        print("1..0 # SKIP needs 2 CUDA devices, found %d" % n)
        sys.exit(77)
    if not PUSH or not MOCK:  # meson registers this test only where both are built
        print("Bail out! HPS_PUSH and KAFKA_MOCK must name hps-push and kafka-mock")
        sys.exit(1)
    H.run_main("gpu-multi", body)
