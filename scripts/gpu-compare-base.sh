#!/usr/bin/env bash
# The same train_step_bench rows from this tree's build (build-gpu, built already) and from an
# earlier commit's, in one device call, alternating round by round, so that a change in speed or
# memory is measured against the same machine state. BASE_TAR is a `git archive` of the earlier
# commit, carried to the device; ROWS are MODEL:PRECISION[:extra,args] at batch 128, 3x224x224.
#   git archive -o .devicelib/base.tar 631cd95
#   BASE_TAR=.devicelib/base.tar ROWS="resnet18:f16 resnet18:f32" ROUNDS=2 scripts/gpu-compare-base.sh
# Prints one line per run; JSON lines go to "$OUT/compare.jsonl" with "build" set to new or base.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUTDIR="${OUT:-/tmp}"
mkdir -p "$OUTDIR" base-src
ROUNDS="${ROUNDS:-2}"
STEPS="${STEPS:-10}"
tar -xf "$BASE_TAR" -C base-src
start=$(date +%s)
(cmake -S base-src -B build-base -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
   -DFRUGAL_BUILD_TESTS=OFF > /dev/null &&
 cmake --build build-base -j16 --target train_step_bench > "$OUTDIR/base-build.log" 2>&1) ||
  { tail -30 "$OUTDIR/base-build.log"; exit 1; }
echo "== base build $(( $(date +%s) - start )) s"
for round in $(seq "$ROUNDS"); do
  for row in ${ROWS:-resnet18:f16}; do
    IFS=: read -r model precision extra <<< "$row"
    for build in new base; do
      dir=build-gpu
      [ "$build" = base ] && dir=build-base
      line=$("$dir/train_step_bench" --device cuda --model "$model" --batch 128 --input 3x224x224 \
        --classes 1000 --precision "$precision" --warmup 5 --steps "$STEPS" --json \
        ${extra//,/ } 2>> "$OUTDIR/compare-stderr.log")
      echo "{\"build\": \"$build\", \"round\": $round, \"row\": \"$row\", \"run\": $line}" >> "$OUTDIR/compare.jsonl"
      python3 -c 'import json,sys; r=json.loads(sys.argv[1]); M=2**20
print("%-5s %-28s %9.1f img/s  allocated %8.1f MiB  reserved %8.1f MiB  ratio %.3f" % (sys.argv[2], sys.argv[3],
      r["img_per_s"], r["peak_allocated_bytes"]/M, r["peak_reserved_bytes"]/M, r["peak_reserved_bytes"]/r["peak_allocated_bytes"]))' \
        "$line" "$build" "$row" || echo "$build $row: no result"
    done
  done
done
