#!/usr/bin/env bash
# One device call for issue 16's cuDNN question (bench/RESULTS.md, session 27): does the graph
# API run ResNet-18's bf16 convolutions faster than the legacy API, and does frugal's step gain?
#   1. build build-gpu and run the gpu tests (with the graph API candidates restored, their own
#      tests among them: git revert 7e99f03 before the call);
#   2. bench/cudnn_engines_probe over ResNet-18's shapes in bf16 and in f16;
#   3. ResNet-18 replayed beside PyTorch's replayed step and torch.compile max-autotune (its
#      timings from bench/torch_autotune_timings.json), in SESSION_PRECISIONS (default bf16: the
#      one in question; each adds up to 4 minutes);
#   4. until SESSION_SECONDS (default 560) have passed since the start, max-autotune timing of
#      the cells of SESSION_AUTOTUNE (default "mobilenet_v2:bf16 mobilenet_v2:f16"), each
#      finished one measured beside frugal (scripts/gpu-autotune.sh).
# Few files come back from a call, so: "$OUT/session.log" (what every step printed, the probe's
# lines included), "$OUT/torch_autotune_timings.json" (to commit) and "$OUT/logs.tar.gz".
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

# The build and the gpu tests, as every call runs them (its log comes back in logs.tar.gz); four
# tests at a time (CTEST_PARALLEL_LEVEL), 52 s in session 26 against 160 one by one.
CTEST_PARALLEL_LEVEL=4 GPU_CHECK_BENCHES="" OUT="$WORK" scripts/gpu-check.sh > /dev/null 2>&1 ||
  status=1
grep -E "BUILD FAILED|tests passed|Failed|\*\*\*|Total Test time" "$WORK/gpu-check.log" |
  tee -a "$LOG"
if grep -q "BUILD FAILED" "$WORK/gpu-check.log"; then
  tail -40 "$WORK/gpu-check.log" >> "$LOG"
  tar -czf "$OUTDIR/logs.tar.gz" -C "$WORK" .
  exit 1
fi
echo "== built and tested at $(since)" | tee -a "$LOG"

for dtype in bf16 f16; do
  echo "== cudnn_engines_probe --dtype $dtype" | tee -a "$LOG"
  build-gpu/cudnn_engines_probe --dtype "$dtype" 2>&1 | tee -a "$LOG" || status=1
done
echo "== probe done at $(since)" | tee -a "$LOG"

OUT="$WORK/bench" BENCH_MODELS=resnet18 BENCH_PRECISIONS="${SESSION_PRECISIONS:-bf16}" \
  BENCH_MODES=graph BENCH_SMALL_REPEATS=0 BENCH_WARMUP=5 BENCH_STEPS=20 \
  BENCH_COMPILE=max-autotune-no-cudagraphs BENCH_COMPILE_TIMEOUT=200 \
  scripts/gpu-bench.sh > "$WORK/bench.log" 2>&1 || status=1
grep -v '^{' "$WORK/bench/bench-results.md" 2>/dev/null | head -8 | tee -a "$LOG"
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
