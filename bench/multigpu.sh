#!/usr/bin/env bash
# multigpu.sh -- one host, two GPUs (issue 23): how the GPU embedding cache
# scales from one device to two, over HTTP (hps-worker) and through the
# lookup library (libhps in-process), and sharded vs replicated caches at the
# same GPU memory per device.  A criteo-1tb-shaped synthetic model (hps-gen
# --shape criteo-1tb) served by hps-coordinator + one hps-worker per device,
# driven over KServe v2 HTTP (binary tensors) by hps-bench, and looked up
# in-process by bench-inproc, at 1,024 samples per request or call (one
# request file, hps-gen requests, for both); each phase prints its figures, a
# table ends the run.
#
#   1. one device: a worker on device 0 (gpucacheper --scaling-gpucacheper,
#      1.0 by default: every row on the GPU, so the figures are the GPU path's),
#      one hps-bench of --concurrency K connections: req/s, samples/s, p50/p99
#   2. two devices, replicate: the same config, a second worker on device 1
#      beside the first; one hps-bench of K connections per worker, at the same
#      time: total throughput, scaling = (2) / (1), and whether it is >= 1.8
#      (over HTTP each request returns 1,024 x 26 x dim floats through
#      loopback: the host, not the GPUs, may be the limit -- hence 1L/2L)
#   1L. one device, lookup library: --inproc-procs P processes of
#      build/bench/bench-inproc (hps_client_lookup, keys and output in device
#      memory, one call at a time each) on device 0, all started at once, on
#      the INI of phases 1-2: several processes per device so that the GPU,
#      not one host thread, is the limit; they map the device's GPU caches
#      through the segment's registry.  The workers of phases 1-2 keep running,
#      idle (their caches stay loaded; the processes share them, and the
#      workers' /metrics give the hit rate).  Summed keys/s, samples/s
#      (keys/s / 26 tables), p50 (median of the processes' p50), p99 (the
#      largest), whether every process's checked answer had wrong=0
#   2L. two devices, lookup library: P processes on device 0 and P on
#      device 1 at the same time; summed keys/s, scaling = (2L) / (1L), and
#      whether it is >= 1.8.  Then the workers of phases 1-2 stop.
#      Without build/bench/bench-inproc (a build without CUDA) 1L and 2L say
#      "skipped: bench-inproc not built" and the run goes on
#   3. the same GPU memory per device, two fresh workers (devices 0 and 1) each:
#      a. gpu_cache_placement = replicate, gpucacheper P (each device caches
#         P of each table);
#      b. gpu_cache_placement = shard over devices 0,1, gpucacheper 2P (one
#         cache per table spanning both devices, ~P of the table on each);
#      per configuration the GPU-cache hit rate over its runs (delta of
#      nv_hps_embedding_cache_hit_keys / delta of ..._query_keys, both workers,
#      hps-bench's warm-up included) and the two workers' total throughput
#
# All workers and bench-inproc processes attach one coordinator's segment;
# each phase's workers have an INI of their own (a copy with the GPU keys
# changed: only workers and clients read them).  Without a CUDA device the
# script says so and exits 77 (skip); with one it runs phases 1 and 1L only
# and exits 0.  Every figure printed comes from this run.  The default scale,
# 0.02, is a model of 3.76 M rows, 1.95 GB at dim 128 (hps-gen prints it),
# so that phase 3's caches are larger than the 2 MiB VMM granule.
#
# usage: bench/multigpu.sh [--build DIR] [--quick] [--scale F] [--dim D]
#                          [--gpucacheper P] [--scaling-gpucacheper F]
#                          [--duration S] [--warmup S] [--concurrency K]
#                          [--inproc-procs P] [--requests N] [--verify N]
#                          [--workdir DIR] [--keep] [--logs DIR]
#                          [--set SECTION.KEY=VALUE]... [--gpus N]
#   --scale F        hps-gen's --scale (default 0.02; --quick: 0.0001)
#   --gpucacheper P  phase 3 (default 0.05; shard gets 2P, at most 1.0)
#   --duration S, --warmup S   per hps-bench run and per bench-inproc process
#                    (default 5 and 1)
#   --inproc-procs P bench-inproc processes per device in 1L and 2L (default 4,
#                    at most 15: a GPU cache is mapped by 16 processes at most,
#                    the device's hps-worker included)
#   --logs DIR       copy every log (coordinator, workers, hps-bench,
#                    bench-inproc) there at exit
#   --set            edits the generated INI with hps-conf set before the copies
#                    (e.g. model.criteo.hit_rate_threshold=2); all phases
#   --verify N       answers checked exactly per hps-bench run where that holds:
#                    with every row cached (phases 1-2 at gpucacheper 1.0) or
#                    hit_rate_threshold > 1 (misses inserted before the answer);
#                    otherwise misses get the default value by design (0 checked).
#                    bench-inproc checks one answer per process in any case
#                    (rows exact or the default value; a wrong row fails)
#   --gpus N         take N CUDA devices instead of asking nvidia-smi (a dry run
#                    of the script on a CPU build, whose workers serve the CPU path)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
build="$repo/build"
scale=0.02
dim=128
gcper=0.05
full_gcper=1.0
duration=5
warmup=1
conc=4
inproc_procs=4
count=200
verify=4
workdir=""
keep=0
quick=0
logs=""
gpus=""
sets=()
batch=1024

