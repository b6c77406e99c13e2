#!/usr/bin/env bash
# test-hps-conf.sh -- the hps-conf command line: commands, exit codes (0 ok,
# 1 invalid, 2 usage), in-place set (several keys at once: a new model),
# unset and remove-model, golden show and doc.  TAP output.
#
# Usage: test-hps-conf.sh HPS_CONF DATA_DIR DOCS/configuration.md
set -u
HPS_CONF=$(realpath "$1")
DATA=$2
DOC=$3
TMP=$(mktemp -d /tmp/hps-conf-cli-XXXXXX)
MF=$(mktemp -d /tmp/hps-conf-files-XXXXXX) # model files for check --files
trap 'rm -rf "$TMP" "$MF"' EXIT

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
# A model of one table (2 keys, dim 2) with its files, and the same with
# an emb_vector one float short.
mkdir -p "$MF/t0" "$MF/t1"
head -c 16 /dev/zero >"$MF/t0/key"
head -c 16 /dev/zero >"$MF/t0/emb_vector"
head -c 16 /dev/zero >"$MF/t1/key"
head -c 12 /dev/zero >"$MF/t1/emb_vector"
model_ini() { # model_ini DIR: an INI whose model m reads DIR
    printf '[model.m]\nsparse_files = %s\nembedding_vecsize_per_table = 2\n' "$1"
    printf 'maxnum_catfeature_query_per_table_per_sample = 1\n'
}
model_ini "$MF/t0" >"$MF/files-ok.ini"
model_ini "$MF/t1" >"$MF/files-short.ini"
# Contents (little-endian int64 keys, float32 vectors of dim 2): keys 1, 1
# (t0's keys 0, 0 repeat too); keys 1, 2 with a NaN; keys 1, 2^32 + 5.
mkdir -p "$MF/dup" "$MF/nan" "$MF/big"
k1='\001\000\000\000\000\000\000\000'
printf "$k1$k1" >"$MF/dup/key"
head -c 16 /dev/zero >"$MF/dup/emb_vector"
printf "$k1"'\002\000\000\000\000\000\000\000' >"$MF/nan/key"
printf '\000\000\300\177' >"$MF/nan/emb_vector"
head -c 12 /dev/zero >>"$MF/nan/emb_vector"
printf "$k1"'\005\000\000\000\001\000\000\000' >"$MF/big/key"
head -c 16 /dev/zero >"$MF/big/emb_vector"
{ model_ini "$MF/dup"; echo "duplicate_keys = refuse"; } >"$MF/dup-refuse.ini"
{ model_ini "$MF/nan"; echo "nonfinite_values = refuse"; } >"$MF/nan-refuse.ini"
{ printf '[hps]\nsupportlonglong = false\n'; model_ini "$MF/big"; } >"$MF/big32.ini"

echo "1..61"
ok "--help exits 0 and documents the exit codes and check -" \
    bash -c '"$0" --help | grep -q "^  2  usage error" && "$0" --help | grep -qF "(- : standard input"' "$HPS_CONF"
ok "no command is a usage error (2)" status 2 "$HPS_CONF"
ok "unknown command is a usage error (2)" status 2 "$HPS_CONF" frobnicate x
ok "wrong argument count is a usage error (2)" status 2 "$HPS_CONF" check
ok "check of a valid file exits 0" status 0 "$HPS_CONF" check "$TMP/ok.ini"
ok "check --files with the model's files in place exits 0" \
    status 0 "$HPS_CONF" check --files "$MF/files-ok.ini"
ok "check --files of an emb_vector one float short exits 1 naming model, entry and file" \
    bash -c '"$0" check --files "$1" 2>&1 >/dev/null | grep -q "^hps-conf: $1:[0-9][0-9]*: \[model.m\] sparse_files entry 1 ($2): .*emb_vector"; [ "${PIPESTATUS[0]}" = 1 ]' \
    "$HPS_CONF" "$MF/files-short.ini" "$MF/t1"
ok "check without --files does not open model files" status 0 "$HPS_CONF" check "$MF/files-short.ini"
printf '[volatile_db]\ntype = disabled\n' >"$MF/vdb-off.ini"
ok "check of [volatile_db] type = disabled exits 0 and says what it means (hps_conf_notes)" \
    bash -c '"$0" check "$1" 2>&1 >/dev/null | grep -q "^hps-conf: $1: warning: \[volatile_db\] type = disabled: .* holds no rows at start"; [ "${PIPESTATUS[0]}" = 0 ]' \
    "$HPS_CONF" "$MF/vdb-off.ini"
ok "check --files warns about repeated keys (duplicate_keys = warn) and exits 0" \
    bash -c '"$0" check --files "$1" 2>&1 >/dev/null | grep -q "^hps-conf: $1: warning: \[model.m\] table sparse_embedding0: .*2 rows overridden.*(duplicate_keys = warn)"; [ "${PIPESTATUS[0]}" = 0 ]' \
    "$HPS_CONF" "$MF/files-ok.ini"
