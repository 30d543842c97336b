"""Optimizer policy: which parameters get weight decay, as a pure function of the module tree.

Decay applies only to the 2-D weights of `nn.Linear` layers (the matmuls). No decay on biases,
LayerNorm weights and embeddings; a Linear whose weight *is* an embedding (the LM head tied to
`wte`) counts as an embedding. Weight decay pulls parameters toward zero, which suits matmul
weights but not gains, offsets or lookup tables (GPT-3 paper, Brown et al. 2020, appendix B uses
0.1 decay; excluding gains/biases follows minGPT/nanoGPT).
"""

from __future__ import annotations

import torch
from torch import nn

from .errors import ModelError


def split_decay_params(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(decay, no_decay): trainable parameters split by the policy above, each listed once."""
    embedding_ids = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decay_ids = {
        id(m.weight)
        for m in model.modules()
        if isinstance(m, nn.Linear) and id(m.weight) not in embedding_ids
    }
    decay, no_decay = [], []
    for p in model.parameters():  # parameters() yields a tied tensor once
        if p.requires_grad:
            (decay if id(p) in decay_ids else no_decay).append(p)
    return decay, no_decay


def configure_adamw(
    model: nn.Module,
    weight_decay: float,
    learning_rate: float,
    betas: tuple[float, float],
    device_type: str,
    *,
    capturable: bool = False,
    fused: bool | None = None,
) -> torch.optim.AdamW:
    """AdamW with two groups (decay / no decay); the fused kernel when device_type is "cuda" or
    "cpu" (fused=None), or as `fused` says (the training ladder measures both).

    capturable=True (CUDA only) keeps the step count and the learning rate in device tensors, so
    the optimizer step can be captured in a CUDA graph and the schedule still changes the rate:
    set it with `group["lr"].fill_(lr)` (torch.optim docs, "capturable").
    """
    if weight_decay < 0 or learning_rate <= 0:
        raise ModelError(
            f"optimizer got weight_decay={weight_decay}, learning_rate={learning_rate}: "
            f"weight_decay must be >= 0 and learning_rate > 0"
        )
    decay, no_decay = split_decay_params(model)
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    if capturable:
        if device_type != "cuda":
            raise ModelError("a capturable optimizer (for CUDA graphs) needs device_type='cuda'")
        device = decay[0].device if decay else no_decay[0].device
        for g in groups:  # one device tensor per group: fill_() changes it inside the graph
            g["lr"] = torch.tensor(learning_rate, dtype=torch.float32, device=device)
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=True, capturable=True)
    # fused=True runs one multi-tensor kernel per step instead of several per parameter. On a
    # CPU PyTorch's default is a loop over the parameters, a few small ops each; fused makes
    # the same update to float rounding (tests/test_gpt.py), faster (the CPU ladder's "+ fused
    # AdamW" rung, benchmarks/results/train-cpu-20261205-205604.json).
    if fused is None:
        fused = device_type in ("cuda", "cpu")
    return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=fused)
