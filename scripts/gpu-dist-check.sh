#!/usr/bin/env bash
# Issue 17 on the two-GPU machine (kind nvidia-h200-x2), one lease, one command: build, the GPU
# tests (NcclOneGpu.*, NcclTwoGpus.* with the rest), then the scaling table (frugal and PyTorch
# DDP, one GPU against two, same per-GPU batch, in this call), the f16 loss curves and the
# per-GPU peaks, and, when Fashion-MNIST's .gz files are in DATA_DIR (default .data, carried),
# the 10-epoch f16 recipe of scripts/gpu-train.sh on one GPU and on two at the same global batch.
# Logs under "${OUT:-/tmp}". NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
#   STEPS=30 SKIP_TESTS=1 scripts/gpu-dist-check.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp}"
LOG="$OUT/gpu-dist-check.log"
mkdir -p "$OUT"
: > "$LOG"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
STEPS=${STEPS:-30}
status=0
say() { echo "== $*" | tee -a "$LOG"; }

say "gpu-dist-check $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>&1 | tee -a "$LOG"
if ! scripts/gpu-build.sh > "$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log" | tee -a "$LOG"
  say "BUILD FAILED"
  exit 1
fi
if [ -z "${SKIP_TESTS:-}" ]; then
  say "gpu tests"
  (cd build-gpu && ctest -L gpu --output-on-failure) 2>&1 | tail -30 | tee -a "$LOG" || status=1
fi

# One JSON line per run: frugal's train_step_bench and PyTorch's twin, one GPU and two.
bench() {  # bench NAME NPROC ARGS...: runs the pair of benchmarks, appends to results.jsonl
  local name=$1 nproc=$2
  shift 2
  for impl in frugal torch; do
    local cmd
    if [ "$impl" = frugal ]; then
      cmd=(build-gpu/train_step_bench --device cuda --json --steps "$STEPS" "$@")
      [ "$nproc" -gt 1 ] && cmd=(build-gpu/frugal launch --nproc "$nproc" -- "${cmd[@]}")
    else
      cmd=(python3 bench/torch_train_step.py --device cuda --json --steps "$STEPS" "$@")
      [ "$nproc" -gt 1 ] && cmd=(torchrun --standalone --nproc_per_node "$nproc" "${cmd[@]:1}")
    fi
    say "$name, $impl, $nproc GPU(s): ${cmd[*]}"
    if "${cmd[@]}" > "$OUT/run.json" 2> "$OUT/run.err"; then
      grep '^{' "$OUT/run.json" | tail -1 | sed "s/^{/{\"run\":\"$name\",\"nproc\":$nproc,/" \
        | tee -a "$OUT/results.jsonl" | cut -c1-300 | tee -a "$LOG"
    else
      tail -20 "$OUT/run.err" | tee -a "$LOG"
      status=1
    fi
  done
}
: > "$OUT/results.jsonl"
for nproc in 1 2; do
  bench "MobileNetV2 f16 224x224 b128/GPU" "$nproc" --model mobilenet_v2 --batch 128 \
    --input 3x224x224 --classes 1000 --precision f16
  bench "MobileNetV2 f16 32x32 b256/GPU" "$nproc" --model mobilenet_v2 --batch 256 \
    --input 3x32x32 --classes 10 --precision f16
done
python3 - "$OUT/results.jsonl" <<'PY' | tee -a "$LOG"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
one = {(r["run"], r["impl"]): r for r in rows if r["nproc"] == 1}
print("| run | impl | GPUs | img/s | x one GPU | peak allocated MiB (rank 0) |")
print("| --- | --- | --- | --- | --- | --- |")
for r in rows:
    base = one.get((r["run"], r["impl"]))
    scale = r["img_per_s"] / base["img_per_s"] if base else float("nan")
    print(f"| {r['run']} | {r['impl']} | {r['nproc']} | {r['img_per_s']:,.0f} | {scale:.2f} | "
          f"{(r['peak_allocated_bytes'] or 0) / 2**20:,.1f} |")
PY

say "f16 loss curves, 200 steps, global batch 256"
DEVICE=cuda PRECISION=f16 BATCH=256 BUILD=build-gpu OUT="$OUT/loss-curve" \
  scripts/dist-loss-curve.sh 2>&1 | grep -v '\[' | tee -a "$LOG" || status=1
DATA_DIR="${DATA_DIR:-.data}"
if [ -d "$DATA_DIR" ] && [ -z "${SKIP_FMNIST:-}" ]; then
  say "Fashion-MNIST, 10 epochs f16, global batch 128: one GPU, then two ranks of 64"
  for gpus in 1 2; do
    flags=""
    [ "$gpus" -gt 1 ] && flags="--gpus $gpus"
    OUT="$OUT/fmnist-$gpus" DATA_DIR="$DATA_DIR" TRAIN_PRECISIONS=f16 \
      TRAIN_BATCH=$(( 128 / gpus )) TRAIN_FLAGS="$flags" scripts/gpu-train.sh 2>&1 |
      grep -iE "^== |accuracy|error" | tail -12 | tee -a "$LOG"
    grep -qi "accuracy" "$OUT/fmnist-$gpus/train-f16.log" || status=1
  done
fi
say "done, status $status"
exit $status
