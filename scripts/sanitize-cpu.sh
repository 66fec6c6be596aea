#!/usr/bin/env bash
# The CPU test suite under AddressSanitizer and UndefinedBehaviorSanitizer: a CPU-only build
# (-DFRUGAL_CUDA=OFF) in its own directory (build-asan, so the normal build's flags stay as they
# are), -O1 -g, every sanitizer report fatal, then the CI-sized test job below through CTest.
# It is also built without oneDNN (-DFRUGAL_ONEDNN=OFF): the normal build multiplies the CPU
# GEMMs with oneDNN where it is installed, so this job is where the Eigen paths that replace it
# elsewhere (Note [oneDNN GEMMs]) run their tests.
# scripts/test.sh runs it after the normal suite.
#   scripts/sanitize-cpu.sh            # SANITIZE_TESTS=all: every CPU test, whatever it costs
#
# The CI-sized job (SANITIZE_TESTS=ci, the default): every CPU test but those that train whole
# models (MobileNetV2 and the zoo) step after step: the precision comparison, the memory
# estimates and budget, micro-batches, the fault-injection sweeps (a thousand steps each), the
# determinism runs, recomputed convolutions, the model zoo's layouts and gradient check. They run
# the kernels, autograd and allocators that the remaining tests cover op by op, many times over,
# and would take most of CI's time under ASan's 2-4x; SANITIZE_EXCLUDE is their ctest regex.
# Measured on a 2-core machine shared with other builds (load 13): compiling the sanitized
# libraries and test programs took about 28 CPU-minutes (so about 14 minutes of CI's 2 cores,
# less without the contention); the CI-sized job ran in about 2 minutes as one process per test
# program (base 1 s, core 12, data 23, kernels 35, memory 5, optim 0.4, nn 32, examples 0.7,
# train 6), ctest's process per test adds a little to that.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${SANITIZE_BUILD:-build-asan}"
jobs=$(nproc)
flags="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all"
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# Build type "Sanitize": none of CMakeLists.txt's per-type flags (Release's -O3 -DNDEBUG), so the
# flags above are all; asserts stay on.
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Sanitize -DFRUGAL_CUDA=OFF -DFRUGAL_ONEDNN=OFF \
  -DFRUGAL_BUILD_TESTS=ON -DFRUGAL_BUILD_PROGRAMS=OFF "${launcher[@]}" \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" > /dev/null
cmake --build "$BUILD" -j"$jobs"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
heavy="^(PrecisionCompare|MemoryBudget|MemoryEstimate|SavedEstimate|MicroBatches|FaultInjection"
heavy+="|RecomputedConv|ModelGradCheck|GoldenTorchvision)\\.|^StepPlanner\\.(Zoo|TheMetaTrace)"
heavy+="|^Checkpoint\\.EveryZooModel|^Determinism\\.TwoCpuRuns|Layout$"
exclude="${SANITIZE_EXCLUDE:-$heavy}"
if [ "${SANITIZE_TESTS:-ci}" = all ]; then exclude=""; fi
args=(-L cpu --output-on-failure -j"$jobs" --timeout 900)
[ -n "$exclude" ] && args+=(-E "$exclude")
(cd "$BUILD" && ctest "${args[@]}")
