#!/usr/bin/env bash
# benchmarks/gpu_suites.sh: every GPU suite of `gptstack bench` at full size, in one run, on one
# GPU; JSON results and a log into $OUT, a short table printed last.
#
#   On the lent H200 (repository root, $OUT given by the device tool):
#     GPTSTACK_GIT_COMMIT=<commit> bash benchmarks/gpu_suites.sh
#   Anywhere, to check the script end to end (tiny sizes on the CPU, a few repeats):
#     SMOKE=1 OUT=/tmp/gs-gpu-out bash benchmarks/gpu_suites.sh
#
# Needs python3 with torch, numpy and safetensors (gptstack.model imports it); no uv, no
# network. The packages run from this checkout through PYTHONPATH. Then, on the development
# machine: copy $OUT/*.json into benchmarks/results/ and run `gptstack bench report`.
#
# Wall time on one H200 (16 CPU cores), as recorded in benchmarks/results/*-h200-20261130-*.json
# (env.date to env.finished: the suite itself, without Python and torch start-up):
#   train        129 s  3 presets x 8 rungs; 3 torch.compile builds per preset (default,
#                       reduce-overhead, whole-step graph), >= 20 rounds per row
#   generate    > 110 s at these defaults: the run hit TIMEOUT_GENERATE after shakespeare-char's
#                       batch-1 rows (generate-h200-20261130-102148.json, incomplete); gpt2-124m
#                       alone with --sweep-prompt 8,128 --sweep-new 4,64 took 99 s
#                       (generate-h200-20261130-104351.json)
#   attention     10 s  3 shapes: op level and whole-model forward (no compile)
#   ops           15 s  4 ops x 2 sizes, eager vs torch.compile (one compile each), graph timing
#   start-up    ~40 s  Python + torch import per suite, preflight, the final table (estimate)
# Each suite has a time limit (TIMEOUT_<SUITE>, ~7.5 min together, under the 10-minute command
# limit); a suite cut short keeps its finished rows.
#
# Knobs (environment variables):
#   SUITES="train generate attention ops"   which suites, in this order (engine, tokenizer: the
#                                           CPU suites, add them to also time this host's CPU)
#   TRAIN_PRESETS, GEN_PRESETS, ATTN_PRESETS, OPS_PRESETS   space-separated preset names
#   TRAIN_RUNGS=fp32,tf32,bf16,fused,graph-eager,compile,reduce-overhead,graph
#   GEN_DECODERS=naive,kv,static,graph      add graph-compile for gpt-fast's compiled decode
#                                           (one more compile per model and batch: ~+90 s)
#   GEN_BATCHES=1,8  GEN_SWEEP_PROMPT=8,32,128,512  GEN_SWEEP_NEW=4,16,64
#   BUDGET_S=1      seconds of timed rounds per row (>= 20 rounds regardless; docs/MEASURING.md)
#   TIMEOUT_TRAIN=230 TIMEOUT_GENERATE=110 TIMEOUT_ATTENTION=45 TIMEOUT_OPS=75 (seconds)
#   PYTHON=python3  SMOKE=1 (CPU, tiny)  GPTSTACK_GIT_COMMIT / GPTSTACK_GIT_DIRTY=1 (recorded)
set -u -o pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
export PYTHONPATH=$ROOT/packages/tokenizer/src:$ROOT/packages/model/src:$ROOT/packages/quant/src:$ROOT/packages/bench/src:$ROOT/tools/src
export PYTHONUNBUFFERED=1
# Inductor's compiled kernels are cached here between suites of this run (not in $OUT: only a
# few files come back from the GPU machine).
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/gptstack-inductor-cache}

PY=${PYTHON:-python3}
SMOKE=${SMOKE:-0}
OUT=${OUT:-$ROOT/benchmarks/results}
SUITES=${SUITES:-"train generate attention ops"}
ALL3="esp32 shakespeare-char gpt2-124m"
TRAIN_PRESETS=${TRAIN_PRESETS:-$ALL3}
GEN_PRESETS=${GEN_PRESETS:-$ALL3}
ATTN_PRESETS=${ATTN_PRESETS:-$ALL3}
OPS_PRESETS=${OPS_PRESETS:-"shakespeare-char gpt2-124m"}
TRAIN_RUNGS=${TRAIN_RUNGS:-fp32,tf32,bf16,fused,graph-eager,compile,reduce-overhead,graph}
GEN_DECODERS=${GEN_DECODERS:-naive,kv,static,graph}
GEN_BATCHES=${GEN_BATCHES:-1,8}
GEN_SWEEP_PROMPT=${GEN_SWEEP_PROMPT:-8,32,128,512}
GEN_SWEEP_NEW=${GEN_SWEEP_NEW:-4,16,64}
BUDGET_S=${BUDGET_S:-1}

mkdir -p "$OUT"
LOG=$OUT/gpu_suites.log
exec > >(tee -a "$LOG") 2>&1
echo "== gptstack gpu_suites.sh  $(date -u +%Y-%m-%dT%H:%M:%SZ)  SMOKE=$SMOKE  OUT=$OUT"

