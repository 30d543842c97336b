"""Where a profiled step's GPU time goes, by kind of kernel.

    shares = kernel_shares(rows)   # rows: [{"name": kernel, "gpu_us_per_step": us}, ...]
    shares["matmul"]["fraction"]   # of the step's kernel time

A training step is a thousand kernels with generated names (cuBLAS's `nvjet_*`, cuDNN's
`*sdpa*`, Inductor's `triton_*_fused_*`, gptstack.cuda_ops' `gs::...`); what decides the next
optimisation is the share of each kind: the matmuls, the attention, the normalisations, the
activations, the loss, the optimizer. `benchmarks/profile_step.py` records these shares beside
its kernel table. The first rule that matches a name wins (RULES' order), so an Inductor kernel
that fused a LayerNorm backward with the loss counts as LayerNorm.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# (kind, pattern searched in the kernel's name), first match wins; unmatched: "other"
# (Inductor fuses the embedding's and the last LayerNorm's backward with the loss's forward:
# such a kernel is mostly LayerNorm work, so "layernorm" comes before "loss")
RULES: tuple[tuple[str, str], ...] = (
    ("optimizer", r"Adam|multi_tensor_apply"),
    ("attention", r"sdpa|flash|fmha|attention|cudnn::fusion"),
    ("matmul", r"nvjet|gemm|gemv|cutlass|splitKreduce|xmma|cublas"),
    ("layernorm", r"layer_norm|layernorm"),
    ("gelu", r"gelu"),
    ("loss", r"cross_entropy|nll_loss|log_softmax"),
)
KINDS = tuple(kind for kind, _ in RULES) + ("other",)
_COMPILED = tuple((kind, re.compile(pattern, re.IGNORECASE)) for kind, pattern in RULES)


def kernel_kind(name: str) -> str:
    """The kind of the kernel called `name` (KINDS)."""
    for kind, pattern in _COMPILED:
        if pattern.search(name):
            return kind
    return "other"


def kernel_shares(rows: Iterable[dict]) -> dict[str, dict[str, float]]:
    """{kind: {"us": GPU µs per step, "fraction": of the total}} over every kind in KINDS (zero
    where none ran), from rows of {"name", "gpu_us_per_step"}. ValueError on a negative time."""
    us = dict.fromkeys(KINDS, 0.0)
    for row in rows:
        t = float(row["gpu_us_per_step"])
        if t < 0:
            raise ValueError(f"kernel {row['name']!r} has a negative time {t}")
        us[kernel_kind(row["name"])] += t
    total = sum(us.values())
    return {k: {"us": v, "fraction": v / total if total else 0.0} for k, v in us.items()}


def shares_line(shares: dict[str, dict[str, float]]) -> str:
    """'matmul 54.7 %, attention 14.3 %, ...', largest first, kinds with no time left out."""
    ranked = sorted(shares.items(), key=lambda kv: -kv[1]["us"])
    return ", ".join(f"{k} {100 * v['fraction']:.1f} %" for k, v in ranked if v["us"] > 0)
