#!/usr/bin/env python3
"""
int-install: `meson install` into a temporary DESTDIR holds what a
deployment needs, and the installed copies work.

    test_install.py BUILDDIR

Checks, in the DESTDIR tree (paths from `meson introspect --installed`):
  - the executables, libhps.so with its headers and hps.pc, the example INI
    (documentation and configuration directories), the man pages
    (HPS_MAN_PAGES: the pages this build generates) and the systemd units;
  - the installed hps-gen, hps-coordinator and hps-worker (LD_LIBRARY_PATH
    at the installed library directory) serve a generated model: one lookup
    gives the generator's exact vectors and a table's default for an
    unknown key; the installed hps-conf accepts the installed example INI;
  - `man -l` renders every installed page with nothing on stderr
    (MANWIDTH=80; skipped without man); each program's page has EXIT
    STATUS, FILES and SEE ALSO, hps.ini(5) names every section and key of
    the installed `hps-conf doc`;
  - `systemd-analyze verify` accepts the units (copies whose ExecStart
    points at the DESTDIR binaries, the worker as instance 0, MANPATH at
    the DESTDIR pages that Documentation= names; skipped without
    systemd-analyze or where it cannot verify a trivial unit);
  - `cc $(pkg-config --cflags --libs hps)` with PKG_CONFIG_PATH and
    PKG_CONFIG_SYSROOT_DIR at the DESTDIR compiles and links a program
    against the installed libhps, which then reports the installed version.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpstest as H  # noqa: E402

PROGRAMS = ["hps-coordinator", "hps-worker", "hps-conf", "hps-shm", "hps-gen"]


def run(cmd, env=None, timeout=300, cwd=None):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env, timeout=timeout, cwd=cwd)


def installed_map(meson, build):
    """{build or source file: installed absolute path} of this build."""
    r = run([meson, "introspect", "--installed", build])
    if r.returncode != 0:
        raise RuntimeError("meson introspect --installed: %s" % r.stderr)
    return json.loads(r.stdout)


def check_files(t, dest, man_pages):
    """The installed tree; returns {name: DESTDIR path} of what later checks use."""
    byname = {}  # from the tree: introspect has one destination per source file
    for d, dirs, files in os.walk(dest):
        for n in files + [x for x in dirs if os.path.islink(os.path.join(d, x))]:
            byname.setdefault(n, []).append(os.path.join(d, n))
    found = {}
    progs = PROGRAMS + (["hps-push"] if "hps-push" in byname else [])
    for p in progs:
        paths = [x for x in byname.get(p, []) if os.path.dirname(x).endswith("/bin")]
        ok = len(paths) == 1 and os.access(paths[0], os.X_OK)
        t.ok(ok, "%s installed in bindir and executable" % p, "paths %r" % byname.get(p))
        if ok:
            found[p] = paths[0]
    for name in ("libhps.so", "libhps.so.0", "hps.pc", "client.h", "hps.h", "conf.h",
                 "hps_conf.def"):
        paths = byname.get(name, [])
        t.ok(len(paths) == 1 and os.path.exists(paths[0]), "%s installed" % name,
             "paths %r" % paths)
        if paths:
            found[name] = paths[0]
    inc = [os.path.relpath(x, dest) for v in byname.values() for x in v
           if "/include/" in x and "/include/hps/" not in x]
    t.ok(not inc, "every installed header is under include/hps/", "also %r" % inc)
    t.ok(found.get("hps_conf.def", "").endswith("/include/hps/conf/hps_conf.def"),
         "hps_conf.def installed where hps/conf.h's #include \"conf/hps_conf.def\" finds it")
    t.ok(os.path.realpath(found.get("libhps.so", "")) ==
         os.path.realpath(found.get("libhps.so.0", "-")),
         "libhps.so and libhps.so.0 are the same library")
    ex = sorted(byname.get("hps.ini.example", []))
    t.ok(len(ex) == 2 and any("/share/doc/hps/" in x for x in ex) and
         any(x.endswith("/hps/hps.ini.example") and "/share/" not in x for x in ex)
         and all(os.path.isfile(x) for x in ex),
         "hps.ini.example installed in share/doc/hps and sysconfdir/hps", "paths %r" % ex)
    if ex:
        found["example"] = ex[0]
    pages = {}
    for page in man_pages:
        paths = [x for x in byname.get(page, []) if "/man/man" in x]
        t.ok(len(paths) == 1 and os.path.getsize(paths[0]) > 0,
             "man page %s installed" % page, "paths %r" % paths)
        if paths:
            pages[page] = paths[0]
    found["pages"] = pages
    units = {}
    for unit in ("hps-coordinator.service", "hps-worker@.service"):
        paths = byname.get(unit, [])
        t.ok(len(paths) == 1 and "/systemd/system/" in paths[0],
             "%s installed in the systemd unit directory" % unit, "paths %r" % paths)
        if paths:
            units[unit] = paths[0]
    found["units"] = units
    return found


def check_units_text(t, dest, found):
    """ExecStart of each unit names the installed binary and /etc/hps/hps.ini."""
    bindir = os.path.dirname(found.get("hps-coordinator", "/x/bin/x"))[len(dest):]
    want = {
        "hps-coordinator.service": "ExecStart=%s/hps-coordinator -c " % bindir,
        "hps-worker@.service": "ExecStart=%s/hps-worker -c " % bindir,
    }
    for unit, path in found["units"].items():
        with open(path) as f:
            text = f.read()
        line = [ln for ln in text.splitlines() if ln.startswith("ExecStart=")]
        t.ok(len(line) == 1 and line[0].startswith(want[unit]) and "/hps/hps.ini" in line[0] and
             "@" not in line[0].split("=", 1)[1],
             "%s: ExecStart runs the installed binary on hps/hps.ini" % unit, "got %r" % line)
        if unit.startswith("hps-worker"):
            t.ok(line and "--device %i" in line[0], "hps-worker@.service passes --device %i")
        if unit.startswith("hps-coordinator") and line:
            ini = line[0].split(" -c ", 1)[-1].split()[0]
            docs = list(found.get("pages", {}).items()) + [("hps.ini.example",
                                                           found.get("example", ""))]
            docs = [(n, p) for n, p in docs if n in ("hps-coordinator.1", "hps-worker.1",
                                                     "hps-conf.1", "hps.ini.example")]
            names = [n for n, p in docs if os.path.isfile(p) and ini not in open(p).read()]
            t.ok(docs and not names, "the man pages and hps.ini.example name the INI the units "
                 "read, %s" % ini, "not in %r" % names)
        t.ok("RestartPreventExitStatus=2" in text and "Restart=on-failure" in text,
             "%s: restarts on failure, not on a configuration error (2)" % unit)
        for bad in ("PrivateDevices=yes", "PrivateIPC=yes", "DynamicUser=yes"):
            t.ok(bad not in text, "%s: no %s (/dev/shm stays shared)" % (unit, bad))


def check_lookup(t, found, libdir):
    """The installed programs serve a generated model exactly."""
    H.COORDINATOR = found["hps-coordinator"]
    H.WORKER = found["hps-worker"]
    H.GEN = found["hps-gen"]
    H.SHM = found["hps-shm"]
    os.environ["LD_LIBRARY_PATH"] = lib_env(libdir)["LD_LIBRARY_PATH"]
    with H.Cluster("install") as cl:
        try:
            model = cl.gen_model("inst", rows=[500, 200], dims=[16, 8], defaults=[0.5, -2.0])
            conf = cl.write_config("hps.ini", model.ini_text, [
                ("hps", "heartbeat_interval_ms", 50),
                ("worker", "miss_timeout_ms", 2000),
            ])
            r = run([found["hps-conf"], "check", conf])
            t.eq(r.returncode, 0, "installed hps-conf check accepts the generated INI")
            coord = cl.start_coordinator(conf)
            exe = os.path.realpath("/proc/%d/exe" % coord.pid)
            t.eq(exe, os.path.realpath(found["hps-coordinator"]),
                 "the running coordinator is the installed binary")
            w = cl.start_worker(conf)
            t.eq(os.path.realpath("/proc/%d/exe" % w.pid), os.path.realpath(found["hps-worker"]),
                 "the running worker is the installed binary")
            kpt = [[model.file_keys[0][3], model.file_keys[0][400]] + model.unknown_keys(0, 1),
                   [model.file_keys[1][7]]]
            resp = H.infer(w.http_port, model.name, kpt)
            _, got = H.decode_output(resp)
            want = model.expected(kpt)
            t.ok(got == want, "one lookup through the installed worker gives the exact vectors "
                 "(and the default for an unknown key)", H.first_mismatch(got, want, model, kpt))
            t.ok(want[2 * 16:3 * 16] == [0.5] * 16, "the expected vector of the unknown key is "
                 "table 0's default")
        except Exception:
            cl.failed = True
            raise


def check_man(t, found, man_pages):
    pages = found["pages"]
    if not man_pages:
        t.skip("man pages", "this build generates none (-Dman=disabled, or a cross build)")
        return
    if not any(p.endswith(".1") for p in man_pages):
        t.skip("the programs' man pages", "not generated: help2man not installed")
    if not pages:
        return  # check_files failed each page this build should have installed
    if not shutil.which("man"):
        t.skip("man -l renders the pages", "man not installed")
    else:
        env = dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8")
        for page, path in sorted(pages.items()):
            r = run(["man", "-l", path], env=env)
            t.ok(r.returncode == 0 and r.stderr == "" and len(r.stdout) > 200,
                 "man -l %s renders without warnings" % page,
                 "rc %d, stderr %r" % (r.returncode, r.stderr[:2000]))
    for page, path in sorted(pages.items()):
        with open(path) as f:
            roff = f.read()
        if page.endswith(".1"):
            prog = page[:-2]
            secs = re.findall(r'^\.SH "?([^"\n]+)"?$', roff, re.MULTILINE)
            t.ok(all(s in secs for s in ("NAME", "SYNOPSIS", "EXIT STATUS", "FILES", "SEE ALSO")),
                 "%s has NAME, SYNOPSIS, EXIT STATUS, FILES and SEE ALSO" % page,
                 "sections %r" % secs)
            ver = run([found["hps-conf"], "--version"]).stdout.split()[-1]
            t.ok(re.search(r'^\.TH "?%s"? "?1"? .*HPS %s' % (re.escape(prog.upper()),
                                                              re.escape(ver)),
                           roff, re.MULTILINE) is not None,
                 "%s: title and version %s" % (page, ver))
    if "hps.ini.5" in pages:
        with open(pages["hps.ini.5"]) as f:
            roff = f.read()
        doc = run([found["hps-conf"], "doc"]).stdout
        sections = re.findall(r"^## `\[([^]]+)\]`", doc, re.MULTILINE)
        missing = [s for s in sections if (".SS [%s]\n" % s) not in roff]
        t.ok(len(sections) >= 7 and not missing,
             "hps.ini(5) has every section of hps-conf doc (%d)" % len(sections),
             "missing %r" % missing)
        keys = re.findall(r"^\| `([a-z0-9_]+)` \|", doc, re.MULTILINE)
        missing = [k for k in keys if (".B %s\n" % k) not in roff]
        t.ok(len(keys) > 50 and not missing,
             "hps.ini(5) has every key of hps-conf doc (%d)" % len(keys), "missing %r" % missing)


def check_systemd(t, dest, found, tmp):
    units = found["units"]
    if len(units) != 2:
        return
    sa = shutil.which("systemd-analyze")
    if not sa:
        t.skip("systemd-analyze verify accepts the units", "systemd-analyze not installed")
        return
    vdir = os.path.join(tmp, "units")
    os.makedirs(vdir)
    probe = os.path.join(vdir, "hps-probe.service")
    with open(probe, "w") as f:
        f.write("[Service]\nExecStart=/bin/true\n")
    r = run([sa, "verify", probe], timeout=120)
    if r.returncode != 0:
        t.skip("systemd-analyze verify accepts the units", "systemd-analyze verify cannot run "
               "here (a trivial unit fails: %s)" % r.stderr.strip()[:300].replace("\n", " "))
        return
    os.unlink(probe)
    bindir = os.path.dirname(found["hps-coordinator"])  # in the DESTDIR
    copies = []
    for unit, path in units.items():
        with open(path) as f:
            text = f.read()
        text = re.sub(r"^ExecStart=\S*/(hps-[a-z]+) ", lambda m: "ExecStart=%s/%s " %
                      (bindir, m.group(1)), text, flags=re.MULTILINE)
        name = unit.replace("@.service", "@0.service")
        out = os.path.join(vdir, name)
        with open(out, "w") as f:
            f.write(text)
        copies.append(out)
    mandirs = sorted({os.path.dirname(os.path.dirname(p)) for p in found["pages"].values()})
    env = dict(os.environ, MANPATH=":".join(mandirs)) if mandirs else dict(os.environ)
    args = [] if mandirs and shutil.which("man") else ["--man=no"]
    r = run([sa, "verify"] + args + copies, env=env, timeout=120)
    ours = [ln for ln in (r.stdout + r.stderr).splitlines() if "hps-" in ln]
    t.ok(r.returncode == 0 and not ours,
         "systemd-analyze verify accepts hps-coordinator.service and hps-worker@0.service",
         "rc %d, output %r" % (r.returncode, (r.stdout + r.stderr)[:2000]))


def check_pkgconfig(t, dest, found, libdir, tmp):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    pc = shutil.which("pkg-config")
    if "hps.pc" not in found:
        t.ok(False, "hps.pc installed: a program compiled against it (not run)")
        return
    if not cc or not pc:
        t.skip("a program compiled against the installed hps.pc", "no C compiler or pkg-config")
        return
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.dirname(found["hps.pc"]),
               PKG_CONFIG_SYSROOT_DIR=dest)
    env.pop("PKG_CONFIG_LIBDIR", None)
    r = run([pc, "--cflags", "--libs", "hps"], env=env)
    flags = r.stdout.split()
    t.ok(r.returncode == 0 and ("-L" + libdir) in flags and "-lhps" in flags and
         any(f.startswith("-I" + dest) for f in flags),
         "pkg-config --cflags --libs hps points into the DESTDIR",
         "rc %d: %r %r" % (r.returncode, r.stdout, r.stderr))
    src = os.path.join(tmp, "use_hps.c")
    with open(src, "w") as f:
        f.write('#include <stdio.h>\n'
                '#include <hps/client.h>\n'
                '#include <hps/conf.h>\n'
                'int main(void)\n{\n'
                '    hps_client_t *c = NULL;\n'
                '    char err[256] = "";\n'
                '    int rc = hps_client_open("/nonexistent/hps.ini", -1, &c, err, sizeof err);\n'
                '    printf("%s %d\\n", hps_version(), rc < 0);\n'
                '    return 0;\n}\n')
    exe = os.path.join(tmp, "use_hps")
    r = run([cc, "-std=c11", "-pedantic", "-Wall", "-Werror", "-c", src, "-o", exe + ".o"]
            + [f for f in flags if f.startswith("-I")], env=env)
    t.ok(r.returncode == 0, "the installed headers compile as strict ISO C11 (-std=c11 "
         "-pedantic -Werror)", r.stderr[:2000])
    r = run([cc, src, "-o", exe] + flags, env=env)
    t.ok(r.returncode == 0, "a program using <hps/client.h> compiles and links against the "
         "installed libhps", r.stderr[:2000])
    if r.returncode != 0:
        return
    renv = lib_env(libdir)
    r = run([exe], env=renv)
    want = run([found["hps-conf"], "--version"]).stdout.split()[-1]
    t.eq(r.stdout.strip(), "%s 1" % want,
         "it runs with the installed libhps.so: version, and a missing file is an error")
    r = run(["ldd", exe], env=renv) if shutil.which("ldd") else None
    if r is not None:
        line = [ln for ln in r.stdout.splitlines() if "libhps.so" in ln]
        t.ok(len(line) == 1 and dest in line[0], "the program loads libhps.so from the DESTDIR",
             "ldd: %r" % line)


def lib_env(libdir):
    """The environment with libdir first on LD_LIBRARY_PATH (the rest kept:
    libraries outside the system's directories, as on a staged host)."""
    rest = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p and p != libdir]
    return dict(os.environ, LD_LIBRARY_PATH=":".join([libdir] + rest))


