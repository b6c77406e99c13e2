#!/usr/bin/env bash
# test-hps-shm.sh HPS_SHM SHM_FIXTURE -- end-to-end test of the hps-shm CLI.
#
# shm-fixture creates /dev/shm/hps.test-<pid> with known tables and rows and
# writes the expected rows of each table to $WORK/demo.<table>.txt; every
# subcommand is then run in text and --json form and its output checked.
# A foreign object /dev/shm/hps.test-<pid>-bad checks the refusal paths,
# and copies of the segment with one field corrupted
# (/dev/shm/hps.test-<pid>-c, offsets from shm-fixture --offsets) the
# handling of damaged segments by info, get, dump and check; a copy as
# /dev/shm/.hps.test-<pid>.new what a build killed before it published
# leaves (ls lists it, rm frees it).
# All objects are removed on exit, whatever happens.  Output is TAP-like;
# the exit status is the number of failed checks (capped at 1).
set -u

TOOL=$1
FIXTURE=$2
NAME=test-$$
BAD=test-$$-bad
COPY=test-$$-c
MISSING=test-$$-missing
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hps-shm-test.XXXXXX") || exit 1
OUT=$WORK/out
ERR=$WORK/err

cleanup() {
    [ -n "$HOLDER" ] && kill -9 "$HOLDER" 2>/dev/null
    rm -f "/dev/shm/hps.$NAME" "/dev/shm/hps.$BAD" "/dev/shm/hps.$MISSING" "/dev/shm/hps.$COPY"
    rm -f "/dev/shm/.hps.$NAME.new" "/dev/shm/.hps.$NAME.lock"
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

count=0
failures=0
HOLDER=

pass() {
    count=$((count + 1))
    echo "ok $count - $1"
}

fail() {
    count=$((count + 1))
    failures=$((failures + 1))
    echo "not ok $count - $1"
    for f in "$OUT" "$ERR"; do
        [ -s "$f" ] && sed -e 's/^/#   /' "$f" | head -n 40
    done
}

check() { # check DESC CMD...: pass if CMD succeeds
    local desc=$1
    shift
    if "$@" >/dev/null 2>&1; then pass "$desc"; else fail "$desc"; fi
}

# run WANT_RC DESC CMD...: run CMD (stdout to $OUT, stderr to $ERR), check rc.
run() {
    local want=$1 desc=$2 rc
    shift 2
    "$@" >"$OUT" 2>"$ERR"
    rc=$?
    if [ "$rc" -eq "$want" ]; then
        pass "$desc (exit $rc)"
    else
        fail "$desc: exit $rc, wanted $want"
    fi
}

json_valid() { # json_valid DESC: $OUT is one valid JSON document
    if python3 -m json.tool "$OUT" >/dev/null 2>"$WORK/jerr"; then
        pass "$1: valid JSON"
    else
        cat "$WORK/jerr" >>"$ERR"
        fail "$1: invalid JSON"
    fi
}

# json_assert DESC PYEXPR: PYEXPR is true with d = the JSON document in $OUT.
json_assert() {
    if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if eval(sys.argv[2]) else 1)' \
        "$OUT" "$2" 2>"$WORK/jerr"; then
        pass "$1"
    else
        cat "$WORK/jerr" >>"$ERR"
        fail "$1: $2"
    fi
}

out_has() { # out_has DESC STRING: STRING occurs in $OUT
    if grep -qF -- "$2" "$OUT"; then pass "$1"; else fail "$1: no '$2' in stdout"; fi
}

err_has() { # err_has DESC STRING: STRING occurs in $ERR
    if grep -qF -- "$2" "$ERR"; then pass "$1"; else fail "$1: no '$2' in stderr"; fi
}

out_is() { # out_is DESC < EXPECTED: $OUT is exactly EXPECTED
    if diff -u - "$OUT" >"$WORK/diff"; then
        pass "$1"
    else
        cat "$WORK/diff" >>"$ERR"
        fail "$1: output differs"
    fi
}

# dump_as_text DIR DIM: the rows of DIR/key + DIR/emb_vector as sorted
# "key v0 v1 ..." lines (%.9g), the form of the fixture's expected files.
dump_as_text() {
    python3 - "$1" "$2" <<'EOF'
import struct, sys
d, dim = sys.argv[1], int(sys.argv[2])
keys = open(d + '/key', 'rb').read()
vecs = open(d + '/emb_vector', 'rb').read()
n = len(keys) // 8
assert len(keys) == 8 * n and len(vecs) == 4 * n * dim, (len(keys), len(vecs))
ks = struct.unpack('=%dq' % n, keys)
vs = struct.unpack('=%df' % (n * dim), vecs)
for k, v in sorted((ks[i], vs[i * dim:(i + 1) * dim]) for i in range(n)):
    print(k, ' '.join('%.9g' % x for x in v))
EOF
}

size_is() { # size_is DESC FILE BYTES
    local got
    got=$(stat -c %s "$2" 2>/dev/null || echo none)
    if [ "$got" = "$3" ]; then pass "$1"; else fail "$1: $2 has $got bytes, wanted $3"; fi
}

only_model_files() { # only_model_files DESC DIR: DIR holds exactly key and emb_vector
    local got
    got=$(ls -A "$2" 2>/dev/null | sort | tr '\n' ' ')
    if [ "$got" = "emb_vector key " ]; then pass "$1"; else fail "$1: '$2' holds: $got"; fi
}

