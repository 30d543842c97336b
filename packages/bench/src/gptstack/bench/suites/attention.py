"""Suite `attention`: does batching the heads pay, and which attention kernel should we use?

    data = run_attention([shape_esp32, shape_char, shape_gpt2],
                         options=SuiteOptions(device="cuda", out=path))

Op level (causal self-attention, q/k/v (B, nh, T, hs), forward, and forward + backward as
training runs it): a Python loop over heads (one (B, 1, T, hs) attention each, what a per-head
implementation does), the batched `manual` backend (all heads in one matmul, materialized
scores), `sdpa` (PyTorch's fused kernel), and the `gptstack` backend when gptstack.cuda_ops
registers it. End to end: the whole model's
forward (B, T) -> logits with each backend, same weights (docs/MEASURING.md rule 1).

Op-level outputs are checked against the manual backend in float32 (float64 for fp32 runs) on
the same inputs: relative error under 1e-5 (fp32) or 1e-2 (bf16). Whole-model logits are checked
with the model in float32 against the manual backend in float64 (under 1e-5), so the check sees
the backend and not bf16 rounding accumulated over the layers.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from gptstack.model import (
    attention_backends,
    get_attention_backend,
    manual_attention,
    register_attention_backend,
)

from ..harness import Variant, compare
from ..results import Column, make_row, ratio_entries
from ..shapes import ModelShape, random_tokens
from .common import (
    SuiteContext,
    SuiteOptions,
    check_close,
    dtype_name,
    reference_dtype,
    release_memory,
    resolve_dtype,
)

INPUT_SETS = 3
PER_HEAD_BACKEND = "bench_per_head_loop"  # registered by this suite for the end-to-end rows
NATIVE_BACKEND = "gptstack"  # registered by gptstack.cuda_ops when it is installed


def per_head_loop(q, k, v, *, q_start=0, kv_len=None, dropout_p=0.0):
    """Attention one head at a time: nh (B, 1, T, hs) problems and a concatenation."""
    heads = [
        manual_attention(
            q[:, h : h + 1],
            k[:, h : h + 1],
            v[:, h : h + 1],
            q_start=q_start,
            kv_len=kv_len,
            dropout_p=dropout_p,
        )
        for h in range(q.size(1))
    ]
    return torch.cat(heads, dim=1)  # (B, nh, T, hs)


def _native_backend() -> tuple[Any, str]:
    """(the gptstack backend or None, why not)."""
    try:
        import gptstack.cuda_ops  # noqa: F401  (registers the "gptstack" backend)
    except ImportError as e:
        return None, (
            f"no native kernel yet: {e.name or 'gptstack.cuda_ops'} cannot be "
            f"imported (gptstack.cuda_ops is not installed)"
        )
    if NATIVE_BACKEND not in attention_backends():
        return None, "gptstack.cuda_ops did not register a 'gptstack' attention backend"
    return get_attention_backend(NATIVE_BACKEND), ""


class Backend(NamedTuple):
    label: str  # the row name
    backend: str  # the name in gptstack.model's attention backend registry
    fn: Any  # None when unavailable
    why: str  # why fn is None ("" when available)


def _backends() -> list[Backend]:
    """Every backend of the suite, the native one probed (imported) once per run."""
    native, why_native = _native_backend()
    return [
        Backend("per-head loop", PER_HEAD_BACKEND, per_head_loop, ""),
        Backend("manual (batched heads)", "manual", get_attention_backend("manual"), ""),
        Backend("sdpa", "sdpa", get_attention_backend("sdpa"), ""),
        Backend("native (cuda_ops)", NATIVE_BACKEND, native, why_native),
    ]


def _op_group(shape: ModelShape, T: int, dtype: torch.dtype) -> tuple[str, dict]:
    """The row group and params of the op-level sections (forward, forward + backward)."""
    B, nh, hs = shape.batch_size, shape.n_head, shape.head_size
    params = {
        "model": shape.name,
        "batch": B,
        "n_head": nh,
        "seq_len": T,
        "head_size": hs,
        "dtype": dtype_name(dtype),
    }
    return f"{shape.name} B={B} nh={nh} T={T} hs={hs}", params


def _op_rows(
    ctx: SuiteContext, shape: ModelShape, T: int, dtype: torch.dtype, backends: list[Backend]
) -> None:
    B, nh, hs = shape.batch_size, shape.n_head, shape.head_size
    group, params = _op_group(shape, T, dtype)
    g = torch.Generator().manual_seed(3)
    inputs = [
        tuple(torch.randn(B, nh, T, hs, generator=g).to(ctx.device, dtype) for _ in range(3))
        for _ in range(INPUT_SETS)
    ]
    q, k, v = inputs[0]
    rd = reference_dtype(dtype)
    ref = manual_attention(q.to(rd), k.to(rd), v.to(rd))
    variants, checks, not_run = [], {}, {}
    for name, _, fn, why in backends:
        if fn is None:
            not_run[name] = ("skipped", why)
            continue
        with torch.no_grad():
            checks[name] = check_close(fn(q, k, v), ref, dtype, f"manual attention in {rd}")
        variants.append(Variant(name, lambda x, fn=fn: fn(*x), inputs))
    ctx.progress.row(f"op {group}")
    with torch.no_grad():
        cmp = compare(variants, ctx.settings, device=ctx.device, progress=ctx.progress)
    _emit(
        ctx, "op", group, params, backends, cmp, checks, not_run, flops=2 * B * nh * T * T * hs
    )  # QK^T and PV, causal half: 2 * (2 B nh T^2 hs) / 2


def _op_train_rows(
    ctx: SuiteContext, shape: ModelShape, T: int, dtype: torch.dtype, backends: list[Backend]
) -> None:
    """The op as training runs it: forward, then the gradients of q, k and v for a random dy."""
    B, nh, hs = shape.batch_size, shape.n_head, shape.head_size
    group, params = _op_group(shape, T, dtype)
    g = torch.Generator().manual_seed(5)

    def rand(grad: bool) -> torch.Tensor:
        return torch.randn(B, nh, T, hs, generator=g).to(ctx.device, dtype).requires_grad_(grad)

    inputs = [(rand(True), rand(True), rand(True), rand(False)) for _ in range(INPUT_SETS)]

    def grads(x, fn):
        q, k, v, dy = x
        return torch.autograd.grad(fn(q, k, v), (q, k, v), dy)

    rd = reference_dtype(dtype)
    q, k, v, dy = inputs[0]
    leaves = tuple(t.detach().to(rd).requires_grad_() for t in (q, k, v))
    ref = grads((*leaves, dy.to(rd)), manual_attention)
    variants, checks, not_run = [], {}, {}
    for name, _, fn, why in backends:
        if fn is None:
            not_run[name] = ("skipped", why)
            continue
        checks[name] = check_close(
            grads(inputs[0], fn), ref, dtype, f"manual attention's dq, dk, dv in {rd}"
        )
        variants.append(Variant(name, lambda x, fn=fn: grads(x, fn), inputs))
    ctx.progress.row(f"op forward+backward {group}")
    cmp = compare(variants, ctx.settings, device=ctx.device, progress=ctx.progress)
    _emit(
        ctx,
        "op-train",
        group,
        params,
        backends,
        cmp,
        checks,
        not_run,
        flops=6 * B * nh * T * T * hs,
    )  # the forward's two matmuls and the backward's four (dV, dP, dQ, dK), causal half


def _model_checks(model, idx: torch.Tensor, backends: list[Backend]) -> dict[str, dict]:
    """Each backend's whole-model logits in float32 against the manual backend in float64, on
    the first sequence of idx, TF32 off: a check of the backend, not of bf16 rounding (which
    over a dozen layers alone comes near the 1e-2 bf16 bound)."""
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with torch.no_grad():
            ref_model = copy.deepcopy(model).to(torch.float64)
            ref_model.set_attention_backend("manual")
            ref, _ = ref_model(idx[:1])
            del ref_model
            m32 = copy.deepcopy(model).to(torch.float32)
            out = {}
            for name, backend, fn, _ in backends:
                if fn is not None:
                    m32.set_attention_backend(backend)
                    out[name] = check_close(
                        m32(idx[:1])[0],
                        ref,
                        torch.float32,
                        "manual backend in float64 (model in float32, batch 1)",
                    )
            return out
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32


def _model_rows(
    ctx: SuiteContext, shape: ModelShape, T: int, dtype: torch.dtype, backends: list[Backend]
) -> None:
    B = shape.batch_size
    group = f"{shape.name} B={B} T={T}"
    params = {"model": shape.name, "batch": B, "seq_len": T, "dtype": dtype_name(dtype)}
    register_attention_backend(PER_HEAD_BACKEND, per_head_loop, replace=True)
    model = shape.build(ctx.device, dtype=dtype, dropout=0.0).eval()
    g = torch.Generator().manual_seed(4)
    inputs = [random_tokens((B, T), shape.vocab_size, ctx.device, g) for _ in range(INPUT_SETS)]
    checks = _model_checks(model, inputs[0], backends)
    variants, not_run = [], {}
    for name, backend, fn, why in backends:
        if fn is None:
            not_run[name] = ("skipped", why)
            continue

        def forward(idx, backend=backend):
            model.set_attention_backend(backend)
            return model(idx)[0]

        variants.append(Variant(name, forward, inputs))
    ctx.progress.row(f"model forward {group}")
    with torch.no_grad():
        cmp = compare(variants, ctx.settings, device=ctx.device, progress=ctx.progress)
    _emit(
        ctx,
        "model",
        group,
        params,
        backends,
        cmp,
        checks,
        not_run,
        flops=B * T * model.flops_per_token(T) // 3,
    )  # forward = 1/3 of 6N + attention


def _emit(ctx, section, group, params, backends, cmp, checks, not_run, *, flops: int) -> None:
    for name, *_ in backends:
        if name in not_run or name not in cmp.measurements:
            status, note = not_run.get(name, ("error", cmp.failures.get(name, "did not run")))
            ctx.result.add_row(
                make_row(
                    section=section, group=group, name=name, params=params, status=status, note=note
                )
            )
            continue
        m = cmp.measurements[name]
        ratios = ratio_entries(
            cmp, name, {"vs_loop": "per-head loop", "vs_manual": "manual (batched heads)"}
        )
        metrics = {"flops": flops, "flops_per_s": flops / m.stats["median"]}
        ctx.result.add_row(
            make_row(
                section=section,
                group=group,
                name=name,
                params=params,
                measurement=m,
                metrics=metrics,
                ratios=ratios,
                check=checks[name],
            )
        )


def run_attention(
    shapes: Sequence[ModelShape],
    *,
    seq_len: int | None = None,
    dtype: str = "auto",
    options: SuiteOptions | None = None,
) -> dict[str, Any]:
    """Op-level and whole-model attention rows for each shape (B = shape.batch_size,
    T = seq_len or block_size)."""
    options = options or SuiteOptions()
    shapes = [s.smoke() for s in shapes] if options.smoke else list(shapes)
    backends = _backends()
    params = {
        "shapes": [s.to_dict() for s in shapes],
        "seq_len": seq_len,
        "dtype": dtype,
        "backends": [b.label for b in backends],
    }
    ctx = SuiteContext.create("attention", params, options)
    _declare(ctx)
    dt = resolve_dtype(dtype, ctx.device)
    for shape in shapes:
        T = min(seq_len or shape.block_size, shape.block_size)
        _op_rows(ctx, shape, T, dt, backends)
        release_memory(ctx.device)
        _op_train_rows(ctx, shape, T, dt, backends)
        release_memory(ctx.device)
        _model_rows(ctx, shape, T, dt, backends)
        release_memory(ctx.device)
    return ctx.finish()


def _declare(ctx: SuiteContext) -> None:
    cols = [
        Column("time ms (median, min–max)", "time_s", "time_ms"),
        Column("TFLOP/s", "metrics.flops_per_s", "tflops"),
        Column("× vs per-head loop", "ratios.vs_loop", "ratio"),
        Column("× vs manual", "ratios.vs_manual", "ratio"),
        Column("check (rel. err)", "check", "check"),
        Column("note", "note"),
    ]
    ctx.result.table(
        "Attention op (forward, causal)",
        "op",
        [
            Column("shape", "group"),
            Column("implementation", "name"),
            Column("dtype", "params.dtype"),
            *cols,
        ],
        about="q, k, v random (B, nh, T, hs); FLOPs count QKᵀ and PV with the causal "
        "half skipped (2·B·nh·T²·hs).",
    )
    ctx.result.table(
        "Attention op, forward + backward (causal)",
        "op-train",
        [
            Column("shape", "group"),
            Column("implementation", "name"),
            Column("dtype", "params.dtype"),
            *cols,
        ],
        about="As training runs it: the forward, then dq, dk, dv for a random dy "
        "(torch.autograd.grad); checked against the manual backend's gradients; FLOPs "
        "6·B·nh·T²·hs (two matmuls forward, four backward, causal half).",
    )
    ctx.result.table(
        "Whole-model forward by attention backend",
        "model",
        [
            Column("model", "group"),
            Column("backend", "name"),
            Column("dtype", "params.dtype"),
            *cols,
        ],
        about="GPT forward (B, T) -> logits, no grad, random weights; FLOPs = "
        "B·T·flops_per_token(T)/3 (the forward third of 6N + attention).",
    )
    for section in ("op", "op-train", "model"):
        ctx.result.plot(
            "bars",
            section,
            f"Attention ({section}): speedup over the manual backend",
            value="ratios.vs_manual.median",
            label="group",
            series="name",
            log=True,
            ylabel="× vs manual (median of pairs)",
        )
