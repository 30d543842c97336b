"""CheckpointWriter: writes in order on one thread, failures re-raised, snapshots independent of
the live tensors; and a training run whose checkpoints go through the background thread (as on
a GPU) resumes exactly as one that writes them inline."""

from __future__ import annotations

import json
import threading
import time

import pytest
import torch

from gptstack.tools import train as train_mod
from gptstack.tools.checkpoint import load_checkpoint
from gptstack.tools.checkpoint_writer import CheckpointWriter, cpu_snapshot
from gptstack.tools.config import apply_overrides, load_preset
from gptstack.tools.train import train


def test_background_writes_run_in_order_off_the_callers_thread():
    writer = CheckpointWriter(background=True)
    done, threads = [], set()

    def write(i):
        time.sleep(0.01 * (3 - i))  # the first is the slowest: order must still hold
        threads.add(threading.current_thread().name)
        done.append(i)

    for i in range(3):
        writer.submit(write, i)
    writer.close()
    assert done == [0, 1, 2]
    assert threading.current_thread().name not in threads and len(threads) == 1


def test_a_failed_write_is_raised_by_the_next_drain_after_the_others_finish():
    writer = CheckpointWriter(background=True)
    done = []

    def fail():
        raise OSError("disk full")

    writer.submit(fail)
    writer.submit(done.append, "after")
    with pytest.raises(OSError, match="disk full"):
        writer.drain()
    assert done == ["after"]
    writer.drain()  # reported once
    writer.close()


def test_inline_writer_writes_at_once_and_raises_at_once():
    writer = CheckpointWriter(background=False)
    done = []
    writer.submit(done.append, 1)
    assert done == [1]
    with pytest.raises(ValueError, match="bad"):
        writer.submit(lambda: (_ for _ in ()).throw(ValueError("bad")))
    writer.close()


def test_snapshot_copies_every_tensor_and_keeps_the_structure():
    live = torch.randn(4)
    state = {"a": live, "b": [live, (live, 3)], "c": "text", "d": {"e": torch.tensor(2.0)}}
    snap = cpu_snapshot(state)
    live.add_(1.0)
    assert not torch.equal(snap["a"], live) and torch.equal(snap["a"] + 1.0, live)
    assert isinstance(snap["b"][1], tuple) and snap["b"][1][1] == 3 and snap["c"] == "text"
    assert snap["d"]["e"].item() == 2.0


@pytest.fixture
def background_writes(monkeypatch):
    """Training on the CPU with the GPU's background writes."""
    monkeypatch.setattr(
        train_mod, "CheckpointWriter", lambda background: CheckpointWriter(background=True)
    )


def test_a_run_with_background_writes_resumes_exactly(tmp_path, small_corpus, background_writes):
    extra = [
        f"data.path={small_corpus}",
        "train.max_steps=24",
        "train.log_interval=1",
        "train.eval_interval=6",
        "model.dropout=0.1",
        "train.ema_decay=0.9",
        "train.device=cpu",
    ]
    cfg = apply_overrides(load_preset("smoke"), extra)
    full, staged = tmp_path / "full", tmp_path / "staged"
    train(cfg, full, progress=False, log=lambda s: None)
    train(cfg, staged, stop_at=13, progress=False, log=lambda s: None)
    assert json.loads((staged / "last" / "config.json").read_text())["step"] == 13
    train(cfg, staged, resume=staged, progress=False, log=lambda s: None)
    for name in ("last", "best"):
        wa = load_checkpoint(full / name).model.state_dict()
        wb = load_checkpoint(staged / name).model.state_dict()
        assert all(torch.equal(wa[k], wb[k]) for k in wa), name
    evals = [
        json.loads(line)
        for line in (full / "metrics.jsonl").read_text().splitlines()
        if '"eval"' in line
    ]
    best = json.loads((full / "best" / "config.json").read_text())
    assert best["val_loss"] == min(e["val_loss"] for e in evals)
    assert not [p.name for p in full.iterdir() if p.name.startswith(".")]  # no temporaries left
