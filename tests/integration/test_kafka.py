#!/usr/bin/env python3
"""
Kafka online updates end to end: kafka-mock (librdkafka's mock cluster over
TCP) as the broker, hps-push as the producer, hps-coordinator consuming,
hps-worker answering lookups (volatile DB, then RocksDB through the miss
queue).

Models mA and mB; [volatile_db] update_filters = mA, [persistent_db]
update_filters = m[AB]: mA's updates reach both layers, mB's only RocksDB
(its rows in the volatile DB are untouched).  Then: corrupt messages of
every kind are skipped and counted (the coordinator's "kafka <layer>:" stats
lines), brokers down for 5 s then up, and SIGKILL of the coordinator in the
middle of an ingest (at-least-once: after the restart every update is there,
each under its own key).
"""
import os
import re
import signal
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402

PUSH = os.environ.get("HPS_PUSH", "")
MOCK = os.environ.get("KAFKA_MOCK", "")
DIM = 8
ROWS = 2000
RATE = 0.5
TOPIC_A = "hps_et.mA.sparse_embedding0"
TOPIC_B = "hps_et.mB.sparse_embedding0"
TOPIC_C = "hps_et.mC.sparse_embedding0"
TOPIC_W = "hps_et.mW.sparse_embedding0"
TOPIC_R = "hps_et.mR.sparse_embedding0"


def new_vector(key, gen):
    return [H.f32(1000.0 * gen + (key % 997) + d * 0.25) for d in range(DIM)]


def records(keys, gen):
    return b"".join(struct.pack("<q%df" % DIM, k, *new_vector(k, gen)) for k in keys)


