#!/usr/bin/env python3
"""
inproc_py.py -- the Python side of bench/inproc-gpu.sh: (b) lookups through
the Python module `hps` with torch CUDA tensors, and the floor, a single
gather kernel over the model's rows fully resident in GPU memory.

  inproc_py.py --config INI --model NAME [--device D] [--duration S]
               [--warmup S] [--min-calls N] [--hot-dir DIR] REQUEST_FILE...

Per request file (`hps-gen requests`, one batch size B each; and, with
--hot-dir, DIR/hot-b<B>.bin written by bench-inproc --hot-out, the "all
hits" keys):

  (b)     hps.Client(INI, device=D).lookup_multi(model, keys, [B]*T, out=out)
          with keys a torch int64 CUDA tensor (one request of T*B keys,
          table-major, all requests copied to the device beforehand) and out
          a preallocated float32 CUDA tensor; per call the host clock around
          the call (it returns when the output is complete).
  floor   the T tables' rows (the model files: <table>/key int64 and
          <table>/emb_vector float32, as hps-gen wrote them) concatenated into
          one (rows, dim) CUDA tensor; keys mapped to row indices beforehand
          (numpy searchsorted; a key not in the model -> a row of the table's
          default 0); per call one torch.index_select(rows, 0, idx, out=out),
          timed with CUDA events around it (the kernel), and the host clock
          around launch + synchronize ("wall").

Both: --warmup seconds untimed, then at least --min-calls calls and
--duration seconds; p50 / p99 / mean per call in us and keys/s (keys per
call x calls / timed seconds; for the floor, over the summed event times).
One answer of (b) is compared row by row with the floor's (exact / rows of
zeros = default / wrong).

Machine-readable lines: RESULT mode=b|b-hot|floor|floor-hot B=.. keys=..
calls=.. p50_us=.. p99_us=.. mean_us=.. keys_s=.. [wall_p50_us=.. wall_p99_us=..]
[exact=.. default=.. wrong=..].  "SKIP b: why" when the module is missing
or fails; the floor runs anyway.
"""
import argparse
import configparser
import math
import os
import struct
import sys
import time

try:
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover
    print("SKIP b: %s" % e)
    print("SKIP floor: %s" % e)
    sys.exit(0)


def read_requests(path):
    with open(path, "rb") as f:
        head = f.read(24)
        magic, T, B, C = struct.unpack("=8sIIQ", head)
        if magic != b"HPSREQ1\0":
            raise SystemExit("inproc_py.py: %s is not a request file" % path)
        keys = np.fromfile(f, dtype=np.int64, count=C * T * B)
    return T, B, C, keys.reshape(C, T, B)


def model_tables(ini, model):
    cp = configparser.ConfigParser(strict=False, interpolation=None,
                                   inline_comment_prefixes=(";", "#"))
    with open(ini) as f:
        cp.read_file(f)
    sec = cp["model." + model]
    dirs = [s.strip() for s in sec["sparse_files"].replace("\n", " ").split(",") if s.strip()]
    dims = [int(s) for s in sec["embedding_vecsize_per_table"].replace("\n", " ").split(",")
            if s.strip()]
    return dirs, dims


def pct(sorted_vals, p):
    return sorted_vals[max(0, math.ceil(p * len(sorted_vals)) - 1)]


def summarize(lat_ns, keys_per_call, seconds):
    v = sorted(lat_ns)
    n = len(v)
    return {"calls": n, "p50": pct(v, 0.5) / 1e3, "p99": pct(v, 0.99) / 1e3,
            "mean": sum(v) / n / 1e3, "keys_s": n * keys_per_call / seconds}


def result(mode, B, keys, s, extra=""):
    print("  %-9s %6d %8d | %8d %9.1f %9.1f %9.1f %12.4g %s" %
          (mode, B, keys, s["calls"], s["p50"], s["p99"], s["mean"], s["keys_s"], extra))
    kv = " ".join("%s=%s" % (k, v) for k, v in s.get("kv", {}).items())
    print("RESULT mode=%s B=%d keys=%d calls=%d p50_us=%.2f p99_us=%.2f mean_us=%.2f keys_s=%.6g %s"
          % (mode, B, keys, s["calls"], s["p50"], s["p99"], s["mean"], s["keys_s"], kv))
    sys.stdout.flush()


