#!/usr/bin/env python3
"""
chaos.py -- a chaos test of real processes (TAP).

One hps-coordinator (RocksDB persistent DB, a shared-memory volatile DB
and, where redis-server and redis-cli are installed, a Redis Cluster of
three masters with one replica each as distributed DB) and two hps-workers.
Client threads stream lookups (JSON and binary, a few tables, keys in the
volatile DB, keys only in RocksDB, unknown keys) to both workers and check
every answer exactly: each row must be the generator's vector
(include/hps/gen.h) or the table's default value, and a known key may get
the default only while its layer is unreachable: the coordinator killed,
restarting or stopped, or a Redis master down.  Defaults are counted by the
cause that was in effect while the request ran (plus LAG_S for the worker to
notice a recovery, or until its first round after its own SIGCONT); a
default answered at once with no such cause is a wrong answer.  One that
came after the worker waited miss_timeout_ms for a serving coordinator
(the documented deadline) is counted apart, at most 0.5% of requests.

Meanwhile three chaos threads (seeded RNGs; the seed is printed):
  coordinator: SIGKILL at a random moment and restart it, alternating
               initialize_after_startup = true / false (now and then killed
               again during its start-up); SIGSTOP for 0.2-2 s, SIGCONT;
  workers:     SIGKILL one and restart it on a new port (the clients pick it
               up); SIGSTOP one for 0.2-2 s, SIGCONT;
  redis:       SIGKILL a master that has a synced replica, wait for the
               failover, restart the node (it rejoins as a replica).
A request to a worker that is neither stopped nor dead must complete within
1 s; connection errors to a killed worker are expected and counted.

At the end: 0 wrong answers, 0 requests over 1 s on a live worker (one
neither SIGSTOPped nor killed while the request ran), 0 unexpected errors,
`hps-shm check` clean (also after every restart of the coordinator), the
segment's process table holds exactly the live processes;
diag lines give requests, exact answers, defaults by cause, connection
errors, kills of each kind and p50/p99/max latency.

    HPS_COORDINATOR=... HPS_WORKER=... HPS_GEN=... HPS_SHM=... \\
        tests/chaos/chaos.py [--rounds N] [--seed S] [--redis-kills K] [--no-redis]

--rounds N (or HPS_CHAOS_ROUNDS): kills of each kind (coordinator, worker)
and as many SIGSTOPs of each; Redis master kills: max(2, N // 5).  Default 5.
Registered as int-chaos in the integration suite (tests/chaos/meson.build).
"""
import argparse
import http.client
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import hpstest as H  # noqa: E402
import test_redis_cluster as R  # noqa: E402  (RedisCluster, redis_cmd, PASSWORD)

ROWS = [40000, 10000, 4000]
DIMS = [8, 4, 16]
DEFAULTS = [0.5, -2.0, 1.25]
RATE = 0.5
HEARTBEAT_MS = 50
WORKER_TIMEOUT_MS = 500
MISS_TIMEOUT_MS = int(os.environ.get("HPS_CHAOS_MISS_TIMEOUT_MS", "50"))
LIVE_BOUND_S = 1.0     # a request to a live worker completes within this
CLIENT_TIMEOUT_S = 10.0
LAG_S = 0.25           # a worker notices a recovered coordinator within this
                       # (one maintenance round, 50 ms, plus scheduling slack)
STOP_RANGE = (0.2, 2.0)
CLIENTS_PER_WORKER = 2

COORD_DOWN, COORD_STOPPED, REDIS_DOWN = "coordinator down", "coordinator stopped", \
    "redis master down"
# The coordinator came back while this worker was SIGSTOPped: the worker sees
# it at its first round after SIGCONT (+ LAG_S), not at the recovery.
SEEN_LATE = "coordinator down or stopped, seen after the worker's own SIGSTOP"
# Nothing down, but the worker waited miss_timeout_ms for a serving
# coordinator in vain: the documented deadline, counted apart (and bounded).
DEADLINE = "nothing down, miss_timeout_ms passed at a serving coordinator"
DEADLINE_MAX_SHARE = 0.005
CAUSES = (COORD_DOWN, COORD_STOPPED, REDIS_DOWN)
REPORTED = CAUSES + (SEEN_LATE, DEADLINE)


def now():
    return time.monotonic()


def utc(wall):
    """Wall-clock time as the processes' logs print it."""
    return time.strftime("%H:%M:%S", time.gmtime(wall)) + ".%03d" % (wall % 1 * 1000)


# --------------------------------------------------------------------------
# What was down when: intervals per cause, and an event log
# --------------------------------------------------------------------------

