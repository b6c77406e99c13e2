#!/usr/bin/env bash
# e2e-gpu.sh -- end-to-end benchmark of the GPU embedding cache (issue 4): a
# criteo-1tb-shaped synthetic model with gpucache = true served by
# hps-coordinator + hps-worker --device D, driven over KServe v2 HTTP by
# hps-bench at 1, 64, 1024 and 8192 samples per request.
#
#   1. hps-gen model    criteo-1tb shape (26 tables) at --scale, --dim floats,
#                       gpucache = true, gpucacheper --gpucacheper, max_batch_size 8192
#   2. hps-gen requests batch 1, 64, 1024, 8192 (power law, as e2e.sh)
#   3. hps-coordinator, then three workers on the device: hps-worker --device D
#      on the INI ([worker] lookup_path auto unless --set says otherwise: the
#      path per request size, issue 22), --instance 3 on a copy with
#      lookup_path = gpu (every request through the GPU cache), and, as the
#      baseline, --instance 2 on a copy with gpucache = false (CPU path)
#   4. phase 1: per batch size, hps-bench against the GPU-path worker, the CPU
#      worker, then the auto worker; GPU cache hit rate = delta of
#      nv_hps_embedding_cache_hit_keys / delta of nv_hps_embedding_cache_query_keys
#      (all tables) over the GPU-path run
#   5. phase 2: the CPU and GPU-path workers stop; a second worker on the INI
#      (--instance 1) maps the first one's caches; two hps-bench at once, one per
#      worker, per batch size, against the auto worker's phase-1 figure
#   6. a table; everything stopped (also on error or Ctrl-C), segment removed
#
# Without a GPU (no nvidia-smi, a CPU build, or a worker that serves from the
# CPU path) it runs anyway and says so: the "GPU" figures are then CPU-path
# figures.  Every figure printed comes from this run.
#
# usage: bench/e2e-gpu.sh [--build DIR] [--quick] [--scale F] [--dim D] [--device D]
#                         [--gpucacheper F] [--duration S] [--warmup S] [--reps R]
#                         [--concurrency N] [--verify N] [--workdir DIR] [--keep]
#                         [--set SECTION.KEY=VALUE]...
#   --set      edits the generated INI with hps-conf set (e.g.
#              model.criteo.hit_rate_threshold=1.5); the CPU baseline's copy too
#   --verify   answers checked exactly per file on the CPU worker, and on the GPU
#              workers only when hit_rate_threshold > 1: at or above the threshold
#              a lookup's misses get the default value (HugeCTR's asynchronous
#              insertion), so exact checks would fail by design
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
build="$repo/build"
scale=0.002
dim=128
device=0
gcper=0.1
duration=2
warmup=0.5
reps=3
conc=4
verify=4
workdir=""
keep=0
quick=0
sets=()
batches=(1 64 1024 8192)
counts=(20000 2000 200 32) # requests per file (files are cycled)

while [ $# -gt 0 ]; do
    case "$1" in
    --build) build=$2; shift ;;
    --quick) quick=1 ;;
    --scale) scale=$2; shift ;;
    --dim) dim=$2; shift ;;
    --device) device=$2; shift ;;
    --gpucacheper) gcper=$2; shift ;;
    --duration) duration=$2; shift ;;
    --warmup) warmup=$2; shift ;;
    --reps) reps=$2; shift ;;
    --concurrency) conc=$2; shift ;;
    --verify) verify=$2; shift ;;
    --workdir) workdir=$2; shift ;;
    --keep) keep=1 ;;
    --set) sets+=("$2"); shift ;;
    -h|--help) sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "e2e-gpu.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
if [ "$quick" = 1 ]; then
    scale=0.0001 duration=0.5 warmup=0.2 reps=1 verify=2 conc=2 counts=(2000 200 20 4)
fi
case "$conc" in '' | *[!0-9]*) echo "e2e-gpu.sh: --concurrency takes one number" >&2; exit 2 ;; esac

gen="$build/tools/hps-gen/hps-gen"
coordinator="$build/coordinator/hps-coordinator"
worker="$build/worker/hps-worker"
bench="$build/tools/hps-bench/hps-bench"
conftool="$build/tools/hps-conf/hps-conf"
for x in "$gen" "$coordinator" "$worker" "$bench" "$conftool"; do
    [ -x "$x" ] || { echo "e2e-gpu.sh: $x not built (give --build DIR)" >&2; exit 2; }
done

e2e_prog=e2e-gpu.sh
# shellcheck source=bench/e2e-lib.sh
. "$here/e2e-lib.sh"

