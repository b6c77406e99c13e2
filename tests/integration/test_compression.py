#!/usr/bin/env python3
"""
int-compression: gzip and deflate bodies against a real coordinator and
worker, in tritonclient's wire form.

tritonclient.http's infer(request_compression_algorithm=...,
response_compression_algorithm=...) sends the body gzip.compress()ed or
zlib.compress()ed with Content-Encoding: gzip / deflate, asks for a
compressed answer with Accept-Encoding: gzip / deflate, and keeps
Inference-Header-Content-Length the length of the uncompressed JSON (on
the request and on the answer).  The worker runs with max_body_size 64KiB.

Checks: JSON and binary requests compressed with gzip, zlib ("deflate")
and raw deflate answer byte for byte what the plain request does;
compressed answers carry Content-Encoding, inflate to the plain answer and
decode to the generator's vectors; a body of exactly max_body_size once
inflated is served, one byte more is refused; corrupt, truncated and
empty compressed bodies get 400 with a JSON error; a 64 MiB zip bomb
(Content-Length or chunked) gets 400 quickly without the worker's peak
memory growing by its inflated size; errors are never compressed; the
worker serves on.
"""
import gzip
import os
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402

MAX_BODY = 64 * 1024
INFER = "/v2/models/m/infer"


def raw_deflate(data):
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


# name -> (Content-Encoding value, compressor), as tritonclient does for the
# first two; raw deflate is what some other HTTP clients send as "deflate".
CODINGS = [
    ("gzip", "gzip", gzip.compress),
    ("deflate", "deflate", zlib.compress),
    ("raw deflate", "deflate", raw_deflate),
]

DECOMPRESS = {"gzip": gzip.decompress, "deflate": zlib.decompress}


def post(port, body, headers):
    return H.http(port, "POST", INFER, body, headers)


def peak_rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def check_error(t, r, status, text, desc):
    ok = r.status == status and r.is_json_error() and text in r.json()["error"]
    t.ok(ok and "content-encoding" not in r.headers, desc, repr(r))


