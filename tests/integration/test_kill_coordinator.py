#!/usr/bin/env python3
"""
int-kill_coordinator: the worker survives its coordinator.

Table 0 entirely in the volatile DB (half loaded by initial_cache_rate 0.5,
the other half elevated by cache_missed_embeddings through lookups), table 1
only half.  After SIGKILL of the coordinator the worker keeps answering
volatile-DB keys exactly, turns not-ready within about worker_timeout_ms,
answers persistent-DB-only keys with the default value, and never holds a
request longer than miss_timeout_ms plus slack.  Then:
  (a) a new coordinator with initialize_after_startup = false re-attaches the
      same segment (same inode, rows kept): the worker is ready again and
      PDB-only keys resolve again;
  (b) after another SIGKILL, a coordinator with the default
      initialize_after_startup = true recreates the segment: the worker
      re-attaches the new one, is ready again, and every layer answers.
"""
import os
import random
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402

RATE = 0.5
WORKER_TIMEOUT_MS = 500
MISS_TIMEOUT_MS = 300
HEARTBEAT_MS = 50
SLACK_S = 0.5  # scheduling slack on a loaded 2-core machine


def table_rows(cl):
    return {tb["table"]: tb["rows"] for tb in cl.shm_info()["tables"]}

class ReadyPoller(threading.Thread):
    """Polls /v2/health/ready every 10 ms; records when it first is not 200."""

    def __init__(self, port, t0):
        super().__init__(daemon=True)
        self.port, self.t0 = port, t0
        self.not_ready_at = None
        self.stop_ev = threading.Event()

    def run(self):
        while not self.stop_ev.is_set() and self.not_ready_at is None:
            st = H.ready_status(self.port)
            if st is not None and st != 200:
                self.not_ready_at = time.monotonic() - self.t0
            time.sleep(0.01)


def degraded_phase(t, model, port, w, rng, vdb1, pdb_pool, t0, how):
    """Requests from the coordinator's loss until well after the worker
    noticed it: volatile-DB keys exact, PDB-only keys of table 1 (from
    pdb_pool, never elevated: nobody answers) -> default, each within
    miss_timeout_ms + slack."""
    poller = ReadyPoller(port, t0)
    poller.start()
    lat, ok, detail = [], True, ""
    while time.monotonic() - t0 < 4.0:
        kpt = [rng.sample(model.file_keys[0], 40), rng.sample(vdb1, 10) + rng.sample(pdb_pool, 2)]
        vset = set(vdb1)
        want = model.expected(kpt, known=lambda tb, k: tb == 0 or k in vset)
        try:
            r = H.infer(port, "m", kpt, binary=len(lat) % 2 == 0, timeout=10)
            _, g = H.decode_output(r)
            lat.append(r.elapsed)
            if g != want:
                ok, detail = False, H.first_mismatch(g, want, model, kpt)
        except Exception as e:  # noqa: BLE001
            ok, detail = False, "%s: %s" % (type(e).__name__, e)
        if poller.not_ready_at is not None and time.monotonic() - t0 > poller.not_ready_at + 0.5:
            break
    poller.stop_ev.set()
    poller.join(5)
    nr = poller.not_ready_at
    t.ok(nr is not None and nr <= WORKER_TIMEOUT_MS / 1000 + SLACK_S,
         "%s: /v2/health/ready turns non-200 %.0f ms after it (worker_timeout_ms %d)" %
         (how, (nr if nr is not None else -1) * 1000, WORKER_TIMEOUT_MS), w.log())
    t.ok(ok, "%s: volatile-DB keys exact, PDB-only keys get the default (%d requests)" %
         (how, len(lat)), detail)
    t.ok(lat and max(lat) <= MISS_TIMEOUT_MS / 1000 + SLACK_S,
         "%s: every request within miss_timeout_ms %d + %.0f ms slack (max %.0f ms)" %
         (how, MISS_TIMEOUT_MS, SLACK_S * 1000, max(lat or [0]) * 1000))
    return lat