class Timeline:
    def __init__(self, t0, out):
        self.t0 = t0
        self.out = out
        self.lock = threading.Lock()
        self.iv = {}          # cause -> list of [start, end or None]
        self.events = []      # (t, text)

    def event(self, text):
        t = now()
        with self.lock:
            self.events.append((t, text))
        self.out("t=%7.2f %s" % (t - self.t0, text))

    def open(self, cause, t=None):
        iv = [now() if t is None else t, None]
        with self.lock:
            self.iv.setdefault(cause, []).append(iv)
        return iv

    def close(self, iv, t=None):
        with self.lock:
            iv[1] = now() if t is None else t

    def overlaps(self, cause, t0, t1, lag=0.0):
        """Some interval of cause meets [t0, t1], its end extended by lag."""
        with self.lock:
            for s, e in self.iv.get(cause, ()):
                if s <= t1 and (e is None or e + lag >= t0):
                    return True
        return False

    def overlaps_seen(self, cause, t0, t1, lag, stopped_cause):
        """As overlaps(), but an interval that ended while the worker was
        stopped (stopped_cause) ends, for that worker, at its SIGCONT."""
        with self.lock:
            stops = list(self.iv.get(stopped_cause, ()))
            ivs = list(self.iv.get(cause, ()))
        for s, e in ivs:
            if e is None:
                continue
            for ss, se in stops:
                if ss <= e and (se is None or e <= se):
                    e2 = t1 if se is None else se
                    if s <= t1 and e2 + lag >= t0:
                        return True
        return False

    def since_end(self, cause, t):
        """Seconds from the end of the latest closed interval of cause
        before t to t (None if none)."""
        with self.lock:
            ends = [e for s, e in self.iv.get(cause, ()) if e is not None and e <= t]
        return t - max(ends) if ends else None

    def near(self, t, span=1.5):
        with self.lock:
            return ["t=%7.2f %s" % (et - self.t0, tx) for et, tx in self.events
                    if abs(et - t) <= span]


# --------------------------------------------------------------------------
# Shared state of the run
# --------------------------------------------------------------------------

class Slot:
    """One worker position: its current process and port."""

    def __init__(self, idx, proc):
        self.idx = idx
        self.proc = proc
        self.port = proc.http_port
        self.gen = 0


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = 0
        self.exact = 0
        self.with_defaults = {c: 0 for c in REPORTED}  # requests, by the first cause
        self.default_keys = {c: 0 for c in REPORTED}   # known keys that got the default
        self.unknown_default_keys = 0
        self.conn_errors = 0
        self.stopped_requests = 0       # overlapped a SIGSTOP of their worker
        self.wrong = []                 # dicts
        self.slow = []                  # dicts
        self.errors = []                # unexpected errors (dicts)
        self.lat_all = []
        self.lat_live = []
        self.binary = 0
        self.max_default_lag = {c: 0.0 for c in REPORTED}
        self.lagged = []                # (s after the cause ended, request)
        self.waited = {c: 0 for c in REPORTED}  # of with_defaults: waited >= miss_timeout_ms
        self.deadline = []              # requests of cause DEADLINE
        self.slowest_live = (0.0, None)
        self.redis_examples = []
        self.max_live = {}

    def add(self, **kw):
        with self.lock:
            for k, v in kw.items():
                setattr(self, k, getattr(self, k) + v)


class Ctx:
    def __init__(self, t, cl, model, confs, rng_seed, rounds, redis):
        self.t, self.cl, self.model = t, cl, model
        self.confs = confs
        self.rounds = rounds
        self.redis = redis
        self.print_lock = threading.Lock()
        self.t0 = now()
        self.tl = Timeline(self.t0, self.diag)
        self.stats = Stats()
        self.stop_clients = threading.Event()
        self.seed = rng_seed
        self.coord = None
        self.coord_lock = threading.Lock()
        self.slots = []
        self.worker_down = []       # per slot: Timeline cause names
        self.worker_stopped = []
        self.kills = {"coordinator": 0, "coordinator during start-up": 0, "worker": 0,
                      "redis master": 0}
        self.stops = {"coordinator": 0, "worker": 0}
        self.coord_start_failures = []
        self.checks = []            # (when, rc, output) of hps-shm check
        self.failures = []          # chaos-thread failures (strings)
        self.metrics_sum = {"miss_queue_timeouts": 0, "miss_queue_busy": 0,
                            "default_value_keys": 0, "lookup_keys": 0}
        self.restarts = 0
        self.vec_cache = [dict() for _ in ROWS]
        self.known = model.key_sets()
        self.def_rows = [[H.f32(d)] * dim for d, dim in zip(DEFAULTS, DIMS)]

    def diag(self, text):
        with self.print_lock:
            self.t.diag(text)

    def want(self, t, k):
        v = self.vec_cache[t].get(k)
        if v is None:
            v = self.vec_cache[t][k] = H.gen_vector(t, k, DIMS[t])
        return v

    def fail(self, text):
        self.failures.append(text)
        self.tl.event("FAILURE: " + text)


