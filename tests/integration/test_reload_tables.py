#!/usr/bin/env python3
"""
int-reload_tables: a reload that renames a model's tables (their files and
dimensions unchanged, so only which name sits at which position of KEYS /
NUMKEYS changes).  Position t of a request is the table of sparse_files
entry t (docs/configuration.md), whatever its name:
  - SIGHUP with embedding_table_names swapped: an hps-worker and an
    in-process client (hps.Client) that served the old names answer every
    position exactly from the new segment, as ones started after the reload
    do, also where their own INI keeps the old names.  (They used to take
    the new segment's tables by their old names:
    position 0 answered from the other table, 80 of 96 floats wrong and
    ready.)  The segment records each table's position
    (hps_table_spec_t.order); a process whose model has another order
    takes the coordinator's (the INI text in the segment), as for a change
    of dimension;
  - while a worker of an earlier build is attached (it takes tables by name:
    no HPS_PROC_CAP_FOLLOWS_ORDER), such a reload is refused naming its pid
    (upgrade audit: it answered position 0 from the other table);
  - a coordinator restarted with initialize_after_startup = false on the
    kept segment of the other order builds a new segment instead of keeping
    it (the kept tables sit at the old positions).
"""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402
import hps  # noqa: E402

ROWS, DIMS = [200, 150], [8, 8]


def swapped(text):
    """text with model m's two table names in the other order."""
    old = "embedding_table_names = sparse_embedding0, sparse_embedding1"
    if old not in text:
        raise RuntimeError("hps-gen's table names line changed:\n" + text)
    return text.replace(old, "embedding_table_names = sparse_embedding1, sparse_embedding0")


def exact_http(t, w, m, kpt, what):
    r = H.infer(w.http_port, "m", kpt, binary=True)
    got = H.decode_output(r)[1] if r.status == 200 else None
    bad = sum(1 for a, b in zip(got or [], m.expected(kpt)) if a != b)
    t.ok(got == m.expected(kpt), "%s: exact (%d of %d floats differ)" %
         (what, bad if got else -1, len(m.expected(kpt))), r.body[:300])


def exact_client(t, cl, m, kpt, what):
    """Every position by index, and by the table's (new) name."""
    import numpy as np
    bad = []
    for pos, name in ((0, "sparse_embedding1"), (1, "sparse_embedding0")):
        keys = np.array(kpt[pos], dtype=np.int64)
        want = np.array(m.expected([kpt[0], []] if pos == 0 else [[], kpt[1]]), dtype=np.float32)
        for tid in (pos, name):
            got = cl.lookup("m", tid, keys).reshape(-1)
            if not (got == want).all():
                bad.append(tid)
    t.ok(not bad, "%s: exact by position and by name (wrong: %s)" % (what, bad))


def body(t, cl):
    m = cl.gen_model("m", rows=ROWS, dims=DIMS)
    kpt = [m.file_keys[0][:20] + m.file_keys[0][-5:], m.file_keys[1][:20] + m.file_keys[1][-5:]]
    settings = [("hps", "heartbeat_interval_ms", 50)]
    conf = cl.write_config("hps.ini", m.ini_text, settings)
    c = cl.start_coordinator(conf)
    # their own INI keeps the old names: they follow the coordinator's
    old = cl.write_config("old.ini", m.ini_text, settings)
    w = cl.start_worker(old)
    client = hps.Client(old, device=-1)
    client.wait_ready(10000)
    exact_http(t, w, m, kpt, "before the reload, the worker")

    # ---- SIGHUP: the names swapped ---------------------------------------------------
    cl.write_config("hps.ini", swapped(m.ini_text), settings)
    n_pub = c.log().count("published /dev/shm/hps.")
    c.kill(signal.SIGHUP)
    t.ok(H.wait_until(lambda: c.log().count("published /dev/shm/hps.") > n_pub, 60),
         "SIGHUP with the table names swapped: published", c.log()[-2000:])
    # the old segment answers exactly until they move: wait for that
    t.ok(H.wait_until(lambda: "re-attached" in w.log(), 10),
         "the worker started before the reload moves to the new segment", w.log())
    time.sleep(1)  # the in-process client's maintenance round: every 50 ms
    exact_http(t, w, m, kpt, "after the reload, the worker started before it")
    w2 = cl.start_worker(conf, instance=1)
    exact_http(t, w2, m, kpt, "after the reload, a worker started after it")
    exact_client(t, client, m, kpt, "an in-process client opened before the reload")
    client.close()

    # ---- a worker of an earlier build (takes tables by name) refuses a swap back ----------
    seg = cl.segment
    old_w = subprocess.Popen([os.environ["HPS_SHM_ATTACH"], seg, "worker", "1"],
                             stdout=subprocess.PIPE, text=True)  # caps: follows shapes only
    try:
        t.ok(old_w.stdout.readline().startswith("attached"), "a worker of an earlier build "
             "attached (it follows shapes, takes tables by name)")
        cl.write_config("hps.ini", m.ini_text, settings)  # the names back in the first order
        n_hup = c.log().count("SIGHUP: reading")
        c.kill(signal.SIGHUP)
        H.wait_until(lambda: c.log().count("SIGHUP: reading") > n_hup and
                     ("configuration stays" in c.log().split("SIGHUP: reading")[-1] or
                      "published /dev/shm" in c.log().split("SIGHUP: reading")[-1]), 30)
        tail = c.log().split("SIGHUP: reading")[-1]
        t.ok(c.log().count("SIGHUP: reading") > n_hup and "renames or reorders its tables" in
             tail and "pid %d" % old_w.pid in tail and "published /dev/shm" not in tail,
             "with it attached, a SIGHUP that swaps the names back is refused naming its pid",
             tail[-1500:])
    finally:
        old_w.terminate()
        old_w.wait(10)
    exact_http(t, w, m, kpt, "after the refused SIGHUP, the worker")

    # ---- a kept segment of the other order -------------------------------------------
    keep = settings + [("volatile_db", "shared_memory_auto_remove", "false"),
                       ("volatile_db", "initialize_after_startup", "false")]
    conf = cl.write_config("hps.ini", swapped(m.ini_text), keep)
    for p in (w, w2, c):
        p.kill(signal.SIGTERM)
        p.wait(20)
    c = cl.start_coordinator(conf)
    t.ok(os.path.exists("/dev/shm/hps." + cl.segment), "a segment serves")
    conf = cl.write_config("hps.ini", m.ini_text, keep)  # back to the first order
    c.kill(signal.SIGTERM)
    c.wait(20)
    c = cl.start_coordinator(conf)
    t.ok("tables were reordered or renamed" in c.log() and "kept its rows" not in c.log(),
         "a restart on a kept segment of the other order builds a new one", c.log()[-2000:])
    w = cl.start_worker(conf)
    exact_http(t, w, m, kpt, "after that restart, a worker")


if __name__ == "__main__":
    H.run_main("reload_tables", body)
