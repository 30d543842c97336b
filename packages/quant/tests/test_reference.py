"""The numpy int8 reference: its steps, step-by-step == full-sequence (bit for bit), the sums in
FORMAT.md section 7's order, and the sliding window."""

from __future__ import annotations

import numpy as np
import pytest

from gptstack.quant import (
    KVCache,
    ModelSpec,
    QuantError,
    Session,
    attend,
    fmath,
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
# act="fp32" (a measuring aid, not in the engine) multiplies float activations by the weights
# with BLAS, whose summation order differs between gemv (one row) and gemm (many): the two modes
# agree there to float32 rounding (measured ~1e-6 of the logit range), not bit for bit.
FP32_DECODE_TOL = 1e-4


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(
        np.asarray(a, F32).view(np.uint32), np.asarray(b, F32).view(np.uint32)
    )


def assert_decode_equal(got: np.ndarray, want: np.ndarray, act: str, what: str = "") -> None:
    """int8: bit for bit; fp32: within FP32_DECODE_TOL of the logit range."""
    if act == "int8":
        assert same_bits(got, want), f"{what}: max diff {np.abs(got - want).max():.3g}"
    else:
        assert np.abs(got - want).max() / np.abs(want).max() < FP32_DECODE_TOL, what


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


def test_layernorm_sums_are_sequential(rng):
    """mean and variance summed left to right from the first term, as FORMAT.md section 7."""
    x = (rng.normal(size=(5, 96)) * rng.lognormal(0, 2, (5, 1)) + 3).astype(F32)
    w, b = rng.normal(size=96).astype(F32), rng.normal(size=96).astype(F32)
    for bias in (b, None):
        got = layernorm(x, w, bias, 1e-5)
        for row, out in zip(x, got):
            s = row[0]
            for v in row[1:]:
                s = F32(s + v)
            mean = F32(s / F32(96))
            d = [F32(v - mean) for v in row]
            s = F32(d[0] * d[0])
            for v in d[1:]:
                s = F32(s + F32(v * v))
            rstd = F32(F32(1) / np.sqrt(F32(F32(s / F32(96)) + F32(1e-5))))
            want = [F32(F32(v * rstd) * wi) for v, wi in zip(d, w)]
            if bias is not None:
                want = [F32(v + bi) for v, bi in zip(want, bias)]
            assert same_bits(out, np.array(want, F32))


# (T, start): one block of queries, and several (heads._QUERY_BLOCK is 16: later blocks start
# past 0 and see more keys)
@pytest.mark.parametrize("T, start", [(12, 5), (40, 3)])
def test_attend_follows_section_7_step_by_step(rng, T, start):
    """Steps 3-5 of `attention` as scalar float32 loops (dot over the head's dims, softmax sum
    and weighted V sum over t ascending, each query up to its own position) give attend's bits."""
    B, nh, hs = 2, 3, 8
    C, Tq = nh * hs, T - start
    cache = KVCache.empty(1, B, T, C, "int8")
    cache.k[:], cache.v[:] = rng.integers(-127, 128, (2, 1, B, T, C)).astype(np.int8)
    cache.k_scale[:], cache.v_scale[:] = rng.uniform(1e-3, 0.1, (2, 1, B, T)).astype(F32)
    q = (rng.normal(size=(B, Tq, C)) * 3).astype(F32)
    got = attend(q, cache.k[0], cache.k_scale[0], cache.v[0], cache.v_scale[0], start, nh)
    inv = F32(1) / np.sqrt(F32(hs))
    for b in range(B):
        for j in range(Tq):
            for h in range(nh):
                dims, n = range(h * hs, (h + 1) * hs), start + j + 1
                scores = []
                for t in range(n):
                    dot = None
                    for i in dims:
                        p = F32(q[b, j, i] * F32(cache.k[0, b, t, i]))
                        dot = p if dot is None else F32(dot + p)
                    scores.append(F32(F32(dot * cache.k_scale[0, b, t]) * inv))
                mx = max(scores)
                e = [fmath.exp(np.array([F32(s - mx)]))[0] for s in scores]
                total = e[0]
                for v in e[1:]:
                    total = F32(total + v)
                coef = [F32(F32(v / total) * cache.v_scale[0, b, t]) for t, v in enumerate(e)]
                out = [F32(coef[0] * F32(cache.v[0, b, 0, i])) for i in dims]
                for t in range(1, n):
                    out = [
                        F32(o + F32(coef[t] * F32(cache.v[0, b, t, i]))) for o, i in zip(out, dims)
                    ]
                assert same_bits(got[b, j, h * hs : (h + 1) * hs], np.array(out, F32)), (b, j, h)


def test_layernorm_and_gelu_against_float64(rng):
    x = rng.normal(size=(4, 64)).astype(F32) * 3 + 1
    w, b = rng.normal(size=64).astype(F32), rng.normal(size=64).astype(F32)
    x64 = x.astype(np.float64)
    ln = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5) * w + b
    # float32 with section 7's own tanh (1.4 ulp): the float64 GELU within a few float32 ulps
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
        assert_decode_equal(steps, full[row], act, f"row {row}")
        # a prefix of the sequence gives the same logits as the whole (causality)
        prefix = forward_sequence(tiny_artifact, ids[row, : T // 2], act=act)
        assert_decode_equal(prefix, full[row, : T // 2], act, f"prefix of row {row}")


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
            window = window[T // 2 :]
        window.append(tok)
        got = session.feed(tok)
        expected = forward_sequence(art, np.array(window))[-1]
        assert same_bits(got, expected), step
        assert session.pos == len(window) and session.window == window
        # the batched re-feed of a slide equals feeding the kept ids one at a time
        one_at_a_time = Session(art)
        for t in window:
            per_token = one_at_a_time.feed(t)
        assert same_bits(got, per_token), step


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
    assert generate(tiny_artifact, [], 6, 0.9, 0, seed=3) == generate(
        tiny_artifact, [bos], 6, 0.9, 0, seed=3
    )
    no_bos = read_artifact(synthetic_artifact(ModelSpec(300, 4, 1, 1, 8, False), bpe_tables))
    with pytest.raises(QuantError, match="no bos_token"):
        generate(no_bos, [], 3)
