#!/usr/bin/env bash
# tests/fuzz/run.sh -- build the libFuzzer targets (clang, ASan + UBSan) and
# run each of them for a time or a number of executions.
#
#   tests/fuzz/run.sh [--seconds N | --runs N] [--jobs J] [--build DIR] [TARGET...]
#
# TARGET: kserve conf kafka modelfile shmdb (default: all).  --seconds N
# (default 60) or --runs N (e.g. 10000000) per target, one after the other,
# each with -timeout=5 -rss_limit_mb=2048 -detect_leaks=1.  --jobs J
# (default 1) runs J libFuzzer processes per target at once (seeds 1..J,
# one working corpus): --runs N is then split between them (N / J each),
# --seconds N is each one's time.  The build
# directory (default build-fuzz, or $FUZZ_BUILD) is configured on first use:
#   CC=clang meson setup build-fuzz -Dfuzz=true -Dcuda=disabled
#     -Db_sanitize=address,undefined -Db_lundef=false -Dc_args=-fsanitize=fuzzer-no-link
# Each target starts from its seeds (tests/fuzz/corpus/TARGET), its
# regression inputs (tests/fuzz/regress/TARGET) and the working corpus kept
# in DIR/tests/fuzz/work/TARGET, with tests/fuzz/TARGET.dict if there is one.
#
# Prints per target: executions, exec/s and ok, or crash / leak / timeout /
# oom with the input libFuzzer wrote; that input is copied to
# tests/fuzz/regress/TARGET/, where the unit suite replays it (test
# fuzz-TARGET).  Slow inputs (over 10 s, libFuzzer's slow-unit-*) are
# copied there too.  Logs: DIR/tests/fuzz/TARGET.log.
#
# Exit status: 0 all ok; 1 a target failed (or the build did); 77 when
# clang or its libFuzzer runtime (Debian: clang, libclang-rt-14-dev) is
# missing: nothing was run.
set -uo pipefail
cd "$(dirname "$0")/../.."

all=(kserve conf kafka modelfile shmdb)
seconds=60
runs=
build=${FUZZ_BUILD:-build-fuzz}
jobs=1
targets=()
while [ $# -gt 0 ]; do
    case $1 in
    --seconds) seconds=$2; runs=; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
    esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
for t in "${targets[@]}"; do
    [[ " ${all[*]} " == *" $t "* ]] || { echo "run.sh: unknown target '$t' (${all[*]})" >&2; exit 2; }
done

# The toolchain: clang that links -fsanitize=fuzzer.
cc=${FUZZ_CC:-clang}
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' \
    >"$probe/p.c"
if ! command -v "$cc" >/dev/null || ! "$cc" -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" \
        2>"$probe/err"; then
    echo "SKIP: no $cc with libFuzzer (Debian 12: apt-get install clang libclang-rt-14-dev)"
    cat "$probe/err" 2>/dev/null | head -3
    exit 77
fi

if [ ! -f "$build/build.ninja" ]; then
    echo "== configuring $build"
    CC=$cc meson setup "$build" -Dfuzz=true -Dcuda=disabled -Db_sanitize=address,undefined \
        -Db_lundef=false -Dc_args=-fsanitize=fuzzer-no-link >"$probe/setup.log" 2>&1 ||
        { cat "$probe/setup.log"; echo "run.sh: meson setup $build failed"; exit 1; }
fi
echo "== building ${targets[*]} in $build"
ninja -C "$build" -j"${FUZZ_JOBS:-2}" "${targets[@]/#/tests/fuzz/fuzz-}" >"$probe/build.log" 2>&1 ||
    { tail -50 "$probe/build.log"; echo "run.sh: build failed"; exit 1; }

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:allocator_may_return_null=1:symbolize=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:silence_unsigned_overflow=1
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --jobs takes a positive count" >&2; exit 2; }
limit=(-max_total_time="$seconds")
what="$seconds s"
[ -n "$runs" ] && limit=(-runs=$(( (runs + jobs - 1) / jobs ))) && what="$runs runs"
[ "$jobs" -gt 1 ] && what="$what, $jobs processes"

results=()
failed=0
for t in "${targets[@]}"; do
    src=tests/fuzz
    work=$build/tests/fuzz/work/$t
    art=$build/tests/fuzz/artifacts/$t
    log=$build/tests/fuzz/$t.log
    mkdir -p "$work" "$art" "$src/regress/$t"
    rm -f "$art"/*
    dict=()
    [ -f "$src/$t.dict" ] && dict=(-dict="$src/$t.dict")
    echo "== fuzz-$t: $what"
    start=$(date +%s)
    pids=()
    for j in $(seq 1 "$jobs"); do
        jlog=$log
        [ "$jobs" -gt 1 ] && jlog=$log.$j
        seed=()
        [ "$jobs" -gt 1 ] && seed=(-seed="$j")
        "$build/tests/fuzz/fuzz-$t" "${limit[@]}" "${seed[@]}" -timeout=5 -rss_limit_mb=2048 -detect_leaks=1 \
            -report_slow_units=2 -print_final_stats=1 -artifact_prefix="$art/" "${dict[@]}" \
            "$work" "$src/corpus/$t" "$src/regress/$t" >"$jlog" 2>&1 &
        pids+=($!)
    done
    rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=$?; done
    [ "$jobs" -gt 1 ] && cat "$log".* >"$log"
    secs=$(($(date +%s) - start))
    execs=0
    for j in $(seq 1 "$jobs"); do
        jlog=$log
        [ "$jobs" -gt 1 ] && jlog=$log.$j
        e=$(sed -n 's/^stat::number_of_executed_units: *//p' "$jlog" | tail -1)
        [ -n "$e" ] || e=$(grep -o '^#[0-9]*' "$jlog" | tail -1 | tr -d '#')
        execs=$((execs + ${e:-0}))
    done
    rate=$(( execs / (secs > 0 ? secs : 1) / jobs ))
    result=ok
    for a in "$art"/*; do
        [ -e "$a" ] || continue
        cp "$a" "$src/regress/$t/"
        kind=${a##*/}
        kind=${kind%%-*}
        case $kind in
        slow) result="$result (slow input: $src/regress/$t/${a##*/})" ;;
        *) result="$kind: $src/regress/$t/${a##*/}" ;;
        esac
    done
    if [ $rc -ne 0 ]; then
        [[ $result == ok* ]] && result="failed (exit $rc, no input written; see $log)"
        failed=1
        grep -m1 -E 'ERROR: |runtime error|SUMMARY' "$log" | sed 's/^/    /'
    fi
    results+=("$(printf '%-10s %12s execs %9s exec/s/process %5ss  %s' "$t" "${execs:-?}" "${rate:-?}" "$secs" "$result")")
done

echo "== results ($what per target)"
printf '%s\n' "${results[@]}"
exit $failed
