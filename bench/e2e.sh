#!/usr/bin/env bash
# e2e.sh -- end-to-end benchmark: a criteo-1tb-shaped synthetic model served
# by hps-coordinator + one hps-worker, driven over KServe v2 HTTP by
# hps-bench, beside the same lookups against redis-server (HugeCTR layout).
#
#   1. hps-gen model    criteo-1tb shape (26 tables) at --scale, --dim floats
#   2. hps-gen requests batch 1, 64 and 1024 samples per request (power law)
#   3. hps-coordinator  loads the model (RocksDB + shared-memory VDB); we wait
#                       for its "ready" line before starting the worker
#   4. hps-worker       --device 0 on free ports; hps-bench waits for ready
#   5. hps-bench        every request file, each --concurrency, verified
#   6. stop everything (also on error or Ctrl-C), remove the work directory
#
# Every figure printed comes from this run (hps-gen's, the processes' logs
# and hps-bench's).
#
# usage: bench/e2e.sh [--build DIR] [--quick] [--scale F] [--dim D]
#                     [--duration S] [--reps R] [--concurrency N[,N..]] [--verify N]
#                     [--workdir DIR] [--keep] [--set SECTION.KEY=VALUE]...
#                     [--no-redis] [--worker PATH] [--baseline-worker PATH] [--rounds N]
#   --set  edits the generated INI with hps-conf set (e.g. worker.http_threads=4)
#   --no-redis  skip the Redis comparison of the main run
#   --worker PATH  serve with this hps-worker instead of the build's
#   --baseline-worker PATH  also serve the model with another hps-worker (e.g.
#          the previous commit's, built in a git worktree) and measure both,
#          alternating, --rounds times (default 2) without Redis; prints
#          req/s and server CPU us/request of each and their ratios
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
build="$repo/build"
scale=0.002
dim=128
duration=1.5
warmup=0.5
reps=3
conc=1,4
verify=16
workdir=""
keep=0
quick=0
sets=()
no_redis=()
base_worker=""
worker_arg=""
rounds=2
counts=(20000 2000 200) # requests per file for batch 1, 64, 1024 (files are cycled)

while [ $# -gt 0 ]; do
    case "$1" in
    --build) build=$2; shift ;;
    --quick) quick=1 ;;
    --scale) scale=$2; shift ;;
    --dim) dim=$2; shift ;;
    --duration) duration=$2; shift ;;
    --reps) reps=$2; shift ;;
    --concurrency) conc=$2; shift ;;
    --verify) verify=$2; shift ;;
    --workdir) workdir=$2; shift ;;
    --keep) keep=1 ;;
    --set) sets+=("$2"); shift ;;
    --no-redis) no_redis=(--no-redis) ;;
    --worker) worker_arg=$2; shift ;;
    --baseline-worker) base_worker=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "e2e.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
if [ "$quick" = 1 ]; then
    scale=0.0001 duration=0.5 warmup=0.2 reps=1 verify=2 conc=1,2 counts=(2000 200 20)
fi

gen="$build/tools/hps-gen/hps-gen"
coordinator="$build/coordinator/hps-coordinator"
worker=${worker_arg:-"$build/worker/hps-worker"}
bench="$build/tools/hps-bench/hps-bench"
conftool="$build/tools/hps-conf/hps-conf"
for x in "$gen" "$coordinator" "$worker" "$bench" "$conftool" ${base_worker:+"$base_worker"}; do
    [ -x "$x" ] || { echo "e2e.sh: $x not built (give --build DIR)" >&2; exit 2; }
done

e2e_prog=e2e.sh
# shellcheck source=bench/e2e-lib.sh
. "$here/e2e-lib.sh"

