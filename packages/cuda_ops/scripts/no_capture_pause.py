"""A pytest plugin that undoes graphs.capturing's collector pause: the mutant run of the tests
that guard it, which must fail with it.

    PYTHONPATH=packages/cuda_ops/scripts:$PYTHONPATH python3 -m pytest -m cuda -p no_capture_pause \
        packages/model/tests/test_graph_decoding.py \
        -k "capturing_pauses_the_collector or garbage_inside_a_capture"

On the H100 (2026-12-07, benchmarks/profiles/cuda-tests-h100-20261207-4c6eef6-garbage-fp8.txt)
both tests fail with it ("operation failed due to a previous error during capture") and pass
without it.
"""

from __future__ import annotations

import contextlib

import torch

from gptstack.model import graphs


@contextlib.contextmanager
def _capturing_without_pause(graph: torch.cuda.CUDAGraph):
    with torch.cuda.graph(graph):
        yield


def pytest_configure(config) -> None:
    graphs.capturing = _capturing_without_pause  # capture() looks it up at each call
