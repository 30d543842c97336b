#!/usr/bin/env bash
# benchmarks/gpu_train_ab.sh: one GPU call that settles a training setting by benchmarks/train_ab.py
# (this checkout on both sides, fresh `gptstack train` processes alternated, before/after ratios
# per round). Written for the two open leads of 2026-12-07 on gpt2-124m (root README):
#   the native loss alone      AFTER="--after-set model.ops=gptstack:loss"   (the default)
#   Inductor's PDL             AFTER="--after-env TORCHINDUCTOR_ENABLE_PDL=1"
#
#   On the lent GPU (repository root, $OUT given by the device tool; carry .device with
#   tinyshakespeare.txt + gpt2.tiktoken in .device/data and, for a native op, a prebuilt
#   gptstack.cuda_ops in .device/site: packages/cuda_ops/scripts/prebuild_for_device.sh):
#     GPTSTACK_GIT_COMMIT=<commit> DATA=.device/data PREBUILT=.device/site \
#       bash benchmarks/gpu_train_ab.sh
# PRESET (default gpt2-124m), SETS (the overrides of both sides; default B=64 x accum 8, 8 steps,
# one evaluation batch), ROUNDS (default 4). Each gpt2-124m run takes ~25 s with a warm compile
# cache (the first of each side ~40 s). Writes $OUT/train-ab.json: copy it to
# benchmarks/results/train-ab-PRESET-GPU-WHAT-DATE.json.
set -u -o pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/gpu-train-ab}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GPTSTACK_CACHE_DIR=/tmp/gptstack-cache
[ -n "${DATA:-}" ] && export GPTSTACK_DATA_DIR=$ROOT/$DATA
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/gptstack-pycache
SOURCES=$ROOT/packages/tokenizer/src:$ROOT/packages/model/src:$ROOT/packages/quant/src
SOURCES=$SOURCES:$ROOT/packages/bench/src:$ROOT/tools/src
export PYTHONPATH=$SOURCES${PREBUILT:+:$ROOT/$PREBUILT}
PRESET=${PRESET:-gpt2-124m}
SETS=${SETS:-"--set train.batch_size=64 --set train.grad_accum=8 --set train.max_steps=8 \
--set train.eval_interval=100000 --set train.eval_batches=1"}
AFTER=${AFTER:-"--after-set model.ops=gptstack:loss"}
# shellcheck disable=SC2086  # SETS and AFTER are lists of flags
python3 benchmarks/train_ab.py --preset "$PRESET" $SETS $AFTER --rounds "${ROUNDS:-4}" \
  --out "$OUT/train-ab.json" 2>&1 | tee "$OUT/train-ab.log"
