"""The work a CPU run announces before it starts (run_estimate.py), against what it then does."""

import json
import math
import re

import pytest
import torch

from gptstack.tools.config import apply_overrides, load_preset
from gptstack.tools.run_estimate import LONG_S, RunWork, matmul_rate
from gptstack.tools.train import train


def evaluated_steps(start, max_steps, interval, resumed):
    """train()'s loop, spelled out: which steps it evaluates, the final one included."""
    steps = [
        s for s in range(start, max_steps) if s % interval == 0 and not (resumed and s == start)
    ]
    return steps + [max_steps]


@pytest.mark.parametrize(
    "start, max_steps, interval",
    [(0, 1, 1), (0, 12, 6), (0, 13, 6), (0, 5, 250), (6, 12, 6), (7, 12, 6), (3, 450, 50)],
)
def test_run_work_counts_steps_and_evaluations_as_the_loop_runs_them(start, max_steps, interval):
    work = RunWork.of(30e6, 2048, 4096, start=start, max_steps=max_steps, eval_interval=interval)
    assert work.steps == max_steps - start
    assert work.evals == len(evaluated_steps(start, max_steps, interval, resumed=start > 0))
    assert work.step_flops == 2048 * 30e6
    assert work.total_flops == work.steps * 2048 * 30e6 + work.evals * 4096 * 30e6 / 3


def test_a_teacher_adds_its_forward_to_every_training_token():
    plain = RunWork.of(30e6, 2048, 4096, start=0, max_steps=10, eval_interval=5)
    taught = RunWork.of(
        30e6, 2048, 4096, start=0, max_steps=10, eval_interval=5, teacher_flops_per_token=60e6
    )
    assert taught.step_flops == plain.step_flops + 2048 * 20e6
    assert taught.eval_flops == plain.eval_flops  # evaluation scores the student alone


def test_the_line_gives_the_lower_bound_and_past_an_hour_how_to_shorten_it():
    work = RunWork.of(855e6, 524_288, 0, start=0, max_steps=2, eval_interval=250)
    rate = work.total_flops / (LONG_S / 2)  # half an hour at this rate
    short = work.describe(rate, "bf16")
    assert "448.3 TFLOP a step (524,288 tokens x 855.0 MFLOP), 2 steps and 2 evaluations" in short
    assert "at least 30.0 min" in short and "\n" not in short
    long = work.describe(rate / 4, "bf16")
    assert "at least 2.0 h" in long
    assert "--set train.cpu_max_steps=N" in long.splitlines()[1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_matmul_probe_measures_a_rate(dtype):
    rate = matmul_rate(dtype, size=128, repeats=2)
    assert math.isfinite(rate) and rate > 1e6  # any CPU does more than 1 MFLOP/s


def test_a_cpu_run_announces_the_steps_and_evaluations_it_then_makes(tmp_path, small_corpus):
    cfg = apply_overrides(
        load_preset("smoke"),
        [
            f"data.path={small_corpus}",
            "train.max_steps=7",
            "train.eval_interval=3",
            "train.log_interval=1",
        ],
    )
    lines = []
    train(cfg, tmp_path / "run", progress=False, log=lines.append)
    (line,) = [line for line in lines if line.startswith("work: ")]
    announced = re.search(r"(\d+) steps and (\d+) evaluations", line)
    events = [json.loads(r) for r in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert int(announced[1]) == sum(1 for e in events if e["event"] == "train") == 7
    assert int(announced[2]) == sum(1 for e in events if e["event"] == "eval") == 4
    assert "this CPU multiplies" in line and "at least" in line
