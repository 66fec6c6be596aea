#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ in build-fuzz (clang, ASan + UBSan, CPU only), makes
# their seed corpora from real files, runs each for SECONDS and prints its executions. A crash,
# leak, timeout or unclear error stops that target; its input is left in build-fuzz/crashes/.
# The command-line parsers' target (cli_fuzz) runs too, through scripts/fuzz-cli.sh (its own
# project in fuzz/cli, build-fuzz-cli; crashes in build-fuzz-cli/). Not part of CI (see
# fuzz/README.md).
#
#   scripts/fuzz.sh 300                      # five minutes per target
#   scripts/fuzz.sh 900 checkpoint_fuzz      # one target (idx_fuzz, safetensors_fuzz, checkpoint_fuzz,
#                                            # cli_fuzz: the command-line parsers, through
#                                            # scripts/fuzz-cli.sh and its own build-fuzz-cli)
#   FRUGAL_FUZZ_PARALLEL=1 scripts/fuzz.sh 900  # the targets side by side, a core each
#   FRUGAL_FUZZ_JOBS=2 scripts/fuzz.sh 60       # build with 2 jobs
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:?usage: scripts/fuzz.sh SECONDS [TARGET...]}
shift
build=build-fuzz
reader_targets=(idx_fuzz safetensors_fuzz checkpoint_fuzz)  # built here, in build-fuzz
all_targets=("${reader_targets[@]}" cli_fuzz)
targets=("${all_targets[@]}")
if [ $# -gt 0 ]; then targets=("$@"); fi
launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DFRUGAL_CUDA=OFF -DFRUGAL_FUZZ=ON -DFRUGAL_BUILD_TESTS=OFF -DFRUGAL_BUILD_PROGRAMS=OFF \
  "${launcher[@]}" > /dev/null
cmake --build "$build" -j"${FRUGAL_FUZZ_JOBS:-$(nproc)}" --target "${reader_targets[@]}" checkpoint_seed

# Seeds: the first images and labels of Fashion-MNIST's test files, raw and gzip'd; the golden
# safetensors files' first tensors; a checkpoint and a model saved by frugal itself.
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
# The golden files are cut to their first tensors (a valid file of a few KB: small inputs keep
# the executions per second up).
python3 - "$seeds/safetensors_fuzz" tests/golden/*.safetensors <<'PY'
import json, os, struct, sys
out = sys.argv[1]
for path in sys.argv[2:]:
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    entries = sorted((v["data_offsets"][0], k) for k, v in header.items() if k != "__metadata__")
    kept, blob = {}, b""
    for begin, name in entries:
        e = header[name]
        piece = data[e["data_offsets"][0]:e["data_offsets"][1]]
        if len(kept) == 6:
            break
        if len(blob) + len(piece) > 2048:
            continue
        kept[name] = dict(e, data_offsets=[len(blob), len(blob) + len(piece)])
        blob += piece
    if "__metadata__" in header:
        kept["__metadata__"] = header["__metadata__"]
    text = json.dumps(kept, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)
    name = os.path.basename(path).replace(".safetensors", "-first-tensors.safetensors")
    open(f"{out}/{name}", "wb").write(struct.pack("<Q", len(text)) + text.encode() + blob)
PY
"$build/fuzz/checkpoint_seed" "$seeds/checkpoint_fuzz"
cp "$seeds"/checkpoint_fuzz/* "$seeds/safetensors_fuzz/"

declare -A max_len=([idx_fuzz]=8192 [safetensors_fuzz]=8192 [checkpoint_fuzz]=8192)
declare -A dict=([idx_fuzz]="" [safetensors_fuzz]=-dict=fuzz/safetensors.dict
                 [checkpoint_fuzz]=-dict=fuzz/safetensors.dict)
# A smaller quarantine and shorter allocation stacks than ASan's defaults: about 3x the
# executions per second (the readers allocate a lot), use-after-free still caught while recent.
export ASAN_OPTIONS=${ASAN_OPTIONS:-quarantine_size_mb=16:malloc_context_size=4}
export OMP_NUM_THREADS=1  # the loaders' tensors are tiny; no thread pool per input
# One target: its log, then a line for the summary in $build/logs/<target>.summary.
run_target() {
  local t=$1 rc=0 execs
  if [ "$t" = cli_fuzz ]; then  # its own project, build and corpus (scripts/fuzz-cli.sh)
    scripts/fuzz-cli.sh "$seconds" > "$build/logs/$t.log" 2>&1 || rc=$?
  else
    mkdir -p "$build/corpus/$t" "$build/crashes/$t"
    # -timeout: an input taking over 10 s counts as a hang; -rss_limit_mb bounds memory per input.
    "$build/fuzz/$t" "$build/corpus/$t" "$seeds/$t" -max_total_time="$seconds" -timeout=10 \
      -rss_limit_mb=2048 -max_len="${max_len[$t]}" ${dict[$t]} -print_final_stats=1 \
      -artifact_prefix="$build/crashes/$t/" > "$build/logs/$t.log" 2>&1 || rc=$?
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$build/logs/$t.log" | grep -o '[0-9]*$' || echo "?")
  if [ "$rc" -ne 0 ]; then
    tail -n 40 "$build/logs/$t.log" >&2
    echo "$t: FAILED (exit $rc) after $execs executions, see $build/logs/$t.log" > "$build/logs/$t.summary"
  else
    echo "$t: $execs executions in $seconds s, no crash" > "$build/logs/$t.summary"
  fi
  return "$rc"
}

# FRUGAL_FUZZ_PARALLEL=1 runs the targets at the same time (one core each) instead of in turn.
mkdir -p "$build/logs"
status=0
pids=()
for t in "${targets[@]}"; do
  echo "== $t: $seconds s" >&2
  if [ "${FRUGAL_FUZZ_PARALLEL:-0}" = 1 ]; then
    run_target "$t" &
    pids+=($!)
  else
    run_target "$t" || status=1
  fi
done
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
for t in "${targets[@]}"; do cat "$build/logs/$t.summary"; done
exit $status
