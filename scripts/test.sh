#!/usr/bin/env bash
# Installs what is missing, builds frugal (with the CUDA backend when the toolkit is found) and
# runs every test through CTest. GPU tests (label `gpu`) skip cleanly without a device.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh dataset-fashion-mnist
jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFRUGAL_BUILD_TESTS=ON
cmake --build build -j"$jobs"
cd build
ctest --output-on-failure -j"$jobs"
