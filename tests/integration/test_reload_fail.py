#!/usr/bin/env python3
"""
int-reload_fail: a reload that is killed, or fails, while it builds leaves
the persistent DB as the serving version had it, so keys outside shared
memory keep their serving version's answers (issue 20: a failed or killed
load leaves the serving state as it was).

Model m, versions 1 and 2 (hps-gen --model-version changes every vector),
600,000 rows of dim 32, one persistent DB path, initial_cache_rate 0.1 and
cache_missed_embeddings off: nine keys in ten are misses that the
coordinator answers from RocksDB.  A worker serves a stream of exactly
checked lookups throughout (hpstest.VersionStream).

  (1) killed: SIGHUP to version 2, and SIGKILL of the new image once it
      writes version 2's SST files (its .hps-ingest-* directory appears).
      A coordinator started again on the same INI (as systemd would) finds
      the persistent DB's contents token equal to the serving segment's,
      answers that segment's misses from version 1's rows while it builds
      (logged), then publishes version 2.  After the restart answered,
      every answer is wholly version 1 or 2: 0 defaults (before: the killed
      build had renewed the token and dropped version 1's rows, so the
      restart answered nothing and each miss got its default until the
      publish).
  (2) failed (the persistent DB on a tmpfs of its own; skipped where mount
      is not permitted): SIGHUP back to version 1, and the tmpfs filled up
      (a ballast leaving 8 MiB) once the new image stages version 1's SST
      files: the build fails (the SST writer's ENOSPC), the fallback image
      keeps version 2's column family as it is (logged: "already holds
      these model files") and answers the serving segment's misses
      meanwhile: every answer is version 2's, 0 defaults (before: the failed
      build had dropped version 2's rows; the fallback ingested them again,
      with defaults meanwhile, here onto the full disk); the fallback holds
      the serving segment from its start and answers its misses from
      RocksDB until it serves it again itself; no staging directory is
      left.  Then the same with the disk filled while the
      stage is written so that it still fits, but the replacement finds
      less than the 64 MiB it keeps for RocksDB's logs and metadata: refused
      before anything is replaced ("nothing replaced"), the same fallback.
"""
import glob
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402

ROWS = [600000]
DIMS = [32]


def staging(pdb):
    return glob.glob(os.path.join(pdb, ".hps-ingest-*"))


def settings_for(cl, pdb):
    return [("volatile_db", "initial_cache_rate", 0.1),
            ("volatile_db", "cache_missed_embeddings", "false"),
            ("persistent_db", "path", pdb),
            ("hps", "heartbeat_interval_ms", 50),
            ("hps", "worker_timeout_ms", 500),
            ("worker", "miss_timeout_ms", 2000)]


def start_stream(w, models):
    building, down = threading.Event(), threading.Event()
    s = H.VersionStream(w.http_port, models, building, down)
    s.start()
    return s


def stop_stream(t, s, what):
    s.stop_ev.set()
    s.join(30)
    t.ok(s.requests > 20 and s.wrong == 0 and s.failed == 0,
         "%s: %d requests, %d wrong, %d failed; %d with defaults while no coordinator ran"
         % (what, s.requests, s.wrong, s.failed, s.down_defaults), s.first_problem)