def body(t, cl):
    model = cl.gen_model("m", rows=[3000, 800], dims=[16, 8], defaults=[0.5, -2.0])
    conf = cl.write_config("hps.ini", model.ini_text, [
        ("volatile_db", "initial_cache_rate", 1.0),
        ("worker", "max_body_size", "64KiB"),
    ])
    cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    port = w.http_port

    kpt = [model.file_keys[0][:150] + model.unknown_keys(0, 3),
           model.file_keys[1][:60] + model.unknown_keys(1, 2, 7)]
    want = model.expected(kpt)

    # Request forms: JSON in and out; binary KEYS with binary OUTPUT0;
    # binary KEYS and NUMKEYS with a JSON OUTPUT0.
    forms = [("JSON", H.infer_json_body(kpt, "c1"), {})]
    b, h = H.infer_binary_body(kpt, "c2")
    forms.append(("binary", b, h))
    b, h = H.infer_binary_body(kpt, "c3", numkeys_binary=True, output_binary=False)
    forms.append(("binary in, JSON out", b, h))

    for fname, plain_body, hdrs in forms:
        base = post(port, plain_body, hdrs)
        _, got = H.decode_output(base)
        t.ok(got == want, "%s, plain: the generator's vectors" % fname,
             H.first_mismatch(got, want, model, kpt))

        # ---- compressed requests: the same answer, byte for byte ----------
        for cname, enc, compress in CODINGS:
            zb = compress(plain_body)
            r = post(port, zb, dict(hdrs, **{"Content-Encoding": enc}))
            t.ok(r.status == 200 and r.body == base.body and
                 r.headers.get("content-type") == base.headers.get("content-type") and
                 r.headers.get("inference-header-content-length") ==
                 base.headers.get("inference-header-content-length") and
                 "content-encoding" not in r.headers,
                 "%s, %s request (%d -> %d bytes): the plain request's answer" %
                 (fname, cname, len(plain_body), len(zb)), repr(r))

        # ---- compressed answers (tritonclient's Accept-Encoding) -----------
        for req_enc in (None, "gzip", "deflate"):
            for resp_enc in ("gzip", "deflate"):
                h2 = dict(hdrs, **{"Accept-Encoding": resp_enc})
                data = plain_body
                if req_enc:
                    h2["Content-Encoding"] = req_enc
                    data = gzip.compress(data) if req_enc == "gzip" else zlib.compress(data)
                r = post(port, data, h2)
                desc = "%s, %s request, Accept-Encoding %s" % (fname, req_enc or "plain",
                                                                resp_enc)
                if not t.ok(r.status == 200 and r.headers.get("content-encoding") == resp_enc,
                            desc + ": 200 with Content-Encoding " + resp_enc, repr(r)):
                    continue
                try:
                    inflated = DECOMPRESS[resp_enc](r.body)
                except Exception as e:  # noqa: BLE001
                    inflated = repr(e)
                t.ok(inflated == base.body and
                     r.headers.get("inference-header-content-length") ==
                     base.headers.get("inference-header-content-length") and
                     r.headers.get("content-type") == base.headers.get("content-type"),
                     desc + ": inflates to the plain answer, same header length and type",
                     "%d compressed bytes, %r" % (len(r.body), r.headers))
                if isinstance(inflated, bytes):
                    r.body = inflated
                    _, got = H.decode_output(r)
                    t.ok(got == want, desc + ": decodes to the generator's vectors",
                         H.first_mismatch(got, want, model, kpt))
        # q=0 and unknown codings: not compressed.
        for accept in ("gzip;q=0, deflate;q=0", "br", "identity"):
            r = post(port, plain_body, dict(hdrs, **{"Accept-Encoding": accept}))
            t.ok(r.status == 200 and r.body == base.body and "content-encoding" not in r.headers,
                 "%s, Accept-Encoding '%s': the plain answer" % (fname, accept), repr(r))

    # ---- the limit applies to the inflated body -------------------------------
    plain_body = H.infer_json_body(kpt, "pad")
    base = post(port, plain_body, {})
    for extra, desc in ((0, "exactly max_body_size"), (1, "max_body_size + 1")):
        n = MAX_BODY + extra
        padded = plain_body[:-1] + b" " * (n - len(plain_body)) + b"}"
        assert len(padded) == n
        zb = gzip.compress(padded)
        r = post(port, zb, {"Content-Encoding": "gzip"})
        if extra == 0:
            t.ok(r.status == 200 and r.body == base.body,
                 "a gzip body of %d bytes (%s once inflated) is served" % (len(zb), desc),
                 repr(r))
        else:
            check_error(t, r, 400, "once decompressed",
                        "a gzip body of %s once inflated: 400 with a JSON error" % desc)

    # ---- corrupt, truncated, empty, unknown coding ----------------------------
    gz = bytearray(gzip.compress(plain_body))
    gz[len(gz) // 2] ^= 0xff
    check_error(t, post(port, bytes(gz), {"Content-Encoding": "gzip"}), 400,
                "failed to decompress", "a corrupt gzip body: 400 with a JSON error")
    gz[len(gz) // 2] ^= 0xff
    gz[-3] ^= 1  # the length in the trailer
    check_error(t, post(port, bytes(gz), {"Content-Encoding": "gzip"}), 400,
                "failed to decompress", "a gzip body with a wrong trailer: 400")
    gz[-3] ^= 1
    check_error(t, post(port, bytes(gz[:-10]), {"Content-Encoding": "gzip"}), 400, "truncated",
                "a truncated gzip body: 400 with a JSON error")
    check_error(t, post(port, plain_body, {"Content-Encoding": "deflate"}), 400,
                "failed to decompress", "an uncompressed body labelled deflate: 400")
    check_error(t, post(port, b"", {"Content-Encoding": "gzip"}), 400, "empty",
                "an empty gzip body: 400")
    check_error(t, post(port, bytes(gz), {"Content-Encoding": "br"}), 400,
                "unsupported Content-Encoding 'br'", "Content-Encoding br: 400")
    check_error(t, post(port, bytes(gz[:-10]), {"Content-Encoding": "gzip",
                                                "Accept-Encoding": "gzip"}), 400, "truncated",
                "an error answer is not compressed, whatever Accept-Encoding says")

    # ---- zip bombs -------------------------------------------------------------
    bomb = gzip.compress(b"\0" * (64 << 20), 9)
    t.diag("bomb: %d bytes of gzip, 64 MiB inflated, max_body_size %d" % (len(bomb), MAX_BODY))
    hwm0 = peak_rss_kib(w.pid)
    t0 = time.monotonic()
    r = post(port, bomb, {"Content-Encoding": "gzip"})
    check_error(t, r, 400, "once decompressed",
                "a 64 MiB gzip bomb (Content-Length %d): 400 with a JSON error" % len(bomb))
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(bomb[i:i + 4096]), bomb[i:i + 4096])
                      for i in range(0, len(bomb), 4096))
    raw = (b"POST " + INFER.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\n"
           b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + chunks + b"0\r\n\r\n")
    r = H.raw_http(port, raw)
    check_error(t, r, 400, "once decompressed", "the same bomb chunked: 400 with a JSON error")
    zb = zlib.compress(b"\0" * (64 << 20), 9)
    check_error(t, post(port, zb, {"Content-Encoding": "deflate"}), 400, "once decompressed",
                "a 64 MiB deflate bomb: 400 with a JSON error")
    secs = time.monotonic() - t0
    hwm1 = peak_rss_kib(w.pid)
    t.ok(hwm1 - hwm0 < 32 * 1024,
         "the bombs were not inflated: the worker's peak RSS grew by %d KiB (%.2f s)" %
         (hwm1 - hwm0, secs))
    big = gzip.compress(os.urandom(MAX_BODY * 2))
    check_error(t, post(port, big, {"Content-Encoding": "gzip"}), 400,
                "compressed request body of", "a compressed body past the bound: 400 at once")

    # ---- still serving -----------------------------------------------------------
    r = post(port, gzip.compress(plain_body), {"Content-Encoding": "gzip",
                                               "Accept-Encoding": "gzip"})
    t.ok(r.status == 200 and gzip.decompress(r.body) == base.body,
         "the worker still serves compressed requests", repr(r))
    t.ok(w.alive(), "the worker is still running", w.log())

    # ---- the smallest max_body_size -------------------------------------------
    # A worker of max_body_size 1KiB on the same segment: a compressed body
    # got 503 "server busy" at any load (the decoder's 64 KiB state was
    # counted against a budget of 16 x 1 KiB), a chunked plain one too (its
    # first buffer was 64 KiB).
    small = cl.write_config("small.ini", model.ini_text, [
        ("volatile_db", "initial_cache_rate", 1.0),
        ("worker", "max_body_size", "1KiB"),
    ])
    w2 = cl.start_worker(small, instance=1)
    kpt2 = [model.file_keys[0][:8], model.file_keys[1][:4]]
    b2, h2 = H.infer_binary_body(kpt2, "s1")
    base2 = post(w2.http_port, b2, h2)
    t.ok(base2.status == 200 and H.decode_output(base2)[1] == model.expected(kpt2),
         "max_body_size 1KiB, a plain request of %d bytes: the generator's vectors" % len(b2),
         repr(base2))
    for cname, enc, compress in CODINGS:
        r = post(w2.http_port, compress(b2), dict(h2, **{"Content-Encoding": enc}))
        t.ok(r.status == 200 and r.body == base2.body,
             "max_body_size 1KiB, a %s request: the plain request's answer" % cname, repr(r))
    hdr = "".join("%s: %s\r\n" % kv for kv in h2.items()).encode()
    raw = (b"POST " + INFER.encode() + b" HTTP/1.1\r\nHost: x\r\n" + hdr +
           b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
           b"%x\r\n%s\r\n0\r\n\r\n" % (len(b2), b2))
    r = H.raw_http(w2.http_port, raw)
    t.ok(r.status == 200 and r.body == base2.body,
         "max_body_size 1KiB, the plain request chunked: the same answer", repr(r))


if __name__ == "__main__":
    H.run_main("compression", body)
