#!/usr/bin/env bash
# Soak: STEPS (2,000) steps of MobileNetV2 training in f16 on synthetic data, once eager and once
# replayed from CUDA graphs (--graph), with the memory monitor's log (allocated and reserved at
# every step point, host RSS at every step end; the run drawn in soak-MODE.svg). Then
# scripts/soak-check.awk: after WARMUP (50) steps neither allocated nor reserved may grow by more
# than one allocator block (BLOCK_MIB, 20: the caching allocator's shared segment,
# kMidSegmentBytes) and RSS by no more than RSS_TOLERANCE_MIB (16); every loss must be finite.
# Exit status 1 otherwise.
#   OUT=/tmp/soak scripts/soak.sh                      # on the GPU machine (builds build-gpu)
#   STEPS=90 STEPS_PER_EPOCH=30 WARMUP=10 DEVICE=cpu BATCH=8 WIDTH=0.25 LR=0.01 scripts/soak.sh
#                                                      # the script's logic on a CPU, 15 s
# Each epoch has STEPS_PER_EPOCH (200) steps, so that epoch ends (evaluation, a new capture
# under --graph) recur inside the run; the check's baseline window is one epoch and two steps
# after warm-up, so it holds one epoch end.
set -u -o pipefail
cd "$(dirname "$0")/.."
STEPS="${STEPS:-2000}"
DEVICE="${DEVICE:-cuda}"
BATCH="${BATCH:-128}"
IMAGE="${IMAGE:-32}"
WIDTH="${WIDTH:-1.0}"
LR="${LR:-0.05}"
WARMUP="${WARMUP:-50}"
BLOCK_MIB="${BLOCK_MIB:-20}"
RSS_TOLERANCE_MIB="${RSS_TOLERANCE_MIB:-16}"
OUTDIR="${OUT:-/tmp/soak}"
MODES="${MODES:-eager graph}"
if [ "$DEVICE" = cpu ]; then
  BUILD="${BUILD:-build}"
  MODES="${MODES/graph/}"  # CUDA graphs need a GPU; on the CPU the eager run only
else
  BUILD="${BUILD:-build-gpu}"
fi
mkdir -p "$OUTDIR"

if [ ! -x "$BUILD/frugal" ]; then
  echo "== building $BUILD/frugal"
  (cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null &&
   cmake --build "$BUILD" --target frugal_tool -j"$(nproc)" > "$OUTDIR/build.log" 2>&1) ||
    { grep -E "error|FAILED" "$OUTDIR/build.log" | head -30; exit 1; }
fi

per_epoch="${STEPS_PER_EPOCH:-200}"
[ "$STEPS" -lt "$per_epoch" ] && per_epoch="$STEPS"
epochs=$(( (STEPS + per_epoch - 1) / per_epoch ))
window=$(( per_epoch + 2 ))
[ "$epochs" -lt 2 ] && window=$(( (STEPS - WARMUP) / 2 ))  # one epoch: half of what is left
status=0
for mode in $MODES; do
  flags=()
  [ "$mode" = graph ] && flags=(--graph)
  log="$OUTDIR/soak-$mode.csv"
  echo "== soak $mode: $((epochs * per_epoch)) steps of mobilenet_v2 (width $WIDTH) f16, batch $BATCH, ${IMAGE}x$IMAGE, on $DEVICE"
  start=$(date +%s)
  if ! "$BUILD/frugal" train --model mobilenet_v2 --data synthetic --device "$DEVICE" \
      --precision f16 --batch "$BATCH" --image-size "$IMAGE" --width "$WIDTH" --lr "$LR" \
      --limit $((BATCH * per_epoch)) --test-limit "$BATCH" --epochs "$epochs" --workers 2 \
      --seed 0 --memory-log "$log" --memory-svg "$OUTDIR/soak-$mode.svg" "${flags[@]}" \
      > "$OUTDIR/soak-$mode.log" 2>&1; then
    echo "soak $mode: frugal train failed:"
    tr '\r' '\n' < "$OUTDIR/soak-$mode.log" | grep -v '\[' | tail -20
    status=1
    continue
  fi
  echo "   $(( $(date +%s) - start )) s; $(grep -c ',step_end,' "$log") step ends logged in $log"
  awk -v warmup="$WARMUP" -v window="$window" -v block=$((BLOCK_MIB << 20)) \
      -v rss_tol=$((RSS_TOLERANCE_MIB << 20)) -f scripts/soak-check.awk "$log" || status=1
  # "epoch 3/10: train loss 2.3021, ...": every epoch's mean loss is a finite number, and so is
  # every loss the progress lines show ("epoch 3/10 [==  ] 17/200 loss 2.3104 | ...").
  tr '\r' '\n' < "$OUTDIR/soak-$mode.log" | awk -v want="$epochs" '
    / loss -?(nan|inf)/ { bad++; if (bad < 5) printf "soak-check: %s\n", $0 }
    /^epoch [0-9]+\/[0-9]+: train loss/ {
      n++
      v = $5; sub(/,$/, "", v)
      if (v !~ /^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$/) { bad++; printf "soak-check: %s\n", $0 }
    }
    END {
      ok = !bad && n == want
      printf "soak-check: loss      %s: %d of %d epochs reported, %d non-finite losses seen\n",
             ok ? "finite" : "BAD", n, want, bad
      exit ok ? 0 : 1
    }' || status=1
done
[ "$status" = 0 ] && echo "== soak passed" || echo "== soak FAILED"
exit "$status"