# ---- setup -----------------------------------------------------------------

rm -f "/dev/shm/hps.$NAME" "/dev/shm/hps.$BAD"
run 0 "fixture creates segment $NAME" "$FIXTURE" "$NAME" "$WORK"
if [ ! -e "/dev/shm/hps.$NAME" ]; then
    fail "fixture left no /dev/shm/hps.$NAME; cannot go on"
    exit 1
fi
head -c 65536 /dev/zero >"/dev/shm/hps.$BAD"

# ---- usage -----------------------------------------------------------------

run 2 "no command" "$TOOL"
run 2 "unknown command" "$TOOL" frobnicate
err_has "unknown command named" "unknown command 'frobnicate'"
run 2 "unknown option" "$TOOL" --frobnicate ls
run 2 "info without NAME" "$TOOL" info
run 2 "dump with 3 arguments" "$TOOL" dump "$NAME" demo t64
run 0 "--help" "$TOOL" --help
out_has "--help prints the usage" "usage: hps-shm"
run 0 "help after a command" "$TOOL" info --help
out_has "help after a command prints the usage" "usage: hps-shm"
out_has "--help: TABLE may be an index" "index among MODEL's tables: 0, 1, ..."
out_has "--help: ls explains orphan" "orphan (it is gone: nothing loads or"
out_has "--help: ls explains stalled" "stalled (the coordinator is attached but silent past"
out_has "--help lists --version" "--version   show the version and exit"
run 0 "--version" "$TOOL" --version
if [ "$(wc -l <"$OUT")" -eq 1 ] && grep -Eqx 'hps-shm [^ ]+' "$OUT"; then
    pass "--version prints 'hps-shm VERSION' as the other tools"
else
    fail "--version prints 'hps-shm VERSION' as the other tools"
fi

# ---- ls --------------------------------------------------------------------

# The fixture (the creator) is gone and no coordinator ever beat: an orphan.
run 0 "ls" "$TOOL" ls
if grep -Eq "^$NAME +8\.0 MiB +[0-9.]+ [KM]iB +2 +[0-9]+  orphan: no coordinator, creator gone\$" \
    "$OUT"; then
    pass "ls lists $NAME: 2 tables, attachable, orphan (creator gone, no coordinator)"
else
    fail "ls lists $NAME: 2 tables, attachable, orphan (creator gone, no coordinator)"
fi
if awk -v n="$BAD" '$1 == n && /refused: / { f = 1 } END { exit !f }' "$OUT"; then
    pass "ls shows why $BAD is refused"
else
    fail "ls shows why $BAD is refused"
fi
run 0 "ls --json" "$TOOL" ls --json
json_valid "ls --json"
json_assert "ls --json: $NAME attachable, 2 tables, created by the fixture" \
    "[s for s in d['segments'] if s['name'] == '$NAME' and s['attachable'] and s['tables'] == 2 and s['size_bytes'] == 8 << 20 and s['committed_bytes'] > 0 and s['creator_pid'] > 0]"
json_assert "ls --json: $NAME orphan, creator gone, no coordinator" \
    "[s for s in d['segments'] if s['name'] == '$NAME' and s['status'] == 'orphan' and not s['creator_alive'] and s['coordinator_pid'] == 0 and not s['coordinator_alive'] and s['attached_processes'] == 0]"
json_assert "ls --json: $BAD refused with a message" \
    "[s for s in d['segments'] if s['name'] == '$BAD' and not s['attachable'] and s['status'] == 'refused' and s['message'] and s['error'].startswith('HPS_E')]"

# ---- info ------------------------------------------------------------------

run 0 "info" "$TOOL" info "$NAME"
out_has "info shows the segment" "segment $NAME"
out_has "info shows the format word in hex" "format           0x"
out_has "info shows table t64" "table demo/t64 (id 0)"
out_has "info shows table t32" "table demo/t32 (id 1)"
out_has "info shows t64 geometry" "dim 4, keys int64 (8 bytes), default 0.5"
out_has "info shows t32 overflow" "margin 1000 rows/partition, policy evict_oldest, target 0.5 (evict down to 500 rows)"
out_has "info shows t64 counters" "inserts 8, updates 1, erased 1, evictions 0"
out_has "info shows t64 hit rate" "lookups 2, hits 1 (hit rate 50.0%)"
out_has "info shows per-partition fill" "rows/capacity per partition:"
out_has "info shows the process table" "(this hps-shm)"
# The allocator's free list is labelled as such, beside the unused bytes
# (never allocated): a bare "free 0 bytes" read as "the segment is full".
if grep -Eq '^  free +[0-9]' "$OUT"; then
    fail "info has no bare 'free N bytes' line"
else
    pass "info has no bare 'free N bytes' line"
fi
out_has "info labels the free list" "  free list        0 bytes (0 B), freed blocks kept for reuse"
INFO_TEXT=$WORK/info.txt
cp "$OUT" "$INFO_TEXT"
run 0 "info --json" "$TOOL" --json info "$NAME"
json_valid "info --json"
json_assert "info --json: header" \
    "d['segment']['name'] == '$NAME' and d['segment']['format'].startswith('0x') and d['segment']['num_tables'] == 2 and d['segment']['size_bytes'] == 8 << 20 and d['segment']['allocation_rate'] == 1 << 20 and d['segment']['used_bytes'] <= d['segment']['committed_bytes'] <= d['segment']['size_bytes']"
