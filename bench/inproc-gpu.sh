#!/usr/bin/env bash
# inproc-gpu.sh -- in-process lookups (libhps) against the served paths and a
# gather floor, in ONE run: a criteo-1tb-shaped model (26 tables, dim 128,
# gpucache = true, gpucacheper 0.1, power-law keys) served by hps-coordinator
# + hps-worker --device D, looked up at 1, 64, 1024 and 8192 samples per call
# (26 keys per sample) by
#
#   (a) bench-inproc      the C API in-process (hps_client_lookup), keys and
#                         output in device memory, a stream of its own
#   (b) inproc_py.py      the Python module hps, torch CUDA int64 keys,
#                         lookup_multi(model, keys, [B]*26, out=CUDA tensor)
#   (c) hps-bench         hps-worker over KServe v2 HTTP, binary tensors,
#                         one connection (output to the client's host memory)
#   (d) bench-cudashm     hps-worker over HTTP with OUTPUT0 written into a
#                         CUDA shared-memory region of the client
#   floor (inproc_py.py)  the same rows gathered by one torch.index_select
#                         from the 26 tables concatenated, resident in GPU
#                         memory (keys mapped to rows beforehand); CUDA events
#
# and, "all hits", (a), (b) and the floor again on keys drawn (power law) from
# a hot set of each table that bench-inproc first warms into the GPU caches
# until every key hits (K_t = min(rows, cache capacity / 4) most popular keys;
# the hit rate over each timed run is printed).  Every call: one at a time,
# p50 / p99 per call (us) and keys/s.  Then one table, the ratios the targets
# name and the GPU.  Every figure comes from this run.
#
# usage: bench/inproc-gpu.sh [--build DIR] [--scale F] [--dim D] [--device D]
#                            [--gpucacheper F] [--duration S] [--warmup S]
#                            [--python PY] [--workdir DIR] [--logs DIR] [--keep] [--quick]
#   --logs DIR   copies every log there (logs.tar.gz) at the end
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
build="$repo/build"
scale=0.002
dim=128
device=0
gcper=0.1
duration=1.5
warmup=0.5
python=python3
workdir=""
logs=""
keep=0
batches=(1 64 1024 8192)
counts=(20000 2000 200 32) # requests per file (files are cycled)

while [ $# -gt 0 ]; do
    case "$1" in
    --build) build=$2; shift ;;
    --scale) scale=$2; shift ;;
    --dim) dim=$2; shift ;;
    --device) device=$2; shift ;;
    --gpucacheper) gcper=$2; shift ;;
    --duration) duration=$2; shift ;;
    --warmup) warmup=$2; shift ;;
    --python) python=$2; shift ;;
    --workdir) workdir=$2; shift ;;
    --logs) logs=$2; shift ;;
    --keep) keep=1 ;;
    --quick) scale=0.0001 duration=0.3 warmup=0.1 counts=(2000 200 20 4) ;;
    -h|--help) sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "inproc-gpu.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done

gen="$build/tools/hps-gen/hps-gen"
coordinator="$build/coordinator/hps-coordinator"
worker="$build/worker/hps-worker"
hbench="$build/tools/hps-bench/hps-bench"
conftool="$build/tools/hps-conf/hps-conf"
inproc="$build/bench/bench-inproc"
cudashm="$build/bench/bench-cudashm"
for x in "$gen" "$coordinator" "$worker" "$hbench" "$conftool" "$inproc" "$cudashm"; do
    [ -x "$x" ] || { echo "inproc-gpu.sh: $x not built (give --build DIR of a -Dcuda=enabled build)" >&2; exit 2; }
done

e2e_prog="inproc-gpu.sh"
# shellcheck source=bench/e2e-lib.sh
. "$here/e2e-lib.sh"

seg="hpsbench-inproc-$$"
if [ -z "$workdir" ]; then
    workdir=$(mktemp -d "${TMPDIR:-/tmp}/hps-inproc.XXXXXX")
else
    mkdir -p "$workdir"
fi
save_logs() {
    if [ -n "$logs" ]; then
        mkdir -p "$logs"
        tar -C "$workdir" -czf "$logs/logs.tar.gz" --exclude='*.bin' --exclude=model . 2>/dev/null || true
    fi
}
trap 'save_logs; e2e_cleanup "$seg" "$keep"' EXIT
trap 'exit 130' INT TERM

t0=$(date +%s.%N)
elapsed() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f s", b - a}'; }
model="$workdir/model"
ini="$model/criteo.ini"
res="$workdir/results.txt" # every RESULT line
: >"$res"
rc=0

