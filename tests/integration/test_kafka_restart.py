#!/usr/bin/env python3
"""
Restart with [persistent_db] / [volatile_db] initialize_after_startup = true
(the defaults) after Kafka updates were applied and committed: Kafka will not
deliver them again, so the restart must keep them.

1. Model mA (RocksDB + volatile DB at initial_cache_rate 0.5); updates for
   100 keys held by the volatile DB and 100 keys only in RocksDB; both layers
   apply them and commit (graceful stop, SIGTERM).
2. Restart: the coordinator finds the same model files recorded in RocksDB
   and does not ingest them again; the volatile DB, recreated, takes its rows
   from RocksDB.  The updated keys return the updated vectors (from the
   volatile DB and from RocksDB through the miss path), untouched keys the
   model's vectors; the consumer lag metric says 0.
3. SIGKILL the coordinator (its consumer lag leaves the worker's
   metrics), rewrite the model's emb_vector (a new model:
   every value v becomes 2v + 1), restart: the new model's vectors are
   served for every key, the updated ones included (the table's rows were
   replaced).
4. The persistent layer takes no updates ([persistent_db] update_filters
   matches no model), the volatile layer applies 50 and commits them;
   restart: the volatile DB, filled from RocksDB, lacks them, so its
   consumer starts where the persistent one stands and they are served
   again (before, they were lost for good).  Then 200,000 more updates and
   new values of those keys, and a restart with the worker attached under a
   stream: the segment is published once the consumers caught up, so no
   answer goes back to older values (without the catch-up, 77 and 124 of
   about 3,500 answers did in two runs).
"""
import array
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402
from test_kafka import Mock, stats, wait_applied  # noqa: E402

DIM = 8
ROWS = 2000
RATE = 0.5
TOPIC = "hps_et.mA.sparse_embedding0"
FILLER = 200_000  # updates read again before the 50 keys' newest ones (4b)


def new_vector(key, gen=1):
    return [H.f32(5000.0 * gen + (key % 991) + d * 0.5) for d in range(DIM)]


def model2_vector(key):
    return [H.f32(2.0 * v + 1.0) for v in H.gen_vector(0, key, DIM)]


def push(bootstrap, keys, gen=1):
    return H.push_updates(bootstrap, "mA", "sparse_embedding0", DIM,
                          [(k, new_vector(k, gen)) for k in keys])


def lookup(worker, keys):
    _, vals = H.decode_output(H.infer(worker.http_port, "mA", [keys]))
    return [vals[i * DIM:(i + 1) * DIM] for i in range(len(keys))]


def rewrite_model(m):
    """emb_vector: every value v -> 2v + 1 (a deliberately new model)."""
    path = os.path.join(m.table_dirs[0], "emb_vector")
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    for i in range(len(a)):
        a[i] = 2.0 * a[i] + 1.0
    with open(path, "wb") as f:
        f.write(a.tobytes())


def restart(cl, conf, old_worker, old_coord, sig):
    old_worker.kill(signal.SIGTERM)
    old_worker.wait(20)
    old_coord.kill(sig)
    old_coord.wait(30)
    coord = cl.start_coordinator(conf)
    return coord, cl.start_worker(conf)


def body(t, cl):
    mock = Mock([TOPIC])
    try:
        scenario(t, cl, mock)
    finally:
        mock.close()


