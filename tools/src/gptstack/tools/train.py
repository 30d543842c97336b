"""The training loop: `train(cfg, run_dir)` -> TrainResult.

AdamW (fused), warmup + cosine schedule, gradient accumulation and clipping; on CUDA bf16
autocast, torch.compile and the whole step replayed as one CUDA graph (gptstack.model.TrainStep,
the same step `gptstack bench train` measures). Every `eval_interval` steps: train/val loss and
val bits/char, the checkpoint `last/` (with optimizer and RNG state) and `best/` when val
improves. Every metric goes
to `run_dir/metrics.jsonl`. Ctrl-C finishes the current step (or evaluation batch), saves `last/`
and returns. Resuming from `last/` continues exactly: the batch of a step depends only on
(seed, step).

A run directory that already holds checkpoints is refused unless resumed or overwritten
(run_dir.py); it is created only when training starts, and removed again if the run fails
before its first checkpoint. On a CPU the run uses its preset's CPU schedule
(schedule.for_device), the thread policy (threads.py) and malloc thresholds that keep a step's
freed memory for the next (cpu_memory.py), each named in the run header.

Under torchrun (train_dist.py) the same loop runs in every process: distributed.py and
parallel.py hold what differs (each rank's share of the micro-batches, DDP/FSDP2, rank 0 alone
printing and writing); the lines that call them are marked `# [dist]`. One process is this path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from gptstack.model import (
    GPT,
    Distillation,
    GPTConfig,
    TrainStep,
    WeightAverage,
    load_safetensors,
)
from gptstack.model.config import cuda_kernels_unavailable, parse_ops
from gptstack.model.fp8 import check_fp8_device
from gptstack.model.train_step import WARMUP_STEPS
from gptstack.tokenizer import load_tokenizer

from .checkpoint import read_meta, resolve_checkpoint
from .checkpoint_writer import CheckpointWriter
from .compile_ahead import CompileAhead
from .config import RunConfig, TrainSection, gpt_config
from .cpu_memory import keep_freed_memory
from .data import Corpus, prepare_corpus
from .distributed import World, check_divisible, restore_rng, rng_state, seed_ranks
from .errors import CheckpointError, ConfigError
from .evaluate import EvalInterrupted, LossEstimator
from .parallel import distributed_runtime, wrap_model
from .run_dir import check_run_dir, checkpoint_step, clear_run, run_folder
from .run_estimate import RunWork, matmul_rate
from .runtime import Runtime, process_start_time, resolve_runtime
from .schedule import (
    cuda_micro_batch,
    dropout_for_device,
    for_device,
    get_lr,
    kernels_for_device,
    total_steps,
)
from .shards import regrouped_batches
from .teacher import check_teacher, load_teacher, teacher_progress, teacher_stage
from .threads import use_threads


@dataclass
class TrainResult:
    run_dir: Path
    step: int  # optimizer steps completed
    max_steps: int
    best_val_loss: float
    last_val_loss: float
    best_val_bpc: float
    wall_time_s: float
    interrupted: bool
    early_stopped: bool = False  # train.early_stop_evals evaluations in a row without a better val


# Steps whose time counts as start-up: the eager warm-up steps, the capture, one replay.
FIRST_STEPS = WARMUP_STEPS + 2


def startup_line(startup: dict[str, float]) -> str:
    """One line for the run log: where the time before steady training went."""
    names = {
        "imports_s": "Python + imports",
        "data_s": "data",
        "model_s": "model + CUDA init",
        "first_eval_s": "first evaluation (compile, capture)",
        "first_steps_s": f"first {FIRST_STEPS} steps (compile, warm-up, capture)",
        "teacher_s": "training the teacher",
    }
    parts = [f"{names[k]} {v:.1f} s" for k, v in startup.items() if k in names]
    return f"start-up: {sum(startup.values()):.1f} s = " + ", ".join(parts)


def _train_teacher(
    cfg: RunConfig,
    teacher_cfg: RunConfig,
    teacher_dir: Path,
    runtime: Runtime,
    overwrite: bool,
    progress: bool,
    log: Callable[[str], None],
    world: World,
) -> TrainResult | None:
    """Train (or resume) a `preset:NAME` teacher into RUN/teacher; None when a finished run of
    the same config is already there. --overwrite of the student trains it again. Meanwhile a
    second process compiles the student `cfg` (compile_ahead.py)."""
    steps = total_steps(teacher_cfg.train, runtime.device_type)
    state = "train" if overwrite else teacher_progress(teacher_cfg, teacher_dir, steps)
    if state == "done":
        log(f"teacher: the finished run of preset {teacher_cfg.name} in {teacher_dir}")
        return None
    log(
        f"teacher: {'resuming' if state == 'resume' else 'training'} preset "
        f"{teacher_cfg.name} in {teacher_dir} first (train.distill_from)"
    )
    ahead = CompileAhead.start(cfg, teacher_cfg, runtime, world.size)
    result = None
    try:
        result = train(
            teacher_cfg,
            teacher_dir,
            resume=teacher_dir if state == "resume" else None,
            overwrite=state == "train",
            progress=progress,
            log=log,
            world=world,
        )
    finally:  # a stopped or failed teacher ends the second process; a finished one waits for it
        if ahead is not None:
            ahead.finish(log, wait=result is not None and not result.interrupted)
    if world.is_main:  # [dist]
        from .summary import write_run_summary

        write_run_summary(teacher_dir)
    log(
        f"teacher: best val loss {result.best_val_loss:.4f} ({result.best_val_bpc:.4f} "
        f"bits/char) -> {teacher_dir}/best"
    )
    return result


def padded_vocab(vocab_size: int, multiple: int) -> int:
    return ((vocab_size + multiple - 1) // multiple) * multiple


def model_config(cfg: RunConfig, vocab_size: int) -> GPTConfig:
    """The model `gptstack train` builds for `cfg` over a tokenizer of vocab_size ids."""
    return gpt_config(cfg.model, padded_vocab(vocab_size, cfg.tokenizer.pad_vocab_to))


def run_model_config(
    cfg: RunConfig, vocab_size: int, device_type: str, dtype: str = ""
) -> GPTConfig:
    """model_config as it trains on this device: train.cpu_dropout's dropout, on a CPU in
    bf16 train.cpu_bf16_ops and cpu_bf16_attention (a native one only where
    gptstack.cuda_ops runs its AVX2 path), on a GPU train.cuda_ops (only where
    gptstack.cuda_ops has CUDA kernels for it: cuda_ops_skipped). dtype: the run's "bf16"
    or "fp32" ("" where it cannot matter: a GPU)."""
    mcfg = model_config(cfg, vocab_size)
    ops, attention = kernels_for_device(cfg.train, mcfg.ops, mcfg.attention, device_type, dtype)
    if device_type == "cpu":
        native_ops = bool(parse_ops(ops))
        if (native_ops or attention == "gptstack") and _cuda_ops_cpu_path() != "avx2_fma":
            ops = mcfg.ops if native_ops else ops
            attention = mcfg.attention if attention == "gptstack" else attention
    elif ops != mcfg.ops and cuda_ops_skipped(cfg.train, mcfg) is not None:
        ops = mcfg.ops
    dropout = dropout_for_device(cfg.train, mcfg.dropout, device_type)
    return dataclasses.replace(mcfg, dropout=dropout, ops=ops, attention=attention)


def cuda_ops_skipped(train: TrainSection, mcfg: GPTConfig) -> str | None:
    """Why train.cuda_ops is not applied to the model `mcfg` on a GPU (None: it is, or it is
    unset): its kernels cannot run here, or they would replace what model.fp8 asks for."""
    if not train.cuda_ops or train.cuda_ops == mcfg.ops:
        return None
    if mcfg.fp8 != "none" and "loss" in parse_ops(train.cuda_ops):
        return f"model.fp8={mcfg.fp8!r} computes the LM head, which the native loss replaces"
    if mcfg.fp8 == "all" and "mlp" in parse_ops(train.cuda_ops):
        return "model.fp8='all' computes the MLP's matmuls, which the native MLP replaces"
    return cuda_kernels_unavailable()


# The step's memory on a GPU per position, layer and channel of a micro-batch: what bf16
# autocast keeps for the backward (the residual stream in fp32, LayerNorm outputs, q/k/v, the
# MLP's 4C hidden before and after GELU); plus, without the native loss, per position and
# vocabulary entry the logits and their gradient in bf16; plus 16 bytes a parameter (fp32
# weights, gradients, AdamW's two moments). gpt2-124m's peaks on an H100 (2026-12-07, 16 and 64
# rows, benchmarks/JOURNAL.md) grow by 35.1 and 3.9 bytes: 40 and 4 leave a margin.
ACTIVATION_BYTES = 40
LOGIT_BYTES = 4
# the share of the GPU's memory the estimate may take (the CUDA context, cuBLAS workspaces,
# the whole-step graph's pool and the allocator's fragmentation take the rest)
GPU_MEMORY_SHARE = 0.8


def step_memory_bytes(mcfg: GPTConfig, n_params: int, rows: int) -> int:
    """A training step's estimated peak GPU memory at `rows` sequences per micro-batch."""
    per_row = mcfg.n_layer * mcfg.block_size * mcfg.n_embd * ACTIVATION_BYTES
    if "loss" not in mcfg.native_op_names:
        per_row += mcfg.block_size * mcfg.vocab_size * LOGIT_BYTES
    return 16 * n_params + rows * per_row


