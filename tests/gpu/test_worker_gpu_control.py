#!/usr/bin/env python3
"""
gpu-control: Triton's explicit model control with GPU caches.  Exit 77
(skip) where no CUDA device is visible.

Model m (gpucache, every row cached) serves on two GPU workers of device 0
that share its caches, under a stream of exactly checked lookups, with
model_control_mode = explicit and startup_models = ^m$.  Then:
  - POST load of model n (gpucache, ~200 MB of cache) through worker 0:
    200; both workers build n's caches (one creates, the other maps them)
    and every key of n is a GPU hit on both, with n's vectors;
  - m is served from GPU caches again on both (built anew from the new
    segment), the stream on m sees 0 failed or wrong answers, and once it
    stopped every key of m is a GPU hit on both;
  - POST unload of n through worker 1: 200; n's caches are gone from the
    registry and the device memory returns (within half of n's caches);
  - a model q added to the INI since the start, loaded through worker 0:
    both workers learn it, build (one) and map (the other) its GPU cache,
    and serve every key of it exactly as a GPU hit.
"""
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import hpstest as H  # noqa: E402
from test_reload import SETTINGS, start_streams, stop_streams  # noqa: E402
from test_worker_gpu import cache_counters, have_gpu, total  # noqa: E402
from test_worker_gpu_reload import used_mib  # noqa: E402


def gpu(name):
    return [("model." + name, "gpucache", "true"), ("model." + name, "gpucacheper", 1.0),
            ("model." + name, "hit_rate_threshold", 2.0)]


def all_hits(t, w, model, i):
    rng = random.Random(9)
    kpt = [rng.sample(ks, min(len(ks), 1500)) for ks in model.file_keys]
    before = cache_counters(w.metrics_port, model.name)
    _, got = H.decode_output(H.infer(w.http_port, model.name, kpt, binary=True))
    after = cache_counters(w.metrics_port, model.name)
    t.ok(got == model.expected(kpt), "worker %d: model %s's vectors exact" % (i, model.name))
    t.eq(total(after, "hit_keys") - total(before, "hit_keys"), sum(len(k) for k in kpt),
         "worker %d: every key of %s a GPU hit" % (i, model.name))


def body(t, cl):
    m = cl.gen_model("m", rows=[60000, 8000], dims=[16, 8], defaults=[0.5, -2.0])
    n = cl.gen_model("n", rows=[400000], dims=[64])
    text = m.ini_text + "\n" + n.ini_text[n.ini_text.index("[model.n]"):]
    settings = SETTINGS + gpu("m") + gpu("n") + [
        ("hps", "model_control_mode", "explicit"), ("hps", "startup_models", "^m$"),
        ("volatile_db", "shared_memory_size", "1GiB")]
    conf = cl.write_config("hps.ini", text, settings)
    c = cl.start_coordinator(conf)
    ws = [cl.start_worker(conf, instance=i) for i in range(2)]
    t.ok(H.wait_until(lambda: all(len(cache_counters(w.metrics_port, "m")) > 0 for w in ws), 30),
         "both workers serve m from GPU caches")
    mem0 = used_mib()
    streams = start_streams(ws, {1: m}, 11)

    r = H.http(ws[0].http_port, "POST", "/v2/repository/models/n/load", body=b"{}", timeout=120)
    t.eq(r.status, 200, "load n through worker 0: 200")
    t.ok(H.wait_until(lambda: all(len(cache_counters(w.metrics_port, "n")) > 0 and
                                  len(cache_counters(w.metrics_port, "m")) > 0 for w in ws), 60),
         "both workers serve m and n from GPU caches", ws[1].log()[-2000:])
    for i, w in enumerate(ws):
        all_hits(t, w, n, i)  # (m's hits are counted with its stream's: checked after it)
    es = [e for e in cl.shm_info().get("gpu_caches", []) if e.get("state") == "ready"]
    t.eq(sorted((e.get("model"), e.get("table"), len(e.get("attached_pids", []))) for e in es),
         [("m", "sparse_embedding0", 2), ("m", "sparse_embedding1", 2),
          ("n", "sparse_embedding0", 2)], "the registry: one cache per table, both workers on it")
    n_mib = sum(e.get("bytes", 0) for e in es if e.get("model") == "n") >> 20
    t.ok(n_mib >= 96, "n's cache is large enough to measure (%d MiB)" % n_mib)

    r = H.http(ws[1].http_port, "POST", "/v2/repository/models/n/unload", body=b"{}",
               timeout=120)
    t.eq(r.status, 200, "unload n through worker 1: 200")
    t.ok(H.wait_until(lambda: all(len(cache_counters(w.metrics_port, "m")) > 0 for w in ws), 60),
         "both workers serve m from GPU caches again")
    es = [e for e in cl.shm_info().get("gpu_caches", []) if e.get("state") == "ready"]
    t.eq(sorted(e.get("model") for e in es), ["m", "m"], "the registry: m's caches only")
    time.sleep(1.0)
    stop_streams(t, streams, [1])
    for i, w in enumerate(ws):
        all_hits(t, w, m, i)
    ok = H.wait_until(lambda: used_mib() <= mem0 + n_mib // 2, 20, 0.5)
    t.ok(ok, "device memory returned: %d MiB used before the load, %d after the unload (n's "
         "caches: %d MiB)" % (mem0, used_mib(), n_mib))
    # A model added to the INI since the workers started: learned, with GPU
    # caches like a model known at start; m still from its caches.
    q = cl.gen_model("q", rows=[3000], dims=[32])
    cl.write_config("hps.ini", text + "\n" + q.ini_text[q.ini_text.index("[model.q]"):],
                    settings + gpu("q"))
    r = H.http(ws[0].http_port, "POST", "/v2/repository/models/q/load", body=b"{}", timeout=120)
    t.eq(r.status, 200, "load q, added to the INI since the start, through worker 0: 200")
    kpt = [q.file_keys[0][:500]]

    def serves_q(w):
        rq = H.infer(w.http_port, "q", kpt, binary=True)
        return rq.status == 200 and H.decode_output(rq)[1] == q.expected(kpt)
    t.ok(H.wait_until(lambda: all(serves_q(w) for w in ws), 10),
         "both GPU workers serve q's vectors exactly (learned from the INI)")
    t.ok(H.wait_until(lambda: all(len(cache_counters(w.metrics_port, "q")) > 0 for w in ws), 60),
         "both workers serve q from a GPU cache", ws[1].log()[-2000:])
    for i, w in enumerate(ws):
        all_hits(t, w, q, i)
    t.ok(all(len(cache_counters(w.metrics_port, "m")) > 0 for w in ws),
         "m is still served from GPU caches")
    t.ok(c.alive(), "the coordinator serves on")


if __name__ == "__main__":
    if not have_gpu():
        print("1..0 # SKIP no CUDA device")
        sys.exit(77)
    H.run_main("gpu-control", body)
