#!/usr/bin/env python3
"""
int-coordinator_lifecycle: hps-coordinator's exits and the segment's fate.

- SIGTERM (and SIGINT) -> exit 0; /dev/shm/hps.NAME removed with
  shared_memory_auto_remove = true, kept (and consistent) with false, and a
  coordinator with initialize_after_startup = false then re-attaches it with
  its rows;
- a second coordinator on the segment of a live one exits 3 (with either
  initialize_after_startup), leaving the first one, its segment and its
  worker untouched;
- a bad configuration exits 2 with a message naming FILE:LINE;
- a worker stopped with SIGTERM exits 0 and leaves the process table;
- a worker started before its coordinator is not ready and refuses lookups
  at once (503 naming the segment); from the moment it says ready, every answer is exact (it must not
  turn ready while the coordinator is still loading the model);
- a second coordinator started while the first is still loading (longer
  than worker_timeout_ms) exits 3 and leaves the first one's segment alone;
- a SIGTERM while a model loads (a fresh start, a reload) stops the load:
  exit 0, nothing published, a reload's serving segment untouched;
- restarts leave no empty RocksDB write-ahead logs behind;
- a segment under the name that another user owns is not taken (exit 3).
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402
from test_model_control import section  # noqa: E402


def seg_inode(segpath):
    """Inode of the segment a coordinator builds (/dev/shm/.hps.<name>.new
    until it is loaded) or serves (/dev/shm/hps.<name>: the same inode, moved
    by rename); None if neither exists."""
    d, base = os.path.split(segpath)
    for p in (os.path.join(d, "." + base + ".new"), segpath):
        try:
            return os.stat(p).st_ino
        except FileNotFoundError:
            pass
    return None


def started_loading(c):
    """The coordinator has validated every model file, created or re-attached
    its segment and marked it LOADING ("loading N models"), in that order."""
    return re.search(r"INFO +loading \d+ models?$", c.log(), re.M) is not None


def big_model_phases(t, cl):
    """A model big enough for about half a second of loading (400k rows):
    (1) a worker started before its coordinator refuses lookups (503) and
    must not say ready while the coordinator is still loading; (2) a second coordinator started while the
    first is still loading (for longer than worker_timeout_ms) must exit 3
    and leave the first one's segment alone."""
    seg = cl.new_segment_name("big")
    model = cl.gen_model("big", rows=[400000, 1000], dims=[8, 4], defaults=[0.5, -2.0],
                         segment=seg)
    segpath = "/dev/shm/hps." + seg
    conf = cl.write_config("big.ini", model.ini_text, [
        ("hps", "heartbeat_interval_ms", 50),
        ("worker", "miss_timeout_ms", 100)])

    # ---- (1) worker first ------------------------------------------------------
    w = cl.start_worker(conf, wait_ready=False)
    t.eq(H.ready_status(w.http_port), 400, "worker without a segment: not ready")
    kpt = [model.file_keys[0][:5] + model.file_keys[0][-5:], model.file_keys[1][:5]]
    r = H.infer(w.http_port, "big", kpt)
    # Defaults for every key would pass for an answer: refused at once, with
    # the segment it waits for named (and in its log).
    t.ok(r.status == 503 and r.is_json_error() and "hps." + seg in r.json()["error"] and
         r.elapsed < 1.0, "worker without a segment refuses a lookup at once: 503 naming the "
         "segment (%.0f ms)" % (r.elapsed * 1000), "HTTP %d %r" % (r.status, r.body[:300]))
    t.ok("no segment " + segpath in w.log(), "its log names the segment it waits for",
         w.log()[-2000:])
    want = model.expected(kpt)
    t0 = time.monotonic()
    c = cl.start_coordinator(conf, wait_ready=False)
    ready_at = None
    wrong = []  # (seconds after the coordinator's start, coordinator done loading?)
    while time.monotonic() - t0 < 60:
        loaded = "serving misses" in c.log()
        if H.ready_status(w.http_port) == 200:
            if ready_at is None:
                ready_at = time.monotonic() - t0
            _, g = H.decode_output(H.infer(w.http_port, "big", kpt))
            if g != want:
                wrong.append((round(time.monotonic() - t0, 3), loaded))
            elif loaded:
                break
        if not c.alive():
            break
        time.sleep(0.01)
    t.ok(ready_at is not None, "worker ready once the coordinator is up (%.2f s)" %
         (ready_at or -1), c.log())
    t.ok(not wrong, "no wrong answer while the worker said ready (%d wrong; the first at "
         "(s after the coordinator's start, coordinator done loading) = %s)" %
         (len(wrong), wrong[:3]), c.log() + w.log())
    _, g = H.decode_output(H.infer(w.http_port, "big", kpt, binary=True))
    t.ok(g == want, "after loading the worker answers exactly")
    w.kill(signal.SIGTERM)
    t.eq(w.wait(10), 0, "its worker: SIGTERM -> exit status 0")
    c.kill(signal.SIGTERM)
    t.eq(c.wait(10), 0, "coordinator of the big model: SIGTERM -> exit status 0")

    # ---- (1b) killed while loading, re-attached with initialize_after_startup
    # = false and no persistent DB: the rows it had not loaded yet used to be
    # lost (the restart "kept its rows"; lookups answered the default).
    seg_k = cl.new_segment_name("bigk")
    conf_k = cl.write_config("bigk.ini", model.ini_text, [
        ("volatile_db", "shared_memory_name", seg_k),
        ("volatile_db", "initialize_after_startup", "false"),
        ("volatile_db", "shared_memory_auto_remove", "false"),
        ("persistent_db", "type", "disabled")])
    c = cl.start_coordinator(conf_k, wait_ready=False)
    if not H.wait_until(lambda: started_loading(c) or not c.alive(), 30, 0.002):
        raise RuntimeError("coordinator did not start loading:\n" + c.log())
    c.kill(signal.SIGKILL)
    loading = "serving misses" not in c.log()
    c.wait(10)
    c = cl.start_coordinator(conf_k)
    # A coordinator builds its segment beside the name and publishes it only
    # when loaded (issue 20), so a kill while loading leaves no segment under
    # the name to keep: the restart builds it again, whole.
    t.ok(not loading or ("building shared memory" in c.log() and "kept its rows" not in c.log()),
         "a restart after a kill while loading builds the segment again (killed %s loading)" %
         ("during" if loading else "after"), c.log())
    w = cl.start_worker(conf_k)
    _, g = H.decode_output(H.infer(w.http_port, "big", kpt, binary=True))
    t.ok(g == want, "and then answers exactly, the file's last keys included")
    w.kill(signal.SIGTERM)
    w.wait(10)
    c.kill(signal.SIGTERM)
    t.eq(c.wait(10), 0, "SIGTERM -> exit status 0")

    # ---- (2) a second coordinator during a long load ----------------------------
    # worker_timeout_ms at its minimum (100 ms), so the load of the first
    # coordinator outlasts it; the second starts 150 ms into that load.
    conf2 = cl.write_config("big2.ini", model.ini_text, [
        ("hps", "heartbeat_interval_ms", 10),
        ("hps", "worker_timeout_ms", 100)])
    a = cl.start_coordinator(conf2, wait_ready=False)
    if not H.wait_until(lambda: started_loading(a) or not a.alive(), 30, 0.002):
        raise RuntimeError("coordinator did not start loading:\n" + a.log())
    ino = seg_inode(segpath)
    time.sleep(0.15)
    during = "serving misses" not in a.log()
    rc, out = cl.run_coordinator(conf2, timeout=60)
    during = during and "serving misses" not in a.log()
    t.diag("second coordinator ran %s the first one's load" % ("during" if during else "after"))
    t.ok(rc == H.EXIT_SEGMENT and "pid %d" % a.pid in out,
         "second coordinator while the first is loading exits 3 naming pid %d" % a.pid,
         "exit %d\n%s\nfirst coordinator:\n%s" % (rc, out, a.log()))
    t.ok(ino is not None and seg_inode(segpath) == ino,
         "the loading coordinator's segment was neither removed nor replaced")
    t.ok(H.wait_until(lambda: "serving misses" in a.log() or not a.alive(), 60),
         "the first coordinator finishes loading", a.log())
    w = cl.start_worker(conf2, wait_ready=False)
    t.ok(H.wait_for_ready(w.http_port, True, 5.0), "a worker attaches it and is ready",
         w.log())
    _, g = H.decode_output(H.infer(w.http_port, "big", kpt, binary=True))
    t.ok(g == want, "and answers exactly")
    a.kill(signal.SIGTERM)
    t.eq(a.wait(10), 0, "SIGTERM -> exit status 0")
    w.kill(signal.SIGKILL)
    w.wait(10)
    shutil.rmtree(model.dir, ignore_errors=True)


