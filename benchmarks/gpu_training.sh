#!/usr/bin/env bash
# The recorded training runs, in one command for the lent H200 (no uv, no internet there):
#   shakespeare-char 4,500 iters  -> best val loss, wall time, eval (words, 8-grams), a sample
#   esp32 3,000 steps             -> val loss, bits/char, wall time, sample, the checkpoint itself
#   gpt2-124m, a few steps        -> tokens/s and MFU at the preset's batch (16 x 1024, accum 32)
# Usage there:  OUT=... bash benchmarks/gpu_training.sh      (SMOKE=1 for a seconds-long CPU check)
# Needs $GPTSTACK_DATA_DIR with tinyshakespeare.txt and gpt2.tiktoken (carry a copy: the device
# tool sends only the repository). Each stage has a time cap: a stopped run saves last/ and is
# continued by the next call with --resume.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/packages/tokenizer/src:$PWD/packages/model/src:$PWD/packages/quant/src:$PWD/packages/bench/src:$PWD/tools/src"
export PYTHONUNBUFFERED=1 GPTSTACK_CACHE_DIR="${GPTSTACK_CACHE_DIR:-/tmp/gptstack-cache}"
# The lent machine sets PYTHONDONTWRITEBYTECODE=1, so every process there compiles ~2,300 Python
# sources again (~4 s of each start-up, which a user's install pays once). Cache the bytecode as
# a user's Python does, under a prefix (site-packages may be read-only there).
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-/tmp/gptstack-pycache}"
# INSTALL_PYC=1: first write the bytecode of torch's site-packages, the standard library and the
# sources, as `uv sync` does at install (compile-bytecode in the root pyproject): a first run
# then starts as a user's first run after `uv sync` (13 s of compileall on the H200 machine)
if [ "${INSTALL_PYC:-0}" = 1 ]; then
  python3 -m compileall -q -j 0 \
    "$(python3 -c "import os,importlib.util as u;print(os.path.dirname(os.path.dirname(u.find_spec('torch').origin)))")" \
    "$(python3 -c "import sysconfig;print(sysconfig.get_paths()['stdlib'])")" packages/*/src tools/src &> /dev/null || true  # some stdlib test data never compiles
fi
OUT="${OUT:-/tmp/gptstack-out}"; RUNS="${RUNS:-runs}"; mkdir -p "$OUT" "$RUNS"
G="python3 -m gptstack.tools.cli"
if [ "${SMOKE:-0}" = 1 ]; then
  SC=(--set train.max_steps=6 --set train.eval_interval=3 --set train.eval_batches=2 --set train.batch_size=4)
  E3=("${SC[@]}"); G2=(--set train.max_steps=2 --set train.grad_accum=1 --set train.batch_size=1 --set train.eval_batches=1 --set model.n_layer=1)
  CAP_SC=120; CAP_E3=120; CAP_G2=120; SAMPLES=1
else
  SC=(); E3=(); G2=(--set train.max_steps=12 --set train.eval_interval=100000 --set train.eval_batches=2)
  CAP_SC=${CAP_SC:-200}; CAP_E3=${CAP_E3:-270}; CAP_G2=${CAP_G2:-100}; SAMPLES=10
fi
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/train.log"; }
log "$(python3 -c 'import torch,sys;print(sys.version.split()[0],"torch",torch.__version__,torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu")')"

run_train() {  # name cap args...
  local name=$1 cap=$2; shift 2
  local resume=(); [ -f "$RUNS/$name/last/train_state.pt" ] && resume=(--resume "$RUNS/$name")
  log "train $name (cap ${cap}s) ${resume[*]}"
  timeout -s INT -k 30 "$cap" $G train "$@" --out "$RUNS/$name" "${resume[@]}" --no-progress 2>&1 \
    | grep -v "^\s*$" | tee -a "$OUT/train.log" | grep -E "step|best|finished|stopped|error" | tail -n 4
  return "${PIPESTATUS[0]}"
}

finish() {  # name: eval + sample once the run is complete
  grep -q '"event": "end".*"interrupted": false' "$RUNS/$1/metrics.jsonl" 2>/dev/null || return 0
  $G eval --ckpt "$RUNS/$1" --samples "$SAMPLES" --json "$RUNS/$1/eval.json" 2>&1 | tee -a "$OUT/train.log"
  $G sample --ckpt "$RUNS/$1" --prompt "ROMEO:" --tokens 300 --seed 1 > "$RUNS/$1/sample.txt" 2>>"$OUT/train.log"
}
STAGES="${STAGES:-shakespeare-char esp32 gpt2-124m}"   # run a subset per call: each call has 10 minutes
for stage in $STAGES; do
  case $stage in
    shakespeare-char) run_train shakespeare-char "$CAP_SC" --preset shakespeare-char "${SC[@]}"; finish shakespeare-char ;;
    esp32)
      if ! run_train esp32 "$CAP_E3" --preset esp32 "${E3[@]}" && [ ! -f "$RUNS/esp32/last/config.json" ]; then
        log "esp32 failed before its first checkpoint: retrying without the CUDA-graph step"
        rm -rf "$RUNS/esp32"; run_train esp32 "$CAP_E3" --preset esp32 "${E3[@]}" --set train.cuda_graph=false
      fi
      finish esp32 ;;
    gpt2-124m) run_train gpt2-124m "$CAP_G2" --preset gpt2-124m "${G2[@]}" ;;
  esac
done

# What comes back (at most 8 files): small results in one tar, the esp32 checkpoint split < 16 MB.
tar -czf "$OUT/runs-small.tar.gz" --exclude='*.safetensors' --exclude='*.pt' -C "$RUNS" . 2>/dev/null
if [ -d "$RUNS/esp32/best" ]; then
  tar -cf - -C "$RUNS/esp32" best | split -b 15M - "$OUT/esp32-best.tar.part-"
fi
log "done"; ls -la "$OUT"
