#!/usr/bin/env python3
"""
int-storage_type: [model.<name>] storage_type end to end (issue 22).

Three models in one segment: mh stored as fp16 (tables of dims 8 and 33),
mq as int8 (dims 8 and 128), mb as bf16 (dim 20); RocksDB holds fp32.
Checks:
  - hps-shm info (JSON and text) names each table's storage type;
  - every key of every table, looked up through hps-worker (binary output,
    so floats arrive bit for bit), equals the reference conversion of
    hps-gen's vector, computed here from include/hps/dtype.h's rules: fp16
    round to nearest even (struct's 'e' format, cross-checked with numpy's
    float16 where numpy is importable), bf16 round to nearest even on the
    upper 16 bits, int8 row-wise with scale = max|x| / 127 in fp32 (moved
    by one ulp where that is needed for a re-encoding of the decoded row to
    find it again) and q = rne(x / scale); unknown keys get the default
    value;
  - the references differ from the fp32 vectors (the test can tell);
  - hps-shm get shows the stored bits beside the fp32 value;
  - with kafka-mock and hps-push ($KAFKA_MOCK, $HPS_PUSH): updates pushed
    in fp32 are served as their reference conversion;
  - after a coordinator restart that rebuilds the volatile DB from RocksDB
    ([persistent_db] initialize_after_startup = false), every key again
    answers the reference (of the update, for updated keys);
  - misses: after another restart with initial_cache_rate 0.5 and
    cache_missed_embeddings, the keys only in RocksDB reach the worker
    through the miss queue the first time: that first answer is already
    the reference conversion (not the fp32 row), and once the coordinator
    has inserted them into the volatile DB, the second answer equals it;
  - re-attaching the segment with another storage_type is refused, naming
    the setting.
With HPS_STORAGE_GPU=1 (suite gpu, as gpu-storage_type; exit 77 where no
CUDA device is visible) the worker runs in GPU mode (gpucache, gpucacheper
0.5, synchronous inserts): the same checks then go through GPU caches that
store each model's type, and every key is looked up twice, the second time
with nv_hps_embedding_cache_hit_keys counting GPU hits.
"""
import json
import math
import os
import re
import signal
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402

try:
    import numpy as np  # noqa: E402
except ImportError:  # the reference below needs no numpy; it only cross-checks
    np = None

KAFKA = bool(os.environ.get("KAFKA_MOCK")) and bool(os.environ.get("HPS_PUSH"))
GPU = os.environ.get("HPS_STORAGE_GPU") == "1"

# (model, storage_type, rows per table, dims, defaults)
MODELS = [("mh", "fp16", [3000, 800], [8, 33], [0.5, -1.0]),
          ("mq", "int8", [2000, 600], [8, 128], [0.0, 2.0]),
          ("mb", "bf16", [1500], [20], [-0.25])]
BATCH = 400


# ---- the reference conversions (include/hps/dtype.h) -----------------------
#
# Python floats are binary64.  A float32 operation (+ - * /) computed in
# binary64 and then rounded to binary32 gives the correctly rounded binary32
# result (53 >= 2 * 24 + 2: double rounding is innocuous), so f32(a / b) is
# exactly the C code's float division.

def f32(x):
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:  # rounds beyond FLT_MAX (struct refuses): inf, as in C
        return math.copysign(math.inf, x)


def bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def from_bits(u):
    return struct.unpack("<f", struct.pack("<I", u & 0xffffffff))[0]


def ref_fp16(row):
    # struct's 'e' packs binary16 rounding to nearest, ties to even, with
    # subnormals (CPython's PyFloat_Pack2); the inputs are finite and small.
    return [struct.unpack("<e", struct.pack("<e", x))[0] for x in row]


def ref_bf16(row):
    out = []
    for x in row:
        u = bits(x)
        r = ((u + 0x7fff + ((u >> 16) & 1)) & 0xffffffff) >> 16
        out.append(from_bits(r << 16))
    return out


