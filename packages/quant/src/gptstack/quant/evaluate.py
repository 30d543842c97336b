"""Quantized evaluation: the mean next-token cross-entropy of an artifact on a token stream.

    evaluate_loss(artifact, val_tokens)               # the arithmetic the engine runs
    evaluate_loss(artifact, val_tokens, act="fp32")   # int8 weights, float activations

Windows of block_size tokens that do not overlap (the last one may be shorter), targets = the next
token, so every token after the first is predicted exactly once, by the full-sequence mode of the
reference. Compare with the float model's loss on the same windows to price the quantization.
"""

from __future__ import annotations

import numpy as np

from .artifact import Artifact
from .errors import QuantError
from .reference import forward_sequence


def _window_losses(art: Artifact, inputs: np.ndarray, targets: np.ndarray, act: str) -> float:
    """Sum over rows of -log softmax(logits)[target], float64; inputs/targets (B, T')."""
    logits = forward_sequence(art, inputs, act=act).astype(np.float64)  # (B, T', V)
    top = logits.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(logits - top).sum(axis=-1)) + top[..., 0]
    picked = np.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return float(np.sum(lse - picked))


def evaluate_loss(
    art: Artifact, tokens: np.ndarray, *, act: str = "int8", batch: int = 8
) -> dict[str, float | int | str]:
    """Mean cross-entropy (nats) over all V logits of every next-token prediction in tokens.

    tokens: 1-D integer ids (< vocab_size), at least 2. batch: windows per forward pass.
    Returns {"loss", "n_tokens" (predictions made), "act"}. Raises QuantError on bad input.
    """
    ids = np.asarray(tokens).reshape(-1)
    if not np.issubdtype(ids.dtype, np.integer):
        raise QuantError(f"tokens must be integer ids, got {ids.dtype}")
    if len(ids) < 2:
        raise QuantError(f"evaluation needs at least 2 tokens, got {len(ids)}")
    if batch < 1:
        raise QuantError(f"batch is {batch}, expected >= 1")
    ids = ids.astype(np.int64)
    V = art.spec.vocab_size
    if ids.min() < 0 or ids.max() >= V:
        bad = int(ids.max() if ids.max() >= V else ids.min())
        raise QuantError(
            f"token id {bad} is outside the model's vocabulary 0 .. {V - 1}: "
            "tokenize with the artifact's own tokenizer"
        )
    T = art.spec.block_size
    n = len(ids) - 1
    n_full = n // T
    total = 0.0
    for first in range(0, n_full, batch):
        rows = np.arange(first, min(first + batch, n_full))
        starts = rows[:, None] * T + np.arange(T)[None, :]
        total += _window_losses(art, ids[starts], ids[starts + 1], act)
    rest = n - n_full * T
    if rest:
        s = n_full * T
        total += _window_losses(art, ids[None, s : s + rest], ids[None, s + 1 : s + 1 + rest], act)
    return {"loss": total / n, "n_tokens": n, "act": act}
