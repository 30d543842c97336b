"""An exponential moving average (EMA) of the parameters, evaluated and saved in their place.

    average = WeightAverage(model.parameters(), decay=0.999)
    step = TrainStep(..., average=average)        # updated after every optimizer step
    with average.swapped_in():                    # the model now holds the average
        val = estimate_loss(model)

Small data makes the last iterates noisy: each step moves the weights by a batch's worth of
evidence. Averaging the recent iterates (Polyak averaging) gives a model that no single step
produced and that usually scores better on held-out text than any of them.

The decay ramps up as min(decay, (1 + n) / (10 + n)) after n updates, so the random initial
weights are forgotten within the first steps instead of lingering for ~1 / (1 - decay) of them.
The update is three foreach kernels whose weight lives in a device tensor (like the learning rate
of a capturable AdamW), so it is captured in the whole-step CUDA graph and still follows the
ramp at every replay: `prepare()` writes the next weight before each step.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

RAMP = 10  # the decay reaches (1 + n) / (RAMP + n): 0.1 at the first update, 0.9 after 80


class WeightAverage:
    """An EMA of `params` (same dtypes and devices), updated in place by `update()`."""

    def __init__(self, params: Iterable[torch.nn.Parameter], decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"the average's decay must be in (0, 1), got {decay}")
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("WeightAverage needs at least one trainable parameter")
        self.decay, self.updates = decay, 0
        with torch.no_grad():
            self.average = [p.detach().clone() for p in self.params]
        # 1 - decay of the coming update, on the device: a replayed graph reads it there
        self.weight = torch.zeros((), dtype=torch.float32, device=self.params[0].device)

    def current_decay(self) -> float:
        n = self.updates
        return min(self.decay, (1 + n) / (RAMP + n))

    def prepare(self) -> None:
        """Before each step (eager or replayed): the weight of the update that step makes."""
        self.weight.fill_(1.0 - self.current_decay())
        self.updates += 1

    @torch.no_grad()
    def update(self) -> None:
        """average += weight * (param - average), for every parameter; graph-capturable."""
        step = torch._foreach_sub(self.params, self.average)
        torch._foreach_mul_(step, self.weight)
        torch._foreach_add_(self.average, step)

    @contextmanager
    def swapped_in(self) -> Iterator[None]:
        """The parameters hold the average inside the block and their own values after it
        (copied in place: compiled code and captured graphs keep seeing the same storage)."""
        with torch.no_grad():
            own = [p.detach().clone() for p in self.params]
            torch._foreach_copy_(self.params, self.average)
        try:
            yield
        finally:
            with torch.no_grad():
                torch._foreach_copy_(self.params, own)

    def state_dict(self) -> dict[str, Any]:
        return {
            "decay": self.decay,
            "updates": self.updates,
            "average": [a.detach().cpu() for a in self.average],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        average = state["average"]
        shapes = [tuple(a.shape) for a in average]
        if shapes != [tuple(p.shape) for p in self.params]:
            raise ValueError(
                "the saved weight average does not match the model's parameters "
                f"({len(shapes)} saved tensors vs {len(self.params)}): was it saved by another "
                "configuration?"
            )
        with torch.no_grad():
            torch._foreach_copy_(
                self.average, [a.to(p.device) for a, p in zip(average, self.params)]
            )
        self.updates = int(state["updates"])  # the decay stays the configured one