seg="hpsbench-e2egpu-$$"
if [ -z "$workdir" ]; then
    workdir=$(mktemp -d "${TMPDIR:-/tmp}/hps-e2egpu.XXXXXX")
else
    mkdir -p "$workdir"
fi
trap 'e2e_cleanup "$seg" "$keep"' EXIT
trap 'exit 130' INT TERM

# ---- helpers ----------------------------------------------------------------

# path_counts PORT: "GPU CPU", the host lookups each path answered
# (nv_hps_gpu_path_requests, nv_hps_cpu_path_requests over the models).
path_counts() {
    e2e_metrics "$1" | awk '/^nv_hps_gpu_path_requests\{/ {g += $2}
        /^nv_hps_cpu_path_requests\{/ {c += $2} END {printf "%.0f %.0f\n", g, c}'
}

# path_share "BEFORE" "AFTER": the GPU path's share of the requests between two
# path_counts, 3 decimals ("-" without requests).
path_share() {
    awk -v a="$1" -v b="$2" 'BEGIN {split(a, x, " "); split(b, y, " ")
        n = y[1] - x[1] + y[2] - x[2]; if (n > 0) printf "%.3f\n", (y[1] - x[1]) / n; else print "-"}'
}

# print_times "TOTAL QUEUE INPUT INFER OUTPUT": one line of the log.
print_times() {
    local tot que inp inf outp
    read -r tot que inp inf outp <<<"$1"
    echo "   server time per request, mean us: $tot (queue $que, input $inp, lookup $inf, output $outp)"
}

# bench_start LOG PORT PID VERIFY FILE B REPS: hps-bench in the background
# (sets bench_pid).  B=8192 gets at least 2 s timed and 0.5 s warm-up: one
# request is 109 MB of floats at dim 128, slow on a small machine.
bench_start() {
    local d=$duration w=$warmup
    if [ "$6" -ge 8192 ]; then
        d=$(awk -v x="$d" 'BEGIN {print (x < 2 ? 2 : x)}')
        w=$(awk -v x="$w" 'BEGIN {print (x < 0.5 ? 0.5 : x)}')
    fi
    "$bench" --url "http://127.0.0.1:$2" --config "$ini" --no-redis --wait-ready 120 \
        --server-pid "$3" --concurrency "$conc" --duration "$d" --warmup "$w" \
        --reps "$7" --verify "$4" "$5" >"$1" 2>&1 &
    bench_pid=$!
    e2e_pids+=("$bench_pid") e2e_names+=(hps-bench) # stopped on exit too
}

# bench_wait PID LOG: e2e_bench_wait with a 300 s deadline; counts a failure in rc.
bench_wait() { e2e_bench_wait "$1" "$2" 300 || rc=1; }

# run_one LABEL PORT PID MPORT VERIFY LOG B I: one phase-1 run of request
# file I (B samples) against a worker; sets run_row (e2e_bench_row) and
# run_times (e2e_per_request over the run).
run_one() {
    local tb
    echo "-- B=$7: $1 worker (verify $5)"
    tb=$(e2e_server_times "$4")
    bench_start "$6" "$2" "$3" "$5" "${files[$8]}" "$7" "$reps"
    bench_wait "$bench_pid" "$6"
    run_row=$(e2e_bench_row "$6")
    run_times=$(e2e_per_request "$tb" "$(e2e_server_times "$4")")
}



# ---- setup ------------------------------------------------------------------

t0=$(date +%s.%N)
elapsed() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f s", b - a}'; }
model="$workdir/model"
ini="$model/criteo.ini"
ini_cpu="$model/criteo-cpu.ini"
ini_gpu="$model/criteo-gpu.ini"
rc=0

echo "== e2e-gpu: hps-coordinator + hps-worker with the GPU embedding cache, criteo-1tb shape =="
e2e_machine
gpu_name=""
if command -v nvidia-smi >/dev/null 2>&1; then
    gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader -i "$device" 2>/dev/null | head -1 || true)
fi
echo "GPU $device: ${gpu_name:-none (nvidia-smi absent or failed)}"
echo

echo "-- model: hps-gen model --shape criteo-1tb --scale $scale --dim $dim"
http_port=$(e2e_pick_port)
metrics_port=$((http_port + 2))
# The rest through hps-conf set: hps-gen writes its command line into the
# INI's header comment, and hps-gen requests rejects a line over 200 bytes.
"$gen" model --out "$model" --model criteo --shape criteo-1tb --scale "$scale" --dim "$dim" --force
echo "   files on disk: $(du -sb "$model" | cut -f1) bytes in $(ls -d "$model"/*/ | wc -l) table directories"
for kv in volatile_db.shared_memory_name="$seg" model.criteo.gpucache=true \
    model.criteo.gpucacheper="$gcper" model.criteo.max_batch_size=8192 \
    "${sets[@]+"${sets[@]}"}"; do
    "$conftool" set "$ini" "$kv"
    echo "   hps-conf set $kv (now: $("$conftool" get "$ini" "${kv%%=*}"))"
