"""Cross-entropy: on given logits, and fused with the LM head so logits never exist in full.

    loss = cross_entropy(logits, targets)                 # = F.cross_entropy(.., ignore_index=-1)
    loss = linear_cross_entropy(h, weight, targets)       # = F.cross_entropy(h @ weight.T, ..)

`linear_cross_entropy` is the model's `ln_f -> lm_head -> loss` tail. It walks the B*T rows in
chunks: logits of one chunk (rows x V, in the matmul dtype) by a torch matmul (cuBLAS on a GPU;
this package links no BLAS of its own), then the native kernel turns them into per-row losses
and, in place, into dlogits; two more matmuls add the chunk's share of dh and dweight. So the
forward pass already has the gradients (backward only scales them by dloss), and the largest
temporary is one chunk of logits instead of (B*T) x V floats three or four times over (logits,
their float32 copy, log-softmax, its gradient: 16 x 1024 x 50304 elements each for gpt2-124m).
Why not a custom C++ op with cuBLAS inside: it would add a cuBLAS link and workspace handling
for no gain over torch's own matmul, which already runs on the caller's stream and graph pool.

Custom ops: `gptstack::cross_entropy` (+ `cross_entropy_backward`) and
`gptstack::linear_cross_entropy`. Kernels: csrc/cross_entropy.{cpp,cu}.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._checks import float_tensor, like
from ._ext import _C, acc_dtype, dl, stream_of, threads
from .errors import OpInputError, OpTypeError

IGNORE_INDEX = -1  # gptstack.model's padding target (GPT.forward: "-1 = ignore")
# Logits of one chunk, in bytes: 256 MiB is 2,560 rows of gpt2-124m's V = 50304 in bfloat16
# (7 chunks for its 16,384 rows), big enough that each chunk's three matmuls stay efficient.
CHUNK_BYTES = 256 * 2**20
ROW_ALIGN = 128  # chunk rows are a multiple of this (tensor-core friendly matmul shapes)


def default_chunk_rows(N: int, V: int, itemsize: int) -> int:
    """Rows per chunk for N rows of V logits of `itemsize` bytes: CHUNK_BYTES at most."""
    rows = CHUNK_BYTES // max(1, V * itemsize)
    rows = max(ROW_ALIGN, rows // ROW_ALIGN * ROW_ALIGN)
    return max(1, min(N, rows))


def _grad_scale(targets: Tensor, ignore_index: int, dtype: torch.dtype) -> Tensor:
    """1 / (number of targets that are not ignore_index), as a (1,) device tensor: no sync.
    0 valid targets give inf, so the loss is NaN as in torch."""
    return (1.0 / (targets != ignore_index).sum().to(dtype)).reshape(1)


# --- cross_entropy on logits -------------------------------------------------------------------
@torch.library.custom_op("gptstack::cross_entropy", mutates_args=())
def _cross_entropy(logits: Tensor, targets: Tensor, ignore_index: int) -> Tensor:
    acc = acc_dtype(logits.dtype)
    losses = torch.empty(logits.shape[0], dtype=acc, device=logits.device)
    _C.cross_entropy(
        dl(losses), None, dl(logits), dl(targets), None, ignore_index, stream_of(logits),
        threads(),
    )  # fmt: skip
    return losses.sum() * _grad_scale(targets, ignore_index, acc)[0]


@_cross_entropy.register_fake
def _cross_entropy_fake(logits, targets, ignore_index):
    return torch.empty((), dtype=acc_dtype(logits.dtype), device=logits.device)


@torch.library.custom_op("gptstack::cross_entropy_backward", mutates_args=())
def _cross_entropy_backward(
    dloss: Tensor, logits: Tensor, targets: Tensor, ignore_index: int
) -> Tensor:
    acc = acc_dtype(logits.dtype)
    scale = _grad_scale(targets, ignore_index, acc) * dloss.to(acc)
    losses = torch.empty(logits.shape[0], dtype=acc, device=logits.device)
    dlogits = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
    _C.cross_entropy(
        dl(losses), dl(dlogits), dl(logits), dl(targets), dl(scale), ignore_index,
        stream_of(logits), threads(),
    )  # fmt: skip
    return dlogits


@_cross_entropy_backward.register_fake
def _cross_entropy_backward_fake(dloss, logits, targets, ignore_index):
    return torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)


def _ce_setup(ctx, inputs, output) -> None:
    logits, targets, ignore_index = inputs
    ctx.save_for_backward(logits, targets)
    ctx.ignore_index = ignore_index


def _ce_backward(ctx, dloss):
    logits, targets = ctx.saved_tensors
    return _cross_entropy_backward(dloss, logits, targets, ctx.ignore_index), None, None


_cross_entropy.register_autograd(_ce_backward, setup_context=_ce_setup)


# --- linear_cross_entropy: LM head + loss, chunked ---------------------------------------------
@torch.library.custom_op("gptstack::linear_cross_entropy", mutates_args=())
def _linear_cross_entropy(
    h: Tensor,
    weight: Tensor,
    targets: Tensor,
    ignore_index: int,
    chunk_rows: int,
    compute_grad: bool,
    matmul_dtype: torch.dtype,
) -> tuple[Tensor, Tensor, Tensor]:
    """(loss, dh, dweight) for dloss = 1; dh, dweight empty without compute_grad."""
    h, targets = h.contiguous(), targets.contiguous()
    N = h.shape[0]
    acc = acc_dtype(matmul_dtype)
    scale = _grad_scale(targets, ignore_index, acc)
    losses = torch.empty(N, dtype=acc, device=h.device)
    with torch.autocast(h.device.type, enabled=False):
        w = weight.detach().to(matmul_dtype)  # (V, C), once per call as autocast would
        dh = torch.empty(h.shape if compute_grad else 0, dtype=h.dtype, device=h.device)
        # dweight accumulates over the chunks in the matmul dtype with beta = 1 (cuBLAS adds into
        # C in float32 and rounds once per chunk: ~sqrt(chunks) bf16 roundings, no extra pass)
        dw = torch.zeros(weight.shape if compute_grad else 0, dtype=matmul_dtype, device=h.device)
        for start in range(0, N, chunk_rows):
            end = min(N, start + chunk_rows)
            hc = h[start:end].to(matmul_dtype)  # (n, C)
            logits = hc @ w.t()  # (n, V): the only chunk-sized temporary
            _C.cross_entropy(
                losses[start:end],
                logits if compute_grad else None,
                logits,
                targets[start:end],
                scale if compute_grad else None,
                ignore_index,
                stream_of(h),
                threads(),
            )
            if compute_grad:  # logits now hold dlogits
                if dh.dtype == matmul_dtype:
                    torch.mm(logits, w, out=dh[start:end])
                else:
                    dh[start:end].copy_(logits @ w)
                dw.addmm_(logits.t(), hc)
    loss = losses.sum() * scale[0]
    return loss, dh, dw.to(weight.dtype)


@_linear_cross_entropy.register_fake
def _linear_cross_entropy_fake(
    h, weight, targets, ignore_index, chunk_rows, compute_grad, matmul_dtype
):
    loss = torch.empty((), dtype=acc_dtype(matmul_dtype), device=h.device)
    dh = torch.empty(h.shape if compute_grad else 0, dtype=h.dtype, device=h.device)
    dw = torch.empty(weight.shape if compute_grad else 0, dtype=weight.dtype, device=h.device)
    return loss, dh, dw


def _lce_setup(ctx, inputs, output) -> None:
    _loss, dh, dw = output
    ctx.save_for_backward(dh, dw)
    ctx.mark_non_differentiable(dh, dw)


def _lce_backward(ctx, dloss, _ddh, _ddw):
    dh, dw = ctx.saved_tensors
    if dh.numel() == 0 and dw.numel() == 0:
        raise RuntimeError(
            "linear_cross_entropy was called without gradients (under no_grad, or with inputs "
            "that did not require grad) and cannot be differentiated afterwards"
        )
    return dh * dloss.to(dh.dtype), dw * dloss.to(dw.dtype), None, None, None, None, None


_linear_cross_entropy.register_autograd(_lce_backward, setup_context=_lce_setup)


# --- public wrappers ---------------------------------------------------------------------------
def _check_targets(
    op: str, targets: object, n: int, device: torch.device, ignore_index: int
) -> Tensor:
    if not isinstance(targets, torch.Tensor):
        raise OpTypeError(f"{op}: targets must be a torch.Tensor, got {type(targets).__name__}")
    if targets.dtype != torch.int64:
        raise OpTypeError(
            f"{op}: targets is {str(targets.dtype).removeprefix('torch.')}; use int64 token ids"
        )
    if targets.device != device:
        raise OpInputError(f"{op}: targets is on {targets.device} but the input is on {device}")
    if targets.numel() != n:
        raise OpInputError(
            f"{op}: targets has {targets.numel()} elements (shape {tuple(targets.shape)}) for "
            f"{n} rows of logits; give one target per row"
        )
    if not isinstance(ignore_index, int) or isinstance(ignore_index, bool):
        raise OpTypeError(f"{op}: ignore_index is {ignore_index!r}; it must be an int")
    return targets.reshape(n)


def cross_entropy(logits: Tensor, targets: Tensor, ignore_index: int = IGNORE_INDEX) -> Tensor:
    """Mean softmax cross-entropy of logits (..., V) against int64 targets (...).

    Targets equal to ignore_index count neither in the loss nor in the mean (all ignored:
    NaN, as torch). logits contiguous float32/bfloat16 (float64 on the CPU). Returns a float32
    scalar (float64 for float64). On the CPU a target outside [0, V) raises ValueError; on a GPU
    it gives a NaN loss (checking would need a device sync). Differentiable in logits.
    """
    op = "cross_entropy"
    float_tensor(op, "logits", logits)
    V = logits.shape[-1]
    t = _check_targets(op, targets, logits.numel() // max(V, 1), logits.device, ignore_index)
    if V == 0:
        raise OpInputError(f"{op}: logits has shape {tuple(logits.shape)}; V is 0")
    return _cross_entropy(logits.reshape(-1, V), t, ignore_index)


def linear_cross_entropy(
    h: Tensor,
    weight: Tensor,
    targets: Tensor,
    ignore_index: int = IGNORE_INDEX,
    chunk_rows: int | None = None,
) -> Tensor:
    """Mean cross-entropy of the logits h @ weight.T against targets, in chunks of rows.

    h: (..., C) final hidden states, contiguous; weight: (V, C) (the tied wte); targets:
    int64 (...) with ignore_index for positions without a loss. Under torch.autocast the
    matmuls run in the autocast dtype (as `lm_head` would); otherwise h and weight must share a
    dtype. chunk_rows: rows per chunk (default: CHUNK_BYTES of logits, a multiple of 128).
    Returns a float32 scalar (float64 for float64) that is differentiable in h and weight; the
    gradients are computed during the forward pass when either requires grad. Raises
    OpTypeError / OpInputError for wrong dtypes, devices or shapes.
    """
    op = "linear_cross_entropy"
    float_tensor(op, "h", h)
    C = h.shape[-1]
    device_type = h.device.type
    autocast = torch.is_autocast_enabled(device_type)
    like(op, "h", h, "weight", weight, dtype=not autocast)
    if weight.dim() != 2 or weight.shape[1] != C or weight.shape[0] == 0:
        raise OpInputError(
            f"{op}: weight has shape {tuple(weight.shape)}; expected (V, {C}) with V >= 1"
        )
    N = h.numel() // max(C, 1)
    t = _check_targets(op, targets, N, h.device, ignore_index)
    V = weight.shape[0]
    matmul_dtype = torch.get_autocast_dtype(device_type) if autocast else h.dtype
    if chunk_rows is None:
        chunk_rows = default_chunk_rows(N, V, matmul_dtype.itemsize)
    elif isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise OpInputError(f"{op}: chunk_rows is {chunk_rows!r}; it must be an int >= 1")
    grad = torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad)
    loss, _dh, _dw = _linear_cross_entropy(
        h.reshape(N, C), weight, t, ignore_index, chunk_rows, grad, matmul_dtype
    )
    return loss
