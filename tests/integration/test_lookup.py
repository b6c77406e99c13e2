#!/usr/bin/env python3
"""
int-lookup: coordinator + two workers; every lookup path gives the
generator's exact vectors.

Model: 2 tables of 20000 and 5000 rows, dims 16 and 8, defaults 0.5 and -2;
initial_cache_rate = 0.5 (the first half of each table's file rows in the
volatile DB, the rest only in RocksDB), cache_missed_embeddings = true.
Checks: volatile-DB keys, persistent-DB-only keys and unknown keys (default
value) over JSON and binary requests, identical on both workers; the metrics
counters move by exactly the expected amounts (a persistent-DB hit is a
volatile-DB hit the second time, also on the other worker); a whole-table
lookup; hps-shm check.
"""
import os
import random
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402

RATE = 0.5


def mixed_request(rng, model, n_vdb, n_pdb, n_unknown, pdb_pool, unk_start):
    """Per table: n_vdb keys from the VDB half, n_pdb fresh keys from the
    PDB-only pool (removed from it), n_unknown unknown keys; shuffled."""
    kpt = []
    for t in range(len(model.rows)):
        ks = rng.sample(model.vdb_keys(t, RATE), n_vdb[t])
        ks += [pdb_pool[t].pop() for _ in range(n_pdb[t])]
        ks += model.unknown_keys(t, n_unknown[t], start=unk_start)
        rng.shuffle(ks)
        kpt.append(ks)
    return kpt


