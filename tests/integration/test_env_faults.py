#!/usr/bin/env python3
"""
int-env_faults: faults of the machine under a serving coordinator, in a
private mount namespace (`unshare -m`; skipped where it cannot be made)
whose /dev/shm is a small tmpfs of its own, so the host's is never touched.

1. /dev/shm full (volatile DB only, every model row in shared memory): a
   ballast file leaves 4 MiB free, then Kafka brings 30,000 new keys.  Only
   the segment's own limits (shared_memory_size, overflow_margin) may evict
   rows; a full /dev/shm is an error the Kafka consumer retries
   (shmdb/ops.c: own_limit; kafka-consumer.c: deliver).  Checks: the
   coordinator logs "No space left on device"; all 20,000 model rows keep
   their vectors while it is full; once the ballast is removed, every pushed
   key answers its new vector (no update lost).  Then a reboot (shared
   memory removed) with initialize_after_startup = false: the warning that
   the updates the segment held are lost (no persistent DB keeps them).
2. A persistent DB of updates only ([persistent_db] initialize_after_startup
   = false), then a reboot: the updated keys keep their updates.
3. The persistent DB's directory made read-only (a read-only bind mount:
   directory modes do not stop root) under a serving coordinator, then
   SIGHUP: the reload fails; while it does, a worker answers keys outside
   shared memory exactly or says not ready, never ready with defaults; once
   the directory is writable again, the keys are answered exactly.
"""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402

SHM_MIB = 96
DIM = 64
NEW = 30000


def in_namespace():
    """Re-run this script in a private mount namespace with a SHM_MIB tmpfs
    on /dev/shm (once); skip the script where that cannot be made."""
    if os.environ.get("HPS_TEST_MNTNS") == "1":
        return
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        H.Tap.skip_all("cannot make a private mount namespace (unshare -m needs CAP_SYS_ADMIN)")
    inner = ("mount --make-rprivate / && mount -t tmpfs -o size=%dm,mode=1777 tmpfs /dev/shm "
             "&& exec \"$0\" \"$@\"" % SHM_MIB)
    env = dict(os.environ, HPS_TEST_MNTNS="1")
    os.execvpe("unshare", ["unshare", "-m", "sh", "-c", inner, sys.executable] + sys.argv, env)


def new_vector(key):
    return [H.f32(7.0 + (key % 1013) * 0.5 + d * 0.125) for d in range(DIM)]


def kafka_settings(km, settings):
    """settings, then Kafka updates from km (a H.KafkaMock)."""
    return settings + [("update_source", "type", "kafka_message_queue"),
                       ("update_source", "brokers", km.bootstrap),
                       ("update_source", "poll_timeout_ms", 100)]


def count_new(port, keys):
    """How many of keys answer new_vector (lookups of 10,000 keys each)."""
    good = 0
    for i in range(0, len(keys), 10000):
        ks = keys[i:i + 10000]
        r = H.infer(port, "m", [ks], binary=True)
        if r.status != 200:
            continue
        got = H.decode_output(r)[1]
        good += sum(1 for j, k in enumerate(ks) if got[j * DIM:(j + 1) * DIM] == new_vector(k))
    return good


