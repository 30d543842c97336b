"""The transformer's MLP with its GELU inside the two matmuls: `torch.ops.gptstack.mlp_gelu`.

    y = mlp_gelu(x, fc_weight, fc_bias, proj_weight, proj_bias)
    # = F.linear(gelu_tanh(F.linear(x, fc_weight, fc_bias)), proj_weight, proj_bias)
    y = mlp_gelu(x, fc_weight, fc_bias, proj_weight, proj_bias, residual=r)
    # = r + the same: the block's residual add, x = x + mlp(ln_2(x))

On a GPU in bfloat16 the elementwise work of the MLP rides on its matmuls (cuBLASLt epilogues,
csrc/linear_gelu.cpp): c_fc's matmul adds the bias and writes both u = x W^T + b and
h = gelu_tanh(u) (GELU_AUX_BIAS); in the backward pass the matmul of the output gradient with
c_proj's weight multiplies by gelu_tanh'(u) as it stores (DGELU). That removes the GELU forward
and backward passes over the (N, 4C) activations (gpt2-124m: 7.7 % of a training step's kernel
time, benchmarks/JOURNAL.md). With `residual`, c_proj's matmul also adds the block's residual
stream as it stores (cuBLASLt's C operand, beta = 1: D = h W2^T + b2 + r, rounded once), which
removes the pass that added the MLP's output to the stream (read both, write the sum). c_fc's
bias gradient stays a column sum of du: cuBLASLt's epilogue that also makes it (DGELU_BGRAD)
took 2.2x as long as DGELU and the sum on an H100, and the bias gradients from the
weight-gradient matmuls' BGRADB epilogue were a tie end to end.
Elsewhere (the CPU, float32, shapes the epilogues do not take, no cuBLASLt) the same function
runs as a torch matmul and gelu_tanh's own kernel (gelu.py), which is also the reference the
tests hold the epilogues to. (gptstack.model calls this op on a GPU only: on a CPU it runs its
native GELU between PyTorch's matmuls, which is faster there.)

Custom ops: `gptstack::mlp_gelu` (returns y, h and u; autograd saves h and u; the residual's
gradient is y's) and
`gptstack::mlp_gelu_input_grad` (du and c_fc's bias gradient). The weight gradients are torch
matmuls in the autograd formula.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ._checks import direct, float_tensor, like
from ._ext import _C, acc_dtype, dl, stream_of, threads
from .errors import OpInputError, OpTypeError

# cuBLASLt's workspace for one call: what it may use for split-K and stream-K kernels on Hopper
# (the size PyTorch gives it there). A fresh allocation per call from torch's caching
# allocator, so it is safe inside CUDA graphs and on any stream.
WORKSPACE_BYTES = 32 * 2**20


def epilogues_unavailable() -> str:
    """Why mlp_gelu cannot use cuBLASLt's epilogues in this process ("" when it can)."""
    return str(_C.cublaslt_unavailable())


def _epilogue(call, *arrays: Tensor | None) -> bool:
    """`call` (an _C.linear_gelu_* binding) on the arrays, a fresh workspace and the first
    array's stream, where cuBLASLt's epilogues may take them (CUDA bfloat16; the binding checks
    the rest: widths a multiple of 8, 16-byte aligned pointers). False: nothing was launched,
    the caller computes it apart."""
    like = arrays[0]
    assert like is not None
    if like.device.type != "cuda" or like.dtype != torch.bfloat16:
        return False
    ws = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=like.device)
    return call(*map(dl, arrays), ws.data_ptr(), WORKSPACE_BYTES, stream_of(like))


def _linear_gelu(x: Tensor, w: Tensor, b: Tensor | None) -> tuple[Tensor, Tensor]:
    """(h, u) = (gelu_tanh(u), x @ w.T + b) for rows x (N, C)."""
    N, F_ = x.shape[0], w.shape[0]
    h = torch.empty((N, F_), dtype=x.dtype, device=x.device)
    u = torch.empty((N, F_), dtype=x.dtype, device=x.device)
    if _epilogue(_C.linear_gelu_forward, h, u, x, w, b):
        return h, u
    if b is not None:
        torch.addmm(b, x, w.t(), out=u)
    else:
        torch.mm(x, w.t(), out=u)
    _C.gelu_forward(dl(h), dl(u), stream_of(x), threads())
    return h, u


def _linear_residual(h: Tensor, w: Tensor, b: Tensor | None, r: Tensor | None) -> Tensor:
    """h @ w.T + b (+ r) for rows h (N, F); with r (N, C) in one matmul where cuBLASLt can."""
    if r is None:
        return F.linear(h, w, b)
    y = torch.empty(r.shape, dtype=h.dtype, device=h.device)
    if _epilogue(_C.linear_residual, y, h, w, b, r):
        return y
    return r + F.linear(h, w, b)