def body(t, cl):
    H.check_gen_port(t)
    model = cl.gen_model("m", rows=[20000, 5000], dims=[16, 8], defaults=[0.5, -2.0])
    t.ok(all(sorted(model.file_keys[i]) == sorted(H.gen_key(i, j) for j in range(model.rows[i]))
             for i in range(2)),
         "hps-gen's key files hold hps_gen_key(t, 0..N-1)")
    conf = cl.write_config("hps.ini", model.ini_text, [
        ("volatile_db", "initial_cache_rate", RATE),
        ("volatile_db", "cache_missed_embeddings", "true"),
        ("volatile_db", "shared_memory_auto_remove", "true"),
        ("hps", "heartbeat_interval_ms", 50),
        ("worker", "miss_timeout_ms", 2000),
        ("worker", "http_threads", 2),
    ])
    cl.start_coordinator(conf)
    info = cl.shm_info()
    rows = {tb["table"]: tb["rows"] for tb in info["tables"]}
    t.eq(rows, {"sparse_embedding0": 10000, "sparse_embedding1": 2500},
         "initial_cache_rate 0.5 puts half of each table in the volatile DB")
    defaults = {tb["table"]: tb["default_value"] for tb in info["tables"]}
    t.eq(defaults, {"sparse_embedding0": 0.5, "sparse_embedding1": -2.0},
         "segment tables carry default_value_for_each_table")

    w0 = cl.start_worker(conf, instance=0)
    w1 = cl.start_worker(conf, instance=1)
    t.ok(w0.http_port != w1.http_port, "two workers on different ports (%d, %d)" %
         (w0.http_port, w1.http_port))
    for w in (w0, w1):
        t.eq(H.ready_status(w.http_port), 200, "worker pid %d is ready" % w.pid)

    rng = random.Random(1234)
    pool = [list(model.pdb_only_keys(i, RATE)) for i in range(2)]
    for p in pool:
        rng.shuffle(p)

    # ---- R1: mixed keys, JSON, worker 0 ------------------------------------
    n_vdb, n_pdb, n_unk = [40, 25], [30, 20], [6, 4]
    kpt = mixed_request(rng, model, n_vdb, n_pdb, n_unk, pool, 0)
    pdb_keys = {(i, k) for i in range(2) for k in kpt[i] if k in set(model.pdb_only_keys(i, RATE))}
    t.eq(len(pdb_keys), sum(n_pdb), "R1 holds %d persistent-DB-only keys" % sum(n_pdb))
    want = model.expected(kpt)
    nk = sum(len(k) for k in kpt)
    c0 = H.hps_counters(w0.metrics_port, "m")
    info0 = cl.shm_info()
    rows0 = sum(tb["rows"] for tb in info0["tables"])
    r = H.infer(w0.http_port, "m", kpt, binary=False, req_id="r1-json")
    j, got = H.decode_output(r)
    t.ok(got == want, "JSON lookup on worker 0: VDB, PDB-only and unknown keys exact",
         H.first_mismatch(got, want, model, kpt))
    t.eq(r.headers.get("content-type", "").split(";")[0], "application/json",
         "JSON response has Content-Type application/json")
    out = j["outputs"][0]
    t.eq((j.get("id"), j.get("model_name"), out["name"], out["datatype"], out["shape"]),
         ("r1-json", "m", "OUTPUT0", "FP32", [sum(len(kpt[i]) * model.dims[i] for i in range(2))]),
         "response id, model_name, OUTPUT0 FP32 shape [sum n_t*D_t]")
    t.eq((j.get("parameters") or {}).get("NumSample"), nk // 2,
         "NumSample = keys / sum(maxnum_catfeature_query_per_table_per_sample)")
    d = H.diff(H.hps_counters(w0.metrics_port, "m"), c0)
    t.eq((d["lookup_keys"], d["volatile_db_hit_keys"], d["persistent_db_hit_keys"],
          d["default_value_keys"]),
         (nk, sum(n_vdb), sum(n_pdb), sum(n_unk)),
         "worker 0 counters: lookup, volatile-DB hits, persistent-DB hits, defaults")
    # The segment's own counters (hps-shm info) count each key once, though
    # a request with misses is looked up again where it may wait for them.
    info1 = cl.shm_info()
    seg = [(b["lookups"] - a["lookups"], b["hits"] - a["hits"])
           for a, b in zip(info0["tables"], info1["tables"])]
    t.eq(seg, [(len(kpt[i]), n_vdb[i]) for i in range(2)],
         "hps-shm info: each table's lookups and hits grew by its keys and volatile-DB hits")

    # ---- R1 again, binary, worker 0: PDB keys are now VDB hits --------------
    cl.wait_vdb_rows(rows0 + sum(n_pdb))  # inserted just after the answer
    c0 = H.hps_counters(w0.metrics_port, "m")
    r = H.infer(w0.http_port, "m", kpt, binary=True, req_id="r1-bin")
    t.eq(r.headers.get("content-type", "").split(";")[0], "application/octet-stream",
         "binary response has Content-Type application/octet-stream")
    jb, gotb = H.decode_output(r)
    t.ok(gotb == got, "binary lookup equals the JSON lookup bit for bit",
         H.first_mismatch(gotb, got, model, kpt))
    t.eq(jb["outputs"][0]["parameters"].get("binary_data_size"), len(want) * 4,
         "binary_data_size = 4 x OUTPUT0 elements")
    d = H.diff(H.hps_counters(w0.metrics_port, "m"), c0)
    t.eq((d["volatile_db_hit_keys"], d["persistent_db_hit_keys"], d["default_value_keys"]),
         (sum(n_vdb) + sum(n_pdb), 0, sum(n_unk)),
         "cache_missed_embeddings: second lookup of the PDB-only keys hits the volatile DB")

    # NUMKEYS binary too, and binary_data_output false (JSON output of a binary request).
    r = H.infer(w0.http_port, "m", kpt, binary=True, numkeys_binary=True, req_id="r1-bin2")
    _, g2 = H.decode_output(r)
    t.ok(g2 == want, "binary KEYS and binary NUMKEYS", H.first_mismatch(g2, want, model, kpt))
    r = H.infer(w0.http_port, "m", kpt, binary=True, output_binary=False, req_id="r1-bin3")
    _, g3 = H.decode_output(r)
    t.ok(g3 == want and "inference-header-content-length" not in r.headers,
         "binary KEYS with a JSON OUTPUT0 (binary_data false)",
         H.first_mismatch(g3, want, model, kpt))

    # ---- both workers agree --------------------------------------------------
    c1 = H.hps_counters(w1.metrics_port, "m")
    for binary in (False, True):
        r = H.infer(w1.http_port, "m", kpt, binary=binary)
        _, g = H.decode_output(r)
        t.ok(g == want, "worker 1 answers R1 identically (%s)" % ("binary" if binary else "JSON"),
             H.first_mismatch(g, want, model, kpt))
    d = H.diff(H.hps_counters(w1.metrics_port, "m"), c1)
    t.eq((d["volatile_db_hit_keys"], d["persistent_db_hit_keys"]),
         (2 * (sum(n_vdb) + sum(n_pdb)), 0),
         "worker 1 finds the keys worker 0 elevated in the shared volatile DB")

    # ---- R2: fresh PDB-only keys through worker 1, then worker 0 -------------
    kpt2 = mixed_request(rng, model, [10, 10], [50, 30], [3, 3], pool, 100)
    want2 = model.expected(kpt2)
    c1 = H.hps_counters(w1.metrics_port, "m")
    rows0 = cl.vdb_rows()
    _, g = H.decode_output(H.infer(w1.http_port, "m", kpt2, binary=True))
    t.ok(g == want2, "worker 1, binary: fresh PDB-only keys exact",
         H.first_mismatch(g, want2, model, kpt2))
    d = H.diff(H.hps_counters(w1.metrics_port, "m"), c1)
    t.eq((d["volatile_db_hit_keys"], d["persistent_db_hit_keys"], d["default_value_keys"]),
         (20, 80, 6), "worker 1 counters for R2")
    cl.wait_vdb_rows(rows0 + 80)
    c0 = H.hps_counters(w0.metrics_port, "m")
    _, g = H.decode_output(H.infer(w0.http_port, "m", kpt2, binary=False))
    t.ok(g == want2, "worker 0, JSON: R2 exact", H.first_mismatch(g, want2, model, kpt2))
    d = H.diff(H.hps_counters(w0.metrics_port, "m"), c0)
    t.eq((d["volatile_db_hit_keys"], d["persistent_db_hit_keys"], d["default_value_keys"]),
         (100, 0, 6), "worker 0: keys elevated by worker 1's miss are volatile-DB hits")

    # ---- one table empty in the request; duplicate keys ---------------------
    kpt3 = [[], model.vdb_keys(1, RATE)[:5] + [pool[1][-1]] * 3 + model.unknown_keys(1, 2, 500)]
    want3 = model.expected(kpt3)
    for w in (w0, w1):
        _, g = H.decode_output(H.infer(w.http_port, "m", kpt3, binary=True))
        t.ok(g == want3, "worker pid %d: NUMKEYS [0, n] and a repeated PDB-only key" % w.pid,
             H.first_mismatch(g, want3, model, kpt3))

    # ---- concurrent clients on both workers ------------------------------------
    # Two clients per worker (http_threads = 2: lookups run concurrently in
    # each worker) with VDB, PDB-only and unknown keys; the coordinator
    # elevates while the workers read.  Every answer exact; per worker, the
    # counters add up: lookup = VDB hits + PDB hits + defaults, and the
    # defaults are exactly the unknown keys sent.
    before = {w.pid: H.hps_counters(w.metrics_port, "m") for w in (w0, w1)}
    sent = {w.pid: [0, 0] for w in (w0, w1)}  # keys, unknown keys
    errors = []
    lock = threading.Lock()

    def client(w, seed):
        crng = random.Random(seed)
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            kq = []
            for tb in range(2):
                ks = crng.sample(model.file_keys[tb], 40) + model.unknown_keys(
                    tb, 3, start=crng.randrange(10000))
                crng.shuffle(ks)
                kq.append(ks)
            try:
                _, g = H.decode_output(H.infer(w.http_port, "m", kq, binary=crng.random() < .5))
                if g != model.expected(kq):
                    errors.append(H.first_mismatch(g, model.expected(kq), model, kq))
            except Exception as e:  # noqa: BLE001
                errors.append("%s: %s" % (type(e).__name__, e))
            with lock:
                sent[w.pid][0] += 86
                sent[w.pid][1] += 6

    threads = [threading.Thread(target=client, args=(w, 100 + i))
               for i, w in enumerate((w0, w1, w0, w1))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    t.ok(not errors, "4 concurrent clients on 2 workers: every answer exact (%d requests)" %
         (sum(v[0] for v in sent.values()) // 86), "\n".join(errors[:5]))
    for w in (w0, w1):
        d = H.diff(H.hps_counters(w.metrics_port, "m"), before[w.pid])
        keys_sent, unknown_sent = sent[w.pid]
        t.eq((d["lookup_keys"], d["default_value_keys"],
              d["volatile_db_hit_keys"] + d["persistent_db_hit_keys"]),
             (keys_sent, unknown_sent, keys_sent - unknown_sent),
             "worker pid %d, concurrent requests: nv_hps_lookup_keys, "
             "nv_hps_default_value_keys, VDB + PDB hits add up" % w.pid)

    # ---- whole tables in one binary request, both workers --------------------
    full = [list(model.file_keys[0]), list(model.file_keys[1])]
    want_full = model.expected(full)
    g_by_worker = []
    for w in (w1, w0):
        r = H.infer(w.http_port, "m", full, binary=True, timeout=60)
        _, g = H.decode_output(r)
        g_by_worker.append(g)
        t.ok(g == want_full, "worker pid %d: all 25000 rows exact in one request (%.0f ms)" %
             (w.pid, r.elapsed * 1000), H.first_mismatch(g, want_full, model, full))
    info = cl.shm_info()
    rows = {tb["table"]: tb["rows"] for tb in info["tables"]}
    t.eq(rows, {"sparse_embedding0": 20000, "sparse_embedding1": 5000},
         "after the whole-table lookup every row is in the volatile DB")
    pids = {p["pid"]: p["role"] for p in info["processes"]}
    t.ok(pids.get(w0.pid) == "worker" and pids.get(w1.pid) == "worker",
         "hps-shm info lists both workers", repr(info["processes"]))

    rc, out, err = cl.shm("check", cl.segment)
    t.ok(rc == 0, "hps-shm check %s passes" % cl.segment, out + err)
    for w in (w0, w1):
        t.ok(w.alive(), "worker pid %d still running" % w.pid, w.log())

    lookup32(t, cl)


def lookup32(t, cl):
    """32-bit keys ([hps] supportlonglong = false): a coordinator and worker on
    a segment of their own; keys >= 2^32 and negative keys are in no layer
    (a key 2^32 + k must not alias key k)."""
    seg = cl.new_segment_name("k32")
    model = cl.gen_model("m32", rows=[3000, 1000], dims=[4, 2], defaults=[0.5, -2.0],
                         key_bytes=4, segment=seg)
    t.ok(all(sorted(model.file_keys[i]) ==
             sorted(H.gen_key32(i, j) for j in range(model.rows[i])) for i in range(2)),
         "32-bit model: key files hold hps_gen_key32(t, 0..N-1)")
    conf = cl.write_config("hps32.ini", model.ini_text, [
        ("volatile_db", "initial_cache_rate", RATE),
        ("volatile_db", "cache_missed_embeddings", "true"),
    ])
    cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    kpt = [model.vdb_keys(0, RATE)[:10] + model.pdb_only_keys(0, RATE)[:10] +
           model.unknown_keys(0, 4, 3),
           model.pdb_only_keys(1, RATE)[-5:] + model.unknown_keys(1, 3, 1)]
    want = model.expected(kpt)
    c0 = H.hps_counters(w.metrics_port, "m32")
    rows0 = cl.vdb_rows(seg)
    for binary in (False, True):
        if binary:
            cl.wait_vdb_rows(rows0 + 15, segment=seg)
        _, g = H.decode_output(H.infer(w.http_port, "m32", kpt, binary=binary))
        t.ok(g == want, "32-bit keys, %s: VDB, PDB-only, unknown and out-of-range keys exact" %
             ("binary" if binary else "JSON"), H.first_mismatch(g, want, model, kpt))
    d = H.diff(H.hps_counters(w.metrics_port, "m32"), c0)
    t.eq((d["volatile_db_hit_keys"], d["persistent_db_hit_keys"], d["default_value_keys"]),
         (10 + 25, 15, 14), "32-bit keys: counters (PDB-only keys elevated on first use)")
    rc, out, err = cl.shm("check", seg)
    t.ok(rc == 0, "hps-shm check %s passes" % seg, out + err)

    # SIGHUP reloads hps-coordinator; a worker must survive it (an operator
    # may HUP every hps process) and say where reloads go.
    w.kill(signal.SIGHUP)
    logged = H.wait_until(lambda: "SIGHUP ignored" in w.log(), 5.0)
    t.ok(w.alive() and w.wait(0.3) is None, "worker survives SIGHUP",
         "exit status %s" % w.p.returncode)
    t.ok(logged and "send SIGHUP to hps-coordinator, which re-reads the INI" in w.log(),
         "worker logs that SIGHUP is ignored and that reloads go to hps-coordinator",
         w.log()[-2000:])
    if w.alive():
        _, g = H.decode_output(H.infer(w.http_port, "m32", kpt, binary=True))
        t.ok(g == want, "after SIGHUP the worker still answers exactly",
             H.first_mismatch(g, want, model, kpt))


if __name__ == "__main__":
    H.run_main("lookup", body)
