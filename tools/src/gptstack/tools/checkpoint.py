"""Checkpoint directories: config.json, model.safetensors, tokenizer.json, train_state.pt.

A checkpoint is written whole into a temporary sibling directory and then swapped into place
(old -> `.NAME.old`, temp -> NAME, old removed), so a crash at any moment leaves either the
previous checkpoint or the new one loadable; `resolve_checkpoint` finds a `.NAME.old` left by a
crash between the two renames.

torch loads only when a checkpoint is written or its model is built: finding and validating a
checkpoint (and `gptstack export`, which reads the weights with safetensors' numpy loader) need
none of it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gptstack.tokenizer import Tokenizer, atomic_path, load_tokenizer, sync_dir, write_atomic

from .config import RunConfig
from .errors import CheckpointError

if TYPE_CHECKING:
    import torch
    from gptstack.model import GPT

FORMAT = "gptstack-checkpoint"
VERSION = 1
FILES = ("config.json", "model.safetensors", "tokenizer.json")


def save_safetensors(model: torch.nn.Module, path: Path) -> None:
    """gptstack.model.save_safetensors, imported when first called (it loads torch)."""
    from gptstack.model import save_safetensors as save

    save(model, path)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@dataclass
class Checkpoint:
    path: Path
    meta: dict[str, Any]  # the whole config.json
    model: GPT
    tokenizer: Tokenizer

    @property
    def run_config(self) -> RunConfig:
        return RunConfig.from_dict(self.meta["run"], source=f"{self.path}/config.json")

    @property
    def train_state_path(self) -> Path:
        return self.path / "train_state.pt"


def save_checkpoint(
    path: Path,
    *,
    model: torch.nn.Module,
    tokenizer: Tokenizer,
    meta: dict[str, Any],
    train_state: dict[str, Any] | None = None,
) -> Path:
    """Write a checkpoint directory atomically; `meta` becomes config.json (plus format/version)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700 folders; honour the umask
        doc = {"format": FORMAT, "version": VERSION, **meta}
        write_atomic(tmp / "config.json", json.dumps(doc, indent=2) + "\n")
        save_safetensors(model, tmp / "model.safetensors")
        tokenizer.save(tmp / "tokenizer.json")
        if train_state is not None:
            import torch

            with atomic_path(tmp / "train_state.pt") as state_tmp:
                torch.save(train_state, state_tmp)
        sync_dir(tmp)  # every file above was fsync'ed by the atomic writers
        old = path.parent / f".{path.name}.old"
        if old.exists():
            shutil.rmtree(old)
        if path.exists():
            os.rename(path, old)
        os.rename(tmp, path)
        sync_dir(path.parent)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def resolve_checkpoint(path: Path, *, prefer: str = "best") -> Path:
    """A checkpoint directory from a checkpoint path or a run directory (its best/ or last/,
    `prefer` first)."""
    path = Path(path)
    order = ["best", "last"] if prefer == "best" else ["last", "best"]
    candidates = [path] if (path / "config.json").is_file() else [path / n for n in order]
    for c in candidates:
        if (c / "config.json").is_file():
            return c
        old = c.parent / f".{c.name}.old"  # a crash between the two renames of save_checkpoint
        if (old / "config.json").is_file():
            return old
    if not path.exists():
        raise CheckpointError(
            f"checkpoint {path} does not exist: train one with `gptstack train --preset smoke --out RUN`"
            " and pass RUN or RUN/best"
        )
    raise CheckpointError(
        f"{path} is not a checkpoint (no config.json) nor a run directory with best/ or last/"
    )


def read_meta(ckpt: Path) -> dict[str, Any]:
    try:
        meta = json.loads((ckpt / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{ckpt}/config.json is unreadable ({e})") from None
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{ckpt}/config.json is not a gptstack checkpoint")
    if meta.get("version") != VERSION:
        raise CheckpointError(
            f"{ckpt} is checkpoint version {meta.get('version')}; this gptstack reads {VERSION}"
        )
    for name in FILES:
        if not (ckpt / name).is_file():
            raise CheckpointError(f"checkpoint {ckpt} is incomplete: {name} is missing")
    return meta


def load_checkpoint(path: Path, *, device: str | torch.device = "cpu") -> Checkpoint:
    """Load model (eval mode, on `device`) and tokenizer from a checkpoint or run directory."""
    from gptstack.model import GPT, GPTConfig, load_safetensors

    ckpt = resolve_checkpoint(path)
    meta = read_meta(ckpt)
    config = GPTConfig.from_dict(meta["model"])
    model = GPT(config)
    load_safetensors(model, ckpt / "model.safetensors")
    model.to(device).eval()
    tokenizer = load_tokenizer(ckpt / "tokenizer.json")
    return Checkpoint(ckpt, meta, model, tokenizer)
