#!/usr/bin/env python3
"""
gpu-python: the Python module hps on a CUDA device, beside an hps-worker
(gpucache = true) on the same device.  Real processes; exit 77 (skip) where
no CUDA device is visible.  CUDA arrays come from torch where it imports with
CUDA, else (or with HPS_TEST_NO_TORCH=1) from a minimal ctypes DLPack
producer over libcudart, so the CUDA paths run without torch; the hps.torch
checks are then TAP SKIP lines.

  1. worker A creates the GPU caches; a Python client on device 0 maps
     them: cache_stats processes == 2, A's nv_hps_embedding_cache_processes
     == 2 for each table.
  2. CUDA int64 keys -> CUDA float32 output on the keys' device, exact;
     out= on the device; a caller's stream; hps.HPS.lookup_fromdlpack with
     CUDA capsules; hps.torch.LookupLayer on CUDA keys of shape (4, 8).
     Host keys on the device client are exact too.  CUDA keys on a
     host-only client, or with a host out=, raise hps.Error.
  3. One cache: rows the Python client inserted are hits for A, and rows A
     inserted are hits for the client.
  4. A child Python process (device client, lookups in a loop) is SIGKILLed
     mid-stream: A answers every request exactly; the child is reaped and
     the caches are mapped by 2 processes again.
  5. A is SIGKILLed while the Python client streams lookups in threads:
     every lookup exact; the client is alone on the caches (processes == 1)
     and their refresher.
"""
import ctypes
import glob
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402
from test_worker_gpu import cache_counters, have_gpu, total  # noqa: E402
from pyhps import mismatch, raises, skip, vecs  # noqa: E402

import numpy as np  # noqa: E402

import hps  # noqa: E402

try:
    import torch
    if not torch.cuda.is_available() or os.environ.get("HPS_TEST_NO_TORCH"):
        torch = None  # HPS_TEST_NO_TORCH=1: the ctypes CUDA arrays even with torch
except ImportError:
    torch = None

# ---- a minimal CUDA array with __dlpack__ (ctypes over libcudart) ---------


_CAPSULE_NAME = b"dltensor"
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_cudart = None


def cudart():
    global _cudart
    if _cudart is None:
        names = (["libcudart.so", "libcudart.so.12", "libcudart.so.11.0"] +
                 sorted(glob.glob("/usr/local/cuda*/lib64/libcudart.so*")) +
                 sorted(glob.glob("/usr/lib/x86_64-linux-gnu/libcudart.so*")))
        for n in names:
            try:
                _cudart = ctypes.CDLL(n)
                break
            except OSError:
                continue
        if _cudart is None:
            raise RuntimeError("libcudart not found (tried %s)" % names)
    return _cudart


class CudaArray:
    """A C-contiguous array in CUDA memory of device 0 (copied from a numpy
    array), exported through DLPack (no deleter: the object owns the memory
    and must outlive the capsules)."""

    _codes = {np.dtype(np.int64): (0, 64), np.dtype(np.int32): (0, 32),
              np.dtype(np.float32): (2, 32)}

    def __init__(self, a, device=0):
        a = np.ascontiguousarray(a)
        self.shape, self.dtype, self.device = a.shape, a.dtype, device
        self.nbytes = a.nbytes
        rt = cudart()
        rt.cudaSetDevice(device)
        self.ptr = ctypes.c_void_p()
        if rt.cudaMalloc(ctypes.byref(self.ptr), ctypes.c_size_t(max(self.nbytes, 1))) != 0:
            raise RuntimeError("cudaMalloc failed")
        self._check(rt.cudaMemcpy(self.ptr, a.ctypes.data_as(ctypes.c_void_p),
                                  ctypes.c_size_t(self.nbytes), 1))
        self._keep = []

    @staticmethod
    def _check(rc):
        if rc != 0:
            raise RuntimeError("CUDA runtime error %d" % rc)

    def __dlpack_device__(self):
        return (2, self.device)

    def __dlpack__(self, stream=None):
        shape = (ctypes.c_int64 * len(self.shape))(*self.shape)
        mt = H.DLManagedTensor()
        mt.dl_tensor.data = self.ptr.value
        mt.dl_tensor.device = H.DLDevice(2, self.device)
        mt.dl_tensor.ndim = len(self.shape)
        code, bits = self._codes[self.dtype]
        mt.dl_tensor.dtype = H.DLDataType(code, bits, 1)
        mt.dl_tensor.shape = shape
        mt.dl_tensor.strides = None
        mt.dl_tensor.byte_offset = 0
        mt.manager_ctx = None
        mt.deleter = H.DL_DELETER()  # NULL
        self._keep.append((mt, shape))
        return _capsule_new(ctypes.addressof(mt), _CAPSULE_NAME, None)

    def numpy(self):
        out = np.empty(self.shape, self.dtype)
        cudart().cudaDeviceSynchronize()
        self._check(cudart().cudaMemcpy(out.ctypes.data_as(ctypes.c_void_p), self.ptr,
                                        ctypes.c_size_t(self.nbytes), 2))
        return out

    def __del__(self):
        if getattr(self, "ptr", None) and self.ptr.value:
            cudart().cudaFree(self.ptr)
            self.ptr = ctypes.c_void_p()