def scenario(t, cl, mock):
    t.ok(bool(mock.bootstrap), "kafka-mock listens at %s" % mock.bootstrap)
    m = cl.gen_model("mA", [ROWS], [DIM])
    conf = cl.write_config("hps.ini", m.ini_text, [
        ("volatile_db", "initial_cache_rate", str(RATE)),
        ("update_source", "type", "kafka_message_queue"),
        ("update_source", "brokers", mock.bootstrap),
        ("update_source", "poll_timeout_ms", "100"),
        ("update_source", "metadata_refresh_interval_ms", "500"),
    ])
    coord = cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    vdb_upd, vdb_keep = m.vdb_keys(0, RATE)[:100], m.vdb_keys(0, RATE)[100:150]
    pdb_upd, pdb_keep = m.pdb_only_keys(0, RATE)[:100], m.pdb_only_keys(0, RATE)[100:150]
    updated, kept = vdb_upd + pdb_upd, vdb_keep + pdb_keep

    # 1. updates applied by both layers.
    t.eq(push(mock.bootstrap, updated), 0, "hps-push: 200 updates delivered")
    t.ok(wait_applied(coord, "volatile", 200), "volatile layer applied 200 updates",
         stats(coord, "volatile"))
    t.ok(wait_applied(coord, "persistent", 200), "persistent layer applied 200 updates",
         stats(coord, "persistent"))
    t.eq(lookup(w, updated), [new_vector(k) for k in updated], "updated vectors served")
    t.ok("ingested into the persistent DB" in coord.log(), "first start ingested the model")

    # 2. graceful restart, initialize_after_startup = true on both layers.
    coord, w = restart(cl, conf, w, coord, signal.SIGTERM)
    t.ok("not ingested again" in coord.log(), "restart: same model files not ingested again",
         coord.log()[-2000:])
    t.ok("values of 1 of 1 tables from the persistent DB" in coord.log(),
         "restart: the volatile DB was filled from the persistent DB")
    t.eq(lookup(w, vdb_upd), [new_vector(k) for k in vdb_upd],
         "restart: updated keys of the volatile DB keep their updates")
    t.eq(lookup(w, pdb_upd), [new_vector(k) for k in pdb_upd],
         "restart: updated keys only in RocksDB keep their updates (miss path)")
    t.eq(lookup(w, kept), [H.gen_vector(0, k, DIM) for k in kept],
         "restart: untouched keys keep the model's vectors")
    def lags():
        return {lab.get("layer"): v for lab, v in
                H.metric_samples(w.metrics_port, "nv_hps_update_consumer_lag")}
    t.ok(H.wait_until(lambda: lags() == {"volatile": 0, "persistent": 0}, 10),
         "restart with nothing new: nv_hps_update_consumer_lag 0 on both layers (it counted "
         "the whole topic until a partition got a new message)", lags())
    rc, out, _ = cl.shm("get", cl.segment, "mA", "sparse_embedding0", str(vdb_upd[0]))
    t.ok(rc == 0 and ("%g" % new_vector(vdb_upd[0])[1]) in out,
         "hps-shm get: the volatile DB row holds the update", out)

    # 3. SIGKILL, a changed model file, restart: the new model is served.
    # While no coordinator is alive the lag is unknown: absent, not its last
    # value (0, while updates pile up unread).
    coord.kill(signal.SIGKILL)
    coord.wait(30)
    t.ok(H.wait_until(lambda: H.metrics(w.metrics_port).get("nv_hps_coordinator_alive") == 0
                      and lags() == {}, 10),
         "coordinator SIGKILLed: nv_hps_update_consumer_lag absent", lags())
    rewrite_model(m)
    coord, w = restart(cl, conf, w, coord, signal.SIGKILL)
    t.ok("model files changed" in coord.log(), "changed model file detected", coord.log()[-2000:])
    t.ok("1 of 1 tables ingested into the persistent DB" in coord.log(),
         "changed model file ingested again")
    for name, keys in (("updated, volatile DB", vdb_upd), ("updated, RocksDB only", pdb_upd),
                       ("untouched, volatile DB", vdb_keep), ("untouched, RocksDB only", pdb_keep)):
        t.eq(lookup(w, keys), [model2_vector(k) for k in keys],
             "new model: %s keys return the new model's vectors" % name)
    t.ok(coord.alive(), "coordinator alive")

    # 4. The persistent layer behind the volatile one at a restart (here it
    # takes no update: its filter matches no model): the volatile DB, filled
    # from the persistent DB, must read the updates again from where the
    # persistent consumer stands, though its own group committed them.
    conf4 = cl.write_config("hps-vdb-only.ini", m.ini_text, [
        ("volatile_db", "initial_cache_rate", str(RATE)),
        ("persistent_db", "update_filters", "nomodel"),
        ("update_source", "type", "kafka_message_queue"),
        ("update_source", "brokers", mock.bootstrap),
        ("update_source", "poll_timeout_ms", "100"),
        ("update_source", "metadata_refresh_interval_ms", "500"),
    ])
    coord, w = restart(cl, conf4, w, coord, signal.SIGTERM)
    before = stats(coord, "volatile").get("applied", 0)
    t.eq(push(mock.bootstrap, vdb_keep), 0, "hps-push: 50 updates, for the volatile DB only")
    t.ok(wait_applied(coord, "volatile", before + 50), "volatile layer applied them",
         stats(coord, "volatile"))
    t.eq(lookup(w, vdb_keep), [new_vector(k) for k in vdb_keep], "served before the restart")
    coord, w = restart(cl, conf4, w, coord, signal.SIGTERM)
    t.ok("starts where kafka persistent stands" in coord.log(),
         "restart: the volatile consumer starts where the persistent one stands",
         coord.log()[-2000:])
    t.ok(H.wait_until(lambda: lookup(w, vdb_keep) == [new_vector(k) for k in vdb_keep], 15),
         "restart: the volatile DB, filled from the persistent DB, has the 50 updates again "
         "(they were served stale, the model's rows, for good)",
         [lookup(w, vdb_keep[:2])])

    # 4b. The same restart with the worker attached and a stream through it,
    # after FILLER more updates and then new values of the 50 keys, all for
    # the volatile DB only: the restarted consumer reads them all again (the
    # persistent DB holds none), the 50 keys' new values last.  The segment
    # is published only once the consumers caught up, so no answer of the
    # stream goes back to older values of those keys (before, the workers
    # moved to the new segment while it replayed).
    filler = [1_000_000 + i for i in range(FILLER)]
    t.eq(push(mock.bootstrap, filler) + push(mock.bootstrap, vdb_keep, gen=2), 0,
         "hps-push: %d more updates, then new values of the 50 keys" % FILLER)
    want = [new_vector(k, 2) for k in vdb_keep]
    t.ok(H.wait_until(lambda: lookup(w, vdb_keep) == want, 60, 0.1),
         "the 50 keys' new values served before the restart")
    stop, answers = threading.Event(), []

    def stream():
        while not stop.is_set():
            try:
                answers.append(lookup(w, vdb_keep) == want)
            except Exception:  # noqa: BLE001  (counted as not the new values)
                answers.append(False)
    th = threading.Thread(target=stream)
    th.start()
    switches = w.log().count("re-attached")
    coord.kill(signal.SIGTERM)
    coord.wait(30)
    coord = cl.start_coordinator(conf4)
    switched = H.wait_until(lambda: w.log().count("re-attached") > switches, 60, 0.05)
    time.sleep(1.0)
    stop.set()
    th.join(30)
    t.ok(switched and answers and all(answers),
         "restart with the worker attached: %d of %d answers through the switch have the 50 "
         "keys' newest values (the segment is published once the consumers caught up)"
         % (sum(answers), len(answers)), coord.log()[-1500:])


if __name__ == "__main__":
    H.run_main("kafka-restart", body)
