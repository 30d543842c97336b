"""Sampling: greedy, filters never leak (property test), the draw follows the distribution."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gptstack.model import ModelError, logits_to_probs, make_generator, sample


def allowed_tokens(logits: np.ndarray, temperature: float, top_k, top_p) -> set[int]:
    """Independent float64 statement of the filters: top-k by logit (ties at the k-th kept), then
    the smallest most-likely prefix of the renormalised distribution reaching top_p. A token whose
    preceding mass is within 1e-6 of top_p counts as allowed (fp32 vs fp64 rounding)."""
    z = logits.astype(np.float64) / temperature
    keep = np.ones_like(z, dtype=bool)
    if top_k is not None and top_k < len(z):
        keep = z >= np.sort(z)[::-1][top_k - 1]
    p = np.where(keep, np.exp(z - z[keep].max()), 0.0)
    p /= p.sum()
    if top_p is not None:
        order = np.argsort(-p, kind="stable")
        before = np.cumsum(p[order]) - p[order]
        keep_sorted = before < top_p + 1e-6
        keep = np.zeros_like(keep)
        keep[order[keep_sorted]] = True
        keep &= p > 0
    return set(np.flatnonzero(keep).tolist())


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    B=st.integers(1, 3),
    V=st.integers(2, 40),
    temperature=st.sampled_from([0.3, 1.0, 2.5]),
    top_k=st.one_of(st.none(), st.integers(1, 45)),
    top_p=st.one_of(st.none(), st.floats(0.05, 1.0)),
    scale=st.sampled_from([0.5, 3.0, 10.0]),
)
def test_filters_never_choose_outside_the_allowed_set(seed, B, V, temperature, top_k, top_p, scale):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, V, generator=g) * scale
    generator = make_generator(seed, "cpu")
    repeated = logits.repeat(200, 1)  # (200 * B, V): 200 independent draws per row at once
    draws = sample(
        repeated, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator
    ).view(200, B)
    for b in range(B):
        allowed = allowed_tokens(logits[b].numpy(), temperature, top_k, top_p)
        assert set(draws[:, b].tolist()) <= allowed
        probs = logits_to_probs(logits[b : b + 1], temperature, top_k, top_p)[0]
        assert set(torch.nonzero(probs).flatten().tolist()) <= allowed
        assert math.isclose(probs.sum().item(), 1.0, rel_tol=1e-5)


def test_greedy_is_argmax_and_top_k_one_is_greedy():
    logits = torch.randn(4, 30, generator=torch.Generator().manual_seed(0))
    assert torch.equal(sample(logits, temperature=0), logits.argmax(-1))
    assert torch.equal(
        sample(logits, top_k=1, generator=make_generator(1, "cpu")), logits.argmax(-1)
    )


def test_draws_follow_the_softmax_distribution():
    # 20000 draws: each frequency's standard error is <= sqrt(0.25/20000) = 0.0035, so 0.015 is
    # more than 4 standard errors.
    logits = torch.tensor([[0.0, 1.0, -1.0, 2.0, 0.5]])
    generator = make_generator(123, "cpu")
    draws = torch.cat([sample(logits.expand(1000, 5), generator=generator) for _ in range(20)])
    freq = torch.bincount(draws, minlength=5).double() / draws.numel()
    assert torch.allclose(freq, torch.softmax(logits[0].double(), -1), atol=0.015)


def test_same_seed_same_draws_and_seed_validation():
    logits = torch.randn(2, 50, generator=torch.Generator().manual_seed(5))

    def draws(seed):
        generator = make_generator(seed, "cpu")
        return torch.stack([sample(logits, generator=generator) for _ in range(20)])

    assert torch.equal(draws(7), draws(7))
    assert not torch.equal(draws(7), draws(8))
    with pytest.raises(ModelError, match="seed"):
        make_generator(-1, "cpu")


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(temperature=-1.0), "temperature"),
        (dict(top_k=0), "top_k"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
    ],
)
def test_bad_settings_are_rejected_by_generate(make_gpt, random_tokens, kwargs, field):
    from gptstack.model import generate

    model = make_gpt(0)
    with pytest.raises(ModelError, match=field):
        generate(model, random_tokens(0, 1, 3, model.config.vocab_size), 2, **kwargs)
