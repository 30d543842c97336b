"""The numpy int8 reference: its steps, step-by-step == full-sequence, and the sliding window."""

from __future__ import annotations

import numpy as np
import pytest

from gptstack.quant import (
    ModelSpec,
    QuantError,
    Session,
    forward_sequence,
    gelu,
    generate,
    layernorm,
    linear,
    quantize_vector,
    read_artifact,
    synthetic_artifact,
)
from gptstack.quant.reference import QLinear

F32 = np.float32
# step-by-step vs full-sequence: the same float32 operations, only summation orders differ
# (BLAS gemv vs gemm, pairwise sums), and those rarely move an activation across an int8
# rounding boundary: max |diff| / max |logit| stays near 1e-6; 1e-4 leaves room for such a flip.
DECODE_TOL = 1e-4


def test_quantize_vector_matches_a_scalar_float32_loop(rng):
    x = (rng.normal(size=(6, 37)) * rng.lognormal(0, 2, (6, 1))).astype(F32)
    q, s = quantize_vector(x)
    for row, qrow, srow in zip(x, q, s):
        m = max(abs(v) for v in row)
        inv = F32(127.0) / m
        expected = [int(min(127, max(-127, np.rint(v * inv)))) for v in row]
        assert qrow.tolist() == expected and srow == m / F32(127.0)
        assert np.abs(qrow).max() == 127


def test_quantize_vector_edge_cases():
    q, s = quantize_vector(np.zeros(8, F32))
    assert not q.any() and s == 0
    q, s = quantize_vector(np.array([127.0, 2.5, 3.5, -2.5, 0.49], F32))  # inv = 1: rint half-even
    assert q.tolist() == [127, 2, 4, -2, 0] and s == 1.0


@pytest.mark.parametrize("K", [96, 2048])  # float32 path, and the float64 path (K > 1040)
def test_linear_integer_dot_is_exact(rng, K):
    R = 24
    w = rng.integers(-127, 128, (R, K)).astype(np.int8)
    w[0] = 127  # a row whose dot with an all-max input exceeds 2^24
    sw = rng.uniform(1e-4, 1e-2, R).astype(F32)
    b = rng.normal(size=R).astype(F32)
    x = rng.normal(size=(5, K)).astype(F32)
    x[0] = 3.0  # quantizes to all 127
    y = linear(x, QLinear(w.T.astype(F32), sw, b))
    q, s = quantize_vector(x)
    acc = q.astype(np.int64) @ w.T.astype(np.int64)  # exact integers
    assert np.abs(acc).max() < 2**31
    expected = (acc.astype(F32) * s[:, None]) * sw + b
    np.testing.assert_array_equal(y, expected)


def test_layernorm_and_gelu_against_float64(rng):
    x = rng.normal(size=(4, 64)).astype(F32) * 3 + 1
    w, b = rng.normal(size=64).astype(F32), rng.normal(size=64).astype(F32)
    x64 = x.astype(np.float64)
    ln = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(layernorm(x, w, b, 1e-5), ln, rtol=1e-5, atol=1e-5)
    g = 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64**3)))
    np.testing.assert_allclose(gelu(x), g, rtol=1e-5, atol=1e-6)
    assert layernorm(x, w, b, 1e-5).dtype == F32 and gelu(x).dtype == F32


@pytest.mark.parametrize("act", ["int8", "fp32"])
def test_step_by_step_equals_full_sequence(tiny_artifact, rng, act):
    T, V = tiny_artifact.spec.block_size, tiny_artifact.spec.vocab_size
    ids = rng.integers(0, V, (3, T))  # every position 0 .. T-1, padding ids included
    full = forward_sequence(tiny_artifact, ids, act=act)
    assert full.shape == (3, T, V) and full.dtype == F32
    for row in range(3):
        session = Session(tiny_artifact, act=act)
        steps = np.stack([session.feed(t) for t in ids[row]])
        scale = np.abs(full[row]).max()
        assert np.abs(steps - full[row]).max() / scale < DECODE_TOL
        # a prefix of the sequence gives the same logits as the whole (causality)
        prefix = forward_sequence(tiny_artifact, ids[row, : T // 2], act=act)
        assert np.abs(prefix - full[row, : T // 2]).max() / scale < DECODE_TOL


def test_int8_and_fp32_activations_differ_but_agree(tiny_artifact, rng):
    ids = rng.integers(0, 300, 16)
    a, b = forward_sequence(tiny_artifact, ids), forward_sequence(tiny_artifact, ids, act="fp32")
    rel = np.linalg.norm(a - b) / np.linalg.norm(b)
    assert 0 < rel < 0.05  # int8 activations cost a little, on synthetic weights ~1e-2


def test_sliding_window_follows_section_8(bpe_tables, rng):
    spec = ModelSpec(300, 8, 2, 2, 16, bias=False, bos_token=299)
    art = read_artifact(synthetic_artifact(spec, bpe_tables, seed=7))
    T = spec.block_size
    session = Session(art)
    window: list[int] = []  # the spec's window, kept independently
    for step, tok in enumerate(rng.integers(0, 300, 3 * T + 3).tolist()):
        if len(window) == T:
            window = window[T // 2:]
        window.append(tok)
        got = session.feed(tok)
        expected = forward_sequence(art, np.array(window))[-1]
        assert np.abs(got - expected).max() / np.abs(expected).max() < DECODE_TOL, step
        assert session.pos == len(window) and session.window == window


def test_bad_tokens_and_modes(tiny_artifact):
    session = Session(tiny_artifact)
    session.feed(319)  # a padding row: allowed (only ids >= V are errors, like GS_ERR_TOKEN)
    with pytest.raises(QuantError, match="token id 320"):
        session.feed(320)
    with pytest.raises(QuantError, match="token id -1"):
        forward_sequence(tiny_artifact, np.array([[1, -1]]))
    with pytest.raises(QuantError, match="sequence length 17"):
        forward_sequence(tiny_artifact, np.zeros((1, 17), int))
    with pytest.raises(QuantError, match="act"):
        Session(tiny_artifact, act="int4")


def test_empty_prompt_starts_from_bos(tiny_artifact, bpe_tables):
    bos = tiny_artifact.spec.bos_token
    assert generate(tiny_artifact, [], 6, 0.9, 0, seed=3) == generate(tiny_artifact, [bos], 6, 0.9,
                                                                        0, seed=3)
    no_bos = read_artifact(synthetic_artifact(ModelSpec(300, 4, 1, 1, 8, False), bpe_tables))
    with pytest.raises(QuantError, match="no bos_token"):
        generate(no_bos, [], 3)