def fits_gpu(mcfg: GPTConfig, n_params: int, device: torch.device) -> Callable[[int], bool]:
    """fits(rows): whether a step of `rows` sequences is expected to fit `device`'s memory."""
    total = torch.cuda.get_device_properties(device).total_memory
    return lambda rows: step_memory_bytes(mcfg, n_params, rows) <= GPU_MEMORY_SHARE * total


def gpu_micro_batch(
    t: TrainSection,
    mcfg: GPTConfig,
    n_params: int,
    runtime: Runtime,
    world_size: int,
    log: Callable[[str], None],
) -> TrainSection:
    """The train section with train.cuda_batch_size's micro-batch where this GPU holds it
    (schedule.cuda_micro_batch), saying what it chose; `t` itself elsewhere."""
    if runtime.device_type != "cuda" or not t.cuda_batch_size:
        return t
    rows, accum = cuda_micro_batch(t, fits_gpu(mcfg, n_params, runtime.device), world_size)
    if (rows, accum) != (t.batch_size, t.grad_accum):
        log(
            f"micro-batch {rows} x {accum} on this GPU (train.cuda_batch_size="
            f"{t.cuda_batch_size}; configured {t.batch_size} x {t.grad_accum}, the same "
            f"{t.batch_size * t.grad_accum} sequences a step)"
        )
    elif t.cuda_batch_size > t.batch_size:
        log(
            f"train.cuda_batch_size={t.cuda_batch_size} is not used: no micro-batch above "
            f"{t.batch_size} is expected to fit this GPU's memory"
            + (f" and split over the {world_size} processes" if world_size > 1 else "")
            + f"; micro-batch {t.batch_size} x {t.grad_accum}"
        )
    return dataclasses.replace(t, batch_size=rows, grad_accum=accum)


