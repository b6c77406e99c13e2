#!/usr/bin/env python3
"""
int-reload_misses: while a SIGHUP reload builds the next model version,
keys outside shared memory are answered from the version that serves, not
with their table's default (issue 20: loading never disturbs what is
serving).

Model m (versions 1 and 2: hps-gen --model-version changes every vector)
with a persistent DB whose path both versions share, initial_cache_rate
0.1 and cache_missed_embeddings off, so that nine keys in ten are misses
answered by the coordinator.  A worker serves a stream of exactly checked
lookups while the INI switches versions four times (2, 1, 2, 1), each by
SIGHUP: the reloading coordinator drops and re-ingests m's column family
for the new files, and it holds the serving version's one (RocksDB keeps a
dropped column family readable through its handle) to answer the serving
segment's misses meanwhile.
  - every answer is wholly version 1 or wholly version 2: 0 defaults, 0
    mixed answers, 0 failed requests (before: the misses of every request
    during a build got the defaults);
  - requests were answered while the builds ran (the stream counted them
    between each SIGHUP and the publish), and `hps-shm info` showed the
    serving segment "reloading (misses answered)";
  - the coordinator logged the answering for each reload, and the workers
    switched to the new version each time;
  - a fifth reload adds a model n: m's column family is kept as it is (no
    re-ingestion) and answers m's misses while n loads, as above;
  - a sixth and a seventh move the persistent DB to another path (version
    2) and back (version 1): the serving version's misses are read from
    the previous path, opened read-only (before: defaults while the new
    path's column families were ingested);
  - two restarts (SIGTERM, then a new coordinator, initialize_after_startup
    = true, on the other version's files): the new coordinator finds the
    persistent DB's contents token equal to the serving segment's, answers
    its misses while it builds (logged: from right after RocksDB opens,
    before the model files are checked), and publishes; answers are wholly
    one version except while no coordinator ran at all (counted apart);
  - a restart on another persistent DB path does not answer from it
    (logged);
  - a restart with initialize_after_startup = false onto version 2 does not
    keep the version 1 segment (its rows would mix with RocksDB's version 2
    rows in one answer: before, they did, for good) and builds beside it.
"""
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402

ROWS = [150000]
DIMS = [32]
DEFAULTS = [0.25]


class StatePoller(threading.Thread):
    """hps-shm info's coordinator_state, every 20 ms: the states seen."""

    def __init__(self, cl):
        super().__init__(daemon=True)
        self.cl, self.seen, self.stop_ev = cl, set(), threading.Event()

    def run(self):
        while not self.stop_ev.is_set():
            try:
                self.seen.add(self.cl.shm_info()["segment"]["coordinator_state"])
            except Exception:  # noqa: BLE001  (the segment is replaced meanwhile)
                pass
            time.sleep(0.02)


