#!/usr/bin/env bash
# Installs what kforge needs that this Debian/Ubuntu machine lacks, then builds it.
# Usage: scripts/setup.sh            (as root, or with sudo available)
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(build-essential cmake pkg-config libjansson-dev libopenblas-dev libcriterion-dev valgrind
      ocl-icd-opencl-dev opencl-c-headers pocl-opencl-icd clinfo libcurl4-openssl-dev libsqlite3-dev python3
      chromium clang libomp-dev curl slurm-wlm munge) # curl: tests/llm_real.sh; chromium: headless, for the HTML
      # report's browser test (tests/test_report_html.c); clang, libomp-dev: the libFuzzer harnesses (make
      # test-fuzz); slurm-wlm, munge: the one-node cluster of tests/slurm_real.sh (make test-slurm-real)
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
# the PyTorch front end (python/, used by kforge import/bench/export): torch from PyPI (the
# standard wheel runs on the CPU), safetensors for the tensor files, pytest for its tests and
# pytest-xdist to run them two at a time (make test-python), einops for the KernelBench
# modules that import it (level 3's 48 and 49: bench/kernelbench.py, and the reference
# process of their module tasks)
if ! python3 -c "import torch, safetensors, pytest, xdist, einops, kforge_torch" 2>/dev/null; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-pip >/dev/null
  fi
  # a Debian-managed python3 refuses plain pip installs (PEP 668); then install beside it
  pip_install() { python3 -m pip install -q "$@" 2>/dev/null || python3 -m pip install -q --break-system-packages "$@"; }
  echo "setup: installing torch, safetensors, pytest, pytest-xdist, einops and the kforge_torch front end (pip)"
  pip_install torch numpy safetensors pytest pytest-xdist einops
  pip_install -e python/
fi
make -s all
echo "setup: built build/kforge"
