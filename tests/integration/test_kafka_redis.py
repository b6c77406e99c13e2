#!/usr/bin/env python3
"""
int-kafka_redis: Kafka updates reach the distributed DB.  A Redis Cluster
(three masters, requirepass) and kafka-mock are started here; hps-coordinator
consumes topic hps_et.m.sparse_embedding0 with [distributed_db] type =
redis_cluster; updates pushed with hps-push must appear in Redis in
HugeCTR's layout (hash hps_et{hps_et.m.sparse_embedding0/p<i>}v, field =
raw 8-byte key, value = raw floats) with the new vectors, and be counted by
the coordinator's "kafka distributed:" stats line.

Then a restart keeps the updates applied to Redis: model r with the
default [distributed_db] initial_cache_rate (1.0) and no persistent DB;
300 updates applied to Redis; the coordinator stopped (SIGTERM) and started
again on the same files: Redis still holds the 300 updated rows (the table's
record names these files, so it is not filled again; before, the restart
wrote the model files' rows over them, and the group had committed the
updates, so they never came back), and the log says the table was kept.

Then two hosts (two coordinators, own segments and RocksDBs) that serve
different models, a and b, share Redis and the group hps.distributed: 300
updates pushed to each model all reach Redis.  Each host subscribes the
group to the topics of the models it serves, so the group's assignor gives
a's partitions to a's host only; subscribed to every model's topics, each
host got half of the other model's partitions, skipped their updates as
topics of no table here and committed them (148 and 152 of 300 reached
Redis, the rest never).

Then three SIGHUP reloads in a row: the updates of an unchanged model
pushed after each SIGHUP are in Redis when each reload publishes; and a
reload with no topic of its model yet publishes without waiting for the
distributed DB's group member, which nothing is assigned to.

Then a Redis that refuses writes for a while (its consumer behind the
volatile DB's): rows read from it are answered but not kept in the volatile
DB, so once it has the update every key answers it (lagging_redis_rows).
"""
import os
import re
import signal
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402
import test_kafka as K  # noqa: E402
import test_redis_cluster as R  # noqa: E402

N_UPDATES = 300


def body(t, cl):
    rc = R.RedisCluster(cl.tmp, n=3, replicas=0)
    mock = K.Mock([K.TOPIC_A.replace("mA", "m"), K.TOPIC_A.replace("mA", "r")])
    try:
        model = cl.gen_model("m", rows=[K.ROWS], dims=[K.DIM])
        conf = cl.write_config("hps.ini", model.ini_text, R.ddb_settings(rc) + [
            ("distributed_db", "initial_cache_rate", 0.0),
            ("update_source", "type", "kafka_message_queue"),
            ("update_source", "brokers", mock.bootstrap),
            ("update_source", "poll_timeout_ms", "100"),
            ("update_source", "metadata_refresh_interval_ms", "500"),
        ])
        coord = cl.start_coordinator(conf)
        keys = [H.gen_key(0, i) for i in range(N_UPDATES)]
        rc_push, out = K.push(mock.bootstrap, "m", K.records(keys, 7))
        t.ok(rc_push == 0, "hps-push delivered %d updates" % N_UPDATES, out)
        t.ok(K.wait_applied(coord, "distributed", N_UPDATES, 60),
             "coordinator applied them to Redis (kafka distributed: applied >= %d)" % N_UPDATES,
             coord.log()[-3000:])
        bad = sum(redis_row(rc, "m", k) != packed(k, 7) for k in keys)
        t.eq(bad, 0, "every updated key holds its new vector in Redis (HugeCTR layout)")
        t.eq(R.total_rows(rc, "m", "sparse_embedding0"), N_UPDATES,
             "Redis holds exactly the updated rows (initial_cache_rate 0)")

        # Partition 0's hash replaced by a string: every write to it answers
        # WRONGTYPE.  The batch is dropped and counted instead of retried
        # forever, which stalled every later update of the layer.
        port = rc.alive_ports()[0]
        p0 = R.hname("m", "sparse_embedding0", 0)
        R.redis_cmd(port, "DEL", p0)
        R.redis_cmd(port, "SET", p0, "not-a-hash")
        errors0 = K.stats(coord, "distributed").get("errors", 0)
        K.push(mock.bootstrap, "m", K.records(keys, 8))
        t.ok(H.wait_until(lambda: K.stats(coord, "distributed").get("errors", 0) > errors0, 30,
                          0.1),
             "updates that meet a WRONGTYPE partition are dropped and counted",
             coord.log()[-3000:])
        rest = [k for k in keys if R.part_of(k) != 0][:50]
        K.push(mock.bootstrap, "m", K.records(rest, 9))

        def later_applied():
            return all(redis_row(rc, "m", k) == packed(k, 9) for k in rest)
        t.ok(H.wait_until(later_applied, 30, 0.2),
             "later updates of the healthy partitions still reach Redis", coord.log()[-3000:])
        coord.kill(signal.SIGTERM)  # it leaves the group hps.distributed first
        coord.wait(30)
        restart_keeps_updates(t, cl, rc, mock)
        two_hosts_two_models(t, cl, rc)
        reload_chain(t, cl, rc)
        lagging_redis_rows(t, cl, rc)
    finally:
        mock.close()
        rc.stop()


