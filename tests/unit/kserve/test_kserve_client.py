#!/usr/bin/env python3
"""End-to-end test of the HTTP front end with Python's http.client, sending
what the Python tritonclient sends (lower-case headers, no Content-Type,
binary KEYS with JSON NUMKEYS, keep-alive), against kserve-test-server.

Usage: test_kserve_client.py PATH/TO/kserve-test-server.  Prints TAP.
"""
import http.client
import json
import os
import re
import struct
import subprocess
import sys
import traceback

DIMS = {"hps_wdl": [1, 16], "plain": [4, 8, 3]}


def value(t, k, j):
    """The fake backend's vector element, rounded to float32 like the C code."""
    km = float((k & 0xFFFFFFFFFFFFFFFF) % 100003)
    return struct.unpack("<f", struct.pack("<f", t * 0.5 + km * 0.001 + j * 1e-5))[0]


def expected(model, keys, numkeys):
    out, ki = [], 0
    for t, n in enumerate(numkeys):
        for _ in range(n):
            out += [value(t, keys[ki], j) for j in range(DIMS[model][t])]
            ki += 1
    return out


class Server:
    def __init__(self, exe):
        self.proc = subprocess.Popen([exe], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        line = self.proc.stdout.readline().split()
        assert line[0] == "PORTS", line
        self.port, self.mport = int(line[1]), int(line[2])
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)

    def command(self, cmd):
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "OK"

    def request(self, method, path, body=None, headers=None, port=None):
        if port is None:
            conn = self.conn  # keep-alive, like tritonclient
        else:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        if resp.getheader("connection", "").lower() == "close":
            conn.close()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data

    def close(self):
        self.conn.close()
        self.proc.stdin.close()
        return self.proc.wait(timeout=30)


def infer_binary(srv, model, keys, numkeys, req_id="7"):
    """tritonclient's wire format: binary KEYS, JSON NUMKEYS, binary output."""
    shape_k = [1, len(keys)] if model == "hps_wdl" else [len(keys)]
    shape_n = [1, len(numkeys)] if model == "hps_wdl" else [len(numkeys)]
    hdr = json.dumps({
        "id": req_id,
        "inputs": [
            {"name": "KEYS", "shape": shape_k, "datatype": "INT64",
             "parameters": {"binary_data_size": 8 * len(keys)}},
            {"name": "NUMKEYS", "shape": shape_n, "datatype": "INT32", "data": numkeys},
        ],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
    }, separators=(",", ":")).encode()
    body = hdr + struct.pack("<%dq" % len(keys), *keys)
    status, headers, data = srv.request(
        "POST", "/v2/models/%s/infer" % model, body,
        {"inference-header-content-length": str(len(hdr))})
    assert status == 200, (status, data[:300])
    assert headers["content-type"] == "application/octet-stream", headers
    hl = int(headers["inference-header-content-length"])
    meta = json.loads(data[:hl])
    out = meta["outputs"][0]
    n = out["shape"][0]
    assert out["parameters"]["binary_data_size"] == 4 * n
    assert len(data) - hl == 4 * n
    return meta, list(struct.unpack("<%df" % n, data[hl:]))


def infer_json(srv, model, keys, numkeys):
    shape_k = [1, len(keys)] if model == "hps_wdl" else [len(keys)]
    shape_n = [1, len(numkeys)] if model == "hps_wdl" else [len(numkeys)]
    body = json.dumps({"inputs": [
        {"name": "KEYS", "shape": shape_k, "datatype": "INT64", "data": keys},
        {"name": "NUMKEYS", "shape": shape_n, "datatype": "INT32", "data": numkeys},
    ]})
    status, headers, data = srv.request("POST", "/v2/models/%s/infer" % model, body)
    assert status == 200, (status, data[:300])
    assert headers["content-type"] == "application/json", headers
    meta = json.loads(data)
    return meta, [struct.unpack("<f", struct.pack("<f", v))[0]
                  for v in meta["outputs"][0]["data"]]


def expect_error(srv, status_want, fragment, method, path, body=None, headers=None, port=None):
    status, hdrs, data = srv.request(method, path, body, headers, port)
    assert status == status_want, (status, status_want, data[:300])
    assert hdrs["content-type"] == "application/json", hdrs
    msg = json.loads(data)["error"]
    assert fragment in msg, (msg, fragment)


# --------------------------------------------------------------------------- tests

def test_health(srv):
    assert srv.request("GET", "/v2/health/live")[0] == 200
    assert srv.request("GET", "/v2/health/ready")[0] == 200
    assert srv.request("GET", "/v2/models/hps_wdl/ready")[0] == 200
    srv.command("ready 0")
    status, _, data = srv.request("GET", "/v2/health/ready")
    assert status == 400 and data == b"", (status, data)
    expect_error(srv, 400, "Model version not ready", "GET", "/v2/models/hps_wdl/ready")
    infer_binary(srv, "hps_wdl", [1, 2, 3], [1, 2])  # degraded: still serves
    srv.command("ready 1")
    assert srv.request("GET", "/v2/health/ready")[0] == 200


