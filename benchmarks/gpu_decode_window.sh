#!/usr/bin/env bash
# benchmarks/gpu_decode_window.sh: one GPU call for the decoding and kernel work: build (or copy
# a prebuilt) gptstack.cuda_ops, short checkpoints of two presets, `gptstack sample` A/B configs
# side by side, the CUDA tests, memcheck, the decode profile, the dev/ benches and `gptstack
# bench ops`; STAGES picks the steps. Written to decide the slide window's tensor-core path
# (fused_step.WINDOW_ROWS: it lost on the H100, 2026-12-06); the default A/B lists are still
# that one.
#
#   On the lent H200 (repository root, $OUT given by the device tool; carry a folder holding
#   tinyshakespeare.txt and point DATA at it, the device tool sends only the repository):
#     GPTSTACK_GIT_COMMIT=<commit> DATA=.device/data bash benchmarks/gpu_decode_window.sh
#   With PREBUILT=.device/site (packages/cuda_ops/scripts/prebuild_for_device.sh, run here and
#   carried with the data) the build step takes seconds instead of ~50 s of device time.
#
# Steps, most important first (a call cut short at its limit keeps what $OUT already holds;
# STAGES="build train speed" picks some, ROUNDS=2 shortens the A/B):
#   build      packages/cuda_ops/scripts/gpu_check.sh STAGES=build (sm_90a; ~50 s, or PREBUILT)
#   train      20-step checkpoints of shakespeare-char and esp32 (no compile, no teacher):
#              decoding speed does not depend on how well a model is trained
#   speed      benchmarks/sample_speed.py, "graph bf16 fused" (cuBLAS window) against
#              "graph bf16 fused rows-window", alternated (sample-speed-*.json)
#   test       pytest -m cuda: the decode, decode_blocks and sampling tests of cuda_ops and the
#              model's graph-decoding tests (pytest.log)
#   cli        `gptstack sample --json` of each checkpoint, the default path (sample-*.json)
#   memcheck   compute-sanitizer on kernel_driver.py once (covers the 40-row tensor-core call)
#   kernels    packages/cuda_ops/scripts/window_linear_bench.py at both presets' widths
#              (window-linear-*.json) and scripts/window_parts_bench.py (window-parts.json: the
#              window's attention, decode_attention, window_attention, window_mlp)
#   ncu        ncu --set full (base clocks, caches flushed) of one call of each kernel that
#              NCU_KERNELS matches (default "window_mlp|window_attention|decode_linear_mma") in
#              scripts/window_parts_bench.py --once (ncu.txt), and the first one's warp stall
#              samples by SASS instruction (ncu-source.csv.gz)
#   profile    benchmarks/profile_decode.py gptstack vs gptstack-rows-window (prof.tgz)
#   dev        every binary in .device/bin: packages/cuda_ops/dev/*.cu built here with
#              `nvcc -arch=sm_90a -O3 -std=c++17 -I packages/cuda_ops/csrc` (dev-*.txt)
#   ops        `gptstack bench ops` of LayerNorm and GELU forward+backward against eager and
#              torch.compile at shakespeare-char's and gpt2-124m's sizes (ops-*.json)
# The steps run in the order above whatever the order of STAGES. SPEED_CONFIGS and
# PROFILE_CONFIGS replace the two A/B lists, PRESETS the checkpoints the speed, cli and profile
# steps run (default "shakespeare-char esp32"), TESTS the test files; the JSON results leave as one
# results.tgz beside call.log and pytest.log (the device tool returns a few files only).
# Then, here: copy the JSON into benchmarks/results/ (sample-speed-PRESET-GPU-WHAT-DATE.json).
set -u -o pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/gpu-decode-window}
mkdir -p "$OUT" /tmp/prof
export PYTHONUNBUFFERED=1 GPTSTACK_CACHE_DIR=/tmp/gptstack-cache
[ -n "${DATA:-}" ] && export GPTSTACK_DATA_DIR=$ROOT/$DATA
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/gptstack-pycache
T0=$(date +%s)
stamp() { echo "== [$(( $(date +%s) - T0 )) s] $*"; }
# STAGES picks steps (default all); ROUNDS sets sample_speed's alternations (default 3).
STAGES=${STAGES:-"build train speed test cli memcheck kernels ncu profile"}
SPEED_CONFIGS=${SPEED_CONFIGS:-"graph bf16 fused,graph bf16 fused rows-window"}
PROFILE_CONFIGS=${PROFILE_CONFIGS:-"gptstack,gptstack-rows-window"}
mkdir -p "$OUT/r"
trap 'tar -C "$OUT" -czf "$OUT/results.tgz" r && rm -rf "$OUT/r"' EXIT
want() { [[ " $STAGES " == *" $1 "* ]] && stamp "$1"; }
exec > >(tee -a "$OUT/call.log") 2>&1
PYTHONPATH=/tmp/site
for src in "$ROOT"/packages/*/src "$ROOT"/tools/src; do
  [ "$src" = "$ROOT/packages/cuda_ops/src" ] || PYTHONPATH=$PYTHONPATH:$src
done
export PYTHONPATH
G="python3 -m gptstack.tools.cli"

if want build; then
SITE=/tmp/site STAGES=build OUT=/tmp/gc bash packages/cuda_ops/scripts/gpu_check.sh > /tmp/gc-build.out 2>&1
tail -n 3 /tmp/gc-build.out
python3 -c "import gptstack.cuda_ops as o; print(o.build_info())" || exit 3
fi

if want train; then
SHORT=(--set train.max_steps=20 --set train.compile=false --set train.eval_interval=20
       --set train.eval_batches=2 --no-progress --overwrite)
timeout 120 $G train --preset shakespeare-char "${SHORT[@]}" --out runs/shakespeare-char 2>&1 | tail -n 2
timeout 120 $G train --preset esp32 --set train.distill_from= "${SHORT[@]}" --out runs/esp32 2>&1 | tail -n 2
fi

PRESETS=${PRESETS:-"shakespeare-char esp32"}
CKPTS=()
for p in $PRESETS; do CKPTS+=(--ckpt "runs/$p"); done

if want speed; then
timeout 240 python3 benchmarks/sample_speed.py "${CKPTS[@]}" \
  --out "$OUT/r" --rounds "${ROUNDS:-3}" --configs "$SPEED_CONFIGS"
fi

if want test; then
TESTS=${TESTS:-"packages/cuda_ops/tests/test_decode.py packages/cuda_ops/tests/test_decode_blocks.py
  packages/cuda_ops/tests/test_sampling.py packages/model/tests/test_graph_decoding.py
  packages/model/tests/test_generate.py packages/model/tests/test_train_step.py
  packages/model/tests/test_weight_average.py"}
# shellcheck disable=SC2086  # TESTS is a list of paths
timeout 260 python3 -m pytest -m cuda -q -rs -p no:cacheprovider $TESTS > "$OUT/pytest.log" 2>&1
echo "pytest exit $?"; tail -n 5 "$OUT/pytest.log"
fi

if want cli; then
for p in $PRESETS; do
  $G sample --ckpt runs/$p --prompt "ROMEO:" --tokens 500 --seed 1 --json /tmp/prof/sample-$p.json \
    > /tmp/prof/sample-$p.txt 2>&1 || tail -n 5 /tmp/prof/sample-$p.txt
  cp /tmp/prof/sample-$p.json "$OUT/r/" 2>/dev/null
done
fi

if want memcheck; then
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 python3 \
  packages/cuda_ops/scripts/kernel_driver.py once 2>&1 | tail -n 3
fi

if want kernels; then
timeout 90 python3 packages/cuda_ops/scripts/window_linear_bench.py --preset-c 384 --rows 256 \
  --rounds 10 --json "$OUT/r/window-linear-shakespeare-char.json"
timeout 90 python3 packages/cuda_ops/scripts/window_linear_bench.py --preset-c 256 --rows 64 \
  --rounds 10 --json "$OUT/r/window-linear-esp32.json"
timeout 90 python3 packages/cuda_ops/scripts/window_parts_bench.py --rounds 10 \
  --json "$OUT/r/window-parts.json"
fi

if want ncu; then
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
KERNELS=${NCU_KERNELS:-"window_mlp|window_attention|decode_linear_mma"}
timeout 150 "$NCU" --set full --cache-control none -k regex:"$KERNELS" \
  python3 packages/cuda_ops/scripts/window_parts_bench.py --once > "$OUT/r/ncu.txt" 2>&1
grep -E "^  [a-z_:]+.*\(|Duration" "$OUT/r/ncu.txt" | head -n 20
timeout 150 "$NCU" --set full --import-source yes --page source --csv --cache-control none \
  -k regex:"${KERNELS%%|*}" -c 1 python3 packages/cuda_ops/scripts/window_parts_bench.py --once \
  2>&1 | grep -v "^==" | gzip > "$OUT/r/ncu-source.csv.gz"
fi

if want profile; then
timeout 120 python3 benchmarks/profile_decode.py "${CKPTS[@]}" \
  --out /tmp/prof --rounds 3 --configs "$PROFILE_CONFIGS" 2>&1 | tail -n 20
tar -C /tmp -czf "$OUT/r/prof.tgz" prof
fi

if want dev; then  # the dev/ benches, built here (nvcc -arch=sm_90a) into .device/bin
for b in "$ROOT"/.device/bin/*; do
  [ -x "$b" ] && { echo "-- $(basename "$b")"; timeout 120 "$b" | tee "$OUT/r/dev-$(basename "$b").txt"; }
done
fi

if want ops; then
timeout 240 $G bench ops --device cuda --budget-s 1 --preset shakespeare-char --preset gpt2-124m \
  --ops layernorm_fwd_bwd,add_layernorm_fwd_bwd,gelu_tanh,gelu_tanh_fwd_bwd --out "$OUT/r" \
  --no-progress 2>&1 | tail -n 30
fi
stamp "done"
