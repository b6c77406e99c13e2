#!/usr/bin/env python3
"""
int-reload: SIGHUP reloads the coordinator's INI while two workers serve
(issue 20: models change while serving).

Model m, version 1, serves two workers, each under a stream of exactly
checked lookups whose every answer must be wholly version 1 or wholly
version 2 (hps-gen --model-version changes every vector), never a mix, and
whose version may only move forward (each worker switches once).
  (1) the INI now names version 2's files and `version = 2`; SIGHUP: the
      coordinator (same pid: it executes itself again) builds the new
      segment beside the serving one and publishes it; both workers report
      version 2 in the model metadata; hps-shm info shows it;
      requests that name version 1 in their URL get its rows or, once
      version 2 serves, a 400 (never version 2's rows); hps-shm ls never
      calls the segment's creator gone while it reloads;
  (2) SIGHUP with a broken INI: logged, nothing changes, still version 2;
  (3) SIGHUP with a version 3 whose emb_vector is corrupt: refused before
      anything is written, still version 2;
  (4) SIGHUP with a second model added: before the SIGHUP the workers,
      which see it in the INI, list it by name only and answer 400 for it
      (it was listed READY); after, its tables load into the new segment
      beside m, which keeps serving; the running workers learn it from the
      INI and serve it;
  (5) SIGHUP with it removed: the new segment holds only m (used bytes
      fall); the workers stay ready (they went not ready for good) and show
      n "unloaded", answering 400 for it; added again: the same segment
      size and used bytes as in (4);
  (6) SIGHUP with n's dimension changed from 4 to 8 while both workers
      serve n under a stream of their own: published (the coordinator logs
      the change); each worker switches to dimension 8 at the segment
      switch (the model configuration says 8), and so does a third whose
      own INI keeps dimension 4 (it takes the coordinator's section from
      the segment); a request caught in the switch is parsed again for
      the new shape and answered in it (no 503 "a reload changed its
      tables", which one in a CI run got before); every
      answer for n is wholly n at 4 or wholly n at 8, never back, and none
      fails (before: refused while workers served n; before that, the
      reload was published and the workers answered 500 for n);
  (7) 400 SIGHUPs 2 ms apart: the coordinator lives and serves after them
      (one that came while a reload's new image started killed it);
  (8) back to version 1: nv_inference_request_success, nv_hps_lookup_keys
      and /stats count only the requests since (per-version statistics);
  (9) SIGTERM 30 ms after a SIGHUP: the coordinator stops (exit 0).
In (1) the reloading coordinator runs on the highest half of its CPUs
([hps] load_cpu_share, logged) and every thread is back on all of them
after publishing.
Over the whole stream: 0 failed requests, 0 mixed or wrong answers, each
answer's model_version that of its rows (it lagged a switch by up to the
worker's 50 ms poll before), 0 default values (every key is in shared
memory, initial_cache_rate 1.0).
"""
import json
import os
import random
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402

ROWS = [60000, 8000]
DIMS = [16, 8]
DEFAULTS = [0.5, -2.0]
SETTINGS = [("volatile_db", "initial_cache_rate", 1.0),
            ("volatile_db", "shared_memory_auto_remove", "false"),
            ("hps", "heartbeat_interval_ms", 50),
            ("hps", "worker_timeout_ms", 500),
            ("worker", "miss_timeout_ms", 200)]