if [ "$SMOKE" = "1" ]; then
    CPU_SUITE_ARGS=(--smoke)  # engine, tokenizer: no --device (they run on the CPU)
    COMMON=(--device cpu --smoke --compile-backend aot_eager)
    T_TRAIN=${TIMEOUT_TRAIN:-300}; T_GENERATE=${TIMEOUT_GENERATE:-200}
    T_ATTENTION=${TIMEOUT_ATTENTION:-200}; T_OPS=${TIMEOUT_OPS:-200}
else
    CPU_SUITE_ARGS=()
    COMMON=(--device cuda --budget-s "$BUDGET_S")
    T_TRAIN=${TIMEOUT_TRAIN:-230}; T_GENERATE=${TIMEOUT_GENERATE:-110}
    T_ATTENTION=${TIMEOUT_ATTENTION:-45}; T_OPS=${TIMEOUT_OPS:-75}
fi
T_ENGINE=${TIMEOUT_ENGINE:-120}; T_TOKENIZER=${TIMEOUT_TOKENIZER:-120}

# Preflight: what this Python has. A missing module is reported here, once, by name.
"$PY" - "$SMOKE" <<'EOF'
import importlib, sys
smoke = sys.argv[1] == "1"
missing = []
for name in ("torch", "numpy", "safetensors", "gptstack.model", "gptstack.bench", "gptstack.tools.cli"):
    try:
        importlib.import_module(name)
    except Exception as e:  # report every missing piece before giving up
        missing.append(f"{name} ({type(e).__name__}: {e})")
if missing:
    print("preflight: cannot import " + "; ".join(missing), file=sys.stderr)
    sys.exit(3)
import torch
print(f"preflight: python {sys.version.split()[0]}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")
if not smoke and not torch.cuda.is_available():
    print("preflight: torch sees no CUDA GPU; run with SMOKE=1 for the CPU check", file=sys.stderr)
    sys.exit(3)
EOF
[ $? -eq 0 ] || { echo "== preflight failed: nothing was run"; exit 3; }

presets() {  # "a b c" -> --preset a --preset b --preset c
    local out=() p
    for p in $1; do out+=(--preset "$p"); done
    printf '%s\n' "${out[@]}"
}

STATUS=()
run_suite() {  # run_suite NAME TIMEOUT_S ARGS...
    local name=$1 limit=$2 start rc line
    shift 2
    start=$(date +%s)
    echo "== $name (limit ${limit} s): gptstack bench $name $*"
    # SIGINT first: the CLI stops cleanly and the rows written so far stay in the JSON.
    if command -v timeout >/dev/null 2>&1; then
        timeout --signal=INT --kill-after=20 "$limit" \
            "$PY" -m gptstack.tools.cli bench "$name" "$@" --out "$OUT"
    else
        echo "   (no 'timeout' command here: running without the time limit)"
        "$PY" -m gptstack.tools.cli bench "$name" "$@" --out "$OUT"
    fi
    rc=$?
    line="$name: exit $rc after $(( $(date +%s) - start )) s"
    STATUS+=("$line")
    echo "== $line"
}

for suite in $SUITES; do
    case $suite in
        train)
            mapfile -t P < <(presets "$TRAIN_PRESETS")
            run_suite train "$T_TRAIN" "${COMMON[@]}" "${P[@]}" --rungs "$TRAIN_RUNGS" ;;
        generate)
            mapfile -t P < <(presets "$GEN_PRESETS")
            run_suite generate "$T_GENERATE" "${COMMON[@]}" "${P[@]}" --decoders "$GEN_DECODERS" \
                --batches "$GEN_BATCHES" --sweep-prompt "$GEN_SWEEP_PROMPT" --sweep-new "$GEN_SWEEP_NEW" ;;
        attention)
            mapfile -t P < <(presets "$ATTN_PRESETS")
            run_suite attention "$T_ATTENTION" "${COMMON[@]}" "${P[@]}" ;;
        ops)
            mapfile -t P < <(presets "$OPS_PRESETS")
            run_suite ops "$T_OPS" "${COMMON[@]}" "${P[@]}" ;;
        engine)
            run_suite engine "$T_ENGINE" "${CPU_SUITE_ARGS[@]}" ;;
        tokenizer)
            run_suite tokenizer "$T_TOKENIZER" "${CPU_SUITE_ARGS[@]}" ;;
        *) echo "== unknown suite '$suite' (train generate attention ops engine tokenizer)"; STATUS+=("$suite: unknown") ;;
    esac
done

echo
echo "== suites"
printf '   %s\n' "${STATUS[@]}"
echo "== files in $OUT"
ls -1 "$OUT"
echo "== short table (fastest variant per row group; every row is in the JSON)"
shopt -s nullglob
FILES=("$OUT"/*.json)
if [ ${#FILES[@]} -gt 0 ]; then
    "$PY" -m gptstack.tools.cli bench summary --short "${FILES[@]}"
else
    echo "no result files were written"
    exit 1
fi
