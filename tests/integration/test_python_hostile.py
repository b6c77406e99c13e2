#!/usr/bin/env python3
"""
int-python_hostile: the Python module hps against arguments that try to
break it, against a real hps-coordinator.  Model m: 3 tables of 6000, 3000
and 2000 rows, dims 16, 8 and 4 (as int-python_client's).  Checks:
  - an error message echoes at most 200 characters of a 100,000-character
    name; a model name with a NUL is refused;
  - a numkeys list that an element's __index__ empties; Python code run by
    an argument (a str subclass's __hash__, an __index__) that closes the
    client (a child process per case: hps.Error, no crash);
  - DLPack capsules whose deleter is Python code (called once, the
    hps.Error intact) and negative shapes or strides;
  - keys and outputs at odd addresses (numpy views at an offset: exact); an
    out= overlapping the keys (refused);
  - numpy and torch integer scalars as model and table indices (bool
    refused), also for hps.torch.LookupLayer, which checks them when it is
    built; hps.HPS.lookup of lists holding other than ints; the timeout_ms
    docstrings;
  - a close() while another thread waits in wait_ready(60000) ends that
    wait at once, and a signal interrupts it;
  - fork() with clients open: a child that looks up through its parent's
    client gets hps.Error HPS_EINVAL (its misses got defaults now and then),
    one that drops its only reference to a client, and one that looks up
    through hps.shared_client and hps.HPS (clients of its own: misses
    exact) exit at once (they hung);
  - shared_memory_auto_remove with two clients of one process: the first
    to close after the coordinator died leaves the segment to the other.
"""
import ctypes
import importlib
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402
from pyhps import flat, mismatch, raises, skip, vecs  # noqa: E402

import numpy as np  # noqa: E402

import hps  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

RATE = 0.5


def long_names(t, model, c):
    """An error message echoes at most 200 characters of a user-given name."""
    keys = np.array(model.file_keys[0][:3], dtype=np.int64)
    long = "x" * 100000
    cases = [("an unknown model name of 100,000 characters", lambda: c.lookup(long, 0, keys),
              hps.HPS_ENOTFOUND),
             ("an unknown table name of 100,000 characters", lambda: c.lookup("m", long, keys),
              hps.HPS_ENOTFOUND),
             ("tables() of a model name of 100,000 characters", lambda: c.tables(long),
              hps.HPS_ENOTFOUND),
             ("a model index of 5,000 digits", lambda: c.lookup(10 ** 5000, 0, keys),
              hps.HPS_EINVAL),
             ("a table index of 5,000 digits", lambda: c.lookup("m", 10 ** 5000, keys),
              hps.HPS_EINVAL),
             ("a keyword argument name of 100,000 characters",
              lambda: c.lookup("m", 0, keys, **{long: 1}), hps.HPS_EINVAL),
             ("a dtype of 100,000 characters", lambda: c.lookup("m", 0, keys, dtype=long),
              hps.HPS_EINVAL)]
    for desc, fn, code in cases:
        try:
            fn()
            t.ok(False, "%s: hps.Error with the name cut" % desc, "no exception")
        except hps.Error as e:
            t.ok(e.code == code and len(str(e)) < 600 and "..." in str(e),
                 "%s: hps.Error %s, the message cut to %d characters" %
                 (desc, e.name, len(str(e))), str(e)[:300])
        except Exception as e:  # noqa: BLE001
            t.ok(False, "%s: hps.Error" % desc, "%s: %s" % (type(e).__name__, str(e)[:300]))
    raises(t, lambda: c.lookup("m\0junk", 0, keys), "a model name with a NUL",
           hps.HPS_ENOTFOUND, "'m\\x00junk'")


