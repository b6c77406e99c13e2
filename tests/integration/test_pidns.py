#!/usr/bin/env python3
"""
int-pidns: hps-coordinator and hps-worker in different PID namespaces on one
/dev/shm (a sidecar parameter server: containers of a pod sharing a
memory-backed volume, or hostIPC).  Every process runs under
`unshare --pid --fork --kill-child` (plus --user --map-root-user where plain
unshare is not permitted; skipped where neither is), so each is pid 1 of its
own namespace and no pid in the segment means anything to the others.

  1. The worker turns ready (it sees the coordinator alive) and answers
     exactly; hps-shm info (the host's namespace) lists both rows, pid 1,
     alive.
  2. SIGKILL of the worker: the coordinator reaps it within
     worker_timeout_ms, and hps-shm info never shows it alive meanwhile.
  3. SIGKILL of the coordinator: a second worker (another namespace) turns
     not-ready within worker_timeout_ms, by the coordinator's liveness lock
     (well before its heartbeat could age out); hps-shm info shows the
     coordinator gone.
  4. A new coordinator (another namespace, pid 1 again) re-attaches the
     segment: the worker is ready and exact again, the dead coordinator's
     row is reaped, hps-shm info shows the new one alive.
"""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402

WORKER_TIMEOUT_MS = 1000
HEARTBEAT_MS = 50
UNSHARE = ["unshare", "--pid", "--fork", "--kill-child"]
USERNS = ["--user", "--map-root-user"]


