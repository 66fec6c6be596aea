#!/usr/bin/env bash
# The same train_step_bench rows from this tree's build ("${BUILD_DIR:-build-gpu}", built here when
# it is not yet) and from an earlier commit's, in one device call, each round in the other order,
# so that a change in speed or memory is measured against the same machine state. BASE_TAR is a `git archive` of the earlier
# commit, carried to the device; ROWS are MODEL:PRECISION[:extra,args] at batch 128, 3x224x224.
#   git archive -o .devicelib/base.tar 631cd95
#   BASE_TAR=.devicelib/base.tar ROWS="resnet18:f16 resnet18:f32" ROUNDS=2 scripts/gpu-compare-base.sh
# Prints one line per run; JSON lines go to "$OUT/compare.jsonl" with "build" set to new or base.
# Exits 1 when a build or a run fails.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUTDIR="${OUT:-/tmp}"
BUILD="${BUILD_DIR:-build-gpu}"  # gpu-build.sh's
ROUNDS="${ROUNDS:-2}"
STEPS="${STEPS:-10}"
status=0
[ -r "${BASE_TAR:-}" ] || { echo "BASE_TAR '${BASE_TAR:-}' is not readable (carry .devicelib?)"; exit 1; }
mkdir -p "$OUTDIR"
# This tree's bench: nothing to do when an earlier call of a warm machine built it.
scripts/gpu-build.sh train_step_bench > "$OUTDIR/new-build.log" 2>&1 ||
  { tail -30 "$OUTDIR/new-build.log"; exit 1; }
# Another tarball than the one built last: start its tree and build afresh (git archive dates
# every file at its commit, older than the objects, so ninja would keep the old base's).
sum=$(cksum < "$BASE_TAR")
if [ "$(cat build-base/.tarsum 2> /dev/null)" != "$sum" ]; then rm -rf base-src build-base; fi
mkdir -p base-src
tar -xf "$BASE_TAR" -C base-src
start=$(date +%s)
(cmake -S base-src -B build-base -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
   -DFRUGAL_BUILD_TESTS=OFF > /dev/null &&
 cmake --build build-base -j16 --target train_step_bench > "$OUTDIR/base-build.log" 2>&1) ||
  { tail -30 "$OUTDIR/base-build.log"; exit 1; }
echo "$sum" > build-base/.tarsum
echo "== base build $(( $(date +%s) - start )) s"
for round in $(seq "$ROUNDS"); do
  order="new base"
  [ $((round % 2)) -eq 0 ] && order="base new"  # neither always runs first
  for row in ${ROWS:-resnet18:f16}; do
    IFS=: read -r model precision extra <<< "$row"
    for build in $order; do
      dir="$BUILD"
      [ "$build" = base ] && dir=build-base
      if ! line=$("$dir/train_step_bench" --device cuda --model "$model" --batch 128 --input 3x224x224 \
        --classes 1000 --precision "$precision" --warmup 5 --steps "$STEPS" --json \
        ${extra//,/ } 2>> "$OUTDIR/compare-stderr.log") || [ -z "$line" ]; then
        echo "$build $row: FAILED"
        tail -5 "$OUTDIR/compare-stderr.log"
        status=1
        continue
      fi
      # Printed, then kept, only when it reads as JSON: a run that printed something else failed.
      if python3 -c 'import json,sys; r=json.loads(sys.argv[1]); M=2**20
print("%-5s %-28s %9.1f img/s  allocated %8.1f MiB  reserved %8.1f MiB  ratio %.3f" % (sys.argv[2], sys.argv[3],
      r["img_per_s"], r["peak_allocated_bytes"]/M, r["peak_reserved_bytes"]/M, r["peak_reserved_bytes"]/r["peak_allocated_bytes"]))' \
        "$line" "$build" "$row"; then
        echo "{\"build\": \"$build\", \"round\": $round, \"row\": \"$row\", \"run\": $line}" >> "$OUTDIR/compare.jsonl"
      else
        echo "$build $row: no result"
        status=1
      fi
    done
  done
done
exit $status