done
cp "$ini" "$ini_cpu"
"$conftool" set "$ini_cpu" model.criteo.gpucache=false
cp "$ini" "$ini_gpu"
"$conftool" set "$ini_gpu" worker.lookup_path=gpu
thr=$("$conftool" get "$ini" model.criteo.hit_rate_threshold)
echo "   GPU workers: $ini (gpucache $("$conftool" get "$ini" model.criteo.gpucache),"\
     "gpucacheper $("$conftool" get "$ini" model.criteo.gpucacheper), hit_rate_threshold $thr)"
echo "   lookup_path: $("$conftool" get "$ini" worker.lookup_path) (the INI's workers);"\
     "$ini_gpu has gpu"
echo "   CPU baseline: $ini_cpu (the same with gpucache false)"
verify_gpu=0
if awk -v t="$thr" 'BEGIN {exit !(t > 1)}'; then verify_gpu=$verify; fi
stype=$("$conftool" get "$ini" model.criteo.storage_type)
if [ "$stype" != fp32 ]; then
    # hps-bench checks answers against hps-gen's fp32 vectors; a compact
    # storage type answers their conversion (int-storage_type checks that)
    echo "   storage_type $stype: answers are not checked (hps-bench compares with fp32 vectors)"
    verify=0 verify_gpu=0
fi

echo "-- requests: hps-gen requests (power law, --alpha auto)"
files=()
for i in "${!batches[@]}"; do
    f="$workdir/requests-b${batches[$i]}.bin"
    "$gen" requests --model-dir "$model" --model criteo --batch "${batches[$i]}" \
        --count "${counts[$i]}" --out "$f" --force
    files+=("$f")
done
echo

e2e_start_coordinator "$ini" "$workdir/coordinator.log"
e2e_start_worker "$workdir/worker0.log" -c "$ini" --device "$device"
w0_pid=$worker_started_pid w0_port=$http_port w0_mport=$metrics_port
http_port=$(e2e_pick_port) metrics_port=$((http_port + 2))
e2e_start_worker "$workdir/worker-cpu.log" -c "$ini_cpu" --device "$device" --instance 2
wc_pid=$worker_started_pid wc_port=$http_port wc_mport=$metrics_port
http_port=$(e2e_pick_port) metrics_port=$((http_port + 2))
e2e_start_worker "$workdir/worker-gpu.log" -c "$ini_gpu" --device "$device" --instance 3
wg_pid=$worker_started_pid wg_port=$http_port wg_mport=$metrics_port
for p in "$w0_port" "$wc_port" "$wg_port"; do
    e2e_wait_ready "$p" 300 || { echo "e2e-gpu.sh: worker on port $p not ready after 300 s" >&2; exit 1; }
done
sed 's/^/   /' "$workdir/worker0.log"
echo "   ready: $(elapsed) since start"

read -r _ _ ntables _ <<<"$(e2e_cache_counts "$w0_mport")"
nogpu=""
if [ -z "$gpu_name" ] || [ "$ntables" = 0 ] || grep -q "CPU path" "$workdir/worker0.log"; then
    nogpu="no GPU: GPU figures are CPU-path figures"
    echo "   $nogpu (nvidia-smi: ${gpu_name:-none}; GPU caches in /metrics: $ntables)"
else
    echo "   GPU caches in /metrics: $ntables"
fi
echo

# ---- phase 1: one GPU worker vs the CPU path --------------------------------

echo "== phase 1: hps-worker --device $device with lookup_path = gpu (GPU cache), on"\
     "gpucache = false (CPU path), and on the INI (lookup_path auto: the path per request),"\
     "$conc connections, ${duration} s per run (best of $reps), after ${warmup} s warm-up"\
     "(B=8192: at least 2 s and 0.5 s) =="
