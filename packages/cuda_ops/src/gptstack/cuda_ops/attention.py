"""Fused causal self-attention, forward and backward: `torch.ops.gptstack.causal_attention`.

    y = causal_attention(q, k, v)                  # q, k, v: (B, nh, T, hs)
    y = causal_attention(q, k, v, dropout_p=0.2)   # training: dropout on the attention weights

y_i = sum_{j <= i} softmax_j(q_i . k_j / sqrt(hs)) v_j, queries and keys at positions 0..T-1
(the training and prefill case of the model's causal rule), computed without the (T, T) score
matrix: an online softmax over key tiles that saves the per-row logsumexp for the backward
(Dao et al. 2022, FlashAttention; Dao 2023, FlashAttention-2). Kernels: csrc/attention_cpu.cpp
(CPU, AVX2/FMA or scalar, OpenMP), csrc/attention_forward.cuh and attention_backward.cuh (CUDA,
bfloat16 on tensor cores), csrc/attention_simt.cuh (CUDA, float32).

Layout: q, k, v are any (B, nh, T, hs) views with unit stride along hs, so the model's
`c_attn(x).split(C, 2)[i].view(B, T, nh, hs).transpose(1, 2)` goes in without a copy. On CUDA
in bfloat16 their rows must also be 16-byte aligned (strides and storage offset multiples of 8
elements; every view of a contiguous (B, T, 3C) buffer with hs in {32, 64, 128} is). y (and the
gradients) come back as (B, nh, T, hs) views of a (B, T, nh, hs) buffer, so the model's
`y.transpose(1, 2).contiguous()` costs nothing.

Dropout (p > 0): on the weights, inside the kernels, from a counter-based Philox stream keyed by
a seed tensor (one int64 drawn with torch.randint on q's device, so torch.manual_seed makes runs
repeatable and every replay of a captured CUDA graph draws new masks); the backward regenerates
the same masks. The masks are not PyTorch's for the same seed, and p is rounded to a multiple of
2^-16 (csrc/attention_philox.h). Importing gptstack.cuda_ops also registers the model's
attention backend "gptstack" (`gptstack_attention`, below) when gptstack.model is installed.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import torch
from torch import Tensor
from torch.utils.dlpack import to_dlpack

from ._checks import CPU_FLOATS, CUDA_BUILT, CUDA_FLOATS, _names, direct
from ._ext import _C, acc_dtype, stream_of, threads
from .errors import OpInputError, OpTypeError

OP = "causal_attention"
HEAD_SIZES = (32, 64, 128)  # one kernel instance each (csrc/attention.h)
BACKEND_NAME = "gptstack"
_SEED_HIGH = 2**63 - 1

# The bf16 CUDA backward has two modes (csrc/attention_backward.cuh): "stages" recomputes S
# and dP in separate dQ CTAs (7 tile matmuls, deterministic, no scratch), "atomic" adds dQ into
# an fp32 scratch buffer from the key CTAs (5 tile matmuls plus zeroing, atomics and a
# conversion kernel). "auto" is "stages" at every T: capped at 3 CTAs an SM
# (attention_cuda.cu, backward_min_blocks) it took 484 us at gpt2-124m's T = 1024 against 646
# for "atomic" (the choice from T = 512 until 2026-12-07) on an H200,
# scripts/attention_variants.cu; "atomic" stays for benchmarks and tests.
BACKWARD_MODES = ("auto", "stages", "atomic")

# The variant the bf16 CUDA kernels run: CTA size (warps) of forward and backward (0: the
# launcher's default, 4) and the backward mode. Changed only through cuda_variant().
_variant = {"forward_warps": 0, "backward_warps": 0, "backward": "auto"}
# forward_warps="split": 16 queries a CTA with the keys split over its 4 warps (no dropout;
# csrc/attention_forward.cuh, SplitConfig); opt-in, no faster end to end (attention_cuda.cu)
SPLIT_KEYS = 1  # the extension's kSplitKeys
# forward_warps / backward_warps="wgmma": Hopper's warpgroup MMA, one warpgroup (64 rows) a CTA
# (csrc/attention_forward_wgmma.cuh, attention_backward_wgmma.cuh; hs=64 on 128-byte swizzled
# tiles); needs an sm_90 GPU and a build with sm_90a. The backward takes D = dY . y from a
# pre-pass into a (B, nh, T) float32 scratch. Kernel by kernel on an H100 at gpt2-124m's shape
# it beat the mma.sync defaults (forward 121.3 vs 149.7 us, backward 348.8 vs 485.8;
# scripts/attention_variants.cu, 2026-12-07); opt-in until measured end to end.
WGMMA = 2  # the extension's kWgmma


@contextlib.contextmanager
def cuda_variant(
    forward_warps: int | str = 0, backward_warps: int = 0, backward: str = "auto"
) -> Iterator[None]:
    """Within the block, run the bf16 CUDA kernels with 4 or 8 warps per CTA (0: the default, 4;
    either also "wgmma": the warpgroup-MMA kernels of sm_90 GPUs; the forward also "split": the
    split-keys kernel) and the backward mode "stages", "atomic" or "auto" (= "stages"; the
    wgmma backward has only stages). For benchmarks and tests. Each kernel reads the variant when
    it runs, so the block must hold the backward too (autograd.grad or .backward() inside it); a
    backward run after the block takes the defaults."""
    if forward_warps not in (0, 4, 8, "split", "wgmma"):
        raise OpInputError(
            f"{OP}: forward warps per CTA is {forward_warps!r}; use 0 (default), 4, 8, 'split' "
            "or 'wgmma'"
        )
    if backward_warps not in (0, 4, 8, "wgmma"):
        raise OpInputError(
            f"{OP}: warps per CTA is {backward_warps!r}; use 0 (default), 4, 8 or 'wgmma'"
        )
    if backward not in BACKWARD_MODES:
        raise OpInputError(f"{OP}: backward mode {backward!r}; use one of {BACKWARD_MODES}")
    if backward_warps == "wgmma" and backward == "atomic":
        raise OpInputError(f"{OP}: the wgmma backward has no atomic-dQ mode; use 'stages'")
    forward_warps = {"split": SPLIT_KEYS, "wgmma": WGMMA}.get(forward_warps, forward_warps)
    backward_warps = WGMMA if backward_warps == "wgmma" else backward_warps
    saved = dict(_variant)
    _variant.update(forward_warps=forward_warps, backward_warps=backward_warps, backward=backward)
    try:
        yield
    finally:
        _variant.update(saved)


@functools.cache
def _sm90(device_index: int) -> bool:
    return torch.cuda.get_device_capability(device_index)[0] == 9


def _warps(q: Tensor, which: str) -> int:
    """The CTA size the bf16 CUDA kernels of q's call run with: the variant's, or WGMMA where
    the variant is the default, the switch _C.set_attention_wgmma is on and q is on an sm_90 GPU
    (the backward: in its two-stage mode)."""
    warps = _variant[which]
    if warps != 0 or not (q.is_cuda and q.dtype == torch.bfloat16) or not _C.attention_wgmma():
        return warps
    if which == "backward_warps" and _variant["backward"] == "atomic":
        return warps
    return WGMMA if _sm90(q.device.index or 0) else warps


def _backward_scratch(q: Tensor, warps: int) -> Tensor | None:
    """The float32 scratch the bf16 CUDA backward of q's call needs: (B, nh, T) for the wgmma
    kernel's D rows, (B, nh, T, hs) for the atomic-dQ mode; None otherwise."""
    if not (q.is_cuda and q.dtype == torch.bfloat16):
        return None
    if warps == WGMMA:
        return torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    if _variant["backward"] == "atomic":
        return torch.empty(q.shape, dtype=torch.float32, device=q.device)
    return None


