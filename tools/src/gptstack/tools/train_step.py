"""One optimizer step: forward and backward per micro-batch, gradient clipping, AdamW.

Eager, or -- on CUDA -- replayed as one CUDA graph. Small models on a big GPU spend most of a step
launching kernels: on the H200 the esp32 preset's step takes 12.1 ms with torch.compile and
1.79 ms as a replayed whole-step graph (6.8x; benchmarks/results/train-h200-20261130-101931.json,
`gptstack bench train`). The graph follows PyTorch's whole-network capture recipe
(torch.cuda.graphs docs): the first WARMUP_STEPS steps run eagerly on a side stream (they are real
training steps, on their real batches), then the step is captured once into static input buffers
and replayed for every later step. The optimizer must then be capturable (step count and learning
rate in device tensors: `configure_adamw(capturable=True)`), so the schedule still changes the
rate between replays. Dropout stays random: the CUDA generator advances its Philox offset at each
replay.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Sequence

import torch

WARMUP_STEPS = 3  # eager steps before capture (the recipe asks for a few; compile happens here)

Batch = Sequence[tuple[torch.Tensor, torch.Tensor]]  # grad_accum (x, y) pairs of (B, T) int64


class TrainStep:
    """`step(batches, lr) -> loss` (the last micro-batch's loss, a device tensor)."""

    def __init__(self, fwd: Callable, params: Sequence[torch.nn.Parameter],
                 optimizer: torch.optim.Optimizer, *, grad_clip: float, bf16: bool,
                 device: torch.device, cuda_graph: bool = False) -> None:
        self.fwd, self.params, self.optimizer = fwd, list(params), optimizer
        self.grad_clip, self.bf16, self.device = grad_clip, bf16, device
        self.cuda_graph = cuda_graph
        self.warmup_left = WARMUP_STEPS if cuda_graph else 0
        self.side = torch.cuda.Stream(device=device) if cuda_graph else None
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.static_loss: torch.Tensor | None = None

    def _autocast(self):
        if not self.bf16:
            return contextlib.nullcontext()
        # Autocast's cache of cast weights is not graph-safe (torch.cuda.graphs docs).
        return torch.autocast(self.device.type, dtype=torch.bfloat16,
                              cache_enabled=not self.cuda_graph)

    def _body(self, batches: Batch) -> torch.Tensor:
        loss = None
        for x, y in batches:
            with self._autocast():
                _, loss = self.fwd(x, y)
            (loss / len(batches)).backward()
        if self.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip)
        self.optimizer.step()
        return loss

    def _set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            if isinstance(group["lr"], torch.Tensor):
                group["lr"].fill_(lr)  # a device tensor: captured kernels read it at replay
            else:
                group["lr"] = lr

    def _eager(self, batches: Batch, lr: float) -> torch.Tensor:
        self._set_lr(lr)
        self.optimizer.zero_grad(set_to_none=True)
        return self._body(batches)

    def step(self, batches: Batch, lr: float) -> torch.Tensor:
        if not self.cuda_graph:
            return self._eager(batches, lr)
        if self.warmup_left > 0:
            self.warmup_left -= 1
            current = torch.cuda.current_stream(self.device)
            self.side.wait_stream(current)
            with torch.cuda.stream(self.side):
                loss = self._eager(batches, lr)
            current.wait_stream(self.side)
            return loss
        if self.graph is None:
            self._capture(batches)
        for (sx, sy), (x, y) in zip(self.static, batches, strict=True):
            sx.copy_(x, non_blocking=True)
            sy.copy_(y, non_blocking=True)
        self._set_lr(lr)
        self.graph.replay()
        return self.static_loss

    def _capture(self, batches: Batch) -> None:
        self.static = [(x.clone(), y.clone()) for x, y in batches]
        # Gradients must be None at capture so backward allocates them from the graph's pool;
        # afterwards the graph overwrites them on every replay (never zero them in between).
        self.optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.static_loss = self._body(self.static)
        self.graph = graph