def check_python(t, dest, found, libdir):
    """The package hps: installed whole in one directory, importable from
    it, and (prefix /usr or /usr/local) in a directory that the interpreter
    it was built for reads without PYTHONPATH."""
    exts = [os.path.join(d, n) for d, _, fs in os.walk(dest) for n in fs
            if n.startswith("_hps.") and n.endswith(".so")]
    py = os.environ.get("HPS_PYTHON")  # the interpreter meson built it for
    if not exts or not py:
        t.skip("the Python package hps", "not built (no python3-dev, numpy or dlpack)")
        return
    pkg = os.path.dirname(exts[0])
    t.ok(len(exts) == 1 and os.path.basename(pkg) == "hps" and
         all(os.path.isfile(os.path.join(pkg, f)) for f in ("__init__.py", "torch.py")),
         "the package hps (_hps, __init__.py, torch.py) installed in one directory", exts)
    env = dict(lib_env(libdir), PYTHONPATH=os.path.dirname(pkg))
    r = run([py, "-c", "import hps; print(hps.__version__, hps.__file__)"], env=env)
    want = run([found["hps-conf"], "--version"]).stdout.split()[-1]
    t.ok(r.returncode == 0 and r.stdout.split()[0] == want and r.stdout.split()[1].startswith(pkg),
         "%s imports the installed package: hps.__version__ %s" % (py, want), r.stdout + r.stderr)
    site = pkg[len(dest):]
    prefix = os.path.dirname(found["hps-conf"])[len(dest):-len("/bin")]
    r = run([py, "-c", "import sys; print('\\n'.join(sys.path))"])
    paths = r.stdout.split()
    on_path = os.path.dirname(site) in paths
    if not any(p.startswith(prefix + "/") and p.endswith("-packages") for p in paths):
        t.skip("the package on the interpreter's sys.path",
               "%s reads no site directory under %s (a virtual environment)" % (py, prefix))
    elif prefix in ("/usr", "/usr/local"):
        t.ok(on_path, "prefix %s: %s is on %s's sys.path" % (prefix, os.path.dirname(site), py),
             r.stdout)
    else:
        t.skip("the package on the interpreter's sys.path", "prefix %s" % prefix)