def int8_scale_ok(m, s):
    """Whether scale s survives re-encoding for a row whose largest finite
    |x| is m: m gets |q| = qm (0 for s == 0), decodes to f32(qm * s), and
    f32(f32(qm * s) / 127) must be s again; for a normal s, qm is 127 and
    this is g(s) = f32(f32(127 * s) / 127) == s."""
    qm = float(round(min(127.0, f32(m / s)))) if s > 0.0 else 0.0
    return f32(f32(qm * s) / 127.0) == s


def int8_scale(m):
    """The header's scale: s0 = m / 127 in fp32, else the float above,
    else the float below, the first that survives re-encoding."""
    s0 = f32(m / 127.0)
    for s in (s0, from_bits(bits(s0) + 1), from_bits(bits(s0) - 1)):
        if int8_scale_ok(m, s):
            return s
    return s0


def int8_q(x, scale):
    if math.isnan(x) or scale == 0.0:
        return 0
    if math.isinf(x):
        return 127 if x > 0 else -127
    t = max(-127.0, min(127.0, f32(x / scale)))
    return round(t)  # Python rounds half to even, exactly on the binary64 value t


def ref_int8(row):
    finite = [abs(x) for x in row if math.isfinite(x)]
    scale = int8_scale(max(finite) if finite else 0.0)
    # exact product (31 bits), one rounding
    return [f32(int8_q(x, scale) * scale) for x in row]


REF = {"fp32": lambda row: list(row), "fp16": ref_fp16, "bf16": ref_bf16, "int8": ref_int8}


# Rows whose int8 scale is not m / 127: FLT_MAX (127 * (FLT_MAX / 127)
# overflows; the float below is taken) and m = 445 * 2^-149 (a subnormal
# scale of 4 * 2^-149 would re-encode to 3 * 2^-149; 3 * 2^-149 is taken).
FLT_MAX = from_bits(0x7f7fffff)
MOVED_ROWS = [[FLT_MAX, -1e30, 3.0], [445 * 2.0 ** -149, -100 * 2.0 ** -149]]


def int8_scale_check(t):
    want = [from_bits(bits(f32(FLT_MAX / 127.0)) - 1), 3 * 2.0 ** -149]
    t.eq([int8_scale(max(abs(x) for x in r)) for r in MOVED_ROWS], want,
         "int8 reference: the scale moves off m / 127 where the header says")


def numpy_check(t):
    """Cross-check the pure-Python fp16 and int8 references with numpy's
    float16 and float32 arithmetic on generated vectors."""
    int8_scale_check(t)
    if np is None:
        t.diag("numpy not importable: the references are not cross-checked with it")
        return
    rows = [H.gen_vector(0, H.gen_key(0, i), 33) for i in range(300)]
    rows.append([1.0 + 2.0 ** -11, -(1.0 + 3 * 2.0 ** -11), 2.0 ** -25, 3 * 2.0 ** -26, 65519.0])
    good16 = goodq = True
    for row in rows + MOVED_ROWS:
        a = np.array(row, dtype=np.float32)
        if row not in MOVED_ROWS:  # beyond fp16's range: struct refuses to pack them
            want16 = [float(v) for v in a.astype(np.float16).astype(np.float32)]
            good16 &= ref_fp16(row) == want16
        m = np.float32(np.max(np.abs(a)))
        s0 = m / np.float32(127.0)
        scale = s0
        with np.errstate(over="ignore"):  # 127 * the float above FLT_MAX / 127
            for s in (s0, np.nextafter(s0, np.float32(np.inf)), np.nextafter(s0, np.float32(0))):
                qm = np.rint(np.minimum(m / s, np.float32(127.0))) if s > 0 else np.float32(0)
                if (np.float32(qm) * s) / np.float32(127.0) == s:
                    scale = s
                    break
        q = np.rint(np.clip(a / (scale if scale > 0 else np.float32(np.inf)), -127, 127))
        wantq = [float(v) for v in q.astype(np.int8).astype(np.float32) * scale]
        goodq &= ref_int8(row) == wantq
    t.ok(good16, "fp16 reference equals numpy's float16 round trip")
    t.ok(goodq, "int8 reference equals the rule computed in numpy float32")


