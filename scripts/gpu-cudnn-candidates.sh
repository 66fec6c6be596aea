#!/usr/bin/env bash
# Which cuDNN algorithms a model's convolutions could take, and what a larger workspace bound
# (Note [Bounded conv workspace]) would buy: one train_step_bench run per scale of
# CANDIDATES_SCALES (default "1 2 4") with FRUGAL_CUDNN_LOG=1, printing each benchmarked
# configuration that matches CANDIDATES_MATCH (a grep pattern on the algorithm-cache key, e.g.
# "conv2d_backward_weight.*kernel=7x7") with its candidates' workspace and time, and the step's
# img/s (the first CANDIDATES_LINES lines, default 12). Configurations with one candidate show
# as "untimed (1 candidate)". Needs a built build-gpu.
#   CANDIDATES_MODEL=resnet18 CANDIDATES_PRECISION=bf16 scripts/gpu-cudnn-candidates.sh
#   CANDIDATES_PRECISION=f32 CANDIDATES_MATCH=backward_weight CANDIDATES_SCALES=1 \
#     CANDIDATES_LINES=200 scripts/gpu-cudnn-candidates.sh      # every f32 weight gradient
set -u -o pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD_DIR:-build-gpu}"
OUTDIR="${OUT:-/tmp}"
mkdir -p "$OUTDIR"
model="${CANDIDATES_MODEL:-resnet18}"
precision="${CANDIDATES_PRECISION:-bf16}"
match="${CANDIDATES_MATCH:-conv2d_backward_weight.*kernel=7x7}"
for scale in ${CANDIDATES_SCALES:-1 2 4}; do
  log="$OUTDIR/cudnn-candidates-$model-$precision-x$scale.txt"
  FRUGAL_CUDNN_LOG=1 FRUGAL_CONV_WORKSPACE_SCALE="$scale" "$BUILD/train_step_bench" \
    --device cuda --model "$model" --batch 128 --input 3x224x224 --classes 1000 \
    --precision "$precision" --warmup 5 --steps 20 --json > "$log.json" 2> "$log"
  echo "== $model $precision, workspace scale $scale:" \
    "$(grep -o '"img_per_s":[0-9.]*' "$log.json")"
  grep -E "$match" "$log" | tr ';' '\n' | head -"${CANDIDATES_LINES:-12}"
done
