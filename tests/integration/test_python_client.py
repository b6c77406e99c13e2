#!/usr/bin/env python3
"""
int-python_client: the Python module hps (worker/python/) against a real
hps-coordinator, beside an hps-worker on the same segment.

Model m: 3 tables of 6000, 3000 and 2000 rows, dims 16, 8 and 4, defaults
0.5, -2 and 0; initial_cache_rate 0.5 (the rest only in RocksDB),
cache_missed_embeddings.  Model m32 (supportlonglong = false, a segment of
its own): 2 tables, dims 4 and 2.  Checks:
  - a client opened before the coordinator attaches once it is up;
    models(), tables(), model_info();
  - exact vectors (the generator port) for numpy int64 keys (VDB,
    PDB-only, unknown: the table's default), int32 keys, out=, table by
    index and by name, lookup_multi over several tables, an object with
    __dlpack__ (DLPack keys without torch), hps.HPS (HugeCTR's lookup and
    lookup_fromdlpack with numpy's DLPack capsules), counters(), lookups
    from several threads; the 32-bit-key model with int64 and int32 keys;
  - torch CPU tensors, hps.torch.LookupLayer (skipped without torch);
  - the Python client and hps-worker agree, and keys the client elevated
    are volatile-DB hits for the worker (one segment); hps-shm info lists
    the Python process;
  - bad input raises hps.Error (float, int16, non-contiguous and 2-D keys,
    unknown model or table, out= of the wrong shape, dtype or layout, ...)
    and the client keeps working;
  - hostile arguments, close() and fork(): int-python_hostile;
  - a lookup's DLPack keys, the pickled hps.torch.LookupLayer;
    [hps] log_level = warn keeps the client's INFO lines out of stderr;
  - a child Python process looking up in a loop is SIGKILLed: the worker
    answers every request exactly before, during and after, and the
    coordinator reaps the dead client from the segment's process table.
"""
import copy
import importlib
import os
import pickle
import random
import subprocess
import sys
import threading
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402
from pyhps import DL, flat, mismatch, raises, skip, vecs  # noqa: E402

import numpy as np  # noqa: E402

import hps  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

RATE = 0.5
WORKER_TIMEOUT_MS = 500


