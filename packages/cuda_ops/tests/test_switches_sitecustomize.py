"""benchmarks/switches/sitecustomize.py: the kernel switches a benchmark variant sets for its
whole process through GPTSTACK_CUDA_OPS_SWITCHES (how train_ab.py compares two kernels of one
build in fresh `gptstack train` processes)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SWITCHES = Path(__file__).resolve().parents[3] / "benchmarks" / "switches"
PROBE = "from gptstack.cuda_ops import _C; print('staged', _C.cross_entropy_staged())"


def _python(switches: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SWITCHES), env.get("PYTHONPATH")]))
    env.pop("GPTSTACK_CUDA_OPS_SWITCHES", None)
    if switches is not None:
        env["GPTSTACK_CUDA_OPS_SWITCHES"] = switches
    return subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_a_named_switch_is_set_before_the_program_runs():
    done = _python("set_cross_entropy_staged=0")
    assert done.returncode == 0, done.stderr
    assert "staged False" in done.stdout
    assert "gptstack.cuda_ops._C.set_cross_entropy_staged(False)" in done.stdout
    # without the variable the folder changes nothing: the default stays
    done = _python(None)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "staged True"


@pytest.mark.slow
@pytest.mark.parametrize(
    "bad", ["set_no_such_switch=1", "cross_entropy_staged=0", "set_cross_entropy_staged"]
)
def test_a_bad_switch_stops_the_process_and_says_what_is_expected(bad):
    done = _python(bad)
    assert done.returncode != 0
    assert f"GPTSTACK_CUDA_OPS_SWITCHES: {bad!r} is not NAME=INTEGER" in done.stderr
