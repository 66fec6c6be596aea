#!/usr/bin/env bash
# Installs what is missing, builds frugal (with the CUDA backend when the toolkit is found),
# runs every test through CTest (GPU tests, label `gpu`, skip cleanly without a device), then
# installs frugal into build/install and builds and runs examples/consumer against it, as a
# project using find_package(frugal) would.
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