declare -A g1 c1 h1 gt1 ct1 a1 p1
for i in "${!batches[@]}"; do
    b=${batches[$i]}
    before=$(e2e_cache_counts "$wg_mport")
    run_one GPU-path "$wg_port" "$wg_pid" "$wg_mport" "$verify_gpu" "$workdir/bench-gpu-b$b.log" "$b" "$i"
    g1[$b]=$run_row gt1[$b]=$run_times
    h1[$b]=$(e2e_hit_rate "$before" "$(e2e_cache_counts "$wg_mport")")
    echo "   GPU cache hit rate over the run: ${h1[$b]}"
    print_times "${gt1[$b]}"
    run_one CPU "$wc_port" "$wc_pid" "$wc_mport" "$verify" "$workdir/bench-cpu-b$b.log" "$b" "$i"
    c1[$b]=$run_row ct1[$b]=$run_times
    print_times "${ct1[$b]}"
    pb=$(path_counts "$w0_mport")
    run_one auto "$w0_port" "$w0_pid" "$w0_mport" "$verify_gpu" "$workdir/bench-auto-b$b.log" "$b" "$i"
    a1[$b]=$run_row
    p1[$b]=$(path_share "$pb" "$(path_counts "$w0_mport")")
    echo "   requests answered by the GPU path: ${p1[$b]}"
done
e2e_stop_pid "$wc_pid" hps-worker
e2e_stop_pid "$wg_pid" hps-worker
echo "   phase 1 done: $(elapsed) since start"
echo

# ---- phase 2: two GPU workers sharing the caches ---------------------------

echo "== phase 2: a second hps-worker --device $device --instance 1 on the same config;"\
     "one timed run per worker (so that the two overlap), same durations as phase 1 =="
http_port=$(e2e_pick_port) metrics_port=$((http_port + 2))
e2e_start_worker "$workdir/worker1.log" -c "$ini" --device "$device" --instance 1
w1_pid=$worker_started_pid w1_port=$http_port w1_mport=$metrics_port
e2e_wait_ready "$w1_port" 300 || { echo "e2e-gpu.sh: worker 1 not ready after 300 s" >&2; exit 1; }
sed 's/^/   /' "$workdir/worker1.log"
mapped=$(grep -cE "mapped the (shared )?cache" "$workdir/worker1.log" || true)
read -r _ _ n0 s0 <<<"$(e2e_cache_counts "$w0_mport")"
read -r _ _ n1 s1 <<<"$(e2e_cache_counts "$w1_mport")"
echo "   worker 1 log: \"mapped the (shared) cache\" for $mapped table(s);"\
     "nv_hps_embedding_cache_processes == 2 for $s0 of $n0 caches (worker 0), $s1 of $n1 (worker 1)"
if [ -z "$nogpu" ] && { [ "$mapped" != "$ntables" ] || [ "$s0" != "$ntables" ]; }; then
    echo "   the caches are NOT all shared by the two workers"
    rc=1
fi
echo "   (the cache counters live in the shared cache memory: each worker's /metrics counts the"
echo "   lookups of both, so the hit rate below is taken from worker 0's)"
declare -A a2 b2 h2
for i in "${!batches[@]}"; do
    b=${batches[$i]}
    echo "-- B=$b: worker 0 and worker 1 at the same time (verify $verify_gpu)"
    before=$(e2e_cache_counts "$w0_mport")
    bench_start "$workdir/bench2-w0-b$b.log" "$w0_port" "$w0_pid" "$verify_gpu" "${files[$i]}" "$b" 1
    bpid0=$bench_pid
    bench_start "$workdir/bench2-w1-b$b.log" "$w1_port" "$w1_pid" "$verify_gpu" "${files[$i]}" "$b" 1
    bpid1=$bench_pid
    bench_wait "$bpid0" "$workdir/bench2-w0-b$b.log"
    bench_wait "$bpid1" "$workdir/bench2-w1-b$b.log"
    after=$(e2e_cache_counts "$w0_mport")
    a2[$b]=$(e2e_bench_row "$workdir/bench2-w0-b$b.log")
    b2[$b]=$(e2e_bench_row "$workdir/bench2-w1-b$b.log")
    h2[$b]=$(e2e_hit_rate "$before" "$after")
    echo "   GPU cache hit rate over the run (both workers): ${h2[$b]}"
done
echo

for p in "$w0_pid" "$w1_pid"; do
    kill -0 "$p" 2>/dev/null || { echo "e2e-gpu.sh: an hps-worker (pid $p) died during the run" >&2; rc=1; }
done
kill -0 "$coord_pid" 2>/dev/null || { echo "e2e-gpu.sh: hps-coordinator died during the run" >&2; rc=1; }

# ---- results ----------------------------------------------------------------

echo "== results: criteo-1tb shape, scale $scale, dim $dim, gpucacheper $gcper,"\
     "hit_rate_threshold $thr, $conc connections per hps-bench =="