def test_metadata(srv):
    status, _, data = srv.request("GET", "/v2")
    meta = json.loads(data)
    assert status == 200 and meta["name"] == "hps", meta
    assert "binary_tensor_data" in meta["extensions"] and "statistics" in meta["extensions"]
    assert "system_shared_memory" in meta["extensions"]
    assert "cuda_shared_memory" not in meta["extensions"]
    status, _, data = srv.request("GET", "/v2/models/hps_wdl")
    meta = json.loads(data)
    assert meta["platform"] == "hps" and meta["versions"] == ["1"], meta
    assert [i["name"] for i in meta["inputs"]] == ["KEYS", "NUMKEYS"]
    assert meta["inputs"][0] == {"name": "KEYS", "datatype": "INT64", "shape": [-1, -1]}
    assert meta["outputs"] == [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, -1]}]
    status, _, data = srv.request("GET", "/v2/models/plain/versions/7")
    assert json.loads(data)["inputs"][1]["shape"] == [-1]


def test_infer_identical(srv):
    # The sample of the HPS notebook: batch 10, 2 + 26 keys per sample.
    keys = [(i * 2654435761) % (1 << 40) - (1 << 39) for i in range(280)]
    keys[0], keys[1] = -(1 << 63), (1 << 63) - 1
    numkeys = [20, 260]
    meta_b, out_b = infer_binary(srv, "hps_wdl", keys, numkeys)
    meta_j, out_j = infer_json(srv, "hps_wdl", keys, numkeys)
    assert meta_b["id"] == "7" and "id" not in meta_j
    assert meta_b["model_name"] == "hps_wdl" and meta_b["model_version"] == "1"
    assert meta_b["parameters"] == {"NumSample": 10, "DeviceID": 0}, meta_b["parameters"]
    assert meta_b["outputs"][0]["shape"] == [4180]
    want = expected("hps_wdl", keys, numkeys)
    assert out_b == want and out_j == want
    keys = [3, 1, 4, 1, 5, 9]
    numkeys = [1, 2, 3]
    assert infer_binary(srv, "plain", keys, numkeys)[1] == expected("plain", keys, numkeys)


def test_errors(srv):
    expect_error(srv, 400, "Request for unknown model: 'nope' is not found", "POST",
                 "/v2/models/nope/infer", "{}")
    expect_error(srv, 404, "Not Found", "GET", "/v2/nothing")
    expect_error(srv, 405, "Method Not Allowed", "GET", "/v2/models/hps_wdl/infer")
    expect_error(srv, 501, "not supported", "POST",
                 "/v2/cudasharedmemory/region/keys_region/unregister")
    hdr = json.dumps({"inputs": [
        {"name": "KEYS", "shape": [1, 2], "datatype": "INT64",
         "parameters": {"binary_data_size": 16}},
        {"name": "NUMKEYS", "shape": [1, 2], "datatype": "INT32", "data": [1, 1]}]}).encode()
    keys = struct.pack("<2q", 5, 6)
    expect_error(srv, 400, "Infer-Header-Content-Length", "POST", "/v2/models/hps_wdl/infer",
                 hdr + keys)
    expect_error(srv, 400, "unexpected additional input data", "POST",
                 "/v2/models/hps_wdl/infer", hdr + keys + b"xx",
                 {"inference-header-content-length": str(len(hdr))})
    expect_error(srv, 400, "inference header size should be in range", "POST",
                 "/v2/models/hps_wdl/infer", hdr + keys,
                 {"Inference-Header-Content-Length": str(len(hdr) + 1000)})
    expect_error(srv, 400, "failed to parse the request JSON buffer", "POST",
                 "/v2/models/hps_wdl/infer", b"{not json")
    expect_error(srv, 405, "Method Not Allowed", "PUT", "/metrics", b"", port=srv.mport)
    srv.command("fail -20010")
    expect_error(srv, 503, "busy", "POST", "/v2/models/hps_wdl/infer", hdr + keys,
                 {"inference-header-content-length": str(len(hdr))})
    srv.command("fail 0")


def shm_create(key, data, size):
    """A POSIX shared-memory object, as tritonclient.utils.shared_memory makes."""
    path = "/dev/shm" + key
    with open(path, "wb") as f:
        f.write(data.ljust(size, b"\0"))
    return path


