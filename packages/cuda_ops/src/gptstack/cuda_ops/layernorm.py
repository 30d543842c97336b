"""LayerNorm over the last dimension, alone or fused with the residual add before it.

    y = layernorm(x, weight, bias)                  # = F.layer_norm(x, (C,), weight, bias, eps)
    s, y = add_layernorm(x, residual, weight, bias) # s = x + residual; y = layernorm(s)

`add_layernorm` is the model's `x = x + attn(ln_1(x)); h = ln_2(x)` seam in one pass: x and the
branch output are read once, the new residual stream s and the normalized h written once.
Custom ops `gptstack::layernorm`, `gptstack::add_layernorm` (outputs include the per-row mean
and rstd that backward reuses) and `gptstack::layernorm_backward`. Kernels: csrc/layernorm.cpp
(CPU), csrc/layernorm.cu (CUDA); formulas in csrc/layernorm.h.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._checks import direct, float_tensor, like
from ._ext import _C, acc_dtype, dl, stream_of, threads
from .errors import OpInputError, OpTypeError

# GPT-2's LayerNorm epsilon (openai/gpt-2 src/model.py `norm`), also gptstack.model's
DEFAULT_EPS = 1e-5
# The CUDA backward keeps one warp's dweight/dbias partials (2C floats) in 48 KiB of shared
# memory (csrc/layernorm.h kLnCudaMaxC)
CUDA_MAX_C = 48 * 1024 // 8


def _outputs(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Empty out (like x), mean and rstd (one per row)."""
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    stats = [torch.empty(x.shape[:-1], dtype=acc_dtype(x.dtype), device=x.device) for _ in range(2)]
    return out, stats[0], stats[1]


def _rows(t: Tensor) -> Tensor:
    return t.view(-1, t.shape[-1])


def _layernorm_impl(
    x: Tensor, weight: Tensor, bias: Tensor | None, eps: float
) -> tuple[Tensor, Tensor, Tensor]:
    out, mean, rstd = _outputs(x)
    _C.layernorm_forward(
        dl(_rows(out)), None, dl(mean.view(-1)), dl(rstd.view(-1)), dl(_rows(x.contiguous())),
        None, dl(weight), dl(bias), eps, stream_of(x), threads(),
    )  # fmt: skip
    return out, mean, rstd


_layernorm = torch.library.custom_op("gptstack::layernorm", mutates_args=())(_layernorm_impl)


@_layernorm.register_fake
def _layernorm_fake(x, weight, bias, eps):
    return _outputs(x)


