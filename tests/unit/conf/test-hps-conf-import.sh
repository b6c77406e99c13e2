#!/usr/bin/env bash
# test-hps-conf-import.sh -- `hps-conf import`: HugeCTR's documented ps.json and
# config.pbtxt examples (import/cases) give their golden INI and warnings byte
# for byte, and `hps-conf check` accepts each INI; unknown and obsolete keys
# are named with file and key; bad values name the file, key and range; bad
# input and usage exit 2, --strict with warnings 3.  TAP output.
#
# Usage: test-hps-conf-import.sh HPS_CONF DATA_DIR (tests/unit/conf/import)
set -u
HPS_CONF=$(realpath "$1")
DATA=$(realpath "$2")
TMP=$(mktemp -d /tmp/hps-conf-import-XXXXXX)
trap 'rm -rf "$TMP"' EXIT

# shellcheck source=tap.sh
. "$(dirname "$0")/tap.sh"
# fails WANT_STATUS WANT_STDERR JSON [ARGS...]: import exits WANT_STATUS, prints
# nothing on stdout and exactly WANT_STDERR (one line) on stderr.
fails() {
    local want=$1 msg=$2
    shift 2
    (cd "$TMP" && "$HPS_CONF" import "$@" >out.ini 2>err.txt)
    local got=$?
    [ "$got" -eq "$want" ] || { echo "# exit $got, expected $want"; cat "$TMP/err.txt"; return 1; }
    [ ! -s "$TMP/out.ini" ] || { echo "# output on failure:"; cat "$TMP/out.ini"; return 1; }
    printf '%s\n' "$msg" | diff -u - "$TMP/err.txt"
}
# import_case NAME JSON [PBTXT...]: stdout and stderr equal NAME.ini and NAME.warnings.
import_case() {
    local name=$1 json=$2
    shift 2
    local args=()
    for p in "$@"; do args+=(--pbtxt "$p"); done
    (cd "$DATA" && "$HPS_CONF" import "$json" "${args[@]}" >"$TMP/$name.ini" 2>"$TMP/$name.err") ||
        { echo "# import failed"; cat "$TMP/$name.err"; return 1; }
    diff -u "$DATA/$name.ini" "$TMP/$name.ini" &&
        sed 's/^hps-conf: warning: //' "$TMP/$name.err" | diff -u "$DATA/$name.warnings" -
}

mapfile -t cases < <(grep -v '^#' "$DATA/cases")
echo "1..$((2 * ${#cases[@]} + 34))"

for c in "${cases[@]}"; do
    read -r -a w <<<"$c"
    ok "import ${w[1]} ${w[*]:2}: INI and warnings equal the golden $(basename "${w[0]}").ini/.warnings" \
        import_case "${w[@]}"
    ok "hps-conf check accepts ${w[0]}.ini" "$HPS_CONF" check "$DATA/${w[0]}.ini"
done

# Every warning is "file: key: reason" or "file:line: key: reason".
ok "unknown keys are named with file and JSON path (and a near name)" \
    grep -qxF "unknown_obsolete.json: models[0].gpucachepr: unknown key, not imported (did you mean gpucacheper?)" \
    "$DATA/unknown_obsolete.warnings"
ok "obsolete keys are named with file, JSON path and why" \
    grep -qF "unknown_obsolete.json: volatile_db.max_get_batch_size: obsolete: " \
    "$DATA/unknown_obsolete.warnings"
ok "keys with no meaning here are listed with the reason" \
    grep -qF "every_key.json: models[0].fp8_quant: no meaning here, not imported: " \
    "$DATA/every_key.warnings"
ok "config.pbtxt parameters are named with file:line" \
    grep -qF "every_key.config.pbtxt:23: parameters freeze_sparse: no meaning here" \
    "$DATA/every_key.warnings"

cat >"$TMP/ok.json" <<'JSON'
{"supportlonglong": true,
 "models": [{"model": "m", "sparse_files": ["/a", "/b"], "deployed_device_list": [0],
             "embedding_vecsize_per_table": [8, 16], "default_value_for_each_table": [0, 0],
             "maxnum_catfeature_query_per_table_per_sample": [1, 2]}]}
