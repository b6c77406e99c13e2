#!/usr/bin/env python3
"""
int-bad_requests: every malformed request gets Triton's status code
(/work/shared/reference/kserve-v2.md section 1.2: 400 for invalid
arguments, including an unknown model on infer; 404 unknown path; 405 wrong
method; 501 more samples than max_batch_size) and a JSON {"error": "..."}
body with Content-Type application/json; the worker keeps serving exact
answers afterwards.  [worker] max_body_size = 64KiB.
"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402

MAX_BODY = 64 * 1024
MAX_BATCH = 1000


def req(keys, numkeys, kdt="INT64", ndt="INT32", kshape=None, nshape=None):
    return json.dumps({"inputs": [
        {"name": "KEYS", "shape": kshape or [1, len(keys)], "datatype": kdt, "data": keys},
        {"name": "NUMKEYS", "shape": nshape or [1, len(numkeys)], "datatype": ndt,
         "data": numkeys}]}).encode()


def bin_req(keys, numkeys, declared=None, extra=b"", header=True, hlen_delta=0):
    kb = struct.pack("<%dq" % len(keys), *keys)
    j = json.dumps({"inputs": [
        {"name": "KEYS", "shape": [1, len(keys)], "datatype": "INT64",
         "parameters": {"binary_data_size": len(kb) if declared is None else declared}},
        {"name": "NUMKEYS", "shape": [1, len(numkeys)], "datatype": "INT32",
         "data": numkeys}]}).encode()
    hdrs = {"Inference-Header-Content-Length": str(len(j) + hlen_delta)} if header else {}
    return j + kb + extra, hdrs


def body(t, cl):
    model = cl.gen_model("m", rows=[1000, 500], dims=[4, 2], defaults=[1.5, -3.0],
                         max_batch=MAX_BATCH)
    conf = cl.write_config("hps.ini", model.ini_text, [
        ("worker", "max_body_size", "64KiB"),
        ("worker", "max_keys_per_request", 5000),
    ])
    cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    port = w.http_port
    k0, k1 = model.file_keys[0][:3], model.file_keys[1][:2]
    keys, nk = k0 + k1, [3, 2]
    infer = "/v2/models/m/infer"

    def check(desc, status, method, path, body=None, headers=None, want_text=None):
        r = H.http(port, method, path, body, headers)
        good = r.status == status and r.is_json_error()
        msg = ""
        if good and want_text:
            msg = r.json()["error"]
            good = want_text.lower() in msg.lower()
        t.ok(good, "%s -> %d with a JSON error%s" % (desc, status,
                                                    " naming %r" % want_text if want_text else ""),
             "got %d %s %r" % (r.status, r.headers.get("content-type"), r.body[:400]))
        return r

    # Sanity: the well-formed versions of these requests succeed.
    r = H.http(port, "POST", infer, req(keys, nk))
    _, g = H.decode_output(r)
    t.ok(g == model.expected([k0, k1]), "well-formed JSON request succeeds")
    b, h = bin_req(keys, nk)
    _, g = H.decode_output(H.http(port, "POST", infer, b, h))
    t.ok(g == model.expected([k0, k1]), "well-formed binary request succeeds")

    # ---- JSON ---------------------------------------------------------------
    check("malformed JSON (truncated)", 400, "POST", infer, b'{"inputs": [{"name": "KEYS"')
    check("malformed JSON (garbage)", 400, "POST", infer, b"this is not json")
    check("empty body", 400, "POST", infer, b"")
    check("JSON array instead of an object", 400, "POST", infer, b"[1, 2, 3]")
    check("KEYS as FP32", 400, "POST", infer,
          req([1.0, 2.0, 3.0, 4.0, 5.0], nk, kdt="FP32"), want_text="KEYS")
    check("NUMKEYS as INT64", 400, "POST", infer, req(keys, nk, ndt="INT64"),
          want_text="NUMKEYS")
    check("KEYS shape [5] (rank 1)", 400, "POST", infer, req(keys, nk, kshape=[5]))
    check("KEYS shape [5,1]", 400, "POST", infer, req(keys, nk, kshape=[5, 1]))
    check("KEYS shape [1,6] with 5 values", 400, "POST", infer, req(keys, nk, kshape=[1, 6]))
    check("KEYS shape [1,1,5]", 400, "POST", infer, req(keys, nk, kshape=[1, 1, 5]))
    check("NUMKEYS [3,3] not summing to 5 keys", 400, "POST", infer, req(keys, [3, 3]),
          want_text="NUMKEYS")
    check("NUMKEYS [2,2] not summing to 5 keys", 400, "POST", infer, req(keys, [2, 2]),
          want_text="NUMKEYS")
    check("NUMKEYS with a negative count", 400, "POST", infer, req(keys, [6, -1]))
    check("NUMKEYS of length 1 (model has 2 tables)", 400, "POST", infer, req(keys, [5]),
          want_text="NUMKEYS")
    check("NUMKEYS of length 3", 400, "POST", infer, req(keys, [3, 2, 0]), want_text="NUMKEYS")
    check("missing NUMKEYS input", 400, "POST", infer, json.dumps({"inputs": [
        {"name": "KEYS", "shape": [1, 5], "datatype": "INT64", "data": keys}]}).encode())
    check("unknown input name", 400, "POST", infer, json.dumps({"inputs": [
        {"name": "KEYS", "shape": [1, 5], "datatype": "INT64", "data": keys},
        {"name": "NUMKEYS", "shape": [1, 2], "datatype": "INT32", "data": nk},
        {"name": "EXTRA", "shape": [1, 1], "datatype": "INT32", "data": [1]}]}).encode())
    check("unknown output name", 400, "POST", infer, json.dumps({"inputs": [
        {"name": "KEYS", "shape": [1, 5], "datatype": "INT64", "data": keys},
        {"name": "NUMKEYS", "shape": [1, 2], "datatype": "INT32", "data": nk}],
        "outputs": [{"name": "OUTPUT1"}]}).encode())
    check("unknown model", 400, "POST", "/v2/models/nosuchmodel/infer", req(keys, nk),
          want_text="unknown model")
    check("unknown model version", 400, "POST", "/v2/models/m/versions/7/infer", req(keys, nk))
    many = [model.file_keys[0][i % 1000] for i in range(5001)]
    check("5001 keys over max_keys_per_request 5000", 400, "POST", infer,
          req(many, [5001, 0]))
    batch = [model.file_keys[0][i % 1000] for i in range(MAX_BATCH + 1)] + \
        [model.file_keys[1][i % 500] for i in range(MAX_BATCH + 1)]
    b, h = bin_req(batch, [MAX_BATCH + 1] * 2)
    check("NumSample %d over max_batch_size %d" % (MAX_BATCH + 1, MAX_BATCH), 501, "POST",
          infer, b, h, want_text="max batch size")

    # ---- body size ------------------------------------------------------------
    big = b'{"inputs": [], "pad": "' + b"x" * (MAX_BODY + 1000) + b'"}'
    check("body of %d bytes over max_body_size 64KiB" % len(big), 400, "POST", infer, big)
    # The same, chunked (no Content-Length): refused at the end of the body.
    chunks = b""
    for off in range(0, len(big), 8192):
        part = big[off:off + 8192]
        chunks += b"%x\r\n" % len(part) + part + b"\r\n"
    raw = (b"POST " + infer.encode() + b" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
           b"\r\n" + chunks + b"0\r\n\r\n")
    r = H.raw_http(port, raw)
    t.ok(r.status == 400 and r.is_json_error(), "chunked body over max_body_size -> 400 with "
         "a JSON error", repr(r))
    ok_body = req(keys, nk)
    pad = json.loads(ok_body)
    pad["id"] = "x" * (MAX_BODY - len(ok_body) - 200)
    pad = json.dumps(pad).encode()
    r = H.http(port, "POST", infer, pad)
    t.ok(r.status == 200 and len(pad) < MAX_BODY, "a %d-byte body just under the limit is "
         "accepted" % len(pad), repr(r))

    # ---- binary data -----------------------------------------------------------
    b, h = bin_req(keys, nk, extra=b"\0" * 8)
    check("binary: 8 bytes more than binary_data_size", 400, "POST", infer, b, h)
    b, h = bin_req(keys, nk)
    check("binary: 8 bytes fewer than binary_data_size", 400, "POST", infer, b[:-8], h)
    b, h = bin_req(keys, nk, declared=32)
    check("binary: binary_data_size 32 for a [1,5] INT64 input", 400, "POST", infer, b, h)
    b, h = bin_req(keys, nk, header=False)
    check("binary input without Inference-Header-Content-Length", 400, "POST", infer, b, h,
          want_text="Header-Content-Length")
    b, h = bin_req(keys, nk, hlen_delta=10 ** 6)
    check("Inference-Header-Content-Length larger than the body", 400, "POST", infer, b, h)
    b, h = bin_req(keys, nk)
    h = {"Inference-Header-Content-Length": "-5"}
    check("negative Inference-Header-Content-Length", 400, "POST", infer, b, h)
    b, h = bin_req(keys, nk, hlen_delta=-3)
    check("Inference-Header-Content-Length cutting the JSON", 400, "POST", infer, b, h)
    j = json.dumps({"inputs": [
        {"name": "KEYS", "shape": [1, 5], "datatype": "INT64", "data": keys,
         "parameters": {"binary_data_size": 40}},
        {"name": "NUMKEYS", "shape": [1, 2], "datatype": "INT32", "data": nk}]}).encode()
    check("input with both data and binary_data_size", 400, "POST", infer,
          j + struct.pack("<5q", *keys), {"Inference-Header-Content-Length": str(len(j))})
    check("unsupported Content-Encoding", 400, "POST", infer, req(keys, nk),
          {"Content-Encoding": "br"})

    # ---- routing ------------------------------------------------------------------
    check("unknown path /v2/nothing", 404, "GET", "/v2/nothing")
    check("unknown path /", 404, "GET", "/")
    check("unknown path /v2/models/m/infer/extra", 404, "POST", "/v2/models/m/infer/extra",
          req(keys, nk))
    check("GET on /v2/models/m/infer", 405, "GET", infer)
    check("PUT on /v2/models/m/infer", 405, "PUT", infer, req(keys, nk))
    check("POST on /v2/health/ready", 405, "POST", "/v2/health/ready", b"")
    check("DELETE on /v2", 405, "DELETE", "/v2")
    check("GET metadata of an unknown model", 400, "GET", "/v2/models/nosuchmodel",
          want_text="unknown model")
    r = H.http(port, "GET", "/v2/models/nosuchmodel/ready")
    t.ok(r.status == 400, "readiness of an unknown model -> 400", repr(r))
    r = H.http(w.metrics_port, "POST", "/metrics", b"")
    t.ok(r.status == 405, "POST /metrics on the metrics port -> 405", repr(r))

    # ---- still serving, and the failures were counted -------------------------------
    r = H.http(port, "POST", infer, req(keys, nk))
    _, g = H.decode_output(r)
    t.ok(g == model.expected([k0, k1]), "after all that the worker still answers exactly")
    m = H.metrics(w.metrics_port)
    fails = sum(v for k, v in m.items() if k.startswith("nv_inference_request_failure{") and
                'model="m"' in k)
    succ = m.get('nv_inference_request_success{model="m",version="1"}')
    t.ok(fails >= 15, "nv_inference_request_failure counted the rejected requests (%d)" % fails)
    t.eq(succ, 4.0, "nv_inference_request_success counts only the 4 good requests")
    t.ok(w.alive(), "worker still running", w.log())


if __name__ == "__main__":
    H.run_main("bad_requests", body)
