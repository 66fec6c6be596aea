#!/usr/bin/env bash
# bf16 (and f16) training on the CPU against f32: train_step_bench's MobileNetV2 step at 1x32x32,
# batch 64, alternating precisions so drift in the machine's speed hits all alike. Pinned to
# THREADS cores (default 2, the CI machine's count) with taskset when there are more.
# BUILD_DIR (default build) must hold a built train_step_bench; BASE_BUILD_DIR, when set, another
# (a build of an earlier commit, say), run in the same rounds, so both see the same drift. Usage:
#   BUILD_DIR=build-gpu THREADS=2 ROUNDS=3 scripts/cpu-half-bench.sh
#   BASE_BUILD_DIR=../base/build ROUNDS=10 scripts/cpu-half-bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
THREADS="${THREADS:-2}"
ROUNDS="${ROUNDS:-3}"
STEPS="${STEPS:-20}"
pin=()
if [ "$(nproc)" -gt "$THREADS" ] && command -v taskset > /dev/null; then
  pin=(taskset -c "0-$((THREADS - 1))")
fi
echo "== cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $THREADS threads ${pin[*]:+(pinned)}"
builds=("$BUILD_DIR")
if [ -n "${BASE_BUILD_DIR:-}" ]; then builds+=("$BASE_BUILD_DIR"); fi
for round in $(seq "$ROUNDS"); do
  for build in "${builds[@]}"; do
    for precision in f32 bf16 f16; do
      echo "-- round $round, $precision, $build"
      OMP_NUM_THREADS="$THREADS" "${pin[@]}" "$build/train_step_bench" --device cpu --batch 64 \
        --input 1x32x32 --classes 10 --warmup 3 --steps "$STEPS" --precision "$precision" |
        grep -E "median|img/s|peak allocated"
    done
  done
done