# --------------------------------------------------------------------------
# Clients
# --------------------------------------------------------------------------

class Client(threading.Thread):
    def __init__(self, ctx, slot, seed):
        super().__init__(daemon=True)
        self.ctx, self.slot = ctx, slot
        self.rng = random.Random(seed)
        self.n = 0

    def request(self):
        m, rng = self.ctx.model, self.rng
        kpt = []
        for t, n in enumerate((8, 4, 4)):
            ks = rng.sample(m.file_keys[t], n)
            r = rng.randrange(1 << 20)
            ks.append(H.gen_key(t, ROWS[t] + r) if r % 5 else -1 - r)  # unknown key
            rng.shuffle(ks)
            kpt.append(ks)
        return kpt

    def run(self):
        ctx = self.ctx
        while not ctx.stop_clients.is_set():
            self.once()
            time.sleep(0.002)

    def once(self):
        ctx, st, tl = self.ctx, self.ctx.stats, self.ctx.tl
        slot = self.slot
        port, gen, pid = slot.port, slot.gen, slot.proc.pid
        kpt = self.request()
        binary = self.rng.random() < 0.5
        self.n += 1
        rid = "w%d-%d-%d" % (slot.idx, id(self) % 1000, self.n)
        t0 = now()
        exc = None
        try:
            r = H.infer(port, "m", kpt, binary=binary, req_id=rid, timeout=CLIENT_TIMEOUT_S)
        except (OSError, http.client.HTTPException) as e:
            exc = e
        t1 = now()
        stopped = tl.overlaps(ctx.worker_stopped[slot.idx], t0, t1)
        down = tl.overlaps(ctx.worker_down[slot.idx], t0, t1) or slot.gen != gen
        where = {"request": rid, "worker": slot.idx, "pid": pid, "port": port,
                 "t_send": round(t0 - ctx.t0, 3), "utc": utc(time.time() - (now() - t0)),
                 "elapsed_ms": round((t1 - t0) * 1000, 1), "binary": binary}
        if exc is not None:
            if down and not isinstance(exc, socket.timeout):
                st.add(conn_errors=1)
                time.sleep(0.01)
            elif down or stopped:
                st.add(conn_errors=1)
            else:
                where["error"] = "%s: %s" % (type(exc).__name__, exc)
                with st.lock:
                    st.errors.append(where)
            return
        st.add(requests=1, binary=int(binary))
        with st.lock:
            st.lat_all.append(t1 - t0)
            if not stopped and not down and t1 - t0 > st.slowest_live[0]:
                st.slowest_live = (t1 - t0, where)
            if not stopped and not down:
                k = "coordinator down or stopped" if (
                    tl.overlaps(COORD_DOWN, t0, t1) or tl.overlaps(COORD_STOPPED, t0, t1)) \
                    else "coordinator serving"
                st.max_live[k] = max(st.max_live.get(k, 0.0), t1 - t0)
            if stopped:
                st.stopped_requests += 1
            else:
                st.lat_live.append(t1 - t0)
        if not stopped and t1 - t0 > LIVE_BOUND_S and not down:
            where["why"] = "over %.1f s on a live worker" % LIVE_BOUND_S
            with st.lock:
                st.slow.append(where)
        if r.status != 200:
            where["error"] = "HTTP %d: %r" % (r.status, r.body[:300])
            with st.lock:
                st.errors.append(where)
            return
        try:
            _, got = H.decode_output(r)
        except Exception as e:  # noqa: BLE001
            where["error"] = "undecodable answer: %s" % e
            with st.lock:
                st.errors.append(where)
            return
        self.check(kpt, got, t0, t1, where)

    def check(self, kpt, got, t0, t1, where):
        ctx, st, tl = self.ctx, self.ctx.stats, self.ctx.tl
        want_len = sum(len(ks) * DIMS[t] for t, ks in enumerate(kpt))
        if len(got) != want_len:
            where["error"] = "OUTPUT0 has %d floats, want %d" % (len(got), want_len)
            with st.lock:
                st.wrong.append(where)
            return
        off = 0
        defaults = []
        bad = None
        unknown_defaults = 0
        for t, ks in enumerate(kpt):
            dim = DIMS[t]
            for k in ks:
                row = got[off:off + dim]
                off += dim
                known = k in ctx.known[t]
                if known and row == ctx.want(t, k):
                    continue
                if row == ctx.def_rows[t]:
                    if known:
                        defaults.append((t, k))
                    else:
                        unknown_defaults += 1
                    continue
                if bad is None:
                    bad = {"table": t, "key": k, "known": known, "got": row,
                           "want": ctx.want(t, k) if known else ctx.def_rows[t]}
        st.add(unknown_default_keys=unknown_defaults)
        if bad is not None:
            where.update(bad)
            where["why"] = "a row that is neither the vector nor the default"
            with st.lock:
                st.wrong.append(where)
            return
        if not defaults:
            st.add(exact=1)
            return
        waited = int(t1 - t0 >= MISS_TIMEOUT_MS / 1000.0)
        # The coordinator's state explains any default: first a coordinator
        # cause in effect while the request ran, then one that had just ended
        # (a worker notices a recovery within a round), then one that ended
        # while this worker was stopped; a Redis master down only after that.
        stopped = ctx.worker_stopped[self.slot.idx]
        cause, lag = None, None
        for c in (COORD_DOWN, COORD_STOPPED):
            if cause is None and tl.overlaps(c, t0, t1):
                cause = c
        for c in (COORD_DOWN, COORD_STOPPED):
            if cause is None and tl.overlaps(c, t0, t1, LAG_S):
                cause, lag = c, tl.since_end(c, t0)
        for c in (COORD_DOWN, COORD_STOPPED):
            if cause is None and tl.overlaps_seen(c, t0, t1, LAG_S, stopped):
                cause = SEEN_LATE
        if cause is None and tl.overlaps(REDIS_DOWN, t0, t1, LAG_S):
            cause = REDIS_DOWN
            if not tl.overlaps(REDIS_DOWN, t0, t1):
                lag = tl.since_end(REDIS_DOWN, t0)
        if cause is not None:
            with st.lock:
                st.with_defaults[cause] += 1
                st.default_keys[cause] += len(defaults)
                st.waited[cause] += waited
                if lag is not None:
                    st.max_default_lag[cause] = max(st.max_default_lag[cause], lag)
                    st.lagged.append((round(lag, 3), where))
                if cause == REDIS_DOWN and len(st.redis_examples) < 5:
                    where["keys"] = defaults[:3]
                    st.redis_examples.append(where)
            return
        where["since"] = {c: (round(tl.since_end(c, t0), 3) if tl.since_end(c, t0) is not None
                              else None) for c in CAUSES}
        if waited:
            where["keys"] = defaults[:3]
            with st.lock:
                st.with_defaults[DEADLINE] += 1
                st.default_keys[DEADLINE] += len(defaults)
                st.waited[DEADLINE] += 1
                st.deadline.append(where)
            return
        where["why"] = "%d known keys got the default with no layer down" % len(defaults)
        where["keys"] = defaults[:5]
        with st.lock:
            st.wrong.append(where)


