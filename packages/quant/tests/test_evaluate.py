"""evaluate_loss: windows, targets and batching."""

from __future__ import annotations

import numpy as np
import pytest

from gptstack.quant import QuantError, evaluate_loss, forward_sequence


def _loss_one_window_at_a_time(art, tokens, act="int8"):
    T, total, n = art.spec.block_size, 0.0, len(tokens) - 1
    for start in range(0, n, T):
        x = tokens[start : min(start + T, n)]
        y = tokens[start + 1 : start + 1 + len(x)]
        logits = forward_sequence(art, x, act=act).astype(np.float64)
        for row, target in zip(logits, y):
            total += np.log(np.sum(np.exp(row - row.max()))) + row.max() - row[target]
    return total / n


@pytest.mark.parametrize("length", [2, 17, 16 * 5 + 1, 16 * 5 + 9])
def test_loss_over_all_windows(tiny_artifact, rng, length):
    tokens = rng.integers(0, tiny_artifact.tables.n_tokens, length)
    expected = _loss_one_window_at_a_time(tiny_artifact, tokens)
    for batch in (1, 3, 8):
        got = evaluate_loss(tiny_artifact, tokens, batch=batch)
        assert got["n_tokens"] == length - 1
        assert abs(got["loss"] - expected) < 1e-6 * expected


def test_a_model_beats_chance_only_if_it_can(tiny_artifact, rng):
    # random weights know nothing: loss is near log(V) on random tokens
    tokens = rng.integers(0, 300, 200)
    loss = evaluate_loss(tiny_artifact, tokens)["loss"]
    assert abs(loss - np.log(tiny_artifact.spec.vocab_size)) < 0.5


def test_bad_inputs(tiny_artifact):
    with pytest.raises(QuantError, match="at least 2"):
        evaluate_loss(tiny_artifact, np.array([3]))
    with pytest.raises(QuantError, match="integer"):
        evaluate_loss(tiny_artifact, np.array([0.5, 1.5]))
    with pytest.raises(QuantError, match="outside"):
        evaluate_loss(tiny_artifact, np.array([1, 2, 999]))
    with pytest.raises(QuantError, match="act"):
        evaluate_loss(tiny_artifact, np.array([1, 2]), act="bf16")
