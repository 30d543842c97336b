#!/usr/bin/env bash
# packages/cuda_ops/scripts/prebuild_for_device.sh: build gptstack.cuda_ops here, for the lent GPU
# machine, so a GPU call spends no device time compiling (~50 s of a call there). nvcc here is
# 13.0 like the machine's; the extension links no libtorch and CUDA's runtime statically, so it
# needs only Python's version to match (3.12 there) and a glibc/libstdc++ no newer than there.
#
#   PY312=/path/to/python3.12 bash packages/cuda_ops/scripts/prebuild_for_device.sh [DIR]
#   then carry DIR (default .device/site, ignored by git) and pass PREBUILT=DIR to gpu_check.sh
#   or benchmarks/gpu_decode_window.sh.
#
# PY312 needs scikit-build-core and nanobind (`$PY312 -m pip install scikit-build-core
# nanobind`). The build is stamped with source_hash.sh's line: a call sent other sources, or
# asking other archs, builds there as before. ARCHS as gpu_check.sh (default sm_90a).
set -euo pipefail
cd "$(dirname "$0")/../../.."
DIR=${1:-.device/site}
ARCHS=${ARCHS:-sm_90a}
is_312() { "$1" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2> /dev/null; }
if [ -z "${PY312:-}" ]; then  # the first Python 3.12 found: on PATH, then pyenv's, then uv's
  for candidate in python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python \
                   "$HOME"/.local/share/uv/python/cpython-3.12*/bin/python3.12; do
    if is_312 "$candidate"; then PY312=$candidate; break; fi
  done
fi
if [ -z "${PY312:-}" ] || ! is_312 "$PY312"; then
  echo "prebuild_for_device.sh: no Python 3.12 found: set PY312=/path/to/python3.12" \
       "(uv python install 3.12 makes one)" >&2; exit 2
fi
if ! "$PY312" -c 'import scikit_build_core, nanobind' 2>/dev/null; then
  echo "prebuild_for_device.sh: $PY312 lacks scikit-build-core or nanobind:" \
       "$PY312 -m pip install scikit-build-core nanobind" >&2; exit 2
fi
command -v nvcc > /dev/null || { echo "prebuild_for_device.sh: nvcc is not on PATH" >&2; exit 2; }
rm -rf "$DIR"
GPTSTACK_CUDA=ON GPTSTACK_CUDA_ARCHS="$ARCHS" "$PY312" -m pip install --quiet --no-deps \
  --no-build-isolation --no-cache-dir -t "$DIR" ./packages/cuda_ops
bash packages/cuda_ops/scripts/source_hash.sh "$ARCHS" > "$DIR/SOURCES"
echo "built $(cat "$DIR/SOURCES") into $DIR ($(du -sh "$DIR" | cut -f1))"