# --------------------------------------------------------------------------
# Process control
# --------------------------------------------------------------------------

def shm_check(ctx, when):
    t0 = now()
    rc, out, err = ctx.cl.shm("check", ctx.cl.segment)
    ctx.tl.event("hps-shm check %s: rc %d, %.0f ms" % (when, rc, (now() - t0) * 1000))
    ctx.checks.append((when, rc, (out + err).strip()[-1500:]))
    if rc != 0:
        ctx.tl.event("hps-shm check FAILED (%s): %s" % (when, (out + err).strip()[-400:]))
    return rc


def start_coordinator(ctx, rng, conf_idx):
    """Start a coordinator and wait until it serves misses; retries when one
    exits during start-up.  Maybe kills it during its start-up first.
    Returns the serving Proc (or None after 60 s of failures)."""
    deadline = now() + 60
    kill_early = rng.random() < 0.3
    while now() < deadline:
        conf = ctx.confs[conf_idx]
        p = ctx.cl.start_coordinator(conf, wait_ready=False)
        with ctx.coord_lock:
            ctx.coord = p
        ctx.tl.event("coordinator pid %d starting (initialize_after_startup = %s)" %
                     (p.pid, "true" if conf_idx == 0 else "false"))
        if kill_early:
            kill_early = False
            time.sleep(rng.uniform(0.0, 0.25))
            if p.alive() and "serving misses" not in p.log():
                p.kill()
                p.wait(10)
                ctx.kills["coordinator during start-up"] += 1
                ctx.tl.event("SIGKILL coordinator pid %d during its start-up" % p.pid)
                time.sleep(rng.uniform(0.0, 0.3))
                continue
        while now() < deadline:
            if "serving misses" in p.log():
                return p
            if not p.alive():
                break
            time.sleep(0.01)
        if p.alive():
            break
        tail = p.log().strip().splitlines()[-3:]
        ctx.coord_start_failures.append("pid %d exit %s: %s" % (p.pid, p.p.returncode,
                                                                 " | ".join(tail)))
        ctx.tl.event("coordinator pid %d exited during start-up (status %s): %s" %
                     (p.pid, p.p.returncode, tail[-1] if tail else ""))
        time.sleep(0.5)
    ctx.fail("no coordinator serving 60 s after a restart")
    return None


