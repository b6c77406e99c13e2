#!/usr/bin/env bash
# test-gen-cli.sh HPS_GEN [HPS_CONF] -- end-to-end test of the hps-gen CLI.
#
# Runs every subcommand in a temporary directory and checks exit statuses,
# file sizes, the refusal to overwrite without --force, the absence of
# leftover temporary files, the INI's keys and, when HPS_CONF names an
# executable hps-conf, that `hps-conf check` accepts every generated INI
# (otherwise those checks are reported as skipped).  Output is TAP.
set -u

GEN=$1
CONF=${2:-}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hps-gen-cli.XXXXXX") || exit 1
OUT=$WORK/stdout
ERR=$WORK/stderr
trap 'rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM

count=0
failures=0

pass() {
    count=$((count + 1))
    echo "ok $count - $1"
}

fail() {
    count=$((count + 1))
    failures=$((failures + 1))
    echo "not ok $count - $1"
    for f in "$OUT" "$ERR"; do
        [ -s "$f" ] && sed -e 's/^/#   /' "$f" | head -n 20
    done
}

skip() {
    count=$((count + 1))
    echo "ok $count - $1 # SKIP $2"
}

# expect STATUS DESC CMD...: pass if CMD exits with STATUS
expect() {
    local want=$1 desc=$2
    shift 2
    "$@" >"$OUT" 2>"$ERR"
    local rc=$?
    if [ "$rc" -eq "$want" ]; then pass "$desc"; else fail "$desc (exit $rc, want $want)"; fi
}

# has DESC FILE REGEX: pass if FILE has a line matching REGEX
has() {
    if grep -Eq -- "$3" "$2"; then pass "$1"; else fail "$1: no /$3/ in $2"; fi
}

size_is() { # size_is DESC FILE BYTES
    local got
    got=$(stat -c %s "$2" 2>/dev/null || echo missing)
    if [ "$got" = "$3" ]; then pass "$1"; else fail "$1: $2 is $got bytes, want $3"; fi
}

conf_check() { # conf_check INI
    if [ -n "$CONF" ] && [ -x "$CONF" ]; then
        expect 0 "hps-conf check accepts $(basename "$1")" "$CONF" check "$1"
    else
        skip "hps-conf check $(basename "$1")" "hps-conf is not built (${CONF:-no path given})"
    fi
}

no_leftovers() { # no_leftovers DIR
    if ls -A "$1" | grep -Eq '\.(tmp|old)-[0-9]+$'; then
        fail "no temporary files left in $1: $(ls -A "$1" | tr '\n' ' ')"
    else
        pass "no temporary files left in $(basename "$1")"
    fi
}

# ---- help and usage --------------------------------------------------------
expect 0 "--help" "$GEN" --help
has "help documents the request file magic" "$OUT" 'HPSREQ1'
has "help documents the model command" "$OUT" '^hps-gen model --out DIR --model NAME'
expect 0 "model --help" "$GEN" model --help
expect 2 "no command is a usage error" "$GEN"
expect 2 "unknown command" "$GEN" frobnicate
expect 2 "unknown option" "$GEN" model --out "$WORK/x" --model m --bogus
expect 2 "missing --model" "$GEN" model --out "$WORK/x"
expect 2 "bad --key-bytes" "$GEN" model --out "$WORK/x" --model m --key-bytes 5
expect 2 "list length mismatch" "$GEN" model --out "$WORK/x" --model m --rows 1,2,3 --dim 1,2
expect 2 "bad model name" "$GEN" model --out "$WORK/x" --model 'a b'
expect 2 "--shape needs --scale" "$GEN" model --out "$WORK/x" --model m --shape criteo-1tb
expect 2 "unknown shape" "$GEN" model --out "$WORK/x" --model m --shape foo --scale 1
expect 2 "duplicate table names" "$GEN" model --out "$WORK/x" --model m --table-names a,a
[ ! -e "$WORK/x" ] && pass "usage errors create nothing" || fail "usage errors create nothing"

# ---- an explicit model -----------------------------------------------------
M=$WORK/m
expect 0 "model with 3 tables" "$GEN" model --out "$M" --model demo --rows 100,7,3000 \
    --dim 4,1,32 --seed 9