def to_dev(a):
    return torch.from_numpy(np.ascontiguousarray(a)).cuda(0) if torch else CudaArray(a)


def dev_empty(shape):
    return (torch.empty(shape, dtype=torch.float32, device="cuda:0") if torch
            else CudaArray(np.zeros(shape, np.float32)))


def to_host(x):
    return x.cpu().numpy() if torch is not None and isinstance(x, torch.Tensor) else x.numpy()


def dev_lookup(c, model, t, ks):
    """Lookup of CUDA keys into a CUDA output, copied back: numpy (n, dim)."""
    keys = to_dev(np.array(ks, dtype=np.int64))
    if torch:
        return to_host(c.lookup("m", t, keys))
    return to_host(c.lookup("m", t, keys, out=dev_empty((len(ks), model.dims[t]))))


# ---- helpers ------------------------------------------------------------------

def procs_gauge(port):
    return [v for (tb, n), v in cache_counters(port, "m").items() if n == "processes"]


def client_procs(c):
    return [c.cache_stats("m", i)["processes"] for i in range(2)]


class Stream(threading.Thread):
    """Binary requests of random known keys to a worker until stopped."""

    def __init__(self, port, model, seed):
        super().__init__(daemon=True)
        self.port, self.model = port, model
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.sent = self.exact = 0
        self.bad = []

    def run(self):
        while not self.stop.is_set():
            kpt = [self.rng.sample(self.model.file_keys[i], 64) for i in range(2)]
            self.sent += 1
            try:
                _, got = H.decode_output(H.infer(self.port, "m", kpt, binary=True, timeout=5.0))
            except Exception as e:  # noqa: BLE001
                if len(self.bad) < 3:
                    self.bad.append(repr(e))
                continue
            if got == self.model.expected(kpt):
                self.exact += 1
            elif len(self.bad) < 3:
                self.bad.append(H.first_mismatch(got, self.model.expected(kpt)))


class ClientStream(threading.Thread):
    """Lookups of CUDA keys on the Python client until stopped; every answer
    checked."""

    def __init__(self, c, model, seed):
        super().__init__(daemon=True)
        self.c, self.model = c, model
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.sent = self.exact = 0
        self.bad = []

    def run(self):
        while not self.stop.is_set():
            i = self.rng.randrange(2)
            ks = self.rng.sample(self.model.file_keys[i], 128)
            self.sent += 1
            try:
                got = dev_lookup(self.c, self.model, i, ks)
            except Exception as e:  # noqa: BLE001
                if len(self.bad) < 3:
                    self.bad.append(repr(e))
                continue
            if np.array_equal(got, vecs(self.model, i, ks)):
                self.exact += 1
            elif len(self.bad) < 3:
                self.bad.append(mismatch(got, vecs(self.model, i, ks)))


CHILD = r"""
import sys, numpy as np, hps
conf, data = sys.argv[1], sys.argv[2]
z = np.load(data)
batches = [(int(t), z["k%d" % i], z["w%d" % i]) for i, t in enumerate(z["tables"])]
c = hps.Client(conf, 0)
if not c.wait_ready(30000):
    print("NOT READY", flush=True)
    sys.exit(2)
print("READY", flush=True)
n = 0
while True:
    for t, k, w in batches:
        if not np.array_equal(c.lookup("m", t, k), w):
            print("MISMATCH", flush=True)
            sys.exit(1)
        n += 1
        if n % 50 == 0:
            print("LOOKUPS %d" % n, flush=True)
"""


