#!/usr/bin/env bash
# packages/cuda_ops/scripts/source_hash.sh: one line naming what a build of gptstack.cuda_ops is
# made from: a hash of its sources (CMakeLists.txt, pyproject.toml, csrc/, src/) and the CUDA
# archs. prebuild_for_device.sh stamps its build with it; gpu_check.sh (PREBUILT=DIR) uses such
# a build only where the stamp equals the line for the sources it was sent.
#   bash packages/cuda_ops/scripts/source_hash.sh ARCHS
set -euo pipefail
cd "$(dirname "$0")/.."
hash=$(find CMakeLists.txt pyproject.toml csrc src -type f ! -path '*/__pycache__/*' ! -name '*.so' \
  | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)
echo "sources $hash archs ${1:?ARCHS, e.g. sm_90a}"
