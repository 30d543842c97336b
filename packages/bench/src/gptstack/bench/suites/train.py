"""Suite `train`: what makes a training step fast? The ladder, rung by rung, per preset.

    data = run_train([ModelShape("esp32", 512, 64, 6, 8, 256, batch_size=64, dropout=0.2)],
                     options=SuiteOptions(device="cuda", out="benchmarks/results/train-....json"))

A step is what `gptstack train` does per optimizer step with grad_accum micro-batches: forward
(+ loss) and backward per micro-batch, clip the global grad norm to 1.0, AdamW step, zero grads
(set_to_none). Batches are already on the device: data loading is not part of the step. Every
rung starts from the same initial weights and sees the same rotating random batches; all rungs
of a preset run alternately in one process (rung 1, rung 2, ..., rung 1, ...), and each is
reported as a ratio to its parent rung and to fp32 eager (medians of per-round ratios).
MFU = flops_per_token (GPT.flops_per_token: 6N + 12·L·C·T, PaLM appendix B) x tokens/s over the
dense peak of the rung's math dtype from peaks.py, named in the row.

On a CPU, given a thread policy (gptstack.tools.threads, passed in by `gptstack bench`), the
"threads" rows time `thread_rung` (the step `gptstack train` runs on this CPU) with PyTorch's
default threads and with the policy's, alternated in one process.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from gptstack.model import (
    Distillation,
    TrainStep,
    WeightAverage,
    compile_model,
    configure_adamw,
)
from gptstack.model.errors import ModelError
from gptstack.model.fp8 import check_fp8_device
from gptstack.model.train_step import WARMUP_STEPS

from ..errors import BenchError
from ..harness import Comparison, Variant, compare, error_text
from ..peaks import peak_flops
from ..results import Column, make_row, ratio_entries
from ..shapes import ModelShape, random_tokens
from .common import SuiteContext, SuiteOptions, compile_callable, release_memory

# Optimizer hyper-parameters of the presets (AdamW, weight decay 0.1, beta2 0.99 / 0.95); their
# values do not change the work of a step, a small lr keeps warm-up steps from moving the loss.
LR, BETAS, WEIGHT_DECAY, GRAD_CLIP = 1e-4, (0.9, 0.95), 0.1, 1.0
INPUT_SETS = 4  # rotating batches per preset
# First-step loss of every rung vs fp32 eager: dropout masks differ between rungs (and between
# eager and compiled code), so this is a sanity bound that catches broken rungs, not an equality.
LOSS_SANITY_RTOL = 0.05
# the distill rung's weight: any weight in (0, 1) does the same work; 0.5 is the esp32 preset's
DISTILL_WEIGHT = 0.5


@dataclass(frozen=True)
class Rung:
    key: str
    name: str
    parent: str | None  # the rung this one adds to (its "vs previous" ratio)
    dtype: str  # "fp32" (TF32 off), "tf32" (fp32 with TF32 matmuls), "bf16" (autocast)
    fused: bool  # AdamW(fused=True)
    # None, "default" or "reduce-overhead" (torch.compile(model) mode), or "regional" (each
    # block and the head compiled once: gptstack.model.compile_model)
    compile: str | None
    step_graph: bool  # the whole step captured in one torch.cuda.CUDAGraph
    gpu_only: bool
    about: str
    # (GPTConfig.ops, GPTConfig.attention) of a rung with kernels of gptstack.cuda_ops; None:
    # the model's own ("torch", "sdpa")
    native: tuple[str, str] | None = None
    fp8: str = "none"  # GPTConfig.fp8: which training matmuls run in FP8
    average: bool = False  # a WeightAverage (train.ema_decay) updated inside the step
    teacher: bool = False  # the loss of gptstack.model.Distillation with the preset's teacher
    residual: str = "fp32"  # GPTConfig.residual: the residual stream's dtype under autocast


def _beside_regional(
    key: str, name: str, about: str, parent: str = "regional", **adds: Any
) -> Rung:
    """A rung that is the regional whole-step graph (what `gptstack train` runs on CUDA) plus
    one thing (`adds`: native, fp8, average, teacher or residual), compared with `parent`."""
    return Rung(key, name, parent, "bf16", True, "regional", True, True, about, **adds)


RUNGS: tuple[Rung, ...] = (
    Rung(
        "fp32",
        "fp32 eager",
        None,
        "fp32",
        False,
        None,
        False,
        False,
        "fp32 weights and math, TF32 off, AdamW (foreach)",
    ),
    Rung(
        "tf32",
        "TF32 matmuls",
        "fp32",
        "tf32",
        False,
        None,
        False,
        True,
        "fp32 weights, matmuls on TF32 tensor cores (torch.backends.cuda.matmul.allow_tf32)",
    ),
    Rung(
        "bf16",
        "bf16 autocast",
        "tf32",
        "bf16",
        False,
        None,
        False,
        False,
        "torch.autocast(dtype=bfloat16) around forward and loss",
    ),
    Rung(
        "fused",
        "+ fused AdamW",
        "bf16",
        "bf16",
        True,
        None,
        False,
        False,
        "AdamW(fused=True): one kernel updates every parameter",
    ),
    Rung(
        "graph-eager",
        "+ whole-step CUDA graph (no compile)",
        "fused",
        "bf16",
        True,
        None,
        True,
        True,
        "eager model; forward, backward, clip and AdamW(fused, capturable) captured in "
        "one torch.cuda.CUDAGraph, replayed each step",
    ),
    Rung(
        "compile",
        "+ torch.compile",
        "fused",
        "bf16",
        True,
        "default",
        False,
        False,
        "torch.compile(model), default mode: what `gptstack train` does today on CUDA",
    ),
    Rung(
        "reduce-overhead",
        "+ compile(mode=reduce-overhead)",
        "compile",
        "bf16",
        True,
        "reduce-overhead",
        False,
        True,
        "Inductor CUDA graph trees around forward and backward; clip and AdamW stay eager",
    ),
    Rung(
        "graph",
        "+ whole-step CUDA graph",
        "compile",
        "bf16",
        True,
        "default",
        True,
        True,
        "compiled model; forward, backward, clip and AdamW(fused, capturable) captured in one "
        "torch.cuda.CUDAGraph, replayed each step",
    ),
    Rung(
        "regional",
        "whole-step graph, regional compile",
        "graph",
        "bf16",
        True,
        "regional",
        True,
        True,
        "as the whole-step graph, with each block and the head compiled once "
        "(gptstack.model.compile_model 'regional': shorter start-up)",
    ),
    _beside_regional(
        "native",
        "+ gptstack.cuda_ops kernels",
        "ops='gptstack' (LayerNorm, residual-add + LayerNorm, the MLP with its GELU in "
        "cuBLASLt's epilogues, chunked LM-head loss) and attention='gptstack' (fused causal "
        "attention) from gptstack.cuda_ops",
        native=("gptstack", "gptstack"),
    ),
    _beside_regional(
        "native-ops",
        "+ gptstack.cuda_ops LayerNorm, MLP, loss",
        "ops='gptstack' alone (LayerNorm, residual-add + LayerNorm, the MLP with its GELU in "
        "cuBLASLt's epilogues, chunked LM-head loss); attention stays SDPA",
        native=("gptstack", "sdpa"),
    ),
    _beside_regional(
        "native-mlp",
        "+ gptstack.cuda_ops loss and MLP",
        "ops='gptstack:loss,mlp' (gpt2-124m's train.cuda_ops): the chunked LM-head loss and "
        "the MLP with its GELU inside its matmuls (cuBLASLt's GELU_AUX_BIAS and DGELU "
        "epilogues); LayerNorm and attention stay PyTorch's",
        native=("gptstack:loss,mlp", "sdpa"),
    ),
    _beside_regional(
        "bf16-residual",
        "+ bf16 residual stream",
        "as native-mlp, with model.residual='bf16' (gpt2-124m's preset): x cast to bf16 after "
        "the embeddings, every residual add and LayerNorm read in half the bytes (llm.c's "
        "precision), and each block's MLP adding the stream inside its c_proj matmul",
        parent="native-mlp",
        native=("gptstack:loss,mlp", "sdpa"),
        residual="bf16",
    ),
    _beside_regional(
        "native-qkv",
        "+ one-pass qkv gradient",
        "as bf16-residual, with ops 'qkv' too (gpt2-124m's train.cuda_ops): the attention's "
        "dq, dk, dv joined into c_attn's output gradient and summed into its bias gradient in "
        "one pass (gptstack.cuda_ops.qkv_heads) instead of a concatenation and a second read",
        parent="bf16-residual",
        native=("gptstack:loss,mlp,qkv", "sdpa"),
        residual="bf16",
    ),
    _beside_regional(
        "native-loss",
        "+ gptstack.cuda_ops loss",
        "ops='gptstack:loss' alone (ln_f's output -> LM head -> loss in chunks of rows, the "
        "logits never whole); LayerNorm, GELU and attention stay PyTorch's",
        native=("gptstack:loss", "sdpa"),
    ),
    _beside_regional(
        "fp8-head",
        "+ FP8 LM head",
        "model.fp8='head': the tied LM head's three training matmuls in FP8 (e4m3 forward, "
        "e5m2 gradient, per-tensor scales; gptstack.model.fp8)",
        fp8="head",
    ),
    _beside_regional(
        "fp8",
        "+ FP8 matmuls",
        "model.fp8='all': every Linear's training matmuls in FP8 (e4m3 forward, e5m2 "
        "gradient, per-tensor scales; gptstack.model.fp8)",
        fp8="all",
    ),
    _beside_regional(
        "native-attention",
        "+ gptstack.cuda_ops attention",
        "attention='gptstack' alone (the fused causal attention); LayerNorm, GELU and the loss "
        "stay PyTorch's",
        native=("torch", "gptstack"),
    ),
    _beside_regional(
        "ema",
        "+ weight average (train.ema_decay)",
        "as the regional whole-step graph, plus the exponential moving average of the weights "
        "updated after AdamW inside the graph (the shakespeare-char preset's ema_decay=0.999)",
        average=True,
    ),
    _beside_regional(
        "distill",
        "+ teacher (train.distill_from)",
        "as the regional whole-step graph, plus the frozen teacher's forward and the "
        "distillation loss (gptstack.model.Distillation, weight 0.5) inside the graph: the "
        "esp32 preset's step (its teacher is the preset esp32-teacher)",
        teacher=True,
    ),
)
RUNG_KEYS = tuple(r.key for r in RUNGS)
_BY_KEY = {r.key: r for r in RUNGS}
BASELINE = "fp32"
# The settings of `gptstack train` on CUDA today (tools/runtime.py, tools/train.py,
# gptstack.model.TrainStep): bf16 autocast, TF32 allowed, regional torch.compile, and the whole
# step (forward, backward, clip 1.0, fused capturable AdamW) replayed as one CUDA graph.
TRAIN_DEFAULT = "regional"  # on CUDA; on a CPU `gptstack train` runs eager (no compile, no graph)
TRAIN_DEFAULT_TEXT = (
    "bf16 autocast + TF32 allowed + regional torch.compile (each block and the "
    "head) + the whole step (clip 1.0, fused capturable AdamW) as one CUDA "
    "graph (tools/runtime.py, tools/train.py, gptstack.model.TrainStep); for gpt2-124m plus "
    "gptstack.cuda_ops' loss, MLP and one-pass qkv gradient and the bf16 residual stream "
    "(its preset's train.cuda_ops and model.residual: the native-qkv rung)"
)


def _set_tf32(allowed: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = allowed
    torch.backends.cudnn.allow_tf32 = allowed


class RungStep:
    """One rung: a copy of the shared initial model, its optimizer and the real training step
    (gptstack.model.TrainStep, what `gptstack train` runs) configured as the rung says.
    `step(batch)` runs one optimizer step on grad_accum (x, y) pairs of (B, T) int64 tokens;
    `first_loss` is the loss of the first step it ran (from the shared initial weights)."""

    def __init__(
        self,
        rung: Rung,
        base: torch.nn.Module,
        device: torch.device,
        backend: str,
        teacher: torch.nn.Module | None = None,
    ) -> None:
        self.rung, self.device = rung, device
        config = rung_config(rung, base.config)
        if config != base.config:  # same weights, other kernels or FP8 matmuls
            self.model = type(base)(config)
            self.model.load_state_dict(base.state_dict())
            self.model = self.model.to(device).train()
        else:
            self.model = copy.deepcopy(base).to(device).train()
        # step_graph needs the capturable (and so fused) AdamW: step count and lr on the device
        self.opt = configure_adamw(
            self.model,
            WEIGHT_DECAY,
            LR,
            BETAS,
            device.type,
            capturable=rung.step_graph,
            fused=rung.fused,
        )
        fwd: Callable = self.model
        if rung.compile == "regional":
            kwargs = {} if backend == "inductor" else {"backend": backend}
            fwd = compile_model(self.model, "regional", dynamic=False, **kwargs)
        elif rung.compile is not None:
            fwd = compile_callable(
                self.model, backend, None if rung.compile == "default" else rung.compile
            )
        if rung.teacher:  # the teacher runs eagerly inside the captured step, as in training
            fwd = Distillation(fwd, copy.deepcopy(teacher).to(device), weight=DISTILL_WEIGHT)
        self.train_step = TrainStep(
            fwd,
            self.model.parameters(),
            self.opt,
            device=device,
            bf16=rung.dtype == "bf16",
            grad_clip=GRAD_CLIP,
            cuda_graph=rung.step_graph,
            cudagraph_mark_step=rung.compile == "reduce-overhead",
            average=WeightAverage(self.model.parameters(), 0.999) if rung.average else None,
        )
        self.first_loss: float | None = None

    def first_steps(self, batch: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """The rung's first step(s) alone: compilation, and for graph rungs the eager warm-up
        steps and the capture, so that timed rounds only replay."""
        for _ in range(WARMUP_STEPS + 1 if self.rung.step_graph else 1):
            loss = self.step(batch)
            if self.first_loss is None:
                self.first_loss = loss.item()

    def step(self, batch: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        if self.device.type == "cuda":
            _set_tf32(self.rung.dtype != "fp32")
        return self.train_step.step(batch, LR)


def rung_config(rung: Rung, config: Any) -> Any:
    """The GPTConfig a rung trains: the preset's, with the rung's ops, attention, fp8 and
    residual stream. Raises ModelConfigError where the preset's sizes do not allow them."""
    ops, attention = rung.native or (config.ops, config.attention)
    return dataclasses.replace(
        config, ops=ops, attention=attention, fp8=rung.fp8, residual=rung.residual
    )


