#!/usr/bin/env bash
# One device call for issue 12's reserved-memory goal: build, the gpu tests named by TESTS (default
# the planner's and the captured step's), then train_step_bench --segments for each row of ROWS
# (model:precision[:extra,flags] at batch 128, 3x224x224), GRAPH224_ROWS (the same, replayed from a
# CUDA graph) and GRAPH_ROWS (32x32, batch 256, eager and replayed), tabulated by
# bench/segment_table.py: peak allocated and reserved, and where reserved goes, by pool, after the
# timed steps. BUDGET_CASES, when set, runs scripts/gpu-budget-bench.sh on them last.
#   OUT=/tmp/x scripts/gpu-reserved-session.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
OUTDIR="${OUT:-/tmp}"
mkdir -p "$OUTDIR"
export NCCL_NVLS_ENABLE=0
start=$(date +%s)
scripts/gpu-build.sh > "$OUTDIR/build.log" 2>&1 || { tail -40 "$OUTDIR/build.log"; exit 1; }
echo "== build $(( $(date +%s) - start )) s"
if [ "${TESTS:-StepPlannerGpu|CapturedStep|Graph}" != "none" ]; then
  (cd build-gpu && ctest -L gpu -R "${TESTS:-StepPlannerGpu|CapturedStep|Graph}" \
     --output-on-failure > "$OUTDIR/gpu-tests.log" 2>&1)
  grep -E "tests passed|Failed|Failure|\*\*\*" "$OUTDIR/gpu-tests.log" | grep -v Skipped | head -40
  echo "== tests done at $(( $(date +%s) - start )) s"
fi
: > "$OUTDIR/segments.jsonl"
for row in ${ROWS:-mobilenet_v2:f16 mobilenet_v2:f32 mobilenet_v2:f16:--checkpoint,blocks resnet18:f16 resnet18:f32 efficientnet_b0:f16 efficientnet_b0:f32 efficientnet_b0:f16:--checkpoint,blocks mobilenet_v1:f16 mobilenet_v1:f32}; do
  IFS=: read -r model precision extra <<< "$row"
  build-gpu/train_step_bench --device cuda --model "$model" --precision "$precision" --batch 128 \
    --input 3x224x224 --classes 1000 --warmup 3 --steps 5 --json --segments ${extra//,/ } \
    >> "$OUTDIR/segments.jsonl" 2>> "$OUTDIR/bench.err" || echo "== $row failed"
done
for row in ${GRAPH224_ROWS:-mobilenet_v2:f16 resnet18:f16}; do  # replayed at 224x224
  IFS=: read -r model precision extra <<< "$row"
  build-gpu/train_step_bench --device cuda --model "$model" --precision "$precision" --batch 128 \
    --input 3x224x224 --classes 1000 --warmup 3 --steps 5 --json --segments --graph ${extra//,/ } \
    >> "$OUTDIR/segments.jsonl" 2>> "$OUTDIR/bench.err" || echo "== $row --graph failed"
done
for row in ${GRAPH_ROWS:-mobilenet_v2:f16}; do
  IFS=: read -r model precision extra <<< "$row"
  for mode in "" "--graph"; do
    build-gpu/train_step_bench --device cuda --model "$model" --precision "$precision" --batch 256 \
      --input 3x32x32 --classes 10 --warmup 5 --steps 20 --json --segments $mode ${extra//,/ } \
      >> "$OUTDIR/segments.jsonl" 2>> "$OUTDIR/bench.err" || echo "== $row $mode failed"
  done
done
python3 bench/segment_table.py "$OUTDIR/segments.jsonl" | tee "$OUTDIR/segments.md"
python3 bench/segment_table.py --maps "$OUTDIR/segments.jsonl" > "$OUTDIR/segment-maps.txt"
tail -5 "$OUTDIR/bench.err"
if [ -n "${BUDGET_CASES:-}" ]; then  # the budget goal's cases (scripts/gpu-budget-bench.sh)
  echo "== budget cases at $(( $(date +%s) - start )) s"
  CASES="$BUDGET_CASES" BUILD_DIR=build-gpu scripts/gpu-budget-bench.sh
fi
echo "== done at $(( $(date +%s) - start )) s"