JSON
sub() { sed "s|\"model\": \"m\",|\"model\": \"m\", $1,|" "$TMP/ok.json" >"$TMP/$2"; }
sub '"gpucacheper": 1.5' range.json
sub '"hit_rate_threshold": -1' range2.json
sub '"embedding_vecsize_per_table_": 1, "thread_pool_size": 4096' range3.json
sub '"gpucache": "yes"' type.json
sub '"thread_pool_size": 99999999999999999999999' big.json
sub '"thread_pool_size": 1e19' big2.json
sed 's/\[8, 16\]/[8]/' "$TMP/ok.json" >"$TMP/len.json"
sed 's/"supportlonglong": true,/"supportlonglong": true,\n "volatile_db": {"type": "redis", "num_partitions": 2, "num_node_connections": 4},/' \
    "$TMP/ok.json" >"$TMP/cross.json"
printf '{"supportlonglong": true,\n "models": [\n  {"model": "m",]\n}\n' >"$TMP/syntax.json"
sed 's/"model": "m"/"model": "a.b"/' "$TMP/ok.json" >"$TMP/name.json"
sed 's/\[1, 2\]/[0, 26]/' "$TMP/ok.json" >"$TMP/entry.json"
sub '"embedding_table_names": ["t", "a.b"]' tname.json
sub '"embedding_table_names": ["t", "t"]' tdup.json
sed 's/ "default_value_for_each_table": \[0, 0\],//' "$TMP/ok.json" >"$TMP/nodef.json"
sed 's/"supportlonglong": true,/"supportlonglong": true,\n "volatile_db": {"type": "redis", "password": "s3 ;cret"},/' \
    "$TMP/ok.json" >"$TMP/pw.json"
sed 's/"supportlonglong": true,/"supportlonglong": true,\n "volatile_db": {"type": "redis", "password": 12345},/' \
    "$TMP/ok.json" >"$TMP/pw2.json"

ok "a value out of range names the JSON file, key and range (exit 2)" \
    fails 2 "hps-conf: range.json: models[0].gpucacheper = 1.5: must be a number in [0, 1]" range.json
ok "a negative hit_rate_threshold names its range" \
    fails 2 "hps-conf: range2.json: models[0].hit_rate_threshold = -1: must be a number in [0, 2]" range2.json
ok "an integer out of range names its range" \
    fails 2 "hps-conf: range3.json: models[0].thread_pool_size = 4096: must be an integer in [1, 1024]" range3.json
ok "an integer beyond 64 bits is refused, not written as the 2^64 - 1 json-c reads it as" \
    fails 2 "hps-conf: big.json:2:48: not valid JSON: an integer beyond 64 bits (above 18446744073709551615 or below -9223372036854775808), which no key accepts" big.json
ok "an integer-valued real beyond 2^63 is out of range (not 'must be an integer')" \
    fails 2 "hps-conf: big2.json: models[0].thread_pool_size = 1e19: is out of range: write integers above 2^63 without a fraction or exponent" big2.json
ok "a value of the wrong JSON type is named" \
    fails 2 "hps-conf: type.json: models[0].gpucache = \"yes\": must be true or false (a JSON boolean)" type.json
ok "a per-table list of the wrong length is named" \
    fails 2 "hps-conf: len.json: models[0].embedding_vecsize_per_table = [8]: has 1 entry, but sparse_files has 2 (one per table)" len.json
ok "a cross-key rule of the INI leads back to the JSON key" \
    fails 2 "hps-conf: cross.json: volatile_db.num_node_connections: [distributed_db] num_node_connections = 4: must be an integer in [1, 256] and at most num_partitions (2)" cross.json
ok "JSON syntax errors give file:line:column" \
    fails 2 "hps-conf: syntax.json:3:17: not valid JSON: quoted object property name expected" syntax.json
