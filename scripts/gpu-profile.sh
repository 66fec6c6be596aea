#!/usr/bin/env bash
# Where the GPU time of one training step of PROFILE_MODEL (default mobilenet_v2) goes, frugal
# beside PyTorch: ncu times every
# kernel of frugal's last timed step (train_step_bench --profile), torch.profiler every kernel of
# one PyTorch step; both summed by kernel name into "${OUT:-/tmp}/profile-<impl>-<precision>.txt".
# PROFILE_KINDS="host" skips ncu and PyTorch and writes only the host-side profile of frugal's
# timed steps (FRUGAL_HOST_PROFILE=1, kernels/host_profile.h) to profile-host-<precision>.txt.
#   PROFILE_PRECISIONS="f32 bf16" PROFILE_CASE="128 3x224x224 1000" scripts/gpu-profile.sh
# PROFILE_DRAM=1 also sums each kernel's HBM bytes (bench/ncu_summary.py: the traffic bound).
# PROFILE_TORCH_NCU="none default" adds the same ncu summary of one PyTorch step for each
# torch.compile mode listed ("none": eager), after its warm-up.
# PROFILE_RANGE=1 adds, for frugal and each PROFILE_TORCH_NCU mode, the same step measured as one
# range (ncu --replay-mode app-range) into profile-<impl>-range-<precision>.txt: its duration and
# HBM bytes as its kernels run back to back, each finding in L2 what the one before left there,
# where the per-kernel replay flushes the caches before every kernel and sums the kernels alone.
# PROFILE_COPY_BOUND=1 (which takes the DRAM metrics too) also runs build-gpu/copy_curve_probe under the same
# ncu and sets each step's launches against plain copies of their bytes (bench/copy_bound.py,
# Note [The copy bound]) into copy-bound-<impl>-<precision>.txt; build the probe first:
#   scripts/gpu-build.sh train_step_bench copy_curve_probe
# PROFILE_KERNEL=REGEX instead takes ncu's detailed sections (speed of light, occupancy, warp
# stall reasons, pipe utilization, memory workload) for the first PROFILE_COUNT (default 3)
# launches of the step's kernels whose names match REGEX, after PROFILE_SKIP (default 0) of them,
# into profile-kernel-<precision>.txt: why a kernel that moves few bytes a second is slow.
#   PROFILE_KERNEL=forward_strip PROFILE_SKIP=4 PROFILE_PRECISIONS=f16 scripts/gpu-profile.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD_DIR:-build-gpu}"
OUTDIR="${OUT:-/tmp}"
mkdir -p "$OUTDIR"
read -r batch input classes <<< "${PROFILE_CASE:-128 3x224x224 1000}"
status=0

# ncu with $metrics over the profiled range of the command after CSV, its log into CSV; the
# command's own output on stdout. --clock-control none: leave the clocks as the benchmark sees
# them (the device tool's METHOD.md). replay=app-range before the call: the profiled range as one
# range instead of kernel by kernel.
ncu_log() {
  local csv=$1
  shift
  ncu --clock-control none --profile-from-start off --replay-mode "${replay:-kernel}" \
    --metrics "$metrics" --csv --print-units base --log-file "$csv" "$@"
}

# One ncu_log of the command after NAME, summed by bench/ncu_summary.py into
# "$OUTDIR/profile-NAME.txt"; fails, saying so with the last lines ncu and the command wrote to
# stderr (kept in "$OUTDIR/ncu-NAME.err"), where ncu does. Session 36's app-range runs failed
# with nothing to say why: their stderr was lost in a long output's middle.
ncu_summary() {
  local name=$1 csv="$OUTDIR/ncu-$1.csv" err="$OUTDIR/ncu-$1.err" mode=${replay:-kernel}
  shift
  if ! ncu_log "$csv" "$@" > /dev/null 2> "$err"; then
    echo "ncu failed for $name; the end of its stderr ($err):"
    tail -8 "$err"
    return 1
  fi
  rm -f "$err"
  local ranges=()
  [ "$mode" = kernel ] || ranges=(--ranges)
  python3 bench/ncu_summary.py "$csv" --top 60 "${ranges[@]}" > "$OUTDIR/profile-$name.txt" ||
    status=1
  if [ "${PROFILE_COPY_BOUND:-0}" = 1 ] && [ "$mode" = kernel ]; then
    copy_bound "$name" "$csv"
  fi
  rm -f "$csv"
}

