"""GELU, tanh form, forward and backward: `torch.ops.gptstack.gelu_tanh`.

    y = gelu_tanh(x)       # y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))

Same values as `F.gelu(x, approximate="tanh")` (the GELU GPT-2 uses). Kernels: csrc/gelu.cpp
(CPU: scalar reference, AVX2/FMA; OpenMP) and csrc/gelu.cu (CUDA). The custom op has a fake
kernel and an autograd formula (its backward is the op `gptstack::gelu_tanh_backward`), so it
runs in eager, under torch.compile(fullgraph=True) and inside CUDA graphs.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._checks import direct, float_tensor
from ._ext import _C, dl, stream_of, threads


def _gelu_tanh_impl(x: Tensor) -> Tensor:
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _C.gelu_forward(dl(out), dl(x), stream_of(x), threads())
    return out


_gelu_tanh = torch.library.custom_op("gptstack::gelu_tanh", mutates_args=())(_gelu_tanh_impl)


@_gelu_tanh.register_fake
def _gelu_tanh_fake(x: Tensor) -> Tensor:
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@torch.library.custom_op("gptstack::gelu_tanh_backward", mutates_args=())
def _gelu_tanh_backward(dout: Tensor, x: Tensor) -> Tensor:
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _C.gelu_backward(dl(dx), dl(dout.to(x.dtype)), dl(x), stream_of(x), threads())
    return dx


@_gelu_tanh_backward.register_fake
def _gelu_tanh_backward_fake(dout: Tensor, x: Tensor) -> Tensor:
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _setup_context(ctx, inputs, output) -> None:
    ctx.save_for_backward(inputs[0])


def _backward(ctx, dout: Tensor) -> Tensor:
    (x,) = ctx.saved_tensors
    return _gelu_tanh_backward(dout, x)


_gelu_tanh.register_autograd(_backward, setup_context=_setup_context)


def gelu_tanh(x: Tensor) -> Tensor:
    """GELU (tanh approximation) of x, elementwise, differentiable.

    x: any shape, contiguous, float32 or bfloat16 (float64 on the CPU), on the CPU or a GPU
    (the latter needs a build with CUDA kernels). Computed in float32 (float64 for float64).
    Returns a new tensor of x's shape and dtype.
    Raises OpTypeError (TypeError) for a non-tensor or another dtype, OpInputError (ValueError)
    for a non-contiguous tensor or another device.
    """
    float_tensor("gelu_tanh", "x", x, min_dim=0)
    return (_gelu_tanh_impl if direct(x) else _gelu_tanh)(x)
