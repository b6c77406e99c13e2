#!/usr/bin/env python3
"""
int-bench: hps-bench --verify against a real coordinator and worker.

A model written by `hps-gen model --model-version 2` (every vector differs
from version 1's) is served; `hps-bench --quick --no-redis` checks its
answers exactly and must find every row equal to version 2's vector (it
used to check version 1's and report every row wrong).  The same with
version 1, and with the INI's `version` line removed (so the INI says 1)
while the files hold version 2: hps-bench takes the version from row 0 of
each table's files, not from the INI alone.
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402

BENCH = os.environ.get("HPS_BENCH", "")
ROWS = [3000, 500]
DIMS = [8, 4]
DEFAULTS = [0.5, -1.0]
SETTINGS = [("volatile_db", "initial_cache_rate", 1.0)]


def requests_file(t, cl, model, conf):
    out = cl.path("req-%s.bin" % os.path.basename(model.dir))
    r = subprocess.run([H.GEN, "requests", "--model-dir", model.dir, "--config", conf, "--batch",
                        "16", "--count", "4", "--out", out, "--quiet"],
                       capture_output=True, text=True, timeout=60)
    t.eq(r.returncode, 0, "hps-gen requests for %s" % model.dir)
    if r.returncode != 0:
        t.diag(r.stderr)
    return out


def bench(t, cl, port, conf, req, what, want_version):
    r = subprocess.run([BENCH, "--url", "http://127.0.0.1:%d" % port, "--config", conf,
                        "--model", "m", "--quick", "--no-redis", req],
                       capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    checks = re.findall(r"verify ours .* (\d+) wrong: (PASS|FAIL)", out)
    t.ok(r.returncode == 0 and checks == [("0", "PASS")],
         "%s: hps-bench --verify passes (exit %d, %s)" % (what, r.returncode, checks), out[-3000:])
    t.ok(("hps-gen version %d" % want_version) in out,
         "%s: hps-bench checks against hps-gen version %d" % (what, want_version), out[-3000:])


def body(t, cl):
    if not BENCH or not os.access(BENCH, os.X_OK):
        t.skip_all("HPS_BENCH=%r is not an executable" % BENCH)
    r = subprocess.run([BENCH, "--version"], capture_output=True, text=True, timeout=30)
    t.ok(r.returncode == 0 and re.fullmatch(r"hps-bench \S+\n", r.stdout),
         "hps-bench --version prints 'hps-bench VERSION'", "%d %r" % (r.returncode, r.stdout))
    r = subprocess.run([BENCH, "--help"], capture_output=True, text=True, timeout=30)
    t.ok(r.returncode == 0 and "--version" in r.stdout and "-h, --help" in r.stdout,
         "hps-bench --help lists -h, --help and --version", r.stdout)
    for version in (2, 1):
        seg = cl.new_segment_name("v%d" % version)
        m = cl.gen_model("m", rows=ROWS, dims=DIMS, defaults=DEFAULTS, subdir="m_v%d" % version,
                         segment=seg, version=version)
        # hps-gen's header comment holds its (long) command line in lines
        # that hps-gen requests' INI reader takes (inih: 200 bytes at most).
        ini = m.ini_text
        t.ok(max(len(x) for x in ini.splitlines()) <= 200,
             "hps-gen model's INI has no line over 200 bytes (command line of %d bytes)"
             % sum(len(x) for x in ini.splitlines() if x.startswith(";   ")))
        conf = cl.write_config("hps-v%d.ini" % version, ini, SETTINGS)
        req = requests_file(t, cl, m, conf)
        c = cl.start_coordinator(conf, log_name="coordinator-v%d.log" % version)
        w = cl.start_worker(conf, instance=version)
        bench(t, cl, w.http_port, conf, req, "version %d" % version, version)
        if version == 2:
            # The INI without its version line says version 1; the files
            # (and so the answers) are version 2's.
            no_ver = "\n".join(x for x in ini.splitlines() if not x.startswith("version ="))
            conf1 = cl.write_config("hps-v2-nover.ini", no_ver, SETTINGS)
            bench(t, cl, w.http_port, conf1, req, "version 2, INI without version", 2)
        w.kill()
        c.kill()
        w.wait(10)
        c.wait(10)


if __name__ == "__main__":
    H.run_main("bench", body)
