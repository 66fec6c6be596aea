#!/usr/bin/env bash
# Installs the Debian packages frugal needs when any is missing (run as root, or with sudo).
# Usage: scripts/deps.sh [extra packages...]
set -euo pipefail
packages=(cmake ninja-build g++ libeigen3-dev libgtest-dev zlib1g-dev nlohmann-json3-dev libdnnl-dev "$@")
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "frugal: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
