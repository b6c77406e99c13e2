#!/usr/bin/env python3
"""
int-redis_cluster: hps-coordinator + hps-worker over a real Redis Cluster
(six redis-server processes on loopback: three masters, three replicas,
requirepass), started and removed by this script.

Checks: initial_cache_rate of the rows land in Redis in HugeCTR's layout
(hps_et{hps_et.<model>.<table>/p<i>}v, raw key -> raw floats); lookups give
the generator's exact vectors (Redis half, RocksDB-only half, unknown keys);
RocksDB hits are inserted into Redis (cache_missed_embeddings); the
worker's /metrics shows the coordinator's Redis counters
(nv_hps_distributed_db_lookup_keys, _hit_keys, _insert_rows ...) with the
exact counts of those lookups and inserts; a master
killed while a client streams lookups costs zero failed or wrong answers,
and its promoted replica serves HMGETs once the cluster settles; each
overflow policy keeps every partition at or under overflow_margin; a wrong
password, an unreachable address and enable_tls give a clear start-up error;
a master killed while a reload writes a new version into Redis: the build
waits for the failover and publishes; a master stopped past failover_wait_ms
while a reload removes the old rows (no replica): the fallback serves on
instead of exiting, and a SIGHUP once the node answers loads the new version;
a stopped (hung) master costs each lookup at most [distributed_db]
lookup_timeout_ms, and rows fetched meanwhile from RocksDB still reach the
volatile DB (cache_missed_embeddings, now after the answer); rows that
Redis holds in another layout (fewer partitions, another dimension, 32-bit
keys) stop the start with exit 6 and a message, and values of the wrong
length met by lookups are misses that the coordinator logs.
Skips (TAP "1..0 # SKIP") without redis-server or redis-cli.
"""
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402

PASSWORD = "s3cret-pw"
NP = 8


def have_redis():
    """redis-server and redis-cli on PATH (the scripts that need them skip otherwise)."""
    return bool(shutil.which("redis-server") and shutil.which("redis-cli"))


# ---- a minimal RESP client (binary-safe, follows MOVED) ----------------------

def _enc(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def _read(f):
    line = f.readline()
    if not line:
        raise ConnectionError("closed")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        return RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)
        return data[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_read(f) for _ in range(n)]
    raise ValueError("bad RESP %r" % line)


def redis_cmd(port, *args, password=PASSWORD, hops=5):
    for _ in range(hops):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            f = s.makefile("rb")
            if password:
                s.sendall(_enc("AUTH", password))
                _read(f)
            s.sendall(_enc(*args))
            r = _read(f)
        if isinstance(r, RuntimeError) and str(r).startswith("MOVED"):
            port = int(str(r).split()[2].rsplit(":", 1)[1])
            continue
        return r
    raise RuntimeError("too many redirections")


def hname(model, table, p, kind="v"):
    return "hps_et{hps_et.%s.%s/p%d}%s" % (model, table, p, kind)


def part_of(key, np_=NP):
    return H.rrxmrrxmsx_0(key & ((1 << 64) - 1)) % np_


# ---- the cluster --------------------------------------------------------------

def free_port(taken=()):
    """A port p with p and p + 10000 (the cluster bus) free, not in taken (the
    ports already given to nodes that may not have bound them yet)."""
    while True:
        p = random.randint(20000, 45000)
        ok = p not in taken and p + 10000 not in taken and p - 10000 not in taken
        for q in (p, p + 10000):
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", q))
            except OSError:
                ok = False
            finally:
                s.close()
        if ok:
            return p


