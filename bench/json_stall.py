#!/usr/bin/env python3
"""
json_stall.py -- what long JSON answers cost the other connections of a
worker: 4 clients fetch answers of --keys keys of --dim floats as JSON
(OUTPUT0 as text: 60,000 x 64 = 3.84M floats, about 40 MB), back to back,
while a probe asks GET /v2/health/ready every 10 ms.  Printed per build:
the JSON answers served, and the probe's p50 / p99 / max latency.  With
--baseline DIR, the same run with that build's hps-worker and coordinator
(e.g. the previous commit's, built in a git worktree), one after the other.

usage: bench/json_stall.py [--build DIR] [--baseline DIR] [--keys N] [--dim D]
                           [--seconds S]
"""
import argparse
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))


def run_one(args):
    import hpstest as H

    def body(t, cl):
        m = cl.gen_model("m", rows=[args.keys], dims=[args.dim], max_batch=100000)
        conf = cl.write_config("hps.ini", m.ini_text, [
            ("worker", "max_body_size", "64MiB"),
            ("worker", "max_keys_per_request", args.keys),
            ("volatile_db", "initial_cache_rate", 1.0)])
        cl.start_coordinator(conf)
        w = cl.start_worker(conf)
        keys = m.file_keys[0][:args.keys]
        stop, done, bad, lat = threading.Event(), [0], [0], []

        def client():
            while not stop.is_set():
                r = H.infer(w.http_port, "m", [keys], binary=False, timeout=120)
                done[0] += r.status == 200
                bad[0] += r.status != 200

        def probe():
            while not stop.is_set():
                t0 = time.monotonic()
                H.http(w.http_port, "GET", "/v2/health/ready", timeout=60)
                lat.append(time.monotonic() - t0)
                time.sleep(0.01)
        ths = [threading.Thread(target=client) for _ in range(4)]
        ths.append(threading.Thread(target=probe))
        for th in ths:
            th.start()
        time.sleep(args.seconds)
        stop.set()
        for th in ths:
            th.join(120)
        print("%s: %d JSON answers of %d floats (%d failed); ready probe p50 %.1f ms, "
              "p99 %.1f ms, max %.1f ms (%d probes)"
              % (os.environ["HPS_WORKER"], done[0], args.keys * args.dim, bad[0],
                 H.pct(lat, 0.5) * 1e3, H.pct(lat, 0.99) * 1e3, max(lat) * 1e3, len(lat)),
              flush=True)
    H.run_main("json_stall", body)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(os.path.dirname(HERE), "build"))
    ap.add_argument("--baseline")
    ap.add_argument("--keys", type=int, default=60000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        return run_one(args)
    for b in [args.build] + ([args.baseline] if args.baseline else []):
        b = os.path.abspath(b)
        env = dict(os.environ, HPS_COORDINATOR=b + "/coordinator/hps-coordinator",
                   HPS_WORKER=b + "/worker/hps-worker", HPS_GEN=b + "/tools/hps-gen/hps-gen",
                   HPS_SHM=b + "/tools/hps-shm/hps-shm", PYTHONDONTWRITEBYTECODE="1")
        cmd = [sys.executable, os.path.abspath(__file__), "--one", "--keys", str(args.keys),
               "--dim", str(args.dim), "--seconds", str(args.seconds)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        lines = [ln for ln in out.stdout.splitlines() if "JSON answers" in ln]
        print(lines[0] if lines else "%s: failed\n%s" % (b, (out.stdout + out.stderr)[-2000:]))


if __name__ == "__main__":
    main()
