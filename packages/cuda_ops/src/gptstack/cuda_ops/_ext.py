"""The compiled extension `_C` and the per-call plumbing every wrapper shares.

Each call passes the caller's CUDA stream (torch's current stream on the tensor's device, as
an integer) and the CPU thread count (torch.get_num_threads(), so `torch.set_num_threads`
governs our OpenMP loops too). Tensors cross as DLPack; `detach()` because torch refuses to
export a tensor that requires grad (the op's autograd formula is registered separately).
"""

from __future__ import annotations

import torch

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


def arg(t: torch.Tensor) -> torch.Tensor:
    """A tensor as the extension takes it: detached, contiguous (a no-op when already so)."""
    return t.detach().contiguous()


__all__ = ["_C", "arg", "stream_of", "threads"]