# Python code run while a method converts its arguments closes the client,
# or empties the numkeys list being read; one child process per case (they
# crashed the process once).
CLOSE_CHILD = r"""
import sys, numpy as np, hps
conf, case = sys.argv[1], sys.argv[2]
c = hps.Client(conf, -1)
if not c.wait_ready(20000):
    print("NOT READY", flush=True)
    sys.exit(2)
keys = np.array([int(x) for x in sys.argv[3].split(",")], dtype=np.int64)


class Name(str):
    def __hash__(self):
        c.close()
        return str.__hash__(self)


class Idx:
    def __init__(self, v):
        self.v = v

    def __index__(self):
        c.close()
        return self.v


calls = {
    "tables": lambda: c.tables(Idx(0)),
    "tables-unknown": lambda: c.tables(Idx(7)),
    "model_info": lambda: c.model_info(Idx(0)),
    "counters": lambda: c.counters(Idx(0)),
    "cache_stats-model": lambda: c.cache_stats(Idx(0), 0),
    "cache_stats-table": lambda: c.cache_stats("m", Idx(0)),
    "lookup-model": lambda: c.lookup(Idx(0), 0, keys),
    "lookup-table": lambda: c.lookup("m", Idx(0), keys),
    "lookup_multi-model": lambda: c.lookup_multi(Idx(0), keys, [len(keys)]),
    "lookup_multi-numkeys": lambda: c.lookup_multi("m", keys, [Idx(len(keys))]),
    "wait_ready": lambda: c.wait_ready(Idx(100)),
    "load_model": lambda: c.load_model("m", Idx(100)),
    # a str subclass's __hash__ (a model name): not called, or after it the
    # call fails cleanly
    "str-tables": lambda: c.tables(Name("m")),
    "str-tables-unknown": lambda: c.tables(Name("nosuch")),
    "str-model_info": lambda: c.model_info(Name("m")),
    "str-model_info-unknown": lambda: c.model_info(Name("nosuch")),
    "str-counters": lambda: c.counters(Name("m")),
    "str-cache_stats": lambda: c.cache_stats(Name("m"), Name("sparse_embedding0")),
    "str-lookup": lambda: c.lookup(Name("m"), Name("sparse_embedding0"), keys).shape,
    "str-lookup-unknown": lambda: c.lookup(Name("nosuch"), 0, keys),
    "str-lookup_multi": lambda: c.lookup_multi(Name("m"), keys, [len(keys)]).shape,
}


class Evil:
    def __init__(self, lst):
        self.lst = lst

    def __index__(self):
        self.lst.clear()
        return 2


def shrinks():
    nk = []
    nk += [Evil(nk), 2]
    got = c.lookup_multi("m", keys, nk)
    return "equal" if np.array_equal(got, c.lookup_multi("m", keys, [2, 2])) else "differ"


calls["numkeys-shrinks"] = shrinks
try:
    print("RESULT %s" % (calls[case](),), flush=True)
except hps.Error as e:
    print("RESULT hps.Error %s closed=%s: %s" % (e.name, c.closed, e), flush=True)
except Exception as e:
    print("RESULT %s: %s" % (type(e).__name__, e), flush=True)
"""

CLOSE_CASES = ["tables", "tables-unknown", "model_info", "counters", "cache_stats-model",
               "cache_stats-table", "lookup-model", "lookup-table", "lookup_multi-model",
               "lookup_multi-numkeys", "wait_ready", "load_model", "str-tables",
               "str-tables-unknown", "str-model_info", "str-model_info-unknown", "str-counters",
               "str-cache_stats", "str-lookup", "str-lookup-unknown", "str-lookup_multi",
               "numkeys-shrinks"]