def _cuda_ops_cpu_path() -> str | None:
    """The CPU path gptstack.cuda_ops runs ("avx2_fma" or "scalar"), None where not installed."""
    try:
        import gptstack.cuda_ops as cuda_ops
    except ImportError:
        return None
    return cuda_ops.build_info()["cpu_path"]


class _StopOnInterrupt:
    """First Ctrl-C asks the loop to stop after the current step (or evaluation batch) and says
    so at once; a second one aborts.

    With several processes a Ctrl-C is only `pending` until the ranks agree at the next logged
    step (every rank must stop after the same step)."""

    MESSAGE = b"\nCtrl-C: stopping after this step and saving last/ (Ctrl-C again to abort)\n"

    def __init__(self, distributed: bool = False) -> None:
        self.requested = False
        self.pending = False
        self.distributed = distributed

    def __enter__(self):
        self._previous = signal.getsignal(signal.SIGINT)
        try:
            signal.signal(signal.SIGINT, self._handle)
        except ValueError:  # not the main thread: leave Ctrl-C alone
            self._previous = None
        return self

    def _handle(self, signum, frame):
        if self.requested or self.pending:
            raise KeyboardInterrupt
        if self.distributed:
            self.pending = True
        else:
            self.requested = True
        os.write(2, self.MESSAGE)  # not print(): the handler may run inside a write to stderr

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


