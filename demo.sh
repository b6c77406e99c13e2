#!/usr/bin/env bash
# demo.sh -- the main job, end to end, on a fresh Debian 12 machine:
# installs what is missing, builds, generates a HugeCTR-format model, starts
# hps-coordinator and one hps-worker (CPU mode: shared memory + RocksDB, no
# GPU, no external server), sends lookups with curl, prints vectors and
# statistics, and stops everything.
#
#   ./demo.sh            (run from the repository root; needs root or sudo
#                         only if packages are missing)
set -euo pipefail
cd "$(dirname "$0")"

# Packages: tests/deps.sh installs what is missing (apt-get) and does nothing
# when all is there.
tests/deps.sh

echo "== building"
[ -d build ] || meson setup build >/dev/null
ninja -C build >/dev/null

work=$(mktemp -d /tmp/hps-demo.XXXXXX)
name="demo$$"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -f "/dev/shm/hps.$name" "/dev/shm/.hps.$name.lock"
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
http=$(free_port)
metrics=$(free_port)

echo "== generating a model: 2 tables (100000 x 16, 20000 x 8), HugeCTR sparse files"
build/tools/hps-gen/hps-gen model --out "$work/model" --model demo --tables 2 \
    --rows 100000,20000 --dim 16,8 --segment "$name" --http-port "$http" \
    --metrics-port "$metrics" --default 0.5 --quiet
ini="$work/model/demo.ini"
# Half of each table in shared memory; the rest only in RocksDB, fetched on a
# miss and then cached in shared memory.
build/tools/hps-conf/hps-conf set "$ini" volatile_db.initial_cache_rate=0.5 >/dev/null
build/tools/hps-conf/hps-conf set "$ini" volatile_db.cache_missed_embeddings=true >/dev/null

echo "== starting hps-coordinator and hps-worker (logs in $work)"
build/coordinator/hps-coordinator -c "$ini" 2>"$work/coordinator.log" &
pids+=($!)
build/worker/hps-worker -c "$ini" --device 0 2>"$work/worker.log" &
pids+=($!)
for _ in $(seq 1 300); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "localhost:$http/v2/health/ready")" = 200 ] && break
    sleep 0.1
done
curl -sf -o /dev/null "localhost:$http/v2/health/ready" || { cat "$work"/*.log; exit 1; }
sed 's/^/   /' "$work/coordinator.log"

key() { build/tools/hps-gen/hps-gen row --table "$1" --index "$2" --dim "$3" | cut -d' ' -f1; }
k0=$(key 0 0 16)     # a key of table 0
k1=$(key 0 99999 16) # another key of table 0
k2=$(key 1 7 8)      # a key of table 1
body=$(printf '{"id":"demo","inputs":[{"name":"KEYS","shape":[1,4],"datatype":"INT64","data":[%s,%s,%s,42]},{"name":"NUMKEYS","shape":[1,2],"datatype":"INT32","data":[2,2]}]}' "$k0" "$k1" "$k2")

echo "== lookup: table 0 keys $k0 $k1, table 1 keys $k2 42 (42 is unknown: default 0.5)"
echo "   POST /v2/models/demo/infer $body"
curl -s "localhost:$http/v2/models/demo/infer" -d "$body" | python3 -c '
import json, sys
r = json.load(sys.stdin)
v = r["outputs"][0]["data"]
rows = [("table 0", v[0:16]), ("table 0", v[16:32]), ("table 1", v[32:40]), ("table 1", v[40:48])]
for t, row in rows:
    print("   %s: %s" % (t, " ".join("%.6g" % x for x in row)))'
echo "   expected (hps-gen row):"
for a in "0 0 16" "0 99999 16" "1 7 8"; do
    # shellcheck disable=SC2086
    echo "   $(build/tools/hps-gen/hps-gen row --table ${a%% *} --index $(echo $a | cut -d' ' -f2) --dim ${a##* } | cut -d' ' -f2- | python3 -c 'import sys; print(" ".join("%.6g" % float(x) for x in sys.stdin.read().split()))')"
done

echo "== the same lookup again (keys fetched from RocksDB are now in shared memory)"
curl -s -o /dev/null "localhost:$http/v2/models/demo/infer" -d "$body"
echo "== statistics (/metrics, nv_hps_*)"
curl -s "localhost:$metrics/metrics" | grep -E '^nv_(hps|inference_request_success|inference_count)' | sed 's/^/   /'
echo "== shared memory (hps-shm info $name)"
build/tools/hps-shm/hps-shm info "$name" | sed 's/^/   /' | head -30

echo "== stopping"
kill -TERM "${pids[@]}"
wait "${pids[@]}" 2>/dev/null || true
pids=()
echo "done."
