"""Run configuration: presets (TOML shipped in this package), config files and --set overrides.

A run is described by one `RunConfig` of four sections (model, tokenizer, data, train). A preset
or `--config FILE` gives the values; `--set section.key=value` overrides one, parsed against the
dataclass field's type. An unknown key or a bad value is reported with the valid choices.

The model section is not written here: it is `gptstack.model.GPTConfig` without `vocab_size`
(which the tokenizer decides), derived field by field, and validated by building a GPTConfig. A
new GPTConfig field, or a newly registered attention backend, is settable with `--set` as is.
"""

from __future__ import annotations

import dataclasses
import tomllib
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from gptstack.model.config import GPTConfig, parse_ops
from gptstack.model.errors import ModelConfigError

from .errors import ConfigError

# GPTConfig's required sizes, when a config file leaves one out: nanoGPT's shakespeare-char shape
# (6 layers, 6 heads, 384 wide, context 256).
MODEL_SIZE_DEFAULTS = {"n_layer": 6, "n_head": 6, "n_embd": 384, "block_size": 256}


def _model_section_type() -> type:
    """A dataclass with GPTConfig's fields, types and defaults, minus vocab_size."""
    hints = typing.get_type_hints(GPTConfig)
    fields = []
    for f in dataclasses.fields(GPTConfig):
        if f.name == "vocab_size":
            continue
        default = MODEL_SIZE_DEFAULTS.get(f.name, f.default)
        fields.append((f.name, hints[f.name], field(default=default)))
    section = dataclasses.make_dataclass("ModelSection", fields)
    section.__module__ = __name__
    return section


ModelSection = _model_section_type()


def gpt_config(model: Any, vocab_size: int) -> GPTConfig:
    """The GPTConfig of a model section for a vocabulary of vocab_size ids."""
    return GPTConfig(vocab_size=vocab_size, **dataclasses.asdict(model))


@dataclass
class TokenizerSection:
    kind: str = "char"  # char | bpe | gpt2
    vocab_size: int = 512  # bpe only: 256 bytes + merges (+ specials)
    pattern: str = "gpt2"  # bpe only: gpt2 | gpt4 pre-tokenization regex
    # Round the model's vocabulary up to a multiple of this (GPT-2: 50257 -> 50304, "padded up
    # to nearest multiple of 64 for efficiency", nanoGPT model.py); padded ids are never sampled.
    pad_vocab_to: int = 1


@dataclass
class DataSection:
    dataset: str = "tinyshakespeare"  # a named dataset (gptstack.tools.datasets)
    path: str = ""  # a text file, or a folder of .bin token shards, instead of the named dataset
    val_fraction: float = 0.1  # the last 10% of the text is the validation split


