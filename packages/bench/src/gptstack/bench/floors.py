"""The two floors every speed is compared with (docs/MEASURING.md rule 4), measured once per run.

    floors = measure_floors(torch.device("cuda"), settings)
    floors["copy"]["bytes_per_s"]     # device-to-device copy: bytes read + written per second
    floors["matmul"]["flops_per_s"]   # a large square matmul in the suite's dtype

A kernel that moves B bytes cannot beat B / copy rate; one that does F FLOPs cannot beat
F / matmul rate. These are measured, not datasheet numbers, so "fraction of the floor" is a
fraction of what this machine actually did today.
"""

from __future__ import annotations

from typing import Any

import torch

from .harness import Settings, Variant, compare

# Sizes: far larger than the last-level cache so the copy measures memory, not cache (H200:
# 50 MB L2; CPUs here: tens of MB of L3), and a matmul large enough to saturate the tensor cores.
COPY_BYTES = {"cuda": 1 << 30, "cpu": 1 << 28}
MATMUL_N = {"cuda": 8192, "cpu": 2048}
SMOKE_COPY_BYTES, SMOKE_MATMUL_N = 1 << 22, 256


def measure_floors(
    device: torch.device,
    settings: Settings,
    *,
    dtype: torch.dtype | None = None,
    smoke: bool = False,
) -> dict[str, Any]:
    """{"copy": {...}, "matmul": {...}} with raw samples and the derived rates."""
    kind = "cuda" if device.type == "cuda" else "cpu"
    nbytes = SMOKE_COPY_BYTES if smoke else COPY_BYTES[kind]
    n = SMOKE_MATMUL_N if smoke else MATMUL_N[kind]
    dtype = dtype or (torch.bfloat16 if kind == "cuda" else torch.float32)
    g = torch.Generator(device=device).manual_seed(0)
    src = torch.rand(nbytes // 4, generator=g, device=device)  # float32
    dst = torch.empty_like(src)
    a = torch.randn(n, n, generator=g, device=device, dtype=dtype)
    b = torch.randn(n, n, generator=g, device=device, dtype=dtype)
    cmp = compare(
        [
            Variant("copy", lambda _: dst.copy_(src), [None]),
            Variant("matmul", lambda _: a @ b, [None]),
        ],
        settings,
        device=device,
    )
    if cmp.failures:
        return {"error": cmp.failures}
    copy, mm = cmp.measurements["copy"], cmp.measurements["matmul"]
    moved = 2 * src.numel() * src.element_size()  # read src + write dst
    flops = 2 * n**3
    return {
        "copy": {
            "bytes_moved": moved,
            "samples_s": copy.samples,
            "time_s": copy.stats,
            "bytes_per_s": moved / copy.stats["median"],
            "what": "dst.copy_(src) of one buffer; bytes = read + write",
        },
        "matmul": {
            "n": n,
            "dtype": str(dtype).removeprefix("torch."),
            "flops": flops,
            "samples_s": mm.samples,
            "time_s": mm.stats,
            "flops_per_s": flops / mm.stats["median"],
            "what": f"({n}x{n}) @ ({n}x{n})",
        },
    }
