#!/usr/bin/env bash
# Issue 12's budget goal: a run under --memory-budget is never more than 10% slower than the
# fastest configuration that fits the same budget. For each CASE (MODEL:PRECISION:BATCH:MIB),
# train_step_bench runs the budget's choice (--memory-budget-mib, train::choose_for_budget), then
# each alternative under the allocator capped at the same MiB (an OOM means it does not fit):
# checkpointing the first K blocks for every K, every block, recomputed depthwise outputs, and
# 2-8 micro-batches alone and with every block checkpointed. One line per run; JSON lines to
# "$OUT/budget.jsonl". BUILD_DIR holds a built train_step_bench (default build-gpu).
#   CASES="mobilenet_v2:f16:512:3072" scripts/gpu-budget-bench.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
BIN="${BUILD_DIR:-build-gpu}/train_step_bench"
OUTDIR="${OUT:-/tmp}"
mkdir -p "$OUTDIR"
run() {  # run LABEL MODEL PRECISION BATCH args...
  local label="$1" model="$2" precision="$3" batch="$4"
  shift 4
  local line
  if line=$("$BIN" --device cuda --model "$model" --batch "$batch" --input 3x224x224 \
      --classes 1000 --precision "$precision" --warmup 3 --steps "${STEPS:-8}" --json "$@" \
      2>> "$OUTDIR/budget-stderr.log"); then
    echo "{\"label\": \"$label\", \"run\": $line}" >> "$OUTDIR/budget.jsonl"
    python3 -c 'import json,sys; r=json.loads(sys.argv[1]); M=2**20
print("%-34s %8.1f img/s  peak allocated %7.1f MiB  reserved %7.1f MiB  %s" % (sys.argv[2], r["img_per_s"],
      r["peak_allocated_bytes"]/M, r["peak_reserved_bytes"]/M, r.get("memory_budget_choice", "")))' "$line" "$label"
  else
    echo "$(printf '%-34s' "$label") does not fit (or failed)"
  fi
}
for c in ${CASES:-mobilenet_v2:f16:512:3072 mobilenet_v2:f16:256:2048}; do
  IFS=: read -r model precision batch mib <<< "$c"
  echo "== $model $precision batch $batch under $mib MiB"
  run "budget choice" "$model" "$precision" "$batch" --memory-budget-mib "$mib"
  cap=(--memory-cap-mib "$mib")
  run "plain" "$model" "$precision" "$batch" "${cap[@]}"
  for k in ${FIRST_K:-2 4 6 8 10 12 14 16}; do
    run "checkpoint first:$k" "$model" "$precision" "$batch" "${cap[@]}" --checkpoint "first:$k"
  done
  run "checkpoint blocks" "$model" "$precision" "$batch" "${cap[@]}" --checkpoint blocks
  run "recompute depthwise" "$model" "$precision" "$batch" "${cap[@]}" --recompute-depthwise
  for m in 2 4 8; do
    run "$m micro-batches" "$model" "$precision" "$batch" "${cap[@]}" --micro-batches "$m"
    run "$m micro-batches, blocks" "$model" "$precision" "$batch" "${cap[@]}" --micro-batches "$m" \
      --checkpoint blocks
  done
done
