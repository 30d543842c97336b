"""Causal attention on the GPU: gptstack.cuda_ops against every SDPA backend, side by side.

    python packages/cuda_ops/scripts/attention_bench.py --out $OUT          # on the H200
    python packages/cuda_ops/scripts/attention_bench.py --smoke --device cpu  # checks the script

For each preset shape in bf16 (esp32 B64 nh8 T64 hs32, shakespeare-char B64 nh6 T256 hs64,
gpt2-124m B16 nh12 T1024 hs64), at dropout 0 and at the preset's training dropout: the forward,
and the forward plus backward, exactly as the model runs them (q, k, v as views of one
(B, T, 3C) c_attn output, y re-assembled to (B, T, C), gradients back to that buffer). Candidates:
the gptstack kernel with its defaults and each variant (warps per CTA 4/8; backward mode
stages/atomic, csrc/attention_backward.cuh), and SDPA restricted to one backend each with
torch.nn.attention.sdpa_kernel (flash, efficient, cudnn, math). A candidate that refuses a shape
or dropout is recorded with its error. Each row is timed twice with gptstack.bench's harness
(warm-up, A B C ... rounds alternated in one process, 3 rotating input sets, medians and
per-round ratios, MEASURING.md): "eager" (CUDA events around one call: includes the host's
launch overhead when the GPU is faster than Python) and "graph" (the calls captured in a CUDA
graph and replayed: the GPU time a captured training step sees). Every candidate's output and
gradients are first checked against manual attention in float32 (relative error < 1e-2).

Prints one table (per row: the best SDPA backend, gptstack's default and best variant, and the
median of the per-round ratios best-SDPA time / gptstack time: > 1 means gptstack is faster)
and writes attention-bench-<device>-<date>.json into --out (default $OUT, else the current
folder) with the environment, every raw sample and every ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from gptstack.bench import Settings, Variant, compare, speedups, summarize
from gptstack.bench.environment import environment
from gptstack.bench.results import result_path, write_json_atomic
from gptstack.cuda_ops import causal_attention
from gptstack.cuda_ops.attention import cuda_variant
from gptstack.model import manual_attention
from torch.nn.attention import SDPBackend, sdpa_kernel

# (B, nh, T, hs, training dropout) of tools/src/gptstack/tools/presets/*.toml
PRESETS = {
    "esp32": (64, 8, 64, 32, 0.2),
    "shakespeare-char": (64, 6, 256, 64, 0.2),
    "gpt2-124m": (16, 12, 1024, 64, 0.0),
}
SDPA_BACKENDS = {
    "sdpa flash": SDPBackend.FLASH_ATTENTION,
    "sdpa efficient": SDPBackend.EFFICIENT_ATTENTION,
    "sdpa cudnn": SDPBackend.CUDNN_ATTENTION,
    "sdpa math": SDPBackend.MATH,
}
# gptstack variants: name -> cuda_variant(forward warps, backward warps, backward mode)
FORWARD_VARIANTS = {
    "gptstack": (0, 0, "auto"),
    "gptstack w4": (4, 0, "auto"),
    "gptstack w8": (8, 0, "auto"),
}
STEP_VARIANTS = {
    "gptstack": (0, 0, "auto"),
    "gptstack w4 stages": (4, 4, "stages"),
    "gptstack w8 stages": (8, 8, "stages"),
    "gptstack w4 atomic": (4, 4, "atomic"),
    "gptstack w8 atomic": (8, 8, "atomic"),
}
INPUT_SETS = 3
CHECK_TOL = 1e-2  # bf16 against float32 (MEASURING.md rule 5)
GRAPH_CALLS = {"esp32": 20, "shakespeare-char": 10, "gpt2-124m": 2}  # calls per graph replay


def gptstack_fn(variant, p):
    def attend(q, k, v):
        with cuda_variant(*variant):
            return causal_attention(q, k, v, dropout_p=p)

    return attend


def sdpa_fn(backend, p):
    def attend(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)

    return attend


def make_inputs(shape, device, gen, requires_grad):
    """INPUT_SETS of (qkv (B, T, 3C) leaf, dout (B, T, C)) on device, bf16."""
    B, nh, T, hs, _ = shape
    C = nh * hs
    sets = []
    for _ in range(INPUT_SETS):
        qkv = torch.randn(B, T, 3 * C, generator=gen).to(device, torch.bfloat16)
        dout = torch.randn(B, T, C, generator=gen).to(device, torch.bfloat16)
        sets.append((qkv.requires_grad_(requires_grad), dout))
    return sets


def model_call(attend, qkv, nh):
    """The model's attention step around `attend`: split, heads, attend, re-assemble."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    q, k, v = (t.view(B, T, nh, C // nh).transpose(1, 2) for t in qkv.split(C, dim=2))
    return attend(q, k, v).transpose(1, 2).contiguous().view(B, T, C)


