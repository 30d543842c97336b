"""`RUN_DIR/summary.json`: a training run's recorded result (docs/MEASURING.md rule 6).

Derived from metrics.jsonl, so it can be regenerated: best and last val loss, bits/char, wall
time, median tokens/s and MFU over the logged intervals (the first interval, which holds
torch.compile's compilation, is left out of the medians), plus the machine, versions and commit.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

from gptstack.tokenizer import write_atomic

from .plot import read_metrics


def summarize_run(run_dir: Path, command: list[str] | None = None) -> dict[str, Any]:
    import torch

    from gptstack.bench.environment import environment

    records = read_metrics(run_dir)
    starts = [r for r in records if r.get("event") == "start"]
    ends = [r for r in records if r.get("event") == "end"]
    evals = [r for r in records if r.get("event") == "eval"]
    train = [r for r in records if r.get("event") == "train"]
    startups = [r for r in records if r.get("event") == "startup"]
    steady = train[1:] if len(train) > 1 else train
    best = min(evals, key=lambda r: r["val_loss"]) if evals else None
    mfus = [r["mfu"] for r in steady if r.get("mfu") is not None]
    # Wall time: each (start, end) segment of the run, so a resumed run adds its parts.
    wall = sum(e["time"] - s["time"] for s, e in zip(starts, ends, strict=False))
    # The same from each process's start: Python, torch, data and compile start-up included.
    process_wall = sum(
        e["time"] - s.get("process_start", s["time"]) for s, e in zip(starts, ends, strict=False)
    )
    first = starts[0] if starts else {}
    device = torch.device("cuda" if "cuda" in str(first.get("device", "")) else "cpu")
    return {
        "kind": "training-run",
        "run": first.get("config", {}).get("name"),
        "config": first.get("config"),
        "device": first.get("device"),
        "n_params": first.get("n_params"),
        "steps": ends[-1]["step"] if ends else None,
        "max_steps": first.get("max_steps"),
        "segments": len(starts),
        "wall_time_s": wall,
        "process_wall_s": process_wall,
        "startup": (
            {k: v for k, v in startups[0].items() if k.endswith("_s")} if startups else None
        ),
        "best_val_loss": best["val_loss"] if best else None,
        "best_val_bpc": best["val_bpc"] if best else None,
        "best_step": best["step"] if best else None,
        "last_val_loss": evals[-1]["val_loss"] if evals else None,
        # the largest of the segments' (a resumed run's processes each start from zero)
        "peak_memory_bytes": max(
            (e["peak_memory_bytes"] for e in ends if e.get("peak_memory_bytes") is not None),
            default=None,
        ),
        "tokens_per_s_median": statistics.median(r["tokens_per_s"] for r in steady)
        if steady
        else None,
        "mfu_median": statistics.median(mfus) if mfus else None,
        # where the loop's time went besides the steps (eval records of older runs lack them)
        "eval_s_total": sum(r.get("eval_s", 0.0) for r in evals),
        "checkpoint_s_total": sum(r.get("checkpoint_s", 0.0) for r in evals),
        "evals": [{k: r[k] for k in ("step", "train_loss", "val_loss", "val_bpc")} for r in evals],
        "environment": environment(device, command if command is not None else sys.argv),
    }


def write_run_summary(
    run_dir: Path, command: list[str] | None = None
) -> tuple[Path, dict[str, Any]]:
    """Write RUN_DIR/summary.json atomically; return its path and content."""
    summary = summarize_run(run_dir, command)
    path = Path(run_dir) / "summary.json"
    write_atomic(path, json.dumps(summary, indent=2) + "\n")
    return path, summary
