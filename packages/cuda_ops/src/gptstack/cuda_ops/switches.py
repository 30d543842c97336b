"""The kernel switches of gptstack.cuda_ops: which of two kernels an op runs, for tests and
benchmarks (no config key sets them).

    switches()                                  # {"cross_entropy_staged": True, ...}
    set_switch("cross_entropy_staged", "0")     # the value as text, in the switch's type

Each switch is a pair in the extension, `_C.set_X(value)` and its getter `_C.X()`: the staged
loss kernel, programmatic launch, the decoder's register rows, the wgmma attention kernels, the
CPU path. Records name their state (gptstack.bench.environment) and
benchmarks/switches/sitecustomize.py sets them for a whole process.
"""

from __future__ import annotations

from ._ext import _C


def switches() -> dict[str, bool | int | str]:
    """Every switch's current value, by name (X of each `_C.set_X` that has a getter `_C.X`)."""
    names = (n.removeprefix("set_") for n in sorted(dir(_C)) if n.startswith("set_"))
    return {name: getattr(_C, name)() for name in names if callable(getattr(_C, name, None))}


def set_switch(name: str, value: str) -> bool | int | str:
    """Set switch `name` from text, converted to the type its getter returns (a bool as 0, 1,
    false or true); returns the value set. ValueError naming the switches, or the type wanted."""
    current = switches()
    if name not in current:
        raise ValueError(
            f"{name!r} is not one of gptstack.cuda_ops' switches ({', '.join(current)})"
        )
    kind = type(current[name])
    try:
        if kind is bool:
            arg = {"0": False, "1": True, "false": False, "true": True}[value.strip().lower()]
        else:
            arg = kind(value)
    except (KeyError, ValueError):
        raise ValueError(
            f"switch {name} takes a {kind.__name__} (bool: 0 or 1), got {value!r}"
        ) from None
    getattr(_C, f"set_{name}")(arg)
    return arg
