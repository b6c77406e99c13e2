#!/usr/bin/env python3
"""
int-control_config: which configuration a reload, a model load or unload and
a failed build's fallback build from (an auditor's findings; the coordinator
hands the configuration text it serves over to its next image instead of
reading the INI file again).  Real coordinator and worker processes; every
scenario has its own segment and persistent DB; vectors are checked exactly
(hps-gen --model-version makes every vector a function of key and version).

  (1) explicit mode, m version 1 and n loaded; the INI's [model.m] is edited
      to version 2's files and `version = 2`, no SIGHUP: an unload of n
      answers 200 and m still answers version 1 (metadata "1", vectors
      exact); after a SIGHUP on the INI of version 1 (m v1 whatever came
      before) and the same edit again, a load of n: 200, m still version 1
      exactly, n exact (Triton: a load or unload touches that model only);
      a load of m then: 200, and at once metadata and index say version 2;
  (2) explicit mode, m and n loaded; [model.m] in the INI names a directory
      that does not exist (an operator mid-edit): an unload of n and a load
      of o both answer 200, m is exact, o is exact, the coordinator is alive
      with the same pid and the worker ready;
  (3) explicit mode, m and n loaded; m's model files are deleted (its rows
      are in shared memory and RocksDB): a load of o and an unload of n
      answer 400 whose error names model m and says it cannot be built
      again; the coordinator is alive (same pid), the worker ready, m and n
      exact, o never loaded;
  (4) mode none, initial_cache_rate 0.5 (half of the keys in RocksDB only):
      m version 1 serves; the INI names m version 2 and a model 'big' that
      does not fit shared_memory_size; SIGHUP: the build fails and the
      coordinator starts again on the serving segment (it used to die): alive
      with the same pid, the worker steadily ready again within 15 s,
      metadata "1"; requests mixing volatile-DB keys and RocksDB-only keys
      (fresh keys each): RocksDB-only keys answered again within 15 s,
      meanwhile every row version 1 or a default, never version 2, then 5
      requests wholly version 1;
  (5) explicit mode, startup_models = ^m$; the INI also has 'bad' (never
      loaded) whose emb_vector is corrupt; m edited to version 2; SIGHUP: m
      reloads to version 2 exactly (a model not loaded does not block it);
  (6) explicit mode, a load of 'big' whose build fails (it does not fit):
      a SIGHUP sent while it builds (the INI edited to m version 2) reloads
      after the fallback, and a SIGTERM sent while it builds stops the
      coordinator (exit 0); both used to be lost with the failed image;
  (7) while a worker serves, reloads it could not follow are refused with
      the reason, and serving goes on exactly: in explicit mode a SIGHUP
      whose INI lost a loaded model's section, one to another key width
      (supportlonglong), one to another shared_memory_name, and in mode
      none one to an INI without models; a load of m with another
      dimension, then with a third table, is followed (m exact at
      dimension 16, with three tables, then as it was); with a worker of
      an earlier build attached (shm-attach: a row that records no
      HPS_PROC_CAP_FOLLOWS_SHAPES), a load that changes m's dimension is
      refused naming its pid (that worker would fail every request of m
      while reporting ready), and accepted once it has gone.
"""
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402
import test_reload as R  # noqa: E402  (versions, sighup, SETTINGS)
from test_model_control import post, index, section, check_exact  # noqa: E402

ROWS = [4000, 1500]
DIMS = [8, 4]
EXPLICIT = R.SETTINGS + [("hps", "model_control_mode", "explicit"),
                         ("volatile_db", "shared_memory_size", "32MiB")]


def settings(cl, tag, base, startup=None):
    """base plus this scenario's persistent DB (and startup_models)."""
    s = base + [("persistent_db", "path", cl.path(tag, "rocksdb"))]
    return s + [("hps", "startup_models", startup)] if startup else s


def with_section(text, old, new):
    """text with model old's [model.*] section replaced by model new's."""
    return text.replace(section(old), section(new))


def try_post(port, path, timeout=30):
    """post(); a connection that fails (a dead coordinator) as status 0."""
    try:
        return post(port, path, timeout=timeout)
    except Exception as e:  # noqa: BLE001
        return H.Response(0, {}, ("%s: %s" % (type(e).__name__, e)).encode(), 0)


def error_of(r):
    return r.json().get("error", "") if r.is_json_error() else ""