class Stream(threading.Thread):
    """Lookups of random file keys, back to back; each answer must equal the
    expected rows of one version entirely, never older than the last."""

    def __init__(self, port, models, seed, skip=(), name="m", sizes=(24, 8), shape_change=False):
        super().__init__(daemon=True)
        self.port, self.models = port, models  # {version: Model}
        self.name, self.sizes = name, sizes  # the model, keys per table of a request
        # the versions differ in shape: a request caught in the switch is
        # parsed again for the new shape by hps-worker; a 503 "a reload
        # changed its tables" (what it answered before) is counted apart
        self.shape_change, self.caught = shape_change, 0
        first = models[min(models)]
        self.keys = [[k for k in first.file_keys[t] if (t, k) not in set(skip)]
                     for t in range(len(first.file_keys))]  # skip: (table, key) pairs
        self.rng = random.Random(seed)
        self.stop_ev = threading.Event()
        self.requests = self.failed = self.wrong = self.backwards = self.mislabeled = 0
        self.seen = []  # versions in the order first answered
        self.first_problem = ""

    def run(self):
        m1 = self.models[min(self.models)]
        while not self.stop_ev.is_set():
            kpt = [self.rng.sample(ks, n) for ks, n in zip(self.keys, self.sizes)]
            if self.shape_change:
                r = H.infer(self.port, self.name, kpt, binary=self.requests % 2 == 0)
                if r.status == 503 and b"a reload changed its tables" in r.body:
                    self.caught += 1
                    continue
            got, r = H.stream_infer(self, self.name, kpt, binary=self.requests % 2 == 0)
            if got is None:
                continue
            self.requests += 1
            v = next((v for v, m in self.models.items() if got == m.expected(kpt)), None)
            if v is None:
                self.wrong += 1
                self.first_problem = self.first_problem or H.first_mismatch(
                    got, m1.expected(kpt), m1, kpt)
                continue
            if self.seen and v < self.seen[-1]:
                self.backwards += 1
            # the answer's model_version names the version its rows are of
            # (in a switch's first moments it named the one before: the
            # worker polls the version its registry shows)
            label = H.decode_output(r)[0].get("model_version")
            if not self.shape_change and label != str(v):
                self.mislabeled += 1
                self.first_problem = self.first_problem or "version %d's rows labelled %r" % (
                    v, label)
            if not self.seen or v != self.seen[-1]:
                self.seen.append(v)


class PinnedStream(threading.Thread):
    """Requests that name version 1 in their URL (/v2/models/m/versions/1/
    infer), back to back through the switch to version 2: each is answered
    with version 1's rows labelled "1", or refused with Triton's 400
    "version 1 is not found" once version 2 serves; never with version 2's
    rows (a request routed just before the switch and looked up just after
    it got them before)."""

    def __init__(self, port, m1, seed):
        super().__init__(daemon=True)
        self.port, self.m1, self.rng = port, m1, random.Random(seed)
        self.stop_ev = threading.Event()
        self.served = self.refused = self.bad = 0
        self.first_problem = ""

    def run(self):
        while not self.stop_ev.is_set():
            kpt = [self.rng.sample(self.m1.file_keys[0], 8), []]
            try:
                r = H.infer(self.port, "m/versions/1", kpt, binary=True, timeout=10)
            except Exception as e:  # noqa: BLE001
                self.bad += 1
                self.first_problem = self.first_problem or repr(e)
                continue
            if r.status == 400 and b"version 1 is not found" in r.body:
                self.refused += 1
                continue
            ok = r.status == 200 and H.decode_output(r)[1] == self.m1.expected(kpt) and \
                H.decode_output(r)[0].get("model_version") == "1"
            self.served += ok
            self.bad += not ok
            if not ok:
                self.first_problem = self.first_problem or "%d %r" % (r.status, r.body[:300])


class CreatorPoll(threading.Thread):
    """`hps-shm --json ls` over and over: counts the samples of segment name
    whose coordinator is alive but whose creator is called gone, although
    the reloading coordinator (one process, executed again) made it."""

    def __init__(self, cl, name):
        super().__init__(daemon=True)
        self.cl, self.name, self.stop_ev = cl, name, threading.Event()
        self.samples = self.gone = 0

    def run(self):
        while not self.stop_ev.is_set():
            rc, out, _ = self.cl.shm("--json", "ls")
            for seg in json.loads(out)["segments"] if rc == 0 else []:
                if seg["name"] == self.name and seg["coordinator_alive"]:
                    self.samples += 1
                    self.gone += not seg["creator_alive"]


def start_streams(ws, models, seed):
    """A started Stream per worker of ws (seeds seed, seed + 1, ...)."""
    streams = [Stream(w.http_port, models, seed + i) for i, w in enumerate(ws)]
    for s in streams:
        s.start()
    time.sleep(0.5)
    return streams


