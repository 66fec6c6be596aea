#!/usr/bin/env bash
# Training recipes for Fashion-MNIST on the GPU, side by side (one process each, sharing the
# card): each line of RECIPES is "name|frugal train flags"; logs in "${OUT:-/tmp}/sweep-<name>.log"
# and the last epoch's accuracy of each printed at the end.
#   DATA_DIR=.data EPOCHS=10 scripts/gpu-sweep.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
OUTDIR="${OUT:-/tmp}"
DATA_DIR="${DATA_DIR:-.data}"
EPOCHS="${EPOCHS:-10}"
LIMIT_S="${TRAIN_LIMIT_S:-400}"
DEFAULT_RECIPES="sgd-wd5e-4|--image-size 64 --lr 0.1 --weight-decay 5e-4 --warmup-epochs 1
sgd-wd5e-4-ls|--image-size 64 --lr 0.1 --weight-decay 5e-4 --warmup-epochs 1 --label-smoothing 0.1
adamw-ls|--image-size 64 --optimizer adamw --lr 0.004 --weight-decay 0.05 --label-smoothing 0.1
sgd-wd5e-4-bf16|--image-size 64 --lr 0.1 --weight-decay 5e-4 --warmup-epochs 1 --precision bf16"
RECIPES="${RECIPES:-$DEFAULT_RECIPES}"
names=()
while IFS='|' read -r name flags; do
  [ -n "$name" ] || continue
  names+=("$name")
  # shellcheck disable=SC2086  # the flags are a word list on purpose
  timeout "$LIMIT_S" build-gpu/frugal train --model mobilenet_v2 --device cuda \
    --data-dir "$DATA_DIR" --epochs "$EPOCHS" --schedule cosine --batch 128 --workers 3 --seed 0 \
    $flags 2>&1 | tr '\r' '\n' | grep -v '^epoch.*\[' > "$OUTDIR/sweep-$name.log" &
done <<< "$RECIPES"
wait
for name in "${names[@]}"; do
  echo "== $name: $(grep -F "$name|" <<< "$RECIPES" | cut -d'|' -f2)"
  grep -i "accuracy\|epoch\|error" "$OUTDIR/sweep-$name.log" | tail -12
done
