#!/usr/bin/env python3
"""
gpu-worker: hps-coordinator + hps-worker in GPU mode (gpucache = true), real
processes; exit 77 (skip) where no CUDA device is visible.

Scenario 1 (segment 1): 2 tables of 20000 and 5000 rows, dims 16 and 8,
defaults 0.5 and -2, initial_cache_rate 0.5, cache_missed_embeddings.
  - worker A: gpucacheper 0.25, hit_rate_threshold 2 (always synchronous
    insertion): VDB, PDB-only and unknown keys exact on the first request;
    the same request again is exact and its found keys are now GPU hits
    (nv_hps_embedding_cache_* counters); cache capacity and occupancy.
  - worker B: hit_rate_threshold 0 (always background insertion, HugeCTR's
    asynchronous semantics): misses get the default value on the first
    request; the background thread inserts the found rows, so the same
    request later is exact and all its found keys hit.
Scenario 2 (segment 2): initial_cache_rate 1.0, gpucacheper 1.0: the first
request of random keys of every table is answered entirely by the GPU
cache (hit keys == query keys), exact.
Scenario 3: periodic refresh (scenario_timer).  Scenario 4: outputs of over
1 MiB land in page-locked buffers, exact on both launch paths.  Scenario 5:
synchronous inserts of repeated misses into small caches (scenario_distinct).
Scenario 6: [worker] lookup_path (scenario_paths): cpu answers every request
from the volatile DB (the caches see no lookup), auto takes both paths on
requests of one size (each measured, then the other re-measured on one call
in 32), every answer exact, nv_hps_{gpu,cpu}_path_requests adding up.
(The suite sets lookup_path = gpu elsewhere: $HPS_TEST_LOOKUP_PATH.)
"""
import os
import random
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import hpstest as H  # noqa: E402

RATE = 0.5


have_gpu = H.have_gpu  # (the gpu suite's tests import it from here)


def cache_counters(port, model):
    """{(table, name): value} of the nv_hps_embedding_cache_* samples of model."""
    out = {}
    pat = re.compile(r'nv_hps_embedding_cache_(\w+)\{model="%s",table="([^"]+)",device="\d+"\}'
                     % re.escape(model))
    for k, v in H.metrics(port).items():
        m = pat.fullmatch(k)
        if m:
            out[(m.group(2), m.group(1))] = int(v)
    return out


def total(c, name):
    return sum(v for (tb, n), v in c.items() if n == name)


def request(rng, model, n_vdb, n_pdb, n_unk):
    kpt = []
    for t in range(len(model.rows)):
        ks = rng.sample(model.vdb_keys(t, RATE), n_vdb)
        ks += rng.sample(model.pdb_only_keys(t, RATE), n_pdb)
        ks += model.unknown_keys(t, n_unk, start=7)
        rng.shuffle(ks)
        kpt.append(ks)
    return kpt


def check_sync(t, model, w, kpt):
    want = model.expected(kpt)
    nk = sum(len(k) for k in kpt)
    nunk = sum(1 for i, ks in enumerate(kpt) for k in ks if k not in model.key_sets()[i])
    for rnd in (1, 2):
        c0 = cache_counters(w.metrics_port, "m")
        _, got = H.decode_output(H.infer(w.http_port, "m", kpt, binary=True))
        t.ok(got == want, "sync worker, request %d: VDB, PDB-only and unknown keys exact" % rnd,
             H.first_mismatch(got, want, model, kpt))
        c1 = cache_counters(w.metrics_port, "m")
        t.eq(total(c1, "query_keys") - total(c0, "query_keys"), nk,
             "request %d: every key queried in the GPU cache" % rnd)
        if rnd == 2:
            t.eq(total(c1, "hit_keys") - total(c0, "hit_keys"), nk - nunk,
                 "request 2: every found key of request 1 is now a GPU hit")
    c = cache_counters(w.metrics_port, "m")
    t.ok(total(c, "capacity_bytes") >= (5000 * 16 + 1250 * 8) * 4,
         "capacity >= gpucacheper 0.25 of each table", c)
    t.ok(0 < total(c, "occupancy_bytes") <= total(c, "capacity_bytes"), "occupancy in (0, cap]", c)