def reload_to(t, cl, c, ws, ini_text, settings, version):
    """Write the INI, SIGHUP coordinator c and wait until every worker of ws
    reports `version`."""
    cl.write_config("hps.ini", ini_text, settings)
    sighup(t, c, "version %d" % version)
    want = [str(version)]
    t.ok(H.wait_until(lambda: all(H.model_versions(w.http_port) == want for w in ws), 15),
         "every worker reports version %d" % version, [H.model_versions(w.http_port) for w in ws])


def stop_streams(t, streams, seen):
    """Stop and check every stream: it ran, 0 failed requests, 0 mixed or
    wrong answers, never back to an older version, versions `seen` in order."""
    for s in streams:
        s.stop_ev.set()
    for s in streams:
        s.join(30)
    for i, s in enumerate(streams):
        t.ok(s.requests > 30, "worker %d: the stream ran (%d requests)" % (i, s.requests))
        t.eq((s.failed, s.wrong, s.backwards, s.mislabeled), (0, 0, 0, 0),
             "worker %d: 0 failed requests, 0 mixed or wrong answers, never back to an older "
             "version, each answer labelled with its rows' model_version" % i)
        t.eq(s.seen, seen, "worker %d: answered versions %s, in that order" % (i, seen))
        if s.first_problem:
            t.diag("worker %d, first problem: %s" % (i, s.first_problem))


def shm_versions(cl):
    return sorted({(tb["model"], tb.get("model_version")) for tb in cl.shm_info()["tables"]})


def sighup(t, c, what, want_reload=True, timeout=60):
    n_pub = c.log().count("published /dev/shm/hps.")
    n_hup = c.log().count("SIGHUP: reading")
    c.kill(signal.SIGHUP)
    H.wait_until(lambda: c.log().count("SIGHUP: reading") > n_hup, 10, 0.01)
    if want_reload:
        ok = H.wait_until(lambda: c.log().count("published /dev/shm/hps.") > n_pub, timeout)
        t.ok(ok, "%s: the coordinator reloaded and published a new segment" % what,
             c.log()[-3000:])
    else:
        ok = H.wait_until(lambda: "the running configuration stays" in
                          c.log().split("SIGHUP: reading")[-1], 10)
        t.ok(ok, "%s: refused, the running configuration stays" % what, c.log()[-3000:])
    t.ok(c.alive(), "%s: the coordinator is alive (pid %d)" % (what, c.pid))


def index_states(w):
    """The repository index of worker w: {name: (version, state, reason) or None}."""
    r = H.http(w.http_port, "POST", "/v2/repository/index", b"{}")
    return {e["name"]: (e["version"], e["state"], e.get("reason")) if "state" in e else None
            for e in json.loads(r.body)}


def thread_cpus(pid):
    """The Cpus_allowed_list of every thread of process pid."""
    out = set()
    task = "/proc/%d/task" % pid
    for tid in os.listdir(task):
        try:
            with open(os.path.join(task, tid, "status")) as f:
                out.update(x.split(":", 1)[1].strip() for x in f
                           if x.startswith("Cpus_allowed_list:"))
        except OSError:  # a thread that ended meanwhile
            pass
    return out


def check_confined(t, c, before):
    """[hps] load_cpu_share (0.5 by default): the reloading coordinator ran
    on the highest half of its CPUs (logged), and every thread is back on all
    of them once the new segment is published."""
    ncpu = len(os.sched_getaffinity(c.pid))
    log = c.log().split("SIGHUP: reading")[-1]
    if ncpu < 2:
        t.ok("runs on CPUs" not in log, "one CPU: the reload is not confined")
        return
    t.ok(H.wait_until(lambda: "runs on CPUs" in c.log().split("SIGHUP: reading")[-1] and
                      "again" in c.log().split("runs on CPUs")[-1], 5),
         "the reload ran on a share of the CPUs and then on all again (logged)", log[-2000:])
    t.eq(thread_cpus(c.pid), before, "after publishing, every coordinator thread may run on "
         "the CPUs it had before the reload")