def unfinished_segment(t, cl, model):
    """A segment object left never initialized (magic 0) by a coordinator
    killed between creating and initializing it used to stop every later
    start ("bad magic ... remove it"); now the next coordinator replaces it.
    A clean exit removes the name's lock file."""
    seg = cl.new_segment_name("unf")
    with open("/dev/shm/hps." + seg, "wb") as f:
        f.truncate(1 << 20)
    conf = cl.write_config("unf.ini", model.ini_text, [
        ("volatile_db", "shared_memory_name", seg)])
    c = cl.start_coordinator(conf)
    t.ok("never initialized (magic 0)" in c.log(),
         "a coordinator replaces a never-initialized segment object", c.log())
    rc, out, err = cl.shm("check", seg)
    t.ok(rc == 0, "and the new segment checks", out + err)
    t.ok(os.path.exists("/dev/shm/.hps.%s.lock" % seg), "it holds the name's lock file")
    c.kill(signal.SIGTERM)
    t.eq(c.wait(10), 0, "SIGTERM -> exit status 0")
    t.ok(not os.path.exists("/dev/shm/.hps.%s.lock" % seg), "a clean exit removes the lock file")


def reattach_mismatch(t, cl, model):
    """Re-attaching (initialize_after_startup = false) a segment built with
    another num_partitions exits 3 naming the setting and both values (it
    used to say only 'existing object does not match the request'); a
    changed default value is kept from the segment, with a warning (it was
    silently ignored)."""
    seg = cl.new_segment_name("mm")
    base = [("volatile_db", "shared_memory_name", seg),
            ("volatile_db", "shared_memory_auto_remove", "false"),
            ("volatile_db", "num_partitions", "2"),
            ("persistent_db", "type", "disabled")]
    c = cl.start_coordinator(cl.write_config("mm1.ini", model.ini_text, base))
    c.kill(signal.SIGTERM)
    t.eq(c.wait(10), 0, "a coordinator built the segment and stopped")
    reuse = base + [("volatile_db", "initialize_after_startup", "false")]
    rc, out = cl.run_coordinator(cl.write_config("mm2.ini", model.ini_text, reuse + [
        ("volatile_db", "num_partitions", "3")]), timeout=30)
    t.ok(rc == H.EXIT_SEGMENT and "[volatile_db] num_partitions: 2 there, 3 here" in out and
         "initialize_after_startup = true" in out,
         "re-attach with another num_partitions: exit 3 naming it and both values", out)
    c = cl.start_coordinator(cl.write_config("mm3.ini", model.ini_text, reuse + [
        ("model.m", "default_value_for_each_table", "1.5, -2.0")]))
    t.ok("keeps the table's default value (0.5)" in c.log(),
         "a changed default value on re-attach is kept from the segment, with a warning",
         c.log())
    c.kill(signal.SIGTERM)
    t.eq(c.wait(10), 0, "SIGTERM -> exit status 0")


