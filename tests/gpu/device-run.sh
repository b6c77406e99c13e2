#!/usr/bin/env bash
# One device call: build the GPU targets, run suite 'gpu', the sanitizers and
# the benchmark.  Logs under $OUT.  Usage (project root, on the GPU host):
#   source .gpudeps/activate.sh; tests/gpu/device-run.sh [--no-sanitize] [--no-bench]
set -u
export PATH=$PATH:/usr/local/cuda/bin
out=${OUT:-/tmp/gcache-out}; mkdir -p "$out"
san=1; bench=1
for a in "$@"; do case $a in --no-sanitize) san=0;; --no-bench) bench=0;; esac; done
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv | tee "$out/gpu.txt"
[ -d build-gpu ] || meson setup build-gpu -Dcuda=enabled -Dcuda-archs=90 > "$out/setup.log" 2>&1 || { tail -30 "$out/setup.log"; exit 1; }
ninja -C build-gpu tests/gpu/test-gcache bench/bench-gpu-cache > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
meson test -C build-gpu --suite gpu --no-rebuild --print-errorlogs > "$out/test.log" 2>&1; echo "meson test rc=$?" | tee -a "$out/test.log"
grep -E "^ok|PASS|FAIL|Ok:|Fail:|Skipped:" "$out/test.log" build-gpu/meson-logs/testlog.txt | head -30
if [ $san = 1 ] && command -v compute-sanitizer >/dev/null; then
  timeout 200 compute-sanitizer --tool memcheck --leak-check full build-gpu/tests/gpu/test-gcache --quick > "$out/memcheck.log" 2>&1; echo "memcheck rc=$?"; tail -3 "$out/memcheck.log"
  timeout 150 compute-sanitizer --tool racecheck build-gpu/tests/gpu/test-gcache --quick > "$out/racecheck.log" 2>&1; echo "racecheck rc=$?"; tail -3 "$out/racecheck.log"
fi
if [ $bench = 1 ]; then
  build-gpu/bench/bench-gpu-cache 2>&1 | tee "$out/bench.log"
fi
