"""Fixtures of the bench tests: every suite run once at smoke size on the CPU, into one folder.

The suites take tens of seconds together on two cores, so they run once per session; the suite
and report tests read the JSON files they wrote. The engine suite needs the C engine's host build,
which the tools package makes: its tests live in tools/tests (bench never imports tools).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gptstack.bench import ModelShape, Settings, SuiteOptions

REPO = Path(__file__).resolve().parents[3]
# A handful of rounds: enough to exercise alternation, rotation and ratios, no timing claims.
TEST_SETTINGS = Settings(warmup=1, min_repeats=3, min_repeats_slow=2, max_repeats=3, budget_s=0.0)
ESP32 = ModelShape(
    "esp32",
    vocab_size=512,
    block_size=64,
    n_layer=6,
    n_head=8,
    n_embd=256,
    batch_size=64,
    dropout=0.2,
)
CHAR = ModelShape(
    "shakespeare-char",
    vocab_size=65,
    block_size=256,
    n_layer=6,
    n_head=6,
    n_embd=384,
    batch_size=64,
    dropout=0.2,
    bias=False,
)


def one_thread_for_small_work(rows: int, n_params: int) -> int:
    """A stand-in for the tools' thread policy (bench never imports tools): 1 thread below
    SMALL_WORK multiply-adds per call, 2 above."""
    return 1 if rows * n_params < SMALL_WORK else 2


SMALL_WORK = 50_000_000


@pytest.fixture(scope="session")
def thread_policy():
    return one_thread_for_small_work


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
    from gptstack.bench import run_attention, run_generate, run_ops, run_tokenizer, run_train

    out: dict[str, Path] = {}

    def options(name: str, **changes) -> SuiteOptions:
        out[name] = results_dir / f"{name}-cpu-test.json"
        return SuiteOptions(
            device="cpu",
            settings=TEST_SETTINGS,
            out=out[name],
            smoke=True,
            progress=False,
            command=["pytest", "bench"],
            **changes,
        )

    run_train(
        [ESP32, CHAR],
        rungs=["fp32", "bf16", "fused", "compile", "graph"],
        thread_policy=one_thread_for_small_work,
        thread_rung="bf16",
        options=options("train", compile_backend="aot_eager"),
    )
    run_generate(
        [ESP32],
        batches=(1, 2),
        sweep_prompt=(8,),
        sweep_new=(8,),
        thread_policy=one_thread_for_small_work,
        options=options("generate"),
    )
    run_attention([ESP32, CHAR], options=options("attention"))
    run_ops([CHAR], options=options("ops", compile_backend="eager"))
    data_file = Path(os.environ.get("GPTSTACK_DATA_DIR", "")) / "tinyshakespeare.txt"
    if data_file.is_file():
        run_tokenizer(data=data_file, options=options("tokenizer"))
    return out
