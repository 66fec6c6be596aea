#!/usr/bin/env bash
# Builds the command-line parser's libFuzzer target (fuzz/cli) with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer, CPU only, in build-fuzz-cli/, and fuzzes it for SECONDS (default
# 60) from the seed corpus. New inputs go to build-fuzz-cli/corpus; a crash is written to
# build-fuzz-cli/crash-* and fails the script. Usage: scripts/fuzz-cli.sh [SECONDS] [-- libFuzzer flags]
# FRUGAL_FUZZ_JOBS=N builds with N jobs (default: one per core), as scripts/fuzz.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
[[ ${1:-} == "--" ]] && shift
build=build-fuzz-cli
sanitizers="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S fuzz/cli -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link $sanitizers" \
  -DCMAKE_EXE_LINKER_FLAGS="$sanitizers" "${launcher[@]}" > /dev/null
cmake --build "$build" --target cli_fuzz -j"${FRUGAL_FUZZ_JOBS:-$(nproc)}"
mkdir -p "$build/corpus"
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# A small quarantine: the default 256 MiB one turns every allocation into fresh pages here.
export ASAN_OPTIONS=detect_leaks=1:quarantine_size_mb=16
"$build/cli_fuzz" "$build/corpus" fuzz/cli/corpus -max_total_time="$seconds" -timeout=10 \
  -rss_limit_mb=2048 -max_len=512 -artifact_prefix="$build/" -print_final_stats=1 "$@"
