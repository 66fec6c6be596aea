#!/usr/bin/env bash
# One device call for the mixed-precision work (issue 5) when there is no time for the whole of
# scripts/gpu-session.sh: build, the GPU tests, frugal's 32x32 step in f32/f16/bf16 eager and
# from a CUDA graph, repeated (precisions alternating, so a slow spell of the machine does not
# land on one; REPEATS=0 skips it), `frugal compare` at 32x32 and 224x224 eager and --graph,
# `frugal train` eager against --graph (GRAPH_TRAIN=1), then the Fashion-MNIST runs of
# scripts/gpu-train.sh (SKIP_TRAIN=1 skips them). Logs under $OUT.
#   OUT=/tmp/x REPEATS=5 scripts/gpu-amp-check.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
OUTDIR="${OUT:-/tmp}"
mkdir -p "$OUTDIR"
REPEATS="${REPEATS:-5}"
status=0
scripts/gpu-build.sh > "$OUTDIR/build.log" 2>&1 ||
  { echo "== BUILD FAILED"; tail -30 "$OUTDIR/build.log"; exit 1; }
(cd build-gpu && ctest -L gpu --output-on-failure > "$OUTDIR/gpu-tests.txt" 2>&1) || status=1
grep -E "tests passed|\*\*\*Failed" "$OUTDIR/gpu-tests.txt"

# frugal's step at 32x32, batch 256, eager and replayed from a CUDA graph (--graph): one JSON
# line per run in small-steps.jsonl
: > "$OUTDIR/small-steps.jsonl"
for ((r = 0; r < REPEATS; r++)); do
  for p in f32 f16 bf16; do
    for graph in "" --graph; do
      build-gpu/train_step_bench --device cuda --batch 256 --input 1x32x32 --classes 10 \
        --precision "$p" --warmup 10 --steps 30 --json $graph 2>/dev/null \
        >> "$OUTDIR/small-steps.jsonl" || status=1
    done
  done
done
[ "$REPEATS" -gt 0 ] && python3 - "$OUTDIR/small-steps.jsonl" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        mode = "graph" if r.get("graph") else "eager"
        runs.setdefault((mode, r["precision"]), []).append(r["img_per_s"])
for (mode, p), v in sorted(runs.items()):
    base = statistics.median(runs[(mode, "f32")])
    print(f"32x32 b256 {mode} {p}: median {statistics.median(v):,.0f} img/s over {len(v)} runs "
          f"({min(v):,.0f}-{max(v):,.0f}), {statistics.median(v) / base:.2f}x {mode} f32")
PY

# `frugal compare` eager, then with the timed steps replayed from a CUDA graph (--graph);
# SKIP_COMPARE=1 skips it
for c in "256 1x32x32 10" "128 3x224x224 1000"; do
  [ "${SKIP_COMPARE:-0}" = 1 ] && break
  read -r batch input classes <<< "$c"
  for graph in "" --graph; do
    name="compare-$input${graph:+-graph}"
    build-gpu/frugal compare --model mobilenet_v2 --batch "$batch" --input "$input" \
      --classes "$classes" --steps 20 --device cuda --json "$OUTDIR/$name.json" \
      --svg "$OUTDIR/$name.svg" $graph > "$OUTDIR/$name.txt" 2>&1 || status=1
    cat "$OUTDIR/$name.txt"
  done
done

# GRAPH_TRAIN=1: `frugal train` on Fashion-MNIST at 32x32, batch 256, the cosine schedule of
# scripts/gpu-train.sh, eager and --graph one after the other per precision (GRAPH_EPOCHS
# epochs, default 2).
if [ "${GRAPH_TRAIN:-0}" = 1 ]; then
  for p in f32 f16; do
    for graph in "" --graph; do
      echo "== frugal train $p ${graph:-eager}"
      build-gpu/frugal train --model mobilenet_v2 --device cuda --data-dir "${DATA_DIR:-.data}" \
        --epochs "${GRAPH_EPOCHS:-2}" --batch 256 --schedule cosine --lr 0.1 --weight-decay 5e-4 \
        --warmup-epochs 1 --workers 8 --seed 0 --precision "$p" \
        $graph 2>&1 | tr '\r' '\n' | grep -E "^epoch [0-9]+/[0-9]+:|rror" || status=1
    done
  done
fi

if [ "${SKIP_TRAIN:-0}" != 1 ]; then
  scripts/gpu-train.sh > "$OUTDIR/train.txt" 2>&1 || status=1
  grep -E "^==|test accuracy|epoch 10/" "$OUTDIR/train.txt" | head -40
fi
exit $status
