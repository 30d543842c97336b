"""The timing harness: warm up, then time several variants alternately, round by round.

    settings = Settings()                         # warm-up 3, >= 20 repeats, 5 s budget per row
    variants = [Variant("eager", f, inputs), Variant("compiled", g, inputs)]
    result = compare(variants, settings, device=torch.device("cuda"), progress=progress)
    result.measurements["compiled"].stats         # {"n", "median", "min", "max"} in seconds
    result.speedups("eager", "compiled")          # per-round eager / compiled

Method (docs/MEASURING.md rules 2-3): every variant is built and warmed up first (compilation,
autotuning, allocator growth, graph capture); then rounds run A B C A B C ... in one process,
each sample on the next input set of its rotation. Rounds continue until the time budget is
spent and at least `min_repeats` rounds ran (20: anything under a second), or `min_repeats_slow`
for variants over `slow_s` per call, or `max_repeats` is reached. A variant that raises while
warming up or timing is dropped with its error message; the others carry on.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

import torch
from tqdm import tqdm

from .errors import BenchError
from .stats import median, speedups, summarize
from .timers import Clock, default_timing


@dataclass
class Settings:
    """How long and how often to measure one row (every variant of it together)."""

    warmup: int = 3  # eager calls per variant before timing (graph capture comes after)
    min_repeats: int = (
        20  # docs/MEASURING.md rule 3: at least 20 repeats for anything under a second
    )
    min_repeats_slow: int = 5  # rounds whose slowest variant takes over slow_s per call
    slow_s: float = 1.0
    max_repeats: int = 200
    budget_s: float = 3.0  # seconds of timed rounds per row, after warm-up

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.min_repeats < 1 or self.min_repeats_slow < 1:
            raise BenchError(f"settings {self}: warmup must be >= 0 and repeats >= 1")
        if self.max_repeats < max(self.min_repeats, self.min_repeats_slow):
            raise BenchError(
                f"max_repeats ({self.max_repeats}) is below min_repeats ({self.min_repeats}) or "
                f"min_repeats_slow ({self.min_repeats_slow}): raise --max-repeats"
            )

    @classmethod
    def smoke(cls) -> Settings:
        """A few repeats: checks that a suite runs end to end (CI), not how fast it is."""
        return cls(warmup=1, min_repeats=3, min_repeats_slow=2, max_repeats=3, budget_s=0.0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Variant:
    """One contender of a row: fn is called with one input set at a time."""

    name: str
    fn: Callable[[Any], Any]
    inputs: Sequence[Any]
    timing: str | None = None  # None: cuda_events on a GPU, cpu otherwise (timers.py)
    inner: int = 1  # calls per sample under cuda_graph timing


@dataclass
class Measurement:
    name: str
    samples: list[float]  # seconds per call, one per round
    timing: str
    inner: int

    @property
    def stats(self) -> dict[str, float | int]:
        return summarize(self.samples)


@dataclass
class Comparison:
    """Measurements of the variants that ran, and the error of each one that failed."""

    measurements: dict[str, Measurement] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    rounds: int = 0

    def speedups(self, baseline: str, candidate: str) -> list[float]:
        """Per-round baseline time / candidate time (> 1: candidate faster)."""
        return speedups(self.measurements[baseline].samples, self.measurements[candidate].samples)


class Progress:
    """One tqdm status line on stderr: which suite, which row, which variant, which repeat.

    tqdm redraws it in place on a terminal and throttles it to every `interval_s` seconds
    elsewhere (logs, the GPU script); notes are printed above it and kept.
    """

    def __init__(
        self,
        suite: str,
        *,
        enabled: bool = True,
        stream: TextIO | None = None,
        interval_s: float = 10.0,
    ) -> None:
        self.suite, self.row_label = suite, ""
        self.bar = tqdm(
            total=None,
            bar_format="{desc}{postfix}",
            file=stream or sys.stderr,
            disable=not enabled,
            mininterval=interval_s,
            dynamic_ncols=True,
            leave=False,
        )

    def row(self, label: str) -> None:
        self.row_label = label
        self.bar.set_description_str(f"[{self.suite}] {label}", refresh=True)
        self.bar.set_postfix_str("", refresh=False)

    def step(self, variant: str, stage: str) -> None:
        self.bar.set_postfix_str(f" · {variant} · {stage}")

    def note(self, text: str) -> None:
        if not self.bar.disable:
            self.bar.write(f"[{self.suite}] {text}", file=self.bar.fp)

    def done(self) -> None:
        self.bar.close()


def _one_error(e: BaseException) -> str:
    frame = traceback.extract_tb(e.__traceback__)[-1:] if e.__traceback__ else []
    where = f" (at {frame[0].filename.rsplit('/', 1)[-1]}:{frame[0].lineno})" if frame else ""
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}{where}"


def error_text(e: BaseException) -> str:
    """The error's first line and place; when it was raised while handling another (a failed
    CUDA-graph capture: capture_end's "operation failed due to a previous error during capture"
    replaces the error that broke the capture), the first error too."""
    first = e
    for _ in range(8):  # a chain, never a cycle; 8 is plenty
        if first.__context__ is None or first.__suppress_context__:
            break
        first = first.__context__
    text = _one_error(e)
    return text if first is e else f"{text}; first: {_one_error(first)}"


def compare(
    variants: Sequence[Variant],
    settings: Settings,
    *,
    device: torch.device,
    progress: Progress | None = None,
) -> Comparison:
    """Warm up each variant, then time them alternately in rounds (see the module doc)."""
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise BenchError(f"variant names must be unique within a row, got {names}")
    progress = progress or Progress("bench", enabled=False)
    out = Comparison()
    clocks: dict[str, Clock] = {}
    for v in variants:
        progress.step(v.name, "warm-up")
        try:
            timing = v.timing or default_timing(device)
            clock = Clock(v.fn, v.inputs, timing=timing, device=device, inner=v.inner)
            clock.warm_up(settings.warmup)
            clocks[v.name] = clock
        except BenchError:
            raise
        except Exception as e:  # a compile or capture failure is a result, not a crash
            out.failures[v.name] = error_text(e)
    samples: dict[str, list[float]] = {name: [] for name in clocks}
    t0, rounds = time.perf_counter(), 0
    while clocks:
        for name in list(clocks):
            progress.step(name, f"repeat {rounds + 1}")
            try:
                samples[name].append(clocks[name].sample(rounds))
            except Exception as e:
                out.failures[name] = error_text(e)
                del clocks[name], samples[name]
        rounds += 1
        if rounds >= settings.max_repeats or not samples:
            break
        slow = max(median(s) for s in samples.values()) >= settings.slow_s
        needed = settings.min_repeats_slow if slow else settings.min_repeats
        if rounds >= needed and time.perf_counter() - t0 >= settings.budget_s:
            break
    for name, clock in clocks.items():
        out.measurements[name] = Measurement(name, samples[name], clock.timing, clock.inner)
    out.rounds = rounds
    return out
