"""torch.compile for the GPT, whole or by region.

    fwd = compile_model(model, "full")       # torch.compile(model): one graph, longest compile
    fwd = compile_model(model, "regional")   # each Block compiled in place, plus the head

Regional compilation (PyTorch's "regional compilation" recipe, torch.compile tutorials): every
Block runs the same code on the same shapes, so Dynamo compiles it once and the other layers
reuse that code; the head (ln_f, LM head, loss) is compiled on its own. Start-up shrinks with
the depth of the model, at the price of the fusions across block boundaries (a block's last
residual add and the next block's LayerNorm run as two kernels instead of one). Which one
`gptstack train` uses is measured in `gptstack bench train` and benchmarks/README.md.

Compiled code is cached on disk by Inductor (TORCHINDUCTOR_CACHE_DIR); `gptstack` points it at
its cache folder so that a second run of the same preset skips code generation.
"""

from __future__ import annotations

from torch import nn

from .errors import ModelError
from .io import unwrap

COMPILE_MODES = ("full", "regional")


def compile_model(model: nn.Module, how: str, **options) -> nn.Module:
    """The module to call for training: torch.compile(model) ("full"), or the model itself
    with its blocks and head compiled in place ("regional"). options go to torch.compile
    (fullgraph, dynamic, backend, mode)."""
    import torch

    if how == "full":
        return torch.compile(model, **options)
    if how != "regional":
        raise ModelError(f"compile {how!r} is unknown: choose one of {list(COMPILE_MODES)}")
    gpt = unwrap(model)
    for block in gpt.h:
        block.compile(**options)
    gpt.head = torch.compile(gpt.head, **options)  # an instance attribute over the method
    return model