def rows_of(flat, kpt, dims):
    """Split OUTPUT0 into {(table, position): row}."""
    out, o = {}, 0
    for i, ks in enumerate(kpt):
        for j in range(len(ks)):
            out[(i, j)] = flat[o:o + dims[i]]
            o += dims[i]
    return out


def check_async(t, model, w, kpt):
    pdb = [set(model.pdb_only_keys(i, RATE)) for i in range(2)]
    _, got = H.decode_output(H.infer(w.http_port, "m", kpt, binary=True))
    # GPU misses (PDB-only keys, unknown keys, VDB keys not preloaded) get
    # the table's default this time; preloaded VDB keys are exact.
    g = rows_of(got, kpt, model.dims)
    exact = rows_of(model.expected(kpt), kpt, model.dims)
    dflt = rows_of(model.expected(kpt, known=lambda i, k: False), kpt, model.dims)
    # Worker B shares worker A's caches (one per device): keys A inserted
    # are hits for B too, so any position may be exact; none may be other.
    bad = [(i, j) for (i, j) in g if g[(i, j)] != exact[(i, j)] and g[(i, j)] != dflt[(i, j)]]
    t.ok(not bad, "async worker, request 1: every row exact (hit) or the default (miss)", bad[:5])
    pdb_dflt = sum(1 for (i, j) in g if kpt[i][j] in pdb[i] and g[(i, j)] == dflt[(i, j)]
                   and exact[(i, j)] != dflt[(i, j)])
    t.ok(pdb_dflt > 0, "async worker, request 1: PDB-only misses get the default (HugeCTR "
         "semantics), %d of them" % pdb_dflt)
    t.ok(sum(len(p & set(kpt[i])) for i, p in enumerate(pdb)) > 0,
         "async request holds PDB-only keys")
    want = model.expected(kpt)
    ok = H.wait_until(lambda: H.decode_output(H.infer(w.http_port, "m", kpt,
                                                      binary=True))[1] == want, 20.0, 0.1)
    t.ok(ok, "async worker: the background thread inserted the fetched rows; exact later")
    c0 = cache_counters(w.metrics_port, "m")
    H.infer(w.http_port, "m", kpt, binary=True)
    c1 = cache_counters(w.metrics_port, "m")
    nunk = sum(1 for i, ks in enumerate(kpt) for k in ks if k not in model.key_sets()[i])
    t.eq(total(c1, "hit_keys") - total(c0, "hit_keys"), sum(map(len, kpt)) - nunk,
         "async worker: every found key now hits")


def start_gpu_model(cl, name, instance, rows, dims, defaults, settings):
    """Model "m" in a segment and directory of its own (name), a coordinator
    and one GPU worker: gpucache on, 50 ms heartbeats, 2 HTTP threads, plus
    settings.  Returns (model, worker)."""
    seg = cl.new_segment_name(name)
    model = cl.gen_model("m", rows=rows, dims=dims, defaults=defaults, subdir=name, segment=seg)
    conf = cl.write_config(name + ".ini", model.ini_text, [
        ("hps", "heartbeat_interval_ms", 50), ("worker", "http_threads", 2),
        ("model.m", "gpucache", "true")] + settings)
    cl.start_coordinator(conf)
    return model, cl.start_worker(conf, instance=instance)


