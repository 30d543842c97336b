"""Every matmul of gpt2-124m's training step, three ways, side by side in one process: PyTorch's
(cuBLAS's heuristic), one cuBLASLt product with the heuristic's first algorithm
(`_C.matmul`, csrc/linear_gelu.cpp) and with the fastest of its candidates timed
(`_C.set_cublaslt_autotune`, csrc/cublaslt.cpp). The answer to "where would timing cuBLASLt's
candidates pay, and does the tuner pick the kernel that is faster in a graph?".

Each way of each product is CALLS calls captured in one CUDA graph (the tuned one captured
after its first call outside the capture timed the candidates); the graphs are replayed in
turn, ROUNDS rounds, and each gets the median microseconds a call. Ratios are the heuristic's
time over the other's (> 1: faster than cuBLASLt's first choice).

    python3 packages/cuda_ops/scripts/matmul_autotune_bench.py [--rows 131072] [--json F]
    python3 packages/cuda_ops/scripts/matmul_autotune_bench.py --sequence 12 [--json F]
    python3 packages/cuda_ops/scripts/matmul_autotune_bench.py --plot-from F.json --plot P.png

With --sequence L the products instead run as a micro-step runs them, one after another in one
graph (L layers of the block's twelve, then the LM head's three for each chunk of rows: ~155
ms at 131,072 rows), heuristic against tuned, replayed in turn with nvidia-smi's SM clock and
power sampled during each (gptstack.bench.telemetry). A graph of one product, replayed with
the GPU idle in between, runs at the boost clock; this one keeps the GPU busy as a training
step does: whether the tuned algorithms stay faster there tells the power limit's clock apart
from the step's other kernels as the reason they were no faster end to end (2026-12-07).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

import torch

from gptstack.bench.telemetry import GpuTelemetry
from gptstack.cuda_ops import _C
from gptstack.cuda_ops.mlp import WORKSPACE_BYTES

sys.path.insert(0, str(Path(__file__).resolve().parent))
from window_linear_bench import capture_graph  # noqa: E402

C, HEADS_V, HEAD_ROWS = 768, 50304, 2432  # gpt2-124m; the loss's chunk of rows (about)


def products(n: int) -> list[tuple[str, tuple, bool, tuple, bool, bool]]:
    """(name, a's stored shape, trans_a, b's stored shape, trans_b, bias) of one micro-step's
    products at n rows: d = op(a) op(b) (+ bias), as the model computes them."""
    F = 4 * C
    out = []
    for name, k_in, k_out, bias in (
        ("c_attn", C, 3 * C, True),
        ("attn.c_proj", C, C, True),
        ("c_fc", C, F, True),
        ("mlp.c_proj", F, C, True),
    ):
        out.append((f"{name} forward", (n, k_in), False, (k_out, k_in), True, bias))
        out.append((f"{name} dx", (n, k_out), False, (k_out, k_in), False, False))
        out.append((f"{name} dW", (n, k_out), True, (n, k_in), False, False))
    h = HEAD_ROWS
    out.append(("lm_head chunk logits", (h, C), False, (HEADS_V, C), True, False))
    out.append(("lm_head chunk dh", (h, HEADS_V), False, (HEADS_V, C), False, False))
    out.append(("lm_head chunk dW", (h, HEADS_V), True, (h, C), False, False))
    return out


def operands(product) -> tuple:
    """(d, a, b, bias) of one product, random, on the GPU."""
    name, a_shape, trans_a, b_shape, trans_b, bias = product
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(*a_shape, generator=g, device="cuda").bfloat16()
    b = (0.02 * torch.randn(*b_shape, generator=g, device="cuda")).bfloat16()
    cols = b_shape[0] if trans_b else b_shape[1]
    rows = a_shape[1] if trans_a else a_shape[0]
    bias_t = torch.randn(cols, generator=g, device="cuda").bfloat16() if bias else None
    return torch.empty(rows, cols, dtype=torch.bfloat16, device="cuda"), a, b, bias_t


def measure(product, calls: int, rounds: int, tune: int) -> dict:
    name, _, trans_a, _, trans_b, bias = product
    d, a, b, bias_t = operands(product)
    rows, cols = d.shape
    k = a.shape[0] if trans_a else a.shape[1]
    ws = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    op_a = a.t() if trans_a else a
    op_b = b.t() if trans_b else b

    def torch_mm():
        if bias:
            torch.addmm(bias_t, op_a, op_b, out=d)
        else:
            torch.mm(op_a, op_b, out=d)

    def lt():
        stream = torch.cuda.current_stream().cuda_stream
        assert _C.matmul(
            d, a, b, trans_a, trans_b, bias_t, None, ws.data_ptr(), ws.numel(), stream
        ), name

    graphs = {"torch": capture_graph(torch_mm, calls)}
    _C.set_cublaslt_autotune(0)
    graphs["lt heuristic"] = capture_graph(lt, calls)  # the product's choice made untimed
    _C.set_cublaslt_autotune(tune)
    _C.reset_cublaslt_choices()
    graphs["lt tuned"] = capture_graph(lt, calls)  # the same product's choice made again, timed
    _C.set_cublaslt_autotune(0)
    times = {k: [] for k in graphs}
    for _ in range(rounds):
        for k, graph in graphs.items():
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times[k].append(1e3 * start.elapsed_time(end) / calls)
    median = {k: statistics.median(v) for k, v in times.items()}
    choice = [c for c in _C.cublaslt_choices() if (c["m"], c["n"], c["k"]) == (cols, rows, k)]
    flops = 2 * rows * cols * k
    return {
        "name": name,
        "rows": rows,
        "cols": cols,
        "bias": bias,
        "us": median,
        "tflops": {k: flops / v / 1e6 for k, v in median.items()},
        "tuned_vs_heuristic": median["lt heuristic"] / median["lt tuned"],
        "tuned_vs_torch": median["torch"] / median["lt tuned"],
        "choice": choice[-1] if choice else None,
    }


def sequence(n: int, layers: int, tune: int, rounds: int) -> dict:
    """A micro-step's products in order, one graph a way: heuristic against tuned (--sequence)."""
    prods = products(n)
    block = [p for p in prods if not p[0].startswith("lm_head")]
    head = [p for p in prods if p[0].startswith("lm_head")]
    order = [p for _ in range(layers) for p in block] + [
        p for _ in range(-(-n // HEAD_ROWS)) for p in head
    ]
    arrays = {p[0]: operands(p) for p in prods}
    ws = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")

    def step():
        stream = torch.cuda.current_stream().cuda_stream
        for name, _, trans_a, _, trans_b, _ in order:
            d, a, b, bias_t = arrays[name]
            assert _C.matmul(d, a, b, trans_a, trans_b, bias_t, None, ws.data_ptr(),
                             ws.numel(), stream), name  # fmt: skip

    graphs = {}
    for way, t in (("heuristic", 0), ("tuned", tune)):
        _C.set_cublaslt_autotune(t)
        _C.reset_cublaslt_choices()
        graphs[way] = capture_graph(step, 1)  # its warm-up calls make (and time) each choice
    _C.set_cublaslt_autotune(0)
    ms = {way: [] for way in graphs}
    gpu = {way: [] for way in graphs}
    for _ in range(rounds):
        for way, graph in graphs.items():
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            with GpuTelemetry(interval_ms=50) as telemetry:
                start.record()
                for _ in range(5):
                    graph.replay()
                end.record()
                end.synchronize()
            ms[way].append(start.elapsed_time(end) / 5)
            gpu[way].append(telemetry.summary())
    clocks = {
        way: [t["sm_clock_mhz"]["median"] for t in gpu[way] if t and "sm_clock_mhz" in t]
        for way in gpu
    }
    return {
        "layers": layers,
        "products_a_step": len(order),
        "ms": {way: statistics.median(v) for way, v in ms.items()},
        "ms_by_round": ms,
        "tuned_vs_heuristic": statistics.median(ms["heuristic"]) / statistics.median(ms["tuned"]),
        "sm_clock_mhz": {w: statistics.median(c) if c else None for w, c in clocks.items()},
        "telemetry_by_round": gpu,
    }


def plot(record_path: Path, png: Path) -> None:
    """A record's products as bars, microseconds a call each way (no GPU needed)."""
    from gptstack.bench.plots import render_plot

    record = json.loads(record_path.read_text())
    date = record.get("date") or "-".join(
        re.search(r"(\d{4})(\d{2})(\d{2})", record_path.name).groups()
    )
    rows = [
        {"section": "matmul", "status": "ok", "name": p["name"], "way": way, "us": us}
        for p in record["products"]
        for way, us in p["us"].items()
    ]
    data = {"rows": rows, "env": {"device": {"name": record["device"]}, "date": date}}
    spec = {
        "kind": "bars",
        "section": "matmul",
        "label": "name",
        "series": "way",
        "value": "us",
        "title": f"gpt2-124m's matmuls at {record['rows']:,} rows: PyTorch, cuBLASLt's first "
        f"choice, its candidates timed (up to {record['tune']}; CUDA graphs)",
        "ylabel": "µs a call",
    }
    if not render_plot(data, spec, png):
        raise SystemExit(f"{record_path}: no products to plot")
    print(f"wrote {png}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=131072, help="tokens a micro-step (128 x 1024)")
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--tune", type=int, default=8)
    ap.add_argument(
        "--sequence", type=int, default=0, metavar="L", help="a micro-step's products in order"
    )
    ap.add_argument("--json", default=None)
    ap.add_argument("--plot-from", type=Path, default=None, help="a record this script wrote")
    ap.add_argument("--plot", type=Path, default=None, help="the PNG to draw it to")
    args = ap.parse_args()
    if args.plot_from or args.plot:
        if not (args.plot_from and args.plot):
            raise SystemExit("--plot-from and --plot go together: the record and the PNG")
        return plot(args.plot_from, args.plot)
    if args.sequence:
        r = sequence(args.rows, args.sequence, args.tune, args.rounds)
        print(
            f"{r['products_a_step']} products a step: heuristic {r['ms']['heuristic']:.2f} ms, "
            f"tuned {r['ms']['tuned']:.2f} ms ({r['tuned_vs_heuristic']:.3f}x); median SM clock "
            f"{r['sm_clock_mhz']}"
        )
        if args.json:
            with open(args.json, "w") as f:
                r.update(device=torch.cuda.get_device_name(), rows=args.rows, tune=args.tune)
                json.dump(r, f, indent=1)
        return
    results = []
    for p in products(args.rows):
        r = measure(p, args.calls, args.rounds, args.tune)
        results.append(r)
        c = r["choice"] or {}
        us = r["us"]
        print(
            f"{r['name']:22s} torch {us['torch']:8.1f}  lt {us['lt heuristic']:8.1f}  "
            f"tuned {us['lt tuned']:8.1f} us  (tuned/heuristic {r['tuned_vs_heuristic']:.3f}x,"
            f" vs torch {r['tuned_vs_torch']:.3f}x; rank {c.get('rank')} of "
            f"{c.get('candidates')})",
            flush=True,
        )
    total = {k: sum(r["us"][k] for r in results) for k in results[0]["us"]}
    print("sum of one of each: " + ", ".join(f"{k} {v:.1f} us" for k, v in total.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "device": torch.cuda.get_device_name(),
                    "date": time.strftime("%Y-%m-%d", time.gmtime()),
                    "rows": args.rows,
                    "tune": args.tune,
                    "products": results,
                    "sum_us": total,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