def main():
    t = H.Tap()
    if len(sys.argv) != 2:
        t.ok(False, "usage: test_install.py BUILDDIR")
        t.done()
    build = os.path.abspath(sys.argv[1])
    meson = os.environ.get("MESON") or shutil.which("meson")
    if not meson:
        H.Tap.skip_all("meson not found (MESON or PATH)")
    man_pages = [p for p in os.environ.get("HPS_MAN_PAGES", "").split(",") if p]
    tmp = tempfile.mkdtemp(prefix="hps-int-install-")
    try:
        dest = os.path.join(tmp, "destdir")
        r = run([meson, "install", "--destdir", dest, "-C", build, "--quiet"], timeout=600)
        t.ok(r.returncode == 0, "meson install --destdir succeeds",
             "rc %d\n%s\n%s" % (r.returncode, r.stdout[-3000:], r.stderr[-3000:]))
        if r.returncode != 0:
            t.done()
        inst = installed_map(meson, build)
        t.ok(all(os.path.lexists(dest + p) for p in inst.values()),
             "every file meson lists as installed is in the DESTDIR",
             [p for p in inst.values() if not os.path.lexists(dest + p)])
        found = check_files(t, dest, man_pages)
        libdir = os.path.dirname(found.get("libhps.so", ""))
        check_units_text(t, dest, found)
        if "example" in found and "hps-conf" in found:
            r = run([found["hps-conf"], "check", found["example"]])
            t.eq(r.returncode, 0, "installed hps-conf check accepts the installed example INI")
        if all(p in found for p in PROGRAMS):
            try:
                check_lookup(t, found, libdir)
            except Exception as e:  # noqa: BLE001
                t.exception(e)
        check_man(t, found, man_pages)
        check_systemd(t, dest, found, tmp)
        check_pkgconfig(t, dest, found, libdir, tmp)
        if "hps-conf" in found:
            check_python(t, dest, found, libdir)
    except Exception as e:  # noqa: BLE001
        t.exception(e)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    t.done()


if __name__ == "__main__":
    main()
