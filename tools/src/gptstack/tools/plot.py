"""`gptstack plot RUN_DIR`: train/val loss and learning rate against steps, as a PNG.

`gptstack plot RUN_A RUN_B ... -o FILE.png` draws several runs on one set of axes instead (each
run's batch losses and validation points in its own colour, labelled by its folder's name): how
a faster configuration is shown to learn the same curve.
"""

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


def _pyplot():
    """matplotlib.pyplot on the file-only backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _curves(run_dir: Path) -> tuple[list[dict], list[dict], list[dict]]:
    """A run's metrics records and its train and eval records; GptstackError if it has
    neither yet."""
    records = read_metrics(run_dir)
    train = [r for r in records if r.get("event") == "train"]
    evals = [r for r in records if r.get("event") == "eval"]
    if not train and not evals:
        raise GptstackError(f"{run_dir}/metrics.jsonl has no training or eval records yet")
    return records, train, evals


def _save(fig, out: Path) -> Path:
    """The figure as a PNG at `out`, written through a temporary file; closed after."""
    fig.tight_layout()
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    _pyplot().close(fig)
    return out


def plot_run(run_dir: Path, out: Path | None = None) -> Path:
    """Write RUN_DIR/loss.png (or `out`) and return its path."""
    plt = _pyplot()
    run_dir = Path(run_dir)
    records, train, evals = _curves(run_dir)
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
    return _save(fig, Path(out) if out else run_dir / "loss.png")


def plot_runs(run_dirs: list[Path], out: Path) -> Path:
    """Write one PNG (`out`) with every run's training and validation losses against steps."""
    plt = _pyplot()
    names = [Path(d).resolve().name for d in run_dirs]
    if len(set(names)) != len(names):  # runs/a/x and runs/b/x: keep the parent in the label
        names = [f"{Path(d).resolve().parent.name}/{Path(d).resolve().name}" for d in run_dirs]
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, (run_dir, name) in enumerate(zip(run_dirs, names, strict=True)):
        _, train, evals = _curves(Path(run_dir))
        colour = f"C{i % 10}"
        if train:
            steps, losses = [r["step"] for r in train], [r["loss"] for r in train]
            ax.plot(steps, losses, lw=0.8, alpha=0.7, color=colour, label=f"{name} train (batch)")
        if evals:
            best = min(r["val_loss"] for r in evals)
            ax.plot(
                [r["step"] for r in evals],
                [r["val_loss"] for r in evals],
                "o--",
                ms=4,
                color=colour,
                label=f"{name} val (best {best:.4f})",
            )
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title("loss curves, " + " vs ".join(names))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, Path(out))