def shm_full(t, cl):
    if not os.environ.get("KAFKA_MOCK") or not os.environ.get("HPS_PUSH"):
        t.skip("a full /dev/shm under Kafka updates", "no kafka-mock or hps-push built")
        return
    m = cl.gen_model("m", rows=[20000], dims=[DIM])
    with H.KafkaMock(["hps_et.m.sparse_embedding0"]) as km:
        conf = cl.write_config("hps.ini", m.ini_text, kafka_settings(km, [
            ("volatile_db", "shared_memory_size", "256MiB"),
            ("persistent_db", "type", "disabled")]))
        c = cl.start_coordinator(conf)
        w = cl.start_worker(conf)
        kpt = [m.file_keys[0]]
        r = H.infer(w.http_port, "m", kpt, binary=True)
        t.ok(r.status == 200 and H.decode_output(r)[1] == m.expected(kpt),
             "before: the 20,000 model rows exact")
        ballast = "/dev/shm/ballast"
        st = os.statvfs("/dev/shm")
        with open(ballast, "wb") as f:
            os.posix_fallocate(f.fileno(), 0, max(1, st.f_bavail * st.f_frsize - (4 << 20)))
        keys = [H.gen_key(0, 20000 + i) for i in range(NEW)]
        rc = H.push_updates(km.bootstrap, "m", "sparse_embedding0", DIM,
                            [(k, new_vector(k)) for k in keys])
        t.eq(rc, 0, "hps-push delivered %d new keys" % NEW)
        full = H.wait_until(lambda: "No space left on device" in c.log(), 30)
        t.ok(full, "with /dev/shm full the coordinator logs \"No space left on device\"",
             c.log()[-1500:])
        r = H.infer(w.http_port, "m", kpt, binary=True)
        got = H.decode_output(r)[1] if r.status == 200 else []
        want = m.expected(kpt)
        bad = sum(1 for i in range(len(kpt[0]))
                  if got[i * DIM:(i + 1) * DIM] != want[i * DIM:(i + 1) * DIM])
        t.ok(r.status == 200 and bad == 0,
             "while /dev/shm is full, the 20,000 model rows keep their vectors (none evicted)",
             "HTTP %d, %d rows wrong" % (r.status, bad))
        os.unlink(ballast)
        t0 = time.monotonic()
        done = H.wait_until(lambda: count_new(w.http_port, keys) == NEW, 60, 1.0)
        t.ok(done, "room again: all %d pushed keys answer their new vector (%.1f s)" %
             (NEW, time.monotonic() - t0), "%d of %d" % (count_new(w.http_port, keys), NEW))
        r = H.infer(w.http_port, "m", kpt, binary=True)
        t.ok(r.status == 200 and H.decode_output(r)[1] == m.expected(kpt),
             "the model rows still exact afterwards")
        # A reboot empties /dev/shm: with initialize_after_startup = false
        # and no persistent DB, the updates the segment held are gone, and
        # the volatile group's offsets are past them: said, not silent.
        H.retire([c, w], cl.segment)
        conf = cl.write_config("hps.ini", open(conf).read(),
                               [("volatile_db", "initialize_after_startup", "false")])
        c = cl.start_coordinator(conf)
        line = next((x for x in c.log().splitlines() if "there is no /dev/shm/hps." in x), "")
        t.ok("WARN" in line and "initialize_after_startup = false" in line and
             "they are lost" in line, "after a reboot, initialize_after_startup = false without "
             "a persistent DB warns that the updates the segment held are lost", c.log()[-1500:])


def exact(port, m, kpt):
    r = H.infer(port, "m", kpt, binary=True)
    return r.status == 200 and H.decode_output(r)[1] == m.expected(kpt)


def watch(t, port, m, kpt, seconds):
    """Lookups of kpt in a loop for that long, each between two readiness
    probes; returns (lookups, those not exact while both probes said
    ready): ready with a wrong answer is the one thing not allowed."""
    n = wrong = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        before = H.ready_status(port)
        r = H.infer(port, "m", kpt, binary=True)
        ok = r.status == 200 and H.decode_output(r)[1] == m.expected(kpt)
        n += 1
        if not ok and before == 200 and H.ready_status(port) == 200:
            wrong += 1
            if wrong == 1:
                t.diag("ready, yet HTTP %d, %s" % (r.status, r.body[:200] if r.status != 200
                                                   else "not the model's rows"))
    return n, wrong