# e2e_ab BASE_WORKER ROUNDS: a second hps-worker (BASE_WORKER, instance 1,
# its own ports) on the same model; hps-bench (no Redis) against this
# build's worker, then against it, ROUNDS times; then the median of each
# figure over the rounds and the ratios (this build / baseline).
e2e_ab() {
    local save_worker=$worker save_http=$http_port save_metrics=$metrics_port base_pid base_port r who
    echo
    echo "== A/B: this build's hps-worker (ours) vs --baseline-worker $1 (base): same model, segment"\
         "and requests, no Redis, $2 rounds alternating ours, base =="
    worker=$1 http_port=$(e2e_pick_port)
    metrics_port=$((http_port + 2))
    e2e_start_worker "$workdir/worker-base.log" -c "$ini" --device 0 --instance 1
    base_pid=$worker_started_pid base_port=$http_port
    worker=$save_worker http_port=$save_http metrics_port=$save_metrics
    for r in $(seq "$2"); do
        for who in ours base; do
            local url=$http_port pid=$worker_pid
            [ "$who" = base ] && url=$base_port pid=$base_pid
            "$bench" --url "http://127.0.0.1:$url" --config "$ini" --wait-ready 60 --no-redis \
                --server-pid "$pid" --concurrency "$conc" --duration "$duration" --warmup "$warmup" \
                --reps "$reps" "${files[@]}" >"$workdir/ab-$who-$r.txt" 2>&1 ||
                { cat "$workdir/ab-$who-$r.txt"; echo "$e2e_prog: hps-bench failed ($who, round $r)" >&2; return 1; }
            # results rows: samples keys conns | req/s Mkeys p50 p90 p99 max err srv-ms/r |
            awk -v who="$who" -v r="$r" '/^ +[0-9]+ +[0-9]+ +[0-9]+ +\|/ {print who, r, $1, $3, $5, $7, $9, $12}' \
                "$workdir/ab-$who-$r.txt" >>"$workdir/ab.txt"
            printf '   round %s %-4s %s\n' "$r" "$who" \
                "$(awk -v w="$who" -v r="$r" '$1 == w && $2 == r {printf "B=%s c=%s %.0f req/s %.1f us/req; ", $3, $4, $5, $8 * 1e3}' "$workdir/ab.txt")"
        done
    done
    echo "   median over $2 rounds (and the best round: most req/s, least CPU); srv us/req ="\
         "hps-worker CPU time (user + system) per request"
    printf '   %7s %5s | %10s %10s %6s | %8s %8s %6s | %10s %10s %8s %8s\n' samples conns "ours req/s" \
        "base req/s" ratio "ours us" "base us" ratio "ours max/s" "base max/s" "ours min" "base min"
    awk 'function med(key,   i, j, n, t, v) {
             n = cnt[key]
             for (i = 1; i <= n; i++) v[i] = val[key, i]
             for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] > v[j]; j--) {t = v[j]; v[j] = v[j - 1]; v[j - 1] = t}
             return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
         }
         function add(key, x) {val[key, ++cnt[key]] = x}
         function best(key, sign,   i, b) {
             b = val[key, 1]
             for (i = 2; i <= cnt[key]; i++) if (sign * val[key, i] > sign * b) b = val[key, i]
             return b
         }
         {k = $3 " " $4; if (!(k in seen)) {seen[k] = 1; order[n++] = k}
          add($1 " q " k, $5); add($1 " c " k, $8 * 1e3)}
         END {for (i = 0; i < n; i++) {k = order[i]; split(k, a, " ")
              qo = med("ours q " k); qb = med("base q " k); co = med("ours c " k); cb = med("base c " k)
              printf "   %7s %5s | %10.1f %10.1f %5.2fx | %8.1f %8.1f %5.2fx | %10.1f %10.1f %8.1f %8.1f\n",
                     a[1], a[2], qo, qb, qo / qb, co, cb, co / cb, best("ours q " k, 1), best("base q " k, 1),
                     best("ours c " k, -1), best("base c " k, -1)}}' "$workdir/ab.txt"
    echo "   req/s ratio above 1 = ours faster; us/req ratio below 1 = ours cheaper"
}

