#!/usr/bin/env python3
"""
int-bad_requests: every malformed request gets Triton's status code
(/work/shared/reference/kserve-v2.md section 1.2: 400 for invalid
arguments, including an unknown model on infer; 404 unknown path; 405 wrong
method; 501 more samples than max_batch_size; a %2F or %00 in the path is
no separator) and a JSON {"error": "..."}
body with Content-Type application/json; the worker keeps serving exact
answers afterwards.  [worker] max_body_size = 64KiB.

Invalid UTF-8 anywhere in a request (model name in the path, input, output
and region names, keys, headers, random bodies) and 600 mutated requests:
every application/json answer is strict JSON (bytes.decode("utf-8") then
json.loads without NaN); the only answers that are not JSON are
libmicrohttpd's own HTML pages for broken framing (README.md lists them).
"""
import concurrent.futures
import json
import os
import random
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


FFFD = "\ufffd"

# libmicrohttpd 0.9.75's own answers to broken framing: (status, title).
MHD_PAGES = {(400, "Request malformed"), (413, "Request content too large"),
             (414, "Request too big"), (431, "Request too big"),
             (505, "Requested HTTP version is not supported")}


def _no_constants(name):
    raise ValueError("not JSON: %s" % name)


def strict_json(body):
    """Strict JSON: UTF-8 (strict decoding), no NaN/Infinity, no raw controls."""
    return json.loads(body.decode("utf-8"), parse_constant=_no_constants)


def mhd_page(r):
    """True when r is one of libmicrohttpd's own pages: no Content-Type, an
    HTML title of MHD_PAGES; or its duplicated head for a bad Content-Length
    (0.9.75 sends the status line and headers twice)."""
    if "content-type" in r.headers:
        return False
    if r.body.startswith(b"HTTP/1.1 %d " % r.status):
        return r.status in (400, 413)
    for st, title in MHD_PAGES:
        if r.status == st and r.body.startswith(b"<html><head><title>" + title.encode()):
            return True
    return False


def classify(r):
    """'json', 'empty', 'binary' or 'mhd'; raises AssertionError otherwise."""
    ct = r.headers.get("content-type")
    if ct == "application/json":
        j = strict_json(r.body)
        if r.status != 200:
            assert isinstance(j, dict) and isinstance(j.get("error"), str), r.body[:300]
        return "json"
    if ct == "application/octet-stream" and r.status == 200:
        strict_json(r.body[:int(r.headers["inference-header-content-length"])])
        return "binary"
    if ct == "text/plain" and r.body == b"" and r.status in (200, 400):
        return "empty"
    assert mhd_page(r), "not JSON and not libmicrohttpd's: %r %r" % (r.headers, r.body[:300])
    return "mhd"