def _rows_ok(t: Tensor) -> bool:
    """The kernels take t as it is: unit stride along hs; on CUDA in bf16, 16-byte rows."""
    if t.stride(-1) != 1 and t.size(-1) != 1:
        return False
    if t.device.type == "cuda" and t.dtype == torch.bfloat16:  # size-1 dims: any stride
        strides = (s for s, n in zip(t.stride()[:3], t.shape[:3]) if n > 1)
        # torch.compile cannot trace storage_offset() (a graph break): while compiling only the
        # strides are checked here and the extension checks the data pointer at run time
        # (attention.cpp: a ValueError naming the argument, never a misaligned load)
        offset_ok = torch.compiler.is_compiling() or t.storage_offset() % 8 == 0
        return offset_ok and all(s % 8 == 0 for s in strides)
    return True


def _new_rows(q: Tensor) -> Tensor:
    """An uninitialised (B, nh, T, hs) tensor laid out as (B, T, nh, hs)."""
    B, nh, T, hs = q.shape
    return torch.empty_strided(
        (B, nh, T, hs), (T * nh * hs, hs, nh * hs, 1), dtype=q.dtype, device=q.device
    )


def _dl(t: Tensor | None):
    """t as a DLPack capsule, strides kept (_ext.dl would make the model's views contiguous,
    the copy this op exists to avoid); None stays None."""
    return None if t is None else to_dlpack(t.detach())


