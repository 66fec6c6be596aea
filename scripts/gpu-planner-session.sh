#!/usr/bin/env bash
# One device call for the step planner (issue 12) and the activation-memory tables (issue 11):
# build, every gpu test, the memory tables of scripts/gpu-memory-bench.sh (frugal with and without
# the planner, PyTorch eager and torch.compile at budget 0.5 beside it, the largest batches under
# 4 GiB, the zoo), and one Fashion-MNIST epoch through `frugal train` with the planner on.
#   OUT=/tmp/x scripts/gpu-planner-session.sh   (Fashion-MNIST's .gz files in .data/)
set -u -o pipefail
cd "$(dirname "$0")/.."
OUTDIR="${OUT:-/tmp}"
mkdir -p "$OUTDIR"
start=$(date +%s)
scripts/gpu-build.sh > "$OUTDIR/build.log" 2>&1 || { tail -40 "$OUTDIR/build.log"; exit 1; }
echo "== build $(( $(date +%s) - start )) s"
(cd build-gpu && ctest -L gpu --output-on-failure > "$OUTDIR/gpu-tests.log" 2>&1)
grep -E "tests passed|Failed|Failure|\*\*\*" "$OUTDIR/gpu-tests.log" | grep -v Skipped | head -20
grep "\[planner" "$OUTDIR/gpu-tests.log" | head -6
echo "== tests done at $(( $(date +%s) - start )) s"
MEM_PARTS="${MEM_PARTS:-frugal torch compile maxbatch zoo}" COMPILE_CONFIGS="${COMPILE_CONFIGS:-budget:0.5}" \
  ZOO_TORCH="${ZOO_TORCH:-0}" MEM_STEPS="${MEM_STEPS:-10}" \
  MAXB_LEAN="${MAXB_LEAN:-256 272 288 304 320}" MAXB_CKPT="${MAXB_CKPT:-480 512 544 576 608}" \
  MAXB_TORCH="${MAXB_TORCH:-96 112 128}" scripts/gpu-memory-bench.sh > "$OUTDIR/memory-run.log" 2>&1
cat "$OUTDIR/memory.md" "$OUTDIR/maxbatch.txt" 2>/dev/null
echo "== memory tables done at $(( $(date +%s) - start )) s"
if [ -d .data ] && [ "${SKIP_TRAIN:-0}" != 1 ]; then
  timeout 120 build-gpu/frugal train --model mobilenet_v2 --device cuda --data-dir .data --epochs 1 \
    --image-size 64 --batch 128 --workers 4 --seed 0 --precision f16 --lr 0.1 2>&1 | tr '\r' '\n' |
    grep -v '^epoch.*\[' | tail -12
fi
echo "== done at $(( $(date +%s) - start )) s"