def step_fn(attend, nh, backward):
    """fn(inputs) for the harness: the forward, or the forward and the backward to qkv."""

    def run(x):
        qkv, dout = x
        out = model_call(attend, qkv, nh)
        if not backward:
            return out
        return out, torch.autograd.grad(out, qkv, dout)[0]

    return run


def check(attend, inputs, nh, backward) -> float:
    """Largest relative error of the candidate's output (and gradient) vs float32 manual."""
    qkv, dout = inputs[0]
    ref_qkv = qkv.detach().float().requires_grad_(backward)
    ref = model_call(manual_attention, ref_qkv, nh)
    got = step_fn(attend, nh, backward)(inputs[0])
    pairs = [(got if not backward else got[0], ref)]
    if backward:
        pairs.append((got[1], torch.autograd.grad(ref, ref_qkv, dout.float())[0]))
    return max(((a.float() - b).norm() / b.norm()).item() for a, b in pairs)


def run_row(preset, p, backward, timing, settings, device, gen):
    shape = PRESETS[preset]
    nh = shape[1]
    inputs = make_inputs(shape, device, gen, requires_grad=backward)
    variants = STEP_VARIANTS if backward else FORWARD_VARIANTS
    cands = {name: gptstack_fn(v, p) for name, v in variants.items()}
    cands.update({name: sdpa_fn(b, p) for name, b in SDPA_BACKENDS.items()})
    checks, failures, runnable = {}, {}, []
    for name, attend in cands.items():
        try:
            if p == 0:
                checks[name] = check(attend, inputs, nh, backward)
                if not checks[name] < CHECK_TOL:
                    failures[name] = f"wrong result: relative error {checks[name]:.2e}"
                    continue
            else:  # dropout: masks differ by design; check it runs and stays finite
                out = step_fn(attend, nh, backward)(inputs[0])
                if not all(torch.isfinite(t).all() for t in (out if backward else (out,))):
                    failures[name] = "non-finite output with dropout"
                    continue
            runnable.append(name)
        except Exception as e:  # noqa: BLE001 (a backend refusing this shape is a result)
            failures[name] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"
    inner = GRAPH_CALLS[preset] if timing == "cuda_graph" else 1
    vs = [
        Variant(n, step_fn(cands[n], nh, backward), inputs, timing=timing, inner=inner)
        for n in runnable
    ]
    with torch.no_grad() if not backward else contextlib.nullcontext():
        cmp = compare(vs, settings, device=device)
    failures.update(cmp.failures)
    return summarize_row(preset, shape, p, backward, timing, cmp, checks, failures)


