#!/usr/bin/env python3
"""mkseed.py -- (re)write the seed corpora tests/fuzz/corpus/<target>/seed-*
and the dictionaries tests/fuzz/<target>.dict.  The seeds are small valid
(and a few nearly valid) inputs in each target's input format (see the
comment at the top of tests/fuzz/fuzz-<target>.c).  Run it after changing
an input format; libFuzzer adds what it finds to its own working corpus,
never to these directories.

    tests/fuzz/mkseed.py
"""
import json
import math
import os
import re
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def dump(o):
    return json.dumps(o, separators=(",", ":"))


# ---- kserve: flags, URL \n, [header \n], body --------------------------------
def kserve():
    wdl_url = b"/v2/models/hps_wdl/infer"
    keys = list(range(1, 29))
    js = {"inputs": [
        {"name": "KEYS", "shape": [1, 28], "datatype": "INT64", "data": keys},
        {"name": "NUMKEYS", "shape": [1, 2], "datatype": "INT32", "data": [2, 26]}]}
    write("kserve", "json", bytes([0]) + wdl_url + b"\n" + dump(js).encode())
    js2 = {"id": "r\"1", "parameters": {"binary_data_output": True, "priority": 1},
           "inputs": [{"name": "NUMKEYS", "datatype": "INT32", "shape": [1, 2], "data": [[1], [2]]},
                      {"name": "KEYS", "datatype": "INT64", "shape": [1, 3],
                       "data": [-9223372036854775808, 9223372036854775807, 0]}],
           "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": False}}]}
    write("kserve", "json-id-params", bytes([0]) + b"/v2/models/hps_wdl/versions/1/infer\n" +
          dump(js2).encode())
    # Binary data: a JSON header, then KEYS (224 bytes) and NUMKEYS (8).
    hdr = dump({"inputs": [
        {"name": "KEYS", "datatype": "INT64", "shape": [1, 28],
         "parameters": {"binary_data_size": 224}},
        {"name": "NUMKEYS", "datatype": "INT32", "shape": [1, 2],
         "parameters": {"binary_data_size": 8}}],
        "parameters": {"binary_data_output": True}}).encode()
    body = hdr + struct.pack("<28q", *keys) + struct.pack("<2i", 2, 26)
    write("kserve", "binary", bytes([2]) + wdl_url + b"\n" + str(len(hdr)).encode() + b"\n" + body)
    hdr3 = hdr + b"   "  # unaligned binary part
    body = hdr3 + struct.pack("<28q", *keys) + struct.pack("<2i", 2, 26)
    write("kserve", "binary-unaligned",
          bytes([2]) + wdl_url + b"\n" + (" %d " % len(hdr3)).encode() + b"\n" + body)
    # Model without batching: KEYS [3], NUMKEYS [3].
    js = {"inputs": [{"name": "KEYS", "shape": [3], "datatype": "INT64", "data": [5, 6, 7]},
                     {"name": "NUMKEYS", "shape": [3], "datatype": "INT32", "data": [1, 1, 1]}]}
    write("kserve", "plain", bytes([1]) + b"/v2/models/plain/versions/7/infer\n" + dump(js).encode())
    # Shared memory: KEYS and NUMKEYS read from region r0, OUTPUT0 written to it.
    js = {"inputs": [
        {"name": "KEYS", "shape": [1, 2], "datatype": "INT64",
         "parameters": {"shared_memory_region": "r0", "shared_memory_byte_size": 16,
                        "shared_memory_offset": 0}},
        {"name": "NUMKEYS", "shape": [1, 2], "datatype": "INT32",
         "parameters": {"shared_memory_region": "r0", "shared_memory_byte_size": 8,
                        "shared_memory_offset": 8192}}],
        "outputs": [{"name": "OUTPUT0",
                     "parameters": {"shared_memory_region": "r0",
                                    "shared_memory_byte_size": 68,
                                    "shared_memory_offset": 12288}}]}
    write("kserve", "shm", bytes([4]) + wdl_url + b"\n" + dump(js).encode())
    write("kserve", "shm-status", bytes([4]) + b"/v2/systemsharedmemory/region/r0/status\n")
    write("kserve", "small-limit", bytes([8]) + wdl_url + b"\n" + dump(
        {"inputs": [{"name": "KEYS", "shape": [1, 5], "datatype": "INT64", "data": [1, 2, 3, 4, 5]},
                    {"name": "NUMKEYS", "shape": [1, 2], "datatype": "INT32", "data": [2, 3]}]}).encode())
    write("kserve", "bad-json", bytes([0]) + wdl_url + b"\n" + b'{"inputs":[{"name":"KEYS",NaN]}')
    write("kserve", "raw-binary", bytes([2]) + wdl_url + b"\n0\n" + struct.pack("<q", 1))
    write("kserve", "repo-load", bytes([0]) + b"/v2/repository/models/plain/load\n" +
          dump({"parameters": {"x": 1}}).encode())
    write("kserve", "repo-unload", bytes([0]) + b"/v2/repository/models/plain/unload\n{}")
    write("kserve", "repo-index", bytes([0]) + b"/v2/repository/index\n" +
          dump({"ready": True}).encode())


KSERVE_DICT = ["inputs", "outputs", "name", "shape", "datatype", "data", "parameters", "id",
               "KEYS", "NUMKEYS", "OUTPUT0", "INT64", "INT32", "FP32", "BYTES",
               "binary_data_size", "binary_data_output", "binary_data", "shared_memory_region",
               "shared_memory_byte_size", "shared_memory_offset", "content_type", "classification",
               "priority", "timeout", "sequence_id", "r0", "hps_wdl", "plain", "/v2/models/",
               "/versions/", "/infer", "/ready", "/config", "/stats", "/v2/health/live",
               "/v2/systemsharedmemory", "/v2/cudasharedmemory", "/region/", "/status",
               "/register", "/unregister", "true", "false", "null", "-9223372036854775808",
               "9223372036854775807", "18446744073709551616", "1e3", "NaN", "Infinity"]


