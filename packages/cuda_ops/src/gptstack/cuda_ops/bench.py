"""The kernels as gptstack.bench candidates: `bench_candidates()` -> {op: {name: fn}}.

Each fn takes the same arguments as the bench op's PyTorch reference (gptstack.bench
builtin_ops.py) and returns the same, except for the `*_fwd_bwd` ops: there fn is the forward
(the arguments of the op's `backprop` forward), and bench differentiates it by autograd as it
does PyTorch's. bench imports this; this package never imports bench.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .cross_entropy import IGNORE_INDEX, cross_entropy, linear_cross_entropy
from .gelu import gelu_tanh
from .layernorm import DEFAULT_EPS, add_layernorm, layernorm
from .mlp import mlp_gelu
from .qkv import qkv_heads

NAME = "cuda_ops"


def _layernorm(x, weight, bias):
    return layernorm(x, weight, bias, DEFAULT_EPS)


def _qkv_split(qkv, bias):
    return qkv_heads(qkv + bias.detach(), bias)  # as the model: the bias's gradient from here


def bench_candidates() -> dict[str, dict[str, Callable[..., torch.Tensor]]]:
    """{bench op name: {implementation name: fn}} for every op this package implements."""
    return {
        "layernorm": {NAME: _layernorm},
        "gelu_tanh": {NAME: gelu_tanh},
        "layernorm_fwd_bwd": {NAME: _layernorm},
        "add_layernorm_fwd_bwd": {NAME: add_layernorm},
        "gelu_tanh_fwd_bwd": {NAME: gelu_tanh},
        "mlp_fwd_bwd": {f"{NAME} (epilogues)": mlp_gelu},
        "qkv_split_fwd_bwd": {f"{NAME} (one pass)": _qkv_split},
        "cross_entropy_fwd_bwd": {NAME: lambda z, t: cross_entropy(z, t, IGNORE_INDEX)},
        "linear_cross_entropy_fwd_bwd": {
            f"{NAME} (chunked)": lambda h, w, t: linear_cross_entropy(h, w, t, IGNORE_INDEX)
        },
    }