class RedisCluster:
    def __init__(self, tmp, n=6, replicas=1):
        self.tmp, self.procs, self.ports = tmp, {}, []
        for _ in range(n):
            port = free_port(self.ports)
            d = os.path.join(tmp, "redis-%d" % port)
            os.makedirs(d)
            log = open(os.path.join(d, "log"), "wb")
            self.procs[port] = subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                 "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                 "--cluster-node-timeout", "1000", "--save", "", "--appendonly", "no",
                 "--dir", d, "--requirepass", PASSWORD, "--masterauth", PASSWORD,
                 "--protected-mode", "no", "--repl-diskless-sync-delay", "0"], stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL)
            log.close()
            self.ports.append(port)
        for port in self.ports:
            H.wait_until(lambda p=port: self._ping(p), 10)
        r = subprocess.run(["redis-cli", "-a", PASSWORD, "--no-auth-warning", "--cluster",
                            "create"] + ["127.0.0.1:%d" % p for p in self.ports] +
                           ["--cluster-replicas", str(replicas), "--cluster-yes"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError("redis-cli --cluster create failed: %s%s" % (r.stdout, r.stderr))
        if not H.wait_until(lambda: self.settled() and self.replicas_synced(), 30, 0.1):
            raise RuntimeError("cluster_state never became ok (or replicas never synced)")

    def replicas_synced(self):
        """Every replica has finished its initial sync (else it cannot fail over)."""
        for p in self.alive_ports():
            info = redis_cmd(p, "INFO", "replication").decode()
            if "role:slave" in info and "master_link_status:up" not in info:
                return False
        return True

    def _ping(self, port):
        try:
            return redis_cmd(port, "PING") == "PONG"
        except OSError:
            return False

    def alive_ports(self):
        return [p for p, pr in self.procs.items() if pr.poll() is None]

    def settled(self):
        try:
            for p in self.alive_ports():
                info = redis_cmd(p, "CLUSTER", "INFO").decode()
                if "cluster_state:ok" not in info or "cluster_slots_ok:16384" not in info:
                    return False
            return True
        except (OSError, RuntimeError, ValueError):
            return False

    def owner(self, slot):
        """Port of the master that serves slot (as a live node sees it)."""
        for s in redis_cmd(self.alive_ports()[0], "CLUSTER", "SLOTS"):
            if s[0] <= slot <= s[1]:
                return s[2][1]
        return None

    def slot(self, key):
        return redis_cmd(self.alive_ports()[0], "CLUSTER", "KEYSLOT", key)

    def hmget_calls(self, port):
        info = redis_cmd(port, "INFO", "commandstats").decode()
        for line in info.splitlines():
            if line.startswith("cmdstat_hmget:"):
                return int(line.split("calls=")[1].split(",")[0])
        return 0

    def kill(self, port):
        self.procs[port].kill()
        self.procs[port].wait(10)

    def stop(self):
        for pr in self.procs.values():
            if pr.poll() is None:
                pr.kill()
            pr.wait(10)


def total_rows(rc, model, table, kind="v"):
    return sum(redis_cmd(rc.alive_ports()[0], "HLEN", hname(model, table, p, kind)) for p in range(NP))


def ddb_settings(rc, all_seeds=False, **kw):
    """all_seeds: every node, dead ones (a killed master) first."""
    seeds = sorted(rc.ports, key=lambda p: p in rc.alive_ports()) if all_seeds else \
        rc.alive_ports()[:1]
    s = [("distributed_db", "type", "redis_cluster"),
         ("distributed_db", "address", ",".join("127.0.0.1:%d" % p for p in seeds)),
         ("distributed_db", "password", PASSWORD),
         ("distributed_db", "num_partitions", NP)]
    return s + [("distributed_db", k, v) for k, v in kw.items()]


COMMON = [("volatile_db", "initial_cache_rate", 0.0),
          ("volatile_db", "shared_memory_auto_remove", "true"),
          ("hps", "heartbeat_interval_ms", 50),
          ("worker", "miss_timeout_ms", 3000),
          ("worker", "http_threads", 2)]


def lookups(t, cl, rc, model):
    conf = cl.write_config("hps.ini", model.ini_text, COMMON + ddb_settings(
        rc, initial_cache_rate=0.5, cache_missed_embeddings="true"))
    coord = cl.start_coordinator(conf)
    t.eq([total_rows(rc, "m", "sparse_embedding%d" % i) for i in range(2)], [10000, 2500],
         "initial_cache_rate 0.5 puts half of each table into Redis")
    k = model.file_keys[0][3]
    raw = redis_cmd(rc.ports[0], "HGET", hname("m", "sparse_embedding0", part_of(k)),
                    struct.pack("<q", k))
    t.eq(list(struct.unpack("<16f", raw)) if raw else None, H.gen_vector(0, k, 16),
         "HugeCTR layout: raw LE key field, raw float32 value, partition rrxmrrxmsx_0 %% 8")
    w = cl.start_worker(conf)
    rng = random.Random(7)
    pdb = [rng.sample(model.pdb_only_keys(i, 0.5), n) for i, n in ((0, 60), (1, 30))]
    kpt = [rng.sample(model.vdb_keys(0, 0.5), 80) + pdb[0] + model.unknown_keys(0, 5),
           rng.sample(model.vdb_keys(1, 0.5), 40) + pdb[1] + model.unknown_keys(1, 3)]
    for _ in range(2):
        got = H.decode_output(H.infer(w.http_port, "m", kpt, binary=True))[1]
        want = model.expected(kpt)
        t.ok(got == want, "exact vectors through Redis, RocksDB and defaults",
             H.first_mismatch(got, want, model, kpt))
    rows = lambda: [total_rows(rc, "m", "sparse_embedding%d" % i) for i in range(2)]  # noqa: E731
    H.wait_until(lambda: rows() == [10060, 2530], 10)  # inserted after the answers
    t.eq(rows(), [10060, 2530], "RocksDB hits were inserted into Redis (cache_missed_embeddings)")
    k = pdb[1][0]
    raw = redis_cmd(rc.ports[0], "HGET", hname("m", "sparse_embedding1", part_of(k)),
                    struct.pack("<q", k))
    t.eq(list(struct.unpack("<8f", raw)) if raw else None, H.gen_vector(1, k, 8),
         "a missed row is in Redis with its exact vector (HGET)")
    ddb_metrics(t, w, model, kpt, loaded=10000 + 2500, inserted=60 + 30)
    return coord, w


def ddb_counter(w, name):
    """nv_hps_distributed_db_<name> of the worker's /metrics (one sample
    without labels), None when the family is absent."""
    s = H.metric_samples(w.metrics_port, "nv_hps_distributed_db_" + name)
    return int(s[0][1]) if len(s) == 1 and s[0][0] == {} else None


def ddb_metrics(t, w, model, kpt, loaded, inserted):
    """The coordinator's Redis counters, published in the segment once a
    second, in the worker's /metrics: every key that missed the volatile DB
    (none is cached there: initial_cache_rate 0, no cache_missed_embeddings)
    was looked up in Redis, and once the RocksDB hits are in Redis (the
    caller waited for them) a lookup of kpt finds every known key there.
    They used to be nowhere: the worker's persistent_db_hit_keys counts
    Redis and RocksDB hits together."""
    c = H.hps_counters(w.metrics_port, "m")
    missed, asked = c["lookup_keys"] - c["volatile_db_hit_keys"], sum(map(len, kpt))
    H.wait_until(lambda: ddb_counter(w, "lookup_keys") == missed, 5)
    n0, h0 = ddb_counter(w, "lookup_keys"), ddb_counter(w, "hit_keys")
    t.ok(n0 == missed == 2 * asked,
         "nv_hps_distributed_db_lookup_keys %s: the %d keys of two lookups that missed the "
         "volatile DB" % (n0, missed))
    got = H.decode_output(H.infer(w.http_port, "m", kpt, binary=True))[1]
    H.wait_until(lambda: ddb_counter(w, "lookup_keys") == missed + asked, 5)
    n1, h1 = ddb_counter(w, "lookup_keys"), ddb_counter(w, "hit_keys")
    d = H.diff(H.hps_counters(w.metrics_port, "m"), c)
    files = [set(ks) for ks in model.file_keys]
    known = sum(k in files[i] for i, ks in enumerate(kpt) for k in ks)
    dn = None if n1 is None else n1 - missed
    dh = None if None in (h0, h1) else h1 - h0
    t.ok(got == model.expected(kpt) and dn == asked and dh == d["persistent_db_hit_keys"] == known,
         "a third lookup of %d keys: nv_hps_distributed_db_lookup_keys +%s, _hit_keys +%s (want "
         "%d, every known key: the RocksDB rows are in Redis now; the worker's "
         "persistent_db_hit_keys +%d)" % (asked, dn, dh, known, d["persistent_db_hit_keys"]))
    got = {n: ddb_counter(w, n) for n in ("insert_rows", "evicted_rows", "errors",
                                          "touches_dropped", "bad_values")}
    t.eq(got, {"insert_rows": loaded + inserted, "evicted_rows": 0, "errors": 0,
               "touches_dropped": 0, "bad_values": 0},
         "nv_hps_distributed_db_*: %d rows loaded + %d inserted after misses, no eviction, "
         "error or bad value" % (loaded, inserted))


def kill_master(t, cl, rc, model, w):
    keys = model.vdb_keys(0, 0.5)
    keys1 = model.vdb_keys(1, 0.5)[:3]
    victim_slot = rc.slot(hname("m", "sparse_embedding0", 0))
    victim = rc.owner(victim_slot)
    stats = {"req": 0, "bad": 0, "err": None}
    stop = threading.Event()

    def stream():
        rng = random.Random(11)
        while not stop.is_set():
            kpt = [rng.sample(keys, 64), keys1]
            try:
                got = H.decode_output(H.infer(w.http_port, "m", kpt, binary=True, timeout=10))[1]
                if got != model.expected(kpt):
                    stats["bad"] += 1
            except Exception as e:  # noqa: BLE001
                stats["bad"] += 1
                stats["err"] = repr(e)
            stats["req"] += 1

    th = threading.Thread(target=stream)
    th.start()
    time.sleep(1.0)
    rc.kill(victim)
    t0 = time.monotonic()
    settled = H.wait_until(lambda: rc.settled() and rc.owner(victim_slot) != victim, 30, 0.2)
    t.ok(settled, "the cluster promoted a replica of the killed master (%.1f s)" %
         (time.monotonic() - t0))
    time.sleep(1.5)
    stop.set()
    th.join(30)
    t.ok(stats["req"] > 20, "the client streamed %d requests across the failover" % stats["req"])
    t.eq(stats["bad"], 0, "zero failed or wrong lookups while a master died (%s)" % stats["err"])
    promoted = rc.owner(victim_slot)
    before = rc.hmget_calls(promoted)
    sub = [k for k in keys if part_of(k) == 0][:50]
    got = H.decode_output(H.infer(w.http_port, "m", [sub, keys1], binary=True))[1]
    t.ok(got == model.expected([sub, keys1]), "exact vectors after the failover")
    t.ok(rc.hmget_calls(promoted) > before,
         "the promoted replica (port %s) serves the partition's HMGETs" % promoted)


def reload_master_kill(t, cl, rc):
    """A master SIGKILLed while a reload writes a new version into Redis (no
    persistent DB): the build waits for its replica's promotion ([distributed_db]
    failover_wait_ms) and publishes; the coordinator keeps running and the
    new version serves exactly.  Before, the reload failed, its fallback
    failed the same way and the coordinator exited: every key outside shared
    memory got its default until someone started it again."""
    seg = cl.new_segment_name("rk")
    b1, b2 = (cl.gen_model("b", rows=[60000], dims=[8], defaults=[0.25], subdir="rk%d" % v,
                           version=v, segment=seg) for v in (1, 2))
    settings = COMMON + [("persistent_db", "type", "disabled")] + ddb_settings(
        rc, all_seeds=True, initial_cache_rate=1.0, cache_missed_embeddings="false",
        lookup_timeout_ms=1000)
    conf = cl.write_config("rk.ini", b1.ini_text, settings)
    coord, w = cl.start_coordinator(conf), cl.start_worker(conf)
    owners = {rc.owner(rc.slot(hname("b", "sparse_embedding0", p))) for p in range(NP)}
    victim = next((p for p in sorted(owners) if "connected_slaves:1" in
                   redis_cmd(p, "INFO", "replication").decode()), None)
    if not t.ok(victim is not None, "a master with a replica holds a partition of b"):
        return
    cl.write_config("rk.ini", b2.ini_text, settings)
    n0, n_ready = len(coord.log()), coord.log().count("serving misses")
    coord.kill(signal.SIGHUP)
    H.wait_until(lambda: "removing them before loading" in coord.log()[n0:], 30, 0.002)
    rc.kill(victim)
    published = H.wait_until(lambda: coord.log().count("serving misses") > n_ready, 60, 0.05)
    log = coord.log()[n0:]
    t.ok(published and coord.alive() and "waiting up to" in log,
         "a master (port %s) killed while a reload fills Redis: the build waits for the "
         "failover (logged) and publishes; the coordinator runs" % victim, log[-2500:])
    keys = b1.file_keys[0][:300]
    t.ok(H.wait_until(lambda: H.decode_output(H.infer(w.http_port, "b", [keys], binary=True))[1]
                      == b2.expected([keys]), 10),
         "after it: version 2 serves exactly, from Redis's promoted replica too")
    for p in (w, coord):
        p.kill(signal.SIGTERM)
        p.wait(30)


def reload_cluster_down(t, cl, model_name="d"):
    """Three masters, no replica; a master stopped (SIGSTOP) while a reload
    removes the old version's rows from Redis (no persistent DB): the build
    waits failover_wait_ms and fails, and its fallback cannot restore the
    rows either.  The fallback serves on, version 1 exactly from shared
    memory, instead of stopping (before, the coordinator exited: the
    workers' misses then went unanswered, and a supervisor's restart would
    stop the same way while the cluster was down).  Once the node answers
    again a SIGHUP loads version 2, Redis included."""
    rc = RedisCluster(os.path.join(cl.tmp, "cd"), n=3, replicas=0)
    victim = None
    try:
        seg = cl.new_segment_name("cd")
        d1, d2 = (cl.gen_model(model_name, rows=[20000], dims=[8], defaults=[0.25],
                               subdir="cd%d" % v, version=v, segment=seg) for v in (1, 2))
        settings = [x for x in COMMON if x[1] != "initial_cache_rate"] + [
            ("volatile_db", "initial_cache_rate", 1.0), ("persistent_db", "type", "disabled")] + \
            ddb_settings(rc, initial_cache_rate=1.0, cache_missed_embeddings="false",
                         lookup_timeout_ms=200, failover_wait_ms=1500)
        conf = cl.write_config("cd.ini", d1.ini_text, settings)
        coord, w = cl.start_coordinator(conf), cl.start_worker(conf)
        keys = d1.file_keys[0][:500]

        def answer():
            hdr, got = H.decode_output(H.infer(w.http_port, model_name, [keys], binary=True))
            return hdr.get("model_version"), got

        t.eq(answer(), ("1", d1.expected([keys])), "version 1 serves exactly")
        victim = rc.owner(rc.slot(hname(model_name, "sparse_embedding0", 0)))
        cl.write_config("cd.ini", d2.ini_text, settings)
        n0 = len(coord.log())
        coord.kill(signal.SIGHUP)
        H.wait_until(lambda: "removing them before loading" in coord.log()[n0:], 30, 0.002)
        rc.procs[victim].send_signal(signal.SIGSTOP)
        H.wait_until(lambda: "the fallback could not restore" in coord.log()[n0:] or
                     not coord.alive(), 90, 0.1)
        time.sleep(1.5)
        log = coord.log()[n0:]
        t.ok(coord.alive() and "the fallback could not restore" in log and
             "ready: 1 model" in log.split("reload failed")[-1],
             "a master stopped during a reload: the reload fails, its fallback cannot restore "
             "Redis and serves on (logged) instead of exiting", log[-3000:])
        t.eq(answer(), ("1", d1.expected([keys])),
             "meanwhile version 1 serves exactly, from shared memory")
        rc.procs[victim].send_signal(signal.SIGCONT)
        victim = None
        t.ok(H.wait_until(rc.settled, 30, 0.1), "the cluster settles once the node answers")
        n1, ready = len(coord.log()), coord.log().count("serving misses")
        coord.kill(signal.SIGHUP)
        t.ok(H.wait_until(lambda: coord.log().count("serving misses") > ready, 60, 0.05),
             "a SIGHUP then loads version 2", coord.log()[n1:][-2500:])
        t.ok(H.wait_until(lambda: answer() == ("2", d2.expected([keys])), 10),
             "and version 2 serves exactly")
        t.ok(total_rows(rc, model_name, "sparse_embedding0") == 20000,
             "with all its rows in Redis again (%d)" % total_rows(rc, model_name,
                                                                   "sparse_embedding0"))
        for p in (w, coord):
            p.kill(signal.SIGTERM)
            p.wait(30)
    finally:
        if victim is not None:
            rc.procs[victim].send_signal(signal.SIGCONT)
        rc.stop()


def overflow(t, cl, rc):
    margin = 150
    for pol in ("evict_random", "evict_least_used", "evict_oldest"):
        name = "o" + pol.split("_")[1][:3]
        seg = cl.new_segment_name(name)
        m = cl.gen_model(name, rows=[4000], dims=[4], segment=seg)
        conf = cl.write_config(name + ".ini", m.ini_text, COMMON + ddb_settings(
            rc, all_seeds=True, initial_cache_rate=1.0, overflow_margin=margin, overflow_policy=pol,
            overflow_resolution_target=0.5, max_batch_size=100))
        p = cl.start_coordinator(conf)
        p.kill(signal.SIGTERM)
        p.wait(30)
        hl = [redis_cmd(rc.alive_ports()[0], "HLEN", hname(name, "sparse_embedding0", i))
              for i in range(NP)]
        t.ok(all(0 < h <= margin for h in hl), "%s: every partition at or under %d rows %s" %
             (pol, margin, hl))
        tl = [redis_cmd(rc.alive_ports()[0], "HLEN", hname(name, "sparse_embedding0", i, "t"))
              for i in range(NP)]
        if pol == "evict_random":
            t.eq(sum(tl), 0, "evict_random writes no metadata")
            continue
        t.ok(all(x <= margin for x in tl), "%s: metadata hashes bounded too %s" % (pol, tl))
        meta = redis_cmd(rc.alive_ports()[0], "HGETALL", hname(name, "sparse_embedding0", 0, "t"))
        vals = meta[1::2]
        if pol == "evict_least_used":
            t.ok(vals and all(v.isdigit() for v in vals), "LFU metadata: decimal counters")
        else:
            now = time.time()
            t.ok(vals and all(len(v) == 8 and abs(struct.unpack("<q", v)[0] - now) < 600
                              for v in vals), "LRU metadata: raw 8-byte time_t")


def startup_errors(t, cl, rc, model):
    cases = [("wrong password", [("distributed_db", "password", "wrong")], "AUTH"),
             ("unreachable address", [("distributed_db", "address",
                                       "127.0.0.1:%d" % free_port())], "refused"),
             ("enable_tls", [("distributed_db", "enable_tls", "true")], "TLS")]
    for what, extra, needle in cases:
        conf = cl.write_config("bad.ini", model.ini_text, COMMON + ddb_settings(rc) + extra)
        st, out = cl.run_coordinator(conf, timeout=60)
        t.ok(st != 0 and needle in out and "distributed_db" in out,
             "%s: coordinator exits %d with a clear message" % (what, st), out[-600:])
    # The tables were written with NP partitions: fewer would miss the rows of
    # the others (HugeCTR's silent default values), so the start is refused.
    conf = cl.write_config("bad.ini", model.ini_text, COMMON + ddb_settings(rc) + [
        ("distributed_db", "num_partitions", NP // 2), ("distributed_db", "num_node_connections", 1)])
    st, out = cl.run_coordinator(conf, timeout=60)
    want = "/p%d}v, partition %d of the table, but [distributed_db] num_partitions = %d" % (
        NP - 1, NP - 1, NP // 2)
    t.ok(st == H.EXIT_DDB and want in out, "num_partitions %d for tables written with %d: "
         "coordinator exits 6 naming the highest partition found" % (NP // 2, NP), out[-600:])


def hugectr_write(rc, model, table, keys, dim, np_=NP, key_bytes=8, pre_v42=False):
    """Write keys with their generator vectors (table 0's) as HugeCTR's
    RedisClusterBackend did with num_partitions np_: per partition one HSET
    of raw LE keys (key_bytes wide) to raw float32 vectors of dim floats.
    pre_v42: under its hash names before v4.2, "hps_et.<model>.<table>/p<i>/v"."""
    by = {}
    for k in keys:
        by.setdefault(part_of(k, np_), []).append(k)
    for p, ks in sorted(by.items()):
        args = []
        for k in ks:
            args += [struct.pack("<I", k & 0xFFFFFFFF) if key_bytes == 4 else struct.pack("<q", k),
                     struct.pack("<%df" % dim, *H.gen_vector(0, k, dim))]
        name = ("hps_et.%s.%s/p%d/v" % (model, table, p)) if pre_v42 else hname(model, table, p)
        r = redis_cmd(rc.alive_ports()[0], "HSET", name, *args)
        if isinstance(r, Exception):
            raise r


def start_status(cl, conf, timeout=60):
    """(exit status, log) of a coordinator that stops during start-up, or
    (None, log) of one that got to serve (then stopped here)."""
    p = cl.start_coordinator(conf, wait_ready=False)
    H.wait_until(lambda: not p.alive() or "serving misses" in p.log(), timeout)
    if p.alive():
        p.kill(signal.SIGTERM)
        p.wait(30)
        return None, p.log()
    return p.p.returncode, p.log()


def foreign_rows(t, cl, rc):
    """Rows that Redis holds in another layout than the INI's: written (as
    HugeCTR did) with fewer partitions (HugeCTR's default was min(16, CPU
    cores): 4 on a 4-core host), another dimension or 32-bit keys.  They used
    to be lookup misses without a word (the probe for extra partitions only
    sees more partitions); the coordinator now samples each partition hash at
    start and exits 6 naming the hash, what it holds, what the INI says and
    what to do.  The same rows in the INI's layout are served.  A value of
    the wrong length written after the start is a miss (RocksDB answers) and
    is logged, once per table per interval.  Rows under HugeCTR's hash names
    before v4.2 are read by nothing (as in HugeCTR since v4.2): the
    coordinator serves, and warns once per table with the count of such
    hashes (it used to ignore them without a word)."""
    cases = [("fewer partitions (4)", dict(np_=4),
              ["but its key", "under [distributed_db] num_partitions = %d" % NP,
               "set num_partitions = 4 (the sample fits"]),
             ("another dimension (16)", dict(dim=16),
              ["with vectors of 64 bytes", "embedding_vecsize_per_table gives the table 8 floats",
               "embedding_vecsize_per_table to 16"]),
             ("32-bit keys", dict(key_bytes=4),
              ["with keys of 4 bytes", "keys are 8 bytes", "set supportlonglong = false"]),
             ("the INI's layout", {}, None),
             ("HugeCTR's names before v4.2", dict(pre_v42=True), None)]
    for i, (what, kw, needles) in enumerate(cases):
        name = "fr%d" % i
        m = cl.gen_model(name, rows=[1500], dims=[8], segment=cl.new_segment_name(name))
        hugectr_write(rc, name, "sparse_embedding0", m.file_keys[0], kw.get("dim", 8),
                      kw.get("np_", NP), kw.get("key_bytes", 8), kw.get("pre_v42", False))
        conf = cl.write_config(name + ".ini", m.ini_text,
                               COMMON + ddb_settings(rc, initial_cache_rate=0.0))
        st, log = start_status(cl, conf)
        legacy = [ln for ln in log.splitlines() if "layout before v4.2" in ln]
        if needles is None:
            t.ok(st is None, "rows written by HugeCTR in %s: the coordinator serves" % what,
                 log[-1500:])
            want = ["model %s table sparse_embedding0: Redis holds %d hashes" % (name, NP),
                    "hps_et.%s.sparse_embedding0/p<i>/v" % name] if kw else []
            t.ok(len(legacy) == (1 if kw else 0) and
                 all(" WARN " in ln and all(w in ln for w in want) for ln in legacy),
                 "%s: %d warnings of rows in the pre-v4.2 layout (want %d)"
                 % (what, len(legacy), 1 if kw else 0), log[-1500:])
            continue
        err = [ln for ln in log.splitlines() if " ERROR " in ln]
        t.ok(st == H.EXIT_DDB and err and "hps_et{hps_et.%s.sparse_embedding0/p" % name in err[0]
             and all(n in err[0] for n in needles) and "delete the table's hashes" in err[0],
             "rows in Redis written with %s: the coordinator exits 6 (got %s) naming the hash, "
             "what it holds and the fix" % (what, st), log[-1500:])
    # values of the wrong length met by lookups: misses, logged once per table
    name = "bv"
    m = cl.gen_model(name, rows=[500], dims=[8], segment=cl.new_segment_name(name))
    conf = cl.write_config(name + ".ini", m.ini_text,
                           COMMON + ddb_settings(rc, initial_cache_rate=0.0))
    coord = cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    keys = m.file_keys[0][:40]
    hugectr_write(rc, name, "sparse_embedding0", keys, 16)  # after the start-up check
    ok = True
    for batch in (keys[:20], keys[20:]):  # volatile-DB misses both times: Redis is asked
        got = H.decode_output(H.infer(w.http_port, name, [batch], binary=True))[1]
        ok = ok and got == m.expected([batch])
    t.ok(ok, "values of 16 floats in Redis for a table of 8: misses, answered by RocksDB")
    H.wait_until(lambda: "values of 64 bytes" in coord.log(), 5)
    warns = [ln for ln in coord.log().splitlines() if "values of 64 bytes" in ln]
    t.ok(len(warns) == 1 and " WARN " in warns[0] and "model bv table sparse_embedding0" in warns[0]
         and "8 floats (32 bytes)" in warns[0],
         "they are logged: one warning naming the table for two lookups (%d)" % len(warns),
         coord.log()[-1500:])
    w.kill(signal.SIGTERM)
    coord.kill(signal.SIGTERM)
    coord.wait(30)


def dead_master_no_replica(t, cl, model, how):
    """Three masters, no replica, one killed (how = "kill") or stopped
    ("stop", SIGSTOP: it accepts connections and answers nothing).  With the
    default miss_timeout_ms (50) lookups are still exact, from RocksDB.  The
    client used to back off 10 + 20 + 40 + 80 ms inside each lookup of a
    cluster that is down, and to wait its whole 1 s deadline on a stopped
    node in every call, so the worker's miss timeout answered defaults.
    With the master dead, the coordinator's warnings name both tables (one
    timestamp for all tables named only the first to fail)."""
    rc = RedisCluster(os.path.join(cl.tmp, "nr-" + how), n=3, replicas=0)
    try:
        conf = cl.write_config("nr.ini", model.ini_text, COMMON + [
            ("worker", "miss_timeout_ms", 50)] + ddb_settings(rc, initial_cache_rate=1.0))
        coord = cl.start_coordinator(conf)
        w = cl.start_worker(conf)
        kpt = [model.file_keys[0][:100], model.file_keys[1][:20]]
        want = model.expected(kpt)
        got = H.decode_output(H.infer(w.http_port, "m", kpt, binary=True))[1]
        t.ok(got == want, "exact vectors from Redis before the kill")
        victim = rc.owner(rc.slot(hname("m", "sparse_embedding0", 0)))
        if how == "kill":
            rc.kill(victim)
            t.ok(H.wait_until(lambda: not rc.settled(), 20, 0.1), "the cluster reports a failure")
            time.sleep(0.5)
        else:
            rc.procs[victim].send_signal(signal.SIGSTOP)
            # the call that finds it stopped waits lookup_timeout_ms (20 ms);
            # hung_master_deadline() times it
            H.infer(w.http_port, "m", kpt, binary=True)
            time.sleep(0.2)
            H.infer(w.http_port, "m", kpt, binary=True)
        bad = []
        for _ in range(5):
            r = H.infer(w.http_port, "m", kpt, binary=True)
            if H.decode_output(r)[1] != want:
                bad.append(round(r.elapsed, 3))
        t.ok(not bad, "with a master %s and no replica, 5 of 5 lookups exact from RocksDB "
             "(miss timeout 50 ms; wrong ones took %s s)" % (
                 "dead" if how == "kill" else "stopped", bad), coord.log()[-2000:])
        if how == "kill":  # both tables have hashes on the dead master: both fail
            named = [tb for tb in ("sparse_embedding0", "sparse_embedding1")
                     if "table %s: distributed DB lookup" % tb in coord.log()]
            t.eq(named, ["sparse_embedding0", "sparse_embedding1"],
                 "the coordinator's Redis failure warnings name each failing table (rate-limited "
                 "per table, not one timestamp for all)")
        if how == "stop":
            rc.procs[victim].send_signal(signal.SIGCONT)
        w.kill(signal.SIGTERM)
        coord.kill(signal.SIGTERM)
        coord.wait(30)
    finally:
        rc.stop()


def hung_master_deadline(t, cl, model):
    """A master stopped (SIGSTOP: it accepts connections and answers
    nothing), three masters, no replica, [distributed_db] lookup_timeout_ms
    = 50 and a worker that waits up to 3 s for its misses.  The first lookup
    after the stop, and every one in the next 2.5 s (the node skipped, then
    probed at the end of each back-off period, then the cluster down), gives
    exact vectors (RocksDB for the node's keys) within the deadline plus a
    margin: with the fixed 1 s deadline each of them took a second.  Both
    cache_missed_embeddings are on and run after the answers: the Redis
    inserts to the stopped node wait (1 s) on their own thread, and the rows
    fetched from RocksDB meanwhile are volatile-DB hits on the next lookup."""
    rc = RedisCluster(os.path.join(cl.tmp, "hang"), n=3, replicas=0)
    bound = 0.5  # s: 50 ms deadline + RocksDB + HTTP on a busy test machine
    try:
        conf = cl.write_config("hang.ini", model.ini_text, COMMON + [
            ("volatile_db", "cache_missed_embeddings", "true")] + ddb_settings(
            rc, initial_cache_rate=1.0, lookup_timeout_ms=50, cache_missed_embeddings="true"))
        coord = cl.start_coordinator(conf)
        w = cl.start_worker(conf)
        victim = rc.owner(rc.slot(hname("m", "sparse_embedding0", 0)))
        on_victim = [{p for p in range(NP)
                      if rc.owner(rc.slot(hname("m", "sparse_embedding%d" % i, p))) == victim}
                     for i in range(2)]
        rng = random.Random(5)
        pools = [rng.sample(model.file_keys[i], len(model.file_keys[i])) for i in range(2)]
        batches = ([pools[0][n * 8:n * 8 + 8], pools[1][n * 2:n * 2 + 2]]
                   for n in range(len(pools[1]) // 2))  # keys asked once: VDB misses
        kpt = next(batches)
        t.ok(H.decode_output(H.infer(w.http_port, "m", kpt, binary=True))[1] ==
             model.expected(kpt), "exact vectors from Redis before the stop")
        first_kpt = next(k for k in batches if any(part_of(x) in on_victim[0] for x in k[0]))
        from_pdb = [[k for k in first_kpt[i] if part_of(k) in on_victim[i]] for i in range(2)]
        rc.procs[victim].send_signal(signal.SIGSTOP)
        try:
            first = H.infer(w.http_port, "m", first_kpt, binary=True)
            first_ok = H.decode_output(first)[1] == model.expected(first_kpt)
            worst, bad, n, t0 = 0.0, 0, 0, time.monotonic()
            for kpt in batches:
                if time.monotonic() - t0 >= 2.5:
                    break
                r = H.infer(w.http_port, "m", kpt, binary=True)
                worst = max(worst, r.elapsed)
                bad += H.decode_output(r)[1] != model.expected(kpt)
                n += 1
                for i in range(2 if n <= 20 else 0):
                    from_pdb[i] += [k for k in kpt[i] if part_of(k) in on_victim[i]]
        finally:
            rc.procs[victim].send_signal(signal.SIGCONT)
        t.ok(first_ok and first.elapsed < bound,
             "the first lookup after a master stopped: exact, in %.3f s (lookup_timeout_ms 50; "
             "the fixed 1 s deadline took >= 1 s)" % first.elapsed, coord.log()[-2000:])
        t.ok(bad == 0 and worst < bound,
             "%d lookups in the 2.5 s after: %d wrong, the slowest %.3f s (back-off probes "
             "included)" % (n, bad, worst))
        time.sleep(0.2)
        c0 = H.hps_counters(w.metrics_port, "m")
        got = H.decode_output(H.infer(w.http_port, "m", from_pdb, binary=True))[1]
        d = H.diff(H.hps_counters(w.metrics_port, "m"), c0)
        t.ok(got == model.expected(from_pdb) and
             d["volatile_db_hit_keys"] == sum(map(len, from_pdb)) > 0,
             "cache_missed_embeddings: %d keys fetched from RocksDB during the stop are now "
             "volatile-DB hits (%s)" % (sum(map(len, from_pdb)), d))
        w.kill(signal.SIGTERM)
        coord.kill(signal.SIGTERM)
        coord.wait(30)
    finally:
        rc.stop()


def body(t, cl):
    rc = RedisCluster(cl.tmp)
    try:
        model = cl.gen_model("m", rows=[20000, 5000], dims=[16, 8], defaults=[0.5, -2.0])
        coord, w = lookups(t, cl, rc, model)
        kill_master(t, cl, rc, model, w)
        w.kill(signal.SIGTERM)
        coord.kill(signal.SIGTERM)
        coord.wait(30)
        reload_master_kill(t, cl, rc)
        startup_errors(t, cl, rc, model)
        foreign_rows(t, cl, rc)
        overflow(t, cl, rc)
    finally:
        rc.stop()
    reload_cluster_down(t, cl)
    dead_master_no_replica(t, cl, model, "kill")
    dead_master_no_replica(t, cl, model, "stop")
    hung_master_deadline(t, cl, model)


if __name__ == "__main__":
    if not have_redis():
        H.Tap.skip_all("redis-server or redis-cli not installed")
    H.run_main("redis_cluster", body)