def killed(t, cl):
    pdb = cl.path("rocksdb")
    settings = settings_for(cl, pdb)
    models = {v: cl.gen_model("m", rows=ROWS, dims=DIMS, subdir="m_v%d" % v, version=v)
              for v in (1, 2)}
    conf = cl.write_config("hps.ini", models[1].ini_text, settings)
    c = cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    s = start_stream(w, models)
    time.sleep(0.3)
    cl.write_config("hps.ini", models[2].ini_text, settings)
    c.kill(signal.SIGHUP)
    H.wait_until(lambda: "SIGHUP: reading" in c.log(), 10, 0.001)
    staged = H.wait_until(lambda: staging(pdb) or "published /dev/shm" in
                          c.log().split("SIGHUP: reading")[-1], 60, 0.001)
    s.down.set()  # from here until the restart answers: no coordinator
    c.kill(signal.SIGKILL)
    c.wait(10)
    t.ok(staged and "published /dev/shm" not in c.log().split("SIGHUP: reading")[-1],
         "the reload to version 2 was killed while it wrote its SST files", c.log()[-1500:])
    c = cl.start_coordinator(conf, wait_ready=False)
    t.ok(H.wait_until(lambda: "restart: the serving segment's misses are answered" in c.log(),
                      30, 0.002),
         "the restarted coordinator finds version 1's rows in the persistent DB and answers "
         "the serving segment's misses from them (logged)", c.log()[-2000:])
    H.wait_until(lambda: H.ready_status(w.http_port) == 200, 5, 0.002)
    s.down.clear()
    before = s.requests
    t.ok(H.wait_until(lambda: H.model_versions(w.http_port) == ["2"], 60),
         "the restart publishes version 2", c.log()[-1500:])
    t.diag("%d requests answered between the restart's takeover and the switch"
           % (s.requests - before))
    time.sleep(0.3)
    stop_stream(t, s, "killed reload")


def fill(mnt, leave):
    """Ballast files on mnt until about `leave` bytes are free (the SST
    writer takes room meanwhile: a file that no longer fits is tried again
    smaller).  Their paths."""
    made = []
    for i in range(100):
        st = os.statvfs(mnt)
        want = st.f_bavail * st.f_frsize - leave
        if want < (1 << 20):
            break
        path = os.path.join(mnt, "ballast%d" % i)
        made.append(path)
        with open(path, "wb") as f:
            try:
                os.posix_fallocate(f.fileno(), 0, want)
                break
            except OSError:
                f.truncate(0)
    return made


def failed(t, cl):
    why = H.on_tmpfs(cl, "pdbfs", 400, lambda mnt: failed_on(t, cl, mnt))
    for what in ["ENOSPC: falls back", "ENOSPC: the fallback keeps the column family",
                 "ENOSPC: version 2 serves", "room: falls back",
                 "room: the fallback keeps the column family", "room: version 2 serves",
                 "failed reloads: the stream", "no staging left"] if why else []:
        t.skip(what, why)


def failed_on(t, cl, mnt):
    pdb = os.path.join(mnt, "rocksdb")
    seg = cl.new_segment_name("fail")
    settings = settings_for(cl, pdb)
    models = {v: cl.gen_model("m", rows=ROWS, dims=DIMS, subdir="f_v%d" % v, version=v,
                              segment=seg) for v in (1, 2)}
    files = sum(os.path.getsize(os.path.join(models[1].table_dirs[0], f))
                for f in ("key", "emb_vector"))
    conf = cl.write_config("fail.ini", models[2].ini_text, settings)
    c = cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    s = start_stream(w, {2: models[2]})
    time.sleep(0.3)
    fb_mark = "starting again on the serving segment"
    # leave: the bytes the ballast leaves free once the stage directory is
    # there: 8 MiB fail the SST writer; the files and 16 MiB let the stage be
    # written, and the replacement then finds less than its 64 MiB
    for what, leave, says in (("the SST writer's ENOSPC", 8 << 20, "No space left"),
                              ("too little room left to replace the rows", files + (16 << 20),
                               "nothing replaced")):
        cl.write_config("fail.ini", models[1].ini_text, settings)
        n = c.log().count(fb_mark)
        c.kill(signal.SIGHUP)
        H.wait_until(lambda: staging(pdb), 60, 0.001)
        ballasts = fill(mnt, leave)
        ok = H.wait_until(lambda: c.log().count(fb_mark) > n, 60)
        before = c.log().split(fb_mark)[-2] if ok else ""
        t.ok(ok and says in before, "the reload to version 1 fails (%s) and falls back" % what,
             c.log()[-2000:])
        after = lambda: c.log().split(fb_mark)[-1]  # noqa: E731
        t.ok(H.wait_until(lambda: "serving misses" in after(), 60) and
             "already holds these model files" in after() and
             "ingested into the persistent DB" not in after() and
             "misses are answered from the persistent DB" in after() and
             "kept its rows (the fallback of a failed build)" in after(),
             "%s: the fallback keeps version 2's column family as it was (not ingested again), "
             "answers the segment's misses from it while it starts, and serves it again"
             % what, after()[-2000:])
        for b in ballasts:
            os.unlink(b)
        time.sleep(0.3)
        t.ok(H.model_versions(w.http_port) == ["2"], "%s: version 2 serves" % what)
    stop_stream(t, s, "failed reloads")
    t.eq(staging(pdb), [], "no staging directory is left")


