"""Next-token sampling shared by every decoding mode (naive, KV cache, static cache + graph).

    logits (B, V) -> temperature -> top-k -> top-p -> probs (B, V) -> one token per row (B,)

temperature 0 means greedy (argmax; top-k/top-p are then irrelevant). top-k keeps the k largest
logits (ties at the k-th value are kept); top-p (nucleus sampling, Holtzman et al. 2019, "The
Curious Case of Neural Text Degeneration") then keeps the smallest set of most likely tokens whose
probability reaches p, renormalised. The draw is an exponential race, argmax(p_i / E_i) with
E_i ~ Exp(1), which picks i with probability p_i without a host sync (pattern from gpt-fast's
`multinomial_sample_one_no_sync`). Randomness comes only from the `torch.Generator` passed in.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .errors import ModelError


def check_sampling(temperature: float, top_k: int | None, top_p: float | None) -> None:
    """Raise ModelError for an out-of-range sampling setting."""
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not (temperature >= 0.0)
    ):
        raise ModelError(f"temperature is {temperature!r}: it must be a number >= 0 (0 = greedy)")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ModelError(f"top_k is {top_k!r}: it must be an integer >= 1, or None for no limit")
    if top_p is not None and (
        isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not (0.0 < top_p <= 1.0)
    ):
        raise ModelError(f"top_p is {top_p!r}: it must be in (0, 1], or None for no limit")


def make_generator(seed: int | None, device: torch.device | str) -> torch.Generator:
    """A generator on `device`, seeded from `seed` (None: a fresh non-deterministic seed)."""
    generator = torch.Generator(device=device)
    if seed is None:
        generator.seed()
        return generator
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ModelError(f"seed is {seed!r}: it must be a non-negative integer or None")
    generator.manual_seed(seed)
    return generator


def logits_to_probs(
    logits: Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> Tensor:
    """(B, V) logits -> (B, V) float32 probabilities after temperature, top-k, top-p (temp > 0)."""
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # (B, 1): k-th largest logit
        logits = torch.where(logits < kth, float("-inf"), logits)
    probs = torch.softmax(logits, dim=-1)
    if top_p is not None and top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)  # (B, V) each
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
        # Drop a token once the more likely ones already reach p; the top token never drops.
        drop_sorted = mass_before >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)  # back to vocab order
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def sample(
    logits: Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """One token per row: (B, V) logits -> (B,) int64. temperature 0 = greedy argmax."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = logits_to_probs(logits, temperature, top_k, top_p)
    race = torch.empty_like(probs).exponential_(1.0, generator=generator)  # E_i ~ Exp(1)
    # Filtered tokens (p = 0) score -1 so they can never win, even against an E_i of 0.
    scores = torch.where(probs > 0, probs / race, -1.0)
    return scores.argmax(dim=-1)
