#!/usr/bin/env bash
# benchmarks/gpu_build_ab.sh: two builds of gptstack.cuda_ops side by side on one GPU, for a
# change inside the kernels that no switch selects (one process cannot load two builds of one
# extension): benchmarks/sample_speed.py and benchmarks/profile_decode.py run in alternating
# processes, build A then build B, ROUNDS times, on the checkpoints that
# benchmarks/gpu_decode_window.sh's train step wrote (runs/shakespeare-char, runs/esp32).
#
#   here, from the repository root (A: the tree, B: <commit>):
#          bash packages/cuda_ops/scripts/prebuild_for_device.sh .device/site
#          git worktree add /tmp/before <commit> && (cd /tmp/before &&
#            bash packages/cuda_ops/scripts/prebuild_for_device.sh "$OLDPWD/.device/site-before")
#          git worktree remove --force /tmp/before
#   (carry .device: both builds and the data, under the device tool's 64 MiB)
#   there (after gpu_decode_window.sh STAGES="build train ..." in the same call):
#          A_COMMIT=<tree> B_COMMIT=<commit> A=.device/site B=.device/site-before \
#            bash benchmarks/gpu_build_ab.sh
# Results: $OUT/ab/{A,B}-{speed,profile}-ROUND/ (sample-speed-*.json, profile-decode-*.json)
# and a summary of each round's tokens/s and step times in $OUT/ab/summary.txt. A_COMMIT and
# B_COMMIT (optional) are what each build is: its processes record it as the JSON's git commit
# (GPTSTACK_GIT_COMMIT), which the device's checkout cannot know. Merge the rounds here with
# benchmarks/merge_build_ab.py.
set -u -o pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/gpu-build-ab}
A=${A:-.device/site}
B=${B:-.device/site-before}
ROUNDS=${ROUNDS:-3}
CONFIGS=${CONFIGS:-"graph bf16 fused"}
mkdir -p "$OUT/ab"
SRC=""
for src in "$ROOT"/packages/*/src "$ROOT"/tools/src; do
  [ "$src" = "$ROOT/packages/cuda_ops/src" ] || SRC=$SRC:$src
done
for r in $(seq 1 "$ROUNDS"); do
  for build in A B; do
    site=${!build}
    echo "== round $r, build $build ($site: $(cat "$site/SOURCES"))"
    commit_var=${build}_COMMIT
    export GPTSTACK_GIT_COMMIT=${!commit_var:-unknown}
    PYTHONPATH=$ROOT/$site$SRC timeout 120 python3 benchmarks/sample_speed.py \
      --ckpt runs/shakespeare-char --ckpt runs/esp32 --rounds 1 --configs "$CONFIGS" \
      --out "$OUT/ab/$build-speed-$r" 2>&1 | grep -v "round 0" | tail -n 2
    PYTHONPATH=$ROOT/$site$SRC timeout 120 python3 benchmarks/profile_decode.py \
      --ckpt runs/shakespeare-char --ckpt runs/esp32 --out "$OUT/ab/$build-profile-$r" \
      --rounds 3 --configs gptstack 2>&1 | grep "decode step"
  done
done 2>&1 | tee "$OUT/ab/summary.txt"
