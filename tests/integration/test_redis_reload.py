#!/usr/bin/env python3
"""
int-redis_reload: a model whose files change (a reload to a new version, a
restart on other files) never serves the rows Redis kept of the old files
(issue 20: every request answered wholly from one version).  Redis keeps
every row a fill does not overwrite, so before the table's record
(hps_et{hps_et.<model>.<table>/p0}r: the identity of the files its rows came
from) the coordinator removes a table whose record names other files.

Three masters (requirepass), model m version 1 (4000 rows; [distributed_db]
initial_cache_rate 0.5, cache_missed_embeddings: every key looked up once
puts the other half into Redis too), then:
  (1) SIGHUP to version 2 (new vectors, the last 1000 keys gone): every key
      answers version 2's vector or, for the keys it dropped, the default
      (the audit saw 2000 of 4000 keys answer version 1 here, and the
      dropped keys their version 1 vectors); the log says why;
  (2) a restart on the same files keeps Redis's rows: a row changed in
      Redis (as an online update to the layer would) is still served;
  (3) data without a record (written by HugeCTR, which writes none) is kept
      too, and the record is written; then two partition hashes deleted
      (as maxmemory eviction or a flush loses them) with the record left:
      a restart fills those partitions again (those keys got the default
      for good), and the others keep their rows and updates (the row
      changed in (2) too; before, the whole table was filled again and
      that change was lost without a persistent DB);
  (4) SIGHUP to a version 3 of another dimension (its worker stopped
      first; one started after it checks the answers): the rows of version 2
      are removed, not refused as rows that do not fit, and version 3
      serves.
  (5) Redis only (no persistent DB, no rows of the volatile DB's own, as
      an imported HugeCTR Redis configuration has them): models a and b,
      a SIGHUP to b's version 2 under a checked stream of a's keys and one
      of b's keys.  a's keys are answered from Redis exactly throughout
      (before, the serving segment's misses got their defaults for the
      whole build: nothing answered them without a persistent DB); b's
      answers are each v1, v2 or the default (Redis has one copy of a
      table: its misses get the default from the moment the build replaces
      its rows until the switch), never a mix of versions in one request.
  (6) Then b's record removed from Redis (HugeCTR's data has none, nor a
      table whose fill was killed before its record), and a SIGHUP to b's
      version 3 under a checked stream: the build refills those rows in
      place, so the serving segment's misses must not be answered from
      them (the segment records which Redis record it was built beside):
      no request mixes versions (with every table answered from Redis
      during the build, 13 of 2,075 did in an audit's run).
  (7) A reload of model k to a version 2 of 200,000 rows killed while it
      fills Redis, shared memory then removed (a reboot), and a start on
      version 1's files again (a rollback): every key answers version 1's
      vector and version 2's other keys the default (the table's record
      says "replacing" from before the rows go until the fill has ended;
      before, the record was deleted, and the start took the killed
      fill's rows for version 1's: a reboot audit saw 3,732 of 18,000 keys
      answer version 2's vectors).
Skips without redis-server / redis-cli.
"""
import os
import random
import signal
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402
import test_redis_cluster as R  # noqa: E402

ROWS, DIM, DEFAULT = 4000, 8, 0.25
TABLE = "sparse_embedding0"


def record(rc):
    return R.redis_cmd(rc.alive_ports()[0], "GET", R.hname("m", TABLE, 0, "r"))