def shm_names(seg):
    """The /dev/shm entries of segment seg: the served one and a build's."""
    return sorted(f for f in os.listdir("/dev/shm") if f in ("hps." + seg, ".hps." + seg + ".new"))


def stop_during_load(t, cl):
    """A SIGTERM while a model loads stops it at its next step: nothing is
    published, what the load made is removed, the exit status is 0.  (It
    used to finish the load first: minutes for a large model, past a
    service manager's stop timeout, then SIGKILL.)  (a) A fresh start with a
    persistent DB; (b) a reload that adds the model while m serves: m's
    segment serves on, as it was."""
    seg = cl.new_segment_name("stop")
    # 2M rows x dim 16 (144 MB): a load of about a second; the SIGTERM comes
    # within milliseconds of its "loading" line.
    big = cl.gen_model("sbig", rows=[2000000], dims=[16], segment=seg)
    small = cl.gen_model("m", rows=[2000, 1000], dims=[8, 4], defaults=[0.5, -2.0],
                         subdir="stop_m", segment=seg)
    pdb = cl.path("stop_rocksdb")
    common = [("persistent_db", "path", pdb), ("volatile_db", "shared_memory_size", "512MiB")]
    conf = cl.write_config("stop.ini", big.ini_text, common)
    c = cl.start_coordinator(conf, wait_ready=False)
    if not H.wait_until(lambda: started_loading(c) or not c.alive(), 60, 0.002):
        raise RuntimeError("coordinator did not start loading:\n" + c.log())
    t0 = time.monotonic()
    c.kill(signal.SIGTERM)
    rc = c.wait(30)
    took = time.monotonic() - t0
    log = c.log()
    t.ok(rc == 0 and "stopped before serving" in log and "loaded in" not in log,
         "(a) SIGTERM while a fresh start loads: the load stops, exit 0 after %.2f s" % took,
         "exit %s\n%s" % (rc, log[-2500:]))
    t.ok(not shm_names(seg) and not os.path.exists(pdb),
         "(a) what it made is gone: no segment, no fresh persistent DB",
         "%s %s" % (shm_names(seg), os.path.exists(pdb)))
    t.ok("ERROR" not in log, "(a) a stop asked for logs no error", log[-2500:])

    # (b) m serves; a SIGHUP adds sbig; a SIGTERM while sbig loads
    conf = cl.write_config("stop.ini", small.ini_text, common)
    c = cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    kpt = [small.file_keys[0][:10], small.file_keys[1][-10:]]
    want = small.expected(kpt)
    serving = os.stat("/dev/shm/hps." + seg).st_ino
    cl.write_config("stop.ini", small.ini_text + "\n" + section(big), common)
    n = c.log().count("loading 2 models")
    c.kill(signal.SIGHUP)
    if not H.wait_until(lambda: c.log().count("loading 2 models") > n or not c.alive(), 60,
                        0.002):
        raise RuntimeError("the reload did not start loading:\n" + c.log())
    c.kill(signal.SIGTERM)
    rc = c.wait(30)
    log = c.log()
    tail = log[log.rfind("SIGHUP"):]
    t.ok(rc == 0 and "model sbig version 1: loaded in" not in tail and
         "published /dev/shm" not in tail and "during the reload's build" in tail,
         "(b) SIGTERM while a reload loads a model: it stops unpublished, exit 0",
         "exit %s\n%s" % (rc, tail[-2500:]))
    t.ok(shm_names(seg) == ["hps." + seg] and os.stat("/dev/shm/hps." + seg).st_ino == serving,
         "(b) the serving segment stays, the build is gone", shm_names(seg))
    _, g = H.decode_output(H.infer(w.http_port, "m", kpt, binary=True))
    t.ok(g == want, "(b) the worker answers m exactly from it (shared memory)")
    w.kill(signal.SIGTERM)
    w.wait(10)