def body(t, cl):
    m1 = cl.gen_model("m", rows=ROWS, dims=DIMS, defaults=DEFAULTS, subdir="m_v1", version=1)
    m2 = cl.gen_model("m", rows=ROWS, dims=DIMS, defaults=DEFAULTS, subdir="m_v2", version=2)
    t.ok(m1.expected([m1.file_keys[0][:3], []]) != m2.expected([m1.file_keys[0][:3], []]),
         "hps-gen --model-version 2 changes the vectors")
    conf = cl.write_config("hps.ini", m1.ini_text, SETTINGS)
    c = cl.start_coordinator(conf)
    ws = [cl.start_worker(conf, instance=i) for i in range(2)]
    t.eq([H.model_versions(w.http_port) for w in ws], [["1"], ["1"]],
         "both workers serve version 1")
    t.eq(shm_versions(cl), [("m", 1)], "hps-shm info: model m version 1")
    streams = start_streams(ws, {1: m1, 2: m2}, 7)

    # ---- (1) version 2 -------------------------------------------------------
    cpus_before = thread_cpus(c.pid)
    pinned = [PinnedStream(w.http_port, m1, 3 + i) for i, w in enumerate(ws)]
    for p in pinned:
        p.start()
    poll = CreatorPoll(cl, cl.segment)
    poll.start()
    reload_to(t, cl, c, ws, m2.ini_text, SETTINGS, 2)
    poll.stop_ev.set()
    poll.join(30)
    t.ok(poll.samples > 0 and poll.gone == 0,
         "hps-shm ls through the reload: the creator (the coordinator, executed again) alive "
         "in every sample with a live coordinator (%d of %d called it gone)" % (
             poll.gone, poll.samples))
    for i, p in enumerate(pinned):
        p.stop_ev.set()
        p.join(30)
        t.ok(p.served > 0 and p.bad == 0,
             "worker %d, requests naming version 1: %d answered with its rows, %d refused once "
             "version 2 served, %d other" % (i, p.served, p.refused, p.bad), p.first_problem)
    t.eq(shm_versions(cl), [("m", 2)], "hps-shm info: model m version 2")
    labels = [sorted({lab.get("version") for name in ("nv_inference_count", "nv_hps_lookup_keys")
                      for lab, _ in H.metric_samples(w.metrics_port, name)
                      if lab.get("model") == "m"}) for w in ws]
    t.eq(labels, [["2"], ["2"]], "metrics: nv_inference_count and nv_hps_lookup_keys of m "
         "carry version=\"2\"")
    check_confined(t, c, cpus_before)
    time.sleep(0.5)

    # ---- (2) a broken INI ----------------------------------------------------
    with open(conf, "a") as f:
        f.write("\n[hps]\nheartbeat_interval_ms = 0\n")
    sighup(t, c, "broken INI", want_reload=False)
    t.eq([H.model_versions(w.http_port) for w in ws], [["2"], ["2"]], "still version 2")

    # ---- (3) a corrupt version 3 ---------------------------------------------
    m3 = cl.gen_model("m", rows=ROWS, dims=DIMS, defaults=DEFAULTS, subdir="m_v3", version=3)
    emb = os.path.join(m3.table_dirs[0], "emb_vector")
    with open(emb, "rb") as f:
        good = f.read()
    with open(emb, "wb") as f:
        f.write(good[:-12])  # not a whole number of vectors
    cl.write_config("hps.ini", m3.ini_text, SETTINGS)
    sighup(t, c, "corrupt version 3", want_reload=False)
    time.sleep(0.3)
    t.eq([H.model_versions(w.http_port) for w in ws], [["2"], ["2"]], "still version 2")
    t.eq(shm_versions(cl), [("m", 2)], "hps-shm info: still model m version 2")

    # ---- (4) a second model added ----------------------------------------------
    n = cl.gen_model("n", rows=[5000], dims=[4], subdir="n_v1")
    text = m2.ini_text + "\n" + n.ini_text[n.ini_text.index("[model.n]"):]
    cl.write_config("hps.ini", text, SETTINGS)
    idx = [index_states(w) for w in ws]
    t.eq(idx, [{"m": ("2", "READY", None), "n": None}] * 2,
         "n in the INI before the SIGHUP: listed by name only, m READY")
    t.eq([H.infer(w.http_port, "n", [n.file_keys[0][:3]]).status for w in ws], [400, 400],
         "n in the INI before the SIGHUP: 400 (unknown model), not answered from nothing")
    sighup(t, c, "model n added")
    t.eq(shm_versions(cl), [("m", 2), ("n", 1)], "hps-shm info: models m (2) and n (1)")
    seg = cl.shm_info()["segment"]
    kpt_n = [n.file_keys[0][:50]]

    def serves_n(w):
        r = H.infer(w.http_port, "n", kpt_n, binary=True)
        return r.status == 200 and H.decode_output(r)[1] == n.expected(kpt_n)
    t.ok(H.wait_until(lambda: all(serves_n(w) for w in ws), 5),
         "the running workers learned n from the INI and serve its vectors exactly",
         [(w.http_port, H.infer(w.http_port, "n", kpt_n).body[:200]) for w in ws])
    t.ok(all('nv_hps_lookup_keys{model="n"' in H.http(w.metrics_port, "GET", "/metrics")
             .body.decode() for w in ws), "n has its metric samples on both workers")
    time.sleep(0.3)

    # ---- (5) model n removed, then added again: its memory returns -------------
    cl.write_config("hps.ini", m2.ini_text, SETTINGS)
    sighup(t, c, "model n removed")
    t.eq(shm_versions(cl), [("m", 2)], "hps-shm info: model m (2) only")
    # the workers switch to the new segment within a maintenance round
    want = [{"m": ("2", "READY", None), "n": ("1", "UNAVAILABLE", "unloaded")}] * 2
    t.ok(H.wait_until(lambda: [index_states(w) for w in ws] == want, 5, 0.02),
         "n removed: the index shows it unloaded", [index_states(w) for w in ws])
    t.ok(all(H.http(w.http_port, "GET", "/v2/health/ready").status == 200 for w in ws),
         "n removed: both workers stay ready")
    t.eq([H.infer(w.http_port, "n", kpt_n).status for w in ws], [400, 400],
         "n removed: 400 (unknown model)")
    seg_m = cl.shm_info()["segment"]
    t.ok(seg_m["used_bytes"] < seg["used_bytes"],
         "the segment's used bytes fell without n: %d -> %d"
         % (seg["used_bytes"], seg_m["used_bytes"]))
    cl.write_config("hps.ini", text, SETTINGS)
    sighup(t, c, "model n added again")
    seg_n = cl.shm_info()["segment"]
    t.eq((seg_n["size_bytes"], seg_n["used_bytes"]), (seg["size_bytes"], seg["used_bytes"]),
         "with n again: the same segment size and used bytes as before (the segment does not "
         "grow)")
    time.sleep(0.3)

    # ---- (6) n's dimension changed while both workers serve n -----------------
    # Every answer for n is wholly dimension 4 ("version" 1 of the stream)
    # or wholly dimension 8 (2), never back; none fails.  (Before: refused
    # while workers served n; before that, published, and every running
    # worker answered 500 for n until restarted.)
    n8 = cl.gen_model("n", rows=[5000], dims=[8], subdir="n_dim8")
    t.ok(n8.expected([kpt_n[0][:3]]) != n.expected([kpt_n[0][:3]]), "n at dimension 8 differs")
    # a third worker whose own INI keeps n at dimension 4: it follows the
    # coordinator (the INI text in the segment), not its file
    w_old = cl.start_worker(cl.write_config("old.ini", text, SETTINGS), instance=2)
    n_streams = [Stream(w.http_port, {1: n, 2: n8}, 31 + i, name="n", sizes=(16,),
                        shape_change=True) for i, w in enumerate(ws)]
    for s in n_streams:
        s.start()
    time.sleep(0.5)
    cl.write_config("hps.ini", m2.ini_text + "\n" + n8.ini_text[n8.ini_text.index("[model.n]"):],
                    SETTINGS)
    sighup(t, c, "n's dimension changed from 4 to 8")
    t.ok("model n changes shape (table " in c.log(),
         "the coordinator logs the change of n's shape", c.log()[-1500:])

    def n_dims(w):
        r = H.http(w.http_port, "GET", "/v2/models/n/config")
        if r.status != 200:
            return None
        return json.loads(r.body)["parameters"]["embedding_vecsize_per_table"]["string_value"]
    # the third worker too: it switches on its own poll, maybe a moment later
    t.ok(H.wait_until(lambda: [n_dims(w) for w in ws + [w_old]] == ["8", "8", "8"], 10),
         "every worker's model configuration of n says dimension 8 (the third's too)",
         [n_dims(w) for w in ws + [w_old]])
    r = H.infer(w_old.http_port, "n", kpt_n, binary=True)
    t.ok(r.status == 200 and H.decode_output(r)[1] == n8.expected(kpt_n),
         "a worker whose own INI keeps n at dimension 4 serves n at 8 exactly (the "
         "coordinator's INI text in the segment)", r.body[:300])
    w_old.kill()
    time.sleep(0.5)
    stop_streams(t, n_streams, [1, 2])  # dimension 4, then 8, once
    t.eq([s.caught for s in n_streams], [0, 0],
         "no request caught in the switch answered 503 (hps-worker parses it again for the "
         "new shape; a CI run before that saw 1)")
    t.eq([index_states(w)["n"] for w in ws], [("1", "READY", None)] * 2,
         "the repository index lists n once, READY")
    cl.write_config("hps.ini", m2.ini_text + "\n" + n.ini_text[n.ini_text.index("[model.n]"):],
                    SETTINGS)

    stop_streams(t, streams, [1, 2])  # one switch
    t.eq(c.log().count("reloading: stopping"), 5, "five reloads, two refused")

    # ---- (7) SIGHUPs back to back ----------------------------------------------
    # One that came while a reload's new image started killed the coordinator
    # (execv resets the handler): 2 of 20 at about 38 ms after the stop.
    for _ in range(400):
        c.kill(signal.SIGHUP)
        time.sleep(0.002)
    time.sleep(1.0)
    t.ok(c.alive(), "400 SIGHUPs 2 ms apart: the coordinator lives (%d reloads)"
         % (c.log().count("reloading: stopping") - 5), c.log()[-1500:])
    kpt = [m2.file_keys[0][:20], []]
    def serves_m2(w):
        r = H.infer(w.http_port, "m", kpt, binary=True)
        return r.status == 200 and H.decode_output(r)[1] == m2.expected(kpt)
    t.ok(H.wait_until(lambda: all(serves_m2(w) for w in ws), 30),
         "... and both workers serve m's version 2 exactly after it")

    # ---- (8) back to version 1: its statistics start at 0 ------------------------
    # (Triton's per-version counters; version 2's totals were carried over)
    H.wait_until(lambda: c.log().rstrip().endswith("serving misses"), 10)
    reload_to(t, cl, c, ws, m1.ini_text + "\n" + n.ini_text[n.ini_text.index("[model.n]"):],
              SETTINGS, 1)
    w = ws[1]
    for _ in range(3):
        H.infer(w.http_port, "m", kpt, binary=True)

    def m_counts(name):
        return [(lab.get("version"), v) for lab, v in H.metric_samples(w.metrics_port, name)
                if lab.get("model") == "m"]
    got = (m_counts("nv_inference_request_success"), m_counts("nv_hps_lookup_keys"))
    t.eq(got, ([("1", 3)], [("1", 3 * len(kpt[0]))]),
         "after the switch to version 1: 3 requests and their %d keys counted, only under "
         "version=\"1\"" % (3 * len(kpt[0])))
    st = H.http(w.http_port, "GET", "/v2/models/m/stats").json()["model_stats"][0]
    t.eq((st["version"], st["execution_count"], st["inference_stats"]["success"]["count"]),
         ("1", 3, 3), "/v2/models/m/stats: version 1, 3 executions, 3 successes")

    # ---- (9) SIGTERM right after a SIGHUP: it stops ------------------------------
    # (it used to go on starting the new image, which never saw the SIGTERM)
    c.kill(signal.SIGHUP)
    time.sleep(0.03)
    c.kill(signal.SIGTERM)
    t.eq(c.wait(20), 0, "SIGTERM 30 ms after a SIGHUP: the coordinator stops, exit 0")


if __name__ == "__main__":
    H.run_main("reload", body)
