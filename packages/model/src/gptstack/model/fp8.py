"""FP8 training matmuls: `Fp8Linear`, an nn.Linear whose training-mode matmuls run in 8-bit floats.

    y = x W^T (+ b)      forward: x and W in e4m3, bf16 out (fast accumulation)
    dx = dy W            backward: dy in e5m2 (more range, less precision: gradients), W in e4m3
    dW = dy^T x          backward: fp32 (or W's dtype) out

Each operand is scaled per tensor by its current absolute maximum ("dynamic tensorwise"
scaling): t8 = round(t * s), s = FP8_MAX / amax(|t|), and torch._scaled_mm multiplies by 1 / s
again. Under torch.compile the amax reductions and casts are Inductor kernels beside the
matmuls. The same module in eval mode is nn.Linear: evaluation, sampling
and export never see FP8, so a validation loss measures the model, not the arithmetic.

torch._scaled_mm wants its first operand row-major and its second column-major, with every
dimension a multiple of 16 (the tensor cores' FP8 tiles): W is (out, in) row-major, so W.t()
already is the forward's column-major operand; the backward products need one transposed copy
of dy (the big one: rows x out bytes) and of x and W (small, FP8). GPUs of compute capability
8.9 (Ada) and 9.0 (Hopper) and up have FP8 tensor cores; PyTorch also runs _scaled_mm on a CPU,
which is what the tests use.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .errors import ModelError

FORWARD = torch.float8_e4m3fn
GRADIENT = torch.float8_e5m2
TILE = 16  # _scaled_mm's dimensions must be multiples of this
MIN_CAPABILITY = (8, 9)


def to_fp8(t: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """t scaled by FP8_MAX / amax(|t|) and rounded to `dtype`, row-major whatever t's layout
    (what _scaled_mm reads on a GPU); also the inverse scale (the factor that undoes it,
    float32, 0-dim). An all-zero t gets scale 1 / tiny, inverse ~0."""
    amax = t.detach().abs().amax().float()
    scale = torch.finfo(dtype).max / torch.clamp(amax, min=1e-12)
    t8 = (t.float() * scale).clamp(torch.finfo(dtype).min, torch.finfo(dtype).max).to(dtype)
    return t8.contiguous(), scale.reciprocal()


def column_major(t: Tensor) -> Tensor:
    """The same matrix, stored column by column (what _scaled_mm's second operand must be)."""
    return t.t().contiguous().t()


class _Fp8Matmul(torch.autograd.Function):
    """x (M, K) @ weight (N, K)^T -> (M, N) in `out_dtype`, FP8 both ways (module docstring)."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, out_dtype: torch.dtype) -> Tensor:
        x8, x_inv = to_fp8(x, FORWARD)
        w8, w_inv = to_fp8(weight, FORWARD)
        ctx.save_for_backward(x8, x_inv, w8, w_inv)
        ctx.dtypes = (x.dtype, weight.dtype)
        return torch._scaled_mm(
            x8, w8.t(), scale_a=x_inv, scale_b=w_inv, out_dtype=out_dtype, use_fast_accum=True
        )

    @staticmethod
    def backward(ctx, dy: Tensor) -> tuple[Tensor | None, Tensor | None, None]:
        x8, x_inv, w8, w_inv = ctx.saved_tensors
        x_dtype, w_dtype = ctx.dtypes
        dy8, dy_inv = to_fp8(dy, GRADIENT)
        dx = dw = None
        if ctx.needs_input_grad[0]:  # (M, N) @ (N, K)
            dx = torch._scaled_mm(
                dy8, column_major(w8), scale_a=dy_inv, scale_b=w_inv, out_dtype=x_dtype
            )
        if ctx.needs_input_grad[1]:  # (N, M) @ (M, K)
            dw = torch._scaled_mm(
                dy8.t().contiguous(),
                column_major(x8),
                scale_a=dy_inv,
                scale_b=x_inv,
                out_dtype=w_dtype,
            )
        return dx, dw, None


def fp8_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """F.linear(x, weight, bias) with the matmul in FP8 (module docstring); x (..., K), weight
    (N, K). The output dtype is autocast's where autocast is on, else x's. Raises ModelError
    when a dimension is not a multiple of 16."""
    K = x.size(-1)
    M = x.numel() // K if K else 0
    if M % TILE or K % TILE or weight.size(0) % TILE:
        raise ModelError(
            f"an FP8 matmul needs every dimension a multiple of {TILE}: got {M} rows x {K} "
            f"inputs -> {weight.size(0)} outputs; use batch_size * block_size and widths "
            f"that are multiples of {TILE}, or model.fp8='none'"
        )
    device_type = x.device.type
    out_dtype = (
        torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else x.dtype
    )
    with torch.autocast(device_type, enabled=False):
        y = _Fp8Matmul.apply(x.reshape(M, K), weight, out_dtype)
        y = y.view(*x.shape[:-1], weight.size(0))
        return y if bias is None else y + bias.to(out_dtype)


class Fp8Linear(nn.Linear):
    """nn.Linear (same parameters, same state_dict) whose training-mode forward is fp8_linear;
    in eval mode exactly nn.Linear."""

    def forward(self, x: Tensor) -> Tensor:
        if self.training:
            return fp8_linear(x, self.weight, self.bias)
        return super().forward(x)


def check_fp8_device(device: torch.device) -> None:
    """Raise ModelError, with the fix, where `device` cannot run FP8 matmuls (a CUDA GPU older
    than compute capability 8.9); a CPU can (slowly)."""
    if device.type != "cuda":
        return
    capability = torch.cuda.get_device_capability(device)
    if capability < MIN_CAPABILITY:
        raise ModelError(
            f"model.fp8 needs FP8 tensor cores (compute capability >= 8.9: Ada, Hopper or "
            f"newer); {torch.cuda.get_device_name(device)} is {capability[0]}.{capability[1]}: "
            f"set model.fp8='none'"
        )