# ---- the cluster ------------------------------------------------------------

def make_conf(cl, models, name, settings=(), types=None):
    text = models[0][1].ini_text
    for _, m in models[1:]:
        text += "\n" + m.ini_text[m.ini_text.index("[model.%s]" % m.name):]
    base = [("volatile_db", "shared_memory_size", "256MiB"),
            ("volatile_db", "initial_cache_rate", "1.0"),
            ("hps", "heartbeat_interval_ms", 50)]
    for (mname, stype, _, _, _), _m in zip(MODELS, models):
        st = (types or {}).get(mname, stype)
        base.append(("model.%s" % mname, "storage_type", st))
        if GPU:
            base += [("model.%s" % mname, "gpucache", "true"),
                     ("model.%s" % mname, "gpucacheper", "0.5"),
                     ("model.%s" % mname, "hit_rate_threshold", "2")]
    if KAFKA:
        base += [("update_source", "type", "kafka_message_queue"),
                 ("update_source", "brokers", cl.bootstrap),
                 ("update_source", "poll_timeout_ms", "100"),
                 ("update_source", "metadata_refresh_interval_ms", "500")]
    return cl.write_config(name, text, base + list(settings))


def lookup(w, model, ntables, keys_per_table):
    """Rows (lists of floats) per table for keys_per_table, in batches."""
    out = [[] for _ in range(ntables)]
    n = max(len(ks) for ks in keys_per_table)
    for off in range(0, n, BATCH):
        part = [ks[off:off + BATCH] for ks in keys_per_table]
        # Every table needs a key: pad a table whose keys ran out with its
        # first key (its row is dropped below).
        pad = [p if p else ks[:1] for p, ks in zip(part, keys_per_table)]
        _, vals = H.decode_output(H.infer(w.http_port, model, pad, binary=True))
        pos = 0
        for ti, (p, q) in enumerate(zip(part, pad)):
            dim = MODELS_BY_NAME[model][3][ti]
            rows = [vals[pos + i * dim:pos + (i + 1) * dim] for i in range(len(q))]
            pos += len(q) * dim
            if p:
                out[ti].extend(rows)
    return out


MODELS_BY_NAME = {m[0]: m for m in MODELS}


def expected_rows(mname, ti, keys, new=None):
    """The reference rows of keys of table ti (new: {key: fp32 row})."""
    _, stype, rows, dims, defaults = MODELS_BY_NAME[mname]
    conv = REF[stype]
    valid = EXPECTED_KEYS[mname][ti]
    out = []
    for k in keys:
        if new and k in new:
            out.append(conv(new[k]))
        elif k in valid:
            out.append(conv(H.gen_vector(ti, k, dims[ti])))
        else:
            out.append([f32(defaults[ti])] * dims[ti])
    return out


EXPECTED_KEYS = {}


def kafka_applied(proc, layer):
    """applied= of the coordinator's last "kafka <layer>:" stats line."""
    lines = [ln for ln in proc.log().splitlines() if "kafka %s: messages=" % layer in ln]
    m = re.search(r"applied=(\d+)", lines[-1]) if lines else None
    return int(m.group(1)) if m else 0


def gpu_hits(w):
    """nv_hps_embedding_cache_hit_keys summed over the worker's caches."""
    return sum(int(v) for k, v in H.metrics(w.metrics_port).items()
               if k.startswith("nv_hps_embedding_cache_hit_keys{"))