# ---- conf: INI text [NUL key [NUL value]] ----------------------------------------
def conf():
    with open(os.path.join(HERE, "..", "unit", "conf", "sample.ini")) as f:
        sample = f.read()
    write("conf", "sample", sample)
    minimal = ("[model.m]\nsparse_files = /m/0_sparse\nembedding_vecsize_per_table = 16\n"
               "maxnum_catfeature_query_per_table_per_sample = 26\n")
    write("conf", "minimal", minimal)
    write("conf", "edit", minimal + "\0volatile_db.num_partitions\0" + "4")
    write("conf", "edit-model", minimal + "\0model.m.gpucacheper\0" + "0.5")
    write("conf", "bad-value", "[volatile_db]\nshared_memory_size = 12 parsecs\n")
    write("conf", "continuation", "[hps]\nlog_level = info ; comment\n[model.x]\nsparse_files = /a,\n"
          "    /b\nembedding_vecsize_per_table = 1,\n  2\n"
          "maxnum_catfeature_query_per_table_per_sample = 1, 1\n")


def conf_dict():
    with open(os.path.join(HERE, "..", "..", "conf", "hps_conf.def")) as f:
        text = f.read()
    words = set(re.findall(r"CFG\(\w+,\s*(\w+),", text))
    words |= {"[" + s + "]" for s in re.findall(r"^\s*S\((\w+),", text, re.M)}
    words |= set(re.findall(r"[VA]\(\w+,\s*\w+,\s*(\w+)\)", text))
    words |= {"[model.", "true", "false", "yes", "no", "max", "unbounded", "auto",
              "KiB", "MiB", "GiB", "TiB", " = ", "\n", "; ", ", ", "\n    "}
    return sorted(words)


# ---- kafka: flags, dim, topic length, topic, payload --------------------------------
def kafka():
    def msg(recs, dim, kb):
        out = struct.pack("<II", 0x52544348, dim * 4)
        for k, v in recs:
            out += struct.pack("<q" if kb == 8 else "<I", k) + struct.pack("<%df" % dim, *v)
        return out
    t = b"hps_et.wdl.deep"
    write("kafka", "int64", bytes([0, 4, len(t)]) + t + msg([(1, [1, 2, 3, 4]), (-5, [0] * 4)], 4, 8))
    write("kafka", "int32", bytes([3, 2, len(t)]) + t + msg([(7, [1, 2]), (8, [3, 4])], 2, 4))
    write("kafka", "narrow", bytes([2, 1, len(t)]) + t + msg([(1 << 40, [1]), (9, [2])], 1, 8))
    write("kafka", "beacon", bytes([0, 4, len(t)]) + t + struct.pack("<II", 0x52544348, 16))
    write("kafka", "keyed", bytes([4, 4, 5]) + b"^wdl$" + msg([(1, [1, 2, 3, 4])], 4, 8))
    write("kafka", "regex", bytes([0, 4, 12]) + b"dcn_v[0-9]+$" + msg([(1, [0] * 4)], 4, 8)[:-3])


# ---- modelfile: dim-1, flags, K (u16), key file, emb_vector file ---------------------
def modelfile():
    def mf(dim, flags, keys, vecs, kb=8):
        kf = b"".join(struct.pack("<q" if kb == 8 else "<I", k) for k in keys)
        vf = b"".join(struct.pack("<%df" % dim, *v) for v in vecs)
        return bytes([dim - 1, flags]) + struct.pack("<H", len(kf)) + kf + vf
    write("modelfile", "ok", mf(4, 0, [1, 2, 3], [[1, 2, 3, 4]] * 3))
    write("modelfile", "dup-nan", mf(2, 6, [5, 5, 0, 0], [[1, math.nan], [0, 1], [math.inf, 0], [1, 1]]))
    write("modelfile", "u32", mf(1, 1, [1, 2, 1 << 33], [[0.5]] * 3))
    write("modelfile", "u32-ok", mf(3, 1, [1, 2], [[1, 2, 3]] * 2))
    write("modelfile", "short-vec", mf(4, 0, [1, 2], [[1, 2, 3, 4]])[:-2])
    write("modelfile", "empty", mf(8, 0, [], []))


# ---- shmdb: flags, patches [off 3 LE][n][bytes] ---------------------------------------
def shmdb():
    write("shmdb", "intact", bytes([3]))
    def patch(off, data):
        return struct.pack("<I", off)[:3] + bytes([len(data) - 1]) + data
    write("shmdb", "bump", bytes([1]) + patch(40, struct.pack("<Q", 1 << 40)))  # hdr.bump
    write("shmdb", "free-head", bytes([0]) + patch(56, struct.pack("<Q", 12345)))  # hdr.free_head
    write("shmdb", "tables", bytes([2]) + patch(4096, b"\xff" * 16))
    write("shmdb", "random", bytes([3]) + patch(70000, b"\x01\x02\x03\x04\x05\x06\x07\x08") +
          patch(20000, b"\xff\xff\xff\xff"))


def write_dict(name, words):
    with open(os.path.join(HERE, name + ".dict"), "w") as f:
        f.write("# libFuzzer dictionary of fuzz-%s (written by mkseed.py)\n" % name)
        for w in words:
            f.write('"%s"\n' % "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "\\x%02x" % ord(c)
                                       for c in w))


if __name__ == "__main__":
    kserve()
    conf()
    kafka()
    modelfile()
    shmdb()
    write_dict("kserve", KSERVE_DICT)
    write_dict("conf", conf_dict())