def steadily_ready(ws, timeout=15, hold=0.5):
    """Every worker of ws ready for `hold` seconds in a row, within timeout
    (a worker may report the coordinator's state of a round before)."""
    deadline, since = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        if all(H.ready_status(w.http_port) == 200 for w in ws):
            since = since or time.monotonic()
            if time.monotonic() - since >= hold:
                return True
        else:
            since = None
        time.sleep(0.02)
    return False


def check_alive(t, c, pid, ws, what):
    t.eq((c.alive(), c.pid), (True, pid), "%s: the coordinator is alive, same pid" % what)
    t.ok(steadily_ready(ws), "%s: the worker is ready" % what,
         [H.ready_status(w.http_port) for w in ws])


def after_hup(c, n_hup, done):
    """Wait (30 s at most) until the coordinator's log after its SIGHUP number
    n_hup + 1 satisfies done(text), or it died; returns that text."""
    def tail():
        log = c.log()
        return log.split("SIGHUP: reading")[-1] if log.count("SIGHUP: reading") > n_hup else ""
    H.wait_until(lambda: not c.alive() or done(tail()), 30)
    return tail()


def gen(cl, tag, name, rows, dims, seg, version=1, sub=None):
    return cl.gen_model(name, rows=rows, dims=dims, subdir=os.path.join(tag, sub or name),
                        segment=seg, version=version)


# ---- (1) an edit of another model's section, no SIGHUP ------------------------------

def scenario_edit(t, cl):
    seg = cl.new_segment_name("s1")
    m1 = gen(cl, "s1", "m", ROWS, DIMS, seg, 1, "m_v1")
    m2 = gen(cl, "s1", "m", ROWS, DIMS, seg, 2, "m_v2")
    n = gen(cl, "s1", "n", [1500], [4], seg)
    s = settings(cl, "s1", EXPLICIT, "^(m|n)$")
    text1 = m1.ini_text + "\n" + section(n)
    text2 = with_section(text1, m1, m2)
    conf = cl.write_config("hps.ini", text1, s)
    c = cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    port = w.http_port
    t.eq(H.model_versions(port), ["1"], "(1) m serves version 1")
    check_exact(t, port, m1, "(1) at the start")

    cl.write_config("hps.ini", text2, s)  # [model.m] now version 2, no SIGHUP
    r = try_post(port, "/v2/repository/models/n/unload")
    t.eq(r.status, 200, "(1) INI's m edited to version 2, unload n: 200")
    t.eq(H.model_versions(port), ["1"], "(1) after the unload of n, m's metadata still says version 1")
    t.eq(index(port).get("m", {}).get("version"), "1", "(1) index: m version 1")
    check_exact(t, port, m1, "(1) after the unload of n, version 1")

    cl.write_config("hps.ini", text1, s)
    R.sighup(t, c, "(1) SIGHUP on the INI of version 1", timeout=30)
    t.ok(H.wait_until(lambda: H.model_versions(port) == ["1"], 10), "(1) m version 1 again")
    cl.write_config("hps.ini", text2, s)
    r = try_post(port, "/v2/repository/models/n/load")
    t.eq(r.status, 200, "(1) INI's m edited to version 2 again, load n: 200")
    t.eq(H.model_versions(port), ["1"], "(1) after the load of n, m's metadata still says version 1")
    check_exact(t, port, m1, "(1) after the load of n, version 1")
    check_exact(t, port, n, "(1) after the load of n")
    # A load of m itself reloads it to the INI's version 2; the worker that
    # took the call says so as soon as it answers (metadata and index were
    # a poll behind: 12 of 12 loads answered version 1 at once).
    r = try_post(port, "/v2/repository/models/m/load")
    t.eq(r.status, 200, "(1) load m with the INI at version 2: 200")
    t.eq(H.model_versions(port), ["2"], "(1) at once after the load of m: metadata version 2")
    t.eq(index(port).get("m", {}).get("version"), "2", "(1) at once: index m version 2")
    check_exact(t, port, m2, "(1) after the load of m, version 2")


# ---- (2) another model's section broken mid-edit ------------------------------------

def serving_m_n(cl, tag):
    """Explicit mode, models m and n loaded and o in the INI (not loaded): the
    three models, the settings, the INI text, the coordinator and a worker."""
    seg = cl.new_segment_name(tag)
    m = gen(cl, tag, "m", ROWS, DIMS, seg)
    n = gen(cl, tag, "n", [1500], [4], seg)
    o = gen(cl, tag, "o", [1000], [4], seg)
    s = settings(cl, tag, EXPLICIT, "^(m|n)$")
    text = m.ini_text + "\n" + section(n) + "\n" + section(o)
    conf = cl.write_config("hps.ini", text, s)
    return m, n, o, s, text, cl.start_coordinator(conf), cl.start_worker(conf)


