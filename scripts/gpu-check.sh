#!/usr/bin/env bash
# One lease, one command: build for the H200 (sm_90), run the GPU parity tests, then the
# benchmarks when they exist. Everything is logged to "${OUT:-/tmp}/gpu-check.log".
set -u -o pipefail
cd "$(dirname "$0")/.."
LOG="${OUT:-/tmp}/gpu-check.log"
BUILD="${BUILD_DIR:-build-gpu}"  # gpu-build.sh's
mkdir -p "$(dirname "$LOG")"
: > "$LOG"
status=0
# No GPU, no check: a CPU-only build would leave out tests/gpu and every test would skip itself.
if ! nvidia-smi -L > /dev/null 2>&1; then
  echo "== NO GPU (nvidia-smi -L failed): nothing to check" | tee -a "$LOG"
  exit 1
fi

{
  echo "== gpu-check $(date -u +%FT%TZ) on $(hostname)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true
  nvcc --version | tail -1
} 2>&1 | tee -a "$LOG"

echo "== build" | tee -a "$LOG"
start=$(date +%s)
if ! scripts/gpu-build.sh 2>&1 | tee -a "$LOG"; then
  echo "== BUILD FAILED" | tee -a "$LOG"
  exit 1
fi
echo "== build took $(( $(date +%s) - start )) s" | tee -a "$LOG"

echo "== gpu tests" | tee -a "$LOG"
# --no-tests=error: a build without the CUDA backend has no gpu tests; --timeout: a test that
# hangs (a capture that never ends) costs 5 minutes, not the whole call; FRUGAL_REQUIRE_GPU: a
# test that finds no device fails instead of skipping (tests/gpu/gpu_test_util.h).
if ! (cd "$BUILD" && FRUGAL_REQUIRE_GPU=1 ctest -L gpu --output-on-failure --no-tests=error \
  --timeout 300) 2>&1 | tee -a "$LOG"; then
  echo "== GPU TESTS FAILED" | tee -a "$LOG"
  status=1
fi

# ---- benchmarks (added later) -------------------------------------------------------------
# Each benchmark script is run only when it exists and is executable, so this script works
# before they are written. Append new ones here. GPU_CHECK_BENCHES (a list, empty for none)
# replaces them: a call that measures something else builds and tests through this script alone.
for bench in ${GPU_CHECK_BENCHES-scripts/gpu-bench.sh scripts/gpu-loader-bench.sh}; do
  if [ -x "$bench" ]; then
    echo "== bench $bench" | tee -a "$LOG"
    "$bench" 2>&1 | tee -a "$LOG" || { echo "== BENCH FAILED: $bench" | tee -a "$LOG"; status=1; }
  fi
done
# -------------------------------------------------------------------------------------------

echo "== gpu-check done, status $status (log: $LOG)" | tee -a "$LOG"
exit $status
