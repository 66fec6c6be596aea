#!/usr/bin/env bash
# One device call for the bounded cuDNN workspace (Note [Bounded conv workspace]): build, the gpu
# tests that check it (conv workspace per call, the dry run against the device, the prediction
# across the zoo), the memory tables of scripts/gpu-memory-bench.sh (MEM_PARTS, default "frugal
# zoo"), then, with BASE_TAR set, the same rows from an earlier commit beside this tree's
# (scripts/gpu-compare-base.sh).
#   git archive -o .devicelib/base.tar <commit>; OUT=/tmp/x BASE_TAR=.devicelib/base.tar \
#     scripts/gpu-workspace-session.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
OUTDIR="${OUT:-/tmp}"
mkdir -p "$OUTDIR"
start=$(date +%s)
scripts/gpu-build.sh > "$OUTDIR/build.log" 2>&1 || { tail -40 "$OUTDIR/build.log"; exit 1; }
echo "== build $(( $(date +%s) - start )) s"
(cd build-gpu && ctest -L gpu -R "${TESTS:-GpuConv|StepPlannerGpu|MemoryEstimateGpu|MemoryBudgetGpu}" \
   --output-on-failure > "$OUTDIR/gpu-tests.log" 2>&1)
grep -E "tests passed|Failed|Failure|\*\*\*|\[planner|\[estimate" "$OUTDIR/gpu-tests.log" | grep -v Skipped | head -40
echo "== tests done at $(( $(date +%s) - start )) s"
MEM_PARTS="${MEM_PARTS:-frugal zoo}" ZOO_TORCH=0 MEM_STEPS="${MEM_STEPS:-10}" \
  scripts/gpu-memory-bench.sh > "$OUTDIR/memory-run.log" 2>&1
cat "$OUTDIR/memory.md"
echo "== memory tables done at $(( $(date +%s) - start )) s"
if [ -n "${BASE_TAR:-}" ]; then
  ROWS="${ROWS:-resnet18:f16 resnet18:f32 resnet18:f16:--checkpoint,blocks}" scripts/gpu-compare-base.sh
fi
echo "== done at $(( $(date +%s) - start )) s"
