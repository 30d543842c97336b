"""A CPU run's arithmetic, said before it starts, with the least time it can take there.

    work = RunWork.of(flops_per_token, tokens_per_step, eval_tokens, start=0, max_steps=450,
                      eval_interval=150)
    log(work.describe(matmul_rate(torch.bfloat16), "bf16"))
    # "work: 62.3 GFLOP a step (2,048 tokens x 30.4 MFLOP), 450 steps and 4 evaluations: ..."

A GPU preset started on a CPU should say so before its first hour, not after: gpt2-124m's
0.5M-token steps are 448 TFLOP each. The rate is this CPU's on a 1024^3 matmul in the training
dtype, on the threads training will use (~30 ms to measure). No training step runs faster than
a large matmul, so the time printed is a lower bound. On the 2-core AVX512-BF16 development
machine (2026-12-06) gpt2-124m's CPU check reached 2/3 of the probe's rate (260.1 s against a
bound of 2.9 min: benchmarks/results/run-gpt2-124m-cpu-20261206.log) and the esp32 preset about
1/2 (28 TFLOP of steps in 143.5 s against a ~400 GFLOP/s probe;
benchmarks/results/pipeline-esp32-cpu-bf16-epyc-20261206.json).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

# Past this lower bound the estimate says how to make the run shorter.
LONG_S = 3600.0
PROBE_SIZE = 1024
PROBE_REPEATS = 4


@dataclass(frozen=True)
class RunWork:
    """FLOPs of a training run: `steps` optimizer steps and `evals` loss estimates."""

    tokens_per_step: int
    flops_per_token: float  # forward + backward (+ a teacher's forward)
    steps: int
    eval_flops: float  # one evaluation: the forwards over both splits' batches
    evals: int

    @classmethod
    def of(
        cls,
        flops_per_token: float,
        tokens_per_step: int,
        eval_tokens: int,
        *,
        start: int,
        max_steps: int,
        eval_interval: int,
        teacher_flops_per_token: float = 0.0,
    ) -> RunWork:
        """The run as train()'s loop makes it: an evaluation at every step of [start, max_steps)
        divisible by eval_interval (except the step a resumed run starts at: it was evaluated
        before the run stopped) and one at the end. Forward-only work is a third of
        flops_per_token (2N vs 6N); a teacher adds its forward to every training token."""
        steps = max(0, max_steps - start)
        evals = 1 + sum(  # the final one, and those along the way
            1 for s in range(start, max_steps) if s % eval_interval == 0 and (s > start or s == 0)
        )
        return cls(
            tokens_per_step,
            flops_per_token + teacher_flops_per_token / 3,
            steps,
            eval_tokens * flops_per_token / 3,
            evals,
        )

    @property
    def step_flops(self) -> float:
        return self.tokens_per_step * self.flops_per_token

    @property
    def total_flops(self) -> float:
        return self.steps * self.step_flops + self.evals * self.eval_flops

    def describe(self, rate: float, dtype: str) -> str:
        """One line (two when long): the work, the probe's rate and the lower bound it gives."""
        least = self.total_flops / rate
        line = (
            f"work: {_flops(self.step_flops)} a step ({self.tokens_per_step:,} tokens x "
            f"{_flops(self.flops_per_token)}), {self.steps:,} steps and {self.evals} "
            f"evaluations: {_flops(self.total_flops)}; this CPU multiplies {dtype} matrices at "
            f"{rate / 1e9:,.0f} GFLOP/s, so at least {_duration(least)} (training steps reach "
            f"1/2 to 2/3 of that rate)"
        )
        if least >= LONG_S:
            line += (
                "\nthat is long for a CPU: shorten it with --set train.cpu_max_steps=N or "
                "--set train.cpu_batch_size=N, or train a CPU-sized preset (esp32)"
            )
        return line


def matmul_rate(dtype: torch.dtype, size: int = PROBE_SIZE, repeats: int = PROBE_REPEATS) -> float:
    """FLOP/s of a size^3 matmul in dtype on this process's CPU threads (best of `repeats`,
    after one warm-up)."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=gen).to(dtype)
    b = torch.randn(size, size, generator=gen).to(dtype)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * size**3 / max(best, 1e-9)


def _flops(x: float) -> str:
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if x >= scale:
            return f"{x / scale:,.1f} {unit}"
    return f"{x:,.0f} FLOP"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
