#!/usr/bin/env bash
# Speed of the lean saved state against a baseline tree (BASELINE_DIR, e.g. a `git archive` of an
# earlier commit) in one device call: both built, then the same train_step_bench runs, eager and
# replayed from a CUDA graph, MobileNetV2 f16 at 128 x 3x224x224. Prints one line per run.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUTDIR="${OUT:-/tmp}"
BASE="${BASELINE_DIR:-.baseline}"
run() {
  local bin="$1" label="$2"
  shift 2
  "$bin" --device cuda --batch 128 --input 3x224x224 --classes 1000 --precision f16 \
    --warmup 6 --steps 30 --json "$@" 2>/dev/null |
    python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print('$label', '$*', f\"{r['img_per_s']:.0f} img/s\", f\"{r['peak_allocated_bytes']/2**20:.0f} MiB\")"
}
for rep in 1 2; do
  run build-gpu/train_step_bench new
  run "$BASE/build-gpu/train_step_bench" baseline
  run build-gpu/train_step_bench new --graph
  run "$BASE/build-gpu/train_step_bench" baseline --graph
done
