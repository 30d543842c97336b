"""RNG and sampler (FORMAT.md section 9): gs_rng_* and gs_sample against gptstack.quant's Pcg32 and
sample on the same logits, which must give the same ids and consume the same draws."""

from __future__ import annotations

import numpy as np
import pytest
from gs_engine_ctypes import GsError
from hypothesis import given, settings
from hypothesis import strategies as st

from gptstack.quant import Pcg32, sample

U64 = st.integers(0, 2**64 - 1)


# The Python Pcg32 itself is checked against O'Neill's published outputs in
# packages/quant/tests/test_sampling.py; here C must give its stream.
@given(seed=U64)
@settings(max_examples=200, deadline=None)
def test_pcg32_stream(engine, seed):
    c, py = engine.rng(seed), Pcg32(seed)
    assert [c.next_u32() for _ in range(8)] == [py.next_u32() for _ in range(8)]
    assert c.uniform() == py.uniform()


def _logits_strategy():
    # few distinct values so that ties (lowest id first) are common
    return st.builds(
        lambda n, levels, seed: np.random.default_rng(seed).choice(
            np.linspace(-4, 4, levels).astype(np.float32), size=n
        ),
        st.integers(1, 300),
        st.integers(1, 40),
        st.integers(0, 2**32 - 1),
    )


@pytest.fixture(scope="module")
def bpe_model(engine, bpe_artifact):
    return engine.open(bpe_artifact.data)


@given(
    logits=_logits_strategy(),
    temperature=st.sampled_from([0.0, -1.0, 0.3, 0.8, 1.0, 2.5]),
    top_k=st.integers(0, 320),
    seed=U64,
)
@settings(max_examples=300, deadline=None)
def test_sample_matches_reference(bpe_model, logits, temperature, top_k, seed):
    model = bpe_model
    V, Vt = model.vocab_size, model.config["n_tokens"]
    assert Vt < V  # the artifact has padding rows
    full = np.full(V, -1e9, np.float32)
    full[Vt:] = 1e9  # padding rows [Vt, V) are never sampled, however large their logits
    full[: min(len(logits), Vt)] = logits[:Vt]
    c_rng, py_rng = model.engine.rng(seed), Pcg32(seed)
    for _ in range(3):
        got = model.sample(full, temperature, top_k, c_rng)
        assert got == sample(full, temperature, top_k, py_rng, Vt)
        assert got < Vt
    assert c_rng.next_u32() == py_rng.next_u32()  # one draw per sampled token, none if greedy


def test_greedy_needs_no_rng_and_sampling_does(engine, bpe_artifact):
    model = engine.open(bpe_artifact.data)
    logits = np.zeros(model.vocab_size, np.float32)
    logits[5] = logits[9] = 1.0
    assert model.sample(logits, 0.0, 0, None) == 5  # lowest id on ties
    with pytest.raises(GsError) as e:
        model.sample(logits, 1.0, 0, None)
    assert e.value.status == "GS_ERR_NULL"
