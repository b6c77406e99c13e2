#!/usr/bin/env bash
# test-hps-conf.sh -- the hps-conf command line: commands, exit codes (0 ok,
# 1 invalid, 2 usage), in-place set, golden show and doc.  TAP output.
#
# Usage: test-hps-conf.sh HPS_CONF DATA_DIR DOCS/configuration.md
set -u
HPS_CONF=$(realpath "$1")
DATA=$2
DOC=$3
TMP=$(mktemp -d /tmp/hps-conf-cli-XXXXXX)
trap 'rm -rf "$TMP"' EXIT

# shellcheck source=tap.sh
. "$(dirname "$0")/tap.sh"
status() { # status WANT COMMAND...: the command must exit with WANT
    local want=$1
    shift
    "$@" >"$TMP/out" 2>"$TMP/err"
    local got=$?
    [ "$got" -eq "$want" ] || { echo "# exit $got, expected $want: $*"; return 1; }
}

cat >"$TMP/ok.ini" <<'EOF'
; comment kept
[hps]
log_level = info ; inline comment kept

[worker]
http_port = 8000
EOF
printf '[volatile_db]\noverflow_resolution_target = 1.5\n' >"$TMP/bad.ini"

echo "1..24"
ok "--help exits 0 and documents the exit codes" \
    bash -c '"$0" --help | grep -q "^  2  usage error"' "$HPS_CONF"
ok "no command is a usage error (2)" status 2 "$HPS_CONF"
ok "unknown command is a usage error (2)" status 2 "$HPS_CONF" frobnicate x
ok "wrong argument count is a usage error (2)" status 2 "$HPS_CONF" check
ok "check of a valid file exits 0" status 0 "$HPS_CONF" check "$TMP/ok.ini"
ok "check of an invalid file exits 1" status 1 "$HPS_CONF" check "$TMP/bad.ini"
ok "check reports file:line, section, key, value and the rule on stderr" \
    bash -c '"$0" check "$1" 2>&1 >/dev/null | grep -qxF "hps-conf: $1:2: [volatile_db] overflow_resolution_target = 1.5: must be a number in (0, 1]"' \
    "$HPS_CONF" "$TMP/bad.ini"
ok "check of a missing file exits 1" status 1 "$HPS_CONF" check "$TMP/missing.ini"
ok "show of sample.ini equals the golden sample.show" \
    bash -c 'cd "$1" && "$0" show sample.ini | diff -u sample.show -' "$HPS_CONF" "$DATA"
ok "doc equals docs/configuration.md" bash -c '"$0" doc | diff -u "$1" -' "$HPS_CONF" "$DOC"
ok "get prints one value" bash -c '[ "$("$0" get "$1" volatile_db.shared_memory_size)" = 16GiB ]' \
    "$HPS_CONF" "$TMP/ok.ini"
ok "get of a model key" bash -c '[ "$("$0" get "$1" model.wdl.embedding_vecsize_per_table)" = "1, 16" ]' \
    "$HPS_CONF" "$DATA/sample.ini"
ok "get of an unknown key exits 2" status 2 "$HPS_CONF" get "$TMP/ok.ini" hps.nope
chmod 0640 "$TMP/ok.ini"
ok "set of an existing key exits 0" status 0 "$HPS_CONF" set "$TMP/ok.ini" hps.log_level=debug
ok "set changed the value" bash -c '[ "$("$0" get "$1" hps.log_level)" = debug ]' \
    "$HPS_CONF" "$TMP/ok.ini"
ok "set kept comments and the mode" \
    bash -c 'grep -qx "; comment kept" "$0" && grep -qx "log_level = debug ; inline comment kept" "$0" && [ "$(stat -c %a "$0")" = 640 ]' \
    "$TMP/ok.ini"
ok "set adds a key at the end of its section" \
    bash -c '"$0" set "$1" worker.http_threads=4 && [ "$(sed -n 7p "$1")" = "http_threads = 4" ]' \
    "$HPS_CONF" "$TMP/ok.ini"
cp "$TMP/ok.ini" "$TMP/before.ini"
ok "set of an invalid value exits 1" status 1 "$HPS_CONF" set "$TMP/ok.ini" worker.http_port=70000
ok "set of an unknown key exits 2" status 2 "$HPS_CONF" set "$TMP/ok.ini" worker.port=1
ok "set without '=' exits 2" status 2 "$HPS_CONF" set "$TMP/ok.ini" worker.http_port
ok "failed sets left the file byte for byte unchanged" cmp "$TMP/before.ini" "$TMP/ok.ini"
ok "no temporary file is left behind" \
    bash -c '[ "$(ls -A "$0" | sort | tr "\n" " ")" = "bad.ini before.ini err ok.ini out " ]' "$TMP"

# A FIFO nobody writes used to block open() forever: now refused at once
# (timeout turns a regression into a failure), exit 1, the file named.
mkdir "$TMP/fifo" && mkfifo "$TMP/fifo/hps.ini"
ok "check of a FIFO exits 1 at once" status 1 timeout 10 "$HPS_CONF" check "$TMP/fifo/hps.ini"
ok "check of a FIFO names the file and says it is not a regular file" \
    bash -c 'timeout 10 "$0" check "$1" 2>&1 >/dev/null | grep -qxF "hps-conf: cannot read $1: not a regular file (a FIFO)"' \
    "$HPS_CONF" "$TMP/fifo/hps.ini"

[ "$failed" -eq 0 ]
