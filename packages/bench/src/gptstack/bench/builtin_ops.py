"""The ops measured today, all PyTorch's own: LayerNorm, GELU (tanh), softmax, attention (SDPA).

Sizes follow the model: LayerNorm over (B·T, C), GELU on the MLP's (B·T, 4C), softmax over
attention scores (B, nh, T, T) along the last dimension, causal SDPA on (B, nh, T, hs).
FLOP counts per element are estimates (stated in each `about`); these ops are bound by memory,
so `bytes_moved` (read every input once, write every output once) sets their floor.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .opregistry import OpSize, register_op

LAYER_NORM_EPS = 1e-5  # as gptstack.model (GPT-2's epsilon)


def _randn(shape, device, dtype, g) -> torch.Tensor:
    return torch.randn(*shape, generator=g, device=device, dtype=dtype)  # g lives on device


def _nbytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def layernorm(x, weight, bias):
    return F.layer_norm(x, (x.size(-1),), weight, bias, LAYER_NORM_EPS)


def _ln_inputs(s: OpSize, device, dtype, g):
    x = _randn((s.B * s.T, s.C), device, dtype, g)  # (B*T, C)
    weight = 1.0 + 0.1 * _randn((s.C,), device, dtype, g)
    bias = 0.1 * _randn((s.C,), device, dtype, g)
    return x, weight, bias


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


def _gelu_inputs(s: OpSize, device, dtype, g):
    return (_randn((s.B * s.T, 4 * s.C), device, dtype, g),)  # (B*T, 4C): the MLP's hidden


def softmax(x):
    return F.softmax(x, dim=-1)


def _softmax_inputs(s: OpSize, device, dtype, g):
    return (_randn((s.B, s.nh, s.T, s.T), device, dtype, g),)  # (B, nh, T, T) scores


def causal_sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _sdpa_inputs(s: OpSize, device, dtype, g):
    return tuple(_randn((s.B, s.nh, s.T, s.hs), device, dtype, g) for _ in range(3))


def register_all() -> None:
    register_op(
        "layernorm", layernorm, make_inputs=_ln_inputs,
        bytes_moved=lambda i: 2 * _nbytes(i[0]) + _nbytes(i[1], i[2]),
        flops=lambda i: 8 * i[0].numel(),
        about="F.layer_norm over (B·T, C); ~8 FLOP/element (mean, variance, normalize, "
              "scale, shift)", replace=True)
    register_op(
        "gelu_tanh", gelu_tanh, make_inputs=_gelu_inputs,
        bytes_moved=lambda i: 2 * _nbytes(i[0]),
        flops=lambda i: 8 * i[0].numel(),
        about="F.gelu(approximate='tanh') on (B·T, 4C); ~8 FLOP/element, tanh counted as one",
        replace=True)
    register_op(
        "softmax", softmax, make_inputs=_softmax_inputs,
        bytes_moved=lambda i: 2 * _nbytes(i[0]),
        flops=lambda i: 5 * i[0].numel(),
        about="F.softmax(dim=-1) on (B, nh, T, T); ~5 FLOP/element (max, subtract, exp, sum, "
              "divide)", replace=True)
    register_op(
        "attention_sdpa", causal_sdpa, make_inputs=_sdpa_inputs,
        bytes_moved=lambda i: 4 * _nbytes(i[0]),
        flops=lambda i: 2 * i[0].size(0) * i[0].size(1) * i[0].size(2) ** 2 * i[0].size(3),
        about="causal F.scaled_dot_product_attention on (B, nh, T, hs); reads q, k, v and "
              "writes the output once; FLOPs of QKᵀ and PV with the causal half skipped "
              "(2·B·nh·T²·hs)", replace=True)