def answers(w, keys):
    out = []
    for i in range(0, len(keys), 500):
        _, vals = H.decode_output(H.infer(w.http_port, "m", [keys[i:i + 500]], binary=True))
        out.extend(vals[j * DIM:(j + 1) * DIM] for j in range(len(vals) // DIM))
    return out


def start(cl, rc, model, rate, name):
    conf = cl.write_config(name, model.ini_text, R.COMMON + R.ddb_settings(
        rc, initial_cache_rate=rate, cache_missed_embeddings="true"))
    return conf, cl.start_coordinator(conf), cl.start_worker(conf)


def stop(*procs):
    for p in procs:
        p.kill(signal.SIGTERM)
        p.wait(30)


def body(t, cl):
    rc = R.RedisCluster(cl.tmp, n=3, replicas=0)
    try:
        scenario(t, cl, rc)
    finally:
        rc.stop()


def scenario(t, cl, rc):
    v1 = cl.gen_model("m", rows=[ROWS], dims=[DIM], defaults=[DEFAULT], subdir="v1", version=1)
    v2 = cl.gen_model("m", rows=[ROWS - 1000], dims=[DIM], defaults=[DEFAULT], subdir="v2",
                      version=2)
    keys = v1.file_keys[0]
    conf, coord, w = start(cl, rc, v1, 0.5, "hps.ini")
    t.eq(answers(w, keys), [H.gen_vector(0, k, DIM, 1) for k in keys], "v1: every key exact")
    t.ok(H.wait_until(lambda: R.total_rows(rc, "m", TABLE) == ROWS, 10, 0.1),
         "Redis holds all %d rows of v1 (half loaded, half inserted after misses)" % ROWS,
         R.total_rows(rc, "m", TABLE))
    rec1 = record(rc)
    t.ok(isinstance(rec1, bytes) and rec1.startswith(b"v1 dim=8 key_bytes=8; key size="),
         "the table's record names the files' contents", rec1)

    # (1) version 2 by SIGHUP
    n_ready = coord.log().count("serving misses")
    cl.write_config("hps.ini", v2.ini_text, R.COMMON + R.ddb_settings(
        rc, initial_cache_rate=0.5, cache_missed_embeddings="true"))
    coord.kill(signal.SIGHUP)
    t.ok(H.wait_until(lambda: coord.log().count("serving misses") > n_ready and
                      '"2"' in H.http(w.http_port, "GET", "/v2/models/m").body.decode(), 60, 0.1),
         "reload to version 2 published")
    v2keys = set(v2.file_keys[0])
    want = [H.gen_vector(0, k, DIM, 2) if k in v2keys else [DEFAULT] * DIM for k in keys]
    got = answers(w, keys)
    wrong = sum(1 for a, b in zip(got, want) if a != b)
    t.eq(wrong, 0, "v2: every key answers its v2 vector or the default, none a v1 row kept in "
         "Redis (%d of %d wrong)" % (wrong, len(keys)))
    t.ok("the distributed DB holds the rows of other model files" in coord.log(),
         "the log says the old rows were removed")
    rec2 = record(rc)
    t.ok(rec2 and rec2 != rec1, "the record names v2's files now")

    # (2) restart on the same files: Redis's rows (and an update to them) are kept
    k = v2.file_keys[0][0]
    marker = [7.0 + d for d in range(DIM)]
    R.redis_cmd(rc.alive_ports()[0], "HSET", R.hname("m", TABLE, R.part_of(k)),
                struct.pack("<q", k), struct.pack("<%df" % DIM, *marker))
    stop(w, coord)
    conf, coord, w = start(cl, rc, v2, 0.0, "hps.ini")
    t.eq(answers(w, [k]), [marker], "restart on the same files: a row changed in Redis is "
         "still served (the table was kept)")
    t.ok("holds the rows of other model files" not in coord.log(),
         "nothing removed at that restart")

    # (3) rows without a record (HugeCTR's data): kept, then recorded
    R.redis_cmd(rc.alive_ports()[0], "DEL", R.hname("m", TABLE, 0, "r"))
    stop(w, coord)
    conf, coord, w = start(cl, rc, v2, 0.0, "hps.ini")
    t.eq(answers(w, [k]), [marker], "rows without a record (as HugeCTR wrote them): kept")
    t.ok("has no record of the model files its rows came from" in coord.log(),
         "the log says the rows were taken for these files'")
    t.eq(record(rc), rec2, "and the record is written")

    # (3b) partition hashes lost (evicted whole by maxmemory, a flush, a node
    # back empty) while the record stayed: the table was taken as it was,
    # and those keys got the default for good; now it is filled again
    lost = [p for p in range(R.NP) if p != R.part_of(k)][:2]
    for p in lost:
        R.redis_cmd(rc.alive_ports()[0], "DEL", R.hname("m", TABLE, p))
    stop(w, coord)
    conf, coord, w = start(cl, rc, v2, 0.0, "hps.ini")
    v2k = v2.file_keys[0]
    got = answers(w, v2k)
    wrong = sum(1 for key, g in zip(v2k, got)
                if g != (marker if key == k else H.gen_vector(0, key, DIM, 2)))
    t.eq(wrong, 0, "partitions %s lost from Redis, restart: every key of v2 exact, and the row "
         "changed in a partition not lost keeps its change (%d of %d wrong)"
         % (lost, wrong, len(v2k)))
    t.ok("lost every row of 2 of its 8 partitions" in coord.log() and
         "filling those partitions again" in coord.log(), "the log says so",
         coord.log()[-2000:])
    t.eq(R.total_rows(rc, "m", TABLE), ROWS - 1000, "Redis holds every row of v2 again")

    # (4) a version of another dimension: the old rows are removed, not
    # refused as rows that do not fit (they are not kept)
    v3 = cl.gen_model("m", rows=[ROWS], dims=[2 * DIM], defaults=[DEFAULT], subdir="v3",
                      version=3)
    n_ready = coord.log().count("serving misses")
    cl.write_config("hps.ini", v3.ini_text, R.COMMON + R.ddb_settings(
        rc, initial_cache_rate=0.5, cache_missed_embeddings="true"))
    stop(w)  # a worker started after the reload checks version 3
    coord.kill(signal.SIGHUP)
    t.ok(H.wait_until(lambda: coord.log().count("serving misses") > n_ready, 60, 0.1) and
         coord.alive() and "reload failed" not in coord.log(),
         "reload to version 3 (dimension 16) published", coord.log()[-2000:])
    w3 = cl.start_worker(cl.path("hps.ini"), instance=1)
    kk = v3.file_keys[0][:500] + v3.file_keys[0][-500:]
    _, got = H.decode_output(H.infer(w3.http_port, "m", [kk], binary=True))
    t.ok(got == v3.expected([kk]), "a worker started since serves version 3 exactly")
    stop(w3, coord)
    redis_only(t, cl, rc)


def stream(w, name, keys, dim, check, stop_at, out):
    """Requests of 20 random keys of one table until stop_at is set; out
    gets (t_sent, verdict) per request, verdict from check(keys, rows) or
    "failed: <status>"."""
    rnd = random.Random(name)
    while not stop_at.is_set():
        kk = rnd.sample(keys, 20)
        t0 = time.monotonic()
        r = H.infer(w.http_port, name, [kk], binary=True)
        if r.status != 200:
            out.append((t0, "failed: %d" % r.status))
            continue
        vals = H.decode_output(r)[1]
        out.append((t0, check(kk, [vals[i * dim:(i + 1) * dim] for i in range(len(kk))])))


def versions_check(old, new):
    """A stream's check: each row of a request is version old's, version
    new's or the default; "mixed" when both versions answer one request."""
    def check(kk, rows):
        kinds = set()
        for k, row in zip(kk, rows):
            kinds.add("v%d" % old if row == H.gen_vector(0, k, DIM, old) else
                      "v%d" % new if row == H.gen_vector(0, k, DIM, new) else
                      "default" if row == [DEFAULT] * DIM else "wrong")
        return "mixed" if {"v%d" % old, "v%d" % new} <= kinds else "+".join(sorted(kinds))
    return check


def reload_under(cl, coord, ini_name, text, settings, watch, new, streams):
    """Run streams ((worker, model, keys, check, out) each) while coord
    reloads to text (SIGHUP); stop them once watch, one stream's out, has
    answered new.  Returns (published, SIGHUP time, publication time)."""
    stop_at = threading.Event()
    threads = [threading.Thread(target=stream, args=(w, m, kk, DIM, check, stop_at, out))
               for w, m, kk, check, out in streams]
    for th in threads:
        th.start()
    time.sleep(0.3)
    n_ready = coord.log().count("serving misses")
    cl.write_config(ini_name, text, settings)
    t_hup = time.monotonic()
    coord.kill(signal.SIGHUP)
    published = H.wait_until(lambda: coord.log().count("serving misses") > n_ready, 60, 0.05)
    t_pub = time.monotonic()
    H.wait_until(lambda: any(v == new for _, v in watch[-5:]), 10, 0.05)
    time.sleep(0.3)
    stop_at.set()
    for th in threads:
        th.join(30)
    return published, t_hup, t_pub


def redis_only(t, cl, rc):
    """(5): see the file's comment."""
    a = cl.gen_model("a", rows=[3000], dims=[DIM], defaults=[DEFAULT], subdir="ro_a")
    b1 = cl.gen_model("b", rows=[60000], dims=[DIM], defaults=[DEFAULT], subdir="ro_b1",
                      version=1)
    b2 = cl.gen_model("b", rows=[60000], dims=[DIM], defaults=[DEFAULT], subdir="ro_b2",
                      version=2)
    # lookup_timeout_ms 1000: a Redis lookup over the default 20 ms (a busy
    # 2-core machine) gets defaults in any deployment without a persistent
    # DB; the checks here are about the reload
    settings = R.COMMON + [("volatile_db", "cache_missed_embeddings", "false"),
                           ("persistent_db", "type", "disabled")] + R.ddb_settings(
        rc, initial_cache_rate=1.0, cache_missed_embeddings="false", lookup_timeout_ms=1000)

    def ini(b):
        return a.ini_text + "\n" + b.ini_text[b.ini_text.index("[model.b]"):]
    conf = cl.write_config("ro.ini", ini(b1), settings)
    coord, w = cl.start_coordinator(conf), cl.start_worker(conf)
    akeys, bkeys = a.file_keys[0], b1.file_keys[0]
    t.eq(answers_of(w, "a", akeys[:200]), [H.gen_vector(0, k, DIM) for k in akeys[:200]],
         "Redis only: a's keys exact before the reload (from Redis)")

    def check_a(kk, rows):
        return "exact" if rows == [H.gen_vector(0, k, DIM) for k in kk] else \
            "default" if [DEFAULT] * DIM in rows else "wrong"

    out_a, out_b = [], []
    published, t_hup, t_pub = reload_under(
        cl, coord, "ro.ini", ini(b2), settings, out_b, "v2",
        [(w, "a", akeys, check_a, out_a), (w, "b", bkeys, versions_check(1, 2), out_b)])
    t.ok(published, "Redis only: reload to b version 2 published", coord.log()[-1500:])
    during = [v for t0, v in out_a if t_hup <= t0 <= t_pub]
    bad = {v: n for v in set(v for _, v in out_a) if v != "exact"
           for n in [sum(1 for _, x in out_a if x == v)]}
    t.ok(not bad and len(during) >= 5,
         "Redis only: a's %d requests exact throughout, %d of them during the %.2f s build "
         "(not exact: %s)" % (len(out_a), len(during), t_pub - t_hup, bad or "none"),
         coord.log()[-1500:])
    kinds_b = {v: sum(1 for _, x in out_b if x == v) for v in set(x for _, x in out_b)}
    t.ok(set(kinds_b) <= {"v1", "v2", "default", "default+v1", "default+v2"} and
         "v2" in kinds_b, "Redis only: b's %d requests each v1, v2 or defaults, none mixed or "
         "wrong: %s" % (len(out_b), kinds_b))
    t.ok("misses are answered from the distributed DB (2 of 2 tables" in coord.log(),
         "the log says both serving tables were answered from Redis during the build",
         [ln for ln in coord.log().splitlines() if "answered while" in ln])

    # (6) b's record gone, then a SIGHUP to b's version 3
    b3 = cl.gen_model("b", rows=[60000], dims=[DIM], defaults=[DEFAULT], subdir="ro_b3",
                      version=3)
    R.redis_cmd(rc.alive_ports()[0], "DEL", R.hname("b", TABLE, 0, "r"))

    out_b = []
    published = reload_under(cl, coord, "ro.ini", ini(b3), settings, out_b, "v3",
                             [(w, "b", bkeys, versions_check(2, 3), out_b)] * 2)[0]
    kinds_b = {v: sum(1 for _, x in out_b if x == v) for v in set(x for _, x in out_b)}
    t.ok(published and set(kinds_b) <= {"v2", "v3", "default", "default+v2", "default+v3"} and
         "v3" in kinds_b, "(6) b's record removed, reload to v3: %d requests each v2, v3 or "
         "defaults, none mixed: %s" % (len(out_b), kinds_b), coord.log()[-1500:])
    stop(w, coord)
    killed_fill(t, cl, rc)


def killed_fill(t, cl, rc):
    """(7): see the file's comment."""
    k1 = cl.gen_model("k", rows=[3000], dims=[DIM], defaults=[DEFAULT], subdir="kf_1", version=1)
    k2 = cl.gen_model("k", rows=[200000], dims=[DIM], defaults=[DEFAULT], subdir="kf_2",
                      version=2)
    settings = R.COMMON + [("persistent_db", "type", "disabled")] + R.ddb_settings(
        rc, initial_cache_rate=1.0, cache_missed_embeddings="false", lookup_timeout_ms=1000)
    landed = False
    for attempt in range(5):  # until the kill lands inside the fill
        conf = cl.write_config("kf.ini", k1.ini_text, settings)
        coord = cl.start_coordinator(conf)
        n = coord.log().count("removing them before loading")
        cl.write_config("kf.ini", k2.ini_text, settings)
        coord.kill(signal.SIGHUP)
        H.wait_until(lambda: coord.log().count("removing them before loading") > n, 60, 0.002)
        H.wait_until(lambda: R.total_rows(rc, "k", TABLE) > 3000, 30, 0.002)
        coord.kill(signal.SIGKILL)
        coord.wait(10)
        rows = R.total_rows(rc, "k", TABLE)
        H.retire([coord], cl.segment)  # a reboot: shared memory gone, Redis kept
        if 3000 < rows < 200000:
            landed = True
            break
        t.diag("attempt %d: the kill found %d rows of the table in Redis: again" % (attempt, rows))
    t.ok(landed, "(7) a reload to version 2 killed while it filled Redis (%d of 200000 rows "
         "there)" % rows)
    rec = R.redis_cmd(rc.alive_ports()[0], "GET", R.hname("k", TABLE, 0, "r"))
    t.ok(isinstance(rec, bytes) and rec.startswith(b"replacing"),
         "the table's record says its rows were being replaced", rec)
    conf = cl.write_config("kf.ini", k1.ini_text, settings)
    coord, w = cl.start_coordinator(conf), cl.start_worker(conf)
    keys = k1.file_keys[0]
    only2 = [k for k in k2.file_keys[0] if k not in set(keys)][:3000]
    got = answers_of(w, "k", keys) + answers_of(w, "k", only2)
    want = [H.gen_vector(0, k, DIM, 1) for k in keys] + [[DEFAULT] * DIM] * len(only2)
    wrong = sum(1 for a, b in zip(got, want) if a != b)
    t.eq(wrong, 0, "a start with version 1 after it: every key answers version 1's vector, and "
         "version 2's other keys the default, none a row the killed fill left (%d of %d wrong)"
         % (wrong, len(want)))
    t.ok("when that fill stopped before its end" in coord.log(), "the log says why")
    stop(w, coord)


def answers_of(w, model, keys):
    _, vals = H.decode_output(H.infer(w.http_port, model, [keys], binary=True))
    return [vals[j * DIM:(j + 1) * DIM] for j in range(len(vals) // DIM)]


if __name__ == "__main__":
    if not R.have_redis():
        H.Tap.skip_all("redis-server or redis-cli not installed")
    H.run_main("redis_reload", body)