def unshare_prefix():
    """The unshare command line that works here, or None."""
    for extra in ([], USERNS):
        cmd = UNSHARE[:1] + extra + UNSHARE[1:] + ["--", "true"]
        try:
            r = subprocess.run(cmd, capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if r.returncode == 0:
            return cmd[:-2]
    return None


def wrap(cl, name, real, prefix):
    """An executable that runs real in a PID namespace of its own."""
    path = cl.path(name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\nexec %s -- '%s' \"$@\"\n" % (" ".join(prefix), real))
    os.chmod(path, 0o755)
    return path


def child_of(pid, timeout=5.0):
    """The child of pid (the real process under its unshare)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % d) as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2:].split()
            if len(fields) > 1 and int(fields[1]) == pid:
                return int(d)
        time.sleep(0.01)
    return None


def rows(cl):
    info = cl.shm_info()
    return info["segment"], [(p["role"], p["pid"], p["alive"], p["slot"])
                             for p in info["processes"] if p["role"] != "tool"]


def exact(t, port, model, desc):
    kpt = [model.file_keys[0][:40] + model.unknown_keys(0, 2), model.file_keys[1][:20]]
    _, g = H.decode_output(H.infer(port, "m", kpt, binary=True))
    t.ok(g == model.expected(kpt), desc, H.first_mismatch(g, model.expected(kpt), model, kpt))


def body(t, cl, prefix):
    model = cl.gen_model("m", rows=[2000, 1000], dims=[8, 4], defaults=[0.5, -2.0])
    common = [
        ("volatile_db", "shared_memory_auto_remove", "false"),
        ("hps", "heartbeat_interval_ms", HEARTBEAT_MS),
        ("hps", "worker_timeout_ms", WORKER_TIMEOUT_MS),
        ("worker", "miss_timeout_ms", 300),
    ]
    conf = cl.write_config("hps.ini", model.ini_text, common)
    conf_keep = cl.write_config("hps-keep.ini", model.ini_text, common + [
        ("volatile_db", "initialize_after_startup", "false")])
    t.diag("namespaces by: %s" % " ".join(prefix))
    H.COORDINATOR = wrap(cl, "coordinator-ns", H.COORDINATOR, prefix)
    H.WORKER = wrap(cl, "worker-ns", H.WORKER, prefix)

    # ---- 1. both up, in two namespaces --------------------------------------
    coord = cl.start_coordinator(conf)
    w0 = cl.start_worker(conf, instance=0)  # waits until ready: it sees the coordinator
    t.eq(H.ready_status(w0.http_port), 200,
         "worker (its own PID namespace) ready: it sees the coordinator alive")
    c_in, w_in = child_of(coord.pid), child_of(w0.pid)
    t.ok(c_in and w_in, "found the coordinator (%s) and worker (%s) under unshare" % (c_in, w_in))
    seg, procs = rows(cl)
    t.eq(sorted((r, p, a) for r, p, a, _ in procs), [("coordinator", 1, True), ("worker", 1, True)],
         "hps-shm info: coordinator and worker rows, both pid 1, both alive")
    t.ok(seg["coordinator_pid"] == 1 and seg["coordinator_alive"],
         "hps-shm info: coordinator pid 1 alive", repr(seg))
    exact(t, w0.http_port, model, "worker answers exactly")
    w_slot = [s for r, _, _, s in procs if r == "worker"][0]

    # ---- 2. SIGKILL the worker: the coordinator reaps it --------------------
    os.kill(w_in, signal.SIGKILL)
    t_kill = time.monotonic()
    w0.wait(10)  # its unshare ends with it: the worker is dead from here on
    seen_alive, reaped_at = [], None
    while time.monotonic() - t_kill < 10:
        _, procs = rows(cl)
        mine = [p for p in procs if p[3] == w_slot and p[0] == "worker"]
        seen_alive += [p for p in mine if p[2]]
        if not mine:
            reaped_at = time.monotonic() - t_kill
            break
        time.sleep(0.02)
    t.ok(reaped_at is not None and reaped_at <= WORKER_TIMEOUT_MS / 1000,
         "the coordinator reaped the killed worker %.0f ms after the kill (worker_timeout_ms %d)" %
         ((reaped_at if reaped_at is not None else -1) * 1000, WORKER_TIMEOUT_MS), coord.log())
    t.ok(not seen_alive, "hps-shm info never showed the dead worker alive", repr(seen_alive))
    t.ok("reaped 1 dead process: pid 1 (worker or client)" in coord.log(),
         "coordinator log says it reaped it, with its pid (in its namespace) and role",
         coord.log())

    # ---- 3. SIGKILL the coordinator: a worker sees it at once ----------------
    w1 = cl.start_worker(conf, instance=1)
    t.eq(H.ready_status(w1.http_port), 200, "second worker (third namespace) ready")
    os.kill(c_in, signal.SIGKILL)
    t_kill = time.monotonic()
    not_ready = H.wait_until(lambda: H.ready_status(w1.http_port) not in (None, 200), 10.0, 0.01)
    dt = time.monotonic() - t_kill
    t.ok(not_ready and dt <= WORKER_TIMEOUT_MS / 1000,
         "worker not ready %.0f ms after the coordinator's SIGKILL (worker_timeout_ms %d)" %
         (dt * 1000, WORKER_TIMEOUT_MS), w1.log())
    t.ok(not_ready and dt < WORKER_TIMEOUT_MS / 2000,
         "seen by the coordinator's lock, before its heartbeat could age out (%.0f ms)" %
         (dt * 1000))
    coord.wait(10)
    seg, procs = rows(cl)
    t.ok(seg["coordinator_pid"] == 1 and not seg["coordinator_alive"],
         "hps-shm info: coordinator pid 1 not alive", repr(seg))
    t.ok([p for p in procs if p[0] == "coordinator" and not p[2]] and
         not [p for p in procs if p[0] == "coordinator" and p[2]],
         "hps-shm info: the coordinator's row listed, not alive", repr(procs))
    rc, out, _ = cl.shm("info", cl.segment)
    t.ok(rc == 0 and "coordinator      pid 1 (gone)" in out, "hps-shm info (text): coordinator gone",
         out)
    exact(t, w1.http_port, model, "degraded worker still exact from the volatile DB")

    # ---- 4. a new coordinator, pid 1 of yet another namespace ----------------
    c2 = cl.start_coordinator(conf_keep)
    t.ok("re-attached" in c2.log(), "coordinator 2 re-attached the segment", c2.log())
    t.ok(H.wait_for_ready(w1.http_port, True, 5.0), "worker ready again with coordinator 2",
         w1.log())
    exact(t, w1.http_port, model, "worker exact with coordinator 2")

    def settled():
        _, procs = rows(cl)
        return sorted((r, p, a) for r, p, a, _ in procs) == [("coordinator", 1, True),
                                                              ("worker", 1, True)]
    t.ok(H.wait_until(settled, 5.0), "hps-shm info: the dead coordinator's row reaped; new "
         "coordinator and the worker alive", repr(rows(cl)))
    seg, _ = rows(cl)
    t.ok(seg["coordinator_alive"], "hps-shm info: coordinator 2 alive", repr(seg))
    t.ok(w1.alive() and c2.alive(), "worker and coordinator 2 running")


if __name__ == "__main__":
    pre = unshare_prefix()
    if pre is None:
        H.Tap.skip_all("unshare --pid --fork is not permitted here (needs CAP_SYS_ADMIN or "
                       "user namespaces)")
    H.run_main("pidns", lambda t, cl: body(t, cl, pre))
