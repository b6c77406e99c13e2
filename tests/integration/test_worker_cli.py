#!/usr/bin/env python3
"""
int-worker_cli: hps-worker's command line and port checks (and the
options hps-coordinator's --help lists).

Checks: --help lists every option each program accepts; --version;
getopt's messages start with the program's name, not its path;
--log-level (refused when unknown, overrides [hps] log_level both ways);
equal --http-port and --metrics-port are a usage error (exit 2); a port
that the instance pushes past 65535 is a configuration error (exit 2)
naming the key, the instance and the port; a port in use (HTTP or metrics,
from an option or from [worker] + instance) exits 3 naming that listener,
without a "ready" line first (beside a serving coordinator); a worker of
another user than the segment's owner logs why it cannot attach (as root).
"""
import os
import re
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402

WORKER_OPTIONS = ["-c", "--config", "-d", "--device", "-i", "--instance", "--http-port",
                  "--metrics-port", "-l", "--log-level", "-h", "--help", "-V", "--version"]
COORDINATOR_OPTIONS = ["-c", "--config", "-l", "--log-level", "-h", "--help", "-V", "--version"]


def run(cmd, timeout=30):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def busy_port():
    """A listening socket on a kernel-chosen port (kept open: the port is in use)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    return s, s.getsockname()[1]


def ready_line(text):
    """The worker's "ready" or "serving" line ("already in use" is neither)."""
    return re.search(r"\bready\b|serving \d+ models", text)


def help_and_version(t):
    for name, exe, opts in (("hps-worker", H.WORKER, WORKER_OPTIONS),
                            ("hps-coordinator", H.COORDINATOR, COORDINATOR_OPTIONS)):
        rc, out, _ = run([exe, "--help"])
        missing = [o for o in opts if not re.search(r"(^|[\s\[|,])%s\b" % re.escape(o), out)]
        t.ok(rc == 0 and not missing, "%s --help lists %s" % (name, " ".join(opts)),
             "exit %d, missing %s:\n%s" % (rc, missing, out))
        for v in ("--version", "-V"):
            rc, out, _ = run([exe, v])
            t.ok(rc == 0 and re.fullmatch(r"%s \S+\n" % name, out), "%s %s" % (name, v),
                 "exit %d: %r" % (rc, out))
        rc, _, err = run([exe, "--x"])
        first = err.splitlines()[0] if err else ""
        t.ok(rc == 2 and first == "%s: unrecognized option '--x'" % name and exe not in err,
             "%s: getopt's message starts with the name, not the path" % name,
             "exit %d: %r" % (rc, first))
    rc, _, err = run([H.WORKER, "-c", "x.ini", "--device"])
    t.ok(rc == 2 and err.startswith("hps-worker: option '--device' requires an argument"),
         "hps-worker: a missing argument too", "exit %d: %r" % (rc, err[:200]))


def usage_errors(t, conf):
    rc, _, err = run([H.WORKER, "-c", conf, "--device", "0", "--log-level", "verbose"])
    t.ok(rc == 2 and "hps-worker: --log-level verbose: use error, warn, info or debug" in err,
         "--log-level verbose: exit 2 naming the accepted levels", "exit %d: %s" % (rc, err))
    rc, out, err = run([H.WORKER, "-c", conf, "--device", "0", "--http-port", "18720",
                        "--metrics-port", "18720"])
    t.ok(rc == 2 and "--http-port and --metrics-port are both 18720: they must differ" in err,
         "equal --http-port and --metrics-port: exit 2 naming both", "exit %d: %s" % (rc, err))


def instance_overflow(t, cl, model):
    for key, other, want in (("http_port", ("metrics_port", 65000), "65536"),
                             ("metrics_port", ("http_port", 65000), "65536")):
        conf = cl.write_config("over-%s.ini" % key, model.ini_text,
                               [("worker", key, 65535), ("worker", other[0], other[1])])
        rc, out, err = run([H.WORKER, "-c", conf, "--device", "0", "--instance", "1"])
        msg = "[worker] %s = 65535 with --instance 1 gives port %s, outside 1..65535" % (key, want)
        t.ok(rc == 2 and msg in err and not ready_line(err),
             "%s 65535 + --instance 1: exit 2 naming the key, the instance and the port" % key,
             "exit %d: %s" % (rc, err))
    conf = cl.write_config("mixed.ini", model.ini_text,
                           [("worker", "http_port", 18000), ("worker", "metrics_port", 18002)])
    rc, out, err = run([H.WORKER, "-c", conf, "--device", "0", "--http-port", "18004",
                        "--instance", "2"])
    t.ok(rc == 2 and "both 18004 (--http-port; [worker] metrics_port 18002 + instance 2)" in err,
         "--http-port equal to metrics_port + instance: exit 2", "exit %d: %s" % (rc, err))