ok "check --files refuses repeated keys with duplicate_keys = refuse (exit 1)" \
    bash -c '"$0" check --files "$1" 2>&1 >/dev/null | grep -q "^hps-conf: $1: \[model.m\] refused: .*key on more than one row.*(duplicate_keys = refuse)"; [ "${PIPESTATUS[0]}" = 1 ]' \
    "$HPS_CONF" "$MF/dup-refuse.ini"
ok "check --files refuses a NaN with nonfinite_values = refuse (exit 1)" \
    bash -c '"$0" check --files "$1" 2>&1 >/dev/null | grep -q "^hps-conf: $1: \[model.m\] refused: .*1 row with a NaN or Inf value (first: row 0, key 1) (nonfinite_values = refuse)"; [ "${PIPESTATUS[0]}" = 1 ]' \
    "$HPS_CONF" "$MF/nan-refuse.ini"
ok "check --files refuses a key past 2^32 in a 32-bit model (exit 1)" \
    bash -c '"$0" check --files "$1" 2>&1 >/dev/null | grep -q "^hps-conf: $1: \[model.m\] refused: .*key 4294967301 does not fit a 32-bit-key table"; [ "${PIPESTATUS[0]}" = 1 ]' \
    "$HPS_CONF" "$MF/big32.ini"
ok "check --bogus FILE is a usage error (2)" status 2 "$HPS_CONF" check --bogus "$TMP/ok.ini"
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
ok "get of a key of a model the file lacks names the model and the file's models" \
    bash -c '"$0" get "$1" model.nosuch.gpucache 2>&1 >/dev/null | grep -qxF "hps-conf: $1 has no [model.nosuch]; its models: wdl dcn"; [ "${PIPESTATUS[0]}" = 2 ]' \
    "$HPS_CONF" "$DATA/sample.ini"
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
ok "check of a FIFO says that standard input is named -" \
    bash -c 'timeout 10 "$0" check "$1" 2>&1 >/dev/null | grep -qxF "hps-conf: to check standard input (a pipe), name it -: hps-conf check -"' \
    "$HPS_CONF" "$TMP/fifo/hps.ini"

# check -: the INI from standard input (a pipe from hps-conf import).
ok "check - reads a valid INI from a pipe: exit 0, <stdin>: OK" \
    bash -c 'cat "$1" | timeout 10 "$0" check - | grep -qxF "<stdin>: OK" && [ "${PIPESTATUS[1]}" = 0 ]' \
    "$HPS_CONF" "$TMP/ok.ini"
ok "check - of an invalid INI exits 1 and names <stdin> and the line" \
    bash -c 'timeout 10 "$0" check - <"$1" 2>&1 >/dev/null | grep -qxF "hps-conf: <stdin>:2: [volatile_db] overflow_resolution_target = 1.5: must be a number in (0, 1]" && [ "${PIPESTATUS[0]}" = 1 ]' \
    "$HPS_CONF" "$TMP/bad.ini"
ok "check - refuses a NUL byte with its line, as for a file" \
    bash -c 'printf "[hps]\n\0\n" | timeout 10 "$0" check - 2>&1 >/dev/null | grep -qxF "hps-conf: <stdin>:2: the line contains a NUL byte"' \
    "$HPS_CONF"
ok "check - refuses more than 16 MiB, as for a file" \
    bash -c 'head -c 16777216 /dev/zero | tr "\0" "#" | timeout 10 "$0" check - 2>&1 >/dev/null | grep -qxF "hps-conf: <stdin>: larger than 16 MiB, not a configuration file"' \
    "$HPS_CONF"

# ---- set of several keys (a new model), unset, remove-model -----------------
M=$TMP/models
mkdir "$M"
cat >"$M/hps.ini" <<'EOF'
; models served here

[hps]
log_level = info

; the ranking model
[model.a]
sparse_files = /m/a/0
embedding_vecsize_per_table = 8
maxnum_catfeature_query_per_table_per_sample = 1
gpucache = false ; no GPU cache
; end of a

; workers
[worker]
http_port = 8000
EOF
chmod 0604 "$M/hps.ini"
cp "$M/hps.ini" "$M/orig.ini"
ok "--help documents set with several assignments, unset and remove-model" \
    bash -c '"$0" --help | grep -q "^  set FILE SECTION.KEY=VALUE\.\.\.$" && "$0" --help | grep -q "^  unset FILE SECTION.KEY\.\.\." && "$0" --help | grep -q "^  remove-model FILE NAME"' \
    "$HPS_CONF"
ok "set of one key of a new model exits 1 (its required keys are missing)" \
    status 1 "$HPS_CONF" set "$M/hps.ini" model.n.sparse_files=/m/n/0