def wal_files_after_restarts(t, cl):
    """Six coordinator starts on one persistent DB, stopped by SIGTERM and
    SIGKILL in turn, leave one write-ahead log: RocksDB before 8.3 left one
    more empty NNNNNN.log per start, for good (longevity audit: 314 files
    after 300 restarts; a crash loop makes one a second)."""
    seg = cl.new_segment_name("wal")
    model = cl.gen_model("w", rows=[500], dims=[4], segment=seg)
    pdb = cl.path("wal_rocksdb")
    conf = cl.write_config("wal.ini", model.ini_text, [("persistent_db", "path", pdb)])
    for i in range(6):
        c = cl.start_coordinator(conf)
        c.kill(signal.SIGTERM if i % 2 else signal.SIGKILL)
        c.wait(20)
    wals = sorted(f for f in os.listdir(pdb) if re.fullmatch(r"[0-9]+\.log", f))
    t.ok(len(wals) <= 1, "six starts leave at most one RocksDB WAL file: %d" % len(wals), wals)
    c = cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    kpt = [model.file_keys[0][:50]]
    _, g = H.decode_output(H.infer(w.http_port, "w", kpt, binary=True))
    t.ok(g == model.expected(kpt), "and then answers exactly")
    w.kill(signal.SIGTERM)
    w.wait(10)
    c.kill(signal.SIGTERM)
    c.wait(20)


