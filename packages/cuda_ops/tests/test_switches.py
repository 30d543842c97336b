"""gptstack.cuda_ops.switches / set_switch: the kernel switches by name, set from text."""

import pytest

import gptstack.cuda_ops as ops
from gptstack.cuda_ops import _C


def test_every_setter_with_a_getter_is_listed_with_its_state():
    state = ops.switches()
    assert state["cross_entropy_staged"] is _C.cross_entropy_staged()
    assert state["programmatic_launch"] is _C.programmatic_launch()
    assert state["linear_registers_max_k"] == _C.linear_registers_max_k()
    assert state["cpu_path"] == _C.cpu_path()
    assert state["cublaslt_autotune"] == _C.cublaslt_autotune() == 0  # the heuristic's choice


def test_a_switch_is_set_from_text_in_its_own_type():
    k = _C.linear_registers_max_k()
    try:
        assert ops.set_switch("cross_entropy_staged", "0") is False
        assert _C.cross_entropy_staged() is False
        assert ops.set_switch("cross_entropy_staged", "true") is True
        assert ops.set_switch("linear_registers_max_k", "256") == 256
        assert _C.linear_registers_max_k() == 256
        assert ops.set_switch("cublaslt_autotune", "8") == 8 and _C.cublaslt_autotune() == 8
        assert ops.set_switch("cublaslt_autotune", "-3") == -3 and _C.cublaslt_autotune() == 0
    finally:
        _C.set_cross_entropy_staged(True)
        _C.set_linear_registers_max_k(k)
        _C.set_cublaslt_autotune(0)


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("no_such_switch", "1", "'no_such_switch' is not one of gptstack.cuda_ops' switches"),
        ("cross_entropy_staged", "2", "takes a bool (bool: 0 or 1), got '2'"),
        ("linear_registers_max_k", "many", "takes a int"),
    ],
)
def test_a_bad_name_or_value_says_what_is_wanted(name, value, words):
    before = ops.switches()
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        ops.set_switch(name, value)
    assert ops.switches() == before  # nothing was set
