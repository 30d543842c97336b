"""Summary statistics of timing samples: medians, spreads and paired ratios (docs/MEASURING.md
rule 2).

    summarize([0.11, 0.10, 0.12])          -> {"n": 3, "median": 0.11, "min": 0.10, "max": 0.12}
    speedups(base, cand)                    -> [base[i] / cand[i] ...]   (> 1: candidate faster)
    summarize(speedups(base, cand))         -> the median of the pairwise ratios and its spread

Samples of A and B taken alternately (A B A B ...) are paired by round: the ratio of round i uses
the two samples of round i, so slow drift of a shared, noisy machine cancels in each pair. We
report the median of those ratios, not the ratio of the medians, and never a mean (one stall
would move it).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from .errors import BenchError


def median(xs: Sequence[float]) -> float:
    """The median (the mean of the two middle values for an even count)."""
    if len(xs) == 0:
        raise BenchError("median of no samples: a measurement needs at least one repeat")
    return float(statistics.median(xs))


def summarize(xs: Sequence[float]) -> dict[str, float | int]:
    """{"n", "median", "min", "max"} of the samples."""
    return {"n": len(xs), "median": median(xs), "min": float(min(xs)), "max": float(max(xs))}


def paired_ratios(numerator: Sequence[float], denominator: Sequence[float]) -> list[float]:
    """numerator[i] / denominator[i] for every round i; both must come from the same rounds."""
    if len(numerator) != len(denominator):
        raise BenchError(
            f"paired ratios need samples from the same rounds, got {len(numerator)} and "
            f"{len(denominator)} samples: measure both variants in one compare() call"
        )
    out = []
    for a, b in zip(numerator, denominator):
        if b <= 0 or not math.isfinite(a) or not math.isfinite(b):
            raise BenchError(f"cannot take the ratio {a} / {b}: timings must be finite and > 0")
        out.append(a / b)
    return out


def speedups(baseline: Sequence[float], candidate: Sequence[float]) -> list[float]:
    """Per-round speedup of candidate over baseline: baseline time / candidate time (> 1:
    the candidate is faster)."""
    return paired_ratios(baseline, candidate)
