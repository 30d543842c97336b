"""The teacher of a distilled run (train.distill_from): loaded, frozen and checked against the
student's run before any step is taken, so a mismatch is a clear error and not a shape error deep
inside the first step.

    teacher = load_teacher(cfg, device)            # a Checkpoint; None without distill_from
    corpus = prepare_corpus(cfg, teacher.tokenizer)  # the teacher's token ids are the student's
    check_teacher(teacher, corpus.tokenizer, student_config)
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from gptstack.model import GPTConfig

from .checkpoint import Checkpoint, load_checkpoint
from .config import RunConfig
from .errors import ConfigError


def load_teacher(cfg: RunConfig, device: torch.device) -> Checkpoint | None:
    """train.distill_from's checkpoint on `device` (eval mode, no gradients), or None."""
    path = cfg.train.distill_from
    if not path:
        return None
    teacher = load_checkpoint(Path(path), device=device)  # CheckpointError if it is not one
    teacher.model.requires_grad_(False)
    wanted = dataclasses.asdict(cfg.tokenizer)
    had = dataclasses.asdict(teacher.run_config.tokenizer)
    if wanted != had:
        raise ConfigError(
            f"train.distill_from = {path}: the teacher was trained with tokenizer {had}, this "
            f"run asks for {wanted}; distillation compares the two models token by token, so "
            "train the teacher with this run's [tokenizer] settings"
        )
    return teacher


def check_teacher(teacher: Checkpoint, tokenizer, student: GPTConfig) -> None:
    """The teacher reads the student's token ids and windows and predicts over its vocabulary."""
    where = f"train.distill_from = {teacher.path}"
    if teacher.tokenizer.fingerprint() != tokenizer.fingerprint():
        raise ConfigError(
            f"{where}: the teacher's tokenizer differs from this run's (a resumed run keeps the "
            "tokenizer it started with): distill from a teacher trained on the same tokenizer"
        )
    t = teacher.model.config
    if t.vocab_size != student.vocab_size:
        raise ConfigError(
            f"{where}: the teacher predicts over {t.vocab_size} ids, this model over "
            f"{student.vocab_size} (tokenizer.pad_vocab_to differs): use the same padding"
        )
    if t.block_size < student.block_size:
        raise ConfigError(
            f"{where}: the teacher's context is {t.block_size} tokens, shorter than this run's "
            f"model.block_size = {student.block_size}: use a teacher with a context at least as "
            "long"
        )
