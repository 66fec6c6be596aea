#!/usr/bin/env bash
# Issue 17's loss-curve check: STEPS steps of MobileNetV2 on Fashion-MNIST (no augmentation, so
# the global batches are the same samples) in one process with the global batch, in one process
# accumulating NPROC micro-batches (what local BatchNorm on NPROC ranks computes), and as NPROC
# ranks of BATCH / NPROC each, with local and with synchronised batch norm; then the curves side
# by side (bench/loss_curve_table.py). Dropout draws other masks in each, so the curves agree
# in trend, not bit for bit.
#
#   scripts/dist-loss-curve.sh                      # CPU ranks (sockets)
#   DEVICE=cuda PRECISION=f16 scripts/dist-loss-curve.sh   # one GPU each (NCCL)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DEVICE=${DEVICE:-cpu}
NPROC=${NPROC:-2}
BATCH=${BATCH:-64}  # the global batch
STEPS=${STEPS:-200}
PRECISION=${PRECISION:-f32}
LR=${LR:-0.02}
OUT=${OUT:-$BUILD/dist-loss-curve}
mkdir -p "$OUT"
frugal="$BUILD/frugal"
common=(train --device "$DEVICE" --no-augment --epochs 1 --limit $((BATCH * STEPS))
        --test-limit 2000 --precision "$PRECISION" --workers 1 --lr "$LR")
echo "== one process, batch $BATCH"
"$frugal" "${common[@]}" --batch "$BATCH" --loss-log "$OUT/one.csv" | grep -E "epoch 1/1:|loss log"
echo "== one process, batch $BATCH as $NPROC micro-batches"
"$frugal" "${common[@]}" --batch "$BATCH" --micro-batches "$NPROC" --loss-log "$OUT/micro.csv" |
  grep -E "epoch 1/1:|loss log"
echo "== $NPROC ranks, batch $((BATCH / NPROC)) each"
"$frugal" launch --nproc "$NPROC" -- "$frugal" "${common[@]}" --batch $((BATCH / NPROC)) \
  --loss-log "$OUT/ranks.csv" | grep -E "epoch 1/1:|loss log|replicas"
echo "== $NPROC ranks, batch $((BATCH / NPROC)) each, --sync-bn"
"$frugal" launch --nproc "$NPROC" -- "$frugal" "${common[@]}" --batch $((BATCH / NPROC)) \
  --sync-bn --loss-log "$OUT/ranks-sync-bn.csv" | grep -E "epoch 1/1:|loss log|replicas"
python3 bench/loss_curve_table.py "one process, batch $BATCH=$OUT/one.csv" \
  "one process, $NPROC micro-batches=$OUT/micro.csv" \
  "$NPROC ranks x $((BATCH / NPROC))=$OUT/ranks.csv" \
  "$NPROC ranks x $((BATCH / NPROC)), sync-bn=$OUT/ranks-sync-bn.csv"