def close_inside(t, cl, model, conf):
    script = cl.path("close_child.py")
    with open(script, "w") as f:
        f.write(CLOSE_CHILD)
    ks = ",".join(str(k) for k in model.file_keys[0][:2] + model.file_keys[1][:2])
    for case in CLOSE_CASES:
        try:
            r = subprocess.run([sys.executable, script, conf, case, ks], capture_output=True,
                               text=True, timeout=60)
            rc, out = r.returncode, r.stdout + r.stderr
        except subprocess.TimeoutExpired as e:
            rc, out = "timeout", str(e.stdout) + str(e.stderr)
        res = [ln for ln in out.splitlines() if ln.startswith("RESULT ")] or [""]
        if case == "numkeys-shrinks":
            t.ok(rc == 0 and res[0] == "RESULT equal",
                 "lookup_multi: a numkeys list emptied by its first element's __index__ is "
                 "read as it was: exact, no crash", "exit status %s; %s" % (rc, out[-1500:]))
            continue
        if case.startswith("str-"):
            # the result, an hps.Error of the call (unknown model, no GPU
            # cache), or of the closed client, but no crash
            t.ok(rc == 0 and res[0].startswith("RESULT ") and
                 (not res[0].startswith("RESULT hps.Error") or "closed=True" not in res[0] or
                  "the client is closed" in res[0]) and "Error" not in res[0].replace(
                      "hps.Error", ""),
                 "%s: a str subclass whose __hash__ closes the client: no crash (%s)" %
                 (case, res[0][:100]), "exit status %s; %s" % (rc, out[-1500:]))
            continue
        t.ok(rc == 0 and res[0].startswith("RESULT hps.Error HPS_EINVAL closed=True") and
             "the client is closed" in res[0],
             "%s: an __index__ that closes the client: hps.Error, no crash" % case,
             "exit status %s; %s" % (rc, out[-1500:]))




class PyCapsules:
    """Host DLPack capsules made with ctypes whose deleter is Python code
    that records its calls (shape and strides as given, even bad ones)."""

    def __init__(self):
        self.keep, self.deleted = [], []
        self.new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p,
                                     ctypes.c_void_p)(("PyCapsule_New", ctypes.pythonapi))
        self.deleter = H.DL_DELETER(lambda p: self.deleted.append(ctypes.addressof(p.contents)))

    def make(self, arr, code, bits, shape=None, strides=None):
        shape = list(arr.shape) if shape is None else shape
        sh = (ctypes.c_int64 * len(shape))(*shape)
        st = None if strides is None else (ctypes.c_int64 * len(strides))(*strides)
        mt = H.DLManagedTensor()
        mt.dl_tensor.data = arr.ctypes.data
        mt.dl_tensor.device = H.DLDevice(1, 0)  # kDLCPU
        mt.dl_tensor.ndim = len(shape)
        mt.dl_tensor.dtype = H.DLDataType(code, bits, 1)
        mt.dl_tensor.shape = sh
        if st is not None:
            mt.dl_tensor.strides = st
        mt.deleter = self.deleter
        self.keep.append((arr, sh, st, mt))
        return self.new(ctypes.addressof(mt), b"dltensor", None), ctypes.addressof(mt)


def dlpack_deleters(t, model, c):
    ks = model.file_keys[0][:10]
    k64 = np.array(ks, dtype=np.int64)
    want = vecs(model, 0, ks)
    P = PyCapsules()
    kc, ka = P.make(k64, 0, 64)
    out = np.zeros((10, 16), np.float32)
    oc, oa = P.make(out, 2, 32)
    c.lookup("m", 0, kc, out=oc)
    t.ok(np.array_equal(out, want) and sorted(P.deleted) == sorted([ka, oa]),
         "capsules with a Python deleter: exact, each deleter called once",
         "deleter calls %r" % P.deleted)

    def failing(desc, fn, text=None, n=2):
        P.deleted.clear()
        raises(t, fn, desc, hps.HPS_EINVAL, text)
        t.eq(len(P.deleted), n, "%s: every deleter called once" % desc)
    kc, ka = P.make(k64, 0, 64)
    oc, oa = P.make(out, 2, 32, shape=[10, 17])
    failing("out capsule of the wrong shape, Python deleters",
            lambda: c.lookup("m", 0, kc, out=oc), "shape")
    kc, ka = P.make(k64, 1, 16)
    failing("uint16 keys capsule, Python deleter", lambda: c.lookup("m", 0, kc), "int64", 1)
    # uint64 keys are taken (the bits of int64 keys): exact, deleter called
    P.deleted.clear()
    kc, ka = P.make(k64, 1, 64)
    got = c.lookup("m", 0, kc)
    t.ok(np.array_equal(got, want) and P.deleted == [ka],
         "uint64 keys capsule, Python deleter: exact, the deleter called once",
         "deleter calls %r" % P.deleted)
    kc, ka = P.make(k64, 0, 64, shape=[-5])
    failing("keys capsule of shape (-5,)", lambda: c.lookup("m", 0, kc), "negative", 1)
    kc, ka = P.make(k64, 0, 64, strides=[-1])
    failing("keys capsule of stride -1", lambda: c.lookup("m", 0, kc), "negative", 1)
    kc, ka = P.make(k64, 0, 64)
    oc, oa = P.make(out, 2, 32, shape=[-1, -160])
    failing("_lookup_any out capsule of shape (-1, -160)",
            lambda: c._lookup_any("m", 0, kc, oc), "negative")
    kc, ka = P.make(k64, 0, 64)
    oc, oa = P.make(out, 2, 32, shape=[2 ** 32, 2 ** 32 + 160])
    failing("_lookup_any out capsule of shape (2^32, 2^32 + 160) (the product overflows)",
            lambda: c._lookup_any("m", 0, kc, oc), "too large")


