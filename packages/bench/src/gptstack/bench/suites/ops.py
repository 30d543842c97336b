"""Suite `ops`: how close is each op to the machine's floor, and does a kernel beat PyTorch?

    data = run_ops([shape_char, shape_gpt2], options=SuiteOptions(device="cuda", out=path))

For every registered op (opregistry.py) at sizes from each model shape: eager PyTorch (the
reference), torch.compile(reference), for a forward+backward op also its forward compiled alone
and differentiated by autograd ("torch.compile (fwd, bwd)", as in a training step), and every
registered candidate (native kernels from gptstack.cuda_ops plug in with `add_candidate`).
Achieved bandwidth and FLOP/s, and the fraction of the floor: the roofline time
max(bytes / copy bandwidth, FLOPs / matmul rate), both measured at the start of the run
(floors.py), over the measured time.

On a GPU each sample replays a CUDA graph of `graph_inner` calls (timers.py), so launch
overhead is not counted; where capture fails the row is timed with CUDA events and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..errors import BenchError
from ..harness import Variant, compare, error_text
from ..opregistry import Op, OpSize, differentiate, load_native_candidates, registered_ops
from ..results import Column, make_row, ratio_entries
from ..shapes import ModelShape
from .common import (
    SuiteContext,
    SuiteOptions,
    check_close,
    compile_callable,
    dtype_name,
    reference_dtype,
    resolve_dtype,
)

INPUT_SETS = 3
GRAPH_INNER = 10  # calls per captured graph: one replay amortizes the replay's own launch


COMPILE_FWD_BWD = "torch.compile (fwd, bwd)"


def _upcast(inputs: tuple, dtype: torch.dtype) -> tuple:
    return tuple(x.to(dtype) if x.is_floating_point() else x for x in inputs)


def _measure_op(
    ctx: SuiteContext, op: Op, size: OpSize, dtype: torch.dtype, floors: dict, graph_inner: int
) -> None:
    group = f"{op.name} @ {size.name}"
    g = torch.Generator(device=ctx.device).manual_seed(5)
    inputs = [op.make_inputs(size, ctx.device, dtype, g) for _ in range(INPUT_SETS)]
    params = {
        "op": op.name,
        "size": size.to_dict(),
        "dtype": dtype_name(dtype),
        "shapes": [list(x.shape) for x in inputs[0]],
        "about": op.about,
    }
    rd = reference_dtype(dtype)
    ref = op.reference(*_upcast(inputs[0], rd))
    impls: dict[str, Any] = {"eager": op.reference}
    checks, not_run = {}, {}
    try:
        impls["torch.compile"] = compile_callable(op.reference, ctx.compile_backend)
    except Exception as e:
        not_run["torch.compile"] = ("error", error_text(e))
    if op.backprop is None:
        impls.update(op.candidates)
    else:
        # The forward compiled alone (AOTAutograd compiles the backward as a second graph),
        # not forward and backward as one graph as the row above, where Inductor may fuse the
        # two (read x once for y and dx): no model can, its backward runs after the rest of
        # the network. Candidates give their forward and are differentiated the same way.
        forward = op.backprop(*inputs[0])[0]
        impls[COMPILE_FWD_BWD] = differentiate(
            op.backprop, compile_callable(forward, ctx.compile_backend)
        )
        impls.update({k: differentiate(op.backprop, f) for k, f in op.candidates.items()})
    for name, fn in list(impls.items()):
        try:
            with torch.no_grad():
                checks[name] = check_close(fn(*inputs[0]), ref, dtype, f"eager in {rd}")
        except Exception as e:
            not_run[name] = ("error", error_text(e))
            del impls[name]
    ctx.progress.row(group)
    timing = "cuda_graph" if ctx.cuda else "cpu"
    inner = graph_inner if ctx.cuda else 1

    def variants(t: str, n: int) -> list[Variant]:
        return [
            Variant(name, lambda x, fn=fn: fn(*x), inputs, timing=t, inner=n)
            for name, fn in impls.items()
        ]

    with torch.no_grad():
        cmp = compare(
            variants(timing, inner), ctx.settings, device=ctx.device, progress=ctx.progress
        )
        note = None
        if cmp.failures and timing == "cuda_graph":
            failed = "; ".join(f"{k}: {v}" for k, v in cmp.failures.items())
            note = (
                f"CUDA graph timing failed ({failed}); timed with CUDA events, launch "
                f"overhead included"
            )
            cmp = compare(
                variants("cuda_events", 1), ctx.settings, device=ctx.device, progress=ctx.progress
            )
    nbytes, flops = op.bytes_moved(inputs[0]), op.flops(inputs[0])
    copy_bw = floors.get("copy", {}).get("bytes_per_s")
    mm_rate = floors.get("matmul", {}).get("flops_per_s")
    own_rows = ["eager", "torch.compile"] + ([COMPILE_FWD_BWD] if op.backprop else [])
    for name in [*own_rows, *op.candidates]:
        if name in not_run or name not in cmp.measurements:
            status, why = not_run.get(name, ("error", cmp.failures.get(name, "did not run")))
            ctx.result.add_row(
                make_row(
                    section="ops", group=group, name=name, params=params, status=status, note=why
                )
            )
            continue
        m = cmp.measurements[name]
        t = m.stats["median"]
        floor_t = max(nbytes / copy_bw if copy_bw else 0.0, flops / mm_rate if mm_rate else 0.0)
        metrics = {
            "bytes_moved": nbytes,
            "flops": flops,
            "bytes_per_s": nbytes / t,
            "flops_per_s": flops / t,
            "copy_fraction": nbytes / t / copy_bw if copy_bw else None,
            "floor_fraction": floor_t / t if floor_t else None,
        }
        # eager gets no vs_compile: compile's speedup over eager is on the compile row
        baselines = {
            "vs_eager": "eager",
            "vs_compile": None if name == "eager" else "torch.compile",
            "vs_compile_fwd_bwd": (
                COMPILE_FWD_BWD if name in op.candidates and COMPILE_FWD_BWD in impls else None
            ),
        }
        ratios = ratio_entries(cmp, name, baselines)
        ctx.result.add_row(
            make_row(
                section="ops",
                group=group,
                name=name,
                params=params,
                measurement=m,
                metrics=metrics,
                ratios=ratios,
                check=checks[name],
                note=note,
            )
        )


def op_sizes(shapes: Sequence[ModelShape], seq_len: int | None = None) -> list[OpSize]:
    return [
        OpSize(s.name, s.batch_size, min(seq_len or s.block_size, s.block_size), s.n_embd, s.n_head)
        for s in shapes
    ]


def run_ops(
    shapes: Sequence[ModelShape],
    *,
    ops: Sequence[str] | None = None,
    seq_len: int | None = None,
    dtype: str = "auto",
    graph_inner: int = GRAPH_INNER,
    options: SuiteOptions | None = None,
) -> dict[str, Any]:
    """Every registered op (or those named in `ops`) at the sizes of each shape."""
    options = options or SuiteOptions()
    native = load_native_candidates()
    registry = registered_ops()
    names = list(ops) if ops else list(registry)
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise BenchError(f"ops {unknown} are not registered; known: {', '.join(registry)}")
    if graph_inner < 1:
        raise BenchError(f"graph_inner is {graph_inner}: it must be >= 1")
    shapes = [s.smoke() for s in shapes] if options.smoke else list(shapes)
    sizes = op_sizes(shapes, seq_len)
    params = {
        "ops": {
            n: {"about": registry[n].about, "candidates": list(registry[n].candidates)}
            for n in names
        },
        "sizes": [s.to_dict() for s in sizes],
        "dtype": dtype,
        "graph_inner": graph_inner,
        "native": native,
    }
    ctx = SuiteContext.create("ops", params, options)
    _declare(ctx)
    dt = resolve_dtype(dtype, ctx.device)
    floors = ctx.measure_floors()
    ctx.result.note(native)
    for name in names:
        for size in sizes:
            torch._dynamo.reset()  # each op and size compiled on its own
            _measure_op(ctx, registry[name], size, dt, floors, graph_inner)
    return ctx.finish()


def _declare(ctx: SuiteContext) -> None:
    ctx.result.table(
        "Ops against the measured floor",
        "ops",
        [
            Column("op @ sizes of", "group"),
            Column("implementation", "name"),
            Column("dtype", "params.dtype"),
            Column("µs (median, min–max)", "time_s", "time_us"),
            Column("GB/s", "metrics.bytes_per_s", "gbs"),
            Column("of copy bw", "metrics.copy_fraction", "pct"),
            Column("GFLOP/s", "metrics.flops_per_s", "gflops"),
            Column("of floor", "metrics.floor_fraction", "pct"),
            Column("× vs eager", "ratios.vs_eager", "ratio"),
            Column("× vs compile", "ratios.vs_compile", "ratio"),
            Column("× vs compile (fwd, bwd)", "ratios.vs_compile_fwd_bwd", "ratio"),
            Column("check (rel. err)", "check", "check"),
            Column("note", "note"),
        ],
        about="Floor = max(bytes / copy bandwidth, FLOPs / matmul rate), both measured in this "
        "run (`floors` in the JSON); 'of floor' = floor time / measured time. Above 100 %: "
        "the op's data stayed in a cache, which the copy floor (a buffer far larger than "
        "the caches) cannot use. Sizes and FLOP counts per op: `params.about` in the JSON.",
    )
    ctx.result.plot(
        "bars",
        "ops",
        "Ops: fraction of the measured floor",
        value="metrics.floor_fraction",
        label="group",
        series="name",
        log=False,
        ylabel="floor time / measured time",
    )
