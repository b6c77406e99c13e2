#!/usr/bin/env python3
"""
gpu-share: the GPU caches of a device are shared by its workers (CUDA VMM
allocation, descriptors passed over Unix sockets, registry in the segment),
and outlive the worker that created them.  Real processes; exit 77 (skip)
where no CUDA device is visible.

  1. worker A creates and preloads the caches; worker B maps A's caches
     (log, nv_hps_embedding_cache_processes == 2 on both).
  2. Keys inserted through A are hits through B (one cache, not two).
  3. A and B both serve request streams; A is SIGKILLed mid-stream (its
     synchronous inserts racing B's lookups): B answers every request,
     exactly, before, during and after; B drops A from the registry and
     becomes the refresher.
  4. worker C starts after A died: it maps the cache from B (the memory
     outlived its creator), and the keys inserted through A still hit.
  5. a segment name of 150 characters (too long for a socket address):
     two workers of it share their caches all the same.
"""
import os
import random
import re
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import hpstest as H  # noqa: E402
from test_worker_gpu import cache_counters, have_gpu, total  # noqa: E402


def procs_gauge(port):
    return [v for (tb, n), v in cache_counters(port, "m").items() if n == "processes"]


class Stream(threading.Thread):
    """Requests of random known keys to one worker until stopped; counts."""

    def __init__(self, port, model, seed):
        super().__init__(daemon=True)
        self.port, self.model = port, model
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.sent = self.exact = self.failed = 0
        self.bad = []

    def run(self):
        while not self.stop.is_set():
            kpt = [self.rng.sample(self.model.file_keys[i], 64) for i in range(2)]
            self.sent += 1
            try:
                _, got = H.decode_output(H.infer(self.port, "m", kpt, binary=True, timeout=5.0))
            except Exception as e:  # noqa: BLE001 (a dead worker's stream ends here)
                self.failed += 1
                if len(self.bad) < 3:
                    self.bad.append(repr(e))
                continue
            if got == self.model.expected(kpt):
                self.exact += 1
            elif len(self.bad) < 3:
                self.bad.append(H.first_mismatch(got, self.model.expected(kpt)))


def body(t, cl):
    rng = random.Random(11)
    model = cl.gen_model("m", rows=[60000, 20000], dims=[32, 8], defaults=[0.25, -1.0])
    conf = cl.write_config("share.ini", model.ini_text, [
        ("volatile_db", "initial_cache_rate", 1.0), ("hps", "heartbeat_interval_ms", 50),
        ("worker", "http_threads", 2), ("model.m", "gpucache", "true"),
        ("model.m", "gpucacheper", 0.3), ("model.m", "hit_rate_threshold", 2.0)])
    cl.start_coordinator(conf)
    wa = cl.start_worker(conf, instance=0)
    t.ok("shared with the device's other workers" in wa.log(), "A created shareable caches",
         wa.log()[-1500:])
    wb = cl.start_worker(conf, instance=1)
    t.ok(len(re.findall(r"handed over by process %d" % wa.pid, wb.log())) == 2,
         "B mapped both of A's caches", wb.log()[-1500:])
    t.eq(procs_gauge(wa.metrics_port), [2, 2], "A: 2 processes map each cache")
    t.eq(procs_gauge(wb.metrics_port), [2, 2], "B: 2 processes map each cache")

    # 2. one cache: what A inserts, B hits
    kpt = [rng.sample(model.file_keys[i], 2000) for i in range(2)]
    want = model.expected(kpt)
    _, got = H.decode_output(H.infer(wa.http_port, "m", kpt, binary=True))
    t.ok(got == want, "A: exact (misses inserted synchronously)", H.first_mismatch(got, want))
    c0 = cache_counters(wb.metrics_port, "m")
    _, got = H.decode_output(H.infer(wb.http_port, "m", kpt, binary=True))
    c1 = cache_counters(wb.metrics_port, "m")
    t.ok(got == want, "B: exact", H.first_mismatch(got, want))
    t.eq(total(c1, "hit_keys") - total(c0, "hit_keys"), 4000,
         "B: every key A inserted is a hit (the same cache)")

    # 3. kill the creator mid-stream
    sa, sb = Stream(wa.http_port, model, 1), Stream(wb.http_port, model, 2)
    sa.start()
    sb.start()
    time.sleep(1.5)
    wa.kill()
    wa.wait(10)
    time.sleep(3.0)
    sa.stop.set()
    sb.stop.set()
    sa.join(10)
    sb.join(10)
    t.ok(sa.sent > 5, "A served requests before it was killed (%d)" % sa.sent)
    t.ok(sb.sent > 20 and sb.failed == 0 and sb.exact == sb.sent,
         "B answered all %d requests exactly while A was killed (failed %d, exact %d)"
         % (sb.sent, sb.failed, sb.exact), sb.bad)
    ok = H.wait_until(lambda: procs_gauge(wb.metrics_port) == [1, 1], 10.0, 0.2)
    t.ok(ok, "B: the registry lists only B after A's death", procs_gauge(wb.metrics_port))
    t.ok("refreshes it now" in wb.log(), "B took over refreshing the caches", wb.log()[-1500:])
    _, got = H.decode_output(H.infer(wb.http_port, "m", kpt, binary=True))
    t.ok(got == want, "B: exact after A's death", H.first_mismatch(got, want))

    # 4. a new worker maps the cache that outlived its creator
    wc = cl.start_worker(conf, instance=2)
    t.ok(len(re.findall(r"created by process %d, handed over by process %d" % (wa.pid, wb.pid), wc.log())) == 2,
         "C mapped the caches from B after their creator died", wc.log()[-1500:])
    c0 = cache_counters(wc.metrics_port, "m")
    _, got = H.decode_output(H.infer(wc.http_port, "m", kpt, binary=True))
    c1 = cache_counters(wc.metrics_port, "m")
    t.ok(got == want, "C: exact", H.first_mismatch(got, want))
    t.eq(total(c1, "hit_keys") - total(c0, "hit_keys"), 4000,
         "C: the rows inserted through the dead creator still hit")
    t.eq(procs_gauge(wc.metrics_port), [2, 2], "C: B and C map each cache")
    for w in (wb, wc):
        w.kill()
        w.wait(10)

    # 5. a segment name too long for a socket address (150 characters): the
    # caches are shared all the same (the address cut used to lose the pid,
    # so the workers of the segment had one address)
    seg = cl.new_segment_name("x" * (150 - len(cl.segment) - 1))
    conf5 = cl.write_config("long.ini", model.ini_text, [
        ("volatile_db", "shared_memory_name", seg), ("volatile_db", "initial_cache_rate", 1.0),
        ("persistent_db", "path", cl.path("long_rocksdb")),
        ("worker", "http_threads", 2), ("model.m", "gpucache", "true"),
        ("model.m", "gpucacheper", 0.3), ("model.m", "hit_rate_threshold", 2.0)])
    cl.start_coordinator(conf5)
    w5a = cl.start_worker(conf5, instance=3)
    w5b = cl.start_worker(conf5, instance=4)
    t.ok(len(seg) == 150 and
         len(re.findall(r"handed over by process %d" % w5a.pid, w5b.log())) == 2,
         "a 150-character segment name: the second worker maps both of the first's caches",
         w5b.log()[-1500:])
    _, got = H.decode_output(H.infer(w5b.http_port, "m", kpt, binary=True))
    t.ok(got == want, "and answers exactly", H.first_mismatch(got, want))


if __name__ == "__main__":
    if not have_gpu():
        print("1..0 # SKIP no CUDA device visible")
        sys.exit(77)
    H.run_main("gpu-share", body)
