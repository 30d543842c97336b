"""The teacher of a distilled run (train.distill_from): found or trained, loaded, frozen and
checked against the student's run before any step is taken, so a mismatch is a clear error and
not a shape error deep inside the first step.

train.distill_from names either a checkpoint (or run directory) or `preset:NAME`: then the
preset NAME is trained first, on this run's data and tokenizer, into RUN/teacher, and a later run
into the same RUN (a --resume, or a run stopped during the teacher's training) reuses or resumes
it; --overwrite trains it again.

    stage = teacher_stage(cfg, run_dir)            # (teacher's RunConfig, RUN/teacher) or None
    teacher = load_teacher(path, cfg, device)      # a Checkpoint
    corpus = prepare_corpus(cfg, teacher.tokenizer)  # the teacher's token ids are the student's
    check_teacher(teacher, corpus.tokenizer, student_config)
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import torch

from gptstack.model import GPTConfig

from .checkpoint import Checkpoint, load_checkpoint
from .config import RunConfig, load_preset
from .errors import ConfigError
from .run_dir import checkpoint_step, holds_checkpoints

PRESET_PREFIX = "preset:"


def teacher_stage(cfg: RunConfig, run_dir: Path) -> tuple[RunConfig, Path] | None:
    """For train.distill_from = "preset:NAME": the teacher's run config (the preset, with this
    run's data, tokenizer, device and dtype) and its run directory RUN/teacher. None otherwise."""
    source = cfg.train.distill_from
    if not source.startswith(PRESET_PREFIX):
        return None
    name = source[len(PRESET_PREFIX) :]
    teacher = load_preset(name)  # ConfigError naming the presets if there is no such one
    if teacher.train.distill_from:
        raise ConfigError(
            f"train.distill_from = {source}: that preset is distilled from a teacher itself; "
            "name a preset that trains alone (a chain of teachers is not supported)"
        )
    if teacher.model.block_size < cfg.model.block_size:  # found now, not after its training
        raise ConfigError(
            f"train.distill_from = {source}: that preset's context is "
            f"{teacher.model.block_size} tokens, shorter than this run's model.block_size = "
            f"{cfg.model.block_size}: name a teacher with a context at least as long"
        )
    teacher.data, teacher.tokenizer = copy.deepcopy(cfg.data), copy.deepcopy(cfg.tokenizer)
    teacher.train.device, teacher.train.dtype = cfg.train.device, cfg.train.dtype
    return teacher, Path(run_dir) / "teacher"


def teacher_progress(teacher_cfg: RunConfig, teacher_dir: Path, max_steps: int) -> str:
    """ "done" (a finished run of exactly this config), "resume" (an unfinished one) or "train"
    (none, or one of another config: trained again)."""
    if not holds_checkpoints(teacher_dir):
        return "train"
    try:
        meta = json.loads((teacher_dir / "last" / "config.json").read_text())
    except (OSError, ValueError):
        return "train"
    if meta.get("run") != teacher_cfg.to_dict():
        return "train"
    return "done" if checkpoint_step(teacher_dir / "last") == max_steps else "resume"


def load_teacher(path: Path, cfg: RunConfig, device: torch.device) -> Checkpoint:
    """The teacher checkpoint at `path` on `device` (eval mode, no gradients)."""
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
