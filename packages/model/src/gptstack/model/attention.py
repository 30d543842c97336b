"""Causal attention backends and their registry.

A backend is one function that computes causal scaled dot-product attention for all heads at once:

    fn(q, k, v, *, q_start, kv_len, dropout_p) -> y

    q       (B, nh, Tq, hs)  queries at absolute positions [q_start, q_start + Tq)
    k, v    (B, nh, Tk, hs)  keys/values at absolute positions [0, Tk)
    q_start int or 0-d int64 tensor on q's device (a tensor keeps one CUDA graph valid for
            every decode step: the position is data, not a Python constant baked into the graph)
    kv_len  None, int or 0-d int64 tensor: keys at positions >= kv_len are invalid (the unused
            tail of a preallocated static cache). A kernel may stop reading there.
    y       (B, nh, Tq, hs), same dtype as q

Key j is visible to query i iff j <= q_start + i (and j < kv_len when given); scale 1/sqrt(hs)
(Vaswani et al. 2017, "Attention Is All You Need", eq. 1). Key 0 is always visible, so no row is
ever fully masked.

Backends: `manual` (materialised scores, the readable reference) and `sdpa`
(`torch.nn.functional.scaled_dot_product_attention`). A third (`gptstack`, from cuda_ops)
plugs in with `register_attention_backend` without touching the block code.
"""

from __future__ import annotations

import math
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from .errors import ModelError

Position = int | Tensor


class AttentionBackend(Protocol):
    """The signature every attention backend implements (see the module docstring)."""

    def __call__(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        q_start: Position = 0,
        kv_len: Position | None = None,
        dropout_p: float = 0.0,
    ) -> Tensor: ...


def causal_mask(
    q_start: Position, Tq: int, Tk: int, kv_len: Position | None, device: torch.device
) -> Tensor:
    """Boolean (Tq, Tk) mask, True where query i may attend to key j (j <= q_start + i, j < kv_len).

    Built from tensors only (no host sync), so it can live inside a captured CUDA graph.
    """
    q_pos = torch.arange(Tq, device=device) + q_start  # (Tq,)
    k_pos = torch.arange(Tk, device=device)  # (Tk,)
    mask = k_pos[None, :] <= q_pos[:, None]  # (Tq, Tk)
    if kv_len is not None:
        mask = mask & (k_pos < kv_len)[None, :]
    return mask


def manual_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    q_start: Position = 0,
    kv_len: Position | None = None,
    dropout_p: float = 0.0,
) -> Tensor:
    """Reference backend: materialised (B, nh, Tq, Tk) scores, masked softmax, dropout."""
    Tq, Tk, hs = q.size(-2), k.size(-2), q.size(-1)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # (B, nh, Tq, Tk)
    mask = causal_mask(q_start, Tq, Tk, kv_len, q.device)
    att = att.masked_fill(~mask, float("-inf"))
    att = F.softmax(att, dim=-1)
    if dropout_p > 0.0:
        att = F.dropout(att, p=dropout_p, training=True)
    return att @ v  # (B, nh, Tq, Tk) x (B, nh, Tk, hs) -> (B, nh, Tq, hs)


def sdpa_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    q_start: Position = 0,
    kv_len: Position | None = None,
    dropout_p: float = 0.0,
) -> Tensor:
    """PyTorch's fused scaled_dot_product_attention with the causal rule above.

    SDPA's `is_causal=True` aligns the mask to the top-left corner (query i sees keys <= i), which
    is our rule only when q_start == 0 and Tq == Tk. So: that case uses is_causal (fast kernels);
    one query at the last cached position sees every key (no mask); anything else — a tensor
    position, a static cache tail (kv_len), a multi-token chunk after a prefix — gets an explicit
    boolean mask.
    """
    Tq, Tk = q.size(-2), k.size(-2)
    static_pos = isinstance(q_start, int) and kv_len is None
    if static_pos and q_start == 0 and Tq == Tk:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
    if static_pos and Tq == 1 and q_start == Tk - 1:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
    mask = causal_mask(q_start, Tq, Tk, kv_len, q.device)  # (Tq, Tk), broadcast over B, nh
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)


_BACKENDS: dict[str, AttentionBackend] = {
    "manual": manual_attention,
    "sdpa": sdpa_attention,
}


def register_attention_backend(name: str, fn: AttentionBackend, *, replace: bool = False) -> None:
    """Make `fn` selectable as `GPTConfig(attention=name)`.

    Raises ModelError if `name` is taken (pass replace=True to override on purpose).
    """
    if not isinstance(name, str) or not name:
        raise ModelError(f"attention backend name must be a non-empty string, got {name!r}")
    if not callable(fn):
        raise ModelError(f"attention backend {name!r} must be callable, got {type(fn).__name__}")
    if name in _BACKENDS and not replace:
        raise ModelError(
            f"attention backend {name!r} is already registered; pass replace=True to override it"
        )
    _BACKENDS[name] = fn


def get_attention_backend(name: str) -> AttentionBackend:
    """The backend registered as `name`; ModelError naming the known backends otherwise."""
    try:
        return _BACKENDS[name]
    except KeyError:
        raise ModelError(
            f"attention backend {name!r} is not registered; known: {sorted(_BACKENDS)}"
        ) from None


def attention_backends() -> tuple[str, ...]:
    """Names of all registered attention backends."""
    return tuple(_BACKENDS)