def scenario_broken(t, cl):
    m, n, o, s, text, c, w = serving_m_n(cl, "s2")
    port, pid = w.http_port, c.pid
    check_exact(t, port, m, "(2) at the start")

    cl.write_config("hps.ini", text.replace(m.table_dirs[0], cl.path("s2", "nonexistent")), s)
    r = try_post(port, "/v2/repository/models/n/unload")
    t.ok(r.status == 200, "(2) [model.m] names a missing directory, unload n: 200",
         "%d %r" % (r.status, r.body[:400]))
    r = try_post(port, "/v2/repository/models/o/load")
    t.ok(r.status == 200, "(2) then load o: 200", "%d %r" % (r.status, r.body[:400]))
    check_alive(t, c, pid, [w], "(2) after the unload and the load")
    check_exact(t, port, m, "(2) after the unload and the load")
    check_exact(t, port, o, "(2) after the load of o")


# ---- (3) a loaded model's files deleted ----------------------------------------------

def scenario_deleted(t, cl):
    m, n, o, s, text, c, w = serving_m_n(cl, "s3")
    port, pid = w.http_port, c.pid
    check_exact(t, port, m, "(3) at the start")

    shutil.rmtree(m.dir)
    for op, x in (("load", "o"), ("unload", "n")):
        r = try_post(port, "/v2/repository/models/%s/%s" % (x, op))
        err = error_of(r)
        t.ok(r.status == 400 and "model 'm'" in err and "cannot be built again" in err,
             "(3) m's files deleted, %s %s: 400 naming m, which cannot be built again" % (op, x),
             "%d %r" % (r.status, r.body[:400]))
        check_alive(t, c, pid, [w], "(3) after the %s of %s" % (op, x))
    check_exact(t, port, m, "(3) m's files deleted")
    check_exact(t, port, n, "(3) m's files deleted")
    o_idx = index(port).get("o", {})
    t.ok(o_idx.get("state") == "UNAVAILABLE" and "cannot be built again" in o_idx.get("reason", ""),
         "(3) index: o never loaded, UNAVAILABLE with its failed load's reason", o_idx)


def two_versions_and_big(cl, tag, big_rows):
    """Model m in versions 1 and 2, and 'big' (big_rows rows of dim 128),
    for scenario tag's segment."""
    seg = cl.new_segment_name(tag)
    return (gen(cl, tag, "m", ROWS, DIMS, seg, 1, "m_v1"),
            gen(cl, tag, "m", ROWS, DIMS, seg, 2, "m_v2"),
            gen(cl, tag, "big", [big_rows], [128], seg))


# ---- (4) mode none: a SIGHUP whose build fails ---------------------------------------

