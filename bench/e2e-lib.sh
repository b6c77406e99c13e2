# shellcheck shell=bash disable=SC2154  # e2e_prog, workdir, coordinator, worker: set by the caller
# e2e-lib.sh -- shell functions shared by bench/e2e.sh and bench/e2e-gpu.sh.
# Sourced, not run.  The caller sets:
#   e2e_prog     its name, the prefix of error messages ("e2e.sh")
#   workdir      the work directory (logs go there)
#   coordinator, worker   the executables
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
