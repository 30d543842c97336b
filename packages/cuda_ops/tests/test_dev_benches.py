"""The side-by-side kernel benches of packages/cuda_ops/dev/ (llm.c dev/cuda style) include the
kernels of csrc/ and reach into them: they must keep compiling as those change. Run on the lent
GPU (the README in dev/ says how); here they are only compiled, where nvcc is installed."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1]
BENCHES = sorted((PACKAGE / "dev").glob("*.cu"))


def test_every_dev_bench_is_listed_in_the_readme():
    readme = (PACKAGE / "dev" / "README.md").read_text()
    assert BENCHES, "no benches found in dev/"
    for bench in BENCHES:
        assert bench.name in readme


@pytest.mark.slow
@pytest.mark.parametrize("bench", BENCHES, ids=lambda p: p.name)
def test_a_dev_bench_compiles_against_the_kernels_in_the_tree(bench, tmp_path):
    nvcc = shutil.which("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None
    )
    if nvcc is None:
        if os.environ.get("GPTSTACK_REQUIRE_TOOLCHAINS"):
            pytest.fail("nvcc is not installed (GPTSTACK_REQUIRE_TOOLCHAINS is set)")
        pytest.skip("nvcc is not installed")
    cmd = [nvcc, "-arch=sm_90a", "-O1", "-std=c++17", "--expt-relaxed-constexpr"]  # CMakeLists'
    cmd += ["-I", str(PACKAGE / "csrc"), str(bench)]
    done = subprocess.run(
        [*cmd, "-o", str(tmp_path / bench.stem)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / bench.stem).is_file()