def _ancestor_measured(rung: Rung, measured: set[str]) -> str | None:
    """The key of the nearest ancestor rung in `measured` (keys), or None."""
    parent = rung.parent
    while parent is not None and parent not in measured:
        parent = _BY_KEY[parent].parent
    return parent


def _rung_name(key: str) -> str:
    return _BY_KEY[key].name


def _cudagraph_skips() -> int | None:
    try:
        from torch._dynamo.utils import counters

        return int(
            sum(
                counters["inductor"].get(k, 0)
                for k in counters["inductor"]
                if "cudagraph_skip" in k
            )
        )
    except Exception:
        return None


def _build_rungs(
    ctx: SuiteContext,
    base: torch.nn.Module,
    rungs: Sequence[Rung],
    inputs: list,
    teacher: torch.nn.Module | None = None,
) -> tuple[dict[str, RungStep], dict[str, dict], dict[str, tuple]]:
    """Build each rung from the shared initial weights and run its first step (compilation,
    capture) alone, recording its peak memory. `teacher`: the preset's teacher (random weights)
    for the distill rung. Returns (built, info, not_run) where not_run maps a rung key to
    (status, note)."""
    built: dict[str, RungStep] = {}
    info: dict[str, dict] = {}
    not_run: dict[str, tuple[str, str]] = {}
    for rung in rungs:
        if rung.gpu_only and not ctx.cuda:
            not_run[rung.key] = ("skipped", f"GPU only ({rung.about}); this run is on a CPU")
            continue
        if rung.teacher and teacher is None:
            not_run[rung.key] = ("skipped", "this preset trains without a teacher")
            continue
        if rung.fp8 != "none":
            try:
                rung_config(rung, base.config)
                check_fp8_device(ctx.device)
            except ModelError as e:  # sizes not multiples of 16, or no FP8 tensor cores
                not_run[rung.key] = ("skipped", str(e))
                continue
        ctx.progress.step(rung.name, "build, compile, first step")
        skips_before = _cudagraph_skips()
        try:
            before = 0
            if ctx.cuda:
                torch.cuda.synchronize(ctx.device)
                torch.cuda.reset_peak_memory_stats(ctx.device)
                before = torch.cuda.memory_allocated(ctx.device)
            step = RungStep(rung, base, ctx.device, ctx.compile_backend, teacher)
            step.first_steps(inputs[0])
            peak = None
            if ctx.cuda:
                torch.cuda.synchronize(ctx.device)
                peak = torch.cuda.max_memory_allocated(ctx.device) - before
        except Exception as e:
            not_run[rung.key] = ("error", error_text(e))
            release_memory(ctx.device)
            continue
        skips_after = _cudagraph_skips()
        info[rung.key] = {
            "peak_mem_bytes": peak,
            "cudagraph_skips": (
                skips_after - skips_before if None not in (skips_before, skips_after) else None
            ),
        }
        built[rung.key] = step
    return built, info, not_run