def check_all(t, w, models, what, new=None):
    """Every key of every table plus unknown keys: exactly the reference
    (GPU mode: twice, the second pass hitting the GPU caches)."""
    if GPU:
        h0 = gpu_hits(w)
        check_all_once(t, w, models, what, new)
        check_all_once(t, w, models, what + ", again", new)
        t.ok(gpu_hits(w) > h0 + 100, "%s: the GPU caches answered (%d hits)" %
             (what, gpu_hits(w) - h0))
        return
    check_all_once(t, w, models, what, new)


def check_all_once(t, w, models, what, new=None):
    for mname, m in models:
        ntab = len(m.rows)
        kpt = [list(m.file_keys[i]) + m.unknown_keys(i, 3) for i in range(ntab)]
        got = lookup(w, mname, ntab, kpt)
        for i in range(ntab):
            want = expected_rows(mname, i, kpt[i], (new or {}).get((mname, i)))
            bad = [(k, g, x) for k, g, x in zip(kpt[i], got[i], want) if g != x]
            t.ok(not bad and len(got[i]) == len(want),
                 "%s: %s/%s (%s, dim %d): all %d keys equal the reference" %
                 (what, mname, "sparse_embedding%d" % i, MODELS_BY_NAME[mname][1],
                  m.dims[i], len(want)),
                 "first mismatch: key %r got %r want %r" % bad[0] if bad else None)


def check_info(t, cl):
    info = cl.shm_info()
    got = {(tb["model"], tb["table"]): (tb.get("storage_type"), tb.get("row_bytes"))
           for tb in info["tables"]}
    want = {}
    for mname, stype, _, dims, _ in MODELS:
        for i, d in enumerate(dims):
            rb = {"fp32": 4 * d, "fp16": 2 * d, "bf16": 2 * d, "int8": d + 4}[stype]
            want[(mname, "sparse_embedding%d" % i)] = (stype, rb)
    t.eq(got, want, "hps-shm info --json: storage_type and row_bytes of every table")
    rc, out, _ = cl.shm("info", cl.segment)
    t.ok(rc == 0 and "storage int8, 132 bytes/row stored" in out and
         "storage fp16, 66 bytes/row stored" in out and "storage bf16, 40 bytes/row stored" in out,
         "hps-shm info (text) shows each table's storage type", out[-2000:])


def check_get(t, cl, models):
    m = dict(models)
    # fp16: the stored bits are those of struct's 'e' packing of the vector.
    k = m["mh"].file_keys[0][5]
    v = H.gen_vector(0, k, 8)
    rc, out, err = cl.shm("--json", "get", cl.segment, "mh", "sparse_embedding0", str(k))
    ok = rc == 0
    row = json.loads(out)["rows"][0] if ok else {}
    want_bits = [struct.unpack("<H", struct.pack("<e", x))[0] for x in v]
    t.ok(ok and row.get("stored", {}).get("bits") == want_bits and
         [f32(x) for x in row.get("vector", [])] == ref_fp16(v),
         "hps-shm get --json (fp16): stored bits and the decoded vector", out or err)
    rc, out, err = cl.shm("get", cl.segment, "mh", "sparse_embedding0", str(k))
    t.ok(rc == 0 and ("  stored fp16: " + " ".join("0x%04x" % b for b in want_bits)) in out,
         "hps-shm get (fp16): the stored bits beside the fp32 value", out or err)
    # int8: scale and codes.
    k = m["mq"].file_keys[1][7]
    v = H.gen_vector(1, k, 128)
    scale = int8_scale(max(abs(x) for x in v))
    q = [int8_q(x, scale) for x in v]
    rc, out, err = cl.shm("--json", "get", cl.segment, "mq", "sparse_embedding1", str(k))
    row = json.loads(out)["rows"][0] if rc == 0 else {}
    st = row.get("stored", {})
    t.ok(rc == 0 and st.get("type") == "int8" and st.get("q") == q and
         st.get("scale_bits") == bits(scale) and
         [f32(x) for x in row.get("vector", [])] == ref_int8(v),
         "hps-shm get --json (int8): scale, codes and the decoded vector", out or err)
    rc, out, err = cl.shm("get", cl.segment, "mq", "sparse_embedding1", str(k))
    t.ok(rc == 0 and ("  stored int8: scale %.9g (0x%08x), q %s" %
                      (scale, bits(scale), " ".join(map(str, q)))) in out,
         "hps-shm get (int8): scale and codes beside the fp32 value", out or err)


