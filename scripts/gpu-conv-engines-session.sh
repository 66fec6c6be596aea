#!/usr/bin/env bash
# One device call for issue 16's convolution speed (bench/RESULTS.md, sessions 27 and 28: the
# graph API candidates of kernels/cuda/conv.cu against torch.compile):
#   1. build build-gpu and run the gpu tests (SESSION_TESTS=0: build train_step_bench alone);
#   2. SESSION_MODELS (default resnet18; "all": the zoo) replayed beside PyTorch's replayed step
#      and torch.compile in mode SESSION_COMPILE (default max-autotune-no-cudagraphs, its timings
#      from bench/torch_autotune_timings.json; empty: no compile column), in SESSION_PRECISIONS
#      (default bf16; each max-autotune compile adds up to 4 minutes), in SESSION_MODES (default
#      graph; "eager" for issue 16's f32 goal);
#   3. with SESSION_CANDIDATES="MODEL:PRECISION", the FRUGAL_CUDNN_LOG candidates of every
#      convolution of that step, legacy algorithms and graph API engines with their times
#      (scripts/gpu-cudnn-candidates.sh);
#   4. until SESSION_SECONDS (default 560) have passed since the start, max-autotune timing of
#      the cells of SESSION_AUTOTUNE (default "mobilenet_v2:bf16 mobilenet_v2:f16"), each
#      finished one measured beside frugal (scripts/gpu-autotune.sh).
# Few files come back from a call, so: "$OUT/session.log" (what every step printed),
# "$OUT/torch_autotune_timings.json" (to commit) and "$OUT/logs.tar.gz".
set -u -o pipefail
cd "$(dirname "$0")/.."
OUTDIR="${OUT:-/tmp}"
mkdir -p "$OUTDIR"
WORK="$(mktemp -d)"
LOG="$OUTDIR/session.log"
start=$(date +%s)
status=0
since() { echo "$(( $(date +%s) - start )) s"; }
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  git log --oneline -1
} 2>&1 | tee "$LOG"

if [ "${SESSION_TESTS:-1}" = 1 ]; then
  # The build and the gpu tests, as every call runs them (its log comes back in logs.tar.gz); four
  # tests at a time (CTEST_PARALLEL_LEVEL), 52 s in session 26 against 160 one by one.
  CTEST_PARALLEL_LEVEL=4 GPU_CHECK_BENCHES="" OUT="$WORK" scripts/gpu-check.sh > /dev/null 2>&1 ||
    status=1
  grep -E "BUILD FAILED|tests passed|Failed|\*\*\*|Total Test time" "$WORK/gpu-check.log" |
    tee -a "$LOG"
  grep -q "BUILD FAILED" "$WORK/gpu-check.log" && built=0 || built=1
else
  scripts/gpu-build.sh train_step_bench > "$WORK/build.log" 2>&1 && built=1 || built=0
  cp "$WORK/build.log" "$WORK/gpu-check.log"
fi
if [ "$built" = 0 ]; then
  echo "BUILD FAILED" >> "$LOG"
  tail -40 "$WORK/gpu-check.log" >> "$LOG"
  tar -czf "$OUTDIR/logs.tar.gz" -C "$WORK" .
  exit 1
fi
echo "== built at $(since)" | tee -a "$LOG"

OUT="$WORK/bench" BENCH_MODELS="${SESSION_MODELS:-resnet18}" \
  BENCH_PRECISIONS="${SESSION_PRECISIONS:-bf16}" BENCH_MODES="${SESSION_MODES:-graph}" \
  BENCH_SMALL_REPEATS=0 BENCH_WARMUP=5 BENCH_STEPS=20 \
  BENCH_COMPILE="${SESSION_COMPILE-max-autotune-no-cudagraphs}" BENCH_COMPILE_TIMEOUT=200 \
  scripts/gpu-bench.sh > "$WORK/bench.log" 2>&1 || status=1
grep -v '^{' "$WORK/bench/bench-results.md" 2>/dev/null | grep -v '^$' | tee -a "$LOG"
if [ -n "${SESSION_CANDIDATES:-}" ]; then
  echo "== candidates of ${SESSION_CANDIDATES}" | tee -a "$LOG"
  OUT="$WORK/candidates" CANDIDATES_MODEL="${SESSION_CANDIDATES%%:*}" \
    CANDIDATES_PRECISION="${SESSION_CANDIDATES##*:}" CANDIDATES_MATCH=conv2d_ \
    CANDIDATES_SCALES=1 CANDIDATES_LINES=2000 scripts/gpu-cudnn-candidates.sh 2>&1 |
    tee -a "$LOG" | grep '^=='
fi
cp "$WORK/bench/torch_autotune_timings.json" bench/torch_autotune_timings.json 2>/dev/null
echo "== bench done at $(since)" | tee -a "$LOG"

left=$(( ${SESSION_SECONDS:-560} - ($(date +%s) - start) ))
if [ "$left" -gt 60 ]; then
  # shellcheck disable=SC2086  # the cells are words
  OUT="$WORK/autotune" AUTOTUNE_SECONDS=$left scripts/gpu-autotune.sh \
    ${SESSION_AUTOTUNE:-mobilenet_v2:bf16 mobilenet_v2:f16} 2>&1 | grep '^==' | tee -a "$LOG"
  cp "$WORK/autotune/torch_autotune_timings.json" bench/torch_autotune_timings.json 2>/dev/null
fi
cp bench/torch_autotune_timings.json "$OUTDIR/torch_autotune_timings.json"
echo "== end at $(since)" | tee -a "$LOG"
tar -czf "$OUTDIR/logs.tar.gz" -C "$WORK" .
exit $status
