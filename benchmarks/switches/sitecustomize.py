"""Kernel switches of gptstack.cuda_ops for a whole benchmark process, from the environment.

    GPTSTACK_CUDA_OPS_SWITCHES="set_cross_entropy_staged=0" \\
        PYTHONPATH=benchmarks/switches:$PYTHONPATH gptstack train ...

Python imports `sitecustomize` at start-up from the first folder on sys.path that has one, so
with this folder first on PYTHONPATH every `_C.set_*` named here is called with its integer (a
bool switch takes 0 or 1) before the program runs: a benchmarks/train_ab.py variant can then
compare two kernels of one build in fresh `gptstack train` processes (kernel switches have no
config key: they are for tests and benchmarks). Without the variable it does nothing.
"""

import os

_SWITCHES = os.environ.get("GPTSTACK_CUDA_OPS_SWITCHES", "").strip()
if _SWITCHES:
    from gptstack.cuda_ops import _C

    for _item in _SWITCHES.split(","):
        _name, _, _value = _item.partition("=")
        if not _name.startswith("set_") or not hasattr(_C, _name) or not _value:
            raise SystemExit(
                f"GPTSTACK_CUDA_OPS_SWITCHES: {_item!r} is not NAME=INTEGER for one of "
                f"gptstack.cuda_ops._C's set_* switches"
            )
        try:
            _arg = int(_value)
            getattr(_C, _name)(_arg)
        except TypeError:  # a switch that takes a bool: 0 or 1
            _arg = bool(int(_value))
            getattr(_C, _name)(_arg)
        print(f"sitecustomize: gptstack.cuda_ops._C.{_name}({_arg})", flush=True)