def scenario_partial(t, cl, rng):
    model = cl.gen_model("m", rows=[20000, 5000], dims=[16, 8], defaults=[0.5, -2.0])
    base = [("volatile_db", "initial_cache_rate", RATE),
            ("volatile_db", "cache_missed_embeddings", "true"),
            ("hps", "heartbeat_interval_ms", 50), ("worker", "miss_timeout_ms", 2000),
            ("worker", "http_threads", 2), ("model.m", "gpucache", "true"),
            ("model.m", "gpucacheper", 0.25)]
    sync_conf = cl.write_config("sync.ini", model.ini_text,
                                base + [("model.m", "hit_rate_threshold", 2.0)])
    async_conf = cl.write_config("async.ini", model.ini_text,
                                 base + [("model.m", "hit_rate_threshold", 0.0)])
    cl.start_coordinator(sync_conf)
    wa = cl.start_worker(sync_conf, instance=0)
    t.ok("GPU cache m/sparse_embedding0" in wa.log(), "worker A created its GPU caches",
         wa.log()[-2000:])
    t.ok(cache_counters(wa.metrics_port, "m"), "worker A exports nv_hps_embedding_cache_*")
    check_sync(t, model, wa, request(rng, model, 40, 30, 5))
    wb = cl.start_worker(async_conf, instance=1)
    check_async(t, model, wb, request(rng, model, 40, 30, 5))


def scenario_full(t, cl, rng):
    model, w = start_gpu_model(cl, "full", 2, [30000, 7000], [32, 4], [1.0, 2.0], [
        ("volatile_db", "initial_cache_rate", 1.0), ("model.m", "gpucacheper", 1.0),
        ("model.m", "hit_rate_threshold", 0.5)])
    kpt = [rng.sample(model.file_keys[i], 500) for i in range(2)]
    c0 = cache_counters(w.metrics_port, "m")
    _, got = H.decode_output(H.infer(w.http_port, "m", kpt, binary=True))
    c1 = cache_counters(w.metrics_port, "m")
    want = model.expected(kpt)
    t.ok(got == want, "gpucacheper 1.0: first request exact", H.first_mismatch(got, want))
    q = total(c1, "query_keys") - total(c0, "query_keys")
    h = total(c1, "hit_keys") - total(c0, "hit_keys")
    t.eq((q, h), (1000, 1000), "gpucacheper 1.0: hit rate 1.0 from the first request")
    t.eq(total(c1, "eviction_keys"), 0, "gpucacheper 1.0: the preload evicted nothing")
    t.ok(total(c1, "occupancy_bytes") == (30000 * 32 + 7000 * 4) * 4,
         "gpucacheper 1.0: every row of every table is on the GPU", c1)
    # A shape that repeats is captured as a CUDA graph on its second request
    # and replayed after; another shape between them keeps its own graph.
    other = [rng.sample(model.file_keys[i], 100) for i in range(2)]
    runs = [("A", kpt)] * 3 + [("B", other)] * 3 + [("A", kpt)] * 2
    c0 = cache_counters(w.metrics_port, "m")
    bad = []
    for name, ks in runs:
        _, got = H.decode_output(H.infer(w.http_port, "m", ks, binary=True))
        if got != model.expected(ks):
            bad.append(name)
    c1 = cache_counters(w.metrics_port, "m")
    t.ok(not bad, "repeated shapes (captured and replayed graphs): every answer exact", bad)
    q = total(c1, "query_keys") - total(c0, "query_keys")
    h = total(c1, "hit_keys") - total(c0, "hit_keys")
    t.eq((q, h), (5 * 1000 + 3 * 200, 5 * 1000 + 3 * 200),
         "replayed lookups count their keys and hits")


