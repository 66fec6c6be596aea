#!/usr/bin/env bash
# The GPU benchmark, run by scripts/gpu-check.sh after the GPU tests: training steps of each
# model of BENCH_MODELS (default MobileNetV2 alone; "all": the zoo) in frugal (train_step_bench)
# and PyTorch (bench/torch_train_step.py) in the same call, then a markdown table of both with
# ratios appended to "$OUT/bench-results.md" (copy it into bench/RESULTS.md). Each precision of
# BENCH_PRECISIONS (default "f32 f16 bf16") runs in both: f16 as autocast + GradScaler, bf16 as
# autocast alone, side by side with PyTorch's autocast. BENCH_COMPILE (default none) adds
# PyTorch's eager step under torch.compile in each mode it lists ("default
# max-autotune-no-cudagraphs"; about a minute of compiling for default, up to ten for
# max-autotune), in the table's compile column;
# with BENCH_MODES=graph alone the replayed rows compare with it. Max-autotune's kernel timings
# carry from call to call through bench/torch_autotune_timings.json (bench/autotune_timings.py):
# the grown file comes back as "$OUT/torch_autotune_timings.json", to commit.
# BENCH_COMPILE_TIMEOUT (seconds) stops a compile that would outrun the device call; what it
# timed so far still comes back.
set -u -o pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD_DIR:-build-gpu}"
OUTDIR="${OUT:-/tmp}"
mkdir -p "$OUTDIR"
JSONL="$OUTDIR/bench-results.jsonl"
MD="$OUTDIR/bench-results.md"
LOG="$OUTDIR/bench-stderr.log"
WARMUP="${BENCH_WARMUP:-10}"
STEPS="${BENCH_STEPS:-30}"
PRECISIONS="${BENCH_PRECISIONS:-f32 f16 bf16}"
# Step modes: eager, and replayed from a CUDA graph (--graph: frugal captures the whole step,
# PyTorch what its CUDA-semantics notes allow). BENCH_MODES="eager" skips the graphs.
MODES="${BENCH_MODES:-eager graph}"
# batch input classes repeats. At 32x32 a step is a few milliseconds of mostly host work and one
# run's median moved by up to 40% between runs of the same build: it runs BENCH_SMALL_REPEATS
# times. The 224x224 step is device-bound and steady.
SMALL_REPEATS="${BENCH_SMALL_REPEATS:-5}"
CASES=("128 3x224x224 1000 1" "256 1x32x32 10 $SMALL_REPEATS")
MODELS="${BENCH_MODELS:-mobilenet_v2}"
[ "$MODELS" = all ] && MODELS="mobilenet_v2 mobilenet_v1 efficientnet_b0 resnet18"
COMPILE="${BENCH_COMPILE:-}"
# Max-autotune times every candidate kernel of each convolution and GEMM: about 490 s for
# MobileNetV1 (session 26), 174 s with the timings of earlier calls on the same GPU and versions.
TIMINGS=bench/torch_autotune_timings.json
if [[ "$COMPILE" == *max-autotune* ]]; then
  export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-/tmp/frugal-inductor-cache}"
  python3 bench/autotune_timings.py seed "$TORCHINDUCTOR_CACHE_DIR" "$TIMINGS" || exit 1
fi
MAX_REPEATS=$(( SMALL_REPEATS > 1 ? SMALL_REPEATS : 1 ))

BIN="$BUILD/train_step_bench"
if [ ! -x "$BIN" ]; then
  cmake --build "$BUILD" -j"$(nproc)" --target train_step_bench || { echo "no $BIN"; exit 1; }
fi
have_torch=0
python3 -c 'import torch, torchvision; assert torch.cuda.is_available()' 2>/dev/null && have_torch=1

: > "$JSONL"
status=0
# run NAME COMMAND...: one JSON line to stdout and $JSONL, stderr to $LOG; returns its status.
run() {
  local name="$1" err="$OUTDIR/.err"
  shift
  echo "== $name ${*:2}"
  "$@" 2> "$err" | tee -a "$JSONL"
  local rc=$?
  [ "$rc" = 0 ] || echo "   $name failed: $(grep -v '^ *usage\|^  ' "$err" | tail -1)"
  cat "$err" >> "$LOG"
  rm -f "$err"
  return $rc
}
# Repeats go round all precisions before the next repeat, so a slow spell of the machine does
# not land on one precision; make_table.py reports the median run and the range.
for ((rep = 0; rep < MAX_REPEATS; rep++)); do
  for model in $MODELS; do
  for precision in $PRECISIONS; do
    for c in "${CASES[@]}"; do
      read -r batch input classes repeats <<< "$c"
      [ "$rep" -lt "$repeats" ] || continue
      # The zoo takes 3 channels but MobileNetV2 (Fashion-MNIST's 1 at 32x32).
      [ "$model" != mobilenet_v2 ] && input="3x${input#*x}"
      for mode in $MODES; do
        args=(--device cuda --model "$model" --batch "$batch" --input "$input"
              --classes "$classes" --precision "$precision" --warmup "$WARMUP" --steps "$STEPS"
              --json)
        eager_args=("${args[@]}")  # torch.compile's runs: eager steps in either mode
        [ "$mode" = graph ] && args+=(--graph)
        run frugal "$BIN" "${args[@]}" || status=1
        if [ "$have_torch" = 1 ]; then
          run pytorch python3 bench/torch_train_step.py "${args[@]}" || status=1
          # torch.compile's steps are eager ones, run once per case: with the eager mode, or
          # with the replayed one when BENCH_MODES has no eager (make_table.py shows them
          # beside the replayed row, frugal's replayed step against PyTorch's best).
          if [ "$mode" = eager ] || [[ " $MODES " != *" eager "* ]]; then
            for how in $COMPILE; do
              run pytorch ${BENCH_COMPILE_TIMEOUT:+timeout "$BENCH_COMPILE_TIMEOUT"} \
                python3 bench/torch_train_step.py "${eager_args[@]}" --compile "$how" || status=1
            done
          fi
        fi
      done
    done
  done
  done
done

if [[ "$COMPILE" == *max-autotune* ]]; then
  python3 bench/autotune_timings.py collect "$TORCHINDUCTOR_CACHE_DIR" \
    "$OUTDIR/torch_autotune_timings.json" || status=1
fi

gpu="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
missing=""
[ "$have_torch" = 1 ] || missing="PyTorch with CUDA was not found: frugal's numbers only."
if grep -q '^{' "$JSONL"; then
  python3 bench/make_table.py "$JSONL" --missing "$missing" \
    --title "Training steps ($MODELS), $(date -u +%F), ${gpu:-unknown GPU}" | tee -a "$MD"
else
  echo "no results"; status=1
fi
exit $status
