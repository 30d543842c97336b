"""Every validation step of FORMAT.md section 6 rejects its corruption with its error class.

Steps 1-7 are hit directly; for steps 8-13 the CRC is recomputed after the edit, so the reader
gets past step 7 and the intended check is the first to fail.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gptstack.quant import (
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
    corrupted_artifacts,
    read_artifact,
)
from gptstack.quant.corrupt import HEADER_FIELDS, fix_crc

F = HEADER_FIELDS  # byte offset of each header field, FORMAT.md section 2


def u32(buf: bytearray, at: int) -> int:
    return struct.unpack_from("<I", buf, at)[0]


def put(buf: bytearray, at: int, value: int, fmt: str = "<I") -> None:
    struct.pack_into(fmt, buf, at, value)


def reject(data: bytes, cls: type[ArtifactError], match: str | None = None) -> None:
    with pytest.raises(cls, match=match) as info:
        read_artifact(data)
    assert type(info.value) is cls  # the class of that step, not a sibling or the base


@pytest.fixture
def buf(tiny_bytes) -> bytearray:
    return bytearray(tiny_bytes)


def entry_at(buf: bytearray, index: int) -> int:
    return u32(buf, F["tensor_table_offset"]) + 96 * index


# --- steps 1-7: no CRC fix needed ------------------------------------------------------------


@pytest.mark.parametrize("keep", [0, 4, 127])
def test_shorter_than_the_header(tiny_bytes, keep):
    reject(tiny_bytes[:keep], TruncatedArtifactError, "shorter than the 128-byte header")


def test_cut_short_anywhere_after_the_header(tiny_bytes, rng):
    for keep in [
        128,
        200,
        len(tiny_bytes) // 2,
        len(tiny_bytes) - 1,
        *rng.integers(129, len(tiny_bytes), 5).tolist(),
    ]:
        reject(tiny_bytes[:keep], TruncatedArtifactError, "cut short")


def test_bad_magic(buf):
    buf[0:4] = b"GGUF"
    reject(bytes(buf), BadMagicError, "not a gptstack model")


def test_other_version(buf):
    put(buf, F["version"], 2)
    reject(bytes(buf), UnsupportedVersionError, "format version 2; this gptstack reads version 1")


@pytest.mark.parametrize("edit", ["header_bytes", "reserved", "flags"])
def test_bad_header_fields(buf, rng, edit):
    if edit == "header_bytes":
        put(buf, F["header_bytes"], 64)
    elif edit == "reserved":
        buf[F["reserved"] + int(rng.integers(0, 52))] = 1
    else:
        put(buf, F["flags"], u32(buf, F["flags"]) | 2)
    reject(bytes(buf), BadHeaderError, edit)


def test_trailing_bytes(tiny_bytes):
    reject(tiny_bytes + b"\0" * 16, BadHeaderError, "16 trailing bytes")


def test_flipped_bytes_fail_the_crc(tiny_bytes, rng):
    n = len(tiny_bytes)
    for at in [
        F["tokenizer_offset"] + 200,
        n // 2,
        n - 5,
        n - 1,
        *rng.integers(128, n, 10).tolist(),
    ]:
        bad = bytearray(tiny_bytes)
        bad[at] ^= 1 << int(rng.integers(0, 8))
        reject(bytes(bad), BadCrcError, "CRC-32")


# --- steps 8-13: CRC recomputed --------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value, match",
    [
        (F["vocab_size"], 0, "vocab_size"),
        (F["block_size"], 15, "block_size"),
        (F["n_head"], 3, "n_head"),
        (F["n_embd"], 30, "n_embd"),
        (F["bos_token"], 320, "bos_token"),
    ],
)
def test_bad_config(buf, field, value, match):
    put(buf, field, value)
    reject(fix_crc(buf), BadConfigError, match)


@pytest.mark.parametrize("eps", [0.0, -1e-5, float("inf"), float("nan")])
def test_bad_layernorm_eps(buf, eps):
    put(buf, F["layernorm_eps"], eps, "<f")
    reject(fix_crc(buf), BadConfigError, "layernorm_eps")


def test_bad_section_offsets(tiny_bytes):
    cases = [
        (F["tokenizer_offset"], 144, "tokenizer_offset"),
        (F["tensor_table_offset"], +16, "tensor_table_offset"),
        (F["tokenizer_bytes"], +64, "tensor_table_offset"),
        (F["payload_offset"], +8, "payload_offset"),
        (F["n_tensors"], +1, "payload_offset"),
        (F["payload_bytes"], -16, "file_bytes"),
    ]
    for field, change, match in cases:
        buf = bytearray(tiny_bytes)
        put(buf, field, change if field == F["tokenizer_offset"] else u32(buf, field) + change)
        reject(fix_crc(buf), BadOffsetError, match)


def test_payload_bytes_must_be_aligned(tiny_bytes):
    # drop 4 payload bytes and fix both sizes: every formula holds but payload_bytes % 16 != 0
    buf = bytearray(tiny_bytes[:-8] + tiny_bytes[-4:])
    put(buf, F["payload_bytes"], u32(buf, F["payload_bytes"]) - 4)
    put(buf, F["file_bytes"], u32(buf, F["file_bytes"]) - 4)
    reject(fix_crc(buf), BadOffsetError, "multiple of 16")


def _tok(buf: bytearray) -> int:
    return u32(buf, F["tokenizer_offset"])


def test_bad_tokenizer_sections(tiny_bytes, tiny_artifact):
    tables = tiny_artifact.tables
    Vt, n_special = tables.n_tokens, len(tables.special_ids)
    blob = sum(map(len, tables.token_bytes))
    head = 32
    offsets = head
    blob_at = offsets + 4 * (Vt + 1)
    b2t = blob_at + blob + (-(blob_at + blob)) % 4
    sorted_at = b2t + 1024
    pairs_at = sorted_at + 4 * (Vt - n_special)
    special_at = pairs_at + 12 * len(tables.pairs)

    def edit(at: int, value: int) -> bytes:
        buf = bytearray(tiny_bytes)
        put(buf, _tok(buf) + at, value)
        return fix_crc(buf)

    def swap(at_a: int, at_b: int, size: int = 4) -> bytes:
        buf = bytearray(tiny_bytes)
        a, b = _tok(buf) + at_a, _tok(buf) + at_b
        buf[a : a + size], buf[b : b + size] = buf[b : b + size], buf[a : a + size]
        return fix_crc(buf)

    reject(edit(0, 7), BadTokenizerError, "kind is 7")
    reject(edit(4, 0), BadTokenizerError, "pattern")  # BPE with PATTERN_NONE
    reject(edit(24, 1), BadTokenizerError, "reserved")
    reject(edit(8, 321), BadTokenizerError, "n_tokens is 321")  # more than V
    reject(edit(8, Vt - 1), BadTokenizerError, "tokenizer_bytes")  # counts no longer add up
    reject(edit(offsets, 1), BadTokenizerError, "token_offsets")
    reject(
        edit(offsets + 8, u32(bytearray(tiny_bytes), _tok(bytearray(tiny_bytes)) + offsets + 4)),
        BadTokenizerError,
        "token_offsets",
    )  # an empty token
    reject(
        edit(b2t + 4 * ord("a"), tables.byte_to_token[ord("b")]), BadTokenizerError, "byte_to_token"
    )
    reject(swap(sorted_at, sorted_at + 4), BadTokenizerError, "sorted_ids")
    reject(swap(pairs_at, pairs_at + 12, 12), BadTokenizerError, "pair table")
    reject(edit(pairs_at + 8, tables.pairs[0][2] ^ 1), BadTokenizerError, "pair table")
    reject(edit(special_at, 5), BadTokenizerError)
    # a blob byte changed so that two ordinary tokens become equal
    buf = bytearray(tiny_bytes)
    first, second = tables.sorted_ids[0], tables.sorted_ids[1]
    assert len(tables.token_bytes[first]) == len(tables.token_bytes[second]) == 1
    at = _tok(buf) + blob_at + sum(map(len, tables.token_bytes[:second]))
    buf[at] = tables.token_bytes[first][0]
    reject(fix_crc(buf), BadTokenizerError, "same bytes")


def test_bos_beyond_the_tokenizer_is_a_tokenizer_error(buf, tiny_artifact):
    put(buf, F["bos_token"], tiny_artifact.tables.n_tokens)  # < V (320), a padding row (>= Vt 300)
    reject(fix_crc(buf), BadTokenizerError, "bos_token 300")


def test_bad_tensor_table(tiny_bytes):
    def edited(index: int, at: int, value: int | bytes) -> bytes:
        buf = bytearray(tiny_bytes)
        where = entry_at(buf, index) + at
        if isinstance(value, bytes):
            buf[where : where + len(value)] = value
        else:
            put(buf, where, value)
        return fix_crc(buf)

    reject(edited(1, 0, b"wpe.weighs"), BadTensorError, "expected 'wpe.weight'")
    reject(edited(0, 20, ord("x")), BadTensorError, "NUL-padded")  # a byte after the NUL
    reject(edited(0, 0, b"x" * 48), BadTensorError, "NUL-padded")  # no NUL at all
    reject(edited(2, 48, 1), BadTensorError, "dtype")  # ln_1.weight as i8
    reject(edited(4, 52, 1), BadTensorError, "shape")  # c_attn.weight ndim 1
    reject(edited(4, 56, 95), BadTensorError, "shape")  # c_attn rows
    reject(edited(2, 60, 1), BadTensorError, "shape")  # unused shape entry
    reject(edited(4, 76, 96 * 32 + 1), BadTensorError, "nbytes")
    reject(edited(5, 84, 1), BadTensorError, "reserved")
    # n_tensors one larger with payload_offset / payload_bytes moved so step 9 still passes
    buf = bytearray(tiny_bytes)
    put(buf, F["n_tensors"], u32(buf, F["n_tensors"]) + 1)
    put(buf, F["payload_offset"], u32(buf, F["payload_offset"]) + 96)
    put(buf, F["payload_bytes"], u32(buf, F["payload_bytes"]) - 96)
    reject(fix_crc(buf), BadTensorError, "n_tensors")


def test_bad_tensor_offsets(tiny_bytes, tiny_artifact):
    end = tiny_artifact.header.payload_offset + tiny_artifact.header.payload_bytes
    cases = [
        (0, 72, tiny_artifact.entries[0].offset + 1, "offset"),  # misaligned
        (0, 72, tiny_artifact.header.payload_offset - 16, "offset"),  # before the payload
        (1, 72, end - 16, "offset"),  # runs past the end
        (1, 80, end, "scale_offset"),  # scales outside
        (1, 80, tiny_artifact.entries[1].scale_offset + 4, "scale_offset"),
        (2, 80, tiny_artifact.entries[3].offset, "scale_offset 1"),  # f32 with scales
    ]
    for index, at, value, match in cases:
        buf = bytearray(tiny_bytes)
        put(buf, entry_at(buf, index) + at, value)
        reject(fix_crc(buf), BadOffsetError, match)


def test_wrong_arena_bytes(buf):
    put(buf, F["arena_bytes"], u32(buf, F["arena_bytes"]) + 16)
    reject(fix_crc(buf), BadHeaderError, "arena_bytes")


def test_checks_run_in_section_6_order(tiny_bytes):
    # magic and CRC both broken: the magic (step 2) is reported, not the CRC (step 7)
    buf = bytearray(tiny_bytes)
    buf[0] = ord("X")
    buf[500] ^= 0xFF
    reject(bytes(buf), BadMagicError)
    # config and tokenizer both broken, CRC fixed: step 8 first
    buf = bytearray(tiny_bytes)
    put(buf, F["block_size"], 15)
    put(buf, _tok(buf), 9)
    reject(fix_crc(buf), BadConfigError)


def test_unreadable_path(tmp_path):
    with pytest.raises(ArtifactError, match="cannot read artifact"):
        read_artifact(tmp_path / "missing.gsm")


def test_shipped_corruptions_cover_every_step(tiny_bytes):
    cases = corrupted_artifacts(tiny_bytes)
    assert {c.step for c in cases} == set(range(1, 14))
    assert len({c.data for c in cases}) == len(cases)  # no two cases alike
    for case in cases:
        with pytest.raises(ArtifactError) as info:
            read_artifact(case.data)
        assert type(info.value) is case.error, case.name
        assert info.value.status == case.status and case.status.startswith("GS_ERR_")


@settings(max_examples=300, deadline=None)
@given(
    edits=st.lists(st.tuples(st.integers(0, 2**31), st.integers(0, 255)), min_size=1, max_size=4),
    cut=st.integers(0, 3),
)
def test_random_edits_never_crash_the_reader(tiny_bytes, edits, cut):
    # any edit, CRC recomputed: the reader accepts the file or raises an ArtifactError, never
    # IndexError, struct.error or a numpy error
    buf = bytearray(tiny_bytes)
    for at, value in edits:
        at %= min(len(buf) - 4, [len(buf), 128, 1200, 3000][cut])
        buf[at] = value
    try:
        read_artifact(fix_crc(buf))
    except ArtifactError:
        pass
