"""train.cuda_batch_size: the micro-batch a GPU step uses (schedule.cuda_micro_batch), the
memory estimate that decides it (train.step_memory_bytes) and the config's check."""

import dataclasses
import json

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from gptstack.tools.config import TrainSection, apply_overrides, load_preset
from gptstack.tools.errors import ConfigError
from gptstack.tools.schedule import cuda_micro_batch
from gptstack.tools.train import model_config, step_memory_bytes, train


@given(
    batch=st.sampled_from([1, 2, 3, 4, 8, 16]),
    accum=st.integers(1, 64),
    asked=st.sampled_from([0, 1, 2, 4, 8, 16, 32, 64, 128, 256]),
    limit=st.integers(0, 300),
    world=st.sampled_from([1, 2, 4]),
)
def test_the_micro_batch_keeps_the_step_and_fits(batch, accum, asked, limit, world):
    sequences = batch * accum
    if asked and sequences % asked:
        return  # the config refuses it (test below)
    train = TrainSection(batch_size=batch, grad_accum=accum, cuda_batch_size=asked)
    asked_fits = []
    rows, n = cuda_micro_batch(train, lambda r: asked_fits.append(r) or r <= limit, world)
    assert rows * n == sequences  # the step's sequences, whatever the micro-batch
    if asked and asked <= batch:
        assert (rows, n) == (asked, sequences // asked)  # smaller than configured: as asked
        return
    # never below the configured micro-batch; larger only where it fits and splits per rank
    assert rows >= batch
    if rows > batch:
        assert rows <= limit and n % world == 0 and rows in asked_fits
    else:
        assert (rows, n) == (batch, accum)
    # the largest candidate that qualified: every larger power-of-two halving was refused
    for r in asked_fits:
        if r > rows:
            assert r > limit or sequences % r or (sequences // r) % world


def test_a_micro_batch_that_does_not_divide_the_step_is_refused():
    sets = ["train.batch_size=16", "train.grad_accum=3", "train.cuda_batch_size=32"]
    with pytest.raises(ConfigError, match="train.cuda_batch_size must be 0 or divide .* 48"):
        apply_overrides(load_preset("smoke"), sets)
    # 48 / 24 = 2 micro-batches: accepted
    cfg = apply_overrides(load_preset("smoke"), [*sets[:2], "train.cuda_batch_size=24"])
    assert cfg.train.cuda_batch_size == 24


def test_gpt2_124m_memory_estimate_grows_with_rows_and_the_logits():
    cfg = load_preset("gpt2-124m")
    mcfg = model_config(cfg, 50257)
    n = 124_000_000
    native = dataclasses.replace(mcfg, ops="gptstack:loss")
    torch_loss = dataclasses.replace(mcfg, ops="torch")
    one, two = step_memory_bytes(native, n, 1), step_memory_bytes(native, n, 2)
    assert two - one == step_memory_bytes(native, n, 3) - two > 0  # linear in rows
    assert step_memory_bytes(native, n, 0) == 16 * n  # weights, grads, AdamW's two moments
    # without the native loss every row also holds its T x V logits
    extra = step_memory_bytes(torch_loss, n, 1) - one
    assert extra == mcfg.block_size * mcfg.vocab_size * 4


@pytest.mark.parametrize(
    ("limit", "world", "expect", "says"),
    [
        (64, 1, (64, 8), "micro-batch 64 x 8 on this GPU (train.cuda_batch_size=64; configured"),
        (40, 1, (32, 16), "micro-batch 32 x 16 on this GPU"),
        (20, 1, (16, 32), "is not used: no micro-batch above 16 is expected to fit this GPU's"),
        (64, 16, (32, 16), "micro-batch 32 x 16"),  # 64 x 8 would not split over 16 ranks
    ],
)
def test_gpu_micro_batch_replaces_the_section_and_says_so(monkeypatch, limit, world, expect, says):
    import gptstack.tools.train as train_mod

    asked = []

    def fits_gpu(mcfg, n_params, device):
        asked.append((n_params, device))
        return lambda rows: rows <= limit

    monkeypatch.setattr(train_mod, "fits_gpu", fits_gpu)
    cfg = load_preset("gpt2-124m")
    logged = []
    t = train_mod.gpu_micro_batch(
        cfg.train, model_config(cfg, 50257), 123, "cuda:7", world, logged.append
    )
    assert (t.batch_size, t.grad_accum) == expect
    assert dataclasses.replace(t, batch_size=16, grad_accum=32) == cfg.train  # nothing else
    assert asked == [(123, "cuda:7")] and len(logged) == 1 and says in logged[0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_the_step_runs_the_larger_micro_batch_and_evaluates_as_configured(
    tmp_path, small_corpus
):
    def run(name, *sets):
        settings = [
            f"data.path={small_corpus}",
            "train.device=cuda",
            "train.compile=false",
            "train.max_steps=4",
            "train.eval_interval=2",
            "train.log_interval=1",
            *sets,
        ]
        logged = []
        train(apply_overrides(load_preset("smoke"), settings), tmp_path / name, progress=False,
              log=logged.append)  # fmt: skip
        records = {}
        for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines():
            r = json.loads(line)
            records.setdefault(r["event"], {})[r["step"]] = r
        return records, logged

    grown, logged = run("grown", "train.batch_size=2", "train.grad_accum=4",
                        "train.cuda_batch_size=8")  # fmt: skip
    assert any("micro-batch 8 x 1 on this GPU" in line for line in logged)
    configured, _ = run("configured", "train.batch_size=2", "train.grad_accum=4")
    as_one, _ = run("as_one", "train.batch_size=8", "train.grad_accum=1")
    # the steps are the 8-sequence micro-batches a run configured so would draw ...
    for step, r in grown["train"].items():
        assert r["loss"] == pytest.approx(as_one["train"][step]["loss"], rel=1e-4)
    # ... and the evaluations those of the configured micro-batch (the same val windows)
    first_eval = configured["eval"][0]["val_loss"]
    assert grown["eval"][0]["val_loss"] == pytest.approx(first_eval, rel=1e-5)
    assert grown["end"][4]["peak_memory_bytes"] > 0
