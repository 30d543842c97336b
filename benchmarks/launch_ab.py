"""LayerNorm (+ residual add) forward+backward of gptstack.cuda_ops with its kernels launched as
programmatic dependents (the default on sm_90: a kernel starts while the one before it
finishes, cuda_launch.h) against ordinary launches, side by side in one `gptstack.bench`
comparison (rounds alternated, CUDA-graph timing, 10 calls a graph) at shakespeare-char's and
gpt2-124m's sizes, with the copy-bandwidth floor measured in the same run.

    python3 benchmarks/launch_ab.py --out DIR        # DIR/launch-ab-<gpu>-<date>.json

Bytes are counted as `gptstack bench ops` counts them (its params.about): LayerNorm reads x,
dy and x again and writes y and dx (5 tensors); with the residual add 8 (x, r, dy, ds, s read,
s, y, dx written).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import torch

import gptstack.cuda_ops as ops
from gptstack.bench.environment import device_slug, environment
from gptstack.bench.floors import measure_floors
from gptstack.bench.harness import Settings, Variant, compare
from gptstack.cuda_ops import _C

SIZES = {"shakespeare-char": (16384, 384), "gpt2-124m": (16384, 768)}


def fwd_bwd(op: str, n: int, c: int, programmatic: bool):
    g = torch.Generator(device="cuda").manual_seed(0)

    def rnd(*shape):
        return torch.randn(*shape, generator=g, device="cuda").to(torch.bfloat16)

    x, r, dy, ds = rnd(n, c).requires_grad_(), rnd(n, c).requires_grad_(), rnd(n, c), rnd(n, c)
    w, b = (1 + 0.1 * rnd(c)).requires_grad_(), (0.1 * rnd(c)).requires_grad_()

    def run(_):
        _C.set_programmatic_launch(programmatic)  # read at launch, so also at capture
        try:
            if op == "layernorm":
                return torch.autograd.grad(ops.layernorm(x, w, b), (x, w, b), dy)
            s, y = ops.add_layernorm(x, r, w, b)
            return torch.autograd.grad((s, y), (x, r, w, b), (ds, dy))
        finally:
            _C.set_programmatic_launch(True)

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget-s", type=float, default=2.0)
    args = ap.parse_args()
    device = torch.device("cuda")
    settings = Settings(budget_s=args.budget_s)
    floors = measure_floors(device, settings)
    copy_bps = floors["copy"]["bytes_per_s"]
    rows = []
    for preset, (n, c) in SIZES.items():
        for op, tensors in (("layernorm", 5), ("add_layernorm", 8)):
            variants = [
                Variant(name, fwd_bwd(op, n, c, flag), [None], timing="cuda_graph", inner=10)
                for name, flag in (("programmatic", True), ("ordinary", False))
            ]
            cmp = compare(variants, settings, device=device)
            if cmp.failures:
                sys.exit(f"launch_ab: {op} @ {preset} failed: {cmp.failures}")
            m = {k: v.stats["median"] for k, v in cmp.measurements.items()}
            moved = tensors * n * c * 2
            row = {
                "op": f"{op} fwd+bwd",
                "preset": preset,
                "shape": [n, c],
                "median_us": {k: 1e6 * v for k, v in m.items()},
                "samples_s": {k: v.samples for k, v in cmp.measurements.items()},
                "copy_fraction": {k: moved / v / copy_bps for k, v in m.items()},
                "speedup": m["ordinary"] / m["programmatic"],
            }
            rows.append(row)
            us, frac = row["median_us"], row["copy_fraction"]
            print(
                f"{row['op']:22s} @ {preset:16s} programmatic {us['programmatic']:6.1f} us"
                f" ({frac['programmatic']:.0%} of copy), ordinary {us['ordinary']:6.1f} us"
                f" ({frac['ordinary']:.0%})  {row['speedup']:.3f}x"
            )
    result = {
        "kind": "launch-ab",
        "rows": rows,
        "copy_bytes_per_s": copy_bps,
        "settings": settings.to_dict(),
        "environment": environment(device, command=sys.argv),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    day = datetime.date.today().strftime("%Y%m%d")
    path = args.out / f"launch-ab-{device_slug(device)}-{day}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
