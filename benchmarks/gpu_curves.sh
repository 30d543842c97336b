#!/usr/bin/env bash
# benchmarks/gpu_curves.sh: one GPU call that trains a preset with several settings, one after
# another, and draws their loss curves on one plot: how a faster setting is shown to learn the
# same curve (the GPU-speed issue), e.g. the FP8 LM head of 2026-12-07 (benchmarks/JOURNAL.md).
#
#   On the lent GPU (repository root, $OUT given by the device tool; data and a prebuilt
#   gptstack.cuda_ops carried in .device as for benchmarks/gpu_train_ab.sh):
#     GPTSTACK_GIT_COMMIT=<commit> DATA=.device/data PREBUILT=.device/site \
#       VARIANTS="default;fp8-head model.fp8=head" bash benchmarks/gpu_curves.sh
# VARIANTS: ';' between variants, each a name then KEY=VALUE overrides (benchmarks/train_ab.py's
# --variant form: a NAME=VALUE in capitals is that run's environment, e.g. a kernel switch
# through benchmarks/switches/sitecustomize.py as gpu_train_ab.sh shows); PRESET (default gpt2-124m); SETS (every run's overrides;
# default 300 steps of B=16 x 4 with an evaluation every 50: ~80 s a gpt2-124m run on an H100);
# RUN_S (each run's time limit, default 150). Writes $OUT/curves/NAME/{metrics.jsonl,
# summary.json} and $OUT/curves.png (`gptstack plot`): copy them to
# benchmarks/profiles/curves-PRESET-GPU-DATE-COMMIT/ and benchmarks/plots/.
set -u -o pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/gpu-curves}
mkdir -p "$OUT/curves"
# shellcheck source=benchmarks/device_env.sh
source "$ROOT/benchmarks/device_env.sh"
PRESET=${PRESET:-gpt2-124m}
# (cuda_batch_size=0: the step's 64 sequences as configured; gpt2-124m's preset asks 128 a
# micro-batch, which 64 cannot be split into)
SETS=${SETS:-"--set train.batch_size=16 --set train.grad_accum=4 --set train.cuda_batch_size=0 \
--set train.max_steps=300 --set train.warmup_steps=30 --set train.eval_interval=50 \
--set train.eval_batches=8"}
VARIANTS=${VARIANTS:-"default;fp8-head model.fp8=head"}
IFS=';' read -ra LIST <<< "$VARIANTS"
RUNS=()
for v in "${LIST[@]}"; do
  read -ra WORDS <<< "$v"
  name=${WORDS[0]}
  overrides=() envs=()
  for kv in "${WORDS[@]:1}"; do  # NAME=VALUE in capitals: that run's environment
    if [[ $kv =~ ^[A-Z_][A-Z0-9_]*= ]]; then envs+=("$kv"); else overrides+=(--set "$kv"); fi
  done
  # shellcheck disable=SC2086  # SETS is a list of flags
  env "${envs[@]}" timeout "${RUN_S:-150}" python3 -m gptstack.tools.cli train --preset "$PRESET" $SETS \
    "${overrides[@]}" --no-progress --overwrite --out "/tmp/curves/$name" \
    > "/tmp/curves-$name.log" 2>&1
  echo "$name: exit $? $(grep -E 'finished step|best val|error' "/tmp/curves-$name.log" | tr '\n' ' ')"
  if [ -f "/tmp/curves/$name/summary.json" ]; then
    mkdir -p "$OUT/curves/$name"
    cp "/tmp/curves/$name/metrics.jsonl" "/tmp/curves/$name/summary.json" "$OUT/curves/$name/"
    RUNS+=("$OUT/curves/$name")
  fi
done
[ ${#RUNS[@]} -ge 2 ] && python3 -m gptstack.tools.cli plot "${RUNS[@]}" -o "$OUT/curves.png"
