#!/usr/bin/env python3
"""unit libhps-exports: libhps.so exports every function its installed
headers declare (a program linked against it finds each one), and nothing
else: no shmdb, GPU cache or internal hps__* symbol.

Usage: test-libhps-exports.py LIBHPS_SO HEADER...   (TAP on stdout)
"""
import re
import subprocess
import sys

# A declaration: a name at the start of a prototype (not a static inline
# definition, a macro or a function pointer typedef).
DECL = re.compile(r"^(?!static|typedef|#)[A-Za-z_][^;{}()#]*?\b(hps_[a-z0-9_]+)\s*\(", re.M)


def declared(path):
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)  # comments
    text = re.sub(r"\\\n", " ", text)                  # continued macro lines
    text = re.sub(r"^#.*$", "", text, flags=re.M)      # preprocessor lines
    return set(DECL.findall(text))


def main():
    so, headers = sys.argv[1], sys.argv[2:]
    out = subprocess.run(["nm", "-D", "--defined-only", so], capture_output=True, text=True,
                         check=True).stdout
    exported = {ln.split()[-1] for ln in out.splitlines() if ln.split()[-2:-1] == ["T"]}
    want = set().union(*(declared(h) for h in headers))
    checks = [
        (len(want) > 50, "the installed headers declare %d functions" % len(want), ""),
        (not want - exported, "libhps.so exports each of them",
         "missing: %s" % " ".join(sorted(want - exported))),
        (not exported - want, "and no other function",
         "extra: %s" % " ".join(sorted(exported - want))),
    ]
    print("1..%d" % len(checks))
    for i, (ok, what, why) in enumerate(checks, 1):
        print("%s %d - %s" % ("ok" if ok else "not ok", i, what))
        if not ok:
            print("# " + why)
    return 0 if all(c[0] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