ok "set of an incomplete new model exits 1 and names the missing key" \
    bash -c '"$0" set "$1" model.n.sparse_files=/m/n/0 model.n.embedding_vecsize_per_table=16 2>&1 | grep -qxF "hps-conf: $1:20: [model.n] maxnum_catfeature_query_per_table_per_sample: missing required key"; [ "${PIPESTATUS[0]}" -eq 1 ]' \
    "$HPS_CONF" "$M/hps.ini"
ok "set with one assignment lacking '=' exits 2" \
    status 2 "$HPS_CONF" set "$M/hps.ini" model.n.sparse_files=/m/n/0 model.n.gpucache
ok "set with one unknown key among several exits 2" \
    status 2 "$HPS_CONF" set "$M/hps.ini" model.n.sparse_files=/m/n/0 model.n.nope=1
ok "unset of a required key exits 1" status 1 "$HPS_CONF" unset "$M/hps.ini" model.a.sparse_files
ok "unset of an unknown key exits 2" status 2 "$HPS_CONF" unset "$M/hps.ini" hps.nope
ok "unset of a key the file does not set exits 2 and names it" \
    bash -c '"$0" unset "$1" hps.heartbeat_interval_ms 2>&1 >/dev/null | grep -qxF "hps-conf: $1: [hps] heartbeat_interval_ms is not set (nothing to remove)"; [ "${PIPESTATUS[0]}" -eq 2 ]' \
    "$HPS_CONF" "$M/hps.ini"
ok "remove-model of an unknown model exits 2 and names it" \
    bash -c '"$0" remove-model "$1" zz 2>&1 >/dev/null | grep -qxF "hps-conf: $1: no section [model.zz] (the models are a)"; [ "${PIPESTATUS[0]}" -eq 2 ]' \
    "$HPS_CONF" "$M/hps.ini"
ok "remove-model of a bad model name exits 2" status 2 "$HPS_CONF" remove-model "$M/hps.ini" "a b"
ok "remove-model without a name exits 2" status 2 "$HPS_CONF" remove-model "$M/hps.ini"
ok "refused edits left the file byte for byte unchanged" cmp "$M/orig.ini" "$M/hps.ini"
ok "set of a whole new model and another key exits 0" \
    status 0 "$HPS_CONF" set "$M/hps.ini" model.n.sparse_files=/m/n/0,/m/n/1 \
    model.n.embedding_vecsize_per_table=16,4 \
    model.n.maxnum_catfeature_query_per_table_per_sample=2,1 hps.log_level=warn
# the original with the new log_level, then the new section after a blank line
{ sed 's/^log_level = info$/log_level = warn/' "$M/orig.ini"; echo; cat <<'EOF'; } >"$M/want-set.ini"
[model.n]
sparse_files = /m/n/0,/m/n/1
embedding_vecsize_per_table = 16,4
maxnum_catfeature_query_per_table_per_sample = 2,1
EOF
ok "set appended the model section and kept everything else" cmp "$M/want-set.ini" "$M/hps.ini"
ok "the new model is valid and has its values" \
    bash -c '"$0" check "$1" && [ "$("$0" get "$1" model.n.embedding_vecsize_per_table)" = "16, 4" ]' \
    "$HPS_CONF" "$M/hps.ini"
ok "unset of an optional key exits 0" status 0 "$HPS_CONF" unset "$M/hps.ini" model.a.gpucache
ok "unset removed the line; the key has its default" \
    bash -c '! grep -q gpucache "$1" && [ "$("$0" get "$1" model.a.gpucache)" = true ] && grep -qx "; end of a" "$1"' \
    "$HPS_CONF" "$M/hps.ini"
ok "remove-model of the first model exits 0" status 0 "$HPS_CONF" remove-model "$M/hps.ini" a
cat >"$M/want-rm.ini" <<'EOF'
; models served here

[hps]
log_level = warn

; workers
[worker]
http_port = 8000

[model.n]
sparse_files = /m/n/0,/m/n/1
embedding_vecsize_per_table = 16,4
maxnum_catfeature_query_per_table_per_sample = 2,1
EOF
ok "remove-model took its section and comments, kept the next section's comment" \
    cmp "$M/want-rm.ini" "$M/hps.ini"
ok "remove-model of the only model exits 0 and leaves a valid file" \
    bash -c '"$0" remove-model "$1" n && "$0" check "$1" && [ "$(tail -n 1 "$1")" = "http_port = 8000" ] && ! grep -q "^\[model" "$1"' \
    "$HPS_CONF" "$M/hps.ini"
ok "the edits kept the mode" bash -c '[ "$(stat -c %a "$0")" = 604 ]' "$M/hps.ini"
ok "the edits left no temporary file" \
    bash -c '[ "$(ls -A "$0" | tr "\n" " ")" = "hps.ini orig.ini want-rm.ini want-set.ini " ]' "$M"

[ "$failed" -eq 0 ]