# The step of ncu log $2 against plain copies of its launches' bytes (bench/copy_bound.py), the
# copies timed once a run by the same ncu metrics; into copy-bound-NAME.txt.
copy_csv="$OUTDIR/ncu-copy-curve.csv"
copy_bound() {
  if [ ! -s "$copy_csv" ]; then
    replay=kernel ncu_log "$copy_csv" "$BUILD/copy_curve_probe" > "$OUTDIR/copy-curve.txt" ||
      { echo "ncu failed for copy_curve_probe"; status=1; return; }
  fi
  python3 bench/copy_bound.py "$2" "$copy_csv" > "$OUTDIR/copy-bound-$1.txt" || status=1
  head -3 "$OUTDIR/copy-bound-$1.txt"
}

for p in ${PROFILE_PRECISIONS:-f32 f16 bf16}; do
  args=(--device cuda --model "${PROFILE_MODEL:-mobilenet_v2}" --batch "$batch" --input "$input"
        --classes "$classes" --precision "$p"
        --warmup 3 --steps 2)
  if [ -n "${PROFILE_KERNEL:-}" ]; then
    out="$OUTDIR/profile-kernel-$p.txt"
    ncu --clock-control none --profile-from-start off -k "regex:$PROFILE_KERNEL" \
      --launch-skip "${PROFILE_SKIP:-0}" --launch-count "${PROFILE_COUNT:-3}" \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --section ComputeWorkloadAnalysis --section InstructionStats \
      --section MemoryWorkloadAnalysis --section SchedulerStats \
      "$BUILD/train_step_bench" "${args[@]}" --profile > "$out" 2>&1 ||
      { echo "ncu failed for $p"; status=1; continue; }
    # each launch's name line, then the lines that say where its time goes
    grep -E "^  [^ ].*\(|Duration|Throughput|Registers Per|Occupancy|[Ss]tall|Issued Warp|Eligible|[Pp]ipe|Ipc|Hit Rate|Bank|Issue Slots|WRN|OPT" \
      "$out" | cut -c1-150 | head -200
    continue
  fi
  if [[ " ${PROFILE_KINDS:-ncu host} " == *" host "* ]]; then
    FRUGAL_HOST_PROFILE=1 "$BUILD/train_step_bench" "${args[@]}" --steps 30 --warmup 10 \
      2> "$OUTDIR/profile-host-$p.txt" | grep -o '"median_ms":[0-9.]*' >> "$OUTDIR/profile-host-$p.txt"
    head -25 "$OUTDIR/profile-host-$p.txt"
  fi
  [[ " ${PROFILE_KINDS:-ncu host} " == *" ncu "* ]] || continue
  metrics=gpu__time_duration.sum
  # PROFILE_DRAM=1 adds the bytes each kernel moved to and from HBM (the step's traffic bound in
  # the summary); the extra counters cost ncu replay passes, not kernel time.
  if [ "${PROFILE_DRAM:-0}" = 1 ] || [ "${PROFILE_COPY_BOUND:-0}" = 1 ]; then
    metrics="$metrics,dram__bytes_read.sum,dram__bytes_write.sum"
  fi
  ncu_summary "frugal-$p" "$BUILD/train_step_bench" "${args[@]}" --profile ||
    { status=1; continue; }
  if [ "${PROFILE_RANGE:-0}" = 1 ]; then
    replay=app-range ncu_summary "frugal-range-$p" "$BUILD/train_step_bench" "${args[@]}" \
      --profile && head -3 "$OUTDIR/profile-frugal-range-$p.txt"
  fi
  # PROFILE_TORCH_NCU="none default ...": the same ncu over one PyTorch step per torch.compile
  # mode ("none" is eager), the step after its warm-up and timed steps (--ncu-range), so that
  # PyTorch's kernel time and HBM bound are measured exactly as frugal's.
  for mode in ${PROFILE_TORCH_NCU:-}; do
    ncu_summary "torch-$mode-$p" env TORCHINDUCTOR_COMPILE_THREADS=1 \
      python3 bench/torch_train_step.py "${args[@]}" --compile "$mode" --ncu-range ||
      { status=1; continue; }
    head -8 "$OUTDIR/profile-torch-$mode-$p.txt"
    if [ "${PROFILE_RANGE:-0}" = 1 ]; then
      replay=app-range ncu_summary "torch-$mode-range-$p" env TORCHINDUCTOR_COMPILE_THREADS=1 \
        python3 bench/torch_train_step.py "${args[@]}" --compile "$mode" --ncu-range &&
        head -3 "$OUTDIR/profile-torch-$mode-range-$p.txt"
    fi
  done
  python3 bench/torch_train_step.py "${args[@]}" --profile 2>&1 > /dev/null |
    grep -v -i "warn" > "$OUTDIR/profile-pytorch-$p.txt" || status=1
  head -25 "$OUTDIR/profile-frugal-$p.txt" "$OUTDIR/profile-pytorch-$p.txt"
done
exit $status
