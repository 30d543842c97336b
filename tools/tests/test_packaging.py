"""Every member builds its own wheel and installs alone into a fresh virtual environment.

tokenizer and quant must work without torch; the others must import with only their declared
dependencies (the workspace wheels are offered with --find-links, nothing else of the repo).
"""

import os
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
    # the native ops on the CPU, from the wheel's own compiled extension
    "gptstack-cuda-ops": (
        "import torch, gptstack.cuda_ops as o; x = torch.randn(3, 37); "
        "torch.testing.assert_close(o.gelu_tanh(x), torch.nn.functional.gelu(x, approximate="
        "'tanh'), rtol=1e-5, atol=1e-6); assert o.build_info()['cpu_paths']"
    ),
}
# the native package is built as sdist + a wheel from that sdist (what `uv build` does without
# --wheel), so the sdist is proven to hold the C++ sources; CPU only, to keep the test quick
SDIST_TOO = {"gptstack-cuda-ops": {"GPTSTACK_CUDA": "OFF"}}
NO_TORCH = {"gptstack-tokenizer", "gptstack-quant"}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    if shutil.which("uv") is None:
        pytest.fail("uv is not on PATH: install it with `python3 -m pip install uv`")
    dist = tmp_path_factory.mktemp("dist")
    for name in MEMBERS:
        cmd = ["uv", "build", "--package", name, "--python", sys.executable, "-o", str(dist)]
        env = {**os.environ, **SDIST_TOO[name]} if name in SDIST_TOO else None
        proc = subprocess.run(
            cmd if name in SDIST_TOO else [*cmd, "--wheel"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    for name in SDIST_TOO:
        assert list(dist.glob(f"{name.replace('-', '_')}-*.tar.gz")), sorted(dist.iterdir())
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
    module = name.removeprefix("gptstack-").replace("-", "_")
    where = subprocess.run(
        [str(py), "-c", f"import gptstack.{module} as m; print(m.__file__)"],
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