def scenario_timer(t, cl, rng):
    """refresh_delay / refresh_interval / cache_refresh_percentage_per_iteration:
    every cached row is re-read from the layers below (volatile DB, then the
    coordinator's persistent DB) periodically, in steps; answers stay exact."""
    model, w = start_gpu_model(cl, "timer", 3, [12000, 3000], [16, 8], [0.0, 0.0], [
        ("volatile_db", "initial_cache_rate", 0.5), ("model.m", "gpucacheper", 1.0),
        ("model.m", "hit_rate_threshold", 2.0), ("model.m", "refresh_delay", 0.5),
        ("model.m", "refresh_interval", 1),
        ("model.m", "cache_refresh_percentage_per_iteration", 0.05)])
    kpt = [rng.sample(model.file_keys[i], 400) for i in range(2)]
    want = model.expected(kpt)
    _, got = H.decode_output(H.infer(w.http_port, "m", kpt, binary=True))
    t.ok(got == want, "timer: exact (PDB-only keys fetched and inserted)", H.first_mismatch(got, want))
    c0 = cache_counters(w.metrics_port, "m")
    ok = H.wait_until(lambda: total(cache_counters(w.metrics_port, "m"), "full_refreshes")
                      >= total(c0, "full_refreshes") + 4, 15.0, 0.1)
    c1 = cache_counters(w.metrics_port, "m")
    t.ok(ok, "timer: both tables refreshed at least twice within 15 s", c1)
    t.ok(total(c1, "refresh_keys") - total(c0, "refresh_keys") >= 2 * (6000 + 1500),
         "timer: every cached row was rewritten at each refresh", (c0, c1))
    _, got = H.decode_output(H.infer(w.http_port, "m", kpt, binary=True))
    t.ok(got == want, "timer: exact after refreshes", H.first_mismatch(got, want))


def scenario_pinned(t, cl, rng):
    """OUTPUT0 of 1 MiB or more: the front end keeps the buffer and the worker
    page-locks it (nv_hps_pinned_output_bytes), so later lookups copy rows from
    the GPU straight into it, on both launch paths (one launch for every
    table up to 1,024 keys per table, one per table above); every answer is
    exact, unknown keys included."""
    model, w = start_gpu_model(cl, "pinned", 4, [4000, 1000], [256, 8], [3.0, -1.0], [
        ("volatile_db", "initial_cache_rate", 1.0), ("model.m", "gpucacheper", 1.0),
        ("model.m", "hit_rate_threshold", 2.0)])
    pinned = lambda: int(H.metrics(w.metrics_port).get("nv_hps_pinned_output_bytes", -1))
    t.eq(pinned(), 0, "nothing pinned before the first large response")
    for n, path in ((1000, "one launch"), (6000, "a launch per table")):
        kpt = [[rng.choice(model.file_keys[i]) for _ in range(n)] + model.unknown_keys(i, 3)
               for i in range(2)]
        want = model.expected(kpt)
        for rnd in range(4):
            _, got = H.decode_output(H.infer(w.http_port, "m", kpt, binary=rnd % 2 == 0))
            t.ok(got == want, "%d keys per table (%s), request %d: exact" % (n, path, rnd + 1),
                 H.first_mismatch(got, want))
    t.ok(pinned() >= (1000 + 3) * 264 * 4, "nv_hps_pinned_output_bytes counts the kept buffers",
         pinned())


def scenario_distinct(t, cl, rng):
    """Synchronous inserts take each distinct missed key once, at most the
    cache's capacity of them, the most requested first.  Caches of one set
    (32 rows) start empty (initial_cache_rate 0: the volatile DB, which the
    preload reads, is empty), so every key of the first request misses and
    is found through the coordinator.  Table 0: 32 hot keys x 10 and 200
    cold keys once (232 distinct > 32): only the 32 hot keys are inserted.
    Table 1: 8 hot keys x 5 and 20 cold keys once (28 distinct): each once.
    The model's counters still count request positions."""
    model, w = start_gpu_model(cl, "distinct", 5, [2000, 1000], [16, 8], [0.25, -4.0], [
        ("volatile_db", "initial_cache_rate", 0.0), ("worker", "miss_timeout_ms", 2000),
        ("model.m", "gpucacheper", 0.016), ("model.m", "hit_rate_threshold", 2.0)])
    hot, kpt = [], []
    for i, (nh, reps, ncold, nunk) in enumerate(((32, 10, 200, 2), (8, 5, 20, 1))):
        ks = rng.sample(model.file_keys[i], nh + ncold)
        hot.append(ks[:nh])
        row = ks[:nh] * reps + ks[nh:] + model.unknown_keys(i, nunk, start=11) * 5
        rng.shuffle(row)
        kpt.append(row)
    c0, h0 = cache_counters(w.metrics_port, "m"), H.hps_counters(w.metrics_port, "m")
    _, got = H.decode_output(H.infer(w.http_port, "m", kpt, binary=True))
    c1, h1 = cache_counters(w.metrics_port, "m"), H.hps_counters(w.metrics_port, "m")
    want = model.expected(kpt)
    t.ok(got == want, "distinct: repeated misses exact", H.first_mismatch(got, want))
    t.eq(total(c1, "capacity_bytes"), 32 * 16 * 4 + 32 * 8 * 4, "distinct: caches of one set each")
    t.eq(total(c1, "hit_keys") - total(c0, "hit_keys"), 0, "distinct: empty caches, no hits")
    t.eq(total(c1, "insert_keys") - total(c0, "insert_keys"), 32 + 28,
         "distinct: 32 of 232 distinct keys inserted into table 0, 28 into table 1")
    d = H.diff(h1, h0)
    t.eq((d["persistent_db_hit_keys"], d["default_value_keys"]), (520 + 60, 10 + 5),
         "distinct: the counters count positions, not distinct keys")
    c0 = cache_counters(w.metrics_port, "m")
    _, got = H.decode_output(H.infer(w.http_port, "m", hot, binary=True))
    c1 = cache_counters(w.metrics_port, "m")
    want = model.expected(hot)
    t.ok(got == want, "distinct: the hot keys exact", H.first_mismatch(got, want))
    t.eq(total(c1, "hit_keys") - total(c0, "hit_keys"), 40,
         "distinct: the most requested keys were the ones inserted (all hit)")


