"""One training step -- forward, backward, gradient clipping and AdamW -- as one CUDA graph.

Small models on a big GPU spend most of a step launching kernels: on the H200 the esp32 preset's
step takes 12.1 ms with torch.compile and 1.79 ms as a replayed whole-step graph (6.8x;
benchmarks/results/train-h200-20261130-101931.json, `gptstack bench train`). This follows
PyTorch's whole-network capture recipe (torch.cuda.graphs docs): the first WARMUP_STEPS steps run
eagerly on a side stream (they are real training steps, on their real batches), then the step is
captured once into static input buffers and replayed for every later step. The optimizer must be
capturable (step count and learning rate in device tensors: `configure_adamw(capturable=True)`),
so the schedule still changes the rate between replays. Dropout stays random: the CUDA generator
advances its Philox offset at each replay.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Sequence

import torch

WARMUP_STEPS = 3  # eager steps before capture (the recipe asks for a few; compile happens here)


class GraphedTrainStep:
    """`step(batches, lr) -> loss` where batches is grad_accum (x, y) pairs of (B, T) tensors."""

    def __init__(self, fwd: Callable, params: Sequence[torch.nn.Parameter],
                 optimizer: torch.optim.Optimizer, *, grad_clip: float, bf16: bool,
                 device: torch.device) -> None:
        self.fwd, self.params, self.optimizer = fwd, list(params), optimizer
        self.grad_clip, self.bf16, self.device = grad_clip, bf16, device
        self.side = torch.cuda.Stream(device=device)
        self.warmup_left = WARMUP_STEPS
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.static_loss: torch.Tensor | None = None

    def _autocast(self):
        # cache_enabled=False: autocast's cache of cast weights is not graph-safe (torch docs).
        if not self.bf16:
            return contextlib.nullcontext()
        return torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False)

    def _body(self, batches: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
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
            group["lr"].fill_(lr)  # a device tensor: the captured kernels read it at replay

    def step(self, batches: Sequence[tuple[torch.Tensor, torch.Tensor]], lr: float) -> torch.Tensor:
        current = torch.cuda.current_stream(self.device)
        if self.warmup_left > 0:
            self.warmup_left -= 1
            self.side.wait_stream(current)
            with torch.cuda.stream(self.side):
                self._set_lr(lr)
                self.optimizer.zero_grad(set_to_none=True)
                loss = self._body(batches)
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

    def _capture(self, batches: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.static = [(x.clone(), y.clone()) for x, y in batches]
        # Gradients must be None at capture so backward allocates them from the graph's pool;
        # afterwards the graph overwrites them on every replay (never zero them in between).
        self.optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.static_loss = self._body(self.static)
        self.graph = graph