def coord_chaos(ctx, rng):
    tl = ctx.tl
    acts = ["kill"] * ctx.rounds + ["stop"] * ctx.rounds
    rng.shuffle(acts)
    for a in acts:
        time.sleep(rng.uniform(0.3, 2.0))
        c = ctx.coord
        if a == "kill":
            iv = tl.open(COORD_DOWN)
            c.kill()
            c.wait(10)
            ctx.kills["coordinator"] += 1
            tl.event("SIGKILL coordinator pid %d" % c.pid)
            time.sleep(rng.uniform(0.0, 0.5))
            ctx.restarts += 1
            p = start_coordinator(ctx, rng, ctx.restarts % 2)
            tl.close(iv)
            if p is None:
                return
            tl.event("coordinator pid %d serving (down %.2f s)" % (p.pid, iv[1] - iv[0]))
            shm_check(ctx, "after restart %d" % ctx.restarts)
        else:
            d = rng.uniform(*STOP_RANGE)
            iv = tl.open(COORD_STOPPED)
            c.kill(signal.SIGSTOP)
            ctx.stops["coordinator"] += 1
            tl.event("SIGSTOP coordinator pid %d for %.2f s" % (c.pid, d))
            time.sleep(d)
            c.kill(signal.SIGCONT)
            tl.close(iv)
            tl.event("SIGCONT coordinator pid %d" % c.pid)


def add_metrics(ctx, proc):
    try:
        c = H.hps_counters(proc.metrics_port, "m")
    except Exception:  # noqa: BLE001
        return
    for k in ctx.metrics_sum:
        if c.get(k, -1) >= 0:
            ctx.metrics_sum[k] += c[k]


def start_worker(ctx, idx):
    """Start a worker for slot idx; wait until it serves and is ready
    (ready needs a live coordinator: up to 30 s)."""
    cl = ctx.cl
    p = cl._spawn("worker", [H.WORKER, "-c", ctx.confs[0], "--device", "0", "--instance",
                             str(idx), "--http-port", "0", "--metrics-port", "0"],
                  "worker-%d-%d.log" % (idx, len(cl.procs)))
    pat = re.compile(r"serving .* on http://[^ ]*:(\d+) \(metrics :(\d+)\)")
    deadline = now() + 30
    while True:
        m = pat.search(p.log())
        if m:
            p.http_port, p.metrics_port = int(m.group(1)), int(m.group(2))
            break
        if not p.alive() or now() > deadline:
            return p, "worker pid %d did not start serving (status %s): %s" % (
                p.pid, p.p.returncode, p.log()[-500:])
        time.sleep(0.01)
    if not H.wait_for_ready(p.http_port, True, deadline - now()):
        return p, "worker pid %d not ready 30 s after its start" % p.pid
    return p, None


def worker_chaos(ctx, rng):
    tl = ctx.tl
    acts = ["kill"] * ctx.rounds + ["stop"] * ctx.rounds
    rng.shuffle(acts)
    for a in acts:
        time.sleep(rng.uniform(0.3, 2.0))
        idx = rng.randrange(len(ctx.slots))
        slot = ctx.slots[idx]
        w = slot.proc
        if a == "kill":
            add_metrics(ctx, w)
            iv = tl.open(ctx.worker_down[idx])
            w.kill()
            w.wait(10)
            ctx.kills["worker"] += 1
            tl.event("SIGKILL worker %d pid %d (port %d)" % (idx, w.pid, slot.port))
            time.sleep(rng.uniform(0.0, 0.5))
            p, err = start_worker(ctx, idx)
            if err:
                ctx.fail(err)
                tl.close(iv)
                return
            slot.proc, slot.port = p, p.http_port
            slot.gen += 1
            tl.close(iv)
            tl.event("worker %d pid %d ready on port %d (down %.2f s)" %
                     (idx, p.pid, p.http_port, iv[1] - iv[0]))
        else:
            d = rng.uniform(*STOP_RANGE)
            iv = tl.open(ctx.worker_stopped[idx])
            w.kill(signal.SIGSTOP)
            ctx.stops["worker"] += 1
            tl.event("SIGSTOP worker %d pid %d for %.2f s" % (idx, w.pid, d))
            time.sleep(d)
            w.kill(signal.SIGCONT)
            tl.close(iv)
            tl.event("SIGCONT worker %d pid %d" % (idx, w.pid))


# ---- Redis ---------------------------------------------------------------------

def redis_args(rc, port):
    d = os.path.join(rc.tmp, "redis-%d" % port)
    return ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", "1000", "--save", "", "--appendonly", "no",
            "--dir", d, "--requirepass", R.PASSWORD, "--masterauth", R.PASSWORD,
            "--protected-mode", "no", "--repl-diskless-sync-delay", "0"], d


def redis_restart(rc, port):
    args, d = redis_args(rc, port)
    log = open(os.path.join(d, "log"), "ab")
    rc.procs[port] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL)
    log.close()


