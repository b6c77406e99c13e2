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
emb_vector, a missing emb_vector, and a dim in the INI that does
not match the file (one that divides the file size, one that does not).
With shared_memory_auto_remove = false the segment is inspected with hps-shm
(0 tables); then a coordinator on the fixed config starts on the same
RocksDB path and segment and serves exact rows.  The two models of that
config live at paths of about 1,300 and 1,150 characters: a path over
1,024 characters used to fail the persistent DB's record of the files
("cannot read ... key and emb_vector") after the tables were created.
"""
import glob
import os
import re
import shutil
import sys

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
        rc, out = cl.run_coordinator(conf)
        named = os.path.join(bad.table_dirs[1], fname)
        t.eq(rc, H.EXIT_MODEL, "%s: hps-coordinator exits with 4" % desc)
        t.ok(named in out, "%s: the message names %s" % (desc, named), out)
        cfs = [c for c in rocksdb_column_families(rocks) if c.startswith("hps_et.")]
        ssts = glob.glob(os.path.join(rocks, "*.sst"))
        t.ok(not cfs and not ssts, "%s: RocksDB has no hps_et.* column family nor SST file" %
             desc, "column families %r, SST files %r" % (cfs, ssts))
        if os.path.exists("/dev/shm/hps." + seg):
            info = cl.shm_info(seg)
            t.ok(info["segment"]["num_tables"] == 0 and not info["tables"],
                 "%s: the segment left behind holds 0 tables" % desc, repr(info["segment"]))
        else:
            t.ok(True, "%s: no segment left behind" % desc)

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


if __name__ == "__main__":
    H.run_main("bad_models", body)
