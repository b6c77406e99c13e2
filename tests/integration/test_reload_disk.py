#!/usr/bin/env python3
"""
int-reload_disk: a reload whose new tables would not fit the persistent
DB's disk is refused before anything is written (issue 20: not enough room
for the new version beside the old fails with a message naming what is
short, and the old version keeps serving).

The serving version's column families are held until the workers switch
(they answer the serving segment's misses meanwhile), so a table ingested
anew needs its bytes beside them.  The persistent DB lives on a tmpfs of
its own (mount needs CAP_SYS_ADMIN: skipped without it); a ballast file
leaves less room than a version's files:
  - a fresh start: exit 5 before it builds its segment (logged: the path,
    MiB free, MiB needed), its fresh persistent DB removed;
  - SIGHUP to version 2: refused at once (logged: the path, MiB free, MiB
    needed), nothing re-ingested, version 1 serves, its RocksDB record
    unchanged;
  - the ballast removed, SIGHUP again: version 2 loads and serves.
"""
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402


def body(t, cl):
    why = H.on_tmpfs(cl, "pdbfs", 400, lambda mnt: run(t, cl, mnt))
    if why:
        H.Tap.skip_all(why)


def run(t, cl, mnt):
    settings = [("persistent_db", "path", os.path.join(mnt, "rocksdb")),
                ("volatile_db", "initial_cache_rate", 0.5)]
    models = {v: cl.gen_model("m", rows=[200000], dims=[32], subdir="m_v%d" % v, version=v)
              for v in (1, 2)}
    conf = cl.write_config("hps.ini", models[1].ini_text, settings)
    files_mib = sum(os.path.getsize(os.path.join(models[2].table_dirs[0], f))
                    for f in ("key", "emb_vector")) >> 20
    ballast = os.path.join(mnt, "ballast")

    def leave_half():  # a ballast file leaves half of a version's bytes free
        st = os.statvfs(mnt)
        free = st.f_bavail * st.f_frsize
        with open(ballast, "ab") as f:
            f.write(b"\0" * max(0, free - (files_mib << 20) // 2))

    # A fresh start with too little disk stops before it builds or writes
    # anything (it used to load until RocksDB hit ENOSPC).
    leave_half()
    rc, out = cl.run_coordinator(conf, timeout=60)
    line = next((x for x in out.splitlines() if "not enough disk" in x), "")
    t.ok(rc == H.EXIT_PDB and os.path.join(mnt, "rocksdb") in line and "MiB free" in line and
         "nothing was loaded" in line and "building shared memory" not in out,
         "a fresh start with too little disk: exit 5 before building its segment, naming "
         "the path and the MiB free and needed", "exit %d\n%s" % (rc, out[-1500:]))
    t.ok(not os.path.exists(os.path.join(mnt, "rocksdb")), "its fresh persistent DB was removed")
    os.unlink(ballast)

    c = cl.start_coordinator(conf)
    w = cl.start_worker(conf)
    leave_half()
    kpt = [models[1].file_keys[0][:64]]

    cl.write_config("hps.ini", models[2].ini_text, settings)
    n = c.log().count("SIGHUP: reading")
    c.kill(signal.SIGHUP)
    refused = H.wait_until(lambda: c.log().count("SIGHUP: reading") > n and
                           "not enough disk for the persistent DB" in c.log(), 20)
    line = next((x for x in c.log().splitlines() if "not enough disk" in x), "")
    t.ok(refused and os.path.join(mnt, "rocksdb") in line and "MiB free" in line,
         "SIGHUP to version 2 with too little disk: refused, naming the path and the MiB "
         "free and needed", c.log()[-1500:])
    t.ok("ingested into the persistent DB" not in c.log().split("SIGHUP: reading")[-1],
         "nothing was ingested")
    r = H.infer(w.http_port, "m", kpt, binary=True)
    t.ok(H.model_versions(w.http_port) == ["1"] and r.status == 200 and
         H.decode_output(r)[1] == models[1].expected(kpt),
         "version 1 serves exactly, keys outside shared memory included")

    os.unlink(ballast)
    n_pub = c.log().count("published /dev/shm/hps.")
    c.kill(signal.SIGHUP)
    t.ok(H.wait_until(lambda: c.log().count("published /dev/shm/hps.") > n_pub, 60),
         "with the room back, the reload to version 2 builds and publishes", c.log()[-1500:])
    t.ok(H.wait_until(lambda: H.model_versions(w.http_port) == ["2"], 10), "version 2 serves")
    r = H.infer(w.http_port, "m", kpt, binary=True)
    t.ok(r.status == 200 and H.decode_output(r)[1] == models[2].expected(kpt),
         "version 2's vectors, exactly")


if __name__ == "__main__":
    H.run_main("reload_disk", body)
