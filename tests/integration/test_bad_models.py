#!/usr/bin/env python3
"""
int-bad_models: hps-coordinator refuses malformed HugeCTR sparse model files
with exit status 4 (HPS_EXIT_MODEL) and a message naming the file, before
anything is written: RocksDB holds no hps_et.* column family (nor SST file)
and the volatile DB no table.

Each case: a good model "good" (first) and a model "bad" whose second table
is damaged, in one configuration, so "nothing written" covers the valid
model too (every file is validated before any table is created).  Cases:
emb_vector truncated inside a float, emb_vector short by whole rows, key
file not a multiple of 8, a key file short by one key, a longer
emb_vector, a missing emb_vector, a dim in the INI that does
not match the file (one that divides the file size, one that does not),
and a FIFO as the key file and as the emb_vector file (open() of a FIFO
nobody writes used to block the coordinator forever, after it had created
the segment: now refused within seconds).  Every file is validated before
the segment is created, so with shared_memory_auto_remove = false no
segment is left behind; then a coordinator on the fixed config starts on
the same RocksDB path and segment and serves exact rows.  The two models of that
config live at paths of about 1,300 and 1,150 characters: a path over
1,024 characters used to fail the persistent DB's record of the files
("cannot read ... key and emb_vector") after the tables were created.
"""
import glob
import os
import json
import re
import resource
import signal
import shutil
import subprocess
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402


def rocksdb_column_families(path):
    """Column family names in the newest OPTIONS-* file of a RocksDB dir."""
    files = sorted(glob.glob(os.path.join(path, "OPTIONS-*")),
                   key=lambda p: int(re.sub(r"\D", "", os.path.basename(p)) or 0))
    if not files:
        return []
    with open(files[-1], errors="replace") as f:
        return re.findall(r'^\[CFOptions "([^"]*)"\]', f.read(), re.M)


def truncate(path, nbytes):
    with open(path, "r+b") as f:
        f.seek(0, 2)
        f.truncate(f.tell() - nbytes)


def make_fifo(path):
    """Replace the file at path by a FIFO that nobody writes."""
    os.remove(path)
    os.mkfifo(path)


def append(path, data):
    with open(path, "ab") as f:
        f.write(data)


def model_section(name, model, dims=None):
    dims = dims or model.dims
    return "\n".join([
        "[model.%s]" % name,
        "sparse_files = " + ", ".join(model.table_dirs),
        "embedding_vecsize_per_table = " + ", ".join(map(str, dims)),
        "maxnum_catfeature_query_per_table_per_sample = " + ", ".join("1" for _ in dims),
        "default_value_for_each_table = " + ", ".join(map(str, model.defaults)),
        "max_batch_size = 1024",
        "gpucache = false",
        ""])


def base_ini(cl, good, rocks):
    """[hps]..[worker] of the good model's INI, without its model section."""
    text = good.ini_text
    text = text[:text.index("[model.")]
    text = H.ini_set(text, "persistent_db", "path", rocks)
    text = H.ini_set(text, "volatile_db", "shared_memory_auto_remove", "false")
    return text


def deep_subdir(cl, tag, length):
    """A subdirectory of the work dir, created, whose path has about length
    characters (components of at most 100)."""
    parts, cur = [tag], len(cl.path(tag))
    while cur < length:
        parts.append("d" * min(100, max(1, length - cur - 1)))
        cur += len(parts[-1]) + 1
    sub = os.path.join(*parts)
    os.makedirs(os.path.dirname(cl.path(sub)), exist_ok=True)
    return sub


# --------------------------------------------------------------------------
# Model contents (contents_cases): a model whose table 0 has rows with NaN,
# +-Inf and a negative NaN (some loaded into the volatile DB, one only in
# RocksDB) and whose table 1 gives four keys on more than one row (a key
# twice inside the rows the volatile DB loads, one across that boundary,
# one beyond it, one three times).  Under the default (warn): one WARN line
# per table with the exact counts and first row and key, the model loads, a
# duplicated key is served with its LAST row's vector (hps-gen's vector of
# the key that row had before the damage) with RocksDB (initial_cache_rate
# 0.5) and without it (0.5 and 1.0), and the NaN/Inf rows are served bit
# for bit.  Under duplicate_keys = refuse or nonfinite_values = refuse: exit
# status 4, a message naming the model, table, file, count and first row
# and key, no hps_et.* column family or SST file in RocksDB, no segment.
# --------------------------------------------------------------------------

