"""
hpstest.py -- shared helpers of the integration suite (real processes).

Python 3 standard library only.  Each test script:

    t = Tap()
    with Cluster("lookup") as cl:          # temp dir, unique segment name
        model = cl.gen_model(...)          # hps-gen model files + INI text
        conf = cl.write_config(...)        # INI with overrides
        coord = cl.start_coordinator(conf)
        w = cl.start_worker(conf, instance=0)
        ...
    t.done()

Cluster.__exit__ always SIGKILLs every child it started (by pid), removes
/dev/shm/hps.<segment> and the temp dir; on failure it prints the tail of
every process log to stderr (meson --print-errorlogs shows it).

The generator port (gen_key, gen_vector) follows include/hps/gen.h
bit-exactly; check_gen_port() compares it with `hps-gen row`.
"""
import array
import ctypes
import http.client as _httpclient
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback

M64 = (1 << 64) - 1

COORDINATOR = os.environ.get("HPS_COORDINATOR", "")
WORKER = os.environ.get("HPS_WORKER", "")
GEN = os.environ.get("HPS_GEN", "")
SHM = os.environ.get("HPS_SHM", "")

# Exit codes of hps-coordinator (coordinator/coord.h).
EXIT_OK, EXIT_RUNTIME, EXIT_USAGE, EXIT_SEGMENT, EXIT_MODEL, EXIT_PDB, EXIT_DDB = 0, 1, 2, 3, 4, 5, 6


# --------------------------------------------------------------------------
# TAP
# --------------------------------------------------------------------------

class Tap:
    """TAP producer; the plan is printed at the end ("1..N" last is valid TAP)."""

    def __init__(self):
        self.n = 0
        self.failed = 0
        self.t0 = time.monotonic()

    def ok(self, cond, desc, diag=None):
        self.n += 1
        desc = desc.replace("#", "no.")
        print("%s %d - %s" % ("ok" if cond else "not ok", self.n, desc), flush=True)
        if not cond:
            self.failed += 1
            if diag is not None:
                self.diag(diag)
        return bool(cond)

    def eq(self, got, want, desc):
        return self.ok(got == want, desc, "got %r, want %r" % (got, want))

    def diag(self, text):
        for line in str(text).splitlines() or [""]:
            print("# " + line, flush=True)

    def exception(self, exc):
        self.ok(False, "unexpected exception: %s: %s" % (type(exc).__name__, exc),
                traceback.format_exc())

    def skip(self, desc, reason):
        """One check not run: "ok N - desc # SKIP reason"."""
        self.n += 1
        print("ok %d - %s # SKIP %s" % (self.n, desc.replace("#", "no."), reason), flush=True)

    @staticmethod
    def skip_all(reason):
        """Skip the whole script: the plan "1..0 # SKIP <reason>", exit 0.

        meson reports a TAP test (protocol : 'tap') that does this as SKIP;
        exit 77 there counts as ERROR.  (Tests with meson's default exitcode
        protocol, such as tests/gpu/, skip with exit 77 instead.)
        """
        print("1..0 # SKIP %s" % reason, flush=True)
        sys.exit(0)

    def done(self):
        print("1..%d" % self.n, flush=True)
        self.diag("%d checks, %d failed, %.1f s" % (self.n, self.failed,
                                                     time.monotonic() - self.t0))
        sys.exit(1 if self.failed or self.n == 0 else 0)


# --------------------------------------------------------------------------
# Generator port (include/hps/gen.h, include/hps/hps.h)
# --------------------------------------------------------------------------

def _rotr(x, n):
    return ((x >> n) | (x << (64 - n))) & M64


def rrxmrrxmsx_0(x):
    x &= M64
    x ^= _rotr(x, 25) ^ _rotr(x, 50)
    x = (x * 0xA24BAED4963EE407) & M64
    x ^= _rotr(x, 24) ^ _rotr(x, 49)
    x = (x * 0x9FB21C651E98DF25) & M64
    return x ^ (x >> 28)


GOLDEN = 0x9E3779B97F4A7C15
DIM_MUL = 0xD1B54A32D192ED03
VERSION_MUL = 0x8CB92BA72F3D8DD7  # include/hps/gen.h: HPS_GEN_VERSION_MUL


