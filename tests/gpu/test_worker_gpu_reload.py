#!/usr/bin/env python3
"""
gpu-reload: a reload (SIGHUP to hps-coordinator, issue 20) swaps the GPU
caches of two workers sharing them on one device.  Exit 77 (skip) where no
CUDA device is visible.

Model m, version 1, gpucacheper 1.0 (every row cached), served by two GPU
workers of device 0 that share each table's cache, each under a stream of
exactly checked lookups (int-reload's Stream: every answer wholly version 1
or wholly version 2, never back).  The INI then names version 2; SIGHUP:
  - both workers report version 2 and log that they built their GPU caches
    anew (the CPU path answers meanwhile, wholly from the new segment);
  - afterwards every lookup of both workers is a GPU hit again (the new
    caches are preloaded), answered with version 2's vectors;
  - the new segment's registry lists one cache per table, mapped by both
    workers (one created it, the other mapped it);
  - device memory returns: after the old caches are freed, the GPU's used
    memory is back within half the caches' size of what it was before.
Then a version 3 halves table 0's dimension (64 to 32), under the same
streams (every answer wholly version 2 at 64 or version 3 at 32): both
workers build caches of the new shape, every key is a GPU hit with the new
vectors, and the device memory falls by at least half the difference.
"""
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import hpstest as H  # noqa: E402
from test_reload import SETTINGS, reload_to, start_streams, stop_streams  # noqa: E402
from test_worker_gpu import cache_counters, have_gpu, total  # noqa: E402

ROWS = [400000, 8000]  # a cache of ~220 MB: its memory's return is measurable
DIMS = [64, 8]
DEFAULTS = [0.5, -2.0]


def used_mib():
    r = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                        "-i", "0"], capture_output=True, text=True, timeout=30)
    return int(r.stdout.strip().splitlines()[0])


def check_served(t, cl, ws, model, rng, what):
    """Every one of 2,500 keys of model (2,000 of table 0, 500 of table 1) is
    a GPU hit on each worker of ws with model's vectors, and the segment's
    registry has one cache per table mapped by both; returns the caches'
    MiB."""
    kpt = [rng.sample(model.file_keys[0], 2000), rng.sample(model.file_keys[1], 500)]
    for i, w in enumerate(ws):
        before = cache_counters(w.metrics_port, "m")
        _, got = H.decode_output(H.infer(w.http_port, "m", kpt, binary=True))
        after = cache_counters(w.metrics_port, "m")
        t.ok(got == model.expected(kpt), "worker %d: %s's vectors" % (i, what))
        t.eq(total(after, "hit_keys") - total(before, "hit_keys"), 2500,
             "worker %d: all 2500 keys GPU hits in %s's caches" % (i, what))
    es = [e for e in cl.shm_info().get("gpu_caches", []) if e.get("state") == "ready"]
    t.eq(sorted((e.get("table"), len(e.get("attached_pids", []))) for e in es),
         [("sparse_embedding0", 2), ("sparse_embedding1", 2)],
         "%s's registry: one cache per table, both workers on it" % what)
    return sum(e.get("bytes", 0) for e in es) >> 20


def body(t, cl):
    gpu = SETTINGS + [("model.m", "gpucache", "true"), ("model.m", "gpucacheper", 1.0),
                      ("model.m", "hit_rate_threshold", 2.0)]
    m1 = cl.gen_model("m", rows=ROWS, dims=DIMS, defaults=DEFAULTS, subdir="m_v1", version=1)
    m2 = cl.gen_model("m", rows=ROWS, dims=DIMS, defaults=DEFAULTS, subdir="m_v2", version=2)
    conf = cl.write_config("hps.ini", m1.ini_text, gpu)
    c = cl.start_coordinator(conf)
    ws = [cl.start_worker(conf, instance=i) for i in range(2)]
    t.ok(all("preloaded" in w.log() or "mapped the shared cache" in w.log() for w in ws),
         "both workers serve from GPU caches", ws[1].log()[-1500:])
    mem0 = used_mib()
    streams = start_streams(ws, {1: m1, 2: m2}, 3)

    reload_to(t, cl, c, ws, m2.ini_text, gpu, 2)
    t.ok(H.wait_until(lambda: all("building its GPU caches anew" in w.log() for w in ws), 15),
         "both workers build their GPU caches anew", ws[0].log()[-2000:])
    t.ok(H.wait_until(lambda: all(len(cache_counters(w.metrics_port, "m")) > 0
                                  for w in ws), 30),
         "both workers serve model m from GPU caches again")
    time.sleep(1.0)
    stop_streams(t, streams, [1, 2])

    # every key a GPU hit again, with version 2's rows
    rng = random.Random(5)
    cache_mib = check_served(t, cl, ws, m2, rng, "version 2")
    t.ok(cache_mib >= 128, "the caches are large enough to measure (%d MiB)" % cache_mib)
    ok = H.wait_until(lambda: used_mib() <= mem0 + cache_mib // 2, 15, 0.5)
    t.ok(ok, "device memory returned: %d MiB used before the reload, %d after (the caches: %d "
         "MiB; not freed would be about %d)" % (mem0, used_mib(), cache_mib, mem0 + cache_mib))

    # ---- a reload that halves table 0's dimension (64 -> 32) -----------------
    m3 = cl.gen_model("m", rows=ROWS, dims=[32, 8], defaults=DEFAULTS, subdir="m_dim32",
                      version=3)
    mem2 = used_mib()
    built = [w.log().count("building its GPU caches anew") for w in ws]
    streams = start_streams(ws, {2: m2, 3: m3}, 11)
    reload_to(t, cl, c, ws, m3.ini_text, gpu, 3)
    t.ok(H.wait_until(lambda: all(len(cache_counters(w.metrics_port, "m")) > 0 and
                                  w.log().count("building its GPU caches anew") > b
                                  for w, b in zip(ws, built)), 30),
         "dimension 64 -> 32: both workers build GPU caches of the new shape and serve m from "
         "them", ws[0].log()[-2000:])
    time.sleep(1.0)
    stop_streams(t, streams, [2, 3])
    new_mib = check_served(t, cl, ws, m3, rng, "dimension 32")
    ok = H.wait_until(lambda: used_mib() <= mem2 - (cache_mib - new_mib) // 2, 15, 0.5)
    t.ok(ok, "device memory: %d MiB used before, %d after (the caches: %d MiB, then %d)"
         % (mem2, used_mib(), cache_mib, new_mib))


if __name__ == "__main__":
    if not have_gpu():
        print("1..0 # SKIP no CUDA device")
        sys.exit(77)
    H.run_main("gpu-reload", body)
