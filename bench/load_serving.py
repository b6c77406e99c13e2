#!/usr/bin/env python3
"""
load_serving.py -- lookups of a serving model while another model of about
1 GB loads (issue 20's benchmark), beside the same stream with nothing
loading, in one run.

A worker serves model "a" (small, all of it in shared memory) from the
coordinator's segment.  Model "b" (--rows-b rows of --dim floats: 2,000,000
x 128 = 1.02 GB of emb_vector) is then loaded while "a" serves:
  --mode explicit (default): model_control_mode = explicit, startup_models
    = ^a$, and b is loaded with POST /v2/repository/models/b/load on the
    worker (Triton's explicit model control); the load's time is that
    call's;
  --mode restart: the coordinator is restarted with "a" and "b";
  --mode hog: no load at all; a separate process does the machine's side of
    one instead (reads b's files, writes as many bytes into a fresh
    shared-memory file as the volatile DB takes, writes b's bytes to a file
    on disk and fsyncs it), to tell what a load costs the serving side
    through the kernel's memory and I/O work from what the coordinator's
    own work costs.
In the first two modes the coordinator builds its new segment beside the serving one
and publishes it when both models are loaded, so the worker answers from
the old segment for the whole load.  One closed-loop client sends requests of --keys keys of "a" back to
back; each answer is checked exactly.  Printed: p50 / p99 / max latency and
req/s with nothing loading and during the load, the load's wall time, and
the counts of wrong answers and errors (both must be 0).

usage: bench/load_serving.py [--build DIR] [--rows-b N] [--dim D] [--keys K]
                             [--idle S] [--mode explicit|restart|hog]
                             [--set SECTION.KEY=VALUE]...
  --set  a setting of the INI (e.g. hps.load_cpu_share=1 for no confinement)
Environment as for the integration tests (HPS_COORDINATOR, HPS_WORKER,
HPS_GEN, HPS_SHM) overrides --build.
"""
import argparse
import os
import random
import subprocess
import sys
import threading
import time