def gen_key(table, i):
    """hps_gen_key(table, i): the i-th key of a table of a 64-bit-key model."""
    m = (1 << 62) - 1
    x = (i + (table + 1) * GOLDEN) & m
    x ^= x >> 31
    x = (x * 0xBF58476D1CE4E5B9) & m
    x ^= x >> 29
    x = (x * 0x94D049BB133111EB) & m
    x ^= x >> 32
    return x


def _perm32(table, x):
    x = (x + (table + 1) * 0x9E3779B9) & 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x21F0AAAD) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x735A2D97) & 0xFFFFFFFF
    x ^= x >> 15
    return x


def gen_key32(table, i):
    """hps_gen_key32(table, i): the i-th key of a 32-bit-key model."""
    x = _perm32(table, i & 0xFFFFFFFF)
    if x == 0xFFFFFFFF:
        x = _perm32(table, x)
    return x


def gen_key_w(table, i, key_bytes):
    return gen_key32(table, i) if key_bytes == 4 else gen_key(table, i)


def gen_vector(table, key, dim, version=1):
    """hps_gen_vector_v() (version 1: hps_gen_vector()): a list of dim
    floats, each k / 2^23 (exact)."""
    seed = rrxmrrxmsx_0((key & M64) ^ (((table + 1) * GOLDEN) & M64))
    seed ^= ((max(version, 1) - 1) * VERSION_MUL) & M64
    out = []
    for d in range(dim):
        h = rrxmrrxmsx_0((seed + (d + 1) * DIM_MUL) & M64)
        k = (h >> 40) - (1 << 23)
        out.append(k / 8388608.0)
    return out


def f32(x):
    """x rounded to float32 (what a JSON "%.9g" number denotes)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def check_gen_port(tap, samples=((0, 0, 16, 8), (0, 12345, 16, 8), (1, 7, 8, 8),
                                 (3, 99999, 5, 8), (0, 5, 4, 4), (2, 4000000, 3, 4))):
    """Compare gen_key(32)/gen_vector with `hps-gen row` for a few
    (table, index, dim, key_bytes)."""
    good = True
    for table, index, dim, kb in samples:
        out = subprocess.run([GEN, "row", "--table", str(table), "--index", str(index),
                              "--dim", str(dim), "--key-bytes", str(kb)],
                             capture_output=True, text=True, timeout=30)
        fields = out.stdout.split()
        key = gen_key_w(table, index, kb)
        want = [key] + gen_vector(table, key, dim)
        got = [int(fields[0])] + [f32(float(v)) for v in fields[1:]] if fields else []
        good &= out.returncode == 0 and got == want
        if got != want:
            tap.diag("hps-gen row --table %d --index %d: %r, port: %r" %
                     (table, index, out.stdout.strip(), want))
    return tap.ok(good, "Python port of hps_gen_key/hps_gen_key32/hps_gen_vector equals "
                  "`hps-gen row`")


# --------------------------------------------------------------------------
# INI editing
# --------------------------------------------------------------------------

def ini_set(text, section, key, value):
    """Set key = value in [section] of INI text (replace or insert)."""
    lines = text.splitlines()
    header = "[%s]" % section
    start = None
    for i, line in enumerate(lines):
        if line.strip() == header:
            start = i
            break
    if start is None:
        lines += ["", header, "%s = %s" % (key, value)]
        return "\n".join(lines) + "\n"
    end = len(lines)
    for j in range(start + 1, len(lines)):
        if lines[j].strip().startswith("["):
            end = j
            break
    pat = re.compile(r"^\s*%s\s*[=:]" % re.escape(key))
    for j in range(start + 1, end):
        if pat.match(lines[j]):
            lines[j] = "%s = %s" % (key, value)
            return "\n".join(lines) + "\n"
    lines.insert(start + 1, "%s = %s" % (key, value))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------

class Response:
    def __init__(self, status, headers, body, elapsed):
        self.status = status
        self.headers = headers  # dict, lower-case names
        self.body = body
        self.elapsed = elapsed

    def json(self):
        return json.loads(self.body.decode("utf-8"))

    def is_json_error(self):
        """Triton's error form: application/json body {"error": "<string>"}."""
        try:
            j = self.json()
        except Exception:
            return False
        return (self.headers.get("content-type", "").startswith("application/json") and
                isinstance(j, dict) and isinstance(j.get("error"), str) and j["error"] != "")

    def __repr__(self):
        return "<HTTP %d %r>" % (self.status, self.body[:300])


