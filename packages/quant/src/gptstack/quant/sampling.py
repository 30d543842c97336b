"""Sampling and generation exactly as FORMAT.md section 9, on top of the numpy reference.

    sample(logits, temperature, top_k, rng, n_tokens) -> id
    generate(artifact, prompt_ids, n_new, temperature, top_k, seed) -> new ids

Given the same logits and seed, the C engine returns the same ids: candidates are ordered by
(logit descending, id ascending), the weights are FORMAT.md section 7's own exp (not np.exp,
which differs from the engine's in the last bit), cumulative sums run in candidate order in
float32, and each sampled token takes exactly one PCG32 draw (none when greedy).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from . import fmath
from .artifact import Artifact
from .errors import QuantError
from .reference import Session
from .rng import Pcg32

F32 = np.float32


def sample(logits: np.ndarray, temperature: float, top_k: int, rng: Pcg32, n_tokens: int) -> int:
    """One id in 0 .. n_tokens−1 from logits (V,) (FORMAT.md section 9).

    temperature <= 0: greedy (lowest id on ties, no RNG draw). Otherwise the top_k largest logits
    (all n_tokens when top_k <= 0 or >= n_tokens), softmax at this temperature, one uniform draw.
    """
    z = np.asarray(logits, F32)
    if not 1 <= n_tokens <= z.shape[-1]:
        raise QuantError(f"n_tokens is {n_tokens}, expected 1 .. {z.shape[-1]} (the logits)")
    z = z[:n_tokens]
    if temperature <= 0:
        return int(np.argmax(z))  # first maximum: the lowest id
    k = top_k if 0 < top_k < n_tokens else n_tokens
    order = np.argsort(-z, kind="stable")[:k]  # logit descending, id ascending on ties
    zc = z[order] / F32(temperature)
    e = fmath.exp(zc - zc[0])  # <= 0: the largest candidate comes first
    cum = np.cumsum(e, dtype=F32)  # sequential, in candidate order
    u = F32(rng.uniform()) * cum[-1]
    idx = int(np.searchsorted(cum, u, side="right"))  # first j with u < cum_j
    return int(order[min(idx, k - 1)])


def generate(
    art: Artifact,
    prompt_ids: Sequence[int],
    n_new: int,
    temperature: float = 1.0,
    top_k: int = 0,
    seed: int = 0,
    *,
    act: str = "int8",
) -> list[int]:
    """Feed the prompt (empty: [bos_token]) and sample n_new tokens; returns the new ids only.

    Raises QuantError for an empty prompt when the artifact has no bos_token, or a bad id.
    """
    ids = [int(t) for t in prompt_ids]
    if not ids:
        if art.spec.bos_token is None:
            raise QuantError(f"artifact {art.name} has no bos_token: give a non-empty prompt")
        ids = [art.spec.bos_token]
    session = Session(art, act=act)
    rng = Pcg32(seed)
    for t in ids:
        logits = session.feed(t)
    out: list[int] = []
    for i in range(n_new):
        tok = sample(logits, temperature, top_k, rng, art.tables.n_tokens)
        out.append(tok)
        if i + 1 < n_new:  # the engine feeds it too; its logits would go unused here
            logits = session.feed(tok)
    return out