json_assert "info --json: unused = size - used - free list; free_bytes kept" \
    "d['segment']['free_bytes'] == 0 and d['segment']['unused_bytes'] == d['segment']['size_bytes'] - d['segment']['used_bytes'] - d['segment']['free_bytes'] > 0"
UNUSED=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["segment"]["unused_bytes"])' "$OUT" 2>/dev/null)
if grep -Eq "^  unused +$UNUSED bytes \(7\.[0-9] MiB\), never allocated yet\$" "$INFO_TEXT"; then
    pass "info shows the unused bytes ($UNUSED)"
else
    cat "$INFO_TEXT" >>"$ERR"
    fail "info shows the unused bytes ($UNUSED)"
fi
T64="[t for t in d['tables'] if t['table'] == 't64'][0]"
T32="[t for t in d['tables'] if t['table'] == 't32'][0]"
json_assert "info --json: t64 geometry" \
    "[t['model'] == 'demo' and t['dim'] == 4 and t['key_bytes'] == 8 and t['default_value'] == 0.5 and t['num_partitions'] == 4 and t['overflow_margin'] is None and t['overflow_policy'] == 'evict_random' and len(t['partitions']) == 4 for t in [$T64]][0]"
json_assert "info --json: t64 counters" \
    "[t['rows'] == 7 and t['inserts'] == 8 and t['updates'] == 1 and t['erased'] == 1 and t['lookups'] == 2 and t['hits'] == 1 and t['hit_rate'] == 0.5 and t['evictions'] == 0 and t['capacity'] >= 7 and t['bytes'] > 0 for t in [$T64]][0]"
json_assert "info --json: t64 partitions add up" \
    "[sum(p['rows'] for p in t['partitions']) == 7 and sum(p['capacity'] for p in t['partitions']) == t['capacity'] and t['fill']['min'] <= t['fill']['mean'] <= t['fill']['max'] for t in [$T64]][0]"
json_assert "info --json: t32" \
    "[t['rows'] == 4 and t['dim'] == 3 and t['key_bytes'] == 4 and t['default_value'] == -1 and t['overflow_margin'] == 1000 and t['overflow_target_rows'] == 500 and t['overflow_policy'] == 'evict_oldest' and len(t['partitions']) == 2 for t in [$T32]][0]"
json_assert "info --json: this tool in the process table" \
    "[p for p in d['processes'] if p['self'] and p['role'] == 'tool' and p['alive'] and p['device'] is None]"

# ---- info: GPU caches (registry entries made by the fixture, no GPU) -------

FXPID=$(cat "$WORK/fixture.pid" 2>/dev/null || echo 0)
"$FIXTURE" --hold "$NAME" "$WORK" &
HOLDER=$!
for _ in $(seq 200); do [ -s "$WORK/holder.pid" ] && break; sleep 0.05; done
if [ "$(cat "$WORK/holder.pid" 2>/dev/null)" = "$HOLDER" ]; then
    pass "holder $HOLDER created GPU cache 2"
else
    fail "holder $HOLDER created GPU cache 2 (no $WORK/holder.pid within 10 s)"
fi
run 0 "info (GPU caches)" "$TOOL" info "$NAME"
out_has "info lists 3 GPU caches" "gpu caches (3)"
out_has "info: cache 0 shape" "cache 0: demo/t64 (table 0) on device 0, ready, generation 1, dim 4, lru"
out_has "info: cache 0 occupancy" "capacity 1024 rows, 1.0 MiB, occupancy 256/1024 (25.0%)"
out_has "info: cache 0 hit rate" "lookups 1000, hits 750 (hit rate 75.0%)"
out_has "info: cache 0 counters" "inserts 300, evictions 44, refreshed 20, full refreshes 1"
out_has "info: cache 0 repairs" "lock timeouts 2, repaired sets 3"
out_has "info: cache 0 processes" "creator pid $FXPID (gone), refresher pid $FXPID (gone), attached pids none"
out_has "info: cache 1 shape" "cache 1: demo/t32 (table 1) on device 1, creating, generation 1, dim 3, lfu"
out_has "info: cache 1 never published" "counters never published"
out_has "info: cache 2 shape" "cache 2: demo/t64 (table 0) on device 2, ready, generation 1, dim 4, lru"
out_has "info: cache 2 occupancy" "capacity 512 rows, 64.0 KiB, occupancy 512/512 (100.0%)"
out_has "info: cache 2 processes" "creator pid $HOLDER (alive), refresher pid $HOLDER (alive), attached pids $HOLDER"
# The holder beat as the coordinator: ls shows the segment ok while it lives.
run 0 "ls (live coordinator)" "$TOOL" ls
if grep -Eq "^$NAME .*  ok\$" "$OUT"; then
    pass "ls: $NAME ok while its coordinator lives"
else
    fail "ls: $NAME ok while its coordinator lives"
fi
run 0 "ls --json (live coordinator)" "$TOOL" ls --json
json_assert "ls --json: $NAME ok, coordinator $HOLDER alive" \
    "[s for s in d['segments'] if s['name'] == '$NAME' and s['status'] == 'ok' and s['coordinator_pid'] == $HOLDER and s['coordinator_alive'] and s['attached_processes'] == 1]"
