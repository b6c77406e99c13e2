#!/usr/bin/env python3
"""
int-kafka_two_coords: two hps-coordinators on one host (two segments: two
model sets, or a canary beside production) consume the same Kafka topic.

Each coordinator's volatile and persistent DB consume as groups of their
own (hps.<layer>.<host>.<segment>).  Before, both used hps.<layer>.<host>:
each assigned itself every partition and committed into that one group,
so a coordinator restarted after the other had consumed went on from the
other's offsets and never applied the updates pushed while it was down.

  (1) both apply generation 1 of 100 keys (hps-shm get on each segment);
      each logs its own groups;
  (2) coordinator 1 SIGKILLed; generation 2 pushed and applied (and
      committed) by coordinator 2; coordinator 1 restarted on its kept
      segment ([volatile_db] initialize_after_startup = false): it applies
      generation 2 to all 100 keys;
  (3) SIGKILLed again; generation 3 pushed, applied by coordinator 2;
      restarted with the defaults (its volatile DB rebuilt from its RocksDB,
      the volatile consumer starting where the persistent one stood): all
      100 keys at generation 3.
"""
import os
import re
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402
from test_kafka import DIM, Mock, new_vector, push, records, wait_applied  # noqa: E402

ROWS = 2000
TOPIC = "hps_et.mA.sparse_embedding0"


def shm_rows(cl, seg, keys):
    """hps-shm get of keys in segment seg: a list of float lists (None: missing)."""
    _, out, _ = cl.shm("get", seg, "mA", "sparse_embedding0", *map(str, keys))
    rows = []
    for line in out.splitlines():
        if re.match(r"^-?\d+:", line):
            rows.append(None if "missing" in line else
                        [float(x) for x in line.split(":")[1].split()])
    return rows


def at_gen(cl, seg, keys, gen):
    """How many of keys hold generation gen's vector in segment seg."""
    return sum(g == new_vector(k, gen) for k, g in zip(keys, shm_rows(cl, seg, keys)))


def body(t, cl):
    mock = Mock([TOPIC])
    try:
        segs = [cl.new_segment_name("c1"), cl.new_segment_name("c2")]
        confs = []
        for i, seg in enumerate(segs):
            m = cl.gen_model("mA", [ROWS], [DIM], subdir="mA%d" % i, segment=seg)
            confs.append(cl.write_config("c%d.ini" % i, m.ini_text, [
                ("update_source", "type", "kafka_message_queue"),
                ("update_source", "brokers", mock.bootstrap),
                ("update_source", "poll_timeout_ms", "100"),
                ("update_source", "metadata_refresh_interval_ms", "500")]))
        keys = m.file_keys[0][:100]
        c1 = cl.start_coordinator(confs[0], log_name="c1.log")
        c2 = cl.start_coordinator(confs[1], log_name="c2.log")
        for c, seg in ((c1, segs[0]), (c2, segs[1])):
            t.ok(re.search(r"kafka volatile: .*group hps\.volatile\.[^ ,]*\.%s\b" % seg, c.log())
                 and re.search(r"kafka persistent: .*group hps\.persistent\.[^ ,]*\.%s\b" % seg,
                               c.log()),
                 "(1) %s: its groups carry its segment's name" % seg,
                 [ln for ln in c.log().splitlines() if "group" in ln])
        t.eq(push(mock.bootstrap, "mA", records(keys, 1))[0], 0, "(1) push generation 1")
        t.ok(wait_applied(c1, "volatile", 100) and wait_applied(c2, "volatile", 100),
             "(1) both coordinators applied generation 1")
        t.eq([at_gen(cl, s, keys, 1) for s in segs], [100, 100], "(1) both segments at 1")

        # (2) coordinator 1 down while generation 2 is consumed by 2
        c1.kill(signal.SIGKILL)
        c1.wait(10)
        t.eq(push(mock.bootstrap, "mA", records(keys, 2))[0], 0, "(2) push generation 2")
        t.ok(wait_applied(c2, "volatile", 200), "(2) coordinator 2 applied generation 2")
        kept = cl.write_config("c0b.ini", open(confs[0]).read(),
                               [("volatile_db", "initialize_after_startup", "false")])
        c1 = cl.start_coordinator(kept, log_name="c1b.log")
        t.ok(H.wait_until(lambda: at_gen(cl, segs[0], keys, 2) == 100, 15),
             "(2) coordinator 1, restarted on its kept segment, applied generation 2 to all "
             "100 keys", "%d of 100" % at_gen(cl, segs[0], keys, 2))

        # (3) likewise, restarted with the defaults (the VDB from RocksDB)
        c1.kill(signal.SIGKILL)
        c1.wait(10)
        t.eq(push(mock.bootstrap, "mA", records(keys, 3))[0], 0, "(3) push generation 3")
        t.ok(wait_applied(c2, "volatile", 300), "(3) coordinator 2 applied generation 3")
        c1 = cl.start_coordinator(confs[0], log_name="c1c.log")
        t.ok(H.wait_until(lambda: at_gen(cl, segs[0], keys, 3) == 100, 15),
             "(3) coordinator 1, restarted with its VDB rebuilt from RocksDB, has generation 3 "
             "on all 100 keys", "%d of 100" % at_gen(cl, segs[0], keys, 3))
        for c in (c1, c2):
            c.kill(signal.SIGTERM)
            c.wait(30)
    finally:
        mock.close()


if __name__ == "__main__":
    H.run_main("kafka_two_coords", body)