def body(t, cl):
    settings = [("volatile_db", "initial_cache_rate", 0.1),
                ("volatile_db", "cache_missed_embeddings", "false"),
                ("volatile_db", "shared_memory_auto_remove", "false"),
                ("persistent_db", "path", cl.path("rocksdb")),
                ("hps", "heartbeat_interval_ms", 50),
                ("hps", "worker_timeout_ms", 500),
                ("worker", "miss_timeout_ms", 2000)]
    models = {v: cl.gen_model("m", rows=ROWS, dims=DIMS, defaults=DEFAULTS,
                              subdir="m_v%d" % v, version=v) for v in (1, 2)}
    conf = cl.write_config("hps.ini", models[1].ini_text, settings)
    c = cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    building, down = threading.Event(), threading.Event()
    s, poll = H.VersionStream(w.http_port, models, building, down), StatePoller(cl)
    s.start()
    poll.start()
    time.sleep(0.5)
    t.ok(s.requests > 10 and s.wrong == 0,
         "version 1 serves, misses included (%d requests, %d wrong)" % (s.requests, s.wrong))
    n = cl.gen_model("n", rows=[5000], dims=[4], subdir="n_v1")
    with_n = models[1].ini_text + "\n" + n.ini_text[n.ini_text.index("[model.n]"):]
    # four version changes (m's column family re-ingested), then a model
    # added (m's kept as it is, and answered from while n loads), then the
    # persistent DB moved to another path and back (the serving version's
    # misses read from the previous one, opened read-only)
    moved = settings + [("persistent_db", "path", cl.path("rocksdb-moved"))]
    steps = ([(v, models[v].ini_text, settings) for v in (2, 1, 2, 1)] +
             [(1, with_n, settings), (2, models[2].ini_text, moved), (1, with_n, settings)])
    for i, (v, text, sets) in enumerate(steps):
        cl.write_config("hps.ini", text, sets)
        n_ro = c.log().count("opened read-only")
        n_pub = c.log().count("published /dev/shm/hps.")
        n_ans = c.log().count("misses are answered from the persistent DB")
        before = s.during_build
        building.set()
        c.kill(signal.SIGHUP)
        ok = H.wait_until(lambda: c.log().count("published /dev/shm/hps.") > n_pub, 60, 0.005)
        building.clear()
        t.ok(ok, "reload %d (version %d): published" % (i + 1, v), c.log()[-2000:])
        t.ok(c.log().count("misses are answered from the persistent DB") > n_ans,
             "reload %d: the coordinator answered the serving segment's misses while it "
             "built (logged)" % (i + 1), c.log()[-2000:])
        if i >= 5:
            t.ok(c.log().count("opened read-only") > n_ro,
                 "reload %d: the persistent DB moved: its previous one answered, opened "
                 "read-only (logged)" % (i + 1), c.log()[-2000:])
        t.ok(H.wait_until(lambda: H.http(w.http_port, "GET", "/v2/models/m").json()
                          .get("versions") == [str(v)], 10),
             "reload %d: the worker switched to version %d" % (i + 1, v))
        t.diag("reload %d: %d requests answered during the build"
               % (i + 1, s.during_build - before))
        time.sleep(0.3)
    kpt_n = [n.file_keys[0][:20]]
    r = H.infer(w.http_port, "n", kpt_n, binary=True)
    t.ok(r.status == 200 and H.decode_output(r)[1] == n.expected(kpt_n),
         "the added model n serves its vectors exactly")

    # ---- restarts (initialize_after_startup = true) --------------------------
    # The new coordinator finds the persistent DB holding the rows the serving
    # segment was built from (its contents token) and answers that segment's
    # misses while it builds its own: the worker is ready again and answers
    # wholly from the serving version.  Only between the old one's exit and
    # that moment do keys outside shared memory get defaults (no coordinator).
    for i, (v, text) in enumerate([(2, models[2].ini_text), (1, models[1].ini_text)]):
        cl.write_config("hps.ini", text, settings)
        down.set()
        building.set()
        c.kill(signal.SIGTERM)
        t.eq(c.wait(20), 0, "restart %d: the coordinator stops (SIGTERM, exit 0)" % (i + 1))
        c = cl.start_coordinator(conf, wait_ready=False)
        answering = H.wait_until(lambda: "restart: the serving segment's misses are answered"
                                 in c.log() or "published /dev/shm" in c.log(), 60, 0.002)
        answering = answering and "published /dev/shm" not in c.log().split(
            "restart: the serving segment's misses are answered")[0]
        t.ok(answering, "restart %d: the new coordinator answers the serving segment's misses "
             "before it publishes its own (logged)" % (i + 1), c.log()[-2000:])
        t.ok(H.wait_until(lambda: "files valid" in c.log(), 30) and "files valid" not in
             c.log().split("restart: the serving segment's misses are answered")[0],
             "restart %d: from before it checks the model files (right after RocksDB opens)"
             % (i + 1), c.log()[-2000:])
        # the worker sees a live coordinator again at its next maintenance round
        t.ok(H.wait_until(lambda: H.ready_status(w.http_port) == 200, 5, 0.002),
             "restart %d: the worker is ready again" % (i + 1))
        down.clear()
        t.diag("restart %d: ready again %s the new segment was published" % (
            i + 1, "after" if "published /dev/shm" in c.log() else "before"))
        t.ok(H.wait_until(lambda: "serving misses" in c.log(), 60),
             "restart %d (version %d): the new coordinator serves" % (i + 1, v))
        building.clear()
        t.ok(H.wait_until(lambda: H.http(w.http_port, "GET", "/v2/models/m").json()
                          .get("versions") == [str(v)], 10),
             "restart %d: the worker switched to version %d" % (i + 1, v))
        time.sleep(0.3)
    # another persistent DB: its rows may be another version's, so the
    # restart does not answer from it (logged), and serves as before
    other = settings + [("persistent_db", "path", cl.path("rocksdb-other"))]
    cl.write_config("hps.ini", models[1].ini_text, other)
    down.set()
    c.kill(signal.SIGTERM)
    c.wait(20)
    c = cl.start_coordinator(conf)
    H.wait_until(lambda: H.ready_status(w.http_port) == 200, 5, 0.002)
    down.clear()
    t.ok("the persistent DB holds other rows than the serving segment was built from"
         in c.log() and "misses are answered" not in c.log(),
         "a restart on another persistent DB does not answer from it (logged)", c.log()[-2000:])
    time.sleep(0.3)
    # initialize_after_startup = false on version 2's files: the segment's
    # rows are version 1's (and of another persistent DB), so it is not
    # kept (its rows would mix with version 2's from RocksDB in one answer)
    keep = settings + [("volatile_db", "initialize_after_startup", "false")]
    cl.write_config("hps.ini", models[2].ini_text, keep)
    down.set()
    c.kill(signal.SIGTERM)
    c.wait(20)
    c = cl.start_coordinator(conf)
    t.ok("not keeping the rows of" in c.log(),
         "initialize_after_startup = false with other files: the segment is not kept (logged)",
         c.log()[-2000:])
    t.ok(H.wait_until(lambda: H.http(w.http_port, "GET", "/v2/models/m").json()
                      .get("versions") == ["2"] and H.ready_status(w.http_port) == 200, 10),
         "then version 2 serves")
    down.clear()
    time.sleep(0.5)

    s.stop_ev.set()
    poll.stop_ev.set()
    s.join(30)
    poll.join(5)
    t.ok(s.during_build > 0, "requests were answered while the builds ran (%d)" % s.during_build)
    t.eq((s.failed, s.wrong), (0, 0),
         "%d requests, 9 keys in 10 outside shared memory: 0 failed, 0 defaults or mixed "
         "answers (%d with defaults while no coordinator ran, in the restarts' gaps)"
         % (s.requests, s.down_defaults))
    if s.first_problem:
        t.diag("first problem: %s" % s.first_problem)
    t.ok("reloading (misses answered)" in poll.seen,
         "hps-shm info showed the serving segment \"reloading (misses answered)\"",
         sorted(poll.seen))


if __name__ == "__main__":
    H.run_main("reload_misses", body)