run 0 "info --json (GPU caches)" "$TOOL" info --json "$NAME"
json_valid "info --json (GPU caches)"
G0="[g for g in d['gpu_caches'] if g['index'] == 0][0]"
G1="[g for g in d['gpu_caches'] if g['index'] == 1][0]"
G2="[g for g in d['gpu_caches'] if g['index'] == 2][0]"
json_assert "info --json: 3 GPU caches" "[g['index'] for g in d['gpu_caches']] == [0, 1, 2]"
json_assert "info --json: cache 0 shape" \
    "[g['model'] == 'demo' and g['table'] == 't64' and g['table_id'] == 0 and g['device'] == 0 and g['state'] == 'ready' and g['generation'] == 1 and g['dim'] == 4 and g['policy'] == 'lru' and g['capacity_rows'] == 1024 and g['bytes'] == 1048576 for g in [$G0]][0]"
json_assert "info --json: cache 0 counters" \
    "[g['occupied'] == 256 and g['occupancy'] == 0.25 and g['lookups'] == 1000 and g['hits'] == 750 and g['hit_rate'] == 0.75 and g['inserts'] == 300 and g['evictions'] == 44 and g['refreshed'] == 20 and g['full_refreshes'] == 1 and g['lock_timeouts'] == 2 and g['repaired_sets'] == 3 for g in [$G0]][0]"
json_assert "info --json: cache 0 counters published by the fixture, seconds ago" \
    "[g['published_ns'] > 0 and 0 <= g['counters_age_s'] < 120 for g in [$G0]][0]"
json_assert "info --json: cache 0 processes (all gone)" \
    "[g['creator_pid'] == $FXPID and not g['creator_alive'] and g['refresher_pid'] == $FXPID and not g['refresher_alive'] and g['attached_pids'] == [] for g in [$G0]][0]"
json_assert "info --json: cache 1 creating, never published" \
    "[g['model'] == 'demo' and g['table'] == 't32' and g['device'] == 1 and g['state'] == 'creating' and g['dim'] == 3 and g['policy'] == 'lfu' and g['capacity_rows'] == 1000 and g['attached_pids'] == [] and g['creator_pid'] == $FXPID and g['hit_rate'] is None and g['counters_age_s'] is None and g['published_ns'] == 0 and g['occupied'] == 0 for g in [$G1]][0]"
json_assert "info --json: cache 2 held by a live process" \
    "[g['table'] == 't64' and g['device'] == 2 and g['state'] == 'ready' and g['capacity_rows'] == 512 and g['bytes'] == 65536 and g['occupancy'] == 1 and g['hit_rate'] == 1 and g['inserts'] == 512 and g['creator_pid'] == $HOLDER and g['creator_alive'] and g['refresher_pid'] == $HOLDER and g['refresher_alive'] and g['attached_pids'] == [$HOLDER] for g in [$G2]][0]"
# rm refuses a segment with a live process attached, and --force is rm's only;
# a staged leftover of a killed build goes all the same (ls says rm frees it,
# and the segment being served is no reason to keep it).
cp "/dev/shm/hps.$NAME" "/dev/shm/.hps.$NAME.new"
run 1 "rm while the holder lives" "$TOOL" rm "$NAME"
err_has "rm while the holder lives: message" "refusing to remove segment '$NAME': 1 live process(es) attached"
err_has "rm while the holder lives: hint" "or pass --force"
err_has "rm while the holder lives: the staged leftover removed" \
    "removed /dev/shm/.hps.$NAME.new (8388608 bytes)"
check "refused rm left the object" test -e "/dev/shm/hps.$NAME"
check "refused rm removed the staged leftover" test ! -e "/dev/shm/.hps.$NAME.new"
run 2 "--force with info" "$TOOL" --force info "$NAME"
err_has "--force with info: message" "--force applies to rm only"
# The holder dies: its entry has no live process left (until reclaimed).
kill -9 "$HOLDER" 2>/dev/null
wait "$HOLDER" 2>/dev/null # reaped: a zombie would still count as alive
run 0 "info --json after the holder died" "$TOOL" --json info "$NAME"
json_assert "info --json: cache 2 has no live process left" \
    "[g['attached_pids'] == [] and not g['creator_alive'] and g['creator_pid'] == $HOLDER and g['state'] == 'ready' for g in [$G2]][0]"
json_assert "info --json: the dead coordinator's recorded state, not alive" \
    "d['segment']['coordinator_state'] == 'serving' and not d['segment']['coordinator_alive'] and d['segment']['coordinator_pid'] == $HOLDER"
run 0 "info after the coordinator died" "$TOOL" info "$NAME"
out_has "info: a dead coordinator's state is the last one recorded" \
    "coordinator      pid $HOLDER (gone), last state serving, heartbeat"
run 0 "--help says coordinator_state is the recorded state" "$TOOL" --help
out_has "--help: coordinator_state read with coordinator_alive" \
    "segment.coordinator_state is the state the coordinator"
run 0 "ls after the coordinator died" "$TOOL" ls
if grep -Eq "^$NAME .*  orphan: coordinator pid $HOLDER gone\$" "$OUT"; then
    pass "ls: $NAME orphan once its coordinator is gone"
else
    fail "ls: $NAME orphan once its coordinator is gone"
