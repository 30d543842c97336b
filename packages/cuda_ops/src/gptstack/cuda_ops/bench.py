"""The kernels as gptstack.bench candidates: `bench_candidates()` -> {op: {name: fn}}.

Each fn takes the same arguments as the bench op's PyTorch reference (gptstack.bench
builtin_ops.py) and returns the same: the output for forward ops; for the `*_fwd_bwd` ops the
gradient of every differentiable input, then the forward's outputs. bench imports this; this
package never imports bench.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .cross_entropy import IGNORE_INDEX, cross_entropy, linear_cross_entropy
from .gelu import gelu_tanh
from .layernorm import DEFAULT_EPS, add_layernorm, layernorm

NAME = "cuda_ops"


def _fwd_bwd(f, inputs: tuple, douts: tuple) -> tuple[torch.Tensor, ...]:
    """(gradient of f's outputs, against douts, with respect to each input, then f's outputs):
    bench's contract."""
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_() for t in inputs]
        outs = f(*leaves)
        outs = outs if isinstance(outs, tuple) else (outs,)
        grads = torch.autograd.grad(outs, leaves, douts)
    return (*grads, *(o.detach() for o in outs))


def _layernorm(x, weight, bias):
    return layernorm(x, weight, bias, DEFAULT_EPS)


def bench_candidates() -> dict[str, dict[str, Callable[..., torch.Tensor]]]:
    """{bench op name: {implementation name: fn}} for every op this package implements."""
    return {
        "layernorm": {NAME: _layernorm},
        "gelu_tanh": {NAME: gelu_tanh},
        "layernorm_fwd_bwd": {NAME: lambda x, w, b, dy: _fwd_bwd(_layernorm, (x, w, b), (dy,))},
        "add_layernorm_fwd_bwd": {
            NAME: lambda x, r, w, b, ds, dy: _fwd_bwd(add_layernorm, (x, r, w, b), (ds, dy))
        },
        "gelu_tanh_fwd_bwd": {NAME: lambda x, dy: _fwd_bwd(gelu_tanh, (x,), (dy,))},
        "cross_entropy_fwd_bwd": {
            NAME: lambda z, t: _fwd_bwd(lambda z: cross_entropy(z, t, IGNORE_INDEX), (z,), (None,))
        },
        "linear_cross_entropy_fwd_bwd": {
            f"{NAME} (chunked)": lambda h, w, t: _fwd_bwd(
                lambda h, w: linear_cross_entropy(h, w, t, IGNORE_INDEX), (h, w), (None,)
            )
        },
    }