def odd_addresses(t, model, c):
    """Keys and outputs at odd addresses: numpy views at an offset."""
    ks = model.file_keys[0][:7] + model.unknown_keys(0, 2, 400)
    want = vecs(model, 0, ks)
    k = np.frombuffer(bytearray(8 * len(ks) + 1), dtype=np.int64, offset=1)
    k[:] = ks
    got = c.lookup("m", 0, k)
    t.ok(not k.flags.aligned and np.array_equal(got, want),
         "int64 keys at an odd address (np.frombuffer offset 1): exact", mismatch(got, want))
    k32 = np.frombuffer(bytearray(4 * 5 + 1), dtype=np.int32, offset=1)
    k32[:] = [1, 2, -3, 2 ** 31 - 1, 5]
    got = c.lookup("m", 0, k32)
    t.ok(np.array_equal(got, c.lookup("m", 0, k32.copy())),
         "int32 keys at an odd address: as aligned ones")
    k0, k1 = model.file_keys[0][:3], model.file_keys[1][:5]
    km = np.frombuffer(bytearray(8 * 8 + 3), dtype=np.int64, offset=3)
    km[:] = k0 + k1
    got = c.lookup_multi("m", km, [3, 5])
    t.ok(np.array_equal(got, flat(model, [k0, k1])), "lookup_multi: keys at an odd address: "
         "exact", mismatch(got, flat(model, [k0, k1])))
    keys = np.array(ks, dtype=np.int64)
    o16 = np.frombuffer(bytearray(len(ks) * 16 * 2 + 1), dtype=np.float16,
                        offset=1).reshape(len(ks), 16)
    try:
        r = c.lookup("m", 0, keys, out=o16)
        t.ok(r is o16 and np.array_equal(o16, want.astype(np.float16)),
             "float16 out= at an odd address: written, exact", mismatch(o16, want))
    except hps.Error as e:
        t.ok(False, "float16 out= at an odd address: written, exact", str(e))
    o32 = np.frombuffer(bytearray(len(ks) * 16 * 4 + 2), dtype=np.float32,
                        offset=2).reshape(len(ks), 16)
    r = c.lookup("m", 0, k, out=o32)
    t.ok(r is o32 and np.array_equal(o32, want), "float32 out= and keys at odd addresses: "
         "exact", mismatch(o32, want))