fi
run 0 "ls --json after the coordinator died" "$TOOL" --json ls
json_assert "ls --json: $NAME orphan, coordinator $HOLDER gone" \
    "[s for s in d['segments'] if s['name'] == '$NAME' and s['status'] == 'orphan' and s['coordinator_pid'] == $HOLDER and not s['coordinator_alive']]"
HOLDER=

# ---- get -------------------------------------------------------------------

run 0 "get t64" "$TOOL" get "$NAME" demo t64 42 -7 999 9223372036854775807 -9223372036854775808 0
out_is "get t64 prints the exact vectors" <<'EOF'
42: 0.100000001 -0.00100000005 1.00000002e+20 -2.5
-7: -1 -0.875 -0.75 -0.625
999: missing (default 0.5)
9223372036854775807: 4 4.125 4.25 4.375
-9223372036854775808: 5 5.125 5.25 5.375
0: 0 0.125 0.25 0.375
EOF
run 0 "get t64 erased key" "$TOOL" get "$NAME" demo t64 1000000007
out_is "get t64: the erased key is missing" <<'EOF'
1000000007: missing (default 0.5)
EOF
run 0 "get t32" "$TOOL" get "$NAME" demo t32 4294967295 0 5
out_is "get t32 prints the exact vectors" <<'EOF'
4294967295: 2 2.125 2.25
0: -1 -0.875 -0.75
5: missing (default -1)
EOF
run 0 "get --json" "$TOOL" get "$NAME" demo t64 42 999 --json
json_valid "get --json"
json_assert "get --json: values and default" \
    "d['dim'] == 4 and d['rows'][0] == {'key': 42, 'found': True, 'vector': [0.100000001, -0.00100000005, 1.00000002e+20, -2.5]} and d['rows'][1] == {'key': 999, 'found': False, 'default': 0.5}"
out_has "get --json prints floats with %.9g" "0.100000001"
run 2 "get t32 key 4294967296 (out of range)" "$TOOL" get "$NAME" demo t32 4294967296
err_has "get: clear out-of-range message" "key '4294967296' is not a uint32 (0..4294967295)"
run 2 "get t32 key -1" "$TOOL" get "$NAME" demo t32 -1
err_has "get: negative uint32 key rejected" "key '-1' is not a uint32"
run 2 "get t64 key 9223372036854775808 (out of range)" "$TOOL" get "$NAME" demo t64 9223372036854775808
err_has "get: int64 range message" "is not an int64"
run 2 "get t64 key 12abc" "$TOOL" get "$NAME" demo t64 12abc
run 1 "get unknown table" "$TOOL" get "$NAME" demo nope 1
err_has "get unknown table: message" "no table 'nope' of model 'demo'"
err_has "get unknown table: the model's tables" "(its tables by index: 0 t64, 1 t32)"
err_has "get unknown table: hint" "hint: run 'hps-shm info NAME'"
run 1 "get unknown model" "$TOOL" get "$NAME" nope 0 1
err_has "get unknown model: says the model does not exist" \
    "no model 'nope' in segment '$NAME' (its models: demo)"
if grep -qF "no table" "$ERR"; then
    fail "get unknown model: no 'no table' message"
else
    pass "get unknown model: no 'no table' message"
fi
# TABLE as an index among the model's tables, as the Python API takes it.
run 0 "get by table index 0 (t64)" "$TOOL" get "$NAME" demo 0 42 999
out_is "get by index 0 = get t64" <<'EOF'
42: 0.100000001 -0.00100000005 1.00000002e+20 -2.5
999: missing (default 0.5)
EOF
run 0 "get by table index 1 (t32)" "$TOOL" get "$NAME" demo 1 4294967295
out_is "get by index 1 = get t32" <<'EOF'
4294967295: 2 2.125 2.25
EOF
run 0 "get --json by table index" "$TOOL" get "$NAME" demo 1 5 --json
json_assert "get --json by index names the table" "d['table'] == 't32' and d['dim'] == 3"
run 1 "get table index out of range" "$TOOL" get "$NAME" demo 2 1
err_has "get index out of range: message" \
    "no table '2' of model 'demo' (its tables by index: 0 t64, 1 t32)"

# ---- dump ------------------------------------------------------------------

D64=$WORK/dump/t64/nested
run 0 "dump t64 (creates the directories)" "$TOOL" dump "$NAME" demo t64 "$D64"
out_has "dump reports the rows" "dumped 7 rows of demo/t64 (dim 4)"
size_is "dump t64: key is 7 x int64" "$D64/key" 56
size_is "dump t64: emb_vector is 7 x 4 x float32" "$D64/emb_vector" 112
only_model_files "dump t64 leaves no temporary files" "$D64"
if dump_as_text "$D64" 4 | diff -u "$WORK/demo.t64.txt" - >"$ERR" 2>&1; then
    pass "dump t64: files hold exactly the expected rows"
else
    fail "dump t64: files hold exactly the expected rows"
fi
D32=$WORK/dump/t32
run 0 "dump t32 --json" "$TOOL" --json dump "$NAME" demo t32 "$D32"
json_valid "dump --json"
json_assert "dump --json: counts" \
    "d['rows'] == 4 and d['dim'] == 3 and d['key_file_bytes'] == 32 and d['emb_vector_file_bytes'] == 48"
size_is "dump t32: key is int64 even for 32-bit keys" "$D32/key" 32
size_is "dump t32: emb_vector is 4 x 3 x float32" "$D32/emb_vector" 48
if od -An -t d8 -v "$D32/key" | tr -s ' ' '\n' | grep -qx 4294967295; then
    pass "dump t32: key 4294967295 stored as int64 (od)"
