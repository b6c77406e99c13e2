#!/usr/bin/env python3
"""
int-model_control: Triton's explicit model control on hps-worker
([hps] model_control_mode = explicit; reference/kserve-v2.md section 1.5),
real coordinator and worker processes, while two workers serve model m
under a stream of exactly checked lookups:

  (1) start-up: startup_models = ^m$ loads m only; the index lists m READY
      and the others by name only; n answers Triton's "no available
      versions" (infer, metadata, ready);
  (2) load n through worker 0: 200 once n serves, n's vectors exact on both
      workers, READY in both indexes; the segment's used bytes grew;
      meanwhile the workers stay ready, and requests with misses get their
      defaults at once (nobody serves the old segment's miss queue during
      the reload);
  (3) unload n through worker 1: 200, n UNAVAILABLE "unloaded", inference
      and statistics refused with 400 (every model's statistics list m
      only), the used bytes back to (1)'s; load it again: the used bytes
      of (2) (both within 0.01%: the segment does not grow); 6 more unload
      + load pairs in a row all answer 200;
  (4) refusals, nothing changed: unknown model, a config parameter, a
      model whose emb_vector is corrupt (the message names the file; the
      index of the worker that took it shows the model UNAVAILABLE with
      that message, as Triton's), an unload of a model never loaded; an
      unload of an unloaded model: 200;
  (5) two loads at once through the two workers: both 200, both READY;
  (6) a load that fails after the checks (the model does not fit in
      shared_memory_size): 400 with the reason, the coordinator starts
      again on the serving segment (same pid) and a later load works;
  (7) a model added to the INI after the start: loaded through worker 0,
      which serves it as soon as the load returns; worker 1 learns it too
      (from the INI, when it switches segments), and a worker started
      afterwards serves it;
  (8) a 9th request while 8 wait on a stopped coordinator (SIGSTOP): 503
      with libhps's reason; the 8 are answered 503 once the coordinator has
      looked gone for 200 ms past worker_timeout_ms, each taken back, and
      the coordinator, running again, carries out none of them;
  and the stream on m: 0 failed requests, 0 wrong answers, throughout.
"""
import glob
import json
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402
import test_reload as R  # noqa: E402  (its Stream checks every answer of model m)

SETTINGS = R.SETTINGS + [("worker", "miss_timeout_ms", 1000),
                         ("hps", "model_control_mode", "explicit"),
                         ("hps", "startup_models", "^m$"),
                         ("volatile_db", "shared_memory_size", "48MiB")]
NO_VERSIONS = "Request for unknown model: '%s' has no available versions"


def post(port, path, body=b"{}", timeout=60):
    return H.http(port, "POST", path, body=body, timeout=timeout)


def index(port):
    return {m["name"]: m for m in post(port, "/v2/repository/index").json()}


def used_bytes(cl):
    return cl.shm_info()["segment"]["used_bytes"]