def pdb_read_only(t, cl):
    m = cl.gen_model("m", rows=[5000], dims=[16])
    pdb = cl.path("rocksdb")
    # miss_timeout_ms 2000: what is asked during the reload's re-execution
    # waits for the next image (README: with the default 50, a few such
    # keys get their defaults in each reload, fault or not).
    conf = cl.write_config("hps.ini", m.ini_text, [("persistent_db", "path", pdb),
                                                   ("volatile_db", "initial_cache_rate", 0.5),
                                                   ("worker", "miss_timeout_ms", 2000)])
    c = cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    kpt = [m.pdb_only_keys(0, 0.5)[:32]]
    t.ok(exact(w.http_port, m, kpt), "before: keys outside shared memory exact")
    for cmd in (["mount", "--bind", pdb, pdb], ["mount", "-o", "remount,ro,bind", pdb]):
        subprocess.run(cmd, check=True)
    t.ok(exact(w.http_port, m, kpt), "directory read-only, before SIGHUP: still exact")
    n = c.log().count("SIGHUP: reading")
    c.kill(signal.SIGHUP)
    looked, wrong = watch(t, w.http_port, m, kpt, 5.0)
    t.ok(c.log().count("SIGHUP: reading") > n and
         "ERROR" in c.log().split("SIGHUP: reading")[-1],
         "the reload on a read-only persistent DB fails (logged)", c.log()[-1500:])
    t.eq(wrong, 0, "from the SIGHUP on: keys outside shared memory exact, or not ready "
         "(%d lookups in 5 s)" % looked)
    t.ok(c.alive(), "the coordinator stays up")
    subprocess.run(["umount", pdb], check=True)
    looked, wrong = watch(t, w.http_port, m, kpt, 10.0)
    t.eq(wrong, 0, "writable again: exact, or not ready (%d lookups in 10 s)" % looked)
    t.ok(H.wait_until(lambda: H.ready_status(w.http_port) == 200, 60, 0.1) and
         exact(w.http_port, m, kpt), "and then ready and exact", c.log()[-1500:])

def pdb_not_from_files(t, cl):
    """A persistent DB that holds only the updates ([persistent_db]
    initialize_after_startup = false: the files never go into it), then a
    reboot: the volatile DB is filled again, and must take the updated
    vectors from the persistent DB, not the files' (before: 200 of 200
    updated keys answered their pre-update vectors)."""
    if not os.environ.get("KAFKA_MOCK") or not os.environ.get("HPS_PUSH"):
        t.skip("a reboot with a persistent DB of updates only", "no kafka-mock or hps-push")
        return
    m = cl.gen_model("m", rows=[3000], dims=[DIM], subdir="m_pdb")
    keys = m.file_keys[0][:200]  # in shared memory (initial_cache_rate 1)
    with H.KafkaMock(["hps_et.m.sparse_embedding0"]) as km:
        conf = cl.write_config("hps.ini", m.ini_text, kafka_settings(km, [
            ("persistent_db", "path", cl.path("rocksdb_updates")),
            ("persistent_db", "initialize_after_startup", "false")]))
        c = cl.start_coordinator(conf)
        w = cl.start_worker(conf)
        rc = H.push_updates(km.bootstrap, "m", "sparse_embedding0", DIM,
                            [(k, new_vector(k)) for k in keys])
        t.ok(rc == 0 and H.wait_until(lambda: count_new(w.http_port, keys) == len(keys), 30),
             "200 updates applied")
        time.sleep(1.5)  # committed by both layers' consumers
        H.retire([c, w], cl.segment)  # a reboot: shared memory gone, RocksDB kept
        c = cl.start_coordinator(conf)
        w = cl.start_worker(conf)
        n = count_new(w.http_port, keys)
        t.eq(n, len(keys), "after a reboot: the 200 updated keys answer their updates, which "
             "only the persistent DB holds (%d of 200)" % n)


def body(t, cl):
    shm_full(t, cl)
    H.retire(cl.procs, cl.segment)
    pdb_not_from_files(t, cl)
    H.retire(cl.procs, cl.segment)
    with H.Cluster("env_faults_ro") as cl2:
        try:
            pdb_read_only(t, cl2)
        finally:
            cl2.failed = cl2.failed or bool(t.failed)


if __name__ == "__main__":
    in_namespace()
    H.run_main("env_faults", body)
