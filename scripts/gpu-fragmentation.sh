#!/usr/bin/env bash
# Where reserved memory drifts above allocated (issue 12): build, the gpu tests, then MobileNetV2
# f16 at 224x224 with and without checkpointing, uncapped (peak allocated vs reserved) and under
# the 4 GiB cap around the largest batch (the OOM message names allocated and reserved at failure).
#   OUT=/tmp/x scripts/gpu-fragmentation.sh   (FRAG_SKIP_TESTS=1 skips build checks' tests)
set -u -o pipefail
cd "$(dirname "$0")/.."
OUTDIR="${OUT:-/tmp}"
mkdir -p "$OUTDIR"
BIN=build-gpu/train_step_bench
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null &&
 cmake --build build-gpu -j16 > "$OUTDIR/build.log" 2>&1) || { tail -40 "$OUTDIR/build.log"; exit 1; }
if [ "${FRAG_SKIP_TESTS:-0}" != 1 ]; then
  (cd build-gpu && ctest -L gpu --output-on-failure > "$OUTDIR/gpu-tests.log" 2>&1)
  grep -E "tests passed|Failed|\*\*\*" "$OUTDIR/gpu-tests.log" | grep -v Skipped | head -20
fi
run() {  # run LABEL args...
  local label="$1"; shift
  echo "== $label: $*"
  "$BIN" --device cuda --model mobilenet_v2 --input 3x224x224 --classes 1000 --precision f16 \
    --warmup "${FRAG_WARMUP:-3}" --steps "${FRAG_STEPS:-3}" "$@" 2>&1 | grep -E "peak|OutOfMemory|out of memory|error|img/s" | head -8
}
run lean-128 --batch 128 ${FRAG_PLANNER:-}
run ckpt-128 --batch 128 --checkpoint blocks ${FRAG_PLANNER:-}
run ckpt-400 --batch 400 --checkpoint blocks ${FRAG_PLANNER:-}
run ckpt-480-uncapped --batch 480 --checkpoint blocks ${FRAG_PLANNER:-}
run ckpt-480-cap --batch 480 --checkpoint blocks --memory-cap-mib 4096 ${FRAG_PLANNER:-}
run lean-256 --batch 256 ${FRAG_PLANNER:-}
run lean-288-cap --batch 288 --memory-cap-mib 4096 ${FRAG_PLANNER:-}