def scenario_fallback(t, cl):
    m1, m2, big = two_versions_and_big(cl, "s4", 40000)  # 10 MB of rows at 0.5: over 8 MiB
    s = settings(cl, "s4", R.SETTINGS + [("volatile_db", "initial_cache_rate", 0.5),
                                         ("volatile_db", "shared_memory_size", "8MiB"),
                                         ("worker", "miss_timeout_ms", 1000)])
    conf = cl.write_config("hps.ini", m1.ini_text, s)
    c = cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    port, pid = w.http_port, c.pid
    vdb = [m1.vdb_keys(tb, 0.5) for tb in range(2)]
    pdb = [m1.pdb_only_keys(tb, 0.5) for tb in range(2)]

    def mixed(i):  # 4 volatile-DB and 4 RocksDB-only keys of each table, fresh each time
        j = 4 * i % 700
        return [vdb[tb][j:j + 4] + pdb[tb][j:j + 4] for tb in range(2)]

    def lookup(kpt):
        r = H.infer(port, "m", kpt, binary=True)
        return H.decode_output(r)[1] if r.status == 200 else (r.status, r.body[:300])

    def rows_of(kpt, got):
        """Each key's row: 1 or 2 (that version's vector), 'default' or '?'."""
        out, at = [], 0
        for tb, ks in enumerate(kpt):
            d = m1.dims[tb]
            for k in ks:
                row, at = got[at:at + d], at + d
                out.append(next((v for v in (1, 2) if row == H.gen_vector(tb, k, d, v)),
                                "default" if row == [H.f32(m1.defaults[tb])] * d else "?"))
        return out

    got = lookup(mixed(0))
    t.ok(got == m1.expected(mixed(0)), "(4) before: volatile-DB and RocksDB-only keys, version 1",
         got if isinstance(got, tuple) else H.first_mismatch(got, m1.expected(mixed(0))))

    cl.write_config("hps.ini", m2.ini_text + "\n" + section(big), s)
    n_hup = c.log().count("SIGHUP: reading")
    c.kill(signal.SIGHUP)
    log = after_hup(c, n_hup, lambda x: "reload failed" in x and
                    "serving misses" in x.split("reload failed")[-1])
    t.ok("reload failed" in log, "(4) INI: m version 2 and big, SIGHUP: the build failed "
         "(logged)", log[-2000:] or c.log()[-2000:])
    check_alive(t, c, pid, [w], "(4) after the failed build")
    t.ok(H.wait_until(lambda: H.model_versions(port) == ["1"], 5), "(4) m's metadata says version 1",
         H.model_versions(port))
    # Until the worker's misses reach the coordinator again a RocksDB-only
    # key may get its default; never a version 2 row.
    seen, i = [], 1

    def answers_v1():
        nonlocal i
        kpt, i = mixed(i), i + 1
        got = lookup(kpt)
        seen.append(got if isinstance(got, tuple) else tuple(sorted(set(rows_of(kpt, got)),
                                                                     key=str)))
        return got == m1.expected(kpt)

    t.ok(H.wait_until(answers_v1, 15, 0.1), "(4) RocksDB-only keys answered again within 15 s",
         seen[-3:])
    t.ok(all(x in ((1,), (1, "default")) for x in seen),
         "(4) meanwhile every row version 1 or a default, never version 2 (%d requests)"
         % len(seen), seen)
    bad = []
    for _ in range(5):
        kpt, i = mixed(i), i + 1
        got = lookup(kpt)
        if got != m1.expected(kpt):
            bad.append(got if isinstance(got, tuple) else rows_of(kpt, got))
    t.ok(not bad, "(4) 5 more requests mixing volatile-DB and RocksDB-only keys: wholly "
         "version 1", bad[:3])


# ---- (5) explicit mode: SIGHUP with a broken model not loaded --------------------------

def scenario_unloaded_bad(t, cl):
    seg = cl.new_segment_name("s5")
    m1 = gen(cl, "s5", "m", ROWS, DIMS, seg, 1, "m_v1")
    m2 = gen(cl, "s5", "m", ROWS, DIMS, seg, 2, "m_v2")
    bad = gen(cl, "s5", "bad", [1000], [8], seg)
    emb = os.path.join(bad.table_dirs[0], "emb_vector")
    with open(emb, "rb") as f:
        good = f.read()
    with open(emb, "wb") as f:
        f.write(good[:-12])  # not a whole number of vectors
    s = settings(cl, "s5", EXPLICIT, "^m$")
    text1 = m1.ini_text + "\n" + section(bad)
    conf = cl.write_config("hps.ini", text1, s)
    c = cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    port = w.http_port
    t.eq(H.model_versions(port), ["1"], "(5) m serves version 1, bad is not loaded")

    cl.write_config("hps.ini", with_section(text1, m1, m2), s)
    n_hup = c.log().count("SIGHUP: reading")
    c.kill(signal.SIGHUP)
    log = after_hup(c, n_hup, lambda x: "published /dev/shm/hps." in x or
                    "configuration stays" in x)
    t.ok("published /dev/shm/hps." in log, "(5) m edited to version 2, SIGHUP: the coordinator "
         "reloaded and published (the corrupt, unloaded bad does not block it)", log[-2000:])
    t.ok(H.wait_until(lambda: H.model_versions(port) == ["2"], 10), "(5) m's metadata says version 2",
         H.model_versions(port))
    check_exact(t, port, m2, "(5) version 2")
    t.eq(index(port).get("bad"), {"name": "bad"}, "(5) index: bad still not loaded")


# ---- (6) signals during a build that fails ----------------------------------------------