has "summary line: rows, bytes and MB/s" "$OUT" '3 tables, 3107 rows, [0-9]+ bytes .* MB/s'
size_is "table 0 key" "$M/sparse_embedding0/key" 800
# numbers are decimal: --rows 010 is ten rows (it was read as octal: 8)
expect 0 "leading zero" "$GEN" model --out "$WORK/z" --model z --rows 010 --dim 1
size_is "--rows 010 writes 10 rows" "$WORK/z/sparse_embedding0/key" 80
expect 2 "hex is not a number" "$GEN" model --out "$WORK/h" --model h --rows 0x10 --dim 1
size_is "table 0 emb_vector" "$M/sparse_embedding0/emb_vector" 1600
size_is "table 1 key" "$M/sparse_embedding1/key" 56
size_is "table 1 emb_vector" "$M/sparse_embedding1/emb_vector" 28
size_is "table 2 key" "$M/sparse_embedding2/key" 24000
size_is "table 2 emb_vector" "$M/sparse_embedding2/emb_vector" 384000
no_leftovers "$M"
INI=$M/demo.ini
has "ini [hps] supportlonglong" "$INI" '^supportlonglong = true$'
has "ini volatile_db type" "$INI" '^type = multi_process_hash_map$'
has "ini segment name = model" "$INI" '^shared_memory_name = demo$'
has "ini segment size with unit" "$INI" '^shared_memory_size = [0-9]+(MiB|GiB)$'
has "ini persistent_db rocks_db" "$INI" '^type = rocks_db$'
has "ini rocksdb path" "$INI" "^path = $M/rocksdb\$"
has "ini worker section" "$INI" '^\[worker\]$'
has "ini model section" "$INI" '^\[model\.demo\]$'
has "ini sparse_files absolute" "$INI" "^sparse_files = $M/sparse_embedding0,"
has "ini vecsizes" "$INI" '^embedding_vecsize_per_table = 4, 1, 32$'
has "ini one query per table" "$INI" '^maxnum_catfeature_query_per_table_per_sample = 1, 1, 1$'
has "ini defaults" "$INI" '^default_value_for_each_table = 0\.0, 0\.0, 0\.0$'
has "ini device list" "$INI" '^deployed_device_list = 0$'
has "ini gpucache off by default" "$INI" '^gpucache = false$'
conf_check "$INI"

# ---- overwriting -----------------------------------------------------------
sum_before=$(cat "$M"/sparse_embedding*/* | md5sum)
expect 1 "refuses to overwrite without --force" "$GEN" model --out "$M" --model demo --rows 5
has "refusal names the table directory" "$ERR" "$M/sparse_embedding0 exists and is not empty"
has "refusal suggests --force" "$ERR" '--force'
sum_after=$(cat "$M"/sparse_embedding*/* | md5sum)
[ "$sum_before" = "$sum_after" ] && pass "refused run changed nothing" ||
    fail "refused run changed nothing"
expect 0 "--force replaces the model" "$GEN" model --out "$M" --model demo --rows 5 --dim 2 --force
size_is "replaced table key" "$M/sparse_embedding0/key" 40
size_is "replaced table emb_vector" "$M/sparse_embedding0/emb_vector" 40
no_leftovers "$M"

E=$WORK/empty
mkdir -p "$E/sparse_embedding0"
expect 0 "an empty table directory is filled without --force" "$GEN" model --out "$E" \
    --model e --rows 3 --dim 2
size_is "filled key" "$E/sparse_embedding0/key" 24
F=$WORK/file
mkdir -p "$F" && echo x >"$F/sparse_embedding0"
expect 1 "a file in place of a table is refused" "$GEN" model --out "$F" --model f
touch "$WORK/plain"
expect 1 "an output path under a file fails" "$GEN" model --out "$WORK/plain/sub" --model p
has "the failure names the path" "$ERR" "$WORK/plain/sub"

# ---- INI options, 32-bit keys ----------------------------------------------
K=$WORK/k32
expect 0 "32-bit model with INI options" "$GEN" model --out "$K" --model k32 --key-bytes 4 \
    --table-names users,items --rows 10,20 --dim 8 --gpucache --gpucacheper 1.0 \
    --segment seg.k32 --default -0.5,0.25 --max-query 2,3 --max-batch 4096 \
    --http-port 9100 --ini "$WORK/k32.ini"
