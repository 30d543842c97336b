"""The float32 exp, tanh and sums of FORMAT.md section 7, op for op as the C engine's gs_math.c.

    exp(x)        # x <= 0 (softmax, sampler): Cody-Waite reduction + Cephes polynomial
    tanh(u)       # GELU: odd polynomial below 0.625, else through exp(-2|u|)
    seq_sum(x)    # a sum over one axis, strictly left to right

Why not np.exp / np.tanh / np.sum: a C library's expf/tanhf and numpy's differ in the last bit
(and newlib on the ESP32 differs again), and np.sum adds pairwise; those ulps move an activation
across an int8 rounding boundary now and then, and the engine stops reproducing the reference.
Built from IEEE-754 + - * /, rint and an exact power-of-two scale only, every function gives
the same bits on every IEEE machine. Vectorized: each line is one float32 operation per element,
in the order FORMAT.md writes, so each element is rounded exactly as the C scalar code rounds it.
Constants are hex so that no decimal-to-float conversion can differ between C and Python.

Accuracy against float64 (measured over every float32 input of the ranges; tests re-check it on
random and edge inputs): exp, all x in [-87, 0]: below 0.99 ulp (99.2 % correctly rounded);
tanh, all u in [0, 10]: below 1.46 ulp (1.55e-7 relative, 99.6 % correctly rounded), exactly ±1
beyond. The C engine's gs_math.c gives the same bits for all 2^32 float32 inputs.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32


def _hex(s: str) -> np.float32:
    value = float.fromhex(s)
    assert float(F32(value)) == value, s  # every constant is exactly a float32
    return F32(value)


# exp: x < EXP_MIN gives 0 (from -87 on the result, >= 1.6e-38, stays a normal float)
EXP_MIN = _hex("-0x1.5cp+6")  # -87.0
LOG2E = _hex("0x1.715476p+0")  # 1.442695, log2(e)
LN2_HI = _hex("0x1.63p-1")  # 0.693359375: 9 bits, n * LN2_HI is exact
LN2_LO = _hex("-0x1.bd0106p-13")  # -2.1219444e-4: ln 2 - LN2_HI
EXP_P = tuple(
    _hex(h)
    for h in (  # Cephes expf: e^r ~ 1 + r + r^2 * P(r)
        "0x1.a0d2cep-13",  # 1.9875691e-4  (r^5)
        "0x1.6e879cp-10",  # 1.3981999e-3
        "0x1.11121p-7",  # 8.333452e-3
        "0x1.555382p-5",  # 4.1665796e-2
        "0x1.555554p-3",  # 1.6666666e-1
        "0x1p-1",  # 0.5            (r^0)
    )
)
# tanh: below TANH_SPLIT 1 - 2e/(1+e) would lose the low bits to cancellation
TANH_SPLIT = _hex("0x1.4p-1")  # 0.625
TANH_P = tuple(
    _hex(h)
    for h in (  # Cephes tanhf: t ~ a + a * z * P(z), z = a^2
        "-0x1.75e1d4p-8",  # -5.7049887e-3 (z^4)
        "0x1.52269cp-6",  # 2.0639088e-2
        "-0x1.b83c5ap-5",  # -5.3739715e-2
        "0x1.110726p-3",  # 1.3331442e-1
        "-0x1.555532p-2",  # -3.3333281e-1 (z^0)
    )
)


def _horner(coeffs: tuple[np.float32, ...], r: np.ndarray) -> np.ndarray:
    """((c0 · r + c1) · r + c2) … + c_last, each step rounded, in place on one buffer."""
    p = coeffs[0] * r
    p += coeffs[1]
    for c in coeffs[2:]:
        p *= r
        p += c
    return p


# Elements per pass: each function makes a dozen passes over its temporaries, and blocks of
# this size keep them in the L2 cache (about twice as fast as whole large arrays).
_BLOCK = 1 << 15


def blockwise(fn, x: np.ndarray) -> np.ndarray:
    """fn (elementwise, float32) over x in contiguous blocks of _BLOCK elements: the result of
    fn(x), computed in cache."""
    x = np.ascontiguousarray(x, F32)
    if x.size <= _BLOCK:
        return fn(x.reshape(-1)).reshape(x.shape)
    flat, out = x.reshape(-1), np.empty(x.size, F32)
    for i in range(0, flat.size, _BLOCK):
        out[i : i + _BLOCK] = fn(flat[i : i + _BLOCK])
    return out.reshape(x.shape)


_SIGN = np.int32(-(2**31))  # the float32 sign bit, as an int32
_MAGNITUDE = np.int32(0x7FFFFFFF)


def _exp(x: np.ndarray) -> np.ndarray:
    # Vectorizing the C branches: lanes below the cut (or NaN) compute exp(-87) and are dropped
    # at the end. Selecting with integer masks, not np.where (ten times slower on mixed masks).
    live = x >= EXP_MIN  # False for NaN and below the cut
    v = np.fmax(x, EXP_MIN)  # NaN and x < -87 → -87: finite, dropped later
    np.minimum(v, F32(0), out=v)  # x > 0 is taken as 0
    n = v * LOG2E
    np.rint(n, out=n)  # n in [-126, 0], an exact integer
    r = n * LN2_HI
    np.subtract(v, r, out=r)  # x - n·HI: exact (a 16-bit result)
    v = np.multiply(n, LN2_LO, out=v)
    r -= v  # - n·LO
    z = np.multiply(r, r, out=v)
    p = _horner(EXP_P, r)
    p *= z
    p += r
    p += F32(1)
    bits = n.astype(np.int32)
    bits += 127
    bits *= live  # dropped lanes: bits 0, a scale of +0
    bits <<= 23  # 2^n: biased exponent n + 127
    p *= bits.view(F32)  # exact: the result is a normal float (or +0)
    nan = np.isnan(x)
    if nan.any():
        p[nan] = x[nan]
    return p


def exp(x: np.ndarray) -> np.ndarray:
    """e^x in float32, elementwise, for x <= 0 (FORMAT.md section 7 `exp`).

    x < -87 (and -inf) → +0; NaN → NaN; x > 0 is taken as 0 (→ 1; the engine never asks).
    """
    return blockwise(_exp, x)


def _tanh(u: np.ndarray) -> np.ndarray:
    a = np.abs(u)  # clears the sign bit, as C does
    with np.errstate(over="ignore"):  # |u| > 1.7e38: -2a = -inf, as in C; exp → 0
        e = _exp(F32(-2) * a)
    big = F32(2) * e
    e += F32(1)
    big /= e
    np.subtract(F32(1), big, out=big)  # 1 - (2e) / (1 + e)
    s = np.minimum(a, TANH_SPLIT, out=e)  # lanes >= the split are dropped: keep them finite
    z = s * s
    small = _horner(TANH_P, z)
    small *= z
    small *= s
    small += s  # ((P(z) · z) · a) + a
    # t = big where a >= split else small (NaN: the comparison is False, small keeps it),
    # then copysign(t, u): bit operations, as C's union code does
    keep = (a >= TANH_SPLIT).astype(np.int32)
    np.negative(keep, out=keep)  # all ones where big is taken
    t, small = big.view(np.int32), small.view(np.int32)
    t &= keep
    np.invert(keep, out=keep)
    small &= keep
    t |= small
    t &= _MAGNITUDE
    t |= u.view(np.int32) & _SIGN
    return t.view(F32)


def tanh(u: np.ndarray) -> np.ndarray:
    """tanh(u) in float32, elementwise (FORMAT.md section 7 `tanh`): a = |u|;
    a < 0.625: ((P(a²) · a²) · a) + a; else e = exp(-2a), 1 - (2e) / (1 + e); then the sign bit
    of u (so tanh(-0) = -0). ±inf → ±1, NaN → NaN.
    """
    return blockwise(_tanh, u)


def seq_sum(x: np.ndarray, axis: int = -1, keepdims: bool = False) -> np.ndarray:
    """Σ over `axis` as FORMAT.md section 7 defines every float sum: s = x_0, then s = s + x_i
    for i = 1, 2, … in index order, each addition rounded to float32.

    np.add.accumulate (cumsum) is sequential by definition; np.sum is pairwise (and so differs
    in the last bits). The running sums are materialized: fine for the short axes here.
    """
    acc = np.add.accumulate(np.asarray(x, F32), axis=axis, dtype=F32)
    last = np.take(acc, [-1], axis=axis)
    return last if keepdims else np.squeeze(last, axis=axis)
