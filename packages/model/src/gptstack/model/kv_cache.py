"""Key/value caches for incremental decoding.

Both caches implement one method used by the attention layer:

    update(layer, k, v, pos) -> (k_all, v_all, kv_len)

    k, v        (B, nh, T, hs)  this call's keys/values, for absolute positions [pos, pos + T)
    k_all/v_all (B, nh, Tk, hs) every key/value the queries may look at, positions [0, Tk)
    kv_len      None, or how many leading positions of k_all are valid (static cache)

`KVCache` grows by concatenation (dynamic shapes, simplest). `StaticKVCache` preallocates
(B, nh, max_seq_len, hs) buffers per layer and writes in place, so every decode step has the same
shapes and can be captured in a CUDA graph (pattern from gpt-fast's KVCache,
docs/CONVENTIONS.md §3).

Our GPT has learned absolute positions, so a cache is only valid while the context fits in
block_size: once the window slides, every token's position changes and every cached row is stale.
The decoders in decoding.py then re-prefill the last block_size tokens each step.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .attention import Position
from .errors import ModelError


class KVCache:
    """Growing per-layer cache; positions must be appended in order, starting at 0."""

    def __init__(self, n_layer: int) -> None:
        self.n_layer = n_layer
        self.k: list[Tensor | None] = [None] * n_layer
        self.v: list[Tensor | None] = [None] * n_layer

    @property
    def length(self) -> int:
        """Number of positions cached (in layer 0)."""
        k0 = self.k[0]
        return 0 if k0 is None else k0.size(2)

    def reset(self) -> None:
        """Forget every cached position."""
        self.k = [None] * self.n_layer
        self.v = [None] * self.n_layer

    def update(
        self, layer: int, k: Tensor, v: Tensor, pos: Position
    ) -> tuple[Tensor, Tensor, None]:
        k_old, v_old = self.k[layer], self.v[layer]
        cached = 0 if k_old is None else k_old.size(2)
        if not isinstance(pos, int) or pos != cached:
            raise ModelError(
                f"KVCache layer {layer} holds {cached} positions but the input starts at "
                f"position {pos!r}; pass pos={cached} (an int) or reset() the cache"
            )
        if k_old is not None and v_old is not None:
            k = torch.cat([k_old, k], dim=2)  # (B, nh, cached + T, hs)
            v = torch.cat([v_old, v], dim=2)
        self.k[layer], self.v[layer] = k, v
        return k, v, None


class StaticKVCache:
    """Preallocated (n_layer, B, nh, max_seq_len, hs) key and value buffers, written in place."""

    def __init__(
        self,
        n_layer: int,
        batch_size: int,
        n_head: int,
        max_seq_len: int,
        head_size: int,
        *,
        device: torch.device | str,
        dtype: torch.dtype,
    ) -> None:
        shape = (n_layer, batch_size, n_head, max_seq_len, head_size)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.batch_size = batch_size
        self.max_seq_len = max_seq_len

    def update(
        self, layer: int, k: Tensor, v: Tensor, pos: Position
    ) -> tuple[Tensor, Tensor, Position | None]:
        B, _, T, _ = k.shape
        if B != self.batch_size:
            raise ModelError(
                f"StaticKVCache was built for batch size {self.batch_size}, got a batch of {B}; "
                f"build the decoder with batch_size={B}"
            )
        k, v = k.to(self.k.dtype), v.to(self.v.dtype)
        if isinstance(pos, int):
            # Prefill / re-prefill (eager, dynamic T): write a slice and attend to the valid prefix
            # only, so the attention sees Tq == Tk and can take the is_causal fast path.
            if pos + T > self.max_seq_len:
                raise ModelError(
                    f"StaticKVCache holds {self.max_seq_len} positions; cannot write "
                    f"[{pos}, {pos + T})"
                )
            self.k[layer, :, :, pos : pos + T] = k
            self.v[layer, :, :, pos : pos + T] = v
            return self.k[layer, :, :, : pos + T], self.v[layer, :, :, : pos + T], None
        # Decode (graph-capturable): position is a 0-d tensor; shapes never change.
        positions = torch.arange(T, device=k.device) + pos  # (T,)
        self.k[layer].index_copy_(2, positions, k)
        self.v[layer].index_copy_(2, positions, v)
        return self.k[layer], self.v[layer], pos + T  # (B, nh, max_seq_len, hs) each