def check_misses(t, cl, w, models, new):
    """The keys only in RocksDB (initial_cache_rate 0.5): the first answer,
    through the miss queue, is the reference conversion; once the
    coordinator inserted them into the volatile DB (cache_missed_embeddings),
    the second answer, from there, equals the first."""
    half = sum(int(math.ceil(r * 0.5)) for _, _, rows, _, _ in MODELS for r in rows)
    full = sum(r for _, _, rows, _, _ in MODELS for r in rows)
    t.eq(cl.vdb_rows(), half, "misses: the volatile DB starts with half of every table")
    first = {}
    for mname, m in models:
        ntab = len(m.rows)
        kpt = [m.pdb_only_keys(i, 0.5) for i in range(ntab)]
        got = lookup(w, mname, ntab, kpt)
        for i in range(ntab):
            want = expected_rows(mname, i, kpt[i], (new or {}).get((mname, i)))
            bad = [(k, g, x) for k, g, x in zip(kpt[i], got[i], want) if g != x]
            t.ok(not bad and len(got[i]) == len(want),
                 "misses: %s/sparse_embedding%d (%s): the first answers of all %d keys, through "
                 "the miss queue, are the reference conversion" %
                 (mname, i, MODELS_BY_NAME[mname][1], len(want)),
                 "first mismatch: key %r got %r want %r" % bad[0] if bad else None)
            first[(mname, i)] = (kpt[i], got[i])
    t.ok(H.wait_until(lambda: cl.vdb_rows() == full, 30, 0.1),
         "misses: the coordinator inserted the missed rows into the volatile DB (%d rows)" % full,
         "rows: %d" % cl.vdb_rows())
    for mname, m in models:
        ntab = len(m.rows)
        got = lookup(w, mname, ntab, [first[(mname, i)][0] for i in range(ntab)])
        for i in range(ntab):
            keys, before = first[(mname, i)]
            t.ok(got[i] == before, "misses: %s/sparse_embedding%d: the second answers (volatile "
                 "DB) equal the first (miss queue)" % (mname, i),
                 None if got[i] == before else "first difference at key %r" %
                 next(k for k, a, b in zip(keys, got[i], before) if a != b))


def body(t, cl):
    numpy_check(t)
    mock = H.KafkaMock(["hps_et.%s.sparse_embedding%d" % (m[0], i)
                        for m in MODELS for i in range(len(m[2]))]) if KAFKA else None
    try:
        scenario(t, cl, mock)
    finally:
        if mock:
            mock.close()


