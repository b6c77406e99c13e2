# shellcheck shell=bash disable=SC2154  # e2e_prog, workdir, coordinator, worker, bench, inproc: set by the caller
# e2e-lib.sh -- shell functions shared by bench/e2e.sh, bench/e2e-gpu.sh and
# bench/multigpu.sh.  Sourced, not run.  The caller sets:
#   e2e_prog     its name, the prefix of error messages ("e2e.sh")
#   workdir      the work directory (logs go there)
#   coordinator, worker   the executables
#   bench        hps-bench (only for e2e_bench_start)
#   inproc       bench-inproc (only for e2e_inproc_start)
# and calls e2e_cleanup from its EXIT trap.  Every wait has a deadline.

e2e_pids=()  # processes started by e2e_start_*, in start order
e2e_names=() # their names, for messages

# A free TCP port pair p, p+2 (http, metrics); a refused connect = free.
# Below the kernel's ephemeral range, so that no client socket takes it
# between this check and the worker's bind (the worker is retried anyway).
e2e_port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
e2e_pick_port() {
    local p lo
    lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
    [ "$lo" -gt 12000 ] || lo=32768
    for _ in $(seq 200); do
        p=$((10000 + RANDOM % (lo - 10010)))
        if e2e_port_free "$p" && e2e_port_free $((p + 2)); then echo "$p"; return 0; fi
    done
    echo "$e2e_prog: no free port" >&2
    return 1
}

