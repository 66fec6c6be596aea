#!/usr/bin/env bash
# Reserved against allocated, with and without the step planner (issue 12): build, the gpu tests
# (FRAG_TESTS: a ctest -R pattern, default all gpu tests), then MobileNetV2 f16 at 224x224 with
# and without checkpointing, uncapped (peak allocated vs reserved) and under the 4 GiB cap at the
# batches issue 11 asks for (an OOM names allocated and reserved at the failure).
#   OUT=/tmp/x scripts/gpu-fragmentation.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
OUTDIR="${OUT:-/tmp}"
mkdir -p "$OUTDIR"
BIN=build-gpu/train_step_bench
scripts/gpu-build.sh > "$OUTDIR/build.log" 2>&1 || { tail -40 "$OUTDIR/build.log"; exit 1; }
(cd build-gpu && ctest -L gpu -R "${FRAG_TESTS:-.}" --output-on-failure > "$OUTDIR/gpu-tests.log" 2>&1)
grep -E "tests passed|Failed|Failure|Expected|actual|Which is|step planner|\*\*\*" "$OUTDIR/gpu-tests.log" | grep -v Skipped | head -40
run() {  # run LABEL args...
  local label="$1"; shift
  echo "== $label: $*"
  "$BIN" --device cuda --model mobilenet_v2 --input 3x224x224 --classes 1000 --precision f16 \
    --warmup "${FRAG_WARMUP:-3}" --steps "${FRAG_STEPS:-5}" "$@" 2>&1 |
    grep -E "peak|OutOfMemory|out of memory|error|img/s|planner" | grep -v RSS | head -8
}
for planner in off on; do
  run lean-128 --batch 128 --planner $planner
  run ckpt-128 --batch 128 --checkpoint blocks --planner $planner
done
# The largest batch under the 4 GiB cap with the planner (the caching allocator alone: 256 and 400,
# bench/RESULTS.md), found by trying increasing batches as scripts/gpu-memory-bench.sh does.
largest() {  # largest "BATCHES" args...
  local batches="$1" best=0; shift
  for b in $batches; do
    if "$BIN" --device cuda --model mobilenet_v2 --input 3x224x224 --classes 1000 --precision f16 \
         --warmup 2 --steps 2 --batch "$b" --memory-cap-mib 4096 "$@" > "$OUTDIR/largest-$b.log" 2>&1; then
      best=$b
    else
      grep -m1 "out of memory" "$OUTDIR/largest-$b.log" | cut -c1-160
      break
    fi
  done
  echo "maxbatch mobilenet_v2 f16 $* under 4096 MiB: $best"
}
largest "${FRAG_CKPT_BATCHES:-480 512 544 576 608}" --checkpoint blocks --planner on
largest "${FRAG_LEAN_BATCHES:-272 288 304}" --planner on
