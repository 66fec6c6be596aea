#!/usr/bin/env bash
# One device call that does everything a session needs on the GPU machine: scripts/gpu-check.sh
# (build, gpu tests, step and loader benchmarks), then the Fashion-MNIST training runs of
# scripts/gpu-train.sh beside an ncu profile of one precision, everything packed into
# "$OUT/all.tgz" (the device tool brings back only a few files).
#   OUT=/tmp/x TRAIN_LIMIT_S=230 PROFILE_PRECISIONS=bf16 scripts/gpu-session.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
OUTDIR="${OUT:-/tmp}"
mkdir -p "$OUTDIR"
scripts/gpu-check.sh > "$OUTDIR/check.txt" 2>&1
echo "gpu-check exit $?"
grep -E "build took|tests passed|Failed|FAILED|\*\*\*" "$OUTDIR/check.txt" | grep -v Skipped | head -40
grep -A30 "^| " "$OUTDIR/bench-results.md" 2>/dev/null | head -40
grep -E "speedup|overlap" "$OUTDIR/check.txt" | head -10
if [ "${SKIP_TRAIN:-0}" != 1 ]; then
  EPOCHS="${EPOCHS:-10}" scripts/gpu-train.sh > "$OUTDIR/train.txt" 2>&1 &
  train_pid=$!
fi
if [ -n "${PROFILE_PRECISIONS:-}" ]; then
  scripts/gpu-profile.sh > /dev/null 2>&1
fi
if [ "${SKIP_TRAIN:-0}" != 1 ]; then
  wait "$train_pid"
  grep -E "^==|test accuracy:|epoch 10/" "$OUTDIR/train.txt"
fi
# Packed outside $OUTDIR first: tar reading a folder it is writing into fails.
tar czf /tmp/gpu-session-all.tgz -C "$OUTDIR" . && find "$OUTDIR" -type f -delete &&
  mv /tmp/gpu-session-all.tgz "$OUTDIR/all.tgz"