else
    fail "dump t32: key 4294967295 stored as int64 (od)"
fi
if dump_as_text "$D32" 3 | diff -u "$WORK/demo.t32.txt" - >"$ERR" 2>&1; then
    pass "dump t32: files hold exactly the expected rows"
else
    fail "dump t32: files hold exactly the expected rows"
fi
run 0 "dump by table index" "$TOOL" dump "$NAME" demo 1 "$WORK/dump/by-index"
out_has "dump by index 1 dumps t32" "dumped 4 rows of demo/t32 (dim 3)"
run 0 "dump t64 again over existing files" "$TOOL" dump "$NAME" demo t64 "$D64"
only_model_files "dump over existing files leaves no temporary files" "$D64"
run 1 "dump into an impossible directory" "$TOOL" dump "$NAME" demo t64 /dev/null/x
err_has "dump failure: message" "cannot create directory '/dev/null/x'"
# A write failure (file size limit 0, SIGXFSZ ignored so write() gets EFBIG)
# must leave the previous dump in place and no temporary files.
run 1 "dump failing to write" bash -c 'trap "" XFSZ; ulimit -f 0; exec "$@"' dump-efbig \
    "$TOOL" dump "$NAME" demo t64 "$D64"
only_model_files "failed dump leaves no temporary files" "$D64"
if dump_as_text "$D64" 4 | diff -u "$WORK/demo.t64.txt" - >"$ERR" 2>&1; then
    pass "failed dump leaves the previous files intact"
else
    fail "failed dump leaves the previous files intact"
fi

# ---- check -----------------------------------------------------------------

run 0 "check" "$TOOL" check "$NAME"
out_has "check: no problems" "$NAME: ok, no problems found"
run 0 "check --json" "$TOOL" check --json "$NAME"
json_valid "check --json"
json_assert "check --json: ok" "d['ok'] is True and d['problem_count'] == 0 and d['problems'] == []"

# ---- corrupted copies --------------------------------------------------------

# corrupt FORMAT OFFSET VALUE...: /dev/shm/hps.$COPY = the segment with
# struct.pack(FORMAT, VALUE...) written at OFFSET (each VALUE a Python
# expression: 99, 0xfffffffffff0, b'A' * 128).
eval "$("$FIXTURE" --offsets)"
corrupt() {
    cp "/dev/shm/hps.$NAME" "/dev/shm/hps.$COPY" &&
        python3 -c 'import struct, sys
f, off, vals = sys.argv[2], int(sys.argv[3]), [eval(v) for v in sys.argv[4:]]
with open(sys.argv[1], "r+b") as o:
    o.seek(off)
    o.write(struct.pack(f, *vals))' "/dev/shm/hps.$COPY" "$@"
}
T0=$OFF_TABLES
corrupt "<I" "$OFF_NUM_TABLES" 2 # an intact copy
run 0 "the intact copy checks clean" "$TOOL" check "$COPY"

# Table 0 (demo/t64) corrupt in five ways: its index stays 0, get and dump
# refuse it naming the table and the fault, info lists t32 and marks t64.
for c in "dtype 99|<I|$((T0 + T_DTYPE))|99|storage type 99 is no type" \
    "dim 0|<I|$((T0 + T_DIM))|0|dim 0 out of range" \
    "dim 0x7fffffff|<I|$((T0 + T_DIM))|0x7fffffff|dim 2147483647 out of range" \
    "partition count 0xffffffff|<I|$((T0 + T_NPARTS))|0xffffffff|partition count 4294967295 out of range" \
    "parts offset garbage|<Q|$((T0 + T_PARTS))|0xdeadbeef000|partition array offset 15302363377664 (0xdeadbeef000) out of bounds"; do
    IFS='|' read -r what fmt off val why <<<"$c"
    corrupt "$fmt" "$off" "$val"
    run 1 "table 0 $what: get by index 0 refused" "$TOOL" get "$COPY" demo 0 42
    err_has "table 0 $what: get names the corrupt table" "table 0 (demo/t64) of segment '$COPY' is corrupt: $why"
    check "table 0 $what: get printed no vector" test ! -s "$OUT"
    run 1 "table 0 $what: get by name refused" "$TOOL" get "$COPY" demo t64 42
    err_has "table 0 $what: get by name says corrupt" "is corrupt: $why"
    run 0 "table 0 $what: get t32 by index 1 still answers" "$TOOL" get "$COPY" demo 1 4294967295
    out_is "table 0 $what: index 1 is still t32" <<<"4294967295: 2 2.125 2.25"
    run 1 "table 0 $what: dump by index 0 refused" "$TOOL" dump "$COPY" demo 0 "$WORK/cdump"
    err_has "table 0 $what: dump says corrupt" "table 0 (demo/t64) of segment '$COPY' is corrupt"
    check "table 0 $what: dump wrote nothing" test ! -e "$WORK/cdump/key"
    run 1 "table 0 $what: info lists the rest, exit 1" "$TOOL" info "$COPY"
    out_has "table 0 $what: info marks table 0" "table demo/t64 (id 0): CORRUPT, not read: $why"
    out_has "table 0 $what: info lists t32" "table demo/t32 (id 1)"
    out_has "table 0 $what: info lists the processes" "processes ("
    err_has "table 0 $what: info says why it exits 1" "segment '$COPY': 1 problem(s)"
    run 1 "table 0 $what: info --json, exit 1" "$TOOL" --json info "$COPY"
    json_valid "table 0 $what: info --json"
    json_assert "table 0 $what: info --json marks table 0, t32 in full" \
        "[(t['id'], t['table'], t['corrupt']) for t in d['tables']] == [(0, 't64', True), (1, 't32', False)] and '$why' in d['tables'][0]['problem'] and d['tables'][1]['rows'] == 4 and len(d['problems']) == 1"
    run 1 "table 0 $what: check" "$TOOL" check "$COPY"
    out_has "table 0 $what: check says what" "table 0: corrupt descriptor: $why"