# ---- the scenario ----------------------------------------------------------------

def cuda_lookups(t, model, conf, c):
    rng = random.Random(2)
    maker = "torch" if torch else "ctypes CudaArray"
    ks = rng.sample(model.file_keys[0], 300) + model.unknown_keys(0, 4, 1)
    keys = to_dev(np.array(ks, dtype=np.int64))
    # a call of table 0 of two (the one-launch lookup is given table 1 with
    # no keys): its counts land in table 0's cache only
    l0 = [c.cache_stats("m", i)["lookups"] for i in range(2)]
    c.lookup("m", 0, keys, out=dev_empty((304, 32)))
    l1 = [c.cache_stats("m", i)["lookups"] for i in range(2)]
    t.eq([l1[0] - l0[0], l1[1] - l0[1]], [304, 0],
         "a lookup of table 0: 304 lookups counted in table 0's cache, none in table 1's")
    if torch:
        out = c.lookup("m", 0, keys)
        t.ok(isinstance(out, torch.Tensor) and out.is_cuda and out.device == keys.device and
             out.dtype == torch.float32 and tuple(out.shape) == (304, 32),
             "torch CUDA int64 keys -> torch CUDA float32 (304, 32) on the keys' device",
             repr((type(out), getattr(out, "device", None), getattr(out, "shape", None))))
    else:
        raises(t, lambda: c.lookup("m", 0, keys),
               "CUDA keys of an unknown producer without out=")
        out = c.lookup("m", 0, keys, out=dev_empty((304, 32)))
    got = to_host(out)
    t.ok(np.array_equal(got, vecs(model, 0, ks)),
         "CUDA keys (%s): exact, unknown keys the default" % maker,
         mismatch(got, vecs(model, 0, ks)))
    for dt in ((torch.float16, torch.bfloat16) if torch else ()):
        # the device conversion (kernels/convert.cu) against torch's CPU rounding
        h = c.lookup("m", 0, keys, dtype=dt)
        ref = torch.from_numpy(vecs(model, 0, ks)).to(dt)
        t.ok(isinstance(h, torch.Tensor) and h.is_cuda and h.device == keys.device and
             h.dtype == dt and torch.equal(h.cpu().view(torch.int16), ref.view(torch.int16)),
             "CUDA keys, dtype=%s: a CUDA tensor of the float32 vectors rounded to nearest "
             "even, bit for bit" % dt, repr(h)[:200])
    o = dev_empty((304, 32))
    r = c.lookup("m", 0, keys, out=o)
    t.ok(r is o and np.array_equal(to_host(o), vecs(model, 0, ks)), "CUDA out= written in "
         "place and returned")
    if torch:
        s = torch.cuda.Stream(device=0)
        with torch.cuda.stream(s):
            k2 = keys.clone()
            r = c.lookup("m", 0, k2, stream=s)
        s.synchronize()
        t.ok(np.array_equal(to_host(r), vecs(model, 0, ks)),
             "torch keys made on a side stream, looked up on it (stream=torch.cuda.Stream)")
        r = c.lookup("m", 0, keys, stream=s.cuda_stream)
        t.ok(np.array_equal(to_host(r), vecs(model, 0, ks)),
             "the lookup on another stream than the keys' (stream=int)")
    else:
        r = c.lookup("m", 0, keys, out=dev_empty((304, 32)), stream=0)
        t.ok(np.array_equal(to_host(r), vecs(model, 0, ks)), "stream=0 (legacy default)")
    h = hps.HPS(conf)
    o = dev_empty((304, 32))
    if torch:
        from torch.utils.dlpack import to_dlpack
        h.lookup_fromdlpack(to_dlpack(keys), to_dlpack(o), "m", 0, device_id=0)
    else:
        h.lookup_fromdlpack(keys.__dlpack__(), o.__dlpack__(), "m", 0, device_id=0)
    t.ok(np.array_equal(to_host(o), vecs(model, 0, ks)),
         "hps.HPS.lookup_fromdlpack with CUDA capsules, device_id 0")
    h.close()
    hk = np.array(ks, dtype=np.int64)
    got = c.lookup("m", 0, hk)
    t.ok(isinstance(got, np.ndarray) and np.array_equal(got, vecs(model, 0, ks)),
         "host keys on a device client: numpy output, exact")
    raises(t, lambda: c.lookup("m", 0, keys, out=np.empty((304, 32), np.float32)),
           "CUDA keys with a host out=")
    with hps.Client(conf, -1) as hc:
        raises(t, lambda: hc.lookup("m", 0, keys), "CUDA keys on a host-only client")
    ks1 = rng.sample(model.file_keys[1], 32)
    if torch:
        import importlib
        ht = importlib.import_module("hps.torch")
        layer = ht.LookupLayer(conf, "m", 1, 8)
        k = torch.tensor(ks1, dtype=torch.int64, device="cuda:0").reshape(4, 8)
        r = layer(k)
        t.ok(r.is_cuda and tuple(r.shape) == (4, 8, 8) and
             np.array_equal(to_host(r).reshape(-1, 8), vecs(model, 1, ks1)),
             "hps.torch.LookupLayer on CUDA keys (4, 8): CUDA (4, 8, 8), exact")
        k32 = torch.tensor([1, -2], dtype=torch.int32, device="cuda:0")
        r = c.lookup("m", 1, k32)
        t.ok(r.is_cuda and bool((r == -1.0).all()), "CUDA int32 keys (not in the table): "
             "the default")
        n, t0 = 2000, time.perf_counter()
        for _ in range(n):
            layer(k)
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / n
        c0 = c.counters("m")
        for _ in range(n):
            c.lookup("m", 1, k.reshape(-1))
        c1 = c.counters("m")
        inside = (c1["lookup_ns"] - c0["lookup_ns"]) / max(1, c1["lookup_calls"] -
                                                           c0["lookup_calls"]) / 1e9
        t.diag("LookupLayer on 32 CUDA keys: %.1f us per call; inside libhps %.1f us" %
               (dt * 1e6, inside * 1e6))
    else:
        skip(t, "hps.torch.LookupLayer on CUDA keys (4, 8): CUDA (4, 8, 8), exact", "no torch")
        skip(t, "CUDA int32 keys (not in the table): the default", "no torch")