def lagging_redis_rows(t, cl, rc):
    """Rows of a layer whose consumer is behind the volatile DB's are
    answered but not put into the volatile DB (cache_missed_embeddings),
    where they stayed after the update, for good (kr audit: 39 of 5000
    keys).  Redis refuses writes (maxmemory at its used memory): its
    consumer retries the update while the volatile and persistent ones
    apply it; keys looked up meanwhile answer the old row (Redis's, allowed
    while it lags); once Redis has the update too, every key answers it."""
    mock = K.Mock([K.TOPIC_A.replace("mA", "s")])
    ports = rc.alive_ports()
    try:
        model = cl.gen_model("s", rows=[1000], dims=[K.DIM], subdir="lag",
                             segment=cl.new_segment_name("lag"))
        conf = cl.write_config("lag.ini", model.ini_text, R.ddb_settings(rc) + [
            ("distributed_db", "initial_cache_rate", 1.0),
            ("volatile_db", "initial_cache_rate", 0.0),
            ("volatile_db", "cache_missed_embeddings", "true"),
            ("volatile_db", "num_partitions", 1), ("volatile_db", "overflow_margin", 100),
            ("worker", "miss_timeout_ms", 5000)] + kafka_settings(mock))
        coord = cl.start_coordinator(conf, log_name="lag.log")
        w = cl.start_worker(conf, instance=7)
        keys = model.file_keys[0]
        H.wait_until(lambda: "kafka distributed: assigned" in coord.log(), 30, 0.1)
        for p in ports:
            info = R.redis_cmd(p, "INFO", "memory").decode()
            used = re.search(r"^used_memory:(\d+)", info, re.M).group(1)
            R.redis_cmd(p, "CONFIG", "SET", "maxmemory-policy", "noeviction")
            R.redis_cmd(p, "CONFIG", "SET", "maxmemory", used)
        K.push(mock.bootstrap, "s", K.records(keys, 5))
        t.ok(K.wait_applied(coord, "volatile", len(keys), 60) and
             K.wait_applied(coord, "persistent", len(keys), 60),
             "lagging Redis: the volatile and persistent layers applied the update",
             coord.log()[-2000:])
        K.lookup(w, "s", keys)  # through Redis, which has not got it
        for p in ports:
            R.redis_cmd(p, "CONFIG", "SET", "maxmemory", "0")
        t.ok(K.wait_applied(coord, "distributed", len(keys), 60),
             "lagging Redis: it applied the update once it took writes again", coord.log()[-2000:])
        got = K.lookup(w, "s", keys)
        stale = sum(1 for k, v in zip(keys, got) if v != [H.f32(x) for x in K.new_vector(k, 5)])
        t.eq(stale, 0, "lagging Redis: then every key answers the update (none kept its old row "
             "in the volatile DB)")
        w.kill(signal.SIGTERM)
        coord.kill(signal.SIGTERM)
        coord.wait(30)
    finally:
        for p in ports:
            R.redis_cmd(p, "CONFIG", "SET", "maxmemory", "0")
        mock.close()


