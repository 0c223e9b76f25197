#!/usr/bin/env bash
# Installs what kforge needs that this Debian/Ubuntu machine lacks, then builds it.
# Usage: scripts/setup.sh            (as root, or with sudo available)
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(build-essential cmake pkg-config libjansson-dev libopenblas-dev libcriterion-dev valgrind
      ocl-icd-opencl-dev opencl-c-headers pocl-opencl-icd clinfo libcurl4-openssl-dev python3)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
make -s all
echo "setup: built build/kforge"
