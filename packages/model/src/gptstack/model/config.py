"""GPTConfig: the hyper-parameters of a gptstack GPT.

The same fields travel in a checkpoint's `config.json` and in the `.gsm` artifact header, so they
are validated once, here, when the object is built (`__post_init__`), and serialised through
`to_dict()` / `from_dict()`.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import Any

from .errors import ModelConfigError

# Who computes LayerNorm (+ the residual add before ln_2), GELU and the LM head's loss:
# "torch" (PyTorch's own ops), "gptstack" (the kernels of gptstack.cuda_ops, an optional
# extra: pip install gptstack-model[cuda]) or "gptstack:" and some of NATIVE_OPS, comma-separated
# ("gptstack:loss": the chunked LM-head loss native, the rest PyTorch's). Same parameters, same
# function to tolerance.
OPS_CHOICES = ("torch", "gptstack")
# "layernorm": every LayerNorm and the residual add fused into ln_2; "gelu": the MLP's GELU;
# "mlp": on a GPU the whole MLP with its GELU (and the GELU's gradient) inside the matmuls'
# cuBLASLt epilogues, on a CPU the native GELU (measured: the fused op's CPU path, the same
# matmuls and kernel, made an esp32-sized bf16 step 9 % slower); "loss": ln_f's output -> LM
# head -> loss in chunks of rows, without the whole logits; "qkv": in training, the attention's
# dq, dk, dv joined into c_attn's output gradient and summed into its bias gradient in one pass
# (PyTorch: a concatenation, then a sum that reads them again).
NATIVE_OPS = ("layernorm", "gelu", "mlp", "loss", "qkv")
# Which training matmuls run in 8-bit floats (fp8.py; evaluation and sampling never do): "none",
# "head" (the tied LM head: a third of gpt2-124m's matmul FLOPs), "all" (every Linear).
FP8_CHOICES = ("none", "head", "all")
# The residual stream's dtype where training autocasts to bfloat16: "fp32" (the embeddings' and
# nanoGPT's: each block's bf16 output added into fp32) or "bf16" (llm.c's: x cast once after the
# embeddings, half the bytes in every residual add and LayerNorm read, forward and backward).
# Without autocast (float32 training, evaluation, sampling) x stays in the parameters' dtype.
RESIDUAL_CHOICES = ("fp32", "bf16")


@dataclass
class GPTConfig:
    """Shape and behaviour of a GPT. Every field is checked in `__post_init__`."""

    # Number of token ids; the LM head's output size V (GPT-2 pads 50257 up to 50304, a multiple
    # of 64, so the head's matmul tiles evenly).
    vocab_size: int
    # Longest context T the model sees: the size of the learned position table `wpe`.
    block_size: int
    # Number of transformer blocks L (depth).
    n_layer: int
    # Number of attention heads nh; each head has hs = n_embd // n_head dimensions.
    n_head: int
    # Residual stream width C (also the embedding size).
    n_embd: int
    # Dropout probability on attention weights and residual branches while training (0 = off).
    dropout: float = 0.0
    # Biases in Linear layers and LayerNorms (True is GPT-2; False is slightly faster and smaller).
    bias: bool = True
    # Attention backend by registry name: "manual", "sdpa", or one registered later ("gptstack").
    attention: str = "sdpa"
    # LayerNorm/GELU/loss implementation: one of OPS_CHOICES, or "gptstack:" and a comma-separated
    # subset of NATIVE_OPS; "torch" until a native op wins end to end (packages/cuda_ops/README.md
    # records the measurements).
    ops: str = "torch"
    # Training matmuls in FP8 (one of FP8_CHOICES; widths and vocab_size multiples of 16;
    # a GPU of compute capability 8.9+ or a CPU). "none" until it wins with the same loss curve.
    fp8: str = "none"
    # The residual stream's dtype under bf16 autocast: one of RESIDUAL_CHOICES.
    residual: str = "fp32"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ModelConfigError(
                    f"GPTConfig.{name} is {value!r}: it must be a positive integer; "
                    f"set {name} to a value >= 1"
                )
        if self.n_embd % self.n_head != 0:
            raise ModelConfigError(
                f"GPTConfig.n_embd is {self.n_embd}, not divisible by n_head={self.n_head}: "
                f"each head needs n_embd / n_head dimensions; choose n_embd a multiple of n_head"
            )
        if (
            isinstance(self.dropout, bool)
            or not isinstance(self.dropout, (int, float))
            or not (0.0 <= self.dropout < 1.0)
        ):
            raise ModelConfigError(
                f"GPTConfig.dropout is {self.dropout!r}: it must be a number in [0, 1); "
                f"use 0.0 to disable dropout"
            )
        self.dropout = float(self.dropout)
        if not isinstance(self.bias, bool):
            raise ModelConfigError(f"GPTConfig.bias is {self.bias!r}: it must be true or false")
        from .attention import attention_backends  # torch: only when a config is checked

        known = attention_backends()
        if self.attention == "gptstack" and self.attention not in known:
            native_ops()  # importing gptstack.cuda_ops registers its backend
            known = attention_backends()
        if self.attention not in known:
            raise ModelConfigError(
                f"GPTConfig.attention is {self.attention!r}, not a registered attention backend; "
                f"choose one of {sorted(known)} (a third-party backend must be registered with "
                f"gptstack.model.register_attention_backend before the config is built)"
            )

        if self.native_op_names:
            native_ops()  # fails here, with the fix, rather than at the first forward
        self._check_fp8()
        if self.residual not in RESIDUAL_CHOICES:
            raise ModelConfigError(
                f"GPTConfig.residual is {self.residual!r}; choose one of {list(RESIDUAL_CHOICES)}"
            )

    def _check_fp8(self) -> None:
        if self.fp8 not in FP8_CHOICES:
            raise ModelConfigError(
                f"GPTConfig.fp8 is {self.fp8!r}; choose one of {list(FP8_CHOICES)}"
            )
        if self.fp8 == "none":
            return
        # every Linear's sizes are n_embd times 1, 3 or 4, and the head's vocab_size
        widths = {"n_embd": self.n_embd, "vocab_size": self.vocab_size}
        odd = [f"{k}={v}" for k, v in widths.items() if v % 16]
        if odd:
            raise ModelConfigError(
                f"GPTConfig.fp8={self.fp8!r} needs matmul dimensions that are multiples of 16 "
                f"(FP8 tensor-core tiles), but {', '.join(odd)}: pad them up to a multiple of "
                f"16 (the vocabulary: gptstack train's tokenizer.pad_vocab_to=16) or set "
                f"fp8='none'"
            )
        if self.fp8 == "all" and "mlp" in self.native_op_names:
            raise ModelConfigError(
                f"GPTConfig.fp8='all' runs the MLP's matmuls in FP8, and ops={self.ops!r} "
                f"runs them with cuBLASLt's GELU epilogues: choose one (fp8='head' or 'none', "
                f"or ops without 'mlp')"
            )
        if "loss" in self.native_op_names:
            raise ModelConfigError(
                f"GPTConfig.fp8={self.fp8!r} runs the LM head in FP8, and ops={self.ops!r} "
                f"runs it inside gptstack's chunked loss: choose one (fp8='none', or ops "
                f"without 'loss')"
            )

    @property
    def native_op_names(self) -> frozenset[str]:
        """The NATIVE_OPS that `ops` gives to gptstack.cuda_ops (empty for "torch")."""
        return parse_ops(self.ops)

    @property
    def head_size(self) -> int:
        """hs = C // nh, the width of one attention head."""
        return self.n_embd // self.n_head

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain JSON-ready dict (what `config.json` stores)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GPTConfig:
        """Build a config from `to_dict()` output; unknown/missing keys raise ModelConfigError."""
        if not isinstance(d, dict):
            raise ModelConfigError(f"model config must be a dict of fields, got {type(d).__name__}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - set(fields))
        if unknown:
            raise ModelConfigError(
                f"model config has unknown key(s) {unknown}; valid keys are {list(fields)}"
            )
        required = [
            name for name, f in fields.items() if f.default is dataclasses.MISSING and name not in d
        ]
        if required:
            raise ModelConfigError(
                f"model config is missing required key(s) {required}; valid keys are {list(fields)}"
            )
        return cls(**d)


def parse_ops(ops: object) -> frozenset[str]:
    """The NATIVE_OPS an `ops` value names: "torch" none, "gptstack" all, "gptstack:a,b" a and b.
    ModelConfigError naming the valid forms for anything else."""
    forms = f"{OPS_CHOICES[0]!r}, {OPS_CHOICES[1]!r} or 'gptstack:' + some of {list(NATIVE_OPS)}"
    if not isinstance(ops, str):
        raise ModelConfigError(f"GPTConfig.ops is {ops!r}; choose {forms}")
    if ops == "torch":
        return frozenset()
    if ops == "gptstack":
        return frozenset(NATIVE_OPS)
    prefix, sep, rest = ops.partition(":")
    names = [n.strip() for n in rest.split(",")]
    unknown = [n for n in names if n not in NATIVE_OPS]
    if prefix != "gptstack" or not sep or unknown or len(set(names)) != len(names):
        why = f" ({', '.join(map(repr, unknown))} not an op)" if sep and unknown else ""
        raise ModelConfigError(
            f"GPTConfig.ops is {ops!r}{why}; choose {forms}, comma-separated, e.g. 'gptstack:loss'"
        )
    return frozenset(names)


def native_ops():
    """The gptstack.cuda_ops module (imported only when `ops` names a native op or attention is
    "gptstack"); ModelConfigError with the install command when it is missing."""
    try:
        cuda_ops = importlib.import_module("gptstack.cuda_ops")
    except ImportError as e:
        raise ModelConfigError(
            f"GPTConfig asks for gptstack's kernels (ops or attention) but gptstack.cuda_ops "
            f"cannot be imported ({e}); install it (pip install 'gptstack-model[cuda]', or uv "
            f"sync in the gptstack workspace) or set ops to 'torch' and attention to 'sdpa'"
        ) from e
    return cuda_ops


def cuda_kernels_unavailable(device=None) -> str | None:
    """Why gptstack.cuda_ops cannot run its CUDA kernels on `device` (default: the current
    GPU), or None when it can: not installed, built without nvcc, or a GPU older than the
    compute capability 8.0 its kernels are built for (sm_80 PTX, sm_90a)."""
    import torch

    try:
        ops = native_ops()
    except ModelConfigError as e:
        return str(e)
    if not ops.build_info()["cuda"]:
        return "gptstack.cuda_ops was built without CUDA kernels (no nvcc at build time)"
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) < (8, 0):
        return f"its CUDA kernels need compute capability 8.0 or newer, this GPU is {major}.{minor}"
    return None