def redis_row(rc, model, k):
    """Key k's row of table sparse_embedding0 of model in Redis, as HGET in
    HugeCTR's layout answers it (the raw floats, or None)."""
    return R.redis_cmd(rc.alive_ports()[0], "HGET",
                       R.hname(model, "sparse_embedding0", R.part_of(k)), struct.pack("<q", k))


def packed(k, gen):
    """Generation gen's vector of key k as Redis stores it (raw float32)."""
    return struct.pack("<%df" % K.DIM, *K.new_vector(k, gen))


def kafka_settings(mock):
    return [("update_source", "type", "kafka_message_queue"),
            ("update_source", "brokers", mock.bootstrap),
            ("update_source", "poll_timeout_ms", "100"),
            ("update_source", "metadata_refresh_interval_ms", "500")]


def two_hosts_two_models(t, cl, rc):
    """See the file's comment.  A cluster of its own: the mock delays the
    first join after a member left a group by session.timeout.ms."""
    mock = K.Mock([K.TOPIC_A.replace("mA", name) for name in ("a", "b")])
    try:
        two_hosts(t, cl, rc, mock)
    finally:
        mock.close()


def two_hosts(t, cl, rc, mock):
    hosts = []
    for name in ("a", "b"):
        model = cl.gen_model(name, rows=[2000], dims=[K.DIM], subdir="host-" + name,
                             segment=cl.new_segment_name(name))
        conf = cl.write_config(name + ".ini", model.ini_text, R.ddb_settings(rc) + [
            ("distributed_db", "initial_cache_rate", 0.0)] + kafka_settings(mock))
        hosts.append((name, model, cl.start_coordinator(conf, log_name="host-%s.log" % name)))
    for name, model, _ in hosts:
        rc_push, out = K.push(mock.bootstrap, name, K.records(model.file_keys[0][:N_UPDATES], 3))
        t.ok(rc_push == 0, "two hosts: %d updates of %s pushed" % (N_UPDATES, name), out)

    def in_redis():
        return [sum(redis_row(rc, name, k) == packed(k, 3) for k in model.file_keys[0][:N_UPDATES])
                for name, model, _ in hosts]
    H.wait_until(lambda: in_redis() == [N_UPDATES] * 2, 90, 0.5)
    got = in_redis()
    t.eq(got, [N_UPDATES] * 2, "two hosts serving models a and b, one group hps.distributed: "
         "every update of each model in Redis (a, b)")
    skipped = [K.stats(p, "distributed").get("unknown_table", 0) for _, _, p in hosts]
    t.eq(skipped, [0, 0], "no host skipped another model's updates as unknown topics")
    for _, _, p in hosts:
        p.kill(signal.SIGTERM)
        p.wait(30)


def reload_chain(t, cl, rc):
    """Three SIGHUP reloads in a row (model a changes, model u does not),
    updates of u pushed right after each SIGHUP: when each reload
    publishes, Redis holds them, since the catch-up before the publish now
    waits for the shared group's new member too.  Before, it did not: the
    member of each image left the group before it had its partitions, and
    the group gave none to anyone for over a minute; the misses of keys
    outside shared memory read the old rows from Redis all that time."""
    mock = K.Mock([K.TOPIC_A.replace("mA", name) for name in ("a", "u")])
    try:
        u = cl.gen_model("u", rows=[2000], dims=[K.DIM], subdir="chain-u")
        seg = cl.new_segment_name("chain")
        settings = R.ddb_settings(rc) + [("volatile_db", "shared_memory_name", seg),
                                          ("persistent_db", "type", "disabled")] + \
            kafka_settings(mock)

        def write(v):
            a = cl.gen_model("a", rows=[500], dims=[4], subdir="chain-a%d" % v, version=v)
            text = a.ini_text + "\n" + u.ini_text[u.ini_text.index("[model.u]"):]
            return cl.write_config("chain.ini", text, settings)
        coord = cl.start_coordinator(write(1), log_name="chain.log")
        keys = u.file_keys[0][:100]
        late = []
        for v in (2, 3, 4):
            write(v)
            n = coord.log().count("published /dev/shm/hps.")
            coord.kill(signal.SIGHUP)
            K.push(mock.bootstrap, "u", K.records(keys, v))
            published = H.wait_until(lambda: coord.log().count("published /dev/shm/hps.") > n,
                                     90, 0.02)
            late.append(sum(redis_row(rc, "u", k) != packed(k, v) for k in keys)
                        if published else None)
        t.ok(late == [0, 0, 0], "three reloads in a row, 100 updates of an unchanged model "
             "pushed after each SIGHUP: Redis holds all of them when each reload publishes "
             "(rows still old at each publish: %s)" % late, coord.log()[-3000:])
        coord.kill(signal.SIGTERM)
        coord.wait(30)
    finally:
        mock.close()
    reload_no_topic(t, cl, rc)


