"""The `.gsm` model artifact: writer and validating reader (FORMAT.md sections 2-6).

    spec = ModelSpec(vocab_size=512, block_size=64, n_layer=6, n_head=8, n_embd=256, bias=True)
    write_artifact("model.gsm", spec, tables, tensors)   # tensors: name -> (q, scales) | f32
    art = read_artifact("model.gsm")                      # checks in section 6's order
    art.tensor("h.0.attn.c_attn.weight"), art.scales("h.0.attn.c_attn.weight")

The reader returns zero-copy numpy views into the file's bytes; the writer can never produce a
file the reader rejects, because both check with the same rules.
"""

from __future__ import annotations

import math
import os
import struct
import zlib
from pathlib import Path
from typing import Mapping

import numpy as np

from gptstack.tokenizer import write_atomic

from .errors import (
    ArtifactError,
    BadConfigError,
    BadCrcError,
    BadHeaderError,
    BadMagicError,
    BadOffsetError,
    BadTensorError,
    BadTokenizerError,
    QuantError,
    TruncatedArtifactError,
    UnsupportedVersionError,
)
from .format import (
    DTYPE_I8,
    FLAG_BIAS,
    HEADER_BYTES,
    MAGIC,
    MAX_NDIM,
    NO_TOKEN,
    TENSOR_ENTRY_BYTES,
    VERSION,
    align,
    arena_bytes,
    dtype_bytes,
    required_tensors,
    tensor_count,
)
from .layout import (
    ENTRY_STRUCT,
    HEADER_STRUCT,
    U32_MAX,
    Header,
    ModelSpec,
    TensorData,
    TensorEntry,
    config_problem,
    plan_layout,
)
from .tables import TokenizerTables, pack_tokenizer, parse_tokenizer

__all__ = ["Artifact", "artifact_bytes", "read_artifact", "write_artifact"]


def _tensor_arrays(entry: TensorEntry, data: TensorData) -> tuple[np.ndarray, np.ndarray | None]:
    """Check one tensor given to the writer against its table entry; little-endian arrays."""
    name, shape = entry.name, entry.shape
    if entry.dtype == DTYPE_I8:
        if not (isinstance(data, tuple) and len(data) == 2):
            raise BadTensorError(
                f"tensor {name} must be int8 with per-row scales, given as (q, scales): "
                "quantize it with gptstack.quant.quantize_rows"
            )
        q, scales = np.asarray(data[0]), np.asarray(data[1])
        if q.dtype != np.int8 or q.shape != shape:
            raise BadTensorError(f"tensor {name} is {q.dtype}{q.shape}, expected int8{shape}")
        if not np.issubdtype(scales.dtype, np.floating) or scales.shape != (shape[0],):
            raise BadTensorError(
                f"scales of {name} are {scales.dtype}{scales.shape}, expected float32({shape[0]},)"
            )
        scales = scales.astype("<f4")
        if not np.all(np.isfinite(scales)) or np.any(scales < 0):
            raise BadTensorError(f"scales of {name} must be finite and >= 0")
        return q, scales
    arr = np.asarray(data) if not isinstance(data, tuple) else None
    if arr is None or not np.issubdtype(arr.dtype, np.floating) or arr.shape != shape:
        got = "a (q, scales) pair" if arr is None else f"{arr.dtype}{arr.shape}"
        raise BadTensorError(f"tensor {name} is {got}, expected float32{shape}")
    return arr.astype("<f4"), None


