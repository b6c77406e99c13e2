#!/usr/bin/env python3
"""
int-client_c: the C API of libhps (include/hps/client.h) against a real
hps-coordinator, through client-check (client_check.c, linked with libhps.so
only), beside an hps-worker on the same segment.

One configuration, one segment, two 64-bit-key models: m (3 tables of 6000,
3000 and 2000 rows, dims 16, 8 and 4, defaults 0.5, -2 and 0) and n (2
tables of 1500 and 700 rows, dims 32 and 1, defaults 1.25 and -0.75);
initial_cache_rate 0.5 (the other half of each table only in RocksDB),
cache_missed_embeddings off.  A second configuration with its own segment
and coordinator: m32 (supportlonglong = false), 2 tables, dims 4 and 2.
Checks (client-check's TAP relayed with a prefix):
  - `client-check early`, opened before the coordinator: not ready, then
    ready once it is up, and exact;
  - `client-check exact` on both configurations: model and table info,
    int64 and int32 lookups (volatile-DB, persistent-DB-only and unknown
    keys) bit for bit equal to hps_gen_vector or the default, the
    KEYS/NUMKEYS form over several tables with a 0 entry, the counters,
    every documented error, 8 threads for 1 s; exit 0, plan = results;
  - an hps-worker on the segment and `client-check loop` (a child looking
    up in a loop): hps-shm info lists one more worker process (the child),
    HTTP lookups of both models exact while the child is exact too; the
    child is SIGKILLed mid-loop: the worker answers every request exactly
    before, during and after, and the coordinator reaps the dead client
    from the segment's process table within a few seconds.
Skips (1..0 # SKIP) when an executable is missing.
"""
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402
import test_reload as R  # noqa: E402  (sighup)

RATE = 0.5
WORKER_TIMEOUT_MS = 500
CLIENT_CHECK = os.environ.get("HPS_CLIENT_CHECK", "")

M_ROWS, M_DIMS, M_DEFS = [6000, 3000, 2000], [16, 8, 4], [0.5, -2.0, 0.0]
N_ROWS, N_DIMS, N_DEFS = [1500, 700], [32, 1], [1.25, -0.75]
K_ROWS, K_DIMS, K_DEFS = [3000, 1000], [4, 2], [0.5, -2.0]

TAP_LINE = re.compile(r"^(ok|not ok) (\d+)(?: - (.*))?$")
PLAN = re.compile(r"^1\.\.(\d+)")


def rows_args(*models):
    args = []
    for m in models:
        args += ["--rows", "%s=%s" % (m.name, ",".join(map(str, m.rows)))]
    return args + ["--rate", repr(RATE)]


def relay(t, prefix, text, rc):
    """Re-emit client-check's TAP as checks of this script; then one check
    that it exited 0 with a plan equal to its result count."""
    results, plan = 0, None
    for line in text.splitlines():
        m = TAP_LINE.match(line)
        if m:
            results += 1
            t.ok(m.group(1) == "ok", "%s: %s" % (prefix, m.group(3) or ""))
            continue
        m = PLAN.match(line)
        if m:
            plan = int(m.group(1))
            continue
        if line.startswith("#"):
            t.diag("%s: %s" % (prefix, line[1:].strip()))
        elif line.strip():
            t.diag("%s (stdout): %s" % (prefix, line))
    return t.ok(rc == 0 and plan == results and results > 0,
                "%s: exit status %s, plan %s, %d results" % (prefix, rc, plan, results))


def run_check(t, prefix, conf, sub, args, timeout=180):
    r = subprocess.run([CLIENT_CHECK, conf, sub] + args, capture_output=True, text=True,
                       timeout=timeout)
    if r.stderr.strip():
        t.diag("%s (stderr): %s" % (prefix, r.stderr.strip()[-3000:]))
    return relay(t, prefix, r.stdout, r.returncode)


def merged_config(cl, m, n):
    """m's INI with n's model section appended (one segment, one RocksDB);
    shared_memory_size the sum of both."""
    text = m.ini_text
    sec = n.ini_text[n.ini_text.index("[model.%s]" % n.name):]
    sizes = [int(re.search(r"(?m)^shared_memory_size\s*=\s*(\d+)MiB", x.ini_text).group(1))
             for x in (m, n)]
    text = H.ini_set(text, "volatile_db", "shared_memory_size", "%dMiB" % sum(sizes))
    return text.rstrip("\n") + "\n\n" + sec


def worker_pids(cl, segment=None):
    return {p["pid"] for p in cl.shm_info(segment)["processes"] if p["role"] == "worker"}