def mutate(rng, data, lo, hi):
    if hi <= lo:
        return data
    at = rng.randrange(lo, hi)
    op = rng.randrange(6)
    if op == 0:
        return data[:at] + bytes([data[at] ^ (1 << rng.randrange(8))]) + data[at + 1:]
    if op == 1:
        return data[:at] + bytes([rng.randrange(128, 256)]) + data[at + 1:]
    if op == 2:
        return data[:at] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 8))) + data[at:]
    if op == 3:
        bad = rng.choice([b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82"])
        return data[:at] + bad + data[at:]
    if op == 4:
        return data[:at] + data[at + rng.randint(1, 8):]
    return data[:at]


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
    # an encoded separator or NUL is no separator (the path was decoded
    # before routing: /v2%2Frepository/index reached the repository index)
    check("POST /v2%2Frepository/index", 404, "POST", "/v2%2Frepository/index", b"")
    check("POST /v2%2fsystemsharedmemory%2funregister", 404, "POST",
          "/v2%2fsystemsharedmemory%2funregister", b"")
    check("GET /v2/models/m%00xyz (not model m)", 400, "GET", "/v2/models/m%00xyz",
          want_text="unknown model")
    r = H.http(port, "GET", "/%76%32/health/ready")
    t.eq(r.status, 200, "GET /%76%32/health/ready: escapes of other characters are decoded")
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

    # ---- invalid UTF-8: every error body is strict JSON (after the counts above, as
    # mutated requests may succeed) ---------------------------------------------------
    def utf8_check(desc, status, want, method=None, path=None, body=None, headers=None,
                   raw=None):
        try:
            if raw is not None:
                r = H.raw_http(port, raw)
            else:
                r = H.http(port, method, path, body, headers)
            msg = strict_json(r.body)["error"]
            good = (r.status == status and r.headers.get("content-type") == "application/json"
                    and want in msg)
        except Exception as e:  # noqa: BLE001
            good, r, msg = False, None, "%s: %s" % (type(e).__name__, e)
        t.ok(good, "%s -> %d, strict JSON naming %r" % (desc, status, want),
             "got %r: %r" % (r, msg))

    def raw_req(method, path, body=b"", extra=b""):
        return (method + b" " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" +
                extra + b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def named(kname=b"KEYS", dt=b"INT64", more=b""):
        return (b'{' + more + b'"inputs": [{"name": "' + kname + b'", "shape": [1, 5], '
                b'"datatype": "' + dt + b'", "data": ' + json.dumps(keys).encode() + b'}, '
                b'{"name": "NUMKEYS", "shape": [1, 2], "datatype": "INT32", "data": [3, 2]}]}')

    utf8_check("model name \\xfe in the path", 400, "unknown model: '%s'" % FFFD,
               raw=raw_req(b"POST", b"/v2/models/\xfe/infer", req(keys, nk)))
    utf8_check("model name %FF%C0%AF", 400, "'m%s'" % (FFFD * 3),
               raw=raw_req(b"GET", b"/v2/models/m%FF%C0%AF"))
    utf8_check("input name KEYS\\xff", 400, "input 'KEYS%s'" % FFFD, "POST", infer,
               named(kname=b"KEYS\xff"))
    utf8_check("datatype with a surrogate", 400, "'INT%s'" % (FFFD * 3), "POST", infer,
               named(dt=b"INT\xed\xa0\x80"))
    utf8_check("output name \\xc0\\xaf", 400, "output 'O%s'" % (FFFD * 2), "POST", infer,
               named(more=b'"outputs": [{"name": "O\xc0\xaf"}], '))
    utf8_check("input region name cut short", 404, "region: 'r%s'" % FFFD, "POST", infer,
               b'{"inputs": [{"name": "KEYS", "shape": [1, 5], "datatype": "INT64", '
               b'"parameters": {"shared_memory_region": "r\xe2\x82", '
               b'"shared_memory_byte_size": 40}}, {"name": "NUMKEYS", "shape": [1, 2], '
               b'"datatype": "INT32", "data": [3, 2]}]}')
    utf8_check("region name in the path", 404, "'%s%s'" % (FFFD, FFFD),
               raw=raw_req(b"GET", b"/v2/systemsharedmemory/region/\xff\xfe/status"))
    utf8_check("region name and key of a register", 400,
               "region '%s' with key '/a/%s'" % (FFFD, FFFD),
               raw=raw_req(b"POST", b"/v2/systemsharedmemory/region/\xc3/register",
                           b'{"key": "/a/\xf5", "offset": 0, "byte_size": 8}'))
    utf8_check("Content-Encoding \\xff\\x01", 400, "Content-Encoding '%s\x01'" % FFFD,
               raw=raw_req(b"POST", infer.encode(), req(keys, nk),
                           b"Content-Encoding: \xff\x01\r\n"))

    seed = random.randrange(1 << 30)
    t.diag("mutation seed %d" % seed)
    rng = random.Random(seed)
    bad = []
    for i in range(200):  # random bytes as a body, and in an input name
        if i % 2:
            b = bytes(rng.randrange(256) for _ in range(rng.randint(1, 400)))
        else:
            b = named(kname=bytes(rng.choice([c for c in range(1, 256) if c not in b'"\\'])
                                  for _ in range(rng.randint(1, 60))))
        try:
            classify(H.http(port, "POST", infer, b))
        except Exception as e:  # noqa: BLE001
            bad.append("%r: %s" % (b[:80], e))
    t.ok(not bad, "200 random bodies: every answer is strict JSON", "\n".join(bad[:5]))

    bin_body, bin_hdrs = bin_req(keys, nk)
    seeds = [
        raw_req(b"POST", infer.encode(), req(keys, nk)),
        raw_req(b"POST", infer.encode(), bin_body,
                b"Inference-Header-Content-Length: %s\r\n" %
                bin_hdrs["Inference-Header-Content-Length"].encode()),
        raw_req(b"POST", b"/v2/systemsharedmemory/region/r1/register",
                b'{"key": "/hps-int-nokey", "offset": 0, "byte_size": 8}'),
        raw_req(b"GET", b"/v2/models/m/versions/1/config"),
    ]
    mutants = []
    for i in range(600):
        data = rng.choice(seeds)
        hl = data.index(b"\r\n\r\n") + 4
        for _ in range(rng.randint(1, 4)):
            if rng.randrange(2) or hl >= len(data):
                data = mutate(rng, data, 0, min(hl, len(data)))
            else:
                data = mutate(rng, data, hl, len(data))
        mutants.append(data)

    def answer(data):  # a stalled request (e.g. a Content-Length made larger) times out
        try:
            r = H.raw_http(port, data, timeout=0.4)
        except (OSError, IndexError, ValueError):
            return "no answer", None
        try:
            return classify(r), None
        except Exception as e:  # noqa: BLE001
            return "bad", "%r -> %s" % (data[:200], e)

    counts = {}
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(answer, mutants))
    for c, _ in results:
        counts[c] = counts.get(c, 0) + 1
    bad = [why for _, why in results if why]
    t.diag("mutated requests: %r" % sorted(counts.items()))
    t.ok(not bad and counts.get("json", 0) > 100,
         "600 mutated requests: strict JSON, or libmicrohttpd's own framing page",
         "\n".join(bad[:5]))

    r = H.http(port, "POST", infer, req(keys, nk))
    _, g = H.decode_output(r)
    t.ok(g == model.expected([k0, k1]), "after the mutated requests the worker answers exactly")
    t.ok(w.alive(), "worker still running", w.log())


if __name__ == "__main__":
    H.run_main("bad_requests", body)