def body(t, cl):
    model = cl.gen_model("m", rows=[4000, 2000], dims=[8, 4], defaults=[0.5, -2.0])
    common = [
        ("volatile_db", "initial_cache_rate", RATE),
        ("volatile_db", "cache_missed_embeddings", "true"),
        ("volatile_db", "shared_memory_auto_remove", "false"),
        ("hps", "heartbeat_interval_ms", HEARTBEAT_MS),
        ("hps", "worker_timeout_ms", WORKER_TIMEOUT_MS),
        ("worker", "miss_timeout_ms", MISS_TIMEOUT_MS),
    ]
    conf = cl.write_config("hps.ini", model.ini_text, common)
    conf_keep = cl.write_config("hps-keep.ini", model.ini_text, common + [
        ("volatile_db", "initialize_after_startup", "false")])
    coord = cl.start_coordinator(conf)
    w = cl.start_worker(conf, instance=0)
    port = w.http_port

    rng = random.Random(7)
    vdb1 = model.vdb_keys(1, RATE)
    pdb1 = list(model.pdb_only_keys(1, RATE))
    rng.shuffle(pdb1)
    pdb_dead, pdb1 = pdb1[:400], pdb1[400:]  # asked only while no coordinator answers
    # Elevate all of table 0's PDB-only rows into the volatile DB.
    pdb0 = model.pdb_only_keys(0, RATE)
    _, got = H.decode_output(H.infer(port, "m", [pdb0, []], binary=True))
    t.ok(got == model.expected([pdb0, []]), "table 0's PDB-only rows resolve through the "
         "coordinator (%d keys)" % len(pdb0))
    cl.wait_vdb_rows(5000)  # inserted just after the answer
    t.eq(table_rows(cl), {"sparse_embedding0": 4000, "sparse_embedding1": 1000},
         "volatile DB: all of table 0, half of table 1")

    def volatile_request():
        return [rng.sample(model.file_keys[0], 60), rng.sample(vdb1, 30)]

    def check_volatile(desc):
        kpt = volatile_request()
        kpt[0] += model.unknown_keys(0, 2, start=rng.randrange(100))
        _, g = H.decode_output(H.infer(port, "m", kpt, binary=rng.random() < 0.5))
        return t.ok(g == model.expected(kpt), desc, H.first_mismatch(g, model.expected(kpt),
                                                                     model, kpt))

    # ---- SIGKILL the coordinator -------------------------------------------
    check_volatile("before the kill: volatile-DB keys exact")
    ino0 = cl.segment_inode()
    coord.kill()
    t_kill = time.monotonic()
    coord.wait(10)  # reap the zombie: a real init would do it too

    lat = degraded_phase(t, model, port, w, rng, vdb1, pdb_dead, t_kill, "SIGKILL")
    t.eq(H.ready_status(port), 400, "not ready: /v2/health/ready answers 400")
    m = H.metrics(w.metrics_port)
    t.eq((m.get("nv_hps_coordinator_alive"), m.get("nv_hps_worker_ready")), (0.0, 0.0),
         "metrics: nv_hps_coordinator_alive 0, nv_hps_worker_ready 0")
    live = H.http(port, "GET", "/v2/health/live")
    t.eq(live.status, 200, "still live while degraded")

    # Steady degraded state: no waiting at all on the dead coordinator.
    i = 0
    kpt = [[], pdb1[i:i + 20]]
    i += 20
    r = H.infer(port, "m", kpt)
    _, g = H.decode_output(r)
    t.ok(g == [H.f32(-2.0)] * 80, "PDB-only keys of table 1 -> default -2 while degraded")
    t.ok(r.elapsed < MISS_TIMEOUT_MS / 1000 + SLACK_S,
         "degraded request answered in %.0f ms" % (r.elapsed * 1000))
    check_volatile("degraded: table 0 (all in the volatile DB) and unknown keys exact")
    t.ok(w.alive(), "worker still running")

    # ---- (a) new coordinator, initialize_after_startup = false --------------
    c2 = cl.start_coordinator(conf_keep)
    t.ok("re-attached" in c2.log(), "coordinator 2 re-attached the segment", c2.log())
    t.eq(cl.segment_inode(), ino0, "same segment object (inode unchanged)")
    cl.wait_vdb_rows(5000)  # inserted just after the answer
    t.eq(table_rows(cl), {"sparse_embedding0": 4000, "sparse_embedding1": 1000},
         "the volatile DB kept its rows")
    t.ok(H.wait_for_ready(port, True, 5.0), "worker ready again with coordinator 2", w.log())
    kpt = [model.unknown_keys(0, 3, 777), pdb1[i:i + 25]]
    i += 25
    _, g = H.decode_output(H.infer(port, "m", kpt, binary=True))
    t.ok(g == model.expected(kpt), "PDB-only keys resolve again through coordinator 2",
         H.first_mismatch(g, model.expected(kpt), model, kpt))
    check_volatile("volatile-DB keys exact with coordinator 2")

    # ---- a hung coordinator (SIGSTOP): only its heartbeat tells ------------
    c2.kill(signal.SIGSTOP)
    lat = degraded_phase(t, model, port, w, rng, vdb1, pdb_dead, time.monotonic(), "SIGSTOP")
    t.ok(max(lat) >= MISS_TIMEOUT_MS / 1000 * 0.9,
         "SIGSTOP: a request waited for the stopped coordinator until miss_timeout_ms "
         "(max %.0f ms)" % (max(lat) * 1000))
    # hps-shm reads no INI: the coordinator published its worker_timeout_ms,
    # and hps-shm judges a heartbeat older than it as the workers do (it
    # said "alive, serving" while every worker said gone)
    seg = cl.shm_info()["segment"]
    t.ok(not seg["coordinator_alive"] and seg["coordinator_stalled"] and
         seg["coordinator_timeout_ms"] == WORKER_TIMEOUT_MS,
         "SIGSTOP: hps-shm info: the coordinator stalled, not alive", repr(seg))
    rc, out, _ = cl.shm("ls")
    t.ok(rc == 0 and "stalled: coordinator pid %d silent past worker_timeout_ms %d" %
         (c2.pid, WORKER_TIMEOUT_MS) in out, "SIGSTOP: hps-shm ls: stalled", out)

    # ---- (b) kill it; coordinator 3 recreates the segment -------------------
    c2.kill(signal.SIGKILL)
    c2.wait(10)
    c3 = cl.start_coordinator(conf)
    t.ok("replacing the existing" in c3.log(), "coordinator 3 replaced the segment", c3.log())
    ino3 = cl.segment_inode()
    t.ok(ino3 is not None and ino3 != ino0, "a new segment object (inode %s -> %s)" %
         (ino0, ino3))
    t.eq(table_rows(cl), {"sparse_embedding0": 2000, "sparse_embedding1": 1000},
         "fresh volatile DB: initial_cache_rate rows only")
    t.ok(H.wait_for_ready(port, True, 5.0), "worker re-attached and ready with coordinator 3",
         w.log())
    t.ok("re-attached" in w.log(), "worker log reports the re-attach", w.log())
    procs = {p["pid"]: p["role"] for p in cl.shm_info()["processes"]}
    t.eq(procs.get(w.pid), "worker", "the worker is in the new segment's process table")
    kpt = [model.file_keys[0][:50] + pdb0[:50] + model.unknown_keys(0, 2, 900),
           vdb1[:20] + pdb1[i:i + 20]]
    _, g = H.decode_output(H.infer(port, "m", kpt, binary=True))
    t.ok(g == model.expected(kpt), "all layers exact after the re-attach",
         H.first_mismatch(g, model.expected(kpt), model, kpt))
    rc, out, err = cl.shm("check", cl.segment)
    t.ok(rc == 0, "hps-shm check passes", out + err)
    t.ok(w.alive(), "worker survived two coordinator deaths", w.log())


if __name__ == "__main__":
    H.run_main("kill_coordinator", body)