def foreign_segment(t, cl):
    """A segment under the name that another user owns (planted: any local
    user can create /dev/shm/hps.<name>) is not taken: exit 3 naming the
    owner; it was re-attached and served, rows its owner could change."""
    if os.geteuid() != 0:
        t.skip("a segment of another user", "needs root to give a file away")
        return
    seg = cl.new_segment_name("foreign")
    model = cl.gen_model("f", rows=[100], dims=[4], segment=seg)
    path = "/dev/shm/hps." + seg
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o666)
    try:
        os.fchown(fd, 65534, 65534)  # nobody
    except OSError as e:  # a user namespace without that uid, say
        os.close(fd)
        os.unlink(path)
        t.skip("a segment of another user", "cannot give a file to uid 65534: %s" % e)
        return
    os.close(fd)
    conf = cl.write_config("foreign.ini", model.ini_text, [
        ("volatile_db", "initialize_after_startup", "false"), ("persistent_db", "type", "disabled")])
    rc, out = cl.run_coordinator(conf, timeout=30)
    t.ok(rc == H.EXIT_SEGMENT and "belongs to uid 65534" in out and "hps-shm rm" in out,
         "a segment of another user under the name: exit 3, naming its owner and the way out",
         "exit %d\n%s" % (rc, out[-1500:]))
    t.eq(os.stat(path).st_uid, 65534, "it was left alone")
    os.unlink(path)


