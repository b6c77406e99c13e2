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
  # the three kernel test programs under each tool (the worker's GPU scenarios
  # ran clean under memcheck too, 2026-11-28: HPS_WORKER set to a wrapper that
  # runs hps-worker under compute-sanitizer; kernels/NOTES.md)
  for t in test-gcache test-gcache-tables test-gcache-dtype; do
    q=; [ $t = test-gcache ] && q=--quick
    for tool in memcheck racecheck synccheck; do
      lc=; [ $tool = memcheck ] && lc="--leak-check full"
      timeout 200 compute-sanitizer --tool $tool $lc --error-exitcode 9 build-gpu/tests/gpu/$t $q \
        > "$out/san.tmp" 2>&1
      echo "$t $tool rc=$? $(grep -E 'SUMMARY' "$out/san.tmp" | tail -1)"
      cat "$out/san.tmp" >> "$out/sanitize.log"; rm -f "$out/san.tmp"
    done
  done
fi
if [ $bench = 1 ]; then
  build-gpu/bench/bench-gpu-cache 2>&1 | tee "$out/bench.log"
fi
