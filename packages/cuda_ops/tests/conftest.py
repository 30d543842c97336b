"""Fixtures of the cuda_ops tests: seeded generators, the CPU paths to cover, CUDA skips.

Tests marked `@pytest.mark.cuda` run only where a GPU is visible and the build has CUDA
kernels (scripts/gpu_check.sh runs them with `pytest -m cuda`); elsewhere they are skipped with
the reason.
"""

from __future__ import annotations

import pytest
import torch

import gptstack.cuda_ops as ops

BUILD = ops.build_info()
CUDA_OK = bool(BUILD["cuda"]) and torch.cuda.is_available()
CPU_PATHS = ["avx2", "scalar"] if BUILD["cpu_has_avx2_fma"] else ["scalar"]


@pytest.fixture(autouse=True)
def _cuda_only_where_possible(request):
    if request.node.get_closest_marker("cuda") and not CUDA_OK:
        why = "no CUDA kernels in this build" if not BUILD["cuda"] else "no GPU visible"
        pytest.skip(f"CUDA test: {why}")


@pytest.fixture(params=CPU_PATHS)
def cpu_path(request):
    """Run the test once per CPU path compiled in (and supported here), then restore auto."""
    ops.set_cpu_path(request.param)
    yield request.param
    ops.set_cpu_path("auto")


@pytest.fixture
def gen():
    """A fresh seeded CPU generator per test."""
    return torch.Generator().manual_seed(1234)