def time_calls(fn, C, warmup, duration, min_calls):
    """Call fn(i) for i = 0, 1, ... (mod C): warm-up, then timed; host clock per call."""
    i = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < warmup or i < 5:
        fn(i % C)
        i += 1
    lat = []
    pc = time.perf_counter_ns
    start = pc()
    end = start
    while len(lat) < min_calls or (end - start) < duration * 1e9:
        a = pc()
        fn(i % C)
        end = pc()
        lat.append(end - a)
        i += 1
        if len(lat) >= 2000000:
            break
    return lat, (end - start) / 1e9, i


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--duration", type=float, default=1.5)
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--min-calls", type=int, default=30)
    ap.add_argument("--hot-dir")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()

    dev = torch.device("cuda", a.device)
    torch.cuda.set_device(dev)
    print("inproc_py.py: torch %s, device %d = %s, python %s" %
          (torch.__version__, a.device, torch.cuda.get_device_name(dev), sys.version.split()[0]))

    # ---- the floor's table: every row of every table, concatenated -----------
    t0 = time.perf_counter()
    dirs, dims = model_tables(a.config, a.model)
    T = len(dirs)
    if len(set(dims)) != 1:
        raise SystemExit("inproc_py.py: the floor needs one dim for every table")
    dim = dims[0]
    sorted_keys, order, offs, vecs = [], [], [], []
    off = 0
    for d in dirs:
        k = np.fromfile(os.path.join(d, "key"), dtype=np.int64)
        v = np.fromfile(os.path.join(d, "emb_vector"), dtype=np.float32).reshape(len(k), dim)
        o = np.argsort(k, kind="stable")
        sorted_keys.append(k[o])
        order.append(o)
        offs.append(off)
        vecs.append(v)
        off += len(k)
    vecs.append(np.zeros((1, dim), np.float32))  # the default row (0.0, hps-gen's default)
    zero_row = off
    rows_dev = torch.from_numpy(np.concatenate(vecs)).to(dev)
    del vecs
    print("floor: %d tables, %d rows x dim %d = %.1f MB resident on the GPU (loaded in %.1f s)" %
          (T, off, dim, rows_dev.numel() * 4 / 1e6, time.perf_counter() - t0))

    def to_rows(keys):  # (C, T, B) keys -> (C, T*B) global row indices, default row if absent
        C, _, B = keys.shape
        idx = np.empty((C, T, B), np.int64)
        for t in range(T):
            kt = keys[:, t, :]
            pos = np.searchsorted(sorted_keys[t], kt)
            pos = np.minimum(pos, len(sorted_keys[t]) - 1)
            hit = sorted_keys[t][pos] == kt
            idx[:, t, :] = np.where(hit, offs[t] + order[t][pos], zero_row)
        return idx.reshape(C, T * B)

    # ---- the Python module ----------------------------------------------------
    client, why = None, None
    try:
        import hps
        client = hps.Client(a.config, device=a.device)
        client.wait_ready(120000)
        print("hps module: %s (version %s), client on device %d" %
              (os.path.dirname(hps.__file__), hps.version, a.device))
    except Exception as e:  # noqa: BLE001 -- report whatever the module raises
        why = "%s: %s" % (type(e).__name__, e)
        print("SKIP b: the Python module hps failed: %s" % why)
        client = None

    print("  %-9s %6s %8s | %8s %9s %9s %9s %12s %s" %
          ("mode", "B", "keys", "calls", "p50 us", "p99 us", "mean us", "keys/s", "extra"))
    sets = [("", f) for f in a.files]
    if a.hot_dir:
        for f in a.files:
            _, B, _, _ = read_requests(f)
            p = os.path.join(a.hot_dir, "hot-b%d.bin" % B)
            if os.path.exists(p):
                sets.append(("-hot", p))
            else:
                print("no all-hits file %s" % p)
    bad = 0
    for suffix, path in sets:
        T2, B, C, keys = read_requests(path)
        if T2 != T:
            raise SystemExit("inproc_py.py: %s has %d tables, the model %d" % (path, T2, T))
        n = T * B
        idx = torch.from_numpy(to_rows(keys)).to(dev)
        iv = [idx[i] for i in range(C)]
        out_f = torch.empty((n, dim), dtype=torch.float32, device=dev)
        ref = None
        if client is not None:
            kd = torch.from_numpy(np.ascontiguousarray(keys.reshape(C, n))).to(dev)
            kv = [kd[i] for i in range(C)]  # views made once: no indexing in the timed loop
            out_b = torch.empty(n * dim, dtype=torch.float32, device=dev)
            numkeys = [B] * T
            torch.cuda.synchronize()
            try:
                lat, secs, last = time_calls(
                    lambda i: client.lookup_multi(a.model, kv[i], numkeys, out=out_b),
                    C, a.warmup, a.duration, a.min_calls)
                s = summarize(lat, n, secs)
                # one answer checked against the floor's rows
                r = last % C
                client.lookup_multi(a.model, kv[r], numkeys, out=out_b)
                torch.index_select(rows_dev, 0, iv[r], out=out_f)
                torch.cuda.synchronize()
                got = out_b.view(n, dim)
                same = (got == out_f).all(dim=1)
                zero = (got == 0).all(dim=1) & ~same
                ex, de = int(same.sum()), int(zero.sum())
                wr = n - ex - de
                bad |= wr != 0
                s["kv"] = {"exact": ex, "default": de, "wrong": wr}
                result("b" + suffix, B, n, s, "exact %d dflt %d wrong %d" % (ex, de, wr))
            except Exception as e:  # noqa: BLE001
                print("SKIP b%s B=%d: lookup failed: %s: %s" % (suffix, B, type(e).__name__, e))
            del kd, kv, out_b

        # floor: CUDA events around one index_select, synchronized per call
        ev0 = torch.cuda.Event(enable_timing=True)
        ev1 = torch.cuda.Event(enable_timing=True)
        ev_us = []

        def floor_call(i):
            ev0.record()
            torch.index_select(rows_dev, 0, iv[i], out=out_f)
            ev1.record()
            ev1.synchronize()
            ev_us.append(ev0.elapsed_time(ev1) * 1e3)

        torch.cuda.synchronize()
        wall, secs, _ = time_calls(floor_call, C, a.warmup, a.duration, a.min_calls)
        ev_t = ev_us[-len(wall):]
        ev_ns = [x * 1e3 for x in ev_t]
        s = summarize(ev_ns, n, sum(ev_t) / 1e6)
        w = summarize(wall, n, secs)
        s["kv"] = {"wall_p50_us": "%.2f" % w["p50"], "wall_p99_us": "%.2f" % w["p99"],
                   "wall_keys_s": "%.6g" % w["keys_s"]}
        result("floor" + suffix, B, n, s,
               "wall (launch+sync) p50 %.1f p99 %.1f us" % (w["p50"], w["p99"]))
        del idx, iv, out_f
    if client is not None:
        client.close()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