def overlap(t, model, c):
    ks = model.file_keys[0][:10]
    want = vecs(model, 0, ks)
    E = hps.HPS_EINVAL
    buf = np.zeros(160, np.float32)
    head = buf.view(np.int64)[:10]
    head[:] = ks
    raises(t, lambda: c.lookup("m", 0, head, out=buf.reshape(10, 16)),
           "lookup: keys in the first bytes of out=", E, "out overlaps keys")
    buf2 = np.zeros(160, np.float32)
    tail = buf2.view(np.int64)[-10:]
    tail[:] = ks
    raises(t, lambda: c.lookup("m", 0, tail, out=buf2.reshape(10, 16)),
           "lookup: keys in the last bytes of out=", E, "out overlaps keys")
    raises(t, lambda: c._lookup_any("m", 0, tail, buf2), "_lookup_any: keys inside out", E,
           "out overlaps keys")
    b16 = np.zeros(160, np.float16)
    h16 = b16.view(np.int64)[:10]
    h16[:] = ks
    raises(t, lambda: c.lookup("m", 0, h16, out=b16.reshape(10, 16)),
           "lookup: keys inside a float16 out=", E, "out overlaps keys")
    bm = np.zeros(6 * 16 + 4 * 8, np.float32)
    km = bm.view(np.int64)[5:15]
    km[:] = model.file_keys[0][:6] + model.file_keys[1][:4]
    raises(t, lambda: c.lookup_multi("m", km, [6, 4], out=bm), "lookup_multi: keys inside out=",
           E, "out overlaps keys")
    raw = np.zeros(80 + 640, np.uint8)
    kk, oo = raw[:80].view(np.int64), raw[80:].view(np.float32).reshape(10, 16)
    kk[:] = ks
    r = c.lookup("m", 0, kk, out=oo)
    t.ok(r is oo and np.array_equal(oo, want), "keys just before out= in one buffer (no "
         "overlap): exact", mismatch(oo, want))


def index_args(t, model, conf, c):
    """Model and table indices: anything with __index__ but bool."""
    E = hps.HPS_EINVAL
    ks = model.file_keys[1][:9]
    keys = np.array(ks, dtype=np.int64)
    want = vecs(model, 1, ks)
    for table, desc in ((np.int64(1), "np.int64(1)"), (np.int32(1), "np.int32(1)"),
                        (np.uint8(1), "np.uint8(1)")):
        try:
            got = c.lookup("m", table, keys)
            t.ok(np.array_equal(got, want), "table %s: exact" % desc, mismatch(got, want))
        except hps.Error as e:
            t.ok(False, "table %s: exact" % desc, str(e))
    try:
        got = c.lookup(np.int64(0), 1, keys)
        t.ok(np.array_equal(got, want), "model np.int64(0): exact", mismatch(got, want))
        t.eq(c.tables(np.int64(0)), c.tables("m"), "tables(np.int64(0)) == tables('m')")
        got = c.lookup_multi(np.int32(0), keys, [0, np.int64(9)])
        t.ok(np.array_equal(got, want.reshape(-1)), "lookup_multi: model np.int32(0), numkeys "
             "[0, np.int64(9)]: exact", mismatch(got, want.reshape(-1)))
    except hps.Error as e:
        t.ok(False, "model np.int64(0) / np.int32(0)", str(e))
    for bad, desc in ((True, "True"), (False, "False"), (np.True_, "np.True_")):
        raises(t, lambda: c.lookup("m", bad, keys), "table %s refused" % desc, E, "bool")
        raises(t, lambda: c.lookup(bad, 1, keys), "model %s refused" % desc, E, "bool")
    raises(t, lambda: c.cache_stats("m", True), "cache_stats: table True refused", E, "bool")
    raises(t, lambda: c.lookup_multi("m", keys, [False, 9]), "numkeys [False, 9] refused", E,
           "bool")
    if torch is None:
        skip(t, "torch integer scalars as indices, hps.torch.LookupLayer", "no torch")
        return
    try:
        got = c.lookup(torch.tensor(0), torch.tensor(1), keys)
        t.ok(np.array_equal(got, want), "model torch.tensor(0), table torch.tensor(1): exact")
    except hps.Error as e:
        t.ok(False, "model torch.tensor(0), table torch.tensor(1): exact", str(e))
    raises(t, lambda: c.lookup("m", torch.tensor(True), keys), "table torch.tensor(True) "
           "refused", E, "bool")
    ht = importlib.import_module("hps.torch")
    for table, desc in ((np.int64(1), "np.int64(1)"), (torch.tensor(1), "torch.tensor(1)")):
        try:
            got = ht.LookupLayer(conf, "m", table, 8)(torch.tensor(ks))
            t.ok(np.array_equal(got.numpy(), want), "hps.torch.LookupLayer(table_id=%s): exact" %
                 desc)
        except hps.Error as e:
            t.ok(False, "hps.torch.LookupLayer(table_id=%s): exact" % desc, str(e))
    for table, desc in ((1.0, "1.0"), (True, "True"), (None, "None"), (torch.tensor(1.5),
                                                                       "torch.tensor(1.5)")):
        raises(t, lambda: ht.LookupLayer(conf, "m", table, 8),
               "hps.torch.LookupLayer(table_id=%s) refused when it is built" % desc, E)
    raises(t, lambda: ht.LookupLayer(conf, 1.0, 1, 8),
           "hps.torch.LookupLayer(model_name=1.0) refused when it is built", E)


