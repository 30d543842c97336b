#!/usr/bin/env bash
# packages/cuda_ops/scripts/gpu_check.sh: build gptstack.cuda_ops on a GPU host, run its CUDA
# tests, compute-sanitizer on one call of every kernel, the op benchmarks and the training-step
# comparison; logs and JSON into $OUT, a short table printed last.
#
#   On the lent H200 (repository root; python3 with torch, nvcc, cmake, scikit-build-core,
#   nanobind, pytest; no uv, no network):
#     GPTSTACK_GIT_COMMIT=<commit> bash packages/cuda_ops/scripts/gpu_check.sh
#   Anywhere, to check the script itself (CPU, tiny sizes; CUDA stages report "no GPU"):
#     SMOKE=1 OUT=/tmp/gpu-check PYTHON=/path/to/python bash packages/cuda_ops/scripts/gpu_check.sh
#
# Stages (STAGES="build test sanitize bench step", or any of them and "attn"; each has a time
# limit, a failure is reported and the next stage still runs):
#   build     pip install --no-deps --no-build-isolation -t $SITE ./packages/cuda_ops with
#             GPTSTACK_CUDA=ON, GPTSTACK_CUDA_ARCHS=$ARCHS (default sm_90a: one arch, quick),
#             -Xptxas -v (registers and spills of every kernel land in build.log)
#   test      pytest -m cuda on packages/cuda_ops/tests and packages/model/tests/test_native_ops.py
#   sanitize  compute-sanitizer --tool memcheck on `kernel_driver.py once` (RACECHECK=1 adds
#             --tool racecheck, for the shared-memory reductions); attention_check.py: the
#             attention kernels under memcheck, racecheck, synccheck and initcheck
#             (ATTN_TOOLS: a subset, e.g. "memcheck")
#   bench     gptstack bench ops (the ops with native candidates, fwd and fwd+bwd),
#             gptstack bench attention, every preset, and attention_bench.py (the attention
#             kernel vs each SDPA backend, fwd and fwd+bwd, model steps; into the same JSON)
#   attn      attention_bench.py alone (kernels only with ATTN_STEPS=0), into its own JSON
#   step      kernel_driver.py step: forward+backward of each preset, ops=torch vs ops=gptstack,
#             eager and (STEP_COMPILE=1, default) torch.compile: time ratio and peak memory
# Files in $OUT (8 at most come back): gpu_check.log (everything), build.log, pytest.log,
# sanitizer.log, step.json, ops-*.json, attention-*.json, summary.txt.
# Knobs: PYTHON=python3 SITE=/tmp/site ARCHS=sm_90a PREBUILT=DIR STAGES=... OPS_PRESETS, ATTN_PRESETS,
# STEP_PRESETS (space-separated) TIMEOUT_<STAGE> (seconds) BUDGET_S=1 SMOKE=1 ATTN_TOOLS
# ATTN_STEPS=1.
set -u -o pipefail

cd "$(dirname "$0")/../../.."
ROOT=$PWD
PY=${PYTHON:-python3}
SMOKE=${SMOKE:-0}
OUT=${OUT:-/tmp/gpu-check}
SITE=${SITE:-/tmp/site}
ARCHS=${ARCHS:-sm_90a}
STAGES=${STAGES:-"build test sanitize bench step"}
ALL3="esp32 shakespeare-char gpt2-124m"
OPS_PRESETS=${OPS_PRESETS:-$ALL3}
ATTN_PRESETS=${ATTN_PRESETS:-$ALL3}
STEP_PRESETS=${STEP_PRESETS:-$ALL3}
STEP_COMPILE=${STEP_COMPILE:-1}
BUDGET_S=${BUDGET_S:-1}
ATTN_TOOLS=${ATTN_TOOLS:-"memcheck racecheck synccheck initcheck"}
ATTN_STEPS=${ATTN_STEPS:-1}
NATIVE_OPS=layernorm,gelu_tanh,layernorm_fwd_bwd,add_layernorm_fwd_bwd,gelu_tanh_fwd_bwd,cross_entropy_fwd_bwd,linear_cross_entropy_fwd_bwd
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_check.log") 2>&1

