#!/usr/bin/env bash
# Installs what is missing, builds frugal (with the CUDA backend when the toolkit is found),
# runs every test through CTest (GPU tests, label `gpu`, skip cleanly without a device), then
# installs frugal into build/install and builds and runs examples/consumer against it, as a
# project using find_package(frugal) would, and once more with frugal as its subdirectory; last,
# the CPU tests again under AddressSanitizer and UndefinedBehaviorSanitizer
# (scripts/sanitize-cpu.sh, its own build directory, build-asan).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh dataset-fashion-mnist
jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFRUGAL_BUILD_TESTS=ON
cmake --build build -j"$jobs"
(cd build && ctest --output-on-failure -j"$jobs")
cmake --install build --prefix build/install > /dev/null
cmake -S examples/consumer -B build/consumer -G Ninja -DCMAKE_PREFIX_PATH="$PWD/build/install"
cmake --build build/consumer -j"$jobs"
build/consumer/consumer
# The same project with frugal as a subdirectory (add_subdirectory / FetchContent): the
# libraries build inside the consumer's tree, without frugal's tests and programs.
cmake -S examples/consumer -B build/consumer-subdir -G Ninja -DFRUGAL_SOURCE_DIR="$PWD" > /dev/null
cmake --build build/consumer-subdir -j"$jobs"
build/consumer-subdir/consumer
# A CPU-only build with ASan and UBSan, and the CI-sized test job under it.
scripts/sanitize-cpu.sh