@dataclass
class TrainSection:
    batch_size: int = 64  # sequences per micro-batch
    grad_accum: int = 1  # micro-batches per optimizer step
    # On a GPU, the micro-batch to use where its memory holds it (0: batch_size): the tokens per
    # step stay batch_size * grad_accum (grad_accum shrinks by the same factor), halved down to
    # batch_size while the step's estimated memory does not fit (schedule.cuda_micro_batch).
    # Larger micro-batches keep the GPU busier: gpt2-124m sets 128 (benchmarks/JOURNAL.md).
    cuda_batch_size: int = 0
    max_steps: int = 5000
    # The CPU schedule: what changes when training on a CPU, where a preset's GPU schedule would
    # take hours (schedule.py, for_device). 0: the value above.
    cpu_max_steps: int = 0
    cpu_batch_size: int = 0
    cpu_eval_interval: int = 0
    cpu_eval_batches: int = 0
    # model.dropout on a CPU (-1: model.dropout): the short CPU schedule underfits, where
    # dropout costs quality and its random mask costs time (14 % of an esp32 step on 2 cores)
    cpu_dropout: float = -1.0
    cpu_distill: bool = True  # false: on a CPU, train without train.distill_from's teacher
    # model.ops and model.attention on a CPU that trains in bf16 ("": the model section's; ops
    # takes model.ops' values, "gptstack:loss" included).
    # There PyTorch's SDPA is slow in bf16 (its backward above all): the esp32 preset sets
    # "gptstack" ops and "manual" attention (benchmarks/SWEEPS.md, esp32-cpu-kernels). "gptstack"
    # applies only where gptstack.cuda_ops runs its AVX2 path (train.run_model_config).
    cpu_bf16_ops: str = ""
    cpu_bf16_attention: str = ""
    # model.ops on a CUDA GPU ("": model.ops; the same values), applied only where
    # gptstack.cuda_ops has CUDA kernels for that GPU (else model.ops, and the run says so):
    # gpt2-124m sets "gptstack:loss,mlp" (its chunked loss and its MLP with the GELU in cuBLASLt's
    # epilogues each won end to end on the H100, README).
    cuda_ops: str = ""
    # on a CPU, raise glibc malloc's thresholds so the memory a step frees is reused by the next
    # instead of going back to the kernel and faulting in again (cpu_memory.py)
    cpu_keep_freed_memory: bool = True
    lr: float = 1e-3
    min_lr: float = 1e-4  # the decay's floor (nanoGPT: lr/10, per Chinchilla)
    # how lr falls from its peak after the warmup to min_lr at max_steps: cosine (nanoGPT) |
    # linear
    lr_decay: str = "cosine"
    warmup_steps: int = 100
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0  # clip the global grad norm; 0 disables
    eval_interval: int = 250  # steps between val-loss evaluations (and best/ when val improves)
    # steps between last/ checkpoints (weights, optimizer, RNG: what --resume needs), written
    # at the first evaluation this many steps after the previous one; 0: at every evaluation.
    # last/ is also written when the schedule ends, on a stop and on an early stop
    checkpoint_interval: int = 0
    eval_batches: int = 200  # batches averaged per evaluation (nanoGPT's eval_iters)
    log_interval: int = 10  # steps between metrics.jsonl lines
    # stop after this many evaluations in a row without a better val loss (0: never); best/
    # keeps the best step either way
    early_stop_evals: int = 0
    # evaluate and save an exponential moving average of the weights, with this decay (0: the
    # weights themselves). best/ then holds the average; last/ the weights, the average in its
    # train_state.pt (weight_average.py in the model package)
    ema_decay: float = 0.0
    # knowledge distillation (gptstack.model.distillation): a trained checkpoint or run directory
    # whose model (same tokenizer, context >= model.block_size) the student also learns from, or
    # "preset:NAME" to train that preset first into RUN/teacher (teacher.py); distill_weight of
    # the loss is the cross-entropy against the teacher's distribution softened by
    # distill_temperature, the rest the usual next-token loss. "": no teacher
    distill_from: str = ""
    distill_weight: float = 0.5
    distill_temperature: float = 1.0
    # while a "preset:NAME" teacher trains on CUDA with torch.compile, a second process compiles
    # the student's step into the compile cache (compile_ahead.py): its start-up then finds it
    compile_ahead: bool = True
    seed: int = 1337
    device: str = "auto"  # auto (cuda if available) | cuda | cpu
    # auto (bf16 autocast on CUDA and on CPUs with native bf16, else fp32: runtime.py) | bf16
    # | fp32
    dtype: str = "auto"
    # torch.compile: auto (on CUDA full from 20,000 steps, else regional; off on a CPU:
    # runtime.auto_compile) | regional (each block and the head,
    # compiled once for all layers: short start-up) | full (the whole model) | false
    # ("true" is read as full, the spelling of earlier configs)
    compile: str = "auto"
    # auto (on CUDA) | true | false: capture forward + backward + clip + AdamW as one CUDA graph
    # and replay it each step (6.8x faster steps for esp32 on an H200; train_step.py)
    cuda_graph: str = "auto"
    # With more than one process (torchrun): ddp (a full replica per GPU, gradients all-reduced)
    # | fsdp (FSDP2: parameters, gradients and optimizer state sharded; for gpt2-124m and larger)
    parallel: str = "ddp"
    # Seconds a collective may wait for the other ranks before the process group gives up (a
    # dead or hung rank then ends the run instead of hanging it); must exceed the longest pause
    # of one rank alone, e.g. rank 0 writing a checkpoint. NCCL's default is also 10 minutes.
    dist_timeout_s: float = 600.0