while [ $# -gt 0 ]; do
    case "$1" in
    --build) build=$2; shift ;;
    --quick) quick=1 ;;
    --scale) scale=$2; shift ;;
    --dim) dim=$2; shift ;;
    --gpucacheper) gcper=$2; shift ;;
    --scaling-gpucacheper) full_gcper=$2; shift ;;
    --duration) duration=$2; shift ;;
    --warmup) warmup=$2; shift ;;
    --concurrency) conc=$2; shift ;;
    --inproc-procs) inproc_procs=$2; shift ;;
    --requests) count=$2; shift ;;
    --verify) verify=$2; shift ;;
    --workdir) workdir=$2; shift ;;
    --keep) keep=1 ;;
    --logs) logs=$2; shift ;;
    --set) sets+=("$2"); shift ;;
    --gpus) gpus=$2; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) echo "multigpu.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
if [ "$quick" = 1 ]; then
    scale=0.0001 duration=1 warmup=0.3 conc=2 count=20 verify=2
fi
for v in "$conc" "$inproc_procs" "$count" "$verify" ${gpus:+"$gpus"}; do
    case "$v" in '' | *[!0-9]*) echo "multigpu.sh: --concurrency, --inproc-procs, --requests, --verify and --gpus take one number" >&2; exit 2 ;; esac
done
# At most 16 processes map one GPU cache (HPS_SHMDB_GCACHE_PROCS), the device's worker included.
if [ "$inproc_procs" -lt 1 ] || [ "$inproc_procs" -gt 15 ]; then
    echo "multigpu.sh: --inproc-procs takes 1 to 15 (16 processes share a GPU cache at most, the worker included)" >&2
    exit 2
fi
awk -v p="$gcper" -v f="$full_gcper" 'BEGIN {exit !(p > 0 && p <= 1 && f > 0 && f <= 1)}' ||
    { echo "multigpu.sh: --gpucacheper and --scaling-gpucacheper take a fraction in (0, 1]" >&2; exit 2; }

gen="$build/tools/hps-gen/hps-gen"
coordinator="$build/coordinator/hps-coordinator"
worker="$build/worker/hps-worker"
bench="$build/tools/hps-bench/hps-bench"
conftool="$build/tools/hps-conf/hps-conf"
shmtool="$build/tools/hps-shm/hps-shm"
inproc="$build/bench/bench-inproc" # optional: built with CUDA only (phases 1L, 2L)
for x in "$gen" "$coordinator" "$worker" "$bench" "$conftool" "$shmtool"; do
    [ -x "$x" ] || { echo "multigpu.sh: $x not built (give --build DIR)" >&2; exit 2; }
done

e2e_prog=multigpu.sh
# shellcheck source=bench/e2e-lib.sh
. "$here/e2e-lib.sh"

ngpu=${gpus:-$(e2e_gpu_count)}
if [ "$ngpu" = 0 ]; then
    echo "multigpu.sh: SKIP: no CUDA device (nvidia-smi -L lists no GPU, or CUDA_VISIBLE_DEVICES"\
         "is empty); phase 1 needs one GPU, phases 2 and 3 two"
    exit 77
fi

seg="hpsbench-multigpu-$$"
if [ -z "$workdir" ]; then
    workdir=$(mktemp -d "${TMPDIR:-/tmp}/hps-multigpu.XXXXXX")
else
    mkdir -p "$workdir"