def artifact_bytes(
    spec: ModelSpec, tables: TokenizerTables, tensors: Mapping[str, TensorData]
) -> bytes:
    """The whole `.gsm` file for this model (FORMAT.md sections 2-5) as bytes.

    tensors: every name of FORMAT.md section 4 for this config; int8 tensors as (q int8 (R, K),
    scales float32 (R,)), the others as float32 arrays. Raises a subclass of ArtifactError when the
    inputs break the format (config, tokenizer, tensor names/shapes/dtypes, or a file over 4 GiB).
    """
    if tables.n_tokens > spec.vocab_size:
        raise BadTokenizerError(
            f"the tokenizer has {tables.n_tokens} tokens but the model only {spec.vocab_size} "
            "rows (vocab_size): the tokenizer must match the checkpoint"
        )
    if spec.bos_token is not None and spec.bos_token >= tables.n_tokens:
        raise BadTokenizerError(
            f"bos_token {spec.bos_token} is not one of the tokenizer's {tables.n_tokens} tokens"
        )
    layout = plan_layout(spec, tables)
    arena = arena_bytes(spec)
    if layout.file_bytes > U32_MAX or arena > U32_MAX:
        raise BadConfigError(
            f"this model needs a {layout.file_bytes}-byte file and a {arena}-byte arena; "
            "the format's u32 fields allow 4 GiB: shrink the model"
        )
    names = {e.name for e in layout.entries}
    missing = [e.name for e in layout.entries if e.name not in tensors]
    extra = sorted(set(tensors) - names)
    if missing or extra:
        raise BadTensorError(
            f"tensors do not match the config: missing {missing[:8]}, unexpected {extra[:8]}"
        )
    buf = bytearray(layout.file_bytes)
    struct.pack_into(
        HEADER_STRUCT.format,
        buf,
        0,
        MAGIC,
        VERSION,
        HEADER_BYTES,
        layout.file_bytes,
        spec.vocab_size,
        spec.block_size,
        spec.n_layer,
        spec.n_head,
        spec.n_embd,
        FLAG_BIAS if spec.bias else 0,
        spec.layernorm_eps,
        arena,
        HEADER_BYTES,
        layout.tokenizer_bytes,
        layout.tensor_table_offset,
        len(layout.entries),
        layout.payload_offset,
        layout.payload_bytes,
        NO_TOKEN if spec.bos_token is None else spec.bos_token,
        b"",
    )
    section = pack_tokenizer(tables)
    buf[HEADER_BYTES : HEADER_BYTES + len(section)] = section
    for i, entry in enumerate(layout.entries):
        shape4 = list(entry.shape) + [0] * (MAX_NDIM - len(entry.shape))
        struct.pack_into(
            ENTRY_STRUCT.format,
            buf,
            layout.tensor_table_offset + i * TENSOR_ENTRY_BYTES,
            entry.name.encode(),
            entry.dtype,
            len(entry.shape),
            *shape4,
            entry.offset,
            entry.nbytes,
            entry.scale_offset,
            0,
            0,
            0,
        )
        values, scales = _tensor_arrays(entry, tensors[entry.name])
        buf[entry.offset : entry.offset + entry.nbytes] = values.tobytes()
        if scales is not None:
            buf[entry.scale_offset : entry.scale_offset + scales.nbytes] = scales.tobytes()
    struct.pack_into("<I", buf, layout.file_bytes - 4, zlib.crc32(memoryview(buf)[:-4]))
    return bytes(buf)


def write_artifact(
    path: str | os.PathLike,
    spec: ModelSpec,
    tables: TokenizerTables,
    tensors: Mapping[str, TensorData],
) -> Path:
    """Write the artifact atomically (gptstack.tokenizer.write_atomic)."""
    data = artifact_bytes(spec, tables, tensors)
    return write_atomic(path, data)


class Artifact:
    """A validated artifact: header, spec, tokenizer tables and zero-copy tensor views.

    `tensor(name)`: int8 (R, K) or float32 array, a read-only view of the file bytes when read
    from bytes or a path; `scales(name)`: float32 (R,) of an int8 tensor; `dequantized(name)`: a
    float32 copy (q * scale per row, or the f32 tensor itself).
    """

    def __init__(
        self,
        data: bytes | bytearray | memoryview,
        name: str,
        header: Header,
        spec: ModelSpec,
        tables: TokenizerTables,
        entries: list[TensorEntry],
    ) -> None:
        self.data, self.name, self.header = data, name, header
        self.spec, self.tables, self.entries = spec, tables, entries
        self._values: dict[str, np.ndarray] = {}
        self._scales: dict[str, np.ndarray] = {}
        for e in entries:
            if e.dtype == DTYPE_I8:
                self._values[e.name] = np.frombuffer(
                    data, np.int8, math.prod(e.shape), e.offset
                ).reshape(e.shape)
                self._scales[e.name] = np.frombuffer(data, "<f4", e.shape[0], e.scale_offset)
            else:
                self._values[e.name] = np.frombuffer(
                    data, "<f4", math.prod(e.shape), e.offset
                ).reshape(e.shape)

    @property
    def names(self) -> list[str]:
        """Tensor names in table order."""
        return [e.name for e in self.entries]

    def _lookup(self, name: str, table: dict[str, np.ndarray], what: str) -> np.ndarray:
        if name not in table:
            raise QuantError(f"artifact {self.name} has no {what} named {name!r}")
        return table[name]

    def tensor(self, name: str) -> np.ndarray:
        return self._lookup(name, self._values, "tensor")

    def scales(self, name: str) -> np.ndarray:
        return self._lookup(name, self._scales, "int8 tensor")

    def dequantized(self, name: str) -> np.ndarray:
        values = self.tensor(name)
        if name in self._scales:
            return values.astype(np.float32) * self._scales[name][:, None]
        return values.astype(np.float32)

    def __repr__(self) -> str:
        return f"Artifact({self.name!r}, {self.spec}, {self.header.file_bytes} bytes)"