def scenario_signals(t, cl):
    m1, m2, big = two_versions_and_big(cl, "s6", 60000)  # 30 MB: over 32 MiB with m
    s = settings(cl, "s6", EXPLICIT, "^m$")
    text1 = m1.ini_text + "\n" + section(big)
    conf = cl.write_config("hps.ini", text1, s)
    c = cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    port = w.http_port
    for sig in (signal.SIGHUP, signal.SIGTERM):
        res = {}
        n_build = c.log().count("loading 2 of the 2 models")
        th = threading.Thread(target=lambda: res.setdefault(
            "r", try_post(port, "/v2/repository/models/big/load", timeout=60)))
        th.start()
        # the new image runs and builds; it fails (big does not fit)
        H.wait_until(lambda: c.log().count("loading 2 of the 2 models") > n_build, 20, 0.002)
        if sig == signal.SIGHUP:
            cl.write_config("hps.ini", with_section(text1, m1, m2), s)
        c.kill(sig)
        th.join(60)
        t.eq(res.get("r") and res["r"].status, 400, "(6) %s during the failing load of big: "
             "the load answers 400" % sig.name)
        if sig == signal.SIGHUP:
            t.ok(H.wait_until(lambda: H.model_versions(port) == ["2"], 20),
                 "(6) SIGHUP during the failing build (INI edited to m version 2): the fallback "
                 "reloads once more, m serves version 2 (the SIGHUP was lost with the failed "
                 "image)", H.model_versions(port))
            check_exact(t, port, m2, "(6) after the SIGHUP")
        else:
            rc = c.wait(20)
            t.eq(rc, 0, "(6) SIGTERM during the failing build: the coordinator stops, exit 0 "
                 "(the fallback went on serving)")


# ---- (7) what a reload may not change while workers serve -----------------------------

def refused_hup(t, c, what, says):
    """SIGHUP c: refused, the running configuration stays, the reason logged."""
    n_hup = c.log().count("SIGHUP: reading")
    c.kill(signal.SIGHUP)
    log = after_hup(c, n_hup, lambda x: "configuration stays" in x or "published" in x)
    t.ok("configuration stays" in log and says in log and "published" not in log,
         "(7) %s: SIGHUP refused, the reason logged (%r)" % (what, says), log[-1500:])


@contextlib.contextmanager
def old_worker(seg):
    """A worker of an earlier build attached to segment seg for the with
    block (shm-attach: a process-table row that records no capabilities);
    yields the process and the first line it printed ("attached <pid>")."""
    p = subprocess.Popen([os.environ["HPS_SHM_ATTACH"], seg, "worker", "0"],
                         stdout=subprocess.PIPE, text=True)
    try:
        yield p, p.stdout.readline()
    finally:
        p.terminate()
        p.wait(10)