def _ladder_rows(
    ctx: SuiteContext,
    shape: ModelShape,
    rungs: Sequence[Rung],
    cmp: Comparison,
    built: dict[str, RungStep],
    info: dict[str, dict],
    not_run: dict[str, tuple[str, str]],
    params: dict,
    seq_len: int,
    grad_accum: int,
) -> None:
    """One row per rung, in ladder order: measured, skipped or failed."""
    tokens = shape.batch_size * seq_len * grad_accum
    flops_per_token = next(iter(built.values())).model.flops_per_token(seq_len) if built else None
    device_name = torch.cuda.get_device_name(ctx.device) if ctx.cuda else "cpu"
    measured = {r.key for r in rungs if r.name in cmp.measurements}
    ref_loss = built[BASELINE].first_loss if BASELINE in built else None
    for rung in rungs:
        name = rung.name
        if rung.key in not_run:
            status, note = not_run[rung.key]
            ctx.result.add_row(
                make_row(
                    section="ladder",
                    group=shape.name,
                    name=name,
                    params=params,
                    status=status,
                    note=note,
                )
            )
            continue
        if name not in cmp.measurements:
            ctx.result.add_row(
                make_row(
                    section="ladder",
                    group=shape.name,
                    name=name,
                    params=params,
                    status="error",
                    note=cmp.failures.get(name, "did not run"),
                )
            )
            continue
        m = cmp.measurements[name]
        med = m.stats["median"]
        peak = peak_flops(device_name, rung.dtype) if ctx.cuda else None
        tok_s = tokens / med
        metrics = {
            "ms_per_step": med * 1e3,
            "tokens_per_step": tokens,
            "tokens_per_s": tok_s,
            "flops_per_token": flops_per_token,
            "mfu": flops_per_token * tok_s / peak.flops if peak else None,
            "mfu_peak": peak.label if peak else None,
            **info[rung.key],
        }
        parent_key = _ancestor_measured(rung, measured)
        ratios = ratio_entries(
            cmp,
            name,
            {
                "vs_previous": _rung_name(parent_key) if parent_key else None,
                "vs_fp32": _rung_name(BASELINE),
                "vs_train_default": _rung_name(TRAIN_DEFAULT),
            },
        )
        check = None
        first = built[rung.key].first_loss
        if ref_loss is not None and first is not None:
            rel = abs(first - ref_loss) / abs(ref_loss)
            check = {
                "rel_err": rel,
                "tol": LOSS_SANITY_RTOL,
                "ok": rel < LOSS_SANITY_RTOL,
                "against": "fp32 eager first-step loss (sanity bound: dropout differs)",
                "loss": first,
            }
        ctx.result.add_row(
            make_row(
                section="ladder",
                group=shape.name,
                name=name,
                params=params,
                measurement=m,
                metrics=metrics,
                ratios=ratios,
                check=check,
            )
        )