def read_artifact(source: str | os.PathLike | bytes | bytearray | memoryview) -> Artifact:
    """Read and validate a `.gsm` file or its bytes, checking in FORMAT.md section 6's order.

    Raises the ArtifactError subclass of the first failed check; its message names the field,
    the value found and the fix.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        data, where = source, "<bytes>"
    else:
        path = Path(source)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise ArtifactError(
                f"cannot read artifact {path}: {e.strerror}; check the path"
            ) from None
        where = str(path)
    return _validate(data, where)


def _validate(data: bytes | bytearray | memoryview, where: str) -> Artifact:
    view = memoryview(data).cast("B")
    fix = "re-run `gptstack export`"
    given = len(view)
    # 1: size of the header
    if given < HEADER_BYTES:
        raise TruncatedArtifactError(
            f"artifact {where} is {given} bytes, shorter than the {HEADER_BYTES}-byte header: "
            f"the file is cut short, copy or {fix} again"
        )
    fields = HEADER_STRUCT.unpack_from(view)
    magic, reserved = fields[0], fields[-1]
    h = Header(*fields[1:-1])
    # 2-4: magic, version, header fields
    if magic != MAGIC:
        raise BadMagicError(
            f"artifact {where} starts with {magic!r}, not {MAGIC!r}: it is not a gptstack model"
        )
    if h.version != VERSION:
        raise UnsupportedVersionError(
            f"artifact {where} is format version {h.version}; this gptstack reads version "
            f"{VERSION}: {fix} with this version"
        )
    if h.header_bytes != HEADER_BYTES:
        raise BadHeaderError(
            f"artifact {where}: header_bytes is {h.header_bytes}, expected {HEADER_BYTES}; {fix}"
        )
    if any(reserved):
        raise BadHeaderError(f"artifact {where}: reserved header bytes 76..127 are not zero; {fix}")
    if h.flags & ~FLAG_BIAS:
        raise BadHeaderError(
            f"artifact {where}: flags is 0x{h.flags:X}, only bit 0 (bias) is known; {fix}"
        )
    # 5-6: file size
    if h.file_bytes > given:
        raise TruncatedArtifactError(
            f"artifact {where} is {given} bytes but its header says file_bytes {h.file_bytes}: "
            f"the file is cut short, copy or {fix} again"
        )
    if h.file_bytes < given:
        raise BadHeaderError(
            f"artifact {where} is {given} bytes but its header says file_bytes {h.file_bytes}: "
            f"{given - h.file_bytes} trailing bytes; {fix}"
        )
    # 7: CRC
    stored = struct.unpack_from("<I", view, h.file_bytes - 4)[0]
    actual = zlib.crc32(view[: h.file_bytes - 4])
    if stored != actual:
        raise BadCrcError(
            f"artifact {where}: CRC-32 is 0x{actual:08X}, the file says "
            f"0x{stored:08X}: the file is damaged, copy or {fix} again"
        )
    # 8: config
    bos = None if h.bos_token == NO_TOKEN else h.bos_token
    problem = config_problem(
        h.vocab_size, h.block_size, h.n_layer, h.n_head, h.n_embd, h.layernorm_eps, bos
    )
    if problem:
        raise BadConfigError(f"artifact {where}: {problem}; {fix}")
    spec = ModelSpec(
        h.vocab_size,
        h.block_size,
        h.n_layer,
        h.n_head,
        h.n_embd,
        bool(h.flags & FLAG_BIAS),
        h.layernorm_eps,
        bos,
    )
    # 9: section offsets and sizes
    expected = {
        "tokenizer_offset": HEADER_BYTES,
        "tensor_table_offset": align(h.tokenizer_offset + h.tokenizer_bytes),
        "payload_offset": align(h.tensor_table_offset + TENSOR_ENTRY_BYTES * h.n_tensors),
        "file_bytes": h.payload_offset + h.payload_bytes + 4,
    }
    for name, value in expected.items():
        if getattr(h, name) != value:
            raise BadOffsetError(
                f"artifact {where}: {name} is {getattr(h, name)}, the layout "
                f"of section 2 puts it at {value}; {fix}"
            )
    if h.payload_bytes % 16:
        raise BadOffsetError(
            f"artifact {where}: payload_bytes {h.payload_bytes} is not a multiple of 16; {fix}"
        )
    # 10: tokenizer
    tables = parse_tokenizer(
        view[h.tokenizer_offset : h.tokenizer_offset + h.tokenizer_bytes], h.vocab_size, where
    )
    if bos is not None and bos >= tables.n_tokens:
        raise BadTokenizerError(
            f"artifact {where}: bos_token {bos} is not one of the "
            f"{tables.n_tokens} tokenizer tokens; {fix}"
        )
    # 11-12: tensor table, then tensor offsets
    entries = _read_table(view, h, spec, where)
    payload_end = h.payload_offset + h.payload_bytes
    for e in entries:
        spans = [("offset", e.offset, e.nbytes)]
        if e.dtype == DTYPE_I8:
            spans.append(("scale_offset", e.scale_offset, 4 * e.shape[0]))
        elif e.scale_offset != 0:
            raise BadOffsetError(
                f"artifact {where}: f32 tensor {e.name} has scale_offset "
                f"{e.scale_offset}, expected 0; {fix}"
            )
        for field_name, at, size in spans:
            if at % 16 or at < h.payload_offset or at + size > payload_end:
                raise BadOffsetError(
                    f"artifact {where}: tensor {e.name} {field_name} {at} (+{size} bytes) is not "
                    f"16-byte aligned inside the payload [{h.payload_offset}, {payload_end}); "
                    f"{fix}"
                )
    # 13: arena
    need = arena_bytes(spec)
    if h.arena_bytes != need:
        raise BadHeaderError(
            f"artifact {where}: arena_bytes is {h.arena_bytes}, section 11 gives "
            f"{need} for this config; {fix}"
        )
    return Artifact(data, where, h, spec, tables, entries)


def _read_table(view: memoryview, h: Header, spec: ModelSpec, where: str) -> list[TensorEntry]:
    """FORMAT.md section 6 step 11: names, order, dtypes, shapes and nbytes of the table."""

    def bad(msg: str) -> BadTensorError:
        return BadTensorError(f"artifact {where}: tensor table: {msg}; re-run `gptstack export`")

    if h.n_tensors != tensor_count(spec):
        raise bad(f"n_tensors is {h.n_tensors}, this config has {tensor_count(spec)} tensors")
    required = required_tensors(spec)
    entries = []
    for i, (name, dtype, shape) in enumerate(required):
        raw_name, dt, ndim, *rest = ENTRY_STRUCT.unpack_from(
            view, h.tensor_table_offset + i * TENSOR_ENTRY_BYTES
        )
        shape4, (offset, nbytes, scale_offset), reserved = rest[:4], rest[4:7], rest[7:]
        end = raw_name.find(b"\0")
        if end < 0 or any(raw_name[end:]):
            raise bad(f"entry {i}: name is not NUL-padded")
        found = raw_name[:end].decode("utf-8", "replace")
        if found != name:
            raise bad(f"entry {i} is {found!r}, expected {name!r}")
        if dt != dtype:
            raise bad(f"{name} has dtype {dt}, expected {dtype}")
        if ndim != len(shape) or tuple(shape4[:ndim]) != shape or any(shape4[ndim:]):
            raise bad(
                f"{name} has shape {tuple(shape4[: min(ndim, 4)])} (ndim {ndim}), expected {shape}"
            )
        if nbytes != math.prod(shape) * dtype_bytes[dtype]:
            raise bad(
                f"{name} has nbytes {nbytes}, expected {math.prod(shape) * dtype_bytes[dtype]}"
            )
        if any(reserved):
            raise bad(f"{name} has nonzero reserved words")
        entries.append(TensorEntry(name, dtype, shape, offset, nbytes, scale_offset))
    return entries
