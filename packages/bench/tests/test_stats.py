"""The statistics under every reported number: medians, spreads and paired ratios."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gptstack.bench import BenchError, median, paired_ratios, speedups, summarize

positive = st.floats(min_value=1e-6, max_value=1e3, allow_nan=False, allow_infinity=False)


@given(st.lists(positive, min_size=1, max_size=50))
def test_median_matches_numpy(xs):
    assert median(xs) == pytest.approx(float(np.median(xs)), rel=1e-12)


@given(st.lists(positive, min_size=1, max_size=50))
def test_summarize_brackets_the_median(xs):
    s = summarize(xs)
    assert s["n"] == len(xs)
    assert s["min"] <= s["median"] <= s["max"]
    assert (s["min"], s["max"]) == (min(xs), max(xs))


@settings(max_examples=50)
@given(st.lists(positive, min_size=1, max_size=40), st.floats(min_value=0.05, max_value=20))
def test_speedup_of_a_uniformly_faster_candidate_is_its_factor(base, k):
    # candidate takes 1/k of the baseline's time in every round, whatever the round's noise
    cand = [b / k for b in base]
    ups = speedups(base, cand)
    assert all(u == pytest.approx(k, rel=1e-9) for u in ups)
    assert summarize(ups)["median"] == pytest.approx(k, rel=1e-9)


def test_paired_ratios_need_the_same_rounds():
    with pytest.raises(BenchError, match="same rounds"):
        paired_ratios([1.0, 2.0], [1.0])
    with pytest.raises(BenchError, match="finite and > 0"):
        paired_ratios([1.0], [0.0])
    with pytest.raises(BenchError, match="at least one"):
        median([])
