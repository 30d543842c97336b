"""Corrupted artifacts, one or more per validation step of FORMAT.md section 6: test material for
the Python reader and the C loader, which must reject each one with the same error kind.

    for case in corrupted_artifacts(synthetic_artifact(spec, tables)):
        case.name, case.step, case.error (Python class), case.status ("GS_ERR_CRC"), case.data

From step 8 on, each case carries a recomputed CRC, so step 7 passes and the intended check is
the first to fail. Needs a valid artifact with at least two tensors and one pair (any BPE table).
Tests that make corruptions of their own use the same pieces: `HEADER_FIELDS` (byte offset of
each header field) and `fix_crc`.
"""

from __future__ import annotations

import math
import struct
import zlib
from dataclasses import dataclass, fields
from typing import Callable

from .artifact import read_artifact
from .errors import (
    ArtifactError,
    BadConfigError,
    BadCrcError,
    BadHeaderError,
    BadMagicError,
    BadOffsetError,
    BadTensorError,
    BadTokenizerError,
    TruncatedArtifactError,
    UnsupportedVersionError,
)
from .format import DTYPE_F32, TENSOR_ENTRY_BYTES
from .layout import Header

# Byte offset of each header field (FORMAT.md section 2): the 4-byte magic, then Header's fields
# in file order, 4 bytes each (u32 or f32, as HEADER_STRUCT packs them), then the reserved bytes.
HEADER_FIELDS = {
    "magic": 0,
    **{f.name: 4 + 4 * i for i, f in enumerate(fields(Header))},
    "reserved": 4 + 4 * len(fields(Header)),
}


@dataclass(frozen=True)
class Corruption:
    """One corrupted file: what was done, the step that must catch it and the error kind."""

    name: str
    step: int
    error: type[ArtifactError]
    data: bytes

    @property
    def status(self) -> str:
        """The C engine's status for this case (FORMAT.md section 6)."""
        assert self.error.status is not None
        return self.error.status


def fix_crc(buf: bytearray) -> bytes:
    """buf with its last four bytes set to the CRC-32 of the rest (FORMAT.md section 5), so an
    edit after step 7 reaches the check it is aimed at."""
    struct.pack_into("<I", buf, len(buf) - 4, zlib.crc32(buf[:-4]))
    return bytes(buf)


