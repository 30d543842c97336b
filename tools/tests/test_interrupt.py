"""Ctrl-C is honoured everywhere: during training steps, inside an evaluation, while sampling and
evaluating, and in the pipeline, which then says how to resume. Each test runs the real command
in a subprocess and sends SIGINT once it is working."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}
DEADLINE_S = 300  # start-up (torch import) on a loaded 2-core machine, not the reaction time


def _sigint_default() -> None:
    # a command started from a terminal has SIGINT at its default; a test runner launched as a
    # background job without job control (`cmd &` in a script) has it ignored, its children
    # inherit that, and Python then raises no KeyboardInterrupt: restore what a user has
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def gptstack(*args, cwd):
    return subprocess.Popen(
        [sys.executable, "-m", "gptstack.tools.cli", *args],
        env=ENV,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_sigint_default,
    )


def wait_for(condition, proc):
    deadline = time.time() + DEADLINE_S
    while not condition():
        assert proc.poll() is None, proc.communicate()[0]
        assert time.time() < deadline, "the command did not start working"
        time.sleep(0.2)


def train_records(run_dir):
    """The metrics.jsonl records of finished training steps."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:  # a line being written
            continue
    return [r for r in records if r.get("event") == "train"]


@pytest.fixture(scope="module")
def interrupted_pipeline(tmp_path_factory, shakespeare_text):
    """A pipeline stopped by Ctrl-C during training."""
    root = tmp_path_factory.mktemp("interrupt")
    data = root / "data.txt"
    data.write_text(shakespeare_text[:50_000])
    out = root / "pipe"
    proc = gptstack(
        "pipeline",
        "--preset",
        "smoke",
        "--out",
        str(out),
        "--steps",
        "100000",
        "--set",
        f"data.path={data}",
        "--set",
        "train.log_interval=1",
        "--no-progress",
        cwd=root,
    )
    wait_for(lambda: train_records(out / "train"), proc)
    proc.send_signal(signal.SIGINT)
    text, _ = proc.communicate(timeout=DEADLINE_S)
    return proc.returncode, text, out, root


@pytest.mark.slow
def test_ctrl_c_in_the_pipeline_saves_and_says_how_to_resume(interrupted_pipeline):
    code, text, out, _ = interrupted_pipeline
    assert code == 130, text
    assert "Traceback" not in text and "stopping after this step" in text
    assert f"gptstack pipeline --resume {out}" in text
    step = json.loads((out / "train" / "last" / "config.json").read_text())["step"]
    assert 0 < step < 100000


@pytest.mark.slow
def test_ctrl_c_inside_an_evaluation_stops_it_and_saves(interrupted_pipeline):
    _, _, out, root = interrupted_pipeline
    run = out / "train"
    step = json.loads((run / "last" / "config.json").read_text())["step"]
    # evaluate after every step, with an evaluation far too long to wait for
    proc = gptstack(
        "train",
        "--resume",
        str(run),
        "--set",
        "train.eval_interval=1",
        "--set",
        "train.eval_batches=1000000",
        "--set",
        "train.log_interval=1",
        cwd=root,
    )
    wait_for(lambda: any(r["step"] == step + 1 for r in train_records(run)), proc)
    time.sleep(1.0)  # well inside the evaluation at step + 1
    proc.send_signal(signal.SIGINT)
    text, _ = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 130, text
    assert "Traceback" not in text
    assert json.loads((run / "last" / "config.json").read_text())["step"] == step + 1


@pytest.mark.slow
@pytest.mark.parametrize(
    "command, started",
    [
        (["sample", "--tokens", "100000000", "--prompt", "ROMEO:"], "ROMEO:"),
        (["eval", "--samples", "64", "--sample-tokens", "100000000"], "64 samples"),
    ],
)
def test_ctrl_c_stops_sampling_and_evaluation(interrupted_pipeline, command, started):
    _, _, out, root = interrupted_pipeline
    proc = gptstack(*command, "--ckpt", str(out / "train"), "--device", "cpu", cwd=root)
    seen = []

    def working():
        seen.append(proc.stdout.read(1))
        return started in "".join(seen)

    wait_for(working, proc)
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, "".join(seen) + rest
    assert "interrupted" in rest and "Traceback" not in rest
