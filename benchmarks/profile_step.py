"""Profile one training step per preset on a GPU: which kernels, how many, how long.

    python3 benchmarks/profile_step.py --out $OUT [--presets esp32,shakespeare-char,gpt2-124m]
        [--batch-size 16] [--ops torch]   (default: the preset's micro-batch and ops on a GPU)

Builds each preset's model exactly as `gptstack train` does on CUDA (bf16 autocast, torch.compile,
the whole step captured as one CUDA graph), warms it up, then records a few graph replays with
torch.profiler. Writes, per preset, a JSON of the kernel table (name, calls per step, total and
mean GPU time), the kernel time's shares by kind (matmul, attention, LayerNorm, GELU, loss,
optimizer, other: gptstack.bench.kernel_shares), the SM clock and power nvidia-smi sampled while
the timed steps ran (gptstack.bench.telemetry) and a gzipped Chrome trace; prints the top
kernels and the shares. The profile is what the
kernel work of packages/cuda_ops is chosen from (METHOD.md: profile before you optimise).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import shutil
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from gptstack.bench.kernel_shares import kernel_shares, shares_line
from gptstack.bench.telemetry import GpuTelemetry
from gptstack.tools.bench_cli import preset_shape


def build_step(
    name: str, device: torch.device, cuda_graph: bool, batch_size: int | None, ops: str | None
):
    """The preset's step as `gptstack train` runs it on a GPU: its train.cuda_ops, and the
    micro-batch train.cuda_batch_size gives on this GPU, unless ops / batch_size say otherwise."""
    from gptstack.model import GPT, TrainStep, compile_model
    from gptstack.tools.config import load_preset
    from gptstack.tools.schedule import cuda_micro_batch
    from gptstack.tools.train import fits_gpu

    preset = load_preset(name)
    train = preset.train
    shape = preset_shape(name, batch_size)
    torch.manual_seed(0)
    ops = ops or train.cuda_ops or shape.config().ops
    # the preset's residual stream dtype too (gpt2-124m's is bf16): ModelShape does not carry it
    config = dataclasses.replace(shape.config(), ops=ops, residual=preset.model.residual)
    model = GPT(config).to(device)
    if batch_size is None and train.cuda_batch_size:  # train's choice: halved where it won't fit
        rows, _ = cuda_micro_batch(train, fits_gpu(model.config, model.num_params(), device))
        shape = preset_shape(name, rows)
    opt = model.configure_optimizer(0.1, 1e-4, (0.9, 0.95), "cuda", capturable=cuda_graph)
    fwd = compile_model(model, os.environ.get("COMPILE", "regional"))
    step = TrainStep(
        fwd, model.parameters(), opt, grad_clip=1.0, bf16=True, device=device, cuda_graph=cuda_graph
    )
    g = torch.Generator().manual_seed(1)
    B, T, V = shape.batch_size, shape.block_size, shape.vocab_size
    batches = [
        [
            (
                torch.randint(0, V, (B, T), generator=g).to(device),
                torch.randint(0, V, (B, T), generator=g).to(device),
            )
        ]
        for _ in range(4)
    ]
    return step, batches, shape, ops


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/profile")))
    ap.add_argument("--presets", default="esp32,shakespeare-char,gpt2-124m")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch-size", type=int, help="micro-batch (default: the preset's on a GPU)")
    ap.add_argument("--ops", help="model.ops, e.g. torch (default: the preset's on a GPU)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    summary = {}
    for name in args.presets.split(","):
        t0 = time.perf_counter()
        step, batches, shape, step_ops = build_step(
            name, device, cuda_graph=True, batch_size=args.batch_size, ops=args.ops
        )
        for i in range(6):  # 3 eager warm-up steps, capture, replays
            step.step(batches[i % 4], 1e-4)
        torch.cuda.synchronize()
        startup = time.perf_counter() - t0
        ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with GpuTelemetry(interval_ms=50) as gpu:  # the SM clock the timed steps ran at
            ev0.record()
            for i in range(20):
                step.step(batches[i % 4], 1e-4)
            ev1.record()
            ev1.synchronize()
        ms = ev0.elapsed_time(ev1) / 20
        telemetry = gpu.summary()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for i in range(args.steps):
                step.step(batches[i % 4], 1e-4)
            torch.cuda.synchronize()
        rows = []
        for e in prof.key_averages():
            dev_us = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
            if dev_us <= 0 or e.key.startswith("ProfilerStep"):
                continue
            rows.append(
                {
                    "name": e.key,
                    "calls_per_step": e.count / args.steps,
                    "gpu_us_per_step": dev_us / args.steps,
                }
            )
        rows.sort(key=lambda r: -r["gpu_us_per_step"])
        kernels = [
            r
            for r in rows
            if not r["name"].startswith(("aten::", "cuda", "Torch", "CompiledFunction", "##"))
        ]
        total_us = sum(r["gpu_us_per_step"] for r in kernels)
        n_kernels = sum(r["calls_per_step"] for r in kernels)
        shares = kernel_shares(kernels)  # over every kernel, not only the top 40 kept
        summary[name] = {
            "shape": shape.to_dict(),
            "ops": step_ops,
            "ms_per_step_graph": ms,
            "gpu_telemetry": telemetry,
            "startup_s": startup,
            "kernels_per_step": n_kernels,
            "kernel_us_per_step": total_us,
            "shares": shares,
            "top": kernels[:40],
        }
        trace = args.out / f"trace-{name}.json"
        prof.export_chrome_trace(str(trace))
        with open(trace, "rb") as f, gzip.open(f"{trace}.gz", "wb") as g:
            shutil.copyfileobj(f, g)
        trace.unlink()
        print(
            f"== {name}: {ms:.3f} ms/step (graph replay), {n_kernels:.0f} kernels/step, "
            f"{total_us / 1e3:.3f} ms of kernel time, start-up {startup:.1f} s"
        )
        print(f"   kernel time by kind: {shares_line(shares)}")
        if telemetry and "sm_clock_mhz" in telemetry:
            print(f"   while timed: {json.dumps(telemetry)}")
        for r in kernels[:25]:
            print(
                f"  {r['gpu_us_per_step']:9.1f} us  x{r['calls_per_step']:5.1f}  {r['name'][:110]}"
            )
        del step, batches
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    (args.out / "profile-step.json").write_text(
        json.dumps(
            {
                "torch": torch.__version__,
                "device": torch.cuda.get_device_name(),
                "presets": summary,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
