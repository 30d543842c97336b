"""The op registry: every op the `ops` suite measures, and the place native kernels plug in.

    from gptstack.bench import register_op, add_candidate
    register_op("layernorm", reference=F.layer_norm_wrapper, candidates={},
                make_inputs=make_ln_inputs, bytes_moved=ln_bytes, flops=ln_flops)
    add_candidate("layernorm", "cuda_ops", gptstack.cuda_ops.layernorm)   # later, from cuda_ops

An op is measured at sizes derived from a model shape (`OpSize`: B, T, C, nh). For each size the
suite times the reference (eager PyTorch), `torch.compile(reference)` and every candidate,
alternately, and checks each output against the reference computed in float32 (float64 for
fp32 runs). An op that runs a forward and its backward (`*_fwd_bwd`) may also give `backprop`:
`backprop(*inputs) -> (forward, wrt, extra, douts)`, how its arguments split (differentiate
forward(*wrt, *extra) against douts); the suite then also times "torch.compile (fwd, bwd)": the
forward compiled on its own and differentiated by autograd, as a training step runs it, and the
op's candidates are forwards too (same arguments as `forward`), differentiated the same way.
`make_inputs(size, device, dtype, generator)` returns the argument tuple (the
generator lives on `device`, so large inputs are drawn where they are used);
`bytes_moved(inputs)` and `flops(inputs)` give the work that sets the floors (docs/MEASURING.md
rule 4):
bytes that must cross memory at least once, and FLOPs counted as stated in the op's `about`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .errors import BenchError


@dataclass(frozen=True)
class OpSize:
    """The sizes an op is measured at, from one model shape (shape letters B, T, C, nh)."""

    name: str
    B: int
    T: int
    C: int
    nh: int

    @property
    def hs(self) -> int:
        return self.C // self.nh

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "B": self.B, "T": self.T, "C": self.C, "nh": self.nh}


MakeInputs = Callable[[OpSize, torch.device, torch.dtype, torch.Generator], tuple]


@dataclass
class Op:
    name: str
    reference: Callable[..., torch.Tensor]
    make_inputs: MakeInputs
    bytes_moved: Callable[[tuple], int]
    flops: Callable[[tuple], int]
    candidates: dict[str, Callable[..., torch.Tensor]] = field(default_factory=dict)
    about: str = ""
    backprop: Callable[..., tuple] | None = None


def differentiate(
    backprop: Callable[..., tuple], forward: Callable | None = None
) -> Callable[..., tuple]:
    """A `*_fwd_bwd` op's function from its `backprop` split, run as a training step runs it:
    forward(*wrt, *extra) -- the split's own forward, or `forward` taking the same arguments (a
    compiled one, a candidate) -- then autograd for the gradients of wrt against douts (None:
    a scalar loss). Returns (gradients, outputs): what every `*_fwd_bwd` op returns."""

    def run(*inputs):
        own, wrt, extra, douts = backprop(*inputs)
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_() for t in wrt]
            outs = (forward or own)(*leaves, *extra)
            outs = outs if isinstance(outs, tuple) else (outs,)
            douts = douts if douts is None or isinstance(douts, tuple) else (douts,)
            grads = torch.autograd.grad(outs, leaves, douts)
        return (*grads, *(o.detach() for o in outs))

    return run


# the suite's own rows: no candidate may take these names
RESERVED_NAMES = ("eager", "torch.compile", "torch.compile (fwd, bwd)")

_OPS: dict[str, Op] = {}
_builtins_loaded = False


def register_op(
    name: str,
    reference: Callable[..., torch.Tensor],
    candidates: dict[str, Callable[..., torch.Tensor]] | None = None,
    make_inputs: MakeInputs | None = None,
    bytes_moved: Callable[[tuple], int] | None = None,
    flops: Callable[[tuple], int] | None = None,
    *,
    about: str = "",
    backprop: Callable[..., tuple] | None = None,
    replace: bool = False,
) -> Op:
    """Add an op to the registry; BenchError if the name is taken (replace=True to override)."""
    _load_builtins()
    if not name or not callable(reference):
        raise BenchError(f"op {name!r}: needs a non-empty name and a callable reference")
    if make_inputs is None or bytes_moved is None or flops is None:
        raise BenchError(f"op {name!r}: make_inputs, bytes_moved and flops are all required")
    if name in _OPS and not replace:
        raise BenchError(f"op {name!r} is already registered; pass replace=True to override it")
    op = Op(
        name, reference, make_inputs, bytes_moved, flops, dict(candidates or {}), about, backprop
    )
    _OPS[name] = op
    return op


def add_candidate(
    op_name: str, name: str, fn: Callable[..., torch.Tensor], *, replace: bool = False
) -> None:
    """Add an implementation (e.g. a gptstack.cuda_ops kernel) to compare with the reference:
    with the reference's arguments, or for an op with `backprop` its forward's."""
    op = get_op(op_name)
    if name in RESERVED_NAMES or (name in op.candidates and not replace):
        raise BenchError(
            f"op {op_name!r} already has an implementation named {name!r}; pick "
            f"another name or pass replace=True"
        )
    op.candidates[name] = fn


def get_op(name: str) -> Op:
    _load_builtins()
    if name not in _OPS:
        raise BenchError(f"op {name!r} is not registered; known: {', '.join(sorted(_OPS))}")
    return _OPS[name]


def registered_ops() -> dict[str, Op]:
    _load_builtins()
    return dict(_OPS)


def load_native_candidates() -> str:
    """Add the kernels of gptstack.cuda_ops, if installed, as candidates; says what happened.

    cuda_ops cannot import bench (dependencies point down), so it offers its kernels through a
    function: `gptstack.cuda_ops.bench_candidates() -> {op name: {implementation name: fn}}`,
    each fn taking the same arguments as the op's reference.
    """
    try:
        import gptstack.cuda_ops as cuda_ops
    except ImportError as e:
        return (
            f"no native candidates: {e.name or 'gptstack.cuda_ops'} cannot be imported "
            f"(gptstack.cuda_ops is not installed)"
        )
    hook = getattr(cuda_ops, "bench_candidates", None)
    if hook is None:
        return "gptstack.cuda_ops has no bench_candidates(): no native candidates"
    added = []
    for op_name, impls in hook().items():
        if op_name not in registered_ops():
            continue
        for name, fn in impls.items():
            add_candidate(op_name, name, fn, replace=True)
            added.append(f"{op_name}/{name}")
    return f"native candidates from gptstack.cuda_ops: {', '.join(added) or 'none'}"


def _load_builtins() -> None:
    global _builtins_loaded
    if not _builtins_loaded:
        _builtins_loaded = True
        from . import builtin_ops

        builtin_ops.register_all()
