"""train.compile_ahead: the second process that compiles a distilled run's student while its
preset teacher trains (compile_ahead.py). Compiling needs CUDA; on a CPU these tests run the
same process without torch.compile, which checks everything but the cache it fills."""

import json

import torch

from gptstack.tools.compile_ahead import CompileAhead, compile_student
from gptstack.tools.config import apply_overrides, load_preset
from gptstack.tools.runtime import resolve_runtime
from gptstack.tools.teacher import teacher_stage
from gptstack.tools.train import FIRST_STEPS


def student_and_teacher(data, tmp_path, *extra):
    """The smoke preset distilled from a wider smoke preset, as teacher_stage builds it."""
    cfg = apply_overrides(
        load_preset("smoke"), [f"data.path={data}", "train.distill_from=preset:smoke", *extra]
    )
    teacher_cfg, _ = teacher_stage(cfg, tmp_path / "run")
    teacher_cfg.model.n_embd = 48  # a teacher of another shape than the student
    return cfg, teacher_cfg


def metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_the_second_process_runs_the_students_first_steps_on_a_stand_in_teacher(
    tmp_path, small_corpus
):
    cfg, teacher_cfg = student_and_teacher(small_corpus, tmp_path)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    spec = {"student": cfg.to_dict(), "teacher": teacher_cfg.to_dict(), "compile": "false"}
    (scratch / "spec.json").write_text(json.dumps(spec))
    compile_student(scratch)
    assert float((scratch / "seconds").read_text()) > 0  # what the run's log line reports
    stand_in = json.loads((scratch / "teacher" / "config.json").read_text())
    assert stand_in["model"]["n_embd"] == 48 and stand_in["step"] == 0
    records = metrics(scratch / "student")
    start = next(r for r in records if r["event"] == "start")
    # the student's own model and schedule, shortened, taught by the stand-in
    assert start["config"]["model"] == cfg.to_dict()["model"]
    assert start["config"]["train"]["distill_from"] == str(scratch / "teacher")
    assert start["max_steps"] == FIRST_STEPS
    assert [r["step"] for r in records if r["event"] == "eval"] == [0, FIRST_STEPS]
    assert any(r["event"] == "startup" for r in records)  # first steps done: compiled there


def test_a_launched_process_finishes_and_leaves_no_scratch_folder(tmp_path, small_corpus):
    cfg, teacher_cfg = student_and_teacher(small_corpus, tmp_path)
    ahead = CompileAhead.launch(cfg, teacher_cfg, None)
    assert ahead.scratch.is_dir()
    lines = []
    ahead.finish(lines.append)
    assert ahead.process.returncode == 0, (ahead.scratch / "log.txt").read_text()
    assert not ahead.scratch.exists()
    assert len(lines) == 1 and "compiled into the compile cache" in lines[0]


def test_a_failed_process_is_reported_with_its_log_and_the_run_goes_on(tmp_path, small_corpus):
    cfg, teacher_cfg = student_and_teacher(small_corpus, tmp_path)
    cfg.data.path = str(tmp_path / "no-such-file.txt")
    ahead = CompileAhead.launch(cfg, teacher_cfg, None)
    lines = []
    ahead.finish(lines.append)
    assert ahead.process.returncode != 0
    assert len(lines) == 1 and "failed" in lines[0] and "compiles now instead" in lines[0]
    log = ahead.scratch / "log.txt"
    assert str(log) in lines[0] and "no-such-file.txt" in log.read_text()


def test_a_stopped_teacher_ends_the_process_without_waiting(tmp_path, small_corpus):
    cfg, teacher_cfg = student_and_teacher(small_corpus, tmp_path, "train.max_steps=100000")
    ahead = CompileAhead.launch(cfg, teacher_cfg, None)
    lines = []
    ahead.finish(lines.append, wait=False)  # long before its import of torch is done
    assert ahead.process.returncode != 0 and lines == []
    assert not ahead.scratch.exists()


def test_it_starts_only_on_cuda_with_compile_in_one_process(tmp_path, small_corpus):
    cfg, teacher_cfg = student_and_teacher(small_corpus, tmp_path, "train.device=cpu")
    runtime = resolve_runtime(cfg.train)
    assert CompileAhead.start(cfg, teacher_cfg, runtime) is None  # a CPU
    if torch.cuda.is_available():  # the lent GPU machine: on by default, off when asked
        gpu = apply_overrides(cfg, ["train.device=cuda", "train.compile=regional"])
        runtime = resolve_runtime(gpu.train)
        assert CompileAhead.start(gpu, teacher_cfg, runtime, world_size=2) is None
        off = apply_overrides(gpu, ["train.compile_ahead=false"])
        assert CompileAhead.start(off, teacher_cfg, runtime) is None
        ahead = CompileAhead.start(gpu, teacher_cfg, runtime)
        assert ahead is not None
        ahead.finish(lambda _: None, wait=False)
