#!/usr/bin/env bash
# Grows bench/torch_autotune_timings.json across device calls: torch.compile's
# "max-autotune-no-cudagraphs" compiles of each MODEL:PRECISION cell given, one after the other,
# until AUTOTUNE_SECONDS (default 540) have passed. A compile from nothing times every candidate
# kernel of each convolution and GEMM (about 490 s for MobileNetV1 bf16), more than a device call
# leaves once frugal is built and measured; a compile whose timings are all in the cache times
# none (174 s for the same step). So calls of this script time the candidates, a cell at a time,
# and the measuring call (scripts/gpu-bench.sh) compiles from the timings they leave.
# A compile cut off by the deadline keeps the rounds it finished. Inductor's cache lives in
# "$BUILD_DIR/inductor-cache", which a warm device machine keeps between calls: a call that follows
# within the machine's idle window finds the graphs, Triton kernels and tuned pointwise
# configurations of the cut-off compile and goes on from there, where a fresh machine would only
# have the timings and would compile and tune the rest again. Prints each cell's outcome (its
# img/s line when it finished) and the count of timed inputs; the grown file comes back as
# "$OUT/torch_autotune_timings.json", to commit over bench/torch_autotune_timings.json.
# When "$BUILD_DIR/train_step_bench" (default build-gpu) is built, each finished cell is followed
# by frugal's replayed step of the same model and precision, and the ratio of the two.
# AUTOTUNE_BUILD=1 builds it in the background, niced, while the compiles run: nvcc takes the
# CPUs the compiles leave and never the GPU, so the timings stay as a quiet machine reads them.
#   scripts/gpu-autotune.sh resnet18:bf16 resnet18:f16
set -u -o pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: scripts/gpu-autotune.sh MODEL:PRECISION..." >&2; exit 2; }
OUTDIR="${OUT:-/tmp}"
mkdir -p "$OUTDIR"
TIMINGS=bench/torch_autotune_timings.json
BUILD="${BUILD_DIR:-build-gpu}"
BIN="$BUILD/train_step_bench"
mkdir -p "$BUILD"
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$PWD/$BUILD/inductor-cache}"
deadline=$(( $(date +%s) + ${AUTOTUNE_SECONDS:-540} ))
builder=
if [ "${AUTOTUNE_BUILD:-0}" = 1 ]; then
  nice -n 19 scripts/gpu-build.sh train_step_bench > "$OUTDIR/autotune-build.log" 2>&1 &
  builder=$!
fi
# Waits for the background build, once.
await_build() {
  [ -n "$builder" ] || return 0
  wait "$builder" || echo "== the build of $BIN failed"
  builder=
}

# timed: how many (op, inputs) pairs the cache holds timings for.
timed() { python3 bench/autotune_timings.py count "$TORCHINDUCTOR_CACHE_DIR"; }

python3 bench/autotune_timings.py seed "$TORCHINDUCTOR_CACHE_DIR" "$TIMINGS" || exit 1
status=0
for cell in "$@"; do
  model="${cell%%:*}" precision="${cell#*:}"
  left=$(( deadline - $(date +%s) ))
  if [ "$left" -lt 30 ]; then
    echo "== $cell: not started, the deadline has passed"
    status=1
    continue
  fi
  before=$(timed) start=$(date +%s)
  timeout "$left" python3 bench/torch_train_step.py --device cuda --model "$model" --batch 128 \
    --input 3x224x224 --classes 1000 --precision "$precision" --warmup 5 --steps 20 --json \
    --compile max-autotune-no-cudagraphs 2>> "$OUTDIR/autotune-stderr.log" |
    tee -a "$OUTDIR/autotune.jsonl"
  rc=$?
  how=finished
  [ "$rc" = 124 ] && how="cut off at the deadline"
  echo "== $cell: exit $rc after $(( $(date +%s) - start )) s ($how);" \
    "timed inputs $before -> $(timed)"
  [ "$rc" = 0 ] || { status=1; continue; }
  await_build
  [ -x "$BIN" ] || continue
  "$BIN" --device cuda --model "$model" --batch 128 --input 3x224x224 --classes 1000 \
    --precision "$precision" --warmup 5 --steps 20 --json --graph \
    2>> "$OUTDIR/autotune-stderr.log" | tee -a "$OUTDIR/autotune.jsonl" ||
    { status=1; continue; }
  python3 - "$OUTDIR/autotune.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
torch, frugal = rows[-2], rows[-1]
ours, theirs = frugal["img_per_s"], torch["img_per_s"]
print(f"== {frugal['model']} {frugal['precision']}: frugal replayed {ours:,.0f} img/s, "
      f"max-autotune {theirs:,.0f}: {ours / theirs:.2f}x")
EOF
done
# The build outlives no call (it takes a few minutes of the call's ten), and is there for the next.
await_build
python3 bench/autotune_timings.py collect "$TORCHINDUCTOR_CACHE_DIR" \
  "$OUTDIR/torch_autotune_timings.json" || status=1
exit $status
