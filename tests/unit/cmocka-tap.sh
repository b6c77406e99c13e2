#!/usr/bin/env bash
# cmocka-tap.sh PROGRAM [ARG...] -- run a cmocka test program for meson's
# protocol 'tap': TAP output (CMOCKA_MESSAGE_OUTPUT=TAP), and a case that
# called skip() reported as skipped.  cmocka 1.1.5 (Debian 12) prints a
# skip() as "not ok N # SKIP name", which meson counts as a failure; this
# rewrites it to "ok N # SKIP name", what cmocka 1.1.6 and later print.
# The program's exit status is kept.  Every cmocka unit test runs through
# it (tests/unit/meson.build: cmocka_tap), so skip() is the one way a case
# skips; it says why with print_message("# ...") first.
set -o pipefail
CMOCKA_MESSAGE_OUTPUT=TAP "$@" | sed -u 's/^not ok \([0-9][0-9]*\) # SKIP/ok \1 # SKIP/'