def _attention_impl(
    q: Tensor, k: Tensor, v: Tensor, dropout_p: float, seed: Tensor | None
) -> tuple[Tensor, Tensor]:
    y = _new_rows(q)
    lse = torch.empty(q.shape[:3], dtype=acc_dtype(q.dtype), device=q.device)
    _C.attention_forward(
        _dl(y),
        _dl(lse),
        _dl(q),
        _dl(k),
        _dl(v),
        _dl(seed),
        dropout_p,
        _warps(q, "forward_warps"),
        stream_of(q),
        threads(),
    )
    return y, lse


_attention = torch.library.custom_op("gptstack::causal_attention", mutates_args=())(_attention_impl)


@_attention.register_fake
def _attention_fake(q, k, v, dropout_p, seed):
    return _new_rows(q), q.new_empty(q.shape[:3], dtype=acc_dtype(q.dtype))


@torch.library.custom_op("gptstack::causal_attention_backward", mutates_args=())
def _attention_backward(
    dy: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    y: Tensor,
    lse: Tensor,
    dropout_p: float,
    seed: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor]:
    dy = dy.to(q.dtype)
    if not _rows_ok(dy) or (dy.is_cuda and dy.data_ptr() % 16):
        dy = dy.contiguous()  # autograd's gradient layout is not ours to choose
    dq, dk, dv = _new_rows(q), _new_rows(q), _new_rows(q)
    warps = _warps(q, "backward_warps")
    acc = _backward_scratch(q, warps)
    _C.attention_backward(
        _dl(dq),
        _dl(dk),
        _dl(dv),
        _dl(dy),
        _dl(q),
        _dl(k),
        _dl(v),
        _dl(y),
        _dl(lse),
        _dl(seed),
        dropout_p,
        _dl(acc),
        warps,
        stream_of(q),
        threads(),
    )
    return dq, dk, dv


@_attention_backward.register_fake
def _attention_backward_fake(dy, q, k, v, y, lse, dropout_p, seed):
    return _new_rows(q), _new_rows(q), _new_rows(q)


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, dropout_p, seed = inputs
    y, lse = output
    ctx.save_for_backward(q, k, v, y, lse, seed)
    ctx.dropout_p = dropout_p
    ctx.mark_non_differentiable(lse)


def _backward(ctx, dy: Tensor, _dlse: Tensor):
    q, k, v, y, lse, seed = ctx.saved_tensors
    dq, dk, dv = _attention_backward(dy, q, k, v, y, lse, ctx.dropout_p, seed)
    return dq, dk, dv, None, None


_attention.register_autograd(_backward, setup_context=_setup_context)


def _check(q: object, k: object, v: object, dropout_p: object, seed: object) -> None:
    """Raise OpTypeError / OpInputError naming the argument and the fix (shapes only, so it
    also runs on fake tensors under torch.compile)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise OpTypeError(f"{OP}: {name} must be a torch.Tensor, got {type(t).__name__}")
    assert isinstance(q, Tensor) and isinstance(k, Tensor) and isinstance(v, Tensor)
    kind = q.device.type
    if kind not in ("cpu", "cuda"):
        raise OpInputError(f"{OP}: q is on {q.device}; use a CPU or CUDA tensor")
    if kind == "cuda" and not CUDA_BUILT:
        raise OpInputError(
            f"{OP}: q is on {q.device} but this gptstack.cuda_ops was built "
            f"without CUDA kernels (see gptstack.cuda_ops.build_info())"
        )
    allowed = CUDA_FLOATS if kind == "cuda" else CPU_FLOATS
    if q.dtype not in allowed:
        raise OpTypeError(
            f"{OP}: q is {str(q.dtype).removeprefix('torch.')} on {kind}; "
            f"expected one of {_names(allowed)}"
        )
    if q.dim() != 4:
        raise OpInputError(f"{OP}: q has shape {tuple(q.shape)}; expected (B, nh, T, hs)")
    for name, t in (("k", k), ("v", v)):
        if t.device != q.device:
            raise OpInputError(f"{OP}: {name} is on {t.device} but q is on {q.device}")
        if t.dtype != q.dtype:
            raise OpTypeError(
                f"{OP}: {name} is {str(t.dtype).removeprefix('torch.')} but q is "
                f"{str(q.dtype).removeprefix('torch.')}; use one dtype"
            )
        if t.shape != q.shape:
            raise OpInputError(
                f"{OP}: {name} has shape {tuple(t.shape)} but q has "
                f"{tuple(q.shape)}; q, k and v must match (self-attention)"
            )
    B, nh, T, hs = q.shape
    if hs not in HEAD_SIZES:
        raise OpInputError(f"{OP}: head size hs = {hs}; the kernels take {HEAD_SIZES}")
    if min(B, nh, T) < 1:
        raise OpInputError(f"{OP}: q has shape {tuple(q.shape)}; B, nh and T must be >= 1")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not _rows_ok(t):
            raise OpInputError(
                f"{OP}: {name} has strides {tuple(t.stride())} (storage offset "
                f"{'?' if torch.compiler.is_compiling() else t.storage_offset()}); the kernels "
                "need unit stride along hs"
                + (" and 16-byte aligned rows (multiples of 8 elements)" if q.is_cuda else "")
                + ": call .contiguous()"
            )
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)):
        raise OpTypeError(f"{OP}: dropout_p must be a float, got {type(dropout_p).__name__}")
    if not 0.0 <= dropout_p < 1.0:
        raise OpInputError(f"{OP}: dropout_p is {dropout_p}; it must be in [0, 1)")
    if seed is not None and (
        not isinstance(seed, Tensor)
        or seed.dtype != torch.int64
        or seed.numel() != 1
        or seed.device != q.device
    ):
        raise OpInputError(f"{OP}: seed must be a one-element int64 tensor on {q.device}")


def new_seed(device: torch.device) -> Tensor:
    """A fresh dropout seed: one int64 from torch's generator of `device` (see the module doc)."""
    return torch.randint(0, _SEED_HIGH, (1,), dtype=torch.int64, device=device)