class Streamer(threading.Thread):
    """Binary requests to hps-worker (both models) until stopped; every
    answer checked."""

    def __init__(self, port, models, seed):
        super().__init__(daemon=True)
        self.port, self.models = port, models
        self.rng = random.Random(seed)
        self.stop_ev = threading.Event()
        self.ok = 0
        self.failures = []

    def run(self):
        while not self.stop_ev.is_set():
            m = self.models[self.ok % len(self.models)]
            kpt = [self.rng.sample(m.file_keys[i], 10) + m.unknown_keys(i, 2, 9)
                   for i in range(len(m.rows))]
            try:
                _, got = H.decode_output(H.infer(self.port, m.name, kpt, binary=True,
                                                 timeout=10))
                if got == m.expected(kpt):
                    self.ok += 1
                else:
                    self.failures.append(H.first_mismatch(got, m.expected(kpt), m, kpt))
            except Exception as e:  # noqa: BLE001
                self.failures.append("%s: %s" % (type(e).__name__, e))


def lookups(child):
    n = 0
    for line in child.log().splitlines():
        if line.startswith("LOOKUPS "):
            n = int(line.split()[1])
    return n


def http_exact(t, w, model, rng, desc):
    kpt = [rng.sample(model.vdb_keys(i, RATE), 12) + rng.sample(model.pdb_only_keys(i, RATE), 6) +
           model.unknown_keys(i, 3, 21) for i in range(len(model.rows))]
    want = model.expected(kpt)
    _, got = H.decode_output(H.infer(w.http_port, model.name, kpt, binary=True))
    return t.ok(got == want, desc, H.first_mismatch(got, want, model, kpt))


def shared_segment(t, cl, conf, m, n, coord):
    w = cl.start_worker(conf, instance=0)
    rng = random.Random(11)
    before = worker_pids(cl)
    t.ok(w.pid in before, "hps-shm info lists hps-worker (pid %d) as a worker" % w.pid)

    child = cl._spawn("client-check-loop", [CLIENT_CHECK, conf, "loop"] + rows_args(m, n),
                      "client-check-loop.log")
    started = H.wait_until(lambda: lookups(child) >= 3000 or not child.alive(), 30.0, 0.05)
    t.ok(started and child.alive() and "MISMATCH" not in child.log(),
         "client-check loop: a C client looking up exactly in a loop (%d calls)" % lookups(child),
         child.log()[-2000:])
    after = worker_pids(cl)
    t.ok(after == before | {child.pid},
         "hps-shm info lists one more worker process, the C client (pid %d)" % child.pid,
         "before %r, after %r" % (sorted(before), sorted(after)))

    http_exact(t, w, m, rng, "hps-worker beside the C client: model m over HTTP exact")
    http_exact(t, w, n, rng, "hps-worker beside the C client: model n over HTTP exact")
    n0 = lookups(child)
    time.sleep(0.3)
    t.ok(lookups(child) > n0 and child.alive() and "MISMATCH" not in child.log(),
         "the C client kept answering exactly meanwhile (%d -> %d calls)" % (n0, lookups(child)),
         child.log()[-2000:])

    s = Streamer(w.http_port, [m, n], 9)
    s.start()
    try:
        time.sleep(0.5)
        n_kill = s.ok
        child.kill()
        t_kill = time.monotonic()
        st = child.wait(10)
        t.ok(st is not None and st < 0 and "MISMATCH" not in child.log(),
             "the C client died of SIGKILL mid-loop (status %s, after %d calls)" %
             (st, lookups(child)))

        def gone():
            try:
                return child.pid not in worker_pids(cl)
            except RuntimeError:
                return False
        reaped = H.wait_until(gone, 8.0, 0.1)
        dt = time.monotonic() - t_kill
        t.ok(reaped, "the coordinator reaped the dead C client from the segment's process "
             "table (%.1f s after the kill)" % dt, coord.log()[-3000:])
        t.ok(dt < 5.0, "reaped within 5 s (took %.1f s)" % dt)
        n_reap = s.ok
        time.sleep(0.5)
    finally:
        s.stop_ev.set()
        s.join(15)
    t.ok(not s.failures and s.ok > n_reap > n_kill,
         "hps-worker answered all %d requests exactly (%d after the kill, %d after the reap)" %
         (s.ok, s.ok - n_kill, s.ok - n_reap), "\n".join(s.failures[:5]))
    t.eq(worker_pids(cl), before, "hps-shm info's workers are back to hps-worker alone")
    http_exact(t, w, m, rng, "hps-worker still exact after the reap (model m)")
    t.eq(H.ready_status(w.http_port), 200, "hps-worker still ready")
    t.ok(w.alive() and coord.alive(), "hps-worker and hps-coordinator still running")