def hps_list_keys(t, model, conf):
    """hps.HPS.lookup of a list: ints (and numpy integers) only."""
    E = hps.HPS_EINVAL
    h = hps.HPS(conf)
    for bad in ([2 ** 64], [-2 ** 63 - 1], ["abc"], [None], [1.5], ["1"], [True], [[1, 2]],
                [1, np.float64(2)], [np.uint64(2 ** 63)]):
        raises(t, lambda: h.lookup(bad, "m", 0, device_id=-1),
               "hps.HPS.lookup of %r" % (bad,), E)
    ks = [k for k in model.file_keys[0] if k >= 0][:5]
    got = h.lookup([np.int64(ks[0])] + ks[1:], "m", 0, device_id=-1)
    t.ok(np.array_equal(got, vecs(model, 0, ks)), "hps.HPS.lookup of a list with a np.int64: "
         "exact", mismatch(got, vecs(model, 0, ks)))
    got = h.lookup((np.uint64(ks[0]),) + tuple(ks[1:]), "m", 0, device_id=-1)
    t.ok(np.array_equal(got, vecs(model, 0, ks)), "hps.HPS.lookup of a tuple of a np.uint64 "
         "and ints: exact", mismatch(got, vecs(model, 0, ks)))
    got = h.lookup([2 ** 63 - 1, -2 ** 63], "m", 0, device_id=-1)
    t.ok(got.shape == (2, 16) and np.all(got == np.float32(0.5)),
         "hps.HPS.lookup of [2**63 - 1, -2**63]: the default")
    t.eq(h.lookup([], "m", 0, device_id=-1).shape, (0, 16), "hps.HPS.lookup of []")
    h.close()


def concurrent_close(t, cl, model):
    """close() while another thread waits in wait_ready(60000) on a client
    without a coordinator: the wait ends at once (False) and close()
    returns; a second close() at the same time returns too.  And a signal
    (Ctrl-C) interrupts wait_ready: a child process, SIGALRM after 0.3 s."""
    seg = cl.new_segment_name("nocoord")
    conf = cl.write_config("nocoord.ini", model.ini_text,
                           [("volatile_db", "shared_memory_name", seg)])
    c = hps.Client(conf, -1)  # no coordinator: wait_ready waits its whole timeout
    res = {}
    waiter = threading.Thread(target=lambda: res.setdefault("ready", c.wait_ready(60000)))
    waiter.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    closer = threading.Thread(target=c.close)
    closer.start()
    c.close()
    dt = time.monotonic() - t0
    waiter.join(10)
    closer.join(10)
    t.ok(c.closed and dt < 2.0, "close() while another thread waits in wait_ready(60000) "
         "returns in %.2f s" % dt)
    t.ok(res.get("ready") is False and not waiter.is_alive() and not closer.is_alive(),
         "the wait ended (wait_ready: False); both close() returned", repr(res))
    prog = (
        "import signal, time, hps\n"
        "c = hps.Client(%r, -1)\n"
        "def stop(*a):\n"
        "    raise KeyboardInterrupt\n"
        "signal.signal(signal.SIGALRM, stop)\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.3)\n"
        "t0 = time.monotonic()\n"
        "try:\n"
        "    c.wait_ready(30000)\n"
        "    print('RESULT returned')\n"
        "except KeyboardInterrupt:\n"
        "    print('RESULT interrupted %%.2f' %% (time.monotonic() - t0))\n" % conf)
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=60)
    out = [x for x in r.stdout.splitlines() if x.startswith("RESULT")]
    took = float(out[0].split()[2]) if out and out[0].startswith("RESULT interrupted") else None
    t.ok(r.returncode == 0 and took is not None and took < 1.0,
         "a signal interrupts wait_ready(30000) (KeyboardInterrupt after %s s)" % took,
         r.stdout[-500:] + r.stderr[-1000:])