@dataclass
class RunConfig:
    name: str = "custom"
    description: str = ""
    model: ModelSection = field(default_factory=ModelSection)
    tokenizer: TokenizerSection = field(default_factory=TokenizerSection)
    data: DataSection = field(default_factory=DataSection)
    train: TrainSection = field(default_factory=TrainSection)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, source: str = "config") -> RunConfig:
        cfg = cls()
        for key, value in d.items():
            if key in ("name", "description"):
                setattr(cfg, key, str(value))
            elif key in SECTIONS:
                if not isinstance(value, dict):
                    raise ConfigError(f"{source}: [{key}] must be a table, got {value!r}")
                for k, v in value.items():
                    _set_field(cfg, key, k, v, source=source)
            else:
                raise ConfigError(
                    f"{source}: unknown section {key!r}; valid: {', '.join(SECTIONS)}"
                )
        validate(cfg, source=source)
        return cfg


SECTIONS = ("model", "tokenizer", "data", "train")
CHOICES = {
    ("tokenizer", "kind"): ("char", "bpe", "gpt2"),
    ("tokenizer", "pattern"): ("gpt2", "gpt4"),
    ("train", "device"): ("auto", "cuda", "cpu"),
    ("train", "dtype"): ("auto", "bf16", "fp32"),
    ("train", "compile"): ("auto", "regional", "full", "true", "false"),
    ("train", "cuda_graph"): ("auto", "true", "false"),
    ("train", "parallel"): ("ddp", "fsdp"),
    ("train", "lr_decay"): ("cosine", "linear"),
    ("train", "cpu_bf16_attention"): ("", "sdpa", "manual", "gptstack"),
}


def _field_type(section_obj: Any, key: str) -> type:
    return typing.get_type_hints(type(section_obj))[key]


def _coerce(value: Any, t: type, where: str) -> Any:
    if isinstance(value, str) and t is not str:
        text = value.strip()
        try:
            if t is bool:
                if text.lower() in ("true", "1", "yes", "on"):
                    return True
                if text.lower() in ("false", "0", "no", "off"):
                    return False
                raise ValueError
            return t(float(text)) if t is int and "e" in text.lower() else t(text)
        except ValueError:
            raise ConfigError(f"{where}: {value!r} is not a valid {t.__name__}") from None
    if t is bool and not isinstance(value, bool):
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    if t is int and (isinstance(value, bool) or not isinstance(value, int)):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if t is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if t is str:
        return str(value).lower() if isinstance(value, bool) else str(value)
    if not isinstance(value, t):
        raise ConfigError(f"{where}: expected {t.__name__}, got {value!r}")
    return value


def _set_field(cfg: RunConfig, section: str, key: str, value: Any, *, source: str) -> None:
    obj = getattr(cfg, section)
    names = [f.name for f in dataclasses.fields(obj)]
    if key not in names:
        raise ConfigError(
            f"{source}: unknown key {section}.{key}; valid keys of [{section}]: {', '.join(names)}"
        )
    where = f"{source}: {section}.{key}"
    v = _coerce(value, _field_type(obj, key), where)
    choices = CHOICES.get((section, key))
    if choices and v not in choices:
        raise ConfigError(f"{where} = {v!r}; choose one of {', '.join(choices)}")
    setattr(obj, key, v)


def apply_overrides(cfg: RunConfig, overrides: list[str]) -> RunConfig:
    """Apply `section.key=value` strings (from --set) in order, then re-validate."""
    for item in overrides:
        if "=" not in item or "." not in item.split("=", 1)[0]:
            raise ConfigError(
                f"--set {item!r}: write section.key=value, e.g. train.lr=3e-4 "
                f"(sections: {', '.join(SECTIONS)})"
            )
        dotted, value = item.split("=", 1)
        section, key = dotted.strip().split(".", 1)
        if section not in SECTIONS:
            raise ConfigError(
                f"--set {item!r}: unknown section {section!r}; valid: {', '.join(SECTIONS)}"
            )
        _set_field(cfg, section, key, value, source="--set")
    validate(cfg, source="--set")
    return cfg