def model32(t, cl):
    seg = cl.new_segment_name("k32")
    k = cl.gen_model("m32", rows=K_ROWS, dims=K_DIMS, defaults=K_DEFS, key_bytes=4,
                     segment=seg)
    conf = cl.write_config("hps32.ini", k.ini_text, [
        ("volatile_db", "initial_cache_rate", RATE),
        ("volatile_db", "cache_missed_embeddings", "false"),
        ("worker", "miss_timeout_ms", 3000),  # exact answers even on a loaded machine
    ])
    cl.start_coordinator(conf)
    run_check(t, "exact m32", conf, "exact", rows_args(k))
    rc, out, err = cl.shm("check", seg)
    t.ok(rc == 0, "hps-shm check %s passes" % seg, out + err)


def switch_under_threads(t, cl):
    """A reload while 8 threads of one C client look up back to back (more
    threads than this machine's cores): the client moves to the new
    segment within a few seconds (glibc's rwlock let the overlapping
    lookups starve the switch: the client answered version 1 for good, and
    closing it later removed the serving segment)."""
    seg = cl.new_segment_name("sw")
    v1 = cl.gen_model("s", rows=[3000], dims=[8], subdir="sw/v1", segment=seg, version=1)
    v2 = cl.gen_model("s", rows=[3000], dims=[8], subdir="sw/v2", segment=seg, version=2)
    settings = [("volatile_db", "initial_cache_rate", 1.0), ("hps", "worker_timeout_ms", 1000)]
    conf = cl.write_config("sw.ini", v1.ini_text, settings)
    coord = cl.start_coordinator(conf)
    nth = max(8, 2 * (os.cpu_count() or 1))  # more than the cores, whatever the machine
    child = cl._spawn("client-check-switch", [CLIENT_CHECK, conf, "switch", "--threads",
                                              str(nth)], "client-check-switch.log")
    t.ok(H.wait_until(lambda: "VERSION 1" in child.log(), 30), "switch: %d threads answered "
         "from version 1" % nth, child.log()[-2000:])
    cl.write_config("sw.ini", v2.ini_text, settings)
    R.sighup(t, coord, "switch: SIGHUP to version 2")
    t.ok(H.wait_until(lambda: "VERSION 2" in child.log(), 10),
         "switch: every thread answered from version 2 within 10 s of the publish",
         child.log()[-2000:])
    child.kill(signal.SIGTERM)
    t.ok(child.wait(20) == 0 and "CLOSED" in child.log(), "switch: SIGTERM: the client closed",
         child.log()[-2000:])
    t.ok(cl.segment_exists(seg), "switch: the serving segment is still there after the client "
         "closed (shared_memory_auto_remove: the coordinator is attached)")
    coord.kill(signal.SIGTERM)
    coord.wait(30)


def body(t, cl):
    m = cl.gen_model("m", rows=M_ROWS, dims=M_DIMS, defaults=M_DEFS)
    n = cl.gen_model("n", rows=N_ROWS, dims=N_DIMS, defaults=N_DEFS)
    conf = cl.write_config("hps.ini", merged_config(cl, m, n), [
        ("volatile_db", "initial_cache_rate", RATE),
        ("volatile_db", "cache_missed_embeddings", "false"),
        ("hps", "heartbeat_interval_ms", 50),
        ("hps", "worker_timeout_ms", WORKER_TIMEOUT_MS),
        ("worker", "miss_timeout_ms", 3000),
        ("worker", "http_threads", 2),
    ])

    # A client opened before the coordinator runs.
    early = cl._spawn("client-check-early", [CLIENT_CHECK, conf, "early"] + rows_args(m, n),
                      "client-check-early.log")
    waiting = H.wait_until(lambda: "# waiting" in early.log() or not early.alive(), 20.0)
    t.ok(waiting and early.alive(), "client-check early: opened, waiting for the coordinator",
         early.log())
    coord = cl.start_coordinator(conf)
    st = early.wait(90)
    relay(t, "early", early.log(), st)

    run_check(t, "exact m+n", conf, "exact", rows_args(m, n))
    shared_segment(t, cl, conf, m, n, coord)
    rc, out, err = cl.shm("check", cl.segment)
    t.ok(rc == 0, "hps-shm check %s passes" % cl.segment, out + err)
    model32(t, cl)
    switch_under_threads(t, cl)


def main():
    missing = [name for name, path in (("HPS_COORDINATOR", H.COORDINATOR),
                                       ("HPS_WORKER", H.WORKER), ("HPS_GEN", H.GEN),
                                       ("HPS_SHM", H.SHM), ("HPS_CLIENT_CHECK", CLIENT_CHECK))
               if not path or not os.access(path, os.X_OK)]
    if missing:
        H.Tap.skip_all("not executables: %s" % ", ".join(missing))
    if not os.path.isdir("/dev/shm"):
        H.Tap.skip_all("no /dev/shm")
    H.run_main("client_c", body)


if __name__ == "__main__":
    main()