def corrupted_artifacts(data: bytes) -> list[Corruption]:
    """Corruptions of a valid artifact, in step order (see the module docstring)."""
    art = read_artifact(data)
    h, tables = art.header, art.tables
    cases: list[Corruption] = []

    def u32(at: int) -> int:
        return struct.unpack_from("<I", data, at)[0]

    def add(
        name: str, step: int, error: type[ArtifactError], edit: Callable[[bytearray], object]
    ) -> None:
        buf = bytearray(data)
        out = edit(buf)
        blob = bytes(out) if isinstance(out, (bytes, bytearray)) else bytes(buf)
        if step >= 8:
            blob = fix_crc(bytearray(blob))
        cases.append(Corruption(name, step, error, blob))

    def put(field_at: int, value: int | float, fmt: str = "<I") -> Callable[[bytearray], None]:
        return lambda buf: struct.pack_into(fmt, buf, field_at, value)

    f = HEADER_FIELDS
    # 1: shorter than the header
    for keep in (0, 64, 127):
        add(f"truncated to {keep} bytes", 1, TruncatedArtifactError, lambda b, k=keep: b[:k])
    # 2-4: header fields
    add("magic GGUF", 2, BadMagicError, lambda b: b.__setitem__(slice(0, 4), b"GGUF"))
    add("version 2", 3, UnsupportedVersionError, put(f["version"], 2))
    add("header_bytes 64", 4, BadHeaderError, put(f["header_bytes"], 64))
    add("reserved header byte set", 4, BadHeaderError, lambda b: b.__setitem__(100, 1))
    add("unknown flag bit 1", 4, BadHeaderError, put(f["flags"], u32(f["flags"]) | 2))
    # 5-6: file size
    for keep in (128, h.file_bytes // 2, h.file_bytes - 1):
        add(f"truncated to {keep} bytes", 5, TruncatedArtifactError, lambda b, k=keep: b[:k])
    add("16 trailing bytes", 6, BadHeaderError, lambda b: b + bytes(16))
    # 7: CRC
    for name, at in (
        ("tokenizer", h.tokenizer_offset + 40),
        ("payload", h.payload_offset + 3),
        ("stored CRC", h.file_bytes - 1),
    ):
        add(
            f"bit flipped in the {name}",
            7,
            BadCrcError,
            lambda b, a=at: b.__setitem__(a, b[a] ^ 0x10),
        )
    # 8: config
    add("vocab_size 0", 8, BadConfigError, put(f["vocab_size"], 0))
    add("odd block_size", 8, BadConfigError, put(f["block_size"], h.block_size + 1))
    add("n_embd not a multiple of 4", 8, BadConfigError, put(f["n_embd"], h.n_embd + 2))
    add(
        "n_head not dividing n_embd",
        8,
        BadConfigError,
        put(f["n_head"], next(n for n in range(2, h.n_embd + 2) if h.n_embd % n)),
    )
    add("layernorm_eps 0", 8, BadConfigError, put(f["layernorm_eps"], 0.0, "<f"))
    add("layernorm_eps NaN", 8, BadConfigError, put(f["layernorm_eps"], math.nan, "<f"))
    add("bos_token = vocab_size", 8, BadConfigError, put(f["bos_token"], h.vocab_size))
    # 9: section offsets
    add("tokenizer_offset 144", 9, BadOffsetError, put(f["tokenizer_offset"], 144))
    add(
        "tensor_table_offset + 16",
        9,
        BadOffsetError,
        put(f["tensor_table_offset"], h.tensor_table_offset + 16),
    )
    add("payload_offset + 16", 9, BadOffsetError, put(f["payload_offset"], h.payload_offset + 16))
    add("payload_bytes - 16", 9, BadOffsetError, put(f["payload_bytes"], h.payload_bytes - 16))
    # 10: tokenizer section (offsets inside it, FORMAT.md section 3)
    t0 = h.tokenizer_offset
    blob_bytes = sum(len(t) for t in tables.token_bytes)
    b2t = t0 + 32 + 4 * (tables.n_tokens + 1) + blob_bytes
    b2t += (-(b2t - t0)) % 4
    sorted_at = b2t + 4 * 256
    pairs_at = sorted_at + 4 * len(tables.sorted_ids)

    def swap(a: int, b: int, size: int) -> Callable[[bytearray], None]:
        def edit(buf: bytearray) -> None:
            buf[a : a + size], buf[b : b + size] = buf[b : b + size], buf[a : a + size]

        return edit

    add("tokenizer kind 7", 10, BadTokenizerError, put(t0, 7))
    add("tokenizer reserved word set", 10, BadTokenizerError, put(t0 + 24, 1))
    add("n_tokens > vocab_size", 10, BadTokenizerError, put(t0 + 8, h.vocab_size + 1))
    add("token_offsets[0] = 1", 10, BadTokenizerError, put(t0 + 32, 1))
    add("sorted_ids out of order", 10, BadTokenizerError, swap(sorted_at, sorted_at + 4, 4))
    if tables.kind == "bpe":
        add(
            "byte_to_token[0] = byte_to_token[1]",
            10,
            BadTokenizerError,
            put(b2t, tables.byte_to_token[1]),
        )
    if len(tables.pairs) >= 2:
        add("pairs out of order", 10, BadTokenizerError, swap(pairs_at, pairs_at + 12, 12))
    if tables.n_tokens < h.vocab_size:
        add("bos_token a padding id", 10, BadTokenizerError, put(f["bos_token"], tables.n_tokens))
    # 11: tensor table
    entry = [h.tensor_table_offset + i * TENSOR_ENTRY_BYTES for i in range(h.n_tensors)]
    add(
        "first tensor renamed",
        11,
        BadTensorError,
        lambda b: b.__setitem__(slice(entry[0], entry[0] + 3), b"WTE"),
    )
    add(
        "name without NUL padding",
        11,
        BadTensorError,
        lambda b: b.__setitem__(slice(entry[0], entry[0] + 48), b"x" * 48),
    )
    add("wte dtype f32", 11, BadTensorError, put(entry[0] + 48, DTYPE_F32))
    add("wte rows + 1", 11, BadTensorError, put(entry[0] + 56, h.vocab_size + 1))
    add("wte nbytes + 1", 11, BadTensorError, put(entry[0] + 76, art.entries[0].nbytes + 1))
    add("entry reserved word set", 11, BadTensorError, put(entry[1] + 84, 1))

    def one_more_tensor(buf: bytearray) -> None:  # offsets moved so step 9 still passes
        struct.pack_into("<I", buf, f["n_tensors"], h.n_tensors + 1)
        struct.pack_into("<I", buf, f["payload_offset"], h.payload_offset + TENSOR_ENTRY_BYTES)
        struct.pack_into("<I", buf, f["payload_bytes"], h.payload_bytes - TENSOR_ENTRY_BYTES)

    add("n_tensors + 1", 11, BadTensorError, one_more_tensor)
    # 12: tensor offsets
    end = h.payload_offset + h.payload_bytes
    f32_index = next(i for i, e in enumerate(art.entries) if e.dtype == DTYPE_F32)
    add("wte offset misaligned", 12, BadOffsetError, put(entry[0] + 72, art.entries[0].offset + 4))
    add("wpe data past the payload", 12, BadOffsetError, put(entry[1] + 72, end - 16))
    add("wpe scales past the payload", 12, BadOffsetError, put(entry[1] + 80, end))
    add(
        "f32 tensor with a scale_offset",
        12,
        BadOffsetError,
        put(entry[f32_index] + 80, art.entries[0].offset),
    )
    # 13: arena
    add("arena_bytes + 16", 13, BadHeaderError, put(f["arena_bytes"], h.arena_bytes + 16))
    return cases
