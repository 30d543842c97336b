# benchmarks/device_env.sh: sourced by the GPU scripts that run `gptstack` from this checkout's
# sources (gpu_train_ab.sh, gpu_curves.sh): the members' src folders on PYTHONPATH (namespace
# packages: nothing to install on the lent machine), then PREBUILT (a gptstack.cuda_ops built by
# packages/cuda_ops/scripts/prebuild_for_device.sh) where given; DATA (a folder under the
# checkout holding the corpora) as GPTSTACK_DATA_DIR; caches in /tmp. Expects ROOT.
export PYTHONUNBUFFERED=1 GPTSTACK_CACHE_DIR=/tmp/gptstack-cache
[ -n "${DATA:-}" ] && export GPTSTACK_DATA_DIR=$ROOT/$DATA
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/gptstack-pycache
SOURCES=$ROOT/packages/tokenizer/src:$ROOT/packages/model/src:$ROOT/packages/quant/src
SOURCES=$SOURCES:$ROOT/packages/bench/src:$ROOT/tools/src
export PYTHONPATH=$SOURCES${PREBUILT:+:$ROOT/$PREBUILT}