fi
# shellcheck disable=SC2317  # run by the EXIT trap
on_exit() {
    if [ -n "$logs" ] && mkdir -p "$logs" && cp "$workdir"/*.log "$logs"/ 2>/dev/null; then
        echo "logs copied to $logs"
    fi
    e2e_cleanup "$seg" "$keep"
}
trap on_exit EXIT
trap 'exit 130' INT TERM

# ---- helpers ----------------------------------------------------------------

t0=$(date +%s.%N)
elapsed() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f s", b - a}'; }
rc=0

# start_gpu_worker NAME INI DEVICE INSTANCE: a worker on fresh ports, waited
# for until ready; sets wpid, wport, wmport.  Its log: $workdir/NAME.log.
start_gpu_worker() {
    http_port=$(e2e_pick_port) metrics_port=$((http_port + 2))
    e2e_start_worker "$workdir/$1.log" -c "$2" --device "$3" --instance "$4"
    wpid=$worker_started_pid wport=$http_port wmport=$metrics_port
    e2e_wait_ready "$wport" 600 ||
        { sed 's/^/   /' "$workdir/$1.log"; echo "multigpu.sh: $1 not ready after 600 s" >&2; exit 1; }
    grep -E "GPU cache|CPU path|WARN" "$workdir/$1.log" | sed 's/^/   /' | head -8 || true
    # The CPU path: a CUDA build logs it; a build without CUDA logs nothing,
    # but its /metrics (read once ready, caches preloaded) list no GPU cache.
    local ncache
    read -r _ _ ncache _ <<<"$(e2e_cache_counts "$wmport")"
    if grep -q "CPU path" "$workdir/$1.log" || [ "$ncache" = 0 ]; then
        nogpu="the workers serve from the CPU path (no CUDA device or a CPU build: no GPU cache"
        nogpu="$nogpu in their /metrics): the GPU figures are CPU-path figures"
    fi
}

# add_counts "H Q T S" "H Q T S": the element-wise sum (two workers' counts).
add_counts() {
    awk -v a="$1" -v b="$2" 'BEGIN {split(a, x, " "); split(b, y, " ")
        printf "%.0f %.0f %d %d\n", x[1] + y[1], x[2] + y[2], x[3] + y[3], x[4] + y[4]}'
}

# samples_per_s REQ/S: samples per second at $batch samples per request.
samples_per_s() { awk -v r="$1" -v b="$batch" 'BEGIN {printf "%.0f", r * b}'; }

# cache_mib: "device 0: X MiB, device 1: Y MiB" -- the device memory of the
# model's GPU caches per device, from the segment's GPU-cache registry
# (replicated caches: their device; sharded ones: each shard's device).
cache_mib() {
    "$shmtool" --json info "$seg" 2>/dev/null | python3 -c '
import json, sys
try:
    caches = json.load(sys.stdin).get("gpu_caches", [])
except ValueError:
    caches = []
per = {}
for e in caches:
    if e.get("model") != "criteo" or e.get("state") != "ready":
        continue
    if e.get("placement") == "shard":
        for s in e.get("shards", []):
            per[s["device"]] = per.get(s["device"], 0) + s.get("bytes", 0)
    else:
        per[e.get("device")] = per.get(e.get("device"), 0) + e.get("bytes", 0)
print(", ".join("device %s: %.0f MiB" % (d, b / 1048576) for d, b in sorted(per.items()))
      or "-")'
}

# run_pair NAME VERIFY: one hps-bench per worker (w0_*, w1_*) at the same time;
# sets pair_row0, pair_row1 (e2e_bench_row), pair_hit (both workers' hit rate).
run_pair() {
    local b0 b1 a0 a1 p0 p1
    b0=$(e2e_cache_counts "$w0_mport") b1=$(e2e_cache_counts "$w1_mport")
    e2e_bench_start "$workdir/$1-bench0.log" "$w0_port" "$w0_pid" "$w0_ini" "$2" "$conc" \
        "$duration" "$warmup" "$reqfile"
    p0=$e2e_bench_pid
    e2e_bench_start "$workdir/$1-bench1.log" "$w1_port" "$w1_pid" "$w1_ini" "$2" "$conc" \
        "$duration" "$warmup" "$reqfile"
    p1=$e2e_bench_pid
    echo "   worker 0 (device 0):"
    e2e_bench_wait "$p0" "$workdir/$1-bench0.log" "$bench_limit" || rc=1
    echo "   worker 1 (device 1):"
    e2e_bench_wait "$p1" "$workdir/$1-bench1.log" "$bench_limit" || rc=1
    a0=$(e2e_cache_counts "$w0_mport") a1=$(e2e_cache_counts "$w1_mport")
    pair_row0=$(e2e_bench_row "$workdir/$1-bench0.log")
    pair_row1=$(e2e_bench_row "$workdir/$1-bench1.log")
    pair_hit=$(e2e_hit_rate "$(add_counts "$b0" "$b1")" "$(add_counts "$a0" "$a1")")
}

# pair_summary LABEL: print the two runs' total; sets pair_total (req/s).
pair_summary() {
    local r0 r1 p50a p50b p99a p99b
    read -r r0 _ p50a p99a _ <<<"$pair_row0"
    read -r r1 _ p50b p99b _ <<<"$pair_row1"
    pair_total=$(awk -v a="$r0" -v b="$r1" 'BEGIN {printf "%.1f", a + b}')
    echo "   $1: $pair_total req/s ($(samples_per_s "$pair_total") samples/s) together;"\
         "p50 $p50a / $p50b ms, p99 $p99a / $p99b ms (worker 0 / 1); GPU cache hit rate $pair_hit"
}

# pair_row LABEL MIB: the results-table row of the last run_pair + pair_summary.
pair_row() {
    local a50 a99 b50 b99
    read -r _ _ a50 a99 _ <<<"$pair_row0"
    read -r _ _ b50 b99 _ <<<"$pair_row1"
    echo "$1|2|$pair_total|$(samples_per_s "$pair_total")|$a50/$b50|$a99/$b99|$pair_hit|$2"
}

# med_max NUMBER...: "MEDIAN MAX" of the numbers given (anything else is
# ignored), "- -" without any.
med_max() {
    printf '%s\n' "$@" | awk '$1 ~ /^[0-9]/' | sort -g |
        awk '{v[++n] = $1} END {if (!n) {print "- -"; exit}
            printf "%.2f %.2f\n", (n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2), v[n]}'
}

# us_ms US: microseconds as milliseconds, 3 decimals ("-" stays).
us_ms() { awk -v u="$1" 'BEGIN {if (u ~ /^[0-9]/) printf "%.3f", u / 1000; else printf "-"}'; }

# run_inproc TAG DEVICE...: $inproc_procs bench-inproc processes per DEVICE,
# all started at once in the background, then waited for (logs
# $workdir/TAG-inproc-dD-I.log).  Prints each process's figures; sets
# il_keys (keys/s, summed), il_samples (samples/s), il_rps (calls/s of $batch
# samples), il_p50 / il_p99 (us: the median of all processes' p50, the
# largest p99), il_p50dev / il_p99dev (the same per device, ms, "d0/d1"),
# il_ok ("yes" when every process exited 0 and its checked answer had
# wrong=0) and il_hit (the GPU cache hit rate of the devices' caches from
# their hps-workers' /metrics: every process's lookups, warm-ups included).
run_inproc() {
    local tag=$1 d i irc log ks p50 p99 calls ex df wr rdy keys bsz tables=0 skew b a
    shift
    local -a pids=() plogs=() pdevs=() all50=() all99=() rdys=()
    local -A d50 d99
    b="0 0 0 0"
    for d in "$@"; do b=$(add_counts "$b" "$(e2e_cache_counts "${dev_mport[$d]}")"); done
    for d in "$@"; do
        for ((i = 0; i < inproc_procs; i++)); do
            log="$workdir/$tag-inproc-d$d-$i.log"
            e2e_inproc_start "$log" "$ini_full" criteo "$d" "$duration" "$warmup" "$reqfile"
            pids+=("$e2e_inproc_pid") plogs+=("$log") pdevs+=("$d")
        done
    done
    echo "-- ${#pids[@]} x bench-inproc --config $ini_full --model criteo --device D --duration"\
         "$duration --warmup $warmup --no-hot $reqfile, started at once (devices: $*)"
    il_keys=0 il_ok=yes
    for i in "${!pids[@]}"; do
        irc=0
        e2e_wait_pid "${pids[$i]}" "$bench_limit" bench-inproc || irc=$?
        log=${plogs[$i]} d=${pdevs[$i]}
        ks=$(e2e_result_field "$log" a keys_s) p50=$(e2e_result_field "$log" a p50_us)
        p99=$(e2e_result_field "$log" a p99_us) calls=$(e2e_result_field "$log" a calls)
        ex=$(e2e_result_field "$log" a exact) df=$(e2e_result_field "$log" a default)
        wr=$(e2e_result_field "$log" a wrong) keys=$(e2e_result_field "$log" a keys)
        bsz=$(e2e_result_field "$log" a B)
        rdy=$(sed -n 's/.*client ready in \([0-9.]*\) s.*/\1/p' "$log" | head -1)
        echo "   device $d #$((i % inproc_procs)): $ks keys/s, p50 $p50 us, p99 $p99 us, $calls calls;"\
             "answer checked: $ex exact, $df default, $wr wrong rows; client ready in ${rdy:--} s"
        grep -E '^WARNING' "$log" | sed 's/^/      /' | head -2 || true
        if [ "$irc" != 0 ] || [ "$ks" = - ] || [ "$wr" != 0 ]; then
            il_ok=no rc=1
            echo "      bench-inproc exit status $irc (log: $log):"
            grep -v '^RESULT' "$log" | tail -n 5 | sed 's/^/      /'
        fi
        [ "$ks" = - ] && continue
        il_keys=$(awk -v a="$il_keys" -v k="$ks" 'BEGIN {printf "%.0f", a + k}')
        [ "$tables" != 0 ] || tables=$(awk -v k="$keys" -v b="$bsz" 'BEGIN {printf "%d", (b > 0 ? k / b : 0)}')
        all50+=("$p50") all99+=("$p99") d50[$d]+=" $p50" d99[$d]+=" $p99"
        [ -z "$rdy" ] || rdys+=("$rdy")
    done
    a="0 0 0 0"
    for d in "$@"; do a=$(add_counts "$a" "$(e2e_cache_counts "${dev_mport[$d]}")"); done
    il_hit=$(e2e_hit_rate "$b" "$a")
    [ "$tables" != 0 ] || tables=26
    il_samples=$(awk -v k="$il_keys" -v t="$tables" 'BEGIN {printf "%.0f", k / t}')
    il_rps=$(awk -v s="$il_samples" -v b="$batch" 'BEGIN {printf "%.1f", s / b}')
    read -r il_p50 _ <<<"$(med_max "${all50[@]+"${all50[@]}"}")"
    read -r _ il_p99 <<<"$(med_max "${all99[@]+"${all99[@]}"}")"
    il_p50dev="" il_p99dev=""
    for d in "$@"; do
        # shellcheck disable=SC2086  # the lists split into their numbers
        read -r p50 _ <<<"$(med_max ${d50[$d]:-})"
        # shellcheck disable=SC2086
        read -r _ p99 <<<"$(med_max ${d99[$d]:-})"
        il_p50dev+="${il_p50dev:+/}$(us_ms "$p50")" il_p99dev+="${il_p99dev:+/}$(us_ms "$p99")"
    done
    skew=$(printf '%s\n' "${rdys[@]+"${rdys[@]}"}" | sort -g | awk 'NR == 1 {a = $1} {b = $1}
        END {if (NR) printf "%.2f", b - a; else printf "-"}')
    echo "   the processes' timed windows start up to $skew s apart (spread of their \"client"\
         "ready\" times; ${warmup} s warm-up, then ${duration} s timed each)"
    if awk -v k="$skew" -v d="$duration" 'BEGIN {exit !(k ~ /^[0-9]/ && k > 0.1 * d)}'; then
        echo "   NOTE: the timed windows overlap for less than 90% of --duration: the summed keys/s"\
             "overstates what the processes do together; give a longer --duration"
    fi
}

# inproc_skip PHASE: the line of a lookup-library phase without bench-inproc.
inproc_skip() {
    echo "   skipped: bench-inproc not built ($inproc; a -Dcuda=enabled build has it)"
    table_rows+=("$1|-|-|-|-|-|-|skipped: bench-inproc not built")
}

# stop_workers PID...: SIGTERM each, wait (their caches go with the last one).
stop_workers() {
    local p
    for p in "$@"; do e2e_stop_pid "$p" hps-worker; done
}

# ---- setup ------------------------------------------------------------------

model="$workdir/model"
ini="$model/criteo.ini"
ini_full="$model/criteo-scaling.ini"
ini_rep="$model/criteo-replicate.ini"
ini_shard="$model/criteo-shard.ini"
reqfile="$workdir/requests-b$batch.bin"
nogpu=""
bench_limit=$(awk -v d="$duration" -v w="$warmup" 'BEGIN {printf "%d", 300 + 2 * (d + w)}')
sh_gcper=$(awk -v p="$gcper" 'BEGIN {q = 2 * p; printf "%g", (q > 1 ? 1 : q)}')

echo "== multigpu: hps-coordinator + one hps-worker per GPU, criteo-1tb shape, $batch samples per request =="
e2e_machine
echo "CUDA devices: $ngpu${gpus:+ (--gpus)}"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi -L 2>/dev/null | sed 's/^/   /' || true
    nvidia-smi topo -m 2>/dev/null | sed -n '1,3p' | sed 's/^/   topo: /' || true
fi
echo

echo "-- model: hps-gen model --shape criteo-1tb --scale $scale --dim $dim"
"$gen" model --out "$model" --model criteo --shape criteo-1tb --scale "$scale" --dim "$dim" --force
echo "   files on disk: $(du -sb "$model" | cut -f1) bytes in $(find "$model" -mindepth 1 -maxdepth 1 -type d | wc -l) table directories"
devlist=0
[ "$ngpu" -ge 2 ] && devlist=0,1
for kv in volatile_db.shared_memory_name="$seg" model.criteo.gpucache=true \
    model.criteo.max_batch_size="$batch" model.criteo.deployed_device_list="$devlist" \
    "${sets[@]+"${sets[@]}"}"; do
    "$conftool" set "$ini" "$kv"
    echo "   hps-conf set $kv (now: $("$conftool" get "$ini" "${kv%%=*}"))"
done
# One copy per worker configuration (hps-conf set; the placement key needs
# a build that knows it: issue 23).
placement_ok=1
for spec in "$ini_full replicate $full_gcper" "$ini_rep replicate $gcper" "$ini_shard shard $sh_gcper"; do
    read -r f pl gp <<<"$spec"
    cp "$ini" "$f"
    "$conftool" set "$f" model.criteo.gpucacheper="$gp"
    if ! "$conftool" set "$f" model.criteo.gpu_cache_placement="$pl" 2>"$workdir/conf-error.txt"; then
        placement_ok=0
        sed 's/^/   /' "$workdir/conf-error.txt"
    fi
done
thr=$("$conftool" get "$ini" model.criteo.hit_rate_threshold)
verify_full=0 verify_part=0
if awk -v t="$thr" 'BEGIN {exit !(t > 1)}'; then verify_full=$verify verify_part=$verify; fi
if awk -v f="$full_gcper" 'BEGIN {exit !(f >= 1)}'; then verify_full=$verify; fi
echo "   phases 1-2: $ini_full (gpucacheper $full_gcper, replicate; verify $verify_full)"
echo "   phase 3a:   $ini_rep (gpucacheper $gcper, replicate; verify $verify_part)"
echo "   phase 3b:   $ini_shard (gpucacheper $sh_gcper, shard; verify $verify_part)"
echo "   hit_rate_threshold $thr"
[ "$placement_ok" = 1 ] ||
    echo "   this build's hps-conf has no gpu_cache_placement: phase 3b would be replicated too"

echo "-- requests: hps-gen requests --batch $batch --count $count (power law, --alpha auto)"
"$gen" requests --model-dir "$model" --model criteo --batch "$batch" --count "$count" \
    --out "$reqfile" --force
echo

e2e_start_coordinator "$ini" "$workdir/coordinator.log"
echo

# ---- phase 1: one device ----------------------------------------------------

summary() {
    echo "== results: criteo-1tb shape, scale $scale, dim $dim, $batch samples per request or call,"\
         "$conc connections per hps-bench, $inproc_procs bench-inproc processes per device,"\
         "${duration} s timed per run =="
    [ -z "$nogpu" ] || echo "   NOTE: $nogpu"
    printf "  %-44s | %5s | %9s | %10s | %15s | %15s | %6s | %s\n" phase procs "req/s" \
        "samples/s" "p50 ms (0/1)" "p99 ms (0/1)" hit "GPU cache per device"
    local row lbl np rps smp p50 p99 hit mib line
    for row in "${table_rows[@]+"${table_rows[@]}"}"; do
        IFS='|' read -r lbl np rps smp p50 p99 hit mib <<<"$row"
        printf "  %-44s | %5s | %9s | %10s | %15s | %15s | %6s | %s\n" "$lbl" "$np" "$rps" \
            "$smp" "$p50" "$p99" "$hit" "$mib"
    done
    for line in "${summary_lines[@]+"${summary_lines[@]}"}"; do echo "  $line"; done
    echo "  procs: hps-workers (one hps-bench of $conc connections each), or bench-inproc processes"\
         "(1L, 2L: req/s = calls/s, each call $batch samples)"
    echo "  p50/p99 ms (0/1): per worker, or per device for 1L/2L (the median of its processes' p50,"\
         "the largest p99)"
    echo "  hit: the GPU cache hit rate over the phase's runs, warm-up included, the devices' caches"\
         "(every process's lookups; 1L/2L read from the idle workers' /metrics)"
    echo "  GPU cache per device: device memory of the model's caches (hps-shm info), all tables"
    echo "multigpu total time: $(elapsed)"
}
table_rows=()
summary_lines=()
declare -A dev_mport # device -> the metrics port of its phase 1-2 worker
w1_pid=""

echo "== phase 1: one hps-worker on device 0 (gpucacheper $full_gcper), $conc connections,"\
     "${duration} s timed after ${warmup} s warm-up =="
start_gpu_worker p1-worker0 "$ini_full" 0 0
w0_pid=$wpid w0_port=$wport w0_mport=$wmport w0_ini=$ini_full
dev_mport[0]=$w0_mport
echo "   GPU caches: $(cache_mib)"
before=$(e2e_cache_counts "$w0_mport")
e2e_bench_start "$workdir/p1-bench0.log" "$w0_port" "$w0_pid" "$ini_full" "$verify_full" "$conc" \
    "$duration" "$warmup" "$reqfile"
e2e_bench_wait "$e2e_bench_pid" "$workdir/p1-bench0.log" "$bench_limit" || rc=1
p1_row=$(e2e_bench_row "$workdir/p1-bench0.log")
p1_hit=$(e2e_hit_rate "$before" "$(e2e_cache_counts "$w0_mport")")
p1_mib=$(cache_mib)
read -r p1_rps _ p1_p50 p1_p99 _ <<<"$p1_row"
echo "   one device: $p1_rps req/s ($(samples_per_s "$p1_rps") samples/s), p50 $p1_p50 ms,"\
     "p99 $p1_p99 ms; GPU cache hit rate $p1_hit"
table_rows+=("1  one device, gpucacheper $full_gcper|1|$p1_rps|$(samples_per_s "$p1_rps")|$p1_p50|$p1_p99|$p1_hit|$p1_mib")
echo "   phase 1 done: $(elapsed) since start"
echo

# ---- phase 2: two devices, replicate ---------------------------------------

p2_scaling="" p2_ge18=""
if [ "$ngpu" -ge 2 ]; then
    echo "== phase 2: a second hps-worker on device 1 beside the first (same config, replicated"\
         "caches); one hps-bench of $conc connections per worker at the same time =="
    start_gpu_worker p2-worker1 "$ini_full" 1 1
    w1_pid=$wpid w1_port=$wport w1_mport=$wmport w1_ini=$ini_full
    dev_mport[1]=$w1_mport
    p2_mib=$(cache_mib)
    echo "   GPU caches: $p2_mib"
    run_pair p2 "$verify_full"
    pair_summary "two devices"
    p2_total=$pair_total
    table_rows+=("$(pair_row "2  two devices, replicate, gpucacheper $full_gcper" "$p2_mib")")
    p2_scaling=$(e2e_ratio "$p2_total" "$p1_rps")
    p2_ge18=$(awk -v a="$p2_total" -v b="$p1_rps" 'BEGIN {print (b > 0 && a / b >= 1.8 ? "yes" : "no")}')
    echo "   scaling (2) / (1): $p2_scaling (>= 1.8: $p2_ge18)"
    summary_lines+=("scaling, two devices (2) over one (1): $p2_scaling of phase 1's req/s (>= 1.8: $p2_ge18)")
    for p in "$w0_pid" "$w1_pid" "$coord_pid"; do
        kill -0 "$p" 2>/dev/null || { echo "multigpu.sh: a process (pid $p) died in phase 2" >&2; rc=1; }
    done
    echo "   phase 2 done: $(elapsed) since start"
    echo
fi

# ---- phases 1L and 2L: the lookup library, one device and two ---------------
# The workers of phases 1-2 keep running, idle: the bench-inproc processes
# map their (loaded) GPU caches, and their /metrics count every lookup.

echo "== phase 1L: lookup library, one device: $inproc_procs bench-inproc processes on device 0"\
     "at once (hps_client_lookup, keys and output in device memory, $batch samples per call),"\
     "${duration} s timed after ${warmup} s warm-up each =="
if [ -x "$inproc" ]; then
    run_inproc p1L 0
    p1L_keys=$il_keys
    echo "   one device, lookup library: $il_keys keys/s ($il_samples samples/s) summed over"\
         "$inproc_procs processes; p50 $il_p50 us (median of the processes'), p99 $il_p99 us"\
         "(largest); wrong=0 in every process: $il_ok; GPU cache hit rate $il_hit"
    table_rows+=("1L one device, lookup library|$inproc_procs|$il_rps|$il_samples|$il_p50dev|$il_p99dev|$il_hit|$(cache_mib)")
else
    p1L_keys=""
    inproc_skip "1L one device, lookup library"
fi
echo "   phase 1L done: $(elapsed) since start"
echo

if [ "$ngpu" -ge 2 ]; then
    echo "== phase 2L: lookup library, two devices: $inproc_procs bench-inproc processes on device 0"\
         "and $inproc_procs on device 1, all at once =="
    if [ -x "$inproc" ]; then
        run_inproc p2L 0 1
        echo "   two devices, lookup library: $il_keys keys/s ($il_samples samples/s) summed over"\
             "$((2 * inproc_procs)) processes; p50 $il_p50 us (median of the processes'), p99"\
             "$il_p99 us (largest); wrong=0 in every process: $il_ok; GPU cache hit rate $il_hit"
        table_rows+=("2L two devices, lookup library|$((2 * inproc_procs))|$il_rps|$il_samples|$il_p50dev|$il_p99dev|$il_hit|$(cache_mib)")
        l_scaling=$(e2e_ratio "$il_keys" "$p1L_keys")
        l_ge18=$(awk -v a="$il_keys" -v b="$p1L_keys" 'BEGIN {print (b > 0 && a / b >= 1.8 ? "yes" : "no")}')
        echo "   scaling, HTTP (2) / (1): $p2_scaling (>= 1.8: $p2_ge18)"
        echo "   scaling, lookup library (2L) / (1L): $l_scaling (>= 1.8: $l_ge18)"
        summary_lines+=("scaling, lookup library: $l_scaling (>= 1.8: $l_ge18) -- keys/s of 2L over 1L")
    else
        inproc_skip "2L two devices, lookup library"
        summary_lines+=("scaling, lookup library: - (skipped: bench-inproc not built)")
    fi
    echo "   phase 2L done: $(elapsed) since start"
    echo
fi

for p in "$w0_pid" ${w1_pid:+"$w1_pid"} "$coord_pid"; do
    kill -0 "$p" 2>/dev/null || { echo "multigpu.sh: a process (pid $p) died in phases 1-2L" >&2; rc=1; }
done
stop_workers "$w0_pid" ${w1_pid:+"$w1_pid"}

if [ "$ngpu" -lt 2 ]; then
    echo "multigpu.sh: only $ngpu CUDA device: phases 2, 2L (two devices) and 3 (shard vs"\
         "replicate) need 2; stopping after phase 1L"
    echo
    summary
    echo "multigpu.sh: exit status $rc (phases 1 and 1L only; 0 = every run passed, no process died)"
    exit "$rc"
fi

# ---- phase 3: shard vs replicate at the same GPU memory per device ---------

echo "== phase 3: the same GPU memory per device: replicate at gpucacheper $gcper vs shard over"\
     "devices 0,1 at gpucacheper $sh_gcper; fresh workers on devices 0 and 1 each =="
declare -A p3_total p3_hit
inst=2
for cfg in replicate shard; do
    f=$ini_rep gp=$gcper tag=3a
    [ "$cfg" = shard ] && f=$ini_shard gp=$sh_gcper tag=3b
    echo "-- $tag: $cfg, gpucacheper $gp"
    start_gpu_worker "p3-$cfg-worker0" "$f" 0 "$inst"
    w0_pid=$wpid w0_port=$wport w0_mport=$wmport w0_ini=$f
    start_gpu_worker "p3-$cfg-worker1" "$f" 1 $((inst + 1))
    w1_pid=$wpid w1_port=$wport w1_mport=$wmport w1_ini=$f
    inst=$((inst + 2))
    if [ "$cfg" = shard ]; then
        made=$(grep -c "sharded over devices 0,1:" "$workdir/p3-shard-worker0.log" || true)
        mapped=$(grep -c "sharded over devices 0,1: mapped" "$workdir/p3-shard-worker1.log" || true)
        echo "   \"sharded over devices 0,1\": worker 0 logged it for $made table(s), worker 1"\
             "mapped $mapped"
        if [ -z "$nogpu" ] && { [ "$made" = 0 ] || [ "$mapped" = 0 ]; }; then
            echo "   the caches are NOT sharded (see the workers' warnings above)"
            rc=1
        fi
    fi
    mib=$(cache_mib)
    echo "   GPU caches: $mib"
    run_pair "p3-$cfg" "$verify_part"
    pair_summary "$cfg"
    p3_total[$cfg]=$pair_total p3_hit[$cfg]=$pair_hit
    lbl="$tag $cfg, gpucacheper $gp"
    [ "$cfg" = shard ] && lbl="$lbl over 0,1"
    table_rows+=("$(pair_row "$lbl" "$mib")")
    for p in "$w0_pid" "$w1_pid" "$coord_pid"; do
        kill -0 "$p" 2>/dev/null || { echo "multigpu.sh: a process (pid $p) died in phase 3" >&2; rc=1; }
    done
    stop_workers "$w0_pid" "$w1_pid"
done
summary_lines+=("shard over replicate, the same memory per device: $(e2e_ratio "${p3_total[shard]}" \
    "${p3_total[replicate]}") of its req/s; hit rate ${p3_hit[shard]} vs ${p3_hit[replicate]}")
echo "   phase 3 done: $(elapsed) since start"
echo

summary
echo "multigpu.sh: exit status $rc (0 = every hps-bench run passed, every bench-inproc process exited 0"\
     "with wrong=0, no process died, caches sharded in 3b)"
exit "$rc"