class _Metrics:
    def __init__(self, path: Path) -> None:
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed by close())

    def write(self, **record: Any) -> None:
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class _NoMetrics:
    """metrics.jsonl of ranks other than 0: nothing is written."""

    def write(self, **record: Any) -> None:
        pass

    def close(self) -> None:
        pass


def _read_train_state(ckpt: Path) -> dict[str, Any]:
    state_path = ckpt / "train_state.pt"
    if not state_path.is_file():
        raise CheckpointError(
            f"{ckpt} has no train_state.pt, so it cannot be resumed exactly (best/ checkpoints "
            "carry weights only): resume from the run directory or its last/"
        )
    return torch.load(state_path, map_location="cpu", weights_only=True)


def _restore(
    ckpt: Path, state: dict[str, Any], replicas, optimizer, runtime: Runtime, seed: int
) -> None:
    replicas.load_optimizer(ckpt, state, optimizer)  # [dist] whole or DCP shards, any world size
    if runtime.cuda_graph:  # loaded rates may be CPU tensors or floats: back to device tensors
        for group in optimizer.param_groups:
            group["lr"] = torch.tensor(
                float(group["lr"]), dtype=torch.float32, device=runtime.device
            )
    restore_rng(state, replicas.world, runtime.device, seed)  # [dist] each rank's own stream


