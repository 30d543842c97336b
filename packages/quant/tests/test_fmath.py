"""exp, tanh and the sequential sum of FORMAT.md section 7 (gptstack.quant.fmath).

Accuracy against float64 on random and edge inputs, in float32 ulps of the exact value: exp
within 1 ulp on [-87, 0] (measured over every float32 there: 0.99), tanh within 1.5 ulp
(measured over every float32 of [0, 10]: 1.456). And the bits: the vectorized functions equal a
scalar transcription of FORMAT.md's op sequence written here independently, so they compute
what the spec says (the C engine is compared with them bit for bit in firmware/esp32/host/tests).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gptstack.quant import fmath

F32 = np.float32
FORMAT_MD = Path(__file__).resolve().parents[1] / "FORMAT.md"
EXP_ULP, TANH_ULP = 1.0, 1.5
TINY = F32(1.4e-45)  # the smallest subnormal
FLT_MIN = F32(2.0**-126)


def ulps(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|got - exact| in float32 ulps of the exact value (float64 exact)."""
    mag = np.maximum(np.abs(exact), 2.0**-126)
    ulp = 2.0 ** (np.floor(np.log2(mag)) - 23)
    return np.abs(got.astype(np.float64) - exact) / ulp


def bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, F32).view(np.uint32)


# --- exp -------------------------------------------------------------------------------------


def test_exp_accuracy_on_random_inputs(rng):
    x = np.concatenate(
        [
            rng.uniform(-87, 0, 400_000),
            -rng.exponential(1.0, 200_000),
            -np.exp(rng.uniform(-100, 4, 200_000)),
        ]
    ).astype(F32)
    x = x[x >= -87]
    assert ulps(fmath.exp(x), np.exp(x.astype(np.float64))).max() <= EXP_ULP


@given(st.floats(-87.0, 0.0, width=32))
@settings(max_examples=500, deadline=None)
def test_exp_matches_math_exp(x):
    got = fmath.exp(np.array([x], F32))
    assert ulps(got, np.array([math.exp(x)]))[0] <= EXP_ULP


def test_exp_edges():
    below = np.nextafter(F32(-87), F32(-np.inf))
    x = np.array(
        [
            0.0,
            -0.0,
            -TINY,
            -FLT_MIN,
            -1e-8,
            -87.0,
            below,
            -88.0,
            -1e30,
            -np.inf,
            1.0,
            np.inf,
            np.nan,
        ],
        F32,
    )
    got = fmath.exp(x)
    assert got[:5].tolist() == [1.0] * 5  # exp(0) is exactly 1; so is e^tiny
    assert got[5] >= FLT_MIN and ulps(got[5:6], np.exp(np.array([-87.0])))[0] <= EXP_ULP
    assert bits(got[6:10]).tolist() == [0] * 4  # below the cut: +0, never -0
    assert got[10:12].tolist() == [1.0, 1.0]  # x > 0 is taken as 0
    assert np.isnan(got[12])
    assert fmath.exp(np.zeros((2, 0, 3), F32)).shape == (2, 0, 3)


def test_exp_is_monotone_on_a_dense_grid():
    x = np.linspace(-87, 0, 2_000_001).astype(F32)
    assert np.all(np.diff(fmath.exp(x)) >= 0)


# --- tanh ------------------------------------------------------------------------------------


def test_tanh_accuracy_on_random_inputs(rng):
    u = np.concatenate(
        [
            rng.normal(0, 2, 400_000),
            rng.uniform(0.55, 0.7, 100_000),
            np.exp(rng.uniform(-100, 3, 200_000)),
        ]
    ).astype(F32)
    u = np.concatenate([u, -u])
    assert ulps(fmath.tanh(u), np.tanh(u.astype(np.float64))).max() <= TANH_ULP


@given(st.floats(allow_nan=False, width=32))
@settings(max_examples=500, deadline=None)
def test_tanh_matches_math_tanh(u):
    got = fmath.tanh(np.array([u], F32))
    assert ulps(got, np.array([math.tanh(u)]))[0] <= TANH_ULP
    assert bits(fmath.tanh(np.array([-u], F32))) == bits(-got)  # odd, to the bit


def test_tanh_edges():
    split = fmath.TANH_SPLIT
    u = np.array(
        [
            0.0,
            -0.0,
            TINY,
            -1e-30,
            np.nextafter(split, F32(0)),
            split,
            9.1,
            10.0,
            1e30,
            np.inf,
            -np.inf,
            np.nan,
        ],
        F32,
    )
    got = fmath.tanh(u)
    assert bits(got[:2]).tolist() == [0, 0x80000000]  # tanh(-0) = -0, as math.tanh
    assert got[2] == TINY and got[3] == F32(-1e-30)  # tanh(u) = u for tiny u
    assert ulps(got[4:7], np.tanh(u[4:7].astype(np.float64))).max() <= TANH_ULP
    assert got[7:11].tolist() == [1.0, 1.0, 1.0, -1.0]
    assert np.isnan(got[11])