def redis_masters_with_replica(rc):
    """Ports of masters that have a connected replica."""
    out = R.redis_cmd(rc.alive_ports()[0], "CLUSTER", "NODES").decode()
    nodes = [ln.split() for ln in out.splitlines() if ln.strip()]
    by_id = {n[0]: n for n in nodes}
    masters = set()
    for n in nodes:
        flags = n[2].split(",")
        if "slave" in flags and "fail" not in flags and n[7] == "connected" and n[3] in by_id:
            m = by_id[n[3]]
            if "master" in m[2].split(",") and "fail" not in m[2] and len(m) > 8:
                masters.add(int(m[1].split("@")[0].rsplit(":", 1)[1]))
    return sorted(masters)


def redis_chaos(ctx, rng, n):
    rc, tl = ctx.redis, ctx.tl
    for _ in range(n):
        time.sleep(rng.uniform(1.0, 3.0))
        if not H.wait_until(lambda: rc.settled() and rc.replicas_synced(), 30, 0.2):
            ctx.fail("Redis Cluster not settled (replicas not synced) before a kill")
            return
        cands = redis_masters_with_replica(rc)
        if not cands:
            ctx.fail("no Redis master with a connected replica")
            return
        victim = rng.choice(cands)
        slot = next(s[0] for s in R.redis_cmd(victim, "CLUSTER", "SLOTS")
                    if s[2][1] == victim)
        iv = tl.open(REDIS_DOWN)
        rc.kill(victim)
        ctx.kills["redis master"] += 1
        tl.event("SIGKILL redis master :%d" % victim)
        def failed_over():
            try:
                return rc.settled() and rc.owner(slot) not in (None, victim)
            except (OSError, RuntimeError, ValueError):
                return False
        ok = H.wait_until(failed_over, 30, 0.1)
        tl.close(iv)
        if not ok:
            ctx.fail("Redis Cluster did not fail over within 30 s")
            return
        tl.event("redis failover done (%.2f s)" % (iv[1] - iv[0]))
        time.sleep(rng.uniform(0.5, 2.0))
        redis_restart(rc, victim)
        ok = H.wait_until(lambda: rc._ping(victim) and rc.settled() and rc.replicas_synced(),
                          30, 0.2)
        tl.event("redis :%d restarted%s" % (victim, "" if ok else " but NOT synced in 30 s"))
        if not ok:
            ctx.fail("restarted Redis node :%d did not rejoin and sync" % victim)
            return


# --------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------

def fmt_req(d):
    return ", ".join("%s=%s" % (k, v) for k, v in d.items())


def log_window(cl, hms, span=0.6, most=12):
    """Lines of every coordinator and worker log stamped within span
    seconds of hms ("HH:MM:SS.mmm", UTC)."""
    def secs(x):
        h, m, rest = x.split(":")
        return int(h) * 3600 + int(m) * 60 + float(rest)
    c = secs(hms)
    pat = re.compile(r"T(\d\d:\d\d:\d\d\.\d+)Z (.*)")
    out = []
    for p in cl.procs:
        for line in p.log().splitlines():
            m = pat.search(line)
            if m and abs(secs(m.group(1)) - c) <= span:
                out.append((m.group(1), m.group(2)))
    out.sort()
    return ["    log %s %s" % x for x in out[:most]]


def body(t, cl, args):
    seed = args.seed
    t.diag("seed %d (rerun: --seed %d), rounds %d, miss_timeout_ms %d" %
           (seed, seed, args.rounds, MISS_TIMEOUT_MS))
    master = random.Random(seed)
    redis = None
    if not args.no_redis and R.have_redis():
        try:
            redis = R.RedisCluster(cl.path("redis"))
        except Exception as e:  # noqa: BLE001
            t.ok(False, "Redis Cluster started", str(e))
            return
    elif not args.no_redis:
        t.diag("redis-server or redis-cli not installed: no distributed DB, no Redis kills")
    try:
        run(t, cl, args, master, redis)
    finally:
        if redis is not None:
            redis.stop()