echo "== inproc-gpu: in-process lookups vs the served paths vs a gather floor, criteo-1tb shape =="
e2e_machine
gpu_name=""
if command -v nvidia-smi >/dev/null 2>&1; then
    gpu_name=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader -i "$device" 2>/dev/null | head -1 || true)
fi
echo "GPU $device: ${gpu_name:-none (nvidia-smi absent or failed)}"

# ---- model, requests, servers ------------------------------------------------
echo "-- model: hps-gen model --shape criteo-1tb --scale $scale --dim $dim"
"$gen" model --out "$model" --model criteo --shape criteo-1tb --scale "$scale" --dim "$dim" --force
for kv in volatile_db.shared_memory_name="$seg" model.criteo.gpucache=true \
    model.criteo.gpucacheper="$gcper" model.criteo.max_batch_size=8192; do
    "$conftool" set "$ini" "$kv"
done
thr=$("$conftool" get "$ini" model.criteo.hit_rate_threshold)
echo "   gpucache true, gpucacheper $gcper, max_batch_size 8192, hit_rate_threshold $thr"
echo "-- requests: hps-gen requests (power law, --alpha auto)"
files=()
for i in "${!batches[@]}"; do
    f="$workdir/requests-b${batches[$i]}.bin"
    "$gen" requests --model-dir "$model" --model criteo --batch "${batches[$i]}" \
        --count "${counts[$i]}" --out "$f" --force
    files+=("$f")
done

http_port=$(e2e_pick_port)
metrics_port=$((http_port + 2))
e2e_start_coordinator "$ini" "$workdir/coordinator.log"
e2e_start_worker "$workdir/worker.log" -c "$ini" --device "$device"
w_pid=$worker_started_pid w_port=$http_port w_mport=$metrics_port
e2e_wait_ready "$w_port" 300 || { echo "inproc-gpu.sh: worker not ready after 300 s" >&2; exit 1; }
sed 's/^/   /' "$workdir/worker.log" | tail -n 12
echo "   ready: $(elapsed) since start"
echo

# ---- (a) the C API in-process ------------------------------------------------
echo "== (a) bench-inproc: hps_client_lookup in this process, device keys and output =="
arc=0
"$inproc" --config "$ini" --model criteo --device "$device" --duration "$duration" \
    --warmup "$warmup" --hot-out "$workdir" "${files[@]}" >"$workdir/a.log" 2>&1 || arc=$?
grep -v '^RESULT' "$workdir/a.log" | sed 's/^/   /'
grep '^RESULT' "$workdir/a.log" >>"$res" || true
[ "$arc" = 0 ] || { echo "   bench-inproc exit status $arc"; rc=1; }
echo "   $(elapsed) since start"
echo

# ---- (b) + floor: the Python module, torch ----------------------------------------
echo "== (b) + floor: inproc_py.py (Python module hps with torch CUDA tensors; torch.index_select) =="
brc=0
PYTHONPATH="$build/worker/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 \
    timeout 240 "$python" "$here/inproc_py.py" --config "$ini" --model criteo --device "$device" \
    --duration "$duration" --warmup "$warmup" --hot-dir "$workdir" "${files[@]}" \
    >"$workdir/b.log" 2>&1 || brc=$?
grep -v '^RESULT' "$workdir/b.log" | sed 's/^/   /'
grep '^RESULT' "$workdir/b.log" >>"$res" || true
[ "$brc" = 0 ] || { echo "   inproc_py.py exit status $brc"; rc=1; }
echo "   $(elapsed) since start"
echo

# ---- (c) HTTP binary, one connection ------------------------------------------------
echo "== (c) hps-bench: hps-worker over HTTP + binary tensors, 1 connection =="
crc=0
cdur=$(awk -v x="$duration" 'BEGIN {print (x < 2 ? 2 : x)}') # B=8192 calls take tens of ms over HTTP
echo "   --concurrency 1 --duration $cdur --warmup $warmup --reps 1 --no-redis (no --verify: misses answered"
echo "   with defaults at hit rates >= hit_rate_threshold would fail exact checks by design)"
tb=$(e2e_server_times "$w_mport")
"$hbench" --url "http://127.0.0.1:$w_port" --config "$ini" --no-redis --wait-ready 60 \
    --server-pid "$w_pid" --concurrency 1 --duration "$cdur" --warmup "$warmup" --reps 1 \
    "${files[@]}" >"$workdir/c.log" 2>&1 || crc=$?
