#!/usr/bin/env python3
"""
gpu-cudashm: the CUDA shared-memory extension of hps-worker, end to end.

A client process (cudashm-client) allocates 2 MiB of device memory filled
with 0xA5 and hands out its cudaIpcMemHandle (base64); hps-coordinator and
one hps-worker serve a generated 2-table model.  Checked:
  - registration errors, each a 400 with its exact message: base64 that is
    not a 64-byte handle, a device the server does not have, a handle that
    does not open, byte_size 0, byte_size one byte past the allocation
    (cuMemGetAddressRange) and far past it; none leaves a region behind;
  - register, the same name again (400), status (all / by name / as system
    shared memory: 404 with Triton's message);
  - OUTPUT0 into the region at an offset: the response carries no data,
    only the region's parameters; the region's bytes equal the JSON
    output's values packed as float32 and the binary output, byte for byte,
    and the bytes around the window are untouched;
  - KEYS read from the region (device to host) give the same output;
  - bounds at use: offset past the end, offset + size past the end (400),
    an output window too small (500, Triton's INTERNAL);
  - unregister through the system endpoint is a no-op; unregister, then
    an inference naming the region: 404; unregister-all empties the status;
  - 4 client threads write OUTPUT0 into 'out' while the main thread
    unregisters and re-registers it 40 times (the handle is also open as
    'alias' all along): every answer is 200 or the 404 of an unknown region,
    the worker survives, and 'alias' still maps the memory afterwards;
  - a second worker in GPU mode (gpucache = true) writes OUTPUT0 straight
    from its GPU cache into the region (hits by the lookup kernel, misses
    scattered from the host; nv_hps_embedding_cache_query_keys counts every
    key): the region's bytes equal the JSON output, byte for byte, on the
    first request (misses inserted) and the second (all hits).
Exit 77 (skip) when the client finds no CUDA device.
"""
import base64
import json
import os
import select
import struct
import subprocess
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import hpstest as H  # noqa: E402

CLIENT = os.environ.get("CUDASHM_CLIENT", "")
ALLOC = 2 * 1024 * 1024
FILL = 0xA5


