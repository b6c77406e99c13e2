#!/usr/bin/env python3
"""
int-head_of_line: a request that waits for the coordinator never delays
another request.

One HTTP event-loop thread ([worker] http_threads = 1), a long
miss_timeout_ms (800 ms) and a coordinator SIGSTOPped for 5 s (its
heartbeat stays fresh enough: worker_timeout_ms 10 s, so the worker keeps
asking it).  Meanwhile 4 clients send requests whose keys are only in the
persistent DB (each waits miss_timeout_ms, then gets the default value)
and one client sends requests whose keys are all in shared memory: those
are answered inline on the event loop, exactly, with a p99 far below the
miss timeout (before the lookup pool, they queued behind the misses).
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
MISS_TIMEOUT_MS = 800
STOP_S = 5.0


def body(t, cl):
    model = cl.gen_model("m", rows=[4000, 2000], dims=[8, 4], defaults=[0.5, -2.0])
    conf = cl.write_config("hps.ini", model.ini_text, [
        ("volatile_db", "initial_cache_rate", RATE),
        ("volatile_db", "cache_missed_embeddings", "false"),
        ("hps", "worker_timeout_ms", 10000),
        ("worker", "miss_timeout_ms", MISS_TIMEOUT_MS),
        ("worker", "http_threads", 1),
    ])
    coord = cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    port = w.http_port
    rng = random.Random(3)
    vdb = [model.vdb_keys(0, RATE), model.vdb_keys(1, RATE)]
    pdb = [list(model.pdb_only_keys(0, RATE)), list(model.pdb_only_keys(1, RATE))]

    kpt = [pdb[0][:5], pdb[1][:5]]
    _, got = H.decode_output(H.infer(port, "m", kpt, binary=True))
    t.ok(got == model.expected(kpt), "persistent-DB keys resolve while the coordinator runs")

    stop = threading.Event()
    slow = {"n": 0, "ok": True, "detail": ""}

    def missing_client(seed):
        r = random.Random(seed)
        while not stop.is_set():
            keys = [r.sample(pdb[0], 3), r.sample(pdb[1], 3)]
            want = model.expected(keys, known=lambda tb, k: False)
            try:
                _, g = H.decode_output(H.infer(port, "m", keys, binary=True, timeout=10))
                slow["n"] += 1
                # A request still waiting at SIGCONT may be answered exactly.
                if g != want and g != model.expected(keys):
                    slow["ok"], slow["detail"] = False, H.first_mismatch(g, want, model, keys)
            except Exception as e:  # noqa: BLE001
                slow["ok"], slow["detail"] = False, "%s: %s" % (type(e).__name__, e)

    os.kill(coord.p.pid, signal.SIGSTOP)
    try:
        threads = [threading.Thread(target=missing_client, args=(i,), daemon=True)
                   for i in range(4)]
        for th in threads:
            th.start()
        time.sleep(0.2)  # the missing-key requests are waiting now
        lat, ok, detail = [], True, ""
        t0 = time.monotonic()
        while time.monotonic() - t0 < STOP_S - 0.4:
            keys = [rng.sample(vdb[0], 20), rng.sample(vdb[1], 20)]
            try:
                r = H.infer(port, "m", keys, binary=True, timeout=10)
                _, g = H.decode_output(r)
                lat.append(r.elapsed)
                if g != model.expected(keys):
                    ok, detail = False, H.first_mismatch(g, model.expected(keys), model, keys)
            except Exception as e:  # noqa: BLE001
                ok, detail = False, "%s: %s" % (type(e).__name__, e)
    finally:
        os.kill(coord.p.pid, signal.SIGCONT)
        stop.set()
    for th in threads:
        th.join(15)
    p50, p99 = H.pct(lat, 0.5) * 1000, H.pct(lat, 0.99) * 1000
    t.diag("shared-memory requests while misses wait: %d, p50 %.2f ms, p99 %.2f ms, max %.2f ms"
           % (len(lat), p50, p99, max(lat or [0]) * 1000))
    t.ok(ok and len(lat) > 20, "shared-memory requests exact while the coordinator is stopped "
         "(%d requests)" % len(lat), detail)
    t.ok(slow["ok"] and slow["n"] > 0, "requests with misses get the default value after "
         "miss_timeout_ms (%d requests)" % slow["n"], slow["detail"])
    # Before the lookup pool, each of them waited behind a miss of up to
    # miss_timeout_ms on the one event loop.
    t.ok(lat and max(lat) * 1000 < MISS_TIMEOUT_MS / 2,
         "no shared-memory request waits behind a miss: max %.1f ms < %d ms"
         % (max(lat or [0]) * 1000, MISS_TIMEOUT_MS // 2))
    kpt = [pdb[0][5:10], pdb[1][5:10]]
    _, got = H.decode_output(H.infer(port, "m", kpt, binary=True))
    t.ok(got == model.expected(kpt), "after SIGCONT persistent-DB keys resolve again")


if __name__ == "__main__":
    H.run_main("head_of_line", body)
