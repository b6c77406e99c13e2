#!/usr/bin/env python3
"""
int-connections: trickling and idle connections cannot lock clients out.

hps-worker with [worker] max_connections = 64 and header_timeout_ms = 1000.
  1. 20 connections that trickle a request header one byte every 100 ms
     (each byte restarts libmicrohttpd's idle timeout) are closed by the
     server once the header deadline has passed.
  2. HPS_TRICKLE (default 300) such connections opened as fast as the
     server accepts them, far past max_connections, while a client sends
     valid requests, each on a new connection: every valid request is
     answered exactly; the connections closed to make room are counted in
     nv_hps_http_connections_evicted, and the open connections stay at or
     below max_connections.  p50 / p99 of the valid requests are printed.
  3. SLOW_ROUNDS more such floods, each with a valid client that connects as
     the flood starts and sends its request only SLOW_PAUSE later: while it
     has sent nothing it cannot be told from the flood's connections, and
     every one of them is answered exactly all the same (the server takes a
     connection only once its request has begun: TCP_DEFER_ACCEPT).
  4. 20 connections that send a whole header, then a body one byte every
     100 ms (under [worker] min_body_rate), are closed once header_timeout_ms
     has passed, counted in nv_hps_http_body_timeouts (they were held for
     ever: 16 of them locked a worker of max_connections 16).
  5. 3 x max_connections of them: valid requests are answered exactly.
  6. 80 connections trickling a header to the metrics port (64 connections
     at most): a scrape is still answered (it waited a minute).
  7. A worker whose open files limit (400, prlimit) is below max_connections
     (1,024, the default) + 256 serves at most 200 connections (logged), so
     the eviction works: under 500 trickling connections (header timeout
     30 s), valid requests are answered exactly.  (It used to accept until
     EMFILE, evict nothing, and leave valid clients waiting in the backlog.)
"""
import os
import random
import shutil
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402

MAX_CONN = 64
HEADER_MS = 1000
SLOW_ROUNDS = 5
SLOW_PAUSE = 0.05
PARTIAL = b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
BODY_HEAD = b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n{"


class Trickler(threading.Thread):
    """Opens n connections, sends head on each at once, then one more byte
    of data (a header, or a body) on each every period; records which the
    server closed."""

    def __init__(self, port, n, period=0.1, head=b"", data=PARTIAL):
        super().__init__(daemon=True)
        self.port, self.n, self.period = port, n, period
        self.head, self.data = head, data
        self.socks, self.closed, self.opened = [], 0, 0
        self.stop_ev = threading.Event()

    def run(self):
        pos = {}
        for _ in range(self.n):
            if self.stop_ev.is_set():
                break
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=2)
                if self.head:
                    s.sendall(self.head)
                s.setblocking(False)
                self.socks.append(s)
                pos[s] = 0
                self.opened += 1
            except OSError:
                pass
        while not self.stop_ev.is_set() and pos:
            for s in list(pos):
                try:
                    i = pos[s] % len(self.data)
                    s.send(self.data[i:i + 1])
                    pos[s] += 1
                    if s.recv(1) == b"":
                        raise ConnectionResetError
                except BlockingIOError:
                    pass
                except OSError:
                    self.closed += 1
                    del pos[s]
                    s.close()
            time.sleep(self.period)

    def finish(self):
        self.stop_ev.set()
        self.join(10)
        for s in self.socks:
            s.close()


def ten_requests(port, model, rng):
    """Ten valid requests of 4 random keys, one after another (5 s each):
    how many were answered exactly, and the last error's text."""
    answered, detail = 0, ""
    for _ in range(10):
        keys = [rng.sample(model.file_keys[0], 4)]
        try:
            _, g = H.decode_output(H.infer(port, "m", keys, binary=True, timeout=5))
            answered += g == model.expected(keys)
        except Exception as e:  # noqa: BLE001
            detail = "%s: %s" % (type(e).__name__, e)
    return answered, detail


