#!/usr/bin/env python3
"""
int-restart_serving: a coordinator restart never disturbs what is serving
(issue 20).

A worker serves a steady stream of exactly checked lookups of keys that are
all in shared memory (initial_cache_rate 1.0) while its coordinator is
restarted in the ways that used to disturb it:
  (1) SIGKILL, then a new coordinator with the default
      initialize_after_startup = true: it builds its segment beside the
      serving one (/dev/shm/.hps.<name>.new) and renames it over the name
      only when loaded, so the worker keeps the old one until then;
  (2) a restart on a corrupt model file: refused (exit 4) before the
      segment is touched;
  (3) a coordinator SIGKILLed while it builds the new segment: the serving
      one stays; the next coordinator removes the half-built object.
Over the whole stream: 0 failed requests, 0 wrong vectors and 0 default
values (every key is in shared memory all along).
"""
import os
import random
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402

ROWS = [300000, 20000]
DIMS = [16, 8]
DEFAULTS = [0.5, -2.0]


class Stream(threading.Thread):
    """Lookups of random file keys, back to back; every answer checked."""

    def __init__(self, port, model, seed):
        super().__init__(daemon=True)
        self.port, self.model = port, model
        self.rng = random.Random(seed)
        self.stop_ev = threading.Event()
        self.requests = self.failed = self.wrong = self.defaults = 0
        self.first_problem = ""
        self.max_s = 0.0

    def run(self):
        m = self.model
        while not self.stop_ev.is_set():
            kpt = [self.rng.sample(m.file_keys[0], 32), self.rng.sample(m.file_keys[1], 8)]
            want = m.expected(kpt)
            got, r = H.stream_infer(self, m.name, kpt, binary=self.requests % 2 == 0)
            if got is None:
                continue
            self.max_s = max(self.max_s, r.elapsed)
            self.requests += 1
            if got != want:
                self.wrong += 1
                self.defaults += self.count_defaults(kpt, got)
                self.first_problem = self.first_problem or H.first_mismatch(got, want, m, kpt)

    def count_defaults(self, kpt, got):
        n, pos = 0, 0
        for t, ks in enumerate(kpt):
            d = self.model.dims[t]
            for _ in ks:
                if got[pos:pos + d] == [H.f32(self.model.defaults[t])] * d:
                    n += 1
                pos += d
        return n


def staged_exists(cl):
    return os.path.exists("/dev/shm/.hps.%s.new" % cl.segment)


def reattached(w, n):
    return w.log().count("re-attached") >= n


def body(t, cl):
    model = cl.gen_model("m", rows=ROWS, dims=DIMS, defaults=DEFAULTS)
    conf = cl.write_config("hps.ini", model.ini_text, [
        ("volatile_db", "initial_cache_rate", 1.0),
        ("volatile_db", "shared_memory_auto_remove", "false"),
        ("hps", "heartbeat_interval_ms", 50),
        ("hps", "worker_timeout_ms", 500),
        ("worker", "miss_timeout_ms", 200)])
    c1 = cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    ino1 = cl.segment_inode()
    s = Stream(w.http_port, model, 11)
    s.start()
    time.sleep(0.5)

    # ---- (1) SIGKILL, restart with initialize_after_startup = true ----------
    c1.kill()
    c1.wait(10)
    c2 = cl.start_coordinator(conf, wait_ready=False)
    saw_staged = H.wait_until(lambda: staged_exists(cl) or "serving misses" in c2.log(), 30,
                              0.002)
    t.ok(staged_exists(cl) or "serving misses" in c2.log(), "coordinator 2 builds beside",
         c2.log())
    t.ok(cl.segment_inode() == ino1 or "published /dev/shm" in c2.log(),
         "while coordinator 2 loads, the name still holds the serving segment")
    t.ok(H.wait_until(lambda: "serving misses" in c2.log(), 60), "coordinator 2 serves",
         c2.log())
    t.ok("published /dev/shm/hps." in c2.log(), "coordinator 2 published its segment",
         c2.log())
    ino2 = cl.segment_inode()
    t.ok(ino2 is not None and ino2 != ino1, "a new segment object under the name")
    t.ok(not staged_exists(cl), "no staged object left after publishing")
    t.ok(H.wait_until(lambda: reattached(w, 1), 10), "the worker re-attached to it", w.log())
    t.diag("staged object seen while loading: %s" % bool(saw_staged))
    time.sleep(0.5)

    # ---- (2) a restart on a corrupt model file ------------------------------
    c2.kill(signal.SIGTERM)
    t.eq(c2.wait(15), 0, "coordinator 2: SIGTERM -> exit 0 (segment kept: a worker is on it)")
    emb = os.path.join(model.table_dirs[0], "emb_vector")
    with open(emb, "rb") as f:
        good = f.read()
    with open(emb, "wb") as f:
        f.write(good[:-12])  # not a whole number of vectors
    rc, out = cl.run_coordinator(conf)
    t.eq(rc, 4, "a corrupt emb_vector is refused: exit 4")
    t.eq(cl.segment_inode(), ino2, "the serving segment untouched by the refused start")
    t.ok(not staged_exists(cl), "nothing staged by the refused start")
    with open(emb, "wb") as f:
        f.write(good)
    c3 = cl.start_coordinator(conf)
    t.ok(H.wait_until(lambda: reattached(w, 2), 10), "the worker moved to coordinator 3's "
         "segment", w.log())
    time.sleep(0.5)

    # ---- (3) SIGKILL while building the new segment --------------------------
    c3.kill()
    c3.wait(10)
    ino3 = cl.segment_inode()
    c4 = cl.start_coordinator(conf, wait_ready=False)
    H.wait_until(lambda: "loading 1 model" in c4.log() or not c4.alive(), 30, 0.002)
    killed_staged = staged_exists(cl) and "published /dev/shm" not in c4.log()
    c4.kill()
    c4.wait(10)
    t.diag("coordinator 4 killed %s publishing" % ("before" if killed_staged else "after"))
    if killed_staged:
        t.eq(cl.segment_inode(), ino3, "killed while building: the serving segment stays")
    c5 = cl.start_coordinator(conf)
    t.ok(not staged_exists(cl), "coordinator 5 removed the half-built object and published",
         c5.log())
    t.ok(H.wait_until(lambda: reattached(w, 3), 10), "the worker re-attached once more",
         w.log())
    time.sleep(0.5)
    s.stop_ev.set()
    s.join(30)
    t.ok(s.requests > 50, "stream ran: %d requests, max %.0f ms" % (s.requests, s.max_s * 1000))
    t.eq((s.failed, s.wrong, s.defaults), (0, 0, 0),
         "through 4 restarts: 0 failed requests, 0 wrong answers, 0 default values")
    if s.first_problem:
        t.diag("first problem: %s" % s.first_problem)


if __name__ == "__main__":
    H.run_main("restart_serving", body)