def http(port, method, path, body=None, headers=None, timeout=20.0, host="127.0.0.1", pause=0.0):
    """One request on a fresh connection; returns Response.  pause: seconds
    between connecting and sending the request (a slow client)."""
    t0 = time.monotonic()
    conn = _httpclient.HTTPConnection(host, port, timeout=timeout)
    try:
        if pause:
            conn.connect()
            time.sleep(pause)
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        data = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        return Response(r.status, hdrs, data, time.monotonic() - t0)
    finally:
        conn.close()


def raw_http(port, data, timeout=20.0, host="127.0.0.1"):
    """Send raw bytes, read until the server closes or one response is
    complete; returns (status, headers, body) or raises."""
    s = socket.create_connection((host, port), timeout=timeout)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer and close before reading everything
        buf = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            buf += chunk
            head, sep, rest = buf.partition(b"\r\n\r\n")
            if sep:
                m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
                if m and len(rest) >= int(m.group(1)):
                    break
        head, _, rest = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        hdrs = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        if "content-length" in hdrs:
            rest = rest[:int(hdrs["content-length"])]
        return Response(status, hdrs, rest, 0.0)
    finally:
        s.close()


def split_keys(keys_per_table):
    keys = [k for ks in keys_per_table for k in ks]
    numkeys = [len(ks) for ks in keys_per_table]
    return keys, numkeys


def infer_json_body(keys_per_table, req_id="1"):
    keys, numkeys = split_keys(keys_per_table)
    return json.dumps({
        "id": req_id,
        "inputs": [
            {"name": "KEYS", "shape": [1, len(keys)], "datatype": "INT64", "data": keys},
            {"name": "NUMKEYS", "shape": [1, len(numkeys)], "datatype": "INT32",
             "data": numkeys},
        ],
    }).encode()


def infer_binary_body(keys_per_table, req_id="1", numkeys_binary=False, output_binary=True):
    """tritonclient's wire form: KEYS binary (NUMKEYS JSON or binary), OUTPUT0
    binary_data; returns (body, headers)."""
    keys, numkeys = split_keys(keys_per_table)
    kbytes = struct.pack("<%dq" % len(keys), *keys)
    nk = {"name": "NUMKEYS", "shape": [1, len(numkeys)], "datatype": "INT32"}
    nbytes = b""
    if numkeys_binary:
        nbytes = struct.pack("<%di" % len(numkeys), *numkeys)
        nk["parameters"] = {"binary_data_size": len(nbytes)}
    else:
        nk["data"] = numkeys
    hdr = {
        "id": req_id,
        "inputs": [
            {"name": "KEYS", "shape": [1, len(keys)], "datatype": "INT64",
             "parameters": {"binary_data_size": len(kbytes)}},
            nk,
        ],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": output_binary}}],
    }
    j = json.dumps(hdr).encode()
    return j + kbytes + nbytes, {"inference-header-content-length": str(len(j))}


def stream_infer(stream, model, kpt, binary=True, timeout=10):
    """One request of a checking stream thread (an object with port, failed
    and first_problem): OUTPUT0's floats and the response, or (None, None)
    after counting a failure (an exception or a non-200 answer) in
    stream.failed and keeping the first one's text in stream.first_problem."""
    try:
        r = infer(stream.port, model, kpt, binary=binary, timeout=timeout)
        return decode_output(r)[1], r
    except Exception as e:  # noqa: BLE001
        stream.failed += 1
        stream.first_problem = stream.first_problem or "%s: %s" % (type(e).__name__, e)
        return None, None