def files_changed(t, cl):
    """(3) The serving version's files changed before a reload that fails:
    written over in place by a version 2 that does not fit the segment, then
    (a second reload, to version 3 elsewhere) removed.  Each reload fails,
    once, and its fallback serves version 1 exactly, keys version 1 lacks
    with their default, without reading the files that are no longer
    version 1's.  Before, the fallback ingested version 2's rows into
    RocksDB under version 1 (30 of 30 keys version 1 lacks answered version
    2's rows), and with the files removed it was refused, and the next
    fallback took the INI file's version 3."""
    m = cl.gen_model("fc", [1000, 500], [8, 4], subdir="fc_v1")
    big = cl.gen_model("fc", [1000, 3000000], [8, 4], subdir="fc_v2", version=2)
    conf = cl.write_config("fc.ini", m.ini_text, [("model.fc", "gpucache", "false")])
    text = open(conf).read()
    c, w = cl.start_coordinator(conf), cl.start_worker(conf)
    kpt = [m.file_keys[0][:50], m.file_keys[1][:50] + [H.gen_key(1, i) for i in range(500, 530)]]
    want = m.expected(kpt)

    def answer():
        hdr, got = H.decode_output(H.infer(w.http_port, "fc", kpt, binary=True))
        return hdr.get("model_version"), got

    t.eq(answer(), ("1", want), "version 1 serves exactly (30 keys with the default)")
    fb_mark = "starting again on the serving segment"
    for how, new in (("written over in place", H.ini_set(text, "model.fc", "version", "2")),
                     ("removed", H.ini_set(text, "model.fc", "version", "3"))):
        if how == "written over in place":
            for f in ("key", "emb_vector"):
                os.rename(os.path.join(big.table_dirs[1], f), os.path.join(m.table_dirs[1], f))
        else:
            big2 = cl.gen_model("fc", [1000, 3000000], [8, 4], subdir="fc_v3", version=3)
            new = new.replace(m.table_dirs[0], big2.table_dirs[0]).replace(
                m.table_dirs[1], big2.table_dirs[1])
            for d in m.table_dirs:
                for f in ("key", "emb_vector"):
                    os.unlink(os.path.join(d, f))
        open(conf, "w").write(new)
        n0, ready = len(c.log()), c.log().count("serving misses")
        c.kill(signal.SIGHUP)
        served = H.wait_until(lambda: c.log().count("serving misses") > ready, 60)
        time.sleep(1.0)
        log = c.log()[n0:]
        t.ok(served and log.count(fb_mark) == 1 and "the fallback does not read the files" in log,
             "files %s: the reload fails once, and its fallback serves without reading them" % how,
             log[-3000:])
        got = answer()
        t.ok(got == ("1", want), "files %s: version 1 still serves exactly" % how,
             "label %s; %s" % (got[0], H.first_mismatch(got[1], want, m, kpt)))
    for p in (w, c):
        p.kill(signal.SIGTERM)
        p.wait(30)


def body(t, cl):
    killed(t, cl)
    failed(t, cl)
    files_changed(t, cl)


if __name__ == "__main__":
    H.run_main("reload_fail", body)