class Client:
    """cudashm-client: one device allocation, commands over stdin/stdout."""

    def __init__(self, size):
        self.p = subprocess.Popen([CLIENT, str(size)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.buf = b""
        self.info = {}
        while True:
            line = self.line(60.0)
            key, _, val = line.partition(" ")
            self.info[key] = val
            if key in ("HANDLE", "NODEVICE", "ERR"):
                break

    def line(self, timeout):
        """One output line, waiting at most timeout seconds."""
        fd = self.p.stdout.fileno()
        while b"\n" not in self.buf:
            r, _, _ = select.select([fd], [], [], timeout)
            chunk = os.read(fd, 4096) if r else b""
            if not chunk:
                raise RuntimeError("cudashm-client: no answer (exit %s), got %r" %
                                   (self.p.poll(), self.buf))
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode().strip()

    def cmd(self, text):
        self.p.stdin.write((text + "\n").encode())
        self.p.stdin.flush()
        ans = self.line(30.0)
        if ans != "OK":
            raise RuntimeError("cudashm-client %r: %s" % (text, ans))

    def dump(self, path, offset, size):
        self.cmd("dump %d %d %s" % (offset, size, path))
        with open(path, "rb") as f:
            return f.read()

    def load(self, path, offset, data):
        with open(path, "wb") as f:
            f.write(data)
        self.cmd("load %d %s" % (offset, path))

    def close(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.write(b"quit\n")
                self.p.stdin.flush()
                self.p.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.p.kill()
                self.p.wait(10)


def post(w, path, body=b""):
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    return H.http(w.http_port, "POST", path, body)


def register(w, name, handle, byte_size, device=0):
    return post(w, "/v2/cudasharedmemory/region/%s/register" % name,
                {"raw_handle": {"b64": handle}, "device_id": device, "byte_size": byte_size})


def status(w, name=None, kind="cuda"):
    path = "/v2/%ssharedmemory%s/status" % (kind, "/region/" + name if name else "")
    return H.http(w.http_port, "GET", path)


def check_error(t, r, code, msg, desc, prefix=False):
    got = r.json().get("error") if r.is_json_error() else None
    ok = r.status == code and got is not None and (got.startswith(msg) if prefix else got == msg)
    t.ok(ok, "%s: %d %s" % (desc, code, msg), r)


def infer_body(kpt, keys_param=None, out_param=None):
    keys, numkeys = H.split_keys(kpt)
    kin = {"name": "KEYS", "shape": [1, len(keys)], "datatype": "INT64"}
    if keys_param:
        kin["parameters"] = keys_param
    else:
        kin["data"] = keys
    req = {"id": "c", "inputs": [kin, {"name": "NUMKEYS", "shape": [1, len(numkeys)],
                                       "datatype": "INT32", "data": numkeys}]}
    if out_param:
        req["outputs"] = [{"name": "OUTPUT0", "parameters": out_param}]
    return json.dumps(req).encode()


def infer(w, body):
    return H.http(w.http_port, "POST", "/v2/models/m/infer", body)


def out_param(size, offset):
    return {"binary_data": False, "shared_memory_region": "out",
            "shared_memory_byte_size": size, "shared_memory_offset": offset}


def check_register_errors(t, w, cl, handle, ndev):
    bad = base64.b64encode(b"\0" * 48).decode()
    check_error(t, register(w, "x", bad, 4096), 400,
                "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t",
                "a 48-byte handle")
    check_error(t, register(w, "x", handle[:-2] + "!=", 4096), 400,
                "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t",
                "a handle that is not base64")
    check_error(t, register(w, "x", handle, 4096, device=ndev), 400,
                "failed to register CUDA shared memory region 'x': invalid device_id %d: this "
                "server sees %d CUDA device(s)" % (ndev, ndev), "a device the server lacks")
    check_error(t, register(w, "x", base64.b64encode(b"\x01" * 64).decode(), 4096), 400,
                "failed to register CUDA shared memory region 'x': failed to open CUDA IPC "
                "handle: ", "a handle that does not open", prefix=True)
    check_error(t, register(w, "x", handle, 0), 400,
                "failed to register CUDA shared memory region 'x': invalid args: byte_size 0",
                "byte_size 0")
    for size in (ALLOC + 1, 64 * ALLOC):
        check_error(t, register(w, "x", handle, size), 400,
                    "failed to register CUDA shared memory region 'x': invalid args: byte_size "
                    "%d is larger than the CUDA allocation (%d bytes)" % (size, ALLOC),
                    "byte_size %d past the allocation" % size)
    r = status(w)
    t.ok(r.status == 200 and r.json() == [], "failed registrations leave no region", r)


def check_register(t, w, handle):
    r = register(w, "out", handle, ALLOC)
    t.eq(r.status, 200, "register 'out' (2 MiB, device 0)")
    check_error(t, register(w, "out", handle, ALLOC), 400,
                "shared memory region 'out' already in manager", "the same name again")
    want = [{"name": "out", "device_id": 0, "byte_size": ALLOC}]
    r = status(w)
    t.ok(r.status == 200 and r.json() == want, "status lists the region", r)
    r = status(w, "out")
    t.ok(r.status == 200 and r.json() == want, "status of 'out'", r)
    check_error(t, status(w, "out", kind="system"), 404,
                "The region named 'out' is registered as CUDA shared memory, not system "
                "shared memory", "system status of a CUDA region")
    r = status(w, kind="system")
    t.ok(r.status == 200 and r.json() == [], "system status lists no CUDA region", r)
    meta = H.http(w.http_port, "GET", "/v2").json()
    t.ok("cuda_shared_memory" in meta["extensions"], "cuda_shared_memory advertised", meta)


def check_output(t, cl, w, cli, model, kpt):
    nbytes = sum(len(ks) * d for ks, d in zip(kpt, model.dims)) * 4
    _, jvals = H.decode_output(infer(w, infer_body(kpt)))
    rb = H.infer(w.http_port, "m", kpt, binary=True)
    _, bvals = H.decode_output(rb)
    blob = rb.body[int(rb.headers["inference-header-content-length"]):]
    want = model.expected(kpt)
    t.ok(jvals == want, "JSON output exact", H.first_mismatch(jvals, want))
    off = 4096 + 12
    r = infer(w, infer_body(kpt, out_param=out_param(nbytes + 8, off)))
    t.eq(r.status, 200, "OUTPUT0 into the CUDA region")
    out = r.json()["outputs"][0] if r.status == 200 else {}
    t.eq(out, {"name": "OUTPUT0", "datatype": "FP32", "shape": [nbytes // 4],
               "parameters": {"shared_memory_region": "out", "shared_memory_byte_size": nbytes + 8,
                              "shared_memory_offset": off}},
         "the response names the region and carries no data")
    got = cli.dump(cl.path("out.bin"), off, nbytes)
    packed = struct.pack("<%df" % len(jvals), *jvals)
    t.ok(got == packed, "region bytes == JSON output packed as float32, byte for byte (%d bytes)"
         % nbytes)
    t.ok(got == blob, "region bytes == binary output, byte for byte")
    around = cli.dump(cl.path("a.bin"), 0, off) + cli.dump(cl.path("b.bin"), off + nbytes, 4096)
    t.ok(around == bytes([FILL]) * len(around), "bytes around the window untouched")
    return jvals


def check_keys_input(t, cl, w, cli, kpt, jvals):
    keys, _ = H.split_keys(kpt)
    koff = ALLOC - 8 * len(keys) - 24
    cli.load(cl.path("keys.bin"), koff, struct.pack("<%dq" % len(keys), *keys))
    kp = {"shared_memory_region": "out", "shared_memory_byte_size": 8 * len(keys),
          "shared_memory_offset": koff}
    _, got = H.decode_output(infer(w, infer_body(kpt, keys_param=kp)))
    t.ok(got == jvals, "KEYS from the CUDA region: same output", H.first_mismatch(got, jvals))


def check_bounds(t, w, kpt, nbytes):
    check_error(t, infer(w, infer_body(kpt, out_param=out_param(nbytes, ALLOC))), 400,
                "Invalid offset for shared memory region: 'out'", "output offset past the end")
    check_error(t, infer(w, infer_body(kpt, out_param=out_param(nbytes, ALLOC - nbytes + 4))),
                400, "Invalid offset + byte size for shared memory region: 'out'",
                "output offset + size past the end")
    check_error(t, infer(w, infer_body(kpt, out_param=out_param(nbytes - 4, 0))), 500,
                "shared memory size specified with the request for output 'OUTPUT0' (%d bytes) "
                "should be at least %d bytes to hold the results" % (nbytes - 4, nbytes),
                "output window too small")


def check_unregister(t, w, handle, kpt, nbytes):
    t.eq(post(w, "/v2/systemsharedmemory/region/out/unregister").status, 200,
         "system unregister of a CUDA region: 200")
    t.eq(len(status(w).json()), 1, "... and a no-op")
    t.eq(post(w, "/v2/cudasharedmemory/region/out/unregister").status, 200, "unregister 'out'")
    r = status(w)
    t.ok(r.status == 200 and r.json() == [], "status empty after unregister", r)
    check_error(t, infer(w, infer_body(kpt, out_param=out_param(nbytes, 0))), 404,
                "Unable to find shared memory region: 'out'", "inference naming it")
    check_error(t, status(w, "out"), 404, "Unable to find cuda shared memory region: 'out'",
                "status of an unregistered region")
    t.eq(register(w, "out", handle, ALLOC).status, 200, "register again after unregister")
    t.eq(post(w, "/v2/cudasharedmemory/unregister").status, 200, "unregister all")
    r = status(w)
    t.ok(r.status == 200 and r.json() == [], "status empty after unregister all", r)


def stress(w, kpt, nbytes, stop, counts, bad):
    body = infer_body(kpt, out_param=out_param(nbytes, 0))
    while not stop.is_set():
        r = infer(w, body)
        if r.status == 200:
            counts[0] += 1
        elif r.status == 404 and r.is_json_error() and \
                r.json()["error"] == "Unable to find shared memory region: 'out'":
            counts[1] += 1
        else:
            bad.append(r)


def check_concurrent_unregister(t, cl, w, cli, handle, kpt, nbytes, packed):
    t.eq(register(w, "alias", handle, ALLOC).status, 200, "the same handle as 'alias'")
    t.eq(register(w, "out", handle, ALLOC).status, 200, "register 'out' for the stress")
    stop, bad, counts = threading.Event(), [], [[0, 0] for _ in range(4)]
    th = [threading.Thread(target=stress, args=(w, kpt, nbytes, stop, counts[i], bad))
          for i in range(4)]
    for x in th:
        x.start()
    regs = []
    try:
        for _ in range(40):
            post(w, "/v2/cudasharedmemory/region/out/unregister")
            regs.append(register(w, "out", handle, ALLOC).status)
    finally:
        stop.set()
        for x in th:
            x.join(60)
    ok, missing = sum(c[0] for c in counts), sum(c[1] for c in counts)
    t.ok(not bad and not any(x.is_alive() for x in th),
         "4 threads x infer during 40 unregister/register: only 200 and 404 (%d, %d)"
         % (ok, missing), bad[:3])
    t.eq(regs, [200] * 40, "every re-registration succeeded")
    t.ok(ok > 0, "inferences succeeded during the stress (%d)" % ok)
    alias = dict(out_param(nbytes, 0), shared_memory_region="alias")
    r = infer(w, infer_body(kpt, out_param=alias))
    t.eq(r.status, 200, "OUTPUT0 into 'alias' after the stress")
    t.ok(cli.dump(cl.path("alias.bin"), 0, nbytes) == packed,
         "'alias' still maps the memory: bytes == JSON output")
    t.eq(post(w, "/v2/cudasharedmemory/unregister").status, 200, "unregister all")


def gpu_counter(w, name):
    tot = 0
    for k, v in H.metrics(w.metrics_port).items():
        if k.startswith("nv_hps_embedding_cache_%s{" % name):
            tot += int(v)
    return tot


def check_gpu_direct(t, cl, cli, model, handle, kpt, jvals):
    conf = cl.write_config("gpu.ini", model.ini_text, [
        ("volatile_db", "initial_cache_rate", 1.0), ("hps", "heartbeat_interval_ms", 50),
        ("worker", "http_threads", 2), ("model.m", "gpucache", "true"),
        ("model.m", "gpucacheper", 0.5), ("model.m", "hit_rate_threshold", 2.0)])
    w = cl.start_worker(conf, instance=5)
    t.eq(register(w, "out", handle, ALLOC).status, 200, "GPU worker: register 'out'")
    nbytes = len(jvals) * 4
    packed = struct.pack("<%df" % len(jvals), *jvals)
    nkeys = sum(len(k) for k in kpt)
    for rnd in (1, 2):
        q0, h0 = gpu_counter(w, "query_keys"), gpu_counter(w, "hit_keys")
        off = ALLOC // 2 + 8192 * rnd + 4
        cli.load(cl.path("fill.bin"), off, bytes([FILL]) * nbytes)  # no stale rows to mask a gap
        r = infer(w, infer_body(kpt, out_param=out_param(nbytes, off)))
        t.eq(r.status, 200, "GPU worker, request %d: OUTPUT0 into the CUDA region" % rnd)
        got = cli.dump(cl.path("g%d.bin" % rnd), off, nbytes)
        t.ok(got == packed, "GPU worker, request %d: region bytes == JSON output, byte for byte"
             % rnd)
        q1, h1 = gpu_counter(w, "query_keys"), gpu_counter(w, "hit_keys")
        t.eq(q1 - q0, nkeys, "GPU worker, request %d: every key looked up in the GPU cache" % rnd)
        if rnd == 2:
            t.eq(h1 - h0, nkeys - 2, "GPU worker, request 2: every known key hits (2 unknown)")
    t.eq(post(w, "/v2/cudasharedmemory/unregister").status, 200, "GPU worker: unregister all")


def body(t, cl, cli):
    model = cl.gen_model("m", rows=[5000, 2000], dims=[16, 8], defaults=[0.5, -2.0])
    conf = cl.write_config("hps.ini", model.ini_text, [
        ("volatile_db", "initial_cache_rate", 1.0), ("hps", "heartbeat_interval_ms", 50),
        ("worker", "http_threads", 2)])
    cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    handle = cli.info["HANDLE"]
    t.eq(len(base64.b64decode(handle)), 64, "the client's handle is 64 bytes of base64")
    check_register_errors(t, w, cl, handle, int(cli.info["DEVICES"]))
    check_register(t, w, handle)
    kpt = [model.file_keys[0][:30] + model.unknown_keys(0, 2), model.file_keys[1][100:120]]
    nbytes = (32 * 16 + 20 * 8) * 4
    jvals = check_output(t, cl, w, cli, model, kpt)
    check_keys_input(t, cl, w, cli, kpt, jvals)
    check_bounds(t, w, kpt, nbytes)
    check_unregister(t, w, handle, kpt, nbytes)
    packed = struct.pack("<%df" % len(jvals), *jvals)
    check_concurrent_unregister(t, cl, w, cli, handle, kpt, nbytes, packed)
    t.ok(w.alive(), "the worker is still running")
    check_gpu_direct(t, cl, cli, model, handle, kpt, jvals)


def main():
    if not CLIENT or not os.access(CLIENT, os.X_OK):
        print("Bail out! CUDASHM_CLIENT=%r is not an executable" % CLIENT)
        return 1
    cli = Client(ALLOC)
    try:
        if "NODEVICE" in cli.info:
            print("1..0 # SKIP no CUDA device: %s" % cli.info["NODEVICE"])
            return 77
        if "HANDLE" not in cli.info:
            print("Bail out! cudashm-client: %s" % cli.info)
            return 1
        H.run_main("gpu-cudashm", lambda t, cl: body(t, cl, cli))
    finally:
        cli.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
