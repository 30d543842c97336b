"""The processes of a data-parallel run: ranks, the process group, and what they agree on.

    torchrun --nproc-per-node 2 -m gptstack.tools.train_dist --preset smoke --set train.grad_accum=2
    world = init_world(cfg.train)          # rank, world size, local rank from torchrun's env
    for micro in world.micro_batches(G):   # this rank's share of the step's G micro-batches
    loss_sum, = world.sum([loss])          # all-reduce (gloo on CPUs, NCCL on GPUs)

PyTorch's own stack only: torchrun (elastic agent, c10d rendezvous) starts the processes and sets
RANK, WORLD_SIZE and LOCAL_RANK; `torch.distributed` connects them. Without torchrun (or with one
process) `World()` is the plain single-process path: no process group, every call here a no-op.

The global batch does not depend on the world size: a step has G = train.grad_accum micro-batches,
each drawn from the generator seeded by (seed, step, index), and rank r runs the indices
r, r + W, r + 2W, ... So one process and W processes train on the same windows, and a checkpoint
written by N ranks resumes on M ranks with the same data order (train.py's `batch_rng`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from .errors import ConfigError


@dataclass(frozen=True)
class World:
    """This process's place in the run. The default is one process (rank 0 of 1)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0  # index of this process on its node: its GPU under NCCL
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))  # for collectives
    backend: str = ""  # "nccl" | "gloo" once the process group is up; "" for one process

    @classmethod
    def from_env(cls) -> World:
        """The ranks torchrun's elastic agent assigned (RANK, WORLD_SIZE, LOCAL_RANK)."""
        env = os.environ
        if "WORLD_SIZE" not in env:
            return cls()
        return cls(
            rank=int(env.get("RANK", 0)),
            size=int(env["WORLD_SIZE"]),
            local_rank=int(env.get("LOCAL_RANK", 0)),
        )

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that prints, plots and writes checkpoints."""
        return self.rank == 0

    def micro_batches(self, grad_accum: int) -> range:
        """This rank's global micro-batch indices of a step: rank, rank + W, ... < grad_accum."""
        check_divisible(grad_accum, self.size)
        return range(self.rank, grad_accum, self.size)

    def sum(self, values: Sequence[float | torch.Tensor]) -> list[float]:
        """Element-wise sum over ranks (float64; gloo has no AVG), the same list on every rank.
        Reads device tensors, so the loop calls it only when it logs."""
        if self.size == 1:
            return [float(v) for v in values]
        flat = torch.stack(
            [torch.as_tensor(v, dtype=torch.float64).reshape(()).to(self.device) for v in values]
        )
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        return flat.tolist()

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj` (picklable), in rank order, on every rank."""
        if self.size == 1:
            return [obj]
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        if self.size > 1:
            dist.barrier()

    @contextlib.contextmanager
    def main_first(self) -> Iterator[None]:
        """Rank 0 runs the block first (e.g. builds the token cache), then the others do."""
        if not self.is_main:
            self.barrier()
        yield
        if self.is_main:
            self.barrier()

    def describe(self, parallel: str, grad_accum: int) -> str:
        """The run header's line on the processes (empty for one process)."""
        if self.size == 1:
            return ""
        kind = {"ddp": "DDP", "fsdp": "FSDP2"}[parallel]
        return (
            f"distributed: {self.size} processes ({self.backend}, {kind}); each runs "
            f"{grad_accum // self.size} of the step's {grad_accum} micro-batches; "
            "no whole-step CUDA graph with more than one process"
        )


def check_divisible(grad_accum: int, world_size: int) -> None:
    """The one-line error when a step's micro-batches do not split evenly over the ranks."""
    if grad_accum % world_size == 0:
        return
    hint = f"set train.grad_accum to a multiple of {world_size}"
    if grad_accum == 1:
        hint += (
            f", e.g. --set train.grad_accum={world_size} with train.batch_size divided by "
            f"{world_size} keeps the tokens per step"
        )
    raise ConfigError(
        f"train.grad_accum = {grad_accum} micro-batches per step cannot be split "
        f"over {world_size} processes: {hint}"
    )


def init_world(train: Any) -> World:
    """Join the process group torchrun set up (NCCL with one GPU per process, else gloo).

    `train` is the run's TrainSection (device and dist_timeout_s). One process: no group."""
    world = World.from_env()
    if world.size == 1 or dist.is_initialized():
        return (
            world
            if world.size == 1
            else replace(world, backend=dist.get_backend(), device=_collective_device(train, world))
        )
    timeout = timedelta(seconds=train.dist_timeout_s)
    device = _collective_device(train, world)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # "auto" now resolves to this process's GPU
        dist.init_process_group("nccl", timeout=timeout, device_id=device)
    else:
        dist.init_process_group("gloo", timeout=timeout)
    return replace(world, device=device, backend=dist.get_backend())


def _collective_device(train: Any, world: World) -> torch.device:
    if train.device == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    n_gpus = torch.cuda.device_count()
    if world.local_rank >= n_gpus:
        raise ConfigError(
            f"process {world.local_rank} of this node has no GPU: {n_gpus} visible; "
            f"start at most {n_gpus} processes per node (--nproc-per-node)"
        )
    return torch.device("cuda", world.local_rank)


def shutdown_world() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


# --- random streams ------------------------------------------------------------------------
# The batches need no saved state (a batch is a function of seed, step and index); dropout draws
# from torch's generators, which differ per rank: rank 0 keeps the single-process stream, the
# others are seeded apart from it.


def seed_ranks(world: World, seed: int) -> None:
    """After the (identical) model init on every rank: give ranks > 0 their own dropout stream."""
    if world.rank > 0:
        torch.manual_seed(seed + world.rank)


def rng_state(world: World, device: torch.device) -> dict[str, Any]:
    """train_state.pt's generator states: rank 0's as `torch_rng`/`cuda_rng` (the single-process
    keys) and, with several ranks, every rank's in `rank_rng` (a collective call)."""
    own = {
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
    }
    if world.size == 1:
        return own
    ranks = world.gather(own)
    return {**ranks[0], "rank_rng": ranks}


def restore_rng(state: dict[str, Any], world: World, device: torch.device, seed: int) -> None:
    """Each rank takes its saved stream; a rank the saving run did not have is seeded afresh
    (dropout is then not bit-exact across world sizes; the data order always is)."""
    saved = state.get("rank_rng") or [state]
    if world.rank >= len(saved):
        torch.manual_seed(seed + world.rank)
        return
    own = saved[world.rank]
    torch.set_rng_state(own["torch_rng"])
    if device.type == "cuda" and own.get("cuda_rng") is not None:
        torch.cuda.set_rng_state(own["cuda_rng"], device)
