import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from gptstack.tools import checkpoint as ckpt_mod
from gptstack.tools.checkpoint import load_checkpoint, resolve_checkpoint, save_checkpoint
from gptstack.tools.checkpoint_writer import CheckpointWriter
from gptstack.tools.config import apply_overrides, load_preset
from gptstack.tools.train import train


def smoke_cfg(data, *extra):
    return apply_overrides(load_preset("smoke"), [f"data.path={data}", *extra])


def train_losses(run_dir):
    lines = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in lines if r["event"] == "train"}


def test_smoke_run_writes_checkpoints_metrics_and_learns(tmp_path, small_corpus):
    cfg = smoke_cfg(
        small_corpus, "train.max_steps=60", "train.eval_interval=20", "train.log_interval=1"
    )
    result = train(cfg, tmp_path / "run", progress=False, log=lambda s: None)
    run = tmp_path / "run"
    assert result.step == 60 and not result.interrupted
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        assert (run / "best" / name).is_file() and (run / "last" / name).is_file()
    assert (run / "last" / "train_state.pt").is_file()
    losses = train_losses(run)
    assert losses[60] < losses[1] - 0.5  # it learns something in 60 steps
    evals = [
        json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines() if '"eval"' in l
    ]
    assert [e["step"] for e in evals] == [0, 20, 40, 60]
    assert result.best_val_loss == min(e["val_loss"] for e in evals)
    meta = json.loads((run / "best" / "config.json").read_text())
    assert meta["val_loss"] == result.best_val_loss and meta["format"] == "gptstack-checkpoint"
    # bits/char = loss in bits * tokens / chars; for a char tokenizer tokens == chars
    assert meta["val_bpc"] == pytest.approx(meta["val_loss"] / torch.log(torch.tensor(2.0)).item())
    from gptstack.tools.summary import write_run_summary

    _, summary = write_run_summary(run)
    # from process start (this pytest process: it started before train() did)
    assert summary["process_wall_s"] > summary["wall_time_s"] > 0
    assert summary["peak_memory_bytes"] is None  # a CPU run: no GPU memory to report
    # the loop's time in evaluations and checkpoint writes, each recorded per evaluation
    assert all(e["eval_s"] > 0 and e["checkpoint_s"] > 0 for e in evals)
    assert summary["eval_s_total"] == pytest.approx(sum(e["eval_s"] for e in evals))
    assert 0 < summary["eval_s_total"] + summary["checkpoint_s_total"] < summary["wall_time_s"]


@pytest.mark.parametrize("ema_decay", [0.0, 0.9])
def test_resume_is_bit_identical_to_an_uninterrupted_run(tmp_path, small_corpus, ema_decay):
    # dropout > 0 so the RNG state must be restored too; eval_interval doesn't divide the stop step;
    # with train.ema_decay the weight average (train_state.pt) must continue exactly as well
    extra = [
        "train.max_steps=24",
        "train.log_interval=1",
        "train.eval_interval=10",
        "model.dropout=0.1",
        f"train.ema_decay={ema_decay}",
    ]
    full = tmp_path / "full"
    train(smoke_cfg(small_corpus, *extra), full, progress=False, log=lambda s: None)
    staged = tmp_path / "staged"
    first = train(
        smoke_cfg(small_corpus, *extra), staged, stop_at=13, progress=False, log=lambda s: None
    )
    assert first.interrupted and first.step == 13
    assert json.loads((staged / "last" / "config.json").read_text())["step"] == 13
    second = train(
        smoke_cfg(small_corpus, *extra), staged, resume=staged, progress=False, log=lambda s: None
    )
    assert second.step == 24 and not second.interrupted
    a, b = train_losses(full), train_losses(staged)
    assert [a[s] for s in range(14, 25)] == [b[s] for s in range(14, 25)]  # exact, not approx
    wa = load_checkpoint(full / "last").model.state_dict()
    wb = load_checkpoint(staged / "last").model.state_dict()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    if ema_decay:
        sa, sb = (
            torch.load(r / "last" / "train_state.pt", weights_only=True) for r in (full, staged)
        )
        assert sb["weight_average"]["updates"] == 24
        pairs = zip(sa["weight_average"]["average"], sb["weight_average"]["average"], strict=True)
        assert all(torch.equal(x, y) for x, y in pairs)


