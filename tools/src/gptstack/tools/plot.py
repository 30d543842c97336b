"""`gptstack plot RUN_DIR`: train/val loss and learning rate against steps, as a PNG."""

from __future__ import annotations

import json
from pathlib import Path

from gptstack.tokenizer import atomic_path

from .errors import GptstackError


def read_metrics(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise GptstackError(f"{path} not found: pass a run directory written by `gptstack train`")
    records = []
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue  # a line cut short by a crash
    return records


def plot_run(run_dir: Path, out: Path | None = None) -> Path:
    """Write RUN_DIR/loss.png (or `out`) and return its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    records = read_metrics(run_dir)
    train = [r for r in records if r.get("event") == "train"]
    evals = [r for r in records if r.get("event") == "eval"]
    if not train and not evals:
        raise GptstackError(f"{run_dir}/metrics.jsonl has no training or eval records yet")
    starts = [r for r in records if r.get("event") == "start"]
    title = starts[-1]["config"]["name"] if starts else run_dir.name

    fig, (ax, ax_lr) = plt.subplots(
        2, 1, figsize=(8, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    if train:
        ax.plot(
            [r["step"] for r in train],
            [r["loss"] for r in train],
            lw=0.8,
            alpha=0.6,
            label="train (batch)",
        )
    if evals:
        ax.plot(
            [r["step"] for r in evals],
            [r["train_loss"] for r in evals],
            "o-",
            ms=3,
            label="train (eval)",
        )
        ax.plot([r["step"] for r in evals], [r["val_loss"] for r in evals], "o-", ms=3, label="val")
        best = min(evals, key=lambda r: r["val_loss"])
        ax.annotate(
            f"best val {best['val_loss']:.4f} @ {best['step']}",
            (best["step"], best["val_loss"]),
            textcoords="offset points",
            xytext=(0, 12),
            ha="center",
            fontsize=8,
        )
    ax.set_ylabel("loss (nats/token)")
    ax.set_title(f"{title}: loss")
    ax.grid(alpha=0.3)
    ax.legend()
    lr_points = train or evals
    ax_lr.plot([r["step"] for r in lr_points], [r["lr"] for r in lr_points], color="gray")
    ax_lr.set_ylabel("learning rate")
    ax_lr.set_xlabel("step")
    ax_lr.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(out) if out else run_dir / "loss.png"
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
    return out