def test_system_shm(srv):
    """tritonclient's system shared-memory calls and infer parameters."""
    pid = os.getpid()
    kin, kout = "/hps_py_%d_in" % pid, "/hps_py_%d_out" % pid
    keys = [11, -3, 1 << 40, 7, 8, 9]
    numkeys = [2, 4]
    want = expected("hps_wdl", keys, numkeys)
    pin = shm_create(kin, struct.pack("<6q", *keys) + struct.pack("<2i", *numkeys), 56)
    pout = shm_create(kout, b"", 8 + 4 * len(want))
    try:
        for name, key, size in (("input_data", kin, 56), ("output_data", kout, 8 + 4 * len(want))):
            body = json.dumps({"key": key, "offset": 0, "byte_size": size})
            status, _, data = srv.request(
                "POST", "/v2/systemsharedmemory/region/%s/register" % name, body)
            assert status == 200 and data == b"", (status, data)
        expect_error(srv, 400, "shared memory region 'input_data' already in manager", "POST",
                     "/v2/systemsharedmemory/region/input_data/register",
                     json.dumps({"key": kin, "offset": 0, "byte_size": 56}))
        status, _, data = srv.request("GET", "/v2/systemsharedmemory/status")
        assert status == 200 and json.loads(data) == [
            {"name": "input_data", "key": kin, "offset": 0, "byte_size": 56},
            {"name": "output_data", "key": kout, "offset": 0, "byte_size": 8 + 4 * len(want)}]
        req = json.dumps({"inputs": [
            {"name": "KEYS", "shape": [1, 6], "datatype": "INT64",
             "parameters": {"shared_memory_region": "input_data",
                            "shared_memory_byte_size": 48}},
            {"name": "NUMKEYS", "shape": [1, 2], "datatype": "INT32",
             "parameters": {"shared_memory_region": "input_data", "shared_memory_byte_size": 8,
                            "shared_memory_offset": 48}}],
            "outputs": [{"name": "OUTPUT0", "parameters": {
                "binary_data": False, "shared_memory_region": "output_data",
                "shared_memory_byte_size": 4 * len(want), "shared_memory_offset": 8}}]})
        status, headers, data = srv.request("POST", "/v2/models/hps_wdl/infer", req)
        assert status == 200 and headers["content-type"] == "application/json", (status, data)
        out = json.loads(data)["outputs"][0]
        assert "data" not in out and out["shape"] == [len(want)], out
        assert out["parameters"]["shared_memory_region"] == "output_data", out
        with open(pout, "rb") as f:
            got = list(struct.unpack("<%df" % len(want), f.read()[8:8 + 4 * len(want)]))
        assert got == want
        status, _, _ = srv.request("POST", "/v2/systemsharedmemory/region/input_data/unregister")
        assert status == 200
        expect_error(srv, 404, "Unable to find shared memory region: 'input_data'", "POST",
                     "/v2/models/hps_wdl/infer", req)
        assert srv.request("POST", "/v2/systemsharedmemory/unregister")[0] == 200
        status, _, data = srv.request("GET", "/v2/systemsharedmemory/status")
        assert status == 200 and json.loads(data) == []
    finally:
        os.unlink(pin)
        os.unlink(pout)


SAMPLE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*'
                    r'(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*",?)*\})? '
                    r'[-+]?([0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?|NaN|\+Inf|-Inf)$')


def test_metrics(srv):
    status, headers, data = srv.request("GET", "/metrics", port=srv.mport)
    assert status == 200 and headers["content-type"] == "text/plain; charset=utf-8"
    text = data.decode()
    assert text.endswith("\n")
    families = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, help_text = line[7:].split(" ", 1)
            families[name] = help_text
        elif line.startswith("# TYPE "):
            name, kind = line[7:].split(" ")
            assert kind in ("counter", "gauge"), line
        else:
            assert SAMPLE.match(line), line
    assert families["nv_inference_request_success"] == \
        "Number of successful inference requests, all batch sizes"
    assert families["nv_inference_count"] == \
        "Number of inferences performed (does not include cached requests)"
    for name in ("nv_inference_request_failure", "nv_inference_exec_count",
                 "nv_inference_request_duration_us", "nv_inference_queue_duration_us",
                 "nv_inference_compute_input_duration_us", "nv_inference_compute_infer_duration_us",
                 "nv_inference_compute_output_duration_us", "nv_hps_test_lookups"):
        assert name in families, name
    m = re.search(r'^nv_inference_count\{model="hps_wdl",version="1"\} (\d+)$', text, re.M)
    assert m and int(m.group(1)) >= 10, m


def test_stats(srv):
    status, _, data = srv.request("GET", "/v2/models/hps_wdl/versions/1/stats")
    stats = json.loads(data)["model_stats"][0]
    assert status == 200 and stats["name"] == "hps_wdl" and stats["version"] == "1"
    inf = stats["inference_stats"]
    assert inf["success"]["count"] >= 2 and inf["fail"]["count"] >= 1, inf
    for k in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert inf[k]["count"] == inf["success"]["count"], (k, inf)
    assert stats["execution_count"] == inf["success"]["count"]
    assert stats["last_inference"] > 1600000000000


def main():
    srv = Server(sys.argv[1])
    tests = [test_health, test_metadata, test_infer_identical, test_errors, test_system_shm,
             test_metrics, test_stats]
    print("1..%d" % len(tests))
    failed = 0
    for i, t in enumerate(tests, 1):
        try:
            t(srv)
            print("ok %d - %s" % (i, t.__name__))
        except Exception:  # report and go on
            failed += 1
            print("not ok %d - %s" % (i, t.__name__))
            for line in traceback.format_exc().splitlines():
                print("# " + line)
        sys.stdout.flush()
    rc = srv.close()
    if rc != 0:
        print("# server exited with %d" % rc)
        failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