def body(t, cl):
    model = cl.gen_model("m", rows=[2000], dims=[8])
    conf = cl.write_config("hps.ini", model.ini_text, [
        ("worker", "max_connections", MAX_CONN),
        ("worker", "header_timeout_ms", HEADER_MS),
    ])
    cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    port = w.http_port
    rng = random.Random(5)

    # 1. The header deadline, not reset by each byte.
    tr = Trickler(port, 20)
    tr.start()
    H.wait_until(lambda: tr.closed >= 20, HEADER_MS / 1000 + 3.0)
    t.ok(tr.opened == 20 and tr.closed == 20,
         "20 trickling connections closed after header_timeout_ms (%d of %d closed)"
         % (tr.closed, tr.opened))
    tr.finish()
    m = H.metrics(w.metrics_port)
    t.ok(m.get("nv_hps_http_header_timeouts", 0) >= 20, "nv_hps_http_header_timeouts counts them "
         "(%s)" % m.get("nv_hps_http_header_timeouts"))

    # 2. A flood far past max_connections while valid requests keep coming.
    n = int(os.environ.get("HPS_TRICKLE", "300"))
    flood = Trickler(port, n)
    flood.start()
    lat, ok, detail, peak = [], True, "", 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < 3.0:
        keys = [rng.sample(model.file_keys[0], 4)]
        try:
            r = H.infer(port, "m", keys, binary=True, timeout=10)  # a new connection each
            _, g = H.decode_output(r)
            lat.append(r.elapsed)
            if g != model.expected(keys):
                ok, detail = False, H.first_mismatch(g, model.expected(keys), model, keys)
        except Exception as e:  # noqa: BLE001
            ok, detail = False, "%s: %s" % (type(e).__name__, e)
        mm = H.metrics(w.metrics_port)
        peak = max(peak, int(mm.get("nv_hps_http_connections", 0)))
    opened = flood.opened
    flood.finish()
    m = H.metrics(w.metrics_port)
    t.diag("flood of %d trickling connections: %d valid requests, p50 %.1f ms, p99 %.1f ms; "
           "evicted %s, open at most %d" % (opened, len(lat), H.pct(lat, 0.5) * 1000,
                                            H.pct(lat, 0.99) * 1000,
                                            m.get("nv_hps_http_connections_evicted"), peak))
    t.ok(ok and len(lat) > 10, "every valid request answered exactly during the flood "
         "(%d requests)" % len(lat), detail)
    t.ok(m.get("nv_hps_http_connections_evicted", 0) > 0,
         "connections closed to make room are counted (%s)"
         % m.get("nv_hps_http_connections_evicted"))
    t.ok(peak <= MAX_CONN, "open connections stay within max_connections (peak %d)" % peak)

    # 3. A client slow to send, connected as a flood starts.
    answered, detail = 0, ""
    for _ in range(SLOW_ROUNDS):
        flood = Trickler(port, n)
        flood.start()
        keys = [rng.sample(model.file_keys[0], 4)]
        try:
            _, g = H.decode_output(H.infer(port, "m", keys, binary=True, timeout=10,
                                           pause=SLOW_PAUSE))
            if g == model.expected(keys):
                answered += 1
            else:
                detail = H.first_mismatch(g, model.expected(keys), model, keys)
        except Exception as e:  # noqa: BLE001
            detail = "%s: %s" % (type(e).__name__, e)
        flood.finish()
    t.ok(answered == SLOW_ROUNDS, "a client that sends %d ms after connecting, as a flood of "
         "%d starts, is answered exactly (%d of %d)"
         % (SLOW_PAUSE * 1000, n, answered, SLOW_ROUNDS), detail)


    # 4. A body trickled a byte at a time, its header whole.
    tr = Trickler(port, 20, head=BODY_HEAD, data=b" ")
    tr.start()
    H.wait_until(lambda: tr.closed >= 20, HEADER_MS / 1000 + 3.0)
    t.ok(tr.opened == 20 and tr.closed == 20,
         "20 connections trickling a body (10 bytes/s, under min_body_rate) closed once "
         "header_timeout_ms passed (%d of %d closed)" % (tr.closed, tr.opened))
    tr.finish()
    m = H.metrics(w.metrics_port)
    t.ok(m.get("nv_hps_http_body_timeouts", 0) >= 20, "nv_hps_http_body_timeouts counts them "
         "(%s)" % m.get("nv_hps_http_body_timeouts"))

    # 5. A flood of them past max_connections: valid requests still answered.
    flood = Trickler(port, 3 * MAX_CONN, head=BODY_HEAD, data=b" ")
    flood.start()
    time.sleep(0.5)
    answered, detail = ten_requests(port, model, rng)
    flood.finish()
    t.ok(answered == 10, "under %d connections trickling bodies, 10 valid requests answered "
         "exactly (%d; before, %d such connections locked every client out)"
         % (3 * MAX_CONN, answered, MAX_CONN), detail)

    # 6. The metrics port: 64 silent or trickling connections (its limit)
    # no longer block every scrape until libmicrohttpd's idle timeout.
    mtr = Trickler(w.metrics_port, 80, data=b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * 5000)
    mtr.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    got = H.wait_until(lambda: scrape_ok(w.metrics_port), 5, 0.1)
    mtr.finish()
    t.ok(got, "a scrape under 80 trickling metrics connections is answered (%.1f s)"
         % (time.monotonic() - t0))

    # 7. An open files limit below max_connections + 256.
    if not shutil.which("prlimit"):
        t.skip("open files limit phase", "prlimit (util-linux) not installed")
        return
    conf7 = cl.write_config("nofile.ini", model.ini_text, [("worker", "header_timeout_ms", 30000)])
    w7 = cl.start_worker(conf7, instance=1, wrap=["prlimit", "--nofile=400:400"])
    t.ok("serving at most 200 connections" in w7.log(),
         "open files limit 400: the worker serves at most 200 connections, and says so",
         w7.log())
    flood = Trickler(w7.http_port, 500)
    flood.start()
    time.sleep(1.0)
    answered, detail = ten_requests(w7.http_port, model, rng)
    flood.finish()
    t.ok(answered == 10, "under 500 trickling connections, 10 valid requests answered exactly "
         "(%d)" % answered, detail)


def scrape_ok(port):
    try:
        return H.http(port, "GET", "/metrics", timeout=2).status == 200
    except OSError:
        return False


if __name__ == "__main__":
    H.run_main("connections", body)
