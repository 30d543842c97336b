"""Which val windows an evaluation scores: the subset is fixed, spread, disjoint and batched."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gptstack.tools.errors import ConfigError
from gptstack.tools.val_windows import (
    CPU_VAL_WINDOWS,
    chunk_tokens,
    parse_val_windows,
    resolve_val_windows,
    window_chunks,
)


@given(n_windows=st.integers(1, 5000), count=st.one_of(st.none(), st.integers(1, 6000)))
def test_chunks_are_disjoint_ascending_and_cover_the_count(n_windows, count):
    chunks = window_chunks(n_windows, count)
    picked = [i for c in chunks for i in c]
    assert picked == sorted(set(picked))  # disjoint, ascending
    assert all(0 <= i < n_windows for i in picked)
    assert len(picked) == (n_windows if count is None else min(count, n_windows))
    assert all(len(c) > 0 for c in chunks)


def test_the_subset_spreads_over_the_whole_split():
    chunks = window_chunks(928, CPU_VAL_WINDOWS)  # Tiny Shakespeare's val split, esp32 preset
    assert chunks[0].start == 0 and chunks[-1].stop == 928
    assert window_chunks(928, CPU_VAL_WINDOWS) == chunks  # fixed: the same windows every time


def test_chunk_tokens_are_the_windows_and_their_targets():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 512, 10 * 8 + 5)
    T = 8
    stream = chunk_tokens(tokens, T, range(3, 5))
    assert np.array_equal(stream, tokens[3 * T : 5 * T + 1])  # inputs 3..4 plus the last target


@pytest.mark.parametrize(
    "text, device, expected",
    [
        ("auto", "cpu", CPU_VAL_WINDOWS),
        ("auto", "cuda", None),
        ("all", "cpu", None),
        ("64", "cpu", 64),
        ("64", "cuda", 64),
        (None, "cpu", CPU_VAL_WINDOWS),
    ],
)
def test_resolve(text, device, expected):
    assert resolve_val_windows(text, device) == expected


@pytest.mark.parametrize("text", ["0", "-3", "some", "1.5"])
def test_bad_values_name_the_option(text):
    with pytest.raises(ConfigError, match="--val-windows"):
        parse_val_windows(text)