done

corrupt "<I" "$OFF_NUM_TABLES" 9999
run 1 "num_tables 9999: info exits 1" "$TOOL" info "$COPY"
out_has "num_tables 9999: info shows the header" "segment $COPY"
out_has "num_tables 9999: info says the count is out of range" \
    "tables           9999 (out of range: at most 256; the table directory is not read)"
out_has "num_tables 9999: info lists the processes" "processes ("
if grep -qF "not found" "$ERR"; then
    fail "num_tables 9999: info says nothing of 'not found'"
else
    pass "num_tables 9999: info says nothing of 'not found'"
fi
run 1 "num_tables 9999: info --json exits 1" "$TOOL" --json info "$COPY"
json_valid "num_tables 9999: info --json"
json_assert "num_tables 9999: info --json header and problem" \
    "d['segment']['num_tables'] == 9999 and d['tables'] == [] and 'table count 9999 out of range' in d['problems'][0]"
run 1 "num_tables 9999: get refused" "$TOOL" get "$COPY" demo 0 42
err_has "num_tables 9999: get says the count is out of range" "table count 9999 out of range (at most 256)"
run 1 "num_tables 9999: check" "$TOOL" check "$COPY"
out_has "num_tables 9999: check names the field" "header: num_tables 9999 out of range"

# Header offsets of the optional areas: check reports each; the readers
# ignore them (info and get still work, nothing follows the offset).
for c in "missq_off|$OFF_MISSQ|0xfffffffffff0" "ustats_off|$OFF_USTATS|0x7ffffffffff8" \
    "ddbstats_off|$OFF_DDBSTATS|0xffffffffffffffc0" "updlog_off|$OFF_UPDLOG|0x7" \
    "gpureg_off|$OFF_GPUREG|0x10000001"; do
    IFS='|' read -r field off val <<<"$c"
    corrupt "<Q" "$off" "$val"
    dec=$(python3 -c "print($val)")
    run 1 "$field=$val: check exits 1" "$TOOL" check "$COPY"
    out_has "$field=$val: check names the field and value" \
        "header: $field $dec ($val) out of bounds or misaligned"
    run 0 "$field=$val: info still works" "$TOOL" info "$COPY"
    run 0 "$field=$val: get still answers" "$TOOL" get "$COPY" demo t64 42
done

# Names: no NUL in the field; bytes that need escaping in JSON.
corrupt "${NAME_FIELD_BYTES}s" "$((T0 + T_MODEL))" "b'A' * $NAME_FIELD_BYTES"
run 1 "model name without NUL: check exits 1" "$TOOL" check "$COPY"
out_has "model name without NUL: check says so" \
    "table 0: model name: no terminating NUL within its 128 bytes"
A120=$(printf 'A%.0s' $(seq 120))
run 1 "model name without NUL: get under the name info shows refused" "$TOOL" get "$COPY" "$A120" 0 42
err_has "model name without NUL: get says why" "is corrupt: model name: no terminating NUL"
run 0 "model name without NUL: demo's index 0 is now t32" "$TOOL" get "$COPY" demo 0 4294967295
out_is "model name without NUL: demo 0 answers t32" <<<"4294967295: 2 2.125 2.25"
corrupt "${NAME_FIELD_BYTES}s" "$((T0 + T_TABLE))" "b'B' * $NAME_FIELD_BYTES"
run 1 "table name without NUL: check exits 1" "$TOOL" check "$COPY"
out_has "table name without NUL: check says so" \
    "table 0: table name: no terminating NUL within its 128 bytes"
# x " y \ z LF SOH DEL 0xff (not UTF-8) U+0085 (C1 control, as UTF-8) NUL
corrupt "11s" "$((T0 + T_TABLE))" "b'x\"y\\\\z\\n\\x01\\x7f\\xff\\xc2\\x85\\x00'"
run 1 "odd table name: info --json exits 1 (corrupt name)" "$TOOL" --json info "$COPY"
if python3 -c 'import sys; open(sys.argv[1], "rb").read().decode("utf-8")' "$OUT" 2>/dev/null; then
    pass "odd table name: info --json is valid UTF-8"
else
    fail "odd table name: info --json is valid UTF-8"
fi
json_valid "odd table name: info --json"
json_assert "odd table name: every byte kept, 0xff as U+00FF" \
    "d['tables'][0]['table'] == 'x\"y\\\\z\\n\\x01\\x7f\\xff\\x85' and d['tables'][0]['corrupt']"
