#!/usr/bin/env python3
"""
int-repository: Triton's model repository extension on hps-worker, model
control mode `none` (reference/kserve-v2.md section 1.5): the index lists
the INI's models with their version and state (READY, or UNAVAILABLE with a
reason while the worker is not ready), {"ready": true} filters, load and
unload get Triton's refusal for that mode, a named repository 501, bad
bodies 400 with a JSON error; POSTs without a body or Content-Length are
accepted (tritonclient's index call); server metadata lists the extension.
"""
import json
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402

REFUSED = "explicit model load / unload is not allowed if polling is enabled"


def post(port, path, body=None):
    return H.http(port, "POST", path, body=body)


def body(t, cl):
    model = cl.gen_model("m", rows=[500, 200], dims=[4, 8], defaults=[0.5, -2.0])
    conf = cl.write_config("hps.ini", model.ini_text, [
        ("hps", "heartbeat_interval_ms", 50),
        ("hps", "worker_timeout_ms", 300)])
    c = cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    port = w.http_port

    meta = H.http(port, "GET", "/v2").json()
    t.ok("model_repository" in meta["extensions"], "server metadata lists model_repository",
         str(meta))

    r = post(port, "/v2/repository/index")
    t.eq((r.status, r.json()), (200, [{"name": "m", "version": "1", "state": "READY"}]),
         "index without a body: the INI's model, version 1, READY")
    r = H.raw_http(port, b"POST /v2/repository/index HTTP/1.1\r\nHost: x\r\n"
                   b"Connection: close\r\n\r\n")
    t.ok(r.status == 200 and b'"state":"READY"' in r.body,
         "index POST with no Content-Length at all (tritonclient's call): 200", r.body[:200])
    r = post(port, "/v2/repository/index", b'{"ready": true}')
    t.eq((r.status, [m["name"] for m in r.json()]), (200, ["m"]), "ready: true lists it")
    r = post(port, "/v2/repository/index", b'{}')
    t.eq(r.status, 200, "an empty object is a valid body")

    for b, what in ((b'{"ready": 1}', "a non-boolean ready"), (b'[1,', "a truncated body"),
                    (b'"x"', "a string"), (b'{"ready": true} x', "trailing bytes")):
        r = post(port, "/v2/repository/index", b)
        t.ok(r.status == 400 and r.is_json_error(), "%s: 400 with a JSON error" % what,
             "%d %r" % (r.status, r.body))

    for op in ("load", "unload"):
        for name in ("m", "nosuch"):
            r = post(port, "/v2/repository/models/%s/%s" % (name, op), b"{}")
            t.ok(r.status == 503 and r.json() == {"error": REFUSED},
                 "%s of %s: 503 %r (model control mode none)" % (op, name, REFUSED),
                 "%d %r" % (r.status, r.body))
    r = post(port, "/v2/repository/models/m/unload",
             json.dumps({"parameters": {"unload_dependents": True}}).encode())
    t.eq(r.status, 503, "unload with unload_dependents: refused the same way")
    r = post(port, "/v2/repository/myrepo/index")
    t.ok(r.status == 501 and r.is_json_error(), "a named repository: 501", r.body)
    r = post(port, "/v2/repository/myrepo/models/m/load")
    t.eq(r.status, 501, "load in a named repository: 501")
    r = H.http(port, "GET", "/v2/repository/index")
    t.ok(r.status == 405 and r.is_json_error(), "GET index: 405 with a JSON error")
    r = post(port, "/v2/repository/models/m/reload")
    t.eq(r.status, 404, "an unknown action: 404")

    # Not ready: the coordinator is gone.
    c.kill(signal.SIGKILL)
    c.wait(10)
    t.ok(H.wait_for_ready(port, False, 5.0), "worker not ready without its coordinator")
    r = post(port, "/v2/repository/index")
    got = r.json()
    t.ok(r.status == 200 and len(got) == 1 and got[0]["state"] == "UNAVAILABLE" and
         got[0].get("reason"), "index while not ready: UNAVAILABLE with a reason", str(got))
    r = post(port, "/v2/repository/index", b'{"ready": true}')
    t.eq((r.status, r.json()), (200, []), "ready: true lists nothing while not ready")


if __name__ == "__main__":
    H.run_main("repository", body)
