#!/usr/bin/env bash
# One device call for ResNet's 16-bit stem (Note [Stride-2 stems as stride-1 convolutions] in
# kernels/space_to_depth.h; issue 16's ResNet-18 bf16 against torch.compile):
#   1. bench/stem_probe.py: cuDNN (through PyTorch) on the stem as it is, padded, and rewritten;
#   2. build build-gpu and run the gpu tests, then ResNet-18 replayed beside PyTorch's replayed
#      step in bf16 and f16 (scripts/gpu-conv-engines-session.sh, no compile column);
#   3. ncu's kernel times of one eager bf16 step (scripts/gpu-profile.sh), the lines of the stem:
#      the rewrite's kernels and cuDNN's convolutions;
#   4. until STEM_SECONDS (default 560) have passed since the start, torch.compile
#      "max-autotune-no-cudagraphs" of ResNet-18 bf16 and frugal's replayed step after it
#      (scripts/gpu-autotune.sh: the ratio in the same call).
# Everything printed goes to "$OUT/session.log"; the ncu summaries come back beside it.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUTDIR="${OUT:-/tmp}"
mkdir -p "$OUTDIR"
LOG="$OUTDIR/session.log"
start=$(date +%s)
since() { echo "$(( $(date +%s) - start )) s"; }

python3 bench/stem_probe.py > "$OUTDIR/probe.txt" 2>&1
OUT="$OUTDIR" SESSION_SECONDS=0 SESSION_COMPILE="" SESSION_PRECISIONS="bf16 f16" \
  scripts/gpu-conv-engines-session.sh > /dev/null 2>&1
status=$?
{ echo "== stem probe"; cat "$OUTDIR/probe.txt"; } | tee -a "$LOG"
rm -f "$OUTDIR/probe.txt"  # at most 8 files come back from a call
[ -x build-gpu/train_step_bench ] || exit 1

PROFILE_KINDS=ncu PROFILE_MODEL=resnet18 PROFILE_PRECISIONS=bf16 OUT="$OUTDIR/profile" \
  scripts/gpu-profile.sh > /dev/null 2>&1 || status=1
{
  echo "== ncu, one eager bf16 step (at $(since))"
  head -8 "$OUTDIR/profile/profile-frugal-bf16.txt"
  grep -E "input_kernel|weights_kernel|weight_grad_kernel|fprop|wgrad" \
    "$OUTDIR/profile/profile-frugal-bf16.txt" | head -24
} 2>&1 | tee -a "$LOG"

left=$(( ${STEM_SECONDS:-560} - ($(date +%s) - start) ))
if [ "$left" -gt 60 ]; then
  OUT="$OUTDIR/autotune" AUTOTUNE_SECONDS=$left scripts/gpu-autotune.sh resnet18:bf16 2>&1 |
    grep '^==' | tee -a "$LOG"
fi
echo "== end at $(since)" | tee -a "$LOG"
exit $status
