#!/usr/bin/env python3
"""
int-metrics: the Triton families of a worker's /metrics mean what Triton's
mean (an auditor's findings).

  (1) queue time: with one lookup thread, the coordinator stopped
      (SIGSTOP) and miss_timeout_ms 300, three concurrent requests with
      misses wait for the pool one after the other: the queue duration grows
      by at least the 0.3 s the second one waited and 0.6 s the third (it
      stayed 0: that wait was counted nowhere);
  (2) failed requests (bad JSON, NUMKEYS not matching KEYS) add to
      nv_inference_request_failure only, not to the request duration
      (Triton's; an average latency of duration / success counted them); a
      worker without GPU caches has no GPU/CPU path families (they showed 0);
  (3) explicit model control: n version 1 answers 3 requests, is unloaded,
      the INI names version 2, n is loaded: nv_inference_request_success
      and nv_hps_lookup_keys of version 2 both start at 0 (the latter kept
      version 1's 30 keys), and count 10 after one request of 10 keys; while
      unloaded, n has no samples in any family (they stayed, at their
      last values), and the same version unloaded and loaded again counts
      from 0 (it went on from 1 and 10).
"""
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402


def sample(port, name, **labels):
    for lab, v in H.metric_samples(port, name):
        if all(lab.get(k) == str(x) for k, x in labels.items()):
            return v
    return None


def queue_time(t, cl):
    m = cl.gen_model("m", rows=[2000], dims=[4], subdir="q")
    conf = cl.write_config("q.ini", m.ini_text, [
        ("volatile_db", "initial_cache_rate", 0.5), ("worker", "lookup_threads", 1),
        ("worker", "miss_timeout_ms", 300)])
    coord = cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    misses = m.pdb_only_keys(0, 0.5)
    before = sample(w.metrics_port, "nv_inference_queue_duration_us", model="m", version=1)
    coord.kill(signal.SIGSTOP)
    try:
        res = []
        ths = [threading.Thread(target=lambda i=i: res.append(
            H.infer(w.http_port, "m", [misses[10 * i:10 * i + 10]]).status)) for i in range(3)]
        for th in ths:
            th.start()
            time.sleep(0.02)
        for th in ths:
            th.join(30)
    finally:
        coord.kill(signal.SIGCONT)
    after = sample(w.metrics_port, "nv_inference_queue_duration_us", model="m", version=1)
    t.eq(res, [200, 200, 200], "three requests with misses answered (defaults after 300 ms)")
    # about 0.28 s + 0.56 s (they start 20 ms apart); 0.5 s leaves room for
    # late thread starts, and was 0 before
    t.ok(after - before >= 500000, "queue duration grew by %.0f us: the 2nd and 3rd requests "
         "waited about 0.3 s and 0.6 s for the one lookup thread" % (after - before))
    return w


def failures(t, w):
    port, labels = w.metrics_port, {"model": "m", "version": 1}
    dur = sample(port, "nv_inference_request_duration_us", **labels)
    ok = sample(port, "nv_inference_request_success", **labels)
    bad = [H.http(w.http_port, "POST", "/v2/models/m/infer", b"{not json"),
           H.http(w.http_port, "POST", "/v2/models/m/infer", H.infer_json_body([[1, 2]]).replace(
               b'"data": [2]', b'"data": [3]'))]
    t.eq([r.status for r in bad], [400, 400], "two malformed requests: 400")
    t.eq([sample(port, "nv_inference_request_duration_us", **labels),
          sample(port, "nv_inference_request_success", **labels)], [dur, ok],
         "failed requests add nothing to the request duration (nor to success)")
    t.ok(sample(port, "nv_inference_request_failure", reason="OTHER", **labels) >= 2,
         "and count as failures")
    body = H.http(port, "GET", "/metrics").body.decode()
    t.ok("nv_hps_gpu_path_requests" not in body and "nv_hps_cpu_path_requests" not in body,
         "a worker without GPU caches has no GPU/CPU path families")


def control_version(t, cl):
    seg = cl.new_segment_name("ctl")
    n1 = cl.gen_model("n", rows=[500], dims=[4], subdir="v1", version=1, segment=seg)
    n2 = cl.gen_model("n", rows=[500], dims=[4], subdir="v2", version=2, segment=seg)
    s = [("volatile_db", "initial_cache_rate", 1.0), ("hps", "model_control_mode", "explicit"),
         ("hps", "startup_models", "n")]
    conf = cl.write_config("c.ini", n1.ini_text, s)
    cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    for _ in range(3):
        H.infer(w.http_port, "n", [n1.file_keys[0][:10]])
    t.eq(sample(w.metrics_port, "nv_hps_lookup_keys", model="n", version=1), 30,
         "version 1: 30 keys looked up")
    r = H.http(w.http_port, "POST", "/v2/repository/models/n/unload", b"{}", timeout=60)
    t.eq(r.status, 200, "unload n")

    def series_of_n():
        body = H.http(w.metrics_port, "GET", "/metrics").body.decode()
        return sorted({ln.split("{")[0] for ln in body.splitlines()
                       if 'model="n"' in ln and not ln.startswith("#")})
    t.ok(H.wait_until(lambda: series_of_n() == [], 5, 0.05),
         "an unloaded model has no samples (Triton drops its metrics)", series_of_n())
    cl.write_config("c.ini", n2.ini_text, s)
    r = H.http(w.http_port, "POST", "/v2/repository/models/n/load", b"{}", timeout=60)
    t.eq(r.status, 200, "load n: version 2")

    def counts():
        return [sample(w.metrics_port, f, model="n", version=2)
                for f in ("nv_inference_request_success", "nv_hps_lookup_keys")]
    t.ok(H.wait_until(lambda: counts() == [0, 0], 5, 0.05),
         "version 2's request and key counters start at 0", counts())
    H.infer(w.http_port, "n", [n2.file_keys[0][:10]])
    t.eq(counts(), [1, 10], "one request of 10 keys on version 2: 1 and 10")
    # The same version unloaded and loaded again counts from 0 as well.
    for op in ("unload", "load"):
        r = H.http(w.http_port, "POST", "/v2/repository/models/n/" + op, b"{}", timeout=60)
        t.eq(r.status, 200, op + " n (version 2 again)")
        if op == "unload":
            t.ok(H.wait_until(lambda: series_of_n() == [], 5, 0.05),
                 "no samples of n while it is unloaded", series_of_n())
    t.ok(H.wait_until(lambda: counts() == [0, 0], 5, 0.05),
         "version 2 loaded again: its counters start at 0", counts())


def body(t, cl):
    w = queue_time(t, cl)
    failures(t, w)
    control_version(t, cl)


if __name__ == "__main__":
    H.run_main("metrics", body)
