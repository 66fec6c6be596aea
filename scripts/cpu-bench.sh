#!/usr/bin/env bash
# The CPU benchmark of issue 3: a MobileNetV2 training step (batch 64, 1x32x32, 10 classes) in
# frugal and, when `import torch` works (Debian's python3-torch), in PyTorch on the same threads.
# Prints a markdown table; the JSON lines go to "${OUT:-/tmp}/cpu-bench.jsonl".
#   scripts/cpu-bench.sh            # BUILD_DIR=build, THREADS=$(nproc), BENCH_STEPS=20
set -u -o pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD_DIR:-build}"
OUTDIR="${OUT:-/tmp}"
mkdir -p "$OUTDIR"
JSONL="$OUTDIR/cpu-bench.jsonl"
export OMP_NUM_THREADS="${THREADS:-$(nproc)}"  # both frugal (OpenMP) and PyTorch read it
args=(--device cpu --batch "${BENCH_BATCH:-64}" --input 1x32x32 --classes 10
      --warmup "${BENCH_WARMUP:-3}" --steps "${BENCH_STEPS:-20}" --json)

BIN="$BUILD/train_step_bench"
if [ ! -x "$BIN" ]; then
  if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFRUGAL_CUDA=OFF >&2 || exit 1
  fi
  cmake --build "$BUILD" -j2 --target train_step_bench >&2 || exit 1
fi

: > "$JSONL"
echo "frugal:  $BIN ${args[*]} (OMP_NUM_THREADS=$OMP_NUM_THREADS)" >&2
"$BIN" "${args[@]}" >> "$JSONL" || { echo "frugal benchmark failed" >&2; exit 1; }
missing=""
# Debian's python3-torch lives in the system interpreter, which may not be the first python3.
PY="${PYTHON:-python3}"
if ! "$PY" -c 'import torch, torchvision' 2>/dev/null && /usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null; then
  PY=/usr/bin/python3
fi
if "$PY" -c 'import torch, torchvision' 2>/dev/null; then
  echo "pytorch: $PY bench/torch_train_step.py ${args[*]}" >&2
  "$PY" bench/torch_train_step.py "${args[@]}" >> "$JSONL" ||
    { echo "PyTorch benchmark failed" >&2; exit 1; }
else
  missing="PyTorch (with torchvision) was not found (python3 -c 'import torch'): frugal's numbers only."
  echo "$missing" >&2
fi
python3 bench/make_table.py "$JSONL" --missing "$missing" \
  --title "MobileNetV2 CPU training step, $(date -u +%F), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $OMP_NUM_THREADS threads"
