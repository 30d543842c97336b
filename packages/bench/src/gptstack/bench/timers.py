"""Clocks for one variant: how a single timing sample is taken.

    clock = Clock(fn, inputs, timing="cuda_events", device=torch.device("cuda"))
    clock.warm_up(3)                 # compilation, autotuning, allocator; graph capture last
    seconds = clock.sample(round_index)   # one call of fn on inputs[round_index % len(inputs)]

Three timings (docs/MEASURING.md rule 3):
- "cpu": `time.perf_counter()` around the call, with `torch.cuda.synchronize()` before and after
  when the device is a GPU (a synchronized wall clock). Used on CPUs and for host-side work.
- "cuda_events": a CUDA event recorded before and after the call on the current stream; the
  elapsed GPU time between them (includes the GPU idling while the host launches kernels).
- "self": fn measures itself and returns seconds (a subprocess that reports its own timer, e.g.
  gs-run --json); the clock only calls it.
- "cuda_graph": `inner` calls captured once per input set in a torch.cuda.CUDAGraph (after eager
  warm-up on a side stream, PyTorch's capture recipe), then each sample replays the graph between
  two events and divides by `inner`. For tiny ops whose launch overhead would otherwise be timed.

Inputs rotate: sample r uses inputs[r % len(inputs)], so several distinct input sets pass through
the caches instead of one that stays resident.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from gptstack.model.graphs import capturing, run_on_side_stream

from .errors import BenchError

TIMINGS = ("cpu", "cuda_events", "cuda_graph", "self")
# Eager calls on a side stream before a capture (lazy init, cuBLAS workspaces, autotuning must
# happen outside the captured region: torch.cuda.graphs documentation, "whole network capture").
CAPTURE_WARMUP_CALLS = 3


def release_rng_capture(device: torch.device) -> None:
    """After a failed capture: give the device's default CUDA generator a fresh copy of its state.

    A capture registers the generator and marks its state as capturing; when the capture fails,
    capture_end raises before it unmarks it, and every later random op outside a capture (any
    dropout, in any variant) then fails with "Offset increment outside graph capture encountered
    unexpectedly". clone_state() copies seed and offset into a state that is not capturing
    (PyTorch's CUDAGeneratorState::clone), so the variants after a failed one still run.
    """
    index = device.index if device.index is not None else torch.cuda.current_device()
    gen = torch.cuda.default_generators[index]
    if hasattr(gen, "graphsafe_set_state") and hasattr(gen, "clone_state"):
        gen.graphsafe_set_state(gen.clone_state())


def default_timing(device: torch.device) -> str:
    return "cuda_events" if device.type == "cuda" else "cpu"


class Clock:
    """Times fn(inputs[i]) one sample at a time with the chosen timing (see the module doc)."""

    def __init__(
        self,
        fn: Callable[[Any], Any],
        inputs: Sequence[Any],
        *,
        timing: str,
        device: torch.device,
        inner: int = 1,
    ) -> None:
        if timing not in TIMINGS:
            raise BenchError(f"timing {timing!r} is unknown: use one of {', '.join(TIMINGS)}")
        if timing.startswith("cuda") and device.type != "cuda":
            raise BenchError(f"timing {timing!r} needs a CUDA device, got {device}: use 'cpu'")
        if len(inputs) == 0:
            raise BenchError("a variant needs at least one input set")
        if inner < 1 or (inner != 1 and timing != "cuda_graph"):
            raise BenchError(
                f"inner={inner}: more than one call per sample needs cuda_graph timing"
            )
        self.fn, self.inputs, self.timing = fn, inputs, timing
        self.device, self.inner = device, inner
        self._graphs: list[torch.cuda.CUDAGraph] = []

    def warm_up(self, calls: int) -> None:
        """Run fn eagerly `calls` times over the rotating inputs; capture graphs last."""
        for i in range(calls):
            self.fn(self.inputs[i % len(self.inputs)])
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        if self.timing == "cuda_graph":
            self._graphs = [self._capture(x) for x in self.inputs]

    def _capture(self, x: Any) -> torch.cuda.CUDAGraph:
        run_on_side_stream(lambda: self.fn(x), self.device, CAPTURE_WARMUP_CALLS)
        graph = torch.cuda.CUDAGraph()
        try:
            with capturing(graph):  # the collector paused (gptstack.model.graphs)
                for _ in range(self.inner):
                    self.fn(x)
        except BaseException:
            release_rng_capture(self.device)
            raise
        torch.cuda.synchronize(self.device)
        return graph

    def sample(self, round_index: int) -> float:
        """Seconds for one call of fn (per call: a graph sample is divided by `inner`)."""
        i = round_index % len(self.inputs)
        if self.timing == "self":
            seconds = float(self.fn(self.inputs[i]))
            if not seconds > 0:
                raise BenchError(f"a self-timed variant reported {seconds} s: expected > 0")
            return seconds
        if self.timing == "cpu":
            cuda = self.device.type == "cuda"
            if cuda:
                torch.cuda.synchronize(self.device)
            t0 = time.perf_counter()
            self.fn(self.inputs[i])
            if cuda:
                torch.cuda.synchronize(self.device)
            return time.perf_counter() - t0
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        if self.timing == "cuda_graph":
            self._graphs[i].replay()
        else:
            self.fn(self.inputs[i])
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / self.inner  # elapsed_time is in milliseconds