def scenario_unfollowable(t, cl):
    m, n, o, s, text, c, w = serving_m_n(cl, "s7")
    port, pid = w.http_port, c.pid
    # explicit mode: a loaded model's section gone from the INI
    cl.write_config("hps.ini", text.replace(section(n), ""), s)
    refused_hup(t, c, "explicit mode, loaded n's section removed",
                "model n is loaded and its [model.n] section is gone")
    check_exact(t, port, n, "(7) n still loaded")
    # a load of m with another dimension: the worker follows (it takes the
    # section the coordinator recorded in the segment), and back
    m16 = gen(cl, "s7", "m", ROWS, [16, 4], cl.segment, sub="m_dim16")
    cl.write_config("hps.ini", with_section(text, m, m16), s)
    r = try_post(port, "/v2/repository/models/m/load")
    t.ok(r.status == 200, "(7) load of m with its first table's dimension 8 -> 16 while a worker "
         "serves it: 200", r.body[:500])
    check_exact(t, port, m16, "(7) after the load, m at dimension 16")
    # a third table (the first two keep their names and dimensions)
    m3 = gen(cl, "s7", "m", ROWS + [700], DIMS + [2], cl.segment, sub="m_3tables")
    cl.write_config("hps.ini", with_section(text, m, m3), s)
    r = try_post(port, "/v2/repository/models/m/load")
    t.ok(r.status == 200, "(7) load of m with a third table: 200", r.body[:500])
    check_exact(t, port, m3, "(7) after the load, m with three tables")
    cl.write_config("hps.ini", text, s)
    r = try_post(port, "/v2/repository/models/m/load")
    t.ok(r.status == 200, "(7) load of m back at dimension 8: 200", r.body[:500])
    check_exact(t, port, m, "(7) after the load, m at dimension 8 again")
    # a worker of an earlier build cannot follow a shape: refused while it is attached
    seg = re.search(r"^shared_memory_name\s*=\s*(\S+)", text, re.M).group(1)
    with old_worker(seg) as (old, line):
        t.ok(line.startswith("attached"), "(7) a worker of an earlier build attached", line)
        procs = {p["pid"]: p for p in cl.shm_info(seg)["processes"]}
        t.ok(procs.get(old.pid, {}).get("follows_shapes") is False and
             procs.get(w.pid, {}).get("follows_shapes") is True,
             "(7) hps-shm info: follows_shapes false for it, true for the hps-worker",
             [(p["pid"], p["role"], p.get("follows_shapes")) for p in procs.values()])
        cl.write_config("hps.ini", with_section(text, m, m16), s)
        r = try_post(port, "/v2/repository/models/m/load")
        t.ok(r.status != 200 and "of an earlier build cannot follow" in error_of(r) and
             "pid %d" % old.pid in error_of(r),
             "(7) with it attached, a load of m at dimension 16 is refused naming its pid",
             (r.status, r.body[:500]))
        check_exact(t, port, m, "(7) after the refused load, m at dimension 8")
    r = try_post(port, "/v2/repository/models/m/load")
    t.ok(r.status == 200, "(7) once it has gone, the load of m at dimension 16: 200", r.body[:500])
    check_exact(t, port, m16, "(7) after the load, m at dimension 16")
    cl.write_config("hps.ini", text, s)
    r = try_post(port, "/v2/repository/models/m/load")
    t.ok(r.status == 200, "(7) and back at dimension 8: 200", r.body[:500])
    # the key width: refused while a worker serves (its callers' keys)
    cl.write_config("hps.ini", text, s + [("hps", "supportlonglong", "false")])
    refused_hup(t, c, "supportlonglong false", "8-byte keys are served, the INI has 4-byte keys")
    # a load reads the model's section only: the INI's key width cannot come
    # with it (it was ignored: 200, the keys read at the running width)
    r = try_post(port, "/v2/repository/models/m/load")
    t.ok(r.status == 400 and "supportlonglong = false" in error_of(r),
         "(7) a load with the INI's supportlonglong changed: 400 naming it", (r.status, r.body[:500]))
    cl.write_config("hps.ini", text, s)
    check_alive(t, c, pid, [w], "(7) after the loads")
    check_exact(t, port, m, "(7) after the refused SIGHUP, m at dimension 8")
    # another shared_memory_name: the worker could not follow
    cl.write_config("hps.ini", text, s + [("volatile_db", "shared_memory_name",
                                           cl.new_segment_name("s7-other"))])
    refused_hup(t, c, "another shared_memory_name", "cannot follow")
    check_alive(t, c, pid, [w], "(7) after the refused SIGHUPs")
    for x in (m, n):
        check_exact(t, port, x, "(7) after the refused SIGHUPs")
    # a restart cannot be refused: with a worker of an earlier build attached,
    # one that changes m's shape is logged, naming its pid
    with old_worker(seg) as (old, _):
        c.kill(signal.SIGTERM)
        c.wait(30)
        cl.write_config("hps.ini", with_section(text, m, m16), s)
        c = cl.start_coordinator(cl.path("hps.ini"))
        warned = [ln for ln in c.log().splitlines()
                  if " WARN " in ln and "restart: model m changes shape" in ln]
        t.ok(len(warned) == 1 and "pid %d" % old.pid in warned[0],
             "(7) a restart that changes m's shape with it attached: warned, naming its pid",
             c.log()[-1500:])
    for p in cl.procs:
        p.kill()
        p.wait(10)
    # mode none: an INI with no model at all (cut short by an editor)
    seg = cl.new_segment_name("s7n")
    m = gen(cl, "s7n", "m", ROWS, DIMS, seg)
    s = settings(cl, "s7n", R.SETTINGS)
    conf = cl.write_config("hps.ini", m.ini_text, s)
    c = cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    cl.write_config("hps.ini", "", s + [("volatile_db", "shared_memory_name", seg)])
    refused_hup(t, c, "mode none, an INI without models", "no [model.<name>] section")
    check_exact(t, w.http_port, m, "(7) mode none, after the refused SIGHUP")


def body(t, cl):
    t0 = time.monotonic()
    for scenario in (scenario_edit, scenario_broken, scenario_deleted, scenario_fallback,
                     scenario_unloaded_bad, scenario_signals, scenario_unfollowable):
        try:
            scenario(t, cl)
        except Exception as e:  # noqa: BLE001  (one scenario's failure: the next still runs)
            t.exception(e)
        t.diag("%s: %.1f s" % (scenario.__name__, time.monotonic() - t0))
        for p in cl.procs:
            p.kill()
            p.wait(10)


if __name__ == "__main__":
    H.run_main("control_config", body)
