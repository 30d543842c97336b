"""Learning-rate schedule and step budget: pure functions of the step, so resume stays exact."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from .config import TrainSection


def total_steps(train: TrainSection, device_type: str) -> int:
    """max_steps, or the shortened cpu_max_steps when training on a CPU."""
    if device_type == "cpu" and train.cpu_max_steps > 0:
        return min(train.cpu_max_steps, train.max_steps)
    return train.max_steps


def for_device(train: TrainSection, device_type: str) -> TrainSection:
    """The train section as it runs on this device: on a CPU, each cpu_* value that is set
    replaces its GPU counterpart (batch_size, eval_interval, eval_batches; max_steps through
    total_steps), and cpu_distill = false trains without the teacher."""
    if device_type != "cpu":
        return train
    changes = {
        key: getattr(train, f"cpu_{key}")
        for key in ("batch_size", "eval_interval", "eval_batches")
        if getattr(train, f"cpu_{key}") > 0
    }
    if not train.cpu_distill:
        changes["distill_from"] = ""
    return dataclasses.replace(train, **changes)


def cuda_micro_batch(
    train: TrainSection, fits: Callable[[int], bool], world_size: int = 1
) -> tuple[int, int]:
    """(micro-batch, grad_accum) of a step on a GPU: train.cuda_batch_size where set, with the
    step's batch_size * grad_accum sequences kept; a larger one halved while `fits(rows)` says
    the GPU cannot hold it or the step would not split into whole micro-batches per rank, down to
    batch_size (the configured micro-batch is used as it is)."""
    sequences = train.batch_size * train.grad_accum
    rows = train.cuda_batch_size or train.batch_size
    if rows < train.batch_size:  # asked smaller than configured: no need to check the memory
        return rows, sequences // rows
    while rows > train.batch_size:
        if sequences % rows == 0 and (sequences // rows) % world_size == 0 and fits(rows):
            return rows, sequences // rows
        rows //= 2
    return train.batch_size, train.grad_accum


def dropout_for_device(train: TrainSection, dropout: float, device_type: str) -> float:
    """The model's dropout as it trains on this device: train.cpu_dropout on a CPU when set."""
    if device_type == "cpu" and train.cpu_dropout >= 0:
        return train.cpu_dropout
    return dropout


def kernels_for_device(
    train: TrainSection, ops: str, attention: str, device_type: str, dtype: str
) -> tuple[str, str]:
    """The model's (ops, attention) as it trains on this device: train.cpu_bf16_ops and
    cpu_bf16_attention, where set, on a CPU that trains in bf16; train.cuda_ops on a GPU."""
    if device_type == "cpu" and dtype == "bf16":
        return train.cpu_bf16_ops or ops, train.cpu_bf16_attention or attention
    if device_type == "cuda":
        return train.cuda_ops or ops, attention
    return ops, attention


def warmup_steps(train: TrainSection, max_steps: int) -> int:
    """The configured warmup, capped at a tenth of a (shortened) schedule."""
    return min(train.warmup_steps, max_steps // 10)


def get_lr(step: int, train: TrainSection, max_steps: int) -> float:
    """Linear warmup to lr, then a decay to min_lr at max_steps: cosine (nanoGPT's get_lr) or
    linear (train.lr_decay)."""
    warm = warmup_steps(train, max_steps)
    if step < warm:
        return train.lr * (step + 1) / warm
    if step >= max_steps:
        return train.min_lr
    progress = (step - warm) / max(1, max_steps - warm)
    if train.lr_decay == "linear":
        coeff = 1.0 - progress  # 1 -> 0
    else:
        coeff = 0.5 * (1.0 + math.cos(math.pi * progress))  # 1 -> 0
    return train.min_lr + coeff * (train.lr - train.min_lr)
