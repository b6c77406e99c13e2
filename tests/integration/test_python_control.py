#!/usr/bin/env python3
"""
int-python_control: explicit model control from inside a Python process
(hps.Client.load_model / unload_model, hps_client_model_control), against a
real hps-coordinator and beside an hps-worker on the same segment:

  - startup_models = ^m$: the client looks up m exactly; a lookup of n
    raises hps.Error HPS_ENOTFOUND (not loaded);
  - client.load_model("n") returns the coordinator's answer once n serves
    in this process: n's vectors exact; the worker's index shows n READY;
  - refusals raise hps.Error HPS_EIO with the reason (an unknown model, a
    model whose emb_vector is corrupt, an unload of a model never served:
    Triton's "Model to be unloaded has not been served") and change nothing;
  - client.unload_model("n"): lookups of n raise HPS_ENOTFOUND again, the
    worker's index shows n UNAVAILABLE "unloaded", m still exact;
  - a model added to the INI while the client runs: load_model, then its
    vectors exact in this process, and models() lists it; loaded again
    with another dimension, its name gives the new shape's exact vectors
    and its old index raises HPS_EMISMATCH (models() lists it at both
    indices); tables() gives
    each table's storage_type (int8 for one added with it; the segment's
    type where another client's INI says fp32);
  - a client of a configuration in mode none: HPS_EUNSUPPORTED;
  - a model name with an embedded NUL is refused (HPS_EINVAL), not cut
    there (unload_model("n\\0junk") once unloaded n); a name of 100,000
    characters is refused with a message that echoes 200 of them; the
    docstrings say what timeout_ms=0 means (load_model, unload_model: no
    limit; wait_ready: no wait);
  - close() while another thread's load_model(timeout_ms=0) waits on a
    SIGSTOPped coordinator: the wait ends at once (HPS_ETIMEDOUT).
"""
import os
import time
import threading
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402
from pyhps import raises  # noqa: E402

import numpy as np  # noqa: E402

import hps  # noqa: E402

try:
    import hps.torch as hps_torch
except ImportError:  # torch missing: the LookupLayer checks skip
    hps_torch = None