ok "a model name that is not an INI section name is refused" \
    fails 2 "hps-conf: name.json: models[0].model = \"a.b\": must be a name matching [A-Za-z0-9_-]{1,120}" name.json
ok "a bad list entry is named by its JSON path, counted from 0" \
    fails 2 "hps-conf: entry.json: models[0].maxnum_catfeature_query_per_table_per_sample[0] = 0: must be an integer in [1, 2147483647]" entry.json
ok "a bad table name is named by its JSON path, counted from 0" \
    fails 2 "hps-conf: tname.json: models[0].embedding_table_names[1] = \"a.b\": must be a name matching [A-Za-z0-9_-]{1,120}" tname.json
ok "a repeated table name is named by JSON path, counted from 0" \
    fails 2 "hps-conf: tdup.json: models[0].embedding_table_names[1] = \"t\": repeats [0]; table names must be unique" tdup.json
ok "a password that cannot be imported is masked in the message" \
    fails 2 "hps-conf: pw.json: volatile_db.password = ********: it contains \" ;\", which starts an INI comment" pw.json
ok "a password of the wrong JSON type is masked in the message" \
    fails 2 "hps-conf: pw2.json: volatile_db.password = ********: must be a JSON string" pw2.json
ok "a missing default_value_for_each_table is warned about, as HugeCTR requires it" \
    bash -c 'cd "$1" && "$0" import nodef.json >d.ini 2>d.err &&
             grep -qxF "hps-conf: warning: nodef.json: models[0].default_value_for_each_table: missing (HugeCTR requires it): the INI default, 0.0 for every table, applies" d.err' \
    "$HPS_CONF" "$TMP"

printf 'name: "m"\nparameters { key: "gpucacheper" value { string_value: "2" } }\n' >"$TMP/range.pbtxt"
printf 'name: "m"\nparameters {\n  key "gpucache"\n}\n' >"$TMP/syntax.pbtxt"
printf 'name: "m"\ninstance_group [ { kind: KIND_GPU gpus: [ 0, 3 ] } ]\n' >"$TMP/gpus.pbtxt"
printf 'name: "other"\n' >"$TMP/other.pbtxt"
printf 'name: "m"\nparameters { key: "refresh_interval" value { string_value: "10" } }\nmax_batch_size: 8\n' \
    >"$TMP/warn.pbtxt"
ok "a config.pbtxt parameter out of range names file:line, key and range" \
    fails 2 "hps-conf: range.pbtxt:2: parameters gpucacheper = \"2\": must be a number in [0, 1]" \
    ok.json --pbtxt range.pbtxt
ok "protobuf text syntax errors give file:line" \
    fails 2 "hps-conf: syntax.pbtxt:3: expected ':' or '{' after the field name \"key\", found string \"gpucache\"" \
    ok.json --pbtxt syntax.pbtxt
ok "instance_group gpus must lie in deployed_device_list" \
    fails 2 "hps-conf: gpus.pbtxt:2: instance_group gpus: device 3 is not in ok.json: models[0].deployed_device_list (0)" \
    ok.json --pbtxt gpus.pbtxt
ok "a config.pbtxt of a model the ps.json does not have is refused" \
    fails 2 "hps-conf: other.pbtxt:1: model \"other\": the ps.json ok.json has no model of that name" \
    ok.json --pbtxt other.pbtxt
ok "a file that cannot be read exits 1" \
    fails 1 "hps-conf: cannot read missing.json: No such file or directory" missing.json
ok "import without a file is a usage error (2)" \
    bash -c '"$0" import 2>/dev/null; [ $? -eq 2 ]' "$HPS_CONF"
ok "an unknown import option is a usage error (2)" \
    bash -c '"$0" import x.json --frob 2>/dev/null; [ $? -eq 2 ]' "$HPS_CONF"
