#!/usr/bin/env bash
# benchmarks/gpu_dist.sh: on one GPU, the plain training path against the same run under
# torchrun (issue 12: "no regression from the wrappers"). Per preset, two runs in turn:
#   single    python3 -m gptstack.tools.cli train --preset P ...
#   torchrun  python3 -m gptstack.tools.cli train --preset P ... --nproc-per-node 1
#             (starts `python3 -m torch.distributed.run --standalone --nproc-per-node 1
#             -m gptstack.tools.train_dist ...`: one process under torchrun's elastic agent, so
#             world size 1 = the plain path with its whole-step CUDA graph; with one process
#             torchrun leaves OMP_NUM_THREADS alone, so both runs have the same threads)
# shakespeare-char: SC_STEPS (default 1000) steps of batch 64 x 256; gpt2-124m: GPT2_STEPS
# (default 30) steps at the preset batch (16 x 1024, 32 micro-batches: 524,288 tokens per step). tokens/s is each run's median over its
# logged intervals without the first (compile, CUDA-graph capture), as summary.json records it.
#
#   On the lent H200 (repository root; $OUT given by the device tool; no uv, no network):
#     GPTSTACK_DATA_DIR=<folder with tinyshakespeare.txt, gpt2.tiktoken> bash benchmarks/gpu_dist.sh
#   Anywhere, to check the script end to end (smoke preset on the CPU, seconds):
#     SMOKE=1 PYTHON=.venv/bin/python OUT=/tmp/gpu-dist bash benchmarks/gpu_dist.sh
#
# Writes $OUT/gpu-dist-<device>-<date>.json (both runs' summaries with environment and command,
# every logged interval's tokens/s, the ratio torchrun / single per preset), the two runs'
# summary.json files and gpu_dist.log; prints a short table last. Expected on an H200: the
# ratio within about 2 % of 1.00 for both presets, and the single runs near the recorded
# 491 k tokens/s (gpt2-124m) and 3.0 M tokens/s (shakespeare-char) of benchmarks/results/run-*.
# GPU time: about 4 minutes (each run ~15 s of Python/torch start-up and torch.compile, the
# second run of a preset reusing the first's inductor cache); each run has a time cap.
# Knobs: PRESETS="shakespeare-char gpt2-124m"  SC_STEPS=1000  GPT2_STEPS=30
#        CAP_S=150 (seconds per run)  PYTHON=python3
set -u -o pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
export PYTHONPATH=$ROOT/packages/tokenizer/src:$ROOT/packages/model/src:$ROOT/packages/quant/src:$ROOT/packages/bench/src:$ROOT/tools/src
export PYTHONUNBUFFERED=1 GPTSTACK_CACHE_DIR=${GPTSTACK_CACHE_DIR:-/tmp/gptstack-cache}
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/gptstack-inductor-cache}
PY=${PYTHON:-python3}
SMOKE=${SMOKE:-0}
OUT=${OUT:-/tmp/gptstack-out}
RUNS=${RUNS:-/tmp/gptstack-dist-runs}
CAP_S=${CAP_S:-150}
mkdir -p "$OUT" "$RUNS"
exec > >(tee -a "$OUT/gpu_dist.log") 2>&1
echo "== gptstack gpu_dist.sh  $(date -u +%Y-%m-%dT%H:%M:%SZ)  SMOKE=$SMOKE  OUT=$OUT"

if [ "$SMOKE" = "1" ]; then
    PRESETS=${PRESETS:-smoke}
    # a shared CPU: two OpenMP threads per process wait on each other (5-25x slower steps)
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
else
    PRESETS=${PRESETS:-"shakespeare-char gpt2-124m"}
fi
settings() {  # preset -> the --set flags of its runs (both modes alike)
    case $1 in
        shakespeare-char) echo "--set train.max_steps=${SC_STEPS:-1000} --set train.eval_interval=100000 --set train.eval_batches=10" ;;
        gpt2-124m) echo "--set train.max_steps=${GPT2_STEPS:-30} --set train.eval_interval=100000 --set train.eval_batches=2" ;;
        smoke) echo "--set train.max_steps=20 --set train.log_interval=2 --set train.device=cpu" ;;
    esac
}

for preset in $PRESETS; do
    for mode in single torchrun; do
        run=$RUNS/$preset-$mode
        rm -rf "$run"
        extra=(); [ "$mode" = torchrun ] && extra=(--nproc-per-node 1)
        echo "-- $preset $mode (cap ${CAP_S}s)"
        # shellcheck disable=SC2046  # settings() is a list of words on purpose
        timeout -s INT -k 20 "$CAP_S" "$PY" -m gptstack.tools.cli train --preset "$preset" \
            $(settings "$preset") --out "$run" --no-progress "${extra[@]}" 2>&1 \
            | grep -E "^(run|distributed|starting|finished|error|gptstack)" | cut -c1-200
        echo "   exit ${PIPESTATUS[0]}"
        [ -f "$run/summary.json" ] && cp "$run/summary.json" "$OUT/summary-$preset-$mode.json"
    done
done

RUNS="$RUNS" PRESETS="$PRESETS" OUT="$OUT" "$PY" - <<'EOF'
import json, os, statistics, sys, time
from pathlib import Path

runs, out = Path(os.environ["RUNS"]), Path(os.environ["OUT"])
rows, result = [], {"kind": "gpu-dist", "question": "torchrun --nproc-per-node 1 vs one process",
                    "presets": {}}
for preset in os.environ["PRESETS"].split():
    entry = {}
    for mode in ("single", "torchrun"):
        summary = runs / f"{preset}-{mode}" / "summary.json"
        metrics = runs / f"{preset}-{mode}" / "metrics.jsonl"
        if not summary.is_file():
            entry[mode] = None
            continue
        s = json.loads(summary.read_text())
        samples = [r["tokens_per_s"] for r in map(json.loads, metrics.read_text().splitlines())
                   if r.get("event") == "train"]
        entry[mode] = {"summary": s, "tokens_per_s_samples": samples}
    a, b = entry.get("single"), entry.get("torchrun")
    ta = a and a["summary"]["tokens_per_s_median"]
    tb = b and b["summary"]["tokens_per_s_median"]
    entry["ratio_torchrun_over_single"] = tb / ta if ta and tb else None
    result["presets"][preset] = entry
    rows.append((preset, ta, tb, entry["ratio_torchrun_over_single"],
                 a and a["summary"]["mfu_median"], b and b["summary"]["mfu_median"]))
first = next((e[m]["summary"] for e in result["presets"].values() for m in ("single", "torchrun")
              if e.get(m)), None)
result["environment"] = first["environment"] if first else None
device = (first or {}).get("device") or "unknown"
tag = "h200" if "H200" in device else device.split()[0].lower()
path = out / f"gpu-dist-{tag}-{time.strftime('%Y%m%d-%H%M%S')}.json"
path.write_text(json.dumps(result, indent=2) + "\n")
fmt = lambda v, f: "-" if v is None else format(v, f)
print(f"\nresults -> {path}\n")
print(f"{'preset':<18}{'single tok/s':>14}{'torchrun tok/s':>16}{'ratio':>8}{'MFU single':>12}{'MFU torchrun':>14}")
for p, ta, tb, r, ma, mb in rows:
    print(f"{p:<18}{fmt(ta, ',.0f'):>14}{fmt(tb, ',.0f'):>16}{fmt(r, '.3f'):>8}"
          f"{fmt(ma and 100 * ma, '.1f'):>11}%{fmt(mb and 100 * mb, '.1f'):>13}%")
sys.exit(0 if all(r[3] for r in rows) else 1)
EOF