def on_tmpfs(cl, name, size_mib, fn):
    """fn(mnt) with mnt a tmpfs of size_mib MiB of its own under cl's
    directory (a persistent DB whose disk a test fills); afterwards every
    process of cl still alive is SIGKILLed (they may hold the mount) and the
    tmpfs unmounted.  Needs CAP_SYS_ADMIN: returns mount's error message
    where it fails (the caller skips), else None."""
    mnt = cl.path(name)
    os.makedirs(mnt)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dm" % size_mib, "tmpfs", mnt],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return "cannot mount a tmpfs for the persistent DB: %s" % r.stderr.strip()
    try:
        fn(mnt)
    finally:
        for p in cl.procs:
            if p.alive():
                p.kill(signal.SIGKILL)
                p.wait(10)
        subprocess.run(["umount", "-l", mnt])
    return None


class VersionStream(threading.Thread):
    """Lookups of 32 random file keys of table 0 of model "m", back to back,
    on port; each answer must be wholly one version's rows (models: version
    -> Model).  Counts requests, failed ones (stream_infer), wrong ones
    (first_problem says the first), the answers while `building` (an Event)
    is set, and apart, the wrong ones while `down` is set (no coordinator
    at all: defaults are expected then)."""

    def __init__(self, port, models, building, down, seed=11):
        super().__init__(daemon=True)
        self.port, self.models, self.building, self.down = port, models, building, down
        self.down_defaults = 0
        self.keys = models[min(models)].file_keys[0]
        self.rng = random.Random(seed)
        self.stop_ev = threading.Event()
        self.requests = self.failed = self.wrong = self.during_build = 0
        self.first_problem = ""

    def run(self):
        while not self.stop_ev.is_set():
            kpt = [self.rng.sample(self.keys, 32)]
            during, down = self.building.is_set(), self.down.is_set()
            got, _ = stream_infer(self, "m", kpt)
            if got is None:
                continue
            self.requests += 1
            if not any(got == m.expected(kpt) for m in self.models.values()):
                if down or self.down.is_set():
                    self.down_defaults += 1
                    continue
                self.wrong += 1
                first = self.models[min(self.models)]
                self.first_problem = self.first_problem or first_mismatch(
                    got, first.expected(kpt), first, kpt)
            elif during and self.building.is_set():
                self.during_build += 1


