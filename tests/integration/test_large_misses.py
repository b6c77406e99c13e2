#!/usr/bin/env python3
"""
int-large_misses: a lookup with more misses than the coordinator can
answer within [worker] miss_timeout_ms keeps the rows it did answer.

Model m: one table of 1,000,000 rows, dim 8, default 0.5; initial_cache_rate
0.01 and cache_missed_embeddings off, so 990,000 keys are only in RocksDB.
A host-only Python client (hps.Client, device -1) looks them all up in one
call with miss_timeout_ms 1000: the miss queue splits them into chunks of at
most 4096 keys, and the deadline passes before the last one is answered
(RocksDB reads 990,000 rows in more than 1 s on 2 cores; where it does
not, every row must be exact and the test says it could not check the
cut).
  - the rows of the chunks answered before the deadline are returned (before:
    every miss of the call got the table's default as soon as one chunk was
    late, which a caller could not tell from keys the model lacks; and one
    chunk was as large as a 1 MiB slab holds, 25,000 keys here, so that
    even 20,000 misses got nothing but defaults when it was late);
  - every returned row is exactly the model's row or the default, checked on
    a sample of each;
  - the call counted one miss-queue timeout (counters()["miss_timeout"])
    when the deadline cut it.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402
from pyhps import mismatch, vecs  # noqa: E402

import numpy as np  # noqa: E402

import hps  # noqa: E402

RATE = 0.01
DEFAULT = 0.5
TIMEOUT_MS = 1000


def body(t, cl):
    model = cl.gen_model("m", rows=[1000000], dims=[8], defaults=[DEFAULT])
    conf = cl.write_config("hps.ini", model.ini_text, [
        ("volatile_db", "initial_cache_rate", RATE),
        ("volatile_db", "cache_missed_embeddings", "false"),
        ("worker", "miss_timeout_ms", TIMEOUT_MS),
    ])
    cl.start_coordinator(conf)
    keys = np.array(model.pdb_only_keys(0, RATE), dtype=np.int64)
    with hps.Client(conf, -1) as c:
        t.ok(c.wait_ready(20000), "the client is ready")
        c0 = c.counters("m")
        rows = c.lookup("m", 0, keys)
        c1 = c.counters("m")
    t.eq(rows.shape, (len(keys), 8), "one row per key")
    is_default = np.all(rows == np.float32(DEFAULT), axis=1)
    real, late = np.flatnonzero(~is_default), np.flatnonzero(is_default)
    cut = c1["miss_timeout"] - c0["miss_timeout"]
    t.diag("%d of %d misses answered within miss_timeout_ms %d" % (len(real), len(keys),
                                                                    TIMEOUT_MS))
    if cut:
        t.ok(len(real) > 0 and len(late) > 0,
             "the deadline cut the call: the rows answered before it are returned (%d), "
             "the rest got the default (%d)" % (len(real), len(late)))
    else:
        t.skip("the rows answered before the deadline are returned",
               "the deadline did not cut the call here (every row answered in time)")
        t.eq(len(late), 0, "no deadline: every row answered")
    t.ok(cut <= 1, "at most one miss-queue timeout counted for the call (%d)" % cut)
    rng = np.random.default_rng(7)
    pick = rng.choice(real, min(len(real), 3000), replace=False) if len(real) else real
    t.eq(mismatch(rows[pick], vecs(model, 0, keys[pick])), "equal",
         "a sample of %d returned rows: exactly the model's" % len(pick))

if __name__ == "__main__":
    H.run_main("large_misses", body)