here = os.path.dirname(os.path.abspath(__file__))
repo = os.path.dirname(here)


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(repo, "build"))
    ap.add_argument("--rows-b", type=int, default=2000000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--keys", type=int, default=26)
    ap.add_argument("--idle", type=float, default=5.0)
    ap.add_argument("--mode", choices=("explicit", "restart", "hog"), default="explicit")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    return ap.parse_args()


args = parse()
for var, rel in (("HPS_COORDINATOR", "coordinator/hps-coordinator"),
                 ("HPS_WORKER", "worker/hps-worker"), ("HPS_GEN", "tools/hps-gen/hps-gen"),
                 ("HPS_SHM", "tools/hps-shm/hps-shm")):
    os.environ.setdefault(var, os.path.abspath(os.path.join(args.build, rel)))
sys.path.insert(0, os.path.join(repo, "tests", "integration"))
import hpstest as H  # noqa: E402


class Stream(threading.Thread):
    def __init__(self, port, model):
        super().__init__(daemon=True)
        self.port, self.model = port, model
        self.rng = random.Random(5)
        self.mark = "idle"
        self.lat = {"idle": [], "loading": [], "after": []}
        self.wrong = self.errors = 0
        self.stop_ev = threading.Event()

    def run(self):
        m = self.model
        while not self.stop_ev.is_set():
            kpt = [self.rng.sample(m.file_keys[0], args.keys)]
            mark = self.mark
            try:
                r = H.infer(self.port, "a", kpt, binary=True, timeout=10)
                _, got = H.decode_output(r)
            except Exception:  # noqa: BLE001
                self.errors += 1
                continue
            if got != m.expected(kpt):
                self.wrong += 1
            if mark == self.mark:
                self.lat[mark].append(r.elapsed)


# --mode hog: the kernel-side work of a load, without a coordinator.
HOG = r'''
import os, sys
src, shm, out, shm_bytes = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
piece = 16 << 20
total = 0
for root, _, files in os.walk(src):
    for f in files:
        with open(os.path.join(root, f), "rb", buffering=0) as fh:
            while True:
                b = fh.read(piece)
                if not b:
                    break
                total += len(b)
buf = b"\1" * piece
with open(shm, "wb", buffering=0) as fh:
    for _ in range(0, shm_bytes, piece):
        fh.write(buf)
with open(out, "wb", buffering=0) as fh:
    for _ in range(0, total, piece):
        fh.write(buf)
    os.fsync(fh.fileno())
os.unlink(shm)
os.unlink(out)
'''


def pct(v, q):
    """Microseconds; hpstest's nearest-rank percentile."""
    return H.pct(v, q) * 1e6


def main():
    with H.Cluster("loadserve") as cl:
        a = cl.gen_model("a", rows=[100000], dims=[args.dim], defaults=[0.25], subdir="a")
        print("generating model b: %d rows x %d floats (%.2f GB of emb_vector)..." %
              (args.rows_b, args.dim, args.rows_b * args.dim * 4 / 1e9), flush=True)
        b = cl.gen_model("b", rows=[args.rows_b], dims=[args.dim], defaults=[0.0], subdir="b")
        size = H.ini_set(a.ini_text, "volatile_db", "shared_memory_size", "%dMiB" % (
            (args.rows_b * (args.dim * 4 + 64) * 1.3 + 400e6) // (1 << 20)))
        base = H.ini_set(size, "volatile_db", "initial_cache_rate", 1.0)
        for kv in args.set:
            key, value = kv.split("=", 1)
            sect, name = key.rsplit(".", 1)
            base = H.ini_set(base, sect, name, value)
        explicit = args.mode == "explicit"
        if explicit:
            base = H.ini_set(H.ini_set(base, "hps", "model_control_mode", "explicit"), "hps",
                             "startup_models", "^a$")
        conf_a = cl.write_config("a.ini", base, [])
        sect_b = b.ini_text[b.ini_text.index("[model.b]"):]
        conf_ab = cl.path("ab.ini")
        with open(conf_ab, "w") as f:
            f.write(open(conf_a).read() + "\n" + sect_b)
        c1 = cl.start_coordinator(conf_ab if explicit else conf_a)
        w = cl.start_worker(conf_ab if explicit else conf_a)
        s = Stream(w.http_port, a)
        s.start()
        time.sleep(args.idle)
        if explicit:
            s.mark = "loading"
            t0 = time.monotonic()
            r = H.http(w.http_port, "POST", "/v2/repository/models/b/load", body=b"{}",
                       timeout=600)
            load_s = time.monotonic() - t0
            c2 = c1
            print("POST /v2/repository/models/b/load: %d %s" % (r.status, r.body[:200]))
        elif args.mode == "hog":
            s.mark = "loading"
            t0 = time.monotonic()
            shm_bytes = int(args.rows_b * (args.dim * 4 + 8) * 1.05)
            subprocess.run([sys.executable, "-c", HOG, b.dir,
                            "/dev/shm/hps-bench-hog-%d" % os.getpid(),
                            cl.path("hog.out"), str(shm_bytes)], check=True)
            load_s = time.monotonic() - t0
            c2 = c1
        else:
            c1.kill()
            c1.wait(10)
            s.mark = "loading"
            t0 = time.monotonic()
            c2 = cl.start_coordinator(conf_ab, wait_ready=False)
            while "published /dev/shm" not in c2.log() and c2.alive():
                time.sleep(0.01)
            load_s = time.monotonic() - t0
        s.mark = "after"
        time.sleep(1.0)
        s.stop_ev.set()
        s.join(20)
        print("model b loaded beside the serving segment in %.1f s (%s)" %
              (load_s, "the load request" if explicit else "coordinator start to publish")
              if args.mode != "hog" else "the machine's side of a load (--mode hog) in %.1f s"
              % load_s)
        print("%-34s %8s %8s %8s %8s %8s" % ("lookups of model a (%d keys)" % args.keys,
                                              "requests", "req/s", "p50 us", "p99 us",
                                              "max us"))
        spans = {"idle": args.idle, "loading": load_s, "after": 1.0}
        for k in ("idle", "loading", "after"):
            v = s.lat[k]
            print("%-34s %8d %8.0f %8.0f %8.0f %8.0f" % (k, len(v), len(v) / spans[k],
                                                         pct(v, 0.5), pct(v, 0.99),
                                                         pct(v, 1.0)))
        if s.lat["idle"] and s.lat["loading"]:
            print("during the load / idle: p50 %.2fx, p99 %.2fx" %
                  (pct(s.lat["loading"], 0.5) / pct(s.lat["idle"], 0.5),
                   pct(s.lat["loading"], 0.99) / pct(s.lat["idle"], 0.99)))
        print("wrong answers %d, errors %d" % (s.wrong, s.errors))
        for line in c2.log().splitlines():
            if "model b:" in line or "published" in line or "CPUs" in line:
                print("  coordinator: " + line.split("  ", 1)[-1])
        return 0 if s.wrong == 0 and s.errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
