#!/usr/bin/env python3
"""
gpu-refresh: online updates reach the GPU caches of hps-worker (issue 5,
"Refresh in the workers").  kafka-mock (librdkafka's mock cluster) is the
broker, hps-push the producer, hps-coordinator applies the updates to the
volatile DB and appends the keys to the table's update log; hps-worker in
GPU mode (gpucacheper 1.0: every row cached) follows the log and replaces
the cached rows.  Exit 77 (skip) where no CUDA device is visible.

  1. push new vectors for 300 cached keys: within a deadline the worker's
     answers equal them, every key still a GPU hit, and
     nv_hps_embedding_cache_refresh_keys moved by >= 300.
  2. push 80000 records (more than the 65536-key log, in one burst, so the
     worker may be lapped and refresh fully): within a deadline every key of
     the table answers its newest vector from the GPU cache.
"""
import os
import random
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import hpstest as H  # noqa: E402
from test_worker_gpu import cache_counters, have_gpu, total  # noqa: E402

PUSH = os.environ.get("HPS_PUSH", "")
MOCK = os.environ.get("KAFKA_MOCK", "")
DIM = 8
ROWS = 4000
TOPIC = "hps_et.m.sparse_embedding0"


def new_vector(key, gen):
    return [H.f32(1000.0 * gen + (key % 997) + d * 0.25) for d in range(DIM)]


def records(keys, gen):
    return b"".join(struct.pack("<q%df" % DIM, k, *new_vector(k, gen)) for k in keys)


def push(bootstrap, data):
    cmd = [PUSH, "-b", bootstrap, "-m", "m", "-t", "sparse_embedding0", "-d", str(DIM),
           "--stdin", "--quiet"]
    p = subprocess.run(cmd, input=data, capture_output=True, timeout=180)
    return p.returncode


def lookup(w, keys):
    out = []
    for i in range(0, len(keys), 1000):
        _, vals = H.decode_output(H.infer(w.http_port, "m", [keys[i:i + 1000]], binary=True))
        out.extend(vals)
    return [out[i * DIM:(i + 1) * DIM] for i in range(len(keys))]


def body(t, cl):
    mock = subprocess.Popen([MOCK, "--partitions", "4", TOPIC], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        bootstrap = mock.stdout.readline().split()[1]
        scenario(t, cl, bootstrap)
    finally:
        mock.kill()
        mock.wait(10)


def scenario(t, cl, bootstrap):
    rng = random.Random(5)
    model = cl.gen_model("m", [ROWS], [DIM], defaults=[0.5])
    conf = cl.write_config("refresh.ini", model.ini_text, [
        ("volatile_db", "initial_cache_rate", 1.0), ("hps", "heartbeat_interval_ms", 50),
        ("worker", "http_threads", 2), ("model.m", "gpucache", "true"),
        ("model.m", "gpucacheper", 1.0), ("model.m", "hit_rate_threshold", 0.5),
        ("update_source", "type", "kafka_message_queue"),
        ("update_source", "brokers", bootstrap),
        ("update_source", "poll_timeout_ms", "100"),
        ("update_source", "metadata_refresh_interval_ms", "500")])
    cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    keys = rng.sample(model.file_keys[0], 300)
    t.eq(lookup(w, keys), [H.gen_vector(0, k, DIM) for k in keys], "initial vectors")
    c0 = cache_counters(w.metrics_port, "m")
    t.ok("refresh_keys" in {n for (_, n) in c0}, "nv_hps_embedding_cache_refresh_keys exported",
         sorted(c0))

    # 1. updates of cached keys replace the cached rows.
    t.eq(push(bootstrap, records(keys, 1)), 0, "hps-push: 300 updates delivered")
    want = [new_vector(k, 1) for k in keys]
    ok = H.wait_until(lambda: lookup(w, keys) == want, 30.0, 0.05)
    t.ok(ok, "GPU worker answers the new vectors within 30 s")
    ca = cache_counters(w.metrics_port, "m")
    lookup(w, keys)
    cb = cache_counters(w.metrics_port, "m")
    t.eq(total(cb, "hit_keys") - total(ca, "hit_keys"), len(keys),
         "updated keys are still GPU hits (replaced in the cache, not missed)")
    moved = total(cb, "refresh_keys") - total(c0, "refresh_keys")
    t.ok(moved >= len(keys), "refresh_keys moved by %d (>= %d)" % (moved, len(keys)))
    t.eq(total(cb, "eviction_keys"), 0, "no evictions (update never inserts)")

    # 2. a burst larger than the update log: the worker still converges.
    allk = list(model.file_keys[0])
    burst = (allk * (80000 // ROWS + 1))[:80000]
    t.eq(push(bootstrap, records(burst, 2)), 0, "hps-push: 80000 updates delivered")
    want = [new_vector(k, 2) for k in allk]
    ok = H.wait_until(lambda: lookup(w, allk) == want, 90.0, 0.2)
    t.ok(ok, "after a burst of 80000 updates every key answers its newest vector")
    c2 = cache_counters(w.metrics_port, "m")
    lookup(w, allk)
    c3 = cache_counters(w.metrics_port, "m")
    t.eq(total(c3, "hit_keys") - total(c2, "hit_keys"), ROWS, "every key a GPU hit")
    print("# full_refreshes=%d refresh_keys=%d" % (total(c3, "full_refreshes"),
                                                  total(c3, "refresh_keys")))
    t.ok(w.alive(), "worker alive")


if __name__ == "__main__":
    if not have_gpu():
        print("1..0 # SKIP no CUDA device visible")
        sys.exit(77)
    if not PUSH or not MOCK:  # meson registers this test only where both are built
        print("Bail out! HPS_PUSH and KAFKA_MOCK must name hps-push and kafka-mock")
        sys.exit(1)
    H.run_main("gpu-refresh", body)
