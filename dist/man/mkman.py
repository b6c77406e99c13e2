#!/usr/bin/env python3
"""
mkman.py -- the manual page of one HPS program, from its --help and
--version, with help2man (dist/meson.build runs it at build time).

    mkman.py --help2man PATH --include FILE.h2m --output OUT.1 \
             --version-default VERSION PROGRAM

help2man reads PROGRAM's --help through this script (`mkman.py --filter
PROGRAM --help`), which only changes the layout help2man keys on, never the
words:

  - "usage:" becomes "Usage:" (help2man's SYNOPSIS), a usage line continued
    on an indented "[...]" line is joined, and an indented second form
    ("       PROG ...") becomes "   or: PROG ..." (a second SYNOPSIS line),
    and so is a subcommand's synopsis ("PROG CMD ...") continued on
    indented "--opt ..." or "[...]" lines;
  - a lower-case heading ("options:") gets a capital ("Options:" is
    help2man's OPTIONS section);
  - a blank line goes before an option list that follows text directly
    and around an indented heading ("  INI options:"), where help2man
    needs one to see the list;
  - "Exit status:" starts the section EXIT STATUS, one entry per code
    whether --help lists them in a table (also two columns) or in a
    sentence ("0 ok, 1 error, 2 usage error").

The --version line is the program's own where it has one; programs without
--version get "PROGRAM VERSION" (--version-default).  The page is refused
(exit 1) when --help documents exit codes and the page has no EXIT STATUS
section, so a change of the --help layout cannot drop it silently.
Standard library only.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys

EXIT_HEADING = re.compile(r"^exit status:\s*(.*)$", re.IGNORECASE)
ENTRY = re.compile(r"^(\d+)\s+(\S.*)$")


def exit_entries(heading_rest, lines):
    """(code, text) pairs of an exit status block: a sentence after the
    heading ("0 ok, 1 error, 2 usage.") or a table below it, whose rows may
    hold two entries ("  0  clean shutdown     3  shared memory busy")."""
    entries = []
    if heading_rest:
        text = " ".join([heading_rest] + [ln.strip() for ln in lines])
        for part in re.split(r"[,;]\s*(?=\d+\s)", text.strip()):
            m = ENTRY.match(part.strip().rstrip("."))
            if m:
                entries.append((int(m.group(1)), m.group(2)))
            elif entries:
                code, prev = entries[-1]
                entries[-1] = (code, prev + ", " + part.strip().rstrip("."))
        return entries
    for ln in lines:
        cells = re.split(r"\s{2,}(?=\d+\s)", ln.strip())
        for cell in cells:
            m = ENTRY.match(cell)
            if m:
                entries.append((int(m.group(1)), re.sub(r"\s+", " ", m.group(2))))
            elif entries:
                code, prev = entries[-1]
                entries[-1] = (code, prev + " " + cell.strip())
    return entries


def filter_help(text, prog):
    """--help text laid out for help2man (see the module's doc)."""
    lines = text.split("\n")
    out = []
    i = 0
    while i < len(lines):
        ln = lines[i]
        if i == 0 and ln.lower().startswith("usage:"):
            ln = "Usage:" + ln[len("usage:"):]
            while i + 1 < len(lines) and re.match(r"^\s+\[", lines[i + 1]):
                ln += " " + lines[i + 1].strip()
                i += 1
            out.append(ln)
            while i + 1 < len(lines) and re.match(r"^\s+%s(\s|$)" % re.escape(prog), lines[i + 1]):
                i += 1
                ln = "   or: " + lines[i].strip()
                while i + 1 < len(lines) and re.match(r"^\s+\[", lines[i + 1]):
                    ln += " " + lines[i + 1].strip()
                    i += 1
                out.append(ln)
            i += 1
            continue
        m = EXIT_HEADING.match(ln)
        if m:
            block = []
            i += 1
            while i < len(lines) and lines[i].strip():
                block.append(lines[i])
                i += 1
            entries = exit_entries(m.group(1).strip(), block)
            if out and out[-1].strip():
                out.append("")
            out.append("*Exit Status*")
            for code, what in sorted(entries, key=lambda e: e[0]):
                out.append("  %-3d %s" % (code, what))
            out.append("")
            continue
        if ln.startswith(prog + " "):
            # a subcommand's synopsis, continued on indented lines
            while i + 1 < len(lines) and re.match(r"^\s+[-\[(]", lines[i + 1]) and \
                    not OPTION.match(lines[i + 1]):
                ln += " " + lines[i + 1].strip()
                i += 1
        if re.match(r"^[a-z][a-z ]*:\s*$", ln):
            ln = ln[0].upper() + ln[1:]
        if out and out[-1].strip() and needs_break(out[-1], ln):
            out.append("")
        out.append(ln)
        i += 1
    return "\n".join(out)


OPTION = re.compile(r"^(\s+)-{1,2}\w\S*(?: \S+)*\s{2,}\S")


def indent(ln):
    return len(ln) - len(ln.lstrip(" "))


def needs_break(prev, ln):
    """Whether a blank line must go between prev and ln for help2man to see
    an option list: before an option line ("  --opt ARG   what it does")
    that follows text at its indentation or less, before an indented
    heading ("  INI options:"), and after one."""
    if OPTION.match(ln):
        return not OPTION.match(prev) and indent(prev) <= indent(ln)
    if re.match(r"^\s+[A-Z][\w ]*:\s*$", ln) or re.match(r"^\s+[A-Z][\w ]*:\s*$", prev):
        return True
    return False


def run_filter(argv):
    """`mkman.py --filter PROGRAM ARGS...`: PROGRAM's output, filtered."""
    prog = argv[0]
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stdout.write(filter_help(r.stdout, os.path.basename(prog)))
    return r.returncode


def version_line(prog, default):
    name = os.path.basename(prog)
    try:
        r = subprocess.run([prog, "--version"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, timeout=30)
        first = r.stdout.strip().split("\n")[0] if r.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        first = ""
    if first.startswith(name + " "):
        return first
    return "%s %s" % (name, default)


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--filter":
        return run_filter(sys.argv[2:])
    ap = argparse.ArgumentParser(description="manual page of an HPS program via help2man")
    ap.add_argument("--help2man", required=True)
    ap.add_argument("--include", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--version-default", required=True)
    ap.add_argument("program")
    a = ap.parse_args()
    prog = os.path.abspath(a.program)
    version = version_line(prog, a.version_default)
    pkg_version = version.split()[-1]
    exe = " ".join(shlex.quote(x) for x in
                   (sys.executable, os.path.abspath(__file__), "--filter", prog))
    cmd = [a.help2man, "--no-info", "--section=1", "--manual=HPS Manual",
           "--source=HPS " + pkg_version, "--version-string=" + version,
           "--include=" + a.include, "--output=" + a.output, exe]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.stderr.write("mkman.py: help2man failed (%d): %s\n" % (r.returncode, r.stdout))
        return 1
    helptext = subprocess.run([prog, "--help"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True).stdout
    with open(a.output) as f:
        page = f.read()
    if re.search(r"^exit status:", helptext, re.IGNORECASE | re.MULTILINE) and \
            '.SH "EXIT STATUS"' not in page:
        sys.stderr.write("mkman.py: %s --help documents exit codes but %s has no EXIT STATUS\n"
                         % (prog, a.output))
        os.unlink(a.output)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
