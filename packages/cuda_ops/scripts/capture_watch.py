"""A pytest plugin that finds where a CUDA-graph capture was invalidated.

    PYTHONPATH=packages/cuda_ops/scripts:$PYTHONPATH \
        python3 -m pytest -m cuda -p capture_watch packages/model/tests/test_graph_decoding.py

"operation failed due to a previous error during capture" names the call that noticed, not the
one that broke the capture. This plugin asks the CUDA runtime for the current stream's capture
status (cudaStreamIsCapturing) before and after every `gptstack.cuda_ops._C` call, and prints,
once per capture, the first call after which the capture was invalidated, or that it already was
before a call began (then the cause ran in Python between two calls: how the garbage collector
freeing an old CUDA graph inside a capture was found, benchmarks/profiles/README.md, 2026-12-06).
The output lands in each failing test's captured stdout.
"""

from __future__ import annotations

import ctypes
import glob
import importlib
import os
import pkgutil
import sys

import torch

NONE, ACTIVE, INVALIDATED = 0, 1, 2  # cudaStreamCaptureStatus


def _cudart() -> ctypes.CDLL | None:
    """The CUDA runtime PyTorch loaded (its wheel's nvidia/*/lib, else torch/lib)."""
    root = os.path.dirname(torch.__file__)
    for pattern in ("../nvidia/*/lib/libcudart.so.*", "lib/libcudart*.so*"):
        hits = sorted(glob.glob(os.path.join(root, pattern)))
        if hits:
            return ctypes.CDLL(hits[0])
    return None


_runtime = _cudart()
_calls: list[str] = []  # the _C calls of the capture under way
_reported = [False]


def _status() -> int:
    if _runtime is None or not torch.cuda.is_initialized():
        return NONE
    status = ctypes.c_int(NONE)
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    _runtime.cudaStreamIsCapturing(stream, ctypes.byref(status))
    return status.value


def _report(text: str) -> None:
    if not _reported[0]:
        _reported[0] = True
        print(f"\ncapture_watch: {text} (this capture's last calls: {_calls[-12:]})")


def _watched(name: str, fn):
    def call(*args, **kwargs):
        before = _status()
        try:
            return fn(*args, **kwargs)
        finally:
            _calls.append(name)
            if before == INVALIDATED:
                _report(f"already invalidated before _C.{name}")
            elif _status() == INVALIDATED:
                _report(f"invalidated during _C.{name}")

    return call


def pytest_configure(config) -> None:
    if _runtime is None:
        print("capture_watch: no CUDA runtime library found next to torch; nothing watched")
        return
    import gptstack.cuda_ops as ops

    for module in pkgutil.iter_modules(ops.__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"gptstack.cuda_ops.{module.name}")
    extension = importlib.import_module("gptstack.cuda_ops._C")
    proxy = type("WatchedExtension", (), {})()
    for name in dir(extension):
        if not name.startswith("__"):
            value = getattr(extension, name)
            setattr(proxy, name, _watched(name, value) if callable(value) else value)
    for module in list(sys.modules.values()):  # every wrapper module's `_C` global
        if module.__name__.startswith("gptstack.cuda_ops") and getattr(module, "_C", None) is (
            extension
        ):
            module._C = proxy
    enter = torch.cuda.graph.__enter__

    def watched_enter(self):
        result = enter(self)
        _calls.clear()
        _reported[0] = False
        if _status() == INVALIDATED:
            _report("invalidated as the capture began")
        return result

    torch.cuda.graph.__enter__ = watched_enter
