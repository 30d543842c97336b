"""CUDA-graph capture, written once for the decoder, the training step and the bench.

    graph, out = capture(fn, device)          # warm up fn on a side stream, then capture it
    graph.replay()                            # out now holds this replay's result
    with capturing(graph): ...                # torch.cuda.graph(graph), the collector paused

PyTorch's recipe (torch.cuda.graphs docs, "whole network capture"): run the callable a few times
eagerly on a side stream first, so that lazy initialisation, cuBLAS workspaces, autotuning and
torch.compile's own compilation happen outside the captured region; then capture it once. Inputs
and outputs are the tensors the callable reads and returns: replays overwrite them in place.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

import torch

# Eager calls before a capture. The recipe asks for "a few"; three covers compile's first call,
# autotuning's second and a steady third.
WARMUP_CALLS = 3

R = TypeVar("R")


def run_on_side_stream(fn: Callable[[], R], device: torch.device, calls: int = 1) -> R | None:
    """Call fn `calls` times on a fresh side stream ordered after the current one; return the
    last result. Used for warm-up calls (capture must not see first-call work)."""
    current = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device=device)
    side.wait_stream(current)
    out = None
    with torch.cuda.stream(side):
        for _ in range(calls):
            out = fn()
    current.wait_stream(side)
    return out


@contextmanager
def capturing(graph: torch.cuda.CUDAGraph) -> Iterator[None]:
    """torch.cuda.graph(graph) with Python's cyclic garbage collector paused until the capture
    ends. Objects in reference cycles (a GraphDecoder: its step closures hold it) are freed
    whenever the collector next runs, and a CUDAGraph freed inside another capture invalidates
    it ("operation failed due to a previous error during capture"; on the H100, 2026-12-06: a
    pinned buffer, an event or a device tensor freed there did not). PyTorch no longer collects
    before a capture (torch.compiler.config.force_cudagraph_gc), so any allocation in the
    captured code could start a collection. Objects made garbage meanwhile are collected
    after."""
    collector_was_on = gc.isenabled()
    gc.disable()
    try:
        with torch.cuda.graph(graph):
            yield
    finally:
        if collector_was_on:
            gc.enable()


def capture(
    fn: Callable[[], R],
    device: torch.device,
    *,
    warmup: int = WARMUP_CALLS,
    generators: Sequence[torch.Generator] = (),
) -> tuple[torch.cuda.CUDAGraph, R]:
    """Warm fn up `warmup` times on a side stream, then capture one call into a CUDA graph.

    Returns (graph, output of the captured call). Every replay reruns the captured kernels on
    the same memory: write new inputs into the tensors fn reads before `graph.replay()`.
    generators: CUDA generators (besides the default one) that fn draws from; each replay then
    advances them like an eager call would (CUDAGraph.register_generator_state).
    """
    if warmup > 0:
        run_on_side_stream(fn, device, warmup)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    for g in generators:
        graph.register_generator_state(g)
    with capturing(graph):
        out = fn()
    return graph, out