def one_cache(t, model, c, wa):
    rng = random.Random(3)
    # Keys not preloaded (gpucacheper < 1): the client's misses are inserted.
    ks = [rng.sample(model.file_keys[i], 1500) for i in range(2)]
    for i in range(2):
        dev_lookup(c, model, i, ks[i])
    c0 = cache_counters(wa.metrics_port, "m")
    _, got = H.decode_output(H.infer(wa.http_port, "m", ks, binary=True))
    c1 = cache_counters(wa.metrics_port, "m")
    t.ok(got == model.expected(ks), "A: exact")
    t.eq(total(c1, "hit_keys") - total(c0, "hit_keys"), 3000,
         "A: every key the Python client looked up is a GPU hit (one cache)")
    ks = [rng.sample(model.file_keys[i], 1000) for i in range(2)]
    H.decode_output(H.infer(wa.http_port, "m", ks, binary=True))
    s0 = [c.cache_stats("m", i)["hits"] for i in range(2)]
    for i in range(2):
        got = dev_lookup(c, model, i, ks[i])
        t.ok(np.array_equal(got, vecs(model, i, ks[i])), "client, table %d: exact" % i)
    s1 = [c.cache_stats("m", i)["hits"] for i in range(2)]
    t.eq([s1[i] - s0[i] for i in range(2)], [1000, 1000],
         "client: every key A looked up is a hit in the client's cache_stats")


