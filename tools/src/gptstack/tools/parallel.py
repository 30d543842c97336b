"""The model of a data-parallel run: one process as is, DDP, or FSDP2, and its checkpoints.

    replicas = wrap_model(model, world, runtime, parallel="ddp")  # model built on the CPU
    TrainStep(replicas.fwd, model.parameters(), optimizer, ..., no_sync=replicas.no_sync)
    replicas.save(run_dir / "last", tokenizer=tok, meta=meta, train_state=state, optimizer=opt)
    replicas.load_optimizer(ckpt, state, optimizer)

- One process: the model on its device, `torch.compile`d when the runtime says so; the training
  step may then be one CUDA graph. This is the single-process path, unchanged.
- `ddp`: `DistributedDataParallel`, a full replica per process, gradients all-reduced in buckets
  during the last micro-batch's backward (`no_sync` for the others). torch.compile goes on the
  inner module, which the compiler handles better than the wrapper (PyTorch docs, "Where to
  apply torch.compile?"); DDP's bucketing then splits the compiled graph.
- `fsdp`: FSDP2 (`fully_shard`) on every block, then on the root (embeddings, final LayerNorm and
  the tied head): parameters, gradients and optimizer state are sharded over the ranks, each
  block gathered just before it runs. With bf16 the policy computes in bf16 and reduces
  gradients in fp32 (`MixedPrecisionPolicy`). Under compile, each block is compiled.

No whole-step CUDA graph with more than one process: capturing NCCL collectives in a graph is
possible but delicate, so several processes run compiled (or eager) steps instead; the run
header says so. Rank 0 alone writes checkpoints; every rank reads them.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gptstack.model import GPT, compile_model

from .checkpoint import (
    OPTIMIZER_SHARDS,
    load_optimizer_shards,
    load_whole_optimizer_state,
    save_checkpoint,
    save_optimizer_shards,
)
from .checkpoint_writer import CheckpointWriter, cpu_snapshot
from .distributed import World
from .errors import ConfigError
from .runtime import Runtime


def distributed_runtime(runtime: Runtime, world: World, cuda_graph_setting: str) -> Runtime:
    """The runtime with several processes: the same, minus the whole-step CUDA graph."""
    if world.size == 1 or not runtime.cuda_graph:
        return runtime
    if cuda_graph_setting == "true":
        raise ConfigError(
            f"train.cuda_graph = true is for one process; this run has {world.size}: "
            "use train.cuda_graph=auto (off with several processes)"
        )
    return replace(runtime, cuda_graph=False)


@dataclass
class ParallelModel:
    module: GPT  # the model itself (under FSDP2 its parameters are sharded DTensors)
    fwd: Callable  # what the training step and the evaluation call: fwd(x, y) -> (logits, loss)
    no_sync: Callable[[], contextlib.AbstractContextManager] | None  # for TrainStep
    kind: str  # "single" | "ddp" | "fsdp"
    world: World

    def save(
        self,
        path: Path,
        *,
        tokenizer,
        meta: dict[str, Any],
        train_state: dict[str, Any] | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        writer: CheckpointWriter | None = None,
    ) -> None:
        """Write a checkpoint (every rank calls this; rank 0 writes the directory atomically).

        writer: hand the write to this background writer, after copying what it needs to the
        CPU (one process and DDP; FSDP2's shards are written by every rank, inline).

        With train_state, the optimizer state goes in too: whole in train_state.pt (one process,
        DDP: every replica holds the same), or as DCP shards written by every rank (FSDP2). Before
        the first step AdamW has no state yet; DCP's state-dict helpers would create it with a
        step at rate 0, which counts as a step (bias correction), so it is saved whole then."""
        extra: dict[str, Path] = {}
        if train_state is not None:
            train_state = dict(train_state)
            if self.kind == "fsdp" and optimizer.state:
                staging = path.parent / f".{path.name}.{OPTIMIZER_SHARDS}-staging"
                if self.world.is_main:
                    shutil.rmtree(staging, ignore_errors=True)
                self.world.barrier()
                save_optimizer_shards(self.module, optimizer, staging)
                self.world.barrier()  # every shard and DCP's .metadata are on disk
                extra[OPTIMIZER_SHARDS] = staging
                train_state["optimizer_shards"] = OPTIMIZER_SHARDS
            elif self.world.is_main:
                train_state["optimizer"] = optimizer.state_dict()
            train_state["world_size"] = self.world.size
        weights = self._whole_model()
        if not self.world.is_main:
            return
        if writer is not None and writer.background and self.kind != "fsdp":
            writer.submit(
                save_checkpoint,
                path,
                model=_module_with(self.module.config, cpu_snapshot(weights.state_dict())),
                tokenizer=tokenizer,
                meta=meta,
                train_state=cpu_snapshot(train_state),
            )
            return
        save_checkpoint(
            path,
            model=weights,
            tokenizer=tokenizer,
            meta=meta,
            train_state=train_state,
            extra_dirs=extra,
        )

    def load_optimizer(
        self, ckpt: Path, state: dict[str, Any], optimizer: torch.optim.Optimizer
    ) -> None:
        """Restore the optimizer from a checkpoint written with any world size and kind."""
        if "optimizer_shards" in state:
            load_optimizer_shards(self.module, optimizer, ckpt / state["optimizer_shards"])
        elif self.kind == "fsdp" and state["optimizer"]["state"]:
            load_whole_optimizer_state(self.module, optimizer, state["optimizer"])
        else:  # also a state saved before the first step: hyper-parameters only
            optimizer.load_state_dict(state["optimizer"])

    def _whole_model(self) -> nn.Module | None:
        """A module holding every weight, on rank 0 (None elsewhere): the model itself, or under
        FSDP2 the gathered weights (a collective call) on a copy whose tensors are those."""
        if self.kind != "fsdp":
            return self.module
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(
            self.module, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
        if not self.world.is_main:
            return None
        return _module_with(self.module.config, full)


def wrap_model(model: GPT, world: World, runtime: Runtime, parallel: str) -> ParallelModel:
    """Move `model` (built on the CPU, identically on every rank) to its device and wrap it."""
    if world.size == 1:
        model.to(runtime.device)
        fwd = compile_model(model, runtime.compile) if runtime.compile else model
        return ParallelModel(model, fwd, None, "single", world)
    if parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        model.to(runtime.device)
        if runtime.compile:  # on the inner module: regional (blocks, head) or whole, in place
            compile_model(
                model, runtime.compile
            ) if runtime.compile == "regional" else model.compile()
        ids = [runtime.device.index] if runtime.device.type == "cuda" else None
        ddp = DDP(model, device_ids=ids)  # every replica starts from rank 0's weights
        return ParallelModel(model, ddp, ddp.no_sync, "ddp", world)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(runtime.device.type, (world.size,))
    policy = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if runtime.dtype == "bf16"
        else MixedPrecisionPolicy()
    )
    for block in model.h:
        if runtime.compile:
            block.compile()
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)  # moves the shards to the mesh's device
    return ParallelModel(model, model, lambda: _fsdp_no_sync(model), "fsdp", world)


def _module_with(config, state: dict[str, torch.Tensor]) -> GPT:
    """A GPT whose tensors are `state`'s (built on the meta device: no memory, no init)."""
    with torch.device("meta"):
        copy = GPT(config)
    copy.load_state_dict(state, assign=True)
    return copy


@contextlib.contextmanager
def _fsdp_no_sync(model) -> Iterator[None]:
    """FSDP2's no_sync: keep the micro-batch's gradients local, reduce-scatter on the last."""
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)
