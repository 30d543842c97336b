"""Model weights as safetensors: save from the unwrapped module, load with full validation.

Files hold float32 tensors under the parameter-name contract (README.md), without tied aliases
(`lm_head.weight` is `wte.weight`). Writes go to a temporary file in the target directory and are
renamed into place, so a crash never leaves a half-written file.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import nn

from gptstack.tokenizer import atomic_path

from .errors import ModelError


def unwrap(model: nn.Module) -> nn.Module:
    """The plain module under `torch.compile` (`_orig_mod`) and DistributedDataParallel
    (`.module`) wrappers, in any nesting. The one place that knows about those prefixes."""
    while True:
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module
        elif hasattr(model, "_orig_mod") and isinstance(model._orig_mod, nn.Module):
            model = model._orig_mod
        else:
            return model


def _file_names(model: nn.Module) -> dict[str, torch.Tensor]:
    """name -> tensor for everything a weights file holds: state_dict() minus tied aliases."""
    tied = getattr(model, "tied_parameters", {})
    return {k: v for k, v in model.state_dict().items() if k not in tied}


def save_safetensors(model: nn.Module, path: str | os.PathLike) -> Path:
    """Write the model's weights (float32, no tied aliases) to `path` atomically; returns it."""
    module = unwrap(model)
    path = Path(path)
    tensors = {
        name: t.detach().to(device="cpu", dtype=torch.float32).contiguous()
        for name, t in _file_names(module).items()
    }
    with atomic_path(path) as tmp:
        save_file(tensors, tmp, metadata={"format": "pt"})
    return path


def load_safetensors(model: nn.Module, path: str | os.PathLike) -> nn.Module:
    """Copy weights from `path` into `model` (cast to its dtype/device); returns the module.

    Raises ModelError if the file is missing or unreadable, or if its tensor names and shapes do
    not match the model exactly (the message lists missing, unexpected and mismatched tensors).
    """
    module = unwrap(model)
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"weights file {path} not found: save one with save_safetensors")
    expected = _file_names(module)
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            file_shapes = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
            problems = _compare(expected, file_shapes)
            if problems:
                raise ModelError(
                    f"weights file {path} does not fit this model: {'; '.join(problems)}. "
                    f"Check that the config matches the one the file was saved with"
                )
            with torch.no_grad():
                for name, target in expected.items():
                    target.copy_(f.get_tensor(name))
    except SafetensorError as e:
        raise ModelError(f"weights file {path} is not a readable safetensors file: {e}") from e
    return module


def _compare(expected: dict[str, torch.Tensor], file_shapes: dict[str, tuple]) -> list[str]:
    missing = sorted(set(expected) - set(file_shapes))
    unexpected = sorted(set(file_shapes) - set(expected))
    mismatched = [
        f"{name} file {list(file_shapes[name])} vs model {list(expected[name].shape)}"
        for name in sorted(set(expected) & set(file_shapes))
        if tuple(expected[name].shape) != file_shapes[name]
    ]
    problems = []
    if missing:
        problems.append(f"missing {missing}")
    if unexpected:
        problems.append(f"unexpected {unexpected}")
    if mismatched:
        problems.append(f"shape mismatch {mismatched}")
    return problems
