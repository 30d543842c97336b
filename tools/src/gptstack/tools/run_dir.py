"""Run directories: never train over a run without being told, and leave no empty folder behind.

    check_run_dir(run_dir, resume=None, overwrite=False)   # GptstackError if it holds a run
    with run_folder(run_dir): ...                          # created now; removed on failure
                                                           # if it never got a checkpoint

`gptstack train --out DIR` and `gptstack pipeline --out DIR` refuse a DIR that holds checkpoints
unless they continue it (--resume DIR) or replace it (--overwrite). No filesystem access beyond
the run directory itself, and no torch: the refusal is printed before anything heavy loads.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

from .errors import GptstackError

CHECKPOINTS = ("best", "last")
# What `gptstack train` writes into a run directory (README "A run directory"): --overwrite
# deletes exactly these, never other files a user keeps there.
RUN_FILES = ("metrics.jsonl", "loss.png", "summary.json")


def _checkpoint_dirs(run_dir: Path, *, temporary: bool = False) -> list[Path]:
    """best/, last/, the .NAME.old a crash between save_checkpoint's two renames leaves, and
    with temporary=True the .NAME.tmp-* folders a crash during a write leaves."""
    found = []
    for name in CHECKPOINTS:
        found += [p for p in (run_dir / name, run_dir / f".{name}.old") if p.is_dir()]
        if temporary:
            found += sorted(run_dir.glob(f".{name}.tmp-*"))
    return found


def holds_checkpoints(run_dir: Path) -> bool:
    return any((p / "config.json").is_file() for p in _checkpoint_dirs(Path(run_dir)))


def checkpoint_step(ckpt: Path) -> int | None:
    """The step recorded in a checkpoint's config.json, or None if it has none or is unreadable."""
    try:
        step = json.loads((Path(ckpt) / "config.json").read_text()).get("step")
    except (OSError, ValueError, AttributeError):
        return None
    return step if isinstance(step, int) else None


def describe_run(run_dir: Path) -> str:
    """'last/ at step 131' (or 'best/ at step 100'): what a refusal message names."""
    for name in ("last", "best"):
        for ckpt in (run_dir / name, run_dir / f".{name}.old"):
            step = checkpoint_step(ckpt)
            if step is not None:
                return f"{name}/ at step {step:,}"
    return "checkpoints"


def check_run_dir(
    run_dir: Path, *, resume: Path | None, overwrite: bool, command: str = "gptstack train"
) -> None:
    """Refuse to train into a run directory that holds checkpoints, unless resuming that very
    run or told to overwrite it. Raises GptstackError naming both ways out."""
    run_dir = Path(run_dir)
    if overwrite or not holds_checkpoints(run_dir):
        return
    if resume is not None and _same_run(Path(resume), run_dir):
        return
    raise GptstackError(
        f"{run_dir} already holds a run ({describe_run(run_dir)}): continue it with "
        f"`{command} --resume {run_dir}`, or start over with --overwrite (deletes it)"
    )


def _same_run(resume: Path, run_dir: Path) -> bool:
    """Whether --resume points at run_dir or at one of its checkpoints."""
    target = resume.resolve()
    return target == run_dir.resolve() or target.parent == run_dir.resolve()


def clear_run(run_dir: Path) -> None:
    """Delete what a training run wrote into run_dir (--overwrite): its checkpoints, including
    crash leftovers, and RUN_FILES. Other files stay."""
    run_dir = Path(run_dir)
    for ckpt in _checkpoint_dirs(run_dir, temporary=True):
        shutil.rmtree(ckpt)
    for name in RUN_FILES:
        (run_dir / name).unlink(missing_ok=True)


@contextlib.contextmanager
def run_folder(run_dir: Path) -> Iterator[Path]:
    """Create run_dir (and missing parents) for work that starts now. If the work fails or is
    interrupted before any checkpoint exists there, remove the folders this call created, so a
    failed run leaves nothing behind; a folder that holds a checkpoint is kept (it resumes)."""
    run_dir = Path(run_dir)
    missing = [p for p in (run_dir, *run_dir.parents) if not p.exists()]
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        yield run_dir
    except BaseException:
        if missing and not holds_checkpoints(run_dir):
            shutil.rmtree(missing[-1], ignore_errors=True)  # the top-most folder this created
        raise
