"""Where and in what precision a model runs: the device resolver and the autocast context.

    device = resolve_device("auto")           # a CUDA GPU if one is visible, else the CPU
    with autocast(device, bf16=True): ...     # bf16 autocast; a no-op context when bf16=False

Tools (`gptstack train`, `sample`, `eval`) and bench both resolve `--device` here, so "auto" means
the same everywhere and a missing GPU gets the same one-line error.
"""

from __future__ import annotations

import contextlib

import torch

from .errors import ModelError

DEVICE_CHOICES = ("auto", "cuda", "cpu")


def resolve_device(name: str | torch.device, setting: str = "--device") -> torch.device:
    """ "auto" (the current CUDA GPU if one is visible, else the CPU), "cuda" or "cpu".

    `setting` names the option in the error message (e.g. "train.device =").
    Raises ModelError for an unknown name or "cuda" without a visible GPU.
    """
    if isinstance(name, torch.device):
        return name
    if name not in DEVICE_CHOICES:
        raise ModelError(f"{setting} {name!r} is unknown: use {', '.join(DEVICE_CHOICES)}")
    if name == "cuda" and not torch.cuda.is_available():
        raise ModelError(f"{setting} cuda but no CUDA GPU is visible; use {setting} cpu")
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def autocast(device: torch.device, *, bf16: bool, graph_safe: bool = False):
    """bf16 autocast on `device` (a no-op context when bf16 is False).

    graph_safe=True turns off autocast's cache of cast weights, which a captured CUDA graph must
    not use (torch.cuda.graphs docs, "Graph capture ... autocast": cache_enabled=False).
    """
    if not bf16:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=not graph_safe)
