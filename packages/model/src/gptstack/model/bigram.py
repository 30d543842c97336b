"""Bigram: the baseline language model, one (V, V) table of next-token logits per token.

Same call signature as GPT, so the training loop, evaluation and naive generation run it as is.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .errors import ModelError
from .optimizer import configure_adamw


class Bigram(nn.Module):
    """logits[b, t] = table[idx[b, t]]: the next token depends on the current one only."""

    tied_parameters: dict[str, str] = {}
    # The prediction uses one token of context, so generation may crop the context to 1.
    block_size = 1

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= 0:
            raise ModelError(f"Bigram vocab_size is {vocab_size!r}: it must be a positive integer")
        self.vocab_size = vocab_size
        self.table = nn.Embedding(vocab_size, vocab_size)  # (V, V)
        # Small init so the initial loss is close to ln(V), like GPT's.
        nn.init.normal_(self.table.weight, mean=0.0, std=0.02)

    def forward(
        self, idx: Tensor, targets: Tensor | None = None, *, last_only: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """idx (B, T) int64 -> logits (B, T, V) (or (B, 1, V) with last_only), loss or None."""
        if idx.dim() != 2:
            raise ModelError(f"idx must be (B, T) token ids, got shape {tuple(idx.shape)}")
        if targets is not None and last_only:
            raise ModelError("last_only=True is for inference; a loss needs every position")
        if last_only:
            idx = idx[:, -1:]  # (B, 1)
        logits = self.table(idx)  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(
                logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1
            )
        return logits, loss

    def num_params(self, non_embedding: bool = True) -> int:
        """V·V (the table is the whole model; `non_embedding` is accepted for API symmetry)."""
        return self.table.weight.numel()

    def configure_optimizer(
        self,
        weight_decay: float,
        learning_rate: float,
        betas: tuple[float, float],
        device_type: str,
    ) -> torch.optim.AdamW:
        """AdamW; the table is an embedding, so it gets no weight decay (optimizer.py)."""
        return configure_adamw(self, weight_decay, learning_rate, betas, device_type)