def _add_layernorm_impl(
    x: Tensor, residual: Tensor, weight: Tensor, bias: Tensor | None, eps: float
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    s = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    out, mean, rstd = _outputs(x)
    _C.layernorm_forward(
        dl(_rows(out)), dl(_rows(s)), dl(mean.view(-1)), dl(rstd.view(-1)),
        dl(_rows(x.contiguous())), dl(_rows(residual.contiguous())), dl(weight), dl(bias), eps,
        stream_of(x), threads(),
    )  # fmt: skip
    return s, out, mean, rstd


_add_layernorm = torch.library.custom_op("gptstack::add_layernorm", mutates_args=())(
    _add_layernorm_impl
)


@_add_layernorm.register_fake
def _add_layernorm_fake(x, residual, weight, bias, eps):
    return (torch.empty(x.shape, dtype=x.dtype, device=x.device), *_outputs(x))


@torch.library.custom_op("gptstack::layernorm_backward", mutates_args=())
def _layernorm_backward(
    dout: Tensor, dsum: Tensor | None, src: Tensor, weight: Tensor, mean: Tensor, rstd: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """dx (+ dsum), dweight, dbias of LayerNorm of src (x, or s = x + residual)."""
    src = src.contiguous()
    dout = dout.to(src.dtype).contiguous()
    dx = torch.empty(src.shape, dtype=src.dtype, device=src.device)
    dweight = torch.empty(weight.shape, dtype=src.dtype, device=src.device)
    dbias = torch.empty(weight.shape, dtype=src.dtype, device=src.device)
    C = src.shape[-1]
    N = src.numel() // C if C else 0
    workspace = None
    if src.device.type == "cuda":
        n = _C.layernorm_workspace_floats(N, C)
        workspace = torch.empty(n, dtype=torch.float32, device=src.device)
    if dsum is not None:
        dsum = _rows(dsum.to(src.dtype).contiguous())
    _C.layernorm_backward(
        dl(_rows(dx)), dl(dweight), dl(dbias), dl(workspace), dl(_rows(dout)), dl(dsum),
        dl(_rows(src)), dl(weight), dl(mean.reshape(-1)), dl(rstd.reshape(-1)), stream_of(src),
        threads(),
    )  # fmt: skip
    return dx, dweight, dbias


@_layernorm_backward.register_fake
def _layernorm_backward_fake(dout, dsum, src, weight, mean, rstd):
    dx = torch.empty(src.shape, dtype=src.dtype, device=src.device)
    dw = torch.empty(weight.shape, dtype=src.dtype, device=src.device)
    return dx, dw, torch.empty_like(dw)


def _ln_setup(ctx, inputs, output) -> None:
    x, weight, bias, _eps = inputs
    _out, mean, rstd = output
    ctx.save_for_backward(x, weight, mean, rstd)
    ctx.has_bias = bias is not None
    ctx.mark_non_differentiable(mean, rstd)


def _ln_backward(ctx, dout, _dmean, _drstd):
    x, weight, mean, rstd = ctx.saved_tensors
    dx, dweight, dbias = _layernorm_backward(dout, None, x, weight, mean, rstd)
    return dx, dweight, dbias if ctx.has_bias else None, None


def _add_ln_setup(ctx, inputs, output) -> None:
    _x, residual, weight, bias, _eps = inputs
    s, _out, mean, rstd = output
    ctx.save_for_backward(s, weight, mean, rstd)
    ctx.has_bias = bias is not None
    ctx.residual_dtype = residual.dtype
    ctx.mark_non_differentiable(mean, rstd)


def _add_ln_backward(ctx, dsum, dout, _dmean, _drstd):
    s, weight, mean, rstd = ctx.saved_tensors
    dx, dweight, dbias = _layernorm_backward(dout, dsum, s, weight, mean, rstd)
    # s = x + residual: both get ds = dsum + (LayerNorm's gradient)
    return dx, dx.to(ctx.residual_dtype), dweight, dbias if ctx.has_bias else None, None


_layernorm.register_autograd(_ln_backward, setup_context=_ln_setup)
_add_layernorm.register_autograd(_add_ln_backward, setup_context=_add_ln_setup)


def _check(op: str, x: Tensor, weight: Tensor, bias: Tensor | None, eps: float) -> None:
    float_tensor(op, "x", x)
    C = x.shape[-1]
    if C == 0:
        raise OpInputError(f"{op}: x has shape {tuple(x.shape)}; the last dimension C is 0")
    like(op, "x", x, "weight", weight, shape=(C,))
    if bias is not None:
        like(op, "x", x, "bias", bias, shape=(C,))
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
        raise OpInputError(f"{op}: eps is {eps!r}; it must be a positive number (GPT-2: 1e-5)")
    if x.device.type == "cuda" and C > CUDA_MAX_C:
        raise OpInputError(f"{op}: C = {C} is above the CUDA kernel's limit of {CUDA_MAX_C}")


def layernorm(
    x: Tensor, weight: Tensor, bias: Tensor | None = None, eps: float = DEFAULT_EPS
) -> Tensor:
    """LayerNorm of x over its last dimension C, differentiable in x, weight and bias.

    x: (..., C) contiguous float32/bfloat16 (float64 on the CPU); weight, bias: (C,) of x's
    dtype and device (bias None: no shift). Statistics in float32 (float64 for float64).
    Returns y like x. Raises OpTypeError (TypeError) for a wrong dtype, OpInputError
    (ValueError) for a wrong shape, device, layout or eps.
    """
    _check("layernorm", x, weight, bias, eps)
    op = _layernorm_impl if direct(x, weight, bias) else _layernorm
    return op(x, weight, bias, float(eps))[0]


def add_layernorm(
    x: Tensor,
    residual: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    eps: float = DEFAULT_EPS,
) -> tuple[Tensor, Tensor]:
    """s = x + residual and y = LayerNorm(s), in one pass; differentiable in all inputs.

    x: (..., C), the residual stream; residual: x's shape, float32 or bfloat16 (its dtype may
    differ from x's: a bfloat16 branch output added to a float32 stream under autocast; float64
    only with float64 x). s and y have x's dtype; s is rounded to it before it is normalized,
    exactly as `y = F.layer_norm(x + residual)` would see it. Errors as `layernorm`.
    """
    op = "add_layernorm"
    _check(op, x, weight, bias, eps)
    like(op, "x", x, "residual", residual, shape=tuple(x.shape), dtype=False)
    if (residual.dtype == torch.float64) != (x.dtype == torch.float64):
        raise OpTypeError(
            f"{op}: residual is {str(residual.dtype).removeprefix('torch.')} and x is "
            f"{str(x.dtype).removeprefix('torch.')}; float64 goes only with float64"
        )
    op = _add_layernorm_impl if direct(x, residual, weight, bias) else _add_layernorm
    s, y, _mean, _rstd = op(x, residual, weight, bias, float(eps))
    return s, y