def causal_attention(
    q: Tensor, k: Tensor, v: Tensor, *, dropout_p: float = 0.0, seed: Tensor | None = None
) -> Tensor:
    """Causal scaled dot-product attention of all heads, differentiable in q, k and v.

    q, k, v: (B, nh, T, hs), hs in (32, 64, 128), one dtype: float32 or bfloat16 (float64 on the
    CPU, computed in double, for gradcheck), on the CPU or a GPU; unit stride along hs (see the
    module docstring for the layouts taken). Key j is visible to query i iff j <= i; scale
    1/sqrt(hs). dropout_p in [0, 1) drops attention weights (kept ones scaled by 1/(1-p));
    seed: a one-element int64 tensor on q's device (default: new_seed(q.device)).
    Returns y (B, nh, T, hs), q's dtype, a view of a (B, T, nh, hs) buffer.
    Raises OpTypeError (TypeError) for non-tensors or another dtype, OpInputError
    (ValueError) for another shape, device, head size or layout.
    """
    _check(q, k, v, dropout_p, seed)
    if dropout_p > 0 and seed is None:
        seed = new_seed(q.device)
    op = _attention_impl if direct(q, k, v, seed) else _attention
    y, _ = op(q, k, v, float(dropout_p), seed if dropout_p > 0 else None)
    return y


# --- the model's attention backend -----------------------------------------------------------
_sdpa_attention = None  # gptstack.model.sdpa_attention, set when the backend is registered


def kernel_covers(q: Tensor, k: Tensor, q_start, kv_len) -> bool:
    """True when causal_attention computes this backend call; else it goes to SDPA."""
    if not (isinstance(q_start, int) and q_start == 0 and kv_len is None):
        return False  # decoding after a prefix, or a static cache: other causal offsets
    if q.dim() != 4 or k.shape != q.shape or q.size(-1) not in HEAD_SIZES:
        return False
    kind = q.device.type
    if kind not in ("cpu", "cuda") or (kind == "cuda" and not CUDA_BUILT):
        return False
    return q.dtype in (CUDA_FLOATS if kind == "cuda" else CPU_FLOATS) and _rows_ok(q)


def gptstack_attention(q, k, v, *, q_start=0, kv_len=None, dropout_p=0.0):
    """The model backend "gptstack" (gptstack.model.attention's signature).

    Training and prefill (q_start == 0, kv_len None, as many queries as keys; hs in 32/64/128;
    a dtype and layout the kernels take) run causal_attention, dropout included. Everything
    else — KV-cache decoding (q_start != 0 or a tensor), a static cache (kv_len given), other
    head sizes or dtypes (float16) — is handed to gptstack.model.sdpa_attention unchanged.
    """
    if kernel_covers(q, k, q_start, kv_len) and _rows_ok(k) and _rows_ok(v):
        return causal_attention(q, k, v, dropout_p=dropout_p)
    return _sdpa_attention(q, k, v, q_start=q_start, kv_len=kv_len, dropout_p=dropout_p)


def _register_model_backend() -> None:
    global _sdpa_attention
    try:
        from gptstack.model import attention_backends, register_attention_backend, sdpa_attention
    except ImportError:  # gptstack-cuda-ops also installs alone; the backend needs the model
        return
    _sdpa_attention = sdpa_attention
    if BACKEND_NAME not in attention_backends():
        register_attention_backend(BACKEND_NAME, gptstack_attention)


_register_model_backend()