# e2e_stop_pid PID NAME: SIGTERM, wait up to 10 s, then SIGKILL.
e2e_stop_pid() {
    local pid=$1
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
        sleep 0.1
    done
    echo "$e2e_prog: $2 (pid $pid) ignored SIGTERM; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

# e2e_stop_all: every process started here, the last started first.
e2e_stop_all() {
    local i
    for ((i = ${#e2e_pids[@]} - 1; i >= 0; i--)); do
        e2e_stop_pid "${e2e_pids[$i]}" "${e2e_names[$i]}"
    done
}

# e2e_cleanup SEGMENT KEEP: stop everything, remove the segment and (unless
# KEEP is 1) the work directory.
e2e_cleanup() {
    e2e_stop_all
    rm -f "/dev/shm/hps.$1" "/dev/shm/.hps.$1.lock"
    if [ "$2" = 1 ]; then echo "work directory kept: $workdir"; else rm -rf "$workdir"; fi
}

e2e_machine() {
    echo "machine: nproc $(nproc), CPU $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'),"\
         "memory $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
    echo "work directory: $workdir (filesystem $(df -h --output=source,size,avail "$workdir" | tail -1 | tr -s ' '))"
}

# e2e_wait_log LOG PATTERN PID SECONDS: until LOG has PATTERN (0), PID exits
# (1) or the deadline passes (2).
e2e_wait_log() {
    local end=$((SECONDS + $4))
    until grep -qs "$2" "$1"; do
        kill -0 "$3" 2>/dev/null || return 1
        [ "$SECONDS" -lt "$end" ] || return 2
        sleep 0.05
    done
}

# e2e_start_coordinator INI LOG: start it, wait (up to 1800 s) for its
# "ready:" line, print its log and the time it took; sets coord_pid.
e2e_start_coordinator() {
    local t_start t_ready rc=0
    echo "-- hps-coordinator -c $1"
    t_start=$(date +%s.%N)
    "$coordinator" -c "$1" >"$2" 2>&1 &
    coord_pid=$!
    e2e_pids+=("$coord_pid") e2e_names+=(hps-coordinator)
    e2e_wait_log "$2" "ready:" "$coord_pid" 1800 || rc=$?
    if [ "$rc" != 0 ]; then
        cat "$2"
        [ "$rc" = 1 ] && echo "$e2e_prog: hps-coordinator exited" >&2
        [ "$rc" = 2 ] && echo "$e2e_prog: hps-coordinator not ready after 1800 s" >&2
        exit 1
    fi
    t_ready=$(date +%s.%N)
    sed 's/^/   /' "$2"
    awk -v a="$t_start" -v b="$t_ready" 'BEGIN {printf "   start to \"ready\" line (measured by this script): %.2f s\n", b - a}'
}

# e2e_start_worker LOG ARGS...: start "$worker" ARGS --http-port $http_port
# --metrics-port $metrics_port and wait (up to 600 s) for its "serving" line;
# a port taken meanwhile (exit status 3) gets new ports (at most 3 tries).
# Sets worker_started_pid, and http_port / metrics_port to the ports used.
e2e_start_worker() {
    local log=$1 attempt wrc
    shift
    for attempt in 1 2 3; do
        echo "-- hps-worker $* --http-port $http_port --metrics-port $metrics_port"
        "$worker" "$@" --http-port "$http_port" --metrics-port "$metrics_port" >"$log" 2>&1 &
        worker_started_pid=$!
        e2e_pids+=("$worker_started_pid") e2e_names+=(hps-worker)
        wrc=0
        e2e_wait_log "$log" "serving" "$worker_started_pid" 600 || wrc=$?
        if [ "$wrc" = 0 ]; then return 0; fi
        if [ "$wrc" = 2 ]; then
            sed 's/^/   /' "$log"
            echo "$e2e_prog: hps-worker not serving after 600 s" >&2
            exit 1
        fi
        wrc=0; wait "$worker_started_pid" || wrc=$?
        sed 's/^/   /' "$log"
        if [ "$wrc" != 3 ] || [ "$attempt" = 3 ]; then
            echo "$e2e_prog: hps-worker exited with status $wrc" >&2; exit 1
        fi
        http_port=$(e2e_pick_port); metrics_port=$((http_port + 2))
    done
}

# e2e_metrics PORT: the Prometheus text of the worker's /metrics (empty on error).
e2e_metrics() {
    python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' \
        "http://127.0.0.1:$1/metrics" 2>/dev/null || true
}

# e2e_server_times PORT: "REQUESTS TOTAL QUEUE INPUT INFER OUTPUT" from the
# worker's /metrics, summed over its models (Triton's nv_inference_*
# counters, us).
e2e_server_times() {
    e2e_metrics "$1" | awk '/^nv_inference_request_success\{/ {v[1] += $2}
        /^nv_inference_request_duration_us\{/ {v[2] += $2}
        /^nv_inference_queue_duration_us\{/ {v[3] += $2}
        /^nv_inference_compute_input_duration_us\{/ {v[4] += $2}
        /^nv_inference_compute_infer_duration_us\{/ {v[5] += $2}
        /^nv_inference_compute_output_duration_us\{/ {v[6] += $2}
        END {for (i = 1; i <= 6; i++) printf "%.0f%s", v[i], (i < 6 ? " " : "\n")}'
}

# e2e_per_request "BEFORE" "AFTER": "TOTAL QUEUE INPUT INFER OUTPUT", the mean
# server time per request in us between two e2e_server_times ("- - - - -"
# without requests).
e2e_per_request() {
    awk -v a="$1" -v b="$2" 'BEGIN {split(a, x, " "); split(b, y, " "); n = y[1] - x[1]
        for (i = 2; i <= 6; i++) {
            v = n > 0 ? sprintf("%.0f", (y[i] - x[i]) / n) : "-"
            printf "%s%s", v, (i < 6 ? " " : "\n")
        }}'
}

# ---- GPU runs and hps-bench (bench/multigpu.sh, e2e-gpu.sh) ------------------

# e2e_gpu_count: the CUDA devices a worker may use: the GPUs `nvidia-smi -L`
# lists (MIG instances not counted), at most as many as CUDA_VISIBLE_DEVICES
# names when it is set; 0 without nvidia-smi.
e2e_gpu_count() {
    local n=0 v
    if command -v nvidia-smi >/dev/null 2>&1; then
        n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
    fi
    if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
        v=$(awk -F, '{c = 0; for (i = 1; i <= NF; i++) if ($i ~ /[^ ]/) c++; print c}' \
            <<<"$CUDA_VISIBLE_DEVICES")
        [ "${v:-0}" -lt "${n:-0}" ] && n=${v:-0}
    fi
    echo "${n:-0}"
}

# e2e_wait_ready PORT SECONDS: until the worker's /v2/health/ready answers 200
# (a GPU worker is ready once its caches are preloaded); 1 after SECONDS.
e2e_wait_ready() {
    python3 - "http://127.0.0.1:$1/v2/health/ready" "$2" <<'PYEOF'
import sys, time, urllib.request
end = time.time() + float(sys.argv[2])
while True:
    try:
        if urllib.request.urlopen(sys.argv[1], timeout=5).status == 200:
            sys.exit(0)
    except Exception:
        pass
    if time.time() > end:
        sys.exit(1)
    time.sleep(0.1)
PYEOF
}

# e2e_cache_counts PORT: "HIT QUERY TABLES SHARED" summed over the GPU caches
# in the worker's /metrics (TABLES: caches listed; SHARED: those with
# nv_hps_embedding_cache_processes == 2); "0 0 0 0" without GPU caches.
e2e_cache_counts() {
    e2e_metrics "$1" | awk '/^nv_hps_embedding_cache_hit_keys\{/ {h += $2}
        /^nv_hps_embedding_cache_query_keys\{/ {q += $2; n++}
        /^nv_hps_embedding_cache_processes\{/ && $2 == 2 {s++}
        END {printf "%.0f %.0f %d %d\n", h, q, n, s}'
}

# e2e_hit_rate "H0 Q0 .." "H1 Q1 ..": the hit rate between two e2e_cache_counts
# (or sums of them), 4 decimals, or "-" when nothing was queried.
e2e_hit_rate() {
    awk -v a="$1" -v b="$2" 'BEGIN {split(a, x, " "); split(b, y, " "); q = y[2] - x[2]
        if (q > 0) printf "%.4f", (y[1] - x[1]) / q; else printf "-"}'
}

# e2e_bench_start LOG PORT PID INI VERIFY CONC DURATION WARMUP FILE: one
# timed run of "$bench" (--no-redis, --reps 1) against the worker on PORT
# (pid PID) in the background, output to LOG; sets e2e_bench_pid.
e2e_bench_start() {
    "$bench" --url "http://127.0.0.1:$2" --config "$4" --no-redis --wait-ready 120 \
        --server-pid "$3" --concurrency "$6" --duration "$7" --warmup "$8" --reps 1 \
        --verify "$5" "$9" >"$1" 2>&1 &
    e2e_bench_pid=$!
    e2e_pids+=("$e2e_bench_pid") e2e_names+=(hps-bench) # stopped on exit too
}

# e2e_bench_wait PID LOG SECONDS: wait for that hps-bench (stopped after
# SECONDS), print its verify/run lines; 1 if it failed or was stopped.
e2e_bench_wait() {
    local brc=0
    e2e_wait_pid "$1" "$3" hps-bench || brc=$?
    grep -E '^  (verify|run) |first (error|mismatch)|request failed|error:' "$2" | sed 's/^  /   /' || true
    if [ "$brc" != 0 ]; then
        echo "   hps-bench exit status $brc (log: $2)"
        return 1
    fi
}

# e2e_bench_row LOG: "REQ/S MKEYS/S P50 P99 ERRORS" from hps-bench's results
# table (its last row), "0 0 0 0 -" without one.
e2e_bench_row() {
    awk '$4 == "|" && $1 ~ /^[0-9]+$/ && NF >= 12 {r = $5 " " $6 " " $7 " " $9 " " $11}
         END {print (r == "" ? "0 0 0 0 -" : r)}' "$1"
}

# e2e_ratio A B: A / B with 2 decimals and "x", "-" when B is 0 or not a number.
e2e_ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b + 0 > 0) printf "%.2fx", a / b; else printf "-"}'; }

# ---- bench-inproc: lookups through libhps in the calling process -----------

# e2e_inproc_start LOG INI MODEL DEVICE DURATION WARMUP FILE: one run of
# "$inproc" (bench-inproc --no-hot: the request file's keys only, one call at
# a time, keys and output in DEVICE's memory) in the background, output to
# LOG; sets e2e_inproc_pid.
e2e_inproc_start() {
    "$inproc" --config "$2" --model "$3" --device "$4" --duration "$5" --warmup "$6" \
        --no-hot "$7" >"$1" 2>&1 &
    e2e_inproc_pid=$!
    e2e_pids+=("$e2e_inproc_pid") e2e_names+=(bench-inproc) # stopped on exit too
}

# e2e_wait_pid PID SECONDS NAME: wait for a process started here, stopping
# it after SECONDS; returns its exit status, 124 if it had to be stopped.
e2e_wait_pid() {
    local wrc=0 end=$((SECONDS + $2))
    while kill -0 "$1" 2>/dev/null && [ "$SECONDS" -lt "$end" ]; do sleep 0.05; done
    if kill -0 "$1" 2>/dev/null; then
        echo "$e2e_prog: $3 (pid $1) still running after $2 s; stopping it" >&2
        e2e_stop_pid "$1" "$3"
        return 124
    fi
    wait "$1" || wrc=$?
    return "$wrc"
}

# e2e_result_field LOG MODE FIELD: the value of FIELD in LOG's first
# "RESULT mode=MODE ..." line (bench-inproc, bench-cudashm), "-" without one.
e2e_result_field() {
    awk -v m="$2" -v f="$3" '$1 == "RESULT" && $2 == "mode=" m {
            for (i = 3; i <= NF; i++) {
                n = index($i, "=")
                if (n > 1 && substr($i, 1, n - 1) == f) { v = substr($i, n + 1); found = 1; exit }
            }
        }
        END {print (found ? v : "-")}' "$1"
}