def test_a_failed_checkpoint_write_leaves_the_previous_one_loadable(
    tmp_path, small_corpus, monkeypatch
):
    train(
        smoke_cfg(small_corpus, "train.max_steps=10"),
        tmp_path / "run",
        progress=False,
        log=lambda s: None,
    )
    last = tmp_path / "run" / "last"
    before = load_checkpoint(last)
    ref = {k: v.clone() for k, v in before.model.state_dict().items()}

    def crash(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(ckpt_mod, "save_safetensors", crash)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(last, model=before.model, tokenizer=before.tokenizer, meta=before.meta)
    after = load_checkpoint(last)
    assert all(torch.equal(ref[k], v) for k, v in after.model.state_dict().items())
    assert sorted(p.name for p in (tmp_path / "run").iterdir() if p.name.startswith(".")) == []


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_checkpoint_files_follow_the_umask(tmp_path, small_corpus, umask):
    train(
        smoke_cfg(small_corpus, "train.max_steps=2"),
        tmp_path / "run",
        progress=False,
        log=lambda s: None,
    )
    ckpt = load_checkpoint(tmp_path / "run" / "last")
    previous = os.umask(umask)
    try:
        out = save_checkpoint(
            tmp_path / "copy",
            model=ckpt.model,
            tokenizer=ckpt.tokenizer,
            meta=ckpt.meta,
            train_state={"step": 2},
        )
    finally:
        os.umask(previous)
    assert out.stat().st_mode & 0o777 == 0o777 & ~umask
    modes = {p.name: p.stat().st_mode & 0o777 for p in out.iterdir()}
    assert set(modes) == {"config.json", "model.safetensors", "tokenizer.json", "train_state.pt"}
    assert set(modes.values()) == {0o666 & ~umask}


def test_a_crash_between_the_two_renames_is_recovered(tmp_path, small_corpus):
    train(
        smoke_cfg(small_corpus, "train.max_steps=5"),
        tmp_path / "run",
        progress=False,
        log=lambda s: None,
    )
    run = tmp_path / "run"
    os.rename(
        run / "last", run / ".last.old"
    )  # as if the process died right after the first rename
    assert resolve_checkpoint(run, prefer="last") == run / ".last.old"
    load_checkpoint(run / ".last.old")


@pytest.mark.slow
def test_ctrl_c_saves_and_exits_cleanly(tmp_path, small_corpus):
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gptstack.tools.cli",
            "train",
            "--preset",
            "smoke",
            "--data",
            str(small_corpus),
            "--out",
            str(run),
            "--set",
            "train.max_steps=100000",
            "--set",
            "train.log_interval=1",
            "--no-progress",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    # Wait for the first logged step: a Ctrl-C before it rightly saves nothing. The "start"
    # record's config has a "train" key too, so match the event itself.
    metrics, trained = run / "metrics.jsonl", False
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        trained = metrics.is_file() and '"event": "train"' in metrics.read_text()
        if trained:
            break
        time.sleep(0.2)
    if not trained:
        proc.kill()
        pytest.fail(f"no training step was logged in 600 s:\n{proc.communicate()[0]}")
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, out
    assert "Traceback" not in out
    assert (run / "last" / "config.json").is_file(), out
    step = json.loads((run / "last" / "config.json").read_text())["step"]
    assert 0 < step < 100000
    assert f"--resume {run}" in out


@pytest.mark.parametrize("checkpoint_interval", [0, 100])
def test_early_stop_after_n_evaluations_without_a_better_val(
    tmp_path, small_corpus, monkeypatch, checkpoint_interval
):
    """Val losses 3.0, 2.0, 2.5, 2.4, 2.6 ...: with early_stop_evals=3 the run stops at the
    evaluation that is the third in a row without beating 2.0, and best/ holds that 2.0 step;
    last/ holds the stop's step also when train.checkpoint_interval would not have written it."""
    import gptstack.tools.train as train_mod

    scripted = iter([3.0, 2.0, 2.5, 2.4, 2.6, 1.0, 1.0])

    def fake_estimate(self, **kwargs):
        val = next(scripted)
        return {"train": val, "val": val}

    monkeypatch.setattr(train_mod.LossEstimator, "__call__", fake_estimate)
    cfg = smoke_cfg(
        small_corpus,
        "train.max_steps=60",
        "train.eval_interval=5",
        "train.early_stop_evals=3",
        f"train.checkpoint_interval={checkpoint_interval}",
    )
    result = train(cfg, tmp_path / "run", progress=False, log=lambda s: None)
    assert result.early_stopped and not result.interrupted
    assert result.step == 20 and result.best_val_loss == 2.0  # evaluations at 0, 5, 10, 15, 20
    best = json.loads((tmp_path / "run" / "best" / "config.json").read_text())
    last = json.loads((tmp_path / "run" / "last" / "config.json").read_text())
    assert (best["step"], last["step"]) == (5, 20)
    end = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert end["event"] == "end" and end["early_stopped"] is True
    with pytest.raises(Exception, match="early_stop_evals must be >= 0"):
        smoke_cfg(small_corpus, "train.early_stop_evals=-1")


def test_cpu_dropout_replaces_the_models_dropout_on_a_cpu(tmp_path, small_corpus):
    from gptstack.tools.schedule import dropout_for_device

    cfg = smoke_cfg(
        small_corpus,
        "model.dropout=0.3",
        "train.cpu_dropout=0.0",
        "train.max_steps=4",
        "train.eval_interval=2",
        "train.device=cpu",
    )
    assert dropout_for_device(cfg.train, 0.3, "cuda") == 0.3
    assert dropout_for_device(cfg.train, 0.3, "cpu") == 0.0
    lines = []
    train(cfg, tmp_path / "run", progress=False, log=lines.append)
    assert any("dropout 0 on CPU" in line for line in lines), lines
    # the checkpoint records the model as trained; with cpu_dropout unset the model's own
    meta = json.loads((tmp_path / "run" / "best" / "config.json").read_text())
    assert meta["model"]["dropout"] == 0.0
    unset = smoke_cfg(small_corpus, "model.dropout=0.3", "train.max_steps=2", "train.device=cpu")
    train(unset, tmp_path / "run2", progress=False, log=lambda s: None)
    meta = json.loads((tmp_path / "run2" / "best" / "config.json").read_text())
    assert meta["model"]["dropout"] == 0.3


def test_cpu_bf16_kernels_replace_the_models_on_a_bf16_cpu(tmp_path, small_corpus, monkeypatch):
    """train.cpu_bf16_ops / cpu_bf16_attention: the model's ops and attention on a CPU in bf16
    (a "gptstack" one where gptstack.cuda_ops runs its AVX2 path); the model section's
    everywhere else."""
    pytest.importorskip("gptstack.cuda_ops")
    from gptstack.tools import train as train_mod

    cfg = smoke_cfg(
        small_corpus,
        "train.cpu_bf16_ops=gptstack",
        "train.cpu_bf16_attention=manual",
        "train.max_steps=2",
        "train.eval_interval=2",
        "train.device=cpu",
        "train.dtype=bf16",
        "model.residual=bf16",  # the native LayerNorm on a bf16 stream too
    )

    def kernels(device_type, dtype, cpu_path="avx2_fma", run=cfg):
        monkeypatch.setattr(train_mod, "_cuda_ops_cpu_path", lambda: cpu_path)
        mcfg = train_mod.run_model_config(run, 512, device_type, dtype)
        return mcfg.ops, mcfg.attention

    own = ("torch", "sdpa")
    assert kernels("cpu", "bf16") == ("gptstack", "manual")
    assert kernels("cpu", "fp32") == own  # the overrides are for bf16 runs
    assert kernels("cuda", "bf16") == own
    assert kernels("cpu", "bf16", cpu_path="scalar") == ("torch", "manual")  # e.g. arm64
    assert kernels("cpu", "bf16", cpu_path=None) == ("torch", "manual")  # no gptstack.cuda_ops
    native = smoke_cfg(
        small_corpus, "train.cpu_bf16_ops=gptstack", "train.cpu_bf16_attention=gptstack"
    )
    assert kernels("cpu", "bf16", run=native) == ("gptstack", "gptstack")
    assert kernels("cpu", "bf16", cpu_path="scalar", run=native) == own
    assert kernels("cpu", "bf16", run=smoke_cfg(small_corpus, "train.device=cpu")) == own
    # a run: its first line names the kernels, its checkpoint records the model as trained
    monkeypatch.setattr(train_mod, "_cuda_ops_cpu_path", lambda: "avx2_fma")
    lines = []
    train(cfg, tmp_path / "run", progress=False, log=lines.append)
    assert "kernels: ops gptstack, attention manual, residual stream bf16 on CPU" in lines[0]
    meta = json.loads((tmp_path / "run" / "best" / "config.json").read_text())
    assert (meta["model"]["ops"], meta["model"]["attention"]) == ("gptstack", "manual")
    assert meta["model"]["residual"] == "bf16"
    with pytest.raises(Exception, match="cpu_bf16_attention"):
        smoke_cfg(small_corpus, "train.cpu_bf16_attention=fast")


def test_cuda_ops_replace_the_models_on_a_gpu_where_its_kernels_run(small_corpus, monkeypatch):
    """train.cuda_ops: the model's ops on a CUDA GPU where gptstack.cuda_ops has CUDA kernels
    for it (the gpt2-124m preset's native loss); model.ops on a CPU, and on a GPU without them,
    whatever the reason, which the run logs."""
    from gptstack.tools import train as train_mod

    cfg = smoke_cfg(small_corpus, "train.cuda_ops=gptstack:loss")

    def ops(device_type, dtype="bf16", unavailable=None):
        monkeypatch.setattr(train_mod, "cuda_kernels_unavailable", lambda: unavailable)
        return train_mod.run_model_config(cfg, 512, device_type, dtype).ops

    assert ops("cuda") == "gptstack:loss"
    assert ops("cuda", unavailable="built without CUDA kernels") == "torch"
    assert ops("cpu") == ops("cpu", "fp32") == "torch"  # a CPU has its own overrides
    assert train_mod.run_model_config(smoke_cfg(small_corpus), 512, "cuda").ops == "torch"
    # model.fp8 computes the head: the native loss would replace it, so it is not applied
    fp8 = smoke_cfg(small_corpus, "train.cuda_ops=gptstack:loss", "model.fp8=head")
    assert train_mod.run_model_config(fp8, 512, "cuda").ops == "torch"
    why = train_mod.cuda_ops_skipped(fp8.train, train_mod.model_config(fp8, 512))
    assert "model.fp8='head'" in why
    assert train_mod.cuda_ops_skipped(cfg.train, train_mod.model_config(cfg, 512)) is None
    # model.fp8="all" computes the MLP's matmuls: the native MLP is not applied either
    fp8_all = smoke_cfg(small_corpus, "train.cuda_ops=gptstack:mlp", "model.fp8=all")
    assert train_mod.run_model_config(fp8_all, 512, "cuda").ops == "torch"
    why = train_mod.cuda_ops_skipped(fp8_all.train, train_mod.model_config(fp8_all, 512))
    assert "model.fp8='all'" in why


def test_cuda_ops_are_not_looked_at_on_a_cpu(tmp_path, small_corpus, monkeypatch):
    """gpt2-124m sets train.cuda_ops: a CPU run never asks the GPU about it (on a machine
    without one, torch.cuda.get_device_capability raises)."""
    from gptstack.tools import train as train_mod

    def no_gpu():
        raise RuntimeError("Found no NVIDIA driver on your system")

    monkeypatch.setattr(torch.cuda, "get_device_capability", no_gpu)
    lines = []
    cfg = smoke_cfg(
        small_corpus, "train.cuda_ops=gptstack:loss", "train.max_steps=2", "train.device=cpu"
    )
    train_mod.train(cfg, tmp_path / "run", progress=False, log=lines.append)
    assert not any("cuda_ops" in line for line in lines)


def test_ema_run_evaluates_and_saves_the_average(tmp_path, small_corpus):
    """train.ema_decay: best/ holds the average (its recorded val loss is the average's), last/
    the weights themselves, with the average in train_state.pt (resume: the test above)."""
    extra = [
        "train.max_steps=24",
        "train.log_interval=1",
        "train.eval_interval=8",
        "train.ema_decay=0.9",
        "train.device=cpu",
    ]
    full = tmp_path / "full"
    train(smoke_cfg(small_corpus, *extra), full, progress=False, log=lambda s: None)
    state = torch.load(full / "last" / "train_state.pt", weights_only=True)
    average = state["weight_average"]
    assert average["updates"] == 24 and average["decay"] == 0.9
    last = load_checkpoint(full / "last").model
    params = [p for p in last.parameters() if p.requires_grad]
    assert len(params) == len(average["average"])
    assert any(not torch.equal(p, a) for p, a in zip(params, average["average"]))
    # the smoke run still improves at its last evaluation: best/ is the average of step 24
    assert json.loads((full / "best" / "config.json").read_text())["step"] == 24
    best = load_checkpoint(full / "best").model
    best_params = [p for p in best.parameters() if p.requires_grad]
    assert all(torch.equal(p, a) for p, a in zip(best_params, average["average"]))
    assert json.loads((full / "last" / "config.json").read_text())["val_loss"] is None
    with pytest.raises(Exception, match=r"ema_decay must be in \[0, 1\)"):
        smoke_cfg(small_corpus, "train.ema_decay=1.0")
    with pytest.raises(Exception, match="not supported with train.parallel=fsdp"):
        smoke_cfg(small_corpus, "train.ema_decay=0.9", "train.parallel=fsdp")


def test_checkpoint_interval_writes_last_at_the_first_evaluation_that_far_and_at_the_end(
    tmp_path, small_corpus, monkeypatch
):
    """Evaluations every 4 steps, last/ every 9 steps, 26 steps: last/ at steps 12 and 24 (the
    first evaluations 9 steps past the previous last/) and 26 (the end); best/ at every better
    evaluation as before; with interval 0, last/ at every evaluation."""
    import gptstack.tools.train as train_mod

    written: dict[int, list] = {}

    class Recording(CheckpointWriter):  # the background path, noting (folder, step) per write
        def __init__(self, calls: list) -> None:
            super().__init__(background=True)
            self.calls = calls

        def submit(self, write, path, /, *args, **kwargs):
            self.calls.append((path.name, kwargs["meta"]["step"]))
            super().submit(write, path, *args, **kwargs)

    for interval in (9, 0):
        calls = written.setdefault(interval, [])
        monkeypatch.setattr(train_mod, "CheckpointWriter", lambda background: Recording(calls))
        cfg = smoke_cfg(
            small_corpus,
            "train.max_steps=26",
            "train.eval_interval=4",
            f"train.checkpoint_interval={interval}",
        )
        train(cfg, tmp_path / f"run{interval}", progress=False, log=lambda s: None)
    evals = [0, 4, 8, 12, 16, 20, 24, 26]
    assert [s for name, s in written[9] if name == "last"] == [12, 24, 26]
    assert [s for name, s in written[0] if name == "last"] == evals
    best = [[s for name, s in written[i] if name == "best"] for i in (9, 0)]
    assert best[0] == best[1] and best[0][0] == 0  # the same losses: the same best/ writes
    last = json.loads((tmp_path / "run9" / "last" / "config.json").read_text())
    assert last["step"] == 26
    with pytest.raises(Exception, match="checkpoint_interval must be >= 0"):
        train(
            smoke_cfg(small_corpus, "train.checkpoint_interval=-1"),
            tmp_path / "bad",
            progress=False,
            log=lambda s: None,
        )