out_has "odd table name: DEL escaped" '\u007f'
out_has "odd table name: byte 0xff as \u00ff" '\u00ff'
out_has "odd table name: C1 control escaped" '\u0085'
out_has "odd table name: control escaped" '\u0001'
run 1 "odd table name: check" "$TOOL" check "$COPY"
out_has "odd table name: check says which byte" \
    "table 0: table name: byte 1 is 0x22, outside [A-Za-z0-9_-]"
run 1 "odd table name: info text" "$TOOL" info "$COPY"
out_has "odd table name: info text escapes the name" \
    'table demo/x"y\\z\x0a\x01\x7f\xff\xc2\x85 (id 0): CORRUPT'
rm -f "/dev/shm/hps.$COPY"

# ---- refusals --------------------------------------------------------------

for cmd in info check; do
    run 1 "$cmd on a missing segment" "$TOOL" $cmd "$MISSING"
    err_has "$cmd on a missing segment: message" "cannot attach to segment '$MISSING': not found (HPS_ENOTFOUND)"
    err_has "$cmd on a missing segment: hint" "hint: run 'hps-shm ls'"
done
run 1 "get on a missing segment" "$TOOL" get "$MISSING" demo t64 1
run 1 "dump on a missing segment" "$TOOL" dump "$MISSING" demo t64 "$WORK/nodump"
check "failed dump created nothing" test ! -e "$WORK/nodump/key"
run 1 "info on a foreign object" "$TOOL" info "$BAD"
err_has "info on a foreign object: message" "cannot attach to segment '$BAD'"
for bad in '' 'a/b' "hps.$NAME/x"; do
    run 2 "info of '$bad', not a segment name" "$TOOL" info "$bad"
    err_has "info of '$bad': message" "'$bad' is not a segment name: 1 to 200 characters of [A-Za-z0-9_.-]"
    check "info of '$bad': no attach attempted (one error line and the hint)" \
        test "$(wc -l <"$ERR")" -eq 2
done
run 2 "rm of a name with a slash" "$TOOL" rm "../$NAME"
check "the segment is still there" test -e "/dev/shm/hps.$NAME"
run 1 "rm of a missing segment" "$TOOL" rm "$MISSING"
err_has "rm of a missing segment: message" "cannot remove segment '$MISSING'"
run 1 "info --json on a missing segment" "$TOOL" info --json "$MISSING"
check "--json error leaves stdout empty" test ! -s "$OUT"

# ---- rm --------------------------------------------------------------------

# What a build killed before it published leaves: the staged object
# /dev/shm/.hps.NAME.new, its creator dead (a copy of the segment, whose
# creator, the fixture, is gone).  ls lists it, rm frees it.
cp "/dev/shm/hps.$NAME" "/dev/shm/.hps.$NAME.new"
run 0 "ls with a staged leftover" "$TOOL" ls
out_has "ls: the staged leftover and how to free it" \
    "staged /dev/shm/.hps.$NAME.new (8.0 MiB): left by a build killed before it published; \`hps-shm rm $NAME\` frees it"
run 0 "ls --json with a staged leftover" "$TOOL" --json ls
json_assert "ls --json: staged, not building" \
    "[s for s in d['staged'] if s['name'] == '$NAME'] == [{'name': '$NAME', 'bytes': 8388608, 'building': False}]"
run 0 "rm (--force, nobody attached)" "$TOOL" rm --force "$NAME"
out_has "rm reports" "removed /dev/shm/hps.$NAME"
out_has "rm reports the staged leftover" "removed /dev/shm/.hps.$NAME.new (8388608 bytes)"
check "rm removed the object" test ! -e "/dev/shm/hps.$NAME"
check "rm removed the staged leftover" test ! -e "/dev/shm/.hps.$NAME.new"
# A coordinator lock no process holds (a killed coordinator's): rm frees
# it, also when no segment is left; one a process holds stays (flock -o:
# held by flock itself, as a live coordinator holds it).
: >"/dev/shm/.hps.$NAME.lock"
flock -o "/dev/shm/.hps.$NAME.lock" sleep 30 &
holder=$!
sleep 0.3
run 1 "rm of a missing segment whose lock is held" "$TOOL" rm "$NAME"
check "rm left the held lock" test -e "/dev/shm/.hps.$NAME.lock"
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null
run 0 "rm of a missing segment whose lock is free" "$TOOL" rm "$NAME"
out_has "rm reports the free lock" "removed /dev/shm/.hps.$NAME.lock, the coordinator lock no process held"
check "rm removed the free lock" test ! -e "/dev/shm/.hps.$NAME.lock"
run 0 "rm --json of the foreign object" "$TOOL" rm --json "$BAD"
json_valid "rm --json"
json_assert "rm --json: removed" "d['removed'] == '$BAD'"
run 0 "ls after rm" "$TOOL" ls
if grep -qE "^($NAME|$BAD) " "$OUT"; then
    fail "ls no longer lists $NAME nor $BAD"
else
    pass "ls no longer lists $NAME nor $BAD"
fi
run 0 "ls --json after rm" "$TOOL" --json ls
json_valid "ls --json after rm"
json_assert "ls --json no longer lists $NAME" \
    "not [s for s in d['segments'] if s['name'] in ('$NAME', '$BAD')]"
run 1 "info after rm" "$TOOL" info "$NAME"

echo "1..$count"
if [ "$failures" -ne 0 ]; then
    echo "# $failures of $count checks failed"
    exit 1
fi
echo "# all $count checks passed"
exit 0