def same_size(t, got, want, what):
    """got within 0.01% of want.  Two loads of one model differed by 640 or
    768 bytes of 19.5 MB in 4 of 7 runs on a 16-core GPU host, never on the
    2-core dev VM (the loader runs a thread per table, up to the cores: the
    order they allocate in is the likely cause, not pinned down).  A
    model's memory not reused would add its whole size (n: 596 KB)."""
    t.ok(abs(got - want) <= want // 10000, "%s (%d, want %d)" % (what, got, want))


def section(model):
    return model.ini_text[model.ini_text.index("[model.%s]" % model.name):]


def check_exact(t, port, model, what):
    """A lookup of every table's first, middle and last key: exact vectors."""
    kpt = [[ks[0], ks[len(ks) // 2], ks[-1]] for ks in model.file_keys]
    r = H.infer(port, model.name, kpt, binary=True)
    got = H.decode_output(r)[1] if r.status == 200 else None
    t.ok(got == model.expected(kpt), "%s: model %s's vectors exact" % (what, model.name),
         "%d %r" % (r.status, r.body[:300]) if got is None else
         H.first_mismatch(got, model.expected(kpt), model, kpt))


def body(t, cl):
    m = cl.gen_model("m", rows=R.ROWS, dims=R.DIMS, defaults=R.DEFAULTS)
    n = cl.gen_model("n", rows=[5000, 3000], dims=[4, 32], defaults=[1.0, 0.0])
    o = cl.gen_model("o", rows=[2000], dims=[8])
    bad = cl.gen_model("bad", rows=[1000], dims=[8])
    emb = os.path.join(bad.table_dirs[0], "emb_vector")
    with open(emb, "rb") as f:
        good = f.read()
    with open(emb, "wb") as f:
        f.write(good[:-12])  # not a whole number of vectors
    big = cl.gen_model("big", rows=[100000], dims=[128])  # 51 MB of rows: over 48 MiB
    p = cl.gen_model("p", rows=[1500], dims=[16])
    text = m.ini_text + "\n" + "\n".join(section(x) for x in (n, o, bad, big))
    conf = cl.write_config("hps.ini", text, SETTINGS)
    c = cl.start_coordinator(conf)
    ws = [cl.start_worker(conf, instance=i) for i in range(2)]
    ports = [w.http_port for w in ws]

    # ---- (1) start-up: m only ------------------------------------------------
    idx = index(ports[0])
    t.eq(idx.get("m"), {"name": "m", "version": "1", "state": "READY"}, "index: m READY")
    t.eq([idx.get(x) for x in ("n", "o", "bad", "big")],
         [{"name": x} for x in ("n", "o", "bad", "big")],
         "index: the models never loaded, by name only")
    r = H.infer(ports[0], "n", [[n.file_keys[0][0]], []])
    t.ok(r.status == 400 and r.json() == {"error": NO_VERSIONS % "n"},
         "infer on n before its load: 400 %r" % (NO_VERSIONS % "n"), r.body)
    t.eq([H.http(ports[0], "GET", "/v2/models/n" + s).status for s in ("", "/ready")],
         [400, 400], "n's metadata and ready: 400")
    t.eq(H.http(ports[0], "GET", "/v2/health/ready").status, 200,
         "the worker is ready with m loaded and the others not")
    used_m = used_bytes(cl)
    streams = R.start_streams(ws, {1: m}, 7)

    # ---- (2) load n ------------------------------------------------------------
    # Meanwhile worker 1 answers requests of keys in no layer (misses): while
    # the coordinator reloads, nobody serves the old segment's miss queue, so
    # they must get the defaults at once, not after miss_timeout_ms (1 s).
    probe = {"lat": [], "ready": [], "stop": threading.Event()}

    def probe_misses():
        kpt = [m.unknown_keys(0, 4), m.unknown_keys(1, 2)]
        while not probe["stop"].is_set():
            t1 = time.monotonic()
            r = H.infer(ports[1], "m", kpt)
            probe["lat"].append((time.monotonic() - t1, r.status))
            probe["ready"].append(H.ready_status(ports[1]))

    pth = threading.Thread(target=probe_misses, daemon=True)
    pth.start()
    t0 = time.monotonic()
    r = post(ports[0], "/v2/repository/models/n/load")
    took = time.monotonic() - t0
    probe["stop"].set()
    pth.join(10)
    slow = [x for x in probe["lat"] if x[0] >= 0.9 or x[1] != 200]
    t.ok(len(probe["lat"]) > 5 and not slow,
         "requests with misses during the load: %d, all 200 within 0.9 s (max %.0f ms)" %
         (len(probe["lat"]), 1000 * max(x[0] for x in probe["lat"])), slow[:5])
    t.eq(probe["ready"].count(200), len(probe["ready"]),
         "worker 1 ready throughout the load (%d samples; the reloading coordinator hands its "
         "liveness lock over across execve and beats on the serving segment from its start)"
         % len(probe["ready"]))
    t.eq((r.status, r.body), (200, b""), "load n: 200, empty body")
    t.diag("load n took %.2f s" % took)
    t.eq(index(ports[0])["n"], {"name": "n", "version": "1", "state": "READY"},
         "worker 0's index: n READY as soon as the load returned")
    check_exact(t, ports[0], n, "worker 0 after the load")
    t.ok(H.wait_until(lambda: index(ports[1])["n"]["state"] == "READY", 5),
         "worker 1's index: n READY too")
    check_exact(t, ports[1], n, "worker 1 after the load")
    used_mn = used_bytes(cl)
    t.ok(used_mn > used_m, "the segment's used bytes grew with n: %d -> %d" % (used_m, used_mn))
    tables = sorted({tb["model"] for tb in cl.shm_info()["tables"]})
    t.eq(tables, ["m", "n"], "hps-shm info: the tables of m and n")

    # ---- (3) unload n, load it again --------------------------------------------
    r = post(ports[1], "/v2/repository/models/n/unload",
             json.dumps({"parameters": {"unload_dependents": True}}).encode())
    t.eq(r.status, 200, "unload n through worker 1 (with unload_dependents): 200")
    t.eq(index(ports[1])["n"], {"name": "n", "version": "1", "state": "UNAVAILABLE",
                                "reason": "unloaded"}, "index: n UNAVAILABLE, reason unloaded")
    r = H.infer(ports[1], "n", [[n.file_keys[0][0]], []])
    t.eq((r.status, r.json()), (400, {"error": NO_VERSIONS % "n"}), "infer on n: 400 again")
    r = H.http(ports[1], "GET", "/v2/models/n/stats")
    t.eq((r.status, r.json()), (400, {"error": NO_VERSIONS % "n"}),
         "statistics of n: 400 as Triton's (was 200 with zeroed counters)")
    st = H.http(ports[1], "GET", "/v2/models/stats").json()["model_stats"]
    t.eq(sorted(x["name"] for x in st), ["m"], "statistics of every model: m only, n unloaded")
    same_size(t, used_bytes(cl), used_m, "the used bytes are back to m's alone")
    t.ok(H.wait_until(lambda: index(ports[0])["n"]["state"] == "UNAVAILABLE", 5),
         "worker 0's index: n UNAVAILABLE too")
    r = post(ports[0], "/v2/repository/models/n/load")
    t.eq(r.status, 200, "load n again: 200")
    check_exact(t, ports[0], n, "after the second load")
    same_size(t, used_bytes(cl), used_mn, "the used bytes of the first load")
    # Answered requests do not pile up in the segment's 8 request slots
    # (each answer was carried into every later segment: the 9th operation
    # in a minute got 503 "busy").
    codes = [post(ports[i % 2], "/v2/repository/models/n/" + op).status
             for i in range(6) for op in ("unload", "load")]
    t.eq(codes, [200] * 12, "6 more unload + load pairs in a row: all 200")

    # ---- (4) refusals -------------------------------------------------------------
    pid = c.pid
    r = post(ports[0], "/v2/repository/models/nosuch/load")
    t.ok(r.status == 400 and "failed to load 'nosuch'" in r.json().get("error", ""),
         "load of a model not in the INI: 400", r.body)
    r = post(ports[0], "/v2/repository/models/o/load",
             json.dumps({"parameters": {"config": "{}"}}).encode())
    t.ok(r.status == 400 and "'config' is not supported" in r.json().get("error", ""),
         "load with a config parameter: 400", r.body)
    r = post(ports[0], "/v2/repository/models/o/load", b"[1]")
    t.ok(r.status == 400 and r.is_json_error(), "load with a body not an object: 400", r.body)
    r = post(ports[0], "/v2/repository/models/o/load", b'{"parameters": 5}')
    t.ok(r.status == 400 and "expected an object for 'parameters'" in r.json().get("error", ""),
         "load with parameters not an object: 400", r.body)
    r = post(ports[0], "/v2/repository/models/o/load", b'{"a":' * 20 + b'1' + b'}' * 20)
    t.ok(r.status == 400 and "nested deeper than 8 levels" in r.json().get("error", ""),
         "load with a body nested 20 deep: 400 saying so (it said 'expected an object')", r.body)
    r = post(ports[0], "/v2/repository/models/n/unload", b'{"parameters": {"unload_dependents": '
             b'"x"}}')
    t.ok(r.status == 400 and "expected a boolean for 'unload_dependents'" in
         r.json().get("error", ""), "unload with unload_dependents not a boolean: 400", r.body)
    r = post(ports[0], "/v2/repository/models/bad/load")
    err = r.json().get("error", "") if r.is_json_error() else ""
    t.ok(r.status == 400 and "failed to load 'bad'" in err and "emb_vector" in err,
         "load of a model with a corrupt emb_vector: 400 naming the file", r.body)
    # Triton's index after a failed load: UNAVAILABLE with the error as the
    # reason, on the worker that took the call (it had no trace of it)
    t.eq(index(ports[0])["bad"], {"name": "bad", "version": "1", "state": "UNAVAILABLE",
                                  "reason": err}, "index: bad UNAVAILABLE, the error as reason")
    t.eq(index(ports[1])["bad"], {"name": "bad"}, "worker 1's index: bad never loaded")
    r = post(ports[0], "/v2/repository/models/o/unload")
    t.eq((r.status, r.json().get("error") if r.is_json_error() else None),
         (400, "Model to be unloaded has not been served"), "unload of o, never loaded: 400")
    r = post(ports[0], "/v2/repository/models/nosuch/unload")
    t.eq(r.status, 400, "unload of a model not in the INI: 400")
    t.eq((c.alive(), c.pid), (True, pid), "the coordinator serves on, same pid")

    # ---- (5) two loads at once ------------------------------------------------------
    res = {}

    def load(port, name):
        res[name] = post(port, "/v2/repository/models/%s/load" % name).status

    ths = [threading.Thread(target=load, args=(ports[i], x)) for i, x in ((0, "o"), (1, "n"))]
    for th in ths:
        th.start()
    for th in ths:
        th.join(120)
    t.eq(res, {"o": 200, "n": 200}, "a load of o and a reload of n at once: both 200")
    idx = index(ports[0])
    t.eq([idx[x]["state"] for x in ("m", "n", "o")], ["READY"] * 3, "m, n and o READY")
    # A load returns once the model serves on the worker that took it; the
    # other workers switch to the new segment at their next maintenance
    # round (50 ms). n's reload through worker 1 may have been answered in
    # the segment before o's.
    t.ok(H.wait_until(lambda: index(ports[1])["o"].get("state") == "READY", 5),
         "worker 1 serves o within 5 s", index(ports[1]))
    check_exact(t, ports[1], o, "o after the concurrent loads")

    # ---- (6) a load that fails after the checks ----------------------------------------
    r = post(ports[0], "/v2/repository/models/big/load", timeout=120)
    err = r.json().get("error", "") if r.is_json_error() else ""
    t.ok(r.status == 400 and "failed to load 'big'" in err,
         "load of a model over shared_memory_size: 400 with the reason", r.body)
    t.diag("its answer: %s" % err)
    t.ok(H.wait_until(lambda: "starting again on the serving segment" in c.log(), 10),
         "the coordinator starts again on the serving segment")
    t.ok(H.wait_until(lambda: all(H.ready_status(pt) == 200 for pt in ports), 15),
         "both workers ready again")
    t.eq((c.alive(), c.pid), (True, pid), "the coordinator is alive, same pid")
    t.ok(H.wait_until(lambda: [index(pt)[x]["state"] for pt in ports for x in ("m", "n", "o")]
                      == ["READY"] * 6, 10), "m, n and o still READY on both workers",
         [index(pt) for pt in ports])
    t.eq(index(ports[1])["big"], {"name": "big"}, "big never loaded")
    t.eq(index(ports[0])["big"].get("reason"), err, "worker 0's index: big's reason is the error")
    r = post(ports[1], "/v2/repository/models/o/unload")
    t.eq(r.status, 200, "after the fallback, an unload works again")

    # ---- (7) a model added to the INI after the start ------------------------------------
    cl.write_config("hps.ini", text + "\n" + section(p), SETTINGS)
    r = post(ports[0], "/v2/repository/models/p/load")
    t.eq(r.status, 200, "load of p, added to the INI since the start: 200")
    check_exact(t, ports[0], p, "at once, the worker that took the load (it learned p from the "
                "INI)")
    t.ok(H.wait_until(lambda: index(ports[1]).get("p", {}).get("state") == "READY", 5),
         "worker 1 learned p and serves it within 5 s", index(ports[1]))
    check_exact(t, ports[1], p, "worker 1")
    w3 = cl.start_worker(conf, instance=2)
    t.eq(index(w3.http_port).get("p", {}).get("state"), "READY", "a new worker serves p")
    check_exact(t, w3.http_port, p, "the new worker")
    check_exact(t, w3.http_port, n, "the new worker")

    R.stop_streams(t, streams, [1])
    t.eq(c.log().count("model control:") >= 8, True, "the coordinator logged the requests")

    # ---- (8) more requests than the segment's 8 control slots ----------------------------
    # (o is unloaded: the coordinator answers its unload at once, when it runs)
    # (the waits end once the coordinator has looked gone for 200 ms past
    # worker_timeout_ms, 500 ms here: the 9th comes before)
    c.kill(signal.SIGSTOP)
    t0 = time.monotonic()
    answers = []
    ths = [threading.Thread(target=lambda i=i: answers.append(
        post(ports[i % 2], "/v2/repository/models/o/unload", timeout=60)))
        for i in range(8)]
    for th in ths:
        th.start()
    time.sleep(0.3)
    r = post(ports[0], "/v2/repository/models/o/unload")
    t.ok(r.status == 503 and r.is_json_error() and
         r.json()["error"] == "model control: 8 requests already wait; try again",
         "a 9th request while 8 wait on a stopped coordinator: 503 saying why (it said 'busy')",
         r.body[:300])
    for th in ths:
        th.join(60)
    secs = time.monotonic() - t0
    c.kill(signal.SIGCONT)
    t.ok(sorted(a.status for a in answers) == [503] * 8 and secs < 5 and
         all("withdrawn: nothing changed" in a.body.decode() for a in answers),
         "the 8 waiting requests: 503 within %.1f s, each withdrawn (before, they waited "
         "for the coordinator, up to 10 minutes)" % secs, [a.body[:200] for a in answers])
    time.sleep(0.5)
    n_ctl = c.log().count("model control:")
    r = post(ports[1], "/v2/repository/models/o/unload")
    t.ok(r.status == 200 and c.log().count("model control:") == n_ctl + 1,
         "running again, the coordinator carries out none of the withdrawn requests, and "
         "answers a new one", c.log()[-1500:])
    olds = glob.glob(os.path.join(cl.tmp, "**", "LOG.old.*"), recursive=True)
    t.ok(len(olds) <= 4, "RocksDB keeps at most 4 old info logs after %d coordinator starts "
         "(each load and unload starts it again): %d" % (c.log().count("persistent DB:"),
                                                          len(olds)), olds)


if __name__ == "__main__":
    H.run_main("model_control", body)
