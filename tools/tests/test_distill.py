"""Knowledge distillation in `gptstack train` (train.distill_from) and the linear lr decay."""

import json

import pytest

from gptstack.tools.config import apply_overrides, load_preset
from gptstack.tools.errors import CheckpointError, ConfigError
from gptstack.tools.schedule import for_device, get_lr
from gptstack.tools.train import train


def smoke_cfg(data, *extra):
    return apply_overrides(load_preset("smoke"), [f"data.path={data}", *extra])


def train_losses(run_dir):
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in lines if r["event"] == "train"]


def val_losses(run_dir):
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["val_loss"] for r in lines if r["event"] == "eval"]


STEPS = ["train.max_steps=12", "train.eval_interval=6", "train.log_interval=1"]


@pytest.fixture
def teacher_run(tmp_path, small_corpus):
    run = tmp_path / "teacher"
    train(smoke_cfg(small_corpus, *STEPS), run, progress=False, log=lambda s: None)
    return run


def test_a_teacher_changes_the_training_and_weight_zero_does_not(
    tmp_path, small_corpus, teacher_run
):
    plain = tmp_path / "plain"
    train(smoke_cfg(small_corpus, *STEPS), plain, progress=False, log=lambda s: None)
    lines = []
    taught = tmp_path / "taught"
    cfg = smoke_cfg(small_corpus, *STEPS, f"train.distill_from={teacher_run}")
    train(cfg, taught, progress=False, log=lines.append)
    assert any("distilling from" in line and str(teacher_run) in line for line in lines)
    # same seed, same batches: only the teacher's soft targets differ
    assert val_losses(taught) != val_losses(plain)
    zero = tmp_path / "zero"
    cfg = smoke_cfg(
        small_corpus, *STEPS, f"train.distill_from={teacher_run}", "train.distill_weight=0"
    )
    train(cfg, zero, progress=False, log=lambda s: None)
    assert train_losses(zero) == pytest.approx(train_losses(plain), rel=1e-4)
    assert val_losses(zero) == pytest.approx(val_losses(plain), rel=1e-4)


def test_a_preset_teacher_is_trained_first_then_reused(tmp_path, small_corpus):
    run = tmp_path / "run"
    cfg = smoke_cfg(small_corpus, *STEPS, "train.distill_from=preset:smoke")
    lines = []
    result = train(cfg, run, progress=False, log=lines.append)
    teacher = run / "teacher"
    assert (teacher / "best" / "config.json").is_file() and (teacher / "summary.json").is_file()
    assert any("training preset smoke" in line for line in lines)
    assert any(f"distilling from {teacher}/best" in line for line in lines)
    # the teacher trains on the student's data: its run config says so
    meta = json.loads((teacher / "last" / "config.json").read_text())
    assert meta["run"]["data"]["path"] == str(small_corpus)
    assert result.step == 12
    startup = [
        json.loads(line)
        for line in (run / "metrics.jsonl").read_text().splitlines()
        if '"startup"' in line
    ]
    assert startup[0]["teacher_s"] > 0
    # a longer schedule, resumed: the finished teacher is reused, not trained again
    stamp = (teacher / "best" / "model.safetensors").stat().st_mtime_ns
    longer = smoke_cfg(small_corpus, *STEPS, "train.distill_from=preset:smoke")
    longer.train.max_steps = 18
    lines.clear()
    train(longer, run, resume=run, progress=False, log=lines.append)
    assert any("the finished run of preset smoke" in line for line in lines)
    assert (teacher / "best" / "model.safetensors").stat().st_mtime_ns == stamp
    # --overwrite starts over, the teacher too
    lines.clear()
    train(cfg, run, overwrite=True, progress=False, log=lines.append)
    assert any("training preset smoke" in line for line in lines)


def test_an_interrupted_teacher_is_resumed_by_the_next_run(tmp_path, small_corpus):
    run = tmp_path / "run"
    cfg = smoke_cfg(small_corpus, *STEPS, "train.distill_from=preset:smoke")
    # stop the teacher half-way, as a Ctrl-C would (train's stop_at reaches the teacher through
    # its own run: here, train the teacher stage alone with stop_at)
    from gptstack.tools.teacher import teacher_stage

    teacher_cfg, teacher_dir = teacher_stage(cfg, run)
    train(teacher_cfg, teacher_dir, stop_at=3, progress=False, log=lambda s: None)
    lines = []
    train(cfg, run, progress=False, log=lines.append)
    assert any("resuming preset smoke" in line for line in lines)
    meta = json.loads((teacher_dir / "last" / "config.json").read_text())
    assert meta["step"] == teacher_cfg.train.max_steps