class Mock:
    def __init__(self, topics):
        self.p = subprocess.Popen([MOCK, "--partitions", "4"] + topics, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        self.bootstrap = line.split()[1]

    def cmd(self, c):
        self.p.stdin.write(c + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def close(self):
        self.p.kill()
        self.p.wait(10)


def push(bootstrap, model, data, extra=(), wait=True):
    cmd = [PUSH, "-b", bootstrap, "-m", model, "-t", "sparse_embedding0", "-d", str(DIM),
           "--stdin", "--quiet"] + list(extra)
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    if not wait:
        p.stdin.write(data)
        p.stdin.close()
        return p
    out, _ = p.communicate(data, timeout=120)
    return p.returncode, out.decode()


def raw(bootstrap, topic, data, key=None):
    cmd = [PUSH, "-b", bootstrap, "--topic", topic, "--raw", "--quiet"]
    if key:
        cmd += ["--message-key", key]
    r = subprocess.run(cmd, input=data, capture_output=True, timeout=60)
    return r.returncode


def stats(proc, layer):
    """The last stats line of a layer as a dict of ints."""
    lines = [ln for ln in proc.log().splitlines() if "kafka %s: messages=" % layer in ln]
    if not lines:
        return {}
    return {k: int(v) for k, v in re.findall(r"(\w+)=(-?\d+)", lines[-1])}


def lookup(worker, model, keys):
    out = []
    for i in range(0, len(keys), 500):
        _, vals = H.decode_output(H.infer(worker.http_port, model, [keys[i:i + 500]]))
        out.extend(vals)
    return [out[i * DIM:(i + 1) * DIM] for i in range(len(keys))]


def body(t, cl):
    mock = Mock([TOPIC_A, TOPIC_B, TOPIC_C, TOPIC_W, TOPIC_R])
    try:
        narrow_keys(t, cl, mock)
        nonfinite(t, cl, mock)
        scenario(t, cl, mock)
    finally:
        mock.close()


def kafka_settings(bootstrap, vdb_filters, pdb_filters):
    """Kafka ingestion from bootstrap into both per-host layers, each with
    its update_filters, polling fast (the scenarios' INI settings)."""
    return [("volatile_db", "update_filters", vdb_filters),
            ("persistent_db", "update_filters", pdb_filters),
            ("update_source", "type", "kafka_message_queue"),
            ("update_source", "brokers", bootstrap),
            ("update_source", "poll_timeout_ms", "100"),
            ("update_source", "metadata_refresh_interval_ms", "500")]


def make_conf(cl, mA, mB, name, init_pdb="true"):
    text = mA.ini_text + "\n" + mB.ini_text[mB.ini_text.index("[model.mB]"):]
    return cl.write_config(name, text, [
        ("volatile_db", "initial_cache_rate", str(RATE)),
        ("persistent_db", "initialize_after_startup", init_pdb),
    ] + kafka_settings(cl.bootstrap, "mA", "m[AB]"))


def wait_applied(proc, layer, n, timeout=60):
    return H.wait_until(lambda: stats(proc, layer).get("applied", 0) >= n, timeout, 0.1)


def update_metrics(w):
    return {k: v for k, v in H.metrics(w.metrics_port).items() if k.startswith("nv_hps_update")}


def check_metrics(t, coord, w):
    """The coordinator's counters, published in the segment, on the worker's /metrics."""
    want = {}
    for layer in ("volatile", "persistent"):
        st = stats(coord, layer)
        want['nv_hps_updates_received{layer="%s"}' % layer] = st.get("received")
        want['nv_hps_updates_applied{layer="%s"}' % layer] = st.get("applied")
        for reason in ("magic", "value_size", "truncated", "keyed"):
            want['nv_hps_updates_skipped{layer="%s",reason="%s"}' % (layer, reason)] = 1
    got = {}

    def match():
        got.clear()
        got.update(update_metrics(w))
        return all(got.get(k) == v for k, v in want.items())
    t.ok(H.wait_until(match, 10, 0.2), "worker /metrics: update counters per layer and reason",
         {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v})
    age = got.get('nv_hps_update_newest_age_ms{layer="volatile"}', -1)
    t.ok(0 <= age < 600000, "worker /metrics: newest applied update age %s ms" % age)
    t.ok('nv_hps_updates_skipped{layer="distributed",reason="magic"}' not in got,
         "no samples for a layer without a consumer")


def scenario(t, cl, mock):
    cl.bootstrap = mock.bootstrap
    t.ok(bool(mock.bootstrap), "kafka-mock listens at %s" % mock.bootstrap)
    mA = cl.gen_model("mA", [ROWS], [DIM], subdir="mA")
    mB = cl.gen_model("mB", [ROWS], [DIM], subdir="mB")
    conf = make_conf(cl, mA, mB, "hps.ini")
    coord = cl.start_coordinator(conf)
    w = cl.start_worker(conf)

    # 1. two models, two layers, filters.
    a_keys = mA.vdb_keys(0, RATE)[:200] + mA.pdb_only_keys(0, RATE)[:200]
    b_vdb, b_pdb = mB.vdb_keys(0, RATE)[:200], mB.pdb_only_keys(0, RATE)[:200]
    rc, out = push(mock.bootstrap, "mA", records(a_keys, 1))
    t.eq(rc, 0, "hps-push mA: every message delivered")
    rc, out = push(mock.bootstrap, "mB", records(b_vdb + b_pdb, 1))
    t.eq(rc, 0, "hps-push mB: every message delivered")
    t.ok(wait_applied(coord, "volatile", 400), "volatile layer applied mA's 400 updates",
         stats(coord, "volatile"))
    t.ok(wait_applied(coord, "persistent", 800), "persistent layer applied 800 updates",
         stats(coord, "persistent"))
    t.eq(lookup(w, "mA", a_keys), [new_vector(k, 1) for k in a_keys],
         "mA: new vectors from the volatile DB")
    t.eq(lookup(w, "mB", b_pdb), [new_vector(k, 1) for k in b_pdb],
         "mB: new vectors from RocksDB (miss path)")
    t.eq(lookup(w, "mB", b_vdb), [H.gen_vector(0, k, DIM) for k in b_vdb],
         "mB: volatile rows untouched (update_filters excludes it)")
    st = stats(coord, "volatile")
    t.eq(st.get("received"), 400, "volatile: mB's topic not subscribed (update_filters)")

    # 2. corrupt messages of every kind.
    k0 = a_keys[0]
    good = struct.pack("<II", 0x52544348, DIM * 4) + records([k0], 9)
    base = stats(coord, "persistent").get("messages", 0)
    bad = [("magic", struct.pack("<II", 0x12345678, DIM * 4) + records([k0], 9), None),
           ("value_size", struct.pack("<II", 0x52544348, DIM * 4 + 4) + records([k0], 9) +
            b"\0\0\0\0", None),
           ("truncated", good[:-1], None),
           ("keyed", good, "k1"),
           ("beacon", good[:8], None)]
    for name, data, key in bad:
        t.eq(raw(mock.bootstrap, TOPIC_A, data, key), 0, "raw %s message delivered" % name)
    H.wait_until(lambda: stats(coord, "persistent").get("messages", 0) >= base + 5, 30, 0.1)
    H.wait_until(lambda: stats(coord, "volatile").get("beacons", 0) >= 1, 30, 0.1)
    for layer in ("volatile", "persistent"):
        st = stats(coord, layer)
        t.eq([st.get(k) for k in ("magic", "value_size", "truncated", "keyed", "beacons")],
             [1, 1, 1, 1, 1], "%s: corrupt messages skipped and counted by reason" % layer)
    t.eq(lookup(w, "mA", [k0]), [new_vector(k0, 1)], "no corrupt message was applied")
    check_metrics(t, coord, w)

    # 3. brokers down for 5 s, then up: ingestion resumes without a restart.
    t.eq(mock.cmd("down"), "ok", "brokers down")
    p = push(mock.bootstrap, "mA", records(a_keys, 2), wait=False)
    time.sleep(5)
    t.eq(mock.cmd("up"), "ok", "brokers up")
    t.eq(p.wait(90), 0, "hps-push delivered through the outage")
    t.ok(H.wait_until(lambda: lookup(w, "mA", a_keys) == [new_vector(k, 2) for k in a_keys],
                      60, 0.2), "updates after the outage applied without a restart")

    # 4. SIGKILL mid-ingest, restart: at-least-once, every key its own value.
    big = [H.gen_key(0, i) for i in range(20000)]
    before = stats(coord, "volatile").get("applied", 0)
    p = push(mock.bootstrap, "mA", records(big, 3), ["--send-buffer-size", "1024"], wait=False)
    H.wait_until(lambda: stats(coord, "volatile").get("applied", 0) > before + 1000, 60, 0.01)
    coord.kill(signal.SIGKILL)
    coord.wait(10)
    t.eq(p.wait(120), 0, "hps-push of 20000 updates delivered")
    t.ok(stats(coord, "volatile").get("applied", 0) < before + 20000 * 2,
         "coordinator killed in the middle of the ingest")
    conf2 = make_conf(cl, mA, mB, "hps2.ini", init_pdb="false")
    conf2_text = open(conf2).read()
    conf2 = cl.write_config("hps2.ini", conf2_text,
                            [("volatile_db", "initialize_after_startup", "false")])
    coord2 = cl.start_coordinator(conf2)
    # The dead member holds its partitions until session.timeout.ms (30 s,
    # HugeCTR's setting) runs out; then the new one resumes from the commits.
    ok = H.wait_until(lambda: lookup(w, "mA", big) == [new_vector(k, 3) for k in big], 200, 1.0)
    t.ok(ok, "after the restart every update is present under its own key")
    others = mA.pdb_only_keys(0, RATE)[-50:]
    others = [k for k in others if k not in set(big)]
    t.eq(lookup(w, "mA", others), [H.gen_vector(0, k, DIM) for k in others],
         "keys never updated keep their vectors")
    t.ok(coord2.alive(), "restarted coordinator alive")


def narrow_keys(t, cl, mock):
    """A 32-bit-key model (supportlonglong = false) fed by HugeCTR's producer
    and hps-push, which send 8-byte keys ([update_source] key_bytes = 8, the
    default): keys are narrowed, and a key over 2^32 - 1 is dropped and
    counted.  (The wire width used to be the model's, so these messages
    were skipped as truncated, or, at sizes that are multiples of both
    record sizes, applied as garbage.)"""
    seg = cl.new_segment_name("c32")
    mC = cl.gen_model("mC", [ROWS], [DIM], subdir="mC", key_bytes=4, segment=seg)
    conf = cl.write_config("c32.ini", mC.ini_text, kafka_settings(mock.bootstrap, "mC", "mC"))
    coord = cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    keys = mC.file_keys[0][:50]
    rc, out = push(mock.bootstrap, "mC", records(keys + [(1 << 32) + 5], 7))
    t.ok(rc == 0, "hps-push of 51 updates with 8-byte keys to a 32-bit model", out)
    t.ok(wait_applied(coord, "volatile", 50, 60), "50 applied to the volatile DB",
         stats(coord, "volatile"))
    t.eq(lookup(w, "mC", keys), [new_vector(k, 7) for k in keys],
         "a 32-bit model serves the updates sent with 8-byte keys")
    t.ok(stats(coord, "volatile").get("errors", 0) >= 1 and
         "do not fit the model's 32-bit keys" in coord.log(),
         "the key over 2^32 - 1 is dropped and counted", coord.log())
    for p in (w, coord):  # leave the consumer groups cleanly for the next scenario
        p.kill(signal.SIGTERM)
        p.wait(30)


def nonfinite(t, cl, mock):
    """Updates whose vector has a NaN or +-Inf element: counted per layer (the
    stats line and nv_hps_updates_nonfinite); model mW (nonfinite_values =
    warn, the default) applies them as they are, served bit for bit; model mR
    (refuse) drops them, keeps the rows it had and counts them in errors."""
    seg = cl.new_segment_name("nf")
    mW = cl.gen_model("mW", [ROWS], [DIM], subdir="mW", segment=seg)
    mR = cl.gen_model("mR", [ROWS], [DIM], subdir="mR", segment=seg)
    text = mW.ini_text + "\n" + mR.ini_text[mR.ini_text.index("[model.mR]"):]
    conf = cl.write_config("nf.ini", text, [("model.mR", "nonfinite_values", "refuse")] +
                           kafka_settings(mock.bootstrap, "m[WR]", "m[WR]"))
    coord = cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    bad = {0: float("nan"), 3: float("inf"), 7: float("-inf")}  # key index -> element 0

    def vec(m, i, k):
        v = new_vector(k, 4)
        if i in bad:
            v[0] = bad[i]
        return v

    def bits(vectors):
        return [struct.pack("<%df" % DIM, *v) for v in vectors]

    for m in (mW, mR):
        keys = m.file_keys[0][:10]
        data = b"".join(struct.pack("<q%df" % DIM, k, *vec(m, i, k)) for i, k in enumerate(keys))
        rc, out = push(mock.bootstrap, m.name, data)
        t.ok(rc == 0, "hps-push of 10 updates (3 with NaN / Inf) to %s" % m.name, out)
    for layer in ("volatile", "persistent"):
        t.ok(H.wait_until(lambda: stats(coord, layer).get("received", 0) >= 20 and
                          stats(coord, layer).get("applied", 0) >= 17, 60, 0.1),
             "%s: 20 updates received, 17 applied" % layer, stats(coord, layer))
        st = stats(coord, layer)
        t.eq([st.get("nonfinite"), st.get("applied"), st.get("errors")], [6, 17, 3],
             "%s: 6 updates with NaN / Inf counted, mR's 3 dropped as errors" % layer)

    def served(m, keys):
        _, vals = H.decode_output(H.infer(w.http_port, m.name, [keys], binary=True))
        return bits([vals[i * DIM:(i + 1) * DIM] for i in range(len(keys))])

    keys = mW.file_keys[0][:10]
    t.eq(served(mW, keys), bits([vec(mW, i, k) for i, k in enumerate(keys)]),
         "mW (warn): every update applied, NaN / Inf served bit for bit")
    keys = mR.file_keys[0][:10]
    want = [H.gen_vector(0, k, DIM) if i in bad else vec(mR, i, k) for i, k in enumerate(keys)]
    t.eq(served(mR, keys), bits(want), "mR (refuse): the 7 finite updates applied, the "
         "3 keys with NaN / Inf keep the model's rows")
    log = coord.log()
    t.ok("have a NaN or Inf value: dropped (nonfinite_values = refuse" in log and
         "have a NaN or Inf value: applied as they are" in log,
         "one warning per topic names the policy", log[-3000:])
    got = {}

    def metric_match():
        got.update(update_metrics(w))
        return all(got.get('nv_hps_updates_nonfinite{layer="%s"}' % layer) == 6
                   for layer in ("volatile", "persistent"))
    t.ok(H.wait_until(metric_match, 10, 0.2), "worker /metrics: nv_hps_updates_nonfinite 6 per "
         "layer", {k: v for k, v in got.items() if "nonfinite" in k})
    for p in (w, coord):
        p.kill(signal.SIGTERM)
        p.wait(30)


if __name__ == "__main__":
    H.run_main("kafka", body)
