#!/usr/bin/env bash
# The DataLoader copy-stream benchmark, run by scripts/gpu-check.sh: loader_overlap_bench on a
# 256x3x224x224 f32 batch (and a small one), copies on the copy stream against copies on the
# compute stream, with GPU work as long as the copy. Table to stdout, JSON lines appended to
# "$OUT/loader-bench.jsonl".
set -u -o pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD_DIR:-build-gpu}"
OUTDIR="${OUT:-/tmp}"
mkdir -p "$OUTDIR"
BIN="$BUILD/loader_overlap_bench"
if [ ! -x "$BIN" ]; then
  cmake --build "$BUILD" -j"$(nproc)" --target loader_overlap_bench || { echo "no $BIN"; exit 1; }
fi
status=0
# batch input iterations
for c in "256 3x224x224 20" "128 3x64x64 50"; do
  read -r batch input iters <<< "$c"
  echo "== loader_overlap_bench --batch $batch --input $input"
  "$BIN" --batch "$batch" --input "$input" --iters "$iters" || status=1
  "$BIN" --batch "$batch" --input "$input" --iters "$iters" --json >> "$OUTDIR/loader-bench.jsonl" ||
    status=1
done
exit $status
