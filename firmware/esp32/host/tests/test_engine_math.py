"""The engine's own exp and tanh (gs_math.c) against gptstack.quant.fmath, bit for bit.

FORMAT.md section 7 defines both op by op; the C and the numpy twin must give the same bits for
every input, or the engine stops reproducing the reference. Checked on random bit patterns (all
of float32: subnormals, infinities, NaN), dense sweeps of the ranges the engine uses and the edge
cases; their accuracy against float64 is tested in packages/quant/tests/test_fmath.py. (Every one
of the 2^32 inputs was compared once while writing them: see gs_math.h.)
"""

from __future__ import annotations

import numpy as np
import pytest

from gptstack.quant import fmath

F32 = np.float32


def _inputs(rng) -> np.ndarray:
    patterns = rng.integers(0, 2**32, 1 << 21, dtype=np.uint64).astype(np.uint32).view(F32)
    edges = np.array(
        [
            0.0,
            -0.0,
            1.4e-45,
            -1.4e-45,
            2.0**-126,
            -(2.0**-126),
            -87.0,
            87.0,
            np.nextafter(F32(-87), F32(-1e9)),
            0.625,
            -0.625,
            np.nextafter(F32(0.625), F32(0)),
            43.5,
            -43.5,
            1e30,
            -1e30,
            3.4e38,
            -3.4e38,
            np.inf,
            -np.inf,
            np.nan,
            -np.nan,
        ],
        F32,
    )
    sweeps = [
        np.linspace(-90, 0, 1 << 20),
        np.linspace(-12, 12, 1 << 20),
        rng.normal(0, 4, 1 << 20),
        -rng.exponential(3, 1 << 20),
    ]
    return np.concatenate([patterns, edges, *(s.astype(F32) for s in sweeps)])


@pytest.mark.parametrize("name", ["exp", "tanh"])
def test_c_equals_numpy_bit_for_bit(engine, rng, name):
    x = _inputs(rng)
    if name == "exp":
        x = np.concatenate([x, -np.abs(x)])  # its domain, x <= 0, and beyond
    with np.errstate(invalid="ignore", over="ignore"):  # signalling-NaN patterns
        want = getattr(fmath, name)(x)
    got = getattr(engine, name)(x)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    differ = (got.view(np.uint32) != want.view(np.uint32)) & ~nan
    assert not differ.any(), (
        f"{name}: {int(differ.sum())} inputs differ, e.g. "
        f"{x[differ][:4]} -> C {got[differ][:4]}, numpy {want[differ][:4]}"
    )
