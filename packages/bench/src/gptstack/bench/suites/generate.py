"""Suite `generate`: how fast does a model decode, and when does the KV cache start to pay?

    data = run_generate([shape_esp32, shape_char, shape_gpt2],
                        options=SuiteOptions(device="cuda", out=path))

Decoders (gptstack.model.decoding): naive (forward of the whole window per token, the
reference), KV cache (prefill, then one token against a growing cache), static cache (fixed
shapes, position as a tensor), static cache + CUDA graph (the decode step captured once and
replayed), and optionally + torch.compile inside the graph (gpt-fast's recipe; compile time is
paid once per model and batch); then GraphDecoder, what `gptstack sample` runs on CUDA (many
tokens per graph replay, sampling on the device), with PyTorch's step and with gptstack.cuda_ops'
fused decode kernels. Random weights, greedy decoding, rotating random prompts.

Each `generate()` call is timed end to end (prefill included). Achieved bandwidth = model bytes x
decode steps per second (every step reads every weight once for the whole batch; KV-cache reads
are not counted), compared with the measured device copy bandwidth (floors.py). The sweeps
vary the prompt length (fixed short generation) and the generated length (fixed short prompt)
at batch 1 to show where the cache starts to beat recomputation.

On a CPU, given a thread policy (gptstack.tools.threads, passed in by `gptstack bench`), the
"threads" rows time the KV-cache decoder at each batch with PyTorch's default threads and with
the policy's, alternated in one process.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from gptstack.model import GraphDecoder, KVCacheDecoder, StaticCacheDecoder, generate
from gptstack.model.fused_step import FusedDecodeStep

from ..errors import BenchError
from ..harness import Variant, compare, error_text
from ..results import Column, make_row, ratio_entries
from ..shapes import ModelShape, model_bytes, random_tokens
from .common import (
    SuiteContext,
    SuiteOptions,
    check_close,
    dtype_name,
    release_memory,
    resolve_dtype,
)

INPUT_SETS = 4  # rotating prompts per row
SWEEP_NEW_FOR_PROMPTS = 16  # generated tokens in the prompt-length sweep
SWEEP_PROMPT_FOR_NEW = 4  # prompt tokens in the generated-length sweep
# Default generated tokens of the main rows (at most block_size/2): long enough that prefill is a
# small share, short enough that >= 20 alternated rounds of naive decoding fit the GPU budget.
MAX_NEW = 64


@dataclass(frozen=True)
class Decoder:
    key: str
    name: str
    mode: str
    cuda_graph: bool
    compile: bool
    gpu_only: bool
    fused: bool = False  # mode "graph": the fused gptstack.cuda_ops step (else PyTorch's)


DECODERS: tuple[Decoder, ...] = (
    Decoder("naive", "naive (recompute)", "naive", False, False, False),
    Decoder("kv", "KV cache", "kv", False, False, False),
    Decoder("static", "static cache", "static", False, False, False),
    Decoder("graph", "static cache + CUDA graph", "static", True, False, True),
    Decoder("graph-compile", "static + CUDA graph + compile", "static", True, True, True),
    # GraphDecoder (CUDA graphs on CUDA, eager on a CPU): the CLI's decoder, both steps
    Decoder("graph-decoder", "graph decoder, PyTorch step", "graph", False, False, False),
    Decoder(
        "graph-decoder-fused",
        "graph decoder, gptstack kernels",
        "graph",
        False,
        False,
        False,
        fused=True,
    ),  # fmt: skip
)
DECODER_KEYS = tuple(d.key for d in DECODERS)
DEFAULT_DECODERS = ("naive", "kv", "static", "graph", "graph-decoder", "graph-decoder-fused")


def _make_decoder(d: Decoder, model: torch.nn.Module, batch: int):
    if d.mode == "kv":
        return KVCacheDecoder(model)
    if d.mode == "static":
        return StaticCacheDecoder(model, batch, cuda_graph=d.cuda_graph, compile=d.compile)
    if d.mode == "graph":
        return GraphDecoder(model, batch, fused=d.fused)  # ModelError if fused cannot run
    return None


@torch.no_grad()
def _decode_check(d: Decoder, model32, prompt: torch.Tensor) -> dict:
    """One decode step of this kind of decoder, built on the float32 copy of the model, against
    the full float32 forward of the same sequence (TF32 off): checks the decoding path, not
    bf16 rounding. The compiled variant is checked without compile (the model package's CUDA
    tests cover compile + graph)."""
    if d.mode == "naive":
        return {"ok": True, "against": "is the reference"}
    if d.mode == "graph" and not d.fused:  # its step is the static cache's forward
        return _decode_check(dataclasses.replace(d, mode="static"), model32, prompt)
    if prompt.size(1) < 2:  # the check needs a prefix to prefill and one token to decode
        prompt = torch.cat([prompt, prompt], dim=1)
    B, P = prompt.shape
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        if d.mode == "graph":  # the fused step on the cache a static decoder's prefill filled
            decoder = StaticCacheDecoder(model32, B)
            decoder.prefill(prompt[:, :-1])
            step = FusedDecodeStep(model32, decoder.cache)
            got = step(prompt[:, -1:].contiguous(), torch.tensor(P - 1, device=prompt.device))
        else:
            decoder = _make_decoder(dataclasses.replace(d, compile=False), model32, B)
            decoder.prefill(prompt[:, :-1])
            got = decoder.decode(prompt[:, -1], P - 1)  # (B, V): last prompt token at P-1
        ref, _ = model32(prompt, last_only=True)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    return check_close(
        got, ref[:, -1], torch.float32, "full forward, one decode step, model in float32"
    )


def _first_divergence(a: torch.Tensor, b: torch.Tensor) -> int:
    diff = (a != b).any(dim=0).nonzero()
    return int(diff[0]) if len(diff) else a.size(1)


@dataclass
class _Model:
    """One model under test and what every row of it shares."""

    shape: ModelShape
    model: torch.nn.Module  # in the suite's dtype
    model32: torch.nn.Module  # float32 copy for the checks (the same object for fp32 runs)
    dtype: torch.dtype
    nbytes: int
    copy_bw: float | None
    gen: torch.Generator
    decoders: dict[str, Any] = field(default_factory=dict)  # per batch: key -> decoder
    broken: dict[str, str] = field(default_factory=dict)  # key -> why it could not be built


def _bench_point(
    ctx: SuiteContext,
    m: _Model,
    chosen: Sequence[Decoder],
    section: str,
    group: str,
    batch: int,
    prompt_len: int,
    new_tokens: int,
) -> None:
    shape, model = m.shape, m.model
    params = {
        "model": shape.name,
        "batch": batch,
        "prompt_len": prompt_len,
        "new_tokens": new_tokens,
        "dtype": dtype_name(m.dtype),
    }
    prompts = [
        random_tokens((batch, prompt_len), shape.vocab_size, ctx.device, m.gen)
        for _ in range(INPUT_SETS)
    ]
    variants, checks, not_run = [], {}, {}
    reference = generate(model, prompts[0], new_tokens, mode="naive", temperature=0)
    for d in chosen:
        if d.gpu_only and not ctx.cuda:
            not_run[d.key] = ("skipped", "GPU only (CUDA graph); this run is on a CPU")
            continue
        if d.key in m.broken:
            not_run[d.key] = ("error", m.broken[d.key])
            continue
        dec = m.decoders.get(d.key)
        try:
            checks[d.key] = _decode_check(d, m.model32, prompts[0])
            out = generate(
                model,
                prompts[0],
                new_tokens,
                mode=d.mode,
                temperature=0,
                cuda_graph=d.cuda_graph,
                decoder=dec,
            )
            checks[d.key]["greedy_match"] = (
                _first_divergence(out[:, prompt_len:], reference[:, prompt_len:]) / new_tokens
            )
        except Exception as e:
            not_run[d.key] = ("error", error_text(e))
            continue

        def fn(prompt, d=d, dec=dec):
            return generate(
                model,
                prompt,
                new_tokens,
                mode=d.mode,
                temperature=0,
                cuda_graph=d.cuda_graph,
                decoder=dec,
            )

        variants.append(Variant(d.name, fn, prompts))
    ctx.progress.row(f"{group} P={prompt_len} N={new_tokens}")
    cmp = compare(variants, ctx.settings, device=ctx.device, progress=ctx.progress)
    names = {d.key: d.name for d in chosen}
    for d in chosen:
        if d.key in not_run or d.name not in cmp.measurements:
            status, note = not_run.get(d.key, ("error", cmp.failures.get(d.name, "did not run")))
            ctx.result.add_row(
                make_row(
                    section=section,
                    group=group,
                    name=d.name,
                    params=params,
                    status=status,
                    note=note,
                )
            )
            continue
        meas = cmp.measurements[d.name]
        med = meas.stats["median"]
        bw = m.nbytes * new_tokens / med
        metrics = {
            "tokens_per_s": batch * new_tokens / med,
            "ms_per_token": med / new_tokens * 1e3,
            "model_bytes": m.nbytes,
            "bandwidth_bytes_per_s": bw,
            "copy_fraction": bw / m.copy_bw if m.copy_bw else None,
            "greedy_match": checks[d.key].pop("greedy_match", None),
        }
        ratios = ratio_entries(
            cmp, d.name, {"vs_naive": names.get("naive"), "vs_kv": names.get("kv")}
        )
        ctx.result.add_row(
            make_row(
                section=section,
                group=group,
                name=d.name,
                params=params,
                measurement=meas,
                metrics=metrics,
                ratios=ratios,
                check=checks[d.key],
            )
        )


# --- CPU threads: the policy against PyTorch's default ---------------------------------------

ThreadPolicy = Callable[[int, int], int]  # (rows per forward call, parameters) -> threads


def _thread_settings(default: int, policy: int) -> dict[str, int]:
    return {
        f"PyTorch default ({default} thread{'s' * (default != 1)})": default,
        f"thread policy ({policy} thread{'s' * (policy != 1)})": policy,
    }


def _thread_rows(
    ctx: SuiteContext,
    m: _Model,
    batches: Sequence[int],
    prompt_len: int,
    new_tokens: int,
    policy: ThreadPolicy,
    default: int,
) -> None:
    """KV-cache decoding per batch, at PyTorch's default threads and at the policy's. Prompt
    plus new tokens fit the context here, so these rows time the phase in which the context
    fills; `gptstack sample`'s switch to every core for the slide window's full-context steps
    (threads.DecodeThreads) is timed by benchmarks/sample_speed.py --device cpu."""
    n_params = sum(p.numel() for p in m.model.parameters())
    for b in batches:
        settings = _thread_settings(default, policy(b, n_params))
        decoder = KVCacheDecoder(m.model)
        prompts = [
            random_tokens((b, prompt_len), m.shape.vocab_size, ctx.device, m.gen)
            for _ in range(INPUT_SETS)
        ]
        variants = []
        for name, threads in settings.items():

            def fn(prompt, threads=threads, decoder=decoder):
                torch.set_num_threads(threads)
                return generate(
                    m.model, prompt, new_tokens, mode="kv", temperature=0, decoder=decoder
                )

            variants.append(Variant(name, fn, prompts))
        group = f"{m.shape.name} B={b}"
        ctx.progress.row(f"threads {group}")
        cmp = compare(variants, ctx.settings, device=ctx.device, progress=ctx.progress)
        torch.set_num_threads(default)
        baseline = next(iter(settings))
        for name, threads in settings.items():
            params = {
                "model": m.shape.name,
                "batch": b,
                "prompt_len": prompt_len,
                "new_tokens": new_tokens,
                "threads": threads,
                "n_params": n_params,
                "decoder": "KV cache",
            }
            if name not in cmp.measurements:
                ctx.result.add_row(
                    make_row(
                        section="threads",
                        group=group,
                        name=name,
                        params=params,
                        status="error",
                        note=cmp.failures.get(name, "did not run"),
                    )
                )
                continue
            meas = cmp.measurements[name]
            med = meas.stats["median"]
            ctx.result.add_row(
                make_row(
                    section="threads",
                    group=group,
                    name=name,
                    params=params,
                    measurement=meas,
                    metrics={
                        "tokens_per_s": b * new_tokens / med,
                        "ms_per_token": med / new_tokens * 1e3,
                    },
                    ratios=ratio_entries(cmp, name, {"vs_default": baseline}),
                )
            )


def _lengths_up_to(points: Sequence[int], limit: int) -> list[int]:
    """The distinct sweep lengths in 1..limit, ascending."""
    return sorted({p for p in points if 1 <= p <= limit})


def run_generate(
    shapes: Sequence[ModelShape],
    *,
    batches: Sequence[int] = (1, 8),
    decoders: Sequence[str] = DEFAULT_DECODERS,
    prompt_len: int | None = None,
    new_tokens: int | None = None,
    sweep_prompt: Sequence[int] = (8, 32, 128, 512),
    sweep_new: Sequence[int] = (4, 16, 64),
    dtype: str = "auto",
    thread_policy: ThreadPolicy | None = None,
    options: SuiteOptions | None = None,
) -> dict[str, Any]:
    """Decode throughput per model, batch and decoder, plus the cache-regime sweeps (batch 1).
    prompt_len defaults to block_size/8, new_tokens to min(block_size/2, MAX_NEW).
    thread_policy: on a CPU, also the "threads" rows (policy vs PyTorch's default threads)."""
    options = options or SuiteOptions()
    unknown = [k for k in decoders if k not in DECODER_KEYS]
    if unknown or "naive" not in decoders:
        raise BenchError(
            f"decoders {list(decoders)}: need 'naive' (the reference) and only "
            f"{', '.join(DECODER_KEYS)}"
        )
    chosen = [d for d in DECODERS if d.key in decoders]
    shapes = [s.smoke() for s in shapes] if options.smoke else list(shapes)
    params = {
        "shapes": [s.to_dict() for s in shapes],
        "batches": list(batches),
        "decoders": [d.name for d in chosen],
        "prompt_len": prompt_len,
        "new_tokens": new_tokens,
        "sweep_prompt": list(sweep_prompt),
        "sweep_new": list(sweep_new),
        "dtype": dtype,
        "sampling": "greedy",
    }
    ctx = SuiteContext.create("generate", params, options)
    _declare(ctx)
    threads = thread_policy is not None and not ctx.cuda
    if threads:
        _declare_threads(ctx)
    default_threads = torch.get_num_threads()
    dt = resolve_dtype(dtype, ctx.device)
    copy_bw = ctx.measure_floors().get("copy", {}).get("bytes_per_s")
    for shape in shapes:
        model = shape.build(ctx.device, dtype=dt, dropout=0.0).eval()
        m = _Model(
            shape,
            model,
            model if dt == torch.float32 else copy.deepcopy(model).float(),
            dt,
            model_bytes(model),
            copy_bw,
            torch.Generator().manual_seed(2),
        )
        P = prompt_len or max(1, shape.block_size // 8)
        N = new_tokens or min(shape.block_size // 2, MAX_NEW)
        if P + N > shape.block_size:
            raise BenchError(
                f"{shape.name}: prompt {P} + new {N} tokens exceed block_size "
                f"{shape.block_size}; lower --prompt-len or --new-tokens"
            )
        for b in batches:
            m.decoders, m.broken = {}, {}
            for d in chosen:
                if d.gpu_only and not ctx.cuda:
                    continue
                try:
                    m.decoders[d.key] = _make_decoder(d, model, b)
                except Exception as e:
                    m.broken[d.key] = error_text(e)
            _bench_point(ctx, m, chosen, "decode", f"{shape.name} B={b}", b, P, N)
            if b == 1:
                sweep = [
                    d for d in chosen if d.key in ("naive", "kv", "graph" if ctx.cuda else "static")
                ]
                for p in _lengths_up_to(sweep_prompt, shape.block_size - SWEEP_NEW_FOR_PROMPTS):
                    _bench_point(
                        ctx, m, sweep, "sweep_prompt", shape.name, 1, p, SWEEP_NEW_FOR_PROMPTS
                    )
                for n in _lengths_up_to(sweep_new, shape.block_size - SWEEP_PROMPT_FOR_NEW):
                    _bench_point(ctx, m, sweep, "sweep_new", shape.name, 1, SWEEP_PROMPT_FOR_NEW, n)
            m.decoders = {}
            release_memory(ctx.device)
        if threads:
            _thread_rows(ctx, m, batches, P, N, thread_policy, default_threads)
        del model, m
        release_memory(ctx.device)
    return ctx.finish()


def _declare_threads(ctx: SuiteContext) -> None:
    ctx.result.table(
        "CPU threads: the thread policy against PyTorch's default",
        "threads",
        [
            Column("model, batch", "group"),
            Column("threads", "name"),
            Column("prompt", "params.prompt_len", "int"),
            Column("new", "params.new_tokens", "int"),
            Column("tokens/s", "metrics.tokens_per_s", "int"),
            Column("ms/call (median, min–max)", "time_s", "time_ms"),
            Column("× vs default", "ratios.vs_default", "ratio"),
            Column("note", "note"),
        ],
        about="KV-cache decoding, greedy, the two thread counts alternated call by call in one "
        "process. PyTorch's default is one thread per core; the policy "
        "(gptstack.tools.threads, what `gptstack sample` and `eval` use on a CPU) runs "
        "small work on one thread.",
    )


def _declare(ctx: SuiteContext) -> None:
    common = [
        Column("tokens/s", "metrics.tokens_per_s", "int"),
        Column("ms/call (median, min–max)", "time_s", "time_ms"),
    ]
    ctx.result.table(
        "Decoding throughput",
        "decode",
        [
            Column("model, batch", "group"),
            Column("decoder", "name"),
            Column("prompt", "params.prompt_len", "int"),
            Column("new", "params.new_tokens", "int"),
            Column("dtype", "params.dtype"),
            *common,
            Column("weights GB/s", "metrics.bandwidth_bytes_per_s", "gbs"),
            Column("of copy bw", "metrics.copy_fraction", "pct"),
            Column("× vs naive", "ratios.vs_naive", "ratio"),
            Column("× vs KV cache", "ratios.vs_kv", "ratio"),
            Column("decode check", "check", "check"),
            Column("note", "note"),
        ],
        about="One generate() call per sample (prefill + new tokens, greedy). Weights GB/s = "
        "model bytes × decode steps/s, against the measured device copy bandwidth "
        "(`floors.copy` in the JSON). Decode check: one decode step's logits against the "
        "full forward, relative error, in float32.",
    )
    for section, what in (
        ("sweep_prompt", "prompt length (16 new tokens)"),
        ("sweep_new", "generated length (4-token prompt)"),
    ):
        ctx.result.table(
            f"When the cache pays: sweep over {what}, batch 1",
            section,
            [
                Column("model", "group"),
                Column("decoder", "name"),
                Column("prompt", "params.prompt_len", "int"),
                Column("new", "params.new_tokens", "int"),
                *common,
                Column("× vs naive", "ratios.vs_naive", "ratio"),
                Column("note", "note"),
            ],
        )
        x = "params.prompt_len" if section == "sweep_prompt" else "params.new_tokens"
        ctx.result.plot(
            "lines",
            section,
            f"Speedup over naive decoding vs {what}",
            x=x,
            y="ratios.vs_naive.median",
            series=["group", "name"],
            logx=True,
            xlabel=x.split(".")[1],
            ylabel="× vs naive (median of pairs)",
        )
    ctx.result.plot(
        "bars",
        "decode",
        "Decoding: tokens/s",
        value="metrics.tokens_per_s",
        label="group",
        series="name",
        log=True,
        ylabel="tokens/s",
    )
