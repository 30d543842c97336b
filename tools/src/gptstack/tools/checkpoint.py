"""Checkpoint directories: config.json, model.safetensors, tokenizer.json, train_state.pt.

A checkpoint is written whole into a temporary sibling directory and then swapped into place
(old -> `.NAME.old`, temp -> NAME, old removed), so a crash at any moment leaves either the
previous checkpoint or the new one loadable; `resolve_checkpoint` finds a `.NAME.old` left by a
crash between the two renames.

torch loads only when a checkpoint is written or its model is built: finding and validating a
checkpoint (and `gptstack export`, which reads the weights with safetensors' numpy loader) need
none of it.

An FSDP2 run's `last/` holds its optimizer state as `optimizer/`, sharded checkpoint files of
`torch.distributed.checkpoint` (DCP: one file per rank plus `.metadata`), and train_state.pt says
so; model.safetensors is still the whole model (gathered on rank 0), so the single-process tools
read every checkpoint alike. DCP reshards on load: N ranks' shards resume on M ranks, or on one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import warnings
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
    extra_dirs: dict[str, Path] | None = None,
) -> Path:
    """Write a checkpoint directory atomically; `meta` becomes config.json (plus format/version).

    extra_dirs: name -> a directory already written beside `path` (e.g. the DCP optimizer shards,
    which every rank writes), renamed into the checkpoint before it is swapped into place."""
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
        for name, folder in (extra_dirs or {}).items():
            os.rename(folder, tmp / name)
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
            f"checkpoint {path} does not exist: train one with "
            "`gptstack train --preset smoke --out RUN`"
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


# --- sharded optimizer state (FSDP2), through torch.distributed.checkpoint ------------------

OPTIMIZER_SHARDS = "optimizer"  # the DCP folder's name inside a checkpoint


def save_optimizer_shards(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, folder: Path
) -> None:
    """Every rank writes its shard of the optimizer state to `folder` (a collective call)."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    state = {"optimizer": get_optimizer_state_dict(model, optimizer)}
    with _single_process_is_meant():
        dcp.save(state, checkpoint_id=str(folder), no_dist=not dist.is_initialized())


def load_optimizer_shards(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, folder: Path
) -> None:
    """Fill `optimizer` from DCP shards written by any number of ranks: sharded (FSDP2) or whole
    (DDP, one process). Collective when a process group is up; plain file reads without one."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    if not (folder / ".metadata").is_file():
        raise CheckpointError(
            f"{folder} holds no optimizer shards (.metadata is missing): "
            "resume from a complete last/ checkpoint"
        )
    _materialize_state(optimizer)
    state = {"optimizer": get_optimizer_state_dict(model, optimizer)}  # the shapes to read into
    with _single_process_is_meant():
        dcp.load(state, checkpoint_id=str(folder), no_dist=not dist.is_initialized())
    set_optimizer_state_dict(model, optimizer, state["optimizer"])


def load_whole_optimizer_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, saved: dict[str, Any]
) -> None:
    """Load a single-process `optimizer.state_dict()` (train_state.pt) into the optimizer of a
    sharded model: every rank holds the whole state and keeps its own shard of it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    _materialize_state(optimizer)
    set_optimizer_state_dict(
        model,
        optimizer,
        optimizer_state_by_name(saved, model, optimizer),
        options=StateDictOptions(full_state_dict=True),
    )
    for group in optimizer.param_groups:  # that path flattens the betas tuple into a list
        group["betas"] = tuple(group["betas"])


def optimizer_state_by_name(
    saved: dict[str, Any], model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> dict[str, Any]:
    """`optimizer.state_dict()` keys parameters by position in its param groups; the loaders of
    torch.distributed.checkpoint.state_dict key them by name. Positions follow `optimizer`, built
    by the same policy (optimizer.py) in the same order as the saving run's."""
    names = {id(p): name for name, p in model.named_parameters()}  # a tied weight: its first name
    order = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
    return {
        "state": {order[i]: s for i, s in saved["state"].items()},
        "param_groups": [
            {**g, "params": [order[i] for i in g["params"]]} for g in saved["param_groups"]
        ],
    }


@contextlib.contextmanager
def _single_process_is_meant():
    """DCP warns on every save or load without a process group; here that is intended."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is .*single process")
        yield


def _materialize_state(optimizer: torch.optim.Optimizer) -> None:
    """Create the optimizer's (lazy) state with one step at rate 0 on zero gradients, so the
    loaders have tensors to fill. A rate held in a device tensor (capturable AdamW) is zeroed in
    place: the loaders' own version of this step would swap in a CPU tensor."""
    import torch  # this module leaves torch unimported until a checkpoint is really used

    if optimizer.state:
        return
    with torch.no_grad():
        _step_at_rate_zero(optimizer)


def _step_at_rate_zero(optimizer: torch.optim.Optimizer) -> None:
    import torch

    rates = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            p.grad = torch.zeros_like(p)
        rates.append(group["lr"])
        if isinstance(group["lr"], torch.Tensor):
            group["lr"] = group["lr"].clone()
            group["lr"].zero_()
        else:
            group["lr"] = 0.0
    optimizer.step()  # AdamW at rate 0: the decay factor 1 - lr * wd is 1, weights unchanged
    for group, rate in zip(optimizer.param_groups, rates, strict=True):
        group["lr"] = rate
    optimizer.zero_grad(set_to_none=True)