def log_level(t, cl, model):
    """No coordinator: the worker waits for one (WARN), serving HTTP (INFO)."""
    for ini_level, cli, want_info in (("error", "info", True), ("info", "warn", False)):
        conf = cl.write_config("level-%s.ini" % ini_level, model.ini_text,
                               [("hps", "log_level", ini_level),
                                ("volatile_db", "shared_memory_name",
                                 cl.new_segment_name("none-%s" % ini_level))])
        w = cl._spawn("worker", [H.WORKER, "-c", conf, "--device", "0", "-l", cli,
                                 "--http-port", "0", "--metrics-port", "0"],
                      "worker-level-%s.log" % cli)
        saw = H.wait_until(lambda: "no segment" in w.log() and
                           (not want_info or "serving" in w.log()), 10.0)
        if not want_info:
            time.sleep(0.5)  # the INFO "serving" line would be out by now
        log = w.log()
        t.ok(saw and w.alive() and ("INFO " in log) == want_info,
             "[hps] log_level %s, --log-level %s: INFO lines %s" %
             (ini_level, cli, "shown" if want_info else "hidden"), log)
        w.kill()
        w.wait(10)


def ports_in_use(t, cl, model):
    conf = cl.write_config("hps.ini", model.ini_text, [])
    coord = cl.start_coordinator(conf)
    t.ok(coord.alive(), "a coordinator serves (a worker would log 'ready')")
    s, port = busy_port()
    try:
        cases = [
            (["--http-port", "0", "--metrics-port", str(port)],
             "cannot serve metrics on 127.0.0.1:%d (--metrics-port): " % port),
            (["--http-port", str(port), "--metrics-port", "0"],
             "cannot serve HTTP on 127.0.0.1:%d (--http-port): " % port),
        ]
        for args, msg in cases:
            rc, out, err = run([H.WORKER, "-c", conf, "--device", "0"] + args)
            t.ok(rc == 3 and msg + "Address already in use" in err,
                 "%s in use: exit 3 naming that listener" % args[0 if "HTTP" in msg else 2],
                 "exit %d: %s" % (rc, err))
            t.ok(not ready_line(err),
                 "no 'ready' or 'serving' line before the port error", err)
        conf2 = cl.write_config("busy.ini", model.ini_text,
                                [("worker", "http_port", port - 1),
                                 ("worker", "metrics_port", H.free_port() - 1)])
        rc, out, err = run([H.WORKER, "-c", conf2, "--device", "0", "--instance", "1"])
        msg = ("cannot serve HTTP on 127.0.0.1:%d ([worker] http_port %d + instance 1): "
               "Address already in use" % (port, port - 1))
        t.ok(rc == 3 and msg in err and not ready_line(err),
             "[worker] http_port + instance in use: exit 3 naming the key and the instance",
             "exit %d: %s" % (rc, err))
    finally:
        s.close()
    attach_denied(t, cl, conf)


def attach_denied(t, cl, conf):
    """A worker of another user than the segment's owner (the coordinator's
    shared_memory_mode, 0600 by default) logs who owns it, the mode and its
    own uid, and keeps trying (it does not exit)."""
    if os.geteuid() != 0:
        t.skip("a worker of another user: permission denied, named", "not root")
        return
    nobody = 65534
    os.chmod(cl.tmp, 0o755)  # the worker reads the INI
    os.chmod(conf, 0o644)
    log_path = cl.path("nobody.log")

    def as_nobody():
        os.setgid(nobody)
        os.setuid(nobody)
    with open(log_path, "wb") as log:
        p = subprocess.Popen([H.WORKER, "-c", conf, "--device", "0", "--http-port", "0",
                              "--metrics-port", "0"], stdin=subprocess.DEVNULL, stdout=log,
                             stderr=subprocess.STDOUT, preexec_fn=as_nobody)
    try:
        def text():
            with open(log_path, errors="replace") as f:
                return f.read()
        want = re.compile(r"cannot attach /dev/shm/hps\.\S+: permission denied: it is owned by "
                          r"uid 0 gid 0 with mode 0600, and this process runs as uid 65534 ")
        got = H.wait_until(lambda: want.search(text()), 10, 0.05)
        t.ok(got and p.poll() is None, "a worker of another user: permission denied, naming the "
             "owner, the mode and its uid; it keeps trying", text())
    finally:
        p.kill()
        p.wait(10)


def body(t, cl):
    help_and_version(t)
    model = cl.gen_model("m", rows=[100], dims=[4])
    conf = cl.write_config("plain.ini", model.ini_text, [])
    usage_errors(t, conf)
    instance_overflow(t, cl, model)
    log_level(t, cl, model)
    ports_in_use(t, cl, model)


if __name__ == "__main__":
    H.run_main("worker_cli", body)