def read_table(d):
    with open(d + "/key", "rb") as f:
        kb = f.read()
    with open(d + "/emb_vector", "rb") as f:
        vb = bytearray(f.read())
    return list(struct.unpack("<%dq" % (len(kb) // 8), kb)), vb


def write_keys(d, keys):
    with open(d + "/key", "wb") as f:
        f.write(struct.pack("<%dq" % len(keys), *keys))


def raw_output(resp):
    """The raw OUTPUT0 bytes of a binary 200 response."""
    if resp.status != 200:
        raise AssertionError("HTTP %d: %r" % (resp.status, resp.body[:500]))
    n = int(resp.headers["inference-header-content-length"])
    size = json.loads(resp.body[:n].decode())["outputs"][0]["parameters"]["binary_data_size"]
    return bytes(resp.body[n:n + size])


def pack(floats):
    return struct.pack("<%df" % len(floats), *floats)


# Bit patterns written into table 0 (row, element, uint32).
NONFINITE = [(3, 0, 0x7FC01234), (3, 1, 0x7F800000), (3, 2, 0xFF800000),  # NaN payload, +-Inf
             (7, 7, 0xFFC00001),                                           # a negative NaN
             (350, 4, 0x7F800001)]                                         # only in RocksDB

# Table 1 (300 rows): (row, later rows given its key).  With
# initial_cache_rate 0.5 the volatile DB loads rows 0..149.
DUPS = ((20, [30]), (5, [100, 290]), (10, [250]), (200, [280]))


def damage_contents(m):
    """NaN/Inf rows in table 0 (400 rows, dim 8) and duplicate keys in
    table 1 (300 rows, dim 4).  Returns (orig1, dup): the keys of table 1
    before, and {duplicated key: (its first row, the row that wins)}."""
    d0, d1 = m.table_dirs
    _, vecs0 = read_table(d0)
    for row, el, bits in NONFINITE:
        off = (row * 8 + el) * 4
        vecs0[off:off + 4] = struct.pack("<I", bits)
    with open(d0 + "/emb_vector", "wb") as f:
        f.write(vecs0)
    orig1, _ = read_table(d1)
    keys1 = list(orig1)
    for first, later in DUPS:
        for r in later:
            keys1[r] = orig1[first]
    write_keys(d1, keys1)
    return orig1, {orig1[first]: (first, later[-1]) for first, later in DUPS}


def contents_cases(t, cl, good):
    m = cl.gen_model("dupm", rows=[400, 300], dims=[8, 4], subdir="dupm")
    orig1, dup = damage_contents(m)
    keys0, vecs0 = read_table(m.table_dirs[0])
    key_file1 = m.table_dirs[1] + "/key"
    vec_file0 = m.table_dirs[0] + "/emb_vector"
    first_dup_key = orig1[20]

    def config(tag, extra="", pdb=True, rate="0.5"):
        rocks, seg = cl.path("rocks-" + tag), cl.new_segment_name(tag)
        text = base_ini(cl, good, rocks)
        text = H.ini_set(text, "volatile_db", "shared_memory_name", seg)
        text = H.ini_set(text, "volatile_db", "initial_cache_rate", rate)
        if not pdb:
            text = H.ini_set(text, "persistent_db", "type", "disabled")
        conf = cl.write_config(tag + ".ini", text + "\n" + model_section("good", good) + "\n" +
                               model_section("dupm", m) + extra, [])
        return conf, rocks, seg

    warn0 = ("model dupm table sparse_embedding0: %s: 3 rows with a NaN or Inf value "
             "(first: row 3, key %d); loaded the rows with NaN or Inf as they are "
             "([model.dupm] nonfinite_values = warn;" % (vec_file0, keys0[3]))
    warn1 = ("model dupm table sparse_embedding1: %s: 4 keys on more than one row, 5 rows "
             "overridden by a later row of the same key (first: row 30 repeats key %d); "
             "loaded the last row of each repeated key ([model.dupm] duplicate_keys = warn;"
             % (key_file1, first_dup_key))

    # ---- warn (the default): loads; the last row wins; NaN/Inf as stored ----
    for tag, pdb, rate in (("warn-pdb", True, "0.5"), ("warn-vdb-half", False, "0.5"),
                           ("warn-vdb-all", False, "1.0")):
        conf, rocks, seg = config(tag, pdb=pdb, rate=rate)
        coord = cl.start_coordinator(conf)
        log = coord.log()
        t.ok(warn0 in log and warn1 in log and log.count(" WARN ") == 2,
             "%s: one WARN line per damaged table with the counts and the first row and key"
             % tag, log)
        t.ok(re.search(r"model dupm: 2 tables, 700 rows, files valid; contents checked in "
                       r"[0-9.]+ s \(rows with NaN or Inf: 3, keys on more than one row: 4\)",
                       log), "%s: the INFO line has the model's totals" % tag, log)
        w = cl.start_worker(conf)

        def served(row):  # in some layer: RocksDB, or the rows the volatile DB loads
            return pdb or rate == "1.0" or row < 150
        dkeys = sorted(dup)
        # a key whose first row the volatile DB loads gets its last row's
        # vector even when that row lies beyond the loaded rows
        want = b"".join(pack(H.gen_vector(1, orig1[dup[k][1]], 4)) if served(dup[k][0])
                        else pack([0.0] * 4) for k in dkeys)
        gone = [orig1[r] for _, later in DUPS for r in later]  # keys the damage removed
        want += pack([0.0] * 4 * len(gone))
        got = raw_output(H.infer(w.http_port, "dupm", [[], dkeys + gone], binary=True))
        t.ok(got == want, "%s: each duplicated key is served with its last row's vector, "
             "exactly; the overwritten keys get the default" % tag,
             "got  %s\nwant %s" % (got.hex(), want.hex()))
        rows0 = [3, 7, 350, 0]
        want0 = b"".join(bytes(vecs0[r * 32:(r + 1) * 32]) if served(r) else pack([0.0] * 8)
                         for r in rows0)
        got0 = raw_output(H.infer(w.http_port, "dupm", [[keys0[r] for r in rows0], []],
                                  binary=True))
        t.ok(got0 == want0, "%s: rows with NaN, +-Inf and a negative NaN are served bit for bit"
             % tag, "got  %s\nwant %s" % (got0.hex(), want0.hex()))
        for p in (w, coord):
            p.kill()
            p.wait(10)

    # ---- refuse: exit 4 before anything is written ----
    for tag, extra, table, named, what, key in (
            ("refuse-dup", "duplicate_keys = refuse\n", "sparse_embedding1", key_file1,
             "4 keys on more than one row, 5 rows overridden by a later row of the same key "
             "(first: row 30 repeats key %d)" % first_dup_key, "duplicate_keys"),
            ("refuse-nan", "nonfinite_values = refuse\n", "sparse_embedding0", vec_file0,
             "3 rows with a NaN or Inf value (first: row 3, key %d)" % keys0[3],
             "nonfinite_values")):
        conf, rocks, seg = config(tag, extra)
        rc, out = cl.run_coordinator(conf)
        t.eq(rc, H.EXIT_MODEL, "%s: hps-coordinator exits with 4" % tag)
        msg = ("model dupm refused, nothing was loaded: table '%s': %s: %s ([model.dupm] %s = "
               "refuse)" % (table, named, what, key))
        t.ok(msg in out, "%s: the message names the model, table, file, count and first row "
             "and key" % tag, "want: %s\n%s" % (msg, out))
        where = "%s:%d: [model.dupm] sparse_files: " % (conf, 1 + next(
            i for i, x in enumerate(open(conf).read().split("\n"))
            if x.startswith("sparse_files") and "dupm" in x))
        t.ok(where + msg in out, "%s: ... after the INI's file, line and key" % tag,
             "want: %s\n%s" % (where + msg, out))
        cfs = [c for c in rocksdb_column_families(rocks) if c.startswith("hps_et.")]
        ssts = glob.glob(os.path.join(rocks, "*.sst"))
        t.ok(not cfs and not ssts, "%s: RocksDB has no hps_et.* column family nor SST file" %
             tag, "column families %r, SST files %r" % (cfs, ssts))
        t.ok(not os.path.exists(rocks), "%s: the persistent DB directory the refused start "
             "created is gone" % tag, os.listdir(rocks) if os.path.isdir(rocks) else "")
        t.ok(not os.path.exists("/dev/shm/hps." + seg), "%s: the segment was not created" % tag)


def body(t, cl):
    good = cl.gen_model("good", rows=[300, 200], dims=[4, 2],
                        subdir=deep_subdir(cl, "g", 1300))
    # (description, damage(model) -> file named in the message, dims in INI)
    cases = [
        ("emb_vector truncated inside a float",
         lambda m: (truncate(m.table_dirs[1] + "/emb_vector", 3), "emb_vector")[1], None),
        ("emb_vector short by 10 whole rows",
         lambda m: (truncate(m.table_dirs[1] + "/emb_vector", 10 * 8 * 4), "emb_vector")[1],
         None),
        ("key file not a multiple of 8",
         lambda m: (append(m.table_dirs[1] + "/key", b"\1\2\3"), "key")[1], None),
        ("key file short by one key",
         lambda m: (truncate(m.table_dirs[1] + "/key", 8), "emb_vector")[1], None),
        ("emb_vector longer than N x dim",
         lambda m: (append(m.table_dirs[1] + "/emb_vector", b"\0" * 32), "emb_vector")[1],
         None),
        ("emb_vector missing",
         lambda m: (os.remove(m.table_dirs[1] + "/emb_vector"), "emb_vector")[1], None),
        ("dim 4 in the INI, 8 in the files (file size divisible)",
         lambda m: "emb_vector", [16, 4]),
        ("dim 12 in the INI, 8 in the files",
         lambda m: "emb_vector", [16, 12]),
        ("key is a FIFO",
         lambda m: (make_fifo(m.table_dirs[1] + "/key"), "key")[1], None),
        ("emb_vector is a FIFO",
         lambda m: (make_fifo(m.table_dirs[1] + "/emb_vector"), "emb_vector")[1], None),
    ]
    for n, (desc, damage, dims) in enumerate(cases):
        bad = cl.gen_model("bad", rows=[500, 400], dims=[16, 8], subdir="bad%d" % n)
        fname = damage(bad)
        rocks = cl.path("rocks%d" % n)
        seg = "%s-b%d" % (cl.segment, n)
        cl.extra_segments.append(seg)
        text = base_ini(cl, good, rocks)
        text = H.ini_set(text, "volatile_db", "shared_memory_name", seg)
        conf = cl.write_config("bad%d.ini" % n, text + "\n" + model_section("good", good) +
                               "\n" + model_section("bad", bad, dims), [])
        t0 = time.monotonic()
        rc, out = cl.run_coordinator(conf, timeout=30.0)
        dt = time.monotonic() - t0
        named = os.path.join(bad.table_dirs[1], fname)
        t.eq(rc, H.EXIT_MODEL, "%s: hps-coordinator exits with 4" % desc)
        t.ok(named in out, "%s: the message names %s" % (desc, named), out)
        if "FIFO" in desc:
            t.ok(named + ": not a regular file (a FIFO)" in out and dt < 10.0,
                 "%s: refused as not a regular file, in %.1f s" % (desc, dt), out)
        cfs = [c for c in rocksdb_column_families(rocks) if c.startswith("hps_et.")]
        ssts = glob.glob(os.path.join(rocks, "*.sst"))
        t.ok(not cfs and not ssts, "%s: RocksDB has no hps_et.* column family nor SST file" %
             desc, "column families %r, SST files %r" % (cfs, ssts))
        t.ok(not os.path.exists("/dev/shm/hps." + seg),
             "%s: the segment was not created" % desc,
             repr(cl.shm_info(seg)["segment"]) if os.path.exists("/dev/shm/hps." + seg) else "")

    # A missing file at the end of a long path: the message keeps the reason
    # (it was cut before it past about 450 characters of path: names audit).
    deep = cl.gen_model("bad", rows=[500, 400], dims=[16, 8], subdir=deep_subdir(cl, "deep", 1500))
    os.remove(deep.table_dirs[1] + "/emb_vector")
    conf = cl.write_config("deep.ini", base_ini(cl, good, cl.path("rocks-deep")) + "\n" +
                           model_section("good", good) + "\n" + model_section("bad", deep), [])
    rc, out = cl.run_coordinator(conf, timeout=30.0)
    named = deep.table_dirs[1] + "/emb_vector: cannot open: No such file or directory"
    t.ok(rc == H.EXIT_MODEL and named in out, "emb_vector missing at the end of a %d-character "
         "path: exit 4, the message names the file and the reason" % len(deep.table_dirs[1]), out)

    # The RocksDB path and segment of the last case are usable by a correct
    # configuration: the refused start left nothing stale behind.
    n = len(cases) - 1
    fixed = cl.gen_model("bad", rows=[500, 400], dims=[16, 8],
                         subdir=deep_subdir(cl, "fixed", 1150))
    t.ok(1100 < len(fixed.table_dirs[0]) < 1200 < len(good.table_dirs[0]) < 1400,
         "the table directories have long paths (%d and %d characters)" %
         (len(fixed.table_dirs[0]), len(good.table_dirs[0])))
    text = base_ini(cl, good, cl.path("rocks%d" % n))
    text = H.ini_set(text, "volatile_db", "shared_memory_name", "%s-b%d" % (cl.segment, n))
    text = H.ini_set(text, "volatile_db", "initial_cache_rate", "0.5")
    conf = cl.write_config("fixed.ini", text + "\n" + model_section("good", good) + "\n" +
                           model_section("bad", fixed), [])
    cl.start_coordinator(conf)
    cfs = sorted(c for c in rocksdb_column_families(cl.path("rocks%d" % n))
                 if c.startswith("hps_et."))
    t.eq(cfs, ["hps_et.bad.sparse_embedding0", "hps_et.bad.sparse_embedding1",
               "hps_et.good.sparse_embedding0", "hps_et.good.sparse_embedding1"],
         "a correct configuration then loads all four tables into the same RocksDB")
    w = cl.start_worker(conf)
    kpt = [fixed.file_keys[0][-20:], fixed.file_keys[1][:5] + fixed.file_keys[1][-5:]]
    _, g = H.decode_output(H.infer(w.http_port, "bad", kpt, binary=True))
    t.ok(g == fixed.expected(kpt), "and serves exact rows (VDB and RocksDB) for them",
         H.first_mismatch(g, fixed.expected(kpt), fixed, kpt))
    shutil.rmtree(os.path.join(good.dir, "rocksdb"), ignore_errors=True)
    contents_cases(t, cl, good)
    full_disk(t, cl, good)


def full_disk(t, cl, good):
    """A persistent DB that cannot be written while the files are ingested
    (here RLIMIT_FSIZE, with SIGXFSZ ignored: each write past the limit fails
    with EFBIG, as ENOSPC would on a full disk) is not the model's fault:
    exit 5, which the service unit restarts, not 4, which it does not."""
    big = cl.gen_model("big", rows=[60000], dims=[64], subdir="big")
    text = base_ini(cl, good, cl.path("rocks-full"))
    seg = "%s-full" % cl.segment
    cl.extra_segments.append(seg)
    text = H.ini_set(text, "volatile_db", "shared_memory_name", seg)
    text = H.ini_set(text, "volatile_db", "shared_memory_size", "8MiB")
    text = H.ini_set(text, "volatile_db", "initial_cache_rate", "0.1")
    conf = cl.write_config("full.ini", text + "\n" + model_section("big", big), [])
    limit = 12 << 20  # above the 8 MiB segment, below the 15.8 MB of rows

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    r = subprocess.run([H.COORDINATOR, "-c", conf], capture_output=True, text=True, timeout=60,
                       cwd=cl.tmp, preexec_fn=small_files)
    out = r.stdout + r.stderr
    t.eq(r.returncode, H.EXIT_PDB, "persistent DB not writable during ingestion: exit 5")
    t.ok("writing the persistent DB's SST files" in out, "the message names the persistent DB",
         out)


if __name__ == "__main__":
    H.run_main("bad_models", body)