echo "GPU $device: ${gpu_name:-none}${nogpu:+ -- $nogpu}"
echo "phase 1: one hps-worker; req/s, Mkeys/s over the timed window; p50/p99 in ms; hit = GPU cache hit rate"
printf "  %7s | %9s %8s %8s %8s %6s %4s | %9s %8s %8s %8s %4s | %7s %7s %7s\n" \
    samples "GPU req/s" Mkeys/s p50 p99 hit err "CPU req/s" Mkeys/s p50 p99 err \
    "req/s" p50 p99
for b in "${batches[@]}"; do
    read -r gr gk g50 g99 ge <<<"${g1[$b]}"
    read -r cr ck c50 c99 ce <<<"${c1[$b]}"
    printf "  %7s | %9s %8s %8s %8s %6s %4s | %9s %8s %8s %8s %4s | %7s %7s %7s\n" \
        "$b" "$gr" "$gk" "$g50" "$g99" "${h1[$b]}" "$ge" "$cr" "$ck" "$c50" "$c99" "$ce" \
        "$(e2e_ratio "$gr" "$cr")" "$(e2e_ratio "$g50" "$c50")" "$(e2e_ratio "$g99" "$c99")"
done
echo "  last three columns: GPU/CPU (req/s above 1 = GPU faster; p50, p99 below 1 = GPU lower latency)"
echo "phase 1, the auto worker (lookup_path of the INI): req/s against the better of the two above"
printf "  %7s | %10s %8s %8s %8s %4s | %9s %10s\n" \
    samples "auto req/s" Mkeys/s p50 p99 err "GPU path" "auto/best"
for b in "${batches[@]}"; do
    read -r gr _ <<<"${g1[$b]}"
    read -r cr _ <<<"${c1[$b]}"
    read -r ar ak a50 a99 ae <<<"${a1[$b]}"
    best=$(awk -v g="$gr" -v c="$cr" 'BEGIN {printf "%s", (g + 0 > c + 0) ? g : c}')
    printf "  %7s | %10s %8s %8s %8s %4s | %9s %10s\n" \
        "$b" "$ar" "$ak" "$a50" "$a99" "$ae" "${p1[$b]}" "$(e2e_ratio "$ar" "$best")"
done
echo "  GPU path: share of the run's requests the auto worker answered through the GPU cache"
echo "phase 1, server side: mean us per request from the workers' nv_inference_*_duration_us"
echo "  (all requests of the runs, warm-up included; lookup = compute_infer, output = compute_output)"
printf "  %7s | %9s %7s %7s %7s | %9s %7s %7s %7s | %7s\n" \
    samples "GPU total" input lookup output "CPU total" input lookup output lookup
for b in "${batches[@]}"; do
    read -r gt _ gi gf go <<<"${gt1[$b]}"
    read -r ct _ ci cf co <<<"${ct1[$b]}"
    printf "  %7s | %9s %7s %7s %7s | %9s %7s %7s %7s | %7s\n" \
        "$b" "$gt" "$gi" "$gf" "$go" "$ct" "$ci" "$cf" "$co" "$(e2e_ratio "$gf" "$cf")"
done
echo "  last column: GPU lookup / CPU lookup"
echo "phase 2: two hps-workers sharing the GPU caches, one hps-bench each, at the same time"
printf "  %7s | %9s %8s %8s | %9s %8s %8s | %9s %8s %6s | %9s\n" \
    samples "w0 req/s" p50 p99 "w1 req/s" p50 p99 "sum req/s" Mkeys/s hit "sum/ph.1"
for b in "${batches[@]}"; do
    read -r ar ak a50 a99 _ <<<"${a2[$b]}"
    read -r br bk b50 b99 _ <<<"${b2[$b]}"
    read -r gr _ <<<"${a1[$b]}"
    sr=$(awk -v a="$ar" -v b="$br" 'BEGIN {printf "%.1f", a + b}')
    sk=$(awk -v a="$ak" -v b="$bk" 'BEGIN {printf "%.3f", a + b}')
    printf "  %7s | %9s %8s %8s | %9s %8s %8s | %9s %8s %6s | %9s\n" \
        "$b" "$ar" "$a50" "$a99" "$br" "$b50" "$b99" "$sr" "$sk" "${h2[$b]}" "$(e2e_ratio "$sr" "$gr")"
done
echo "  sum/ph.1: the two workers' req/s together over the auto worker's alone in phase 1"
echo "e2e-gpu total time: $(elapsed)"
echo "e2e-gpu.sh: exit status $rc (0 = every hps-bench run passed, no request failed, caches shared)"
exit "$rc"