def test_no_teacher_on_a_cpu_when_cpu_distill_is_false(tmp_path, small_corpus):
    cfg = smoke_cfg(
        small_corpus, *STEPS, "train.distill_from=preset:smoke", "train.cpu_distill=false"
    )
    assert for_device(cfg.train, "cpu").distill_from == ""
    assert for_device(cfg.train, "cuda").distill_from == "preset:smoke"
    lines = []
    train(cfg, tmp_path / "run", progress=False, log=lines.append)
    assert not (tmp_path / "run" / "teacher").exists()
    assert not any("distill" in line or "teacher" in line for line in lines)


def test_the_esp32_preset_learns_from_its_teacher_on_a_gpu_only():
    esp = load_preset("esp32")
    assert esp.train.distill_from == "preset:esp32-teacher"
    assert for_device(esp.train, "cpu").distill_from == ""
    teacher = load_preset("esp32-teacher")
    assert teacher.train.distill_from == ""
    assert (teacher.tokenizer, teacher.model.block_size) == (esp.tokenizer, esp.model.block_size)


def test_bad_teachers_are_clear_errors(tmp_path, small_corpus, teacher_run):
    def run(*extra):
        cfg = smoke_cfg(small_corpus, *STEPS, *extra)
        train(cfg, tmp_path / "student", progress=False, log=lambda s: None)

    with pytest.raises(CheckpointError, match="does not exist"):
        run(f"train.distill_from={tmp_path / 'nowhere'}")
    with pytest.raises(ConfigError, match="tokenizer"):
        run(f"train.distill_from={teacher_run}", "tokenizer.kind=bpe", "tokenizer.vocab_size=300")
    with pytest.raises(ConfigError, match="context"):
        run(f"train.distill_from={teacher_run}", "model.block_size=64")
    with pytest.raises(ConfigError, match="unknown preset"):
        run("train.distill_from=preset:no-such-preset")
    with pytest.raises(ConfigError, match="chain of teachers"):
        run("train.distill_from=preset:esp32")
    # a preset teacher too short for the run is refused before it trains
    with pytest.raises(ConfigError, match="context is 64 tokens"):
        run("train.distill_from=preset:esp32-teacher", "model.block_size=128")
    assert not (tmp_path / "student").exists()  # nothing was trained


@pytest.mark.parametrize(
    ("setting", "match"),
    [("train.distill_weight=1.5", "distill_weight"), ("train.distill_temperature=0", "temper")],
)
def test_bad_distillation_settings_are_refused(small_corpus, setting, match):
    with pytest.raises(ConfigError, match=match):
        smoke_cfg(small_corpus, setting)


def test_linear_decay_falls_in_a_straight_line_to_min_lr(small_corpus):
    cfg = smoke_cfg(
        small_corpus,
        "train.lr_decay=linear",
        "train.lr=1e-3",
        "train.min_lr=1e-4",
        "train.warmup_steps=10",
        "train.max_steps=110",
    )
    t = cfg.train
    lrs = [get_lr(step, t, 110) for step in range(10, 111)]
    assert lrs[0] == pytest.approx(1e-3) and lrs[-1] == pytest.approx(1e-4)
    steps = [b - a for a, b in zip(lrs, lrs[1:], strict=False)]
    assert all(s == pytest.approx(-9e-6) for s in steps)  # (1e-3 - 1e-4) / 100 a step
    cosine = smoke_cfg(small_corpus, "train.warmup_steps=10", "train.max_steps=110").train
    assert get_lr(35, cosine, 110) > get_lr(35, t, 110)  # cosine stays high longer
    with pytest.raises(ConfigError, match="lr_decay"):
        smoke_cfg(small_corpus, "train.lr_decay=step")


def test_a_stop_while_the_teacher_trains_reports_the_teacher_and_resumes_it(
    tmp_path, small_corpus, monkeypatch, capsys
):
    """Ctrl-C during the teacher's run: the command reports the teacher's checkpoint (the
    student has none yet) and exits 130; the same command again resumes the teacher."""
    from gptstack.tools import train as train_module
    from gptstack.tools.cli import main

    real = train_module._train_teacher

    def stopped_early(cfg, teacher_cfg, teacher_dir, runtime, overwrite, progress, log, world):
        # the teacher's own run, stopped after 3 steps as a Ctrl-C would stop it
        return train_module.train(
            teacher_cfg, teacher_dir, stop_at=3, progress=False, log=log, world=world
        )

    run = tmp_path / "run"
    argv = ["train", "--preset", "smoke", "--out", str(run), "--no-progress"]
    argv += ["--set", f"data.path={small_corpus}", "--set", "train.distill_from=preset:smoke"]
    monkeypatch.setattr(train_module, "_train_teacher", stopped_early)
    assert main(argv) == 130
    out = capsys.readouterr().out
    assert "stopped while training the teacher" in out
    assert f"{run / 'teacher' / 'best'}" in out and "stopped at step 3/" in out
    assert not (run / "best").exists()
    monkeypatch.setattr(train_module, "_train_teacher", real)
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "resuming preset smoke" in out and f"-> {run / 'best'}" in out
