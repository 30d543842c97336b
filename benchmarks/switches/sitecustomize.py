"""Kernel switches of gptstack.cuda_ops for a whole benchmark process, from the environment.

    GPTSTACK_CUDA_OPS_SWITCHES="set_cross_entropy_staged=0" \\
        PYTHONPATH=benchmarks/switches:$PYTHONPATH gptstack train ...

Python imports `sitecustomize` at start-up from the first folder on sys.path that has one, so
with this folder first on PYTHONPATH every switch named here is set (gptstack.cuda_ops.set_switch:
a bool switch takes 0 or 1) before the program runs: a benchmarks/train_ab.py variant can then
compare two kernels of one build in fresh `gptstack train` processes (kernel switches have no
config key: they are for tests and benchmarks). Without the variable it does nothing.
"""

import os

_SWITCHES = os.environ.get("GPTSTACK_CUDA_OPS_SWITCHES", "").strip()
if _SWITCHES:
    from gptstack.cuda_ops import set_switch

    for _item in _SWITCHES.split(","):
        _name, _, _value = _item.partition("=")
        try:
            if not _name.startswith("set_") or not _value:
                raise ValueError("write set_NAME=VALUE")
            _arg = set_switch(_name.removeprefix("set_"), _value)
        except ValueError as e:
            raise SystemExit(
                f"GPTSTACK_CUDA_OPS_SWITCHES: {_item!r} is not NAME=INTEGER for one of "
                f"gptstack.cuda_ops' set_* switches: {e}"
            ) from None
        print(f"sitecustomize: gptstack.cuda_ops._C.{_name}({_arg!r})", flush=True)