def _summarize(ctx: SuiteContext, shape: ModelShape) -> None:
    rows = [r for r in ctx.result.rows if r["group"] == shape.name and r["status"] == "ok"]
    if not rows:
        return
    best = max(rows, key=lambda r: r["metrics"]["tokens_per_s"])
    entry = {"fastest": best["name"], "fastest_tokens_per_s": best["metrics"]["tokens_per_s"]}
    if "vs_train_default" in best["ratios"]:
        entry["fastest_vs_train_default"] = best["ratios"]["vs_train_default"]["median"]
    entry["train_default"] = _rung_name(TRAIN_DEFAULT)
    ctx.result.data["summary"][shape.name] = entry
    ctx.result.save()


# --- CPU threads: the policy against PyTorch's default ---------------------------------------

ThreadPolicy = Callable[[int, int], int]  # (rows per forward call, parameters) -> threads


def _thread_rows(
    ctx: SuiteContext,
    shape: ModelShape,
    base: torch.nn.Module,
    inputs: list,
    rung: Rung,
    policy: ThreadPolicy,
    default: int,
    params: dict,
) -> None:
    """One training step of `rung` at PyTorch's default threads and at the policy's."""
    rows = shape.batch_size * params["seq_len"]
    chosen = policy(rows, base.num_params())
    settings = {
        f"PyTorch default ({default} thread{'s' * (default != 1)})": default,
        f"thread policy ({chosen} thread{'s' * (chosen != 1)})": chosen,
    }
    variants = []
    for name, threads in settings.items():
        torch.set_num_threads(threads)
        step = RungStep(rung, base, ctx.device, ctx.compile_backend)
        step.first_steps(inputs[0])

        def fn(batch, step=step, threads=threads):
            torch.set_num_threads(threads)
            return step.step(batch)

        variants.append(Variant(name, fn, inputs))
    ctx.progress.row(f"threads {shape.name}")
    cmp = compare(variants, ctx.settings, device=ctx.device, progress=ctx.progress)
    torch.set_num_threads(default)
    tokens = rows * params["grad_accum"]
    baseline = next(iter(settings))
    for name, threads in settings.items():
        row_params = {**params, "threads": threads, "rung": rung.name}
        if name not in cmp.measurements:
            ctx.result.add_row(
                make_row(
                    section="threads",
                    group=shape.name,
                    name=name,
                    params=row_params,
                    status="error",
                    note=cmp.failures.get(name, "did not run"),
                )
            )
            continue
        m = cmp.measurements[name]
        med = m.stats["median"]
        ctx.result.add_row(
            make_row(
                section="threads",
                group=shape.name,
                name=name,
                params=row_params,
                measurement=m,
                metrics={"ms_per_step": med * 1e3, "tokens_per_s": tokens / med},
                ratios=ratio_entries(cmp, name, {"vs_default": baseline}),
            )
        )