def run(t, cl, args, master, redis):
    model = cl.gen_model("m", rows=ROWS, dims=DIMS, defaults=DEFAULTS)
    common = [
        ("volatile_db", "initial_cache_rate", RATE),
        ("volatile_db", "cache_missed_embeddings", "true"),
        ("volatile_db", "shared_memory_auto_remove", "false"),
        ("hps", "heartbeat_interval_ms", HEARTBEAT_MS),
        ("hps", "worker_timeout_ms", WORKER_TIMEOUT_MS),
        ("worker", "miss_timeout_ms", MISS_TIMEOUT_MS),
        ("worker", "http_threads", 2),
    ]
    if redis is not None:
        common += [("distributed_db", "type", "redis_cluster"),
                   ("distributed_db", "address",
                    ",".join("127.0.0.1:%d" % p for p in redis.ports)),
                   ("distributed_db", "password", R.PASSWORD),
                   ("distributed_db", "num_partitions", R.NP),
                   ("distributed_db", "initial_cache_rate", RATE),
                   ("distributed_db", "cache_missed_embeddings", "true")]
    confs = [cl.write_config("hps-init.ini", model.ini_text, common),
             cl.write_config("hps-keep.ini", model.ini_text, common + [
                 ("volatile_db", "initialize_after_startup", "false")])]
    ctx = Ctx(t, cl, model, confs, args.seed, args.rounds, redis)
    ctx.coord = cl.start_coordinator(confs[0])
    for i in range(2):
        w = cl.start_worker(confs[0], instance=i)
        ctx.slots.append(Slot(i, w))
        ctx.worker_down.append("worker %d down" % i)
        ctx.worker_stopped.append("worker %d stopped" % i)
    t.diag("coordinator pid %d, workers %s; %s" % (
        ctx.coord.pid, [(s.proc.pid, s.port) for s in ctx.slots],
        "Redis Cluster %s" % redis.ports if redis else "no Redis"))

    clients = [Client(ctx, s, master.randrange(1 << 30))
               for s in ctx.slots for _ in range(CLIENTS_PER_WORKER)]
    for c in clients:
        c.start()
    threads = [threading.Thread(target=coord_chaos, args=(ctx, random.Random(master.random())),
                                daemon=True),
               threading.Thread(target=worker_chaos, args=(ctx, random.Random(master.random())),
                                daemon=True)]
    n_redis = (args.redis_kills if args.redis_kills is not None else
               max(2, args.rounds // 5)) if redis else 0
    if redis:
        threads.append(threading.Thread(target=redis_chaos,
                                        args=(ctx, random.Random(master.random()), n_redis),
                                        daemon=True))
    time.sleep(1.0)
    ctx.tl.event("chaos starts")
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    ctx.tl.event("chaos over; 1.5 s of steady lookups")
    steady_from = now()
    time.sleep(1.5)
    ctx.stop_clients.set()
    for c in clients:
        c.join(CLIENT_TIMEOUT_S + 5)
    hung = [c for c in clients if c.is_alive()]
    st = ctx.stats

    # ---- checks --------------------------------------------------------------
    t.ok(not hung, "every client thread finished (no request hung)")
    t.ok(not ctx.failures, "chaos threads ran to the end", "\n".join(ctx.failures))
    t.ok(ctx.kills["coordinator"] >= args.rounds and ctx.kills["worker"] >= args.rounds,
         "at least %d coordinator and %d worker kills (%d, %d)" % (
             args.rounds, args.rounds, ctx.kills["coordinator"], ctx.kills["worker"]))
    t.ok(st.requests > 20 * args.rounds, "%d requests answered" % st.requests)

    def show(items, n=8):
        out = []
        for i, d in enumerate(items[:n]):
            out.append(fmt_req(d))
            ts = d.get("t_send")
            if ts is not None:
                out += ["    " + e for e in ctx.tl.near(ctx.t0 + ts)]
            if i < 3 and "utc" in d:
                out += log_window(cl, d["utc"])
        return "\n".join(out)

    t.ok(not st.wrong, "0 wrong answers (rows other than the vector or the default, or "
         "defaults answered at once with no layer down): %d" % len(st.wrong), show(st.wrong))
    t.ok(not st.slow, "0 requests over %.0f s on a live worker: %d" % (LIVE_BOUND_S, len(st.slow)),
         show(st.slow))
    t.ok(not st.errors, "0 unexpected errors (HTTP errors, connection errors or timeouts of a "
         "live worker): %d" % len(st.errors), show(st.errors))
    share = st.with_defaults[DEADLINE] / max(1, st.requests)
    t.ok(share <= DEADLINE_MAX_SHARE, "defaults after miss_timeout_ms at a serving coordinator "
         "with nothing down: %d requests (%.3f%%, at most %.1f%%)" % (
             st.with_defaults[DEADLINE], share * 100, DEADLINE_MAX_SHARE * 100))
    if st.deadline:
        t.diag("such requests (the first %d):\n%s" % (min(5, len(st.deadline)),
                                                      show(st.deadline, 5)))
    bad_checks = [c for c in ctx.checks if c[1] != 0]
    t.ok(not bad_checks, "hps-shm check clean after each of %d coordinator restarts" %
         len(ctx.checks), "\n".join("%s: rc %d: %s" % c for c in bad_checks[:3]))

    # Quiescent state: every process up, dead workers reaped.
    coord = ctx.coord
    t.ok(coord is not None and coord.alive(), "the coordinator is running at the end")
    for s in ctx.slots:
        t.ok(s.proc.alive(), "worker %d (pid %d) is running at the end" % (s.idx, s.proc.pid))
    live = {coord.pid} | {s.proc.pid for s in ctx.slots}

    def procs():
        try:
            return {p["pid"] for p in cl.shm_info()["processes"]
                    if p["role"] != "tool"}  # hps-shm itself
        except RuntimeError:
            return None
    H.wait_until(lambda: procs() == live, 5.0, 0.1)
    t.eq(procs(), live, "the segment's process table holds exactly the live coordinator "
         "and workers (dead ones reaped)")
    rc, out, err = cl.shm("check", cl.segment)
    t.ok(rc == 0, "hps-shm check clean at the end", out + err)
    ok_after = [s.port for s in ctx.slots]
    good = 0
    for port in ok_after:
        kpt = [model.file_keys[0][:50] + model.pdb_only_keys(0, RATE)[-50:],
               model.file_keys[1][:20], model.file_keys[2][-20:]]
        _, got = H.decode_output(H.infer(port, "m", kpt, binary=True))
        good += got == model.expected(kpt)
    t.eq(good, 2, "both workers answer every layer exactly at the end")
    for s in ctx.slots:
        add_metrics(ctx, s.proc)

    # ---- figures -------------------------------------------------------------
    t.diag("requests %d (binary %d, JSON %d): exact %d, with defaults %d, wrong %d; "
           "unknown keys answered with the default %d" % (
               st.requests, st.binary, st.requests - st.binary, st.exact,
               sum(st.with_defaults.values()), len(st.wrong), st.unknown_default_keys))
    for c in REPORTED:
        t.diag("defaults, %s: %d requests (%d after waiting miss_timeout_ms), %d keys" % (
            c, st.with_defaults[c], st.waited[c], st.default_keys[c]) +
            (" (latest %.0f ms after its end)" % (st.max_default_lag[c] * 1000)
             if c in CAUSES else ""))
    lagged = sorted(st.lagged, key=lambda x: -x[0])
    t.diag("defaults within LAG_S = %.2f s after their cause ended: %d requests; latest: %s" % (
        LAG_S, len(lagged), "; ".join("%.3f s: %s" % (lg, fmt_req(d)) for lg, d in lagged[:3])))
    t.diag("connection errors (killed or restarting worker): %d; requests overlapping a "
           "worker SIGSTOP: %d" % (st.conn_errors, st.stopped_requests))
    t.diag("kills: coordinator %d (+%d during start-up), worker %d, redis master %d; "
           "SIGSTOPs: coordinator %d, worker %d; coordinator start-up exits %d" % (
               ctx.kills["coordinator"], ctx.kills["coordinator during start-up"],
               ctx.kills["worker"], ctx.kills["redis master"], ctx.stops["coordinator"],
               ctx.stops["worker"], len(ctx.coord_start_failures)))
    for f in ctx.coord_start_failures[:5]:
        t.diag("  start-up exit: " + f)
    t.diag("latency, live worker (%d): p50 %.1f ms, p99 %.1f ms, max %.1f ms; all requests: "
           "max %.1f ms" % (len(st.lat_live), H.pct(st.lat_live, 0.50) * 1000,
                            H.pct(st.lat_live, 0.99) * 1000, max(st.lat_live or [0]) * 1000,
                            max(st.lat_all or [0]) * 1000))
    t.diag("slowest request to a live worker, by the coordinator's state: %s" % ", ".join(
        "%s %.1f ms" % (k, v * 1000) for k, v in sorted(st.max_live.items())))
    if st.redis_examples:
        t.diag("requests with defaults while only a Redis master was down (the first %d):\n%s" %
               (len(st.redis_examples), show(st.redis_examples, 5)))
    if st.slowest_live[1] is not None:
        t.diag("slowest request to a live worker: %s\n%s" % (
            fmt_req(st.slowest_live[1]),
            "\n".join(["    " + e for e in ctx.tl.near(ctx.t0 + st.slowest_live[1]["t_send"])] +
                      log_window(cl, st.slowest_live[1]["utc"], 0.3))))
    t.diag("worker metrics (summed over worker lifetimes): %s" % ctx.metrics_sum)
    _ = steady_from


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int,
                    default=int(os.environ.get("HPS_CHAOS_ROUNDS", "5")),
                    help="kills (and SIGSTOPs) of each kind (env HPS_CHAOS_ROUNDS; default 5)")
    ap.add_argument("--seed", type=int,
                    default=int(os.environ.get("HPS_CHAOS_SEED", "0")) or
                    random.SystemRandom().randrange(1, 1 << 31),
                    help="RNG seed (env HPS_CHAOS_SEED; default random, printed)")
    ap.add_argument("--redis-kills", type=int, default=None,
                    help="Redis master kills (default max(2, rounds // 5))")
    ap.add_argument("--no-redis", action="store_true", help="no Redis Cluster")
    args = ap.parse_args()
    H.run_main("chaos", lambda t, cl: body(t, cl, args))


if __name__ == "__main__":
    main()
