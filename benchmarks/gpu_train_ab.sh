#!/usr/bin/env bash
# benchmarks/gpu_train_ab.sh: one GPU call that compares training settings by benchmarks/train_ab.py
# (this checkout on every side, fresh `gptstack train` processes alternated, ratios per round).
# By default the preset as it trains now (its train.cuda_ops: the native loss, MLP and one-pass
# qkv gradient; its bf16 residual stream) against it without the qkv op, against the fp32
# stream and against PyTorch's ops on the fp32 stream (benchmarks/JOURNAL.md, 2026-12-07):
#   VARIANTS="default;no-qkv train.cuda_ops=gptstack:loss,mlp;fp32-residual model.residual=fp32;
#     torch-ops train.cuda_ops= model.residual=fp32"
# (';' between them)
# or two sides: AFTER="--after-env TORCHINDUCTOR_ENABLE_PDL=1" (with VARIANTS=""). A kernel
# switch of gptstack.cuda_ops as a variant (benchmarks/switches/sitecustomize.py), as the loss
# kernels were compared on 2026-12-07 (ROOT and PYTHONPATH as after sourcing device_env.sh):
#   "online GPTSTACK_CUDA_OPS_SWITCHES=set_cross_entropy_staged=0 PYTHONPATH=$ROOT/benchmarks/switches:$PYTHONPATH"
#
#   On the lent GPU (repository root, $OUT given by the device tool; carry .device with
#   tinyshakespeare.txt + gpt2.tiktoken in .device/data and, for a native op, a prebuilt
#   gptstack.cuda_ops in .device/site: packages/cuda_ops/scripts/prebuild_for_device.sh):
#     GPTSTACK_GIT_COMMIT=<commit> DATA=.device/data PREBUILT=.device/site \
#       bash benchmarks/gpu_train_ab.sh
# PRESET (default gpt2-124m), SETS (the overrides of every side; default the preset's
# micro-batch on an 80 GB card, 128 x accum 4, 8 steps, one evaluation batch), ROUNDS (default
# 4; the variants run in turn each round). Each gpt2-124m run takes ~25 s with a warm compile
# cache (the first of each side ~40 s). Writes $OUT/train-ab.json: copy it to
# benchmarks/results/train-ab-PRESET-GPU-WHAT-DATE.json.
set -u -o pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/gpu-train-ab}
mkdir -p "$OUT"
# shellcheck source=benchmarks/device_env.sh
source "$ROOT/benchmarks/device_env.sh"
PRESET=${PRESET:-gpt2-124m}
# A preset with train.cuda_ops (gpt2-124m's native loss) silently trains with PyTorch's ops
# where gptstack.cuda_ops does not import (each run only logs it): refuse to measure that
# unless asked (2026-12-07: a call without PREBUILT measured the wrong loss on every side)
if ! python3 -c "import gptstack.cuda_ops" 2> /dev/null && [ "${ALLOW_NO_CUDA_OPS:-0}" != 1 ]; then
  echo "gptstack.cuda_ops does not import here: pass PREBUILT=.device/site (or build it), or" \
    "ALLOW_NO_CUDA_OPS=1 to compare with PyTorch's ops on every side" >&2
  exit 2
fi
SETS=${SETS:-"--set train.batch_size=128 --set train.grad_accum=4 --set train.cuda_batch_size=0 \
--set train.max_steps=8 --set train.eval_interval=100000 --set train.eval_batches=1"}
VARIANTS=${VARIANTS-"default;no-qkv train.cuda_ops=gptstack:loss,mlp;fp32-residual model.residual=fp32;torch-ops train.cuda_ops= model.residual=fp32"}
AFTER=${AFTER:-}
COMPARE=()
if [ -n "${VARIANTS:-}" ]; then
  IFS=';' read -ra LIST <<< "$VARIANTS"
  for v in "${LIST[@]}"; do COMPARE+=(--variant "$v"); done
else
  read -ra COMPARE <<< "$AFTER"
fi
# BUDGET_S: start no run after this many seconds (the call's limit is 600 s)
# shellcheck disable=SC2086  # SETS is a list of flags
python3 benchmarks/train_ab.py --preset "$PRESET" $SETS "${COMPARE[@]}" --rounds "${ROUNDS:-4}" \
  --budget-s "${BUDGET_S:-0}" --out "$OUT/train-ab.json" 2>&1 | tee "$OUT/train-ab.log"
