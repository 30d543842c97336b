"""Fixtures for the tools tests: an isolated cache dir, a temporary working directory and a tiny
corpus."""

from pathlib import Path

import pytest
import torch

FIRMWARE = Path(__file__).resolve().parents[2] / "firmware" / "esp32"


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch):
    # Token memmaps go to a per-session temp folder, never to ~/.cache.
    monkeypatch.setenv("GPTSTACK_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(autouse=True)
def working_dir(tmp_path_factory, monkeypatch):
    """Each test runs in an empty folder of its own, so a default output path (runs/PRESET,
    runs/pipeline, benchmarks/results) lands there and `uv run pytest` leaves the checkout as
    it found it."""
    cwd = tmp_path_factory.mktemp("cwd")
    monkeypatch.chdir(cwd)
    # outside the checkout, `gptstack firmware` finds its C sources through this setting
    monkeypatch.setenv("GPTSTACK_FIRMWARE_DIR", str(FIRMWARE))
    return cwd


@pytest.fixture
def small_corpus(tmp_path, shakespeare_text):
    """The first 60k characters of Tiny Shakespeare as a --data file."""
    path = tmp_path / "small.txt"
    path.write_text(shakespeare_text[:60_000], encoding="utf-8")
    return path


@pytest.fixture
def train_smoke(tmp_path, small_corpus):
    """train_smoke(name, *overrides, log=...) trains the smoke preset on the small corpus on the
    CPU (an override may name another device) into tmp_path/name and returns (metrics records by
    event, the checkpoint's model config)."""
    import json

    from gptstack.tools.config import apply_overrides, load_preset
    from gptstack.tools.train import train

    def run(
        name: str, *overrides: str, log=lambda s: None
    ) -> tuple[dict[str, dict[int, dict]], dict]:
        settings = [f"data.path={small_corpus}", "train.device=cpu", *overrides]
        train(apply_overrides(load_preset("smoke"), settings), tmp_path / name, progress=False,
              log=log)  # fmt: skip
        lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        records: dict[str, dict[int, dict]] = {}
        for r in map(json.loads, lines):
            records.setdefault(r["event"], {})[r["step"]] = r
        meta = json.loads((tmp_path / name / "last" / "config.json").read_text())
        return records, meta["model"]

    return run


@pytest.fixture
def one_thread(monkeypatch):
    """One intra-op thread while the test runs, as each of torchrun's processes gets
    (OMP_NUM_THREADS=1): on a shared 2-core machine, two threads per process only contend. The
    variable is set too, so the thread policy of train() (threads.py) keeps that one thread in
    this process and in every process the test starts: the same reduction order everywhere."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