# --- the op sequence of FORMAT.md, one float32 scalar at a time --------------------------------


def _spec_exp(x: np.float32) -> np.float32:
    """FORMAT.md section 7 `exp`, transcribed step by step with float32 scalars."""
    if np.isnan(x):
        return x
    if x < F32(-87.0):
        return F32(0)
    x = min(x, F32(0))
    n = np.rint(x * fmath.LOG2E)
    r = F32(F32(x - F32(n * fmath.LN2_HI)) - F32(n * fmath.LN2_LO))
    p = fmath.EXP_P[0]
    for c in fmath.EXP_P[1:]:
        p = F32(F32(p * r) + c)
    y = F32(F32(F32(p * F32(r * r)) + r) + F32(1))
    return F32(y * F32(math.ldexp(1.0, int(n))))


def _spec_tanh(u: np.float32) -> np.float32:
    a = F32(abs(u))
    if a >= fmath.TANH_SPLIT:
        e = _spec_exp(F32(F32(-2) * a))
        t = F32(F32(1) - F32(F32(F32(2) * e) / F32(F32(1) + e)))
    else:
        z = F32(a * a)
        p = fmath.TANH_P[0]
        for c in fmath.TANH_P[1:]:
            p = F32(F32(p * z) + c)
        t = F32(F32(F32(p * z) * a) + a)
    return F32(math.copysign(t, u))


def test_vectorized_functions_follow_the_spec_op_by_op(rng):
    x = np.concatenate([rng.uniform(-90, 0, 3000), -np.exp(rng.uniform(-30, 4.5, 3000))])
    x = x.astype(F32)
    assert bits(fmath.exp(x)).tolist() == bits([_spec_exp(v) for v in x]).tolist()
    u = np.concatenate([rng.normal(0, 3, 3000), rng.uniform(-0.7, 0.7, 3000)]).astype(F32)
    assert bits(fmath.tanh(u)).tolist() == bits([_spec_tanh(v) for v in u]).tolist()


def test_large_arrays_take_the_same_path(rng):
    """exp/tanh work in blocks: a block boundary changes nothing."""
    u = rng.normal(0, 3, (3, fmath._BLOCK + 77)).astype(F32)
    assert np.array_equal(bits(fmath.tanh(u)), bits(np.stack([fmath.tanh(r) for r in u])))
    x = -np.abs(u)
    assert np.array_equal(bits(fmath.exp(x)), bits(np.stack([fmath.exp(r) for r in x])))


def test_format_md_lists_these_constants():
    """The constants table of FORMAT.md section 7 holds exactly fmath's values (as hex)."""
    text = FORMAT_MD.read_text()
    values = [
        fmath.EXP_MIN,
        fmath.LOG2E,
        fmath.LN2_HI,
        fmath.LN2_LO,
        *fmath.EXP_P,
        fmath.TANH_SPLIT,
        *fmath.TANH_P,
    ]
    for v in values:
        h = re.sub(r"0+p", "p", float(v).hex()).replace(".p", "p")  # 0x1.a0d2ce0000000p-13
        assert f"`{h}`" in text, h


# --- the sequential sum --------------------------------------------------------------------


@pytest.mark.parametrize("shape, axis", [((20, 1000), -1), ((300, 7), 0), ((4, 1), -1)])
def test_seq_sum_is_left_to_right(rng, shape, axis):
    x = (rng.normal(size=shape) * rng.lognormal(0, 3, shape)).astype(F32)
    got = fmath.seq_sum(x, axis=axis)
    lines = np.moveaxis(x, axis, -1).reshape(-1, x.shape[axis])
    want = []
    for line in lines:
        s = line[0]
        for v in line[1:]:
            s = F32(s + v)
        want.append(s)
    assert np.array_equal(bits(got).reshape(-1), bits(want))
    assert fmath.seq_sum(x, axis=axis, keepdims=True).shape[axis] == 1


def test_pairwise_sum_is_not_sequential(rng):
    """Why seq_sum exists: numpy's np.sum adds pairwise and gives other bits."""
    x = rng.normal(size=(50, 1000)).astype(F32)
    assert (np.sum(x, axis=-1) != fmath.seq_sum(x)).any()
