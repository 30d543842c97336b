"""One optimizer step: forward and backward per micro-batch, gradient clipping, AdamW.

    step = TrainStep(fwd, model.parameters(), optimizer, device=device, bf16=True,
                     grad_clip=1.0, cuda_graph=True)
    loss = step.step(batches, lr)      # batches: grad_accum (x, y) pairs of (B, T) int64

Data parallel (DDP, FSDP2): pass the wrapped model as `fwd` and its gradient-sync switch as
`no_sync` (e.g. `ddp.no_sync`): it is entered around every micro-batch but the last, so gradients
are reduced across processes once per step, on the last backward (nanoGPT's train.py does the same).

This is the step `gptstack train` runs and the training ladder of `gptstack bench train`
measures: the ladder's rungs are this class's options (plus the optimizer and compile choices of
whoever builds `fwd`), so the benchmark times the real thing.

Eager, or -- on CUDA -- replayed as one CUDA graph. Small models on a big GPU spend most of a step
launching kernels: on the H200 the esp32 preset's step takes 12.1 ms with torch.compile and
1.79 ms as a replayed whole-step graph (6.8x; benchmarks/results/train-h200-20261130-101931.json).
The graph follows PyTorch's whole-network capture recipe (graphs.py): the first WARMUP_STEPS steps
run eagerly on a side stream (they are real training steps, on their real batches), then the
step is captured once into static input buffers and replayed for every later step. The optimizer
must then be capturable (step count and learning rate in device tensors:
`configure_adamw(capturable=True)`), so the schedule still changes the rate between replays.
Dropout stays random: the CUDA generator advances its Philox offset at each replay.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext

import torch

from .device import autocast
from .graphs import capture, run_on_side_stream
from .weight_average import WeightAverage

WARMUP_STEPS = 3  # eager steps before capture (the recipe asks for a few; compile happens here)

Batch = Sequence[tuple[torch.Tensor, torch.Tensor]]  # grad_accum (x, y) pairs of (B, T) int64


class TrainStep:
    """`step(batches, lr) -> loss` (the mean loss of the step's micro-batches, a device tensor:
    reading it synchronizes, so the loop reads it only when it logs).

    fwd: `model` or a compiled wrapper of it, called as fwd(x, y) -> (logits, loss).
    bf16: autocast forward and loss in bfloat16. grad_clip: clip the global grad norm (0: off).
    cuda_graph: capture the whole step once and replay it (CUDA; capturable optimizer).
    cudagraph_mark_step: call torch.compiler.cudagraph_mark_step_begin() before each step, which
    torch.compile(mode="reduce-overhead") needs when its graphs are replayed step after step.
    no_sync: a context-manager factory entered around the forward and backward of every
    micro-batch but the last (DDP's `no_sync`), or None.
    average: a WeightAverage of the parameters, updated after each optimizer step (in the graph
    too), or None.
    """

    def __init__(
        self,
        fwd: Callable,
        params: Sequence[torch.nn.Parameter],
        optimizer: torch.optim.Optimizer,
        *,
        device: torch.device,
        bf16: bool,
        grad_clip: float,
        cuda_graph: bool = False,
        cudagraph_mark_step: bool = False,
        no_sync: Callable[[], AbstractContextManager] | None = None,
        average: WeightAverage | None = None,
    ) -> None:
        if cuda_graph and device.type != "cuda":
            raise ValueError(f"cuda_graph=True needs a CUDA device, got {device}")
        self.fwd, self.params, self.optimizer = fwd, list(params), optimizer
        self.grad_clip, self.bf16, self.device = grad_clip, bf16, device
        self.cuda_graph, self.cudagraph_mark_step = cuda_graph, cudagraph_mark_step
        self.no_sync, self.average = no_sync, average
        self.warmup_left = WARMUP_STEPS if cuda_graph else 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.static_loss: torch.Tensor | None = None

    def _body(self, batches: Batch) -> torch.Tensor:
        total = None
        for i, (x, y) in enumerate(batches):
            last = i == len(batches) - 1
            with nullcontext() if last or self.no_sync is None else self.no_sync():
                with autocast(self.device, bf16=self.bf16, graph_safe=self.cuda_graph):
                    _, loss = self.fwd(x, y)
                (loss / len(batches)).backward()
            total = loss.detach() if total is None else total + loss.detach()
        if self.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip)
        self.optimizer.step()
        if self.average is not None:
            self.average.update()
        # The returned loss must not keep the step's autograd graph alive (hence detach above): a
        # live graph holds AccumulateGrad nodes created on the warm-up side stream, and the next
        # backward on another stream then warns (and syncs) about the stream mismatch.
        return total / len(batches)

    def _set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            if isinstance(group["lr"], torch.Tensor):
                group["lr"].fill_(lr)  # a device tensor: captured kernels read it at replay
            else:
                group["lr"] = lr

    def _eager(self, batches: Batch, lr: float) -> torch.Tensor:
        self._set_lr(lr)
        self.optimizer.zero_grad(set_to_none=True)
        if self.cudagraph_mark_step:
            torch.compiler.cudagraph_mark_step_begin()
        return self._body(batches)

    def step(self, batches: Batch, lr: float) -> torch.Tensor:
        if self.average is not None:
            self.average.prepare()
        if not self.cuda_graph:
            return self._eager(batches, lr)
        if self.warmup_left > 0:
            self.warmup_left -= 1
            return run_on_side_stream(lambda: self._eager(batches, lr), self.device)
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
        # The warm-up steps ran on real batches already: capture without more warm-up calls,
        # which would be extra optimizer steps.
        self.graph, self.static_loss = capture(
            lambda: self._body(self.static), self.device, warmup=0
        )
