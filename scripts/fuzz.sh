#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ in build-fuzz (clang, ASan + UBSan, CPU only), makes
# their seed corpora from real files, runs each for SECONDS and prints its executions. A crash,
# leak, timeout or unclear error stops that target; its input is left in build-fuzz/crashes/.
# Not part of CI (see fuzz/README.md).
#
#   scripts/fuzz.sh 300          # five minutes per target
#   FRUGAL_FUZZ_JOBS=2 scripts/fuzz.sh 60
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:?usage: scripts/fuzz.sh SECONDS}
build=build-fuzz
targets=(idx_fuzz safetensors_fuzz checkpoint_fuzz)
launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DFRUGAL_CUDA=OFF -DFRUGAL_FUZZ=ON -DFRUGAL_BUILD_TESTS=OFF -DFRUGAL_BUILD_PROGRAMS=OFF \
  "${launcher[@]}" > /dev/null
cmake --build "$build" -j"${FRUGAL_FUZZ_JOBS:-$(nproc)}" --target "${targets[@]}" checkpoint_seed

# Seeds: the first images and labels of Fashion-MNIST's test files, raw and gzip'd; the golden
# safetensors files (the large one cut after its header); checkpoints saved by frugal itself.
seeds=$build/seeds
rm -rf "$seeds"
mkdir -p "$seeds"/{idx_fuzz,safetensors_fuzz,checkpoint_fuzz}
python3 - "${FRUGAL_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}" "$seeds/idx_fuzz" <<'PY'
import gzip, struct, sys
src, out = sys.argv[1], sys.argv[2]
for name, header, item in (("t10k-images-idx3-ubyte", 16, 28 * 28), ("t10k-labels-idx1-ubyte", 8, 1)):
    with gzip.open(f"{src}/{name}.gz", "rb") as f:
        head = f.read(header + 2 * item)
    first_two = head[:4] + struct.pack(">I", 2) + head[8:]   # the count says 2
    open(f"{out}/{name}-2", "wb").write(first_two)
    open(f"{out}/{name}-2.gz", "wb").write(gzip.compress(first_two, mtime=0))
PY
cp tests/golden/mobilenet_v2_w025_io.safetensors "$seeds/safetensors_fuzz/"
golden=tests/golden/mobilenet_v2_w025.safetensors
header_len=$(od -An -t u8 -N 8 "$golden" | tr -d ' ')
head -c $((8 + header_len + 64)) "$golden" > "$seeds/safetensors_fuzz/mobilenet_v2_w025_header"
"$build/fuzz/checkpoint_seed" "$seeds/checkpoint_fuzz"
cp "$seeds"/checkpoint_fuzz/* "$seeds/safetensors_fuzz/"

declare -A max_len=([idx_fuzz]=8192 [safetensors_fuzz]=65536 [checkpoint_fuzz]=65536)
declare -A dict=([idx_fuzz]="" [safetensors_fuzz]=-dict=fuzz/safetensors.dict
                 [checkpoint_fuzz]=-dict=fuzz/safetensors.dict)
# A smaller quarantine and shorter allocation stacks than ASan's defaults: about 3x the
# executions per second (the readers allocate a lot), use-after-free still caught while recent.
export ASAN_OPTIONS=${ASAN_OPTIONS:-quarantine_size_mb=16:malloc_context_size=4}
export OMP_NUM_THREADS=1  # the loaders' tensors are tiny; no thread pool per input
status=0
summary=""
for t in "${targets[@]}"; do
  corpus=$build/corpus/$t
  mkdir -p "$corpus" "$build/crashes/$t" "$build/logs"
  echo "== $t: $seconds s" >&2
  rc=0
  # -timeout: an input taking over 10 s counts as a hang; -rss_limit_mb bounds memory per input.
  "$build/fuzz/$t" "$corpus" "$seeds/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len="${max_len[$t]}" ${dict[$t]} -print_final_stats=1 \
    -artifact_prefix="$build/crashes/$t/" > "$build/logs/$t.log" 2>&1 || rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$build/logs/$t.log" | grep -o '[0-9]*$' || echo "?")
  if [ "$rc" -ne 0 ]; then
    status=1
    tail -n 40 "$build/logs/$t.log" >&2
    summary+="$t: FAILED (exit $rc) after $execs executions, see $build/logs/$t.log"$'\n'
  else
    summary+="$t: $execs executions in $seconds s, no crash"$'\n'
  fi
done
printf '%s' "$summary"
exit $status
