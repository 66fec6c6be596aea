#!/usr/bin/env bash
# One device call for the memory tools (issue 13) and the tensor ops (issue 15): build, every gpu
# test, the printouts of the new ones, then one MobileNetV2 f16 epoch on Fashion-MNIST with the
# memory monitor (CSV and SVGs into $OUT), the adaptive release scheduler, and `frugal smi`
# sampled while it trains.
#   OUT=/tmp/x scripts/gpu-memtools-session.sh   (Fashion-MNIST's .gz files in .data/)
set -u -o pipefail
cd "$(dirname "$0")/.."
OUTDIR="${OUT:-/tmp}"
mkdir -p "$OUTDIR"
start=$(date +%s)
scripts/gpu-build.sh > "$OUTDIR/build.log" 2>&1 || { grep -E "error|FAILED" "$OUTDIR/build.log" | head -30; exit 1; }
echo "== build $(( $(date +%s) - start )) s"
if [ "${CPU_TESTS:-0}" = 1 ]; then  # the CPU suite too, on the device's 16 cores
  (cd build-gpu && ctest -L cpu -j16 --output-on-failure > "$OUTDIR/cpu-tests.log" 2>&1)
  grep -E "tests passed|\(Failed\)|\(Timeout\)" "$OUTDIR/cpu-tests.log" | head -20
fi
(cd build-gpu && ctest -L gpu --output-on-failure > "$OUTDIR/gpu-tests.log" 2>&1)
grep -E "tests passed|\(Failed\)|Failure" "$OUTDIR/gpu-tests.log" | head -20
build-gpu/test_gpu --gtest_filter="${PRINT_TESTS:-OomRecoveryGpu*:NvmlGpu*:GpuTensorOps*}" > "$OUTDIR/printouts.log" 2>&1
grep -E "^\[(oom|nvml)|OK|FAILED|Failure" "$OUTDIR/printouts.log" | head -40
echo "== tests done at $(( $(date +%s) - start )) s"
if [ -d .data ] && [ "${SKIP_TRAIN:-0}" != 1 ]; then
  FRUGAL_STATS_DIR="$OUTDIR/stats" timeout 300 build-gpu/frugal train --model mobilenet_v2 --device cuda \
    --data-dir .data --epochs "${EPOCHS:-3}" --image-size "${IMAGE:-64}" --batch 128 --workers 4 --seed 0 \
    --precision f16 --lr 0.1 --release adaptive --memory-log "$OUTDIR/monitor.csv" \
    --memory-svg "$OUTDIR/monitor.svg" > "$OUTDIR/train.log" 2>&1 &
  train_pid=$!
  sleep "${SMI_AFTER:-8}"
  FRUGAL_STATS_DIR="$OUTDIR/stats" build-gpu/frugal smi -l 5 --count 2 > "$OUTDIR/smi.txt" 2>&1
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv >> "$OUTDIR/smi.txt" 2>&1
  wait $train_pid
  tr '\r' '\n' < "$OUTDIR/train.log" | grep -v '^epoch.*\[' | tail -30
  cat "$OUTDIR/smi.txt"
  # Ten steps into a Chrome trace (ui.perfetto.dev): every allocation with its module path and op.
  build-gpu/frugal train --model mobilenet_v2 --device cuda --data-dir .data --epochs 1 --limit 1280 \
    --test-limit 256 --image-size "${IMAGE:-64}" --batch 128 --workers 2 --precision f16 \
    --memory-trace "$OUTDIR/trace.json" 2>&1 | grep -E "memory trace|error"
fi
echo "== done at $(( $(date +%s) - start )) s"
