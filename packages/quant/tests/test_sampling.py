"""PCG32 and the sampler of FORMAT.md section 9."""

from __future__ import annotations

import numpy as np
import pytest

from gptstack.quant import Pcg32, QuantError, fmath, generate, sample

F32 = np.float32


def test_pcg32_matches_oneills_published_demo():
    # pcg32-demo.c (github.com/imneme/pcg-c-basic) seeds pcg32_srandom_r(&rng, 42u, 54u) and
    # prints, in round 1: 0xa15c02b7 0x7b47f409 0xba1d3330 0x83d2f293 0xbfa4784b 0xcbed606e
    rng = Pcg32(42, stream=54)
    got = [rng.next_u32() for _ in range(6)]
    assert got == [0xA15C02B7, 0x7B47F409, 0xBA1D3330, 0x83D2F293, 0xBFA4784B, 0xCBED606E]


def _plain_pcg32(seed: int, count: int) -> list[int]:
    """FORMAT.md section 9 written out again, independently of rng.py."""
    mask = 2**64 - 1
    state, inc = 0, ((0xDA3E39CB94B95BDB << 1) | 1) & mask
    out = []

    def step():
        nonlocal state
        old = state
        state = (old * 6364136223846793005 + inc) & mask
        x = ((old ^ (old >> 18)) >> 27) & 0xFFFFFFFF
        r = old >> 59
        return ((x >> r) | (x << (32 - r))) & 0xFFFFFFFF if r else x

    step()
    state = (state + seed) & mask
    step()
    for _ in range(count):
        out.append(step())
    return out


def test_pcg32_seeding_and_uniform(rng):
    for seed in [0, 1, 2**64 - 1, *rng.integers(0, 2**63, 3).tolist()]:
        gen = Pcg32(seed)
        assert [gen.next_u32() for _ in range(50)] == _plain_pcg32(seed, 50)
    gen, ref = Pcg32(7), Pcg32(7)
    for _ in range(1000):
        u = gen.uniform()
        assert isinstance(u, np.float32) and 0 <= u < 1
        assert u == (ref.next_u32() >> 8) / 2**24  # exact: 24 bits fit a float32


def _plain_sample(logits, temperature, top_k, rng, n_tokens) -> int:
    """FORMAT.md section 9's sampler as a Python loop over float32 scalars."""
    z = [F32(v) for v in logits[:n_tokens]]
    if temperature <= 0:
        return max(range(n_tokens), key=lambda i: (z[i], -i))
    k = top_k if 0 < top_k < n_tokens else n_tokens
    cand = sorted(range(n_tokens), key=lambda i: (-z[i], i))[:k]
    t = F32(temperature)
    zc = [z[i] / t for i in cand]
    e = [fmath.exp(np.array([F32(v - zc[0])]))[0] for v in zc]
    total = F32(0)
    for v in e:
        total = F32(total + v)
    u = F32(rng.uniform()) * total
    cum = F32(0)
    for i, v in zip(cand, e):
        cum = F32(cum + v)
        if u < cum:
            return i
    return cand[-1]


def test_sampler_matches_a_plain_loop(rng):
    for trial in range(60):
        V = int(rng.integers(2, 80))
        n_tokens = int(rng.integers(1, V + 1))
        logits = (rng.normal(size=V) * rng.uniform(0.1, 5)).astype(F32)
        logits[rng.integers(0, V, 3)] = logits[0]  # ties
        temperature = float(rng.choice([0.0, -1.0, 0.3, 1.0, 2.5]))
        top_k = int(rng.choice([0, 1, 3, 10, V + 5]))
        a, b = Pcg32(trial), Pcg32(trial)
        got = [sample(logits, temperature, top_k, a, n_tokens) for _ in range(5)]
        want = [_plain_sample(logits, temperature, top_k, b, n_tokens) for _ in range(5)]
        assert got == want
        assert a.state == b.state  # the same number of draws


def test_greedy_takes_the_lowest_id_on_ties_and_draws_nothing():
    logits = np.array([0.0, 3.0, 1.0, 3.0, 3.0], F32)
    gen = Pcg32(1)
    state = gen.state
    assert sample(logits, 0.0, 0, gen, 5) == 1
    assert gen.state == state


def test_one_draw_per_token_top_k_and_never_padding(rng):
    V, n_tokens = 64, 50
    logits = rng.normal(size=V).astype(F32)
    logits[n_tokens:] = 100.0  # padding rows with the largest logits: never sampled
    top5 = set(np.argsort(-logits[:n_tokens])[:5].tolist())
    gen, counter = Pcg32(3), Pcg32(3)
    seen = set()
    for _ in range(300):
        tok = sample(logits, 1.5, 5, gen, n_tokens)
        counter.next_u32()
        assert gen.state == counter.state
        assert tok in top5
        seen.add(tok)
    assert seen == top5  # at temperature 1.5 every candidate shows up
    assert all(sample(logits, 1.0, 0, gen, n_tokens) < n_tokens for _ in range(200))
    assert sample(logits, 0.0, 0, gen, n_tokens) < n_tokens


def test_sampling_frequencies_follow_the_softmax(rng):
    logits = rng.normal(size=6).astype(F32)
    p = np.exp(logits / 0.8) / np.exp(logits / 0.8).sum()
    gen = Pcg32(11)
    n = 6000
    counts = np.bincount([sample(logits, 0.8, 0, gen, 6) for _ in range(n)], minlength=6)
    # binomial standard deviation per count; 5 sigma
    assert np.all(np.abs(counts - n * p) <= 5 * np.sqrt(n * p * (1 - p)) + 1)


def test_sample_rejects_bad_n_tokens():
    with pytest.raises(QuantError, match="n_tokens"):
        sample(np.zeros(4, F32), 1.0, 0, Pcg32(0), 5)


def test_generate_is_reproducible_per_seed(tiny_artifact):
    a = generate(tiny_artifact, [5, 6, 7], 20, 1.0, 0, seed=1)
    assert a == generate(tiny_artifact, [5, 6, 7], 20, 1.0, 0, seed=1)
    assert a != generate(tiny_artifact, [5, 6, 7], 20, 1.0, 0, seed=2)
    assert len(a) == 20 and all(0 <= t < tiny_artifact.tables.n_tokens for t in a)
    greedy = generate(tiny_artifact, [5, 6, 7], 20, 0.0, 0, seed=1)
    assert greedy == generate(tiny_artifact, [5, 6, 7], 20, 0.0, 0, seed=99)  # no RNG used