def train(
    cfg: RunConfig,
    run_dir: Path,
    *,
    resume: Path | None = None,
    overwrite: bool = False,
    corpus: Corpus | None = None,
    stop_at: int | None = None,
    progress: bool = True,
    log: Callable[[str], None] = print,
    world: World | None = None,
) -> TrainResult:
    """Train `cfg` into `run_dir` (or continue the run saved in `resume`).

    `stop_at` stops after that many steps as Ctrl-C would (saving last/), so a long schedule can be
    run in stages on machines with a time limit and resumed exactly. A run_dir holding
    checkpoints is refused (GptstackError) unless `resume` points at it or `overwrite` is set.
    `world`: this process's rank among several (train_dist.py); None is one process.
    """
    world = world or World()  # [dist]
    run_dir = Path(run_dir)
    entered = time.time()
    startup = {"imports_s": entered - process_start_time()}  # Python, torch, the CLI
    if resume is not None and overwrite:
        raise ConfigError("--resume continues a run and --overwrite deletes it: pass one of them")
    check_run_dir(run_dir, resume=resume, overwrite=overwrite)
    runtime = distributed_runtime(resolve_runtime(cfg.train), world, cfg.train.cuda_graph)  # [dist]
    t, T = for_device(cfg.train, runtime.device_type), cfg.model.block_size
    max_steps = total_steps(cfg.train, runtime.device_type)
    check_divisible(t.grad_accum, world.size)  # [dist] before the data and a teacher are made

    teacher = None
    if t.distill_from:  # knowledge distillation: the teacher is found, or trained first
        stage = teacher_stage(cfg, run_dir)  # for "preset:NAME": (its config, RUN/teacher)
        teacher_dir = Path(t.distill_from) if stage is None else stage[1]
        if stage is not None:
            t_teacher = time.time()
            result = _train_teacher(cfg, *stage, runtime, overwrite, progress, log, world)
            if result is not None and result.interrupted:
                log("stopped while training the teacher: run the same command again to go on")
                return result
            startup["teacher_s"] = time.time() - t_teacher
        teacher = load_teacher(teacher_dir, cfg, runtime.device)
    tokenizer, ckpt = None, None
    if resume is not None:
        ckpt = resolve_checkpoint(resume, prefer="last")
        read_meta(ckpt)
        tokenizer = load_tokenizer(ckpt / "tokenizer.json")
    elif teacher is not None:
        tokenizer = teacher.tokenizer  # the student reads the teacher's token ids
    if corpus is None:
        with world.main_first():  # [dist] rank 0 fills the token cache, the others read it
            corpus = prepare_corpus(cfg, tokenizer)
    startup["data_s"] = time.time() - entered - startup.get("teacher_s", 0.0)
    torch.manual_seed(t.seed)
    mcfg = run_model_config(cfg, corpus.tokenizer.vocab_size, runtime.device_type, runtime.dtype)
    if runtime.device_type == "cuda" and t.cuda_ops and mcfg.ops != t.cuda_ops:
        skipped = cuda_ops_skipped(t, model_config(cfg, corpus.tokenizer.vocab_size))
        log(
            f"train.cuda_ops={t.cuda_ops!r} is not used: {skipped}; training with "
            f"model.ops={mcfg.ops!r} (the same model; --set train.cuda_ops= asks for that "
            f"without this note)"
        )
    if mcfg.fp8 != "none":
        check_fp8_device(runtime.device)  # before anything is built on a GPU that cannot
    model = GPT(mcfg)
    if teacher is not None:
        check_teacher(teacher, corpus.tokenizer, mcfg)
    state = _read_train_state(ckpt) if resume is not None else None
    if state is not None:
        load_safetensors(model, ckpt / "model.safetensors")
    # the configured split: a step's sequences are its micro-batches' in order, whatever
    # micro-batch the GPU runs (shards.regrouped_batches), and evaluation keeps its micro-batch
    configured = t
    t = gpu_micro_batch(t, mcfg, model.num_params(), runtime, world.size, log)
    micro_batches = world.micro_batches(t.grad_accum)  # [dist] this rank's share of each step
    runtime.threads = use_threads(
        runtime.device, rows=t.batch_size * T, n_params=model.num_params()
    )
    if runtime.device_type == "cpu" and t.cpu_keep_freed_memory:
        runtime.memory = keep_freed_memory()
    # [dist] to the device as is, or in DDP / FSDP2; compiled as runtime.compile says
    replicas = wrap_model(model, world, runtime, t.parallel)
    seed_ranks(world, t.seed)  # [dist]
    optimizer = model.configure_optimizer(
        t.weight_decay, t.lr, (t.beta1, t.beta2), runtime.device_type, capturable=runtime.cuda_graph
    )

    average = WeightAverage(model.parameters(), t.ema_decay) if t.ema_decay > 0 else None

    startup["model_s"] = (  # incl. CUDA's start
        time.time() - entered - startup["data_s"] - startup.get("teacher_s", 0.0)
    )
    start, best_val, best_bpc, elapsed0, evals_without_gain = 0, math.inf, math.inf, 0.0, 0
    if state is not None:
        _restore(ckpt, state, replicas, optimizer, runtime, t.seed)
        start, best_val = state["step"], state["best_val_loss"]
        best_bpc, elapsed0 = state.get("best_val_bpc", math.inf), state.get("elapsed_s", 0.0)
        evals_without_gain = state.get("evals_without_gain", 0)
        if average is not None and "weight_average" in state:
            average.load_state_dict(state["weight_average"])
        if start >= max_steps:
            log(f"{ckpt} is at step {start:,} of {max_steps:,}: training is finished")
            return TrainResult(run_dir, start, max_steps, best_val, math.nan, best_bpc, 0.0, False)
    fwd = replicas.fwd
    objective = fwd
    if teacher is not None:
        objective = Distillation(
            fwd, teacher.model, weight=t.distill_weight, temperature=t.distill_temperature
        )
    train_step = TrainStep(
        objective,
        model.parameters(),
        optimizer,
        device=runtime.device,
        bf16=runtime.dtype == "bf16",
        grad_clip=t.grad_clip,
        cuda_graph=runtime.cuda_graph,
        no_sync=replicas.no_sync,
        average=average,
    )
    if not world.is_main:  # [dist] rank 0 alone prints
        progress, log = False, _quiet

    tokens_per_step = t.batch_size * t.grad_accum * T
    flops_per_token = model.flops_per_token()
    kernels = (
        f", kernels: ops {mcfg.ops}, attention {mcfg.attention}"
        if (mcfg.ops, mcfg.attention) != ("torch", "sdpa")
        else ""
    )
    if mcfg.residual == "bf16" and runtime.dtype == "bf16":  # without autocast x keeps fp32
        kernels += ", residual stream bf16"
    log(
        f"run {cfg.name}: {model.num_params() / 1e6:.2f}M parameters, vocab {mcfg.vocab_size}, "
        f"{tokens_per_step:,} tokens/step, {max_steps:,} steps, dropout {mcfg.dropout:g}"
        f"{kernels} on {runtime.describe()}"
    )
    log(
        f"data {corpus.name}: {len(corpus.train):,} train / {len(corpus.val):,} val tokens "
        f"({corpus.tokenizer.kind} tokenizer, vocab {corpus.tokenizer.vocab_size})"
    )
    if teacher is not None:
        log(
            f"distilling from {teacher.path} ({teacher.model.num_params() / 1e6:.2f}M parameters):"
            f" weight {t.distill_weight:g}, temperature {t.distill_temperature:g}; the train loss"
            " is the mixed objective, the val loss the plain one"
        )
    if runtime.peak is not None:
        log(f"MFU peak: {runtime.peak.label}")
    if world.size > 1:
        log(world.describe(t.parallel, t.grad_accum))  # [dist]

    # eval batches drawn once and kept on the device; on CUDA the eval forward is a graph too
    estimator = LossEstimator(
        fwd,
        corpus,
        batch_size=configured.batch_size,  # the same val windows on every GPU
        block_size=T,
        batches=t.eval_batches,
        seed=t.seed,
        runtime=runtime,
        cuda_graph=runtime.cuda_graph,
        world=world,
    )  # [dist] a share each
    if runtime.device_type == "cpu" and world.size == 1:  # a GPU-sized run says so up front
        work = RunWork.of(
            flops_per_token,
            tokens_per_step,
            estimator.tokens_per_evaluation,
            start=start,
            max_steps=max_steps,
            eval_interval=t.eval_interval,
            teacher_flops_per_token=teacher.model.flops_per_token() if teacher else 0.0,
        )
        rate = matmul_rate(torch.bfloat16 if runtime.dtype == "bf16" else torch.float32)
        log(work.describe(rate, runtime.dtype))

    def evaluate(step: int, final: bool = False) -> float:
        """Losses, metrics and checkpoints at `step` (last/ when train.checkpoint_interval says
        so, at the `final` step and where the run stops early); EvalInterrupted on a Ctrl-C."""
        nonlocal best_val, best_bpc, evals_without_gain
        bar.refresh()
        t_eval = time.perf_counter()
        # with train.ema_decay the average is what is evaluated and what best/ keeps
        with average.swapped_in() if average is not None else contextlib.nullcontext():
            losses = estimator(
                progress=progress, desc=f"eval at step {step}", should_stop=lambda: stop.requested
            )
            t_save = time.perf_counter()
            # raises a write that failed; waits only while more than the previous evaluation's
            # writes are still going, which bounds the snapshots held in memory
            writer.drain(keep=2)
            val, bpc = losses["val"], corpus.bits_per_char(losses["val"])
            meta = checkpoint_meta(mcfg, cfg, corpus, step, val_loss=val, val_bpc=bpc)
            improved = val < best_val
            if improved:  # [dist] rank 0 writes
                replicas.save(
                    run_dir / "best", tokenizer=corpus.tokenizer, meta=meta, writer=writer
                )
        evals_without_gain = 0 if improved else evals_without_gain + 1
        if improved:
            best_val, best_bpc = val, bpc
        if final or stops_early() or last_due(step):
            # last/ holds the weights themselves: the average's loss is not theirs
            save_last(step, meta if average is None else checkpoint_meta(mcfg, cfg, corpus, step))
        t_done = time.perf_counter()
        bar.unpause()  # the evaluation's time is not the steps': keep it out of rate and ETA
        metrics.write(
            event="eval",
            step=step,
            train_loss=losses["train"],
            val_loss=val,
            val_bpc=bpc,
            lr=get_lr(step, t, max_steps),
            eval_s=t_save - t_eval,  # the loss estimate
            # the loop's wait for checkpoints: copying best/ (when better) and last/ for the
            # background writer, and any write of the previous evaluation still going
            checkpoint_s=t_done - t_save,
            time=time.time(),
        )
        say(
            f"step {step:>6}: train {losses['train']:.4f}  val {val:.4f}  "
            f"val bits/char {bpc:.4f}{'  (best)' if improved else ''}"
        )
        return val

    def stops_early() -> bool:  # train.early_stop_evals evaluations in a row without a gain
        return bool(t.early_stop_evals) and evals_without_gain >= t.early_stop_evals

    def last_due(step: int) -> bool:
        interval = t.checkpoint_interval
        return interval == 0 or step - last_saved >= interval

    def save_last(step: int, meta: dict[str, Any]) -> None:
        nonlocal last_saved
        saved = checkpoint_step(run_dir / "last")
        if saved is not None and saved > step:  # e.g. two runs writing into one folder
            raise CheckpointError(
                f"{run_dir / 'last'} is at step {saved:,}, further than this run's {step:,}: "
                "not replacing it; continue it with --resume, or train into another --out"
            )
        state = {
            "step": step,
            **rng_state(world, runtime.device),  # [dist] every rank's stream
            "best_val_loss": float(best_val),
            "best_val_bpc": float(best_bpc),
            "evals_without_gain": evals_without_gain,
            "elapsed_s": elapsed0 + time.perf_counter() - t0,
        }
        if average is not None:
            state["weight_average"] = average.state_dict()
        # [dist] the optimizer state goes in whole (train_state.pt) or as FSDP2's DCP shards
        replicas.save(
            run_dir / "last",
            tokenizer=corpus.tokenizer,
            meta=meta,
            train_state=state,
            optimizer=optimizer,
            writer=writer,
        )
        last_saved = step

    # Training on a GPU, rank 0's checkpoint writes run on a background thread while the steps go
    # on (the CPU is idle then); on a CPU they would compete with the step for its cores [dist]
    writer = CheckpointWriter(background=runtime.device_type == "cuda")
    t0 = time.perf_counter()
    last_val, step, early_stopped = math.nan, start, False
    last_saved = start  # the step of the newest last/ (train.checkpoint_interval counts from it)
    bar = tqdm(
        total=max_steps,
        initial=start,
        unit="step",
        dynamic_ncols=True,
        disable=not progress,
        smoothing=0.1,
    )
    say = bar.write if world.is_main else _quiet  # [dist] rank 0 alone prints
    interval_t, interval_steps = time.perf_counter(), 0
    # run_folder: created now, removed again if the run fails before its first checkpoint; rank 0
    # alone creates, clears and writes it [dist]
    folder = run_folder(run_dir) if world.is_main else contextlib.nullcontext()
    with folder, _StopOnInterrupt(distributed=world.size > 1) as stop:
        if overwrite and world.is_main:
            clear_run(run_dir)
        metrics = _Metrics(run_dir / "metrics.jsonl") if world.is_main else _NoMetrics()  # [dist]
        metrics.write(
            event="start",
            step=start,
            max_steps=max_steps,
            config=cfg.to_dict(),
            device=runtime.describe(),
            n_params=model.num_params(),
            time=time.time(),
            process_start=process_start_time(),
            world_size=world.size,
        )
        try:
            for step in range(start, max_steps):
                if step % t.eval_interval == 0 and not (resume is not None and step == start):
                    t_eval = time.perf_counter()
                    try:
                        last_val = evaluate(step)
                    except EvalInterrupted:
                        break  # `step` steps are done: saved below
                    startup.setdefault("first_eval_s", time.perf_counter() - t_eval)
                    if stops_early():
                        early_stopped = True  # this step was just evaluated and saved
                        break
                    interval_t, interval_steps = time.perf_counter(), 0  # don't count eval time
                lr = get_lr(step, t, max_steps)
                model.train()
                batches = [
                    runtime.to_device(x, y)
                    for x, y in regrouped_batches(
                        corpus,
                        configured.batch_size,
                        configured.grad_accum,
                        T,
                        t.seed,
                        step,
                        t.batch_size,
                        micro_batches,  # [dist] this rank's global indices
                    )
                ]
                if step == start:
                    t_first = time.perf_counter()
                loss = train_step.step(batches, lr)
                interval_steps += 1
                if step == start + FIRST_STEPS - 1:  # compiled, warmed up and captured by now
                    loss.item()
                    startup["first_steps_s"] = time.perf_counter() - t_first
                    say(startup_line(startup))
                    metrics.write(event="startup", step=step + 1, **startup, time=time.time())
                if (step + 1) % t.log_interval == 0 or step + 1 == max_steps:
                    # [dist] the mean over ranks, and whether any rank was asked to stop
                    loss_sum, stops = world.sum([loss, float(stop.pending)])  # syncs the device
                    loss_value, stop.requested = loss_sum / world.size, stop.requested or stops > 0
                    now = time.perf_counter()
                    tok_s = interval_steps * tokens_per_step / (now - interval_t)
                    interval_t, interval_steps = now, 0
                    mfu = (
                        flops_per_token * tok_s / (runtime.peak.flops * world.size)  # [dist]
                        if runtime.peak
                        else None
                    )
                    metrics.write(
                        event="train",
                        step=step + 1,
                        loss=loss_value,
                        lr=lr,
                        tokens_per_s=tok_s,
                        mfu=mfu,
                        time=time.time(),
                    )
                    post = {"loss": f"{loss_value:.4f}", "tok/s": f"{tok_s:,.0f}"}
                    if mfu is not None:
                        post["mfu"] = f"{100 * mfu:.1f}%"
                    bar.set_postfix(post, refresh=False)
                bar.update(1)
                if stop_at is not None and step + 1 >= stop_at:
                    stop.requested = True
                if stop.requested:
                    step += 1
                    break
            else:
                step = max_steps
            if early_stopped:
                say(
                    f"early stop at step {step}: {evals_without_gain} evaluations without "
                    f"a better val loss (train.early_stop_evals); best/ holds step "
                    f"{checkpoint_step(run_dir / 'best')}"
                )
            elif stop.requested and step == start:
                raise KeyboardInterrupt  # stopped before its first step: nothing new to save
            elif stop.requested and step < max_steps:
                say(
                    f"stopped: saving {run_dir / 'last'} at step {step} "
                    f"(continue with --resume {run_dir})"
                )
                save_last(step, checkpoint_meta(mcfg, cfg, corpus, step))
            else:
                try:
                    last_val = evaluate(step, final=True)
                except EvalInterrupted:  # the schedule is done: keep its weights, unevaluated
                    save_last(step, checkpoint_meta(mcfg, cfg, corpus, step))
        finally:
            try:
                writer.close()  # every checkpoint is on disk before the run ends
            finally:
                bar.close()
                metrics.write(
                    event="end",
                    step=step,
                    best_val_loss=best_val,
                    time=time.time(),
                    interrupted=stop.requested,
                    early_stopped=early_stopped,
                    peak_memory_bytes=peak_memory_bytes(runtime.device),
                )
                metrics.close()
    wall = time.perf_counter() - t0
    world.barrier()  # [dist] rank 0 has written its last checkpoint
    return TrainResult(
        run_dir, step, max_steps, best_val, last_val, best_bpc, wall, stop.requested, early_stopped
    )


def peak_memory_bytes(device: torch.device) -> int | None:
    """The most GPU memory this process's tensors held at once (what decides the micro-batch
    that fits: torch.cuda.max_memory_allocated); None on a CPU."""
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None


def _quiet(message: str) -> None:
    """The log of ranks other than 0."""


def checkpoint_meta(
    mcfg: GPTConfig,
    cfg: RunConfig,
    corpus: Corpus,
    step: int,
    *,
    val_loss: float | None = None,
    val_bpc: float | None = None,
) -> dict[str, Any]:
    """What config.json records besides format/version (docs/ARCHITECTURE.md, checkpoints)."""
    tok = corpus.tokenizer
    return {
        "model": mcfg.to_dict(),
        "run": cfg.to_dict(),
        "step": step,
        "val_loss": val_loss,
        "val_bpc": val_bpc,
        "tokenizer": {
            "kind": tok.kind,
            "vocab_size": tok.vocab_size,
            "fingerprint": tok.fingerprint(),
        },
        "data": {
            "name": corpus.name,
            "sha256": corpus.sha256,
            "val_chars_per_token": corpus.val_chars_per_token,
        },
    }
