"""The compiled extension `_C` and the per-call plumbing every wrapper shares.

Each call passes the caller's CUDA stream (torch's current stream on the tensor's device, as
an integer) and the CPU thread count (torch.get_num_threads(), so `torch.set_num_threads`
governs our OpenMP loops too). Tensors cross as DLPack capsules from `torch.utils.dlpack.
to_dlpack` (0.4 us each, measured on the 2-core dev host; handing nanobind the tensor itself
makes it call `Tensor.__dlpack__`, 11 us). The legacy capsule does no stream synchronization:
the stream is passed explicitly, which is what keeps the ops capturable in CUDA graphs.
"""

from __future__ import annotations

import torch
from torch.utils.dlpack import to_dlpack

from .errors import NotBuiltError

try:
    from . import _C
except ImportError as e:  # a source checkout without a build
    raise NotBuiltError(
        f"gptstack.cuda_ops._C cannot be imported ({e}): build the package with `uv sync` "
        f"from the repository root (or `pip install ./packages/cuda_ops`)"
    ) from e


def stream_of(t: torch.Tensor) -> int:
    """The current CUDA stream of t's device as an integer (0 on the CPU)."""
    if t.device.type != "cuda":
        return 0
    return torch.cuda.current_stream(t.device).cuda_stream


def threads() -> int:
    return torch.get_num_threads()


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the kernels accumulate and keep statistics in for inputs of `dtype` (csrc/dtype.h
    acc_t): float64 for float64, float32 for float32 and bfloat16."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def dl(t: torch.Tensor | None):
    """t as the extension takes it: a DLPack capsule of t, made contiguous if it is not (the
    capsule keeps that copy alive); None stays None (an optional argument)."""
    return None if t is None else to_dlpack(t.contiguous())


__all__ = ["_C", "acc_dtype", "dl", "stream_of", "threads"]