seg="hpsbench-e2e-$$"
coord_pid="" worker_pid=""
if [ -z "$workdir" ]; then
    workdir=$(mktemp -d "${TMPDIR:-/tmp}/hps-e2e.XXXXXX")
else
    mkdir -p "$workdir"
fi
trap 'e2e_cleanup "$seg" "$keep"' EXIT
trap 'exit 130' INT TERM

http_port=$(e2e_pick_port)
metrics_port=$((http_port + 2))
model="$workdir/model"
ini="$model/criteo.ini"

echo "== e2e: hps-coordinator + 1 hps-worker vs redis-server, criteo-1tb shape =="
e2e_machine
echo

echo "-- model: hps-gen model --shape criteo-1tb --scale $scale --dim $dim"
t0=$(date +%s.%N)
"$gen" model --out "$model" --model criteo --shape criteo-1tb --scale "$scale" --dim "$dim" \
    --segment "$seg" --http-port "$http_port" --metrics-port "$metrics_port" --threads 2 --force
echo "   files on disk: $(du -sb "$model" | cut -f1) bytes in $(ls -d "$model"/*/ | wc -l) table directories"
for kv in "${sets[@]+"${sets[@]}"}"; do
    "$conftool" set "$ini" "$kv"
    echo "   hps-conf set $kv (now: $("$conftool" get "$ini" "${kv%%=*}"))"
done

echo "-- requests: hps-gen requests (power law, --alpha auto)"
batches=(1 64 1024)
files=()
for i in 0 1 2; do
    b=${batches[$i]}
    f="$workdir/requests-b$b.bin"
    "$gen" requests --model-dir "$model" --model criteo --batch "$b" --count "${counts[$i]}" \
        --out "$f" --force
    files+=("$f")
done
echo

e2e_start_coordinator "$ini" "$workdir/coordinator.log"
# Start the worker; a port taken meanwhile (exit status 3) gets new ports.
e2e_start_worker "$workdir/worker.log" -c "$ini" --device 0
worker_pid=$worker_started_pid
echo

rc=0
"$bench" --url "http://127.0.0.1:$http_port" --config "$ini" --wait-ready 60 \
    --server-pid "$worker_pid" --concurrency "$conc" --duration "$duration" --warmup "$warmup" --reps "$reps" \
    --verify "$verify" "${no_redis[@]+"${no_redis[@]}"}" "${files[@]}" || rc=$?
[ -z "$base_worker" ] || e2e_ab "$base_worker" "$rounds" || rc=1

echo
echo "-- hps-worker metrics: lookup layers and GPU embedding cache (hit rate = hit_keys / query_keys)"
e2e_metrics "$metrics_port" |
    grep -E '^nv_hps_(lookup_keys|volatile_db_hit|persistent_db_hit|default_value|embedding_cache)' |
    awk '{print "   " $0} /^nv_hps_embedding_cache_query_keys/ {q += $2}
         /^nv_hps_embedding_cache_hit_keys/ {h += $2}
         END {if (q) printf "   GPU cache hit rate (all tables): %.4f (%d of %d keys)\n", h / q, h, q}' || true
echo
echo "-- hps-worker log"
sed 's/^/   /' "$workdir/worker.log"
if ! kill -0 "$worker_pid" 2>/dev/null; then echo "e2e.sh: hps-worker died during the run" >&2; rc=1; fi
if ! kill -0 "$coord_pid" 2>/dev/null; then echo "e2e.sh: hps-coordinator died during the run" >&2; rc=1; fi
t1=$(date +%s.%N)
awk -v a="$t0" -v b="$t1" 'BEGIN {printf "e2e total time: %.1f s\n", b - a}'
echo "e2e.sh: exit status $rc (hps-bench: 0 = every check passed and no request failed)"
exit "$rc"