echo "   server time per request, mean us (all B, warm-up included): $(e2e_per_request "$tb" "$(e2e_server_times "$w_mport")")"\
     "(total queue input lookup output)"
sed -n '/== results ==/,$p' "$workdir/c.log" | sed 's/^/   /'
# hps-bench's results rows: samples keys/req conns | req/s Mkeys/s p50 p90 p99 max err (ms)
awk '$4 == "|" && $1 ~ /^[0-9]+$/ && NF >= 12 {
        printf "RESULT mode=c B=%s keys=%s calls=- p50_us=%.2f p99_us=%.2f mean_us=- keys_s=%.6g errors=%s\n",
        $1, $2, $7 * 1000, $9 * 1000, $6 * 1e6, $11}' "$workdir/c.log" >>"$res"
[ "$crc" = 0 ] || { echo "   hps-bench exit status $crc"; grep -E 'error|fail' "$workdir/c.log" | head -5; rc=1; }
echo

# ---- (d) HTTP with OUTPUT0 in CUDA shared memory ------------------------------------------
echo "== (d) bench-cudashm: hps-worker over HTTP, binary KEYS, OUTPUT0 into a CUDA shared-memory region =="
drc=0
tb=$(e2e_server_times "$w_mport")
"$cudashm" --port "$w_port" --model criteo --device "$device" --duration "$duration" \
    --warmup "$warmup" "${files[@]}" >"$workdir/d.log" 2>&1 || drc=$?
grep -v '^RESULT' "$workdir/d.log" | sed 's/^/   /'
grep '^RESULT' "$workdir/d.log" >>"$res" || true
echo "   server time per request, mean us (all B, warm-up included): $(e2e_per_request "$tb" "$(e2e_server_times "$w_mport")")"\
     "(total queue input lookup output)"
[ "$drc" = 0 ] || { echo "   bench-cudashm exit status $drc"; rc=1; }
echo

kill -0 "$w_pid" 2>/dev/null || { echo "inproc-gpu.sh: hps-worker died during the run" >&2; rc=1; }
kill -0 "$coord_pid" 2>/dev/null || { echo "inproc-gpu.sh: hps-coordinator died during the run" >&2; rc=1; }

# ---- the table ---------------------------------------------------------------------
# get MODE B FIELD: a field of a RESULT line, "-" if absent
get() {
    awk -v m="$1" -v b="$2" -v f="$3" '$2 == "mode=" m && $3 == "B=" b {
        for (i = 4; i <= NF; i++) { split($i, kv, "="); if (kv[1] == f) { print kv[2]; found = 1; exit } } }
        END { if (!found) print "-" }' "$res"
}
num() { awk -v x="$1" 'BEGIN {exit !(x ~ /^[-+]?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$/)}'; }
cell() { # MODE B: "p50/p99 Mkeys/s"
    local p50 p99 ks
    p50=$(get "$1" "$2" p50_us) p99=$(get "$1" "$2" p99_us) ks=$(get "$1" "$2" keys_s)
    if num "$p50"; then
        awk -v a="$p50" -v b="$p99" -v k="$ks" 'BEGIN {printf "%7.1f/%-8.1f %7.1f", a, b, k / 1e6}'
    else
        printf "%7s/%-8s %7s" - - -
    fi
}
ratio() { if num "$1" && num "$2"; then awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; else printf -- "-"; fi; }
diff_us() { if num "$1" && num "$2"; then awk -v a="$1" -v b="$2" 'BEGIN {printf "%+.1f", a - b}'; else printf -- "-"; fi; }

echo "== results: criteo-1tb shape, scale $scale, dim $dim, gpucacheper $gcper, hit_rate_threshold $thr,"\
     "one call at a time =="
echo "GPU $device: ${gpu_name:-none}"
echo "cells: p50/p99 us per call, Mkeys/s (26 keys per sample); floor = CUDA events around one index_select"
printf "  %6s %7s | %-24s | %-24s | %-24s | %-24s | %-24s | %6s %7s %6s\n" samples keys \
    "(a) C API in-process" "(b) Python module" "(c) HTTP binary" "(d) HTTP + CUDA shm" \
    "floor (index_select)" "a/flr" "b-a us" "c/a"