def decode_output(resp):
    """OUTPUT0 of a 200 response (JSON or binary) -> (header dict, list of floats)."""
    if resp.status != 200:
        raise AssertionError("HTTP %d: %r" % (resp.status, resp.body[:500]))
    hlen = resp.headers.get("inference-header-content-length")
    if hlen is None:
        j = resp.json()
        out = j["outputs"][0]
        return j, [f32(float(v)) for v in out["data"]]
    n = int(hlen)
    j = json.loads(resp.body[:n].decode())
    out = j["outputs"][0]
    size = out["parameters"]["binary_data_size"]
    blob = resp.body[n:n + size]
    if len(blob) != size or len(resp.body) != n + size:
        raise AssertionError("binary output: %d bytes after the header, expected %d" %
                             (len(resp.body) - n, size))
    return j, list(struct.unpack("<%df" % (size // 4), blob))


def infer(port, model, keys_per_table, binary=False, req_id="1", timeout=20.0, pause=0.0, **kw):
    if binary:
        body, hdrs = infer_binary_body(keys_per_table, req_id, **kw)
    else:
        body, hdrs = infer_json_body(keys_per_table, req_id), {}
    return http(port, "POST", "/v2/models/%s/infer" % model, body, hdrs, timeout=timeout,
                pause=pause)


def model_versions(port, model="m"):
    """The versions model's metadata lists (GET /v2/models/<model>), or None
    when it does not answer 200."""
    r = http(port, "GET", "/v2/models/%s" % model)
    return r.json().get("versions") if r.status == 200 else None


def metrics(port):
    """Prometheus text of GET /metrics -> {name or name{labels}: float}."""
    r = http(port, "GET", "/metrics")
    if r.status != 200:
        raise AssertionError("GET /metrics: HTTP %d" % r.status)
    out = {}
    for line in r.body.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        out[name] = float(value)
    return out


def hps_counters(port, model):
    """The worker's nv_hps_* counters of model (whatever its version): {name
    without the prefix: value}, -1 where a family has no sample."""
    m = metrics(port)
    names = ("lookup_keys", "volatile_db_hit_keys", "persistent_db_hit_keys",
             "default_value_keys", "miss_queue_busy", "miss_queue_timeouts")
    out = {}
    for n in names:
        pre = 'nv_hps_%s{model="%s",version="' % (n, model)
        out[n] = next((int(v) for k, v in m.items() if k.startswith(pre)), -1)
    return out


def diff(after, before):
    return {k: after[k] - before[k] for k in after}


# --------------------------------------------------------------------------
# Model files
# --------------------------------------------------------------------------

class Model:
    """A model written by hps-gen: name, dirs, rows, dims, defaults, keys in
    file order (the coordinator loads the first ceil(rows * rate) rows of
    each table into the volatile DB)."""

    def __init__(self, name, out_dir, rows, dims, defaults, ini_text, key_bytes=8, version=1):
        self.name = name
        self.version = version
        self.key_bytes = key_bytes
        self.dir = out_dir
        self.rows = list(rows)
        self.dims = list(dims)
        self.defaults = list(defaults)
        self.ini_text = ini_text
        self.table_dirs = [os.path.join(out_dir, "sparse_embedding%d" % t)
                           for t in range(len(rows))]
        self.file_keys = []
        for d in self.table_dirs:
            a = array.array("q")
            with open(os.path.join(d, "key"), "rb") as f:
                a.frombytes(f.read())
            if sys.byteorder != "little":
                a.byteswap()
            self.file_keys.append(list(a))

    def vdb_keys(self, t, rate):
        """Keys of table t that initial_cache_rate puts in the volatile DB."""
        n = int(math.ceil(self.rows[t] * rate))
        return self.file_keys[t][:n]

    def pdb_only_keys(self, t, rate):
        n = int(math.ceil(self.rows[t] * rate))
        return self.file_keys[t][n:]

    def unknown_keys(self, t, count, start=0):
        """Keys in no layer: the generator's keys past the table's rows, plus
        a negative key (generated keys are in [0, 2^62)); for 32-bit-key
        models the last two are 2^32 + a table key (out of the uint32 range:
        must not alias that key) and a negative key."""
        if self.key_bytes == 4:
            ks = [gen_key32(t, self.rows[t] + start + i) for i in range(max(0, count - 2))]
            if count >= 2:
                ks.append((1 << 32) + self.file_keys[t][start % self.rows[t]])
            return ks + [-1 - start - t] if count else ks
        ks = [gen_key(t, self.rows[t] + start + i) for i in range(max(0, count - 1))]
        return ks + [-1 - start - t] if count else ks

    def expected(self, keys_per_table, known=None):
        """Expected OUTPUT0 floats; keys for which known(t, key) is False get
        the table's default value."""
        out = []
        for t, ks in enumerate(keys_per_table):
            valid = self.key_sets()[t]
            for k in ks:
                if k in valid and (known is None or known(t, k)):
                    out.extend(gen_vector(t, k, self.dims[t], self.version))
                else:
                    out.extend([f32(self.defaults[t])] * self.dims[t])
        return out

    def key_sets(self):
        if not hasattr(self, "_sets"):
            self._sets = [set(ks) for ks in self.file_keys]
        return self._sets


def first_mismatch(got, want, model=None, keys_per_table=None):
    """Human-readable description of the first differing element."""
    if len(got) != len(want):
        return "length %d, want %d" % (len(got), len(want))
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            where = ""
            if model and keys_per_table:
                off = i
                for t, ks in enumerate(keys_per_table):
                    span = len(ks) * model.dims[t]
                    if off < span:
                        where = " (table %d, key %d, element %d)" % (
                            t, ks[off // model.dims[t]], off % model.dims[t])
                        break
                    off -= span
            return "element %d%s: got %r, want %r" % (i, where, g, w)
    return "equal"


# --------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------

class Proc:
    def __init__(self, popen, log_path, kind):
        self.p = popen
        self.pid = popen.pid
        self.log_path = log_path
        self.kind = kind
        self.http_port = None
        self.metrics_port = None

    def log(self):
        try:
            with open(self.log_path, "r", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def alive(self):
        return self.p.poll() is None

    def kill(self, sig=signal.SIGKILL):
        if self.p.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def wait(self, timeout):
        """Exit status, or None if still running after timeout seconds."""
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None


class Cluster:
    """One scenario's temp dir, segment name and child processes."""

    def __init__(self, scenario):
        for name, path in (("HPS_COORDINATOR", COORDINATOR), ("HPS_WORKER", WORKER),
                           ("HPS_GEN", GEN), ("HPS_SHM", SHM)):
            if not path or not os.access(path, os.X_OK):
                raise RuntimeError("%s=%r is not an executable" % (name, path))
        self.tmp = tempfile.mkdtemp(prefix="hps-int-%s-" % scenario)
        self.segment = "it-%s-%d-%s" % (scenario, os.getpid(), os.urandom(3).hex())
        self.procs = []
        self.extra_segments = []
        self.failed = False

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.failed = True
        self.cleanup()
        return False

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def cleanup(self):
        for p in self.procs:
            if p.alive():
                p.kill(signal.SIGKILL)
            p.wait(10)
        if self.failed:
            self.dump_logs()
        for seg in [self.segment] + self.extra_segments:
            # a killed coordinator's lock and half-built segment
            for obj in ("hps." + seg, ".hps.%s.lock" % seg, ".hps.%s.new" % seg):
                try:
                    os.unlink("/dev/shm/" + obj)
                except FileNotFoundError:
                    pass
        shutil.rmtree(self.tmp, ignore_errors=True)

    def dump_logs(self):
        for p in self.procs:
            tail = p.log().splitlines()[-40:]
            sys.stderr.write("---- %s pid %d (%s), last %d lines ----\n" %
                             (p.kind, p.pid, p.log_path, len(tail)))
            sys.stderr.write("\n".join(tail) + "\n")
        sys.stderr.flush()

    # ---- model and configuration -----------------------------------------

    def gen_model(self, name, rows, dims, defaults=None, max_batch=65536, subdir=None,
                  key_bytes=8, segment=None, version=1):
        out = self.path(subdir or name)
        defaults = defaults or [0.0] * len(rows)
        cmd = [GEN, "model", "--out", out, "--model", name, "--tables", str(len(rows)),
               "--rows", ",".join(map(str, rows)), "--dim", ",".join(map(str, dims)),
               "--default", ",".join(repr(float(d)) for d in defaults),
               "--segment", segment or self.segment, "--max-batch", str(max_batch),
               "--key-bytes", str(key_bytes), "--model-version", str(version), "--quiet"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError("hps-gen model failed (%d): %s" % (r.returncode, r.stderr))
        with open(os.path.join(out, name + ".ini")) as f:
            ini = f.read()
        # Commit the segment's memory 1 MiB at a time (hps-gen: 16 MiB), so the
        # suite fits a small /dev/shm (Docker's default is 64 MiB).
        ini = ini_set(ini, "volatile_db", "allocation_rate", "1MiB")
        return Model(name, out, rows, dims, defaults, ini, key_bytes, version)

    def write_config(self, filename, base_text, settings):
        """settings: list of (section, key, value).  $HPS_TEST_LOOKUP_PATH, where
        set, is the [worker] lookup_path of every config that does not set
        one (the gpu suite pins the GPU path, whose caches its checks count)."""
        text = base_text
        forced = os.environ.get("HPS_TEST_LOOKUP_PATH")
        if forced and not any(s == "worker" and k == "lookup_path" for s, k, _ in settings):
            settings = list(settings) + [("worker", "lookup_path", forced)]
        for section, key, value in settings:
            text = ini_set(text, section, key, value)
        path = self.path(filename)
        with open(path, "w") as f:
            f.write(text)
        return path

    # ---- processes ---------------------------------------------------------

    def _spawn(self, kind, cmd, log_name):
        log_path = self.path(log_name)
        log = open(log_path, "ab")
        try:
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                 stderr=subprocess.STDOUT, cwd=self.tmp)
        finally:
            log.close()
        proc = Proc(p, log_path, kind)
        self.procs.append(proc)
        return proc

    def new_segment_name(self, suffix):
        """Another unique segment name, removed by cleanup()."""
        seg = "%s-%s" % (self.segment, suffix)
        self.extra_segments.append(seg)
        return seg

    def start_coordinator(self, conf, log_name=None, wait_ready=True, timeout=60.0):
        n = sum(1 for p in self.procs if p.kind == "coordinator")
        proc = self._spawn("coordinator", [COORDINATOR, "-c", conf],
                           log_name or "coordinator-%d.log" % n)
        if wait_ready:
            deadline = time.monotonic() + timeout
            while "serving misses" not in proc.log():
                if not proc.alive():
                    raise RuntimeError("hps-coordinator exited with %s:\n%s" %
                                       (proc.p.returncode, proc.log()))
                if time.monotonic() > deadline:
                    raise RuntimeError("hps-coordinator not ready after %.0f s:\n%s" %
                                       (timeout, proc.log()))
                time.sleep(0.02)
        return proc

    def run_coordinator(self, conf, timeout=60.0):
        """Run to completion; returns (exit status, output)."""
        r = subprocess.run([COORDINATOR, "-c", conf], capture_output=True, text=True,
                           timeout=timeout, cwd=self.tmp)
        return r.returncode, r.stdout + r.stderr

    def start_worker(self, conf, instance=0, device=0, wait_ready=True, timeout=30.0, wrap=()):
        """wrap: a command the worker runs under (e.g. prlimit and its options)."""
        proc = self._spawn("worker", list(wrap) + [WORKER, "-c", conf, "--device", str(device),
                                                   "--instance", str(instance), "--http-port",
                                                   "0", "--metrics-port", "0"],
                           "worker-%d-%d.log" % (instance, len(self.procs)))
        deadline = time.monotonic() + timeout
        pat = re.compile(r"serving .* on http://[^ ]*:(\d+) \(metrics :(\d+)\)")
        while True:
            m = pat.search(proc.log())
            if m:
                proc.http_port, proc.metrics_port = int(m.group(1)), int(m.group(2))
                break
            if not proc.alive():
                raise RuntimeError("hps-worker exited with %s:\n%s" %
                                   (proc.p.returncode, proc.log()))
            if time.monotonic() > deadline:
                raise RuntimeError("hps-worker did not start serving in %.0f s:\n%s" %
                                   (timeout, proc.log()))
            time.sleep(0.02)
        if wait_ready:
            if not wait_for_ready(proc.http_port, True, deadline - time.monotonic()):
                raise RuntimeError("hps-worker not ready in %.0f s:\n%s" % (timeout, proc.log()))
        return proc

    # ---- hps-shm -----------------------------------------------------------

    def shm(self, *args, timeout=30.0):
        r = subprocess.run([SHM] + list(args), capture_output=True, text=True, timeout=timeout)
        return r.returncode, r.stdout, r.stderr

    def segment_inode(self):
        """Inode of /dev/shm/hps.<segment> (a new segment published over it
        has another), or None when there is none."""
        try:
            return os.stat("/dev/shm/hps." + self.segment).st_ino
        except FileNotFoundError:
            return None

    def shm_info(self, segment=None):
        rc, out, err = self.shm("--json", "info", segment or self.segment)
        if rc != 0:
            raise RuntimeError("hps-shm info: %d %s" % (rc, err))
        return json.loads(out)

    def vdb_rows(self, segment=None):
        """Rows in the volatile DB, all tables."""
        return sum(tb["rows"] for tb in self.shm_info(segment)["tables"])

    def wait_vdb_rows(self, at_least, timeout=5.0, segment=None):
        """Wait until the volatile DB holds at least that many rows: the
        coordinator inserts the rows it fetched for misses
        (cache_missed_embeddings) just after it answered them."""
        return wait_until(lambda: self.vdb_rows(segment) >= at_least, timeout)

    def segment_exists(self, segment=None):
        return os.path.exists("/dev/shm/hps." + (segment or self.segment))


def ready_status(port):
    try:
        return http(port, "GET", "/v2/health/ready", timeout=5.0).status
    except (OSError, _httpclient.HTTPException):
        return None


def wait_for_ready(port, want, timeout):
    """Poll /v2/health/ready until (status == 200) == want; bounded."""
    deadline = time.monotonic() + max(timeout, 0.0)
    while True:
        st = ready_status(port)
        if st is not None and (st == 200) == want:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


def wait_until(pred, timeout, step=0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            return v
        time.sleep(step)


def pct(xs, q):
    """The q-quantile (0 < q <= 1) of the values xs, nearest rank: the
    smallest value with at least q * len(xs) values at or below it (the
    definition of bench/benchutil.h's bench_rank); nan when xs is empty."""
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs), max(1, math.ceil(q * len(xs)))) - 1]


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago (kernel-chosen)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def have_gpu():
    """Whether nvidia-smi lists a GPU (the gpu suite's tests skip without)."""
    try:
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0 and "GPU" in r.stdout


def run_main(name, body):
    """Run body(tap, cluster) inside a Cluster; any exception is a failed check."""
    t = Tap()
    t.diag("integration scenario %s" % name)
    cl = None
    try:
        with Cluster(name) as cl:
            try:
                body(t, cl)
            finally:
                if t.failed:
                    cl.failed = True
    except Exception as e:  # noqa: BLE001
        t.exception(e)
    t.done()


# --------------------------------------------------------------------------
# Helpers of the multi-process GPU tests (tests/gpu/test_worker_multigpu.py);
# general enough for any scenario that pushes Kafka updates, reads labelled
# metrics or runs several clusters one after another in one Cluster.
# --------------------------------------------------------------------------

def metric_samples(port, name):
    """The samples of metric `name` in the worker's /metrics: a list of
    (labels dict, value), whatever the order of the labels; a sample
    without labels has {}."""
    out = []
    for k, v in metrics(port).items():
        base, brace, rest = k.partition("{")
        if base != name:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', rest)) if brace else {}
        out.append((labels, v))
    return out


def expected_with(model, keys_per_table, new):
    """model.expected(keys_per_table) with the rows in new, {(table, key):
    list of floats} (e.g. vectors pushed through Kafka), in place of the
    generated ones."""
    out = model.expected(keys_per_table)
    off = 0
    for t, ks in enumerate(keys_per_table):
        dim = model.dims[t]
        for k in ks:
            row = new.get((t, k))
            if row is not None:
                out[off:off + dim] = row
            off += dim
    return out


class KafkaMock:
    """kafka-mock (tests/integration/kafka_mock.c, path in $KAFKA_MOCK): a
    librdkafka mock cluster with the given topics; .bootstrap is its
    "HOST:PORT" list.  Use as a context manager (or call close())."""

    def __init__(self, topics, partitions=4):
        mock = os.environ.get("KAFKA_MOCK", "")
        self.p = subprocess.Popen([mock, "--partitions", str(partitions)] + list(topics),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline().split()
        if len(line) < 2 or line[0] != "bootstrap":
            self.close()
            raise RuntimeError("kafka-mock did not print its bootstrap servers: %r" % line)
        self.bootstrap = line[1]

    def cmd(self, c):
        """Send a command to kafka-mock ("down": every broker stops answering,
        "up": they answer again); returns its one-line reply ("ok")."""
        self.p.stdin.write(c + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def close(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait(10)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return False


def push_updates(bootstrap, model, table, dim, rows, timeout=180):
    """Send rows, a list of (key, list of dim floats), as update records of
    model/table through hps-push (path in $HPS_PUSH); returns its exit
    status (0: every record delivered)."""
    push = os.environ.get("HPS_PUSH", "")
    data = b"".join(struct.pack("<q%df" % dim, k, *v) for k, v in rows)
    cmd = [push, "-b", bootstrap, "-m", model, "-t", table, "-d", str(dim), "--stdin", "--quiet"]
    return subprocess.run(cmd, input=data, capture_output=True, timeout=timeout).returncode


def retire(procs, segment):
    """End one of several clusters run in turn by one Cluster: SIGKILL procs
    (a list of Proc), wait for them, then remove segment's shared-memory
    objects now rather than at cleanup() (a small /dev/shm need only hold
    one scenario's segment at a time)."""
    for p in procs:
        p.kill(signal.SIGKILL)
    for p in procs:
        p.wait(10)
    for obj in ("hps." + segment, ".hps.%s.lock" % segment, ".hps.%s.new" % segment):
        try:
            os.unlink("/dev/shm/" + obj)
        except FileNotFoundError:
            pass

# --------------------------------------------------------------------------
# DLPack's C structs (dlpack.h: DLDevice, DLDataType, DLTensor,
# DLManagedTensor), for tests that hand the module capsules of their own
# --------------------------------------------------------------------------

class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DL_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", DL_DELETER)]
