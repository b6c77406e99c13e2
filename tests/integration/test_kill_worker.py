#!/usr/bin/env python3
"""
int-kill_worker: coordinator + two workers; clients stream lookups to both;
worker 0 is SIGKILLed mid-stream (likely inside a miss-queue request, since
every request has persistent-DB-only keys and cache_missed_embeddings is
off).  Worker 1 must answer every request exactly (zero failures), the
coordinator must reap worker 0 within a few seconds, and a replacement
worker 0 must come up ready and exact.
"""
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402

RATE = 0.5
WORKER_TIMEOUT_MS = 500


class Streamer(threading.Thread):
    """Sends lookups to one worker until stopped; checks every answer."""

    def __init__(self, port, model, seed, expect_failures=False):
        super().__init__(daemon=True)
        self.port, self.model = port, model
        self.rng = random.Random(seed)
        self.stop_ev = threading.Event()
        self.ok = 0
        self.failures = []
        self.conn_errors = 0
        self.expect_failures = expect_failures
        self.max_latency = 0.0
        self.ok_after = {}  # mark name -> ok count when the mark was set

    def request(self):
        m = self.model
        kpt = []
        for t in range(2):
            ks = self.rng.sample(m.vdb_keys(t, RATE), 20)
            ks += self.rng.sample(m.pdb_only_keys(t, RATE), 10)
            ks += m.unknown_keys(t, 3, start=self.rng.randrange(1000))
            self.rng.shuffle(ks)
            kpt.append(ks)
        return kpt

    def run(self):
        n = 0
        while not self.stop_ev.is_set():
            kpt = self.request()
            binary = n % 2 == 1
            n += 1
            try:
                r = H.infer(self.port, "m", kpt, binary=binary, timeout=10)
                _, got = H.decode_output(r)
                want = self.model.expected(kpt)
                self.max_latency = max(self.max_latency, r.elapsed)
                if got == want:
                    self.ok += 1
                else:
                    self.failures.append(H.first_mismatch(got, want, self.model, kpt))
            except Exception as e:  # noqa: BLE001
                if self.expect_failures:
                    self.conn_errors += 1
                    time.sleep(0.01)
                else:
                    self.failures.append("%s: %s" % (type(e).__name__, e))

    def mark(self, name):
        self.ok_after[name] = self.ok


def body(t, cl):
    model = cl.gen_model("m", rows=[6000, 3000], dims=[8, 4], defaults=[0.25, -1.0])
    conf = cl.write_config("hps.ini", model.ini_text, [
        ("volatile_db", "initial_cache_rate", RATE),
        ("volatile_db", "cache_missed_embeddings", "false"),
        ("hps", "heartbeat_interval_ms", 50),
        ("hps", "worker_timeout_ms", WORKER_TIMEOUT_MS),
        ("worker", "miss_timeout_ms", 3000),
        ("worker", "http_threads", 2),
    ])
    coord = cl.start_coordinator(conf)
    w0 = cl.start_worker(conf, instance=0)
    w1 = cl.start_worker(conf, instance=1)
    procs = {p["pid"] for p in cl.shm_info()["processes"]}
    t.ok(w0.pid in procs and w1.pid in procs, "both workers in the segment's process table")

    s1 = Streamer(w1.http_port, model, 1)
    s0 = Streamer(w0.http_port, model, 2, expect_failures=True)
    s1.start()
    s0.start()
    try:
        time.sleep(1.0)
        t.ok(s0.ok > 0 and s1.ok > 0, "both workers answering before the kill "
             "(%d and %d requests)" % (s0.ok, s1.ok))
        s1.mark("kill")
        w0.kill()
        t_kill = time.monotonic()
        st = w0.wait(10)
        t.ok(st is not None and st < 0, "worker 0 died of SIGKILL (status %s)" % st)

        # Reaped: gone from the segment's process table.
        def gone():
            try:
                return w0.pid not in {p["pid"] for p in cl.shm_info()["processes"]}
            except RuntimeError:
                return False
        reaped = H.wait_until(gone, 8.0, 0.1)
        dt = time.monotonic() - t_kill
        t.ok(reaped, "coordinator reaped worker 0 within %.1f s of the kill (hps-shm info)" % dt,
             coord.log())
        t.ok(dt < 5.0, "reaped within 5 s (took %.1f s)" % dt)
        t.ok("reaped" in coord.log(), "coordinator log says 'reaped'", coord.log())
        s1.mark("reaped")
        time.sleep(1.0)
    finally:
        s0.stop_ev.set()
        s1.stop_ev.set()
        s0.join(15)
        s1.join(15)

    t.ok(not s1.failures, "worker 1: zero failed or wrong answers in %d requests" % s1.ok,
         "\n".join(s1.failures[:5]))
    t.ok(s1.ok - s1.ok_after["kill"] > 5 and s1.ok - s1.ok_after["reaped"] > 5,
         "worker 1 kept answering after the kill (%d) and after the reap (%d)" %
         (s1.ok - s1.ok_after["kill"], s1.ok - s1.ok_after["reaped"]))
    t.ok(s1.max_latency < 3.0, "worker 1's slowest request %.0f ms" % (s1.max_latency * 1000))
    t.ok(not s0.failures, "worker 0: no wrong answers before it died",
         "\n".join(s0.failures[:5]))
    c1 = H.hps_counters(w1.metrics_port, "m")
    t.eq((c1["miss_queue_busy"], c1["miss_queue_timeouts"]), (0, 0),
         "worker 1: no miss-queue refusals or timeouts")
    t.eq(H.ready_status(w1.http_port), 200, "worker 1 still ready")
    t.ok(coord.alive(), "coordinator still running", coord.log())

    # A replacement worker 0 on the same instance number.
    w0b = cl.start_worker(conf, instance=0)
    s = Streamer(w0b.http_port, model, 3)
    good = 0
    for _ in range(20):
        kpt = s.request()
        _, got = H.decode_output(H.infer(w0b.http_port, "m", kpt, binary=True))
        good += got == model.expected(kpt)
    t.eq(good, 20, "replacement worker 0 answers exactly")
    rc, out, err = cl.shm("check", cl.segment)
    t.ok(rc == 0, "hps-shm check passes after the kill", out + err)


if __name__ == "__main__":
    H.run_main("kill_worker", body)
