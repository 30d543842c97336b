"""train.cuda_batch_size: the micro-batch a GPU step uses (schedule.cuda_micro_batch), the
memory estimate that decides it (train.step_memory_bytes) and the config's check."""

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from gptstack.tools.config import TrainSection, apply_overrides, load_preset
from gptstack.tools.errors import ConfigError
from gptstack.tools.schedule import cuda_micro_batch
from gptstack.tools.shards import ShardStream, regrouped_batches, train_batch, write_shard
from gptstack.tools.train import LOGIT_BYTES, model_config, step_memory_bytes


@given(
    batch=st.sampled_from([1, 2, 3, 4, 8, 16]),
    accum=st.integers(1, 64),
    asked=st.sampled_from([0, 1, 2, 4, 8, 16, 32, 64, 128, 256]),
    limit=st.integers(0, 300),
    world=st.sampled_from([1, 2, 4]),
)
def test_the_micro_batch_keeps_the_step_and_fits(batch, accum, asked, limit, world):
    sequences = batch * accum
    assume(not asked or sequences % asked == 0)  # the config refuses the rest (test below)
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


@given(
    batch=st.integers(1, 6),
    accum=st.integers(1, 8),
    step=st.integers(0, 50),
    seed=st.integers(0, 2**31 - 1),
    shards=st.booleans(),
    data=st.data(),
)
def test_a_step_is_the_same_sequences_in_any_micro_batch(
    tmp_path_factory, batch, accum, step, seed, shards, data
):
    sequences = batch * accum
    rows = data.draw(st.sampled_from([r for r in range(1, sequences + 1) if sequences % r == 0]))
    tokens = np.random.default_rng(seed).integers(0, 500, 4000)
    if shards:  # the sequential blocks of a shard corpus
        path = tmp_path_factory.mktemp("shards") / "s_train_000000.bin"
        corpus = SimpleNamespace(train=ShardStream([write_shard(path, tokens.astype(np.uint16))]))
    else:  # the random windows of a text corpus, seeded by (seed, step, micro)
        corpus = SimpleNamespace(train=tokens)
    T = 7

    def step_of(micro_batches, draw):
        parts = [draw(m) for m in range(micro_batches)]
        return np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts])

    configured = step_of(accum, lambda m: train_batch(corpus, batch, T, seed, step, m, accum))
    parts = regrouped_batches(corpus, batch, accum, T, seed, step, rows, range(sequences // rows))
    regrouped = step_of(sequences // rows, lambda m: parts[m])
    assert regrouped[0].shape == (sequences, T)
    np.testing.assert_array_equal(regrouped[0], configured[0])
    np.testing.assert_array_equal(regrouped[1], configured[1])


@pytest.mark.parametrize(("rows", "micros"), [(1, range(8)), (8, [0]), (2, [1, 3])])
def test_each_configured_micro_batch_is_drawn_once_per_step(monkeypatch, rows, micros):
    import gptstack.tools.shards as shards

    drawn = []
    real = shards.train_batch

    def counting(corpus, batch_size, block_size, seed, step, micro, grad_accum):
        drawn.append(micro)
        return real(corpus, batch_size, block_size, seed, step, micro, grad_accum)

    monkeypatch.setattr(shards, "train_batch", counting)
    corpus = SimpleNamespace(train=np.arange(500))
    parts = regrouped_batches(corpus, 4, 2, 5, 0, 3, rows, micros)  # 2 x 4 sequences a step
    assert [x.shape for x, _ in parts] == [(rows, 5)] * len(micros)
    # the configured micro-batches the requested ones cut from, each drawn once
    need = sorted({(m * rows + i) // 4 for m in micros for i in range(rows)})
    assert sorted(drawn) == need


def test_the_grown_micro_batch_trains_the_configured_steps(train_smoke, monkeypatch):
    """On the CPU, with the GPU's choice stubbed to 8 x 1: the losses of the run configured at
    2 x 4 (the same sequences a step, the same val windows)."""
    import gptstack.tools.train as train_mod

    def run(name, batch_size=2, grad_accum=4):
        records, _ = train_smoke(
            name, "train.dtype=fp32", "model.dropout=0", "train.max_steps=4",
            "train.eval_interval=2", "train.log_interval=1", f"train.batch_size={batch_size}",
            f"train.grad_accum={grad_accum}",
        )  # fmt: skip
        return records

    configured = run("configured")
    grown_to = []

    def grow(t, mcfg, n_params, runtime, world_size, log):
        grown_to.append(dataclasses.replace(t, batch_size=8, grad_accum=1))
        return grown_to[-1]

    monkeypatch.setattr(train_mod, "gpu_micro_batch", grow)
    grown = run("grown")
    assert len(grown_to) == 1
    assert sorted(grown["train"]) == sorted(configured["train"]) == [1, 2, 3, 4]
    for step, r in grown["train"].items():  # to float rounding: 4 partial sums against 1
        assert r["loss"] == pytest.approx(configured["train"][step]["loss"], rel=1e-4)
    for step, r in grown["eval"].items():
        assert r["val_loss"] == pytest.approx(configured["eval"][step]["val_loss"], rel=1e-4)
    # a run configured at 8 x 1 draws other windows: its losses are not the configured run's
    other = run("eight", batch_size=8, grad_accum=1)
    gaps = [abs(other["train"][s]["loss"] / r["loss"] - 1) for s, r in configured["train"].items()]
    assert max(gaps) > 1e-3


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
    assert extra == mcfg.block_size * mcfg.vocab_size * LOGIT_BYTES


@pytest.mark.parametrize(
    ("limit", "world", "expect", "says"),
    [
        (128, 1, (128, 4), "micro-batch 128 x 4 on this GPU (train.cuda_batch_size=128; "),
        (100, 1, (64, 8), "micro-batch 64 x 8 on this GPU"),
        (40, 1, (32, 16), "micro-batch 32 x 16 on this GPU"),
        (20, 1, (16, 32), "is not used: no micro-batch above 16 is expected to fit this GPU's"),
        (128, 16, (32, 16), "micro-batch 32 x 16"),  # 128 x 4 would not split over 16 ranks
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
    gpu = SimpleNamespace(device_type="cuda", device="cuda:7")
    t = train_mod.gpu_micro_batch(
        cfg.train, model_config(cfg, 50257), 123, gpu, world, logged.append
    )
    assert (t.batch_size, t.grad_accum) == expect
    assert dataclasses.replace(t, batch_size=16, grad_accum=32) == cfg.train  # nothing else
    assert asked == [(123, "cuda:7")] and len(logged) == 1 and says in logged[0]
    # on a CPU the section is the configured one, and no GPU is asked
    cpu = SimpleNamespace(device_type="cpu", device="cpu")
    assert train_mod.gpu_micro_batch(cfg.train, None, 123, cpu, world, logged.append) is cfg.train
    assert len(asked) == 1 and len(logged) == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_the_step_runs_the_larger_micro_batch_and_evaluates_as_configured(
    train_smoke,
):
    def run(name, *sets):
        logged = []
        records, _ = train_smoke(
            name, "train.device=cuda", "train.compile=false", "train.max_steps=4",
            "train.eval_interval=2", "train.log_interval=1", *sets, log=logged.append,
        )  # fmt: skip
        return records, logged

    grown, logged = run("grown", "model.dropout=0", "train.batch_size=2", "train.grad_accum=4",
                        "train.cuda_batch_size=8")  # fmt: skip
    assert any("micro-batch 8 x 1 on this GPU" in line for line in logged)
    configured, _ = run("configured", "model.dropout=0", "train.batch_size=2", "train.grad_accum=4")
    # the same sequences a step, in one micro-batch instead of four: the same losses to the
    # GPU's rounding, and the same val windows
    for step, r in grown["train"].items():
        assert r["loss"] == pytest.approx(configured["train"][step]["loss"], rel=2e-3)
    for step, r in grown["eval"].items():
        assert r["val_loss"] == pytest.approx(configured["eval"][step]["val_loss"], rel=2e-3)
    assert grown["end"][4]["peak_memory_bytes"] > 0
