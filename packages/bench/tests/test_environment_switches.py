"""A record's environment says which kernels its run used: gptstack.cuda_ops' switch states and
the environment variables that set them (benchmarks/switches/sitecustomize.py)."""

import json

import pytest
import torch

from gptstack.bench.environment import environment

_C = pytest.importorskip("gptstack.cuda_ops")._C


def test_the_switches_state_is_recorded_as_the_run_has_it(monkeypatch):
    monkeypatch.setenv("GPTSTACK_CUDA_OPS_SWITCHES", "set_cross_entropy_staged=0")
    before = environment(torch.device("cpu"))
    assert before["env"]["GPTSTACK_CUDA_OPS_SWITCHES"] == "set_cross_entropy_staged=0"
    switches = before["cuda_ops_switches"]
    assert switches["cross_entropy_staged"] is True  # the variable alone changes nothing here
    assert switches["linear_registers_max_k"] == _C.linear_registers_max_k()
    assert "programmatic_launch" in switches and "cpu_path" in switches
    _C.set_cross_entropy_staged(False)
    try:
        after = environment(torch.device("cpu"))
    finally:
        _C.set_cross_entropy_staged(True)
    assert after["cuda_ops_switches"]["cross_entropy_staged"] is False
    json.dumps(after)  # a record is JSON
