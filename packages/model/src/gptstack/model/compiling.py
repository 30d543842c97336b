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

import sys
import threading

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


def release_compile_workers() -> threading.Thread | None:
    """Shut Inductor's compile-worker processes down on a background thread, once everything is
    compiled. Inductor starts them with its first compile, also when every kernel then comes
    from its disk cache, and at exit waits for their shutdown: on the H200 a 20-step
    shakespeare-char run with a warm cache took 7.0 s from its summary to its exit, 1.9 s with
    TORCHINDUCTOR_COMPILE_THREADS=1. Shut down during training instead, that wait overlaps the
    steps. A later compile starts new workers. The thread is not a daemon, so the interpreter
    joins it before Inductor's own exit handler runs. None where Inductor never started."""
    async_compile = sys.modules.get("torch._inductor.async_compile")
    shutdown = getattr(async_compile, "shutdown_compile_workers", None)  # private: may vanish
    if shutdown is None:
        return None
    thread = threading.Thread(target=shutdown, name="gptstack-compile-workers")
    thread.start()
    return thread
