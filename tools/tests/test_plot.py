"""`gptstack plot`: one run's curves, and several runs drawn together."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gptstack.tools.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _fake_run(folder: Path, losses: list[float], val_every: int = 2) -> Path:
    """A run folder with metrics.jsonl as `gptstack train` writes it (start, train, eval)."""
    folder.mkdir(parents=True)
    records = [{"event": "start", "step": 0, "config": {"name": folder.name}}]
    for step, loss in enumerate(losses, 1):
        records.append({"event": "train", "step": step, "loss": loss, "lr": 1e-3})
        if step % val_every == 0:
            records.append(
                {
                    "event": "eval",
                    "step": step,
                    "train_loss": loss,
                    "val_loss": loss + 0.1,
                    "lr": 1e-3,
                }
            )
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def test_one_run_plots_into_its_folder(tmp_path, capsys):
    run = _fake_run(tmp_path / "a", [4.0, 3.5, 3.0, 2.8])
    assert main(["plot", str(run)]) == 0
    assert (run / "loss.png").read_bytes().startswith(PNG_MAGIC)
    assert str(run / "loss.png") in capsys.readouterr().out


def test_several_runs_are_drawn_on_one_plot_labelled_by_folder(tmp_path, monkeypatch):
    import matplotlib.axes

    labels: list[str] = []
    real_plot = matplotlib.axes.Axes.plot

    def recording_plot(self, *args, label=None, **kwargs):
        labels.append(label)
        return real_plot(self, *args, label=label, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", recording_plot)
    a = _fake_run(tmp_path / "x" / "bf16", [4.0, 3.5, 3.0, 2.8])
    b = _fake_run(tmp_path / "y" / "bf16", [4.1, 3.4, 3.1, 2.7])  # same name: parents shown
    out = tmp_path / "both.png"
    assert main(["plot", str(a), str(b), "-o", str(out)]) == 0
    assert out.read_bytes().startswith(PNG_MAGIC)
    assert labels == [
        "x/bf16 train (batch)",
        "x/bf16 val (best 2.9000)",
        "y/bf16 train (batch)",
        "y/bf16 val (best 2.8000)",
    ]


@pytest.mark.parametrize("with_out", [False, True])
def test_several_runs_need_an_output_file_and_real_runs(tmp_path, capsys, with_out):
    a = _fake_run(tmp_path / "a", [4.0, 3.5])
    missing = tmp_path / "missing"
    args = ["plot", str(a), str(missing)] + (["-o", str(tmp_path / "p.png")] if with_out else [])
    assert main(args) == 2
    err = capsys.readouterr().err
    assert ("metrics.jsonl" if with_out else "-o FILE.png") in err and "Traceback" not in err
    assert not (tmp_path / "p.png").exists()