def _declare_threads(ctx: SuiteContext, rung: Rung) -> None:
    ctx.result.table(
        "CPU threads: the thread policy against PyTorch's default",
        "threads",
        [
            Column("preset", "group"),
            Column("threads", "name"),
            Column("B", "params.batch", "int"),
            Column("T", "params.seq_len", "int"),
            Column("ms/step (median, min–max)", "time_s", "time_ms"),
            Column("tokens/s", "metrics.tokens_per_s", "int"),
            Column("× vs default", "ratios.vs_default", "ratio"),
            Column("note", "note"),
        ],
        about=f"The '{rung.name}' step (what `gptstack train` runs on this CPU), the two thread "
        "counts alternated step by step in one process. PyTorch's default is one thread "
        "per core; the policy (gptstack.tools.threads) also caps it at the cgroup CPU "
        "quota and runs small work on one thread.",
    )


def run_train(
    shapes: Sequence[ModelShape],
    *,
    rungs: Sequence[str] = RUNG_KEYS,
    seq_len: int | None = None,
    grad_accum: int = 1,
    thread_policy: ThreadPolicy | None = None,
    thread_rung: str = "fp32",
    options: SuiteOptions | None = None,
) -> dict[str, Any]:
    """Run the ladder for each shape (batch = shape.batch_size, T = seq_len or block_size);
    returns the result dict (also written to `out` as it goes). thread_policy: on a CPU, also
    the "threads" rows of `thread_rung` (policy vs PyTorch's default threads)."""
    options = options or SuiteOptions()
    unknown = [k for k in rungs if k not in RUNG_KEYS]
    if unknown or not rungs:
        raise BenchError(f"rungs {unknown or '(none)'}: choose from {', '.join(RUNG_KEYS)}")
    if grad_accum < 1:
        raise BenchError(f"grad_accum is {grad_accum}: it must be >= 1")
    chosen = [r for r in RUNGS if r.key in rungs]
    shapes = [s.smoke() for s in shapes] if options.smoke else list(shapes)
    params = {
        "shapes": [s.to_dict() for s in shapes],
        "rungs": [asdict(r) for r in chosen],
        "seq_len": seq_len,
        "grad_accum": grad_accum,
        "lr": LR,
        "betas": list(BETAS),
        "weight_decay": WEIGHT_DECAY,
        "grad_clip": GRAD_CLIP,
        "train_default": {"rung": _rung_name(TRAIN_DEFAULT), "what": TRAIN_DEFAULT_TEXT},
    }
    ctx = SuiteContext.create("train", params, options)
    _declare(ctx)
    threads = thread_policy is not None and not ctx.cuda
    if threads:
        if thread_rung not in RUNG_KEYS or _BY_KEY[thread_rung].gpu_only:
            raise BenchError(
                f"thread_rung {thread_rung!r}: choose a CPU rung of "
                f"{', '.join(r.key for r in RUNGS if not r.gpu_only)}"
            )
        _declare_threads(ctx, _BY_KEY[thread_rung])
    default_threads = torch.get_num_threads()
    if not ctx.cuda:
        ctx.result.note(
            "CPU run: TF32 and the CUDA-graph rungs are GPU only (skipped rows); no "
            "MFU (no peak table for CPUs)."
        )
    for shape in shapes:
        T = min(seq_len or shape.block_size, shape.block_size)
        ctx.progress.row(f"{shape.name} B={shape.batch_size} T={T}")
        g = torch.Generator().manual_seed(1)
        inputs = [
            [
                (
                    random_tokens((shape.batch_size, T), shape.vocab_size, ctx.device, g),
                    random_tokens((shape.batch_size, T), shape.vocab_size, ctx.device, g),
                )
                for _ in range(grad_accum)
            ]
            for _ in range(INPUT_SETS)
        ]
        base = shape.build(torch.device("cpu"), seed=0)
        teacher = shape.teacher.build(torch.device("cpu"), seed=1) if shape.teacher else None
        row_params = {
            "batch": shape.batch_size,
            "seq_len": T,
            "grad_accum": grad_accum,
            "n_params": base.num_params(),
        }
        built, info, not_run = _build_rungs(ctx, base, chosen, inputs, teacher)
        variants = [Variant(r.name, built[r.key].step, inputs) for r in chosen if r.key in built]
        cmp = compare(variants, ctx.settings, device=ctx.device, progress=ctx.progress)
        _ladder_rows(ctx, shape, chosen, cmp, built, info, not_run, row_params, T, grad_accum)
        _summarize(ctx, shape)
        if threads:
            del built
            _thread_rows(
                ctx,
                shape,
                base,
                inputs,
                _BY_KEY[thread_rung],
                thread_policy,
                default_threads,
                row_params,
            )
            built = None
        del built, base, teacher
        torch._dynamo.reset()  # fresh compile caches per preset (recompile limits)
        release_memory(ctx.device)
    if ctx.cuda:
        _set_tf32(True)
    return ctx.finish()