def reload_no_topic(t, cl, rc):
    """A reload with no topic of a served model in the cluster (no update
    ever pushed): the group gives the distributed DB's member nothing, and
    the catch-up does not wait for it (it waited its whole 30 s)."""
    mock = K.Mock([K.TOPIC_A.replace("mA", "unrelated")])
    try:
        seg = cl.new_segment_name("nt")
        settings = R.ddb_settings(rc) + [("volatile_db", "shared_memory_name", seg),
                                          ("persistent_db", "type", "disabled")] + \
            kafka_settings(mock)
        m1, m2 = (cl.gen_model("nt", rows=[500], dims=[4], subdir="nt%d" % v, version=v,
                               segment=seg) for v in (1, 2))
        coord = cl.start_coordinator(cl.write_config("nt.ini", m1.ini_text, settings),
                                     log_name="nt.log")
        cl.write_config("nt.ini", m2.ini_text, settings)
        n = coord.log().count("published /dev/shm/hps.")
        t0 = time.monotonic()
        coord.kill(signal.SIGHUP)
        ok = H.wait_until(lambda: coord.log().count("published /dev/shm/hps.") > n, 60, 0.02)
        secs = time.monotonic() - t0
        t.ok(ok and secs < 10, "a reload with no topic of the served model yet: published in "
             "%.1f s (it waited 30 s for the distributed DB's member)" % secs, coord.log()[-2000:])
        coord.kill(signal.SIGTERM)
        coord.wait(30)
    finally:
        mock.close()


def restart_keeps_updates(t, cl, rc, mock):
    model = cl.gen_model("r", rows=[2000], dims=[K.DIM])
    conf = cl.write_config("r.ini", model.ini_text, R.ddb_settings(rc) + [
        ("volatile_db", "shared_memory_name", cl.new_segment_name("r")),
        ("persistent_db", "type", "disabled")] + kafka_settings(mock))
    keys = model.file_keys[0][:N_UPDATES]
    coord = cl.start_coordinator(conf, log_name="r1.log")
    K.push(mock.bootstrap, "r", K.records(keys, 1))

    def updated():
        return sum(redis_row(rc, "r", k) == packed(k, 1) for k in keys)
    t.ok(H.wait_until(lambda: updated() == N_UPDATES, 60, 0.2),
         "restart: %d updates of r applied to Redis" % N_UPDATES, "%d" % updated())
    coord.kill(signal.SIGTERM)
    coord.wait(30)
    coord = cl.start_coordinator(conf, log_name="r2.log")
    t.eq(updated(), N_UPDATES, "restart without a persistent DB: Redis keeps the %d updated rows "
         "(initial_cache_rate 1.0; before, the model files' rows replaced them)" % N_UPDATES)
    t.ok("1 of 1 tables kept as they were" in coord.log(), "the log says r's table was kept",
         coord.log()[-2000:])
    coord.kill(signal.SIGTERM)
    coord.wait(30)


if __name__ == "__main__":
    if not R.have_redis() or not K.MOCK:
        H.Tap.skip_all("redis-server, redis-cli or kafka-mock missing")
    H.run_main("kafka_redis", body)
