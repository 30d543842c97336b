"""The ops measured today, all PyTorch's own: LayerNorm, GELU (tanh), softmax, attention (SDPA),
and the forward + backward of the model's LayerNorm, residual-add + LayerNorm, GELU and loss.

Sizes follow the model: LayerNorm over (B·T, C), GELU on the MLP's (B·T, 4C), softmax over
attention scores (B, nh, T, T) along the last dimension, causal SDPA on (B, nh, T, hs), the loss
over (B·T, V) logits from (B·T, C) hidden states. FLOP counts per element are estimates (stated
in each `about`); all but the loss are bound by memory, so `bytes_moved` (read every input
once, write every output once) sets their floor.

A `*_fwd_bwd` op runs the forward and the backward for given output gradients and returns what
a training step keeps: the gradient of every differentiable input, then the forward's outputs
(the next layer reads them). Returning only the first gradient let `torch.compile` delete the
rest as dead code, which no training step can do (on the H200 its LayerNorm "forward +
backward" took 12.4 us against 7.6 us for the forward alone: only dx was computed). Every
implementation returns the same tuple and the check compares all of it. The references
differentiate with `torch.func.vjp`: a function transform, so it works under the suite's
`no_grad`, and Dynamo traces it whole, so `torch.compile` of a reference is one graph of forward
and backward (with `torch.autograd.grad` Dynamo falls back to eager for the whole function).
Candidates may use plain autograd.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .opregistry import OpSize, differentiate, register_op

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


# Each `*_fwd_bwd` op's arguments split as (forward, wrt, extra, douts): what its reference
# differentiates (opregistry.differentiate), and what the suite's "torch.compile (fwd, bwd)"
# row compiles on its own.
def _ln_split(x, weight, bias, dy):
    return layernorm, (x, weight, bias), (), dy


layernorm_fwd_bwd = differentiate(_ln_split)


def _ln_grad_inputs(s: OpSize, device, dtype, g):
    return (*_ln_inputs(s, device, dtype, g), _randn((s.B * s.T, s.C), device, dtype, g))


def _add_layernorm(x, residual, weight, bias):
    s = x + residual
    return s, layernorm(s, weight, bias)


def _add_ln_split(x, residual, weight, bias, ds, dy):
    return _add_layernorm, (x, residual, weight, bias), (), (ds, dy)


add_layernorm_fwd_bwd = differentiate(_add_ln_split)


def _add_ln_inputs(s: OpSize, device, dtype, g):
    x, weight, bias = _ln_inputs(s, device, dtype, g)
    shape = (s.B * s.T, s.C)
    return (
        x,
        _randn(shape, device, dtype, g),
        weight,
        bias,
        *(_randn(shape, device, dtype, g) for _ in range(2)),
    )


def _gelu_split(x, dy):
    return gelu_tanh, (x,), (), dy


gelu_tanh_fwd_bwd = differentiate(_gelu_split)


def _gelu_grad_inputs(s: OpSize, device, dtype, g):
    return (*_gelu_inputs(s, device, dtype, g), _randn((s.B * s.T, 4 * s.C), device, dtype, g))


def mlp(x, fc_w, fc_b, proj_w, proj_b):
    return F.linear(gelu_tanh(F.linear(x, fc_w, fc_b)), proj_w, proj_b)


def _mlp_split(x, fc_w, fc_b, proj_w, proj_b, dy):
    return mlp, (x, fc_w, fc_b, proj_w, proj_b), (), dy


mlp_fwd_bwd = differentiate(_mlp_split)


def _mlp_inputs(s: OpSize, device, dtype, g):
    C, F_ = s.C, 4 * s.C
    return (
        _randn((s.B * s.T, C), device, dtype, g),  # (B*T, C): ln_2's output
        0.02 * _randn((F_, C), device, dtype, g),  # c_fc, GPT-2's init std
        0.02 * _randn((F_,), device, dtype, g),
        0.02 * _randn((C, F_), device, dtype, g),  # c_proj
        0.02 * _randn((C,), device, dtype, g),
        _randn((s.B * s.T, C), device, dtype, g),  # dy
    )


def qkv_split(qkv, bias):
    C = qkv.shape[-1] // 3
    return (qkv + bias).split(C, dim=-1)


def _qkv_split_split(qkv, bias, dq, dk, dv):
    return qkv_split, (qkv, bias), (), (dq, dk, dv)


qkv_split_fwd_bwd = differentiate(_qkv_split_split)


def _qkv_split_inputs(s: OpSize, device, dtype, g):
    N, C = s.B * s.T, s.C
    return (
        _randn((N, 3 * C), device, dtype, g),  # c_attn's product before its bias
        0.02 * _randn((3 * C,), device, dtype, g),
        *(_randn((N, C), device, dtype, g) for _ in range(3)),  # the attention's dq, dk, dv
    )


IGNORE_INDEX = -1  # as gptstack.model: a target of -1 has no loss
# OpSize carries no vocabulary size; until it does, the loss ops take V from the preset's name
# (vocabularies as `gptstack train` pads them: char 65, esp32 BPE 512, GPT-2 50257 -> 50304).
VOCAB_BY_PRESET = {"shakespeare-char": 65, "esp32": 512, "gpt2-124m": 50304}
DEFAULT_VOCAB = 50304


def vocab_size(s: OpSize) -> int:
    return getattr(s, "V", None) or VOCAB_BY_PRESET.get(s.name, DEFAULT_VOCAB)


def _ce_loss(logits, targets):
    return F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX)


def _ce_split(logits, targets):
    return _ce_loss, (logits,), (targets,), None


cross_entropy_fwd_bwd = differentiate(_ce_split)


def _targets(s: OpSize, V: int, device, g) -> torch.Tensor:
    return torch.randint(0, V, (s.B * s.T,), generator=g, device=device)


def _ce_inputs(s: OpSize, device, dtype, g):
    V = vocab_size(s)
    return 2 * _randn((s.B * s.T, V), device, dtype, g), _targets(s, V, device, g)


def _linear_ce_loss(h, weight, targets):
    return F.cross_entropy(h @ weight.t(), targets, ignore_index=IGNORE_INDEX)


def _linear_ce_split(h, weight, targets):
    return _linear_ce_loss, (h, weight), (targets,), None


linear_cross_entropy_fwd_bwd = differentiate(_linear_ce_split)


def _linear_ce_inputs(s: OpSize, device, dtype, g):
    V = vocab_size(s)
    h = _randn((s.B * s.T, s.C), device, dtype, g)  # (B*T, C): ln_f's output
    weight = 0.02 * _randn((V, s.C), device, dtype, g)  # (V, C): wte, GPT-2's init std
    return h, weight, _targets(s, V, device, g)


def register_all() -> None:
    register_op(
        "layernorm",
        layernorm,
        make_inputs=_ln_inputs,
        bytes_moved=lambda i: 2 * _nbytes(i[0]) + _nbytes(i[1], i[2]),
        flops=lambda i: 8 * i[0].numel(),
        about="F.layer_norm over (B·T, C); ~8 FLOP/element (mean, variance, normalize, "
        "scale, shift)",
        replace=True,
    )
    register_op(
        "gelu_tanh",
        gelu_tanh,
        make_inputs=_gelu_inputs,
        bytes_moved=lambda i: 2 * _nbytes(i[0]),
        flops=lambda i: 8 * i[0].numel(),
        about="F.gelu(approximate='tanh') on (B·T, 4C); ~8 FLOP/element, tanh counted as one",
        replace=True,
    )
    register_op(
        "softmax",
        softmax,
        make_inputs=_softmax_inputs,
        bytes_moved=lambda i: 2 * _nbytes(i[0]),
        flops=lambda i: 5 * i[0].numel(),
        about="F.softmax(dim=-1) on (B, nh, T, T); ~5 FLOP/element (max, subtract, exp, sum, "
        "divide)",
        replace=True,
    )
    register_op(
        "attention_sdpa",
        causal_sdpa,
        make_inputs=_sdpa_inputs,
        bytes_moved=lambda i: 4 * _nbytes(i[0]),
        flops=lambda i: 2 * i[0].size(0) * i[0].size(1) * i[0].size(2) ** 2 * i[0].size(3),
        about="causal F.scaled_dot_product_attention on (B, nh, T, hs); reads q, k, v and "
        "writes the output once; FLOPs of QKᵀ and PV with the causal half skipped "
        "(2·B·nh·T²·hs)",
        replace=True,
    )
    register_op(
        "layernorm_fwd_bwd",
        layernorm_fwd_bwd,
        backprop=_ln_split,
        make_inputs=_ln_grad_inputs,
        bytes_moved=lambda i: 5 * _nbytes(i[0]) + 2 * _nbytes(i[1], i[2]),
        flops=lambda i: 18 * i[0].numel(),
        about="F.layer_norm over (B·T, C), forward and backward (returns dx, dweight, dbias, "
        "y); reads x, then dy and x again, writes y and dx; ~8 + ~10 FLOP/element",
        replace=True,
    )
    register_op(
        "add_layernorm_fwd_bwd",
        add_layernorm_fwd_bwd,
        backprop=_add_ln_split,
        make_inputs=_add_ln_inputs,
        bytes_moved=lambda i: 8 * _nbytes(i[0]) + 2 * _nbytes(i[2], i[3]),
        flops=lambda i: 20 * i[0].numel(),
        about="s = x + residual, y = F.layer_norm(s) on (B·T, C), forward and backward for "
        "gradients of s and y (returns dx, dresidual, dweight, dbias, s, y); reads x, residual, "
        "then dy, ds, s; writes s, y, dx; ~20 FLOP/element",
        replace=True,
    )
    register_op(
        "gelu_tanh_fwd_bwd",
        gelu_tanh_fwd_bwd,
        backprop=_gelu_split,
        make_inputs=_gelu_grad_inputs,
        bytes_moved=lambda i: 5 * _nbytes(i[0]),
        flops=lambda i: 20 * i[0].numel(),
        about="F.gelu(approximate='tanh') on (B·T, 4C), forward and backward (returns dx, "
        "y); reads x, then dy and x; writes y and dx; ~8 + ~12 FLOP/element",
        replace=True,
    )
    register_op(
        "mlp_fwd_bwd",
        mlp_fwd_bwd,
        backprop=_mlp_split,
        make_inputs=_mlp_inputs,
        bytes_moved=lambda i: 3 * _nbytes(i[0]) + 2 * _nbytes(*i[1:5]) + 2 * _nbytes(i[5]),
        flops=lambda i: 48 * i[0].size(0) * i[0].size(1) ** 2,
        about="the MLP, F.linear(gelu_tanh(F.linear(x, c_fc)), c_proj) on (B·T, C) with a 4C "
        "hidden width, forward and backward (returns dx, the four parameter gradients, y); "
        "FLOPs of its six matmuls (48·B·T·C²), bound by them",
        replace=True,
    )
    register_op(
        "qkv_split_fwd_bwd",
        qkv_split_fwd_bwd,
        backprop=_qkv_split_split,
        make_inputs=_qkv_split_inputs,
        bytes_moved=lambda i: 4 * _nbytes(i[0]),
        flops=lambda i: 2 * i[0].numel(),
        about="c_attn's output (B·T, 3C) plus its bias, split into q, k, v, forward and "
        "backward from the attention's dq, dk, dv (returns dqkv, dbias, q, k, v): reads and "
        "writes (B·T, 3C) each way, the bias gradient a column sum of dqkv",
        replace=True,
    )
    register_op(
        "cross_entropy_fwd_bwd",
        cross_entropy_fwd_bwd,
        backprop=_ce_split,
        make_inputs=_ce_inputs,
        bytes_moved=lambda i: 2 * _nbytes(i[0]) + _nbytes(i[1]),
        flops=lambda i: 10 * i[0].numel(),
        about="F.cross_entropy(ignore_index=-1) of (B·T, V) logits, forward and backward "
        "(returns dlogits, loss); the floor reads the logits and writes dlogits once; ~10 "
        "FLOP/logit (max, exp, sum, log, softmax, subtract)",
        replace=True,
    )
    register_op(
        "linear_cross_entropy_fwd_bwd",
        linear_cross_entropy_fwd_bwd,
        backprop=_linear_ce_split,
        make_inputs=_linear_ce_inputs,
        bytes_moved=lambda i: 2 * _nbytes(i[0], i[1]) + _nbytes(i[2]),
        flops=lambda i: 6 * i[0].size(0) * i[1].size(0) * i[0].size(1),
        about="the LM head and loss: F.cross_entropy(h @ wte.T) with h (B·T, C), wte (V, C), "
        "forward and backward (returns dh, dwte, loss); FLOPs of the three matmuls (logits, dh, "
        "dwte: 6·B·T·V·C), the softmax not counted",
        replace=True,
    )