def _declare(ctx: SuiteContext) -> None:
    ctx.result.table(
        "Training step ladder",
        "ladder",
        [
            Column("preset", "group"),
            Column("rung", "name"),
            Column("B", "params.batch", "int"),
            Column("T", "params.seq_len", "int"),
            Column("ms/step (median, min–max)", "time_s", "time_ms"),
            Column("tokens/s", "metrics.tokens_per_s", "int"),
            Column("MFU", "metrics.mfu", "pct"),
            Column("peak MiB", "metrics.peak_mem_bytes", "mib"),
            Column("× vs previous", "ratios.vs_previous", "ratio"),
            Column("× vs fp32 eager", "ratios.vs_fp32", "ratio"),
            Column("× vs train default", "ratios.vs_train_default", "ratio"),
            Column("loss check", "check", "check"),
            Column("note", "note"),
        ],
        about="One optimizer step (forward+backward per micro-batch, clip 1.0, AdamW, zero_grad) "
        "on batches already on the device (data loading is not in the step). "
        "Ratios: median of per-round speedups (> 1 is faster), min–max in brackets. "
        "MFU over the dense peak of the rung's dtype, named in `metrics.mfu_peak` of the "
        "JSON. "
        "Peak MiB: allocated during the rung's build and first step (model, optimizer "
        "state, activations, graph pools). 'train default' = " + TRAIN_DEFAULT_TEXT + ".",
    )
    ctx.result.plot(
        "bars",
        "ladder",
        "Training step: speedup over fp32 eager",
        value="ratios.vs_fp32.median",
        label="group",
        series="name",
        log=False,
        ylabel="× vs fp32 eager (median of pairs)",
    )
