"""Training's loss estimate (device-resident batches, one sync per split, CUDA graph on GPU)
against the plain loop it replaces."""

import pytest
import torch

from gptstack.model import GPT
from gptstack.tools.config import apply_overrides, load_preset
from gptstack.tools.data import batch_rng, get_batch, prepare_corpus
from gptstack.tools.evaluate import EVAL_STREAM, LossEstimator
from gptstack.tools.runtime import resolve_runtime
from gptstack.tools.train import model_config


def setup(small_corpus, device: str):
    cfg = apply_overrides(
        load_preset("smoke"), [f"data.path={small_corpus}", f"train.device={device}"]
    )
    corpus = prepare_corpus(cfg)
    runtime = resolve_runtime(cfg.train)
    torch.manual_seed(0)
    model = GPT(model_config(cfg, corpus.tokenizer.vocab_size)).to(runtime.device)
    return cfg, corpus, runtime, model


def estimator_options(cfg, runtime, batches):
    return dict(
        batch_size=cfg.train.batch_size,
        block_size=cfg.model.block_size,
        batches=batches,
        seed=cfg.train.seed,
        runtime=runtime,
    )


def plain_loop(model, corpus, cfg, runtime, batches):
    out = {}
    model.eval()
    with torch.no_grad():
        for split_id, (split, tokens) in enumerate((("train", corpus.train), ("val", corpus.val))):
            losses = []
            for i in range(batches):
                x, y = runtime.to_device(
                    *get_batch(
                        tokens,
                        cfg.train.batch_size,
                        cfg.model.block_size,
                        batch_rng(cfg.train.seed, EVAL_STREAM, split_id, i),
                    )
                )
                with runtime.autocast():
                    losses.append(model(x, y)[1].item())
            out[split] = sum(losses) / batches
    return out


def test_estimate_equals_the_plain_loop(small_corpus):
    cfg, corpus, runtime, model = setup(small_corpus, "cpu")
    model.train()
    est = LossEstimator(model, corpus, **estimator_options(cfg, runtime, 5))
    got = est()
    assert model.training  # restored
    ref = plain_loop(model, corpus, cfg, runtime, 5)
    assert got == pytest.approx(ref, rel=1e-6)
    assert est() == got  # the same batches every call
    scored = sum(
        x.numel() for split in est.splits for x, _, counted in est._batches(split) if counted
    )
    assert est.tokens_per_evaluation == scored  # what run_estimate counts an evaluation as


def test_batches_too_many_to_keep_are_drawn_per_call_and_score_the_same(small_corpus, monkeypatch):
    from gptstack.tools import evaluate

    cfg, corpus, runtime, model = setup(small_corpus, "cpu")
    kwargs = estimator_options(cfg, runtime, 5)
    resident = LossEstimator(model, corpus, **kwargs)
    monkeypatch.setattr(evaluate, "RESIDENT_BYTES", 0)  # nothing fits: every batch drawn per call
    streamed = LossEstimator(model, corpus, **kwargs)
    assert all(b is not None for b in resident.splits.values())
    assert all(b is None for b in streamed.splits.values())
    assert streamed() == resident() == streamed()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_captured_estimate_equals_the_eager_one_on_cuda(small_corpus):
    cfg, corpus, runtime, model = setup(small_corpus, "cuda")
    kwargs = estimator_options(cfg, runtime, 6)
    eager = LossEstimator(model, corpus, **kwargs)()
    graphed = LossEstimator(model, corpus, cuda_graph=True, **kwargs)
    assert graphed() == pytest.approx(eager, rel=1e-5)
    assert graphed() == pytest.approx(eager, rel=1e-5)  # replayed again
