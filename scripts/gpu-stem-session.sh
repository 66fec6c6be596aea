#!/usr/bin/env bash
# One device call for ResNet's 16-bit stem (Note [Few-channel stems as patch GEMMs] in
# kernels/cuda/patch_gemm_conv.h; issue 16's ResNet-18 against torch.compile):
#   1. build build-gpu and run the gpu tests, then ResNet-18 replayed beside PyTorch's replayed
#      step in bf16 and f16 (scripts/gpu-conv-engines-session.sh, no compile column);
#   2. frugal's replayed bf16 step at each FRUGAL_PATCH_CHUNK_MIB of STEM_CHUNKS (default "16 64");
#   3. ncu's kernel times of one eager bf16 step (scripts/gpu-profile.sh), and the lines of the
#      stem's kernels: the patch builder, the slice sums and cuBLAS's GEMMs;
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

OUT="$OUTDIR" SESSION_SECONDS=0 SESSION_COMPILE="" SESSION_PRECISIONS="bf16 f16" \
  scripts/gpu-conv-engines-session.sh > /dev/null 2>&1
status=$?
[ -x build-gpu/train_step_bench ] || exit 1

bench=(build-gpu/train_step_bench --device cuda --model resnet18 --batch 128 --input 3x224x224
       --classes 1000 --precision bf16 --warmup 5 --steps 20 --json --graph)
for chunk in ${STEM_CHUNKS:-16 64}; do
  echo "== bf16, FRUGAL_PATCH_CHUNK_MIB=$chunk: $(FRUGAL_PATCH_CHUNK_MIB=$chunk "${bench[@]}" 2>&1 |
    grep -o '"img_per_s":[0-9.]*' | tr '\n' ' ')" | tee -a "$LOG"
done

PROFILE_KINDS=ncu PROFILE_MODEL=resnet18 PROFILE_PRECISIONS=bf16 OUT="$OUTDIR/profile" \
  scripts/gpu-profile.sh > /dev/null 2>&1 || status=1
{
  echo "== ncu, one eager bf16 step (at $(since))"
  head -8 "$OUTDIR/profile/profile-frugal-bf16.txt"
  grep -i -E "patch|slices|gemm|splitK" "$OUTDIR/profile/profile-frugal-bf16.txt" | head -20
} 2>&1 | tee -a "$LOG"

left=$(( ${STEM_SECONDS:-560} - ($(date +%s) - start) ))
if [ "$left" -gt 60 ]; then
  OUT="$OUTDIR/autotune" AUTOTUNE_SECONDS=$left scripts/gpu-autotune.sh resnet18:bf16 2>&1 |
    grep '^==' | tee -a "$LOG"
fi
echo "== end at $(since)" | tee -a "$LOG"
exit $status