def pdb_half(model, t, half):
    """Half 0 or 1 of table t's persistent-DB-only keys: basics() uses the
    first, shared_segment() the second (still only in RocksDB there)."""
    ks = list(model.pdb_only_keys(t, RATE))
    return ks[:len(ks) // 2] if half == 0 else ks[len(ks) // 2:]


class Streamer(threading.Thread):
    """Binary requests to a worker until stopped; every answer checked."""

    def __init__(self, port, model, seed):
        super().__init__(daemon=True)
        self.port, self.model = port, model
        self.rng = random.Random(seed)
        self.stop_ev = threading.Event()
        self.ok = 0
        self.failures = []

    def run(self):
        m = self.model
        while not self.stop_ev.is_set():
            kpt = [self.rng.sample(m.file_keys[i], 20) + m.unknown_keys(i, 2, 9)
                   for i in range(len(m.rows))]
            try:
                _, got = H.decode_output(H.infer(self.port, "m", kpt, binary=True, timeout=10))
                if got == m.expected(kpt):
                    self.ok += 1
                else:
                    self.failures.append(H.first_mismatch(got, m.expected(kpt), m, kpt))
            except Exception as e:  # noqa: BLE001
                self.failures.append("%s: %s" % (type(e).__name__, e))


CHILD = r"""
import sys, numpy as np, hps
conf, data = sys.argv[1], sys.argv[2]
z = np.load(data)
batches = [(int(t), z["k%d" % i], z["w%d" % i]) for i, t in enumerate(z["tables"])]
c = hps.Client(conf, -1)
if not c.wait_ready(20000):
    print("NOT READY", flush=True)
    sys.exit(2)
print("READY", flush=True)
n = 0
while True:
    for t, k, w in batches:
        got = c.lookup("m", t, k)
        if not np.array_equal(got, w):
            print("MISMATCH table %d batch of %d keys" % (t, len(k)), flush=True)
            sys.exit(1)
        n += 1
        if n % 50 == 0:
            print("LOOKUPS %d" % n, flush=True)
"""


def basics(t, cl, model, conf, c):
    rng = random.Random(7)
    t.eq(c.models(), ["m"], "models() lists the configured model")
    tabs = c.tables("m")
    t.eq([(x["name"], x["dim"], x["key_bytes"], x["default_value"], x["max_keys_per_sample"])
          for x in tabs],
         [("sparse_embedding%d" % i, model.dims[i], 8, H.f32(model.defaults[i]), 1)
          for i in range(3)],
         "tables(): names, dims, key_bytes, default values, max keys per sample")
    t.eq([x["rows"] for x in tabs], [int(np.ceil(r * RATE)) for r in model.rows],
         "tables(): rows in the volatile DB (initial_cache_rate 0.5)")
    mi = c.model_info("m")
    t.eq((mi["name"], mi["num_tables"], mi["key_bytes"]), ("m", 3, 8), "model_info()")
    t.eq(c.device, -1, "a host-only client reports device -1")
    # A device that does not exist (no machine has 1024 GPUs): a host-only
    # client, .device -1, with a RuntimeWarning (whether or not a model has
    # gpucache = true; this one has not).
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        nd = hps.Client(conf, device=1023)
    try:
        msgs = [str(x.message) for x in ws if issubclass(x.category, RuntimeWarning)]
        t.ok(nd.device == -1 and "device=-1" in repr(nd) and len(msgs) == 1 and
             "CUDA device 1023 cannot be used" in msgs[0] and "host-only" in msgs[0],
             "Client(device=1023) that does not exist: .device -1, repr device=-1, one "
             "RuntimeWarning", "device %r, repr %r, warnings %r" % (nd.device, repr(nd), msgs))
        nd.wait_ready(10000)
        ks = np.array(model.file_keys[0][:5], dtype=np.int64)
        t.ok(np.array_equal(nd.lookup("m", 0, ks), vecs(model, 0, list(ks))),
             "... and it looks up from host memory")
    finally:
        nd.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            hps.Client(conf, device=1023)
            t.ok(False, "python -W error: Client(device=1023) raises the RuntimeWarning")
        except RuntimeWarning:
            t.ok(True, "python -W error: Client(device=1023) raises the RuntimeWarning")

    # numpy int64: VDB, PDB-only and unknown keys, each table.
    for i in range(3):
        ks = (rng.sample(model.vdb_keys(i, RATE), 30) +
              rng.sample(pdb_half(model, i, 0), 20) + model.unknown_keys(i, 5, 3))
        rng.shuffle(ks)
        keys = np.array(ks, dtype=np.int64)
        c0 = c.counters("m")
        got = c.lookup("m", i, keys)
        c1 = c.counters("m")
        t.ok(isinstance(got, np.ndarray) and got.dtype == np.float32 and
             got.shape == (55, model.dims[i]) and got.flags.c_contiguous,
             "table %d: numpy float32 (55, %d) output" % (i, model.dims[i]), repr(got)[:200])
        want = vecs(model, i, ks)
        t.ok(np.array_equal(got, want),
             "table %d: numpy int64 keys exact (VDB, PDB-only, unknown = default %g)" %
             (i, model.defaults[i]), mismatch(got, want))
        t.eq((c1["lookup_keys"] - c0["lookup_keys"], c1["default_keys"] - c0["default_keys"],
              c1["lower_hits"] - c0["lower_hits"], c1["lookup_calls"] - c0["lookup_calls"]),
             (55, 5, 20, 1), "table %d: counters(): keys, defaults, lower hits, calls" % i)
    unk = model.unknown_keys(1, 6, 40)
    got = c.lookup("m", 1, np.array(unk, dtype=np.int64))
    t.ok(np.all(got == np.float32(-2.0)), "unknown keys only: every element is table 1's "
         "default -2", mismatch(got, np.full(got.shape, -2.0, np.float32)))

    # Table by name and by index; numpy int64 view with a non-native dtype name.
    ks = rng.sample(model.vdb_keys(2, RATE), 40)
    keys = np.array(ks, dtype=np.int64)
    a, b = c.lookup("m", 2, keys), c.lookup("m", "sparse_embedding2", keys)
    t.ok(np.array_equal(a, vecs(model, 2, ks)) and np.array_equal(a, b),
         "table by index (2) and by name (sparse_embedding2) give the same exact rows",
         mismatch(b, vecs(model, 2, ks)))
    got = c.lookup(0, 2, keys)
    t.ok(np.array_equal(got, a), "model by index (0) equals model by name")

    # int32 keys on a 64-bit model: sign-extended (hps-gen's keys do not fit
    # int32, so these are unknown; compare with the same values as int64).
    k32 = np.array([-1, 0, 5, 2 ** 31 - 1, -2 ** 31], dtype=np.int32)
    got = c.lookup("m", 0, k32)
    t.ok(np.array_equal(got, c.lookup("m", 0, k32.astype(np.int64))),
         "int32 keys on a 64-bit model equal the same values as int64 keys")
    # uint64 keys (HugeCTR's long long keys as unsigned): the int64 bits.
    ku = np.array(ks + [2 ** 64 - 1], dtype=np.uint64)
    got = c.lookup("m", 2, ku)
    t.ok(np.array_equal(got, c.lookup("m", 2, ku.view(np.int64))) and
         np.array_equal(got[:-1], vecs(model, 2, ks)),
         "uint64 keys on a 64-bit model equal their int64 bits", mismatch(got[:-1],
                                                                        vecs(model, 2, ks)))
    raises(t, lambda: c.lookup("m", 2, np.array([1, 2 ** 31], dtype=np.uint32)),
           "uint32 keys on a 64-bit model (sign extension would change keys >= 2^31)",
           hps.HPS_EINVAL, "keys are uint32, but model 'm' has 64-bit keys")

    # out=: written in place and returned.
    out = np.full((40, 4), 7.0, dtype=np.float32)
    r = c.lookup("m", 2, keys, out=out)
    t.ok(r is out and np.array_equal(out, vecs(model, 2, ks)), "out= numpy array filled and "
         "returned", mismatch(out, vecs(model, 2, ks)))

    # Empty keys.
    got = c.lookup("m", 0, np.zeros(0, dtype=np.int64))
    t.eq(got.shape, (0, 16), "no keys: a (0, 16) output")

    # lookup_multi: the three tables, two, one empty.
    kpt = [rng.sample(model.vdb_keys(0, RATE), 25) + model.unknown_keys(0, 3, 77),
           rng.sample(pdb_half(model, 1, 0), 10) + rng.sample(model.vdb_keys(1, RATE), 10),
           rng.sample(model.vdb_keys(2, RATE), 7) + model.unknown_keys(2, 2, 5)]
    keys, numkeys = H.split_keys(kpt)
    got = c.lookup_multi("m", np.array(keys, dtype=np.int64), numkeys)
    want = flat(model, kpt)
    t.ok(got.shape == want.shape and np.array_equal(got, want),
         "lookup_multi over 3 tables (dims 16, 8, 4): flat output exact", mismatch(got, want))
    got = c.lookup_multi("m", np.array(keys[:35], dtype=np.int64), np.array([28, 7]))
    want = flat(model, [kpt[0], kpt[1][:7]])
    t.ok(np.array_equal(got, want), "lookup_multi over tables 0..1 (numkeys a numpy array)",
         mismatch(got, want))
    kpt2 = [[], kpt[1], kpt[2]]
    k2, n2 = H.split_keys(kpt2)
    out = np.empty(sum(len(kpt2[i]) * model.dims[i] for i in range(3)), dtype=np.float32)
    r = c.lookup_multi("m", np.array(k2, dtype=np.int64), n2, out=out)
    t.ok(r is out and np.array_equal(out, flat(model, kpt2)),
         "lookup_multi with numkeys [0, 20, 9] into out=", mismatch(out, flat(model, kpt2)))

    # DLPack keys without torch: an object with only __dlpack__.
    ks = rng.sample(model.vdb_keys(1, RATE), 33)
    got = c.lookup("m", 1, DL(np.array(ks, dtype=np.int64)))
    t.ok(isinstance(got, np.ndarray) and np.array_equal(got, vecs(model, 1, ks)),
         "keys as an object with __dlpack__ (host): numpy output, exact",
         mismatch(got, vecs(model, 1, ks)))
    got = c.lookup("m", 1, np.array(ks, dtype=np.int64).__dlpack__())
    t.ok(np.array_equal(got, vecs(model, 1, ks)), "keys as a raw DLPack capsule (host)")

    # HugeCTR's API.
    h = hps.HPS(conf)
    ks = rng.sample(model.vdb_keys(0, RATE), 50) + model.unknown_keys(0, 2, 11)
    got = h.lookup(np.array(ks, dtype=np.int64), "m", 0)
    t.ok(isinstance(got, np.ndarray) and np.array_equal(got, vecs(model, 0, ks)),
         "hps.HPS(conf).lookup(h_keys, 'm', 0): numpy (n, 16) exact",
         mismatch(got, vecs(model, 0, ks)))
    got = h.lookup(ks, "m", 0, device_id=-1)
    t.ok(np.array_equal(got, vecs(model, 0, ks)), "hps.HPS.lookup of a list, device_id -1")
    # HugeCTR's lookup flattened any array (a copy when not contiguous): one
    # column of a (batch, slots) array, a 2-D array
    batch = np.array(ks[:48], dtype=np.int64).reshape(12, 4)
    got = h.lookup(batch[:, 1], "m", 0)
    t.ok(np.array_equal(got, vecs(model, 0, list(batch[:, 1]))),
         "hps.HPS.lookup of one column batch[:, 1] (not contiguous): exact")
    got = h.lookup(batch, "m", 0)
    t.ok(got.shape == (48, 16) and np.array_equal(got, vecs(model, 0, ks[:48])),
         "hps.HPS.lookup of a 2-D array: flattened, exact")
    for bad in (True, 1.5, "0", None):
        raises(t, lambda b=bad: h.lookup(ks, "m", 0, device_id=b),
               "hps.HPS.lookup with device_id %r" % (bad,), hps.HPS_EINVAL)
    raises(t, lambda: h.lookup([True, ks[0]], "m", 0), "hps.HPS.lookup of [True, key]",
           hps.HPS_EINVAL, "h_keys[0] must be an int, not bool")
    keys = np.array(ks, dtype=np.int64)
    out = np.zeros((len(ks), 16), dtype=np.float32)
    r = h.lookup_fromdlpack(keys.__dlpack__(), out.__dlpack__(), "m", 0)
    t.ok(r is None and np.array_equal(out, vecs(model, 0, ks)),
         "hps.HPS.lookup_fromdlpack(keys capsule, out capsule): written in place",
         mismatch(out, vecs(model, 0, ks)))
    out1 = np.zeros(len(ks) * 16, dtype=np.float32)
    h.lookup_fromdlpack(keys, out1, "m", "sparse_embedding0", device_id=-1)
    t.ok(np.array_equal(out1.reshape(-1, 16), vecs(model, 0, ks)),
         "hps.HPS.lookup_fromdlpack with arrays, a flat out, table by name")
    # HugeCTR's took keys of any shape (a (batch, slots) tensor) and an out
    # sized for the largest batch: the first n * emb elements are written
    big = np.full((len(ks) + 5, 16), 7.0, dtype=np.float32)
    h.lookup_fromdlpack(np.array(batch), big, "m", 0)
    t.ok(np.array_equal(big[:48], vecs(model, 0, ks[:48])) and (big[48:] == 7.0).all(),
         "hps.HPS.lookup_fromdlpack of (12, 4) keys into a larger out: the first 48 rows "
         "exact, the rest untouched", mismatch(big[:48], vecs(model, 0, ks[:48])))
    # the same into an out at an odd address (written through an aligned copy):
    # the tail was overwritten with the copy's uninitialised memory
    odd = np.frombuffer(bytearray(4 * 16 * (48 + 5) + 1), dtype=np.float32, offset=1)
    odd[:] = 7.0
    h.lookup_fromdlpack(np.array(batch), odd, "m", 0)
    t.ok(np.array_equal(odd[:48 * 16].reshape(48, 16), vecs(model, 0, ks[:48])) and
         (odd[48 * 16:] == 7.0).all(), "... into a larger out at an odd address: the tail "
         "untouched", odd[48 * 16:][:8])
    raises(t, lambda: h.lookup_fromdlpack(keys, np.zeros((len(ks) - 1, 16), np.float32), "m", 0),
           "hps.HPS.lookup_fromdlpack into a short out", hps.HPS_EINVAL,
           "out must hold at least %d elements" % (len(ks) * 16))
    raises(t, lambda: h.lookup_fromdlpack(batch.T, big, "m", 0),
           "hps.HPS.lookup_fromdlpack of non-contiguous keys", hps.HPS_EINVAL,
           "must be C-contiguous")
    cap = keys.__dlpack__()
    h.lookup_fromdlpack(cap, np.zeros((len(ks), 16), np.float32), "m", 0)
    raises(t, lambda: h.lookup_fromdlpack(cap, out.__dlpack__(), "m", 0),
           "a DLPack capsule consumed twice")
    h.close()

    # Several threads at once (lookups run with the GIL released).
    errors = []

    def worker(seed):
        r2 = random.Random(seed)
        for _ in range(40):
            i = r2.randrange(3)
            ks2 = r2.sample(model.vdb_keys(i, RATE), 64)
            g = c.lookup("m", i, np.array(ks2, dtype=np.int64))
            if not np.array_equal(g, vecs(model, i, ks2)):
                errors.append(mismatch(g, vecs(model, i, ks2)))
    ths = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for th in ths:
        th.start()
    for th in ths:
        th.join(60)
    t.ok(not errors, "4 threads x 40 lookups on one client: all exact", "\n".join(errors[:3]))


def bad_input(t, cl, model, conf, c):
    keys = np.array(model.file_keys[0][:10], dtype=np.int64)
    E = hps.HPS_EINVAL
    raises(t, lambda: c.lookup("m", 0, keys.astype(np.float64)), "float64 keys", E)
    raises(t, lambda: c.lookup("m", 0, keys.astype(np.float32)), "float32 keys", E)
    raises(t, lambda: c.lookup("m", 0, keys.astype(np.int16)), "int16 keys", E)
    raises(t, lambda: c.lookup("m", 0, keys.astype(np.uint8)), "uint8 keys", E)
    raises(t, lambda: c.lookup("m", 0, np.array(model.file_keys[0][:20])[::2]),
           "non-contiguous keys (a[::2])", E)
    raises(t, lambda: c.lookup("m", 0, keys.reshape(2, 5)), "2-D keys", E)
    raises(t, lambda: c.lookup("m", 0, np.int64(5)), "a numpy scalar as keys")
    raises(t, lambda: c.lookup("m", 0, [1, 2, 3]), "a list as keys (Client.lookup)", E)
    raises(t, lambda: c.lookup("m", 0, b"\x00" * 16), "bytes as keys", E)
    raises(t, lambda: c.lookup("nope", 0, keys), "unknown model", hps.HPS_ENOTFOUND)
    raises(t, lambda: c.lookup("m", "nope", keys), "unknown table name", hps.HPS_ENOTFOUND)
    raises(t, lambda: c.lookup("m", 3, keys), "table index 3 of 3 tables", E)
    raises(t, lambda: c.lookup("m", -1, keys), "table index -1", E)
    raises(t, lambda: c.lookup("m", 1.0, keys), "a float table index", E)
    raises(t, lambda: c.lookup("m", 0, keys, out=np.empty((10, 8), np.float32)),
           "out= of the wrong shape (10, 8) for dim 16", E)
    raises(t, lambda: c.lookup("m", 0, keys, out=np.empty((9, 16), np.float32)),
           "out= with too few rows", E)
    raises(t, lambda: c.lookup("m", 0, keys, out=np.empty(160, np.float32)),
           "out= flat instead of (10, 16)", E)
    raises(t, lambda: c.lookup("m", 0, keys, out=np.empty((10, 16), np.float64)),
           "out= float64", E)
    raises(t, lambda: c.lookup("m", 0, keys, out=np.empty((10, 16), np.float32, order="F")),
           "out= Fortran-ordered", E)
    ro = np.empty((10, 16), np.float32)
    ro.flags.writeable = False
    raises(t, lambda: c.lookup("m", 0, keys, out=ro), "out= read-only", E)
    raises(t, lambda: c.lookup("m", 0, keys, stream="x"), "stream of a wrong type", E)
    raises(t, lambda: c.lookup("m", 0), "missing keys argument", E)
    raises(t, lambda: c.lookup("m", 0, keys, bogus=1), "unknown keyword argument", E)
    raises(t, lambda: c.lookup_multi("m", keys, [4, 5]), "numkeys summing to 9 for 10 keys", E)
    raises(t, lambda: c.lookup_multi("m", keys, [1, 2, 3, 4]), "numkeys of 4 tables for 3", E)
    raises(t, lambda: c.lookup_multi("m", keys, [11, -1]), "a negative numkeys entry", E)
    raises(t, lambda: c.lookup_multi("m", keys, []), "empty numkeys", E)
    raises(t, lambda: c.lookup_multi("m", keys, [10], out=np.empty(10, np.float32)),
           "lookup_multi out= of the wrong size", E)
    raises(t, lambda: c.tables("nope"), "tables() of an unknown model", hps.HPS_ENOTFOUND)
    raises(t, lambda: hps.Client("/nonexistent/hps.ini", -1), "Client() of a missing file")
    raises(t, lambda: hps.HPS("/nonexistent/hps.ini"), "hps.HPS() of a missing file")
    # Every code has a name: HPS_E... and negative errnos (hps_err_name()).
    names = []
    for fn in (lambda: hps.HPS("/nonexistent/hps.ini"),
               lambda: hps.Client("/nonexistent/hps.ini", -1)):
        try:
            fn()
        except hps.Error as e:
            names.append((e.code, e.name))
    import errno
    t.eq(names, [(-errno.ENOENT, "ENOENT")] * 2,
         "hps.HPS() and hps.Client() of a missing file: .code -ENOENT, .name ENOENT")
    t.ok(all(hps.err_name(getattr(hps, n)) == n for n in dir(hps) if n.startswith("HPS_E")) and
         hps.err_name(-errno.EACCES) == "EACCES" and hps.err_name(0) == "OK" and
         hps.err_name(10 ** 30) == "UNKNOWN",
         "hps.err_name(): the HPS_E constants, errno names, OK, UNKNOWN")
    ps_json = cl.path("ps.json")
    with open(ps_json, "w") as f:
        f.write('{\n  "supportlonglong": true,\n  "models": []\n}\n')
    raises(t, lambda: hps.HPS(ps_json), "hps.HPS() of HugeCTR's ps.json: refused when it is "
           "built, with how to convert it", hps.HPS_ECONFIG, "hps-conf import")
    raises(t, lambda: hps.check_config(ps_json), "hps.check_config() of a ps.json",
           hps.HPS_ECONFIG, 'ps.json:1: "{": a JSON file')
    # Minified on one line it reads as "key: value" to an INI parser: the
    # same hint, the line quoted as written.
    with open(ps_json, "w") as f:
        f.write('{"supportlonglong": true, "models": []}\n')
    raises(t, lambda: hps.HPS(ps_json), "hps.HPS() of a minified one-line ps.json: the JSON hint",
           hps.HPS_ECONFIG, 'ps.json:1: "{"supportlonglong": true, "models": []}": a JSON file '
           "(HugeCTR's ps.json?), not an INI file: convert it with 'hps-conf import")
    t.ok(hps.check_config(conf) is None, "hps.check_config() of the test's INI: None")
    try:
        c.lookup("nope", 0, keys)
    except hps.Error as e:
        t.ok("nope" in str(e) and "m" in str(e) and e.name == "HPS_ENOTFOUND",
             "the error names the unknown model and the known ones: %s" % e)
    got = c.lookup("m", 0, keys)
    t.ok(np.array_equal(got, vecs(model, 0, list(keys))), "the client still works after the "
         "bad calls", mismatch(got, vecs(model, 0, list(keys))))


def with_torch(t, model, conf, c):
    names = ["torch int64 CPU tensor -> torch output exact",
             "torch int32 tensor, out= torch tensor",
             "hps.HPS.lookup_fromdlpack with torch.utils.dlpack capsules",
             "hps.torch.LookupLayer on 2-D keys: keys.shape + (dim,), exact",
             "hps.torch.LookupLayer by table name, 1-D keys",
             "hps.torch.LookupLayer: emb_vec_size differing from the dim",
             "torch bad keys (float tensor, 2-D, non-contiguous)",
             "hps.torch.LookupLayer(dtype=torch.float16): half, the rounded vectors",
             "hps.torch.LookupLayer(dtype=torch.int8) refused",
             "hps.torch.LookupLayer pickled and deep-copied: the copies open their own "
             "clients, exact",
             "hps.torch.LookupLayer on non-contiguous keys (keys[::2], transposed): copied, "
             "exact",
             "hps.torch.LookupLayer under torch.jit.trace: refused (a traced graph would "
             "return uninitialised memory)"]
    if torch is None:
        for n in names:
            skip(t, n, "no torch")
        try:
            importlib.import_module("hps.torch")
            t.ok(False, "import hps.torch without torch raises ImportError")
        except ImportError as e:
            t.ok("torch" in str(e), "import hps.torch without torch: ImportError (%s)" % e)
        return
    ht = importlib.import_module("hps.torch")
    rng = random.Random(3)
    ks = rng.sample(model.vdb_keys(0, RATE), 40) + model.unknown_keys(0, 3, 1)
    got = c.lookup("m", 0, torch.tensor(ks, dtype=torch.int64))
    t.ok(isinstance(got, torch.Tensor) and got.dtype == torch.float32 and
         got.device.type == "cpu" and tuple(got.shape) == (43, 16) and
         np.array_equal(got.numpy(), vecs(model, 0, ks)), names[0],
         repr(got)[:200])
    out = torch.zeros((43, 16), dtype=torch.float32)
    # 64-bit model: int32 values that are not table keys -> compare with int64.
    k32 = torch.tensor([1, 2, -3], dtype=torch.int32)
    o32 = torch.zeros((3, 16))
    r = c.lookup("m", 0, k32, out=o32)
    r2 = c.lookup("m", 0, torch.tensor(ks, dtype=torch.int64), out=out)
    t.ok(r is o32 and r2 is out and np.array_equal(out.numpy(), vecs(model, 0, ks)) and
         np.all(o32.numpy() == np.float32(0.5)), names[1])
    h = hps.HPS(conf)
    from torch.utils.dlpack import to_dlpack
    o = torch.empty((43, 16), dtype=torch.float32)
    h.lookup_fromdlpack(to_dlpack(torch.tensor(ks)), to_dlpack(o), "m", 0)
    t.ok(np.array_equal(o.numpy(), vecs(model, 0, ks)), names[2])
    h.close()
    layer = ht.LookupLayer(conf, "m", 1, 8)
    ks1 = rng.sample(model.vdb_keys(1, RATE), 24)
    keys = torch.tensor(ks1, dtype=torch.int64).reshape(4, 6)
    got = layer(keys)
    t.ok(tuple(got.shape) == (4, 6, 8) and not got.requires_grad and
         np.array_equal(got.reshape(-1, 8).numpy(), vecs(model, 1, ks1)), names[3],
         repr(got.shape))
    layer2 = ht.LookupLayer(conf, "m", "sparse_embedding2", 4)
    ks2 = rng.sample(model.vdb_keys(2, RATE), 9)
    got = layer2(torch.tensor(ks2))
    t.ok(tuple(got.shape) == (9, 4) and np.array_equal(got.numpy(), vecs(model, 2, ks2)),
         names[4])
    raises(t, lambda: ht.LookupLayer(conf, "m", 1, 16), names[5], hps.HPS_EINVAL)
    ok = True
    for bad in (torch.tensor([1.0, 2.0]), torch.tensor([[1, 2], [3, 4]]),
                torch.arange(10)[::2]):
        try:
            c.lookup("m", 0, bad)
            ok = False
        except hps.Error:
            pass
    t.ok(ok, names[6])
    wide = torch.tensor([k for k in ks1 for _ in (0, 1)], dtype=torch.int64)
    nc1 = wide[::2]
    nc2 = torch.tensor(ks1, dtype=torch.int64).reshape(6, 4).t()
    g1, g2 = layer(nc1), layer(nc2)
    t.ok(not nc1.is_contiguous() and not nc2.is_contiguous() and
         np.array_equal(g1.numpy(), vecs(model, 1, ks1)) and tuple(g2.shape) == (4, 6, 8) and
         np.array_equal(g2.reshape(-1, 8).numpy(),
                        vecs(model, 1, [int(k) for k in nc2.reshape(-1)])), names[10])
    half = ht.LookupLayer(conf, "m", 1, 8, dtype=torch.float16)
    got = half(keys)
    t.ok(got.dtype == torch.float16 and tuple(got.shape) == (4, 6, 8) and
         np.array_equal(got.reshape(-1, 8).numpy(), vecs(model, 1, ks1).astype(np.float16)),
         names[7], repr(half))
    raises(t, lambda: ht.LookupLayer(conf, "m", 1, 8, dtype=torch.int8), names[8],
           hps.HPS_EINVAL)
    raises(t, lambda: torch.jit.trace(layer, keys), names[11], hps.HPS_EINVAL, "traced")
    copies = [pickle.loads(pickle.dumps(layer)), copy.deepcopy(torch.nn.Sequential(layer))[0]]
    t.ok(all(not cp._clients and cp is not layer and
             np.array_equal(cp(keys).reshape(-1, 8).numpy(), vecs(model, 1, ks1)) and
             cp._client(cp._host_device) is layer._client(layer._host_device) for cp in copies),
         names[9])


def shared_segment(t, cl, model, conf, c, w):
    rng = random.Random(21)
    pool = [pdb_half(model, i, 1) for i in range(3)]
    for p in pool:
        rng.shuffle(p)
    # PDB-only keys through the Python client: elevated into the shared VDB.
    kpt = [[pool[i].pop() for _ in range(15)] + rng.sample(model.vdb_keys(i, RATE), 10) +
           model.unknown_keys(i, 2, 300) for i in range(3)]
    keys, numkeys = H.split_keys(kpt)
    want = flat(model, kpt)
    rows0 = cl.vdb_rows()
    got = c.lookup_multi("m", np.array(keys, dtype=np.int64), numkeys)
    t.ok(np.array_equal(got, want), "Python client: PDB-only keys of 3 tables exact",
         mismatch(got, want))
    cl.wait_vdb_rows(rows0 + 45)  # inserted just after the answer
    c0 = H.hps_counters(w.metrics_port, "m")
    _, g = H.decode_output(H.infer(w.http_port, "m", kpt, binary=True))
    t.ok(g == model.expected(kpt), "hps-worker on the same segment: the same request exact",
         H.first_mismatch(g, model.expected(kpt), model, kpt))
    t.ok(np.array_equal(np.array(g, dtype=np.float32), got),
         "the Python client and hps-worker answer bit for bit alike")
    d = H.diff(H.hps_counters(w.metrics_port, "m"), c0)
    t.eq((d["volatile_db_hit_keys"], d["persistent_db_hit_keys"], d["default_value_keys"]),
         (75, 0, 6), "keys the Python client elevated are volatile-DB hits for the worker")
    # And the other way round.
    kpt = [[pool[i].pop() for _ in range(12)] for i in range(3)]
    rows0 = cl.vdb_rows()
    H.decode_output(H.infer(w.http_port, "m", kpt, binary=True))
    cl.wait_vdb_rows(rows0 + 36)
    c0 = c.counters("m")
    got = c.lookup_multi("m", np.array(H.split_keys(kpt)[0], dtype=np.int64),
                         [12, 12, 12])
    c1 = c.counters("m")
    t.ok(np.array_equal(got, flat(model, kpt)), "Python client: keys the worker elevated exact")
    t.eq((c1["vdb_hits"] - c0["vdb_hits"], c1["lower_hits"] - c0["lower_hits"]), (36, 0),
         "keys the worker elevated are volatile-DB hits for the Python client")
    info = cl.shm_info()
    procs = {p["pid"]: p["role"] for p in info["processes"]}
    t.ok(os.getpid() in procs and w.pid in procs,
         "hps-shm info lists the Python process (role %s) and the worker" %
         procs.get(os.getpid()), repr(info["processes"]))


def kill_child(t, cl, model, conf, c, w):
    rng = random.Random(5)
    tables = [0, 1, 2, 0]
    data = {"tables": np.array(tables, dtype=np.int64)}
    for b, i in enumerate(tables):
        ks = rng.sample(model.file_keys[i], 48) + model.unknown_keys(i, 2, 50 + b)
        data["k%d" % b] = np.array(ks, dtype=np.int64)
        data["w%d" % b] = vecs(model, i, ks)
    npz = cl.path("child.npz")
    np.savez(npz, **data)
    script = cl.path("child.py")
    with open(script, "w") as f:
        f.write(CHILD)
    child = cl._spawn("pyclient", [sys.executable, script, conf, npz], "pyclient.log")

    def lookups():
        n = 0
        for line in child.log().splitlines():
            if line.startswith("LOOKUPS "):
                n = int(line.split()[1])
        return n
    started = H.wait_until(lambda: lookups() >= 200 or not child.alive(), 30.0, 0.05)
    t.ok(started and child.alive() and "MISMATCH" not in child.log(),
         "child Python client looping, exact (%d lookups)" % lookups(), child.log()[-2000:])
    t.ok(child.pid in {p["pid"] for p in cl.shm_info()["processes"]},
         "hps-shm info lists the child Python client")

    s = Streamer(w.http_port, model, 9)
    s.start()
    try:
        time.sleep(0.7)
        n_kill = s.ok
        before = lookups()
        time.sleep(0.2)
        t.ok(lookups() > before, "the child is mid-stream when it is killed (%d -> %d lookups)" %
             (before, lookups()))
        child.kill()
        t_kill = time.monotonic()
        st = child.wait(10)
        t.ok(st is not None and st < 0, "child died of SIGKILL (status %s)" % st)

        def gone():
            try:
                return child.pid not in {p["pid"] for p in cl.shm_info()["processes"]}
            except RuntimeError:
                return False
        reaped = H.wait_until(gone, 8.0, 0.1)
        dt = time.monotonic() - t_kill
        t.ok(reaped, "the dead Python client left the segment's process table within %.1f s" %
             dt)
        n_reap = s.ok
        time.sleep(0.7)
    finally:
        s.stop_ev.set()
        s.join(15)
    t.ok(not s.failures and s.ok > n_reap > n_kill,
         "hps-worker answered all %d requests exactly (%d after the kill, %d after the reap)" %
         (s.ok, s.ok - n_kill, s.ok - n_reap), "\n".join(s.failures[:5]))
    ks = rng.sample(model.file_keys[1], 64)
    got = c.lookup("m", 1, np.array(ks, dtype=np.int64))
    t.ok(np.array_equal(got, vecs(model, 1, ks)), "the parent's Python client is exact after "
         "the kill")
    t.ok(w.alive(), "hps-worker still running")


def model32(t, cl):
    seg = cl.new_segment_name("k32")
    model = cl.gen_model("m32", rows=[3000, 1000], dims=[4, 2], defaults=[0.5, -2.0],
                         key_bytes=4, segment=seg)
    conf = cl.write_config("hps32.ini", model.ini_text, [
        ("volatile_db", "initial_cache_rate", RATE),
        ("volatile_db", "cache_missed_embeddings", "true"),
    ])
    cl.start_coordinator(conf)
    with hps.Client(conf, -1) as c:
        t.ok(c.wait_ready(20000), "32-bit model: client ready")
        t.eq([x["key_bytes"] for x in c.tables("m32")], [4, 4], "32-bit model: key_bytes 4")
        ks = (model.vdb_keys(0, RATE)[:20] + model.pdb_only_keys(0, RATE)[:10] +
              model.unknown_keys(0, 4, 3))
        got = c.lookup("m32", 0, np.array(ks, dtype=np.int64))
        t.ok(np.array_equal(got, vecs(model, 0, ks)),
             "32-bit model, int64 keys: VDB, PDB-only, unknown and out-of-range keys exact",
             mismatch(got, vecs(model, 0, ks)))
        small = [k for k in model.file_keys[1] if k < 2 ** 31][:30]
        got = c.lookup("m32", 1, np.array(small, dtype=np.int32))
        t.ok(np.array_equal(got, vecs(model, 1, small)),
             "32-bit model, int32 keys below 2^31 exact", mismatch(got, vecs(model, 1, small)))
        big = [k for k in model.file_keys[1] if k >= 2 ** 31][:30]
        got = c.lookup("m32", 1, np.array(big, dtype=np.uint32).view(np.int32))
        t.ok(np.array_equal(got, vecs(model, 1, big)),
             "32-bit model, int32 keys carrying uint32 keys >= 2^31 (bit pattern) exact",
             mismatch(got, vecs(model, 1, big)))
        got = c.lookup("m32", 1, np.array(small + big, dtype=np.uint32))
        t.ok(np.array_equal(got, vecs(model, 1, small + big)),
             "32-bit model, numpy uint32 keys (HugeCTR's unsigned int) exact",
             mismatch(got, vecs(model, 1, small + big)))
        h = hps.HPS(conf)
        try:
            got = h.lookup(np.array(big, dtype=np.uint32), "m32", 1, device_id=-1)
            t.ok(np.array_equal(got, vecs(model, 1, big)),
                 "32-bit model: hps.HPS.lookup of uint32 keys >= 2^31 exact")
        finally:
            h.close()
        kpt = [ks, small + big]
        keys, numkeys = H.split_keys(kpt)
        ku = [[k for k in x if 0 <= k < 2 ** 32] for x in kpt]
        keys_u, numkeys_u = H.split_keys(ku)
        got = c.lookup_multi("m32", np.array(keys_u, dtype=np.uint32), numkeys_u)
        t.ok(np.array_equal(got, flat(model, ku)), "32-bit model: lookup_multi of uint32 keys",
             mismatch(got, flat(model, ku)))
        got = c.lookup_multi("m32", np.array(keys, dtype=np.int64), numkeys)
        t.ok(np.array_equal(got, flat(model, kpt)), "32-bit model: lookup_multi exact",
             mismatch(got, flat(model, kpt)))
        if torch is not None:
            got = c.lookup("m32", 1, torch.tensor(small, dtype=torch.int32))
            t.ok(np.array_equal(got.numpy(), vecs(model, 1, small)),
                 "32-bit model: torch int32 tensor exact")
        else:
            skip(t, "32-bit model: torch int32 tensor exact", "no torch")


def bf16_bits(a):
    """bfloat16 bit patterns (uint16) of float32 array a rounded to nearest
    even (no NaN in a): this test's own reference."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7fff + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def typed(t, model, c):
    """dtype= / half outputs: the float32 vectors rounded to nearest even."""
    rng = random.Random(11)
    ks = rng.sample(model.vdb_keys(0, RATE), 40) + model.unknown_keys(0, 3, 5)
    keys = np.array(ks, dtype=np.int64)
    want = vecs(model, 0, ks)
    got = c.lookup("m", 0, keys, dtype="float16")
    t.ok(isinstance(got, np.ndarray) and got.dtype == np.float16 and got.shape == want.shape and
         np.array_equal(got.view(np.uint16), want.astype(np.float16).view(np.uint16)),
         "dtype='float16': numpy float16 (43, 16), numpy's rounding of the float32 vectors "
         "bit for bit", mismatch(got, want.astype(np.float16)))
    o = np.empty((43, 16), np.float16)
    r = c.lookup("m", 0, keys, out=o, dtype=np.float16)
    t.ok(r is o and np.array_equal(o, want.astype(np.float16)),
         "out= numpy float16 with dtype=np.float16: written and returned")
    kpt = [rng.sample(model.vdb_keys(i, RATE), 7) for i in range(3)]
    fl = c.lookup_multi("m", np.array(sum(kpt, []), np.int64), [7, 7, 7], dtype=np.dtype("half"))
    t.ok(fl.dtype == np.float16 and np.array_equal(fl, flat(model, kpt).astype(np.float16)),
         "lookup_multi(dtype=np.dtype('half')): flat float16 exact")
    raises(t, lambda: c.lookup("m", 0, keys, dtype="bfloat16"),
           "dtype='bfloat16' for numpy keys without out= (numpy has no bfloat16)", hps.HPS_EINVAL)
    raises(t, lambda: c.lookup("m", 0, keys, dtype="int8"), "dtype='int8'", hps.HPS_EINVAL)
    raises(t, lambda: c.lookup("m", 0, keys, out=o, dtype="float32"),
           "a float16 out= with dtype='float32'", hps.HPS_EINVAL)
    if torch is None:
        skip(t, "torch CPU keys, dtype=torch.bfloat16", "no torch")
        return
    g = c.lookup("m", 0, torch.tensor(ks, dtype=torch.int64), dtype=torch.bfloat16)
    t.ok(isinstance(g, torch.Tensor) and g.dtype == torch.bfloat16 and
         np.array_equal(g.view(torch.int16).numpy().view(np.uint16), bf16_bits(want)),
         "torch CPU keys, dtype=torch.bfloat16: torch bfloat16 (43, 16), the float32 vectors "
         "rounded to nearest even bit for bit", repr(g)[:200])


def log_level(t, cl, model):
    """A client in a user's process logs at the INI's [hps] log_level."""
    prog = "import hps; c = hps.Client(%r, -1); c.wait_ready(10000); c.close()"
    for level, want_info in (("warn", False), ("info", True)):
        conf = cl.write_config("log-%s.ini" % level, model.ini_text,
                               [("hps", "log_level", level)])
        r = subprocess.run([sys.executable, "-c", prog % conf], capture_output=True, text=True,
                           timeout=60)
        t.ok(r.returncode == 0 and (" INFO " in r.stderr) == want_info,
             "log_level = %s: INFO lines %s" % (level, "printed" if want_info else "not printed"),
             r.stderr[-1000:])


def body(t, cl):
    model = cl.gen_model("m", rows=[6000, 3000, 2000], dims=[16, 8, 4],
                         defaults=[0.5, -2.0, 0.0])
    conf = cl.write_config("hps.ini", model.ini_text, [
        ("volatile_db", "initial_cache_rate", RATE),
        ("volatile_db", "cache_missed_embeddings", "true"),
        ("hps", "heartbeat_interval_ms", 50),
        ("hps", "worker_timeout_ms", WORKER_TIMEOUT_MS),
        ("worker", "miss_timeout_ms", 3000),
        ("worker", "http_threads", 2),
    ])
    # A client opened before the coordinator: attaches once the segment exists.
    c = hps.Client(conf, -1)
    t.ok(not c.ready(), "a client opened before the coordinator is not ready")
    cl.start_coordinator(conf)
    t.ok(c.wait_ready(20000), "... and becomes ready once the coordinator is up")
    try:
        basics(t, cl, model, conf, c)
        bad_input(t, cl, model, conf, c)
        log_level(t, cl, model)
        typed(t, model, c)
        with_torch(t, model, conf, c)
        w = cl.start_worker(conf, instance=0)
        shared_segment(t, cl, model, conf, c, w)
        kill_child(t, cl, model, conf, c, w)
        rc, out, err = cl.shm("check", cl.segment)
        t.ok(rc == 0, "hps-shm check passes", out + err)
    finally:
        c.close()
    t.ok(c.closed, "close(): the client is closed")
    raises(t, lambda: c.lookup("m", 0, np.zeros(1, np.int64)), "a lookup on a closed client")
    c.close()
    hps._close_shared()  # hps.torch.LookupLayer's clients (hps.shared_client)
    gone = H.wait_until(lambda: os.getpid() not in
                        {p["pid"] for p in cl.shm_info()["processes"]}, 5.0, 0.1)
    t.ok(gone, "after close() the process left the segment's process table")
    model32(t, cl)


if __name__ == "__main__":
    H.run_main("python_client", body)