def body(t, cl):
    big_model_phases(t, cl)
    stop_during_load(t, cl)
    wal_files_after_restarts(t, cl)
    foreign_segment(t, cl)
    model = cl.gen_model("m", rows=[2000, 1000], dims=[8, 4], defaults=[0.5, -2.0])
    kpt = [model.file_keys[0][:10] + model.file_keys[0][-10:],
           model.file_keys[1][:10] + model.file_keys[1][-10:]]
    want = model.expected(kpt)
    common = [("volatile_db", "initial_cache_rate", 0.5),
              ("hps", "heartbeat_interval_ms", 50),
              ("hps", "worker_timeout_ms", 500)]
    conf_rm = cl.write_config("remove.ini", model.ini_text, common + [
        ("volatile_db", "shared_memory_auto_remove", "true")])
    conf_keep = cl.write_config("keep.ini", model.ini_text, common + [
        ("volatile_db", "shared_memory_auto_remove", "false")])
    conf_reuse = cl.write_config("reuse.ini", model.ini_text, common + [
        ("volatile_db", "shared_memory_auto_remove", "false"),
        ("volatile_db", "initialize_after_startup", "false")])
    seg = "/dev/shm/hps." + cl.segment

    # ---- SIGTERM, auto_remove = true -----------------------------------------
    c = cl.start_coordinator(conf_rm)
    t.ok(os.path.exists(seg), "coordinator created %s" % seg)
    c.kill(signal.SIGTERM)
    st = c.wait(10)
    t.eq(st, 0, "SIGTERM -> exit status 0")
    t.ok(not os.path.exists(seg), "shared_memory_auto_remove = true: segment removed", c.log())

    # ---- SIGINT, auto_remove = false: kept, consistent, re-attachable -------
    c = cl.start_coordinator(conf_keep)
    w = cl.start_worker(conf_keep)
    _, g = H.decode_output(H.infer(w.http_port, "m", kpt, binary=True))
    t.ok(g == want, "lookups exact (VDB and RocksDB) before the restart")
    ino = os.stat(seg).st_ino
    c.kill(signal.SIGINT)
    st = c.wait(10)
    t.eq(st, 0, "SIGINT -> exit status 0")
    t.ok(os.path.exists(seg), "shared_memory_auto_remove = false: segment kept")
    rc, out, err = cl.shm("check", cl.segment)
    t.ok(rc == 0, "hps-shm check passes on the kept segment", out + err)
    info = cl.shm_info()
    t.eq(info["segment"]["num_tables"], 2, "kept segment still holds both tables")
    t.ok(H.wait_for_ready(w.http_port, False, 3.0), "worker not ready without a coordinator")

    c = cl.start_coordinator(conf_reuse)
    t.ok("re-attached" in c.log(), "initialize_after_startup = false re-attaches it", c.log())
    t.eq(os.stat(seg).st_ino, ino, "same segment object")
    t.ok(H.wait_for_ready(w.http_port, True, 5.0), "worker ready again")
    _, g = H.decode_output(H.infer(w.http_port, "m", kpt, binary=False))
    t.ok(g == want, "lookups exact after the restart")

    # ---- a second coordinator on a live one's segment -------------------------
    for name, conf in (("initialize_after_startup = true", conf_keep),
                       ("initialize_after_startup = false", conf_reuse)):
        rc, out = cl.run_coordinator(conf, timeout=30)
        t.eq(rc, H.EXIT_SEGMENT, "second coordinator (%s) exits 3" % name)
        t.ok("pid %d" % c.pid in out, "its message names the live coordinator pid %d" % c.pid,
             out)
    # With a RocksDB path of its own, it stops at the segment's lock before
    # it opens (and would create) that database.
    rocks2 = cl.path("rocksdb-second")
    conf_other = cl.write_config("other-pdb.ini", model.ini_text, common + [
        ("persistent_db", "path", rocks2)])
    rc, out = cl.run_coordinator(conf_other, timeout=30)
    t.ok(rc == H.EXIT_SEGMENT and "another hps-coordinator (pid %d) holds" % c.pid in out,
         "second coordinator with another persistent_db path exits 3 naming pid %d" % c.pid, out)
    t.ok(not os.path.exists(rocks2), "and creates no RocksDB directory at %s" % rocks2)
    # A coordinator of another segment given the same persistent_db path: the
    # message names the process holding RocksDB's lock (it named the second
    # coordinator itself, with exit 3).
    conf_clash = cl.write_config("pdb-clash.ini", model.ini_text, common + [
        ("volatile_db", "shared_memory_name", cl.new_segment_name("pdbclash"))])
    rc, out = cl.run_coordinator(conf_clash, timeout=30)
    t.ok(rc == H.EXIT_PDB and "is held by pid %d (hps-coordinat" % c.pid in out,
         "a coordinator of another segment on the same persistent_db path exits 5 naming "
         "pid %d" % c.pid, out)
    t.ok(c.alive(), "the first coordinator still runs", c.log())
    t.eq(os.stat(seg).st_ino, ino, "its segment was not replaced")
    # Stopped past worker_timeout_ms (500), its heartbeat is stale, but it
    # still holds the name's lock: a second coordinator used to take over
    # the segment (two writers once the first continued).
    # (Without a persistent DB: RocksDB's own LOCK would stop it first.)
    conf_nopdb = cl.write_config("nopdb.ini", model.ini_text, common + [
        ("volatile_db", "initialize_after_startup", "false"),
        ("persistent_db", "type", "disabled")])
    c.kill(signal.SIGSTOP)
    time.sleep(0.8)
    rc, out = cl.run_coordinator(conf_nopdb, timeout=30)
    c.kill(signal.SIGCONT)
    t.ok(rc == H.EXIT_SEGMENT and "another hps-coordinator (pid %d) holds" % c.pid in out,
         "a second coordinator while the first is stopped (SIGSTOP) exits 3 naming it", out)
    t.eq(os.stat(seg).st_ino, ino, "the stopped coordinator's segment was not replaced")
    time.sleep(0.3)
    t.eq(H.ready_status(w.http_port), 200, "its worker is still ready")
    _, g = H.decode_output(H.infer(w.http_port, "m", kpt, binary=True))
    t.ok(g == want, "and still exact, persistent-DB keys included")
    rc, out, err = cl.shm("check", cl.segment)
    t.ok(rc == 0, "hps-shm check passes", out + err)

    # ---- a second worker on a port in use: exit 3 ------------------------------------
    r = subprocess.run([H.WORKER, "-c", conf_keep, "--device", "0", "--http-port",
                        str(w.http_port), "--metrics-port", "0"],
                       capture_output=True, text=True, timeout=30)
    t.ok(r.returncode == 3 and str(w.http_port) in r.stderr + r.stdout,
         "hps-worker on an HTTP port in use exits 3 naming the port",
         "%d %s" % (r.returncode, r.stderr + r.stdout))
    t.eq(H.ready_status(w.http_port), 200, "the worker owning that port is unaffected")

    # ---- worker SIGTERM: exit 0, detached -------------------------------------------
    w.kill(signal.SIGTERM)
    st = w.wait(10)
    t.eq(st, 0, "worker: SIGTERM -> exit status 0")
    procs = {p["pid"] for p in cl.shm_info()["processes"]}
    t.ok(w.pid not in procs, "worker left the process table at once", repr(procs))

    c.kill(signal.SIGTERM)
    t.eq(c.wait(10), 0, "coordinator (auto_remove = false): SIGTERM -> exit status 0")
    t.ok(os.path.exists(seg), "segment kept again")

    # ---- bad configurations: exit 2, FILE:LINE -----------------------------------------
    text = model.ini_text
    lines = text.splitlines()
    vdb_line = lines.index("[volatile_db]") + 1  # 1-based line of the header
    cases = [
        ("unknown key", "[volatile_db]\nbogus_key = 1",
         "[volatile_db]\nbogus_key = 1", 1),
        ("value out of range", "[volatile_db]\noverflow_resolution_target = 1.5",
         "[volatile_db]\noverflow_resolution_target = 1.5", 1),
        ("bad boolean", "[volatile_db]\ncache_missed_embeddings = maybe",
         "[volatile_db]\ncache_missed_embeddings = maybe", 1),
        ("unterminated section header", "[volatile_db]", "[volatile_db", 0),
    ]
    for n, (desc, old, new, delta) in enumerate(cases):
        path = cl.path("bad%d.ini" % n)
        with open(path, "w") as f:
            f.write(text.replace(old if old in text else "[volatile_db]", new, 1))
        rc, out = cl.run_coordinator(path, timeout=30)
        where = "%s:%d" % (path, vdb_line + delta)
        t.eq(rc, H.EXIT_USAGE, "bad config (%s) -> exit status 2" % desc)
        t.ok(where in out, "its message names %s" % where, out)
    rc, out = cl.run_coordinator(cl.path("missing.ini"), timeout=30)
    t.ok(rc == H.EXIT_USAGE and "missing.ini" in out,
         "missing config file -> exit status 2 naming the file", "%d %s" % (rc, out))
    t.ok(os.path.exists(seg), "refused starts did not touch the kept segment")
    unfinished_segment(t, cl, model)
    reattach_mismatch(t, cl, model)


if __name__ == "__main__":
    H.run_main("coordinator_lifecycle", body)