def kill_child(t, cl, model, conf, c, wa):
    rng = random.Random(5)
    tables = [0, 1, 0]
    data = {"tables": np.array(tables, dtype=np.int64)}
    for b, i in enumerate(tables):
        ks = rng.sample(model.file_keys[i], 256) + model.unknown_keys(i, 2, 10 + b)
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
    H.wait_until(lambda: lookups() >= 100 or not child.alive(), 60.0, 0.05)
    t.ok(child.alive() and lookups() >= 100 and "MISMATCH" not in child.log(),
         "child Python client (device 0) looping, exact (%d lookups)" % lookups(),
         child.log()[-2000:])
    t.ok(H.wait_until(lambda: procs_gauge(wa.metrics_port) == [3, 3], 10.0, 0.1),
         "A, the Python client and the child map each cache (3 processes)",
         procs_gauge(wa.metrics_port))
    s = Stream(wa.http_port, model, 1)
    s.start()
    time.sleep(1.0)
    child.kill()
    st = child.wait(10)
    t.ok(st is not None and st < 0, "child SIGKILLed mid-stream (status %s)" % st)
    reaped = H.wait_until(lambda: child.pid not in
                          {p["pid"] for p in cl.shm_info()["processes"]}, 10.0, 0.1)
    t.ok(reaped, "the dead child left the segment's process table")
    time.sleep(1.0)
    s.stop.set()
    s.join(10)
    t.ok(s.sent > 10 and s.exact == s.sent,
         "A answered all %d requests exactly while the child died" % s.sent, s.bad)
    t.ok(H.wait_until(lambda: procs_gauge(wa.metrics_port) == [2, 2], 10.0, 0.2),
         "A: 2 processes map each cache again", procs_gauge(wa.metrics_port))


def kill_worker(t, cl, model, c, wa):
    streams = [ClientStream(c, model, 10 + i) for i in range(2)]
    for s in streams:
        s.start()
    time.sleep(1.0)
    wa.kill()
    st = wa.wait(10)
    t.ok(st is not None and st < 0, "worker A SIGKILLed (status %s)" % st)
    time.sleep(3.0)
    for s in streams:
        s.stop.set()
    for s in streams:
        s.join(20)
    sent = sum(s.sent for s in streams)
    exact = sum(s.exact for s in streams)
    t.ok(sent > 20 and exact == sent,
         "the Python client answered all %d lookups exactly while A was killed" % sent,
         [b for s in streams for b in s.bad])
    t.ok(H.wait_until(lambda: client_procs(c) == [1, 1], 10.0, 0.2),
         "the client is alone on the caches (processes == 1)", client_procs(c))
    t.ok(H.wait_until(lambda: all(c.cache_stats("m", i)["refresher"] for i in range(2)),
                      10.0, 0.2), "the client refreshes the caches now")
    ks = random.Random(8).sample(model.file_keys[1], 500)
    got = dev_lookup(c, model, 1, ks)
    t.ok(np.array_equal(got, vecs(model, 1, ks)), "the client is exact after A's death")


def body(t, cl):
    model = cl.gen_model("m", rows=[60000, 20000], dims=[32, 8], defaults=[0.25, -1.0])
    conf = cl.write_config("pygpu.ini", model.ini_text, [
        ("volatile_db", "initial_cache_rate", 1.0), ("hps", "heartbeat_interval_ms", 50),
        ("hps", "worker_timeout_ms", 500), ("worker", "http_threads", 2),
        ("model.m", "gpucache", "true"), ("model.m", "gpucacheper", 0.3),
        ("model.m", "hit_rate_threshold", 2.0)])
    cl.start_coordinator(conf)
    wa = cl.start_worker(conf, instance=0)
    c = hps.Client(conf, 0)
    try:
        t.ok(c.wait_ready(30000), "Python client on device 0 ready")
        t.eq(c.device, 0, "client.device == 0")
        t.ok(c.model_info("m")["gpu_cache"], "model_info: served from GPU caches")
        t.eq(client_procs(c), [2, 2], "client.cache_stats: 2 processes map each cache")
        t.ok(H.wait_until(lambda: procs_gauge(wa.metrics_port) == [2, 2], 5.0, 0.1),
             "A: nv_hps_embedding_cache_processes == 2 for each table",
             procs_gauge(wa.metrics_port))
        cuda_lookups(t, model, conf, c)
        one_cache(t, model, c, wa)
        kill_child(t, cl, model, conf, c, wa)
        kill_worker(t, cl, model, c, wa)
    finally:
        c.close()
        hps._close_shared()


if __name__ == "__main__":
    if not have_gpu():
        print("1..0 # SKIP no CUDA device visible")
        sys.exit(77)
    H.run_main("gpu-python", body)