def _mlp_gelu_impl(
    x: Tensor,
    fc_w: Tensor,
    fc_b: Tensor | None,
    proj_w: Tensor,
    proj_b: Tensor | None,
    residual: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """(y, h, u) for rows x (N, C): u = x fc_w^T + fc_b, h = gelu_tanh(u), y = h proj_w^T +
    proj_b (+ residual)."""
    with torch.autocast(x.device.type, enabled=False):
        h, u = _linear_gelu(x, fc_w, fc_b)
        y = _linear_residual(h, proj_w, proj_b, residual)
    return y, h, u


_mlp_gelu = torch.library.custom_op("gptstack::mlp_gelu", mutates_args=())(_mlp_gelu_impl)


@_mlp_gelu.register_fake
def _mlp_gelu_fake(x, fc_w, fc_b, proj_w, proj_b, residual=None):
    N, F_, C = x.shape[0], fc_w.shape[0], proj_w.shape[0]
    hidden = x.new_empty((N, F_))
    return x.new_empty((N, C)), hidden, torch.empty_like(hidden)


@torch.library.custom_op("gptstack::mlp_gelu_input_grad", mutates_args=())
def _mlp_gelu_input_grad(
    g: Tensor, proj_w: Tensor, u: Tensor, fc_bias: bool
) -> tuple[Tensor, Tensor]:
    """(du, dfc_b) for the output gradient g (N, C): du = (g proj_w) * gelu_tanh'(u), dfc_b =
    du summed over rows (empty without a bias)."""
    g = g.to(u.dtype).contiguous()
    du = torch.empty(u.shape, dtype=u.dtype, device=u.device)
    if not _epilogue(_C.linear_gelu_backward, du, g, proj_w, u):
        with torch.autocast(u.device.type, enabled=False):
            dh = g @ proj_w
        _C.gelu_backward(dl(du), dl(dh), dl(u), stream_of(u), threads())
    if not fc_bias:
        return du, u.new_empty(0)
    return du, du.sum(dim=0, dtype=acc_dtype(du.dtype)).to(du.dtype)


@_mlp_gelu_input_grad.register_fake
def _mlp_gelu_input_grad_fake(g, proj_w, u, fc_bias):
    return torch.empty_like(u), u.new_empty(u.shape[1] if fc_bias else 0)


def _setup_context(ctx, inputs, output) -> None:
    x, fc_w, fc_b, proj_w, proj_b, residual = inputs
    _y, h, u = output
    ctx.save_for_backward(x, fc_w, proj_w, h, u)
    ctx.fc_bias, ctx.proj_bias = fc_b is not None, proj_b is not None
    ctx.residual = residual is not None
    ctx.mark_non_differentiable(h, u)


def _backward(ctx, gy: Tensor, _gh, _gu):
    x, fc_w, proj_w, h, u = ctx.saved_tensors
    gy = gy.to(h.dtype)
    d_proj_w = gy.t() @ h
    d_proj_b = gy.sum(dim=0, dtype=acc_dtype(h.dtype)).to(h.dtype) if ctx.proj_bias else None
    du, d_fc_b = _mlp_gelu_input_grad(gy, proj_w, u, ctx.fc_bias)
    d_fc_w = du.t() @ x
    dx = du @ fc_w
    d_residual = gy if ctx.residual else None  # y = residual + ...: its gradient is y's
    return dx, d_fc_w, d_fc_b if ctx.fc_bias else None, d_proj_w, d_proj_b, d_residual


_mlp_gelu.register_autograd(_backward, setup_context=_setup_context)


def mlp_gelu(
    x: Tensor,
    fc_weight: Tensor,
    fc_bias: Tensor | None,
    proj_weight: Tensor,
    proj_bias: Tensor | None,
    residual: Tensor | None = None,
) -> Tensor:
    """c_proj(gelu_tanh(c_fc(x))) for x (..., C), plus `residual` where given, differentiable
    in every argument.

    fc_weight (F, C) and fc_bias (F,) or None are c_fc's; proj_weight (C, F) and proj_bias
    (C,) or None c_proj's (nn.Linear's layout). Under torch.autocast the matmuls run in the
    autocast dtype (the parameters are cast as nn.Linear would); otherwise all arguments share
    x's dtype. residual: x's shape, in the matmul dtype (the sum is rounded once, to it).
    Returns (..., C) in the matmul dtype. Raises OpTypeError / OpInputError for wrong dtypes,
    devices or shapes.
    """
    op = "mlp_gelu"
    float_tensor(op, "x", x)
    autocast = torch.is_autocast_enabled(x.device.type)
    C = x.shape[-1]
    for name, t in (("fc_weight", fc_weight), ("proj_weight", proj_weight)):
        like(op, "x", x, name, t, dtype=not autocast)
        if t.dim() != 2:
            raise OpInputError(f"{op}: {name} has shape {tuple(t.shape)}; it must be 2-D")
    F_ = fc_weight.shape[0]
    if fc_weight.shape[1] != C or F_ == 0:
        raise OpInputError(
            f"{op}: fc_weight has shape {tuple(fc_weight.shape)}; expected (F, {C}) with F >= 1"
        )
    if tuple(proj_weight.shape) != (C, F_):
        raise OpInputError(
            f"{op}: proj_weight has shape {tuple(proj_weight.shape)}; expected ({C}, {F_})"
        )
    for name, t, n in (("fc_bias", fc_bias, F_), ("proj_bias", proj_bias, C)):
        if t is not None:
            like(op, "x", x, name, t, shape=(n,), dtype=not autocast)
    params = (fc_weight, fc_bias, proj_weight, proj_bias)
    dtype = torch.get_autocast_dtype(x.device.type) if autocast else x.dtype
    if residual is not None:
        like(op, "x", x, "residual", residual, shape=x.shape, dtype=False)
        if residual.dtype != dtype:
            have, want = (str(d).removeprefix("torch.") for d in (residual.dtype, dtype))
            raise OpTypeError(
                f"{op}: residual is {have} but the matmuls run in {want}; pass it in {want} "
                f"(the sum is rounded once, to that dtype) or add it apart"
            )
        residual = residual.reshape(-1, C)
    if autocast:
        x = x.to(dtype)
        params = tuple(None if p is None else p.to(dtype) for p in params)
    fc_w, fc_b, proj_w, proj_b = params
    assert fc_w is not None and proj_w is not None
    run = _mlp_gelu_impl if direct(x, *params, residual) else _mlp_gelu
    y, _h, _u = run(x.reshape(-1, C), fc_w, fc_b, proj_w, proj_b, residual)
    return y.reshape(*x.shape[:-1], C)
