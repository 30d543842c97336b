"""CheckpointWriter: writes in order on one thread, failures re-raised, snapshots independent of
the live tensors; and a training run whose checkpoints go through the background thread (as on
a GPU) writes exactly the checkpoints of one that writes them inline."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from gptstack.tools import train as train_mod
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


def test_drain_keep_waits_for_all_but_the_newest_and_reports_finished_failures():
    writer = CheckpointWriter(background=True)
    release, done = threading.Event(), []

    def fail():
        raise OSError("disk full")

    writer.submit(done.append, 0)
    writer.submit(fail)
    writer.submit(release.wait)  # the newest: still going while drain(keep=1) returns
    with pytest.raises(OSError, match="disk full"):
        writer.drain(keep=1)
    assert done == [0]
    writer.drain(keep=1)  # the failure was reported once; the newest still runs
    assert not release.is_set()
    release.set()
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


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_snapshot_of_gpu_tensors_is_a_finished_pinned_copy():
    g = torch.Generator(device="cuda").manual_seed(0)
    live = [torch.randn(n, generator=g, device="cuda") for n in (1, 7, 1 << 24)]
    live.append(torch.randn(64, 48, generator=g, device="cuda").to(torch.bfloat16).t())
    want = [t.cpu() for t in live]
    snap = cpu_snapshot({"w": live})["w"]
    # read at once, no synchronisation here: the 64 MB copy must already be complete
    for s, w in zip(snap, want, strict=True):
        assert s.device.type == "cpu" and s.is_pinned() and s.dtype == w.dtype
        assert torch.equal(s, w)
    for t in live:
        t.add_(1.0)
    torch.cuda.synchronize()
    assert all(torch.equal(s, w) for s, w in zip(snap, want, strict=True))


@pytest.mark.parametrize("ema_decay", [0.0, 0.9])
def test_background_writes_equal_inline_writes(tmp_path, small_corpus, monkeypatch, ema_decay):
    """The background path (a GPU run's) writes, byte for byte, the checkpoints the inline path
    writes: the CPU snapshot is taken at the evaluation, not read later from live tensors."""
    cfg = apply_overrides(
        load_preset("smoke"),
        [
            f"data.path={small_corpus}",
            "train.max_steps=24",
            "train.eval_interval=6",
            "model.dropout=0.1",
            f"train.ema_decay={ema_decay}",
            "train.device=cpu",
        ],
    )
    inline, background = tmp_path / "inline", tmp_path / "background"
    train(cfg, inline, progress=False, log=lambda s: None)
    monkeypatch.setattr(train_mod, "CheckpointWriter", lambda background: CheckpointWriter(True))
    train(cfg, background, progress=False, log=lambda s: None)
    for name in ("best", "last"):
        for f in sorted((inline / name).iterdir()):
            if f.name == "train_state.pt":  # elapsed_s differs; every tensor must not
                a, b = (
                    torch.load(r / name / f.name, weights_only=True) for r in (inline, background)
                )
                a.pop("elapsed_s"), b.pop("elapsed_s")
                assert _equal(a, b), name
            else:
                assert f.read_bytes() == (background / name / f.name).read_bytes(), f
    assert not [p.name for p in background.iterdir() if p.name.startswith(".")]  # no temporaries


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a == b
