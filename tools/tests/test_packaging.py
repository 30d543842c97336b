"""Every member builds its own wheel and installs alone into a fresh virtual environment.

tokenizer and quant must work without torch; the others must import with only their declared
dependencies (the workspace wheels are offered with --find-links, nothing else of the repo).
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MEMBERS = {
    "gptstack-tokenizer": (
        "import gptstack.tokenizer as t; assert t.train_bpe('abab abab', 258).vocab_size == 258"
    ),
    "gptstack-quant": (
        "import gptstack.quant as q; q.read_artifact(q.synthetic_artifact("
        "q.ModelSpec(64, 8, 1, 2, 16, True), q.synthetic_tables('char', 40)))"
    ),
    "gptstack-model": (
        "import gptstack.model as m; "
        "m.GPT(m.GPTConfig(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=8))"
    ),
    "gptstack-bench": "import gptstack.bench as b; assert b.peak_flops('NVIDIA H200') is not None",
    "gptstack-tools": "import gptstack.tools.cli as c; c.build_parser()",
}
NO_TORCH = {"gptstack-tokenizer", "gptstack-quant"}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    if shutil.which("uv") is None:
        pytest.fail("uv is not on PATH: install it with `python3 -m pip install uv`")
    dist = tmp_path_factory.mktemp("dist")
    for name in MEMBERS:
        subprocess.run(
            ["uv", "build", "--package", name, "--wheel", "-o", str(dist)],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
    return dist


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MEMBERS))
def test_member_installs_and_works_alone(name, wheels, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run(
        ["uv", "venv", "--python", sys.executable, str(venv)], check=True, capture_output=True
    )
    py = venv / "bin" / "python"
    proc = subprocess.run(
        ["uv", "pip", "install", "--python", str(py), "--find-links", str(wheels), name],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    check = MEMBERS[name]
    if name in NO_TORCH:
        check += "; import sys; assert 'torch' not in sys.modules"
        listed = subprocess.run(
            ["uv", "pip", "list", "--python", str(py)], capture_output=True, text=True
        ).stdout
        assert "torch" not in listed, listed
    proc = subprocess.run([str(py), "-c", check], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # nothing of the workspace leaks in: the package comes from the venv, not from the checkout
    where = subprocess.run(
        [str(py), "-c", f"import gptstack.{name.split('-')[1]} as m; print(m.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    ).stdout
    assert str(venv) in where and str(ROOT) not in where


def test_training_imports_no_bench_suite():
    """`gptstack train` needs bench's GPU peak table only: importing the training loop must not
    load the suites (and their compile helpers, matplotlib, the engine glue)."""
    code = (
        "import sys, gptstack.tools.train; "
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('gptstack.bench'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert set(out.stdout.split()) == {"gptstack.bench", "gptstack.bench.peaks"}
