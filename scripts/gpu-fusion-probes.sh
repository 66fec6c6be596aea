#!/usr/bin/env bash
# Issue 16's HBM goal in one device call: bench/triton_pointwise_probe.py (MobileNetV2's fused
# 1x1 convolutions with Triton's main loop), then build-gpu/fused_pointwise_probe (the
# hand-written WMMA forms), each against today's passes and the same bound. Printouts go to
# "$OUT/triton_pointwise.txt" and "$OUT/fused_pointwise.txt". The probe builds, niced, while Triton
# compiles and times (graph replays, so the timings do not wait on the CPUs). Triton's kernel cache
# lives in "$BUILD_DIR/triton-cache": a call that follows on a warm machine compiles nothing
# again. FUSION_SECONDS (default 540) bounds the call; Triton gets what the hand-written probe
# (about a minute) leaves, and starts no new shape after that.
#   FUSION_SECONDS=540 scripts/gpu-fusion-probes.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
OUTDIR="${OUT:-/tmp}"
BUILD="${BUILD_DIR:-build-gpu}"
mkdir -p "$OUTDIR" "$BUILD"
export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-$PWD/$BUILD/triton-cache}"
deadline=$(($(date +%s) + ${FUSION_SECONDS:-540}))
status=0

nice -n 19 scripts/gpu-build.sh fused_pointwise_probe > "$OUTDIR/fused-build.log" 2>&1 &
build=$!

triton_seconds=$((deadline - $(date +%s) - 150))
echo "== triton_pointwise_probe (new shapes for ${triton_seconds} s)"
timeout $((triton_seconds + 60)) python3 bench/triton_pointwise_probe.py \
  --seconds "$triton_seconds" 2>&1 | tee "$OUTDIR/triton_pointwise.txt" || status=1

if wait "$build"; then
  echo "== fused_pointwise_probe"
  timeout $((deadline - $(date +%s))) "$BUILD/fused_pointwise_probe" 2>&1 |
    tee "$OUTDIR/fused_pointwise.txt" || status=1
else
  echo "== fused_pointwise_probe did not build"
  tail -20 "$OUTDIR/fused-build.log"
  status=1
fi
exit $status
