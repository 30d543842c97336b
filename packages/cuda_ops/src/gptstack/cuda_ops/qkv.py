"""c_attn's output split into q, k, v, with a one-pass backward: `qkv_heads` and the op
`torch.ops.gptstack.qkv_grad`.

    q, k, v = qkv_heads(qkv, bias)      # qkv (B, T, 3C): q, k, v (B, T, C) views of it
    dqkv, dbias = qkv_grad(dq, dk, dv)  # (N, C) each -> (N, 3C) and its column sums

The attention's backward returns dq, dk and dv as three tensors; c_attn's backward wants them
as one (N, 3C) matrix, and c_attn's bias gradient is that matrix's column sums. PyTorch (and
Inductor) concatenates them in one pass and sums them in another that reads the three again
(3.6 ms of a gpt2-124m micro-step of 64 rows on an H100, benchmarks/JOURNAL.md). `qkv_grad`
(csrc/qkv_grad.cpp, csrc/qkv_grad.cu) reads each once, writes dqkv and sums the columns by
chunks of rows, then adds the chunks in order (the same bits every run).

`qkv_heads` is an autograd function whose forward is `qkv.split(C, dim=-1)` (views: no copy)
and whose backward is `qkv_grad`. `bias` is c_attn's bias, which the forward does not use: its
gradient comes from here, so the caller computes qkv with a detached bias, as

    qkv = F.linear(x, c_attn.weight, c_attn.bias.detach())
    q, k, v = qkv_heads(qkv, c_attn.bias)

which has the gradients of `F.linear(x, weight, bias).split(C, dim=-1)` (tests). Without a
bias, `qkv_heads(qkv, None)` concatenates alone.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._checks import direct, float_tensor, like
from ._ext import _C, acc_dtype, dl, stream_of, threads
from .errors import OpInputError

# Chunks of rows the column sums are split into (gridDim.y of the copy kernel, each block 32
# column vectors: 9 x chunks blocks at gpt2-124m's width). With four rows in flight a thread, on
# an H100 1,024 chunks took 0.87-0.93x the time of 64 at 16 k-131 k rows of 768 (2.45-2.65 TB/s;
# 64 were 1.02-1.08x faster at 384: scripts/qkv_grad_bench.py,
# benchmarks/profiles/qkv-grad-parts-h100-20261207-cdc6b81.json); gpt2-124m is the preset
# that trains with it. Each chunk adds a row of 3C float partials (9.4 MB at 1,024 x 2,304).
MAX_CHUNKS = 1024
MIN_CHUNK_ROWS = 64


def _chunks(rows: int) -> int:
    return max(1, min(MAX_CHUNKS, -(-rows // MIN_CHUNK_ROWS)))


def _qkv_grad_impl(dq: Tensor, dk: Tensor, dv: Tensor) -> tuple[Tensor, Tensor]:
    N, C = dq.shape
    dqkv = torch.empty((N, 3 * C), dtype=dq.dtype, device=dq.device)
    acc = acc_dtype(dq.dtype)
    dbias = torch.empty(3 * C, dtype=acc, device=dq.device)
    partials = torch.empty((_chunks(N), 3 * C), dtype=acc, device=dq.device)
    _C.qkv_grad(dl(dqkv), dl(dbias), dl(partials), dl(dq), dl(dk), dl(dv), stream_of(dq), threads())
    return dqkv, dbias


_qkv_grad = torch.library.custom_op("gptstack::qkv_grad", mutates_args=())(_qkv_grad_impl)


@_qkv_grad.register_fake
def _qkv_grad_fake(dq: Tensor, dk: Tensor, dv: Tensor) -> tuple[Tensor, Tensor]:
    N, C = dq.shape
    return (
        dq.new_empty((N, 3 * C)),
        torch.empty(3 * C, dtype=acc_dtype(dq.dtype), device=dq.device),
    )


def qkv_grad(dq: Tensor, dk: Tensor, dv: Tensor) -> tuple[Tensor, Tensor]:
    """(dqkv, dbias): dqkv = torch.cat([dq, dk, dv], dim=1) and dbias = dqkv's column sums.

    dq, dk, dv: (N, C) each, contiguous, one dtype (float32 or bfloat16; float64 on the CPU),
    one device. dbias is float32 (float64 for float64 inputs), summed in that precision.
    Raises OpTypeError (TypeError) for another dtype, OpInputError (ValueError) for other
    shapes, devices or a non-contiguous tensor.
    """
    float_tensor("qkv_grad", "dq", dq, min_dim=2)
    if dq.dim() != 2:
        raise OpInputError(f"qkv_grad: dq must be 2-D (rows, C); got shape {tuple(dq.shape)}")
    like("qkv_grad", "dq", dq, "dk", dk, shape=dq.shape)
    like("qkv_grad", "dq", dq, "dv", dv, shape=dq.shape)
    return (_qkv_grad_impl if direct(dq, dk, dv) else _qkv_grad)(dq, dk, dv)


class _QKVHeads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, qkv: Tensor, bias: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        ctx.shape = qkv.shape
        ctx.bias_dtype = None if bias is None else bias.dtype
        return qkv.split(qkv.shape[-1] // 3, dim=-1)

    @staticmethod
    def backward(ctx, dq: Tensor, dk: Tensor, dv: Tensor):
        # autograd materializes an unused output's gradient as zeros (materialize_grads)
        C = ctx.shape[-1] // 3
        dqkv, dbias = qkv_grad(*(g.reshape(-1, C).contiguous() for g in (dq, dk, dv)))
        dbias = None if ctx.bias_dtype is None else dbias.to(ctx.bias_dtype)
        return dqkv.view(ctx.shape), dbias


def qkv_heads(qkv: Tensor, bias: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """q, k, v = qkv.split(C, dim=-1), whose backward is one `qkv_grad` pass; also the gradient
    of `bias` (c_attn's bias, added into qkv with a detached copy: module docstring).

    qkv: (..., 3C), float32 or bfloat16 (float64 on the CPU); bias: (3C,) or None.
    """
    float_tensor("qkv_heads", "qkv", qkv, min_dim=1)
    if qkv.shape[-1] % 3:
        raise OpInputError(
            f"qkv_heads: the last dimension of qkv ({qkv.shape[-1]}) must be 3C (q, k, v)"
        )
    if bias is not None:
        like("qkv_heads", "qkv", qkv, "bias", bias, shape=(qkv.shape[-1],), dtype=False)
    return _QKVHeads.apply(qkv, bias)
