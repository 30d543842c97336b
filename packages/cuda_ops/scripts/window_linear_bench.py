"""The slide window's matrices one by one: decode_linear's tensor-core kernel (csrc/decode_mma.cuh,
LayerNorm / GELU / residual fused) against what the window ran before (cuBLAS F.linear with the
fused LayerNorm or GELU kernel beside it), each as a chain of CALLS dependent calls captured in
one CUDA graph, replayed; median microseconds a call over rounds, the two alternated.

    python3 packages/cuda_ops/scripts/window_linear_bench.py \
        [--preset-c 384] [--rows 256] [--json F]

--once runs each matrix twice through both paths, untimed: the driver for `ncu` (e.g.
`ncu -k regex:decode_linear_mma python3 .../window_linear_bench.py --preset-c 256 --rows 64
--once`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import gptstack.cuda_ops as ops
from gptstack.cuda_ops import _C


def capture_graph(fn, calls: int) -> torch.cuda.CUDAGraph:
    """`calls` calls of fn in one CUDA graph, after 3 outside it (LaunchCheck, cuBLAS
    workspaces, cuBLASLt's algorithm choice, timed where autotuning is on), replayed once."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side), torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    return graph


def graph_us(fn, calls: int, rounds: int) -> list[float]:
    graph = capture_graph(fn, calls)
    out = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        out.append(1e3 * start.elapsed_time(end) / calls)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset-c", type=int, default=384)
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--json", default=None)
    ap.add_argument("--once", action="store_true", help="each path twice, untimed (for ncu)")
    args = ap.parse_args()
    C, R = args.preset_c, args.rows
    g = torch.Generator(device="cuda").manual_seed(0)

    def rnd(*s, scale=1.0):
        return (scale * torch.randn(*s, generator=g, device="cuda")).to(torch.bfloat16)

    x, lw, lb = rnd(R, C), 1 + rnd(C, scale=0.1), rnd(C, scale=0.1)
    h4 = rnd(R, 4 * C)
    rows = []
    # (name, K, N, fused flags): the window's four matrices of a block
    for name, K, N, ln, gelu, res in (
        ("c_attn (LN)", C, 3 * C, True, False, False),
        ("attn.c_proj (+x)", C, C, False, False, True),
        ("c_fc (LN, GELU)", C, 4 * C, True, True, False),
        ("mlp.c_proj (+x)", 4 * C, C, False, False, True),
    ):
        w, b = rnd(N, K, scale=K**-0.5), rnd(N, scale=0.1)
        inp = x if K == C else h4
        resid = rnd(R, N) if res else None

        def ours(inp=inp, w=w, b=b, ln=ln, gelu=gelu, resid=resid):
            return ops.decode_linear(
                inp, w, b, ln_weight=lw if ln else None, ln_bias=lb if ln else None,
                residual=resid, gelu=gelu,
            )  # fmt: skip

        def before(inp=inp, w=w, b=b, ln=ln, gelu=gelu, resid=resid):
            h = ops.layernorm(inp, lw, lb) if ln else inp
            y = F.linear(h, w, b)
            if gelu:
                y = ops.gelu_tanh(y)
            return y if resid is None else y + resid  # (the window fused this add into a LN)

        def matmul(inp=inp, w=w, b=b):
            return F.linear(inp, w, b)

        if args.once:
            for _ in range(2):
                ours(), before()
            continue
        times = {
            "decode_linear": [],
            "decode_linear no-PDL": [],
            "before": [],
            "F.linear alone": [],
        }
        for _ in range(3):  # alternate them
            times["decode_linear"] += graph_us(ours, args.calls, args.rounds)
            _C.set_programmatic_launch(False)
            try:
                times["decode_linear no-PDL"] += graph_us(ours, args.calls, args.rounds)
            finally:
                _C.set_programmatic_launch(True)
            times["before"] += graph_us(before, args.calls, args.rounds)
            times["F.linear alone"] += graph_us(matmul, args.calls, args.rounds)
        med = {k: statistics.median(v) for k, v in times.items()}
        rows.append(
            {"matrix": name, "R": R, "K": K, "N": N, **{k + "_us": v for k, v in med.items()}}
        )
        print(
            f"{name:18s} R={R} K={K:5d} N={N:5d}: decode_linear {med['decode_linear']:6.2f} us, "
            f"no-PDL {med['decode_linear no-PDL']:6.2f} us, before {med['before']:6.2f} us, "
            f"F.linear alone {med['F.linear alone']:6.2f} us",
            flush=True,
        )
    if args.json and not args.once:
        write_record(args.json, "window-linear-bench", args, rows=rows)


def write_record(path: str, kind: str, args, **results) -> None:
    """The bench's JSON: kind, device, versions, date, the timing settings (args.calls,
    args.rounds), the environment block, then the results."""
    record = {
        "kind": kind,
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "calls": args.calls,
        "rounds": args.rounds,
        "environment": _environment(),
        **results,
    }
    with open(path, "w") as f:
        json.dump(record, f, indent=1)


def _environment() -> dict | None:
    """The bench's environment block (commit, versions, build_info) where gptstack.bench is on
    the path; this script also runs with gptstack.cuda_ops alone."""
    try:
        from gptstack.bench.environment import environment
    except ImportError:
        return None
    return environment(torch.device("cuda"), command=sys.argv)


if __name__ == "__main__":
    main()