def scenario(t, cl, mock):
    cl.bootstrap = mock.bootstrap if mock else ""
    models = []
    for mname, _, rows, dims, defaults in MODELS:
        m = cl.gen_model(mname, rows, dims, defaults=defaults, subdir=mname)
        models.append((mname, m))
        EXPECTED_KEYS[mname] = m.key_sets()
    # The data can tell the types apart from fp32.
    for mname, stype, _, dims, _ in MODELS:
        m = dict(models)[mname]
        vs = [H.gen_vector(0, k, dims[0]) for k in m.file_keys[0][:200]]
        t.ok(sum(REF[stype](v) != v for v in vs) > 150,
             "%s: the %s reference differs from fp32 for most rows" % (mname, stype))

    conf = make_conf(cl, models, "hps.ini")
    coord = cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    check_info(t, cl)
    check_all(t, w, models, "loaded")
    check_get(t, cl, models)

    new = {}
    if mock:
        # fp32 updates through Kafka: 200 keys of mh's dim-33 table, 150 of
        # mq's dim-128 table (values up to ~1000: still finite in fp16).
        for mname, ti, cnt in (("mh", 1, 200), ("mq", 1, 150)):
            m = dict(models)[mname]
            dim = m.dims[ti]
            keys = m.file_keys[ti][:cnt]
            rows = {k: [f32(((k % 997) - 498) * 1.7 + d * 0.3125) for d in range(dim)]
                    for k in keys}
            rc = H.push_updates(mock.bootstrap, mname, "sparse_embedding%d" % ti, dim,
                                list(rows.items()))
            t.eq(rc, 0, "hps-push %s/sparse_embedding%d: %d updates delivered" %
                 (mname, ti, cnt))
            new[(mname, ti)] = rows

        def applied():
            mh, mq = dict(models)["mh"], dict(models)["mq"]
            got = lookup(w, "mh", 2, [mh.file_keys[0][:1], list(new[("mh", 1)])])[1]
            got2 = lookup(w, "mq", 2, [mq.file_keys[0][:1], list(new[("mq", 1)])])[1]
            return (got == expected_rows("mh", 1, list(new[("mh", 1)]), new[("mh", 1)]) and
                    got2 == expected_rows("mq", 1, list(new[("mq", 1)]), new[("mq", 1)]))
        t.ok(H.wait_until(applied, 60, 0.2), "Kafka updates served as their reference conversion")
        check_all(t, w, models, "after Kafka updates", new)
        # RocksDB must hold them too before the restart below.
        t.ok(H.wait_until(lambda: kafka_applied(coord, "persistent") >= 350, 60, 0.2),
             "persistent layer applied the 350 updates", coord.log()[-1500:])
    else:
        t.diag("Kafka updates skipped: $KAFKA_MOCK or $HPS_PUSH not set")

    # Restart: the volatile DB is rebuilt (new segment) from RocksDB's fp32
    # rows, which hold the updates.
    for p in (w, coord):
        p.kill(signal.SIGTERM)
        p.wait(30)
    conf2 = make_conf(cl, models, "hps2.ini", [("persistent_db", "initialize_after_startup",
                                                "false")])
    coord = cl.start_coordinator(conf2, log_name="coordinator-restart.log")
    w = cl.start_worker(conf2)
    check_info(t, cl)
    check_all(t, w, models, "after a restart from RocksDB", new)

    # Misses: the volatile DB rebuilt with half of each table; the other
    # half reaches the worker through the miss queue the first time.
    for p in (w, coord):
        p.kill(signal.SIGTERM)
        p.wait(30)
    conf4 = make_conf(cl, models, "hps4.ini",
                      [("persistent_db", "initialize_after_startup", "false"),
                       ("volatile_db", "initial_cache_rate", "0.5"),
                       ("volatile_db", "cache_missed_embeddings", "true"),
                       ("worker", "miss_timeout_ms", 5000)])  # exact even on a loaded machine
    coord = cl.start_coordinator(conf4, log_name="coordinator-misses.log")
    w = cl.start_worker(conf4)
    check_misses(t, cl, w, models, new)

    # Another storage_type on the re-attached segment is refused.
    w.kill(signal.SIGKILL)
    w.wait(10)
    coord.kill(signal.SIGKILL)
    coord.wait(10)
    conf3 = make_conf(cl, models, "hps3.ini",
                      [("persistent_db", "initialize_after_startup", "false"),
                       ("volatile_db", "initialize_after_startup", "false")],
                      types={"mh": "bf16"})
    rc, out = cl.run_coordinator(conf3)
    t.ok(rc != 0 and re.search(r"storage_type: fp16 there, bf16 here", out),
         "re-attaching the segment with another storage_type is refused (exit %d)" % rc,
         out[-1500:])


if __name__ == "__main__":
    if GPU and not H.have_gpu():
        print("1..0 # SKIP no CUDA device visible")
        sys.exit(77)
    H.run_main("storage_type", body)
