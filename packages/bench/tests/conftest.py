"""Fixtures of the bench tests: every suite run once at smoke size on the CPU, into one folder.

The suites take tens of seconds together on two cores, so they run once per session; the suite
and report tests read the JSON files they wrote.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gptstack.bench import ModelShape, Settings

REPO = Path(__file__).resolve().parents[3]
# A handful of rounds: enough to exercise alternation, rotation and ratios, no timing claims.
TEST_SETTINGS = Settings(warmup=1, min_repeats=3, min_repeats_slow=2, max_repeats=3, budget_s=0.0)
ESP32 = ModelShape("esp32", vocab_size=512, block_size=64, n_layer=6, n_head=8, n_embd=256,
                   batch_size=64, dropout=0.2)
CHAR = ModelShape("shakespeare-char", vocab_size=65, block_size=256, n_layer=6, n_head=6,
                  n_embd=384, batch_size=64, dropout=0.2, bias=False)


def gs_run_binary() -> Path | None:
    """The host build of the C engine ($GS_RUN, else built by the one build helper,
    gptstack.tools.firmware_host). None when a tool is missing, unless CI requires toolchains."""
    env = os.environ.get("GS_RUN")
    if env:
        return Path(env)
    from gptstack.tools.errors import GptstackError
    from gptstack.tools.firmware_host import build_host

    try:
        return build_host("release").gs_run
    except GptstackError:
        if os.environ.get("GPTSTACK_REQUIRE_TOOLCHAINS"):
            raise
        return None


@pytest.fixture(scope="session")
def bench_settings() -> Settings:
    return TEST_SETTINGS


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def results_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("bench-results")


@pytest.fixture(scope="session")
def suite_results(results_dir) -> dict[str, Path]:
    """suite name -> result file, for every suite that can run here."""
    from gptstack.bench import (
        run_attention,
        run_engine,
        run_generate,
        run_ops,
        run_tokenizer,
        run_train,
    )

    common = {"settings": TEST_SETTINGS, "smoke": True, "progress": False,
              "command": ["pytest", "bench"]}
    out: dict[str, Path] = {}

    def path(name: str) -> Path:
        out[name] = results_dir / f"{name}-cpu-test.json"
        return out[name]

    run_train([ESP32, CHAR], rungs=["fp32", "bf16", "fused", "compile", "graph"], device="cpu",
              compile_backend="aot_eager", out=path("train"), **common)
    run_generate([ESP32], batches=(1, 2), sweep_prompt=(8,), sweep_new=(8,), device="cpu",
                 out=path("generate"), **common)
    run_attention([ESP32, CHAR], device="cpu", out=path("attention"), **common)
    run_ops([CHAR], device="cpu", compile_backend="eager", out=path("ops"), **common)
    data_file = Path(os.environ.get("GPTSTACK_DATA_DIR", "")) / "tinyshakespeare.txt"
    if data_file.is_file():
        run_tokenizer(data=data_file, out=path("tokenizer"), **common)
    binary = gs_run_binary()
    if binary is not None:
        try:
            import gptstack.quant  # noqa: F401
        except ImportError:
            binary = None
    if binary is not None:
        run_engine(ESP32, engines={"release": binary}, unavailable={"openmp": "not built here"},
                   out=path("engine"), **common)
    return out
