#!/usr/bin/env bash
# Activation memory side by side with PyTorch (issue 11's tables), in parts so that each fits a
# device call: MEM_PARTS="frugal torch compile maxbatch recompute zoo" (default all). Each run is one
# training step benchmark (train_step_bench / bench/torch_train_step.py: peaks over the timed
# steps after warm-up, parameters, gradients, momentum and batch included); the JSON lines go to
# "$OUT/memory.jsonl" and a table to "$OUT/memory.md". The largest batch under a 4 GiB cap is
# found by trying batches in turn (frugal: its allocator cap; PyTorch:
# set_per_process_memory_fraction) and printed as "maxbatch" lines.
set -u -o pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD_DIR:-build-gpu}"
OUTDIR="${OUT:-/tmp}"
mkdir -p "$OUTDIR"
JSONL="$OUTDIR/memory.jsonl"
PARTS="${MEM_PARTS:-frugal torch compile maxbatch recompute zoo}"
BIN="$BUILD/train_step_bench"
STEPS="${MEM_STEPS:-20}"
CAP_MIB="${MEM_CAP_MIB:-4096}"

has() { [[ " $PARTS " == *" $1 "* ]]; }
# one IMPL MODEL BATCH INPUT PRECISION [extra args...]: one JSON line to $JSONL.
one() {
  local impl="$1" model="$2" batch="$3" input="$4" precision="$5"
  shift 5
  local args=(--device cuda --model "$model" --batch "$batch" --input "$input" --classes 1000
              --precision "$precision" --warmup 5 --steps "$STEPS" --json "$@")
  echo "== $impl ${args[*]}" >&2
  if [ "$impl" = frugal ]; then
    "$BIN" "${args[@]}" 2>> "$OUTDIR/memory-stderr.log" | tee -a "$JSONL"
  else
    python3 bench/torch_train_step.py "${args[@]}" 2>> "$OUTDIR/memory-stderr.log" | tee -a "$JSONL"
  fi
}
# Does one step of this configuration fit under the cap? (exit status)
fits() {
  local impl="$1" model="$2" batch="$3" precision="$4"
  shift 4
  local args=(--device cuda --model "$model" --batch "$batch" --input 3x224x224 --classes 1000
              --precision "$precision" --warmup 2 --steps 2 --json --memory-cap-mib "$CAP_MIB" "$@")
  if [ "$impl" = frugal ]; then
    "$BIN" "${args[@]}" > /dev/null 2>&1
  else
    python3 bench/torch_train_step.py "${args[@]}" > /dev/null 2>&1
  fi
}
# largest IMPL MODEL PRECISION "BATCHES" [extra...]: the last batch of the increasing list that fits.
largest() {
  local impl="$1" model="$2" precision="$3" batches="$4" best=0
  shift 4
  for b in $batches; do
    if fits "$impl" "$model" "$b" "$precision" "$@"; then best=$b; else break; fi
  done
  echo "maxbatch $impl $model $precision ${*:-plain} under ${CAP_MIB} MiB: $best" | tee -a "$OUTDIR/maxbatch.txt"
}

M=mobilenet_v2
if has frugal; then
  for prec in f16 f32; do
    one frugal $M 128 3x224x224 $prec
    one frugal $M 128 3x224x224 $prec --checkpoint blocks
  done
  # The caching allocator alone (the planner, on by default, off), for the reserved memory.
  one frugal $M 128 3x224x224 f16 --planner off
  one frugal $M 128 3x224x224 f16 --checkpoint blocks --planner off
fi
if has torch; then
  for prec in f16 f32; do one pytorch $M 128 3x224x224 $prec; done
  one pytorch $M 128 3x224x224 f16 --checkpoint blocks
fi
if has compile; then
  for c in ${COMPILE_CONFIGS:-default budget:0.5 budget:0.2}; do
    one pytorch $M 128 3x224x224 f16 --compile "$c"
  done
fi
if has maxbatch; then
  largest frugal $M f16 "${MAXB_LEAN:-96 128 160 192 224 240 256 272 288 304 320 352 384}"
  largest frugal $M f16 "${MAXB_CKPT:-240 320 400 480 512 544 576 608 640 720 800}" --checkpoint blocks
  largest pytorch $M f16 "${MAXB_TORCH:-64 96 112 128 160}"
fi
if has recompute; then  # depthwise outputs recomputed in backward (ModelConfig::recompute_depthwise)
  for prec in f16 f32; do one frugal $M 128 3x224x224 $prec --recompute-depthwise; done
  largest frugal $M f16 "${MAXB_RECOMPUTE:-288 320 352 384 416 448 480}" --recompute-depthwise
fi
if has zoo; then
  for model in resnet18 efficientnet_b0; do
    for prec in f16 f32; do
      one frugal $model 128 3x224x224 $prec
      [ "${ZOO_TORCH:-1}" = 1 ] && one pytorch $model 128 3x224x224 $prec
    done
    one frugal $model 128 3x224x224 f16 --checkpoint blocks
  done
fi
python3 bench/memory_table.py "$JSONL" --title "activation memory, $(date -u +%F), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" | tee "$OUTDIR/memory.md"