def path_requests(port):
    """(GPU path, CPU path) requests of model m (nv_hps_*_path_requests)."""
    return tuple(sum(v for lab, v in H.metric_samples(port, "nv_hps_%s_path_requests" % p)
                     if lab.get("model") == "m") for p in ("gpu", "cpu"))


def scenario_paths(t, cl, rng):
    settings = [("volatile_db", "initial_cache_rate", 1.0), ("model.m", "gpucacheper", 1.0)]
    model, w = start_gpu_model(cl, "paths", 3, [4000, 900], [16, 8], [0.5, -1.0],
                               settings + [("worker", "lookup_path", "cpu")])
    kpt = [rng.sample(model.file_keys[i], 5) for i in range(2)]
    c0 = cache_counters(w.metrics_port, "m")
    bad = sum(H.decode_output(H.infer(w.http_port, "m", kpt, binary=True))[1] !=
              model.expected(kpt) for _ in range(20))
    c1 = cache_counters(w.metrics_port, "m")
    t.eq(bad, 0, "lookup_path = cpu: 20 requests exact")
    t.eq(path_requests(w.metrics_port), (0, 20), "lookup_path = cpu: all 20 from the volatile DB")
    t.eq(total(c1, "query_keys") - total(c0, "query_keys"), 0,
         "lookup_path = cpu: the GPU caches saw no lookup")
    conf = cl.write_config("paths-auto.ini", model.ini_text, [
        ("hps", "heartbeat_interval_ms", 50), ("worker", "http_threads", 2),
        ("model.m", "gpucache", "true"), ("worker", "lookup_path", "auto")] + settings)
    wa = cl.start_worker(conf, instance=4)
    bad = sum(H.decode_output(H.infer(wa.http_port, "m", kpt, binary=True))[1] !=
              model.expected(kpt) for _ in range(200))
    g, c = path_requests(wa.metrics_port)
    t.eq(bad, 0, "lookup_path = auto: 200 requests exact")
    t.ok(g >= 2 and c >= 2 and g + c == 200,
         "lookup_path = auto: both paths answered requests of one size (%d GPU, %d CPU)" % (g, c))


def body(t, cl):
    rng = random.Random(4)
    scenario_partial(t, cl, rng)
    scenario_full(t, cl, rng)
    scenario_timer(t, cl, rng)
    scenario_pinned(t, cl, rng)
    scenario_distinct(t, cl, rng)
    scenario_paths(t, cl, rng)


if __name__ == "__main__":
    if not have_gpu():
        print("1..0 # SKIP no CUDA device visible")
        sys.exit(77)
    H.run_main("gpu-worker", body)
