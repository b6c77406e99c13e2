#!/usr/bin/env python3
"""
int-reload_settings: settings a reload (SIGHUP) changes that the running
workers must follow, not only the coordinator (a reconfiguration audit
found both ignored by workers started before the change):

  (1) [hps] heartbeat_interval_ms 100 -> 1500 with worker_timeout_ms
      1000 -> 3000 (legal together): the reloaded coordinator beats every
      1.5 s; a worker judging it by its own start-time 1000 ms took it for
      gone every few seconds, said not ready and answered the default for
      keys outside shared memory.  The coordinator records its timeout in
      the segment, at once in a reload's new segment, and workers take it
      where it is larger: ready and exact throughout.
  (2) [model.m] default_value_for_each_table 0.5 -> 7: a running worker kept
      answering 0.5 for keys found nowhere while the coordinator (hps-shm
      info) and every worker started since said 7.  A changed default is a
      change of the model's shape now: the running worker follows the
      coordinator's INI text in the segment.
"""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402

ROWS, DIM = 4000, 8


def sighup(t, c, what):
    n = c.log().count("published /dev/shm/hps.")
    c.kill(signal.SIGHUP)
    t.ok(H.wait_until(lambda: c.log().count("published /dev/shm/hps.") > n, 60),
         "%s: the coordinator reloaded and published" % what, c.log()[-1500:])


def body(t, cl):
    m = cl.gen_model("m", rows=[ROWS], dims=[DIM], defaults=[0.5])
    settings = [("volatile_db", "initial_cache_rate", 0.5),
                ("hps", "heartbeat_interval_ms", 100),
                ("hps", "worker_timeout_ms", 1000),
                ("worker", "miss_timeout_ms", 2000)]  # rides through the reload's re-execution
    conf = cl.write_config("hps.ini", m.ini_text, settings)
    c = cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    unknown = m.unknown_keys(0, 1)
    kpt = [m.pdb_only_keys(0, 0.5)[:32] + unknown]

    def watch(seconds, model):
        """(lookups, not ready probes, inexact answers) over that long."""
        n = not_ready = wrong = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            not_ready += H.ready_status(w.http_port) != 200
            r = H.infer(w.http_port, "m", kpt, binary=True)
            wrong += r.status != 200 or H.decode_output(r)[1] != model.expected(kpt)
            n += 1
            time.sleep(0.05)
        return n, not_ready, wrong

    t.eq(watch(1.0, m)[1:], (0, 0), "before: ready, keys outside shared memory exact")

    # (1) a slower heartbeat and a longer timeout
    cl.write_config("hps.ini", m.ini_text, settings + [("hps", "heartbeat_interval_ms", 1500),
                                                        ("hps", "worker_timeout_ms", 3000)])
    sighup(t, c, "heartbeat 1500 ms, worker_timeout_ms 3000")
    n, not_ready, wrong = watch(6.0, m)
    t.eq((not_ready, wrong), (0, 0), "for 6 s after it: the running worker ready in every probe "
         "and every answer exact (%d lookups)" % n)
    t.eq(cl.shm_info()["segment"].get("coordinator_timeout_ms"), 3000,
         "hps-shm info: the coordinator's timeout is 3000 ms")

    # (2) another default value
    m7 = cl.gen_model("m", rows=[ROWS], dims=[DIM], defaults=[7.0], subdir="m7")
    cl.write_config("hps.ini", m7.ini_text, settings + [("hps", "heartbeat_interval_ms", 1500),
                                                         ("hps", "worker_timeout_ms", 3000)])
    sighup(t, c, "default_value_for_each_table 7")

    def unknown_answer():
        r = H.infer(w.http_port, "m", [unknown], binary=True)
        return H.decode_output(r)[1] if r.status == 200 else r.status
    t.ok(H.wait_until(lambda: unknown_answer() == [7.0] * DIM, 5, 0.05),
         "the running worker answers the new default 7 for a key found nowhere",
         unknown_answer())
    t.eq(watch(1.0, m7)[1:], (0, 0), "and every answer exact with it, ready")
    w2 = cl.start_worker(conf, instance=1)
    r = H.infer(w2.http_port, "m", [unknown], binary=True)
    t.eq(H.decode_output(r)[1], [7.0] * DIM, "a worker started since answers the same")


if __name__ == "__main__":
    H.run_main("reload_settings", body)
