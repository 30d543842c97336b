"""Model shapes the suites build with random weights: the presets' sizes, passed in by the CLI.

    shape = ModelShape("esp32", vocab_size=512, block_size=64, n_layer=6, n_head=8, n_embd=256,
                       batch_size=64, dropout=0.2)
    model = shape.build(torch.device("cuda"))      # GPT with GPT-2 init, seeded
    tiny = shape.smoke()                           # same name, CI size

bench cannot import gptstack.tools (dependencies point down), so the sizes come from the preset
TOML files through `gptstack bench` (tools/bench_cli.py), or from whoever calls the suites.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from gptstack.model import GPT, GPTConfig

from .errors import BenchError

# CI size (--smoke): big enough to have several heads and layers, small enough for seconds.
SMOKE_LIMITS = {
    "n_layer": 2,
    "n_head": 2,
    "n_embd": 32,
    "block_size": 32,
    "batch_size": 2,
    "vocab_size": 96,
}


@dataclass(frozen=True)
class ModelShape:
    """A GPT's hyper-parameters plus the batch size a suite runs it at."""

    name: str
    vocab_size: int
    block_size: int
    n_layer: int
    n_head: int
    n_embd: int
    batch_size: int = 1
    dropout: float = 0.0
    bias: bool = True
    # the model this one learns from when its preset distills (train.distill_from), or None
    teacher: ModelShape | None = None

    def __post_init__(self) -> None:
        sizes = (
            self.vocab_size,
            self.block_size,
            self.n_layer,
            self.n_head,
            self.n_embd,
            self.batch_size,
        )
        if min(sizes) < 1 or self.n_embd % self.n_head:
            raise BenchError(
                f"model shape {self}: sizes must be >= 1 and n_embd divisible by n_head"
            )

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head

    def config(self, attention: str = "sdpa", *, dropout: float | None = None) -> GPTConfig:
        return GPTConfig(
            vocab_size=self.vocab_size,
            block_size=self.block_size,
            n_layer=self.n_layer,
            n_head=self.n_head,
            n_embd=self.n_embd,
            dropout=self.dropout if dropout is None else dropout,
            bias=self.bias,
            attention=attention,
        )

    def build(
        self,
        device: torch.device,
        *,
        dtype: torch.dtype = torch.float32,
        seed: int = 0,
        attention: str = "sdpa",
        dropout: float | None = None,
    ) -> GPT:
        """A GPT of this shape with GPT-2 initialization from `seed` (random weights)."""
        torch.manual_seed(seed)
        model = GPT(self.config(attention, dropout=dropout))
        return model.to(device=device, dtype=dtype)

    def replace(self, **changes: Any) -> ModelShape:
        return dataclasses.replace(self, **changes)

    def smoke(self) -> ModelShape:
        """The same name at CI size (SMOKE_LIMITS caps each size, the teacher's too)."""
        small = {k: min(getattr(self, k), v) for k, v in SMOKE_LIMITS.items()}
        return self.replace(**small, teacher=self.teacher.smoke() if self.teacher else None)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def random_tokens(
    shape: tuple[int, ...], vocab_size: int, device: torch.device, generator: torch.Generator
) -> torch.Tensor:
    """Uniform random token ids (never zeros: docs/MEASURING.md rule 3), int64 on device."""
    return torch.randint(0, vocab_size, shape, generator=generator).to(device)


def model_bytes(model: torch.nn.Module) -> int:
    """Bytes of the parameters, each tensor once (the tied LM head is wte)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())
