"""The layout of a `.gsm` artifact: model spec, header and tensor-table records, and where every
section and tensor goes (FORMAT.md sections 2 and 4). Shared by the writer and the reader in
`artifact.py` and by the memory plan in `budget.py`.

    spec = ModelSpec(vocab_size=512, block_size=64, n_layer=6, n_head=8, n_embd=256, bias=True)
    layout = plan_layout(spec, tables)   # offsets, sizes, file_bytes
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Union

import numpy as np

from .errors import BadConfigError
from .format import (
    DTYPE_I8,
    HEADER_BYTES,
    MAX_NDIM,
    NAME_BYTES,
    TENSOR_ENTRY_BYTES,
    align,
    dtype_bytes,
    required_tensors,
)
from .tables import TokenizerTables, tokenizer_section_bytes

__all__ = ["Header", "Layout", "ModelSpec", "TensorData", "TensorEntry", "plan_layout"]

# magic; version, header_bytes, file_bytes, vocab_size, block_size, n_layer, n_head, n_embd,
# flags; layernorm_eps; arena_bytes, tokenizer_offset, tokenizer_bytes, tensor_table_offset,
# n_tensors, payload_offset, payload_bytes, bos_token; reserved
HEADER_STRUCT = struct.Struct("<4s9If8I52s")
# name, dtype, ndim, shape[4], offset, nbytes, scale_offset, reserved[3]
ENTRY_STRUCT = struct.Struct(f"<{NAME_BYTES}sII{MAX_NDIM}IIII3I")
U32_MAX = 0xFFFFFFFF
assert HEADER_STRUCT.size == HEADER_BYTES and ENTRY_STRUCT.size == TENSOR_ENTRY_BYTES

TensorData = Union[tuple[np.ndarray, np.ndarray], np.ndarray]


def config_problem(
    V: int, T: int, L: int, nh: int, C: int, eps: float, bos: int | None
) -> str | None:
    """The first config rule of FORMAT.md section 2 that these values break, or None."""
    for name, value in (
        ("vocab_size", V),
        ("block_size", T),
        ("n_layer", L),
        ("n_head", nh),
        ("n_embd", C),
    ):
        if not 1 <= value <= U32_MAX:
            return f"{name} is {value}, expected 1 .. {U32_MAX}"
    if T < 2 or T % 2:
        return f"block_size is {T}, expected an even number >= 2 (the window slides by T/2)"
    if C % 4:
        return f"n_embd is {C}, expected a multiple of 4"
    if C % nh:
        return f"n_head {nh} does not divide n_embd {C}"
    if not (math.isfinite(eps) and eps > 0):
        return f"layernorm_eps is {eps}, expected a finite number > 0"
    if bos is not None and not 0 <= bos < V:
        return f"bos_token is {bos}, expected a token id < vocab_size {V} or none"
    return None


@dataclass(frozen=True)
class ModelSpec:
    """The model config the artifact header carries (FORMAT.md section 2).

    bias: linear layers and LayerNorms carry biases (nanoGPT's `bias`); layernorm_eps is stored as
    float32 and normalized to that value here; bos_token: the id fed when the prompt is empty, or
    None. Raises BadConfigError when a section 2 rule is broken.
    """

    vocab_size: int
    block_size: int
    n_layer: int
    n_head: int
    n_embd: int
    bias: bool
    layernorm_eps: float = 1e-5  # PyTorch nn.LayerNorm's default
    bos_token: int | None = None

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            object.__setattr__(self, name, int(getattr(self, name)))
        object.__setattr__(self, "bias", bool(self.bias))
        object.__setattr__(self, "layernorm_eps", float(np.float32(self.layernorm_eps)))
        if self.bos_token is not None:
            object.__setattr__(self, "bos_token", int(self.bos_token))
        problem = config_problem(
            self.vocab_size,
            self.block_size,
            self.n_layer,
            self.n_head,
            self.n_embd,
            self.layernorm_eps,
            self.bos_token,
        )
        if problem:
            raise BadConfigError(f"model config: {problem}")

    @property
    def head_size(self) -> int:
        """hs = C / nh."""
        return self.n_embd // self.n_head


@dataclass(frozen=True)
class Header:
    """Every field of the 128-byte header, as read (FORMAT.md section 2)."""

    version: int
    header_bytes: int
    file_bytes: int
    vocab_size: int
    block_size: int
    n_layer: int
    n_head: int
    n_embd: int
    flags: int
    layernorm_eps: float
    arena_bytes: int
    tokenizer_offset: int
    tokenizer_bytes: int
    tensor_table_offset: int
    n_tensors: int
    payload_offset: int
    payload_bytes: int
    bos_token: int


@dataclass(frozen=True)
class TensorEntry:
    """One tensor-table entry (FORMAT.md section 4); scale_offset is 0 for f32 tensors."""

    name: str
    dtype: int
    shape: tuple[int, ...]
    offset: int
    nbytes: int
    scale_offset: int


@dataclass(frozen=True)
class Layout:
    """Where everything goes in the file for one (spec, tables): the writer's plan."""

    tokenizer_bytes: int
    tensor_table_offset: int
    payload_offset: int
    payload_bytes: int
    file_bytes: int
    entries: list[TensorEntry]


def plan_layout(spec: ModelSpec, tables: TokenizerTables) -> Layout:
    """Offsets and sizes of every section and tensor (FORMAT.md sections 2 and 4)."""
    tok_bytes = tokenizer_section_bytes(tables)
    required = required_tensors(spec)
    table_offset = align(HEADER_BYTES + tok_bytes)
    payload_offset = align(table_offset + TENSOR_ENTRY_BYTES * len(required))
    cursor = payload_offset
    entries = []
    for name, dtype, shape in required:
        nbytes = math.prod(shape) * dtype_bytes[dtype]
        offset, cursor = cursor, align(cursor + nbytes)
        scale_offset = 0
        if dtype == DTYPE_I8:
            scale_offset, cursor = cursor, align(cursor + 4 * shape[0])
        entries.append(TensorEntry(name, dtype, shape, offset, nbytes, scale_offset))
    return Layout(
        tok_bytes, table_offset, payload_offset, cursor - payload_offset, cursor + 4, entries
    )