ok "a pbtxt parameter overrides the ps.json value, with a warning (exit 0)" \
    bash -c 'cd "$1" && "$0" import ok.json --pbtxt warn.pbtxt >w.ini 2>w.err &&
             grep -qx "refresh_interval = 10" w.ini &&
             grep -qxF "hps-conf: warning: warn.pbtxt:3: max_batch_size = 8: not imported: HugeCTR'"'"'s hps backend used the ps.json'"'"'s (64)" w.err' \
    "$HPS_CONF" "$TMP"
ok "--strict with warnings exits 3 and writes nothing" \
    bash -c 'cd "$1" && "$0" import ok.json --pbtxt warn.pbtxt --strict >s.ini 2>/dev/null; [ $? -eq 3 ] && [ ! -s s.ini ]' \
    "$HPS_CONF" "$TMP"
printf '\357\273\277' | cat - "$TMP/ok.json" >"$TMP/bom.json"
ok "a UTF-8 byte order mark is skipped, as by HugeCTR's JSON reader" \
    bash -c 'cd "$1" && "$0" import bom.json --strict >b.ini && "$0" import ok.json >o.ini &&
             diff <(tail -n +2 b.ini) <(tail -n +2 o.ini) >/dev/null' \
    "$HPS_CONF" "$TMP"
ok "without warnings, import exits 0 and prints nothing on stderr" \
    bash -c 'cd "$1" && "$0" import ok.json --strict >q.ini 2>q.err && [ ! -s q.err ] && "$0" check q.ini' \
    "$HPS_CONF" "$TMP"
# The tensors and instance count of HugeCTR's hps backend are what hps-worker
# serves: --strict accepts them; any difference is named.
cat >"$TMP/served.pbtxt" <<'PBTXT'
name: "m"
backend: "hps"
input [
  { name: "KEYS" data_type: TYPE_INT64 dims: [ -1 ] },
  { name: "NUMKEYS" data_type: TYPE_INT32 dims: [ -1 ] }
]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { count: 1, kind: KIND_GPU, gpus: [0] } ]
PBTXT
cat >"$TMP/differ.pbtxt" <<'PBTXT'
name: "m"
input [
  { name: "KEYS" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "KEYS" data_type: TYPE_INT64 dims: [ -1 ] },
  { name: "KEYS" data_type: TYPE_INT64 dims: [ -1 ] }
]
output { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] }
instance_group [ { count: 2 kind: KIND_GPU gpus: [0] } ]
PBTXT
ok "--strict accepts the inputs, output and count: 1 of HugeCTR's hps backend" \
    bash -c 'cd "$1" && "$0" import ok.json --pbtxt served.pbtxt --strict >v.ini 2>v.err && [ ! -s v.err ]' \
    "$HPS_CONF" "$TMP"
why="hps-worker's inputs are always KEYS (TYPE_INT64) and NUMKEYS (TYPE_INT32), its output OUTPUT0 (TYPE_FP32), each with dims [ -1 ]"
ok "inputs, outputs and counts that differ from what hps-worker serves are warned about" \
    bash -c 'cd "$1" && "$0" import ok.json --pbtxt differ.pbtxt >x.ini 2>x.err; printf "%s\n" \
      "differ.pbtxt:8: instance_group.count: not imported: the number of hps-worker processes per device is the number started (hps-worker --device N --instance K)" \
      "differ.pbtxt:3: input \"KEYS\": not imported: $2" \
      "differ.pbtxt:5: input \"KEYS\": not imported: declared twice; $2" \
      "differ.pbtxt:7: output \"OUT\": not imported: $2" \
      "differ.pbtxt:2: input: no input \"NUMKEYS\" (TYPE_INT32): hps-worker serves it all the same: $2" \
      "differ.pbtxt:7: output: no output \"OUTPUT0\" (TYPE_FP32): hps-worker serves it all the same: $2" |
      diff -u - <(sed "s/^hps-conf: warning: //" x.err)' \
    "$HPS_CONF" "$TMP" "$why"
ok "--help documents import and its exit codes" \
    bash -c '"$0" --help | grep -q "^  import FILE.json" && "$0" --help | grep -q "^  3  import --strict"' "$HPS_CONF"

[ "$failed" -eq 0 ]
