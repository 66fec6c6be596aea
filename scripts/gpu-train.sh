#!/usr/bin/env bash
# Fashion-MNIST accuracy on the GPU: MobileNetV2 for 10 epochs in f32, f16 and bf16 from the same
# seed, run side by side (one process each), logs in "${OUT:-/tmp}/train-<precision>.log".
# Needs build-gpu/frugal (scripts/gpu-check.sh builds it) and the four .gz files in DATA_DIR.
# TRAIN_BATCH (default 128) is the batch of each rank and TRAIN_FLAGS adds flags to every run:
# TRAIN_BATCH=64 TRAIN_FLAGS="--gpus 2" is the same recipe, global batch 128, on two GPUs.
#   DATA_DIR=.data EPOCHS=10 IMAGE_SIZE=64 scripts/gpu-train.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
OUTDIR="${OUT:-/tmp}"
mkdir -p "$OUTDIR"
DATA_DIR="${DATA_DIR:-.data}"
EPOCHS="${EPOCHS:-10}"
IMAGE_SIZE="${IMAGE_SIZE:-64}"
LIMIT_S="${TRAIN_LIMIT_S:-330}"
# shellcheck disable=SC2086  # TRAIN_FLAGS are words
for p in ${TRAIN_PRECISIONS:-f32 f16 bf16}; do
  timeout "$LIMIT_S" build-gpu/frugal train --model mobilenet_v2 --device cuda --data-dir "$DATA_DIR" \
    --epochs "$EPOCHS" --image-size "$IMAGE_SIZE" --schedule cosine --lr 0.1 --weight-decay 5e-4 \
    --warmup-epochs 1 --batch "${TRAIN_BATCH:-128}" \
    --workers 4 --seed 0 --precision "$p" ${TRAIN_FLAGS:-} 2>&1 | tr '\r' '\n' | grep -v '^epoch.*\[' \
    > "$OUTDIR/train-$p.log" &
done
wait
for p in ${TRAIN_PRECISIONS:-f32 f16 bf16}; do
  echo "== $p"
  cat "$OUTDIR/train-$p.log"
done