for b in "${batches[@]}"; do
    a50=$(get a "$b" p50_us)
    printf "  %6s %7s | %s | %s | %s | %s | %s | %6s %7s %6s\n" "$b" $((b * 26)) \
        "$(cell a "$b")" "$(cell b "$b")" "$(cell c "$b")" "$(cell d "$b")" "$(cell floor "$b")" \
        "$(ratio "$a50" "$(get floor "$b" p50_us)")" "$(diff_us "$(get b "$b" p50_us)" "$a50")" \
        "$(ratio "$(get c "$b" p50_us)" "$a50")"
done
echo "all hits (hot set warmed into the GPU caches; hit = cache hit rate over (a)'s timed calls):"
printf "  %6s %7s | %-24s | %-24s | %-24s | %6s | %6s %7s %9s\n" samples keys \
    "(a) C API, all hits" "(b) Python, all hits" "floor (same keys)" hit "a/flr" "b-a us" "flr wall"
for b in "${batches[@]}"; do
    a50=$(get a-hot "$b" p50_us)
    printf "  %6s %7s | %s | %s | %s | %6s | %6s %7s %9s\n" "$b" $((b * 26)) \
        "$(cell a-hot "$b")" "$(cell b-hot "$b")" "$(cell floor-hot "$b")" "$(get a-hot "$b" hit)" \
        "$(ratio "$a50" "$(get floor-hot "$b" p50_us)")" "$(diff_us "$(get b-hot "$b" p50_us)" "$a50")" \
        "$(get floor-hot "$b" wall_p50_us)"
done
echo "  flr wall: floor p50 on the host clock (launch + synchronize), us"
echo "power-law runs: GPU cache hit rate over (a)'s timed calls, and one answer checked per mode (exact/default/wrong rows):"
for b in "${batches[@]}"; do
    printf "  B=%-5s hit %s | a %s/%s/%s | b %s/%s/%s | d %s/%s/%s\n" "$b" "$(get a "$b" hit)" \
        "$(get a "$b" exact)" "$(get a "$b" default)" "$(get a "$b" wrong)" \
        "$(get b "$b" exact)" "$(get b "$b" default)" "$(get b "$b" wrong)" \
        "$(get d "$b" exact)" "$(get d "$b" default)" "$(get d "$b" wrong)"
done

echo "targets:"
target() { # DESC OK(1/0/-) MEASURED
    local v="NOT MET"
    [ "$2" = 1 ] && v="met"
    [ "$2" = - ] && v="not measured"
    printf "  %-62s %-12s %s\n" "$1" "$v" "$3"
}
a1024=$(get a 1024 p50_us)
ok=-; num "$a1024" && ok=$(awk -v x="$a1024" 'BEGIN {print (x <= 100) ? 1 : 0}')
target "(a) p50 at 1,024 samples <= 100 us" "$ok" "p50 $a1024 us"
# (b) - (a) is judged on the all-hits runs: the same keys, every one a hit,
# so both do the same GPU work and the difference is the binding's.  In the
# power-law runs (a) and (b) see different misses (the cache moves between
# the runs, and a call near hit_rate_threshold is fetched in one run and
# answered with defaults in the other), which swung b - a from -46 to +59 us
# at B=8192 between runs of the same build; those differences stay in the
# table above.
worst=""; ok=-
for b in "${batches[@]}"; do
    d=$(diff_us "$(get b-hot "$b" p50_us)" "$(get a-hot "$b" p50_us)")
    num "$d" || continue
    worst="$worst B=$b:$d"
    if [ "$ok" = - ]; then ok=1; fi
    awk -v x="$d" 'BEGIN {exit !(x > 10)}' && ok=0
done
target "(b) within 10 us of (a) (p50, every size, all hits)" "$ok" "b-a us:${worst:- -}"
c=$(ratio "$(get c 1024 p50_us)" "$a1024")
ok=-; num "$c" && ok=$(awk -v x="$c" 'BEGIN {print (x >= 5) ? 1 : 0}')
target "(a) >= 5x faster than (c) at 1,024 samples (p50)" "$ok" "c/a = $c"
worst=""; ok=-
for b in "${batches[@]}"; do
    r=$(ratio "$(get a-hot "$b" p50_us)" "$(get floor-hot "$b" p50_us)")
    num "$r" || continue
    worst="$worst B=$b:$r"
    if [ "$ok" = - ]; then ok=1; fi
    awk -v x="$r" 'BEGIN {exit !(x > 2)}' && ok=0
done
target "(a) within 2x of the floor at every size, all hits (p50)" "$ok" "a/floor:${worst:- -}"
echo "inproc-gpu total time: $(elapsed)"
echo "inproc-gpu.sh: exit status $rc (0 = every part ran without an error or a wrong row)"
exit "$rc"