[ -s "$WORK/k32.ini" ] && pass "--ini PATH is written" || fail "--ini PATH is written"
has "32-bit keys: supportlonglong = false" "$WORK/k32.ini" '^supportlonglong = false$'
has "--gpucache" "$WORK/k32.ini" '^gpucache = true$'
has "--gpucacheper" "$WORK/k32.ini" '^gpucacheper = 1$'
has "--segment" "$WORK/k32.ini" '^shared_memory_name = seg\.k32$'
has "--default" "$WORK/k32.ini" '^default_value_for_each_table = -0\.5, 0\.25$'
has "--max-query" "$WORK/k32.ini" '^maxnum_catfeature_query_per_table_per_sample = 2, 3$'
has "--max-batch" "$WORK/k32.ini" '^max_batch_size = 4096$'
has "--http-port and metrics_port" "$WORK/k32.ini" '^metrics_port = 9102$'
has "table names" "$WORK/k32.ini" '^embedding_table_names = users, items$'
conf_check "$WORK/k32.ini"
[ ! -e "$K/k32.ini" ] && pass "--ini moves the INI" || fail "--ini moves the INI"

# ---- criteo shape ----------------------------------------------------------
C=$WORK/criteo
expect 0 "criteo-1tb at scale 1e-4" "$GEN" model --out "$C" --model criteo --shape criteo-1tb \
    --scale 1e-4 --dim 8
n=$(find "$C" -mindepth 1 -maxdepth 1 -type d | wc -l)
[ "$n" -eq 26 ] && pass "26 table directories" || fail "26 table directories (got $n)"
keys=$(cat "$C"/sparse_embedding*/key | wc -c)
[ "$keys" -eq $((18795 * 8)) ] && pass "18795 rows in all" || fail "18795 rows in all ($keys bytes)"
size_is "largest table (3998 rows)" "$C/sparse_embedding19/key" $((3998 * 8))
# Join continuation lines (indented) onto their key's line.
awk '/^[ \t]/ { sub(/^[ \t]+/, " "); line = line $0; next }
     { if (NR > 1) print line; line = $0 } END { print line }' "$C/criteo.ini" >"$WORK/flat.ini"
has "criteo ini lists 26 dims" "$WORK/flat.ini" '^embedding_vecsize_per_table = 8(, 8){25}$'
has "criteo ini lists 26 tables" "$WORK/flat.ini" \
    "^sparse_files = $C/sparse_embedding0(, $C/sparse_embedding[0-9]+){25}\$"
conf_check "$C/criteo.ini"

# ---- requests --------------------------------------------------------------
R=$WORK/req.bin
expect 0 "requests with alpha auto" "$GEN" requests --model-dir "$C" --batch 32 --count 10 \
    --seed 1 --out "$R"
has "requests summary names the alpha" "$OUT" 'alpha [0-9.]+ \(auto'
size_is "request file size = 24 + 8*C*T*B" "$R" $((24 + 8 * 10 * 26 * 32))
magic=$(head -c 8 "$R" | od -An -c | tr -d ' ')
[ "$magic" = 'HPSREQ1\0' ] && pass "magic HPSREQ1\\0" || fail "magic HPSREQ1\\0 (got $magic)"
hdr=$(od -An -t u4 -j 8 -N 8 "$R" | tr -s ' ')
[ "$hdr" = " 26 32" ] && pass "header num_tables 26, batch 32" || fail "header ($hdr)"
cnt=$(od -An -t u8 -j 16 -N 8 "$R" | tr -d ' ')
[ "$cnt" = 10 ] && pass "header count 10" || fail "header count ($cnt)"
cp "$R" "$WORK/req2.bin.orig"
expect 0 "requests are deterministic" "$GEN" requests --model-dir "$C" --model criteo \
    --batch 32 --count 10 --seed 1 --out "$WORK/req2.bin"
cmp -s "$R" "$WORK/req2.bin" && pass "same seed, same bytes" || fail "same seed, same bytes"
expect 0 "other seed" "$GEN" requests --model-dir "$C" --batch 32 --count 10 --seed 2 \
    --out "$WORK/req3.bin"
cmp -s "$R" "$WORK/req3.bin" && fail "other seed, other bytes" || pass "other seed, other bytes"
expect 1 "requests refuse to overwrite" "$GEN" requests --model-dir "$C" --batch 1 --count 1 \
    --out "$R"
expect 0 "requests --force" "$GEN" requests --model-dir "$C" --batch 1 --count 1 --out "$R" --force
size_is "forced request file" "$R" $((24 + 8 * 26))
expect 2 "requests need --batch" "$GEN" requests --model-dir "$C" --count 1 --out "$WORK/r4"
expect 1 "requests on a missing model dir" "$GEN" requests --model-dir "$WORK/nope" --batch 1 \
    --count 1 --out "$WORK/r5"
