"""c_attn's output gradient from the attention's dq, dk, dv, side by side in one process: what
PyTorch does (torch.cat, then a column sum that reads the three again; eager, and compiled by
Inductor as one function) against `qkv_grad`'s one pass (csrc/qkv_grad.cu) at a few chunk
counts. Each is CALLS calls captured in one CUDA graph; median microseconds a call over ROUNDS
replays, and the bandwidth of the pass's minimum traffic (read dq, dk, dv; write dqkv).

    python3 packages/cuda_ops/scripts/qkv_grad_bench.py [--rows 16384 65536] [--c 768] [--json F]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

from gptstack.cuda_ops import _C
from gptstack.cuda_ops.qkv import _chunks

sys.path.insert(0, str(Path(__file__).resolve().parent))
import window_linear_bench  # noqa: E402


def graph_us(fn, calls: int, rounds: int) -> float:
    return statistics.median(window_linear_bench.graph_us(fn, calls, rounds))


def parts(N: int, C: int, calls: int, rounds: int) -> dict:
    g = torch.Generator(device="cuda").manual_seed(0)
    dq, dk, dv = (torch.randn(N, C, generator=g, device="cuda").bfloat16() for _ in range(3))
    dqkv = torch.empty(N, 3 * C, dtype=torch.bfloat16, device="cuda")
    dbias = torch.empty(3 * C, device="cuda")
    stream = lambda: torch.cuda.current_stream().cuda_stream  # noqa: E731

    def eager():
        torch.cat([dq, dk, dv], dim=1, out=dqkv)
        dbias.copy_(dqkv.sum(0, dtype=torch.float32))

    joined = torch.compile(
        lambda a, b, c: (lambda j: (j, j.sum(0, dtype=torch.float32)))(torch.cat([a, b, c], dim=1))
    )

    def compiled():
        joined(dq, dk, dv)

    def native(chunks):
        partials = torch.empty(chunks, 3 * C, device="cuda")

        def run():
            _C.qkv_grad(dqkv, dbias, partials, dq, dk, dv, stream(), 0)

        return run

    ref = torch.cat([dq, dk, dv], dim=1)
    candidates = {"torch eager": eager, "torch.compile": compiled}
    for chunks in sorted({_chunks(N), 64, 132, 1024}):
        if chunks <= N:
            candidates[
                f"qkv_grad chunks={chunks}" + (" (default)" if chunks == _chunks(N) else "")
            ] = native(chunks)
    out = {}
    bytes_moved = 2 * ref.numel() * ref.element_size()
    for name, fn in candidates.items():
        us = graph_us(fn, calls, rounds)
        if name.startswith("qkv_grad"):
            assert torch.equal(dqkv, ref), name
            torch.testing.assert_close(dbias, ref.float().sum(0), rtol=1e-4, atol=1e-2)
        out[name] = {"us": us, "GB/s": bytes_moved / us / 1e3}
        print(f"N={N:>6} C={C:>4} {name:<32} {us:8.1f} us  {bytes_moved / us / 1e3:7.0f} GB/s")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[16384, 65536, 131072])
    ap.add_argument("--c", type=int, nargs="+", default=[768, 384])
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json")
    args = ap.parse_args()
    results = {f"{N}x{C}": parts(N, C, args.calls, args.rounds) for C in args.c for N in args.rows}
    if args.json:
        window_linear_bench.write_record(args.json, "qkv-grad-parts", args, results=results)


if __name__ == "__main__":
    main()