# /tmp/site holds the built gptstack.cuda_ops (with _C) and must come first; every other
# member runs from its source folder (packages/cuda_ops/src is left out: it has no _C).
PYTHONPATH=$SITE
for src in "$ROOT"/packages/*/src "$ROOT"/tools/src; do
    [ "$src" = "$ROOT/packages/cuda_ops/src" ] || PYTHONPATH=$PYTHONPATH:$src
done
export PYTHONPATH PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/gptstack-inductor-cache}
if [ "$SMOKE" = 1 ]; then
    CUDA_MODE=AUTO; DEVICE=cpu; BENCH=(--device cpu --smoke --compile-backend aot_eager)
    STEP_ARGS=(--smoke); STEP_COMPILE=0; ATTN_BENCH=(--device cpu --smoke)
else
    CUDA_MODE=ON; DEVICE=cuda; BENCH=(--device cuda --budget-s "$BUDGET_S"); STEP_ARGS=()
    ATTN_BENCH=(--device cuda --budget-s "$BUDGET_S")
fi

echo "== gpu_check.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) SMOKE=$SMOKE OUT=$OUT ARCHS=$ARCHS"
"$PY" - <<'EOF'
import importlib, shutil, subprocess, sys
print("python", sys.version.split()[0])
for name in ("torch", "scikit_build_core", "nanobind", "pytest", "numpy", "safetensors"):
    try:
        m = importlib.import_module(name)
        print(f"{name} {getattr(m, '__version__', '?')}")
    except Exception as e:
        print(f"{name}: MISSING ({type(e).__name__}: {e})")
for tool in ("nvcc", "cmake", "ninja", "compute-sanitizer"):
    path = shutil.which(tool)
    line = "MISSING"
    if path:
        out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
        line = f"{path}: {(out.strip().splitlines() or ['?'])[-1]}"
    print(f"{tool}: {line}")
import torch
print("GPU:", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
EOF

STATUS=()
limit_of() { local v="TIMEOUT_${1^^}"; v=${v//-/_}; echo "${!v:-$2}"; }
run_stage() {  # run_stage NAME LOG|- DEFAULT_LIMIT_S COMMAND...: time-limited, never fatal
    local name=$1 log=$2 limit rc start
    limit=$(limit_of "$name" "$3")
    shift 3
    start=$(date +%s)
    echo "== $name (limit ${limit} s): $*"
    # SIGINT first: the bench CLI and the driver stop cleanly and keep the rows written so far
    if [ "$log" = - ]; then
        timeout --signal=INT --kill-after=20 "$limit" "$@"
    else
        timeout --signal=INT --kill-after=20 "$limit" "$@" > >(tee -a "$log") 2>&1
    fi
    rc=$?
    STATUS+=("$(printf '%-9s exit %3d after %4d s' "$name" "$rc" "$(( $(date +%s) - start ))")")
    echo "== $name: exit $rc"
    return $rc
}
presets() { local p; for p in $1; do printf -- '--preset\n%s\n' "$p"; done; }
# PREBUILT=DIR (prebuild_for_device.sh's output, carried): used instead of building when its
# stamp names these sources and archs and it imports here; otherwise the build runs as before.
prebuilt_matches() {
    [ -n "${PREBUILT:-}" ] && [ "$SMOKE" != 1 ] || return 1
    local want have
    want=$(bash "$ROOT/packages/cuda_ops/scripts/source_hash.sh" "$ARCHS")
    have=$(cat "$PREBUILT/SOURCES" 2>/dev/null || echo "no stamp")
    if [ "$want" != "$have" ]; then
        echo "== build: $PREBUILT is stale ($have; these sources: $want): building"; return 1
    fi
    PYTHONPATH=$PREBUILT:$PYTHONPATH "$PY" -c "import gptstack.cuda_ops as o; assert o.build_info()['cuda']" \
        || { echo "== build: $PREBUILT does not import here: building"; return 1; }
}

for stage in $STAGES; do
    case $stage in
    build)
        rm -rf "$SITE" "$ROOT/packages/cuda_ops/build"
        : > "$OUT/build.log"
        if prebuilt_matches; then
            cp -r "$PREBUILT" "$SITE"
            echo "== build: prebuilt $PREBUILT ($(cat "$SITE/SOURCES"))" | tee -a "$OUT/build.log"
        else
            run_stage build "$OUT/build.log" 420 env GPTSTACK_CUDA="$CUDA_MODE" \
                GPTSTACK_CUDA_ARCHS="$ARCHS" GPTSTACK_PTXAS_VERBOSE=ON "$PY" -m pip install \
                --no-deps --no-build-isolation --no-cache-dir -v -t "$SITE" ./packages/cuda_ops
        fi
        "$PY" -c "import gptstack.cuda_ops as o, json; print('build_info', json.dumps(o.build_info()))" \
            2>&1 | tee -a "$OUT/build.log" ;;
    test)
        : > "$OUT/pytest.log"
        run_stage test "$OUT/pytest.log" 300 "$PY" -m pytest -m cuda -q -rs -p no:cacheprovider \
            packages/cuda_ops/tests packages/model/tests/test_native_ops.py ;;
    sanitize)
        : > "$OUT/sanitizer.log"
        if command -v compute-sanitizer >/dev/null 2>&1 && [ "$DEVICE" = cuda ]; then
            run_stage memcheck "$OUT/sanitizer.log" 300 compute-sanitizer --tool memcheck \
                --error-exitcode 9 "$PY" packages/cuda_ops/scripts/kernel_driver.py once
            if [ "${RACECHECK:-0}" = 1 ]; then
                run_stage racecheck "$OUT/sanitizer.log" 300 compute-sanitizer --tool racecheck \
                    --error-exitcode 9 "$PY" packages/cuda_ops/scripts/kernel_driver.py once
            fi
            # attention kernels: memcheck, racecheck, synccheck, initcheck (attention_check.py)
            read -r -a TOOLS <<< "$ATTN_TOOLS"
            run_stage attn-sanitize "$OUT/sanitizer.log" 540 "$PY" \
                packages/cuda_ops/scripts/attention_check.py --tools "${TOOLS[@]}"
        else
            echo "== sanitize: no compute-sanitizer or no GPU; running the driver alone"
            run_stage driver "$OUT/sanitizer.log" 300 "$PY" packages/cuda_ops/scripts/kernel_driver.py once
            run_stage attn-driver "$OUT/sanitizer.log" 300 "$PY" packages/cuda_ops/scripts/attention_check.py --workload
        fi ;;
    bench)
        mapfile -t P < <(presets "$OPS_PRESETS")
        run_stage bench-ops - 300 "$PY" -m gptstack.tools.cli bench ops \
            "${BENCH[@]}" "${P[@]}" --ops "$NATIVE_OPS" --out "$OUT" --no-progress
        mapfile -t P < <(presets "$ATTN_PRESETS")
        run_stage bench-attn - 120 "$PY" -m gptstack.tools.cli bench \
            attention "${BENCH[@]}" "${P[@]}" --out "$OUT" --no-progress
        # attention kernel vs every SDPA backend, fwd and fwd+bwd, and model steps: added to
        # the attention result above (one file back); attention_bench.py
        run_stage bench-attn-kernels - 420 "$PY" packages/cuda_ops/scripts/attention_bench.py \
            "${ATTN_BENCH[@]}" "${P[@]}" --merge-into "$OUT/attention-*.json" --out "$OUT" ;;
    attn)
        mapfile -t P < <(presets "$ATTN_PRESETS")
        NO_STEPS=(); [ "$ATTN_STEPS" = 1 ] || NO_STEPS=(--no-steps)
        run_stage attn - 420 "$PY" packages/cuda_ops/scripts/attention_bench.py \
            "${ATTN_BENCH[@]}" "${P[@]}" "${NO_STEPS[@]}" --out "$OUT" ;;
    step)
        mapfile -t P < <(presets "$STEP_PRESETS")
        run_stage step - 240 "$PY" packages/cuda_ops/scripts/kernel_driver.py \
            step --out "$OUT/step.json" "${P[@]}" "${STEP_ARGS[@]}"
        if [ "$STEP_COMPILE" = 1 ]; then
            run_stage step-compile - 300 "$PY" \
                packages/cuda_ops/scripts/kernel_driver.py step --compile \
                --out "$OUT/step-compile.json" "${P[@]}" "${STEP_ARGS[@]}"
            # one file back: the compiled rows appended to step.json
            "$PY" - "$OUT/step.json" "$OUT/step-compile.json" <<'EOF'
import json, os, sys
a, b = sys.argv[1:]
if os.path.exists(b):
    data = json.load(open(a)) if os.path.exists(a) else {"rows": []}
    data["rows"] += json.load(open(b))["rows"]
    json.dump(data, open(a + ".tmp", "w"), indent=1); os.replace(a + ".tmp", a); os.remove(b)
EOF
        fi ;;
    *) echo "== unknown stage '$stage' (build test sanitize bench attn step)"; STATUS+=("$stage: unknown") ;;
    esac
done

{
    echo "== gpu_check summary ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
    printf '   %s\n' "${STATUS[@]}"
    grep -h '^build_info' "$OUT/build.log" 2>/dev/null | cut -c1-300
    echo "-- ptxas: kernels with spills (from build.log)"
    grep -E 'bytes spill (stores|loads)' "$OUT/build.log" 2>/dev/null \
        | grep -vE ' 0 bytes spill stores, 0 bytes spill loads' | sort | uniq -c | head -5 \
        || true
    grep -cE 'Used [0-9]+ registers' "$OUT/build.log" 2>/dev/null | sed 's/^/   kernels compiled: /'
    echo "-- pytest -m cuda"
    tail -n 3 "$OUT/pytest.log" 2>/dev/null
    echo "-- compute-sanitizer"
    grep -hE 'ERROR SUMMARY|once:' "$OUT/sanitizer.log" 2>/dev/null
    # attention_check.py: one line per tool, and the first errors of a tool that is not clean
    grep -hE -A12 '^attention_check [a-z]+: ' "$OUT/sanitizer.log" 2>/dev/null \
        | grep -E '^attention_check|^    ' | head -40
    echo "-- training step, ops=gptstack vs ops=torch (median of pairwise ratios; peak memory)"
    grep -hE '^step ' "$OUT/gpu_check.log" 2>/dev/null
    echo "-- op benchmarks (fastest per row group; every row is in the JSON)"
    shopt -s nullglob
    FILES=("$OUT"/ops-*.json "$OUT"/attention-*.json)
    if [ ${#FILES[@]} -gt 0 ]; then
        "$PY" -m gptstack.tools.cli bench summary "${FILES[@]}" 2>&1 \
            | grep -E 'cuda_ops|eager|torch.compile|sdpa|native' | head -80
    else
        echo "   no bench result files"
    fi
} > "$OUT/summary.txt" 2>&1
cat "$OUT/summary.txt"
ls -1 "$OUT"