def exact(t, c, model, desc):
    ok = True
    for ti, ks in enumerate(model.file_keys):
        sample = [ks[0], ks[len(ks) // 2], ks[-1]]
        keys = np.array(sample, dtype=np.int64)
        got = c.lookup(model.name, ti, keys)
        want = np.array(model.expected([sample if i == ti else []
                                        for i in range(len(model.file_keys))]),
                        dtype=np.float32).reshape(len(keys), model.dims[ti])
        ok = ok and np.array_equal(got, want)
    t.ok(ok, desc)


def body(t, cl):
    m = cl.gen_model("m", rows=[3000, 1000], dims=[16, 8])
    n = cl.gen_model("n", rows=[2000], dims=[4], defaults=[0.5])
    bad = cl.gen_model("bad", rows=[500], dims=[8])
    emb = os.path.join(bad.table_dirs[0], "emb_vector")
    with open(emb, "r+b") as f:
        f.truncate(os.path.getsize(emb) - 12)
    text = m.ini_text + "".join("\n" + x.ini_text[x.ini_text.index("[model.%s]" % x.name):]
                                for x in (n, bad))
    conf = cl.write_config("hps.ini", text, [("hps", "model_control_mode", "explicit"),
                                             ("hps", "startup_models", "^m$")])
    coord = cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    with hps.Client(conf, -1) as c:
        t.ok(c.wait_ready(10000), "the client is ready with m loaded")
        exact(t, c, m, "m: exact vectors")
        raises(t, lambda: c.lookup("n", 0, np.array([n.file_keys[0][0]], dtype=np.int64)),
               "a lookup of n before its load", hps.HPS_ENOTFOUND)
        msg = c.load_model("n")
        t.eq(msg, "model 'n' loaded", "load_model('n') returns the coordinator's answer")
        exact(t, c, n, "n: exact vectors in this process right after load_model")
        st = {x["name"]: x for x in H.http(w.http_port, "POST", "/v2/repository/index").json()}
        t.ok(H.wait_until(lambda: {x["name"]: x for x in H.http(
            w.http_port, "POST", "/v2/repository/index").json()}["n"]["state"] == "READY", 5),
             "the worker's index: n READY", st)
        raises(t, lambda: c.load_model("nosuch"), "load_model of a model not in the INI",
               hps.HPS_EIO)
        # Triton's refusal, as hps-worker's 400 (it returned "model ... is not loaded")
        for name in ("nosuch", "bad"):
            raises(t, lambda x=name: c.unload_model(x), "unload_model(%r), never served" % name,
                   hps.HPS_EIO, "Model to be unloaded has not been served")
        try:
            c.load_model("bad")
            t.ok(False, "load_model of a corrupt model: hps.Error")
        except hps.Error as e:
            t.ok(e.code == hps.HPS_EIO and "emb_vector" in str(e),
                 "load_model of a corrupt model: hps.Error HPS_EIO naming the file (%s)" % e)
        exact(t, c, n, "n still exact after the refusals")
        raises(t, lambda: c.unload_model("n\0junk"), "unload_model('n\\0junk'): a name with a "
               "NUL", hps.HPS_EINVAL, "NUL")
        exact(t, c, n, "n still loaded after unload_model('n\\0junk')")
        raises(t, lambda: c.load_model("n\0junk"), "load_model('n\\0junk'): a name with a NUL",
               hps.HPS_EINVAL, "NUL")
        try:
            c.load_model("x" * 100000)
            t.ok(False, "load_model of a name of 100,000 characters: hps.Error")
        except hps.Error as e:
            t.ok(e.code == hps.HPS_EINVAL and len(str(e)) < 600 and "..." in str(e),
                 "load_model of a name of 100,000 characters: hps.Error HPS_EINVAL, the "
                 "message cut to %d characters" % len(str(e)), str(e)[:300])
        t.eq(c.unload_model("n"), "model 'n' unloaded", "unload_model('n')")
        raises(t, lambda: c.lookup("n", 0, np.array([n.file_keys[0][0]], dtype=np.int64)),
               "a lookup of n after its unload", hps.HPS_ENOTFOUND)
        t.ok(H.wait_until(lambda: {x["name"]: x for x in H.http(
            w.http_port, "POST", "/v2/repository/index").json()}["n"].get("reason") ==
            "unloaded", 5), "the worker's index: n unloaded")
        exact(t, c, m, "m still exact")
        raises(t, lambda: c.load_model(3), "load_model(3)", hps.HPS_EINVAL)
        # a model added to the INI while the client runs
        q = cl.gen_model("q", rows=[800], dims=[12])
        settings = [("hps", "model_control_mode", "explicit"), ("hps", "startup_models", "^m$")]
        cl.write_config("hps.ini", text + "\n" + q.ini_text[q.ini_text.index("[model.q]"):],
                        settings)
        t.eq(c.load_model("q"), "model 'q' loaded", "load_model('q'), added to the INI since the "
             "client opened")
        exact(t, c, q, "q: exact vectors in this process right after load_model")
        t.ok("q" in c.models(), "models() lists q", c.models())
        # q with another dimension: the client follows the reload by name
        qi = c.models().index("q")
        layer = None
        if hps_torch:
            layer = hps_torch.LookupLayer(conf, "q", 0, 12)
            t.eq(tuple(layer([q.file_keys[0][0]]).shape), (1, 12), "LookupLayer of q at 12")
        q6 = cl.gen_model("q", rows=[800], dims=[6], subdir="q_dim6")
        cl.write_config("hps.ini", text + "\n" + q6.ini_text[q6.ini_text.index("[model.q]"):],
                        settings)
        t.eq(c.load_model("q"), "model 'q' loaded", "load_model('q') at dimension 6")
        exact(t, c, q6, "q by name: exact vectors at dimension 6 right after load_model")
        raises(t, lambda: c.lookup(qi, 0, np.array([q.file_keys[0][0]], dtype=np.int64)),
               "a lookup by q's index of dimension 12", hps.HPS_EMISMATCH, "changed its tables")
        t.eq([i for i, x in enumerate(c.models()) if x == "q"], [qi, qi + 1],
             "models(): q at its old index and at its new one (positions are indices)")
        if layer is None:
            t.skip("LookupLayer after the change", "torch is not importable")
        else:
            t.ok(H.wait_until(lambda: layer._client(layer._host_device).tables("q")[0]["dim"] ==
                              6, 5), "the layer's client follows q to dimension 6")
            raises(t, lambda: layer([q.file_keys[0][0]]), "LookupLayer built for q at 12 "
                   "after the change", hps.HPS_EMISMATCH, "now has dimension 6")
        # the storage type of each table (issue 22)
        r = cl.gen_model("r", rows=[300], dims=[16])
        cl.write_config("hps.ini", text + "".join(
            "\n" + x.ini_text[x.ini_text.index("[model.%s]" % x.name):] for x in (q, r)),
            settings + [("model.r", "storage_type", "int8")])
        t.eq(c.load_model("r"), "model 'r' loaded", "load_model('r'), stored as int8")
        t.eq([(x["storage_type"], x["rows"]) for x in c.tables("r")] +
             [x["storage_type"] for x in c.tables("m")], [("int8", 300), "fp32", "fp32"],
             "tables(): storage_type int8 for r (300 rows), fp32 for m")
        # a process whose INI says fp32 for r reports the segment's int8
        # (the type its lookups decode and GPU caches store)
        other = cl.write_config("fp32r.ini", text + "".join(
            "\n" + x.ini_text[x.ini_text.index("[model.%s]" % x.name):] for x in (q, r)),
            settings)
        with hps.Client(other, -1) as c3:
            t.ok(H.wait_until(lambda: c3.tables("r")[0]["storage_type"] == "int8", 5),
                 "tables() of a client whose INI says fp32: the segment's int8",
                 c3.tables("r"))
    for meth in (hps.Client.load_model, hps.Client.unload_model):
        t.ok("timeout_ms=0 means no limit" in meth.__doc__,
             "%s docstring: timeout_ms=0 means no limit" % meth.__name__, meth.__doc__)
    t.ok("timeout_ms=0 does not wait" in hps.Client.wait_ready.__doc__,
         "wait_ready docstring: timeout_ms=0 does not wait", hps.Client.wait_ready.__doc__)
    # close() while another thread's load_model(timeout_ms=0) waits on a
    # stopped coordinator: the wait ends at once and close() returns (it
    # waited for the answer without limit).
    c4 = hps.Client(conf, -1)
    c4.wait_ready(10000)
    res = {}

    def load():
        try:
            res["r"] = c4.load_model("n", 0)
        except hps.Error as e:
            res["r"] = e
    coord.kill(signal.SIGSTOP)
    th = threading.Thread(target=load)
    th.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    c4.close()
    dt = time.monotonic() - t0
    th.join(10)
    coord.kill(signal.SIGCONT)
    r = res.get("r")
    t.ok(dt < 2.0 and not th.is_alive() and isinstance(r, hps.Error) and
         r.code == hps.HPS_ETIMEDOUT and "cancelled" in str(r),
         "close() while load_model(timeout_ms=0) waits on a stopped coordinator: returns in "
         "%.2f s, load_model raises HPS_ETIMEDOUT" % dt, repr(r))
    none_conf = cl.write_config("none.ini", text, [("hps", "startup_models", "^m$")])
    with hps.Client(none_conf, -1) as c2:
        raises(t, lambda: c2.load_model("n"), "mode none: load_model", hps.HPS_EUNSUPPORTED)


if __name__ == "__main__":
    H.run_main("python_control", body)