def forked(t, model, conf, c):
    """fork() with clients open: a child that looks up through its parent's
    client gets hps.Error HPS_EINVAL saying it must open its own (before,
    its misses got their defaults now and then without a word: it is in no
    row of the segment's process table, and the coordinator's reaper freed
    its miss-queue slots), then closes it; one whose only reference to a
    client goes away (its dealloc closes it); one that looks up through
    hps.shared_client and hps.HPS, which the parent used before the fork:
    they open clients of the child's own, and its lookups of keys only the
    persistent DB holds are exact for a second.  All exit at once (closing
    joined the parent's threads and hung); the parent's client keeps
    working."""
    keys = np.array(model.vdb_keys(0, RATE)[:5], np.int64)
    want = vecs(model, 0, keys)
    misses = np.array(model.pdb_only_keys(0, RATE)[:64], np.int64)
    want_misses = vecs(model, 0, misses)
    c2 = hps.Client(conf, -1)
    c2.wait_ready(10000)
    shared, compat = hps.shared_client(conf, -1), hps.HPS(conf)
    shared.wait_ready(10000)
    t.ok(np.array_equal(compat.lookup(keys, "m", 0, -1), want), "hps.HPS looks up in the parent")

    def parent_client():
        try:
            c.lookup("m", 0, keys)
        except hps.Error as e:
            c.close()
            return e.code == hps.HPS_EINVAL and "forked child" in str(e)
        return False

    def own_clients():
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            got = hps.shared_client(conf, -1).lookup("m", 0, misses)
            if not np.array_equal(got, want_misses) or \
                    not np.array_equal(compat.lookup(misses, "m", 0, -1), want_misses):
                return False
        return hps.shared_client(conf, -1) is not shared

    def dealloc():
        nonlocal c2
        del c2  # the only reference: its dealloc closes it here
        return True
    results = []
    for what, fn in (("looks up through the parent's client", parent_client),
                     ("drops a client (dealloc)", dealloc),
                     ("looks up through hps.shared_client and hps.HPS", own_clients)):
        pid = os.fork()
        if pid == 0:  # the child leaves by os._exit: no atexit of the harness
            ok = False
            try:
                ok = fn()
            except BaseException:  # noqa: BLE001
                pass
            os._exit(0 if ok else 1)
        status = None
        for _ in range(200):
            p, st = os.waitpid(pid, os.WNOHANG)
            if p:
                status = os.waitstatus_to_exitcode(st)
                break
            time.sleep(0.05)
        if status is None:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        results.append((what, status))
    t.eq([r[1] for r in results], [0, 0, 0], "forked children exit within 10 s, each as "
         "expected: %s" % results)
    c2.close()
    t.ok(np.array_equal(c.lookup("m", 0, keys), want), "the parent's client still looks up")
    t.ok(np.array_equal(shared.lookup("m", 0, misses), want_misses),
         "the parent's shared client still looks up, misses exact")
    compat.close()


