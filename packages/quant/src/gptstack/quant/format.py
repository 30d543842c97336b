"""The constants of the `.gsm` artifact (FORMAT.md section 1), its tensor list (section 4) and its
arena formula and slide tile (section 11), defined once for Python.

The C engine defines the same names in `firmware/esp32/lib/engine/gs_format.h`; a firmware test
compares the two through `constants()`. Only the sixteen constants of FORMAT.md section 1 are
upper-case names in this module, so a test can also collect them by `name.isupper()`.
"""

from __future__ import annotations

from typing import Protocol

MAGIC = b"GSMF"
VERSION = 1
HEADER_BYTES = 128
ALIGN = 16
TENSOR_ENTRY_BYTES = 96
NAME_BYTES = 48
DTYPE_F32 = 0
DTYPE_I8 = 1
FLAG_BIAS = 1  # bit 0 of the header's `flags`
NO_TOKEN = 0xFFFFFFFF
TOK_KIND_CHAR = 0
TOK_KIND_BPE = 1
PATTERN_NONE = 0
PATTERN_GPT2 = 1
PATTERN_GPT4 = 2
MAX_NDIM = 4

_constant_names = (
    "MAGIC",
    "VERSION",
    "HEADER_BYTES",
    "ALIGN",
    "TENSOR_ENTRY_BYTES",
    "NAME_BYTES",
    "DTYPE_F32",
    "DTYPE_I8",
    "FLAG_BIAS",
    "NO_TOKEN",
    "TOK_KIND_CHAR",
    "TOK_KIND_BPE",
    "PATTERN_NONE",
    "PATTERN_GPT2",
    "PATTERN_GPT4",
    "MAX_NDIM",
)

# bytes per element of each dtype code
dtype_bytes = {DTYPE_F32: 4, DTYPE_I8: 1}


def constants() -> dict[str, int | bytes]:
    """The sixteen constants of FORMAT.md section 1, by name (for the C header comparison)."""
    return {name: globals()[name] for name in _constant_names}


class ConfigLike(Protocol):
    """Anything with the model fields the layout depends on (`ModelSpec`, a tools config)."""

    vocab_size: int
    block_size: int
    n_layer: int
    n_embd: int
    bias: bool


def align(n: int) -> int:
    """Round n up to a multiple of ALIGN (FORMAT.md section 1)."""
    return (n + ALIGN - 1) // ALIGN * ALIGN


def required_tensors(config: ConfigLike) -> list[tuple[str, int, tuple[int, ...]]]:
    """The tensors of FORMAT.md section 4 for this config, in table order: (name, dtype, shape)."""
    V, T, L, C = config.vocab_size, config.block_size, config.n_layer, config.n_embd
    bias = bool(config.bias)
    out: list[tuple[str, int, tuple[int, ...]]] = [
        ("wte.weight", DTYPE_I8, (V, C)),
        ("wpe.weight", DTYPE_I8, (T, C)),
    ]

    def norm(prefix: str) -> None:
        out.append((f"{prefix}.weight", DTYPE_F32, (C,)))
        if bias:
            out.append((f"{prefix}.bias", DTYPE_F32, (C,)))

    def linear(prefix: str, rows: int, cols: int) -> None:
        out.append((f"{prefix}.weight", DTYPE_I8, (rows, cols)))
        if bias:
            out.append((f"{prefix}.bias", DTYPE_F32, (rows,)))

    for i in range(L):
        norm(f"h.{i}.ln_1")
        linear(f"h.{i}.attn.c_attn", 3 * C, C)
        linear(f"h.{i}.attn.c_proj", C, C)
        norm(f"h.{i}.ln_2")
        linear(f"h.{i}.mlp.c_fc", 4 * C, C)
        linear(f"h.{i}.mlp.c_proj", C, 4 * C)
    norm("ln_f")
    return out


def tensor_count(config: ConfigLike) -> int:
    """len(required_tensors(config)), computed without building the list (a reader checks a
    file's n_tensors with it before trusting n_layer)."""
    per_weight = 2 if config.bias else 1
    return 2 + config.n_layer * 6 * per_weight + per_weight


def arena_buffers(config: ConfigLike) -> list[tuple[str, int]]:
    """FORMAT.md section 11: the engine's buffers in arena order, (name, bytes) each aligned."""
    V, T, L, C = config.vocab_size, config.block_size, config.n_layer, config.n_embd
    return [
        ("x", align(4 * C)),
        ("xn", align(4 * C)),
        ("qkv", align(12 * C)),
        ("att_out", align(4 * C)),
        ("hidden", align(16 * C)),
        ("scores", align(4 * T)),
        ("logits", align(4 * V)),
        ("act_q", align(4 * C)),  # int8 input of the widest linear (mlp.c_proj reads 4C)
        ("k_cache", align(L * T * C)),
        ("v_cache", align(L * T * C)),
        ("k_scale", align(4 * L * T)),
        ("v_scale", align(4 * L * T)),
        ("window", align(4 * T)),
        ("candidates", align(4 * V)),
    ]


def arena_bytes(config: ConfigLike) -> int:
    """FORMAT.md section 11: bytes of the one arena the C engine needs for this config."""
    return sum(n for _, n in arena_buffers(config))


def slide_tile_positions(config: ConfigLike) -> int:
    """FORMAT.md section 11: positions a window slide re-encodes per tile, laid over the K/V
    rows the slide discards: min(T/2, L·T/32) (16·C bytes each in (T/2)·L·C); 0 when not one
    fits (the engine then re-encodes one position at a time in its token buffers)."""
    T, L = config.block_size, config.n_layer
    return min(T // 2, L * T // 32)
