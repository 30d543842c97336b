"""Argument checks shared by the op wrappers: one clear error before any kernel runs.

dtype problems raise OpTypeError (a TypeError); shape, device and layout problems raise
OpInputError (a ValueError). These run on real and fake tensors alike, so they also hold under
torch.compile, where they run once at trace time.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ._ext import _C
from .errors import OpInputError, OpTypeError

CUDA_BUILT = bool(_C.build_info()["cuda"])
CPU_FLOATS = (torch.float32, torch.bfloat16, torch.float64)
CUDA_FLOATS = (torch.float32, torch.bfloat16)


def _names(dtypes: Sequence[torch.dtype]) -> str:
    return ", ".join(str(d).removeprefix("torch.") for d in dtypes)


def float_tensor(op: str, name: str, t: object, *, min_dim: int = 1) -> torch.Tensor:
    """t is a contiguous float32/bfloat16 (float64 on CPU) tensor on the CPU or a GPU."""
    if not isinstance(t, torch.Tensor):
        raise OpTypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    kind = t.device.type
    if kind not in ("cpu", "cuda"):
        raise OpInputError(f"{op}: {name} is on {t.device}; use a CPU or CUDA tensor")
    if kind == "cuda" and not CUDA_BUILT:
        raise OpInputError(
            f"{op}: {name} is on {t.device} but this gptstack.cuda_ops was built without CUDA "
            f"kernels (nvcc was not found at build time; see gptstack.cuda_ops.build_info())"
        )
    allowed = CUDA_FLOATS if kind == "cuda" else CPU_FLOATS
    if t.dtype not in allowed:
        raise OpTypeError(
            f"{op}: {name} is {str(t.dtype).removeprefix('torch.')} on {kind}; "
            f"expected one of {_names(allowed)}"
        )
    if t.dim() < min_dim:
        raise OpInputError(
            f"{op}: {name} has shape {tuple(t.shape)}; it needs at least {min_dim} dimension(s)"
        )
    if not t.is_contiguous():
        raise OpInputError(
            f"{op}: {name} with shape {tuple(t.shape)} is not contiguous; call .contiguous()"
        )
    return t


def like(
    op: str,
    ref_name: str,
    ref: torch.Tensor,
    name: str,
    t: object,
    *,
    shape: Sequence[int] | None = None,
    dtype: bool = True,
) -> torch.Tensor:
    """t is a float tensor on ref's device (and of ref's dtype), with the given shape."""
    float_tensor(op, name, t, min_dim=0)
    assert isinstance(t, torch.Tensor)
    if t.device != ref.device:
        raise OpInputError(
            f"{op}: {name} is on {t.device} but {ref_name} is on {ref.device}; "
            f"put both on one device"
        )
    if dtype and t.dtype != ref.dtype:
        raise OpTypeError(
            f"{op}: {name} is {str(t.dtype).removeprefix('torch.')} but {ref_name} is "
            f"{str(ref.dtype).removeprefix('torch.')}; use one dtype"
        )
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise OpInputError(f"{op}: {name} has shape {tuple(t.shape)}; expected {tuple(shape)}")
    return t


_PLAIN = (torch.Tensor, torch.nn.Parameter)  # not FakeTensor, DTensor or other subclasses


def direct(*tensors: torch.Tensor | None) -> bool:
    """Whether an op may call its implementation itself rather than through torch's dispatcher:
    plain CPU/CUDA tensors, not under torch.compile's tracing (its graph needs the custom op),
    and no autograd graph to record. The first dispatch of any torch.library custom op imports
    torch._dynamo (1-3 s: a whole `gptstack sample` start-up), and every dispatch costs tens of
    microseconds of Python; generation (no_grad) needs neither."""
    if torch.compiler.is_compiling():
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if t is None:
            continue
        if type(t) not in _PLAIN or t.device.type not in ("cpu", "cuda"):
            return False
        if grad and t.requires_grad:
            return False
    return True
