"""The MLP's matmuls that carry the GELU or the residual add, each way, side by side in one
process: what training runs with PyTorch's ops (cuBLAS's matmul, then a GELU kernel; the bias
gradient a reduction; c_proj's output then added to the residual stream) against one cuBLASLt
matmul with the GELU or the residual in its epilogue (csrc/linear_gelu.cpp),
with the heuristic's first algorithm and with the fastest of its candidates timed
(`_C.set_cublaslt_autotune`). Each part is CALLS calls captured in one CUDA graph; median
microseconds a call over ROUNDS replays.

    python3 packages/cuda_ops/scripts/mlp_epilogue_bench.py [--rows 16384 65536] [--c 768] \
        [--json F]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from gptstack.cuda_ops import _C
from gptstack.cuda_ops.mlp import WORKSPACE_BYTES

sys.path.insert(0, str(Path(__file__).resolve().parent))
import window_linear_bench  # noqa: E402


def graph_us(fn, calls: int, rounds: int) -> float:
    """Median microseconds a call (window_linear_bench's timing: a CUDA graph of `calls`)."""
    return statistics.median(window_linear_bench.graph_us(fn, calls, rounds))


def parts(N: int, C: int) -> dict:
    F = 4 * C
    g = torch.Generator(device="cuda").manual_seed(0)

    def rnd(*shape, scale=1.0):
        return (scale * torch.randn(*shape, generator=g, device="cuda")).bfloat16()

    x, w, b = rnd(N, C), rnd(F, C, scale=0.02), rnd(F, scale=0.02)
    w2, b2, gy = rnd(C, F, scale=0.02), rnd(C, scale=0.02), rnd(N, C)
    y, s = torch.empty_like(x), torch.empty_like(x)
    u, h, du, dh = (torch.empty(N, F, dtype=torch.bfloat16, device="cuda") for _ in range(4))
    db = torch.empty(F, dtype=torch.bfloat16, device="cuda")
    ws = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    stream = lambda: torch.cuda.current_stream().cuda_stream  # noqa: E731

    def fc_torch():  # addmm with cuBLAS's bias epilogue, then the GELU kernel
        torch.addmm(b, x, w.t(), out=u)
        _C.gelu_forward(h, u, stream(), 0)

    def fc_lt():
        assert _C.linear_gelu_forward(h, u, x, w, b, ws.data_ptr(), WORKSPACE_BYTES, stream())

    def dgrad_torch():  # matmul, GELU backward kernel, bias gradient
        torch.mm(gy, w2, out=dh)
        _C.gelu_backward(du, dh, u, stream(), 0)
        db.copy_(du.sum(0, dtype=torch.float32))

    def dgrad_lt():  # DGELU, the bias gradient a reduction (DGELU_BGRAD: 2.2x slower, gone)
        assert _C.linear_gelu_backward(du, gy, w2, u, ws.data_ptr(), WORKSPACE_BYTES, stream())
        db.copy_(du.sum(0, dtype=torch.float32))

    def proj_torch():  # c_proj with cuBLAS's bias epilogue, then the residual add
        torch.addmm(b2, h, w2.t(), out=y)
        torch.add(x, y, out=s)

    def proj_lt():  # the residual as cuBLASLt's C operand
        assert _C.linear_residual(s, h, w2, b2, x, ws.data_ptr(), WORKSPACE_BYTES, stream())

    out = {"rows": N, "C": C}
    h.normal_()
    calls, rounds = 20, 15
    out["fc_matmul_only_us"] = graph_us(lambda: torch.addmm(b, x, w.t(), out=u), calls, rounds)
    out["fc_torch_us"] = graph_us(fc_torch, calls, rounds)
    out["dgrad_matmul_only_us"] = graph_us(lambda: torch.mm(gy, w2, out=dh), calls, rounds)
    out["dgrad_torch_us"] = graph_us(dgrad_torch, calls, rounds)
    out["proj_matmul_only_us"] = graph_us(lambda: torch.addmm(b2, h, w2.t(), out=y), calls, rounds)
    out["proj_torch_us"] = graph_us(proj_torch, calls, rounds)
    for tune in (0, 8):
        _C.set_cublaslt_autotune(tune)
        out[f"fc_lt_autotune{tune}_us"] = graph_us(fc_lt, calls, rounds)
        out[f"dgrad_lt_autotune{tune}_us"] = graph_us(dgrad_lt, calls, rounds)
        out[f"proj_lt_autotune{tune}_us"] = graph_us(proj_lt, calls, rounds)
    _C.set_cublaslt_autotune(0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[16384, 65536])
    ap.add_argument("--c", type=int, default=768)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    results = [parts(N, args.c) for N in args.rows]
    for r in results:
        print(
            " ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items())
        )
    choices = _C.cublaslt_choices()
    for c in choices:
        times = ", ".join(f"{t:.1f}" for t in c["times_us"])
        print(
            f"m={c['m']} n={c['n']} k={c['k']} epilogue={c['epilogue']} candidates="
            f"{c['candidates']} rank={c['rank']} tuned={c['tuned']} times_us=[{times}]"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"device": torch.cuda.get_device_name(), "parts": results, "choices": choices},
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