def validate(cfg: RunConfig, *, source: str) -> None:
    """Cross-field rules that a single field's type cannot express."""
    m, t, tok = cfg.model, cfg.train, cfg.tokenizer
    try:
        # GPTConfig checks every model field; the vocab comes later (a stand-in that passes
        # every check on it: model.fp8 needs a multiple of 16)
        gpt_config(m, vocab_size=64)
    except ModelConfigError as e:
        raise ConfigError(f"{source}: {str(e).replace('GPTConfig.', 'model.')}") from None
    for key in ("cpu_bf16_ops", "cuda_ops"):
        if getattr(t, key):
            try:
                parse_ops(getattr(t, key))
            except ModelConfigError as e:
                message = str(e).replace("GPTConfig.ops", f"train.{key}")
                raise ConfigError(f"{source}: {message} ('' for model.ops)") from None
    rules = [
        (m.block_size >= 2, f"model.block_size must be at least 2, got {m.block_size}"),
        (
            tok.kind != "bpe" or 256 < tok.vocab_size <= 65536,
            f"tokenizer.vocab_size must be in (256, 65536] for bpe, got {tok.vocab_size}",
        ),
        (tok.pad_vocab_to >= 1, "tokenizer.pad_vocab_to must be >= 1"),
        (0.0 < cfg.data.val_fraction < 1.0, "data.val_fraction must be in (0, 1)"),
        (
            t.batch_size >= 1 and t.grad_accum >= 1,
            "train.batch_size and train.grad_accum must be >= 1",
        ),
        (t.max_steps >= 1, f"train.max_steps must be >= 1, got {t.max_steps}"),
        (
            t.cuda_batch_size >= 0
            and (t.cuda_batch_size == 0 or (t.batch_size * t.grad_accum) % t.cuda_batch_size == 0),
            f"train.cuda_batch_size must be 0 or divide the step's batch_size * grad_accum = "
            f"{t.batch_size * t.grad_accum} sequences, got {t.cuda_batch_size}",
        ),
        (
            min(t.cpu_max_steps, t.cpu_batch_size, t.cpu_eval_interval, t.cpu_eval_batches) >= 0,
            "train.cpu_max_steps, cpu_batch_size, cpu_eval_interval and cpu_eval_batches must "
            "be >= 0",
        ),
        (
            t.cpu_dropout == -1.0 or 0.0 <= t.cpu_dropout < 1.0,
            f"train.cpu_dropout must be in [0, 1) or -1 (model.dropout), got {t.cpu_dropout}",
        ),
        (t.lr > 0 and 0 <= t.min_lr <= t.lr, "need 0 <= train.min_lr <= train.lr and lr > 0"),
        (t.warmup_steps >= 0, "train.warmup_steps must be >= 0"),
        (t.early_stop_evals >= 0, f"train.early_stop_evals must be >= 0, got {t.early_stop_evals}"),
        (
            t.checkpoint_interval >= 0,
            f"train.checkpoint_interval must be >= 0 (0: at every evaluation), got "
            f"{t.checkpoint_interval}",
        ),
        (
            t.eval_interval >= 1 and t.eval_batches >= 1 and t.log_interval >= 1,
            "train.eval_interval, eval_batches and log_interval must be >= 1",
        ),
        (0.0 <= t.ema_decay < 1.0, f"train.ema_decay must be in [0, 1), got {t.ema_decay}"),
        (
            t.ema_decay == 0 or t.parallel != "fsdp",
            "train.ema_decay is not supported with train.parallel=fsdp (the average would have "
            "to be sharded like the parameters): use train.parallel=ddp or train.ema_decay=0",
        ),
        (t.dist_timeout_s > 0, f"train.dist_timeout_s must be > 0, got {t.dist_timeout_s}"),
        (
            0.0 <= t.distill_weight <= 1.0,
            f"train.distill_weight must be in [0, 1], got {t.distill_weight}",
        ),
        (
            t.distill_temperature > 0,
            f"train.distill_temperature must be > 0, got {t.distill_temperature}",
        ),
    ]
    for ok, message in rules:
        if not ok:
            raise ConfigError(f"{source}: {message}")


def preset_names() -> list[str]:
    files = resources.files("gptstack.tools").joinpath("presets").iterdir()
    return sorted(p.name.removesuffix(".toml") for p in files if p.name.endswith(".toml"))


def load_preset(name: str) -> RunConfig:
    path = resources.files("gptstack.tools").joinpath("presets", f"{name}.toml")
    if not path.is_file():
        raise ConfigError(f"unknown preset {name!r}; available: {', '.join(preset_names())}")
    return RunConfig.from_dict(
        tomllib.loads(path.read_text(encoding="utf-8")), source=f"preset {name}"
    )


def load_config_file(path: Path) -> RunConfig:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {path} is not valid TOML: {e}") from None
    return RunConfig.from_dict(data, source=str(path))