has "the error names the path" "$ERR" "$WORK/nope"
truncate -s 13 "$C/sparse_embedding3/key"
expect 1 "a key file of bad size is rejected" "$GEN" requests --model-dir "$C" --batch 1 \
    --count 1 --out "$WORK/r6"
has "the error names the key file" "$ERR" "$C/sparse_embedding3/key"

# ---- alpha and row -----------------------------------------------------------
expect 0 "alpha for criteo-1tb at full scale" "$GEN" alpha --shape criteo-1tb --scale 1
has "alpha is about 1.16" "$OUT" '^alpha 1\.1[56][0-9]*$'
has "hot share is 0.96" "$OUT" '^hot_share 0\.96'
expect 0 "row by index" "$GEN" row --table 0 --index 0 --count 2 --dim 3
first=$(head -n 1 "$OUT" | cut -d' ' -f1)
[ "$first" = 616392976978218423 ] && pass "row key = hps_gen_key(0, 0)" || fail "row key ($first)"
expect 0 "row by key" "$GEN" row --table 1 --key 12345 --dim 8
v7=$(cut -d' ' -f9 "$OUT")
[ "$v7" = "-0.601539135" ] && pass "value(1, 12345, 7)" || fail "value(1, 12345, 7) = $v7"
expect 0 "row --model-version 1 is the default" "$GEN" row --table 1 --key 12345 --dim 8 \
    --model-version 1
v7=$(cut -d' ' -f9 "$OUT")
[ "$v7" = "-0.601539135" ] && pass "version 1: value(1, 12345, 7)" || fail "version 1: $v7"
expect 2 "row --model-version 0" "$GEN" row --table 0 --key 1 --model-version 0
has "row --model-version 0: the range" "$ERR" 'model-version 0: must be in \[1, 2\^31-1\]'
# row --model-version V prints what model --model-version V writes: table t's
# files, as "key v0 v1 ..." sorted, equal the rows of keys hps_gen_key(t, 0..N-1).
V2=$WORK/v2
expect 0 "model --model-version 2" "$GEN" model --out "$V2" --model v --rows 5,3 --dim 3,2 \
    --model-version 2 --quiet
has "the INI names version 2" "$V2/v.ini" '^version = 2$'
has "the INI comment names version 2's vectors" "$V2/v.ini" 'hps_gen_vector_v\(t, key, dim, 2\)'
files_as_rows() { # files_as_rows DIR DIM: the rows of DIR/key + DIR/emb_vector, sorted
    python3 - "$1" "$2" <<'EOF'
import struct, sys
d, dim = sys.argv[1], int(sys.argv[2])
keys = open(d + '/key', 'rb').read()
vecs = open(d + '/emb_vector', 'rb').read()
n = len(keys) // 8
ks = struct.unpack('=%dq' % n, keys)
vs = struct.unpack('=%df' % (n * dim), vecs)
for line in sorted('%d %s' % (ks[i], ' '.join('%.9g' % x for x in vs[i * dim:(i + 1) * dim]))
                   for i in range(n)):
    print(line)
EOF
}
for spec in "0 5 3" "1 3 2"; do
    set -- $spec
    "$GEN" row --table "$1" --index 0 --count "$2" --dim "$3" --model-version 2 2>"$ERR" |
        sort >"$WORK/row-v2.txt"
    files_as_rows "$V2/sparse_embedding$1" "$3" >"$WORK/files-v2.txt" 2>>"$ERR"
    if [ -s "$WORK/row-v2.txt" ] && cmp -s "$WORK/row-v2.txt" "$WORK/files-v2.txt"; then
        pass "row --model-version 2 = table $1 of model --model-version 2"
    else
        fail "row --model-version 2 = table $1 of model --model-version 2"
    fi
    "$GEN" row --table "$1" --index 0 --count "$2" --dim "$3" 2>"$ERR" | sort >"$WORK/row-v1.txt"
    if cmp -s "$WORK/row-v1.txt" "$WORK/files-v2.txt"; then
        fail "row without --model-version differs from version 2 (table $1)"
    else
        pass "row without --model-version differs from version 2 (table $1)"
    fi
done

echo "1..$count"
[ "$failures" -eq 0 ]