def two_clients_auto_remove(t, cl):
    """shared_memory_auto_remove with two clients in one process and the
    coordinator SIGKILLed: closing the first keeps the segment, which the
    second still uses (before, the first close removed it: only other
    processes counted); closing the second removes it."""
    seg = cl.new_segment_name("ar")
    m = cl.gen_model("ar", rows=[1000], dims=[8], defaults=[0.5], segment=seg, subdir="ar")
    conf = cl.write_config("ar.ini", m.ini_text, [
        ("volatile_db", "shared_memory_auto_remove", "true"),
        ("hps", "heartbeat_interval_ms", 50), ("hps", "worker_timeout_ms", 500)])
    co = cl.start_coordinator(conf, log_name="coordinator-ar")
    c1, c2 = hps.Client(conf, -1), hps.Client(conf, -1)
    t.ok(c1.wait_ready(10000) and c2.wait_ready(10000), "auto_remove: two clients ready")
    co.kill(signal.SIGKILL)
    co.wait(10)
    c1.close()
    t.ok(cl.segment_exists(seg), "auto_remove: the first of two clients of one process closed "
         "after the coordinator died: the segment stays for the other")
    c2.close()
    t.ok(not cl.segment_exists(seg), "auto_remove: the last one out removed it")


def table_full(t, cl):
    """Clients until the segment's process table is full (128 rows, the
    coordinator's included): a lookup of a client that could not attach
    raises HPS_EFULL saying so (before: HPS_EBUSY "is an hps-coordinator
    serving it there?", the cause in a log line only); once others close,
    it attaches and answers."""
    seg = cl.new_segment_name("full")
    m = cl.gen_model("full", rows=[100], dims=[4], segment=seg, subdir="full")
    conf = cl.write_config("full.ini", m.ini_text, [("hps", "heartbeat_interval_ms", 50)])
    co = cl.start_coordinator(conf, log_name="coordinator-full")
    keys = np.array(m.file_keys[0][:5], dtype=np.int64)
    clients = []
    try:
        for _ in range(140):
            clients.append(hps.Client(conf, -1))
        H.wait_until(lambda: sum(c.ready() for c in clients) >= 127, 20, 0.1)
        late = [c for c in clients if not c.ready()]
        t.ok(len(late) == 140 - 127, "127 clients attach beside the coordinator, %d wait" %
             len(late))
        raises(t, lambda: late[0].lookup("full", 0, keys),
               "a lookup of a client the full table refused", hps.HPS_EFULL,
               "process table is full")
        for c in clients[:20]:
            c.close()
        t.ok(late[0].wait_ready(10000) and
             np.array_equal(late[0].lookup("full", 0, keys), vecs(m, 0, list(keys))),
             "once 20 others closed, it attaches and answers exactly")
    finally:
        for c in clients:
            c.close()
        co.kill(signal.SIGTERM)
        co.wait(30)


def body(t, cl):
    model = cl.gen_model("m", rows=[6000, 3000, 2000], dims=[16, 8, 4],
                         defaults=[0.5, -2.0, 0.0])
    conf = cl.write_config("hps.ini", model.ini_text, [
        ("volatile_db", "initial_cache_rate", RATE),
        ("hps", "heartbeat_interval_ms", 50),
    ])
    cl.start_coordinator(conf)
    c = hps.Client(conf, -1)
    t.ok(c.wait_ready(20000), "the client is ready")
    try:
        long_names(t, model, c)
        dlpack_deleters(t, model, c)
        odd_addresses(t, model, c)
        overlap(t, model, c)
        index_args(t, model, conf, c)
        hps_list_keys(t, model, conf)
        close_inside(t, cl, model, conf)
        concurrent_close(t, cl, model)
        forked(t, model, conf, c)
        rc, out, err = cl.shm("check", cl.segment)
        t.ok(rc == 0, "hps-shm check passes", out + err)
        two_clients_auto_remove(t, cl)
        table_full(t, cl)
    finally:
        c.close()
        hps._close_shared()  # hps.torch.LookupLayer's clients (hps.shared_client)


if __name__ == "__main__":
    H.run_main("python_hostile", body)
