#!/usr/bin/env bash
# Configures and builds "${BUILD_DIR:-build-gpu}" the way every scripts/gpu-*.sh device call
# does: Release, Ninja, CUDA for sm_90 (the H200), all of the machine's cores. The targets given
# are built alone; none builds everything. Prints what cmake and ninja print, for the caller to
# log, and fails as they do.
#   scripts/gpu-build.sh [TARGET...]
set -u -o pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD_DIR:-build-gpu}"
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 &&
  cmake --build "$BUILD" -j"$(nproc)" "${targets[@]}"