def summarize_row(preset, shape, p, backward, timing, cmp, checks, failures):
    B, nh, T, hs, _ = shape
    flops = 2 * B * nh * T * T * hs * (3.5 if backward else 1.0)  # causal half; bwd = 2.5 fwd
    ms = cmp.measurements
    row = {
        "preset": preset,
        "shape": {"B": B, "nh": nh, "T": T, "hs": hs},
        "dropout_p": p,
        "pass": "forward+backward" if backward else "forward",
        "timing": "graph" if timing == "cuda_graph" else "eager",
        "flops": flops,
        "checks": checks,
        "failures": failures,
        "candidates": {},
        "ratios": {},
    }
    for name, m in ms.items():
        row["candidates"][name] = {
            "samples_s": m.samples,
            "stats": m.stats,
            "inner": m.inner,
            "tflops": flops / m.stats["median"] / 1e12,
        }
    sdpa = [n for n in ms if n.startswith("sdpa")]
    ours = [n for n in ms if n.startswith("gptstack")]
    if sdpa:
        best_sdpa = min(sdpa, key=lambda n: ms[n].stats["median"])
        row["best_sdpa"] = best_sdpa
        for g in ours:  # per-round ratios: > 1 means gptstack is faster
            row["ratios"][g] = {b: summarize(speedups(ms[b].samples, ms[g].samples)) for b in sdpa}
    if ours:
        row["best_gptstack"] = min(ours, key=lambda n: ms[n].stats["median"])
    return row


def _us(cands, name) -> str:
    return f"{cands[name]['stats']['median'] * 1e6:8.1f}" if name in cands else f"{'-':>8s}"


def _ratio(ratios, name, best) -> str:
    return f"{ratios[name][best]['median']:6.2f}" if best and name in ratios else f"{'-':>6s}"


def table(rows) -> str:
    head = (
        f"{'preset':17s} {'p':>4s} {'pass':9s} {'timing':6s} {'best sdpa':15s} {'us':>8s} "
        f"{'gptstack us':>11s} {'ratio':>6s}  {'best gptstack variant':22s} {'us':>8s} "
        f"{'ratio':>6s}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        c, rat = r["candidates"], r["ratios"]
        b, g = r.get("best_sdpa"), r.get("best_gptstack")
        lines.append(
            f"{r['preset']:17s} {r['dropout_p']:4.2f} {r['pass'][:9]:9s} {r['timing']:6s} "
            f"{(b or 'none'):15s} {_us(c, b)} {_us(c, 'gptstack'):>11s} "
            f"{_ratio(rat, 'gptstack', b)}  {(g or 'none'):22s} {_us(c, g)} "
            f"{_ratio(rat, g, b)}"
        )
    refused: dict[tuple[str, str], set[str]] = {}  # (candidate, reason) -> rows
    for r in rows:
        for n, why in r["failures"].items():
            refused.setdefault((n, why[:100]), set()).add(f"{r['preset']} p={r['dropout_p']}")
    lines += [
        f"  not timed: {n} ({', '.join(sorted(where))}): {why}"
        for (n, why), where in sorted(refused.items())
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--presets", nargs="*", default=list(PRESETS), choices=list(PRESETS))
    ap.add_argument("--budget-s", type=float, default=1.0, help="timed seconds per row")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, 3 rounds: checks the script")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("attention_bench: no CUDA device visible", file=sys.stderr)
        return 2
    if args.smoke:
        for name, (B, nh, T, hs, p) in list(PRESETS.items()):
            PRESETS[name] = (2, nh, min(T, 80), hs, p)
        GRAPH_CALLS.update({n: 1 for n in GRAPH_CALLS})
    settings = Settings.smoke() if args.smoke else Settings(budget_s=args.budget_s)
    timings = ["cuda_events", "cuda_graph"] if device.type == "cuda" else ["cpu"]
    gen = torch.Generator().manual_seed(0)
    rows = []
    for preset in args.presets:
        for p in sorted({0.0, PRESETS[preset][4]}):
            for backward in (False, True):
                for timing in timings:
                    print(
                        f"[attention_bench] {preset} p={p} "
                        f"{'fwd+bwd' if backward else 'fwd'} {timing}",
                        file=sys.stderr,
                    )
                    rows.append(run_row(preset, p, backward, timing, settings, device, gen))
    data = {
        "kind": "attention kernels vs every SDPA backend (cuda_ops/scripts/attention_bench.py)",
        "suite": "attention-bench",
        "env": environment(device, ["python", *sys.argv]),
        "settings": settings.to_dict(),
        "presets": {n: PRESETS[n] for n in args.presets},
        "graph_calls": GRAPH_CALLS,
        "rows": rows,
    }
    path = result_path(args.out, "attention-bench", device)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, data)
    print(table(rows))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
